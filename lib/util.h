/* util.h: messages, exit statuses and allocation shared by every program */
#ifndef IDEM_UTIL_H
#define IDEM_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

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

int idem_error_set(struct idem_error *err, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void idem_die_error(const struct idem_error *err) __attribute__((noreturn));
void idem_die(int status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
void idem_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void *idem_emalloc(size_t size);
void *idem_erealloc(void *p, size_t size);
void *idem_ereallocarray(void *p, size_t n, size_t size);
char *idem_estrdup(const char *s);
char *idem_estrndup(const char *s, size_t n);
/* The SHA-256 of a file's bytes, read in chunks, as 64 lowercase hex
 * digits in out; 0, or -1 when it cannot be read. */
int idem_sha256_file(const char *path, char out[65]);
/* Frees the n strings of a list, then the list. */
void idem_free_list(char **list, size_t n);

/* Flush and close stdout; exit IDEM_EXIT_ENV when any write failed. */
void idem_close_stdout(void);

/* Read a whole file; NULL with err set on failure. */
char *idem_read_file(const char *path, size_t *len, struct idem_error *err);
/* The same, but a file of more than max bytes is refused (IDEM_EXIT_USAGE,
 * "PATH: larger than MAX bytes") after reading at most max + 1 of them. */
char *idem_read_file_max(const char *path, size_t max, size_t *len, struct idem_error *err);

/* Write data to a new file made from tmpl, a path that ends in XXXXXX as
 * for mkstemp, which becomes its name; mode 0644, synced. */
int idem_write_temp_file(char *tmpl, const char *data, size_t len, struct idem_error *err);
/* The same, not synced: for several files, then synced with
 * idem_fsync_path one by one or idem_fsync_paths all together. */
int idem_write_temp_file_unsynced(char *tmpl, const char *data, size_t len,
				  struct idem_error *err);
int idem_fsync_path(const char *path, struct idem_error *err);
/* Syncs up to IDEM_FSYNC_MAX files at once, each in its own thread: every
 * sync waits on the disk, and run together the waits overlap (on ext4
 * without a journal each one is its own write and cache flush). 0 when
 * every file is on disk; otherwise the first failing path, in order. */
#define IDEM_FSYNC_MAX 8
int idem_fsync_paths(const char *const *paths, size_t n, struct idem_error *err);

/* Copies the rest of from to to. -1 with errno set on an error, reading
 * when ferror(from), else writing. */
int idem_copy_stream(FILE *from, FILE *to);

/* Write data to path through a temporary file in the same directory and a
 * rename, so a failure leaves no partial file. */
int idem_write_file_atomic(const char *path, const char *data, size_t len,
			   struct idem_error *err);

/* Makes a private directory "$TMPDIR/PREFIX.XXXXXX" (TMPDIR or /tmp) with
 * the given mode; out holds its path. */
int idem_make_temp_dir(char *out, size_t size, const char *prefix, mode_t mode,
		       struct idem_error *err);

/* The causes of waiting a record keeps apart from the engineer's figures
 * (mkrecord -w), NULL-terminated. */
extern const char *const idem_wait_causes[];

/* Durations such as "500ms", "2s", "1m", "1h" in milliseconds; -1 if bad. */
long long idem_parse_duration_ms(const char *s);

/* Microseconds since the Unix epoch, by the wall clock. */
long long idem_now_us(void);

/* RFC 3339 UTC with microseconds ("2026-11-29T13:46:05.322088Z"). */
void idem_format_time(long long us, char out[32]);
/* The shortest of %.15g and %.17g that reads back as v. */
void idem_format_real(double v, char out[32]);

/* The UTC date days from now, "YYYY-MM-DD"; caller frees. */
char *idem_date_from_now(int days);

/* Lowercase hex of SHA-256; out must hold 65 bytes. */
void idem_sha256_hex(const void *data, size_t len, char out[65]);

/* Standard-conforming UTF-8 without NUL bytes. */
int idem_utf8_valid(const char *s, size_t len);

/* A name that can stand in a file name: 1 to IDEM_FILE_NAME_MAX letters,
 * digits, '.', '_' and '-', beginning with a letter or a digit. */
#define IDEM_FILE_NAME_MAX 100
int idem_file_name_valid(const char *s, size_t len);

/* The value of "name=" in a log line such as "branch=inserted job=a", up
 * to the next space; NULL when absent. Caller frees. */
char *idem_log_value(const char *line, const char *name);

/* A word for sh: as it is when it holds only safe characters, else in
 * single quotes. Caller frees. */
char *idem_shell_quote(const char *s);

/* Starts a watchdog: a process in a group of its own that ignores SIGINT,
 * SIGTERM and SIGHUP. Write it a pid_t: a positive one is a process group
 * to watch, a negative one a group gone. When the returned pipe closes,
 * however its writer ends, it sends SIGKILL to every group still watched
 * (at most max_groups), removes the files and empty directories named in
 * leftovers (NULL-terminated, in order; NULL for none: what a writer that
 * was killed could not remove) and exits. -1 with err set on failure. */
int idem_watchdog(size_t max_groups, const char *const *leftovers, struct idem_error *err);

/* Print usage text and exit: to stdout with 0 for --help, stderr with 2. */
void idem_usage(const char *synopsis, int status) __attribute__((noreturn));

#endif
