/* plan.h: what kill-at(1) is to do, from its input stream and options:
 * the seed's queue, effect and worker, the jobs a fault is planned for,
 * every message, and the kill points, races, stalls and vendor faults
 * they make (a vendor-forget-keys scenario makes a kill point that makes
 * the vendor forget).
 * The plan does not change once made; what becomes of each kill point and
 * race is the conductor's (kill-at.c). */
#ifndef IDEM_PLAN_H
#define IDEM_PLAN_H

#include <stdio.h>

#include "baseline.h"
#include "map.h"
#include "pg.h"
#include "queue.h"
#include "error.h"
#include "vendor.h"

struct idem_plan_job {
	char *id, *business_key;
	long scenario;			/* its index in the scenarios, or -1 */
	long long copies;		/* messages published for it */
	size_t first_msg;		/* its first message in planned, or IDEM_MAP_NONE */
};

/* A message of a job the plan keeps: its lease is the plan's. */
struct idem_plan_msg {
	char *msg_id;
	size_t job;			/* its job's index */
	long long copy;
	size_t next;			/* the job's next message, or IDEM_MAP_NONE */
};

struct idem_plan_kill {
	char *scenario, *step, *job_id;
	long long attempt;
	/* vendor-forget-keys: the vendor's window for idempotency keys, passed
	 * for the job's business key when the killed attempt's lease ends;
	 * else 0 */
	long long forget_ms;
	size_t next;			/* the job's next kill point, or IDEM_MAP_NONE */
};

/* An attempt to hold alive at a step while its lease expires, until the
 * redelivered attempt is acked or reaches until (NULL: its ack). */
struct idem_plan_stall {
	char *scenario, *step, *job_id, *until;
	long long attempt;
};

struct idem_plan_race {
	char *scenario, *business_key, *step;
};

struct idem_plan_fault {
	char *business_key;
	enum idem_vendor_fault fault;
	long long delay_ms;		/* a late answer's delay, else 0 */
};

struct idem_plan {
	/* the seed row */
	char *queue, *queue_kind, *owner, *effect_table, *key_columns;
	char *adapter, *adapter_sha256;	/* the seed row's adapter file, or NULL */
	char *worker_command;		/* NULL when the seed names none */
	char *account;			/* the sandbox account, or NULL */
	char *database;			/* the seed's conninfo, or NULL */
	/* the database row, when the stream has one: the database it names */
	struct idem_pg_observed stream_db;
	int have_stream_db;
	long long visibility_timeout_ms, max_attempts;
	/* the external effect, when the seed declares one */
	char *external_name, *external_key_fields;
	int honours_idempotency_key;
	/* the scenario rows */
	char **scenario_names, **scenario_faults, **scenario_steps, **scenario_untils;
	long long *scenario_attempts, *scenario_vendor_ms;	/* 0 for none */
	size_t nscenarios;
	/* the jobs in a scenario or named by -k (every job when all_jobs) */
	struct idem_plan_job *jobs;
	size_t njobs;
	struct idem_map job_index;	/* job id: its index */
	struct idem_text_array msgs;	/* every msg_id */
	struct idem_plan_msg *planned;	/* the messages of the jobs kept */
	size_t nplanned;
	struct idem_map msg_index;	/* msg_id: its index in planned */
	/* made from them */
	struct idem_plan_kill *kills;
	size_t nkills;
	struct idem_map kill_index;	/* job id: its first kill point */
	struct idem_plan_race *races;
	size_t nraces;
	struct idem_map race_index;	/* business key: its race */
	struct idem_plan_stall *stalls;
	size_t nstalls;
	struct idem_plan_fault *faults;
	size_t nfaults;
};

/*
 * Reads the stream from in (named name in messages), copying every line
 * to hold unchanged, and keeps what the run needs; the baseline is given
 * every job and message. kill_options are the -k specifications
 * (step:job:attempt), whose jobs are kept. -1 with err set on a bad
 * stream (IDEM_EXIT_USAGE), one with no publish row, or an error writing
 * hold (IDEM_EXIT_ENV).
 */
int idem_plan_read(struct idem_plan *p, FILE *in, const char *name, FILE *hold,
		   char *const *kill_options, size_t nkill_options, int all_jobs,
		   struct idem_baseline *base, struct idem_error *err);

/* The kill points, races and stalls: the stream's scenarios, then -r (race_step,
 * or NULL) and the -k options. -1 with err set (IDEM_EXIT_USAGE) on a bad
 * option. */
int idem_plan_make(struct idem_plan *p, char *const *kill_options, size_t nkill_options,
		   const char *race_step, struct idem_error *err);

/* The steps of idem-step(7) that the kill points, races and stalls use, as a
 * mask of 1 << idem_failpoint_step(step): the database points to install. */
unsigned idem_plan_database_steps(const struct idem_plan *p);

/* Tells the baseline the jobs and business keys of every fault, which it
 * leaves to the run after it. */
void idem_plan_tell_baseline(const struct idem_plan *p, struct idem_baseline *base);

/* The job of an id, when the plan keeps it. */
const struct idem_plan_job *idem_plan_job(const struct idem_plan *p, const char *id);
/* The index in planned of a message of a job kept, or IDEM_MAP_NONE. */
size_t idem_plan_msg(const struct idem_plan *p, const char *msg_id);
/* The race of a business key, or NULL. */
const struct idem_plan_race *idem_plan_race(const struct idem_plan *p, const char *business_key);

/* The steps a worker may be stopped at, for idem-step(7)'s plan: each kill
 * point's; for every job of a raced key the race's step and the acked
 * step that ends its attempt; for a stalled job, its stall's step and
 * until step, and the acked step. The arrays are the caller's to free; their
 * texts are the plan's. */
void idem_plan_steps(const struct idem_plan *p, const char ***names, const char ***job_ids,
		     size_t *n);

void idem_plan_free(struct idem_plan *p);

#endif
