/* file.h: files read whole, written whole through a temporary file and a
 * rename, synced, copied and hashed */
#ifndef IDEM_FILE_H
#define IDEM_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "error.h"
#include "parallel.h"

/* A filter's input: the file at path, or standard input for NULL or "-";
 * *name is what messages call it, "stdin" for standard input. Exits 2
 * naming the path, as the idem_e* functions do, when it cannot be opened. */
FILE *idem_eopen_input(const char *path, const char **name);

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
#define IDEM_FSYNC_MAX IDEM_PARALLEL_MAX
int idem_fsync_paths(const char *const *paths, size_t n, struct idem_error *err);

/* Write data to path through a temporary file in the same directory and a
 * rename, so a failure leaves no partial file. */
int idem_write_file_atomic(const char *path, const char *data, size_t len,
			   struct idem_error *err);

/* Makes a private directory "$TMPDIR/PREFIX.XXXXXX" (TMPDIR or /tmp) with
 * the given mode; out holds its path. */
int idem_make_temp_dir(char *out, size_t size, const char *prefix, mode_t mode,
		       struct idem_error *err);

/* Copies the rest of from to to. -1 with errno set on an error, reading
 * when ferror(from), else writing. */
int idem_copy_stream(FILE *from, FILE *to);

/* The directory that holds path, into dir (size bytes): "." for a name
 * without a slash, "/" for one directly under the root. */
void idem_dir_of(const char *path, char *dir, size_t size);

/* The SHA-256 of a file's bytes, read in chunks, as 64 lowercase hex
 * digits in out; 0, or -1 when it cannot be read. */
int idem_sha256_file(const char *path, char out[65]);

#endif
