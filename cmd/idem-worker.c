/* idem-worker: the reference worker. It takes invoice-line jobs from the
 * sandbox queue, writes one line per job, makes one charge at a vendor (the
 * vendor double of IDEM_VENDOR_URL over HTTP, else a stand-in table), and
 * acks; its guards against doing either twice are chosen by option, good
 * or bad, so the toolchain can be seen catching real bugs. It speaks the
 * step protocol of idem-step(7) at every standard step. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <sodium.h>

#include "json.h"
#include "pg.h"
#include "seed.h"
#include "step.h"
#include "error.h"
#include "text.h"

static const char synopsis[] =
	"usage: idem-worker [-d conninfo] [-g guard] [-k key-scope] [-x external-guard]\n"
	"                   [-q queue] [-t visibility-timeout] [-p poll-interval] [-o owner]\n"
	"                   [--once] [--no-step]\n"
	"       idem-worker [-d conninfo] [-g guard] [-k key-scope] --setup\n";

enum guard { GUARD_NONE, GUARD_CHECK_THEN_INSERT, GUARD_MEMORY, GUARD_UNIQUE, GUARD_OUTBOX };

static const char *const guard_names[] = {
	"none", "check-then-insert", "memory", "unique", "outbox", NULL
};

enum external { EXTERNAL_NONE, EXTERNAL_IDEMPOTENCY_KEY, EXTERNAL_PENDING_ROW, EXTERNAL_CALL_KEY };

static const char *const external_names[] = { "none", "idempotency-key", "pending-row", "call-key",
	NULL };

/* What became of one request to the vendor. */
enum answer { ANSWER_OK, ANSWER_ERROR, ANSWER_TIMEOUT };

#define VENDOR_TIMEOUT_MS 2000L
#define VENDOR_ANSWER_MAX (1024 * 1024)

static struct {
	enum guard guard;
	enum external external;
	int job_scope;			/* the guard's key: job id, else business key */
	const char *queue;
	const char *owner;
	char vt[48];			/* visibility timeout, as an interval */
	long poll_ms;
	int once;
	int no_step;			/* never speak to IDEM_STEP_SOCK */
	PGconn *conn;			/* the worker's own transactions */
	PGconn *vendor;			/* the stand-in vendor, outside them */
	char *vendor_url;		/* IDEM_VENDOR_URL: the vendor over HTTP */
	CURL *http;
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
	    " key text NOT NULL, job_id text NOT NULL, idempotency_key text UNIQUE,"
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

struct answer_body {
	char *text;
	size_t len;
};

static size_t
collect(char *data, size_t size, size_t n, void *arg)
{
	struct answer_body *b = arg;
	size_t len = size * n;

	if (len > VENDOR_ANSWER_MAX - b->len)
		return 0;
	b->text = idem_erealloc(b->text, b->len + len + 1);
	memcpy(b->text + b->len, data, len);
	b->len += len;
	b->text[b->len] = '\0';
	return len;
}

/*
 * One request to the vendor double: a POST of body, with the idempotency
 * key when there is one, or a GET when body is NULL. An answer other than
 * 2xx is an error, and one that does not come within VENDOR_TIMEOUT_MS
 * is a timeout: either way it is said on standard error. *out gets the
 * JSON of a 2xx answer, or NULL when it is not JSON.
 */
static enum answer
http_request(const char *url, const char *body, const char *idempotency_key, json_t **out)
{
	struct answer_body answer = { NULL, 0 };
	struct curl_slist *headers = NULL;
	char *header = NULL, curl_error[CURL_ERROR_SIZE] = "";
	const char *method = body ? "POST" : "GET";
	const char *why;
	enum answer result = ANSWER_ERROR;
	long status = 0;
	json_t *json;
	CURLcode rc;

	*out = NULL;
	curl_easy_reset(w.http);
	curl_easy_setopt(w.http, CURLOPT_URL, url);
	curl_easy_setopt(w.http, CURLOPT_PROXY, "");
	curl_easy_setopt(w.http, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(w.http, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(w.http, CURLOPT_TIMEOUT_MS, VENDOR_TIMEOUT_MS);
	curl_easy_setopt(w.http, CURLOPT_ERRORBUFFER, curl_error);
	curl_easy_setopt(w.http, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(w.http, CURLOPT_WRITEDATA, &answer);
	headers = curl_slist_append(headers, "Accept: application/json");
	if (body) {
		headers = curl_slist_append(headers, "Content-Type: application/json");
		if (idempotency_key) {
			if (strpbrk(idempotency_key, "\r\n")) {
				idem_warn("%s %s: the idempotency key holds a line break", method, url);
				goto out;
			}
			if (asprintf(&header, "Idempotency-Key: %s", idempotency_key) < 0)
				idem_die(IDEM_EXIT_ENV, "asprintf:");
			headers = curl_slist_append(headers, header);
		}
		curl_easy_setopt(w.http, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(w.http, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(w.http, CURLOPT_HTTPHEADER, headers);
	rc = curl_easy_perform(w.http);
	if (rc == CURLE_OPERATION_TIMEDOUT) {
		idem_warn("%s %s: no answer within %ld ms", method, url, VENDOR_TIMEOUT_MS);
		result = ANSWER_TIMEOUT;
		goto out;
	}
	if (rc != CURLE_OK) {
		idem_warn("%s %s: %s", method, url, *curl_error ? curl_error : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(w.http, CURLINFO_RESPONSE_CODE, &status);
	json = answer.text ? json_loads(answer.text, 0, NULL) : NULL;
	if (status < 200 || status > 299) {
		why = json_string_value(json_object_get(json, "error"));
		idem_warn("%s %s: HTTP %ld%s%s", method, url, status, why ? ": " : "", why ? why : "");
		json_decref(json);
		goto out;
	}
	*out = json;
	result = ANSWER_OK;
out:
	curl_slist_free_all(headers);
	free(header);
	free(answer.text);
	return result;
}

/* The charge for the invoice line: the body the vendor double reads its
 * business key from, the same bytes at every attempt. */
static char *
charge_body(const json_t *payload)
{
	json_t *body = json_pack("{s:O,s:O,s:O,s:O}",
	    "invoice_id", json_object_get(payload, "invoice_id"),
	    "line_no", json_object_get(payload, "line_no"),
	    "amount_cents", json_object_get(payload, "amount_cents"),
	    "currency", json_object_get(payload, "currency"));
	char *text = idem_json_canonical(body);

	json_decref(body);
	return text;
}

/* The vendor call: over HTTP, a POST to /v1/charges; with the stand-in, a
 * row in demo.provider_calls committed on its own, none when the
 * idempotency key has one already. */
static enum answer
call_vendor(const char *key, const char *job_id, const json_t *payload,
	    const char *idempotency_key)
{
	const char *params[3] = { key, job_id, idempotency_key };
	enum answer result;
	json_t *answer;
	char *body, *url;

	if (w.vendor_url == NULL) {
		run(w.vendor, "calling the vendor",
		    "INSERT INTO demo.provider_calls (key, job_id, idempotency_key) VALUES ($1, $2, $3)"
		    " ON CONFLICT DO NOTHING", 3, params);
		return ANSWER_OK;
	}
	body = charge_body(payload);
	if (asprintf(&url, "%s/v1/charges", w.vendor_url) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	result = http_request(url, body, idempotency_key, &answer);
	json_decref(answer);
	free(url);
	free(body);
	return result;
}

/* Reconciliation: how many charges the vendor has for the invoice line.
 * Over HTTP, a GET of /v1/charges?key= the line's business key as the
 * double reads it from a charge's body, ["invoice_id",line_no]; with the
 * stand-in, the rows of demo.provider_calls with the key. */
static enum answer
vendor_charges(const char *key, const json_t *payload, long long *count)
{
	const char *params[1] = { key };
	enum answer result;
	json_t *line, *answer, *data;
	char *business_key, *escaped, *url;
	PGresult *res;

	if (w.vendor_url == NULL) {
		res = sql(w.conn, "reconciling", "SELECT count(*) FROM demo.provider_calls WHERE key = $1",
		    1, params);
		*count = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		PQclear(res);
		return ANSWER_OK;
	}
	line = json_pack("[O,O]", json_object_get(payload, "invoice_id"),
	    json_object_get(payload, "line_no"));
	business_key = idem_json_canonical(line);
	json_decref(line);
	if ((escaped = curl_easy_escape(w.http, business_key, 0)) == NULL ||
	    asprintf(&url, "%s/v1/charges?key=%s", w.vendor_url, escaped) < 0)
		idem_die(IDEM_EXIT_ENV, "the reconciliation's URL: out of memory");
	curl_free(escaped);
	free(business_key);
	result = http_request(url, NULL, NULL, &answer);
	if (result == ANSWER_OK) {
		if (!json_is_array(data = json_object_get(answer, "data"))) {
			idem_warn("GET %s: the answer has no \"data\" array", url);
			result = ANSWER_ERROR;
		} else {
			*count = (long long)json_array_size(data);
		}
	}
	json_decref(answer);
	free(url);
	return result;
}

/* A failed call: nothing recorded as done, no ack; the message comes back
 * when its visibility timeout ends. */
static int
call_failed(enum answer result, const char *job_id, long long attempt, const char *msg_id)
{
	branch(result == ANSWER_TIMEOUT ? "vendor-timeout" : "vendor-error", job_id, attempt, msg_id);
	return -1;
}

/*
 * The effect: one invoice line. With the pending-row external guard, the
 * transaction also records the vendor call as pending, naming who
 * reconciles it, so a retry never calls blind. Returns 1 when this attempt
 * wrote the key's pending row.
 */
static int
write_effect(const char *job_id, const char *key, long long attempt, const char *msg_id,
	     const json_t *payload)
{
	char line_no[32], amount[32];
	const char *params[5], *outbox[2];
	const char *name;
	PGresult *res;
	int inserted = 0, pending_written = 0;

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
	if (inserted && w.external == EXTERNAL_PENDING_ROW) {
		const char *pending[3] = { key, job_id, w.owner };

		res = sql(w.conn, "writing",
		    "INSERT INTO demo.pending_calls (key, job_id, owner, status)"
		    " SELECT $1::text, $2::text, $3::text, 'pending'"
		    " WHERE NOT EXISTS (SELECT 1 FROM demo.pending_calls WHERE key = $1::text)"
		    " ON CONFLICT DO NOTHING RETURNING 1", 3, pending);
		pending_written = PQntuples(res) == 1;
		PQclear(res);
	}
	branch(name, job_id, attempt, msg_id);
	step("before-commit", job_id, attempt);
	run(w.conn, "writing", "COMMIT", 0, NULL);
	step("after-commit", job_id, attempt);
	return pending_written;
}

/*
 * The vendor call, outside the effect's transaction. Without the
 * pending-row external guard, it calls every time, with the idempotency
 * key or without. With it, it looks at the pending row under a lock: done
 * means called already; pending from an earlier attempt means a call may
 * or may not have reached the vendor, so ask the vendor (reconcile)
 * instead of calling again. Returns -1 when the vendor failed: then
 * nothing is recorded as done and the message must not be acked.
 */
static int
external_call(const char *job_id, const char *key, long long attempt, const char *msg_id,
	      const json_t *payload, int fresh)
{
	const char *params[1] = { key };
	enum answer result;
	PGresult *res;
	char status[16] = "";
	long long calls = 0;

	if (w.external != EXTERNAL_PENDING_ROW) {
		char fresh_key[48];

		/* call-key: a key of this call alone, as from a token or a clock */
		snprintf(fresh_key, sizeof(fresh_key), "call-%08x%08x%08x%08x", randombytes_random(),
		    randombytes_random(), randombytes_random(), randombytes_random());
		result = call_vendor(key, job_id, payload, w.external == EXTERNAL_IDEMPOTENCY_KEY ? key :
		    w.external == EXTERNAL_CALL_KEY ? fresh_key : NULL);
		if (result != ANSWER_OK)
			return call_failed(result, job_id, attempt, msg_id);
		branch("called", job_id, attempt, msg_id);
		step("external-call", job_id, attempt);
		return 0;
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
		return 0;
	}
	if (strcmp(status, "pending") == 0 && !fresh) {
		result = vendor_charges(key, payload, &calls);
		if (result == ANSWER_OK && calls == 0)
			result = call_vendor(key, job_id, payload, NULL);
		if (result != ANSWER_OK) {
			run(w.conn, "reconciling", "ROLLBACK", 0, NULL);
			return call_failed(result, job_id, attempt, msg_id);
		}
		branch(calls == 0 ? "pending-reconciled-called" : "pending-reconciled", job_id,
		    attempt, msg_id);
		run(w.conn, "reconciling", "UPDATE demo.pending_calls SET status = 'reconciled', "
		    "updated_at = clock_timestamp() WHERE key = $1", 1, params);
		run(w.conn, "reconciling", "COMMIT", 0, NULL);
		return 0;
	}
	if ((result = call_vendor(key, job_id, payload, NULL)) != ANSWER_OK) {
		run(w.conn, "calling", "ROLLBACK", 0, NULL);
		return call_failed(result, job_id, attempt, msg_id);
	}
	branch("called", job_id, attempt, msg_id);
	step("external-call", job_id, attempt);
	run(w.conn, "calling", "UPDATE demo.pending_calls SET status = 'done', "
	    "updated_at = clock_timestamp() WHERE key = $1", 1, params);
	run(w.conn, "calling", "COMMIT", 0, NULL);
	return 0;
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
	int fresh, failed = 0;

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
		failed = external_call(job_id, key, attempt, msg_id, payload, fresh) < 0;
		if (w.guard == GUARD_MEMORY && !failed)
			remember(job_id);
	}
	json_decref(payload);
	if (!failed) {
		step("before-ack", job_id, attempt);
		ack[0] = msg_id;
		PQclear(sql(w.conn, "acking", "SELECT idem.ack($1::bigint)", 1, ack));
		step("acked", job_id, attempt);
	}
	PQclear(res);
	return 1;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* What main needs of the options; the others go into w. */
struct options {
	const char *conninfo;
	int setup;		/* --setup: make the tables, take no message */
};

/* IDEM_VISIBILITY_TIMEOUT_MS, what -t is without it. */
static long long
visibility_timeout_from_env(void)
{
	const char *vt = getenv("IDEM_VISIBILITY_TIMEOUT_MS");
	long long vt_ms = 30000;
	char *end;

	if (vt && *vt) {
		vt_ms = strtoll(vt, &end, 10);
		if (*end || vt_ms < 1)
			idem_die(IDEM_EXIT_USAGE, "IDEM_VISIBILITY_TIMEOUT_MS=%s: expected milliseconds, "
			    "at least 1", vt);
	}
	return vt_ms;
}

static enum guard
parse_guard(const char *name)
{
	int i;

	for (i = 0; guard_names[i] && strcmp(guard_names[i], name) != 0; i++)
		;
	if (guard_names[i] == NULL)
		idem_die(IDEM_EXIT_USAGE, "-g %s: expected none, check-then-insert, memory, "
		    "unique or outbox", name);
	return (enum guard)i;
}

static enum external
parse_external(const char *name)
{
	int i;

	for (i = 0; external_names[i] && strcmp(external_names[i], name) != 0; i++)
		;
	if (external_names[i] == NULL)
		idem_die(IDEM_EXIT_USAGE, "-x %s: expected none, idempotency-key, pending-row or "
		    "call-key", name);
	return (enum external)i;
}

/* IDEM_VENDOR_URL without its trailing slashes: the vendor double over
 * HTTP; NULL for the stand-in table. */
static char *
vendor_url_from_env(void)
{
	const char *env = getenv("IDEM_VENDOR_URL");
	char *url;
	size_t n;

	if (env == NULL || *env == '\0')
		return NULL;
	if (strncmp(env, "http://", 7) != 0 && strncmp(env, "https://", 8) != 0)
		idem_die(IDEM_EXIT_USAGE, "IDEM_VENDOR_URL=%s: expected an http:// or https:// URL",
		    env);
	url = idem_estrdup(env);
	for (n = strlen(url); n > 0 && url[n - 1] == '/'; n--)
		url[n - 1] = '\0';
	return url;
}

static void
parse_options(int argc, char *argv[], struct options *opt)
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "guard", required_argument, NULL, 'g' },
		{ "key-scope", required_argument, NULL, 'k' },
		{ "external-guard", required_argument, NULL, 'x' },
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
	long long vt_ms = visibility_timeout_from_env();
	int c, external_given = 0;

	memset(opt, 0, sizeof(*opt));
	w.guard = GUARD_UNIQUE;
	w.queue = getenv("IDEM_QUEUE");
	w.owner = getenv("IDEM_RECONCILIATION_OWNER");
	w.poll_ms = 20;
	while ((c = getopt_long(argc, argv, "d:g:k:x:q:t:p:o:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': opt->conninfo = optarg; break;
		case 'g': w.guard = parse_guard(optarg); break;
		case 'k':
			if (strcmp(optarg, "job") != 0 && strcmp(optarg, "business") != 0)
				idem_die(IDEM_EXIT_USAGE, "-k %s: expected business or job", optarg);
			w.job_scope = strcmp(optarg, "job") == 0;
			break;
		case 'x':
			w.external = parse_external(optarg);
			external_given = 1;
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
		case 'S': opt->setup = 1; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("idem-worker " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (optind != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (!opt->setup && (w.queue == NULL || *w.queue == '\0'))
		idem_die(IDEM_EXIT_USAGE, "no queue: give -q queue or set IDEM_QUEUE");
	if (w.owner == NULL || *w.owner == '\0')
		w.owner = "unassigned";
	if (!external_given)
		w.external = w.guard == GUARD_NONE || w.guard == GUARD_MEMORY ?
		    EXTERNAL_NONE : EXTERNAL_PENDING_ROW;
	if (!opt->setup)
		w.vendor_url = vendor_url_from_env();
	snprintf(w.vt, sizeof(w.vt), "%lld milliseconds", vt_ms);
}

/* The vendor: the double over HTTP, or the stand-in table through a
 * connection of its own. */
static void
connect_vendor(const char *conninfo)
{
	struct idem_error err;

	if (w.vendor_url) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || (w.http = curl_easy_init()) == NULL)
			idem_die(IDEM_EXIT_ENV, "libcurl: cannot start");
	} else if ((w.vendor = idem_pg_connect(conninfo, &err)) == NULL) {
		idem_die_error(&err);
	}
}

/* Takes messages until SIGTERM or SIGINT, or with --once until none is
 * visible. */
static void
work_until_stopped(void)
{
	struct sigaction sa;

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
}

static void
close_all(void)
{
	size_t i;

	idem_step_close();
	if (w.http) {
		curl_easy_cleanup(w.http);
		curl_global_cleanup();
	}
	free(w.vendor_url);
	PQfinish(w.vendor);
	PQfinish(w.conn);
	for (i = 0; i < w.nseen; i++)
		free(w.seen[i]);
	free(w.seen);
}

int
main(int argc, char *argv[])
{
	struct options opt;
	struct idem_error err;

	argv0 = "idem-worker";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &opt);
	if (sodium_init() < 0)
		idem_die(IDEM_EXIT_ENV, "libsodium: cannot initialise");
	if ((w.conn = idem_pg_connect(opt.conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(w.conn, &err) < 0)
		idem_die_error(&err);
	if (opt.setup) {
		setup();
		PQfinish(w.conn);
		return 0;
	}
	connect_vendor(opt.conninfo);
	work_until_stopped();
	close_all();
	return 0;
}
