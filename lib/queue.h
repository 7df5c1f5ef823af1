/* queue.h: the queue adapters (idem-sandbox(1), QUEUE ADAPTERS). How to
 * publish into a library's queue and observe it is data: the SQL sections
 * of lib/queues/KIND.sql, built into the programs. */
#ifndef IDEM_QUEUE_H
#define IDEM_QUEUE_H

#include <libpq-fe.h>

#include "error.h"

/* The parameter types of the sections, in QUEUE ADAPTERS' words. */
#define IDEM_OID_INT8 20
#define IDEM_OID_TEXT 25
#define IDEM_OID_INT4_ARRAY 1007
#define IDEM_OID_TEXT_ARRAY 1009
#define IDEM_OID_JSONB_ARRAY 3807

struct idem_queue_section {
	const char *name, *sql;
	const char *name_at;	/* where its head is in the adapter's text */
	size_t len;
};

/* A queue of one kind, by name. */
struct idem_queue {
	const char *kind;		/* idem, pg-boss, graphile-worker, or a file's */
	char *name;
	char *library, *install;	/* from the adapter's header */
	struct idem_queue_section *sections;
	size_t nsections;
	/* an adapter of the team's own, read from a file: its path, the
	 * SHA-256 of its bytes, and the bytes the sections point into */
	char *path;
	char sha256[65];
	char *text, *own_kind;
};

/* The largest adapter file read. */
#define IDEM_QUEUE_ADAPTER_MAX (1024 * 1024)

/* The adapter of kind (NULL: idem) for the queue name; -1 with err set for
 * a kind that has none. Free with idem_queue_close either way. */
int idem_queue_open(struct idem_queue *q, const char *kind, const char *name,
		    struct idem_error *err);
/* The adapter in the file at path for the queue name, its kind kind (NULL:
 * whatever its header says); -1 with err set (IDEM_EXIT_USAGE) for a file
 * that cannot be read, is over IDEM_QUEUE_ADAPTER_MAX bytes, or is not an
 * adapter (naming the file, the line and the section: see
 * idem_queue_parse). Free with idem_queue_close either way. */
int idem_queue_open_file(struct idem_queue *q, const char *path, const char *kind,
			 const char *name, struct idem_error *err);
/* The adapter a stream's seed row names: the file at adapter when there is
 * one, refused (IDEM_EXIT_USAGE) when the SHA-256 of its bytes is no
 * longer adapter_sha256, the one seed-gen read; else the built-in adapter
 * of kind. Free with idem_queue_close either way. */
int idem_queue_open_seed(struct idem_queue *q, const char *kind, const char *name,
			 const char *adapter, const char *adapter_sha256,
			 struct idem_error *err);
/* The adapter in text, len bytes (the file at path, for messages), into
 * q, as idem_queue_open_file takes it: a header line "-- kind: KIND"
 * (lowercase letters, digits and -, and kind when that is not NULL), then
 * sections each of a known name, once, and with SQL in it; the sections
 * every queue needs all there. Takes text (malloc'd) whatever it returns. */
int idem_queue_parse(struct idem_queue *q, const char *path, char *text, size_t len,
		     const char *kind, const char *name, struct idem_error *err);
void idem_queue_close(struct idem_queue *q);

/* The sections every adapter has, and those it may have, in
 * idem-sandbox(1)'s QUEUE ADAPTERS; NULL-terminated. */
extern const char *const idem_queue_required[];
extern const char *const idem_queue_optional[];

/* Whether the adapter has a section. */
int idem_queue_has(const struct idem_queue *q, const char *section);
/* A section's SQL with every :'queue' made the queue's name as a literal
 * quoted for conn; NULL when there is no such section. Caller frees. */
char *idem_queue_sql(const struct idem_queue *q, PGconn *conn, const char *section);

/* Runs a section with its parameters (types from IDEM_OID_*; NULL for
 * text); what names it in messages. NULL with err set on failure; a
 * missing section is an error too. */
PGresult *idem_queue_exec(const struct idem_queue *q, PGconn *conn, const char *section,
			  const char *what, int nparams, const Oid *types,
			  const char *const *params, struct idem_error *err);

/* The library's schema version in the database, into *version (caller
 * frees; NULL when it has none). A database where the library is not
 * installed is refused with IDEM_EXIT_ENV and a message naming the
 * library and how to install it. */
int idem_queue_check(const struct idem_queue *q, PGconn *conn, char **version,
		     struct idem_error *err);

/* The version of the library's schema in the database, read through the
 * adapter's installed and version sections, as text the caller frees: 0
 * with *version NULL when the library is not installed there; -1 with err
 * set when a query fails. It only reads. */
int idem_queue_version(const struct idem_queue *q, PGconn *conn, char **version,
		       struct idem_error *err);

/* A PostgreSQL array literal of texts, each element quoted: "{\"a\",\"b\"}".
 * Caller frees. */
char *idem_queue_text_array(char *const *items, size_t n);

/* The same literal grown one element at a time: text is "{}" before the
 * first and always a whole literal; n counts the elements. */
struct idem_text_array {
	char *text;
	size_t len, cap, n;
};
void idem_text_array_add(struct idem_text_array *a, const char *item);
/* Its text, which the caller then owns ("{}" for none), and the array
 * emptied. */
char *idem_text_array_take(struct idem_text_array *a);

#endif
