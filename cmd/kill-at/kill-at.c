/* kill-at: run the worker under control, kill it at the declared steps,
 * seen in the sandbox database or told on the step socket, start it again
 * as a container restart would, hold two workers at a race step and
 * release them in a recorded order, wait until every published message is
 * acked, and append the evidence: step, kill, log, attempt and recover
 * rows. See idem-step(7) for the kill points and the protocol. */
#include <sys/signalfd.h>
#include <sys/wait.h>

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sodium.h>

#include "baseline.h"
#include "evidence.h"
#include "failpoint.h"
#include "map.h"
#include "peer.h"
#include "pg.h"
#include "plan.h"
#include "queue.h"
#include "role.h"
#include "seed.h"
#include "step.h"
#include "tsv.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "vendor.h"
#include "child.h"

#define MAX_WORKERS 16
#define MAX_RESTARTS 20
#define CHECK_EVERY_US 20000
#define GRACE_US 2000000
#define RESCUE_EVERY 5			/* checks between two rescues of the queue's own */

static const char synopsis[] =
	"usage: kill-at [-d conninfo] [-n workers] [-k step:job:attempt] [-r step]\n"
	"               [-b jobs | all] [-D deadline] [-- command [argument ...]]\n";

static const char DATABASE[] = "database", SOCKET[] = "socket", VENDOR[] = "vendor";

/* A session held at a database kill point, and the delivery it works on. */
struct hold {
	int backend_pid, slot, worker;
	pid_t pid;
	char *job_id, *msg_id;
	long long attempt;
};

/* What becomes of a kill point of the plan. */
struct kill_point {
	const struct idem_plan_kill *plan;
	int fired;
	int cannot;			/* an ack in the effect's transaction: no after-commit */
	pid_t pid;
	long long killed_at;
	int worker;
	int armed;			/* its database point, or -1 */
	char *msg_id;			/* the delivery killed, when the database saw it */
	const char *observed;
};

/* What becomes of a race of the plan. */
struct race {
	const struct idem_plan_race *plan;
	int held;			/* client index holding, or -1 */
	int first;			/* client released first, until its attempt ends */
	int second;			/* client released when the first's attempt ends */
	int done;
	int armed;
	struct hold *db_held, *db_first, *db_second;	/* the same, seen in the database */
};

struct client {
	struct idem_step_peer peer;
	int worker;
	int held;			/* waiting for the race partner */
	char *held_job;
	long long held_attempt;
};

static struct {
	/* what to do, from the stream and the options */
	struct idem_plan plan;
	struct kill_point *kills;	/* one a kill point of the plan */
	struct race *races;		/* one a race of the plan */
	/* the run */
	struct idem_queue q;		/* the queue's adapter */
	struct idem_vendor *vendor;	/* the vendor double */
	const char *conninfo;
	PGconn *conn;
	char *database_url;		/* where conn goes, for the workers */
	long long skew_us;
	struct idem_step_server server;
	int signal_fd, watchdog_fd;
	char **command;
	char *shell[4];			/* the seed's command, run by the shell */
	int nworkers;
	struct child workers[MAX_WORKERS];
	struct client *clients;
	size_t nclients;
	struct idem_evidence *ev;	/* the steps, kills and lines seen */
	int stopping;
	/* the database's side */
	struct idem_failpoint *fp;
	struct idem_peer_sessions sessions;	/* the worker owning each */
	/* the sequential baseline, run first */
	struct idem_baseline base;
	int in_baseline;
	/* the seed's sandbox account, as which the workers run */
	struct idem_role role;
	/* the rows, held until the kill points are gone */
	FILE *out;
} k;

static void
cleanup_dir(void)
{
	idem_step_unlisten(&k.server);
}

static long long
db_now(void)
{
	return idem_now_us() + k.skew_us;
}

/* The kill point, not fired yet, of a step, job and attempt. */
static struct kill_point *
kill_for(const char *step, const char *job_id, long long attempt)
{
	size_t n;

	for (n = idem_map_get(&k.plan.kill_index, job_id); n != IDEM_MAP_NONE;
	     n = k.plan.kills[n].next)
		if (!k.kills[n].fired && k.plan.kills[n].attempt == attempt &&
		    strcmp(k.plan.kills[n].step, step) == 0)
			return &k.kills[n];
	return NULL;
}

/* The plan, and what becomes of each kill point and race, none yet. */
static void
make_plan(char **kill_options, size_t nkill_options, const char *race_step)
{
	struct idem_error err;
	size_t i;

	if (idem_plan_make(&k.plan, kill_options, nkill_options, race_step, &err) < 0)
		idem_die_error(&err);
	k.kills = idem_ereallocarray(NULL, k.plan.nkills + 1, sizeof(*k.kills));
	for (i = 0; i < k.plan.nkills; i++)
		k.kills[i] = (struct kill_point){ .plan = &k.plan.kills[i], .worker = -1, .armed = -1 };
	k.races = idem_ereallocarray(NULL, k.plan.nraces + 1, sizeof(*k.races));
	for (i = 0; i < k.plan.nraces; i++)
		k.races[i] = (struct race){ .plan = &k.plan.races[i], .held = -1, .first = -1,
		    .second = -1, .armed = -1 };
}

/* The plan of idem-step(7): the steps a kill point or a race may match,
 * and the acked step that ends a race's first attempt, so that a worker
 * that reads it sends no other. */
static void
write_plan(void)
{
	const char **names, **job_ids;
	struct idem_error err;
	size_t n;

	idem_plan_steps(&k.plan, &names, &job_ids, &n);
	if (idem_step_plan_write(&k.server, names, job_ids, n, &err) < 0)
		idem_die_error(&err);
	free(names);
	free(job_ids);
}

/* The watchdog kills every worker's group however kill-at ends, and
 * removes the step socket, the plan and their directory when kill-at
 * could not. */
static void
start_watchdog(void)
{
	const char *leftovers[] = { k.server.path, k.server.plan, k.server.dir, NULL };
	struct idem_error err;

	if ((k.watchdog_fd = child_watchdog(MAX_WORKERS * (MAX_RESTARTS + 1), leftovers, &err)) < 0)
		idem_die_error(&err);
}

/* The vendor double puts each call down to the worker whose process
 * group made it. */
static void
tell_vendor(void)
{
	pid_t groups[MAX_WORKERS];
	int i;

	if (k.vendor == NULL)
		return;
	for (i = 0; i < k.nworkers; i++)
		groups[i] = k.workers[i].pid;
	idem_vendor_workers(k.vendor, groups, k.nworkers);
}

/* The worker's environment, set in the child: where kill-at listens, the
 * queue, the vendor double and the database. */
static void
worker_env(void *ctx)
{
	int index = *(const int *)ctx;
	char value[32];

	setenv("IDEM_STEP_SOCK", k.server.path, 1);
	setenv("IDEM_STEP_PLAN", k.server.plan, 1);
	setenv("IDEM_QUEUE", k.plan.queue, 1);
	setenv("IDEM_QUEUE_KIND", k.plan.queue_kind, 1);
	snprintf(value, sizeof(value), "%lld", k.plan.visibility_timeout_ms);
	setenv("IDEM_VISIBILITY_TIMEOUT_MS", value, 1);
	setenv("IDEM_RECONCILIATION_OWNER", k.plan.owner, 1);
	if (k.vendor != NULL)
		setenv("IDEM_VENDOR_URL", idem_vendor_url(k.vendor), 1);
	if (k.conninfo != NULL)
		setenv("IDEM_DATABASE", k.conninfo, 1);
	/* the database kill-at is connected to, for clients that read no conninfo */
	setenv("DATABASE_URL", k.database_url, 1);
	setenv("IDEM_DATABASE_URL", k.database_url, 1);
	snprintf(value, sizeof(value), "%d", index);
	setenv("IDEM_WORKER", value, 1);
	if (k.plan.account != NULL)
		idem_role_setenv(&k.role, k.conn);
}

static void
spawn(int index)
{
	struct idem_error err;

	if (k.database_url == NULL)
		k.database_url = idem_pg_url_of(k.conn);
	if (child_start(&k.workers[index], k.command, k.watchdog_fd, worker_env, &index,
	    &err) < 0)
		idem_die_error(&err);
	tell_vendor();
}

static void
record_step(int worker, pid_t pid, const char *name, const char *job_id, long long attempt,
	    const char *action, const char *observed)
{
	idem_evidence_step(k.ev, db_now(), worker, pid, name, job_id, attempt, action, observed);
}

static void
record_log(int worker, pid_t pid, const char *text, size_t len)
{
	idem_evidence_log(k.ev, db_now(), worker, pid, text, len);
}

static void
reply_go(struct client *c)
{
	idem_step_go(&c->peer);
}

static struct race *
race_for(const char *job_id, const char *step)
{
	const struct idem_plan_job *job = k.plan.nraces ? idem_plan_job(&k.plan, job_id) : NULL;
	size_t i;

	if (job == NULL)
		return NULL;
	for (i = 0; i < k.plan.nraces; i++)
		if (!k.races[i].done && strcmp(k.races[i].plan->step, step) == 0 &&
		    strcmp(k.races[i].plan->business_key, job->business_key) == 0)
			return &k.races[i];
	return NULL;
}

static void
kill_worker_group(int index, int sig)
{
	child_signal(&k.workers[index], sig);
}

/* The first of a race has ended its attempt: release the second. */
static void
release_second(size_t ci)
{
	size_t i;

	for (i = 0; i < k.plan.nraces; i++) {
		struct race *race = &k.races[i];
		struct client *second;

		if (race->first != (int)ci || race->second < 0)
			continue;
		second = &k.clients[race->second];
		record_step(second->worker, second->peer.pid, race->plan->step, second->held_job,
		    second->held_attempt, "release", SOCKET);
		reply_go(second);
		second->held = 0;
		race->first = race->second = -1;
	}
}

static void unref(int armed);
static void watch_sessions(void);

/* One step line from a worker: go on, kill it here, or hold it for a race. */
static void
handle_step(size_t ci, const struct idem_step_line *l)
{
	struct client *c = &k.clients[ci];
	const char *name = l->name, *job_id = l->job_id;
	long long attempt = l->attempt;
	struct kill_point *kp;
	struct race *race;
	char note[64];

	if (l->problem != NULL) {
		snprintf(note, sizeof(note), "kill-at: %s; go", l->problem);
		record_log(c->worker, c->peer.pid, note, strlen(note));
		reply_go(c);
		return;
	}
	if ((kp = kill_for(name, job_id, attempt)) != NULL) {
		record_step(c->worker, c->peer.pid, name, job_id, attempt, "kill", SOCKET);
		kp->fired = 1;
		kp->pid = c->peer.pid;
		kp->worker = c->worker;
		kp->killed_at = db_now();
		kp->observed = SOCKET;
		unref(kp->armed);
		/* the worker's sessions, while it lives: its delivery is put down
		 * to its process, which a worker that sent no consumed step named
		 * nowhere else */
		watch_sessions();
		if (c->worker >= 0) {
			k.workers[c->worker].killed = 1;
			kill_worker_group(c->worker, SIGKILL);
		} else {
			kill(c->peer.pid, SIGKILL);
		}
		return;
	}
	if ((race = race_for(job_id, name)) != NULL) {
		if (race->held < 0) {
			record_step(c->worker, c->peer.pid, name, job_id, attempt, "hold", SOCKET);
			race->held = (int)ci;
			c->held = 1;
			c->held_job = idem_estrdup(job_id);
			c->held_attempt = attempt;
			return;
		}
		if (k.clients[race->held].worker != c->worker) {
			struct client *first = &k.clients[race->held];

			/* both are past their checks; the first to arrive goes first,
			 * the second when the first's attempt has ended, so the order
			 * is the same on every run */
			record_step(c->worker, c->peer.pid, name, job_id, attempt, "hold", SOCKET);
			record_step(first->worker, first->peer.pid, name, first->held_job,
			    first->held_attempt, "release", SOCKET);
			reply_go(first);
			first->held = 0;
			c->held = 1;
			c->held_job = idem_estrdup(job_id);
			c->held_attempt = attempt;
			race->first = race->held;
			race->second = (int)ci;
			race->held = -1;
			race->done = 1;
			unref(race->armed);
			return;
		}
	}
	record_step(c->worker, c->peer.pid, name, job_id, attempt, "go", SOCKET);
	reply_go(c);
	if (strcmp(name, "acked") == 0)
		release_second(ci);
}

static int
worker_of(pid_t pid)
{
	return child_of(k.workers, k.nworkers, pid);
}

static void
accept_client(void)
{
	struct client c;

	memset(&c, 0, sizeof(c));
	if (idem_step_accept(&k.server, &c.peer) < 0)
		return;
	c.worker = worker_of(c.peer.pid);
	k.clients = idem_ereallocarray(k.clients, k.nclients + 1, sizeof(*k.clients));
	k.clients[k.nclients++] = c;
}

/* A worker held for a race that hangs up or dies holds nothing any more. */
static void
forget_holder(size_t ci)
{
	size_t i;

	for (i = 0; i < k.plan.nraces; i++) {
		if (k.races[i].held == (int)ci)
			k.races[i].held = -1;
		if (k.races[i].second == (int)ci)
			k.races[i].first = k.races[i].second = -1;
	}
	k.clients[ci].held = 0;
	release_second(ci);
}

static void
read_client(size_t ci)
{
	struct idem_step_line l;
	int rc;

	if (idem_step_read(&k.clients[ci].peer) < 0) {
		forget_holder(ci);
		return;
	}
	while ((rc = idem_step_next(&k.clients[ci].peer, &l)) > 0)
		handle_step(ci, &l);
	if (rc < 0)
		record_log(k.clients[ci].worker, k.clients[ci].peer.pid,
		    "kill-at: step line too long; hung up", 36);
}

static void
worker_line(void *ctx, const char *text, size_t len)
{
	int index = *(const int *)ctx;

	record_log(index, k.workers[index].pid, text, len);
}

static void
read_worker_output(int index, int final)
{
	child_read(&k.workers[index], final, worker_line, &index);
}

/* The database's side: points armed for the kill points and races, the
 * sessions and the worker processes that own them, the sessions held. */

/* The database point of a step and key, when the database sees the step:
 * after-commit always, the others when the effect table has its ledger. */
static int
arm(const char *step_name, const char *business_key)
{
	int step = idem_failpoint_step(step_name), id;
	struct idem_error err;

	if (step == 0 || (step != IDEM_FAILPOINT_AFTER_COMMIT && !idem_failpoint_has_ledger(k.fp)))
		return -1;
	if ((id = idem_failpoint_arm(k.fp, step, business_key, &err)) < 0)
		idem_die_error(&err);
	return id;
}

/* A kill point fired or a race met: its point is disarmed when nothing
 * else needs it. */
static void
unref(int armed)
{
	struct idem_error err;

	if (armed >= 0 && idem_failpoint_disarm(k.fp, armed, &err) < 0)
		idem_die_error(&err);
}

/* The session, and the worker process that owns it, found once. */
static struct idem_peer_session *
session_of(const struct idem_failpoint_session *s)
{
	return idem_peer_session(&k.sessions, s->backend_pid, s->client_port, s->backend_start_us,
	    k.workers, k.nworkers);
}

static void
watch_sessions(void)
{
	struct idem_failpoint_session *s = NULL;
	struct idem_error err;
	size_t n = 0, i;

	if (idem_failpoint_sessions(k.fp, &s, &n, &err) < 0)
		idem_die_error(&err);
	for (i = 0; i < n; i++)
		session_of(&s[i]);
	free(s);
}

static void
pass_slot(int slot)
{
	struct idem_error err;

	if (idem_failpoint_pass(k.fp, slot, &err) < 0)
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

	record_step(s->worker, s->pid, kp->plan->step, kp->plan->job_id, kp->plan->attempt, "kill",
	    DATABASE);
	kp->fired = 1;
	kp->pid = s->pid;
	kp->worker = s->worker;
	kp->killed_at = db_now();
	kp->msg_id = d->msg_id ? idem_estrdup(d->msg_id) : NULL;
	kp->observed = DATABASE;
	if (s->worker >= 0) {
		k.workers[s->worker].killed = 1;
		kill_worker_group(s->worker, SIGKILL);
	} else if (s->pid > 0) {
		kill(s->pid, SIGKILL);
	}
	if (idem_failpoint_terminate(k.fp, w->session.backend_pid, &err) < 0)
		idem_die_error(&err);
	unref(kp->armed);
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
	record_step(first->worker, first->pid, race->plan->step, first->job_id, first->attempt,
	    "release", DATABASE);
	pass_slot(first->slot);
	race->db_first = first;
	race->db_second = new_hold(w, s, d);
	race->db_held = NULL;
	race->done = 1;
	unref(race->armed);
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
		unref(kp->armed);
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
	const char *key = idem_failpoint_armed_key(k.fp, w->armed);
	struct idem_error err;
	size_t i, nsame = 0;
	int *same;

	if (key == NULL || step == NULL) {
		pass_slot(w->slot);
		return;
	}
	same = idem_peer_backends(&k.sessions, s->worker, &nsame);
	if (idem_failpoint_delivery(k.fp, key, w->session.backend_pid, same, nsame, &d, &err) < 0)
		idem_die_error(&err);
	free(same);
	job = d.job_id ? d.job_id : "";
	if (w->step == IDEM_FAILPOINT_ACK_IN_EFFECT)
		cannot_happen(job, d.attempt, s);
	if (w->step != IDEM_FAILPOINT_ACK_IN_EFFECT && (kp = kill_for(step, job, d.attempt)) != NULL) {
		kill_held(kp, w, s, &d);
		goto out;
	}
	for (i = 0; i < k.plan.nraces; i++) {
		struct race *race = &k.races[i];

		if (!race->done && strcmp(race->plan->step, step) == 0 &&
		    strcmp(race->plan->business_key, key) == 0 && hold_for_race(race, w, s, &d))
			goto out;
	}
	record_step(s->worker, s->pid, step, job, d.attempt, "go", DATABASE);
	pass_slot(w->slot);
out:
	free(d.job_id);
	free(d.msg_id);
}

static int
held_by_race(int backend_pid)
{
	size_t i;

	for (i = 0; i < k.plan.nraces; i++)
		if ((k.races[i].db_held && k.races[i].db_held->backend_pid == backend_pid) ||
		    (k.races[i].db_second && k.races[i].db_second->backend_pid == backend_pid))
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

	for (i = 0; i < k.plan.nraces; i++) {
		struct race *race = &k.races[i];
		struct hold *second = race->db_second;

		if (second == NULL)
			continue;
		if ((ended = idem_failpoint_ended(k.fp, race->db_first->msg_id,
		    race->db_first->backend_pid, &err)) < 0)
			idem_die_error(&err);
		if (!ended)
			continue;
		record_step(second->worker, second->pid, race->plan->step, second->job_id, second->attempt,
		    "release", DATABASE);
		pass_slot(second->slot);
		free_hold(race->db_first);
		free_hold(second);
		race->db_first = race->db_second = NULL;
	}
}

/* The vendor double: a call of the business key of an external-call kill
 * point is held there, the vendor having charged; the kill point of the
 * delivery the calling worker works on kills that worker, whose reply is
 * then never sent. */

static void
arm_vendor(const char *business_key)
{
	size_t i;

	for (i = 0; i < k.plan.nkills; i++)
		if (!k.kills[i].fired && strcmp(k.kills[i].plan->step, "external-call") == 0 &&
		    strcmp(idem_plan_job(&k.plan, k.kills[i].plan->job_id)->business_key,
		    business_key) == 0) {
			idem_vendor_arm(k.vendor, business_key);
			return;
		}
}

static void
handle_vendor_call(const struct idem_vendor_held *h)
{
	struct idem_failpoint_delivery d;
	struct kill_point *kp = NULL;
	struct idem_error err;
	size_t nsame = 0;
	int *same = idem_peer_backends(&k.sessions, h->worker, &nsame);

	if (idem_failpoint_delivery(k.fp, h->business_key, -1, same, nsame, &d, &err) < 0)
		idem_die_error(&err);
	free(same);
	if (d.job_id != NULL)
		kp = kill_for("external-call", d.job_id, d.attempt);
	if (kp == NULL) {
		record_step(h->worker, h->pid, "external-call", d.job_id ? d.job_id : "", d.attempt,
		    "go", VENDOR);
		idem_vendor_release(k.vendor, h->id, 0);
	} else {
		record_step(h->worker, h->pid, "external-call", d.job_id, d.attempt, "kill", VENDOR);
		kp->fired = 1;
		kp->pid = h->pid;
		kp->worker = h->worker;
		kp->killed_at = db_now();
		kp->msg_id = d.msg_id ? idem_estrdup(d.msg_id) : NULL;
		kp->observed = VENDOR;
		if (h->worker >= 0) {
			k.workers[h->worker].killed = 1;
			kill_worker_group(h->worker, SIGKILL);
		} else if (h->pid > 0) {
			kill(h->pid, SIGKILL);
		}
		idem_vendor_release(k.vendor, h->id, 1);
	}
	arm_vendor(h->business_key);
	free(d.job_id);
	free(d.msg_id);
}

static void
watch_vendor(void)
{
	struct idem_vendor_held held[MAX_WORKERS];
	size_t n, i;

	if (k.vendor == NULL)
		return;
	idem_vendor_drain(k.vendor);
	n = idem_vendor_held(k.vendor, held, MAX_WORKERS);
	if (n > 0)
		watch_sessions();
	for (i = 0; i < n; i++) {
		handle_vendor_call(&held[i]);
		free(held[i].business_key);
	}
}

static void
start_vendor(void)
{
	struct idem_error err;
	size_t i;

	if (k.plan.external_name == NULL)
		return;
	if ((k.vendor = idem_vendor_start(k.plan.external_name, k.plan.external_key_fields,
	    k.plan.honours_idempotency_key, &err)) == NULL)
		idem_die_error(&err);
	for (i = 0; i < k.plan.nfaults; i++)
		idem_vendor_fault(k.vendor, k.plan.faults[i].business_key, k.plan.faults[i].fault);
	for (i = 0; i < k.plan.nkills; i++)
		if (strcmp(k.kills[i].plan->step, "external-call") == 0)
			arm_vendor(idem_plan_job(&k.plan, k.kills[i].plan->job_id)->business_key);
}

static void
watch_database(void)
{
	struct idem_failpoint_waiter *w = NULL;
	struct idem_error err;
	size_t n = 0, i;

	watch_sessions();
	if (idem_failpoint_armed(k.fp) == 0)
		return;
	if (idem_failpoint_waiters(k.fp, &w, &n, &err) < 0)
		idem_die_error(&err);
	for (i = 0; i < n; i++)
		if (!held_by_race(w[i].session.backend_pid))
			handle_waiter(&w[i]);
	free(w);
	release_races();
}

/* Reaps workers; one killed at a step, or one that died on its own while
 * the run goes on, is started again. */
static void
reap(void)
{
	pid_t pid;
	int status, i;
	char note[128];

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (i = 0; i < k.nworkers; i++)
			if (k.workers[i].pid == pid)
				break;
		if (i == k.nworkers)
			continue;
		read_worker_output(i, 1);
		if (!k.workers[i].killed) {
			if (WIFEXITED(status))
				snprintf(note, sizeof(note), "kill-at: worker %d exited with status %d", i,
				    WEXITSTATUS(status));
			else
				snprintf(note, sizeof(note), "kill-at: worker %d died of signal %d", i,
				    WTERMSIG(status));
			record_log(i, pid, note, strlen(note));
		}
		child_ended(&k.workers[i], k.watchdog_fd);
		tell_vendor();
		if (k.stopping)
			continue;
		if (!k.workers[i].killed && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
			idem_evidence_print_log(k.ev, stderr, pid);
			idem_die(IDEM_EXIT_ENV, "worker %d could not be started (status 127): %s", i,
			    k.command[0]);
		}
		if (!k.workers[i].killed && ++k.workers[i].restarts > MAX_RESTARTS)
			idem_die(IDEM_EXIT_ENV, "worker %d stopped on its own %d times; giving up", i,
			    MAX_RESTARTS);
		spawn(i);
	}
}

static int
all_fired(void)
{
	size_t i;

	for (i = 0; i < k.plan.nkills; i++)
		if (!k.kills[i].fired)
			return 0;
	for (i = 0; i < k.plan.nraces; i++)
		if (!k.races[i].done)
			return 0;
	return 1;
}

/* Every msg_id of the stream, as a PostgreSQL array of texts. */
static const char *
msg_ids(void)
{
	return k.plan.msgs.text ? k.plan.msgs.text : "{}";
}

static int
everything_acked(void)
{
	struct idem_error err;
	int rc = idem_failpoint_all_acked(k.fp, &err);

	if (rc < 0)
		idem_die_error(&err);
	return rc;
}

static void
stop_workers(void)
{
	long long until;
	int i, running;

	k.stopping = 1;
	for (i = 0; i < k.nworkers; i++)
		kill_worker_group(i, SIGTERM);
	until = idem_now_us() + GRACE_US;
	for (;;) {
		reap();
		running = 0;
		for (i = 0; i < k.nworkers; i++)
			running |= k.workers[i].pid > 0;
		if (!running)
			break;
		if (idem_now_us() > until) {
			for (i = 0; i < k.nworkers; i++)
				kill_worker_group(i, SIGKILL);
			until = idem_now_us() + GRACE_US * 5;
		}
		usleep(5000);
	}
	for (i = 0; i < k.nworkers; i++)
		kill_worker_group(i, SIGKILL);
}

/* The run: returns 0 when every message was acked and every kill point and
 * race was reached, 1 at the deadline, 128+N when kill-at got signal N. */
static int
run(long long deadline_us)
{
	const char *ids = k.in_baseline ? k.base.ids : msg_ids();
	long long next_check = 0, end = idem_now_us() + deadline_us, checks = 0;
	struct pollfd *fds = NULL;
	struct idem_error err;
	size_t nfds, nclients, i;
	int rc = -1;

	if (idem_failpoint_watch_acks(k.fp, ids, &err) < 0)
		idem_die_error(&err);
	for (i = 0; i < (size_t)k.nworkers; i++)
		spawn((int)i);
	while (rc < 0) {
		nfds = 0;
		fds = idem_ereallocarray(fds, 3 + MAX_WORKERS + k.nclients, sizeof(*fds));
		fds[nfds++] = (struct pollfd){ .fd = k.server.fd, .events = POLLIN };
		fds[nfds++] = (struct pollfd){ .fd = k.signal_fd, .events = POLLIN };
		for (i = 0; i < (size_t)k.nworkers; i++)
			fds[nfds++] = (struct pollfd){ .fd = k.workers[i].out, .events = POLLIN };
		nclients = k.nclients;
		for (i = 0; i < nclients; i++)
			fds[nfds++] = (struct pollfd){ .fd = k.clients[i].peer.fd, .events = POLLIN };
		fds[nfds++] = (struct pollfd){ .fd = k.vendor ? idem_vendor_fd(k.vendor) : -1,
		    .events = POLLIN };
		if (poll(fds, nfds, CHECK_EVERY_US / 1000) < 0 && errno != EINTR)
			idem_die(IDEM_EXIT_ENV, "poll:");
		if (fds[0].revents & POLLIN)
			accept_client();
		if (fds[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(k.signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				if (si.ssi_signo == SIGCHLD)
					reap();
				else
					rc = 128 + (int)si.ssi_signo;
			}
		}
		for (i = 0; i < (size_t)k.nworkers; i++)
			if (fds[2 + i].fd >= 0 && (fds[2 + i].revents & (POLLIN | POLLHUP)))
				read_worker_output((int)i, 0);
		for (i = 0; i < nclients; i++)
			if (k.clients[i].peer.fd >= 0 &&
			    (fds[2 + k.nworkers + i].revents & (POLLIN | POLLHUP | POLLERR)))
				read_client(i);
		if (fds[nfds - 1].revents & POLLIN)
			watch_vendor();
		if (rc >= 0)
			break;
		if (idem_now_us() >= next_check) {
			next_check = idem_now_us() + CHECK_EVERY_US;
			watch_database();
			if (++checks % RESCUE_EVERY == 0 &&
			    idem_failpoint_rescue(k.fp, k.plan.visibility_timeout_ms, &err) < 0)
				idem_die_error(&err);
			if ((k.in_baseline || all_fired()) && everything_acked())
				rc = 0;
			else if (idem_now_us() > end)
				rc = 1;
		}
	}
	free(fds);
	/* a held session is terminated before its worker goes: let go, a dead
	 * client's transaction would commit */
	if (idem_failpoint_terminate_all(k.fp, &err) < 0)
		idem_die_error(&err);
	stop_workers();
	if (rc == 1) {
		const char *params[1] = { ids };
		const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
		/* msg_id, job_id, copy, deliveries */
		PGresult *res = idem_queue_exec(&k.q, k.conn, "unacked-list", "watching the queue", 1,
		    types, params, &err);

		for (i = 0; res && i < (size_t)PQntuples(res); i++)
			idem_warn("deadline: message %s (job %s, copy %s) never acked after %s deliveries",
			    PQgetvalue(res, (int)i, 0), PQgetvalue(res, (int)i, 1),
			    PQgetvalue(res, (int)i, 2), PQgetvalue(res, (int)i, 3));
		PQclear(res);
		for (i = 0; !k.in_baseline && i < k.plan.nkills; i++)
			if (!k.kills[i].fired)
				idem_warn("deadline: step %s of job %s, attempt %lld, never reached (scenario %s)",
				    k.plan.kills[i].step, k.plan.kills[i].job_id, k.plan.kills[i].attempt,
				    k.plan.kills[i].scenario);
		for (i = 0; !k.in_baseline && i < k.plan.nraces; i++)
			if (!k.races[i].done)
				idem_warn("deadline: race at %s on business key %s never met by two workers",
				    k.races[i].plan->step, k.races[i].plan->business_key);
	}
	return rc;
}

/* The call rows: every request the vendor double took, once it stopped. */
static void
write_calls(void)
{
	struct idem_vendor_call *const *calls;
	size_t n;

	if (k.vendor == NULL)
		return;
	idem_vendor_stop(k.vendor, &calls, &n);
	if (idem_evidence_calls(k.out, calls, n, k.skew_us) < 0)
		idem_die(IDEM_EXIT_ENV, "holding the rows:");
}

/* The worker row: the argument vector kill-at executes and the files it
 * runs, with their hashes. */
static void
write_worker(void)
{
	if (idem_evidence_worker(k.out, k.command, k.command == k.shell ? k.plan.worker_command : NULL) < 0)
		idem_die(IDEM_EXIT_ENV, "holding the rows:");
}

/* The missed rows: every kill point and race the run did not reach. */
static void
write_missed(void)
{
	size_t i;

	for (i = 0; i < k.plan.nkills; i++)
		if (!k.kills[i].fired && idem_evidence_missed(k.out, "kill", k.kills[i].plan->scenario,
		    k.kills[i].plan->job_id, k.kills[i].plan->attempt, k.kills[i].plan->step) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the rows:");
	for (i = 0; i < k.plan.nraces; i++)
		if (!k.races[i].done && idem_evidence_missed(k.out, "race", k.races[i].plan->scenario,
		    k.races[i].plan->business_key, 0, k.races[i].plan->step) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the rows:");
}

static int
grouped_ledger(void *fp, const char **sql, struct idem_error *err)
{
	return idem_failpoint_grouped_ledger(fp, sql, err);
}

/*
 * The step, kill and log rows, then the attempt rows, one per delivery,
 * with the rows each wrote from the effect ledger, and the recover rows,
 * from the kill to the ack of the retry: see evidence.h.
 */
static void
write_evidence(void)
{
	struct idem_evidence *ev = k.ev;
	char *deliveries = idem_queue_sql(&k.q, k.conn, "deliveries");
	struct idem_error err;
	size_t i;

	if (deliveries == NULL)
		idem_die(IDEM_EXIT_ENV, "reading the delivery log: the %s adapter has no deliveries "
		    "section", k.q.kind);
	/* the ledger grouped by another server process while this one reads
	 * the deliveries */
	if (idem_failpoint_group_ledger(k.fp, &err) < 0)
		idem_die_error(&err);
	/* the deliveries and the ledger are the database's: joined there */
	idem_evidence_deliveries_from(ev, deliveries, msg_ids());
	/* the sessions first: a write is a delivery's by the worker that holds
	 * both sessions, when the queue delivers on a connection of its own */
	for (i = 0; i < k.sessions.n; i++)
		if (k.sessions.s[i].worker >= 0)
			idem_evidence_backend(ev, k.sessions.s[i].backend_pid, k.sessions.s[i].start,
			    k.sessions.s[i].worker, k.sessions.s[i].pid);
	if (!idem_failpoint_has_ledger(k.fp))
		idem_warn("no rows written: the effect table %s did not exist when the run began",
		    k.plan.effect_table);
	else
		idem_evidence_grouped_ledger(ev, grouped_ledger, k.fp);
	for (i = 0; i < k.plan.nkills; i++) {
		const struct kill_point *kp = &k.kills[i];
		const struct idem_plan_kill *p = kp->plan;

		if (kp->fired && !kp->cannot)
			idem_evidence_kill(ev, p->scenario, p->job_id, p->attempt, p->step, kp->msg_id,
			    kp->pid, kp->killed_at, kp->observed);
	}
	if (idem_evidence_write(ev, k.conn, k.out, &err) < 0)
		idem_die_error(&err);
	write_calls();
	/* after a failed baseline no fault was tried, so none was missed */
	if (k.base.result != IDEM_BASELINE_FAILED)
		write_missed();
}

static void
free_all(void)
{
	size_t i;

	idem_queue_close(&k.q);
	idem_vendor_free(k.vendor);
	free(k.database_url);
	for (i = 0; i < k.plan.nkills; i++)
		free(k.kills[i].msg_id);
	free(k.kills);
	for (i = 0; i < k.plan.nraces; i++) {
		free_hold(k.races[i].db_held);
		free_hold(k.races[i].db_first);
		free_hold(k.races[i].db_second);
	}
	free(k.races);
	idem_plan_free(&k.plan);
	idem_peer_sessions_free(&k.sessions);
	for (i = 0; i < k.nclients; i++) {
		if (k.clients[i].peer.fd >= 0)
			close(k.clients[i].peer.fd);
		free(k.clients[i].held_job);
	}
	free(k.clients);
	idem_evidence_free(k.ev);
	idem_baseline_free(&k.base);
	idem_role_close(&k.role);
	for (i = 0; i < MAX_WORKERS; i++)
		free(k.workers[i].partial);
}

/* Copies what was held to standard output. */
static void
copy_out(FILE *from, const char *what)
{
	if (idem_copy_stream(from, stdout) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", ferror(from) ? what : "write error on standard output");
}

/* On every way out: the kill points go, and their ledger with them. */
static void
remove_failpoints(void)
{
	struct idem_error err;
	int i;

	if (k.fp == NULL)
		return;
	for (i = 0; i < k.nworkers; i++)
		kill_worker_group(i, SIGKILL);
	if (idem_failpoint_remove(k.fp, &err) < 0)
		idem_warn("%s", err.text);
	k.fp = NULL;
}

/* The database's points of the kill points and races it can see. */
static void
install_failpoints(void)
{
	struct idem_error err;
	size_t i;

	if ((k.fp = idem_failpoint_install(k.conninfo, &k.q, k.plan.effect_table, k.plan.key_columns,
	    idem_plan_database_steps(&k.plan), &err)) == NULL)
		idem_die_error(&err);
	atexit(remove_failpoints);
	for (i = 0; i < k.plan.nkills; i++)
		k.kills[i].armed = arm(k.kills[i].plan->step,
		    idem_plan_job(&k.plan, k.kills[i].plan->job_id)->business_key);
	for (i = 0; i < k.plan.nraces; i++)
		k.races[i].armed = arm(k.races[i].plan->step, k.races[i].plan->business_key);
}

static void
setup_socket(void)
{
	struct idem_error err;

	atexit(cleanup_dir);
	if (idem_step_listen(&k.server, &err) < 0)
		idem_die_error(&err);
}

static void
setup_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if ((k.signal_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		idem_die(IDEM_EXIT_ENV, "signalfd:");
}

/* The sandbox account: the role the workers run as, confined to its list
 * before they start (see lib/role). */
static void
confine_account(void)
{
	struct idem_error err;

	if (k.plan.account == NULL)
		return;
	if (idem_role_open(&k.role, k.conn, k.plan.account, &k.q, k.plan.effect_table, &err) < 0 ||
	    idem_role_confine(&k.role, k.conn, &err) < 0)
		idem_die_error(&err);
}

/* What the account held at the end, and what it could not do; more than
 * its list is a finding. */
static void
check_account(void)
{
	struct idem_error err;

	if (k.plan.account == NULL)
		return;
	if (idem_role_finish(&k.role, k.conn, &err) < 0)
		idem_die_error(&err);
	if (k.role.beyond > 0 || k.role.held > 0)
		idem_warn("sandbox account %s: %zu privileges beyond its list, %zu things it may not "
		    "do that it could: see the grant and denied rows", k.plan.account, k.role.beyond,
		    k.role.held);
}

/* Whether a run after the baseline has nothing to do: no kill point or
 * race, every message acked. */
static int
nothing_left(void)
{
	struct idem_error err;

	if (!all_fired())
		return 0;
	if (idem_failpoint_watch_acks(k.fp, msg_ids(), &err) < 0)
		idem_die_error(&err);
	return everything_acked();
}

/*
 * The sequential baseline: the jobs in no fault run first, with one
 * worker, while the messages of the faults are held back, and their
 * effects are counted; the faults are let go after. Returns 0 when it
 * passed or had no jobs, -1 when it passed and nothing is left to run (no
 * fault, every message acked), 1 when it failed, 128+N when kill-at got
 * signal N.
 */
static int
run_baseline(long long deadline_us)
{
	struct idem_error err;
	int rc, nworkers = k.nworkers, i;
	size_t n;

	idem_plan_tell_baseline(&k.plan, &k.base);
	if ((n = idem_baseline_plan(&k.base)) == SIZE_MAX)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	if (n == 0)
		return 0;
	if (idem_baseline_hold_back(&k.base, &k.q, k.conn, &err) < 0)
		idem_die_error(&err);
	k.in_baseline = 1;
	k.nworkers = 1;
	rc = run(deadline_us);
	k.nworkers = nworkers;
	k.in_baseline = 0;
	k.stopping = 0;
	for (i = 0; i < MAX_WORKERS; i++)
		k.workers[i].restarts = 0;
	if (idem_baseline_let_go(&k.base, &k.q, k.conn, &err) < 0)
		idem_die_error(&err);
	if (rc > 128)
		return rc;
	if (idem_baseline_count(&k.base, k.conn, k.plan.effect_table, k.plan.key_columns, &err) < 0 ||
	    idem_baseline_judge(&k.base, &k.q, k.conn, &err) < 0)
		idem_die_error(&err);
	if (k.base.result != IDEM_BASELINE_FAILED)
		return nothing_left() ? -1 : 0;
	idem_warn("baseline failed: %lld of %lld effects, %lld duplicate, %lld missing, "
	    "%lld messages unacked; no fault was forced", k.base.effects_observed,
	    k.base.effects_expected, k.base.duplicates, k.base.missing, k.base.unacked);
	idem_baseline_explain(&k.base, stderr, 10);
	return 1;
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "workers", required_argument, NULL, 'n' },
		{ "kill", required_argument, NULL, 'k' },
		{ "race", required_argument, NULL, 'r' },
		{ "baseline", required_argument, NULL, 'b' },
		{ "deadline", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conninfo = NULL, *race_step = NULL;
	char **kill_options = NULL, *end, *version = NULL;
	size_t nkill_options = 0;
	long long deadline_ms = -1, baseline_jobs = IDEM_BASELINE_JOBS;
	struct idem_error err;
	FILE *hold;
	int c, rc;

	argv0 = "kill-at";
	argv[0] = (char *)argv0;
	while ((c = getopt_long(argc, argv, "+d:n:k:r:b:D:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': conninfo = optarg; break;
		case 'n':
			k.nworkers = (int)strtol(optarg, &end, 10);
			if (*end || k.nworkers < 1 || k.nworkers > MAX_WORKERS)
				idem_die(IDEM_EXIT_USAGE, "-n %s: expected 1 to %d workers", optarg, MAX_WORKERS);
			break;
		case 'k':
			kill_options = idem_ereallocarray(kill_options, nkill_options + 1, sizeof(char *));
			kill_options[nkill_options++] = optarg;
			break;
		case 'r': race_step = optarg; break;
		case 'b':
			if (strcmp(optarg, "all") == 0)
				baseline_jobs = 0;
			else if ((baseline_jobs = strtoll(optarg, &end, 10)) < 1 || *end != '\0')
				idem_die(IDEM_EXIT_USAGE, "-b %s: expected a number of jobs, or all", optarg);
			break;
		case 'D':
			if ((deadline_ms = idem_parse_duration_ms(optarg)) <= 0)
				idem_die(IDEM_EXIT_USAGE, "-D %s: expected a duration such as 30s", optarg);
			break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("kill-at " IDEM_VERSION); idem_close_stdout(); return 0;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	k.ev = idem_evidence_new();
	idem_baseline_init(&k.base);
	k.base.limit = baseline_jobs;
	if ((hold = tmpfile()) == NULL)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	if (idem_plan_read(&k.plan, stdin, "stdin", hold, kill_options, nkill_options,
	    race_step != NULL, &k.base, &err) < 0)
		idem_die_error(&err);
	if (fflush(hold) != 0 || fseek(hold, 0, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	if (optind < argc) {
		k.command = argv + optind;
	} else if (k.plan.worker_command != NULL) {
		k.shell[0] = "/bin/sh";
		k.shell[1] = "-c";
		if (asprintf(&k.shell[2], "exec %s", k.plan.worker_command) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		k.shell[3] = NULL;
		k.command = k.shell;
	} else {
		idem_die(IDEM_EXIT_USAGE, "no worker: give -- command, or worker.command in the seed");
	}
	make_plan(kill_options, nkill_options, race_step);
	if (k.nworkers == 0)
		k.nworkers = k.plan.nraces > 0 ? 2 : 1;
	if (k.plan.nraces > 0 && k.nworkers < 2)
		idem_die(IDEM_EXIT_USAGE, "-n %d: a race needs two workers", k.nworkers);
	if (deadline_ms < 0)
		deadline_ms = 30000 + 3 * k.plan.visibility_timeout_ms *
		    (k.plan.max_attempts ? k.plan.max_attempts : 5);

	k.conninfo = conninfo;
	if (idem_queue_open(&k.q, k.plan.queue_kind, k.plan.queue, &err) < 0 ||
	    (k.conn = idem_pg_connect(conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(k.conn, &err) < 0 ||
	    idem_queue_check(&k.q, k.conn, &version, &err) < 0 ||
	    idem_pg_clock_skew(k.conn, &k.skew_us, &err) < 0)
		idem_die_error(&err);
	free(version);
	confine_account();
	setup_signals();
	install_failpoints();
	start_vendor();
	setup_socket();
	write_plan();
	start_watchdog();
	/* -1: the baseline was the whole run */
	if ((rc = run_baseline(deadline_ms * 1000)) == 0)
		rc = run(deadline_ms * 1000);
	else if (rc < 0)
		rc = 0;
	if (rc > 128) {
		idem_warn("stopped by signal %d; workers stopped", rc - 128);
	} else {
		check_account();
		/* nothing goes out until the kill points are gone: the next
		 * program of the pipeline may start counting, and lock the
		 * effect table, as soon as it reads the stream */
		if ((k.out = tmpfile()) == NULL)
			idem_die(IDEM_EXIT_ENV, "holding the rows:");
		write_worker();
		if (idem_baseline_write(&k.base, k.out) < 0 ||
		    (k.plan.account != NULL && idem_role_write(&k.role, k.out) < 0))
			idem_die(IDEM_EXIT_ENV, "holding the rows:");
		write_evidence();
		if (fflush(k.out) != 0 || fseek(k.out, 0, SEEK_SET) != 0)
			idem_die(IDEM_EXIT_ENV, "holding the rows:");
	}
	remove_failpoints();
	if (k.out != NULL) {
		copy_out(hold, "holding the stream");
		copy_out(k.out, "holding the rows");
		fclose(k.out);
	}
	fclose(hold);
	free(k.shell[2]);
	free(kill_options);
	PQfinish(k.conn);
	free_all();
	idem_close_stdout();
	return rc;
}
