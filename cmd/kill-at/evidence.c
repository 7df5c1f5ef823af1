/* evidence.c: the rows kill-at writes (evidence.h) */
#include <sys/stat.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "evidence.h"
#include "json.h"
#include "map.h"
#include "pg.h"
#include "tsv.h"
#include "file.h"
#include "text.h"

/*
 * What a run saw is written to temporary files as it comes, never kept in
 * memory: the step and log rows as they go out, and the parts of the join
 * (deliveries, the ledger's writes, sessions, consumed steps, branch
 * lines) as COPY text. At the end PostgreSQL joins them, in temporary
 * tables of the controller's session, and the attempt rows are read back
 * through a cursor: a run's memory does not grow with its jobs. Only the
 * kills, a few, stay in memory.
 */
enum spool {
	SPOOL_STEPS, SPOOL_LINES,	/* rows of the stream */
	SPOOL_DELIVERIES, SPOOL_WRITES, SPOOL_BACKENDS, SPOOL_CONSUMED, SPOOL_BRANCHES,
	NSPOOLS
};

/* The kills by job and attempt. */
struct lists {
	struct idem_map index;
	struct list {
		size_t *v, n;
	} *l;
	size_t n;
};

struct kill {
	char *scenario, *job_id, *step, *msg_id;
	long long attempt, killed_at;
	pid_t pid;
	const char *observed;
};

/* A worker's branch line not yet spooled: the next of the same delivery
 * joins it, up to BRANCH_ROW_MAX bytes of names. */
#define BRANCH_ROW_MAX 4096
struct branch {
	int by_msg;
	char *id, *attempt, *names;	/* names NULL: none */
};

struct idem_evidence {
	FILE *spool[NSPOOLS];
	long long rows[NSPOOLS];	/* rows in each */
	int spool_errno;		/* the first error writing them, or 0 */
	int ledger;
	/* the queries of the database's own rows, run where they are joined */
	char *deliveries_sql, *msg_ids;
	int (*ledger_ready)(void *ctx, const char **sql, struct idem_error *err);
	void *ledger_ctx;
	int grouped_view;		/* idem_ev_g is a view of the grouped ledger */
	struct kill *k;
	size_t nk;
	struct lists kills;		/* job and attempt: kills */
	struct branch *branch;		/* by worker */
	size_t nbranch;
};

static void
lists_init(struct lists *ls)
{
	idem_map_init(&ls->index);
	ls->l = NULL;
	ls->n = 0;
}

static void
lists_free(struct lists *ls)
{
	size_t i;

	for (i = 0; i < ls->n; i++)
		free(ls->l[i].v);
	free(ls->l);
	idem_map_free(&ls->index);
}

static void
lists_add(struct lists *ls, const char *key, size_t value)
{
	size_t at = idem_map_get(&ls->index, key);
	struct list *l;

	if (at == IDEM_MAP_NONE) {
		at = ls->n++;
		ls->l = idem_ereallocarray(ls->l, ls->n, sizeof(*ls->l));
		ls->l[at].v = NULL;
		ls->l[at].n = 0;
		idem_map_put(&ls->index, key, at);
	}
	l = &ls->l[at];
	l->v = idem_ereallocarray(l->v, l->n + 1, sizeof(*l->v));
	l->v[l->n++] = value;
}

static const struct list *
lists_get(const struct lists *ls, const char *key)
{
	static const struct list none = { NULL, 0 };
	size_t at = idem_map_get(&ls->index, key);

	return at == IDEM_MAP_NONE ? &none : &ls->l[at];
}

/* "job<TAB>attempt", the key of a job's attempt, in buf or allocated. */
static char *
attempt_key(const char *job_id, long long attempt, char *buf, size_t size)
{
	char *out = buf;
	int n = snprintf(buf, size, "%s\t%lld", job_id, attempt);

	if (n < 0 || (size_t)n >= size)
		if (asprintf(&out, "%s\t%lld", job_id, attempt) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
	return out;
}

#define WITH_ATTEMPT_KEY(var, job_id, attempt, body) do {			\
	char var##_buf[256], *var = attempt_key(job_id, attempt, var##_buf, sizeof(var##_buf)); \
	body;									\
	if (var != var##_buf)							\
		free(var);							\
} while (0)

static void
kill_free(struct kill *k)
{
	free(k->scenario);
	free(k->job_id);
	free(k->step);
	free(k->msg_id);
}

static void
branch_clear(struct branch *b)
{
	free(b->id);
	free(b->attempt);
	free(b->names);
	*b = (struct branch){ 0 };
}

struct idem_evidence *
idem_evidence_new(void)
{
	struct idem_evidence *ev = idem_emalloc(sizeof(*ev));
	int i;

	memset(ev, 0, sizeof(*ev));
	lists_init(&ev->kills);
	for (i = 0; i < NSPOOLS; i++)
		if ((ev->spool[i] = tmpfile()) == NULL && ev->spool_errno == 0)
			ev->spool_errno = errno;
	return ev;
}

void
idem_evidence_free(struct idem_evidence *ev)
{
	size_t i;

	if (ev == NULL)
		return;
	for (i = 0; i < NSPOOLS; i++)
		if (ev->spool[i] != NULL)
			fclose(ev->spool[i]);
	for (i = 0; i < ev->nk; i++)
		kill_free(&ev->k[i]);
	free(ev->k);
	lists_free(&ev->kills);
	for (i = 0; i < ev->nbranch; i++)
		branch_clear(&ev->branch[i]);
	free(ev->branch);
	free(ev->deliveries_sql);
	free(ev->msg_ids);
	free(ev);
}

/* Appends a row to a spool: with kind, a row of the stream; without, a
 * row of COPY text, numbered first. The first failure is kept for
 * idem_evidence_write to report. */
static void
spool_row(struct idem_evidence *ev, enum spool s, const char *kind, const char *const *row,
	  size_t n)
{
	FILE *f = ev->spool[s];
	size_t i;
	int rc;

	if (ev->spool_errno != 0)
		return;
	if (kind != NULL) {
		rc = idem_tsv_write_row(f, kind, row, n);
	} else {
		rc = fprintf(f, "%lld", ev->rows[s]) < 0 ? -1 : 0;
		for (i = 0; i < n && rc == 0; i++)
			if (putc('\t', f) == EOF || idem_tsv_write_field(f, row[i]) < 0)
				rc = -1;
		if (rc == 0 && putc('\n', f) == EOF)
			rc = -1;
	}
	if (rc < 0)
		ev->spool_errno = errno ? errno : EIO;
	ev->rows[s]++;
}

void
idem_evidence_delivery(struct idem_evidence *ev, const char *msg_id, const char *job_id,
		       const char *business_key, long long attempt, long long delivered_at_us,
		       int backend_pid, long long acked_at_us)
{
	char a[32], d[32], b[16], k[32];
	const char *row[7] = { msg_id, job_id, business_key, a, d, b, k };

	snprintf(a, sizeof(a), "%lld", attempt);
	snprintf(d, sizeof(d), "%lld", delivered_at_us);
	snprintf(b, sizeof(b), "%d", backend_pid);
	snprintf(k, sizeof(k), "%lld", acked_at_us);
	spool_row(ev, SPOOL_DELIVERIES, NULL, row, 7);
}

void
idem_evidence_deliveries_from(struct idem_evidence *ev, char *sql, const char *msg_ids)
{
	free(ev->deliveries_sql);
	free(ev->msg_ids);
	ev->deliveries_sql = sql;
	ev->msg_ids = idem_estrdup(msg_ids);
}

void
idem_evidence_grouped_ledger(struct idem_evidence *ev,
			     int (*ready)(void *ctx, const char **sql, struct idem_error *err),
			     void *ctx)
{
	ev->ledger = 1;
	ev->ledger_ready = ready;
	ev->ledger_ctx = ctx;
}

void
idem_evidence_ledger(struct idem_evidence *ev, const struct idem_failpoint_write *writes, size_t n)
{
	size_t i;

	ev->ledger = 1;
	for (i = 0; i < n; i++) {
		const struct idem_failpoint_write *w = &writes[i];
		char b[16], wr[32], c[32];
		const char *row[6] = { w->xid, b, w->update ? "t" : "f", w->business_key, wr, c };

		if (w->business_key == NULL)
			continue;
		snprintf(b, sizeof(b), "%d", w->backend_pid);
		snprintf(wr, sizeof(wr), "%lld", w->written_at_us);
		snprintf(c, sizeof(c), "%lld", w->committed_at_us);
		spool_row(ev, SPOOL_WRITES, NULL, row, 6);
	}
}

void
idem_evidence_backend(struct idem_evidence *ev, int backend_pid, long long backend_start_us,
		      int worker, pid_t pid)
{
	char b[16], s[32], w[16], p[16];
	const char *row[4] = { b, s, w, p };

	snprintf(b, sizeof(b), "%d", backend_pid);
	snprintf(s, sizeof(s), "%lld", backend_start_us);
	snprintf(w, sizeof(w), "%d", worker);
	snprintf(p, sizeof(p), "%d", (int)pid);
	spool_row(ev, SPOOL_BACKENDS, NULL, row, 4);
}

void
idem_evidence_step(struct idem_evidence *ev, long long at_us, int worker, pid_t pid,
		   const char *name, const char *job_id, long long attempt, const char *action,
		   const char *observed)
{
	char at[32], w[16], p[16], a[32];
	const char *row[8] = { at, w, p, name, job_id, a, action, observed };

	idem_format_time(at_us, at);
	snprintf(w, sizeof(w), "%d", worker);
	snprintf(p, sizeof(p), "%d", (int)pid);
	snprintf(a, sizeof(a), "%lld", attempt);
	spool_row(ev, SPOOL_STEPS, "step", row, 8);
	/* a job id that is not UTF-8 is no delivery's: the database has none */
	if (strcmp(name, "consumed") == 0 && strcmp(observed, "socket") == 0 &&
	    idem_utf8_valid(job_id, strlen(job_id))) {
		row[0] = job_id;
		row[1] = a;
		row[2] = p;
		spool_row(ev, SPOOL_CONSUMED, NULL, row, 3);
	}
}

static void
spool_names(struct idem_evidence *ev, int by_msg, const char *id, const char *attempt,
	    const char *names)
{
	const char *row[4] = { by_msg ? "t" : "f", id, attempt, names };

	spool_row(ev, SPOOL_BRANCHES, NULL, row, 4);
}

static void
spool_branch(struct idem_evidence *ev, struct branch *b)
{
	if (b->names == NULL)
		return;
	spool_names(ev, b->by_msg, b->id, b->attempt, b->names);
	branch_clear(b);
}

static int
same_delivery(const struct branch *b, int by_msg, const char *id, const char *attempt)
{
	return b->names != NULL && b->by_msg == by_msg && strcmp(b->id, id) == 0 &&
	    strcmp(b->attempt, attempt) == 0;
}

/*
 * A branch line of a delivery (its message, or its job, and attempt).
 * The lines a worker writes one after another for one delivery go to
 * the database as one row, their names in order: a run has one row a
 * delivery to join, not one a line. Another worker's line of the same
 * delivery goes out before it, so the names keep the order they came in.
 */
static void
branch_line(struct idem_evidence *ev, int worker, int by_msg, const char *id,
	    const char *attempt, const char *name)
{
	struct branch *b;
	size_t i;

	for (i = 0; i < ev->nbranch; i++)
		if ((int)i != worker && same_delivery(&ev->branch[i], by_msg, id, attempt))
			spool_branch(ev, &ev->branch[i]);
	if (worker < 0) {
		spool_names(ev, by_msg, id, attempt, name);
		return;
	}
	if ((size_t)worker >= ev->nbranch) {
		ev->branch = idem_ereallocarray(ev->branch, (size_t)worker + 1, sizeof(*ev->branch));
		for (i = ev->nbranch; i <= (size_t)worker; i++)
			ev->branch[i] = (struct branch){ 0 };
		ev->nbranch = (size_t)worker + 1;
	}
	b = &ev->branch[worker];
	/* a row holds a few kilobytes at most: a worker that writes without
	 * end fills the spool, not kill-at's memory */
	if (same_delivery(b, by_msg, id, attempt) && strlen(b->names) < BRANCH_ROW_MAX) {
		size_t len = strlen(b->names);

		b->names = idem_erealloc(b->names, len + 1 + strlen(name) + 1);
		b->names[len] = ' ';
		strcpy(b->names + len + 1, name);
		return;
	}
	spool_branch(ev, b);
	*b = (struct branch){ by_msg, idem_estrdup(id), idem_estrdup(attempt), idem_estrdup(name) };
}

void
idem_evidence_log(struct idem_evidence *ev, long long at_us, int worker, pid_t pid,
		  const char *text, size_t len)
{
	char *line = idem_emalloc(len + 1), *b, *j, *a, *m;
	char at[32], w[16], p[16];
	const char *row[4] = { at, w, p, line };
	size_t i;

	memcpy(line, text, len);
	line[len] = '\0';
	if (!idem_utf8_valid(line, len))
		for (i = 0; i < len; i++)
			if ((unsigned char)line[i] >= 0x80 || line[i] == '\0')
				line[i] = '?';
	idem_format_time(at_us, at);
	snprintf(w, sizeof(w), "%d", worker);
	snprintf(p, sizeof(p), "%d", (int)pid);
	spool_row(ev, SPOOL_LINES, "log", row, 4);
	b = idem_log_value(line, "branch");
	j = b ? idem_log_value(line, "job") : NULL;
	a = b ? idem_log_value(line, "attempt") : NULL;
	m = b ? idem_log_value(line, "msg_id") : NULL;
	free(line);
	/* a line with its message is that delivery's whatever job it names
	 * (a worker on another library knows the library's id, not the
	 * seed's job); one without, its job's attempt's */
	if (b != NULL && a != NULL && (j != NULL || m != NULL))
		branch_line(ev, worker, m != NULL, m ? m : j, a, b);
	free(b);
	free(j);
	free(a);
	free(m);
}

void
idem_evidence_print_log(const struct idem_evidence *ev, FILE *out, pid_t pid)
{
	FILE *f = ev->spool[SPOOL_LINES];
	char *line = NULL, *field[5], *p;
	size_t cap = 0, n, len;
	ssize_t got;

	/* the spool's rows: log, time, worker, pid, line */
	if (f == NULL || fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0)
		return;
	while ((got = getline(&line, &cap, f)) > 0) {
		if (line[got - 1] == '\n')
			line[got - 1] = '\0';
		for (n = 0, p = line; n < 5 && p != NULL; n++) {
			field[n] = p;
			if ((p = strchr(p, '\t')) != NULL)
				*p++ = '\0';
		}
		if (n == 5 && strtol(field[3], NULL, 10) == (long)pid &&
		    (len = strlen(field[4]), idem_tsv_unescape(field[4], &len) == 0))
			fprintf(out, "%s\n", field[4]);
	}
	free(line);
	fseek(f, 0, SEEK_END);
}

void
idem_evidence_kill(struct idem_evidence *ev, const char *scenario, const char *job_id,
		   long long attempt, const char *step, const char *msg_id, pid_t pid,
		   long long killed_at_us, const char *observed)
{
	ev->k = idem_ereallocarray(ev->k, ev->nk + 1, sizeof(*ev->k));
	ev->k[ev->nk] = (struct kill){ idem_estrdup(scenario), idem_estrdup(job_id),
	    idem_estrdup(step), msg_id ? idem_estrdup(msg_id) : NULL, attempt, killed_at_us, pid,
	    observed };
	WITH_ATTEMPT_KEY(key, job_id, attempt, lists_add(&ev->kills, key, ev->nk++));
}

/* Copies a spool to out; -1 on a read or write error. */
static int
copy_spool(FILE *spool, FILE *out)
{
	if (fflush(spool) != 0 || fseek(spool, 0, SEEK_SET) != 0 ||
	    idem_copy_stream(spool, out) < 0)
		return -1;
	return fseek(spool, 0, SEEK_END) != 0 ? -1 : 0;
}

/* The step, kill and log rows, as they came. */
static int
write_steps_kills_logs(const struct idem_evidence *ev, FILE *out)
{
	char at[32], pid[16], attempt[32];
	const char *row[7];
	size_t i;
	int rc = copy_spool(ev->spool[SPOOL_STEPS], out);

	for (i = 0; i < ev->nk && rc == 0; i++) {
		const struct kill *k = &ev->k[i];

		idem_format_time(k->killed_at, at);
		snprintf(attempt, sizeof(attempt), "%lld", k->attempt);
		snprintf(pid, sizeof(pid), "%d", (int)k->pid);
		row[0] = k->scenario;
		row[1] = k->job_id;
		row[2] = attempt;
		row[3] = k->step;
		row[4] = pid;
		row[5] = at;
		row[6] = k->observed;
		rc = idem_tsv_write_row(out, "kill", row, 7);
	}
	return rc == 0 ? copy_spool(ev->spool[SPOOL_LINES], out) : rc;
}

/* Whether a result has the status wanted; err set if not. The result is
 * cleared either way. */
static int
result_is(PGconn *conn, PGresult *res, ExecStatusType want, struct idem_error *err)
{
	char msg[768];
	int rc = 0;

	if (PQresultStatus(res) != want) {
		idem_error_set(err, IDEM_EXIT_ENV, "joining the evidence: %s",
		    idem_pg_message(conn, res, msg, sizeof(msg)));
		rc = -1;
	}
	PQclear(res);
	return rc;
}

/* Runs commands, one or more. */
static int
exec_ok(PGconn *conn, const char *sql, struct idem_error *err)
{
	return result_is(conn, PQexec(conn, sql), PGRES_COMMAND_OK, err);
}

/* Loads a spool of COPY text into a table by copy (a COPY ... FROM STDIN). */
static int
copy_in(PGconn *conn, const char *copy, FILE *spool, struct idem_error *err)
{
	char buf[65536], msg[768];
	PGresult *res;
	size_t n;
	int rc = 0;

	if (result_is(conn, PQexec(conn, copy), PGRES_COPY_IN, err) < 0)
		return -1;
	if (fflush(spool) != 0 || fseek(spool, 0, SEEK_SET) != 0)
		rc = -1;
	while (rc == 0 && (n = fread(buf, 1, sizeof(buf), spool)) > 0)
		if (PQputCopyData(conn, buf, (int)n) != 1)
			rc = -1;
	if (ferror(spool))
		rc = -1;
	if (PQputCopyEnd(conn, rc == 0 ? NULL : "the spool could not be read") != 1)
		rc = -1;
	while ((res = PQgetResult(conn)) != NULL) {
		if (PQresultStatus(res) != PGRES_COMMAND_OK && rc == 0)
			rc = -1;
		if (rc < 0 && err->text[0] == '\0')
			idem_error_set(err, IDEM_EXIT_ENV, "joining the evidence: %s",
			    idem_pg_message(conn, res, msg, sizeof(msg)));
		PQclear(res);
	}
	if (rc < 0 && err->text[0] == '\0')
		idem_error_set(err, IDEM_EXIT_ENV, "joining the evidence: %s",
		    idem_pg_message(conn, NULL, msg, sizeof(msg)));
	return rc;
}

/*
 * The temporary tables, dropped at the end of the transaction, and what
 * is derived from them: the session, worker and process of each delivery
 * (the session started last before it), and the writes of the ledger
 * grouped by transaction and business key, each group attributed to a
 * delivery: among the deliveries of its key taken before its first write,
 * the last one taken by the same session; else by a session of the same
 * worker; else the last. Deliveries are numbered in the order they were
 * taken, as the queue's deliveries query returns them.
 */
static const char tables_sql[] =
    "SET LOCAL client_min_messages = warning;\n"
    "SET LOCAL jit = off;\n"
    "SET LOCAL work_mem = '64MB';\n"
    /* a run's rows are sorted in memory, by the session alone; the
     * tables have no statistics, and the merge joins the planner would
     * pick sort 100,000 rows a side where a hash join needs no sort */
    "SET LOCAL max_parallel_workers_per_gather = 0;\n"
    "SET LOCAL enable_mergejoin = off;\n"
    "CREATE TEMP TABLE idem_ev_delivery (n bigint, msg_id text COLLATE \"C\","
    " job_id text COLLATE \"C\", business_key text COLLATE \"C\", attempt bigint,"
    " delivered_at bigint, backend_pid integer, acked_at bigint) ON COMMIT DROP;\n"
    "CREATE TEMP TABLE idem_ev_write (n bigint, xid text COLLATE \"C\", backend_pid integer,"
    " upd boolean, business_key text COLLATE \"C\", written_at bigint, committed_at bigint)"
    " ON COMMIT DROP;\n"
    "CREATE TEMP TABLE idem_ev_backend (n bigint, backend_pid integer, start bigint,"
    " worker integer, os_pid integer) ON COMMIT DROP;\n"
    "CREATE TEMP TABLE idem_ev_consumed (n bigint, job_id text COLLATE \"C\", attempt bigint,"
    " pid integer) ON COMMIT DROP;\n"
    "CREATE TEMP TABLE idem_ev_branch (n bigint, by_msg boolean, id text COLLATE \"C\","
    " attempt text COLLATE \"C\", name text) ON COMMIT DROP;\n";

static const char *const copy_sql[NSPOOLS] = {
	[SPOOL_DELIVERIES] = "COPY idem_ev_delivery (n, msg_id, job_id, business_key, attempt,"
	    " delivered_at, backend_pid, acked_at) FROM STDIN",
	[SPOOL_WRITES] = "COPY idem_ev_write FROM STDIN",
	[SPOOL_BACKENDS] = "COPY idem_ev_backend FROM STDIN",
	[SPOOL_CONSUMED] = "COPY idem_ev_consumed FROM STDIN",
	[SPOOL_BRANCHES] = "COPY idem_ev_branch FROM STDIN",
};

/* Each session from its start to the next start of its backend pid. */
static const char sessions_sql[] =
    "CREATE TEMP TABLE idem_ev_session ON COMMIT DROP AS\n"
    "SELECT backend_pid, start, worker, os_pid,\n"
    " lead(start) OVER (PARTITION BY backend_pid ORDER BY start) AS until\n"
    "FROM (SELECT DISTINCT ON (backend_pid, start) * FROM idem_ev_backend\n"
    " ORDER BY backend_pid, start, n) b";

/* Each delivery, and the worker and process of its session; %s: the
 * queue's deliveries. */
static const char deliveries_sql[] =
    "CREATE TEMP TABLE idem_ev_d ON COMMIT DROP AS\n"
    "SELECT d.*, s.worker, s.os_pid\n"
    "FROM (SELECT * FROM idem_ev_delivery%s) d\n"
    "LEFT JOIN idem_ev_session s ON s.backend_pid = d.backend_pid\n"
    " AND s.start <= d.delivered_at AND (s.until IS NULL OR d.delivered_at < s.until)";

/* The writes of each transaction to each key, one session's: its first
 * write, its commit, its inserts and updates; the ledger's writes come
 * grouped so already. */
static const char writes_sql[] =
    "CREATE TEMP TABLE idem_ev_g ON COMMIT DROP AS\n"
    "SELECT xid, business_key, min(backend_pid) AS backend_pid,\n"
    " min(written_at) AS first_write, max(committed_at) AS last_commit,\n"
    " count(*) FILTER (WHERE NOT upd) AS inserts, count(*) FILTER (WHERE upd) AS updates\n"
    "FROM idem_ev_write GROUP BY xid, business_key";

static const char join_sql[] =
    "SET LOCAL cursor_tuple_fraction = 1;\n"
    /* the writes of each transaction to each key go to one of the
     * deliveries of the key taken before their first */
    "CREATE TEMP TABLE idem_ev_rows ON COMMIT DROP AS\n"
    "WITH gw AS (\n"
    " SELECT g.*, s.worker\n"
    " FROM idem_ev_g g LEFT JOIN idem_ev_session s ON s.backend_pid = g.backend_pid\n"
    "  AND s.start <= g.first_write AND (s.until IS NULL OR g.first_write < s.until)),\n"
    "a AS (\n"
    " SELECT min(gw.inserts) AS inserts, min(gw.updates) AS updates,\n"
    "  min(gw.first_write) AS first_write, min(gw.last_commit) AS last_commit,\n"
    "  coalesce(max(d.n) FILTER (WHERE d.backend_pid = gw.backend_pid),\n"
    "   max(d.n) FILTER (WHERE d.worker = gw.worker), max(d.n)) AS dn\n"
    " FROM gw JOIN idem_ev_d d ON d.business_key = gw.business_key\n"
    "  AND d.delivered_at <= gw.first_write\n"
    " GROUP BY gw.xid, gw.business_key)\n"
    "SELECT dn, sum(inserts) AS inserts, sum(updates) AS updates,\n"
    " min(first_write) AS first_write, max(last_commit) AS last_commit\n"
    "FROM a GROUP BY dn;\n"
    /* the n-th delivery of a job with an attempt number is the n-th
     * consumed step for them */
    "CREATE TEMP TABLE idem_ev_pid ON COMMIT DROP AS\n"
    "SELECT d.n, c.pid\n"
    "FROM (SELECT n, job_id, attempt,\n"
    "  row_number() OVER (PARTITION BY job_id, attempt ORDER BY n) AS nth\n"
    " FROM idem_ev_d WHERE (job_id, attempt) IN (SELECT job_id, attempt FROM idem_ev_consumed)) d\n"
    "JOIN (SELECT job_id, attempt, pid,\n"
    "  row_number() OVER (PARTITION BY job_id, attempt ORDER BY n) AS nth\n"
    " FROM idem_ev_consumed) c USING (job_id, attempt, nth);\n"
    /* its branches, the lines naming its message and attempt, then those
     * naming its job and attempt and no message, in the order of the
     * sorted subquery: one sort of them all, where string_agg(... ORDER
     * BY n) sorts each delivery's on its own, 100 ms at 100,000 */
    "DECLARE idem_ev NO SCROLL CURSOR FOR\n"
    "SELECT d.job_id, d.msg_id, d.attempt, coalesce(c.pid, d.os_pid, 0), d.delivered_at,\n"
    " coalesce(r.last_commit, 0), d.acked_at, coalesce(r.inserts, 0),\n"
    " CASE WHEN bm.names IS NULL THEN bj.names WHEN bj.names IS NULL THEN bm.names\n"
    "  ELSE bm.names || ' ' || bj.names END,\n"
    " coalesce(r.first_write, 0), coalesce(r.updates, 0)\n"
    "FROM idem_ev_d d\n"
    "LEFT JOIN idem_ev_pid c ON c.n = d.n\n"
    "LEFT JOIN idem_ev_rows r ON r.dn = d.n\n"
    "LEFT JOIN (SELECT id, attempt, string_agg(name, ' ') AS names\n"
    " FROM (SELECT * FROM idem_ev_branch WHERE by_msg ORDER BY id, attempt, n) b GROUP BY id, attempt) bm\n"
    " ON bm.id = d.msg_id AND bm.attempt = d.attempt::text\n"
    "LEFT JOIN (SELECT id, attempt, string_agg(name, ' ') AS names\n"
    " FROM (SELECT * FROM idem_ev_branch WHERE NOT by_msg ORDER BY id, attempt, n) b GROUP BY id, attempt) bj\n"
    " ON bj.id = d.job_id AND bj.attempt = d.attempt::text\n"
    "ORDER BY d.n";

/* The last delivery of each message that had one killed: its attempt and
 * its ack. */
static const char last_sql[] =
    "SELECT DISTINCT ON (msg_id) msg_id, attempt, acked_at FROM idem_ev_d\n"
    "WHERE msg_id = ANY ($1) ORDER BY msg_id, n DESC";

/*
 * The deliveries, with their sessions' workers and processes, and the
 * writes grouped by transaction and business key: from the rows copied
 * in, and straight from the queue's and the ledger's queries when there
 * are some, so that their rows are read once, where they are joined.
 * The queue's rows are numbered on from the rows copied in, in its
 * query's order: the database numbers the rows of a sorted subquery as
 * they come.
 */
static int
from_queries(struct idem_evidence *ev, PGconn *conn, struct idem_error *err)
{
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	const char *params[1] = { ev->msg_ids }, *grouped = NULL;
	char *more = NULL, *sql;
	PGresult *res;
	int rc;

	if (exec_ok(conn, sessions_sql, err) < 0)
		return -1;
	if (ev->deliveries_sql != NULL &&
	    asprintf(&more, " UNION ALL SELECT %lld + row_number() OVER () - 1, q.msg_id::text,"
	    " q.job_id::text, q.business_key::text, q.attempt::bigint, q.delivered_at::bigint,"
	    " q.backend_pid::integer, q.acked_at::bigint FROM (%s) q (msg_id, job_id, business_key,"
	    " attempt, delivered_at, backend_pid, acked_at)", ev->rows[SPOOL_DELIVERIES],
	    ev->deliveries_sql) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if (asprintf(&sql, deliveries_sql, more ? more : "") < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(more);
	res = PQexecParams(conn, sql, ev->deliveries_sql ? 1 : 0, types, params, NULL, NULL, 0);
	free(sql);
	if (result_is(conn, res, PGRES_COMMAND_OK, err) < 0)
		return -1;
	if (ev->ledger_ready != NULL && ev->ledger_ready(ev->ledger_ctx, &grouped, err) < 0)
		return -1;
	if (grouped == NULL)
		return exec_ok(conn, writes_sql, err);
	if (ev->rows[SPOOL_WRITES] > 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "joining the evidence: writes given "
		    "both as rows and as the ledger's groups");
	/* the ledger's groups as they are */
	ev->grouped_view = 1;
	if (asprintf(&sql, "CREATE TEMP VIEW idem_ev_g AS %s", grouped) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	rc = exec_ok(conn, sql, err);
	free(sql);
	return rc;
}

/* A killed delivery, for its recover row. */
struct recover {
	char *job_id, *msg_id;
	long long attempt, killed_at, acked_at;	/* acked_at: by a later delivery, else 0 */
};

/* The kill of a delivery, if it was killed. */
static const struct kill *
kill_of(const struct idem_evidence *ev, const char *job_id, long long attempt, const char *msg_id,
	pid_t pid)
{
	const struct kill *found = NULL;

	WITH_ATTEMPT_KEY(key, job_id, attempt, {
		const struct list *l = lists_get(&ev->kills, key);
		size_t i;

		for (i = 0; i < l->n && found == NULL; i++) {
			const struct kill *k = &ev->k[l->v[i]];

			if (k->msg_id != NULL ? strcmp(k->msg_id, msg_id) == 0 : k->pid == pid)
				found = k;
		}
	});
	return found;
}

static const char *
time_or_null(long long us, char buf[32])
{
	if (us == 0)
		return NULL;
	idem_format_time(us, buf);
	return buf;
}

/* The attempt rows of a batch of the cursor; the kills among them go to
 * *rec, their acks found after. */
static int
write_attempts(const struct idem_evidence *ev, PGresult *res, FILE *out, struct recover **rec,
	       size_t *nrec)
{
	int i, rc = 0;

	for (i = 0; i < PQntuples(res) && rc == 0; i++) {
		char consumed[32], committed[32], acked[32], written[32];
		const char *row[11];
		long long attempt = strtoll(PQgetvalue(res, i, 2), NULL, 10);
		pid_t pid = (pid_t)atoi(PQgetvalue(res, i, 3));
		const struct kill *k;

		row[0] = PQgetvalue(res, i, 0);
		row[1] = PQgetvalue(res, i, 1);
		row[2] = PQgetvalue(res, i, 2);
		row[3] = pid ? PQgetvalue(res, i, 3) : NULL;
		row[4] = time_or_null(strtoll(PQgetvalue(res, i, 4), NULL, 10), consumed);
		row[5] = time_or_null(strtoll(PQgetvalue(res, i, 5), NULL, 10), committed);
		row[6] = time_or_null(strtoll(PQgetvalue(res, i, 6), NULL, 10), acked);
		row[7] = ev->ledger ? PQgetvalue(res, i, 7) : NULL;
		row[8] = PQgetisnull(res, i, 8) ? NULL : PQgetvalue(res, i, 8);
		row[9] = time_or_null(strtoll(PQgetvalue(res, i, 9), NULL, 10), written);
		row[10] = ev->ledger ? PQgetvalue(res, i, 10) : NULL;
		rc = idem_tsv_write_row(out, "attempt", row, 11);
		if ((k = kill_of(ev, row[0], attempt, row[1], pid)) == NULL)
			continue;
		/* the ack of the same message by a later delivery */
		*rec = idem_ereallocarray(*rec, *nrec + 1, sizeof(**rec));
		(*rec)[(*nrec)++] = (struct recover){ idem_estrdup(row[0]), idem_estrdup(row[1]),
		    attempt, k->killed_at, 0 };
	}
	return rc;
}

/* The ack of each killed delivery by a later delivery of its message:
 * the last delivery's, when it came after the killed one. */
static int
recover_acks(PGconn *conn, struct recover *rec, size_t nrec, struct idem_error *err)
{
	struct idem_text_array ids = { 0 };
	struct idem_map last;
	const char *params[1];
	PGresult *res;
	size_t i, j;

	if (nrec == 0)
		return 0;
	for (i = 0; i < nrec; i++)
		idem_text_array_add(&ids, rec[i].msg_id);
	params[0] = idem_text_array_take(&ids);
	res = idem_pg_exec(conn, "joining the evidence", err, last_sql, 1, params);
	free((char *)params[0]);
	if (res == NULL)
		return -1;
	idem_map_init(&last);
	for (j = 0; j < (size_t)PQntuples(res); j++)
		idem_map_put(&last, PQgetvalue(res, (int)j, 0), j);
	for (i = 0; i < nrec; i++) {
		if ((j = idem_map_get(&last, rec[i].msg_id)) == IDEM_MAP_NONE)
			continue;
		if (strtoll(PQgetvalue(res, (int)j, 1), NULL, 10) > rec[i].attempt &&
		    !PQgetisnull(res, (int)j, 2))
			rec[i].acked_at = strtoll(PQgetvalue(res, (int)j, 2), NULL, 10);
	}
	idem_map_free(&last);
	PQclear(res);
	return 0;
}

int
idem_evidence_write(struct idem_evidence *ev, PGconn *conn, FILE *out, struct idem_error *err)
{
	struct recover *rec = NULL;
	size_t nrec = 0, i;
	PGresult *res = NULL;
	int rc = 0, s, open = 0;

	err->text[0] = '\0';
	for (i = 0; i < ev->nbranch; i++)
		spool_branch(ev, &ev->branch[i]);
	if (ev->spool_errno != 0) {
		errno = ev->spool_errno;
		goto write_error;
	}
	if (write_steps_kills_logs(ev, out) < 0)
		goto write_error;
	if (exec_ok(conn, "BEGIN", err) < 0)
		return -1;
	open = 1;
	if (exec_ok(conn, tables_sql, err) < 0)
		goto fail;
	for (s = 0; s < NSPOOLS; s++)
		if (copy_sql[s] != NULL && ev->rows[s] > 0 &&
		    copy_in(conn, copy_sql[s], ev->spool[s], err) < 0)
			goto fail;
	if (from_queries(ev, conn, err) < 0 || exec_ok(conn, join_sql, err) < 0)
		goto fail;
	do {
		PQclear(res);
		if ((res = idem_pg_exec(conn, "joining the evidence", err, "FETCH 10000 FROM idem_ev",
		    0, NULL)) == NULL)
			goto fail;
		if (write_attempts(ev, res, out, &rec, &nrec) < 0) {
			PQclear(res);
			goto write_error;
		}
	} while (PQntuples(res) > 0);
	PQclear(res);
	if (recover_acks(conn, rec, nrec, err) < 0)
		goto fail;
	/* a temporary view outlives the transaction; the table it reads
	 * does not outlive the run */
	if (ev->grouped_view && exec_ok(conn, "DROP VIEW idem_ev_g", err) < 0)
		goto fail;
	open = 0;
	if (exec_ok(conn, "COMMIT", err) < 0)
		goto fail;
	for (i = 0; i < nrec && rc == 0; i++) {
		char killed_at[32], acked_at[32], ms[32];
		const char *row[5] = { rec[i].job_id, rec[i].msg_id, killed_at, NULL, NULL };

		idem_format_time(rec[i].killed_at, killed_at);
		if (rec[i].acked_at != 0) {
			idem_format_time(rec[i].acked_at, acked_at);
			snprintf(ms, sizeof(ms), "%lld", (rec[i].acked_at - rec[i].killed_at) / 1000);
			row[3] = acked_at;
			row[4] = ms;
		}
		if ((rc = idem_tsv_write_row(out, "recover", row, 5)) < 0)
			goto write_error;
	}
	goto out;
write_error:
	idem_error_set(err, IDEM_EXIT_ENV, "holding the rows: %s", strerror(errno ? errno : EIO));
fail:
	rc = -1;
	if (open)
		PQclear(PQexec(conn, "ROLLBACK"));
out:
	for (i = 0; i < nrec; i++) {
		free(rec[i].job_id);
		free(rec[i].msg_id);
	}
	free(rec);
	return rc;
}

/* The rows about the run beside the evidence: the worker, the calls the
 * vendor double took, the kill points and races missed. */

int
idem_evidence_calls(FILE *out, struct idem_vendor_call *const *calls, size_t n, long long skew_us)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const struct idem_vendor_call *c = calls[i];
		char at[32], worker[16], pid[16], status[16], id[24], answered[32];
		const char *row[14];

		idem_format_time(c->at_us + skew_us, at);
		snprintf(worker, sizeof(worker), "%d", c->worker);
		snprintf(pid, sizeof(pid), "%d", (int)c->pid);
		snprintf(status, sizeof(status), "%d", c->status);
		row[0] = at;
		row[1] = worker;
		row[2] = pid;
		row[3] = c->method;
		row[4] = c->path;
		row[5] = c->idempotency_key;
		row[6] = c->body_sha256;
		row[7] = c->business_key;
		row[8] = status;
		/* a request cut short before it was answered took no effect */
		row[9] = *c->answer ? c->answer : "error";
		row[10] = c->effect ? "yes" : "no";
		row[11] = c->response_id;
		snprintf(id, sizeof(id), "%ld", c->id);
		row[12] = id;
		row[13] = c->answered_us ? answered : NULL;
		if (c->answered_us)
			idem_format_time(c->answered_us + skew_us, answered);
		if (idem_tsv_write_row(out, "call", row, 14) < 0)
			return -1;
	}
	return 0;
}

int
idem_evidence_forgot(FILE *out, long long at_us, const char *business_key,
		     const char *idempotency_key, long first_call, long long window_ms)
{
	char at[32], call[24], window[24];
	const char *row[5] = { at, business_key, idempotency_key, call, window };

	idem_format_time(at_us, at);
	snprintf(call, sizeof(call), "%ld", first_call);
	snprintf(window, sizeof(window), "%lld", window_ms);
	return idem_tsv_write_row(out, "forgot", row, 5) < 0 ? -1 : 0;
}

static int
regular_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The file execvp(3) runs for a name: itself when it holds a slash, else
 * the first executable regular file of that name along PATH; NULL when
 * there is none. */
static char *
resolve_executable(const char *name)
{
	const char *path = getenv("PATH"), *p, *colon;
	char *file;

	if (*name == '\0')
		return NULL;
	if (strchr(name, '/'))
		return regular_file(name) ? idem_estrdup(name) : NULL;
	if (path == NULL)
		path = "/bin:/usr/bin";
	for (p = path;; p = colon + 1) {
		size_t len;

		colon = strchr(p, ':');
		len = colon ? (size_t)(colon - p) : strlen(p);
		/* an empty entry is the current directory */
		if (asprintf(&file, "%.*s%s%s", (int)len, p, len ? "/" : "", name) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if (regular_file(file) && access(file, X_OK) == 0)
			return file;
		free(file);
		if (colon == NULL)
			return NULL;
	}
}

int
idem_evidence_worker(FILE *out, char *const *argv, const char *command)
{
	json_t *argv_json = json_array();
	char **words = NULL, *text = NULL, *word, *save, *argv_text, *executable = NULL;
	char executable_sha256[65], script_sha256[65];
	const char *row[5] = { NULL, NULL, NULL, NULL, NULL };
	size_t nwords = 0, i;
	int rc;

	for (i = 0; argv[i] != NULL; i++)
		json_array_append_new(argv_json, json_string(argv[i]));
	argv_text = idem_json_canonical(argv_json);
	json_decref(argv_json);
	if (command != NULL) {
		text = idem_estrdup(command);
		for (word = strtok_r(text, " \t\n", &save); word; word = strtok_r(NULL, " \t\n", &save)) {
			words = idem_ereallocarray(words, nwords + 1, sizeof(*words));
			words[nwords++] = word;
		}
	} else {
		for (nwords = 0; argv[nwords] != NULL; nwords++)
			;
		words = idem_ereallocarray(NULL, nwords + 1, sizeof(*words));
		memcpy(words, argv, nwords * sizeof(*words));
	}
	row[0] = argv_text;
	if (nwords > 0 && (executable = resolve_executable(words[0])) != NULL) {
		row[1] = executable;
		if (idem_sha256_file(executable, executable_sha256) == 0)
			row[2] = executable_sha256;
	}
	for (i = 1; i < nwords; i++)
		if (regular_file(words[i]) && idem_sha256_file(words[i], script_sha256) == 0) {
			row[3] = words[i];
			row[4] = script_sha256;
			break;
		}
	rc = idem_tsv_write_row(out, "worker", row, 5);
	free(executable);
	free(argv_text);
	free(words);
	free(text);
	return rc < 0 ? -1 : 0;
}

int
idem_evidence_missed(FILE *out, const char *what, const char *scenario, const char *id,
		     long long attempt, const char *step)
{
	char attempt_text[24];
	const char *row[5] = { what, scenario, id, NULL, step };

	if (attempt > 0) {
		snprintf(attempt_text, sizeof(attempt_text), "%lld", attempt);
		row[3] = attempt_text;
	}
	return idem_tsv_write_row(out, "missed", row, 5) < 0 ? -1 : 0;
}
