/* rerun.c: a record's command run again, and its counts and path
 * compared with the record's (verify-record --rerun) */
#include <sys/wait.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "path.h"
#include "pg.h"
#include "rerun.h"
#include "tsv.h"
#include "yamljson.h"
#include "file.h"
#include "text.h"

/* The directory of this program, so a rerun finds the programs it was
 * installed or built with. */
static void
path_with_self(void)
{
	char self[PATH_MAX], *slash, *path;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return;
	self[n] = '\0';
	if ((slash = strrchr(self, '/')) == NULL)
		return;
	*slash = '\0';
	if (asprintf(&path, "%s:%s", self, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin") < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	setenv("PATH", path, 1);
	free(path);
}

/* What the shell script writes on its standard output; NULL when it
 * cannot be run. */
static char *
run_capture(const char *script, int *status, struct idem_error *err)
{
	char *out = NULL;
	size_t len = 0, got;
	char buf[65536];
	FILE *p = popen(script, "r");

	if (p == NULL) {
		idem_error_set(err, IDEM_EXIT_ENV, "popen:");
		return NULL;
	}
	while ((got = fread(buf, 1, sizeof(buf), p)) > 0) {
		out = idem_erealloc(out, len + got + 1);
		memcpy(out + len, buf, got);
		len += got;
	}
	if (out == NULL)
		out = idem_estrdup("");
	else
		out[len] = '\0';
	*status = pclose(p);
	return out;
}

/* What a rerun's stream gives, read as every program reads a stream: its
 * count rows of the after phase, each "SCOPE<TAB>KEY<TAB>E<TAB>O" as the
 * stream has them, its last digest of the after phase, or why the stream
 * was refused. */
struct rerun_stream {
	char **counts;
	size_t ncounts;
	char *digest;
	char *refused;
	json_t *kills, *attempts, *recovers, *missed;	/* as mkrecord reads them */
};

static json_int_t
integer(const char *v)
{
	return v ? (json_int_t)strtoll(v, NULL, 10) : 0;
}

static void
read_rerun(const char *stream, struct rerun_stream *out)
{
	static const char count_after[] = "count\tafter\t";
	struct idem_tsv_reader r;
	struct idem_error err;
	FILE *f = fmemopen((void *)stream, strlen(stream), "r");
	int rc;

	memset(out, 0, sizeof(*out));
	out->kills = json_array();
	out->attempts = json_array();
	out->recovers = json_array();
	out->missed = json_array();
	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "fmemopen:");
	idem_tsv_reader_init(&r, f, "rerun output");
	while ((rc = idem_tsv_next(&r, &err)) > 0) {
		char **f = r.fields;

		if (rc != IDEM_TSV_ROW)
			continue;
		if (r.kind == IDEM_KIND_COUNT_ROW && strcmp(r.fields[COUNT_PHASE], "after") == 0) {
			out->counts = idem_ereallocarray(out->counts, out->ncounts + 1, sizeof(char *));
			out->counts[out->ncounts++] = idem_estrdup(r.line + strlen(count_after));
		} else if (r.kind == IDEM_KIND_KILL) {
			json_array_append_new(out->kills, json_pack("{s:s,s:I,s:s,s:I,s:s}",
			    "job", f[KILL_JOB_ID], "attempt", integer(f[KILL_ATTEMPT]), "step", f[KILL_STEP],
			    "pid", integer(f[KILL_PID]), "killed_at", f[KILL_KILLED_AT]));
		} else if (r.kind == IDEM_KIND_ATTEMPT) {
			json_array_append_new(out->attempts, json_pack("{s:s,s:s,s:I,s:I,s:o,s:o}",
			    "job", f[ATTEMPT_JOB_ID], "msg", f[ATTEMPT_MSG_ID],
			    "attempt", integer(f[ATTEMPT_ATTEMPT]), "pid", integer(f[ATTEMPT_PID]),
			    "acked_at", f[ATTEMPT_ACKED_AT] ? json_string(f[ATTEMPT_ACKED_AT]) : json_null(),
			    "branch", f[ATTEMPT_BRANCH] ? json_string(f[ATTEMPT_BRANCH]) : json_null()));
		} else if (r.kind == IDEM_KIND_RECOVER) {
			json_array_append_new(out->recovers, json_pack("{s:s,s:s}", "msg",
			    f[RECOVER_MSG_ID], "killed_at", f[RECOVER_KILLED_AT]));
		} else if (r.kind == IDEM_KIND_MISSED) {
			json_array_append_new(out->missed, json_pack("{s:s,s:s,s:o,s:s}",
			    "what", f[MISSED_WHAT], "job", f[MISSED_JOB_ID], "attempt", f[MISSED_ATTEMPT] ?
			    json_integer(integer(f[MISSED_ATTEMPT])) : json_null(), "step", f[MISSED_STEP]));
		} else if (r.kind == IDEM_KIND_DIGEST && strcmp(r.fields[DIGEST_PHASE], "after") == 0) {
			free(out->digest);
			out->digest = idem_estrdup(r.fields[DIGEST_SHA256]);
		}
	}
	if (rc < 0 && *stream != '\0')
		out->refused = idem_estrdup(err.text);
	idem_tsv_reader_free(&r);
	fclose(f);
}

/* For a volume record, the jobs whose attempts the path compares: those
 * the record lists, and those the rerun would list as anomalies (killed,
 * retried, left without an ack). NULL for a record that lists every
 * attempt. */
static json_t *
volume_jobs(const json_t *record, const struct rerun_stream *out)
{
	const json_t *file = json_object_get(record, "evidence_file"), *a;
	json_t *jobs;
	size_t i;

	if (file == NULL || json_is_null(file))
		return NULL;
	jobs = json_object();
	json_array_foreach(json_object_get(record, "evidence"), i, a)
		if (idem_json_str(a, "job"))
			json_object_set_new(jobs, idem_json_str(a, "job"), json_true());
	json_array_foreach(out->kills, i, a)
		json_object_set_new(jobs, idem_json_str(a, "job"), json_true());
	json_array_foreach(out->attempts, i, a)
		if (idem_json_num(a, "attempt") > 1 || json_is_null(json_object_get(a, "acked_at")))
			json_object_set_new(jobs, idem_json_str(a, "job"), json_true());
	return jobs;
}

/* The rerun's path against the record's: the kill points reached, the
 * races and kill points missed, the outcome and branch of each attempt of
 * each job, as mkrecord would write them from the rerun's stream. Prints
 * each difference; 1 when there is one. */
static int
compare_path(const char *path, const json_t *record, const struct rerun_stream *out,
	     FILE *report)
{
	json_t *attempts = json_array(), *a, *diff, *line, *missed, *none = json_array();
	char outcome[128];
	size_t i;
	int differ;

	json_t *listed = volume_jobs(record, out);

	json_array_foreach(out->attempts, i, a) {
		if (listed != NULL && json_object_get(listed, idem_json_str(a, "job")) == NULL)
			continue;
		idem_path_outcome(a, out->kills, out->recovers, outcome, sizeof(outcome));
		json_array_append_new(attempts, json_pack("{s:O,s:O,s:s,s:O}", "job",
		    json_object_get(a, "job"), "attempt", json_object_get(a, "attempt"),
		    "outcome", outcome, "branch", json_object_get(a, "branch")));
	}
	missed = json_object_get(record, "missed");
	diff = idem_path_diff(json_object_get(record, "kill_points"),
	    json_object_get(record, "evidence"), missed ? missed : none, out->kills, attempts,
	    out->missed);
	json_array_foreach(diff, i, line)
		fprintf(report, "%s: %s\n", path, json_string_value(line));
	differ = json_array_size(diff) > 0;
	json_decref(diff);
	json_decref(attempts);
	json_decref(none);
	json_decref(listed);
	return differ;
}

/* A count row of the record as the stream writes it. */
static char *
count_text(const json_t *row)
{
	char *scope = idem_tsv_escape(idem_json_str(row, "scope"));
	char *key = idem_tsv_escape(idem_json_str(row, "key"));
	char *text;

	if (asprintf(&text, "%s\t%s\t%lld\t%lld", scope, key, idem_json_num(row, "expected"),
	    idem_json_num(row, "observed")) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(scope);
	free(key);
	return text;
}

static int
has_count(char *const *counts, size_t n, const char *text)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(counts[i], text) == 0)
			return 1;
	return 0;
}

/* Whether a volume record would list a count row of the after phase,
 * "SCOPE<TAB>KEY<TAB>E<TAB>O" as the stream writes it: a total, or a row
 * whose observed count is not the expected one. */
static int
listed_count(const char *text)
{
	const char *observed = strrchr(text, '\t'), *expected;

	if (strncmp(text, "total\t", 6) == 0 || observed == NULL)
		return 1;
	for (expected = observed; expected > text && expected[-1] != '\t'; expected--)
		;
	return (size_t)(observed - expected) != strlen(observed + 1) ||
	    strncmp(expected, observed + 1, (size_t)(observed - expected)) != 0;
}

/* The shell script that runs the recorded command from the work tree
 * that holds the record (abs): on a fresh sandbox, stopped and purged
 * after, or on the database of conninfo. */
static int
rerun_script(const char *abs, const char *command, const char *conninfo, char **script,
	     struct idem_error *err)
{
	char *quoted_command = idem_shell_quote(command), *q_abs = idem_shell_quote(abs);
	int rc = -1;

	*script = NULL;
	if (conninfo == NULL) {
		char tmpl[96], *sandbox, *q_sandbox, *q_tmpl;

		if (idem_make_temp_dir(tmpl, sizeof(tmpl), "verify-record", 0711, err) < 0)
			goto out;
		/* a sandbox that does not start stops the rerun: never the caller's database */
		if (asprintf(&sandbox, "%s/sandbox", tmpl) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		q_sandbox = idem_shell_quote(sandbox);
		q_tmpl = idem_shell_quote(tmpl);
		if (asprintf(script, "unset IDEM_DATABASE PGSERVICE; "
		    "cd \"$(git -C %s rev-parse --show-toplevel)\" && "
		    "settings=$(idem-sandbox -D %s start) && eval \"$settings\" && sh -c %s; rc=$?; "
		    "idem-sandbox -D %s --purge stop >&2; rmdir %s; exit $rc", q_abs, q_sandbox,
		    quoted_command, q_sandbox, q_tmpl) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(sandbox);
		free(q_sandbox);
		free(q_tmpl);
	} else {
		char *quoted_db;

		/* a sandbox or nothing, and its URI as kill-at gives it to workers */
		if (idem_pg_setenv_url(conninfo, err) < 0)
			goto out;
		quoted_db = idem_shell_quote(conninfo);
		if (asprintf(script, "cd \"$(git -C %s rev-parse --show-toplevel)\" && "
		    "IDEM_DATABASE=%s sh -c %s", q_abs, quoted_db, quoted_command) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(quoted_db);
	}
	rc = 0;
out:
	free(quoted_command);
	free(q_abs);
	return rc;
}

/* The rerun's count rows against the record's, each that differs named. */
static void
compare_counts(const char *path, const json_t *record, const struct rerun_stream *out,
	       FILE *report)
{
	json_t *rows = json_object_get(json_object_get(record, "counts"), "after"), *row;
	/* a volume record lists only the count rows that differ */
	int volume = json_object_get(record, "evidence_file") != NULL &&
	    !json_is_null(json_object_get(record, "evidence_file"));
	char **recorded = idem_ereallocarray(NULL, json_array_size(rows) + 1, sizeof(char *));
	size_t i;

	json_array_foreach(rows, i, row) {
		recorded[i] = count_text(row);
		if (!has_count(out->counts, out->ncounts, recorded[i]))
			fprintf(report, "%s: recorded %s %s: expected %lld, observed %lld; the rerun "
			    "differs\n", path, idem_json_str(row, "scope"), idem_json_str(row, "key"),
			    idem_json_num(row, "expected"), idem_json_num(row, "observed"));
	}
	for (i = 0; i < out->ncounts; i++)
		if ((!volume || listed_count(out->counts[i])) &&
		    !has_count(recorded, json_array_size(rows), out->counts[i]))
			fprintf(report, "%s: rerun %s\n", path, out->counts[i]);
	for (i = 0; i < json_array_size(rows); i++)
		free(recorded[i]);
	free(recorded);
}

static void
rerun_stream_free(struct rerun_stream *out)
{
	size_t i;

	json_decref(out->kills);
	json_decref(out->attempts);
	json_decref(out->recovers);
	json_decref(out->missed);
	for (i = 0; i < out->ncounts; i++)
		free(out->counts[i]);
	free(out->counts);
	free(out->digest);
	free(out->refused);
}

int
idem_rerun(const char *path, const json_t *record, const char *conninfo, FILE *report,
	   struct idem_error *err)
{
	const char *command = idem_json_str(record, "reproduce");
	const char *want = idem_json_str(record, "counts.digest");
	char dir[PATH_MAX], abs[PATH_MAX], *slash, *script = NULL, *stream;
	struct rerun_stream out;
	int status, differ = 0;

	if (command == NULL || want == NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: no reproduce command or digest recorded",
		    path);
	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')) != NULL)
		*slash = '\0';
	else
		strcpy(dir, ".");
	if (realpath(dir, abs) == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", dir);
	path_with_self();
	if (rerun_script(abs, command, conninfo, &script, err) < 0)
		return -1;
	fprintf(stderr, "%s: rerunning: %s\n", argv0, command);
	stream = run_capture(script, &status, err);
	free(script);
	if (stream == NULL)
		return -1;
	read_rerun(stream, &out);
	if (out.refused != NULL) {
		fprintf(report, "%s: %s\n", path, out.refused);
		differ = 1;
	} else if (out.digest == NULL) {
		fprintf(report, "%s: rerun gave no counts digest (the command exited with status %d)\n",
		    path, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
		differ = 1;
	} else if (strcmp(out.digest, want) != 0) {
		fprintf(report, "%s: rerun counts differ: digest %s, the record says %s\n", path,
		    out.digest, want);
		differ = 1;
		compare_counts(path, record, &out, report);
	} else {
		fprintf(report, "%s: rerun reproduces the counts (digest %s)\n", path, out.digest);
	}
	if (out.refused == NULL && compare_path(path, record, &out, report))
		differ = 1;
	else if (out.refused == NULL && !differ)
		fprintf(report, "%s: rerun reproduces the path (kill points, races and attempts)\n", path);
	rerun_stream_free(&out);
	free(stream);
	return differ;
}
