/* rerun.h: a record rerun as a second engineer would (verify-record(1)
 * --rerun): its reproduce command run again at the record's revision, in
 * a temporary worktree, on a fresh sandbox or a given database, and the
 * rerun's counts and path (kill points, races, attempts) compared with the
 * record's */
#ifndef IDEM_RERUN_H
#define IDEM_RERUN_H

#include <stdio.h>

#include <jansson.h>

#include "error.h"

/* Reruns the record read from path (a fresh sandbox when conninfo is
 * NULL) in a worktree of its seed's revision, after the seed there hashes
 * as recorded, with this program's directory first on PATH, and writes to
 * report the revision, then one line per difference, or that the counts
 * and the path are reproduced. 0 when they are, 1 when the rerun differs
 * or was not run (revision or seed not as recorded), -1 (err set) when it
 * cannot be run. The worktree is removed in every case; a SIGINT, SIGTERM
 * or SIGHUP that stops the rerun ends the program by it, once removed. */
int idem_rerun(const char *path, const json_t *record, const char *conninfo, FILE *report,
	       struct idem_error *err);

#endif
