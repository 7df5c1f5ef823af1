/* rehearse: the whole rehearsal of a seed in one command. It starts the
 * embedded sandbox when no database is configured, sets up the worker's
 * schema (idem-worker's own, or a setup command given for another worker),
 * runs seed-gen | count-effects --before | dup-publish | kill-at |
 * count-effects, writes the signed record with mkrecord, and checks it with
 * verify-record; it prints the pipeline it runs, as a user could paste it.
 * Every program runs as its own child in a process group of its own; a
 * stage that fails stops the others at once, and an interrupt stops them
 * all; every exit then passes through one cleanup. */
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pg.h"
#include "role.h"
#include "seed.h"
#include "sig.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "record.h"

static const char synopsis[] =
	"usage: rehearse [-d conninfo] [-w worker] [-s setup] [-k key]\n"
	"                [-f allowed-signers] [-o dir] [-W cause=duration] [-c] [-K] seed\n";

#define STAGES 5
#define GRACE_MS 1000		/* from SIGTERM (or the forwarded signal) to SIGKILL */
#define SETTLE_MS 300		/* for the stages before a failed one to end */
#define LEFT_MS 5000		/* for the processes of the run to end, at exit */

/* What an interrupt does to the children that run. */
enum on_interrupt {
	STOP,		/* the signal is passed on; SIGKILL after the grace */
	FINISH,		/* passed on, never SIGKILL: mkrecord makes its record whole */
	HOLD,		/* not passed on: the sandbox's start and stop run to their end */
};

/* A program rehearse runs, from its start to its reaping. */
struct child {
	const char *name;	/* as a failure names it */
	const char *command;	/* shell text, run as bash -c "exec COMMAND" */
	pid_t pid;		/* also its process group */
	int ended, status;	/* its wait status once reaped */
	int after_signal;	/* reaped after rehearse signalled it */
	int may_find;		/* its exit 1 is a finding the record shows */
	int err_fd;		/* its standard error, passed on line by line */
	char partial[4096];	/* a line not yet ended */
	size_t partial_len;
	char last[1024];	/* its last line */
	char message[1024];	/* its last line that begins "PROGRAM: " */
};

static int interrupted;		/* the first of SIGINT, SIGTERM, SIGHUP that came */
static int signal_fd = -1;
static char work[96], sandbox[128];
static char *stop_command;	/* stops and purges the sandbox this run started */
static int keep_sandbox, started_sandbox, sandbox_kept, reaper;
static pid_t main_pid;

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
exec_child(const char *command, int in_fd, int out_fd, int err_fd)
{
	static const int signals[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD };
	int fds[3] = { in_fd, out_fd, err_fd }, fd;
	sigset_t none;
	char *text;
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
	if (asprintf(&text, "exec %s", command) < 0)
		_exit(126);
	execl("/bin/bash", "bash", "-c", text, (char *)NULL);
	_exit(127);
}

/* Starts the children, each one's standard output into the next one's
 * input: the first reads /dev/null, the last writes to out_fd, or with
 * its standard error when out_fd is -1. */
static void
start_children(struct child *c, int n, int out_fd)
{
	int in_fd, next_in, stdout_fd, pipe_fds[2], err_fds[2], i;
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
		fflush(NULL);
		if ((pid = fork()) < 0)
			idem_die(IDEM_EXIT_ENV, "fork:");
		if (pid == 0)
			exec_child(c[i].command, in_fd, stdout_fd >= 0 ? stdout_fd : err_fds[1], err_fds[1]);
		setpgid(pid, pid);
		close(err_fds[1]);
		fcntl(err_fds[0], F_SETFL, O_NONBLOCK);
		c[i].pid = pid;
		c[i].ended = c[i].after_signal = 0;
		c[i].err_fd = err_fds[0];
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

/*
 * Runs the children (a pipeline when there are several) until every one
 * has ended, passing on their standard error. When one fails, the others
 * get SIGTERM, and SIGKILL after GRACE_MS; an interrupt is passed on as
 * mode says. Returns the index of the child whose failure ended the run,
 * or -1; the caller looks at interrupted first.
 */
static int
run_children(struct child *c, int n, int out_fd, enum on_interrupt mode, int last_may_find)
{
	struct pollfd fds[1 + STAGES];
	int owner[1 + STAGES], nfds, i, sig, signalled = 0, timeout;
	long long settle_until = -1, kill_at = -1, now;

	take_signals();
	if (interrupted && mode != HOLD)
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
		if ((sig = take_signals()) != 0 && mode != HOLD) {
			signal_children(c, n, sig);
			signalled = 1;
			if (mode == STOP && kill_at < 0)
				kill_at = now_ms() + GRACE_MS;
		}
		reap(c, n, signalled);
		if (!signalled && must_stop(c, n, last_may_find, &settle_until)) {
			signal_children(c, n, SIGTERM);
			signalled = 1;
			if (mode == STOP)
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

/* The status a child's end calls for: its exit status, 128+N for signal N. */
static int
status_of(const struct child *c)
{
	return WIFEXITED(c->status) ? WEXITSTATUS(c->status) : 128 + WTERMSIG(c->status);
}

/* Names the child that failed, how, and its last word; returns its status. */
static int
report_failure(const struct child *c)
{
	const char *word = c->message[0] ? c->message : c->last;
	char how[48];

	if (WIFEXITED(c->status))
		snprintf(how, sizeof(how), "exit %d", WEXITSTATUS(c->status));
	else
		snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(c->status));
	fprintf(stderr, "rehearse: %s failed (%s)%s%s\n", c->name, how, *word ? ": " : "", word);
	return status_of(c);
}

/* Runs one command to its end; returns the index run_children does. */
static int
run_one(struct child *c, const char *name, const char *command, int out_fd, enum on_interrupt mode)
{
	memset(c, 0, sizeof(*c));
	c->name = name;
	c->command = command;
	return run_children(c, 1, out_fd, mode, 0);
}

static void
stop_if_interrupted(void)
{
	if (interrupted) {
		idem_warn("interrupted; nothing recorded");
		exit(128 + interrupted);
	}
}

static void
stop_sandbox(void)
{
	struct child stop;
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

	if (run_one(&stop, "idem-sandbox --purge stop", stop_command, null, HOLD) >= 0) {
		report_failure(&stop);
		idem_warn("the sandbox is left in %s: stop it with idem-sandbox -D %s --purge stop",
		    sandbox, sandbox);
		sandbox_kept = 1;
	}
	if (null >= 0)
		close(null);
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

	snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)main_pid);
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

/* Waits until no process this run started is left, adopted ones too. */
static void
wait_for_all(void)
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

static int
remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	size_t len = strlen(sandbox);

	(void)st;
	(void)flag;
	(void)ftw;
	if (sandbox_kept && len > 0 && strncmp(path, sandbox, len) == 0 &&
	    (path[len] == '\0' || path[len] == '/'))
		return 0;
	if (remove(path) < 0 && errno != ENOENT && !(sandbox_kept && strcmp(path, work) == 0))
		idem_warn("%s:", path);
	return 0;
}

/*
 * Every exit passes here once the scratch directory is made, whatever
 * ended the run: the sandbox this run started is stopped and purged (not
 * with -K), every process of the run is waited for, the scratch directory
 * is removed; then an interrupted run ends by its signal, as a shell
 * expects of a program it interrupted.
 */
static void
clean_up(void)
{
	sigset_t set;

	if (getpid() != main_pid)
		return;
	if (started_sandbox && !keep_sandbox)
		stop_sandbox();
	sandbox_kept |= started_sandbox && keep_sandbox;
	if (reaper)
		wait_for_all();
	nftw(work, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (interrupted) {
		fflush(NULL);
		signal(interrupted, SIG_DFL);
		sigemptyset(&set);
		sigaddset(&set, interrupted);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		raise(interrupted);
	}
}

/* SIGINT, SIGTERM and SIGHUP are read from a signalfd, in the loop that
 * waits for the children, as SIGCHLD is; nothing runs in a handler. */
static void
catch_signals(void)
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

/* The sandbox's settings, "NAME='value'; export NAME;" per line. */
static void
export_settings(const char *text)
{
	char *copy = idem_estrdup(text), *line, *save = NULL;

	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '='), *end;

		if (eq == NULL || eq[1] != '\'' || (end = strstr(eq + 2, "';")) == NULL)
			continue;
		*eq = '\0';
		*end = '\0';
		setenv(line, eq + 2, 1);
	}
	free(copy);
}

/* The setup of idem-worker's schema, for the guard and key scope its
 * command names; nothing for another worker. */
static char *
setup_for(const char *worker)
{
	char *copy = idem_estrdup(worker), *tok, *save = NULL, *out = NULL;
	size_t len = 0;
	FILE *f;
	int first = 1, keep = 0;

	if ((f = open_memstream(&out, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save), first = 0) {
		if (first) {
			const char *base = strrchr(tok, '/') ? strrchr(tok, '/') + 1 : tok;

			if (strcmp(base, "idem-worker") != 0) {
				fclose(f);
				free(out);
				free(copy);
				return NULL;
			}
			fputs(tok, f);
			continue;
		}
		if (keep) {
			fprintf(f, " %s", tok);
			keep = 0;
		} else if (strcmp(tok, "-g") == 0 || strcmp(tok, "--guard") == 0 ||
		    strcmp(tok, "-k") == 0 || strcmp(tok, "--key-scope") == 0) {
			fprintf(f, " %s", tok);
			keep = 1;
		} else if (strncmp(tok, "--guard=", 8) == 0 || strncmp(tok, "--key-scope=", 12) == 0) {
			fprintf(f, " %s", tok);
		}
	}
	fputs(" --setup", f);
	fclose(f);
	free(copy);
	return out;
}

static void
start_sandbox(void)
{
	char *command, settings_path[200], *settings, *q_sandbox, *conninfo;
	struct idem_error err;
	struct child start;
	size_t len;
	int fd;

	snprintf(sandbox, sizeof(sandbox), "%s/sandbox", work);
	snprintf(settings_path, sizeof(settings_path), "%s/settings", work);
	q_sandbox = idem_shell_quote(sandbox);
	if (asprintf(&command, "idem-sandbox -D %s start", q_sandbox) < 0 ||
	    asprintf(&stop_command, "idem-sandbox -D %s --purge stop", q_sandbox) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(q_sandbox);
	fprintf(stderr, "+ eval \"$(%s)\"\n", command);
	if ((fd = open(settings_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", settings_path);
	started_sandbox = 1;
	/* an interrupt waits for the start to end: a server half started
	 * would race its own stop */
	if (run_one(&start, "idem-sandbox start", command, fd, HOLD) >= 0) {
		close(fd);
		stop_if_interrupted();
		report_failure(&start);
		exit(IDEM_EXIT_ENV);
	}
	close(fd);
	free(command);
	stop_if_interrupted();
	if ((settings = idem_read_file(settings_path, &len, &err)) == NULL)
		idem_die_error(&err);
	export_settings(settings);
	free(settings);
	if (asprintf(&conninfo, "host=%s port=%s dbname=%s user=%s", getenv("PGHOST"),
	    getenv("PGPORT"), getenv("PGDATABASE"), getenv("PGUSER")) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	setenv("IDEM_DATABASE", conninfo, 1);
	free(conninfo);
}

/* A key for this run only, and an allowed signers file that lists it. */
static void
make_throwaway_key(char **key, char **signers)
{
	char *q_work, *command, *pub, *line;
	struct idem_error err;
	struct child keygen;
	size_t len;

	q_work = idem_shell_quote(work);
	if (asprintf(&command, "ssh-keygen -q -t ed25519 -N '' -C rehearse-throwaway -f "
	    "%s/throwaway_ed25519", q_work) < 0 ||
	    asprintf(key, "%s/throwaway_ed25519", work) < 0 ||
	    asprintf(signers, "%s/allowed_signers", work) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(q_work);
	if (run_one(&keygen, "ssh-keygen", command, -1, STOP) >= 0) {
		stop_if_interrupted();
		report_failure(&keygen);
		exit(IDEM_EXIT_ENV);
	}
	stop_if_interrupted();
	free(command);
	if (asprintf(&command, "%s.pub", *key) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if ((pub = idem_read_file(command, &len, &err)) == NULL)
		idem_die_error(&err);
	pub[strcspn(pub, "\n")] = '\0';
	if (asprintf(&line, "rehearse-throwaway namespaces=\"idem-record,git\" %s\n", pub) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if (idem_write_file_atomic(*signers, line, strlen(line), &err) < 0)
		idem_die_error(&err);
	free(line);
	free(pub);
	free(command);
	fprintf(stderr, "rehearse: signing with a throwaway key made for this run; give -k "
	    "and list its public key in allowed_signers for a record others can trust\n");
}

/* A waiting time of -W, checked now rather than after the run, added to
 * the words for mkrecord -w. */
static void
add_wait(char **waits, const char *spec)
{
	const char *eq = strchr(spec, '=');
	char *quoted, *more;
	size_t c;

	if (eq == NULL)
		idem_die(IDEM_EXIT_USAGE, "-W %s: expected cause=duration", spec);
	for (c = 0; idem_wait_causes[c] && (strlen(idem_wait_causes[c]) != (size_t)(eq - spec) ||
	    strncmp(idem_wait_causes[c], spec, (size_t)(eq - spec)) != 0); c++)
		;
	if (idem_wait_causes[c] == NULL)
		idem_die(IDEM_EXIT_USAGE, "-W %s: the cause is one of reviewer-queue, "
		    "sandbox-availability, vendor-limit, owner-approval", spec);
	if (idem_parse_duration_ms(eq + 1) < 0)
		idem_die(IDEM_EXIT_USAGE, "-W %s: expected a duration such as 2h", spec);
	quoted = idem_shell_quote(spec);
	if (asprintf(&more, "%s -w %s", *waits ? *waits : "", quoted) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(quoted);
	free(*waits);
	*waits = more;
}

/* The environment the setup command changes, to put back after it. */
struct setup_env {
	char *values[4];
};

static const char *const setup_vars[4] = { "PGUSER", "DATABASE_URL", "IDEM_DATABASE_URL",
	"IDEM_DATABASE" };

/* The setup command runs as the seed's sandbox account, with the rights
 * of a setup (kill-at confines it before the workers start). */
static void
account_for_setup(const struct idem_seed *seed, struct setup_env *saved)
{
	struct idem_queue q;
	struct idem_role role;
	struct idem_error err;
	PGconn *conn;
	int i;

	for (i = 0; i < 4; i++)
		saved->values[i] = getenv(setup_vars[i]) ? idem_estrdup(getenv(setup_vars[i])) : NULL;
	if (idem_queue_open(&q, seed->queue_kind, seed->queue, &err) < 0 ||
	    (conn = idem_pg_connect(NULL, &err)) == NULL)
		idem_die_error(&err);
	if (idem_role_open(&role, conn, seed->sandbox_account, &q, seed->effect_table, &err) < 0 ||
	    idem_role_for_setup(&role, conn, &err) < 0)
		idem_die_error(&err);
	idem_role_setenv(&role, conn);
	fprintf(stderr, "rehearse: the setup runs as the sandbox account %s\n", seed->sandbox_account);
	idem_role_close(&role);
	PQfinish(conn);
	idem_queue_close(&q);
}

static void
restore_env(struct setup_env *saved)
{
	int i;

	for (i = 0; i < 4; i++) {
		if (saved->values[i] != NULL)
			setenv(setup_vars[i], saved->values[i], 1);
		else
			unsetenv(setup_vars[i]);
		free(saved->values[i]);
	}
}

/* What the options ask for. */
struct options {
	const char *conninfo, *worker, *setup_command, *key, *signers, *dir, *seed_path;
	char *waits;		/* the words for mkrecord -w, or NULL */
	char *throwaway_key, *throwaway_signers;	/* made when -k is not given */
	int commit;
};

/* The shell text of the run's commands. */
struct commands {
	char *setup;		/* the worker's setup, or NULL */
	char *seed_gen, *kill_at, *pipeline;
	char *record;		/* mkrecord, reading the stream the pipeline wrote */
	char stream_path[160];
};

static void
parse_options(int argc, char *argv[], struct options *opt)
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "worker", required_argument, NULL, 'w' },
		{ "setup", required_argument, NULL, 's' },
		{ "key", required_argument, NULL, 'k' },
		{ "allowed-signers", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "commit", no_argument, NULL, 'c' },
		{ "keep-sandbox", no_argument, NULL, 'K' },
		{ "wait", required_argument, NULL, 'W' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	memset(opt, 0, sizeof(*opt));
	opt->dir = "records";
	while ((c = getopt_long(argc, argv, "d:w:s:k:f:o:W:cKhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': opt->conninfo = optarg; break;
		case 'w': opt->worker = optarg; break;
		case 's': opt->setup_command = optarg; break;
		case 'k': opt->key = optarg; break;
		case 'f': opt->signers = optarg; break;
		case 'o': opt->dir = optarg; break;
		case 'c': opt->commit = 1; break;
		case 'K': keep_sandbox = 1; break;
		case 'W': add_wait(&opt->waits, optarg); break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("rehearse " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (optind + 1 != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (opt->commit && opt->key == NULL)
		idem_die(IDEM_EXIT_USAGE, "-c: commit with a key of yours (-k), not a throwaway one");
	opt->seed_path = argv[optind];
}

/* The seed and the key, refused before anything runs; the worker the seed
 * names when -w does not. */
static void
load_inputs(struct options *opt, struct idem_seed *seed)
{
	struct idem_key probe;
	struct idem_error err;

	if (idem_seed_load(seed, opt->seed_path, &err) < 0)
		idem_die_error(&err);
	if (opt->key != NULL) {
		if (idem_key_load(&probe, opt->key, &err) < 0)
			idem_die_error(&err);
		idem_key_wipe(&probe);
	}
	if (opt->worker == NULL)
		opt->worker = seed->worker_command ? seed->worker_command : "idem-worker --guard unique";
}

/* The programs beside this one come first on PATH. */
static void
prefer_programs_beside(void)
{
	char self[PATH_MAX], *path;
	ssize_t n;

	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) <= 0)
		return;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	if (asprintf(&path, "%s:%s", self, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin") < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	setenv("PATH", path, 1);
	free(path);
}

/* The scratch directory, and the cleanup that every exit passes through
 * from now on. */
static void
make_scratch(void)
{
	struct idem_error err;
	char tmp_dir[128];

	/* what the run starts and leaves behind comes back to rehearse, to be
	 * waited for; with -K the sandbox's server must outlive it */
	if (!keep_sandbox)
		reaper = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
	/* as root, the sandbox's server user must pass through */
	if (idem_make_temp_dir(work, sizeof(work), "rehearse", 0711, &err) < 0)
		idem_die_error(&err);
	main_pid = getpid();
	atexit(clean_up);
	/* whatever the programs leave in TMPDIR goes with the scratch directory */
	snprintf(tmp_dir, sizeof(tmp_dir), "%s/tmp", work);
	if (mkdir(tmp_dir, 0700) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", tmp_dir);
	setenv("TMPDIR", tmp_dir, 1);
}

/* -d, else IDEM_DATABASE, else the PG* environment when it names a
 * database, else a sandbox started for this run. */
static void
choose_database(const char *conninfo)
{
	struct idem_error err;

	if (conninfo != NULL)
		setenv("IDEM_DATABASE", conninfo, 1);
	else if (getenv("IDEM_DATABASE") && *getenv("IDEM_DATABASE"))
		fprintf(stderr, "rehearse: using the database of IDEM_DATABASE\n");
	else if (!getenv("PGHOST") && !getenv("PGSERVICE") && !getenv("PGDATABASE"))
		start_sandbox();
	else
		fprintf(stderr, "rehearse: using the database of the PG* environment\n");
	/* before any setup writes to it; the setup and every stage get its URI */
	if (idem_pg_setenv_url(NULL, &err) < 0)
		idem_die_error(&err);
}

/* The commands of the run; the pipeline is printed as a user could paste
 * it. */
static void
make_commands(const struct options *opt, struct commands *cmd)
{
	char *q_seed, *q_key, *q_dir, *q_pipeline, *q_stream;

	q_seed = idem_shell_quote(opt->seed_path);
	/* -s as given, "" for none; else idem-worker's own */
	if (opt->setup_command != NULL)
		cmd->setup = *opt->setup_command ? idem_estrdup(opt->setup_command) : NULL;
	else
		cmd->setup = setup_for(opt->worker);
	if (asprintf(&cmd->seed_gen, "seed-gen %s", q_seed) < 0 ||
	    asprintf(&cmd->kill_at, "kill-at -- %s", opt->worker) < 0 ||
	    asprintf(&cmd->pipeline, "%s%s%s | count-effects --before | dup-publish | %s | count-effects",
	    cmd->setup ? cmd->setup : "", cmd->setup ? " && " : "", cmd->seed_gen, cmd->kill_at) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	q_key = idem_shell_quote(opt->key);
	q_dir = idem_shell_quote(opt->dir);
	q_pipeline = idem_shell_quote(cmd->pipeline);
	snprintf(cmd->stream_path, sizeof(cmd->stream_path), "%s/stream.tsv", work);
	q_stream = idem_shell_quote(cmd->stream_path);
	if (asprintf(&cmd->record, "mkrecord -k %s -o %s%s%s -r %s < %s", q_key, q_dir,
	    opt->commit ? " -c" : "", opt->waits ? opt->waits : "", q_pipeline, q_stream) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	fprintf(stderr, "+ %s | mkrecord -k %s -o %s%s%s\n", cmd->pipeline, q_key, q_dir,
	    opt->commit ? " -c" : "", opt->waits ? opt->waits : "");
	free(q_stream);
	free(q_pipeline);
	free(q_dir);
	free(q_key);
	free(q_seed);
}

static void
free_commands(struct commands *cmd)
{
	free(cmd->setup);
	free(cmd->seed_gen);
	free(cmd->kill_at);
	free(cmd->pipeline);
	free(cmd->record);
}

/* The worker's setup, as the seed's sandbox account when it names one;
 * given by -s, it is shell text of any shape that bash runs, not exec.
 * Returns 0, or the status of its failure. */
static int
run_setup(const struct idem_seed *seed, const char *setup, int given)
{
	int as_account = seed->sandbox_account != NULL && *seed->sandbox_account;
	struct setup_env saved;
	struct child set_up;
	char *q_setup, *in_bash = NULL;
	int failed;

	if (setup == NULL)
		return 0;
	if (as_account)
		account_for_setup(seed, &saved);
	if (given) {
		q_setup = idem_shell_quote(setup);
		if (asprintf(&in_bash, "bash -c %s", q_setup) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(q_setup);
	}
	failed = run_one(&set_up, setup, in_bash ? in_bash : setup, -1, STOP) >= 0;
	free(in_bash);
	if (as_account)
		restore_env(&saved);
	stop_if_interrupted();
	return failed ? report_failure(&set_up) : 0;
}

/* The stages, into the stream file. Returns 0 with the status the counts
 * call for, or the status of the stage that failed. */
static int
run_pipeline(const struct commands *cmd, int *counts_status)
{
	struct child stages[STAGES];
	int fd, i;

	memset(stages, 0, sizeof(stages));
	stages[0].name = "seed-gen";
	stages[0].command = cmd->seed_gen;
	stages[1].name = stages[1].command = "count-effects --before";
	stages[2].name = stages[2].command = "dup-publish";
	stages[3].name = "kill-at";
	stages[3].command = cmd->kill_at;
	/* kill-at's 1, a failed baseline or a deadline, leaves a whole stream */
	stages[3].may_find = 1;
	stages[4].name = stages[4].command = "count-effects";
	if ((fd = open(cmd->stream_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", cmd->stream_path);
	i = run_children(stages, STAGES, fd, STOP, 1);
	close(fd);
	stop_if_interrupted();
	/* count-effects' 1 is the finding the record must show */
	if (i >= 0)
		return report_failure(&stages[i]);
	*counts_status = status_of(&stages[STAGES - 1]);
	if (status_of(&stages[3]) == IDEM_EXIT_FINDING)
		*counts_status = IDEM_EXIT_FINDING;
	return 0;
}

/* mkrecord finishes whole, signals or not: once it writes, a record
 * exists. Returns 0 with the record's path, or the status the run ends
 * with. */
static int
make_record(const char *command, char **record_path)
{
	char record_out[200];
	struct child mkrecord;
	struct idem_error err;
	size_t len;
	int fd, i;

	snprintf(record_out, sizeof(record_out), "%s/record", work);
	if ((fd = open(record_out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", record_out);
	i = run_one(&mkrecord, "mkrecord", command, fd, FINISH);
	close(fd);
	if (!mkrecord.ended || i >= 0) {
		stop_if_interrupted();
		return report_failure(&mkrecord);
	}
	if ((*record_path = idem_read_file(record_out, &len, &err)) == NULL)
		idem_die_error(&err);
	(*record_path)[strcspn(*record_path, "\n")] = '\0';
	if (interrupted) {
		idem_warn("interrupted; the record was made and is not verified: %s", *record_path);
		return 128 + interrupted;
	}
	return 0;
}

/* verify-record on the record, whose path is then the output. Returns the
 * status the run ends with: verify-record's, else the counts'. */
static int
check_record(const char *signers, const char *record_path, int counts_status)
{
	char *q_signers, *q_record, *command;
	struct child verify;
	int status;

	q_signers = signers ? idem_shell_quote(signers) : NULL;
	q_record = idem_shell_quote(record_path);
	if (asprintf(&command, "verify-record%s%s %s", q_signers ? " -f " : "",
	    q_signers ? q_signers : "", q_record) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(q_signers);
	free(q_record);
	fprintf(stderr, "+ %s\n", command);
	run_one(&verify, "verify-record", command, -1, STOP);
	free(command);
	if (interrupted) {
		idem_warn("interrupted while verifying the record: %s", record_path);
		return 128 + interrupted;
	}
	status = status_of(&verify);
	if (counts_status == IDEM_EXIT_FINDING)
		fprintf(stderr, "rehearse: the counts differ from the seed's expect; the record says "
		    "fail: %s\n", record_path);
	printf("%s\n", record_path);
	return status == 0 ? counts_status : status;
}

int
main(int argc, char *argv[])
{
	struct options opt;
	struct commands cmd;
	struct idem_seed seed;
	char *record_path = NULL;
	int status, counts_status = 0;

	argv0 = "rehearse";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &opt);
	load_inputs(&opt, &seed);
	prefer_programs_beside();
	catch_signals();
	make_scratch();
	choose_database(opt.conninfo);
	if (opt.key == NULL) {
		make_throwaway_key(&opt.throwaway_key, &opt.throwaway_signers);
		opt.key = opt.throwaway_key;
		opt.signers = opt.throwaway_signers;
	}
	make_commands(&opt, &cmd);
	if ((status = run_setup(&seed, cmd.setup, opt.setup_command != NULL)) == 0 &&
	    (status = run_pipeline(&cmd, &counts_status)) == 0 &&
	    (status = make_record(cmd.record, &record_path)) == 0)
		status = check_record(opt.signers, record_path, counts_status);
	idem_seed_free(&seed);
	free(record_path);
	free_commands(&cmd);
	free(opt.waits);
	free(opt.throwaway_key);
	free(opt.throwaway_signers);
	idem_close_stdout();
	return status;
}
