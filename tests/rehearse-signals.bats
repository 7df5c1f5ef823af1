#!/usr/bin/env bats
# rehearse interrupted at each of its stages, by SIGINT or SIGTERM, sent to
# it alone or to its whole process group: it ends by that signal, and leaves
# no process, nothing in TMPDIR and no half-made record. A stage that fails
# stops the whole pipeline at once, and is the one named.

load helper
load rehearse-helper

setup() {
	cd "$BATS_TEST_DIRNAME/.."
	root=$PWD
	held_worker="$root/tests/fixtures/held/idem-worker"
	out="$BATS_TEST_TMPDIR/out"
	err="$BATS_TEST_TMPDIR/err"
	held="$BATS_TEST_TMPDIR/held"
	rehearse_setup
	cp "$root/tests/fixtures/seeds/one-line.yaml" seeds/one.yaml
	commit_signed "seed and signers"
	head=$(git rev-parse HEAD)
}

teardown() {
	# a failed test may leave its rehearse running: end it, by its pid
	if [ -s "$BATS_TEST_TMPDIR/pid" ] && [ ! -e "$BATS_TEST_TMPDIR/how" ]; then
		kill -KILL "$(cat "$BATS_TEST_TMPDIR/pid")" 2>/dev/null || true
	fi
	rm -rf "$T"
}

# Starts rehearse ARGS in the background with TMPDIR=$T: alone, or with
# "group" first, as the leader of a process group of its own. Its pid goes
# to $BATS_TEST_TMPDIR/pid and, once it ends, how it ended ("exit N" or
# "signal N") to $BATS_TEST_TMPDIR/how.
launch() {
	local group=alone
	if [ "$1" = group ]; then
		group=group
		shift
	fi
	rm -f "$BATS_TEST_TMPDIR/pid" "$BATS_TEST_TMPDIR/how" "$held"
	python3 -c '
import os, subprocess, sys
p = subprocess.Popen(sys.argv[3:], start_new_session=sys.argv[1] == "group",
                     stdout=open(sys.argv[2] + "/out", "w"), stderr=open(sys.argv[2] + "/err", "w"))
with open(sys.argv[2] + "/pid.tmp", "w") as f:
    f.write(str(p.pid))
os.rename(sys.argv[2] + "/pid.tmp", sys.argv[2] + "/pid")
rc = p.wait()
with open(sys.argv[2] + "/how", "w") as f:
    f.write("signal %d" % -rc if rc < 0 else "exit %d" % rc)
' "$group" "$BATS_TEST_TMPDIR" env TMPDIR="$T" rehearse "$@" &
	for _ in $(seq 500); do
		[ -s "$BATS_TEST_TMPDIR/pid" ] && break
		sleep 0.01
	done
	pid=$(cat "$BATS_TEST_TMPDIR/pid")
	if [ "$group" = group ]; then
		assert_equal "$(ps -o pgid= -p "$pid" | tr -d ' ')" "$pid"
	fi
}

# Waits, up to 30 s, until the command succeeds.
wait_for() {
	for _ in $(seq 3000); do
		"$@" && return 0
		sleep 0.01
	done
	echo "never: $*" >&2
	cat "$err" >&2
	return 1
}

ours_run() {
	ours | grep -q -e "$1"
}

# A session of this rehearsal's sandbox waits for a lock.
lock_waited() {
	local run
	run=$(echo "$T"/rehearse.*/sandbox/run)
	[ -d "$run" ] || return 1
	[ "$(psql -X -A -t -h "$run" -U idem -d idem -c \
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'" 2>/dev/null)" = 1 ]
}

# Sends SIGNAL to rehearse, or to its process group with "group", and waits
# until it has ended.
interrupt() {
	if [ "$2" = group ]; then
		kill -s "$1" -- "-$pid"
	else
		kill -s "$1" "$pid"
	fi
	wait_for test -s "$BATS_TEST_TMPDIR/how"
	wait
}

# rehearse ended by the signal, after cleaning up: no process of its own,
# nothing in its TMPDIR, and, with "nothing-recorded", no record and no
# commit.
ended_by() {
	local number
	number=$(kill -l "$1")
	assert_equal "$(cat "$BATS_TEST_TMPDIR/how")" "signal $number"
	assert_equal "$(cat "$out")" ""
	# rehearse waits for every process it started: none is left, at once
	assert_equal "$(ours)" ""
	assert_equal "$(ls -A "$T")" ""
	if [ "${2:-}" = nothing-recorded ]; then
		grep -q '^rehearse: interrupted; nothing recorded$' "$err"
		assert_equal "$(ls -A records)" allowed_signers
		assert_equal "$(git rev-parse HEAD)" "$head"
		assert_equal "$(git status --porcelain)" ""
	fi
}

@test "interrupted while the sandbox starts: it waits for the start, then stops it" {
	for how in "INT alone" "TERM group"; do
		set -- $how
		launch $([ "$2" = group ] && echo group) -k "$key" -f records/allowed_signers seeds/one.yaml
		wait_for ours_run 'initdb\|postgres -D\|idem-sandbox -D'
		interrupt "$1" "$2"
		# the run went no further than the sandbox
		run grep -c '^+ ' "$err"
		assert_equal "$output" 1
		ended_by "$1" nothing-recorded
	done
}

@test "interrupted while the worker's schema is set up" {
	for sig in INT TERM; do
		IDEM_TEST_HOLD=setup IDEM_TEST_HELD="$held" launch -k "$key" -f records/allowed_signers \
			-w "$held_worker --guard unique" seeds/one.yaml
		wait_for test -e "$held"
		interrupt "$sig" alone
		ended_by "$sig" nothing-recorded
	done
}

@test "interrupted while every stage of the pipeline runs, seed-gen waiting for its seed" {
	# rehearse reads the seed once; seed-gen's read then waits for a writer
	mkfifo seeds/held.yaml
	for how in "INT group" "TERM alone"; do
		set -- $how
		timeout 30 sh -c 'cat seeds/one.yaml >seeds/held.yaml' &
		launch $([ "$2" = group ] && echo group) -k "$key" -f records/allowed_signers seeds/held.yaml
		wait_for ours_run 'seed-gen seeds/held.yaml'
		wait_for ours_run 'count-effects$'
		interrupt "$1" "$2"
		ended_by "$1" nothing-recorded
	done
}

@test "interrupted while count-effects --before, or dup-publish, waits for a lock" {
	# the table each stage touches first, held by another session
	for how in "demo.invoice_lines INT count-effects --before" "idem.message TERM dup-publish"; do
		set -- $how
		IDEM_TEST_HOLD="lock:$1" IDEM_TEST_HELD="$held" launch -k "$key" \
			-f records/allowed_signers -w "$held_worker --guard unique" seeds/one.yaml
		wait_for lock_waited
		ours | grep -q -e "${*:3}"
		interrupt "$2" alone
		ended_by "$2" nothing-recorded
	done
}

@test "interrupted while kill-at runs the worker, alone or with its process group" {
	for how in "INT alone" "INT group" "TERM group"; do
		set -- $how
		IDEM_TEST_HOLD=work IDEM_TEST_HELD="$held" launch $([ "$2" = group ] && echo group) \
			-k "$key" -f records/allowed_signers -w "$held_worker --guard unique" seeds/one.yaml
		wait_for test -e "$held"
		ours | grep -q 'kill-at -- '
		interrupt "$1" "$2"
		ended_by "$1" nothing-recorded
	done
}

@test "interrupted while mkrecord reads the seed, before it writes: no record, no commit" {
	# rehearse and seed-gen read the seed; mkrecord's read then waits for
	# a writer
	mkfifo seeds/held.yaml
	for sig in INT TERM; do
		timeout 30 sh -c 'cat seeds/one.yaml >seeds/held.yaml' &
		launch -k "$key" -f records/allowed_signers -c seeds/held.yaml
		wait_for ours_run 'seed-gen seeds/held.yaml'
		timeout 30 sh -c 'cat seeds/one.yaml >seeds/held.yaml' &
		wait_for ours_run 'mkrecord -k'
		interrupt "$sig" alone
		ended_by "$sig" nothing-recorded
	done
}

# mkrecord has made a file of the record, and not yet named it.
mkrecord_writing() {
	compgen -G 'records/.mkrecord-*' >/dev/null
}

@test "interrupted while mkrecord writes and commits: the record is whole, committed, and verifies" {
	# strace holds each fsync of mkrecord for a second: mkrecord is then
	# in its write, its files made and not yet named. rehearse runs the
	# programs beside it: a copy of it, beside the others and that mkrecord
	local bin="$BATS_TEST_TMPDIR/bin" real
	real=$(dirname "$(command -v rehearse)")
	mkdir "$bin"
	for program in "$real"/*; do
		ln -s "$program" "$bin/"
	done
	rm "$bin/rehearse" "$bin/mkrecord"
	cp "$real/rehearse" "$bin/rehearse"
	printf '#!/bin/sh\nexec strace -f -qq -o /dev/null -e trace=fsync -e inject=fsync:delay_enter=1000000 %s "$@"\n' \
		"$real/mkrecord" >"$bin/mkrecord"
	chmod +x "$bin/mkrecord"
	for sig in INT TERM; do
		PATH="$bin:$PATH" launch group -k "$key" -f records/allowed_signers -c seeds/one.yaml
		wait_for mkrecord_writing
		interrupt "$sig" group
		ended_by "$sig"
		# all of it, or none of it: here all, as the write had begun
		r=$(git show --name-only --format= HEAD -- '*.yaml')
		[ -f "$r" ] && [ -f "$r.sig" ] && [ -f "${r%.yaml}.md" ] && [ -f "${r%.yaml}.svg" ] &&
			[ -f "${r%.yaml}.trace.json" ]
		assert_equal "$(git status --porcelain)" ""
		verify-record -f records/allowed_signers "$r"
		git_ssh verify-commit HEAD 2>/dev/null
		assert_equal "$(ls -A records | grep -c '^\.')" 0
		git reset -q --hard "$head"
	done
}

@test "interrupted while verify-record runs: the record is whole and verifies" {
	mkfifo "$BATS_TEST_TMPDIR/held_signers"
	for sig in INT TERM; do
		launch -k "$key" -f "$BATS_TEST_TMPDIR/held_signers" seeds/one.yaml
		wait_for ours_run 'verify-record -f'
		interrupt "$sig" alone
		ended_by "$sig"
		r=$(sed -n 's/^rehearse: interrupted while verifying the record: //p' "$err")
		[ -f "$r" ] && [ -f "$r.sig" ] && [ -f "${r%.yaml}.md" ] && [ -f "${r%.yaml}.svg" ] &&
			[ -f "${r%.yaml}.trace.json" ]
		verify-record -f records/allowed_signers "$r"
		rm "$r" "$r.sig" "${r%.yaml}.md" "${r%.yaml}.svg" "${r%.yaml}.intoto.jsonl" "${r%.yaml}.trace.json"
		assert_equal "$(ls -A records)" allowed_signers
	done
}

@test "a stage that fails stops the pipeline at once, named with its message, whatever the deadline" {
	# a visibility timeout of 18 s gives kill-at a deadline of 300 s; a
	# worker that rehearse does not set up leaves the effect table missing
	sed -i 's/visibility_timeout: 300ms/visibility_timeout: 18s/' seeds/one.yaml
	git commit -q -am "slow retries"
	# rehearse does not wait for the deadline: the timeout, well under
	# it, is a bound against a hang, not a measure (make bench's stop part
	# measures how soon it ends)
	run --separate-stderr timeout 120 env TMPDIR="$T" rehearse -k "$key" -f records/allowed_signers \
		-w "python3 $root/tests/fixtures/workers/py_worker.py" seeds/one.yaml
	[ "$status" -eq 3 ]
	[[ "$stderr" != *deadline* ]]
	[[ "$stderr" == *'rehearse: count-effects --before failed (exit 3): count-effects: demo.invoice_lines: no such table'*'e.g. with rehearse -s SETUP'* ]]
	# the stages it stopped are not named
	assert_equal "$(grep -c '^rehearse: .* failed' <<<"$stderr")" 1
	assert_equal "$output" ""
	assert_equal "$(ours)" ""
	assert_equal "$(ls -A "$T")" ""
	assert_equal "$(ls -A records)" allowed_signers
}

@test "the first stage to fail is named, not those whose input then ended" {
	# rehearse reads a good seed; seed-gen, once it runs, a bad one, and
	# the stages after it then get no stream
	mkfifo seeds/held.yaml
	timeout 30 sh -c 'cat seeds/one.yaml >seeds/held.yaml' &
	launch -k "$key" -f records/allowed_signers seeds/held.yaml
	wait_for ours_run 'seed-gen seeds/held.yaml'
	echo "rehearsal: [" >seeds/held.yaml
	wait_for test -s "$BATS_TEST_TMPDIR/how"
	wait
	assert_equal "$(cat "$BATS_TEST_TMPDIR/how")" "exit 2"
	grep -q '^rehearse: seed-gen failed (exit 2): seed-gen: seeds/held.yaml' "$err"
	assert_equal "$(grep -c '^rehearse: .* failed' "$err")" 1
	assert_equal "$(ours)" ""
	assert_equal "$(ls -A "$T")" ""
	assert_equal "$(ls -A records)" allowed_signers
}
