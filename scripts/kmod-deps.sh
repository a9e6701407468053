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

missing=""
for p in $HOST_PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "kmod: missing packages:$missing; run as root or install them" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends $missing
fi

PKGS="linux-headers-$KVER-$FLAVOUR linux-headers-$KVER-common \
linux-kbuild-$KVER linux-image-$KVER-$FLAVOUR-unsigned"

have_debs() {
	for p in $PKGS; do
		ls "$DEBS/${p}_"*.deb >/dev/null 2>&1 || return 1
	done
}

if ! have_debs; then
	mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$DEBS"
	echo "deb http://deb.debian.org/debian bookworm-backports main" \
		>"$APT/sources.list"
	apt=$(cd "$APT" && pwd)
	aptopts="-o Dir::Etc::SourceList=$apt/sources.list \
-o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$apt/lists \
-o Dir::Cache::Archives=$apt/archives -o APT::Sandbox::User=root"
	# shellcheck disable=SC2086
	apt-get -q $aptopts update
	# shellcheck disable=SC2086
	(cd "$DEBS" && apt-get -q $aptopts download $PKGS)
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
