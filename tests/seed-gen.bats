#!/usr/bin/env bats
# seed-gen: the stream it writes, its determinism, its refusals, --init and --ticket.

load helper

setup() {
	cd "$BATS_TEST_DIRNAME/.."
	out="$BATS_TEST_TMPDIR/out"
}

@test "seed-gen writes the header, one seed and expect row, the scenarios and every job" {
	seed-gen seeds/invoice-line.yaml >"$out"
	assert_equal "$(head -n 1 "$out")" "$(printf '#idem-tsv\t1.10')"
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
	run ! cmp -s tests/fixtures/seeds/minimal.yaml "$BATS_TEST_TMPDIR/mapping.yaml"
	cmp "$out.text" "$out.mapping"
}

@test "the external call's row comes right after the seed row; the expect row ends with its count" {
	seed-gen seeds/invoice-line.yaml >"$out"
	assert_equal "$(sed -n 3p "$out")" "$(printf 'external\tpayment charge\t["invoice_id","line_no"]\tfalse\tdemo.pending_calls\towner\t["key"]\tstatus\t["done","reconciled"]')"
	assert_equal "$(rows_of external "$out")" 1
	seed-gen tests/fixtures/seeds/external.yaml >"$out"
	assert_equal "$(sed -n 3,4p "$out")" "$(printf 'external\tpayment charge\t["invoice_id","line_no"]\ttrue\tdemo.pending_calls\towner\t["key"]\tstatus\t["done","reconciled"]\nexpect\t3\t0\t0\t0\t3')"
	# the pending table's key columns are the body's field names unless named
	sed 's/, key: \[key\], state: status, settled: \[done, reconciled\]//' tests/fixtures/seeds/external.yaml \
		>"$BATS_TEST_TMPDIR/default-key.yaml"
	assert_equal "$(seed-gen "$BATS_TEST_TMPDIR/default-key.yaml" | sed -n 3p)" \
		"$(printf 'external\tpayment charge\t["invoice_id","line_no"]\ttrue\tdemo.pending_calls\towner\t["invoice_id","line_no"]\t\\N\t\\N')"
	# without pending calls, the table, its owner, key and state are \N
	sed '/^  pending: /d' tests/fixtures/seeds/external.yaml >"$BATS_TEST_TMPDIR/no-pending.yaml"
	assert_equal "$(seed-gen "$BATS_TEST_TMPDIR/no-pending.yaml" | sed -n 3p)" \
		"$(printf 'external\tpayment charge\t["invoice_id","line_no"]\ttrue\t\\N\t\\N\t\\N\t\\N\t\\N')"
	# a seed without one has no external row, and \N for its count
	seed-gen tests/fixtures/seeds/minimal.yaml >"$out"
	assert_equal "$(rows_of external "$out")" 0
	assert_equal "$(grep '^expect' "$out")" "$(printf 'expect\t1\t0\t0\t0\t\\N')"
}

@test "a vendor fault is a scenario of fault vendor-error or vendor-timeout, without step or attempt" {
	seed-gen tests/fixtures/seeds/external.yaml >"$out"
	assert_equal "$(grep '^scenario' "$out")" "$(printf 'scenario\tcharge-killed\tkill\texternal-call\t1\t0\t0\t\\N\t\\N\nscenario\tvendor-error\tvendor-error\t\\N\t\\N\t0\t0\t\\N\t\\N\nscenario\tvendor-timeout\tvendor-timeout\t\\N\t\\N\t1\t100\t\\N\t\\N')"
}

@test "a lost, late or forgotten answer is a vendor scenario; the delay and the window end its row, the kill of forget-keys is its step" {
	seed-gen tests/fixtures/seeds/vendor-answers.yaml >"$out"
	assert_equal "$(grep '^scenario' "$out")" "$(printf 'scenario\treply-lost\tvendor-lost-reply\t\\N\t\\N\t0\t0\t\\N\t\\N\nscenario\treply-late\tvendor-late-reply\t\\N\t\\N\t0\t0\t\\N\t3000\nscenario\tkeys-forgotten\tvendor-forget-keys\texternal-call\t1\t0\t0\t\\N\t86400000')"
	for bad in vendor-late-no-delay vendor-late-too-long vendor-delay-on-error vendor-forget-no-kill \
		vendor-and-kill external-pending-state-alone; do
		assert_refused "tests/golden/seed-gen/$bad.err" seed-gen "tests/fixtures/bad/$bad.yaml"
	done
}

@test "a stall scenario reaches its row with its attempt and until step, \\N for the ack and for other faults" {
	seed-gen tests/fixtures/seeds/stall.yaml >"$out"
	assert_equal "$(grep '^scenario' "$out")" "$(printf 'scenario\tstall-after-commit\tstall\tafter-commit\t1\t0\t0\t\\N\t\\N\nscenario\tstall-until-commit\tstall\tbefore-commit\t2\t0\t0\tafter-commit\t\\N\nscenario\tkill-after-commit\tkill\tafter-commit\t1\t0\t0\t\\N\t\\N')"
	grep -q "^job	a	1	.*	stall-after-commit$" "$out"
	# the ticket names the step that releases the stall
	seed-gen --ticket tests/fixtures/seeds/stall.yaml >"$out"
	grep -qxF '| stall-until-commit | stall | `before-commit`, until `after-commit` | 2 | 0 | 0 ms |' "$out"
	grep -qxF '| stall-after-commit | stall | `after-commit` | 1 | 0 | 0 ms |' "$out"
}

@test "stall and until: refused beside another fault, until without stall, near names and an undeclared external call" {
	for bad in stall-and-kill until-without-stall stall-step-near-standard stall-until-near-standard \
		stall-key-near until-key-near stall-external-undeclared stall-until-list stall-attempt-zero; do
		assert_refused "tests/golden/seed-gen/$bad.err" seed-gen "tests/fixtures/bad/$bad.yaml"
	done
	# with external declared, stall: external-call is accepted
	sed 's/^payload_schema: .*/&\nexternal: { name: payment charge, key: [order_id], honours_idempotency_key: false }/; s/^expect: { effects: 2 }/expect: { effects: 2, external: 2 }/' \
		tests/fixtures/bad/stall-external-undeclared.yaml >"$BATS_TEST_TMPDIR/external.yaml"
	seed-gen --draft "$BATS_TEST_TMPDIR/external.yaml" >"$out"
	grep -q "^scenario	held	stall	external-call	1	0	0	\\\\N	\\\\N$" "$out"
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

@test "a key or a step name near a known one is refused with the name it is near" {
	assert_refused tests/golden/seed-gen/scenario-key-near.err seed-gen tests/fixtures/bad/scenario-key-near.yaml
	assert_refused tests/golden/seed-gen/step-near-standard.err seed-gen tests/fixtures/bad/step-near-standard.yaml
	assert_refused tests/golden/seed-gen/race-step-near-standard.err seed-gen tests/fixtures/bad/race-step-near-standard.yaml
	for step in aftercommit after-comit external_call before_write; do
		sed "s/kill: after_commit/kill: $step/" tests/fixtures/bad/step-near-standard.yaml \
			>"$BATS_TEST_TMPDIR/near.yaml"
		run --separate-stderr seed-gen "$BATS_TEST_TMPDIR/near.yaml"
		[ "$status" -eq 2 ]
		[ -z "$output" ]
		[[ "$stderr" == *":12:37: scenarios[1].kill: $step is not a standard step; did you mean "*'? A step of the worker'"'"'s own is declared in own_steps: ['"$step]" ]]
	done
}

@test "a step of the worker's own is accepted when own_steps declares it, or when it is far from every standard one" {
	{ sed '/^scenarios:/,$d' tests/fixtures/bad/step-near-standard.yaml
	  printf 'own_steps: [after_commit]\nscenarios:\n  - { name: crash, jobs: [a], kill: after_commit }\n'
	} >"$BATS_TEST_TMPDIR/own.yaml"
	seed-gen --draft "$BATS_TEST_TMPDIR/own.yaml" >"$out"
	grep -q "^scenario	crash	kill	after_commit	" "$out"
	sed 's/kill: after_commit/kill: ledger-flushed/; /^own_steps/d' "$BATS_TEST_TMPDIR/own.yaml" >"$BATS_TEST_TMPDIR/far.yaml"
	seed-gen --draft "$BATS_TEST_TMPDIR/far.yaml" >"$out"
	grep -q "^scenario	crash	kill	ledger-flushed	" "$out"
}

@test "a seed file that does not exist is a usage error" {
	run seed-gen tests/fixtures/seeds/absent.yaml
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: tests/fixtures/seeds/absent.yaml: No such file or directory"
}

@test "--init writes a ready seed for the table and key given, with a scenario of each kind" {
	seed-gen --init shop.order_lines -k order_id,line_no:integer >"$out"
	grep -q '^rehearsal: order-lines  #' "$out"
	grep -q '^queue: rehearsal_order_lines  #' "$out"
	grep -q '^  table: shop.order_lines  #' "$out"
	grep -q '^  key: \[order_id, line_no\]  #' "$out"
	grep -q '^payload_schema: { order_id: string, line_no: integer }  #' "$out"
	# every required key is commented
	for k in rehearsal job_type queue retry effect name table key key_scope duplicate_acceptor \
		reconciliation_owner payload_schema jobs scenarios expect; do
		grep -q "^ *$k: .*# [a-z]" "$out" || { echo "$k: no comment" >&2; false; }
	done
	# it loads as written, ready: nine jobs, one of each kind of fault
	seed-gen "$out" >"$out.tsv"
	assert_equal "$(grep '^seed' "$out.tsv" | cut -f 12-14)" "$(printf 'shop.order_lines\t["order_id","line_no"]\tbusiness')"
	assert_equal "$(grep '^expect' "$out.tsv")" "$(printf 'expect\t9\t0\t0\t0\t\\N')"
	assert_equal "$(grep '^job' "$out.tsv" | sed -n 3p | cut -f 2-4)" \
		"$(printf 'job-0003\t["order_id-1003",1003]\t{"line_no":1003,"order_id":"order_id-1003"}')"
	assert_equal "$(grep '^scenario' "$out.tsv" | cut -f 3,4 | tr '\t' ' ')" "$(printf '%s\n' \
		'duplicate-publish \N' 'kill before-write' 'kill before-commit' 'kill after-commit' 'race before-write')"
	# the kill that needs the step protocol, and those that need external:,
	# are there to uncomment: then it loads too, with the calls expected
	sed -e 's/^# external: .*/external:/' -e 's/^#   \([a-z_]*:.*\)/  \1/' -e 's/^#  - /  - /' \
		-e '/^expect: /d' -e 's/^# expect: /expect: /' "$out" >"$out.all"
	seed-gen "$out.all" >"$out.tsv"
	assert_equal "$(grep '^scenario' "$out.tsv" | cut -f 3,4 | tail -n 3 | tr '\t' ' ')" "$(printf '%s\n' \
		'kill before-ack' 'kill external-call' 'vendor-error \N')"
	assert_equal "$(grep '^expect' "$out.tsv")" "$(printf 'expect\t9\t0\t0\t0\t9')"
	# and the queue of another kind it suggests in a comment
	sed 's/^queue: /# /; s/^# queue: /queue: /' "$out" >"$out.pg-boss"
	assert_equal "$(seed-gen "$out.pg-boss" | grep '^seed' | awk -F '\t' '{ print $6, $NF }')" \
		"rehearsal_order_lines pg-boss"
	# without -k, the key is id; a table without a schema is a name alone
	seed-gen --init confirmations | seed-gen - >"$out.tsv"
	assert_equal "$(grep '^seed' "$out.tsv" | cut -f 4,12,13)" "$(printf 'confirmations\tconfirmations\t["id"]')"
}

@test "--init -o writes a new file whole, and never overwrites one" {
	cd "$BATS_TEST_TMPDIR"
	run -0 seed-gen --init shop.confirmations -k order_id -o new.yaml
	assert_equal "$output" ""
	seed-gen --init shop.confirmations -k order_id | cmp - new.yaml
	seed-gen new.yaml >/dev/null
	assert_equal "$(ls)" "new.yaml"
	# an existing file, even empty, or a link to nothing, stays as it was
	echo mine >new.yaml
	run seed-gen --init shop.confirmations -o new.yaml
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: new.yaml: exists; not overwritten"
	assert_equal "$(cat new.yaml)" mine
	ln -s nowhere dangling.yaml
	run seed-gen --init shop.confirmations -o dangling.yaml
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: dangling.yaml: exists; not overwritten"
	assert_equal "$(ls)" "$(printf 'dangling.yaml\nnew.yaml')"
	# a directory that is not there: the file's name, status 3, nothing left
	run seed-gen --init shop.confirmations -o absent/new.yaml
	[ "$status" -eq 3 ]
	assert_equal "$output" "seed-gen: absent/new.yaml: No such file or directory"
}

@test "--init refuses a table or a key that would not be a plain SQL name" {
	run seed-gen --init 'bad: name'
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: --init bad: name: a table is [schema.]name, each lowercase letters, digits and _"
	run seed-gen --init a.b.c
	[ "$status" -eq 2 ]
	run seed-gen --init t -k 'order_id,amount:float'
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: -k order_id,amount:float: a key is column[:type],... where a column is lowercase letters, digits and _, and a type string or integer"
	run seed-gen --init t -k 'a,,b'
	[ "$status" -eq 2 ]
	# -k and -o belong to --init
	run seed-gen -k order_id seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	[[ "$output" == "usage: seed-gen"* ]]
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
	run ! grep -q '^## External call$' "$out"
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
	[[ "$output" == "usage: seed-gen [--draft] [--ticket] seed-file"* ]]
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

@test "worker.sources are paths from the top of the repository, without .." {
	sed 's/^  command: \(.*\)$/  command: \1\n  sources: [worker\/, lib\/billing.py]/' seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/sources.yaml"
	run -0 seed-gen "$BATS_TEST_TMPDIR/sources.yaml"
	for bad in /etc/worker ../elsewhere worker/../../x; do
		sed "s|^  command: \(.*\)$|  command: \1\n  sources: [worker/, $bad]|" seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/bad.yaml"
		run -2 seed-gen "$BATS_TEST_TMPDIR/bad.yaml"
		[[ "$output" == "seed-gen: $BATS_TEST_TMPDIR/bad.yaml:9:"*"worker.sources: $bad: a path from the top of the repository, without .."* ]]
		[ ! -s "$out" ] || false
	done
}
# The example seed with the lines matching the pattern $1 deleted, as $2.
without() {
	sed "/$1/d" seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/$2.yaml"
	echo "$BATS_TEST_TMPDIR/$2.yaml"
}

@test "a seed without reconciliation_owner is not ready: exit 2, one line naming the file, nothing written" {
	seed=$(without '^reconciliation_owner:' no-owner)
	run --separate-stderr seed-gen "$seed"
	[ "$status" -eq 2 ]
	assert_equal "$output" ""
	assert_equal "$stderr" "seed-gen: $seed: not ready: no reconciliation_owner"
	# the ticket too
	run --separate-stderr seed-gen --ticket "$seed"
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "seed-gen: $seed: not ready: no reconciliation_owner"
}

@test "not ready: each missing piece is named, all of them on one line" {
	seed=$(without '^  name: invoice line$' no-name)
	assert_equal "$(seed-gen "$seed" 2>&1 >/dev/null)" "seed-gen: $seed: not ready: no effect.name"
	seed=$(without 'duplicate_acceptor' no-acceptor)
	assert_equal "$(seed-gen "$seed" 2>&1 >/dev/null)" "seed-gen: $seed: not ready: no effect.duplicate_acceptor"
	# no fault: scenarios with neither duplicates, kill, race, stall nor vendor fault
	sed -e '/^  - { name: /d' -e 's/^scenarios:$/scenarios:\n  - { name: same, jobs: [job-0001], conflicting_payloads: true }/' \
		seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/no-fault.yaml"
	seed="$BATS_TEST_TMPDIR/no-fault.yaml"
	run seed-gen "$seed"
	[ "$status" -eq 2 ]
	# a vendor fault alone is one: the worker's retry is the rehearsal
	sed -e '/^  - { name: /d' -e 's/^scenarios:$/scenarios:\n  - { name: vendor, jobs: [job-0001], vendor: lost-reply }/' \
		seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/vendor-fault.yaml"
	seed-gen "$BATS_TEST_TMPDIR/vendor-fault.yaml" >/dev/null
	assert_equal "$output" "seed-gen: $seed: not ready: no fault (a scenario with duplicates, kill, race, stall or vendor)"
	sed -e '/^  name: invoice line$/d' -e '/duplicate_acceptor/d' -e '/^reconciliation_owner:/d' \
		-e '/^scenarios:$/,/^  - { name: two-workers/d' seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/bare.yaml"
	seed="$BATS_TEST_TMPDIR/bare.yaml"
	run seed-gen "$seed"
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: $seed: not ready: no effect.name, no reconciliation_owner, no effect.duplicate_acceptor, no fault (a scenario with duplicates, kill, race, stall or vendor)"
	# a duplicate alone is a fault, and so is a kill or a race alone
	for keep in duplicate-publish kill-after-commit two-workers-race; do
		grep -v '^  - { name: ' seeds/invoice-line.yaml |
			sed "s/^scenarios:$/&\n$(grep "^  - { name: $keep," seeds/invoice-line.yaml)/" >"$BATS_TEST_TMPDIR/one.yaml"
		seed-gen "$BATS_TEST_TMPDIR/one.yaml" >/dev/null
	done
}

@test "--draft lets a seed that is not ready through, and the seed row says draft" {
	seed=$(without '^reconciliation_owner:' no-owner)
	seed-gen --draft "$seed" >"$out"
	assert_equal "$(grep '^seed' "$out" | awk -F '\t' '{ print NF, $16, $22, $23, $24 }')" '24 \N idem true \N'
	assert_equal "$(rows_of job "$out")" 6
	# a ready seed given --draft is a draft too; without it the row is as it was
	assert_equal "$(seed-gen --draft seeds/invoice-line.yaml | awk -F '\t' '$1 == "seed" { print NF, $23 }')" "24 true"
	assert_equal "$(seed-gen seeds/invoice-line.yaml | awk -F '\t' '$1 == "seed" { print NF }')" 22
	run seed-gen --draft --init x
	[ "$status" -eq 2 ]
}

@test "a guard the database cannot enforce is best effort: its why ends the seed row" {
	printf 'guard: { enforceable: false, why: "the effect is a mail the provider sends" }\n' |
		cat seeds/invoice-line.yaml - >"$BATS_TEST_TMPDIR/best-effort.yaml"
	seed-gen "$BATS_TEST_TMPDIR/best-effort.yaml" >"$out"
	assert_equal "$(grep '^seed' "$out" | awk -F '\t' '{ print NF; print $23; print $24 }')" \
		"$(printf '24\nfalse\nthe effect is a mail the provider sends')"
	assert_equal "$(rows_of declared_guard "$out")" 0
	# why is required, and table and key belong to the other form
	echo 'guard: { enforceable: false }' | cat seeds/invoice-line.yaml - >"$BATS_TEST_TMPDIR/no-why.yaml"
	run seed-gen "$BATS_TEST_TMPDIR/no-why.yaml"
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: $BATS_TEST_TMPDIR/no-why.yaml:42:8: guard.why: required with enforceable: false: why the database cannot enforce the guard"
	echo 'guard: { enforceable: false, why: w, table: t }' | cat seeds/invoice-line.yaml - >"$BATS_TEST_TMPDIR/table.yaml"
	run seed-gen "$BATS_TEST_TMPDIR/table.yaml"
	[ "$status" -eq 2 ]
	[[ "$output" == *": guard: a guard the database cannot enforce has no table or key to probe: say why it cannot with why: ..." ]]
	echo 'guard: { table: t, key: [k], why: w }' | cat seeds/invoice-line.yaml - >"$BATS_TEST_TMPDIR/why.yaml"
	run seed-gen "$BATS_TEST_TMPDIR/why.yaml"
	[ "$status" -eq 2 ]
	[[ "$output" == *": guard.why: only with enforceable: false, for a guard the database cannot enforce" ]]
}
