#!/usr/bin/env bats
# dup-publish against the real sandbox queue: counts, visibility timeout,
# acks, roles, idempotent reruns, a cut connection, and the sandbox marker.

load helper
load sandbox-tests

# The number of extra copies a stream's scenarios ask for.
copies_in() {
	awk -F '\t' '$1 == "scenario" { dups[$2] = $6 } $1 == "job" && $6 != "\\N" { n += dups[$6] } END { print n + 0 }' "$1"
}

# refuses MESSAGE [FILE]: dup-publish -s 0 refuses FILE or its standard
# input, exit 2, and says MESSAGE after its name.
refuses() {
	run --separate-stderr dup-publish -s 0 "${@:2}"
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "dup-publish: $1"
}

@test "N jobs with k forced duplicates give exactly N+k messages and N+k publish rows" {
	seed-gen tests/fixtures/seeds/generate.yaml >"$BATS_TEST_TMPDIR/stream"
	n=$(rows_of job "$BATS_TEST_TMPDIR/stream")
	k=$(copies_in "$BATS_TEST_TMPDIR/stream")
	[ "$k" -gt 100 ]
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >"$out"
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE queue = 'rehearsal_volume'")" $((n + k))
	assert_equal "$(rows_of publish "$out")" $((n + k))
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE copy > 0")" "$k"
	# the input passes through unchanged, in order, before the publish rows
	assert_equal "$(head -n "$(wc -l <"$BATS_TEST_TMPDIR/stream")" "$out" | cmp - "$BATS_TEST_TMPDIR/stream" && echo same)" same
}

@test "a duplicate copy is published inside its window, after its original" {
	dup-publish -s 0.1 <<<"$(seed-gen seeds/invoice-line.yaml)" >"$out"
	gap=$(sql "SELECT extract(epoch FROM c.enqueued_at - o.enqueued_at) * 1000
		FROM idem.message o JOIN idem.message c USING (queue, job_id)
		WHERE o.copy = 0 AND c.copy = 1 AND o.job_id = 'job-0001'")
	awk -v gap="$gap" 'BEGIN { exit !(gap >= 0 && gap <= 2000 * 0.1 + 50) }'
	# a race copy goes out at once: both deliveries are there together
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE job_id = 'job-0005'")" 2
}

@test "a stall scenario is published as a kill's: one message per job, its copies only when asked" {
	seed-gen tests/fixtures/seeds/stall.yaml >"$BATS_TEST_TMPDIR/stream"
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >"$out"
	assert_equal "$(sql "SELECT string_agg(job_id || ':' || copy, ' ' ORDER BY job_id) FROM idem.message WHERE queue = 'rehearsal_stall'")" "a:0 b:0 c:0"
	assert_equal "$(rows_of publish "$out")" 3
	# the scenario rows, until field and all, pass through unchanged
	assert_equal "$(grep '^scenario' "$out")" "$(grep '^scenario' "$BATS_TEST_TMPDIR/stream")"
	sed 's/stall: after-commit }/stall: after-commit, duplicates: 2 }/' tests/fixtures/seeds/stall.yaml \
		>"$BATS_TEST_TMPDIR/copies.yaml"
	seed-gen "$BATS_TEST_TMPDIR/copies.yaml" | dup-publish -s 0 >/dev/null
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE queue = 'rehearsal_stall' AND job_id = 'a'")" 3
}

@test "a read message stays invisible until its visibility timeout, then comes back as attempt 2" {
	dup-publish -s 0 <<<"$(seed-gen tests/fixtures/seeds/minimal.yaml)" >/dev/null
	first=$(psql -X -At -U idem_worker -c "SELECT msg_id, read_ct FROM idem.read('rehearsal_minimal', '1 second')")
	assert_equal "$first" "1|1"
	assert_equal "$(psql -X -At -U idem_worker -c "SELECT count(*) FROM idem.read('rehearsal_minimal', '1 second')")" 0
	sleep 1.2
	assert_equal "$(psql -X -At -U idem_worker -c "SELECT msg_id, read_ct FROM idem.read('rehearsal_minimal', '30 seconds')")" "1|2"
	assert_equal "$(sql "SELECT count(*) FROM idem.delivery WHERE msg_id = 1")" 2
}

@test "ack archives the message with its ack time; a second ack returns false" {
	dup-publish -s 0 <<<"$(seed-gen tests/fixtures/seeds/minimal.yaml)" >/dev/null
	psql -X -At -U idem_worker -c "SELECT msg_id FROM idem.read('rehearsal_minimal', '30 seconds')" >/dev/null
	assert_equal "$(psql -X -At -U idem_worker -c 'SELECT idem.ack(1)')" t
	assert_equal "$(sql 'SELECT count(*) FROM idem.queue')" 0
	assert_equal "$(sql 'SELECT count(*) FROM idem.archive WHERE msg_id = 1 AND acked_at >= enqueued_at')" 1
	assert_equal "$(psql -X -At -U idem_worker -c 'SELECT idem.ack(1)')" f
	# an acked message is never delivered again
	sleep 0.1
	assert_equal "$(psql -X -At -U idem_worker -c "SELECT count(*) FROM idem.read('rehearsal_minimal', '0 seconds')")" 0
}

@test "dup-publish works as the publisher role, and that role cannot read the queue" {
	dup-publish -s 0 -d "user=idem_publisher" <<<"$(seed-gen tests/fixtures/seeds/minimal.yaml)" >/dev/null
	assert_equal "$(sql 'SELECT count(*) FROM idem.message')" 1
	run psql -X -U idem_publisher -c "SELECT * FROM idem.read('rehearsal_minimal', '1 second')"
	[ "$status" -ne 0 ]
	[[ "$output" == *"permission denied for function read"* ]]
	assert_equal "$(sql 'SELECT read_ct FROM idem.message')" 0
}

@test "run twice, it publishes nothing twice: the second run names the same messages, existing" {
	seed-gen seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/stream"
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >"$out.1"
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >"$out.2"
	assert_equal "$(sql 'SELECT count(*) FROM idem.message')" 8
	assert_equal "$(grep -c '	published$' "$out.1")" 8
	assert_equal "$(grep -c '	existing$' "$out.2")" 8
	# the same messages, by id
	assert_equal "$(grep '^publish' "$out.1" | cut -f 2-4 | sort)" "$(grep '^publish' "$out.2" | cut -f 2-4 | sort)"
}

@test "a connection cut mid-publish, then a rerun, ends with exactly the intended messages" {
	# 40,000 jobs, every seventh copied once
	seed-gen tests/fixtures/seeds/cut-mid-publish.yaml >"$BATS_TEST_TMPDIR/stream"
	intended=$((40000 + $(copies_in "$BATS_TEST_TMPDIR/stream")))
	dup-publish -s 0 -b 20 <"$BATS_TEST_TMPDIR/stream" >"$out" 2>"$err" &
	publisher=$!
	until [ "$(sql "SELECT count(*) FROM idem.message")" -gt 500 ]; do sleep 0.01; done
	sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dup-publish'" >/dev/null
	rc=0
	wait "$publisher" || rc=$?
	assert_equal "$rc" 3
	grep -q 'publishing: ' "$err"
	cut_at=$(sql "SELECT count(*) FROM idem.message")
	[ "$cut_at" -lt "$intended" ]
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >"$out"
	assert_equal "$(sql "SELECT count(*) FROM idem.message")" "$intended"
	assert_equal "$(sql "SELECT count(DISTINCT (job_id, copy)) FROM idem.message")" "$intended"
	assert_equal "$(grep -c '	existing$' "$out")" "$cut_at"
}

@test "a connection cut during the COPY of the originals publishes nothing; the rerun publishes all" {
	# 100,000 jobs, no copy
	seed-gen tests/fixtures/seeds/cut-during-copy.yaml >"$BATS_TEST_TMPDIR/stream"
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >"$out" 2>"$err" &
	publisher=$!
	until [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dup-publish' AND query LIKE 'COPY%'")" -gt 0 ]; do sleep 0.005; done
	sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dup-publish'" >/dev/null
	rc=0
	wait "$publisher" || rc=$?
	assert_equal "$rc" 3
	assert_equal "$(sql "SELECT count(*) FROM idem.message")" 0
	[ ! -s "$out" ]
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >"$out"
	assert_equal "$(sql "SELECT count(*) FROM idem.message")" 100000
	assert_equal "$(grep -c '	published$' "$out")" 100000
}

@test "the same job and copy with another payload is refused" {
	seed-gen tests/fixtures/seeds/minimal.yaml >"$BATS_TEST_TMPDIR/stream"
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >/dev/null
	sed 's/{"id":1}/{"id":2}/' "$BATS_TEST_TMPDIR/stream" >"$BATS_TEST_TMPDIR/changed"
	run dup-publish -s 0 "$BATS_TEST_TMPDIR/changed"
	[ "$status" -eq 2 ]
	[[ "$output" == *"job a copy 0 is already in queue rehearsal_minimal with another business key or payload"* ]]
}

@test "a database without the sandbox marker is refused with exit 3 and left untouched" {
	sql "DROP DATABASE IF EXISTS plain" >/dev/null
	sql "CREATE DATABASE plain" >/dev/null
	psql -X -q -d plain -c "CREATE SCHEMA idem; CREATE TABLE idem.sandbox (sandbox boolean)"
	before=$(pg_dump -d plain --schema-only | grep -v '^\\\(un\)\{0,1\}restrict'; psql -X -At -d plain -c 'SELECT count(*) FROM idem.sandbox')
	run dup-publish -s 0 -d "dbname=plain" <<<"$(seed-gen tests/fixtures/seeds/minimal.yaml)"
	[ "$status" -eq 3 ]
	[[ "$output" == *"dbname=plain user=idem host=$PGHOST port=5432 is not a rehearsal sandbox (no row in idem.sandbox); refusing to write."* ]]
	after=$(pg_dump -d plain --schema-only | grep -v '^\\\(un\)\{0,1\}restrict'; psql -X -At -d plain -c 'SELECT count(*) FROM idem.sandbox')
	assert_equal "$after" "$before"
	# and a database with no idem schema at all
	psql -X -q -d plain -c "DROP SCHEMA idem CASCADE"
	run dup-publish -s 0 -d "dbname=plain" <<<"$(seed-gen tests/fixtures/seeds/minimal.yaml)"
	[ "$status" -eq 3 ]
	assert_equal "$(psql -X -At -d plain -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'idem'")" 0
}

@test "an unreachable database is exit 3 and the message never shows a password" {
	run dup-publish -s 0 -d "host=$BATS_TEST_TMPDIR port=1 password=sekrit" <<<"$(seed-gen tests/fixtures/seeds/minimal.yaml)"
	[ "$status" -eq 3 ]
	[[ "$output" == "dup-publish: connecting to the database: "* ]]
	[[ "$output" != *sekrit* ]]
}

@test "the stream round-trips through the queue byte for byte, as psql \\copy reads it" {
	seed-gen tests/fixtures/seeds/escapes.yaml | dup-publish -s 0 >"$out"
	sql "CREATE TEMP TABLE x ()" >/dev/null
	psql -X -q -v ON_ERROR_STOP=1 <<-SQL
		CREATE TABLE stream_jobs (kind text, job_id text, business_key text, payload text, payload_sha256 text, scenario text);
		\copy stream_jobs FROM PROGRAM 'grep "^job	" $out'
	SQL
	assert_equal "$(sql "SELECT count(*) FROM stream_jobs s JOIN idem.message m USING (job_id, business_key) WHERE m.payload = s.payload::jsonb")" 3
	assert_equal "$(sql "SELECT business_key FROM idem.message WHERE job_id = E'job\\tone'")" "$(printf 'tab\there')"
	assert_equal "$(sql "SELECT business_key = E'back\\\\slash \\\\N \\\\t' FROM idem.message WHERE job_id = 'job-two'")" t
	assert_equal "$(sql "SELECT payload->>'note' = E'caf\\u00e9 \\u20ac \\U0001F600' FROM idem.message WHERE job_id = 'job-two'")" t
	assert_equal "$(sql "SELECT payload_sha256 = encode(sha256(convert_to(payload, 'UTF8')), 'hex') FROM stream_jobs WHERE job_id = 'job-three'")" t
	sql "DROP TABLE stream_jobs" >/dev/null
}

@test "bad streams are refused with the line, before touching the database, writing nothing" {
	refuses 'stdin:1: not an idem-tsv stream: expected the header line "#idem-tsv<TAB>1.10"' <<<"not a stream"
	refuses "stdin:2: job row has 2 fields, expected 5" <<<"$(printf '#idem-tsv\t1\njob\ta\tb\n')"
	assert_equal "$output" ""
	refuses "stdin:2: a job row before the seed row; start the stream with seed-gen" \
		<<<"$(printf '#idem-tsv\t1\njob\ta\tk\t{}\th\t\\N\n')"
	refuses "stdin: no seed row: start the stream with seed-gen" <<<"$(printf '#idem-tsv\t1\n# only a comment\n')"
	assert_equal "$output" ""
	assert_equal "$(sql 'SELECT count(*) FROM idem.message')" 0
	# a bad line after the jobs, once their COPY is under way: all rolled back
	{ seed-gen tests/fixtures/seeds/generate.yaml; printf 'job\tlate\n'; } >"$BATS_TEST_TMPDIR/bad"
	refuses "$BATS_TEST_TMPDIR/bad:1007: job row has 1 fields, expected 5" "$BATS_TEST_TMPDIR/bad"
	assert_equal "$output" ""
	assert_equal "$(sql 'SELECT count(*) FROM idem.message')" 0
	# and a job id given twice
	{ seed-gen tests/fixtures/seeds/minimal.yaml; seed-gen tests/fixtures/seeds/minimal.yaml | grep '^job'; } >"$BATS_TEST_TMPDIR/twice"
	refuses "$BATS_TEST_TMPDIR/twice:6: job row, field job_id: job \"a\" appears twice in the stream" \
		"$BATS_TEST_TMPDIR/twice"
	assert_equal "$(sql 'SELECT count(*) FROM idem.message')" 0
}

@test "on a terminal, dup-publish shows its progress on standard error; in a pipe it does not" {
	command -v script >/dev/null || skip "no script(1)"
	seed-gen tests/fixtures/seeds/generate.yaml >"$BATS_TEST_TMPDIR/stream"
	script -q -e -c "dup-publish -s 0 $BATS_TEST_TMPDIR/stream >/dev/null" "$BATS_TEST_TMPDIR/tty" >/dev/null
	grep -q "dup-publish: [0-9]*/[0-9]* messages" "$BATS_TEST_TMPDIR/tty"
	queue_reset
	dup-publish -s 0 "$BATS_TEST_TMPDIR/stream" 2>"$err" >/dev/null
	[ ! -s "$err" ]
}

@test "a changed payload of an original already queued refuses the whole stream, new originals included" {
	seed-gen tests/fixtures/seeds/minimal.yaml | dup-publish -s 0 >/dev/null
	seed-gen tests/fixtures/seeds/minimal.yaml | sed 's/{"id":1}/{"id":2}/' >"$BATS_TEST_TMPDIR/changed"
	printf 'job\tnew-one\t9\t{"id":9}\t%s\t\\N\n' "$(printf '{"id":9}' | sha256sum | cut -d ' ' -f 1)" >>"$BATS_TEST_TMPDIR/changed"
	run dup-publish -s 0 "$BATS_TEST_TMPDIR/changed"
	[ "$status" -eq 2 ]
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE job_id = 'new-one'")" 0
}

@test "another publisher writing to the queue during the COPY: every publish row still names its own message" {
	# 100,000 jobs of queue rehearsal_shared
	seed-gen tests/fixtures/seeds/shared-queue.yaml >"$BATS_TEST_TMPDIR/stream"
	dup-publish -s 0 <"$BATS_TEST_TMPDIR/stream" >"$out" &
	publisher=$!
	until [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dup-publish' AND query LIKE 'COPY%'")" -gt 0 ]; do sleep 0.005; done
	sql "SELECT idem.send('rehearsal_shared', 'intruder', 'k', '{}')" >/dev/null
	wait "$publisher"
	# the intruder took an id among ours, so the quick read-back could not serve
	assert_equal "$(sql "SELECT (SELECT msg_id FROM idem.message WHERE job_id = 'intruder')
		BETWEEN min(msg_id) AND max(msg_id) FROM idem.message
		WHERE queue = 'rehearsal_shared' AND job_id <> 'intruder'")" t
	# the publish rows agree with the queue, message by message
	grep '^publish' "$out" | cut -f 2,4 | sort >"$BATS_TEST_TMPDIR/rows"
	sql "SELECT job_id || E'\t' || msg_id FROM idem.message WHERE queue = 'rehearsal_shared' AND job_id <> 'intruder'" | sort >"$BATS_TEST_TMPDIR/queue"
	assert_equal "$(wc -l <"$BATS_TEST_TMPDIR/rows")" 100000
	cmp "$BATS_TEST_TMPDIR/rows" "$BATS_TEST_TMPDIR/queue"
}

@test "a database other than the stream's is refused with exit 2, naming both, and nothing is published in it" {
	id=$(sql 'SELECT sandbox_id FROM idem.sandbox')
	# a copy of the sandbox's database, its queue empty: the same sandbox id, another name
	psql -X -q -d postgres -c 'DROP DATABASE IF EXISTS other' -c "CREATE DATABASE other TEMPLATE $PGDATABASE"
	seed-gen tests/fixtures/seeds/minimal.yaml | dup-publish -s 0 >"$BATS_TEST_TMPDIR/published"
	assert_equal "$(awk -F '\t' '$1 == "database" { print $2 " " $3 }' "$BATS_TEST_TMPDIR/published")" "$id $PGDATABASE"
	run --separate-stderr dup-publish -s 0 -d dbname=other "$BATS_TEST_TMPDIR/published"
	published=$(psql -X -At -d other -c 'SELECT count(*) FROM idem.message')
	psql -X -q -d postgres -c 'DROP DATABASE other'
	[ "$status" -eq 2 ]
	assert_equal "$output" ""
	assert_equal "$stderr" "dup-publish: -d points at database other of sandbox $id, but the stream's database row names database $PGDATABASE of sandbox $id: one pipeline uses one database"
	assert_equal "$published" 0
	# the stream's own database takes it again, and no second database row is written
	run -0 dup-publish -s 0 "$BATS_TEST_TMPDIR/published"
	assert_equal "$(grep -c '^database	' <<<"$output")" 1
}
