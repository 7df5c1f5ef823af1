/* audit.h: every signed commit and record in a records directory's
 * history, as an auditor reads them (verify-record(1) --history) */
#ifndef IDEM_AUDIT_H
#define IDEM_AUDIT_H

#include "check.h"
#include "trust.h"

/* How the audit's entries are written: a table, idem-tsv audit rows, or
 * GitHub annotations. */
enum { IDEM_AUDIT_TABLE, IDEM_AUDIT_TSV, IDEM_AUDIT_GITHUB };

struct idem_audit_options {
	const char *dir;		/* the records directory */
	const char *since;		/* -s: the revision, or NULL for the whole history */
	const char *conninfo;		/* -d: the database of the queues, or NULL */
	const char *summary_path;	/* -m: the summary's file, or NULL */
	int format;			/* IDEM_AUDIT_TABLE, _TSV or _GITHUB */
	int commits_only;		/* -c */
	int require_approval;		/* -a */
	const struct trust *trust;	/* the trust root from since, or NULL for k's signers */
};

/* Audits the history with the signers and seeds of k, writing an entry
 * for each commit and record; 0 when every one is ok, IDEM_EXIT_FINDING
 * otherwise. Exits when the history or the database cannot be read. */
int idem_audit(const struct idem_audit_options *o, struct checker *k);

#endif
