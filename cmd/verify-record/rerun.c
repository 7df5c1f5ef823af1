/* rerun.c: a record's command run again at its revision, in a temporary
 * worktree, and its counts and path compared with the record's
 * (verify-record --rerun) */
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"
#include "path.h"
#include "pg.h"
#include "rerun.h"
#include "tsv.h"
#include "yamljson.h"
#include "file.h"
#include "text.h"

/* The signals that stop a rerun. They are blocked while it runs and
 * caught only where it waits for its command, so that the worktree and
 * the sandbox are removed before the program ends as the signal would
 * have ended it. */
static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
#define NSTOP_SIGNALS (sizeof(stop_signals) / sizeof(stop_signals[0]))
static volatile sig_atomic_t stop_signal;	/* the first that came, or 0 */

static void
on_stop_signal(int sig)
{
	if (stop_signal == 0)
		stop_signal = sig;
}

struct stop_guard {
	struct sigaction old[NSTOP_SIGNALS];
	sigset_t old_mask;
};

/* Blocks the stop signals and catches them, except one the caller
 * ignores (nohup), which stays ignored. */
static void
catch_stop_signals(struct stop_guard *g)
{
	struct sigaction sa;
	size_t i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < NSTOP_SIGNALS; i++)
		sigaddset(&sa.sa_mask, stop_signals[i]);
	sigprocmask(SIG_BLOCK, &sa.sa_mask, &g->old_mask);
	stop_signal = 0;
	for (i = 0; i < NSTOP_SIGNALS; i++) {
		sigaction(stop_signals[i], NULL, &g->old[i]);
		if (g->old[i].sa_handler != SIG_IGN)
			sigaction(stop_signals[i], &sa, NULL);
	}
}

/* The stop signal that came, caught or still pending; 0 when none. */
static int
stopped(void)
{
	sigset_t pending;
	size_t i;

	if (stop_signal != 0)
		return stop_signal;
	sigpending(&pending);
	for (i = 0; i < NSTOP_SIGNALS; i++)
		if (sigismember(&pending, stop_signals[i]))
			return stop_signals[i];
	return 0;
}

/* The caller's handlers and mask back; when a stop signal came, the
 * program ends by it (128+N to its shell), its report written first. */
static void
release_stop_signals(struct stop_guard *g, FILE *report)
{
	int sig = stopped();
	sigset_t just;
	size_t i;

	for (i = 0; i < NSTOP_SIGNALS; i++)
		sigaction(stop_signals[i], &g->old[i], NULL);
	if (sig != 0) {
		fflush(report);
		fflush(stdout);
		signal(sig, SIG_DFL);
		raise(sig);
		sigemptyset(&just);
		sigaddset(&just, sig);
		sigprocmask(SIG_UNBLOCK, &just, NULL);
		_exit(128 + sig);
	}
	sigprocmask(SIG_SETMASK, &g->old_mask, NULL);
}

/* Starts argv (a program on PATH, or a path), its standard output on
 * out_fd, with the signals as a program expects them; in a process group
 * of its own when own_group. Its pid, or -1 (err set). */
static pid_t
spawn(char *const argv[], int out_fd, int own_group, struct idem_error *err)
{
	struct sigaction caught;
	sigset_t none;
	pid_t pid;
	size_t i;

	fflush(NULL);
	if ((pid = fork()) < 0) {
		idem_error_set(err, IDEM_EXIT_ENV, "fork:");
		return -1;
	}
	if (pid == 0) {
		if (own_group)
			setpgid(0, 0);
		/* a stop signal sent to our group before the setpgid was meant
		 * for verify-record: ignoring it discards it; one the caller
		 * ignores stays ignored */
		for (i = 0; i < NSTOP_SIGNALS; i++) {
			if (sigaction(stop_signals[i], NULL, &caught) < 0 ||
			    caught.sa_handler != on_stop_signal)
				continue;
			signal(stop_signals[i], SIG_IGN);
			signal(stop_signals[i], SIG_DFL);
		}
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (out_fd != STDOUT_FILENO && dup2(out_fd, STDOUT_FILENO) < 0)
			_exit(126);
		execvp(argv[0], argv);
		fprintf(stderr, "%s: %s: %s\n", argv0, argv[0], strerror(errno));
		_exit(127);
	}
	if (own_group)
		setpgid(pid, pid);
	return pid;
}

/* Waits for a child; its wait status. */
static int
reap(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return status;
}

/* Runs git, with the repository's hooks off and its standard output
 * thrown away, on the repository that holds dir: the arguments after err,
 * up to a NULL. 0 when git succeeds, 1 when it fails (it says why on
 * standard error), -1 (err set) when it cannot run. A git command is
 * short: a stop signal waits for it to end. */
static int
git(const char *dir, struct idem_error *err, ...)
{
	char *argv[16] = { "git", "-c", "core.hooksPath=/dev/null", "-C", (char *)dir };
	size_t n = 5;
	int null_fd, status;
	va_list ap;
	pid_t pid;

	va_start(ap, err);
	while (n < sizeof(argv) / sizeof(argv[0]) - 1 && (argv[n] = va_arg(ap, char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	if ((null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "/dev/null:");
	pid = spawn(argv, null_fd, 0, err);
	close(null_fd);
	if (pid < 0)
		return -1;
	status = reap(pid);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

/* What the shell script writes on its standard output; NULL (err set)
 * when it cannot be run. The script runs in a process group of its own;
 * a stop signal is caught only while this waits for it, and passed on to
 * that group, whose shell traps it to stop its sandbox. */
static char *
run_capture(const char *script, const sigset_t *wait_mask, int *status, struct idem_error *err)
{
	char *const argv[] = { "/bin/sh", "-c", (char *)script, NULL };
	char *out = NULL, buf[65536];
	size_t len = 0;
	ssize_t got = 0;
	int fds[2], passed_on = 0;
	struct pollfd readable;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) < 0) {
		idem_error_set(err, IDEM_EXIT_ENV, "pipe:");
		return NULL;
	}
	pid = spawn(argv, fds[1], 1, err);
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return NULL;
	}
	for (;;) {
		if (stop_signal != 0 && !passed_on) {
			kill(-pid, stop_signal);
			passed_on = 1;
		}
		readable.fd = fds[0];
		readable.events = POLLIN;
		if (ppoll(&readable, 1, NULL, wait_mask) < 0) {
			if (errno == EINTR)
				continue;
			got = -1;
		} else if ((got = read(fds[0], buf, sizeof(buf))) > 0) {
			out = idem_erealloc(out, len + (size_t)got + 1);
			memcpy(out + len, buf, (size_t)got);
			len += (size_t)got;
			continue;
		}
		break;
	}
	if (got < 0) {
		idem_error_set(err, IDEM_EXIT_ENV, "reading the rerun's output:");
		kill(-pid, SIGTERM);
	}
	close(fds[0]);
	*status = reap(pid);
	if (got < 0) {
		free(out);
		return NULL;
	}
	if (out == NULL)
		out = idem_estrdup("");
	else
		out[len] = '\0';
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
	json_t *kills, *attempts, *recovers, *missed, *stalls;	/* as mkrecord reads them */
	json_t *rekeyed, *pending;	/* the rekeyed and pending_call rows */
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
	out->stalls = json_array();
	out->rekeyed = json_array();
	out->pending = json_array();
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
		} else if (r.kind == IDEM_KIND_STALL) {
			json_array_append_new(out->stalls, json_pack("{s:s,s:I,s:s,s:s}",
			    "job", f[STALL_JOB_ID], "attempt", integer(f[STALL_ATTEMPT]),
			    "step", f[STALL_STEP], "release", f[STALL_RELEASE]));
		} else if (r.kind == IDEM_KIND_REKEYED) {
			json_array_append_new(out->rekeyed, json_pack("{s:s,s:o,s:I}", "business_key",
			    f[REKEYED_BUSINESS_KEY], "keys", json_loads(f[REKEYED_KEYS], 0, NULL),
			    "effects", integer(f[REKEYED_EFFECTS])));
		} else if (r.kind == IDEM_KIND_PENDING_CALL) {
			json_array_append_new(out->pending, json_pack("{s:s,s:s}", "business_key",
			    f[PENDING_CALL_BUSINESS_KEY], "result", f[PENDING_CALL_RESULT]));
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
	json_array_foreach(out->stalls, i, a)
		json_object_set_new(jobs, idem_json_str(a, "job"), json_true());
	json_array_foreach(out->attempts, i, a)
		if (idem_json_num(a, "attempt") > 1 || json_is_null(json_object_get(a, "acked_at")))
			json_object_set_new(jobs, idem_json_str(a, "job"), json_true());
	return jobs;
}

/* The rerun's path against the record's: the kill points and stalls
 * reached, the stalls' releases, the races, kill points and stalls missed, the outcome and branch of each attempt of
 * each job, as mkrecord would write them from the rerun's stream; and
 * (format 8) the business keys whose calls changed their key and the
 * pending checks, which a given worker makes the same on every run.
 * Prints each difference; 1 when there is one. */
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
		json_array_append_new(attempts, json_pack("{s:O,s:O,s:s,s:O,s:O}", "job",
		    json_object_get(a, "job"), "attempt", json_object_get(a, "attempt"),
		    "outcome", outcome, "branch", json_object_get(a, "branch"), "msg",
		    json_object_get(a, "msg")));
	}
	missed = json_object_get(record, "missed");
	{
		struct idem_path was = { json_object_get(record, "kill_points"),
			json_object_get(record, "evidence"), missed ? missed : none,
			json_object_get(record, "stalls"), json_object_get(record, "rekeyed"),
			json_object_get(record, "pending_calls") };
		struct idem_path now = { out->kills, attempts, out->missed, out->stalls, out->rekeyed,
			out->pending };

		diff = idem_path_diff(&was, &now);
	}
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

/* The shell script that runs the recorded command from the top of the
 * worktree tree: on a fresh sandbox in tmp, stopped and purged after, or
 * on the database of conninfo. Its shell traps the stop signals, so that
 * when they stop the command it still stops the sandbox. */
static char *
rerun_script(const char *tree, const char *tmp, const char *command, const char *conninfo)
{
	char *quoted_command = idem_shell_quote(command), *q_tree = idem_shell_quote(tree);
	char *script;

	if (conninfo == NULL) {
		char *sandbox, *q_sandbox;

		/* a sandbox that does not start stops the rerun: never the caller's database */
		if (asprintf(&sandbox, "%s/sandbox", tmp) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		q_sandbox = idem_shell_quote(sandbox);
		if (asprintf(&script, "trap : INT TERM HUP; unset IDEM_DATABASE PGSERVICE; cd %s && "
		    "settings=$(idem-sandbox -D %s start) && eval \"$settings\" && sh -c %s; rc=$?; "
		    "idem-sandbox -D %s --purge stop >&2; exit $rc", q_tree, q_sandbox,
		    quoted_command, q_sandbox) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(sandbox);
		free(q_sandbox);
	} else {
		char *quoted_db = idem_shell_quote(conninfo);

		if (asprintf(&script, "trap : INT TERM HUP; cd %s && IDEM_DATABASE=%s sh -c %s",
		    q_tree, quoted_db, quoted_command) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(quoted_db);
	}
	free(quoted_command);
	free(q_tree);
	return script;
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
	json_decref(out->stalls);
	json_decref(out->rekeyed);
	json_decref(out->pending);
	for (i = 0; i < out->ncounts; i++)
		free(out->counts[i]);
	free(out->counts);
	free(out->digest);
	free(out->refused);
}

/* Reads the rerun's stream and compares it with the record: one line
 * per difference, or that the counts and the path are reproduced. 1 when
 * the rerun differs. */
static int
compare_rerun(const char *path, const json_t *record, const char *stream, int status,
	      FILE *report)
{
	const char *want = idem_json_str(record, "counts.digest");
	struct rerun_stream out;
	int differ = 0;

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
	return differ;
}

/* The revision of the record's seed checked out in the worktree tree of
 * the repository that holds dir, and the seed there hashed. 0 when it
 * hashes as recorded; 1, reported, when the revision is not in the
 * repository or the seed's bytes differ; -1 (err set) when git fails. */
static int
check_out(const char *path, const char *dir, const char *tree, const json_t *record, FILE *report,
	  struct idem_error *err)
{
	const char *revision = idem_json_str(record, "seed.revision");
	const char *seed = idem_json_str(record, "seed.repo_path");
	const char *want = idem_json_str(record, "seed.sha256"), *adapter;
	char *commit, *file, hex[65];
	int rc;

	if (asprintf(&commit, "%s^{commit}", revision) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	rc = git(dir, err, "rev-parse", "--quiet", "--verify", commit, (char *)NULL);
	free(commit);
	if (rc != 0) {
		if (rc > 0)
			fprintf(report, "%s: seed: commit %s is not in the repository: not rerun\n",
			    path, revision);
		return rc;
	}
	if ((rc = git(dir, err, "worktree", "add", "--quiet", "--detach", tree, revision,
	    (char *)NULL)) != 0)
		return rc < 0 ? -1 : idem_error_set(err, IDEM_EXIT_ENV,
		    "%s: git worktree add --detach %s %s failed", path, tree, revision);
	if (asprintf(&file, "%s/%s", tree, seed) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	rc = 0;
	if (idem_sha256_file(file, hex) < 0) {
		fprintf(report, "%s: seed: %s at revision %.12s cannot be read in its worktree: %s: "
		    "not rerun\n", path, seed, revision, strerror(errno));
		rc = 1;
	} else if (strcmp(hex, want) != 0) {
		fprintf(report, "%s: seed: %s at revision %.12s has SHA-256 %s in its worktree, the "
		    "record says %s: not rerun\n", path, seed, revision, hex, want);
		rc = 1;
	}
	free(file);
	/* the seed's adapter file, which the rerun's seed-gen reads there */
	if (rc == 0 && (adapter = idem_json_str(record, "queue.adapter.repo_path")) != NULL) {
		want = idem_json_str(record, "queue.adapter.sha256");
		if (asprintf(&file, "%s/%s", tree, adapter) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if (idem_sha256_file(file, hex) < 0) {
			fprintf(report, "%s: queue adapter: %s at revision %.12s cannot be read in its "
			    "worktree: %s: not rerun\n", path, adapter, revision, strerror(errno));
			rc = 1;
		} else if (want == NULL || strcmp(hex, want) != 0) {
			fprintf(report, "%s: queue adapter: %s at revision %.12s has SHA-256 %s in its "
			    "worktree, the record says %s: not rerun\n", path, adapter, revision, hex,
			    want ? want : "none");
			rc = 1;
		}
		free(file);
	}
	return rc;
}

/* The worktree and its directory tmp removed, with the worktree's
 * metadata in the repository of dir: by git worktree remove, or, when
 * that fails (a worktree half made), by removing the directory and
 * pruning the worktrees whose directories are gone. A worktree git never
 * began to make leaves nothing to remove. */
static void
remove_worktree(const char *dir, const char *tree, const char *tmp)
{
	char *const rm[] = { "rm", "-rf", "--", (char *)tree, NULL };
	struct idem_error err;
	pid_t pid;

	if (access(tree, F_OK) == 0 &&
	    git(dir, &err, "worktree", "remove", "--force", tree, (char *)NULL) != 0) {
		if ((pid = spawn(rm, STDERR_FILENO, 0, &err)) > 0)
			reap(pid);
		if (git(dir, &err, "worktree", "prune", (char *)NULL) != 0)
			idem_warn("%s: git worktree prune failed", dir);
	}
	if (rmdir(tmp) < 0)
		idem_warn("%s: not removed:", tmp);
}

int
idem_rerun(const char *path, const json_t *record, const char *conninfo, FILE *report,
	   struct idem_error *err)
{
	const char *command = idem_json_str(record, "reproduce");
	char dir[PATH_MAX], abs[PATH_MAX], tmp[96], tree[128], *script = NULL;
	char *stream = NULL;
	struct stop_guard guard;
	int status, rc;

	if (command == NULL || idem_json_str(record, "counts.digest") == NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: no reproduce command or digest recorded",
		    path);
	if (idem_json_str(record, "seed.revision") == NULL ||
	    idem_json_str(record, "seed.repo_path") == NULL || idem_json_str(record, "seed.sha256") == NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: no seed revision, path or SHA-256 "
		    "recorded", path);
	idem_dir_of(path, dir, sizeof(dir));
	if (realpath(dir, abs) == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", dir);
	/* a sandbox or nothing, and its URI as kill-at gives it to workers */
	if (conninfo != NULL && idem_pg_setenv_url(conninfo, err) < 0)
		return -1;
	idem_env_prefer_self();
	catch_stop_signals(&guard);
	if (idem_make_temp_dir(tmp, sizeof(tmp), "verify-record", 0711, err) < 0) {
		release_stop_signals(&guard, report);
		return -1;
	}
	snprintf(tree, sizeof(tree), "%s/worktree", tmp);
	rc = check_out(path, abs, tree, record, report, err);
	if (rc == 0 && !stopped()) {
		script = rerun_script(tree, tmp, command, conninfo);
		fprintf(report, "%s: rerun at revision %.12s (%s, SHA-256 as recorded)\n", path,
		    idem_json_str(record, "seed.revision"), idem_json_str(record, "seed.repo_path"));
		fflush(report);
		fprintf(stderr, "%s: rerunning: %s\n", argv0, command);
		if ((stream = run_capture(script, &guard.old_mask, &status, err)) == NULL)
			rc = -1;
	}
	free(script);
	remove_worktree(abs, tree, tmp);
	release_stop_signals(&guard, report);
	if (rc == 0)
		rc = compare_rerun(path, record, stream, status, report);
	free(stream);
	return rc;
}
