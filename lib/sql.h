/* sql.h: SQL files made of sections, as the queue adapters and kill-at's
 * failpoint.sql are. A section begins at a line "-- @HEAD" and runs to the
 * next such line, without the blank lines and comments that end it: those
 * speak of the next section. */
#ifndef IDEM_SQL_H
#define IDEM_SQL_H

#include <stddef.h>

struct idem_sql_section {
	const char *head;	/* what follows "-- @" on its line */
	size_t head_len;
	const char *text;
	size_t len;
};

/* The section after prev (NULL: the first) of the file's text into s,
 * which may be prev itself; 0 when there is none. */
int idem_sql_section_next(const char *text, const struct idem_sql_section *prev,
			  struct idem_sql_section *s);

#endif
