/* Fuzzes the reader of SQL files made of sections (lib/sql.h), which the
 * queue adapters, lib/ledger.sql and kill-at's failpoint.sql are: every
 * section lies within the text, after its head, each after the one
 * before, and a file's sections are read to their end. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "sql.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *end;
	struct idem_sql_section s, *prev = NULL;
	const char *after;
	size_t n = 0;

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	end = text + strlen(text);
	after = text;
	while (idem_sql_section_next(text, prev, &s)) {
		if (s.head < after || s.head + s.head_len > end || memchr(s.head, '\n', s.head_len))
			fuzz_fail("a head outside the text, or over more than its line");
		if (s.text < s.head + s.head_len || s.text + s.len > end)
			fuzz_fail("a section's text outside the text, or before its head");
		if (strncmp(s.head - 4, "-- @", 4) != 0 || (s.head - 4 != text && s.head[-5] != '\n'))
			fuzz_fail("a head not at the start of a line \"-- @\"");
		after = s.text;
		if (++n > size)
			fuzz_fail("more sections than bytes");
		prev = &s;
	}
	free(text);
	return 0;
}
