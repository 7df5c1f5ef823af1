#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg.h"
#include "queue_version.h"

/*
 * Each kind's two statements: whether its schema is installed, and its
 * version. These are the "installed" and "version" sections of the queue
 * adapters (lib/queues/KIND.sql) that dup-publish reads; once those load
 * through lib/queue, this reads them there instead of keeping its own copy.
 */
static const struct {
	const char *kind, *installed, *version;
} versions[] = {
	{ "idem", "SELECT to_regclass('idem.sandbox') IS NOT NULL",
	  "SELECT schema_version::text FROM idem.sandbox" },
	{ "pg-boss", "SELECT to_regclass('pgboss.version') IS NOT NULL",
	  "SELECT version::text FROM pgboss.version" },
	{ "graphile-worker", "SELECT to_regclass('graphile_worker.migrations') IS NOT NULL",
	  "SELECT max(id)::text FROM graphile_worker.migrations" },
};

int
idem_queue_version(PGconn *conn, const char *kind, char **version, struct idem_error *err)
{
	char what[96];
	PGresult *res;
	size_t i;
	int installed;

	*version = NULL;
	for (i = 0; i < sizeof(versions) / sizeof(versions[0]); i++)
		if (strcmp(versions[i].kind, kind) == 0)
			break;
	if (i == sizeof(versions) / sizeof(versions[0]))
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: not a kind of queue (expected idem, "
		    "pg-boss or graphile-worker)", kind);
	snprintf(what, sizeof(what), "reading the version of the %s queue", kind);
	if ((res = idem_pg_exec(conn, what, err, versions[i].installed, 0, NULL)) == NULL)
		return -1;
	installed = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!installed)
		return 0;
	if ((res = idem_pg_exec(conn, what, err, versions[i].version, 0, NULL)) == NULL)
		return -1;
	if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
		*version = idem_estrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}
