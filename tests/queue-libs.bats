#!/usr/bin/env bats
# Workers written on pg-boss 10 and graphile-worker 0.16, with no idem code,
# on the real sandbox: what idem's queue adapters rest on. Jobs go straight
# into each library's own tables with plain SQL, as dup-publish puts them
# there; the library's worker takes them; triggers on its job table see each
# delivery and completion, as kill-at's do. A new version of a library that
# changes any of this fails here.

load helper
load sandbox-tests

setup() {
	cd "$BATS_TEST_DIRNAME/.."
	err="$BATS_TEST_TMPDIR/err"
	queue=rehearsal_libs
	worker=
}

teardown() {
	[ -z "$worker" ] || { kill -KILL "$worker" 2>/dev/null; wait "$worker" 2>/dev/null; } || true
	cat "$err" >&2 2>/dev/null || true
}

line() {
	printf '{"invoice_id": "%s", "line_no": 1, "amount_cents": 1250, "currency": "EUR"}' "$1"
}

# probe TABLE COLUMN: a row in probe.event for every row inserted, updated
# or deleted in TABLE (schema, op, the row's job_id or id, its COLUMN, and
# the transaction and server process that wrote it), on a fresh probe.event.
probe() {
	psql -X -q -v ON_ERROR_STOP=1 <<-SQL
		SET client_min_messages = warning;
		CREATE SCHEMA IF NOT EXISTS probe;
		CREATE TABLE IF NOT EXISTS probe.event (n bigint GENERATED ALWAYS AS IDENTITY, schema text,
		    op text, id text, value text, xact bigint DEFAULT txid_current(), pid int DEFAULT pg_backend_pid());
		CREATE OR REPLACE FUNCTION probe.seen() RETURNS trigger LANGUAGE plpgsql AS \$\$
		DECLARE r jsonb := to_jsonb(CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END);
		BEGIN
		    INSERT INTO probe.event (schema, op, id, value)
		    VALUES (TG_TABLE_SCHEMA, TG_OP, COALESCE(r->>'job_id', r->>'id'), r->>TG_ARGV[0]);
		    RETURN NULL;
		END \$\$;
		CREATE TRIGGER probe AFTER INSERT OR UPDATE OR DELETE ON $1
		    FOR EACH ROW EXECUTE FUNCTION probe.seen('$2');
	SQL
}

# What the probe saw of one job's row, "op:value,...", in order.
seen() {
	sql "SELECT string_agg(op || ':' || value, ',' ORDER BY n) FROM probe.event WHERE schema = '$1' AND id = '$2'"
}

# Library events (fetches, completions) written in a transaction that also
# wrote an effect: none when the library completes in a statement of its own.
shared_transactions() {
	sql "SELECT count(*) FROM probe.event e JOIN probe.event l ON l.xact = e.xact AND l.schema <> 'demo' WHERE e.schema = 'demo'"
}

# A hold on the effect: the first insert of the line of invoice $1 sleeps
# until its session is terminated.
hold_effect() {
	psql -X -q -v ON_ERROR_STOP=1 <<-SQL
		CREATE FUNCTION demo.hold() RETURNS trigger LANGUAGE plpgsql AS \$\$
		BEGIN PERFORM pg_sleep(600); RETURN NEW; END \$\$;
		CREATE TRIGGER hold BEFORE INSERT ON demo.invoice_lines
		    FOR EACH ROW WHEN (NEW.invoice_id = '$1') EXECUTE FUNCTION demo.hold();
	SQL
}

# wait_for SQL: until the query gives t, polling, for at most 60 seconds.
wait_for() {
	local i
	for ((i = 0; i < 300; i++)); do
		[ "$(sql "$1")" = t ] && return 0
		sleep 0.2
	done
	echo "waited 60 s in vain for: $1" >&2
	return 1
}

# start WORKER ARGUMENT...: the worker in the background, its pid in
# $worker, its output appended to $err.
start() {
	node "tests/fixtures/workers/$1" "${@:2}" >>"$err" 2>&1 3>&- &
	worker=$!
}

# Stops the worker as kill-at does at the end of a run.
stop() {
	kill -TERM "$worker"
	wait "$worker" || true
	worker=
}

# kill_held: SIGKILL to the worker whose effect is held, and its session
# terminated, as kill-at does at a kill point; returns once it is gone.
kill_held() {
	wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep')"
	kill -KILL "$worker"
	wait "$worker" || true
	worker=
	sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep'" >/dev/null
	wait_for "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep')"
	sql 'DROP TRIGGER hold ON demo.invoice_lines'
}

# A job as dup-publish puts it into pg-boss: its id chosen by the publisher.
boss_insert() {
	sql "INSERT INTO pgboss.job (id, name, data, state, retry_limit, expire_in, policy)
	     VALUES ('$1', '$queue', '$2', 'created', 4, interval '30 seconds', 'standard')" >/dev/null
}

# A job as dup-publish puts it into graphile-worker; its id on standard output.
graphile_add() {
	sql "SELECT id FROM graphile_worker.add_job('$queue', '$1'::json, max_attempts => 5)"
}

A=aaaaaaaa-0000-4000-8000-000000000001
A2=aaaaaaaa-0000-4000-8000-000000000002
B=bbbbbbbb-0000-4000-8000-000000000001

@test "pg-boss: two jobs with one payload are both delivered, and the unique guard keeps one line" {
	node tests/fixtures/workers/pgboss-worker.js --setup unique "$queue"
	assert_equal "$(sql 'SELECT version FROM pgboss.version')" 24
	assert_equal "$(sql "SELECT policy FROM pgboss.queue WHERE name = '$queue'")" standard
	probe pgboss.job state
	probe demo.invoice_lines job_id
	boss_insert "$A" "$(line inv-2001)"
	boss_insert "$A2" "$(line inv-2001)"
	# one partition per queue: a job of a queue without its row has nowhere to go
	run ! sql "INSERT INTO pgboss.job (id, name, data) VALUES ('$B', 'no_such_queue', '{}')"
	[[ "$output" == *'no partition of relation "job" found for row'* ]]

	IDEM_QUEUE=$queue start pgboss-worker.js unique
	wait_for "SELECT count(*) = 2 FROM pgboss.job WHERE name = '$queue' AND state = 'completed'"
	stop
	assert_equal "$(sql "SELECT string_agg(id || ' ' || retry_count, ',' ORDER BY id) FROM pgboss.job WHERE name = '$queue'")" \
		"$A 0,$A2 0"
	# a delivery is an UPDATE to active, a completion an UPDATE to completed
	assert_equal "$(seen pgboss "$A")" "INSERT:created,UPDATE:active,UPDATE:completed"
	assert_equal "$(seen pgboss "$A2")" "INSERT:created,UPDATE:active,UPDATE:completed"
	assert_equal "$(sql 'SELECT job_id FROM demo.invoice_lines')" "$A"
	grep -q "^branch=inserted job=$A attempt=1 msg_id=$A guard=unique worker=pg-boss$" "$err"
	grep -q "^branch=conflict-noop job=$A2 attempt=1 msg_id=$A2 guard=unique worker=pg-boss$" "$err"
	# the completion is a statement of its own, on another connection
	assert_equal "$(shared_transactions)" 0
	assert_equal "$(sql "SELECT count(*) FROM probe.event e JOIN probe.event c ON c.pid = e.pid AND c.value = 'completed' WHERE e.schema = 'demo'")" 0
}

@test "pg-boss: a killed worker's job stays active; made retry, it is delivered again with retry_count 1" {
	node tests/fixtures/workers/pgboss-worker.js --setup unique "$queue"
	hold_effect inv-2001
	boss_insert "$A" "$(line inv-2001)"
	start pgboss-worker.js unique "$queue"
	kill_held
	assert_equal "$(sql "SELECT state || ' ' || retry_count FROM pgboss.job WHERE id = '$A'")" "active 0"
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 0

	# a new worker takes a later job and leaves the active one alone
	start pgboss-worker.js unique "$queue"
	boss_insert "$B" "$(line inv-2002)"
	wait_for "SELECT state = 'completed' FROM pgboss.job WHERE id = '$B'"
	assert_equal "$(sql "SELECT state FROM pgboss.job WHERE id = '$A'")" active

	# as pg-boss's expiry would, after expire_in and its maintenance
	sql "UPDATE pgboss.job SET state = 'retry' WHERE name = '$queue' AND id = '$A' AND state = 'active'"
	wait_for "SELECT state = 'completed' FROM pgboss.job WHERE id = '$A'"
	stop
	assert_equal "$(sql "SELECT retry_count FROM pgboss.job WHERE id = '$A'")" 1
	grep -q "^branch=inserted job=$A attempt=2 msg_id=$A " "$err"
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 2
}

@test "graphile-worker: two add_job calls with one payload are both delivered, and the unique guard keeps one line" {
	node tests/fixtures/workers/graphile-worker.js --setup unique
	assert_equal "$(sql 'SELECT max(id) FROM graphile_worker.migrations')" 18
	probe graphile_worker._private_jobs attempts
	probe demo.invoice_lines job_id
	a=$(graphile_add "$(line inv-2001)")
	a2=$(graphile_add "$(line inv-2001)")
	assert_equal "$(sql "SELECT count(*) FROM graphile_worker._private_jobs WHERE id IN ($a, $a2)")" 2

	start graphile-worker.js unique "$queue"
	wait_for "SELECT NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs WHERE id IN ($a, $a2))"
	stop
	# a delivery is an UPDATE of attempts, a completion the row's DELETE
	assert_equal "$(seen graphile_worker "$a")" "INSERT:0,UPDATE:1,DELETE:1"
	assert_equal "$(seen graphile_worker "$a2")" "INSERT:0,UPDATE:1,DELETE:1"
	assert_equal "$(sql 'SELECT job_id FROM demo.invoice_lines')" "$a"
	grep -q "^branch=inserted job=$a attempt=1 msg_id=$a guard=unique worker=graphile-worker$" "$err"
	grep -q "^branch=conflict-noop job=$a2 attempt=1 msg_id=$a2 guard=unique worker=graphile-worker$" "$err"
	# the completion is a statement of its own
	assert_equal "$(shared_transactions)" 0
}

@test "graphile-worker: a killed worker's job stays locked; unlocked, it is delivered again as attempt 2" {
	node tests/fixtures/workers/graphile-worker.js --setup unique
	hold_effect inv-2001
	a=$(graphile_add "$(line inv-2001)")
	start graphile-worker.js unique "$queue"
	kill_held
	assert_equal "$(sql "SELECT attempts || ' ' || (locked_at IS NOT NULL) || ' ' || is_available FROM graphile_worker._private_jobs WHERE id = $a")" \
		"1 true false"
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 0

	# a new worker takes a later job and leaves the locked one alone
	IDEM_QUEUE=$queue start graphile-worker.js unique
	b=$(graphile_add "$(line inv-2002)")
	wait_for "SELECT NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs WHERE id = $b)"
	assert_equal "$(sql "SELECT attempts FROM graphile_worker._private_jobs WHERE id = $a AND locked_at IS NOT NULL")" 1

	# as graphile-worker's own reset does after 4 hours
	sql "UPDATE graphile_worker._private_jobs SET locked_at = NULL, locked_by = NULL WHERE id = $a"
	wait_for "SELECT NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs WHERE id = $a)"
	stop
	grep -q "^branch=inserted job=$a attempt=2 msg_id=$a " "$err"
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 2
}

@test "the library workers refuse a missing queue and a bad guard" {
	run -2 env -u IDEM_QUEUE node tests/fixtures/workers/pgboss-worker.js unique
	assert_equal "$output" "pgboss-worker: no queue: give one after the guard or set IDEM_QUEUE"
	run -2 env -u IDEM_QUEUE node tests/fixtures/workers/pgboss-worker.js --setup unique
	assert_equal "$output" "pgboss-worker: no queue: give one after the guard or set IDEM_QUEUE"
	run -2 node tests/fixtures/workers/graphile-worker.js none q
	assert_equal "${lines[0]}" "usage: node graphile-worker.js unique | check-then-insert [queue]"
}
