/* mkrecord: turn a whole rehearsal stream into the record (YAML, see
 * idem-record(5)) and its handoff (Markdown), sign the record with an
 * OpenSSH ed25519 key, and commit both with a signed commit. */
#include <sys/stat.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "approve.h"
#include "git.h"
#include "handoff.h"
#include "map.h"
#include "path.h"
#include "seed.h"
#include "sig.h"
#include "sign.h"
#include "template.h"
#include "timeline.h"
#include "tsv.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "record.h"
#include "yamljson.h"
#include "embed.h"

EMBED(idem_tpl_handoff, "templates/handoff.md");
extern const char idem_tpl_handoff[];

static const char synopsis[] =
	"usage: mkrecord [-o dir] [-k key] [-c] [-r reproduce] [-n next-review]\n"
	"                [-w cause=duration] [-f format] [--allow-dirty] [file]\n"
	"       mkrecord --approve record -k key [-c]\n";

/* kill-at's note for a kill point that cannot happen (kill-at(1), kill) */
#define FINDING "kill-at: ack in the effect's transaction: "

struct log_entry {
	char *job, *attempt, *msg_id, *line;
};

static struct {
	json_t *seed, *expect, *scenarios, *published_at, *kills, *attempts, *recovers, *findings;
	json_t *counts_before, *counts_after, *guards, *probe, *measures, *queries, *digests;
	json_t *queue;		/* the queue row's kind, name and version, or NULL */
	json_t *external;	/* the external row, or NULL */
	json_t *calls;		/* the call rows, in order */
	json_t *missed;		/* the kill points and races the run did not reach */
	json_t *expected_verdict;	/* the expect row's verdict, or NULL */
	json_t *worker;		/* the worker row, or NULL */
	json_t *declared_guard;	/* the declared_guard row and its probe, or NULL */
	json_t *logs_of;	/* "job<TAB>attempt": its branch lines, [msg_id, line] */
	json_t *baseline;	/* the baseline row, or NULL */
	json_t *account;	/* the grant and denied rows, or NULL */
	long long jobs, copies;
	/* the attempts of the stream: all of them, acked, not acked, and
	 * deliveries after the first */
	long long all_attempts, acked, not_acked, retried;
	/* the jobs whose attempts a volume record lists: the first
	 * SAMPLE_JOBS, those of a scenario, and those killed, retried,
	 * published more than once or left not acked */
	struct idem_map listed;
	/* the rows of the evidence file: in memory, until the job rows show a
	 * volume record, then in the file, compressed */
	FILE *evidence;
	char *evidence_mem;
	size_t evidence_mem_len;
	char evidence_dir[PATH_MAX];
	char evidence_tmp[PATH_MAX];	/* the evidence file, until published */
	char evidence_sha256[65];
	long long evidence_rows;
} s;

/* A record lists every attempt and count row of a run of at most
 * ALL_JOBS jobs; past that it is a volume record (idem-record(5)). */
#define ALL_JOBS 1000
#define SAMPLE_JOBS 100

static int
volume(void)
{
	return s.jobs > ALL_JOBS;
}

static void
list_job(const char *job)
{
	if (job != NULL && idem_map_get(&s.listed, job) == IDEM_MAP_NONE)
		idem_map_put(&s.listed, job, 0);
}

static int
listed(const char *job)
{
	return !volume() || (job != NULL && idem_map_get(&s.listed, job) != IDEM_MAP_NONE);
}

/* The evidence file is never left behind by a run that fails: its
 * temporary name goes at exit, and so does the name it was published
 * under until the record is complete. */
static char evidence_path[PATH_MAX], evidence_made[PATH_MAX];
static int evidence_kept;

static void
remove_evidence_tmp(void)
{
	if (*s.evidence_tmp)
		unlink(s.evidence_tmp);
	if (*evidence_made && !evidence_kept)
		unlink(evidence_made);
}

/* Links the evidence file as dir/evidence/SHA256.tsv.gz: a file of that
 * name holds the same bytes already, and stays. */
static void
publish_evidence(const char *dir)
{
	char sub[PATH_MAX], path[PATH_MAX];
	struct idem_error err;

	if (snprintf(sub, sizeof(sub), "%s/evidence", dir) >= (int)sizeof(sub) ||
	    snprintf(path, sizeof(path), "%s/%s.tsv.gz", sub, s.evidence_sha256) >= (int)sizeof(path))
		idem_die(IDEM_EXIT_USAGE, "%s/evidence: path too long", dir);
	if (mkdir(sub, 0755) < 0 && errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", sub);
	if (idem_fsync_path(s.evidence_tmp, &err) < 0)
		idem_die_error(&err);
	if (link(s.evidence_tmp, path) == 0)
		strcpy(evidence_made, path);
	else if (errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", path);
	strcpy(evidence_path, path);
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

/* The probe of the effect table, or of the declared guard's table. */
static void
read_probe(char **f)
{
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

/* The words of a command: the shell's command text split at blanks. */
static json_t *
words_of(const char *command)
{
	json_t *words = json_array();
	char *copy = idem_estrdup(command), *word, *save;

	for (word = strtok_r(copy, " \t\n", &save); word; word = strtok_r(NULL, " \t\n", &save))
		json_array_append_new(words, json_string(word));
	free(copy);
	return words;
}

/* The worker as kill-at ran it: for the seed's command run as
 * /bin/sh -c "exec COMMAND", the command is COMMAND. */
/* The sandbox account: what it held while the setup ran and at the end
 * of the run, read from the catalog, and what it could not do; what it
 * held beyond its list, and what it could do that it may not, are its
 * findings. */
static void
account_row(enum idem_kind kind, char **f)
{
	json_t *a = s.account;

	if (a == NULL)
		a = s.account = json_pack("{s:s,s:[],s:[],s:[],s:[]}", "role", f[GRANT_ROLE], "setup",
		    "held", "denied", "findings");
	if (kind == IDEM_KIND_DENIED) {
		int held = strcmp(f[DENIED_HELD], "yes") == 0;

		json_array_append_new(json_object_get(a, "denied"), json_pack("{s:s,s:s,s:b}",
		    "object", f[DENIED_OBJECT], "privilege", f[DENIED_PRIVILEGE], "held", held));
		if (held)
			json_array_append_new(json_object_get(a, "findings"), json_sprintf("could %s%s%s, "
			    "which it may not", f[DENIED_PRIVILEGE], *f[DENIED_OBJECT] ? " " : "",
			    f[DENIED_OBJECT]));
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
	if (strcmp(f[GRANT_LISTED], "no") == 0)
		json_array_append_new(json_object_get(a, "findings"), *f[GRANT_OBJECT] ?
		    json_sprintf("held %s on %s %s, beyond its list", f[GRANT_PRIVILEGE], f[GRANT_TYPE],
		    f[GRANT_OBJECT]) : json_sprintf("held %s %s, beyond its list", f[GRANT_TYPE],
		    f[GRANT_PRIVILEGE]));
}

/* The baseline row of kill-at: the jobs in no fault, run first; when it
 * failed, no fault was forced, and the summary says so with its counts. */
static json_t *
baseline_of(char **f)
{
	json_t *b = json_pack("{s:s,s:o,s:o,s:o,s:{s:o,s:o},s:o,s:o}", "result", f[BASELINE_RESULT],
	    "jobs", number_or_text(f[BASELINE_JOBS]), "messages", number_or_text(f[BASELINE_MESSAGES]),
	    "unacked", number_or_text(f[BASELINE_UNACKED]), "effects",
	    "expected", number_or_text(f[BASELINE_EXPECTED]),
	    "observed", number_or_text(f[BASELINE_OBSERVED]),
	    "duplicates", number_or_text(f[BASELINE_DUPLICATES]),
	    "missing", number_or_text(f[BASELINE_MISSING]));

	if (strcmp(f[BASELINE_RESULT], "failed") == 0)
		json_object_set_new(b, "summary", json_sprintf("baseline failed: %s of %s effects, "
		    "%s duplicate, %s missing, %s of %s messages unacked; no fault was forced",
		    f[BASELINE_OBSERVED], f[BASELINE_EXPECTED], f[BASELINE_DUPLICATES],
		    f[BASELINE_MISSING], f[BASELINE_UNACKED], f[BASELINE_MESSAGES]));
	return b;
}

static void
read_worker(char **f)
{
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
	    "words", shell_text ? words_of(shell_text) : json_incref(argv),
	    "executable", text(f[WORKER_EXECUTABLE]), "executable_sha256",
	    text(f[WORKER_EXECUTABLE_SHA256]), "script", text(f[WORKER_SCRIPT]),
	    "script_sha256", text(f[WORKER_SCRIPT_SHA256]));
}

/* The rows so far, from memory to the evidence file, which takes the
 * rows that follow: a record of this many jobs is a volume record. */
static void
spill_evidence(void)
{
	struct idem_error err;
	FILE *file;
	int fd;

	if (snprintf(s.evidence_tmp, sizeof(s.evidence_tmp), "%s/.mkrecord-XXXXXX",
	    s.evidence_dir) >= (int)sizeof(s.evidence_tmp))
		idem_die(IDEM_EXIT_USAGE, "%s: path too long", s.evidence_dir);
	if (mkdir(s.evidence_dir, 0755) < 0 && errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", s.evidence_dir);
	if ((fd = mkstemp(s.evidence_tmp)) < 0) {
		*s.evidence_tmp = '\0';
		idem_die(IDEM_EXIT_ENV, "%s:", s.evidence_dir);
	}
	atexit(remove_evidence_tmp);
	if (fchmod(fd, 0644) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", s.evidence_tmp);
	close(fd);
	if ((file = idem_record_file_open(s.evidence_tmp, "w", &err)) == NULL)
		idem_die_error(&err);
	if (fclose(s.evidence) != 0 ||
	    fwrite(s.evidence_mem, 1, s.evidence_mem_len, file) != s.evidence_mem_len)
		idem_die(IDEM_EXIT_ENV, "%s:", s.evidence_tmp);
	free(s.evidence_mem);
	s.evidence_mem = NULL;
	s.evidence = file;
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
	int rc;

	s.scenarios = json_array();
	s.published_at = json_object();
	s.kills = json_array();
	s.findings = json_array();
	s.attempts = json_array();
	s.recovers = json_array();
	s.guards = json_array();
	s.measures = json_array();
	s.queries = json_object();
	s.digests = json_object();
	s.calls = json_array();
	s.missed = json_array();
	idem_tsv_reader_init(&r, in, name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		char **f = r.fields;

		if (rc < 0)
			idem_die_error(&err);
		if ((rc == IDEM_TSV_HEADER || (rc == IDEM_TSV_ROW && r.kind != IDEM_KIND_JOB)) &&
		    idem_tsv_pass(s.evidence, &r) < 0)
			idem_die(IDEM_EXIT_ENV, "%s:", *s.evidence_tmp ? s.evidence_tmp : "memory");
		if (rc != IDEM_TSV_ROW)
			continue;
		s.evidence_rows += r.kind != IDEM_KIND_JOB;
		switch (r.kind) {
		case IDEM_KIND_SEED: {
			json_t *o = json_object();
			size_t i;

			for (i = 1; i <= idem_kind_nfields(IDEM_KIND_SEED); i++)
				json_object_set_new(o, idem_kind_field_name(IDEM_KIND_SEED, i), text(f[i]));
			s.seed = o;
			break;
		}
		case IDEM_KIND_QUEUE:
			s.queue = json_pack("{s:o,s:o,s:o}", "kind", text(f[QUEUE_KIND]),
			    "name", text(f[QUEUE_NAME]), "version", text(f[QUEUE_VERSION]));
			break;
		case IDEM_KIND_EXPECT:
			s.expect = json_pack("{s:o,s:o,s:o,s:o,s:o}", "effects", number_or_text(f[1]),
			    "duplicates", number_or_text(f[2]), "missing", number_or_text(f[3]),
			    "pending", number_or_text(f[4]), "external", number_or_text(f[EXPECT_EXTERNAL]));
			s.expected_verdict = text(f[EXPECT_VERDICT]);
			break;
		case IDEM_KIND_EXTERNAL: {
			json_t *key = json_loads(f[EXTERNAL_KEY_FIELDS], 0, NULL);

			/* the reader checked it is an array of one or more strings */
			s.external = json_pack("{s:o,s:o,s:b,s:o,s:o}", "name", text(f[EXTERNAL_NAME]),
			    "key", key, "honours_idempotency_key",
			    strcmp(f[EXTERNAL_HONOURS_IDEMPOTENCY_KEY], "true") == 0,
			    "pending_table", text(f[EXTERNAL_PENDING_TABLE]),
			    "pending_owner", text(f[EXTERNAL_PENDING_OWNER]));
			break;
		}
		case IDEM_KIND_CALL:
			json_array_append_new(s.calls, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
			    "at", text(f[CALL_AT]), "worker", number_or_text(f[CALL_WORKER]),
			    "pid", number_or_text(f[CALL_PID]), "method", text(f[CALL_METHOD]),
			    "path", text(f[CALL_PATH]), "idempotency_key", text(f[CALL_IDEMPOTENCY_KEY]),
			    "body_sha256", text(f[CALL_BODY_SHA256]),
			    "business_key", text(f[CALL_BUSINESS_KEY]), "status", number_or_text(f[CALL_STATUS]),
			    "answer", text(f[CALL_ANSWER]), "effect", text(f[CALL_EFFECT]),
			    "response_id", text(f[CALL_RESPONSE_ID])));
			break;
		case IDEM_KIND_SCENARIO:
			json_array_append_new(s.scenarios, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}",
			    "name", text(f[1]), "fault", text(f[2]), "step", text(f[3]),
			    "attempt", number_or_text(f[4]), "duplicates", number_or_text(f[5]),
			    "within_ms", number_or_text(f[6])));
			break;
		case IDEM_KIND_JOB:
			if (++s.jobs <= SAMPLE_JOBS || f[JOB_SCENARIO] != NULL)
				list_job(f[JOB_ID]);
			if (s.jobs == ALL_JOBS + 1)
				spill_evidence();
			break;
		case IDEM_KIND_PUBLISH:
			if (f[PUBLISH_COPY] && strcmp(f[PUBLISH_COPY], "0") != 0) {
				s.copies++;
				list_job(f[PUBLISH_JOB_ID]);
			}
			break;
		case IDEM_KIND_KILL:
			list_job(f[KILL_JOB_ID]);
			json_array_append_new(s.kills, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
			    "scenario", text(f[1]), "job", text(f[2]), "attempt", number_or_text(f[3]),
			    "step", text(f[4]), "pid", number_or_text(f[5]), "killed_at", text(f[6]),
			    "observed", text(f[KILL_OBSERVED])));
			break;
		case IDEM_KIND_ATTEMPT:
			s.all_attempts++;
			s.acked += f[ATTEMPT_ACKED_AT] != NULL;
			s.not_acked += f[ATTEMPT_ACKED_AT] == NULL;
			s.retried += idem_tsv_number(&r, ATTEMPT_ATTEMPT, 1) > 1;
			if (f[ATTEMPT_ACKED_AT] == NULL || idem_tsv_number(&r, ATTEMPT_ATTEMPT, 1) > 1)
				list_job(f[ATTEMPT_JOB_ID]);
			break;
		case IDEM_KIND_MISSED:
			list_job(f[MISSED_JOB_ID]);
			json_array_append_new(s.missed, json_pack("{s:o,s:o,s:o,s:o,s:o}",
			    "what", text(f[MISSED_WHAT]), "scenario", text(f[MISSED_SCENARIO]),
			    "job", text(f[MISSED_JOB_ID]), "attempt", number_or_text(f[MISSED_ATTEMPT]),
			    "step", text(f[MISSED_STEP])));
			break;
		case IDEM_KIND_RECOVER:
			json_array_append_new(s.recovers, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}",
			    "job", text(f[1]), "msg_id", message_id(f[2]), "msg", text(f[2]),
			    "killed_at", text(f[3]),
			    "acked_at", text(f[4]), "recovery_ms", number_or_text(f[5])));
			break;
		case IDEM_KIND_LOG:
			if (f[LOG_LINE] && strncmp(f[LOG_LINE], FINDING, strlen(FINDING)) == 0)
				json_array_append_new(s.findings, json_string(f[LOG_LINE] + 9));
			break;
		case IDEM_KIND_QUERY:
			if (f[1] && strcmp(f[1], "after") == 0 && f[2])
				json_object_set_new(s.queries, f[2], text(f[3]));
			break;
		case IDEM_KIND_GUARD:
			json_array_append_new(s.guards, json_pack("{s:o,s:o,s:o,s:o,s:o}", "kind", text(f[1]),
			    "name", text(f[2]), "definition", text(f[3]), "flags", text(f[4]),
			    "table", text(f[GUARD_TABLE])));
			break;
		case IDEM_KIND_PROBE:
			read_probe(f);
			break;
		case IDEM_KIND_DECLARED_GUARD:
			s.declared_guard = json_pack("{s:s,s:o,s:n}", "table", f[DECLARED_GUARD_TABLE],
			    "key", json_loads(f[DECLARED_GUARD_KEY_COLUMNS], 0, NULL), "probe");
			break;
		case IDEM_KIND_WORKER:
			read_worker(f);
			break;
		case IDEM_KIND_BASELINE:
			s.baseline = baseline_of(f);
			break;
		case IDEM_KIND_GRANT:
		case IDEM_KIND_DENIED:
			account_row(r.kind, f);
			break;
		case IDEM_KIND_MEASURE:
			json_array_append_new(s.measures, json_pack("{s:o,s:o,s:o,s:o,s:o,s:{s:o,s:o}}",
			    "name", text(f[1]), "value", text(f[2]), "numerator", number_or_text(f[3]),
			    "denominator", number_or_text(f[4]), "unit", text(f[5]),
			    "window", "start", text(f[6]), "end", text(f[7])));
			break;
		case IDEM_KIND_DIGEST:
			if (f[1])
				json_object_set_new(s.digests, f[1], text(f[2]));
			break;
		default:
			break;
		}
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

/*
 * The second pass, over the evidence file the first wrote: the attempts
 * the record lists, with their publish times and branch lines, and the
 * count rows: all of them, or in a volume record the totals and the rows
 * of the after phase that differ from what was expected.
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
	if (!volume())
		in = fmemopen(s.evidence_mem, s.evidence_mem_len, "r");
	else if ((in = idem_record_file_open(s.evidence_tmp, "r", &err)) == NULL)
		idem_die_error(&err);
	if (in == NULL)
		idem_die(IDEM_EXIT_ENV, "fmemopen:");
	idem_tsv_reader_init(&r, in, volume() ? s.evidence_tmp : stream_name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		char **f = r.fields;

		if (rc < 0)
			idem_die_error(&err);
		if (rc != IDEM_TSV_ROW)
			continue;
		switch (r.kind) {
		case IDEM_KIND_PUBLISH:
			if (f[PUBLISH_MSG_ID] && f[PUBLISH_PUBLISHED_AT] && listed(f[PUBLISH_JOB_ID]))
				json_object_set_new(s.published_at, f[PUBLISH_MSG_ID],
				    json_string(f[PUBLISH_PUBLISHED_AT]));
			break;
		case IDEM_KIND_ATTEMPT:
			if (!listed(f[ATTEMPT_JOB_ID]))
				break;
			json_array_append_new(s.attempts, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
			    "job", text(f[1]), "msg_id", message_id(f[2]), "msg", text(f[2]),
			    "attempt", number_or_text(f[3]),
			    "pid", number_or_text(f[4]), "consumed_at", text(f[5]), "committed_at", text(f[6]),
			    "acked_at", text(f[7]), "rows_written", number_or_text(f[8]), "branch", text(f[9]),
			    "written_at", text(f[ATTEMPT_WRITTEN_AT]),
			    "rows_updated", number_or_text(f[ATTEMPT_ROWS_UPDATED])));
			break;
		case IDEM_KIND_LOG:
			if (f[LOG_LINE] && strstr(f[LOG_LINE], "branch="))
				add_log(f[LOG_LINE]);
			break;
		case IDEM_KIND_COUNT_ROW: {
			int before = f[COUNT_PHASE] && strcmp(f[COUNT_PHASE], "before") == 0;
			int total = f[COUNT_SCOPE] && strcmp(f[COUNT_SCOPE], "total") == 0;

			if (volume() && !total && (before || (f[COUNT_EXPECTED] && f[COUNT_OBSERVED] &&
			    strcmp(f[COUNT_EXPECTED], f[COUNT_OBSERVED]) == 0)))
				break;
			json_array_append_new(before ? s.counts_before : s.counts_after,
			    json_pack("{s:o,s:o,s:o,s:o}", "scope", text(f[COUNT_SCOPE]),
			    "key", text(f[COUNT_KEY]), "expected", number_or_text(f[COUNT_EXPECTED]),
			    "observed", number_or_text(f[COUNT_OBSERVED])));
			break;
		}
		default:
			break;
		}
	}
	idem_tsv_reader_free(&r);
	fclose(in);
	if (json_array_size(s.counts_after) == 0)
		idem_die(IDEM_EXIT_USAGE, "%s: no count rows after the run: end the pipeline with "
		    "count-effects before mkrecord", stream_name);
}

static const char *
seed_field(const char *name)
{
	return json_string_value(json_object_get(s.seed, name));
}

/* The queue: the queue row's, else the seed row's, whose version is not
 * known. */
static json_t *
queue(void)
{
	if (s.queue != NULL)
		return json_incref(s.queue);
	return json_pack("{s:s,s:o,s:n}", "kind", seed_field("queue_kind") ?
	    seed_field("queue_kind") : "idem", "name", text(seed_field("queue")), "version");
}

static json_t *
seed_json_field(const char *name)
{
	const char *v = seed_field(name);
	json_t *j = v ? json_loads(v, 0, NULL) : NULL;

	return j ? j : json_array();
}

/* The log lines of one attempt: those naming its job, attempt and message. */
static json_t *
log_of(const char *job, long long attempt, const char *msg)
{
	json_t *lines = json_array(), *l;
	char *key;
	size_t i;

	if (asprintf(&key, "%s\t%lld", job, attempt) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	json_array_foreach(json_object_get(s.logs_of, key), i, l) {
		const char *m = json_string_value(json_array_get(l, 0));

		if (m == NULL || (msg != NULL && strcmp(m, msg) == 0))
			json_array_append(lines, json_array_get(l, 1));
	}
	free(key);
	return lines;
}

/* A delivery as the calls are matched to it: its worker's process and
 * when it was consumed. */
struct delivery {
	long long pid;
	const char *consumed_at;
	size_t attempt;
};

static int
by_process_and_time(const void *a, const void *b)
{
	const struct delivery *x = a, *y = b;

	if (x->pid != y->pid)
		return (x->pid > y->pid) - (x->pid < y->pid);
	return strcmp(x->consumed_at, y->consumed_at);
}

/*
 * The attempt each call belongs to: the one whose process made it, from
 * when it consumed its message to when that process consumed the next
 * one; none for a call of no attempt's process, or made before its first
 * delivery. Sets job and attempt in each call (null for none), and
 * returns, per attempt, its calls.
 */
static json_t *
calls_of_attempts(void)
{
	size_t n = json_array_size(s.attempts), nd = 0, i, lo, hi;
	struct delivery *d = idem_ereallocarray(NULL, n + 1, sizeof(*d));
	json_t *per_attempt = json_array(), *a, *call;

	json_array_foreach(s.attempts, i, a) {
		json_array_append_new(per_attempt, json_array());
		if (!json_is_integer(json_object_get(a, "pid")))
			continue;
		d[nd].pid = json_integer_value(json_object_get(a, "pid"));
		d[nd].consumed_at = json_string_value(json_object_get(a, "consumed_at"));
		d[nd++].attempt = i;
	}
	qsort(d, nd, sizeof(*d), by_process_and_time);
	json_array_foreach(s.calls, i, call) {
		long long pid = json_integer_value(json_object_get(call, "pid"));
		const char *at = json_string_value(json_object_get(call, "at"));
		json_t *attempt = NULL;

		/* the last delivery of the process consumed at or before the call */
		for (lo = 0, hi = nd; lo < hi;) {
			size_t mid = lo + (hi - lo) / 2;

			if (d[mid].pid < pid || (d[mid].pid == pid && strcmp(d[mid].consumed_at, at) <= 0))
				lo = mid + 1;
			else
				hi = mid;
		}
		if (pid > 0 && lo > 0 && d[lo - 1].pid == pid)
			attempt = json_array_get(s.attempts, d[lo - 1].attempt);
		json_object_set_new(call, "job", attempt ? json_incref(json_object_get(attempt, "job")) :
		    json_null());
		json_object_set_new(call, "attempt", attempt ?
		    json_incref(json_object_get(attempt, "attempt")) : json_null());
		if (attempt != NULL)
			json_array_append_new(json_array_get(per_attempt, d[lo - 1].attempt),
			    json_pack("{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}",
			    "at", json_object_get(call, "at"), "method", json_object_get(call, "method"),
			    "path", json_object_get(call, "path"),
			    "idempotency_key", json_object_get(call, "idempotency_key"),
			    "business_key", json_object_get(call, "business_key"),
			    "status", json_object_get(call, "status"),
			    "answer", json_object_get(call, "answer"),
			    "effect", json_object_get(call, "effect"),
			    "response_id", json_object_get(call, "response_id")));
	}
	free(d);
	return per_attempt;
}

/* The calls as the record lists them, keys in the order of idem-record(5). */
static json_t *
calls(void)
{
	static const char *const keys[] = { "at", "worker", "pid", "job", "attempt", "method", "path",
		"idempotency_key", "body_sha256", "business_key", "status", "answer", "effect",
		"response_id", NULL };
	json_t *out = json_array(), *call, *row;
	size_t i, k;

	json_array_foreach(s.calls, i, call) {
		row = json_object();
		for (k = 0; keys[k]; k++)
			json_object_set(row, keys[k], json_object_get(call, keys[k]));
		json_array_append_new(out, row);
	}
	return out;
}

static json_t *
evidence(void)
{
	json_t *rows = json_array(), *a, *per_attempt = calls_of_attempts(), *kills_of = json_object();
	json_t *kill, *none = json_array();
	size_t i;

	/* each attempt is held against the kills of its job alone */
	json_array_foreach(s.kills, i, kill) {
		const char *job = json_string_value(json_object_get(kill, "job"));
		json_t *list;

		if (job == NULL)
			continue;
		if ((list = json_object_get(kills_of, job)) == NULL)
			json_object_set_new(kills_of, job, list = json_array());
		json_array_append(list, kill);
	}
	json_array_foreach(s.attempts, i, a) {
		const char *job = json_string_value(json_object_get(a, "job"));
		long long attempt = json_integer_value(json_object_get(a, "attempt"));
		const char *msg = json_string_value(json_object_get(a, "msg"));
		char outcome[128];
		json_t *row, *published;

		kill = job ? json_object_get(kills_of, job) : NULL;
		idem_path_outcome(a, kill ? kill : none, s.recovers, outcome, sizeof(outcome));
		row = json_object();
		json_object_set(row, "job", json_object_get(a, "job"));
		json_object_set(row, "msg_id", json_object_get(a, "msg_id"));
		json_object_set(row, "attempt", json_object_get(a, "attempt"));
		published = json_object_get(s.published_at, msg);
		json_object_set_new(row, "published_at", published ? json_incref(published) : json_null());
		json_object_set(row, "consumed_at", json_object_get(a, "consumed_at"));
		json_object_set(row, "written_at", json_object_get(a, "written_at"));
		json_object_set(row, "committed_at", json_object_get(a, "committed_at"));
		json_object_set(row, "acked_at", json_object_get(a, "acked_at"));
		json_object_set(row, "rows_written", json_object_get(a, "rows_written"));
		json_object_set(row, "rows_updated", json_object_get(a, "rows_updated"));
		json_object_set_new(row, "outcome", json_string(outcome));
		json_object_set(row, "branch", json_object_get(a, "branch"));
		json_object_set_new(row, "log", log_of(job ? job : "", attempt, msg));
		json_object_set(row, "calls", json_array_get(per_attempt, i));
		json_array_append_new(rows, row);
	}
	json_decref(per_attempt);
	json_decref(kills_of);
	json_decref(none);
	return rows;
}

/* "job<TAB>killed_at" of a kill or recover row, or NULL without them. */
static char *
job_and_time(const json_t *row)
{
	const char *job = json_string_value(json_object_get(row, "job"));
	const char *at = json_string_value(json_object_get(row, "killed_at"));
	char *key;

	if (job == NULL || at == NULL)
		return NULL;
	if (asprintf(&key, "%s\t%s", job, at) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	return key;
}

/* The measures, each rate with its 95% Wilson interval in the units of
 * its value: "per 1000" and "per 100" by the measure's name. */
static json_t *
measures(void)
{
	json_t *out = json_deep_copy(s.measures), *m;
	size_t i;

	json_array_foreach(out, i, m) {
		const char *name = json_string_value(json_object_get(m, "name"));
		json_t *k = json_object_get(m, "numerator"), *n = json_object_get(m, "denominator");
		double scale = 0, low, high;

		if (name != NULL && strstr(name, "_per_1000_") != NULL)
			scale = 1000;
		else if (name != NULL && strstr(name, "_per_100_") != NULL)
			scale = 100;
		if (scale == 0 || !json_is_integer(k) || !json_is_integer(n) ||
		    idem_record_wilson(json_integer_value(k), json_integer_value(n), &low, &high) < 0) {
			json_object_set_new(m, "interval", json_null());
			continue;
		}
		json_object_set_new(m, "interval", json_pack("{s:f,s:f,s:f}",
		    "low", round(low * scale * 1e6) / 1e6, "high", round(high * scale * 1e6) / 1e6,
		    "confidence", 0.95));
	}
	return out;
}

static json_t *
kill_points(void)
{
	json_t *out = json_array(), *kill, *rec, *recover_of = json_object();
	size_t i;
	char *key;

	/* the recover row of a kill: the last with its job and killed_at */
	json_array_foreach(s.recovers, i, rec) {
		if ((key = job_and_time(rec)) != NULL)
			json_object_set(recover_of, key, rec);
		free(key);
	}
	json_array_foreach(s.kills, i, kill) {
		json_t *row = json_deep_copy(kill);

		json_object_del(row, "pid");
		json_object_set_new(row, "recovery_ms", json_null());
		json_object_set_new(row, "acked_at", json_null());
		if ((key = job_and_time(kill)) != NULL && (rec = json_object_get(recover_of, key)) != NULL) {
			json_object_set(row, "msg_id", json_object_get(rec, "msg_id"));
			json_object_set(row, "acked_at", json_object_get(rec, "acked_at"));
			json_object_set(row, "recovery_ms", json_object_get(rec, "recovery_ms"));
		}
		free(key);
		json_array_append_new(out, row);
	}
	json_decref(recover_of);
	return out;
}

static json_t *
count_totals(json_t *rows)
{
	json_t *o = json_object(), *row;
	size_t i;

	json_array_foreach(rows, i, row)
		if (strcmp(json_string_value(json_object_get(row, "scope")), "total") == 0)
			json_object_set_new(o, json_string_value(json_object_get(row, "key")),
			    json_pack("{s:O,s:O}", "expected", json_object_get(row, "expected"),
			    "observed", json_object_get(row, "observed")));
	return o;
}

/* Every total of the verdict is there and as expected: the external
 * call's too when the stream has an external row. */
static int
passes(json_t *totals)
{
	static const char *const names[] = { "effects", "duplicates", "missing", "pending",
		"external", "external_duplicates", NULL };
	int external = s.external != NULL || json_object_get(totals, "external") != NULL;
	size_t i;

	for (i = 0; names[i]; i++) {
		json_t *t = json_object_get(totals, names[i]);

		if (i >= 4 && !external)
			continue;
		if (t == NULL || !json_equal(json_object_get(t, "expected"), json_object_get(t, "observed")))
			return 0;
	}
	return 1;
}

static json_t *
not_exercised(void)
{
	static const char *const steps[] = { "before-commit", "after-commit", "external-call", NULL };
	json_t *out = json_array(), *kill, *sc;
	const char *kind;
	size_t i, j;
	int race = 0;

	for (i = 0; steps[i]; i++) {
		int seen = 0;

		json_array_foreach(s.kills, j, kill)
			seen |= strcmp(json_string_value(json_object_get(kill, "step")), steps[i]) == 0;
		if (!seen && strcmp(steps[i], "after-commit") == 0 && json_array_size(s.findings) > 0) {
			json_array_foreach(s.findings, j, kill)
				json_array_append_new(out, json_sprintf("a kill at after-commit: %s",
				    json_string_value(kill)));
		} else if (!seen) {
			char what[96];

			snprintf(what, sizeof(what), "a kill at %s", steps[i]);
			json_array_append_new(out, json_string(what));
		}
	}
	json_array_foreach(s.scenarios, j, sc)
		race |= strcmp(json_string_value(json_object_get(sc, "fault")), "race") == 0;
	if (!race)
		json_array_append_new(out, json_string("two workers racing on one business key"));
	if (s.copies == 0)
		json_array_append_new(out, json_string("a duplicate publish"));
	if (s.external != NULL) {
		static const char *const faults[][2] = {
			{ "vendor-error", "a vendor error on a first call" },
			{ "vendor-timeout", "a vendor timeout on a first call" },
		};

		for (i = 0; i < 2; i++) {
			int seen = 0;

			json_array_foreach(s.scenarios, j, sc)
				seen |= strcmp(json_string_value(json_object_get(sc, "fault")), faults[i][0]) == 0;
			if (!seen)
				json_array_append_new(out, json_string(faults[i][1]));
		}
	}
	kind = seed_field("queue_kind") ? seed_field("queue_kind") : "idem";
	if (strcmp(kind, "idem") == 0)
		json_array_append_new(out, json_string("exhausting max_attempts: the sandbox queue "
		    "redelivers without limit and has no dead-letter queue"));
	else
		json_array_append_new(out, json_sprintf("exhausting max_attempts: %s's failed jobs "
		    "and dead letters", kind));
	json_array_append_new(out, json_string("a kill of the database or the network between "
	    "worker and database"));
	return out;
}

/* Whether the worker kill-at ran is the command the seed declares, word
 * for word: a borrowed true or false, or NULL when there is no worker row
 * or the seed declares no command. */
static json_t *
worker_as_declared(void)
{
	const char *command = seed_field("worker_command");
	json_t *declared;
	int same;

	if (s.worker == NULL || command == NULL)
		return NULL;
	declared = words_of(command);
	same = json_equal(declared, json_object_get(s.worker, "words"));
	json_decref(declared);
	return same ? json_true() : json_false();
}

/* The worker the seed declares, and the one kill-at ran. */
static json_t *
worker(void)
{
	json_t *observed = json_null(), *as_declared = worker_as_declared();

	if (s.worker != NULL) {
		observed = json_deep_copy(s.worker);
		json_object_del(observed, "words");
		json_object_set_new(observed, "as_declared", as_declared ? as_declared : json_null());
		if (as_declared == json_false())
			json_object_set_new(observed, "note",
			    json_string("not the worker the ticket names"));
	}
	return json_pack("{s:o,s:o,s:o,s:o}", "image", text(seed_field("worker_image")),
	    "version", text(seed_field("worker_version")), "command",
	    text(seed_field("worker_command")), "observed", observed);
}

static int
valid_date(const char *d)
{
	struct tm tm;
	char *end;

	memset(&tm, 0, sizeof(tm));
	end = strptime(d, "%Y-%m-%d", &tm);
	return end != NULL && *end == '\0' && strlen(d) == 10;
}

/* A baseline that failed fails the record, whatever the counts say. */
static int
baseline_failed(void)
{
	return s.baseline != NULL &&
	    strcmp(json_string_value(json_object_get(s.baseline, "result")), "failed") == 0;
}

static json_t *
build(const struct idem_git_revision *rev, const char *reproduce, const char *next_review,
      json_t *waiting)
{
	json_t *r = json_object(), *totals, *total_rows = json_array(), *dups = json_array(), *row;
	json_t *dup_calls = json_array();
	const char *name;
	char now[32];
	size_t i;
	int pass;

	idem_format_time(idem_now_us(), now);
	totals = count_totals(s.counts_after);
	/* a kill point or race the run did not reach proves nothing, and a
	 * worker other than the one the seed declares proves nothing of it */
	pass = passes(totals) && json_array_size(s.missed) == 0 &&
	    !json_is_false(worker_as_declared()) && !baseline_failed();
	json_object_set_new(r, "record", json_integer(5));
	json_object_set_new(r, "rehearsal", text(seed_field("rehearsal")));
	json_object_set_new(r, "verdict", json_string(pass ? "pass" : "fail"));
	json_object_set_new(r, "expected_verdict",
	    s.expected_verdict ? json_incref(s.expected_verdict) : json_null());
	json_object_set_new(r, "created_at", json_string(now));
	json_object_set_new(r, "seed", json_pack("{s:o,s:s,s:o,s:s,s:s,s:b}",
	    "path", text(seed_field("path")), "repo_path", rev->path,
	    "sha256", text(seed_field("sha256")), "blob", rev->blob, "revision", rev->commit,
	    "dirty", rev->dirty));
	json_object_set_new(r, "reproduce", json_string(reproduce));
	json_object_set_new(r, "job_type", text(seed_field("job_type")));
	json_object_set_new(r, "queue", queue());
	json_object_set_new(r, "database", seed_field("database") ? text(seed_field("database")) :
	    json_string("the PG* environment (idem-sandbox)"));
	json_object_set_new(r, "worker", worker());
	json_object_set_new(r, "retry", json_pack("{s:o,s:o}", "visibility_timeout_ms",
	    number_or_text(seed_field("visibility_timeout_ms")), "max_attempts",
	    number_or_text(seed_field("max_attempts"))));
	json_object_set_new(r, "sandbox_account", text(seed_field("sandbox_account")));
	json_object_set_new(r, "account", s.account ? json_incref(s.account) : json_null());
	json_object_set_new(r, "effect", json_pack("{s:o,s:o,s:o,s:o,s:o}", "name",
	    text(seed_field("effect_name")), "table", text(seed_field("effect_table")),
	    "key", seed_json_field("key_columns"), "key_scope", text(seed_field("key_scope")),
	    "duplicate_acceptor", text(seed_field("duplicate_acceptor"))));
	json_object_set_new(r, "external", s.external ? json_incref(s.external) : json_null());
	json_object_set_new(r, "jobs", json_integer(s.jobs));
	json_object_set_new(r, "scenarios", json_incref(s.scenarios));
	json_object_set_new(r, "guards", json_incref(s.guards));
	json_object_set_new(r, "probe", s.probe ? json_incref(s.probe) : json_null());
	json_object_set_new(r, "declared_guard", s.declared_guard ? json_incref(s.declared_guard) :
	    json_null());
	json_object_set_new(r, "kill_points", kill_points());
	json_object_set_new(r, "missed", json_incref(s.missed));
	json_object_set_new(r, "baseline", s.baseline ? json_incref(s.baseline) : json_null());
	json_object_set_new(r, "evidence", evidence());
	json_object_set_new(r, "attempts", json_pack("{s:I,s:I,s:I,s:I,s:I,s:o}",
	    "total", (json_int_t)s.all_attempts, "acked", (json_int_t)s.acked,
	    "not_acked", (json_int_t)s.not_acked, "retried", (json_int_t)s.retried,
	    "listed", (json_int_t)json_array_size(json_object_get(r, "evidence")),
	    "sample_jobs", volume() ? json_integer(SAMPLE_JOBS) : json_null()));
	json_object_set_new(r, "evidence_file", !volume() ? json_null() :
	    json_pack("{s:s++,s:s,s:s,s:I}", "path", "evidence/", s.evidence_sha256, ".tsv.gz",
	    "sha256", s.evidence_sha256, "format", "idem-tsv, gzip", "rows",
	    (json_int_t)s.evidence_rows));
	json_object_set_new(r, "calls", calls());
	json_object_foreach(totals, name, row)
		json_array_append_new(total_rows, json_pack("{s:s,s:O,s:O}", "name", name,
		    "expected", json_object_get(row, "expected"), "observed", json_object_get(row, "observed")));
	json_array_foreach(s.counts_after, i, row) {
		const char *scope = json_string_value(json_object_get(row, "scope"));

		if (json_integer_value(json_object_get(row, "observed")) <=
		    json_integer_value(json_object_get(row, "expected")))
			continue;
		if (strcmp(scope, "key") == 0)
			json_array_append(dups, row);
		else if (strcmp(scope, "external") == 0)
			json_array_append(dup_calls, row);
	}
	json_object_set_new(r, "counts", json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
	    "query", text(json_string_value(json_object_get(s.queries, "count"))),
	    "expected", s.expect ? json_incref(s.expect) : json_null(),
	    "totals", totals, "digest", text(json_string_value(json_object_get(s.digests, "after"))),
	    "before", json_incref(s.counts_before), "after", json_incref(s.counts_after),
	    "total_rows", total_rows));
	json_object_set_new(r, "duplicate_keys", dups);
	json_object_set_new(r, "duplicate_calls", dup_calls);
	json_object_set_new(r, "measures", measures());
	json_object_set_new(r, "waiting", waiting);
	json_object_set_new(r, "reconciliation_owner", text(seed_field("reconciliation_owner")));
	json_object_set_new(r, "next_review", json_string(next_review));
	json_object_set_new(r, "unproven", json_pack("{s:o,s:o}", "cannot_reproduce",
	    seed_json_field("cannot_reproduce"), "not_exercised", not_exercised()));
	json_object_set_new(r, "failed", json_boolean(!pass));
	return r;
}

static json_t *
parse_wait(char **specs, size_t n)
{
	json_t *out = json_array();
	size_t i, c;

	for (i = 0; i < n; i++) {
		char *eq = strchr(specs[i], '=');
		long long ms;

		if (eq == NULL)
			idem_die(IDEM_EXIT_USAGE, "-w %s: expected cause=duration", specs[i]);
		*eq = '\0';
		for (c = 0; idem_wait_causes[c] && strcmp(idem_wait_causes[c], specs[i]) != 0; c++)
			;
		if (idem_wait_causes[c] == NULL)
			idem_die(IDEM_EXIT_USAGE, "-w %s: the cause is one of reviewer-queue, "
			    "sandbox-availability, vendor-limit, owner-approval", specs[i]);
		if ((ms = idem_parse_duration_ms(eq + 1)) < 0)
			idem_die(IDEM_EXIT_USAGE, "-w %s=%s: expected a duration such as 2h", specs[i], eq + 1);
		json_array_append_new(out, json_pack("{s:s,s:I}", "cause", specs[i], "duration_ms",
		    (json_int_t)ms));
	}
	return out;
}

/* One file of the record: its text, the end of its name, and where it is. */
struct out_file {
	const char *text, *suffix;
	char tmp[PATH_MAX], path[PATH_MAX];
	int written, linked;
};

/* Removes what publish made, the names it took or the temporary files
 * too, keeping errno for the message that follows. */
static void
unmake(struct out_file *files, size_t n, int temps_too)
{
	int saved = errno;
	size_t i;

	for (i = 0; i < n; i++) {
		if (files[i].linked && unlink(files[i].path) == 0)
			files[i].linked = 0;
		if (temps_too && files[i].written && unlink(files[i].tmp) == 0)
			files[i].written = 0;
	}
	errno = saved;
}

static void
name_of(char *out, const char *base, const char *suffix, struct out_file *files, size_t n)
{
	int len = snprintf(out, PATH_MAX, "%s%s", base, suffix);

	if (len < 0 || len >= PATH_MAX) {
		unmake(files, n, 1);
		idem_die(IDEM_EXIT_USAGE, "%s%s: path too long", base, suffix);
	}
}

/*
 * Publishes the files under the first free name of dir/DATE-REHEARSAL,
 * DATE-REHEARSAL-2, -3 and on, without end. Each file is written to a
 * temporary file in dir, then linked to its name, which fails when the
 * name exists: nothing is ever replaced, and two runs at once never take
 * one name. A name is taken when any of its three files exists, with or
 * without a signature to write. The .yaml is linked last, so a record
 * never shows without its signature and handoff.
 */
static void
publish(struct out_file *files, size_t n, const char *dir, int signed_record)
{
	char *date = idem_date_from_now(0), base[PATH_MAX], sig_name[PATH_MAX];
	const char *name = seed_field("rehearsal"), *tmps[IDEM_FSYNC_MAX];
	struct idem_error err;
	struct stat st;
	unsigned long number;
	size_t i;
	int link_errno = 0;

	for (i = 0; i < n; i++) {
		name_of(files[i].tmp, dir, "/.mkrecord-XXXXXX", files, n);
		if (idem_write_temp_file_unsynced(files[i].tmp, files[i].text, strlen(files[i].text),
		    &err) < 0) {
			unmake(files, n, 1);
			idem_die_error(&err);
		}
		files[i].written = 1;
	}
	/* every byte on disk before any name is made, the files synced
	 * together so that their waits on the disk overlap */
	for (i = 0; i < n; i++)
		tmps[i] = files[i].tmp;
	if (idem_fsync_paths(tmps, n, &err) < 0) {
		unmake(files, n, 1);
		idem_die_error(&err);
	}
	for (number = 1;; number++) {
		int len = number == 1 ? snprintf(base, sizeof(base), "%s/%s-%s", dir, date, name) :
		    snprintf(base, sizeof(base), "%s/%s-%s-%lu", dir, date, name, number);

		if (len < 0 || (size_t)len >= sizeof(base) || number == ULONG_MAX) {
			unmake(files, n, 1);
			idem_die(IDEM_EXIT_USAGE, "%s/%s-%s: no name can be made for the record", dir,
			    date, name);
		}
		if (!signed_record) {
			name_of(sig_name, base, ".yaml.sig", files, n);
			if (lstat(sig_name, &st) == 0)
				continue;
			if (errno != ENOENT) {
				unmake(files, n, 1);
				idem_die(IDEM_EXIT_ENV, "%s:", sig_name);
			}
		}
		for (i = 0; i < n; i++) {
			name_of(files[i].path, base, files[i].suffix, files, n);
			if (link(files[i].tmp, files[i].path) < 0) {
				link_errno = errno;
				break;
			}
			files[i].linked = 1;
		}
		if (i == n)
			break;
		if (link_errno != EEXIST) {
			unmake(files, n, 1);
			errno = link_errno;
			idem_die(IDEM_EXIT_ENV, "%s:", files[i].path);
		}
		unmake(files, n, 0);
	}
	for (i = 0; i < n; i++)
		if (unlink(files[i].tmp) == 0)
			files[i].written = 0;
	free(date);
}

/* The name publish will most likely give the record: the first of
 * dir/DATE-REHEARSAL, -2, -3 and on with none of its files there. The
 * handoff names the record by it; when another run takes the name first,
 * the handoff is rendered again for the name the record got. */
static char *
likely_record(const char *dir, const char *const *suffixes)
{
	char *date = idem_date_from_now(0), *base = NULL, path[PATH_MAX];
	struct stat st;
	unsigned long number;
	size_t i;

	for (number = 1; number < ULONG_MAX; number++) {
		free(base);
		if ((number == 1 ? asprintf(&base, "%s/%s-%s", dir, date, seed_field("rehearsal")) :
		    asprintf(&base, "%s/%s-%s-%lu", dir, date, seed_field("rehearsal"), number)) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		for (i = 0; suffixes[i]; i++) {
			snprintf(path, sizeof(path), "%s%s", base, suffixes[i]);
			if (lstat(path, &st) == 0)
				break;
		}
		if (suffixes[i] == NULL)
			break;
	}
	free(date);
	if (asprintf(&date, "%s.yaml", base) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(base);
	return date;
}

/* The signer as the handoff names it: the key's fingerprint, and its
 * principal in dir/allowed_signers when a line there allows it. */
struct signer {
	char fingerprint[64], *principal, signers[PATH_MAX];
};

static void
find_signer(struct signer *who, const struct idem_key *key, const char *dir)
{
	struct idem_signers *signers;
	struct idem_error err;

	idem_handoff_fingerprint(key->public_key, who->fingerprint);
	snprintf(who->signers, sizeof(who->signers), "%s/allowed_signers", dir);
	who->principal = NULL;
	if ((signers = idem_signers_load(who->signers, &err)) != NULL) {
		who->principal = idem_signers_find(signers, key->public_key, "idem-record", time(NULL),
		    &err);
		idem_signers_free(signers);
	}
}

/* The handoff of the record named record: the record r with the
 * conveniences of the handoff, rendered, prose folded to its width. */
static char *
handoff(const json_t *r, const char *record, const struct signer *who)
{
	json_t *ctx = json_deep_copy(r);
	struct idem_error err;
	char *md, *folded, svg[PATH_MAX];
	const char *slash = strrchr(record, '/');
	struct idem_handoff_files files = { .record = record, .svg = svg,
		.signers = who ? who->signers : NULL, .principal = who ? who->principal : NULL,
		.fingerprint = who ? who->fingerprint : NULL };

	snprintf(svg, sizeof(svg), "%.*s.svg", (int)(strlen(slash ? slash + 1 : record) - 5),
	    slash ? slash + 1 : record);
	idem_handoff_context(ctx, &files);
	if ((md = idem_template_render("handoff.md", idem_tpl_handoff, ctx, IDEM_ESCAPE_MARKDOWN,
	    &err)) == NULL)
		idem_die_error(&err);
	folded = idem_handoff_fold(md, IDEM_HANDOFF_WIDTH);
	free(md);
	json_decref(ctx);
	return folded;
}

static char *
default_reproduce(void)
{
	char *out;

	if (asprintf(&out, "seed-gen %s | count-effects --before | dup-publish | kill-at | "
	    "count-effects", seed_field("path")) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	return out;
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "sign", required_argument, NULL, 'k' },
		{ "commit", no_argument, NULL, 'c' },
		{ "reproduce", required_argument, NULL, 'r' },
		{ "next-review", required_argument, NULL, 'n' },
		{ "wait", required_argument, NULL, 'w' },
		{ "format", required_argument, NULL, 'f' },
		{ "allow-dirty", no_argument, NULL, 'A' },
		{ "approve", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dir = "records", *key_path = NULL, *format = "yaml", *path = "-", *approval = NULL;
	static const char *const suffixes[] = { ".yaml", ".yaml.sig", ".md", ".svg", NULL };
	char *reproduce = NULL, *next_review = NULL, **waits = NULL, *yaml, *md, *sig = NULL;
	char *svg, *likely;
	struct out_file out[4];
	struct signer who = { .principal = NULL };
	size_t nout = 0;
	const char *record, *sig_path, *md_path, *svg_path;
	char commit[41];
	char seed_sha[65], *seed_text, *message = NULL;
	struct idem_git_revision rev;
	struct idem_key key;
	struct idem_error err;
	size_t nwaits = 0, seed_len;
	json_t *r, *stored, *totals;
	FILE *in = stdin;
	int c, do_commit = 0, allow_dirty = 0;

	argv0 = "mkrecord";
	argv[0] = (char *)argv0;
	while ((c = getopt_long(argc, argv, "o:k:cr:n:w:f:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': dir = optarg; break;
		case 'k': key_path = optarg; break;
		case 'c': do_commit = 1; break;
		case 'r': reproduce = idem_estrdup(optarg); break;
		case 'n':
			if (!valid_date(optarg))
				idem_die(IDEM_EXIT_USAGE, "-n %s: expected a date YYYY-MM-DD", optarg);
			next_review = idem_estrdup(optarg);
			break;
		case 'w':
			waits = idem_ereallocarray(waits, nwaits + 1, sizeof(char *));
			waits[nwaits++] = optarg;
			break;
		case 'f':
			if (strcmp(optarg, "yaml") != 0 && strcmp(optarg, "md") != 0)
				idem_die(IDEM_EXIT_USAGE, "-f %s: expected yaml or md", optarg);
			format = optarg;
			break;
		case 'A': allow_dirty = 1; break;
		case 'P': approval = optarg; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("mkrecord " IDEM_VERSION); idem_close_stdout(); return 0;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (argc - optind > 1)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (approval != NULL) {
		if (optind < argc || strcmp(dir, "records") != 0 || reproduce || next_review || nwaits ||
		    strcmp(format, "yaml") != 0 || allow_dirty)
			idem_usage(synopsis, IDEM_EXIT_USAGE);
		return idem_approve(approval, key_path, do_commit);
	}
	if (do_commit && key_path == NULL)
		idem_die(IDEM_EXIT_USAGE, "-c: a record is committed signed: give -k key");
	if (key_path != NULL && idem_key_load(&key, key_path, &err) < 0)
		idem_die_error(&err);
	if (key_path != NULL)
		find_signer(&who, &key, dir);
	if (optind < argc && strcmp(argv[optind], "-") != 0) {
		path = argv[optind];
		if ((in = fopen(path, "r")) == NULL)
			idem_die(IDEM_EXIT_USAGE, "%s:", path);
	}
	/* the evidence, kept as the stream is read, then read again: from
	 * memory, or for a volume record from its file in dir */
	snprintf(s.evidence_dir, sizeof(s.evidence_dir), "%s", dir);
	if ((s.evidence = open_memstream(&s.evidence_mem, &s.evidence_mem_len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	idem_map_init(&s.listed);
	read_stream(in, in == stdin ? "stdin" : path);
	if (in != stdin)
		fclose(in);
	if (fclose(s.evidence) != 0)
		idem_die(IDEM_EXIT_ENV, "%s:", volume() ? s.evidence_tmp : "memory");
	if (volume() && idem_sha256_file(s.evidence_tmp, s.evidence_sha256) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", s.evidence_tmp);
	read_evidence(in == stdin ? "stdin" : path);
	free(s.evidence_mem);

	/* the seed as committed: same bytes as the stream's, at a revision */
	if ((seed_text = idem_read_file(seed_field("path"), &seed_len, &err)) == NULL)
		idem_die(IDEM_EXIT_USAGE, "the seed of the stream, %s, is not here: run mkrecord where "
		    "seed-gen ran", seed_field("path"));
	idem_sha256_hex(seed_text, seed_len, seed_sha);
	free(seed_text);
	if (strcmp(seed_sha, seed_field("sha256")) != 0)
		idem_die(IDEM_EXIT_USAGE, "%s changed since the stream was made (SHA-256 %s, the "
		    "stream says %s)", seed_field("path"), seed_sha, seed_field("sha256"));
	if (idem_git_revision(seed_field("path"), &rev, &err) < 0)
		idem_die_error(&err);
	if (rev.dirty && !allow_dirty)
		idem_die(IDEM_EXIT_USAGE, "%s has changes not committed at %s: commit the seed first, "
		    "or give --allow-dirty and the record will say so", seed_field("path"),
		    *rev.commit ? rev.commit : "(no commit)");

	if (reproduce == NULL)
		reproduce = default_reproduce();
	if (next_review == NULL)
		next_review = idem_date_from_now(91);
	/* one record: the handoff renders it with a few conveniences more */
	r = build(&rev, reproduce, next_review, parse_wait(waits, nwaits));
	stored = json_deep_copy(r);
	json_object_del(stored, "failed");
	json_object_del(stored, "duplicate_keys");
	json_object_del(stored, "duplicate_calls");
	json_object_del(json_object_get(stored, "counts"), "total_rows");
	if ((yaml = idem_yaml_from_json(stored, &err)) == NULL)
		idem_die_error(&err);
	json_decref(stored);
	likely = likely_record(dir, suffixes);
	md = handoff(r, likely, key_path != NULL ? &who : NULL);
	svg = idem_timeline_svg(r);

	/* a signature that does not verify is never written */
	if (key_path != NULL)
		sig = idem_sign(&key, key_path, "idem-record", yaml, strlen(yaml));

	idem_sign_hold_interrupts();
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", dir);
	if (volume())
		publish_evidence(dir);
	if (key_path != NULL)
		out[nout++] = (struct out_file){ .text = sig, .suffix = ".yaml.sig" };
	out[nout++] = (struct out_file){ .text = md, .suffix = ".md" };
	out[nout++] = (struct out_file){ .text = svg, .suffix = ".svg" };
	out[nout++] = (struct out_file){ .text = yaml, .suffix = ".yaml" };
	publish(out, nout, dir, key_path != NULL);
	record = out[nout - 1].path;
	svg_path = out[nout - 2].path;
	md_path = out[nout - 3].path;
	sig_path = key_path != NULL ? out[0].path : "";
	if (strcmp(record, likely) != 0) {
		/* another run took the name: the handoff names the record's own */
		char tmp[PATH_MAX];

		free(md);
		md = handoff(r, record, key_path != NULL ? &who : NULL);
		name_of(tmp, dir, "/.mkrecord-XXXXXX", out, nout);
		if (idem_write_temp_file(tmp, md, strlen(md), &err) < 0) {
			unmake(out, nout, 0);
			idem_die_error(&err);
		}
		if (rename(tmp, md_path) < 0) {
			unlink(tmp);
			unmake(out, nout, 0);
			idem_die(IDEM_EXIT_ENV, "%s:", md_path);
		}
	}
	if (do_commit) {
		const char *files[5] = { record, sig_path, md_path, svg_path, evidence_path };

		json_t *external;
		char calls[96] = "";

		totals = json_object_get(json_object_get(r, "counts"), "totals");
		if ((external = json_object_get(totals, "external")) != NULL)
			snprintf(calls, sizeof(calls), ", external calls %lld of %lld",
			    (long long)json_integer_value(json_object_get(external, "observed")),
			    (long long)json_integer_value(json_object_get(external, "expected")));
		if (asprintf(&message, "record: %s %s (effects %lld of %lld expected, "
		    "duplicates %lld%s)\n\nRecord %s, signed.\n", seed_field("rehearsal"),
		    json_string_value(json_object_get(r, "verdict")),
		    (long long)json_integer_value(json_object_get(json_object_get(totals, "effects"), "observed")),
		    (long long)json_integer_value(json_object_get(json_object_get(totals, "effects"), "expected")),
		    (long long)json_integer_value(json_object_get(json_object_get(totals, "duplicates"), "observed")),
		    calls, record) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if (idem_git_commit(files, *evidence_path ? 5 : 4, message, &key, commit, &err) < 0) {
			unmake(out, nout, 0);
			idem_die_error(&err);
		}
	}
	evidence_kept = 1;
	if (key_path != NULL)
		idem_key_wipe(&key);
	if (strcmp(format, "md") == 0)
		fputs(md, stdout);
	else
		printf("%s\n", record);
	json_decref(r);
	free(yaml);
	free(md);
	free(svg);
	free(likely);
	free(who.principal);
	free(sig);
	free(reproduce);
	free(next_review);
	free(waits);
	free(message);
	idem_git_close();
	idem_close_stdout();
	return 0;
}
