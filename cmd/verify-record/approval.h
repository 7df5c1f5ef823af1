/* approval.h: the owner's approval of a record (verify-record(1) -a):
 * RECORD.approval.sig, an SSHSIG in namespace idem-approval over the
 * record's exact bytes by a key that allowed_signers permits in that
 * namespace */
#ifndef IDEM_APPROVAL_H
#define IDEM_APPROVAL_H

#include "sig.h"

/* text says "approved by PRINCIPALS on DATE" (the date of the commit that
 * last changed the approval), or "awaiting approval", with the reason when
 * an approval is there but does not count. */
struct idem_approval {
	char *principal;	/* NULL while the record awaits approval */
	char *text;
};

/* The approval of the record at path, against signers read from
 * signers_path (named in the reason). */
void idem_approval_check(const char *record, const struct idem_signers *signers,
			 const char *signers_path, struct idem_approval *a);
void idem_approval_free(struct idem_approval *a);

#endif
