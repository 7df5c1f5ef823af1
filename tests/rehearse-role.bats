#!/usr/bin/env bats
# rehearse and the sandbox account: the setup and the workers run as the
# seed's role, and the record lists what it held.

load helper
load rehearse-helper

setup() {
	cd "$BATS_TEST_DIRNAME/.."
	root=$PWD
	rehearse_setup
	sed 's/visibility_timeout: 2s/visibility_timeout: 300ms/; s/within: 2s/within: 100ms/' \
		"$root/seeds/invoice-line.yaml" >seeds/invoice-line.yaml
	commit_signed "seed and signers"
}

teardown() {
	rm -rf "$T"
}

@test "the reference worker passes every scenario as the sandbox account; the record lists its grants" {
	run --separate-stderr env TMPDIR="$T" rehearse -k "$key" -f records/allowed_signers seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	r="$output"
	[[ "$stderr" == *"rehearse: the setup runs as the sandbox account rehearsal-bot"* ]]
	grep -q '^verdict: "pass"$' "$r"
	python3 - "$r" <<-'PY'
		import json, re, sys
		# the record is YAML in JSON's flow style for its values: read the account by hand
		text = open(sys.argv[1]).read()
		assert re.search(r'^account:\n  role: "rehearsal-bot"$', text, re.M), "no account"
		# the setup ran with CREATE on the database and owned its schema
		setup = text.split('\n  setup:\n', 1)[1].split('\n  held:\n', 1)[0]
		assert 'object: "idem"\n    privilege: "CREATE"' in setup, setup
		assert 'object: "demo"\n    privilege: "OWNER"' in setup, setup
		held = text.split('\n  held:\n', 1)[1].split('\n  denied:\n', 1)[0]
		assert 'listed: false' not in held, held
		assert 'privilege: "TRUNCATE"' not in held, held
		assert 'object: "demo.invoice_lines"\n    privilege: "INSERT"' in held, held
		denied = text.split('\n  denied:\n', 1)[1].split('\n  findings:', 1)[0]
		assert 'held: true' not in denied, denied
		assert 'object: "idem.message"\n    privilege: "TRUNCATE"\n    held: false' in denied, denied
		assert re.search(r'^  findings: \[\]$', text, re.M), "findings"
	PY
}
