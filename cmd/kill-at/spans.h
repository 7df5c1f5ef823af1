/* spans.h: the workers' spans in a run (kill-at(1), THE SPAN RECEIVER):
 * the receiver started unless told not to or the user's environment
 * names a collector, the OpenTelemetry variables given to each worker, the
 * wait before a kill for a worker's finished spans, and at the end the
 * span rows put down to their attempts, the span_lost rows of the killed
 * attempts and the receiver row */
#ifndef KILL_AT_SPANS_H
#define KILL_AT_SPANS_H

#include <stdio.h>
#include <sys/types.h>

/* the longest wait before a kill, whatever the batch delay */
#define SPANS_QUIET_MAX_US 1000000LL

/* Starts the receiver, or notes why not: off, or the user's endpoint. */
void spans_start(int off);
/* Sets the worker's OpenTelemetry variables: called in the child. */
void spans_setenv(void);
/* The workers' process groups, by index. */
void spans_workers(const pid_t *groups, int n);
/* Waits, at most SPANS_QUIET_MAX_US, until nothing new came from process
 * pid for two batch delays: it is about to be killed. */
void spans_before_kill(pid_t pid);
/* Stops the receiver and appends the span, span_lost and receiver rows
 * to out, whose attempt rows begin at offset attempts_from. -1 on a read
 * or write error. */
int spans_write(FILE *out, long attempts_from);
void spans_free(void);

#endif
