#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "error.h"

const char *argv0 = "idem";

/* An error is one line: what a library or an input put into it (a
 * server's trailing newline, a control character quoted from a hostile
 * line) is shown as a space. */
void
idem_one_line(char *buf)
{
	char *p;
	size_t len;

	for (p = buf; *p != '\0'; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	len = strlen(buf);
	while (len > 0 && buf[len - 1] == ' ')
		buf[--len] = '\0';
}

static void
vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
	int saved = errno;
	size_t len;

	vsnprintf(buf, size, fmt, ap);
	len = strlen(buf);
	if (len > 0 && buf[len - 1] == ':' && saved != 0)
		snprintf(buf + len, size - len, " %s", strerror(saved));
	idem_one_line(buf);
}

int
idem_error_set(struct idem_error *err, int status, const char *fmt, ...)
{
	va_list ap;

	err->status = status;
	va_start(ap, fmt);
	vformat(err->text, sizeof(err->text), fmt, ap);
	va_end(ap);
	return -1;
}

void
idem_die_error(const struct idem_error *err)
{
	/* no text: the error was told already, by the stage before (tsv.c) */
	if (err->text[0] != '\0')
		fprintf(stderr, "%s: %s\n", argv0, err->text);
	exit(err->status ? err->status : IDEM_EXIT_ENV);
}

static void
vwarn(const char *fmt, va_list ap)
{
	char buf[2048];

	vformat(buf, sizeof(buf), fmt, ap);
	fprintf(stderr, "%s: %s\n", argv0, buf);
}

void
idem_die(int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn(fmt, ap);
	va_end(ap);
	exit(status);
}

void
idem_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn(fmt, ap);
	va_end(ap);
}

void *
idem_emalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (p == NULL)
		idem_die(IDEM_EXIT_ENV, "malloc:");
	return p;
}

void *
idem_erealloc(void *p, size_t size)
{
	p = realloc(p, size ? size : 1);
	if (p == NULL)
		idem_die(IDEM_EXIT_ENV, "realloc:");
	return p;
}

void *
idem_ereallocarray(void *p, size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size)
		idem_die(IDEM_EXIT_ENV, "allocation of %zu x %zu bytes overflows", n, size);
	return idem_erealloc(p, n * size);
}

char *
idem_estrdup(const char *s)
{
	char *p = strdup(s);

	if (p == NULL)
		idem_die(IDEM_EXIT_ENV, "strdup:");
	return p;
}

char *
idem_estrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);

	if (p == NULL)
		idem_die(IDEM_EXIT_ENV, "strndup:");
	return p;
}

void
idem_free_list(char **list, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

void
idem_close_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout))
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	if (fclose(stdout) != 0)
		idem_die(IDEM_EXIT_ENV, "closing standard output:");
}

void
idem_usage(const char *synopsis, int status)
{
	FILE *out = status == 0 ? stdout : stderr;

	fputs(synopsis, out);
	if (status == 0)
		idem_close_stdout();
	exit(status);
}
