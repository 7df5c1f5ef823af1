/* Fuzzes both readers of idem-step(7): kill-at's of the step lines a
 * worker sends, fed the input in pieces as a socket would, and the
 * worker's of the plan. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "map.h"
#include "step.h"

static void
step_lines(const uint8_t *data, size_t size)
{
	struct idem_step_peer p;
	struct idem_step_line l;
	size_t at = 0, piece;
	int rc;

	memset(&p, 0, sizeof(p));
	if ((p.fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		fuzz_fail("cannot open /dev/null");
	while (at < size && p.fd >= 0) {
		/* what one read would have put in the buffer */
		piece = size - at;
		if (piece > sizeof(p.buf) - p.len - 1)
			piece = sizeof(p.buf) - p.len - 1;
		memcpy(p.buf + p.len, data + at, piece);
		p.len += piece;
		at += piece;
		while ((rc = idem_step_next(&p, &l)) > 0) {
			if (l.problem == NULL && (l.name == NULL || l.job_id == NULL))
				fuzz_fail("a step line without its name or job id");
			if (l.problem != NULL && (l.name != NULL || l.job_id != NULL))
				fuzz_fail("a line with a problem matched as a step");
		}
		if (rc < 0 && p.fd >= 0)
			fuzz_fail("a line too long, and the peer not hung up on");
		if (rc == 0 && p.len >= sizeof(p.buf) - 1)
			fuzz_fail("a full buffer without a line, and no hang-up");
	}
	if (p.fd >= 0)
		close(p.fd);
}

static void
plan(const uint8_t *data, size_t size)
{
	struct idem_map m;
	size_t i;
	const char *tab;

	idem_map_init(&m);
	if (idem_step_plan_parse(&m, (const char *)data, size) == 0) {
		for (i = 0; i < m.n; i++) {
			const char *key = m.entries[i].key;

			tab = strchr(key, '\t');
			if (tab == NULL || tab == key || tab[1] == '\0' ||
			    strchr(tab + 1, '\t') != NULL || strchr(key, '\n') != NULL)
				fuzz_fail("a plan line that is not two fields");
		}
		if (size > 0 && data[size - 1] != '\n')
			fuzz_fail("a plan without its last newline taken");
	}
	idem_map_free(&m);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	step_lines(data, size);
	plan(data, size);
	return 0;
}
