#!/usr/bin/env bats
# The in-toto statement beside each record (issue 33): mkrecord writes it,
# signed in a DSSE envelope with the record's key, in the record's commit;
# verify-record checks it; ssh-keygen and python3-securesystemslib, which
# are not idem, are the referees.

load helper
load sandbox-tests
load records-helper

sandbox_file_setup() {
	invoice_line_run
}

setup() {
	repo="$BATS_TEST_TMPDIR/repo"
	seed_repo "$repo"
}

record() {
	mkrecord -k "$key" -c "$@" <"$RUN"
}

statement_of() {
	printf '%s.intoto.jsonl' "${1%.yaml}"
}

# The statement inside the envelope $1.
payload() {
	jq -r .payload "$1" | base64 -d
}

# The envelope $1 with its payload replaced by the output of jq filter $2
# on the statement, its signature left as it was.
with_payload() {
	local body
	body=$(payload "$1" | jq -cS "$2" | base64 -w0)
	jq -cS --arg p "$body" '.payload = $p' "$1"
}

# The byte at offset $2 of file $1 with its lowest bit flipped.
flip_byte() {
	python3 -c 'import sys
p, at = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read())
b[at] ^= 1
open(p, "wb").write(b)' "$1" "$2"
}

# The offset of the first byte of the JSON string member $2 of the
# envelope $1 (payload, or sig) plus $3.
offset_of() {
	python3 -c 'import sys
t = open(sys.argv[1], "rb").read()
print(t.index(b"\"" + sys.argv[2].encode() + b"\":\"") + len(sys.argv[2]) + 4 + int(sys.argv[3]))' "$1" "$2" "$3"
}

# securesystemslib, not idem, checks the envelope $1 against the OpenSSH
# public key $2: the key from its raw 32 bytes, PAE made here from the
# DSSE spec, the keyid as ssh-keygen -l names the key. Prints the
# statement's result.
outside_verify() {
	/usr/bin/python3 - "$1" "$2" <<'PY'
import base64, binascii, hashlib, json, sys
from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError
from securesystemslib.signer import SSlibKey, Signature

blob = base64.b64decode(open(sys.argv[2]).read().split()[1])
n = int.from_bytes(blob[0:4], "big")
assert blob[4:4 + n] == b"ssh-ed25519"
m = int.from_bytes(blob[4 + n:8 + n], "big")
raw = blob[8 + n:8 + n + m]
assert m == 32 and len(raw) == 32
digest = hashlib.sha256(blob).digest()
key = SSlibKey(digest.hex(), "ed25519", "ed25519", {"public": raw.hex()})
try:
    env = json.loads(open(sys.argv[1], "rb").read())
    assert len(env["signatures"]) == 1, "not one signature"
    sig = env["signatures"][0]
    assert sig["keyid"] == "SHA256:" + base64.b64encode(digest).decode().rstrip("="), "keyid"
    body = base64.b64decode(env["payload"], validate=True)
    kind = env["payloadType"].encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)
    key.verify_signature(Signature(key.keyid, base64.b64decode(sig["sig"], validate=True).hex()),
        pae)
except (UnverifiedSignatureError, VerificationError, AssertionError, ValueError, KeyError,
        TypeError, binascii.Error) as e:
    print("refused:", type(e).__name__, e)
    sys.exit(1)
print(json.loads(body)["predicate"]["result"])
PY
}

@test "mkrecord writes the statement beside the record, in the record's signed commit" {
	r=$(record)
	s=$(statement_of "$r")
	[ -f "$s" ]
	assert_equal "$(wc -l <"$s")" 1
	git ls-tree --name-only HEAD records/ | grep -qx "$s"
	assert_equal "$(git status --porcelain)" ""
	assert_equal "$(jq -r .payloadType "$s")" application/vnd.in-toto+json
	assert_equal "$(jq -r '.signatures | length' "$s")" 1
	# the keyid is the fingerprint ssh-keygen prints
	assert_equal "$(jq -r '.signatures[0].keyid' "$s")" "$(ssh-keygen -lf "$key.pub" | cut -d ' ' -f 2)"
	payload "$s" >"$BATS_TEST_TMPDIR/statement"
	assert_equal "$(jq -r ._type "$BATS_TEST_TMPDIR/statement")" https://in-toto.io/Statement/v1
	assert_equal "$(jq -r .predicateType "$BATS_TEST_TMPDIR/statement")" \
		https://in-toto.io/attestation/test-result/v0.1
	# the subjects: the record, the seed, the worker's executable
	assert_equal "$(jq -r '.subject[0] | .name + " " + .digest.sha256' "$BATS_TEST_TMPDIR/statement")" \
		"$(basename "$r") $(sha256sum "$r" | cut -d ' ' -f 1)"
	assert_equal "$(jq -r '.subject[1] | .name + " " + .digest.sha256' "$BATS_TEST_TMPDIR/statement")" \
		"seed.yaml $(sha256sum seed.yaml | cut -d ' ' -f 1)"
	exe=$(sed -n 's/^    executable: "\(.*\)"$/\1/p' "$r")
	assert_equal "$(jq -r '.subject[2] | .name + " " + .digest.sha256' "$BATS_TEST_TMPDIR/statement")" \
		"$exe $(sha256sum "$exe" | cut -d ' ' -f 1)"
	assert_equal "$(jq -r '.subject | length' "$BATS_TEST_TMPDIR/statement")" 3
	# the predicate: the result, the seed at its revision, each scenario passed
	assert_equal "$(jq -cS .predicate "$BATS_TEST_TMPDIR/statement")" "$(jq -cnS \
		--arg sha "$(sha256sum seed.yaml | cut -d ' ' -f 1)" \
		--arg rev "$(sed -n 's/^  revision: "\(.*\)"$/\1/p' "$r")" \
		'{result: "PASSED", configuration: [{name: "seed.yaml", digest: {sha256: $sha, gitCommit: $rev}}],
		  passedTests: ["duplicate-publish", "kill-after-commit", "kill-before-commit",
			"kill-during-external-call", "two-workers-race", "(run)"], failedTests: []}')"
}

@test "verify-record accepts the statement; ssh-keygen and securesystemslib agree on the key and signature" {
	r=$(record)
	s=$(statement_of "$r")
	run -0 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict pass"
	run -0 outside_verify "$s" "$key.pub"
	assert_equal "$output" PASSED
	run -0 verify-record --history
	# the example of verify-record(1), as a reader would paste it
	sed -n '/^python3 - "\$r" eng.pub/,/^EOF$/p' "$BATS_TEST_DIRNAME/../man/verify-record.1" |
		sed 's/\\e$/\\/; s/^python3 /\/usr\/bin\/python3 /' >"$BATS_TEST_TMPDIR/example"
	cp "$key.pub" eng.pub
	run -0 env r="$r" bash "$BATS_TEST_TMPDIR/example"
	assert_equal "$output" PASSED
	# another base64 digit, so that the signature still decodes, wrong
	python3 -c 'import sys
p, at = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read())
b[at] = ord("B") if b[at] == ord("A") else ord("A")
open(p, "wb").write(b)' "$s" "$(offset_of "$s" sig 5)"
	run ! env r="$r" bash "$BATS_TEST_TMPDIR/example"
	[[ "$output" == *UnverifiedSignatureError* ]]
}

@test "a flipped byte in the payload, in the signature, or anywhere in the line fails verify-record and securesystemslib" {
	r=$(record)
	s=$(statement_of "$r")
	cp "$s" "$BATS_TEST_TMPDIR/good"
	for what in "payload 10" "payload 200" "sig 0" "sig 40"; do
		cp "$BATS_TEST_TMPDIR/good" "$s"
		flip_byte "$s" "$(offset_of "$s" $what)"
		run -1 verify-record "$r"
		assert_equal "${lines[0]}" "$r: NOT verified"
		assert_equal "${#lines[@]}" 2
		[[ "${lines[1]}" == "$r: $s: "* ]]
		run -1 outside_verify "$s" "$key.pub"
		[[ "$output" == refused:* ]]
	done
	# every byte of the line, one at a time
	size=$(wc -c <"$BATS_TEST_TMPDIR/good")
	for at in $(seq 0 37 $((size - 1))) $((size - 1)); do
		cp "$BATS_TEST_TMPDIR/good" "$s"
		flip_byte "$s" "$at"
		run -1 verify-record "$r"
		assert_equal "${#lines[@]}" 2
	done
}

@test "a payload changed and its signature kept, a keyid of another key, another key's envelope: each refused in one line" {
	r=$(record)
	s=$(statement_of "$r")
	cp "$s" "$BATS_TEST_TMPDIR/good"
	with_payload "$BATS_TEST_TMPDIR/good" '.predicate.result = "FAILED"' >"$s"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: $s: the signature does not verify with $(ssh-keygen -lf "$key.pub" | cut -d ' ' -f 2)"
	run -1 outside_verify "$s" "$key.pub"
	[[ "$output" == refused:* ]]
	ssh-keygen -q -t ed25519 -N '' -f "$BATS_TEST_TMPDIR/other"
	other=$(ssh-keygen -lf "$BATS_TEST_TMPDIR/other.pub" | cut -d ' ' -f 2)
	jq -cS --arg k "$other" '.signatures[0].keyid = $k' "$BATS_TEST_TMPDIR/good" >"$s"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: $s: signed by keyid $other, not by the record's signer, $(ssh-keygen -lf "$key.pub" | cut -d ' ' -f 2)"
	# the same statement signed by the other key: securesystemslib accepts
	# it against that key, verify-record only the record's signer
	payload "$BATS_TEST_TMPDIR/good" >"$BATS_TEST_TMPDIR/body"
	dsse_sign "$BATS_TEST_TMPDIR/body" "$BATS_TEST_TMPDIR/other" >"$s"
	run -0 outside_verify "$s" "$BATS_TEST_TMPDIR/other.pub"
	run -1 outside_verify "$s" "$key.pub"
	[[ "$output" == refused:* ]]
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: $s: signed by keyid $other, not by the record's signer, $(ssh-keygen -lf "$key.pub" | cut -d ' ' -f 2)"
	jq -cS '.signatures += .signatures' "$BATS_TEST_TMPDIR/good" >"$s"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: $s: the envelope has not exactly one signature"
	jq -cS '.payloadType = "application/json"' "$BATS_TEST_TMPDIR/good" >"$s"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: $s: the payloadType is not application/vnd.in-toto+json"
}

@test "a record changed and signed again after its statement was made: the statement's subject refuses it" {
	r=$(record)
	s=$(statement_of "$r")
	sed -i 's/^next_review: .*/next_review: "2099-01-01"/' "$r"
	rm "$r.sig"
	ssh-keygen -q -Y sign -f "$key" -n idem-record "$r"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: $s: the record's subject has another SHA-256 than the record, $(sha256sum "$r" | cut -d ' ' -f 1): the record changed after the statement was made"
	# and the audit fails it too
	git add records && signed_commit -q -m "records: the review moved"
	run -1 verify-record --history
	[[ "$output" == *"$s: the record's subject has another SHA-256"* ]]
}

@test "a statement that names another seed or another result, signed by the record's key, is refused" {
	r=$(record)
	s=$(statement_of "$r")
	body=$(payload "$s" | jq -cS '.subject[1].digest.sha256 = "00"')
	printf '%s' "$body" >"$BATS_TEST_TMPDIR/body"
	dsse_sign "$BATS_TEST_TMPDIR/body" >"$s"
	run -1 verify-record "$r"
	[[ "${lines[1]}" == "$r: $s: no subject names the record's seed, seed.yaml, with its SHA-256 "* ]]
	payload "$s" | jq -cS '.subject[1].digest.sha256 = "'"$(sha256sum seed.yaml | cut -d ' ' -f 1)"'" | .predicate.result = "WARNED"' \
		>"$BATS_TEST_TMPDIR/body"
	dsse_sign "$BATS_TEST_TMPDIR/body" >"$s"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: $s: its result is not PASSED, as the record's verdict gives"
	# the signature itself is good: only what it says is wrong
	run -0 outside_verify "$s" "$key.pub"
	assert_equal "$output" WARNED
}

@test "a record made before the statements, without one, verifies as it did; a newer one without its statement is refused" {
	r=$(record)
	s=$(statement_of "$r")
	git rm -q "$s"
	signed_commit -q -m "records: the statement taken away"
	run -1 verify-record "$r"
	assert_equal "${lines[1]}" "$r: $s: missing: a signed record of format 10 or later has its in-toto statement beside it"
	run -1 verify-record --history
	[[ "$output" == *"$s: missing: a signed record of format 10 or later"* ]]
	# the same record as format 9, the last made before every signed
	# record had one, signed again: nothing says a statement was made
	sed -i 's/^record: 10$/record: 9/' "$r"
	rm "$r.sig"
	ssh-keygen -q -Y sign -f "$key" -n idem-record "$r"
	git add records && signed_commit -q -m "records: as before issue 33"
	run -0 verify-record "$r"
	assert_equal "$output" "$r: verified, signed by eng@example.org; verdict pass"
	run -0 verify-record --history
}

@test "a record without a key has no statement; a second record of the day gets its own" {
	r=$(mkrecord <"$RUN")
	[ ! -e "$(statement_of "$r")" ]
	a=$(record)
	b=$(record)
	[ "$(statement_of "$a")" != "$(statement_of "$b")" ]
	assert_equal "$(payload "$(statement_of "$b")" | jq -r '.subject[0].name')" "$(basename "$b")"
	run -0 verify-record "$a" "$b"
}
