#include <sys/sendfile.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "util.h"

const char *argv0 = "idem";

/* An error is one line: what a library or an input put into it (a
 * server's trailing newline, a control character quoted from a hostile
 * line) is shown as a space. */
static void
one_line(char *buf)
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
	one_line(buf);
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
	fprintf(stderr, "%s: %s\n", argv0, err->text);
	exit(err->status ? err->status : IDEM_EXIT_ENV);
}

void
idem_die(int status, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;

	va_start(ap, fmt);
	vformat(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s\n", argv0, buf);
	exit(status);
}

void
idem_warn(const char *fmt, ...)
{
	char buf[2048];
	va_list ap;

	va_start(ap, fmt);
	vformat(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s\n", argv0, buf);
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

/*
 * A held file is tens of megabytes at 100,000 jobs: its bytes go from file
 * to file or pipe in the kernel (sendfile(2)), after what stdio holds on
 * either side, and through a buffer only where the kernel cannot (from a
 * pipe, to or from memory, to an output opened to append).
 */
int
idem_copy_stream(FILE *from, FILE *to)
{
	char buf[65536];
	struct stat st;
	size_t got;
	ssize_t sent;
	off_t at;

	/* a stream in memory has no file descriptor, and one read from a pipe
	 * keeps what it holds when flushed; flushed, a stream read from a
	 * file holds nothing, and the file's offset is its position */
	if (fileno(from) < 0 || fileno(to) < 0 || fstat(fileno(from), &st) != 0 ||
	    !S_ISREG(st.st_mode) || fflush(to) != 0 || fflush(from) != 0)
		goto buffered;
	while ((sent = sendfile(fileno(to), fileno(from), NULL, 1 << 30)) > 0)
		;
	/* an error of the copy is told as the writing side's */
	if (sent < 0 && errno != EINVAL && errno != ENOSYS)
		return -1;
	/* the stream's position is its file's again, after what was sent */
	if ((at = lseek(fileno(from), 0, SEEK_CUR)) < 0 || fseeko(from, at, SEEK_SET) != 0)
		return -1;
	if (sent == 0)
		return 0;
	/* an output the kernel cannot write to this way (O_APPEND) */
buffered:
	while ((got = fread(buf, 1, sizeof(buf), from)) > 0)
		if (fwrite(buf, 1, got, to) != got)
			return -1;
	return ferror(from) ? -1 : 0;
}

void
idem_close_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout))
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	if (fclose(stdout) != 0)
		idem_die(IDEM_EXIT_ENV, "closing standard output:");
}

char *
idem_read_file(const char *path, size_t *len, struct idem_error *err)
{
	return idem_read_file_max(path, SIZE_MAX - 1, len, err);
}

char *
idem_read_file_max(const char *path, size_t max, size_t *len, struct idem_error *err)
{
	FILE *f;
	char *buf = NULL;
	size_t cap = 0, n = 0, got;
	struct stat st;

	f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (f == NULL) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s:", path);
		return NULL;
	}
	/* a regular file is read into a buffer of its size, plus one byte to
	 * see the end; a pipe grows one; neither beyond one byte past max */
	if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 &&
	    (size_t)st.st_size <= max) {
		cap = (size_t)st.st_size + 1;
		buf = idem_emalloc(cap + 1);
	}
	for (;;) {
		if (cap == n) {
			cap = cap ? cap * 2 : 65536;
			if (cap > max + 1)
				cap = max + 1;
			buf = idem_erealloc(buf, cap + 1);
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0 || n > max)
			break;
	}
	if (ferror(f)) {
		idem_error_set(err, IDEM_EXIT_ENV, "%s: read error", path);
		free(buf);
		buf = NULL;
	} else if (n > max) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: larger than %zu bytes", path, max);
		free(buf);
		buf = NULL;
	} else {
		buf[n] = '\0';
		*len = n;
	}
	if (f != stdin)
		fclose(f);
	return buf;
}

static int
write_temp(char *tmpl, const char *data, size_t len, int sync, struct idem_error *err)
{
	int fd;
	size_t off = 0;
	ssize_t w;

	if ((fd = mkstemp(tmpl)) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", tmpl);
	while (off < len) {
		w = write(fd, data + off, len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			idem_error_set(err, IDEM_EXIT_ENV, "%s:", tmpl);
			goto fail;
		}
		off += (size_t)w;
	}
	if (fchmod(fd, 0644) < 0 || (sync && fsync(fd) < 0)) {
		idem_error_set(err, IDEM_EXIT_ENV, "%s:", tmpl);
		goto fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		idem_error_set(err, IDEM_EXIT_ENV, "%s:", tmpl);
		goto fail;
	}
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(tmpl);
	return -1;
}

int
idem_write_temp_file(char *tmpl, const char *data, size_t len, struct idem_error *err)
{
	return write_temp(tmpl, data, len, 1, err);
}

int
idem_write_temp_file_unsynced(char *tmpl, const char *data, size_t len, struct idem_error *err)
{
	return write_temp(tmpl, data, len, 0, err);
}

int
idem_fsync_path(const char *path, struct idem_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", path);
	rc = fsync(fd);
	close(fd);
	return rc < 0 ? idem_error_set(err, IDEM_EXIT_ENV, "%s:", path) : 0;
}

struct fsync_job {
	const char *path;
	int error;
};

static void *
fsync_job(void *arg)
{
	struct fsync_job *j = arg;
	int fd = open(j->path, O_RDONLY | O_CLOEXEC);

	j->error = 0;
	if (fd < 0 || fsync(fd) < 0)
		j->error = errno;
	if (fd >= 0)
		close(fd);
	return NULL;
}

int
idem_fsync_paths(const char *const *paths, size_t n, struct idem_error *err)
{
	struct fsync_job jobs[IDEM_FSYNC_MAX];
	pthread_t threads[IDEM_FSYNC_MAX];
	int started[IDEM_FSYNC_MAX] = { 0 };
	size_t i;

	if (n > IDEM_FSYNC_MAX)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%zu files to sync at once, more than %d",
		    n, IDEM_FSYNC_MAX);
	for (i = 0; i < n; i++)
		jobs[i].path = paths[i];
	for (i = 1; i < n; i++)
		started[i] = pthread_create(&threads[i], NULL, fsync_job, &jobs[i]) == 0;
	if (n > 0)
		fsync_job(&jobs[0]);
	for (i = 1; i < n; i++) {
		if (started[i])
			pthread_join(threads[i], NULL);
		else
			fsync_job(&jobs[i]);
	}
	for (i = 0; i < n; i++)
		if (jobs[i].error != 0) {
			errno = jobs[i].error;
			return idem_error_set(err, IDEM_EXIT_ENV, "%s:", jobs[i].path);
		}
	return 0;
}

int
idem_write_file_atomic(const char *path, const char *data, size_t len,
		       struct idem_error *err)
{
	char tmp[PATH_MAX];
	int n;

	n = snprintf(tmp, sizeof(tmp), "%s.tmpXXXXXX", path);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: path too long", path);
	if (idem_write_temp_file(tmp, data, len, err) < 0)
		return -1;
	if (rename(tmp, path) < 0) {
		idem_error_set(err, IDEM_EXIT_ENV, "%s:", path);
		unlink(tmp);
		return -1;
	}
	return 0;
}

int
idem_make_temp_dir(char *out, size_t size, const char *prefix, mode_t mode,
		   struct idem_error *err)
{
	const char *tmp = getenv("TMPDIR");
	int n;

	if (tmp == NULL || *tmp == '\0')
		tmp = "/tmp";
	n = snprintf(out, size, "%s/%s.XXXXXX", tmp, prefix);
	if (n < 0 || (size_t)n >= size)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: path too long", tmp);
	if (mkdtemp(out) == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", out);
	if (chmod(out, mode) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", out);
	return 0;
}

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

void
idem_usage(const char *synopsis, int status)
{
	FILE *out = status == 0 ? stdout : stderr;

	fputs(synopsis, out);
	if (status == 0)
		idem_close_stdout();
	exit(status);
}

int
idem_watchdog(size_t max_groups, const char *const *leftovers, struct idem_error *err)
{
	int fds[2];
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "pipe:");
	if ((pid = fork()) < 0) {
		close(fds[0]);
		close(fds[1]);
		return idem_error_set(err, IDEM_EXIT_ENV, "fork:");
	}
	if (pid == 0) {
		pid_t *groups = calloc(max_groups + 1, sizeof(*groups)), g;
		size_t n = 0, i;
		ssize_t got;

		close(fds[1]);
		signal(SIGINT, SIG_IGN);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		setpgid(0, 0);
		while (groups && ((got = read(fds[0], &g, sizeof(g))) == (ssize_t)sizeof(g) ||
		    (got < 0 && errno == EINTR))) {
			if (got <= 0)
				continue;
			if (g > 0 && n < max_groups)
				groups[n++] = g;
			for (i = 0; g < 0 && i < n; i++)
				if (groups[i] == -g) {
					groups[i] = groups[--n];	/* a gone group frees its slot */
					break;
				}
		}
		for (i = 0; i < n; i++)
			if (groups[i] > 1)
				kill(-groups[i], SIGKILL);
		for (i = 0; leftovers != NULL && leftovers[i] != NULL; i++)
			remove(leftovers[i]);
		_exit(0);
	}
	close(fds[0]);
	return fds[1];
}

int
idem_sha256_file(const char *path, char out[65])
{
	unsigned char buf[65536], digest[crypto_hash_sha256_BYTES];
	crypto_hash_sha256_state st;
	ssize_t n;
	int fd, rc = -1;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	crypto_hash_sha256_init(&st);
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			goto out;
		}
		crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
	}
	crypto_hash_sha256_final(&st, digest);
	sodium_bin2hex(out, 65, digest, sizeof(digest));
	rc = 0;
out:
	close(fd);
	return rc;
}

const char *const idem_wait_causes[] = {
	"reviewer-queue", "sandbox-availability", "vendor-limit", "owner-approval", NULL
};
