#!/bin/sh
# Install the build and test dependencies of Phoenix from Debian's packages.
# Idempotent: packages already present are left alone; no other downloads.
set -eu

PKGS="build-essential pkg-config libfuse3-dev fuse3 liburing-dev libnuma-dev \
libcriterion-dev python3 python3-pip python3-venv rsync attr util-linux \
fio"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done

if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "phoenix: missing packages:$missing; run as root or install them" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends $missing
fi
