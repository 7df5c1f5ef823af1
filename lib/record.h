/* record.h: what mkrecord(1), verify-record(1) and rehearse(1) share of a
 * record apart from its YAML: the evidence file beside a volume record,
 * the interval of a rate, and the causes of waiting it keeps */
#ifndef IDEM_RECORD_H
#define IDEM_RECORD_H

#include <stdio.h>

#include <jansson.h>

#include "error.h"

/* The format of the records mkrecord(1) writes, and the newest that
 * verify-record(1) reads (idem-record(5)). */
#define IDEM_RECORD_FORMAT 10

/* The 95% Wilson score interval of k events in n trials, as proportions
 * in [0, 1]; -1 when there is none (n < 1, k < 0 or k > n). */
int idem_record_wilson(long long k, long long n, double *low, double *high);

/* The evidence file beside a volume record (idem-record(5)): an idem-tsv
 * stream compressed with gzip, read and written as a stdio stream. Write
 * mode makes path (mode 0644); a write error shows at fclose. */
FILE *idem_record_file_open(const char *path, const char *mode, struct idem_error *err);

/* The causes of waiting a record keeps apart from the engineer's figures
 * (mkrecord -w), NULL-terminated. */
extern const char *const idem_wait_causes[];

/* The first stall whose bounded wait ran out, else the first held lease
 * that reached its bound, of a record (its JSON), as one line; NULL when
 * there is none. Caller frees. */
char *idem_record_bound(const json_t *record);

/* Whether a pending check's result (idem-tsv(5), pending_call) passes:
 * only "owned" does. */
int idem_record_pending_ok(const char *result);
/* Whether count-effects could not make the pending check (a column the
 * stream names is not in the table): the unit of its pending_calls_owned
 * measure, which then has no numerator, else NULL. */
const char *idem_record_pending_unchecked(const json_t *measures);

/* The first business key of a record (its JSON) whose calls changed their
 * Idempotency-Key against a vendor that honours it, else the first
 * pending check that failed, else a pending check not made, as one line;
 * NULL when there is none.
 * Caller frees. */
char *idem_record_key_finding(const json_t *record);

/* Why a record (its JSON) fails, in the order a reviewer needs it: a kill
 * point, race or stall never reached, a stall or lease that reached its
 * bound, the deadline with jobs unacked, a failed
 * baseline, a worker other than the declared one, a finding on the
 * sandbox account, a key changed or a pending check failed, and only
 * then the counts. NULL when the verdict is not
 * fail or none of these says why; else one line. Caller frees. */
char *idem_record_why(const json_t *record);

#endif
