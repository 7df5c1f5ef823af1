/* run.c: the run in progress, and what its modules share (run.h) */
#include <limits.h>
#include <string.h>

#include "run.h"
#include "lease.h"
#include "text.h"

struct run run;

long long
db_now(void)
{
	return idem_now_us() + run.skew_us;
}

struct kill_point *
kill_for(const char *step, const char *job_id, long long attempt)
{
	size_t n;

	for (n = idem_map_get(&run.plan.kill_index, job_id); n != IDEM_MAP_NONE;
	     n = run.plan.kills[n].next)
		if (!run.kills[n].fired && run.plan.kills[n].attempt == attempt &&
		    strcmp(run.plan.kills[n].step, step) == 0)
			return &run.kills[n];
	return NULL;
}

void
kill_point_reached(struct kill_point *kp, int worker, pid_t pid, const char *msg_id,
		   const char *observed)
{
	record_step(worker, pid, kp->plan->step, kp->plan->job_id, kp->plan->attempt, "kill",
	    observed);
	kp->fired = 1;
	kp->pid = pid;
	kp->worker = worker;
	kp->killed_at = db_now();
	kp->msg_id = msg_id ? idem_estrdup(msg_id) : NULL;
	kp->observed = observed;
	lease_killed(worker, pid, msg_id, kp->plan->job_id, kp->plan->attempt, kp->plan->forget_ms);
}

long long
publish_order(const char *msg_id)
{
	size_t i = msg_id ? idem_plan_msg(&run.plan, msg_id) : IDEM_MAP_NONE;

	return i == IDEM_MAP_NONE ? LLONG_MAX : (long long)i;
}

void
record_step(int worker, pid_t pid, const char *name, const char *job_id, long long attempt,
	    const char *action, const char *observed)
{
	/* a step of any process of the worker's: it got a delivery */
	if (worker >= 0 && worker < run.nworkers)
		run.workers[worker].stepped = 1;
	idem_evidence_step(run.ev, db_now(), worker, pid, name, job_id, attempt, action, observed);
}

void
record_log(int worker, pid_t pid, const char *text, size_t len)
{
	idem_evidence_log(run.ev, db_now(), worker, pid, text, len);
}
