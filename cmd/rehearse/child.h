/* child.h: the programs rehearse(1) runs, each a child in a process group
 * of its own with its standard error passed on line by line; when one
 * fails the others are stopped, and an interrupt is passed on as the
 * caller asks */
#ifndef REHEARSE_CHILD_H
#define REHEARSE_CHILD_H

#include <stddef.h>
#include <sys/types.h>

#define CHILD_MAX 8		/* the most child_run_pipeline runs at once */

/* What an interrupt does to the children that run. */
enum on_interrupt {
	CHILD_STOP,	/* the signal is passed on; SIGKILL after the grace */
	CHILD_FINISH,	/* passed on, never SIGKILL: mkrecord makes its record whole */
	CHILD_HOLD,	/* not passed on: the sandbox's start and stop run to their end */
};

/* A program rehearse runs, from its start to its reaping. */
struct child {
	const char *name;	/* as a failure names it */
	const char *command;	/* shell text, run as bash -c "exec COMMAND" */
	pid_t pid;		/* also its process group */
	int ended, status;	/* its wait status once reaped */
	int after_signal;	/* reaped after rehearse signalled it */
	int may_find;		/* its exit 1 is a finding the record shows */
	int err_fd;		/* its standard error, passed on line by line */
	int log_fd;		/* and kept there (child_keep_logs), or -1 */
	char partial[4096];	/* a line not yet ended */
	size_t partial_len;
	char last[1024];	/* its last line */
	char message[1024];	/* its last line that begins "PROGRAM: " */
};

/* SIGINT, SIGTERM and SIGHUP are read from a signalfd, in the loop that
 * waits for the children, as SIGCHLD is; nothing runs in a handler. */
void child_catch_signals(void);
/* The first of SIGINT, SIGTERM and SIGHUP that came, or 0. */
int child_interrupted(void);

/*
 * Runs the children (a pipeline when there are several, at most
 * CHILD_MAX), each one's standard output into the next one's input: the
 * first reads /dev/null, the last writes to out_fd, or with its standard
 * error when out_fd is -1. Their standard error is passed on until every
 * one has ended. When one fails, the others get SIGTERM, and SIGKILL after
 * a grace; an interrupt is passed on as mode says. The last child's exit 1
 * is a finding, not a failure, when last_may_find. Returns the index of
 * the child whose failure ended the run, or -1; the caller looks at
 * child_interrupted() first.
 */
int child_run_pipeline(struct child *c, int n, int out_fd, enum on_interrupt mode,
		       int last_may_find);
/* Runs one command to its end; returns what child_run_pipeline does. */
int child_run(struct child *c, const char *name, const char *command, int out_fd,
	      enum on_interrupt mode);

/* From now on each child's standard error is also kept in a file of dir,
 * named after the child: NAME.stderr, a word of the name a word of the
 * file name. */
void child_keep_logs(const char *dir);

/* The status a child's end calls for: its exit status, 128+N for signal N. */
int child_status(const struct child *c);
/* Names the child that failed, how, and its last word; returns its status. */
int child_report_failure(const struct child *c);

/* Waits until no process this run started is left, adopted ones too (as
 * the subreaper of the run), sending SIGKILL to those that outlive a
 * grace. */
void child_wait_all(void);

#endif
