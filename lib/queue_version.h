/* queue_version.h: the schema version of a queue library in a database */
#ifndef IDEM_QUEUE_VERSION_H
#define IDEM_QUEUE_VERSION_H

#include <libpq-fe.h>

#include "util.h"

/* The version of the schema of the queue library kind (idem, pg-boss,
 * graphile-worker) in the database, as text the caller frees: 0 with
 * *version NULL when the library is not installed there; -1 with err set
 * when the kind is unknown (IDEM_EXIT_USAGE) or a query fails
 * (IDEM_EXIT_ENV). It only reads. */
int idem_queue_version(PGconn *conn, const char *kind, char **version, struct idem_error *err);

#endif
