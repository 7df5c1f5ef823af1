/* peer.h: the process at the client end of a database session (Linux) */
#ifndef IDEM_PEER_H
#define IDEM_PEER_H

#include <sys/types.h>

#include "map.h"
#include "error.h"
#include "child.h"

/*
 * The process, among those whose process group is one of groups, that
 * holds the client end of the connection of the server process
 * backend_pid. client_port is pg_stat_activity.client_port: -1 (or 0) for
 * a Unix socket, found through the server process's descriptors in /proc
 * and the kernel's socket diagnostics (NETLINK_SOCK_DIAG, UNIX_DIAG_PEER);
 * a TCP port otherwise, found in /proc/net/tcp and /proc/net/tcp6.
 * Returns the pid, 0 when no such process holds it (or the connection is
 * gone), -1 with err set when the connection cannot be looked at (the
 * server's /proc is not readable, no socket diagnostics).
 */
pid_t idem_peer_process(pid_t backend_pid, int client_port, const pid_t *groups, size_t ngroups,
			struct idem_error *err);

/* The client sessions of the database a run has seen, each with the
 * worker process that owns it, looked up once. */
struct idem_peer_session {
	int backend_pid;
	int worker;			/* the worker's index, or -1 */
	long long start;		/* the backend's start, in microseconds */
	pid_t pid;			/* the process at the client end, or 0 */
};

struct idem_peer_sessions {
	struct idem_peer_session *s;
	size_t n;
	struct idem_map index;		/* "pid start": its session */
	int failed;			/* a lookup failed: none is tried again */
};

/* The session of the backend backend_pid started at start_us, looked up
 * among the process groups of the n workers the first time it is seen. A
 * lookup that cannot be made is warned about once, and the sessions then
 * have no worker. The pointer is good until the next call. */
struct idem_peer_session *idem_peer_session(struct idem_peer_sessions *ss, int backend_pid,
					    int client_port, long long start_us,
					    const struct child *workers, int n);

/* The backends of a worker's sessions (none for -1): an array the caller
 * frees, of *n pids. */
int *idem_peer_backends(const struct idem_peer_sessions *ss, int worker, size_t *n);

void idem_peer_sessions_free(struct idem_peer_sessions *ss);

#endif
