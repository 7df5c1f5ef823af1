#include <stdlib.h>

#include "mkrecord/trace.h"
#include "unit.h"

/* A record of one job of a pg-boss queue, message 7: attempt 1 killed
 * after its commit and a call, attempt 2 acked; and job-2, a duplicate
 * publish, two copies each with an attempt 1. */
static const char record_text[] =
    "{\"rehearsal\": \"r\", \"jobs\": 2, \"seed\": {\"revision\": \"0123abcd\"},"
    " \"queue\": {\"kind\": \"pg-boss\", \"name\": \"invoices\"},"
    " \"kill_points\": [{\"scenario\": \"kill-after-commit\", \"job\": \"job-1\", \"attempt\": 1,"
    "   \"step\": \"after-commit\", \"killed_at\": \"2026-12-01T10:00:00.300000Z\"}],"
    " \"evidence\": ["
    "  {\"job\": \"job-1\", \"msg_id\": 7, \"attempt\": 1, \"published_at\": \"2026-12-01T10:00:00.000000Z\","
    "   \"consumed_at\": \"2026-12-01T10:00:00.100000Z\", \"committed_at\": \"2026-12-01T10:00:00.200000Z\","
    "   \"acked_at\": null, \"rows_written\": 1, \"outcome\": \"killed at after-commit\","
    "   \"calls\": [{\"at\": \"2026-12-01T10:00:00.250000Z\", \"method\": \"POST\", \"path\": \"/v1/charges\","
    "     \"idempotency_key\": \"k-1\", \"status\": 200, \"answer\": \"charged\"}]},"
    "  {\"job\": \"job-2\", \"msg_id\": \"a\", \"attempt\": 1, \"published_at\": null,"
    "   \"consumed_at\": \"2026-12-01T10:00:00.110000Z\", \"acked_at\": \"2026-12-01T10:00:00.160000Z\"},"
    "  {\"job\": \"job-2\", \"msg_id\": \"b\", \"attempt\": 1, \"published_at\": null,"
    "   \"consumed_at\": \"2026-12-01T10:00:00.120000Z\", \"acked_at\": \"2026-12-01T10:00:00.170000Z\"},"
    "  {\"job\": \"job-1\", \"msg_id\": 7, \"attempt\": 2, \"published_at\": \"2026-12-01T10:00:00.000000Z\","
    "   \"consumed_at\": \"2026-12-01T10:00:02.300000Z\", \"committed_at\": null,"
    "   \"acked_at\": \"2026-12-01T10:00:02.310000Z\", \"calls\": []}]}";

/* span rows as idem-tsv(5) 1.9 writes them: the worker's span of
 * attempt 1 (its parent, the worker's own root, never received), a child
 * of it, and a span of attempt 2 */
#define T "\t"
static const char *const rows[] = {
	"span" T "11111111111111111111111111111111" T "aaaaaaaaaaaaaaaa" T "ffffffffffffffff" T
	    "INSERT idem" T "3" T "2026-12-01T10:00:00.150000Z" T "2026-12-01T10:00:00.190000Z" T
	    "ok" T "4242" T "0" T "job-1" T "1" T "pg" T "{\"db.system\":\"postgresql\",\"rows\":1}" T
	    "[{\"name\":\"sent\",\"time\":\"2026-12-01T10:00:00.151000Z\",\"attributes\":{}}]" T "json",
	"span" T "11111111111111111111111111111111" T "bbbbbbbbbbbbbbbb" T "aaaaaaaaaaaaaaaa" T
	    "pg.query:INSERT" T "3" T "2026-12-01T10:00:00.160000Z" T "2026-12-01T10:00:00.170000Z" T
	    "unset" T "4242" T "0" T "job-1" T "1" T "\\N" T "{}" T "[]" T "protobuf",
	"span" T "22222222222222222222222222222222" T "cccccccccccccccc" T "\\N" T
	    "SELECT idem" T "3" T "2026-12-01T10:00:02.301000Z" T "2026-12-01T10:00:02.302000Z" T
	    "error" T "\\N" T "-1" T "job-1" T "2" T "pg" T "{}" T "[]" T "json",
	"span_lost" T "job-1" T "1" T "4242" T "[\"ffffffffffffffff\"]" T "2026-12-01T10:00:00.300000Z",
	"span" T "33333333333333333333333333333333" T "dddddddddddddddd" T "\\N" T
	    "other" T "1" T "2026-12-01T10:00:00.150000Z" T "2026-12-01T10:00:00.190000Z" T
	    "ok" T "1" T "0" T "job-9" T "1" T "\\N" T "{}" T "[]" T "json",
	NULL
};

static int
listed(const char *job)
{
	return strcmp(job, "job-9") != 0;
}

static const json_t *
span_named(const json_t *trace, const char *scope, const char *name)
{
	const json_t *s, *span;
	size_t i, j;

	json_array_foreach(json_object_get(json_array_get(json_object_get(trace, "resourceSpans"), 0),
	    "scopeSpans"), i, s) {
		if (strcmp(json_string_value(json_object_get(json_object_get(s, "scope"), "name")),
		    scope) != 0)
			continue;
		json_array_foreach(json_object_get(s, "spans"), j, span)
			if (strcmp(json_string_value(json_object_get(span, "name")), name) == 0)
				return span;
	}
	return NULL;
}

static const char *
get(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* The value of an attribute, as its AnyValue's JSON. */
static char *
attribute(const json_t *span, const char *key)
{
	const json_t *a;
	size_t i;

	json_array_foreach(json_object_get(span, "attributes"), i, a)
		if (strcmp(get(a, "key"), key) == 0)
			return json_dumps(json_object_get(a, "value"), JSON_COMPACT | JSON_SORT_KEYS);
	return NULL;
}

static void
check_attr(const json_t *span, const char *key, const char *want)
{
	char *got = attribute(span, key);

	CHECK_STR(got, want, key);
	free(got);
}

static void
test_ids(void)
{
	char id[33], span[17];

	idem_trace_id("0123abcd", "job-1", id);
	CHECK_STR(id, "dfc91153715b6fda030f95dda2bc2260", "trace id: SHA-256 of revision NUL job");
	idem_trace_job_span_id("0123abcd", "job-1", span);
	CHECK_STR(span, "ab044ee532dc7cd8", "job span id: the bytes after the trace id");
	idem_trace_span_id("0123abcd", "job-1", "7", 2, span);
	CHECK_STR(span, "0f18dfc78788e1ff", "attempt span id: revision, job, msg id, attempt");
}

static void
test_rows(json_t *spans)
{
	struct idem_error err;
	size_t i;

	for (i = 0; rows[i]; i++)
		CHECK(idem_trace_read_row(spans, rows[i], listed, &err) == (i == 4 ? 0 : 1),
		    "span rows read, a job not listed left out");
	CHECK(idem_trace_read_row(spans, "attempt\tjob-1\t7", listed, &err) == 0, "other kinds: 0");
	CHECK(idem_trace_read_row(spans, "span\tnothex\tx", listed, &err) < 0, "a short span row: -1");
	CHECK(idem_trace_read_row(spans, "span" T "11111111111111111111111111111111" T
	    "aaaaaaaaaaaaaaaa" T "\\N" T "n" T "9" T "2026-12-01T10:00:00Z" T "2026-12-01T10:00:00Z" T
	    "ok" T "1" T "0" T "job-1" T "1" T "\\N" T "{}" T "[]" T "json", listed, &err) < 0,
	    "a kind out of 0 to 5: -1");
	CHECK(json_object_size(spans) == 2, "spans under job and attempt");
}

static void
test_trace(json_t *record, json_t *spans)
{
	json_t *trace, *job = NULL;
	const json_t *a1, *a2, *insert, *query, *select, *copy_a, *copy_b, *events;
	char *text;

	idem_trace_annotate(record, spans);
	trace = idem_trace_build(record, spans);
	job = json_array_get(json_object_get(record, "evidence"), 0);
	text = json_dumps(json_object_get(job, "worker_spans"), JSON_COMPACT);
	CHECK_STR(text, "[\"INSERT idem\",\"pg.query:INSERT\"]", "the record: span names by start");
	free(text);
	text = json_dumps(json_object_get(job, "spans_lost"), JSON_COMPACT);
	CHECK_STR(text, "[\"ffffffffffffffff\"]", "the record: spans lost of the killed attempt");
	free(text);
	a1 = json_array_get(json_object_get(json_array_get(json_object_get(json_array_get(
	    json_object_get(trace, "resourceSpans"), 0), "scopeSpans"), 0), "spans"), 1);
	a2 = json_array_get(json_object_get(json_array_get(json_object_get(json_array_get(
	    json_object_get(trace, "resourceSpans"), 0), "scopeSpans"), 0), "spans"), 2);
	CHECK_STR(get(span_named(trace, "idem", "job job-1"), "spanId"), "ab044ee532dc7cd8",
	    "the job's span");
	CHECK_STR(get(a1, "parentSpanId"), "ab044ee532dc7cd8", "attempt 1 under its job");
	CHECK_STR(get(a2, "spanId"), "0f18dfc78788e1ff", "attempt 2's own id");
	CHECK(json_integer_value(json_object_get(a1, "kind")) == 5, "an attempt: CONSUMER");
	CHECK_STR(get(a1, "startTimeUnixNano"), "1796119200100000000", "from its delivery");
	CHECK_STR(get(a1, "endTimeUnixNano"), "1796119200300000000", "to its kill");
	CHECK_STR(get(a2, "endTimeUnixNano"), "1796119202310000000", "to its ack");
	CHECK(json_integer_value(json_object_get(json_object_get(a1, "status"), "code")) == 2,
	    "a killed attempt: ERROR");
	check_attr(a1, "messaging.system", "{\"stringValue\":\"pg-boss\"}");
	check_attr(a1, "messaging.destination.name", "{\"stringValue\":\"invoices\"}");
	check_attr(a1, "messaging.message.id", "{\"stringValue\":\"7\"}");
	check_attr(a2, "idem.message.delivery_count", "{\"intValue\":\"2\"}");
	events = json_object_get(a1, "events");
	CHECK(json_array_size(events) == 4, "commit, call, kill, spans lost");
	CHECK_STR(get(json_array_get(events, 0), "name"), "commit", "the commit");
	CHECK_STR(get(json_array_get(events, 1), "name"), "external call", "the call");
	check_attr(json_array_get(events, 1), "idem.idempotency_key", "{\"stringValue\":\"k-1\"}");
	check_attr(json_array_get(events, 1), "idem.answer", "{\"stringValue\":\"charged\"}");
	CHECK_STR(get(json_array_get(events, 2), "name"), "kill", "the kill");
	CHECK_STR(get(json_array_get(events, 3), "name"), "spans lost", "the spans lost");
	check_attr(json_array_get(events, 3), "idem.span_ids",
	    "{\"arrayValue\":{\"values\":[{\"stringValue\":\"ffffffffffffffff\"}]}}");
	CHECK_STR(get(json_array_get(json_object_get(a2, "events"), 0), "name"), "ack", "the ack");
	insert = span_named(trace, "pg", "INSERT idem");
	query = span_named(trace, "", "pg.query:INSERT");
	select = span_named(trace, "pg", "SELECT idem");
	CHECK_STR(get(insert, "spanId"), "aaaaaaaaaaaaaaaa", "the worker's own span id");
	CHECK_STR(get(insert, "traceId"), "dfc91153715b6fda030f95dda2bc2260", "in the job's trace");
	CHECK_STR(get(insert, "parentSpanId"), get(a1, "spanId"), "parent not in the trace: the attempt");
	CHECK_STR(get(query, "parentSpanId"), "aaaaaaaaaaaaaaaa", "parent in the trace: kept");
	CHECK_STR(get(select, "parentSpanId"), get(a2, "spanId"), "a root span: under its attempt");
	check_attr(insert, "db.system", "{\"stringValue\":\"postgresql\"}");
	check_attr(insert, "rows", "{\"intValue\":\"1\"}");
	check_attr(insert, "idem.worker.trace_id",
	    "{\"stringValue\":\"11111111111111111111111111111111\"}");
	CHECK_STR(get(json_array_get(json_object_get(insert, "events"), 0), "timeUnixNano"),
	    "1796119200151000000", "the worker's event");
	CHECK(json_integer_value(json_object_get(json_object_get(select, "status"), "code")) == 2,
	    "status error");
	CHECK(span_named(trace, "", "other") == NULL, "a job not listed: not in the trace");
	copy_a = json_array_get(json_object_get(json_array_get(json_object_get(json_array_get(
	    json_object_get(trace, "resourceSpans"), 0), "scopeSpans"), 0), "spans"), 4);
	copy_b = json_array_get(json_object_get(json_array_get(json_object_get(json_array_get(
	    json_object_get(trace, "resourceSpans"), 0), "scopeSpans"), 0), "spans"), 5);
	CHECK(copy_a && copy_b && strcmp(get(copy_a, "spanId"), get(copy_b, "spanId")) != 0,
	    "two copies of a job: two span ids");
	CHECK_STR(get(copy_a, "parentSpanId"), get(span_named(trace, "idem", "job job-2"), "spanId"),
	    "a copy under its job");
	json_decref(trace);
}

static int
has_event(const json_t *span, const char *name)
{
	const json_t *e;
	size_t i;

	json_array_foreach(json_object_get(span, "events"), i, e)
		if (strcmp(get(e, "name"), name) == 0)
			return 1;
	return 0;
}

/* Two copies of job-2 worked at once by two processes, as in a race: a
 * span of process 300 that starts after process 400 consumed the second
 * copy is still the first copy's; by time alone it would be the second's. */
static void
test_deliveries(const json_t *record)
{
	json_t *attempts = json_loads("["
	    "{\"job\": \"job-2\", \"msg_id\": \"a\", \"attempt\": 1, \"pid\": 300,"
	    " \"consumed_at\": \"2026-12-01T10:00:00.110000Z\"},"
	    "{\"job\": \"job-2\", \"msg_id\": \"b\", \"attempt\": 1, \"pid\": 400,"
	    " \"consumed_at\": \"2026-12-01T10:00:00.120000Z\"}]", 0, NULL);
	json_t *spans = idem_trace_spans_new(), *copy = json_deep_copy(record), *trace;
	struct idem_error err;
	const json_t *late, *early, *copy_a, *copy_b;

	CHECK(idem_trace_read_row(spans, "span" T "44444444444444444444444444444444" T
	    "eeeeeeeeeeeeeeee" T "\\N" T "late" T "1" T "2026-12-01T10:00:00.130000Z" T
	    "2026-12-01T10:00:00.140000Z" T "ok" T "300" T "0" T "job-2" T "1" T "\\N" T "{}" T
	    "[]" T "json", NULL, &err) == 1, "the first process's late span is read");
	CHECK(idem_trace_read_row(spans, "span" T "55555555555555555555555555555555" T
	    "1111111111111111" T "\\N" T "early" T "1" T "2026-12-01T10:00:00.115000Z" T
	    "2026-12-01T10:00:00.118000Z" T "ok" T "\\N" T "1" T "job-2" T "1" T "\\N" T "{}" T
	    "[]" T "json", NULL, &err) == 1, "a span of no known process is read");
	CHECK(idem_trace_read_row(spans, "span_lost" T "job-2" T "1" T "300" T
	    "[\"abababababababab\"]" T "2026-12-01T10:00:00.130000Z", NULL, &err) == 1,
	    "the first process's lost spans are read");
	idem_trace_deliveries(spans, attempts);
	trace = idem_trace_build(copy, spans);
	late = span_named(trace, "", "late");
	early = span_named(trace, "", "early");
	copy_a = copy_b = NULL;
	{
		const json_t *s, *span;
		size_t i, j;

		json_array_foreach(json_object_get(json_array_get(json_object_get(trace,
		    "resourceSpans"), 0), "scopeSpans"), i, s)
			json_array_foreach(json_object_get(s, "spans"), j, span) {
				char *m = attribute(span, "messaging.message.id");

				if (m != NULL && strcmp(m, "{\"stringValue\":\"a\"}") == 0)
					copy_a = span;
				if (m != NULL && strcmp(m, "{\"stringValue\":\"b\"}") == 0)
					copy_b = span;
				free(m);
			}
	}
	CHECK(late != NULL && early != NULL && copy_a != NULL && copy_b != NULL,
	    "both spans and both copies are in the trace");
	if (late && early && copy_a && copy_b) {
		CHECK_STR(get(late, "parentSpanId"), get(copy_a, "spanId"),
		    "the late span of process 300 is under the copy process 300 worked on");
		CHECK_STR(get(early, "parentSpanId"), get(copy_a, "spanId"),
		    "a span of no process goes by time: the copy consumed last before it");
		CHECK(has_event(copy_a, "spans lost") && !has_event(copy_b, "spans lost"),
		    "the spans lost by the kill of process 300 are the copy it worked on");
	}
	json_decref(trace);
	json_decref(copy);
	json_decref(spans);
	json_decref(attempts);
}

int
main(void)
{
	json_t *record = json_loads(record_text, 0, NULL), *spans = idem_trace_spans_new();

	CHECK(record != NULL, "the record parses");
	test_ids();
	test_rows(spans);
	test_trace(record, spans);
	test_deliveries(record);
	json_decref(record);
	json_decref(spans);
	return unit_done("trace");
}
