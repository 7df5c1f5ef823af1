/* step.h: the worker side of the step protocol (man/idem-step.7) */
#ifndef IDEM_STEP_H
#define IDEM_STEP_H

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

#endif
