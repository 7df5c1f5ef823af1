#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "error.h"
#include "path.h"

static const char *
text(const json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));

	return v ? v : "";
}

static long long
number(const json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}

/* Whether a recover row names the message killed at that time: the
 * delivery killed, as the database saw it. */
static int
recovered(const char *msg, const json_t *killed_at, const json_t *recovers)
{
	const json_t *rec;
	size_t i;

	json_array_foreach(recovers, i, rec)
		if (strcmp(text(rec, "msg"), msg) == 0 &&
		    json_equal(json_object_get(rec, "killed_at"), killed_at))
			return 1;
	return 0;
}

void
idem_path_outcome(const json_t *attempt, const json_t *kills, const json_t *recovers, char *out,
		  size_t size)
{
	const char *job = json_string_value(json_object_get(attempt, "job"));
	const char *msg = text(attempt, "msg");
	long long n = number(attempt, "attempt"), pid = number(attempt, "pid");
	const json_t *kill;
	size_t k;

	snprintf(out, size, json_is_null(json_object_get(attempt, "acked_at")) ? "not acked" : "acked");
	json_array_foreach(kills, k, kill)
		if (job && strcmp(text(kill, "job"), job) == 0 && number(kill, "attempt") == n &&
		    (number(kill, "pid") == pid ||
		    recovered(msg, json_object_get(kill, "killed_at"), recovers)))
			snprintf(out, size, "killed at %s", text(kill, "step"));
}

static void
add_job(json_t *jobs, const json_t *rows)
{
	const json_t *row;
	size_t i, j;

	json_array_foreach(rows, i, row) {
		const char *job = text(row, "job");
		int seen = 0;

		for (j = 0; j < json_array_size(jobs); j++)
			seen |= strcmp(json_string_value(json_array_get(jobs, j)), job) == 0;
		if (!seen)
			json_array_append_new(jobs, json_string(job));
	}
}

static int
same_point(const json_t *a, const json_t *b)
{
	return strcmp(text(a, "job"), text(b, "job")) == 0 &&
	    strcmp(text(a, "step"), text(b, "step")) == 0 &&
	    json_equal(json_object_get(a, "attempt"), json_object_get(b, "attempt"));
}

static int
has_point(const json_t *rows, const json_t *p)
{
	const json_t *row;
	size_t i;

	json_array_foreach(rows, i, row)
		if (same_point(row, p))
			return 1;
	return 0;
}

/* "killed at STEP on attempt N", or for a missed race "the race at STEP";
 * a missed stall is "a stall", whatever verb says */
static void
point_text(const json_t *p, const char *verb, char *out, size_t size)
{
	if (strcmp(text(p, "what"), "stall") == 0)
		verb = "a stall";
	if (strcmp(text(p, "what"), "race") == 0)
		snprintf(out, size, "the race at %s", text(p, "step"));
	else if (json_is_integer(json_object_get(p, "attempt")))
		snprintf(out, size, "%s at %s on attempt %lld", verb, text(p, "step"),
		    number(p, "attempt"));
	else
		snprintf(out, size, "%s at %s", verb, text(p, "step"));
}

static void
attempt_text(const json_t *a, char *out, size_t size)
{
	const char *branch = json_string_value(json_object_get(a, "branch"));

	snprintf(out, size, "attempt %lld %s, branch %s", number(a, "attempt"), text(a, "outcome"),
	    branch ? branch : "none");
}

/* The stalls of a job: each reached on one side alone, and each whose
 * release differs. */
static void
stall_diff(json_t *out, const char *job, const json_t *stalls[2])
{
	static const char *const side[2] = { "record", "rerun" };
	const json_t *row, *other;
	char what[256];
	size_t i, j;
	int s;

	for (s = 0; s < 2; s++)
		json_array_foreach(stalls[s], i, row) {
			if (strcmp(text(row, "job"), job) != 0)
				continue;
			point_text(row, "stalled", what, sizeof(what));
			if (!has_point(stalls[!s], row)) {
				json_array_append_new(out, json_sprintf("%s: %s %s, %s never reached it",
				    job, side[s], what, side[!s]));
				continue;
			}
			if (s == 1)
				continue;
			json_array_foreach(stalls[1], j, other)
				if (same_point(row, other) && strcmp(text(row, "release"),
				    text(other, "release")) != 0) {
					json_array_append_new(out, json_sprintf("%s: %s: the record "
					    "released it on %s, the rerun on %s", job, what,
					    text(row, "release"), text(other, "release")));
					break;
				}
		}
}

/* A delivery's message: msg in a rerun's attempts, msg_id in a record's
 * evidence; "" when neither says. */
static const char *
message(const json_t *a)
{
	const json_t *m = json_object_get(a, "msg");

	if (!json_is_string(m))
		m = json_object_get(a, "msg_id");
	return json_is_string(m) ? json_string_value(m) : "";
}

/* Deliveries by attempt, then by message: a shorter id first (a number
 * of fewer digits), then in byte order, the same on every run. */
static int
by_attempt(const void *x, const void *y)
{
	const json_t *a = *(const json_t *const *)x, *b = *(const json_t *const *)y;
	long long na = number(a, "attempt"), nb = number(b, "attempt");
	const char *ma = message(a), *mb = message(b);

	if (na != nb)
		return na < nb ? -1 : 1;
	if (strlen(ma) != strlen(mb))
		return strlen(ma) < strlen(mb) ? -1 : 1;
	return strcmp(ma, mb);
}

static void
job_diff(json_t *out, const char *job, const json_t *kills[2], const json_t *attempts[2],
	 const json_t *missed[2], const json_t *stalls[2])
{
	static const char *const side[2] = { "record", "rerun" };
	const json_t *row, **of_job[2];
	char what[256], a[256], b[256];
	size_t i, n[2], k;
	int s;

	for (s = 0; s < 2; s++) {
		json_array_foreach(kills[s], i, row)
			if (strcmp(text(row, "job"), job) == 0 && !has_point(kills[!s], row)) {
				point_text(row, "killed", what, sizeof(what));
				json_array_append_new(out, json_sprintf("%s: %s %s, %s never reached it",
				    job, side[s], what, side[!s]));
			}
		json_array_foreach(missed[s], i, row)
			if (strcmp(text(row, "job"), job) == 0 && !has_point(missed[!s], row) &&
			    !has_point(strcmp(text(row, "what"), "stall") == 0 ? stalls[!s] : kills[!s],
			    row)) {
				point_text(row, "a kill", what, sizeof(what));
				json_array_append_new(out, json_sprintf("%s: %s never reached %s, the %s "
				    "did not miss it", job, side[s], what, side[!s]));
			}
	}
	stall_diff(out, job, stalls);
	/* the deliveries of the job, one against the other, by attempt and
	 * message: two taken at once may be taken in either order */
	for (s = 0; s < 2; s++) {
		n[s] = 0;
		of_job[s] = idem_ereallocarray(NULL, json_array_size(attempts[s]) + 1, sizeof(**of_job));
		json_array_foreach(attempts[s], i, row)
			if (strcmp(text(row, "job"), job) == 0)
				of_job[s][n[s]++] = row;
		qsort(of_job[s], n[s], sizeof(**of_job), by_attempt);
	}
	for (k = 0; k < n[0] || k < n[1]; k++) {
		const json_t *x[2] = { k < n[0] ? of_job[0][k] : NULL, k < n[1] ? of_job[1][k] : NULL };

		if (x[0] != NULL)
			attempt_text(x[0], a, sizeof(a));
		if (x[1] != NULL)
			attempt_text(x[1], b, sizeof(b));
		if (x[0] == NULL)
			json_array_append_new(out, json_sprintf("%s: delivery %zu: the record has none, "
			    "the rerun %s", job, k + 1, b));
		else if (x[1] == NULL)
			json_array_append_new(out, json_sprintf("%s: delivery %zu: the record %s, the "
			    "rerun has none", job, k + 1, a));
		else if (strcmp(a, b) != 0)
			json_array_append_new(out, json_sprintf("%s: delivery %zu: the record %s, the "
			    "rerun %s", job, k + 1, a, b));
	}
	free(of_job[0]);
	free(of_job[1]);
}

/* The row of a list whose business key is key, or NULL. */
static const json_t *
of_business_key(const json_t *rows, const char *key)
{
	const json_t *row;
	size_t i;

	json_array_foreach(rows, i, row)
		if (strcmp(text(row, "business_key"), key) == 0)
			return row;
	return NULL;
}

/* The business keys whose calls changed their Idempotency-Key on one side
 * and not the other, or with another number of keys or effects. */
static void
rekeyed_diff(json_t *out, const json_t *rekeyed[2])
{
	static const char *const side[2] = { "record", "rerun" };
	const json_t *row, *other;
	size_t i;
	int s;

	for (s = 0; s < 2; s++)
		json_array_foreach(rekeyed[s], i, row) {
			const char *key = text(row, "business_key");

			if ((other = of_business_key(rekeyed[!s], key)) == NULL) {
				json_array_append_new(out, json_sprintf("%s: the %s's calls sent %zu "
				    "Idempotency-Keys, the %s's one", key, side[s],
				    json_array_size(json_object_get(row, "keys")), side[!s]));
				continue;
			}
			if (s == 1 || (json_array_size(json_object_get(row, "keys")) ==
			    json_array_size(json_object_get(other, "keys")) &&
			    number(row, "effects") == number(other, "effects")))
				continue;
			json_array_append_new(out, json_sprintf("%s: the record's calls sent %zu "
			    "Idempotency-Keys, %lld taking effect; the rerun's %zu, %lld taking effect",
			    key, json_array_size(json_object_get(row, "keys")), number(row, "effects"),
			    json_array_size(json_object_get(other, "keys")), number(other, "effects")));
		}
}

/* The pending checks whose result differs, or made on one side alone. */
static void
pending_diff(json_t *out, const json_t *pending[2])
{
	const json_t *row, *other;
	size_t i;
	int s;

	for (s = 0; s < 2; s++)
		json_array_foreach(pending[s], i, row) {
			const char *key = text(row, "business_key");

			other = of_business_key(pending[!s], key);
			if (s == 1 && other != NULL)
				continue;
			if (other != NULL && strcmp(text(row, "result"), text(other, "result")) == 0)
				continue;
			json_array_append_new(out, json_sprintf("%s: pending check %s in the record, "
			    "%s in the rerun", key, s == 0 ? text(row, "result") : other ?
			    text(other, "result") : "none", s == 1 ? text(row, "result") : other ?
			    text(other, "result") : "none"));
		}
}

json_t *
idem_path_diff(const struct idem_path *record, const struct idem_path *rerun)
{
	json_t *none = json_array();
	const json_t *kills[2] = { record->kills, rerun->kills };
	const json_t *attempts[2] = { record->attempts, rerun->attempts };
	const json_t *missed[2] = { record->missed, rerun->missed };
	const json_t *stalls[2] = { record->stalls ? record->stalls : none,
		rerun->stalls ? rerun->stalls : none };
	json_t *jobs = json_array(), *out = json_array(), *job;
	size_t i;
	int s;

	for (s = 0; s < 2; s++) {
		add_job(jobs, kills[s]);
		add_job(jobs, missed[s]);
		add_job(jobs, stalls[s]);
		add_job(jobs, attempts[s]);
	}
	json_array_foreach(jobs, i, job)
		job_diff(out, json_string_value(job), kills, attempts, missed, stalls);
	if (record->rekeyed != NULL) {
		const json_t *rekeyed[2] = { record->rekeyed, rerun->rekeyed ? rerun->rekeyed : none };

		rekeyed_diff(out, rekeyed);
	}
	if (record->pending != NULL) {
		const json_t *pending[2] = { record->pending, rerun->pending ? rerun->pending : none };

		pending_diff(out, pending);
	}
	json_decref(jobs);
	json_decref(none);
	return out;
}
