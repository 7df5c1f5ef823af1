/* failpoint.h: kill points and the effect ledger in the sandbox database
 * (idem-sandbox(1), KILL POINTS AND LEDGER; idem-step(7)) */
#ifndef IDEM_FAILPOINT_H
#define IDEM_FAILPOINT_H

#include <libpq-fe.h>

#include "queue.h"
#include "error.h"

/* The steps the database sees; 0 is a step it does not see. */
enum {
	IDEM_FAILPOINT_BEFORE_WRITE = 1,
	IDEM_FAILPOINT_BEFORE_COMMIT = 2,
	IDEM_FAILPOINT_AFTER_COMMIT = 3,
	IDEM_FAILPOINT_ACK_IN_EFFECT = 4	/* the ack, in the effect's own transaction */
};

/* The advisory lock classes (the first of the two int4 keys). */
#define IDEM_FAILPOINT_CLASS_RUN 1768161280	/* 0x69640000, key 0: one run per database */
#define IDEM_FAILPOINT_CLASS_SLOT 1768161536	/* 0x69640100, key: slot */
#define IDEM_FAILPOINT_CLASS_GATE 1768161792	/* 0x69640200, key: slot */
#define IDEM_FAILPOINT_CLASS_POINT 1768162048	/* 0x69640300 + step, key: armed point id */
#define IDEM_FAILPOINT_SLOTS 64

struct idem_failpoint;

/* A client session of the database. */
struct idem_failpoint_session {
	int backend_pid;
	int client_port;		/* pg_stat_activity.client_port; -1 for a Unix socket */
	long long backend_start_us;
};

/* A session held at an armed point. */
struct idem_failpoint_waiter {
	struct idem_failpoint_session session;
	int slot;
	int step;
	int armed;			/* the point's id, as idem_failpoint_arm returned it */
};

/* A committed write of the effect table, from the ledger. */
struct idem_failpoint_write {
	const char *xid;		/* the writing transaction's id (xid8) */
	int backend_pid;
	int update;			/* 0 for an INSERT, 1 for an UPDATE */
	const char *business_key;
	long long written_at_us, committed_at_us;
};

/* The delivery a held session works on. */
struct idem_failpoint_delivery {
	char *msg_id, *job_id;		/* NULL: none */
	long long attempt;
};

/* The step of a step name; 0 when the database does not see it. */
int idem_failpoint_step(const char *name);
const char *idem_failpoint_step_name(int step);

/*
 * Installs the kill points and the ledger for one run, in one transaction:
 * the schema idem_run (dropped first if a run killed earlier left it),
 * the triggers on effect_table (when it exists; key_columns is the seed's
 * JSON array of its key columns) and the queue adapter's triggers on its
 * deliveries and acks (its observe section; q stays the caller's and must
 * outlive fp). Only the steps in steps (bits 1 << step) can be armed;
 * the others get no trigger. Holds every gate. Two connections of its
 * own, by conninfo as idem_pg_connect takes it. NULL with err set on
 * failure; another run on the same database is refused.
 */
struct idem_failpoint *idem_failpoint_install(const char *conninfo, const struct idem_queue *q,
					      const char *effect_table, const char *key_columns,
					      unsigned steps, struct idem_error *err);
/* Whether the effect table exists and has its ledger triggers. */
int idem_failpoint_has_ledger(const struct idem_failpoint *fp);

/* Arms step for business_key, for one more kill point or race: returns
 * the point's id (the same for the same step and key), or -1 with err set. */
int idem_failpoint_arm(struct idem_failpoint *fp, int step, const char *business_key,
		       struct idem_error *err);
/* One kill point or race fewer needs the point; with none left, it is
 * disarmed: writers of its key no longer stop there. */
int idem_failpoint_disarm(struct idem_failpoint *fp, int armed, struct idem_error *err);
/* The business key of a point armed for a kill point or race still;
 * NULL when none needs it. */
const char *idem_failpoint_armed_key(const struct idem_failpoint *fp, int armed);
/* How many points were armed in the run. */
size_t idem_failpoint_armed(const struct idem_failpoint *fp);

/* The client sessions of the database now, but the controller's own, into
 * *out (caller frees), *n of them. */
int idem_failpoint_sessions(struct idem_failpoint *fp, struct idem_failpoint_session **out,
			    size_t *n, struct idem_error *err);
/* The sessions held now, into *out (caller frees), *n of them. */
int idem_failpoint_waiters(struct idem_failpoint *fp, struct idem_failpoint_waiter **out,
			   size_t *n, struct idem_error *err);
/* The delivery a held session works on: of the deliveries of messages of
 * the queue with business_key, the last one taken by the session itself;
 * else by one of the sessions of worker_sessions (those of its worker);
 * else the last one. Fields NULL when there is none; the caller frees
 * them. */
int idem_failpoint_delivery(struct idem_failpoint *fp, const char *business_key, int backend_pid,
			    const int *worker_sessions, size_t nsessions,
			    struct idem_failpoint_delivery *out, struct idem_error *err);
/* Whether the delivery's attempt has ended: its message acked during the
 * run, or the session gone. -1 with err set on failure. */
int idem_failpoint_ended(struct idem_failpoint *fp, const char *msg_id, int backend_pid,
			 struct idem_error *err);
/* Lets the session held in slot go on; the gate is held again before any
 * other session can reach it. */
int idem_failpoint_pass(struct idem_failpoint *fp, int slot, struct idem_error *err);
/* Terminates a held session and waits until its server process is gone,
 * so that its transaction is rolled back; the gate stays held. */
int idem_failpoint_terminate(struct idem_failpoint *fp, int backend_pid, struct idem_error *err);
/* Terminates every held session (as above). */
int idem_failpoint_terminate_all(struct idem_failpoint *fp, struct idem_error *err);

/* Watches the messages msg_ids (a PostgreSQL array text, "{1,2}") until
 * they are acked: -1 with err set on failure. */
int idem_failpoint_watch_acks(struct idem_failpoint *fp, const char *msg_ids,
			      struct idem_error *err);
/* 1 when every watched message is acked, 0 when not, -1 with err set. The
 * acks committed, which the trigger counts in a few rows, say when to
 * look; the messages say whether it is so, and how many are left when it
 * is not (acks of other messages of the queue count too): the same cost
 * however many messages there are. */
int idem_failpoint_all_acked(struct idem_failpoint *fp, struct idem_error *err);

/* The queue's own rescue of the jobs of killed attempts, for the queues
 * whose adapter has one (its rescue section): the number of jobs made
 * available again, or -1 with err set. */
int idem_failpoint_rescue(struct idem_failpoint *fp, long long visibility_timeout_ms,
			  struct idem_error *err);

/* Starts grouping the committed writes of the ledger by transaction and
 * business key, on fp's own connection and its own server process, while
 * the caller reads the deliveries on another: once the workers are gone,
 * for the ledger is read as it is then. 0 when started (once; the next
 * calls do nothing), or when there is no ledger; -1 with err set. */
int idem_failpoint_group_ledger(struct idem_failpoint *fp, struct idem_error *err);

/* Waits for the grouping (started here if it was not), then sets *sql to
 * the query of its rows, seven columns: xid (text), business_key,
 * backend_pid, first_write and last_commit (microseconds since the epoch,
 * last_commit 0 when unknown), inserts and updates; *sql NULL when the
 * effect table has no ledger. The query reads a table of fp's schema, on
 * any connection to the sandbox, until fp is removed. -1 with err set. */
int idem_failpoint_grouped_ledger(struct idem_failpoint *fp, const char **sql,
				  struct idem_error *err);

/* Terminates the held sessions, drops the schema and the triggers,
 * releases the locks, closes the connections and frees fp. Returns -1 with
 * err set when something could not be removed (fp is freed all the same). */
int idem_failpoint_remove(struct idem_failpoint *fp, struct idem_error *err);

#endif
