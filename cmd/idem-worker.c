/* idem-worker: the reference worker. It takes invoice-line jobs from the
 * sandbox queue, writes one line per job, makes one call to a stand-in
 * vendor, and acks; its guard against doing that twice is chosen by option,
 * good or bad, so the toolchain can be seen catching real bugs. It speaks
 * the step protocol of idem-step(7) at every standard step. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "pg.h"
#include "step.h"
#include "util.h"

static const char synopsis[] =
	"usage: idem-worker [-d conninfo] [-g guard] [-k key-scope] [-q queue]\n"
	"                   [-t visibility-timeout] [-p poll-interval] [-o owner] [--once]\n"
	"                   [--no-step]\n"
	"       idem-worker [-d conninfo] [-g guard] [-k key-scope] --setup\n";

enum guard { GUARD_NONE, GUARD_CHECK_THEN_INSERT, GUARD_MEMORY, GUARD_UNIQUE, GUARD_OUTBOX };

static const char *const guard_names[] = {
	"none", "check-then-insert", "memory", "unique", "outbox", NULL
};

static struct {
	enum guard guard;
	int job_scope;			/* the guard's key: job id, else business key */
	const char *queue;
	const char *owner;
	char vt[48];			/* visibility timeout, as an interval */
	long poll_ms;
	int once;
	int no_step;			/* never speak to IDEM_STEP_SOCK */
	PGconn *conn;			/* the worker's own transactions */
	PGconn *vendor;			/* the stand-in vendor, outside them */
	char **seen;			/* memory guard: job ids done, this process only */
	size_t nseen;
} w;

static volatile sig_atomic_t stopping;

static void
on_term(int sig)
{
	(void)sig;
	stopping = 1;
}

/* A statement with parameters is prepared once per connection, on its
 * first use, and its plan kept, as a worker in production keeps its own. */
static PGresult *
sql(PGconn *conn, const char *what, const char *query, int n, const char *const *params)
{
	static struct { PGconn *conn; const char *query; } prepared[32];
	static size_t nprepared;
	struct idem_error err;
	char name[16], msg[512];
	PGresult *res;
	size_t i;

	for (i = 0; n > 0 && i < nprepared; i++)
		if (prepared[i].conn == conn && prepared[i].query == query)
			break;
	if (n == 0 || (i == nprepared && nprepared == sizeof(prepared) / sizeof(prepared[0]))) {
		if ((res = idem_pg_exec(conn, what, &err, query, n, params)) == NULL)
			idem_die_error(&err);
		return res;
	}
	snprintf(name, sizeof(name), "s%zu", i);
	if (i == nprepared) {
		res = PQprepare(conn, name, query, n, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			idem_die(IDEM_EXIT_ENV, "%s: %s", what, idem_pg_message(conn, res, msg, sizeof(msg)));
		PQclear(res);
		prepared[nprepared].conn = conn;
		prepared[nprepared++].query = query;
	}
	res = PQexecPrepared(conn, name, n, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		idem_die(IDEM_EXIT_ENV, "%s: %s", what, idem_pg_message(conn, res, msg, sizeof(msg)));
	return res;
}

static void
run(PGconn *conn, const char *what, const char *query, int n, const char *const *params)
{
	PQclear(sql(conn, what, query, n, params));
}

static void
step(const char *name, const char *job_id, long long attempt)
{
	if (w.no_step)
		return;
	if (idem_step(name, job_id, attempt) < 0)
		idem_die(IDEM_EXIT_ENV, "step %s: the controller hung up:", name);
}

static void
branch(const char *name, const char *job_id, long long attempt, const char *msg_id)
{
	fprintf(stderr, "branch=%s job=%s attempt=%lld msg_id=%s guard=%s\n", name, job_id,
	    attempt, msg_id, guard_names[w.guard]);
	fflush(stderr);
}

/* Creates the effect tables, with the constraint the guard relies on. */
static void
setup(void)
{
	char ddl[2048];
	const char *key = w.job_scope ? "job_id" : "invoice_id, line_no";
	int n;

	run(w.conn, "setup", "SET client_min_messages = warning", 0, NULL);
	run(w.conn, "setup", "DROP SCHEMA IF EXISTS demo CASCADE", 0, NULL);
	run(w.conn, "setup", "CREATE SCHEMA demo", 0, NULL);
	n = snprintf(ddl, sizeof(ddl),
	    "CREATE TABLE demo.invoice_lines ("
	    " line_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
	    " job_id text NOT NULL, invoice_id text NOT NULL, line_no integer NOT NULL,"
	    " amount_cents bigint NOT NULL, currency text NOT NULL,"
	    " created_at timestamptz NOT NULL DEFAULT clock_timestamp()%s%s%s)",
	    w.guard == GUARD_UNIQUE ? ", CONSTRAINT invoice_lines_once UNIQUE (" : "",
	    w.guard == GUARD_UNIQUE ? key : "", w.guard == GUARD_UNIQUE ? ")" : "");
	if (n < 0 || (size_t)n >= sizeof(ddl))
		idem_die(IDEM_EXIT_ENV, "setup: statement too long");
	run(w.conn, "setup", ddl, 0, NULL);
	run(w.conn, "setup",
	    "CREATE TABLE demo.outbox (key text PRIMARY KEY, job_id text NOT NULL,"
	    " created_at timestamptz NOT NULL DEFAULT clock_timestamp())", 0, NULL);
	run(w.conn, "setup",
	    "CREATE TABLE demo.pending_calls (key text NOT NULL, job_id text NOT NULL,"
	    " owner text NOT NULL, status text NOT NULL CHECK (status IN ('pending', 'done', 'reconciled')),"
	    " created_at timestamptz NOT NULL DEFAULT clock_timestamp(), updated_at timestamptz)", 0, NULL);
	if (w.guard == GUARD_UNIQUE || w.guard == GUARD_OUTBOX)
		run(w.conn, "setup", "ALTER TABLE demo.pending_calls ADD PRIMARY KEY (key)", 0, NULL);
	run(w.conn, "setup",
	    "CREATE TABLE demo.provider_calls (call_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
	    " key text NOT NULL, job_id text NOT NULL,"
	    " called_at timestamptz NOT NULL DEFAULT clock_timestamp())", 0, NULL);
	run(w.conn, "setup", "GRANT USAGE ON SCHEMA demo TO idem_reviewer", 0, NULL);
	run(w.conn, "setup", "GRANT SELECT ON ALL TABLES IN SCHEMA demo TO idem_reviewer", 0, NULL);
}

static int
seen(const char *job_id)
{
	size_t i;

	for (i = 0; i < w.nseen; i++)
		if (strcmp(w.seen[i], job_id) == 0)
			return 1;
	return 0;
}

static void
remember(const char *job_id)
{
	w.seen = idem_ereallocarray(w.seen, w.nseen + 1, sizeof(*w.seen));
	w.seen[w.nseen++] = idem_estrdup(job_id);
}

/* The vendor call: a row in demo.provider_calls, committed on its own. */
static void
call_vendor(const char *key, const char *job_id)
{
	const char *params[2] = { key, job_id };

	run(w.vendor, "calling the vendor",
	    "INSERT INTO demo.provider_calls (key, job_id) VALUES ($1, $2)", 2, params);
}

/*
 * The effect: one invoice line. Returns 1 when this attempt wrote it.
 * The transaction also records the vendor call as pending, naming who
 * reconciles it, so a retry never calls blind.
 */
static int
write_effect(const char *job_id, const char *key, long long attempt, const char *msg_id,
	     const json_t *payload)
{
	char line_no[32], amount[32];
	const char *params[5], *outbox[2];
	const char *name;
	PGresult *res;
	int inserted = 0;

	snprintf(line_no, sizeof(line_no), "%lld",
	    (long long)json_integer_value(json_object_get(payload, "line_no")));
	snprintf(amount, sizeof(amount), "%lld",
	    (long long)json_integer_value(json_object_get(payload, "amount_cents")));
	params[0] = job_id;
	params[1] = json_string_value(json_object_get(payload, "invoice_id"));
	params[2] = line_no;
	params[3] = amount;
	params[4] = json_string_value(json_object_get(payload, "currency"));

	run(w.conn, "writing", "BEGIN", 0, NULL);
	if (w.guard == GUARD_CHECK_THEN_INSERT) {
		res = w.job_scope ?
		    sql(w.conn, "checking", "SELECT 1 FROM demo.invoice_lines WHERE job_id = $1",
			1, params) :
		    sql(w.conn, "checking", "SELECT 1 FROM demo.invoice_lines "
			"WHERE invoice_id = $1 AND line_no = $2::integer", 2, params + 1);
		inserted = -(PQntuples(res) > 0);
		PQclear(res);
		if (inserted < 0) {
			run(w.conn, "writing", "COMMIT", 0, NULL);
			branch("found-existing", job_id, attempt, msg_id);
			return 0;
		}
	}
	step("before-write", job_id, attempt);
	switch (w.guard) {
	case GUARD_UNIQUE:
		res = sql(w.conn, "writing",
		    "INSERT INTO demo.invoice_lines (job_id, invoice_id, line_no, amount_cents, currency)"
		    " VALUES ($1, $2, $3::integer, $4::bigint, $5) ON CONFLICT DO NOTHING RETURNING 1",
		    5, params);
		inserted = PQntuples(res) == 1;
		PQclear(res);
		name = inserted ? "inserted" : "conflict-noop";
		break;
	case GUARD_OUTBOX:
		outbox[0] = key;
		outbox[1] = job_id;
		res = sql(w.conn, "writing",
		    "INSERT INTO demo.outbox (key, job_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1",
		    2, outbox);
		inserted = PQntuples(res) == 1;
		PQclear(res);
		if (inserted)
			run(w.conn, "writing",
			    "INSERT INTO demo.invoice_lines (job_id, invoice_id, line_no, amount_cents, currency)"
			    " VALUES ($1, $2, $3::integer, $4::bigint, $5)", 5, params);
		name = inserted ? "inserted" : "outbox-noop";
		break;
	default:
		run(w.conn, "writing",
		    "INSERT INTO demo.invoice_lines (job_id, invoice_id, line_no, amount_cents, currency)"
		    " VALUES ($1, $2, $3::integer, $4::bigint, $5)", 5, params);
		inserted = 1;
		name = "inserted";
		break;
	}
	if (inserted) {
		const char *pending[3] = { key, job_id, w.owner };

		run(w.conn, "writing", w.guard == GUARD_UNIQUE || w.guard == GUARD_OUTBOX ?
		    "INSERT INTO demo.pending_calls (key, job_id, owner, status) VALUES ($1, $2, $3, 'pending')"
		    " ON CONFLICT DO NOTHING" :
		    "INSERT INTO demo.pending_calls (key, job_id, owner, status) VALUES ($1, $2, $3, 'pending')",
		    3, pending);
	}
	branch(name, job_id, attempt, msg_id);
	step("before-commit", job_id, attempt);
	run(w.conn, "writing", "COMMIT", 0, NULL);
	step("after-commit", job_id, attempt);
	return inserted;
}

/*
 * The vendor call, outside the effect's transaction. The none and memory
 * guards call every time. The others look at the pending row under a lock:
 * done means called already; pending from an earlier attempt means a call
 * may or may not have reached the vendor, so ask the vendor (reconcile)
 * instead of calling again.
 */
static void
external_call(const char *job_id, const char *key, long long attempt, const char *msg_id,
	      int fresh)
{
	const char *params[1] = { key };
	PGresult *res;
	char status[16] = "";
	long long calls;

	if (w.guard == GUARD_NONE || w.guard == GUARD_MEMORY) {
		call_vendor(key, job_id);
		branch("called", job_id, attempt, msg_id);
		step("external-call", job_id, attempt);
		return;
	}
	run(w.conn, "calling", "BEGIN", 0, NULL);
	res = sql(w.conn, "calling", "SELECT status FROM demo.pending_calls WHERE key = $1 "
	    "ORDER BY created_at LIMIT 1 FOR UPDATE", 1, params);
	if (PQntuples(res) == 1)
		snprintf(status, sizeof(status), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if (strcmp(status, "done") == 0 || strcmp(status, "reconciled") == 0) {
		run(w.conn, "calling", "COMMIT", 0, NULL);
		branch("already-called", job_id, attempt, msg_id);
		return;
	}
	if (strcmp(status, "pending") == 0 && !fresh) {
		res = sql(w.conn, "reconciling", "SELECT count(*) FROM demo.provider_calls WHERE key = $1",
		    1, params);
		calls = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		PQclear(res);
		if (calls == 0)
			call_vendor(key, job_id);
		branch(calls == 0 ? "pending-reconciled-called" : "pending-reconciled", job_id,
		    attempt, msg_id);
		run(w.conn, "reconciling", "UPDATE demo.pending_calls SET status = 'reconciled', "
		    "updated_at = clock_timestamp() WHERE key = $1", 1, params);
		run(w.conn, "reconciling", "COMMIT", 0, NULL);
		return;
	}
	call_vendor(key, job_id);
	branch("called", job_id, attempt, msg_id);
	step("external-call", job_id, attempt);
	run(w.conn, "calling", "UPDATE demo.pending_calls SET status = 'done', "
	    "updated_at = clock_timestamp() WHERE key = $1", 1, params);
	run(w.conn, "calling", "COMMIT", 0, NULL);
}

static int
valid_payload(const json_t *p)
{
	return json_is_string(json_object_get(p, "invoice_id")) &&
	    json_is_integer(json_object_get(p, "line_no")) &&
	    json_is_integer(json_object_get(p, "amount_cents")) &&
	    json_is_string(json_object_get(p, "currency"));
}

/* Takes one message; returns 0 when the queue had none visible. */
static int
work_one(void)
{
	const char *params[2] = { w.queue, w.vt };
	const char *msg_id, *job_id, *business_key, *ack[1];
	long long attempt;
	json_t *payload;
	PGresult *res;
	int fresh = 0;

	res = sql(w.conn, "reading the queue",
	    "SELECT msg_id, job_id, business_key, payload, read_ct FROM idem.read($1, $2::interval)",
	    2, params);
	if (PQntuples(res) == 0) {
		PQclear(res);
		return 0;
	}
	msg_id = PQgetvalue(res, 0, 0);
	job_id = PQgetvalue(res, 0, 1);
	business_key = PQgetvalue(res, 0, 2);
	attempt = strtoll(PQgetvalue(res, 0, 4), NULL, 10);
	payload = json_loads(PQgetvalue(res, 0, 3), 0, NULL);
	step("consumed", job_id, attempt);
	if (payload == NULL || !valid_payload(payload)) {
		branch("rejected-payload", job_id, attempt, msg_id);
	} else if (w.guard == GUARD_MEMORY && seen(job_id)) {
		branch("memory-skip", job_id, attempt, msg_id);
	} else {
		const char *key = w.job_scope ? job_id : business_key;

		fresh = write_effect(job_id, key, attempt, msg_id, payload);
		external_call(job_id, key, attempt, msg_id, fresh);
		if (w.guard == GUARD_MEMORY)
			remember(job_id);
	}
	json_decref(payload);
	step("before-ack", job_id, attempt);
	ack[0] = msg_id;
	PQclear(sql(w.conn, "acking", "SELECT idem.ack($1::bigint)", 1, ack));
	step("acked", job_id, attempt);
	PQclear(res);
	return 1;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "guard", required_argument, NULL, 'g' },
		{ "key-scope", required_argument, NULL, 'k' },
		{ "queue", required_argument, NULL, 'q' },
		{ "visibility-timeout", required_argument, NULL, 't' },
		{ "poll-interval", required_argument, NULL, 'p' },
		{ "owner", required_argument, NULL, 'o' },
		{ "once", no_argument, NULL, '1' },
		{ "no-step", no_argument, NULL, 'N' },
		{ "setup", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conninfo = NULL, *vt = getenv("IDEM_VISIBILITY_TIMEOUT_MS");
	struct idem_error err;
	struct sigaction sa;
	long long vt_ms = 30000;
	int c, do_setup = 0, i;
	size_t k;

	argv0 = "idem-worker";
	argv[0] = (char *)argv0;
	w.guard = GUARD_UNIQUE;
	w.queue = getenv("IDEM_QUEUE");
	w.owner = getenv("IDEM_RECONCILIATION_OWNER");
	w.poll_ms = 20;
	if (vt && *vt) {
		char *end;

		vt_ms = strtoll(vt, &end, 10);
		if (*end || vt_ms < 1)
			idem_die(IDEM_EXIT_USAGE, "IDEM_VISIBILITY_TIMEOUT_MS=%s: expected milliseconds, "
			    "at least 1", vt);
	}
	while ((c = getopt_long(argc, argv, "d:g:k:q:t:p:o:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': conninfo = optarg; break;
		case 'g':
			for (i = 0; guard_names[i] && strcmp(guard_names[i], optarg) != 0; i++)
				;
			if (guard_names[i] == NULL)
				idem_die(IDEM_EXIT_USAGE, "-g %s: expected none, check-then-insert, memory, "
				    "unique or outbox", optarg);
			w.guard = (enum guard)i;
			break;
		case 'k':
			if (strcmp(optarg, "job") != 0 && strcmp(optarg, "business") != 0)
				idem_die(IDEM_EXIT_USAGE, "-k %s: expected business or job", optarg);
			w.job_scope = strcmp(optarg, "job") == 0;
			break;
		case 'q': w.queue = optarg; break;
		case 't':
			if ((vt_ms = idem_parse_duration_ms(optarg)) < 1)
				idem_die(IDEM_EXIT_USAGE, "-t %s: expected a duration such as 500ms or 2s",
				    optarg);
			break;
		case 'p':
			if ((w.poll_ms = idem_parse_duration_ms(optarg)) < 1)
				idem_die(IDEM_EXIT_USAGE, "-p %s: expected a duration such as 20ms", optarg);
			break;
		case 'o': w.owner = optarg; break;
		case '1': w.once = 1; break;
		case 'N': w.no_step = 1; break;
		case 'S': do_setup = 1; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("idem-worker " IDEM_VERSION); idem_close_stdout(); return 0;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (optind != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (!do_setup && (w.queue == NULL || *w.queue == '\0'))
		idem_die(IDEM_EXIT_USAGE, "no queue: give -q queue or set IDEM_QUEUE");
	if (w.owner == NULL || *w.owner == '\0')
		w.owner = "unassigned";
	snprintf(w.vt, sizeof(w.vt), "%lld milliseconds", vt_ms);

	if ((w.conn = idem_pg_connect(conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(w.conn, &err) < 0)
		idem_die_error(&err);
	if (do_setup) {
		setup();
		PQfinish(w.conn);
		return 0;
	}
	if ((w.vendor = idem_pg_connect(conninfo, &err)) == NULL)
		idem_die_error(&err);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	while (!stopping) {
		if (work_one())
			continue;
		if (w.once)
			break;
		sleep_ms(w.poll_ms);
	}
	idem_step_close();
	PQfinish(w.vendor);
	PQfinish(w.conn);
	for (k = 0; k < w.nseen; k++)
		free(w.seen[k]);
	free(w.seen);
	return 0;
}
