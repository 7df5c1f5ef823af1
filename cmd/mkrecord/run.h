/* run.h: a rehearsal run as mkrecord reads it from its stream, in two
 * passes: what the record holds whatever the run's size, then the
 * attempts and count rows it lists, read again from the evidence kept on
 * the way (in memory, or for a volume record in a file beside the
 * records) */
#ifndef IDEM_RUN_H
#define IDEM_RUN_H

#include <stdio.h>

#include <jansson.h>

/* A record lists every attempt and count row of a run of at most
 * ALL_JOBS jobs; past that it is a volume record (idem-record(5)). */
#define ALL_JOBS 1000
#define SAMPLE_JOBS 100

struct idem_run {
	json_t *seed, *expect, *scenarios, *published_at, *kills, *attempts, *recovers, *findings;
	json_t *counts_before, *counts_after, *guards, *probe, *measures, *queries, *digests;
	json_t *queue;		/* the queue row's kind, name and version, or NULL */
	json_t *external;	/* the external row, or NULL */
	json_t *calls;		/* the call rows, in order */
	json_t *forgot;		/* the forgot rows: keys the vendor double forgot */
	json_t *rekeyed;	/* the rekeyed rows: business keys whose calls changed keys */
	json_t *pending_calls;	/* the pending_call rows: the pending check, key by key */
	json_t *missed;		/* the kill points, races and stalls the run did not reach */
	json_t *stalls;		/* the stall rows, in order */
	json_t *leases;		/* the lease rows: the leases kill-at ended before an ack */
	json_t *expected_verdict;	/* the expect row's verdict, or NULL */
	json_t *worker;		/* the worker row, or NULL */
	json_t *declared_guard;	/* the declared_guard row and its probe, or NULL */
	json_t *logs_of;	/* "job<TAB>attempt": its branch lines, [msg_id, line] */
	json_t *baseline;	/* the baseline row, or NULL */
	json_t *account;	/* the grant and denied rows, or NULL */
	json_t *database;	/* the database row, or NULL */
	json_t *spans;		/* the span and span_lost rows of the jobs listed (trace.h) */
	long long jobs, copies;
	/* the attempts of the stream: all of them, acked, not acked, and
	 * deliveries after the first */
	long long all_attempts, acked, not_acked, retried;
	/* the evidence file of a volume record */
	char evidence_sha256[65];
	long long evidence_rows;
};

/* Reads the stream in (named name in messages) whole, keeping the
 * evidence of a volume record in a file in dir; exits on error. The run
 * is this module's, read once. */
const struct idem_run *idem_run_read(FILE *in, const char *name, const char *dir);

/* Whether the run makes a volume record. */
int idem_run_volume(const struct idem_run *run);

/* A field of the seed row, or NULL. */
const char *idem_run_seed(const struct idem_run *run, const char *name);

/* Links a volume record's evidence file as dir/evidence/SHA256.tsv.gz
 * and returns that path; "" for a run without one. A name it made goes
 * at exit, unless idem_run_keep_evidence says the record is complete. */
const char *idem_run_publish_evidence(const char *dir);
void idem_run_keep_evidence(void);

/* A field of the stream as the record holds it: text, or null for \N;
 * an integer where it is one, else text. */
json_t *idem_run_text(const char *v);
json_t *idem_run_number(const char *v);

/* The words of a command: the shell's command text split at blanks. */
json_t *idem_run_words(const char *command);

#endif
