/* database.c: the steps seen in the database (database.h) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "database.h"
#include "stall.h"
#include "workers.h"

static const char DATABASE[] = "database";

void
database_remove(void)
{
	struct idem_error err;

	if (run.fp == NULL)
		return;
	workers_signal(SIGKILL);
	if (idem_failpoint_remove(run.fp, &err) < 0)
		idem_warn("%s", err.text);
	run.fp = NULL;
}

int
database_arm(const char *step_name, const char *business_key)
{
	int step = idem_failpoint_step(step_name), id;
	struct idem_error err;

	if (step == 0 || (step != IDEM_FAILPOINT_AFTER_COMMIT && !idem_failpoint_has_ledger(run.fp)))
		return -1;
	if ((id = idem_failpoint_arm(run.fp, step, business_key, &err)) < 0)
		idem_die_error(&err);
	return id;
}

void
database_install(void)
{
	struct idem_error err;
	size_t i;

	if ((run.fp = idem_failpoint_install(run.conninfo, &run.q, run.plan.effect_table,
	    run.plan.key_columns, idem_plan_database_steps(&run.plan), &err)) == NULL)
		idem_die_error(&err);
	atexit(database_remove);
	for (i = 0; i < run.plan.nkills; i++)
		run.kills[i].armed = database_arm(run.kills[i].plan->step,
		    idem_plan_job(&run.plan, run.kills[i].plan->job_id)->business_key);
	for (i = 0; i < run.plan.nraces; i++)
		run.races[i].armed = database_arm(run.races[i].plan->step,
		    run.races[i].plan->business_key);
}

void
database_disarm(int armed)
{
	struct idem_error err;

	if (armed >= 0 && idem_failpoint_disarm(run.fp, armed, &err) < 0)
		idem_die_error(&err);
}

/* The session, and the worker process that owns it, found once. */
static struct idem_peer_session *
session_of(const struct idem_failpoint_session *s)
{
	return idem_peer_session(&run.sessions, s->backend_pid, s->client_port, s->backend_start_us,
	    run.workers, run.nworkers);
}

void
database_watch_sessions(void)
{
	struct idem_failpoint_session *s = NULL;
	struct idem_error err;
	size_t n = 0, i;

	if (idem_failpoint_sessions(run.fp, &s, &n, &err) < 0)
		idem_die_error(&err);
	for (i = 0; i < n; i++)
		session_of(&s[i]);
	free(s);
}

void
database_pass(int slot)
{
	struct idem_error err;

	if (idem_failpoint_pass(run.fp, slot, &err) < 0)
		idem_die_error(&err);
}

static struct hold *
new_hold(const struct idem_failpoint_waiter *w, const struct idem_peer_session *s,
	 struct idem_failpoint_delivery *d)
{
	struct hold *h = idem_emalloc(sizeof(*h));

	*h = (struct hold){ w->session.backend_pid, w->slot, s->worker, s->pid,
	    d->job_id ? d->job_id : idem_estrdup(""), d->msg_id, d->attempt };
	d->job_id = d->msg_id = NULL;
	return h;
}

static void
free_hold(struct hold *h)
{
	if (h == NULL)
		return;
	free(h->job_id);
	free(h->msg_id);
	free(h);
}

/* Kills the worker that owns a held session, terminates the session, and
 * only then lets its gate go: let go first, a dead client's COMMIT goes
 * through. */
static void
kill_held(struct kill_point *kp, const struct idem_failpoint_waiter *w,
	  const struct idem_peer_session *s, const struct idem_failpoint_delivery *d)
{
	struct idem_error err;

	kill_point_reached(kp, s->worker, s->pid, d->msg_id, DATABASE);
	workers_kill(s->worker, s->pid);
	if (idem_failpoint_terminate(run.fp, w->session.backend_pid, &err) < 0)
		idem_die_error(&err);
	database_disarm(kp->armed);
}

/* The first session at a race's step is held until a session of another
 * worker comes; then the first goes on, and the second once the first's
 * attempt has ended. Returns 0 for a session this race does not hold. */
static int
hold_for_race(struct race *race, const struct idem_failpoint_waiter *w,
	      const struct idem_peer_session *s, struct idem_failpoint_delivery *d)
{
	struct hold *first = race->db_held;

	if (first != NULL && s->worker >= 0 && s->worker == first->worker)
		return 0;
	record_step(s->worker, s->pid, race->plan->step, d->job_id ? d->job_id : "", d->attempt, "hold",
	    DATABASE);
	if (first == NULL) {
		race->db_held = new_hold(w, s, d);
		return 1;
	}
	race->db_first = first;
	race->db_second = new_hold(w, s, d);
	/* the message published first goes first, whichever came first: the
	 * same order on every run, however busy the machine */
	if (publish_order(race->db_second->msg_id) < publish_order(first->msg_id)) {
		race->db_first = race->db_second;
		race->db_second = first;
	}
	record_step(race->db_first->worker, race->db_first->pid, race->plan->step,
	    race->db_first->job_id, race->db_first->attempt, "release", DATABASE);
	database_pass(race->db_first->slot);
	race->db_held = NULL;
	race->done = 1;
	database_disarm(race->armed);
	return 1;
}

/* An ack inside the transaction that wrote the effect: there is no
 * moment when the effect is committed and the message not acked. */
static void
cannot_happen(const char *job_id, long long attempt, const struct idem_peer_session *s)
{
	struct kill_point *kp;
	char note[512];

	while ((kp = kill_for("after-commit", job_id, attempt)) != NULL) {
		kp->fired = kp->cannot = 1;
		kp->observed = DATABASE;
		database_disarm(kp->armed);
		snprintf(note, sizeof(note), "kill-at: ack in the effect's transaction: after-commit "
		    "cannot happen (job %s, attempt %lld)", job_id, attempt);
		record_log(s->worker, s->pid, note, strlen(note));
	}
}

/* A session held at an armed point: kill its worker there, hold it for a
 * race, or let it go on. */
static void
handle_waiter(const struct idem_failpoint_waiter *w)
{
	struct idem_failpoint_delivery d;
	struct kill_point *kp;
	struct idem_peer_session *s = session_of(&w->session);
	const char *step = idem_failpoint_step_name(w->step), *job;
	const char *key = idem_failpoint_armed_key(run.fp, w->armed);
	struct idem_error err;
	size_t i, nsame = 0;
	int *same;

	if (key == NULL || step == NULL) {
		database_pass(w->slot);
		return;
	}
	same = idem_peer_backends(&run.sessions, s->worker, &nsame);
	if (idem_failpoint_delivery(run.fp, key, w->session.backend_pid, same, nsame, &d, &err) < 0)
		idem_die_error(&err);
	free(same);
	job = d.job_id ? d.job_id : "";
	if (w->step == IDEM_FAILPOINT_ACK_IN_EFFECT)
		cannot_happen(job, d.attempt, s);
	if (w->step != IDEM_FAILPOINT_ACK_IN_EFFECT && (kp = kill_for(step, job, d.attempt)) != NULL) {
		kill_held(kp, w, s, &d);
		goto out;
	}
	if (w->step != IDEM_FAILPOINT_ACK_IN_EFFECT && stall_reached(step, job, d.attempt,
	    &(struct held){ .observed = DATABASE, .slot = w->slot, .backend_pid =
	    w->session.backend_pid, .worker = s->worker, .pid = s->pid, .msg_id = d.msg_id }))
		goto out;
	for (i = 0; i < run.plan.nraces; i++) {
		struct race *race = &run.races[i];

		if (!race->done && strcmp(race->plan->step, step) == 0 &&
		    strcmp(race->plan->business_key, key) == 0 && hold_for_race(race, w, s, &d))
			goto out;
	}
	record_step(s->worker, s->pid, step, job, d.attempt, "go", DATABASE);
	database_pass(w->slot);
out:
	free(d.job_id);
	free(d.msg_id);
}

static int
held_by_race(int backend_pid)
{
	size_t i;

	for (i = 0; i < run.plan.nraces; i++)
		if ((run.races[i].db_held && run.races[i].db_held->backend_pid == backend_pid) ||
		    (run.races[i].db_second && run.races[i].db_second->backend_pid == backend_pid))
			return 1;
	return 0;
}

/* The second of a race goes on once the first's attempt has ended: its
 * message acked, or its session gone. */
static void
release_races(void)
{
	struct idem_error err;
	size_t i;
	int ended;

	for (i = 0; i < run.plan.nraces; i++) {
		struct race *race = &run.races[i];
		struct hold *second = race->db_second;

		if (second == NULL)
			continue;
		if ((ended = idem_failpoint_ended(run.fp, race->db_first->msg_id,
		    race->db_first->backend_pid, &err)) < 0)
			idem_die_error(&err);
		if (!ended)
			continue;
		record_step(second->worker, second->pid, race->plan->step, second->job_id, second->attempt,
		    "release", DATABASE);
		database_pass(second->slot);
		free_hold(race->db_first);
		free_hold(second);
		race->db_first = race->db_second = NULL;
	}
}

void
database_watch(void)
{
	struct idem_failpoint_waiter *w = NULL;
	struct idem_error err;
	size_t n = 0, i;

	database_watch_sessions();
	if (idem_failpoint_armed(run.fp) == 0)
		return;
	if (idem_failpoint_waiters(run.fp, &w, &n, &err) < 0)
		idem_die_error(&err);
	for (i = 0; i < n; i++)
		if (!held_by_race(w[i].session.backend_pid) &&
		    !stall_holds_backend(w[i].session.backend_pid))
			handle_waiter(&w[i]);
	free(w);
	release_races();
}

void
database_free(void)
{
	size_t i;

	for (i = 0; i < run.plan.nraces; i++) {
		free_hold(run.races[i].db_held);
		free_hold(run.races[i].db_first);
		free_hold(run.races[i].db_second);
	}
}
