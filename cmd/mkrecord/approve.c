/* approve.c: the owner's approval of a record, as mkrecord --approve
 * makes it */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "approve.h"
#include "git.h"
#include "sig.h"
#include "sign.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "yamljson.h"

/*
 * The owner's approval of a record: an SSHSIG in namespace idem-approval
 * over the record's exact bytes, written beside it as RECORD.approval.sig
 * (replacing the approval of an earlier version) and, with -c, committed
 * with a commit signed by the same key. A commit that fails puts back the
 * approval that was there, or none.
 */
int
idem_approve(const char *record, const char *key_path, int do_commit)
{
	char sig_path[PATH_MAX], sha[65], commit[41], *text, *sig, *earlier, *message = NULL;
	const char *files[1] = { sig_path }, *base = strrchr(record, '/');
	struct idem_error err, ignored;
	struct idem_key key;
	size_t len, earlier_len = 0;
	int n;

	if (key_path == NULL)
		idem_die(IDEM_EXIT_USAGE, "--approve: an approval is signed: give -k key");
	if (idem_key_load(&key, key_path, &err) < 0)
		idem_die_error(&err);
	if ((text = idem_read_file_max(record, idem_record_limits.bytes, &len, &err)) == NULL)
		idem_die_error(&err);
	n = snprintf(sig_path, sizeof(sig_path), "%s.approval.sig", record);
	if (n < 0 || (size_t)n >= sizeof(sig_path))
		idem_die(IDEM_EXIT_USAGE, "%s.approval.sig: path too long", record);
	sig = idem_sign(&key, key_path, "idem-approval", text, len);
	idem_sha256_hex(text, len, sha);
	earlier = idem_read_file_max(sig_path, IDEM_SIG_ARMOR_MAX, &earlier_len, &ignored);
	idem_sign_hold_interrupts();
	if (idem_write_file_atomic(sig_path, sig, strlen(sig), &err) < 0)
		idem_die_error(&err);
	if (do_commit) {
		base = base ? base + 1 : record;
		if (asprintf(&message, "approval: %s approved\n\nApproval of %s (SHA-256 %s), "
		    "signed.\n", base, record, sha) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if (idem_git_commit(files, 1, message, &key, commit, &err) < 0) {
			if (earlier != NULL)
				idem_write_file_atomic(sig_path, earlier, earlier_len, &ignored);
			else
				unlink(sig_path);
			idem_die_error(&err);
		}
	}
	idem_key_wipe(&key);
	idem_git_close();
	printf("%s\n", sig_path);
	free(message);
	free(earlier);
	free(sig);
	free(text);
	idem_close_stdout();
	return 0;
}
