#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "map.h"
#include "step.h"
#include "unit.h"
#include "file.h"

/* Parses text as a plan: 0 and m filled, or -1. */
static int
parse(struct idem_map *m, const char *text)
{
	idem_map_free(m);
	return idem_step_plan_parse(m, text, strlen(text));
}

int
main(void)
{
	struct idem_step_server s;
	struct idem_error err;
	struct idem_map m;
	const char *names[] = { "after-commit", "before-write", "after-commit", "acked" };
	const char *jobs[] = { "a", "tab\there", "a", "a" };
	char *text, dir[sizeof(s.dir)];
	size_t len;

	idem_map_init(&m);
	CHECK(parse(&m, "") == 0 && m.n == 0, "an empty plan names no step");
	CHECK(parse(&m, "after-commit\ta\nacked\ta\n") == 0 && m.n == 2, "a plan of two lines");
	CHECK(idem_map_get(&m, "after-commit\ta") != IDEM_MAP_NONE, "names its first pair");
	CHECK(idem_map_get(&m, "before-write\ta") == IDEM_MAP_NONE, "and no other step of the job");
	CHECK(parse(&m, "after-commit\ta") == -1, "a last line without its newline is no plan");
	CHECK(parse(&m, "after-commit\n") == -1, "a line of one field is no plan");
	CHECK(parse(&m, "after-commit\ta\t1\n") == -1, "a line of three fields is no plan");
	CHECK(parse(&m, "\ta\n") == -1, "an empty name is no plan");
	CHECK(parse(&m, "x\t\n") == -1, "an empty job id is no plan");
	CHECK(idem_step_plan_parse(&m, "x\ta\0b\n", 6) == -1, "a NUL in a line is no plan");
	idem_map_free(&m);

	/* the writer's plan reads back as the pairs it was given, escaped,
	 * each once */
	memset(&s, 0, sizeof(s));
	CHECK(idem_step_listen(&s, &err) == 0, "listens");
	CHECK(idem_step_plan_write(&s, names, jobs, 4, &err) == 0, "writes the plan");
	text = idem_read_file(s.plan, &len, &err);
	CHECK(text != NULL && strcmp(text, "after-commit\ta\nbefore-write\ttab\\there\nacked\ta\n") == 0,
	    "escaped, in order, duplicates once");
	CHECK(idem_step_plan_parse(&m, text, len) == 0 && m.n == 3, "and parses as three pairs");
	free(text);
	idem_map_free(&m);
	CHECK(idem_step_plan_write(&s, names, jobs, 1, &err) == -1, "a plan already there is not overwritten");
	snprintf(dir, sizeof(dir), "%s", s.dir);
	idem_step_unlisten(&s);
	CHECK(access(dir, F_OK) != 0, "the socket, the plan and their directory are gone");
	return unit_done("step");
}
