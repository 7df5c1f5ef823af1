/* failpoint-kill: one kill point of kill-at(1) alone. Installs the kill
 * points for a table, arms one step for one business key, runs a command
 * in a process group of its own, and when the command's session is held
 * there, finds the process that owns the session, kills its group and
 * terminates the session, as kill-at does; with -r, it lets the session go
 * on first, and waits until it has ended by itself before it would
 * terminate it: the order that lets a dead client commit. With -a, the
 * point is armed, disarmed and armed again first, as a run arms a key's
 * point again for a later kill.
 * Prints "killed PID". Not installed. */
#include <sys/wait.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kill-at/failpoint.h"
#include "kill-at/peer.h"
#include "error.h"

static const char synopsis[] =
	"usage: failpoint-kill [-ar] -t table -c key-columns -q queue -s step -k business-key\n"
	"                      command [argument ...]\n";

/* Waits until the session's server process has ended on its own, as it
 * does once its work is done and it finds its client gone. */
static int
wait_gone(struct idem_failpoint *fp, int backend_pid, struct idem_error *err)
{
	struct idem_failpoint_session *s = NULL;
	size_t n, i, tries;
	int there = 1;

	for (tries = 0; there && tries < 1000; tries++) {
		free(s);
		s = NULL;
		if (idem_failpoint_sessions(fp, &s, &n, err) < 0)
			return -1;
		for (i = 0, there = 0; i < n; i++)
			there |= s[i].backend_pid == backend_pid;
		if (there)
			usleep(10000);
	}
	free(s);
	return 0;
}

int
main(int argc, char *argv[])
{
	const char *table = NULL, *columns = NULL, *queue = NULL, *step_name = NULL, *key = NULL;
	struct idem_failpoint_waiter *w = NULL;
	struct idem_failpoint *fp;
	struct idem_error err;
	int c, step, release_first = 0, rearm = 0, armed, status;
	size_t n = 0, tries;
	pid_t child, owner;
	struct idem_queue q;

	argv0 = "failpoint-kill";
	while ((c = getopt(argc, argv, "+art:c:q:s:k:")) != -1) {
		switch (c) {
		case 'a': rearm = 1; break;
		case 'r': release_first = 1; break;
		case 't': table = optarg; break;
		case 'c': columns = optarg; break;
		case 'q': queue = optarg; break;
		case 's': step_name = optarg; break;
		case 'k': key = optarg; break;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (!table || !columns || !queue || !step_name || !key || optind == argc ||
	    (step = idem_failpoint_step(step_name)) == 0)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (idem_queue_open(&q, "idem", queue, &err) < 0 ||
	    (fp = idem_failpoint_install(NULL, &q, table, columns, 1u << step, &err)) == NULL ||
	    (armed = idem_failpoint_arm(fp, step, key, &err)) < 0)
		idem_die_error(&err);
	if (rearm && (idem_failpoint_disarm(fp, armed, &err) < 0 ||
	    idem_failpoint_arm(fp, step, key, &err) < 0))
		idem_die_error(&err);
	if ((child = fork()) < 0)
		idem_die(IDEM_EXIT_ENV, "fork:");
	if (child == 0) {
		setpgid(0, 0);
		execvp(argv[optind], argv + optind);
		_exit(127);
	}
	setpgid(child, child);
	for (tries = 0; n == 0 && tries < 3000; tries++) {
		free(w);
		if (idem_failpoint_waiters(fp, &w, &n, &err) < 0)
			idem_die_error(&err);
		if (n == 0 && waitpid(child, &status, WNOHANG) == child)
			idem_die(IDEM_EXIT_FINDING, "the command ended before it reached %s", step_name);
		if (n == 0)
			usleep(10000);
	}
	if (n == 0)
		idem_die(IDEM_EXIT_FINDING, "no session reached %s in 30 seconds", step_name);
	if ((owner = idem_peer_process(w[0].session.backend_pid, w[0].session.client_port, &child, 1, &err)) < 0)
		idem_die_error(&err);
	if (owner == 0)
		idem_die(IDEM_EXIT_FINDING, "no process of the command holds session %d",
		    w[0].session.backend_pid);
	kill(-child, SIGKILL);
	waitpid(child, &status, 0);
	if (release_first && (idem_failpoint_pass(fp, w[0].slot, &err) < 0 ||
	    wait_gone(fp, w[0].session.backend_pid, &err) < 0))
		idem_die_error(&err);
	if (idem_failpoint_terminate(fp, w[0].session.backend_pid, &err) < 0 ||
	    idem_failpoint_remove(fp, &err) < 0)
		idem_die_error(&err);
	printf("killed %d\n", (int)owner);
	free(w);
	idem_queue_close(&q);
	idem_close_stdout();
	return 0;
}
