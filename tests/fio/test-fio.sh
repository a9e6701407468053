#!/bin/sh
# fio through the Phoenix engine on the simulated device: fio's own
# verify (crc32c headers in every block) on write-then-read jobs in each
# transfer mode, with fio's syncs between writes, data written by the engine checked by fio's psync engine
# and the reverse, a corrupted file caught, bad options refused.
#
#   test-fio.sh BUILD/libphxfio.so
#
# Every fio run has its own time limit; the result is fio's exit status
# (and, for the refusals, the engine's one-line message).
set -u
engine=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/../harness.sh"
harness_dir "$(dirname "$engine")/scratch" fio
export PHX_DEVICE=${PHX_DEVICE:-sim}

# run NAME FIO-ARGS...: fio must succeed
run() {
	name=$1
	shift
	if timeout -k 5 120 fio "$@" >"$dir/out" 2>&1 &&
		! grep -q 'verify failed\|err= *[1-9]' "$dir/out"; then
		ok "$name"
	else
		bad "$name"
	fi
}

# refuse NAME MESSAGE FIO-ARGS...: fio must fail and say MESSAGE
refuse() {
	name=$1
	msg=$2
	shift 2
	if timeout -k 5 60 fio "$@" >"$dir/out" 2>&1; then
		bad "$name (fio succeeded)"
	elif grep -q "$msg" "$dir/out"; then
		ok "$name"
	else
		bad "$name (no \"$msg\")"
	fi
}

phx="--ioengine=external:$engine"
job="--name=phx --filename=$dir/f --size=8M --verify=crc32c --do_verify=1"
# fio would leave its verify state in the current folder
cd "$dir"
job="$job --verify_state_save=0"

echo "== fio $(fio --version) with $engine"
for mode in sync batch poll; do
	depth=8
	[ "$mode" = sync ] && depth=1
	for direct in 0 1; do
		run "write then verify, phx_mode=$mode direct=$direct" $phx $job \
			--phx_mode=$mode --phx_hostcopy=1 --rw=write --bs=64k \
			--iodepth=$depth --direct=$direct
	done
	run "random sizes 4k-256k, phx_mode=$mode" $phx $job \
		--phx_mode=$mode --phx_hostcopy=1 --rw=randwrite \
		--bsrange=4k-256k --iodepth=$depth --direct=1
done
run "unaligned blocks (12 KiB + 1000 B), buffered" $phx $job \
	--phx_hostcopy=1 --rw=write --bs=13288 --iodepth=4

# fio's syncs between writes and at the end of the job
run "fsync every 4 writes and at the end, phx_mode=batch" $phx $job \
	--phx_hostcopy=1 --rw=write --bs=64k --iodepth=8 --iodepth_batch=4 \
	--fsync=4 --end_fsync=1
run "fdatasync every 2 writes, phx_mode=sync" $phx $job --phx_hostcopy=1 \
	--phx_mode=sync --rw=randwrite --bs=64k --fdatasync=2
run "sync_file_range every 8 writes, phx_mode=poll" $phx $job \
	--phx_hostcopy=1 --phx_mode=poll --rw=write --bs=64k --iodepth=8 \
	--sync_file_range=write:8

# the engine's writes read back by fio's psync engine, and the reverse
run "phx writes, psync verifies" $phx $job --phx_hostcopy=1 --rw=write \
	--bs=128k --iodepth=16 --direct=1 --do_verify=0
run "... psync verifies" --ioengine=psync $job --rw=write --bs=128k \
	--verify_only=1
run "psync writes, phx verifies" --ioengine=psync $job --rw=write \
	--bs=64k --do_verify=0
run "... phx verifies (batch, depth 16)" $phx $job --phx_hostcopy=1 \
	--rw=write --bs=64k --iodepth=16 --direct=1 --verify_only=1

# the small-I/O shape (bench-kv.sh fio): 4 KiB blocks written in random
# order by psync into a file of their own, read back through the engine
# 32 and 128 deep, each round's completions copied to the device together
small="--name=phx --filename=$dir/small --size=8M --verify=crc32c"
small="$small --do_verify=1 --verify_state_save=0 --rw=randwrite --bs=4k"
run "psync writes 4 KiB blocks at random" --ioengine=psync $small \
	--do_verify=0
for depth in 32 128; do
	for mode in batch poll; do
		run "... phx verifies them, phx_mode=$mode iodepth=$depth" \
			$phx $small --phx_hostcopy=1 --phx_mode=$mode \
			--iodepth=$depth --direct=1 --verify_only=1
	done
done

# one flipped byte must be caught by the phx read
printf 'X' | dd of="$dir/f" bs=1 seek=$((3 * 1024 * 1024 + 77)) \
	conv=notrunc status=none
if timeout -k 5 120 fio $phx $job --phx_hostcopy=1 \
	--rw=write --bs=64k --iodepth=8 --direct=1 --verify_only=1 \
	>"$dir/out" 2>&1; then
	bad "a corrupted block is caught (fio passed)"
elif grep -q 'crc32c: verify failed' "$dir/out"; then
	ok "a corrupted block is caught"
else
	bad "a corrupted block is caught (no verify error)"
fi

refuse "phx_mode=fast is refused" "phx_mode=fast is not sync, batch or poll" \
	$phx $job --phx_mode=fast --phx_hostcopy=1 --rw=write --bs=64k
refuse "verify without phx_hostcopy is refused" "verify needs phx_hostcopy=1" \
	$phx $job --rw=write --bs=64k
refuse "an unknown device is refused" "opening the device" \
	$phx $job --phx_device=sim9 --phx_hostcopy=1 --rw=write --bs=64k
refuse "rw=trim is refused" "phxfio: trims are not supported" \
	$phx --name=phx --filename=$dir/f --size=1M --rw=trim --bs=64k
refuse "offloaded submission is refused" \
	"phx: can't be used with offloaded submit" $phx $job --phx_hostcopy=1 \
	--rw=write --bs=64k --iodepth=8 --io_submit_mode=offload
refuse "rw=trimwrite is refused" "phxfio: trims are not supported" \
	$phx --name=phx --filename=$dir/f --size=1M --rw=trimwrite --bs=64k

harness_end test-fio
