/* baseline.h: the sequential baseline (kill-at(1), THE BASELINE): the
 * jobs in no fault scenario, up to a limit, run first with one worker, and
 * their effects are counted before any fault is forced. */
#ifndef IDEM_BASELINE_H
#define IDEM_BASELINE_H

#include <stdint.h>
#include <stdio.h>

#include <libpq-fe.h>

#include "map.h"
#include "queue.h"
#include "error.h"

enum idem_baseline_result { IDEM_BASELINE_NONE, IDEM_BASELINE_PASSED, IDEM_BASELINE_FAILED };

/* How many jobs a baseline has at most, unless told (kill-at -b). */
#define IDEM_BASELINE_JOBS 1000

struct idem_baseline {
	int job_scope;			/* one effect per job, not per business key */
	long long limit;		/* at most this many jobs; 0: every one it may have */
	/* the jobs and their messages, as the stream has them, in a
	 * temporary file: a run's memory does not grow with them */
	FILE *spool;
	int spool_errno;		/* the first error writing it, or 0 */
	struct idem_map fault_jobs;	/* jobs a fault is planned for */
	struct idem_map fault_keys;	/* business keys of the jobs in a fault */
	/* the plan: the baseline's keys and messages, and the others */
	char **keys;
	long long *expected, *observed;
	size_t nkeys;
	char *ids, *held_ids;		/* text arrays of msg ids */
	long long jobs, messages;
	/* the result */
	enum idem_baseline_result result;
	long long unacked, effects_expected, effects_observed, duplicates, missing;
};

void idem_baseline_init(struct idem_baseline *b);
void idem_baseline_free(struct idem_baseline *b);

/* What the stream says: a job (fault: it is in a fault scenario) and a
 * message published for it. */
void idem_baseline_job(struct idem_baseline *b, const char *job_id, const char *business_key,
		       int fault);
void idem_baseline_message(struct idem_baseline *b, const char *job_id, const char *msg_id);
/* A job or a business key a fault is planned for, beyond the scenarios. */
void idem_baseline_fault_job(struct idem_baseline *b, const char *job_id);
void idem_baseline_fault_key(struct idem_baseline *b, const char *business_key);

/* Splits the jobs: the first limit of those in no fault, whose business
 * key no job in a fault shares, are the baseline; the others wait with the
 * faults. Returns the number of its jobs, or SIZE_MAX (errno set) when
 * the temporary file of the stream's jobs could not be written or read. */
size_t idem_baseline_plan(struct idem_baseline *b);

/* Hides every message but the baseline's from the workers until let_go
 * (the adapter's hold-back and let-go sections). */
int idem_baseline_hold_back(const struct idem_baseline *b, const struct idem_queue *q,
			    PGconn *conn, struct idem_error *err);
int idem_baseline_let_go(const struct idem_baseline *b, const struct idem_queue *q,
			 PGconn *conn, struct idem_error *err);

/* Counts the effects of the baseline's keys in the effect table once the
 * baseline has run, every row of each key as count-effects(1) counts them
 * (a table that does not exist counts none); judge says whether it
 * passed: every message of the baseline acked, and every key with as many
 * effects as expected. */
int idem_baseline_count(struct idem_baseline *b, PGconn *conn, const char *effect_table,
			const char *key_columns, struct idem_error *err);
int idem_baseline_judge(struct idem_baseline *b, const struct idem_queue *q, PGconn *conn,
			struct idem_error *err);

/* The baseline row (idem-tsv(5)); -1 on a write error. */
int idem_baseline_write(const struct idem_baseline *b, FILE *out);
/* Names on out each key whose count was not what the baseline expects, at
 * most max of them. */
void idem_baseline_explain(const struct idem_baseline *b, FILE *out, size_t max);

#endif
