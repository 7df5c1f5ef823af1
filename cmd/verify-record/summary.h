/* summary.h: the Markdown summary of verify-record(1) --history -m: the
 * overall result, the commits that fail, then each record a change adds or
 * touches, as a reviewer reads it in a pull request */
#ifndef IDEM_SUMMARY_H
#define IDEM_SUMMARY_H

#include <stddef.h>

#include <jansson.h>

#include "sig.h"
#include "error.h"

/* One entry of the audit: kind "commit" or "record", the commit id or the
 * record's path, its status (ok, FAIL, warn or stale) and the detail. */
struct idem_summary_entry {
	char *kind, *id, *status, *detail;
};

struct idem_summary {
	const char *dir;		/* the records directory */
	const char *since;		/* the revision of -s, or NULL: every record */
	const struct idem_signers *signers;	/* for the approvals */
	const char *signers_path;
	struct idem_summary_entry *entries;	/* the audit's, in order */
	size_t nentries;
};

/* A record the audit read: refused when it failed its checks (its
 * entries say why); principal and record are set otherwise. */
struct idem_summary_record {
	const char *path;
	const char *principal;
	const json_t *record;
	int refused;
};

void idem_summary_keep(struct idem_summary *s, const char *kind, const char *id,
		       const char *status, const char *detail);
void idem_summary_free(struct idem_summary *s);

/* Writes the summary to path, whole, through a temporary file; bad says
 * whether the check fails. */
int idem_summary_write(const struct idem_summary *s, const char *path,
		       const struct idem_summary_record *records, size_t nrecords, int bad,
		       struct idem_error *err);

#endif
