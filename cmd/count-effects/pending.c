/* pending.c: the check of the worker's table of pending calls: each
 * business key whose call was killed has a row that the seed's
 * reconciliation owner owns, and no other business key has a row not
 * settled */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "count-effects.h"
#include "pg.h"

/* the business keys with rows not settled written at most; the query
 * asks for one more, to know there were more */
#define OPEN_CAP 1000

/* The names of the stream's pending table, quoted for SQL. */
struct pending_sql {
	char *table, *owner, *state, *key;
};

/* Whether the table is there, and the first of the columns named (a JSON
 * array) it does not have, quoted as in SQL, with its place from 1. */
static const char columns_sql[] =
	"SELECT to_regclass($1) IS NOT NULL, missing.name, missing.at FROM (SELECT) AS one"
	" LEFT JOIN LATERAL (SELECT quote_ident(k) AS name, o AS at"
	"  FROM json_array_elements_text($2::json) WITH ORDINALITY AS t(k, o)"
	"  WHERE NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = to_regclass($1)"
	"   AND a.attname = k AND a.attnum > 0 AND NOT a.attisdropped)"
	"  ORDER BY o LIMIT 1) AS missing ON true";

/* The table of pending calls has every column the stream names: its key's
 * (pending_key, or in a stream before 1.8 the key's field names, which
 * need not be its columns), its owner's, its state's. A table that is not
 * there is fatal, as the effect table is; a column that is not, a finding
 * kept for the verdict, and the check is not made. */
static int
columns_there(const char *table_sql)
{
	json_t *names = json_loads(c.pending_key, 0, NULL);
	char *list, msg[768];
	const char *params[2], *what;
	size_t nkey = json_array_size(names), at;
	PGresult *res;
	int ok;

	json_array_append_new(names, json_string(c.pending_owner));
	if (c.pending_state != NULL)
		json_array_append_new(names, json_string(c.pending_state));
	if ((list = json_dumps(names, JSON_COMPACT)) == NULL)
		idem_die(IDEM_EXIT_ENV, "json_dumps: out of memory");
	json_decref(names);
	params[0] = table_sql;
	params[1] = list;
	res = PQexecParams(c.conn, columns_sql, 2, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		idem_die(IDEM_EXIT_ENV, "looking for %s: %s", c.pending_table,
		    idem_pg_message(c.conn, res, msg, sizeof(msg)));
	if (PQgetvalue(res, 0, 0)[0] != 't')
		die_missing_table(c.pending_table);
	if ((ok = PQgetisnull(res, 0, 1)) == 0) {
		at = (size_t)strtoul(PQgetvalue(res, 0, 2), NULL, 10);
		what = at <= nkey ? "of the calls' business key (the seed's external.pending.key, by "
		    "default the names of external.key)" : at == nkey + 1 ? "of the owner" :
		    "of the state";
		if (asprintf(&c.pending_unchecked, "%s has no column %s %s: the pending calls were "
		    "not checked", c.pending_table, PQgetvalue(res, 0, 1), what) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
	}
	PQclear(res);
	free(list);
	return ok;
}

/* The business keys of the killed calls, a JSON array, in key order. */
static char *
killed_keys(void)
{
	json_t *keys = json_array();
	char *out;
	size_t i;

	for (i = 0; i < c.ncalls; i++)
		if (c.calls[i].killed) {
			json_array_append_new(keys, json_string(c.calls[i].key));
			c.killed_call_keys++;
		}
	if ((out = json_dumps(keys, JSON_COMPACT)) == NULL)
		idem_die(IDEM_EXIT_ENV, "json_dumps: out of memory");
	json_decref(keys);
	return out;
}

/* Prints a query with parameters in its query row, then runs it. */
static PGresult *
printed_params_query(const char *name, const char *sql, int n, const char *const *params)
{
	PGresult *res;
	char msg[768];

	query_row(name, sql);
	res = PQexecParams(c.conn, sql, n, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		idem_die(IDEM_EXIT_ENV, "checking the pending calls in %s: %s", c.pending_table,
		    idem_pg_message(c.conn, res, msg, sizeof(msg)));
	return res;
}

/* A pending_call row from a row of either query (business key, rows,
 * owner); a finding kept for the verdict unless owned. */
static void
pending_row(PGresult *res, int i, const char *killed, const char *result)
{
	const char *row[5];

	row[0] = PQgetisnull(res, i, 0) ? "" : PQgetvalue(res, i, 0);
	row[1] = killed;
	row[2] = PQgetvalue(res, i, 1);
	row[3] = PQgetisnull(res, i, 2) ? NULL : PQgetvalue(res, i, 2);
	row[4] = result;
	write_row("pending_call", row, 5);
	if (strcmp(result, "owned") == 0) {
		c.owned_call_keys++;
		return;
	}
	c.pending_findings = idem_ereallocarray(c.pending_findings, c.npending_findings + 1,
	    sizeof(*c.pending_findings));
	c.pending_findings[c.npending_findings].key = idem_estrdup(row[0]);
	c.pending_findings[c.npending_findings].owner = row[3] ? idem_estrdup(row[3]) : NULL;
	c.pending_findings[c.npending_findings].rows = strtoll(row[2], NULL, 10);
	c.pending_findings[c.npending_findings].result = result;
	c.npending_findings++;
}

/* Each killed business key: its rows, whether one names the owner, the
 * owner its first row names (the seed's when one does). */
static void
check_killed(const struct pending_sql *q, const char *killed)
{
	const char *params[2] = { killed, c.owner };
	char *sql;
	PGresult *res;
	int i;

	if (asprintf(&sql, "SELECT k.business_key COLLATE \"C\" AS business_key,"
	    " count(p.business_key) AS rows, CASE WHEN bool_or(p.owner = $2::text) THEN $2::text"
	    " ELSE min(p.owner) END AS owner, COALESCE(bool_or(p.owner = $2::text), false) AS owned"
	    " FROM json_array_elements_text($1::json) AS k(business_key)"
	    " LEFT JOIN (SELECT (%s) COLLATE \"C\" AS business_key, %s::text COLLATE \"C\" AS owner"
	    " FROM %s) AS p ON p.business_key = k.business_key GROUP BY 1 ORDER BY 1",
	    q->key, q->owner, q->table) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	res = printed_params_query("pending_killed", sql, 2, params);
	for (i = 0; i < PQntuples(res); i++)
		pending_row(res, i, "yes", PQgetvalue(res, i, 3)[0] == 't' ? "owned" :
		    strcmp(PQgetvalue(res, i, 1), "0") == 0 ? "missing" : "wrong-owner");
	PQclear(res);
	free(sql);
}

/* The business keys not killed with rows not settled: with a state
 * column, those whose state is NULL or not one of the settled values;
 * without, every row. */
static void
check_open(const struct pending_sql *q, const char *killed)
{
	const char *params[2] = { killed, c.pending_settled };
	char *sql, *state = NULL;
	PGresult *res;
	int i, n;

	if (q->state != NULL && asprintf(&state, "(%s IS NULL OR %s::text COLLATE \"C\" <> ALL"
	    " (ARRAY(SELECT json_array_elements_text($2::json)))) AND ", q->state, q->state) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if (asprintf(&sql, "SELECT (%s) COLLATE \"C\" AS business_key, count(*) AS rows,"
	    " min(%s::text COLLATE \"C\") AS owner FROM %s WHERE %sNOT COALESCE((%s) COLLATE \"C\""
	    " = ANY (ARRAY(SELECT json_array_elements_text($1::json))), false)"
	    " GROUP BY 1 ORDER BY 1 LIMIT %d", q->key, q->owner, q->table, state ? state : "",
	    q->key, OPEN_CAP + 1) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	res = printed_params_query("pending_open", sql, state ? 2 : 1, params);
	n = PQntuples(res);
	if (n > OPEN_CAP) {
		n = OPEN_CAP;
		idem_warn("pending: more than %d business keys have rows of %s not settled; "
		    "the first %d in key order are written", OPEN_CAP, c.pending_table, OPEN_CAP);
	}
	for (i = 0; i < n; i++)
		pending_row(res, i, "no", "open");
	PQclear(res);
	free(sql);
	free(state);
}

/* The pending_call rows, each query in its query row before it, and the
 * measure of the killed keys owned. */
void
pending_calls(void)
{
	struct pending_sql q = { NULL, NULL, NULL, NULL };
	char **key_columns, *killed = killed_keys(), value[32], unit[1024];
	size_t nkey_columns;
	int checked;

	q.table = idem_pg_quote_table(c.conn, c.pending_table);
	q.owner = idem_pg_quote_ident(c.conn, c.pending_owner);
	if (c.pending_state != NULL)
		q.state = idem_pg_quote_ident(c.conn, c.pending_state);
	key_columns = quote_columns(c.pending_key, &nkey_columns);
	q.key = key_expression_of(key_columns, nkey_columns);
	if ((checked = columns_there(q.table)) && c.killed_call_keys > 0)
		check_killed(&q, killed);
	if (checked)
		check_open(&q, killed);
	if (checked && c.killed_call_keys > 0)
		snprintf(value, sizeof(value), "%.3f", (double)c.owned_call_keys / (double)c.killed_call_keys);
	snprintf(unit, sizeof(unit), "killed calls' business keys with a row of %s whose %s is %s",
	    c.pending_table, c.pending_owner, c.owner ? c.owner : "the reconciliation owner, "
	    "whom the seed does not name");
	measure_row("pending_calls_owned", checked && c.killed_call_keys > 0 ? value : NULL,
	    c.owned_call_keys, c.killed_call_keys, unit, checked);
	idem_free_list(key_columns, nkey_columns);
	free(q.table);
	free(q.owner);
	free(q.state);
	free(q.key);
	free(killed);
}
