/* external.h: the kill points at the external call (run.vendor): a call
 * of the business key of an external-call kill point is held at the
 * vendor double, the vendor having charged; the kill point of the
 * delivery the calling worker works on kills that worker, whose reply is
 * then never sent. And the keys the vendor forgets, for the forgot rows. */
#ifndef KILL_AT_EXTERNAL_H
#define KILL_AT_EXTERNAL_H

#include <stdio.h>

/* Starts the vendor double when the seed declares an external effect,
 * with the plan's faults, armed for the external-call kill points. */
void external_start(void);
/* Kills the workers of the calls held at a kill point, lets the others
 * go on. */
void external_watch(void);
/* The vendor forgets the idempotency keys of business_key at at_us (the
 * database's clock), its window of window_ms declared passed: a forgot
 * row each. */
void external_forget(const char *business_key, long long window_ms, long long at_us);
/* The forgot rows, in the order forgotten. -1 on a write error. */
int external_write_forgot(FILE *out);
void external_free(void);

#endif
