#!/usr/bin/env bats
# mkrecord -k KEY -c as the file system and git see it: what it reads,
# what is on disk before a name is made, and the index it leaves. No
# database: mkrecord reads the stream of a real run (tests/fixtures/handoff).
# strace is the referee of the system calls; git of the index.

load helper

fixtures="$BATS_TEST_DIRNAME/fixtures/handoff"
fixture_key="$BATS_TEST_DIRNAME/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519"

# A repository with the fixture's seed committed, then the signers, which
# allow the fixture key.
setup() {
	signing_repo "$BATS_TEST_TMPDIR/repo" "$fixture_key"
	cp "$fixtures/pass.yaml" .
	git add pass.yaml
	git commit -q -m "seed"
	git add records
	git commit -q -m "signers"
}

# traced TRACE-SET: mkrecord -k -c under strace, every thread, into trace;
# a sanitizer build's leak check, which cannot run under ptrace, is off.
traced() {
	command -v strace >/dev/null || skip "strace is not installed"
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		strace -f -o "$BATS_TEST_TMPDIR/trace" -e trace="$1" mkrecord -k "$key" -c <"$fixtures/pass.tsv" >"$BATS_TEST_TMPDIR/made"
}

@test "mkrecord -c opens no CA certificate: it makes no connection, so it trusts none" {
	traced %file
	r=$(cat "$BATS_TEST_TMPDIR/made")
	[ -f "$r" ]
	assert_equal "$(git_ssh log -1 --format=%G? HEAD)" G
	# Debian's libgit2 on mbed TLS parsed the whole system bundle at start
	run grep -E 'open(at)?\(.*"/etc/ssl/|open(at)?\(.*/ca-certificates' "$BATS_TEST_TMPDIR/trace"
	assert_equal "$output" ""
}

@test "every file of the record is synced to disk before the first of its names is made" {
	traced fsync,link
	r=$(cat "$BATS_TEST_TMPDIR/made")
	files=$(git show --name-only --format= HEAD | grep -c '^records/')
	assert_equal "$files" 6
	# the syncs ended (= 0) before the first link of a temporary file to its name
	synced=$(awk '/link\(".*\.mkrecord-/ { exit } /fsync/ && /= 0$/ { n++ } END { print n + 0 }' \
		"$BATS_TEST_TMPDIR/trace")
	[ "$synced" -ge "$files" ]
	# and none of them after
	after=$(awk '/link\(".*\.mkrecord-/ { seen = 1 } seen && /fsync/ { n++ } END { print n + 0 }' \
		"$BATS_TEST_TMPDIR/trace")
	assert_equal "$after" 0
	[ -s "$r" ]
}

@test "the index after -c holds each committed file's blob and stat data: git finds the tree clean unread" {
	r=$(mkrecord -k "$key" -c <"$fixtures/pass.tsv")
	# diff-files compares stat data only and does not refresh the index
	git diff-files --quiet
	git diff-index --cached --quiet HEAD
	assert_equal "$(git ls-files -s records | awk '{ print $1, $2 }')" \
		"$(git ls-tree -r HEAD records | awk '{ print $1, $3 }')"
	assert_equal "$(git ls-files --debug "$r" | awk '$1 == "size:" { print $2 }')" "$(stat -c %s "$r")"
	assert_equal "$(git status --porcelain)" ""
}
