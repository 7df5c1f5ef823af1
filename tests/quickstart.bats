#!/usr/bin/env bats
# The README's quick start, as written: its commands are read from
# README.md, so the test fails when the README drifts, and run in a fresh
# repository holding the files they name, as a clone would.

load helper
load rehearse-helper

setup() {
	rehearse_setup
	/usr/bin/python3 -c 'import psycopg2' ||
		{ echo "the quick start's worker needs Debian's python3-psycopg2" >&2; false; }
	mkdir -p examples tests/fixtures
	cp -R "$root/examples/python" examples/
	cp -R "$root/tests/fixtures/keys" tests/fixtures/
	cp "$root/records/allowed_signers" records/
	# as git clone leaves a file that is not executable
	chmod 644 tests/fixtures/keys/*
	git add . && git commit -q -m 'a clone, as far as the quick start reads it'
}

teardown() {
	rm -rf "$T"
}

# The indented lines of the README's "Quick start" section.
quick_start() {
	awk '/^## / { on = ($0 == "## Quick start") } on && /^    / { print substr($0, 5) }' "$root/README.md"
}

@test "the README's quick start ends in a verified record that verify-record --rerun reproduces" {
	script=$(quick_start)
	echo "$script" >&2
	[[ "$script" == *"rehearse "*"examples/python/seed.yaml"* ]]
	[[ "$script" == *"verify-record --rerun"* ]]
	run --separate-stderr env TMPDIR="$T" bash -eu -o pipefail -c "$script"
	echo "$stderr" >&2
	echo "$output" >&2
	[ "$status" -eq 0 ]
	r=$(ls records/*-quickstart.yaml)
	[[ "$stderr" == *"$r: verified, signed by idem-fixture@idem.invalid; verdict pass"* ]]
	[[ "$output" == *"$r: rerun reproduces the counts"* ]]
	[[ "$output" == *"$r: rerun reproduces the path"* ]]
	grep -q '^verdict: "pass"$' "$r"
	# the worker took every branch its guard has, and every kill landed
	grep -qF 'branch=conflict-noop' "$r"
	grep -q '^missed: \[\]$' "$r"
	assert_equal "$(ours)" ""
}
