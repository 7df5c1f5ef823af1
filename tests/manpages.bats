#!/usr/bin/env bats
# The manual: every page renders without a warning, every program's
# --help is word for word the SYNOPSIS of its page, every page's SEE ALSO
# names every program, and every file of the source tree a page names is
# there.

load helper

setup() {
	cd "$BATS_TEST_DIRNAME/.."
}

# The SYNOPSIS of a page as one line of words.
synopsis_of() {
	MANWIDTH=1000 man -l "$1" 2>/dev/null | sed -n '/^SYNOPSIS/,/^DESCRIPTION/p' |
		sed '1d;$d' | tr -s ' \n' '  ' | sed 's/^ *//; s/ *$//'
}

# A program's --help as one line of words, without "usage:".
help_of() {
	"$1" --help | sed 's/^usage: //; s/^       //' | tr -s ' \n' '  ' | sed 's/^ *//; s/ *$//'
}

@test "every page renders without a warning" {
	for page in man/*.[157]; do
		warnings=$(groff -ww -mandoc -Tutf8 -z "$page" 2>&1)
		[ -z "$warnings" ] || { echo "$page: $warnings" >&2; return 1; }
	done
}

@test "every page passes mandoc -T lint without a warning" {
	for page in man/*.[157]; do
		warnings=$(mandoc -T lint -W warning "$page" 2>&1)
		[ -z "$warnings" ] || { echo "$warnings" >&2; return 1; }
	done
}

@test "no page renders a quote inside a quote by a misplaced macro" {
	for page in man/*.[157]; do
		slips=$(mandoc -T utf8 "$page" | col -b | grep -n "‘[^’]*‘" || true)
		[ -z "$slips" ] || { echo "$page: $slips" >&2; return 1; }
	done
}

@test "every program's --help is the SYNOPSIS of its page" {
	for program in $(sed -n 's/^PROGS = //p' Makefile); do
		[ -f "man/$program.1" ] || { echo "no man/$program.1" >&2; return 1; }
		assert_equal "$(help_of "$program")" "$(synopsis_of "man/$program.1")"
	done
}

# The pages a page's SEE ALSO names, one NAME(SECTION) a line.
see_also_of() {
	sed -n '/^\.Sh SEE ALSO/,/^\.Sh /p' "$1" | sed -n 's/^\.Xr \([^ ]*\) \([0-9]\).*/\1(\2)/p'
}

# The paths a page gives with Pa, one a line, as written: a pattern such as
# "records/ Ns Ar DATE" gives its literal start, "records/".
paths_of() {
	awk '/^\./ { for (i = 1; i < NF; i++) if ($i == ".Pa" || $i == "Pa") print $(i + 1) }' "$1"
}

# Paths that name a team's files in the pages' examples, not idem's own:
# a volume record's evidence (idem-record(5)) and the mailer and invoices
# of idem(7)'s worked examples.
not_ours="records/evidence/ records/2026-11-29-mailer.yaml seeds/invoices.yaml"

@test "every page's SEE ALSO names every program but itself" {
	missing=0
	for page in man/*.[157]; do
		see_also=$(see_also_of "$page")
		for program in $(sed -n 's/^PROGS = //p' Makefile); do
			[ "$page" = "man/$program.1" ] && continue
			grep -qxF "$program(1)" <<<"$see_also" ||
				{ echo "$page: SEE ALSO lacks $program(1)" >&2; missing=$((missing + 1)); }
		done
	done
	assert_equal "$missing" 0
}

@test "every file of the source tree a page names with Pa is there" {
	missing=0
	for page in man/*.[157]; do
		while read -r path; do
			case "$path" in
			lib/* | cmd/* | tests/* | templates/* | records/* | seeds/* | man/* | examples/*) ;;
			*) continue ;;
			esac
			[[ " $not_ours " == *" $path "* ]] && continue
			[ -e "$path" ] || { echo "$page: $path is not in the source tree" >&2; missing=$((missing + 1)); }
		done < <(paths_of "$page")
	done
	assert_equal "$missing" 0
	# The list of a team's files holds only what a page still names and
	# what idem itself does not have.
	for path in $not_ours; do
		grep -qF "Pa $path" man/*.[157] || { echo "no page names $path" >&2; return 1; }
		[ ! -e "$path" ] || { echo "$path is in the source tree: drop it from not_ours" >&2; return 1; }
	done
}

@test "every program answers --version and exits 2 on an unknown option, naming itself" {
	for program in $(sed -n 's/^PROGS = //p' Makefile); do
		"$program" --version | grep -q "^$program "
		run "$program" --no-such-option
		[ "$status" -eq 2 ]
		[[ "$output" == "$program: unrecognized option '--no-such-option'"* ]]
	done
}

@test "make install puts programs and pages under DESTDIR and PREFIX; make uninstall takes them away" {
	dest="$BATS_TEST_TMPDIR/dest"
	make -s install DESTDIR="$dest" PREFIX=/opt/idem >/dev/null
	for program in $(sed -n 's/^PROGS = //p' Makefile); do
		[ -x "$dest/opt/idem/bin/$program" ]
		[ -f "$dest/opt/idem/share/man/man1/$program.1" ]
	done
	[ -f "$dest/opt/idem/share/man/man5/idem-tsv.5" ]
	[ -f "$dest/opt/idem/share/man/man7/idem-step.7" ]
	make -s uninstall DESTDIR="$dest" PREFIX=/opt/idem >/dev/null
	assert_equal "$(find "$dest" -type f | wc -l)" 0
}
