#!/bin/sh
# Run the libphoenix suites against real files: an ext4 (O_DIRECT)
# directory and a tmpfs one.  A small staging ring makes "several times
# the staging size" cheap.  Usage: test-lib.sh TEST-BINARY [criterion args]
set -eu
bin=$1
shift

scratch=${PHX_TEST_EXT4:-$(dirname "$bin")/../scratch}
mkdir -p "$scratch"
tmpfs=${PHX_TEST_TMPFS:-/dev/shm/phx-test.$$}
mkdir -p "$tmpfs"
trap 'rm -rf "$tmpfs" "$scratch"' EXIT

export PHX_TEST_EXT4="$scratch" PHX_TEST_TMPFS="$tmpfs"
export PHX_STAGING_SIZE=${PHX_STAGING_SIZE:-1M}
export PHX_CHUNK_SIZE=${PHX_CHUNK_SIZE:-256K}
export PHX_QUEUE_DEPTH=${PHX_QUEUE_DEPTH:-4}
echo "libphoenix suites: device ${PHX_DEVICE:-default}, ext4 dir $scratch, tmpfs dir $tmpfs"
"$bin" --jobs 2 "$@"
