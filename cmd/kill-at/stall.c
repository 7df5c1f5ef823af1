/* stall.c: the stalls of the run (stall.h) */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "database.h"
#include "lease.h"
#include "stall.h"
#include "text.h"
#include "tsv.h"

/* a stall: its point not reached yet; the first attempt held; released;
 * the redelivered attempt, held after it, released in turn; over */
enum { WAITING, HELD, RELEASED, SECOND, DONE };

struct stall {
	const struct idem_plan_stall *plan;
	int state;
	struct held first;		/* the stalled attempt */
	struct held second;		/* the redelivered attempt, held at until or
					 * at its next step after a blocked release */
	int has_second;
	long long second_attempt;
	char *second_step;
	long long second_at;		/* when the redelivered attempt went on */
	pid_t other;			/* the redelivered attempt's process, while it
					 * waits on the stalled one */
	long long stalled_at, released_at;
	const char *release;		/* acked until blocked bound */
	int armed, until_armed;
};

static struct stall *stalls;
static size_t current;			/* the stall whose job goes now; the next
					 * ones' are held back until it is over */
static int watching;			/* idem_run.watch has its row */

static const char *
key_of(const struct stall *st)
{
	return idem_plan_job(&run.plan, st->plan->job_id)->business_key;
}

void
stalls_arm(void)
{
	size_t i;

	stalls = idem_ereallocarray(NULL, run.plan.nstalls + 1, sizeof(*stalls));
	for (i = 0; i < run.plan.nstalls; i++) {
		struct stall *st = &stalls[i];

		*st = (struct stall){ .plan = &run.plan.stalls[i], .armed = -1, .until_armed = -1 };
		st->armed = database_arm(st->plan->step, key_of(st));
		if (st->plan->until != NULL)
			st->until_armed = database_arm(st->plan->until, key_of(st));
		if (run.vendor != NULL && strcmp(st->plan->step, "external-call") == 0)
			idem_vendor_arm(run.vendor, key_of(st));
	}
}

/* Lets a held attempt go on. */
static void
let_go(struct held *h, const char *job_id, long long attempt, const char *step)
{
	record_step(h->worker, h->pid, step, job_id, attempt, "release", h->observed);
	if (strcmp(h->observed, "database") == 0) {
		database_pass(h->slot);
	} else if (strcmp(h->observed, "vendor") == 0) {
		idem_vendor_release(run.vendor, h->call, 0);
	} else {
		idem_step_go(&run.clients[h->client].peer);
		run.clients[h->client].held = 0;
	}
}

static void
watch_touches(int on)
{
	struct idem_error err;
	PGresult *res;

	if (on == watching)
		return;
	res = idem_pg_exec(run.conn, "watching the end of a stalled attempt", &err, on ?
	    "INSERT INTO idem_run.watch VALUES (clock_timestamp())" : "DELETE FROM idem_run.watch",
	    0, NULL);
	if (res == NULL)
		idem_die_error(&err);
	PQclear(res);
	watching = on;
}

/* The stalled attempt goes on, for why; the redelivered attempt held at
 * until waits until the stalled one has ended. */
static void
release(struct stall *st, const char *why)
{
	st->release = why;
	st->released_at = db_now();
	st->state = RELEASED;
	watch_touches(1);
	let_go(&st->first, st->plan->job_id, st->plan->attempt, st->plan->step);
}

/* The lease of the stalled delivery ends, while the attempt lives. */
static void
stall(struct stall *st, struct held *h)
{
	const struct idem_plan_job *job = idem_plan_job(&run.plan, st->plan->job_id);
	struct idem_failpoint_delivery d = { 0 };
	struct idem_error err;
	size_t nsame = 0;
	int *same;

	st->first = *h;
	st->first.msg_id = NULL;
	if (h->msg_id == NULL) {
		database_watch_sessions();
		same = idem_peer_backends(&run.sessions, h->worker, &nsame);
		if (idem_failpoint_delivery(run.fp, job->business_key, h->backend_pid, same, nsame, &d,
		    &err) < 0)
			idem_die_error(&err);
		free(same);
		st->first.msg_id = d.msg_id;
		free(d.job_id);
	} else {
		st->first.msg_id = idem_estrdup(h->msg_id);
	}
	st->state = HELD;
	st->stalled_at = db_now();
	record_step(h->worker, h->pid, st->plan->step, st->plan->job_id, st->plan->attempt, "hold",
	    h->observed);
	if (st->first.msg_id != NULL)
		lease_expire(st->first.msg_id, st->plan->job_id, st->plan->attempt, "stall");
	/* the redelivered attempt's call is held at until too */
	if (run.vendor != NULL && st->plan->until != NULL &&
	    strcmp(st->plan->until, "external-call") == 0)
		idem_vendor_arm(run.vendor, job->business_key);
}

/* The redelivered attempt, held at step until the stalled one has ended. */
static void
hold_second(struct stall *st, const struct held *h, const char *step, long long attempt)
{
	st->second = *h;
	st->second.msg_id = NULL;
	st->has_second = 1;
	st->second_attempt = attempt;
	st->second_step = idem_estrdup(step);
	record_step(h->worker, h->pid, step, st->plan->job_id, attempt, "hold", h->observed);
}

int
stall_reached(const char *step, const char *job_id, long long attempt, struct held *h)
{
	size_t i;

	for (i = 0; i < run.plan.nstalls; i++) {
		struct stall *st = &stalls[i];

		if (strcmp(st->plan->job_id, job_id) != 0)
			continue;
		if (st->state == WAITING && st->plan->attempt == attempt &&
		    strcmp(st->plan->step, step) == 0) {
			stall(st, h);
			return 1;
		}
		/* a redelivered attempt that waited on the stalled one goes on
		 * from its next step once the stalled one has ended */
		if (st->state == RELEASED && strcmp(st->release, "blocked") == 0 && !st->has_second &&
		    attempt != st->plan->attempt) {
			hold_second(st, h, step, attempt);
			return 1;
		}
		if (st->state == HELD && st->plan->until != NULL && attempt > st->plan->attempt &&
		    strcmp(st->plan->until, step) == 0) {
			hold_second(st, h, step, attempt);
			database_disarm(st->until_armed);
			st->until_armed = -1;
			release(st, "until");
			return 1;
		}
	}
	return 0;
}

/* Whether a stall holds an attempt where observed says, by its session
 * or its call. */
static int
holds(const char *observed, int backend_pid, long call)
{
	size_t i;

	for (i = 0; i < run.plan.nstalls; i++) {
		const struct held *h[2] = { stalls[i].state == HELD ? &stalls[i].first : NULL,
		    stalls[i].has_second ? &stalls[i].second : NULL };
		int j;

		for (j = 0; j < 2; j++)
			if (h[j] != NULL && strcmp(h[j]->observed, observed) == 0 &&
			    (backend_pid > 0 ? h[j]->backend_pid == backend_pid : h[j]->call == call))
				return 1;
	}
	return 0;
}

int
stall_holds_backend(int backend_pid)
{
	return holds("database", backend_pid, 0);
}

int
stall_holds_call(long call)
{
	return holds("vendor", 0, call);
}

/* The stalled attempt has ended: the redelivered one held after it goes,
 * and the stall is over once that one has ended too. */
static void
done(struct stall *st)
{
	size_t i;
	int any = 0;

	if (st->has_second) {
		let_go(&st->second, st->plan->job_id, st->second_attempt, st->second_step);
		st->has_second = 0;
		st->other = st->second.pid;
		st->second_at = db_now();
		st->state = SECOND;
		return;
	}
	st->state = DONE;
	database_disarm(st->armed);
	database_disarm(st->until_armed);
	st->armed = st->until_armed = -1;
	for (i = 0; i < run.plan.nstalls; i++)
		any |= stalls[i].state == RELEASED || stalls[i].state == SECOND;
	if (!any)
		watch_touches(0);
}

void
stall_told_acked(pid_t pid, const char *job_id, long long attempt)
{
	size_t i;

	for (i = 0; i < run.plan.nstalls; i++) {
		struct stall *st = &stalls[i];

		if (strcmp(st->plan->job_id, job_id) != 0)
			continue;
		if ((st->state == RELEASED && st->first.pid == pid && st->plan->attempt == attempt) ||
		    (st->state == SECOND && st->other == pid && st->second_attempt == attempt))
			done(st);
	}
}

/* The database sessions of a process, as an array's text; a session held
 * at a database point is the process's too. */
static char *
backends_of(pid_t pid, int held_backend)
{
	char *text = NULL, number[16];
	size_t len = 0, i;
	FILE *f = open_memstream(&text, &len);

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	fputc('{', f);
	if (held_backend > 0)
		fprintf(f, "%d", held_backend);
	for (i = 0; i < run.sessions.n; i++)
		if (pid > 0 && run.sessions.s[i].pid == pid) {
			snprintf(number, sizeof(number), "%d", run.sessions.s[i].backend_pid);
			fprintf(f, "%s%s", ftell(f) > 1 ? "," : "", number);
		}
	fputc('}', f);
	if (fclose(f) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	return text;
}

static long long
query_number(const char *what, const char *sql, int n, const char *const *params)
{
	struct idem_error err;
	PGresult *res = idem_pg_exec(run.conn, what, &err, sql, n, params);
	long long v;

	if (res == NULL)
		idem_die_error(&err);
	v = PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) :
	    0;
	PQclear(res);
	return v;
}

/* A held stall whose redelivered attempt was acked, or waits on a lock of
 * the stalled one (its server process named in *blocked), goes on. */
static const char *
why_release(struct stall *st, int *blocked)
{
	char *backends;
	const char *params[1];

	params[0] = st->first.msg_id ? st->first.msg_id : "";
	if (query_number("watching a stall", "SELECT count(*) FROM idem_run.ack WHERE msg_id = $1", 1,
	    params) > 0)
		return "acked";
	params[0] = backends = backends_of(st->first.pid, st->first.backend_pid);
	*blocked = (int)query_number("watching a stall", "SELECT min(pid) FROM pg_stat_activity"
	    " WHERE NOT pid = ANY ($1::integer[]) AND pg_blocking_pids(pid) && $1::integer[]", 1,
	    params);
	free(backends);
	return *blocked > 0 ? "blocked" : NULL;
}

/* Whether a process has ended the attempt it was released to finish: its
 * sessions have touched the queue's table since (its ack, or its next
 * fetch) and none is in a transaction; or it is gone. */
static int
ended(pid_t pid, int held_backend, long long since)
{
	char *backends = backends_of(pid, held_backend), at[32];
	const char *params[2] = { backends, at };
	long long n;

	if (pid <= 0 || kill(pid, 0) < 0) {
		free(backends);
		return 1;
	}
	snprintf(at, sizeof(at), "%lld", since);
	n = query_number("watching a stalled attempt end", "SELECT (EXISTS (SELECT FROM idem_run.touch"
	    " WHERE backend_pid = ANY ($1::integer[]) AND at >= to_timestamp($2::float8 / 1e6))"
	    " AND NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = ANY ($1::integer[])"
	    " AND xact_start IS NOT NULL))::integer", 2, params);
	free(backends);
	return n > 0;
}

static pid_t
process_of(int backend_pid)
{
	size_t i;

	for (i = 0; i < run.sessions.n; i++)
		if (run.sessions.s[i].backend_pid == backend_pid)
			return run.sessions.s[i].pid;
	return 0;
}

/* The messages of a stall's job, as an array's text. */
static char *
messages_of(const struct stall *st)
{
	struct idem_text_array a = { 0 };
	size_t i;

	for (i = idem_plan_job(&run.plan, st->plan->job_id)->first_msg; i != IDEM_MAP_NONE;
	     i = run.plan.planned[i].next)
		idem_text_array_add(&a, run.plan.planned[i].msg_id);
	return idem_text_array_take(&a);
}

static void
exec_ids(const char *section, const char *what, const struct stall *st)
{
	char *ids = messages_of(st);
	const char *params[1] = { ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	struct idem_error err;
	PGresult *res = idem_queue_exec(&run.q, run.conn, section, what, 1, types, params, &err);

	free(ids);
	if (res == NULL)
		idem_die_error(&err);
	PQclear(res);
}

void
stalls_hold_back(void)
{
	size_t i;

	for (i = current + 1; i < run.plan.nstalls; i++)
		exec_ids("hold-back", "holding a stall's job back until the one before is over",
		    &stalls[i]);
}

/* The stall whose job went last is over, done or never reached with its
 * job acked: the next one's job goes. */
static void
next_stall(void)
{
	const struct stall *st = &stalls[current];
	char *ids;
	const char *params[1];
	int over = st->state == DONE;

	if (current + 1 >= run.plan.nstalls)
		return;
	if (!over && st->state == WAITING) {
		params[0] = ids = messages_of(st);
		over = query_number("watching a stall", "SELECT count(*) = cardinality($1::text[])"
		    " FROM (SELECT DISTINCT msg_id FROM idem_run.ack WHERE msg_id = ANY ($1::text[])) a",
		    1, params) > 0;
		free(ids);
	}
	if (over)
		exec_ids("let-go", "letting a stall's job go", &stalls[++current]);
}

void
stalls_watch(void)
{
	size_t i;
	int blocked = 0;
	const char *why;

	for (i = 0; i < run.plan.nstalls; i++) {
		struct stall *st = &stalls[i];

		if (st->state == HELD) {
			if ((why = why_release(st, &blocked)) == NULL &&
			    db_now() - st->stalled_at > run.bound_us)
				why = "bound";
			if (why == NULL)
				continue;
			if (blocked > 0)
				st->other = process_of(blocked);
			release(st, why);
		} else if (st->state == RELEASED || st->state == SECOND) {
			if (db_now() - st->released_at > run.bound_us) {
				st->release = "bound";
				st->has_second = 0;
				done(st);
			} else if (st->state == SECOND ? ended(st->other, 0, st->second_at) :
			    ended(st->first.pid, 0, st->released_at) && (st->has_second ||
			    st->other <= 0 || ended(st->other, 0, st->released_at))) {
				done(st);
			}
		}
	}
	if (run.plan.nstalls > 0)
		next_stall();
}

int
stall_over(const char *job_id)
{
	size_t i;

	if (run.plan.nstalls == 0)
		return 1;
	for (i = 0; stalls != NULL && i < run.plan.nstalls; i++)
		if (stalls[i].state != DONE && strcmp(stalls[i].plan->job_id, job_id) == 0)
			return 0;
	if (stalls == NULL)
		for (i = 0; i < run.plan.nstalls; i++)
			if (strcmp(run.plan.stalls[i].job_id, job_id) == 0)
				return 0;
	return 1;
}

size_t
stalls_over(void)
{
	size_t i, n = 0;

	for (i = 0; stalls != NULL && i < run.plan.nstalls; i++)
		n += stalls[i].state == DONE;
	return n;
}

int
stalls_done(void)
{
	size_t i;

	for (i = 0; i < run.plan.nstalls; i++)
		if (stalls[i].state != DONE)
			return 0;
	return 1;
}

void
stalls_end(void)
{
	size_t i;

	for (i = 0; i < run.plan.nstalls; i++) {
		if (stalls[i].state == HELD)
			stalls[i].release = "bound";
		if (stalls[i].state != WAITING) {
			stalls[i].has_second = 0;
			stalls[i].state = DONE;
		}
	}
}

int
stalls_write(FILE *out, int missed)
{
	char attempt[24], pid[24], stalled_at[32], released_at[32];
	size_t i;

	for (i = 0; i < run.plan.nstalls; i++) {
		const struct stall *st = &stalls[i];
		const char *row[9] = { st->plan->scenario, st->plan->job_id, attempt, st->plan->step,
		    pid, stalled_at, st->released_at ? released_at : NULL, st->release,
		    st->first.observed };

		if (missed != (st->state == WAITING))
			continue;
		if (missed) {
			if (idem_evidence_missed(out, "stall", st->plan->scenario, st->plan->job_id,
			    st->plan->attempt, st->plan->step) < 0)
				return -1;
			continue;
		}
		snprintf(attempt, sizeof(attempt), "%lld", st->plan->attempt);
		snprintf(pid, sizeof(pid), "%ld", (long)st->first.pid);
		idem_format_time(st->stalled_at, stalled_at);
		idem_format_time(st->released_at, released_at);
		if (idem_tsv_write_row(out, "stall", row, 9) < 0)
			return -1;
	}
	return 0;
}

void
stalls_free(void)
{
	size_t i;

	for (i = 0; stalls != NULL && i < run.plan.nstalls; i++) {
		free(stalls[i].first.msg_id);
		free(stalls[i].second_step);
	}
	free(stalls);
}
