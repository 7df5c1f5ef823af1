/* guard.c: the guard the database enforces on an effect table, found in
 * the catalog, and its probe, a copy of a row always rolled back */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "count-effects.h"
#include "pg.h"
#include "seed.h"

/* A table whose guard is looked for and probed: the effect table, or the
 * one the seed declares the guard on. */
struct guarded {
	const char *table;		/* as the stream names it */
	const char *key_columns;	/* a JSON array of names */
	const char *row_table;		/* the rows' table field: NULL for the effect table */
	char *table_sql;
	char **column_sql;
	size_t ncolumns;
};

/* The key columns of a unique constraint or index, from the catalog. */
static const char guard_sql_template[] =
	"SELECT con.conname AS name, 'constraint' AS kind, pg_get_constraintdef(con.oid) AS definition,"
	" con.condeferrable AS deferrable, NOT con.convalidated AS not_valid, false AS partial,"
	" (SELECT json_agg(a.attname::text) FROM pg_attribute a"
	"  WHERE a.attrelid = con.conrelid AND a.attnum = ANY (con.conkey)) AS columns"
	" FROM pg_constraint con WHERE con.conrelid = %s::regclass AND con.contype IN ('u', 'p')"
	" UNION ALL "
	"SELECT ic.relname, 'index', pg_get_indexdef(i.indexrelid), false, NOT i.indisvalid,"
	" i.indpred IS NOT NULL,"
	" CASE WHEN 0 = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1]) THEN NULL ELSE"
	" (SELECT json_agg(a.attname::text) FROM pg_attribute a"
	"  WHERE a.attrelid = i.indrelid"
	"  AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])) END"
	" FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid"
	" WHERE i.indrelid = %s::regclass AND i.indisunique"
	" AND NOT EXISTS (SELECT FROM pg_constraint con WHERE con.conindid = i.indexrelid"
	"  AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u', 'x'))"
	" ORDER BY 1";

/* Whether a guard's columns (a JSON array from the catalog) are all key
 * columns. */
static int
subset_of_key(const struct guarded *g, const char *json_columns)
{
	json_t *cols = json_loads(g->key_columns, 0, NULL), *found = json_loads(json_columns, 0, NULL);
	json_t *col, *key;
	size_t i, j;
	int ok = json_array_size(found) > 0;

	json_array_foreach(found, i, col) {
		int in_key = 0;

		json_array_foreach(cols, j, key)
			in_key |= json_equal(col, key);
		ok &= in_key;
	}
	json_decref(cols);
	json_decref(found);
	return ok;
}

/*
 * The probe: inside a transaction that is always rolled back, insert a copy
 * of one existing row's key columns and of every column the table requires
 * (NOT NULL, no default, not generated). 23505 from a guard shows the
 * database enforces it.
 */
static void
probe(const struct guarded *g, char **guard_names, size_t nguards)
{
	char *cols = NULL, *sql = NULL, *catalog;
	char *table_literal = idem_pg_quote_literal(c.conn, g->table_sql);
	size_t len = 0, i;
	FILE *f = open_memstream(&cols, &len);
	const char *row[5], *state, *constraint, *result;
	char msg[768];
	PGresult *res;

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	if (asprintf(&catalog, "SELECT a.attname FROM pg_attribute a"
	    " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
	    " AND a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = ''"
	    " ORDER BY a.attnum", table_literal) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	res = PQexec(c.conn, catalog);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		idem_die(IDEM_EXIT_ENV, "reading the columns of %s: %s", g->table,
		    idem_pg_message(c.conn, res, msg, sizeof(msg)));
	for (i = 0; i < g->ncolumns; i++)
		fprintf(f, "%s%s", i ? ", " : "", g->column_sql[i]);
	for (i = 0; i < (size_t)PQntuples(res); i++) {
		char *name = idem_pg_quote_ident(c.conn, PQgetvalue(res, (int)i, 0));
		size_t k;
		int dup = 0;

		for (k = 0; k < g->ncolumns; k++)
			dup |= strcmp(g->column_sql[k], name) == 0;
		if (!dup)
			fprintf(f, ", %s", name);
		free(name);
	}
	fclose(f);
	PQclear(res);
	free(catalog);
	if (asprintf(&sql, "INSERT INTO %s (%s) SELECT %s FROM %s LIMIT 1", g->table_sql, cols, cols,
	    g->table_sql) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	query_row("probe", sql);
	row[3] = sql;
	row[4] = g->row_table;
	/* a deferred guard answers at the insert, not at a commit that never
	 * comes; and no probe runs outside a transaction it rolls back */
	res = PQexec(c.conn, "BEGIN; SET LOCAL lock_timeout = '5s'; SET CONSTRAINTS ALL IMMEDIATE");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		idem_die(IDEM_EXIT_ENV, "starting the probe's transaction: %s",
		    idem_pg_message(c.conn, res, msg, sizeof(msg)));
	PQclear(res);
	res = PQexec(c.conn, sql);
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	constraint = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
	if (PQresultStatus(res) == PGRES_COMMAND_OK) {
		int copied = strcmp(PQcmdTuples(res), "1") == 0;

		result = copied ? "not-enforced" : "skipped";
		row[1] = NULL;
		row[2] = copied ? "the copy went in: the database does not enforce one row per key" :
		    g->row_table ? "no row of the declared guard's table to copy" :
		    "no effect row to copy";
		if (copied && g->row_table)
			idem_warn("probe: a copy of a row of %s went in: it does not enforce one row "
			    "per declared key", g->table);
		else if (copied)
			idem_warn("probe: a copy of an effect row went in: %s does not enforce one row "
			    "per business key", g->table);
	} else {
		int guard = 0;

		for (i = 0; constraint && i < nguards; i++)
			guard |= strcmp(guard_names[i], constraint) == 0;
		row[1] = state;
		row[2] = idem_pg_message(c.conn, res, msg, sizeof(msg));
		if (state && strcmp(state, "23505") == 0 && guard)
			result = "enforced";
		else if (state && strcmp(state, "42501") == 0) {
			result = "skipped";
			row[2] = "probe skipped: permission denied";
		} else
			result = "inconclusive";
	}
	row[0] = result;
	/* the table field only for a table other than the effect table */
	write_row("probe", row, g->row_table ? 5 : 4);
	PQclear(res);
	res = PQexec(c.conn, "ROLLBACK");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		idem_die(IDEM_EXIT_ENV, "rolling the probe back: %s",
		    idem_pg_message(c.conn, res, msg, sizeof(msg)));
	PQclear(res);
	free(table_literal);
	free(cols);
	free(sql);
}

/* The guard rows of a table, then its probe. */
static void
guards_of(const struct guarded *g)
{
	char *literal = idem_pg_quote_literal(c.conn, g->table_sql), *sql, **names = NULL;
	size_t nnames = 0, i;
	PGresult *res;

	if (asprintf(&sql, guard_sql_template, literal, literal) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	res = printed_query("guard", sql, "reading the guards of", g->table);
	for (i = 0; i < (size_t)PQntuples(res); i++) {
		char flags[64] = "";
		const char *row[5];

		if (PQgetisnull(res, (int)i, 6) || !subset_of_key(g, PQgetvalue(res, (int)i, 6)))
			continue;
		if (PQgetvalue(res, (int)i, 5)[0] == 't')
			strcat(flags, "partial");
		if (PQgetvalue(res, (int)i, 3)[0] == 't')
			strcat(strcat(flags, *flags ? "," : ""), "deferrable");
		if (PQgetvalue(res, (int)i, 4)[0] == 't')
			strcat(strcat(flags, *flags ? "," : ""), "not-valid");
		row[0] = PQgetvalue(res, (int)i, 1);
		row[1] = PQgetvalue(res, (int)i, 0);
		row[2] = PQgetvalue(res, (int)i, 2);
		row[3] = *flags ? flags : NULL;
		row[4] = g->row_table;
		write_row("guard", row, g->row_table ? 5 : 4);
		names = idem_ereallocarray(names, nnames + 1, sizeof(char *));
		names[nnames++] = idem_estrdup(PQgetvalue(res, (int)i, 0));
	}
	PQclear(res);
	if (nnames == 0) {
		const char *row[5] = { "none", NULL, g->row_table ?
			"none: not found where the seed declares the guard: no unique constraint "
			"or index over its key" : "none: best effort", NULL, g->row_table };

		write_row("guard", row, g->row_table ? 5 : 4);
	}
	probe(g, names, nnames);
	for (i = 0; i < nnames; i++)
		free(names[i]);
	free(names);
	free(sql);
	free(literal);
}

/* The effect table's guards and probe, then those of the table where the
 * seed declares its guard, when it declares one there. */
void
guards(void)
{
	struct guarded effect = { c.effect_table, c.key_columns, NULL, c.table_sql, c.column_sql,
		c.ncolumns };
	struct guarded declared = { c.declared_table, c.declared_columns, c.declared_table, NULL,
		NULL, 0 };
	/* whether the table is there, and the first column of the declared key
	 * that it does not have, quoted as in SQL */
	static const char declared_sql[] =
	    "SELECT to_regclass($1) IS NOT NULL,"
	    " (SELECT quote_ident(k) FROM json_array_elements_text($2::json) WITH ORDINALITY AS t(k, o)"
	    "  WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = to_regclass($1)"
	    "   AND a.attname = k AND a.attnum > 0 AND NOT a.attisdropped) ORDER BY o LIMIT 1)";
	const char *params[2];
	char msg[768];
	PGresult *res;
	size_t i;

	guards_of(&effect);
	if (c.declared_table == NULL)
		return;
	declared.table_sql = idem_pg_quote_table(c.conn, c.declared_table);
	declared.column_sql = quote_columns(c.declared_columns, &declared.ncolumns);
	params[0] = declared.table_sql;
	params[1] = c.declared_columns;
	res = PQexecParams(c.conn, declared_sql, 2, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		idem_die(IDEM_EXIT_ENV, "looking for %s: %s", c.declared_table,
		    idem_pg_message(c.conn, res, msg, sizeof(msg)));
	if (PQgetvalue(res, 0, 0)[0] == 't' && PQgetisnull(res, 0, 1)) {
		guards_of(&declared);
	} else {
		char *why = NULL, *definition;
		const char *guard_row[5] = { "none", NULL, NULL, NULL, c.declared_table };
		const char *probe_row[5] = { "skipped", NULL, "no table to probe", "", c.declared_table };

		if (PQgetvalue(res, 0, 0)[0] != 't')
			why = idem_estrdup("no such table");
		else if (asprintf(&why, "no column %s in the table", PQgetvalue(res, 0, 1)) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		else
			probe_row[2] = "no column of the declared key to probe";
		if (asprintf(&definition, "none: not found where the seed declares the guard: %s",
		    why) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		guard_row[2] = definition;
		write_row("guard", guard_row, 5);
		write_row("probe", probe_row, 5);
		free(definition);
		free(why);
	}
	PQclear(res);
	for (i = 0; i < declared.ncolumns; i++)
		free(declared.column_sql[i]);
	free(declared.column_sql);
	free(declared.table_sql);
}
