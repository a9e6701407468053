#!/bin/sh
# Make .before/: an older commit's tree with its own GPU bundle, small
# enough to travel beside .gpu/ to a GPU machine, where
# scripts/bench-before-after.sh runs the benchmarks from both in turns.
#
# Usage (on the build machine, from the repository root):
#   sh scripts/gpu-before-tree.sh REV
# REV's own scripts/gpu-bundle.sh builds it (in a temporary worktree);
# .before/ keeps REV's files and the binaries the benchmarks use
# (phx-bench, phxfs, phx and the libraries), not its test suites, fio or
# pytest.  The shared libraries come from .gpu/lib on the GPU machine.
set -eu
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 REV" >&2; exit 2; }
rev=$(git rev-parse --verify -q "$1^{commit}") ||
	{ echo "gpu-before-tree: $1: no such commit" >&2; exit 2; }
wt=$(mktemp -d "${TMPDIR:-/tmp}/phx-before.XXXXXX")
trap 'git worktree remove --force "$wt" 2>/dev/null; rm -rf "$wt"' EXIT INT TERM
git worktree add -q --detach "$wt" "$rev"
(cd "$wt" && sh scripts/gpu-bundle.sh >bundle.log 2>&1) || {
	tail -n 20 "$wt/bundle.log" >&2
	echo "gpu-before-tree: building $1's bundle failed" >&2
	exit 1
}
rm -rf .before
mkdir -p .before/.gpu/bin .before/.gpu/lib
git archive "$rev" | tar -x -C .before
for f in phx-bench phxfs phx libphoenix.so libphxfile.so libphxfsctl.so; do
	[ -f "$wt/.gpu/bin/$f" ] && cp "$wt/.gpu/bin/$f" .before/.gpu/bin/
done
echo "$rev" >.before/REV
echo "gpu-before-tree: .before/ is $(git log -1 --format='%h %s' "$rev")" \
	"($(du -sh .before | cut -f1))"
