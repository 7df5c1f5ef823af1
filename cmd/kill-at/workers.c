/* workers.c: kill-at's workers (workers.h) */
#include <sys/wait.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "workers.h"
#include "lease.h"
#include "spans.h"
#include "pg.h"
#include "text.h"

#define GRACE_US 2000000

void
workers_watchdog(void)
{
	const char *leftovers[] = { run.server.path, run.server.plan, run.server.dir, NULL };
	struct idem_error err;

	if ((run.watchdog_fd = child_watchdog(MAX_WORKERS * (MAX_RESTARTS + 1), leftovers, &err)) < 0)
		idem_die_error(&err);
}

/* The vendor double puts each call down to the worker whose process
 * group made it. */
static void
tell_vendor(void)
{
	pid_t groups[MAX_WORKERS];
	int i;

	for (i = 0; i < run.nworkers; i++)
		groups[i] = run.workers[i].pid;
	if (run.vendor != NULL)
		idem_vendor_workers(run.vendor, groups, run.nworkers);
	spans_workers(groups, run.nworkers);
}

/* The worker's environment, set in the child: where kill-at listens, the
 * queue, the vendor double and the database. */
static void
worker_env(void *ctx)
{
	int index = *(const int *)ctx;
	char value[32];

	setenv("IDEM_STEP_SOCK", run.server.path, 1);
	setenv("IDEM_STEP_PLAN", run.server.plan, 1);
	setenv("IDEM_QUEUE", run.plan.queue, 1);
	setenv("IDEM_QUEUE_KIND", run.plan.queue_kind, 1);
	snprintf(value, sizeof(value), "%lld", run.plan.visibility_timeout_ms);
	setenv("IDEM_VISIBILITY_TIMEOUT_MS", value, 1);
	setenv("IDEM_RECONCILIATION_OWNER", run.plan.owner, 1);
	if (run.vendor != NULL)
		setenv("IDEM_VENDOR_URL", idem_vendor_url(run.vendor), 1);
	if (run.conninfo != NULL)
		setenv("IDEM_DATABASE", run.conninfo, 1);
	/* the database kill-at is connected to, for clients that read no conninfo */
	setenv("DATABASE_URL", run.database_url, 1);
	setenv("IDEM_DATABASE_URL", run.database_url, 1);
	snprintf(value, sizeof(value), "%d", index);
	setenv("IDEM_WORKER", value, 1);
	if (run.plan.account != NULL)
		idem_role_setenv(&run.role, run.conn);
	spans_setenv();
}

void
workers_start(int index)
{
	struct idem_error err;

	if (run.database_url == NULL)
		run.database_url = idem_pg_url_of(run.conn);
	run.workers[index].stepped = 0;
	run.workers[index].tail_next = run.workers[index].tail_count = 0;
	if (child_start(&run.workers[index], run.command, run.watchdog_fd, worker_env, &index,
	    &err) < 0)
		idem_die_error(&err);
	tell_vendor();
}

static void
worker_line(void *ctx, const char *text, size_t len)
{
	int index = *(const int *)ctx;
	struct child *w = &run.workers[index];

	record_log(index, w->pid, text, len);
	if (len == 0)
		return;
	snprintf(w->tail[w->tail_next], TAIL_LINE_MAX, "%.*s", (int)len, text);
	w->tail_next = (w->tail_next + 1) % TAIL_LINES;
	if (w->tail_count < TAIL_LINES)
		w->tail_count++;
}

/* A worker that keeps dying on its own: its last lines, as it wrote them,
 * then one message with how it ended and its last line. */
static void __attribute__((noreturn))
give_up(int index, int status)
{
	struct child *w = &run.workers[index];
	const char *last = "";
	char how[64];
	int i;

	for (i = 0; i < w->tail_count; i++)
		fprintf(stderr, "%s\n", w->tail[(w->tail_next - w->tail_count + i + TAIL_LINES) %
		    TAIL_LINES]);
	if (w->tail_count > 0)
		last = w->tail[(w->tail_next - 1 + TAIL_LINES) % TAIL_LINES];
	if (WIFEXITED(status))
		snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(status));
	idem_die(IDEM_EXIT_ENV, "worker %d %s%s, again after %d restarts; giving up%s%.200s",
	    index, how, w->stepped ? "" : " before its first delivery", MAX_RESTARTS,
	    *last ? "; its last words: " : "; it wrote nothing", last);
}

void
workers_read(int index, int final)
{
	child_read(&run.workers[index], final, worker_line, &index);
}

/* Why a worker that was not killed ended, as a log row. */
static void
note_end(int index, pid_t pid, int status)
{
	char note[128];

	if (WIFEXITED(status))
		snprintf(note, sizeof(note), "kill-at: worker %d exited with status %d", index,
		    WEXITSTATUS(status));
	else
		snprintf(note, sizeof(note), "kill-at: worker %d died of signal %d", index,
		    WTERMSIG(status));
	record_log(index, pid, note, strlen(note));
}

void
workers_reap(void)
{
	pid_t pid;
	int status, i;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (i = 0; i < run.nworkers; i++)
			if (run.workers[i].pid == pid)
				break;
		if (i == run.nworkers)
			continue;
		workers_read(i, 1);
		if (!run.workers[i].killed)
			note_end(i, pid, status);
		leases_worker_gone(i, run.workers[i].killed);
		child_ended(&run.workers[i], run.watchdog_fd);
		tell_vendor();
		if (run.stopping)
			continue;
		if (!run.workers[i].killed && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
			idem_evidence_print_log(run.ev, stderr, pid);
			idem_die(IDEM_EXIT_ENV, "worker %d could not be started (status 127): %s", i,
			    run.command[0]);
		}
		if (!run.workers[i].killed && ++run.workers[i].restarts > MAX_RESTARTS)
			give_up(i, status);
		workers_start(i);
	}
}

void
workers_kill(int worker, pid_t pid)
{
	/* the spans the worker finished reach the receiver first */
	spans_before_kill(pid > 0 ? pid : worker >= 0 ? run.workers[worker].pid : 0);
	if (worker >= 0) {
		run.workers[worker].killed = 1;
		child_signal(&run.workers[worker], SIGKILL);
	} else if (pid > 0) {
		kill(pid, SIGKILL);
	}
}

void
workers_signal(int sig)
{
	int i;

	for (i = 0; i < run.nworkers; i++)
		child_signal(&run.workers[i], sig);
}

void
workers_stop(void)
{
	long long until;
	int i, running;

	run.stopping = 1;
	workers_signal(SIGTERM);
	until = idem_now_us() + GRACE_US;
	for (;;) {
		workers_reap();
		running = 0;
		for (i = 0; i < run.nworkers; i++)
			running |= run.workers[i].pid > 0;
		if (!running)
			break;
		if (idem_now_us() > until) {
			workers_signal(SIGKILL);
			until = idem_now_us() + GRACE_US * 5;
		}
		usleep(5000);
	}
	workers_signal(SIGKILL);
}

int
workers_of(pid_t pid)
{
	return child_of(run.workers, run.nworkers, pid);
}
