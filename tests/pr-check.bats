#!/usr/bin/env bats
# The pull-request check that examples/github/idem-records.yml ships: its
# check step, run as a runner runs it (tests/tools/run-workflow-step), on a
# team's repository with a base branch and a pull request's branch.

load helper
load sandbox-tests
load records-helper

sandbox_file_setup() {
	invoice_line_run
	export FAILING="$IDEM_TEST_ROOT/failing.tsv"
	# the same run as kill-at writes it when the race was never reached
	{ cat "$RUN"; printf 'missed\trace\ttwo-workers-race\t["inv-1005",1]\t\\N\tbefore-write\n'; } >"$FAILING"
	export WORKFLOW="$BATS_TEST_DIRNAME/../examples/github/idem-records.yml"
	export RUNNER="$BATS_TEST_DIRNAME/tools/run-workflow-step"
}

# The team's repository (main: the seed, allowed_signers and one record),
# cloned, with a pull request's branch checked out, as actions/checkout
# leaves it with fetch-depth 0.
setup() {
	team_repo "$BATS_TEST_TMPDIR/team"
	on_main=$(mkrecord -k "$key" -c <"$RUN")
	git clone -q "$BATS_TEST_TMPDIR/team" "$BATS_TEST_TMPDIR/workspace"
	cd "$BATS_TEST_TMPDIR/workspace"
	as_engineer
	git checkout -q -b pull-request
	summary="$BATS_TEST_TMPDIR/step-summary"
	echo "an earlier step's summary" >"$summary"
}

# The check step of the workflow, as the runner of a pull request into main.
check_step() {
	GITHUB_WORKSPACE="$PWD" GITHUB_BASE_REF=main GITHUB_STEP_SUMMARY="$summary" \
		"$RUNNER" "${1:-$WORKFLOW}" records "Check the records"
}

# The owner's approval of the record $1, committed.
approve() {
	mkrecord --approve "$1" -k "$owner" >/dev/null
	git add "$1.approval.sig"
	signed_commit -m "records: approved by the owner"
}

@test "a pull request adding a passing record passes the check and shows the record in the step summary" {
	r=$(mkrecord -k "$key" -c <"$RUN")
	approve "$r"
	day=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%d)
	run --separate-stderr check_step
	[ "$status" -eq 0 ]
	assert_equal "$output" ""
	assert_equal "$(head -n 1 "$summary")" "an earlier step's summary"
	sed 1d "$summary" >"$BATS_TEST_TMPDIR/ours"
	# what a reviewer reads, line by line
	grep -qxF '## idem records: the check passes' "$BATS_TEST_TMPDIR/ours"
	grep -qxF '1 record added, changed or removed since `origin/main`; 2 commits touching `records`, all signed by trusted keys.' "$BATS_TEST_TMPDIR/ours"
	grep -qxF "### ok \`$r\`" "$BATS_TEST_TMPDIR/ours"
	grep -qxF -- '- **verdict:** pass; signed by eng@example.org' "$BATS_TEST_TMPDIR/ours"
	grep -qxF -- '- **counts:** effects 6 (expected 6), duplicates 0 (expected 0), missing 0 (expected 0), pending 0 (expected 0), external 6 (expected 6), external_duplicates 0 (expected 0)' "$BATS_TEST_TMPDIR/ours"
	grep -qxF -- '- **guard:** constraint `invoice_lines_once` `UNIQUE (invoice_id, line_no)`, probe: enforced' "$BATS_TEST_TMPDIR/ours"
	grep -qx -- '- \*\*kill points:\*\* 3 reached: after-commit (`job-0002`, attempt 1, recovered in [0-9]* ms), before-commit (`job-0003`, attempt 1, recovered in [0-9]* ms), external-call (`job-0004`, attempt 1, recovered in [0-9]* ms); none missed' "$BATS_TEST_TMPDIR/ours"
	grep -qxF -- "- **staleness:** not stale; next review $(grep '^next_review:' "$r" | cut -d '"' -f 2)" "$BATS_TEST_TMPDIR/ours"
	grep -qxF -- "- **approval:** approved by owner@example.org on $day" "$BATS_TEST_TMPDIR/ours"
	# the record already on main is not the pull request's
	! grep -qF "$on_main" "$BATS_TEST_TMPDIR/ours"
}

@test "a pull request adding a failing record fails the check, annotated, and the summary says why" {
	r=$(mkrecord -k "$key" -c <"$FAILING")
	line=$(grep -n '^verdict:' "$r" | cut -d : -f 1)
	run --separate-stderr check_step
	[ "$status" -eq 1 ]
	assert_equal "$output" "::error file=$r,line=$line::record FAIL: verdict fail: the current record of invoice-line fails
::error file=$r::record FAIL: awaiting approval"
	sed 1d "$summary" >"$BATS_TEST_TMPDIR/ours"
	grep -qxF '## idem records: the check fails' "$BATS_TEST_TMPDIR/ours"
	grep -qxF "### FAIL \`$r\`" "$BATS_TEST_TMPDIR/ours"
	grep -qxF -- '- **FAIL:** verdict fail: the current record of invoice-line fails' "$BATS_TEST_TMPDIR/ours"
	grep -qxF -- '- **verdict:** fail; signed by eng@example.org' "$BATS_TEST_TMPDIR/ours"
	grep -qF -- '; **1 missed**: race before-write (`["inv-1005",1]`)' "$BATS_TEST_TMPDIR/ours"
}

@test "an unsigned commit in the pull request fails the check and is named in the summary" {
	r=$(mkrecord -k "$key" <"$RUN")
	mkrecord --approve "$r" -k "$owner" >/dev/null
	git add records
	git commit -q -m "records: unsigned"
	run --separate-stderr check_step
	[ "$status" -eq 1 ]
	id=$(git rev-parse HEAD)
	grep -qxF '1 record added, changed or removed since `origin/main`; 1 commit touching `records`, **1 not signed by a trusted key**.' "$summary"
	grep -qxF -- "- **FAIL** commit \`$id\`: commit is not signed: records: unsigned" "$summary"
	grep -qxF "### ok \`$r\`" "$summary"
}

@test "the check requires the owner's approval by default, and then names the owner" {
	grep -qxF '      REQUIRE_APPROVAL: "true"' "$WORKFLOW"
	r=$(mkrecord -k "$key" -c <"$RUN")
	run --separate-stderr check_step
	[ "$status" -eq 1 ]
	assert_equal "$output" "::error file=$r::record FAIL: awaiting approval"
	grep -qxF "### FAIL \`$r\`" "$summary"
	approve "$r"
	: >"$summary"
	run --separate-stderr check_step
	[ "$status" -eq 0 ]
	day=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%d)
	grep -qxF "### ok \`$r\`" "$summary"
	grep -qxF -- "- **approval:** approved by owner@example.org on $day" "$summary"
	# a team that keeps approval out of the check says so in the workflow
	sed 's/REQUIRE_APPROVAL: "true"/REQUIRE_APPROVAL: "false"/' "$WORKFLOW" >"$BATS_TEST_TMPDIR/workflow.yml"
	git rm -q "$r.approval.sig"
	signed_commit -m "records: the approval withdrawn"
	run --separate-stderr check_step "$BATS_TEST_TMPDIR/workflow.yml"
	[ "$status" -eq 0 ]
}

@test "the workflow starts on a pull request that touches records/ only, and builds idem from its sources" {
	echo "notes" >NOTES
	git add NOTES
	git commit -q -m "notes"
	run check_step
	[ "$status" -eq 78 ]
	# the install step builds and installs from the sources it checked out
	grep -qF 'make -C .idem-src install PREFIX=/usr/local' "$WORKFLOW"
	grep -qF 'fetch-depth: 0' "$WORKFLOW"
}

# The example run's stream, with the seed's rows as seed.yaml now gives
# them: a run of the seed as it was changed, where the change alters no
# count.
run_of_seed() {
	seed-gen seed.yaml
	awk -F '\t' '$1 !~ /^(#idem-tsv|seed|expect|external|scenario|job)$/' "$RUN"
}

@test "the workflow starts on a pull request that changes a seed or the worker's sources" {
	grep -qxF '      - "seeds/**"' "$WORKFLOW"
	mkdir -p seeds worker
	echo "rehearsal: another" >seeds/another.yaml
	git add seeds
	signed_commit -m "a seed"
	run check_step
	[ "$status" -ne 78 ]
	git checkout -q -b worker-only origin/main
	echo "echo work" >worker/run.sh
	git add worker
	signed_commit -m "the worker"
	run check_step
	[ "$status" -ne 78 ]
}

@test "a pull request that changes a seed or a worker source without a new record fails: stale" {
	# main's record of the seed, now with the worker's sources declared
	sed -i 's/^  command: \(.*\)$/  command: \1\n  sources: [worker\/]/' seed.yaml
	grep -qxF '  sources: [worker/]' seed.yaml
	mkdir -p worker
	echo "echo work" >worker/run.sh
	git add seed.yaml worker
	git commit -q -m "the seed names the worker's sources"
	r=$(run_of_seed | mkrecord -k "$key" -c)
	base=$(git rev-parse HEAD)
	run -0 verify-record --history -t --since "$base"
	# the worker changes, and no new record comes with it
	echo "echo more work" >>worker/run.sh
	git add worker
	git commit -q -m "the worker does more"
	run -1 verify-record --history -g --since "$base"
	assert_equal "$output" "::error file=worker/run.sh::record FAIL: stale: worker/run.sh changed in this pull request"
	# the seed changes
	sed -i 's/^  version: .*$/  version: "1.4.3"/' seed.yaml
	git commit -q -am "the seed's version"
	run -1 verify-record --history -t --since "$base"
	assert_equal "$(grep -c 'stale: ' <<<"$output")" 1
	grep -qxF "audit	record	$r	FAIL	stale: seed.yaml changed in this pull request" <<<"$output"
	# a new record of the rehearsal answers both
	run_of_seed | mkrecord -k "$key" -c >/dev/null
	run -0 verify-record --history -t --since "$base"
	! grep -q 'stale' <<<"$output"
}

@test "text from a record cannot format the summary, and a record the pull request removes is named" {
	r=$(mkrecord -k "$key" <"$RUN")
	sed -i 's/^  definition: "UNIQUE (invoice_id, line_no)"$/  definition: "UNIQUE (`a`) | <b>*x*<\/b>"/' "$r"
	grep -qF 'definition: "UNIQUE (`a`) | <b>*x*</b>"' "$r"
	resign "$r"
	git rm -q "$on_main" "$on_main.sig" "${on_main%.yaml}.md" "${on_main%.yaml}.intoto.jsonl"
	git add records
	signed_commit -m "records: a new record in place of the old one"
	approve "$r"
	run --separate-stderr check_step
	[ "$status" -eq 0 ]
	grep -qxF '2 records added, changed or removed since `origin/main`; 2 commits touching `records`, all signed by trusted keys.' "$summary"
	grep -qxF -- '- **guard:** constraint `invoice_lines_once` `` UNIQUE (`a`) | <b>*x*</b> ``, probe: enforced' "$summary"
	grep -qxF "### removed \`$on_main\`" "$summary"
	grep -qxF "The change removes this record." "$summary"
}
