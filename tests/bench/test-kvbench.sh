#!/bin/sh
# phx-kvbench on the simulated device: each mode runs to its table (the
# program stops at the first byte that does not match the file, so a run
# that ends checked every transfer), and every bad option is refused with
# one line that says what is wrong.  Nothing here looks at a time.
#
#   test-kvbench.sh BUILD/phx-kvbench
#
# Every run has its own time limit; the result is its exit status and
# what it printed.
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/../harness.sh"
harness_dir "$(dirname "$bin")/scratch" kvbench
export PHX_DEVICE=sim
unset PHX_PHXFILE_LIBRARY

# run NAME PATTERN ARGS...: phx-kvbench succeeds and prints PATTERN
# (a grep -E expression) on a line of its own output
run() {
	name=$1
	pat=$2
	shift 2
	timeout -k 5 120 "$bin" "$@" >"$dir/out" 2>&1
	rc=$?
	if [ "$rc" != 0 ]; then
		bad "$name (exit status $rc)"
	elif ! grep -Eq "$pat" "$dir/out"; then
		bad "$name (no line matching '$pat')"
	else
		ok "$name"
	fi
}

# refuse NAME MESSAGE ARGS...: phx-kvbench fails at once with one line on
# stderr that holds MESSAGE, and nothing on stdout
refuse() {
	name=$1
	msg=$2
	shift 2
	if timeout -k 5 30 "$bin" "$@" >"$dir/out" 2>"$dir/err"; then
		cat "$dir/err" >>"$dir/out"
		bad "$name (it ran)"
	elif [ "$(wc -l <"$dir/err")" != 1 ] || [ -s "$dir/out" ]; then
		cat "$dir/err" >>"$dir/out"
		bad "$name (not one line)"
	elif ! grep -qF "$msg" "$dir/err"; then
		cat "$dir/err" >"$dir/out"
		bad "$name (no \"$msg\")"
	else
		ok "$name"
	fi
}

echo "== phx-kvbench on the simulated device ($bin)"
# LMCache's slab pattern on 1 and 2 streams: the side-by-side table has a
# row per size, case and stream count with phxFile and phx_io_run figures
num='[0-9]+\.[0-9]+ \([0-9.]+x\)'
run "kv: 16K and 1M chunks, reads hot and cold and writes, 1 and 2 streams" \
	"^1M +write +2 +[0-9.]+ +$num +$num +n/a +n/a" \
	-s 64M -r 1 -o 8 -b 16K,1M -n 1,2 kv "$dir"
grep -Eq "^16K +read cold +1 +[0-9.]+ +$num +$num" "$dir/out" &&
	grep -Eq "^1M +read hot +2 " "$dir/out" &&
	ok "kv: the table has every size, case and stream count" ||
	bad "kv: the table has every size, case and stream count"
run "small: 4K reads at QD 1 and 4, every peer but cuFile" \
	"^rand 4K QD4 cold +phx batch, polled +[0-9.e+]+ IOPS" \
	-s 64M -r 1 -b 4K -q 1,4 -o 256 small "$dir"
grep -Eq "^4K +4 +[0-9.]+k [0-9]+/[0-9]+ +[0-9.]+k \([0-9.]+x\) [0-9]+/[0-9]+ " "$dir/out" &&
	ok "small: the side-by-side table has each queue depth" ||
	bad "small: the side-by-side table has each queue depth"
sed -n '/^CPU time of the whole process per read/,$p' "$dir/out" |
	grep -Eq "^4K +4 +[0-9.]+ +[0-9.]+ \([0-9.]+x\) " &&
	ok "small: the CPU table has each queue depth, against raw io_uring" ||
	bad "small: the CPU table has each queue depth, against raw io_uring"
run "setup: phxFile and libphoenix each in fresh processes" \
	"^first 4 KiB read \(cold\) +[0-9.]+ [mu]s +[0-9.]+ [mu]s +-$" \
	-r 2 setup "$dir"
grep -q "^cuFile: no CUDA device" "$dir/out" &&
	ok "setup: the cuFile column says why it is empty" ||
	bad "setup: the cuFile column says why it is empty"

refuse "-r 0 is refused" "bad -r 0: timed runs per peer, 1 to" -r 0 kv "$dir"
refuse "-n 17 is refused" "bad -n 17: 17 streams, at most 16" -n 17 kv "$dir"
refuse "-n 1,x is refused" "bad -n 1,x" -n 1,x kv "$dir"
refuse "-o 5x is refused" "bad -o 5x" -o 5x kv "$dir"
refuse "-b 3K is refused" "bad -b 3K: up to 8 sizes, multiples of 4K" \
	-b 3K kv "$dir"
refuse "-q 0 is refused" "bad -q 0" -q 0 small "$dir"
refuse "-s 1K is refused" "bad size 1K" -s 1K kv "$dir"
refuse "an unknown mode is refused" "unknown mode kvv" kvv "$dir"
refuse "an unknown option is refused" "unknown option -z" -z kv "$dir"
refuse "a missing value is refused" "option -r needs a value" kv "$dir" -r

harness_end test-kvbench
