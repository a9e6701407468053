#!/bin/sh
# No source file over 700 lines (docs/architecture.md): a file that long
# holds more than one concern; split it along them.
#
# Usage: check-sizes.sh   (from the top of the tree; the files git tracks)
set -eu

limit=700
files=$(git ls-files '*.c' '*.h' '*.py' '*.sh' '*.mk' Makefile)
# one name a word: the tracked names hold no spaces
over=$(wc -l $files | awk -v max=$limit '$2 != "total" && $1 > max {
	printf "  %s: %d lines\n", $2, $1 }')
if [ -n "$over" ]; then
	echo "check-sizes: files over $limit lines; split each along its concerns:"
	echo "$over"
	exit 1
fi
echo "check-sizes: $(echo "$files" | wc -l) files, none over $limit lines"
