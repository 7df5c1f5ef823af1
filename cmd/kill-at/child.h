/* child.h: a worker process under kill-at(1)'s control: started in a
 * process group of its own, which the watchdog kills however kill-at
 * ends, its output read from a pipe line by line, signalled as a group */
#ifndef KILL_AT_CHILD_H
#define KILL_AT_CHILD_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

#define TAIL_LINES 5
#define TAIL_LINE_MAX 400

struct child {
	pid_t pid;			/* 0 when not running */
	int out;			/* its stdout and stderr, or -1 */
	char *partial;			/* a log line not yet ended */
	size_t partial_len;
	int killed;			/* killed by us at a step: restart it */
	int restarts;
	int stepped;			/* this process reported a step */
	/* the last lines of this process's output, for the message when it
	 * keeps dying: a ring of TAIL_LINES lines cut at TAIL_LINE_MAX bytes */
	char tail[TAIL_LINES][TAIL_LINE_MAX];
	int tail_next, tail_count;
};

/* What the child does before it executes the command: its environment. */
typedef void child_setup(void *ctx);
/* A line of the worker's output, without its newline. */
typedef void child_line(void *ctx, const char *text, size_t len);

/* Starts the command as the worker, with stdin from /dev/null, killed
 * when kill-at dies, and tells the watchdog of its group. */
int child_start(struct child *w, char *const *command, int watchdog_fd,
		      child_setup *setup, void *ctx, struct idem_error *err);
/* Hands the complete lines of output that are there to line; final: all
 * of it, to the end, then closes the pipe. */
void child_read(struct child *w, int final, child_line *line, void *ctx);
/* Signals the worker's process group, when it runs. */
void child_signal(const struct child *w, int sig);
/* The worker was reaped: not running, and the watchdog told. */
void child_ended(struct child *w, int watchdog_fd);
/* The index among n workers of the one a process is or belongs to; -1. */
int child_of(const struct child *workers, int n, pid_t pid);

/* Starts a watchdog: a process in a group of its own that ignores SIGINT,
 * SIGTERM and SIGHUP. Write it a pid_t: a positive one is a process group
 * to watch, a negative one a group gone. When the returned pipe closes,
 * however its writer ends, it sends SIGKILL to every group still watched
 * (at most max_groups), removes the files and empty directories named in
 * leftovers (NULL-terminated, in order; NULL for none: what a writer that
 * was killed could not remove) and exits. -1 with err set on failure. */
int child_watchdog(size_t max_groups, const char *const *leftovers, struct idem_error *err);

#endif
