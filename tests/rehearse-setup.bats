#!/usr/bin/env bats
# rehearse -s: the schema setup of a worker other than idem-worker, here
# one written with node-postgres, run with the database a worker gets and
# kept in the record's reproduce command, so a rerun sets it up too.

load helper
load rehearse-helper

setup() {
	rehearse_setup
	mkdir -p tests/fixtures/workers
	cp "$root"/tests/fixtures/workers/{pg-worker.js,invoice-queue.js} tests/fixtures/workers/
	worker='node tests/fixtures/workers/pg-worker.js unique'
	# the seed names the worker that runs, as the record checks
	sed -e 's/within: 2s/within: 100ms/' -e "s#command: \"idem-worker --guard unique\"#command: \"$worker\"#" \
		"$root/tests/fixtures/seeds/duplicate-publish.yaml" >seeds/duplicate-publish.yaml
	grep -qF "command: \"$worker\"" seeds/duplicate-publish.yaml
	commit_signed "seed, worker and signers"
}

teardown() {
	[ -z "${sandbox:-}" ] || idem-sandbox -D "$sandbox" --purge stop >/dev/null
	rm -rf "$T"
}

rh() {
	TMPDIR="$T" rehearse "$@"
}

@test "a node-postgres worker with its own setup ends in a verified record that a rerun reproduces" {
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c \
		-w "$worker" -s 'node tests/fixtures/workers/pg-worker.js --setup' seeds/duplicate-publish.yaml
	echo "$stderr" >&2
	[ "$status" -eq 0 ]
	r=$output
	pipeline="node tests/fixtures/workers/pg-worker.js --setup && seed-gen seeds/duplicate-publish.yaml | count-effects --before | dup-publish | kill-at -- $worker | count-effects"
	[[ "$stderr" == *"+ $pipeline | mkrecord"* ]]
	[[ "$stderr" == *"$r: verified, signed by eng@example.org"* ]]
	grep -q '^verdict: "pass"$' "$r"
	grep -qF "reproduce: \"$pipeline\"" "$r"
	run verify-record --rerun "$r"
	echo "$output" >&2
	[ "$status" -eq 0 ]
	[[ "$output" == *"$r: rerun reproduces the counts"* ]]
	assert_equal "$(ours)" ""
}

@test "the setup reaches the sandbox by DATABASE_URL alone, in the run and in its rerun, whatever the caller had" {
	setup='env -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER -u IDEM_DATABASE node tests/fixtures/workers/pg-worker.js --setup'
	export DATABASE_URL=postgresql://elsewhere.invalid/production IDEM_DATABASE_URL=postgresql://elsewhere.invalid/x
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c -w "$worker" -s "$setup" \
		seeds/duplicate-publish.yaml
	echo "$stderr" >&2
	[ "$status" -eq 0 ]
	run -0 verify-record --rerun "$output"
	[[ "$output" == *"rerun reproduces the counts"* ]]
}

@test "on a database that is not a sandbox, nothing is set up: the run stops first" {
	sandbox="$T/sandbox"
	eval "$(idem-sandbox -D "$sandbox" start)"
	run rh -k "$key" -f records/allowed_signers -w "$worker" -d "host=$PGHOST dbname=postgres user=idem" \
		-s "touch $BATS_TEST_TMPDIR/set-up" seeds/duplicate-publish.yaml
	[ "$status" -eq 3 ]
	[[ "$output" == *"rehearse: dbname=postgres user=idem host=$PGHOST port=5432 is not a rehearsal sandbox"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/set-up" ]
	assert_equal "$(ls records)" allowed_signers
}

@test "a setup that fails stops the rehearsal with its status and last word; -s '' sets up nothing" {
	run rh -k "$key" -f records/allowed_signers -w "$worker" \
		-s 'echo making the tables >&2 && exit 4' seeds/duplicate-publish.yaml
	[ "$status" -eq 4 ]
	[[ "$output" == *"rehearse: echo making the tables >&2 && exit 4 failed (exit 4): making the tables"* ]]
	assert_equal "$(ls records)" allowed_signers
	# without a setup the effect table is missing: count-effects --before says so
	run --separate-stderr rh -k "$key" -f records/allowed_signers -w "$worker" -s '' seeds/duplicate-publish.yaml
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"+ seed-gen seeds/duplicate-publish.yaml | count-effects --before"* ]]
	[[ "$stderr" == *"rehearse: count-effects --before failed (exit 3)"* ]]
}

@test "a pg-boss worker, unmodified, with its own setup ends in a verified record naming schema version 24, which a rerun reproduces" {
	rehearse_library pgboss 'unique invoice-line' pg-boss 24
}

# rehearse_library LIBRARY SETUP KIND VERSION: the library's fixture
# worker and seed, unmodified, with its own setup, end in a verified
# record naming the library and the schema version the database showed,
# which a rerun reproduces. A newer major's worker is the library's worker
# on another npm alias: both files go in.
rehearse_library() {
	local worker="node tests/fixtures/workers/$1-worker.js unique" setup="node tests/fixtures/workers/$1-worker.js --setup $2"
	cp "$root/tests/fixtures/workers/$1-worker.js" tests/fixtures/workers/
	[ "${1%%[0-9]*}" = "$1" ] || cp "$root/tests/fixtures/workers/${1%%[0-9]*}-worker.js" tests/fixtures/workers/
	cp "$root/tests/fixtures/seeds/$1-invoice-line.yaml" seeds/
	commit_signed "a $3 worker and its seed"
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c -w "$worker" -s "$setup" \
		"seeds/$1-invoice-line.yaml"
	echo "$stderr" >&2
	[ "$status" -eq 0 ]
	r=$output
	[[ "$stderr" == *"$r: verified, signed by eng@example.org"* ]]
	grep -q '^verdict: "pass"$' "$r"
	grep -A 3 '^queue:$' "$r" | tr -d '\n ' | grep -q "^queue:kind:\"$3\"name:\"[a-z_-]*\"version:\"$4\"$"
	grep -q "^| queue library | $3, schema version $4 |\$" "${r%.yaml}.md"
	run verify-record --rerun "$r"
	echo "RERUN: $output" >&2
	[ "$status" -eq 0 ]
	[[ "$output" == *"$r: rerun reproduces the counts"* ]]
	assert_equal "$(ours)" ""
}

@test "a pg-boss 12 worker, unmodified, ends in a verified record naming schema version 46, which a rerun reproduces" {
	rehearse_library pgboss12 'unique invoice-line' pg-boss 46
}

@test "a graphile-worker 0.18 worker, unmodified, ends in a verified record naming migration 20, which a rerun reproduces" {
	rehearse_library graphile018 unique graphile-worker 20
}

# The block of idem(7) that follows the line $1 in its section A TEAM ON
# PG-BOSS, as it is printed.
man_block() {
	awk -v after="$1" '
		/^\.Sh / { in_section = ($0 == ".Sh A TEAM ON PG-BOSS") }
		in_section && $0 == after { armed = 1; next }
		armed && /^\.Bd / { copying = 1; next }
		copying && /^\.Ed/ { exit }
		copying { print }' "$root/man/idem.7"
}

@test "idem(7)'s walkthrough for a pg-boss team, as printed, ends in a verified record" {
	man_block '.Pa worker.js ,' >worker.js
	man_block '.Pa seeds/invoices.yaml' >seeds/invoices.yaml
	grep -q "boss.work(queue" worker.js
	grep -q '^queue: { kind: pg-boss, name: invoice-line }$' seeds/invoices.yaml
	commit_signed "billing: worker and seed"
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c -w 'node worker.js' \
		-s 'node worker.js --setup' seeds/invoices.yaml
	echo "$stderr" >&2
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"$output: verified, signed by eng@example.org"* ]]
	grep -q '^verdict: "pass"$' "$output"
}
