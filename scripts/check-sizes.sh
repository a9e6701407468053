#!/bin/sh
# No source file over 700 lines (docs/architecture.md): a file
# that long holds more than one concern; split it along them.
#
# Usage: check-sizes.sh   (from the top of the tree; the files git tracks)
set -eu

limit=700
over=$(git ls-files '*.c' '*.h' '*.py' '*.sh' '*.mk' Makefile |
	while read -r f; do
		n=$(wc -l <"$f")
		[ "$n" -le $limit ] || echo "  $f: $n lines"
	done)
if [ -n "$over" ]; then
	echo "check-sizes: files over $limit lines; split each along its concerns:"
	echo "$over"
	exit 1
fi
echo "check-sizes: $(git ls-files '*.c' '*.h' '*.py' '*.sh' '*.mk' Makefile | wc -l) files, none over $limit lines"
