#!/usr/bin/env bats
# count-effects against the real sandbox: totals on a fixture with known
# duplicates, missing and unexpected keys; every kind of guard; the probe
# that leaves the table as it was; the printed query as psql runs it.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	psql -X -q -v ON_ERROR_STOP=1 <<-SQL
		SET client_min_messages = warning;
		DROP SCHEMA IF EXISTS fx CASCADE;
		CREATE SCHEMA fx;
		CREATE TABLE fx.effects (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			order_id text NOT NULL, line_no integer NOT NULL, note text NOT NULL, extra text);
		GRANT USAGE ON SCHEMA fx TO idem_reviewer;
		GRANT SELECT ON fx.effects TO idem_reviewer;
	SQL
	# keys: o-1 once, o-2 three times, o-3 missing, o-9 unseeded twice
	sql "INSERT INTO fx.effects (order_id, line_no, note) VALUES
		('o-1', 1, 'a'), ('o-2', 1, 'b'), ('o-2', 1, 'c'), ('o-2', 1, 'd'),
		('o-9', 1, 'e'), ('o-9', 1, 'f')" >/dev/null
	# jobs of keys o-1 to o-4, o-4 twice with two payloads
	seed=tests/fixtures/seeds/count-effects.yaml
	seed-gen "$seed" >"$BATS_TEST_TMPDIR/stream"
}

# The value of a count row: count_of SCOPE KEY (observed) in $out.
count_of() {
	awk -F '\t' -v s="$1" -v k="$2" '$1 == "count" && $3 == s && $4 == k { print $6 }' "$out"
}

@test "every total on a fixture with known duplicates, missing, unexpected keys and a conflict" {
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	assert_equal "$(count_of key '["o-1",1]')" 1
	assert_equal "$(count_of key '["o-2",1]')" 3
	assert_equal "$(count_of key '["o-3",1]')" 0
	assert_equal "$(count_of unexpected '["o-9",1]')" 2
	assert_equal "$(count_of total effects)" 4
	assert_equal "$(count_of total duplicates)" 2
	assert_equal "$(count_of total missing)" 2
	assert_equal "$(count_of total unexpected)" 2
	assert_equal "$(count_of total conflicts)" 1
	assert_equal "$(count_of total pending)" 0
	[[ "$stderr" == *'count-effects: duplicates: expected 0, observed 2'* ]]
	[[ "$stderr" == *'count-effects: missing: expected 0, observed 2'* ]]
	[[ "$stderr" == *'count-effects: duplicate: business key ["o-2",1] has 3 effect rows, expected 1'* ]]
	# measures carry their denominators
	awk -F '\t' '$1 == "measure" && $2 == "duplicate_effects_per_1000_jobs" && $3 == "400.000" && $4 == 2 && $5 == 5 { ok = 1 } END { exit !ok }' "$out"
}

@test "jobs whose keys come in no order are counted per key, in key order, a repeated key once" {
	# the fixture's jobs with j4 first: its key comes again, not next to it
	awk 'NR == FNR { if (/id: j4,/) j4 = $0; next }
		/id: j4,/ { next } { print } /^[[:space:]]*jobs:$/ { print j4 }' \
		"$seed" "$seed" >"$BATS_TEST_TMPDIR/unordered.yaml"
	seed-gen "$BATS_TEST_TMPDIR/unordered.yaml" >"$BATS_TEST_TMPDIR/unordered"
	[ "$(awk -F '\t' '$1 == "job" { printf "%s ", $3 }' "$BATS_TEST_TMPDIR/unordered")" = \
		'["o-4",1] ["o-1",1] ["o-2",1] ["o-3",1] ["o-4",1] ' ]
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/unordered"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	assert_equal "$(awk -F '\t' '$1 == "count" && $3 == "key" { printf "%s=%s/%s ", $4, $5, $6 }' "$out")" \
		'["o-1",1]=1/1 ["o-2",1]=1/3 ["o-3",1]=1/0 ["o-4",1]=1/0 '
	assert_equal "$(count_of unexpected '["o-9",1]')" 2
	assert_equal "$(count_of total conflicts)" 1
}

@test "counts that match the seed's expect exit 0" {
	sql "DELETE FROM fx.effects WHERE note IN ('c', 'd', 'e', 'f')" >/dev/null
	sql "INSERT INTO fx.effects (order_id, line_no, note) VALUES ('o-3', 1, 'g'), ('o-4', 1, 'h')" >/dev/null
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 0 ]
	assert_equal "$stderr" "count-effects: probe: a copy of an effect row went in: fx.effects does not enforce one row per business key"
}

@test "the printed query, fed to psql, returns the same numbers" {
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" || true
	query=$(awk -F '\t' '$1 == "query" && $3 == "count" { print $4 }' "$out")
	psql -X -A -t -F '	' -c "$query" | sort >"$BATS_TEST_TMPDIR/psql"
	awk -F '\t' -v OFS='\t' '$1 == "count" && ($3 == "key" || $3 == "unexpected") && $6 > 0 { print $4, $6 }' "$out" | sort >"$BATS_TEST_TMPDIR/ours"
	diff -u "$BATS_TEST_TMPDIR/psql" "$BATS_TEST_TMPDIR/ours"
}

@test "a key column whose collation is not byte order still matches every key to its rows" {
	# ICU orders a < B < c < Z; bytes order B < Z < a < c
	psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE TABLE fx.coll (k text COLLATE "und-x-icu" NOT NULL)' \
		-c "INSERT INTO fx.coll VALUES ('a'), ('B'), ('B'), ('c'), ('Z'), ('Z'), ('Z')"
	# jobs of keys a, B, c and d
	seed-gen tests/fixtures/seeds/collation.yaml >"$BATS_TEST_TMPDIR/coll"
	count-effects --before "$BATS_TEST_TMPDIR/coll" >"$out"
	assert_equal "$(awk -F '\t' '$1 == "count" && ($3 == "key" || $3 == "unexpected") { print $3, $4, $5, $6 }' "$out")" \
		"$(printf '%s\n' 'key B 1 2' 'key a 1 1' 'key c 1 1' 'key d 1 0' 'unexpected Z 0 3')"
	# the rows of keys met before the first row out of byte order count
	# once, in the totals and in the digest
	assert_equal "$(awk -F '\t' '$1 == "count" && $3 == "total" { printf "%s=%s ", $4, $6 }' "$out")" \
		'effects=4 duplicates=1 missing=1 unexpected=3 conflicts=0 '
	assert_equal "$(awk -F '\t' '$1 == "digest" { print $3, $4 }' "$out")" \
		"$(awk -F '\t' -v OFS='\t' '$1 == "count" { print "count", $3, $4, $5, $6 }' "$out" | sha256sum | cut -d ' ' -f 1) 10"
}

@test "a file is passed on from where the stream starts in it, as standard input too" {
	count-effects --before "$BATS_TEST_TMPDIR/stream" >"$out"
	{ echo 'not part of the stream'; cat "$BATS_TEST_TMPDIR/stream"; } >"$BATS_TEST_TMPDIR/after-a-line"
	{ read -r _; count-effects --before; } <"$BATS_TEST_TMPDIR/after-a-line" >"$out.2"
	cmp "$out" "$out.2"
	head -n "$(wc -l <"$BATS_TEST_TMPDIR/stream")" "$out" | cmp - "$BATS_TEST_TMPDIR/stream"
}

@test "a file that changes while it is read is exit 3, with nothing passed on" {
	# a session holds the sandbox marker, so count-effects waits at the
	# seed row, after it read the small file whole, while a line is added
	psql -X -q -v ON_ERROR_STOP=1 -c "SET application_name = 'holder'" \
		-c 'BEGIN' -c 'LOCK TABLE idem.sandbox IN ACCESS EXCLUSIVE MODE' -c 'SELECT pg_sleep(300)' \
		>/dev/null 2>&1 &
	holder=$!
	wait_for "$(cat <<-'SQL'
		SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE a.application_name = 'holder' AND l.relation = 'idem.sandbox'::regclass AND l.granted
	SQL
	)"
	count-effects --before "$BATS_TEST_TMPDIR/stream" >"$out" 2>"$out.err" &
	counter=$!
	wait_for "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%idem.sandbox%'"
	echo '# a comment added later' >>"$BATS_TEST_TMPDIR/stream"
	sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder'" >/dev/null
	wait "$holder" || true
	status=0
	wait "$counter" || status=$?
	[ "$status" -eq 3 ]
	[ ! -s "$out" ]
	assert_equal "$(cat "$out.err")" "count-effects: $BATS_TEST_TMPDIR/stream: changed while it was read; nothing passed on"
}

# Waits until the query returns 1 or more, for at most 60 s.
wait_for() {
	local i
	for i in $(seq 600); do
		[ "$(sql "$1")" -ge 1 ] && return 0
		sleep 0.1
	done
	echo "never: $1" >&2
	return 1
}

@test "no guard: none, best effort; the probe's copy goes in, loudly, and is rolled back" {
	before=$(sql "SELECT string_agg(xmin::text || ':' || id || ':' || note, ',' ORDER BY id) FROM fx.effects")
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/stream"
	printf '%s\n' "$output" >"$out"
	grep -q "^guard	none	\\\\N	none: best effort	\\\\N$" "$out"
	grep -q "^probe	not-enforced	\\\\N	" "$out"
	[[ "$stderr" == *"probe: a copy of an effect row went in"* ]]
	assert_equal "$(sql "SELECT string_agg(xmin::text || ':' || id || ':' || note, ',' ORDER BY id) FROM fx.effects")" "$before"
}

@test "a unique constraint is the guard; the probe gets 23505 and leaves the table as it was" {
	sql "DELETE FROM fx.effects WHERE note IN ('c', 'd', 'f')" >/dev/null
	sql "ALTER TABLE fx.effects ADD CONSTRAINT effects_once UNIQUE (order_id, line_no)" >/dev/null
	before=$(sql "SELECT count(*), string_agg(xmin::text || ':' || id, ',' ORDER BY id) FROM fx.effects")
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" || true
	grep -q "^guard	constraint	effects_once	UNIQUE (order_id, line_no)	\\\\N$" "$out"
	grep -q "^probe	enforced	23505	ERROR:  duplicate key value violates unique constraint \"effects_once\"" "$out"
	assert_equal "$(sql "SELECT count(*), string_agg(xmin::text || ':' || id, ',' ORDER BY id) FROM fx.effects")" "$before"
}

@test "a unique index is the guard; a partial one is flagged" {
	sql "DELETE FROM fx.effects WHERE note IN ('c', 'd', 'f')" >/dev/null
	sql "CREATE UNIQUE INDEX effects_key ON fx.effects (line_no, order_id)" >/dev/null
	sql "CREATE UNIQUE INDEX effects_recent ON fx.effects (order_id) WHERE note > 'x'" >/dev/null
	sql "CREATE UNIQUE INDEX effects_other ON fx.effects (note)" >/dev/null
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" || true
	grep -q "^guard	index	effects_key	CREATE UNIQUE INDEX effects_key ON fx.effects USING btree (line_no, order_id)	\\\\N$" "$out"
	grep -q "^guard	index	effects_recent	CREATE UNIQUE INDEX effects_recent ON fx.effects USING btree (order_id) WHERE (note > 'x'::text)	partial$" "$out"
	# a unique index on other columns is no guard of the business key
	run ! grep -q "effects_other" <(grep '^guard' "$out")
	grep -q "^probe	enforced	23505	" "$out"
}

@test "a deferrable constraint is the guard, flagged deferrable, and the probe meets it at once" {
	sql "DELETE FROM fx.effects WHERE note IN ('c', 'd', 'f')" >/dev/null
	sql "ALTER TABLE fx.effects ADD CONSTRAINT effects_later UNIQUE (order_id, line_no) DEFERRABLE INITIALLY DEFERRED" >/dev/null
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" || true
	grep -q "^guard	constraint	effects_later	UNIQUE (order_id, line_no) DEFERRABLE INITIALLY DEFERRED	deferrable$" "$out"
	# checked at once inside the probe, not at a commit that never comes
	grep -q "^probe	enforced	23505	" "$out"
}

@test "the reviewer role, which cannot insert, gets probe skipped: permission denied" {
	sql "ALTER TABLE fx.effects ADD CONSTRAINT effects_pk2 UNIQUE (id, order_id)" >/dev/null
	run --separate-stderr count-effects -d user=idem_reviewer "$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	grep -q "^probe	skipped	42501	probe skipped: permission denied	" "$out"
	assert_equal "$(count_of total duplicates)" 2
}

@test "--before records the counts before the run, with their own digest" {
	count-effects --before "$BATS_TEST_TMPDIR/stream" >"$out"
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 != "before"' "$out")" ""
	assert_equal "$(awk -F '\t' '$1 == "digest" { print $2 }' "$out")" before
	! grep -q '^probe' "$out"
}

@test "the digest is a pure function of the count rows" {
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out.1" || true
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out.2" || true
	d1=$(awk -F '\t' '$1 == "digest" { print $3 }' "$out.1")
	assert_equal "$d1" "$(awk -F '\t' '$1 == "digest" { print $3 }' "$out.2")"
	want=$(awk -F '\t' -v OFS='\t' '$1 == "count" && $2 == "after" { print "count", $3, $4, $5, $6 }' "$out.1" | sha256sum | cut -d ' ' -f 1)
	assert_equal "$d1" "$want"
	sql "DELETE FROM fx.effects WHERE note = 'd'" >/dev/null
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out.3" || true
	[ "$(awk -F '\t' '$1 == "digest" { print $3 }' "$out.3")" != "$d1" ]
}

@test "identifiers from the seed are quoted, never pasted" {
	psql -X -q -c 'CREATE TABLE fx."odd ""name""" ("key; DROP TABLE fx.effects; --" text)'
	psql -X -q -c "INSERT INTO fx.\"odd \"\"name\"\"\" VALUES ('o-1')"
	sed 's/table: fx.effects, key: \[order_id, line_no\]/table: "fx.odd \\"name\\"", key: ["key; DROP TABLE fx.effects; --"]/; s/{ order_id: string, line_no: integer, amount: integer }/{ "key; DROP TABLE fx.effects; --": string }/; s/payload: { order_id: \(o-[0-9]\), line_no: 1, amount: [0-9] }/payload: { "key; DROP TABLE fx.effects; --": \1 }/' \
		"$seed" | grep -v conflicting >"$BATS_TEST_TMPDIR/odd.yaml"
	sed -i 's/^  - { id: j5.*$//' "$BATS_TEST_TMPDIR/odd.yaml"
	seed-gen "$BATS_TEST_TMPDIR/odd.yaml" | count-effects >"$out" || true
	assert_equal "$(sql 'SELECT count(*) FROM fx.effects')" 6
	assert_equal "$(count_of key o-1)" 1
}

# The stream of the fixture seed with its effect table named $1.
stream_of_table() {
	sed "s/table: fx.effects,/table: $1,/" "$seed" >"$BATS_TEST_TMPDIR/table.yaml"
	seed-gen "$BATS_TEST_TMPDIR/table.yaml" >"$BATS_TEST_TMPDIR/table"
}

@test "a missing effect table: one line naming the nearest table of its schema, and rehearse -s" {
	stream_of_table fx.effect
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/table"
	[ "$status" -eq 3 ]
	assert_equal "$stderr" "count-effects: fx.effect: no such table (did you mean fx.effects?); create it before the run, e.g. with rehearse -s SETUP"
}

@test "a missing effect table: the same name in another schema, else none; names that look like SQL stay names" {
	psql -X -q -c 'CREATE SCHEMA "fx ""two"""; CREATE TABLE "fx ""two""".invoice_lines (id int)'
	stream_of_table fx.invoice_lines
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/table"
	[ "$status" -eq 3 ]
	assert_equal "$stderr" 'count-effects: fx.invoice_lines: no such table (did you mean fx "two".invoice_lines?); create it before the run, e.g. with rehearse -s SETUP'
	stream_of_table "\"fx.x'); DROP TABLE fx.effects; --\""
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/table"
	[ "$status" -eq 3 ]
	assert_equal "$stderr" "count-effects: fx.x'); DROP TABLE fx.effects; --: no such table; create it before the run, e.g. with rehearse -s SETUP"
	assert_equal "$(sql 'SELECT count(*) FROM fx.effects')" 6
	psql -X -q -c 'DROP SCHEMA "fx ""two""" CASCADE'
}

@test "an unreachable database is exit 3" {
	run count-effects -d "host=$BATS_TEST_TMPDIR port=1" "$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 3 ]
}

@test "guards on a mixed-case table, with INCLUDE columns, referenced by a foreign key, are found" {
	psql -X -q -v ON_ERROR_STOP=1 <<-SQL
		CREATE TABLE fx."Effects" ("order_id" text NOT NULL, line_no integer NOT NULL, note text);
		INSERT INTO fx."Effects" VALUES ('o-1', 1, 'a');
		CREATE UNIQUE INDEX effects_with_note ON fx."Effects" (order_id, line_no) INCLUDE (note);
		CREATE TABLE fx.refs (order_id text, line_no integer,
			FOREIGN KEY (order_id, line_no) REFERENCES fx."Effects" (order_id, line_no));
	SQL
	sed 's/table: fx.effects/table: fx.Effects/' "$seed" >"$BATS_TEST_TMPDIR/mixed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/mixed.yaml" | count-effects >"$out" || true
	grep -q '^guard	index	effects_with_note	CREATE UNIQUE INDEX effects_with_note ON fx."Effects" USING btree (order_id, line_no) INCLUDE (note)	' "$out"
	grep -q "^probe	enforced	23505	" "$out"
}

# A call row of the vendor double as idem-tsv 1.7 wrote it, without id
# and answered_at: call KEY ANSWER EFFECT [PID], KEY \N for a body without
# the key's fields; the Idempotency-Key $idem_key, else key-KEY.
call() {
	local status=200
	case $2 in error) status=500 ;; timeout | killed) status=0 ;; esac
	printf 'call\t2026-12-01T10:00:00.000000Z\t0\t%s\tPOST\t/v1/charges\t%s\t%s\t%s\t%s\t%s\t%s\tch_1\n' \
		"${4:-4242}" "${idem_key:-key-${1//\\/}}" "$(printf '%s' "$1" | sha256sum | cut -d ' ' -f 1)" "$1" "$status" "$2" "$3"
}

# The fixture's seed with an external call, charged once per business key.
external_seed() {
	sed 's/^expect: { effects: 4, duplicates: 0, missing: 0, pending: 0 }$/expect: { effects: 4, duplicates: 0, missing: 0, pending: 0, external: 4 }/' \
		"$seed"
	echo 'external: { name: payment charge, key: [order_id, line_no], honours_idempotency_key: false }'
}

# The calls of the fixture's run: o-1 charged once; o-2 twice (its first
# answer held while the worker was killed); o-3 after a vendor error; o-4
# once and once replayed; one body without the key; o-9, which no job has.
calls() {
	call '["o-1",1]' ok yes
	call '["o-2",1]' killed yes
	call '["o-2",1]' ok yes
	call '["o-3",1]' error no
	call '["o-3",1]' ok yes
	call '["o-4",1]' ok yes
	call '["o-4",1]' replayed no
	call '\N' ok yes
	call '["o-9",1]' ok yes
}

@test "external: the calls that took effect per business key, beside the expected; unknown keys kept apart" {
	external_seed >"$BATS_TEST_TMPDIR/external.yaml"
	{ seed-gen "$BATS_TEST_TMPDIR/external.yaml"; calls; } >"$BATS_TEST_TMPDIR/stream"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	# after the key rows, in their order, and before the totals
	assert_equal "$(awk -F '\t' '$1 == "count" && $3 != "key" && $3 != "unexpected" { print $3, $4, $5, $6 }' "$out")" \
		'external ["o-1",1] 1 1
external ["o-2",1] 1 2
external ["o-3",1] 1 1
external ["o-4",1] 1 1
external ["o-9",1] 0 1
external-unknown  0 1
total effects 4 4
total duplicates 0 2
total missing 0 2
total unexpected 0 2
total conflicts 0 1
total pending 0 0
total external 4 7
total external_duplicates 0 2'
	[[ "$stderr" == *'count-effects: external: expected 4, observed 7'* ]]
	[[ "$stderr" == *'count-effects: external: duplicate effect for business key ["o-2",1]: 2 calls took effect, expected 1'* ]]
	[[ "$stderr" == *'count-effects: external: unexpected effect for business key ["o-9",1]: 1 calls took effect, and no job has that key'* ]]
	# the stream passes through, calls and all
	assert_equal "$(rows_of call "$out")" 9
}

@test "external: one charge per key passes; a second charge fails, naming its key, and changes the digest" {
	sql "DELETE FROM fx.effects WHERE note IN ('c', 'd', 'e', 'f')" >/dev/null
	sql "INSERT INTO fx.effects (order_id, line_no, note) VALUES ('o-3', 1, 'g'), ('o-4', 1, 'h')" >/dev/null
	external_seed >"$BATS_TEST_TMPDIR/external.yaml"
	seed-gen "$BATS_TEST_TMPDIR/external.yaml" >"$BATS_TEST_TMPDIR/seeded"
	once() {
		call '["o-1",1]' ok yes
		call '["o-2",1]' error no
		call '["o-2",1]' ok yes
		call '["o-3",1]' ok yes
		call '["o-4",1]' ok yes
		call '["o-4",1]' replayed no
	}
	{ cat "$BATS_TEST_TMPDIR/seeded"; once; } | count-effects >"$out.1" 2>"$err"
	{ cat "$BATS_TEST_TMPDIR/seeded"; once; } | count-effects >"$out.2" 2>"$err"
	assert_equal "$(awk -F '\t' '$1 == "count" && $3 == "total" && $4 ~ /^external/ { print $4, $5, $6 }' "$out.1")" \
		'external 4 4
external_duplicates 0 0'
	digest() { awk -F '\t' '$1 == "digest" { print $3 }' "$1"; }
	assert_equal "$(digest "$out.2")" "$(digest "$out.1")"
	# the same run with o-3 charged twice
	run --separate-stderr bash -c "{ cat '$BATS_TEST_TMPDIR/seeded'; $(declare -f call once); once; call '[\"o-3\",1]' ok yes; } | count-effects"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out.3"
	assert_equal "$stderr" 'count-effects: probe: a copy of an effect row went in: fx.effects does not enforce one row per business key
count-effects: external: expected 4, observed 5
count-effects: external: duplicate effect for business key ["o-3",1]: 2 calls took effect, expected 1'
	[ "$(digest "$out.3")" != "$(digest "$out.1")" ]
	# the digest is of the count rows, the external ones among them
	want=$(awk -F '\t' -v OFS='\t' '$1 == "count" && $2 == "after" { print "count", $3, $4, $5, $6 }' "$out.3" | sha256sum | cut -d ' ' -f 1)
	assert_equal "$(digest "$out.3")" "$want"
}

@test "external: with the key scope of the job, each job of a key is expected to call" {
	sed 's/effect: { table: fx.effects, key: \[order_id, line_no\],/effect: { table: fx.effects, key: [order_id, line_no], key_scope: job,/' \
		"$seed" >"$BATS_TEST_TMPDIR/job-scope.yaml"
	echo 'external: { name: payment charge, key: [order_id], honours_idempotency_key: true }' >>"$BATS_TEST_TMPDIR/job-scope.yaml"
	sed -i 's/pending: 0 }$/pending: 0, external: 5 }/' "$BATS_TEST_TMPDIR/job-scope.yaml"
	{ seed-gen "$BATS_TEST_TMPDIR/job-scope.yaml"; call o-1 ok yes; call o-4 ok yes; call o-4 ok yes; } |
		count-effects >"$out" 2>"$err" || true
	# a key of one field is its plain value; o-4 is the key of two jobs
	assert_equal "$(awk -F '\t' '$1 == "count" && $3 == "external" { print $4, $5, $6 }' "$out")" \
		'o-1 1 1
o-2 1 0
o-3 1 0
o-4 2 2'
	assert_equal "$(count_of total external)" 3
	assert_equal "$(count_of total external_duplicates)" 0
	grep -q '^count-effects: external: expected 5, observed 3$' "$err"
}

# A call row of idem-tsv 1.8, with its id: vcall ID KEY ANSWER EFFECT
# [IDEMPOTENCY_KEY], the Idempotency-Key key-KEY unless given, \N for a
# call without the header; $method for another method than POST.
vcall() {
	local status=200 answered='2026-12-01T10:00:00.500000Z'
	case $3 in error) status=500 ;; timeout | killed | lost) status=0 answered='\N' ;; esac
	printf 'call\t2026-12-01T10:00:00.000000Z\t0\t4242\t%s\t/v1/charges\t%s\t%s\t%s\t%s\t%s\t%s\tch_%s\t%s\t%s\n' \
		"${method:-POST}" "${5-key-$2}" "$(printf '%s' "$2" | sha256sum | cut -d ' ' -f 1)" "$2" \
		"$status" "$3" "$4" "$1" "$1" "$answered"
}

# The effect rows of a run where every key has its effect once.
once_each() {
	sql "DELETE FROM fx.effects WHERE note IN ('c', 'd', 'e', 'f')" >/dev/null
	sql "INSERT INTO fx.effects (order_id, line_no, note) VALUES ('o-3', 1, 'g'), ('o-4', 1, 'h')" >/dev/null
}

# The fixture's seed with an external call whose vendor honours keys or
# not ($1: true or false), and the text $2 in its mapping.
keyed_seed() {
	local more=${2//\\/\\\\}
	external_seed | sed "s/honours_idempotency_key: false }\$/honours_idempotency_key: $1${more:+, $more} }/" \
		>"$BATS_TEST_TMPDIR/keyed.yaml"
	grep -q "honours_idempotency_key: $1" "$BATS_TEST_TMPDIR/keyed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/keyed.yaml" >"$BATS_TEST_TMPDIR/keyed"
}

# The fields after the kind of the rows of kind $1 in $out, space-separated.
rows_in_out() {
	awk -F '\t' -v k="$1" '$1 == k { $1 = ""; print substr($0, 2) }' OFS=' ' "$out"
}

@test "external: one Idempotency-Key per business key: external_keys_per_business_key 1.000, no rekeyed row" {
	once_each
	keyed_seed true
	{ cat "$BATS_TEST_TMPDIR/keyed"
	  vcall 1 '["o-1",1]' ok yes
	  vcall 2 '["o-2",1]' error no
	  vcall 3 '["o-2",1]' ok yes
	  vcall 4 '["o-3",1]' ok yes
	  vcall 5 '["o-4",1]' ok yes
	  vcall 6 '["o-4",1]' replayed no
	  # another method, with another key, is no charge of the key
	  method=GET vcall 7 '["o-4",1]' ok no other-key
	} >"$BATS_TEST_TMPDIR/stable"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/stable"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$out"
	assert_equal "$(awk -F '\t' '$1 == "measure" && $2 == "external_keys_per_business_key" { print $3, $4, $5, $6 }' "$out")" \
		'1.000 4 4 distinct Idempotency-Keys (none counts as one) per business key called with POST'
	assert_equal "$(rows_of rekeyed "$out")" 0
	[[ "$stderr" != *Idempotency-Key* ]]
}

@test "external: a key per call: a rekeyed row naming both calls; a finding when the vendor honours keys" {
	once_each
	# the double's numbers, not their places in the stream
	calls() {
		vcall 11 '["o-1",1]' ok yes
		vcall 12 '["o-2",1]' error no key-a
		vcall 13 '["o-3",1]' ok yes
		vcall 14 '["o-2",1]' ok yes key-b
		vcall 15 '["o-4",1]' ok yes
	}
	keyed_seed true
	{ cat "$BATS_TEST_TMPDIR/keyed"; calls; } >"$BATS_TEST_TMPDIR/rekeyed"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/rekeyed"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	assert_equal "$(rows_in_out rekeyed)" '["o-2",1] ["key-a","key-b"] [12,14] 1'
	# after the count rows of the external calls, before the totals
	awk -F '\t' '$1 == "count" && $3 == "external" { e = NR } $1 == "rekeyed" { r = NR }
		$1 == "count" && $3 == "total" && !t { t = NR } END { exit !(e < r && r < t) }' "$out"
	assert_equal "$(awk -F '\t' '$1 == "measure" && $2 == "external_keys_per_business_key" { print $3, $4, $5 }' "$out")" \
		'1.250 5 4'
	assert_equal "$(grep -v '^count-effects: probe:' <<<"$stderr")" \
		'count-effects: external: business key ["o-2",1] changed its Idempotency-Key across calls 12, 14: the vendor honours keys, so a single charge was luck'
	# against a vendor that does not honour keys, it is said, and no finding
	keyed_seed false
	{ cat "$BATS_TEST_TMPDIR/keyed"; calls; } >"$BATS_TEST_TMPDIR/rekeyed"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/rekeyed"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$out"
	assert_equal "$(rows_in_out rekeyed)" '["o-2",1] ["key-a","key-b"] [12,14] 1'
	assert_contains "$stderr" \
		'count-effects: external: business key ["o-2",1] changed its Idempotency-Key across calls 12, 14: the vendor does not honour keys, so this alone is no finding'
}

@test "external: a call without the header beside one with a key is rekeyed, with null for none" {
	once_each
	keyed_seed true
	{ cat "$BATS_TEST_TMPDIR/keyed"
	  vcall 1 '["o-1",1]' timeout no '\N'
	  vcall 2 '["o-1",1]' ok yes key-1
	  vcall 3 '["o-1",1]' replayed no key-1
	  vcall 4 '["o-1",1]' ok yes '\N'
	  vcall 5 '["o-2",1]' ok yes '\N'
	  vcall 6 '["o-3",1]' ok yes
	  vcall 7 '["o-4",1]' ok yes
	} >"$BATS_TEST_TMPDIR/none"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/none"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	# o-1: none, then key-1; o-2 sent none alone, one value and stable
	assert_equal "$(rows_in_out rekeyed)" '["o-1",1] [null,"key-1"] [1,2,3,4] 2'
	assert_equal "$(awk -F '\t' '$1 == "measure" && $2 == "external_keys_per_business_key" { print $3, $4, $5 }' "$out")" \
		'1.250 5 4'
	assert_contains "$stderr" 'count-effects: external: duplicate effect for business key ["o-1",1]: 2 calls took effect, expected 1' \
		'count-effects: external: business key ["o-1",1] changed its Idempotency-Key across calls 1, 2, 3, 4: the vendor honours keys, so a single charge was luck'
}

# The stream $BATS_TEST_TMPDIR/keyed as idem-tsv 1.7 wrote it: its
# external row without pending_key, pending_state and pending_settled.
as_1_7() {
	sed '1s/1\.[0-9]*$/1.7/' "$BATS_TEST_TMPDIR/keyed" |
		awk -F '\t' -v OFS='\t' '$1 == "external" { print $1, $2, $3, $4, $5, $6; next } { print }'
}

@test "external: a stream of idem-tsv 1.7: calls named by their place among the call rows, the pending key by the key's fields" {
	once_each
	keyed_seed true
	# call rows of 1.7 end at response_id
	{ as_1_7
	  idem_key=k call '["o-1",1]' ok yes
	  idem_key=k-1 call '["o-2",1]' error no
	  idem_key=k call '["o-3",1]' ok yes
	  idem_key=k-2 call '["o-2",1]' ok yes
	  idem_key=k call '["o-4",1]' ok yes
	} >"$BATS_TEST_TMPDIR/old"
	assert_equal "$(awk -F '\t' '$1 == "call" { print NF }' "$BATS_TEST_TMPDIR/old" | sort -u)" 13
	assert_equal "$(head -n 1 "$BATS_TEST_TMPDIR/old")" "$(printf '#idem-tsv\t1.7')"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/old"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	assert_equal "$(rows_in_out rekeyed)" '["o-2",1] ["k-1","k-2"] [2,4] 1'
	assert_contains "$stderr" 'business key ["o-2",1] changed its Idempotency-Key across calls 2, 4: the vendor honours keys'
	# a table of pending calls of 1.7: its key in the columns of the key's fields
	psql -X -q -v ON_ERROR_STOP=1 <<-SQL
		CREATE TABLE fx.claimed (order_id text NOT NULL, line_no integer NOT NULL, owner text, status text);
		INSERT INTO fx.claimed VALUES ('o-2', 1, 'test-oncall', 'pending'), ('o-3', 1, 'test-oncall', 'done');
	SQL
	keyed_seed false 'pending: { table: fx.claimed, owner: owner }'
	{ as_1_7
	  call '["o-1",1]' ok yes
	  call '["o-2",1]' killed yes
	  call '["o-2",1]' replayed no
	  call '["o-3",1]' ok yes
	  call '["o-4",1]' ok yes
	} >"$BATS_TEST_TMPDIR/old"
	assert_equal "$(awk -F '\t' '$1 == "external" { print NF }' "$BATS_TEST_TMPDIR/old")" 6
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/old"
	printf '%s\n' "$output" >"$out"
	# no state column: the row of o-3 is not settled
	assert_equal "$(rows_in_out pending_call)" '["o-2",1] yes 1 test-oncall owned
["o-3",1] no 1 test-oncall open'
	[ "$status" -eq 1 ]
	assert_equal "$(rows_of rekeyed "$out")" 0
}

# The fixture's seed with a table of pending calls, fx.pending, its key in
# one column, as idem-worker keeps it; and its rows, KEY OWNER STATUS each.
pending_table() {
	psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE TABLE fx.pending (key text NOT NULL, owner text, status text)'
	while [ $# -gt 0 ]; do
		psql -X -q -v ON_ERROR_STOP=1 -v k="$1" -v o="$2" -v s="$3" \
			<<<"INSERT INTO fx.pending VALUES (:'k', NULLIF(:'o', 'NULL'), NULLIF(:'s', 'NULL'))"
		shift 3
	done
	keyed_seed false 'pending: { table: fx.pending, owner: owner, key: [key], state: status, settled: [done, reconciled] }'
}

# The run's calls: o-2's first call killed, its retry replayed.
killed_calls() {
	vcall 1 '["o-1",1]' ok yes
	vcall 2 '["o-2",1]' killed yes
	vcall 3 '["o-3",1]' ok yes
	vcall 4 '["o-2",1]' replayed no
	vcall 5 '["o-4",1]' ok yes
}

@test "pending: the killed call's key has a row of the owner, the others' rows are settled: owned, and it passes" {
	once_each
	pending_table '["o-1",1]' test-oncall done '["o-2",1]' test-oncall reconciled '["o-3",1]' NULL done
	{ cat "$BATS_TEST_TMPDIR/keyed"; killed_calls; } >"$BATS_TEST_TMPDIR/owned"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/owned"
	printf '%s\n' "$output" >"$out"
	[ "$status" -eq 0 ]
	assert_equal "$(rows_in_out pending_call)" '["o-2",1] yes 1 test-oncall owned'
	assert_equal "$(awk -F '\t' '$1 == "measure" && $2 == "pending_calls_owned" { print $3, $4, $5, $6 }' "$out")" \
		"1.000 1 1 killed calls' business keys with a row of fx.pending whose owner is test-oncall"
	# the queries, each in its query row, the stream's names quoted
	assert_equal "$(awk -F '\t' '$1 == "query" && $3 ~ /^pending_/ { print $3 }' "$out")" 'pending_killed
pending_open'
	assert_contains "$(awk -F '\t' '$1 == "query" && $3 == "pending_killed"' "$out")" \
		'FROM json_array_elements_text($1::json)' '"key"::text' '"owner"::text' 'FROM "fx"."pending"'
	assert_contains "$(awk -F '\t' '$1 == "query" && $3 == "pending_open"' "$out")" \
		'("status" IS NULL OR "status"::text COLLATE "C" <> ALL' 'LIMIT 1001'
	# psql, the referee: the killed key's rows and owner, and no other key's row unsettled
	assert_equal "$(sql "SELECT count(*), bool_or(owner = 'test-oncall') FROM fx.pending WHERE key = '[\"o-2\",1]'")" '1|t'
	assert_equal "$(sql "SELECT count(*) FROM fx.pending WHERE key <> '[\"o-2\",1]' AND (status IS NULL OR status NOT IN ('done', 'reconciled'))")" 0
	# the printed query, its parameters put in, gives the same row
	query=$(awk -F '\t' '$1 == "query" && $3 == "pending_killed" { print $4 }' "$out")
	killed='["[\"o-2\",1]"]'
	query=${query//'$1::json'/"'$killed'::json"}
	query=${query//'$2::text'/"'test-oncall'::text"}
	assert_equal "$(psql -X -A -t -F ' ' -c "$query")" '["o-2",1] 1 test-oncall t'
}

@test "pending: a killed call's key with no row is missing, one of another owner wrong-owner; both fail" {
	once_each
	pending_table '["o-1",1]' test-oncall done
	{ cat "$BATS_TEST_TMPDIR/keyed"; killed_calls; } >"$BATS_TEST_TMPDIR/missing"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/missing"
	printf '%s\n' "$output" >"$out"
	[ "$status" -eq 1 ]
	assert_equal "$(rows_in_out pending_call)" '["o-2",1] yes 0 \N missing'
	assert_equal "$(awk -F '\t' '$1 == "measure" && $2 == "pending_calls_owned" { print $3, $4, $5 }' "$out")" '0.000 0 1'
	assert_equal "$(grep -v '^count-effects: probe:' <<<"$stderr")" \
		'count-effects: pending: business key ["o-2",1]: its call was killed, and fx.pending has no row of it'
	assert_equal "$(sql "SELECT count(*) FROM fx.pending WHERE key = '[\"o-2\",1]'")" 0
	# a row, but another owner's
	sql "INSERT INTO fx.pending VALUES ('[\"o-2\",1]', 'someone-else', 'reconciled')" >/dev/null
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/missing"
	printf '%s\n' "$output" >"$out"
	[ "$status" -eq 1 ]
	assert_equal "$(rows_in_out pending_call)" '["o-2",1] yes 1 someone-else wrong-owner'
	assert_equal "$(grep -v '^count-effects: probe:' <<<"$stderr")" \
		'count-effects: pending: business key ["o-2",1]: its call was killed, and none of its 1 rows of fx.pending has owner test-oncall (the first names someone-else)'
	assert_equal "$(sql "SELECT owner FROM fx.pending WHERE key = '[\"o-2\",1]'")" someone-else
	# and the owner's row beside it makes it owned
	sql "INSERT INTO fx.pending VALUES ('[\"o-2\",1]', 'test-oncall', 'pending')" >/dev/null
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/missing"
	printf '%s\n' "$output" >"$out"
	[ "$status" -eq 0 ]
	assert_equal "$(rows_in_out pending_call)" '["o-2",1] yes 2 test-oncall owned'
}

@test "pending: another key's row not settled is open and fails; settled rows of other keys pass" {
	once_each
	pending_table '["o-2",1]' test-oncall reconciled '["o-1",1]' test-oncall done \
		'["o-3",1]' test-oncall pending '["o-4",1]' NULL NULL '["o-4",1]' x done
	{ cat "$BATS_TEST_TMPDIR/keyed"; killed_calls; } >"$BATS_TEST_TMPDIR/open"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/open"
	printf '%s\n' "$output" >"$out"
	[ "$status" -eq 1 ]
	# a state of NULL is not settled either
	assert_equal "$(rows_in_out pending_call)" '["o-2",1] yes 1 test-oncall owned
["o-3",1] no 1 test-oncall open
["o-4",1] no 1 \N open'
	assert_equal "$(grep -v '^count-effects: probe:' <<<"$stderr")" \
		'count-effects: pending: business key ["o-3",1] has 1 rows of fx.pending not settled, and its call was not killed
count-effects: pending: business key ["o-4",1] has 1 rows of fx.pending not settled, and its call was not killed'
	# psql, the referee, finds the same keys not settled
	assert_equal "$(sql "SELECT string_agg(key || ' ' || n, ',' ORDER BY key) FROM (SELECT key, count(*) n FROM fx.pending
		WHERE key <> '[\"o-2\",1]' AND (status IS NULL OR status NOT IN ('done', 'reconciled')) GROUP BY key) t")" \
		"$(awk -F '\t' '$1 == "pending_call" && $6 == "open" { printf "%s%s %s", sep, $2, $4; sep = "," }' "$out")"
	# settled, they pass
	sql "UPDATE fx.pending SET status = 'done'" >/dev/null
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/open"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$out"
	assert_equal "$(rows_in_out pending_call)" '["o-2",1] yes 1 test-oncall owned'
}

@test "pending: without a state column every row of another key is open; a key of two columns; names quoted" {
	once_each
	psql -X -q -v ON_ERROR_STOP=1 <<-SQL
		CREATE TABLE fx."pending calls" ("order" text NOT NULL, "line no" integer NOT NULL, "who ""owns""" text);
		INSERT INTO fx."pending calls" VALUES ('o-2', 1, 'test-oncall'), ('o-1', 1, 'test-oncall');
	SQL
	keyed_seed false 'pending: { table: "fx.pending calls", owner: "who \"owns\"", key: [order, line no] }'
	assert_equal "$(awk -F '\t' '$1 == "external" { print $7, $8, $9 }' "$BATS_TEST_TMPDIR/keyed")" '["order","line no"] \N \N'
	{ cat "$BATS_TEST_TMPDIR/keyed"; killed_calls; } >"$BATS_TEST_TMPDIR/stateless"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/stateless"
	printf '%s\n' "$output" >"$out"
	[ "$status" -eq 1 ]
	assert_equal "$(rows_in_out pending_call)" '["o-2",1] yes 1 test-oncall owned
["o-1",1] no 1 test-oncall open'
	assert_contains "$(awk -F '\t' '$1 == "query" && $3 == "pending_open"' "$out")" \
		"'[' || to_json(\"order\")::text || ',' || to_json(\"line no\")::text || ']'" \
		'min("who ""owns"""::text COLLATE "C")' 'FROM "fx"."pending calls" WHERE NOT COALESCE'
}

@test "pending: a table without a column the stream names is not checked, and fails; a table not there is exit 3" {
	once_each
	psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE TABLE fx.pending (key text NOT NULL, owner text)' \
		-c "INSERT INTO fx.pending VALUES ('[\"o-2\",1]', 'test-oncall')"
	# the defaults of a seed that names no key: the names of the external key's fields
	keyed_seed false 'pending: { table: fx.pending, owner: owner }'
	{ cat "$BATS_TEST_TMPDIR/keyed"; killed_calls; } >"$BATS_TEST_TMPDIR/unchecked"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/unchecked"
	printf '%s\n' "$output" >"$out"
	[ "$status" -eq 1 ]
	assert_equal "$(grep -v '^count-effects: probe:' <<<"$stderr")" \
		"count-effects: pending: fx.pending has no column order_id of the calls' business key (the seed's external.pending.key, by default the names of external.key): the pending calls were not checked"
	assert_equal "$(rows_of pending_call "$out")" 0
	assert_equal "$(awk -F '\t' '$1 == "measure" && $2 == "pending_calls_owned" { print $3, $4, $5 }' "$out")" '\N \N 1'
	# a state column that is not there, named as SQL quotes it
	keyed_seed false 'pending: { table: fx.pending, owner: owner, key: [key], state: Status, settled: [done] }'
	{ cat "$BATS_TEST_TMPDIR/keyed"; killed_calls; } >"$BATS_TEST_TMPDIR/unchecked"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/unchecked"
	[ "$status" -eq 1 ]
	assert_contains "$stderr" 'count-effects: pending: fx.pending has no column "Status" of the state: the pending calls were not checked'
	# no table at all
	psql -X -q -c 'DROP TABLE fx.pending'
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/unchecked"
	[ "$status" -eq 3 ]
	assert_contains "$stderr" 'count-effects: fx.pending: no such table'
}

@test "pending: more than 1000 keys not settled: the first 1000 written, and said" {
	once_each
	pending_table
	sql "INSERT INTO fx.pending SELECT 'k-' || lpad(i::text, 4, '0'), 'test-oncall', NULL FROM generate_series(1, 1001) i" >/dev/null
	{ cat "$BATS_TEST_TMPDIR/keyed"; killed_calls; } >"$BATS_TEST_TMPDIR/many"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/many"
	printf '%s\n' "$output" >"$out"
	[ "$status" -eq 1 ]
	assert_equal "$(awk -F '\t' '$1 == "pending_call" && $6 == "open"' "$out" | wc -l)" 1000
	assert_equal "$(awk -F '\t' '$1 == "pending_call" && $6 == "open" { k = $2 } END { print k }' "$out")" k-1000
	assert_contains "$stderr" 'count-effects: pending: more than 1000 business keys have rows of fx.pending not settled; the first 1000 in key order are written'
	# ten of a kind on standard error
	assert_equal "$(grep -c 'not settled, and its call was not killed' <<<"$stderr")" 10
}

@test "external: call rows without an external row are passed on, not counted; an external row after the jobs is refused" {
	{ cat "$BATS_TEST_TMPDIR/stream"; calls; } | count-effects >"$out" 2>"$err" || true
	assert_equal "$(rows_of call "$out")" 9
	run ! grep -q '^count	after	external' "$out"
	run ! grep -q '^count	after	total	external' "$out"
	{ cat "$BATS_TEST_TMPDIR/stream"; printf 'external\tcharge\t["order_id"]\tfalse\t\\N\t\\N\n'; } >"$BATS_TEST_TMPDIR/late"
	assert_refused /dev/stdin count-effects "$BATS_TEST_TMPDIR/late" <<-EOF
		count-effects: $BATS_TEST_TMPDIR/late:$(wc -l <"$BATS_TEST_TMPDIR/late"): an external row after job or call rows: count-effects reads each job's call from its payload as its row goes by; write it right after the seed row, as seed-gen does
	EOF
}

# The stream of the fixture's seed with a guard declared on TABLE over
# the columns given.
declare_guard() {
	local table=$1
	shift
	{
		cat "$seed"
		echo "guard: { table: $table, key: [$(IFS=,; echo "$*")] }"
	} >"$BATS_TEST_TMPDIR/declared.yaml"
	seed-gen "$BATS_TEST_TMPDIR/declared.yaml" >"$BATS_TEST_TMPDIR/stream"
}

@test "a guard declared on another table is found there and probed, and that table is left as it was" {
	sql "CREATE TABLE fx.claims (order_id text NOT NULL, line_no integer NOT NULL, job text NOT NULL,
		CONSTRAINT claims_once PRIMARY KEY (order_id, line_no))" >/dev/null
	sql "INSERT INTO fx.claims VALUES ('o-1', 1, 'j1'), ('o-2', 1, 'j2')" >/dev/null
	declare_guard fx.claims order_id line_no
	assert_equal "$(awk -F '\t' '$1 == "declared_guard"' "$BATS_TEST_TMPDIR/stream")" \
		"$(printf 'declared_guard\tfx.claims\t["order_id","line_no"]')"
	before=$(sql "SELECT string_agg(xmin::text || ':' || order_id || ':' || job, ',' ORDER BY order_id) FROM fx.claims")
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" 2>"$err" || true
	# the effect table's, as before, then the declared table's
	grep -q "^guard	none	\\\\N	none: best effort	\\\\N$" "$out"
	grep -q "^guard	constraint	claims_once	PRIMARY KEY (order_id, line_no)	\\\\N	fx.claims$" "$out"
	grep -q "^probe	enforced	23505	ERROR:  duplicate key value violates unique constraint \"claims_once\".*	fx.claims$" "$out"
	assert_equal "$(sql "SELECT string_agg(xmin::text || ':' || order_id || ':' || job, ',' ORDER BY order_id) FROM fx.claims")" "$before"
}

@test "a declared guard that is not there is a guard of kind none on that table, named" {
	# unique, but over another column than the declared key's
	sql "CREATE TABLE fx.claims (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		order_id text NOT NULL, line_no integer NOT NULL, job text NOT NULL)" >/dev/null
	sql "INSERT INTO fx.claims (order_id, line_no, job) VALUES ('o-1', 1, 'j1')" >/dev/null
	declare_guard fx.claims order_id line_no
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" 2>"$err" || true
	grep -q "^guard	none	\\\\N	none: not found where the seed declares the guard: no unique constraint or index over its key	\\\\N	fx.claims$" "$out"
	grep -q "^probe	not-enforced	\\\\N	.*	fx.claims$" "$out"
	grep -qF 'count-effects: probe: a copy of a row of fx.claims went in: it does not enforce one row per declared key' "$err"
	# a table that does not exist
	declare_guard fx.nowhere order_id
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" 2>"$err" || true
	grep -q "^guard	none	\\\\N	none: not found where the seed declares the guard: no such table	\\\\N	fx.nowhere$" "$out"
	grep -q "^probe	skipped	\\\\N	no table to probe		fx.nowhere$" "$out"
	# a key column the table does not have, named as SQL quotes it
	declare_guard fx.claims order_id 'Line No'
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" 2>"$err" || true
	grep -q "^guard	none	\\\\N	none: not found where the seed declares the guard: no column \"Line No\" in the table	\\\\N	fx.claims$" "$out"
	grep -q "^probe	skipped	\\\\N	no column of the declared key to probe		fx.claims$" "$out"
}

@test "without a declared guard, the stream has no row of another table" {
	count-effects "$BATS_TEST_TMPDIR/stream" >"$out" 2>"$err" || true
	assert_equal "$(rows_of declared_guard "$out")" 0
	assert_equal "$(awk -F '\t' '($1 == "guard" || $1 == "probe") && NF > 5' "$out")" ""
}

@test "the database the stream names: written once, by the first to reach it, with the server's version" {
	count-effects --before "$BATS_TEST_TMPDIR/stream" >"$BATS_TEST_TMPDIR/before"
	# psql, the outside referee, on the server and the database
	assert_equal "$(awk -F '\t' '$1 == "database" { print $3 "|" $4 "|" $5 "|" $6 }' "$BATS_TEST_TMPDIR/before")" \
		"$(sql 'SELECT current_database()')|$(sql 'SHOW server_version')|$(sql 'SHOW server_version_num')|$(sql 'SHOW default_transaction_isolation')"
	assert_equal "$(awk -F '\t' '$1 == "database" { print $2 }' "$BATS_TEST_TMPDIR/before")" \
		"$(sql 'SELECT sandbox_id FROM idem.sandbox')"
	# the next program of the pipeline finds it, and writes no second one
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/before"
	printf '%s\n' "$output" >"$out"
	assert_equal "$(rows_of database "$out")" 1
}

@test "count-effects pointed at another database than the stream's refuses, naming both" {
	count-effects --before "$BATS_TEST_TMPDIR/stream" >"$BATS_TEST_TMPDIR/before"
	id=$(sql 'SELECT sandbox_id FROM idem.sandbox')
	# a copy of the sandbox's database: the same sandbox id, another name
	psql -X -q -d postgres -c 'DROP DATABASE IF EXISTS other' -c "CREATE DATABASE other TEMPLATE $PGDATABASE"
	run --separate-stderr count-effects -d dbname=other "$BATS_TEST_TMPDIR/before"
	[ "$status" -eq 2 ]
	assert_equal "$output" ""
	assert_equal "$stderr" "count-effects: -d points at database other of sandbox $id, but the stream's database row names database $PGDATABASE of sandbox $id: one pipeline uses one database"
	# the PG* environment, named as such
	run --separate-stderr env PGDATABASE=other count-effects "$BATS_TEST_TMPDIR/before"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "count-effects: the PG* environment points at database other of sandbox $id, but"* ]]
	# another sandbox's id, in the stream's row, is another database too
	sed "s/$id/00000000-0000-0000-0000-000000000000/" "$BATS_TEST_TMPDIR/before" >"$BATS_TEST_TMPDIR/forged"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/forged"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"names database $PGDATABASE of sandbox 00000000-0000-0000-0000-000000000000: one pipeline uses one database" ]]
	# the stream's own database, as the seed's database names it, passes
	run -0 count-effects --before -d "dbname=$PGDATABASE" "$BATS_TEST_TMPDIR/before"
	psql -X -q -d postgres -c 'DROP DATABASE other'
}

@test "count-effects connects to the seed's database, as dup-publish does, unless -d or IDEM_DATABASE names another" {
	sed "s/^queue: /database: \"dbname=nowhere\"\\nqueue: /" "$seed" >"$BATS_TEST_TMPDIR/elsewhere.yaml"
	grep -q '^database: "dbname=nowhere"$' "$BATS_TEST_TMPDIR/elsewhere.yaml"
	run --separate-stderr sh -c "seed-gen '$BATS_TEST_TMPDIR/elsewhere.yaml' | count-effects --before"
	[ "$status" -eq 3 ]
	[[ "$stderr" == *'database "nowhere" does not exist'* ]]
	# -d, or IDEM_DATABASE, names another
	seed-gen "$BATS_TEST_TMPDIR/elsewhere.yaml" | count-effects --before -d "dbname=$PGDATABASE" >/dev/null
	seed-gen "$BATS_TEST_TMPDIR/elsewhere.yaml" | IDEM_DATABASE="dbname=$PGDATABASE" count-effects --before >/dev/null
}

@test "a stall scenario's job is expected to have its effect once; the stall and lease rows pass through" {
	sed 's/^  - { name: copy, jobs: \[j1\], duplicates: 1 }$/&\n  - { name: held, jobs: [j2], stall: after-commit, until: before-ack }/' \
		"$seed" >"$BATS_TEST_TMPDIR/stall.yaml"
	{ seed-gen "$BATS_TEST_TMPDIR/stall.yaml"
	  printf 'stall\theld\tj2\t1\tafter-commit\t4242\t2026-12-01T10:00:00.000000Z\t2026-12-01T10:00:03.000000Z\tuntil\tsocket\n'
	  printf 'lease\t2026-12-01T10:00:01.000000Z\t2\tj2\t1\tstall\n'
	} >"$BATS_TEST_TMPDIR/stall.tsv"
	grep -q "^scenario	held	stall	after-commit	1	0	0	before-ack	\\\\N$" "$BATS_TEST_TMPDIR/stall.tsv"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/stall.tsv"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	awk -F '\t' '$1 == "count" && $3 == "key" && $4 == "[\"o-2\",1]" { print $5, $6 }' "$out" >"$out.o2"
	assert_equal "$(cat "$out.o2")" "1 3"
	assert_equal "$(grep -c '^stall	held	j2	' "$out")" 1
	assert_equal "$(grep -c '^lease	' "$out")" 1
	[[ "$stderr" == *"duplicate: business key [\"o-2\",1] has 3 effect rows, expected 1"* ]]
}
