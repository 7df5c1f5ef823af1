/* step.h: both sides of the step protocol (man/idem-step.7) */
#ifndef IDEM_STEP_H
#define IDEM_STEP_H

#include <sys/types.h>

#include "map.h"
#include "error.h"

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

/*
 * The plan (IDEM_STEP_PLAN in idem-step(7)): the steps the controller
 * wants to hear, one line NAME<TAB>JOB_ID<LF> each, both escaped as
 * idem-tsv(5) fields. idem_step() reads it on its first call and sends
 * only the steps on it; without a plan, or with one it cannot read, it
 * sends every step.
 *
 * Puts each line of text into m as a key "NAME<TAB>JOB_ID"; -1 when a
 * line is not two fields or the text does not end with a newline (m then
 * holds what came before).
 */
int idem_step_plan_parse(struct idem_map *m, const char *text, size_t len);

/* The controller's side, as kill-at(1) runs it. */
struct idem_step_server {
	char dir[96], path[128];	/* a private directory and the socket in it */
	char plan[128];			/* the plan, once written */
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
/* Writes the plan into the server's directory: the n steps of names[i]
 * and job_ids[i], in this order, duplicates once. */
int idem_step_plan_write(struct idem_step_server *s, const char *const *names,
			 const char *const *job_ids, size_t n, struct idem_error *err);
/* Removes the socket, the plan and their directory; safe to call more
 * than once. */
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
