/* trust.h: the trust root of an audit given a base (verify-record(1)
 * --since): the allowed signers as the base holds them, changed only by
 * commits that a key those signers trust to approve has signed */
#ifndef IDEM_TRUST_H
#define IDEM_TRUST_H

#include <stddef.h>

#include "git.h"
#include "sig.h"

/* One commit of the audited range that changed the file: accepted, or
 * why not, with the line of the file it points at (0 for none). */
struct trust_change {
	char id[41];
	int accepted;
	long line;
	char *detail;
};

/* The trust of an audit: epochs[0] is the base's file, then one epoch per
 * accepted change, in the order of the history (idem_git_history takes
 * them as they are). */
struct trust {
	char path[1024];		/* the file, relative to the work tree */
	char label[1200];		/* "PATH at SINCE", named in the reasons */
	int at_base;			/* whether the base holds the file */
	struct idem_git_trust *epochs;
	struct idem_signers **signers;	/* each epoch's, owned */
	size_t nepochs;
	struct trust_change *changes;
	size_t nchanges;
};

/* The trust root of file (allowed_signers, a path in the work tree) from
 * since on: -1 with err when the history cannot be read. */
int idem_trust_from_base(const char *file, const char *since, struct trust *t,
			 struct idem_error *err);

/* The signers the end of the history trusts: the last epoch's. */
struct idem_signers *idem_trust_now(const struct trust *t);

void idem_trust_free(struct trust *t);

#endif
