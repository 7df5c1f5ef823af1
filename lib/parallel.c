#include <pthread.h>

#include "parallel.h"

void
idem_parallel(void *(*fn)(void *), void *jobs, size_t size, size_t n)
{
	pthread_t threads[IDEM_PARALLEL_MAX];
	int started[IDEM_PARALLEL_MAX] = { 0 };
	char *job = jobs;
	size_t i;

	for (i = 1; i < n; i++)
		started[i] = pthread_create(&threads[i], NULL, fn, job + i * size) == 0;
	if (n > 0)
		fn(job);
	for (i = 1; i < n; i++) {
		if (started[i])
			pthread_join(threads[i], NULL);
		else
			fn(job + i * size);
	}
}
