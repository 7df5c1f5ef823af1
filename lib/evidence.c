#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "evidence.h"
#include "map.h"
#include "pg.h"
#include "tsv.h"

/* Values under a key, in the order added. */
struct lists {
	struct idem_map index;
	struct list {
		size_t *v, n;
	} *l;
	size_t n;
};

struct delivery {
	char *msg_id, *job_id, *key;
	long long attempt, delivered_at, acked_at;
	int backend_pid;
	pid_t pid;
	/* from the ledger: the committed transactions attributed to it */
	long long inserts, updates, first_write, last_commit;
};

/* The writes of one transaction to one business key. */
struct writes {
	const char *key;
	int backend_pid;
	long long first_write, last_commit, inserts, updates;
};

struct backend {
	int pid;
	long long start;
	int worker;
	pid_t os_pid;
};

struct kill {
	char *scenario, *job_id, *step, *msg_id;
	long long attempt, killed_at;
	pid_t pid;
	const char *observed;
};

struct idem_evidence {
	struct delivery *d;
	size_t nd;
	struct lists by_key;		/* business key: deliveries */
	int ledger;
	struct writes group;		/* the transaction whose writes are being read */
	char *group_xid;
	struct backend *b;
	size_t nb;
	struct lists backends;		/* backend pid: sessions seen with it */
	struct lists consumers;		/* job and attempt: processes of consumed steps */
	char **br;			/* the branches of the lines */
	size_t nbr;
	struct lists branches;		/* job and attempt: branch lines */
	struct kill *k;
	size_t nk;
	struct lists kills;		/* job and attempt: kills */
	/* the step and log rows, written as they come: a run's memory does
	 * not grow with them */
	FILE *steps, *lines;
	int spool_errno;		/* the first error writing them, or 0 */
};

/* Room for one more after n, in an array that doubles: a power of two
 * needs room. */
static void *
grow(void *v, size_t n, size_t size)
{
	return (n & (n - 1)) == 0 ? idem_ereallocarray(v, n ? n * 2 : 1, size) : v;
}

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
	l->v = grow(l->v, l->n, sizeof(*l->v));
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

struct idem_evidence *
idem_evidence_new(void)
{
	struct idem_evidence *ev = idem_emalloc(sizeof(*ev));

	memset(ev, 0, sizeof(*ev));
	lists_init(&ev->by_key);
	lists_init(&ev->backends);
	lists_init(&ev->consumers);
	lists_init(&ev->branches);
	lists_init(&ev->kills);
	if ((ev->steps = tmpfile()) == NULL || (ev->lines = tmpfile()) == NULL)
		ev->spool_errno = errno;
	return ev;
}

void
idem_evidence_free(struct idem_evidence *ev)
{
	size_t i;

	if (ev == NULL)
		return;
	for (i = 0; i < ev->nd; i++) {
		free(ev->d[i].msg_id);
		free(ev->d[i].job_id);
		free(ev->d[i].key);
	}
	free(ev->d);
	idem_free_list(ev->br, ev->nbr);
	for (i = 0; i < ev->nk; i++) {
		free(ev->k[i].scenario);
		free(ev->k[i].job_id);
		free(ev->k[i].step);
		free(ev->k[i].msg_id);
	}
	free(ev->k);
	if (ev->steps != NULL)
		fclose(ev->steps);
	if (ev->lines != NULL)
		fclose(ev->lines);
	free(ev->b);
	free(ev->group_xid);
	free((char *)ev->group.key);
	lists_free(&ev->by_key);
	lists_free(&ev->backends);
	lists_free(&ev->consumers);
	lists_free(&ev->branches);
	lists_free(&ev->kills);
	free(ev);
}

void
idem_evidence_delivery(struct idem_evidence *ev, const char *msg_id, const char *job_id,
		       const char *business_key, long long attempt, long long delivered_at_us,
		       int backend_pid, long long acked_at_us)
{
	struct delivery *d;

	ev->d = grow(ev->d, ev->nd, sizeof(*ev->d));
	d = &ev->d[ev->nd];
	memset(d, 0, sizeof(*d));
	d->msg_id = idem_estrdup(msg_id);
	d->job_id = idem_estrdup(job_id);
	d->key = idem_estrdup(business_key);
	d->attempt = attempt;
	d->delivered_at = delivered_at_us;
	d->backend_pid = backend_pid;
	d->acked_at = acked_at_us;
	lists_add(&ev->by_key, business_key, ev->nd);
	ev->nd++;
}

int
idem_evidence_read_deliveries(struct idem_evidence *ev, PGconn *conn, const struct idem_queue *q,
			      const char *msg_ids, struct idem_error *err)
{
	const char *params[1] = { msg_ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	char *sql = idem_queue_sql(q, conn, "deliveries"), msg[768];
	PGresult *res;
	int rc = 0, sent;

	if (sql == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "reading the delivery log: the %s adapter "
		    "has no deliveries section", q->kind), -1;
	/* msg_id, job_id, business_key, attempt, delivered_at, backend_pid,
	 * acked_at (on the last delivery of an acked message), a row at a
	 * time: the log is never in memory twice */
	sent = PQsendQueryParams(conn, sql, 1, types, params, NULL, NULL, 0) && PQsetSingleRowMode(conn);
	free(sql);
	if (!sent)
		return idem_error_set(err, IDEM_EXIT_ENV, "reading the delivery log: %s",
		    idem_pg_message(conn, NULL, msg, sizeof(msg))), -1;
	while ((res = PQgetResult(conn)) != NULL) {
		if (PQresultStatus(res) == PGRES_SINGLE_TUPLE)
			idem_evidence_delivery(ev, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
			    PQgetvalue(res, 0, 2), strtoll(PQgetvalue(res, 0, 3), NULL, 10),
			    strtoll(PQgetvalue(res, 0, 4), NULL, 10), atoi(PQgetvalue(res, 0, 5)),
			    PQgetisnull(res, 0, 6) ? 0 : strtoll(PQgetvalue(res, 0, 6), NULL, 10));
		else if (PQresultStatus(res) != PGRES_TUPLES_OK && rc == 0) {
			idem_error_set(err, IDEM_EXIT_ENV, "reading the delivery log: %s",
			    idem_pg_message(conn, res, msg, sizeof(msg)));
			rc = -1;
		}
		PQclear(res);
	}
	return rc;
}

void
idem_evidence_backend(struct idem_evidence *ev, int backend_pid, long long backend_start_us,
		      int worker, pid_t pid)
{
	char key[16];

	ev->b = idem_ereallocarray(ev->b, ev->nb + 1, sizeof(*ev->b));
	ev->b[ev->nb] = (struct backend){ backend_pid, backend_start_us, worker, pid };
	snprintf(key, sizeof(key), "%d", backend_pid);
	lists_add(&ev->backends, key, ev->nb++);
}

/* The session that had backend_pid at time at: the one started last
 * before it. NULL when the controller never saw it. */
static const struct backend *
backend_at(const struct idem_evidence *ev, int backend_pid, long long at)
{
	const struct backend *best = NULL;
	const struct list *l;
	char key[16];
	size_t i;

	snprintf(key, sizeof(key), "%d", backend_pid);
	l = lists_get(&ev->backends, key);
	for (i = 0; i < l->n; i++) {
		const struct backend *b = &ev->b[l->v[i]];

		if (b->start <= at && (best == NULL || b->start > best->start))
			best = b;
	}
	return best;
}

static int
worker_at(const struct idem_evidence *ev, int backend_pid, long long at)
{
	const struct backend *b = backend_at(ev, backend_pid, at);

	return b ? b->worker : -1;
}

/*
 * The delivery a transaction's writes belong to: among the deliveries of
 * their business key taken before the first write, the last one taken by
 * the same session; else by a session of the same worker; else the last.
 */
static struct delivery *
attribute(struct idem_evidence *ev, const struct writes *w)
{
	const struct list *l = lists_get(&ev->by_key, w->key);
	struct delivery *same_session = NULL, *same_worker = NULL, *any = NULL;
	int worker = worker_at(ev, w->backend_pid, w->first_write);
	size_t i;

	for (i = 0; i < l->n; i++) {
		struct delivery *d = &ev->d[l->v[i]];

		if (d->delivered_at > w->first_write)
			break;
		any = d;
		if (d->backend_pid == w->backend_pid)
			same_session = d;
		if (worker >= 0 && worker_at(ev, d->backend_pid, d->delivered_at) == worker)
			same_worker = d;
	}
	return same_session ? same_session : same_worker ? same_worker : any;
}

/* Adds the writes of the transaction that ev->group holds to its delivery. */
static void
attribute_group(struct idem_evidence *ev)
{
	const struct writes *g = &ev->group;
	struct delivery *d;

	if (g->key == NULL)
		return;
	if ((d = attribute(ev, g)) != NULL) {
		d->inserts += g->inserts;
		d->updates += g->updates;
		if (d->first_write == 0 || g->first_write < d->first_write)
			d->first_write = g->first_write;
		if (g->last_commit > d->last_commit)
			d->last_commit = g->last_commit;
	}
	free(ev->group_xid);
	free((char *)g->key);
	memset(&ev->group, 0, sizeof(ev->group));
	ev->group_xid = NULL;
}

void
idem_evidence_ledger(struct idem_evidence *ev, const struct idem_failpoint_write *writes, size_t n)
{
	size_t i;

	ev->ledger = 1;
	for (i = 0; i < n; i++) {
		const struct idem_failpoint_write *w = &writes[i];

		if (w->business_key == NULL)
			continue;
		if (ev->group.key == NULL || strcmp(ev->group_xid, w->xid) != 0 ||
		    strcmp(ev->group.key, w->business_key) != 0) {
			attribute_group(ev);
			ev->group = (struct writes){ idem_estrdup(w->business_key), w->backend_pid,
			    w->written_at_us, w->committed_at_us, 0, 0 };
			ev->group_xid = idem_estrdup(w->xid);
		}
		if (w->update)
			ev->group.updates++;
		else
			ev->group.inserts++;
	}
}

/* Appends a row to a spool; the first failure is kept for
 * idem_evidence_write to report. */
static void
spool_row(struct idem_evidence *ev, FILE *f, const char *kind, const char *const *row, size_t n)
{
	if (ev->spool_errno != 0)
		return;
	if (idem_tsv_write_row(f, kind, row, n) < 0)
		ev->spool_errno = errno ? errno : EIO;
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
	spool_row(ev, ev->steps, "step", row, 8);
	if (strcmp(name, "consumed") == 0 && strcmp(observed, "socket") == 0)
		WITH_ATTEMPT_KEY(key, job_id, attempt, lists_add(&ev->consumers, key, (size_t)pid));
}

void
idem_evidence_log(struct idem_evidence *ev, long long at_us, int worker, pid_t pid,
		  const char *text, size_t len)
{
	char *line = idem_emalloc(len + 1), *b, *j, *a, *m;
	size_t i;

	memcpy(line, text, len);
	line[len] = '\0';
	if (!idem_utf8_valid(line, len))
		for (i = 0; i < len; i++)
			if ((unsigned char)line[i] >= 0x80 || line[i] == '\0')
				line[i] = '?';
	{
		char at[32], w[16], p[16];
		const char *row[4] = { at, w, p, line };

		idem_format_time(at_us, at);
		snprintf(w, sizeof(w), "%d", worker);
		snprintf(p, sizeof(p), "%d", (int)pid);
		spool_row(ev, ev->lines, "log", row, 4);
	}
	b = idem_log_value(line, "branch");
	j = b ? idem_log_value(line, "job") : NULL;
	a = b ? idem_log_value(line, "attempt") : NULL;
	m = b ? idem_log_value(line, "msg_id") : NULL;
	free(line);
	/* a line with its message is that delivery's whatever job it names
	 * (a worker on another library knows the library's id, not the
	 * seed's job); one without, its job's attempt's */
	if (b != NULL && a != NULL && (j != NULL || m != NULL)) {
		char *key;

		if (asprintf(&key, m ? "\037%s\t%s" : "%s\t%s", m ? m : j, a) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		ev->br = grow(ev->br, ev->nbr, sizeof(*ev->br));
		ev->br[ev->nbr] = b;
		lists_add(&ev->branches, key, ev->nbr++);
		free(key);
		b = NULL;
	}
	free(b);
	free(j);
	free(a);
	free(m);
}

void
idem_evidence_print_log(const struct idem_evidence *ev, FILE *out, pid_t pid)
{
	char *line = NULL, *field[5], *p;
	size_t cap = 0, n, len;
	ssize_t got;

	/* the spool's rows: log, time, worker, pid, line */
	if (ev->lines == NULL || fflush(ev->lines) != 0 || fseek(ev->lines, 0, SEEK_SET) != 0)
		return;
	while ((got = getline(&line, &cap, ev->lines)) > 0) {
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
	fseek(ev->lines, 0, SEEK_END);
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
	char buf[65536];
	size_t n;

	if (fflush(spool) != 0 || fseek(spool, 0, SEEK_SET) != 0)
		return -1;
	while ((n = fread(buf, 1, sizeof(buf), spool)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			return -1;
	return ferror(spool) || fseek(spool, 0, SEEK_END) != 0 ? -1 : 0;
}

/* The step, kill and log rows, as they came. */
static int
write_steps_kills_logs(const struct idem_evidence *ev, FILE *out)
{
	char at[32], pid[16], attempt[32];
	const char *row[7];
	size_t i;
	int rc;

	if (ev->spool_errno != 0) {
		errno = ev->spool_errno;
		return -1;
	}
	rc = copy_spool(ev->steps, out);
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
	return rc == 0 ? copy_spool(ev->lines, out) : rc;
}

/* The branches of a delivery: the lines naming its message and attempt,
 * then those naming its job and attempt and no message. */
static void
append_branches(const struct idem_evidence *ev, const char *key, char **out, size_t *len)
{
	const struct list *l = lists_get(&ev->branches, key);
	size_t i;

	for (i = 0; i < l->n; i++) {
		const char *b = ev->br[l->v[i]];
		size_t blen = strlen(b);

		*out = idem_erealloc(*out, *len + blen + 2);
		if (*len)
			(*out)[(*len)++] = ' ';
		memcpy(*out + *len, b, blen + 1);
		*len += blen;
	}
}

static char *
branches_of(const struct idem_evidence *ev, const struct delivery *d, const char *key)
{
	char *out = NULL, *by_msg;
	size_t len = 0;

	if (asprintf(&by_msg, "\037%s\t%lld", d->msg_id, d->attempt) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	append_branches(ev, by_msg, &out, &len);
	append_branches(ev, key, &out, &len);
	free(by_msg);
	return out;
}

/* The kill of a delivery, if it was killed. */
static struct kill *
kill_of(struct idem_evidence *ev, const struct delivery *d, const char *key)
{
	const struct list *l = lists_get(&ev->kills, key);
	size_t i;

	for (i = 0; i < l->n; i++) {
		struct kill *k = &ev->k[l->v[i]];

		if (k->msg_id != NULL ? strcmp(k->msg_id, d->msg_id) == 0 : k->pid == d->pid)
			return k;
	}
	return NULL;
}

static const char *
time_or_null(long long us, char buf[32])
{
	if (us == 0)
		return NULL;
	idem_format_time(us, buf);
	return buf;
}

int
idem_evidence_write(struct idem_evidence *ev, FILE *out)
{
	struct idem_map nth;
	struct kill **killed = idem_ereallocarray(NULL, ev->nd + 1, sizeof(*killed));
	size_t i;
	int rc = write_steps_kills_logs(ev, out);

	attribute_group(ev);
	idem_map_init(&nth);
	for (i = 0; i < ev->nd && rc == 0; i++) {
		struct delivery *d = &ev->d[i];
		char attempt[32], pid[16], consumed[32], committed[32], acked[32], written[32];
		char rows[32], updated[32];
		const char *row[11];
		char *branch = NULL;

		snprintf(attempt, sizeof(attempt), "%lld", d->attempt);
		WITH_ATTEMPT_KEY(key, d->job_id, d->attempt, {
			const struct list *c = lists_get(&ev->consumers, key);
			size_t n = idem_map_get(&nth, key);
			const struct backend *b;

			/* the n-th delivery of a job with an attempt number is the
			 * n-th "consumed" step for them */
			n = n == IDEM_MAP_NONE ? 0 : n + 1;
			idem_map_put(&nth, key, n);
			if (n < c->n)
				d->pid = (pid_t)c->v[n];
			else if ((b = backend_at(ev, d->backend_pid, d->delivered_at)) != NULL)
				d->pid = b->os_pid;
			branch = branches_of(ev, d, key);
			killed[i] = kill_of(ev, d, key);
		});
		snprintf(pid, sizeof(pid), "%d", (int)d->pid);
		snprintf(rows, sizeof(rows), "%lld", d->inserts);
		snprintf(updated, sizeof(updated), "%lld", d->updates);
		row[0] = d->job_id;
		row[1] = d->msg_id;
		row[2] = attempt;
		row[3] = d->pid ? pid : NULL;
		row[4] = time_or_null(d->delivered_at, consumed);
		row[5] = time_or_null(d->last_commit, committed);
		row[6] = time_or_null(d->acked_at, acked);
		row[7] = ev->ledger ? rows : NULL;
		row[8] = branch;
		row[9] = time_or_null(d->first_write, written);
		row[10] = ev->ledger ? updated : NULL;
		rc = idem_tsv_write_row(out, "attempt", row, 11);
		free(branch);
	}
	for (i = 0; i < ev->nd && rc == 0; i++) {
		const struct delivery *d = &ev->d[i], *last;
		const struct list *ds;
		char killed_at[32], acked_at[32], ms[32];
		const char *row[5];
		size_t l;

		if (killed[i] == NULL)
			continue;
		/* the ack of the same message by a later delivery: the last of
		 * its business key's deliveries that is the message's */
		ds = lists_get(&ev->by_key, d->key);
		for (l = ds->n; l-- > 0 && strcmp(ev->d[ds->v[l]].msg_id, d->msg_id) != 0;)
			;
		last = &ev->d[ds->v[l]];
		idem_format_time(killed[i]->killed_at, killed_at);
		row[0] = d->job_id;
		row[1] = d->msg_id;
		row[2] = killed_at;
		row[3] = row[4] = NULL;
		if (last->attempt > d->attempt && last->acked_at != 0) {
			idem_format_time(last->acked_at, acked_at);
			snprintf(ms, sizeof(ms), "%lld", (last->acked_at - killed[i]->killed_at) / 1000);
			row[3] = acked_at;
			row[4] = ms;
		}
		rc = idem_tsv_write_row(out, "recover", row, 5);
	}
	idem_map_free(&nth);
	free(killed);
	return rc;
}
