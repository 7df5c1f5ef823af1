#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "error.h"
#include "text.h"

long long
idem_parse_duration_ms(const char *s)
{
	static const struct { const char *unit; long long ms; } units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
	};
	long long value = 0;
	const char *p = s;
	size_t i;

	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (value > (LLONG_MAX - 9) / 10)
			return -1;
		value = value * 10 + (*p - '0');
	}
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].unit) == 0) {
			if (value > LLONG_MAX / units[i].ms)
				return -1;
			return value * units[i].ms;
		}
	}
	return -1;
}

long long
idem_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
idem_format_time(long long us, char out[32])
{
	static time_t cached_secs = -1;
	static char cached[20];
	time_t secs = (time_t)(us / 1000000);
	int micros = (int)(us % 1000000), i;
	struct tm tm;

	/* rows come in bursts within one second: format the second once */
	if (secs != cached_secs) {
		if (us < 0 || gmtime_r(&secs, &tm) == NULL ||
		    strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &tm) != 19) {
			snprintf(out, 32, "out-of-range");
			return;
		}
		cached_secs = secs;
	}
	memcpy(out, cached, 19);
	out[19] = '.';
	for (i = 25; i >= 20; i--) {
		out[i] = (char)('0' + micros % 10);
		micros /= 10;
	}
	out[26] = 'Z';
	out[27] = '\0';
}

char *
idem_date_from_now(int days)
{
	time_t t = time(NULL) + (time_t)days * 86400;
	struct tm tm;
	char buf[16];

	gmtime_r(&t, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
	return idem_estrdup(buf);
}

void
idem_format_real(double v, char out[32])
{
	snprintf(out, 32, "%.15g", v);
	if (strtod(out, NULL) != v)
		snprintf(out, 32, "%.17g", v);
}

void
idem_sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char digest[crypto_hash_sha256_BYTES];

	crypto_hash_sha256(digest, data, len);
	sodium_bin2hex(out, 65, digest, sizeof(digest));
}

uint64_t
idem_sha256_pair(const char *a, const char *b)
{
	crypto_hash_sha256_state st;
	unsigned char digest[crypto_hash_sha256_BYTES];
	uint64_t h = 0;
	int i;

	crypto_hash_sha256_init(&st);
	crypto_hash_sha256_update(&st, (const unsigned char *)a, strlen(a) + 1);
	crypto_hash_sha256_update(&st, (const unsigned char *)b, strlen(b));
	crypto_hash_sha256_final(&st, digest);
	for (i = 0; i < 8; i++)
		h = h << 8 | digest[i];
	return h;
}

int
idem_file_name_valid(const char *s, size_t len)
{
	size_t i;

	if (len == 0 || len > IDEM_FILE_NAME_MAX)
		return 0;
	for (i = 0; i < len; i++) {
		char c = s[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');

		if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
			return 0;
	}
	return 1;
}

int
idem_utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + len;
	uint32_t cp;
	int n, i;

	while (p < end) {
		if (*p == 0)
			return 0;
		if (*p < 0x80) {
			p++;
			continue;
		}
		if (*p >= 0xc2 && *p <= 0xdf) {
			n = 1;
			cp = *p & 0x1f;
		} else if ((*p & 0xf0) == 0xe0) {
			n = 2;
			cp = *p & 0x0f;
		} else if (*p >= 0xf0 && *p <= 0xf4) {
			n = 3;
			cp = *p & 0x07;
		} else {
			return 0;
		}
		if (end - p < n + 1)
			return 0;
		for (i = 1; i <= n; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (p[i] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		p += n + 1;
	}
	return 1;
}

char *
idem_log_value(const char *line, const char *name)
{
	size_t n = strlen(name);
	const char *p = line;
	char *out;

	while ((p = strstr(p, name)) != NULL) {
		if ((p == line || p[-1] == ' ') && p[n] == '=') {
			p += n + 1;
			if ((out = strndup(p, strcspn(p, " "))) == NULL)
				idem_die(IDEM_EXIT_ENV, "strndup:");
			return out;
		}
		p += n;
	}
	return NULL;
}

char *
idem_shell_quote(const char *s)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789-_./=:@,+";
	char *out = idem_emalloc(strlen(s) * 4 + 3), *o = out;

	if (*s && strspn(s, safe) == strlen(s))
		return strcpy(out, s);
	*o++ = '\'';
	for (; *s; s++) {
		if (*s == '\'') {
			memcpy(o, "'\\''", 4);
			o += 4;
		} else {
			*o++ = *s;
		}
	}
	*o++ = '\'';
	*o = '\0';
	return out;
}

/* Optimal string alignment distance: insertions, deletions, substitutions
 * and swaps of two neighbours, each 1; three rows of the table. */
int
idem_text_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j;
	int *buf, *row, *prev, *prev2, *tmp, d;

	if (la > 256 || lb > 256)
		return IDEM_NEAR_MAX + 1;
	row = buf = idem_ereallocarray(NULL, 3 * (lb + 1), sizeof(*buf));
	prev = row + lb + 1;
	prev2 = prev + lb + 1;
	for (j = 0; j <= lb; j++)
		prev[j] = (int)j;
	for (i = 1; i <= la; i++) {
		row[0] = (int)i;
		for (j = 1; j <= lb; j++) {
			d = prev[j - 1] + (a[i - 1] != b[j - 1]);
			if (prev[j] + 1 < d)
				d = prev[j] + 1;
			if (row[j - 1] + 1 < d)
				d = row[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    prev2[j - 2] + 1 < d)
				d = prev2[j - 2] + 1;
			row[j] = d;
		}
		tmp = prev2;
		prev2 = prev;
		prev = row;
		row = tmp;
	}
	d = prev[lb];
	free(buf);
	return d;
}

/* A slip of the keyboard: at most IDEM_NEAR_MAX edits, and fewer than half
 * the length of the longer name; never the name itself. */
int
idem_text_near(const char *typed, const char *known)
{
	size_t la = strlen(typed), lb = strlen(known);
	int d = idem_text_distance(typed, known);

	return d > 0 && d <= IDEM_NEAR_MAX && (size_t)d * 2 < (la > lb ? la : lb);
}

const char *
idem_text_nearest(const char *typed, const char *const *known)
{
	const char *best = NULL;
	int best_d = IDEM_NEAR_MAX + 1, d;

	for (; *known; known++)
		if (idem_text_near(typed, *known) && (d = idem_text_distance(typed, *known)) < best_d) {
			best = *known;
			best_d = d;
		}
	return best;
}
