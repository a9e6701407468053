#!/bin/sh
# Build libfuse >= 3.18 (FUSE passthrough, FUSE over io_uring) into the
# build tree.
#
#   libfuse.sh BUILD_DIR
#
# Debian 12 ships libfuse 3.14, which has neither passthrough nor io_uring.
# This fetches the *source* package fuse3 from Debian forky through a
# private sources list (one deb-src line) and lists directory under
# BUILD_DIR/libfuse, so the machine's apt configuration is never changed
# and no forky binary is installed, then builds a static libfuse3.a with
# bookworm's meson and ninja, liburing and libnuma (its io_uring transport
# needs both).  Custom I/O is switched on: phxfs reads /dev/fuse through
# it (phxfs/daemon/loop.c), on descriptors it clones from the kernel's.  Result:
# BUILD_DIR/libfuse/prefix/{include,lib}.  Cached: a second run does
# nothing.
set -eu
. "$(dirname "$0")/apt.sh"

BUILD=${1:-build}
PREFIX=$BUILD/libfuse/prefix
TREE=$BUILD/libfuse/src/tree

STAMP=$PREFIX/.built-3.18
[ -f "$STAMP" ] && exit 0

apt_need libfuse meson ninja-build dpkg-dev liburing-dev libnuma-dev

debsrc_tree libfuse forky fuse3 "$BUILD/libfuse" "fuse3_3.1[89]*.dsc" fuse3_

rm -rf "$PREFIX"
prefix=$(mkdir -p "$PREFIX" && cd "$PREFIX" && pwd)
(cd "$TREE" &&
	meson setup build --prefix="$prefix" --libdir=lib \
		-Ddefault_library=static -Dexamples=false -Dutils=false \
		-Dtests=false -Ddisable-mtab=true -Denable-io-uring=true \
		-Denable-custom-io=true >meson.log 2>&1 &&
	ninja -C build >ninja.log 2>&1 && ninja -C build install >/dev/null) || {
	echo "libfuse: building $TREE failed; see meson.log and ninja.log there" >&2
	exit 1
}
grep -q "define HAVE_URING" "$TREE/build/fuse_config.h" 2>/dev/null ||
	echo "libfuse: built without FUSE over io_uring (see meson.log)" >&2
touch "$STAMP"
echo "libfuse: $(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/fuse3.pc") in $PREFIX"
