/* plan.c: kill-at's plan, read from its stream and options (plan.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "failpoint.h"
#include "plan.h"
#include "seed.h"
#include "tsv.h"

static const char *
field_or(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

static long
find_scenario(const struct idem_plan *p, const char *name)
{
	size_t i;

	for (i = 0; i < p->nscenarios; i++)
		if (strcmp(p->scenario_names[i], name) == 0)
			return (long)i;
	return -1;
}

const struct idem_plan_job *
idem_plan_job(const struct idem_plan *p, const char *id)
{
	size_t i = idem_map_get(&p->job_index, id);

	return i == IDEM_MAP_NONE ? NULL : &p->jobs[i];
}

/* Whether -k names the job. */
static int
named_by_option(const char *job_id, char *const *kill_options, size_t nkill_options)
{
	size_t i, len = strlen(job_id);

	for (i = 0; i < nkill_options; i++) {
		const char *first = strchr(kill_options[i], ':'), *last = strrchr(kill_options[i], ':');

		if (first != NULL && last == first + 1 + len && strncmp(first + 1, job_id, len) == 0)
			return 1;
	}
	return 0;
}

static void
seed_row(struct idem_plan *p, struct idem_baseline *base, const struct idem_tsv_reader *r)
{
	p->queue = idem_estrdup(r->fields[SEED_QUEUE]);
	p->queue_kind = idem_estrdup(field_or(r->fields[SEED_QUEUE_KIND], "idem"));
	if (r->fields[SEED_ADAPTER] != NULL) {
		p->adapter = idem_estrdup(r->fields[SEED_ADAPTER]);
		p->adapter_sha256 = idem_estrdup(r->fields[SEED_ADAPTER_SHA256]);
	}
	p->owner = idem_estrdup(field_or(r->fields[SEED_RECONCILIATION_OWNER], ""));
	p->effect_table = idem_estrdup(r->fields[SEED_EFFECT_TABLE]);
	p->key_columns = idem_estrdup(r->fields[SEED_KEY_COLUMNS]);
	if (r->fields[SEED_WORKER_COMMAND])
		p->worker_command = idem_estrdup(r->fields[SEED_WORKER_COMMAND]);
	p->visibility_timeout_ms = idem_tsv_number(r, SEED_VISIBILITY_TIMEOUT_MS, 0);
	p->max_attempts = idem_tsv_number(r, SEED_MAX_ATTEMPTS, 0);
	base->job_scope = strcmp(r->fields[SEED_KEY_SCOPE], "job") == 0;
	if (r->fields[SEED_DATABASE])
		p->database = idem_estrdup(r->fields[SEED_DATABASE]);
	if (r->fields[SEED_SANDBOX_ACCOUNT] && *r->fields[SEED_SANDBOX_ACCOUNT])
		p->account = idem_estrdup(r->fields[SEED_SANDBOX_ACCOUNT]);
}

static void
scenario_row(struct idem_plan *p, const struct idem_tsv_reader *r)
{
	size_t n = p->nscenarios;

	p->scenario_names = idem_ereallocarray(p->scenario_names, n + 1, sizeof(char *));
	p->scenario_faults = idem_ereallocarray(p->scenario_faults, n + 1, sizeof(char *));
	p->scenario_steps = idem_ereallocarray(p->scenario_steps, n + 1, sizeof(char *));
	p->scenario_untils = idem_ereallocarray(p->scenario_untils, n + 1, sizeof(char *));
	p->scenario_attempts = idem_ereallocarray(p->scenario_attempts, n + 1, sizeof(long long));
	p->scenario_vendor_ms = idem_ereallocarray(p->scenario_vendor_ms, n + 1, sizeof(long long));
	p->scenario_names[n] = idem_estrdup(r->fields[SCENARIO_NAME]);
	p->scenario_faults[n] = idem_estrdup(r->fields[SCENARIO_FAULT]);
	p->scenario_steps[n] = r->fields[SCENARIO_STEP] ? idem_estrdup(r->fields[SCENARIO_STEP]) : NULL;
	p->scenario_untils[n] = r->fields[SCENARIO_UNTIL] ? idem_estrdup(r->fields[SCENARIO_UNTIL]) :
	    NULL;
	p->scenario_attempts[n] = idem_tsv_number(r, SCENARIO_ATTEMPT, 0);
	p->scenario_vendor_ms[n] = idem_tsv_number(r, SCENARIO_VENDOR_MS, 0);
	p->nscenarios++;
}

static void
job_row(struct idem_plan *p, const struct idem_tsv_reader *r)
{
	struct idem_plan_job *job;

	p->jobs = idem_ereallocarray(p->jobs, p->njobs + 1, sizeof(*p->jobs));
	job = &p->jobs[p->njobs];
	job->id = idem_estrdup(r->fields[JOB_ID]);
	job->business_key = idem_estrdup(r->fields[JOB_BUSINESS_KEY]);
	job->scenario = r->fields[JOB_SCENARIO] ? find_scenario(p, r->fields[JOB_SCENARIO]) : -1;
	job->copies = 0;
	job->first_msg = IDEM_MAP_NONE;
	idem_map_put(&p->job_index, job->id, p->njobs);
	p->njobs++;
}

/* A message of a job kept, last of its job's. */
static void
planned_msg(struct idem_plan *p, size_t job, const struct idem_tsv_reader *r)
{
	size_t last = IDEM_MAP_NONE, i;

	/* an index, not a pointer: the array moves as it grows */
	for (i = p->jobs[job].first_msg; i != IDEM_MAP_NONE; i = p->planned[i].next)
		last = i;
	p->planned = idem_ereallocarray(p->planned, p->nplanned + 1, sizeof(*p->planned));
	p->planned[p->nplanned] = (struct idem_plan_msg){ idem_estrdup(r->fields[PUBLISH_MSG_ID]),
	    job, idem_tsv_number(r, PUBLISH_COPY, 0), IDEM_MAP_NONE };
	idem_map_put(&p->msg_index, p->planned[p->nplanned].msg_id, p->nplanned);
	if (last == IDEM_MAP_NONE)
		p->jobs[job].first_msg = p->nplanned;
	else
		p->planned[last].next = p->nplanned;
	p->nplanned++;
	p->jobs[job].copies++;
}

size_t
idem_plan_msg(const struct idem_plan *p, const char *msg_id)
{
	return idem_map_get(&p->msg_index, msg_id);
}

const struct idem_plan_race *
idem_plan_race(const struct idem_plan *p, const char *business_key)
{
	size_t i = idem_map_get(&p->race_index, business_key);

	return i == IDEM_MAP_NONE ? NULL : &p->races[i];
}

int
idem_plan_read(struct idem_plan *p, FILE *in, const char *name, FILE *hold,
	       char *const *kill_options, size_t nkill_options, int all_jobs,
	       struct idem_baseline *base, struct idem_error *err)
{
	struct idem_tsv_reader r;
	size_t i;
	int rc;

	idem_tsv_reader_init(&r, in, name);
	while ((rc = idem_tsv_next(&r, err)) > IDEM_TSV_EOF) {
		if (idem_tsv_pass(hold, &r) < 0) {
			rc = idem_error_set(err, IDEM_EXIT_ENV, "holding the stream: %s", strerror(errno));
			break;
		}
		if (rc != IDEM_TSV_ROW)
			continue;
		switch (r.kind) {
		case IDEM_KIND_SEED:
			seed_row(p, base, &r);
			break;
		case IDEM_KIND_EXTERNAL:
			p->external_name = idem_estrdup(r.fields[EXTERNAL_NAME]);
			p->external_key_fields = idem_estrdup(r.fields[EXTERNAL_KEY_FIELDS]);
			p->honours_idempotency_key =
			    strcmp(r.fields[EXTERNAL_HONOURS_IDEMPOTENCY_KEY], "true") == 0;
			break;
		case IDEM_KIND_SCENARIO:
			scenario_row(p, &r);
			break;
		case IDEM_KIND_DATABASE:
			idem_pg_observed_from(&p->stream_db, &r.fields[DATABASE_SANDBOX_ID]);
			p->have_stream_db = 1;
			break;
		case IDEM_KIND_JOB:
			idem_baseline_job(base, r.fields[JOB_ID], r.fields[JOB_BUSINESS_KEY],
			    r.fields[JOB_SCENARIO] != NULL);
			if (all_jobs || r.fields[JOB_SCENARIO] != NULL ||
			    named_by_option(r.fields[JOB_ID], kill_options, nkill_options))
				job_row(p, &r);
			break;
		case IDEM_KIND_PUBLISH:
			idem_text_array_add(&p->msgs, r.fields[PUBLISH_MSG_ID]);
			idem_baseline_message(base, r.fields[PUBLISH_JOB_ID], r.fields[PUBLISH_MSG_ID]);
			if ((i = idem_map_get(&p->job_index, r.fields[PUBLISH_JOB_ID])) != IDEM_MAP_NONE)
				planned_msg(p, i, &r);
			break;
		default:
			break;
		}
	}
	idem_tsv_reader_free(&r);
	if (rc < 0)
		return -1;
	if (p->msgs.n == 0)
		return idem_error_set(err, IDEM_EXIT_USAGE,
		    "%s: no publish rows: put dup-publish before kill-at", name);
	return 0;
}

static void
add_kill(struct idem_plan *p, const char *scenario, const char *step, const char *job_id,
	 long long attempt, long long forget_ms)
{
	struct idem_plan_kill *kp;
	size_t n;

	p->kills = idem_ereallocarray(p->kills, p->nkills + 1, sizeof(*p->kills));
	kp = &p->kills[p->nkills++];
	kp->scenario = idem_estrdup(scenario);
	kp->step = idem_estrdup(step);
	kp->job_id = idem_estrdup(job_id);
	kp->attempt = attempt;
	kp->forget_ms = forget_ms;
	kp->next = IDEM_MAP_NONE;
	/* the kill points of a job, in the order planned */
	if ((n = idem_map_get(&p->kill_index, job_id)) == IDEM_MAP_NONE) {
		idem_map_put(&p->kill_index, job_id, p->nkills - 1);
		return;
	}
	while (p->kills[n].next != IDEM_MAP_NONE)
		n = p->kills[n].next;
	p->kills[n].next = p->nkills - 1;
}

/* One race a business key at most. */
static void
add_race(struct idem_plan *p, const char *scenario, const char *business_key, const char *step)
{
	if (idem_map_get(&p->race_index, business_key) != IDEM_MAP_NONE)
		return;
	idem_map_put(&p->race_index, business_key, p->nraces);
	p->races = idem_ereallocarray(p->races, p->nraces + 1, sizeof(*p->races));
	p->races[p->nraces].scenario = idem_estrdup(scenario);
	p->races[p->nraces].business_key = idem_estrdup(business_key);
	p->races[p->nraces].step = idem_estrdup(step);
	p->nraces++;
}

static void
add_stall(struct idem_plan *p, size_t s, const char *job_id)
{
	p->stalls = idem_ereallocarray(p->stalls, p->nstalls + 1, sizeof(*p->stalls));
	p->stalls[p->nstalls++] = (struct idem_plan_stall){ idem_estrdup(p->scenario_names[s]),
	    idem_estrdup(p->scenario_steps[s]), idem_estrdup(job_id),
	    p->scenario_untils[s] ? idem_estrdup(p->scenario_untils[s]) : NULL,
	    p->scenario_attempts[s] ? p->scenario_attempts[s] : 1 };
}

/* The vendor faults of a scenario's first call, by the scenario's fault. */
static const struct {
	const char *name;
	enum idem_vendor_fault fault;
} vendor_faults[] = {
	{ "vendor-error", IDEM_VENDOR_ERROR }, { "vendor-timeout", IDEM_VENDOR_TIMEOUT },
	{ "vendor-lost-reply", IDEM_VENDOR_LOST }, { "vendor-late-reply", IDEM_VENDOR_LATE },
};

static void
add_fault(struct idem_plan *p, const char *business_key, const char *fault, long long delay_ms)
{
	size_t i;

	for (i = 0; i < sizeof(vendor_faults) / sizeof(vendor_faults[0]); i++)
		if (strcmp(fault, vendor_faults[i].name) == 0)
			break;
	if (i == sizeof(vendor_faults) / sizeof(vendor_faults[0]))
		return;
	p->faults = idem_ereallocarray(p->faults, p->nfaults + 1, sizeof(*p->faults));
	p->faults[p->nfaults++] = (struct idem_plan_fault){ idem_estrdup(business_key),
	    vendor_faults[i].fault, vendor_faults[i].fault == IDEM_VENDOR_LATE ? delay_ms : 0 };
}

static int
key_published_twice(const struct idem_plan *p, const char *business_key)
{
	size_t i, n = 0;

	for (i = 0; i < p->njobs; i++)
		if (strcmp(p->jobs[i].business_key, business_key) == 0)
			n += (size_t)p->jobs[i].copies;
	return n > 1;
}

/* A -k option, step:job:attempt, whose job may itself hold colons. */
static int
kill_option(struct idem_plan *p, const char *option, struct idem_error *err)
{
	char *spec = idem_estrdup(option), *first = strchr(spec, ':'), *last = strrchr(spec, ':'),
	    *end;
	long long attempt;
	int rc = -1;

	if (first == NULL || first == last || first == spec || last[1] == '\0') {
		idem_error_set(err, IDEM_EXIT_USAGE, "-k %s: expected step:job:attempt", option);
		goto out;
	}
	*first = *last = '\0';
	attempt = strtoll(last + 1, &end, 10);
	if (*end || attempt < 1)
		idem_error_set(err, IDEM_EXIT_USAGE, "-k %s: the attempt is a number from 1", option);
	else if (idem_plan_job(p, first + 1) == NULL)
		idem_error_set(err, IDEM_EXIT_USAGE, "-k %s: no job %s in the stream", option,
		    first + 1);
	else
		rc = 0;
	if (rc == 0)
		add_kill(p, "-k", spec, first + 1, attempt, 0);
out:
	free(spec);
	return rc;
}

int
idem_plan_make(struct idem_plan *p, char *const *kill_options, size_t nkill_options,
	       const char *race_step, struct idem_error *err)
{
	size_t i;

	for (i = 0; i < p->njobs; i++) {
		long s = p->jobs[i].scenario;

		if (s < 0)
			continue;
		/* a kill, as any, that makes the vendor forget once its lease ends */
		if (strcmp(p->scenario_faults[s], "vendor-forget-keys") == 0 &&
		    p->scenario_steps[s] != NULL)
			add_kill(p, p->scenario_names[s], p->scenario_steps[s], p->jobs[i].id,
			    p->scenario_attempts[s] ? p->scenario_attempts[s] : 1,
			    p->scenario_vendor_ms[s]);
		else if (strncmp(p->scenario_faults[s], "vendor-", 7) == 0)
			add_fault(p, p->jobs[i].business_key, p->scenario_faults[s],
			    p->scenario_vendor_ms[s]);
		else if (p->scenario_steps[s] == NULL)
			continue;
		else if (strcmp(p->scenario_faults[s], "kill") == 0)
			add_kill(p, p->scenario_names[s], p->scenario_steps[s], p->jobs[i].id,
			    p->scenario_attempts[s] ? p->scenario_attempts[s] : 1, 0);
		else if (strcmp(p->scenario_faults[s], "race") == 0)
			add_race(p, p->scenario_names[s], p->jobs[i].business_key,
			    race_step ? race_step : p->scenario_steps[s]);
		else if (strcmp(p->scenario_faults[s], "stall") == 0)
			add_stall(p, (size_t)s, p->jobs[i].id);
	}
	/* -r with no race scenario: race every key that has two deliveries */
	for (i = 0; race_step != NULL && p->nraces == 0 && i < p->njobs; i++)
		if (p->jobs[i].copies > 1 || key_published_twice(p, p->jobs[i].business_key))
			add_race(p, "-r", p->jobs[i].business_key, race_step);
	for (i = 0; i < nkill_options; i++)
		if (kill_option(p, kill_options[i], err) < 0)
			return -1;
	return 0;
}

unsigned
idem_plan_database_steps(const struct idem_plan *p)
{
	unsigned steps = 0;
	size_t i;

	for (i = 0; i < p->nkills; i++)
		steps |= 1u << idem_failpoint_step(p->kills[i].step);
	for (i = 0; i < p->nraces; i++)
		steps |= 1u << idem_failpoint_step(p->races[i].step);
	for (i = 0; i < p->nstalls; i++) {
		steps |= 1u << idem_failpoint_step(p->stalls[i].step);
		if (p->stalls[i].until != NULL)
			steps |= 1u << idem_failpoint_step(p->stalls[i].until);
	}
	return steps;
}

void
idem_plan_tell_baseline(const struct idem_plan *p, struct idem_baseline *base)
{
	size_t i;

	for (i = 0; i < p->nkills; i++)
		idem_baseline_fault_job(base, p->kills[i].job_id);
	for (i = 0; i < p->nraces; i++)
		idem_baseline_fault_key(base, p->races[i].business_key);
	for (i = 0; i < p->nfaults; i++)
		idem_baseline_fault_key(base, p->faults[i].business_key);
	for (i = 0; i < p->nstalls; i++)
		idem_baseline_fault_job(base, p->stalls[i].job_id);
}

void
idem_plan_steps(const struct idem_plan *p, const char ***names, const char ***job_ids,
		size_t *n)
{
	size_t most = p->nkills + 3 * p->nstalls + 2 * p->njobs + 1, i, r;
	struct idem_map race_of;	/* business key: its race */

	*names = idem_ereallocarray(NULL, most, sizeof(**names));
	*job_ids = idem_ereallocarray(NULL, most, sizeof(**job_ids));
	*n = 0;
	for (i = 0; i < p->nkills; i++) {
		(*names)[*n] = p->kills[i].step;
		(*job_ids)[(*n)++] = p->kills[i].job_id;
	}
	/* a stall's step, the step its redelivered attempt runs to, and the
	 * acked step that ends each of its attempts */
	for (i = 0; i < p->nstalls; i++) {
		(*names)[*n] = p->stalls[i].step;
		(*job_ids)[(*n)++] = p->stalls[i].job_id;
		if (p->stalls[i].until != NULL) {
			(*names)[*n] = p->stalls[i].until;
			(*job_ids)[(*n)++] = p->stalls[i].job_id;
		}
		(*names)[*n] = "acked";
		(*job_ids)[(*n)++] = p->stalls[i].job_id;
	}
	idem_map_init(&race_of);
	for (i = 0; i < p->nraces; i++)
		idem_map_put(&race_of, p->races[i].business_key, i);
	for (i = 0; p->nraces > 0 && i < p->njobs; i++) {
		if ((r = idem_map_get(&race_of, p->jobs[i].business_key)) == IDEM_MAP_NONE)
			continue;
		(*names)[*n] = p->races[r].step;
		(*job_ids)[(*n)++] = p->jobs[i].id;
		(*names)[*n] = "acked";
		(*job_ids)[(*n)++] = p->jobs[i].id;
	}
	idem_map_free(&race_of);
}

void
idem_plan_free(struct idem_plan *p)
{
	char *seed_texts[] = { p->queue, p->queue_kind, p->adapter, p->adapter_sha256, p->owner, p->effect_table, p->key_columns,
	    p->worker_command, p->account, p->external_name, p->external_key_fields, p->database };
	size_t i;

	idem_pg_observed_free(&p->stream_db);
	for (i = 0; i < sizeof(seed_texts) / sizeof(seed_texts[0]); i++)
		free(seed_texts[i]);
	idem_free_list(p->scenario_names, p->nscenarios);
	idem_free_list(p->scenario_faults, p->nscenarios);
	idem_free_list(p->scenario_steps, p->nscenarios);
	idem_free_list(p->scenario_untils, p->nscenarios);
	free(p->scenario_attempts);
	free(p->scenario_vendor_ms);
	for (i = 0; i < p->njobs; i++) {
		free(p->jobs[i].id);
		free(p->jobs[i].business_key);
	}
	free(p->jobs);
	idem_map_free(&p->job_index);
	free(p->msgs.text);
	for (i = 0; i < p->nplanned; i++)
		free(p->planned[i].msg_id);
	free(p->planned);
	idem_map_free(&p->msg_index);
	idem_map_free(&p->race_index);
	for (i = 0; i < p->nkills; i++) {
		free(p->kills[i].scenario);
		free(p->kills[i].step);
		free(p->kills[i].job_id);
	}
	free(p->kills);
	idem_map_free(&p->kill_index);
	for (i = 0; i < p->nraces; i++) {
		free(p->races[i].scenario);
		free(p->races[i].business_key);
		free(p->races[i].step);
	}
	free(p->races);
	for (i = 0; i < p->nstalls; i++) {
		free(p->stalls[i].scenario);
		free(p->stalls[i].step);
		free(p->stalls[i].job_id);
		free(p->stalls[i].until);
	}
	free(p->stalls);
	for (i = 0; i < p->nfaults; i++)
		free(p->faults[i].business_key);
	free(p->faults);
	memset(p, 0, sizeof(*p));
}
