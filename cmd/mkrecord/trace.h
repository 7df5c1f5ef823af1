/* trace.h: the trace beside a record (idem-record(5), THE TRACE): one
 * OTLP JSON ExportTraceServiceRequest with a span per job the record
 * lists, a child span per attempt, and the worker's own spans under them,
 * read from the span and span_lost rows of the stream (idem-tsv(5)) */
#ifndef IDEM_TRACE_H
#define IDEM_TRACE_H

#include <stddef.h>

#include <jansson.h>

#include "error.h"

/* The file's name after the record's, in place of ".yaml". */
#define IDEM_TRACE_SUFFIX ".trace.json"
/* The environment variable naming where mkrecord also sends the trace. */
#define IDEM_TRACE_ENDPOINT "IDEM_OTLP_ENDPOINT"

/* The spans of the stream, under "JOB<TAB>ATTEMPT": {"spans": [...],
 * "lost": [...]}, each span row as an object of its fields by name, each
 * span_lost row's parents joined to lost. */
json_t *idem_trace_spans_new(void);

/* Reads line (a row of the stream as read, without its newline) into
 * spans when it is a span or a span_lost row of a job that listed (may be
 * NULL) says the record lists. 0 for a row of another kind or of a job
 * not listed, 1 for a row read, -1 with err for a row of either kind that
 * does not have its fields (idem-tsv(5)). */
int idem_trace_read_row(json_t *spans, const char *line, int (*listed)(const char *job),
			struct idem_error *err);

/* Sets in each span and lost entry of spans the msg_id of its delivery,
 * found among the run's attempts (attempt rows as objects, with job,
 * msg_id, attempt, pid and consumed_at) by its process: of that process's
 * attempts of the same job and number, the last consumed at or before the
 * span's start (or the kill), else the first. Two copies of a message, a
 * duplicate publish or a race, share job and number; only the process
 * tells them apart. Without a delivery, an entry is placed by time. */
void idem_trace_deliveries(json_t *spans, const json_t *attempts);

/* Adds to each attempt of the record's evidence the names of its
 * worker's spans, by start, and the span ids lost when it was killed. */
void idem_trace_annotate(json_t *record, const json_t *spans);

/* The trace of a record (its JSON, as idem_build_record makes it) and
 * the spans of its stream, as an ExportTraceServiceRequest. */
json_t *idem_trace_build(const json_t *record, const json_t *spans);

/* The ids of idem's own spans, from the seed's revision, the job id, and
 * for an attempt its message id (in decimal, or its text) and number:
 * the trace id of a job, 32 hex digits, bytes 0 to 15 of the SHA-256 of
 * REVISION NUL JOB; its job span's id, bytes 16 to 23 of the same; an
 * attempt's span id, bytes 0 to 7 of the SHA-256 of REVISION NUL JOB NUL
 * MSG_ID NUL ATTEMPT (two copies of a message, one attempt number each). */
void idem_trace_id(const char *revision, const char *job, char out[33]);
void idem_trace_job_span_id(const char *revision, const char *job, char out[17]);
void idem_trace_span_id(const char *revision, const char *job, const char *msg_id,
			long long attempt, char out[17]);

/* POSTs the trace text to url as OTLP/HTTP JSON; -1 with err when it was
 * not sent or not accepted (a 2xx answer). */
int idem_trace_post(const char *url, const char *text, struct idem_error *err);

#endif
