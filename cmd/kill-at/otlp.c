/* otlp.c: OTLP trace export requests decoded (otlp.h). The protobuf
 * decoder is protobuf-c's, generated at build time from the project's own
 * subset of OTLP's schema (cmd/kill-at/otlp/); jansson reads OTLP/JSON.
 * Every span of a request is made first, then handed on: a request is
 * taken whole or not at all. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

/* made by protoc-c in the build directory (Makefile): not a header of the tree */
#include <trace_service.pb-c.h>

#include "error.h"
#include "otlp.h"
#include "text.h"

/* messages within messages of a protobuf body, at most: deeper is refused
 * before protobuf-c, which recurses, unpacks it */
#define PB_MAX_DEPTH 24

typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;
typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Trace__V1__Span Span;
typedef Opentelemetry__Proto__Trace__V1__ResourceSpans ResourceSpans;
typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest Request;

struct decode {
	long long skew_us;
	size_t dropped;
	char *why;
	size_t why_size;
	int bad;
	/* the spans made, handed on once all are */
	struct made { struct otlp_span s; char *name, *scope, *attributes, *events; } *spans;
	size_t nspans, max_spans;
};

static int __attribute__((format(printf, 2, 3)))
bad(struct decode *d, const char *fmt, ...)
{
	va_list ap;

	if (!d->bad) {
		va_start(ap, fmt);
		vsnprintf(d->why, d->why_size, fmt, ap);
		va_end(ap);
	}
	d->bad = 1;
	return -1;
}

/* Text as valid UTF-8 without NUL bytes, a byte that is not '?', cut at
 * a character's start to OTLP_MAX_TEXT bytes. Caller frees. */
static char *
clean_text(const char *s, size_t len)
{
	char *out = idem_emalloc((len < OTLP_MAX_TEXT ? len : OTLP_MAX_TEXT) + 1);
	size_t i = 0, o = 0, n, k;

	while (i < len) {
		unsigned char c = (unsigned char)s[i];

		n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		if (n == 0 || i + n > len || !idem_utf8_valid(s + i, n))
			n = 0;
		if (o + (n ? n : 1) > OTLP_MAX_TEXT)
			break;
		if (n == 0) {
			out[o++] = '?';
			i++;
			continue;
		}
		for (k = 0; k < n; k++)
			out[o++] = s[i + k];
		i += n;
	}
	out[o] = '\0';
	return out;
}

static json_t *
text_json(const char *s, size_t len)
{
	char *t = clean_text(s, len);
	json_t *j = json_string(t);

	free(t);
	return j;
}

static void
to_hex(const unsigned char *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static int
all_zero(const char *hex)
{
	return strspn(hex, "0") == strlen(hex);
}

/* The span's times and enums, and the ids as hex, checked. */
static int
check_span(struct decode *d, struct otlp_span *s, unsigned long long start_ns,
	   unsigned long long end_ns, long long status)
{
	static const char *const statuses[] = { "unset", "ok", "error" };

	if (strlen(s->trace_id) != 32 || all_zero(s->trace_id))
		return bad(d, "span %zu: a trace id of 16 bytes, not all zero, expected", d->nspans + 1);
	if (strlen(s->span_id) != 16 || all_zero(s->span_id))
		return bad(d, "span %zu: a span id of 8 bytes, not all zero, expected", d->nspans + 1);
	if (s->parent_span_id[0] != '\0' && strlen(s->parent_span_id) != 16)
		return bad(d, "span %zu: a parent span id of 8 bytes expected", d->nspans + 1);
	if (all_zero(s->parent_span_id))
		s->parent_span_id[0] = '\0';
	if (s->kind < 0 || s->kind > 5)
		return bad(d, "span %zu: kind %d is not a SpanKind (0 to 5)", d->nspans + 1, s->kind);
	if (status < 0 || status > 2)
		return bad(d, "span %zu: status code %lld is not one (0 to 2)", d->nspans + 1, status);
	s->status = statuses[status];
	s->start_us = (long long)(start_ns / 1000) + d->skew_us;
	s->end_us = (long long)(end_ns / 1000) + d->skew_us;
	return 0;
}

/* Takes a span made: its texts are the caller's no more. */
static int
keep(struct decode *d, struct otlp_span *s, char *name, char *scope, json_t *attributes,
     json_t *events)
{
	struct made *m;

	if (d->nspans == d->max_spans) {
		free(name);
		free(scope);
		json_decref(attributes);
		json_decref(events);
		return -1;
	}
	m = &d->spans[d->nspans++];
	m->s = *s;
	m->name = name;
	m->scope = scope;
	m->attributes = json_dumps(attributes, JSON_COMPACT);
	m->events = json_dumps(events, JSON_COMPACT);
	json_decref(attributes);
	json_decref(events);
	if (m->attributes == NULL || m->events == NULL)
		idem_die(IDEM_EXIT_ENV, "out of memory");
	m->s.name = m->name;
	m->s.scope = m->scope;
	m->s.attributes = m->attributes;
	m->s.events = m->events;
	return 0;
}

/* An event: {name, time, attributes}. */
static json_t *
event_json(struct decode *d, json_t *name, unsigned long long time_ns, json_t *attributes)
{
	char at[32];

	idem_format_time((long long)(time_ns / 1000) + d->skew_us, at);
	return json_pack("{s:o,s:s,s:o}", "name", name, "time", at, "attributes", attributes);
}

/* ---- protobuf ---- */

static int
varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	int shift;

	*v = 0;
	for (shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;

		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return 0;
	}
	return -1;
}

/* Whether the messages within a message of descriptor desc nest no
 * deeper than PB_MAX_DEPTH; -1 for a body that is not protobuf. */
static int
pb_nesting(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end, int depth)
{
	const ProtobufCFieldDescriptor *f;
	uint64_t key, n;

	if (depth > PB_MAX_DEPTH)
		return -1;
	while (p < end) {
		if (varint(&p, end, &key) < 0)
			return -1;
		switch (key & 7) {
		case 0: if (varint(&p, end, &n) < 0) return -1; break;
		case 1: if (end - p < 8) return -1; p += 8; break;
		case 5: if (end - p < 4) return -1; p += 4; break;
		case 2:
			if (varint(&p, end, &n) < 0 || n > (uint64_t)(end - p))
				return -1;
			f = key >> 3 <= UINT_MAX ?
			    protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3)) : NULL;
			if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE &&
			    pb_nesting(f->descriptor, p, p + n, depth + 1) < 0)
				return -1;
			p += n;
			break;
		default: return -1;
		}
	}
	return 0;
}

static json_t *pb_attributes(struct decode *d, KeyValue *const *kv, size_t n, int depth);

static json_t *
pb_value(struct decode *d, const AnyValue *v, int depth)
{
	json_t *out;
	char *b64;
	size_t i, n;

	if (v == NULL)
		return json_null();
	switch (v->value_case) {
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE:
		return text_json(v->string_value, strlen(v->string_value));
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE:
		return json_boolean(v->bool_value);
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE:
		return json_integer(v->int_value);
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_DOUBLE_VALUE:
		return (out = json_real(v->double_value)) ? out : json_null();
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BYTES_VALUE:
		n = v->bytes_value.len < OTLP_MAX_TEXT / 4 * 3 ? v->bytes_value.len : OTLP_MAX_TEXT / 4 * 3;
		b64 = idem_emalloc(sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL));
		sodium_bin2base64(b64, sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL),
		    v->bytes_value.data, n, sodium_base64_VARIANT_ORIGINAL);
		out = json_string(b64);
		free(b64);
		return out;
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_ARRAY_VALUE:
		if (depth >= OTLP_MAX_NESTING || v->array_value == NULL) {
			d->dropped += depth >= OTLP_MAX_NESTING;
			return json_null();
		}
		out = json_array();
		n = v->array_value->n_values;
		for (i = 0; i < n && i < OTLP_MAX_ELEMENTS; i++)
			json_array_append_new(out, pb_value(d, v->array_value->values[i], depth + 1));
		return out;
	case OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_KVLIST_VALUE:
		if (depth >= OTLP_MAX_NESTING || v->kvlist_value == NULL) {
			d->dropped += depth >= OTLP_MAX_NESTING;
			return json_null();
		}
		return pb_attributes(d, v->kvlist_value->values, v->kvlist_value->n_values, depth + 1);
	default:
		return json_null();
	}
}

/* Key-value pairs as a JSON object, the first OTLP_MAX_ATTRIBUTES (or, in
 * a value, OTLP_MAX_ELEMENTS) kept. */
static json_t *
pb_attributes(struct decode *d, KeyValue *const *kv, size_t n, int depth)
{
	size_t max = depth == 0 ? OTLP_MAX_ATTRIBUTES : OTLP_MAX_ELEMENTS, i;
	json_t *out = json_object();
	char *key;

	for (i = 0; i < n; i++) {
		if (i >= max) {
			d->dropped += n - max;
			break;
		}
		key = clean_text(kv[i]->key, strlen(kv[i]->key));
		json_object_set_new(out, key, pb_value(d, kv[i]->value, depth));
		free(key);
	}
	return out;
}

static long long
pb_pid(const ResourceSpans *rs)
{
	size_t i;

	for (i = 0; rs->resource != NULL && i < rs->resource->n_attributes; i++) {
		const KeyValue *kv = rs->resource->attributes[i];

		if (strcmp(kv->key, "process.pid") == 0 && kv->value != NULL &&
		    kv->value->value_case == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE &&
		    kv->value->int_value > 0 && kv->value->int_value <= INT_MAX)
			return kv->value->int_value;
	}
	return 0;
}

static int
pb_span(struct decode *d, const Span *sp, long long pid, const char *scope)
{
	struct otlp_span s = { .pid = pid, .kind = sp->kind };
	json_t *events = json_array();
	size_t i, n;

	if (sp->trace_id.len == 16)
		to_hex(sp->trace_id.data, 16, s.trace_id);
	if (sp->span_id.len == 8)
		to_hex(sp->span_id.data, 8, s.span_id);
	if (sp->parent_span_id.len == 8)
		to_hex(sp->parent_span_id.data, 8, s.parent_span_id);
	else if (sp->parent_span_id.len != 0)
		strcpy(s.parent_span_id, "?");
	if (check_span(d, &s, sp->start_time_unix_nano, sp->end_time_unix_nano,
	    sp->status ? sp->status->code : 0) < 0) {
		json_decref(events);
		return -1;
	}
	for (i = 0, n = sp->n_events; i < n; i++) {
		const Opentelemetry__Proto__Trace__V1__Span__Event *e = sp->events[i];

		if (i >= OTLP_MAX_EVENTS) {
			d->dropped += e->n_attributes;
			continue;
		}
		json_array_append_new(events, event_json(d, text_json(e->name, strlen(e->name)),
		    e->time_unix_nano, pb_attributes(d, e->attributes, e->n_attributes, 0)));
	}
	return keep(d, &s, clean_text(sp->name, strlen(sp->name)),
	    scope ? clean_text(scope, strlen(scope)) : NULL,
	    pb_attributes(d, sp->attributes, sp->n_attributes, 0), events);
}

static int
decode_protobuf(struct decode *d, const uint8_t *body, size_t len)
{
	Request *req;
	size_t i, j, k, n = 0;
	int rc = 0;

	if (pb_nesting(&opentelemetry__proto__collector__trace__v1__export_trace_service_request__descriptor,
	    body, body + len, 0) < 0 ||
	    (req = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(NULL,
	    len, body)) == NULL)
		return bad(d, "not an ExportTraceServiceRequest in protobuf");
	for (i = 0; i < req->n_resource_spans; i++)
		for (j = 0; j < req->resource_spans[i]->n_scope_spans; j++)
			n += req->resource_spans[i]->scope_spans[j]->n_spans;
	if (n > d->max_spans) {
		d->nspans = n;
		rc = OTLP_TOO_MANY;
		goto out;
	}
	for (i = 0; i < req->n_resource_spans && rc == 0; i++) {
		const ResourceSpans *rs = req->resource_spans[i];
		long long pid = pb_pid(rs);

		for (j = 0; j < rs->n_scope_spans && rc == 0; j++) {
			const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss = rs->scope_spans[j];
			const char *scope = ss->scope && ss->scope->name[0] ? ss->scope->name : NULL;

			for (k = 0; k < ss->n_spans && rc == 0; k++)
				rc = pb_span(d, ss->spans[k], pid, scope);
		}
	}
out:
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(req,
	    NULL);
	return rc;
}

/* ---- OTLP/JSON ---- */

/* A 64-bit number: a JSON integer, or a decimal string (OTLP/JSON's way
 * for int64 and fixed64). */
static int
j_number(json_t *v, int sign, long long *out, unsigned long long *uout)
{
	const char *s;
	char *end;

	if (json_is_integer(v)) {
		if (!sign && json_integer_value(v) < 0)
			return -1;
		*out = json_integer_value(v);
		*uout = (unsigned long long)*out;
		return 0;
	}
	if (!json_is_string(v) || (s = json_string_value(v))[0] == '\0' ||
	    strspn(s + (sign && s[0] == '-'), "0123456789") != strlen(s + (sign && s[0] == '-')))
		return -1;
	errno = 0;
	if (sign)
		*out = strtoll(s, &end, 10);
	else
		*uout = strtoull(s, &end, 10);
	return errno || end == s || *end != '\0' || (sign && end == s + 1 && s[0] == '-') ? -1 : 0;
}

/* A hex id of n bytes, lowercased; absent or "" is "" when optional. */
static int
j_hex(json_t *v, size_t n, char *out, int optional)
{
	const char *s = json_string_value(v);
	size_t i;

	out[0] = '\0';
	if (v == NULL || (optional && s != NULL && s[0] == '\0'))
		return optional ? 0 : -1;
	if (s == NULL || strlen(s) != 2 * n || strspn(s, "0123456789abcdefABCDEF") != 2 * n)
		return -1;
	for (i = 0; i <= 2 * n; i++)
		out[i] = (char)(s[i] >= 'A' && s[i] <= 'F' ? s[i] - 'A' + 'a' : s[i]);
	return 0;
}

static json_t *j_attributes(struct decode *d, json_t *list, int depth);

static json_t *
j_value(struct decode *d, json_t *v, int depth)
{
	unsigned long long u;
	const char *s;
	json_t *x;
	long long n;
	size_t i;

	if (!json_is_object(v))
		return json_null();
	if ((x = json_object_get(v, "stringValue")) != NULL)
		return json_is_string(x) ? text_json(json_string_value(x), json_string_length(x)) : NULL;
	if ((x = json_object_get(v, "boolValue")) != NULL)
		return json_is_boolean(x) ? json_incref(x) : NULL;
	if ((x = json_object_get(v, "intValue")) != NULL)
		return j_number(x, 1, &n, &u) == 0 ? json_integer(n) : NULL;
	if ((x = json_object_get(v, "doubleValue")) != NULL) {
		if (json_is_number(x))
			return json_real(json_number_value(x));
		s = json_string_value(x);
		return s && (!strcmp(s, "NaN") || !strcmp(s, "Infinity") || !strcmp(s, "-Infinity")) ?
		    json_null() : NULL;
	}
	if ((x = json_object_get(v, "bytesValue")) != NULL)
		return json_is_string(x) ? text_json(json_string_value(x), json_string_length(x)) : NULL;
	if ((x = json_object_get(v, "arrayValue")) != NULL) {
		json_t *values = json_object_get(x, "values"), *out;

		if (!json_is_object(x) || (values != NULL && !json_is_array(values)))
			return NULL;
		if (depth >= OTLP_MAX_NESTING) {
			d->dropped++;
			return json_null();
		}
		out = json_array();
		for (i = 0; i < json_array_size(values) && i < OTLP_MAX_ELEMENTS; i++) {
			json_t *e = j_value(d, json_array_get(values, i), depth + 1);

			if (e == NULL) {
				json_decref(out);
				return NULL;
			}
			json_array_append_new(out, e);
		}
		return out;
	}
	if ((x = json_object_get(v, "kvlistValue")) != NULL) {
		if (!json_is_object(x))
			return NULL;
		if (depth >= OTLP_MAX_NESTING) {
			d->dropped++;
			return json_null();
		}
		return j_attributes(d, json_object_get(x, "values"), depth + 1);
	}
	return json_null();
}

/* A JSON array of {key, value} as an object; NULL when it is not one. */
static json_t *
j_attributes(struct decode *d, json_t *list, int depth)
{
	size_t max = depth == 0 ? OTLP_MAX_ATTRIBUTES : OTLP_MAX_ELEMENTS, i;
	json_t *out, *kv, *key, *value;
	char *k;

	if (list != NULL && !json_is_array(list))
		return NULL;
	out = json_object();
	json_array_foreach(list, i, kv) {
		key = json_object_get(kv, "key");
		if (!json_is_string(key)) {
			json_decref(out);
			return NULL;
		}
		if (i >= max) {
			d->dropped++;
			continue;
		}
		if ((value = j_value(d, json_object_get(kv, "value"), depth)) == NULL) {
			json_decref(out);
			return NULL;
		}
		k = clean_text(json_string_value(key), json_string_length(key));
		json_object_set_new(out, k, value);
		free(k);
	}
	return out;
}

static json_t *
j_events(struct decode *d, json_t *list)
{
	unsigned long long time_ns;
	json_t *out = json_array(), *e, *name, *attributes;
	long long ignored;
	size_t i;

	if (list != NULL && !json_is_array(list))
		goto fail;
	json_array_foreach(list, i, e) {
		name = json_object_get(e, "name");
		time_ns = 0;
		if (!json_is_object(e) || (name != NULL && !json_is_string(name)) ||
		    (json_object_get(e, "timeUnixNano") != NULL &&
		    j_number(json_object_get(e, "timeUnixNano"), 0, &ignored, &time_ns) < 0) ||
		    (attributes = j_attributes(d, json_object_get(e, "attributes"), 0)) == NULL)
			goto fail;
		if (i >= OTLP_MAX_EVENTS) {
			d->dropped += json_object_size(attributes);
			json_decref(attributes);
			continue;
		}
		json_array_append_new(out, event_json(d, text_json(name ? json_string_value(name) : "",
		    name ? json_string_length(name) : 0), time_ns, attributes));
	}
	return out;
fail:
	json_decref(out);
	return NULL;
}

static int
j_span(struct decode *d, json_t *sp, long long pid, const char *scope)
{
	struct otlp_span s = { .pid = pid };
	unsigned long long start_ns = 0, end_ns = 0, ignored;
	json_t *name = json_object_get(sp, "name"), *status = json_object_get(sp, "status");
	json_t *attributes = NULL, *events = NULL, *x;
	long long kind = 0, code = 0, start, end;

	if (!json_is_object(sp) || j_hex(json_object_get(sp, "traceId"), 16, s.trace_id, 0) < 0 ||
	    j_hex(json_object_get(sp, "spanId"), 8, s.span_id, 0) < 0 ||
	    j_hex(json_object_get(sp, "parentSpanId"), 8, s.parent_span_id, 1) < 0)
		return bad(d, "span %zu: traceId, spanId and parentSpanId as hex expected",
		    d->nspans + 1);
	if ((name != NULL && !json_is_string(name)) ||
	    ((x = json_object_get(sp, "kind")) != NULL && j_number(x, 1, &kind, &ignored) < 0) ||
	    ((x = json_object_get(sp, "startTimeUnixNano")) != NULL &&
	    j_number(x, 0, &start, &start_ns) < 0) ||
	    ((x = json_object_get(sp, "endTimeUnixNano")) != NULL &&
	    j_number(x, 0, &end, &end_ns) < 0) ||
	    (status != NULL && (!json_is_object(status) ||
	    ((x = json_object_get(status, "code")) != NULL && j_number(x, 1, &code, &ignored) < 0))))
		return bad(d, "span %zu: name, kind, times or status of the wrong type", d->nspans + 1);
	s.kind = kind < INT_MIN || kind > INT_MAX ? -1 : (int)kind;
	if (check_span(d, &s, start_ns, end_ns, code) < 0)
		return -1;
	if ((attributes = j_attributes(d, json_object_get(sp, "attributes"), 0)) == NULL ||
	    (events = j_events(d, json_object_get(sp, "events"))) == NULL) {
		json_decref(attributes);
		return bad(d, "span %zu: attributes or events not as OTLP/JSON has them", d->nspans + 1);
	}
	return keep(d, &s, name ? clean_text(json_string_value(name), json_string_length(name)) :
	    idem_estrdup(""), scope ? clean_text(scope, strlen(scope)) : NULL, attributes, events);
}

static long long
j_pid(json_t *resource)
{
	unsigned long long u;
	json_t *kv;
	long long n;
	size_t i;

	json_array_foreach(json_object_get(resource, "attributes"), i, kv)
		if (json_is_string(json_object_get(kv, "key")) &&
		    strcmp(json_string_value(json_object_get(kv, "key")), "process.pid") == 0 &&
		    j_number(json_object_get(json_object_get(kv, "value"), "intValue"), 1, &n, &u) == 0 &&
		    n > 0 && n <= INT_MAX)
			return n;
	return 0;
}

/* The spans of each scope of each resource: counted first (n), then
 * made, when want. */
static int
j_walk(struct decode *d, json_t *doc, size_t *n, int want)
{
	json_t *rs, *ss, *spans, *sp, *scope;
	size_t i, j, k;

	if (!json_is_object(doc) || (json_object_get(doc, "resourceSpans") != NULL &&
	    !json_is_array(json_object_get(doc, "resourceSpans"))))
		return bad(d, "not an ExportTraceServiceRequest in OTLP/JSON");
	json_array_foreach(json_object_get(doc, "resourceSpans"), i, rs) {
		if (!json_is_object(rs) || (json_object_get(rs, "scopeSpans") != NULL &&
		    !json_is_array(json_object_get(rs, "scopeSpans"))))
			return bad(d, "resourceSpans %zu: not an object with an array of scopeSpans", i + 1);
		json_array_foreach(json_object_get(rs, "scopeSpans"), j, ss) {
			spans = json_object_get(ss, "spans");
			scope = json_object_get(json_object_get(ss, "scope"), "name");
			if (!json_is_object(ss) || (spans != NULL && !json_is_array(spans)))
				return bad(d, "scopeSpans %zu: not an object with an array of spans", j + 1);
			*n += json_array_size(spans);
			json_array_foreach(spans, k, sp)
				if (want && j_span(d, sp, j_pid(json_object_get(rs, "resource")),
				    json_is_string(scope) && json_string_length(scope) > 0 ?
				    json_string_value(scope) : NULL) < 0)
					return -1;
		}
	}
	return 0;
}

static int
decode_json(struct decode *d, const char *body, size_t len)
{
	json_error_t error;
	json_t *doc = json_loadb(body, len, 0, &error);
	size_t n = 0;
	int rc;

	if (doc == NULL)
		return bad(d, "not JSON: %s", error.text);
	if ((rc = j_walk(d, doc, &n, 0)) == 0 && n > d->max_spans) {
		d->nspans = n;
		rc = OTLP_TOO_MANY;
	} else if (rc == 0) {
		n = 0;
		rc = j_walk(d, doc, &n, 1);
	}
	json_decref(doc);
	return rc;
}

static void
free_made(struct decode *d)
{
	size_t i;

	for (i = 0; i < d->nspans && d->spans; i++) {
		free(d->spans[i].name);
		free(d->spans[i].scope);
		free(d->spans[i].attributes);
		free(d->spans[i].events);
	}
	free(d->spans);
}

int
otlp_decode(enum otlp_encoding encoding, const void *body, size_t len, size_t max_spans,
	    long long skew_us, otlp_span_fn *fn, void *ctx, size_t *nspans, size_t *dropped,
	    char *why, size_t why_size)
{
	struct decode d = { .skew_us = skew_us, .why = why, .why_size = why_size,
	    .max_spans = max_spans };
	size_t i;
	int rc;

	why[0] = '\0';
	d.spans = idem_ereallocarray(NULL, max_spans + 1, sizeof(*d.spans));
	rc = encoding == OTLP_JSON ? decode_json(&d, body, len) : decode_protobuf(&d, body, len);
	*nspans = d.nspans;
	*dropped = d.dropped;
	if (rc == OTLP_TOO_MANY) {
		snprintf(why, why_size, "%zu spans, more than %zu", d.nspans, max_spans);
		d.nspans = 0;
	} else if (rc < 0) {
		rc = OTLP_BAD;
	}
	for (i = 0; rc == 0 && i < d.nspans; i++)
		if (fn(ctx, &d.spans[i].s) < 0)
			rc = OTLP_STOPPED;
	free_made(&d);
	return rc;
}

const void *
otlp_empty_response(enum otlp_encoding encoding, size_t *len)
{
	*len = encoding == OTLP_JSON ? 2 : 0;
	return encoding == OTLP_JSON ? "{}" : "";
}
