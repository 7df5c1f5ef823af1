#!/usr/bin/env bats
# rehearse end to end: a signed, committed, verified record that ssh-keygen,
# git and a rerun agree with; a failing verdict; a failing setup; and the
# same counts twice. Interrupts and failing stages: rehearse-signals.bats.

load helper
load rehearse-helper

setup() {
	rehearse_setup
	quick_example_seed
	commit_signed "seed and signers"
}

teardown() {
	rm -rf "$T"
}

rh() {
	TMPDIR="$T" rehearse "$@"
}

# No PostgreSQL, worker, controller or scratch directory of a rehearsal
# left: rehearse waits for them all before it exits.
nothing_left() {
	assert_equal "$(ours)" ""
	assert_equal "$(ls "$T")" ""
}

@test "a full rehearsal: ssh-keygen and git verify what it made, and a rerun reproduces its digest" {
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	r="$output"
	[ -f "$r" ] && [ -f "$r.sig" ] && [ -f "${r%.yaml}.md" ]
	[[ "$stderr" == *"+ idem-worker --guard unique --setup && seed-gen seeds/invoice-line.yaml | count-effects --before | dup-publish | kill-at -- idem-worker --guard unique | count-effects | mkrecord"* ]]
	ssh-keygen -Y verify -f records/allowed_signers -I eng@example.org -n idem-record -s "$r.sig" <"$r"
	git_ssh verify-commit HEAD
	grep -q '^verdict: "pass"$' "$r"
	# the handoff of a real run, as make demo writes one, reads as the
	# golden ones do, its timeline accepted by Mermaid's parser
	readable "${r%.yaml}.md" "${r%.yaml}.svg"
	# the record's reproduce command is the pipeline that was printed
	grep -q '^reproduce: "idem-worker --guard unique --setup && seed-gen seeds/invoice-line.yaml | count-effects --before | dup-publish | kill-at -- idem-worker --guard unique | count-effects"$' "$r"
	run verify-record --rerun "$r"
	[ "$status" -eq 0 ]
	[[ "$output" == *"rerun reproduces the counts"* ]]
	run verify-record --history
	[ "$status" -eq 0 ]
	nothing_left
}

@test "the check-then-insert guard fails the rehearsal, naming the duplicate business key" {
	run --separate-stderr rh -k "$key" -f records/allowed_signers -w 'idem-worker --guard check-then-insert' seeds/invoice-line.yaml
	[ "$status" -eq 1 ]
	[[ "$stderr" == *'count-effects: duplicate: business key ["inv-1005",1] has 2 effect rows, expected 1'* ]]
	grep -q '^verdict: "fail"$' "$output"
	# the last line says why: a worker other than the seed's comes before
	# the counts, which the handoff shows after it
	assert_equal "$(tail -n 1 <<<"$stderr")" "rehearse: the record says fail: the worker that ran is not the one the seed declares; $output"
	head -n 1 "${output%.yaml}.md" | grep -qx "# Rehearsal invoice-line: fail: the worker that ran is not the one the seed declares"
	grep -qx '\*\*The counts differ from what the seed expected.\*\*' "${output%.yaml}.md"
	nothing_left
}

@test "a kill point the worker never reaches: rehearse's last line names it, not the counts" {
	# a step of the worker's own that idem-worker never sends: kill-at
	# waits until its deadline
	sed -i 's/kill: after-commit,/kill: ledger-flushed,/' seeds/invoice-line.yaml
	git add seeds/invoice-line.yaml && git commit -q -m "a step never sent"
	run --separate-stderr rh -k "$key" -f records/allowed_signers seeds/invoice-line.yaml
	[ "$status" -eq 1 ]
	assert_equal "$(tail -n 1 <<<"$stderr")" "rehearse: the record says fail: kill point never reached: step ledger-flushed of job job-0002, attempt 1 (scenario kill-after-commit); $output"
	head -n 1 "${output%.yaml}.md" | grep -q '^# Rehearsal invoice-line: fail: kill point never reached: '
	nothing_left
}

@test "without a key, rehearse says it signs with a throwaway key and the record still verifies" {
	run --separate-stderr rh seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"signing with a throwaway key made for this run"* ]]
	[[ "$stderr" == *"verified, signed by rehearse-throwaway"* ]]
	run rh -c seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	nothing_left
}

@test "a stage that fails stops the rehearsal with its status, and records nothing" {
	run rh -k "$key" -f records/allowed_signers -w 'idem-worker --guard no-such-guard' seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	[[ "$output" == *"idem-worker: -g no-such-guard: expected none, check-then-insert, memory, unique or outbox"* ]]
	[[ "$output" == *"rehearse: idem-worker --guard no-such-guard --setup failed (exit 2): idem-worker: -g no-such-guard: expected none, check-then-insert, memory, unique or outbox"* ]]
	assert_equal "$(ls records)" allowed_signers
	nothing_left
}

@test "the same seed and kill plan, run twice: the same counts and the same branches per job" {
	a=$(rh -k "$key" -f records/allowed_signers seeds/invoice-line.yaml 2>/dev/null)
	b=$(rh -k "$key" -f records/allowed_signers seeds/invoice-line.yaml 2>/dev/null)
	digest() { grep -A0 '^  digest:' "$1"; }
	assert_equal "$(digest "$b")" "$(digest "$a")"
	branches() {
		awk '/^- job: / { job = $3 } /^  branch: / { $1 = ""; print job, $0 }' "$1" | sort
	}
	assert_equal "$(branches "$b")" "$(branches "$a")"
}
