#!/usr/bin/env bats
# A queue adapter of the team's own, named by the seed (idem-seed(5),
# queue.adapter): read and checked by seed-gen, carried in the stream with
# its SHA-256 and refused downstream once it changed, kept in the record
# and its statement, checked at the record's revision, rerun there, and
# making the record stale in the history once it changes.

load helper
load rehearse-helper

setup() {
	rehearse_setup
	quick_example_seed
	# the idem adapter copied as the team's own kind, beside the seed
	mkdir seeds/queues
	sed 's/^-- kind: idem$/-- kind: team-jobs/' "$root/lib/queues/idem.sql" >seeds/queues/team.sql
	sed -i 's|^queue: rehearsal_invoice_line$|queue: { kind: team-jobs, name: rehearsal_invoice_line, adapter: queues/team.sql }|' \
		seeds/invoice-line.yaml
	grep -q 'adapter: queues/team.sql' seeds/invoice-line.yaml
}

teardown() {
	sandbox_down
	rm -rf "$T"
}

rh() {
	TMPDIR="$T" rehearse "$@"
}

# seeds/invoice-line.yaml with its queue line replaced by $1, as $2.
seed_with_queue() {
	sed "s|^queue: .*|queue: $1|" seeds/invoice-line.yaml >"$2"
}

@test "a seed naming its own adapter file rehearses to a signed record that keeps the adapter, verified and rerun" {
	commit_signed "seed, adapter and signers"
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	r="$output"
	grep -q '^verdict: "pass"$' "$r"
	grep -q '^record: 10$' "$r"
	sha=$(sha256sum seeds/queues/team.sql | cut -d ' ' -f 1)
	# the queue keeps the adapter: where it is, its bytes' SHA-256
	assert_equal "$(sed -n '/^queue:/,/^[a-z]/p' "$r" | grep -E '^ +(kind|path|repo_path|sha256):')" \
		"$(printf '  kind: "team-jobs"\n    path: "seeds/queues/team.sql"\n    repo_path: "seeds/queues/team.sql"\n    sha256: "%s"' "$sha")"
	# the statement lists the adapter as a subject
	cut -d '"' -f 4 <<<"$(grep -o '"payload":"[^"]*"' "${r%.yaml}.intoto.jsonl")" | base64 -d |
		grep -q "{\"digest\":{\"sha256\":\"$sha\"},\"name\":\"seeds/queues/team.sql\"}"
	run verify-record "$r"
	[ "$status" -eq 0 ]
	run verify-record --rerun "$r"
	[ "$status" -eq 0 ]
	[[ "$output" == *"rerun reproduces the counts"* ]]
	run verify-record --history
	[ "$status" -eq 0 ]
	# a record whose adapter hash is not the bytes at its revision, signed
	# again, is refused naming the adapter; its seed still checks
	sed -i "s/^    sha256: \"$sha\"\$/    sha256: \"$(printf '0%.0s' {1..64})\"/" "$r"
	resign "$r"
	run -1 verify-record "$r"
	[[ "$output" == *"$r: queue adapter: seeds/queues/team.sql at "*" has SHA-256 $sha, the record says $(printf '0%.0s' {1..64})"* ]]
	run ! grep -q 'seed: ' <<<"$output"
}

@test "a built-in kind keeps its stream and record as they were: no adapter fields" {
	quick_example_seed
	run --separate-stderr seed-gen seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	assert_equal "$(sed -n 2p <<<"$output" | awk -F '\t' '{ print NF }')" 22
}

@test "a changed adapter committed after the record makes the record stale in the history; the unchanged one does not" {
	commit_signed "seed, adapter and signers"
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	r="$output"
	run verify-record --history
	[ "$status" -eq 0 ]
	[[ "$output" != *stale* ]]
	echo '-- a comment of the team, after the record' >>seeds/queues/team.sql
	commit_signed "adapter changed after the record"
	run verify-record --history
	[ "$status" -eq 1 ]
	[[ "$output" == *"stale  the queue adapter seeds/queues/team.sql has changed since the run"* ]]
	# the record itself still verifies: its adapter at its revision is the one it rehearsed
	run verify-record "$r"
	[ "$status" -eq 0 ]
}

@test "a pull request that changes the adapter of the newest record fails the check" {
	commit_signed "seed, adapter and signers"
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c seeds/invoice-line.yaml
	[ "$status" -eq 0 ]
	git branch -q base
	echo '-- a comment of the team, in a pull request' >>seeds/queues/team.sql
	commit_signed "adapter changed in a pull request"
	run verify-record --history --since base
	[ "$status" -eq 1 ]
	[[ "$output" == *"stale: seeds/queues/team.sql changed in this pull request"* ]]
}

@test "an adapter not committed is refused by mkrecord and, before anything runs, by rehearse, as the seed is" {
	git add seeds/invoice-line.yaml records
	signed_commit -m "seed and signers, not the adapter"
	run --separate-stderr rh -k "$key" -f records/allowed_signers -c seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "rehearse: seeds/queues/team.sql has changes not committed at $(git rev-parse --short=12 HEAD); run: git add seeds/queues/team.sql && git commit -m seed, or give --allow-dirty and the record will say so"
	assert_equal "$(ls records)" "allowed_signers"
	# mkrecord, of a stream made without rehearse
	sandbox_up
	idem-worker --guard unique --setup
	seed-gen seeds/invoice-line.yaml | count-effects --before | dup-publish |
		kill-at -- idem-worker --guard unique | count-effects >"$BATS_TEST_TMPDIR/stream"
	run --separate-stderr mkrecord -k "$key" <"$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "mkrecord: seeds/queues/team.sql has changes not committed at $(git rev-parse --short=12 HEAD); run: git add seeds/queues/team.sql && git commit -m seed, or give --allow-dirty and the record will say so"
	assert_equal "$(ls records)" "allowed_signers"
}

@test "a bad adapter is refused by seed-gen with exit 2, naming the section and its line, writing nothing" {
	# a section every adapter has, missing
	grep -v '^-- @observe$' seeds/queues/team.sql >seeds/queues/no-observe.sql
	seed_with_queue '{ kind: team-jobs, name: q, adapter: queues/no-observe.sql }' seeds/a.yaml
	run --separate-stderr seed-gen seeds/a.yaml
	[ "$status" -eq 2 ]
	assert_equal "$output" ""
	want='^seed-gen: seeds/a\.yaml:4:[0-9]+: queue\.adapter: seeds/queues/no-observe\.sql:[0-9]+: section @observe: missing; every adapter has '
	[[ "$stderr" =~ $want ]]
	assert_equal "$(wc -l <<<"$stderr")" 1
	# a section of no known name, on the line it begins
	sed 's/^-- @expire$/-- @expiry/' seeds/queues/team.sql >seeds/queues/typo.sql
	line=$(grep -n '^-- @expiry$' seeds/queues/typo.sql | cut -d : -f 1)
	seed_with_queue '{ kind: team-jobs, name: q, adapter: queues/typo.sql }' seeds/a.yaml
	run --separate-stderr seed-gen seeds/a.yaml
	[ "$status" -eq 2 ]
	assert_equal "$output" ""
	[[ "$stderr" == *"queue.adapter: seeds/queues/typo.sql:$line: section @expiry: not a section of an adapter (idem-sandbox(1), QUEUE ADAPTERS)" ]]
	# a section with no SQL in it
	awk '/^-- @deliveries$/ { print; skip = 1; next } /^-- @/ { skip = 0 } !skip' seeds/queues/team.sql >seeds/queues/empty.sql
	line=$(grep -n '^-- @deliveries$' seeds/queues/empty.sql | cut -d : -f 1)
	seed_with_queue '{ kind: team-jobs, name: q, adapter: queues/empty.sql }' seeds/a.yaml
	run --separate-stderr seed-gen seeds/a.yaml
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"seeds/queues/empty.sql:$line: section @deliveries: no SQL in it" ]]
	# the seed's kind is not the file's
	seed_with_queue '{ kind: pg-boss, name: q, adapter: queues/team.sql }' seeds/a.yaml
	run --separate-stderr seed-gen seeds/a.yaml
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"seeds/queues/team.sql:1: kind team-jobs: the seed's queue is of kind pg-boss" ]]
	# no file there
	seed_with_queue '{ kind: team-jobs, name: q, adapter: queues/none.sql }' seeds/a.yaml
	run --separate-stderr seed-gen seeds/a.yaml
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"queue.adapter: seeds/queues/none.sql: "* ]]
	# a kind that has no built-in adapter, and no file named
	seed_with_queue '{ kind: team-jobs, name: q }' seeds/a.yaml
	run --separate-stderr seed-gen seeds/a.yaml
	[ "$status" -eq 2 ]
	[[ "$stderr" == *'queue.kind: expected idem, pg-boss or graphile-worker, got "team-jobs"; a kind of your own names its adapter: PATH' ]]
}

@test "an adapter path that is absolute or climbs with .. is refused, naming the seed's line and field" {
	for p in "$PWD/seeds/queues/team.sql" ../seeds/queues/team.sql queues/../queues/team.sql queues/..; do
		seed_with_queue "{ kind: team-jobs, name: q, adapter: $p }" seeds/a.yaml
		run --separate-stderr seed-gen seeds/a.yaml
		[ "$status" -eq 2 ]
		assert_equal "$output" ""
		[[ "$stderr" =~ ^seed-gen:\ seeds/a.yaml:4:[0-9]+:\ queue\.adapter: ]]
		[[ "$stderr" == *": $p: a path from the seed's directory, not absolute and without .." ]]
	done
	# nor out through a symbolic link, to a file or a directory, which git
	# would keep as the link
	mkdir "$BATS_TEST_TMPDIR/elsewhere"
	cp seeds/queues/team.sql "$BATS_TEST_TMPDIR/elsewhere/team.sql"
	ln -s "$BATS_TEST_TMPDIR/elsewhere/team.sql" seeds/queues/link.sql
	ln -s "$BATS_TEST_TMPDIR/elsewhere" seeds/out
	for p in queues/link.sql out/team.sql; do
		seed_with_queue "{ kind: team-jobs, name: q, adapter: $p }" seeds/a.yaml
		run --separate-stderr seed-gen seeds/a.yaml
		[ "$status" -eq 2 ]
		assert_equal "$output" ""
		[[ "$stderr" == "seed-gen: seeds/a.yaml:4:"[0-9]*": queue.adapter: $p: a symbolic link on the way;"* ]]
	done
	# the file itself, beside the seed, is taken
	seed_with_queue "{ kind: team-jobs, name: q, adapter: queues/team.sql }" seeds/a.yaml
	run -0 seed-gen seeds/a.yaml
}

@test "an adapter changed after seed-gen read it is refused downstream, exit 2, one line" {
	sandbox_up
	seed-gen seeds/invoice-line.yaml | count-effects --before | dup-publish >"$BATS_TEST_TMPDIR/stream"
	echo '-- changed after seed-gen' >>seeds/queues/team.sql
	for p in 'count-effects --before' dup-publish 'kill-at -- idem-worker' count-effects; do
		run --separate-stderr $p <"$BATS_TEST_TMPDIR/stream"
		[ "$status" -eq 2 ]
		assert_equal "$output" ""
		[[ "$stderr" == "${p%% *}: seeds/queues/team.sql: the adapter changed since seed-gen read it (SHA-256 "*", the seed row says "*"): run the pipeline again from seed-gen" ]]
		assert_equal "$(wc -l <<<"$stderr")" 1
	done
	# and gone
	rm seeds/queues/team.sql
	run --separate-stderr dup-publish <"$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "dup-publish: seeds/queues/team.sql: "* ]]
}
