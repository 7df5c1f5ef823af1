/* verify-record: check a record as a reviewer would (signature against
 * allowed_signers, seed hash at the recorded revision, the record's own
 * arithmetic), rerun it to the same counts as a second engineer would, or
 * audit every signed commit and record in the history as an auditor would. */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "approval.h"
#include "git.h"
#include "pg.h"
#include "rerun.h"
#include "sig.h"
#include "staleness.h"
#include "summary.h"
#include "tsv.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "record.h"
#include "yamljson.h"

static const char synopsis[] =
	"usage: verify-record [-f allowed-signers] record ...\n"
	"       verify-record [-f allowed-signers] --rerun [-d conninfo] record\n"
	"       verify-record [-f allowed-signers] --history [-a] [-c] [-t | -g] [-s rev]\n"
	"                     [-m summary] [-d conninfo] [dir]\n";

enum { OUT_TABLE, OUT_TSV, OUT_GITHUB };

struct check {
	const char *path;
	char *principal;
	char **reasons;
	size_t nreasons;
	json_t *record;
};

static const char *signers_path = "records/allowed_signers";

static struct seed_hash {
	char *revision, *path, *dir, *error;
	char sha256[65];
} *seed_cache;
static size_t nseed_cache;
static struct idem_signers *signers;

static void
reason(struct check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
reason(struct check *c, const char *fmt, ...)
{
	char buf[1200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	c->reasons = idem_ereallocarray(c->reasons, c->nreasons + 1, sizeof(char *));
	c->reasons[c->nreasons++] = idem_estrdup(buf);
}

static void
check_free(struct check *c)
{
	size_t i;

	for (i = 0; i < c->nreasons; i++)
		free(c->reasons[i]);
	free(c->reasons);
	free(c->principal);
	json_decref(c->record);
}

/* Short names for the lookups made everywhere below. */
static const char *
str(const json_t *o, const char *path)
{
	return idem_json_str(o, path);
}

/* A line ssh-keygen would refuse trusts nobody, and is named, as
 * ssh-keygen names it, without stopping the check. */
static void
load_signers(void)
{
	struct idem_error err;
	const char *skipped;
	size_t i;

	if (signers == NULL && (signers = idem_signers_load(signers_path, &err)) == NULL)
		idem_die(IDEM_EXIT_USAGE, "%s", err.text);
	for (i = 0; (skipped = idem_signers_skipped(signers, i)) != NULL; i++)
		idem_warn("%s: line skipped, as ssh-keygen skips it", skipped);
}

/* The signature first: the key must be an allowed signer for the
 * namespace, and only then is the signature itself checked. */
static void
check_signature(struct check *c, const char *text, size_t len)
{
	char sig_path[PATH_MAX + 8], *armor;
	struct idem_error err;
	struct idem_sig sig;
	size_t armor_len;

	snprintf(sig_path, sizeof(sig_path), "%s.sig", c->path);
	if ((armor = idem_read_file_max(sig_path, IDEM_SIG_ARMOR_MAX, &armor_len, &err)) == NULL) {
		reason(c, "no signature: %s", err.text);
		return;
	}
	if (idem_sig_parse(&sig, armor, armor_len, "idem-record", &err) < 0)
		reason(c, "signature: %s", err.text);
	else if ((c->principal = idem_signers_find(signers, sig.public_key, "idem-record",
	    time(NULL), &err)) == NULL)
		reason(c, "signature: %s (%s)", err.text, signers_path);
	else if (idem_sig_check(&sig, "idem-record", text, len, &err) < 0) {
		reason(c, "signature: %s", err.text);
		free(c->principal);
		c->principal = NULL;
	}
	free(armor);
}

/* The seed at the recorded revision hashes to the recorded SHA-256. */
static void
check_seed(struct check *c)
{
	const char *revision = str(c->record, "seed.revision"), *path = str(c->record, "seed.repo_path");
	const char *want = str(c->record, "seed.sha256");
	char dir[PATH_MAX], hex[65], *slash, *blob;
	struct idem_error err;
	size_t len, i;

	if (revision == NULL || path == NULL || want == NULL || *revision == '\0') {
		reason(c, "seed: no revision, path or SHA-256 recorded");
		return;
	}
	snprintf(dir, sizeof(dir), "%s", c->path);
	if ((slash = strrchr(dir, '/')) != NULL)
		*slash = '\0';
	else
		strcpy(dir, ".");
	/* records of one history share a few seeds: hash each once */
	for (i = 0; i < nseed_cache; i++)
		if (strcmp(seed_cache[i].revision, revision) == 0 && strcmp(seed_cache[i].path, path) == 0 &&
		    strcmp(seed_cache[i].dir, dir) == 0)
			break;
	if (i == nseed_cache) {
		seed_cache = idem_ereallocarray(seed_cache, nseed_cache + 1, sizeof(*seed_cache));
		seed_cache[i].revision = idem_estrdup(revision);
		seed_cache[i].path = idem_estrdup(path);
		seed_cache[i].dir = idem_estrdup(dir);
		seed_cache[i].error = NULL;
		if ((blob = idem_git_read_at(dir, revision, path, &len, &err)) == NULL) {
			seed_cache[i].error = idem_estrdup(err.text);
		} else {
			idem_sha256_hex(blob, len, seed_cache[i].sha256);
			free(blob);
		}
		nseed_cache++;
	}
	if (seed_cache[i].error != NULL) {
		reason(c, "seed: %s", seed_cache[i].error);
		return;
	}
	strcpy(hex, seed_cache[i].sha256);
	if (strcmp(hex, want) != 0)
		reason(c, "seed: %s at %s has SHA-256 %s, the record says %s", path, revision, hex, want);
}

static long long
num(const json_t *o, const char *key)
{
	return idem_json_num(o, key);
}

/* What the count rows of the after phase add up to, and their digest. */
struct count_sums {
	crypto_hash_sha256_state digest;
	FILE *rows;		/* writes into digest */
	json_t *totals;		/* the total rows: name, expected, observed */
	long long effects, duplicates, missing, unexpected, external, external_duplicates;
	int has_external;
};

static ssize_t
hash_write(void *cookie, const char *buf, size_t size)
{
	crypto_hash_sha256_update(cookie, (const unsigned char *)buf, size);
	return (ssize_t)size;
}

static void
sums_init(struct count_sums *sums)
{
	cookie_io_functions_t io = { NULL, hash_write, NULL, NULL };

	memset(sums, 0, sizeof(*sums));
	crypto_hash_sha256_init(&sums->digest);
	if ((sums->rows = fopencookie(&sums->digest, "w", io)) == NULL)
		idem_die(IDEM_EXIT_ENV, "fopencookie:");
	sums->totals = json_object();
}

static void
sum_count_row(struct count_sums *sums, const char *scope, const char *key, long long e, long long o)
{
	char es[32], os[32];
	const char *fields[4] = { scope, key, es, os };

	snprintf(es, sizeof(es), "%lld", e);
	snprintf(os, sizeof(os), "%lld", o);
	idem_tsv_write_row(sums->rows, "count", fields, 4);
	if (strcmp(scope, "key") == 0) {
		sums->effects += o;
		sums->duplicates += o > e ? o - e : 0;
		sums->missing += o == 0;
	} else if (strcmp(scope, "unexpected") == 0) {
		sums->unexpected += o;
	} else if (strcmp(scope, "external") == 0) {
		sums->external += o;
		sums->external_duplicates += o > e ? o - e : 0;
		sums->has_external = 1;
	} else if (strcmp(scope, "external-unknown") == 0) {
		sums->external += o;
		sums->has_external = 1;
	} else if (strcmp(scope, "total") == 0) {
		json_object_set_new(sums->totals, key, json_pack("{s:I,s:I}", "expected", (json_int_t)e,
		    "observed", (json_int_t)o));
	}
}

/* The digest of the rows summed, in hex. */
static void
sums_digest(struct count_sums *sums, char hex[65])
{
	unsigned char h[crypto_hash_sha256_BYTES];
	size_t i;

	fclose(sums->rows);
	crypto_hash_sha256_final(&sums->digest, h);
	for (i = 0; i < sizeof(h); i++)
		snprintf(hex + 2 * i, 3, "%02x", h[i]);
}

/* The attempts a record summarises (format 5), counted from its evidence
 * rows or its evidence file. */
struct attempt_sums {
	long long total, acked, not_acked, retried;
};

/*
 * A volume record's evidence file, beside it: its SHA-256 is the one the
 * signed record names, and from it come the count rows of the after phase
 * and the attempts. 0 when it was read, -1 (with a reason) otherwise.
 */
static int
read_evidence_file(struct check *c, const json_t *file, struct count_sums *sums,
		   struct attempt_sums *attempts)
{
	const char *name = str(file, "path"), *want = str(file, "sha256");
	char path[PATH_MAX], dir[PATH_MAX], hex[65], *slash;
	struct idem_tsv_reader r;
	struct idem_error err;
	long long rows = 0;
	FILE *in;
	int rc;

	snprintf(dir, sizeof(dir), "%s", c->path);
	if ((slash = strrchr(dir, '/')) != NULL)
		*slash = '\0';
	else
		strcpy(dir, ".");
	if (name == NULL || want == NULL || strstr(name, "..") != NULL || *name == '/') {
		reason(c, "evidence: the record names no evidence file it can be checked against");
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (idem_sha256_file(path, hex) < 0) {
		reason(c, "evidence: %s: %s", path, strerror(errno));
		return -1;
	}
	if (strcmp(hex, want) != 0) {
		reason(c, "evidence: %s has SHA-256 %s, the record says %s: not the evidence "
		    "that was signed", path, hex, want);
		return -1;
	}
	if ((in = idem_record_file_open(path, "r", &err)) == NULL) {
		reason(c, "evidence: %s", err.text);
		return -1;
	}
	idem_tsv_reader_init(&r, in, path);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		char **f = r.fields;

		if (rc < 0) {
			reason(c, "evidence: %s", err.text);
			break;
		}
		if (rc != IDEM_TSV_ROW)
			continue;
		rows++;
		if (r.kind == IDEM_KIND_COUNT_ROW && f[COUNT_PHASE] && strcmp(f[COUNT_PHASE], "after") == 0 &&
		    f[COUNT_SCOPE] && f[COUNT_KEY])
			sum_count_row(sums, f[COUNT_SCOPE], f[COUNT_KEY],
			    idem_tsv_number(&r, COUNT_EXPECTED, 0), idem_tsv_number(&r, COUNT_OBSERVED, 0));
		else if (r.kind == IDEM_KIND_ATTEMPT) {
			attempts->total++;
			attempts->acked += f[ATTEMPT_ACKED_AT] != NULL;
			attempts->not_acked += f[ATTEMPT_ACKED_AT] == NULL;
			attempts->retried += idem_tsv_number(&r, ATTEMPT_ATTEMPT, 1) > 1;
		}
	}
	idem_tsv_reader_free(&r);
	fclose(in);
	if (rc < 0)
		return -1;
	if (rows != num(file, "rows"))
		reason(c, "evidence: %s has %lld rows, the record says %lld", path, rows, num(file, "rows"));
	return 0;
}

/* A record of format 5: its attempts summary against the attempts counted. */
static void
check_attempts(struct check *c, const struct attempt_sums *from_file)
{
	const json_t *summary = json_object_get(c->record, "attempts");
	const json_t *evidence = json_object_get(c->record, "evidence"), *a;
	struct attempt_sums listed = { 0 }, counted;
	size_t i;

	json_array_foreach(evidence, i, a) {
		listed.total++;
		listed.acked += !json_is_null(json_object_get(a, "acked_at"));
		listed.not_acked += json_is_null(json_object_get(a, "acked_at"));
		listed.retried += num(a, "attempt") > 1;
	}
	counted = from_file ? *from_file : listed;
	if (num(summary, "listed") != (long long)json_array_size(evidence))
		reason(c, "attempts: %lld listed, the record's evidence has %zu", num(summary, "listed"),
		    json_array_size(evidence));
#define ATTEMPTS(name) \
	if (num(summary, #name) != counted.name) \
		reason(c, "attempts: %s is %lld, the %s %lld", #name, num(summary, #name), \
		    from_file ? "evidence file has" : "record's evidence has", counted.name);
	ATTEMPTS(total)
	ATTEMPTS(acked)
	ATTEMPTS(not_acked)
	ATTEMPTS(retried)
#undef ATTEMPTS
}

/* The text of a number as the record reads back: a plain integer, or a
 * plain real read as text. */
static const char *
number_text(const json_t *v, char buf[32])
{
	if (json_is_integer(v)) {
		snprintf(buf, 32, "%lld", (long long)json_integer_value(v));
		return buf;
	}
	return json_string_value(v);
}

/* A measure's interval (format 5): the 95% Wilson interval of its
 * numerator and denominator, in the units of its value. */
static void
check_interval(struct check *c, const json_t *m)
{
	const char *name = str(m, "name");
	const json_t *interval = json_object_get(m, "interval");
	json_t *k = json_object_get(m, "numerator"), *n = json_object_get(m, "denominator");
	double scale = 0, low, high;
	char want_low[32], want_high[32], got_low[32], got_high[32], got_conf[32];
	const char *gl, *gh, *conf;

	if (strstr(name, "_per_1000_") != NULL)
		scale = 1000;
	else if (strstr(name, "_per_100_") != NULL)
		scale = 100;
	if (scale == 0 || !json_is_integer(k) || !json_is_integer(n) ||
	    idem_record_wilson(json_integer_value(k), json_integer_value(n), &low, &high) < 0) {
		if (interval != NULL && !json_is_null(interval))
			reason(c, "measure %s: an interval, but no rate to have one", name);
		return;
	}
	idem_format_real(round(low * scale * 1e6) / 1e6, want_low);
	idem_format_real(round(high * scale * 1e6) / 1e6, want_high);
	gl = number_text(json_object_get(interval, "low"), got_low);
	gh = number_text(json_object_get(interval, "high"), got_high);
	conf = number_text(json_object_get(interval, "confidence"), got_conf);
	if (gl == NULL || gh == NULL || strcmp(gl, want_low) != 0 || strcmp(gh, want_high) != 0 ||
	    conf == NULL || strcmp(conf, "0.95") != 0)
		reason(c, "measure %s: the record's interval is %s to %s, %lld of %lld give %s to %s",
		    name, gl ? gl : "nothing", gh ? gh : "nothing", (long long)json_integer_value(k),
		    (long long)json_integer_value(n), want_low, want_high);
}

/* The record's own arithmetic: totals from the count rows (of the evidence
 * file, when the record has one), the digest of the count rows, the
 * measures from the counts and kill points, the calls that took effect,
 * the verdict. */
static void
check_arithmetic(struct check *c)
{
	static const char *const verdict_totals[] = { "effects", "duplicates", "missing", "pending",
		"external", "external_duplicates", NULL };
	json_t *counts = json_object_get(c->record, "counts"), *rows = json_object_get(counts, "after");
	json_t *totals = json_object_get(counts, "totals"), *row, *m, *kills, *from_rows;
	const json_t *file = json_object_get(c->record, "evidence_file");
	struct count_sums sums;
	struct attempt_sums from_file = { 0 };
	long long effects, duplicates, missing, unexpected, jobs, n = 0, *ms;
	long long external, external_duplicates, took_effect = 0;
	int has_external = !json_is_null(json_object_get(c->record, "external")) &&
	    json_object_get(c->record, "external") != NULL;
	int format = (int)num(c->record, "record");
	char hex[65], value[64];
	const char *verdict;
	size_t i, missed;
	int pass = 1, other_worker, baseline_failed;

	sums_init(&sums);
	if (file != NULL && !json_is_null(file)) {
		if (read_evidence_file(c, file, &sums, &from_file) < 0) {
			fclose(sums.rows);
			json_decref(sums.totals);
			return;
		}
	} else {
		json_array_foreach(rows, i, row) {
			if (str(row, "scope") == NULL || str(row, "key") == NULL) {
				reason(c, "counts: a count row without scope or key");
				continue;
			}
			sum_count_row(&sums, str(row, "scope"), str(row, "key"), num(row, "expected"),
			    num(row, "observed"));
		}
	}
	if (format >= 5)
		check_attempts(c, file != NULL && !json_is_null(file) ? &from_file : NULL);
	sums_digest(&sums, hex);
	from_rows = sums.totals;
	effects = sums.effects;
	duplicates = sums.duplicates;
	missing = sums.missing;
	unexpected = sums.unexpected;
	external = sums.external;
	external_duplicates = sums.external_duplicates;
	has_external |= sums.has_external;
	if (str(counts, "digest") == NULL || strcmp(hex, str(counts, "digest")) != 0)
		reason(c, "counts: the digest of the count rows is %s, the record says %s", hex,
		    str(counts, "digest") ? str(counts, "digest") : "nothing");
	/* the totals: the signed count rows say them, the summary must agree */
	if (!json_equal(from_rows, totals))
		reason(c, "counts: the totals summary does not match the total rows it sums up");
#define TOTAL(name, value) \
	if (num(json_object_get(from_rows, name), "observed") != (value)) \
		reason(c, "counts: total %s is %lld, the count rows add up to %lld", name, \
		    num(json_object_get(from_rows, name), "observed"), (long long)(value));
	TOTAL("effects", effects)
	TOTAL("duplicates", duplicates)
	TOTAL("missing", missing)
	TOTAL("unexpected", unexpected)
	has_external |= json_object_get(from_rows, "external") != NULL;
	if (has_external) {
		TOTAL("external", external)
		TOTAL("external_duplicates", external_duplicates)
		json_array_foreach(json_object_get(c->record, "calls"), i, row)
			took_effect += str(row, "effect") && strcmp(str(row, "effect"), "yes") == 0;
		if (took_effect != external)
			reason(c, "calls: %lld took effect, the count rows say %lld", took_effect, external);
	}
#undef TOTAL
	/* the external call's totals are the verdict's when there is one */
	for (i = 0; verdict_totals[i]; i++) {
		json_t *t = json_object_get(from_rows, verdict_totals[i]);

		if (i >= 4 && !has_external)
			continue;
		pass &= t != NULL && json_equal(json_object_get(t, "expected"), json_object_get(t, "observed"));
	}
	json_decref(from_rows);
	/* a kill point or race the run did not reach proves nothing */
	missed = json_array_size(json_object_get(c->record, "missed"));
	/* nor does a run of another worker than the one the seed declares */
	other_worker = json_is_false(json_object_get(json_object_get(json_object_get(c->record,
	    "worker"), "observed"), "as_declared"));
	/* nor one whose baseline failed, which forced no fault */
	baseline_failed = str(c->record, "baseline.result") != NULL &&
	    strcmp(str(c->record, "baseline.result"), "failed") == 0;
	verdict = str(c->record, "verdict");
	if (pass && baseline_failed && verdict && strcmp(verdict, "pass") == 0)
		reason(c, "verdict: the record says pass, but its baseline failed");
	else if (pass && missed > 0 && verdict && strcmp(verdict, "pass") == 0)
		reason(c, "verdict: the record says pass, but the run missed %zu kill points or races",
		    missed);
	else if (pass && other_worker && verdict && strcmp(verdict, "pass") == 0)
		reason(c, "verdict: the record says pass, but not the worker the ticket names ran");
	else if (verdict == NULL || strcmp(verdict,
	    pass && missed == 0 && !other_worker && !baseline_failed ? "pass" : "fail") != 0)
		reason(c, "verdict: the record says %s, its counts say %s", verdict ? verdict : "nothing",
		    pass && missed == 0 && !other_worker && !baseline_failed ? "pass" : "fail");
	jobs = num(c->record, "jobs");
	kills = json_object_get(c->record, "kill_points");
	ms = idem_ereallocarray(NULL, json_array_size(kills) + 1, sizeof(*ms));
	json_array_foreach(kills, i, row)
		if (json_is_integer(json_object_get(row, "recovery_ms")))
			ms[n++] = num(row, "recovery_ms");
	for (i = 1; i < (size_t)n; i++) {
		long long v = ms[i];
		size_t j = i;

		for (; j > 0 && ms[j - 1] > v; j--)
			ms[j] = ms[j - 1];
		ms[j] = v;
	}
	json_array_foreach(json_object_get(c->record, "measures"), i, m) {
		const char *name = str(m, "name"), *got = str(m, "value");

		value[0] = '\0';
		if (name == NULL) {
			reason(c, "a measure without a name");
			continue;
		}
		if (strcmp(name, "duplicate_effects_per_1000_jobs") == 0) {
			if (num(m, "numerator") != duplicates || num(m, "denominator") != jobs)
				reason(c, "measure %s: %lld of %lld, the record's counts give %lld of %lld",
				    name, num(m, "numerator"), num(m, "denominator"), duplicates, jobs);
			if (jobs > 0)
				snprintf(value, sizeof(value), "%.3f", (double)duplicates * 1000.0 / (double)jobs);
		} else if (strcmp(name, "reconciled_jobs_per_100_failures") == 0) {
			if (num(m, "denominator") != (long long)json_array_size(kills))
				reason(c, "measure %s: %lld failures, the record has %zu kill points", name,
				    num(m, "denominator"), json_array_size(kills));
			if (num(m, "denominator") > 0)
				snprintf(value, sizeof(value), "%.3f",
				    (double)num(m, "numerator") * 100.0 / (double)num(m, "denominator"));
		} else if (strcmp(name, "recovery_ms_median") == 0 && n > 0) {
			snprintf(value, sizeof(value), "%lld",
			    n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2);
		} else if (strcmp(name, "recovery_ms_max") == 0 && n > 0) {
			snprintf(value, sizeof(value), "%lld", ms[n - 1]);
		} else {
			if (format >= 5)
				check_interval(c, m);
			continue;
		}
		if (format >= 5)
			check_interval(c, m);
		if ((got == NULL) != (*value == '\0') || (got && strcmp(got, value) != 0))
			reason(c, "measure %s: the record says %s, its figures give %s", name,
			    got ? got : "nothing", *value ? value : "nothing");
	}
	free(ms);
}

static void
verify_one(struct check *c)
{
	struct idem_error err;
	char *text;
	size_t len;

	if ((text = idem_read_file_max(c->path, idem_record_limits.bytes, &len, &err)) == NULL) {
		reason(c, "%s", err.text);
		return;
	}
	/* bytes nobody trusted signed are not parsed: the report needs none of
	 * them, and parsing is work for whoever wrote them */
	check_signature(c, text, len);
	if (c->nreasons > 0) {
		free(text);
		return;
	}
	if ((c->record = idem_yaml_to_json(text, len, c->path, &err)) == NULL) {
		reason(c, "%s", err.text);
		free(text);
		return;
	}
	free(text);
	if (!json_is_object(c->record) || num(c->record, "record") < 1 || num(c->record, "record") > 5) {
		reason(c, "not an idem record of format 1, 2, 3, 4 or 5");
		return;
	}
	check_seed(c);
	check_arithmetic(c);
}

static void
print_check(const struct check *c)
{
	size_t i;

	if (c->nreasons == 0) {
		printf("%s: verified, signed by %s\n", c->path, c->principal);
		return;
	}
	printf("%s: NOT verified\n", c->path);
	for (i = 0; i < c->nreasons; i++)
		printf("%s: %s\n", c->path, c->reasons[i]);
}

/* Reruns a record that verified; 1 when the rerun differs. */
static int
rerun(const struct check *c, const char *conninfo)
{
	struct idem_error err;
	int rc;

	if ((rc = idem_rerun(c->path, c->record, conninfo, stdout, &err)) < 0)
		idem_die_error(&err);
	return rc;
}

static int
by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The audit's entries, kept for the summary of -m (summary_path). */
static struct idem_summary summary;
static const char *summary_path;
static int require_approval;

/* The summary of -m, of the records checked. */
static void
write_summary(const char *dir, const char *since, const struct check *checks, size_t nchecks,
	      int bad)
{
	struct idem_summary_record *records = idem_ereallocarray(NULL, nchecks + 1, sizeof(*records));
	struct idem_error err;
	size_t i;

	for (i = 0; i < nchecks; i++)
		records[i] = (struct idem_summary_record){ checks[i].path, checks[i].principal,
			checks[i].record, checks[i].nreasons > 0 };
	summary.dir = dir;
	summary.since = since;
	summary.signers = signers;
	summary.signers_path = signers_path;
	if (idem_summary_write(&summary, summary_path, records, nchecks, bad, &err) < 0)
		idem_die_error(&err);
	free(records);
}

/* One entry of the audit. In GitHub's form, file (with line when it is
 * not 0) is where the annotation points: a FAIL is an error, stale and
 * warn are warnings, ok says nothing. */
static void
emit(int format, const char *kind, const char *id, const char *status, const char *detail,
     const char *file, long line)
{
	if (summary_path != NULL)
		idem_summary_keep(&summary, kind, id, status, detail);
	switch (format) {
	case OUT_TSV: {
		const char *row[4] = { kind, id, status, detail };

		idem_tsv_write_row(stdout, "audit", row, 4);
		break;
	}
	case OUT_GITHUB:
		if (strcmp(status, "ok") == 0)
			break;
		printf("::%s file=%s", strcmp(status, "FAIL") == 0 ? "error" : "warning", file);
		if (line > 0)
			printf(",line=%ld", line);
		printf("::%s %s: %s\n", kind, status, detail);
		break;
	default:
		printf("%-7s %-48s %-6s %s\n", kind, id, status, detail);
	}
}

/* The line of a top-level key in a record's file, as mkrecord writes it
 * (the key at the start of a line); 0 when it is not there. */
static long
key_line(const char *path, const char *key)
{
	size_t klen = strlen(key), cap = 0;
	char *line = NULL;
	long n = 0, found = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return 0;
	while (!found && getline(&line, &cap, f) > 0) {
		n++;
		if (strncmp(line, key, klen) == 0 && line[klen] == ':')
			found = n;
	}
	free(line);
	fclose(f);
	return found;
}

/* Whether the record shows a guard the database enforced: a guard of a
 * kind other than none, and a probe whose insert it refused. */
static int
guard_enforced(const json_t *record)
{
	const json_t *g;
	size_t i;
	int guarded = 0;

	json_array_foreach(json_object_get(record, "guards"), i, g)
		guarded |= str(g, "kind") != NULL && strcmp(str(g, "kind"), "none") != 0;
	return guarded && str(record, "probe.result") && strcmp(str(record, "probe.result"), "enforced") == 0;
}

/* The verdict policy, for the newest record of a rehearsal of format 4
 * or later (older ones are judged by their arithmetic alone): a verdict
 * other than the one the seed expects (pass, unless it says fail) is a
 * FAIL; a pass without an enforced guard is a warning. Returns the status
 * and writes the detail; NULL when the policy has nothing to say. */
static const char *
verdict_policy(const struct check *c, char *out, size_t size)
{
	const char *verdict = str(c->record, "verdict"), *expected = str(c->record, "expected_verdict");

	if (num(c->record, "record") < 4 || verdict == NULL)
		return NULL;
	if (expected == NULL)
		expected = "pass";
	if (strcmp(verdict, expected) != 0) {
		if (strcmp(expected, "fail") == 0)
			snprintf(out, size, "verdict pass, but the seed expects this example to fail");
		else
			snprintf(out, size, "verdict fail: the current record of %s fails",
			    str(c->record, "rehearsal") ? str(c->record, "rehearsal") : "its rehearsal");
		return "FAIL";
	}
	if (strcmp(verdict, "pass") == 0 && !guard_enforced(c->record)) {
		snprintf(out, size, "verdict pass with no enforced guard: the database does not "
		    "stop a duplicate");
		return "warn";
	}
	return NULL;
}

static int
history(const char *dir, const char *since, int format, int commits_only, const char *conninfo)
{
	struct idem_git_commit_check *commits;
	struct idem_error err;
	char **names = NULL, **paths, *now = idem_date_from_now(0), detail[1600];
	struct { const char *rehearsal, *created_at; } *latest;
	size_t nlatest = 0;
	struct check *checks;
	size_t ncommits, nnames = 0, i, j;
	struct dirent *e;
	struct idem_staleness stale = { NULL, NULL, 0 };
	PGconn *db = NULL;
	PGresult *res;
	DIR *d;
	int bad = 0;

	/* the queue versions in use, before anything is reported: read, never
	 * written, whatever the database */
	if (conninfo != NULL && !commits_only) {
		if ((db = idem_pg_connect(conninfo, &err)) == NULL)
			idem_die_error(&err);
		if ((res = idem_pg_exec(db, "SET default_transaction_read_only", &err,
		    "SET default_transaction_read_only = on", 0, NULL)) == NULL)
			idem_die_error(&err);
		PQclear(res);
	}
	stale.db = db;
	if (format == OUT_TSV)
		idem_tsv_write_header(stdout);
	if (idem_git_history(dir, since, signers, &commits, &ncommits, &err) < 0)
		idem_die_error(&err);
	for (i = 0; i < ncommits; i++) {
		if (commits[i].principal)
			snprintf(detail, sizeof(detail), "signed by %s: %s", commits[i].principal,
			    commits[i].summary);
		else
			snprintf(detail, sizeof(detail), "%s: %s", commits[i].reason, commits[i].summary);
		emit(format, "commit", commits[i].id, commits[i].principal ? "ok" : "FAIL", detail, dir, 0);
		bad |= commits[i].principal == NULL;
		free(commits[i].principal);
	}
	free(commits);
	if (commits_only) {
		if (summary_path != NULL)
			write_summary(dir, since, NULL, 0, bad);
		free(now);
		return bad ? IDEM_EXIT_FINDING : 0;
	}
	if ((d = opendir(dir)) == NULL)
		idem_die(IDEM_EXIT_USAGE, "%s:", dir);
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);

		if (len > 5 && strcmp(e->d_name + len - 5, ".yaml") == 0) {
			names = idem_ereallocarray(names, nnames + 1, sizeof(char *));
			names[nnames++] = idem_estrdup(e->d_name);
		}
	}
	closedir(d);
	if (nnames > 1)
		qsort(names, nnames, sizeof(char *), by_name);
	checks = idem_ereallocarray(NULL, nnames + 1, sizeof(*checks));
	paths = idem_ereallocarray(NULL, nnames + 1, sizeof(*paths));
	for (i = 0; i < nnames; i++) {
		if (asprintf(&paths[i], "%s/%s", dir, names[i]) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		memset(&checks[i], 0, sizeof(checks[i]));
		checks[i].path = paths[i];
		verify_one(&checks[i]);
	}
	/* the newest created_at of each rehearsal, in one pass */
	latest = idem_ereallocarray(NULL, nnames + 1, sizeof(*latest));
	for (i = 0; i < nnames; i++) {
		const char *name = str(checks[i].record, "rehearsal"), *at = str(checks[i].record, "created_at");

		if (checks[i].nreasons > 0 || name == NULL || at == NULL)
			continue;
		for (j = 0; j < nlatest && strcmp(latest[j].rehearsal, name) != 0; j++)
			;
		if (j == nlatest) {
			latest[nlatest].rehearsal = name;
			latest[nlatest++].created_at = at;
		} else if (strcmp(at, latest[j].created_at) > 0) {
			latest[j].created_at = at;
		}
	}
	for (i = 0; i < nnames; i++) {
		struct check *c = &checks[i];
		struct idem_approval approval;
		const char *status = NULL;
		int newest = 1;

		if (c->nreasons > 0) {
			for (j = 0; j < c->nreasons; j++)
				emit(format, "record", c->path, "FAIL", c->reasons[j], c->path, 0);
			bad = 1;
			continue;
		}
		/* stale by the seed only for the newest record of a rehearsal */
		for (j = 0; j < nlatest && str(c->record, "rehearsal"); j++)
			if (strcmp(latest[j].rehearsal, str(c->record, "rehearsal")) == 0)
				newest = strcmp(latest[j].created_at, str(c->record, "created_at")) <= 0;
		if (newest && (status = verdict_policy(c, detail, sizeof(detail))) != NULL) {
			emit(format, "record", c->path, status, detail, c->path, key_line(c->path,
			    strcmp(status, "FAIL") == 0 ? "verdict" : "guards"));
			bad = 1;
		}
		if (idem_staleness(&stale, c->record, now, newest, detail, sizeof(detail), &err) < 0)
			idem_die_error(&err);
		idem_approval_check(c->path, signers, signers_path, &approval);
		if (*detail) {
			emit(format, "record", c->path, "stale", detail, c->path, 0);
			bad = 1;
		}
		/* with -a, a current record without the owner's approval fails */
		if (require_approval && newest && approval.principal == NULL) {
			emit(format, "record", c->path, "FAIL", approval.text, c->path, 0);
			bad = 1;
		} else if (!*detail && status == NULL) {
			char *ok;

			if (asprintf(&ok, "%s%s, signed by %s; %s", str(c->record, "verdict"),
			    str(c->record, "expected_verdict") && strcmp(str(c->record, "verdict"), "fail") == 0 &&
			    strcmp(str(c->record, "expected_verdict"), "fail") == 0 ? " as the seed expects" : "",
			    c->principal, approval.text) < 0)
				idem_die(IDEM_EXIT_ENV, "asprintf:");
			emit(format, "record", c->path, "ok", ok, c->path, 0);
			free(ok);
		}
		idem_approval_free(&approval);
	}
	if (summary_path != NULL)
		write_summary(dir, since, checks, nnames, bad);
	for (i = 0; i < nnames; i++) {
		check_free(&checks[i]);
		free(paths[i]);
		free(names[i]);
	}
	idem_staleness_free(&stale);
	PQfinish(db);
	free(latest);
	free(checks);
	free(paths);
	free(names);
	free(now);
	return bad ? IDEM_EXIT_FINDING : 0;
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "allowed-signers", required_argument, NULL, 'f' },
		{ "rerun", no_argument, NULL, 'R' },
		{ "dbname", required_argument, NULL, 'd' },
		{ "history", no_argument, NULL, 'H' },
		{ "since", required_argument, NULL, 's' },
		{ "commits-only", no_argument, NULL, 'c' },
		{ "format", required_argument, NULL, 'F' },
		{ "require-approval", no_argument, NULL, 'a' },
		{ "summary", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conninfo = NULL, *since = NULL;
	int c, do_rerun = 0, do_history = 0, commits_only = 0, format = OUT_TABLE, rc = 0, i;

	argv0 = "verify-record";
	argv[0] = (char *)argv0;
	while ((c = getopt_long(argc, argv, "f:d:s:actgm:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'f': signers_path = optarg; break;
		case 'R': do_rerun = 1; break;
		case 'd': conninfo = optarg; break;
		case 'H': do_history = 1; break;
		case 's': since = optarg; break;
		case 'c': commits_only = 1; break;
		case 't': format = OUT_TSV; break;
		case 'a': require_approval = 1; break;
		case 'm': summary_path = optarg; break;
		case 'g': format = OUT_GITHUB; break;
		case 'F':
			if (strcmp(optarg, "github") == 0)
				format = OUT_GITHUB;
			else if (strcmp(optarg, "tsv") == 0)
				format = OUT_TSV;
			else if (strcmp(optarg, "table") == 0)
				format = OUT_TABLE;
			else
				idem_die(IDEM_EXIT_USAGE, "--format %s: expected table, tsv or github", optarg);
			break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("verify-record " IDEM_VERSION); idem_close_stdout(); return 0;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if ((do_history && do_rerun) || ((commits_only || require_approval || summary_path) && !do_history))
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	load_signers();
	if (do_history) {
		if (argc - optind > 1)
			idem_usage(synopsis, IDEM_EXIT_USAGE);
		rc = history(optind < argc ? argv[optind] : "records", since, format, commits_only,
		    conninfo);
	} else {
		if (optind == argc || (do_rerun && argc - optind != 1))
			idem_usage(synopsis, IDEM_EXIT_USAGE);
		for (i = optind; i < argc; i++) {
			struct check chk = { .path = argv[i] };

			verify_one(&chk);
			print_check(&chk);
			if (chk.nreasons > 0)
				rc = IDEM_EXIT_FINDING;
			else if (do_rerun && rerun(&chk, conninfo))
				rc = IDEM_EXIT_FINDING;
			check_free(&chk);
		}
	}
	idem_summary_free(&summary);
	idem_signers_free(signers);
	idem_git_close();
	for (i = 0; (size_t)i < nseed_cache; i++) {
		free(seed_cache[i].revision);
		free(seed_cache[i].path);
		free(seed_cache[i].dir);
		free(seed_cache[i].error);
	}
	free(seed_cache);
	idem_close_stdout();
	return rc;
}
