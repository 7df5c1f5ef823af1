/* dup-publish: pass an idem-tsv stream through, publish every job to the
 * sandbox queue and the duplicate copies its scenarios ask for, each copy at
 * a fixed offset inside its window, and append a publish row per message.
 * Publishing is idempotent: a message is (queue, job id, copy). */
#include <sys/time.h>

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
#include "tsv.h"
#include "util.h"

static const char synopsis[] =
	"usage: dup-publish [-d conninfo] [-b batch] [-s time-scale] [file]\n";

struct scenario {
	char *name, *fault;
	long long duplicates, within_ms;
};

struct job {
	char *id, *business_key, *payload;
	long scenario;			/* index, or -1 */
	int64_t published_us;		/* when copy 0 went in, database clock */
};

struct message {
	size_t job;
	long long copy;
	int64_t due_us;
};

struct publisher {
	PGconn *conn;
	const char *queue;
	size_t batch;
	size_t total, done;
	int progress;
	int64_t skew_us;		/* database clock minus ours */
	struct job *jobs;
	/* the batch being built, as PostgreSQL array literals */
	char *ids, *keys, *payloads, *copies;
	size_t ids_len, keys_len, payloads_len, copies_len, nbatch;
	size_t *batch_jobs;
};

static struct scenario *scenarios;
static size_t nscenarios;
static struct job *jobs;
static size_t njobs;

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long long
parse_count(const struct idem_tsv_reader *r, size_t field)
{
	const char *s = r->fields[field];
	char *end;
	long long v;

	if (s == NULL)
		return 0;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || end == s || v < 0)
		idem_die(IDEM_EXIT_USAGE, "%s:%ld: %s row, field %s: expected a count, got \"%s\"",
		    r->name, r->line_no, idem_kind_name(r->kind),
		    idem_kind_field_name(r->kind, field), s);
	return v;
}

static long
find_scenario(const char *name)
{
	size_t i;

	for (i = 0; i < nscenarios; i++)
		if (strcmp(scenarios[i].name, name) == 0)
			return (long)i;
	return -1;
}

static int
by_job_id(const void *a, const void *b)
{
	return strcmp(((const struct job *)a)->id, ((const struct job *)b)->id);
}

/* Passes the stream through and keeps what publishing needs. */
static void
read_stream(FILE *in, const char *name, char **queue, char **database)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	size_t cap = 0, scap = 0, i;
	int rc, seen_seed = 0;

	idem_tsv_reader_init(&r, in, name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		if (rc < 0)
			idem_die_error(&err);
		if (idem_tsv_pass(stdout, &r) < 0)
			idem_die(IDEM_EXIT_ENV, "write error on standard output:");
		if (rc != IDEM_TSV_ROW)
			continue;
		switch (r.kind) {
		case IDEM_KIND_SEED:
			if (seen_seed++)
				idem_die(IDEM_EXIT_USAGE, "%s:%ld: a second seed row", name, r.line_no);
			if (r.fields[SEED_QUEUE] == NULL || !*r.fields[SEED_QUEUE])
				idem_die(IDEM_EXIT_USAGE, "%s:%ld: seed row, field queue: empty",
				    name, r.line_no);
			*queue = idem_estrdup(r.fields[SEED_QUEUE]);
			if (r.fields[SEED_DATABASE] != NULL)
				*database = idem_estrdup(r.fields[SEED_DATABASE]);
			break;
		case IDEM_KIND_SCENARIO:
			if (nscenarios == scap) {
				scap = scap ? scap * 2 : 16;
				scenarios = idem_ereallocarray(scenarios, scap, sizeof(*scenarios));
			}
			if (r.fields[SCENARIO_NAME] == NULL || r.fields[SCENARIO_FAULT] == NULL)
				idem_die(IDEM_EXIT_USAGE, "%s:%ld: scenario row: name and fault are "
				    "required", name, r.line_no);
			scenarios[nscenarios].name = idem_estrdup(r.fields[SCENARIO_NAME]);
			scenarios[nscenarios].fault = idem_estrdup(r.fields[SCENARIO_FAULT]);
			scenarios[nscenarios].duplicates = parse_count(&r, SCENARIO_DUPLICATES);
			scenarios[nscenarios].within_ms = parse_count(&r, SCENARIO_WITHIN_MS);
			nscenarios++;
			break;
		case IDEM_KIND_JOB:
			if (njobs == cap) {
				cap = cap ? cap * 2 : 1024;
				jobs = idem_ereallocarray(jobs, cap, sizeof(*jobs));
			}
			for (i = JOB_ID; i <= JOB_PAYLOAD; i++)
				if (r.fields[i] == NULL)
					idem_die(IDEM_EXIT_USAGE, "%s:%ld: job row, field %s: missing",
					    name, r.line_no, idem_kind_field_name(r.kind, i));
			jobs[njobs].id = idem_estrdup(r.fields[JOB_ID]);
			jobs[njobs].business_key = idem_estrdup(r.fields[JOB_BUSINESS_KEY]);
			jobs[njobs].payload = idem_estrdup(r.fields[JOB_PAYLOAD]);
			jobs[njobs].scenario = -1;
			if (r.fields[JOB_SCENARIO] != NULL &&
			    (jobs[njobs].scenario = find_scenario(r.fields[JOB_SCENARIO])) < 0)
				idem_die(IDEM_EXIT_USAGE, "%s:%ld: job row, field scenario: no scenario "
				    "row named \"%s\" before it", name, r.line_no, r.fields[JOB_SCENARIO]);
			jobs[njobs].published_us = 0;
			njobs++;
			break;
		default:
			break;
		}
	}
	idem_tsv_reader_free(&r);
	if (!seen_seed)
		idem_die(IDEM_EXIT_USAGE, "%s: no seed row: start the stream with seed-gen", name);
	if (njobs > 1) {
		struct job *sorted = idem_ereallocarray(NULL, njobs, sizeof(*sorted));

		memcpy(sorted, jobs, njobs * sizeof(*sorted));
		qsort(sorted, njobs, sizeof(*sorted), by_job_id);
		for (i = 1; i < njobs; i++)
			if (strcmp(sorted[i].id, sorted[i - 1].id) == 0)
				idem_die(IDEM_EXIT_USAGE, "%s: job %s appears twice in the stream",
				    name, sorted[i].id);
		free(sorted);
	}
}

/* Appends one element to a PostgreSQL array literal being built. */
static void
array_append(char **buf, size_t *len, const char *value, int quote)
{
	size_t need = strlen(value) * 2 + 4, o = *len;
	const char *p;

	*buf = idem_erealloc(*buf, o + need + 2);
	(*buf)[o] = o == 0 ? '{' : ',';
	o++;
	if (quote)
		(*buf)[o++] = '"';
	for (p = value; *p; p++) {
		if (quote && (*p == '"' || *p == '\\'))
			(*buf)[o++] = '\\';
		(*buf)[o++] = *p;
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

static void
progress(struct publisher *p, int last)
{
	static int64_t shown;
	int64_t t = now_us();

	if (!p->progress || (!last && t - shown < 100000))
		return;
	shown = t;
	fprintf(stderr, "\rdup-publish: %zu/%zu messages", p->done, p->total);
	if (last)
		fputs("\n", stderr);
}

/* Sends the batch built so far and writes its publish rows. */
static void
flush_batch(struct publisher *p)
{
	static const char sql[] =
		"SELECT b.job_id, b.copy, b.msg_id, "
		"to_char(b.enqueued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), "
		"CASE WHEN b.published THEN 'published' ELSE 'existing' END, "
		"(extract(epoch FROM b.enqueued_at) * 1000000)::bigint "
		"FROM idem.send_batch($1, $2, $3, $4, $5) b";
	const char *params[5];
	struct idem_error err;
	PGresult *res;
	int i, n;

	if (p->nbatch == 0)
		return;
	array_close(&p->ids, &p->ids_len);
	array_close(&p->keys, &p->keys_len);
	array_close(&p->payloads, &p->payloads_len);
	array_close(&p->copies, &p->copies_len);
	params[0] = p->queue;
	params[1] = p->ids;
	params[2] = p->keys;
	params[3] = p->payloads;
	params[4] = p->copies;
	res = idem_pg_exec(p->conn, "publishing", &err, sql, 5, params);
	if (res == NULL)
		idem_die_error(&err);
	n = PQntuples(res);
	if ((size_t)n != p->nbatch)
		idem_die(IDEM_EXIT_ENV, "publishing: sent %zu messages, the queue answered %d",
		    p->nbatch, n);
	for (i = 0; i < n; i++) {
		const char *row[5];
		struct job *job = &p->jobs[p->batch_jobs[i]];

		row[0] = PQgetvalue(res, i, 0);
		row[1] = PQgetvalue(res, i, 1);
		row[2] = PQgetvalue(res, i, 2);
		row[3] = PQgetvalue(res, i, 3);
		row[4] = PQgetvalue(res, i, 4);
		if (strcmp(row[1], "0") == 0)
			job->published_us = strtoll(PQgetvalue(res, i, 5), NULL, 10);
		if (idem_tsv_write_row(stdout, "publish", row, 5) < 0)
			idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	}
	PQclear(res);
	if (fflush(stdout) != 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	p->done += p->nbatch;
	p->nbatch = p->ids_len = p->keys_len = p->payloads_len = p->copies_len = 0;
	progress(p, 0);
}

static void
add(struct publisher *p, size_t job_index, long long copy)
{
	const struct job *job = &p->jobs[job_index];
	char copy_text[32];

	snprintf(copy_text, sizeof(copy_text), "%lld", copy);
	array_append(&p->ids, &p->ids_len, job->id, 1);
	array_append(&p->keys, &p->keys_len, job->business_key, 1);
	array_append(&p->payloads, &p->payloads_len, job->payload, 1);
	array_append(&p->copies, &p->copies_len, copy_text, 0);
	p->batch_jobs[p->nbatch++] = job_index;
	if (p->nbatch == p->batch)
		flush_batch(p);
}

/* Where in its window a copy goes: a pure function of job id and copy. */
static long long
offset_ms(const char *job_id, long long copy, long long within_ms)
{
	crypto_hash_sha256_state st;
	unsigned char digest[32];
	char copy_text[32];
	uint64_t h = 0;
	int i;

	if (within_ms <= 0)
		return 0;
	snprintf(copy_text, sizeof(copy_text), "%lld", copy);
	crypto_hash_sha256_init(&st);
	crypto_hash_sha256_update(&st, (const unsigned char *)job_id, strlen(job_id) + 1);
	crypto_hash_sha256_update(&st, (const unsigned char *)copy_text, strlen(copy_text));
	crypto_hash_sha256_final(&st, digest);
	for (i = 0; i < 8; i++)
		h = h << 8 | digest[i];
	return (long long)(h % (uint64_t)within_ms);
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

static void
measure_skew(struct publisher *p)
{
	struct idem_error err;
	PGresult *res;
	int64_t before = now_us(), after, server;

	res = idem_pg_exec(p->conn, "reading the database clock", &err,
	    "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint", 0, NULL);
	if (res == NULL)
		idem_die_error(&err);
	after = now_us();
	server = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	p->skew_us = server - (before + after) / 2;
	PQclear(res);
}

static void
publish(struct publisher *p, double time_scale)
{
	struct message *copies = NULL;
	size_t ncopies = 0, i, j;

	for (i = 0; i < njobs; i++)
		if (jobs[i].scenario >= 0)
			ncopies += (size_t)scenarios[jobs[i].scenario].duplicates;
	p->total = njobs + ncopies;
	p->batch_jobs = idem_ereallocarray(NULL, p->batch, sizeof(size_t));
	for (i = 0; i < njobs; i++)
		add(p, i, 0);
	flush_batch(p);
	copies = idem_ereallocarray(NULL, ncopies + 1, sizeof(*copies));
	ncopies = 0;
	for (i = 0; i < njobs; i++) {
		const struct scenario *sc;
		long long c;

		if (jobs[i].scenario < 0)
			continue;
		sc = &scenarios[jobs[i].scenario];
		for (c = 1; c <= sc->duplicates; c++) {
			long long off = strcmp(sc->fault, "race") == 0 ? 0 :
			    offset_ms(jobs[i].id, c, sc->within_ms);

			copies[ncopies].job = i;
			copies[ncopies].copy = c;
			copies[ncopies].due_us = jobs[i].published_us +
			    (int64_t)llround((double)off * 1000.0 * time_scale);
			ncopies++;
		}
	}
	qsort(copies, ncopies, sizeof(*copies), by_due);
	for (i = 0; i < ncopies; i = j) {
		int64_t wait = copies[i].due_us - (now_us() + p->skew_us);

		if (wait > 0) {
			struct timespec ts = { (time_t)(wait / 1000000), (long)(wait % 1000000) * 1000 };

			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		for (j = i; j < ncopies && copies[j].due_us <= now_us() + p->skew_us; j++)
			add(p, copies[j].job, copies[j].copy);
		if (j == i)
			continue;
		flush_batch(p);
	}
	progress(p, 1);
	free(copies);
	free(p->batch_jobs);
	free(p->ids);
	free(p->keys);
	free(p->payloads);
	free(p->copies);
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "batch", required_argument, NULL, 'b' },
		{ "time-scale", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct publisher p = { .batch = 5000 };
	struct idem_error err;
	const char *conninfo = NULL, *path = "-";
	char *queue = NULL, *database = NULL, *end;
	double time_scale = 1.0;
	FILE *in = stdin;
	size_t i;
	int c;

	argv0 = "dup-publish";
	while ((c = getopt_long(argc, argv, "d:b:s:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			conninfo = optarg;
			break;
		case 'b':
			errno = 0;
			p.batch = strtoul(optarg, &end, 10);
			if (errno || *end || p.batch < 1 || p.batch > 1000000)
				idem_die(IDEM_EXIT_USAGE, "-b %s: expected a batch size from 1 to 1000000",
				    optarg);
			break;
		case 's':
			time_scale = strtod(optarg, &end);
			if (*end || end == optarg || !(time_scale >= 0 && time_scale <= 1000))
				idem_die(IDEM_EXIT_USAGE, "-s %s: expected a time scale from 0 to 1000",
				    optarg);
			break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("dup-publish " IDEM_VERSION); idem_close_stdout(); return 0;
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
	read_stream(in, strcmp(path, "-") == 0 ? "stdin" : path, &queue, &database);
	if (in != stdin)
		fclose(in);
	if (conninfo == NULL)
		conninfo = database;
	if ((p.conn = idem_pg_connect(conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(p.conn, &err) < 0)
		idem_die_error(&err);
	p.queue = queue;
	p.jobs = jobs;
	p.progress = isatty(2);
	measure_skew(&p);
	publish(&p, time_scale);
	PQfinish(p.conn);
	for (i = 0; i < njobs; i++) {
		free(jobs[i].id);
		free(jobs[i].business_key);
		free(jobs[i].payload);
	}
	free(jobs);
	for (i = 0; i < nscenarios; i++) {
		free(scenarios[i].name);
		free(scenarios[i].fault);
	}
	free(scenarios);
	free(queue);
	free(database);
	idem_close_stdout();
	return 0;
}
