/* trace.c: the trace beside a record, in OTLP JSON (idem-record(5), THE
 * TRACE), from the record's evidence and the span rows of the stream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sodium.h>

#include "timeline.h"
#include "trace.h"
#include "error.h"
#include "tsv.h"

/* OTLP's SpanKind and StatusCode */
enum { KIND_INTERNAL = 1, KIND_CONSUMER = 5 };
enum { STATUS_UNSET = 0, STATUS_OK = 1, STATUS_ERROR = 2 };

/* the fields of the span and span_lost rows, after the kind (idem-tsv(5) 1.9) */
static const char *const span_fields[] = {
	"trace_id", "span_id", "parent_span_id", "name", "kind", "start", "end", "status", "pid",
	"worker", "job", "attempt", "scope", "attributes", "events", "encoding", NULL
};

static const char *
str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* bytes of the SHA-256 of the parts, each but the last followed by a
 * NUL byte, from the byte at from, as hex */
static void
hex_of(const char *const *parts, size_t from, size_t bytes, char *out)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char h[crypto_hash_sha256_BYTES];
	crypto_hash_sha256_state st;
	size_t i;

	crypto_hash_sha256_init(&st);
	for (i = 0; parts[i]; i++)
		crypto_hash_sha256_update(&st, (const unsigned char *)parts[i],
		    strlen(parts[i]) + (parts[i + 1] != NULL));
	crypto_hash_sha256_final(&st, h);
	for (i = 0; i < bytes; i++) {
		out[2 * i] = digits[h[from + i] >> 4];
		out[2 * i + 1] = digits[h[from + i] & 15];
	}
	out[2 * bytes] = '\0';
}

void
idem_trace_id(const char *revision, const char *job, char out[33])
{
	const char *parts[] = { revision, job, NULL };

	hex_of(parts, 0, 16, out);
}

void
idem_trace_job_span_id(const char *revision, const char *job, char out[17])
{
	const char *parts[] = { revision, job, NULL };

	hex_of(parts, 16, 8, out);
}

void
idem_trace_span_id(const char *revision, const char *job, const char *msg_id, long long attempt,
		   char out[17])
{
	char decimal[24];
	const char *parts[] = { revision, job, msg_id, decimal, NULL };

	snprintf(decimal, sizeof(decimal), "%lld", attempt);
	hex_of(parts, 0, 8, out);
}

json_t *
idem_trace_spans_new(void)
{
	return json_object();
}

static int
hex_valid(const char *s, size_t len)
{
	return s != NULL && strlen(s) == len && strspn(s, "0123456789abcdef") == len;
}

/* The spans and lost ids of one attempt, made when first named. */
static json_t *
of_attempt(json_t *spans, const char *job, const char *attempt)
{
	json_t *entry;
	char *key;

	if (asprintf(&key, "%s\t%s", job, attempt) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if ((entry = json_object_get(spans, key)) == NULL)
		json_object_set_new(spans, key, entry = json_pack("{s:[],s:[]}", "spans", "lost"));
	free(key);
	return entry;
}

/* The fields of a row as text, NULL for \N: at least n of them (more
 * may follow, of a later version of the stream). */
static size_t
split_row(char *copy, char **f, size_t max)
{
	size_t n = 0, len;
	char *p = copy, *tab;

	while (n < max) {
		tab = strchr(p, '\t');
		if (tab != NULL)
			*tab = '\0';
		len = strlen(p);
		switch (idem_tsv_unescape(p, &len)) {
		case 1: f[n++] = NULL; break;
		case 0: p[len] = '\0'; f[n++] = p; break;
		default: return 0;
		}
		if (tab == NULL)
			break;
		p = tab + 1;
	}
	return n;
}

/* What is wrong with the fields of a span row, or NULL. */
static const char *
span_problem(char **f, json_t **attributes, json_t **events)
{
	static const char *const statuses[] = { "unset", "ok", "error", NULL };
	size_t i;

	if (!hex_valid(f[1], 32) || !hex_valid(f[2], 16) || (f[3] && !hex_valid(f[3], 16)))
		return "trace_id, span_id and parent_span_id are 32, 16 and 16 lowercase hex digits";
	if (f[4] == NULL || f[5] == NULL || strlen(f[5]) != 1 || *f[5] < '0' || *f[5] > '5')
		return "a name, and a kind of 0 to 5";
	if (idem_timeline_parse_time(f[6]) < 0 || idem_timeline_parse_time(f[7]) < 0)
		return "start and end are times";
	for (i = 0; statuses[i] && (f[8] == NULL || strcmp(f[8], statuses[i]) != 0); i++)
		;
	if (statuses[i] == NULL)
		return "status is one of unset, ok, error";
	*attributes = f[14] ? json_loads(f[14], 0, NULL) : NULL;
	*events = f[15] ? json_loads(f[15], 0, NULL) : NULL;
	if (!json_is_object(*attributes) || !json_is_array(*events))
		return "attributes is a JSON object, events a JSON array";
	return NULL;
}

static int
read_span(json_t *spans, char **f, struct idem_error *err)
{
	json_t *row = json_object(), *attributes = NULL, *events = NULL;
	const char *problem = span_problem(f, &attributes, &events);
	size_t i;

	if (problem != NULL) {
		json_decref(row);
		json_decref(attributes);
		json_decref(events);
		return idem_error_set(err, IDEM_EXIT_USAGE, "span %s: %s", f[2] ? f[2] : "\\N", problem);
	}
	for (i = 0; span_fields[i]; i++)
		json_object_set_new(row, span_fields[i], f[i + 1] ? json_string(f[i + 1]) : json_null());
	json_object_set_new(row, "kind", json_integer(*f[5] - '0'));
	json_object_set_new(row, "attributes", attributes);
	json_object_set_new(row, "events", events);
	json_array_append_new(json_object_get(of_attempt(spans, f[11], f[12]), "spans"), row);
	return 1;
}

static int
read_lost(json_t *spans, char **f, struct idem_error *err)
{
	json_t *parents = f[4] ? json_loads(f[4], 0, NULL) : NULL, *id, *ids;
	size_t i;

	if (!json_is_array(parents) || idem_timeline_parse_time(f[5]) < 0) {
		json_decref(parents);
		return idem_error_set(err, IDEM_EXIT_USAGE, "span_lost of %s: parents is a JSON array "
		    "of span ids, killed_at a time", f[1]);
	}
	ids = json_array();
	json_array_foreach(parents, i, id)
		if (hex_valid(json_string_value(id), 16))
			json_array_append(ids, id);
	json_decref(parents);
	json_array_append_new(json_object_get(of_attempt(spans, f[1], f[2]), "lost"),
	    json_pack("{s:s,s:s?,s:o}", "killed_at", f[5], "pid", f[3], "parents", ids));
	return 1;
}

int
idem_trace_read_row(json_t *spans, const char *line, int (*listed)(const char *job),
		    struct idem_error *err)
{
	int is_span = strncmp(line, "span\t", 5) == 0;
	size_t want = is_span ? 17 : 6, n;
	char *copy, *f[17];
	int rc = 0;

	if (!is_span && strncmp(line, "span_lost\t", 10) != 0)
		return 0;
	copy = idem_estrdup(line);
	n = split_row(copy, f, want);
	if (n < want)
		rc = idem_error_set(err, IDEM_EXIT_USAGE, "%s row: %zu fields, expected %zu",
		    is_span ? "span" : "span_lost", n > 0 ? n - 1 : 0, want - 1);
	/* a span of no job or attempt has no place in the trace */
	else if (f[is_span ? 11 : 1] == NULL || f[is_span ? 12 : 2] == NULL ||
	    (listed != NULL && !listed(f[is_span ? 11 : 1])))
		rc = 0;
	else
		rc = is_span ? read_span(spans, f, err) : read_lost(spans, f, err);
	free(copy);
	return rc;
}

/* The latest instant a time of a span may stand for: one in whole
 * milliseconds is from a clock no finer (OpenTelemetry JS writes its
 * spans' times so), and stands for any instant of that millisecond. */
static long long
latest_of(long long t)
{
	return t >= 0 && t % 1000 == 0 ? t + 999 : t;
}

/* The delivery a span or a lost entry (item, of the attempt under key)
 * is of, among the run's attempts by job, number and process (by_process):
 * of those of its process, the last consumed at or before at, else the
 * first; NULL when its process made none. */
static const json_t *
delivery_of(const json_t *by_process, const char *key, const json_t *item, const char *at)
{
	const json_t *list, *row, *found = NULL;
	long long t = latest_of(idem_timeline_parse_time(at)), best_t = -1;
	char *k;
	size_t i;

	if (str(item, "pid") == NULL)
		return NULL;
	if (asprintf(&k, "%s\t%s", key, str(item, "pid")) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	list = json_object_get(by_process, k);
	free(k);
	json_array_foreach(list, i, row) {
		long long c = idem_timeline_parse_time(str(row, "consumed_at"));

		if (found == NULL && best_t < 0)
			found = row;	/* the first, until one consumed before at */
		if (c >= 0 && c <= t && c >= best_t) {
			found = row;
			best_t = c;
		}
	}
	return found;
}

void
idem_trace_deliveries(json_t *spans, const json_t *attempts)
{
	json_t *by_process = json_object(), *row, *entry, *item, *list;
	const char *key;
	char *k;
	size_t i;

	json_array_foreach(attempts, i, row) {
		if (!json_is_integer(json_object_get(row, "pid")) || str(row, "job") == NULL)
			continue;
		if (asprintf(&k, "%s\t%lld\t%lld", str(row, "job"),
		    (long long)json_integer_value(json_object_get(row, "attempt")),
		    (long long)json_integer_value(json_object_get(row, "pid"))) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if ((list = json_object_get(by_process, k)) == NULL)
			json_object_set_new(by_process, k, list = json_array());
		json_array_append(list, row);
		free(k);
	}
	json_object_foreach(spans, key, entry) {
		const json_t *d;

		json_array_foreach(json_object_get(entry, "spans"), i, item)
			if ((d = delivery_of(by_process, key, item, str(item, "start"))) != NULL)
				json_object_set(item, "msg_id", json_object_get(d, "msg_id"));
		json_array_foreach(json_object_get(entry, "lost"), i, item)
			if ((d = delivery_of(by_process, key, item, str(item, "killed_at"))) != NULL)
				json_object_set(item, "msg_id", json_object_get(d, "msg_id"));
	}
	json_decref(by_process);
}

static json_t *
spans_of(const json_t *spans, const json_t *row)
{
	char *key;
	json_t *entry;

	if (asprintf(&key, "%s\t%lld", str(row, "job") ? str(row, "job") : "",
	    (long long)json_integer_value(json_object_get(row, "attempt"))) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	entry = json_object_get(spans, key);
	free(key);
	return entry;
}

static int
by_start(const void *a, const void *b)
{
	const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	int c = strcmp(str(x, "start"), str(y, "start"));

	return c != 0 ? c : strcmp(str(x, "span_id"), str(y, "span_id"));
}

/* Whether attempt i of a job's attempts (rows) owns item, a span or a
 * lost entry of what happened at: the attempt of its delivery when that
 * is known; else, of the attempts of its number (two copies of a message
 * each have an attempt 1), the last consumed at or before at, else the
 * first. */
static int
owns(const json_t *rows, size_t i, const json_t *item, const char *at)
{
	const json_t *attempt = json_object_get(json_array_get(rows, i), "attempt"), *row;
	const json_t *msg = json_object_get(item, "msg_id");
	long long t = latest_of(idem_timeline_parse_time(at)), best_t = -1;
	size_t j, best = (size_t)-1, first = (size_t)-1;

	if (msg != NULL)
		return json_equal(json_object_get(json_array_get(rows, i), "msg_id"), msg);

	json_array_foreach(rows, j, row) {
		long long c = idem_timeline_parse_time(str(row, "consumed_at"));

		if (!json_equal(json_object_get(row, "attempt"), attempt))
			continue;
		if (first == (size_t)-1)
			first = j;
		if (c >= 0 && c <= t && c >= best_t) {
			best = j;
			best_t = c;
		}
	}
	return i == (best != (size_t)-1 ? best : first);
}

/* The worker's spans of attempt i of a job's attempts (rows), sorted by
 * start (then span id), and the span ids it lost: {"spans", "lost"}. */
static json_t *
attempt_entry(const json_t *spans, const json_t *rows, size_t i)
{
	const json_t *entry = spans_of(spans, json_array_get(rows, i)), *v;
	const json_t *list = json_object_get(entry, "spans");
	size_t n = json_array_size(list), j, k;
	json_t **sorted = idem_ereallocarray(NULL, n + 1, sizeof(*sorted)), *lost = json_array();
	json_t *out = json_pack("{s:[],s:o}", "spans", "lost", lost), *id;

	for (j = k = 0; j < n; j++)
		if (owns(rows, i, json_array_get(list, j), str(json_array_get(list, j), "start")))
			sorted[k++] = json_array_get(list, j);
	qsort(sorted, k, sizeof(*sorted), by_start);
	for (j = 0; j < k; j++)
		json_array_append(json_object_get(out, "spans"), sorted[j]);
	free(sorted);
	json_array_foreach(json_object_get(entry, "lost"), j, v)
		if (owns(rows, i, v, str(v, "killed_at")))
			json_array_foreach(json_object_get(v, "parents"), k, id)
				json_array_append(lost, id);
	return out;
}

/* The attempts of the record's evidence by job, jobs in the order of
 * their first attempt. */
static json_t *
by_job(const json_t *evidence)
{
	json_t *jobs = json_object(), *list;
	const json_t *row;
	size_t i;

	json_array_foreach(evidence, i, row) {
		const char *job = str(row, "job") ? str(row, "job") : "";

		if ((list = json_object_get(jobs, job)) == NULL)
			json_object_set_new(jobs, job, list = json_array());
		json_array_append(list, (json_t *)row);
	}
	return jobs;
}

void
idem_trace_annotate(json_t *record, const json_t *spans)
{
	json_t *jobs = by_job(json_object_get(record, "evidence")), *rows, *row, *entry, *span;
	json_t *names;
	const char *job;
	size_t i, j;

	json_object_foreach(jobs, job, rows) {
		json_array_foreach(rows, i, row) {
			entry = attempt_entry(spans, rows, i);
			names = json_array();
			json_array_foreach(json_object_get(entry, "spans"), j, span)
				json_array_append_new(names, json_string(str(span, "name")));
			json_object_set_new(row, "worker_spans", names);
			json_object_set(row, "spans_lost", json_object_get(entry, "lost"));
			json_decref(entry);
		}
	}
	json_decref(jobs);
}

/* A time of the record as OTLP writes it: nanoseconds since the epoch,
 * in decimal, as text; NULL for what is not a time. */
static json_t *
nanos(const char *time)
{
	long long us = idem_timeline_parse_time(time);

	return us < 0 ? NULL : json_sprintf("%lld000", us);
}

/* The same, "0" for what is not a time: a span's start and end are
 * always there. */
static json_t *
span_time(const char *time)
{
	json_t *t = nanos(time);

	return t ? t : json_string("0");
}

/* An OTLP AnyValue of a JSON value; NULL for null. */
static json_t *
any_value(const json_t *v)
{
	json_t *values, *item, *kv;
	const char *key;
	size_t i;

	switch (json_typeof(v)) {
	case JSON_STRING: return json_pack("{s:O}", "stringValue", v);
	case JSON_INTEGER: return json_pack("{s:o}", "intValue", json_sprintf("%lld",
	    (long long)json_integer_value(v)));
	case JSON_REAL: return json_pack("{s:f}", "doubleValue", json_real_value(v));
	case JSON_TRUE: case JSON_FALSE: return json_pack("{s:b}", "boolValue", json_is_true(v));
	case JSON_ARRAY:
		values = json_array();
		json_array_foreach(v, i, item)
			if ((kv = any_value(item)) != NULL)
				json_array_append_new(values, kv);
		return json_pack("{s:{s:o}}", "arrayValue", "values", values);
	case JSON_OBJECT:
		values = json_array();
		json_object_foreach((json_t *)v, key, item)
			if ((kv = any_value(item)) != NULL)
				json_array_append_new(values, json_pack("{s:s,s:o}", "key", key, "value", kv));
		return json_pack("{s:{s:o}}", "kvlistValue", "values", values);
	default: return NULL;
	}
}

/* Adds key and the AnyValue of v (taken) to attributes; nothing for null. */
static void
attr(json_t *attributes, const char *key, json_t *v)
{
	json_t *value = v ? any_value(v) : NULL;

	if (value != NULL)
		json_array_append_new(attributes, json_pack("{s:s,s:o}", "key", key, "value", value));
	json_decref(v);
}

static json_t *
attributes_of(const json_t *object)
{
	json_t *out = json_array(), *v;
	const char *key;

	json_object_foreach((json_t *)object, key, v)
		attr(out, key, json_incref(v));
	return out;
}

/* An event at time (skipped when it is none) with attributes (taken). */
static void
event(json_t *events, const char *time, const char *name, json_t *attributes)
{
	json_t *at = nanos(time);

	if (at == NULL) {
		json_decref(attributes);
		return;
	}
	json_array_append_new(events, json_pack("{s:o,s:s,s:o}", "timeUnixNano", at, "name", name,
	    "attributes", attributes));
}

/* The later of two times of the record, either NULL. */
static const char *
later(const char *a, const char *b)
{
	if (idem_timeline_parse_time(b) < 0)
		return a;
	if (idem_timeline_parse_time(a) < 0)
		return b;
	return idem_timeline_parse_time(b) > idem_timeline_parse_time(a) ? b : a;
}

/* The kill point of an attempt, or NULL. */
static const json_t *
kill_of(const json_t *record, const json_t *row)
{
	const json_t *k;
	size_t i;

	json_array_foreach(json_object_get(record, "kill_points"), i, k)
		if (str(k, "job") && str(row, "job") && strcmp(str(k, "job"), str(row, "job")) == 0 &&
		    json_equal(json_object_get(k, "attempt"), json_object_get(row, "attempt")))
			return k;
	return NULL;
}

/* The events of an attempt: its commit, its calls with their answers and
 * keys, its kill and the spans it lost, its ack; and its end as the record
 * knows it: the ack, the kill, or the last of what it did. */
static json_t *
attempt_events(const json_t *row, const json_t *kill, const json_t *lost, const char **end)
{
	json_t *events = json_array(), *call, *commit;
	size_t i;

	*end = str(row, "consumed_at");
	commit = json_array();
	attr(commit, "idem.rows_written", json_incref(json_object_get(row, "rows_written")));
	event(events, str(row, "committed_at"), "commit", commit);
	*end = later(*end, later(str(row, "written_at"), str(row, "committed_at")));
	json_array_foreach(json_object_get(row, "calls"), i, call) {
		json_t *a = json_array();

		attr(a, "http.request.method", json_incref(json_object_get(call, "method")));
		attr(a, "url.path", json_incref(json_object_get(call, "path")));
		attr(a, "idem.idempotency_key", json_incref(json_object_get(call, "idempotency_key")));
		attr(a, "idem.business_key", json_incref(json_object_get(call, "business_key")));
		attr(a, "http.response.status_code", json_incref(json_object_get(call, "status")));
		attr(a, "idem.answer", json_incref(json_object_get(call, "answer")));
		attr(a, "idem.effect", json_incref(json_object_get(call, "effect")));
		attr(a, "idem.answered_at", json_incref(json_object_get(call, "answered_at")));
		event(events, str(call, "at"), "external call", a);
		*end = later(*end, later(str(call, "at"), str(call, "answered_at")));
	}
	if (kill != NULL) {
		json_t *a = json_array();

		attr(a, "idem.step", json_incref(json_object_get(kill, "step")));
		attr(a, "idem.scenario", json_incref(json_object_get(kill, "scenario")));
		event(events, str(kill, "killed_at"), "kill", a);
		*end = str(kill, "killed_at");
	}
	if (json_array_size(lost) > 0) {
		json_t *a = json_array();

		attr(a, "idem.span_ids", json_incref((json_t *)lost));
		event(events, kill ? str(kill, "killed_at") : *end, "spans lost", a);
	}
	if (str(row, "acked_at") != NULL) {
		event(events, str(row, "acked_at"), "ack", json_array());
		*end = str(row, "acked_at");
	}
	return events;
}

/* The names of the trace: its revision, queue kind and name. */
struct names {
	const char *revision, *system, *queue;
};

/* The span of one delivery: a CONSUMER span, the process operation of
 * the messaging conventions. */
static json_t *
attempt_span(const struct names *nm, const json_t *record, const json_t *row, const json_t *lost,
	     const char *trace_id, const char *parent, char span_id[17], const char **end)
{
	long long attempt = json_integer_value(json_object_get(row, "attempt"));
	const json_t *kill = kill_of(record, row);
	json_t *events = attempt_events(row, kill, lost, end), *a = json_array();

	json_t *msg = json_object_get(row, "msg_id");
	char *msg_id = json_is_integer(msg) ? NULL : idem_estrdup(str(row, "msg_id") ?
	    str(row, "msg_id") : "");

	if (msg_id == NULL && asprintf(&msg_id, "%lld", (long long)json_integer_value(msg)) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	idem_trace_span_id(nm->revision, str(row, "job") ? str(row, "job") : "", msg_id, attempt,
	    span_id);
	free(msg_id);
	attr(a, "messaging.system", json_string(nm->system));
	attr(a, "messaging.operation.type", json_string("process"));
	attr(a, "messaging.operation.name", json_string("process"));
	attr(a, "messaging.destination.name", json_string(nm->queue));
	attr(a, "messaging.message.id", json_is_integer(json_object_get(row, "msg_id")) ?
	    json_sprintf("%lld", (long long)json_integer_value(json_object_get(row, "msg_id"))) :
	    json_incref(json_object_get(row, "msg_id")));
	attr(a, "idem.message.delivery_count", json_integer(attempt));
	attr(a, "idem.job.id", json_incref(json_object_get(row, "job")));
	attr(a, "idem.outcome", json_incref(json_object_get(row, "outcome")));
	attr(a, "idem.branch", json_incref(json_object_get(row, "branch")));
	return json_pack("{s:s,s:s,s:s,s:s+,s:i,s:o,s:o,s:o,s:o,s:o}", "traceId", trace_id,
	    "spanId", span_id, "parentSpanId", parent, "name", "process ", nm->queue,
	    "kind", KIND_CONSUMER, "startTimeUnixNano", span_time(str(row, "consumed_at")),
	    "endTimeUnixNano", span_time(*end), "attributes", a, "events", events,
	    "status", kill ? json_pack("{s:i,s:s+}", "code", STATUS_ERROR, "message", "killed at ",
	    str(kill, "step") ? str(kill, "step") : "a step") :
	    json_pack("{s:i}", "code", str(row, "acked_at") ? STATUS_OK : STATUS_UNSET));
}

/* A span of the worker's, in the trace of its job: its own span id and
 * attributes, under its own parent when that is in the trace, else under
 * its attempt's span. */
static json_t *
worker_span(const json_t *span, const char *trace_id, const char *attempt_span_id,
	    const json_t *ids)
{
	static const int codes[] = { STATUS_UNSET, STATUS_OK, STATUS_ERROR };
	static const char *const statuses[] = { "unset", "ok", "error" };
	const char *parent = str(span, "parent_span_id");
	json_t *a = attributes_of(json_object_get(span, "attributes")), *events = json_array(), *e;
	size_t i;
	int code = STATUS_UNSET;

	if (parent == NULL || json_object_get(ids, parent) == NULL)
		parent = attempt_span_id;
	for (i = 0; i < 3; i++)
		if (strcmp(str(span, "status"), statuses[i]) == 0)
			code = codes[i];
	if (strcmp(str(span, "trace_id"), trace_id) != 0)
		attr(a, "idem.worker.trace_id", json_incref(json_object_get(span, "trace_id")));
	attr(a, "idem.worker.pid", json_incref(json_object_get(span, "pid")));
	attr(a, "idem.worker.encoding", json_incref(json_object_get(span, "encoding")));
	json_array_foreach(json_object_get(span, "events"), i, e) {
		const json_t *ea = json_object_get(e, "attributes");

		event(events, str(e, "time"), str(e, "name") ? str(e, "name") : "",
		    json_is_object(ea) ? attributes_of(ea) : json_array());
	}
	return json_pack("{s:s,s:O,s:s,s:O,s:O,s:o,s:o,s:o,s:o,s:{s:i}}", "traceId", trace_id,
	    "spanId", json_object_get(span, "span_id"), "parentSpanId", parent,
	    "name", json_object_get(span, "name"), "kind", json_object_get(span, "kind"),
	    "startTimeUnixNano", span_time(str(span, "start")),
	    "endTimeUnixNano", span_time(str(span, "end")),
	    "attributes", a, "events", events, "status", "code", code);
}

/* The scope's spans of a worker's scope name, made when first named. */
static json_t *
scope_spans(json_t *scopes, const char *scope)
{
	json_t *s;
	size_t i;

	json_array_foreach(scopes, i, s)
		if (strcmp(str(json_object_get(s, "scope"), "name"), scope) == 0)
			return json_object_get(s, "spans");
	json_array_append_new(scopes, s = json_pack("{s:{s:s},s:[]}", "scope", "name", scope,
	    "spans"));
	return json_object_get(s, "spans");
}

/* The worker's spans of one attempt, into their scopes. */
static void
worker_spans(json_t *scopes, const json_t *entry, const char *trace_id, const char *span_id)
{
	json_t *sorted = json_object_get(entry, "spans"), *ids = json_object(), *span;
	size_t i;

	json_array_foreach(sorted, i, span)
		json_object_set_new(ids, str(span, "span_id"), json_true());
	json_array_foreach(sorted, i, span)
		json_array_append_new(scope_spans(scopes, str(span, "scope") ? str(span, "scope") : ""),
		    worker_span(span, trace_id, span_id, ids));
	json_decref(ids);
}

/* The span of one job, over its attempts from its publish: INTERNAL,
 * since it is no operation of the queue's but the deliveries' parent. */
static json_t *
job_span(const struct names *nm, const char *job, const char *start, const char *end)
{
	char trace_id[33], span_id[17];

	idem_trace_id(nm->revision, job, trace_id);
	idem_trace_job_span_id(nm->revision, job, span_id);
	return json_pack("{s:s,s:s,s:s,s:s+,s:i,s:o,s:o,s:[{s:s,s:{s:s}},{s:s,s:{s:s}},{s:s,s:{s:s}}],"
	    "s:[],s:{s:i}}", "traceId", trace_id, "spanId", span_id, "parentSpanId", "",
	    "name", "job ", job, "kind", KIND_INTERNAL, "startTimeUnixNano", span_time(start),
	    "endTimeUnixNano", span_time(end), "attributes", "key", "idem.job.id", "value",
	    "stringValue", job, "key", "messaging.system", "value", "stringValue", nm->system,
	    "key", "messaging.destination.name", "value", "stringValue", nm->queue, "events",
	    "status", "code", STATUS_UNSET);
}

/* The spans of the jobs, each followed by its attempts' spans; the
 * worker's spans go to their scopes. */
static void
job_spans(json_t *own, json_t *scopes, const struct names *nm, const json_t *record,
	  const json_t *spans)
{
	json_t *jobs = by_job(json_object_get(record, "evidence")), *rows, *row, *attempts;
	const char *job, *start, *end, *attempt_end;
	char trace_id[33], parent[17], span_id[17];
	size_t i;

	json_object_foreach(jobs, job, rows) {
		row = json_array_get(rows, 0);
		start = str(row, "published_at") ? str(row, "published_at") : str(row, "consumed_at");
		end = start;
		idem_trace_id(nm->revision, job, trace_id);
		idem_trace_job_span_id(nm->revision, job, parent);
		attempts = json_array();
		json_array_foreach(rows, i, row) {
			json_t *entry = attempt_entry(spans, rows, i);

			json_array_append_new(attempts, attempt_span(nm, record, row,
			    json_object_get(entry, "lost"), trace_id, parent, span_id, &attempt_end));
			end = later(end, attempt_end);
			worker_spans(scopes, entry, trace_id, span_id);
			json_decref(entry);
		}
		json_array_append_new(own, job_span(nm, job, start, end));
		json_array_extend(own, attempts);
		json_decref(attempts);
	}
	json_decref(jobs);
}

json_t *
idem_trace_build(const json_t *record, const json_t *spans)
{
	const json_t *queue = json_object_get(record, "queue");
	struct names nm = { .revision = str(json_object_get(record, "seed"), "revision"),
		.system = str(queue, "kind") ? str(queue, "kind") : "idem",
		.queue = str(queue, "name") ? str(queue, "name") : "" };
	json_t *own = json_array(), *scopes = json_array(), *resource;

	if (nm.revision == NULL)
		nm.revision = "";
	job_spans(own, scopes, &nm, record, spans);
	json_array_insert_new(scopes, 0, json_pack("{s:{s:s,s:s},s:o}", "scope", "name", "idem",
	    "version", IDEM_VERSION, "spans", own));
	resource = json_array();
	attr(resource, "service.name", json_string("idem"));
	attr(resource, "service.version", json_string(IDEM_VERSION));
	attr(resource, "idem.rehearsal", json_incref(json_object_get(record, "rehearsal")));
	attr(resource, "idem.seed.revision", json_string(nm.revision));
	attr(resource, "idem.jobs", json_incref(json_object_get(record, "jobs")));
	return json_pack("{s:[{s:{s:o},s:o}]}", "resourceSpans", "resource", "attributes", resource,
	    "scopeSpans", scopes);
}

static size_t
discard(void *data, size_t size, size_t n, void *unused)
{
	(void)data;
	(void)unused;
	return size * n;
}

int
idem_trace_post(const char *url, const char *text, struct idem_error *err)
{
	CURL *http = curl_easy_init();
	struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
	char curl_error[CURL_ERROR_SIZE] = "";
	long status = 0;
	CURLcode rc;

	if (http == NULL || headers == NULL) {
		curl_slist_free_all(headers);
		curl_easy_cleanup(http);
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: libcurl could not start", url);
	}
	curl_easy_setopt(http, CURLOPT_URL, url);
	curl_easy_setopt(http, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(http, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(http, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(http, CURLOPT_ERRORBUFFER, curl_error);
	curl_easy_setopt(http, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(http, CURLOPT_POSTFIELDS, text);
	curl_easy_setopt(http, CURLOPT_WRITEFUNCTION, discard);
	rc = curl_easy_perform(http);
	curl_easy_getinfo(http, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(http);
	if (rc != CURLE_OK)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: %s", url,
		    *curl_error ? curl_error : curl_easy_strerror(rc));
	if (status < 200 || status > 299)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: answered HTTP %ld", url, status);
	return 0;
}
