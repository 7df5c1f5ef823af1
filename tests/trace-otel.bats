#!/usr/bin/env bats
# The trace beside the record (idem-record(5), THE TRACE) of a worker that
# never heard of idem, instrumented with OpenTelemetry's Node SDK, the pg
# instrumentation and the undici one, as teams do: the example's
# scenarios, rehearsed end to end, the trace read by a reader that is not
# idem: OpenTelemetry JS's own protobuf definitions of OTLP
# (tests/node/otlp-read.js), through protobuf and back.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	seed="$BATS_TEST_TMPDIR/seed.yaml"
	# the example, fast; the worker keeps no pending rows of its calls
	sed -e 's/visibility_timeout: 2s/visibility_timeout: 500ms/' -e 's/within: 2s/within: 100ms/' \
		-e '/^  pending:/d' seeds/invoice-line.yaml >"$seed"
	node tests/fixtures/workers/otel-worker.js --setup unique
	# the records' repository, the seed committed: one revision for all
	repo=$BATS_TEST_TMPDIR/repo
	signing_repo "$repo"
	cp "$seed" seed.yaml
	git add seed.yaml && git commit -q -m seed
	cd "$BATS_TEST_DIRNAME/.."
}

worker=(node --require ./tests/fixtures/workers/otel-tracing.js tests/fixtures/workers/otel-worker.js unique)

# rehearsed PROTOCOL: the example rehearsed by the traced worker exporting
# in PROTOCOL, made a record, not committed, in the records' repository;
# sets record, trace, and view, what the referee reads in the trace.
rehearsed() {
	status=0
	seed-gen "$seed" | count-effects --before | dup-publish |
		env OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="$1" kill-at -D 60s -- "${worker[@]}" |
		count-effects >"$out" 2>"$err" || status=$?
	record=$repo/$(cd "$repo" && sed "s#$seed#seed.yaml#" "$out" | mkrecord -k "$key")
	trace=${record%.yaml}.trace.json
	view=$(node tests/node/otlp-read.js "$trace")
	# shown when a test fails
	printf '%s\n' "$view" >&2
}

# The worker's span paths under each delivery, "JOB N MSG: PATH", sorted;
# but the queue's polls, which a worker starts before a delivery or within
# one as its timing falls.
paths() {
	awk -F '\t' '$1 == "span" && $6 != "pg.query:SELECT idem" { print $2, $3, $4 ": " $6 }' <<<"$view" | sort
}

# The attempt of job $1, delivery $2 in the trace: "STATUS|EVENTS|LOST".
attempt_of() {
	awk -F '\t' -v j="$1" -v n="$2" '$1 == "attempt" && $2 == j && $3 == n { print $5 "|" $6 "|" $7 }' <<<"$view"
}

@test "the example's scenarios by a traced Node worker: each attempt holds its pg spans, the killed ones their INSERT and their lost spans" {
	rehearsed http/protobuf
	cat "$err" >&2
	# the worker charges without a key at a vendor that honours none: the
	# kills before the commit and during the call charge twice
	[ "$status" -eq 1 ]
	grep -qF 'external: duplicate effect for business key ["inv-1004",1]' "$err"
	# every delivery of the run is an attempt span of the trace: job-0001
	# published twice, job-0005 raced by two workers
	deliveries=$(awk -F '\t' '$1 == "attempt" { print $2, $4, $3 }' "$out" | sort -u)
	assert_equal "$(awk -F '\t' '$1 == "attempt" { print $2, $3, $4 }' <<<"$view" | sort)" "$deliveries"
	assert_equal "$(grep -c '^attempt	job-0001	1	' <<<"$view") $(grep -c '^attempt	job-0005	1	' <<<"$view")" "2 2"
	assert_equal "$(awk -F '\t' '$1 == "job" { print $2 }' <<<"$view" | sort | tr '\n' ,)" \
		"job-0001,job-0002,job-0003,job-0004,job-0005,job-0006,"
	# each holds the pg instrumentation's spans of its own queries
	while read -r delivery; do
		grep -q "^$delivery: \(invoice line > \)\?pg.query:INSERT idem$" <<<"$(paths)"
		grep -q "^$delivery: \(invoice line > \)\?pg.query:BEGIN idem$" <<<"$(paths)"
	done <<<"$deliveries"
	# a delivery not killed: the worker's span of the message over its
	# queries, its charge and its ack
	msg=$(awk -F '\t' '$1 == "attempt" && $2 == "job-0006" { print $4 }' <<<"$view")
	assert_equal "$(grep "^job-0006 1 $msg: " <<<"$(paths)" | cut -d: -f2- | tr '\n' ,)" \
		" invoice line, invoice line > POST, invoice line > pg.query:BEGIN idem, invoice line > pg.query:COMMIT idem, invoice line > pg.query:INSERT idem, invoice line > pg.query:SELECT idem,"
	assert_equal "$(attempt_of job-0006 1)" "ok|commit,external call,ack|-"
	# killed after its commit: its INSERT and COMMIT came, under the
	# attempt, since the message's span, their parent, was never sent: the
	# attempt names it lost, and it is nowhere in the trace
	IFS='|' read -r status_ events lost < <(attempt_of job-0002 1)
	assert_equal "$status_|$events" "error|commit,external call,kill,spans lost"
	grep -q '^job-0002 1 [^:]*: pg.query:INSERT idem$' <<<"$(paths)"
	grep -q '^job-0002 1 [^:]*: pg.query:COMMIT idem$' <<<"$(paths)"
	run ! grep -q '^job-0002 1 [^:]*: invoice line' <<<"$(paths)"
	[ "$lost" != - ]
	for id in ${lost//,/ }; do
		[[ "$id" =~ ^[0-9a-f]{16}$ ]]
		run ! grep -q "^span	.*	$id	" <<<"$view"
	done
	# killed in the vendor's call: its INSERT came, its POST, unfinished,
	# never did, nor their parent; the retry's message span holds its own
	# call
	IFS='|' read -r status_ events lost < <(attempt_of job-0004 1)
	assert_equal "$status_|$events" "error|external call,kill,spans lost"
	grep -q '^job-0004 1 [^:]*: pg.query:INSERT idem$' <<<"$(paths)"
	run ! grep -q '^job-0004 1 [^:]*: .*POST$' <<<"$(paths)"
	grep -q '^job-0004 2 [^:]*: invoice line > POST$' <<<"$(paths)"
	# the record and the trace verify
	run verify-record -f "$repo/records/allowed_signers" "$record"
	[ "$status" -eq 1 ]
	[[ "$output" == *"verified, signed by eng@example.org; verdict fail" ]]
	# and the referee is no easy reader: a field OTLP does not have, an id
	# not in hex, a time as a number, a parent not in the trace, each refused
	bad=$BATS_TEST_TMPDIR/bad.json
	while IFS='|' read -r change why; do
		sed "$change" "$trace" >"$bad"
		run ! cmp -s "$bad" "$trace"
		run node tests/node/otlp-read.js "$bad"
		[ "$status" -eq 1 ]
		[[ "$output" == "otlp-read: "*"$why"* ]]
	done <<-'EOF'
	0,/"startTimeUnixNano"/s//"startTime"/|.startTime: not a field of the definitions
	0,/"spanId":"[0-9a-f]\{16\}"/s//"spanId":"AAAAAAAAAAA="/|.spanId: "AAAAAAAAAAA=" is not 8 bytes in lowercase hex
	0,/"endTimeUnixNano":"\([0-9]*\)"/s//"endTimeUnixNano":\1/|.endTimeUnixNano: 1
	0,/"parentSpanId":"[0-9a-f]\{16\}"/s//"parentSpanId":"0123456789abcdef"/|its parent 0123456789abcdef is not in its trace
	EOF
}

# What a trace is, but for the worker's own span ids and the times: idem's
# trace ids, each attempt's message, end, events and whether it lost
# spans, and the worker's span paths under each delivery.
shape() {
	awk -F '\t' '$1 == "job" { print "job", $2, $3 }
		$1 == "attempt" { print "attempt", $2, $3, $4, $5, $6, ($7 == "-" ? "none lost" : "lost") }' <<<"$view" | sort
	paths
}

@test "the same worker sending OTLP/JSON gives the same trace as sending protobuf" {
	rehearsed http/protobuf
	[ "$(awk -F '\t' '$1 == "span" { print $17 }' "$out" | sort -u)" = protobuf ]
	protobuf=$(shape)
	first=$record
	queue_reset
	node tests/fixtures/workers/otel-worker.js --setup unique
	rehearsed http/json
	[ "$(awk -F '\t' '$1 == "span" { print $17 }' "$out" | sort -u)" = json ]
	[ "$record" != "$first" ]
	assert_equal "$(shape)" "$protobuf"
	# not a trace of nothing: every delivery with its spans
	[ "$(grep -c '^attempt ' <<<"$protobuf")" -eq 11 ]
	[ "$(grep -c ': invoice line > pg.query:INSERT idem$' <<<"$protobuf")" -ge 7 ]
}
