#!/usr/bin/env bats
# The database kill points of kill-at alone (failpoint-kill, which runs
# kill-at's code for one kill point) and the mapping from a session to the
# process that owns it (peer-of), against the real sandbox and real psql
# clients.

load helper
load sandbox-tests

setup() {
	sandbox_test_setup
	idem-worker --setup -g unique
}

insert_line() {
	echo "INSERT INTO demo.invoice_lines (job_id, invoice_id, line_no, amount_cents, currency) VALUES ('a', 'inv-1', 1, 100, 'EUR')"
}

# kill_at STEP SQL [OPTION...]: a psql client running SQL held at STEP for
# key inv-1/1 and killed; the options are failpoint-kill's
kill_at() {
	local step=$1 statement=$2
	shift 2
	test_tool failpoint-kill "$@" -t demo.invoice_lines -c '["invoice_id", "line_no"]' \
		-q rehearsal_matrix -s "$step" -k '["inv-1",1]' psql -X -q -c "$statement"
}

@test "peer-of finds the process that holds a session's Unix socket, and no other" {
	# the backend notices its client gone within 100 ms, not at the sleep's end
	PGOPTIONS='-c client_connection_check_interval=100ms' \
		setsid psql -X -q -c 'SELECT pg_sleep(60) -- marker-peer' >/dev/null &
	client=$!
	until backend=$(sql "SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60) -- marker-peer%'") && [ -n "$backend" ]; do
		sleep 0.05
	done
	run test_tool peer-of "$backend" -1 "$$" "$client"
	kill "$client"
	[ "$status" -eq 0 ]
	assert_equal "$output" "$client"
	run test_tool peer-of "$backend" -1 "$$"
	[ "$status" -eq 1 ]
	# a session gone since it was listed is held by no process: not an error
	until [ ! -e "/proc/$backend" ]; do sleep 0.05; done
	run test_tool peer-of "$backend" -1 "$$" "$client"
	[ "$status" -eq 1 ]
	assert_equal "$output" ""
}

@test "peer-of finds the process of a TCP connection by its client port" {
	setsid python3 -c '
import os, socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
client = socket.create_connection(server.getsockname())
server.accept()
print(os.getpid(), client.getsockname()[1], flush=True)
time.sleep(60)' >"$BATS_TEST_TMPDIR/tcp" &
	until [ -s "$BATS_TEST_TMPDIR/tcp" ]; do sleep 0.05; done
	read -r pid port <"$BATS_TEST_TMPDIR/tcp"
	run test_tool peer-of 0 "$port" "$pid"
	kill "$pid"
	[ "$status" -eq 0 ]
	assert_equal "$output" "$pid"
}

@test "a client killed at before-write is terminated before its session goes on: nothing written" {
	run kill_at before-write "$(insert_line)"
	[ "$status" -eq 0 ]
	[[ "$output" == "killed "* ]]
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 0
}

@test "a client killed at before-commit, inside COMMIT, is terminated first: nothing committed" {
	run kill_at before-commit "$(insert_line)"
	[ "$status" -eq 0 ]
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 0
	# the kill points are gone with the run
	assert_equal "$(sql "SELECT to_regnamespace('idem_run') IS NULL")" t
	assert_equal "$(sql "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'idem_run%'")" 0
}

@test "a point armed, disarmed and armed again holds the next writer" {
	run kill_at before-write "$(insert_line)" -a
	[ "$status" -eq 0 ]
	[[ "$output" == "killed "* ]]
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 0
}

@test "letting the held session go before terminating it lets a dead client commit" {
	run kill_at before-commit "$(insert_line)" -r
	[ "$status" -eq 0 ]
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 1
	sql 'TRUNCATE demo.invoice_lines'
	run kill_at before-write "$(insert_line)" -r
	[ "$status" -eq 0 ]
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 1
}

@test "an ack is held at after-commit: killed there, the message stays unacked" {
	queue_reset
	msg=$(sql "SELECT idem.send('rehearsal_matrix', 'a', '[\"inv-1\",1]', '{}')")
	run kill_at after-commit "SELECT idem.ack($msg)"
	[ "$status" -eq 0 ]
	assert_equal "$(sql "SELECT acked_at IS NULL FROM idem.message WHERE msg_id = $msg")" t
	run kill_at after-commit "SELECT idem.ack($msg)" -r
	[ "$status" -eq 0 ]
	assert_equal "$(sql "SELECT acked_at IS NULL FROM idem.message WHERE msg_id = $msg")" f
}
