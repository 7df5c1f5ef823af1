/* worker.c: the worker processes of kill-at */
#include <sys/prctl.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

static void
tell_watchdog(int watchdog_fd, pid_t group)
{
	if (write(watchdog_fd, &group, sizeof(group)) != (ssize_t)sizeof(group))
		idem_warn("the watchdog is gone: workers may outlive a killed kill-at");
}

int
idem_worker_start(struct idem_worker *w, char *const *command, int watchdog_fd,
		  idem_worker_setup *setup, void *ctx, struct idem_error *err)
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
idem_worker_read(struct idem_worker *w, int final, idem_worker_line *line, void *ctx)
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
idem_worker_signal(const struct idem_worker *w, int sig)
{
	if (w->pid > 0)
		kill(-w->pid, sig);
}

void
idem_worker_ended(struct idem_worker *w, int watchdog_fd)
{
	pid_t pid = w->pid;

	w->pid = 0;
	tell_watchdog(watchdog_fd, -pid);
}

int
idem_worker_of(const struct idem_worker *workers, int n, pid_t pid)
{
	pid_t group = getpgid(pid);
	int i;

	for (i = 0; i < n; i++)
		if (workers[i].pid > 0 && (workers[i].pid == pid || workers[i].pid == group))
			return i;
	return -1;
}
