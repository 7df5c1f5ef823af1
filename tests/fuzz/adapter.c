/* Fuzzes the reader of a team's queue adapter file (lib/queue.h,
 * idem_queue_parse): any bytes are an adapter or a one-line error naming
 * the file, with an exit status of bad input; an adapter taken has its
 * kind's name as the header says it, every section it must have, and each
 * section's SQL within the file's text. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "queue.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	const char *const *r;
	struct idem_queue q;
	struct idem_error err;
	size_t i;

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (idem_queue_parse(&q, "adapter.sql", text, size, NULL, "q", &err) < 0) {
		if (err.status != IDEM_EXIT_USAGE || strncmp(err.text, "adapter.sql:", 12) != 0 ||
		    strchr(err.text, '\n') != NULL)
			fuzz_fail("an error that is not one line of bad input naming the file");
	} else {
		if (q.kind == NULL || strspn(q.kind, "abcdefghijklmnopqrstuvwxyz0123456789-") !=
		    strlen(q.kind))
			fuzz_fail("a kind that is not a name");
		for (r = idem_queue_required; *r; r++)
			if (!idem_queue_has(&q, *r))
				fuzz_fail("an adapter taken without a section it must have");
		for (i = 0; i < q.nsections; i++)
			if (q.sections[i].len == 0 || q.sections[i].sql < q.text ||
			    q.sections[i].sql + q.sections[i].len > q.text + size)
				fuzz_fail("a section empty or outside the text");
	}
	idem_queue_close(&q);
	return 0;
}
