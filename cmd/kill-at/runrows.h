/* runrows.h: the rows kill-at(1) writes beside the evidence about its run
 * (idem-tsv(5)): the worker it executed, with hashes of its files, the
 * calls the vendor double took, and the kill points and races it missed */
#ifndef IDEM_RUNROWS_H
#define IDEM_RUNROWS_H

#include <stdio.h>

#include "vendor.h"

/* The worker row: the argument vector executed, the file it runs and the
 * first later argument that names a regular file, with their hashes. For
 * a command text run by the shell (command not NULL), the words of the
 * text, split at blanks, stand for the arguments. -1 on a write error. */
int idem_runrows_worker(FILE *out, char *const *argv, const char *command);

/* The call rows: every request the vendor double took, their times moved
 * by skew_us onto the database's clock. -1 on a write error. */
int idem_runrows_calls(FILE *out, struct idem_vendor_call *const *calls, size_t n,
		       long long skew_us);

/* A missed row: what ("kill" or "race"), its scenario, the job (or the
 * business key of a race), the attempt (0 for none) and the step. -1 on a
 * write error. */
int idem_runrows_missed(FILE *out, const char *what, const char *scenario, const char *id,
			long long attempt, const char *step);

#endif
