/* staleness.h: whether a record is stale (verify-record(1) --history):
 * its review date passed; or, for the newest record of its rehearsal, the
 * seed no longer matches what it rehearsed, the worker's files changed
 * since the run, or the database has another version of its queue */
#ifndef IDEM_STALENESS_H
#define IDEM_STALENESS_H

#include <stddef.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "error.h"

struct idem_staleness {
	PGconn *db;		/* the database of -d, or NULL */
	json_t *queues;		/* the version in db of each kind of queue, read
				 * once: null where that kind is not installed */
};

/* Writes into out the reasons the record is stale, joined by "; ", or ""
 * when it is not; now is today's date, newest whether the record is the
 * newest of its rehearsal. -1 (err set) when db cannot be read. */
int idem_staleness(struct idem_staleness *s, const json_t *record, const char *now, int newest,
		   char *out, size_t size, struct idem_error *err);
void idem_staleness_free(struct idem_staleness *s);

#endif
