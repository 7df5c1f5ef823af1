/* evidence-join: the attempt and recover rows of the evidence module,
 * from deliveries, ledger writes, sessions, steps and lines made up here,
 * joined by the database of the environment (PG* variables) as kill-at(1)
 * has it join them. Prints what failed; exit 1 when something did. Not
 * installed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kill-at/evidence.h"
#include "pg.h"
#include "../unit/unit.h"
#include "error.h"

#define S 1796000000000000LL	/* a second of the run, in microseconds */
#define T(s) (S + (long long)((s) * 1000000))

static PGconn *conn;

/* The rows the evidence writes, as text. */
static char *
rows(struct idem_evidence *ev)
{
	struct idem_error err;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (idem_evidence_write(ev, conn, f, &err) < 0)
		idem_die_error(&err);
	fclose(f);
	idem_evidence_free(ev);
	return buf;
}

/* Checks the rows the evidence writes against want, then frees it. */
static void
check_rows(struct idem_evidence *ev, const char *want, const char *name)
{
	char *out = rows(ev);

	CHECK_STR(out, want, name);
	free(out);
}

static void
line(struct idem_evidence *ev, const char *text)
{
	idem_evidence_log(ev, T(2), 0, 11, text, strlen(text));
}

static struct idem_failpoint_write
w(const char *xid, int backend, int update, const char *key, double at, double commit)
{
	struct idem_failpoint_write x = { xid, backend, update, key, T(at), T(commit) };

	return x;
}

/* The committed writes of the effect table, made with w(). */
#define LEDGER(ev, ...) do {                                                  \
	const struct idem_failpoint_write writes_[] = { __VA_ARGS__ };        \
	idem_evidence_ledger((ev), writes_, sizeof(writes_) / sizeof(writes_[0])); \
} while (0)

/* Killed after an insert and an update of the row it wrote; the retry
 * updates the row again: the first attempt wrote it, the retry only
 * updated it */
static void
written_by_transaction(void)
{
	struct idem_evidence *ev = idem_evidence_new();

	idem_evidence_delivery(ev, "1", "a", "K", 1, T(0), 100, 0);
	idem_evidence_delivery(ev, "1", "a", "K", 2, T(5), 101, T(6));
	LEDGER(ev, w("700", 100, 0, "K", 1, 1.5), w("701", 100, 1, "K", 2, 2.5),
	    w("702", 101, 1, "K", 5.5, 5.6));
	idem_evidence_backend(ev, 100, T(-1), 0, 4000);
	idem_evidence_backend(ev, 101, T(4), 0, 4001);
	idem_evidence_kill(ev, "kill", "a", 1, "after-commit", "1", 4000, T(3), "database");
	check_rows(ev,
	    "kill\tkill\ta\t1\tafter-commit\t4000\t2026-11-30T00:53:23.000000Z\tdatabase\n"
	    "attempt\ta\t1\t1\t4000\t2026-11-30T00:53:20.000000Z\t2026-11-30T00:53:22.500000Z\t\\N\t1\t\\N\t2026-11-30T00:53:21.000000Z\t1\n"
	    "attempt\ta\t1\t2\t4001\t2026-11-30T00:53:25.000000Z\t2026-11-30T00:53:25.600000Z\t2026-11-30T00:53:26.000000Z\t0\t\\N\t2026-11-30T00:53:25.500000Z\t1\n"
	    "recover\ta\t1\t2026-11-30T00:53:23.000000Z\t2026-11-30T00:53:26.000000Z\t3000\n",
	    "rows written are counted by transaction; an update is not a new row");
}

/* Two workers race on one key, each reading and writing on its own
 * session: each write goes to its own delivery, whatever the times */
static void
race_by_session(void)
{
	struct idem_evidence *ev = idem_evidence_new();

	idem_evidence_delivery(ev, "1", "a", "K", 1, T(0), 100, T(9));
	idem_evidence_delivery(ev, "2", "a", "K", 1, T(1), 200, T(8));
	LEDGER(ev, w("800", 200, 0, "K", 2, 3), w("801", 100, 0, "K", 4, 5));
	check_rows(ev,
	    "attempt\ta\t1\t1\t\\N\t2026-11-30T00:53:20.000000Z\t2026-11-30T00:53:25.000000Z\t2026-11-30T00:53:29.000000Z\t1\t\\N\t2026-11-30T00:53:24.000000Z\t0\n"
	    "attempt\ta\t2\t1\t\\N\t2026-11-30T00:53:21.000000Z\t2026-11-30T00:53:23.000000Z\t2026-11-30T00:53:28.000000Z\t1\t\\N\t2026-11-30T00:53:22.000000Z\t0\n",
	    "a write belongs to the delivery its session took");
}

/* A worker that reads on one session and writes on another: the write
 * goes to the delivery its worker took, not to a later one of another
 * worker */
static void
another_session_of_the_worker(void)
{
	struct idem_evidence *ev = idem_evidence_new();

	idem_evidence_delivery(ev, "1", "a", "K", 1, T(0), 300, 0);
	idem_evidence_delivery(ev, "2", "a", "K", 1, T(1), 400, 0);
	idem_evidence_backend(ev, 300, T(-1), 1, 5000);
	idem_evidence_backend(ev, 301, T(-1), 1, 5000);
	idem_evidence_backend(ev, 400, T(-1), 2, 6000);
	LEDGER(ev, w("900", 301, 0, "K", 2, 3));
	check_rows(ev,
	    "attempt\ta\t1\t1\t5000\t2026-11-30T00:53:20.000000Z\t2026-11-30T00:53:23.000000Z\t\\N\t1\t\\N\t2026-11-30T00:53:22.000000Z\t0\n"
	    "attempt\ta\t2\t1\t6000\t2026-11-30T00:53:21.000000Z\t\\N\t\\N\t0\t\\N\t\\N\t0\n",
	    "a write on another session of the same worker");
}

/* Without a ledger, rows are unknown; steps and branch lines of the
 * socket name the process and the branch */
static void
socket_steps_kills_and_lines(void)
{
	struct idem_evidence *ev = idem_evidence_new();

	idem_evidence_delivery(ev, "1", "a", "K", 1, T(0), 100, 0);
	idem_evidence_delivery(ev, "2", "a", "K", 1, T(1), 100, T(2));
	idem_evidence_step(ev, T(0.1), 0, 11, "consumed", "a", 1, "go", "socket");
	idem_evidence_step(ev, T(1.1), 1, 12, "consumed", "a", 1, "go", "socket");
	line(ev, "branch=inserted job=a attempt=1 msg_id=1");
	line(ev, "branch=conflict-noop job=a attempt=1 msg_id=2");
	line(ev, "branch=called job=a attempt=1");
	line(ev, "no branch here job=a attempt=1");
	line(ev, "not UTF-8: \xff");
	idem_evidence_kill(ev, "-k", "a", 1, "after-commit", NULL, 11, T(1.5), "socket");
	check_rows(ev,
	    "step\t2026-11-30T00:53:20.100000Z\t0\t11\tconsumed\ta\t1\tgo\tsocket\n"
	    "step\t2026-11-30T00:53:21.100000Z\t1\t12\tconsumed\ta\t1\tgo\tsocket\n"
	    "kill\t-k\ta\t1\tafter-commit\t11\t2026-11-30T00:53:21.500000Z\tsocket\n"
	    "log\t2026-11-30T00:53:22.000000Z\t0\t11\tbranch=inserted job=a attempt=1 msg_id=1\n"
	    "log\t2026-11-30T00:53:22.000000Z\t0\t11\tbranch=conflict-noop job=a attempt=1 msg_id=2\n"
	    "log\t2026-11-30T00:53:22.000000Z\t0\t11\tbranch=called job=a attempt=1\n"
	    "log\t2026-11-30T00:53:22.000000Z\t0\t11\tno branch here job=a attempt=1\n"
	    "log\t2026-11-30T00:53:22.000000Z\t0\t11\tnot UTF-8: ?\n"
	    "attempt\ta\t1\t1\t11\t2026-11-30T00:53:20.000000Z\t\\N\t\\N\t\\N\tinserted called\t\\N\t\\N\n"
	    "attempt\ta\t2\t1\t12\t2026-11-30T00:53:21.000000Z\t\\N\t2026-11-30T00:53:22.000000Z\t\\N\tconflict-noop called\t\\N\t\\N\n"
	    "recover\ta\t1\t2026-11-30T00:53:21.500000Z\t\\N\t\\N\n",
	    "steps, kills and lines as they came; a socket kill goes to the delivery its process consumed");
}

/* The lines of two workers about one job and attempt, interleaved:
 * the names in the order the lines came, whoever wrote them */
static void
lines_of_two_workers(void)
{
	struct idem_evidence *ev = idem_evidence_new();
	char *out;

	idem_evidence_delivery(ev, "1", "a", "K", 1, T(0), 100, 0);
	idem_evidence_log(ev, T(1), 0, 11, "branch=inserted job=a attempt=1", 31);
	idem_evidence_log(ev, T(1), 1, 12, "branch=conflict-noop job=a attempt=1", 36);
	idem_evidence_log(ev, T(1), 0, 11, "branch=called job=a attempt=1", 29);
	idem_evidence_log(ev, T(1), 1, 12, "branch=acked job=a attempt=2", 28);
	idem_evidence_log(ev, T(1), 1, 12, "branch=late job=a attempt=1", 27);
	out = rows(ev);
	CHECK(strstr(out, "\tinserted conflict-noop called late\t") != NULL,
	    "branch lines of several workers keep their order");
	free(out);
}

/* A worker that writes branch lines of one delivery without end: every name
 * comes back, in order, however many rows they took */
static void
lines_without_end(void)
{
	struct idem_evidence *ev = idem_evidence_new();
	char text[64], *want = malloc(3000 * 8 + 2), *w = want, *out;
	int i;

	idem_evidence_delivery(ev, "1", "a", "K", 1, T(0), 100, 0);
	for (i = 0; i < 3000; i++) {
		snprintf(text, sizeof(text), "branch=b%d job=a attempt=1", i);
		idem_evidence_log(ev, T(1), 0, 11, text, strlen(text));
		w += sprintf(w, "%cb%d", i ? ' ' : '\t', i);
	}
	strcpy(w, "\t");
	out = rows(ev);
	CHECK(strstr(out, want) != NULL, "3,000 branch lines of one delivery, in order");
	free(want);
	free(out);
}

/* A worker on another library knows the library's id, not the seed's
 * job: its lines go to the delivery of their message and attempt */
static void
lines_by_message(void)
{
	struct idem_evidence *ev = idem_evidence_new();
	char *out;

	idem_evidence_delivery(ev, "0f8c", "job-0001", "K", 1, T(0), 100, 0);
	idem_evidence_delivery(ev, "0f8c", "job-0001", "K", 2, T(1), 100, T(2));
	line(ev, "branch=inserted job=0f8c attempt=1 msg_id=0f8c");
	line(ev, "branch=conflict-noop job=0f8c attempt=2 msg_id=0f8c");
	out = rows(ev);
	CHECK(strstr(out, "attempt\tjob-0001\t0f8c\t1\t\\N\t2026-11-30T00:53:20.000000Z\t\\N\t\\N\t\\N\tinserted\t") != NULL &&
	    strstr(out, "attempt\tjob-0001\t0f8c\t2\t\\N\t2026-11-30T00:53:21.000000Z\t\\N\t2026-11-30T00:53:22.000000Z\t\\N\tconflict-noop\t") != NULL,
	    "branch lines by message and attempt");
	free(out);
}

int
main(void)
{
	struct idem_error err;

	argv0 = "evidence-join";
	if ((conn = idem_pg_connect("", &err)) == NULL)
		idem_die_error(&err);
	written_by_transaction();
	race_by_session();
	another_session_of_the_worker();
	socket_steps_kills_and_lines();
	lines_of_two_workers();
	lines_without_end();
	lines_by_message();
	PQfinish(conn);
	return unit_done("evidence-join");
}
