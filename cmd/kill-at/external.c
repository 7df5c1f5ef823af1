/* external.c: the kill points at the external call (external.h) */
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "database.h"
#include "external.h"
#include "stall.h"
#include "workers.h"
#include "text.h"

static const char VENDOR[] = "vendor";

/* A key the vendor forgot: a forgot row. A few a run, as the kills. */
static struct forgot {
	long long at;
	char *business_key, *idempotency_key;
	long first_call;
	long long window_ms;
} *forgot;
static size_t nforgot;

static void
arm_vendor(const char *business_key)
{
	size_t i;

	for (i = 0; i < run.plan.nkills; i++)
		if (!run.kills[i].fired && strcmp(run.kills[i].plan->step, "external-call") == 0 &&
		    strcmp(idem_plan_job(&run.plan, run.kills[i].plan->job_id)->business_key,
		    business_key) == 0) {
			idem_vendor_arm(run.vendor, business_key);
			return;
		}
}

static void
handle_vendor_call(const struct idem_vendor_held *h)
{
	struct idem_failpoint_delivery d;
	struct kill_point *kp = NULL;
	struct idem_error err;
	size_t nsame = 0;
	int *same = idem_peer_backends(&run.sessions, h->worker, &nsame);

	if (idem_failpoint_delivery(run.fp, h->business_key, -1, same, nsame, &d, &err) < 0)
		idem_die_error(&err);
	free(same);
	if (d.job_id != NULL)
		kp = kill_for("external-call", d.job_id, d.attempt);
	if (kp == NULL && d.job_id != NULL && stall_reached("external-call", d.job_id, d.attempt,
	    &(struct held){ .observed = VENDOR, .call = h->id, .worker = h->worker, .pid = h->pid,
	    .msg_id = d.msg_id })) {
		/* held: the redelivered attempt's call finds the key armed no more */
	} else if (kp == NULL) {
		record_step(h->worker, h->pid, "external-call", d.job_id ? d.job_id : "", d.attempt,
		    "go", VENDOR);
		idem_vendor_release(run.vendor, h->id, 0);
	} else {
		kill_point_reached(kp, h->worker, h->pid, d.msg_id, VENDOR);
		workers_kill(h->worker, h->pid);
		idem_vendor_release(run.vendor, h->id, 1);
	}
	arm_vendor(h->business_key);
	free(d.job_id);
	free(d.msg_id);
}

void
external_watch(void)
{
	struct idem_vendor_held held[MAX_WORKERS];
	size_t n, i;

	if (run.vendor == NULL)
		return;
	idem_vendor_drain(run.vendor);
	n = idem_vendor_held(run.vendor, held, MAX_WORKERS);
	if (n > 0)
		database_watch_sessions();
	for (i = 0; i < n; i++) {
		if (!stall_holds_call(held[i].id))
			handle_vendor_call(&held[i]);
		free(held[i].business_key);
	}
}

void
external_start(void)
{
	struct idem_error err;
	size_t i;

	if (run.plan.external_name == NULL)
		return;
	if ((run.vendor = idem_vendor_start(run.plan.external_name, run.plan.external_key_fields,
	    run.plan.honours_idempotency_key, &err)) == NULL)
		idem_die_error(&err);
	for (i = 0; i < run.plan.nfaults; i++)
		idem_vendor_fault(run.vendor, run.plan.faults[i].business_key, run.plan.faults[i].fault,
		    run.plan.faults[i].delay_ms);
	for (i = 0; i < run.plan.nkills; i++)
		if (strcmp(run.kills[i].plan->step, "external-call") == 0)
			arm_vendor(idem_plan_job(&run.plan, run.kills[i].plan->job_id)->business_key);
}

void
external_forget(const char *business_key, long long window_ms, long long at_us)
{
	struct idem_vendor_forgot *keys;
	size_t n, i;

	if (run.vendor == NULL)
		return;
	n = idem_vendor_forget(run.vendor, business_key, &keys);
	for (i = 0; i < n; i++) {
		forgot = idem_ereallocarray(forgot, nforgot + 1, sizeof(*forgot));
		forgot[nforgot++] = (struct forgot){ at_us, idem_estrdup(business_key),
		    keys[i].idempotency_key, keys[i].first_call, window_ms };
	}
	free(keys);
}

int
external_write_forgot(FILE *out)
{
	size_t i;

	for (i = 0; i < nforgot; i++)
		if (idem_evidence_forgot(out, forgot[i].at, forgot[i].business_key,
		    forgot[i].idempotency_key, forgot[i].first_call, forgot[i].window_ms) < 0)
			return -1;
	return 0;
}

void
external_free(void)
{
	size_t i;

	for (i = 0; i < nforgot; i++) {
		free(forgot[i].business_key);
		free(forgot[i].idempotency_key);
	}
	free(forgot);
	forgot = NULL;
	nforgot = 0;
}
