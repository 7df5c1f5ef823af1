/* text.h: the values of streams and records as text: durations, times,
 * reals, dates, hashes, UTF-8, file names, log values and shell words */
#ifndef IDEM_TEXT_H
#define IDEM_TEXT_H

#include <stddef.h>
#include <stdint.h>

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

/* The first 8 bytes, big-endian, of the SHA-256 of a, a NUL byte and b:
 * a pure function of the pair, for choices a rerun must make again. */
uint64_t idem_sha256_pair(const char *a, const char *b);

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

/* The edit distance of a and b (Damerau-Levenshtein, neighbours swapped
 * counting one), or more than IDEM_NEAR_MAX for names over 256 bytes. */
#define IDEM_NEAR_MAX 2
int idem_text_distance(const char *a, const char *b);

/* Whether typed is a near miss of known: 1 to IDEM_NEAR_MAX edits away,
 * and fewer than half the length of the longer of the two. */
int idem_text_near(const char *typed, const char *known);

/* The known name (NULL-terminated list) closest to typed among its near
 * misses, the first of equals; NULL when none is near. */
const char *idem_text_nearest(const char *typed, const char *const *known);

#endif
