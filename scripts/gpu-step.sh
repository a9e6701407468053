# Sourced by the GPU drivers (gpu-suite.sh, vllm-gpu.sh): step NAME LIMIT
# CMD... runs CMD under its own time limit, its output to $logs/NAME.log,
# one summary line to stdout; rc is the step's status, and status turns 1
# once any step failed.
step() {
	name=$1 limit=$2
	shift 2
	t0=$(date +%s)
	timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
	rc=$?
	echo "== $name rc=$rc $(($(date +%s) - t0))s"
	[ $rc = 0 ] || status=1
}
