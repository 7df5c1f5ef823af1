#!/usr/bin/env bats
# examples/jobs-table: a team's own jobs table, no queue library, rehearsed
# through the adapter file its seed names (idem(7), WRITING AN ADAPTER), in
# a fresh repository holding the example as a clone would: the unique
# guard passes with every kill point reached in the database, and the bad
# check-then-insert guard is caught by the race.

load helper
load rehearse-helper

setup() {
	rehearse_setup
	/usr/bin/python3 -c 'import psycopg2' ||
		{ echo "the example's worker needs Debian's python3-psycopg2" >&2; false; }
	mkdir -p examples tests/fixtures
	cp -R "$root/examples/jobs-table" examples/
	cp -R "$root/tests/fixtures/keys" tests/fixtures/
	cp "$root/records/allowed_signers" records/
	chmod 644 tests/fixtures/keys/*
	install -m 600 tests/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519 "$BATS_TEST_TMPDIR/fixture"
	# signed, as the project's commits to records/ are: the audit reads it
	git add . && key="$BATS_TEST_TMPDIR/fixture" signed_commit -m 'a clone, as far as the example reads it'
}

teardown() {
	# the audit's sandbox of test 1, stopped whether or not the test got there
	[ ! -d "$T/audit" ] || idem-sandbox -D "$T/audit" --purge stop >/dev/null 2>&1 || true
	rm -rf "$T"
}

# rehearse_example [GUARD]: the example rehearsed with that guard, the
# table set up for it; the record's name in $output.
rehearse_example() {
	local guard=${1:-unique} worker=()
	[ "$guard" = unique ] || worker=(-w "examples/jobs-table/worker.py --guard $guard")
	run --separate-stderr env TMPDIR="$T" rehearse -k "$BATS_TEST_TMPDIR/fixture" "${worker[@]}" \
		-s "psql -Xq -v ON_ERROR_STOP=1 -v guard=$guard -f examples/jobs-table/schema.sql" \
		examples/jobs-table/seed.yaml
	echo "$stderr" >&2
}

# "job:attempt:rows_written:outcome:branch," of the record's evidence, sorted.
evidence() {
	awk '/^evidence:/ { on = 1; next } /^[a-z]/ { on = 0 }
	     on && /^- job:/ { j = $3 } on && /^  attempt:/ { a = $2 }
	     on && /^  rows_written:/ { r = $2 } on && /^  outcome:/ { o = substr($0, index($0, ":") + 2) }
	     on && /^  branch:/ { print j ":" a ":" r ":" o ":" $2 }' "$1" | tr -d '"' | sort | tr '\n' ,
}

# "key:observed," of the record's counts after the run.
counts_after() {
	awk '/^counts:/ { on = 1 } on && /^  after:/ { after = 1; next } after && /^  [a-z]/ { after = 0 }
	     after && /^    key:/ { k = $2 } after && /^    observed:/ { print k ":" $2 }' "$1" |
		tr -d '"\\' | tr '\n' ,
}

# "scenario:job:attempt:step:observed," of the record's kill points.
kill_points() {
	awk '/^kill_points:/ { on = 1; next } /^[a-z]/ { on = 0 }
	     on && /^- scenario:/ { s = $3 } on && /^  job:/ { j = $2 } on && /^  attempt:/ { a = $2 }
	     on && /^  step:/ { st = $2 } on && /^  observed:/ { print s ":" j ":" a ":" st ":" $2 }' "$1" |
		tr -d '"' | sort | tr '\n' ,
}

@test "jobs-table: the unique guard passes, every kill reached in the database, one line per key, a rerun reproduces it, and a change of the table makes it stale" {
	rehearse_example unique
	[ "$status" -eq 0 ]
	r=$output
	[[ "$stderr" == *"$r: verified, signed by idem-fixture@idem.invalid; verdict pass"* ]]
	grep -q '^verdict: "pass"$' "$r"
	# the team's queue, by the kind and version its adapter gives
	grep -qx '  kind: "jobs-table"' "$r"
	grep -q '^  version: "work.jobs [0-9a-f]\{12\}"$' "$r"
	# both kills landed, seen in the database (the worker's steps name its
	# own job ids, which no kill point names), and none was missed
	assert_equal "$(kill_points "$r")" \
		"kill-after-commit:job-0002:1:after-commit:database,kill-before-commit:job-0003:1:before-commit:database,"
	grep -q '^missed: \[\]$' "$r"
	# one line per business key, six in all
	assert_equal "$(counts_after "$r")" \
		'[inv-1001,1]:1,[inv-1002,1]:1,[inv-1003,1]:1,[inv-1004,1]:1,[inv-1005,1]:1,[inv-1006,1]:1,effects:6,duplicates:0,missing:0,unexpected:0,conflicts:0,pending:0,'
	# what each attempt wrote, from the ledger: the retry after the commit
	# found the line, the one after the rolled back commit wrote it; the
	# forced copy and the race's loser found it there
	assert_equal "$(evidence "$r")" \
		"job-0001:1:0:acked:conflict-noop,job-0001:1:1:acked:inserted,job-0002:1:1:killed at after-commit:inserted,job-0002:2:0:acked:conflict-noop,job-0003:1:0:killed at before-commit:inserted,job-0003:2:1:acked:inserted,job-0004:1:1:acked:inserted,job-0005:1:0:acked:conflict-noop,job-0005:1:1:acked:inserted,job-0006:1:1:acked:inserted,"
	# the guard the constraint gives, probed
	grep -q '^  name: "invoice_lines_once"$' "$r"
	# as the seed's sandbox account, which held its list and could not
	# delete or truncate the team's jobs
	awk '/^account:/,/^effect:/' "$r" | grep -q 'work.jobs'
	run verify-record --rerun "$r"
	echo "$output" >&2
	[ "$status" -eq 0 ]
	[[ "$output" == *"$r: rerun reproduces the counts"* ]]
	assert_equal "$(ours)" ""
	# the audit against a database where the team's table is as it was,
	# then changed: the version, read through the adapter file, moves
	eval "$(idem-sandbox -D "$T/audit" start)"
	db="host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"
	psql -Xq -v ON_ERROR_STOP=1 -v guard=unique -f examples/jobs-table/schema.sql
	run verify-record --history -t -d "$db"
	echo "$output" >&2
	[ "$status" -eq 0 ]
	psql -Xq -c 'ALTER TABLE work.jobs ADD COLUMN priority integer'
	rehearsed=$(sed -n 's/^  version: "\(work.jobs [0-9a-f]*\)"$/\1/p' "$r")
	run verify-record --history -t -d "$db"
	[ "$status" -eq 1 ]
	grep -q "	record	$r	stale	the jobs-table queue's schema is version work.jobs [0-9a-f]\{12\} in the database, the record rehearsed version $rehearsed: not rehearsed since the queue's upgrade$" <<<"$output"
	run ! grep -q "version $rehearsed in the database" <<<"$output"
}

@test "jobs-table: check-then-insert is caught by the race, the duplicated key named, the verdict fail" {
	rehearse_example check-then-insert
	[ "$status" -eq 1 ]
	r=$output
	[[ "$stderr" == *'count-effects: duplicate: business key ["inv-1005",1] has 2 effect rows, expected 1'* ]]
	[[ "$stderr" == *"does not enforce one row per business key"* ]]
	grep -q '^verdict: "fail"$' "$r"
	assert_equal "$(counts_after "$r")" \
		'[inv-1001,1]:1,[inv-1002,1]:1,[inv-1003,1]:1,[inv-1004,1]:1,[inv-1005,1]:2,[inv-1006,1]:1,effects:7,duplicates:1,missing:0,unexpected:0,conflicts:0,pending:0,'
	# both racers looked, found nothing, and inserted; the kills' retries
	# and the forced copy found the line
	[[ "$(evidence "$r")" == *"job-0005:1:1:acked:inserted,job-0005:1:1:acked:inserted,"* ]]
	[[ "$(evidence "$r")" == *"job-0001:1:0:acked:found-existing,"* ]]
	assert_equal "$(ours)" ""
}

@test "jobs-table: the example's adapter, a section taken out, is refused naming the section" {
	awk '/^-- @hold-back$/ { skip = 1; next } /^-- @/ { skip = 0 } !skip' \
		examples/jobs-table/adapter.sql >"$BATS_TEST_TMPDIR/adapter.sql"
	cp "$BATS_TEST_TMPDIR/adapter.sql" examples/jobs-table/adapter.sql
	run --separate-stderr seed-gen examples/jobs-table/seed.yaml
	echo "$stderr" >&2
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"adapter.sql:"*"section @hold-back: missing"* ]]
}

@test "jobs-table: an account section that fails stops the run, naming the section and the adapter file" {
	sed -i 's/GRANT USAGE, SELECT ON SEQUENCE work.jobs_id_seq TO/GRANT USAGE, SELECT ON SEQUENCE work.no_such_seq TO/' \
		examples/jobs-table/adapter.sql
	git commit -q -am 'the account section names a sequence that is not there'
	rehearse_example unique
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"granting the sandbox account its queue (section account of examples/jobs-table/adapter.sql): ERROR:  relation \"work.no_such_seq\" does not exist"* ]]
	assert_equal "$(ls records)" allowed_signers
}
