/* worker.h: a worker process under kill-at(1)'s control: started in a
 * process group of its own, which the watchdog kills however kill-at
 * ends, its output read from a pipe line by line, signalled as a group */
#ifndef IDEM_WORKER_H
#define IDEM_WORKER_H

#include <stddef.h>
#include <sys/types.h>

#include "util.h"

struct idem_worker {
	pid_t pid;			/* 0 when not running */
	int out;			/* its stdout and stderr, or -1 */
	char *partial;			/* a log line not yet ended */
	size_t partial_len;
	int killed;			/* killed by us at a step: restart it */
	int restarts;
};

/* What the child does before it executes the command: its environment. */
typedef void idem_worker_setup(void *ctx);
/* A line of the worker's output, without its newline. */
typedef void idem_worker_line(void *ctx, const char *text, size_t len);

/* Starts the command as the worker, with stdin from /dev/null, killed
 * when kill-at dies, and tells the watchdog of its group. */
int idem_worker_start(struct idem_worker *w, char *const *command, int watchdog_fd,
		      idem_worker_setup *setup, void *ctx, struct idem_error *err);
/* Hands the complete lines of output that are there to line; final: all
 * of it, to the end, then closes the pipe. */
void idem_worker_read(struct idem_worker *w, int final, idem_worker_line *line, void *ctx);
/* Signals the worker's process group, when it runs. */
void idem_worker_signal(const struct idem_worker *w, int sig);
/* The worker was reaped: not running, and the watchdog told. */
void idem_worker_ended(struct idem_worker *w, int watchdog_fd);
/* The index among n workers of the one a process is or belongs to; -1. */
int idem_worker_of(const struct idem_worker *workers, int n, pid_t pid);

#endif
