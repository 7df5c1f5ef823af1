#!/usr/bin/env bats
# Teams' workers on pg-boss and graphile-worker, written as those
# libraries' documentation shows and with no idem code, rehearsed on the
# real sandbox through the queue adapters (idem-sandbox(1), QUEUE
# ADAPTERS): published into the library's own tables, killed at the
# database's kill points, raced, counted; the library's own tables are the
# referee.

load helper
load sandbox-tests

# pipeline LIBRARY GUARD: the worker's own setup (its library's migration
# and the effect table), then the seed through the pipeline, the worker
# under kill-at; the stream in $out, the status in $status.
pipeline() {
	local worker=tests/fixtures/workers/$1-worker.js seed=tests/fixtures/seeds/$1-invoice-line.yaml
	local queue
	queue=$(awk '$1 == "queue:" { gsub(/[{},]/, ""); print $5 }' "$seed")
	node "$worker" --setup "$2" "$queue"
	run_pipeline "$seed" 120s node "$worker" "$2"
}

# "step:job:attempt:action:observed," of the step rows, sorted.
steps() {
	awk -F '\t' '$1 == "step" { printf "%s:%s:%s:%s:%s\n", $5, $6, $7, $8, $9 }' "$out" | sort | tr '\n' ,
}

# "job:attempt:rows_written:branch," of the attempt rows, sorted.
attempts() {
	awk -F '\t' '$1 == "attempt" { printf "%s:%s:%s:%s\n", $2, $4, $9, $10 }' "$out" | sort | tr '\n' ,
}

kills() {
	awk -F '\t' '$1 == "kill" { printf "%s:%s:%s\n", $5, $3, $8 }' "$out" | sort | tr '\n' ,
}

digest() {
	awk -F '\t' '$1 == "digest" && $2 == "after" { print $3 }' "$out"
}

# The attempt that wrote the raced key's line, and the one released first.
race_writer() {
	awk -F '\t' '$1 == "attempt" && $2 == "job-0005" && $9 == 1 { print $5 }' "$out"
}
race_first() {
	awk -F '\t' '$1 == "step" && $6 == "job-0005" && $8 == "release" { print $4; exit }' "$out"
}

# Every scenario, as the correct worker lives through it.
check_every_scenario() {
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total effects)" 6
	assert_equal "$(total duplicates)" 0
	assert_equal "$(total pending)" 0
	assert_equal "$(kills)" \
		"after-commit:job-0002:database,before-commit:job-0003:database,before-write:job-0004:database,"
	# rows written per attempt, from the ledger: the line killed after its
	# commit stayed and its retry found it; the lines killed before their
	# commit or write did not, and their retries wrote them; the duplicate
	# copy and the race's second found the line there. The branches are
	# the worker's own lines (it logs before it commits).
	assert_equal "$(attempts)" \
		"job-0001:1:0:conflict-noop,job-0001:1:1:inserted,job-0002:1:1:inserted,job-0002:2:0:conflict-noop,job-0003:1:0:inserted,job-0003:2:1:inserted,job-0004:1:0:\\N,job-0004:2:1:inserted,job-0005:1:0:conflict-noop,job-0005:1:1:inserted,job-0006:1:1:inserted,"
	# the race: both held at before-write, the first released wrote
	[[ "$(steps)" == *"before-write:job-0005:1:hold:database,before-write:job-0005:1:hold:database,before-write:job-0005:1:release:database,before-write:job-0005:1:release:database,"* ]]
	assert_equal "$(race_writer)" "$(race_first)"
	assert_equal "$(rows_of recover "$out")" 3
	# as the seed's sandbox account, which held its list and no more
	[ "$(rows_of grant "$out")" -gt 0 ]
	assert_equal "$(awk -F '\t' '($1 == "grant" && $7 != "yes") || ($1 == "denied" && $5 != "no")' "$out")" ""
}

@test "pg-boss: a worker as its documentation shows lives through every scenario, seen in the database, and again with the same digest" {
	pipeline pgboss unique
	check_every_scenario
	assert_equal "$(awk -F '\t' '$1 == "queue" { print $2 " " $3 " " $4 }' "$out")" "pg-boss invoice-line 24"
	# pg-boss's own table: all 8 messages completed (6 jobs, the forced
	# duplicate and the race's copy), the forced duplicate a
	# second job with the same data, both completed
	assert_equal "$(sql "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FROM pgboss.job WHERE name = 'invoice-line'")" "8|8"
	assert_equal "$(sql "SELECT count(DISTINCT id) FROM pgboss.job WHERE name = 'invoice-line' AND state = 'completed' AND data->>'invoice_id' = 'inv-5001'")" 2
	# the retried jobs were delivered twice by pg-boss: its retry_count
	assert_equal "$(sql "SELECT string_agg(data->>'invoice_id' || ':' || retry_count, ',' ORDER BY data->>'invoice_id') FROM pgboss.job WHERE name = 'invoice-line' AND retry_count > 0")" \
		"inv-5002:1,inv-5003:1,inv-5004:1"
	# the publish rows name pg-boss's own ids
	assert_equal "$(awk -F '\t' '$1 == "publish" { print $4 }' "$out" | sort | tr '\n' ' ')" \
		"$(sql "SELECT string_agg(id::text, ' ' ORDER BY id::text) FROM pgboss.job WHERE name = 'invoice-line'") "
	# run again, as a rerun would: the same digest, over new ids of pg-boss's
	first=$(digest)
	queue_reset
	pipeline pgboss unique
	[ "$status" -eq 0 ]
	assert_equal "$(digest)" "$first"
	assert_equal "$(awk -F '\t' '$1 == "publish" { print $4 }' "$out" | sort | md5sum)" \
		"$(sql "SELECT id FROM pgboss.job WHERE name = 'invoice-line' ORDER BY id::text" | md5sum)"
}

@test "pg-boss: the sandbox account reaches its own queue's jobs only, and purges nothing" {
	node tests/fixtures/workers/pgboss-worker.js --setup unique invoice-line
	# another rehearsal's queue in the same tables, with a job waiting
	sql "SELECT pgboss.create_queue('other-rehearsal', '{}'::json)" >/dev/null
	sql "INSERT INTO pgboss.job (name, data) VALUES ('other-rehearsal', '{\"secret\": 1}')" >/dev/null
	other=$(sql "SELECT 'pgboss.' || partition_name FROM pgboss.queue WHERE name = 'other-rehearsal'")
	cat >"$BATS_TEST_TMPDIR/intruder.sh" <<-SH
		#!/bin/sh
		# tries what the account may not, once, then works as the team's worker
		if [ ! -e "$BATS_TEST_TMPDIR/tried" ]; then
			: >"$BATS_TEST_TMPDIR/tried"
			psql -X -A -t -c "SELECT 'seen=' || count(*) FROM pgboss.job WHERE name = 'other-rehearsal'" 2>&1
			psql -X -A -t -c "SELECT 'queues=' || count(*) FROM pgboss.queue" 2>&1
			psql -X -c "SELECT * FROM $other" 2>&1
			psql -X -c "UPDATE pgboss.job SET state = 'cancelled' WHERE name = 'other-rehearsal'" 2>&1
			psql -X -c "INSERT INTO pgboss.job (name, data) VALUES ('other-rehearsal', '{}')" 2>&1
			psql -X -c 'DELETE FROM pgboss.job' 2>&1
		fi
		exec node tests/fixtures/workers/pgboss-worker.js unique
	SH
	chmod +x "$BATS_TEST_TMPDIR/intruder.sh"
	run_pipeline tests/fixtures/seeds/pgboss-invoice-line.yaml 120s "$BATS_TEST_TMPDIR/intruder.sh"
	check_every_scenario
	log=$(awk -F '\t' '$1 == "log" { print $5 }' "$out")
	# its own queue's row only, and none of the other's jobs
	assert_contains "$log" "seen=0" "queues=1" "ERROR:  permission denied for table ${other#pgboss.}" \
		"UPDATE 0" "ERROR:  new row violates row-level security policy for table" \
		"ERROR:  permission denied for table job"
	# the other queue's job is as it was; the account could not read it
	assert_equal "$(sql "SELECT state FROM pgboss.job WHERE name = 'other-rehearsal'")" created
	assert_equal "$(awk -F '\t' -v t="$other" '$1 == "denied" && $3 == t { print $4 ":" $5 }' "$out")" "SELECT:no"
}

@test "pg-boss: a check-then-insert worker is caught by the race, the key named" {
	pipeline pgboss check-then-insert
	[ "$status" -eq 1 ]
	assert_equal "$(total duplicates)" 1
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "key" && $6 > 1 { print $4 ":" $6 }' "$out")" \
		'["inv-5005",1]:2'
}

@test "graphile-worker: a worker as its documentation shows lives through every scenario, seen in the database, and again with the same digest" {
	pipeline graphile unique
	check_every_scenario
	assert_equal "$(awk -F '\t' '$1 == "queue" { print $2 " " $3 " " $4 }' "$out")" \
		"graphile-worker invoice_line 18"
	# graphile-worker deleted every job it completed
	assert_equal "$(sql 'SELECT count(*) FROM graphile_worker._private_jobs')" 0
	# the forced duplicate: two jobs of graphile-worker's, each delivered
	# and acked, and the worker's own lines name both of graphile's ids
	ids=$(awk -F '\t' '$1 == "publish" && $2 == "job-0001" { print $4 }' "$out" | sort -n | tr '\n' ' ')
	assert_equal "$(wc -w <<<"$ids")" 2
	for id in $ids; do
		grep -q "^log	.*branch=[a-z-]* job=$id attempt=1 msg_id=$id " "$out"
		[ "$(awk -F '\t' -v id="$id" '$1 == "attempt" && $3 == id && $8 != "\\N"' "$out" | wc -l)" -eq 1 ]
	done
	# run again, as a rerun would: the same digest
	first=$(digest)
	queue_reset
	pipeline graphile unique
	[ "$status" -eq 0 ]
	assert_equal "$(digest)" "$first"
}

@test "graphile-worker: a check-then-insert worker is caught by the race, the key named" {
	pipeline graphile check-then-insert
	[ "$status" -eq 1 ]
	assert_equal "$(total duplicates)" 1
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "key" && $6 > 1 { print $4 ":" $6 }' "$out")" \
		'["inv-5005",1]:2'
}

@test "pg-boss 12: a worker as its documentation shows lives through every scenario, seen in pg-boss 12's own table" {
	pipeline pgboss12 unique
	check_every_scenario
	# the schema version the adapter tells pg-boss 12 by, in the stream
	assert_equal "$(awk -F '\t' '$1 == "queue" { print $2 " " $3 " " $4 }' "$out")" "pg-boss invoice-line 46"
	# pg-boss 12's layout: the queue's jobs in job_common, the default
	# partition, all 8 completed; the retried jobs fetched again by pg-boss
	# (its retry_count); the baseline's job with the seed's lease, in seconds
	assert_equal "$(sql "SELECT table_name FROM pgboss.queue WHERE name = 'invoice-line'")" job_common
	assert_equal "$(sql "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FROM pgboss.job_common WHERE name = 'invoice-line'")" "8|8"
	assert_equal "$(sql "SELECT string_agg(data->>'invoice_id' || ':' || retry_count, ',' ORDER BY data->>'invoice_id') FROM pgboss.job WHERE name = 'invoice-line' AND retry_count > 0")" \
		"inv-5002:1,inv-5003:1,inv-5004:1"
	assert_equal "$(sql "SELECT expire_seconds FROM pgboss.job WHERE data->>'invoice_id' = 'inv-5006'")" 4
	assert_equal "$(awk -F '\t' '$1 == "publish" { print $4 }' "$out" | sort | md5sum)" \
		"$(sql "SELECT id FROM pgboss.job WHERE name = 'invoice-line' ORDER BY id::text" | md5sum)"
}

@test "pg-boss 12: the sandbox account, in the table every queue shares, reaches its own queue's jobs only" {
	node tests/fixtures/workers/pgboss12-worker.js --setup unique invoice-line
	# another rehearsal's queue, whose jobs pg-boss 12 keeps in the same
	# table as this one's (job_common), with a job waiting
	sql "SELECT pgboss.create_queue('other-rehearsal', '{\"policy\": \"standard\"}')" >/dev/null
	sql "INSERT INTO pgboss.job (name, data) VALUES ('other-rehearsal', '{\"secret\": 1}')" >/dev/null
	assert_equal "$(sql "SELECT string_agg(DISTINCT table_name, ',') FROM pgboss.queue WHERE name IN ('invoice-line', 'other-rehearsal')")" job_common
	cat >"$BATS_TEST_TMPDIR/intruder.sh" <<-SH
		#!/bin/sh
		# tries what the account may not, once, then works as the team's worker
		if [ ! -e "$BATS_TEST_TMPDIR/tried" ]; then
			: >"$BATS_TEST_TMPDIR/tried"
			psql -X -A -t -c "SELECT 'seen=' || count(*) FROM pgboss.job WHERE name = 'other-rehearsal'" 2>&1
			psql -X -A -t -c "SELECT 'common=' || count(*) FROM pgboss.job_common WHERE name = 'other-rehearsal'" 2>&1
			psql -X -c "UPDATE pgboss.job_common SET state = 'cancelled' WHERE name = 'other-rehearsal'" 2>&1
			psql -X -c "INSERT INTO pgboss.job (name, data) VALUES ('other-rehearsal', '{}')" 2>&1
			psql -X -c 'DELETE FROM pgboss.job' 2>&1
		fi
		exec node tests/fixtures/workers/pgboss12-worker.js unique
	SH
	chmod +x "$BATS_TEST_TMPDIR/intruder.sh"
	run_pipeline tests/fixtures/seeds/pgboss12-invoice-line.yaml 120s "$BATS_TEST_TMPDIR/intruder.sh"
	check_every_scenario
	log=$(awk -F '\t' '$1 == "log" { print $5 }' "$out")
	# none of the other queue's jobs, read, changed or added, and no delete
	assert_contains "$log" "seen=0" "common=0" "UPDATE 0" \
		"ERROR:  new row violates row-level security policy for table" \
		"ERROR:  permission denied for table job"
	assert_equal "$(sql "SELECT state FROM pgboss.job WHERE name = 'other-rehearsal'")" created
}

@test "pg-boss 12: a check-then-insert worker is caught by the race, the key named" {
	pipeline pgboss12 check-then-insert
	[ "$status" -eq 1 ]
	assert_equal "$(total duplicates)" 1
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "key" && $6 > 1 { print $4 ":" $6 }' "$out")" \
		'["inv-5005",1]:2'
}

@test "graphile-worker 0.18: a worker as its documentation shows lives through every scenario but the kill after commit, on the adapter of 0.16" {
	pipeline graphile018 unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(awk -F '\t' '$1 == "queue" { print $2 " " $3 " " $4 }' "$out")" \
		"graphile-worker invoice_line 20"
	assert_equal "$(total effects)" 6
	assert_equal "$(total duplicates)" 0
	assert_equal "$(total pending)" 0
	assert_equal "$(kills)" "before-commit:job-0003:database,before-write:job-0004:database,"
	assert_equal "$(attempts)" \
		"job-0001:1:0:conflict-noop,job-0001:1:1:inserted,job-0002:1:1:inserted,job-0003:1:0:inserted,job-0003:2:1:inserted,job-0004:1:0:\\N,job-0004:2:1:inserted,job-0005:1:0:conflict-noop,job-0005:1:1:inserted,job-0006:1:1:inserted,"
	assert_equal "$(race_writer)" "$(race_first)"
	assert_equal "$(sql 'SELECT count(*) FROM graphile_worker._private_jobs')" 0
}

@test "graphile-worker 0.18: killed after its commit in a seed of its own, the kill lands on that attempt alone and its retry finds the line" {
	node tests/fixtures/workers/graphile018-worker.js --setup unique
	run_pipeline tests/fixtures/seeds/graphile018-after-commit.yaml 120s \
		node tests/fixtures/workers/graphile018-worker.js unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total effects)" 6
	assert_equal "$(total duplicates)" 0
	assert_equal "$(kills)" "after-commit:job-0002:database,"
	assert_equal "$(attempts)" \
		"job-0001:1:1:inserted,job-0002:1:1:inserted,job-0002:2:0:conflict-noop,job-0003:1:1:inserted,job-0004:1:1:inserted,job-0005:1:1:inserted,job-0006:1:1:inserted,"
	# the killed process had no other attempt: its next fetch, made
	# before its ack was done, found no job to take
	pid=$(awk -F '\t' '$1 == "kill" { print $6 }' "$out")
	assert_equal "$(awk -F '\t' -v pid="$pid" '$1 == "attempt" && $5 == pid { print $2 ":" $4 }' "$out")" "job-0002:1"
}

@test "graphile-worker 0.18: a check-then-insert worker is caught by the race, the key named" {
	pipeline graphile018 check-then-insert
	[ "$status" -eq 1 ]
	assert_equal "$(total duplicates)" 1
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "key" && $6 > 1 { print $4 ":" $6 }' "$out")" \
		'["inv-5005",1]:2'
}

# stall_pipeline LIBRARY GUARD: the library's seed with its scenarios
# replaced by two stalls, one before the commit and one after the check
# (before the write), through the pipeline.
stall_pipeline() {
	local worker=tests/fixtures/workers/$1-worker.js seed=$BATS_TEST_TMPDIR/seed.yaml queue
	sed '/^scenarios:/,$d' "tests/fixtures/seeds/$1-invoice-line.yaml" >"$seed"
	cat >>"$seed" <<-'EOF'
	scenarios:
	  - { name: stall-before-commit, jobs: [job-0001], stall: before-commit, attempt: 1 }
	  - { name: stall-after-check, jobs: [job-0002], stall: before-write, attempt: 1 }
	expect: { effects: 6, duplicates: 0, missing: 0, pending: 0 }
	EOF
	queue=$(awk '$1 == "queue:" { gsub(/[{},]/, ""); print $5 }' "$seed")
	node "$worker" --setup "$2" "$queue"
	run_pipeline "$seed" 120s node "$worker" "$2"
}

# "job:release," of the stall rows, and "job:attempt:why," of the lease rows.
stalls_and_leases() {
	awk -F '\t' '$1 == "stall" { printf "%s:%s,", $3, $9 } $1 == "lease" { printf "%s:%s:%s,", $4, $5, $6 }' "$out"
}

@test "pg-boss 10 and 12, graphile-worker 0.16 and 0.18: a slow attempt outlives its lease; a unique guard holds, the late write rejected" {
	for library in pgboss graphile pgboss12 graphile018; do
		queue_reset
		stall_pipeline $library unique
		cat "$err" >&2
		[ "$status" -eq 0 ]
		assert_equal "$(total effects)" 6
		assert_equal "$(total duplicates)" 0
		assert_equal "$(stalls_and_leases)" \
			"job-0001:1:stall,job-0002:1:stall,job-0001:blocked,job-0002:acked,"
		# both attempts of each stalled job delivered, as the library's own
		# attempt count says: the second while the first was held
		assert_equal "$(awk -F '\t' '$1 == "attempt" && ($2 == "job-0001" || $2 == "job-0002") { print $2 ":" $4 }' "$out" | sort | tr '\n' ,)" \
			"job-0001:1,job-0001:2,job-0002:1,job-0002:2,"
		assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 6
		# the library's own tables: each stalled job completed, pg-boss's
		# counting one retry (the expired lease) before it
		if [ $library = pgboss ] || [ $library = pgboss12 ]; then
			assert_equal "$(sql "SELECT string_agg(p.job_id || ':' || j.state || ':' || j.retry_count, ',' ORDER BY p.job_id) FROM pgboss.job j JOIN idem.published p ON p.kind = 'pg-boss' AND p.msg_id = j.id::text WHERE p.job_id IN ('job-0001', 'job-0002')")" \
				"job-0001:completed:1,job-0002:completed:1"
		else
			assert_equal "$(sql 'SELECT count(*) FROM graphile_worker._private_jobs')" 0
		fi
	done
}

@test "pg-boss 10 and 12, graphile-worker 0.16 and 0.18: a slow attempt against check-then-insert is caught, the keys named" {
	for library in pgboss graphile pgboss12 graphile018; do
		queue_reset
		stall_pipeline $library check-then-insert
		[ "$status" -eq 1 ]
		assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "key" && $6 > 1 { print $4 ":" $6 }' "$out" | tr '\n' ' ')" \
			'["inv-5001",1]:2 ["inv-5002",1]:2 '
	done
}

@test "a seed whose library is not installed: exit 3, one line naming it and how to install it, nothing published" {
	node tests/fixtures/workers/pgboss-worker.js --setup unique invoice-line
	seed-gen tests/fixtures/seeds/pgboss-invoice-line.yaml | dup-publish >"$BATS_TEST_TMPDIR/published"
	queue_reset
	psql -X -q -c 'SET client_min_messages = warning' -c 'DROP SCHEMA IF EXISTS pgboss CASCADE' \
		-c 'DROP SCHEMA IF EXISTS graphile_worker CASCADE'
	for lib in pgboss graphile; do
		run --separate-stderr bash -c "seed-gen tests/fixtures/seeds/$lib-invoice-line.yaml | dup-publish"
		[ "$status" -eq 3 ]
		[ -z "$output" ]
		assert_equal "$(wc -l <<<"$stderr")" 1
		[[ "$stderr" == "dup-publish: queue invoice"[-_]"line is a "*", but "*"'s schema is not installed in this database: its own migration"*"setup command (rehearse -s)" ]]
	done
	assert_equal "$(sql 'SELECT count(*) FROM idem.published')" 0
	# kill-at, given a stream published before the schema went, starts nothing
	run --separate-stderr kill-at -- touch "$BATS_TEST_TMPDIR/started" <"$BATS_TEST_TMPDIR/published"
	[ "$status" -eq 3 ]
	[ -z "$output" ]
	assert_equal "$stderr" "kill-at: queue invoice-line is a pg-boss queue, but pg-boss's schema is not installed in this database: its own migration, which new PgBoss(DATABASE_URL).start() runs; make it part of the worker's setup command (rehearse -s)"
	[ ! -e "$BATS_TEST_TMPDIR/started" ]
}

@test "a message published again with another payload is bad input, and the queue keeps the first" {
	node tests/fixtures/workers/pgboss-worker.js --setup unique invoice-line
	seed-gen tests/fixtures/seeds/pgboss-invoice-line.yaml | dup-publish >/dev/null
	sed 's/amount_cents: 1250/amount_cents: 1251/' tests/fixtures/seeds/pgboss-invoice-line.yaml \
		>"$BATS_TEST_TMPDIR/changed.yaml"
	run --separate-stderr bash -c "seed-gen $BATS_TEST_TMPDIR/changed.yaml | dup-publish"
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	[[ "$stderr" == *"Key (kind, queue, job_id, copy)=(pg-boss, invoice-line, job-0001, 0) already exists"* ]]
	assert_equal "$(sql "SELECT data->>'amount_cents' FROM pgboss.job WHERE name = 'invoice-line' AND data->>'invoice_id' = 'inv-5001'")" "1250
1250"
}
