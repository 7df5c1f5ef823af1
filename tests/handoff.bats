#!/usr/bin/env bats
# The handoff as reviewers read it: golden handoffs of a pass, a fail, a
# race and a run with pending jobs, made by mkrecord from the streams of
# real runs (tests/fixtures/handoff, made by its make-streams); their
# Mermaid timelines checked against the gantt grammar's rules and by
# Mermaid's own parser (tests/node), their SVG timelines by an XML parser.
# No database: mkrecord reads the stream.

load helper
load answers-helper

fixtures="$BATS_TEST_DIRNAME/fixtures/handoff"
golden="$BATS_TEST_DIRNAME/golden/handoff"
fixture_key="$BATS_TEST_DIRNAME/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519"

# A repository with the fixtures' seeds committed at a fixed time, so the
# seed revision is the same on every run, and the fixture key allowed.
setup() {
	signing_repo "$BATS_TEST_TMPDIR/repo" "$fixture_key"
	cp "$fixtures"/*.yaml .
	git add ./*.yaml
	GIT_AUTHOR_DATE="2026-12-01T10:00:00Z" GIT_COMMITTER_DATE="2026-12-01T10:00:00Z" \
		git commit -q -m "seeds"
}

# handoff NAME [OPTION...]: the handoff of fixture NAME as mkrecord -f md
# prints it, the record's date and time of making replaced by fixed words.
handoff() {
	mkrecord -k "$key" -n 2027-03-01 -f md "${@:2}" <"$fixtures/$1.tsv" >"$BATS_TEST_TMPDIR/$1.raw"
	sed -E -e 's/^Record made [^;]*;/Record made CREATED;/' \
		-e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}-(invoice-line|charge)/DATE-\1/g' \
		"$BATS_TEST_TMPDIR/$1.raw" >"$BATS_TEST_TMPDIR/$1.md"
}

@test "the handoff of a passing run: the golden one, readable, its timeline valid" {
	handoff pass -w reviewer-queue=26h -w owner-approval=90m
	assert_golden "$BATS_TEST_TMPDIR/pass.md" "$golden/pass.md"
	readable "$BATS_TEST_TMPDIR/pass.md" records/*-invoice-line.svg
}

@test "the handoff of a failing run: the golden one, readable, its timeline valid" {
	handoff fail
	assert_golden "$BATS_TEST_TMPDIR/fail.md" "$golden/fail.md"
	readable "$BATS_TEST_TMPDIR/fail.md" records/*-invoice-line.svg
}

@test "the handoff of a race: the golden one, two lanes on one key" {
	handoff race
	assert_golden "$BATS_TEST_TMPDIR/race.md" "$golden/race.md"
	readable "$BATS_TEST_TMPDIR/race.md" records/*-invoice-line-race.svg
	grep -q '^    section job-0005 race, two lanes on one key$' "$BATS_TEST_TMPDIR/race.md"
	# both deliveries of the raced job, each in its own lane of the drawing
	[ "$(grep -c '>msg [0-9]*</text>' records/*-invoice-line-race.svg)" -eq 7 ]
}

@test "the handoff of a run with pending jobs: the golden one, the calls on the same axis" {
	handoff pending
	assert_golden "$BATS_TEST_TMPDIR/pending.md" "$golden/pending.md"
	readable "$BATS_TEST_TMPDIR/pending.md" records/*-charge-pending.svg
	grep -q 'never redelivered, pending' "$BATS_TEST_TMPDIR/pending.md"
	grep -q '^    external call POST /v1/charges 0 killed :milestone, ' "$BATS_TEST_TMPDIR/pending.md"
}

# The stall fixture's seed, committed apart from the others: the golden
# handoffs name the revision of theirs. Its stream, stall.tsv, is written
# by hand, the stall and lease rows as idem-tsv(5) defines them, with the
# count rows count-effects would append.
commit_stall_seed() {
	cp "$fixtures/stall/stall.yaml" .
	git add stall.yaml
	git commit -q -m "the stall seed"
}

@test "the handoff of a stall: its table beside the kill points, the leases ended, two attempts of one job at once" {
	commit_stall_seed
	handoff stall
	readable "$BATS_TEST_TMPDIR/stall.md" records/*-invoice-line-stall.svg
	grep -q '^# Rehearsal invoice-line-stall: pass$' "$BATS_TEST_TMPDIR/stall.md"
	sed -n '/^## Kill points$/,/^## Timeline$/p' "$BATS_TEST_TMPDIR/stall.md" >"$BATS_TEST_TMPDIR/points.md"
	grep -qxF '| stall-after-commit | `job-0001` | 1 | `after-commit` | socket | 71 ms | 420 ms | the redelivered attempt'"'"'s ack |' \
		"$BATS_TEST_TMPDIR/points.md"
	grep -qxF '| stall-until-commit | `job-0002` | 1 | `before-commit` | socket | 65 ms | 396 ms | a lock the stalled attempt held |' \
		"$BATS_TEST_TMPDIR/points.md"
	grep -qxF '| `job-0001` | 1 | 1 | 0 ms | 50 ms | 70 ms |  | 1 | not acked: inserted; lease ended 380 ms (stall) | none |' \
		"$BATS_TEST_TMPDIR/stall.md"
	# the stalled attempt's bar runs from its delivery past the redelivered one's
	grep -qx '    section job-0001 stall-after-commit stall, two attempts at once' "$BATS_TEST_TMPDIR/stall.md"
	grep -qx '    msg 1 try 1 stalled at after-commit, inserted, not acked :active, 50, 420' "$BATS_TEST_TMPDIR/stall.md"
	grep -qx '    STALL at after-commit :crit, milestone, 71, 71' "$BATS_TEST_TMPDIR/stall.md"
	grep -qx '    release on acked :milestone, 420, 420' "$BATS_TEST_TMPDIR/stall.md"
	grep -qx '    msg 1 try 2 conflict-noop, acked :done, 400, 420' "$BATS_TEST_TMPDIR/stall.md"
	grep -q '>STALL</text>' records/*-invoice-line-stall.svg
}

@test "a stall whose bounded wait ran out fails the verdict, named in the heading; so does a lease held to its bound" {
	commit_stall_seed
	sed 's/^\(stall	stall-after-commit	.*	\)[^	]*	acked	socket$/\1\\N	bound	socket/' \
		"$fixtures/stall.tsv" >"$BATS_TEST_TMPDIR/bound.tsv"
	grep -q '	\\N	bound	socket$' "$BATS_TEST_TMPDIR/bound.tsv"
	mkrecord -k "$key" -n 2027-03-01 -f md <"$BATS_TEST_TMPDIR/bound.tsv" >"$BATS_TEST_TMPDIR/bound.md"
	readable "$BATS_TEST_TMPDIR/bound.md" records/*-invoice-line-stall.svg
	assert_equal "$(tr '\n' ' ' <"$BATS_TEST_TMPDIR/bound.md" | grep -o '^# Rehearsal [^V]*')" \
		"# Rehearsal invoice-line-stall: fail: stall at after-commit of job job-0001, attempt 1: the bounded wait ran out before the redelivered attempt was acked (scenario stall-after-commit)  "
	grep -qF '| stall-after-commit | `job-0001` | 1 | `after-commit` | socket | 71 ms | never | **the bound ran out: a finding** |' \
		"$BATS_TEST_TMPDIR/bound.md"
	grep -q '^verdict: "fail"$' records/*-invoice-line-stall.yaml
	rm records/*-invoice-line-stall.*
	sed 's/^\(lease	.*	job-0002	1	\)stall$/\1bound/' "$fixtures/stall.tsv" |
		mkrecord -k "$key" -n 2027-03-01 -f md >"$BATS_TEST_TMPDIR/lease.md"
	grep -q '^# Rehearsal invoice-line-stall: fail: the lease of job job-0002, attempt 1, reached its bound while' \
		"$BATS_TEST_TMPDIR/lease.md"
	grep -q '^verdict: "fail"$' records/*-invoice-line-stall.yaml
}

@test "the handoff of answers lost, late and forgotten: the keys each attempt sent, the key changed, the pending check" {
	commit_answers_seed true
	answers_stream >"$BATS_TEST_TMPDIR/answers.tsv"
	mkrecord -k "$key" -n 2027-03-01 -f md <"$BATS_TEST_TMPDIR/answers.tsv" >"$BATS_TEST_TMPDIR/answers.md"
	md="$BATS_TEST_TMPDIR/answers.md"
	readable "$md" records/*-answers.svg
	grep -q '^# Rehearsal answers: fail: business key \["inv-1004",1\] changed its Idempotency-Key across calls 4, 6' "$md"
	# the keys each attempt sent, with the answer, when it came and the effect
	assert_equal "$(sed -n '/^| job | try | call | idempotency key | answer | answered | effect |$/,/^$/p' "$md")" \
		'| job | try | call | idempotency key | answer | answered | effect |
|---|---|---|---|---|---|---|
| `job-0001` | 1 | 1 | `job-0001` | lost | none | yes |
| `job-0002` | 1 | 2 | `job-0002` | late | 3152 ms | yes |
| `job-0003` | 1 | 3 | `job-0003` | killed | none | yes |
| `job-0004` | 1 | 4 | `job-0004-1` | error | 155 ms | no |
| `job-0001` | 2 | 5 | none | ok | 611 ms | no |
| `job-0004` | 2 | 6 | `job-0004-2` | ok | 621 ms | yes |'
	# the business key that changed its key, and the pending check
	grep -q '^Business keys whose calls did not all send the same `Idempotency-Key`:$' "$md"
	grep -q '^- `\["inv-1004",1\]`: calls 4, 6 sent the keys `job-0004-1`, `job-0004-2`; 1 took effect; \*\*this fails' "$md"
	grep -qxF '| `["inv-1003",1]` | yes | 1 | billing-oncall | owned |' "$md"
	grep -qxF '| 460 ms | `["inv-1003",1]` | `job-0003` | 3 | 24 h |' "$md"
	# the late answer where it came, in the chart and in the drawing
	grep -qx '    LATE answer to call 2 :milestone, 3152, 3152' "$md"
	grep -q '>LATE</text>' records/*-answers.svg
}

@test "the handoff of a volume run: the scenarios' jobs on the timeline, a histogram of recovery times" {
	handoff volume
	readable "$BATS_TEST_TMPDIR/volume.md" records/*-invoice-line-volume.svg
	kills=$(grep -c '^kill	kills	' "$fixtures/volume.tsv")
	dups=$(awk -F '\t' '$1 == "publish" && $3 != "0"' "$fixtures/volume.tsv" | wc -l)
	grep -q "^    title the jobs of the scenarios, $((kills + dups)) of 80, in ms from the run's start$" \
		"$BATS_TEST_TMPDIR/volume.md"
	assert_equal "$(grep -c '^    section .* kills$' "$BATS_TEST_TMPDIR/volume.md")" "$kills"
	assert_equal "$(grep -c '^    section .* duplicate publish$' "$BATS_TEST_TMPDIR/volume.md")" "$dups"
	# the histogram counts every kill, in the handoff and in the drawing
	assert_equal "$(sed -n '/^| recovery time | kills | |$/,/^$/p' "$BATS_TEST_TMPDIR/volume.md" |
		awk -F ' [|] ' 'NR > 2 && NF > 2 { n += $2 } END { print n }')" "$kills"
	grep -q 'recovery time, kill to clean retry ack: kills per range' records/*-invoice-line-volume.svg
}

@test "a committed record has its timeline beside it, in the same signed commit" {
	r=$(mkrecord -k "$key" -c <"$fixtures/pass.tsv")
	base=${r%.yaml}
	[ -s "$base.svg" ]
	assert_equal "$(git show --name-only --format= HEAD | sort | tr '\n' ' ')" \
		"$base.intoto.jsonl $base.md $base.svg $base.trace.json $base.yaml $base.yaml.sig "
	grep -qF "[$(basename "$base").svg]($(basename "$base").svg)" "$base.md"
	# the commands of the handoff, run as written, verify the record
	grep -qxF "    verify-record $r" "$base.md"
	verify-record "$r"
	sed -n '/^    ssh-keygen -Y verify/,/[^\\]$/p' "$base.md" | sed 's/^ *//' >"$BATS_TEST_TMPDIR/verify.sh"
	sh "$BATS_TEST_TMPDIR/verify.sh"
	# the handoff names the signer by the key's fingerprint, as ssh-keygen prints it
	fp=$(ssh-keygen -l -f "$fixture_key.pub" | cut -d ' ' -f 2)
	grep -qF "Signed by \`eng@example.org\`, key \`$fp\`." "$base.md"
}

@test "the handoff names the record by the name it got when that name was taken" {
	r1=$(mkrecord -k "$key" <"$fixtures/pass.tsv")
	r2=$(mkrecord -k "$key" <"$fixtures/pass.tsv")
	[ "$r1" != "$r2" ]
	grep -qxF "    verify-record $r2" "${r2%.yaml}.md"
	grep -qxF "    verify-record $r1" "${r1%.yaml}.md"
}

@test "the Mermaid checker refuses what the gantt grammar would not read" {
	printf '%s\n' '```mermaid' gantt '    dateFormat x' '    section a: b' '    t1 :done, 5, 1' \
		'    x#y :0, 1' '    section empty' '    section words the lexer takes for its own' \
		'    Call POST :0, 1' '    2026-12-01 run :0, 1' '```' >"$BATS_TEST_TMPDIR/bad.md"
	run test_tool mermaid-check "$BATS_TEST_TMPDIR/bad.md"
	[ "$status" -eq 1 ]
	assert_contains "$output" ":4: a section name empty or holding :, # or ;" \
		":5: a task that ends before it starts" ":6: a task name holding # or ;" \
		":7: an empty section" ":9: a task name starting with a keyword: Call POST" \
		":10: a task name starting with a date: 2026-12-01 run"
}

@test "a browser draws the timeline: a headless Chromium screenshot, kept out of the repository" {
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null ||
		skip "no Chromium installed: tests/tools/svg-screenshot is the check"
	r=$(mkrecord -k "$key" <"$fixtures/race.tsv")
	png=$("$BATS_TEST_DIRNAME/tools/svg-screenshot" "${r%.yaml}.svg" "$BATS_TEST_TMPDIR/race.png")
	assert_equal "$png" "$BATS_TEST_TMPDIR/race.png"
	[ -z "$(git status --porcelain -- '*.png')" ]
}
