#!/usr/bin/env bats
# seed-sanitize: real payloads made into seed jobs of the same shape, no
# real string left, duplicate keys kept duplicate, and a seed made of them
# rehearsed.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	key="$BATS_TEST_TMPDIR/key"
	head -c 32 /dev/urandom >"$key"
	chmod 600 "$key"
	# real invoice lines: invoice INV-77 line 1 twice (a redelivered job of
	# the same business event), personal strings in a nested object and
	# an array
	cat >"$BATS_TEST_TMPDIR/real.jsonl" <<-'JSON'
		{"invoice_id": "INV-77", "line_no": 1, "amount_cents": 1234, "currency": "EUR", "customer": {"name": "Ada Lovelace", "email": "ada@example.org", "vip": true}, "tags": ["Ada Lovelace", "London"]}
		{"invoice_id": "INV-78", "line_no": 1, "amount_cents": 990, "currency": "EUR", "customer": {"name": "Grace Hopper", "email": "grace@example.org", "vip": false}, "tags": []}
		{"invoice_id": "INV-77", "line_no": 1, "amount_cents": 1234, "currency": "EUR", "customer": {"name": "Ada Lovelace", "email": "ada@example.org", "vip": true}, "tags": ["Ada Lovelace", "London"]}
		{"invoice_id": "INV-79", "line_no": 2, "amount_cents": 15, "currency": "GBP", "customer": {"name": "Alan Turing", "email": "alan@example.org", "vip": false}, "tags": ["Wilmslow"]}
	JSON
}

# Every string of the real payloads, at any depth.
real_strings() {
	python3 -c '
import json, sys
def walk(v):
    if isinstance(v, str): print(v)
    elif isinstance(v, dict): [walk(x) for x in v.values()]
    elif isinstance(v, list): [walk(x) for x in v]
for line in open(sys.argv[1]): walk(json.loads(line))
' "$1" | sort -u
}

@test "no real string is left anywhere in the output, and the report says what was replaced" {
	seed-sanitize -k "$key" -c amount_cents=100 "$BATS_TEST_TMPDIR/real.jsonl" \
		>"$BATS_TEST_TMPDIR/jobs.yaml" 2>"$BATS_TEST_TMPDIR/report"
	[ "$(real_strings "$BATS_TEST_TMPDIR/real.jsonl" | wc -l)" -eq 13 ]
	real_strings "$BATS_TEST_TMPDIR/real.jsonl" | while read -r s; do
		if grep -qF -- "$s" "$BATS_TEST_TMPDIR/jobs.yaml" "$BATS_TEST_TMPDIR/report"; then
			echo "found in the output: $s" >&2
			exit 1
		fi
	done
	# nor the key
	run ! grep -qF -- "$(od -An -tx1 "$key" | tr -d ' \n')" "$BATS_TEST_TMPDIR/jobs.yaml"
	assert_equal "$(cat "$BATS_TEST_TMPDIR/report")" "$(printf '%s\n' \
		"seed-sanitize: $BATS_TEST_TMPDIR/real.jsonl: 4 payloads" \
		'seed-sanitize: amount_cents: 4 integers coarsened' \
		'seed-sanitize: currency: 4 strings replaced by 2 pseudonyms' \
		'seed-sanitize: customer.email: 4 strings replaced by 3 pseudonyms' \
		'seed-sanitize: customer.name: 4 strings replaced by 3 pseudonyms' \
		'seed-sanitize: invoice_id: 4 strings replaced by 3 pseudonyms' \
		'seed-sanitize: line_no: 4 integers kept' \
		'seed-sanitize: tags[]: 5 strings replaced by 3 pseudonyms')"
}

@test "types and field names stay, duplicate business keys stay duplicate, equal strings equal" {
	seed-sanitize -k "$key" -c amount_cents=100 -p real "$BATS_TEST_TMPDIR/real.jsonl" >"$BATS_TEST_TMPDIR/jobs.yaml"
	python3 - "$BATS_TEST_TMPDIR/real.jsonl" "$BATS_TEST_TMPDIR/jobs.yaml" <<-'PY'
		import json, re, sys
		real = [json.loads(l) for l in open(sys.argv[1])]
		lines = [l for l in open(sys.argv[2]) if l.startswith('  - ')]
		fake = [json.loads(re.match(r'  - \{ id: "(real-\d{4})", payload: (.*) \}$', l).group(2)) for l in lines]
		ids = [re.match(r'  - \{ id: "(real-\d{4})"', l).group(1) for l in lines]
		assert ids == ['real-0001', 'real-0002', 'real-0003', 'real-0004'], ids
		def shape(v):
		    if isinstance(v, dict): return {k: shape(x) for k, x in v.items()}
		    if isinstance(v, list): return [shape(x) for x in v]
		    return type(v).__name__
		for r, f in zip(real, fake):
		    assert shape(r) == shape(f), (r, f)
		    assert list(r) == list(f)
		    assert f['line_no'] == r['line_no'] and f['amount_cents'] == r['amount_cents'] // 100 * 100
		    assert f['customer']['vip'] == r['customer']['vip']
		key = lambda p: (p['invoice_id'], p['line_no'])
		# the same business key, and only those, the same pseudonyms
		for i in range(4):
		    for j in range(4):
		        assert (key(real[i]) == key(real[j])) == (key(fake[i]) == key(fake[j]))
		# equal strings are equal across fields: the name in tags and in customer
		assert fake[0]['tags'][0] == fake[0]['customer']['name']
		schema = [l for l in open(sys.argv[2]) if l.startswith('payload_schema: ')][0]
		assert json.loads(schema[len('payload_schema: '):]) == {"invoice_id": "string", "line_no": "integer", "amount_cents": "integer", "currency": "string", "customer": "object", "tags": "array"}
	PY
	# the same key gives the same file; another key other pseudonyms
	seed-sanitize -k "$key" -c amount_cents=100 -p real "$BATS_TEST_TMPDIR/real.jsonl" 2>/dev/null |
		cmp - "$BATS_TEST_TMPDIR/jobs.yaml"
	IDEM_SANITIZE_KEY=another-key-of-16-bytes seed-sanitize -c amount_cents=100 -p real \
		"$BATS_TEST_TMPDIR/real.jsonl" 2>/dev/null >"$BATS_TEST_TMPDIR/other.yaml"
	! cmp -s "$BATS_TEST_TMPDIR/other.yaml" "$BATS_TEST_TMPDIR/jobs.yaml"
}

@test "a seed made of the sanitized jobs is rehearsed: the duplicate key is one effect" {
	# the seed: its frame, with the sanitized jobs and their schema put
	# between the frame's effect and its scenarios
	frame=tests/fixtures/seeds/sanitized-frame.yaml
	{
		sed '/^scenarios:/,$d' "$frame"
		seed-sanitize -k "$key" "$BATS_TEST_TMPDIR/real.jsonl" 2>/dev/null
		sed -n '/^scenarios:/,$p' "$frame"
	} >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | count-effects --before | dup-publish |
		kill-at -D 30s -- idem-worker --guard unique | count-effects >"$BATS_TEST_TMPDIR/out"
	assert_equal "$(awk -F '\t' '$1 == "count" && $2 == "after" && $3 == "total" { print $4 "=" $6 }' "$BATS_TEST_TMPDIR/out" | tr '\n' ' ')" \
		"effects=3 duplicates=0 missing=0 unexpected=0 conflicts=0 pending=0 "
	assert_equal "$(rows_of kill "$BATS_TEST_TMPDIR/out")" 1
	grep -q '^baseline	passed	3	3	0	2	2	0	0$' "$BATS_TEST_TMPDIR/out"
}

@test "input it cannot make safe is refused, naming the line and field, with nothing written" {
	bad() {
		printf '%s\n' "$@" >"$BATS_TEST_TMPDIR/bad.jsonl"
		run --separate-stderr -2 seed-sanitize -k "$key" "$BATS_TEST_TMPDIR/bad.jsonl"
		assert_equal "$output" ""
	}
	bad '{"a": "x"}' 'not json'
	[[ "$stderr" == "seed-sanitize: $BATS_TEST_TMPDIR/bad.jsonl:2: not JSON: "* ]]
	bad '{"a": "x"}' ''
	[[ "$stderr" == "seed-sanitize: $BATS_TEST_TMPDIR/bad.jsonl:2: not JSON: "* ]]
	bad '["x"]'
	assert_equal "$stderr" "seed-sanitize: $BATS_TEST_TMPDIR/bad.jsonl:1: not a JSON object; a payload is one"
	bad '{"amount": 12.5}'
	assert_equal "$stderr" "seed-sanitize: $BATS_TEST_TMPDIR/bad.jsonl:1: field amount: a real number; a seed takes integers only (such as cents)"
	bad '{"by_email": {"ada@example.org": "x"}}'
	assert_equal "$stderr" "seed-sanitize: $BATS_TEST_TMPDIR/bad.jsonl:1: field by_email.\"ada@example.org\": not a plain name (a letter or _, then letters, digits, _ or -, at most 64): it may be data"
	bad "{\"a\": $(printf '[%.0s' $(seq 40))\"deep\"$(printf ']%.0s' $(seq 40))}"
	[[ "$stderr" == *"nested deeper than 32; it cannot reach the strings there" ]]
	bad '{"a": "x", "a": "y"}'
	[[ "$stderr" == "seed-sanitize: $BATS_TEST_TMPDIR/bad.jsonl:1: not JSON: duplicate object key"* ]]
	bad '{"a": "x"}' '{"a": 1}'
	assert_equal "$stderr" "seed-sanitize: $BATS_TEST_TMPDIR/bad.jsonl:2: not the shape of the first line (its fields and their types): a seed's payloads have one shape"
	bad '{"a": null}'
	assert_equal "$stderr" "seed-sanitize: $BATS_TEST_TMPDIR/bad.jsonl:1: field a: null; a seed's payload field has a type"
	# the key: too open, too short, or none
	chmod 644 "$key"
	run -2 seed-sanitize -k "$key" "$BATS_TEST_TMPDIR/real.jsonl"
	[[ "$output" == *"permissions 0644 are too open"* ]]
	printf short >"$BATS_TEST_TMPDIR/short"
	chmod 600 "$BATS_TEST_TMPDIR/short"
	run -2 seed-sanitize -k "$BATS_TEST_TMPDIR/short" "$BATS_TEST_TMPDIR/real.jsonl"
	assert_equal "$output" "seed-sanitize: $BATS_TEST_TMPDIR/short: shorter than 16 bytes"
	run -2 env -u IDEM_SANITIZE_KEY seed-sanitize "$BATS_TEST_TMPDIR/real.jsonl"
	assert_equal "$output" "seed-sanitize: no key: give -k key-file, or set IDEM_SANITIZE_KEY"
}
