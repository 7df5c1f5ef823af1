#!/usr/bin/env bats
# The seed's sandbox account as a real PostgreSQL role: the workers run as
# it, it may do what its list says and nothing more, and the catalog says
# what it held.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	sed 's/visibility_timeout: 2s/visibility_timeout: 300ms/; s/within: 2s/within: 100ms/' \
		seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	# roles belong to the cluster: each test begins without the account
	sql "DO \$\$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'rehearsal-bot') THEN
		DELETE FROM idem.queue_account; DROP OWNED BY \"rehearsal-bot\"; DROP ROLE \"rehearsal-bot\";
		END IF; END \$\$" >/dev/null
}

publish() {
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | count-effects --before | dup-publish >"$BATS_TEST_TMPDIR/published"
}

@test "a worker that purges its queue, reads another rehearsal's queue or creates a role is denied" {
	# another rehearsal's message, in a queue of its own, which the same
	# account used before
	sql "SELECT idem.send('rehearsal_other', 'other-1', 'k', '{}')" >/dev/null
	sql "INSERT INTO idem.queue_account VALUES ('rehearsal_other', 'rehearsal-bot')" >/dev/null
	publish
	cat >"$BATS_TEST_TMPDIR/intruder.sh" <<-'SH'
		#!/bin/sh
		# tries what a sandbox account may not, once, then works as idem-worker
		if [ "$IDEM_WORKER" = 0 ] && [ ! -e "$1/tried" ]; then
			: >"$1/tried"
			psql -X -A -t -c 'SELECT current_user' | sed 's/^/whoami=/'
			psql -X -c 'TRUNCATE idem.message' 2>&1
			psql -X -c 'DELETE FROM idem.message' 2>&1
			psql -X -c "SELECT * FROM idem.read('rehearsal_other', '1 second')" 2>&1
			psql -X -c 'SELECT count(*) FROM idem.message' 2>&1
			psql -X -c 'CREATE ROLE intruder' 2>&1
		fi
		exec idem-worker --guard unique
	SH
	chmod +x "$BATS_TEST_TMPDIR/intruder.sh"
	kill-at -D 30s -- "$BATS_TEST_TMPDIR/intruder.sh" "$BATS_TEST_TMPDIR" \
		<"$BATS_TEST_TMPDIR/published" >"$out" 2>"$err"
	log=$(awk -F '\t' '$1 == "log" { print $5 }' "$out")
	[[ "$log" == *"whoami=rehearsal-bot"* ]]
	[[ "$log" == *"ERROR:  permission denied for table message"* ]]
	assert_equal "$(grep -c 'permission denied for table message' <<<"$log")" 3
	[[ "$log" == *"ERROR:  permission denied for queue rehearsal_other"* ]]
	[[ "$log" == *"ERROR:  permission denied to create role"* ]]
	# nothing was purged, the other queue's message never delivered, no role made
	assert_equal "$(sql "SELECT read_ct FROM idem.message WHERE queue = 'rehearsal_other'")" 0
	assert_equal "$(sql "SELECT count(*) FROM pg_roles WHERE rolname = 'intruder'")" 0
	# every scenario of the seed passed all the same, as the role
	seed_pipeline_counts=$(count-effects <"$out" | awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "total" && $4 == "duplicates" { print $6 }')
	assert_equal "$seed_pipeline_counts" 0
	assert_equal "$(rows_of missed "$out")" 0
	# what it held is its list, and it could do nothing it may not
	assert_equal "$(awk -F '\t' '$1 == "grant" && $7 != "yes"' "$out")" ""
	assert_equal "$(awk -F '\t' '$1 == "denied" && $5 != "no"' "$out")" ""
	grep -q '^grant	rehearsal-bot	run	table	demo.invoice_lines	INSERT	yes$' "$out"
	grep -q '^grant	rehearsal-bot	run	function	idem.read(queue text, vt interval, qty integer)	EXECUTE	yes$' "$out"
	grep -q '^denied	rehearsal-bot	idem.message	TRUNCATE	no$' "$out"
	grep -q '^denied	rehearsal-bot		CREATEROLE	no$' "$out"
	! grep -q 'sandbox account' "$err"
}

@test "a role that holds more than its list is a finding, named in the grant and denied rows" {
	# made by someone else, with role creation and a purge of the queue
	sql 'CREATE ROLE "rehearsal-bot" LOGIN CREATEROLE' >/dev/null
	sql 'GRANT TRUNCATE ON idem.message TO "rehearsal-bot"' >/dev/null
	publish
	kill-at -D 30s -- idem-worker --guard unique <"$BATS_TEST_TMPDIR/published" >"$out" 2>"$err"
	grep -q '^kill-at: sandbox account rehearsal-bot: 2 privileges beyond its list, 2 things it may not do that it could: see the grant and denied rows$' "$err"
	grep -q '^grant	rehearsal-bot	run	attribute		CREATEROLE	no$' "$out"
	grep -q '^grant	rehearsal-bot	run	table	idem.message	TRUNCATE	no$' "$out"
	grep -q '^denied	rehearsal-bot	idem.message	TRUNCATE	yes$' "$out"
	grep -q '^denied	rehearsal-bot		CREATEROLE	yes$' "$out"
	# each finding fails count-effects' verdict, naming the right, though
	# every count is as expected
	run --separate-stderr count-effects "$out"
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" >"$BATS_TEST_TMPDIR/run.tsv"
	assert_equal "$stderr" 'count-effects: sandbox account rehearsal-bot held attribute CREATEROLE, beyond its list
count-effects: sandbox account rehearsal-bot held TRUNCATE on table idem.message, beyond its list
count-effects: sandbox account rehearsal-bot could TRUNCATE idem.message, which it may not
count-effects: sandbox account rehearsal-bot could CREATEROLE, which it may not'
	# the record keeps each finding, fails, and its handoff shows them to the reviewer
	signing_repo "$BATS_TEST_TMPDIR/repo"
	cp "$BATS_TEST_TMPDIR/seed.yaml" seed.yaml
	git add seed.yaml && git commit -q -m seed
	sed -i "s#$BATS_TEST_TMPDIR/seed.yaml#seed.yaml#" "$BATS_TEST_TMPDIR/run.tsv"
	r=$(mkrecord -k "$key" <"$BATS_TEST_TMPDIR/run.tsv")
	grep -qx 'verdict: "fail"' "$r"
	run -1 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict fail"
	sed -n '/^  findings:$/,/^[^ ]/p' "$r" >"$BATS_TEST_TMPDIR/findings"
	assert_equal "$(grep -c '^  - ' "$BATS_TEST_TMPDIR/findings")" 4
	grep -qx '  - "held attribute CREATEROLE, beyond its list"' "$BATS_TEST_TMPDIR/findings"
	grep -qx '  - "held TRUNCATE on table idem.message, beyond its list"' "$BATS_TEST_TMPDIR/findings"
	grep -qx '  - "could TRUNCATE idem.message, which it may not"' "$BATS_TEST_TMPDIR/findings"
	grep -qx '  - "could CREATEROLE, which it may not"' "$BATS_TEST_TMPDIR/findings"
	h="${r%.yaml}.md"
	grep -qx '\*\*Findings: it held more than its list; each fails the verdict.\*\*' "$h"
	tr '\n' ' ' <"$h" | tr -s ' ' | grep -q '\*\*The sandbox account `rehearsal-bot` held more than its list, which fails the verdict: held attribute CREATEROLE, beyond its list.\*\*'
	# the counts were as expected: the handoff does not say otherwise
	run ! grep -q 'The counts differ' "$h"
	# a forged pass beside the findings does not verify
	sed -i 's/^verdict: "fail"$/verdict: "pass"/' "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *'verdict: the record says pass, but its sandbox account held attribute CREATEROLE, beyond its list'* ]]
	grep -qx -- '- \*\*held attribute CREATEROLE, beyond its list\*\*' "$h"
	grep -qx '| TRUNCATE | table `idem.message` | \*\*no\*\* |' "$h"
	grep -qx '| CREATEROLE | attribute | \*\*no\*\* |' "$h"
	# a function's whole signature, past 63 bytes, as the catalog gives it
	grep -q "^grant	rehearsal-bot	run	function	$(sql "SELECT 'idem.send(' ||
		pg_get_function_identity_arguments('idem.send'::regproc) || ')'")	EXECUTE	yes$" "$out"
	grep -qx -- '- TRUNCATE on `idem.message`: \*\*it could\*\*' "$h"
}

@test "a sandbox account that is the user kill-at connects as is refused" {
	sed -i "s/^sandbox_account: .*/sandbox_account: $(sql 'SELECT current_user')/" "$BATS_TEST_TMPDIR/seed.yaml"
	publish
	run -2 kill-at -- idem-worker --guard unique <"$BATS_TEST_TMPDIR/published"
	[[ "$output" == *"kill-at: sandbox_account $(sql 'SELECT current_user') is the user that connects to the sandbox: the worker would hold all its rights; name another role"* ]]
}
