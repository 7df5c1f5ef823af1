#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "step.h"
#include "tsv.h"
#include "file.h"

static int step_fd = -1;

/* The plan: the steps the controller wants to hear; read on the first step */
static struct idem_map plan;
static enum { PLAN_UNREAD, PLAN_READ, PLAN_NONE } plan_state;

int
idem_step_plan_parse(struct idem_map *m, const char *text, size_t len)
{
	const char *line = text, *end = text + len, *nl, *tab;
	char *key;

	for (; line < end; line = nl + 1) {
		if ((nl = memchr(line, '\n', (size_t)(end - line))) == NULL)
			return -1;
		tab = memchr(line, '\t', (size_t)(nl - line));
		if (tab == NULL || tab == line || tab + 1 == nl ||
		    memchr(tab + 1, '\t', (size_t)(nl - tab - 1)) != NULL ||
		    memchr(line, '\0', (size_t)(nl - line)) != NULL)
			return -1;
		key = idem_estrndup(line, (size_t)(nl - line));
		idem_map_put(m, key, 1);
		free(key);
	}
	return 0;
}

/* A plan that cannot be read is no plan: every step is sent, which is
 * always right, only slower. */
static void
read_plan(void)
{
	const char *path = getenv("IDEM_STEP_PLAN");
	struct idem_error err;
	size_t len;
	char *text;

	plan_state = PLAN_NONE;
	if (path == NULL || *path == '\0' || (text = idem_read_file(path, &len, &err)) == NULL)
		return;
	idem_map_init(&plan);
	if (idem_step_plan_parse(&plan, text, len) == 0)
		plan_state = PLAN_READ;
	else
		idem_map_free(&plan);
	free(text);
}

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
	if (plan_state == PLAN_UNREAD)
		read_plan();
	n = idem_tsv_escape(name);
	j = idem_tsv_escape(job_id);
	if (plan_state == PLAN_READ) {
		if ((len = asprintf(&line, "%s\t%s", n, j)) < 0) {
			line = NULL;
			goto out;
		}
		if (idem_map_get(&plan, line) == IDEM_MAP_NONE) {
			rc = 0;
			goto out;
		}
		free(line);
		line = NULL;
	}
	if (step_fd < 0 && (step_fd = step_connect(path)) < 0)
		goto out;
	if ((len = asprintf(&line, "step\t%s\t%s\t%lld\n", n, j, attempt)) < 0) {
		line = NULL;
		goto out;
	}
	if (write_all(step_fd, line, (size_t)len) < 0)
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
	s->path[0] = s->plan[0] = '\0';
	if (idem_make_temp_dir(s->dir, sizeof(s->dir), "kill-at", 0700, err) < 0)
		return -1;
	snprintf(s->path, sizeof(s->path), "%s/step.sock", s->dir);
	strcpy(addr.sun_path, s->path);
	if ((s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
	    bind(s->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(s->fd, 64) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", s->path);
	return 0;
}

int
idem_step_plan_write(struct idem_step_server *s, const char *const *names,
		     const char *const *job_ids, size_t n, struct idem_error *err)
{
	struct idem_map seen;
	char path[sizeof(s->plan)], *line, *a, *b;
	FILE *f;
	size_t i;

	snprintf(path, sizeof(path), "%s/plan", s->dir);
	if ((f = fopen(path, "wx")) == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", path);
	snprintf(s->plan, sizeof(s->plan), "%s", path);
	idem_map_init(&seen);
	for (i = 0; i < n; i++) {
		a = idem_tsv_escape(names[i]);
		b = idem_tsv_escape(job_ids[i]);
		if (asprintf(&line, "%s\t%s", a, b) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if (idem_map_put(&seen, line, i) == IDEM_MAP_NONE)
			fprintf(f, "%s\n", line);
		free(line);
		free(a);
		free(b);
	}
	idem_map_free(&seen);
	if ((ferror(f) | fclose(f)) != 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", path);
	return 0;
}

void
idem_step_unlisten(struct idem_step_server *s)
{
	if (s->plan[0])
		unlink(s->plan);
	if (s->path[0])
		unlink(s->path);
	if (s->dir[0])
		rmdir(s->dir);
	s->plan[0] = s->path[0] = s->dir[0] = '\0';
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
