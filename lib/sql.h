/* sql.h: SQL files made of sections, as the queue adapters, lib/ledger.sql
 * and kill-at's failpoint.sql are. A section begins at a line "-- @HEAD"
 * and runs to the next such line, without the blank lines and comments
 * that end it: those speak of the next section. A section headed
 * "function NAME(ARGUMENTS) RETURNS TYPE" is the body of a PL/pgSQL
 * function; a placeholder ":name" in a section stands for a value the
 * program fills in. */
#ifndef IDEM_SQL_H
#define IDEM_SQL_H

#include <stddef.h>
#include <stdio.h>

#include <libpq-fe.h>

struct idem_sql_section {
	const char *head;	/* what follows "-- @" on its line */
	size_t head_len;
	const char *text;
	size_t len;
};

/* The section after prev (NULL: the first) of the file's text into s,
 * which may be prev itself; 0 when there is none. */
int idem_sql_section_next(const char *text, const struct idem_sql_section *prev,
			  struct idem_sql_section *s);

/* The section of text headed name, or "function name(...)", into s; 0
 * when there is none. */
int idem_sql_section_find(const char *text, const char *name, struct idem_sql_section *s);

/* A placeholder ":name" and what it stands for (NULL: nothing, the
 * placeholder stays as it is). */
struct idem_sql_fill {
	const char *name, *value;
};

/* s's text with its placeholders filled (the colon of a "::" cast begins
 * none): what is filled in is not read again, and an empty fill alone on
 * its line leaves no line. Exits as the idem_e* functions do when out of
 * memory. Caller frees. */
char *idem_sql_filled(const struct idem_sql_section *s, const struct idem_sql_fill *fills,
		      size_t nfills);

/* Writes s to f, filled, with a newline: a function's body goes to
 * CREATE FUNCTION schema.NAME ... LANGUAGE plpgsql SECURITY DEFINER SET
 * search_path = pg_catalog, pg_temp as a string literal quoted for conn,
 * so that nothing filled in can end it. Exits as idem_pg_quote_literal
 * does. */
void idem_sql_put(FILE *f, PGconn *conn, const char *schema, const struct idem_sql_section *s,
		  const struct idem_sql_fill *fills, size_t nfills);

#endif
