/* check.h: a record checked as a reviewer would (verify-record(1)): its
 * signature against allowed_signers, its seed's hash at the recorded
 * revision, and its own arithmetic */
#ifndef IDEM_CHECK_H
#define IDEM_CHECK_H

#include <stddef.h>

#include <jansson.h>

#include "sig.h"

/* A record checked: the reasons it does not verify, one line each, or
 * none, its signer's principal and its content. */
struct check {
	const char *path;
	char *principal;
	unsigned char signer[IDEM_SIG_PUBLIC_BYTES];	/* its key, once it verified */
	char **reasons;
	size_t nreasons;
	json_t *record;
};

/* What checking records needs beyond each record: the allowed signers,
 * and the seeds hashed so far, each hashed once. */
struct checker {
	struct idem_signers *signers;
	const char *signers_path;	/* named in the reasons */
	struct seed_hash *seeds;
	size_t nseeds;
};

/* Reads the allowed signers at signers_path, warning of each line
 * ssh-keygen would skip; exits when they cannot be read. */
void idem_checker_init(struct checker *k, const char *signers_path);
void idem_checker_free(struct checker *k);

/* Checks the record at c->path: the reasons it does not verify are
 * added to c; the bytes of a record nobody trusted signed are not read. */
void idem_check_record(struct checker *k, struct check *c);
void idem_check_free(struct check *c);

#endif
