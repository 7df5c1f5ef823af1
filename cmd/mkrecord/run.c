/* run.c: the rehearsal stream read into what mkrecord builds the record
 * from, and the evidence file of a volume record */
#include <sys/stat.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "map.h"
#include "run.h"
#include "tsv.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "record.h"
#include "role.h"
#include "trace.h"

/* kill-at's note for a kill point that cannot happen (kill-at(1), kill) */
#define FINDING "kill-at: ack in the effect's transaction: "

static struct idem_run s;

/* The jobs whose attempts a volume record lists: the first SAMPLE_JOBS,
 * those of a scenario, and those killed, retried, published more than
 * once or left not acked. */
static struct idem_map listed_jobs;

/* The rows of the evidence file: in memory, until the job rows show a
 * volume record, then in the file, compressed. The file is never left
 * behind by a run that fails: its temporary name goes at exit, and so
 * does the name it was published under until the record is complete. */
static struct {
	FILE *file;
	char *mem;
	size_t mem_len;
	char dir[PATH_MAX];
	char tmp[PATH_MAX];	/* the file, until published */
	char path[PATH_MAX];	/* where it was published */
	char made[PATH_MAX];	/* the name publishing made */
	int kept;
} ev;

int
idem_run_volume(const struct idem_run *run)
{
	return run->jobs > ALL_JOBS;
}

static void
list_job(const char *job)
{
	if (job != NULL && idem_map_get(&listed_jobs, job) == IDEM_MAP_NONE)
		idem_map_put(&listed_jobs, job, 0);
}

static int
listed(const char *job)
{
	return !idem_run_volume(&s) || (job != NULL &&
	    idem_map_get(&listed_jobs, job) != IDEM_MAP_NONE);
}

static void
remove_evidence_tmp(void)
{
	if (*ev.tmp)
		unlink(ev.tmp);
	if (*ev.made && !ev.kept)
		unlink(ev.made);
}

/* A file of that name holds the same bytes already, and stays. */
const char *
idem_run_publish_evidence(const char *dir)
{
	char sub[PATH_MAX], path[PATH_MAX];
	struct idem_error err;

	if (!idem_run_volume(&s))
		return ev.path;
	if (snprintf(sub, sizeof(sub), "%s/evidence", dir) >= (int)sizeof(sub) ||
	    snprintf(path, sizeof(path), "%s/%s.tsv.gz", sub, s.evidence_sha256) >= (int)sizeof(path))
		idem_die(IDEM_EXIT_USAGE, "%s/evidence: path too long", dir);
	if (mkdir(sub, 0755) < 0 && errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", sub);
	if (idem_fsync_path(ev.tmp, &err) < 0)
		idem_die_error(&err);
	if (link(ev.tmp, path) == 0)
		strcpy(ev.made, path);
	else if (errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", path);
	strcpy(ev.path, path);
	return ev.path;
}

void
idem_run_keep_evidence(void)
{
	ev.kept = 1;
}

static json_t *
text(const char *v)
{
	return v ? json_string(v) : json_null();
}

static json_t *
number_or_text(const char *v)
{
	char *end;
	long long n;

	if (v == NULL)
		return json_null();
	errno = 0;
	n = strtoll(v, &end, 10);
	if (*v && *end == '\0' && errno == 0)
		return json_integer(n);
	return json_string(v);
}

json_t *
idem_run_text(const char *v)
{
	return text(v);
}

json_t *
idem_run_number(const char *v)
{
	return number_or_text(v);
}

/* A message id as the record shows it: an integer when the queue's ids
 * are numbers written plainly (idem's, graphile-worker's), else its text
 * (a pg-boss UUID). */
static json_t *
message_id(const char *v)
{
	long long n;

	if (v == NULL || *v < '1' || *v > '9' || v[strspn(v, "0123456789")] != '\0')
		return text(v);
	errno = 0;
	n = strtoll(v, NULL, 10);
	return errno == 0 ? json_integer(n) : text(v);
}

const char *
idem_run_seed(const struct idem_run *run, const char *name)
{
	return json_string_value(json_object_get(run->seed, name));
}

json_t *
idem_run_words(const char *command)
{
	json_t *words = json_array();
	char *copy = idem_estrdup(command), *word, *save;

	for (word = strtok_r(copy, " \t\n", &save); word; word = strtok_r(NULL, " \t\n", &save))
		json_array_append_new(words, json_string(word));
	free(copy);
	return words;
}

/* The rows so far, from memory to the evidence file, which takes the
 * rows that follow: a record of this many jobs is a volume record. */
static void
spill_evidence(void)
{
	struct idem_error err;
	FILE *file;
	int fd;

	if (snprintf(ev.tmp, sizeof(ev.tmp), "%s/.mkrecord-XXXXXX", ev.dir) >= (int)sizeof(ev.tmp))
		idem_die(IDEM_EXIT_USAGE, "%s: path too long", ev.dir);
	if (mkdir(ev.dir, 0755) < 0 && errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", ev.dir);
	if ((fd = mkstemp(ev.tmp)) < 0) {
		*ev.tmp = '\0';
		idem_die(IDEM_EXIT_ENV, "%s:", ev.dir);
	}
	atexit(remove_evidence_tmp);
	if (fchmod(fd, 0644) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", ev.tmp);
	close(fd);
	if ((file = idem_record_file_open(ev.tmp, "w", &err)) == NULL)
		idem_die_error(&err);
	if (fclose(ev.file) != 0 || fwrite(ev.mem, 1, ev.mem_len, file) != ev.mem_len)
		idem_die(IDEM_EXIT_ENV, "%s:", ev.tmp);
	free(ev.mem);
	ev.mem = NULL;
	ev.file = file;
}

/*
 * A row as the record lists it: its fields in order, each under the key
 * at its place in keys. A key marked '#' takes a number, '@' a message
 * id, and one marked '=' the field of the key before it again.
 */
static json_t *
row_object(char **f, const char *const *keys)
{
	json_t *o = json_object(), *v;
	size_t i, field = 0;

	for (i = 0; keys[i] != NULL; i++) {
		const char *key = keys[i];

		if (*key != '=')
			field++;
		if (*key == '#')
			v = number_or_text(f[field]);
		else if (*key == '@')
			v = message_id(f[field]);
		else
			v = text(f[field]);
		json_object_set_new(o, strchr("#@=", *key) != NULL ? key + 1 : key, v);
	}
	return o;
}

static const char *const queue_keys[] = { "kind", "name", "version", NULL };
static const char *const expect_keys[] = {
	"#effects", "#duplicates", "#missing", "#pending", "#external", NULL
};
static const char *const call_keys[] = {
	"at", "#worker", "#pid", "method", "path", "idempotency_key", "body_sha256",
	"business_key", "#status", "answer", "effect", "response_id", "#id", "answered_at", NULL
};
static const char *const forgot_keys[] = {
	"at", "business_key", "idempotency_key", "#first_call", "#window_ms", NULL
};
static const char *const scenario_keys[] = {
	"name", "fault", "step", "#attempt", "#duplicates", "#within_ms", "until", "#vendor_ms",
	NULL
};
static const char *const kill_keys[] = {
	"scenario", "job", "#attempt", "step", "#pid", "killed_at", "observed", NULL
};
static const char *const stall_keys[] = {
	"scenario", "job", "#attempt", "step", "#pid", "stalled_at", "released_at", "release",
	"observed", NULL
};
static const char *const lease_keys[] = { "at", "@msg_id", "=msg", "job", "#attempt", "why", NULL };
static const char *const missed_keys[] = { "what", "scenario", "job", "#attempt", "step", NULL };
static const char *const recover_keys[] = {
	"job", "@msg_id", "=msg", "killed_at", "acked_at", "#recovery_ms", NULL
};
static const char *const guard_keys[] = { "kind", "name", "definition", "flags", "table", NULL };
static const char *const measure_keys[] = {
	"name", "value", "#numerator", "#denominator", "unit", NULL
};
static const char *const attempt_keys[] = {
	"job", "@msg_id", "=msg", "#attempt", "#pid", "consumed_at", "committed_at", "acked_at",
	"#rows_written", "branch", "written_at", "#rows_updated", NULL
};

/*
 * The readers of the first pass for the rows the record does not list
 * as they are.
 */
static void
read_seed(struct idem_tsv_reader *r)
{
	json_t *o = json_object();
	size_t i;

	for (i = 1; i <= idem_kind_nfields(IDEM_KIND_SEED); i++)
		json_object_set_new(o, idem_kind_field_name(IDEM_KIND_SEED, i), text(r->fields[i]));
	s.seed = o;
}

static void
read_queue(struct idem_tsv_reader *r)
{
	s.queue = row_object(r->fields, queue_keys);
}

static void
read_expect(struct idem_tsv_reader *r)
{
	s.expect = row_object(r->fields, expect_keys);
	s.expected_verdict = text(r->fields[EXPECT_VERDICT]);
}

/* A JSON field the reader checked, as its value; null for \N. */
static json_t *
json_field(const char *v)
{
	json_t *j = v ? json_loads(v, JSON_DECODE_ANY, NULL) : NULL;

	return j ? j : json_null();
}

static void
read_external(struct idem_tsv_reader *r)
{
	char **f = r->fields;

	/* the reader checked the key is an array of one or more strings */
	s.external = json_pack("{s:o,s:o,s:b,s:o,s:o,s:o,s:o,s:o}", "name", text(f[EXTERNAL_NAME]),
	    "key", json_field(f[EXTERNAL_KEY_FIELDS]), "honours_idempotency_key",
	    strcmp(f[EXTERNAL_HONOURS_IDEMPOTENCY_KEY], "true") == 0,
	    "pending_table", text(f[EXTERNAL_PENDING_TABLE]),
	    "pending_owner", text(f[EXTERNAL_PENDING_OWNER]),
	    "pending_key", json_field(f[EXTERNAL_PENDING_KEY]),
	    "pending_state", text(f[EXTERNAL_PENDING_STATE]),
	    "pending_settled", json_field(f[EXTERNAL_PENDING_SETTLED]));
}

/* A business key whose calls did not all send the same Idempotency-Key,
 * as count-effects found it: its keys (null for a call that sent none)
 * and the numbers of its calls. */
static void
read_rekeyed(struct idem_tsv_reader *r)
{
	char **f = r->fields;

	json_array_append_new(s.rekeyed, json_pack("{s:o,s:o,s:o,s:o}",
	    "business_key", text(f[REKEYED_BUSINESS_KEY]), "keys", json_field(f[REKEYED_KEYS]),
	    "calls", json_field(f[REKEYED_CALLS]), "effects", number_or_text(f[REKEYED_EFFECTS])));
}

/* The pending check of one business key, as count-effects made it. */
static void
read_pending_call(struct idem_tsv_reader *r)
{
	char **f = r->fields;

	json_array_append_new(s.pending_calls, json_pack("{s:o,s:b,s:o,s:o,s:o}",
	    "business_key", text(f[PENDING_CALL_BUSINESS_KEY]),
	    "killed", strcmp(f[PENDING_CALL_KILLED], "yes") == 0,
	    "rows", number_or_text(f[PENDING_CALL_ROWS]), "owner", text(f[PENDING_CALL_OWNER]),
	    "result", text(f[PENDING_CALL_RESULT])));
}

static void
read_job(struct idem_tsv_reader *r)
{
	if (++s.jobs <= SAMPLE_JOBS || r->fields[JOB_SCENARIO] != NULL)
		list_job(r->fields[JOB_ID]);
	if (s.jobs == ALL_JOBS + 1)
		spill_evidence();
}

static void
read_publish(struct idem_tsv_reader *r)
{
	const char *copy = r->fields[PUBLISH_COPY];

	if (copy && strcmp(copy, "0") != 0) {
		s.copies++;
		list_job(r->fields[PUBLISH_JOB_ID]);
	}
}

static void
read_attempt(struct idem_tsv_reader *r)
{
	int acked = r->fields[ATTEMPT_ACKED_AT] != NULL;
	int retry = idem_tsv_number(r, ATTEMPT_ATTEMPT, 1) > 1;

	s.all_attempts++;
	s.acked += acked;
	s.not_acked += !acked;
	s.retried += retry;
	if (!acked || retry)
		list_job(r->fields[ATTEMPT_JOB_ID]);
}

static void
read_log(struct idem_tsv_reader *r)
{
	const char *line = r->fields[LOG_LINE];

	if (line && strncmp(line, FINDING, strlen(FINDING)) == 0)
		json_array_append_new(s.findings, json_string(line + 9));
}

static void
read_query(struct idem_tsv_reader *r)
{
	char **f = r->fields;

	if (f[1] && strcmp(f[1], "after") == 0 && f[2])
		json_object_set_new(s.queries, f[2], text(f[3]));
}

/* The probe of the effect table, or of the declared guard's table. */
static void
read_probe(struct idem_tsv_reader *r)
{
	char **f = r->fields;
	json_t *probe = json_pack("{s:o,s:o,s:o,s:o}", "result", text(f[PROBE_RESULT]),
	    "sqlstate", text(f[PROBE_SQLSTATE]), "message", text(f[PROBE_MESSAGE]),
	    "sql", text(f[PROBE_SQL]));

	if (f[PROBE_TABLE] != NULL && s.declared_guard != NULL) {
		json_object_set_new(s.declared_guard, "probe", probe);
		return;
	}
	json_decref(s.probe);
	s.probe = probe;
}

static void
read_declared_guard(struct idem_tsv_reader *r)
{
	s.declared_guard = json_pack("{s:s,s:o,s:n}", "table", r->fields[DECLARED_GUARD_TABLE],
	    "key", json_loads(r->fields[DECLARED_GUARD_KEY_COLUMNS], 0, NULL), "probe");
}

/* The worker as kill-at ran it: for the seed's command run as
 * /bin/sh -c "exec COMMAND", the command is COMMAND. */
static void
read_worker(struct idem_tsv_reader *r)
{
	char **f = r->fields;
	json_t *argv = json_loads(f[WORKER_ARGV], 0, NULL);
	const char *last = json_string_value(json_array_get(argv, 2));
	const char *shell_text = NULL;

	if (json_array_size(argv) == 3 &&
	    strcmp(json_string_value(json_array_get(argv, 0)), "/bin/sh") == 0 &&
	    strcmp(json_string_value(json_array_get(argv, 1)), "-c") == 0 &&
	    strncmp(last, "exec ", 5) == 0)
		shell_text = last + 5;
	json_decref(s.worker);
	s.worker = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "argv", argv,
	    "words", shell_text ? idem_run_words(shell_text) : json_incref(argv),
	    "executable", text(f[WORKER_EXECUTABLE]), "executable_sha256",
	    text(f[WORKER_EXECUTABLE_SHA256]), "script", text(f[WORKER_SCRIPT]),
	    "script_sha256", text(f[WORKER_SCRIPT_SHA256]));
}

/* The baseline row of kill-at: the jobs in no fault, run first; when it
 * failed, no fault was forced, and the summary says so with its counts. */
static void
read_baseline(struct idem_tsv_reader *r)
{
	char **f = r->fields;

	s.baseline = json_pack("{s:s,s:o,s:o,s:o,s:{s:o,s:o},s:o,s:o}", "result", f[BASELINE_RESULT],
	    "jobs", number_or_text(f[BASELINE_JOBS]), "messages", number_or_text(f[BASELINE_MESSAGES]),
	    "unacked", number_or_text(f[BASELINE_UNACKED]), "effects",
	    "expected", number_or_text(f[BASELINE_EXPECTED]),
	    "observed", number_or_text(f[BASELINE_OBSERVED]),
	    "duplicates", number_or_text(f[BASELINE_DUPLICATES]),
	    "missing", number_or_text(f[BASELINE_MISSING]));
	if (strcmp(f[BASELINE_RESULT], "failed") == 0)
		json_object_set_new(s.baseline, "summary", json_sprintf("baseline failed: %s of %s "
		    "effects, %s duplicate, %s missing, %s of %s messages unacked; no fault was forced",
		    f[BASELINE_OBSERVED], f[BASELINE_EXPECTED], f[BASELINE_DUPLICATES],
		    f[BASELINE_MISSING], f[BASELINE_UNACKED], f[BASELINE_MESSAGES]));
}

/* The sandbox account: what it held while the setup ran and at the end
 * of the run, read from the catalog, and what it could not do; what it
 * held beyond its list, and what it could do that it may not, are its
 * findings. */
static void
read_account(struct idem_tsv_reader *r)
{
	char **f = r->fields, *finding;
	json_t *a = s.account;

	if (a == NULL)
		a = s.account = json_pack("{s:s,s:[],s:[],s:[],s:[]}", "role", f[GRANT_ROLE], "setup",
		    "held", "denied", "findings");
	if ((finding = idem_role_finding(r->kind, f)) != NULL) {
		json_array_append_new(json_object_get(a, "findings"), json_string(finding));
		free(finding);
	}
	if (r->kind == IDEM_KIND_DENIED) {
		json_array_append_new(json_object_get(a, "denied"), json_pack("{s:s,s:s,s:b}",
		    "object", f[DENIED_OBJECT], "privilege", f[DENIED_PRIVILEGE], "held",
		    strcmp(f[DENIED_HELD], "yes") == 0));
		return;
	}
	if (strcmp(f[GRANT_PHASE], "setup") == 0) {
		json_array_append_new(json_object_get(a, "setup"), json_pack("{s:s,s:s,s:s}",
		    "type", f[GRANT_TYPE], "object", f[GRANT_OBJECT], "privilege", f[GRANT_PRIVILEGE]));
		return;
	}
	json_array_append_new(json_object_get(a, "held"), json_pack("{s:s,s:s,s:s,s:b}",
	    "type", f[GRANT_TYPE], "object", f[GRANT_OBJECT], "privilege", f[GRANT_PRIVILEGE],
	    "listed", strcmp(f[GRANT_LISTED], "yes") == 0));
}

/* The database the run reached, as the first program to reach it read
 * it. */
static void
read_database(struct idem_tsv_reader *r)
{
	char **f = r->fields;

	s.database = json_pack("{s:s,s:s,s:s,s:o,s:s}", "sandbox_id", f[DATABASE_SANDBOX_ID],
	    "dbname", f[DATABASE_DBNAME], "server_version", f[DATABASE_SERVER_VERSION],
	    "server_version_num", idem_run_number(f[DATABASE_SERVER_VERSION_NUM]),
	    "isolation", f[DATABASE_ISOLATION]);
}

static void
read_measure(struct idem_tsv_reader *r)
{
	json_t *m = row_object(r->fields, measure_keys);

	json_object_set_new(m, "window", json_pack("{s:o,s:o}", "start",
	    text(r->fields[MEASURE_WINDOW_START]), "end", text(r->fields[MEASURE_WINDOW_END])));
	json_array_append_new(s.measures, m);
}

static void
read_digest(struct idem_tsv_reader *r)
{
	if (r->fields[1])
		json_object_set_new(s.digests, r->fields[1], text(r->fields[2]));
}

/*
 * What the first pass keeps of each kind of row. The rows the record
 * lists as they are join their list, each field under its key, and may
 * name a job that a volume record lists; the others have a reader of
 * their own. The rows of the other kinds (step) it only copies.
 */
static const struct reader {
	json_t **list;
	const char *const *keys;
	size_t job;		/* the field naming the job, or 0 */
	void (*read)(struct idem_tsv_reader *r);
} readers[IDEM_KIND_COUNT] = {
	[IDEM_KIND_SEED] = { .read = read_seed },
	[IDEM_KIND_QUEUE] = { .read = read_queue },
	[IDEM_KIND_EXPECT] = { .read = read_expect },
	[IDEM_KIND_EXTERNAL] = { .read = read_external },
	[IDEM_KIND_CALL] = { &s.calls, call_keys, 0, NULL },
	[IDEM_KIND_FORGOT] = { &s.forgot, forgot_keys, 0, NULL },
	[IDEM_KIND_REKEYED] = { .read = read_rekeyed },
	[IDEM_KIND_PENDING_CALL] = { .read = read_pending_call },
	[IDEM_KIND_SCENARIO] = { &s.scenarios, scenario_keys, 0, NULL },
	[IDEM_KIND_JOB] = { .read = read_job },
	[IDEM_KIND_PUBLISH] = { .read = read_publish },
	[IDEM_KIND_KILL] = { &s.kills, kill_keys, KILL_JOB_ID, NULL },
	[IDEM_KIND_ATTEMPT] = { .read = read_attempt },
	[IDEM_KIND_MISSED] = { &s.missed, missed_keys, MISSED_JOB_ID, NULL },
	[IDEM_KIND_STALL] = { &s.stalls, stall_keys, STALL_JOB_ID, NULL },
	[IDEM_KIND_LEASE] = { &s.leases, lease_keys, LEASE_JOB_ID, NULL },
	[IDEM_KIND_RECOVER] = { &s.recovers, recover_keys, 0, NULL },
	[IDEM_KIND_LOG] = { .read = read_log },
	[IDEM_KIND_QUERY] = { .read = read_query },
	[IDEM_KIND_GUARD] = { &s.guards, guard_keys, 0, NULL },
	[IDEM_KIND_PROBE] = { .read = read_probe },
	[IDEM_KIND_DECLARED_GUARD] = { .read = read_declared_guard },
	[IDEM_KIND_WORKER] = { .read = read_worker },
	[IDEM_KIND_BASELINE] = { .read = read_baseline },
	[IDEM_KIND_GRANT] = { .read = read_account },
	[IDEM_KIND_DENIED] = { .read = read_account },
	[IDEM_KIND_DATABASE] = { .read = read_database },
	[IDEM_KIND_MEASURE] = { .read = read_measure },
	[IDEM_KIND_DIGEST] = { .read = read_digest },
};

static void
read_row(struct idem_tsv_reader *r)
{
	const struct reader *rd;

	if (r->kind == IDEM_KIND_UNKNOWN)
		return;
	rd = &readers[r->kind];
	if (rd->job != 0)
		list_job(r->fields[rd->job]);
	if (rd->list != NULL)
		json_array_append_new(*rd->list, row_object(r->fields, rd->keys));
	if (rd->read != NULL)
		rd->read(r);
}

/*
 * The first pass: reads the stream, keeps what the record holds whatever
 * the run's size, and copies every row but the job rows (which hold the
 * payloads) to the evidence.
 */
static void
read_stream(FILE *in, const char *name)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	size_t kind;
	int rc;

	for (kind = 0; kind < IDEM_KIND_COUNT; kind++)
		if (readers[kind].list != NULL)
			*readers[kind].list = json_array();
	s.findings = json_array();
	s.measures = json_array();
	s.attempts = json_array();
	s.rekeyed = json_array();
	s.pending_calls = json_array();
	s.published_at = json_object();
	s.queries = json_object();
	s.digests = json_object();
	idem_tsv_reader_init(&r, in, name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		if (rc < 0)
			idem_die_error(&err);
		if ((rc == IDEM_TSV_HEADER || (rc == IDEM_TSV_ROW && r.kind != IDEM_KIND_JOB)) &&
		    idem_tsv_pass(ev.file, &r) < 0)
			idem_die(IDEM_EXIT_ENV, "%s:", *ev.tmp ? ev.tmp : "memory");
		if (rc != IDEM_TSV_ROW)
			continue;
		s.evidence_rows += r.kind != IDEM_KIND_JOB;
		read_row(&r);
	}
	idem_tsv_reader_free(&r);
}

/* A branch line of the log, under its job and attempt. */
static void
add_log(const char *line)
{
	char *job = idem_log_value(line, "job"), *attempt = idem_log_value(line, "attempt");
	char *msg_id = idem_log_value(line, "msg_id"), *key;
	json_t *lines;

	if (job != NULL && attempt != NULL && listed(job)) {
		if (asprintf(&key, "%s\t%s", job, attempt) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if ((lines = json_object_get(s.logs_of, key)) == NULL)
			json_object_set_new(s.logs_of, key, lines = json_array());
		json_array_append_new(lines, json_pack("[o,s]", text(msg_id), line));
		free(key);
	}
	free(job);
	free(attempt);
	free(msg_id);
}

static void
add_attempt(char **f)
{
	json_array_append_new(s.attempts, row_object(f, attempt_keys));
}

/* A count row: all of them, or in a volume record the totals and the
 * rows of the after phase that differ from what was expected. */
static void
add_count(char **f)
{
	int before = f[COUNT_PHASE] && strcmp(f[COUNT_PHASE], "before") == 0;
	int total = f[COUNT_SCOPE] && strcmp(f[COUNT_SCOPE], "total") == 0;

	if (idem_run_volume(&s) && !total && (before || (f[COUNT_EXPECTED] && f[COUNT_OBSERVED] &&
	    strcmp(f[COUNT_EXPECTED], f[COUNT_OBSERVED]) == 0)))
		return;
	json_array_append_new(before ? s.counts_before : s.counts_after,
	    json_pack("{s:o,s:o,s:o,s:o}", "scope", text(f[COUNT_SCOPE]),
	    "key", text(f[COUNT_KEY]), "expected", number_or_text(f[COUNT_EXPECTED]),
	    "observed", number_or_text(f[COUNT_OBSERVED])));
}

/* A span or span_lost row of a job listed, for the trace; a row that
 * does not keep its kind's format is left out of it, with a warning. */
static void
add_span(const struct idem_tsv_reader *r)
{
	struct idem_error err;

	if (idem_trace_read_row(s.spans, r->line, listed, &err) < 0)
		idem_warn("%s:%ld: %s: left out of the trace", r->name, r->line_no, err.text);
}

/*
 * The second pass, over the evidence file the first wrote: the attempts
 * the record lists, with their publish times and branch lines, and the
 * count rows.
 */
static void
read_evidence(const char *stream_name)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	FILE *in;
	int rc;

	s.counts_before = json_array();
	s.counts_after = json_array();
	s.logs_of = json_object();
	s.spans = idem_trace_spans_new();
	if (!idem_run_volume(&s))
		in = fmemopen(ev.mem, ev.mem_len, "r");
	else if ((in = idem_record_file_open(ev.tmp, "r", &err)) == NULL)
		idem_die_error(&err);
	if (in == NULL)
		idem_die(IDEM_EXIT_ENV, "fmemopen:");
	idem_tsv_reader_init(&r, in, idem_run_volume(&s) ? ev.tmp : stream_name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		char **f = r.fields;

		if (rc < 0)
			idem_die_error(&err);
		if (rc != IDEM_TSV_ROW)
			continue;
		if (r.kind == IDEM_KIND_PUBLISH && f[PUBLISH_MSG_ID] && f[PUBLISH_PUBLISHED_AT] &&
		    listed(f[PUBLISH_JOB_ID]))
			json_object_set_new(s.published_at, f[PUBLISH_MSG_ID],
			    json_string(f[PUBLISH_PUBLISHED_AT]));
		else if (r.kind == IDEM_KIND_ATTEMPT && listed(f[ATTEMPT_JOB_ID]))
			add_attempt(f);
		else if (r.kind == IDEM_KIND_LOG && f[LOG_LINE] && strstr(f[LOG_LINE], "branch="))
			add_log(f[LOG_LINE]);
		else if (r.kind == IDEM_KIND_COUNT_ROW)
			add_count(f);
		else
			add_span(&r);
	}
	idem_tsv_reader_free(&r);
	fclose(in);
	if (json_array_size(s.counts_after) == 0)
		idem_die(IDEM_EXIT_USAGE, "%s: no count rows after the run: end the pipeline with "
		    "count-effects before mkrecord", stream_name);
}

/* The evidence, kept as the stream is read, then read again: from
 * memory, or for a volume record from its file in dir. */
const struct idem_run *
idem_run_read(FILE *in, const char *name, const char *dir)
{
	snprintf(ev.dir, sizeof(ev.dir), "%s", dir);
	if ((ev.file = open_memstream(&ev.mem, &ev.mem_len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	idem_map_init(&listed_jobs);
	read_stream(in, name);
	if (fclose(ev.file) != 0)
		idem_die(IDEM_EXIT_ENV, "%s:", idem_run_volume(&s) ? ev.tmp : "memory");
	if (idem_run_volume(&s) && idem_sha256_file(ev.tmp, s.evidence_sha256) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", ev.tmp);
	read_evidence(name);
	free(ev.mem);
	ev.mem = NULL;
	return &s;
}
