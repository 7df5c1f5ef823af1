/* approval.c: the owner's approval of a record, as verify-record reads it */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "approval.h"
#include "git.h"
#include "error.h"
#include "file.h"
#include "yamljson.h"

static void
approval_text(struct idem_approval *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
approval_text(struct idem_approval *a, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&a->text, fmt, ap) < 0)
		idem_die(IDEM_EXIT_ENV, "vasprintf:");
	va_end(ap);
}

void
idem_approval_free(struct idem_approval *a)
{
	free(a->principal);
	free(a->text);
}

void
idem_approval_check(const char *record, const struct idem_signers *signers,
		    const char *signers_path, struct idem_approval *a)
{
	char sig_path[PATH_MAX + 16], *armor = NULL, *text = NULL, why[1200] = "", day[16];
	struct idem_error err;
	struct idem_sig sig;
	size_t armor_len, len;
	struct tm tm;
	time_t when;
	int committed = 0;

	a->principal = NULL;
	snprintf(sig_path, sizeof(sig_path), "%s.approval.sig", record);
	if (access(sig_path, F_OK) != 0 && errno == ENOENT) {
		approval_text(a, "awaiting approval");
		return;
	}
	if ((armor = idem_read_file_max(sig_path, IDEM_SIG_ARMOR_MAX, &armor_len, &err)) == NULL ||
	    (text = idem_read_file_max(record, idem_record_limits.bytes, &len, &err)) == NULL ||
	    idem_sig_parse(&sig, armor, armor_len, "idem-approval", &err) < 0) {
		snprintf(why, sizeof(why), "%s", err.text);
	} else if ((a->principal = idem_signers_find(signers, sig.public_key, "idem-approval",
	    time(NULL), &err)) == NULL) {
		snprintf(why, sizeof(why), "%s (%s)", err.text, signers_path);
	} else if (idem_sig_check(&sig, "idem-approval", text, len, &err) < 0) {
		/* it signs other bytes: an earlier version of the record */
		snprintf(why, sizeof(why), "it does not verify against the record as it is: it "
		    "approves another version");
		free(a->principal);
		a->principal = NULL;
	}
	free(armor);
	free(text);
	if (a->principal == NULL) {
		approval_text(a, "awaiting approval (%s: %s)", sig_path, why);
		return;
	}
	if (idem_git_last_change(sig_path, &when, &committed, &err) < 0 || !committed ||
	    gmtime_r(&when, &tm) == NULL) {
		approval_text(a, "approved by %s, approval not committed", a->principal);
		return;
	}
	strftime(day, sizeof(day), "%Y-%m-%d", &tm);
	approval_text(a, "approved by %s on %s", a->principal, day);
}
