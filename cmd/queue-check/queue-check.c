/*
 * queue-check: proves a queue adapter (idem-sandbox(1), QUEUE ADAPTERS)
 * on a throwaway sandbox: installs the queue's library with the setup
 * command, publishes through the adapter, takes, acks, leaves, expires and
 * takes again through it, checks that each of its sections sees what
 * happened, and grants and denies a sandbox account through it; one line
 * a section.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "env.h"
#include "error.h"
#include "file.h"
#include "pg.h"
#include "queue.h"
#include "text.h"

static const char synopsis[] =
	"usage: queue-check [-s setup] [-q queue] adapter | kind\n";

static char work[96], sandbox[128];
static int started;
static volatile sig_atomic_t interrupted;

static void
on_signal(int sig)
{
	interrupted = sig;
}

/* Runs argv with stdout to out_fd (-1: our stderr), waits; its status as
 * a shell gives it. */
static int
run_child(char *const *argv, int out_fd)
{
	pid_t pid;
	int status;

	fflush(NULL);
	if ((pid = fork()) < 0)
		idem_die(IDEM_EXIT_ENV, "fork:");
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		/* out_fd may be 1 itself, once stdout is closed */
		if (out_fd == STDOUT_FILENO ? fcntl(out_fd, F_SETFD, 0) < 0 :
		    dup2(out_fd >= 0 ? out_fd : STDERR_FILENO, STDOUT_FILENO) < 0)
			_exit(127);
		execvp(argv[0], argv);
		fprintf(stderr, "%s: %s: %s\n", argv0, argv[0], strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			idem_die(IDEM_EXIT_ENV, "waitpid:");
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

static void
clean_up(void)
{
	char *stop[] = { "idem-sandbox", "-D", sandbox, "--purge", "stop", NULL };
	int null;

	if (started) {
		started = 0;
		null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (run_child(stop, null) != 0)
			idem_warn("the sandbox is left in %s: stop it with idem-sandbox -D %s --purge stop",
			    sandbox, sandbox);
		if (null >= 0)
			close(null);
	}
	if (work[0] != '\0')
		rmdir(work);
}

/* Stops here, after the cleanup, when a signal came. */
static void
stop_if_interrupted(void)
{
	int sig = interrupted;

	if (sig == 0)
		return;
	clean_up();
	signal(sig, SIG_DFL);
	raise(sig);
	exit(128 + sig);
}

/* A throwaway sandbox, as rehearse(1) starts one; its PG* settings in our
 * environment. */
static void
start_sandbox(void)
{
	char *start[] = { "idem-sandbox", "-D", sandbox, "start", NULL }, path[160], *settings;
	struct idem_error err;
	size_t len;
	int fd, status;

	/* as root, the sandbox's server user must pass through */
	if (idem_make_temp_dir(work, sizeof(work), "queue-check", 0711, &err) < 0)
		idem_die_error(&err);
	atexit(clean_up);
	snprintf(sandbox, sizeof(sandbox), "%s/sandbox", work);
	snprintf(path, sizeof(path), "%s/settings", work);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", path);
	started = 1;
	status = run_child(start, fd);
	close(fd);
	stop_if_interrupted();
	if (status != 0) {
		unlink(path);
		idem_die(IDEM_EXIT_ENV, "idem-sandbox start failed (status %d): no sandbox to check "
		    "the adapter on", status);
	}
	settings = idem_read_file(path, &len, &err);
	unlink(path);
	if (settings == NULL)
		idem_die_error(&err);
	idem_env_export_settings(settings);
	free(settings);
	unsetenv("IDEM_DATABASE");
	unsetenv("PGSERVICE");
}

/* The setup command, by bash, with the sandbox's PG*, DATABASE_URL and
 * IDEM_QUEUE; its output on our stderr. */
static void
run_setup(const char *setup, const char *queue)
{
	char *argv[] = { "bash", "-c", (char *)setup, NULL };
	int status;

	setenv("IDEM_QUEUE", queue, 1);
	fprintf(stderr, "+ %s\n", setup);
	status = run_child(argv, -1);
	stop_if_interrupted();
	if (status != 0)
		idem_die(IDEM_EXIT_ENV, "the setup command failed with status %d: %s", status, setup);
}

/* An adapter file: a path (a / in it) or a name ending in .sql. */
static int
is_file(const char *arg)
{
	size_t len = strlen(arg);

	return strchr(arg, '/') != NULL || (len > 4 && strcmp(arg + len - 4, ".sql") == 0);
}

static void
open_adapter(struct idem_queue *q, const char *arg, const char *queue)
{
	struct idem_error err;
	int rc = is_file(arg) ? idem_queue_open_file(q, arg, NULL, queue, &err) :
	    idem_queue_open(q, arg, queue, &err);

	if (rc < 0) {
		idem_queue_close(q);
		idem_die_error(&err);
	}
}

/* The adapter for the queue, and the same for another queue: a file's
 * read once, so that both are made of the same bytes. */
static void
open_adapters(struct idem_queue *q, struct idem_queue *other, const char *arg, const char *queue)
{
	struct idem_error err;
	char *other_name;
	int rc;

	open_adapter(q, arg, queue);
	if (asprintf(&other_name, "%s-other", queue) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	rc = q->path != NULL ? idem_queue_parse(other, q->path, idem_estrdup(q->text),
	    strlen(q->text), NULL, other_name, &err) : idem_queue_open(other, arg, other_name, &err);
	free(other_name);
	if (rc < 0) {
		idem_queue_close(other);
		idem_die_error(&err);
	}
}

/* An interrupt stops the checks at the next step, the sandbox removed. */
static void
catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "setup", required_argument, NULL, 's' },
		{ "queue", required_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	const char *setup = NULL, *queue = "queue-check";
	struct idem_queue q, other;
	struct idem_error err;
	PGconn *conn;
	int c, failures;

	argv0 = "queue-check";
	while ((c = getopt_long(argc, argv, "s:q:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 's': setup = optarg; break;
		case 'q': queue = optarg; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("queue-check " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (optind + 1 != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (*queue == '\0')
		idem_die(IDEM_EXIT_USAGE, "-q: an empty queue name");
	/* the adapter first: a bad one is refused before anything starts */
	open_adapters(&q, &other, argv[optind], queue);

	catch_signals();
	idem_env_prefer_self();
	start_sandbox();
	if (idem_pg_setenv_url(NULL, &err) < 0)
		idem_die_error(&err);
	if (setup != NULL && *setup != '\0')
		run_setup(setup, queue);
	if ((conn = idem_pg_connect(NULL, &err)) == NULL)
		idem_die_error(&err);
	failures = check_adapter(&q, &other, conn, stdout, &err);
	PQfinish(conn);
	idem_queue_close(&q);
	idem_queue_close(&other);
	stop_if_interrupted();
	if (failures < 0)
		idem_die_error(&err);
	idem_close_stdout();
	return failures > 0 ? IDEM_EXIT_FINDING : IDEM_EXIT_OK;
}
