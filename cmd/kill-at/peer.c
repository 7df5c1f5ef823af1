#include <sys/socket.h>

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer.h"

#define MAX_INODES 64

struct inodes {
	unsigned long v[MAX_INODES];
	size_t n;
};

static void
add_inode(struct inodes *set, unsigned long ino)
{
	if (set->n < MAX_INODES)
		set->v[set->n++] = ino;
}

static int
has_inode(const struct inodes *set, unsigned long ino)
{
	size_t i;

	for (i = 0; i < set->n; i++)
		if (set->v[i] == ino)
			return 1;
	return 0;
}

/* The socket inodes among a process's descriptors, into out; or, with
 * want, 1 when one of them is in want. -1 when they cannot be read. */
static int
socket_inodes(pid_t pid, struct inodes *out, const struct inodes *want)
{
	char path[64], link[64], *end;
	struct dirent *e;
	DIR *d;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		if ((n = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1)) < 0)
			continue;
		link[n] = '\0';
		if (strncmp(link, "socket:[", 8) == 0) {
			unsigned long ino = strtoul(link + 8, &end, 10);

			if (*end != ']')
				continue;
			if (want != NULL && has_inode(want, ino)) {
				closedir(d);
				return 1;
			}
			if (out != NULL)
				add_inode(out, ino);
		}
	}
	closedir(d);
	return 0;
}

/* The peer of a Unix socket, by the kernel's socket diagnostics; 0 when it
 * has none, -1 when the kernel cannot say. */
static long
unix_peer(int nl, unsigned long ino)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req req;
	} msg;
	union {
		char buf[8192];
		struct nlmsghdr align;
	} reply;
	struct nlmsghdr *h;
	ssize_t got;

	memset(&msg, 0, sizeof(msg));
	msg.nlh.nlmsg_len = sizeof(msg);
	msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	msg.nlh.nlmsg_flags = NLM_F_REQUEST;
	msg.req.sdiag_family = AF_UNIX;
	msg.req.udiag_states = ~0U;
	msg.req.udiag_ino = (unsigned)ino;
	msg.req.udiag_show = UDIAG_SHOW_PEER;
	msg.req.udiag_cookie[0] = INET_DIAG_NOCOOKIE;
	msg.req.udiag_cookie[1] = INET_DIAG_NOCOOKIE;
	if (send(nl, &msg, sizeof(msg), 0) != (ssize_t)sizeof(msg))
		return -1;
	if ((got = recv(nl, reply.buf, sizeof(reply.buf), 0)) < 0)
		return -1;
	for (h = &reply.align; NLMSG_OK(h, (size_t)got); h = NLMSG_NEXT(h, got)) {
		struct unix_diag_msg *m;
		struct rtattr *a;
		int len;

		if (h->nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = NLMSG_DATA(h);

			/* a socket closed meanwhile has no peer; anything else is
			 * a kernel without unix_diag */
			return e->error == -ENOENT ? 0 : -1;
		}
		if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
			continue;
		m = NLMSG_DATA(h);
		len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
		for (a = (struct rtattr *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len))
			if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= (int)sizeof(unsigned))
				return (long)*(unsigned *)RTA_DATA(a);
		return 0;
	}
	return 0;
}

/* The client ends of a server process's Unix socket connections. */
static int
unix_client_inodes(pid_t backend_pid, struct inodes *out, struct idem_error *err)
{
	struct inodes server = { .n = 0 };
	size_t i;
	long peer;
	int nl;

	if (socket_inodes(backend_pid, &server, NULL) < 0) {
		/* a session that ended since it was listed holds no socket */
		if (errno == ENOENT)
			return 0;
		return idem_error_set(err, IDEM_EXIT_ENV,
		    "/proc/%d/fd: %s: cannot see which process holds the session's socket",
		    (int)backend_pid, strerror(errno));
	}
	if ((nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "socket diagnostics (NETLINK_SOCK_DIAG): %s",
		    strerror(errno));
	for (i = 0; i < server.n; i++) {
		if ((peer = unix_peer(nl, server.v[i])) < 0) {
			close(nl);
			return idem_error_set(err, IDEM_EXIT_ENV,
			    "socket diagnostics (unix_diag): no answer for socket %lu", server.v[i]);
		}
		if (peer > 0)
			add_inode(out, (unsigned long)peer);
	}
	close(nl);
	return 0;
}

/* The sockets whose local TCP port is port, from /proc/net/tcp and tcp6. */
static void
tcp_inodes(int port, struct inodes *out)
{
	static const char *const files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	char line[512], local[64], remote[64];
	unsigned long ino;
	size_t i;
	FILE *f;

	for (i = 0; i < 2; i++) {
		if ((f = fopen(files[i], "re")) == NULL)
			continue;
		while (fgets(line, sizeof(line), f) != NULL) {
			char *colon;

			if (sscanf(line, " %*s %63s %63s %*s %*s %*s %*s %*s %*s %lu", local, remote,
			    &ino) != 3 || (colon = strrchr(local, ':')) == NULL)
				continue;
			if (strtol(colon + 1, NULL, 16) == port && ino != 0)
				add_inode(out, ino);
		}
		fclose(f);
	}
}

/* The process group of pid, from /proc/PID/stat; -1 when it is gone. */
static pid_t
group_of(pid_t pid)
{
	char path[64], buf[1024], *p;
	size_t got;
	FILE *f;
	int pgrp;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	got = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[got] = '\0';
	/* the command name may hold spaces and parentheses: skip to its end */
	if ((p = strrchr(buf, ')')) == NULL || sscanf(p + 1, " %*c %*d %d", &pgrp) != 1)
		return -1;
	return (pid_t)pgrp;
}

pid_t
idem_peer_process(pid_t backend_pid, int client_port, const pid_t *groups, size_t ngroups,
		  struct idem_error *err)
{
	struct inodes clients = { .n = 0 };
	struct dirent *e;
	pid_t found = 0;
	DIR *d;

	if (client_port > 0)
		tcp_inodes(client_port, &clients);
	else if (unix_client_inodes(backend_pid, &clients, err) < 0)
		return -1;
	if (clients.n == 0)
		return 0;
	if ((d = opendir("/proc")) == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "/proc: %s", strerror(errno));
	while (found == 0 && (e = readdir(d)) != NULL) {
		pid_t pid, group;
		size_t i;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid = (pid_t)strtol(e->d_name, NULL, 10);
		if ((group = group_of(pid)) <= 0)
			continue;
		for (i = 0; i < ngroups && groups[i] != group; i++)
			;
		if (i < ngroups && socket_inodes(pid, NULL, &clients) == 1)
			found = pid;
	}
	closedir(d);
	return found;
}

struct idem_peer_session *
idem_peer_session(struct idem_peer_sessions *ss, int backend_pid, int client_port,
		  long long start_us, const struct child *workers, int n)
{
	pid_t *groups, pid = 0;
	struct idem_error err;
	size_t at, ngroups = 0;
	char key[48];
	int i;

	snprintf(key, sizeof(key), "%d %lld", backend_pid, start_us);
	if ((at = idem_map_get(&ss->index, key)) != IDEM_MAP_NONE)
		return &ss->s[at];
	groups = idem_ereallocarray(NULL, (size_t)n + 1, sizeof(*groups));
	for (i = 0; i < n; i++)
		if (workers[i].pid > 0)
			groups[ngroups++] = workers[i].pid;
	if (!ss->failed &&
	    (pid = idem_peer_process(backend_pid, client_port, groups, ngroups, &err)) < 0) {
		idem_warn("%s; a kill at a database step terminates the session only", err.text);
		ss->failed = 1;
		pid = 0;
	}
	free(groups);
	ss->s = idem_ereallocarray(ss->s, ss->n + 1, sizeof(*ss->s));
	ss->s[ss->n] = (struct idem_peer_session){ backend_pid,
	    pid > 0 ? child_of(workers, n, pid) : -1, start_us, pid };
	idem_map_put(&ss->index, key, ss->n);
	return &ss->s[ss->n++];
}

int *
idem_peer_backends(const struct idem_peer_sessions *ss, int worker, size_t *n)
{
	int *pids = idem_ereallocarray(NULL, ss->n + 1, sizeof(*pids));
	size_t i;

	*n = 0;
	for (i = 0; worker >= 0 && i < ss->n; i++)
		if (ss->s[i].worker == worker)
			pids[(*n)++] = ss->s[i].backend_pid;
	return pids;
}

void
idem_peer_sessions_free(struct idem_peer_sessions *ss)
{
	free(ss->s);
	idem_map_free(&ss->index);
	memset(ss, 0, sizeof(*ss));
}
