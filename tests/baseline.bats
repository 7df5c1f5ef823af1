#!/usr/bin/env bats
# The sequential baseline: kill-at runs the jobs in no fault scenario first,
# with one worker, counts their effects, and forces no fault when they fail.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	cat >"$BATS_TEST_TMPDIR/seed.yaml" <<-YAML
		rehearsal: baseline
		job_type: invoice.add_line
		queue: rehearsal_baseline
		retry: { visibility_timeout: 300ms, max_attempts: 5 }
		reconciliation_owner: billing-oncall
		effect: { table: demo.invoice_lines, key: [invoice_id, line_no] }
		payload_schema: { invoice_id: string, line_no: integer, amount_cents: integer, currency: string }
		jobs:
		  - { id: a, payload: { invoice_id: inv-1, line_no: 1, amount_cents: 100, currency: EUR } }
		  - { id: b, payload: { invoice_id: inv-2, line_no: 1, amount_cents: 200, currency: EUR } }
		  - { id: c, payload: { invoice_id: inv-3, line_no: 1, amount_cents: 300, currency: EUR } }
		scenarios:
		  - { name: kill, jobs: [a], kill: after-commit, attempt: 1 }
		  - { name: race, jobs: [c], race: before-write }
		expect: { effects: 3 }
	YAML
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
}

@test "the baseline runs first, alone, with one worker; then the faults" {
	kill-at -D 20s -- idem-worker -g unique <"$BATS_TEST_TMPDIR/published" >"$out" 2>"$err"
	# one job, b, in no scenario: one message, acked, its one effect
	assert_equal "$(grep '^baseline	' "$out")" "$(printf 'baseline\tpassed\t1\t1\t0\t1\t1\t0\t0')"
	# b was delivered once, by the first worker, before any fault's job
	assert_equal "$(awk -F '\t' '$1 == "attempt" { print $2 }' "$out" | head -n 1)" b
	assert_equal "$(awk -F '\t' '$1 == "attempt" && $2 == "b"' "$out" | wc -l)" 1
	first_fault=$(awk -F '\t' '$1 == "attempt" && $2 != "b" { print $6 }' "$out" | sort | head -n 1)
	b_acked=$(awk -F '\t' '$1 == "attempt" && $2 == "b" { print $8 }' "$out")
	[[ "$b_acked" < "$first_fault" ]]
	# the faults ran all the same after it
	assert_equal "$(rows_of kill "$out")" 1
	assert_equal "$(rows_of missed "$out")" 0
}

@test "a failing baseline stops kill-at before any fault: exit 1, baseline failed, no kill or race" {
	# the effect's column the worker writes is gone: every insert fails
	sql 'ALTER TABLE demo.invoice_lines DROP COLUMN amount_cents'
	rc=0
	kill-at -D 4s -- idem-worker -g unique <"$BATS_TEST_TMPDIR/published" >"$out" 2>"$err" || rc=$?
	assert_equal "$rc" 1
	grep -q '^kill-at: baseline failed: 0 of 1 effects, 0 duplicate, 1 missing, 1 messages unacked; no fault was forced$' "$err"
	assert_equal "$(grep '^baseline	' "$out")" "$(printf 'baseline\tfailed\t1\t1\t1\t1\t0\t0\t1')"
	# nothing but the baseline's job was delivered, nothing killed or held
	assert_equal "$(awk -F '\t' '$1 == "attempt" { print $2 }' "$out" | sort -u)" b
	assert_equal "$(rows_of kill "$out")" 0
	assert_equal "$(awk -F '\t' '$1 == "step" && ($8 == "kill" || $8 == "hold")' "$out" | wc -l)" 0
	assert_equal "$(rows_of missed "$out")" 0
	# the faults' messages were let go again, never delivered
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE job_id IN ('a', 'c') AND read_ct = 0 AND visible_at < 'infinity'")" \
		"$(sql "SELECT count(*) FROM idem.message WHERE job_id IN ('a', 'c')")"
}

@test "a baseline row whose result disagrees with its counts is refused" {
	n=$(($(wc -l <"$BATS_TEST_TMPDIR/published") + 1))
	{
		cat "$BATS_TEST_TMPDIR/published"
		printf 'baseline\tpassed\t1\t1\t0\t1\t0\t0\t1\n'
	} >"$BATS_TEST_TMPDIR/bad"
	run -2 mkrecord -o "$BATS_TEST_TMPDIR" <"$BATS_TEST_TMPDIR/bad"
	[[ "$output" == *"stdin:$n: baseline row, field result: passed, with messages unacked or effects duplicate or missing"* ]]
	{
		cat "$BATS_TEST_TMPDIR/published"
		printf 'baseline\tnone\t1\t1\t0\t1\t1\t0\t0\n'
	} >"$BATS_TEST_TMPDIR/bad"
	run -2 mkrecord -o "$BATS_TEST_TMPDIR" <"$BATS_TEST_TMPDIR/bad"
	[[ "$output" == *"stdin:$n: baseline row, field result: none, but the baseline has jobs"* ]]
}
