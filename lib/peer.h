/* peer.h: the process at the client end of a database session (Linux) */
#ifndef IDEM_PEER_H
#define IDEM_PEER_H

#include <sys/types.h>

#include "util.h"

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

#endif
