/* options.h: kill-at's command line (kill-at(1), OPTIONS) */
#ifndef KILL_AT_OPTIONS_H
#define KILL_AT_OPTIONS_H

#include <stddef.h>

struct options {
	const char *conninfo;		/* -d, or NULL */
	int nworkers;			/* -n, or 0: as the plan needs */
	char **kill_options;		/* each -k step:job:attempt; the array is ours */
	size_t nkill_options;
	const char *race_step;		/* -r, or NULL */
	long long baseline_jobs;	/* -b: 0 for all */
	long long deadline_ms;		/* -D, or -1: from the seed's retry policy */
	char **command;			/* after --, or NULL: the seed's */
	int no_spans;			/* --no-spans: no span receiver */
};

/* Reads the options of argv; exits on a usage error, --help and
 * --version. */
void options_parse(struct options *o, int argc, char *argv[]);
void options_free(struct options *o);

#endif
