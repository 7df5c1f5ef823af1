#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "pg.h"
#include "text.h"
#include "tsv.h"

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

/* Appends s percent-encoded: every byte but RFC 3986's unreserved ones and
 * those of keep. */
static char *
url_encode(char *o, const char *s, const char *keep)
{
	static const char hex[] = "0123456789ABCDEF";
	unsigned char c;

	for (; (c = (unsigned char)*s) != '\0'; s++) {
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    strchr("-._~", c) || (keep && strchr(keep, c))) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	return o;
}

char *
idem_pg_url(const char *host, const char *port, const char *dbname, const char *user)
{
	int socket_dir = host && (host[0] == '/' || host[0] == '@');
	size_t size = 64 + 3 * ((host ? strlen(host) : 0) + (port ? strlen(port) : 0) +
	    (dbname ? strlen(dbname) : 0) + (user ? strlen(user) : 0));
	char *url = idem_emalloc(size), *o = url;
	const char *sep = "?";

	o = stpcpy(o, "postgresql://");
	if (host && *host && !socket_dir) {
		if (strchr(host, ':')) {
			*o++ = '[';
			o = url_encode(o, host, ":");
			*o++ = ']';
		} else {
			o = url_encode(o, host, NULL);
		}
		if (port && *port) {
			*o++ = ':';
			o = url_encode(o, port, NULL);
		}
	}
	*o++ = '/';
	/* node-postgres decodes the path with decodeURI, which leaves these
	 * encoded: as they may stand in a path, they stay as they are */
	if (dbname)
		o = url_encode(o, dbname, ":@&=+$,;");
	if (socket_dir) {
		o = url_encode(stpcpy(o, "?host="), host, NULL);
		if (port && *port)
			o = url_encode(stpcpy(o, "&port="), port, NULL);
		sep = "&";
	}
	if (user && *user)
		o = url_encode(stpcpy(stpcpy(o, sep), "user="), user, NULL);
	*o = '\0';
	return url;
}

char *
idem_pg_url_of(PGconn *conn)
{
	return idem_pg_url(PQhost(conn), PQport(conn), PQdb(conn), PQuser(conn));
}

int
idem_pg_setenv_url(const char *conninfo, struct idem_error *err)
{
	PGconn *conn;
	char *url;

	if ((conn = idem_pg_connect(conninfo, err)) == NULL)
		return -1;
	if (idem_pg_require_sandbox(conn, err) < 0) {
		PQfinish(conn);
		return -1;
	}
	url = idem_pg_url_of(conn);
	PQfinish(conn);
	if (setenv("DATABASE_URL", url, 1) < 0 || setenv("IDEM_DATABASE_URL", url, 1) < 0) {
		free(url);
		return idem_error_set(err, IDEM_EXIT_ENV, "setting DATABASE_URL:");
	}
	free(url);
	return 0;
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

int
idem_pg_clock_skew(PGconn *conn, long long *skew_us, struct idem_error *err)
{
	long long before = idem_now_us(), after;
	PGresult *res = idem_pg_exec(conn, "reading the database's clock", err,
	    "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint", 0, NULL);

	if (res == NULL)
		return -1;
	after = idem_now_us();
	*skew_us = strtoll(PQgetvalue(res, 0, 0), NULL, 10) - (before + after) / 2;
	PQclear(res);
	return 0;
}

static char *
quoted(PGconn *conn, const char *text, char *(*escape)(PGconn *, const char *, size_t))
{
	char *q = escape(conn, text, strlen(text)), *out;

	if (q == NULL)
		idem_die(IDEM_EXIT_ENV, "quoting %s: %s",
		    escape == PQescapeIdentifier ? text : "a literal", PQerrorMessage(conn));
	out = idem_estrdup(q);
	PQfreemem(q);
	return out;
}

char *
idem_pg_quote_ident(PGconn *conn, const char *name)
{
	return quoted(conn, name, PQescapeIdentifier);
}

char *
idem_pg_quote_literal(PGconn *conn, const char *text)
{
	return quoted(conn, text, PQescapeLiteral);
}

char *
idem_pg_quote_table(PGconn *conn, const char *table)
{
	char *copy = idem_estrdup(table), *dot = strchr(copy, '.'), *a, *b, *out;

	if (dot == NULL) {
		out = idem_pg_quote_ident(conn, copy);
		free(copy);
		return out;
	}
	*dot = '\0';
	a = idem_pg_quote_ident(conn, copy);
	b = idem_pg_quote_ident(conn, dot + 1);
	if (asprintf(&out, "%s.%s", a, b) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(a);
	free(b);
	free(copy);
	return out;
}

char *
idem_pg_key_sql(PGconn *conn, const char *key_columns, const char *prefix)
{
	json_t *cols = json_loads(key_columns, 0, NULL), *col;
	char *out = NULL;
	size_t len = 0, i, n = json_array_size(cols);
	FILE *f;

	if (n == 0) {
		json_decref(cols);
		return NULL;
	}
	if ((f = open_memstream(&out, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	if (n > 1)
		fputs("'[' || ", f);
	json_array_foreach(cols, i, col) {
		char *q;

		if (!json_is_string(col)) {
			json_decref(cols);
			fclose(f);
			free(out);
			return NULL;
		}
		q = idem_pg_quote_ident(conn, json_string_value(col));
		if (n == 1)
			fprintf(f, "%s%s::text", prefix, q);
		else
			fprintf(f, "%sto_json(%s%s)::text", i ? " || ',' || " : "", prefix, q);
		free(q);
	}
	if (n > 1)
		fputs(" || ']'", f);
	json_decref(cols);
	if (fclose(f) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	return out;
}

int
idem_pg_observe(PGconn *conn, struct idem_pg_observed *o, struct idem_error *err)
{
	/* a sandbox made before sandbox ids is known by its marker's birth */
	PGresult *res = idem_pg_exec(conn, "reading the database's version and settings", err,
	    "SELECT coalesce(to_jsonb(s) ->> 'sandbox_id', 'created ' || "
	    "((to_jsonb(s) ->> 'created_at')::timestamptz AT TIME ZONE 'UTC')::text, 'unnamed'), "
	    "current_database(), current_setting('server_version'), "
	    "current_setting('server_version_num'), "
	    "current_setting('default_transaction_isolation') FROM idem.sandbox s", 0, NULL);
	char *fields[5];
	int i;

	memset(o, 0, sizeof(*o));
	if (res == NULL)
		return -1;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return idem_error_set(err, IDEM_EXIT_ENV, "reading the sandbox's id: idem.sandbox "
		    "has no row");
	}
	for (i = 0; i < 5; i++)
		fields[i] = PQgetvalue(res, 0, i);
	idem_pg_observed_from(o, fields);
	PQclear(res);
	return 0;
}

void
idem_pg_observed_from(struct idem_pg_observed *o, char *const *fields)
{
	o->sandbox_id = idem_estrdup(fields[0]);
	o->dbname = idem_estrdup(fields[1]);
	o->server_version = idem_estrdup(fields[2]);
	o->server_version_num = idem_estrdup(fields[3]);
	o->isolation = idem_estrdup(fields[4]);
}

void
idem_pg_observed_free(struct idem_pg_observed *o)
{
	free(o->sandbox_id);
	free(o->dbname);
	free(o->server_version);
	free(o->server_version_num);
	free(o->isolation);
	memset(o, 0, sizeof(*o));
}

int
idem_pg_observed_write(FILE *out, const struct idem_pg_observed *o)
{
	const char *row[5] = { o->sandbox_id, o->dbname, o->server_version, o->server_version_num,
		o->isolation };

	return idem_tsv_write_row(out, "database", row, 5);
}

int
idem_pg_same_database(const struct idem_pg_observed *stream, const struct idem_pg_observed *here,
		      const char *how, struct idem_error *err)
{
	if (strcmp(stream->sandbox_id, here->sandbox_id) == 0 &&
	    strcmp(stream->dbname, here->dbname) == 0)
		return 0;
	return idem_error_set(err, IDEM_EXIT_USAGE, "%s points at database %s of sandbox %s, but "
	    "the stream's database row names database %s of sandbox %s: one pipeline uses one "
	    "database", how, here->dbname, here->sandbox_id, stream->dbname, stream->sandbox_id);
}

const char *
idem_pg_choose(const char *option, const char *seed_database, const char **how)
{
	const char *env = getenv("IDEM_DATABASE");

	if (option != NULL && *option != '\0') {
		*how = "-d";
		return option;
	}
	if (env != NULL && *env != '\0') {
		*how = "IDEM_DATABASE";
		return env;
	}
	/* -d '' is IDEM_DATABASE, else the PG* environment, never the seed's */
	if (option == NULL && seed_database != NULL) {
		*how = "the seed's database";
		return seed_database;
	}
	*how = "the PG* environment";
	return NULL;
}
