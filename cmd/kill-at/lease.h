/* lease.h: the clock of the run (kill-at(1), THE CLOCK). The leases of
 * the plan's messages last until kill-at ends them, through the queue
 * adapter's hold-lease and expire sections: once a killed attempt's
 * process is gone, when an attempt stalls, when a worker exits on its
 * own. A forced duplicate's copy is let go when its original is acked.
 * When a killed attempt's lease ends, the vendor's window for its
 * business key's idempotency keys may pass too (vendor-forget-keys). */
#ifndef KILL_AT_LEASE_H
#define KILL_AT_LEASE_H

#include <stdio.h>
#include <sys/types.h>

/* The plan's messages, whose leases the plan holds from now on; the
 * copies to hold back chosen. Once the run's schema is installed. */
void leases_install(void);

/* The copies whose originals are not acked yet, held back: before the
 * workers of the run after the baseline start. */
void leases_hold_copies(void);

/* Lets go the copies whose originals were acked since the last look. */
void leases_watch(void);

/* Whether a copy is still held back. */
int leases_copies_held(void);

/* A kill point reached in process pid of a worker (-1: none of them): the
 * lease of the delivery killed (msg_id, or the worker's last delivery of
 * the job's key when NULL) ends once the worker is gone; with forget_ms,
 * the vendor forgets the job's business key's idempotency keys just
 * before, at the same time, as if that window had passed. */
void lease_killed(int worker, pid_t pid, const char *msg_id, const char *job_id,
		  long long attempt, long long forget_ms);

/* A worker is gone, killed by kill-at or not: the leases of its killed
 * deliveries end, and those of the deliveries it still held when it
 * exited on its own. */
void leases_worker_gone(int worker, int killed);

/* Ends the lease of a delivery now, for why (a word of the lease row:
 * kill, stall, exit, bound); returns whether the queue had it to end. */
int lease_expire(const char *msg_id, const char *job_id, long long attempt, const char *why);

/* At the deadline: the leases held still, which reached their bound. */
void leases_bound(void);

/* The lease rows. -1 on a write error. */
int leases_write(FILE *out);

void leases_free(void);

#endif
