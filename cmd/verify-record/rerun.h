/* rerun.h: a record rerun as a second engineer would (verify-record(1)
 * --rerun): its reproduce command run again from the work tree that holds
 * it, on a fresh sandbox or a given database, and the rerun's counts and
 * path (kill points, races, attempts) compared with the record's */
#ifndef IDEM_RERUN_H
#define IDEM_RERUN_H

#include <stdio.h>

#include <jansson.h>

#include "error.h"

/* Reruns the record read from path (a fresh sandbox when conninfo is
 * NULL), with this program's directory first on PATH, and writes to
 * report one line per difference, or that the counts and the path are
 * reproduced. 0 when they are, 1 when the rerun differs, -1 (err set)
 * when it cannot be run. */
int idem_rerun(const char *path, const json_t *record, const char *conninfo, FILE *report,
	       struct idem_error *err);

#endif
