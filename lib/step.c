#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "step.h"
#include "tsv.h"

static int step_fd = -1;

static int
step_connect(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(addr.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int saved = errno;

		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

static int
write_all(int fd, const char *buf, size_t len)
{
	ssize_t n;

	while (len > 0) {
		n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int
idem_step(const char *name, const char *job_id, long long attempt)
{
	const char *path = getenv("IDEM_STEP_SOCK");
	char *line = NULL, *n = NULL, *j = NULL, reply[3];
	size_t got = 0;
	ssize_t r;
	int rc = -1, len;

	if (path == NULL || *path == '\0')
		return 0;
	if (step_fd < 0 && (step_fd = step_connect(path)) < 0)
		return -1;
	n = idem_tsv_escape(name);
	j = idem_tsv_escape(job_id);
	len = asprintf(&line, "step\t%s\t%s\t%lld\n", n, j, attempt);
	if (len < 0 || write_all(step_fd, line, (size_t)len) < 0)
		goto out;
	while (got < sizeof(reply)) {
		r = read(step_fd, reply + got, sizeof(reply) - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			errno = r == 0 ? ECONNRESET : errno;
			goto out;
		}
		got += (size_t)r;
	}
	if (memcmp(reply, "go\n", 3) != 0) {
		errno = EPROTO;
		goto out;
	}
	rc = 0;
out:
	if (rc < 0)
		idem_step_close();
	free(line);
	free(n);
	free(j);
	return rc;
}

void
idem_step_close(void)
{
	if (step_fd >= 0)
		close(step_fd);
	step_fd = -1;
}
