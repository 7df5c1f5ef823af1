/* missing.c: a table the seed names that the database does not hold, and
 * the one the seed probably meant, from the catalog */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "count-effects.h"
#include "error.h"
#include "text.h"

/* The tables, views and foreign tables a user could have meant, those of
 * the schema the seed names (else the current one) first. */
static const char candidates_sql[] =
	"SELECT n.nspname, c.relname, n.nspname = COALESCE($1, current_schema()) AS same"
	" FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
	" WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')"
	" AND n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'"
	" ORDER BY 3 DESC, 1, 2";

/* The nearest table: in the same schema a near name; in another schema the
 * same name or a near one. "schema.name" or, for an unqualified seed table
 * in its own schema, "name"; NULL when none. Caller frees. */
static char *
nearest_table(PGresult *res, const char *name, int qualified)
{
	int i, d, best = -1, best_d = IDEM_NEAR_MAX + 1, best_same = 0;
	char *out;

	for (i = 0; i < PQntuples(res); i++) {
		const char *relname = PQgetvalue(res, i, 1);
		int same = PQgetvalue(res, i, 2)[0] == 't';

		if (best >= 0 && best_same && !same)
			break;
		d = idem_text_distance(name, relname);
		if ((same || d > 0) && !idem_text_near(name, relname))
			continue;
		if (d < best_d) {
			best = i;
			best_d = d;
			best_same = same;
		}
	}
	if (best < 0)
		return NULL;
	if (best_same && !qualified)
		return idem_estrdup(PQgetvalue(res, best, 1));
	if (asprintf(&out, "%s.%s", PQgetvalue(res, best, 0), PQgetvalue(res, best, 1)) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	return out;
}

void
die_missing_table(const char *table)
{
	char *schema = idem_estrdup(table), *name = strchr(schema, '.'), *near = NULL;
	const char *params[1];
	PGresult *res;

	if (name != NULL)
		*name++ = '\0';
	params[0] = name != NULL ? schema : NULL;
	res = PQexecParams(c.conn, candidates_sql, 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		near = nearest_table(res, name != NULL ? name : schema, name != NULL);
	PQclear(res);
	free(schema);
	if (near != NULL)
		idem_die(IDEM_EXIT_ENV, "%s: no such table (did you mean %s?); create it before "
		    "the run, e.g. with rehearse -s SETUP", table, near);
	idem_die(IDEM_EXIT_ENV, "%s: no such table; create it before the run, e.g. with "
	    "rehearse -s SETUP", table);
}
