#!/usr/bin/env bats
# The rehearsal owns the clock (kill-at(1), THE CLOCK and THE STALL): a
# killed attempt's job comes back once its worker is gone, whatever the
# lease; a forced duplicate's copy once its original is acked; a slow
# attempt outlives its lease on purpose, and the queue's own tables, the
# effect table and the vendor double say what each attempt did.

load helper
load sandbox-tests

seed=tests/fixtures/seeds/stall-invoice-line.yaml

# stall GUARD [WORKER OPTIONS]: the stall seed through the pipeline, with
# idem-worker and its guard; the stream in $out.
stall() {
	idem-worker --setup -g "$1"
	run_pipeline "$seed" 60s idem-worker -g "$@"
}

# "job:attempt:branch," of the attempt rows, in the order of the rows.
attempts_of() {
	awk -F '\t' -v job="$1" '$1 == "attempt" && $2 == job { printf "%s:%s:%s\n", $2, $4, $10 }' "$out" |
		sort | tr '\n' ,
}

# "scenario:job:attempt:step:release:observed," of the stall rows.
stalls() {
	awk -F '\t' '$1 == "stall" { printf "%s:%s:%s:%s:%s:%s\n", $2, $3, $4, $5, $9, $10 }' "$out" |
		tr '\n' ,
}

# "msg:job:attempt:why," of the lease rows, sorted.
leases() {
	awk -F '\t' '$1 == "lease" { printf "%s:%s:%s\n", $4, $5, $6 }' "$out" | sort | tr '\n' ,
}

# The keys counted more than once after the run: "KEY=N ".
duplicated() {
	awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "key" && $6 > 1 { printf "%s=%s ", $4, $6 }' "$out"
}

@test "stalls against a unique guard pass: one effect each, the late write rejected, both attempts live at once" {
	stall unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total effects)" 5
	assert_equal "$(total duplicates)" 0
	assert_equal "$(total external)" 5
	# held at before-commit, the first attempt's line waits uncommitted;
	# the redelivered attempt waits on it in the unique index, and that
	# releases the first, which commits: the second's insert is rejected
	assert_equal "$(stalls)" "stall-before-commit:job-0001:1:before-commit:blocked:socket,stall-after-check:job-0002:1:before-write:acked:socket,stall-in-the-call:job-0003:1:external-call:blocked:vendor,"
	assert_equal "$(attempts_of job-0001)" "job-0001:1:inserted called,job-0001:2:conflict-noop already-called,"
	# after its check the first attempt waits; the second writes and is
	# acked; the first, released, finds the line there
	assert_equal "$(attempts_of job-0002)" "job-0002:1:conflict-noop already-called,job-0002:2:inserted called,"
	# the two attempts overlap: the second was delivered while the first
	# was held, before its release
	for job in job-0001 job-0002 job-0003; do
		second=$(awk -F '\t' -v j=$job '$1 == "attempt" && $2 == j && $4 == 2 { print $6 }' "$out")
		released=$(awk -F '\t' -v j=$job '$1 == "stall" && $3 == j { print $8 }' "$out")
		stalled=$(awk -F '\t' -v j=$job '$1 == "stall" && $3 == j { print $7 }' "$out")
		[[ "$stalled" < "$second" && "$second" < "$released" ]]
	done
	# each stalled lease ended by kill-at, while its attempt lived; the
	# killed one once its worker was gone: with a visibility timeout of an
	# hour, nothing waited for it
	assert_equal "$(leases)" "job-0001:1:stall,job-0002:1:stall,job-0003:1:stall,job-0004:1:kill,"
	# the record lists the stalls and the leases ended, and its timeline
	# draws each stalled attempt beside its redelivery
	mkdir "$BATS_TEST_TMPDIR/records"
	record=$(mkrecord -o "$BATS_TEST_TMPDIR/records" <"$out")
	assert_equal "$(grep -c '^  release: ' "$record")" 3
	assert_equal "$(grep -A1 '^  lease_ended:$' "$record" | grep -c '^    at: ')" 4
	grep -q 'STALL at before-commit' "${record%.yaml}.md"
	readable "${record%.yaml}.md" "${record%.yaml}.svg"
	# the queue's own table: every message acked, each stalled one read twice
	assert_equal "$(sql "SELECT string_agg(job_id || ':' || read_ct, ',' ORDER BY msg_id) FROM idem.message WHERE queue = 'rehearsal_stall_invoice_line' AND acked_at IS NOT NULL")" \
		"job-0001:2,job-0002:2,job-0003:2,job-0004:2,job-0005:1,job-0005:1"
}

@test "the same stalls against check-then-insert: caught, naming the keys written twice" {
	stall check-then-insert
	[ "$status" -eq 1 ]
	# stalled after its check, the first attempt writes the line the
	# second wrote meanwhile; stalled before its commit, nothing stops the
	# second writing it too
	assert_equal "$(duplicated)" '["inv-7001",1]=2 ["inv-7002",1]=2 '
	assert_equal "$(sql "SELECT string_agg(invoice_id || ':' || n, ',' ORDER BY invoice_id) FROM (SELECT invoice_id, count(*) n FROM demo.invoice_lines GROUP BY invoice_id HAVING count(*) > 1) d")" \
		"inv-7001:2,inv-7002:2"
}

@test "a stall in the external call against a worker with no stable key: charged twice" {
	stall unique -x none
	[ "$status" -eq 1 ]
	# the line is written once; the vendor charged the stalled key twice,
	# once for each live attempt
	assert_equal "$(total effects)" 5
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "external" && $4 == "[\"inv-7003\",1]" { print $6 }' "$out")" 2
	assert_equal "$(awk -F '\t' '$1 == "call" && $12 == "yes" && $9 == "[\"inv-7003\",1]" { print $4 }' "$out" | sort -u | wc -l)" 2
}

@test "a worker that tells no step: the stalls seen in the database and at the vendor" {
	stall unique --no-step
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total effects)" 5
	assert_equal "$(total duplicates)" 0
	assert_equal "$(stalls)" "stall-before-commit:job-0001:1:before-commit:blocked:database,stall-after-check:job-0002:1:before-write:acked:database,stall-in-the-call:job-0003:1:external-call:blocked:vendor,"
	assert_equal "$(rows_of step "$out")" "$(awk -F '\t' '$1 == "step" && $9 != "socket"' "$out" | wc -l)"
}

@test "a forced duplicate's copy is delivered once its original is acked, not before" {
	stall unique
	[ "$status" -eq 0 ]
	acked=$(awk -F '\t' '$1 == "attempt" && $2 == "job-0005" && $8 != "\\N" { print $8 }' "$out" | sort | head -n 1)
	copy=$(awk -F '\t' '$1 == "attempt" && $2 == "job-0005" { print $6 }' "$out" | sort | tail -n 1)
	[[ "$acked" < "$copy" ]]
	grep -q "^log	[^	]*	-1	0	kill-at: copy 1 of job job-0005 let go: its original was acked$" "$out"
	assert_equal "$(attempts_of job-0005)" "job-0005:1:conflict-noop already-called,job-0005:1:inserted called,"
}

@test "kill-at refuses a stall with one worker: none would be left to take the job again" {
	idem-worker --setup -g unique
	status=0
	seed-gen "$seed" | count-effects --before | dup-publish |
		kill-at -n 1 -- idem-worker -g unique >"$out" 2>"$err" || status=$?
	[ "$status" -eq 2 ]
	grep -q "a stall needs two workers" "$err"
}
