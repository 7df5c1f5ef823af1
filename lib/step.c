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

int
idem_step_listen(struct idem_step_server *s, struct idem_error *err)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };

	s->fd = -1;
	s->path[0] = '\0';
	if (idem_make_temp_dir(s->dir, sizeof(s->dir), "kill-at", 0700, err) < 0)
		return -1;
	snprintf(s->path, sizeof(s->path), "%s/step.sock", s->dir);
	strcpy(addr.sun_path, s->path);
	if ((s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
	    bind(s->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(s->fd, 64) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", s->path);
	return 0;
}

void
idem_step_unlisten(struct idem_step_server *s)
{
	if (s->path[0])
		unlink(s->path);
	if (s->dir[0])
		rmdir(s->dir);
	s->path[0] = s->dir[0] = '\0';
}

int
idem_step_accept(struct idem_step_server *s, struct idem_step_peer *p)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		close(fd);
		return -1;
	}
	p->fd = fd;
	p->pid = cred.pid;
	p->len = 0;
	return 0;
}

static void
hang_up(struct idem_step_peer *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
}

int
idem_step_read(struct idem_step_peer *p)
{
	ssize_t got = p->fd < 0 ? 0 : read(p->fd, p->buf + p->len, sizeof(p->buf) - p->len - 1);

	if (got < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (got <= 0) {
		hang_up(p);
		return -1;
	}
	p->len += (size_t)got;
	return 0;
}

int
idem_step_next(struct idem_step_peer *p, struct idem_step_line *l)
{
	char *nl = p->fd >= 0 ? memchr(p->buf, '\n', p->len) : NULL, *fields[4], *q = p->line, *end;
	size_t used, n = 0, len;

	if (nl == NULL) {
		if (p->len < sizeof(p->buf) - 1)
			return 0;
		hang_up(p);
		return -1;
	}
	used = (size_t)(nl - p->buf) + 1;
	memcpy(p->line, p->buf, used - 1);
	p->line[used - 1] = '\0';
	memmove(p->buf, p->buf + used, p->len - used);
	p->len -= used;
	l->name = l->job_id = NULL;
	l->attempt = 0;
	l->problem = NULL;
	while (n < 4) {
		fields[n++] = q;
		if ((q = strchr(q, '\t')) == NULL)
			break;
		*q++ = '\0';
	}
	if (n != 4 || strcmp(fields[0], "step") != 0 || q != NULL) {
		l->problem = "not a step line";
		return 1;
	}
	len = strlen(fields[1]);
	if (idem_tsv_unescape(fields[1], &len) != 0 ||
	    (len = strlen(fields[2]), idem_tsv_unescape(fields[2], &len)) != 0) {
		l->problem = "bad escape in a step line";
		return 1;
	}
	l->name = fields[1];
	l->job_id = fields[2];
	l->attempt = strtoll(fields[3], &end, 10);
	return 1;
}

void
idem_step_go(struct idem_step_peer *p)
{
	if (p->fd >= 0 && send(p->fd, "go\n", 3, MSG_NOSIGNAL) != 3)
		hang_up(p);
}
