#!/usr/bin/env bats
# Every program that reads a stream refuses the same bad streams with the
# same message, exit status 2, nothing on standard output and nothing in
# the database: one reader checks every row (idem-tsv(5)).

load helper
load sandbox-tests

# Each bad stream of tests/fixtures/streams/bad is good.tsv up to one
# broken line; the message every reader gives for it, after its own name.
refusals() {
	cat <<-'EOF'
	job-twice	stdin:9: job row, field job_id: job "job-0001" appears twice in the stream
	expect-negative	stdin:3: expect row, field effects: expected a whole number from 0 (digits, no sign, no leading zeros), got "-1"
	expect-too-large	stdin:3: expect row, field effects: "99999999999999999999" is out of range (at most 9223372036854775807)
	expect-leading-zero	stdin:3: expect row, field duplicates: expected a whole number from 0 (digits, no sign, no leading zeros), got "00"
	expect-plus	stdin:3: expect row, field pending: expected a whole number from 0 (digits, no sign, no leading zeros), got "+0"
	expect-twice	stdin:4: a second expect row
	key-columns-not-json	stdin:2: seed row, field key_columns: not JSON (at byte 1): "invoice_id,line_no"
	key-columns-empty	stdin:2: seed row, field key_columns: expected a JSON array of one or more strings, got "[]"
	key-columns-numbers	stdin:2: seed row, field key_columns: expected a JSON array of one or more strings, got "[1,2]"
	key-scope-unknown	stdin:2: seed row, field key_scope: expected one of business, job; got "tenant"
	visibility-timeout-zero	stdin:2: seed row, field visibility_timeout_ms: expected a whole number from 1 (digits, no sign, no leading zeros), got "0"
	seed-sha256-uppercase	stdin:2: seed row, field sha256: expected a SHA-256 in 64 lowercase hex digits, got "39F08F8C3F308A6EE2A225BBEBA73B94CE5CC282..."
	seed-twice	stdin:9: a second seed row
	expect-before-seed	stdin:2: an expect row before the seed row; start the stream with seed-gen
	no-seed	stdin: no seed row: start the stream with seed-gen
	scenario-undeclared	stdin:6: job row, field scenario: no scenario row named "kill-before-commit" before it
	scenario-twice	stdin:6: scenario row, field name: scenario "kill-after-commit" appears twice in the stream
	job-id-missing	stdin:6: job row, field job_id: missing (\N)
	job-id-nul-escape	stdin:6: job row, field job_id: bad escape (only \\ \t \n \r and \N are allowed)
	payload-not-json	stdin:6: job row, field payload: not JSON (at byte 2): "{amount_cents:1250}"
	payload-array	stdin:6: job row, field payload: expected a JSON object, got "[1250]"
	payload-nul-escape	stdin:6: job row, field payload: not JSON (at byte 11): "{\"note\":\"a\\u0000b\"}"
	payload-sha256-short	stdin:6: job row, field payload_sha256: expected a SHA-256 in 64 lowercase hex digits, got "5d5d34669386072d251d9ee61767e4cb973b6dda..."
	publish-copy	stdin:14: publish row, field copy: expected a whole number from 0 (digits, no sign, no leading zeros), got "one"
	publish-msg-id	stdin:14: publish row, field msg_id: empty
	queue-twice	stdin:14: a second queue row
	queue-kind-other	stdin:13: queue row, field kind: pg-boss, but the seed row names a queue of kind idem
	seed-queue-kind	stdin:2: seed row, field queue_kind: sqs has no adapter built in (idem pg-boss graphile-worker have), and the row names no adapter file
	publish-published-at	stdin:14: publish row, field published_at: expected a UTC time such as 2026-11-29T13:48:32.247642Z, got "yesterday"
	publish-status	stdin:14: publish row, field status: expected one of published, existing; got "sent"
	publish-fields	stdin:14: publish row has 4 fields, expected 5
	step-action	stdin:18: step row, field action: expected one of go, hold, release, kill; got "pause"
	kill-attempt-zero	stdin:20: kill row, field attempt: expected a whole number from 1 (digits, no sign, no leading zeros), got "0"
	log-nul-byte	stdin:21: a NUL byte
	log-invalid-utf8	stdin:21: invalid UTF-8
	attempt-consumed-at	stdin:23: attempt row, field consumed_at: expected a UTC time such as 2026-11-29T13:48:32.247642Z, got "2026-12-01 10:03:54.250674"
	attempt-committed-at-offset	stdin:23: attempt row, field committed_at: expected a UTC time such as 2026-11-29T13:48:32.247642Z, got "2026-12-01T11:03:54.255538+01:00"
	attempt-acked-at-no-day	stdin:23: attempt row, field acked_at: expected a UTC time such as 2026-11-29T13:48:32.247642Z, got "2026-02-30T10:03:54.264767Z"
	recover-ms-negative	stdin:26: recover row, field recovery_ms: expected a whole number from 0 (digits, no sign, no leading zeros), got "-5"
	query-phase	stdin:27: query row, field phase: expected one of before, after; got "during"
	count-observed	stdin:31: count row, field observed: expected a whole number from 0 (digits, no sign, no leading zeros), got "1.0"
	count-expected-space	stdin:31: count row, field expected: expected a whole number from 0 (digits, no sign, no leading zeros), got " 1"
	guard-kind	stdin:39: guard row, field kind: expected one of constraint, index, none; got "trigger"
	probe-result	stdin:40: probe row, field result: expected one of enforced, not-enforced, skipped, inconclusive; got "maybe"
	measure-value	stdin:41: measure row, field value: expected a decimal number such as 12.5, got "NaN"
	digest-rows	stdin:45: digest row, field rows: expected a whole number from 0 (digits, no sign, no leading zeros), got "twelve"
	truncated	stdin:45: last line has no newline (truncated stream?)
	EOF
}

sandbox_file_setup() {
	idem-worker --setup -g unique
}

setup() {
	sandbox_test_setup
	streams="$BATS_TEST_DIRNAME/fixtures/streams"
	records="$BATS_TEST_TMPDIR/records"
}

# Runs one reading program on standard input, as a pipeline would.
reader() {
	case "$1" in
	count-effects) count-effects ;;
	dup-publish) dup-publish -s 0 ;;
	kill-at) kill-at -- true ;;
	mkrecord) mkrecord -o "$records" ;;
	esac
}

@test "every reader refuses each bad stream with the same message and status 2, leaving nothing" {
	local written
	shopt -s nullglob
	failures=""
	[ "$(refusals | wc -l)" -eq "$(ls "$streams/bad" | wc -l)" ]
	while IFS='	' read -r name message; do
		[ -f "$streams/bad/$name.tsv" ] || { failures+="no fixture $name"$'\n'; continue; }
		for prog in count-effects dup-publish kill-at mkrecord; do
			status=0
			reader "$prog" <"$streams/bad/$name.tsv" >"$out" 2>"$err" || status=$?
			[ "$status" -eq 2 ] || failures+="$name: $prog exited $status"$'\n'
			said=$(<"$err")
			[ "$said" = "$prog: $message" ] || failures+="$name: $prog said: $said"$'\n'
			[ ! -s "$out" ] || failures+="$name: $prog wrote on standard output"$'\n'
			written=("$records"/* "$records"/.[!.]*)
			[ "${#written[@]}" -eq 0 ] || failures+="$name: $prog wrote a record"$'\n'
		done
		# once for the four: only a program that publishes could
		[ "$(sql 'SELECT count(*) FROM idem.message')" -eq 0 ] ||
			failures+="$name: a reader left messages in the queue"$'\n'
	done < <(refusals)
	printf '%s' "$failures"
	[ -z "$failures" ]
}

@test "every reader accepts the good stream the bad ones are made from" {
	# through count-effects and dup-publish whole, and past the reading of
	# kill-at and mkrecord, which stop at what they check after it
	count-effects --before <"$streams/good.tsv" >"$out"
	assert_equal "$(head -n 45 "$out" | cmp - "$streams/good.tsv" && echo same)" same
	dup-publish -s 0 <"$streams/good.tsv" >"$out"
	assert_equal "$(grep -c '	published$' "$out")" 8
	run --separate-stderr kill-at -k before-commit:job-9999:1 -- true <"$streams/good.tsv"
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "kill-at: -k before-commit:job-9999:1: no job job-9999 in the stream"
	cd "$BATS_TEST_TMPDIR"
	run --separate-stderr mkrecord -o "$records" <"$streams/good.tsv"
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "mkrecord: the seed of the stream, seeds/invoice-line.yaml, is not here: run mkrecord where seed-gen ran"
}

@test "a job row late in a stream, after its jobs went out, publishes nothing and passes nothing on" {
	seed-gen tests/fixtures/seeds/generate.yaml >"$BATS_TEST_TMPDIR/stream"
	n=$(wc -l <"$BATS_TEST_TMPDIR/stream")
	grep -m 1 '^job	' "$BATS_TEST_TMPDIR/stream" >>"$BATS_TEST_TMPDIR/stream"
	id=$(grep -m 1 '^job	' "$BATS_TEST_TMPDIR/stream" | cut -f 2)
	want="stdin:$((n + 1)): job row, field job_id: job \"$id\" appears twice in the stream"
	# count-effects first in the pipeline: dup-publish then sees no stream
	# at all, rather than a shorter one that it would publish
	run --separate-stderr bash -c "count-effects --before <'$BATS_TEST_TMPDIR/stream' | dup-publish -s 0"
	[ "$status" -eq 2 ]
	assert_equal "$(head -n 1 <<<"$stderr")" "count-effects: $want"
	assert_equal "$output" ""
	assert_equal "$(sql 'SELECT count(*) FROM idem.message')" 0
	run --separate-stderr dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "dup-publish: $want"
	assert_equal "$(sql 'SELECT count(*) FROM idem.message')" 0
}

@test "verify-record --rerun reads the rerun's stream as the programs do" {
	repo="$BATS_TEST_TMPDIR/repo"
	signing_repo "$repo"
	cp "$BATS_TEST_DIRNAME/fixtures/seeds/minimal.yaml" seed.yaml
	sql "CREATE TABLE IF NOT EXISTS demo.minimal (id integer)" >/dev/null
	seed-gen seed.yaml | count-effects >run.tsv || true
	# the rerun gives the recorded stream with a job given twice at its end:
	# the same digest, in a stream no program takes
	{ cat run.tsv; grep -m 1 '^job	' run.tsv; } >rerun.tsv
	git add seed.yaml records/allowed_signers run.tsv rerun.tsv
	git commit -q -m "seed"
	r=$(mkrecord -k "$key" -r "cat rerun.tsv" <run.tsv)
	run verify-record --rerun -d "host=$PGHOST" "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$r: rerun output:$(wc -l <rerun.tsv): job row, field job_id: job \"a\" appears twice in the stream"* ]]
	[[ "$output" != *"reproduces"* ]]
}
