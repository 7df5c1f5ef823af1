#!/usr/bin/env bats
# The join of kill-at's evidence alone (evidence-join, which runs the
# evidence module's code on deliveries, ledger writes, sessions, steps and
# lines it makes up), done by the real sandbox database as kill-at has it
# done.

load helper
load sandbox-tests

@test "each write goes to its delivery, each step and branch line to theirs, each kill to its recover row" {
	run test_tool evidence-join
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"evidence-join: 7 passed, 0 failed"* ]]
}

