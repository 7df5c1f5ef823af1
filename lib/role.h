/* role.h: the seed's sandbox account as a PostgreSQL role (kill-at(1),
 * THE SANDBOX ACCOUNT): created with no attribute but LOGIN, given the
 * rights of the setup command, then confined to those of the worker, and
 * what it held read back from the catalog. */
#ifndef IDEM_ROLE_H
#define IDEM_ROLE_H

#include <stdio.h>

#include <libpq-fe.h>

#include "map.h"
#include "queue.h"
#include "error.h"
#include "tsv.h"

/* The account of one run. */
struct idem_role {
	char *name;			/* the role */
	char *effect_schema;		/* the schema of the effect table */
	const struct idem_queue *q;
	struct idem_map listed;		/* "type<TAB>object<TAB>privilege" granted by confine */
	char *rows;			/* the grant and denied rows, as written */
	size_t rows_len;
	FILE *out;
	size_t beyond;			/* privileges held beyond the list */
	size_t held;			/* things denied that it could do */
};

/* Creates the role when it is missing (LOGIN, nothing else, marked as
 * idem's), refuses one that is the connection's own user; -1 with err. */
int idem_role_open(struct idem_role *r, PGconn *conn, const char *name, const struct idem_queue *q,
		   const char *effect_table, struct idem_error *err);
void idem_role_close(struct idem_role *r);

/* The rights of the setup command: CREATE on the database, the effect
 * table's schema and the queue library's schemas owned, and the queue's
 * (the adapter's account section) when its installed section says the
 * queue is there already. */
int idem_role_for_setup(struct idem_role *r, PGconn *conn, struct idem_error *err);

/* Records what the role holds (phase "setup"), then confines it to the
 * worker's list: CONNECT; the queue's rights by its adapter; USAGE and
 * CREATE on the effect table's schema and writing its tables; SELECT on
 * the rest of the database; and records the list. */
int idem_role_confine(struct idem_role *r, PGconn *conn, struct idem_error *err);

/* Reads what the role holds at the end of the run (phase "run") and what
 * it was denied; counts those beyond the list and those held. */
int idem_role_finish(struct idem_role *r, PGconn *conn, struct idem_error *err);

/* The grant and denied rows of idem-tsv(5), setup then run; -1 on a write
 * error. */
int idem_role_write(struct idem_role *r, FILE *out);

/* The finding a grant or denied row makes, in words: a right held beyond
 * the list ("held TRUNCATE on table idem.message, beyond its list"), or a
 * thing it may not do that it could ("could TRUNCATE idem.message, which
 * it may not"); NULL for a row that is none. fields are the row's as
 * idem_tsv_next() decoded them; kind is IDEM_KIND_GRANT or
 * IDEM_KIND_DENIED. Caller frees. */
char *idem_role_finding(enum idem_kind kind, char *const *fields);

/* The environment of a process that runs as the role: PGUSER, and
 * DATABASE_URL, IDEM_DATABASE_URL and IDEM_DATABASE to conn's database as
 * the role. */
void idem_role_setenv(const struct idem_role *r, PGconn *conn);

#endif
