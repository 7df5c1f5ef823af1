/* observed.h: what a record says the seed declared beside what the run
 * observed, of the database and of the worker (idem-record(5), format 6),
 * and every difference between them that the sandbox cannot reproduce */
#ifndef IDEM_OBSERVED_H
#define IDEM_OBSERVED_H

#include <jansson.h>

#include "run.h"

/* The record's database: { declared, observed }, observed null when the
 * stream has no database row. Caller decrefs. */
json_t *idem_observed_database(const struct idem_run *run);

/* Whether the worker kill-at ran is the command the seed declares, word
 * for word: a borrowed true or false, or NULL when there is no worker row
 * or the seed declares no command. */
json_t *idem_observed_as_declared(const struct idem_run *run);

/* The seed's cannot_reproduce list, then a line for each difference
 * between what the seed declares and what ran: the database, the worker
 * image (never observed: kill-at reads no image digest) and its command.
 * Caller decrefs. */
json_t *idem_observed_differences(const struct idem_run *run);

#endif
