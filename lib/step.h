/* step.h: both sides of the step protocol (man/idem-step.7) */
#ifndef IDEM_STEP_H
#define IDEM_STEP_H

#include <sys/types.h>

#include "util.h"

/*
 * Tells the controller named by IDEM_STEP_SOCK that the worker reached a
 * step, and waits for "go". Returns 0 to go on, -1 with errno set when the
 * controller cannot be reached or hung up. When IDEM_STEP_SOCK is unset or
 * empty it does nothing and returns 0, so production code can keep the
 * calls. A worker killed at a step never returns from here.
 */
int idem_step(const char *name, const char *job_id, long long attempt);

/* Closes the connection to the controller, if any. */
void idem_step_close(void);

/* The controller's side, as kill-at(1) runs it. */
struct idem_step_server {
	char dir[96], path[128];	/* a private directory and the socket in it */
	int fd;
};

/* A worker's connection: its process id from the kernel (SO_PEERCRED),
 * and what it sent that is not yet a line. */
struct idem_step_peer {
	int fd;				/* -1 once closed */
	pid_t pid;
	char buf[4096], line[4096];
	size_t len;
};

/* A step line: its fields, decoded, in the peer's buffer; or problem, the
 * reason it is not one ("not a step line", "bad escape in a step line"). */
struct idem_step_line {
	const char *name, *job_id;
	long long attempt;
	const char *problem;
};

/* Listens on step.sock in a new directory "$TMPDIR/kill-at.XXXXXX" (mode
 * 0700); the socket is non-blocking. */
int idem_step_listen(struct idem_step_server *s, struct idem_error *err);
/* Removes the socket and its directory; safe to call more than once. */
void idem_step_unlisten(struct idem_step_server *s);
/* Accepts a connection into p; -1 when there is none to accept. */
int idem_step_accept(struct idem_step_server *s, struct idem_step_peer *p);
/* Reads what the peer sent; -1 when it hung up (p->fd is then closed). */
int idem_step_read(struct idem_step_peer *p);
/* The next whole line, into l: 1; 0 when there is none yet; -1 when the
 * peer sent 4095 bytes without a newline (it is then hung up on). */
int idem_step_next(struct idem_step_peer *p, struct idem_step_line *l);
/* Answers "go"; a peer that cannot be written to is closed. */
void idem_step_go(struct idem_step_peer *p);

#endif
