/* mermaid-check FILE...: checks every ```mermaid block of Markdown files
 * against the rules of Mermaid's gantt grammar (gantt.jison) for the
 * subset idem writes: a gantt header, title, dateFormat x, axisFormat with
 * d3 time directives, todayMarker off, sections and tasks. A task is
 * NAME :TAGS, START, END with tags among active, done, crit and milestone
 * (each once), START and END integers of milliseconds, END not before
 * START; a name holds no ":", "#" or ";" and starts with nothing the
 * lexer reads as a token of its own (a keyword such as click or call, in
 * any case, a date, "%" or "}"); no section is empty. Prints FILE:LINE: why for each fault; exits 1 when there
 * is one or no block at all, 2 when a file cannot be read. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The words that the gantt lexer reads as tokens before a task's text,
 * whatever their case: a task named so is not a task. */
static const char *const keywords[] = {
	"gantt", "title", "section", "dateFormat", "axisFormat", "todayMarker", "tickInterval",
	"excludes", "includes", "weekday", "weekend", "inclusiveEndDates", "topAxis", "click",
	"call", "href", "accTitle", "accDescr", "accDescription", "displayMode", NULL
};

static const char *file;
static int faults;

static void
fault(int line, const char *why, const char *text)
{
	printf("%s:%d: %s: %s\n", file, line, why, text);
	faults++;
}

static int
starts_with_word(const char *s, const char *word)
{
	size_t n = strlen(word);

	return strncasecmp(s, word, n) == 0 && (s[n] == '\0' || !isalnum((unsigned char)s[n]));
}

/* A task's text the lexer reads as something else: a keyword, a date
 * (YYYY-MM-DD), a comment (%), or a closing brace. */
static const char *
lexed_otherwise(const char *name)
{
	int k;

	for (k = 0; keywords[k]; k++)
		if (starts_with_word(name, keywords[k]))
			return "a task name starting with a keyword";
	if (isdigit((unsigned char)name[0]) && isdigit((unsigned char)name[1]) &&
	    isdigit((unsigned char)name[2]) && isdigit((unsigned char)name[3]) && name[4] == '-' &&
	    isdigit((unsigned char)name[5]) && isdigit((unsigned char)name[6]) && name[7] == '-' &&
	    isdigit((unsigned char)name[8]) && isdigit((unsigned char)name[9]))
		return "a task name starting with a date";
	if (name[0] == '%' || name[0] == '}')
		return "a task name starting with % or }";
	return NULL;
}

/* A decimal integer of milliseconds: digits only, no leading zero. */
static int
ms_integer(const char *s, long long *out)
{
	char *end;

	if (!isdigit((unsigned char)*s) || (s[0] == '0' && s[1] != '\0') || strlen(s) > 15)
		return 0;
	errno = 0;
	*out = strtoll(s, &end, 10);
	return *end == '\0' && errno == 0;
}

static char *
trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

static void
check_task(int line, char *text)
{
	static const char *const tags[] = { "active", "done", "crit", "milestone", NULL };
	char *colon = strchr(text, ':'), *name, *data, *item, *save;
	const char *why;
	int seen[4] = { 0 }, numbers = 0, t;
	long long v[2] = { 0, 0 };

	*colon = '\0';
	name = trim(text);
	data = colon + 1;
	if (*name == '\0')
		fault(line, "a task without a name", data);
	if (strpbrk(name, "#;") != NULL)
		fault(line, "a task name holding # or ;", name);
	if ((why = lexed_otherwise(name)) != NULL)
		fault(line, why, name);
	if (strpbrk(data, ":#;") != NULL)
		fault(line, "task data holding :, # or ;", data);
	for (item = strtok_r(data, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		item = trim(item);
		for (t = 0; tags[t] && strcmp(item, tags[t]) != 0; t++)
			;
		if (tags[t] != NULL) {
			if (numbers > 0)
				fault(line, "a tag after the times", item);
			else if (seen[t]++)
				fault(line, "a tag given twice", item);
			continue;
		}
		if (numbers == 2)
			fault(line, "more than a start and an end", item);
		else if (!ms_integer(item, &v[numbers]))
			fault(line, "not an integer of milliseconds (dateFormat x)", item);
		numbers++;
	}
	if (numbers < 2)
		fault(line, "a task without a start and an end", name);
	else if (numbers == 2 && v[1] < v[0])
		fault(line, "a task that ends before it starts", name);
}

static void
check_axis_format(int line, const char *fmt)
{
	const char *p;

	if (*fmt == '\0' || strpbrk(fmt, "#;") != NULL)
		fault(line, "an axisFormat empty or holding # or ;", fmt);
	for (p = fmt; (p = strchr(p, '%')) != NULL; p += 2)
		if (p[1] == '\0' || strchr("aAbBcdefgGHIjLmMpqQsSuUVwWxXyYZ%", p[1]) == NULL)
			fault(line, "not a d3 time directive", p);
}

/* Checks one block; its lines are lines[0..n), the first at line first. */
static void
check_block(char **lines, size_t n, int first)
{
	size_t i;
	int header = 0, date_format = 0, tasks = 0, section_line = 0, section_tasks = 0;

	for (i = 0; i < n; i++) {
		int line = first + (int)i;
		char *text = trim(lines[i]);

		if (*text == '\0' || strncmp(text, "%%", 2) == 0)
			continue;
		if (!header) {
			if (strcmp(text, "gantt") != 0)
				fault(line, "a block not starting with gantt", text);
			header = 1;
			continue;
		}
		if (starts_with_word(text, "title")) {
			if (text[5] == '\0' || *trim(text + 5) == '\0')
				fault(line, "an empty title", text);
		} else if (starts_with_word(text, "dateFormat")) {
			if (strcmp(trim(text + 10), "x") != 0)
				fault(line, "a dateFormat other than x", text);
			date_format = 1;
		} else if (starts_with_word(text, "axisFormat")) {
			check_axis_format(line, trim(text + 10));
		} else if (starts_with_word(text, "todayMarker")) {
			if (strcmp(trim(text + 11), "off") != 0)
				fault(line, "a todayMarker other than off", text);
		} else if (starts_with_word(text, "section")) {
			if (section_line && section_tasks == 0)
				fault(section_line, "an empty section", "no task");
			if (*trim(text + 7) == '\0' || strpbrk(text + 7, ":#;") != NULL)
				fault(line, "a section name empty or holding :, # or ;", text);
			section_line = line;
			section_tasks = 0;
		} else if (strchr(text, ':') != NULL) {
			if (!date_format)
				fault(line, "a task before dateFormat", text);
			if (strchr(strchr(text, ':') + 1, ':') != NULL)
				fault(line, "a task holding a second :", text);
			else
				check_task(line, text);
			tasks++;
			section_tasks++;
		} else {
			fault(line, "not a statement of the gantt grammar", text);
		}
	}
	if (!header)
		fault(first, "an empty block", "no gantt");
	if (section_line && section_tasks == 0)
		fault(section_line, "an empty section", "no task");
	if (tasks == 0)
		fault(first, "a chart without a task", "gantt");
	if (!date_format)
		fault(first, "a chart without dateFormat", "gantt");
}

int
main(int argc, char *argv[])
{
	int a, blocks = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: mermaid-check file...\n");
		return 2;
	}
	for (a = 1; a < argc; a++) {
		FILE *in = fopen(argv[a], "r");
		char *line = NULL, **block = NULL;
		size_t cap = 0, n = 0;
		int lineno = 0, in_block = 0, first = 0;

		file = argv[a];
		if (in == NULL) {
			fprintf(stderr, "mermaid-check: %s: %s\n", argv[a], strerror(errno));
			return 2;
		}
		while (getline(&line, &cap, in) != -1) {
			lineno++;
			line[strcspn(line, "\n")] = '\0';
			if (!in_block && strcmp(line, "```mermaid") == 0) {
				in_block = 1;
				first = lineno + 1;
				n = 0;
			} else if (in_block && strcmp(line, "```") == 0) {
				check_block(block, n, first);
				while (n > 0)
					free(block[--n]);
				in_block = 0;
				blocks++;
			} else if (in_block) {
				block = realloc(block, (n + 1) * sizeof(*block));
				if (block == NULL || (block[n++] = strdup(line)) == NULL) {
					fprintf(stderr, "mermaid-check: out of memory\n");
					return 2;
				}
			}
		}
		if (in_block)
			fault(first, "a block without its closing fence", "```mermaid");
		while (n > 0)
			free(block[--n]);
		free(block);
		free(line);
		fclose(in);
	}
	if (blocks == 0) {
		printf("%s: no mermaid block\n", file);
		faults++;
	}
	return faults > 0;
}
