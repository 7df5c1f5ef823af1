/* run.h: the run that kill-at.c conducts, as the modules of its room
 * share it: the plan and what becomes of each kill point and race, the
 * workers, the step socket's clients, the database's side, the vendor
 * double, and the evidence of what was seen */
#ifndef KILL_AT_RUN_H
#define KILL_AT_RUN_H

#include <stdio.h>
#include <sys/types.h>

#include <libpq-fe.h>

#include "baseline.h"
#include "child.h"
#include "evidence.h"
#include "failpoint.h"
#include "peer.h"
#include "pg.h"
#include "plan.h"
#include "queue.h"
#include "role.h"
#include "step.h"
#include "vendor.h"

#define MAX_WORKERS 16
#define MAX_RESTARTS 20

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

/* A worker's connection to the step socket. */
struct client {
	struct idem_step_peer peer;
	int worker;
	int held;			/* waiting for the race partner */
	char *held_job;
	long long held_attempt;
};

extern struct run {
	/* what to do, from the stream and the options */
	struct idem_plan plan;
	struct kill_point *kills;	/* one a kill point of the plan */
	struct race *races;		/* one a race of the plan */
	/* the run */
	struct idem_queue q;		/* the queue's adapter */
	struct idem_vendor *vendor;	/* the vendor double */
	const char *conninfo;
	PGconn *conn;
	struct idem_pg_observed here;	/* what was read of the database */
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
	long long bound_us;		/* the longest wait for an event of the plan */
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
} run;

/* The time on the database's clock, in microseconds. */
long long db_now(void);
/* The kill point, not fired yet, of a step, job and attempt. */
struct kill_point *kill_for(const char *step, const char *job_id, long long attempt);
/* A kill point reached, by a worker (-1: none of them) and its process,
 * in the delivery msg_id when the database saw it (else NULL), observed
 * where: its step row, and what becomes of it. The caller kills. */
void kill_point_reached(struct kill_point *kp, int worker, pid_t pid, const char *msg_id,
			const char *observed);
/* Where a message of the plan was published among them (its publish
 * row's place: job by job, copy by copy); LLONG_MAX for another, or NULL. */
long long publish_order(const char *msg_id);
/* The evidence of a step and of a line, at the database's time now. */
void record_step(int worker, pid_t pid, const char *name, const char *job_id, long long attempt,
		 const char *action, const char *observed);
void record_log(int worker, pid_t pid, const char *text, size_t len);

#endif
