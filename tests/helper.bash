# Shared by the command tests: a real sandbox PostgreSQL per test file, in a
# throwaway directory, and a few assertions in the manner of git's t/.

bats_require_minimum_version 1.5.0

# node-postgres, as make check installs it from tests/node/package-lock.json
export NODE_PATH="$BATS_TEST_DIRNAME/node/node_modules"

# Starts a sandbox for the file; its PG* settings are exported to every test.
sandbox_up() {
	IDEM_TEST_ROOT=$(mktemp -d /tmp/idem-test.XXXXXX)
	chmod 711 "$IDEM_TEST_ROOT"
	export IDEM_TEST_ROOT
	eval "$(idem-sandbox -D "$IDEM_TEST_ROOT/sandbox" start)"
}

sandbox_down() {
	[ -n "${IDEM_TEST_ROOT:-}" ] || return 0
	idem-sandbox -D "$IDEM_TEST_ROOT/sandbox" --purge stop
	rm -rf "$IDEM_TEST_ROOT"
}

# An empty queue and delivery log, so each test counts its own messages.
queue_reset() {
	psql -X -q -v ON_ERROR_STOP=1 -c 'TRUNCATE idem.delivery, idem.message, idem.published RESTART IDENTITY'
}

# The git repositories of the tests. new_repo makes one; signing_repo
# makes one with the engineer's key allowed to sign in it; signed_commit
# commits with that key, git_ssh checks signatures against the signers the
# repository allows, and resign signs an edited record again.

# A new git repository in $1, made the current directory, with an engineer
# as its author.
new_repo() {
	mkdir -p "$1"
	cd "$1"
	git init -q -b main .
	as_engineer
}

# The engineer, as the author of the commits of the current repository.
as_engineer() {
	git config user.name "Test Engineer"
	git config user.email "eng@example.org"
}

# A new repository in $1 (new_repo) and $key, the engineer's ed25519 key:
# a new one, or a copy of the key file $2. records/allowed_signers allows
# it to sign records and commits as eng@example.org. Nothing is committed.
signing_repo() {
	new_repo "$1"
	key="$BATS_TEST_TMPDIR/key"
	if [ -n "${2:-}" ]; then
		cp "$2" "$key"
		chmod 600 "$key"
	else
		ssh-keygen -q -t ed25519 -N '' -C test-key -f "$key"
	fi
	mkdir -p records
	echo "eng@example.org namespaces=\"idem-record,git\" $(cat "${2:-$key}.pub")" >records/allowed_signers
}

# A commit signed with $key; the arguments are git commit's.
signed_commit() {
	git -c gpg.format=ssh -c user.signingkey="$key" commit -q -S "$@"
}

# git, with the signers of records/allowed_signers trusted for commits.
git_ssh() {
	git -c gpg.format=ssh -c gpg.ssh.allowedSignersFile=records/allowed_signers "$@"
}

# Signs the record $1, edited, again with $key, as ssh-keygen would, and
# its in-toto statement, if it has one, as a holder of the key would: the
# record's subject given the new bytes' SHA-256, the result the verdict's.
resign() {
	local s="${1%.yaml}.intoto.jsonl" sum result
	rm -f "$1.sig"
	ssh-keygen -q -Y sign -f "$key" -n idem-record "$1"
	[ -e "$s" ] || return 0
	sum=$(sha256sum "$1" | cut -d ' ' -f 1)
	case $(sed -n 's/^verdict: "\(.*\)"$/\1/p' "$1") in
	pass) result=PASSED ;;
	"best effort") result=WARNED ;;
	*) result=FAILED ;;
	esac
	jq -r .payload "$s" | base64 -d | jq -cS --arg n "$(basename "$1")" --arg d "$sum" \
		--arg r "$result" '(.subject[] | select(.name == $n) | .digest.sha256) = $d |
		.predicate.result = $r' >"$s.body"
	dsse_sign "$s.body" >"$s"
	rm "$s.body"
}

# An envelope of the statement in file $1 signed, outside idem, with the
# OpenSSH private key $2 ($key when not given): its seed read from the
# key file (PROTOCOL.key), PAE made from the DSSE spec, PyNaCl signing.
dsse_sign() {
	/usr/bin/python3 - "$1" "${2:-$key}" <<'PY'
import base64, hashlib, json, sys
import nacl.signing

body = open(sys.argv[1], "rb").read()
armor = [l for l in open(sys.argv[2]).read().splitlines() if not l.startswith("-----")]
data = base64.b64decode("".join(armor))
magic = b"openssh-key-v1\0"
assert data.startswith(magic)

def strings(buf, at, n):
    out = []
    for _ in range(n):
        size = int.from_bytes(buf[at:at + 4], "big")
        out.append(buf[at + 4:at + 4 + size])
        at += 4 + size
    return out, at

(cipher, kdf, options), at = strings(data, len(magic), 3)
assert cipher == b"none"
(public, private), _ = strings(data, at + 4, 2)
(kind, pk, sk), _ = strings(private, 8, 3)
signer = nacl.signing.SigningKey(sk[:32])
ptype = b"application/vnd.in-toto+json"
pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(body), body)
keyid = "SHA256:" + base64.b64encode(hashlib.sha256(public).digest()).decode().rstrip("=")
print(json.dumps({"payload": base64.b64encode(body).decode(), "payloadType": ptype.decode(),
    "signatures": [{"keyid": keyid, "sig": base64.b64encode(signer.sign(pae).signature).decode()}]},
    separators=(",", ":"), sort_keys=True))
PY
}


# Runs a program of tests/tools, as make test builds it into $BUILD/tests.
test_tool() {
	"${BUILD:?make test sets BUILD}/tests/$1" "${@:2}"
}

# Skips the test in a build with sanitizers (make check SANITIZE=1), for
# the reason given.
skip_if_sanitized() {
	case "${BIN:-}${BUILD:-}" in
	*sanitize*) skip "$1" ;;
	esac
}

# Sets limit, a command prefix: a hard address-space limit of 200 MB,
# generous for a normal run, far below what an unbounded parse of the
# hostile fixtures took (0.4 to 0.9 GB). ASan reserves more address space
# than that for itself, so sanitized builds skip the test.
hard_limit() {
	skip_if_sanitized "an ASan build reserves more address space than the limit"
	command -v prlimit >/dev/null || skip "no prlimit"
	limit="prlimit --as=209715200 --"
}

# A copy of the seed tests/fixtures/seeds/$1.yaml, which generates some
# number of jobs, that generates $2 instead: that number replaced wherever
# it stands (the expected effects, a queue named after it). Prints the
# copy's path.
sized_seed() {
	local fixture="$BATS_TEST_DIRNAME/fixtures/seeds/$1.yaml" copy="$BATS_TEST_TMPDIR/$1-$2.yaml" count
	count=$(sed -n 's/^generate: { count: \([0-9]*\) }$/\1/p' "$fixture")
	[ -n "$count" ] || { echo "$fixture generates no jobs" >&2; return 1; }
	sed "s/$count/$2/g" "$fixture" >"$copy"
	echo "$copy"
}

# One value from the sandbox database.
sql() {
	psql -X -A -t -v ON_ERROR_STOP=1 -c "$1"
}

# Compares a file with a golden file, showing the difference; with
# IDEM_UPDATE_GOLDEN=1 in the environment, replaces the golden file instead,
# for a change of rendering that git diff then shows for review.
assert_golden() {
	if [ -n "${IDEM_UPDATE_GOLDEN:-}" ]; then
		cp "$1" "$2"
		return 0
	fi
	if ! diff -u "$2" "$1"; then
		echo "output differs from $2" >&2
		return 1
	fi
}

# Runs a command that must refuse its input: exit 2, nothing on standard
# output, and on standard error the message of the golden file $1.
assert_refused() {
	local golden=$1 rc=0
	shift
	"$@" >"$BATS_TEST_TMPDIR/refused.out" 2>"$BATS_TEST_TMPDIR/refused.err" || rc=$?
	[ "$rc" -eq 2 ] || { echo "$*: status $rc" >&2; cat "$BATS_TEST_TMPDIR/refused.err" >&2; return 1; }
	[ ! -s "$BATS_TEST_TMPDIR/refused.out" ] || { echo "$*: wrote to standard output" >&2; return 1; }
	assert_golden "$BATS_TEST_TMPDIR/refused.err" "$golden"
}

# Fails unless the text $1 holds each of the texts after it, naming the
# first it lacks.
assert_contains() {
	local text=$1 part
	shift
	for part; do
		[[ "$text" == *"$part"* ]] || { printf 'missing: %s\nin: %s\n' "$part" "$text" >&2; return 1; }
	done
}

assert_equal() {
	if [ "$1" != "$2" ]; then
		printf 'got:  %s\nwant: %s\n' "$1" "$2" >&2
		return 1
	fi
}

# run_pipeline SEED DEADLINE WORKER...: the seed through seed-gen,
# count-effects --before, dup-publish, kill-at -D DEADLINE running the
# worker, and count-effects; the stream in $out, what the programs said
# in $err, the status in $status. seed-gen gets --draft when $draft is set.
run_pipeline() {
	status=0
	seed-gen ${draft:+--draft} "$1" | count-effects --before | dup-publish |
		kill-at -D "$2" -- "${@:3}" | count-effects >"$out" 2>"$err" || status=$?
}

# The observed value of the total count row $1 (effects, duplicates, ...)
# after the run, in the stream $out.
total() {
	awk -F '\t' -v n="$1" '$1 == "count" && $2 == "after" && $3 == "total" && $4 == n { print $6 }' "$out"
}

# The number of rows of one kind in a stream file.
rows_of() {
	grep -c "^$1	" "$2" || true
}

# A port of 127.0.0.1 where nothing listens, as far as anyone can tell.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# What every handoff must hold to: lines of at most 120 characters
# outside tables, no millisecond count above 10,000 and no microsecond
# timestamp, a Mermaid timeline the gantt grammar and Mermaid's parser
# accept, an SVG timeline that is well-formed XML.
readable() {
	local md=$1 svg=$2
	run awk 'length > 120 && !/^\|/ { print FILENAME ":" FNR ": " length " characters" }' "$md"
	[ -z "$output" ] || { echo "$output"; return 1; }
	run grep -nE '(^|[^0-9.])(1000[1-9]|100[1-9][0-9]|10[1-9][0-9]{2}|1[1-9][0-9]{3}|[2-9][0-9]{4}|[0-9]{6,}) ?ms' "$md"
	[ -z "$output" ] || { echo "raw milliseconds: $output"; return 1; }
	run grep -nE 'T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z' "$md"
	[ -z "$output" ] || { echo "microsecond timestamps: $output"; return 1; }
	test_tool mermaid-check "$md"
	# and Mermaid's own parser, from tests/node
	node "$BATS_TEST_DIRNAME/node/mermaid-parse.mjs" "$md"
	if command -v xmllint >/dev/null; then
		xmllint --noout "$svg"
	else
		python3 -c 'import sys, xml.etree.ElementTree as t; t.parse(sys.argv[1])' "$svg"
	fi
}
