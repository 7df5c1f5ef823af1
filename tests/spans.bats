#!/usr/bin/env bats
# kill-at's span receiver (kill-at(1), THE SPAN RECEIVER): a worker
# instrumented with OpenTelemetry's Node SDK, as teams do, that never heard
# of idem, sends its spans to kill-at over OTLP/HTTP; each lands in the
# stream as a span row of its job and attempt, and the killed attempt's
# spans never sent are named. curl is the referee of the HTTP answers.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	seed="$BATS_TEST_TMPDIR/seed.yaml"
	sed -e 's/visibility_timeout: 2s/visibility_timeout: 500ms/' \
		tests/fixtures/seeds/duplicate-publish.yaml >"$seed"
	node tests/fixtures/workers/otel-worker.js --setup unique
}

worker=(node --require ./tests/fixtures/workers/otel-tracing.js tests/fixtures/workers/otel-worker.js unique)

# traced PROTOCOL [OPTION ...]: the pipeline, with the traced worker
# killed after its commit in job-0002's first attempt, exporting in
# PROTOCOL (http/protobuf, http/json; "" for the SDK's default); kill-at
# gets the options. The stream in $out, stderr in $err, the status in
# $status.
traced() {
	local protocol=$1
	shift
	status=0
	seed-gen "$seed" | count-effects --before | dup-publish |
		env ${protocol:+OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=$protocol} \
		kill-at -D 30s -k after-commit:job-0002:1 "$@" -- "${worker[@]}" |
		count-effects >"$out" 2>"$err" || status=$?
}

# The span rows' fields NAMES... (awk's $N), one row a line.
spans() {
	awk -F '\t' -v f="$1" 'BEGIN { n = split(f, w, " ") } $1 == "span" {
		s = ""; for (i = 1; i <= n; i++) s = s (i > 1 ? " " : "") $(w[i]); print s }' "$out"
}

# The span names of each attempt, "job attempt: names,", sorted, one
# attempt a line; but the queue's polls (pg.query:SELECT), which a
# worker starts before a delivery or within one as its timing falls.
names_per_attempt() {
	awk -F '\t' '$1 == "span" && $12 != "\\N" && $5 != "pg.query:SELECT idem" { print $12 " " $13 ": " $5 }' "$out" | sort |
		awk -F ': ' '$1 != last { if (NR > 1) printf "\n"; printf "%s:", $1; last = $1 } { printf " %s,", $2 } END { printf "\n" }'
}

# The receiver row's fields after the endpoint.
receiver_counts() {
	awk -F '\t' '$1 == "receiver" { print $3, $4, $5, $6, $7 }' "$out"
}

@test "every attempt's spans, protobuf: its own and the pg instrumentation's, put down to its job and attempt" {
	traced http/protobuf
	cat "$err" >&2
	[ "$status" -eq 0 ]
	# every attempt the stream shows has its span, and its INSERT
	attempts=$(awk -F '\t' '$1 == "attempt" { print $2, $4 }' "$out" | sort -u | tr '\n' ,)
	assert_equal "$attempts" "job-0001 1,job-0002 1,job-0002 2,job-0003 1,"
	assert_equal "$(spans '12 13' | grep -v '^\\N' | sort -u | tr '\n' ,)" "$attempts"
	for a in "job-0001 1" "job-0002 1" "job-0002 2" "job-0003 1"; do
		[ "$(awk -F '\t' -v a="$a" '$1 == "span" && $12 " " $13 == a && $5 == "pg.query:INSERT idem" &&
			($15 ~ /"db.query.text":"INSERT INTO demo.invoice_lines/ || $15 ~ /"db.statement":"INSERT/)' "$out" | wc -l)" -ge 1 ]
	done
	# the worker's own span of each message finished, but the killed one
	assert_equal "$(awk -F '\t' '$1 == "span" && $5 == "invoice line" { print $12, $13, $9, $17 }' "$out" | sort | tr '\n' ,)" \
		"job-0001 1 ok protobuf,job-0001 1 ok protobuf,job-0002 2 ok protobuf,job-0003 1 ok protobuf,"
	# every span row is a row of idem-tsv: count-effects read them all
	[ "$(rows_of span "$out")" -ge 20 ]
	[[ "$(receiver_counts)" == *" {} 0 set" ]]
	assert_equal "$(awk -F '\t' '$1 == "receiver" { print $4 }' "$out")" "$(rows_of span "$out")"
	# stopped at the end, the workers exit by themselves, their SDK's
	# shutdown not held up by metrics sent nowhere
	assert_equal "$(awk -F '\t' '$1 == "log" && $5 ~ /died of signal/' "$out")" ""
}

@test "the attempt killed after its commit: its INSERT span came, and span_lost names the parent it never sent" {
	traced http/protobuf
	[ "$status" -eq 0 ]
	assert_equal "$(rows_of span_lost "$out")" 1
	read -r job attempt pid parents killed_at < <(awk -F '\t' '$1 == "span_lost" { print $2, $3, $4, $5, $6 }' "$out")
	assert_equal "$job $attempt" "job-0002 1"
	assert_equal "$pid $killed_at" "$(awk -F '\t' '$1 == "kill" { print $6, $7 }' "$out")"
	insert_parent=$(awk -F '\t' '$1 == "span" && $12 == "job-0002" && $13 == 1 && $5 == "pg.query:INSERT idem" { print $4 }' "$out")
	assert_equal "$parents" "[\"$insert_parent\"]"
	# the parent, the worker's span of the message, is nowhere in the stream
	assert_equal "$(awk -F '\t' -v p="$insert_parent" '$1 == "span" && $3 == p' "$out")" ""
	# and the retry's spans are of another trace
	[ "$(awk -F '\t' '$1 == "span" && $12 == "job-0002" && $13 == 2 { print $2 }' "$out" | sort -u)" != \
		"$(awk -F '\t' '$1 == "span" && $12 == "job-0002" && $13 == 1 { print $2 }' "$out" | sort -u)" ]
}

@test "the same run in OTLP/JSON gives the same span names per attempt as in protobuf" {
	traced http/protobuf
	[ "$status" -eq 0 ]
	protobuf=$(names_per_attempt)
	[ "$(spans 17 | sort -u)" = protobuf ]
	queue_reset
	node tests/fixtures/workers/otel-worker.js --setup unique
	traced http/json
	cat "$err" >&2
	[ "$status" -eq 0 ]
	[ "$(spans 17 | sort -u)" = json ]
	assert_equal "$(names_per_attempt)" "$protobuf"
	assert_equal "$(rows_of span_lost "$out")" 1
}

# referee: a worker that first, once, sends the receiver bodies of every
# sort with curl and keeps each HTTP status in $referee, then runs the
# traced worker.
referee() {
	cat >"$BATS_TEST_TMPDIR/referee.sh" <<-'EOS'
	[ -e "$REFEREE" ] && exec "$@"
	f=tests/fixtures/otlp
	send() { # NAME CURL-ARGUMENT...
		name=$1; shift
		printf '%s %s\n' "$name" "$(curl -s -o "$REFEREE.$name" -w '%{http_code}' "$@")" >>"$REFEREE.tmp"
	}
	u=$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	pb='Content-Type: application/x-protobuf'
	js='Content-Type: application/json'
	send protobuf -H "$pb" --data-binary @$f/spans.pb "$u"
	send json -H "$js" --data-binary @$f/spans.json "$u"
	send gzip -H "$js" -H 'Content-Encoding: gzip' --data-binary @"$REFEREE.gz" "$u"
	send not-protobuf -H "$pb" --data-binary 'not protobuf at all' "$u"
	send not-json -H "$js" --data-binary '{"resourceSpans": [' "$u"
	send bad-id -H "$js" --data-binary '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"00","spanId":"01"}]}]}]}' "$u"
	send too-large -H "$pb" --data-binary @"$REFEREE.large" "$u"
	send too-many -H "$js" --data-binary @"$REFEREE.many" "$u"
	send content-type -H 'Content-Type: text/plain' --data-binary @$f/spans.json "$u"
	send brotli -H "$js" -H 'Content-Encoding: br' --data-binary @$f/spans.json "$u"
	send method "$u"
	send not-found -H "$js" --data-binary @$f/spans.json "${u%/v1/traces}/v1/metrics"
	mv "$REFEREE.tmp" "$REFEREE"
	exec "$@"
	EOS
	export REFEREE="$BATS_TEST_TMPDIR/referee"
	gzip -c tests/fixtures/otlp/spans.json >"$REFEREE.gz"
	head -c $((5 * 1024 * 1024)) /dev/zero >"$REFEREE.large"
	# 2049 spans, one more than a request may hold
	python3 -c 'import json, sys
d = json.load(open("tests/fixtures/otlp/spans.json"))
s = d["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
d["resourceSpans"][0]["scopeSpans"][0]["spans"] = [dict(s, spanId="%016x" % (i + 1)) for i in range(2049)]
json.dump(d, sys.stdout)' >"$REFEREE.many"
	worker=(sh "$BATS_TEST_TMPDIR/referee.sh" "${worker[@]}")
}

@test "bodies that do not decode, too large, of another type or with too many spans are refused with their status, counted, and the run goes on" {
	referee
	traced ""
	cat "$err" >&2
	[ "$status" -eq 0 ]
	assert_equal "$(tr '\n' ,  <"$REFEREE")" \
		"protobuf 200,json 200,gzip 200,not-protobuf 400,not-json 400,bad-id 400,too-large 413,too-many 413,content-type 415,brotli 415,method 405,not-found 404,"
	# an empty ExportTraceServiceResponse in the request's encoding
	assert_equal "$(cat "$REFEREE.json")" "{}"
	assert_equal "$(wc -c <"$REFEREE.protobuf")" 0
	assert_equal "$(jq -r .code "$REFEREE.not-json")" 3
	assert_equal "$(awk -F '\t' '$1 == "receiver" { print $5 }' "$out")" \
		'{"bad-json":2,"bad-protobuf":1,"content-encoding":1,"content-type":1,"method":1,"not-found":1,"too-large":1,"too-many-spans":1}'
	# curl's three bodies of two spans each, with the pid of their resource
	assert_equal "$(awk -F '\t' '$1 == "span" && $10 == 4242 { print $5, $11, $12, $17 }' "$out" | sort | uniq -c | awk '{ $1 = $1 } 1' | tr '\n' ,)" \
		"2 invoice line -1 \\N json,1 invoice line -1 \\N protobuf,2 pg.query:INSERT idem -1 \\N json,1 pg.query:INSERT idem -1 \\N protobuf,"
	# the attributes of every kind, as JSON, and the event
	assert_equal "$(awk -F '\t' '$1 == "span" && $10 == 4242 && $5 ~ /INSERT/ && $17 == "protobuf" { print $15; print $16; print $7, $8, $9, $6, $14 }' "$out")" \
		'{"db.query.text":"INSERT INTO demo.invoice_lines VALUES ($1)","server.port":5432,"db.ok":true,"db.ratio":0.5,"db.rows":[1,2,3],"db.names":["a","b\\tc"]}
[{"name":"retry","time":"2026-11-30T00:53:20.002000Z","attributes":{"retry.after_ms":20}}]
2026-11-30T00:53:20.001000Z 2026-11-30T00:53:20.003000Z error 3 invoice-worker'
	# and the worker's own spans came all the same, the killed attempt's too
	assert_equal "$(rows_of span_lost "$out")" 1
	[ "$(awk -F '\t' '$1 == "span" && $12 == "job-0002" && $13 == 1' "$out" | wc -l)" -ge 3 ]
	requests=$(awk -F '\t' '$1 == "receiver" { print $3 }' "$out")
	[ "$requests" -ge 13 ]
}

# env_worker FILE: a worker that writes its OTEL_ variables to FILE, then
# runs pg-worker.js. It writes beside FILE and renames: a worker started
# again after a kill and stopped at the run's end, between the shell's
# truncating and sort's writing, would otherwise leave FILE empty.
env_worker() {
	worker=(sh -c 'env | grep "^OTEL_" | sort >"$0.$$" && mv "$0.$$" "$0"; exec node tests/fixtures/workers/pg-worker.js unique' "$1")
}

@test "kill-at gives each worker the OpenTelemetry variables, the endpoint its receiver's" {
	env_worker "$BATS_TEST_TMPDIR/env"
	run_pipeline "$seed" 30s "${worker[@]}"
	[ "$status" -eq 0 ]
	endpoint=$(awk -F '\t' '$1 == "receiver" { print $2 }' "$out")
	[[ "$endpoint" =~ ^http://127\.0\.0\.1:[0-9]+/v1/traces$ ]]
	assert_equal "$(tr '\n' , <"$BATS_TEST_TMPDIR/env")" \
		"OTEL_BSP_SCHEDULE_DELAY=50,OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=$endpoint,OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf,OTEL_LOGS_EXPORTER=none,OTEL_METRICS_EXPORTER=none,OTEL_TRACES_EXPORTER=otlp,"
	# the worker's choice of protocol and exporters is left as it is
	OTEL_EXPORTER_OTLP_PROTOCOL=http/json OTEL_METRICS_EXPORTER=console run_pipeline "$seed" 30s "${worker[@]}"
	[ "$status" -eq 0 ]
	assert_equal "$(grep PROTOCOL "$BATS_TEST_TMPDIR/env")" "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"
	assert_equal "$(grep METRICS "$BATS_TEST_TMPDIR/env")" "OTEL_METRICS_EXPORTER=console"
}

@test "the user's own OTEL_EXPORTER_OTLP_ENDPOINT is left alone, and said so" {
	env_worker "$BATS_TEST_TMPDIR/env"
	status=0
	seed-gen "$seed" | count-effects --before | dup-publish |
		OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9 kill-at -D 30s -- "${worker[@]}" 2>"$err" |
		count-effects >"$out" || status=$?
	[ "$status" -eq 0 ]
	assert_equal "$(cat "$BATS_TEST_TMPDIR/env")" "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9"
	grep -Fqx 'kill-at: the environment names an OTLP endpoint (http://127.0.0.1:9): the workers'"'"' spans go there, no span receiver' "$err"
	assert_equal "$(awk -F '\t' '$1 == "receiver" { print $2, $3, $4, $5, $6, $7 }' "$out")" "http://127.0.0.1:9 0 0 {} 0 user"
	assert_equal "$(rows_of span "$out")" 0
}

@test "--no-spans sets nothing and starts no receiver" {
	env_worker "$BATS_TEST_TMPDIR/env"
	status=0
	seed-gen "$seed" | count-effects --before | dup-publish |
		kill-at -D 30s --no-spans -- "${worker[@]}" | count-effects >"$out" 2>"$err" || status=$?
	[ "$status" -eq 0 ]
	assert_equal "$(cat "$BATS_TEST_TMPDIR/env")" ""
	assert_equal "$(awk -F '\t' '$1 == "receiver" { print $3, $4, $5, $6, $7 }' "$out")" "0 0 {} 0 off"
	assert_equal "$(rows_of span "$out")" 0
}
