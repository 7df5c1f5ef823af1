/* socket.c: the steps told on the step socket (socket.h) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "database.h"
#include "socket.h"
#include "stall.h"
#include "workers.h"

static const char SOCKET[] = "socket";

static void
unlisten(void)
{
	idem_step_unlisten(&run.server);
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

	idem_plan_steps(&run.plan, &names, &job_ids, &n);
	if (idem_step_plan_write(&run.server, names, job_ids, n, &err) < 0)
		idem_die_error(&err);
	free(names);
	free(job_ids);
}

void
socket_listen(void)
{
	struct idem_error err;

	atexit(unlisten);
	if (idem_step_listen(&run.server, &err) < 0)
		idem_die_error(&err);
	write_plan();
}

static struct race *
race_for(const char *job_id, const char *step)
{
	const struct idem_plan_job *job = run.plan.nraces ? idem_plan_job(&run.plan, job_id) : NULL;
	size_t i;

	if (job == NULL)
		return NULL;
	for (i = 0; i < run.plan.nraces; i++)
		if (!run.races[i].done && strcmp(run.races[i].plan->step, step) == 0 &&
		    strcmp(run.races[i].plan->business_key, job->business_key) == 0)
			return &run.races[i];
	return NULL;
}

/* A client waits, held at its step for a race, until it is released. */
static void
hold(struct client *c, const char *job_id, long long attempt)
{
	c->held = 1;
	c->held_job = idem_estrdup(job_id);
	c->held_attempt = attempt;
}

static void
release(struct client *c, const char *step)
{
	record_step(c->worker, c->peer.pid, step, c->held_job, c->held_attempt, "release", SOCKET);
	idem_step_go(&c->peer);
	c->held = 0;
}

/* The first of a race has ended its attempt: release the second. */
static void
release_second(size_t ci)
{
	size_t i;

	for (i = 0; i < run.plan.nraces; i++) {
		struct race *race = &run.races[i];

		if (race->first != (int)ci || race->second < 0)
			continue;
		release(&run.clients[race->second], race->plan->step);
		race->first = race->second = -1;
	}
}

/* Where the message a client's worker works on for a race's key was
 * published: its last delivery of the key. */
static long long
client_order(size_t ci, const struct race *race)
{
	struct idem_failpoint_delivery d;
	struct idem_error err;
	size_t nsame = 0;
	int *same;
	long long order;

	database_watch_sessions();
	same = idem_peer_backends(&run.sessions, run.clients[ci].worker, &nsame);
	if (idem_failpoint_delivery(run.fp, race->plan->business_key, -1, same, nsame, &d, &err) < 0)
		idem_die_error(&err);
	free(same);
	order = publish_order(d.msg_id);
	free(d.msg_id);
	free(d.job_id);
	return order;
}

/*
 * A client at a race's step: the first to come is held until one of
 * another worker comes; then both are past their checks, and the one
 * working on the message published first goes on, the other when that one's attempt
 * has ended, so the order is the same on every run. Returns 0 for a
 * client the race does not hold.
 */
static int
meet(struct race *race, size_t ci, const struct idem_step_line *l)
{
	struct client *c = &run.clients[ci];

	if (race->held >= 0 && run.clients[race->held].worker == c->worker)
		return 0;
	record_step(c->worker, c->peer.pid, l->name, l->job_id, l->attempt, "hold", SOCKET);
	hold(c, l->job_id, l->attempt);
	if (race->held < 0) {
		race->held = (int)ci;
		return 1;
	}
	race->first = race->held;
	race->second = (int)ci;
	/* the message published first goes first, whichever came first: the
	 * same order on every run, however busy the machine */
	if (client_order(ci, race) < client_order((size_t)race->held, race)) {
		race->first = (int)ci;
		race->second = race->held;
	}
	release(&run.clients[race->first], l->name);
	race->held = -1;
	race->done = 1;
	database_disarm(race->armed);
	return 1;
}

/* One step line from a worker: go on, kill it here, or hold it for a race. */
static void
handle_step(size_t ci, const struct idem_step_line *l)
{
	struct client *c = &run.clients[ci];
	struct kill_point *kp;
	struct race *race;
	char note[64];

	if (l->problem != NULL) {
		snprintf(note, sizeof(note), "kill-at: %s; go", l->problem);
		record_log(c->worker, c->peer.pid, note, strlen(note));
		idem_step_go(&c->peer);
		return;
	}
	if ((kp = kill_for(l->name, l->job_id, l->attempt)) != NULL) {
		kill_point_reached(kp, c->worker, c->peer.pid, NULL, SOCKET);
		database_disarm(kp->armed);
		/* the worker's sessions, while it lives: its delivery is put down
		 * to its process, which a worker that sent no consumed step named
		 * nowhere else */
		database_watch_sessions();
		workers_kill(c->worker, c->peer.pid);
		return;
	}
	if ((race = race_for(l->job_id, l->name)) != NULL && meet(race, ci, l))
		return;
	if (stall_reached(l->name, l->job_id, l->attempt, &(struct held){ .observed = SOCKET,
	    .client = ci, .worker = c->worker, .pid = c->peer.pid })) {
		c->held = 1;
		return;
	}
	record_step(c->worker, c->peer.pid, l->name, l->job_id, l->attempt, "go", SOCKET);
	idem_step_go(&c->peer);
	if (strcmp(l->name, "acked") == 0) {
		release_second(ci);
		stall_told_acked(c->peer.pid, l->job_id, l->attempt);
	}
}

void
socket_accept(void)
{
	struct client c;

	memset(&c, 0, sizeof(c));
	if (idem_step_accept(&run.server, &c.peer) < 0)
		return;
	c.worker = workers_of(c.peer.pid);
	run.clients = idem_ereallocarray(run.clients, run.nclients + 1, sizeof(*run.clients));
	run.clients[run.nclients++] = c;
}

/* A worker held for a race that hangs up or dies holds nothing any more. */
static void
forget_holder(size_t ci)
{
	size_t i;

	for (i = 0; i < run.plan.nraces; i++) {
		if (run.races[i].held == (int)ci)
			run.races[i].held = -1;
		if (run.races[i].second == (int)ci)
			run.races[i].first = run.races[i].second = -1;
	}
	run.clients[ci].held = 0;
	release_second(ci);
}

void
socket_read(size_t ci)
{
	struct idem_step_line l;
	int rc;

	if (idem_step_read(&run.clients[ci].peer) < 0) {
		forget_holder(ci);
		return;
	}
	while ((rc = idem_step_next(&run.clients[ci].peer, &l)) > 0)
		handle_step(ci, &l);
	if (rc < 0)
		record_log(run.clients[ci].worker, run.clients[ci].peer.pid,
		    "kill-at: step line too long; hung up", 36);
}

void
socket_close(void)
{
	size_t i;

	for (i = 0; i < run.nclients; i++) {
		if (run.clients[i].peer.fd >= 0)
			close(run.clients[i].peer.fd);
		free(run.clients[i].held_job);
	}
	free(run.clients);
}
