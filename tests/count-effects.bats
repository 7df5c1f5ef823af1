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
	! grep -q "effects_other" <(grep '^guard' "$out")
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

# A call row of the vendor double: call KEY ANSWER EFFECT [PID], KEY \N
# for a body without the key's fields.
call() {
	local status=200
	case $2 in error) status=500 ;; timeout | killed) status=0 ;; esac
	printf 'call\t2026-12-01T10:00:00.000000Z\t0\t%s\tPOST\t/v1/charges\tkey-%s\t%s\t%s\t%s\t%s\t%s\tch_1\n' \
		"${4:-4242}" "$RANDOM" "$(printf '%s' "$1" | sha256sum | cut -d ' ' -f 1)" "$1" "$status" "$2" "$3"
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

@test "external: the rows of the worker's table of pending calls, per owner, its names quoted" {
	psql -X -q -v ON_ERROR_STOP=1 <<-SQL
		CREATE TABLE fx."pending calls" (key text NOT NULL, "who ""owns""" text, status text NOT NULL);
		INSERT INTO fx."pending calls" VALUES ('o-1', 'billing-oncall', 'done'),
			('o-2', 'billing-oncall', 'pending'), ('o-3', NULL, 'pending');
	SQL
	external_seed | sed 's/honours_idempotency_key: false }$/honours_idempotency_key: false, pending: { table: "fx.pending calls", owner: "who \\"owns\\"" } }/' \
		>"$BATS_TEST_TMPDIR/external.yaml"
	grep -q 'pending: {' "$BATS_TEST_TMPDIR/external.yaml"
	{ seed-gen "$BATS_TEST_TMPDIR/external.yaml"; calls; } | count-effects >"$out" 2>"$err" || true
	assert_equal "$(awk -F '\t' '$1 == "query" && $3 == "pending_external" { print $4 }' "$out")" \
		'SELECT "who ""owns"""::text AS owner, count(*) AS calls FROM "fx"."pending calls" GROUP BY 1 ORDER BY 1'
	assert_equal "$(awk -F '\t' '$1 == "measure" && $2 == "pending_external_calls" { print $3, $4, $5, $6 }' "$out")" \
		'2 2 3 rows of fx.pending calls whose who "owns" is billing-oncall
1 1 3 rows of fx.pending calls without who "owns"'
	# the printed query, fed to psql, gives the same numbers
	psql -X -A -t -F ' ' -c "$(awk -F '\t' '$1 == "query" && $3 == "pending_external" { print $4 }' "$out")" >"$out.psql"
	assert_equal "$(cat "$out.psql")" 'billing-oncall 2
 1'
}

@test "external: call rows without an external row are passed on, not counted; an external row after the jobs is refused" {
	{ cat "$BATS_TEST_TMPDIR/stream"; calls; } | count-effects >"$out" 2>"$err" || true
	assert_equal "$(rows_of call "$out")" 9
	! grep -q '^count	after	external' "$out"
	! grep -q '^count	after	total	external' "$out"
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
	grep -q "^scenario	held	stall	after-commit	1	0	0	before-ack$" "$BATS_TEST_TMPDIR/stall.tsv"
	run --separate-stderr count-effects "$BATS_TEST_TMPDIR/stall.tsv"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$out"
	awk -F '\t' '$1 == "count" && $3 == "key" && $4 == "[\"o-2\",1]" { print $5, $6 }' "$out" >"$out.o2"
	assert_equal "$(cat "$out.o2")" "1 3"
	assert_equal "$(grep -c '^stall	held	j2	' "$out")" 1
	assert_equal "$(grep -c '^lease	' "$out")" 1
	[[ "$stderr" == *"duplicate: business key [\"o-2\",1] has 3 effect rows, expected 1"* ]]
}
