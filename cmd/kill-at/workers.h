/* workers.h: kill-at's workers (run.workers): started with the
 * environment of idem-step(7), their output read into log rows, started
 * again when killed at a step or dead on their own, stopped; and the
 * watchdog that kills them however kill-at ends */
#ifndef KILL_AT_WORKERS_H
#define KILL_AT_WORKERS_H

#include <sys/types.h>

/* Starts the watchdog, which also removes the step socket and its plan
 * when kill-at could not. */
void workers_watchdog(void);
/* Starts worker index. */
void workers_start(int index);
/* Reads what worker index wrote; final: all of it, as it has ended. */
void workers_read(int index, int final);
/* Reaps the workers that ended: one killed at a step, or one that died
 * on its own while the run goes on, is started again. */
void workers_reap(void);
/* Kills a worker at a kill point, its whole group (-1: the process pid
 * alone), to be started again. */
void workers_kill(int worker, pid_t pid);
/* Sends sig to every worker's group. */
void workers_signal(int sig);
/* Stops every worker: SIGTERM, then SIGKILL after a grace time. */
void workers_stop(void);
/* The worker a process is or belongs to; -1 for none. */
int workers_of(pid_t pid);

#endif
