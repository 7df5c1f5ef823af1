#!/usr/bin/env bats
# The trace beside the record (idem-record(5), THE TRACE): made from a
# real run of the stall seed, with span rows of idem-tsv 1.9 added to its
# stream as a worker's OpenTelemetry SDK would send them, and read by a
# checker that is not idem (python3's json, every OTLP field the
# ExportTraceServiceRequest needs, the ids' lengths); held to its SHA-256
# by verify-record; its trace ids the same on a rerun of the seed at the
# same revision.

load helper
load sandbox-tests

seed=tests/fixtures/seeds/stall-invoice-line.yaml

setup() {
	sandbox_test_setup
	idem-worker --setup -g unique
}

# with_spans STREAM: the stream with, for each attempt, a worker's span
# whose parent never came and a child of it, and for each kill a
# span_lost row naming that parent.
with_spans() {
	cat "$1"
	awk -F '\t' 'BEGIN { OFS = "\t" }
		$1 == "attempt" {
			n++
			id = sprintf("%016x", n)
			child = sprintf("%016x", n + 4096)
			print "span", "0123456789abcdef0123456789abcdef", id, "ffffffffffffffff", "INSERT idem", 3,
				$6, $6, "ok", $5, 0, $2, $4, "pg", "{\"db.system\":\"postgresql\"}",
				"[{\"name\":\"sent\",\"time\":\"" $6 "\",\"attributes\":{\"n\":1}}]", "json"
			print "span", "0123456789abcdef0123456789abcdef", child, id, "pg.query:INSERT", 3,
				$6, $6, "unset", $5, 0, $2, $4, "\\N", "{}", "[]", "protobuf"
		}
		$1 == "kill" { print "span_lost", $3, $4, $6, "[\"ffffffffffffffff\"]", $7 }' "$1"
}

# record_of_run [OPTION...]: the run's stream, spans added, made a signed
# record of the seed committed in a new repository, mkrecord given the
# options; sets record and trace.
record_of_run() {
	signing_repo "$BATS_TEST_TMPDIR/repo"
	cp "$BATS_TEST_DIRNAME/../$seed" seed.yaml
	git add seed.yaml && git commit -q -m seed
	sed "s#$seed#seed.yaml#" "$out" >run.tsv
	with_spans run.tsv >spans.tsv
	record=$(mkrecord -k "$key" "$@" <spans.tsv)
	trace=${record%.yaml}.trace.json
}

# otlp_check FILE: python3 reads the trace as OTLP JSON: every field an
# ExportTraceServiceRequest's spans need, of its type, ids of their
# lengths in lowercase hex, times as decimal strings, an attempt's span
# under its job's, the worker's under a span of the trace. Prints
# "JOBS ATTEMPTS WORKER-SPANS LOST-EVENTS".
otlp_check() {
	python3 - "$1" <<'EOF'
import json, re, sys
t = json.load(open(sys.argv[1]))
hexre = lambda n: re.compile('^[0-9a-f]{%d}$' % n)
def value(v):
    assert isinstance(v, dict) and len(v) == 1, v
    (k, x), = v.items()
    assert k in ('stringValue', 'intValue', 'boolValue', 'doubleValue', 'arrayValue', 'kvlistValue'), k
    if k == 'intValue': assert re.match(r'^-?\d+$', x), x
    if k == 'arrayValue': [value(y) for y in x['values']]
    if k == 'kvlistValue': attrs(x['values'])
def attrs(a):
    assert isinstance(a, list)
    for kv in a:
        assert set(kv) == {'key', 'value'} and isinstance(kv['key'], str), kv
        value(kv['value'])
def nanos(s):
    assert isinstance(s, str) and re.match(r'^\d{19}$', s), s
    return int(s)
jobs = attempts = worker = lost = 0
ids = {}
rs = t['resourceSpans']
assert len(rs) == 1
attrs(rs[0]['resource']['attributes'])
for ss in rs[0]['scopeSpans']:
    assert isinstance(ss['scope']['name'], str)
    for s in ss['spans']:
        assert hexre(32).match(s['traceId']) and hexre(16).match(s['spanId']), s
        assert s['parentSpanId'] == '' or hexre(16).match(s['parentSpanId']), s
        assert isinstance(s['name'], str) and s['kind'] in range(6), s
        assert nanos(s['startTimeUnixNano']) <= nanos(s['endTimeUnixNano']), s
        attrs(s['attributes'])
        for e in s['events']:
            nanos(e['timeUnixNano']); assert isinstance(e['name'], str); attrs(e['attributes'])
            lost += e['name'] == 'spans lost'
        assert s['status']['code'] in (0, 1, 2)
        assert s['spanId'] not in ids, 'span id twice: ' + s['spanId']
        ids[s['spanId']] = s
for s in ids.values():
    if s['kind'] == 1 and s['name'].startswith('job '):
        jobs += 1; assert s['parentSpanId'] == ''
    elif s['kind'] == 5:
        attempts += 1
        p = ids[s['parentSpanId']]; assert p['name'].startswith('job ') and p['traceId'] == s['traceId']
        a = {kv['key']: kv['value'] for kv in s['attributes']}
        assert a['messaging.system'] == {'stringValue': 'idem'}, a
        for k in ('messaging.destination.name', 'messaging.message.id', 'idem.message.delivery_count'):
            assert k in a, k
    else:
        worker += 1
        p = ids[s['parentSpanId']]; assert p['traceId'] == s['traceId']
print(jobs, attempts, worker, lost)
EOF
}

# The trace ids of a trace file, by job, sorted.
trace_ids() {
	python3 -c 'import json, sys
for ss in json.load(open(sys.argv[1]))["resourceSpans"][0]["scopeSpans"]:
    for s in ss["spans"]:
        if s["name"].startswith("job "): print(s["name"], s["traceId"], s["spanId"])' "$1" | sort
}

@test "the trace of a real run: OTLP JSON as a reader that is not idem reads it, the worker's spans under their attempts, the lost ones named" {
	run_pipeline "$seed" 60s idem-worker --guard unique
	[ "$status" -eq 0 ]
	record_of_run -c
	[ -f "$trace" ]
	attempts=$(grep -c '^attempt	' run.tsv)
	kills=$(grep -c '^kill	' run.tsv)
	assert_equal "$(otlp_check "$trace")" "5 $attempts $((2 * attempts)) $kills"
	# in the signed commit with the record, its hash in the record
	git show --stat HEAD | grep -q "${trace#records/}"
	grep -q "sha256: \"$(sha256sum "$trace" | cut -d' ' -f1)\"" "$record"
	# the record names the spans the killed attempt lost
	assert_equal "$(grep -A1 '^  spans_lost:$' "$record" | grep -c '^  - "ffffffffffffffff"$')" "$kills"
	# the handoff names the worker's statements beside each attempt
	grep -F 'killed at after-commit' "${record%.yaml}.md" |
		grep -qF '| `INSERT idem` `pg.query:INSERT` ; lost with the kill: `ffffffffffffffff`'
	[ "$(grep -c '| `INSERT idem` `pg.query:INSERT`' "${record%.yaml}.md")" -eq "$attempts" ]
	run verify-record -f records/allowed_signers "$record"
	[ "$status" -eq 0 ]
}

@test "a changed byte in the trace, or no trace, fails verify-record with one line saying so" {
	run_pipeline "$seed" 60s idem-worker --guard unique
	record_of_run
	sed -i '0,/"idem"/s//"idex"/' "$trace"
	run verify-record -f records/allowed_signers "$record"
	[ "$status" -eq 1 ]
	assert_equal "$(grep -c ': trace: ' <<<"$output")" 1
	grep -q "trace: $trace has SHA-256 .*not the trace that was signed" <<<"$output"
	rm "$trace"
	run verify-record -f records/allowed_signers "$record"
	[ "$status" -eq 1 ]
	grep -q "trace: $trace: No such file or directory" <<<"$output"
}

# The revision is the one the record names, the repository's HEAD when
# it was made: the first record is not committed, so that the second is
# made at the same one.
@test "a rerun of the seed at the same revision gives the same trace ids" {
	run_pipeline "$seed" 60s idem-worker --guard unique
	record_of_run
	first=$(trace_ids "$trace")
	[ "$(wc -l <<<"$first")" -eq 5 ]
	cd "$BATS_TEST_DIRNAME/.."
	queue_reset
	idem-worker --setup -g unique
	run_pipeline "$seed" 60s idem-worker --guard unique
	cd "$BATS_TEST_TMPDIR/repo"
	sed "s#$seed#seed.yaml#" "$out" >run2.tsv
	second=$(mkrecord -k "$key" <run2.tsv)
	[ "$second" != "$record" ]
	assert_equal "$(trace_ids "${second%.yaml}.trace.json")" "$first"
}

@test "the trace goes to IDEM_OTLP_ENDPOINT as OTLP/HTTP JSON; an endpoint that does not answer is a warning, not a failed record" {
	run_pipeline "$seed" 60s idem-worker --guard unique
	signing_repo "$BATS_TEST_TMPDIR/repo"
	cp "$BATS_TEST_DIRNAME/../$seed" seed.yaml
	git add seed.yaml && git commit -q -m seed
	sed "s#$seed#seed.yaml#" "$out" >run.tsv
	port=$(free_port)
	IDEM_OTLP_ENDPOINT="http://127.0.0.1:$port/v1/traces" run --separate-stderr mkrecord -k "$key" <run.tsv
	[ "$status" -eq 0 ]
	[ -f "${output%.yaml}.trace.json" ]
	grep -q "^mkrecord: IDEM_OTLP_ENDPOINT: the trace was not sent: http://127.0.0.1:$port/v1/traces" <<<"$stderr"
	# a collector that takes it: the bytes of the file, as JSON
	python3 -c 'import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(sys.argv[1], "wb") as f:
            f.write(self.headers["Content-Type"].encode() + b"\n" + self.path.encode() + b"\n" + body)
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H)
open(sys.argv[3], "w").close()
s.handle_request()' "$BATS_TEST_TMPDIR/got" "$port" "$BATS_TEST_TMPDIR/ready" &
	collector=$!
	for _ in $(seq 50); do
		[ -e "$BATS_TEST_TMPDIR/ready" ] && break
		sleep 0.1
	done
	IDEM_OTLP_ENDPOINT="http://127.0.0.1:$port/v1/traces" run --separate-stderr mkrecord -k "$key" <run.tsv
	wait "$collector"
	[ "$status" -eq 0 ]
	assert_equal "$stderr" ""
	assert_equal "$(sed -n 1,2p "$BATS_TEST_TMPDIR/got")" "application/json
/v1/traces"
	cmp <(sed 1,2d "$BATS_TEST_TMPDIR/got") "${output%.yaml}.trace.json"
}
