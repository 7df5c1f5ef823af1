/* external.h: the kill points at the external call (run.vendor): a call
 * of the business key of an external-call kill point is held at the
 * vendor double, the vendor having charged; the kill point of the
 * delivery the calling worker works on kills that worker, whose reply is
 * then never sent */
#ifndef KILL_AT_EXTERNAL_H
#define KILL_AT_EXTERNAL_H

/* Starts the vendor double when the seed declares an external effect,
 * with the plan's faults, armed for the external-call kill points. */
void external_start(void);
/* Kills the workers of the calls held at a kill point, lets the others
 * go on. */
void external_watch(void);

#endif
