/* seed_jobs.c: the jobs of a loaded seed, declared or generated one at a
 * time (GENERATED JOBS in idem-seed(5)), their business keys, and the seed
 * as JSON */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "json.h"
#include "seed_impl.h"
#include "text.h"

char *
idem_business_key(const json_t *object, char *const *fields, size_t nfields)
{
	json_t *v, *array;
	char *out;
	size_t i;

	for (i = 0; i < nfields; i++) {
		v = json_object_get(object, fields[i]);
		if (!json_is_string(v) && !json_is_integer(v) && !json_is_boolean(v))
			return NULL;
	}
	if (nfields == 1) {
		v = json_object_get(object, fields[0]);
		if (json_is_string(v))
			return idem_estrdup(json_string_value(v));
		return idem_json_canonical(v);
	}
	array = json_array();
	for (i = 0; i < nfields; i++)
		json_array_append(array, json_object_get(object, fields[i]));
	out = idem_json_canonical(array);
	json_decref(array);
	return out;
}

void
seed_finish_job(const struct idem_seed *s, struct idem_seed_job *job)
{
	job->payload_json = idem_json_canonical(job->payload);
	idem_sha256_hex(job->payload_json, strlen(job->payload_json), job->payload_sha256);
	job->business_key = idem_business_key(job->payload, s->key, s->nkey);
	job->scenario = -1;
}

long
seed_selected_by_every(const struct idem_seed *s, const char *id)
{
	size_t i;

	for (i = 0; i < s->nscenarios; i++)
		if (s->scenarios[i].every > 0 &&
		    idem_sha256_pair(s->scenarios[i].name, id) % (uint64_t)s->scenarios[i].every == 0)
			return (long)i;
	return -1;
}

long long
seed_generated_number(const struct idem_seed *s, const char *text, const char *prefix)
{
	size_t len = strlen(prefix), width = (size_t)s->index->width;
	long long n = 0;
	size_t i;

	if (text == NULL || strncmp(text, prefix, len) != 0 || text[len] != '-' ||
	    strlen(text + len + 1) != width || strspn(text + len + 1, "0123456789") != width)
		return 0;
	for (i = len + 1; text[i]; i++)
		n = n * 10 + (text[i] - '0');
	return n <= s->generate_count ? n : 0;
}

/* Generated job number n: see GENERATED JOBS in idem-seed(5). */
static void
generate_job(const struct idem_seed *s, long long n, struct idem_seed_job *job)
{
	unsigned char digest[32];
	json_t *named;
	char *text;
	uint32_t h;
	size_t f;
	int width = s->index->width;

	memset(job, 0, sizeof(*job));
	if (asprintf(&job->id, "gen-%0*lld", width, n) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	crypto_hash_sha256(digest, (const unsigned char *)job->id, strlen(job->id));
	h = (uint32_t)digest[0] << 24 | (uint32_t)digest[1] << 16 | (uint32_t)digest[2] << 8 | digest[3];
	job->payload = json_object();
	for (f = 0; f < s->nschema; f++) {
		const struct idem_seed_field *sf = &s->schema[f];
		json_t *v;

		switch (sf->type) {
		case IDEM_TYPE_STRING:
			if (asprintf(&text, "%s-%0*lld", sf->name, width, n) < 0)
				idem_die(IDEM_EXIT_ENV, "asprintf:");
			v = json_string(text);
			free(text);
			break;
		case IDEM_TYPE_INTEGER:
			v = json_integer(sf->in_key ? n : (json_int_t)(h % 100000));
			break;
		case IDEM_TYPE_BOOLEAN:
			v = json_boolean(h & 1);
			break;
		case IDEM_TYPE_OBJECT:
			v = json_object();
			break;
		default:
			v = json_array();
			break;
		}
		json_object_set_new(job->payload, sf->name, v);
	}
	seed_finish_job(s, job);
	named = json_object_get(s->index->named, job->id);
	job->scenario = named ? (long)json_integer_value(named) : seed_selected_by_every(s, job->id);
}

long long
idem_seed_njobs(const struct idem_seed *s)
{
	return (long long)s->ndeclared + s->generate_count;
}

const struct idem_seed_job *
idem_seed_job(const struct idem_seed *s, long long i, struct idem_seed_job *buf)
{
	if (i < (long long)s->ndeclared)
		return &s->declared[i];
	idem_seed_job_clear(buf);
	generate_job(s, i - (long long)s->ndeclared + 1, buf);
	return buf;
}

void
idem_seed_job_clear(struct idem_seed_job *job)
{
	free(job->id);
	json_decref(job->payload);
	free(job->payload_json);
	free(job->business_key);
	memset(job, 0, sizeof(*job));
}

static json_t *
text_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

json_t *
idem_seed_job_to_json(const struct idem_seed *s, const struct idem_seed_job *j)
{
	json_t *v = json_pack("{s:s,s:s,s:s,s:s}", "id", j->id, "business_key", j->business_key,
	    "payload", j->payload_json, "payload_sha256", j->payload_sha256);

	json_object_set_new(v, "scenario",
	    j->scenario >= 0 ? json_string(s->scenarios[j->scenario].name) : json_null());
	return v;
}

json_t *
idem_seed_to_json(const struct idem_seed *s)
{
	json_t *o = json_object(), *a, *v;
	size_t i;

	json_object_set_new(o, "path", json_string(s->path));
	json_object_set_new(o, "sha256", json_string(s->sha256));
	json_object_set_new(o, "rehearsal", json_string(s->rehearsal));
	json_object_set_new(o, "job_type", json_string(s->job_type));
	json_object_set_new(o, "queue", json_string(s->queue));
	json_object_set_new(o, "queue_kind", json_string(s->queue_kind));
	json_object_set_new(o, "queue_adapter", text_or_null(s->queue_adapter_path));
	json_object_set_new(o, "database", text_or_null(s->database));
	json_object_set_new(o, "sandbox_account", text_or_null(s->sandbox_account));
	json_object_set_new(o, "worker_image", text_or_null(s->worker_image));
	json_object_set_new(o, "worker_version", text_or_null(s->worker_version));
	json_object_set_new(o, "worker_command", text_or_null(s->worker_command));
	json_object_set_new(o, "visibility_timeout_ms", json_integer(s->visibility_timeout_ms));
	json_object_set_new(o, "max_attempts", json_integer(s->max_attempts));
	json_object_set_new(o, "effect_name", text_or_null(s->effect_name));
	json_object_set_new(o, "effect_table", json_string(s->effect_table));
	json_object_set_new(o, "key_scope", json_string(s->key_scope));
	json_object_set_new(o, "duplicate_acceptor", text_or_null(s->duplicate_acceptor));
	json_object_set_new(o, "reconciliation_owner", text_or_null(s->reconciliation_owner));
	a = json_array();
	for (i = 0; i < s->nkey; i++)
		json_array_append_new(a, json_string(s->key[i]));
	json_object_set_new(o, "key", a);
	a = json_array();
	for (i = 0; i < s->ncannot_reproduce; i++)
		json_array_append_new(a, json_string(s->cannot_reproduce[i]));
	json_object_set_new(o, "cannot_reproduce", a);
	a = json_array();
	for (i = 0; i < s->nschema; i++)
		json_array_append_new(a, json_pack("{s:s,s:s}", "name", s->schema[i].name,
		    "type", idem_payload_type_name(s->schema[i].type)));
	json_object_set_new(o, "payload_schema", a);
	a = json_array();
	for (i = 0; i < s->ndeclared; i++)
		json_array_append_new(a, idem_seed_job_to_json(s, &s->declared[i]));
	json_object_set_new(o, "jobs", a);
	a = json_array();
	for (i = 0; i < s->nscenarios; i++) {
		const struct idem_seed_scenario *sc = &s->scenarios[i];

		v = json_pack("{s:s,s:s,s:I,s:I}", "name", sc->name, "fault", sc->fault,
		    "duplicates", (json_int_t)sc->duplicates, "within_ms", (json_int_t)sc->within_ms);
		json_object_set_new(v, "step", text_or_null(sc->step));
		json_object_set_new(v, "until", text_or_null(sc->until));
		json_object_set_new(v, "attempt", sc->attempt ? json_integer(sc->attempt) : json_null());
		json_array_append_new(a, v);
	}
	json_object_set_new(o, "scenarios", a);
	json_object_set_new(o, "expect", json_pack("{s:I,s:I,s:I,s:I,s:o,s:o}",
	    "effects", (json_int_t)s->expect_effects, "duplicates", (json_int_t)s->expect_duplicates,
	    "missing", (json_int_t)s->expect_missing, "pending", (json_int_t)s->expect_pending,
	    "external", s->expect_external >= 0 ? json_integer(s->expect_external) : json_null(),
	    "verdict", s->expect_verdict ? json_string(s->expect_verdict) : json_null()));
	if (s->external.name != NULL) {
		a = json_array();
		for (i = 0; i < s->external.nkey; i++)
			json_array_append_new(a, json_string(s->external.key[i]));
		json_object_set_new(o, "external", json_pack("{s:s,s:o,s:b,s:o,s:o}",
		    "name", s->external.name, "key", a,
		    "honours_idempotency_key", s->external.honours_idempotency_key,
		    "pending_table", text_or_null(s->external.pending_table),
		    "pending_owner", text_or_null(s->external.pending_owner)));
	} else {
		json_object_set_new(o, "external", json_null());
	}
	json_object_set_new(o, "generate_count", json_integer(s->generate_count));
	return o;
}
