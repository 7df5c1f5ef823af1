#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <stdlib.h>

#include <zlib.h>

#include "record.h"
#include "yamljson.h"

int
idem_record_wilson(long long k, long long n, double *low, double *high)
{
	/* the 97.5th percentile of the standard normal distribution */
	const double z = 1.959963984540054, z2 = z * z;
	double p, denominator, centre, half;

	if (n < 1 || k < 0 || k > n)
		return -1;
	p = (double)k / (double)n;
	denominator = 1.0 + z2 / (double)n;
	centre = (p + z2 / (2.0 * (double)n)) / denominator;
	half = z / denominator * sqrt(p * (1.0 - p) / (double)n + z2 / (4.0 * (double)n * (double)n));
	*low = k == 0 ? 0.0 : fmax(0.0, centre - half);
	*high = k == n ? 1.0 : fmin(1.0, centre + half);
	return 0;
}

static ssize_t
gz_read(void *cookie, char *buf, size_t size)
{
	int n = gzread(cookie, buf, size > INT_MAX ? INT_MAX : (unsigned)size);

	if (n < 0)
		errno = EIO;
	return n;
}

static ssize_t
gz_write(void *cookie, const char *buf, size_t size)
{
	int n = size == 0 ? 0 : gzwrite(cookie, buf, size > INT_MAX ? INT_MAX : (unsigned)size);

	if (size > 0 && n <= 0) {
		errno = errno ? errno : EIO;
		return -1;
	}
	return n;
}

static int
gz_close(void *cookie)
{
	return gzclose(cookie) == Z_OK ? 0 : (errno = errno ? errno : EIO, -1);
}

FILE *
idem_record_file_open(const char *path, const char *mode, struct idem_error *err)
{
	int writing = mode[0] == 'w';
	int fd = writing ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) :
	    open(path, O_RDONLY | O_CLOEXEC);
	cookie_io_functions_t io = { gz_read, gz_write, NULL, gz_close };
	gzFile gz;
	FILE *f;

	if (fd < 0) {
		idem_error_set(err, writing ? IDEM_EXIT_ENV : IDEM_EXIT_USAGE, "%s: %s", path,
		    strerror(errno));
		return NULL;
	}
	if ((gz = gzdopen(fd, writing ? "wb6" : "rb")) == NULL) {
		close(fd);
		idem_error_set(err, IDEM_EXIT_ENV, "%s: cannot open with zlib", path);
		return NULL;
	}
	gzbuffer(gz, 1 << 17);
	if ((f = fopencookie(gz, writing ? "w" : "r", io)) == NULL) {
		gzclose(gz);
		idem_error_set(err, IDEM_EXIT_ENV, "%s: %s", path, strerror(errno));
		return NULL;
	}
	return f;
}

const char *const idem_wait_causes[] = {
	"reviewer-queue", "sandbox-availability", "vendor-limit", "owner-approval", NULL
};

/* The first total of the counts that differs from the seed's expect, the
 * most telling first, as "NAME: expected E, observed O"; NULL when none
 * does. Caller frees. */
static char *
differing_total(const json_t *totals, const char *only)
{
	static const char *const names[] = { "duplicates", "external_duplicates", "missing",
		"effects", "external", "pending", NULL };
	char *out = NULL, *e, *o;
	size_t i;

	for (i = 0; names[i] && out == NULL; i++) {
		const json_t *t = json_object_get(totals, names[i]);
		const json_t *expected = json_object_get(t, "expected");

		if (t == NULL || (only != NULL && strcmp(only, names[i]) != 0) ||
		    json_equal(expected, json_object_get(t, "observed")))
			continue;
		e = json_dumps(expected, JSON_ENCODE_ANY);
		o = json_dumps(json_object_get(t, "observed"), JSON_ENCODE_ANY);
		if (asprintf(&out, "%s: expected %s, observed %s", names[i], e ? e : "null",
		    o ? o : "null") < 0)
			out = NULL;
		free(e);
		free(o);
	}
	return out;
}

static const char *
text_of(const json_t *o, const char *key)
{
	return idem_json_str(o, key) ? idem_json_str(o, key) : "?";
}

/* What releases a stall of the scenario: the redelivered attempt's until
 * step, else its ack. */
static const char *
stall_until(const json_t *record, const char *scenario)
{
	const json_t *sc;
	size_t i;

	json_array_foreach(json_object_get(record, "scenarios"), i, sc)
		if (idem_json_str(sc, "name") && strcmp(idem_json_str(sc, "name"), scenario) == 0 &&
		    idem_json_str(sc, "until"))
			return idem_json_str(sc, "until");
	return NULL;
}

/* A kill point, race or stall of the missed list, as the reason of the
 * verdict. */
static char *
missed_point(const json_t *missed)
{
	char *out;
	int race = idem_json_str(missed, "what") && strcmp(idem_json_str(missed, "what"), "race") == 0;

	if (idem_json_str(missed, "what") && strcmp(idem_json_str(missed, "what"), "stall") == 0) {
		if (asprintf(&out, "stall at %s of job %s never reached: attempt %lld (scenario %s)",
		    text_of(missed, "step"), text_of(missed, "job"), idem_json_num(missed, "attempt"),
		    text_of(missed, "scenario")) < 0)
			return NULL;
		return out;
	}

	if (race && asprintf(&out, "race never met: step %s on business key %s (scenario %s)",
	    text_of(missed, "step"), text_of(missed, "job"), text_of(missed, "scenario")) >= 0)
		return out;
	if (!race && asprintf(&out, "kill point never reached: step %s of job %s, attempt %lld "
	    "(scenario %s)", text_of(missed, "step"), text_of(missed, "job"),
	    idem_json_num(missed, "attempt"), text_of(missed, "scenario")) >= 0)
		return out;
	return NULL;
}

char *
idem_record_bound(const json_t *record)
{
	const json_t *row, *lease;
	char *out = NULL;
	size_t i;

	json_array_foreach(json_object_get(record, "stalls"), i, row)
		if (idem_json_str(row, "release") && strcmp(idem_json_str(row, "release"), "bound") == 0) {
			const char *until = stall_until(record, text_of(row, "scenario"));

			if (asprintf(&out, "stall at %s of job %s, attempt %lld: the bounded wait ran "
			    "out before the redelivered attempt %s%s (scenario %s)", text_of(row, "step"),
			    text_of(row, "job"), idem_json_num(row, "attempt"),
			    until ? "reached " : "was acked", until ? until : "",
			    text_of(row, "scenario")) < 0)
				return NULL;
			return out;
		}
	json_array_foreach(json_object_get(record, "evidence"), i, row) {
		lease = json_object_get(row, "lease_ended");
		if (idem_json_str(lease, "why") && strcmp(idem_json_str(lease, "why"), "bound") == 0) {
			if (asprintf(&out, "the lease of job %s, attempt %lld, reached its bound while "
			    "held", text_of(row, "job"),
			    idem_json_num(row, "attempt")) < 0)
				return NULL;
			return out;
		}
	}
	return NULL;
}

int
idem_record_pending_ok(const char *result)
{
	return result != NULL && strcmp(result, "owned") == 0;
}

const char *
idem_record_pending_unchecked(const json_t *measures)
{
	size_t i;

	for (i = 0; i < json_array_size(measures); i++) {
		const json_t *m = json_array_get(measures, i);
		const char *name = json_string_value(json_object_get(m, "name"));

		if (name != NULL && strcmp(name, "pending_calls_owned") == 0 &&
		    json_is_null(json_object_get(m, "numerator")))
			return json_string_value(json_object_get(m, "unit"));
	}
	return NULL;
}

/* The elements of a JSON array as text, separated by ", ": a string as it
 * is, a number in decimal, null as none. Caller frees. */
static char *
list_text(const json_t *list)
{
	char *buf = NULL;
	size_t len = 0, i;
	const json_t *v;
	FILE *out;

	if ((out = open_memstream(&buf, &len)) == NULL)
		return NULL;
	json_array_foreach(list, i, v) {
		if (i > 0)
			fputs(", ", out);
		if (json_is_string(v))
			fputs(json_string_value(v), out);
		else if (json_is_integer(v))
			fprintf(out, "%lld", (long long)json_integer_value(v));
		else
			fputs("none", out);
	}
	if (fclose(out) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static char *
rekeyed_text(const json_t *row)
{
	char *keys = list_text(json_object_get(row, "keys")), *calls = list_text(json_object_get(row,
	    "calls")), *out = NULL;

	if (keys != NULL && calls != NULL && asprintf(&out, "business key %s changed its "
	    "Idempotency-Key across calls %s (keys %s; %lld took effect), against a vendor that "
	    "honours the key", text_of(row, "business_key"), calls, keys,
	    idem_json_num(row, "effects")) < 0)
		out = NULL;
	free(keys);
	free(calls);
	return out;
}

static char *
pending_text(const json_t *record, const json_t *row)
{
	const char *result = text_of(row, "result");
	const char *table = idem_json_str(record, "external.pending_table");
	const char *owner = idem_json_str(record, "reconciliation_owner");
	const char *key = text_of(row, "business_key");
	long long rows = idem_json_num(row, "rows");
	char *out = NULL;
	int rc;

	table = table ? table : "the pending table";
	if (strcmp(result, "missing") == 0)
		rc = asprintf(&out, "the killed call of business key %s left no row in %s", key, table);
	else if (strcmp(result, "wrong-owner") == 0)
		rc = asprintf(&out, "the killed call of business key %s left %lld rows in %s, none "
		    "naming the reconciliation owner %s", key, rows, table, owner ? owner : "(none)");
	else if (strcmp(result, "open") == 0)
		rc = asprintf(&out, "business key %s has %lld rows in %s not settled", key, rows,
		    table);
	else
		rc = asprintf(&out, "the pending check of business key %s: %s", key, result);
	return rc < 0 ? NULL : out;
}

char *
idem_record_key_finding(const json_t *record)
{
	const json_t *external = json_object_get(record, "external"), *row;
	size_t i;

	if (json_is_true(json_object_get(external, "honours_idempotency_key")) &&
	    (row = json_array_get(json_object_get(record, "rekeyed"), 0)) != NULL)
		return rekeyed_text(row);
	json_array_foreach(json_object_get(record, "pending_calls"), i, row)
		if (!idem_record_pending_ok(idem_json_str(row, "result")))
			return pending_text(record, row);
	if (idem_record_pending_unchecked(json_object_get(record, "measures")) != NULL) {
		const char *table = idem_json_str(record, "external.pending_table");
		char *out = NULL;

		if (asprintf(&out, "the pending calls were not checked: %s has no column the seed "
		    "names for them", table ? table : "the pending table") < 0)
			return NULL;
		return out;
	}
	return NULL;
}

char *
idem_record_why(const json_t *record)
{
	const json_t *missed = json_array_get(json_object_get(record, "missed"), 0);
	const json_t *totals = json_object_get(json_object_get(record, "counts"), "totals");
	const json_t *observed = json_object_get(json_object_get(record, "worker"), "observed");
	const char *finding = json_string_value(json_array_get(json_object_get(
	    json_object_get(record, "account"), "findings"), 0));
	char *out = NULL, *differs;

	if (strcmp(idem_json_str(record, "verdict") ? idem_json_str(record, "verdict") : "",
	    "fail") != 0)
		return NULL;
	if (missed != NULL)
		return missed_point(missed);
	if ((out = idem_record_bound(record)) != NULL)
		return out;
	/* kill-at waits for every message to be acked, up to its deadline */
	if (json_integer_value(json_object_get(json_object_get(totals, "pending"), "observed")) >
	    json_integer_value(json_object_get(json_object_get(totals, "pending"), "expected")) &&
	    (differs = differing_total(totals, "pending")) != NULL) {
		if (asprintf(&out, "the deadline passed with messages unacked (%s)", differs) < 0)
			out = NULL;
		free(differs);
		return out;
	}
	if (idem_json_str(record, "baseline.result") != NULL &&
	    strcmp(idem_json_str(record, "baseline.result"), "failed") == 0)
		return strdup(idem_json_str(record, "baseline.summary") ?
		    idem_json_str(record, "baseline.summary") : "baseline failed");
	if (json_is_false(json_object_get(observed, "as_declared")))
		return strdup("the worker that ran is not the one the seed declares");
	if (finding != NULL && asprintf(&out, "the sandbox account held more than its list: %s",
	    finding) >= 0)
		return out;
	if ((out = idem_record_key_finding(record)) != NULL)
		return out;
	if ((differs = differing_total(totals, NULL)) != NULL) {
		if (asprintf(&out, "the counts differ from the seed's expect: %s", differs) < 0)
			out = NULL;
		free(differs);
		return out;
	}
	return NULL;
}
