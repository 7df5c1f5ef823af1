#!/usr/bin/env bats
# queue-check proves an adapter on a sandbox of its own: the three built
# in pass, their libraries installed by the workers' own setups; a copy
# of an adapter broken in one section fails naming that section.

load helper

setup() {
	cd "$BATS_TEST_DIRNAME/.."
	unset PGHOST PGPORT PGDATABASE PGUSER DATABASE_URL IDEM_DATABASE
	out="$BATS_TEST_TMPDIR/out"
	err="$BATS_TEST_TMPDIR/err"
}

pgboss_setup='node tests/fixtures/workers/pgboss-worker.js --setup unique'
graphile_setup='node tests/fixtures/workers/graphile-worker.js --setup unique'

# qc ARGS...: queue-check, its lines in $out, its messages in $err.
qc() {
	run --separate-stderr queue-check "$@"
	printf '%s\n' "$output" >"$out"
	printf '%s\n' "$stderr" >"$err"
}

# Every line ok or skipped.
assert_all_ok() {
	cat "$out" "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(grep -cv -e ' ok$' -e ' skipped (absent)$' "$out")" 0
	assert_equal "$(wc -l <"$out")" 22
	# no sandbox left behind
	assert_equal "$(ls -d /tmp/queue-check.* 2>/dev/null | wc -l)" "$leftover"
}

# A copy of a built-in adapter, as a team's file, edited by a sed script.
broken() {
	sed "$2" "lib/queues/$1.sql" >"$BATS_TEST_TMPDIR/$1.sql"
	! cmp -s "lib/queues/$1.sql" "$BATS_TEST_TMPDIR/$1.sql"
}

@test "idem's own queue passes every section, its optional ones present" {
	leftover=$(ls -d /tmp/queue-check.* 2>/dev/null | wc -l)
	qc idem
	assert_all_ok
	for s in copy published-after published-span hold-lease consume complete deliveries account denied; do
		grep -qx "$s ok" "$out"
	done
	grep -qx 'rescue skipped (absent)' "$out"
}

@test "pg-boss passes every section, installed by a worker's own setup" {
	leftover=$(ls -d /tmp/queue-check.* 2>/dev/null | wc -l)
	qc -s "$pgboss_setup" -q invoice-line pg-boss
	assert_all_ok
	for s in prepare hold-lease rescue setup-schemas deliveries unacked account denied; do
		grep -qx "$s ok" "$out"
	done
}

@test "graphile-worker passes every section, installed by a worker's own setup" {
	leftover=$(ls -d /tmp/queue-check.* 2>/dev/null | wc -l)
	qc -s "$graphile_setup" graphile-worker
	assert_all_ok
	grep -qx 'hold-lease skipped (absent)' "$out"
	grep -qx 'rescue ok' "$out"
}

@test "pg-boss 12 and graphile-worker 0.18, today's majors, pass every section through the same adapters" {
	leftover=$(ls -d /tmp/queue-check.* 2>/dev/null | wc -l)
	qc -s 'node tests/fixtures/workers/pgboss12-worker.js --setup unique' -q invoice-line pg-boss
	assert_all_ok
	for s in prepare hold-lease rescue consume complete deliveries account denied; do
		grep -qx "$s ok" "$out"
	done
	qc -s 'node tests/fixtures/workers/graphile018-worker.js --setup unique' graphile-worker
	assert_all_ok
	for s in consume complete expire deliveries account denied; do
		grep -qx "$s ok" "$out"
	done
}

@test "a team's adapters pass: the jobs table of examples/ and the one idem-sandbox(1) shows, as printed" {
	leftover=$(ls -d /tmp/queue-check.* 2>/dev/null | wc -l)
	qc -s 'psql -Xq -v ON_ERROR_STOP=1 -f examples/jobs-table/schema.sql' -q invoice-line \
		examples/jobs-table/adapter.sql
	assert_all_ok
	for s in consume complete hold-lease expire deliveries unacked account denied; do
		grep -qx "$s ok" "$out"
	done
	# the manual's two literal blocks of "Writing an adapter": the table
	# (its CREATE TABLE) and the adapter file, as mandoc prints them
	man=$BATS_TEST_TMPDIR/man
	mkdir "$man"
	awk -v dir="$man" '/^\.Ss Writing an adapter/ { on = 1 }
		on && /^\.Sh / { on = 0 }
		on && /^\.Bd -literal/ { n++; lit = 1; next }
		on && /^\.Ed/ { lit = 0 }
		on && lit { print > (dir "/block" n) }' man/idem-sandbox.1
	sed -i "s/\\\\(aq/'/g" "$man/block1" "$man/block2"
	{ echo 'CREATE SCHEMA app;'; sed -n '/^CREATE TABLE/,/;$/p' "$man/block1"; } >"$man/schema.sql"
	grep -q '^-- kind: jobs-table$' "$man/block2"
	qc -s "psql -Xq -v ON_ERROR_STOP=1 -f $man/schema.sql" -q invoice-line "$man/block2"
	assert_all_ok
	for s in consume complete hold-lease expire deliveries unacked account denied; do
		grep -qx "$s ok" "$out"
	done
}

@test "a team's task table with no lease, taken in id order and completed by update, passes: what the rescue frees may come first" {
	leftover=$(ls -d /tmp/queue-check.* 2>/dev/null | wc -l)
	qc -s 'psql -Xq -v ON_ERROR_STOP=1 -f tests/fixtures/queues/team-tasks-schema.sql' -q invoice-line \
		tests/fixtures/queues/team-tasks.sql
	assert_all_ok
	for s in consume complete expire rescue deliveries unacked account denied; do
		grep -qx "$s ok" "$out"
	done
	grep -qx 'hold-lease skipped (absent)' "$out"
}

@test "an adapter file without a required section is refused with status 2, naming it and the line" {
	broken idem '/^-- @deliveries-of-key$/,/^$/d'
	qc "$BATS_TEST_TMPDIR/idem.sql"
	[ "$status" -eq 2 ]
	assert_equal "$output" ""
	[[ "$stderr" == "queue-check: $BATS_TEST_TMPDIR/idem.sql:"[0-9]*": section @deliveries-of-key: missing;"* ]]
	broken pg-boss '/^-- @denied$/,$d'
	qc "$BATS_TEST_TMPDIR/pg-boss.sql"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"pg-boss.sql:"[0-9]*": section @denied: missing;"* ]]
	broken graphile-worker 's/^-- @unacked$/-- @unacked-count/'
	qc "$BATS_TEST_TMPDIR/graphile-worker.sql"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"graphile-worker.sql:"[0-9]*": section @unacked-count: not a section of an adapter"* ]]
}

@test "idem: deliveries one attempt too high fails deliveries alone, with status 1" {
	broken idem 's/^SELECT d\.msg_id::text, m\.job_id, m\.business_key, d\.read_ct,$/SELECT d.msg_id::text, m.job_id, m.business_key, d.read_ct + 1,/'
	qc "$BATS_TEST_TMPDIR/idem.sql"
	[ "$status" -eq 1 ]
	grep -x 'deliveries FAIL: row 1: message [0-9]* (qc-0001 copy 0) attempt 2; consume had taken it 1 time then' "$out"
	assert_equal "$(grep -c FAIL "$out")" 1
}

@test "pg-boss: deliveries that always say attempt 1 miss the message taken again" {
	broken pg-boss "s/^SELECT \* FROM idem_run.ledger_deliveries('pg-boss', \$1)$/SELECT msg_id, job_id, business_key, 1, delivered_at, backend_pid, acked_at FROM idem_run.ledger_deliveries('pg-boss', \$1)/"
	qc -s "$pgboss_setup" "$BATS_TEST_TMPDIR/pg-boss.sql"
	[ "$status" -eq 1 ]
	grep -x 'deliveries FAIL: row [0-9]*: message [0-9a-f-]* (qc-0003 copy 0) attempt 1; consume had taken it 2 times then' "$out"
	assert_equal "$(grep -c FAIL "$out")" 1
}

@test "graphile-worker: deliveries one attempt too high, and an unacked that counts the acked, fail by name" {
	broken graphile-worker "s/^SELECT \* FROM idem_run.ledger_deliveries('graphile-worker', \$1)$/SELECT msg_id, job_id, business_key, attempt + 1, delivered_at, backend_pid, acked_at FROM idem_run.ledger_deliveries('graphile-worker', \$1)/; s/^SELECT count(\*) FROM graphile_worker._private_jobs WHERE id = ANY (\$1::text\[\]::bigint\[\])$/SELECT count(*) + 1 FROM graphile_worker._private_jobs WHERE id = ANY (\$1::text[]::bigint[])/"
	qc -s "$graphile_setup" "$BATS_TEST_TMPDIR/graphile-worker.sql"
	[ "$status" -eq 1 ]
	grep -x 'deliveries FAIL: row 1: message [0-9]* (qc-000[12] copy 0) attempt 2; consume had taken it 1 time then' "$out"
	grep -x 'unacked FAIL: says 3 of the 4 messages are not acked; 2 are not' "$out"
	assert_equal "$(grep -c FAIL "$out")" 2
}

@test "idem: a publish that gives a position twice, a published-after short of a column: each fails its section, nothing crashes" {
	broken idem 's/^SELECT b.ord, b.msg_id::text,/SELECT CASE b.ord WHEN 3 THEN 2 ELSE b.ord END, b.msg_id::text,/'
	qc "$BATS_TEST_TMPDIR/idem.sql"
	[ "$status" -eq 1 ]
	grep -q '^publish FAIL: row 3: position 2, msg_id "[0-9]*"; each position from 1 to [0-9]* once, and a msg_id$' "$out"
	broken idem 's/^SELECT job_id, copy, msg_id, enqueued_at$/SELECT job_id, copy/'
	qc "$BATS_TEST_TMPDIR/idem.sql"
	[ "$status" -eq 1 ]
	grep -qx 'published-after FAIL: gave 2 columns; job id, copy and msg_id' "$out"
	grep -qx 'publish ok' "$out"
}

@test "idem: a publish that refuses a clash with another error than a unique violation fails publish" {
	# publish through a function of the adapter's prepare that turns the
	# unique violation into invalid_parameter_value
	broken idem "$(cat <<-'SED'
	s/^FROM idem.send_batch(:'queue', \$1, \$3, \$4, \$2) b$/FROM public.qc_send(:'queue', $1, $3, $4, $2) b/
	$a\
	\
	-- @prepare\
	CREATE OR REPLACE FUNCTION public.qc_send(q text, j text[], k text[], p jsonb[], c integer[])\
	RETURNS TABLE (ord bigint, msg_id bigint, enqueued_at timestamptz, published boolean)\
	LANGUAGE plpgsql AS $f$\
	BEGIN\
	RETURN QUERY SELECT * FROM idem.send_batch(q, j, k, p, c);\
	EXCEPTION WHEN unique_violation THEN\
	RAISE invalid_parameter_value USING MESSAGE = 'seen before';\
	END $f$
	SED
	)"
	qc "$BATS_TEST_TMPDIR/idem.sql"
	[ "$status" -eq 1 ]
	grep -qx 'publish FAIL: message qc-0001 copy 0 published again with another payload: SQLSTATE 22023, seen before; it must be a unique violation (SQLSTATE 23505)' "$out"
	grep -qx 'prepare ok' "$out"
}

@test "idem: observe and hold-lease are installed one after the other, and the one that fails is named" {
	# a hold-lease on a table that is not there: its error names no section
	broken idem 's/^CREATE TRIGGER idem_run_hold_lease BEFORE UPDATE OF read_ct ON idem.message FOR EACH ROW$/CREATE TRIGGER idem_run_hold_lease BEFORE UPDATE OF read_ct ON idem.no_such_table FOR EACH ROW/'
	qc "$BATS_TEST_TMPDIR/idem.sql"
	[ "$status" -eq 1 ]
	grep -qx 'hold-lease FAIL: installing it failed: ERROR:  relation "idem.no_such_table" does not exist' "$out"
	assert_equal "$(grep FAIL "$out" | grep -cv 'FAIL: not checked: hold-lease failed first$')" 1
	# an observe whose error speaks of a hold is observe's all the same
	broken idem 's/^CREATE TRIGGER idem_run_ack BEFORE UPDATE OF acked_at ON idem.message FOR EACH ROW$/CREATE TRIGGER idem_run_ack BEFORE UPDATE OF holder ON idem.message FOR EACH ROW/'
	qc "$BATS_TEST_TMPDIR/idem.sql"
	[ "$status" -eq 1 ]
	grep -qx 'observe FAIL: installing it failed: ERROR:  column "holder" of relation "message" does not exist' "$out"
	assert_equal "$(grep FAIL "$out" | grep -cv 'FAIL: not checked: observe failed first$')" 1
}

@test "pg-boss: a denied that names what the account is granted fails denied" {
	broken pg-boss "s/^\t\t('pgboss.queue', 'TRUNCATE'), ('pgboss.queue', 'DELETE'),$/\t\t('pgboss.queue', 'TRUNCATE'), ('pgboss.queue', 'DELETE'), ('pgboss.job', 'UPDATE'),/"
	qc -s "$pgboss_setup" "$BATS_TEST_TMPDIR/pg-boss.sql"
	[ "$status" -eq 1 ]
	grep -x 'denied FAIL: says the account may not UPDATE pgboss.job, and it can' "$out"
	assert_equal "$(grep -c FAIL "$out")" 1
}

@test "idem: an account that reaches every queue fails account" {
	broken idem "s/'DELETE FROM idem.queue_account WHERE account = %L AND queue <> %L; '/'DELETE FROM idem.queue_account WHERE account = %L AND queue <> %L; ' || 'INSERT INTO idem.queue_account (queue, account) VALUES (%L || ''-other'', %L) ON CONFLICT DO NOTHING; '/; s/\$1::text, :'queue', :'queue', \$1::text))/\$1::text, :'queue', :'queue', \$1::text, :'queue', \$1::text))/"
	qc "$BATS_TEST_TMPDIR/idem.sql"
	[ "$status" -eq 1 ]
	grep -x "account FAIL: as the account, consume of queue queue-check-other took its message [0-9]*: the account reaches a queue not its own" "$out"
}

@test "a setup that fails, and a library not installed, are the environment's: status 3" {
	qc -s 'echo no migration >&2; exit 4' pg-boss
	[ "$status" -eq 3 ]
	assert_equal "$output" ""
	[[ "$stderr" == *"no migration"*"queue-check: the setup command failed with status 4: echo no migration >&2; exit 4" ]]
	qc graphile-worker
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"queue-check: queue queue-check is a graphile-worker queue, but graphile-worker's schema is not installed in this database: "* ]]
}

@test "usage: no adapter, two, or an unknown kind is status 2" {
	qc
	[ "$status" -eq 2 ]
	[[ "$stderr" == "usage: queue-check [-s setup] [-q queue] adapter | kind" ]]
	qc idem pg-boss
	[ "$status" -eq 2 ]
	qc sqs
	[ "$status" -eq 2 ]
	[[ "$stderr" == "queue-check: queue kind sqs: no adapter (idem, pg-boss and graphile-worker have one)" ]]
}
