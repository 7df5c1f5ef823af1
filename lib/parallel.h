/* parallel.h: independent jobs run at once, one thread each */
#ifndef IDEM_PARALLEL_H
#define IDEM_PARALLEL_H

#include <stddef.h>

#define IDEM_PARALLEL_MAX 8

/* Runs fn on each of the n jobs (an array of elements of size bytes, at
 * most IDEM_PARALLEL_MAX): the first on the calling thread, each other on
 * a thread of its own, or on the calling thread when a thread cannot
 * start. Returns when every job has run. */
void idem_parallel(void *(*fn)(void *), void *jobs, size_t size, size_t n);

#endif
