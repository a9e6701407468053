#!/bin/sh
# Build libfuse >= 3.17 (FUSE passthrough) into the build tree.
#
#   libfuse.sh BUILD_DIR
#
# Debian 12 ships libfuse 3.14, which has no passthrough API.  This fetches
# the *source* package fuse3 from Debian trixie through a private sources
# list (one deb-src line) and lists directory under BUILD_DIR/libfuse, so
# the machine's apt configuration is never changed and no trixie binary is
# installed, then builds a static libfuse3.a with bookworm's meson and
# ninja.  Result: BUILD_DIR/libfuse/prefix/{include,lib}.  Cached: a second
# run does nothing.
set -eu

BUILD=${1:-build}
DIR=$BUILD/libfuse
APT=$DIR/apt
SRC=$DIR/src
PREFIX=$DIR/prefix

[ -f "$PREFIX/.built" ] && exit 0

missing=""
for p in meson ninja-build dpkg-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "libfuse: missing packages:$missing; run as root or install them" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends $missing
fi

mkdir -p "$APT/lists/partial" "$SRC"
apt=$(cd "$APT" && pwd)
if ! ls "$SRC"/fuse3_3.1[7-9]*.dsc >/dev/null 2>&1; then
	echo "deb-src http://deb.debian.org/debian trixie main" \
		>"$APT/sources.list"
	aptopts="-o Dir::Etc::SourceList=$apt/sources.list \
-o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$apt/lists \
-o APT::Sandbox::User=root"
	# shellcheck disable=SC2086
	apt-get -q $aptopts update
	# shellcheck disable=SC2086
	(cd "$SRC" && apt-get -q $aptopts source --download-only fuse3)
fi

# Unpack the upstream tarball only: Debian's patches concern packaging.
rm -rf "$SRC/tree"
mkdir -p "$SRC/tree"
tar -xf "$(ls "$SRC"/fuse3_*.orig.tar.* | grep -v '\.asc$' | head -n 1)" \
	-C "$SRC/tree" --strip-components=1

prefix=$(mkdir -p "$PREFIX" && cd "$PREFIX" && pwd)
(cd "$SRC/tree" &&
	meson setup build --prefix="$prefix" --libdir=lib \
		-Ddefault_library=static -Dexamples=false -Dutils=false \
		-Dtests=false -Ddisable-mtab=true >meson.log 2>&1 &&
	ninja -C build >ninja.log 2>&1 && ninja -C build install >/dev/null) || {
	echo "libfuse: building $SRC/tree failed; see meson.log and ninja.log there" >&2
	exit 1
}
touch "$PREFIX/.built"
echo "libfuse: $(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/fuse3.pc") in $PREFIX"
