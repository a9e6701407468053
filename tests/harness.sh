# harness.sh - what the shell suites share, sourced by them: a scratch
# folder removed at exit, pass and fail counts, and the closing line.
#
#   . "$(dirname "$0")/../harness.sh"
#   harness_dir BASE NAME   # $dir: ${PHX_TEST_DIR:-BASE}/NAME.PID
#   ok NAME; bad NAME       # bad also shows the end of $dir/out
#   harness_end SUITE       # "SUITE: N passed, M failed"; fails if any did

harness_dir() {
	dir=${PHX_TEST_DIR:-$1}/$2.$$
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	trap 'rm -rf "$dir"' EXIT
}

pass=0
fail=0
ok() { pass=$((pass + 1)); echo "  ok    $1"; }
bad() {
	fail=$((fail + 1))
	echo "  FAIL  $1"
	sed 's/^/        /' "$dir/out" | tail -n 15
}

harness_end() {
	echo "$1: $pass passed, $fail failed"
	[ "$fail" = 0 ]
}
