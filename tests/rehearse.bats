#!/usr/bin/env bats
# rehearse end to end: a signed, committed, verified record that ssh-keygen,
# git and a rerun agree with; a failing verdict; interrupts at every stage
# that leave nothing behind; and the same counts twice.

load helper

setup() {
	cd "$BATS_TEST_DIRNAME/.."
	root=$PWD
	# rehearse's scratch space, and the mark of every process it starts:
	# they inherit TMPDIR (as root, the sandbox's server user passes through)
	T=$(mktemp -d /tmp/idem-rehearse-test.XXXXXX)
	chmod 711 "$T"
	unset PGHOST PGPORT PGDATABASE PGUSER PGSERVICE IDEM_SANDBOX
	repo="$BATS_TEST_TMPDIR/repo"
	mkdir -p "$repo/seeds" "$repo/records"
	cd "$repo"
	git init -q -b main .
	git config user.name "Test Engineer"
	git config user.email "eng@example.org"
	sed 's/visibility_timeout: 2s/visibility_timeout: 300ms/; s/within: 2s/within: 100ms/' \
		"$root/seeds/invoice-line.yaml" >seeds/invoice-line.yaml
	key="$BATS_TEST_TMPDIR/key"
	ssh-keygen -q -t ed25519 -N '' -C test-key -f "$key"
	echo "eng@example.org namespaces=\"idem-record,git\" $(cat "$key.pub")" >records/allowed_signers
	git add .
	git -c gpg.format=ssh -c user.signingkey="$key" commit -q -S -m "seed and signers"
}

teardown() {
	rm -rf "$T"
}

rh() {
	TMPDIR="$T" rehearse "$@"
}

# The processes started by this test's rehearsals: they carry its TMPDIR.
ours() {
	grep -l -s -a "TMPDIR=$T" /proc/[0-9]*/environ | sed 's|/proc/\([0-9]*\)/environ|\1|' |
		while read -r pid; do ps -o pid=,args= -p "$pid" || true; done
}

# No PostgreSQL, worker, controller or scratch directory of a rehearsal left.
nothing_left() {
	for i in $(seq 60); do
		[ -z "$(ours)" ] && break
		sleep 0.05
	done
	assert_equal "$(ours)" ""
	assert_equal "$(ls "$T")" ""
}

@test "a full rehearsal: ssh-keygen and git verify what it made, and a rerun reproduces its digest" {
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	r="$output"
	[ -f "$r" ] && [ -f "$r.sig" ] && [ -f "${r%.yaml}.md" ]
	[[ "$stderr" == *"+ idem-worker --guard unique --setup && seed-gen seeds/invoice-line.yaml | count-effects --before | dup-publish | kill-at -- idem-worker --guard unique | count-effects | mkrecord"* ]]
	ssh-keygen -Y verify -f records/allowed_signers -I eng@example.org -n idem-record -s "$r.sig" <"$r"
	git -c gpg.format=ssh -c gpg.ssh.allowedSignersFile=records/allowed_signers verify-commit HEAD
	grep -q '^verdict: "pass"$' "$r"
	# the record's reproduce command is the pipeline that was printed
	grep -q '^reproduce: "idem-worker --guard unique --setup && seed-gen seeds/invoice-line.yaml | count-effects --before | dup-publish | kill-at -- idem-worker --guard unique | count-effects"$' "$r"
	run verify-record --rerun "$r"
	[ "$status" -eq 0 ]
	[[ "$output" == *"rerun reproduces the counts"* ]]
	run verify-record --history
	[ "$status" -eq 0 ]
	nothing_left
}

@test "the check-then-insert guard fails the rehearsal, naming the duplicate business key" {
	run --separate-stderr rh -k "$key" -f records/allowed_signers -w 'idem-worker --guard check-then-insert' seeds/invoice-line.yaml
	[ "$status" -eq 1 ]
	[[ "$stderr" == *'count-effects: duplicate: business key ["inv-1005",1] has 2 effect rows, expected 1'* ]]
	grep -q '^verdict: "fail"$' "$output"
	nothing_left
}

@test "without a key, rehearse says it signs with a throwaway key and the record still verifies" {
	run --separate-stderr rh seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"signing with a throwaway key made for this run"* ]]
	[[ "$stderr" == *"verified, signed by rehearse-throwaway"* ]]
	run rh -c seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	nothing_left
}

@test "a stage that fails stops the rehearsal with its status, and records nothing" {
	run rh -k "$key" -f records/allowed_signers -w 'idem-worker --guard no-such-guard' seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	[[ "$output" == *"idem-worker: -g no-such-guard: expected none, check-then-insert, memory, unique or outbox"* ]]
	[[ "$output" == *"rehearse: setting up the worker failed with status 2; nothing recorded"* ]]
	assert_equal "$(ls records)" allowed_signers
	nothing_left
}

# Interrupts rehearse once the pattern's process runs; nothing may remain.
interrupt_at() {
	TMPDIR="$T" rehearse -k "$key" -f records/allowed_signers seeds/invoice-line.yaml >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" &
	pid=$!
	for i in $(seq 400); do
		ours | grep -q -e "$1" && break
		sleep 0.01
	done
	kill -INT "$pid" 2>/dev/null || true
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 130 ] || [ "$rc" -eq 0 ] || { echo "$1: status $rc" >&2; cat "$BATS_TEST_TMPDIR/err" >&2; return 1; }
	if [ "$rc" -eq 130 ] && grep -q "the record was made\|while verifying the record" "$BATS_TEST_TMPDIR/err"; then
		# mkrecord finishes whole once begun: the record is complete
		verify-record records/*.yaml
		git rm -q -r --cached records/*.yaml records/*.sig records/*.md 2>/dev/null || true
		rm -f records/*.yaml records/*.sig records/*.md
	elif [ "$rc" -eq 130 ]; then
		assert_equal "$(ls records)" allowed_signers
	else
		# finished before the interrupt: then whole, and verified
		verify-record "$(cat "$BATS_TEST_TMPDIR/out")"
		rm -f records/*.yaml records/*.sig records/*.md
	fi
	nothing_left
}

@test "SIGINT at any stage leaves no PostgreSQL, worker or half-written file" {
	sed -i 's/visibility_timeout: 300ms/visibility_timeout: 3s/' seeds/invoice-line.yaml
	git commit -q -am "slower retries" --no-verify
	interrupt_at 'idem-sandbox -D'
	interrupt_at 'postgres -D'
	interrupt_at 'idem-worker --guard unique --setup'
	interrupt_at 'kill-at -- idem-worker'
	interrupt_at 'idem-worker --guard unique$'
	interrupt_at 'count-effects$'
	interrupt_at 'mkrecord -k'
}

@test "the same seed and kill plan, run twice: the same counts and the same branches per job" {
	a=$(rh -k "$key" -f records/allowed_signers seeds/invoice-line.yaml 2>/dev/null)
	b=$(rh -k "$key" -f records/allowed_signers seeds/invoice-line.yaml 2>/dev/null)
	digest() { grep -A0 '^  digest:' "$1"; }
	assert_equal "$(digest "$b")" "$(digest "$a")"
	branches() {
		awk '/^- job: / { job = $3 } /^  branch: / { $1 = ""; print job, $0 }' "$1" | sort
	}
	assert_equal "$(branches "$b")" "$(branches "$a")"
}
