/* lease.c: the clock of the run (lease.h) */
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "database.h"
#include "external.h"
#include "lease.h"
#include "stall.h"
#include "text.h"
#include "tsv.h"

/* A lease kill-at ended: a lease row. */
struct ended {
	long long at;
	char *msg_id, *job_id;
	long long attempt;
	const char *why;
};

/* A killed delivery whose lease ends once its worker is gone (msg_id
 * NULL: not found), and the vendor's window that passes then, or 0. */
struct killed {
	int worker;
	char *msg_id, *job_id;
	long long attempt, forget_ms;
};

/* A forced duplicate's copy, held back until its original is acked. */
struct copy {
	const char *msg_id, *original, *job_id;
	long long copy;
	int held;
};

static struct {
	struct idem_text_array leased;	/* the messages whose leases the plan held */
	size_t *held;			/* those it holds still: indexes in planned */
	size_t nheld_leases, behind;	/* and the faults behind at the last look */
	struct ended *ended;
	size_t nended;
	struct killed *killed;
	size_t nkilled;
	struct copy *copies;
	size_t ncopies, nheld;
} l;

/* The original of a copy: the message of copy 0 of its job. */
static const char *
original_of(const struct idem_plan_msg *m)
{
	size_t i;

	for (i = run.plan.jobs[m->job].first_msg; i != IDEM_MAP_NONE; i = run.plan.planned[i].next)
		if (run.plan.planned[i].copy == 0)
			return run.plan.planned[i].msg_id;
	return NULL;
}

/* The copies of a duplicate-publish scenario's jobs; a raced key's copy
 * is the race's second delivery, and goes at once. */
static void
choose_copies(void)
{
	size_t i;

	for (i = 0; i < run.plan.nplanned; i++) {
		const struct idem_plan_msg *m = &run.plan.planned[i];
		const struct idem_plan_job *job = &run.plan.jobs[m->job];
		const char *original = original_of(m);

		if (m->copy == 0 || original == NULL || job->scenario < 0 ||
		    strcmp(run.plan.scenario_faults[job->scenario], "duplicate-publish") != 0 ||
		    idem_plan_race(&run.plan, job->business_key) != NULL)
			continue;
		l.copies = idem_ereallocarray(l.copies, l.ncopies + 1, sizeof(*l.copies));
		l.copies[l.ncopies++] = (struct copy){ m->msg_id, original, job->id, m->copy, 0 };
	}
}

static void
exec_ids(const char *sql, const char *section, const char *what, const char *ids)
{
	const char *params[1] = { ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	struct idem_error err;
	PGresult *res;

	if (sql != NULL)
		res = idem_pg_exec(run.conn, what, &err, sql, 1, params);
	else
		res = idem_queue_exec(&run.q, run.conn, section, what, 1, types, params, &err);
	if (res == NULL)
		idem_die_error(&err);
	PQclear(res);
}

/* Whether kill-at may hold an attempt of a job: a kill point, a stall or
 * a race of its key not behind it yet. */
static int
may_hold(const struct idem_plan_job *job)
{
	const struct idem_plan_race *race = idem_plan_race(&run.plan, job->business_key);
	size_t n;

	for (n = idem_map_get(&run.plan.kill_index, job->id); n != IDEM_MAP_NONE;
	     n = run.plan.kills[n].next)
		if (!run.kills[n].fired)
			return 1;
	if (race != NULL && !run.races[race - run.plan.races].done)
		return 1;
	return !stall_over(job->id);
}

/* How many kill points, races and stalls are behind the run: when it
 * grows, some leases may go back. */
static size_t
behind(void)
{
	size_t n = 0, i;

	for (i = 0; i < run.plan.nkills; i++)
		n += run.kills[i].fired != 0;
	for (i = 0; i < run.plan.nraces; i++)
		n += run.races[i].done != 0;
	return n + stalls_over();
}

void
leases_install(void)
{
	size_t i;

	for (i = 0; i < run.plan.nplanned; i++) {
		if (!may_hold(&run.plan.jobs[run.plan.planned[i].job]))
			continue;
		idem_text_array_add(&l.leased, run.plan.planned[i].msg_id);
		l.held = idem_ereallocarray(l.held, l.nheld_leases + 1, sizeof(*l.held));
		l.held[l.nheld_leases++] = i;
	}
	if (l.leased.n > 0)
		exec_ids("INSERT INTO idem_run.leased SELECT unnest($1::text[]) ON CONFLICT DO NOTHING",
		    NULL, "holding the plan's leases", l.leased.text);
	choose_copies();
}

/* The messages of the jobs whose kill points, stalls and races are all
 * behind them go back to the queue's own leases, from their next
 * delivery on: an attempt that ends without its ack is then delivered
 * again as the queue would. */
static void
give_back(void)
{
	struct idem_text_array a = { 0 };
	char *ids;
	size_t i;

	for (i = 0; i < l.nheld_leases; i++) {
		const struct idem_plan_msg *m = &run.plan.planned[l.held[i]];

		if (may_hold(&run.plan.jobs[m->job]))
			continue;
		idem_text_array_add(&a, m->msg_id);
		l.held[i--] = l.held[--l.nheld_leases];
	}
	ids = idem_text_array_take(&a);
	if (strcmp(ids, "{}") != 0)
		exec_ids("UPDATE idem_run.leased SET held = false WHERE msg_id = ANY ($1::text[])",
		    NULL, "giving leases back to the queue", ids);
	free(ids);
}

/* The messages of the copies held, or not held, as an array's text. */
static char *
copies_text(int held, int originals)
{
	struct idem_text_array a = { 0 };
	size_t i;

	for (i = 0; i < l.ncopies; i++)
		if (l.copies[i].held == held)
			idem_text_array_add(&a, originals ? l.copies[i].original : l.copies[i].msg_id);
	return idem_text_array_take(&a);
}

void
leases_hold_copies(void)
{
	char *ids;
	size_t i;

	if (l.ncopies == l.nheld)
		return;
	ids = copies_text(0, 0);
	exec_ids(NULL, "hold-back", "holding the copies back until their originals' acks", ids);
	free(ids);
	for (i = 0; i < l.ncopies; i++)
		l.copies[i].held = 1;
	l.nheld = l.ncopies;
}

int
leases_copies_held(void)
{
	return l.nheld > 0;
}

/* Lets go the copies of an acked original. */
static void
let_go(const char *original)
{
	struct idem_text_array a = { 0 };
	char note[256], *ids;
	size_t i;

	for (i = 0; i < l.ncopies; i++) {
		struct copy *c = &l.copies[i];

		if (!c->held || strcmp(c->original, original) != 0)
			continue;
		idem_text_array_add(&a, c->msg_id);
		c->held = 0;
		l.nheld--;
		snprintf(note, sizeof(note), "kill-at: copy %lld of job %.100s let go: its original "
		    "was acked", c->copy, c->job_id);
		record_log(-1, 0, note, strlen(note));
	}
	ids = idem_text_array_take(&a);
	exec_ids(NULL, "let-go", "letting a copy go after its original's ack", ids);
	free(ids);
}

void
leases_watch(void)
{
	const char *params[1];
	struct idem_error err;
	PGresult *res;
	char *ids;
	int i;

	if (l.nheld_leases > 0 && behind() != l.behind) {
		l.behind = behind();
		give_back();
	}
	if (l.nheld == 0)
		return;
	params[0] = ids = copies_text(1, 1);
	res = idem_pg_exec(run.conn, "watching the originals of the copies", &err,
	    "SELECT DISTINCT msg_id FROM idem_run.ack WHERE msg_id = ANY ($1::text[])", 1, params);
	free(ids);
	if (res == NULL)
		idem_die_error(&err);
	for (i = 0; i < PQntuples(res); i++)
		let_go(PQgetvalue(res, i, 0));
	PQclear(res);
}

/* Ends a lease; its row says at_us, or when it ended when 0. */
static int
expire(const char *msg_id, const char *job_id, long long attempt, const char *why, long long at_us)
{
	char *ids = idem_queue_text_array((char *const *)&msg_id, 1);
	const char *params[1] = { ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	struct idem_error err;
	PGresult *res;
	int n;

	if (!idem_queue_has(&run.q, "expire"))
		idem_die(IDEM_EXIT_ENV, "ending the lease of message %s: the %s adapter has no expire "
		    "section (idem-sandbox(1), QUEUE ADAPTERS)", msg_id, run.q.kind);
	res = idem_queue_exec(&run.q, run.conn, "expire", "ending a lease", 1, types, params, &err);
	free(ids);
	if (res == NULL)
		idem_die_error(&err);
	n = PQntuples(res);
	PQclear(res);
	/* the queue's own expiry of a lease that ran out, where it has one */
	if (n > 0 && idem_failpoint_rescue(run.fp, run.plan.visibility_timeout_ms, &err) < 0)
		idem_die_error(&err);
	if (n > 0) {
		l.ended = idem_ereallocarray(l.ended, l.nended + 1, sizeof(*l.ended));
		l.ended[l.nended++] = (struct ended){ at_us ? at_us : db_now(), idem_estrdup(msg_id),
		    idem_estrdup(job_id), attempt, why };
	}
	return n > 0;
}

int
lease_expire(const char *msg_id, const char *job_id, long long attempt, const char *why)
{
	return expire(msg_id, job_id, attempt, why, 0);
}

void
lease_killed(int worker, pid_t pid, const char *msg_id, const char *job_id, long long attempt,
	     long long forget_ms)
{
	const struct idem_plan_job *job = idem_plan_job(&run.plan, job_id);
	struct idem_failpoint_delivery d = { 0 };
	struct idem_error err;
	size_t nsame = 0;
	int *same;

	if (msg_id == NULL && job != NULL) {
		database_watch_sessions();
		same = idem_peer_backends(&run.sessions, worker, &nsame);
		if (idem_failpoint_delivery(run.fp, job->business_key, -1, same, nsame, &d, &err) < 0)
			idem_die_error(&err);
		free(same);
		msg_id = d.msg_id;
	}
	if (msg_id != NULL || forget_ms > 0) {
		l.killed = idem_ereallocarray(l.killed, l.nkilled + 1, sizeof(*l.killed));
		l.killed[l.nkilled++] = (struct killed){ worker, msg_id ? idem_estrdup(msg_id) : NULL,
		    idem_estrdup(job_id), attempt, forget_ms };
	}
	free(d.msg_id);
	free(d.job_id);
	/* a process that is none of the workers is not reaped here */
	if (worker < 0)
		leases_worker_gone(-1, 1);
	(void)pid;
}

/* Whether a backend is one of the sessions of a worker's processes. */
static int
backend_of(int backend_pid, int worker)
{
	size_t i;

	for (i = 0; i < run.sessions.n; i++)
		if (run.sessions.s[i].backend_pid == backend_pid && run.sessions.s[i].worker == worker)
			return 1;
	return 0;
}

/*
 * The deliveries of the plan's messages whose leases are held still: the
 * last of each message, not acked, taken by a session of a worker (any
 * process for -1). Each is ended with why, or only told as a lease row
 * when expire is 0.
 */
static void
end_held(int worker, const char *why, int expire)
{
	char *sql = idem_queue_sql(&run.q, run.conn, "deliveries");
	const char *params[1] = { l.leased.text };
	struct idem_error err;
	PGresult *res;
	int i;

	if (sql == NULL || l.leased.n == 0) {
		free(sql);
		return;
	}
	/* msg_id, job_id, business_key, attempt, delivered_at, backend_pid,
	 * acked_at; in the order of the deliveries */
	res = idem_pg_exec(run.conn, "reading the deliveries of the plan's messages", &err, sql, 1,
	    params);
	free(sql);
	if (res == NULL)
		idem_die_error(&err);
	for (i = 0; i < PQntuples(res); i++) {
		const char *msg = PQgetvalue(res, i, 0);
		int later = 0, j;

		for (j = i + 1; j < PQntuples(res) && !later; j++)
			later = strcmp(PQgetvalue(res, j, 0), msg) == 0;
		if (later || !PQgetisnull(res, i, 6) ||
		    (worker >= 0 && !backend_of(atoi(PQgetvalue(res, i, 5)), worker)))
			continue;
		if (expire)
			lease_expire(msg, PQgetvalue(res, i, 1), strtoll(PQgetvalue(res, i, 3), NULL, 10),
			    why);
		else {
			l.ended = idem_ereallocarray(l.ended, l.nended + 1, sizeof(*l.ended));
			l.ended[l.nended++] = (struct ended){ db_now(), idem_estrdup(msg),
			    idem_estrdup(PQgetvalue(res, i, 1)),
			    strtoll(PQgetvalue(res, i, 3), NULL, 10), why };
		}
	}
	PQclear(res);
}

void
leases_worker_gone(int worker, int killed)
{
	size_t i;

	for (i = 0; i < l.nkilled; i++) {
		struct killed *k = &l.killed[i];
		const struct idem_plan_job *job;
		long long at = 0;

		if (k->worker != worker)
			continue;
		/* forgotten before the queue may deliver the job again, at the
		 * time its lease ends */
		if (k->forget_ms > 0 && (job = idem_plan_job(&run.plan, k->job_id)) != NULL)
			external_forget(job->business_key, k->forget_ms, at = db_now());
		if (k->msg_id != NULL)
			expire(k->msg_id, k->job_id, k->attempt, "kill", at);
		free(k->msg_id);
		free(k->job_id);
		l.killed[i--] = l.killed[--l.nkilled];
	}
	if (!killed && !run.stopping && worker >= 0)
		end_held(worker, "exit", 1);
}

void
leases_bound(void)
{
	end_held(-1, "bound", 0);
}

int
leases_write(FILE *out)
{
	char at[32], attempt[24];
	size_t i;

	for (i = 0; i < l.nended; i++) {
		const char *row[5] = { at, l.ended[i].msg_id, l.ended[i].job_id, attempt,
		    l.ended[i].why };

		idem_format_time(l.ended[i].at, at);
		snprintf(attempt, sizeof(attempt), "%lld", l.ended[i].attempt);
		if (idem_tsv_write_row(out, "lease", row, 5) < 0)
			return -1;
	}
	return 0;
}

void
leases_free(void)
{
	size_t i;

	for (i = 0; i < l.nended; i++) {
		free(l.ended[i].msg_id);
		free(l.ended[i].job_id);
	}
	for (i = 0; i < l.nkilled; i++) {
		free(l.killed[i].msg_id);
		free(l.killed[i].job_id);
	}
	free(l.ended);
	free(l.killed);
	free(l.copies);
	free(l.leased.text);
	free(l.held);
}
