#!/usr/bin/env bats
# Ready or not, and best effort: a draft run of a seed that is not ready
# is recorded as a draft and never passes the audit; a run behind a guard
# the database cannot enforce is best effort, which the audit accepts only
# with the reconciliation owner's approval. Real runs of the example seed
# against idem-worker, real git and ssh-keygen.

load helper
load sandbox-tests
load records-helper

# The example seed (shorter waits) in $IDEM_TEST_ROOT/$1/seed.yaml, with
# the text on standard input appended and the lines matching $2 deleted,
# run against idem-worker with the unique guard, seed-gen given $3; the
# stream in run.tsv and count-effects' messages in counts.err beside it.
run_variant() {
	local dir="$IDEM_TEST_ROOT/$1"
	mkdir -p "$dir"
	{ sed -e 's/visibility_timeout: 2s/visibility_timeout: 1s/; s/within: 2s/within: 100ms/' \
		-e "/$2/d" seeds/invoice-line.yaml; cat; } >"$dir/seed.yaml"
	queue_reset
	idem-worker --setup -g unique
	local status=0
	(cd "$dir" && seed-gen $3 seed.yaml | count-effects --before | dup-publish |
		kill-at -- idem-worker --guard unique | count-effects >run.tsv 2>counts.err) || status=$?
	# a draft without a reconciliation owner: its call killed in flight has none
	[ "$status" -eq 0 ] || { [ "$status" -eq 1 ] && [ -n "$3" ]; }
}

sandbox_file_setup() {
	cd "$BATS_TEST_DIRNAME/.."
	echo 'guard: { enforceable: false, why: "the ledger keeps no key of its own" }' |
		run_variant best-effort '^$' ''
	run_variant draft '^reconciliation_owner:' --draft </dev/null
}

# The team's repository (records-helper's team_repo) for the seed of the
# run in $IDEM_TEST_ROOT/$1: an engineer's key, $key, and an owner's,
# $owner, that may only approve.
repo_for() {
	cp "$IDEM_TEST_ROOT/$1/seed.yaml" "$IDEM_TEST_ROOT/seed.yaml"
	team_repo "$BATS_TEST_TMPDIR/repo"
	RUN="$IDEM_TEST_ROOT/$1/run.tsv"
}

# What the audit says of one record, in its tab-separated form.
audit_of() {
	verify-record --history -t | awk -F '\t' -v r="$1" '$1 == "audit" && $3 == r { print $4 "\t" $5 }'
}

@test "a best-effort guard: count-effects, the record and verify-record agree on the verdict best effort" {
	grep -qxF 'count-effects: verdict: best effort: the database cannot enforce the guard (the ledger keeps no key of its own); it stands when billing-oncall approves the record' \
		"$IDEM_TEST_ROOT/best-effort/counts.err"
	awk -F '\t' '$1 == "seed" { print $24 }' "$IDEM_TEST_ROOT/best-effort/run.tsv" | grep -qxF 'the ledger keeps no key of its own'
	repo_for best-effort
	r=$(mkrecord -k "$key" -c <"$RUN")
	grep -qx 'verdict: "best effort"' "$r"
	grep -qx 'best_effort: "the ledger keeps no key of its own"' "$r"
	run ! grep -q '^draft:' "$r"
	# every duplicate is counted as ever: the counts are those of a pass
	grep -q '^# Rehearsal invoice-line: best effort$' "${r%.yaml}.md"
	grep -q 'the approval of billing-oncall' "${r%.yaml}.md"
	# the reviewer's check shows it, and leaves the approval to the audit
	run -0 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict best effort, which stands only with the owner's approval"
	# check_verdict recomputes it: a record that says pass is refused
	sed -i 's/^verdict: "best effort"$/verdict: "pass"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"verdict: the record says pass, its counts say best effort"* ]]
}

@test "the audit fails a best-effort record naming the owner, and accepts it with the owner's approval" {
	repo_for best-effort
	r=$(mkrecord -k "$key" -c <"$RUN")
	want="verdict best effort: the database cannot enforce the guard (the ledger keeps no key of its own); it stands only with the approval of billing-oncall"
	run -1 verify-record --history -t
	grep -qxF "audit	record	$r	FAIL	$want" <<<"$output"
	# an engineer's signature is no approval
	mkrecord --approve "$r" -k "$key" >/dev/null
	assert_equal "$(audit_of "$r")" "FAIL	$want"
	# the owner's is, as ssh-keygen agrees
	run -0 mkrecord --approve "$r" -k "$owner"
	ssh-keygen -Y verify -f records/allowed_signers -I owner@example.org -n idem-approval -s "$r.approval.sig" <"$r"
	git add "$r.approval.sig"
	signed_commit -m "records: best effort approved"
	run -0 verify-record --history
	[[ "$(audit_of "$r")" == "ok	best effort, signed by eng@example.org; approved by owner@example.org on "* ]]
	run -0 verify-record --history --require-approval
}

@test "rehearse refuses a seed that is not ready before it starts anything; --draft runs it as a draft" {
	repo_for draft
	run --separate-stderr rehearse -k "$key" -f records/allowed_signers seed.yaml
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "rehearse: seed.yaml: not ready: no reconciliation_owner"
	assert_equal "$(ls -A records)" allowed_signers
	run --separate-stderr rehearse -k "$key" -f records/allowed_signers --draft seed.yaml
	# the run's finding: no owner to own the call killed in flight
	[ "$status" -eq 1 ]
	[[ "$stderr" == *'count-effects: pending: business key ["inv-1004",1]: its call was killed, and the seed names no reconciliation owner'* ]]
	[[ "$stderr" == *"&& seed-gen --draft seed.yaml | count-effects --before | dup-publish | kill-at -- "* ]]
	grep -qx 'draft: true' "$output"
	grep -q '^reproduce: ".*seed-gen --draft seed.yaml | ' "$output"
}

@test "a draft run records draft: true and its --draft, and the audit fails it whatever its verdict" {
	grep -q '^seed	.*	true	\\N$' "$IDEM_TEST_ROOT/draft/run.tsv"
	# count-effects finds no owner of the call killed in flight
	grep -qxF 'count-effects: pending: business key ["inv-1004",1]: its call was killed, and the seed names no reconciliation owner to own its 1 rows of demo.pending_calls (the first names unassigned)' \
		"$IDEM_TEST_ROOT/draft/counts.err"
	repo_for draft
	r=$(mkrecord -k "$key" -c <"$RUN")
	# the record agrees: no one owns the pending row of the call killed in flight
	grep -qx 'verdict: "fail"' "$r"
	grep -q '^  result: "wrong-owner"$' "$r"
	grep -qx 'draft: true' "$r"
	grep -qx 'reproduce: "seed-gen --draft seed.yaml | count-effects --before | dup-publish | kill-at | count-effects"' "$r"
	grep -q 'A draft: the seed is not ready' "${r%.yaml}.md"
	# the record itself verifies: a draft is a fact of the run, not a forgery;
	# its failing verdict is the exit status
	run -1 verify-record "$r"
	[[ "$output" == *": verified, signed by eng@example.org; verdict fail" ]]
	run -1 verify-record --history -t
	grep -qxF "audit	record	$r	FAIL	draft: made with seed-gen --draft from a seed that is not ready; a draft record never passes the audit" <<<"$output"
	# the owner's approval does not make it pass
	mkrecord --approve "$r" -k "$owner" >/dev/null
	run -1 verify-record --history -g
	[[ "$output" == *"::error file=$r,line="*"::record FAIL: draft: "* ]]
}
