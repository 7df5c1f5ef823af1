/* error.h: messages, exit statuses and allocation that exits, shared by
 * every program */
#ifndef IDEM_ERROR_H
#define IDEM_ERROR_H

#include <stddef.h>

enum {
	IDEM_EXIT_OK = 0,
	IDEM_EXIT_FINDING = 1,	/* counts differ, a signature fails, a rerun differs */
	IDEM_EXIT_USAGE = 2,	/* usage error or bad input */
	IDEM_EXIT_ENV = 3	/* database, git or I/O failure; not a sandbox */
};

/* An error a library function hands back: the exit status it calls for and
 * a message that can be printed without knowing the library. */
struct idem_error {
	int status;
	char text[1024];
};

extern const char *argv0;

/* Sets err and returns -1; a format that ends in ':' gets strerror(errno). */
int idem_error_set(struct idem_error *err, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void idem_die_error(const struct idem_error *err) __attribute__((noreturn));
void idem_die(int status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
void idem_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* buf made one line: each control character a space, trailing spaces
 * dropped. */
void idem_one_line(char *buf);
void *idem_emalloc(size_t size);
void *idem_erealloc(void *p, size_t size);
void *idem_ereallocarray(void *p, size_t n, size_t size);
char *idem_estrdup(const char *s);
char *idem_estrndup(const char *s, size_t n);
/* Frees the n strings of a list, then the list. */
void idem_free_list(char **list, size_t n);

/* Flush and close stdout; exit IDEM_EXIT_ENV when any write failed. */
void idem_close_stdout(void);

/* Print usage text and exit: to stdout with 0 for --help, stderr with 2. */
void idem_usage(const char *synopsis, int status) __attribute__((noreturn));

#endif
