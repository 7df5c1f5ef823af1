/* count.c: the count query of count-effects(1), its rows met with the
 * seeded keys, the count rows, their digest, and the totals */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/evp.h>
#include <sodium.h>

#include "count-effects.h"
#include "pg.h"
#include "seed.h"
#include "tsv.h"

/* message ids a pending query takes at a time */
#define PENDING_CHUNK 50000

static void prepare_identifiers(void);
static void start_count(void);

void
connect_and_count(void)
{
	struct idem_error err;

	if ((c.conn = idem_pg_connect(c.conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(c.conn, &err) < 0 ||
	    idem_pg_observe(c.conn, &c.here, &err) < 0)
		idem_die_error(&err);
	prepare_identifiers();
	start_count();
}

/* The quoted names of a JSON array of names, which the reader checked. */
char **
quote_columns(const char *key_columns, size_t *n)
{
	json_t *cols = json_loads(key_columns, 0, NULL), *col;
	char **out;
	size_t i;

	*n = json_array_size(cols);
	out = idem_ereallocarray(NULL, *n + 1, sizeof(char *));
	json_array_foreach(cols, i, col)
		out[i] = idem_pg_quote_ident(c.conn, json_string_value(col));
	json_decref(cols);
	return out;
}

static void
prepare_identifiers(void)
{
	c.table_sql = idem_pg_quote_table(c.conn, c.effect_table);
	/* the reader checked it is an array of one or more strings */
	c.column_sql = quote_columns(c.key_columns, &c.ncolumns);
}

/* The business key as SQL, in the stream's form, of columns quoted: one
 * column as text, several as a compact JSON array in key order. */
char *
key_expression_of(char *const *column_sql, size_t ncolumns)
{
	char *out = NULL;
	size_t len = 0, i;
	FILE *f = open_memstream(&out, &len);

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	if (ncolumns == 1) {
		fprintf(f, "%s::text", column_sql[0]);
	} else {
		fputs("'[' || ", f);
		for (i = 0; i < ncolumns; i++)
			fprintf(f, "%sto_json(%s)::text", i ? " || ',' || " : "", column_sql[i]);
		fputs(" || ']'", f);
	}
	fclose(f);
	return out;
}

void
query_row(const char *name, const char *sql)
{
	const char *row[3] = { c.phase, name, sql };

	write_row("query", row, 3);
}

/* Prints a query in its query row, then runs it; a failure is fatal, named
 * by what the query does and to which table. */
PGresult *
printed_query(const char *name, const char *sql, const char *doing, const char *table)
{
	PGresult *res;
	char msg[768];

	query_row(name, sql);
	res = PQexec(c.conn, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		idem_die(IDEM_EXIT_ENV, "%s %s: %s", doing, table,
		    idem_pg_message(c.conn, res, msg, sizeof(msg)));
	return res;
}

/* Appends a field, escaped, to the row being formatted. */
static void
row_append(size_t *len, const char *field, char end)
{
	size_t n = strlen(field), need = *len + 2 * n + 2;
	char *o;

	if (need > c.row_cap) {
		c.row_cap = 2 * need;
		c.row_buf = idem_erealloc(c.row_buf, c.row_cap);
	}
	o = c.row_buf + *len;
	if (strcspn(field, "\\\t\n\r") == n) {
		memcpy(o, field, n);
		o += n;
	} else {
		o = idem_tsv_escape_to(o, field);
	}
	*o++ = end;
	*len = (size_t)(o - c.row_buf);
}

/* v in decimal, as %lld writes it, ending just before end; returns its
 * start. One per count row: no snprintf. */
static const char *
decimal(long long v, char *end)
{
	unsigned long long u = v < 0 ? -(unsigned long long)v : (unsigned long long)v;

	*--end = '\0';
	do {
		*--end = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		*--end = '-';
	return end;
}

static void
digest_flush(void)
{
	if (c.digest_len > 0 && EVP_DigestUpdate(c.digest_ctx, c.digest_buf, c.digest_len) != 1)
		idem_die(IDEM_EXIT_ENV, "hashing the count rows: SHA-256 failed");
	c.digest_len = 0;
}

static void
digest_add(const void *p, size_t n)
{
	if (n > sizeof(c.digest_buf) - c.digest_len) {
		digest_flush();
		if (n > sizeof(c.digest_buf)) {
			if (EVP_DigestUpdate(c.digest_ctx, p, n) != 1)
				idem_die(IDEM_EXIT_ENV, "hashing the count rows: SHA-256 failed");
			return;
		}
	}
	memcpy(c.digest_buf + c.digest_len, p, n);
	c.digest_len += n;
}

/* A count row on standard output; the same without its phase goes into
 * the digest. */
static void
count_row(const char *scope, const char *key, long long expected, long long observed)
{
	char e[32], o[32];
	size_t len = 0, after_phase;

	row_append(&len, "count", '\t');
	row_append(&len, c.phase, '\t');
	after_phase = len;
	row_append(&len, scope, '\t');
	row_append(&len, key, '\t');
	row_append(&len, decimal(expected, e + sizeof(e)), '\t');
	row_append(&len, decimal(observed, o + sizeof(o)), '\n');
	digest_add("count\t", 6);
	digest_add(c.row_buf + after_phase, len - after_phase);
	c.digest_rows++;
	if (c.spill != NULL && fwrite(c.row_buf, 1, len, c.spill) != len)
		idem_die(IDEM_EXIT_ENV, "holding the count rows:");
	else if (c.spill == NULL && fwrite(c.row_buf, 1, len, stdout) != len)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
}

/* A seeded key's count row, counted in the totals. */
static void
key_row(const struct key_count *k)
{
	c.effects += k->observed;
	if (k->observed > k->expected)
		c.duplicates += k->observed - k->expected;
	if (k->observed == 0)
		c.missing++;
	c.conflicts += k->conflict;
	count_row("key", k->key, k->expected, k->observed);
}

/* The key rows go into the spill from here on, and the digest is kept as
 * it is now, to go back to. */
static void
start_spill(void)
{
	if ((c.spill = tmpfile()) == NULL)
		idem_die(IDEM_EXIT_ENV, "holding the count rows:");
	digest_flush();
	if ((c.digest_before = EVP_MD_CTX_new()) == NULL ||
	    EVP_MD_CTX_copy_ex(c.digest_before, c.digest_ctx) != 1)
		idem_die(IDEM_EXIT_ENV, "hashing the count rows: SHA-256 failed");
	c.digest_rows_before = c.digest_rows;
	c.settled = 0;
}

/* Writes the key rows of the keys before keys[upto], which no later row of
 * the count query may change while they come in byte order. */
static void
settle(size_t upto)
{
	while (c.settled < upto)
		key_row(&c.keys[c.settled++]);
}

/* A row came out of byte order: the key rows written are dropped, with
 * what they added to the totals and the digest. */
static void
drop_spill(void)
{
	fclose(c.spill);
	c.spill = NULL;
	c.effects = c.duplicates = c.missing = c.conflicts = 0;
	c.digest_len = 0;
	if (EVP_MD_CTX_copy_ex(c.digest_ctx, c.digest_before) != 1)
		idem_die(IDEM_EXIT_ENV, "hashing the count rows: SHA-256 failed");
	c.digest_rows = c.digest_rows_before;
	c.settled = 0;
}

/* The rows came in byte order to their end: the rest of the key rows,
 * then all of them on standard output. */
static void
pass_spill(void)
{
	FILE *spill = c.spill;
	off_t end;

	settle(c.nkeys);
	c.spill = NULL;
	if (fflush(spill) != 0 || (end = ftello(spill)) < 0)
		idem_die(IDEM_EXIT_ENV, "holding the count rows:");
	copy_out(spill, 0, end, "holding the count rows");
	fclose(spill);
}

/* Runs the printed count query and sets observed counts; keys no job seeded
 * are kept apart as unexpected. */
/* Sends the count query as soon as the seed row names the table, so the
 * database counts while the rest of the stream is read. */
static void
start_count(void)
{
	char *key_sql = key_expression_of(c.column_sql, c.ncolumns), *copy_sql;

	if (asprintf(&c.count_sql, "SELECT %s AS business_key, count(*) AS effects FROM %s "
	    "GROUP BY 1 ORDER BY 1", key_sql, c.table_sql) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(key_sql);
	/* its rows come as COPY text, one at a time, not held by libpq */
	if (asprintf(&copy_sql, "COPY (%s) TO STDOUT", c.count_sql) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if (!PQsendQuery(c.conn, copy_sql))
		idem_die(IDEM_EXIT_ENV, "counting %s: %s", c.effect_table, PQerrorMessage(c.conn));
	free(copy_sql);
}

static void
count_failed(PGresult *res)
{
	char msg[768];
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	/* undefined_table: the effect table is not there */
	int missing = state != NULL && strcmp(state, "42P01") == 0;

	idem_pg_message(c.conn, res, msg, sizeof(msg));
	PQclear(res);
	if (missing) {
		while ((res = PQgetResult(c.conn)) != NULL)
			PQclear(res);
		die_missing_table(c.effect_table);
	}
	idem_die(IDEM_EXIT_ENV, "counting %s: %s", c.effect_table, msg);
}

/*
 * The seeded key of a row of the count query. Its rows come in the
 * database's order of the keys, byte order in a C collation as in the
 * sandbox: then they meet the sorted keys in step, without a lookup. From
 * the first row out of byte order on, keys are looked up.
 */
static struct key_count *
match_key(const char *key, size_t len)
{
	int cmp = 1;

	if (!c.merge_lost && c.merge_last != NULL && strcmp(c.merge_last, key) >= 0) {
		c.merge_lost = 1;
		if (c.spill != NULL)
			drop_spill();
	}
	if (c.merge_lost)
		return find_key(key);
	if (len + 1 > c.merge_last_cap) {
		c.merge_last_cap = 2 * (len + 1);
		c.merge_last = idem_erealloc(c.merge_last, c.merge_last_cap);
	}
	memcpy(c.merge_last, key, len + 1);
	while (c.merge_next < c.nkeys && (cmp = strcmp(c.keys[c.merge_next].key, key)) < 0)
		c.merge_next++;
	return cmp == 0 ? &c.keys[c.merge_next++] : NULL;
}

/* One row of the count query as COPY text: the key (\N for none), a tab,
 * the count. Sets the key's observed count, or keeps it apart as
 * unexpected. */
static void
count_line(char *line, size_t len, struct key_count **unseeded, size_t *nunseeded)
{
	char *tab = len > 0 ? memrchr(line, '\t', len) : NULL;
	size_t key_len;
	long long n;
	struct key_count *k;

	if (tab == NULL || line[len - 1] != '\n')
		idem_die(IDEM_EXIT_ENV, "counting %s: a row without its count", c.effect_table);
	line[len - 1] = '\0';
	n = strtoll(tab + 1, NULL, 10);
	key_len = (size_t)(tab - line);
	*tab = '\0';
	switch (idem_tsv_unescape(line, &key_len)) {
	case 1: key_len = 0; break;
	case 0: break;
	default: idem_die(IDEM_EXIT_ENV, "counting %s: a key badly escaped", c.effect_table);
	}
	line[key_len] = '\0';
	if ((k = match_key(line, key_len)) != NULL) {
		k->observed = n;
		if (c.spill != NULL)
			settle(c.merge_next);
		return;
	}
	if (c.spill != NULL)
		settle(c.merge_next);
	if ((*nunseeded & (*nunseeded - 1)) == 0)
		*unseeded = idem_ereallocarray(*unseeded, *nunseeded ? *nunseeded * 2 : 1,
		    sizeof(**unseeded));
	(*unseeded)[*nunseeded].key = idem_estrdup(line);
	(*unseeded)[*nunseeded].observed = n;
	(*unseeded)[*nunseeded].expected = 0;
	(*nunseeded)++;
}

void
count(void)
{
	struct key_count *unseeded = NULL;
	size_t nunseeded = 0, i;
	PGresult *res;
	char *line;
	int len;

	query_row("count", c.count_sql);
	if (c.nkeys > 0)
		start_spill();
	res = PQgetResult(c.conn);
	if (PQresultStatus(res) != PGRES_COPY_OUT)
		count_failed(res);
	PQclear(res);
	while ((len = PQgetCopyData(c.conn, &line, 0)) > 0) {
		count_line(line, (size_t)len, &unseeded, &nunseeded);
		PQfreemem(line);
	}
	if (len == -2 || (res = PQgetResult(c.conn)) == NULL)
		count_failed(NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		count_failed(res);
	PQclear(res);
	while ((res = PQgetResult(c.conn)) != NULL)
		PQclear(res);
	if (c.spill != NULL)
		pass_spill();
	else
		for (i = 0; i < c.nkeys; i++)
			key_row(&c.keys[i]);
	EVP_MD_CTX_free(c.digest_before);
	if (nunseeded > 1)
		qsort(unseeded, nunseeded, sizeof(*unseeded), by_key);
	for (i = 0; i < nunseeded; i++) {
		c.unexpected += unseeded[i].observed;
		count_row("unexpected", unseeded[i].key, 0, unseeded[i].observed);
		free(unseeded[i].key);
	}
	free(unseeded);
	free(c.count_sql);
}

/* The calls that took effect per business key, in the order of the key
 * rows; a key no job seeded is expected none. Those whose body held no key
 * are counted apart, never dropped. Then the business keys rekeyed. */
void
count_external(void)
{
	size_t i;

	if (c.ncalls > 1)
		qsort(c.calls, c.ncalls, sizeof(*c.calls), by_key);
	for (i = 0; i < c.ncalls; i++) {
		struct key_count *k = &c.calls[i];

		/* a key no job has, called with no effect: kept for its
		 * Idempotency-Keys, nothing to count */
		if (k->expected == 0 && k->observed == 0)
			continue;
		c.external += k->observed;
		if (k->observed > k->expected)
			c.external_duplicates += k->observed - k->expected;
		count_row("external", k->key, k->expected, k->observed);
	}
	if (c.external_unknown > 0) {
		c.external += c.external_unknown;
		count_row("external-unknown", "", 0, c.external_unknown);
	}
	write_rekeyed();
}

/* The calls expected to take effect: the seed's expect, else one per
 * seeded key as counted. */
long long
expected_external(void)
{
	long long n = 0;
	size_t i;

	if (c.have_expect && c.expect_external >= 0)
		return c.expect_external;
	for (i = 0; i < c.ncalls; i++)
		n += c.calls[i].expected;
	return n;
}

/* The messages not acked, as the queue's adapter counts them (its unacked
 * section). */
static void
count_pending_of(char *const *msg_ids, size_t n)
{
	char *ids = idem_queue_text_array(msg_ids, n);
	const char *params[1] = { ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	struct idem_error err;
	PGresult *res;

	if ((res = idem_queue_exec(&c.q, c.conn, "unacked", "counting pending messages", 1, types,
	    params, &err)) == NULL)
		idem_die_error(&err);
	c.pending += strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	free(ids);
}

/* The ids go to the query PENDING_CHUNK at a time, read back from where
 * the stream's publish rows left them. */
void
count_pending(void)
{
	char *sql, *line = NULL, **chunk = idem_ereallocarray(NULL, PENDING_CHUNK, sizeof(char *));
	size_t cap = 0, n = 0, len;
	ssize_t got;

	if ((sql = idem_queue_sql(&c.q, c.conn, "unacked")) == NULL)
		idem_die(IDEM_EXIT_ENV, "the %s adapter has no unacked section", c.q.kind);
	query_row("pending", sql);
	free(sql);
	if (fflush(c.msg_ids) != 0 || fseek(c.msg_ids, 0, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "holding the message ids:");
	while ((got = getline(&line, &cap, c.msg_ids)) > 2) {
		/* "m", a tab, the escaped id, a newline */
		len = (size_t)got - 3;
		line[got - 1] = '\0';
		if (idem_tsv_unescape(line + 2, &len) != 0)
			idem_die(IDEM_EXIT_ENV, "holding the message ids: bad line");
		chunk[n++] = idem_estrndup(line + 2, len);
		if (n == PENDING_CHUNK) {
			count_pending_of(chunk, n);
			while (n > 0)
				free(chunk[--n]);
		}
	}
	if (ferror(c.msg_ids))
		idem_die(IDEM_EXIT_ENV, "holding the message ids:");
	if (n > 0 || c.nmsgs == 0)
		count_pending_of(chunk, n);
	while (n > 0)
		free(chunk[--n]);
	free(chunk);
	free(line);
}

void
totals(void)
{
	long long expected_effects = 0;
	size_t i;

	for (i = 0; i < c.nkeys; i++)
		expected_effects += c.keys[i].expected;
	count_row("total", "effects", c.have_expect ? c.expect[0] : expected_effects, c.effects);
	count_row("total", "duplicates", c.have_expect ? c.expect[1] : 0, c.duplicates);
	count_row("total", "missing", c.have_expect ? c.expect[2] : 0, c.missing);
	count_row("total", "unexpected", 0, c.unexpected);
	count_row("total", "conflicts", 0, c.conflicts);
	if (strcmp(c.phase, "after") == 0)
		count_row("total", "pending", c.have_expect ? c.expect[3] : 0, c.pending);
	if (strcmp(c.phase, "after") == 0 && c.have_external) {
		count_row("total", "external", expected_external(), c.external);
		count_row("total", "external_duplicates", 0, c.external_duplicates);
	}
}

void
digest(void)
{
	char hex[65], rows[32];
	unsigned char sum[32];
	const char *row[3];

	digest_flush();
	if (EVP_DigestFinal_ex(c.digest_ctx, sum, NULL) != 1)
		idem_die(IDEM_EXIT_ENV, "hashing the count rows: SHA-256 failed");
	EVP_MD_CTX_free(c.digest_ctx);
	sodium_bin2hex(hex, sizeof(hex), sum, sizeof(sum));
	snprintf(rows, sizeof(rows), "%lld", c.digest_rows);
	row[0] = c.phase;
	row[1] = hex;
	row[2] = rows;
	write_row("digest", row, 3);
}
