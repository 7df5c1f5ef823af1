/* evidence.h: the rows kill-at(1) appends (idem-tsv(5)). The step, kill,
 * log, attempt and recover rows, the last two joined from the queue's
 * delivery log, the effect ledger and what the controller saw: what is
 * given waits in temporary files, not in memory, and the database joins
 * it at the end; a temporary file that cannot be written fails
 * idem_evidence_write. Beside them, written at once, the rows about the
 * run: the worker, the calls of the vendor double, what was missed. */
#ifndef IDEM_EVIDENCE_H
#define IDEM_EVIDENCE_H

#include <stdio.h>
#include <sys/types.h>

#include <libpq-fe.h>

#include "failpoint.h"
#include "vendor.h"
#include "error.h"

struct idem_evidence;

struct idem_evidence *idem_evidence_new(void);
void idem_evidence_free(struct idem_evidence *ev);

/* One delivery, in the order of delivery: acked_at_us is the message's ack
 * time on its last delivery, 0 otherwise. */
void idem_evidence_delivery(struct idem_evidence *ev, const char *msg_id, const char *job_id,
			    const char *business_key, long long attempt, long long delivered_at_us,
			    int backend_pid, long long acked_at_us);
/* Every delivery of the messages msg_ids (a PostgreSQL array of texts),
 * as the query sql of the queue's adapter reads them (its deliveries
 * section, whose $1 is msg_ids), in the order they were taken: run by
 * idem_evidence_write where the rows are joined, so they never leave the
 * database. Takes sql. */
void idem_evidence_deliveries_from(struct idem_evidence *ev, char *sql, const char *msg_ids);
/* The committed writes of the effect table, in any order, given here, in
 * as many calls as need be. Without them, or a query of them,
 * rows written are unknown (\N). */
void idem_evidence_ledger(struct idem_evidence *ev, const struct idem_failpoint_write *writes,
			  size_t n);
/* Instead, the same grouped by transaction and business key already, as
 * the query that ready(ctx, &sql, err) gives once they are (the columns
 * of idem_failpoint_grouped_ledger): called by idem_evidence_write when it
 * has read the deliveries, so that the two are made at once, and run
 * where the rows are joined. */
void idem_evidence_grouped_ledger(struct idem_evidence *ev,
				  int (*ready)(void *ctx, const char **sql, struct idem_error *err),
				  void *ctx);
/* A session the controller saw, and the worker process that owns it. */
void idem_evidence_backend(struct idem_evidence *ev, int backend_pid, long long backend_start_us,
			   int worker, pid_t pid);
/* A step a worker sent on the step socket, or a session held at a point
 * of the database: action and observed are kept as given (static text).
 * A "consumed" step of the socket names the process of its delivery. */
void idem_evidence_step(struct idem_evidence *ev, long long at_us, int worker, pid_t pid,
			const char *name, const char *job_id, long long attempt,
			const char *action, const char *observed);
/* A line a worker wrote, or a note of the controller; bytes that are not
 * UTF-8 become '?'. Its branch=, job=, attempt= and msg_id= count. */
void idem_evidence_log(struct idem_evidence *ev, long long at_us, int worker, pid_t pid,
		       const char *line, size_t len);
/* Prints the lines of one process, one a line. */
void idem_evidence_print_log(const struct idem_evidence *ev, FILE *out, pid_t pid);
/* A kill: of the delivery msg_id when it is known (the database saw it),
 * else of the delivery of job and attempt that pid consumed. observed is
 * kept as given; kills, a few a run, are kept in memory. */
void idem_evidence_kill(struct idem_evidence *ev, const char *scenario, const char *job_id,
			long long attempt, const char *step, const char *msg_id, pid_t pid,
			long long killed_at_us, const char *observed);

/* Writes the step, kill, log, attempt and recover rows, in that order:
 * the attempt rows joined by PostgreSQL on conn, in temporary tables of a
 * transaction of its own. -1 with err set on a write or database error. */
int idem_evidence_write(struct idem_evidence *ev, PGconn *conn, FILE *out,
			struct idem_error *err);

/* The worker row: the argument vector executed, the file it runs and the
 * first later argument that names a regular file, with their hashes. For
 * a command text run by the shell (command not NULL), the words of the
 * text, split at blanks, stand for the arguments. -1 on a write error. */
int idem_evidence_worker(FILE *out, char *const *argv, const char *command);

/* The call rows: every request the vendor double took, with its number
 * and when its answer went, their times moved by skew_us onto the
 * database's clock. -1 on a write error. */
int idem_evidence_calls(FILE *out, struct idem_vendor_call *const *calls, size_t n,
			long long skew_us);

/* A forgot row: a key the vendor double forgot at at_us (the database's
 * clock), of business_key, first sent by call first_call, its window
 * window_ms. -1 on a write error. */
int idem_evidence_forgot(FILE *out, long long at_us, const char *business_key,
			 const char *idempotency_key, long first_call, long long window_ms);

/* A missed row: what ("kill" or "race"), its scenario, the job (or the
 * business key of a race), the attempt (0 for none) and the step. -1 on a
 * write error. */
int idem_evidence_missed(FILE *out, const char *what, const char *scenario, const char *id,
			 long long attempt, const char *step);

#endif
