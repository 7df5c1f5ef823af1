#!/usr/bin/env bats
# kill-at with workers that never connect to the step socket: idem-worker
# --no-step, workers with node-postgres, a worker in shell and psql. Their
# kill points are seen in the sandbox database, and what each attempt
# wrote comes from the effect ledger.

load helper
load sandbox-tests

# seed_for SCENARIO [TABLE]: the seed of job a of one invoice line
# (tests/fixtures/seeds/database.yaml) with the scenario named, none for
# none, its effect on TABLE.
seed_for() {
	local scenario=$1 table=${2:-demo.invoice_lines}
	sed -e '/^expect:/d' -e "s/^effect: { table: demo.invoice_lines,/effect: { table: $table,/" \
		"$BATS_TEST_DIRNAME/fixtures/seeds/database.yaml"
	case $scenario in
	before-write | before-commit | after-commit)
		echo "scenarios: [ { name: kill, jobs: [a], kill: $scenario, attempt: 1 } ]" ;;
	race) echo 'scenarios: [ { name: race, jobs: [a], race: before-write } ]' ;;
	esac
	echo 'expect: { effects: 1 }'
}

# run_worker SCENARIO COMMAND...: the seed, published, under kill-at.
run_worker() {
	local scenario=$1
	shift
	queue_reset
	seed_for "$scenario" "${TABLE:-demo.invoice_lines}" >"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	kill-at -D 20s -- "$@" <"$BATS_TEST_TMPDIR/published" >"$out" 2>"$err" || {
		cat "$err" >&2
		return 1
	}
}

effects() {
	sql "SELECT count(*) FROM ${TABLE:-demo.invoice_lines} WHERE invoice_id = 'inv-1' AND line_no = 1"
}

# The kill rows: "step attempt observed", one a line.
kills() {
	awk -F '\t' '$1 == "kill" { print $5, $4, $8 }' "$out"
}

# The attempt rows: "attempt rows_written rows_updated", one a line.
attempts() {
	awk -F '\t' '$1 == "attempt" { print $4, $9, $12 }' "$out"
}

@test "idem-worker --no-step is killed at every database step, with the counts of the step socket" {
	for guard in none check-then-insert memory unique; do
		for scenario in before-write before-commit after-commit race; do
			idem-worker --setup -g "$guard"
			run_worker "$scenario" idem-worker --no-step -g "$guard"
			by_database=$(effects)
			want_kills=$(case $scenario in race) ;; *) echo "$scenario 1 database" ;; esac)
			assert_equal "$(kills)" "$want_kills"
			assert_equal "$(rows_of step "$out")" "$(case $scenario in race) echo 4 ;; *) echo 1 ;; esac)"
			idem-worker --setup -g "$guard"
			run_worker "$scenario" idem-worker -g "$guard"
			if [ "$(effects)" != "$by_database" ]; then
				echo "guard $guard, $scenario: $by_database effect rows by the database, $(effects) by the socket" >&2
				return 1
			fi
		done
	done
}

@test "with --guard check-then-insert the race is still caught, held and released by the database" {
	idem-worker --setup -g check-then-insert
	run_worker race idem-worker --no-step -g check-then-insert
	assert_equal "$(effects)" 2
	assert_equal "$(awk -F '\t' '$1 == "step" { print $5, $8, $9 }' "$out" | tr '\n' ,)" \
		"before-write hold database,before-write hold database,before-write release database,before-write release database,"
	# the first held is the first released, and the two are two workers
	read -r first second first_again second_again <<<"$(awk -F '\t' '$1 == "step" { print $4 }' "$out" | tr '\n' ' ')"
	[ "$first" = "$first_again" ] && [ "$second" = "$second_again" ] && [ "$first" != "$second" ]
	# each attempt wrote its own line
	assert_equal "$(attempts | sort | tr '\n' ,)" "1 1 0,1 1 0,"
}

@test "the example seed with idem-worker --no-step: every database kill point reached, counts as expected" {
	idem-worker --setup -g unique
	# external-call has no database event: the vendor double sees it
	sed -e 's/visibility_timeout: 2s/visibility_timeout: 300ms/' seeds/invoice-line.yaml \
		>"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | count-effects --before | dup-publish |
		kill-at -D 30s -- idem-worker --no-step -g unique | count-effects >"$out" 2>"$err" || {
		cat "$err" >&2
		return 1
	}
	assert_equal "$(awk -F '\t' '$1 == "kill" { print $2, $5, $8 }' "$out" | tr '\n' ,)" \
		"kill-after-commit after-commit database,kill-before-commit before-commit database,kill-during-external-call external-call vendor,"
	assert_equal "$(awk -F '\t' '$1 == "step" { print $8, $9 }' "$out" | sort -u | tr '\n' ,)" \
		"hold database,kill database,kill vendor,release database,"
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "total" { print $4, $6 }' "$out" | tr '\n' ,)" \
		"effects 6,duplicates 0,missing 0,unexpected 0,conflicts 0,pending 0,external 6,external_duplicates 0,"
}

@test "a worker with node-postgres is killed at before-write, before-commit and after-commit" {
	node tests/fixtures/workers/pg-worker.js --setup unique
	for step in before-write before-commit after-commit; do
		sql 'TRUNCATE demo.invoice_lines'
		run_worker "$step" node tests/fixtures/workers/pg-worker.js unique
		assert_equal "$(kills)" "$step 1 database"
		assert_equal "$(effects)" 1
		# killed before its commit, the first attempt wrote nothing; after
		# it, the first wrote the line and the retry found it
		assert_equal "$(attempts | tr '\n' ,)" \
			"$(case $step in after-commit) echo '1 1 0,2 0 0,' ;; *) echo '1 0 0,2 1 0,' ;; esac)"
		assert_equal "$(awk -F '\t' '$1 == "attempt" { print $10 }' "$out" | tr '\n' ,)" \
			"$(case $step in after-commit) echo 'inserted,conflict-noop,' ;; before-commit) echo 'inserted,inserted,' ;; *) echo '\N,inserted,' ;; esac)"
	done
}

@test "a worker that updates the line it wrote: rows written per attempt, from the ledger" {
	export TABLE=demo.lines
	sql "CREATE TABLE IF NOT EXISTS demo.lines (invoice_id text, line_no integer, amount_cents bigint NOT NULL, outcome text, PRIMARY KEY (invoice_id, line_no))"
	sql 'TRUNCATE demo.lines'
	run_worker after-commit tests/fixtures/workers/psql_worker.sh update
	assert_equal "$(kills)" "after-commit 1 database"
	assert_equal "$(effects)" 1
	# the first attempt inserted the line and updated it; the retry only
	# updated it, though the line's last change is the retry's
	assert_equal "$(attempts | tr '\n' ,)" "1 1 1,2 0 1,"
	xmin_commit=$(sql "SELECT to_char(pg_xact_commit_timestamp(xmin) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM demo.lines")
	assert_equal "$(awk -F '\t' '$1 == "attempt" && $4 == 2 { print $7 }' "$out")" "$xmin_commit"
}

@test "node-postgres: a line inserted, then charged by an update, is one row written by one attempt" {
	node tests/fixtures/workers/pg-update-worker.js --setup unique
	run_worker after-commit node tests/fixtures/workers/pg-update-worker.js unique
	assert_equal "$(kills)" "after-commit 1 database"
	assert_equal "$(attempts | tr '\n' ,)" "1 1 1,2 0 0,"
	assert_equal "$(awk -F '\t' '$1 == "attempt" { print $10 }' "$out" | tr '\n' ,)" "pending charged,found-charged,"
}

@test "a worker that acks in the effect's transaction: after-commit cannot happen, a finding and no failure" {
	node tests/fixtures/workers/pg-ack-in-tx-worker.js --setup unique
	run_worker after-commit node tests/fixtures/workers/pg-ack-in-tx-worker.js unique
	assert_equal "$(kills)" ""
	grep -q "^log	[^	]*	0	[0-9]*	kill-at: ack in the effect's transaction: after-commit cannot happen (job a, attempt 1)$" "$out"
	assert_equal "$(effects)" 1
	assert_equal "$(attempts)" "1 1 0"
}

@test "the kill points leave the sandbox with the run, however it ends" {
	idem-worker --setup -g unique
	run_worker after-commit idem-worker --no-step
	assert_equal "$(sql "SELECT to_regnamespace('idem_run') IS NULL")" t
	assert_equal "$(sql "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'idem_run%'")" 0
	# a race whose second copy is gone holds the first worker to the end:
	# at the deadline its session is terminated, not let go
	queue_reset
	sql 'TRUNCATE demo.invoice_lines'
	seed_for race | sed 's/visibility_timeout: 300ms/visibility_timeout: 60s/' >"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	sql 'DELETE FROM idem.message WHERE copy = 1'
	run kill-at -n 2 -D 1s -- idem-worker --no-step <"$BATS_TEST_TMPDIR/published"
	[ "$status" -eq 1 ]
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 0
	assert_equal "$(sql "SELECT to_regnamespace('idem_run') IS NULL")" t
	# and on SIGTERM
	sql 'UPDATE idem.message SET visible_at = now()'
	kill-at -n 2 -D 60s -- idem-worker --no-step <"$BATS_TEST_TMPDIR/published" >/dev/null 2>&1 &
	# a session held at the race's point; kill-at gone first is a failure,
	# not a wait for ever
	until [ "$(sql "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")" -ge 1 ]; do
		kill -0 $!
		sleep 0.05
	done
	kill -TERM $!
	wait $! || true
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 0
	assert_equal "$(sql "SELECT to_regnamespace('idem_run') IS NULL")" t
}

@test "the record says where each kill was seen, what each attempt wrote, and the finding" {
	export TABLE=demo.lines
	sql "CREATE TABLE IF NOT EXISTS demo.lines (invoice_id text, line_no integer, amount_cents bigint NOT NULL, outcome text, PRIMARY KEY (invoice_id, line_no))"
	sql 'TRUNCATE demo.lines'
	repo="$BATS_TEST_TMPDIR/repo"
	(new_repo "$repo")
	seed_for after-commit demo.lines >"$repo/seed.yaml"
	git -C "$repo" add seed.yaml
	git -C "$repo" commit -q -m seed
	(cd "$repo" && seed-gen seed.yaml | count-effects --before | dup-publish |
		kill-at -D 20s -- "$BATS_TEST_DIRNAME/fixtures/workers/psql_worker.sh" update |
		count-effects | mkrecord -o out >/dev/null)
	record=$(ls "$repo"/out/*.yaml)
	grep -q '^  observed: "database"$' "$record"
	# the first attempt was killed: the psql process that held the session
	assert_equal "$(grep -c '^  outcome: "killed at after-commit"$' "$record")" 1
	assert_equal "$(grep '^  rows_written: ' "$record" | tr '\n' ,)" "  rows_written: 1,  rows_written: 0,"
	assert_equal "$(grep '^  rows_updated: ' "$record" | tr '\n' ,)" "  rows_updated: 1,  rows_updated: 1,"

	node tests/fixtures/workers/pg-ack-in-tx-worker.js --setup unique
	queue_reset
	seed_for after-commit >"$repo/seed.yaml"
	git -C "$repo" commit -q -a -m seed
	rm -r "$repo/out"
	(cd "$repo" && seed-gen seed.yaml | count-effects --before | dup-publish |
		kill-at -D 20s -- node "$BATS_TEST_DIRNAME/fixtures/workers/pg-ack-in-tx-worker.js" unique |
		count-effects | mkrecord -o out >/dev/null)
	record=$(ls "$repo"/out/*.yaml)
	grep -q '^kill_points: \[\]$' "$record"
	grep -qF -- '- "a kill at after-commit: ack in the effect'"'"'s transaction: after-commit cannot happen (job a, attempt 1)"' "$record"
}
