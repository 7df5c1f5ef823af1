#!/usr/bin/env bats
# verify-record --rerun at the record's revision: in a temporary worktree
# of the repository, after the seed there hashes as recorded, removed
# afterwards, also when a signal stops the rerun; and the project's own
# newest passing record rerun to its counts.

load helper
load sandbox-tests
load records-helper

# The example seed without its race, which a loaded machine now and then
# lets go the other way in a rerun, run once on the file's sandbox:
# $IDEM_TEST_ROOT/seed.yaml and the run's stream, $RUN.
sandbox_file_setup() {
	cd "$BATS_TEST_DIRNAME/.."
	grep -v 'name: two-workers-race' seeds/invoice-line.yaml |
		sed 's/within: 2s/within: 100ms/' >"$IDEM_TEST_ROOT/seed.yaml"
	if grep -q 'race:' "$IDEM_TEST_ROOT/seed.yaml"; then return 1; fi
	queue_reset
	idem-worker --setup -g unique
	export RUN="$IDEM_TEST_ROOT/run.tsv"
	(cd "$IDEM_TEST_ROOT" && seed-gen seed.yaml | count-effects --before | dup-publish |
		kill-at -- idem-worker --guard unique | count-effects >"$RUN")
	export REPRODUCE="idem-worker --setup -g unique && seed-gen seed.yaml | count-effects --before | dup-publish | kill-at -- idem-worker --guard unique | count-effects"
}

# A fresh repository with the seed committed, a key and allowed_signers;
# the reruns' temporary directories in $T, which the sandbox's user can
# reach.
setup() {
	repo="$BATS_TEST_TMPDIR/repo"
	seed_repo "$repo"
	out="$BATS_TEST_TMPDIR/out"
	err="$BATS_TEST_TMPDIR/err"
	T="$IDEM_TEST_ROOT/tmp-$BATS_TEST_NUMBER"
	mkdir -m 711 "$T"
	export TMPDIR="$T"
}

teardown() {
	if [ -s "$BATS_TEST_TMPDIR/pid" ]; then
		kill -KILL "$(cat "$BATS_TEST_TMPDIR/pid")" 2>/dev/null || true
	fi
}

# The revision a record names, as recorded.
revision_of() {
	sed -n 's/^  revision: "\([0-9a-f]*\)"$/\1/p' "$1"
}

# Nothing left of a rerun: no worktree but the repository's own, no
# worktree metadata, nothing in the reruns' TMPDIR.
nothing_left() {
	assert_equal "$(git worktree list --porcelain | grep -c '^worktree ')" 1
	assert_equal "$(ls -A "$(git rev-parse --git-common-dir)/worktrees" 2>/dev/null)" ""
	assert_equal "$(ls -A "$T")" ""
}

@test "--rerun of an old record runs at its revision, though the seed gained a job since" {
	r=$(mkrecord -k "$key" -c -r "$REPRODUCE" <"$RUN")
	rev=$(revision_of "$r")
	[ -n "$rev" ]
	sed -i 's/^\(  - { id: job-0006, .*\)$/\1\n  - { id: job-0007, payload: { invoice_id: inv-1007, line_no: 1, amount_cents: 5, currency: EUR } }/' seed.yaml
	sed -i 's/effects: 6,/effects: 7,/' seed.yaml
	grep -q job-0007 seed.yaml
	git commit -q -am "seed: a seventh job"
	run verify-record --rerun "$r"
	echo "$output" >&2
	[ "$status" -eq 0 ]
	assert_contains "$output" \
		"$r: rerun at revision ${rev:0:12} (seed.yaml, SHA-256 as recorded)" \
		"$r: rerun reproduces the counts (digest " \
		"$r: rerun reproduces the path (kill points, races and attempts)"
	nothing_left
}

@test "--rerun of a record whose revision is not in the repository names it and runs nothing" {
	r=$(mkrecord -k "$key" -c -r "touch $BATS_TEST_TMPDIR/ran && cat \"\$RUN\"" <"$RUN")
	rev=$(revision_of "$r")
	# the record and its signers, in a repository without that history
	new_repo "$BATS_TEST_TMPDIR/elsewhere"
	cp -r "$repo/records" "$repo/seed.yaml" .
	git add records seed.yaml
	git commit -q -m "records, without their history"
	run -1 verify-record --rerun "$r"
	assert_contains "$output" "$r: seed: commit $rev is not in the repository"
	[ "$(grep -c "$rev" <<<"$output")" -eq 1 ]
	[[ "$output" != *"rerun at revision"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/ran" ]
	nothing_left
}

@test "--rerun of a seed whose bytes at the revision differ from the recorded hash runs nothing" {
	r=$(mkrecord -k "$key" -c -r "touch $BATS_TEST_TMPDIR/ran && cat \"\$RUN\"" <"$RUN")
	rev=$(revision_of "$r")
	recorded=$(sha256sum seed.yaml | cut -d ' ' -f 1)
	# the seed's blob is as recorded, but a checkout writes it with CRLF
	echo 'seed.yaml text eol=crlf' >>"$(git rev-parse --git-common-dir)/info/attributes"
	checked_out=$(sed 's/$/\r/' seed.yaml | sha256sum | cut -d ' ' -f 1)
	run -1 verify-record --rerun "$r"
	assert_contains "$output" "$r: verified, signed by eng@example.org" \
		"$r: seed: seed.yaml at revision ${rev:0:12} has SHA-256 $checked_out in its worktree, the record says $recorded: not rerun"
	[[ "$output" != *"rerun at revision"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/ran" ]
	nothing_left
}

# Starts verify-record --rerun of a record whose command waits, alone or,
# with "group", as the leader of a process group of its own, as a shell
# runs a job; sends it the signal $1, alone or to the whole group, once the
# command has started, and checks that it ended by the signal after
# stopping the command and removing its worktree and sandbox.
stopped_by() {
	local sig=$1 how=$2 pid status=0
	r=$(mkrecord -k "$key" -c -r "touch $BATS_TEST_TMPDIR/started && sleep 60 && touch $BATS_TEST_TMPDIR/finished; cat \"\$RUN\"" <"$RUN")
	rm -f "$BATS_TEST_TMPDIR/started"
	# a job started without job control ignores SIGINT: not this one
	python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
if sys.argv[1] == "group":
    os.setpgid(0, 0)
os.execvp(sys.argv[2], sys.argv[2:])' "$how" verify-record --rerun "$r" >"$out" 2>"$err" 3>&- &
	pid=$!
	echo "$pid" >"$BATS_TEST_TMPDIR/pid"
	for _ in $(seq 600); do
		[ -e "$BATS_TEST_TMPDIR/started" ] && break
		sleep 0.1
	done
	[ -e "$BATS_TEST_TMPDIR/started" ]
	git worktree list | grep -q "$T/verify-record\..*/worktree"
	if [ "$how" = group ]; then
		assert_equal "$(ps -o pgid= -p "$pid" | tr -d ' ')" "$pid"
		kill -s "$sig" -- "-$pid"
	else
		kill -s "$sig" "$pid"
	fi
	wait "$pid" || status=$?
	rm "$BATS_TEST_TMPDIR/pid"
	assert_equal "$status" $((128 + $(kill -l "$sig")))
	[ ! -e "$BATS_TEST_TMPDIR/finished" ]
	grep -q "rerun at revision" "$out"
	nothing_left
}

@test "--rerun stopped by SIGTERM stops its command and sandbox, removes its worktree, and ends by the signal" {
	stopped_by TERM alone
}

@test "--rerun stopped by SIGINT to its process group, as at a terminal, cleans up the same" {
	stopped_by INT group
}

@test "--rerun stopped by SIGHUP cleans up the same" {
	stopped_by HUP alone
}

# The newest of the project's own records whose verdict is pass.
newest_passing() {
	local r
	for r in records/*.yaml; do
		grep -q '^verdict: "pass"$' "$r" || continue
		printf '%s %s\n' "$(sed -n 's/^created_at: "\(.*\)"$/\1/p' "$r")" "$r"
	done | sort | tail -n 1 | cut -d ' ' -f 2
}

@test "the project's newest passing record reruns to its counts at its revision" {
	cd "$BATS_TEST_DIRNAME/.."
	r=$(newest_passing)
	[ -n "$r" ]
	rev=$(revision_of "$r")
	run --separate-stderr verify-record --rerun "$r"
	echo "$output" >&2
	assert_contains "$output" "$r: rerun at revision ${rev:0:12} (" \
		"$r: rerun reproduces the counts (digest "
	# and the path, but for a race that went the other way, as on a
	# loaded machine it now and then does: its job's two deliveries
	# swapped, and nothing else
	if [ "$status" -ne 0 ]; then
		assert_equal "$status" 1
		differences=$(grep -vF -e ": verified, signed by " -e ": rerun at revision " \
			-e ": rerun reproduces the counts " <<<"$output")
		assert_equal "$(grep -cE "^$r: [^:]+: delivery [12]: the record attempt 1 acked, branch .*, the rerun attempt 1 acked, branch " <<<"$differences")" 2
		assert_equal "$(wc -l <<<"$differences")" 2
	else
		assert_contains "$output" "$r: rerun reproduces the path (kill points, races and attempts)"
	fi
	assert_equal "$(ls -A "$T")" ""
	! git worktree list | grep -qF "$T/"
}
