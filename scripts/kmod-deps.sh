#!/bin/sh
# Fetch what building phx.ko and running its QEMU suite need.
#
#   kmod-deps.sh BUILD_DIR
#
# Host tools (QEMU, busybox, pahole, mkfs.ext4) come from the machine's own
# Debian sources.  The guest kernel, its headers and kbuild come from
# bookworm-backports through a private sources list and lists directory
# under BUILD_DIR, so the machine's apt configuration is never changed.
# The kernel packages are unpacked into BUILD_DIR/kmod/sysroot rather than
# installed: the headers package depends on the kernel image, and
# installing an image on the build machine is not wanted.  Everything is
# cached; a second run does nothing.
set -eu
. "$(dirname "$0")/apt.sh"

BUILD=${1:-build}
KVER=6.12.95+deb12
FLAVOUR=amd64
DIR=$BUILD/kmod
APT=$DIR/apt
DEBS=$DIR/debs
SYSROOT=$DIR/sysroot
IMAGE=$DIR/image

HOST_PKGS="qemu-system-x86 busybox-static dwarves e2fsprogs cpio xz-utils \
kmod gcc-12 make libelf1 liburing-dev"

# shellcheck disable=SC2086
apt_need kmod $HOST_PKGS

PKGS="linux-headers-$KVER-$FLAVOUR linux-headers-$KVER-common \
linux-kbuild-$KVER linux-image-$KVER-$FLAVOUR-unsigned"

have_debs() {
	for p in $PKGS; do
		ls "$DEBS/${p}_"*.deb >/dev/null 2>&1 || return 1
	done
}

if ! have_debs; then
	mkdir -p "$DEBS"
	apt_private "$APT" \
		"deb http://deb.debian.org/debian bookworm-backports main"
	# shellcheck disable=SC2086
	apt-get -q $apt_opts update
	# shellcheck disable=SC2086
	(cd "$DEBS" && apt-get -q $apt_opts download $PKGS)
fi

KDIR=$SYSROOT/usr/src/linux-headers-$KVER-$FLAVOUR
if [ ! -f "$SYSROOT/.unpacked" ]; then
	rm -rf "$SYSROOT"
	mkdir -p "$SYSROOT"
	for p in linux-headers-$KVER-$FLAVOUR linux-headers-$KVER-common \
		linux-kbuild-$KVER; do
		dpkg-deb -x "$DEBS/${p}_"*.deb "$SYSROOT"
	done
	touch "$SYSROOT/.unpacked"
fi
# The headers' top Makefile names the common tree by its /usr/src path.
echo "include $(cd "$SYSROOT" && pwd)/usr/src/linux-headers-$KVER-common/Makefile" \
	>"$KDIR/Makefile"

if [ ! -f "$IMAGE/.unpacked" ]; then
	rm -rf "$IMAGE"
	mkdir -p "$IMAGE"
	dpkg-deb -x "$DEBS/linux-image-$KVER-$FLAVOUR-unsigned_"*.deb "$IMAGE"
	depmod -b "$IMAGE" "$KVER-$FLAVOUR"
	touch "$IMAGE/.unpacked"
fi
