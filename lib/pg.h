/* pg.h: reaching a sandbox database with libpq */
#ifndef IDEM_PG_H
#define IDEM_PG_H

#include <stdio.h>

#include <libpq-fe.h>

#include "error.h"

/* Connects with conninfo (NULL or "": IDEM_DATABASE, else the PG* environment), sets
 * application_name to the program's name. NULL with err set on failure. */
PGconn *idem_pg_connect(const char *conninfo, struct idem_error *err);

/* Refuses (IDEM_EXIT_ENV) a database without the idem.sandbox marker row. */
int idem_pg_require_sandbox(PGconn *conn, struct idem_error *err);

/*
 * What a program read of the database it reached (the database row of
 * idem-tsv(5)): the sandbox's id from idem.sandbox, the database's name,
 * the server's version as SHOW server_version and server_version_num
 * give it, and its default_transaction_isolation. Two connections reach
 * one database when they agree on the sandbox id and the name.
 */
struct idem_pg_observed {
	char *sandbox_id, *dbname, *server_version, *server_version_num, *isolation;
};

int idem_pg_observe(PGconn *conn, struct idem_pg_observed *o, struct idem_error *err);
/* From the fields of a database row, after its kind (fields[0] is its
 * sandbox_id). */
void idem_pg_observed_from(struct idem_pg_observed *o, char *const *fields);
void idem_pg_observed_free(struct idem_pg_observed *o);
/* Writes the database row; -1 on a write error. */
int idem_pg_observed_write(FILE *out, const struct idem_pg_observed *o);
/* 0 when here is the stream's database; else -1 with err set
 * (IDEM_EXIT_USAGE) naming both, and how (-d, IDEM_DATABASE, ...) the
 * program was pointed at here. */
int idem_pg_same_database(const struct idem_pg_observed *stream,
			  const struct idem_pg_observed *here, const char *how,
			  struct idem_error *err);

/* The conninfo a program of the pipeline connects with: -d (option, or
 * NULL), else IDEM_DATABASE, else the seed row's database (or NULL), else
 * NULL for the PG* environment; *how names which, for messages. */
const char *idem_pg_choose(const char *option, const char *seed_database, const char **how);

/* Where the connection goes, without secrets: "dbname=idem user=idem host=/run". */
void idem_pg_describe(PGconn *conn, char *buf, size_t size);

/*
 * Where a connection goes as a postgresql:// URI that libpq, node-postgres
 * and pgx read alike, every part percent-encoded: a Unix socket directory
 * (host beginning with / or @) goes in ?host= with the port; otherwise
 * host[:port] is the authority, an IPv6 address in brackets. The user is a
 * query parameter. Never a password. idem_pg_url_of() takes the parts of
 * an open connection. Both return an allocated string.
 */
char *idem_pg_url(const char *host, const char *port, const char *dbname, const char *user);
char *idem_pg_url_of(PGconn *conn);

/* Connects as idem_pg_connect() does, refuses a database that is not a
 * sandbox, and sets DATABASE_URL and IDEM_DATABASE_URL to its URI, for the
 * commands a controller runs; -1 with err set. */
int idem_pg_setenv_url(const char *conninfo, struct idem_error *err);

/* The server's message as one line, without the trailing newline. */
const char *idem_pg_message(PGconn *conn, PGresult *res, char *buf, size_t size);

/* Runs a command that returns no rows or any rows; NULL with err set. */
PGresult *idem_pg_exec(PGconn *conn, const char *what, struct idem_error *err,
		       const char *sql, int nparams, const char *const *params);

/* The database's clock minus ours, in microseconds, measured once: the
 * database's time against the middle of the round trip. */
int idem_pg_clock_skew(PGconn *conn, long long *skew_us, struct idem_error *err);

/* An identifier or a literal quoted for conn, as PQescapeIdentifier and
 * PQescapeLiteral quote them; exits as the idem_e* functions do when libpq
 * cannot (out of memory, text not in the connection's encoding). Caller
 * frees. */
char *idem_pg_quote_ident(PGconn *conn, const char *name);
char *idem_pg_quote_literal(PGconn *conn, const char *text);

/* A table named NAME or SCHEMA.NAME, each part quoted for conn. Caller
 * frees. */
char *idem_pg_quote_table(PGconn *conn, const char *table);

/* The business key of a row as the stream writes it: one column as its
 * text, several as a JSON array of their values in key order (the
 * expression of count-effects(1)); each column named with prefix before
 * it ("NEW.", or ""). key_columns is a JSON array of names; NULL when it
 * is not one. Caller frees. */
char *idem_pg_key_sql(PGconn *conn, const char *key_columns, const char *prefix);

#endif
