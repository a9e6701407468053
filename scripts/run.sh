#!/bin/sh
# make run: mount phxfs at /mnt/phx (CUDA devices where a GPU is usable,
# otherwise the simulated device) and say how to unmount it.
#   PHX_MOUNT=/path   mount elsewhere
#   PHXFS_OPTS=...    phxfs options, e.g. reserve=2G or size=8G
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MP=${PHX_MOUNT:-/mnt/phx}

if [ -n "${PHXFS_OPTS:-}" ]; then
	"$BUILD/phx" mount -o "$PHXFS_OPTS" "$MP"
else
	"$BUILD/phx" mount "$MP"
fi
"$BUILD/phx" status "$MP"
echo
echo "phxfs is mounted at $MP: one directory per device, e.g."
echo "  cp model.bin $MP/$(ls "$MP" | head -n 1)/     or  $BUILD/phx cp model.bin $MP/$(ls "$MP" | head -n 1)/"
echo "Unmount with: $BUILD/phx umount $MP   (files there are lost then)"
