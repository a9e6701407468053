# Sourced by the scripts that build from Debian source packages.
#
# debsrc_fetch SUITE SPEC APTDIR SRCDIR: download the source package SPEC
# (a name, or name=version) of SUITE into SRCDIR through a private sources
# list (one deb-src line) and lists directory under APTDIR, so the
# machine's own apt configuration is never read or changed.
#
# debsrc_unpack PREFIX TREE: unpack the upstream tarball PREFIX*.orig.tar.*
# (not Debian's patches, which concern packaging) into TREE.

debsrc_fetch() {
	mkdir -p "$3/lists/partial" "$4"
	_apt=$(cd "$3" && pwd)
	echo "deb-src http://deb.debian.org/debian $1 main" >"$_apt/sources.list"
	_aptopts="-o Dir::Etc::SourceList=$_apt/sources.list \
-o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$_apt/lists \
-o APT::Sandbox::User=root"
	# shellcheck disable=SC2086
	apt-get -q $_aptopts update &&
		(cd "$4" && apt-get -q $_aptopts source --download-only "$2")
}

debsrc_unpack() {
	rm -rf "$2"
	mkdir -p "$2"
	tar -xf "$(ls "$1"*.orig.tar.* | grep -v '\.asc$' | head -n 1)" \
		-C "$2" --strip-components=1
}
