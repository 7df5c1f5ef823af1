# Shared by the tests of the record and of the handoff: a run of the seed
# tests/fixtures/handoff/answers/answers.yaml, written by hand as kill-at and
# count-effects write idem-tsv 1.8, so that no database is needed. Four
# invoice lines, each charged once: job-0001's answer lost (call 1),
# job-0002's late by 3 s (call 2), job-0003 killed during its charge
# (call 3), its key then forgotten by the vendor when its lease ended, its
# retry reconciled from the pending table; and job-0004's vendor error
# (call 4) retried under a new Idempotency-Key (call 5), which count-effects
# reports as a rekeyed business key.

# One row of a stream, its fields given as words.
answers_row() {
	local IFS='	'
	printf '%s\n' "$*"
}

# answers_call ID AT WORKER PID METHOD IDEMPOTENCY-KEY BUSINESS-KEY STATUS
# ANSWER EFFECT RESPONSE-ID ANSWERED-AT: a call row of the vendor double,
# its times in seconds after 10:00 on 2026-12-03.
answers_call() {
	local answered='\N'
	[ "${12}" = '\N' ] || answered="2026-12-03T10:00:${12}Z"
	answers_row call "2026-12-03T10:00:$2Z" "$3" "$4" "$5" /v1/charges "$6" \
		"$(printf '%s' "$7" | sha256sum | cut -d ' ' -f 1)" "$7" "$8" "$9" "${10}" "${11}" "$1" "$answered"
}

# The seed, committed in the current repository as answers.yaml, whose
# vendor honours the Idempotency-Key ($1 true, the default) or not (false).
commit_answers_seed() {
	sed "s/honours_idempotency_key: true/honours_idempotency_key: ${1:-true}/" \
		"$BATS_TEST_DIRNAME/fixtures/handoff/answers/answers.yaml" >answers.yaml
	git add answers.yaml
	git commit -q -m "the answers seed, honours ${1:-true}"
}

# The run's stream, from the seed committed: the rows of kill-at, then those
# of count-effects with the digest of its count rows. A sed script given as
# $1 edits the rows after the seed's, but for the count rows.
answers_stream() {
	seed-gen answers.yaml
	answers_rows | sed -e "${1:-}"
}

answers_rows() {
	local counts
	answers_row queue idem rehearsal_answers 1
	for n in 1 2 3 4; do
		answers_row publish "job-000$n" 0 "$n" 2026-12-03T10:00:00.000000Z published
	done
	answers_row kill keys-forgotten job-0003 1 external-call 303 2026-12-03T10:00:00.160000Z vendor
	answers_row lease 2026-12-03T10:00:00.460000Z 3 job-0003 1 kill
	answers_row forgot 2026-12-03T10:00:00.460000Z '["inv-1003",1]' job-0003 3 86400000
	answers_row attempt job-0001 1 1 301 2026-12-03T10:00:00.100000Z 2026-12-03T10:00:00.140000Z '\N' 1 'inserted pending-row' 2026-12-03T10:00:00.130000Z 0
	answers_row attempt job-0002 2 1 304 2026-12-03T10:00:00.100000Z 2026-12-03T10:00:00.140000Z '\N' 1 'inserted pending-row' 2026-12-03T10:00:00.130000Z 0
	answers_row attempt job-0003 3 1 303 2026-12-03T10:00:00.100000Z 2026-12-03T10:00:00.140000Z '\N' 1 'inserted pending-row' 2026-12-03T10:00:00.130000Z 0
	answers_row attempt job-0004 4 1 307 2026-12-03T10:00:00.100000Z 2026-12-03T10:00:00.140000Z '\N' 1 'inserted vendor-error' 2026-12-03T10:00:00.130000Z 0
	answers_row attempt job-0001 1 2 302 2026-12-03T10:00:00.600000Z '\N' 2026-12-03T10:00:00.650000Z 0 'conflict-noop pending-reconciled' '\N' 0
	answers_row attempt job-0002 2 2 305 2026-12-03T10:00:00.700000Z '\N' 2026-12-03T10:00:00.750000Z 0 'conflict-noop pending-reconciled' '\N' 0
	answers_row attempt job-0003 3 2 306 2026-12-03T10:00:00.600000Z '\N' 2026-12-03T10:00:00.700000Z 0 'conflict-noop pending-reconciled' '\N' 0
	answers_row attempt job-0004 4 2 308 2026-12-03T10:00:00.600000Z '\N' 2026-12-03T10:00:00.700000Z 0 'conflict-noop called' '\N' 0
	answers_row recover job-0003 3 2026-12-03T10:00:00.160000Z 2026-12-03T10:00:00.700000Z 540
	answers_call 1 00.151000 0 301 POST job-0001 '["inv-1001",1]' 0 lost yes ch_1 '\N'
	answers_call 2 00.152000 1 304 POST job-0002 '["inv-1002",1]' 200 late yes ch_2 03.152000
	answers_call 3 00.153000 2 303 POST job-0003 '["inv-1003",1]' 0 killed yes ch_3 '\N'
	answers_call 4 00.154000 3 307 POST job-0004-1 '["inv-1004",1]' 500 error no '\N' 00.154500
	answers_call 5 00.610000 4 302 GET '\N' '["inv-1001",1]' 200 ok no ch_1 00.611000
	answers_call 6 00.620000 6 308 POST job-0004-2 '["inv-1004",1]' 200 ok yes ch_4 00.621000
	counts=$(
		for n in 1 2 3 4; do answers_row count after key "[\"inv-100$n\",1]" 1 1; done
		for n in 1 2 3 4; do answers_row count after external "[\"inv-100$n\",1]" 1 1; done
		answers_row count after total effects 4 4
		answers_row count after total duplicates 0 0
		answers_row count after total missing 0 0
		answers_row count after total unexpected 0 0
		answers_row count after total conflicts 0 0
		answers_row count after total pending 0 0
		answers_row count after total external 4 4
		answers_row count after total external_duplicates 0 0
	)
	printf '%s\n' "$counts"
	answers_row guard constraint invoice_lines_once 'UNIQUE (invoice_id, line_no)' '\N'
	answers_row probe enforced 23505 'ERROR:  duplicate key value violates unique constraint "invoice_lines_once"' 'INSERT INTO "demo"."invoice_lines" SELECT * FROM "demo"."invoice_lines" LIMIT 1'
	answers_row rekeyed '["inv-1004",1]' '["job-0004-1","job-0004-2"]' '[4,6]' 1
	answers_row pending_call '["inv-1003",1]' yes 1 billing-oncall owned
	local window='2026-12-03T10:00:00.000000Z	2026-12-03T10:00:00.750000Z'
	answers_row measure duplicate_effects_per_1000_jobs 0.000 0 4 'per 1000 accepted jobs' $window
	answers_row measure reconciled_jobs_per_100_failures 100.000 1 1 'per 100 failures (kills)' $window
	answers_row measure recovery_ms_median 540 '\N' 1 'ms from kill to clean retry ack' $window
	answers_row measure recovery_ms_max 540 '\N' 1 'ms from kill to clean retry ack' $window
	answers_row digest after "$(printf '%s\n' "$counts" | sed 's/^count	after	/count	/' | sha256sum | cut -d ' ' -f 1)" \
		"$(printf '%s\n' "$counts" | wc -l)"
}
