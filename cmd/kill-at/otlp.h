/* otlp.h: OTLP trace export requests (ExportTraceServiceRequest) decoded
 * from OTLP/JSON or protobuf into spans with the limits of kill-at(1),
 * THE SPAN RECEIVER: what the receiver writes as span rows */
#ifndef KILL_AT_OTLP_H
#define KILL_AT_OTLP_H

#include <stddef.h>

#define OTLP_MAX_ATTRIBUTES 64		/* a span's, an event's: the rest dropped */
#define OTLP_MAX_EVENTS 32		/* a span's: the rest dropped */
#define OTLP_MAX_TEXT 1024		/* bytes of a name, key or string value */
#define OTLP_MAX_ELEMENTS 64		/* of an array or key-value list value */
#define OTLP_MAX_NESTING 4		/* arrays and lists within a value */

enum otlp_encoding { OTLP_JSON, OTLP_PROTOBUF };

/* One span, its texts valid UTF-8, cut to the limits. */
struct otlp_span {
	char trace_id[33], span_id[17];	/* lowercase hex */
	char parent_span_id[17];	/* "" when it has none */
	const char *name;
	int kind;			/* OTLP SpanKind, 0 to 5 */
	long long start_us, end_us;	/* since the epoch, moved by skew_us */
	const char *status;		/* unset ok error */
	long long pid;			/* the resource's process.pid, or 0 */
	const char *scope;		/* the instrumentation scope's name, or NULL */
	const char *attributes;		/* a JSON object */
	const char *events;		/* a JSON array of {name, time, attributes} */
};

/* A span decoded: 0 to go on, -1 to stop (the decoder returns -1 too). */
typedef int otlp_span_fn(void *ctx, const struct otlp_span *span);

enum { OTLP_OK = 0, OTLP_BAD = -1, OTLP_TOO_MANY = -2, OTLP_STOPPED = -3 };

/*
 * Decodes a request body and hands each of its spans, in order, to fn:
 * OTLP_OK; OTLP_BAD with why set when the body does not decode or a span
 * is not one (ids of the wrong length, a kind or status out of range),
 * before any span is handed on; OTLP_TOO_MANY, the same, for more than
 * max_spans spans; OTLP_STOPPED when fn stopped. *nspans: the spans of
 * the request; *dropped: the attributes dropped by the limits (an event
 * dropped counts its attributes).
 */
int otlp_decode(enum otlp_encoding encoding, const void *body, size_t len, size_t max_spans,
		long long skew_us, otlp_span_fn *fn, void *ctx, size_t *nspans, size_t *dropped,
		char *why, size_t why_size);

/* The empty ExportTraceServiceResponse in an encoding, its length in *len. */
const void *otlp_empty_response(enum otlp_encoding encoding, size_t *len);

#endif
