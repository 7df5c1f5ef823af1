/* kill-at: run the worker under control, kill it at the declared steps,
 * start it again as a container restart would, hold two workers at a race
 * step and release them in a recorded order, wait until every published
 * message is acked, and append the evidence: step, kill, log, attempt and
 * recover rows. See idem-step(7) for the protocol the worker speaks. */
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "pg.h"
#include "tsv.h"
#include "util.h"

#define MAX_WORKERS 16
#define MAX_RESTARTS 20
#define CHECK_EVERY_US 20000
#define GRACE_US 2000000

static const char synopsis[] =
	"usage: kill-at [-d conninfo] [-n workers] [-k step:job:attempt] [-r step]\n"
	"               [-D deadline] [-- command [argument ...]]\n";

struct job {
	char *id, *business_key;
	long scenario;
	long long copies;		/* messages published for it */
};

struct kill_point {
	char *scenario, *step, *job_id;
	long long attempt;
	int fired;
	pid_t pid;
	long long killed_at;
	int worker;
};

struct race {
	char *business_key, *step;
	int held;			/* client index holding, or -1 */
	int first;			/* client released first, until its attempt ends */
	int second;			/* client released when the first's attempt ends */
	int done;
};

struct worker {
	pid_t pid;			/* 0 when not running */
	int out;			/* its stdout and stderr, or -1 */
	char *partial;			/* a log line not yet ended */
	size_t partial_len;
	int killed;			/* killed by us at a step: restart it */
	int restarts;
};

struct client {
	int fd;
	pid_t pid;
	int worker;
	char buf[4096];
	size_t len;
	int held;			/* waiting for the race partner */
	char *held_job;
	long long held_attempt;
};

struct step_event {
	long long at;
	int worker;
	pid_t pid;
	char *name, *job_id;
	long long attempt;
	const char *action;
};

struct log_line {
	long long at;
	int worker;
	pid_t pid;
	char *text;
};

static struct {
	/* from the stream */
	char *queue, *owner, *effect_table, *key_columns, *worker_command;
	long long visibility_timeout_ms, max_attempts;
	char **scenario_names, **scenario_faults, **scenario_steps;
	long long *scenario_attempts;
	size_t nscenarios;
	struct job *jobs;
	size_t njobs;
	char **msg_ids;
	size_t nmsgs;
	/* the plan */
	struct kill_point *kills;
	size_t nkills;
	struct race *races;
	size_t nraces;
	/* the run */
	const char *conninfo;
	PGconn *conn;
	char *database_url;		/* where conn goes, for the workers */
	long long skew_us;
	char dir[96], sock_path[128];
	int listen_fd, signal_fd, watchdog_fd;
	char **command;
	int nworkers;
	struct worker workers[MAX_WORKERS];
	struct client *clients;
	size_t nclients;
	struct step_event *steps;
	size_t nsteps;
	struct log_line *logs;
	size_t nlogs;
	int stopping;
} k;

static void
cleanup_dir(void)
{
	if (k.sock_path[0])
		unlink(k.sock_path);
	if (k.dir[0])
		rmdir(k.dir);
}

static long long
db_now(void)
{
	return idem_now_us() + k.skew_us;
}

static const char *
field_or(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

static long
find_scenario(const char *name)
{
	size_t i;

	for (i = 0; i < k.nscenarios; i++)
		if (strcmp(k.scenario_names[i], name) == 0)
			return (long)i;
	return -1;
}

static const struct job *
find_job(const char *id)
{
	size_t i;

	for (i = 0; i < k.njobs; i++)
		if (strcmp(k.jobs[i].id, id) == 0)
			return &k.jobs[i];
	return NULL;
}

/* Reads the whole stream into memory (it is passed on at the end) and keeps
 * what the run needs. */
static void
read_stream(FILE *hold)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	int rc;
	size_t i;

	idem_tsv_reader_init(&r, stdin, "stdin");
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		if (rc < 0)
			idem_die_error(&err);
		if (idem_tsv_pass(hold, &r) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the stream:");
		if (rc != IDEM_TSV_ROW)
			continue;
		switch (r.kind) {
		case IDEM_KIND_SEED:
			k.queue = idem_estrdup(r.fields[SEED_QUEUE]);
			k.owner = idem_estrdup(field_or(r.fields[SEED_RECONCILIATION_OWNER], ""));
			k.effect_table = idem_estrdup(r.fields[SEED_EFFECT_TABLE]);
			k.key_columns = idem_estrdup(r.fields[SEED_KEY_COLUMNS]);
			if (r.fields[SEED_WORKER_COMMAND])
				k.worker_command = idem_estrdup(r.fields[SEED_WORKER_COMMAND]);
			k.visibility_timeout_ms = idem_tsv_number(&r, SEED_VISIBILITY_TIMEOUT_MS, 0);
			k.max_attempts = idem_tsv_number(&r, SEED_MAX_ATTEMPTS, 0);
			break;
		case IDEM_KIND_SCENARIO:
			k.scenario_names = idem_ereallocarray(k.scenario_names, k.nscenarios + 1, sizeof(char *));
			k.scenario_faults = idem_ereallocarray(k.scenario_faults, k.nscenarios + 1, sizeof(char *));
			k.scenario_steps = idem_ereallocarray(k.scenario_steps, k.nscenarios + 1, sizeof(char *));
			k.scenario_attempts = idem_ereallocarray(k.scenario_attempts, k.nscenarios + 1,
			    sizeof(long long));
			k.scenario_names[k.nscenarios] = idem_estrdup(r.fields[SCENARIO_NAME]);
			k.scenario_faults[k.nscenarios] = idem_estrdup(r.fields[SCENARIO_FAULT]);
			k.scenario_steps[k.nscenarios] = r.fields[SCENARIO_STEP] ?
			    idem_estrdup(r.fields[SCENARIO_STEP]) : NULL;
			k.scenario_attempts[k.nscenarios] = idem_tsv_number(&r, SCENARIO_ATTEMPT, 0);
			k.nscenarios++;
			break;
		case IDEM_KIND_JOB:
			k.jobs = idem_ereallocarray(k.jobs, k.njobs + 1, sizeof(*k.jobs));
			k.jobs[k.njobs].id = idem_estrdup(r.fields[JOB_ID]);
			k.jobs[k.njobs].business_key = idem_estrdup(r.fields[JOB_BUSINESS_KEY]);
			k.jobs[k.njobs].scenario = r.fields[JOB_SCENARIO] ?
			    find_scenario(r.fields[JOB_SCENARIO]) : -1;
			k.jobs[k.njobs].copies = 0;
			k.njobs++;
			break;
		case IDEM_KIND_PUBLISH:
			k.msg_ids = idem_ereallocarray(k.msg_ids, k.nmsgs + 1, sizeof(char *));
			k.msg_ids[k.nmsgs++] = idem_estrdup(r.fields[PUBLISH_MSG_ID]);
			for (i = 0; i < k.njobs; i++)
				if (strcmp(k.jobs[i].id, r.fields[PUBLISH_JOB_ID]) == 0)
					k.jobs[i].copies++;
			break;
		default:
			break;
		}
	}
	idem_tsv_reader_free(&r);
	if (k.nmsgs == 0)
		idem_die(IDEM_EXIT_USAGE, "stdin: no publish rows: put dup-publish before kill-at");
}

static void
add_kill(const char *scenario, const char *step, const char *job_id, long long attempt)
{
	struct kill_point *kp;

	k.kills = idem_ereallocarray(k.kills, k.nkills + 1, sizeof(*k.kills));
	kp = &k.kills[k.nkills++];
	memset(kp, 0, sizeof(*kp));
	kp->scenario = idem_estrdup(scenario);
	kp->step = idem_estrdup(step);
	kp->job_id = idem_estrdup(job_id);
	kp->attempt = attempt;
	kp->worker = -1;
}

static void
add_race(const char *business_key, const char *step)
{
	size_t i;

	for (i = 0; i < k.nraces; i++)
		if (strcmp(k.races[i].business_key, business_key) == 0)
			return;
	k.races = idem_ereallocarray(k.races, k.nraces + 1, sizeof(*k.races));
	k.races[k.nraces].business_key = idem_estrdup(business_key);
	k.races[k.nraces].step = idem_estrdup(step);
	k.races[k.nraces].held = -1;
	k.races[k.nraces].first = -1;
	k.races[k.nraces].second = -1;
	k.races[k.nraces].done = 0;
	k.nraces++;
}

static int
key_published_twice(const char *business_key)
{
	size_t i, n = 0;

	for (i = 0; i < k.njobs; i++)
		if (strcmp(k.jobs[i].business_key, business_key) == 0)
			n += (size_t)k.jobs[i].copies;
	return n > 1;
}

/* Kill points and races: the stream's scenarios, then the options. */
static void
plan(char **kill_options, size_t nkill_options, const char *race_step)
{
	size_t i;

	for (i = 0; i < k.njobs; i++) {
		long s = k.jobs[i].scenario;

		if (s < 0 || k.scenario_steps[s] == NULL)
			continue;
		if (strcmp(k.scenario_faults[s], "kill") == 0)
			add_kill(k.scenario_names[s], k.scenario_steps[s], k.jobs[i].id,
			    k.scenario_attempts[s] ? k.scenario_attempts[s] : 1);
		else if (strcmp(k.scenario_faults[s], "race") == 0)
			add_race(k.jobs[i].business_key, race_step ? race_step : k.scenario_steps[s]);
	}
	/* -r with no race scenario: race every key that has two deliveries */
	for (i = 0; race_step != NULL && k.nraces == 0 && i < k.njobs; i++)
		if (k.jobs[i].copies > 1 || key_published_twice(k.jobs[i].business_key))
			add_race(k.jobs[i].business_key, race_step);
	for (i = 0; i < nkill_options; i++) {
		char *spec = idem_estrdup(kill_options[i]), *first = strchr(spec, ':'),
		    *last = strrchr(spec, ':'), *end;
		long long attempt;

		if (first == NULL || first == last || first == spec || last[1] == '\0')
			idem_die(IDEM_EXIT_USAGE, "-k %s: expected step:job:attempt", kill_options[i]);
		*first = *last = '\0';
		attempt = strtoll(last + 1, &end, 10);
		if (*end || attempt < 1)
			idem_die(IDEM_EXIT_USAGE, "-k %s: the attempt is a number from 1", kill_options[i]);
		if (find_job(first + 1) == NULL)
			idem_die(IDEM_EXIT_USAGE, "-k %s: no job %s in the stream", kill_options[i], first + 1);
		add_kill("-k", spec, first + 1, attempt);
		free(spec);
	}
}

/* A process that outlives kill-at by design: when kill-at dies, however it
 * dies, the pipe closes and the watchdog kills every worker's group. */
static void
start_watchdog(void)
{
	int fds[2];
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) < 0)
		idem_die(IDEM_EXIT_ENV, "pipe:");
	if ((pid = fork()) < 0)
		idem_die(IDEM_EXIT_ENV, "fork:");
	if (pid == 0) {
		pid_t groups[MAX_WORKERS * (MAX_RESTARTS + 1)];
		size_t n = 0, i;
		ssize_t got;
		pid_t g;

		close(fds[1]);
		signal(SIGINT, SIG_IGN);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		setpgid(0, 0);
		/* a positive pid is a new worker group, a negative one a group gone */
		while ((got = read(fds[0], &g, sizeof(g))) == (ssize_t)sizeof(g) || (got < 0 && errno == EINTR)) {
			if (got <= 0)
				continue;
			if (g > 0 && n < sizeof(groups) / sizeof(groups[0]))
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
		_exit(0);
	}
	close(fds[0]);
	k.watchdog_fd = fds[1];
}

static void
spawn(int index)
{
	struct worker *wk = &k.workers[index];
	int out[2];
	pid_t parent = getpid(), pid;
	char value[32];

	if (k.database_url == NULL)
		k.database_url = idem_pg_url_of(k.conn);
	if (pipe2(out, O_CLOEXEC) < 0)
		idem_die(IDEM_EXIT_ENV, "pipe:");
	fflush(NULL);
	if ((pid = fork()) < 0)
		idem_die(IDEM_EXIT_ENV, "fork:");
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
		setenv("IDEM_STEP_SOCK", k.sock_path, 1);
		setenv("IDEM_QUEUE", k.queue, 1);
		snprintf(value, sizeof(value), "%lld", k.visibility_timeout_ms);
		setenv("IDEM_VISIBILITY_TIMEOUT_MS", value, 1);
		setenv("IDEM_RECONCILIATION_OWNER", k.owner, 1);
		if (k.conninfo != NULL)
			setenv("IDEM_DATABASE", k.conninfo, 1);
		/* the database kill-at is connected to, for clients that read no conninfo */
		setenv("DATABASE_URL", k.database_url, 1);
		setenv("IDEM_DATABASE_URL", k.database_url, 1);
		snprintf(value, sizeof(value), "%d", index);
		setenv("IDEM_WORKER", value, 1);
		execvp(k.command[0], k.command);
		fprintf(stderr, "kill-at: %s: %s\n", k.command[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	close(out[1]);
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	if (write(k.watchdog_fd, &pid, sizeof(pid)) != (ssize_t)sizeof(pid))
		idem_warn("the watchdog is gone: workers may outlive a killed kill-at");
	wk->pid = pid;
	wk->out = out[0];
	wk->killed = 0;
}

static void
record_step(int worker, pid_t pid, const char *name, const char *job_id, long long attempt,
	    const char *action)
{
	struct step_event *e;

	k.steps = idem_ereallocarray(k.steps, k.nsteps + 1, sizeof(*k.steps));
	e = &k.steps[k.nsteps++];
	e->at = db_now();
	e->worker = worker;
	e->pid = pid;
	e->name = idem_estrdup(name);
	e->job_id = idem_estrdup(job_id);
	e->attempt = attempt;
	e->action = action;
}

static void
record_log(int worker, pid_t pid, const char *text, size_t len)
{
	struct log_line *l;

	k.logs = idem_ereallocarray(k.logs, k.nlogs + 1, sizeof(*k.logs));
	l = &k.logs[k.nlogs++];
	l->at = db_now();
	l->worker = worker;
	l->pid = pid;
	l->text = idem_emalloc(len + 1);
	memcpy(l->text, text, len);
	l->text[len] = '\0';
	if (!idem_utf8_valid(l->text, len)) {
		size_t i;

		for (i = 0; i < len; i++)
			if ((unsigned char)l->text[i] >= 0x80 || l->text[i] == '\0')
				l->text[i] = '?';
	}
}

static void
reply_go(struct client *c)
{
	if (c->fd >= 0 && send(c->fd, "go\n", 3, MSG_NOSIGNAL) != 3) {
		close(c->fd);
		c->fd = -1;
	}
}

static struct race *
race_for(const char *job_id, const char *step)
{
	const struct job *job = find_job(job_id);
	size_t i;

	if (job == NULL)
		return NULL;
	for (i = 0; i < k.nraces; i++)
		if (!k.races[i].done && strcmp(k.races[i].step, step) == 0 &&
		    strcmp(k.races[i].business_key, job->business_key) == 0)
			return &k.races[i];
	return NULL;
}

static void
kill_worker_group(int index, int sig)
{
	if (k.workers[index].pid > 0)
		kill(-k.workers[index].pid, sig);
}

/* The first of a race has ended its attempt: release the second. */
static void
release_second(size_t ci)
{
	size_t i;

	for (i = 0; i < k.nraces; i++) {
		struct race *race = &k.races[i];
		struct client *second;

		if (race->first != (int)ci || race->second < 0)
			continue;
		second = &k.clients[race->second];
		record_step(second->worker, second->pid, race->step, second->held_job,
		    second->held_attempt, "release");
		reply_go(second);
		second->held = 0;
		race->first = race->second = -1;
	}
}

/* One step line from a worker: go on, kill it here, or hold it for a race. */
static void
handle_step(size_t ci, char *line)
{
	struct client *c = &k.clients[ci];
	char *fields[4], *p = line, *end;
	size_t n = 0, len;
	long long attempt;
	struct race *race;

	while (n < 4) {
		fields[n++] = p;
		if ((p = strchr(p, '\t')) == NULL)
			break;
		*p++ = '\0';
	}
	if (n != 4 || strcmp(fields[0], "step") != 0 || p != NULL) {
		record_log(c->worker, c->pid, "kill-at: not a step line; go", 28);
		reply_go(c);
		return;
	}
	len = strlen(fields[1]);
	if (idem_tsv_unescape(fields[1], &len) != 0 ||
	    (len = strlen(fields[2]), idem_tsv_unescape(fields[2], &len)) != 0) {
		record_log(c->worker, c->pid, "kill-at: bad escape in a step line; go", 38);
		reply_go(c);
		return;
	}
	attempt = strtoll(fields[3], &end, 10);
	for (n = 0; n < k.nkills; n++) {
		struct kill_point *kp = &k.kills[n];

		if (kp->fired || kp->attempt != attempt || strcmp(kp->step, fields[1]) != 0 ||
		    strcmp(kp->job_id, fields[2]) != 0)
			continue;
		record_step(c->worker, c->pid, fields[1], fields[2], attempt, "kill");
		kp->fired = 1;
		kp->pid = c->pid;
		kp->worker = c->worker;
		kp->killed_at = db_now();
		if (c->worker >= 0) {
			k.workers[c->worker].killed = 1;
			kill_worker_group(c->worker, SIGKILL);
		} else {
			kill(c->pid, SIGKILL);
		}
		return;
	}
	if ((race = race_for(fields[2], fields[1])) != NULL) {
		if (race->held < 0) {
			record_step(c->worker, c->pid, fields[1], fields[2], attempt, "hold");
			race->held = (int)ci;
			c->held = 1;
			c->held_job = idem_estrdup(fields[2]);
			c->held_attempt = attempt;
			return;
		}
		if (k.clients[race->held].worker != c->worker) {
			struct client *first = &k.clients[race->held];

			/* both are past their checks; the first to arrive goes first,
			 * the second when the first's attempt has ended, so the order
			 * is the same on every run */
			record_step(c->worker, c->pid, fields[1], fields[2], attempt, "hold");
			record_step(first->worker, first->pid, fields[1], first->held_job,
			    first->held_attempt, "release");
			reply_go(first);
			first->held = 0;
			c->held = 1;
			c->held_job = idem_estrdup(fields[2]);
			c->held_attempt = attempt;
			race->first = race->held;
			race->second = (int)ci;
			race->held = -1;
			race->done = 1;
			return;
		}
	}
	record_step(c->worker, c->pid, fields[1], fields[2], attempt, "go");
	reply_go(c);
	if (strcmp(fields[1], "acked") == 0)
		release_second(ci);
}

static int
worker_of(pid_t pid)
{
	pid_t group = getpgid(pid);
	int i;

	for (i = 0; i < k.nworkers; i++)
		if (k.workers[i].pid > 0 && (k.workers[i].pid == pid || k.workers[i].pid == group))
			return i;
	return -1;
}

static void
accept_client(void)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct client *c;
	int fd = accept4(k.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		close(fd);
		return;
	}
	k.clients = idem_ereallocarray(k.clients, k.nclients + 1, sizeof(*k.clients));
	c = &k.clients[k.nclients++];
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->pid = cred.pid;
	c->worker = worker_of(cred.pid);
}

/* A worker held for a race that hangs up or dies holds nothing any more. */
static void
forget_holder(size_t ci)
{
	size_t i;

	for (i = 0; i < k.nraces; i++) {
		if (k.races[i].held == (int)ci)
			k.races[i].held = -1;
		if (k.races[i].second == (int)ci)
			k.races[i].first = k.races[i].second = -1;
	}
	k.clients[ci].held = 0;
	release_second(ci);
}

static void
read_client(size_t ci)
{
	struct client *c = &k.clients[ci];
	ssize_t got = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len - 1);
	char *nl;

	if (got <= 0) {
		if (got < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		close(c->fd);
		c->fd = -1;
		forget_holder(ci);
		return;
	}
	c->len += (size_t)got;
	c->buf[c->len] = '\0';
	while (c->fd >= 0 && (nl = memchr(c->buf, '\n', c->len)) != NULL) {
		size_t used = (size_t)(nl - c->buf) + 1;

		*nl = '\0';
		handle_step(ci, c->buf);
		c = &k.clients[ci];
		memmove(c->buf, c->buf + used, c->len - used);
		c->len -= used;
	}
	if (c->len == sizeof(c->buf) - 1) {
		record_log(c->worker, c->pid, "kill-at: step line too long; hung up", 36);
		close(c->fd);
		c->fd = -1;
	}
}

static void
read_worker_output(int index, int final)
{
	struct worker *wk = &k.workers[index];
	char buf[8192];
	ssize_t got;
	char *start, *nl;

	while (wk->out >= 0 && (got = read(wk->out, buf, sizeof(buf))) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN && !final)
				return;
			break;
		}
		wk->partial = idem_erealloc(wk->partial, wk->partial_len + (size_t)got + 1);
		memcpy(wk->partial + wk->partial_len, buf, (size_t)got);
		wk->partial_len += (size_t)got;
		start = wk->partial;
		while ((nl = memchr(start, '\n', wk->partial_len - (size_t)(start - wk->partial))) != NULL) {
			record_log(index, wk->pid, start, (size_t)(nl - start));
			start = nl + 1;
		}
		wk->partial_len -= (size_t)(start - wk->partial);
		memmove(wk->partial, start, wk->partial_len);
	}
	if (wk->partial_len > 0)
		record_log(index, wk->pid, wk->partial, wk->partial_len);
	wk->partial_len = 0;
	if (wk->out >= 0)
		close(wk->out);
	wk->out = -1;
}

/* Reaps workers; one killed at a step, or one that died on its own while
 * the run goes on, is started again. */
static void
reap(void)
{
	pid_t pid;
	int status, i;
	char note[128];

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (i = 0; i < k.nworkers; i++)
			if (k.workers[i].pid == pid)
				break;
		if (i == k.nworkers)
			continue;
		read_worker_output(i, 1);
		if (!k.workers[i].killed) {
			if (WIFEXITED(status))
				snprintf(note, sizeof(note), "kill-at: worker %d exited with status %d", i,
				    WEXITSTATUS(status));
			else
				snprintf(note, sizeof(note), "kill-at: worker %d died of signal %d", i,
				    WTERMSIG(status));
			record_log(i, pid, note, strlen(note));
		}
		k.workers[i].pid = 0;
		pid = -pid;
		if (write(k.watchdog_fd, &pid, sizeof(pid)) != (ssize_t)sizeof(pid))
			idem_warn("the watchdog is gone: workers may outlive a killed kill-at");
		if (k.stopping)
			continue;
		if (!k.workers[i].killed && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
			size_t l;

			for (l = 0; l < k.nlogs; l++)
				if (k.logs[l].pid == -pid)
					fprintf(stderr, "%s\n", k.logs[l].text);
			idem_die(IDEM_EXIT_ENV, "worker %d could not be started (status 127): %s", i,
			    k.command[0]);
		}
		if (!k.workers[i].killed && ++k.workers[i].restarts > MAX_RESTARTS)
			idem_die(IDEM_EXIT_ENV, "worker %d stopped on its own %d times; giving up", i,
			    MAX_RESTARTS);
		spawn(i);
	}
}

static int
all_fired(void)
{
	size_t i;

	for (i = 0; i < k.nkills; i++)
		if (!k.kills[i].fired)
			return 0;
	for (i = 0; i < k.nraces; i++)
		if (!k.races[i].done)
			return 0;
	return 1;
}

static char *
msg_id_array(void)
{
	size_t i, len = 2;
	char *s;

	for (i = 0; i < k.nmsgs; i++)
		len += strlen(k.msg_ids[i]) + 1;
	s = idem_emalloc(len + 1);
	strcpy(s, "{");
	for (i = 0; i < k.nmsgs; i++) {
		if (i)
			strcat(s, ",");
		strcat(s, k.msg_ids[i]);
	}
	strcat(s, "}");
	return s;
}

static long long
unacked(const char *ids)
{
	const char *params[1] = { ids };
	struct idem_error err;
	PGresult *res = idem_pg_exec(k.conn, "watching the queue", &err,
	    "SELECT count(*) FROM idem.message WHERE msg_id = ANY ($1::bigint[]) AND acked_at IS NULL",
	    1, params);
	long long n;

	if (res == NULL)
		idem_die_error(&err);
	n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return n;
}

static void
stop_workers(void)
{
	long long until;
	int i, running;

	k.stopping = 1;
	for (i = 0; i < k.nworkers; i++)
		kill_worker_group(i, SIGTERM);
	until = idem_now_us() + GRACE_US;
	for (;;) {
		reap();
		running = 0;
		for (i = 0; i < k.nworkers; i++)
			running |= k.workers[i].pid > 0;
		if (!running)
			break;
		if (idem_now_us() > until) {
			for (i = 0; i < k.nworkers; i++)
				kill_worker_group(i, SIGKILL);
			until = idem_now_us() + GRACE_US * 5;
		}
		usleep(5000);
	}
	for (i = 0; i < k.nworkers; i++)
		kill_worker_group(i, SIGKILL);
}

/* The run: returns 0 when every message was acked and every kill point and
 * race was reached, 1 at the deadline, 128+N when kill-at got signal N. */
static int
run(long long deadline_us)
{
	char *ids = msg_id_array();
	long long next_check = 0, end = idem_now_us() + deadline_us;
	struct pollfd *fds = NULL;
	size_t nfds, i;
	int rc = -1;

	for (i = 0; i < (size_t)k.nworkers; i++)
		spawn((int)i);
	while (rc < 0) {
		nfds = 0;
		fds = idem_ereallocarray(fds, 2 + MAX_WORKERS + k.nclients, sizeof(*fds));
		fds[nfds++] = (struct pollfd){ .fd = k.listen_fd, .events = POLLIN };
		fds[nfds++] = (struct pollfd){ .fd = k.signal_fd, .events = POLLIN };
		for (i = 0; i < (size_t)k.nworkers; i++)
			fds[nfds++] = (struct pollfd){ .fd = k.workers[i].out, .events = POLLIN };
		for (i = 0; i < k.nclients; i++)
			fds[nfds++] = (struct pollfd){ .fd = k.clients[i].fd, .events = POLLIN };
		if (poll(fds, nfds, CHECK_EVERY_US / 1000) < 0 && errno != EINTR)
			idem_die(IDEM_EXIT_ENV, "poll:");
		if (fds[0].revents & POLLIN)
			accept_client();
		if (fds[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(k.signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				if (si.ssi_signo == SIGCHLD)
					reap();
				else
					rc = 128 + (int)si.ssi_signo;
			}
		}
		for (i = 0; i < (size_t)k.nworkers; i++)
			if (fds[2 + i].fd >= 0 && (fds[2 + i].revents & (POLLIN | POLLHUP)))
				read_worker_output((int)i, 0);
		for (i = 0; i < k.nclients && 2 + (size_t)k.nworkers + i < nfds; i++)
			if (k.clients[i].fd >= 0 &&
			    (fds[2 + k.nworkers + i].revents & (POLLIN | POLLHUP | POLLERR)))
				read_client(i);
		if (rc >= 0)
			break;
		if (idem_now_us() >= next_check) {
			next_check = idem_now_us() + CHECK_EVERY_US;
			if (all_fired() && unacked(ids) == 0)
				rc = 0;
			else if (idem_now_us() > end)
				rc = 1;
		}
	}
	free(fds);
	stop_workers();
	if (rc == 1) {
		const char *params[1] = { ids };
		struct idem_error err;
		PGresult *res = idem_pg_exec(k.conn, "watching the queue", &err,
		    "SELECT msg_id, job_id, copy, read_ct FROM idem.message "
		    "WHERE msg_id = ANY ($1::bigint[]) AND acked_at IS NULL ORDER BY msg_id", 1, params);

		for (i = 0; res && i < (size_t)PQntuples(res); i++)
			idem_warn("deadline: message %s (job %s, copy %s) never acked after %s deliveries",
			    PQgetvalue(res, (int)i, 0), PQgetvalue(res, (int)i, 1),
			    PQgetvalue(res, (int)i, 2), PQgetvalue(res, (int)i, 3));
		PQclear(res);
		for (i = 0; i < k.nkills; i++)
			if (!k.kills[i].fired)
				idem_warn("deadline: step %s of job %s, attempt %lld, never reached (scenario %s)",
				    k.kills[i].step, k.kills[i].job_id, k.kills[i].attempt, k.kills[i].scenario);
		for (i = 0; i < k.nraces; i++)
			if (!k.races[i].done)
				idem_warn("deadline: race at %s on business key %s never met by two workers",
				    k.races[i].step, k.races[i].business_key);
	}
	free(ids);
	return rc;
}

static void
write_row(const char *kind, const char *const *fields, size_t n)
{
	if (idem_tsv_write_row(stdout, kind, fields, n) < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
}

static void
write_steps_kills_logs(void)
{
	char at[32], worker[16], pid[16], attempt[32];
	const char *row[7];
	size_t i;

	for (i = 0; i < k.nsteps; i++) {
		const struct step_event *e = &k.steps[i];

		idem_format_time(e->at, at);
		snprintf(worker, sizeof(worker), "%d", e->worker);
		snprintf(pid, sizeof(pid), "%d", (int)e->pid);
		snprintf(attempt, sizeof(attempt), "%lld", e->attempt);
		row[0] = at;
		row[1] = worker;
		row[2] = pid;
		row[3] = e->name;
		row[4] = e->job_id;
		row[5] = attempt;
		row[6] = e->action;
		write_row("step", row, 7);
	}
	for (i = 0; i < k.nkills; i++) {
		const struct kill_point *kp = &k.kills[i];

		if (!kp->fired)
			continue;
		idem_format_time(kp->killed_at, at);
		snprintf(attempt, sizeof(attempt), "%lld", kp->attempt);
		snprintf(pid, sizeof(pid), "%d", (int)kp->pid);
		row[0] = kp->scenario;
		row[1] = kp->job_id;
		row[2] = attempt;
		row[3] = kp->step;
		row[4] = pid;
		row[5] = at;
		write_row("kill", row, 6);
	}
	for (i = 0; i < k.nlogs; i++) {
		idem_format_time(k.logs[i].at, at);
		snprintf(worker, sizeof(worker), "%d", k.logs[i].worker);
		snprintf(pid, sizeof(pid), "%d", (int)k.logs[i].pid);
		row[0] = at;
		row[1] = worker;
		row[2] = pid;
		row[3] = k.logs[i].text;
		write_row("log", row, 4);
	}
}

/* The branches an attempt took, from the log lines that name it. */
static char *
branches_of(const char *job_id, const char *attempt, const char *msg_id)
{
	char *out = NULL;
	size_t len = 0, i;

	for (i = 0; i < k.nlogs; i++) {
		char *b = idem_log_value(k.logs[i].text, "branch"), *j, *a, *m;
		int match;

		if (b == NULL)
			continue;
		j = idem_log_value(k.logs[i].text, "job");
		a = idem_log_value(k.logs[i].text, "attempt");
		m = idem_log_value(k.logs[i].text, "msg_id");
		match = j && a && strcmp(j, job_id) == 0 && strcmp(a, attempt) == 0 &&
		    (m == NULL || strcmp(m, msg_id) == 0);
		if (match) {
			out = idem_erealloc(out, len + strlen(b) + 2);
			if (len)
				out[len++] = ' ';
			strcpy(out + len, b);
			len += strlen(b);
		}
		free(b);
		free(j);
		free(a);
		free(m);
	}
	return out;
}

/* The pid that reported "consumed" for a job and attempt, n-th time. */
static pid_t
consumer(const char *job_id, long long attempt, int nth)
{
	size_t i;

	for (i = 0; i < k.nsteps; i++)
		if (strcmp(k.steps[i].name, "consumed") == 0 && k.steps[i].attempt == attempt &&
		    strcmp(k.steps[i].job_id, job_id) == 0 && nth-- == 0)
			return k.steps[i].pid;
	return 0;
}

static const struct kill_point *
kill_of(const char *job_id, long long attempt)
{
	size_t i;

	for (i = 0; i < k.nkills; i++)
		if (k.kills[i].fired && k.kills[i].attempt == attempt &&
		    strcmp(k.kills[i].job_id, job_id) == 0)
			return &k.kills[i];
	return NULL;
}

/* The key expression of the effect table as SQL, its identifiers quoted:
 * one column as text, several as a JSON array compared as jsonb. */
static char *
effect_key_sql(int *several)
{
	json_error_t jerr;
	json_t *cols = json_loads(k.key_columns, 0, &jerr), *col;
	char *out = NULL, *quoted;
	size_t len = 0, i;

	*several = json_array_size(cols) > 1;
	out = idem_estrdup(*several ? "jsonb_build_array(" : "");
	len = strlen(out);
	json_array_foreach(cols, i, col) {
		const char *name = json_string_value(col);

		if (name == NULL)
			continue;
		quoted = PQescapeIdentifier(k.conn, name, strlen(name));
		if (quoted == NULL)
			idem_die(IDEM_EXIT_ENV, "quoting %s: %s", name, PQerrorMessage(k.conn));
		out = idem_erealloc(out, len + strlen(quoted) + 16);
		len += (size_t)sprintf(out + len, "%se.%s", i ? ", " : "", quoted);
		PQfreemem(quoted);
	}
	json_decref(cols);
	out = idem_erealloc(out, len + 16);
	strcpy(out + len, *several ? ")" : "::text");
	return out;
}

/* A schema-qualified table name with each part quoted. */
static char *
quoted_table(void)
{
	char *copy = idem_estrdup(k.effect_table), *dot = strchr(copy, '.'), *a, *b, *out;

	if (dot) {
		*dot = '\0';
		a = PQescapeIdentifier(k.conn, copy, strlen(copy));
		b = PQescapeIdentifier(k.conn, dot + 1, strlen(dot + 1));
		if (asprintf(&out, "%s.%s", a, b) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		PQfreemem(a);
		PQfreemem(b);
	} else {
		a = PQescapeIdentifier(k.conn, copy, strlen(copy));
		out = idem_estrdup(a);
		PQfreemem(a);
	}
	free(copy);
	return out;
}

/*
 * Attempt rows: one per delivery, from the delivery log; the commit time
 * and rows written from the effect table's commit timestamps inside the
 * attempt's window (its delivery to its ack, its kill or the next
 * delivery); recover rows: kill to the ack of the clean retry.
 */
static void
write_attempts(void)
{
	char *ids = msg_id_array(), *key_sql, *table, *query = NULL;
	const char *params[1] = { ids };
	struct idem_error err;
	PGresult *res, *effects = NULL;
	pid_t *kill_pid_of_row;
	int several, i, e;

	res = idem_pg_exec(k.conn, "reading the delivery log", &err,
	    "SELECT d.msg_id, m.job_id, m.business_key, d.read_ct, "
	    "(extract(epoch FROM d.delivered_at) * 1000000)::bigint, "
	    "CASE WHEN d.read_ct = m.read_ct THEN (extract(epoch FROM m.acked_at) * 1000000)::bigint END, "
	    "(SELECT (extract(epoch FROM n.delivered_at) * 1000000)::bigint FROM idem.delivery n "
	    " WHERE n.msg_id = d.msg_id AND n.read_ct = d.read_ct + 1) "
	    "FROM idem.delivery d JOIN idem.message m USING (msg_id) "
	    "WHERE d.msg_id = ANY ($1::bigint[]) ORDER BY d.delivered_at, d.msg_id", 1, params);
	if (res == NULL)
		idem_die_error(&err);
	kill_pid_of_row = idem_ereallocarray(NULL, (size_t)PQntuples(res) + 1, sizeof(pid_t));
	key_sql = effect_key_sql(&several);
	table = quoted_table();
	if (asprintf(&query, "SELECT %s, (extract(epoch FROM pg_xact_commit_timestamp(e.xmin)) "
	    "* 1000000)::bigint FROM %s e", key_sql, table) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	effects = PQexec(k.conn, query);
	if (PQresultStatus(effects) != PGRES_TUPLES_OK) {
		char msg[512];

		idem_warn("no commit times or rows written: reading %s: %s", k.effect_table,
		    idem_pg_message(k.conn, effects, msg, sizeof(msg)));
		PQclear(effects);
		effects = NULL;
	}
	for (i = 0; i < PQntuples(res); i++) {
		const char *msg_id = PQgetvalue(res, i, 0), *job_id = PQgetvalue(res, i, 1);
		const char *business_key = PQgetvalue(res, i, 2), *attempt_text = PQgetvalue(res, i, 3);
		long long attempt = strtoll(attempt_text, NULL, 10);
		long long consumed = strtoll(PQgetvalue(res, i, 4), NULL, 10);
		long long acked = PQgetisnull(res, i, 5) ? 0 : strtoll(PQgetvalue(res, i, 5), NULL, 10);
		long long next = PQgetisnull(res, i, 6) ? 0 : strtoll(PQgetvalue(res, i, 6), NULL, 10);
		const struct kill_point *kp = kill_of(job_id, attempt);
		long long window_end;
		long long committed = 0, rows = 0;
		char consumed_at[32], committed_at[32], acked_at[32], rows_text[32], pid_text[16];
		char *branch = branches_of(job_id, attempt_text, msg_id);
		const char *row[9];
		int nth = 0, j;
		pid_t pid;

		for (j = 0; j < i; j++)
			nth += strcmp(PQgetvalue(res, j, 1), job_id) == 0 &&
			    strcmp(PQgetvalue(res, j, 3), attempt_text) == 0;
		pid = consumer(job_id, attempt, nth);
		kill_pid_of_row[i] = pid;
		if (kp != NULL && kp->pid != pid)
			kp = NULL;
		window_end = acked ? acked : kp ? kp->killed_at : next ? next : db_now();
		for (e = 0; effects && e < PQntuples(effects); e++) {
			long long ts;
			int same;

			if (PQgetisnull(effects, e, 1))
				continue;
			same = several ? 0 : strcmp(PQgetvalue(effects, e, 0), business_key) == 0;
			if (several) {
				json_t *a = json_loads(PQgetvalue(effects, e, 0), 0, NULL);
				json_t *b = json_loads(business_key, 0, NULL);

				same = a && b && json_equal(a, b);
				json_decref(a);
				json_decref(b);
			}
			ts = strtoll(PQgetvalue(effects, e, 1), NULL, 10);
			if (same && ts >= consumed && ts <= window_end) {
				rows++;
				if (ts > committed)
					committed = ts;
			}
		}
		idem_format_time(consumed, consumed_at);
		idem_format_time(committed, committed_at);
		idem_format_time(acked, acked_at);
		snprintf(rows_text, sizeof(rows_text), "%lld", rows);
		snprintf(pid_text, sizeof(pid_text), "%d", (int)pid);
		row[0] = job_id;
		row[1] = msg_id;
		row[2] = attempt_text;
		row[3] = pid ? pid_text : NULL;
		row[4] = consumed_at;
		row[5] = committed ? committed_at : NULL;
		row[6] = acked ? acked_at : NULL;
		row[7] = effects ? rows_text : NULL;
		row[8] = branch;
		write_row("attempt", row, 9);
		free(branch);
	}
	for (i = 0; i < PQntuples(res); i++) {
		const char *job_id = PQgetvalue(res, i, 1);
		long long attempt = strtoll(PQgetvalue(res, i, 3), NULL, 10);
		const struct kill_point *kp = kill_of(job_id, attempt);
		char killed_at[32], acked_at[32], ms[32];
		const char *row[5];
		int j;

		if (kp == NULL || kill_pid_of_row[i] != kp->pid)
			continue;
		/* the ack of the same message, by a later delivery */
		for (j = 0; j < PQntuples(res); j++)
			if (strcmp(PQgetvalue(res, j, 0), PQgetvalue(res, i, 0)) == 0 &&
			    !PQgetisnull(res, j, 5) &&
			    strtoll(PQgetvalue(res, j, 3), NULL, 10) > attempt)
				break;
		idem_format_time(kp->killed_at, killed_at);
		row[0] = job_id;
		row[1] = PQgetvalue(res, i, 0);
		row[2] = killed_at;
		if (j < PQntuples(res)) {
			long long acked = strtoll(PQgetvalue(res, j, 5), NULL, 10);

			idem_format_time(acked, acked_at);
			snprintf(ms, sizeof(ms), "%lld", (acked - kp->killed_at) / 1000);
			row[3] = acked_at;
			row[4] = ms;
		} else {
			row[3] = row[4] = NULL;
		}
		write_row("recover", row, 5);
	}
	PQclear(effects);
	PQclear(res);
	free(kill_pid_of_row);
	free(query);
	free(key_sql);
	free(table);
	free(ids);
}

static void
free_list(char **list, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

static void
free_all(void)
{
	size_t i;

	free(k.queue);
	free(k.owner);
	free(k.effect_table);
	free(k.key_columns);
	free(k.worker_command);
	free(k.database_url);
	free_list(k.scenario_names, k.nscenarios);
	free_list(k.scenario_faults, k.nscenarios);
	free_list(k.scenario_steps, k.nscenarios);
	free(k.scenario_attempts);
	for (i = 0; i < k.njobs; i++) {
		free(k.jobs[i].id);
		free(k.jobs[i].business_key);
	}
	free(k.jobs);
	free_list(k.msg_ids, k.nmsgs);
	for (i = 0; i < k.nkills; i++) {
		free(k.kills[i].scenario);
		free(k.kills[i].step);
		free(k.kills[i].job_id);
	}
	free(k.kills);
	for (i = 0; i < k.nraces; i++) {
		free(k.races[i].business_key);
		free(k.races[i].step);
	}
	free(k.races);
	for (i = 0; i < k.nclients; i++) {
		if (k.clients[i].fd >= 0)
			close(k.clients[i].fd);
		free(k.clients[i].held_job);
	}
	free(k.clients);
	for (i = 0; i < k.nsteps; i++) {
		free(k.steps[i].name);
		free(k.steps[i].job_id);
	}
	free(k.steps);
	for (i = 0; i < k.nlogs; i++)
		free(k.logs[i].text);
	free(k.logs);
	for (i = 0; i < MAX_WORKERS; i++)
		free(k.workers[i].partial);
}

static void
measure_skew(void)
{
	long long before = idem_now_us(), after;
	PGresult *res = PQexec(k.conn, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint");

	after = idem_now_us();
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		k.skew_us = strtoll(PQgetvalue(res, 0, 0), NULL, 10) - (before + after) / 2;
	PQclear(res);
}

static void
setup_socket(void)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct idem_error err;

	if (idem_make_temp_dir(k.dir, sizeof(k.dir), "kill-at", 0700, &err) < 0)
		idem_die_error(&err);
	snprintf(k.sock_path, sizeof(k.sock_path), "%s/step.sock", k.dir);
	strcpy(addr.sun_path, k.sock_path);
	if ((k.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
	    bind(k.listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(k.listen_fd, 64) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", k.sock_path);
	atexit(cleanup_dir);
}

static void
setup_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if ((k.signal_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		idem_die(IDEM_EXIT_ENV, "signalfd:");
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "workers", required_argument, NULL, 'n' },
		{ "kill", required_argument, NULL, 'k' },
		{ "race", required_argument, NULL, 'r' },
		{ "deadline", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conninfo = NULL, *race_step = NULL;
	char **kill_options = NULL, *held = NULL, *shell[4], *end;
	size_t nkill_options = 0, held_len = 0;
	long long deadline_ms = -1;
	struct idem_error err;
	FILE *hold;
	int c, rc;

	argv0 = "kill-at";
	argv[0] = (char *)argv0;
	while ((c = getopt_long(argc, argv, "+d:n:k:r:D:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': conninfo = optarg; break;
		case 'n':
			k.nworkers = (int)strtol(optarg, &end, 10);
			if (*end || k.nworkers < 1 || k.nworkers > MAX_WORKERS)
				idem_die(IDEM_EXIT_USAGE, "-n %s: expected 1 to %d workers", optarg, MAX_WORKERS);
			break;
		case 'k':
			kill_options = idem_ereallocarray(kill_options, nkill_options + 1, sizeof(char *));
			kill_options[nkill_options++] = optarg;
			break;
		case 'r': race_step = optarg; break;
		case 'D':
			if ((deadline_ms = idem_parse_duration_ms(optarg)) <= 0)
				idem_die(IDEM_EXIT_USAGE, "-D %s: expected a duration such as 30s", optarg);
			break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("kill-at " IDEM_VERSION); idem_close_stdout(); return 0;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if ((hold = open_memstream(&held, &held_len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	read_stream(hold);
	if (fclose(hold) != 0)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	if (optind < argc) {
		k.command = argv + optind;
	} else if (k.worker_command != NULL) {
		shell[0] = "/bin/sh";
		shell[1] = "-c";
		if (asprintf(&shell[2], "exec %s", k.worker_command) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		shell[3] = NULL;
		k.command = shell;
	} else {
		idem_die(IDEM_EXIT_USAGE, "no worker: give -- command, or worker.command in the seed");
	}
	plan(kill_options, nkill_options, race_step);
	if (k.nworkers == 0)
		k.nworkers = k.nraces > 0 ? 2 : 1;
	if (k.nraces > 0 && k.nworkers < 2)
		idem_die(IDEM_EXIT_USAGE, "-n %d: a race needs two workers", k.nworkers);
	if (deadline_ms < 0)
		deadline_ms = 30000 + 3 * k.visibility_timeout_ms * (k.max_attempts ? k.max_attempts : 5);

	k.conninfo = conninfo;
	if ((k.conn = idem_pg_connect(conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(k.conn, &err) < 0)
		idem_die_error(&err);
	measure_skew();
	setup_signals();
	setup_socket();
	start_watchdog();
	rc = run(deadline_ms * 1000);
	if (rc > 128) {
		idem_warn("stopped by signal %d; workers stopped", rc - 128);
	} else {
		if (fwrite(held, 1, held_len, stdout) != held_len)
			idem_die(IDEM_EXIT_ENV, "write error on standard output:");
		write_steps_kills_logs();
		write_attempts();
	}
	free(held);
	if (k.command == shell)
		free(shell[2]);
	free(kill_options);
	PQfinish(k.conn);
	free_all();
	idem_close_stdout();
	return rc;
}
