/* staleness.c: whether a record is stale, as verify-record --history
 * judges it */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "seed.h"
#include "staleness.h"
#include "yamljson.h"
#include "file.h"

/* Adds a reason of staleness to out, after those already there. */
static void
stale_reason(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
stale_reason(char *out, size_t size, const char *fmt, ...)
{
	size_t len = strlen(out);
	va_list ap;

	if (len > 0 && len + 2 < size) {
		strcpy(out + len, "; ");
		len += 2;
	}
	va_start(ap, fmt);
	vsnprintf(out + len, size - len, fmt, ap);
	va_end(ap);
}

/* The seed's text field and the record's differ (the record has it). */
static void
stale_text(char *out, size_t size, const char *what, const char *in_seed, const char *recorded)
{
	if (recorded != NULL && strcmp(in_seed ? in_seed : "", recorded) != 0)
		stale_reason(out, size, "the seed's %s is %s, the record rehearsed %s", what,
		    in_seed ? in_seed : "none", recorded);
}

/* The guard the seed declares now against the one the record rehearsed:
 * another table or key, or one declared or dropped since. */
static void
guard_staleness(const json_t *record, const struct idem_seed *seed, char *out, size_t size)
{
	const json_t *then = json_object_get(record, "declared_guard");
	json_t *now = json_null();
	char *a, *b;
	size_t i;

	if (seed->guard_table != NULL) {
		now = json_pack("{s:s,s:[]}", "table", seed->guard_table, "key");
		for (i = 0; i < seed->nguard_key; i++)
			json_array_append_new(json_object_get(now, "key"), json_string(seed->guard_key[i]));
	}
	if (then == NULL || json_is_null(then) ?
	    json_is_null(now) :
	    json_equal(json_object_get(then, "table"), json_object_get(now, "table")) &&
	    json_equal(json_object_get(then, "key"), json_object_get(now, "key"))) {
		json_decref(now);
		return;
	}
	a = json_is_null(now) ? idem_estrdup("none") : json_dumps(now, JSON_COMPACT | JSON_SORT_KEYS);
	if (then == NULL || json_is_null(then)) {
		b = idem_estrdup("none");
	} else {
		json_t *t = json_pack("{s:O,s:O}", "table", json_object_get(then, "table"), "key",
		    json_object_get(then, "key"));

		b = json_dumps(t, JSON_COMPACT | JSON_SORT_KEYS);
		json_decref(t);
	}
	stale_reason(out, size, "the seed's guard declaration is %s, the record rehearsed %s", a, b);
	free(a);
	free(b);
	json_decref(now);
}

/* The worker's files as they are now against the hashes the run took: a
 * script named on its command line, relative to the work tree, and the
 * executable, where it still is. */
static void
worker_file_staleness(const json_t *record, char *out, size_t size)
{
	const json_t *observed = json_object_get(json_object_get(record, "worker"), "observed");
	static const char *const files[][2] = {
		{ "script", "script_sha256" }, { "executable", "executable_sha256" }
	};
	char now[65];
	size_t i;

	for (i = 0; i < 2; i++) {
		const char *path = idem_json_str(observed, files[i][0]);
		const char *then = idem_json_str(observed, files[i][1]);

		if (path == NULL || then == NULL || idem_sha256_file(path, now) < 0)
			continue;
		if (strcmp(now, then) != 0)
			stale_reason(out, size, "the worker's %s %s has changed since the run (SHA-256 "
			    "%.12s..., the record %.12s...)", files[i][0], path, now, then);
	}
}

/* The seed no longer matches what the record rehearsed: each difference
 * named. */
static void
seed_staleness(const json_t *record, char *out, size_t size)
{
	const char *seed_path = idem_json_str(record, "seed.path");
	const json_t *queue = json_object_get(record, "queue");
	/* a record of format 1 names idem's queue by a text */
	const char *queue_kind = idem_json_str(queue, "kind") ? idem_json_str(queue, "kind") : "idem";
	const json_t *retry = json_object_get(record, "retry");
	const json_t *recorded_key = json_object_get(json_object_get(record, "effect"), "key");
	json_t *key;
	struct idem_seed seed;
	struct idem_error err;
	size_t i;

	if (seed_path == NULL || access(seed_path, F_OK) != 0)
		return;
	if (idem_seed_load(&seed, seed_path, &err) < 0) {
		idem_seed_free(&seed);
		return;
	}
	stale_text(out, size, "worker image", seed.worker_image,
	    idem_json_str(record, "worker.image"));
	stale_text(out, size, "worker version", seed.worker_version,
	    idem_json_str(record, "worker.version"));
	stale_text(out, size, "worker command", seed.worker_command,
	    idem_json_str(record, "worker.command"));
	if (idem_json_num(retry, "visibility_timeout_ms") != seed.visibility_timeout_ms ||
	    idem_json_num(retry, "max_attempts") != seed.max_attempts)
		stale_reason(out, size, "the seed's retry policy (%lld ms, %lld attempts) is not the one "
		    "rehearsed", seed.visibility_timeout_ms, seed.max_attempts);
	key = json_array();
	for (i = 0; i < seed.nkey; i++)
		json_array_append_new(key, json_string(seed.key[i]));
	if (json_is_array(recorded_key) && !json_equal(key, recorded_key)) {
		char *now = json_dumps(key, JSON_COMPACT), *then = json_dumps(recorded_key, JSON_COMPACT);

		stale_reason(out, size, "the seed's key columns are %s, the record rehearsed %s", now, then);
		free(now);
		free(then);
	}
	json_decref(key);
	stale_text(out, size, "key scope", seed.key_scope, idem_json_str(record, "effect.key_scope"));
	stale_text(out, size, "queue kind", seed.queue_kind, queue_kind);
	guard_staleness(record, &seed, out, size);
	idem_seed_free(&seed);
}

/* The seed's adapter file as it is now against the SHA-256 the record
 * rehearsed: a changed adapter speaks of another queue, as a changed seed
 * of another rehearsal. Both paths are from where the run was; where its
 * seed is not either, nothing is said. */
static void
adapter_staleness(const json_t *record, char *out, size_t size)
{
	const char *path = idem_json_str(record, "queue.adapter.path");
	const char *then = idem_json_str(record, "queue.adapter.sha256");
	const char *seed_path = idem_json_str(record, "seed.path");
	char now[65];

	if (path == NULL || then == NULL || seed_path == NULL || access(seed_path, F_OK) != 0)
		return;
	if (idem_sha256_file(path, now) < 0)
		stale_reason(out, size, "the queue adapter %s is gone since the run", path);
	else if (strcmp(now, then) != 0)
		stale_reason(out, size, "the queue adapter %s has changed since the run (SHA-256 "
		    "%.12s..., the record %.12s...)", path, now, then);
}

/* The version of a kind of queue in the database, read once: NULL where
 * that kind is not installed; *known is 0 for a kind this program does
 * not know. A team's kind is read through its adapter file, as it is now,
 * once per file; one that no longer parses is not known (the adapter's
 * own staleness says why). */
static int
version_in_use(struct idem_staleness *s, const char *kind, const char *adapter,
	       const char **version, int *known, struct idem_error *err)
{
	struct idem_queue q;
	struct idem_error open_err;
	json_t *seen;
	char *read, *cache_key;
	int rc = 0;

	*known = 1;
	*version = NULL;
	if (asprintf(&cache_key, "%s%s", adapter ? "file " : "", adapter ? adapter : kind) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if ((seen = json_object_get(s->queues, cache_key)) != NULL) {
		*version = json_string_value(seen);
		goto out;
	}
	if ((adapter ? idem_queue_open_file(&q, adapter, kind, "", &open_err) :
	    idem_queue_open(&q, kind, "", &open_err)) < 0) {
		idem_queue_close(&q);
		*known = 0;
		goto out;
	}
	rc = idem_queue_version(&q, s->db, &read, err);
	idem_queue_close(&q);
	if (rc < 0)
		goto out;
	if (s->queues == NULL)
		s->queues = json_object();
	json_object_set_new(s->queues, cache_key, read ? json_string_nocheck(read) : json_null());
	free(read);
	*version = json_string_value(json_object_get(s->queues, cache_key));
out:
	free(cache_key);
	return rc;
}

/* The queue library's schema in the database is at another version than
 * the one the record rehearsed: the record describes an older system. A
 * record that does not say its version (format 1, or a queue row without
 * one), a kind this program does not know, and a library not installed in
 * the database say nothing. */
static int
queue_staleness(struct idem_staleness *s, const json_t *record, char *out, size_t size,
		struct idem_error *err)
{
	const json_t *queue = json_object_get(record, "queue");
	const char *kind = idem_json_str(queue, "kind"), *rehearsed = idem_json_str(queue, "version");
	const char *adapter = idem_json_str(queue, "adapter.path");
	const char *in_use;
	int known;

	if (kind == NULL || rehearsed == NULL)
		return 0;
	if (version_in_use(s, kind, adapter, &in_use, &known, err) < 0)
		return -1;
	if (known && in_use != NULL && strcmp(in_use, rehearsed) != 0)
		stale_reason(out, size, "the %s queue's schema is version %s in the database, the record "
		    "rehearsed version %s: not rehearsed since the queue's upgrade", kind, in_use,
		    rehearsed);
	return 0;
}

int
idem_staleness(struct idem_staleness *s, const json_t *record, const char *now, int newest,
	       char *out, size_t size, struct idem_error *err)
{
	const char *next = idem_json_str(record, "next_review");

	out[0] = '\0';
	/* a superseded record is history: only the newest of a rehearsal can
	 * go stale, for its review date as for anything else */
	if (!newest)
		return 0;
	if (next && strcmp(next, now) < 0)
		stale_reason(out, size, "next review date %s passed", next);
	seed_staleness(record, out, size);
	adapter_staleness(record, out, size);
	worker_file_staleness(record, out, size);
	if (s->db != NULL)
		return queue_staleness(s, record, out, size, err);
	return 0;
}

void
idem_staleness_free(struct idem_staleness *s)
{
	json_decref(s->queues);
	s->queues = NULL;
}
