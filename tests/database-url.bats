#!/usr/bin/env bats
# The database URL every worker gets from kill-at: psql (libpq) and
# node-postgres both reach the sandbox with it, whatever characters the
# socket directory, the database and the user hold; no password is in it.

load helper
load sandbox-tests

sandbox_file_setup() {
	# the same socket, through a directory whose name needs encoding
	ln -s "$PGHOST" "$IDEM_TEST_ROOT/sock dir+%&=#?'é"
	cd "$BATS_TEST_DIRNAME/.."
	idem-worker --setup
}

setup() {
	sandbox_test_setup
	sock="$IDEM_TEST_ROOT/sock dir+%&=#?'é"
	envfile="$BATS_TEST_TMPDIR/worker.env"
}

# Runs the pipeline with a worker that keeps its environment in $envfile,
# then works the queue as idem-worker; extra arguments go to kill-at. The
# worker writes beside $envfile and renames, so that one stopped at the
# run's end mid-write leaves the last whole copy.
run_worker() {
	seed-gen tests/fixtures/seeds/duplicate-publish.yaml | dup-publish |
		kill-at -D 30s "$@" -- sh -c 'env >"$0.$$" && mv "$0.$$" "$0"; exec idem-worker' "$envfile" \
		>"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" || {
		cat "$BATS_TEST_TMPDIR/err" >&2
		return 1
	}
}

# The value of one variable of the worker's environment.
worker_env() {
	sed -n "s/^$1=//p" "$envfile"
}

# A query value as Python's urllib encodes it: every byte but A-Z a-z 0-9 - . _ ~
encoded() {
	python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"
}

# A value quoted for a libpq connection string.
conninfo_quoted() {
	printf "'%s'" "$(printf %s "$1" | sed "s/[\\\\']/\\\\&/g")"
}

# What psql says of a connection made with the URL alone: no PG* setting
# and no idem setting left to fall back on.
psql_with() {
	env -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER -u IDEM_DATABASE \
		psql -X -A -t -v ON_ERROR_STOP=1 "$1" \
		-c "SELECT current_database(), current_user, (SELECT count(*) FROM idem.sandbox)" \
		-c '\echo :HOST :PORT'
}

# The same from node-postgres: pg's own parse of the URL, then the server.
node_with() {
	env -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER -u IDEM_DATABASE node -e '
		const { Client } = require("pg");
		const client = new Client({ connectionString: process.argv[1] });
		client.connect()
			.then(() => client.query("SELECT current_database() AS db, current_user AS who, " +
				"(SELECT count(*) FROM idem.sandbox) AS marks"))
			.then((res) => {
				const r = res.rows[0];
				console.log(`${r.db}|${r.who}|${r.marks}`);
				console.log(`${client.host} ${client.port}`);
				return client.end();
			})
			.catch((e) => { console.error(e.message); process.exit(1); });
	' "$1"
}

@test "every worker gets DATABASE_URL and IDEM_DATABASE_URL; psql and node-postgres reach the sandbox with it" {
	PGHOST=$sock run_worker
	url=$(worker_env DATABASE_URL)
	assert_equal "$(worker_env IDEM_DATABASE_URL)" "$url"
	assert_equal "$url" "postgresql:///idem?host=$(encoded "$sock")&port=5432&user=idem"
	run -0 psql_with "$url"
	assert_equal "$output" "idem|idem|1
$sock 5432"
	run -0 node_with "$url"
	assert_equal "$output" "idem|idem|1
$sock 5432"
	# and the run went through with the URL's worker: every line, once
	assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" 3
}

@test "the URL is where kill-at is connected, not an inherited DATABASE_URL" {
	DATABASE_URL=postgresql://elsewhere.invalid/production IDEM_DATABASE_URL=postgresql://elsewhere.invalid/x \
		run_worker
	run -0 psql_with "$(worker_env DATABASE_URL)"
	assert_equal "${lines[0]}" "idem|idem|1"
	run -0 node_with "$(worker_env IDEM_DATABASE_URL)"
	assert_equal "${lines[0]}" "idem|idem|1"
}

@test "-d with an odd database, an odd user and a password: the URL names both, and never the password" {
	local db='odd db:@&=+$,;é %' user='odd user@:&=+%' ci
	sql "CREATE ROLE \"$user\" LOGIN IN ROLE idem"
	sql "CREATE DATABASE \"$db\" TEMPLATE idem"
	ci="host=$(conninfo_quoted "$sock") port=5432 dbname=$(conninfo_quoted "$db") user=$(conninfo_quoted "$user") password=not-a-secret"
	IDEM_DATABASE=$ci PGHOST=$sock run_worker -d "$ci"
	url=$(worker_env DATABASE_URL)
	[[ $url != *not-a-secret* && $url != *password* ]]
	assert_equal "$(worker_env IDEM_DATABASE)" "$ci"
	run -0 psql_with "$url"
	assert_equal "$output" "$db|$user|1
$sock 5432"
	run -0 node_with "$url"
	assert_equal "$output" "$db|$user|1
$sock 5432"
	assert_equal "$(psql -X -A -t -d "$ci" -c 'SELECT count(*) FROM demo.invoice_lines')" 3
}
