#!/usr/bin/env bats
# The rooms of the source tree, as the README's layout draws them: a
# program with private modules in cmd/PROG/, lib/ only for what programs
# share, and every main a table of contents.

top="$BATS_TEST_DIRNAME/.."

# "LENGTH NAME FILE" for each function of the files, whose body runs from
# a "{" to a "}" in the first column (the house style).
function_lengths() {
	awk '/^[A-Za-z_].*\(/ { if (!body) sig = $0 }
		/^{/ { body = 1; start = FNR; name = sig }
		/^}/ { if (body) { sub(/\(.*/, "", name); n = split(name, w, /[ *]+/)
			print FNR - start + 1, w[n], FILENAME; body = 0 } }' "$@"
}

@test "every room and one-file program is in the README's layout, and the README is under 200 lines" {
	local lines missing= room
	lines=$(wc -l <"$top/README.md")
	[ "$lines" -lt 200 ] || { echo "README.md has $lines lines"; false; }
	for room in "$top"/cmd/*/; do
		room=cmd/$(basename "$room")/
		grep -q "^    $room " "$top/README.md" || missing="$missing $room"
	done
	grep -q '^    lib/ ' "$top/README.md" || missing="$missing lib/"
	[ -z "$missing" ] || { echo "not in the layout:$missing"; false; }
}

@test "no program includes a header of another program's room" {
	local f dir h wrong=
	for f in "$top"/cmd/*.c "$top"/cmd/*/*.[ch]; do
		dir=$(dirname "$f")
		for h in $(sed -n 's/^#include "\(.*\)"$/\1/p' "$f"); do
			[ "$dir" != "$top/cmd" ] && [ -f "$dir/$h" ] && continue
			[ -f "$top/lib/$h" ] && continue
			wrong="$wrong ${f#$top/}:$h"
		done
	done
	[ -z "$wrong" ] || { echo "includes from another room:$wrong"; false; }
}

@test "every header of lib/ serves two programs or more, or another module of lib/" {
	local h m programs via lonely= room
	for h in "$top"/lib/*.h; do
		m=$(basename "$h")
		programs=0
		for room in "$top"/cmd/*.c "$top"/cmd/*/; do
			grep -qs "^#include \"$m\"" "$room" "$room"*.[ch] && programs=$((programs + 1))
		done
		via=$(grep -ls "^#include \"$m\"" "$top"/lib/*.[ch] | grep -vc "/${m%.h}\.[ch]$" || true)
		[ "$programs" -ge 2 ] || [ "$via" -ge 1 ] || lonely="$lonely $m ($programs)"
	done
	[ -z "$lonely" ] || { echo "lib headers of one program:$lonely"; false; }
}

@test "every main is under 60 lines, and no function of the project over 120" {
	local long
	long=$(function_lengths "$top"/cmd/*.c "$top"/cmd/*/*.c | awk '$2 == "main" && $1 >= 60')
	[ -z "$long" ] || { echo "long mains: $long"; false; }
	long=$(function_lengths "$top"/cmd/*.c "$top"/cmd/*/*.c "$top"/lib/*.c \
		"$top"/tests/unit/*.c "$top"/tests/tools/*.c "$top"/tests/fuzz/*.c | awk '$1 >= 120')
	[ -z "$long" ] || { echo "long functions: $long"; false; }
	# the measure sees functions at all: kill-at's main is one
	function_lengths "$top/cmd/kill-at/kill-at.c" | grep -q ' main '
}
