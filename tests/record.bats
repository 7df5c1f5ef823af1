#!/usr/bin/env bats
# mkrecord and verify-record in real git repositories, with the real
# ssh-keygen and git as referees, both ways.

load helper
load sandbox-tests
load records-helper
load answers-helper

sandbox_file_setup() {
	invoice_line_run
	export REPRODUCE="idem-worker --setup -g unique && seed-gen seed.yaml | count-effects --before | dup-publish | kill-at -- idem-worker --guard unique | count-effects"
}

# A fresh repository with the seed committed, a key and allowed_signers;
# the run's queue is left as it was.
setup() {
	repo="$BATS_TEST_TMPDIR/repo"
	seed_repo "$repo"
}

record() {
	mkrecord -k "$key" -c -r "$REPRODUCE" "$@" <"$RUN"
}

# The run's stream with the queue row that dup-publish writes replaced by
# the row given, or taken out when it is empty.
with_queue() {
	awk -F '\t' -v row="$1" '$1 == "queue" { next }
		$1 == "publish" && !done && row != "" { print row; done = 1 } { print }' "$RUN"
}

# The version of idem's queue schema in the sandbox.
idem_schema_version() {
	sql 'SELECT schema_version FROM idem.sandbox'
}

# One row of a stream, its fields given as words.
row() {
	local IFS='	'
	printf '%s\n' "$*"
}

# A call row of the vendor double: call AT WORKER PID IDEMPOTENCY-KEY
# BUSINESS-KEY STATUS ANSWER EFFECT RESPONSE-ID.
call() {
	row call "2026-12-01T10:00:$1Z" "$2" "$3" POST /v1/charges "$4" \
		"$(printf '%s' "$5" | sha256sum | cut -d ' ' -f 1)" "$5" "$6" "$7" "$8" "$9"
}

# A run of tests/fixtures/seeds/external.yaml, committed as charge.yaml, as
# kill-at leaves it with the vendor double's call rows, counted: job-0001
# killed during its charge (process 101) and retried by process 102, whose
# call is replayed; job-0002 charged by process 102 after a vendor error;
# job-0003 timed out in process 103, charged by its copy's delivery, and
# replayed on its retry; and a request of no worker. The call rows given
# as arguments are added.
charge_run() {
	{
		seed-gen charge.yaml
		row publish job-0001 0 9001 2026-12-01T10:00:00.000000Z published
		row publish job-0002 0 9002 2026-12-01T10:00:00.000000Z published
		row publish job-0003 0 9003 2026-12-01T10:00:00.000000Z published
		row publish job-0003 1 9004 2026-12-01T10:00:00.050000Z published
		row kill charge-killed job-0001 1 external-call 101 2026-12-01T10:00:01.200000Z '\N'
		row recover job-0001 9001 2026-12-01T10:00:01.200000Z 2026-12-01T10:00:02.200000Z 1000
		row attempt job-0001 9001 1 101 2026-12-01T10:00:01.000000Z 2026-12-01T10:00:01.050000Z '\N' 1 'inserted called' 2026-12-01T10:00:01.040000Z 0
		row attempt job-0002 9002 1 102 2026-12-01T10:00:01.000000Z 2026-12-01T10:00:01.050000Z 2026-12-01T10:00:01.400000Z 1 'inserted called' 2026-12-01T10:00:01.040000Z 0
		row attempt job-0003 9003 1 103 2026-12-01T10:00:01.000000Z 2026-12-01T10:00:01.050000Z '\N' 1 'inserted called' 2026-12-01T10:00:01.040000Z 0
		row attempt job-0003 9004 1 103 2026-12-01T10:00:01.500000Z '\N' 2026-12-01T10:00:01.700000Z 0 'conflict-noop called' '\N' 0
		row attempt job-0001 9001 2 102 2026-12-01T10:00:02.000000Z '\N' 2026-12-01T10:00:02.200000Z 0 'conflict-noop pending-reconciled' '\N' 0
		row attempt job-0003 9003 2 103 2026-12-01T10:00:02.000000Z '\N' 2026-12-01T10:00:02.200000Z 0 'conflict-noop already-called' '\N' 0
		call 01.050000 -1 0 '\N' '\N' 200 ok no '\N'
		call 01.100000 0 101 job-0001 '["inv-1001",1]' 0 killed yes ch_1
		call 01.100000 1 102 job-0002 '["inv-1002",1]' 500 error no '\N'
		call 01.300000 1 102 job-0002 '["inv-1002",1]' 200 ok yes ch_2
		call 01.100000 2 103 job-0003 '["inv-1003",1]' 0 timeout no '\N'
		call 01.600000 2 103 job-0003 '["inv-1003",1]' 200 ok yes ch_3
		call 02.100000 1 102 job-0001 '["inv-1001",1]' 200 replayed no ch_1
		call 02.100000 2 103 job-0003 '["inv-1003",1]' 200 replayed no ch_3
		[ -z "${1:-}" ] || printf '%s\n' "$1"
	} | count-effects
}

# The seed of charge_run, committed.
commit_charge_seed() {
	cp "$BATS_TEST_DIRNAME/fixtures/seeds/external.yaml" charge.yaml
	git add charge.yaml
	git commit -q -m "the charge seed"
}

# A record as mkrecord wrote it in format 2, before the external call:
# without external, calls, the calls of each attempt and the external
# count expected.
# A record as mkrecord wrote it in format 7, before idem-tsv 1.8: without
# the keys forgotten, changed and pending, the vendor_ms of each scenario,
# the pending table's key and state, and the number and answer time of
# each call; nor (format 8) the trace and the spans of each attempt.
as_format_7() {
	awk '/^record: 10$/ { print "record: 7"; next }
		/^(forgotten_keys|rekeyed|pending_calls|trace):/ { list = 1; next }
		/^  (worker_spans|spans_lost):/ { spans = 1; next }
		spans && /^  - / { next }
		{ spans = 0 }
		list && /^[- ]/ { next }
		{ list = 0 }
		/^  vendor_ms: / || /^  (id|answered_at): / || /^    (id|answered_at): / { next }
		/^  pending_(key|state|settled):/ { pending = 1; next }
		pending && /^  - / { next }
		{ pending = 0; print }' "$1"
}

# A record as mkrecord wrote it in format 6, before stalls: without the
# stalls, the until step of each scenario, and the lease each attempt
# ended with.
as_format_6() {
	as_format_7 "$1" | awk '/^record: 7$/ { print "record: 6"; next }
		/^stalls:/ { stalls = 1; next }
		stalls && /^[- ]/ { next }
		{ stalls = 0 }
		/^  until: / { next }
		/^  lease_ended:/ { lease = 1; next }
		lease && /^    / { next }
		{ lease = 0; print }'
}

# A record as mkrecord wrote it in format 5, before the database row: its
# database the seed's words, no image_observed, and only the seed's lines
# in cannot_reproduce.
as_format_5() {
	as_format_6 "$1" | awk '/^record: 6$/ { print "record: 5"; next }
		/^database:$/ { db = 1; next }
		db && /^  / { next }
		db { db = 0; print "database: \"the PG* environment (idem-sandbox)\"" }
		/^  image_observed: / { next }
		/^  - "the (database|worker image|worker version|worker command): / { next }
		{ print }'
}

# A record as mkrecord wrote it in format 4, before the attempts summary,
# the evidence file and the measures' intervals.
as_format_4() {
	as_format_5 "$1" | awk '/^record: 5$/ { print "record: 4"; next }
		/^attempts:$/ { skip = 1; next }
		/^evidence_file: null$/ { next }
		/^  interval: null$/ { next }
		/^  interval:$/ { skip = 2; next }
		skip == 1 && /^  / { next }
		skip == 2 && /^    / { next }
		{ skip = 0; print }'
}

as_format_2() {
	as_format_4 "$1" | awk '/^record: 4$/ { print "record: 2"; next }
		/^expected_verdict: / || /^missed: \[\]$/ { next }
		/^external: null$/ || /^calls: \[\]$/ || /^  calls: \[\]$/ || /^    external: null$/ { next }
		{ print }'
}

@test "ssh-keygen accepts the record's signature; git accepts the signed commit; fsck is clean" {
	r=$(record)
	[ -f "$r" ] && [ -f "$r.sig" ] && [ -f "${r%.yaml}.md" ]
	ssh-keygen -Y verify -f records/allowed_signers -I eng@example.org -n idem-record -s "$r.sig" <"$r"
	git_ssh verify-commit HEAD
	assert_equal "$(git_ssh log -1 --format=%G? HEAD)" G
	git fsck --strict 2>&1 | { ! grep -q .; }
	assert_equal "$(git status --porcelain)" ""
	git log -1 --format=%s | grep -q '^record: invoice-line pass (effects 6 of 6 expected, duplicates 0, external calls 6 of 6)$'
}

@test "the commit is byte for byte what git commit -S makes of the same tree, parent, author, time and message" {
	record >/dev/null
	ours=$(git rev-parse HEAD)
	when=$(git log -1 --format='%at %ai' | awk '{ print "@" $1 " " $4 }')
	git cat-file commit HEAD | sed '1,/^$/d' >"$BATS_TEST_TMPDIR/message"
	git reset -q --soft HEAD~1
	GIT_AUTHOR_DATE="$when" GIT_COMMITTER_DATE="$when" \
		signed_commit --cleanup=verbatim -F "$BATS_TEST_TMPDIR/message"
	assert_equal "$(git rev-parse HEAD)" "$ours"
}

@test "verify-record verifies the record, and one signed by ssh-keygen -Y sign" {
	r=$(record)
	run verify-record "$r"
	[ "$status" -eq 0 ]
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict pass"
	resign "$r"
	run verify-record "$r"
	[ "$status" -eq 0 ]
}

@test "verify-record --history accepts a commit made by git commit -S with an ssh key" {
	record >/dev/null
	echo "note" >records/NOTE
	git add records/NOTE
	signed_commit -m "records: a note"
	run verify-record --history
	[ "$status" -eq 0 ]
	[[ "$output" == *"ok     signed by eng@example.org: records: a note"* ]]
}

@test "an unsigned commit that touches records/ fails the audit, named" {
	record >/dev/null
	echo "note" >records/NOTE
	git add records/NOTE
	git commit -q -m "records: unsigned"
	run verify-record --history -t
	[ "$status" -eq 1 ]
	grep -q "	FAIL	commit is not signed: records: unsigned$" <<<"$output"
	run verify-record --history --format github
	[[ "$output" == *"::error file=records::commit FAIL: commit is not signed: records: unsigned"* ]]
	# --since checks only what a pull request adds
	run verify-record --history --since HEAD
	[ "$status" -eq 0 ]
	# -c audits the commits alone
	run verify-record --history -c
	[ "$status" -eq 1 ]
	[[ "$output" != *"record  "* ]]
	[[ "$output" == *"FAIL   commit is not signed: records: unsigned"* ]]
}

@test "an unknown key, a key for another namespace, a key outside its window are each refused" {
	r=$(record)
	cp records/allowed_signers "$BATS_TEST_TMPDIR/all"
	ssh-keygen -q -t ed25519 -N '' -f "$BATS_TEST_TMPDIR/other"
	echo "other@example.org $(cat "$BATS_TEST_TMPDIR/other.pub")" >records/allowed_signers
	run verify-record "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is not in allowed_signers"* ]]
	echo "eng@example.org namespaces=\"git\" $(cat "$key.pub")" >records/allowed_signers
	run verify-record "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is not allowed to sign in this namespace (namespace idem-record)"* ]]
	echo "eng@example.org valid-after=\"20200101\",valid-before=\"20210101\" $(cat "$key.pub")" >records/allowed_signers
	run verify-record "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is outside its validity window"* ]]
	# and ssh-keygen agrees
	! ssh-keygen -Y verify -f records/allowed_signers -I eng@example.org -n idem-record -s "$r.sig" <"$r" 2>/dev/null
}

@test "a signature moved to another record is refused" {
	a=$(record)
	b=$(record)
	cp "$a.sig" "$b.sig"
	run verify-record "$b"
	[ "$status" -eq 1 ]
	[[ "$output" == *"signature: signature does not verify"* ]]
}

@test "a record whose seed hash does not match the seed at its revision is refused" {
	r=$(record)
	# its last digit changed, whatever it was
	sed -i -E 's/^(  sha256: "[0-9a-f]{63})0"$/\11"/; t; s/^(  sha256: "[0-9a-f]{63})[0-9a-f]"$/\10"/' "$r"
	resign "$r"
	run verify-record "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"seed: seed.yaml at "*" has SHA-256 "*", the record says "* ]]
}

@test "a record whose totals do not add up is refused, even signed" {
	r=$(record)
	awk '/^    effects:$/ { t = 1 } t && /observed: 6$/ { sub(/6$/, "7"); t = 0 } { print }' "$r" >"$r.new"
	mv "$r.new" "$r"
	resign "$r"
	run verify-record "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"counts: the totals summary does not match the total rows it sums up"* ]]
	# and a total row that does not add up, summary and all
	awk '/scope: "total"/ { t = 1 } t && /key: "effects"/ { e = 1 } e && /observed: 6$/ { sub(/6$/, "7"); e = 0; t = 0 } { print }' "$r" >"$r.new"
	mv "$r.new" "$r"
	resign "$r"
	run verify-record "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"counts: total effects is 7, the count rows add up to 6"* ]]
}

@test "a key others may read, and an encrypted key, are refused before anything is written" {
	chmod 644 "$key"
	run mkrecord -k "$key" <"$RUN"
	[ "$status" -eq 2 ]
	[[ "$output" == *"permissions 0644 are too open"* ]]
	ssh-keygen -q -t ed25519 -N 'secret words' -f "$BATS_TEST_TMPDIR/locked"
	run mkrecord -k "$BATS_TEST_TMPDIR/locked" <"$RUN"
	[ "$status" -eq 2 ]
	[[ "$output" == *"the key is encrypted (aes256-ctr)"* ]]
	assert_equal "$(ls records)" allowed_signers
}

@test "a damaged key, whose seed does not derive its public key, is refused before anything is written" {
	cp "$BATS_TEST_DIRNAME/fixtures/keys/idem-test-fixture-DAMAGED-NOT-SECRET_ed25519" "$BATS_TEST_TMPDIR/damaged"
	chmod 600 "$BATS_TEST_TMPDIR/damaged"
	head=$(git rev-parse HEAD)
	run mkrecord -k "$BATS_TEST_TMPDIR/damaged" -c -r "$REPRODUCE" <"$RUN"
	[ "$status" -eq 2 ]
	assert_equal "$output" "mkrecord: $BATS_TEST_TMPDIR/damaged: the private key does not match its public key: the key file is damaged"
	assert_equal "$(ls -A records)" allowed_signers
	assert_equal "$(git rev-parse HEAD)" "$head"
	assert_equal "$(git status --porcelain)" ""
	# ssh-keygen signs with it all the same, and nothing verifies what it signs
	echo data >"$BATS_TEST_TMPDIR/data"
	ssh-keygen -q -Y sign -f "$BATS_TEST_TMPDIR/damaged" -n idem-record "$BATS_TEST_TMPDIR/data"
	echo "eng@example.org $(cat "$BATS_TEST_DIRNAME/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519.pub")" >"$BATS_TEST_TMPDIR/fixture_signers"
	! ssh-keygen -Y verify -f "$BATS_TEST_TMPDIR/fixture_signers" -I eng@example.org -n idem-record \
		-s "$BATS_TEST_TMPDIR/data.sig" <"$BATS_TEST_TMPDIR/data" 2>/dev/null
}

@test "a key whose private section is not padded as OpenSSH pads it is refused, as ssh-keygen refuses it" {
	# the fixture key with its last padding byte changed from 2 to 3
	python3 - "$BATS_TEST_DIRNAME/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519" \
		"$BATS_TEST_TMPDIR/padded" <<-'PY'
	import base64, sys
	lines = open(sys.argv[1]).read().split("\n")
	blob = bytearray(base64.b64decode("".join(lines[1:-2])))
	assert blob[-2:] == b"\x01\x02"
	blob[-1] = 3
	text = base64.b64encode(bytes(blob)).decode()
	body = "\n".join(text[i:i + 70] for i in range(0, len(text), 70))
	open(sys.argv[2], "w").write(lines[0] + "\n" + body + "\n" + lines[-2] + "\n")
	PY
	chmod 600 "$BATS_TEST_TMPDIR/padded"
	run ! ssh-keygen -y -f "$BATS_TEST_TMPDIR/padded"
	run mkrecord -k "$BATS_TEST_TMPDIR/padded" -c -r "$REPRODUCE" <"$RUN"
	[ "$status" -eq 2 ]
	assert_equal "$output" "mkrecord: $BATS_TEST_TMPDIR/padded: a malformed openssh-key-v1 key"
	assert_equal "$(ls -A records)" allowed_signers
}

@test "a directory given as the key is bad input, in one line" {
	mkdir -m 700 "$BATS_TEST_TMPDIR/keys"
	run mkrecord -k "$BATS_TEST_TMPDIR/keys" <"$RUN"
	[ "$status" -eq 2 ]
	assert_equal "$output" "mkrecord: $BATS_TEST_TMPDIR/keys: not a key file but a directory"
	assert_equal "$(ls -A records)" allowed_signers
}

@test "a seed with uncommitted changes is refused unless --allow-dirty, and then the record says so" {
	echo "# a change" >>seed.yaml
	sed -i '$d' seed.yaml
	echo "# changed" >>seed.yaml
	run mkrecord -k "$key" <"$RUN"
	[ "$status" -eq 2 ]
	[[ "$output" == *"seed.yaml changed since the stream was made"* ]]
	git checkout -q seed.yaml
	cp seed.yaml seed.copy
	git rm -q --cached seed.yaml
	git commit -q -m "untrack"
	run mkrecord -k "$key" <"$RUN"
	[ "$status" -eq 2 ]
	[[ "$output" == *"seed.yaml has changes not committed at"* ]]
	r=$(mkrecord -k "$key" --allow-dirty <"$RUN")
	grep -q '^  dirty: true$' "$r"
}

@test "--rerun reproduces the counts digest on a fresh sandbox" {
	r=$(record)
	run verify-record --rerun "$r"
	[ "$status" -eq 0 ]
	[[ "$output" == *"rerun reproduces the counts (digest "* ]]
}

@test "--rerun gives the command the sandbox as DATABASE_URL, never the caller's" {
	# the command reaches a sandbox by the URL alone, then gives the recorded stream
	check='test "$(env -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER -u IDEM_DATABASE psql -X -A -t "$DATABASE_URL" -c "SELECT count(*) FROM idem.sandbox")" = 1 && test "$IDEM_DATABASE_URL" = "$DATABASE_URL" && cat "$RUN"'
	r=$(mkrecord -k "$key" -c -r "$check" <"$RUN")
	DATABASE_URL=postgresql://elsewhere.invalid/production run -0 verify-record --rerun "$r"
	[[ "$output" == *"rerun reproduces the counts (digest "* ]]
	DATABASE_URL=postgresql://elsewhere.invalid/production \
		run -0 verify-record --rerun -d "host=$PGHOST port=$PGPORT dbname=idem user=idem" "$r"
	[[ "$output" == *"rerun reproduces the counts (digest "* ]]
}

@test "--rerun -d refuses a database that is not a sandbox before the command runs" {
	r=$(mkrecord -k "$key" -c -r "touch $BATS_TEST_TMPDIR/ran && cat \"\$RUN\"" <"$RUN")
	run -3 verify-record --rerun -d "host=$PGHOST port=$PGPORT dbname=postgres user=idem" "$r"
	[[ "$output" == "verify-record: dbname=postgres user=idem host=$PGHOST port=$PGPORT is not a rehearsal sandbox"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/ran" ]
}

@test "--rerun of a record whose command has another kill plan reports the rows that differ" {
	r=$(mkrecord -k "$key" -c -r "idem-worker --setup -g none && seed-gen seed.yaml | count-effects --before | dup-publish | kill-at -- idem-worker -g none | count-effects" <"$RUN")
	run verify-record --rerun "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"rerun counts differ"* ]]
	[[ "$output" == *'recorded key ["inv-1001",1]: expected 1, observed 1; the rerun differs'* ]]
}

@test "the audit lists a record whose review date passed as stale" {
	record -n 2020-01-01 >/dev/null
	run verify-record --history
	[ "$status" -eq 1 ]
	[[ "$output" == *"stale  next review date 2020-01-01 passed"* ]]
}

@test "200 days on, the audit calls the newest record of a rehearsal stale and no superseded one" {
	# faketime preloads itself: under the sanitizers, ASan need not come first
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
	old=$(faketime -f '-1d' mkrecord -k "$key" -c -r "$REPRODUCE" <"$RUN")
	new=$(record)
	run faketime -f '+200d' verify-record --history -t
	[ "$status" -eq 1 ]
	stale=$(awk -F '\t' '$4 == "stale"' <<<"$output")
	assert_equal "$(cut -f 3 <<<"$stale")" "$new"
	[[ "$(cut -f 5 <<<"$stale")" == "next review date "*" passed"* ]]
	grep -qF "	$old	ok	" <<<"$output"
	# today, neither is stale
	run -0 verify-record --history -t
}

@test "a failed commit leaves neither a half record nor a half commit" {
	head=$(git rev-parse HEAD)
	git checkout -q --detach
	run mkrecord -k "$key" -c <"$RUN"
	[ "$status" -eq 3 ]
	[[ "$output" == *"HEAD is detached"* ]]
	assert_equal "$(ls records)" allowed_signers
	assert_equal "$(git rev-parse HEAD)" "$head"
}

@test "an audit of many commits, checked on every core, finds the one unsigned commit among them" {
	for i in $(seq 40); do
		record >/dev/null
	done
	echo "note" >records/NOTE
	git add records/NOTE
	git commit -q -m "records: unsigned, among many"
	for i in $(seq 40); do
		record >/dev/null
	done
	run verify-record --history -c -t
	[ "$status" -eq 1 ]
	assert_equal "$(grep -c '	ok	signed by eng@example.org' <<<"$output")" 81
	assert_equal "$(grep '	FAIL	' <<<"$output" | cut -f 5)" "commit is not signed: records: unsigned, among many"
}

@test "a name is taken by any of its three files: mkrecord passes over it and replaces nothing" {
	day=$(date -u +%F)
	first=$(record)
	assert_equal "$first" "records/$day-invoice-line.yaml"
	echo "a handoff of someone else's" >"records/$day-invoice-line-2.md"
	echo "a signature of someone else's" >"records/$day-invoice-line-3.yaml.sig"
	second=$(record)
	# unsigned, a record still passes over a name whose .sig exists
	echo "another signature" >"records/$day-invoice-line-5.yaml.sig"
	third=$(mkrecord <"$RUN")
	[ "$(date -u +%F)" = "$day" ] || skip "the UTC date changed during the test"
	assert_equal "$second" "records/$day-invoice-line-4.yaml"
	assert_equal "$third" "records/$day-invoice-line-6.yaml"
	assert_equal "$(cat "records/$day-invoice-line-2.md")" "a handoff of someone else's"
	assert_equal "$(cat "records/$day-invoice-line-3.yaml.sig")" "a signature of someone else's"
	assert_equal "$(cat "records/$day-invoice-line-5.yaml.sig")" "another signature"
	[ ! -e "records/$day-invoice-line-2.yaml" ] && [ ! -e "records/$day-invoice-line-3.yaml" ]
	[ ! -e "records/$day-invoice-line-6.yaml.sig" ]
	ssh-keygen -Y verify -f records/allowed_signers -I eng@example.org -n idem-record -s "$second.sig" <"$second"
	# no temporary file is left behind
	assert_equal "$(ls -A records | grep -c '^\.')" 0
}

@test "the 2000th record of a rehearsal on one day is -2000, and the 1999 before it are untouched" {
	day=$(date -u +%F)
	base="records/$day-invoice-line"
	# the names 1 to 1999 taken, each by a file of its own content
	echo "record 1" >"$base.yaml"
	for n in $(seq 2 1999); do
		case $((n % 3)) in
		0) echo "record $n" >"$base-$n.yaml" ;;
		1) echo "handoff $n" >"$base-$n.md" ;;
		2) echo "signature $n" >"$base-$n.yaml.sig" ;;
		esac
	done
	r=$(record)
	[ "$(date -u +%F)" = "$day" ] || skip "the UTC date changed during the test"
	assert_equal "$r" "$base-2000.yaml"
	assert_equal "$(cat "$base.yaml")" "record 1"
	# read without a process a file, as 2,000 of them would take seconds
	for n in $(seq 2 1999); do
		case $((n % 3)) in
		0) read -r got <"$base-$n.yaml" && [ "$got" = "record $n" ] ;;
		1) read -r got <"$base-$n.md" && [ "$got" = "handoff $n" ] && [ ! -e "$base-$n.yaml" ] ;;
		2) read -r got <"$base-$n.yaml.sig" && [ "$got" = "signature $n" ] && [ ! -e "$base-$n.yaml" ] ;;
		esac || { echo "name $n was changed" >&2; return 1; }
	done
	# allowed_signers, the 1,999 taken names and the six files of -2000
	[ "$(ls records | wc -l)" -eq 2006 ]
	assert_equal "$(git show --name-only --format= HEAD)" "$base-2000.intoto.jsonl
$base-2000.md
$base-2000.svg
$base-2000.trace.json
$base-2000.yaml
$base-2000.yaml.sig"
	ssh-keygen -Y verify -f records/allowed_signers -I eng@example.org -n idem-record -s "$r.sig" <"$r"
}

@test "150 records of one rehearsal on one day, each committed: 150 names, and the audit passes over them" {
	for i in $(seq 150); do
		record >>"$BATS_TEST_TMPDIR/names"
	done
	assert_equal "$(sort -u "$BATS_TEST_TMPDIR/names" | wc -l)" 150
	assert_equal "$(ls records/*.yaml | wc -l)" 150
	assert_equal "$(git log --format=%s -- records | grep -c '^record: ')" 150
	run verify-record --history -t
	[ "$status" -eq 0 ]
	assert_equal "$(grep -c '	record	.*	ok	pass, signed by eng@example.org; awaiting approval$' <<<"$output")" 150
	assert_equal "$(grep -c '	commit	.*	ok	signed by eng@example.org: ' <<<"$output")" 151
}

@test "runs at the same moment in one directory never take one name" {
	for worker in 1 2 3 4; do
		(for i in $(seq 25); do mkrecord -k "$key" <"$RUN"; done >"$BATS_TEST_TMPDIR/names.$worker") &
	done
	wait
	cat "$BATS_TEST_TMPDIR"/names.* >"$BATS_TEST_TMPDIR/names"
	assert_equal "$(wc -l <"$BATS_TEST_TMPDIR/names")" 100
	assert_equal "$(sort -u "$BATS_TEST_TMPDIR/names" | wc -l)" 100
	assert_equal "$(ls records/*.yaml | wc -l)" 100
	run verify-record records/*.yaml
	[ "$status" -eq 0 ]
	assert_equal "$(grep -c ': verified, signed by eng@example.org; verdict pass$' <<<"$output")" 100
}

@test "a record whose totals summary says pass against its own count rows is refused" {
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$RUN")
	# the summary claims 7 expected: a pass against 7 observed, if unchecked
	awk '/^    effects:$/ { t = 1 } t && /expected: 6$/ { sub(/6$/, "7"); t = 0 } { print }' "$r" >"$r.new"
	mv "$r.new" "$r"
	resign "$r"
	run verify-record "$r"
	[ "$status" -eq 1 ]
	[[ "$output" == *"counts: the totals summary does not match the total rows it sums up"* ]]
}

@test "a record that is not YAML of a record, or that nests aliases, fails without crashing" {
	mkdir -p "$BATS_TEST_TMPDIR/odd"
	printf 'a: &x [ *x ]\n' >"$BATS_TEST_TMPDIR/odd/cycle.yaml"
	printf 'record: 1\nmeasures: [ 7 ]\ncounts: { after: [ 1 ] }\n' >"$BATS_TEST_TMPDIR/odd/junk.yaml"
	run verify-record "$BATS_TEST_TMPDIR/odd/cycle.yaml" "$BATS_TEST_TMPDIR/odd/junk.yaml"
	[ "$status" -eq 1 ]
	[[ "$output" == *"cycle.yaml: NOT verified"* ]]
	[[ "$output" == *"junk.yaml: NOT verified"* ]]
}

@test "message ids that are not numbers (pg-boss's UUIDs) find their publish time, log lines and kills" {
	# the same run, its ids written as UUIDs wherever the stream has them
	python3 - "$RUN" >"$BATS_TEST_TMPDIR/uuids.tsv" <<-'PY'
	import re, sys
	uuid = lambda n: "00000000-0000-4000-8000-%012d" % int(n)
	column = {"publish": 3, "attempt": 2, "recover": 2, "lease": 2}
	for line in open(sys.argv[1], encoding="utf-8"):
	    f = line.rstrip("\n").split("\t")
	    if f[0] in column:
	        f[column[f[0]]] = uuid(f[column[f[0]]])
	    elif f[0] == "log":
	        f[4] = re.sub(r"msg_id=(\d+)", lambda m: "msg_id=" + uuid(m.group(1)), f[4])
	    sys.stdout.write("\t".join(f) + "\n")
	PY
	grep -q '^attempt	[^	]*	00000000-0000-4000-8000-' "$BATS_TEST_TMPDIR/uuids.tsv"
	a=$(mkrecord -o "$BATS_TEST_TMPDIR/a" <"$RUN")
	b=$(mkrecord -o "$BATS_TEST_TMPDIR/b" <"$BATS_TEST_TMPDIR/uuids.tsv")
	grep -q '^  msg_id: "00000000-0000-4000-8000-000000000002"$' "$b"
	# read back as numbers, the two records are one, but for when they were
	# made and their traces, whose span ids take the message ids
	sed -E 's/"00000000-0000-4000-8000-0*([0-9]+)"/\1/; s/msg_id=00000000-0000-4000-8000-0*([0-9]+)/msg_id=\1/g' "$b" |
		sed '/^trace:$/,$d' | grep -v '^created_at: ' >"$b.numbers"
	sed '/^trace:$/,$d' "$a" | grep -v '^created_at: ' | diff -u - "$b.numbers"
	grep -q '^  outcome: "killed at after-commit"$' "$a"
	! grep -q '^  published_at: null$' "$a"
}

@test "the record names its queue: kind, name and version from the queue row, else from the seed row" {
	version=$(idem_schema_version)
	with_queue "$(printf 'queue\tidem\trehearsal_invoice_line\t%s' "$version")" >"$BATS_TEST_TMPDIR/run.tsv"
	r=$(mkrecord -k "$key" <"$BATS_TEST_TMPDIR/run.tsv")
	grep -q '^record: 10$' "$r"
	assert_equal "$(sed -n '/^queue:$/,/^database:/p' "$r")" "queue:
  kind: \"idem\"
  name: \"rehearsal_invoice_line\"
  version: \"$version\"
database:"
	grep -q '^| queue | `rehearsal_invoice_line` |$' "${r%.yaml}.md"
	grep -q "^| queue library | idem, schema version $version |$" "${r%.yaml}.md"
	run -0 verify-record "$r"
	# without a queue row, the seed row's queue, whose version is not known
	r=$(with_queue "" | mkrecord -k "$key")
	assert_equal "$(sed -n '/^queue:$/,/^database:/p' "$r")" 'queue:
  kind: "idem"
  name: "rehearsal_invoice_line"
  version: null
database:'
	grep -q '^| queue library | idem, version not recorded |$' "${r%.yaml}.md"
	# and the seed row's kind
	r=$(with_queue "" | awk -F '\t' -v OFS='\t' '$1 == "seed" { NF = 22; $22 = "pg-boss" } { print }' |
		mkrecord -k "$key")
	grep -q '^  kind: "pg-boss"$' "$r"
	grep -q '^| queue library | pg-boss, version not recorded |$' "${r%.yaml}.md"
}

@test "a record of a format other than 1 to 10 is refused" {
	r=$(mkrecord -k "$key" <"$RUN")
	sed -i 's/^record: 10$/record: 11/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: not an idem record of format 1 to 10"* ]]
}

@test "a record of format 7, made before idem-tsv 1.8, still verifies" {
	r=$(mkrecord -k "$key" <"$RUN")
	as_format_7 "$r" >"$r.old"
	mv "$r.old" "$r"
	grep -q '^record: 7$' "$r"
	run ! grep -q '^ *\(vendor_ms\|answered_at\|pending_key\):\|^\(rekeyed\|pending_calls\|forgotten_keys\):' "$r"
	resign "$r"
	run -0 verify-record "$r"
}

@test "the record names the database it ran on, as the server says, beside the one the seed declares" {
	r=$(record)
	grep -q '^record: 10$' "$r"
	# psql, the outside referee
	assert_equal "$(sed -n '/^database:$/,/^worker:$/p' "$r")" "database:
  declared: null
  observed:
    sandbox_id: \"$(sql 'SELECT sandbox_id FROM idem.sandbox')\"
    dbname: \"$(psql -Atc 'SELECT current_database()')\"
    server_version: \"$(psql -Atc 'SHOW server_version')\"
    server_version_num: $(psql -Atc 'SHOW server_version_num')
    isolation: \"$(psql -Atc 'SHOW default_transaction_isolation')\"
worker:"
	# the worker's image is declared only: nothing observed it
	sed -n '/^worker:$/,/^retry:$/p' "$r" | grep -qx '  image_observed: false'
	version=$(psql -Atc 'SHOW server_version' | cut -d ' ' -f 1)
	grep -qx "  - \"the database: none declared; the run used database $PGDATABASE on PostgreSQL $version, default isolation $(psql -Atc 'SHOW default_transaction_isolation'); production's server and settings were not observed\"" "$r"
	grep -qx '  - "the worker image: declared `registry.example/billing-worker@sha256:[0-9a-f]*`, not observed: no image digest was read from what ran"' "$r"
	grep -qx '  - "the worker version: declared 1.4.2, not observed"' "$r"
	# the handoff says so, in its table and in what the sandbox cannot reproduce
	h="${r%.yaml}.md"
	grep -q "^| database | none declared; observed PostgreSQL $(psql -Atc 'SHOW server_version'), default isolation read committed, database \`$PGDATABASE\` of sandbox \`$(sql 'SELECT sandbox_id FROM idem.sandbox')\` |$" "$h"
	grep -q '^| worker | `registry.example/billing-worker@sha256:[0-9a-f]*` (declared only, not observed) ' "$h"
	grep -q '^- the sandbox cannot reproduce: the worker image: declared' "$h"
	tr '\n' ' ' <"$h" | tr -s ' ' | grep -q -- "- the sandbox cannot reproduce: the database: none declared; the run used database $PGDATABASE on PostgreSQL $version,"
	run -0 verify-record "$r"
}

@test "a record of a stream without a database row says the database was not observed" {
	r=$(grep -v '^database	' "$RUN" | mkrecord -k "$key")
	assert_equal "$(sed -n '/^database:$/,/^worker:$/p' "$r")" 'database:
  declared: null
  observed: null
worker:'
	grep -qx '  - "the database: none declared, not observed: the stream has no database row"' "$r"
	grep -q '^| database | none declared; not observed |$' "${r%.yaml}.md"
	run -0 verify-record "$r"
}

@test "a record of format 5 still verifies, and a finding of its sandbox account does not change its verdict" {
	r=$(mkrecord -k "$key" <"$RUN")
	as_format_5 "$r" >"$r.old"
	mv "$r.old" "$r"
	grep -q '^record: 5$' "$r"
	grep -q '^database: "the PG\* environment (idem-sandbox)"$' "$r"
	run ! grep -q 'image_observed\|the database: ' "$r"
	resign "$r"
	run -0 verify-record "$r"
	# format 5 knew no such rule: a finding beside a pass is what it was
	sed -i 's/^  findings: \[\]$/  findings:\n  - "held TRUNCATE on table idem.message, beyond its list"/' "$r"
	grep -qx '  - "held TRUNCATE on table idem.message, beyond its list"' "$r"
	resign "$r"
	run -0 verify-record "$r"
	# the same record in format 6 does not verify
	sed -i 's/^record: 5$/record: 6/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"verdict: the record says pass, but its sandbox account held TRUNCATE on table idem.message, beyond its list"* ]]
}

@test "a record of format 4, made before the evidence file and the intervals, still verifies" {
	r=$(mkrecord -k "$key" <"$RUN")
	as_format_4 "$r" >"$r.old"
	mv "$r.old" "$r"
	grep -q '^record: 4$' "$r"
	run ! grep -q '^ *interval:\|^attempts:\|^evidence_file:' "$r"
	resign "$r"
	run -0 verify-record "$r"
}

@test "each rate carries its 95% Wilson interval, which verify-record recomputes" {
	r=$(mkrecord -k "$key" <"$RUN")
	# 0 duplicates over 6 jobs: up to 390 per 1000, not a proof of none
	assert_equal "$(sed -n '/name: "duplicate_effects_per_1000_jobs"/,/^- name/p' "$r" | sed -n '/^  interval:$/,/confidence/p')" '  interval:
    low: 0
    high: 390.334288
    confidence: 0.95'
	grep -A 12 'name: "recovery_ms_max"' "$r" | grep -q '^  interval: null$'
	run -0 verify-record "$r"
	sed -i 's/^    high: 390.334288$/    high: 39.033429/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: measure duplicate_effects_per_1000_jobs: the record's interval is 0 to 39.033429, 0 of 6 give 0 to 390.334288"
}

@test "a small record lists every attempt, and its summary counts them" {
	r=$(mkrecord -k "$key" <"$RUN")
	attempts=$(grep -c '^attempt	' "$RUN")
	grep -q "^  total: $attempts$" "$r"
	grep -q "^  listed: $attempts$" "$r"
	grep -q '^  sample_jobs: null$' "$r"
	grep -q '^evidence_file: null$' "$r"
	[ ! -d records/evidence ]
	[ -z "$(find records -name '.mkrecord-*')" ]
	sed -i "s/^  total: $attempts$/  total: $((attempts + 1))/" "$r"
	resign "$r"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: attempts: total is $((attempts + 1)), the record's evidence has $attempts"
}

@test "verify-record --history -d: a record of another version of its queue's schema is stale" {
	version=$(idem_schema_version)
	with_queue "$(printf 'queue\tidem\trehearsal_invoice_line\t%s' "$version")" >"$BATS_TEST_TMPDIR/run.tsv"
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$BATS_TEST_TMPDIR/run.tsv")
	db="host=$PGHOST port=$PGPORT dbname=idem user=idem"
	run -0 verify-record --history -d "$db"
	[[ "$output" == *"record  $r"*" ok     pass, signed by eng@example.org"* ]]
	# the queue's schema upgraded: the record describes an older system
	sql "UPDATE idem.sandbox SET schema_version = $version + 1" >/dev/null
	run verify-record --history -d "$db"
	run_d=$status out_d=$output
	# -d '' is the database of IDEM_DATABASE, else of PG*
	run verify-record --history -d ''
	run_env=$status out_env=$output
	# without a database, nothing is said of the queue's version
	run verify-record --history
	run_none=$status out_none=$output
	# nor by a database, not a sandbox, where the queue is not installed
	run verify-record --history -d "host=$PGHOST port=$PGPORT dbname=postgres user=idem"
	run_other=$status out_other=$output
	sql "UPDATE idem.sandbox SET schema_version = $version" >/dev/null
	[ "$run_d" -eq 1 ]
	[[ "$out_d" == *"record  $r"*" stale  the idem queue's schema is version $((version + 1)) in the database, the record rehearsed version $version: not rehearsed since the queue's upgrade"* ]]
	[ "$run_env" -eq 1 ]
	assert_equal "$out_env" "$out_d"
	[ "$run_none" -eq 0 ]
	[[ "$out_none" == *"record  $r"*" ok     pass, signed by eng@example.org"* ]]
	[ "$run_other" -eq 0 ]
	assert_equal "$out_other" "$out_none"
	# and back at the version rehearsed, it is not stale
	run -0 verify-record --history -d "$db"
}

@test "verify-record --history -d reads pg-boss's and graphile-worker's schema versions as their migrations leave them" {
	# the seed row and the queue row of a run on each library, at version 1
	for kind in pg-boss graphile-worker; do
		with_queue "$(printf 'queue\t%s\tsend-confirmation\t1' "$kind")" |
			awk -F '\t' -v OFS='\t' -v kind="$kind" '$1 == "seed" { NF = 22; $22 = kind } { print }' |
			mkrecord -k "$key" -c -r "$REPRODUCE" >>"$BATS_TEST_TMPDIR/records"
	done
	pgboss=$(sed -n 1p "$BATS_TEST_TMPDIR/records") graphile=$(sed -n 2p "$BATS_TEST_TMPDIR/records")
	grep -q '^  kind: "pg-boss"$' "$pgboss"
	grep -q '^  kind: "graphile-worker"$' "$graphile"
	db="host=$PGHOST port=$PGPORT dbname=idem user=idem"
	# the seed, as it is now, names the newest record's queue
	queue_in_seed() {
		sed -i "s/^queue: .*/queue: { kind: $1, name: send-confirmation }/" seed.yaml
	}
	queue_in_seed graphile-worker
	# neither library installed: nothing to compare with
	run -0 verify-record --history -d "$db"
	# their own migrations install them, as a worker's setup would
	node -e 'process.stdout.write(require("pg-boss").getConstructionPlans())' | psql -X -q -v ON_ERROR_STOP=1 >/dev/null
	node -e 'require("graphile-worker").runMigrations({ connectionString: process.env.DATABASE_URL })
		.catch(e => { console.error(e); process.exit(1) })'
	pgboss_version=$(sql 'SELECT version FROM pgboss.version')
	graphile_version=$(sql 'SELECT max(id) FROM graphile_worker.migrations')
	run verify-record --history -t -d "$db"
	sql 'DROP SCHEMA pgboss CASCADE; DROP SCHEMA graphile_worker CASCADE; DROP SCHEMA IF EXISTS graphile_worker_private CASCADE' >/dev/null
	[ "$status" -eq 1 ]
	# the newest record of the rehearsal only: the graphile-worker one
	grep -q "	record	$pgboss	ok	pass, signed by eng@example.org; awaiting approval$" <<<"$output"
	grep -q "	record	$graphile	stale	the graphile-worker queue's schema is version $graphile_version in the database, the record rehearsed version 1: " <<<"$output"
	# the pg-boss record alone, newest of its own rehearsal
	git rm -q "$graphile" "$graphile.sig" "${graphile%.yaml}.md" "${graphile%.yaml}.svg" \
		"${graphile%.yaml}.intoto.jsonl"
	signed_commit -m "records: one queue at a time"
	queue_in_seed pg-boss
	node -e 'process.stdout.write(require("pg-boss").getConstructionPlans())' | psql -X -q -v ON_ERROR_STOP=1 >/dev/null
	run verify-record --history -t -d "$db"
	sql 'DROP SCHEMA pgboss CASCADE' >/dev/null
	[ "$status" -eq 1 ]
	grep -q "	record	$pgboss	stale	the pg-boss queue's schema is version $pgboss_version in the database, the record rehearsed version 1: " <<<"$output"
}

@test "a record of format 1, whose queue is a text, still verifies, and says nothing of its queue's version" {
	r=$(mkrecord -k "$key" <"$RUN")
	# what mkrecord wrote before the queue had a kind and a version
	as_format_2 "$r" | awk '/^record: 2$/ { print "record: 1"; next }
		/^queue:$/ { q = 1; next } q && /^  name: / { sub(/^  name: /, "queue: "); print; next }
		q && /^  / { next } { q = 0; print }' >"$r.old"
	mv "$r.old" "$r"
	grep -q '^record: 1$' "$r"
	grep -q '^queue: "rehearsal_invoice_line"$' "$r"
	run ! grep -q '^  kind: ' "$r"
	resign "$r"
	git add records
	signed_commit -m "records: format 1"
	run -0 verify-record "$r"
	sql "UPDATE idem.sandbox SET schema_version = schema_version + 1" >/dev/null
	run verify-record --history -d "host=$PGHOST port=$PGPORT dbname=idem user=idem"
	sql "UPDATE idem.sandbox SET schema_version = schema_version - 1" >/dev/null
	[ "$status" -eq 0 ]
	[[ "$output" == *"record  $r"*" ok     pass, signed by eng@example.org"* ]]
}

@test "a record of format 2, made before the external call, still verifies and keeps its verdict" {
	# a run of the seed without its external call, as every seed was then
	sed -i -e '/^external:/,/^  pending:/d' -e '/kill-during-external-call/d' \
		-e 's/, external: 6 }$/ }/' seed.yaml
	run ! grep -q 'external' seed.yaml
	git commit -q -am "seed: no external call"
	queue_reset
	idem-worker --setup -g unique
	seed-gen seed.yaml | count-effects --before | dup-publish |
		kill-at -- idem-worker --guard unique | count-effects >"$BATS_TEST_TMPDIR/run.tsv"
	r=$(mkrecord -k "$key" <"$BATS_TEST_TMPDIR/run.tsv")
	as_format_2 "$r" >"$r.old"
	mv "$r.old" "$r"
	grep -q '^record: 2$' "$r"
	run ! grep -q 'calls:' "$r"
	run ! grep -qE '^ *external:' "$r"
	resign "$r"
	run -0 verify-record "$r"
	# its verdict is still checked, on the four totals it has
	sed -i 's/^verdict: "pass"$/verdict: "fail"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"verdict: the record says fail, its counts say pass"* ]]
}

@test "the audit lists the newest record as stale once the seed names a queue of another kind" {
	r=$(record)
	run -0 verify-record --history
	sed -i 's/^queue: rehearsal_invoice_line$/queue: { kind: pg-boss, name: rehearsal_invoice_line }/' seed.yaml
	grep -q '^queue: { kind: pg-boss' seed.yaml
	run -1 verify-record --history
	[[ "$output" == *"record  $r"*" stale  the seed's queue kind is pg-boss, the record rehearsed idem"* ]]
}

@test "verify-record --history -d with a database it cannot reach fails with exit 3 before it reports" {
	record >/dev/null
	run --separate-stderr verify-record --history -t -d "host=$BATS_TEST_TMPDIR port=1"
	[ "$status" -eq 3 ]
	assert_equal "$output" ""
	[[ "$stderr" == "verify-record: connecting to the database: "* ]]
	# the commits alone need no database
	run -0 verify-record --history -c -d "host=$BATS_TEST_TMPDIR port=1"
}

@test "the record shows the external call, its counts, and each call beside the attempt that made it" {
	commit_charge_seed
	charge_run >"$BATS_TEST_TMPDIR/charge.tsv"
	r=$(mkrecord -k "$key" -c <"$BATS_TEST_TMPDIR/charge.tsv")
	run -0 verify-record "$r"
	grep -q '^record: 10$' "$r"
	grep -q '^verdict: "pass"$' "$r"
	assert_equal "$(sed -n '/^external:$/,/^jobs:/p' "$r")" 'external:
  name: "payment charge"
  key:
  - "invoice_id"
  - "line_no"
  honours_idempotency_key: true
  pending_table: "demo.pending_calls"
  pending_owner: "owner"
  pending_key:
  - "key"
  pending_state: "status"
  pending_settled:
  - "done"
  - "reconciled"
jobs: 3'
	sed -n '/^  expected:$/,/^  totals:$/p' "$r" | grep -q '^    external: 3$'
	# each attempt with the calls its process made from its delivery to the next
	assert_equal "$(awk '/^evidence:$/ { e = 1; next } /^[a-z]/ { e = 0 } !e { next }
		/^- job: / { if (k) print k ":" v; k = $3; v = "" } /^  msg_id: |^  attempt: / { k = k " " $2 }
		/^    answer: / { v = v " " $2 } END { print k ":" v }' "$r")" '"job-0001" 9001 1: "killed"
"job-0002" 9002 1: "error" "ok"
"job-0003" 9003 1: "timeout"
"job-0003" 9004 1: "ok"
"job-0001" 9001 2: "replayed"
"job-0003" 9003 2: "replayed"'
	# every call in the flat list, the one of no worker's process with no attempt
	assert_equal "$(sed -n '/^calls:$/,/^counts:$/p' "$r" | grep -c '^- at: ')" 8
	assert_equal "$(sed -n '/^calls:$/,/^counts:$/p' "$r" | sed -n '2,6p')" '- at: "2026-12-01T10:00:01.050000Z"
  worker: -1
  pid: 0
  job: null
  attempt: null'
	# the killed call's key, owned in the table of pending calls; one key
	# per business key
	assert_equal "$(grep -A 4 '^- name: "pending_calls_owned"$' "$r" | sed -n '2,5p')" '  value: "1.000"
  numerator: 1
  denominator: 1
  unit: "killed calls'"'"' business keys with a row of demo.pending_calls whose owner is billing-oncall"'
	grep -A 1 '^- name: "external_keys_per_business_key"$' "$r" | grep -qx '  value: "1.000"'
	# the handoff
	md="${r%.yaml}.md"
	grep -qF '| external call | payment charge, key `invoice_id` `line_no` (fields of the call'"'"'s JSON body); the vendor honours `Idempotency-Key` |' "$md"
	grep -q '^| external | [^|]* | 3 | 3 |$' "$md"
	grep -q '^| external_duplicates | [^|]* | 0 | 0 |$' "$md"
	grep -q '^## External calls$' "$md"
	# a paragraph, however its lines are folded
	paste -sd ' ' "$md" | grep -qF 'A call the worker left pending is a row of `demo.pending_calls`, whose `owner` names who reconciles it; the seed names billing-oncall.'
	# calls at their time from the run's start, the first publish
	grep -qF '| 1100 ms | `job-0001` | 1 | 101 | POST `/v1/charges` | `job-0001` | `["inv-1001",1]` | 0 | killed | yes | ch_1 |' "$md"
	grep -qF '| 1050 ms |  |  | 0 | POST `/v1/charges` |  | none in the body | 200 | ok | no |  |' "$md"
	# both vendor faults and the kill during the call were exercised
	run ! grep -q 'a vendor error\|a vendor timeout\|a kill at external-call' <(sed -n '/^  not_exercised:$/,$p' "$r")
	git log -1 --format=%s | grep -q '^record: charge pass (effects 3 of 3 expected, duplicates 0, external calls 3 of 3)$'
}

@test "a second charge fails the record and is named in the handoff; verify-record agrees" {
	commit_charge_seed
	run --separate-stderr charge_run "$(call 02.150000 1 102 job-0001 '["inv-1001",1]' 200 ok yes ch_4)"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *'count-effects: external: duplicate effect for business key ["inv-1001",1]: 2 calls took effect, expected 1'* ]]
	printf '%s\n' "$output" >"$BATS_TEST_TMPDIR/charged-twice.tsv"
	r=$(mkrecord -k "$key" -c <"$BATS_TEST_TMPDIR/charged-twice.tsv")
	grep -q '^verdict: "fail"$' "$r"
	md="${r%.yaml}.md"
	grep -q '^\*\*The counts differ from what the seed expected.\*\*$' "$md"
	grep -q '^| external | [^|]* | 3 | 4 |$' "$md"
	grep -qF -- '- `["inv-1001",1]`: 2 calls took effect, expected 1' "$md"
	git log -1 --format=%s | grep -q '^record: charge fail (effects 3 of 3 expected, duplicates 0, external calls 4 of 3)$'
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
	# the external totals are the verdict's: a pass claimed over them is refused
	sed -i 's/^verdict: "fail"$/verdict: "pass"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"verdict: the record says pass, its counts say fail"* ]]
}

@test "verify-record adds up the external totals from the count rows and the calls" {
	commit_charge_seed
	charge_run >"$BATS_TEST_TMPDIR/charge.tsv"
	r=$(mkrecord -k "$key" <"$BATS_TEST_TMPDIR/charge.tsv")
	cp "$r" "$BATS_TEST_TMPDIR/good.yaml"
	# a total row of the external calls that does not add up, summary and all
	awk '/^    external:$/ { t = 1 } t && /observed: 3$/ { sub(/3$/, "4"); t = 0 }
		/scope: "total"/ { s = 1 } s && /key: "external"$/ { e = 1 } e && /observed: 3$/ { sub(/3$/, "4"); e = 0; s = 0 }
		{ print }' "$BATS_TEST_TMPDIR/good.yaml" >"$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"counts: total external is 4, the count rows add up to 3"* ]]
	[[ "$output" != *"totals summary"* ]]
	# a call that took effect, said not to have
	awk '/^calls:$/ { c = 1 } c && /^  effect: "yes"$/ { sub(/yes/, "no"); c = 0 } { print }' \
		"$BATS_TEST_TMPDIR/good.yaml" >"$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"calls: 2 took effect, the count rows say 3"* ]]
}

# The run of tests/answers-helper.bash, its seed committed with the vendor
# honouring keys ($1 true, the default) or not, as a file.
answers_fixture() {
	commit_answers_seed "${1:-true}"
	answers_stream "${2:-}" >"$BATS_TEST_TMPDIR/answers.tsv"
	answers="$BATS_TEST_TMPDIR/answers.tsv"
}

@test "a business key whose calls changed their key fails the record against a vendor that honours keys, charged once" {
	answers_fixture true
	r=$(mkrecord -k "$key" -c <"$answers")
	grep -q '^record: 10$' "$r"
	grep -q '^verdict: "fail"$' "$r"
	# the counts pass: one charge each
	grep -q '^    external_duplicates:$' "$r"
	run ! grep -q '^\*\*The counts differ' "${r%.yaml}.md"
	assert_equal "$(sed -n '/^rekeyed:$/,/^pending_calls:/p' "$r")" 'rekeyed:
- business_key: "[\"inv-1004\",1]"
  keys:
  - "job-0004-1"
  - "job-0004-2"
  calls:
  - 4
  - 6
  effects: 1
pending_calls:'
	md="${r%.yaml}.md"
	why='business key ["inv-1004",1] changed its Idempotency-Key across calls 4, 6 (keys job-0004-1, job-0004-2; 1 took effect), against a vendor that honours the key'
	assert_equal "$(sed -n '1,/^$/p' "$md" | paste -sd ' ' | sed 's/ $//')" "# Rehearsal answers: fail: $why"
	grep -qxF '**A business key changed its `Idempotency-Key` against a vendor that honours it, which fails the verdict.**' "$md"
	paste -sd ' ' "$md" | tr -s ' ' | grep -qF -- '- `["inv-1004",1]`: calls 4, 6 sent the keys `job-0004-1`, `job-0004-2`; 1 took effect; **this fails the verdict: the vendor honours the key, and a retry under a new one is not protected by it**'
	# the keys each attempt sent
	grep -qxF '| `job-0004` | 1 | 4 | `job-0004-1` | error | 155 ms | no |' "$md"
	grep -qxF '| `job-0004` | 2 | 6 | `job-0004-2` | ok | 621 ms | yes |' "$md"
	git log -1 --format=%s | grep -q '^record: answers fail (effects 4 of 4 expected, duplicates 0, external calls 4 of 4)$'
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
	# a pass claimed over it is refused
	cp "$r" "$BATS_TEST_TMPDIR/good.yaml"
	sed -i 's/^verdict: "fail"$/verdict: "pass"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: verdict: the record says pass, but $why"* ]]
	# and so is the key taken out of the list, or its effects changed
	awk '/^rekeyed:$/ { print "rekeyed: []"; skip = 1; next } skip && /^[- ]/ { next } { skip = 0; print }' \
		"$BATS_TEST_TMPDIR/good.yaml" >"$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: rekeyed: business key [\"inv-1004\",1] sent 2 Idempotency-Keys, and the record does not list it"* ]]
	[[ "$output" == *"$r: verdict: the record says fail, its counts say pass"* ]]
	sed 's/^  effects: 1$/  effects: 2/' "$BATS_TEST_TMPDIR/good.yaml" >"$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: rekeyed: business key [\"inv-1004\",1]: 2 took effect, its calls say 1"* ]]
}

@test "the same changed key against a vendor that does not honour keys, charged once, is shown and passes" {
	answers_fixture false
	r=$(mkrecord -k "$key" -c <"$answers")
	grep -q '^verdict: "pass"$' "$r"
	grep -q '^  honours_idempotency_key: false$' "$r"
	sed -n '/^rekeyed:$/,/^pending_calls:/p' "$r" | grep -qx '  - "job-0004-2"'
	md="${r%.yaml}.md"
	grep -q '^# Rehearsal answers: pass$' "$md"
	run ! grep -q 'which fails the verdict' "$md"
	paste -sd ' ' "$md" | tr -s ' ' | grep -qF -- '- `["inv-1004",1]`: calls 4, 6 sent the keys `job-0004-1`, `job-0004-2`; 1 took effect; not a finding by itself, since the vendor does not honour the key: a second charge fails as a duplicate'
	run -0 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict pass"
}

@test "lost and late answers show under their attempts with when they came; the keys forgotten are listed" {
	answers_fixture true
	r=$(mkrecord -k "$key" <"$answers")
	# each call under its attempt with its number and the time of its answer
	assert_equal "$(awk '/^evidence:$/ { e = 1; next } /^[a-z]/ { e = 0 } !e { next }
		/^- job: / { job = $3 } /^  attempt: / { attempt = $2 }
		/^    answer: / { answer = $2 } /^    id: / { id = $2 }
		/^    answered_at: / { print job, attempt, id, answer, $2 }' "$r")" '"job-0001" 1 1 "lost" null
"job-0002" 1 2 "late" "2026-12-03T10:00:03.152000Z"
"job-0003" 1 3 "killed" null
"job-0004" 1 4 "error" "2026-12-03T10:00:00.154500Z"
"job-0001" 2 5 "ok" "2026-12-03T10:00:00.611000Z"
"job-0004" 2 6 "ok" "2026-12-03T10:00:00.621000Z"'
	assert_equal "$(sed -n '/^forgotten_keys:$/,/^rekeyed:/p' "$r")" 'forgotten_keys:
- at: "2026-12-03T10:00:00.460000Z"
  business_key: "[\"inv-1003\",1]"
  idempotency_key: "job-0003"
  first_call: 3
  window_ms: 86400000
rekeyed:'
	assert_equal "$(grep '^  vendor_ms: ' "$r" | tr '\n' ' ')" \
		'  vendor_ms: null   vendor_ms: 3000   vendor_ms: 86400000   vendor_ms: null '
	md="${r%.yaml}.md"
	grep -qxF '| `job-0001` | 1 | 1 | `job-0001` | lost | none | yes |' "$md"
	grep -qxF '| `job-0002` | 1 | 2 | `job-0002` | late | 3152 ms | yes |' "$md"
	grep -qxF '| `job-0001` | 2 | 5 | none | ok | 611 ms | no |' "$md"
	grep -qxF '| 460 ms | `["inv-1003",1]` | `job-0003` | 3 | 24 h |' "$md"
	# the late answer on the timeline, where it came
	grep -qx '    external call POST /v1/charges 0 lost :milestone, 151, 151' "$md"
	grep -qx '    LATE answer to call 2 :milestone, 3152, 3152' "$md"
	run -1 verify-record "$r"
}

@test "a pending check that failed fails the record, named in the handoff; verify-record agrees" {
	answers_fixture false 's/^\(pending_call	.*	\)yes	1	billing-oncall	owned$/\1yes	0	\\N	missing/'
	grep -q '	yes	0	\\N	missing$' "$answers"
	r=$(mkrecord -k "$key" <"$answers")
	grep -q '^verdict: "fail"$' "$r"
	md="${r%.yaml}.md"
	why='the killed call of business key ["inv-1003",1] left no row in demo.pending_calls'
	assert_equal "$(sed -n '1,/^$/p' "$md" | paste -sd ' ' | sed 's/ $//')" "# Rehearsal answers: fail: $why"
	grep -qxF '**A pending check failed, which fails the verdict.**' "$md"
	grep -qxF '| `["inv-1003",1]` | yes | 0 |  | **missing: fails the verdict** |' "$md"
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
	sed -i 's/^verdict: "fail"$/verdict: "pass"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: verdict: the record says pass, but $why"* ]]
	# a row left open by a key that was not killed fails it too
	rm records/*-answers.*
	answers_row pending_call '["inv-1002",1]' no 1 billing-oncall open >>"$answers"
	r=$(mkrecord -k "$key" <"$answers")
	run -1 verify-record "$r"
	grep -q '^verdict: "fail"$' "$r"
	grep -qxF '| `["inv-1002",1]` | no | 1 | billing-oncall | **open: fails the verdict** |' "${r%.yaml}.md"
}

@test "--rerun compares which keys changed and each pending check, not the keys themselves" {
	answers_fixture false
	# the rerun's worker makes its keys anew: other keys, as many
	sed 's/job-0004-1/token-a/g; s/job-0004-2/token-b/g' "$answers" >"$BATS_TEST_TMPDIR/again.tsv"
	r=$(mkrecord -k "$key" -c -r "cat $BATS_TEST_TMPDIR/again.tsv" <"$answers")
	run -0 verify-record --rerun "$r"
	[[ "$output" == *"$r: rerun reproduces the path"* ]]
	# one whose retry kept its key, and whose pending row went missing
	answers_stream 's/job-0004-2/job-0004-1/; /^rekeyed	/d; s/	billing-oncall	owned$/	billing-oncall	missing/' \
		>"$BATS_TEST_TMPDIR/other.tsv"
	r=$(mkrecord -k "$key" -c -r "cat $BATS_TEST_TMPDIR/other.tsv" <"$answers")
	run -1 verify-record --rerun "$r"
	[[ "$output" == *"$r: rerun reproduces the counts"* ]]
	[[ "$output" == *"$r: [\"inv-1004\",1]: the record's calls sent 2 Idempotency-Keys, the rerun's one"* ]]
	[[ "$output" == *"$r: [\"inv-1003\",1]: pending check owned in the record, missing in the rerun"* ]]
	[[ "$output" != *"rerun reproduces the path"* ]]
}

# The run's stream with a missed row: the race of the two workers was not
# reached before kill-at's deadline.
race_missed() {
	cat "$RUN"
	printf 'missed\trace\ttwo-workers-race\t["inv-1005",1]\t\\N\tbefore-write\n'
}

# The run's stream with each kill row made a missed row: the run reached
# none of its kill points, as kill-at writes at its deadline.
kills_missed() {
	awk -F '\t' -v OFS='\t' '$1 == "kill" { print "missed", "kill", $2, $3, $4, $5; next } { print }' "$RUN"
}

@test "--rerun that reaches none of the kill points names each one, and fails" {
	r=$(mkrecord -k "$key" -c -r "awk -F '\t' '\$1 != \"kill\"' \"\$RUN\"" <"$RUN")
	run -1 verify-record --rerun "$r"
	[[ "$output" == *"rerun reproduces the counts"* ]]
	awk -F '\t' '$1 == "kill" { print $3 ": record killed at " $5 " on attempt " $4 ", rerun never reached it" }' "$RUN" >"$BATS_TEST_TMPDIR/want"
	[ -s "$BATS_TEST_TMPDIR/want" ]
	while read -r line; do
		[[ "$output" == *"$r: $line"* ]]
	done <"$BATS_TEST_TMPDIR/want"
	[[ "$output" != *"rerun reproduces the path"* ]]
}

@test "--rerun of a worker that dies before its first step names each kill point and race it never reached" {
	# The rerun runs the real pipeline; its worker exits before it reads
	# a message, every time kill-at starts it, until the deadline.
	crash="idem-worker --setup -g unique && seed-gen seed.yaml | count-effects --before | dup-publish | kill-at -D 3s -- sh -c 'exit 3' | count-effects"
	r=$(mkrecord -k "$key" -c -r "$crash" <"$RUN")
	run -1 verify-record --rerun "$r"
	[[ "$output" != *"rerun reproduces the path"* ]]
	awk -F '\t' '$1 == "kill" { print $3 ": record killed at " $5 " on attempt " $4 ", rerun never reached it" }' "$RUN" >"$BATS_TEST_TMPDIR/want"
	[ -s "$BATS_TEST_TMPDIR/want" ]
	while read -r line; do
		[[ "$output" == *"$r: $line"* ]]
	done <"$BATS_TEST_TMPDIR/want"
	race=$(awk -F '\t' '$1 == "job" && $6 == "two-workers-race" { print $2; exit }' "$RUN")
	[ -n "$race" ]
	[[ "$output" == *"$r: $race: "* ]]
}

@test "--rerun whose stream says the kill points were missed names each one" {
	kills_missed >"$BATS_TEST_TMPDIR/missed.tsv"
	r=$(mkrecord -k "$key" -c -r "cat $BATS_TEST_TMPDIR/missed.tsv" <"$RUN")
	run -1 verify-record --rerun "$r"
	n=$(grep -c '^kill	' "$RUN")
	[ "$(grep -c 'rerun never reached it$' <<<"$output")" -eq "$n" ]
}

@test "--rerun whose race goes the other way names the job and both branches" {
	job=$(awk -F '\t' '$1 == "job" && $6 == "two-workers-race" { print $2 }' "$RUN")
	[ -n "$job" ]
	b1=$(awk -F '\t' -v job="$job" '$1 == "attempt" && $2 == job { print $10; exit }' "$RUN")
	b2=$(awk -F '\t' -v job="$job" '$1 == "attempt" && $2 == job && ++n == 2 { print $10; exit }' "$RUN")
	[ "$b1" != "$b2" ]
	# the first two deliveries of the raced job, their branches swapped
	awk -F '\t' -v OFS='\t' -v job="$job" -v b1="$b1" -v b2="$b2" \
		'$1 == "attempt" && $2 == job && n < 2 { $10 = n++ == 0 ? b2 : b1 } { print }' \
		"$RUN" >"$BATS_TEST_TMPDIR/other-way.tsv"
	r=$(mkrecord -k "$key" -c -r "cat $BATS_TEST_TMPDIR/other-way.tsv" <"$RUN")
	run -1 verify-record --rerun "$r"
	[[ "$output" == *"rerun reproduces the counts"* ]]
	[[ "$output" == *"$r: $job: delivery 1: the record attempt 1 acked, branch $b1, the rerun attempt 1 acked, branch $b2"* ]]
	[[ "$output" == *"$r: $job: delivery 2: the record attempt 1 acked, branch $b2, the rerun attempt 1 acked, branch $b1"* ]]
}

@test "a run that missed a kill point is recorded as a failure that lists it; a record claiming pass is refused" {
	race_missed >"$BATS_TEST_TMPDIR/one-missed.tsv"
	r=$(mkrecord -k "$key" <"$BATS_TEST_TMPDIR/one-missed.tsv")
	grep -q '^verdict: "fail"$' "$r"
	grep -A5 '^missed:' "$r" | tr -d '\n' | grep -qF -- '- what: "race"  scenario: "two-workers-race"  job: "[\"inv-1005\",1]"  attempt: null  step: "before-write"'
	grep -qF 'Not reached by the run, so the verdict is fail:' "${r%.yaml}.md"
	grep -qF -- '- race of two-workers-race on `["inv-1005",1]`, at `before-write`' "${r%.yaml}.md"
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
	sed -i 's/^verdict: "fail"$/verdict: "pass"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: verdict: the record says pass, but the run missed 1 kill points, races or stalls"* ]]
}

# The stall fixture of the handoff tests (tests/fixtures/handoff/stall.tsv),
# its seed committed as stall.yaml: job-0001 held at after-commit until its
# redelivery was acked, job-0002 at before-commit until its redelivery
# waited on its lock.
stall_fixture() {
	cp "$BATS_TEST_DIRNAME/fixtures/handoff/stall/stall.yaml" stall.yaml
	git add stall.yaml
	git commit -q -m "the stall seed"
	stall="$BATS_TEST_DIRNAME/fixtures/handoff/stall.tsv"
}

@test "a record of a stall verifies; its stalls, its scenarios' until steps and the leases ended are in it" {
	stall_fixture
	r=$(mkrecord -k "$key" -c <"$stall")
	run -0 verify-record "$r"
	grep -q '^record: 10$' "$r"
	assert_equal "$(sed -n '/^stalls:$/,/^missed:/p' "$r" | head -n 11)" 'stalls:
- scenario: "stall-until-commit"
  job: "job-0002"
  attempt: 1
  step: "before-commit"
  pid: 203
  stalled_at: "2026-12-03T09:30:00.115000Z"
  released_at: "2026-12-03T09:30:00.446000Z"
  release: "blocked"
  observed: "socket"
- scenario: "stall-after-commit"'
	grep -qx '  until: "after-commit"' "$r"
	assert_equal "$(grep -A2 '^  lease_ended:$' "$r" | tr -d '\n')" \
		'  lease_ended:    at: "2026-12-03T09:30:00.430000Z"    why: "stall"--  lease_ended:    at: "2026-12-03T09:30:00.420000Z"    why: "stall"'
	assert_equal "$(grep -c '^  lease_ended: null$' "$r")" 3
	# as format 6 it still verifies, and audits
	as_format_6 "$r" >"$r.old"
	mv "$r.old" "$r"
	run ! grep -q '^stalls:\|^ *lease_ended:\|^ *until:' "$r"
	resign "$r"
	run -0 verify-record "$r"
}

@test "a stall never reached, or one whose bound ran out, fails the record; a record claiming pass is refused" {
	stall_fixture
	awk -F '\t' -v OFS='\t' '$1 == "stall" && $3 == "job-0002" { print "missed", "stall", $2, $3, $4, $5; next } { print }' \
		"$stall" >"$BATS_TEST_TMPDIR/missed.tsv"
	r=$(mkrecord -k "$key" <"$BATS_TEST_TMPDIR/missed.tsv")
	grep -q '^verdict: "fail"$' "$r"
	head -n 2 "${r%.yaml}.md" | tr '\n' ' ' | grep -qF '# Rehearsal invoice-line-stall: fail: stall at before-commit of job job-0002 never reached: attempt 1 (scenario stall-until-commit)'
	grep -qF -- '- stall of stall-until-commit on `job-0002`, attempt 1, at `before-commit`' "${r%.yaml}.md"
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
	sed -i 's/^verdict: "fail"$/verdict: "pass"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: verdict: the record says pass, but the run missed 1 kill points, races or stalls"* ]]
	# a stall whose bounded wait ran out
	sed 's/^\(stall\tstall-after-commit\t.*\t\)[^\t]*\tacked\tsocket$/\1\\N\tbound\tsocket/' "$stall" |
		mkrecord -k "$key" >"$BATS_TEST_TMPDIR/name"
	r=$(cat "$BATS_TEST_TMPDIR/name")
	grep -q '^verdict: "fail"$' "$r"
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
	sed -i 's/^verdict: "fail"$/verdict: "pass"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: verdict: the record says pass, but stall at after-commit of job job-0001, attempt 1: the bounded wait ran out before the redelivered attempt was acked (scenario stall-after-commit)"* ]]
}

@test "--rerun compares the stalls: one released otherwise, one never reached, each named" {
	stall_fixture
	r=$(mkrecord -k "$key" -c -r "cat $stall" <"$stall")
	run -0 verify-record --rerun "$r"
	[[ "$output" == *"rerun reproduces the path"* ]]
	awk -F '\t' -v OFS='\t' '$1 == "stall" && $3 == "job-0001" { $9 = "until" }
		$1 == "stall" && $3 == "job-0002" { print "missed", "stall", $2, $3, $4, $5; next } { print }' \
		"$stall" >"$BATS_TEST_TMPDIR/other.tsv"
	r=$(mkrecord -k "$key" -c -r "cat $BATS_TEST_TMPDIR/other.tsv" <"$stall")
	run -1 verify-record --rerun "$r"
	[[ "$output" == *"rerun reproduces the counts"* ]]
	[[ "$output" == *"$r: job-0001: stalled at after-commit on attempt 1: the record released it on acked, the rerun on until"* ]]
	[[ "$output" == *"$r: job-0002: record stalled at before-commit on attempt 1, rerun never reached it"* ]]
	[[ "$output" != *"rerun reproduces the path"* ]]
}

# The run's stream, its seed, expect, external, scenario and job rows
# made again by seed-gen from seed.yaml as it is now.
with_seed() {
	seed-gen seed.yaml
	awk -F '\t' '$1 !~ /^(#idem-tsv|seed|expect|external|scenario|job)$/' "${1:-$RUN}"
}

@test "the audit fails the current record of a rehearsal whose verdict is fail, at the verdict's line" {
	race_missed >"$BATS_TEST_TMPDIR/missed.tsv"
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$BATS_TEST_TMPDIR/missed.tsv")
	line=$(grep -n '^verdict:' "$r" | cut -d : -f 1)
	run -1 verify-record --history -g
	[[ "$output" == *"::error file=$r,line=$line::record FAIL: verdict fail: the current record of invoice-line fails"* ]]
	# the reviewer's one-record check shows the verdict, and fails on it
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
	# a newer passing record makes the failing one history
	record >/dev/null
	run -0 verify-record --history
}

@test "a seed's expected failure is ok when it fails, and an error when it passes" {
	sed -i 's/^expect: { effects: 6, \(.*\) }$/expect: { effects: 6, \1, verdict: fail }/' seed.yaml
	grep -q 'verdict: fail }$' seed.yaml
	git commit -q -am "a deliberately failing example"
	race_missed >"$BATS_TEST_TMPDIR/missed.tsv"
	with_seed "$BATS_TEST_TMPDIR/missed.tsv" >"$BATS_TEST_TMPDIR/fails.tsv"
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$BATS_TEST_TMPDIR/fails.tsv")
	grep -q '^expected_verdict: "fail"$' "$r"
	run -0 verify-record --history
	[[ "$output" == *"record  $r"*" ok     fail as the seed expects, signed by eng@example.org"* ]]
	run -0 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail, as the seed expects"
	with_seed >"$BATS_TEST_TMPDIR/passes.tsv"
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$BATS_TEST_TMPDIR/passes.tsv")
	grep -q '^verdict: "pass"$' "$r"
	line=$(grep -n '^verdict:' "$r" | cut -d : -f 1)
	run -1 verify-record --history --format github
	[[ "$output" == *"::error file=$r,line=$line::record FAIL: verdict pass, but the seed expects this example to fail"* ]]
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict pass, but the seed expects fail"
}

@test "a pass with no enforced guard is a warning at the guards' line" {
	r=$(mkrecord -k "$key" <"$RUN")
	sed -i 's/^  result: "enforced"$/  result: "not-enforced"/' "$r"
	grep -q '^  result: "not-enforced"$' "$r"
	resign "$r"
	git add records && signed_commit -m "record"
	line=$(grep -n '^guards:' "$r" | cut -d : -f 1)
	run -1 verify-record --history -g
	[[ "$output" == *"::warning file=$r,line=$line::record warn: verdict pass with no enforced guard"* ]]
}

@test "the newest record is stale by the seed's worker image alone, named" {
	record >/dev/null
	run -0 verify-record --history
	sed -i 's|^  image: .*$|  image: "registry.example/billing-worker@sha256:0000"|' seed.yaml
	run -1 verify-record --history
	[[ "$output" == *"stale  the seed's worker image is registry.example/billing-worker@sha256:0000, the record rehearsed registry.example/billing-worker@sha256:5f0c"* ]]
	[[ "$output" != *"worker command"* && "$output" != *"key columns"* ]]
}

@test "the newest record is stale by the seed's key columns alone, named" {
	record >/dev/null
	sed -i '0,/^  key: \[invoice_id, line_no\]$/s//  key: [invoice_id]/' seed.yaml
	[ "$(grep -c '^  key: \[invoice_id\]$' seed.yaml)" -eq 1 ]
	run -1 verify-record --history
	[[ "$output" == *'stale  the seed'"'"'s key columns are ["invoice_id"], the record rehearsed ["invoice_id","line_no"]'* ]]
	[[ "$output" != *"worker image"* && "$output" != *"worker command"* ]]
}

@test "the newest record is stale by the seed's worker command alone, and by every change at once, each named" {
	record >/dev/null
	sed -i 's|^  command: "idem-worker --guard unique"$|  command: "idem-worker --guard none"|' seed.yaml
	run -1 verify-record --history
	[[ "$output" == *"stale  the seed's worker command is idem-worker --guard none, the record rehearsed idem-worker --guard unique"* ]]
	[[ "$output" != *"worker image"* && "$output" != *"key columns"* ]]
	sed -i 's|^  image: .*$|  image: "other"|; 0,/^  key: \[invoice_id, line_no\]$/s//  key: [invoice_id]/' seed.yaml
	run -1 verify-record --history
	[[ "$output" == *"worker image is other"*"; the seed's worker command is"*"; the seed's key columns are"* ]]
}

@test "the newest record is stale by the seed's worker version, retry policy or key scope alone, each named" {
	record >/dev/null
	cp seed.yaml "$BATS_TEST_TMPDIR/seed.yaml"
	for change in 's|^  version: "1.4.2"$|  version: "1.5.0"|' \
		's|^retry: { visibility_timeout: \([0-9a-z]*\), max_attempts: 5 }$|retry: { visibility_timeout: \1, max_attempts: 7 }|' \
		's|^  key_scope: business$|  key_scope: job|'; do
		cp "$BATS_TEST_TMPDIR/seed.yaml" seed.yaml
		sed -i "$change" seed.yaml
		run ! cmp -s seed.yaml "$BATS_TEST_TMPDIR/seed.yaml"
		run -1 verify-record --history
		stale=$(grep -o 'stale  .*' <<<"$output")
		case $change in
		*version*) assert_equal "$stale" "stale  the seed's worker version is 1.5.0, the record rehearsed 1.4.2" ;;
		*retry*) [[ "$stale" == "stale  the seed's retry policy ("*" ms, 7 attempts) is not the one rehearsed" ]] ;;
		*key_scope*) assert_equal "$stale" "stale  the seed's key scope is job, the record rehearsed business" ;;
		esac
	done
	cp "$BATS_TEST_TMPDIR/seed.yaml" seed.yaml
	run -0 verify-record --history
}

# The run's stream with its worker row replaced by one of the words given.
with_worker() {
	local argv
	argv=$(printf '%s\n' "$@" | jq -Rsc 'split("\n")[:-1]')
	awk -F '\t' -v row="$(row worker "$argv" '\N' '\N' '\N' '\N')" \
		'$1 == "worker" { print row; next } { print }' "$RUN"
}

@test "the record shows the worker as declared and as it ran, with the hashes of its file" {
	r=$(record)
	run -0 verify-record "$r"
	grep -q '^verdict: "pass"$' "$r"
	exe=$(command -v idem-worker)
	assert_equal "$(sed -n '/^worker:$/,/^retry:$/p' "$r" | grep -v '^  image: \|^  version: ')" "worker:
  image_observed: false
  command: \"idem-worker --guard unique\"
  observed:
    argv:
    - \"idem-worker\"
    - \"--guard\"
    - \"unique\"
    executable: \"$exe\"
    executable_sha256: \"$(sha256sum "$exe" | cut -d ' ' -f 1)\"
    script: null
    script_sha256: null
    as_declared: true
retry:"
	md="${r%.yaml}.md"
	grep -qF "| worker as it ran | \`idem-worker\` \`--guard\` \`unique\` (\`$exe\`, SHA-256 \`$(sha256sum "$exe" | cut -d ' ' -f 1)\`) |" "$md"
	! grep -q 'not the worker the ticket names' "$md"
}

@test "a worker other than the declared one fails the record, which says so" {
	with_worker idem-worker --guard check-then-insert >"$BATS_TEST_TMPDIR/other.tsv"
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$BATS_TEST_TMPDIR/other.tsv")
	grep -q '^verdict: "fail"$' "$r"
	grep -q '^    as_declared: false$' "$r"
	grep -q '^    note: "not the worker the ticket names"$' "$r"
	grep -qF '**The worker that ran is not the worker the ticket names.**' "${r%.yaml}.md"
	grep -qx '  - "the worker command: declared `idem-worker --guard unique`, another ran (see worker.observed)"' "$r"
	# the same words, spaced otherwise, are the declared worker
	with_worker idem-worker --guard unique >"$BATS_TEST_TMPDIR/same.tsv"
	sed -i 's/^\(seed\t.*\)idem-worker --guard unique/\1idem-worker   --guard unique/' "$BATS_TEST_TMPDIR/same.tsv"
	grep -q 'idem-worker   --guard unique' "$BATS_TEST_TMPDIR/same.tsv"
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$BATS_TEST_TMPDIR/same.tsv")
	grep -q '^verdict: "pass"$' "$r"
	grep -q '^    as_declared: true$' "$r"
	! grep -q 'the worker command: ' "$r"
}

@test "a seed that declares no worker command takes the worker that ran" {
	commit_charge_seed
	charge_run "$(row worker '["some-worker","-x"]' '\N' '\N' '\N' '\N')" >"$BATS_TEST_TMPDIR/charge.tsv"
	r=$(mkrecord -k "$key" -c <"$BATS_TEST_TMPDIR/charge.tsv")
	run -0 verify-record "$r"
	grep -q '^verdict: "pass"$' "$r"
	grep -q '^    as_declared: null$' "$r"
	! grep -q 'note:' "$r"
}

# outbox_run KEY MESSAGE: the seed with the outbox worker and its guard
# declared on demo.outbox over KEY, committed with MESSAGE, run through the
# pipeline into $BATS_TEST_TMPDIR/outbox.tsv.
outbox_run() {
	sed 's/idem-worker --guard unique/idem-worker --guard outbox/' seed.yaml >outbox.yaml
	echo "guard: { table: demo.outbox, key: [$1] }" >>outbox.yaml
	git add outbox.yaml
	git commit -q -m "$2"
	queue_reset
	idem-worker --setup -g outbox
	seed-gen outbox.yaml | count-effects --before | dup-publish | kill-at | count-effects >"$BATS_TEST_TMPDIR/outbox.tsv"
}

@test "the record and the handoff show the guard of each table: none on the effect table, the declared one enforced" {
	outbox_run key "the outbox seed"
	r=$(mkrecord -k "$key" -c -r "seed-gen outbox.yaml | ..." <"$BATS_TEST_TMPDIR/outbox.tsv")
	run -0 verify-record "$r"
	grep -q '^verdict: "pass"$' "$r"
	assert_equal "$(sed -n '/^guards:$/,/^kill_points:/p' "$r" | grep -v '^ *sql: \|^    message: ')" 'guards:
- kind: "none"
  name: null
  definition: "none: best effort"
  flags: null
  table: null
- kind: "constraint"
  name: "outbox_pkey"
  definition: "PRIMARY KEY (key)"
  flags: null
  table: "demo.outbox"
probe:
  result: "not-enforced"
  sqlstate: null
  message: "the copy went in: the database does not enforce one row per key"
declared_guard:
  table: "demo.outbox"
  key:
  - "key"
  probe:
    result: "enforced"
    sqlstate: "23505"
kill_points:'
	grep -qF '    message: "ERROR:  duplicate key value violates unique constraint \"outbox_pkey\"; DETAIL:  Key (key)=' "$r"
	md="${r%.yaml}.md"
	grep -qF -- '- constraint `outbox_pkey` on `demo.outbox`: `PRIMARY KEY (key)`' "$md"
	grep -qF -- '- probe of the declared guard on `demo.outbox` (key `key` declared in the seed): **enforced** (SQLSTATE 23505)' "$md"
}

@test "a guard the seed declares where there is none: the record and the handoff say it is missing there" {
	# the outbox's key is its column key; job_id is not unique there
	outbox_run job_id "the outbox seed, its guard declared on the wrong key"
	r=$(mkrecord -k "$key" -r "seed-gen outbox.yaml | ..." <"$BATS_TEST_TMPDIR/outbox.tsv")
	run -0 verify-record "$r"
	assert_equal "$(sed -n '/^guards:$/,/^probe:$/p' "$r")" 'guards:
- kind: "none"
  name: null
  definition: "none: best effort"
  flags: null
  table: null
- kind: "none"
  name: null
  definition: "none: not found where the seed declares the guard: no unique constraint or index over its key"
  flags: null
  table: "demo.outbox"
probe:'
	# its probe meets the outbox's primary key, which is not over the declared key
	grep -A8 '^declared_guard:$' "$r" | grep -qx '    result: "inconclusive"'
	md="${r%.yaml}.md"
	grep -qxF -- '- on `demo.outbox`: none: not found where the seed declares the guard: no unique constraint or index over its key' "$md"
	grep -qF -- '- probe of the declared guard on `demo.outbox` (key `job_id` declared in the seed): **inconclusive** (SQLSTATE 23505)' "$md"
	# declared on a column the table does not have
	outbox_run job "the guard declared on a column that is not there"
	r=$(mkrecord -k "$key" -o other -r "seed-gen outbox.yaml | ..." <"$BATS_TEST_TMPDIR/outbox.tsv")
	grep -qxF -- '- on `demo.outbox`: none: not found where the seed declares the guard: no column job in the table' "${r%.yaml}.md"
	grep -qF -- '- probe of the declared guard on `demo.outbox` (key `job` declared in the seed): **skipped**: no column' "${r%.yaml}.md"
	grep -A8 '^declared_guard:$' "$r" | grep -qx '    message: "no column of the declared key to probe"'
}

@test "the newest record is stale when the worker's script has changed since the run, or the guard declaration" {
	printf '#!/bin/sh\nexec idem-worker "$@"\n' >worker.sh
	git add worker.sh && git commit -q -m "the worker's script"
	sum=$(sha256sum worker.sh | cut -d ' ' -f 1)
	# the command the seed declares, run from a file of the work tree
	awk -F '\t' -v row="$(row worker '["idem-worker","--guard","unique"]' worker.sh "$sum" '\N' '\N')" \
		'$1 == "worker" { print row; next } { print }' "$RUN" >"$BATS_TEST_TMPDIR/run.tsv"
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$BATS_TEST_TMPDIR/run.tsv")
	grep -q "executable_sha256: \"$sum\"" "$r"
	run -0 verify-record --history
	[[ "$output" != *"stale"* ]]
	echo '# one more line' >>worker.sh
	run -1 verify-record --history
	[[ "$output" == *"stale  the worker's executable worker.sh has changed since the run (SHA-256 "*", the record ${sum:0:12}...)"* ]]
	git checkout -q worker.sh
	run -0 verify-record --history
	# a guard declared since the run
	printf 'guard: { table: demo.outbox, key: [key] }\n' >>seed.yaml
	run -1 verify-record --history
	[[ "$output" == *'stale  the seed'"'"'s guard declaration is {"key":["key"],"table":"demo.outbox"}, the record rehearsed none'* ]]
}
