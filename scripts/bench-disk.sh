# Sourced by the GPU benchmark scripts: the disk under $dir.
#
# bench_disk TAG: sets $fstype and $majmin for $dir, refuses a directory
# that is not on a disk, and, as root, adds the two udev properties cuFile
# reads for the disk (a VM without udev lacks them; nothing is
# overwritten).  Needs fail() from the caller.

bench_disk_mnt() {
	findmnt -n -f -o "$1" -T "$dir" 2>/dev/null | head -n 1 | tr -d ' '
}

bench_disk_udev() {
	f=/run/udev/data/b$1
	[ -e "$f" ] && return 0
	mkdir -p /run/udev/data &&
		printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=%s\n' "$fstype" >"$f" &&
		echo "$bench_tag: wrote $f for cuFile"
}

bench_disk() {
	bench_tag=$1
	fstype=$(bench_disk_mnt FSTYPE)
	majmin=$(bench_disk_mnt MAJ:MIN)
	case "$fstype" in
	tmpfs|ramfs|overlay)
		fail "$dir is on $fstype, not on a disk; pass a directory on the disk" ;;
	esac
	if [ "$(id -u)" = 0 ] && [ -n "$majmin" ] && [ "${majmin%%:*}" != 0 ]; then
		bench_disk_udev "$majmin" ||
			echo "$bench_tag: cannot write udev data; cuFile may fail"
		# A partition: its disk too.
		if [ -e "/sys/dev/block/$majmin/partition" ]; then
			parent=$(cat "/sys/dev/block/$majmin/../dev" 2>/dev/null || true)
			[ -n "$parent" ] && bench_disk_udev "$parent" || true
		fi
	elif [ "$(id -u)" != 0 ]; then
		echo "$bench_tag: not root: cold runs use fadvise(DONTNEED) and cuFile may fail"
	fi
}
