/* build.c: the record (idem-record(5)) of a run, as mkrecord builds it */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "build.h"
#include "git.h"
#include "observed.h"
#include "path.h"
#include "run.h"
#include "error.h"
#include "text.h"
#include "record.h"

static json_t *
seed_text(const struct idem_run *run, const char *name)
{
	return idem_run_text(idem_run_seed(run, name));
}

/* The queue: the queue row's, else the seed row's, whose version is not
 * known. */
static json_t *
queue(const struct idem_run *run, const struct idem_git_revision *adapter)
{
	json_t *q;

	if (run->queue != NULL)
		q = json_deep_copy(run->queue);
	else
		q = json_pack("{s:s,s:o,s:n}", "kind", idem_run_seed(run, "queue_kind") ?
		    idem_run_seed(run, "queue_kind") : "idem", "name", seed_text(run, "queue"),
		    "version");
	/* the adapter file, kept as the seed is: where, what bytes, at which
	 * revision */
	if (adapter != NULL)
		json_object_set_new(q, "adapter", json_pack("{s:s,s:s,s:s,s:s,s:b}",
		    "path", idem_run_seed(run, "adapter"), "repo_path", adapter->path,
		    "sha256", idem_run_seed(run, "adapter_sha256"), "blob", adapter->blob,
		    "dirty", adapter->dirty));
	return q;
}

static json_t *
seed_json_field(const struct idem_run *run, const char *name)
{
	const char *v = idem_run_seed(run, name);
	json_t *j = v ? json_loads(v, 0, NULL) : NULL;

	return j ? j : json_array();
}

/* The log lines of one attempt: those naming its job, attempt and message. */
static json_t *
log_of(const struct idem_run *run, const char *job, long long attempt, const char *msg)
{
	json_t *lines = json_array(), *l;
	char *key;
	size_t i;

	if (asprintf(&key, "%s\t%lld", job, attempt) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	json_array_foreach(json_object_get(run->logs_of, key), i, l) {
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
calls_of_attempts(const struct idem_run *run)
{
	size_t n = json_array_size(run->attempts), nd = 0, i, lo, hi;
	struct delivery *d = idem_ereallocarray(NULL, n + 1, sizeof(*d));
	json_t *per_attempt = json_array(), *a, *call;

	json_array_foreach(run->attempts, i, a) {
		json_array_append_new(per_attempt, json_array());
		if (!json_is_integer(json_object_get(a, "pid")))
			continue;
		d[nd].pid = json_integer_value(json_object_get(a, "pid"));
		d[nd].consumed_at = json_string_value(json_object_get(a, "consumed_at"));
		d[nd++].attempt = i;
	}
	qsort(d, nd, sizeof(*d), by_process_and_time);
	json_array_foreach(run->calls, i, call) {
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
			attempt = json_array_get(run->attempts, d[lo - 1].attempt);
		json_object_set_new(call, "job", attempt ? json_incref(json_object_get(attempt, "job")) :
		    json_null());
		json_object_set_new(call, "attempt", attempt ?
		    json_incref(json_object_get(attempt, "attempt")) : json_null());
		if (attempt != NULL)
			json_array_append_new(json_array_get(per_attempt, d[lo - 1].attempt),
			    json_pack("{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}",
			    "at", json_object_get(call, "at"), "method", json_object_get(call, "method"),
			    "path", json_object_get(call, "path"),
			    "idempotency_key", json_object_get(call, "idempotency_key"),
			    "business_key", json_object_get(call, "business_key"),
			    "status", json_object_get(call, "status"),
			    "answer", json_object_get(call, "answer"),
			    "effect", json_object_get(call, "effect"),
			    "response_id", json_object_get(call, "response_id"),
			    "id", json_object_get(call, "id"),
			    "answered_at", json_object_get(call, "answered_at")));
	}
	free(d);
	return per_attempt;
}

/* The calls as the record lists them, keys in the order of idem-record(5). */
static json_t *
calls(const struct idem_run *run)
{
	static const char *const keys[] = { "at", "worker", "pid", "job", "attempt", "method", "path",
		"idempotency_key", "body_sha256", "business_key", "status", "answer", "effect",
		"response_id", "id", "answered_at", NULL };
	json_t *out = json_array(), *call, *row;
	size_t i, k;

	json_array_foreach(run->calls, i, call) {
		row = json_object();
		for (k = 0; keys[k]; k++)
			json_object_set(row, keys[k], json_object_get(call, keys[k]));
		json_array_append_new(out, row);
	}
	return out;
}

/* "msg<TAB>attempt" of an attempt or a lease row. */
static char *
msg_and_attempt(const json_t *row)
{
	const char *msg = json_string_value(json_object_get(row, "msg"));
	char *key;

	if (asprintf(&key, "%s\t%lld", msg ? msg : "",
	    (long long)json_integer_value(json_object_get(row, "attempt"))) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	return key;
}

/* The leases kill-at ended, under the message and attempt they held:
 * the last row of each. */
static json_t *
leases_by_attempt(const struct idem_run *run)
{
	json_t *out = json_object(), *lease;
	size_t i;
	char *key;

	json_array_foreach(run->leases, i, lease) {
		key = msg_and_attempt(lease);
		json_object_set_new(out, key, json_pack("{s:O,s:O}", "at", json_object_get(lease, "at"),
		    "why", json_object_get(lease, "why")));
		free(key);
	}
	return out;
}

static json_t *
evidence(const struct idem_run *run)
{
	json_t *rows = json_array(), *a, *per_attempt = calls_of_attempts(run), *kills_of = json_object();
	json_t *kill, *none = json_array(), *leases = leases_by_attempt(run), *lease;
	size_t i;
	char *key;

	/* each attempt is held against the kills of its job alone */
	json_array_foreach(run->kills, i, kill) {
		const char *job = json_string_value(json_object_get(kill, "job"));
		json_t *list;

		if (job == NULL)
			continue;
		if ((list = json_object_get(kills_of, job)) == NULL)
			json_object_set_new(kills_of, job, list = json_array());
		json_array_append(list, kill);
	}
	json_array_foreach(run->attempts, i, a) {
		const char *job = json_string_value(json_object_get(a, "job"));
		long long attempt = json_integer_value(json_object_get(a, "attempt"));
		const char *msg = json_string_value(json_object_get(a, "msg"));
		char outcome[128];
		json_t *row, *published;

		kill = job ? json_object_get(kills_of, job) : NULL;
		idem_path_outcome(a, kill ? kill : none, run->recovers, outcome, sizeof(outcome));
		row = json_object();
		json_object_set(row, "job", json_object_get(a, "job"));
		json_object_set(row, "msg_id", json_object_get(a, "msg_id"));
		json_object_set(row, "attempt", json_object_get(a, "attempt"));
		published = json_object_get(run->published_at, msg);
		json_object_set_new(row, "published_at", published ? json_incref(published) : json_null());
		json_object_set(row, "consumed_at", json_object_get(a, "consumed_at"));
		json_object_set(row, "written_at", json_object_get(a, "written_at"));
		json_object_set(row, "committed_at", json_object_get(a, "committed_at"));
		json_object_set(row, "acked_at", json_object_get(a, "acked_at"));
		json_object_set(row, "rows_written", json_object_get(a, "rows_written"));
		json_object_set(row, "rows_updated", json_object_get(a, "rows_updated"));
		json_object_set_new(row, "outcome", json_string(outcome));
		json_object_set(row, "branch", json_object_get(a, "branch"));
		json_object_set_new(row, "log", log_of(run, job ? job : "", attempt, msg));
		json_object_set(row, "calls", json_array_get(per_attempt, i));
		key = msg_and_attempt(a);
		lease = json_object_get(leases, key);
		json_object_set_new(row, "lease_ended", lease ? json_incref(lease) : json_null());
		free(key);
		json_array_append_new(rows, row);
	}
	json_decref(per_attempt);
	json_decref(kills_of);
	json_decref(none);
	json_decref(leases);
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
measures(const struct idem_run *run)
{
	json_t *out = json_deep_copy(run->measures), *m;
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
kill_points(const struct idem_run *run)
{
	json_t *out = json_array(), *kill, *rec, *recover_of = json_object();
	size_t i;
	char *key;

	/* the recover row of a kill: the last with its job and killed_at */
	json_array_foreach(run->recovers, i, rec) {
		if ((key = job_and_time(rec)) != NULL)
			json_object_set(recover_of, key, rec);
		free(key);
	}
	json_array_foreach(run->kills, i, kill) {
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
passes(const struct idem_run *run, json_t *totals)
{
	static const char *const names[] = { "effects", "duplicates", "missing", "pending",
		"external", "external_duplicates", NULL };
	int external = run->external != NULL || json_object_get(totals, "external") != NULL;
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
not_exercised(const struct idem_run *run)
{
	static const char *const steps[] = { "before-commit", "after-commit", "external-call", NULL };
	json_t *out = json_array(), *kill, *sc;
	const char *kind;
	size_t i, j;
	int race = 0;

	for (i = 0; steps[i]; i++) {
		int seen = 0;

		json_array_foreach(run->kills, j, kill)
			seen |= strcmp(json_string_value(json_object_get(kill, "step")), steps[i]) == 0;
		if (!seen && strcmp(steps[i], "after-commit") == 0 && json_array_size(run->findings) > 0) {
			json_array_foreach(run->findings, j, kill)
				json_array_append_new(out, json_sprintf("a kill at after-commit: %s",
				    json_string_value(kill)));
		} else if (!seen) {
			char what[96];

			snprintf(what, sizeof(what), "a kill at %s", steps[i]);
			json_array_append_new(out, json_string(what));
		}
	}
	json_array_foreach(run->scenarios, j, sc)
		race |= strcmp(json_string_value(json_object_get(sc, "fault")), "race") == 0;
	if (!race)
		json_array_append_new(out, json_string("two workers racing on one business key"));
	if (run->copies == 0)
		json_array_append_new(out, json_string("a duplicate publish"));
	if (run->external != NULL) {
		static const char *const faults[][2] = {
			{ "vendor-error", "a vendor error on a first call" },
			{ "vendor-timeout", "a vendor timeout on a first call" },
			{ "vendor-lost-reply", "a charge whose answer was lost" },
			{ "vendor-late-reply", "a charge whose answer came late" },
			{ "vendor-forget-keys", "a retry after the vendor forgot its idempotency keys" },
		};

		for (i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
			int seen = 0;

			json_array_foreach(run->scenarios, j, sc)
				seen |= strcmp(json_string_value(json_object_get(sc, "fault")), faults[i][0]) == 0;
			if (!seen)
				json_array_append_new(out, json_string(faults[i][1]));
		}
	}
	kind = idem_run_seed(run, "queue_kind") ? idem_run_seed(run, "queue_kind") : "idem";
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

/* The worker the seed declares, and the one kill-at ran. */
static json_t *
worker(const struct idem_run *run)
{
	json_t *observed = json_null(), *as_declared = idem_observed_as_declared(run);

	if (run->worker != NULL) {
		observed = json_deep_copy(run->worker);
		json_object_del(observed, "words");
		json_object_set_new(observed, "as_declared", as_declared ? as_declared : json_null());
		if (as_declared == json_false())
			json_object_set_new(observed, "note",
			    json_string("not the worker the ticket names"));
	}
	/* kill-at hashes the executable and script it ran, never an image */
	return json_pack("{s:o,s:b,s:o,s:o,s:o}", "image", seed_text(run, "worker_image"),
	    "image_observed", 0, "version", seed_text(run, "worker_version"), "command",
	    seed_text(run, "worker_command"), "observed", observed);
}

/* A baseline that failed fails the record, whatever the counts say. */
static int
baseline_failed(const struct idem_run *run)
{
	return run->baseline != NULL &&
	    strcmp(json_string_value(json_object_get(run->baseline, "result")), "failed") == 0;
}

/* The stalls whose bounded wait ran out and the held leases that reached
 * their bound: each is a finding that fails the record. */
static size_t
bound_findings(const struct idem_run *run)
{
	const json_t *row;
	size_t i, n = 0;

	json_array_foreach(run->stalls, i, row)
		n += json_string_value(json_object_get(row, "release")) &&
		    strcmp(json_string_value(json_object_get(row, "release")), "bound") == 0;
	json_array_foreach(run->leases, i, row)
		n += json_string_value(json_object_get(row, "why")) &&
		    strcmp(json_string_value(json_object_get(row, "why")), "bound") == 0;
	return n;
}

/* The sandbox account's findings: each fails the record. */
static size_t
account_findings(const struct idem_run *run)
{
	return run->account ? json_array_size(json_object_get(run->account, "findings")) : 0;
}

/* The business keys whose calls changed their Idempotency-Key, against
 * a vendor that honours it: each fails the record, since a retry under a
 * new key is charged again or not by luck. Against a vendor that does not
 * honour keys a changed key fails nothing by itself: its second charges
 * are duplicates, which fail as such. */
static size_t
rekeyed_findings(const struct idem_run *run)
{
	if (run->external == NULL || !json_is_true(json_object_get(run->external,
	    "honours_idempotency_key")))
		return 0;
	return json_array_size(run->rekeyed);
}

/* The pending checks that failed: a killed call with no row of the
 * pending table, or none naming the owner, a row left open, and the
 * check not made, the table lacking a column the stream names. */
static size_t
pending_findings(const struct idem_run *run)
{
	const json_t *row;
	size_t i, n = 0;

	json_array_foreach(run->pending_calls, i, row)
		n += !idem_record_pending_ok(json_string_value(json_object_get(row, "result")));
	return n + (idem_record_pending_unchecked(run->measures) != NULL);
}

/* What was rehearsed: the seed at its revision, the queue, the worker,
 * the account, the effect and the external call. */
static void
rehearsed(json_t *r, const struct idem_run *run, const struct idem_git_revision *rev,
	  const struct idem_git_revision *adapter, const char *reproduce)
{
	json_object_set_new(r, "seed", json_pack("{s:o,s:s,s:o,s:s,s:s,s:b}",
	    "path", seed_text(run, "path"), "repo_path", rev->path,
	    "sha256", seed_text(run, "sha256"), "blob", rev->blob, "revision", rev->commit,
	    "dirty", rev->dirty));
	json_object_set_new(r, "reproduce", json_string(reproduce));
	json_object_set_new(r, "job_type", seed_text(run, "job_type"));
	json_object_set_new(r, "queue", queue(run, adapter));
	json_object_set_new(r, "database", idem_observed_database(run));
	json_object_set_new(r, "worker", worker(run));
	json_object_set_new(r, "retry", json_pack("{s:o,s:o}", "visibility_timeout_ms",
	    idem_run_number(idem_run_seed(run, "visibility_timeout_ms")), "max_attempts",
	    idem_run_number(idem_run_seed(run, "max_attempts"))));
	json_object_set_new(r, "sandbox_account", seed_text(run, "sandbox_account"));
	json_object_set_new(r, "account", run->account ? json_incref(run->account) : json_null());
	json_object_set_new(r, "effect", json_pack("{s:o,s:o,s:o,s:o,s:o}", "name",
	    seed_text(run, "effect_name"), "table", seed_text(run, "effect_table"),
	    "key", seed_json_field(run, "key_columns"), "key_scope", seed_text(run, "key_scope"),
	    "duplicate_acceptor", seed_text(run, "duplicate_acceptor")));
	json_object_set_new(r, "external", run->external ? json_incref(run->external) : json_null());
}

/* What the run did: its jobs, scenarios, guards, kill points and stalls, and the
 * attempts and calls it made. */
static void
happened(json_t *r, const struct idem_run *run)
{
	json_object_set_new(r, "jobs", json_integer(run->jobs));
	json_object_set_new(r, "scenarios", json_incref(run->scenarios));
	json_object_set_new(r, "guards", json_incref(run->guards));
	json_object_set_new(r, "probe", run->probe ? json_incref(run->probe) : json_null());
	json_object_set_new(r, "declared_guard", run->declared_guard ? json_incref(run->declared_guard) :
	    json_null());
	json_object_set_new(r, "kill_points", kill_points(run));
	json_object_set_new(r, "stalls", json_incref(run->stalls));
	json_object_set_new(r, "missed", json_incref(run->missed));
	json_object_set_new(r, "baseline", run->baseline ? json_incref(run->baseline) : json_null());
	json_object_set_new(r, "evidence", evidence(run));
	json_object_set_new(r, "attempts", json_pack("{s:I,s:I,s:I,s:I,s:I,s:o}",
	    "total", (json_int_t)run->all_attempts, "acked", (json_int_t)run->acked,
	    "not_acked", (json_int_t)run->not_acked, "retried", (json_int_t)run->retried,
	    "listed", (json_int_t)json_array_size(json_object_get(r, "evidence")),
	    "sample_jobs", idem_run_volume(run) ? json_integer(SAMPLE_JOBS) : json_null()));
	json_object_set_new(r, "evidence_file", !idem_run_volume(run) ? json_null() :
	    json_pack("{s:s++,s:s,s:s,s:I}", "path", "evidence/", run->evidence_sha256, ".tsv.gz",
	    "sha256", run->evidence_sha256, "format", "idem-tsv, gzip", "rows",
	    (json_int_t)run->evidence_rows));
	json_object_set_new(r, "calls", calls(run));
	json_object_set_new(r, "forgotten_keys", json_incref(run->forgot));
	json_object_set_new(r, "rekeyed", json_incref(run->rekeyed));
	json_object_set_new(r, "pending_calls", json_incref(run->pending_calls));
}

/* The counts of the run with their totals (taken), and the keys and
 * external calls that took effect more often than expected. */
static void
counts(json_t *r, const struct idem_run *run, json_t *totals)
{
	json_t *total_rows = json_array(), *dups = json_array(), *dup_calls = json_array(), *row;
	const char *name;
	size_t i;

	json_object_foreach(totals, name, row)
		json_array_append_new(total_rows, json_pack("{s:s,s:O,s:O}", "name", name,
		    "expected", json_object_get(row, "expected"), "observed", json_object_get(row, "observed")));
	json_array_foreach(run->counts_after, i, row) {
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
	    "query", idem_run_text(json_string_value(json_object_get(run->queries, "count"))),
	    "expected", run->expect ? json_incref(run->expect) : json_null(),
	    "totals", totals, "digest", idem_run_text(json_string_value(json_object_get(run->digests, "after"))),
	    "before", json_incref(run->counts_before), "after", json_incref(run->counts_after),
	    "total_rows", total_rows));
	json_object_set_new(r, "duplicate_keys", dups);
	json_object_set_new(r, "duplicate_calls", dup_calls);
}

json_t *
idem_build_record(const struct idem_run *run, const struct idem_git_revision *rev,
		  const struct idem_git_revision *adapter, const char *reproduce, const char *next_review, json_t *waiting)
{
	json_t *r = json_object(), *totals;
	char now[32];
	int pass;

	idem_format_time(idem_now_us(), now);
	totals = count_totals(run->counts_after);
	/* a kill point, race or stall the run did not reach proves nothing,
	 * and a worker other than the one the seed declares proves nothing
	 * of it; a stall or a lease that reached its bound is a finding, and
	 * so are a changed key against a vendor that honours keys and a
	 * pending check that failed */
	pass = passes(run, totals) && json_array_size(run->missed) == 0 &&
	    !json_is_false(idem_observed_as_declared(run)) && !baseline_failed(run) &&
	    account_findings(run) == 0 && bound_findings(run) == 0 &&
	    rekeyed_findings(run) == 0 && pending_findings(run) == 0;
	json_object_set_new(r, "record", json_integer(IDEM_RECORD_FORMAT));
	json_object_set_new(r, "rehearsal", seed_text(run, "rehearsal"));
	/* counts that pass behind a guard the database cannot enforce are
	 * best effort, for the owner to accept */
	json_object_set_new(r, "verdict", json_string(!pass ? "fail" :
	    idem_run_seed(run, "best_effort") ? "best effort" : "pass"));
	json_object_set_new(r, "expected_verdict",
	    run->expected_verdict ? json_incref(run->expected_verdict) : json_null());
	if (idem_run_seed(run, "draft") && strcmp(idem_run_seed(run, "draft"), "true") == 0)
		json_object_set_new(r, "draft", json_true());
	if (idem_run_seed(run, "best_effort"))
		json_object_set_new(r, "best_effort", seed_text(run, "best_effort"));
	json_object_set_new(r, "created_at", json_string(now));
	rehearsed(r, run, rev, adapter, reproduce);
	happened(r, run);
	counts(r, run, totals);
	json_object_set_new(r, "measures", measures(run));
	json_object_set_new(r, "waiting", waiting);
	json_object_set_new(r, "reconciliation_owner", seed_text(run, "reconciliation_owner"));
	json_object_set_new(r, "next_review", json_string(next_review));
	json_object_set_new(r, "unproven", json_pack("{s:o,s:o}", "cannot_reproduce",
	    idem_observed_differences(run), "not_exercised", not_exercised(run)));
	json_object_set_new(r, "counts_differ", json_boolean(!passes(run, totals)));
	return r;
}
