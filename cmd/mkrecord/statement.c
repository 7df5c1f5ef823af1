/* statement.c: the in-toto statement of a record, a test-result predicate
 * about the record, its seed and the worker that ran, signed in a DSSE
 * envelope with the record's key */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "statement.h"
#include "dsse.h"
#include "error.h"
#include "text.h"
#include "intoto.h"
#include "yamljson.h"

/* Whether an entry of the list at key names the scenario, with field
 * equal to value (or any value, for a NULL field; null for "null"). */
static int
named(const json_t *record, const char *key, const char *scenario, const char *field,
      const char *value)
{
	const json_t *entry, *v;
	size_t i;

	json_array_foreach(json_object_get(record, key), i, entry) {
		if (!json_is_string(json_object_get(entry, "scenario")) ||
		    strcmp(json_string_value(json_object_get(entry, "scenario")), scenario) != 0)
			continue;
		if (field == NULL)
			return 1;
		v = json_object_get(entry, field);
		if (strcmp(value, "null") == 0 ? (v == NULL || json_is_null(v)) :
		    (json_is_string(v) && strcmp(json_string_value(v), value) == 0))
			return 1;
	}
	return 0;
}

/*
 * A scenario fails when a finding of the record names it: a missed kill
 * point, race or stall of it, a stall of it released by its bound, or a
 * kill of it that no later delivery acked. Every other finding is the
 * whole run's: it fails the run's test, and with the verdict best effort
 * every test that did not fail only warns.
 */
void
idem_statement_tests(const json_t *record, json_t *passed, json_t *warned, json_t *failed)
{
	const char *verdict = idem_json_str(record, "verdict"), *result = idem_intoto_result(verdict);
	const json_t *scenario;
	json_t *ok = strcmp(result, "WARNED") == 0 ? warned : passed;
	size_t i;

	json_array_foreach(json_object_get(record, "scenarios"), i, scenario) {
		const char *name = idem_json_str(scenario, "name");

		if (name == NULL)
			continue;
		if (named(record, "missed", name, NULL, NULL) ||
		    named(record, "stalls", name, "release", "bound") ||
		    named(record, "kill_points", name, "acked_at", "null"))
			json_array_append_new(failed, json_string(name));
		else
			json_array_append_new(ok, json_string(name));
	}
	json_array_append_new(strcmp(result, "FAILED") == 0 ? failed : ok,
	    json_string(IDEM_INTOTO_RUN_TEST));
}

/* A subject or resource: name, and its digests (sha256, then others). */
static json_t *
descriptor(const char *name, const char *sha256)
{
	return json_pack("{s:s,s:{s:s}}", "name", name, "digest", "sha256", sha256);
}

static json_t *
statement(const json_t *record, const char *yaml, const char *record_path)
{
	const char *slash = strrchr(record_path, '/'), *seed = idem_json_str(record, "seed.repo_path");
	const char *seed_sha = idem_json_str(record, "seed.sha256");
	const char *revision = idem_json_str(record, "seed.revision");
	const char *adapter = idem_json_str(record, "queue.adapter.repo_path");
	const char *adapter_sha = idem_json_str(record, "queue.adapter.sha256");
	const json_t *observed = json_object_get(json_object_get(record, "worker"), "observed");
	static const char *const ran[][2] = { { "executable", "executable_sha256" },
		{ "script", "script_sha256" } };
	json_t *subjects = json_array(), *config, *predicate, *passed = json_array(),
	    *warned = json_array(), *failed = json_array();
	char sha[65];
	size_t i;

	idem_sha256_hex(yaml, strlen(yaml), sha);
	json_array_append_new(subjects, descriptor(slash ? slash + 1 : record_path, sha));
	json_array_append_new(subjects, descriptor(seed ? seed : "", seed_sha ? seed_sha : ""));
	if (adapter != NULL && adapter_sha != NULL)
		json_array_append_new(subjects, descriptor(adapter, adapter_sha));
	for (i = 0; i < sizeof(ran) / sizeof(ran[0]); i++) {
		const char *path = json_string_value(json_object_get(observed, ran[i][0]));
		const char *digest = json_string_value(json_object_get(observed, ran[i][1]));

		if (path != NULL && digest != NULL)
			json_array_append_new(subjects, descriptor(path, digest));
	}
	config = descriptor(seed ? seed : "", seed_sha ? seed_sha : "");
	/* the revision holds the seed's bytes unless the record says dirty */
	if (revision != NULL && *revision != '\0' &&
	    !json_is_true(json_object_get(json_object_get(record, "seed"), "dirty")))
		json_object_set_new(json_object_get(config, "digest"), "gitCommit", json_string(revision));
	idem_statement_tests(record, passed, warned, failed);
	predicate = json_pack("{s:s,s:[o],s:o,s:o}", "result",
	    idem_intoto_result(idem_json_str(record, "verdict")), "configuration", config,
	    "passedTests", passed, "failedTests", failed);
	if (json_array_size(warned) > 0)
		json_object_set(predicate, "warnedTests", warned);
	json_decref(warned);
	return json_pack("{s:s,s:o,s:s,s:o}", "_type", IDEM_INTOTO_STATEMENT, "subject", subjects,
	    "predicateType", IDEM_INTOTO_PREDICATE, "predicate", predicate);
}

char *
idem_statement_envelope(const json_t *record, const char *yaml, const char *record_path,
		     const struct idem_key *key)
{
	json_t *s = statement(record, yaml, record_path);
	char *text, *line;

	if (s == NULL || (text = json_dumps(s, JSON_COMPACT | JSON_SORT_KEYS)) == NULL)
		idem_die(IDEM_EXIT_ENV, "the in-toto statement could not be made: out of memory");
	line = idem_dsse_sign(key, IDEM_DSSE_INTOTO_TYPE, text, strlen(text));
	free(text);
	json_decref(s);
	return line;
}
