/* child.c: rehearse's programs as children in process groups of their
 * own, run and stopped together (child.h) */
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "text.h"
#include "child.h"

#define GRACE_MS 1000		/* from SIGTERM (or the forwarded signal) to SIGKILL */
#define SETTLE_MS 300		/* for the stages before a failed one to end */
#define LEFT_MS 5000		/* for the processes of the run to end, at exit */

static const char *keep_dir;	/* where each child's standard error is kept, or NULL */
static int interrupted;		/* the first of SIGINT, SIGTERM, SIGHUP that came */
static int signal_fd = -1;

static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads the signals that came. SIGCHLD only wakes the loop; the first of
 * the others is the run's interrupt. Returns the last of them, or 0. */
static int
take_signals(void)
{
	struct signalfd_siginfo si;
	int sig = 0;

	while (read(signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		if (si.ssi_signo != SIGCHLD) {
			sig = (int)si.ssi_signo;
			if (!interrupted)
				interrupted = sig;
		}
	return sig;
}

static void
write_all(int fd, const char *p, size_t len)
{
	ssize_t n;

	while (len > 0) {
		if ((n = write(fd, p, len)) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		p += n;
		len -= (size_t)n;
	}
}

/* A whole line of a child's standard error: passed on, and kept. */
static void
child_line(struct child *c, const char *line, size_t len)
{
	size_t word = strcspn(c->command, " "), base = word;

	write_all(2, line, len);
	write_all(2, "\n", 1);
	if (c->log_fd >= 0) {
		write_all(c->log_fd, line, len);
		write_all(c->log_fd, "\n", 1);
	}
	if (len == 0)
		return;
	snprintf(c->last, sizeof(c->last), "%.*s", (int)len, line);
	while (base > 0 && c->command[base - 1] != '/')
		base--;
	word -= base;
	if (len > word + 1 && memcmp(line, c->command + base, word) == 0 &&
	    line[word] == ':' && line[word + 1] == ' ')
		memcpy(c->message, c->last, sizeof(c->message));
}

/* Passes on what a child wrote on standard error. At the end (final), or
 * at end of file, its last unended line too, and the pipe is closed: a
 * process it left behind may hold the pipe, and is not waited for. */
static void
relay(struct child *c, int final)
{
	char buf[4096];
	ssize_t n, i;

	while (c->err_fd >= 0) {
		n = read(c->err_fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 && (n == 0 || errno != EAGAIN || final)) {
			if (c->partial_len > 0)
				child_line(c, c->partial, c->partial_len);
			c->partial_len = 0;
			close(c->err_fd);
			c->err_fd = -1;
			if (c->log_fd >= 0)
				close(c->log_fd);
			c->log_fd = -1;
			return;
		}
		if (n < 0)
			return;
		for (i = 0; i < n; i++) {
			if (buf[i] != '\n' && c->partial_len < sizeof(c->partial)) {
				c->partial[c->partial_len++] = buf[i];
				continue;
			}
			child_line(c, c->partial, c->partial_len);
			c->partial_len = 0;
			if (buf[i] != '\n')
				c->partial[c->partial_len++] = buf[i];
		}
		if (!final)
			return;
	}
}

/* In the child: its own process group, the signals as a program expects
 * them, and the command run by bash. */
static void __attribute__((noreturn))
exec_child(const char *text, int in_fd, int out_fd, int err_fd)
{
	static const int signals[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD };
	int fds[3] = { in_fd, out_fd, err_fd }, fd;
	sigset_t none;
	size_t i;

	setpgid(0, 0);
	/* a signal sent to rehearse's group before the setpgid was meant for
	 * rehearse: ignoring it discards it */
	for (i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
		signal(signals[i], SIG_IGN);
		signal(signals[i], SIG_DFL);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* copies above 2 first: one of them may be 0, 1 or 2 already, when
	 * rehearse's own were closed */
	for (fd = 0; fd < 3; fd++)
		if ((fds[fd] = fcntl(fds[fd], F_DUPFD_CLOEXEC, 3)) < 0)
			_exit(126);
	for (fd = 0; fd < 3; fd++)
		if (dup2(fds[fd], fd) < 0)
			_exit(126);
	execl("/bin/bash", "bash", "-c", text, (char *)NULL);
	_exit(127);
}

void
child_keep_logs(const char *dir)
{
	keep_dir = dir;
}

/* The path of a file of keep_dir for a child: its name's words joined by
 * one '-', what is not a letter, digit or '.' left out, then suffix. */
static void
kept_path(char *path, size_t size, const char *name, const char *suffix)
{
	char file[80];
	size_t i, n = 0;

	for (i = 0; name[i] != '\0' && n < sizeof(file) - 1; i++)
		if (isalnum((unsigned char)name[i]) || name[i] == '.')
			file[n++] = name[i];
		else if ((name[i] == ' ' || name[i] == '-') && n > 0 && file[n - 1] != '-')
			file[n++] = '-';
	file[n] = '\0';
	snprintf(path, size, "%s/%s%s", keep_dir, n ? file : "child", suffix);
}

/* The file that keeps a child's standard error, or -1. */
static int
open_log(const char *name)
{
	char path[512];
	int fd;

	if (keep_dir == NULL)
		return -1;
	kept_path(path, sizeof(path), name, ".stderr");
	if ((fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0)
		idem_warn("%s:", path);
	return fd;
}

/* The shell text a child runs: its command; with keep_dir, a child that
 * reads the one before it keeps what it read in NAME.in.tsv, through a
 * tee in its process group. */
static char *
shell_text(const struct child *c, int reads_stream)
{
	char path[512], *quoted, *text;
	int rc;

	if (keep_dir == NULL || !reads_stream) {
		rc = asprintf(&text, "exec %s", c->command);
	} else {
		kept_path(path, sizeof(path), c->name, ".in.tsv");
		quoted = idem_shell_quote(path);
		rc = asprintf(&text, "exec %s < <(exec tee -- %s)", c->command, quoted);
		free(quoted);
	}
	if (rc < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	return text;
}

/* Starts the children, each one's standard output into the next one's
 * input: the first reads /dev/null, the last writes to out_fd, or with
 * its standard error when out_fd is -1. */
static void
start_children(struct child *c, int n, int out_fd)
{
	int in_fd, next_in, stdout_fd, pipe_fds[2], err_fds[2], i;
	char *text;
	pid_t pid;

	if ((in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		idem_die(IDEM_EXIT_ENV, "/dev/null:");
	for (i = 0; i < n; i++) {
		next_in = -1;
		stdout_fd = out_fd;
		if (i < n - 1) {
			if (pipe2(pipe_fds, O_CLOEXEC) < 0)
				idem_die(IDEM_EXIT_ENV, "pipe:");
			stdout_fd = pipe_fds[1];
			next_in = pipe_fds[0];
		}
		if (pipe2(err_fds, O_CLOEXEC) < 0)
			idem_die(IDEM_EXIT_ENV, "pipe:");
		text = shell_text(&c[i], i > 0);
		fflush(NULL);
		if ((pid = fork()) < 0)
			idem_die(IDEM_EXIT_ENV, "fork:");
		if (pid == 0)
			exec_child(text, in_fd, stdout_fd >= 0 ? stdout_fd : err_fds[1], err_fds[1]);
		free(text);
		setpgid(pid, pid);
		close(err_fds[1]);
		fcntl(err_fds[0], F_SETFL, O_NONBLOCK);
		c[i].pid = pid;
		c[i].ended = c[i].after_signal = 0;
		c[i].err_fd = err_fds[0];
		c[i].log_fd = open_log(c[i].name);
		c[i].partial_len = 0;
		c[i].last[0] = c[i].message[0] = '\0';
		close(in_fd);
		if (i < n - 1)
			close(stdout_fd);
		in_fd = next_in;
	}
}

/* Reaps whatever ended: the children, and processes adopted as their
 * subreaper. */
static void
reap(struct child *c, int n, int signalled)
{
	pid_t pid;
	int status, i;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		for (i = 0; i < n; i++)
			if (!c[i].ended && c[i].pid == pid) {
				c[i].ended = 1;
				c[i].status = status;
				c[i].after_signal = signalled;
			}
}

static void
signal_children(const struct child *c, int n, int sig)
{
	int i;

	for (i = 0; i < n; i++)
		if (!c[i].ended)
			kill(-c[i].pid, sig);
}

static int
running(const struct child *c, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (!c[i].ended)
			return 1;
	return 0;
}

static int
failed(const struct child *c, int may_find)
{
	if (!c->ended)
		return 0;
	if (WIFSIGNALED(c->status))
		return 1;
	return WEXITSTATUS(c->status) != 0 &&
	    !(may_find && WEXITSTATUS(c->status) == IDEM_EXIT_FINDING);
}

/* Failed of itself: before rehearse signalled it, and not of SIGPIPE, which
 * is what a stage gets when the one after it is gone. A stage that ends
 * because its input ended early fails after the stage before it. */
static int
failed_of_itself(const struct child *c, int may_find)
{
	return failed(c, may_find) && !c->after_signal &&
	    !(WIFSIGNALED(c->status) && WTERMSIG(c->status) == SIGPIPE);
}

/* The child whose failure ended the run: the first in the pipeline that
 * failed of itself, else the first that failed; -1 for none. */
static int
cause(const struct child *c, int n, int last_may_find)
{
	int i;

	for (i = 0; i < n; i++)
		if (failed_of_itself(&c[i], c[i].may_find || (last_may_find && i == n - 1)))
			return i;
	for (i = 0; i < n; i++)
		if (failed(&c[i], c[i].may_find || (last_may_find && i == n - 1)))
			return i;
	return -1;
}

/* Whether a child failed and the run must stop: once every child before
 * the one to name has ended, or SETTLE_MS after, so that the first to fail
 * in the pipeline is the one named. */
static int
must_stop(const struct child *c, int n, int last_may_find, long long *settle_until)
{
	int first = cause(c, n, last_may_find), i;

	if (first < 0)
		return 0;
	if (*settle_until < 0)
		*settle_until = now_ms() + SETTLE_MS;
	for (i = 0; i < first; i++)
		if (!c[i].ended)
			return now_ms() >= *settle_until;
	return 1;
}

int
child_run_pipeline(struct child *c, int n, int out_fd, enum on_interrupt mode,
		   int last_may_find)
{
	struct pollfd fds[1 + CHILD_MAX];
	int owner[1 + CHILD_MAX], nfds, i, sig, signalled = 0, timeout;
	long long settle_until = -1, kill_at = -1, now;

	take_signals();
	if (interrupted && mode != CHILD_HOLD)
		return -1;
	start_children(c, n, out_fd);
	while (running(c, n)) {
		nfds = 0;
		fds[nfds++] = (struct pollfd){ .fd = signal_fd, .events = POLLIN };
		for (i = 0; i < n; i++)
			if (c[i].err_fd >= 0) {
				owner[nfds] = i;
				fds[nfds++] = (struct pollfd){ .fd = c[i].err_fd, .events = POLLIN };
			}
		now = now_ms();
		timeout = -1;
		if (settle_until >= 0 && !signalled)
			timeout = settle_until > now ? (int)(settle_until - now) : 0;
		if (kill_at >= 0 && (timeout < 0 || kill_at - now < timeout))
			timeout = kill_at > now ? (int)(kill_at - now) : 0;
		if (poll(fds, (nfds_t)nfds, timeout) < 0 && errno != EINTR)
			idem_die(IDEM_EXIT_ENV, "poll:");
		for (i = 1; i < nfds; i++)
			if (fds[i].revents)
				relay(&c[owner[i]], 0);
		if ((sig = take_signals()) != 0 && mode != CHILD_HOLD) {
			signal_children(c, n, sig);
			signalled = 1;
			if (mode == CHILD_STOP && kill_at < 0)
				kill_at = now_ms() + GRACE_MS;
		}
		reap(c, n, signalled);
		if (!signalled && must_stop(c, n, last_may_find, &settle_until)) {
			signal_children(c, n, SIGTERM);
			signalled = 1;
			if (mode == CHILD_STOP)
				kill_at = now_ms() + GRACE_MS;
		}
		if (kill_at >= 0 && now_ms() >= kill_at) {
			signal_children(c, n, SIGKILL);
			kill_at = -1;
		}
	}
	for (i = 0; i < n; i++)
		relay(&c[i], 1);
	return cause(c, n, last_may_find);
}

int
child_status(const struct child *c)
{
	return WIFEXITED(c->status) ? WEXITSTATUS(c->status) : 128 + WTERMSIG(c->status);
}

int
child_report_failure(const struct child *c)
{
	const char *word = c->message[0] ? c->message : c->last;
	char how[48];

	if (WIFEXITED(c->status))
		snprintf(how, sizeof(how), "exit %d", WEXITSTATUS(c->status));
	else
		snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(c->status));
	fprintf(stderr, "rehearse: %s failed (%s)%s%s\n", c->name, how, *word ? ": " : "", word);
	return child_status(c);
}

int
child_run(struct child *c, const char *name, const char *command, int out_fd,
	  enum on_interrupt mode)
{
	memset(c, 0, sizeof(*c));
	c->name = name;
	c->command = command;
	return child_run_pipeline(c, 1, out_fd, mode, 0);
}

/* Sends SIGKILL to the children that are left; as their subreaper, these
 * are whatever this run started and did not end. */
static void
kill_children(void)
{
	char path[64], buf[4096], *p, *end;
	ssize_t len;
	long pid;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[len > 0 ? len : 0] = '\0';
	for (p = buf; (pid = strtol(p, &end, 10)) > 0; p = end) {
		idem_warn("process %ld of this run still runs: SIGKILL", pid);
		kill((pid_t)pid, SIGKILL);
	}
}

void
child_wait_all(void)
{
	long long until = now_ms() + LEFT_MS;
	int killed = 0;
	pid_t pid;

	for (;;) {
		while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
			;
		if (pid < 0 && errno == ECHILD)
			return;
		if (now_ms() >= until) {
			if (killed) {
				idem_warn("processes of this run are still running");
				return;
			}
			kill_children();
			killed = 1;
			until = now_ms() + LEFT_MS;
		}
		usleep(10000);
	}
}

void
child_catch_signals(void)
{
	static const int signals[] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD };
	sigset_t set;
	size_t i;

	sigemptyset(&set);
	for (i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
		sigaddset(&set, signals[i]);
		signal(signals[i], SIG_DFL);	/* ignored ones would never come */
	}
	sigprocmask(SIG_BLOCK, &set, NULL);
	if ((signal_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		idem_die(IDEM_EXIT_ENV, "signalfd:");
	signal(SIGPIPE, SIG_IGN);
}

int
child_interrupted(void)
{
	return interrupted;
}
