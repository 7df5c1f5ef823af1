#!/usr/bin/env bats
# The answer that never came back (issue 32): a charge that went through
# whose answer was lost, late, or whose key the vendor forgot, against a
# worker of another language that builds its Idempotency-Key from the job
# id or anew for every call. Whether the retry charges again depends on
# that key alone; a key that changes is caught even when the vendor saved
# the day. psql on the effect table is the outside referee of the lines,
# the vendor double's call rows of the charges.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	seed="$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
}

# answers SCENARIO: three invoice lines, the vendor honouring keys, and the
# one scenario given (its YAML flow mapping) on job-0001.
answers() {
	sed -e '/^  pending: /d' -e '/^scenarios:/,/^expect:/{/^scenarios:/!{/^expect:/!d}}' \
		tests/fixtures/seeds/vendor-answers.yaml >"$seed"
	sed -i "/^scenarios:/a\\  - $1" "$seed"
}

# python KEY: the pipeline, the Python worker building its key per KEY
# (job or call), its HTTP timeout 1 s.
python_worker() {
	run_pipeline "$seed" 60s python3 tests/fixtures/workers/py_charge_worker.py --key "$1" --timeout 1
}

# "answer:effect," of the POSTs of one business key, in order.
charges() {
	awk -F '\t' -v k="$1" '$1 == "call" && $5 == "POST" && $9 == k { printf "%s:%s,", $11, $12 }' "$out"
}

# The distinct Idempotency-Keys of one business key's POSTs.
keys_of() {
	awk -F '\t' -v k="$1" '$1 == "call" && $5 == "POST" && $9 == k { print $7 }' "$out" | sort -u | wc -l
}

measure() {
	awk -F '\t' -v n="$1" '$1 == "measure" && $2 == n { print $3, $4, $5 }' "$out"
}

# record_of_run: the run's record, its seed committed in a new repository;
# sets record.
record_of_run() {
	new_repo "$BATS_TEST_TMPDIR/repo"
	cp "$seed" seed.yaml
	git add seed.yaml && git commit -q -m seed
	sed "s#$seed#seed.yaml#" "$out" >run.tsv
	record=$(mkrecord <run.tsv)
}

lines_of() {
	psql -X -A -t -c "SELECT count(*) FROM demo.invoice_lines WHERE invoice_id = '$1'"
}

@test "a key from the job id survives a lost reply at a vendor that honours keys: one charge, keys stable" {
	answers '{ name: reply-lost, jobs: [job-0001], vendor: lost-reply }'
	python_worker job
	cat "$err" >&2
	[ "$status" -eq 0 ]
	# the charge went through unanswered; the retry, same key, was replayed
	assert_equal "$(charges '["inv-1001",1]')" "lost:yes,replayed:no,"
	assert_equal "$(keys_of '["inv-1001",1]')" 1
	assert_equal "$(total external)" 3
	assert_equal "$(total external_duplicates)" 0
	assert_equal "$(measure external_keys_per_business_key)" "1.000 3 3"
	assert_equal "$(rows_of rekeyed "$out")" 0
	assert_equal "$(lines_of inv-1001)" 1
}

@test "a key built per call is charged twice under a lost reply, and the changed key is named" {
	answers '{ name: reply-lost, jobs: [job-0001], vendor: lost-reply }'
	python_worker call
	[ "$status" -eq 1 ]
	assert_equal "$(charges '["inv-1001",1]')" "lost:yes,ok:yes,"
	assert_equal "$(keys_of '["inv-1001",1]')" 2
	assert_equal "$(total external_duplicates)" 1
	grep -q 'external: duplicate effect for business key \["inv-1001",1\]: 2 calls took effect' "$err"
	assert_equal "$(awk -F '\t' '$1 == "rekeyed" { print $2, $5 }' "$out")" '["inv-1001",1] 2'
	# the line itself is guarded: one, whatever the charges
	assert_equal "$(lines_of inv-1001)" 1
}

@test "a key built per call under a vendor error is charged once, and still fails: keys changed" {
	answers '{ name: vendor-error, jobs: [job-0001], vendor: error }'
	python_worker call
	[ "$status" -eq 1 ]
	# the first call failed with no effect; the retry, another key, charged
	assert_equal "$(charges '["inv-1001",1]')" "error:no,ok:yes,"
	assert_equal "$(total external)" 3
	assert_equal "$(total external_duplicates)" 0
	assert_equal "$(awk -F '\t' '$1 == "rekeyed" { print $2, $5 }' "$out")" '["inv-1001",1] 1'
	grep -q 'external: business key \["inv-1001",1\] changed its Idempotency-Key' "$err"
	# the record agrees, and says why
	(record_of_run && grep -q '^verdict: "fail"' "$record" &&
		grep -q 'changed its Idempotency-Key' "${record%.yaml}.md")
	# the same worker with a key from the job id passes the same fault
	queue_reset
	idem-worker --setup -g unique
	python_worker job
	[ "$status" -eq 0 ]
	assert_equal "$(charges '["inv-1001",1]')" "error:no,ok:yes,"
	assert_equal "$(rows_of rekeyed "$out")" 0
}

@test "a key from the job id, killed in the call and retried after the vendor forgot its keys, charges twice and is caught" {
	answers '{ name: keys-forgotten, jobs: [job-0001], vendor: forget-keys, forget_after: 24h, kill: external-call }'
	python_worker job
	[ "$status" -eq 1 ]
	# the killed call took effect; its key forgotten, the retry's same key charged again
	assert_equal "$(charges '["inv-1001",1]')" "killed:yes,ok:yes,"
	assert_equal "$(keys_of '["inv-1001",1]')" 1
	killed=$(awk -F '\t' '$1 == "call" && $11 == "killed" { print $14 }' "$out")
	assert_equal "$(awk -F '\t' '$1 == "forgot" { print $3, $4, $5, $6 }' "$out")" \
		"[\"inv-1001\",1] charge-job-0001 $killed 86400000"
	assert_equal "$(total external_duplicates)" 1
	assert_equal "$(rows_of rekeyed "$out")" 0
	grep -q 'external: duplicate effect for business key \["inv-1001",1\]' "$err"
}

@test "a late answer past the worker's own timeout: the record shows it under the attempt that gave up, and the retry's outcome" {
	answers '{ name: reply-late, jobs: [job-0001], vendor: late-reply, delay: 3s }'
	python_worker job
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(charges '["inv-1001",1]')" "late:yes,replayed:no,"
	record_of_run
	# attempt 1 gave up: not acked, its call charged and answered 3 s
	# after it came, after attempt 2's call, same key, was replayed
	python3 - "$record" <<'PY'
import datetime, sys, yaml
r = yaml.safe_load(open(sys.argv[1]))
t = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
first, retry = [a for a in r["evidence"] if a["job"] == "job-0001"]
assert (first["attempt"], first["outcome"], retry["attempt"], retry["outcome"]) == (1, "not acked", 2, "acked"), r["evidence"]
late, = first["calls"]
again, = retry["calls"]
assert (late["answer"], late["effect"], late["status"]) == ("late", "yes", 200), late
assert (again["answer"], again["effect"], again["idempotency_key"]) == ("replayed", "no", late["idempotency_key"]), again
assert t(late["answered_at"]) - t(late["at"]) >= datetime.timedelta(seconds=3), late
assert t(again["answered_at"]) < t(late["answered_at"]), (again, late)
assert r["verdict"] == "pass" and r["rekeyed"] == [], (r["verdict"], r["rekeyed"])
PY
	grep -q 'LATE' "${record%.yaml}.md"
	grep -q 'LATE' "${record%.yaml}.svg"
}

@test "a signal while kill-at waits for a late answer stops it as any signal does: nothing written, 128+N" {
	answers '{ name: reply-late, jobs: [job-0001], vendor: late-reply, delay: 20s }'
	seed-gen "$seed" | dup-publish >"$BATS_TEST_TMPDIR/published"
	kill-at -D 60s -- python3 tests/fixtures/workers/py_charge_worker.py --timeout 1 \
		<"$BATS_TEST_TMPDIR/published" >"$out" 2>"$err" &
	pid=$!
	# every job acked: the run is over but for the late answer, due 20 s
	# after its call
	for _ in $(seq 300); do
		[ "$(sql "SELECT count(*) FROM idem.message WHERE acked_at IS NULL")" = 0 ] && break
		sleep 0.1
	done
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE acked_at IS NULL")" 0
	kill -TERM "$pid"
	status=0
	wait "$pid" || status=$?
	assert_equal "$status" 143
	[ ! -s "$out" ]
	grep -q '^kill-at: stopped by signal 15; workers stopped$' "$err"
}
