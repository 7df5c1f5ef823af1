/* tsv.h: the idem-tsv stream (man/idem-tsv.5) */
#ifndef IDEM_TSV_H
#define IDEM_TSV_H

#include <stdio.h>
#include <sys/types.h>

#include "error.h"
#include "map.h"

#define IDEM_TSV_MAGIC "#idem-tsv\t1.10"
/* the longest delay of a late answer, vendor_ms of vendor-late-reply */
#define IDEM_TSV_MAX_LATE_MS 60000LL
/* the kinds of queue whose adapters are built in (idem-seed(5)); \\N in a
 * stream is idem; any other kind comes with its adapter file */
#define IDEM_QUEUE_KINDS "idem pg-boss graphile-worker"

enum idem_kind {
	IDEM_KIND_UNKNOWN = -1,
	IDEM_KIND_SEED,
	IDEM_KIND_EXPECT,
	IDEM_KIND_SCENARIO,
	IDEM_KIND_JOB,
	IDEM_KIND_PUBLISH,
	IDEM_KIND_STEP,
	IDEM_KIND_KILL,
	IDEM_KIND_ATTEMPT,
	IDEM_KIND_RECOVER,
	IDEM_KIND_LOG,
	IDEM_KIND_QUERY,
	IDEM_KIND_COUNT_ROW,
	IDEM_KIND_GUARD,
	IDEM_KIND_PROBE,
	IDEM_KIND_MEASURE,
	IDEM_KIND_DIGEST,
	IDEM_KIND_QUEUE,
	IDEM_KIND_EXTERNAL,
	IDEM_KIND_CALL,
	IDEM_KIND_DECLARED_GUARD,
	IDEM_KIND_WORKER,
	IDEM_KIND_MISSED,
	IDEM_KIND_BASELINE,
	IDEM_KIND_GRANT,
	IDEM_KIND_DENIED,
	IDEM_KIND_DATABASE,
	IDEM_KIND_STALL,
	IDEM_KIND_LEASE,
	IDEM_KIND_FORGOT,
	IDEM_KIND_REKEYED,
	IDEM_KIND_PENDING_CALL,
	IDEM_KIND_SPAN,
	IDEM_KIND_SPAN_LOST,
	IDEM_KIND_RECEIVER,
	IDEM_KIND_COUNT
};

/* Field positions; field 0 is the kind itself. */
enum {
	SEED_PATH = 1, SEED_SHA256, SEED_REHEARSAL, SEED_JOB_TYPE, SEED_QUEUE,
	SEED_DATABASE, SEED_VISIBILITY_TIMEOUT_MS, SEED_MAX_ATTEMPTS,
	SEED_SANDBOX_ACCOUNT, SEED_EFFECT_NAME, SEED_EFFECT_TABLE, SEED_KEY_COLUMNS,
	SEED_KEY_SCOPE, SEED_DUPLICATE_ACCEPTOR, SEED_RECONCILIATION_OWNER,
	SEED_WORKER_IMAGE, SEED_WORKER_VERSION, SEED_WORKER_COMMAND,
	SEED_PAYLOAD_SCHEMA, SEED_CANNOT_REPRODUCE, SEED_QUEUE_KIND, SEED_DRAFT, SEED_BEST_EFFORT,
	SEED_ADAPTER, SEED_ADAPTER_SHA256
};
enum {
	EXPECT_EFFECTS = 1, EXPECT_DUPLICATES, EXPECT_MISSING, EXPECT_PENDING, EXPECT_EXTERNAL,
	EXPECT_VERDICT
};
enum {
	SCENARIO_NAME = 1, SCENARIO_FAULT, SCENARIO_STEP, SCENARIO_ATTEMPT,
	SCENARIO_DUPLICATES, SCENARIO_WITHIN_MS, SCENARIO_UNTIL, SCENARIO_VENDOR_MS
};
enum { JOB_ID = 1, JOB_BUSINESS_KEY, JOB_PAYLOAD, JOB_PAYLOAD_SHA256, JOB_SCENARIO };
enum { PUBLISH_JOB_ID = 1, PUBLISH_COPY, PUBLISH_MSG_ID, PUBLISH_PUBLISHED_AT, PUBLISH_STATUS };
enum {
	STEP_AT = 1, STEP_WORKER, STEP_PID, STEP_NAME, STEP_JOB_ID, STEP_ATTEMPT, STEP_ACTION,
	STEP_OBSERVED
};
enum {
	KILL_SCENARIO = 1, KILL_JOB_ID, KILL_ATTEMPT, KILL_STEP, KILL_PID, KILL_KILLED_AT,
	KILL_OBSERVED
};
enum {
	ATTEMPT_JOB_ID = 1, ATTEMPT_MSG_ID, ATTEMPT_ATTEMPT, ATTEMPT_PID, ATTEMPT_CONSUMED_AT,
	ATTEMPT_COMMITTED_AT, ATTEMPT_ACKED_AT, ATTEMPT_ROWS_WRITTEN, ATTEMPT_BRANCH,
	ATTEMPT_WRITTEN_AT, ATTEMPT_ROWS_UPDATED
};
enum { RECOVER_JOB_ID = 1, RECOVER_MSG_ID, RECOVER_KILLED_AT, RECOVER_ACKED_AT, RECOVER_RECOVERY_MS };
enum { LOG_AT = 1, LOG_WORKER, LOG_PID, LOG_LINE };
enum { QUERY_PHASE = 1, QUERY_NAME, QUERY_SQL };
enum { COUNT_PHASE = 1, COUNT_SCOPE, COUNT_KEY, COUNT_EXPECTED, COUNT_OBSERVED };
enum { GUARD_KIND = 1, GUARD_NAME, GUARD_DEFINITION, GUARD_FLAGS, GUARD_TABLE };
enum { PROBE_RESULT = 1, PROBE_SQLSTATE, PROBE_MESSAGE, PROBE_SQL, PROBE_TABLE };
enum { DECLARED_GUARD_TABLE = 1, DECLARED_GUARD_KEY_COLUMNS };
enum {
	WORKER_ARGV = 1, WORKER_EXECUTABLE, WORKER_EXECUTABLE_SHA256, WORKER_SCRIPT,
	WORKER_SCRIPT_SHA256
};
enum {
	BASELINE_RESULT = 1, BASELINE_JOBS, BASELINE_MESSAGES, BASELINE_UNACKED, BASELINE_EXPECTED,
	BASELINE_OBSERVED, BASELINE_DUPLICATES, BASELINE_MISSING
};
enum { GRANT_ROLE = 1, GRANT_PHASE, GRANT_TYPE, GRANT_OBJECT, GRANT_PRIVILEGE, GRANT_LISTED };
enum { DENIED_ROLE = 1, DENIED_OBJECT, DENIED_PRIVILEGE, DENIED_HELD };
enum {
	DATABASE_SANDBOX_ID = 1, DATABASE_DBNAME, DATABASE_SERVER_VERSION,
	DATABASE_SERVER_VERSION_NUM, DATABASE_ISOLATION
};
enum {
	STALL_SCENARIO = 1, STALL_JOB_ID, STALL_ATTEMPT, STALL_STEP, STALL_PID, STALL_STALLED_AT,
	STALL_RELEASED_AT, STALL_RELEASE, STALL_OBSERVED
};
enum { LEASE_AT = 1, LEASE_MSG_ID, LEASE_JOB_ID, LEASE_ATTEMPT, LEASE_WHY };
enum { MISSED_WHAT = 1, MISSED_SCENARIO, MISSED_JOB_ID, MISSED_ATTEMPT, MISSED_STEP };
enum {
	MEASURE_NAME = 1, MEASURE_VALUE, MEASURE_NUMERATOR, MEASURE_DENOMINATOR, MEASURE_UNIT,
	MEASURE_WINDOW_START, MEASURE_WINDOW_END
};
enum { DIGEST_PHASE = 1, DIGEST_SHA256, DIGEST_ROWS };
enum { QUEUE_KIND = 1, QUEUE_NAME, QUEUE_VERSION };
enum {
	EXTERNAL_NAME = 1, EXTERNAL_KEY_FIELDS, EXTERNAL_HONOURS_IDEMPOTENCY_KEY,
	EXTERNAL_PENDING_TABLE, EXTERNAL_PENDING_OWNER, EXTERNAL_PENDING_KEY,
	EXTERNAL_PENDING_STATE, EXTERNAL_PENDING_SETTLED
};
enum {
	CALL_AT = 1, CALL_WORKER, CALL_PID, CALL_METHOD, CALL_PATH, CALL_IDEMPOTENCY_KEY,
	CALL_BODY_SHA256, CALL_BUSINESS_KEY, CALL_STATUS, CALL_ANSWER, CALL_EFFECT,
	CALL_RESPONSE_ID, CALL_ID, CALL_ANSWERED_AT
};
enum {
	FORGOT_AT = 1, FORGOT_BUSINESS_KEY, FORGOT_IDEMPOTENCY_KEY, FORGOT_FIRST_CALL,
	FORGOT_WINDOW_MS
};
enum { REKEYED_BUSINESS_KEY = 1, REKEYED_KEYS, REKEYED_CALLS, REKEYED_EFFECTS };
enum {
	PENDING_CALL_BUSINESS_KEY = 1, PENDING_CALL_KILLED, PENDING_CALL_ROWS, PENDING_CALL_OWNER,
	PENDING_CALL_RESULT
};

enum {
	SPAN_TRACE_ID = 1, SPAN_SPAN_ID, SPAN_PARENT_SPAN_ID, SPAN_NAME, SPAN_KIND, SPAN_START,
	SPAN_END, SPAN_STATUS, SPAN_PID, SPAN_WORKER, SPAN_JOB_ID, SPAN_ATTEMPT, SPAN_SCOPE,
	SPAN_ATTRIBUTES, SPAN_EVENTS, SPAN_ENCODING
};
enum { SPAN_LOST_JOB_ID = 1, SPAN_LOST_ATTEMPT, SPAN_LOST_PID, SPAN_LOST_PARENTS, SPAN_LOST_KILLED_AT };
enum {
	RECEIVER_ENDPOINT = 1, RECEIVER_REQUESTS, RECEIVER_SPANS, RECEIVER_REFUSED,
	RECEIVER_DROPPED_ATTRIBUTES, RECEIVER_ENV
};

/* The kind's name and number of fields after the kind, or NULL. */
const char *idem_kind_name(enum idem_kind kind);
size_t idem_kind_nfields(enum idem_kind kind);
const char *idem_kind_field_name(enum idem_kind kind, size_t field);

/* A set of 64-bit keyed hashes of names: a fixed cost per name, whatever
 * its length; listed, and indexed once a look-up needs it. */
struct idem_tsv_names {
	unsigned long long *hashes;
	size_t n, cap;
	struct idem_index index;
};

struct idem_tsv_reader {
	FILE *in;
	const char *name;	/* for messages: a file name or "stdin" */
	long line_no;
	int header_seen;
	/* the current line, without its newline, exactly as read */
	char *line;
	size_t line_len;
	/* decoded fields of a known kind, each checked against its type in
	 * idem-tsv(5); NULL stands for \N */
	enum idem_kind kind;
	char **fields;
	size_t nfields;
	/* private */
	size_t line_cap;
	char *decoded;
	size_t decoded_cap;
	size_t fields_cap;
	unsigned char seen[IDEM_KIND_COUNT];	/* rows of each kind read, up to 1 */
	char queue_kind[72];		/* the seed row's */
	struct idem_tsv_names job_ids, scenario_names;
	unsigned long long job_id_hash;	/* the job row's, hashed as its fields are read */
	/* while job ids come in byte order, each is new: their hashes are
	 * listed, not looked up, until one does not come after the one before */
	int job_ids_unordered;
	char *last_job_id;
	size_t last_job_id_cap;
};

enum { IDEM_TSV_EOF = 0, IDEM_TSV_ROW = 1, IDEM_TSV_COMMENT = 2, IDEM_TSV_HEADER = 3 };

void idem_tsv_reader_init(struct idem_tsv_reader *r, FILE *in, const char *name);
void idem_tsv_reader_free(struct idem_tsv_reader *r);
/* Reads the next line: IDEM_TSV_HEADER for the magic line, then rows and
 * comments; IDEM_TSV_EOF at the end; -1 with err set on bad input. A row of
 * a known kind comes back only when every field has its type and the row
 * keeps the stream's rules (one seed row, first; unique job ids; ...), so
 * every program refuses the same streams with the same message. */
int idem_tsv_next(struct idem_tsv_reader *r, struct idem_error *err);
/* Writes the current line unchanged. */
int idem_tsv_pass(FILE *out, const struct idem_tsv_reader *r);

/* Writers; fields may be NULL (written as \N). Return -1 on write error. */
int idem_tsv_write_header(FILE *out);
int idem_tsv_write_row(FILE *out, const char *kind, const char *const *fields, size_t n);
int idem_tsv_write_field(FILE *out, const char *field);
/* A numeric field of the current row (checked by idem_tsv_next) as a
 * number; if_null for \N. */
long long idem_tsv_number(const struct idem_tsv_reader *r, size_t field, long long if_null);
/* NULL when value (decoded, not \N) fits the type of a kind's field; else
 * what is wrong, quoting the value, in buf. */
const char *idem_tsv_check_field(enum idem_kind kind, size_t field, const char *value,
				 size_t len, char *buf, size_t size);
/* Escapes into a malloc'd string (for tests and for messages). */
char *idem_tsv_escape(const char *field);
/* Escapes into out, which has room for twice the field's length; returns
 * the end of what it wrote (not NUL-terminated). */
char *idem_tsv_escape_to(char *out, const char *field);
/* Decodes one escaped field in place; returns -1 on a bad escape, 1 for \N. */
int idem_tsv_unescape(char *field, size_t *len);

#endif
