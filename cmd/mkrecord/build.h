/* build.h: the record of a rehearsal run (idem-record(5)), as mkrecord
 * builds it from the run's stream, the seed's revision and its options */
#ifndef IDEM_BUILD_H
#define IDEM_BUILD_H

#include <jansson.h>

#include "git.h"
#include "run.h"

/* The record, with the conveniences of the handoff that the stored
 * record leaves out: counts_differ, duplicate_keys, duplicate_calls and
 * counts.total_rows. waiting is the -w causes (taken). Caller decrefs. */
json_t *idem_build_record(const struct idem_run *run, const struct idem_git_revision *rev,
			  const struct idem_git_revision *adapter,
			  const char *reproduce, const char *next_review, json_t *waiting);

#endif
