#!/usr/bin/env bats
# idem-sandbox: a real PostgreSQL in a private directory, its queue schema,
# roles and marker, and a stop that leaves nothing behind.

load helper
load sandbox-tests

postmaster_pid() {
	head -n 1 "$IDEM_TEST_ROOT/sandbox/data/postmaster.pid"
}

@test "start prints PG settings that reach the sandbox database" {
	assert_equal "$PGHOST" "$IDEM_TEST_ROOT/sandbox/run"
	assert_equal "$(sql 'SELECT current_database()')" idem
	assert_equal "$(sql 'SELECT count(*) FROM idem.sandbox')" 1
}

@test "the server listens on a Unix socket only, records commit times and does not wait for flushes" {
	assert_equal "$(sql 'SHOW listen_addresses')" ""
	assert_equal "$(sql 'SHOW track_commit_timestamp')" on
	assert_equal "$(sql 'SHOW synchronous_commit')" off
	assert_equal "$(stat -c %a "$PGHOST")" 700
}

@test "the queue's table is vacuumed after every 2,000 reads and acks, by an autovacuum that looks every second" {
	assert_equal "$(sql 'SHOW autovacuum_naptime')" 1s
	assert_equal "$(sql "SELECT array_to_string(reloptions, ' ') FROM pg_class WHERE oid = 'idem.message'::regclass")" \
		"autovacuum_vacuum_threshold=2000 autovacuum_vacuum_scale_factor=0"
}

@test "as root, the server runs as an unprivileged user" {
	[ "$(id -u)" -eq 0 ] || skip "not root"
	assert_equal "$(ps -o user= -p "$(postmaster_pid)")" postgres
}

@test "starting twice reuses the running server" {
	pid=$(postmaster_pid)
	idem-sandbox -D "$IDEM_TEST_ROOT/sandbox" start >"$BATS_TEST_TMPDIR/env"
	assert_equal "$(postmaster_pid)" "$pid"
	grep -q "^PGHOST='$PGHOST'; export PGHOST;$" "$BATS_TEST_TMPDIR/env"
	assert_equal "$(sql 'SELECT count(*) FROM idem.sandbox')" 1
}

@test "the three roles have exactly their privileges" {
	run psql -X -U idem_reviewer -c "INSERT INTO idem.sandbox DEFAULT VALUES"
	[ "$status" -ne 0 ]
	[[ "$output" == *"permission denied"* ]]
	assert_equal "$(psql -X -At -U idem_reviewer -c 'SELECT count(*) FROM idem.message')" 0
	run psql -X -U idem_publisher -c "SELECT count(*) FROM idem.message"
	[[ "$output" == *"permission denied"* ]]
	run psql -X -U idem_publisher -c "SELECT * FROM idem.read('q', '1s')"
	[[ "$output" == *"permission denied for function read"* ]]
	run psql -X -U idem_worker -c "SELECT idem.send('q', 'j', 'k', '{}')"
	[[ "$output" == *"permission denied for function send"* ]]
	psql -X -q -U idem_worker -c "CREATE SCHEMA worker_test; CREATE TABLE worker_test.effects (k text)"
	assert_equal "$(psql -X -At -U idem_reviewer -c 'SELECT count(*) FROM worker_test.effects')" 0
}

@test "the settings hold a DATABASE_URL that psql reaches the sandbox with alone" {
	eval "$(idem-sandbox -D "$IDEM_TEST_ROOT/sandbox" env)"
	assert_equal "$DATABASE_URL" "postgresql:///idem?host=$(printf %s "$PGHOST" | sed 's,/,%2F,g')&port=5432&user=idem"
	assert_equal "$IDEM_DATABASE_URL" "$DATABASE_URL"
	assert_equal "$(env -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER \
		psql -X -A -t "$DATABASE_URL" -c 'SELECT count(*) FROM idem.sandbox')" 1
}

@test "env prints the settings again; status tells running from stopped" {
	run idem-sandbox -D "$IDEM_TEST_ROOT/sandbox" env
	[ "$status" -eq 0 ]
	[[ "$output" == *"PGDATABASE='idem'; export PGDATABASE;"* ]]
	run idem-sandbox -D "$IDEM_TEST_ROOT/sandbox" status
	[ "$status" -eq 0 ]
	[[ "$output" == *": running, socket in $PGHOST" ]]
}

@test "a directory that is not a sandbox is refused, and left alone" {
	mkdir "$BATS_TEST_TMPDIR/precious"
	echo keep >"$BATS_TEST_TMPDIR/precious/file"
	run idem-sandbox -D "$BATS_TEST_TMPDIR/precious" start
	[ "$status" -eq 2 ]
	[[ "$output" == *"is not an idem sandbox"* ]]
	run idem-sandbox -D "$BATS_TEST_TMPDIR/precious" --purge stop
	[ "$status" -eq 2 ]
	assert_equal "$(cat "$BATS_TEST_TMPDIR/precious/file")" keep
}

@test "a relative sandbox path is a usage error" {
	run idem-sandbox -D relative/dir start
	[ "$status" -eq 2 ]
}

@test "stop leaves no process and --purge leaves no files; start from scratch is quick" {
	dir="$IDEM_TEST_ROOT/second"
	start=$(date +%s%N)
	idem-sandbox -D "$dir" start >/dev/null
	echo "# start to ready: $(( ($(date +%s%N) - start) / 1000000 )) ms" >&3
	pid=$(head -n 1 "$dir/data/postmaster.pid")
	kill -0 "$pid"
	idem-sandbox -D "$dir" stop
	# the server has exited: no process, or a zombie that no init reaps, as
	# in a container whose first process reaps nothing
	state=$(ps -o stat= -p "$pid" || true)
	[[ -z "$state" || "$state" == Z* ]]
	[ -d "$dir/data" ]
	run idem-sandbox -D "$dir" status
	[ "$status" -eq 1 ]
	[[ "$output" == *": stopped" ]]
	idem-sandbox -D "$dir" --purge stop
	[ ! -e "$dir" ]
	assert_equal "$(pgrep -f -- "-D $dir/data" || true)" ""
}

@test "new sandboxes are copies of one cluster initdb made, kept in the cache, one for the server's binaries" {
	cache="$IDEM_TEST_ROOT/cache"
	mkdir "$cache"
	[ "$(id -u)" -ne 0 ] || chown postgres "$cache"
	# two sandboxes started together into an empty cache: each whole
	for n in 1 2; do
		IDEM_SANDBOX_CACHE="$cache" idem-sandbox -D "$IDEM_TEST_ROOT/c$n" start >"$BATS_TEST_TMPDIR/env$n" &
	done
	wait
	assert_equal "$(ls "$cache" | grep -c '^cluster-1-')" 1
	assert_equal "$(ls "$cache" | grep -vc '^cluster-1-[0-9a-f-]*$' || true)" 0
	for n in 1 2; do
		( eval "$(cat "$BATS_TEST_TMPDIR/env$n")" &&
			assert_equal "$(sql 'SHOW unix_socket_directories')" "$IDEM_TEST_ROOT/c$n/run" &&
			assert_equal "$(sql 'SELECT count(*) FROM idem.sandbox')" 1 )
	done
	for n in 1 2; do
		idem-sandbox -D "$IDEM_TEST_ROOT/c$n" --purge stop
	done
	# the next one is a copy: initdb does not run
	IDEM_SANDBOX_CACHE="$cache" idem-sandbox -D "$IDEM_TEST_ROOT/c5" start >/dev/null
	run ! grep -q 'creating subdirectories' "$IDEM_TEST_ROOT/c5/server.log"
	idem-sandbox -D "$IDEM_TEST_ROOT/c5" --purge stop
	# without a cache, initdb makes the cluster itself, and nothing is kept
	IDEM_SANDBOX_CACHE= idem-sandbox -D "$IDEM_TEST_ROOT/c4" start >/dev/null
	grep -q 'creating subdirectories' "$IDEM_TEST_ROOT/c4/server.log"
	idem-sandbox -D "$IDEM_TEST_ROOT/c4" --purge stop
	assert_equal "$(ls "$cache" | grep -c '^cluster-1-')" 1
}

@test "a sandbox directory that is a symbolic link, or another user's, is refused" {
	mkdir "$BATS_TEST_TMPDIR/real"
	ln -s "$BATS_TEST_TMPDIR/real" "$BATS_TEST_TMPDIR/link"
	run idem-sandbox -D "$BATS_TEST_TMPDIR/link" start
	[ "$status" -eq 2 ]
	[[ "$output" == *"is a symbolic link; not using it"* ]]
	[ "$(id -u)" -eq 0 ] || skip "not root"
	mkdir "$BATS_TEST_TMPDIR/theirs"
	touch "$BATS_TEST_TMPDIR/theirs/.idem-sandbox"
	chown -R nobody "$BATS_TEST_TMPDIR/theirs"
	run idem-sandbox -D "$BATS_TEST_TMPDIR/theirs" start
	[ "$status" -eq 2 ]
	[[ "$output" == *"is not a private directory of yours"* ]]
}

@test "idem.read takes the oldest message through the waiting ones, not through every acked one, however the table is analyzed" {
	queue_reset
	sql "INSERT INTO idem.message (queue, job_id, business_key, payload)
		SELECT 'q', 'j' || i, 'k' || i, '{}' FROM generate_series(1, 40000) i" >/dev/null
	sql "UPDATE idem.message SET acked_at = clock_timestamp() WHERE msg_id <= 30000" >/dev/null
	sql "ANALYZE idem.message" >/dev/null
	# costs under which the primary key's order looks the cheaper one;
	# auto_explain shows how idem.read's own statement ran
	run psql -X -v ON_ERROR_STOP=1 -c "LOAD 'auto_explain'" -c "SET auto_explain.log_min_duration = 0" \
		-c "SET auto_explain.log_nested_statements = on" -c "SET auto_explain.log_analyze = on" \
		-c "SET auto_explain.log_level = notice" -c "SET seq_page_cost = 100" \
		-c "SELECT msg_id FROM idem.read('q', '1 minute')"
	[ "$status" -eq 0 ]
	[[ "$output" == *" 30001"* ]]
	picked=$(printf '%s\n' "$output" | sed -n '/CTE picked/,/CTE taken/p')
	[[ "$picked" == *"Index Scan using message_waiting on message"* ]]
	[[ "$picked" != *"Rows Removed by Filter"* ]]
	queue_reset
}
