#!/usr/bin/env bats
# The manual: every page renders without a warning, and every program's
# --help is word for word the SYNOPSIS of its page.

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

@test "every program's --help is the SYNOPSIS of its page" {
	for program in $(sed -n 's/^PROGS = //p' Makefile); do
		[ -f "man/$program.1" ] || { echo "no man/$program.1" >&2; return 1; }
		assert_equal "$(help_of "$program")" "$(synopsis_of "man/$program.1")"
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
