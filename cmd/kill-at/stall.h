/* stall.h: the stalls of the run (kill-at(1), THE STALL): an attempt held
 * alive at its step while its lease expires, so that the queue delivers
 * the job again; released once the redelivered attempt is acked, reaches
 * the scenario's until step, or waits on a lock the stalled attempt
 * holds; done once the released attempt has ended. A wait past the bound
 * ends it too, and is a finding. */
#ifndef KILL_AT_STALL_H
#define KILL_AT_STALL_H

#include <stdio.h>
#include <sys/types.h>

/* An attempt kill-at holds at a step, and how it lets it go. */
struct held {
	const char *observed;		/* database, socket or vendor */
	int slot;			/* database: the held session's slot */
	int backend_pid;		/* database: the held session */
	long call;			/* vendor: the call held */
	size_t client;			/* socket: the client held */
	int worker;
	pid_t pid;
	char *msg_id;			/* NULL: looked up when held */
};

/* Arms the database points and the vendor double for the stalls. */
void stalls_arm(void);

/* The jobs of the stalls but the first, held back: each goes when the
 * stall before it is over, so that a worker is free to take its job
 * again. Before the workers of the run after the baseline start. */
void stalls_hold_back(void);

/* An attempt (job_id, attempt) at step, held as h says: 1 when a stall
 * holds it, and the caller lets it not go on; 0 when no stall wants it. */
int stall_reached(const char *step, const char *job_id, long long attempt, struct held *h);

/* Whether a stall holds a session of the database, or a call of the
 * vendor double. */
int stall_holds_backend(int backend_pid);
int stall_holds_call(long call);

/* A worker told the acked step of an attempt. */
void stall_told_acked(pid_t pid, const char *job_id, long long attempt);

/* Releases the stalled attempts whose redelivered attempts were acked, or
 * wait on them, and finds which released ones have ended. */
void stalls_watch(void);

/* Whether every stall of a job is over (or it has none). */
int stall_over(const char *job_id);

/* How many stalls are over. */
size_t stalls_over(void);

/* Whether every stall was reached and has ended. */
int stalls_done(void);

/* At the run's end: every attempt still held goes, its release the
 * bound; those released are done. */
void stalls_end(void);
/* The stall rows of the stalls reached; with missed, instead, a missed
 * row for each stall never reached. -1 on a write error. */
int stalls_write(FILE *out, int missed);

void stalls_free(void);

#endif
