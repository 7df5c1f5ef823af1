#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "embed.h"
#include "pg.h"
#include "role.h"
#include "sql.h"

EMBED(idem_sql_ledger, "lib/ledger.sql");
extern const char idem_sql_ledger[];

/* The sections in the order they are reported. */
static const char *const order[] = {
	"installed", "version", "prepare", "publish", "copy", "published-after", "published-span",
	"observe", "consume", "complete", "hold-back", "let-go", "expire", "rescue", "hold-lease",
	"deliveries", "deliveries-of-key", "unacked", "unacked-list", "setup-schemas", "account",
	"denied", NULL
};
#define NSECTIONS (sizeof(order) / sizeof(order[0]) - 1)

/* A message the check publishes. */
struct message {
	const char *job_id, *key, *payload;
	int copy;
	char *msg_id;
	int taken;			/* deliveries so far */
	int acked;
};

/* A delivery, as consume took it. */
struct taking {
	int message;
	int attempt;
	int backend_pid;
};

static struct {
	const struct idem_queue *q;
	PGconn *conn;
	char failure[NSECTIONS][512];
	int checked[NSECTIONS];
	const char *stopped;		/* the section whose failure stopped the check */
	struct taking takings[32];
	size_t ntakings;
} c;

/* A, B, C and a forced duplicate of A, D; E goes in by copy, F is the
 * held lease's, G the sandbox account's. */
enum { A, B, C, D, E, F, G, NMESSAGES };
static struct message m[NMESSAGES] = {
	{ "qc-0001", "k-1", "{\"n\": 1}", 0, NULL, 0, 0 },
	{ "qc-0002", "k-2", "{\"n\": 2}", 0, NULL, 0, 0 },
	{ "qc-0003", "k-3", "{\"n\": 3}", 0, NULL, 0, 0 },
	{ "qc-0001", "k-1", "{\"n\": 1}", 1, NULL, 0, 0 },
	{ "qc-0005", "k-5", "{\"n\": 5}", 0, NULL, 0, 0 },
	{ "qc-0006", "k-6", "{\"n\": 6}", 0, NULL, 0, 0 },
	{ "qc-0007", "k-7", "{\"n\": 7}", 0, NULL, 0, 0 },
};

#define LONG_LEASE "3600000"
#define MAX_ATTEMPTS "5"

static size_t
index_of(const char *section)
{
	size_t i;

	for (i = 0; i < NSECTIONS; i++)
		if (strcmp(order[i], section) == 0)
			return i;
	idem_die(IDEM_EXIT_ENV, "queue-check: no section %s", section);
}

/* Marks a section checked. */
static void
checked(const char *section)
{
	c.checked[index_of(section)] = 1;
}

/* The first failure of a section is the one reported. */
static void __attribute__((format(printf, 2, 3)))
fail(const char *section, const char *fmt, ...)
{
	size_t i = index_of(section);
	va_list ap;

	c.checked[i] = 1;
	if (c.failure[i][0] != '\0')
		return;
	va_start(ap, fmt);
	vsnprintf(c.failure[i], sizeof(c.failure[i]), fmt, ap);
	va_end(ap);
	idem_one_line(c.failure[i]);
	if (c.failure[i][0] == '\0')
		snprintf(c.failure[i], sizeof(c.failure[i]), "failed");
}

static int
failed(const char *section)
{
	return c.failure[index_of(section)][0] != '\0';
}

/* Runs a section on conn; its failure is the section's. */
static PGresult *
run(PGconn *conn, const char *section, int n, const Oid *types, const char *const *params)
{
	struct idem_error err;
	PGresult *res = idem_queue_exec(c.q, conn, section, "the query failed", n, types, params, &err);

	if (res == NULL)
		fail(section, "%s", err.text);
	return res;
}

/* A statement of queue-check's own; NULL with err set. */
static PGresult *
own(PGconn *conn, const char *what, const char *sql, int n, const char *const *params,
    struct idem_error *err)
{
	return idem_pg_exec(conn, what, err, sql, n, params);
}

static int
message_of(const char *msg_id)
{
	int i;

	for (i = 0; i < NMESSAGES; i++)
		if (m[i].msg_id != NULL && strcmp(m[i].msg_id, msg_id) == 0)
			return i;
	return -1;
}

/* The msg ids of some messages, as a text[] literal; caller frees. */
static char *
ids(const int *which, size_t n)
{
	struct idem_text_array a = { 0 };
	size_t i;

	for (i = 0; i < n; i++)
		idem_text_array_add(&a, m[which[i]].msg_id);
	return idem_text_array_take(&a);
}

/* Publishes messages which[] with a lease of lease_ms; 0, or -1 when the
 * section failed. Each gets its msg_id; published is what the rows must
 * say. */
static int
publish(const int *which, size_t n, const char *lease_ms, int published)
{
	static const Oid types[6] = { IDEM_OID_TEXT_ARRAY, IDEM_OID_INT4_ARRAY, IDEM_OID_TEXT_ARRAY,
		IDEM_OID_JSONB_ARRAY, IDEM_OID_INT8, IDEM_OID_INT8 };
	struct idem_text_array job_ids = { 0 }, copies = { 0 }, keys = { 0 }, payloads = { 0 };
	const char *params[6];
	char copy[16], *texts[4], *seen = NULL;
	PGresult *res;
	size_t i;
	int rc = -1;

	for (i = 0; i < n; i++) {
		snprintf(copy, sizeof(copy), "%d", m[which[i]].copy);
		idem_text_array_add(&job_ids, m[which[i]].job_id);
		idem_text_array_add(&copies, copy);
		idem_text_array_add(&keys, m[which[i]].key);
		idem_text_array_add(&payloads, m[which[i]].payload);
	}
	params[0] = texts[0] = idem_text_array_take(&job_ids);
	params[1] = texts[1] = idem_text_array_take(&copies);
	params[2] = texts[2] = idem_text_array_take(&keys);
	params[3] = texts[3] = idem_text_array_take(&payloads);
	params[4] = lease_ms;
	params[5] = MAX_ATTEMPTS;
	if ((res = run(c.conn, "publish", 6, types, params)) == NULL)
		goto out;
	seen = idem_emalloc(n ? n : 1);
	memset(seen, 0, n ? n : 1);
	if ((size_t)PQntuples(res) != n || PQnfields(res) < 4) {
		fail("publish", "gave %d rows of %d columns for %zu messages; one row each of 4 columns",
		    PQntuples(res), PQnfields(res), n);
		goto out;
	}
	for (i = 0; i < n; i++) {
		long ord = strtol(PQgetvalue(res, (int)i, 0), NULL, 10);
		const char *msg_id = PQgetvalue(res, (int)i, 1);
		struct message *msg;
		int was;

		if (ord < 1 || (size_t)ord > n || *msg_id == '\0' || seen[ord - 1]) {
			fail("publish", "row %zu: position %s, msg_id \"%s\"; each position from 1 to "
			    "%zu once, and a msg_id", i + 1, PQgetvalue(res, (int)i, 0), msg_id, n);
			goto out;
		}
		seen[ord - 1] = 1;
		msg = &m[which[ord - 1]];
		was = strcmp(PQgetvalue(res, (int)i, 3), "t") == 0;
		if (was != published) {
			fail("publish", "message %s copy %d: published says %s, %s", msg->job_id,
			    msg->copy, was ? "true" : "false", published ? "the first time it is "
			    "published" : "published again with the same key and payload");
			goto out;
		}
		if (strtoll(PQgetvalue(res, (int)i, 2), NULL, 10) <= 0) {
			fail("publish", "message %s copy %d: publication time %s; microseconds since "
			    "the epoch", msg->job_id, msg->copy, PQgetvalue(res, (int)i, 2));
			goto out;
		}
		if (msg->msg_id != NULL && strcmp(msg->msg_id, msg_id) != 0) {
			fail("publish", "message %s copy %d: msg_id %s published again, %s the first "
			    "time", msg->job_id, msg->copy, msg_id, msg->msg_id);
			goto out;
		}
		if (msg->msg_id == NULL) {
			if (message_of(msg_id) >= 0) {
				fail("publish", "message %s copy %d: msg_id %s, which another message has",
				    msg->job_id, msg->copy, msg_id);
				goto out;
			}
			msg->msg_id = idem_estrdup(msg_id);
		}
	}
	rc = 0;
out:
	free(seen);
	PQclear(res);
	for (i = 0; i < 4; i++)
		free(texts[i]);
	return rc;
}

/* The same job and copy with another payload: a unique violation. */
static void
publish_clash(void)
{
	static const Oid types[6] = { IDEM_OID_TEXT_ARRAY, IDEM_OID_INT4_ARRAY, IDEM_OID_TEXT_ARRAY,
		IDEM_OID_JSONB_ARRAY, IDEM_OID_INT8, IDEM_OID_INT8 };
	const char *params[6] = { "{qc-0001}", "{0}", "{k-1}", "{\"{\\\"n\\\": 99}\"}", LONG_LEASE,
		MAX_ATTEMPTS };
	char *sql = idem_queue_sql(c.q, c.conn, "publish");
	PGresult *res = PQexecParams(c.conn, sql, 6, types, params, NULL, NULL, 0);
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *why = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	if (PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK)
		fail("publish", "message qc-0001 copy 0 published again with another payload went "
		    "through; it must be a unique violation (SQLSTATE 23505)");
	else if (state == NULL || strcmp(state, "23505") != 0)
		fail("publish", "message qc-0001 copy 0 published again with another payload: "
		    "SQLSTATE %s, %s; it must be a unique violation (SQLSTATE 23505)",
		    state ? state : "none", why ? why : PQerrorMessage(c.conn));
	PQclear(res);
	free(sql);
}

/* Takes a message through consume on conn with a lease of lease_ms: its
 * index, -1 for none, -2 when the section failed. */
static int
consume(PGconn *conn, const char *lease_ms)
{
	static const Oid types[1] = { IDEM_OID_INT8 };
	const char *params[1] = { lease_ms };
	PGresult *res = run(conn, "consume", 1, types, params);
	int i, attempt;

	if (res == NULL)
		return -2;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return -1;
	}
	if (PQntuples(res) != 1 || PQnfields(res) < 1) {
		fail("consume", "gave %d rows; one message or none", PQntuples(res));
		PQclear(res);
		return -2;
	}
	if ((i = message_of(PQgetvalue(res, 0, 0))) < 0) {
		fail("consume", "took msg_id %s, which publish did not give", PQgetvalue(res, 0, 0));
		PQclear(res);
		return -2;
	}
	attempt = ++m[i].taken;
	if (PQnfields(res) >= 2 && !PQgetisnull(res, 0, 1) &&
	    strtol(PQgetvalue(res, 0, 1), NULL, 10) != attempt)
		fail("consume", "took message %s (%s copy %d) for the %s time, and says attempt %s",
		    m[i].msg_id, m[i].job_id, m[i].copy, attempt == 1 ? "first" : "second",
		    PQgetvalue(res, 0, 1));
	if (c.ntakings < sizeof(c.takings) / sizeof(c.takings[0]))
		c.takings[c.ntakings++] = (struct taking){ i, attempt, PQbackendPID(conn) };
	PQclear(res);
	return i;
}

/* Acks a message through complete; whether it said it acked it. */
static int
complete(PGconn *conn, int i)
{
	static const Oid types[1] = { IDEM_OID_TEXT };
	const char *params[1] = { m[i].msg_id };
	PGresult *res = run(conn, "complete", 1, types, params);
	int n;

	if (res == NULL)
		return -1;
	n = PQntuples(res);
	if (n == 1 && strcmp(PQgetvalue(res, 0, 0), m[i].msg_id) != 0)
		fail("complete", "acking %s gave the row %s; its msg_id", m[i].msg_id,
		    PQgetvalue(res, 0, 0));
	PQclear(res);
	if (n == 1)
		m[i].acked = 1;
	return n;
}

/* Runs a section of msg ids ($1) and returns its rows; NULL when failed. */
static PGresult *
of_ids(PGconn *conn, const char *section, const int *which, size_t n)
{
	static const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	char *array = ids(which, n);
	const char *params[1] = { array };
	PGresult *res = run(conn, section, 1, types, params);

	free(array);
	return res;
}

/* Runs a section that takes msg ids and changes them; the number of rows
 * it returned, or -1. */
static int
change(const char *section, const int *which, size_t n)
{
	PGresult *res = of_ids(c.conn, section, which, n);
	int rows;

	if (res == NULL)
		return -1;
	rows = PQntuples(res);
	PQclear(res);
	return rows;
}

/* The library's own rescue, where the adapter has one. */
static void
rescue(const char *lease_ms)
{
	static const Oid types[1] = { IDEM_OID_INT8 };
	const char *params[1] = { lease_ms };
	PGresult *res;

	if (!idem_queue_has(c.q, "rescue"))
		return;
	if ((res = run(c.conn, "rescue", 1, types, params)) != NULL) {
		checked("rescue");
		PQclear(res);
	}
}

/* The part of the schema idem_run that the adapters call, as kill-at
 * installs it (lib/ledger.sql): every section, with no kill point at its
 * hook in acking. Caller frees. */
static char *
ledger_sql(void)
{
	static const struct idem_sql_fill fills[] = { { "after_commit_point", "" } };
	struct idem_sql_section s, *prev = NULL;
	char *sql = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&sql, &len);

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	for (; idem_sql_section_next(idem_sql_ledger, prev, &s); prev = &s)
		idem_sql_put(f, c.conn, "idem_run", &s, fills, sizeof(fills) / sizeof(fills[0]));
	fputs("COMMENT ON SCHEMA idem_run IS "
	    "'queue-check: the deliveries and acks of an adapter under check'", f);
	if (fclose(f) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	return sql;
}

/* One part of install_observe's transaction: 0 when it went through; else
 * rolled back, and its failure set in err (ours) or reported against the
 * adapter's section (1). */
static int
install_part(const char *section, const char *sql, struct idem_error *err)
{
	PGresult *res = PQexec(c.conn, sql);
	char msg[768];
	int ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;

	if (!ok)
		idem_pg_message(c.conn, res, msg, sizeof(msg));
	PQclear(res);
	if (ok)
		return 0;
	PQclear(PQexec(c.conn, "ROLLBACK"));
	if (section == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "installing the deliveries' schema: %s", msg);
	fail(section, "installing it failed: %s", msg);
	return 1;
}

/* The schema of the deliveries and acks, with the adapter's observe and
 * hold-lease sections, in one transaction, each part run on its own so
 * that a failure names the part that failed. */
static int
install_observe(struct idem_error *err)
{
	char *observe = idem_queue_sql(c.q, c.conn, "observe");
	char *hold_lease = idem_queue_sql(c.q, c.conn, "hold-lease");
	char *ledger = ledger_sql();
	int rc;

	if ((rc = install_part(NULL, "BEGIN", err)) == 0 &&
	    (rc = install_part(NULL, ledger, err)) == 0 &&
	    (rc = install_part("observe", observe, err)) == 0 &&
	    (hold_lease == NULL || (rc = install_part("hold-lease", hold_lease, err)) == 0))
		rc = install_part(NULL, "COMMIT", err);
	free(ledger);
	free(observe);
	free(hold_lease);
	return rc;
}

/* deliveries of A, B, C, D against what consume took. */
static void
check_deliveries(void)
{
	static const int all[4] = { A, B, C, D };
	PGresult *res = of_ids(c.conn, "deliveries", all, 4);
	size_t i, n = 0;

	if (res == NULL)
		return;
	checked("deliveries");
	for (i = 0; i < c.ntakings; i++)
		n += c.takings[i].message <= D;
	if ((size_t)PQntuples(res) != n || PQnfields(res) < 7) {
		fail("deliveries", "gave %d rows of %d columns; %zu deliveries were taken, one row each "
		    "of 7 columns", PQntuples(res), PQnfields(res), n);
		goto out;
	}
	for (i = 0, n = 0; i < c.ntakings; i++) {
		const struct taking *t = &c.takings[i];
		const struct message *msg = &m[t->message];
		int row = (int)n, last = t->attempt == msg->taken;

		if (t->message > D)
			continue;
		n++;
		if (strcmp(PQgetvalue(res, row, 0), msg->msg_id) != 0) {
			fail("deliveries", "row %d: msg_id %s; the delivery taken %s was of %s, "
			    "attempt %d", row + 1, PQgetvalue(res, row, 0), n == 1 ? "first" : "then",
			    msg->msg_id, t->attempt);
			goto out;
		}
		if (strcmp(PQgetvalue(res, row, 1), msg->job_id) != 0 ||
		    strcmp(PQgetvalue(res, row, 2), msg->key) != 0) {
			fail("deliveries", "row %d: job %s, business key %s; message %s is job %s, "
			    "key %s", row + 1, PQgetvalue(res, row, 1), PQgetvalue(res, row, 2),
			    msg->msg_id, msg->job_id, msg->key);
			goto out;
		}
		if (strtol(PQgetvalue(res, row, 3), NULL, 10) != t->attempt ||
		    PQgetisnull(res, row, 3)) {
			fail("deliveries", "row %d: message %s (%s copy %d) attempt %s; consume had "
			    "taken it %d time%s then", row + 1, msg->msg_id, msg->job_id, msg->copy,
			    PQgetisnull(res, row, 3) ? "null" : PQgetvalue(res, row, 3), t->attempt,
			    t->attempt == 1 ? "" : "s");
			goto out;
		}
		if (strtoll(PQgetvalue(res, row, 4), NULL, 10) <= 0) {
			fail("deliveries", "row %d: delivered_at %s; microseconds since the epoch",
			    row + 1, PQgetvalue(res, row, 4));
			goto out;
		}
		if (strtol(PQgetvalue(res, row, 5), NULL, 10) != t->backend_pid) {
			fail("deliveries", "row %d: backend pid %s; the delivery was taken by %d",
			    row + 1, PQgetvalue(res, row, 5), t->backend_pid);
			goto out;
		}
		if (PQgetisnull(res, row, 6) == (last && msg->acked)) {
			fail("deliveries", "row %d: message %s attempt %d: acked_at %s; %s", row + 1,
			    msg->msg_id, t->attempt, PQgetisnull(res, row, 6) ? "null" :
			    PQgetvalue(res, row, 6), last && msg->acked ? "complete acked it" :
			    last ? "it is not acked" : "a later delivery is the last");
			goto out;
		}
	}
out:
	PQclear(res);
}

/* deliveries-of-key of a key against what consume took: newest first. */
static void
check_deliveries_of_key(const char *key)
{
	static const Oid types[1] = { IDEM_OID_TEXT };
	const char *params[1] = { key };
	PGresult *res = run(c.conn, "deliveries-of-key", 1, types, params);
	size_t i, n = 0;
	int row;

	if (res == NULL)
		return;
	checked("deliveries-of-key");
	for (i = 0; i < c.ntakings; i++)
		n += strcmp(m[c.takings[i].message].key, key) == 0;
	if ((size_t)PQntuples(res) != n || PQnfields(res) < 4) {
		fail("deliveries-of-key", "key %s: %d rows of %d columns; %zu deliveries were taken, "
		    "one row each of 4 columns", key, PQntuples(res), PQnfields(res), n);
		goto out;
	}
	for (i = c.ntakings, row = 0; i-- > 0;) {
		const struct taking *t = &c.takings[i];
		const struct message *msg = &m[t->message];

		if (strcmp(msg->key, key) != 0)
			continue;
		if (strcmp(PQgetvalue(res, row, 0), msg->msg_id) != 0 ||
		    strcmp(PQgetvalue(res, row, 1), msg->job_id) != 0 ||
		    strtol(PQgetvalue(res, row, 2), NULL, 10) != t->attempt ||
		    strtol(PQgetvalue(res, row, 3), NULL, 10) != t->backend_pid) {
			fail("deliveries-of-key", "key %s, row %d: msg_id %s, job %s, attempt %s, "
			    "backend %s; newest first, it is %s, %s, attempt %d, backend %d", key,
			    row + 1, PQgetvalue(res, row, 0), PQgetvalue(res, row, 1),
			    PQgetvalue(res, row, 2), PQgetvalue(res, row, 3), msg->msg_id,
			    msg->job_id, t->attempt, t->backend_pid);
			goto out;
		}
		row++;
	}
out:
	PQclear(res);
}

/* unacked and unacked-list of A, B, C, D. */
static void
check_unacked(void)
{
	static const int all[4] = { A, B, C, D };
	PGresult *res;
	int i, want = 0, row;

	for (i = A; i <= D; i++)
		want += !m[i].acked;
	if ((res = of_ids(c.conn, "unacked", all, 4)) != NULL) {
		checked("unacked");
		if (PQntuples(res) != 1 || strtol(PQgetvalue(res, 0, 0), NULL, 10) != want)
			fail("unacked", "says %s of the 4 messages are not acked; %d are not",
			    PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "no row:", want);
		PQclear(res);
	}
	if ((res = of_ids(c.conn, "unacked-list", all, 4)) == NULL)
		return;
	checked("unacked-list");
	if (PQntuples(res) != want || PQnfields(res) < 4) {
		fail("unacked-list", "gave %d rows of %d columns; %d messages are not acked, one row "
		    "each of 4 columns", PQntuples(res), PQnfields(res), want);
		goto out;
	}
	for (row = 0; row < want; row++) {
		int j = message_of(PQgetvalue(res, row, 0));
		char copy[16];

		snprintf(copy, sizeof(copy), "%d", j >= 0 ? m[j].copy : -1);
		if (j < 0 || m[j].acked) {
			fail("unacked-list", "row %d: msg_id %s, %s", row + 1, PQgetvalue(res, row, 0),
			    j < 0 ? "not one of the 4" : "which complete acked");
			goto out;
		}
		if (strcmp(PQgetvalue(res, row, 1), m[j].job_id) != 0 ||
		    strcmp(PQgetvalue(res, row, 2), copy) != 0 ||
		    strtol(PQgetvalue(res, row, 3), NULL, 10) != m[j].taken) {
			fail("unacked-list", "message %s: job %s, copy %s, %s deliveries; it is job %s, "
			    "copy %d, taken %d times", m[j].msg_id, PQgetvalue(res, row, 1),
			    PQgetvalue(res, row, 2), PQgetvalue(res, row, 3), m[j].job_id, m[j].copy,
			    m[j].taken);
			goto out;
		}
	}
out:
	PQclear(res);
}

/* The acks observe recorded: each completed message once, no other. */
static void
check_acks(struct idem_error *err)
{
	PGresult *res = own(c.conn, "reading the acks", "SELECT msg_id, count(*) FROM idem_run.ack "
	    "GROUP BY msg_id ORDER BY msg_id", 0, NULL, err);
	int i, row, acked = 0;

	if (res == NULL) {
		fail("observe", "%s", err->text);
		return;
	}
	for (i = 0; i < NMESSAGES; i++)
		acked += m[i].acked;
	for (row = 0; row < PQntuples(res); row++) {
		int j = message_of(PQgetvalue(res, row, 0));

		if (j < 0 || !m[j].acked || strcmp(PQgetvalue(res, row, 1), "1") != 0) {
			fail("observe", "recorded %s ack%s of message %s; %s", PQgetvalue(res, row, 1),
			    strcmp(PQgetvalue(res, row, 1), "1") ? "s" : "", PQgetvalue(res, row, 0),
			    j >= 0 && m[j].acked ? "complete acked it once" : "it is not acked");
			goto out;
		}
	}
	if (PQntuples(res) != acked)
		fail("observe", "recorded the acks of %d messages; complete acked %d",
		    PQntuples(res), acked);
out:
	PQclear(res);
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* The section whose failure (or absence) stops the checks that need it. */
static void
stop(const char *section)
{
	if (c.stopped == NULL)
		c.stopped = section;
}

/* Takes two messages with a long lease, into *a and *b (-1: none), and
 * then looks for a third: its index, -1 for none, or -2 when consume
 * failed at any of the three. */
static int
take_two(int *a, int *b)
{
	int third;

	*a = consume(c.conn, LONG_LEASE);
	*b = *a >= 0 ? consume(c.conn, LONG_LEASE) : *a;
	third = *b >= 0 ? consume(c.conn, LONG_LEASE) : *b;
	return *a < -1 || *b < -1 || third < -1 ? -2 : third;
}

/* The main path: publish, hold back, consume, complete, expire, take again. */
static void
check_path(void)
{
	static const int first[4] = { A, B, C, D }, held[2] = { C, D };
	int x1, x2, y1, y2, z, again, i;

	/* publish: four messages, again the same, and one that clashes */
	if (publish(first, 4, LONG_LEASE, 1) < 0 || publish(first, 4, LONG_LEASE, 0) < 0) {
		stop("publish");
		return;
	}
	publish_clash();
	checked("publish");
	if (!idem_queue_has(c.q, "consume") || !idem_queue_has(c.q, "complete")) {
		stop(idem_queue_has(c.q, "consume") ? "complete" : "consume");
		return;
	}
	/* C and D held back: A and B only, in some order */
	if (change("hold-back", held, 2) < 0)
		{ stop("hold-back"); return; }
	checked("hold-back");
	if ((again = take_two(&x1, &x2)) < -1)
		{ stop("consume"); return; }
	if (x1 < 0 || x2 < 0 || again >= 0 || x1 == x2) {
		if (again == C || again == D || x1 == C || x1 == D || x2 == C || x2 == D)
			fail("hold-back", "consume took message %s, which hold-back held back",
			    m[again == C || x1 == C || x2 == C ? C : D].msg_id);
		else
			fail("consume", "took %s of the 2 messages that were not held back",
			    x1 < 0 ? "none" : x2 < 0 ? "one" : "one twice or more than both");
		{ stop("consume"); return; }
	}
	checked("consume");
	/* x1 acked, once; x2 left unacked */
	if ((i = complete(c.conn, x1)) < 0)
		{ stop("complete"); return; }
	if (i != 1)
		fail("complete", "acking %s gave %d rows; one, for the message it acked",
		    m[x1].msg_id, i);
	else if ((i = complete(c.conn, x1)) != 0 && i != -1)
		fail("complete", "acking %s again gave %d rows; none: it was acked before",
		    m[x1].msg_id, i);
	checked("complete");
	/* let-go: C and D, in some order */
	if (change("let-go", held, 2) < 0)
		{ stop("let-go"); return; }
	checked("let-go");
	if ((again = take_two(&y1, &y2)) < -1)
		{ stop("consume"); return; }
	if (y1 < 0 || y2 < 0 || again >= 0 || y1 == y2) {
		if (y1 < 0 || y2 < 0)
			fail("let-go", "consume took %s of the 2 messages let go", y1 < 0 ? "none" : "one");
		else
			fail("consume", "took message %s while every other was taken and its lease "
			    "running", m[again >= 0 ? again : y2].msg_id);
		{ stop("let-go"); return; }
	}
	/* C: its lease ended, taken again as attempt 2 and acked; an acked
	 * message has no lease to end */
	{
		const int expired[1] = { C }, acked[1] = { x1 };
		int rows = change("expire", expired, 1);

		if (rows < 0)
			{ stop("expire"); return; }
		checked("expire");
		if (rows != 1)
			fail("expire", "ending the lease of %s gave %d rows; one, for the message whose "
			    "lease it ended", m[C].msg_id, rows);
		rescue(LONG_LEASE);
		z = consume(c.conn, LONG_LEASE);
		if (z < -1)
			{ stop("consume"); return; }
		if (z != C) {
			fail("expire", "ended the lease of %s, and consume then took %s", m[C].msg_id,
			    z < 0 ? "nothing" : m[z].msg_id);
			{ stop("expire"); return; }
		}
		if ((rows = change("expire", acked, 1)) > 0)
			fail("expire", "ending the lease of %s, which complete acked, gave %d rows; "
			    "none", m[x1].msg_id, rows);
		if (complete(c.conn, C) != 1)
			fail("complete", "acking %s, taken again, gave no row", m[C].msg_id);
	}
}

/* The most messages take_past_rescued takes that are not the one it
 * looks for: more than the check publishes. */
#define RESCUED_MAX 20

/* Consumes with a lease of 1 ms past the messages the library's own rescue
 * of stale leases freed, each taken once more at most, until it takes the
 * message target: target, -1 when consume took nothing first, -2 when it
 * failed, -3 when it took RESCUED_MAX others (reported). */
static int
take_past_rescued(int target)
{
	int i, n;

	for (n = 0; n < RESCUED_MAX; n++)
		if ((i = consume(c.conn, "1")) < 0 || i == target)
			return i;
	fail("consume", "took a message other than %s %d times in a row, each with a lease of 1 "
	    "ms; it takes what is leased", m[target].msg_id, RESCUED_MAX);
	return -3;
}

/* A held lease: the message in idem_run.leased, taken with a lease of a
 * millisecond, is not taken again until expire ends it. */
static void
check_lease(struct idem_error *err)
{
	static const int f[1] = { F };
	const char *params[1];
	const char *section = idem_queue_has(c.q, "hold-lease") ? "hold-lease" : "expire";
	PGresult *res;
	int i;

	if (publish(f, 1, "1", 1) < 0)
		return;
	params[0] = m[F].msg_id;
	if ((res = own(c.conn, "holding a lease", "INSERT INTO idem_run.leased (msg_id) VALUES ($1)",
	    1, params, err)) == NULL) {
		fail(section, "%s", err->text);
		return;
	}
	PQclear(res);
	if ((i = consume(c.conn, "1")) != F) {
		if (i >= -1)
			fail("consume", "took %s; the one message available was %s",
			    i < 0 ? "nothing" : m[i].msg_id, m[F].msg_id);
		return;
	}
	sleep_ms(50);
	rescue("1");
	if ((i = take_past_rescued(F)) == F) {
		fail(section, "%s, held, taken with a lease of 1 ms, was taken again 50 ms later "
		    "before expire ended its lease%s", m[F].msg_id,
		    idem_queue_has(c.q, "hold-lease") ? "" : " (the adapter has no hold-lease)");
		return;
	}
	if (i < -1)
		return;
	if (change("expire", f, 1) != 1) {
		fail("expire", "ending the held lease of %s gave no row", m[F].msg_id);
		return;
	}
	/* the rescue frees again what was taken above with a lease of 1 ms */
	rescue("1");
	if ((i = take_past_rescued(F)) != F) {
		if (i == -1)
			fail("expire", "ended the held lease of %s, and consume then took nothing but "
			    "what the rescue freed", m[F].msg_id);
		return;
	}
	complete(c.conn, F);
	checked(section);
}

/* published-after, published-span and copy, where the adapter has them. */
static void
check_published(void)
{
	const char *params[1] = { "0" };
	PGresult *res;
	char *max_before = NULL;
	int row, n = 0;

	if (idem_queue_has(c.q, "published-after") &&
	    (res = run(c.conn, "published-after", 1, NULL, params)) != NULL) {
		checked("published-after");
		if (PQnfields(res) < 3)
			fail("published-after", "gave %d columns; job id, copy and msg_id",
			    PQnfields(res));
		for (row = 0; PQnfields(res) >= 3 && row < PQntuples(res); row++) {
			int j = message_of(PQgetvalue(res, row, 2));

			if (j < 0 || strcmp(PQgetvalue(res, row, 0), m[j].job_id) != 0) {
				fail("published-after", "row %d: job %s, msg_id %s, which publish did not "
				    "give", row + 1, PQgetvalue(res, row, 0), PQgetvalue(res, row, 2));
				break;
			}
			n += j <= D;
			free(max_before);
			max_before = idem_estrdup(PQgetvalue(res, row, 2));
		}
		if (!failed("published-after") && n != 4)
			fail("published-after", "listed %d of the 4 messages published", n);
		PQclear(res);
	}
	if (idem_queue_has(c.q, "published-span") &&
	    (res = run(c.conn, "published-span", 1, NULL, params)) != NULL) {
		checked("published-span");
		if (PQntuples(res) != 1 || PQnfields(res) < 4 || PQgetisnull(res, 0, 0) ||
		    message_of(PQgetvalue(res, 0, 0)) != A || message_of(PQgetvalue(res, 0, 1)) < 0)
			fail("published-span", "the lowest msg_id above 0 is %s; %s, the first published",
			    PQntuples(res) == 1 && PQnfields(res) > 0 ? PQgetvalue(res, 0, 0) : "no row",
			    m[A].msg_id);
		PQclear(res);
	}
	if (idem_queue_has(c.q, "copy")) {
		char *sql = idem_queue_sql(c.q, c.conn, "copy"), *line;

		res = PQexec(c.conn, sql);
		free(sql);
		if (PQresultStatus(res) != PGRES_COPY_IN) {
			fail("copy", "is no COPY FROM STDIN: %s", PQresStatus(PQresultStatus(res)));
			PQclear(res);
			goto out;
		}
		PQclear(res);
		if (asprintf(&line, "%s\t%s\t0\t%s\t%s\n", c.q->name, m[E].job_id, m[E].key,
		    m[E].payload) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if (PQputCopyData(c.conn, line, (int)strlen(line)) != 1 ||
		    PQputCopyEnd(c.conn, NULL) != 1)
			fail("copy", "%s", PQerrorMessage(c.conn));
		free(line);
		res = PQgetResult(c.conn);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			char msg[768];

			fail("copy", "the copy failed: %s", idem_pg_message(c.conn, res, msg, sizeof(msg)));
		}
		PQclear(res);
		while ((res = PQgetResult(c.conn)) != NULL)
			PQclear(res);
		checked("copy");
		/* read back above the last message published before */
		params[0] = max_before ? max_before : "0";
		if (!failed("copy") && idem_queue_has(c.q, "published-after") &&
		    (res = run(c.conn, "published-after", 1, NULL, params)) != NULL) {
			if (PQntuples(res) != 1 || PQnfields(res) < 3 ||
			    strcmp(PQgetvalue(res, 0, 0), m[E].job_id) != 0)
				fail("copy", "published-after %s lists %d messages; the one copied, %s",
				    params[0], PQntuples(res), m[E].job_id);
			else
				m[E].msg_id = idem_estrdup(PQgetvalue(res, 0, 2));
			PQclear(res);
		}
		/* and out of the way */
		if (m[E].msg_id != NULL) {
			static const int e[1] = { E };

			change("hold-back", e, 1);
		}
	}
out:
	free(max_before);
}

/* A touch while watched: observe's statement trigger. */
static void
check_touch(struct idem_error *err)
{
	PGresult *res;
	int touched;

	if ((res = own(c.conn, "watching", "INSERT INTO idem_run.watch VALUES (now())", 0, NULL,
	    err)) == NULL) {
		fail("observe", "%s", err->text);
		return;
	}
	PQclear(res);
	if (consume(c.conn, LONG_LEASE) < -1)
		return;
	if ((res = own(c.conn, "reading the touches", "SELECT count(*) FROM idem_run.touch", 0, NULL,
	    err)) == NULL) {
		fail("observe", "%s", err->text);
		return;
	}
	touched = strcmp(PQgetvalue(res, 0, 0), "0") != 0;
	PQclear(res);
	PQclear(own(c.conn, "watching", "DELETE FROM idem_run.watch", 0, NULL, err));
	if (!touched)
		fail("observe", "a consume while watched left no touch: its statement trigger must "
		    "call idem_run.touched()");
}

/* A section's first failure, new since it had none, that the account met:
 * the account's, not the section's. */
static void
blame_account(const char *section, int had_failed)
{
	size_t i = index_of(section);

	if (had_failed || c.failure[i][0] == '\0')
		return;
	fail("account", "as the account, %s: %s", section, c.failure[i]);
	c.failure[i][0] = '\0';
}

/* Takes and acks whatever is available, once the checks that count
 * deliveries are done: the library's own rescue may have made messages
 * available again (graphile-worker's of stale locks). */
static void
drain(void)
{
	int i, n;

	for (n = 0; n < 20 && (i = consume(c.conn, LONG_LEASE)) >= 0; n++)
		complete(c.conn, i);
}

/* As the account: takes and acks a message of its queue, and none of
 * another queue's. */
static void
as_account(const struct idem_queue *other, struct idem_error *err)
{
	static const int g[1] = { G };
	PGconn *as_role = NULL;
	PGresult *res = NULL;
	char *url = NULL;
	int i, consume_failed = failed("consume"), complete_failed = failed("complete");

	if (publish(g, 1, LONG_LEASE, 1) < 0)
		goto out;
	url = idem_pg_url(PQhost(c.conn), PQport(c.conn), PQdb(c.conn), CHECK_ROLE);
	as_role = PQconnectdb(url);
	if (PQstatus(as_role) != CONNECTION_OK) {
		idem_error_set(err, IDEM_EXIT_ENV, "connecting as %s: %s", CHECK_ROLE,
		    PQerrorMessage(as_role));
		fail("account", "%s", err->text);
		goto out;
	}
	i = consume(as_role, LONG_LEASE);
	blame_account("consume", consume_failed);
	if (i != G) {
		if (i >= -1)
			fail("account", "as the account, consume took %s; %s was the one available",
			    i < 0 ? "nothing" : m[i].msg_id, m[G].msg_id);
		else
			fail("account", "as the account, consume failed");
		goto out;
	}
	i = complete(as_role, G);
	blame_account("complete", complete_failed);
	if (i != 1) {
		fail("account", "as the account, complete did not ack %s", m[G].msg_id);
		goto out;
	}
	/* another queue's message, which it must not take */
	{
		static const Oid types[6] = { IDEM_OID_TEXT_ARRAY, IDEM_OID_INT4_ARRAY, IDEM_OID_TEXT_ARRAY,
			IDEM_OID_JSONB_ARRAY, IDEM_OID_INT8, IDEM_OID_INT8 };
		static const Oid lease_type[1] = { IDEM_OID_INT8 };
		const char *params[6] = { "{qc-other}", "{0}", "{k-other}", "{\"{}\"}", LONG_LEASE,
			MAX_ATTEMPTS }, *lease[1] = { LONG_LEASE };
		struct idem_error other_err;

		if (idem_queue_has(other, "prepare") && (res = idem_queue_exec(other, c.conn, "prepare",
		    "preparing another queue", 0, NULL, NULL, &other_err)) != NULL)
			PQclear(res);
		if ((res = idem_queue_exec(other, c.conn, "publish", "publishing to another queue", 6,
		    types, params, &other_err)) == NULL) {
			fail("publish", "%s", other_err.text);
			goto out;
		}
		PQclear(res);
		/* refused or nothing: either is right */
		if ((res = idem_queue_exec(other, as_role, "consume", "as the account", 1, lease_type,
		    lease, &other_err)) != NULL && PQntuples(res) > 0)
			fail("account", "as the account, consume of queue %s took its message %s: the "
			    "account reaches a queue not its own", other->name, PQgetvalue(res, 0, 0));
		PQclear(res);
	}
out:
	free(url);
	PQfinish(as_role);
}

/* The sandbox account: granted through account, it takes and acks a
 * message of its queue, and none of another; denied what denied lists. */
static void
check_account(const struct idem_queue *other, struct idem_error *err)
{
	struct idem_role role;
	PGresult *res = NULL;
	int row;

	memset(&role, 0, sizeof(role));
	if (idem_role_open(&role, c.conn, CHECK_ROLE, c.q, "queue_check.effect", err) < 0) {
		fail("account", "%s", err->text);
		goto out;
	}
	if (idem_queue_has(c.q, "setup-schemas")) {
		const char *params[1] = { CHECK_ROLE };
		static const Oid types[1] = { IDEM_OID_TEXT };

		if ((res = run(c.conn, "setup-schemas", 1, types, params)) != NULL) {
			for (row = 0; row < PQntuples(res); row++) {
				PGresult *st = PQexec(c.conn, PQgetvalue(res, row, 0));
				char msg[768];

				if (PQresultStatus(st) != PGRES_COMMAND_OK &&
				    PQresultStatus(st) != PGRES_TUPLES_OK)
					fail("setup-schemas", "its statement %s failed: %s",
					    PQgetvalue(res, row, 0), idem_pg_message(c.conn, st, msg, sizeof(msg)));
				PQclear(st);
			}
			checked("setup-schemas");
			PQclear(res);
			res = NULL;
		}
	}
	if (idem_role_confine(&role, c.conn, err) < 0) {
		fail("account", "%s", err->text);
		stop("account");
		goto out;
	}
	checked("account");
	as_account(other, err);
	/* denied: each thing a table, and not held */
	if ((res = run(c.conn, "denied", 0, NULL, NULL)) == NULL)
		goto out;
	checked("denied");
	for (row = 0; row < PQntuples(res); row++) {
		const char *params[3] = { CHECK_ROLE, PQgetvalue(res, row, 0), PQgetvalue(res, row, 1) };
		PGresult *held = own(c.conn, "checking what the account may not do",
		    "SELECT to_regclass($2) IS NOT NULL, "
		    "coalesce(has_table_privilege($1, to_regclass($2), $3), false)", 3, params, err);

		if (held == NULL) {
			fail("denied", "%s %s: %s", params[2], params[1], err->text);
			break;
		}
		if (strcmp(PQgetvalue(held, 0, 0), "t") != 0)
			fail("denied", "names %s, which is no table of the sandbox", params[1]);
		else if (strcmp(PQgetvalue(held, 0, 1), "t") == 0)
			fail("denied", "says the account may not %s %s, and it can", params[2], params[1]);
		PQclear(held);
	}
	if (PQntuples(res) == 0)
		fail("denied", "lists nothing; the account may not TRUNCATE the queue's tables");
out:
	PQclear(res);
	if (role.name != NULL)
		idem_role_close(&role);
}

/* The server's notices (a policy dropped that was not there) are no
 * finding. */
static void
quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

static int
report(FILE *out)
{
	size_t i;
	int failures = 0;

	for (i = 0; i < NSECTIONS; i++) {
		const char *s = order[i];

		if (c.failure[i][0] != '\0') {
			fprintf(out, "%s FAIL: %s\n", s, c.failure[i]);
			failures++;
		} else if (!idem_queue_has(c.q, s)) {
			fprintf(out, "%s skipped (absent)\n", s);
		} else if (c.checked[i]) {
			fprintf(out, "%s ok\n", s);
		} else {
			if (c.stopped != NULL && !idem_queue_has(c.q, c.stopped))
				fprintf(out, "%s FAIL: not checked: the adapter has no %s section\n", s,
				    c.stopped);
			else
				fprintf(out, "%s FAIL: not checked: %s failed first\n", s,
				    c.stopped ? c.stopped : "an earlier section");
			failures++;
		}
	}
	return failures;
}

int
check_adapter(const struct idem_queue *q, const struct idem_queue *other, PGconn *conn, FILE *out,
	      struct idem_error *err)
{
	static const int key_of[3] = { A, C, F };
	PGresult *res;
	char *version = NULL;
	int rc, i;

	memset(&c, 0, sizeof(c));
	c.q = q;
	c.conn = conn;
	PQsetNoticeProcessor(conn, quiet, NULL);
	/* installed and version */
	if ((res = run(conn, "installed", 0, NULL, NULL)) != NULL) {
		int rows = PQntuples(res), yes = rows == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;

		if (rows != 1 || PQnfields(res) != 1 || (!yes && strcmp(PQgetvalue(res, 0, 0), "f") != 0))
			fail("installed", "gave %d rows of %d columns; one boolean", rows, PQnfields(res));
		checked("installed");
		PQclear(res);
		if (!yes && !failed("installed")) {
			idem_queue_check(q, conn, &version, err);
			return -1;
		}
	}
	if ((res = run(conn, "version", 0, NULL, NULL)) != NULL) {
		if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0) || *PQgetvalue(res, 0, 0) == '\0')
			fail("version", "gave %d rows, %s; one text, the version of the library's schema",
			    PQntuples(res), PQntuples(res) == 1 ? "null or empty" : "not one");
		checked("version");
		PQclear(res);
	}
	if (failed("installed"))
		stop("installed");
	/* prepare, twice: the second finds the queue there */
	for (i = 0; i < 2 && c.stopped == NULL && idem_queue_has(q, "prepare"); i++) {
		if ((res = run(conn, "prepare", 0, NULL, NULL)) == NULL)
			stop("prepare");
		PQclear(res);
		checked("prepare");
	}
	if (c.stopped == NULL && (rc = install_observe(err)) != 0) {
		if (rc < 0)
			return -1;
		stop(failed("observe") ? "observe" : "hold-lease");
	}
	if (c.stopped == NULL)
		check_path();
	if (c.stopped == NULL) {
		checked("observe");
		check_touch(err);
		check_acks(err);
		check_deliveries();
		for (i = 0; i < 2; i++)
			check_deliveries_of_key(m[key_of[i]].key);
		check_unacked();
		check_published();
		check_lease(err);
		drain();
		check_account(other, err);
	}
	free(version);
	rc = report(out);
	for (i = 0; i < NMESSAGES; i++) {
		free(m[i].msg_id);
		m[i].msg_id = NULL;
		m[i].taken = m[i].acked = 0;
	}
	return rc;
}
