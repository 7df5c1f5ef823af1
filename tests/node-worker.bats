#!/usr/bin/env bats
# Workers written with node-postgres, which never speak the step socket,
# run under kill-at on the real sandbox: the pipeline counts their effects
# and keeps their branch lines, with no step row.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	seed=tests/fixtures/seeds/duplicate-publish.yaml
}

# rehearse WORKER [ARGUMENT ...]: the worker's own setup, then the pipeline,
# with the worker under kill-at; the stream in $out, the status in $status.
rehearse() {
	local worker=tests/fixtures/workers/$1
	shift
	node "$worker" --setup "$@"
	run_pipeline "$seed" 30s node "$worker" "$@"
}

# The branches of each attempt, "job:attempt:branches,", sorted.
branches() {
	awk -F '\t' '$1 == "attempt" { printf "%s:%s:%s\n", $2, $4, $10 }' "$out" | sort | tr '\n' ,
}

# Lines whose transaction also acked a message: the same transaction id.
lines_acked_in_their_transaction() {
	sql 'SELECT count(*) FROM demo.invoice_lines l WHERE EXISTS (SELECT 1 FROM idem.message m WHERE m.xmin = l.xmin)'
}

@test "pg-worker.js with the unique guard: every line once, the copy a conflict, no step row" {
	rehearse pg-worker.js unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total effects)" 3
	assert_equal "$(total duplicates)" 0
	assert_equal "$(total pending)" 0
	assert_equal "$(rows_of step "$out")" 0
	assert_equal "$(branches)" \
		"job-0001:1:conflict-noop,job-0001:1:inserted,job-0002:1:inserted,job-0003:1:inserted,"
	assert_equal "$(sql 'SELECT count(*) FROM idem.queue')" 0
	# each ack in a statement of its own, after the line's commit
	assert_equal "$(lines_acked_in_their_transaction)" 0
	[[ "$(awk -F '\t' '$1 == "guard" { print $4 }' "$out")" == *"UNIQUE (invoice_id, line_no)"* ]]
}

@test "pg-worker.js check-then-insert runs under a duplicate publish; one worker finds the first copy's line" {
	rehearse pg-worker.js check-then-insert
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(branches)" \
		"job-0001:1:found-existing,job-0001:1:inserted,job-0002:1:inserted,job-0003:1:inserted,"
	assert_equal "$(total effects)" 3
	# no constraint on the key: the guard is only the check
	[[ "$(awk -F '\t' '$1 == "guard" { print $4 }' "$out")" != *UNIQUE* ]]
}

@test "pg-update-worker.js: lines inserted pending, then charged by an update; counted once each" {
	rehearse pg-update-worker.js unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total effects)" 3
	assert_equal "$(total duplicates)" 0
	assert_equal "$(branches)" \
		"job-0001:1:found-charged,job-0001:1:pending charged,job-0002:1:pending charged,job-0003:1:pending charged,"
	assert_equal "$(sql "SELECT string_agg(status || ' ' || vendor_ref, ',' ORDER BY job_id) FROM demo.invoice_lines")" \
		"charged ch-job-0001,charged ch-job-0002,charged ch-job-0003"
}

@test "pg-ack-in-tx-worker.js: the ack commits with the line" {
	rehearse pg-ack-in-tx-worker.js unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total effects)" 3
	assert_equal "$(branches)" \
		"job-0001:1:conflict-noop,job-0001:1:inserted,job-0002:1:inserted,job-0003:1:inserted,"
	assert_equal "$(lines_acked_in_their_transaction)" 3
}

@test "the setup refuses a database that is not a sandbox, and a worker refuses a bad guard" {
	run -3 env DATABASE_URL="postgresql:///postgres?host=$(printf %s "$PGHOST" | sed 's,/,%2F,g')&port=5432&user=idem" \
		node tests/fixtures/workers/pg-worker.js --setup
	assert_equal "$output" "pg-worker: not a rehearsal sandbox: relation \"idem.sandbox\" does not exist; refusing to write"
	run -2 node tests/fixtures/workers/pg-worker.js none
	[[ "${lines[0]}" == "usage: node pg-worker.js unique | check-then-insert" ]]
}

@test "vendor-worker.js refuses a bad guard, and a run without a vendor" {
	run -2 env IDEM_VENDOR_URL=http://127.0.0.1:9 node tests/fixtures/workers/vendor-worker.js --idempotency-key none
	[[ "${lines[0]}" == "usage: node vendor-worker.js [--idempotency-key] unique | check-then-insert" ]]
	run -2 env -u IDEM_VENDOR_URL node tests/fixtures/workers/vendor-worker.js unique
	assert_equal "$output" "vendor-worker: no vendor: set IDEM_VENDOR_URL"
	# the setup makes no call
	env -u IDEM_VENDOR_URL node tests/fixtures/workers/vendor-worker.js --setup unique
}

# vendor_worker PORT SEEN [ARGUMENT ...]: vendor-worker.js on idem's queue,
# with the vendor at 127.0.0.1:PORT and a visibility timeout of an hour,
# until it has logged SEEN branch lines; its standard error in $err.
vendor_worker() {
	local port=$1 seen=$2 worker
	shift 2
	IDEM_QUEUE=rehearsal_duplicate_publish IDEM_VISIBILITY_TIMEOUT_MS=3600000 \
		IDEM_VENDOR_URL="http://127.0.0.1:$port" node tests/fixtures/workers/vendor-worker.js "$@" 2>"$err" &
	worker=$!
	for i in $(seq 400); do
		[ "$(grep -c '^branch=' "$err")" -ge "$seen" ] && break
		sleep 0.05
	done
	kill -TERM "$worker"
	wait "$worker"
}

@test "vendor-worker.js: a vendor that cannot be reached rolls the line back; nothing is acked" {
	node tests/fixtures/workers/vendor-worker.js --setup unique
	seed-gen "$seed" | dup-publish -s 0 >/dev/null
	vendor_worker "$(free_port)" 8 unique
	# every message, the copy too: the line inserted, then the charge failed
	assert_equal "$(grep -c '^branch=inserted .* guard=unique worker=node$' "$err")" 4
	assert_equal "$(grep -c '^branch=vendor-error .* guard=unique worker=node$' "$err")" 4
	grep -q '^vendor-worker: POST http://127.0.0.1:[0-9]*/v1/charges: connect ECONNREFUSED ' "$err"
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 0
	assert_equal "$(sql 'SELECT count(*) FROM idem.message WHERE acked_at IS NULL')" 4
}

