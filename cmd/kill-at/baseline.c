#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "baseline.h"
#include "pg.h"
#include "tsv.h"

void
idem_baseline_init(struct idem_baseline *b)
{
	memset(b, 0, sizeof(*b));
	b->limit = IDEM_BASELINE_JOBS;
	idem_map_init(&b->fault_jobs);
	idem_map_init(&b->fault_keys);
	if ((b->spool = tmpfile()) == NULL)
		b->spool_errno = errno;
}

void
idem_baseline_free(struct idem_baseline *b)
{
	if (b->spool != NULL)
		fclose(b->spool);
	idem_map_free(&b->fault_jobs);
	idem_map_free(&b->fault_keys);
	idem_free_list(b->keys, b->nkeys);
	free(b->expected);
	free(b->observed);
	free(b->ids);
	free(b->held_ids);
}

static void
spool(struct idem_baseline *b, const char *kind, const char *first, const char *second)
{
	const char *row[2] = { first, second };

	if (b->spool_errno == 0 && idem_tsv_write_row(b->spool, kind, row, 2) < 0)
		b->spool_errno = errno ? errno : EIO;
}

void
idem_baseline_job(struct idem_baseline *b, const char *job_id, const char *business_key, int fault)
{
	spool(b, "job", job_id, business_key);
	if (fault)
		idem_baseline_fault_key(b, business_key);
}

void
idem_baseline_message(struct idem_baseline *b, const char *job_id, const char *msg_id)
{
	spool(b, "publish", job_id, msg_id);
}

void
idem_baseline_fault_job(struct idem_baseline *b, const char *job_id)
{
	idem_map_put(&b->fault_jobs, job_id, 1);
}

void
idem_baseline_fault_key(struct idem_baseline *b, const char *business_key)
{
	idem_map_put(&b->fault_keys, business_key, 1);
}

/* The rows of the spool of one kind, from its start: 1 with the two
 * fields (decoded, valid until the next call), 0 at its end, -1 on a read
 * error. */
struct spool_reader {
	char *line;
	size_t cap;
};

static int
spool_next(struct idem_baseline *b, struct spool_reader *r, const char *kind, char **first,
	   char **second)
{
	size_t klen = strlen(kind), len;
	ssize_t got;
	char *tab;

	while ((got = getline(&r->line, &r->cap, b->spool)) > 0) {
		if (r->line[got - 1] == '\n')
			r->line[got - 1] = '\0';
		if (strncmp(r->line, kind, klen) != 0 || r->line[klen] != '\t')
			continue;
		*first = r->line + klen + 1;
		if ((tab = strchr(*first, '\t')) == NULL)
			continue;
		*tab = '\0';
		*second = tab + 1;
		len = strlen(*first);
		if (idem_tsv_unescape(*first, &len) != 0)
			continue;
		len = strlen(*second);
		if (idem_tsv_unescape(*second, &len) != 0)
			continue;
		return 1;
	}
	return ferror(b->spool) ? -1 : 0;
}

static int
spool_rewind(struct idem_baseline *b)
{
	if (b->spool_errno != 0)
		return -1;
	if (fflush(b->spool) != 0 || fseek(b->spool, 0, SEEK_SET) != 0) {
		b->spool_errno = errno;
		return -1;
	}
	return 0;
}

size_t
idem_baseline_plan(struct idem_baseline *b)
{
	struct idem_map key_index, jobs;
	struct spool_reader r = { NULL, 0 };
	char *job, *value;
	struct idem_text_array ids = { 0 }, held = { 0 };
	size_t k;
	int rc = 0;

	idem_map_init(&key_index);
	idem_map_init(&jobs);
	/* the keys of the jobs a fault is planned for */
	if (b->fault_jobs.n > 0 && spool_rewind(b) == 0)
		while ((rc = spool_next(b, &r, "job", &job, &value)) > 0)
			if (idem_map_get(&b->fault_jobs, job) != IDEM_MAP_NONE)
				idem_baseline_fault_key(b, value);
	/* the baseline's jobs: held back, a fault's, or beyond the limit */
	if (spool_rewind(b) == 0)
		while ((rc = spool_next(b, &r, "job", &job, &value)) > 0) {
			if (idem_map_get(&b->fault_keys, value) != IDEM_MAP_NONE ||
			    (b->limit > 0 && b->jobs >= b->limit))
				continue;
			b->jobs++;
			idem_map_put(&jobs, job, 1);
			if ((k = idem_map_get(&key_index, value)) != IDEM_MAP_NONE) {
				if (b->job_scope)
					b->expected[k]++;
				continue;
			}
			b->keys = idem_ereallocarray(b->keys, b->nkeys + 1, sizeof(*b->keys));
			b->expected = idem_ereallocarray(b->expected, b->nkeys + 1, sizeof(*b->expected));
			b->keys[b->nkeys] = idem_estrdup(value);
			b->expected[b->nkeys] = 1;
			idem_map_put(&key_index, value, b->nkeys);
			b->nkeys++;
		}
	idem_map_free(&key_index);
	if ((b->observed = calloc(b->nkeys + 1, sizeof(*b->observed))) == NULL)
		idem_die(IDEM_EXIT_ENV, "calloc:");
	/* their messages, and the others */
	if (spool_rewind(b) == 0)
		while ((rc = spool_next(b, &r, "publish", &job, &value)) > 0)
			idem_text_array_add(idem_map_get(&jobs, job) != IDEM_MAP_NONE ? &ids : &held,
			    value);
	free(r.line);
	idem_map_free(&jobs);
	if (rc < 0 && b->spool_errno == 0)
		b->spool_errno = errno ? errno : EIO;
	b->messages = (long long)ids.n;
	b->ids = idem_text_array_take(&ids);
	b->held_ids = idem_text_array_take(&held);
	b->result = b->jobs > 0 ? IDEM_BASELINE_PASSED : IDEM_BASELINE_NONE;
	if (b->spool_errno != 0) {
		errno = b->spool_errno;
		return SIZE_MAX;
	}
	return (size_t)b->jobs;
}

static int
exec_ids(const struct idem_queue *q, PGconn *conn, const char *section, const char *what,
	 const char *ids, struct idem_error *err)
{
	const char *params[1] = { ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	PGresult *res = idem_queue_exec(q, conn, section, what, 1, types, params, err);

	PQclear(res);
	return res == NULL ? -1 : 0;
}

int
idem_baseline_hold_back(const struct idem_baseline *b, const struct idem_queue *q, PGconn *conn,
			struct idem_error *err)
{
	return exec_ids(q, conn, "hold-back", "holding the messages back for the baseline",
	    b->held_ids, err);
}

int
idem_baseline_let_go(const struct idem_baseline *b, const struct idem_queue *q, PGconn *conn,
		     struct idem_error *err)
{
	return exec_ids(q, conn, "let-go", "letting the held messages go after the baseline",
	    b->held_ids, err);
}

int
idem_baseline_count(struct idem_baseline *b, PGconn *conn, const char *effect_table,
		    const char *key_columns, struct idem_error *err)
{
	char *table = NULL, *key = NULL, *sql = NULL, *keys = NULL;
	const char *params[1] = { effect_table };
	long long *into = b->observed;
	struct idem_map index;
	PGresult *res;
	int rc = -1, i;
	size_t k;

	if ((res = idem_pg_exec(conn, "looking for the effect table", err,
	    "SELECT to_regclass($1) IS NOT NULL", 1, params)) == NULL)
		return -1;
	i = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	memset(into, 0, b->nkeys * sizeof(*into));
	if (!i) {
		rc = 0;
		goto out;
	}
	table = idem_pg_quote_table(conn, effect_table);
	if ((key = idem_pg_key_sql(conn, key_columns, "")) == NULL) {
		idem_error_set(err, IDEM_EXIT_USAGE, "the key columns %s are no array of names",
		    key_columns);
		goto out;
	}
	if (asprintf(&sql, "SELECT %s, count(*) FROM %s WHERE %s = ANY ($1::text[]) GROUP BY 1",
	    key, table, key) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	keys = idem_queue_text_array(b->keys, b->nkeys);
	params[0] = keys;
	if ((res = idem_pg_exec(conn, "counting the baseline's effects", err, sql, 1, params)) == NULL)
		goto out;
	idem_map_init(&index);
	for (k = 0; k < b->nkeys; k++)
		idem_map_put(&index, b->keys[k], k);
	for (i = 0; i < PQntuples(res); i++)
		if ((k = idem_map_get(&index, PQgetvalue(res, i, 0))) != IDEM_MAP_NONE)
			into[k] = strtoll(PQgetvalue(res, i, 1), NULL, 10);
	idem_map_free(&index);
	PQclear(res);
	rc = 0;
out:
	free(table);
	free(key);
	free(sql);
	free(keys);
	return rc;
}

int
idem_baseline_judge(struct idem_baseline *b, const struct idem_queue *q, PGconn *conn,
		    struct idem_error *err)
{
	const char *params[1] = { b->ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	PGresult *res;
	size_t k;

	if (b->jobs == 0)
		return 0;
	if ((res = idem_queue_exec(q, conn, "unacked", "counting the baseline's unacked messages",
	    1, types, params, err)) == NULL)
		return -1;
	b->unacked = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	b->effects_expected = b->effects_observed = b->duplicates = b->missing = 0;
	for (k = 0; k < b->nkeys; k++) {
		b->effects_expected += b->expected[k];
		b->effects_observed += b->observed[k];
		if (b->observed[k] > b->expected[k])
			b->duplicates += b->observed[k] - b->expected[k];
		else if (b->observed[k] < b->expected[k])
			b->missing += b->expected[k] - b->observed[k];
	}
	b->result = b->unacked == 0 && b->duplicates == 0 && b->missing == 0 ?
	    IDEM_BASELINE_PASSED : IDEM_BASELINE_FAILED;
	return 0;
}

int
idem_baseline_write(const struct idem_baseline *b, FILE *out)
{
	static const char *const results[] = { "none", "passed", "failed" };
	char n[7][24];
	const char *row[8];
	long long v[7] = { b->jobs, b->messages, b->unacked, b->effects_expected,
	    b->effects_observed, b->duplicates, b->missing };
	int i;

	row[0] = results[b->result];
	for (i = 0; i < 7; i++) {
		snprintf(n[i], sizeof(n[i]), "%lld", v[i]);
		row[i + 1] = n[i];
	}
	return idem_tsv_write_row(out, "baseline", row, 8);
}

void
idem_baseline_explain(const struct idem_baseline *b, FILE *out, size_t max)
{
	size_t k, shown = 0;

	if (b->unacked > 0)
		fprintf(out, "%s: baseline: %lld of %lld messages never acked\n", argv0, b->unacked,
		    b->messages);
	for (k = 0; k < b->nkeys && shown < max; k++)
		if (b->observed[k] != b->expected[k]) {
			fprintf(out, "%s: baseline: business key %s: %lld effects, expected %lld\n",
			    argv0, b->keys[k], b->observed[k], b->expected[k]);
			shown++;
		}
}
