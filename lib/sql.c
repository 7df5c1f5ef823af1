#include <string.h>

#include "sql.h"

static int
comment_or_blank(const char *line, const char *end)
{
	while (line < end && (*line == ' ' || *line == '\t'))
		line++;
	return line == end || (end - line >= 2 && line[0] == '-' && line[1] == '-');
}

int
idem_sql_section_next(const char *text, const struct idem_sql_section *prev,
		      struct idem_sql_section *s)
{
	const char *line, *end;

	/* prev's text begins after the newline of its head's line */
	if (prev == NULL && strncmp(text, "-- @", 4) == 0)
		line = text;
	else if ((line = strstr(prev ? prev->text - 1 : text, "\n-- @")) != NULL)
		line++;
	else
		return 0;
	s->head = line + 4;
	if ((end = strchr(s->head, '\n')) == NULL)
		end = s->head + strlen(s->head);
	s->head_len = (size_t)(end - s->head);
	s->text = *end ? end + 1 : end;
	if ((end = strstr(s->text - 1, "\n-- @")) == NULL)
		end = s->text + strlen(s->text);
	else if (end < s->text)
		end = s->text;	/* a section of no lines */
	while (end > s->text) {
		for (line = end; line > s->text && line[-1] != '\n'; line--)
			;
		if (!comment_or_blank(line, end))
			break;
		end = line > s->text ? line - 1 : line;
	}
	while (end > s->text && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	s->len = (size_t)(end - s->text);
	return 1;
}
