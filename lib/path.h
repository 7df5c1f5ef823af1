/* path.h: the path of a rehearsal, job by job: the kill points and stalls
 * it reached, on which attempt, and the outcome and branch of each attempt, as
 * mkrecord(1) writes them in a record and verify-record(1) --rerun
 * compares them with a rerun's stream */
#ifndef IDEM_PATH_H
#define IDEM_PATH_H

#include <stddef.h>

#include <jansson.h>

/* The outcome of an attempt (an object with job, attempt, pid and msg):
 * "killed at STEP" when a kill (job, attempt, step, pid, killed_at) of its
 * job and attempt killed its process, or a recover row (msg, killed_at)
 * names its message at that kill; else "acked" when acked_at is not null,
 * else "not acked". */
void idem_path_outcome(const json_t *attempt, const json_t *kills, const json_t *recovers,
		       char *out, size_t size);

/* One side of a comparison: its kill points (job, attempt, step), its
 * attempts in order (job, attempt, outcome, branch), what it missed
 * (what, job, attempt, step) and its stalls (job, attempt, step,
 * release); stalls may be NULL, as for a record before format 7. Its
 * rekeyed business keys (business_key, keys, effects) and its pending
 * checks (business_key, result) may be NULL, as for a record before
 * format 8: they are then not compared. */
struct idem_path {
	const json_t *kills, *attempts, *missed, *stalls, *rekeyed, *pending;
};

/* The differences between two paths: one line per difference,
 * "JOB: record ..., rerun ...", in the order of the jobs, then
 * "BUSINESS-KEY: ..." for the keys the calls sent and the pending checks:
 * which business keys changed their Idempotency-Key, with how many keys
 * and effects (not the keys themselves, which may be made of the time),
 * and each pending check's result. Caller decrefs. */
json_t *idem_path_diff(const struct idem_path *record, const struct idem_path *rerun);

#endif
