#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "pg.h"
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

/* Whether a section's head names it: "name", or "function name(...)". */
static int
names(const struct idem_sql_section *s, const char *name, size_t n)
{
	if (s->head_len > 9 + n && strncmp(s->head, "function ", 9) == 0)
		return strncmp(s->head + 9, name, n) == 0 && s->head[9 + n] == '(';
	return s->head_len == n && strncmp(s->head, name, n) == 0;
}

int
idem_sql_section_find(const char *text, const char *name, struct idem_sql_section *s)
{
	struct idem_sql_section *prev = NULL;
	size_t n = strlen(name);

	for (; idem_sql_section_next(text, prev, s); prev = s)
		if (names(s, name, n))
			return 1;
	return 0;
}

/* The fill of a placeholder, ":name" at p (a colon of a "::" cast is
 * none), or NULL; *name_end: where the name ends. */
static const struct idem_sql_fill *
placeholder(const char *p, const char *end, const struct idem_sql_fill *fills, size_t nfills,
	    const char **name_end)
{
	const char *name = p + 1, *q = name;
	size_t i;

	if (p[-1] == ':' || *name == ':')
		return NULL;
	while (q < end && (*q == '_' || (*q >= 'a' && *q <= 'z')))
		q++;
	*name_end = q;
	for (i = 0; i < nfills; i++)
		if (fills[i].value != NULL && strncmp(fills[i].name, name, (size_t)(q - name)) == 0 &&
		    fills[i].name[q - name] == '\0')
			return &fills[i];
	return NULL;
}

char *
idem_sql_filled(const struct idem_sql_section *s, const struct idem_sql_fill *fills,
		size_t nfills)
{
	const char *p, *end = s->text + s->len, *name_end;
	const struct idem_sql_fill *fill;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	for (p = s->text; p < end; p++) {
		if (*p != ':' || (fill = placeholder(p, end, fills, nfills, &name_end)) == NULL) {
			putc(*p, f);
			continue;
		}
		fputs(fill->value, f);
		if (*fill->value == '\0' && p[-1] == '\n' && *name_end == '\n')
			name_end++;
		p = name_end - 1;
	}
	if (fclose(f) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	return text;
}

void
idem_sql_put(FILE *f, PGconn *conn, const char *schema, const struct idem_sql_section *s,
	     const struct idem_sql_fill *fills, size_t nfills)
{
	char *text = idem_sql_filled(s, fills, nfills), *literal;

	if (s->head_len > 9 && strncmp(s->head, "function ", 9) == 0) {
		literal = idem_pg_quote_literal(conn, text);
		fprintf(f, "CREATE FUNCTION %s.%.*s LANGUAGE plpgsql SECURITY DEFINER "
		    "SET search_path = pg_catalog, pg_temp AS %s;\n", schema, (int)s->head_len - 9,
		    s->head + 9, literal);
		free(literal);
	} else {
		fprintf(f, "%s\n", text);
	}
	free(text);
}
