#!/usr/bin/env bats
# What rehearse says when a run cannot go well: a worker that dies at
# import named with its exit status and its last line; one error per
# failure, the first stage's; -K keeping the stream and every program's
# standard error; and a seed outside git or not committed refused before
# the sandbox starts, with the command that fixes it.

load helper
load rehearse-helper

setup() {
	rehearse_setup
	quick_example_seed
	commit_signed "seed and signers"
}

teardown() {
	local d
	for d in "$T"/rehearse.*/sandbox; do
		[ ! -d "$d" ] || idem-sandbox -D "$d" --purge stop >/dev/null || true
	done
	rm -rf "$T"
}

rh() {
	TMPDIR="$T" rehearse "$@"
}

boom='python3 -c '\''raise RuntimeError("boom")'\'

@test "a Python worker that raises at import: rehearse names its exit status and the exception's last line, once" {
	run --separate-stderr rh -s 'idem-worker --guard unique --setup' -w "$boom" seeds/invoice-line.yaml
	echo "$stderr" >&2
	[ "$status" -eq 3 ]
	[[ "$stderr" == *$'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\nRuntimeError: boom\nkill-at: worker 0 exited with status 1 before its first delivery, again after 20 restarts; giving up; its last words: RuntimeError: boom\n'* ]]
	[[ "$stderr" == *"rehearse: kill-at failed (exit 3): kill-at: worker 0 exited with status 1 before its first delivery, again after 20 restarts; giving up; its last words: RuntimeError: boom" ]]
	# one error: count-effects after it says nothing of the empty stream
	[[ "$stderr" != *"empty stream"* ]]
	[ "$(grep -c '^count-effects:' <<<"$stderr")" -eq 0 ]
	# no scratch directory, empty or not, and no process left
	assert_equal "$(ls "$T")" ""
	assert_equal "$(ours)" ""
}

@test "a failing first stage gives one error, not a second about the empty stream" {
	# no setup: count-effects --before finds no effect table, and the
	# stages after it read an empty stream
	run --separate-stderr rh -s '' seeds/invoice-line.yaml
	echo "$stderr" >&2
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"rehearse: count-effects --before failed (exit 3): count-effects: "* ]]
	[[ "$stderr" != *"empty stream"* ]]
	[ "$(grep -c -E '^(dup-publish|kill-at|mkrecord):' <<<"$stderr")" -eq 0 ]
	[ "$(grep -c '^count-effects:' <<<"$stderr")" -eq 1 ]
	assert_equal "$(ls "$T")" ""
}

@test "an empty stream from a pipe is refused quietly; from a file, with the header it expects" {
	for p in count-effects dup-publish mkrecord 'kill-at -- true'; do
		run --separate-stderr bash -c "false | $p"
		[ "$status" -eq 2 ] && [ -z "$stderr" ] && [ -z "$output" ]
		run --separate-stderr $p </dev/null
		[ "$status" -eq 2 ]
		assert_equal "$stderr" "${p%% *}: stdin: empty stream: expected the header line \"#idem-tsv<TAB>1.10\""
	done
}

@test "-K keeps the sandbox, the stream and each program's standard error, and says where and how to throw them away" {
	run --separate-stderr rh -K -s 'idem-worker --guard unique --setup' -w "$boom" seeds/invoice-line.yaml
	[ "$status" -eq 3 ]
	d=$(ls -d "$T"/rehearse.*)
	[[ "$stderr" == *"rehearse: kept in $d: the sandbox (sandbox), the stream (stream.tsv), what each stage read (NAME.in.tsv) and each program's standard error (NAME.stderr); throw it away with: idem-sandbox -D $d/sandbox --purge stop && rm -r $d" ]]
	[ -d "$d/sandbox" ] && [ -f "$d/stream.tsv" ]
	# what kill-at read: the stream to rerun it on
	head -n 1 "$d/kill-at.in.tsv" | grep -q '^#idem-tsv	1\.'
	grep -q '^publish	' "$d/kill-at.in.tsv"
	[ ! -s "$d/count-effects.in.tsv" ]
	[ -f "$d/dup-publish.in.tsv" ] && [ -f "$d/count-effects-before.in.tsv" ]
	grep -q '^RuntimeError: boom$' "$d/kill-at.stderr"
	grep -q 'its last words: RuntimeError: boom$' "$d/kill-at.stderr"
	[ -f "$d/seed-gen.stderr" ] && [ -f "$d/count-effects-before.stderr" ]
	# no key material is kept
	[ ! -e "$d/throwaway_ed25519" ]
	# the command it gives leaves nothing
	idem-sandbox -D "$d/sandbox" --purge stop >/dev/null
	rm -r "$d"
	assert_equal "$(ls "$T")" ""
}

@test "a seed outside git is refused before the sandbox starts, with the commands that fix it" {
	out=$BATS_TEST_TMPDIR/nogit
	mkdir -p "$out/seeds"
	cp seeds/invoice-line.yaml "$out/seeds/x.yaml"
	cd "$out"
	run --separate-stderr rh seeds/x.yaml
	[ "$status" -eq 3 ]
	assert_equal "$stderr" "rehearse: seeds/x.yaml: not in a git repository; run: git init && git add seeds/x.yaml && git commit -m seed"
	assert_equal "$(ls "$T")" ""
}

@test "an uncommitted seed is refused before the sandbox starts, with the fix; --allow-dirty lets it through" {
	echo "# changed" >>seeds/invoice-line.yaml
	head=$(git rev-parse HEAD)
	run --separate-stderr rh seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "rehearse: seeds/invoice-line.yaml has changes not committed at ${head:0:12}; run: git add seeds/invoice-line.yaml && git commit -m seed, or give --allow-dirty and the record will say so"
	assert_equal "$(ls "$T")" ""
	# the record is made, and says so; verify-record never verifies it
	run --separate-stderr rh --allow-dirty seeds/invoice-line.yaml
	echo "$stderr" >&2
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"| mkrecord -k "*" -o records --allow-dirty"* ]]
	[ -f "$output" ]
	[[ "$stderr" == *"$output: NOT verified"* ]]
	assert_equal "$(ls "$T")" ""
}

@test "an -o that no record can be written in is refused before the sandbox starts, with the fix" {
	run --separate-stderr rh -o no/such/dir seeds/invoice-line.yaml
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "rehearse: -o no/such/dir: no such directory, nor its parent no/such; run: mkdir -p no/such/dir"
	assert_equal "$(ls "$T")" ""
}
