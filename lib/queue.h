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
	size_t len;
};

/* A queue of one kind, by name. */
struct idem_queue {
	const char *kind;		/* idem, pg-boss, graphile-worker */
	char *name;
	char *library, *install;	/* from the adapter's header */
	struct idem_queue_section *sections;
	size_t nsections;
};

/* The adapter of kind (NULL: idem) for the queue name; -1 with err set for
 * a kind that has none. Free with idem_queue_close either way. */
int idem_queue_open(struct idem_queue *q, const char *kind, const char *name,
		    struct idem_error *err);
void idem_queue_close(struct idem_queue *q);

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
