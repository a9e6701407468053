#!/bin/sh
# Fetch and configure the source of the fio that Debian ships, for
# building the Phoenix fio engine (lib/fio) against its headers.
#
#   fio-src.sh BUILD_DIR
#
# Debian packages no fio headers, and an external engine must be built
# against the headers of the fio release that loads it (the engine ABI is
# FIO_IOOPS_VERSION and fio's structures).  This fetches the *source*
# package of the installed fio version from bookworm through a private
# sources list (one deb-src line) and lists directory under
# BUILD_DIR/fio, so the machine's apt configuration is never changed,
# unpacks the upstream tarball and runs its configure (which writes the
# config-host.h the headers include).  Result: BUILD_DIR/fio/src/tree.
# Cached: a second run does nothing.
set -eu
. "$(dirname "$0")/apt.sh"

BUILD=${1:-build}
TREE=$BUILD/fio/src/tree

[ -f "$TREE/.configured" ] && exit 0

ver=$(dpkg-query -W -f='${Version}' fio 2>/dev/null || true)
if [ -z "$ver" ]; then
	echo "fio-src: fio is not installed; run scripts/deps.sh (as root)" >&2
	exit 1
fi
upstream=${ver%-*}
upstream=${upstream#*:}
debsrc_tree fio-src bookworm "fio=$ver" "$BUILD/fio" \
	"fio_$upstream.orig.tar.*" "fio_$upstream"
# Debian configures with --disable-native; the structures an engine sees
# do not depend on the optional libraries configure finds.
(cd "$TREE" && ./configure --disable-native >configure.out 2>&1) || {
	echo "fio-src: configuring fio in $TREE failed; see configure.out there" >&2
	exit 1
}
touch "$TREE/.configured"
echo "fio-src: fio $upstream headers in $TREE"
