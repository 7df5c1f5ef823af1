#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embed.h"
#include "failpoint.h"
#include "map.h"
#include "pg.h"
#include "sql.h"

static const char *const step_names[] = {
	NULL, "before-write", "before-commit", "after-commit", "after-commit"
};

struct idem_failpoint {
	PGconn *conn[2];		/* [0] runs the queries; both hold gates */
	int conn_pid[2];
	unsigned char owner[IDEM_FAILPOINT_SLOTS + 1];	/* which conn holds each gate */
	int ledger;			/* the effect table has its triggers */
	int grouping;			/* the ledger's grouping: 0 not begun, 1 under
					 * way on conn[0], 2 made */
	const struct idem_queue *q;
	char *msg_ids;			/* the messages watched */
	long long acks_then, unacked;	/* acks counted, and messages left, at the last look */
	/* the acks of transactions that had ended at the last count, and
	 * the horizon (an xid8) below which every transaction had */
	long long acks_ended;
	char acks_horizon[24];
	/* the points armed in the run, and how many kill points and races
	 * each is armed for still */
	struct { int id, uses; char *business_key; } *points;
	size_t npoints;
	struct idem_map point_index;	/* "step<TAB>key": its point */
};

int
idem_failpoint_step(const char *name)
{
	int i;

	for (i = IDEM_FAILPOINT_BEFORE_WRITE; i <= IDEM_FAILPOINT_AFTER_COMMIT; i++)
		if (strcmp(step_names[i], name) == 0)
			return i;
	return 0;
}

const char *
idem_failpoint_step_name(int step)
{
	return step >= IDEM_FAILPOINT_BEFORE_WRITE && step <= IDEM_FAILPOINT_ACK_IN_EFFECT ?
	    step_names[step] : NULL;
}

EMBED(idem_sql_ledger, "lib/ledger.sql");
extern const char idem_sql_ledger[];
EMBED(idem_sql_failpoint, "cmd/kill-at/failpoint.sql");
extern const char idem_sql_failpoint[];

/* The section name of failpoint.sql. */
static struct idem_sql_section
find_section(const char *name)
{
	struct idem_sql_section s;

	if (!idem_sql_section_find(idem_sql_failpoint, name, &s))
		idem_die(IDEM_EXIT_ENV, "failpoint.sql has no section %s", name);
	return s;
}

/* The section name of failpoint.sql, filled (caller frees). */
static char *
filled(const char *name, const struct idem_sql_fill *fills, size_t nfills)
{
	struct idem_sql_section s = find_section(name);

	return idem_sql_filled(&s, fills, nfills);
}

/* Writes the section name of failpoint.sql to f, filled (idem_sql_put). */
static void
put_section(FILE *f, PGconn *conn, const char *name, const struct idem_sql_fill *fills,
	    size_t nfills)
{
	struct idem_sql_section s = find_section(name);

	idem_sql_put(f, conn, "idem_run", &s, fills, nfills);
}

/* The numbers of failpoint.h that failpoint.sql names. */
static const struct {
	const char *name;
	int value;
} numbers[] = {
	{ "slots", IDEM_FAILPOINT_SLOTS },
	{ "last_slot", IDEM_FAILPOINT_SLOTS - 1 },
	{ "slot_class", IDEM_FAILPOINT_CLASS_SLOT },
	{ "gate_class", IDEM_FAILPOINT_CLASS_GATE },
	{ "point_class", IDEM_FAILPOINT_CLASS_POINT },
	{ "before_write", IDEM_FAILPOINT_BEFORE_WRITE },
	{ "before_commit", IDEM_FAILPOINT_BEFORE_COMMIT },
	{ "after_commit", IDEM_FAILPOINT_AFTER_COMMIT },
	{ "ack_in_effect", IDEM_FAILPOINT_ACK_IN_EFFECT },
};
#define NNUMBERS (sizeof(numbers) / sizeof(numbers[0]))

/*
 * The script that installs the run's schema: every section of
 * lib/ledger.sql (what the adapters call, as queue-check installs it too),
 * the kill points of failpoint.sql, and the adapter's observe and
 * hold-lease sections. The point of after-commit (the hook
 * :after_commit_point of ledger.sql's acking) only when the run may arm
 * it, and the triggers of the effect table (table and key quoted; table
 * NULL when it does not exist) only for the steps the run may arm: an
 * unarmed point costs the writer nothing.
 */
static char *
install_sql(PGconn *conn, const struct idem_queue *q, const char *table, const char *key,
	    unsigned steps)
{
	static const char *const kill_part[] = { "kill-points", "hold" },
		*const table_part[] = { "before_write", "record_write", "before_commit",
		"ledger-trigger" };
	struct idem_sql_section s, *prev = NULL;
	struct idem_sql_fill fills[NNUMBERS + 4];
	char text[NNUMBERS][16], *sql = NULL, *observe, *hold_lease, *after_commit = NULL;
	char *wrote = NULL;
	size_t len = 0, i, n;
	FILE *f;

	for (n = 0; n < NNUMBERS; n++) {
		snprintf(text[n], sizeof(text[n]), "%d", numbers[n].value);
		fills[n] = (struct idem_sql_fill){ numbers[n].name, text[n] };
	}
	fills[n++] = (struct idem_sql_fill){ "table", table };
	fills[n++] = (struct idem_sql_fill){ "key", key };
	if (steps & 1u << IDEM_FAILPOINT_AFTER_COMMIT) {
		after_commit = filled("after-commit-point", fills, n);
		wrote = filled("wrote", fills, n);
	}
	fills[n++] = (struct idem_sql_fill){ "after_commit_point", after_commit ? after_commit : "" };
	fills[n++] = (struct idem_sql_fill){ "wrote", wrote ? wrote : "" };
	if ((f = open_memstream(&sql, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	for (; idem_sql_section_next(idem_sql_ledger, prev, &s); prev = &s)
		idem_sql_put(f, conn, "idem_run", &s, fills, n);
	for (i = 0; i < sizeof(kill_part) / sizeof(kill_part[0]); i++)
		put_section(f, conn, kill_part[i], fills, n);
	if ((observe = idem_queue_sql(q, conn, "observe")) != NULL)
		fprintf(f, "%s\n", observe);
	if ((hold_lease = idem_queue_sql(q, conn, "hold-lease")) != NULL)
		fprintf(f, "%s\n", hold_lease);
	for (i = 0; table != NULL && i < sizeof(table_part) / sizeof(table_part[0]); i++)
		put_section(f, conn, table_part[i], fills, n);
	if (table != NULL && (steps & 1u << IDEM_FAILPOINT_BEFORE_WRITE))
		put_section(f, conn, "before-write-trigger", fills, n);
	if (table != NULL && (steps & 1u << IDEM_FAILPOINT_BEFORE_COMMIT))
		put_section(f, conn, "before-commit-trigger", fills, n);
	if (fclose(f) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	free(observe);
	free(hold_lease);
	free(after_commit);
	free(wrote);
	return sql;
}

static int
exec_ok(PGconn *conn, const char *what, const char *sql, int nparams, const char *const *params,
	struct idem_error *err)
{
	PGresult *res = idem_pg_exec(conn, what, err, sql, nparams, params);

	if (res == NULL)
		return -1;
	PQclear(res);
	return 0;
}

/* The first value of a one-row query, as a number; -1 with err set. */
static long long
exec_number(PGconn *conn, const char *what, const char *sql, int nparams,
	    const char *const *params, struct idem_error *err)
{
	PGresult *res = idem_pg_exec(conn, what, err, sql, nparams, params);
	long long v;

	if (res == NULL)
		return -1;
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
		PQclear(res);
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: no value", what);
	}
	v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return v;
}

/* Warnings such as pg_terminate_backend's for a session already gone are
 * no news to the caller. */
static void
ignore_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

static void
close_all(struct idem_failpoint *fp)
{
	size_t i;

	PQfinish(fp->conn[0]);
	PQfinish(fp->conn[1]);
	free(fp->msg_ids);
	for (i = 0; i < fp->npoints; i++)
		free(fp->points[i].business_key);
	free(fp->points);
	idem_map_free(&fp->point_index);
	free(fp);
}

/* The lock of the run, which one run of a database at a time holds. */
static int
take_run_lock(PGconn *conn, struct idem_error *err)
{
	char run_class[16];
	const char *params[1] = { run_class };
	PGresult *res;
	long long got;

	snprintf(run_class, sizeof(run_class), "%d", IDEM_FAILPOINT_CLASS_RUN);
	if ((got = exec_number(conn, "taking the run lock",
	    "SELECT pg_try_advisory_lock($1::integer, 0)::integer", 1, params, err)) < 0)
		return -1;
	if (got > 0)
		return 0;
	res = PQexecParams(conn, "SELECT string_agg(pid::text, ', ') FROM pg_locks "
	    "WHERE locktype = 'advisory' AND classid = $1::oid AND objid = 0 AND objsubid = 2 "
	    "AND granted", 1, NULL, params, NULL, NULL, 0);
	idem_error_set(err, IDEM_EXIT_ENV, "another kill-at run holds the kill points of this "
	    "database (server process %s); one run at a time",
	    PQresultStatus(res) == PGRES_TUPLES_OK ? PQgetvalue(res, 0, 0) : "?");
	PQclear(res);
	return -1;
}

/* Runs the script that installs the run's schema, in one transaction. */
static int
exec_script(PGconn *conn, const char *sql, struct idem_error *err)
{
	PGresult *res;
	char msg[768];

	if (exec_ok(conn, "installing the kill points", "BEGIN", 0, NULL, err) < 0)
		return -1;
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		idem_error_set(err, IDEM_EXIT_ENV, "installing the kill points: %s",
		    idem_pg_message(conn, res, msg, sizeof(msg)));
		PQclear(res);
		PQclear(PQexec(conn, "ROLLBACK"));
		return -1;
	}
	PQclear(res);
	return exec_ok(conn, "installing the kill points", "COMMIT", 0, NULL, err);
}

struct idem_failpoint *
idem_failpoint_install(const char *conninfo, const struct idem_queue *q, const char *effect_table,
		       const char *key_columns, unsigned steps, struct idem_error *err)
{
	struct idem_failpoint *fp = idem_emalloc(sizeof(*fp));
	char *table = NULL, *key = NULL, *sql = NULL, gate_class[16], slots[16];
	const char *params[2];
	PGresult *res;
	int i;

	memset(fp, 0, sizeof(*fp));
	fp->q = q;
	strcpy(fp->acks_horizon, "0");
	for (i = 0; i < 2; i++) {
		if ((fp->conn[i] = idem_pg_connect(conninfo, err)) == NULL)
			goto fail;
		fp->conn_pid[i] = PQbackendPID(fp->conn[i]);
		PQsetNoticeProcessor(fp->conn[i], ignore_notice, NULL);
	}
	if (take_run_lock(fp->conn[0], err) < 0)
		goto fail;
	if (effect_table != NULL && *effect_table != '\0') {
		table = idem_pg_quote_table(fp->conn[0], effect_table);
		params[0] = table;
		res = idem_pg_exec(fp->conn[0], "looking for the effect table", err,
		    "SELECT to_regclass($1) IS NOT NULL", 1, params);
		if (res == NULL)
			goto fail;
		fp->ledger = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		PQclear(res);
		if (fp->ledger && (key = idem_pg_key_sql(fp->conn[0], key_columns, "NEW.")) == NULL) {
			idem_error_set(err, IDEM_EXIT_USAGE, "key columns %s: expected a JSON array of "
			    "column names", key_columns);
			goto fail;
		}
	}
	sql = install_sql(fp->conn[0], q, fp->ledger ? table : NULL, key, steps);
	if (exec_script(fp->conn[0], sql, err) < 0)
		goto fail;
	snprintf(gate_class, sizeof(gate_class), "%d", IDEM_FAILPOINT_CLASS_GATE);
	snprintf(slots, sizeof(slots), "%d", IDEM_FAILPOINT_SLOTS);
	params[0] = gate_class;
	params[1] = slots;
	if (exec_ok(fp->conn[0], "holding the gates",
	    "SELECT count(pg_advisory_lock($1::integer, s)) FROM generate_series(0, $2::integer) s",
	    2, params, err) < 0)
		goto fail;
	free(table);
	free(key);
	free(sql);
	return fp;
fail:
	free(table);
	free(key);
	free(sql);
	close_all(fp);
	return NULL;
}

int
idem_failpoint_has_ledger(const struct idem_failpoint *fp)
{
	return fp->ledger;
}

static size_t
point_of(const struct idem_failpoint *fp, int armed)
{
	size_t i;

	for (i = 0; armed >= 0 && i < fp->npoints; i++)
		if (fp->points[i].id == armed)
			return i;
	return IDEM_MAP_NONE;
}

int
idem_failpoint_arm(struct idem_failpoint *fp, int step, const char *business_key,
		   struct idem_error *err)
{
	char id_text[16], step_text[16], *key;
	const char *params[3] = { id_text, step_text, business_key };
	size_t i;

	if (asprintf(&key, "%d\t%s", step, business_key) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "arming a kill point: out of memory");
	/* a point keeps its id for the run, disarmed or not: an id is never
	 * another point's */
	if ((i = idem_map_get(&fp->point_index, key)) == IDEM_MAP_NONE) {
		fp->points = idem_ereallocarray(fp->points, fp->npoints + 1, sizeof(*fp->points));
		i = fp->npoints++;
		fp->points[i].id = (int)fp->npoints;
		fp->points[i].uses = 0;
		fp->points[i].business_key = idem_estrdup(business_key);
		idem_map_put(&fp->point_index, key, i);
	}
	free(key);
	if (fp->points[i].uses == 0) {
		snprintf(id_text, sizeof(id_text), "%d", fp->points[i].id);
		snprintf(step_text, sizeof(step_text), "%d", step);
		if (exec_ok(fp->conn[0], "arming a kill point", "INSERT INTO idem_run.armed "
		    "(id, step, business_key) VALUES ($1::integer, $2::integer, $3)", 3, params,
		    err) < 0)
			return -1;
	}
	fp->points[i].uses++;
	return fp->points[i].id;
}

int
idem_failpoint_disarm(struct idem_failpoint *fp, int armed, struct idem_error *err)
{
	size_t i = point_of(fp, armed);
	char id[16];
	const char *params[1] = { id };

	if (i == IDEM_MAP_NONE || fp->points[i].uses == 0 || --fp->points[i].uses > 0)
		return 0;
	snprintf(id, sizeof(id), "%d", armed);
	return exec_ok(fp->conn[0], "disarming a kill point",
	    "DELETE FROM idem_run.armed WHERE id = $1::integer", 1, params, err);
}

const char *
idem_failpoint_armed_key(const struct idem_failpoint *fp, int armed)
{
	size_t i = point_of(fp, armed);

	return i != IDEM_MAP_NONE && fp->points[i].uses > 0 ? fp->points[i].business_key : NULL;
}

size_t
idem_failpoint_armed(const struct idem_failpoint *fp)
{
	return fp->npoints;
}

/* A session from the first three columns of a row: its server process,
 * client port and start. */
static void
read_session(const PGresult *res, int row, struct idem_failpoint_session *s)
{
	s->backend_pid = atoi(PQgetvalue(res, row, 0));
	s->client_port = atoi(PQgetvalue(res, row, 1));
	s->backend_start_us = strtoll(PQgetvalue(res, row, 2), NULL, 10);
}

int
idem_failpoint_sessions(struct idem_failpoint *fp, struct idem_failpoint_session **out, size_t *n,
			struct idem_error *err)
{
	char own[2][16];
	const char *params[2] = { own[0], own[1] };
	PGresult *res;
	size_t i;

	for (i = 0; i < 2; i++)
		snprintf(own[i], sizeof(own[i]), "%d", fp->conn_pid[i]);
	res = idem_pg_exec(fp->conn[0], "watching the sessions", err,
	    "SELECT pid, coalesce(client_port, -1), (extract(epoch FROM backend_start) * 1000000)::bigint"
	    " FROM pg_stat_activity WHERE backend_type = 'client backend'"
	    " AND datname = current_database() AND pid NOT IN ($1::integer, $2::integer)", 2, params);
	if (res == NULL)
		return -1;
	*n = (size_t)PQntuples(res);
	*out = idem_ereallocarray(NULL, *n + 1, sizeof(**out));
	for (i = 0; i < *n; i++)
		read_session(res, (int)i, &(*out)[i]);
	PQclear(res);
	return 0;
}

int
idem_failpoint_waiters(struct idem_failpoint *fp, struct idem_failpoint_waiter **out, size_t *n,
		       struct idem_error *err)
{
	char gate[16], point[16];
	const char *params[2] = { gate, point };
	PGresult *res;
	int i;

	snprintf(gate, sizeof(gate), "%d", IDEM_FAILPOINT_CLASS_GATE);
	snprintf(point, sizeof(point), "%d", IDEM_FAILPOINT_CLASS_POINT);
	/* a held session waits on a gate while it holds the lock of its point */
	res = idem_pg_exec(fp->conn[0], "watching the kill points", err,
	    "SELECT w.pid, coalesce(a.client_port, -1),"
	    " (extract(epoch FROM a.backend_start) * 1000000)::bigint,"
	    " w.objid, p.classid::bigint - $2::bigint, p.objid"
	    " FROM pg_locks w"
	    " JOIN pg_locks p ON p.pid = w.pid AND p.locktype = 'advisory' AND p.granted"
	    "  AND p.objsubid = 2 AND p.classid::bigint BETWEEN $2::bigint + 1 AND $2::bigint + 4"
	    " LEFT JOIN pg_stat_activity a ON a.pid = w.pid"
	    " WHERE w.locktype = 'advisory' AND NOT w.granted AND w.objsubid = 2"
	    "  AND w.classid = $1::oid ORDER BY w.objid", 2, params);
	if (res == NULL)
		return -1;
	*n = (size_t)PQntuples(res);
	*out = idem_ereallocarray(NULL, *n + 1, sizeof(**out));
	for (i = 0; i < (int)*n; i++) {
		struct idem_failpoint_waiter *w = &(*out)[i];

		read_session(res, i, &w->session);
		w->slot = atoi(PQgetvalue(res, i, 3));
		w->step = atoi(PQgetvalue(res, i, 4));
		w->armed = atoi(PQgetvalue(res, i, 5));
	}
	PQclear(res);
	return 0;
}

int
idem_failpoint_delivery(struct idem_failpoint *fp, const char *business_key, int backend_pid,
			const int *worker_sessions, size_t nsessions,
			struct idem_failpoint_delivery *out, struct idem_error *err)
{
	const char *params[1] = { business_key };
	PGresult *res;
	int i, chosen = -1, of_worker = -1;
	size_t j;

	out->msg_id = out->job_id = NULL;
	out->attempt = 0;
	/* the deliveries of messages with the key, newest first: msg_id,
	 * job_id, attempt, backend_pid */
	res = idem_queue_exec(fp->q, fp->conn[0], "deliveries-of-key",
	    "finding the held session's delivery", 1, NULL, params, err);
	if (res == NULL)
		return -1;
	for (i = 0; i < PQntuples(res) && chosen < 0; i++) {
		int pid = atoi(PQgetvalue(res, i, 3));

		if (pid == backend_pid)
			chosen = i;
		for (j = 0; j < nsessions && of_worker < 0; j++)
			if (worker_sessions[j] == pid)
				of_worker = i;
	}
	if (chosen < 0)
		chosen = of_worker >= 0 ? of_worker : PQntuples(res) > 0 ? 0 : -1;
	if (chosen >= 0) {
		out->msg_id = idem_estrdup(PQgetvalue(res, chosen, 0));
		out->job_id = idem_estrdup(PQgetvalue(res, chosen, 1));
		out->attempt = strtoll(PQgetvalue(res, chosen, 2), NULL, 10);
	}
	PQclear(res);
	return 0;
}

int
idem_failpoint_ended(struct idem_failpoint *fp, const char *msg_id, int backend_pid,
		     struct idem_error *err)
{
	char pid[16];
	const char *params[2] = { msg_id, pid };

	snprintf(pid, sizeof(pid), "%d", backend_pid);
	return (int)exec_number(fp->conn[0], "watching a race",
	    "SELECT (EXISTS (SELECT FROM idem_run.ack WHERE msg_id = $1)"
	    " OR NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $2::integer))::integer",
	    2, params, err);
}

/*
 * The gate of a slot goes from the connection that holds it to the other:
 * the other asks for it first, and is seen waiting, queued behind the held
 * session; then the holder lets go. The held session, first in the queue,
 * gets the gate and lets it go at once; the other connection gets it next,
 * and any session that came meanwhile queued behind it. So exactly the
 * sessions held at that moment pass.
 */
int
idem_failpoint_pass(struct idem_failpoint *fp, int slot, struct idem_error *err)
{
	int from = fp->owner[slot], to = !from, tries;
	char gate[16], slot_text[16], to_pid[16];
	const char *params[3] = { gate, slot_text, to_pid };
	PGresult *res;
	long long queued = 0;

	if (slot < 0 || slot > IDEM_FAILPOINT_SLOTS)
		return idem_error_set(err, IDEM_EXIT_ENV, "passing slot %d: no such slot", slot);
	snprintf(gate, sizeof(gate), "%d", IDEM_FAILPOINT_CLASS_GATE);
	snprintf(slot_text, sizeof(slot_text), "%d", slot);
	snprintf(to_pid, sizeof(to_pid), "%d", fp->conn_pid[to]);
	if (!PQsendQueryParams(fp->conn[to], "SELECT pg_advisory_lock($1::integer, $2::integer)",
	    2, NULL, params, NULL, NULL, 0))
		return idem_error_set(err, IDEM_EXIT_ENV, "passing a kill point: %s",
		    PQerrorMessage(fp->conn[to]));
	for (tries = 0; tries < 5000 && queued == 0; tries++) {
		if (tries > 0)
			usleep(1000);
		queued = exec_number(fp->conn[from], "passing a kill point",
		    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
		    " AND classid = $1::oid AND objid = $2::oid AND objsubid = 2 AND pid = $3::integer",
		    3, params, err);
		if (queued < 0)
			break;
	}
	if (queued > 0 && exec_ok(fp->conn[from], "passing a kill point",
	    "SELECT pg_advisory_unlock($1::integer, $2::integer)", 2, params, err) == 0)
		fp->owner[slot] = (unsigned char)to;
	else if (queued == 0)
		idem_error_set(err, IDEM_EXIT_ENV, "passing a kill point: the gate of slot %d was "
		    "not asked for in 5 seconds", slot);
	/* the answer comes once the gate is held again (or, after a failure
	 * above, never: the connection is then of no more use) */
	while ((res = PQgetResult(fp->conn[to])) != NULL) {
		if (PQresultStatus(res) != PGRES_TUPLES_OK && fp->owner[slot] == to) {
			char msg[512];

			idem_error_set(err, IDEM_EXIT_ENV, "passing a kill point: %s",
			    idem_pg_message(fp->conn[to], res, msg, sizeof(msg)));
			fp->owner[slot] = (unsigned char)from;
			queued = 0;
		}
		PQclear(res);
	}
	return fp->owner[slot] == to && queued > 0 ? 0 : -1;
}

int
idem_failpoint_terminate(struct idem_failpoint *fp, int backend_pid, struct idem_error *err)
{
	char pid[16];
	const char *params[1] = { pid };
	long long gone;

	snprintf(pid, sizeof(pid), "%d", backend_pid);
	/* waits until the server process has exited, its transaction rolled back */
	gone = exec_number(fp->conn[0], "terminating a held session",
	    "SELECT (pg_terminate_backend($1::integer, 10000)"
	    " OR NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1::integer))::integer",
	    1, params, err);
	if (gone < 0)
		return -1;
	if (gone == 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "terminating a held session: server process "
		    "%d still there after 10 seconds", backend_pid);
	return 0;
}

int
idem_failpoint_terminate_all(struct idem_failpoint *fp, struct idem_error *err)
{
	struct idem_failpoint_waiter *w = NULL;
	size_t n = 0, i;
	int rc = 0;

	if (idem_failpoint_waiters(fp, &w, &n, err) < 0)
		return -1;
	for (i = 0; i < n && rc == 0; i++)
		rc = idem_failpoint_terminate(fp, w[i].session.backend_pid, err);
	free(w);
	return rc;
}

static long long
unacked(struct idem_failpoint *fp, struct idem_error *err)
{
	const char *params[1] = { fp->msg_ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	PGresult *res = idem_queue_exec(fp->q, fp->conn[0], "unacked", "watching the queue", 1,
	    types, params, err);
	long long n;

	if (res == NULL)
		return -1;
	n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return n;
}

int
idem_failpoint_rescue(struct idem_failpoint *fp, long long visibility_timeout_ms,
		      struct idem_error *err)
{
	char vt[32];
	const char *params[1] = { vt };
	const Oid types[1] = { IDEM_OID_INT8 };
	PGresult *res;
	int n;

	if (!idem_queue_has(fp->q, "rescue"))
		return 0;
	snprintf(vt, sizeof(vt), "%lld", visibility_timeout_ms);
	if ((res = idem_queue_exec(fp->q, fp->conn[0], "rescue", "rescuing the jobs of killed "
	    "attempts", 1, types, params, err)) == NULL)
		return -1;
	n = PQntuples(res);
	PQclear(res);
	return n;
}

/*
 * The committed acks of the run's queue, in time O(acks since the last
 * count): the rows of transactions below the snapshot's xmin are final
 * (those transactions have ended, and an ack row is never removed), so
 * they are added up once; the rows at or above it are counted again each
 * time until the horizon passes them. A long transaction holds the horizon
 * back and only makes the count slower.
 */
static long long
acks(struct idem_failpoint *fp, struct idem_error *err)
{
	const char *params[1] = { fp->acks_horizon };
	PGresult *res = idem_pg_exec(fp->conn[0], "counting acks", err,
	    "SELECT s.xmin::text, count(a.xid) FILTER (WHERE a.xid < s.xmin),"
	    " count(a.xid) FILTER (WHERE a.xid >= s.xmin)"
	    " FROM (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin) s"
	    " LEFT JOIN idem_run.ack a ON a.xid >= $1::xid8 GROUP BY s.xmin", 1, params);
	long long recent;

	if (res == NULL)
		return -1;
	if (PQntuples(res) != 1 || PQgetlength(res, 0, 0) >= (int)sizeof(fp->acks_horizon)) {
		PQclear(res);
		return idem_error_set(err, IDEM_EXIT_ENV, "counting acks: no value");
	}
	fp->acks_ended += strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	recent = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
	memcpy(fp->acks_horizon, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0) + 1);
	PQclear(res);
	return fp->acks_ended + recent;
}

int
idem_failpoint_watch_acks(struct idem_failpoint *fp, const char *msg_ids, struct idem_error *err)
{
	free(fp->msg_ids);
	fp->msg_ids = idem_estrdup(msg_ids);
	if ((fp->acks_then = acks(fp, err)) < 0 || (fp->unacked = unacked(fp, err)) < 0)
		return -1;
	return 0;
}

int
idem_failpoint_all_acked(struct idem_failpoint *fp, struct idem_error *err)
{
	long long now = acks(fp, err);

	if (now < 0)
		return -1;
	if (now - fp->acks_then < fp->unacked)
		return 0;
	if ((fp->unacked = unacked(fp, err)) < 0)
		return -1;
	fp->acks_then = now;
	return fp->unacked == 0;
}

/* The ledger's committed writes by transaction and business key, in the
 * columns of idem_failpoint_grouped_ledger's query; a row's xmin is the
 * writing (sub)transaction, whose commit time is the effect's. */
static const char group_sql[] =
    "CREATE UNLOGGED TABLE idem_run.written AS\n"
    "SELECT xid::text AS xid, business_key, min(backend_pid) AS backend_pid,\n"
    " min((extract(epoch FROM written_at) * 1000000)::bigint) AS first_write,\n"
    " max(coalesce((extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::bigint, 0))"
    " AS last_commit,\n"
    " count(*) FILTER (WHERE operation <> 'UPDATE') AS inserts,\n"
    " count(*) FILTER (WHERE operation = 'UPDATE') AS updates\n"
    "FROM idem_run.ledger WHERE business_key IS NOT NULL GROUP BY xid, business_key";

int
idem_failpoint_group_ledger(struct idem_failpoint *fp, struct idem_error *err)
{
	if (!fp->ledger || fp->grouping != 0)
		return 0;
	/* 100,000 groups are sorted or hashed in memory, not on disk */
	if (exec_ok(fp->conn[0], "grouping the ledger", "SET work_mem = '64MB'", 0, NULL, err) < 0)
		return -1;
	if (!PQsendQuery(fp->conn[0], group_sql))
		return idem_error_set(err, IDEM_EXIT_ENV, "grouping the ledger: %s",
		    PQerrorMessage(fp->conn[0]));
	fp->grouping = 1;
	return 0;
}

/* Reads what grouping the ledger returned, if it is under way. */
static int
grouped(struct idem_failpoint *fp, struct idem_error *err)
{
	PGresult *res;
	int rc = 0;

	if (fp->grouping != 1)
		return 0;
	fp->grouping = 2;
	while ((res = PQgetResult(fp->conn[0])) != NULL) {
		if (rc == 0 && PQresultStatus(res) != PGRES_COMMAND_OK) {
			char msg[768];

			rc = idem_error_set(err, IDEM_EXIT_ENV, "grouping the ledger: %s",
			    idem_pg_message(fp->conn[0], res, msg, sizeof(msg)));
		}
		PQclear(res);
	}
	return rc;
}

int
idem_failpoint_grouped_ledger(struct idem_failpoint *fp, const char **sql, struct idem_error *err)
{
	*sql = NULL;
	if (!fp->ledger)
		return 0;
	if (idem_failpoint_group_ledger(fp, err) < 0 || grouped(fp, err) < 0)
		return -1;
	*sql = "SELECT xid, business_key, backend_pid, first_write, last_commit, inserts, updates"
	    " FROM idem_run.written";
	return 0;
}

int
idem_failpoint_remove(struct idem_failpoint *fp, struct idem_error *err)
{
	int rc;

	/* a held session whose client is gone would commit once let go */
	rc = grouped(fp, err);
	if (rc == 0)
		rc = idem_failpoint_terminate_all(fp, err);
	if (rc == 0)
		rc = exec_ok(fp->conn[0], "removing the kill points", "SET lock_timeout = '10s'", 0,
		    NULL, err);
	if (rc == 0)
		rc = exec_ok(fp->conn[0], "removing the kill points", "SET client_min_messages = warning",
		    0, NULL, err);
	if (rc == 0)
		rc = exec_ok(fp->conn[0], "removing the kill points",
		    "DROP SCHEMA IF EXISTS idem_run CASCADE", 0, NULL, err);
	close_all(fp);
	return rc;
}
