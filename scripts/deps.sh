#!/bin/sh
# Install the build and test dependencies of Phoenix from Debian's packages.
# Idempotent: packages already present are left alone; no other downloads.
set -eu
. "$(dirname "$0")/apt.sh"

PKGS="build-essential pkg-config libfuse3-dev fuse3 liburing-dev libnuma-dev \
libcriterion-dev python3 python3-pip python3-venv rsync attr util-linux \
fio clang-format"

# shellcheck disable=SC2086
apt_need phoenix $PKGS
