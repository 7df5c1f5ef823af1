/* count-effects: count the effect rows per business key with one printed
 * query, beside what the seed expects, and the external calls that took
 * effect per business key from the stream's call rows; find the guard the
 * database itself enforces and probe it with a copy of a row that is always
 * rolled back; append query, count, guard, probe, measure and digest rows. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/evp.h>
#include <sodium.h>

#include "map.h"
#include "pg.h"
#include "queue.h"
#include "seed.h"
#include "tsv.h"
#include "error.h"

/* message ids a pending query takes at a time */
#define PENDING_CHUNK 50000

static const char synopsis[] =
	"usage: count-effects [-d conninfo] [--before] [file]\n";

struct key_count {
	char *key;
	uint64_t hash;			/* idem_map_hash of the key, or 0 until it is needed */
	long long expected, observed;
	int seeded;
	unsigned char first_hash[32];	/* payload hash of the first job with this key */
	int conflict;
};

static struct {
	struct idem_queue q;		/* the queue's adapter */
	const char *phase;
	PGconn *conn;
	/* the stream */
	char *effect_table, *key_columns, *key_scope;
	char *declared_table, *declared_columns;	/* the declared_guard row, or NULL */
	long long expect[4];		/* effects, duplicates, missing, pending */
	int have_expect;
	struct key_count *keys;		/* seeded, then found */
	struct key_block {
		struct key_block *next;
		size_t used;
		char text[];
	} *key_text;			/* the seeded keys' text, packed */
	size_t nkeys, keys_cap;
	struct idem_index key_index;	/* of keys, once they need one */
	int indexed;			/* the slots hold the keys where they are */
	int seeded_unordered;		/* a job's key came not after the key before */
	/* the count query's rows met with the sorted keys, while they come
	 * in byte order */
	size_t merge_next;
	char *merge_last;		/* the key of the row before, or NULL */
	size_t merge_last_cap;
	int merge_lost;			/* a row out of byte order came */
	/* while they come in byte order, the key rows of the keys met so far,
	 * written as the count query's rows come; dropped if a row comes out
	 * of that order, and written after it ends */
	FILE *spill;
	size_t settled;			/* keys[0 .. settled) are in the spill */
	EVP_MD_CTX *digest_before;	/* the digest before the spill */
	long long digest_rows_before;
	size_t njobs;
	FILE *msg_ids;			/* the published messages' ids, one a line */
	size_t nmsgs;
	char *first_publish, *last_ack;
	size_t nkills;
	char **killed_keys;		/* business key of each killed attempt's job */
	long long *recovery_ms;		/* -1 when the retry never acked */
	size_t nrecover;
	char **recover_keys;
	/* the sql */
	const char *conninfo;
	char *table_sql, *count_sql;
	char **column_sql;
	size_t ncolumns;
	/* totals */
	long long effects, duplicates, missing, unexpected, conflicts, pending;
	/* the external call, when the stream has an external row: the calls
	 * that took effect per business key of the call, and those whose
	 * body held no key */
	int have_external, calls_seen;
	char **external_fields, *pending_table, *pending_owner;
	size_t nexternal_fields;
	long long expect_external;	/* -1: \N */
	struct key_count *calls;
	size_t ncalls;
	struct idem_map call_index;
	long long external, external_unknown, external_duplicates;
	/* evidence for the digest, hashed as it is written: by OpenSSL's
	 * SHA-256, which uses the CPU's SHA instructions where it has them,
	 * a buffer of rows at a time */
	EVP_MD_CTX *digest_ctx;
	unsigned char digest_buf[65536];
	size_t digest_len;
	long long digest_rows;
	char *row_buf;			/* one count row, formatted */
	size_t row_cap;
} c = { .phase = "after" };

/* Where the stream waits until all of it was read and found good: a
 * temporary file, or the input itself when it is a regular file, which is
 * then passed on only if it is still as it was read. */
static struct {
	FILE *f;
	const char *name;
	int is_input;
	off_t start, end;		/* the stream's bytes in f */
	struct stat st;			/* the input's, before it was read */
} held;

static void
write_row(const char *kind, const char *const *fields, size_t n)
{
	if (idem_tsv_write_row(stdout, kind, fields, n) < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
}

static int
by_key(const void *a, const void *b)
{
	return strcmp(((const struct key_count *)a)->key, ((const struct key_count *)b)->key);
}

static int
same_key(const void *key, size_t entry)
{
	return strcmp(c.keys[entry].key, key) == 0;
}

static uint64_t
hash_of_key(const void *ctx, size_t entry)
{
	struct key_count *k = &c.keys[entry];

	(void)ctx;
	if (k->hash == 0)
		k->hash = idem_map_hash(k->key);
	return k->hash;
}

/* The slot of a seeded key, whose idem_map_hash is h: its own, or the
 * empty one where it goes. */
static struct idem_index_slot *
key_slot(const char *key, uint64_t h)
{
	return idem_index_slot(&c.key_index, h, same_key, key);
}

/* Places every key in the index, with room for cap keys and more. */
static void
index_keys(size_t cap)
{
	size_t i;

	idem_index_free(&c.key_index);
	idem_index_reserve(&c.key_index, cap, hash_of_key, NULL);
	for (i = 0; i < c.nkeys; i++) {
		uint64_t h = hash_of_key(NULL, i);

		idem_index_fill(&c.key_index, key_slot(c.keys[i].key, h), h, i);
	}
}

/* bytes of a block of key text */
#define KEY_BLOCK 1048576

/* A copy of a seeded key, packed with the others: one allocation a block,
 * not one a key. */
static char *
keep_key(const char *key)
{
	size_t n = strlen(key) + 1;
	struct key_block *b = c.key_text;
	char *out;

	if (b == NULL || b->used + n > KEY_BLOCK) {
		b = idem_emalloc(sizeof(*b) + (n > KEY_BLOCK ? n : KEY_BLOCK));
		b->next = c.key_text;
		b->used = 0;
		c.key_text = b;
	}
	out = memcpy(b->text + b->used, key, n);
	b->used += n;
	return out;
}

static int
hex_digit(char x)
{
	return x >= 'a' ? x - 'a' + 10 : x - '0';
}

/* A job's business key, merged with the jobs seen before: expected once
 * per key, or once per job when the key scope is the job; a key seeded
 * with two payloads is a conflict. One entry per key, not per job. */
static void
seed_key(const char *key, const char *payload_sha256)
{
	unsigned char hash[32];
	uint64_t h = 0;
	struct key_count *k;
	struct idem_index_slot *slot;
	size_t i;

	/* the reader checked 64 lowercase hex digits */
	for (i = 0; i < sizeof(hash); i++)
		hash[i] = (unsigned char)(hex_digit(payload_sha256[2 * i]) << 4 |
		    hex_digit(payload_sha256[2 * i + 1]));
	/* While the keys come in byte order, as seed-gen writes them, each is
	 * new and they are sorted already: no slot is needed until the first
	 * that does not come after the one before. */
	if (!c.seeded_unordered && c.nkeys > 0 && strcmp(c.keys[c.nkeys - 1].key, key) >= 0) {
		c.seeded_unordered = 1;
		index_keys(2 * c.nkeys + 1);
	}
	slot = NULL;
	if (c.seeded_unordered) {
		if (2 * (c.nkeys + 1) > c.key_index.cap)
			index_keys(2 * c.nkeys + 1);
		h = idem_map_hash(key);
		slot = key_slot(key, h);
	}
	if (slot != NULL && slot->entry != 0) {
		k = &c.keys[slot->entry - 1];
		if (strcmp(c.key_scope, "job") == 0)
			k->expected++;
		if (memcmp(k->first_hash, hash, sizeof(hash)) != 0)
			k->conflict = 1;
		return;
	}
	if (c.nkeys == c.keys_cap) {
		c.keys_cap = c.keys_cap ? c.keys_cap * 2 : 1024;
		c.keys = idem_ereallocarray(c.keys, c.keys_cap, sizeof(*c.keys));
	}
	k = &c.keys[c.nkeys++];
	memset(k, 0, sizeof(*k));
	k->key = keep_key(key);
	k->hash = h;
	memcpy(k->first_hash, hash, sizeof(hash));
	k->expected = 1;
	k->seeded = 1;
	if (slot != NULL)
		idem_index_fill(&c.key_index, slot, h, c.nkeys - 1);
}

/* The entry of a seeded key, or NULL. */
static struct key_count *
find_key(const char *key)
{
	struct idem_index_slot *slot;

	if (!c.indexed) {
		index_keys(c.nkeys);
		c.indexed = 1;
	}
	slot = key_slot(key, idem_map_hash(key));
	return slot->entry != 0 ? &c.keys[slot->entry - 1] : NULL;
}

static void prepare_identifiers(void);
static void start_count(void);

static void
connect_and_count(void)
{
	struct idem_error err;

	if ((c.conn = idem_pg_connect(c.conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(c.conn, &err) < 0)
		idem_die_error(&err);
	prepare_identifiers();
	start_count();
}

/* The entry of a call's business key, made with nothing expected. */
static struct key_count *
call_key(const char *key)
{
	size_t i = idem_map_get(&c.call_index, key);

	if (i != IDEM_MAP_NONE)
		return &c.calls[i];
	c.calls = idem_ereallocarray(c.calls, c.ncalls + 1, sizeof(*c.calls));
	memset(&c.calls[c.ncalls], 0, sizeof(*c.calls));
	c.calls[c.ncalls].key = idem_estrdup(key);
	idem_map_put(&c.call_index, key, c.ncalls);
	return &c.calls[c.ncalls++];
}

/* The external row: the fields of a call's business key. Each job row
 * after it is expected to call once with its payload's values. */
static void
read_external(const struct idem_tsv_reader *r)
{
	json_t *fields = json_loads(r->fields[EXTERNAL_KEY_FIELDS], 0, NULL), *f;
	size_t i;

	if (c.njobs > 0 || c.calls_seen)
		idem_die(IDEM_EXIT_USAGE, "%s:%ld: an external row after job or call rows: "
		    "count-effects reads each job's call from its payload as its row goes by; "
		    "write it right after the seed row, as seed-gen does", r->name, r->line_no);
	/* the reader checked it is an array of one or more strings */
	c.nexternal_fields = json_array_size(fields);
	c.external_fields = idem_ereallocarray(NULL, c.nexternal_fields, sizeof(char *));
	json_array_foreach(fields, i, f)
		c.external_fields[i] = idem_estrdup(json_string_value(f));
	json_decref(fields);
	if (r->fields[EXTERNAL_PENDING_TABLE] && r->fields[EXTERNAL_PENDING_OWNER]) {
		c.pending_table = idem_estrdup(r->fields[EXTERNAL_PENDING_TABLE]);
		c.pending_owner = idem_estrdup(r->fields[EXTERNAL_PENDING_OWNER]);
	}
	c.have_external = 1;
}

/* A job's call, by the business key its payload gives the call: once per
 * key, or once per job when the key scope is the job, as its effect rows. */
static void
expect_call(const struct idem_tsv_reader *r)
{
	json_t *payload = json_loads(r->fields[JOB_PAYLOAD], 0, NULL);
	char *key = idem_business_key(payload, c.external_fields, c.nexternal_fields);
	struct key_count *k;

	json_decref(payload);
	if (key == NULL)
		idem_die(IDEM_EXIT_USAGE, "%s:%ld: job row, field payload: no string, integer or "
		    "boolean value for every field of the external row's key_fields", r->name,
		    r->line_no);
	k = call_key(key);
	if (strcmp(c.key_scope, "job") == 0 || !k->seeded)
		k->expected++;
	k->seeded = 1;
	free(key);
}

/* A call that took effect: counted under its business key, or apart when
 * its body held none. */
static void
took_effect(const char *key)
{
	if (key == NULL)
		c.external_unknown++;
	else
		call_key(key)->observed++;
}

/* The business key of each recovered job, in place of its job id: the held
 * stream is read again for the job rows of those jobs, so no job id is kept
 * for the others. */
static void
recovered_keys(void)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	struct idem_map wanted;
	char **keys = idem_ereallocarray(NULL, c.nrecover, sizeof(char *));
	size_t i, n = 0;
	int rc;

	idem_map_init(&wanted);
	for (i = 0; i < c.nrecover; i++)
		if (idem_map_get(&wanted, c.recover_keys[i]) == IDEM_MAP_NONE) {
			idem_map_put(&wanted, c.recover_keys[i], n);
			keys[n++] = NULL;
		}
	if (fflush(held.f) != 0 || fseeko(held.f, held.start, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	idem_tsv_reader_init(&r, held.f, held.name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		if (rc < 0)
			idem_die_error(&err);
		if (rc == IDEM_TSV_ROW && r.kind == IDEM_KIND_JOB &&
		    (i = idem_map_get(&wanted, r.fields[JOB_ID])) != IDEM_MAP_NONE && keys[i] == NULL)
			keys[i] = idem_estrdup(r.fields[JOB_BUSINESS_KEY]);
	}
	idem_tsv_reader_free(&r);
	for (i = 0; i < c.nrecover; i++) {
		const char *key = keys[idem_map_get(&wanted, c.recover_keys[i])];

		free(c.recover_keys[i]);
		c.recover_keys[i] = idem_estrdup(key ? key : "");
	}
	idem_free_list(keys, n);
	idem_map_free(&wanted);
}

/* Keeps what counting needs, and holds the stream: it is passed on only
 * once all of it was read and found good. */
static void
read_stream(FILE *in, const char *name)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	int rc;
	size_t i;

	idem_tsv_reader_init(&r, in, name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		if (rc < 0)
			idem_die_error(&err);
		if (!held.is_input && idem_tsv_pass(held.f, &r) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the stream:");
		if (rc != IDEM_TSV_ROW)
			continue;
		switch (r.kind) {
		case IDEM_KIND_SEED:
			c.effect_table = idem_estrdup(r.fields[SEED_EFFECT_TABLE]);
			c.key_columns = idem_estrdup(r.fields[SEED_KEY_COLUMNS]);
			c.key_scope = idem_estrdup(r.fields[SEED_KEY_SCOPE]);
			if (idem_queue_open(&c.q, r.fields[SEED_QUEUE_KIND], r.fields[SEED_QUEUE], &err) < 0)
				idem_die_error(&err);
			connect_and_count();
			break;
		case IDEM_KIND_EXPECT:
			for (i = 0; i < 4; i++)
				c.expect[i] = idem_tsv_number(&r, EXPECT_EFFECTS + i, 0);
			c.expect_external = idem_tsv_number(&r, EXPECT_EXTERNAL, -1);
			c.have_expect = 1;
			break;
		case IDEM_KIND_EXTERNAL:
			read_external(&r);
			break;
		case IDEM_KIND_DECLARED_GUARD:
			c.declared_table = idem_estrdup(r.fields[DECLARED_GUARD_TABLE]);
			c.declared_columns = idem_estrdup(r.fields[DECLARED_GUARD_KEY_COLUMNS]);
			break;
		case IDEM_KIND_CALL:
			c.calls_seen = 1;
			if (c.have_external && strcmp(r.fields[CALL_EFFECT], "yes") == 0)
				took_effect(r.fields[CALL_BUSINESS_KEY]);
			break;
		case IDEM_KIND_JOB:
			if (c.have_external)
				expect_call(&r);
			seed_key(r.fields[JOB_BUSINESS_KEY], r.fields[JOB_PAYLOAD_SHA256]);
			c.njobs++;
			break;
		case IDEM_KIND_PUBLISH:
			if (idem_tsv_write_row(c.msg_ids, "m", (const char *const *)&r.fields[PUBLISH_MSG_ID],
			    1) < 0)
				idem_die(IDEM_EXIT_ENV, "holding the message ids:");
			c.nmsgs++;
			if (c.first_publish == NULL ||
			    strcmp(r.fields[PUBLISH_PUBLISHED_AT], c.first_publish) < 0) {
				free(c.first_publish);
				c.first_publish = idem_estrdup(r.fields[PUBLISH_PUBLISHED_AT]);
			}
			break;
		case IDEM_KIND_ATTEMPT:
			if (r.fields[ATTEMPT_ACKED_AT] && (c.last_ack == NULL ||
			    strcmp(r.fields[ATTEMPT_ACKED_AT], c.last_ack) > 0)) {
				free(c.last_ack);
				c.last_ack = idem_estrdup(r.fields[ATTEMPT_ACKED_AT]);
			}
			break;
		case IDEM_KIND_KILL:
			c.nkills++;
			break;
		case IDEM_KIND_RECOVER:
			c.recovery_ms = idem_ereallocarray(c.recovery_ms, c.nrecover + 1, sizeof(long long));
			c.recover_keys = idem_ereallocarray(c.recover_keys, c.nrecover + 1, sizeof(char *));
			c.recovery_ms[c.nrecover] = idem_tsv_number(&r, RECOVER_RECOVERY_MS, -1);
			c.recover_keys[c.nrecover] = idem_estrdup(r.fields[RECOVER_JOB_ID]);
			c.nrecover++;
			break;
		default:
			break;
		}
	}
	idem_tsv_reader_free(&r);
	if (held.is_input && (held.end = ftello(in)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", name);
	if (c.nrecover > 0)
		recovered_keys();
}

/* Holds the stream in a temporary file, or, from a regular file, takes
 * note of where it starts and of the file as it is. */
static void
hold_stream(FILE *in, const char *name)
{
	held.name = name;
	if (fstat(fileno(in), &held.st) == 0 && S_ISREG(held.st.st_mode) &&
	    (held.start = ftello(in)) >= 0) {
		held.f = in;
		held.is_input = 1;
	} else if ((held.f = tmpfile()) == NULL) {
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	}
}

/* Whether the input file is still the one it was before it was read, and
 * read up to its end. */
static int
input_unchanged(void)
{
	struct stat now;

	return fstat(fileno(held.f), &now) == 0 && now.st_dev == held.st.st_dev &&
	    now.st_ino == held.st.st_ino && now.st_size == held.st.st_size &&
	    now.st_size == held.end && now.st_mtim.tv_sec == held.st.st_mtim.tv_sec &&
	    now.st_mtim.tv_nsec == held.st.st_mtim.tv_nsec &&
	    now.st_ctim.tv_sec == held.st.st_ctim.tv_sec &&
	    now.st_ctim.tv_nsec == held.st.st_ctim.tv_nsec;
}

/* Writes the bytes of a file from start to end on standard output: by
 * sendfile, in the kernel, when it can; else through a buffer. */
static void
copy_out(FILE *from, off_t start, off_t end, const char *what)
{
	char buf[65536];
	size_t got;
	off_t at = start;
	ssize_t sent = 0;

	if (fflush(from) != 0)
		idem_die(IDEM_EXIT_ENV, "%s:", what);
	if (fflush(stdout) != 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	while (at < end && (sent = sendfile(fileno(stdout), fileno(from), &at,
	    (size_t)(end - at))) > 0)
		;
	if (sent < 0 && at == start && (errno == EINVAL || errno == ENOSYS))
		sent = 0;	/* not a kind of file sendfile writes to */
	else if (sent < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	if (fseeko(from, at, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "%s:", what);
	while (at < end && (got = fread(buf, 1, (size_t)(end - at) < sizeof(buf) ?
	    (size_t)(end - at) : sizeof(buf), from)) > 0) {
		if (fwrite(buf, 1, got, stdout) != got)
			idem_die(IDEM_EXIT_ENV, "write error on standard output:");
		at += (off_t)got;
	}
	if (ferror(from) || at < end)
		idem_die(IDEM_EXIT_ENV, "%s:", what);
}

/* Passes the held stream on, once it was read and found good; from the
 * input file only while it is as it was read. */
static void
pass_held(void)
{
	off_t end = held.end;

	if (held.is_input && !input_unchanged())
		idem_die(IDEM_EXIT_ENV, "%s: changed while it was read; nothing passed on", held.name);
	if (!held.is_input && (fflush(held.f) != 0 || fseeko(held.f, 0, SEEK_END) != 0 ||
	    (end = ftello(held.f)) < 0))
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	copy_out(held.f, held.start, end, "holding the stream");
	if (held.f != stdin)
		fclose(held.f);
}

/* Seeded keys, one entry each (seed_key merged them), in key order. */
static void
sort_seeded(void)
{
	if (c.nkeys > 1 && c.seeded_unordered)
		qsort(c.keys, c.nkeys, sizeof(*c.keys), by_key);
	c.indexed = 0;
}

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

/* The quoted names of a JSON array of names, which the reader checked. */
static char **
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

/* The business key as SQL, in the stream's form: one column as text, several
 * as a compact JSON array in key order. */
static char *
key_expression(void)
{
	char *out = NULL;
	size_t len = 0, i;
	FILE *f = open_memstream(&out, &len);

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	if (c.ncolumns == 1) {
		fprintf(f, "%s::text", c.column_sql[0]);
	} else {
		fputs("'[' || ", f);
		for (i = 0; i < c.ncolumns; i++)
			fprintf(f, "%sto_json(%s)::text", i ? " || ',' || " : "", c.column_sql[i]);
		fputs(" || ']'", f);
	}
	fclose(f);
	return out;
}

static void
query_row(const char *name, const char *sql)
{
	const char *row[3] = { c.phase, name, sql };

	write_row("query", row, 3);
}

/* Prints a query in its query row, then runs it; a failure is fatal, named
 * by what the query does and to which table. */
static PGresult *
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
	char *key_sql = key_expression(), *copy_sql;

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

	idem_pg_message(c.conn, res, msg, sizeof(msg));
	PQclear(res);
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

static void
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
 * are counted apart, never dropped. */
static void
count_external(void)
{
	size_t i;

	if (c.ncalls > 1)
		qsort(c.calls, c.ncalls, sizeof(*c.calls), by_key);
	for (i = 0; i < c.ncalls; i++) {
		struct key_count *k = &c.calls[i];

		c.external += k->observed;
		if (k->observed > k->expected)
			c.external_duplicates += k->observed - k->expected;
		count_row("external", k->key, k->expected, k->observed);
	}
	if (c.external_unknown > 0) {
		c.external += c.external_unknown;
		count_row("external-unknown", "", 0, c.external_unknown);
	}
}

/* The calls expected to take effect: the seed's expect, else one per
 * seeded key as counted. */
static long long
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
static void
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

static void
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
static void
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

static void
measure_row(const char *name, const char *value, long long numerator, long long denominator,
	    const char *unit, int have_numerator)
{
	char n[32], d[32];
	const char *row[7];

	snprintf(n, sizeof(n), "%lld", numerator);
	snprintf(d, sizeof(d), "%lld", denominator);
	row[0] = name;
	row[1] = value;
	row[2] = have_numerator ? n : NULL;
	row[3] = d;
	row[4] = unit;
	row[5] = c.first_publish;
	row[6] = c.last_ack;
	write_row("measure", row, 7);
}

static int
by_number(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

static void
measures(void)
{
	char value[64];
	long long reconciled = 0, *ms, n = 0;
	size_t i;

	if (c.njobs > 0) {
		snprintf(value, sizeof(value), "%.3f", (double)c.duplicates * 1000.0 / (double)c.njobs);
		measure_row("duplicate_effects_per_1000_jobs", value, c.duplicates, (long long)c.njobs,
		    "per 1000 accepted jobs", 1);
	}
	for (i = 0; i < c.nrecover; i++) {
		struct key_count *k = find_key(c.recover_keys[i]);

		if (c.recovery_ms[i] >= 0 && k != NULL && k->observed == k->expected)
			reconciled++;
	}
	if (c.nkills > 0)
		snprintf(value, sizeof(value), "%.3f", (double)reconciled * 100.0 / (double)c.nkills);
	measure_row("reconciled_jobs_per_100_failures", c.nkills > 0 ? value : NULL, reconciled,
	    (long long)c.nkills, "per 100 failures (kills)", 1);
	ms = idem_ereallocarray(NULL, c.nrecover + 1, sizeof(*ms));
	for (i = 0; i < c.nrecover; i++)
		if (c.recovery_ms[i] >= 0)
			ms[n++] = c.recovery_ms[i];
	qsort(ms, (size_t)n, sizeof(*ms), by_number);
	if (n > 0)
		snprintf(value, sizeof(value), "%lld", n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2);
	measure_row("recovery_ms_median", n > 0 ? value : NULL, 0, n, "ms from kill to clean retry ack", 0);
	if (n > 0)
		snprintf(value, sizeof(value), "%lld", ms[n - 1]);
	measure_row("recovery_ms_max", n > 0 ? value : NULL, 0, n, "ms from kill to clean retry ack", 0);
	free(ms);
}

/* The rows of the worker's table of pending calls, per owner: the table
 * and its owner column as the external row names them, quoted. The rows
 * are counted whatever state the worker keeps in them: the stream names
 * no column for it. */
static void
pending_calls(void)
{
	char *table = idem_pg_quote_table(c.conn, c.pending_table);
	char *owner = idem_pg_quote_ident(c.conn, c.pending_owner), *sql;
	char value[32], unit[1024];
	long long total = 0, n;
	PGresult *res;
	int i;

	if (asprintf(&sql, "SELECT %s::text AS owner, count(*) AS calls FROM %s GROUP BY 1 ORDER BY 1",
	    owner, table) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	res = printed_query("pending_external", sql, "counting the pending calls in", c.pending_table);
	for (i = 0; i < PQntuples(res); i++)
		total += strtoll(PQgetvalue(res, i, 1), NULL, 10);
	for (i = 0; i < PQntuples(res); i++) {
		n = strtoll(PQgetvalue(res, i, 1), NULL, 10);
		snprintf(value, sizeof(value), "%lld", n);
		if (PQgetisnull(res, i, 0))
			snprintf(unit, sizeof(unit), "rows of %s without %s", c.pending_table,
			    c.pending_owner);
		else
			snprintf(unit, sizeof(unit), "rows of %s whose %s is %s", c.pending_table,
			    c.pending_owner, PQgetvalue(res, i, 0));
		measure_row("pending_external_calls", value, n, total, unit, 1);
	}
	if (PQntuples(res) == 0) {
		snprintf(unit, sizeof(unit), "rows of %s", c.pending_table);
		measure_row("pending_external_calls", "0", 0, 0, unit, 1);
	}
	PQclear(res);
	free(sql);
	free(owner);
	free(table);
}

static void
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

/* Exit 1 naming every total that differs from the seed's expect, and the
 * keys with more rows than expected. */
static int
verdict(void)
{
	static const char *const names[] = { "effects", "duplicates", "missing", "pending" };
	long long observed[4] = { c.effects, c.duplicates, c.missing, c.pending };
	size_t i, shown = 0;
	int rc = 0;

	if (!c.have_expect)
		return 0;
	for (i = 0; i < 4; i++) {
		if (observed[i] == c.expect[i])
			continue;
		idem_warn("%s: expected %lld, observed %lld", names[i], c.expect[i], observed[i]);
		rc = IDEM_EXIT_FINDING;
	}
	for (i = 0; i < c.nkeys && shown < 10; i++)
		if (c.keys[i].observed > c.keys[i].expected) {
			idem_warn("duplicate: business key %s has %lld effect rows, expected %lld",
			    c.keys[i].key, c.keys[i].observed, c.keys[i].expected);
			shown++;
		}
	if (!c.have_external)
		return rc;
	if (c.external != expected_external()) {
		idem_warn("external: expected %lld, observed %lld", expected_external(), c.external);
		rc = IDEM_EXIT_FINDING;
	}
	/* a call whose body did not say its key cannot stand for a job's */
	if (c.external_unknown > 0) {
		idem_warn("external: %lld calls took effect with no business key in their body",
		    c.external_unknown);
		rc = IDEM_EXIT_FINDING;
	}
	for (i = 0, shown = 0; i < c.ncalls; i++) {
		const struct key_count *k = &c.calls[i];

		if (k->observed == k->expected)
			continue;
		rc = IDEM_EXIT_FINDING;
		if (shown++ >= 10)
			continue;
		if (k->observed < k->expected)
			idem_warn("external: missing effect for business key %s: %lld calls took "
			    "effect, expected %lld", k->key, k->observed, k->expected);
		else if (k->seeded)
			idem_warn("external: duplicate effect for business key %s: %lld calls took "
			    "effect, expected %lld", k->key, k->observed, k->expected);
		else
			idem_warn("external: unexpected effect for business key %s: %lld calls took "
			    "effect, and no job has that key", k->key, k->observed);
	}
	return rc;
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "before", no_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conninfo = NULL, *path = "-";
	FILE *in = stdin;
	size_t i;
	int ch, rc = 0;

	argv0 = "count-effects";
	argv[0] = (char *)argv0;
	while ((ch = getopt_long(argc, argv, "d:hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'd': conninfo = optarg; break;
		case 'b': c.phase = "before"; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("count-effects " IDEM_VERSION); idem_close_stdout(); return 0;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (argc - optind > 1)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (optind < argc && strcmp(argv[optind], "-") != 0) {
		path = argv[optind];
		if ((in = fopen(path, "r")) == NULL)
			idem_die(IDEM_EXIT_USAGE, "%s:", path);
	}
	c.conninfo = conninfo;
	if ((c.msg_ids = tmpfile()) == NULL)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	hold_stream(in, in == stdin ? "stdin" : path);
	read_stream(in, held.name);
	if (in != stdin && !held.is_input)
		fclose(in);
	pass_held();
	if ((c.digest_ctx = EVP_MD_CTX_new()) == NULL ||
	    EVP_DigestInit_ex(c.digest_ctx, EVP_sha256(), NULL) != 1)
		idem_die(IDEM_EXIT_ENV, "hashing the count rows: no SHA-256");
	sort_seeded();
	count();
	if (strcmp(c.phase, "after") == 0) {
		if (c.have_external)
			count_external();
		count_pending();
		totals();
		guards();
		measures();
		if (c.pending_table != NULL)
			pending_calls();
		rc = verdict();
	} else {
		totals();
	}
	digest();
	PQfinish(c.conn);
	while (c.key_text != NULL) {
		struct key_block *b = c.key_text;

		c.key_text = b->next;
		free(b);
	}
	free(c.keys);
	idem_index_free(&c.key_index);
	free(c.merge_last);
	free(c.row_buf);
	fclose(c.msg_ids);
	idem_queue_close(&c.q);
	idem_free_list(c.recover_keys, c.nrecover);
	free(c.recovery_ms);
	idem_free_list(c.column_sql, c.ncolumns);
	free(c.table_sql);
	free(c.effect_table);
	free(c.key_columns);
	free(c.declared_table);
	free(c.declared_columns);
	free(c.key_scope);
	free(c.first_publish);
	free(c.last_ack);
	for (i = 0; i < c.ncalls; i++)
		free(c.calls[i].key);
	free(c.calls);
	idem_map_free(&c.call_index);
	idem_free_list(c.external_fields, c.nexternal_fields);
	free(c.pending_table);
	free(c.pending_owner);
	idem_close_stdout();
	return rc;
}
