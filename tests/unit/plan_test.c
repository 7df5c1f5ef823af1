#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kill-at/baseline.h"
#include "kill-at/failpoint.h"
#include "kill-at/plan.h"
#include "unit.h"
#include "file.h"

#define STREAM "tests/fixtures/streams/good.tsv"
#define VENDOR_STREAM "tests/fixtures/streams/vendor-answers.tsv"

/* Reads a stream with -k options into p; the stream held is compared
 * with the file, byte for byte. */
static int
read_stream(const char *name, struct idem_plan *p, char *const *options, size_t n,
	    int all_jobs, struct idem_error *err)
{
	struct idem_baseline base;
	FILE *in = fopen(name, "r"), *hold = tmpfile();
	char *want, *got;
	size_t want_len, got_len;
	int rc;

	memset(p, 0, sizeof(*p));
	idem_baseline_init(&base);
	rc = idem_plan_read(p, in, "stdin", hold, options, n, all_jobs, &base, err);
	idem_baseline_free(&base);
	fclose(in);
	fflush(hold);
	want = idem_read_file(name, &want_len, err);
	got = idem_emalloc(want_len + 1);
	rewind(hold);
	got_len = fread(got, 1, want_len + 1, hold);
	CHECK(rc < 0 || (got_len == want_len && memcmp(got, want, want_len) == 0),
	    "every line is held as it came");
	free(want);
	free(got);
	fclose(hold);
	return rc;
}

static int
read_good(struct idem_plan *p, char *const *options, size_t n, int all_jobs,
	  struct idem_error *err)
{
	return read_stream(STREAM, p, options, n, all_jobs, err);
}

/* The vendor's answers: a lost and a late reply are faults of the first
 * call that takes effect, by business key, the late one with its delay;
 * forgotten keys are a kill point, as a kill scenario's, with its window. */
static void
vendor_answers(void)
{
	struct idem_error err;
	struct idem_plan p;

	CHECK(read_stream(VENDOR_STREAM, &p, NULL, 0, 0, &err) == 0, "the vendor's stream reads");
	CHECK(p.nscenarios == 3 && p.scenario_vendor_ms[1] == 3000 &&
	    p.scenario_vendor_ms[2] == 86400000 && p.scenario_vendor_ms[0] == 0,
	    "each scenario's vendor_ms, 0 for none");
	CHECK(idem_plan_make(&p, NULL, 0, NULL, &err) == 0, "the vendor's plan is made");
	CHECK(p.nfaults == 2, "two faults of the first call");
	CHECK(strcmp(p.faults[0].business_key, "[\"inv-1001\",1]") == 0 &&
	    p.faults[0].fault == IDEM_VENDOR_LOST && p.faults[0].delay_ms == 0,
	    "a lost reply, with no delay");
	CHECK(strcmp(p.faults[1].business_key, "[\"inv-1002\",1]") == 0 &&
	    p.faults[1].fault == IDEM_VENDOR_LATE && p.faults[1].delay_ms == 3000,
	    "a late reply, with its delay");
	CHECK(p.nkills == 1, "forgotten keys make one kill point");
	CHECK(strcmp(p.kills[0].scenario, "keys-forgotten") == 0 &&
	    strcmp(p.kills[0].job_id, "job-0003") == 0 &&
	    strcmp(p.kills[0].step, "external-call") == 0 && p.kills[0].attempt == 1,
	    "at its step and attempt, for its job");
	CHECK(p.kills[0].forget_ms == 86400000, "with the vendor's window");
	CHECK(idem_plan_database_steps(&p) == 1u << idem_failpoint_step("external-call"),
	    "the kill's point, as any kill's");
	idem_plan_free(&p);
}

int
main(void)
{
	char *kill[] = { "before-write:job-0006:2" }, *bad[] = { "before-write:job-0009:1" },
	    *no_attempt[] = { "before-write:job-0006:0" }, *short_spec[] = { "job-0006:1" };
	const char **names, **job_ids;
	struct idem_error err;
	struct idem_plan p;
	size_t n;

	CHECK(read_good(&p, kill, 1, 0, &err) == 0, "the good stream reads");
	CHECK_STR(p.queue, "rehearsal_invoice_line", "the seed's queue");
	CHECK_STR(p.queue_kind, "idem", "idem's queue when the seed names no kind");
	CHECK(p.nscenarios == 2 && p.msgs.n == 4, "two scenarios, four messages");
	CHECK(p.njobs == 3, "the jobs of a scenario and the job -k names");
	CHECK(idem_plan_job(&p, "job-0001")->copies == 2, "a duplicated job has its two copies");
	CHECK(idem_plan_make(&p, kill, 1, NULL, &err) == 0, "the plan is made");
	CHECK(p.nkills == 2 && p.nraces == 0, "a kill point of the scenario and one of -k");
	CHECK_STR(p.kills[0].scenario, "kill-after-commit", "the scenario's first");
	CHECK(strcmp(p.kills[0].step, "after-commit") == 0 && p.kills[0].attempt == 1,
	    "at its step and attempt");
	CHECK(strcmp(p.kills[1].scenario, "-k") == 0 && p.kills[1].attempt == 2 &&
	    strcmp(p.kills[1].job_id, "job-0006") == 0, "then -k's, as it was given");
	CHECK(idem_plan_database_steps(&p) ==
	    (1u << IDEM_FAILPOINT_AFTER_COMMIT | 1u << IDEM_FAILPOINT_BEFORE_WRITE),
	    "the database points of both steps");
	idem_plan_steps(&p, &names, &job_ids, &n);
	CHECK(n == 2 && strcmp(names[1], "before-write") == 0 && strcmp(job_ids[1], "job-0006") == 0,
	    "the step plan names each kill point");
	free(names);
	free(job_ids);
	idem_plan_free(&p);

	/* -r races every key published twice, with every job kept */
	CHECK(read_good(&p, NULL, 0, 1, &err) == 0 && p.njobs == 3, "with -r every job is kept");
	CHECK(idem_plan_make(&p, NULL, 0, "before-write", &err) == 0 && p.nraces == 1,
	    "one race");
	CHECK(strcmp(p.races[0].business_key, "[\"inv-1001\",1]") == 0 &&
	    strcmp(p.races[0].step, "before-write") == 0, "on the duplicated key, at -r's step");
	idem_plan_steps(&p, &names, &job_ids, &n);
	CHECK(n == 3 && strcmp(names[2], "acked") == 0, "the race's step and its acked");
	free(names);
	free(job_ids);
	idem_plan_free(&p);

	CHECK(read_good(&p, bad, 1, 0, &err) == 0, "a -k of no job reads");
	CHECK(idem_plan_make(&p, bad, 1, NULL, &err) == -1 && err.status == IDEM_EXIT_USAGE,
	    "but makes no plan");
	CHECK_STR(err.text, "-k before-write:job-0009:1: no job job-0009 in the stream",
	    "naming the option and the job");
	idem_plan_free(&p);
	read_good(&p, no_attempt, 1, 0, &err);
	CHECK(idem_plan_make(&p, no_attempt, 1, NULL, &err) == -1, "attempt 0 is refused");
	CHECK_STR(err.text, "-k before-write:job-0006:0: the attempt is a number from 1",
	    "with its reason");
	idem_plan_free(&p);
	read_good(&p, short_spec, 1, 0, &err);
	CHECK(idem_plan_make(&p, short_spec, 1, NULL, &err) == -1, "two fields are refused");
	CHECK_STR(err.text, "-k job-0006:1: expected step:job:attempt", "with the form expected");
	idem_plan_free(&p);
	vendor_answers();
	return unit_done("plan");
}
