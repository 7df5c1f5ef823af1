#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "record.h"

int
idem_record_wilson(long long k, long long n, double *low, double *high)
{
	/* the 97.5th percentile of the standard normal distribution */
	const double z = 1.959963984540054, z2 = z * z;
	double p, denominator, centre, half;

	if (n < 1 || k < 0 || k > n)
		return -1;
	p = (double)k / (double)n;
	denominator = 1.0 + z2 / (double)n;
	centre = (p + z2 / (2.0 * (double)n)) / denominator;
	half = z / denominator * sqrt(p * (1.0 - p) / (double)n + z2 / (4.0 * (double)n * (double)n));
	*low = k == 0 ? 0.0 : fmax(0.0, centre - half);
	*high = k == n ? 1.0 : fmin(1.0, centre + half);
	return 0;
}

static ssize_t
gz_read(void *cookie, char *buf, size_t size)
{
	int n = gzread(cookie, buf, size > INT_MAX ? INT_MAX : (unsigned)size);

	if (n < 0)
		errno = EIO;
	return n;
}

static ssize_t
gz_write(void *cookie, const char *buf, size_t size)
{
	int n = size == 0 ? 0 : gzwrite(cookie, buf, size > INT_MAX ? INT_MAX : (unsigned)size);

	if (size > 0 && n <= 0) {
		errno = errno ? errno : EIO;
		return -1;
	}
	return n;
}

static int
gz_close(void *cookie)
{
	return gzclose(cookie) == Z_OK ? 0 : (errno = errno ? errno : EIO, -1);
}

FILE *
idem_record_file_open(const char *path, const char *mode, struct idem_error *err)
{
	int writing = mode[0] == 'w';
	int fd = writing ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) :
	    open(path, O_RDONLY | O_CLOEXEC);
	cookie_io_functions_t io = { gz_read, gz_write, NULL, gz_close };
	gzFile gz;
	FILE *f;

	if (fd < 0) {
		idem_error_set(err, writing ? IDEM_EXIT_ENV : IDEM_EXIT_USAGE, "%s: %s", path,
		    strerror(errno));
		return NULL;
	}
	if ((gz = gzdopen(fd, writing ? "wb6" : "rb")) == NULL) {
		close(fd);
		idem_error_set(err, IDEM_EXIT_ENV, "%s: cannot open with zlib", path);
		return NULL;
	}
	gzbuffer(gz, 1 << 17);
	if ((f = fopencookie(gz, writing ? "w" : "r", io)) == NULL) {
		gzclose(gz);
		idem_error_set(err, IDEM_EXIT_ENV, "%s: %s", path, strerror(errno));
		return NULL;
	}
	return f;
}

const char *const idem_wait_causes[] = {
	"reviewer-queue", "sandbox-availability", "vendor-limit", "owner-approval", NULL
};
