/* child.c: the worker processes of kill-at, and the watchdog that kills
 * them however kill-at ends */
#include <sys/prctl.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "child.h"

static void
tell_watchdog(int watchdog_fd, pid_t group)
{
	if (write(watchdog_fd, &group, sizeof(group)) != (ssize_t)sizeof(group))
		idem_warn("the watchdog is gone: workers may outlive a killed kill-at");
}

int
child_start(struct child *w, char *const *command, int watchdog_fd,
		  child_setup *setup, void *ctx, struct idem_error *err)
{
	int out[2];
	pid_t parent = getpid(), pid;

	if (pipe2(out, O_CLOEXEC) < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "pipe:");
	fflush(NULL);
	if ((pid = fork()) < 0) {
		idem_error_set(err, IDEM_EXIT_ENV, "fork:");
		close(out[0]);
		close(out[1]);
		return -1;
	}
	if (pid == 0) {
		sigset_t none;
		int devnull = open("/dev/null", O_RDONLY);

		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(out[1], 1);
		dup2(out[1], 2);
		setup(ctx);
		execvp(command[0], command);
		fprintf(stderr, "%s: %s: %s\n", argv0, command[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	close(out[1]);
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	tell_watchdog(watchdog_fd, pid);
	w->pid = pid;
	w->out = out[0];
	w->killed = 0;
	return 0;
}

void
child_read(struct child *w, int final, child_line *line, void *ctx)
{
	char buf[8192];
	ssize_t got;
	char *start, *nl;

	while (w->out >= 0 && (got = read(w->out, buf, sizeof(buf))) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN && !final)
				return;
			break;
		}
		w->partial = idem_erealloc(w->partial, w->partial_len + (size_t)got + 1);
		memcpy(w->partial + w->partial_len, buf, (size_t)got);
		w->partial_len += (size_t)got;
		start = w->partial;
		while ((nl = memchr(start, '\n', w->partial_len - (size_t)(start - w->partial))) != NULL) {
			line(ctx, start, (size_t)(nl - start));
			start = nl + 1;
		}
		w->partial_len -= (size_t)(start - w->partial);
		memmove(w->partial, start, w->partial_len);
	}
	if (w->partial_len > 0)
		line(ctx, w->partial, w->partial_len);
	w->partial_len = 0;
	if (w->out >= 0)
		close(w->out);
	w->out = -1;
}

void
child_signal(const struct child *w, int sig)
{
	if (w->pid > 0)
		kill(-w->pid, sig);
}

void
child_ended(struct child *w, int watchdog_fd)
{
	pid_t pid = w->pid;

	w->pid = 0;
	tell_watchdog(watchdog_fd, -pid);
}

int
child_of(const struct child *workers, int n, pid_t pid)
{
	pid_t group = getpgid(pid);
	int i;

	for (i = 0; i < n; i++)
		if (workers[i].pid > 0 && (workers[i].pid == pid || workers[i].pid == group))
			return i;
	return -1;
}

int
child_watchdog(size_t max_groups, const char *const *leftovers, struct idem_error *err)
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
