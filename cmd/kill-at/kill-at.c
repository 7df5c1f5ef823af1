/* kill-at: run the worker under control, kill it at the declared steps,
 * seen in the sandbox database or told on the step socket, start it again
 * as a container restart would, hold two workers at a race step and
 * release them in a recorded order, wait until every published message is
 * acked, and append the evidence: step, kill, log, attempt and recover
 * rows. See idem-step(7) for the kill points and the protocol. */
#include <sys/signalfd.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "database.h"
#include "external.h"
#include "lease.h"
#include "stall.h"
#include "options.h"
#include "socket.h"
#include "spans.h"
#include "workers.h"
#include "pg.h"
#include "file.h"
#include "text.h"

#define CHECK_EVERY_US 20000
#define RESCUE_EVERY 5
#define BOUND_US 20000000		/* the longest wait for an event of the plan */			/* checks between two rescues of the queue's own */

/* The plan, and what becomes of each kill point and race, none yet. */
static void
make_plan(const struct options *o)
{
	struct idem_error err;
	size_t i;

	if (idem_plan_make(&run.plan, o->kill_options, o->nkill_options, o->race_step, &err) < 0)
		idem_die_error(&err);
	run.kills = idem_ereallocarray(NULL, run.plan.nkills + 1, sizeof(*run.kills));
	for (i = 0; i < run.plan.nkills; i++)
		run.kills[i] = (struct kill_point){ .plan = &run.plan.kills[i], .worker = -1, .armed = -1 };
	run.races = idem_ereallocarray(NULL, run.plan.nraces + 1, sizeof(*run.races));
	for (i = 0; i < run.plan.nraces; i++)
		run.races[i] = (struct race){ .plan = &run.plan.races[i], .held = -1, .first = -1,
		    .second = -1, .armed = -1 };
}

/* The worker: the command after --, else the seed's, run by the shell. */
static void
choose_command(const struct options *o)
{
	if (o->command != NULL) {
		run.command = o->command;
	} else if (run.plan.worker_command != NULL) {
		run.shell[0] = "/bin/sh";
		run.shell[1] = "-c";
		if (asprintf(&run.shell[2], "exec %s", run.plan.worker_command) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		run.shell[3] = NULL;
		run.command = run.shell;
	} else {
		idem_die(IDEM_EXIT_USAGE, "no worker: give -- command, or worker.command in the seed");
	}
}

/*
 * Reads the stream into the plan, holding every line of it in a
 * temporary file, returned, for the output once the kill points are gone;
 * then the worker, the plan's kill points and races, the number of
 * workers and the deadline (o->deadline_ms) the options leave open.
 */
static FILE *
read_stream(struct options *o)
{
	struct idem_error err;
	FILE *hold;

	run.ev = idem_evidence_new();
	idem_baseline_init(&run.base);
	run.base.limit = o->baseline_jobs;
	if ((hold = tmpfile()) == NULL)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	if (idem_plan_read(&run.plan, stdin, "stdin", hold, o->kill_options, o->nkill_options,
	    o->race_step != NULL, &run.base, &err) < 0)
		idem_die_error(&err);
	if (fflush(hold) != 0 || fseek(hold, 0, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	choose_command(o);
	make_plan(o);
	/* one more for the races, which hold one while the other comes, and
	 * one more for the stalls, which hold one while another takes the
	 * job again */
	run.nworkers = o->nworkers ? o->nworkers :
	    1 + (run.plan.nraces > 0) + (run.plan.nstalls > 0);
	if (run.plan.nraces > 0 && run.nworkers < 2)
		idem_die(IDEM_EXIT_USAGE, "-n %d: a race needs two workers", run.nworkers);
	if (run.plan.nstalls > 0 && run.nworkers < 2)
		idem_die(IDEM_EXIT_USAGE, "-n %d: a stall needs two workers", run.nworkers);
	if (o->deadline_ms < 0)
		o->deadline_ms = 30000 + 3 * run.plan.visibility_timeout_ms *
		    (run.plan.max_attempts ? run.plan.max_attempts : 5);
	run.bound_us = BOUND_US;
	return hold;
}

/* The sandbox, its queue and its clock; the sandbox account, as which
 * the workers run, confined to its list before they start (see
 * lib/role). */
static void
connect_sandbox(const char *option)
{
	struct idem_error err;
	char *version = NULL;
	const char *how;

	/* -d, IDEM_DATABASE, the seed's; the stream's database row, if any,
	 * must name the database reached */
	run.conninfo = idem_pg_choose(option, run.plan.database, &how);
	if (idem_queue_open_seed(&run.q, run.plan.queue_kind, run.plan.queue, run.plan.adapter,
	    run.plan.adapter_sha256, &err) < 0 ||
	    (run.conn = idem_pg_connect(run.conninfo, &err)) == NULL ||
	    idem_pg_require_sandbox(run.conn, &err) < 0 ||
	    idem_pg_observe(run.conn, &run.here, &err) < 0 ||
	    (run.plan.have_stream_db &&
	    idem_pg_same_database(&run.plan.stream_db, &run.here, how, &err) < 0) ||
	    idem_queue_check(&run.q, run.conn, &version, &err) < 0 ||
	    idem_pg_clock_skew(run.conn, &run.skew_us, &err) < 0)
		idem_die_error(&err);
	free(version);
	if (run.plan.account != NULL &&
	    (idem_role_open(&run.role, run.conn, run.plan.account, &run.q, run.plan.effect_table,
	    &err) < 0 || idem_role_confine(&run.role, run.conn, &err) < 0))
		idem_die_error(&err);
}

/* What the account held at the end, and what it could not do; more than
 * its list is a finding. */
static void
check_account(void)
{
	struct idem_error err;

	if (run.plan.account == NULL)
		return;
	if (idem_role_finish(&run.role, run.conn, &err) < 0)
		idem_die_error(&err);
	if (run.role.beyond > 0 || run.role.held > 0)
		idem_warn("sandbox account %s: %zu privileges beyond its list, %zu things it may not "
		    "do that it could: see the grant and denied rows", run.plan.account, run.role.beyond,
		    run.role.held);
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
	if ((run.signal_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		idem_die(IDEM_EXIT_ENV, "signalfd:");
}

static int
all_fired(void)
{
	size_t i;

	for (i = 0; i < run.plan.nkills; i++)
		if (!run.kills[i].fired)
			return 0;
	for (i = 0; i < run.plan.nraces; i++)
		if (!run.races[i].done)
			return 0;
	return stalls_done();
}

/* Every msg_id of the stream, as a PostgreSQL array of texts. */
static const char *
msg_ids(void)
{
	return run.plan.msgs.text ? run.plan.msgs.text : "{}";
}

static int
everything_acked(void)
{
	struct idem_error err;
	int rc = idem_failpoint_all_acked(run.fp, &err);

	if (rc < 0)
		idem_die_error(&err);
	return rc;
}

/* The workers reaped, and the signals kill-at got: 128+N for the last
 * signal N that ends the run, else -1. */
static int
read_signals(void)
{
	struct signalfd_siginfo si;
	int rc = -1;

	while (read(run.signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGCHLD)
			workers_reap();
		else
			rc = 128 + (int)si.ssi_signo;
	}
	return rc;
}

/* Waits up to a check's time for the step socket, the signals, the
 * workers' output, the step lines and the vendor double, and handles
 * what came: 128+N when kill-at got signal N, else -1. */
static int
handle_events(struct pollfd **fdsp)
{
	size_t nfds = 0, nclients = run.nclients, i;
	struct pollfd *fds;
	int rc = -1;

	fds = *fdsp = idem_ereallocarray(*fdsp, 3 + MAX_WORKERS + run.nclients, sizeof(*fds));
	fds[nfds++] = (struct pollfd){ .fd = run.server.fd, .events = POLLIN };
	fds[nfds++] = (struct pollfd){ .fd = run.signal_fd, .events = POLLIN };
	for (i = 0; i < (size_t)run.nworkers; i++)
		fds[nfds++] = (struct pollfd){ .fd = run.workers[i].out, .events = POLLIN };
	for (i = 0; i < nclients; i++)
		fds[nfds++] = (struct pollfd){ .fd = run.clients[i].peer.fd, .events = POLLIN };
	fds[nfds++] = (struct pollfd){ .fd = run.vendor ? idem_vendor_fd(run.vendor) : -1,
	    .events = POLLIN };
	if (poll(fds, nfds, CHECK_EVERY_US / 1000) < 0 && errno != EINTR)
		idem_die(IDEM_EXIT_ENV, "poll:");
	if (fds[0].revents & POLLIN)
		socket_accept();
	if (fds[1].revents & POLLIN)
		rc = read_signals();
	for (i = 0; i < (size_t)run.nworkers; i++)
		if (fds[2 + i].fd >= 0 && (fds[2 + i].revents & (POLLIN | POLLHUP)))
			workers_read((int)i, 0);
	for (i = 0; i < nclients; i++)
		if (run.clients[i].peer.fd >= 0 &&
		    (fds[2 + run.nworkers + i].revents & (POLLIN | POLLHUP | POLLERR)))
			socket_read(i);
	if (fds[nfds - 1].revents & POLLIN)
		external_watch();
	return rc;
}

/* What the deadline found: the messages never acked, the kill points and
 * races never reached. */
static void
report_deadline(const char *ids)
{
	const char *params[1] = { ids };
	const Oid types[1] = { IDEM_OID_TEXT_ARRAY };
	struct idem_error err;
	/* msg_id, job_id, copy, deliveries */
	PGresult *res = idem_queue_exec(&run.q, run.conn, "unacked-list", "watching the queue", 1,
	    types, params, &err);
	size_t i;

	for (i = 0; res && i < (size_t)PQntuples(res); i++)
		idem_warn("deadline: message %s (job %s, copy %s) never acked after %s deliveries",
		    PQgetvalue(res, (int)i, 0), PQgetvalue(res, (int)i, 1),
		    PQgetvalue(res, (int)i, 2), PQgetvalue(res, (int)i, 3));
	PQclear(res);
	if (!run.in_baseline)
		leases_bound();
	for (i = 0; !run.in_baseline && i < run.plan.nkills; i++)
		if (!run.kills[i].fired)
			idem_warn("deadline: step %s of job %s, attempt %lld, never reached (scenario %s)",
			    run.plan.kills[i].step, run.plan.kills[i].job_id, run.plan.kills[i].attempt,
			    run.plan.kills[i].scenario);
	for (i = 0; !run.in_baseline && i < run.plan.nraces; i++)
		if (!run.races[i].done)
			idem_warn("deadline: race at %s on business key %s never met by two workers",
			    run.races[i].plan->step, run.races[i].plan->business_key);
}

/* The run: returns 0 when every message was acked and every kill point and
 * race was reached, 1 at the deadline, 128+N when kill-at got signal N. */
static int
conduct(long long deadline_us)
{
	const char *ids = run.in_baseline ? run.base.ids : msg_ids();
	long long next_check = 0, end = idem_now_us() + deadline_us, checks = 0;
	struct pollfd *fds = NULL;
	struct idem_error err;
	int rc = -1, i;

	if (idem_failpoint_watch_acks(run.fp, ids, &err) < 0)
		idem_die_error(&err);
	if (!run.in_baseline) {
		leases_hold_copies();
		stalls_hold_back();
	}
	for (i = 0; i < run.nworkers; i++)
		workers_start(i);
	while (rc < 0) {
		if ((rc = handle_events(&fds)) >= 0)
			break;
		if (idem_now_us() >= next_check) {
			next_check = idem_now_us() + CHECK_EVERY_US;
			database_watch();
			if (!run.in_baseline)
				stalls_watch();
			leases_watch();
			if (++checks % RESCUE_EVERY == 0 &&
			    idem_failpoint_rescue(run.fp, run.plan.visibility_timeout_ms, &err) < 0)
				idem_die_error(&err);
			if ((run.in_baseline || all_fired()) && everything_acked())
				rc = 0;
			else if (idem_now_us() > end)
				rc = 1;
		}
	}
	free(fds);
	if (!run.in_baseline)
		stalls_end();
	/* a held session is terminated before its worker goes: let go, a dead
	 * client's transaction would commit */
	if (idem_failpoint_terminate_all(run.fp, &err) < 0)
		idem_die_error(&err);
	workers_stop();
	if (rc == 1)
		report_deadline(ids);
	return rc;
}

/* Whether a run after the baseline has nothing to do: no kill point or
 * race, every message acked. */
static int
nothing_left(void)
{
	struct idem_error err;

	if (!all_fired())
		return 0;
	if (idem_failpoint_watch_acks(run.fp, msg_ids(), &err) < 0)
		idem_die_error(&err);
	return everything_acked();
}

/*
 * The sequential baseline: the jobs in no fault run first, with one
 * worker, while the messages of the faults are held back, and their
 * effects are counted; the faults are let go after. Returns 0 when it
 * passed or had no jobs, -1 when it passed and nothing is left to run (no
 * fault, every message acked), 1 when it failed, 128+N when kill-at got
 * signal N.
 */
static int
run_baseline(long long deadline_us)
{
	struct idem_error err;
	int rc, nworkers = run.nworkers, i;
	size_t n;

	idem_plan_tell_baseline(&run.plan, &run.base);
	if ((n = idem_baseline_plan(&run.base)) == SIZE_MAX)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	if (n == 0)
		return 0;
	if (idem_baseline_hold_back(&run.base, &run.q, run.conn, &err) < 0)
		idem_die_error(&err);
	run.in_baseline = 1;
	run.nworkers = 1;
	rc = conduct(deadline_us);
	run.nworkers = nworkers;
	run.in_baseline = 0;
	run.stopping = 0;
	for (i = 0; i < MAX_WORKERS; i++)
		run.workers[i].restarts = 0;
	if (idem_baseline_let_go(&run.base, &run.q, run.conn, &err) < 0)
		idem_die_error(&err);
	if (rc > 128)
		return rc;
	if (idem_baseline_count(&run.base, run.conn, run.plan.effect_table, run.plan.key_columns,
	    &err) < 0 || idem_baseline_judge(&run.base, &run.q, run.conn, &err) < 0)
		idem_die_error(&err);
	if (run.base.result != IDEM_BASELINE_FAILED)
		return nothing_left() ? -1 : 0;
	idem_warn("baseline failed: %lld of %lld effects, %lld duplicate, %lld missing, "
	    "%lld messages unacked; no fault was forced", run.base.effects_observed,
	    run.base.effects_expected, run.base.duplicates, run.base.missing, run.base.unacked);
	idem_baseline_explain(&run.base, stderr, 10);
	return 1;
}

/* The call rows: every request the vendor double took, once it stopped
 * (a late answer due is waited for), then the forgot rows. */
static void
write_calls(void)
{
	struct idem_vendor_call *const *calls;
	size_t n;

	if (run.vendor == NULL)
		return;
	idem_vendor_stop(run.vendor, &calls, &n);
	if (idem_evidence_calls(run.out, calls, n, run.skew_us) < 0 ||
	    external_write_forgot(run.out) < 0)
		idem_die(IDEM_EXIT_ENV, "holding the rows:");
}

/* The missed rows: every kill point, race and stall the run did not
 * reach. */
static void
write_missed(void)
{
	size_t i;

	for (i = 0; i < run.plan.nkills; i++)
		if (!run.kills[i].fired && idem_evidence_missed(run.out, "kill",
		    run.kills[i].plan->scenario, run.kills[i].plan->job_id, run.kills[i].plan->attempt,
		    run.kills[i].plan->step) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the rows:");
	for (i = 0; i < run.plan.nraces; i++)
		if (!run.races[i].done && idem_evidence_missed(run.out, "race",
		    run.races[i].plan->scenario, run.races[i].plan->business_key, 0,
		    run.races[i].plan->step) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the rows:");
	if (stalls_write(run.out, 1) < 0)
		idem_die(IDEM_EXIT_ENV, "holding the rows:");
}

static int
grouped_ledger(void *fp, const char **sql, struct idem_error *err)
{
	return idem_failpoint_grouped_ledger(fp, sql, err);
}

/*
 * The step, kill and log rows, then the attempt rows, one per delivery,
 * with the rows each wrote from the effect ledger, and the recover rows,
 * from the kill to the ack of the retry: see evidence.h.
 */
static void
write_evidence(void)
{
	struct idem_evidence *ev = run.ev;
	long attempts_from;
	char *deliveries = idem_queue_sql(&run.q, run.conn, "deliveries");
	struct idem_error err;
	size_t i;

	if (deliveries == NULL)
		idem_die(IDEM_EXIT_ENV, "reading the delivery log: the %s adapter has no deliveries "
		    "section", run.q.kind);
	/* the ledger grouped by another server process while this one reads
	 * the deliveries */
	if (idem_failpoint_group_ledger(run.fp, &err) < 0)
		idem_die_error(&err);
	/* the deliveries and the ledger are the database's: joined there */
	idem_evidence_deliveries_from(ev, deliveries, msg_ids());
	/* the sessions first: a write is a delivery's by the worker that holds
	 * both sessions, when the queue delivers on a connection of its own */
	for (i = 0; i < run.sessions.n; i++)
		if (run.sessions.s[i].worker >= 0)
			idem_evidence_backend(ev, run.sessions.s[i].backend_pid, run.sessions.s[i].start,
			    run.sessions.s[i].worker, run.sessions.s[i].pid);
	if (!idem_failpoint_has_ledger(run.fp))
		idem_warn("no rows written: the effect table %s did not exist when the run began",
		    run.plan.effect_table);
	else
		idem_evidence_grouped_ledger(ev, grouped_ledger, run.fp);
	for (i = 0; i < run.plan.nkills; i++) {
		const struct kill_point *kp = &run.kills[i];
		const struct idem_plan_kill *p = kp->plan;

		if (kp->fired && !kp->cannot)
			idem_evidence_kill(ev, p->scenario, p->job_id, p->attempt, p->step, kp->msg_id,
			    kp->pid, kp->killed_at, kp->observed);
	}
	attempts_from = ftell(run.out);
	if (idem_evidence_write(ev, run.conn, run.out, &err) < 0)
		idem_die_error(&err);
	if (leases_write(run.out) < 0 || stalls_write(run.out, 0) < 0)
		idem_die(IDEM_EXIT_ENV, "holding the rows:");
	write_calls();
	/* after a failed baseline no fault was tried, so none was missed */
	if (run.base.result != IDEM_BASELINE_FAILED)
		write_missed();
	if (spans_write(run.out, attempts_from) < 0)
		idem_die(IDEM_EXIT_ENV, "holding the spans:");
}

/*
 * Every row kill-at appends, held in run.out: the worker (the argument
 * vector executed and the files it runs, with their hashes), the
 * baseline's and the account's rows, the evidence. Nothing goes out until
 * the kill points are gone: the next program of the pipeline may start
 * counting, and lock the effect table, as soon as it reads the stream.
 */
static void
hold_rows(void)
{
	check_account();
	if ((run.out = tmpfile()) == NULL ||
	    (!run.plan.have_stream_db && idem_pg_observed_write(run.out, &run.here) < 0) ||
	    idem_evidence_worker(run.out, run.command,
	    run.command == run.shell ? run.plan.worker_command : NULL) < 0 ||
	    idem_baseline_write(&run.base, run.out) < 0 ||
	    (run.plan.account != NULL && idem_role_write(&run.role, run.out) < 0))
		idem_die(IDEM_EXIT_ENV, "holding the rows:");
	write_evidence();
	if (fflush(run.out) != 0 || fseek(run.out, 0, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "holding the rows:");
}

/* Copies what was held to standard output. */
static void
copy_out(FILE *from, const char *what)
{
	if (idem_copy_stream(from, stdout) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", ferror(from) ? what : "write error on standard output");
}

static void
free_all(struct options *o)
{
	size_t i;

	free(run.shell[2]);
	options_free(o);
	PQfinish(run.conn);
	idem_queue_close(&run.q);
	idem_vendor_free(run.vendor);
	spans_free();
	external_free();
	free(run.database_url);
	idem_pg_observed_free(&run.here);
	for (i = 0; i < run.plan.nkills; i++)
		free(run.kills[i].msg_id);
	free(run.kills);
	database_free();
	leases_free();
	stalls_free();
	free(run.races);
	idem_plan_free(&run.plan);
	idem_peer_sessions_free(&run.sessions);
	socket_close();
	idem_evidence_free(run.ev);
	idem_baseline_free(&run.base);
	idem_role_close(&run.role);
	for (i = 0; i < MAX_WORKERS; i++)
		free(run.workers[i].partial);
}

int
main(int argc, char *argv[])
{
	struct options o;
	FILE *hold;
	int rc, signal_rc;

	argv0 = "kill-at";
	argv[0] = (char *)argv0;
	options_parse(&o, argc, argv);
	hold = read_stream(&o);
	connect_sandbox(o.conninfo);
	setup_signals();
	database_install();
	leases_install();
	external_start();
	spans_start(o.no_spans);
	stalls_arm();
	socket_listen();
	workers_watchdog();
	/* -1: the baseline was the whole run */
	if ((rc = run_baseline(o.deadline_ms * 1000)) == 0)
		rc = conduct(o.deadline_ms * 1000);
	else if (rc < 0)
		rc = 0;
	/* a late answer due is waited for, a signal still heard meanwhile */
	while (rc <= 128 && run.vendor != NULL && idem_vendor_late_wait(run.vendor, 100000))
		if ((signal_rc = read_signals()) > 128)
			rc = signal_rc;
	if (rc > 128)
		idem_warn("stopped by signal %d; workers stopped", rc - 128);
	else
		hold_rows();
	database_remove();
	if (run.out != NULL) {
		copy_out(hold, "holding the stream");
		copy_out(run.out, "holding the rows");
		fclose(run.out);
	}
	fclose(hold);
	free_all(&o);
	idem_close_stdout();
	return rc;
}
