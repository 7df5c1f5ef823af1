/* database.h: the kill points in the sandbox database (failpoint.h) for
 * the run (run.fp): installed and armed for the plan's kill points and
 * races, and the sessions held at them let go on, killed with their
 * worker, or held for a race */
#ifndef KILL_AT_DATABASE_H
#define KILL_AT_DATABASE_H

/* Installs the kill points, removed at exit, and arms the database's
 * point of each kill point and race whose step it sees. */
void database_install(void);
/* Removes them, on every way out; the workers are killed first. */
void database_remove(void);
/* The database point of a step and key, when the database sees the step:
 * after-commit always, the others when the effect table has its ledger;
 * else -1. */
int database_arm(const char *step_name, const char *business_key);
/* Lets the session held in a slot go on. */
void database_pass(int slot);
/* A kill point fired or a race met: its point is disarmed when nothing
 * else needs it. */
void database_disarm(int armed);
/* Looks up the sessions not seen before, and the worker of each. */
void database_watch_sessions(void);
/* Handles the sessions held now, and lets the second of a race go once
 * the first's attempt has ended. */
void database_watch(void);
/* Frees the sessions held for races. */
void database_free(void);

#endif
