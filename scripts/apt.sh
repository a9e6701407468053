# shellcheck shell=sh
# Sourced by the scripts that install Debian packages or fetch them from
# other suites; the machine's own apt configuration is never changed.
#
# apt_need WHO PKG...: install those of PKG that are missing, from the
# machine's own sources (as root; otherwise say which, as WHO, and exit 1).
#
# apt_private DIR LINE: a private apt under DIR, with the one sources line
# LINE and its own lists and archives, so that the machine's own apt
# configuration is never read or changed; sets apt_opts, the options that
# make apt-get use it.
#
# debsrc_fetch SUITE SPEC DIR: download the source package SPEC (a name, or
# name=version) of SUITE into DIR/src through a private apt under DIR/apt.
#
# debsrc_unpack PREFIX TREE: unpack the upstream tarball PREFIX*.orig.tar.*
# (not Debian's patches, which concern packaging) into TREE.
#
# debsrc_tree WHO SUITE SPEC DIR HAVE PREFIX: the source package SPEC of
# SUITE downloaded into DIR/src (debsrc_fetch), unless DIR/src holds a file
# matching the pattern HAVE (then nothing is downloaded; otherwise DIR/src,
# an older version's, is emptied first), and its upstream tarball
# DIR/src/PREFIX*.orig.tar.* unpacked into DIR/src/tree (debsrc_unpack).
# Where the download fails it says so, as WHO, and exits 1.

apt_need() {
	_who=$1
	shift
	_missing=""
	for _p in "$@"; do
		dpkg-query -W -f='${Status}' "$_p" 2>/dev/null |
			grep -q "ok installed" || _missing="$_missing $_p"
	done
	[ -n "$_missing" ] || return 0
	if [ "$(id -u)" != 0 ]; then
		echo "$_who: missing packages:$_missing; run as root or install them" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	# shellcheck disable=SC2086
	apt-get install -y -q --no-install-recommends $_missing
}

apt_private() {
	mkdir -p "$1/lists/partial" "$1/archives/partial"
	_apt=$(cd "$1" && pwd)
	echo "$2" >"$_apt/sources.list"
	apt_opts="-o Dir::Etc::SourceList=$_apt/sources.list \
-o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$_apt/lists \
-o Dir::Cache::Archives=$_apt/archives -o APT::Sandbox::User=root"
}

debsrc_fetch() {
	mkdir -p "$3/src"
	apt_private "$3/apt" "deb-src http://deb.debian.org/debian $1 main"
	# shellcheck disable=SC2086
	apt-get -q $apt_opts update &&
		(cd "$3/src" && apt-get -q $apt_opts source --download-only "$2")
}

debsrc_unpack() {
	rm -rf "$2"
	mkdir -p "$2"
	tar -xf "$(ls "$1"*.orig.tar.* | grep -v '\.asc$' | head -n 1)" \
		-C "$2" --strip-components=1
}

debsrc_tree() {
	# shellcheck disable=SC2086 # HAVE is a pattern
	if ! ls "$4/src"/$5 >/dev/null 2>&1; then
		rm -rf "$4/src"
		debsrc_fetch "$2" "$3" "$4" || {
			echo "$1: cannot download the source of $(echo "$3" | tr '=' ' ') from $2" >&2
			exit 1
		}
	fi
	debsrc_unpack "$4/src/$6" "$4/src/tree"
}
