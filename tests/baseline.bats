#!/usr/bin/env bats
# The sequential baseline: kill-at runs the jobs in no fault scenario first,
# with one worker, counts their effects, and forces no fault when they fail.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	# jobs a (killed) and c (raced) in scenarios, b in none
	cp tests/fixtures/seeds/baseline.yaml "$BATS_TEST_TMPDIR/seed.yaml"
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

# Six jobs in no scenario: the baseline takes the first of them, in the
# order of the stream, up to -b; the rest wait, then run with every worker.
many_jobs_published() {
	{
		sed -n '1,/^jobs:/p' "$BATS_TEST_TMPDIR/seed.yaml"
		for i in 1 2 3 4 5 6; do
			echo "  - { id: j$i, payload: { invoice_id: inv-$i, line_no: 1, amount_cents: 100, currency: EUR } }"
		done
		echo "expect: { effects: 6 }"
	} | sed 's/^queue: .*/queue: rehearsal_many/' >"$BATS_TEST_TMPDIR/many.yaml"
	# a baseline alone forces no fault: a draft
	seed-gen --draft "$BATS_TEST_TMPDIR/many.yaml" | dup-publish
}

@test "the baseline is at most -b jobs, the first of the stream; the others run after it with -n workers" {
	many_jobs_published >"$BATS_TEST_TMPDIR/many"
	kill-at -n 3 -b 2 -D 20s -- idem-worker -g unique <"$BATS_TEST_TMPDIR/many" >"$out" 2>"$err"
	assert_equal "$(grep '^baseline	' "$out")" "$(printf 'baseline\tpassed\t2\t2\t0\t2\t2\t0\t0')"
	# j1 and j2 were acked before any other job was consumed
	last_baseline_ack=$(awk -F '\t' '$1 == "attempt" && ($2 == "j1" || $2 == "j2") { print $8 }' "$out" | sort | tail -n 1)
	first_other=$(awk -F '\t' '$1 == "attempt" && $2 != "j1" && $2 != "j2" { print $6 }' "$out" | sort | head -n 1)
	[[ -n "$first_other" && "$last_baseline_ack" < "$first_other" ]]
	# every job was delivered once and acked, and wrote its one effect
	assert_equal "$(awk -F '\t' '$1 == "attempt" && $8 != "\\N" { print $2 }' "$out" | sort | tr '\n' ' ')" "j1 j2 j3 j4 j5 j6 "
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 6
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE queue = 'rehearsal_many' AND acked_at IS NULL")" 0
}

@test "kill-at -b all takes every job in no scenario; -b refuses what is no count" {
	many_jobs_published >"$BATS_TEST_TMPDIR/many"
	kill-at -b all -D 20s -- idem-worker -g unique <"$BATS_TEST_TMPDIR/many" >"$out" 2>"$err"
	assert_equal "$(grep '^baseline	' "$out")" "$(printf 'baseline\tpassed\t6\t6\t0\t6\t6\t0\t0')"
	for bad in 0 -1 2x ''; do
		run -2 kill-at -b "$bad" -- true <"$BATS_TEST_TMPDIR/many"
		assert_equal "$output" "kill-at: -b $bad: expected a number of jobs, or all"
	done
}
