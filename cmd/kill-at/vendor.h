/* vendor.h: the vendor double (kill-at(1), THE VENDOR DOUBLE): an HTTP
 * server on the loopback interface that plays the external system a worker
 * calls, records every request, counts which took effect, honours
 * idempotency keys or not, makes the faults a scenario asks for, holds
 * its reply at the kill point external-call, and forgets a business key's
 * idempotency keys when told. GNU libmicrohttpd does the HTTP; a thread
 * per connection lets a reply wait. */
#ifndef IDEM_VENDOR_H
#define IDEM_VENDOR_H

#include <sys/types.h>

#include "error.h"

struct idem_vendor;

/* error, timeout: the first POST of a business key, no effect; lost,
 * late: the first of its POSTs that takes effect */
enum idem_vendor_fault {
	IDEM_VENDOR_ERROR = 1, IDEM_VENDOR_TIMEOUT, IDEM_VENDOR_LOST, IDEM_VENDOR_LATE
};

/* One request, as the double took it. */
struct idem_vendor_call {
	long id;			/* from 1, in the order they came */
	long long at_us;		/* when it came, on our clock */
	char *method, *path, *idempotency_key;	/* the key NULL when not sent */
	char body_sha256[65];
	char *business_key;		/* NULL: the body did not hold the key's fields */
	int status;			/* the HTTP status answered, 0 for none */
	long long answered_us;		/* when the answer went, 0 for none */
	const char *answer;		/* ok replayed error timeout killed lost late, or ""
					 * while it has none */
	int effect;			/* it took effect: the vendor charged */
	char *response_id;		/* NULL when none was made */
	int worker;			/* the group's index among the workers, or -1 */
	pid_t pid;			/* the process holding the connection, or 0 */
};

/* A request held at the kill point, waiting for idem_vendor_release. */
struct idem_vendor_held {
	long id;
	int worker;
	pid_t pid;
	char *business_key;
};

/* An idempotency key the double forgot, and the call that first sent it. */
struct idem_vendor_forgot {
	char *idempotency_key;
	long first_call;
};

/* The business key of a request's body, as idem-seed(5) writes business
 * keys, from the top-level fields of a JSON object; NULL when the body is
 * not one or lacks a field. Caller frees. */
char *idem_vendor_body_key(const char *body, size_t len, char *const *fields, size_t nfields);

/* Starts the double on 127.0.0.1, on a port of the kernel's choosing.
 * key_fields is the seed's JSON array of the body fields that make the
 * business key. NULL with err set on failure. */
struct idem_vendor *idem_vendor_start(const char *name, const char *key_fields, int honours,
				      struct idem_error *err);
/* Its base URL, "http://127.0.0.1:PORT". */
const char *idem_vendor_url(const struct idem_vendor *v);
/* Readable whenever a request was taken or is held; idem_vendor_drain
 * empties it. */
int idem_vendor_fd(const struct idem_vendor *v);
void idem_vendor_drain(struct idem_vendor *v);
/* The process groups of the workers, by worker index (0: none there), so
 * that each call is put down to the process that made it. */
void idem_vendor_workers(struct idem_vendor *v, const pid_t *groups, int n);

/* The first POST of business_key, or for lost and late the first that
 * takes effect, is answered with the fault: a late one delay_ms after
 * it came. */
void idem_vendor_fault(struct idem_vendor *v, const char *business_key,
		       enum idem_vendor_fault fault, long long delay_ms);
/* A POST of business_key that takes effect is held, its reply not sent,
 * until released; arm again for each kill point. */
void idem_vendor_arm(struct idem_vendor *v, const char *business_key);
/* The requests held now, into out (at most max); caller frees each
 * business_key. */
size_t idem_vendor_held(struct idem_vendor *v, struct idem_vendor_held *out, size_t max);
/* Lets a held request go: answered as any other, or, killed, never
 * answered (its worker is dead). */
void idem_vendor_release(struct idem_vendor *v, long id, int killed);

/* Forgets the idempotency keys whose stored reply is business_key's, as
 * a vendor does once its window has passed: their next POST takes effect
 * again. The keys forgotten, in the order first sent, into *out (caller
 * frees each key, and the array); their number. */
size_t idem_vendor_forget(struct idem_vendor *v, const char *business_key,
			  struct idem_vendor_forgot **out);

/* Stops the double once every late answer due has gone (each waits no
 * longer than its delay): held requests and unanswered faults are
 * dropped, and every call, in order, is in *calls until
 * idem_vendor_free, which stops it without waiting. */
void idem_vendor_stop(struct idem_vendor *v, struct idem_vendor_call *const **calls, size_t *n);
/* Waits up to max_us for the late answers due to go: 1 while one is still
 * due (within a grace after the last one's time), else 0. */
int idem_vendor_late_wait(struct idem_vendor *v, long long max_us);
void idem_vendor_free(struct idem_vendor *v);

#endif
