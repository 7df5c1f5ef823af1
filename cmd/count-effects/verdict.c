/* verdict.c: the measures of count-effects(1), the pending calls, and
 * the verdict against the seed's expect */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "count-effects.h"
#include "pg.h"

void
measure_row(const char *name, const char *value, long long numerator, long long denominator,
	    const char *unit, int have_numerator)
{
	char n[32], d[32];
	const char *row[7];

	snprintf(n, sizeof(n), "%lld", numerator);
	snprintf(d, sizeof(d), "%lld", denominator);
	row[0] = name;
	row[1] = value;
	row[2] = have_numerator ? n : NULL;
	row[3] = d;
	row[4] = unit;
	row[5] = c.first_publish;
	row[6] = c.last_ack;
	write_row("measure", row, 7);
}

static int
by_number(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

void
measures(void)
{
	char value[64];
	long long reconciled = 0, *ms, n = 0;
	size_t i;

	if (c.njobs > 0) {
		snprintf(value, sizeof(value), "%.3f", (double)c.duplicates * 1000.0 / (double)c.njobs);
		measure_row("duplicate_effects_per_1000_jobs", value, c.duplicates, (long long)c.njobs,
		    "per 1000 accepted jobs", 1);
	}
	for (i = 0; i < c.nrecover; i++) {
		struct key_count *k = find_key(c.recover_keys[i]);

		if (c.recovery_ms[i] >= 0 && k != NULL && k->observed == k->expected)
			reconciled++;
	}
	if (c.nkills > 0)
		snprintf(value, sizeof(value), "%.3f", (double)reconciled * 100.0 / (double)c.nkills);
	measure_row("reconciled_jobs_per_100_failures", c.nkills > 0 ? value : NULL, reconciled,
	    (long long)c.nkills, "per 100 failures (kills)", 1);
	ms = idem_ereallocarray(NULL, c.nrecover + 1, sizeof(*ms));
	for (i = 0; i < c.nrecover; i++)
		if (c.recovery_ms[i] >= 0)
			ms[n++] = c.recovery_ms[i];
	qsort(ms, (size_t)n, sizeof(*ms), by_number);
	if (n > 0)
		snprintf(value, sizeof(value), "%lld", n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2);
	measure_row("recovery_ms_median", n > 0 ? value : NULL, 0, n, "ms from kill to clean retry ack", 0);
	if (n > 0)
		snprintf(value, sizeof(value), "%lld", ms[n - 1]);
	measure_row("recovery_ms_max", n > 0 ? value : NULL, 0, n, "ms from kill to clean retry ack", 0);
	free(ms);
	if (!c.have_external)
		return;
	if (c.post_keys > 0)
		snprintf(value, sizeof(value), "%.3f", (double)distinct_keys() / (double)c.post_keys);
	measure_row("external_keys_per_business_key", c.post_keys > 0 ? value : NULL, distinct_keys(),
	    c.post_keys, "distinct Idempotency-Keys (none counts as one) per business key called "
	    "with POST", 1);
}

/* The ids of a rekeyed key's calls, as "1, 4", the first ten of them. */
static void
call_list(const struct rekeyed_key *rk, char *buf, size_t size)
{
	size_t i, len = 0;
	int n;

	buf[0] = '\0';
	for (i = 0; i < rk->nids && i <= 10; i++) {
		if (i < 10)
			n = snprintf(buf + len, size - len, "%s%lld", i ? ", " : "", rk->ids[i]);
		else
			n = snprintf(buf + len, size - len, " and %zu more", rk->nids - 10);
		/* eleven numbers fit; a list cut short is still a list */
		if (n < 0 || (size_t)n >= size - len)
			return;
		len += (size_t)n;
	}
}

/* A business key rekeyed is a finding against a vendor that honours
 * keys: its one charge was luck. Against one that does not, its second
 * charge is a duplicate already; it is said, and is no finding by itself. */
static int
rekeyed_verdict(int rc)
{
	char calls[512];
	size_t i, shown = 0;

	for (i = 0; i < c.ncalls; i++) {
		const struct key_count *k = &c.calls[i];

		if (k->idempotency_keys != 2 || k->rekeyed == 0)
			continue;
		if (c.honours_keys)
			rc = IDEM_EXIT_FINDING;
		if (shown++ >= 10)
			continue;
		call_list(&c.rekeyed[k->rekeyed - 1], calls, sizeof(calls));
		idem_warn("external: business key %s changed its Idempotency-Key across calls %s: %s",
		    k->key, calls, c.honours_keys ?
		    "the vendor honours keys, so a single charge was luck" :
		    "the vendor does not honour keys, so this alone is no finding");
	}
	return rc;
}

/* A killed key without a row the owner owns, and another key with rows
 * not settled, are findings. */
static int
pending_verdict(int rc)
{
	static const char *const results[] = { "missing", "wrong-owner", "open" };
	size_t i, j, shown;

	if (c.pending_unchecked != NULL) {
		idem_warn("pending: %s", c.pending_unchecked);
		rc = IDEM_EXIT_FINDING;
	}

	for (j = 0; j < sizeof(results) / sizeof(results[0]); j++)
		for (i = 0, shown = 0; i < c.npending_findings; i++) {
			const struct pending_finding *f = &c.pending_findings[i];

			if (strcmp(f->result, results[j]) != 0)
				continue;
			rc = IDEM_EXIT_FINDING;
			if (shown++ >= 10)
				continue;
			if (j == 0)
				idem_warn("pending: business key %s: its call was killed, and %s has no row "
				    "of it", f->key, c.pending_table);
			else if (j == 1 && c.owner == NULL)
				idem_warn("pending: business key %s: its call was killed, and the seed "
				    "names no reconciliation owner to own its %lld rows of %s (the first "
				    "names %s)", f->key, f->rows, c.pending_table,
				    f->owner ? f->owner : "none");
			else if (j == 1)
				idem_warn("pending: business key %s: its call was killed, and none of its "
				    "%lld rows of %s has %s %s (the first names %s)", f->key, f->rows,
				    c.pending_table, c.pending_owner, c.owner, f->owner ? f->owner : "none");
			else
				idem_warn("pending: business key %s has %lld rows of %s not settled, and "
				    "its call was not killed", f->key, f->rows, c.pending_table);
		}
	return rc;
}

/* Counts as expected behind a guard the database cannot enforce: the
 * verdict is best effort, which the owner accepts or not. */
static int
best_effort(int rc)
{
	if (rc == 0 && c.best_effort != NULL)
		idem_warn("verdict: best effort: the database cannot enforce the guard (%s); "
		    "it stands when %s approves the record", c.best_effort,
		    c.owner ? c.owner : "the reconciliation owner");
	return rc;
}

/* Exit 1 naming every finding of the sandbox account, every total that
 * differs from the seed's expect, and the keys with more rows than
 * expected. */
int
verdict(void)
{
	static const char *const names[] = { "effects", "duplicates", "missing", "pending" };
	long long observed[4] = { c.effects, c.duplicates, c.missing, c.pending };
	size_t i, shown = 0;
	int rc = 0;

	/* a right beyond its list is a finding whatever the counts say */
	for (i = 0; i < c.nfindings; i++) {
		idem_warn("sandbox account %s %s", c.account, c.findings[i]);
		rc = IDEM_EXIT_FINDING;
	}
	if (!c.have_expect)
		return rc;
	for (i = 0; i < 4; i++) {
		if (observed[i] == c.expect[i])
			continue;
		idem_warn("%s: expected %lld, observed %lld", names[i], c.expect[i], observed[i]);
		rc = IDEM_EXIT_FINDING;
	}
	for (i = 0; i < c.nkeys && shown < 10; i++)
		if (c.keys[i].observed > c.keys[i].expected) {
			idem_warn("duplicate: business key %s has %lld effect rows, expected %lld",
			    c.keys[i].key, c.keys[i].observed, c.keys[i].expected);
			shown++;
		}
	if (!c.have_external)
		return best_effort(rc);
	if (c.external != expected_external()) {
		idem_warn("external: expected %lld, observed %lld", expected_external(), c.external);
		rc = IDEM_EXIT_FINDING;
	}
	/* a call whose body did not say its key cannot stand for a job's */
	if (c.external_unknown > 0) {
		idem_warn("external: %lld calls took effect with no business key in their body",
		    c.external_unknown);
		rc = IDEM_EXIT_FINDING;
	}
	for (i = 0, shown = 0; i < c.ncalls; i++) {
		const struct key_count *k = &c.calls[i];

		if (k->observed == k->expected)
			continue;
		rc = IDEM_EXIT_FINDING;
		if (shown++ >= 10)
			continue;
		if (k->observed < k->expected)
			idem_warn("external: missing effect for business key %s: %lld calls took "
			    "effect, expected %lld", k->key, k->observed, k->expected);
		else if (k->seeded)
			idem_warn("external: duplicate effect for business key %s: %lld calls took "
			    "effect, expected %lld", k->key, k->observed, k->expected);
		else
			idem_warn("external: unexpected effect for business key %s: %lld calls took "
			    "effect, and no job has that key", k->key, k->observed);
	}
	rc = rekeyed_verdict(rc);
	return best_effort(pending_verdict(rc));
}
