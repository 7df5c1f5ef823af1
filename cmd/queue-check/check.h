/* check.h: the checks of queue-check(1), section by section, on a sandbox
 * where the queue library is installed. */
#ifndef QUEUE_CHECK_CHECK_H
#define QUEUE_CHECK_CHECK_H

#include <stdio.h>

#include <libpq-fe.h>

#include "error.h"
#include "queue.h"

/* The sandbox account queue-check makes. */
#define CHECK_ROLE "idem_queue_check"

/* Runs every check of q (its queue) on conn, a superuser's connection to
 * the sandbox; other is the same adapter for another queue, which the
 * sandbox account must not reach. Writes one line a section to out.
 * Returns the number of sections that failed, or -1 with err set when the
 * environment failed (the library not installed, the sandbox lost). */
int check_adapter(const struct idem_queue *q, const struct idem_queue *other, PGconn *conn,
		  FILE *out, struct idem_error *err);

#endif
