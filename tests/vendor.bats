#!/usr/bin/env bats
# The vendor double (kill-at(1), THE VENDOR DOUBLE) against real workers on
# the real sandbox: a second charge is counted like a second row, the kill
# point external-call is the call itself, and the vendor's faults are
# rehearsed. curl is the outside referee of the double's HTTP.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	seed="$BATS_TEST_TMPDIR/seed.yaml"
}

# example HONOURS: the example seed, fast, with the vendor honouring
# idempotency keys or not.
example() {
	sed -e 's/visibility_timeout: 2s/visibility_timeout: 300ms/' -e 's/within: 2s/within: 100ms/' \
		-e "s/honours_idempotency_key: [a-z]*/honours_idempotency_key: $1/" \
		seeds/invoice-line.yaml >"$seed"
}

# pipeline WORKER...: the test's seed through run_pipeline, the worker
# given 60 s.
pipeline() {
	run_pipeline "$seed" 60s "$@"
}

# The fixture seed with no scenario and no pending table: a draft, since
# it forces no fault.
no_scenarios() {
	draft=1
	sed -e '/pending:/d' -e '/^scenarios:/,/^expect:/{/^expect:/!d}' \
		tests/fixtures/seeds/external.yaml >"$seed"
}

# "business key:answer:effect," of the call rows of one method, in order.
calls() {
	awk -F '\t' -v m="$1" '$1 == "call" && $5 == m { printf "%s:%s:%s,", $9, $11, $12 }' "$out"
}

@test "a stable idempotency key passes when the vendor honours keys: the retried charge is replayed" {
	example true
	# a worker that keeps no table of pending calls: the seed names none
	sed -i '/^  pending: {/d' "$seed"
	idem-worker --setup -g unique
	pipeline idem-worker -g unique -x idempotency-key
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total external)" 6
	assert_equal "$(total external_duplicates)" 0
	# the call killed at external-call took effect; its retry, same key, did not
	[[ "$(calls POST)" == *'["inv-1004",1]:killed:yes,'*'["inv-1004",1]:replayed:no,'* ]]
	assert_equal "$(awk -F '\t' '$1 == "kill" && $5 == "external-call" { print $2, $8 }' "$out")" \
		"kill-during-external-call vendor"
	# every POST sent the business key as its idempotency key
	assert_equal "$(awk -F '\t' '$1 == "call" && $5 == "POST" && $7 != $9' "$out")" ""
}

@test "against a vendor that does not honour keys, a call without a pending row is caught, the key named" {
	example false
	idem-worker --setup -g unique
	pipeline idem-worker -g unique -x none
	[ "$status" -eq 1 ]
	# it charges on every delivery: the killed call's retry, the duplicate
	# publish and the race's second worker each charge again
	grep -q '^count-effects: external: expected 6, observed 9$' "$err"
	grep -qF 'external: duplicate effect for business key ["inv-1004",1]: 2 calls took effect, expected 1' "$err"
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "external" && $6 > $5 { print $4 ":" $6 }' "$out" | tr '\n' ' ')" \
		'["inv-1001",1]:2 ["inv-1004",1]:2 ["inv-1005",1]:2 '
	[[ "$(calls POST)" == *'["inv-1004",1]:killed:yes,'*'["inv-1004",1]:ok:yes,'* ]]
	# the same worker with the same key against a vendor that does not honour it
	queue_reset
	idem-worker --setup -g unique
	pipeline idem-worker -g unique -x idempotency-key
	[ "$status" -eq 1 ]
	grep -q '^count-effects: external: expected 6, observed 9$' "$err"
}

@test "a pending row written first, reconciled after, passes against a vendor that does not honour keys" {
	example false
	# the seed names the worker that runs, as the record checks
	sed -i 's/command: "idem-worker --guard unique"/command: "idem-worker -g unique -x pending-row"/' "$seed"
	idem-worker --setup -g unique
	pipeline idem-worker -g unique -x pending-row
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total external)" 6
	# the retry asked the vendor, found the charge, and did not charge again
	[[ "$(calls GET)" == *'["inv-1004",1]:ok:no,'* ]]
	grep -q 'branch=pending-reconciled job=job-0004 attempt=2' "$out"
	assert_equal "$(sql "SELECT status || ' ' || owner FROM demo.pending_calls WHERE key = '[\"inv-1004\",1]'")" \
		"reconciled billing-oncall"
	# the record names the reconciliation owner of the pending calls
	repo="$BATS_TEST_TMPDIR/repo"
	new_repo "$repo"
	cp "$seed" seed.yaml
	git add seed.yaml && git commit -q -m seed
	sed "s#$seed#seed.yaml#" "$out" >run.tsv
	r=$(mkrecord <run.tsv)
	grep -q '^reconciliation_owner: "billing-oncall"$' "$r"
	grep -q 'billing-oncall' "${r%.yaml}.md"
	grep -q '^verdict: "pass"$' "$r"
}

@test "a node worker that never speaks the step protocol is killed at external-call, by the double" {
	sed -e 's/honours_idempotency_key: [a-z]*/honours_idempotency_key: false/' -e '/pending:/d' \
		-e '/vendor: error/d' -e '/vendor: timeout/d' tests/fixtures/seeds/external.yaml >"$seed"
	node tests/fixtures/workers/vendor-worker.js --setup unique
	pipeline node tests/fixtures/workers/vendor-worker.js unique
	assert_equal "$(rows_of step "$out")" 1
	assert_equal "$(awk -F '\t' '$1 == "step" { print $5, $6, $7, $8, $9 }' "$out")" \
		"external-call job-0001 1 kill vendor"
	assert_equal "$(awk -F '\t' '$1 == "kill" { print $2, $3, $5, $8 }' "$out")" \
		"charge-killed job-0001 external-call vendor"
	# charged, then killed before its commit: the line is not there, the
	# retry writes it and charges again: a double charge, counted
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines WHERE invoice_id = 'inv-1001'")" 1
	[ "$status" -eq 1 ]
	assert_equal "$(total external)" 4
	grep -qF 'external: duplicate effect for business key ["inv-1001",1]' "$err"
	# the killed call is the killed worker's: the call row names its process
	killed=$(awk -F '\t' '$1 == "kill" { print $6 }' "$out")
	assert_equal "$(awk -F '\t' '$1 == "call" && $11 == "killed" { print $4 }' "$out")" "$killed"
}

@test "the vendor answers 500, then 200: one effect, the retry in the evidence" {
	# a vendor fault alone: neither duplicate, kill nor race, so a draft
	draft=1
	sed -e '/pending:/d' -e '/vendor: timeout/d' -e '/kill: external-call/d' \
		tests/fixtures/seeds/external.yaml >"$seed"
	node tests/fixtures/workers/vendor-worker.js --setup unique
	pipeline node tests/fixtures/workers/vendor-worker.js --idempotency-key unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(total external)" 3
	assert_equal "$(awk -F '\t' '$1 == "call" && $9 == "[\"inv-1002\",1]" { print $10, $11, $12 }' "$out" | tr '\n' ,)" \
		"500 error no,200 ok yes,"
	assert_equal "$(awk -F '\t' '$1 == "attempt" && $2 == "job-0002" { print $4, $10 }' "$out" | tr '\n' ,)" \
		"1 inserted vendor-error,2 inserted called,"
}

@test "the vendor does not answer: the worker's own timeout decides, and its retry charges once" {
	# a vendor fault alone: neither duplicate, kill nor race, so a draft
	draft=1
	sed -e '/pending:/d' -e '/vendor: error/d' -e '/kill: external-call/d' \
		-e 's/, duplicates: 1, within: 100ms//' tests/fixtures/seeds/external.yaml >"$seed"
	node tests/fixtures/workers/vendor-worker.js --setup unique
	pipeline node tests/fixtures/workers/vendor-worker.js --idempotency-key unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(awk -F '\t' '$1 == "call" && $9 == "[\"inv-1003\",1]" { print $10, $11, $12 }' "$out" | tr '\n' ,)" \
		"0 timeout no,200 ok yes,"
	grep -q 'branch=vendor-timeout' "$out"
}

@test "idem-worker against a vendor that does not answer: its own timeout, then its retry reconciles" {
	# a vendor fault alone: neither duplicate, kill nor race, so a draft
	draft=1
	sed -e '/vendor: error/d' -e '/kill: external-call/d' -e 's/, duplicates: 1, within: 100ms//' \
		-e 's/visibility_timeout: 300ms/visibility_timeout: 3s/' \
		tests/fixtures/seeds/external.yaml >"$seed"
	idem-worker --setup -g unique
	pipeline idem-worker -g unique
	cat "$err" >&2
	[ "$status" -eq 0 ]
	grep -q "idem-worker: POST http://127.0.0.1:[0-9]*/v1/charges: no answer within 2000 ms" "$out"
	assert_equal "$(awk -F '\t' '$1 == "call" && $9 == "[\"inv-1003\",1]" { print $5, $11, $12 }' "$out" | tr '\n' ,)" \
		"POST timeout no,GET ok no,POST ok yes,"
	assert_equal "$(total external)" 3
}

@test "a request whose body lacks the key's fields is recorded, and counted under the unknown key" {
	no_scenarios
	node tests/fixtures/workers/vendor-worker.js --setup unique
	# a worker that charges with a body of its own making, as curl sends it
	cat >"$BATS_TEST_TMPDIR/worker.sh" <<-'EOF'
	#!/bin/sh
	while :; do
		row=$(psql -X -A -t -F ' ' -v ON_ERROR_STOP=1 -c \
			"SELECT msg_id, payload->>'invoice_id', payload->>'line_no' FROM idem.read('$IDEM_QUEUE', '5 seconds')")
		[ -n "$row" ] || { sleep 0.1; continue; }
		set -- $row
		curl -s -o /dev/null -X POST -H 'Content-Type: application/json' \
			--data "{\"invoice\": \"$2\", \"line\": $3}" "$IDEM_VENDOR_URL/v1/charges"
		psql -X -q -v ON_ERROR_STOP=1 -c "INSERT INTO demo.invoice_lines (job_id, invoice_id, line_no, amount_cents, currency) VALUES ('$1', '$2', $3, 1, 'EUR')" \
			-c "SELECT idem.ack($1)" >/dev/null
	done
	EOF
	pipeline sh "$BATS_TEST_TMPDIR/worker.sh"
	cat "$err" >&2
	[ "$status" -eq 1 ]
	assert_equal "$(awk -F '\t' '$1 == "call" { print $9, $11, $12 }' "$out" | sort -u)" '\N ok yes'
	assert_equal "$(rows_of call "$out")" 3
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "external-unknown" { print $6 }' "$out")" 3
	# the vendor charged three times, for no job it could name: a finding
	assert_equal "$(total external)" 3
	grep -q '^count-effects: external: 3 calls took effect with no business key in their body$' "$err"
	grep -qF 'external: missing effect for business key ["inv-1001",1]: 0 calls took effect, expected 1' "$err"
	# the body's hash is the SHA-256 of the bytes curl sent
	want=$(printf '%s' '{"invoice": "inv-1001", "line": 1}' | sha256sum | cut -d ' ' -f 1)
	awk -F '\t' '$1 == "call" { print $8 }' "$out" | grep -qx "$want"
}

@test "the double speaks HTTP as curl expects: a charge, a replay, a lookup, and the evidence of each" {
	no_scenarios
	node tests/fixtures/workers/vendor-worker.js --setup unique
	# a worker that makes the calls and writes what it was answered
	cat >"$BATS_TEST_TMPDIR/worker.sh" <<-EOF
	#!/bin/sh
	b='{"invoice_id": "inv-1001", "line_no": 1}'
	curl -s -X POST -H 'Idempotency-Key: k1' --data "\$b" "\$IDEM_VENDOR_URL/v1/charges" >$BATS_TEST_TMPDIR/first
	curl -s -X POST -H 'Idempotency-Key: k1' --data "\$b" "\$IDEM_VENDOR_URL/v1/charges" >$BATS_TEST_TMPDIR/again
	curl -s -G --data-urlencode 'key=["inv-1001",1]' "\$IDEM_VENDOR_URL/v1/charges" >$BATS_TEST_TMPDIR/lookup
	curl -s -o /dev/null -w '%{http_code}' -X DELETE "\$IDEM_VENDOR_URL/v1/charges" >$BATS_TEST_TMPDIR/delete
	exec node tests/fixtures/workers/vendor-worker.js --idempotency-key unique
	EOF
	pipeline sh "$BATS_TEST_TMPDIR/worker.sh"
	assert_equal "$(cat "$BATS_TEST_TMPDIR/first")" \
		'{"id":"ex_000001","object":"payment charge","business_key":"[\"inv-1001\",1]","replayed":false}'
	assert_equal "$(cat "$BATS_TEST_TMPDIR/again")" \
		'{"id":"ex_000001","object":"payment charge","business_key":"[\"inv-1001\",1]","replayed":true}'
	assert_equal "$(cat "$BATS_TEST_TMPDIR/lookup")" '{"data":[{"id":"ex_000001"}]}'
	assert_equal "$(cat "$BATS_TEST_TMPDIR/delete")" 405
	assert_equal "$(awk -F '\t' '$1 == "call" && NR < 1000 { print $5, $7, $11, $12, $13 }' "$out" | head -4 | tr '\n' ,)" \
		'POST k1 ok yes ex_000001,POST k1 replayed no ex_000001,GET \N ok no \N,DELETE \N error no \N,'
}

# answers SCENARIO...: the seed of the vendor's answers (lost, late,
# forgotten) with only the scenarios named, and no pending table: the
# workers here write none. A draft when no kill is left, since a vendor
# fault alone forces none.
answers() {
	local keep="$*" name
	cp tests/fixtures/seeds/vendor-answers.yaml "$seed"
	sed -i '/pending:/d' "$seed"
	for name in reply-lost reply-late keys-forgotten; do
		[[ " $keep " == *" $name "* ]] || sed -i "/name: $name,/d" "$seed"
	done
	[[ " $keep " == *" keys-forgotten "* ]] || draft=1
}

# "answer:effect:status:id," of the POSTs of one business key, in order.
posts_of() {
	awk -F '\t' -v k="$1" '$1 == "call" && $5 == "POST" && $9 == k { printf "%s:%s:%s:%s,", $11, $12, $10, $14 }' "$out"
}

# One field of the call row with id $1: its column $2.
call_field() {
	awk -F '\t' -v id="$1" -v col="$2" '$1 == "call" && $14 == id { print $col }' "$out"
}

# Seconds from the time $1 to the time $2 of the stream, RFC 3339; fails
# on anything else, \N included.
seconds_between() {
	local from to
	from=$(date -u -d "$1" +%s.%6N) && to=$(date -u -d "$2" +%s.%6N) || return 1
	awk -v a="$from" -v b="$to" 'BEGIN { printf "%.6f\n", b - a }'
}

@test "a lost reply with a stable key: the charge went through, unanswered, and the retry is replayed: one charge" {
	answers reply-lost
	idem-worker --setup -g unique
	pipeline idem-worker -g unique -x idempotency-key
	cat "$err" >&2
	[ "$status" -eq 0 ]
	# after the two baseline jobs' calls: charged, its connection reset
	# with no answer; then the same key again, answered with that charge
	assert_equal "$(posts_of '["inv-1001",1]')" "lost:yes:0:3,replayed:no:200:4,"
	assert_equal "$(call_field 3 15)" '\N'
	assert_equal "$(call_field 3 7)" "$(call_field 4 7)"
	assert_equal "$(call_field 3 13)" "$(call_field 4 13)"
	# the worker saw a reset, not an answer, and did not ack
	grep -q 'idem-worker: POST http://127.0.0.1:[0-9]*/v1/charges: .*reset by peer' "$out"
	grep -q 'branch=vendor-error job=job-0001 attempt=1' "$out"
	assert_equal "$(total external)" 3
	assert_equal "$(total external_duplicates)" 0
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines WHERE invoice_id = 'inv-1001'")" 1
}

@test "a lost reply with no idempotency key: the retry charges again, and the second charge is counted" {
	answers reply-lost
	idem-worker --setup -g unique
	pipeline idem-worker -g unique -x none
	[ "$status" -eq 1 ]
	assert_equal "$(posts_of '["inv-1001",1]')" "lost:yes:0:3,ok:yes:200:4,"
	assert_equal "$(call_field 3 7)" '\N'
	grep -q '^count-effects: external: expected 3, observed 4$' "$err"
	grep -qF 'external: duplicate effect for business key ["inv-1001",1]: 2 calls took effect, expected 1' "$err"
	# the invoice line itself is there once: the charge is what doubled
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines WHERE invoice_id = 'inv-1001'")" 1
}

@test "a late reply past the worker's timeout: charged, answered after its delay, and the retry is replayed: one charge" {
	answers reply-late
	idem-worker --setup -g unique
	pipeline idem-worker -g unique -x idempotency-key
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(posts_of '["inv-1002",1]')" "late:yes:200:3,replayed:no:200:4,"
	# the worker gave up at its own 2 s; the answer went 3 s after the
	# call all the same, before kill-at stopped the double
	grep -q 'idem-worker: POST http://127.0.0.1:[0-9]*/v1/charges: no answer within 2000 ms' "$out"
	late=$(seconds_between "$(call_field 3 2)" "$(call_field 3 15)") || { echo "no answered_at" >&2; false; }
	awk -v s="$late" 'BEGIN { exit !(s >= 3) }' || { echo "answered $late s after the call" >&2; false; }
	assert_equal "$(call_field 3 13)" "$(call_field 4 13)"
	assert_equal "$(total external)" 3
	assert_equal "$(total external_duplicates)" 0
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines WHERE invoice_id = 'inv-1002'")" 1
}

@test "keys forgotten after a kill at external-call: the retry's same key charges again, and the forgot row says why" {
	answers keys-forgotten
	idem-worker --setup -g unique
	pipeline idem-worker -g unique -x idempotency-key
	[ "$status" -eq 1 ]
	# the two baseline jobs call first; the killed call is the third
	assert_equal "$(posts_of '["inv-1003",1]')" "killed:yes:0:3,ok:yes:200:4,"
	assert_equal "$(call_field 3 7)" "$(call_field 4 7)"
	assert_equal "$(awk -F '\t' '$1 == "kill" { print $2, $3, $5, $8 }' "$out")" \
		"keys-forgotten job-0003 external-call vendor"
	# one key forgotten, the killed job's, named by its first call, when the
	# killed attempt's lease ended and before the retry's call
	assert_equal "$(rows_of forgot "$out")" 1
	assert_equal "$(awk -F '\t' '$1 == "forgot" { print $3, $4, $5, $6 }' "$out")" \
		'["inv-1003",1] ["inv-1003",1] 3 86400000'
	forgot_at=$(awk -F '\t' '$1 == "forgot" { print $2 }' "$out")
	assert_equal "$(awk -F '\t' '$1 == "lease" && $4 == "job-0003" && $6 == "kill" { print $2 }' "$out")" "$forgot_at"
	after=$(seconds_between "$forgot_at" "$(call_field 4 2)")
	awk -v s="$after" 'BEGIN { exit !(s > 0) }'
	# charged twice, one line: the counts downstream catch it
	grep -q '^count-effects: external: expected 3, observed 4$' "$err"
	grep -qF 'external: duplicate effect for business key ["inv-1003",1]: 2 calls took effect, expected 1' "$err"
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines WHERE invoice_id = 'inv-1003'")" 1
}

@test "the vendor's three answers in one run: only the forgotten key charges twice" {
	idem-worker --setup -g unique
	run_pipeline tests/fixtures/seeds/vendor-answers.yaml 60s idem-worker -g unique -x idempotency-key
	[ "$status" -eq 1 ]
	assert_equal "$(posts_of '["inv-1001",1]' | sed 's/:[0-9]*,/,/g')" "lost:yes:0,replayed:no:200,"
	assert_equal "$(posts_of '["inv-1002",1]' | sed 's/:[0-9]*,/,/g')" "late:yes:200,replayed:no:200,"
	assert_equal "$(posts_of '["inv-1003",1]' | sed 's/:[0-9]*,/,/g')" "killed:yes:0,ok:yes:200,"
	assert_equal "$(awk -F '\t' '$1 == "forgot" { print $3 }' "$out")" '["inv-1003",1]'
	# the call ids count the calls, in order, from 1
	assert_equal "$(awk -F '\t' '$1 == "call" { printf "%s,", $14 }' "$out")" "1,2,3,4,5,6,"
	assert_equal "$(total external)" 4
	assert_equal "$(total external_duplicates)" 1
}

@test "a vendor-forget-keys scenario row without the step of its kill is refused" {
	seed-gen tests/fixtures/seeds/vendor-answers.yaml |
		sed 's/^\(scenario\tkeys-forgotten\tvendor-forget-keys\t\)external-call\t/\1\\N\t/' >"$BATS_TEST_TMPDIR/in.tsv"
	run --separate-stderr kill-at -- idem-worker -g unique <"$BATS_TEST_TMPDIR/in.tsv"
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	assert_equal "$stderr" \
		'kill-at: stdin:7: scenario row, field step: required for a vendor-forget-keys scenario: the step of its kill'
}
