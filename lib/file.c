#include <sys/sendfile.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "file.h"
#include "parallel.h"

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

FILE *
idem_eopen_input(const char *path, const char **name)
{
	FILE *in;

	if (path == NULL || strcmp(path, "-") == 0) {
		*name = "stdin";
		return stdin;
	}
	if ((in = fopen(path, "r")) == NULL)
		idem_die(IDEM_EXIT_USAGE, "%s:", path);
	*name = path;
	return in;
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
	size_t i;

	if (n > IDEM_FSYNC_MAX)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%zu files to sync at once, more than %d",
		    n, IDEM_FSYNC_MAX);
	for (i = 0; i < n; i++)
		jobs[i].path = paths[i];
	idem_parallel(fsync_job, jobs, sizeof(jobs[0]), n);
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

void
idem_dir_of(const char *path, char *dir, size_t size)
{
	const char *slash = strrchr(path, '/');

	if (slash == NULL)
		snprintf(dir, size, ".");
	else if (slash == path)
		snprintf(dir, size, "/");
	else
		snprintf(dir, size, "%.*s", (int)(slash - path), path);
}
