/* check.c: a record checked as verify-record checks it: signature, seed
 * and arithmetic */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <sodium.h>

#include "check.h"
#include "git.h"
#include "sig.h"
#include "statement.h"
#include "tsv.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "record.h"
#include "yamljson.h"
#include "tracefile.h"

/* The SHA-256 of a seed or adapter file at a revision, as the records of
 * a directory name it, or why it could not be read. */
struct seed_hash {
	char *revision, *path, *dir;
	char sha256[65];
	int unread;
	struct idem_error err;		/* why, when unread */
};

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

void
idem_check_free(struct check *c)
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
void
idem_checker_init(struct checker *k, const char *signers_path)
{
	struct idem_error err;
	const char *skipped;
	size_t i;

	k->signers_path = signers_path;
	if (k->signers == NULL && (k->signers = idem_signers_load(signers_path, &err)) == NULL)
		idem_die(IDEM_EXIT_USAGE, "%s", err.text);
	for (i = 0; (skipped = idem_signers_skipped(k->signers, i)) != NULL; i++)
		idem_warn("%s: line skipped, as ssh-keygen skips it", skipped);
}

void
idem_checker_free(struct checker *k)
{
	size_t i;

	idem_signers_free(k->signers);
	for (i = 0; i < k->nseeds; i++) {
		free(k->seeds[i].revision);
		free(k->seeds[i].path);
		free(k->seeds[i].dir);
	}
	free(k->seeds);
}

/* The signature first: the key must be an allowed signer for the
 * namespace, and only then is the signature itself checked. */
static void
check_signature(const struct checker *k, struct check *c, const char *text, size_t len)
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
	else if ((c->principal = idem_signers_find(k->signers, sig.public_key, "idem-record",
	    time(NULL), &err)) == NULL)
		reason(c, "signature: %s (%s)", err.text, k->signers_path);
	else if (idem_sig_check(&sig, "idem-record", text, len, &err) < 0) {
		reason(c, "signature: %s", err.text);
		free(c->principal);
		c->principal = NULL;
	} else
		memcpy(c->signer, sig.public_key, sizeof(c->signer));
	free(armor);
}

/* The SHA-256 of the file at path at a revision, in the repository that
 * holds dir: read once for the records of one run, which share a few
 * seeds and adapters. NULL, with the error in *why, when it cannot be
 * read. */
static const char *
file_sha256_at(struct checker *k, const char *dir, const char *revision, const char *path,
	       const char **why)
{
	struct seed_hash *h;
	char *blob;
	size_t len, i;

	for (i = 0; i < k->nseeds; i++)
		if (strcmp(k->seeds[i].revision, revision) == 0 && strcmp(k->seeds[i].path, path) == 0 &&
		    strcmp(k->seeds[i].dir, dir) == 0)
			break;
	if (i == k->nseeds) {
		k->seeds = idem_ereallocarray(k->seeds, k->nseeds + 1, sizeof(*k->seeds));
		h = &k->seeds[k->nseeds++];
		h->revision = idem_estrdup(revision);
		h->path = idem_estrdup(path);
		h->dir = idem_estrdup(dir);
		blob = idem_git_read_at(dir, revision, path, &len, &h->err);
		h->unread = blob == NULL;
		if (blob != NULL)
			idem_sha256_hex(blob, len, h->sha256);
		free(blob);
	}
	h = &k->seeds[i];
	*why = h->err.text;
	return h->unread ? NULL : h->sha256;
}

/* The file a record names at the seed's revision hashes to the SHA-256
 * it recorded: the seed, and (what) its adapter file when it has one. */
static void
check_file_at(struct checker *k, struct check *c, const char *what, const char *path,
	      const char *want)
{
	const char *revision = str(c->record, "seed.revision"), *got, *why;
	char dir[PATH_MAX];

	if (revision == NULL || path == NULL || want == NULL || *revision == '\0') {
		reason(c, "%s: no revision, path or SHA-256 recorded", what);
		return;
	}
	idem_dir_of(c->path, dir, sizeof(dir));
	if ((got = file_sha256_at(k, dir, revision, path, &why)) == NULL)
		reason(c, "%s: %s", what, why);
	else if (strcmp(got, want) != 0)
		reason(c, "%s: %s at %s has SHA-256 %s, the record says %s", what, path, revision, got,
		    want);
}

/* The seed at the recorded revision hashes to the recorded SHA-256, and
 * so does its adapter file, when the record names one. */
static void
check_seed(struct checker *k, struct check *c)
{
	check_file_at(k, c, "seed", str(c->record, "seed.repo_path"), str(c->record, "seed.sha256"));
	if (json_object_get(json_object_get(c->record, "queue"), "adapter") != NULL)
		check_file_at(k, c, "queue adapter", str(c->record, "queue.adapter.repo_path"),
		    str(c->record, "queue.adapter.sha256"));
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
	char path[PATH_MAX], dir[PATH_MAX], hex[65];
	struct idem_tsv_reader r;
	struct idem_error err;
	long long rows = 0;
	FILE *in;
	int rc;

	idem_dir_of(c->path, dir, sizeof(dir));
	if (name == NULL || want == NULL || strstr(name, "..") != NULL || *name == '/') {
		reason(c, "evidence: the record names no evidence file it can be checked against");
		return -1;
	}
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path)) {
		reason(c, "evidence: %s/%s: path too long", dir, name);
		return -1;
	}
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

/*
 * The count rows of the after phase summed, from the evidence file when
 * the record has one, with the attempts counted beside them (format 5),
 * and their digest against the record's. -1 when the evidence file
 * cannot be read.
 */
static int
sum_counts(struct check *c, struct count_sums *sums)
{
	const json_t *counts = json_object_get(c->record, "counts"), *row;
	const json_t *file = json_object_get(c->record, "evidence_file");
	int in_file = file != NULL && !json_is_null(file);
	struct attempt_sums from_file = { 0 };
	char hex[65];
	size_t i;

	sums_init(sums);
	if (in_file && read_evidence_file(c, file, sums, &from_file) < 0) {
		fclose(sums->rows);
		json_decref(sums->totals);
		return -1;
	}
	if (!in_file) {
		json_array_foreach(json_object_get(counts, "after"), i, row) {
			if (str(row, "scope") == NULL || str(row, "key") == NULL) {
				reason(c, "counts: a count row without scope or key");
				continue;
			}
			sum_count_row(sums, str(row, "scope"), str(row, "key"), num(row, "expected"),
			    num(row, "observed"));
		}
	}
	if (num(c->record, "record") >= 5)
		check_attempts(c, in_file ? &from_file : NULL);
	sums_digest(sums, hex);
	if (str(counts, "digest") == NULL || strcmp(hex, str(counts, "digest")) != 0)
		reason(c, "counts: the digest of the count rows is %s, the record says %s", hex,
		    str(counts, "digest") ? str(counts, "digest") : "nothing");
	return 0;
}

static void
check_total(struct check *c, const json_t *from_rows, const char *name, long long value)
{
	if (num(json_object_get(from_rows, name), "observed") != value)
		reason(c, "counts: total %s is %lld, the count rows add up to %lld", name,
		    num(json_object_get(from_rows, name), "observed"), value);
}

/* The totals: the signed count rows say them, the summary must agree;
 * and with an external call, the calls that took effect. */
static void
check_totals(struct check *c, const struct count_sums *sums, int has_external)
{
	const json_t *totals = json_object_get(json_object_get(c->record, "counts"), "totals"), *call;
	long long took_effect = 0;
	size_t i;

	if (!json_equal(sums->totals, totals))
		reason(c, "counts: the totals summary does not match the total rows it sums up");
	check_total(c, sums->totals, "effects", sums->effects);
	check_total(c, sums->totals, "duplicates", sums->duplicates);
	check_total(c, sums->totals, "missing", sums->missing);
	check_total(c, sums->totals, "unexpected", sums->unexpected);
	if (!has_external)
		return;
	check_total(c, sums->totals, "external", sums->external);
	check_total(c, sums->totals, "external_duplicates", sums->external_duplicates);
	json_array_foreach(json_object_get(c->record, "calls"), i, call)
		took_effect += str(call, "effect") && strcmp(str(call, "effect"), "yes") == 0;
	if (took_effect != sums->external)
		reason(c, "calls: %lld took effect, the count rows say %lld", took_effect, sums->external);
}

/* The calls of a record by their number (format 8): "N" to the call. */
static json_t *
calls_by_id(const json_t *calls)
{
	json_t *by_id = json_object(), *call;
	char id[32];
	size_t i;

	json_array_foreach(calls, i, call)
		if (json_is_integer(json_object_get(call, "id"))) {
			snprintf(id, sizeof(id), "%lld", num(call, "id"));
			json_object_set(by_id, id, call);
		}
	return by_id;
}

/* Whether the list holds a value equal to v. */
static int
holds(const json_t *list, const json_t *v)
{
	const json_t *x;
	size_t i;

	json_array_foreach(list, i, x)
		if (json_equal(x, v))
			return 1;
	return 0;
}

/* The Idempotency-Keys of a business key's calls, each once in the order
 * first sent, null for a call that sent none. */
static void
add_key(json_t *keys, const json_t *call)
{
	json_t *key = json_object_get(call, "idempotency_key");

	if (key == NULL)
		key = json_null();
	if (!holds(keys, key))
		json_array_append(keys, key);
}

/*
 * A record's rekeyed business keys (format 8) against its calls: each
 * names calls of its business key, whose keys (those its POST calls sent,
 * a lookup sending none) and effects it says; and
 * when every call has its number, every business key whose POST calls
 * sent more than one key is there. The pending checks: a killed one of a
 * business key with a killed call, and its result one of a killed call's.
 */
static void
check_keys(struct check *c)
{
	const json_t *calls = json_object_get(c->record, "calls"), *row, *call, *id;
	json_t *by_id = calls_by_id(calls), *sent = json_object(), *keys;
	const char *key, *result;
	size_t i, j;
	int numbered = 1;
	char text[32];

	json_array_foreach(json_object_get(c->record, "rekeyed"), i, row) {
		long long effects = 0;

		key = str(row, "business_key") ? str(row, "business_key") : "";
		keys = json_array();
		json_array_foreach(json_object_get(row, "calls"), j, id) {
			snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(id));
			call = json_object_get(by_id, text);
			if (!json_is_integer(id) || call == NULL ||
			    str(call, "business_key") == NULL ||
			    strcmp(str(call, "business_key"), key) != 0) {
				reason(c, "rekeyed: business key %s: call %s is not one of its calls",
				    key, json_is_integer(id) ? text : "without a number");
				continue;
			}
			if (str(call, "method") && strcmp(str(call, "method"), "POST") == 0)
				add_key(keys, call);
			effects += str(call, "effect") && strcmp(str(call, "effect"), "yes") == 0;
		}
		if (!json_equal(keys, json_object_get(row, "keys")))
			reason(c, "rekeyed: business key %s: its keys are not those its calls sent",
			    key);
		if (effects != num(row, "effects"))
			reason(c, "rekeyed: business key %s: %lld took effect, its calls say %lld",
			    key, num(row, "effects"), effects);
		json_decref(keys);
	}
	json_array_foreach(calls, i, call) {
		numbered &= json_is_integer(json_object_get(call, "id"));
		if ((key = str(call, "business_key")) == NULL || str(call, "method") == NULL ||
		    strcmp(str(call, "method"), "POST") != 0)
			continue;
		if ((keys = json_object_get(sent, key)) == NULL)
			json_object_set_new(sent, key, keys = json_array());
		add_key(keys, call);
	}
	json_object_foreach(sent, key, keys) {
		int listed = 0;

		json_array_foreach(json_object_get(c->record, "rekeyed"), i, row)
			listed |= str(row, "business_key") &&
			    strcmp(str(row, "business_key"), key) == 0;
		if (numbered && json_array_size(keys) > 1 && !listed)
			reason(c, "rekeyed: business key %s sent %zu Idempotency-Keys, and the "
			    "record does not list it", key, json_array_size(keys));
	}
	json_array_foreach(json_object_get(c->record, "pending_calls"), i, row) {
		int killed = json_is_true(json_object_get(row, "killed")), was_killed = 0;

		key = str(row, "business_key") ? str(row, "business_key") : "";
		result = str(row, "result") ? str(row, "result") : "";
		json_array_foreach(calls, j, call)
			was_killed |= str(call, "business_key") &&
			    strcmp(str(call, "business_key"), key) == 0 && str(call, "answer") &&
			    strcmp(str(call, "answer"), "killed") == 0;
		if (killed && !was_killed)
			reason(c, "pending_calls: business key %s: killed, but no call of it was", key);
		if (killed != (strcmp(result, "open") != 0))
			reason(c, "pending_calls: business key %s: result %s of a call %s", key, result,
			    killed ? "killed" : "not killed");
	}
	json_decref(sent);
	json_decref(by_id);
}

/* The verdict of counts that pass or not: a pass behind a guard the seed
 * says the database cannot enforce is best effort. */
static const char *
counted_verdict(const json_t *record, int pass)
{
	if (!pass)
		return "fail";
	return json_is_string(json_object_get(record, "best_effort")) ? "best effort" : "pass";
}

/* The verdict the counts give: pass when every total of the verdict is
 * as expected (the external call's too when there is one), and the run
 * missed no kill point or race, ran the worker the seed declares and
 * passed its baseline; from format 6, and its sandbox account held
 * nothing beyond its list; from format 7, and no stall or held lease
 * reached its bound; from format 8, and no business key changed its key
 * against a vendor that honours keys, and no pending check failed. */
static void
check_verdict(struct check *c, const json_t *from_rows, int has_external)
{
	static const char *const verdict_totals[] = { "effects", "duplicates", "missing", "pending",
		"external", "external_duplicates", NULL };
	const char *verdict = str(c->record, "verdict");
	const json_t *findings = json_object_get(json_object_get(c->record, "account"), "findings");
	size_t i, missed;
	int pass = 1, other_worker, baseline_failed;
	char *bound;

	/* a right the account held beyond its list fails a record of format 6 */
	if (num(c->record, "record") >= 6 && json_array_size(findings) > 0) {
		if (verdict == NULL || strcmp(verdict, "fail") != 0)
			reason(c, "verdict: the record says %s, but its sandbox account %s",
			    verdict ? verdict : "nothing", json_string_value(json_array_get(findings, 0)) ?
			    json_string_value(json_array_get(findings, 0)) : "has a finding");
		return;
	}
	/* a stall or a lease that reached its bound fails a record of format 7 */
	if (num(c->record, "record") >= 7 && (bound = idem_record_bound(c->record)) != NULL) {
		if (verdict == NULL || strcmp(verdict, "fail") != 0)
			reason(c, "verdict: the record says %s, but %s", verdict ? verdict : "nothing",
			    bound);
		free(bound);
		return;
	}
	/* so do a key changed against a vendor that honours keys and a pending
	 * check that failed, in a record of format 8 */
	if (num(c->record, "record") >= 8 && (bound = idem_record_key_finding(c->record)) != NULL) {
		if (verdict == NULL || strcmp(verdict, "fail") != 0)
			reason(c, "verdict: the record says %s, but %s", verdict ? verdict : "nothing",
			    bound);
		free(bound);
		return;
	}

	for (i = 0; verdict_totals[i]; i++) {
		json_t *t = json_object_get(from_rows, verdict_totals[i]);

		if (i >= 4 && !has_external)
			continue;
		pass &= t != NULL && json_equal(json_object_get(t, "expected"), json_object_get(t, "observed"));
	}
	/* a kill point or race the run did not reach proves nothing */
	missed = json_array_size(json_object_get(c->record, "missed"));
	/* nor does a run of another worker than the one the seed declares */
	other_worker = json_is_false(json_object_get(json_object_get(json_object_get(c->record,
	    "worker"), "observed"), "as_declared"));
	/* nor one whose baseline failed, which forced no fault */
	baseline_failed = str(c->record, "baseline.result") != NULL &&
	    strcmp(str(c->record, "baseline.result"), "failed") == 0;
	if (pass && baseline_failed && verdict && strcmp(verdict, "pass") == 0)
		reason(c, "verdict: the record says pass, but its baseline failed");
	else if (pass && missed > 0 && verdict && strcmp(verdict, "pass") == 0)
		reason(c, "verdict: the record says pass, but the run missed %zu kill points, races or stalls",
		    missed);
	else if (pass && other_worker && verdict && strcmp(verdict, "pass") == 0)
		reason(c, "verdict: the record says pass, but not the worker the ticket names ran");
	else if (verdict == NULL || strcmp(verdict, counted_verdict(c->record,
	    pass && missed == 0 && !other_worker && !baseline_failed)) != 0)
		reason(c, "verdict: the record says %s, its counts say %s", verdict ? verdict : "nothing",
		    counted_verdict(c->record, pass && missed == 0 && !other_worker && !baseline_failed));
}

/* The recovery times of the kill points, in order; *n of them. */
static long long *
recovery_times(const json_t *kills, long long *n)
{
	long long *ms = idem_ereallocarray(NULL, json_array_size(kills) + 1, sizeof(*ms));
	const json_t *row;
	size_t i;

	*n = 0;
	json_array_foreach(kills, i, row)
		if (json_is_integer(json_object_get(row, "recovery_ms")))
			ms[(*n)++] = num(row, "recovery_ms");
	for (i = 1; i < (size_t)*n; i++) {
		long long v = ms[i];
		size_t j = i;

		for (; j > 0 && ms[j - 1] > v; j--)
			ms[j] = ms[j - 1];
		ms[j] = v;
	}
	return ms;
}

/* The measures from the counts and kill points, and (format 5) their
 * intervals. */
static void
check_measures(struct check *c, long long duplicates)
{
	const json_t *kills = json_object_get(c->record, "kill_points"), *m;
	long long jobs = num(c->record, "jobs"), n, *ms = recovery_times(kills, &n);
	int format = (int)num(c->record, "record");
	char value[64];
	size_t i;

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

/* The record's own arithmetic: totals from the count rows (of the evidence
 * file, when the record has one), the digest of the count rows, the
 * measures from the counts and kill points, the calls that took effect,
 * the keys the calls sent and the pending checks, the verdict. */
static void
check_arithmetic(struct check *c)
{
	const json_t *external = json_object_get(c->record, "external");
	struct count_sums sums;
	int has_external;

	if (sum_counts(c, &sums) < 0)
		return;
	has_external = (external != NULL && !json_is_null(external)) || sums.has_external ||
	    json_object_get(sums.totals, "external") != NULL;
	check_totals(c, &sums, has_external);
	if (num(c->record, "record") >= 8)
		check_keys(c);
	check_verdict(c, sums.totals, has_external);
	json_decref(sums.totals);
	check_measures(c, sums.duplicates);
}

/* The trace beside a record of format 9: the one signed. */
static void
check_trace(struct check *c)
{
	char *why = idem_tracefile_check(c->path, c->record);

	if (why != NULL)
		reason(c, "%s", why);
	free(why);
}

void
idem_check_record(struct checker *k, struct check *c)
{
	struct idem_error err;
	char *text, sha256[65];
	size_t len;

	if ((text = idem_read_file_max(c->path, idem_record_limits.bytes, &len, &err)) == NULL) {
		reason(c, "%s", err.text);
		return;
	}
	/* bytes nobody trusted signed are not parsed: the report needs none of
	 * them, and parsing is work for whoever wrote them */
	check_signature(k, c, text, len);
	if (c->nreasons > 0) {
		free(text);
		return;
	}
	if ((c->record = idem_yaml_to_json(text, len, c->path, &err)) == NULL) {
		reason(c, "%s", err.text);
		free(text);
		return;
	}
	idem_sha256_hex(text, len, sha256);
	free(text);
	if (!json_is_object(c->record) || num(c->record, "record") < 1 ||
	    num(c->record, "record") > IDEM_RECORD_FORMAT) {
		reason(c, "not an idem record of format 1 to %d", IDEM_RECORD_FORMAT);
		return;
	}
	check_seed(k, c);
	check_arithmetic(c);
	if (idem_statement_check(c->path, c->record, sha256, c->signer, &err) < 0)
		reason(c, "%s", err.text);
	check_trace(c);
}
