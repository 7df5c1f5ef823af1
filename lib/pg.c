#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg.h"

const char *
idem_pg_message(PGconn *conn, PGresult *res, char *buf, size_t size)
{
	const char *msg = res ? PQresultErrorMessage(res) : NULL;
	size_t i, o = 0;

	if (msg == NULL || *msg == '\0')
		msg = PQerrorMessage(conn);
	for (i = 0; msg[i] && o + 3 < size; i++) {
		if (msg[i] == '\n') {
			if (msg[i + 1] == '\0')
				break;
			buf[o++] = ';';
			buf[o++] = ' ';
		} else {
			buf[o++] = msg[i];
		}
	}
	buf[o] = '\0';
	return buf;
}

PGconn *
idem_pg_connect(const char *conninfo, struct idem_error *err)
{
	const char *keys[] = { "dbname", "fallback_application_name", NULL };
	const char *values[] = { conninfo, argv0, NULL };
	char msg[512];
	PGconn *conn;

	/* a conninfo a controller (kill-at, rehearse, verify-record) hands down */
	if (conninfo == NULL || *conninfo == '\0')
		conninfo = getenv("IDEM_DATABASE");
	values[0] = conninfo ? conninfo : "";
	conn = PQconnectdbParams(keys, values, 1);
	if (conn == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "connecting to the database: out of memory"),
		    NULL;
	if (PQstatus(conn) != CONNECTION_OK) {
		idem_error_set(err, IDEM_EXIT_ENV, "connecting to the database: %s",
		    idem_pg_message(conn, NULL, msg, sizeof(msg)));
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

void
idem_pg_describe(PGconn *conn, char *buf, size_t size)
{
	snprintf(buf, size, "dbname=%s user=%s host=%s port=%s", PQdb(conn), PQuser(conn),
	    PQhost(conn), PQport(conn));
}

PGresult *
idem_pg_exec(PGconn *conn, const char *what, struct idem_error *err, const char *sql,
	     int nparams, const char *const *params)
{
	PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	char msg[768];

	if (res != NULL && (PQresultStatus(res) == PGRES_COMMAND_OK ||
	    PQresultStatus(res) == PGRES_TUPLES_OK))
		return res;
	idem_error_set(err, IDEM_EXIT_ENV, "%s: %s", what, idem_pg_message(conn, res, msg, sizeof(msg)));
	PQclear(res);
	return NULL;
}

int
idem_pg_require_sandbox(PGconn *conn, struct idem_error *err)
{
	char where[512];
	PGresult *res;
	int ok;

	res = PQexec(conn, "SELECT to_regclass('idem.sandbox') IS NOT NULL");
	ok = PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (ok) {
		res = PQexec(conn, "SELECT count(*) FROM idem.sandbox");
		ok = PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "1") == 0;
		PQclear(res);
	}
	if (ok)
		return 0;
	idem_pg_describe(conn, where, sizeof(where));
	return idem_error_set(err, IDEM_EXIT_ENV,
	    "%s is not a rehearsal sandbox (no row in idem.sandbox); refusing to write. "
	    "Start one with idem-sandbox start", where);
}
