/* options.c: kill-at's command line (options.h) */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "options.h"
#include "text.h"

static const char synopsis[] =
	"usage: kill-at [-d conninfo] [-n workers] [-k step:job:attempt] [-r step]\n"
	"               [-b jobs | all] [-D deadline] [--no-spans] [-- command [argument ...]]\n";

static const struct option longopts[] = {
	{ "dbname", required_argument, NULL, 'd' },
	{ "workers", required_argument, NULL, 'n' },
	{ "kill", required_argument, NULL, 'k' },
	{ "race", required_argument, NULL, 'r' },
	{ "baseline", required_argument, NULL, 'b' },
	{ "deadline", required_argument, NULL, 'D' },
	{ "no-spans", no_argument, NULL, 'S' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

void
options_parse(struct options *o, int argc, char *argv[])
{
	char *end;
	int c;

	*o = (struct options){ .baseline_jobs = IDEM_BASELINE_JOBS, .deadline_ms = -1 };
	while ((c = getopt_long(argc, argv, "+d:n:k:r:b:D:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': o->conninfo = optarg; break;
		case 'n':
			o->nworkers = (int)strtol(optarg, &end, 10);
			if (*end || o->nworkers < 1 || o->nworkers > MAX_WORKERS)
				idem_die(IDEM_EXIT_USAGE, "-n %s: expected 1 to %d workers", optarg, MAX_WORKERS);
			break;
		case 'k':
			o->kill_options = idem_ereallocarray(o->kill_options, o->nkill_options + 1,
			    sizeof(char *));
			o->kill_options[o->nkill_options++] = optarg;
			break;
		case 'r': o->race_step = optarg; break;
		case 'b':
			if (strcmp(optarg, "all") == 0)
				o->baseline_jobs = 0;
			else if ((o->baseline_jobs = strtoll(optarg, &end, 10)) < 1 || *end != '\0')
				idem_die(IDEM_EXIT_USAGE, "-b %s: expected a number of jobs, or all", optarg);
			break;
		case 'D':
			if ((o->deadline_ms = idem_parse_duration_ms(optarg)) <= 0)
				idem_die(IDEM_EXIT_USAGE, "-D %s: expected a duration such as 30s", optarg);
			break;
		case 'S': o->no_spans = 1; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("kill-at " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (optind < argc)
		o->command = argv + optind;
}

void
options_free(struct options *o)
{
	free(o->kill_options);
}
