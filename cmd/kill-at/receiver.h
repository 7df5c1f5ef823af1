/* receiver.h: the span receiver (kill-at(1), THE SPAN RECEIVER): an
 * OTLP/HTTP server on the loopback interface that takes the workers'
 * spans on POST /v1/traces, in OTLP/JSON or protobuf, puts each down to
 * the process that sent it, and writes it at once as a span row (job and
 * attempt \N) to a temporary file, so that no span waits in memory.
 * GNU libmicrohttpd does the HTTP, a thread per connection. */
#ifndef KILL_AT_RECEIVER_H
#define KILL_AT_RECEIVER_H

#include <stdio.h>
#include <sys/types.h>

#include "error.h"

#define RECEIVER_MAX_BODY (4 * 1024 * 1024)	/* bytes of a body, gzip or not */
#define RECEIVER_MAX_REQUEST_SPANS 2048		/* spans of a request */
#define RECEIVER_MAX_RUN_SPANS 2000000LL	/* spans of a run */

struct receiver;

/* What the receiver took, once stopped. */
struct receiver_counts {
	long long requests, spans, dropped_attributes;
	char *refused;			/* a JSON object: reason -> requests */
	int write_failed;		/* the temporary file could not be written */
};

/* Starts the receiver on 127.0.0.1, on a port of the kernel's choosing;
 * span times are moved by skew_us onto the database's clock. NULL with
 * err set on failure. */
struct receiver *receiver_start(long long skew_us, struct idem_error *err);
/* "http://127.0.0.1:PORT/v1/traces" */
const char *receiver_endpoint(const struct receiver *r);
/* The process groups of the workers, by worker index (0: none there). */
void receiver_workers(struct receiver *r, const pid_t *groups, int n);
/* When a span of process pid last came, on our clock; 0 for never. */
long long receiver_heard_us(struct receiver *r, pid_t pid);
/* Whether any process of the run has sent a span yet. */
int receiver_heard_any(struct receiver *r);
/* Stops the receiver: the span rows, from their start, and the counts
 * (the caller frees counts->refused). */
FILE *receiver_stop(struct receiver *r, struct receiver_counts *counts);
void receiver_free(struct receiver *r);

#endif
