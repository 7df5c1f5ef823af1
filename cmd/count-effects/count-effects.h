/* count-effects.h: what the modules of count-effects(1) share: the counts
 * of every business key, and the state of one run */
#ifndef COUNT_EFFECTS_H
#define COUNT_EFFECTS_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/evp.h>

#include "map.h"
#include "pg.h"
#include "queue.h"
#include "tsv.h"

struct key_count {
	char *key;
	uint64_t hash;			/* idem_map_hash of the key, or 0 until it is needed */
	long long expected, observed;
	int seeded;
	union {
		struct {		/* a seeded key's */
			unsigned char first_hash[32];	/* payload hash of the first job with this key */
			int conflict;
		};
		struct {		/* a call's business key's, in no more room */
			/* a 64-bit hash of the first key a POST sent, all 0
			 * for none; bytes, so that the union is aligned as
			 * the seeded key's fields are */
			unsigned char idempotency_hash[8];
			uint32_t rekeyed;	/* + 1 into rekeyed, once found rekeyed */
			unsigned char idempotency_keys;	/* 0: no POST; 1: one key; 2: more */
			unsigned char killed;	/* a call answered killed */
		};
	};
};

/* A call's business key whose POST calls sent more than one
 * Idempotency-Key, as the held stream is read again for it. */
struct rekeyed_key {
	json_t *keys;			/* each distinct key, in the order first sent; null for none */
	long long *ids;			/* of its POST calls, in order */
	size_t nids, ids_cap;
	long long effects;		/* of those calls, those that took effect */
};

/* A pending_call row that fails the verdict, kept for its message. */
struct pending_finding {
	char *key, *owner;		/* owner: NULL for none */
	long long rows;
	const char *result;		/* missing, wrong-owner or open */
};

struct counting {
	struct idem_queue q;		/* the queue's adapter */
	const char *phase;
	PGconn *conn;
	/* the stream */
	char *effect_table, *key_columns, *key_scope;
	char *declared_table, *declared_columns;	/* the declared_guard row, or NULL */
	char *best_effort;	/* why the seed's guard cannot be enforced, or NULL */
	char *owner;		/* the seed's reconciliation owner, or NULL */
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
	/* the database: -d, the one chosen and how, what was read of it,
	 * and whether the stream has a database row, which it must match */
	const char *option, *conninfo, *how;
	struct idem_pg_observed here;
	int have_stream_db;
	/* the sandbox account's findings: rights beyond its list, things it
	 * may not do that it could */
	char *account;
	char **findings;
	size_t nfindings;
	/* the sql */
	char *table_sql, *count_sql;
	char **column_sql;
	size_t ncolumns;
	/* totals */
	long long effects, duplicates, missing, unexpected, conflicts, pending;
	/* the external call, when the stream has an external row: the calls
	 * that took effect per business key of the call, and those whose
	 * body held no key */
	int have_external, calls_seen, honours_keys;
	char **external_fields, *pending_table, *pending_owner;
	char *pending_key, *pending_state, *pending_settled;	/* JSON arrays, a name */
	size_t nexternal_fields;
	long long expect_external;	/* -1: \N */
	struct key_count *calls;
	size_t ncalls, calls_cap;
	struct idem_map call_index;
	long long external, external_unknown, external_duplicates;
	/* the Idempotency-Keys of the POST calls: business keys with one,
	 * those that sent more than one (rekeyed), and what the held stream
	 * says of those */
	long long post_keys;
	size_t nrekeyed;
	struct rekeyed_key *rekeyed;
	/* the pending table's check: killed keys, those owned, the findings */
	long long killed_call_keys, owned_call_keys;
	struct pending_finding *pending_findings;
	size_t npending_findings;
	char *pending_unchecked;	/* why the check was not made, or NULL */
	/* evidence for the digest, hashed as it is written: by OpenSSL's
	 * SHA-256, which uses the CPU's SHA instructions where it has them,
	 * a buffer of rows at a time */
	EVP_MD_CTX *digest_ctx;
	unsigned char digest_buf[65536];
	size_t digest_len;
	long long digest_rows;
	char *row_buf;			/* one count row, formatted */
	size_t row_cap;
};

extern struct counting c;

/* count-effects.c */
void write_row(const char *kind, const char *const *fields, size_t n);
void copy_out(FILE *from, off_t start, off_t end, const char *what);

/* keys.c */
int by_key(const void *a, const void *b);
void seed_key(const char *key, const char *payload_sha256);
struct key_count *find_key(const char *key);
struct key_count *call_key(const char *key);
void sort_seeded(void);

/* count.c */
void connect_and_count(void);
char **quote_columns(const char *key_columns, size_t *n);
char *key_expression_of(char *const *column_sql, size_t ncolumns);
void query_row(const char *name, const char *sql);
PGresult *printed_query(const char *name, const char *sql, const char *doing, const char *table);
void count(void);
void count_external(void);
long long expected_external(void);
void count_pending(void);
void totals(void);
void digest(void);

/* calls.c */
void read_call(const struct idem_tsv_reader *r);
void reread_call(const struct idem_tsv_reader *r, long long ordinal);
void write_rekeyed(void);
long long distinct_keys(void);
void free_calls(void);

/* pending.c */
void pending_calls(void);

/* guard.c */
void guards(void);

/* missing.c: dies naming the nearest table there is, if any */
void die_missing_table(const char *table);

/* verdict.c */
void measure_row(const char *name, const char *value, long long numerator,
		 long long denominator, const char *unit, int have_numerator);
void measures(void);
int verdict(void);

#endif
