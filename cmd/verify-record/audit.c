/* audit.c: the history of a records directory audited, as
 * verify-record --history reads it: each commit, signed or not, and each
 * record, checked, judged by the verdict policy, stale or current, and
 * approved or awaiting approval */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "approval.h"
#include "audit.h"
#include "check.h"
#include "git.h"
#include "pg.h"
#include "seed.h"
#include "staleness.h"
#include "summary.h"
#include "tsv.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "yamljson.h"

/* An audit under way: whether anything failed so far, and the entries
 * kept for the summary of -m. */
struct audit {
	const struct idem_audit_options *o;
	struct checker *k;
	struct idem_staleness stale;
	struct idem_summary summary;
	char *now;		/* today */
	int bad;
};

static int
by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The summary of -m, of the records checked. */
static void
write_summary(struct audit *a, const struct check *checks, size_t nchecks)
{
	struct idem_summary_record *records = idem_ereallocarray(NULL, nchecks + 1, sizeof(*records));
	struct idem_error err;
	size_t i;

	for (i = 0; i < nchecks; i++)
		records[i] = (struct idem_summary_record){ checks[i].path, checks[i].principal,
			checks[i].record, checks[i].nreasons > 0 };
	a->summary.dir = a->o->dir;
	a->summary.since = a->o->since;
	a->summary.signers = a->k->signers;
	a->summary.signers_path = a->k->signers_path;
	if (idem_summary_write(&a->summary, a->o->summary_path, records, nchecks, a->bad, &err) < 0)
		idem_die_error(&err);
	free(records);
}

/* One entry of the audit. In GitHub's form, file (with line when it is
 * not 0) is where the annotation points: a FAIL is an error, stale and
 * warn are warnings, ok says nothing. */
static void
emit(struct audit *a, const char *kind, const char *id, const char *status, const char *detail,
     const char *file, long line)
{
	if (a->o->summary_path != NULL)
		idem_summary_keep(&a->summary, kind, id, status, detail);
	a->bad |= strcmp(status, "ok") != 0;
	switch (a->o->format) {
	case IDEM_AUDIT_TSV: {
		const char *row[4] = { kind, id, status, detail };

		idem_tsv_write_row(stdout, "audit", row, 4);
		break;
	}
	case IDEM_AUDIT_GITHUB:
		if (strcmp(status, "ok") == 0)
			break;
		printf("::%s file=%s", strcmp(status, "FAIL") == 0 ? "error" : "warning", file);
		if (line > 0)
			printf(",line=%ld", line);
		printf("::%s %s: %s\n", kind, status, detail);
		break;
	default:
		printf("%-7s %-48s %-6s %s\n", kind, id, status, detail);
	}
}

/* The line of a top-level key in a record's file, as mkrecord writes it
 * (the key at the start of a line); 0 when it is not there. */
static long
key_line(const char *path, const char *key)
{
	size_t klen = strlen(key), cap = 0;
	char *line = NULL;
	long n = 0, found = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return 0;
	while (!found && getline(&line, &cap, f) > 0) {
		n++;
		if (strncmp(line, key, klen) == 0 && line[klen] == ':')
			found = n;
	}
	free(line);
	fclose(f);
	return found;
}

/* Whether the record shows a guard the database enforced: a guard of a
 * kind other than none, and a probe whose insert it refused. */
static int
guard_enforced(const json_t *record)
{
	const char *probe = idem_json_str(record, "probe.result");
	const json_t *g;
	size_t i;
	int guarded = 0;

	json_array_foreach(json_object_get(record, "guards"), i, g)
		guarded |= idem_json_str(g, "kind") != NULL && strcmp(idem_json_str(g, "kind"), "none") != 0;
	return guarded && probe && strcmp(probe, "enforced") == 0;
}

/* A best-effort record, whose guard the database cannot enforce, stands
 * only with its owner's approval: without it, a FAIL naming the owner. */
static const char *
best_effort_policy(const struct check *c, int approved, char *out, size_t size)
{
	const char *owner = idem_json_str(c->record, "reconciliation_owner");
	const char *why = idem_json_str(c->record, "best_effort");

	if (approved)
		return NULL;
	snprintf(out, size, "verdict best effort: the database cannot enforce the guard (%s); "
	    "it stands only with the approval of %s", why ? why : "no reason recorded",
	    owner ? owner : "the owner, and the record names no reconciliation_owner");
	return "FAIL";
}

/* The verdict policy, for the newest record of a rehearsal of format 4
 * or later (older ones are judged by their arithmetic alone): a verdict
 * other than the one the seed expects (pass, unless it says fail) is a
 * FAIL; best effort needs the owner's approval; a pass without an enforced
 * guard is a warning. Returns the status and writes the detail; NULL when
 * the policy has nothing to say. */
static const char *
verdict_policy(const struct check *c, int approved, char *out, size_t size)
{
	const char *verdict = idem_json_str(c->record, "verdict");
	const char *expected = idem_json_str(c->record, "expected_verdict");
	const char *rehearsal = idem_json_str(c->record, "rehearsal");

	if (idem_json_num(c->record, "record") < 4 || verdict == NULL)
		return NULL;
	if (expected == NULL)
		expected = "pass";
	if (strcmp(verdict, "best effort") == 0 && strcmp(expected, "pass") == 0)
		return best_effort_policy(c, approved, out, size);
	if (strcmp(verdict, expected) != 0) {
		if (strcmp(expected, "fail") == 0)
			snprintf(out, size, "verdict %s, but the seed expects this example to fail",
			    verdict);
		else
			snprintf(out, size, "verdict fail: the current record of %s fails",
			    rehearsal ? rehearsal : "its rehearsal");
		return "FAIL";
	}
	if (strcmp(verdict, "pass") == 0 && !guard_enforced(c->record)) {
		snprintf(out, size, "verdict pass with no enforced guard: the database does not "
		    "stop a duplicate");
		return "warn";
	}
	return NULL;
}

/* The database of -d, for the queue versions in use: read, never
 * written, whatever the database. */
static PGconn *
connect_read_only(const char *conninfo)
{
	struct idem_error err;
	PGconn *db;
	PGresult *res;

	if ((db = idem_pg_connect(conninfo, &err)) == NULL)
		idem_die_error(&err);
	if ((res = idem_pg_exec(db, "SET default_transaction_read_only", &err,
	    "SET default_transaction_read_only = on", 0, NULL)) == NULL)
		idem_die_error(&err);
	PQclear(res);
	return db;
}

/* The trust root from the base: each commit that changed allowed_signers,
 * accepted or refused at the line it added, and a base without the file,
 * which trusts nobody. */
static void
audit_trust(struct audit *a)
{
	const struct trust *t = a->o->trust;
	char detail[1400];
	size_t i;

	if (!t->at_base) {
		snprintf(detail, sizeof(detail), "%s: not in %s, so no key is trusted; give one with "
		    "-f", t->label, a->o->since);
		emit(a, "signers", t->path, "FAIL", detail, t->path, 0);
	}
	for (i = 0; i < t->nchanges; i++)
		emit(a, "signers", t->changes[i].id, t->changes[i].accepted ? "ok" : "FAIL",
		    t->changes[i].detail, t->path, t->changes[i].line);
}

/* Each commit touching the directory since o->since: signed by a key
 * trusted where it stands in the history, or why not. */
static void
audit_commits(struct audit *a)
{
	struct idem_git_trust only = { .from = "", .signers = a->k->signers };
	const struct trust *t = a->o->trust;
	struct idem_git_commit_check *commits;
	struct idem_error err;
	char detail[1600];
	size_t ncommits, i;

	if (idem_git_history(a->o->dir, a->o->since, t ? t->epochs : &only, t ? t->nepochs : 1,
	    &commits, &ncommits, &err) < 0)
		idem_die_error(&err);
	for (i = 0; i < ncommits; i++) {
		if (commits[i].principal)
			snprintf(detail, sizeof(detail), "signed by %s: %s", commits[i].principal,
			    commits[i].summary);
		else
			snprintf(detail, sizeof(detail), "%s: %s", commits[i].reason, commits[i].summary);
		emit(a, "commit", commits[i].id, commits[i].principal ? "ok" : "FAIL", detail,
		    a->o->dir, 0);
		free(commits[i].principal);
	}
	free(commits);
}

/* The records of the directory, dir/NAME.yaml, in the order of their
 * names; *n of them. Caller frees each and the list. */
static char **
record_paths(const char *dir, size_t *n)
{
	char **paths = NULL, *name;
	struct dirent *e;
	size_t i;
	DIR *d;

	*n = 0;
	if ((d = opendir(dir)) == NULL)
		idem_die(IDEM_EXIT_USAGE, "%s:", dir);
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);

		if (len > 5 && strcmp(e->d_name + len - 5, ".yaml") == 0) {
			paths = idem_ereallocarray(paths, *n + 1, sizeof(char *));
			paths[(*n)++] = idem_estrdup(e->d_name);
		}
	}
	closedir(d);
	if (*n > 1)
		qsort(paths, *n, sizeof(char *), by_name);
	for (i = 0; i < *n; i++) {
		name = paths[i];
		if (asprintf(&paths[i], "%s/%s", dir, name) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(name);
	}
	return paths;
}

/* Whether each record that verified is the newest of its rehearsal, by
 * its created_at; 1 for one without a rehearsal or a created_at. */
static void
newest_of(const struct check *checks, size_t n, int *newest)
{
	struct { const char *rehearsal, *created_at; } *latest;
	size_t nlatest = 0, i, j;

	latest = idem_ereallocarray(NULL, n + 1, sizeof(*latest));
	for (i = 0; i < n; i++) {
		const char *name = idem_json_str(checks[i].record, "rehearsal");
		const char *at = idem_json_str(checks[i].record, "created_at");

		if (checks[i].nreasons > 0 || name == NULL || at == NULL)
			continue;
		for (j = 0; j < nlatest && strcmp(latest[j].rehearsal, name) != 0; j++)
			;
		if (j == nlatest) {
			latest[nlatest].rehearsal = name;
			latest[nlatest++].created_at = at;
		} else if (strcmp(at, latest[j].created_at) > 0) {
			latest[j].created_at = at;
		}
	}
	for (i = 0; i < n; i++) {
		const char *name = idem_json_str(checks[i].record, "rehearsal");
		const char *at = idem_json_str(checks[i].record, "created_at");

		newest[i] = 1;
		for (j = 0; j < nlatest && checks[i].nreasons == 0 && name && at; j++)
			if (strcmp(latest[j].rehearsal, name) == 0)
				newest[i] = strcmp(latest[j].created_at, at) <= 0;
	}
	free(latest);
}

/* One record: why it does not verify; else what the verdict policy says
 * of the newest of its rehearsal, whether it is stale, and its approval,
 * which -a requires of the newest. */
static void
audit_record(struct audit *a, const struct check *c, int newest)
{
	struct idem_approval approval;
	struct idem_error err;
	const char *status = NULL, *policy, *verdict = idem_json_str(c->record, "verdict");
	const char *expected = idem_json_str(c->record, "expected_verdict");
	char detail[1600], *ok;
	size_t i;

	for (i = 0; i < c->nreasons; i++)
		emit(a, "record", c->path, "FAIL", c->reasons[i], c->path, 0);
	if (c->nreasons > 0)
		return;
	idem_approval_check(c->path, a->k->signers, a->k->signers_path, &approval);
	/* a draft, from a seed that was not ready, never passes */
	if (json_is_true(json_object_get(c->record, "draft")))
		emit(a, "record", c->path, status = "FAIL", "draft: made with seed-gen --draft "
		    "from a seed that is not ready; a draft record never passes the audit", c->path,
		    key_line(c->path, "draft"));
	if (newest && (policy = verdict_policy(c, approval.principal != NULL, detail,
	    sizeof(detail))) != NULL)
		emit(a, "record", c->path, status = policy, detail, c->path, key_line(c->path,
		    strcmp(policy, "FAIL") == 0 ? "verdict" : "guards"));
	if (idem_staleness(&a->stale, c->record, a->now, newest, detail, sizeof(detail), &err) < 0)
		idem_die_error(&err);
	if (*detail)
		emit(a, "record", c->path, "stale", detail, c->path, 0);
	if (a->o->require_approval && newest && approval.principal == NULL) {
		emit(a, "record", c->path, "FAIL", approval.text, c->path, 0);
	} else if (!*detail && status == NULL) {
		if (asprintf(&ok, "%s%s, signed by %s; %s", verdict, expected &&
		    strcmp(verdict, "fail") == 0 && strcmp(expected, "fail") == 0 ?
		    " as the seed expects" : "", c->principal, approval.text) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		emit(a, "record", c->path, "ok", ok, c->path, 0);
		free(ok);
	}
	idem_approval_free(&approval);
}

/* Whether path is the source named, or a file under it. */
static int
under(const char *path, const char *source)
{
	size_t len = strlen(source);

	while (len > 0 && source[len - 1] == '/')
		len--;
	return strncmp(path, source, len) == 0 && (path[len] == '\0' || path[len] == '/');
}

/* The first file the pull request changed that a record depends on: its
 * seed, its queue adapter, or a worker source the seed declares; NULL
 * when none. */
static const char *
changed_dependency(const json_t *record, char **changed, size_t nchanged)
{
	const char *seed_path = idem_json_str(record, "seed.path");
	const char *repo_path = idem_json_str(record, "seed.repo_path");
	const char *adapter = idem_json_str(record, "queue.adapter.repo_path");
	const char *found = NULL;
	struct idem_seed seed;
	struct idem_error err;
	size_t i, j;

	for (i = 0; i < nchanged && !found; i++)
		if ((repo_path && strcmp(changed[i], repo_path) == 0) ||
		    (adapter && strcmp(changed[i], adapter) == 0))
			found = changed[i];
	if (found || seed_path == NULL)
		return found;
	/* the seed as the pull request leaves it names the sources */
	if (idem_seed_load(&seed, seed_path, &err) == 0)
		for (i = 0; i < nchanged && !found; i++)
			for (j = 0; j < seed.nworker_sources && !found; j++)
				if (under(changed[i], seed.worker_sources[j]))
					found = changed[i];
	idem_seed_free(&seed);
	return found;
}

/*
 * With a base: a pull request that changes what the newest record of a
 * rehearsal depends on (its seed, its queue adapter, or the worker
 * sources the seed declares), and brings no new record of it, leaves the record speaking
 * of another system. The record is stale, and the check fails on it.
 */
static void
audit_changes(struct audit *a, const struct check *checks, size_t n, const int *newest)
{
	char **changed = NULL, **in_dir = NULL, detail[1200];
	size_t nchanged = 0, nin_dir = 0, i, j;
	struct idem_error err;

	if (idem_git_changed(a->o->dir, a->o->since, 1, &changed, &nchanged, &err) < 0 ||
	    idem_git_changed(a->o->dir, a->o->since, 0, &in_dir, &nin_dir, &err) < 0)
		idem_die_error(&err);
	for (i = 0; i < n; i++) {
		const char *name = strrchr(checks[i].path, '/'), *file;

		name = name ? name + 1 : checks[i].path;
		if (!newest[i] || checks[i].nreasons > 0)
			continue;
		for (j = 0; j < nin_dir && strcmp(in_dir[j], name) != 0; j++)
			;
		if (j < nin_dir || (file = changed_dependency(checks[i].record, changed, nchanged)) == NULL)
			continue;
		snprintf(detail, sizeof(detail), "stale: %s changed in this pull request", file);
		emit(a, "record", checks[i].path, "FAIL", detail, file, 0);
	}
	idem_free_list(changed, nchanged);
	idem_free_list(in_dir, nin_dir);
}

int
idem_audit(const struct idem_audit_options *o, struct checker *k)
{
	struct audit a = { .o = o, .k = k };
	struct check *checks = NULL;
	char **paths = NULL;
	size_t n = 0, i;
	int *newest;

	/* the queue versions in use, before anything is reported */
	if (o->conninfo != NULL && !o->commits_only)
		a.stale.db = connect_read_only(o->conninfo);
	a.now = idem_date_from_now(0);
	if (o->format == IDEM_AUDIT_TSV)
		idem_tsv_write_header(stdout);
	if (o->trust != NULL)
		audit_trust(&a);
	audit_commits(&a);
	if (!o->commits_only)
		paths = record_paths(o->dir, &n);
	checks = idem_ereallocarray(NULL, n + 1, sizeof(*checks));
	newest = idem_ereallocarray(NULL, n + 1, sizeof(*newest));
	for (i = 0; i < n; i++) {
		checks[i] = (struct check){ .path = paths[i] };
		idem_check_record(k, &checks[i]);
	}
	newest_of(checks, n, newest);
	for (i = 0; i < n; i++)
		audit_record(&a, &checks[i], newest[i]);
	if (o->since != NULL && !o->commits_only)
		audit_changes(&a, checks, n, newest);
	if (o->summary_path != NULL)
		write_summary(&a, checks, n);
	for (i = 0; i < n; i++)
		idem_check_free(&checks[i]);
	idem_free_list(paths, n);
	PQfinish(a.stale.db);
	idem_staleness_free(&a.stale);
	idem_summary_free(&a.summary);
	free(newest);
	free(checks);
	free(a.now);
	return a.bad ? IDEM_EXIT_FINDING : 0;
}
