/* dup-publish: pass an idem-tsv stream through, publish every job to the
 * sandbox queue and the duplicate copies its scenarios ask for, each copy at
 * a fixed offset inside its window, and append a publish row per message.
 * Publishing is idempotent: a message is (queue, job id, copy). */
#include <arpa/inet.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sodium.h>

#include "pg.h"
#include "queue.h"
#include "tsv.h"
#include "error.h"
#include "file.h"
#include "text.h"

/* microseconds from the Unix epoch to PostgreSQL's, 2000-01-01 */
#define PG_EPOCH_US INT64_C(946684800000000)
#define COPY_CHUNK (64 * 1024)
#define HOLD_BUFFER (64 * 1024)	/* stdio's buffer of the held stream */

static const char synopsis[] =
	"usage: dup-publish [-d conninfo] [-b batch] [-s time-scale] [file]\n";

struct result {
	int64_t msg_id;			/* a queue's with a copy section; 0 until it answered */
	char *msg_text;			/* the id of any other queue; NULL until it answered */
	int64_t enqueued_us;
	int published;			/* 1 new, 0 there before */
};

struct scenario {
	char *name, *fault;
	long long duplicates, within_ms;
};

/* A job kept in memory: one whose scenario asks for copies, or one of the
 * batch being checked; every other job is only passed on. */
struct job {
	char *id, *business_key, *payload;
	long scenario;			/* index, or -1 */
	size_t index;			/* its place among the stream's jobs */
	struct result original;		/* copy 0 */
};

/* A message: one copy of one job. */
struct message {
	struct job *job;
	long long copy;
	int64_t due_us;
	struct result result;
};

static struct {
	PGconn *conn;
	const char *how;		/* how the database was chosen, for messages */
	struct idem_pg_observed here;	/* what was read of it */
	int have_stream_db;		/* the stream has a database row */
	char *queue;
	struct idem_queue q;		/* the queue's adapter */
	char *version;			/* of its library, in the database */
	int copy_path;			/* new messages go in with COPY (the adapter's copy) */
	char *copy_sql, *published_after, *published_span;	/* its sections */
	char vt_ms[32], max_attempts[32];
	size_t batch;
	int progress;
	size_t total, done;
	int64_t skew_us;		/* database clock minus ours */
	int queue_empty;		/* the queue held no message before this run */
	int64_t max_msg_id;		/* newest message seen in the queue */
	struct scenario *scenarios;
	size_t nscenarios;
	size_t njobs;			/* in the stream */
	struct job *jobs;		/* those whose scenario asks for copies */
	size_t nkept, kept_cap;
	FILE *ids;			/* the job ids sent by COPY, as the stream has them */
	/* the COPY of new originals, sent while the stream is read */
	int copying;
	char *copy_buf;
	size_t copy_len, copy_cap;
	size_t copied;
} pub = { .batch = 5000 };

static void
progress(int last)
{
	static int64_t shown;
	int64_t t = idem_now_us();

	if (!pub.progress || (!last && t - shown < 100000))
		return;
	shown = t;
	fprintf(stderr, "\rdup-publish: %zu/%zu messages", pub.done, pub.total);
	if (last)
		fputs("\n", stderr);
}

/* A payload the database refuses as JSON, or a message already published
 * with another payload, is bad input; anything else is the environment. */
static void
die_pg(PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	char msg[768];
	int status = IDEM_EXIT_ENV;

	if (state != NULL && (strncmp(state, "22", 2) == 0 || strcmp(state, "23505") == 0))
		status = IDEM_EXIT_USAGE;
	idem_die(status, "publishing: %s", idem_pg_message(pub.conn, res, msg, sizeof(msg)));
}

static void
command(const char *sql)
{
	PGresult *res = PQexec(pub.conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die_pg(res);
	PQclear(res);
}

static int64_t
be64(const char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < 8; i++)
		v = v << 8 | (unsigned char)p[i];
	return (int64_t)v;
}

static int32_t
be32(const char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return (int32_t)ntohl(v);
}

/* The queue's messages above a msg_id, oldest first, in binary: job_id,
 * copy, msg_id, enqueued_at. */
static PGresult *
published(int64_t after)
{
	const char *params[1];
	char after_text[32];
	PGresult *res;

	snprintf(after_text, sizeof(after_text), "%lld", (long long)after);
	params[0] = after_text;
	res = PQexecParams(pub.conn, pub.published_after, 1, NULL, params, NULL, NULL, 1);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die_pg(res);
	return res;
}

/* Whether the queue holds messages already, and its newest msg_id: when it
 * holds none, new messages go in with COPY; else through the adapter's
 * checks. */
static void
queue_state(void)
{
	const char *params[1] = { "0" };
	PGresult *res = PQexecParams(pub.conn, pub.published_span, 1, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die_pg(res);
	/* the lowest and highest msg_id above 0, and their times */
	pub.queue_empty = PQgetisnull(res, 0, 0);
	pub.max_msg_id = pub.queue_empty ? 0 : strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	PQclear(res);
}

static void read_back_rows(struct message **sent, size_t n);

/*
 * Whether the queue's messages above every msg_id seen before are exactly
 * the n just sent by COPY, the usual case with no other publisher of this
 * queue meanwhile: then the COPY took n consecutive identity values in row
 * order, at one statement time, and nothing but four numbers need come
 * back, the lowest and highest msg_id above those seen and their times.
 * All n lie between the two, so when they are n apart no other message of
 * the queue does. Sets the first msg_id and the time.
 */
static int
sent_alone(size_t n, int64_t *first, int64_t *at)
{
	const char *params[1];
	char after_text[32];
	PGresult *res;
	int alone;

	snprintf(after_text, sizeof(after_text), "%lld", (long long)pub.max_msg_id);
	params[0] = after_text;
	res = PQexecParams(pub.conn, pub.published_span, 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die_pg(res);
	alone = n > 0 && !PQgetisnull(res, 0, 0) &&
	    strtoll(PQgetvalue(res, 0, 1), NULL, 10) - strtoll(PQgetvalue(res, 0, 0), NULL, 10) + 1 ==
	    (long long)n && strcmp(PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3)) == 0;
	if (alone) {
		*first = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		*at = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
	}
	PQclear(res);
	return alone;
}

/* After a COPY: the new messages, in the order they were sent. Identity
 * values only grow, so they all lie above every msg_id seen before; rows of
 * another publisher of the same queue are passed over. */
static void
read_back(struct message **sent, size_t n)
{
	int64_t first, at;
	size_t i;

	if (sent_alone(n, &first, &at)) {
		for (i = 0; i < n; i++) {
			sent[i]->result.msg_id = first + (int64_t)i;
			sent[i]->result.enqueued_us = at;
			sent[i]->result.published = 1;
		}
		pub.max_msg_id = first + (int64_t)n - 1;
		return;
	}
	read_back_rows(sent, n);
}

static void
read_back_rows(struct message **sent, size_t n)
{
	PGresult *res = published(pub.max_msg_id);
	size_t i, next = 0;

	for (i = 0; i < (size_t)PQntuples(res) && next < n; i++) {
		const struct job *job = sent[next]->job;
		size_t len = (size_t)PQgetlength(res, (int)i, 0);

		if (len != strlen(job->id) || memcmp(PQgetvalue(res, (int)i, 0), job->id, len) != 0 ||
		    be32(PQgetvalue(res, (int)i, 1)) != sent[next]->copy)
			continue;
		sent[next]->result.msg_id = be64(PQgetvalue(res, (int)i, 2));
		sent[next]->result.enqueued_us = be64(PQgetvalue(res, (int)i, 3)) + PG_EPOCH_US;
		sent[next]->result.published = 1;
		if (sent[next]->result.msg_id > pub.max_msg_id)
			pub.max_msg_id = sent[next]->result.msg_id;
		next++;
	}
	PQclear(res);
	if (next != n)
		idem_die(IDEM_EXIT_ENV, "publishing: %zu of %zu messages did not come back from the queue",
		    n - next, n);
}

/* Appends one element to a PostgreSQL array literal being built. */
static void
array_append(char **buf, size_t *len, const char *value, int quote)
{
	size_t o = *len;
	const char *v;

	*buf = idem_erealloc(*buf, o + strlen(value) * 2 + 6);
	(*buf)[o] = o == 0 ? '{' : ',';
	o++;
	if (quote)
		(*buf)[o++] = '"';
	for (v = value; *v; v++) {
		if (quote && (*v == '"' || *v == '\\'))
			(*buf)[o++] = '\\';
		(*buf)[o++] = *v;
	}
	if (quote)
		(*buf)[o++] = '"';
	(*buf)[o] = '\0';
	*len = o;
}

static void
array_close(char **buf, size_t *len)
{
	*buf = idem_erealloc(*buf, *len + 3);
	if (*len == 0)
		(*buf)[(*len)++] = '{';
	(*buf)[(*len)++] = '}';
	(*buf)[*len] = '\0';
}

/* Publishes through the adapter's publish section, which returns messages
 * that exist already and refuses one published before with another
 * business key or payload. */
static void
send_checked(struct message **msgs, size_t n)
{
	static const Oid types[6] = { IDEM_OID_TEXT_ARRAY, IDEM_OID_INT4_ARRAY, IDEM_OID_TEXT_ARRAY,
		IDEM_OID_JSONB_ARRAY, IDEM_OID_INT8, IDEM_OID_INT8 };
	char *arrays[4] = { NULL, NULL, NULL, NULL };
	size_t lens[4] = { 0, 0, 0, 0 }, i;
	const char *params[6];
	struct idem_error err;
	PGresult *res;

	if (n == 0)
		return;
	for (i = 0; i < n; i++) {
		const struct job *job = msgs[i]->job;
		char copy[32];

		snprintf(copy, sizeof(copy), "%lld", msgs[i]->copy);
		array_append(&arrays[0], &lens[0], job->id, 1);
		array_append(&arrays[1], &lens[1], copy, 0);
		array_append(&arrays[2], &lens[2], job->business_key, 1);
		array_append(&arrays[3], &lens[3], job->payload, 1);
	}
	for (i = 0; i < 4; i++) {
		array_close(&arrays[i], &lens[i]);
		params[i] = arrays[i];
	}
	params[4] = pub.vt_ms;
	params[5] = pub.max_attempts;
	/* ord, msg_id, enqueued_at, published */
	res = idem_queue_exec(&pub.q, pub.conn, "publish", "publishing", 6, types, params, &err);
	for (i = 0; i < 4; i++)
		free(arrays[i]);
	if (res == NULL)
		idem_die_error(&err);
	for (i = 0; i < (size_t)PQntuples(res); i++) {
		unsigned long ord = strtoul(PQgetvalue(res, (int)i, 0), NULL, 10);
		struct result *r;

		if (ord < 1 || ord > n)
			continue;
		r = &msgs[ord - 1]->result;
		if (pub.copy_path) {
			r->msg_id = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
			if (r->msg_id > pub.max_msg_id)
				pub.max_msg_id = r->msg_id;
		} else {
			free(r->msg_text);
			r->msg_text = idem_estrdup(PQgetvalue(res, (int)i, 1));
		}
		r->enqueued_us = strtoll(PQgetvalue(res, (int)i, 2), NULL, 10);
		r->published = PQgetvalue(res, (int)i, 3)[0] == 't';
	}
	PQclear(res);
}

static void
copy_start(void)
{
	PGresult *res;

	command("BEGIN");
	res = PQexec(pub.conn, pub.copy_sql);
	if (PQresultStatus(res) != PGRES_COPY_IN)
		die_pg(res);
	PQclear(res);
	pub.copying = 1;
}

static void
copy_flush(void)
{
	if (pub.copy_len == 0)
		return;
	if (PQputCopyData(pub.conn, pub.copy_buf, (int)pub.copy_len) != 1)
		die_pg(NULL);
	pub.copy_len = 0;
}

/* Room for need more bytes in the COPY buffer, sending what it holds
 * when a chunk is full. */
static char *
copy_room(size_t need)
{
	if (pub.copy_len + need > COPY_CHUNK)
		copy_flush();
	if (pub.copy_len + need > pub.copy_cap) {
		pub.copy_cap = pub.copy_len + need + COPY_CHUNK;
		pub.copy_buf = idem_erealloc(pub.copy_buf, pub.copy_cap);
	}
	return pub.copy_buf + pub.copy_len;
}

/* Appends bytes escaped already, as the stream has them, and an end. */
static void
copy_escaped(const char *field, size_t len, char end)
{
	char *o = copy_room(len + 1);

	memcpy(o, field, len);
	o[len] = end;
	pub.copy_len += len + 1;
}

/* Appends a field to the COPY buffer, escaped as COPY text (and idem-tsv). */
static void
copy_field(const char *field, char end)
{
	char *o = idem_tsv_escape_to(copy_room(strlen(field) * 2 + 1), field);

	*o++ = end;
	pub.copy_len = (size_t)(o - pub.copy_buf);
}

static void
copy_line(const char *job_id, long long copy, const char *business_key, const char *payload)
{
	char copy_text[32];

	snprintf(copy_text, sizeof(copy_text), "%lld", copy);
	copy_field(pub.queue, '\t');
	copy_field(job_id, '\t');
	copy_field(copy_text, '\t');
	copy_field(business_key, '\t');
	copy_field(payload, '\n');
}

/* Ends the COPY. Returns -1, rolled back, when another publisher put one of
 * the messages in first; they must then go through send_checked. */
static int
copy_finish(const char *abort_reason)
{
	PGresult *res;
	const char *state;
	int rc = 0;

	copy_flush();
	if (PQputCopyEnd(pub.conn, abort_reason) != 1)
		die_pg(NULL);
	res = PQgetResult(pub.conn);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		if (abort_reason == NULL && (state == NULL || strcmp(state, "23505") != 0))
			die_pg(res);
		rc = -1;
	}
	PQclear(res);
	while ((res = PQgetResult(pub.conn)) != NULL)
		PQclear(res);
	pub.copying = 0;
	if (rc < 0)
		command("ROLLBACK");
	return rc;
}

/* Publishes a batch of messages: new ones with COPY, at the rate the table
 * takes rows, the others checked one by one in the database. */
static void
publish_batch(struct message **msgs, size_t n)
{
	struct message **fresh = idem_ereallocarray(NULL, n + 1, sizeof(*fresh));
	struct message **known = idem_ereallocarray(NULL, n + 1, sizeof(*known));
	size_t nfresh = 0, nknown = 0, i;

	for (i = 0; i < n; i++) {
		if (!pub.copy_path || !pub.queue_empty)
			known[nknown++] = msgs[i];
		else
			fresh[nfresh++] = msgs[i];
	}
	if (nfresh > 0) {
		copy_start();
		for (i = 0; i < nfresh; i++) {
			const struct job *job = fresh[i]->job;

			copy_line(job->id, fresh[i]->copy, job->business_key, job->payload);
		}
		if (copy_finish(NULL) == 0) {
			read_back(fresh, nfresh);
			command("COMMIT");
		} else {
			memcpy(known + nknown, fresh, nfresh * sizeof(*fresh));
			nknown += nfresh;
		}
	}
	for (i = 0; i < nknown; i += pub.batch)
		send_checked(known + i, nknown - i < pub.batch ? nknown - i : pub.batch);
	free(fresh);
	free(known);
	pub.done += n;
	progress(0);
}

static void
write_publish(FILE *out, const char *job_id, long long copy, const struct result *r)
{
	char copy_text[32], msg_id[32], published_at[32];
	const char *row[5];

	if (r->msg_id == 0 && r->msg_text == NULL)
		idem_die(IDEM_EXIT_ENV, "publishing: no answer from the queue for job %s copy %lld",
		    job_id, copy);
	snprintf(copy_text, sizeof(copy_text), "%lld", copy);
	snprintf(msg_id, sizeof(msg_id), "%lld", (long long)r->msg_id);
	idem_format_time(r->enqueued_us, published_at);
	row[0] = job_id;
	row[1] = copy_text;
	row[2] = r->msg_text ? r->msg_text : msg_id;
	row[3] = published_at;
	row[4] = r->published ? "published" : "existing";
	if (idem_tsv_write_row(out, "publish", row, 5) < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
}

static void
measure_skew(void)
{
	struct idem_error err;
	long long skew_us;

	if (idem_pg_clock_skew(pub.conn, &skew_us, &err) < 0)
		idem_die_error(&err);
	pub.skew_us = skew_us;
}

/* Reaches the database named by -d, else by the seed, else by PG*; refuses
 * one that is not a sandbox before writing anything. */
static void
connect_sandbox(const char *conninfo)
{
	struct idem_error err;

	if ((pub.conn = idem_pg_connect(conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(pub.conn, &err) < 0 ||
	    idem_pg_observe(pub.conn, &pub.here, &err) < 0 ||
	    idem_queue_check(&pub.q, pub.conn, &pub.version, &err) < 0)
		idem_die_error(&err);
	measure_skew();
	pub.copy_path = idem_queue_has(&pub.q, "copy");
	if (!pub.copy_path)
		return;
	/* a queue whose ids only grow: new messages go in with COPY and are
	 * read back by id */
	pub.copy_sql = idem_queue_sql(&pub.q, pub.conn, "copy");
	pub.published_after = idem_queue_sql(&pub.q, pub.conn, "published-after");
	pub.published_span = idem_queue_sql(&pub.q, pub.conn, "published-span");
	if (pub.published_after == NULL || pub.published_span == NULL)
		idem_die(IDEM_EXIT_ENV, "the %s adapter has a copy section without published-after "
		    "and published-span", pub.q.kind);
	queue_state();
}

/* The stream's database row against the database reached: another one
 * is refused before anything is published. */
static void
check_database(const struct idem_tsv_reader *r)
{
	struct idem_pg_observed stream;
	struct idem_error err;
	int rc;

	idem_pg_observed_from(&stream, &r->fields[DATABASE_SANDBOX_ID]);
	rc = idem_pg_same_database(&stream, &pub.here, pub.how, &err);
	idem_pg_observed_free(&stream);
	if (rc < 0) {
		if (pub.copying)
			copy_finish(err.text);
		idem_die_error(&err);
	}
	pub.have_stream_db = 1;
}

/* The queue row: the queue and its library's version, as the database
 * showed them; before it, the database row when the stream has none. */
static void
write_queue(void)
{
	if (!pub.have_stream_db && idem_pg_observed_write(stdout, &pub.here) < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	const char *row[3] = { pub.q.kind, pub.queue, pub.version };

	if (idem_tsv_write_row(stdout, "queue", row, 3) < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
}

static long
find_scenario(const char *name)
{
	size_t i;

	for (i = 0; i < pub.nscenarios; i++)
		if (strcmp(pub.scenarios[i].name, name) == 0)
			return (long)i;
	return -1;
}

static void
add_scenario(const struct idem_tsv_reader *r)
{
	struct scenario *sc;

	pub.scenarios = idem_ereallocarray(pub.scenarios, pub.nscenarios + 1, sizeof(*sc));
	sc = &pub.scenarios[pub.nscenarios++];
	sc->name = idem_estrdup(r->fields[SCENARIO_NAME]);
	sc->fault = idem_estrdup(r->fields[SCENARIO_FAULT]);
	sc->duplicates = idem_tsv_number(r, SCENARIO_DUPLICATES, 0);
	sc->within_ms = idem_tsv_number(r, SCENARIO_WITHIN_MS, 0);
}

/* Keeps a job whose scenario asks for copies: they are published after
 * the stream was passed on. */
static void
keep_job(const struct idem_tsv_reader *r, long scenario)
{
	struct job *job;

	if (pub.nkept == pub.kept_cap) {
		pub.kept_cap = pub.kept_cap ? pub.kept_cap * 2 : 64;
		pub.jobs = idem_ereallocarray(pub.jobs, pub.kept_cap, sizeof(*pub.jobs));
	}
	job = &pub.jobs[pub.nkept++];
	memset(job, 0, sizeof(*job));
	job->scenario = scenario;
	job->index = pub.njobs;
	job->id = idem_estrdup(r->fields[JOB_ID]);
	job->business_key = idem_estrdup(r->fields[JOB_BUSINESS_KEY]);
	job->payload = idem_estrdup(r->fields[JOB_PAYLOAD]);
}

/*
 * The original of a job row into the COPY, its fields taken as the stream
 * has them: idem-tsv escapes as COPY text does, so they need no decoding
 * and escaping again. Its id goes on a line of pub.ids, to be matched with
 * its msg_id.
 */
static void
copy_original(const struct idem_tsv_reader *r)
{
	/* the reader checked the row: job, id, business key, payload, ... */
	const char *end = r->line + r->line_len;
	const char *id = (const char *)memchr(r->line, '\t', r->line_len) + 1;
	const char *key = (const char *)memchr(id, '\t', (size_t)(end - id)) + 1;
	const char *payload = (const char *)memchr(key, '\t', (size_t)(end - key)) + 1;
	const char *after = memchr(payload, '\t', (size_t)(end - payload));
	size_t id_len = (size_t)(key - 1 - id);

	if (fwrite(id, 1, id_len, pub.ids) != id_len || putc('\n', pub.ids) == EOF)
		idem_die(IDEM_EXIT_ENV, "holding the job ids:");
	copy_field(pub.queue, '\t');
	copy_escaped(id, id_len, '\t');
	copy_escaped("0", 1, '\t');
	/* the business key, a tab, the payload */
	copy_escaped(key, (size_t)((after ? after : end) - key), '\n');
}

/* The kept job at a place among the stream's jobs, found in job order. */
static struct job *
kept_at(size_t index, size_t *next)
{
	if (*next < pub.nkept && pub.jobs[*next].index == index)
		return &pub.jobs[(*next)++];
	return NULL;
}

static FILE *
rewound(FILE *f, const char *what)
{
	if (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "%s:", what);
	return f;
}

/* The publish row of an original sent by COPY; its id as the stream has it. */
static void
answer_fresh_row(FILE *out, const char *escaped_id, const struct result *res, size_t index,
		 size_t *next)
{
	char published_at[32];
	struct job *job = kept_at(index, next);

	idem_format_time(res->enqueued_us, published_at);
	if (fprintf(out, "publish\t%s\t0\t%lld\t%s\tpublished\n", escaped_id, (long long)res->msg_id,
	    published_at) < 0)
		idem_die(IDEM_EXIT_ENV, "holding the publish rows:");
	if (job != NULL)
		job->original = *res;
}

/*
 * After the COPY of the originals: their msg_ids and publication times,
 * written as publish rows in job order. In the usual case the new messages
 * are the ones sent, with consecutive ids from one statement; otherwise the
 * new rows come back one at a time and are matched with the ids in order,
 * passing over those of another publisher.
 */
static void
answer_fresh(FILE *out)
{
	const char *params[1];
	char after_text[32], *line = NULL;
	size_t cap = 0, i, next = 0;
	ssize_t len;
	struct result res = { 0, NULL, 0, 1 };
	PGresult *row;
	int fast = sent_alone(pub.copied, &res.msg_id, &res.enqueued_us);

	snprintf(after_text, sizeof(after_text), "%lld", (long long)pub.max_msg_id);
	params[0] = after_text;
	rewound(pub.ids, "holding the job ids");
	if (!fast && (!PQsendQueryParams(pub.conn, pub.published_after, 1, NULL, params, NULL, NULL, 1) ||
	    !PQsetSingleRowMode(pub.conn)))
		die_pg(NULL);
	for (i = 0; (len = getline(&line, &cap, pub.ids)) > 0; i++) {
		line[len - 1] = '\0';
		while (!fast) {
			char *id, *escaped;
			int same;

			row = PQgetResult(pub.conn);
			if (PQresultStatus(row) != PGRES_SINGLE_TUPLE) {
				if (PQresultStatus(row) != PGRES_TUPLES_OK)
					die_pg(row);
				idem_die(IDEM_EXIT_ENV, "publishing: %zu of %zu messages did not come "
				    "back from the queue", pub.copied - i, pub.copied);
			}
			/* the ids file holds them escaped, as the stream does */
			id = idem_estrndup(PQgetvalue(row, 0, 0), (size_t)PQgetlength(row, 0, 0));
			escaped = idem_tsv_escape(id);
			same = strcmp(escaped, line) == 0 && be32(PQgetvalue(row, 0, 1)) == 0;
			res.msg_id = be64(PQgetvalue(row, 0, 2));
			res.enqueued_us = be64(PQgetvalue(row, 0, 3)) + PG_EPOCH_US;
			free(escaped);
			free(id);
			PQclear(row);
			if (same)
				break;
		}
		answer_fresh_row(out, line, &res, i, &next);
		if (res.msg_id > pub.max_msg_id)
			pub.max_msg_id = res.msg_id;
		if (fast)
			res.msg_id++;
	}
	if (ferror(pub.ids))
		idem_die(IDEM_EXIT_ENV, "holding the job ids:");
	while (!fast && (row = PQgetResult(pub.conn)) != NULL)
		PQclear(row);
	free(line);
	if (i != pub.copied)
		idem_die(IDEM_EXIT_ENV, "holding the job ids: %zu of %zu read back", i, pub.copied);
}

/* Checks a batch of originals through the adapter's publish section and
 * writes their publish rows. */
static void
check_batch(FILE *out, struct job *batch, struct message **msgs, size_t n, size_t *next)
{
	struct job *kept;
	size_t i;

	send_checked(msgs, n);
	for (i = 0; i < n; i++) {
		write_publish(out, batch[i].id, 0, &msgs[i]->result);
		if ((kept = kept_at(batch[i].index, next)) != NULL) {
			kept->original = msgs[i]->result;
			msgs[i]->result.msg_text = NULL;
		}
		free(msgs[i]->result.msg_text);
		free(batch[i].id);
		free(batch[i].business_key);
		free(batch[i].payload);
	}
}

/*
 * The originals not sent by COPY (a queue that held messages, another
 * library's queue, or a COPY that met another publisher's message), read
 * again from the held stream and checked in batches, in one transaction
 * after the adapter's prepare section; their publish rows in job order.
 */
static void
answer_checked(FILE *hold, const char *name, FILE *out)
{
	size_t size = pub.batch < pub.njobs ? pub.batch : pub.njobs, n = 0, next = 0, seen = 0;
	struct job *batch = idem_ereallocarray(NULL, size + 1, sizeof(*batch));
	struct message *msgs = idem_ereallocarray(NULL, size + 1, sizeof(*msgs));
	struct message **ptrs = idem_ereallocarray(NULL, size + 1, sizeof(*ptrs));
	struct idem_tsv_reader r;
	struct idem_error err;
	int rc;

	command("BEGIN");
	if (idem_queue_has(&pub.q, "prepare")) {
		PGresult *res = idem_queue_exec(&pub.q, pub.conn, "prepare", "preparing the queue", 0,
		    NULL, NULL, &err);

		if (res == NULL)
			idem_die_error(&err);
		PQclear(res);
	}
	idem_tsv_reader_init(&r, rewound(hold, "holding the stream"), name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		if (rc < 0)
			idem_die_error(&err);
		if (rc != IDEM_TSV_ROW || r.kind != IDEM_KIND_JOB)
			continue;
		batch[n].id = idem_estrdup(r.fields[JOB_ID]);
		batch[n].business_key = idem_estrdup(r.fields[JOB_BUSINESS_KEY]);
		batch[n].payload = idem_estrdup(r.fields[JOB_PAYLOAD]);
		batch[n].index = seen++;
		memset(&msgs[n], 0, sizeof(msgs[n]));
		msgs[n].job = &batch[n];
		ptrs[n] = &msgs[n];
		n++;
		if (n == size) {
			check_batch(out, batch, ptrs, n, &next);
			pub.done += n;
			n = 0;
		}
	}
	check_batch(out, batch, ptrs, n, &next);
	pub.done += n;
	command("COMMIT");
	idem_tsv_reader_free(&r);
	free(batch);
	free(msgs);
	free(ptrs);
}

/* Writes a held file on standard output. */
static void
pass_on(FILE *f, const char *what)
{
	rewound(f, what);
	if (idem_copy_stream(f, stdout) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", ferror(f) ? what : "write error on standard output");
	fclose(f);
}

/*
 * Reads the stream and publishes the original of every job as it goes, in
 * one transaction that commits only when the whole stream was read and
 * found good: bad input leaves the queue as it was and prints nothing. The
 * stream is held in a temporary file, not in memory, and passed on once the
 * originals are in; only the jobs whose scenario asks for copies are kept.
 */
static void
read_and_publish(FILE *in, const char *name, const char *conninfo)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	char bad[1280];
	FILE *hold = tmpfile(), *answers = tmpfile();
	int rc;

	if (hold == NULL || answers == NULL || (pub.ids = tmpfile()) == NULL ||
	    setvbuf(hold, NULL, _IOFBF, HOLD_BUFFER) != 0)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	idem_tsv_reader_init(&r, in, name);
	for (;;) {
		rc = idem_tsv_next(&r, &err);
		if (rc == IDEM_TSV_EOF)
			break;
		if (rc < 0) {
			if (pub.copying) {
				snprintf(bad, sizeof(bad), "bad input: %s", err.text);
				copy_finish(bad);
			}
			idem_die_error(&err);
		}
		if (idem_tsv_pass(hold, &r) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the stream:");
		if (rc != IDEM_TSV_ROW)
			continue;
		if (r.kind == IDEM_KIND_SEED) {
			pub.queue = idem_estrdup(r.fields[SEED_QUEUE]);
			snprintf(pub.vt_ms, sizeof(pub.vt_ms), "%s", r.fields[SEED_VISIBILITY_TIMEOUT_MS]);
			snprintf(pub.max_attempts, sizeof(pub.max_attempts), "%s",
			    r.fields[SEED_MAX_ATTEMPTS]);
			if (idem_queue_open_seed(&pub.q, r.fields[SEED_QUEUE_KIND], pub.queue,
			    r.fields[SEED_ADAPTER], r.fields[SEED_ADAPTER_SHA256], &err) < 0)
				idem_die_error(&err);
			/* -d, then a controller's IDEM_DATABASE, then the seed's database */
			connect_sandbox(idem_pg_choose(conninfo, r.fields[SEED_DATABASE], &pub.how));
		} else if (r.kind == IDEM_KIND_DATABASE) {
			check_database(&r);
		} else if (r.kind == IDEM_KIND_SCENARIO) {
			add_scenario(&r);
		} else if (r.kind == IDEM_KIND_JOB) {
			/* the reader saw a scenario row of that name before the job */
			long s = r.fields[JOB_SCENARIO] ? find_scenario(r.fields[JOB_SCENARIO]) : -1;

			if (s >= 0 && pub.scenarios[s].duplicates > 0)
				keep_job(&r, s);
			pub.njobs++;
			if (!pub.copy_path || !pub.queue_empty)
				continue;
			if (!pub.copying)
				copy_start();
			copy_original(&r);
			pub.copied++;
		}
	}
	idem_tsv_reader_free(&r);

	if (pub.copying && copy_finish(NULL) == 0) {
		answer_fresh(answers);
		command("COMMIT");
		pub.done = pub.njobs;
	} else if (pub.conn != NULL && (pub.njobs > 0 || !pub.copy_path)) {
		answer_checked(hold, name, answers);
	}
	fclose(pub.ids);
	pub.ids = NULL;
	pass_on(hold, "holding the stream");
	write_queue();
	pass_on(answers, "holding the publish rows");
	if (fflush(stdout) != 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
}

/* Where in its window a copy goes: a pure function of job id and copy. */
static long long
offset_ms(const char *job_id, long long copy, long long within_ms)
{
	char copy_text[32];

	if (within_ms <= 0)
		return 0;
	snprintf(copy_text, sizeof(copy_text), "%lld", copy);
	return (long long)(idem_sha256_pair(job_id, copy_text) % (uint64_t)within_ms);
}

static int
by_due(const void *a, const void *b)
{
	const struct message *x = a, *y = b;

	if (x->due_us != y->due_us)
		return x->due_us < y->due_us ? -1 : 1;
	if (x->job != y->job)
		return x->job < y->job ? -1 : 1;
	return (x->copy > y->copy) - (x->copy < y->copy);
}

/* The duplicate copies, each when it falls due, in batches of those due. */
static void
publish_copies(double time_scale)
{
	struct message *copies, **batch;
	size_t ncopies = 0, i, j, k;

	for (i = 0; i < pub.nkept; i++)
		ncopies += (size_t)pub.scenarios[pub.jobs[i].scenario].duplicates;
	copies = idem_ereallocarray(NULL, ncopies + 1, sizeof(*copies));
	batch = idem_ereallocarray(NULL, ncopies + 1, sizeof(*batch));
	ncopies = 0;
	for (i = 0; i < pub.nkept; i++) {
		const struct scenario *sc = &pub.scenarios[pub.jobs[i].scenario];
		long long c;

		for (c = 1; c <= sc->duplicates; c++) {
			long long off = strcmp(sc->fault, "race") == 0 ? 0 :
			    offset_ms(pub.jobs[i].id, c, sc->within_ms);

			memset(&copies[ncopies], 0, sizeof(copies[ncopies]));
			copies[ncopies].job = &pub.jobs[i];
			copies[ncopies].copy = c;
			copies[ncopies].due_us = pub.jobs[i].original.enqueued_us +
			    (int64_t)llround((double)off * 1000.0 * time_scale);
			ncopies++;
		}
	}
	pub.total = pub.njobs + ncopies;
	qsort(copies, ncopies, sizeof(*copies), by_due);
	for (i = 0; i < ncopies; i = j) {
		int64_t wait = copies[i].due_us - (idem_now_us() + pub.skew_us);

		if (wait > 0) {
			struct timespec ts = { (time_t)(wait / 1000000), (long)(wait % 1000000) * 1000 };

			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		for (j = i; j < ncopies && j - i < pub.batch &&
		    copies[j].due_us <= idem_now_us() + pub.skew_us; j++)
			batch[j - i] = &copies[j];
		if (j == i)
			continue;
		publish_batch(batch, j - i);
		for (k = i; k < j; k++) {
			write_publish(stdout, copies[k].job->id, copies[k].copy, &copies[k].result);
			free(copies[k].result.msg_text);
		}
		if (fflush(stdout) != 0)
			idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	}
	progress(1);
	free(batch);
	free(copies);
}

static void
free_all(void)
{
	size_t i;

	idem_pg_observed_free(&pub.here);
	for (i = 0; i < pub.nkept; i++) {
		free(pub.jobs[i].id);
		free(pub.jobs[i].business_key);
		free(pub.jobs[i].payload);
		free(pub.jobs[i].original.msg_text);
	}
	free(pub.jobs);
	for (i = 0; i < pub.nscenarios; i++) {
		free(pub.scenarios[i].name);
		free(pub.scenarios[i].fault);
	}
	free(pub.scenarios);
	free(pub.copy_buf);
	free(pub.queue);
	free(pub.version);
	free(pub.copy_sql);
	free(pub.published_after);
	free(pub.published_span);
	idem_queue_close(&pub.q);
}

/* What the options ask for; -b goes into pub. */
struct options {
	const char *conninfo, *path;
	double time_scale;
};

static void
parse_options(int argc, char *argv[], struct options *opt)
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "batch", required_argument, NULL, 'b' },
		{ "time-scale", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	opt->conninfo = NULL;
	opt->time_scale = 1.0;
	while ((c = getopt_long(argc, argv, "d:b:s:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			opt->conninfo = optarg;
			break;
		case 'b':
			errno = 0;
			pub.batch = strtoul(optarg, &end, 10);
			if (errno || *end || pub.batch < 1 || pub.batch > 1000000)
				idem_die(IDEM_EXIT_USAGE, "-b %s: expected a batch size from 1 to 1000000",
				    optarg);
			break;
		case 's':
			opt->time_scale = strtod(optarg, &end);
			if (*end || end == optarg || !(opt->time_scale >= 0 && opt->time_scale <= 1000))
				idem_die(IDEM_EXIT_USAGE, "-s %s: expected a time scale from 0 to 1000",
				    optarg);
			break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("dup-publish " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (argc - optind > 1)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	opt->path = optind < argc ? argv[optind] : "-";
}

int
main(int argc, char *argv[])
{
	struct options opt;
	const char *name;
	FILE *in;

	argv0 = "dup-publish";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &opt);
	in = idem_eopen_input(opt.path, &name);
	pub.progress = isatty(2);
	read_and_publish(in, name, opt.conninfo);
	if (in != stdin)
		fclose(in);
	publish_copies(opt.time_scale);
	PQfinish(pub.conn);
	free_all();
	idem_close_stdout();
	return 0;
}
