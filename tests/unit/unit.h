/* unit.h: the smallest test harness that prints what failed and where */
#ifndef IDEM_UNIT_H
#define IDEM_UNIT_H

#include <stdio.h>
#include <string.h>

static int unit_passed, unit_failed;

#define CHECK(cond, name) do {                                                 \
	if (cond) {                                                            \
		unit_passed++;                                                 \
	} else {                                                               \
		unit_failed++;                                                 \
		printf("not ok - %s (%s:%d: %s)\n", name, __FILE__, __LINE__, #cond); \
	}                                                                      \
} while (0)

#define CHECK_STR(got, want, name) do {                                        \
	const char *unit_got = (got), *unit_want = (want);                     \
	if (unit_got != NULL && unit_want != NULL && strcmp(unit_got, unit_want) == 0) { \
		unit_passed++;                                                 \
	} else {                                                               \
		unit_failed++;                                                 \
		printf("not ok - %s (%s:%d)\n  got:  %s\n  want: %s\n", name,   \
		    __FILE__, __LINE__, unit_got ? unit_got : "(null)",        \
		    unit_want ? unit_want : "(null)");                         \
	}                                                                      \
} while (0)

static int
unit_done(const char *suite)
{
	printf("%s: %d passed, %d failed\n", suite, unit_passed, unit_failed);
	return unit_failed != 0;
}

#endif
