#!/usr/bin/env bats
# rehearse, the baseline, the sandbox account and the waiting times: a
# baseline that fails ends in a record that says so, with no fault forced;
# the setup and the workers run as the seed's role, which the record
# lists; waiting times given to rehearse fill the record's waiting.

load helper
load rehearse-helper

setup() {
	rehearse_setup
	quick_example_seed
}

teardown() {
	rm -rf "$T"
}

@test "a baseline that fails: the record says baseline failed with its counts, and no fault was forced" {
	# a second job of inv-1006, in no scenario: delivered one after the
	# other, without a guard, they write the line twice
	sed -i '/id: job-0006/a\  - { id: job-0007, payload: { invoice_id: inv-1006, line_no: 1, amount_cents: 310, currency: EUR } }' \
		seeds/invoice-line.yaml
	commit_signed "seed and signers"
	run --separate-stderr env TMPDIR="$T" rehearse -k "$key" -f records/allowed_signers \
		-w 'idem-worker --guard none' seeds/invoice-line.yaml
	[ "$status" -eq 1 ]
	r="$output"
	[[ "$stderr" == *'kill-at: baseline failed: 2 of 1 effects, 1 duplicate, 0 missing, 0 messages unacked; no fault was forced'* ]]
	grep -q '^verdict: "fail"$' "$r"
	grep -A 12 '^baseline:' "$r" >"$BATS_TEST_TMPDIR/baseline"
	grep -q '^  result: "failed"$' "$BATS_TEST_TMPDIR/baseline"
	grep -q '^  jobs: 2$' "$BATS_TEST_TMPDIR/baseline"
	grep -q '^  summary: "baseline failed: 2 of 1 effects, 1 duplicate, 0 missing, 0 of 2 messages unacked; no fault was forced"$' "$BATS_TEST_TMPDIR/baseline"
	# no fault was forced: nothing killed, nothing missed, only the
	# baseline's jobs were delivered
	grep -q '^kill_points: \[\]$' "$r"
	grep -q '^missed: \[\]$' "$r"
	assert_equal "$(sed -n 's/^- job: "\(job-[0-9]*\)"$/\1/p' "$r" | sort -u | tr '\n' ' ')" 'job-0006 job-0007 '
	# the handoff's line, folded to stay readable
	tr '\n' ' ' <"${r%.yaml}.md" |
		grep -q 'Baseline (jobs in no scenario, run first with one worker; jobs: 2): \*\*failed\*\*, 2 of 1 effects; \*\*baseline failed'
	# the record is whole: it verifies, its verdict agrees, and the fail is a finding
	run -1 verify-record -f records/allowed_signers "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
}

@test "rehearse -W passes the waiting times to mkrecord: the record's waiting is filled" {
	commit_signed "seed and signers"
	run --separate-stderr env TMPDIR="$T" rehearse -k "$key" -f records/allowed_signers \
		-W reviewer-queue=2h -W vendor-limit=30m seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	r="$output"
	[[ "$stderr" == *"| mkrecord -k $key -o records -w reviewer-queue=2h -w vendor-limit=30m"* ]]
	sed -n '/^waiting:/,/^[a-z]/p' "$r" >"$BATS_TEST_TMPDIR/waiting"
	assert_equal "$(grep -o 'reviewer-queue\|vendor-limit\|7200000\|1800000' "$BATS_TEST_TMPDIR/waiting" | tr '\n' ' ')" \
		"reviewer-queue 7200000 vendor-limit 1800000 "
}

@test "rehearse -W refuses a cause or duration it does not know before anything runs" {
	run -2 rehearse -W coffee=1h seeds/invoice-line.yaml
	assert_equal "$output" "rehearse: -W coffee=1h: the cause is one of reviewer-queue, sandbox-availability, vendor-limit, owner-approval"
	run -2 rehearse -W owner-approval=soon seeds/invoice-line.yaml
	assert_equal "$output" "rehearse: -W owner-approval=soon: expected a duration such as 2h"
	assert_equal "$(ls -A records)" allowed_signers
}

@test "the reference worker passes every scenario as the sandbox account; the record lists its grants" {
	commit_signed "seed and signers"
	run --separate-stderr env TMPDIR="$T" rehearse -k "$key" -f records/allowed_signers seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	r="$output"
	[[ "$stderr" == *"rehearse: the setup runs as the sandbox account rehearsal-bot"* ]]
	grep -q '^verdict: "pass"$' "$r"
	python3 - "$r" <<-'PY'
		import json, re, sys
		# the record is YAML in JSON's flow style for its values: read the account by hand
		text = open(sys.argv[1]).read()
		assert re.search(r'^account:\n  role: "rehearsal-bot"$', text, re.M), "no account"
		# the setup ran with CREATE on the database and owned its schema
		setup = text.split('\n  setup:\n', 1)[1].split('\n  held:\n', 1)[0]
		assert 'object: "idem"\n    privilege: "CREATE"' in setup, setup
		assert 'object: "demo"\n    privilege: "OWNER"' in setup, setup
		held = text.split('\n  held:\n', 1)[1].split('\n  denied:\n', 1)[0]
		assert 'listed: false' not in held, held
		assert 'privilege: "TRUNCATE"' not in held, held
		assert 'object: "demo.invoice_lines"\n    privilege: "INSERT"' in held, held
		denied = text.split('\n  denied:\n', 1)[1].split('\n  findings:', 1)[0]
		assert 'held: true' not in denied, denied
		assert 'object: "idem.message"\n    privilege: "TRUNCATE"\n    held: false' in denied, denied
		assert re.search(r'^  findings: \[\]$', text, re.M), "findings"
	PY
	grep -qx 'The worker ran as the role `rehearsal-bot`, which held its list and no more.' "${r%.yaml}.md"
	grep -qx -- '- TRUNCATE on `idem.message`: denied' "${r%.yaml}.md"
}
