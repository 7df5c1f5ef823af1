#!/usr/bin/env bats
# seed-gen: the stream it writes, its determinism, its refusals, --init and --ticket.

load helper

setup() {
	cd "$BATS_TEST_DIRNAME/.."
	out="$BATS_TEST_TMPDIR/out"
}

@test "seed-gen writes the header, one seed and expect row, the scenarios and every job" {
	seed-gen seeds/invoice-line.yaml >"$out"
	assert_equal "$(head -n 1 "$out")" "$(printf '#idem-tsv\t1.6')"
	assert_equal "$(rows_of seed "$out")" 1
	assert_equal "$(rows_of expect "$out")" 1
	assert_equal "$(rows_of scenario "$out")" 5
	assert_equal "$(rows_of job "$out")" 6
	assert_equal "$(grep '^expect' "$out")" "$(printf 'expect\t6\t0\t0\t0\t6')"
	# the seed row carries the seed file's own SHA-256
	assert_equal "$(grep '^seed' "$out" | cut -f 3)" "$(sha256sum seeds/invoice-line.yaml | cut -d ' ' -f 1)"
}

@test "the seed row ends with the queue's kind: idem for a text queue, the kind of a mapping" {
	seed-gen tests/fixtures/seeds/minimal.yaml >"$out"
	assert_equal "$(grep '^seed' "$out" | awk -F '\t' '{ print NF, $6, $NF }')" "22 rehearsal_minimal idem"
	seed-gen tests/fixtures/seeds/queue-pg-boss.yaml >"$out"
	assert_equal "$(grep '^seed' "$out" | awk -F '\t' '{ print NF, $6, $NF }')" "22 send-confirmation pg-boss"
	# the mapping of kind idem is the text form: the same stream, but for
	# the seed's path and hash
	sed 's/^queue: rehearsal_minimal$/queue: { kind: idem, name: rehearsal_minimal }/' \
		tests/fixtures/seeds/minimal.yaml >"$BATS_TEST_TMPDIR/mapping.yaml"
	seed-gen tests/fixtures/seeds/minimal.yaml | cut -f 2,3 --complement >"$out.text"
	seed-gen "$BATS_TEST_TMPDIR/mapping.yaml" | cut -f 2,3 --complement >"$out.mapping"
	! cmp -s tests/fixtures/seeds/minimal.yaml "$BATS_TEST_TMPDIR/mapping.yaml"
	cmp "$out.text" "$out.mapping"
}

@test "the external call's row comes right after the seed row; the expect row ends with its count" {
	seed-gen seeds/invoice-line.yaml >"$out"
	assert_equal "$(sed -n 3p "$out")" "$(printf 'external\tpayment charge\t["invoice_id","line_no"]\tfalse\tdemo.pending_calls\towner')"
	assert_equal "$(rows_of external "$out")" 1
	seed-gen tests/fixtures/seeds/external.yaml >"$out"
	assert_equal "$(sed -n 3,4p "$out")" "$(printf 'external\tpayment charge\t["invoice_id","line_no"]\ttrue\tdemo.pending_calls\towner\nexpect\t3\t0\t0\t0\t3')"
	# without pending calls, the table and its owner column are \N
	sed '/^  pending: /d' tests/fixtures/seeds/external.yaml >"$BATS_TEST_TMPDIR/no-pending.yaml"
	assert_equal "$(seed-gen "$BATS_TEST_TMPDIR/no-pending.yaml" | sed -n 3p)" \
		"$(printf 'external\tpayment charge\t["invoice_id","line_no"]\ttrue\t\\N\t\\N')"
	# a seed without one has no external row, and \N for its count
	seed-gen tests/fixtures/seeds/minimal.yaml >"$out"
	assert_equal "$(rows_of external "$out")" 0
	assert_equal "$(grep '^expect' "$out")" "$(printf 'expect\t1\t0\t0\t0\t\\N')"
}

@test "a vendor fault is a scenario of fault vendor-error or vendor-timeout, without step or attempt" {
	seed-gen tests/fixtures/seeds/external.yaml >"$out"
	assert_equal "$(grep '^scenario' "$out")" "$(printf 'scenario\tcharge-killed\tkill\texternal-call\t1\t0\t0\nscenario\tvendor-error\tvendor-error\t\\N\t\\N\t0\t0\nscenario\tvendor-timeout\tvendor-timeout\t\\N\t\\N\t1\t100')"
}

@test "the payload hash is SHA-256 of the canonical payload bytes" {
	seed-gen seeds/invoice-line.yaml | grep '^job' | while IFS="$(printf '\t')" read -r kind id key payload hash scenario; do
		assert_equal "$(printf '%s' "$payload" | sha256sum | cut -d ' ' -f 1)" "$hash"
	done
}

@test "seed-gen run twice gives identical bytes, generated jobs included" {
	seed-gen tests/fixtures/seeds/generate.yaml >"$out.1"
	seed-gen tests/fixtures/seeds/generate.yaml >"$out.2"
	cmp "$out.1" "$out.2"
	assert_equal "$(rows_of job "$out.1")" 1001
	grep -q "^job	gen-001000	" "$out.1"
}

@test "a volume run selects the same jobs for its faults every time" {
	seed-gen tests/fixtures/seeds/generate.yaml | awk -F '\t' '$1 == "job" && $6 != "\\N" { print $2, $6 }' >"$out.1"
	seed-gen tests/fixtures/seeds/generate.yaml | awk -F '\t' '$1 == "job" && $6 != "\\N" { print $2, $6 }' >"$out.2"
	cmp "$out.1" "$out.2"
	[ "$(grep -c ' dups$' "$out.1")" -gt 50 ]
	[ "$(grep -c ' kills$' "$out.1")" -gt 5 ]
}

@test "generated jobs and their selection are what idem-seed(5) says, as Python computes them" {
	seed-gen tests/fixtures/seeds/generate-named.yaml >"$out"
	python3 - "$out" <<'PY'
import hashlib, json, sys

def sha256(data):
    return hashlib.sha256(data).digest()

count, width = 3000, 6
schema = [("order_id", "string"), ("line_no", "integer"), ("amount_cents", "integer"),
          ("urgent", "boolean"), ("extra", "object"), ("tags", "array")]
key = ["order_id", "line_no"]
named = {"gen-000007": "named", "gen-002999": "named", "gen-000100": "race"}
every = [("dups", 10), ("kills", 7)]
want = []
for n in range(1, count + 1):
    job_id = "gen-%0*d" % (width, n)
    h = int.from_bytes(sha256(job_id.encode())[:4], "big")
    payload = {}
    for name, kind in schema:
        payload[name] = {"string": "%s-%0*d" % (name, width, n),
                         "integer": n if name in key else h % 100000,
                         "boolean": h % 2 == 1, "object": {}, "array": []}[kind]
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    scenario = named.get(job_id)
    for name, k in every:
        if scenario is None and int.from_bytes(sha256(name.encode() + b"\0" + job_id.encode())[:8], "big") % k == 0:
            scenario = name
    want.append(["job", job_id, json.dumps([payload[f] for f in key], separators=(",", ":")), text,
                 hashlib.sha256(text.encode()).hexdigest(), scenario or "\\N"])
got = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.startswith("job\tgen-")]
assert len(got) == len(want), (len(got), len(want))
for g, w in zip(got, want):
    assert g == w, (g, w)
PY
}

@test "seed-gen makes generated jobs as it writes them: a million within 200 MB of address space" {
	hard_limit
	sed 's/count: 1000 }/count: 1000000 }/' tests/fixtures/seeds/generate.yaml >"$BATS_TEST_TMPDIR/million.yaml"
	$limit seed-gen "$BATS_TEST_TMPDIR/million.yaml" >"$out"
	assert_equal "$(rows_of job "$out")" 1000001
	assert_equal "$(tail -n 1 "$out" | cut -f 2,3)" "$(printf 'gen-1000000\t["order_id-1000000",1000000]')"
}

@test "tabs, newlines, backslashes and \\N in ids, keys and payloads are escaped, not lost" {
	seed-gen tests/fixtures/seeds/escapes.yaml >"$out"
	# every row of a known kind has its fixed number of fields
	assert_equal "$(awk -F '\t' '$1 == "job" && NF != 6' "$out")" ""
	# an independent decoder of COPY text escaping gets the seed's values back
	python3 - "$out" <<'PY'
import json, sys

def unescape(field):
    if field == "\\N":
        return None
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\":
            out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[field[i + 1]])
            i += 2
        else:
            out.append(field[i])
            i += 1
    return "".join(out)

rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1], encoding="utf-8")
        if line.startswith("job\t")]
got = {unescape(r[1]): (unescape(r[2]), json.loads(unescape(r[3]))) for r in rows}
want = {
    "job\tone": ("tab\there", {"name": "tab\there", "note": "line\nbreak\r\n"}),
    "job-two": ("back\\slash \\N \\t",
                {"name": "back\\slash \\N \\t", "note": "caf\u00e9 \u20ac \U0001F600"}),
    "job-three": ("\\N", {"name": "\\N", "note": "quote \" and / and \u0001"}),
}
assert got == want, (got, want)
PY
}

@test "two jobs with one business key and one payload are accepted; other payloads only when declared" {
	seed-gen tests/fixtures/seeds/same-key.yaml >"$out"
	assert_equal "$(rows_of job "$out")" 4
	grep -q "^scenario	conflict	same-key	" "$out"
}

@test "every refusal names file, line, column and field, exits 2 and writes nothing" {
	for seed in tests/fixtures/bad/*.yaml; do
		assert_refused "tests/golden/seed-gen/$(basename "$seed" .yaml).err" seed-gen "$seed"
	done
}

@test "a seed file that does not exist is a usage error" {
	run seed-gen tests/fixtures/seeds/absent.yaml
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: tests/fixtures/seeds/absent.yaml: No such file or directory"
}

@test "--init writes a commented skeleton that seed-gen accepts" {
	seed-gen --init billing-email >"$out"
	grep -q '^rehearsal: billing-email$' "$out"
	grep -q '^queue: rehearsal_billing_email ' "$out"
	grep -q '^# ' "$out"
	seed-gen "$out" >/dev/null
	# and the queue of another kind it suggests in a comment
	sed 's/^queue: /# /; s/^# queue: /queue: /' "$out" >"$out.pg-boss"
	assert_equal "$(seed-gen "$out.pg-boss" | grep '^seed' | awk -F '\t' '{ print $6, $NF }')" \
		"rehearsal_billing_email pg-boss"
	# and the external call it suggests, with the expect line that goes with it
	sed -e 's/^# external: .*/external:/' -e 's/^#   \([a-z_]*:.*\)/  \1/' -e '/^expect: /d' \
		-e 's/^# expect: /expect: /' "$out" >"$out.external"
	assert_equal "$(seed-gen "$out.external" | sed -n '3p;4p')" \
		"$(printf 'external\tpayment charge\t["order_id"]\tfalse\tdemo.pending_calls\towner\nexpect\t3\t0\t0\t0\t3')"
}

@test "--init refuses a name that would not be a plain YAML value" {
	run seed-gen --init 'bad: name'
	[ "$status" -eq 2 ]
	[[ "$output" == "seed-gen: --init bad: name: a rehearsal name is lowercase letters, digits, - and _" ]]
}

@test "--ticket renders the rehearsal ticket in Markdown" {
	seed-gen --ticket seeds/invoice-line.yaml >"$out"
	grep -q '^# Rehearsal ticket: invoice-line$' "$out"
	grep -q '^| job type | `invoice.add_line` |$' "$out"
	grep -q '^| retry policy | visibility timeout 2000 ms, at most 5 attempts |$' "$out"
	grep -q '^| kill-after-commit | kill | `after-commit` | 1 | 0 | 0 ms |$' "$out"
	grep -q '^| `job-0006` | `\["inv-1006",1\]` | `179ee7d4f28fcff38ce54cd10e3da9cf2a295d2a775a63ba2c67844d3a24bcea` | baseline |$' "$out"
	grep -q '^| 6 | 0 | 0 | 0 | 6 |$' "$out"
	grep -q "^- the vendor's real rate limits" "$out"
}

@test "--ticket shows the external call, the vendor's faults and the calls expected to take effect" {
	seed-gen --ticket seeds/invoice-line.yaml >"$out"
	grep -q '^| external call | payment charge, key `invoice_id` `line_no` (fields of the call'"'"'s JSON body) |$' "$out"
	grep -q '^## External call$' "$out"
	grep -q '^| vendor honours `Idempotency-Key` | no: a repeated call takes effect again |$' "$out"
	grep -q '^| pending calls | `demo.pending_calls`, owner in column `owner`; reconciled by billing-oncall |$' "$out"
	grep -q '^| calls expected to take effect | 6 |$' "$out"
	grep -q '^| 6 | 0 | 0 | 0 | 6 |$' "$out"
	seed-gen --ticket tests/fixtures/seeds/external.yaml >"$out"
	grep -q '^| vendor-error | vendor-error |  |  | 0 | 0 ms |$' "$out"
	grep -q '^| vendor honours `Idempotency-Key` | yes: a repeated key gets the first response and no second effect |$' "$out"
	# a seed without one says so, and its expected counts have no column for it
	seed-gen --ticket tests/fixtures/seeds/minimal.yaml >"$out"
	grep -q '^| external call | none declared |$' "$out"
	! grep -q '^## External call$' "$out"
	grep -q '^| 1 | 0 | 0 | 0 |$' "$out"
}

@test "--ticket shows the queue's kind" {
	seed-gen --ticket seeds/invoice-line.yaml >"$out"
	grep -q '^| queue | `rehearsal_invoice_line` |$' "$out"
	grep -q '^| queue kind | idem |$' "$out"
	seed-gen --ticket tests/fixtures/seeds/queue-pg-boss.yaml >"$out"
	grep -q '^| queue | `send-confirmation` |$' "$out"
	grep -q '^| queue kind | pg-boss |$' "$out"
}

@test "usage errors exit 2; --help and --version exit 0" {
	run seed-gen
	[ "$status" -eq 2 ]
	[[ "$output" == usage:* ]]
	run seed-gen --no-such-option seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	run seed-gen --help
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: seed-gen [--ticket] seed-file"* ]]
	run seed-gen --version
	[ "$status" -eq 0 ]
}

@test "a write error on stdout is reported, not ignored" {
	[ -w /dev/full ] || skip "no /dev/full"
	run bash -c 'seed-gen seeds/invoice-line.yaml >/dev/full'
	[ "$status" -eq 3 ]
}

@test "the expect row ends with the verdict the seed expects, when it says one" {
	sed 's/^expect: { \(.*\) }$/expect: { \1, verdict: fail }/' seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/fails.yaml"
	seed-gen "$BATS_TEST_TMPDIR/fails.yaml" >"$out"
	assert_equal "$(grep '^expect' "$out")" "$(printf 'expect\t6\t0\t0\t0\t6\tfail')"
	sed 's/^expect: { \(.*\) }$/expect: { \1, verdict: maybe }/' seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/odd.yaml"
	run -2 seed-gen "$BATS_TEST_TMPDIR/odd.yaml"
	[[ "$output" == *"odd.yaml:"*"expect.verdict: expected pass or fail, got \"maybe\""* ]]
}
