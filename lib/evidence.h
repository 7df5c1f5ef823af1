/* evidence.h: the attempt and recover rows of kill-at(1), joined from the
 * queue's delivery log, the effect ledger and what the controller saw */
#ifndef IDEM_EVIDENCE_H
#define IDEM_EVIDENCE_H

#include <stdio.h>
#include <sys/types.h>

#include <libpq-fe.h>

#include "failpoint.h"
#include "util.h"

struct idem_evidence;

struct idem_evidence *idem_evidence_new(void);
void idem_evidence_free(struct idem_evidence *ev);

/* One delivery, in the order of delivery: acked_at_us is the message's ack
 * time on its last delivery, 0 otherwise. */
void idem_evidence_delivery(struct idem_evidence *ev, const char *msg_id, const char *job_id,
			    const char *business_key, long long attempt, long long delivered_at_us,
			    int backend_pid, long long acked_at_us);
/* Every delivery of the messages msg_ids (a PostgreSQL array text, "{1,2}")
 * from idem.delivery. */
int idem_evidence_read_deliveries(struct idem_evidence *ev, PGconn *conn, const char *msg_ids,
				  struct idem_error *err);
/* The committed writes of the effect table. Without them, rows written
 * are unknown (\N). */
void idem_evidence_ledger(struct idem_evidence *ev, const struct idem_failpoint_write *writes,
			  size_t n);
/* A session the controller saw, and the worker process that owns it. */
void idem_evidence_backend(struct idem_evidence *ev, int backend_pid, long long backend_start_us,
			   int worker, pid_t pid);
/* A "consumed" step a worker sent on the step socket. */
void idem_evidence_consumed(struct idem_evidence *ev, const char *job_id, long long attempt,
			    pid_t pid);
/* A line a worker wrote; its branch=, job=, attempt= and msg_id= count. */
void idem_evidence_log(struct idem_evidence *ev, const char *line);
/* A kill: of the delivery msg_id when it is known (the database saw it),
 * else of the delivery of job and attempt that pid consumed. */
void idem_evidence_kill(struct idem_evidence *ev, const char *job_id, long long attempt,
			const char *msg_id, pid_t pid, long long killed_at_us);

/* Writes the attempt rows, then the recover rows. -1 on a write error. */
int idem_evidence_write(struct idem_evidence *ev, FILE *out);

#endif
