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

@test "a seed from seed-gen --init for the quick start's table, its worker filled in, rehearses to a pass" {
	seed-gen --init shop.confirmations -k order_id -o seeds/confirmations.yaml
	sed -i 's#^  command: "./worker" #  command: "examples/python/worker.py" #' seeds/confirmations.yaml
	grep -q '^  command: "examples/python/worker.py" ' seeds/confirmations.yaml
	commit_signed "a seed of our own"
	# the key records/allowed_signers lists, as in the quick start
	install -m 600 tests/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519 "$BATS_TEST_TMPDIR/fixture"
	run --separate-stderr env TMPDIR="$T" rehearse -k "$BATS_TEST_TMPDIR/fixture" \
		-s 'psql -Xq -v ON_ERROR_STOP=1 -f examples/python/schema.sql' seeds/confirmations.yaml
	echo "$stderr" >&2
	[ "$status" -eq 0 ]
	r=$output
	[[ "$stderr" == *"$r: verified, signed by idem-fixture@idem.invalid; verdict pass"* ]]
	grep -q '^missed: \[\]$' "$r"
	# every kill point and the race of the new seed, each reached
	for s in kill-before-write kill-before-commit kill-after-commit two-workers-race duplicate-publish; do
		grep -q "^- name: \"$s\"$" "$r"
	done
	assert_equal "$(ours)" ""
}
