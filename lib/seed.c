#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libpq-fe.h>
#include <yaml.h>

#include "json.h"
#include "seed.h"
#include "tsv.h"
#include "seed_impl.h"
#include "file.h"
#include "queue.h"
#include "text.h"

/* Aliases are allowed, for a payload shared by jobs, as long as the nodes
 * they stand for stay within the same bound as the nodes written. */
const struct idem_yaml_limits idem_seed_limits = {
	.bytes = 16 << 20, .nodes = 1000000, .depth = 64, .expanded = 1000000, .kind = "a seed",
};

/* Parsing state: the YAML document and where errors go. */
struct loader {
	const char *path;
	yaml_document_t doc;
	struct idem_error *err;
	struct idem_seed *seed;
};

/* The kinds of queue a seed may name: IDEM_QUEUE_KINDS of idem-tsv(5). */
static const char *const queue_kinds[] = { "idem", "pg-boss", "graphile-worker", NULL };

static const char *const standard_steps[] = {
	"consumed", "before-write", "before-commit", "after-commit",
	"external-call", "before-ack", "acked", NULL
};

static int
fail_at(struct loader *l, const yaml_node_t *n, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int
fail_at(struct loader *l, const yaml_node_t *n, const char *field, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return idem_error_set(l->err, IDEM_EXIT_USAGE, "%s:%lu:%lu: %s: %s", l->path,
	    (unsigned long)n->start_mark.line + 1, (unsigned long)n->start_mark.column + 1,
	    field, msg);
}

static yaml_node_t *
node(struct loader *l, int id)
{
	return yaml_document_get_node(&l->doc, id);
}

static const char *
scalar(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int
is_plain(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* YAML core schema resolution of a plain scalar. */
enum plain_kind { PLAIN_STRING, PLAIN_NULL, PLAIN_BOOL, PLAIN_INT, PLAIN_FLOAT };

static enum plain_kind
resolve_plain(const yaml_node_t *n)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL", NULL };
	static const char *const bools[] = { "true", "True", "TRUE", "false", "False",
		"FALSE", NULL };
	const char *s = scalar(n), *p;
	size_t i;

	if (!is_plain(n))
		return PLAIN_STRING;
	for (i = 0; nulls[i]; i++)
		if (strcmp(s, nulls[i]) == 0)
			return PLAIN_NULL;
	for (i = 0; bools[i]; i++)
		if (strcmp(s, bools[i]) == 0)
			return PLAIN_BOOL;
	p = s + (*s == '-' || *s == '+');
	if (*p >= '0' && *p <= '9' && p[strspn(p, "0123456789")] == '\0')
		return PLAIN_INT;
	if (strspn(p, "0123456789.eE+-") == strlen(p) && strchr(p, '.') != NULL &&
	    strspn(p, "0123456789") > 0)
		return PLAIN_FLOAT;
	if (strcmp(p, ".inf") == 0 || strcmp(s, ".nan") == 0 || strcmp(p, ".Inf") == 0 ||
	    strcmp(s, ".NaN") == 0)
		return PLAIN_FLOAT;
	return PLAIN_STRING;
}

static const char *
plain_kind_name(enum plain_kind k)
{
	switch (k) {
	case PLAIN_NULL: return "null";
	case PLAIN_BOOL: return "boolean";
	case PLAIN_INT: return "integer";
	case PLAIN_FLOAT: return "floating-point number";
	default: return "string";
	}
}

static const char *
node_kind_name(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE: return "mapping";
	case YAML_SEQUENCE_NODE: return "list";
	default: return plain_kind_name(resolve_plain(n));
	}
}

/* Checks that a mapping has only allowed keys, each once. */
static int
check_mapping(struct loader *l, const yaml_node_t *map, const char *field,
	      const char *const *allowed)
{
	yaml_node_pair_t *pair, *other;
	char where[512];
	size_t i;

	if (map->type != YAML_MAPPING_NODE)
		return fail_at(l, map, field, "expected a mapping, got a %s", node_kind_name(map));
	for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
		yaml_node_t *key = node(l, pair->key);
		const char *name = scalar(key);

		if (name == NULL)
			return fail_at(l, key, field, "keys must be plain names");
		for (i = 0; allowed[i]; i++)
			if (strcmp(allowed[i], name) == 0)
				break;
		snprintf(where, sizeof(where), "%s%s%s", field, *field ? "." : "", name);
		if (allowed[i] == NULL && idem_text_nearest(name, allowed) != NULL)
			return fail_at(l, key, where, "unknown key; did you mean %s?",
			    idem_text_nearest(name, allowed));
		if (allowed[i] == NULL)
			return fail_at(l, key, where, "unknown key (a typo?)");
		for (other = map->data.mapping.pairs.start; other < pair; other++)
			if (strcmp(scalar(node(l, other->key)), name) == 0)
				return fail_at(l, key, where, "key given twice");
	}
	return 0;
}

static yaml_node_t *
lookup(struct loader *l, const yaml_node_t *map, const char *name)
{
	yaml_node_pair_t *pair;

	for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++)
		if (strcmp(scalar(node(l, pair->key)), name) == 0)
			return node(l, pair->value);
	return NULL;
}

static void
field_name(char *buf, size_t size, const char *parent, const char *name)
{
	snprintf(buf, size, "%s%s%s", parent, *parent ? "." : "", name);
}

/* A non-empty text value; optional ones stay NULL when absent. */
static int
get_text(struct loader *l, const yaml_node_t *map, const char *parent, const char *name,
	 int required, char **out)
{
	yaml_node_t *n = lookup(l, map, name);
	char field[512];

	field_name(field, sizeof(field), parent, name);
	if (n == NULL) {
		if (required)
			return fail_at(l, map, field, "required key missing");
		return 0;
	}
	if (n->type != YAML_SCALAR_NODE || resolve_plain(n) == PLAIN_NULL)
		return fail_at(l, n, field, "expected text, got a %s", node_kind_name(n));
	if (*scalar(n) == '\0')
		return fail_at(l, n, field, "empty");
	*out = idem_estrdup(scalar(n));
	return 0;
}

static int
get_int(struct loader *l, const yaml_node_t *map, const char *parent, const char *name,
	long long min, long long dflt, long long *out, int *present)
{
	yaml_node_t *n = lookup(l, map, name);
	char field[512], *end;
	long long v;

	field_name(field, sizeof(field), parent, name);
	if (present)
		*present = n != NULL;
	if (n == NULL) {
		*out = dflt;
		return 0;
	}
	if (resolve_plain(n) != PLAIN_INT)
		return fail_at(l, n, field, "expected an integer, got a %s", node_kind_name(n));
	errno = 0;
	v = strtoll(scalar(n), &end, 10);
	if (errno == ERANGE)
		return fail_at(l, n, field, "integer out of range");
	if (v < min)
		return fail_at(l, n, field, "must be at least %lld", min);
	*out = v;
	return 0;
}

static int
get_duration(struct loader *l, const yaml_node_t *map, const char *parent, const char *name,
	     long long dflt, long long *out)
{
	yaml_node_t *n = lookup(l, map, name);
	char field[512];

	field_name(field, sizeof(field), parent, name);
	if (n == NULL) {
		*out = dflt;
		return 0;
	}
	if (n->type != YAML_SCALAR_NODE || (*out = idem_parse_duration_ms(scalar(n))) < 0)
		return fail_at(l, n, field,
		    "expected a duration such as 500ms, 2s, 1m or 1h, got \"%s\"",
		    scalar(n) ? scalar(n) : node_kind_name(n));
	return 0;
}

static int
get_bool(struct loader *l, const yaml_node_t *map, const char *parent, const char *name,
	 int *out)
{
	yaml_node_t *n = lookup(l, map, name);
	char field[512];

	field_name(field, sizeof(field), parent, name);
	*out = 0;
	if (n == NULL)
		return 0;
	if (resolve_plain(n) != PLAIN_BOOL)
		return fail_at(l, n, field, "expected true or false, got a %s", node_kind_name(n));
	*out = scalar(n)[0] == 't' || scalar(n)[0] == 'T';
	return 0;
}

/* A list of non-empty text values. */
static int
get_text_list(struct loader *l, const yaml_node_t *map, const char *parent, const char *name,
	      char ***out, size_t *count)
{
	yaml_node_t *n = lookup(l, map, name);
	yaml_node_item_t *item;
	char field[512];
	size_t i = 0;

	*out = NULL;
	*count = 0;
	field_name(field, sizeof(field), parent, name);
	if (n == NULL)
		return 0;
	if (n->type != YAML_SEQUENCE_NODE)
		return fail_at(l, n, field, "expected a list, got a %s", node_kind_name(n));
	*out = idem_ereallocarray(NULL,
	    (size_t)(n->data.sequence.items.top - n->data.sequence.items.start) + 1,
	    sizeof(char *));
	for (item = n->data.sequence.items.start; item < n->data.sequence.items.top; item++) {
		yaml_node_t *v = node(l, *item);

		if (v->type != YAML_SCALAR_NODE || resolve_plain(v) == PLAIN_NULL || !*scalar(v))
			return fail_at(l, v, field, "expected text, got a %s", node_kind_name(v));
		(*out)[i++] = idem_estrdup(scalar(v));
		*count = i;
	}
	return 0;
}

const char *
idem_payload_type_name(enum idem_payload_type type)
{
	static const char *const names[] = { "string", "integer", "boolean", "object", "array" };

	return names[type];
}

/* Any YAML value as JSON, scalars resolved by the YAML core schema. */
static json_t *
to_json(struct loader *l, const yaml_node_t *n, const char *field)
{
	json_t *out = NULL, *v;
	char sub[512];

	/* idem_yaml_load bounded the depth and what aliases expand to */
	switch (n->type) {
	case YAML_MAPPING_NODE: {
		yaml_node_pair_t *pair;

		out = json_object();
		for (pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; pair++) {
			yaml_node_t *k = node(l, pair->key);

			if (scalar(k) == NULL) {
				fail_at(l, k, field, "keys must be text");
				goto fail;
			}
			if (json_object_get(out, scalar(k)) != NULL) {
				field_name(sub, sizeof(sub), field, scalar(k));
				fail_at(l, k, sub, "key given twice");
				goto fail;
			}
			field_name(sub, sizeof(sub), field, scalar(k));
			if ((v = to_json(l, node(l, pair->value), sub)) == NULL)
				goto fail;
			json_object_set_new(out, scalar(k), v);
		}
		return out;
	}
	case YAML_SEQUENCE_NODE: {
		yaml_node_item_t *item;
		size_t i = 0;

		out = json_array();
		for (item = n->data.sequence.items.start; item < n->data.sequence.items.top; item++) {
			snprintf(sub, sizeof(sub), "%s[%zu]", field, i++);
			if ((v = to_json(l, node(l, *item), sub)) == NULL)
				goto fail;
			json_array_append_new(out, v);
		}
		return out;
	}
	default:
		break;
	}
	switch (resolve_plain(n)) {
	case PLAIN_NULL:
		return json_null();
	case PLAIN_BOOL:
		return json_boolean(scalar(n)[0] == 't' || scalar(n)[0] == 'T');
	case PLAIN_INT: {
		long long i;

		errno = 0;
		i = strtoll(scalar(n), NULL, 10);
		if (errno == ERANGE) {
			fail_at(l, n, field, "integer out of range");
			return NULL;
		}
		return json_integer(i);
	}
	case PLAIN_FLOAT:
		fail_at(l, n, field, "floating-point numbers are not accepted in payloads "
		    "(their canonical form is ambiguous); use an integer such as cents, or quote it");
		return NULL;
	default:
		return json_stringn(scalar(n), n->data.scalar.length);
	}
fail:
	json_decref(out);
	return NULL;
}

static int
type_matches(const json_t *v, enum idem_payload_type type)
{
	switch (type) {
	case IDEM_TYPE_STRING: return json_is_string(v);
	case IDEM_TYPE_INTEGER: return json_is_integer(v);
	case IDEM_TYPE_BOOLEAN: return json_is_boolean(v);
	case IDEM_TYPE_OBJECT: return json_is_object(v);
	case IDEM_TYPE_ARRAY: return json_is_array(v);
	}
	return 0;
}

static const char *
json_kind_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "mapping";
	case JSON_ARRAY: return "list";
	case JSON_STRING: return "string";
	case JSON_INTEGER: return "integer";
	case JSON_TRUE: case JSON_FALSE: return "boolean";
	case JSON_NULL: return "null";
	default: return "number";
	}
}

static int
load_schema(struct loader *l, const yaml_node_t *root)
{
	struct idem_seed *s = l->seed;
	yaml_node_t *map = lookup(l, root, "payload_schema");
	yaml_node_pair_t *pair;
	size_t i;

	if (map == NULL)
		return fail_at(l, root, "payload_schema", "required key missing");
	if (map->type != YAML_MAPPING_NODE || map->data.mapping.pairs.top == map->data.mapping.pairs.start)
		return fail_at(l, map, "payload_schema",
		    "expected a mapping of field names to types");
	s->schema = idem_ereallocarray(NULL,
	    (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start),
	    sizeof(*s->schema));
	for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
		yaml_node_t *k = node(l, pair->key), *v = node(l, pair->value);
		struct idem_seed_field *f = &s->schema[s->nschema];
		char field[512];

		if (scalar(k) == NULL || !*scalar(k))
			return fail_at(l, k, "payload_schema", "field names must be text");
		field_name(field, sizeof(field), "payload_schema", scalar(k));
		if (json_object_get(s->index->fields, scalar(k)) != NULL)
			return fail_at(l, k, field, "key given twice");
		for (i = 0; i < 5; i++)
			if (scalar(v) && strcmp(scalar(v), idem_payload_type_name(i)) == 0)
				break;
		if (i == 5)
			return fail_at(l, v, field,
			    "unknown type (expected string, integer, boolean, object or array)");
		f->name = idem_estrdup(scalar(k));
		f->type = i;
		f->in_key = 0;
		json_object_set_new_nocheck(s->index->fields, f->name, json_integer((json_int_t)s->nschema));
		s->nschema++;
	}
	return 0;
}

static struct idem_seed_field *
schema_field(const struct idem_seed *s, const char *name)
{
	json_t *i = json_object_get(s->index->fields, name);

	return i ? &s->schema[json_integer_value(i)] : NULL;
}

static int
check_payload(struct loader *l, const yaml_node_t *n, const char *field, const json_t *payload)
{
	const struct idem_seed *s = l->seed;
	const char *name;
	json_t *v;
	size_t i;

	if (!json_is_object(payload))
		return fail_at(l, n, field, "expected a mapping, got a %s", json_kind_name(payload));
	for (i = 0; i < s->nschema; i++) {
		char sub[512];

		field_name(sub, sizeof(sub), field, s->schema[i].name);
		v = json_object_get(payload, s->schema[i].name);
		if (v == NULL)
			return fail_at(l, n, sub, "missing (payload_schema requires it)");
		if (!type_matches(v, s->schema[i].type)) {
			yaml_node_t *vn = lookup(l, n, s->schema[i].name);

			return fail_at(l, vn, sub, "expected %s, got %s%s",
			    idem_payload_type_name(s->schema[i].type), json_kind_name(v),
			    s->schema[i].type == IDEM_TYPE_STRING && vn && is_plain(vn) ?
			    " (quote it to make it text)" : "");
		}
	}
	json_object_foreach((json_t *)payload, name, v) {
		if (schema_field(s, name) == NULL) {
			char sub[512];

			field_name(sub, sizeof(sub), field, name);
			return fail_at(l, lookup(l, n, name), sub, "not in payload_schema");
		}
	}
	return 0;
}

static int
load_jobs(struct loader *l, const yaml_node_t *root)
{
	static const char *const job_keys[] = { "id", "payload", NULL };
	struct idem_seed *s = l->seed;
	yaml_node_t *list = lookup(l, root, "jobs");
	yaml_node_item_t *item;

	if (list == NULL)
		return 0;
	if (list->type != YAML_SEQUENCE_NODE)
		return fail_at(l, list, "jobs", "expected a list, got a %s", node_kind_name(list));
	s->declared = idem_ereallocarray(NULL,
	    (size_t)(list->data.sequence.items.top - list->data.sequence.items.start) + 1,
	    sizeof(*s->declared));
	for (item = list->data.sequence.items.start; item < list->data.sequence.items.top; item++) {
		yaml_node_t *j = node(l, *item), *p;
		struct idem_seed_job *job = &s->declared[s->ndeclared];
		char field[64], sub[128];

		snprintf(field, sizeof(field), "jobs[%zu]", s->ndeclared);
		if (check_mapping(l, j, field, job_keys) < 0)
			return -1;
		/* counted before anything is put in it, so idem_seed_free frees it */
		memset(job, 0, sizeof(*job));
		job->scenario = -1;
		s->ndeclared++;
		if (get_text(l, j, field, "id", 1, &job->id) < 0)
			return -1;
		snprintf(sub, sizeof(sub), "%s.payload", field);
		if ((p = lookup(l, j, "payload")) == NULL)
			return fail_at(l, j, sub, "required key missing");
		job->line = (long)j->start_mark.line + 1;
		job->column = (long)j->start_mark.column + 1;
		if ((job->payload = to_json(l, p, sub)) == NULL)
			return -1;
		if (check_payload(l, p, sub, job->payload) < 0)
			return -1;
		seed_finish_job(s, job);
		if (json_object_get(s->index->declared, job->id) == NULL)
			json_object_set_new_nocheck(s->index->declared, job->id,
			    json_integer((json_int_t)s->ndeclared - 1));
	}
	return 0;
}

static int
valid_step(const char *step)
{
	size_t i;

	for (i = 0; standard_steps[i]; i++)
		if (strcmp(standard_steps[i], step) == 0)
			return 1;
	return *step && strspn(step, "abcdefghijklmnopqrstuvwxyz0123456789-_.") == strlen(step);
}

/* A job that the last scenario names, declared or generated. */
static int
name_job(struct loader *l, const yaml_node_t *n, const char *field)
{
	struct idem_seed *s = l->seed;
	const char *id = scalar(n);
	json_t *found = id ? json_object_get(s->index->declared, id) : NULL;
	long scenario = (long)s->nscenarios - 1, other;

	if (found != NULL) {
		struct idem_seed_job *job = &s->declared[json_integer_value(found)];

		if ((other = job->scenario) < 0) {
			job->scenario = scenario;
			return 0;
		}
	} else if (id != NULL && seed_generated_number(s, id, "gen") > 0) {
		if ((found = json_object_get(s->index->named, id)) == NULL) {
			json_object_set_new_nocheck(s->index->named, id, json_integer(scenario));
			return 0;
		}
		other = (long)json_integer_value(found);
	} else {
		return fail_at(l, n, field, "jobs: no job with id \"%s\"", id ? id : "?");
	}
	return fail_at(l, n, field, "jobs: job %s is already in scenario %s; a job belongs to at "
	    "most one scenario", id, s->scenarios[other].name);
}

/* kill: STEP or stall: STEP, with the attempt it hits; external-call
 * needs the external call declared. */
static int
load_held_fault(struct loader *l, const yaml_node_t *n, const char *field,
		struct idem_seed_scenario *sc, const char *fault, long long attempt)
{
	if (get_text(l, n, field, fault, 1, &sc->step) < 0)
		return -1;
	sc->fault = fault;
	sc->attempt = attempt;
	if (strcmp(sc->step, "external-call") == 0 && l->seed->external.name == NULL)
		return fail_at(l, lookup(l, n, fault), field, "%s: external-call is the "
		    "call to an external system: declare it with external: { name: ..., "
		    "key: [...], honours_idempotency_key: ... }", fault);
	return 0;
}

/* The vendor faults: the word of vendor: and the scenario's fault. */
static const char *const vendor_words[][2] = {
	{ "error", "vendor-error" }, { "timeout", "vendor-timeout" },
	{ "lost-reply", "vendor-lost-reply" }, { "late-reply", "vendor-late-reply" },
	{ "forget-keys", "vendor-forget-keys" },
};

#define VENDOR_WORDS "error, timeout, lost-reply, late-reply or forget-keys"

/* vendor: error | timeout | lost-reply | late-reply | forget-keys, the
 * vendor double's fault for each of the scenario's jobs; late-reply takes
 * its delay:, forget-keys its forget_after: and a kill. */
static int
load_vendor_fault(struct loader *l, const yaml_node_t *n, const char *field,
		  struct idem_seed_scenario *sc, long long attempt)
{
	const yaml_node_t *v = lookup(l, n, "vendor");
	const char *word = resolve_plain(v) == PLAIN_NULL ? NULL : scalar(v);
	const char *wants = NULL;
	char sub[96];
	size_t i;

	for (i = 0; word != NULL && i < sizeof(vendor_words) / sizeof(vendor_words[0]); i++)
		if (strcmp(word, vendor_words[i][0]) == 0)
			sc->fault = vendor_words[i][1];
	if (sc->fault == NULL && word != NULL)
		return fail_at(l, v, field, "vendor: expected " VENDOR_WORDS ", got \"%s\"", word);
	if (sc->fault == NULL)
		return fail_at(l, v, field, "vendor: expected " VENDOR_WORDS ", got a %s",
		    node_kind_name(v));
	if (l->seed->external.name == NULL)
		return fail_at(l, v, field, "vendor: a vendor fault needs the external call it "
		    "faults: declare it with external: { name: ..., key: [...], "
		    "honours_idempotency_key: ... }");
	if (strcmp(sc->fault, "vendor-late-reply") == 0)
		wants = "delay";
	else if (strcmp(sc->fault, "vendor-forget-keys") == 0)
		wants = "forget_after";
	field_name(sub, sizeof(sub), field, "delay");
	if (lookup(l, n, "delay") && (wants == NULL || strcmp(wants, "delay") != 0))
		return fail_at(l, lookup(l, n, "delay"), sub, "applies to vendor: late-reply "
		    "only: how long after the charge its answer comes");
	field_name(sub, sizeof(sub), field, "forget_after");
	if (lookup(l, n, "forget_after") && (wants == NULL || strcmp(wants, "forget_after") != 0))
		return fail_at(l, lookup(l, n, "forget_after"), sub, "applies to vendor: "
		    "forget-keys only: how long the vendor keeps an idempotency key");
	if (lookup(l, n, "kill") && (wants == NULL || strcmp(wants, "forget_after") != 0))
		return fail_at(l, n, field, "declare one of kill, race, vendor and stall, not two "
		    "(a kill goes with vendor: forget-keys only)");
	if (wants == NULL)
		return 0;
	field_name(sub, sizeof(sub), field, wants);
	if (lookup(l, n, wants) == NULL)
		return fail_at(l, n, sub, "required with vendor: %s: %s", word, wants[0] == 'd' ?
		    "how long after the charge its answer comes, past the worker's own timeout, "
		    "such as 3s" : "how long the vendor keeps an idempotency key, such as 24h");
	if (get_duration(l, n, field, wants, 0, &sc->vendor_ms) < 0)
		return -1;
	if (sc->vendor_ms == 0 || (wants[0] == 'd' && sc->vendor_ms > IDEM_TSV_MAX_LATE_MS))
		return fail_at(l, lookup(l, n, wants), sub, wants[0] == 'd' ? "a delay from 1ms "
		    "to 60s: the run waits for the late answer" : "a window longer than 0");
	if (wants[0] == 'f') {
		const char *fault = sc->fault;

		if (lookup(l, n, "kill") == NULL)
			return fail_at(l, n, field, "vendor: forget-keys goes with a kill: the vendor "
			    "forgets the keys of the killed attempt's job when its lease ends, as "
			    "if the window had passed; add kill: STEP");
		if (load_held_fault(l, n, field, sc, "kill", attempt) < 0)
			return -1;
		sc->fault = fault;
	}
	return 0;
}

/* A scenario's fault: one of kill, race, vendor and stall, else
 * duplicates or conflicting payloads. */
static int
load_fault(struct loader *l, const yaml_node_t *n, const char *field,
	   struct idem_seed_scenario *sc, long long attempt, int has_dups)
{
	if (!!lookup(l, n, "race") + !!lookup(l, n, "vendor") + !!lookup(l, n, "stall") +
	    (lookup(l, n, "kill") && !lookup(l, n, "vendor")) > 1)
		return fail_at(l, n, field, "declare one of kill, race, vendor and stall, not two");
	if (lookup(l, n, "vendor")) {
		return load_vendor_fault(l, n, field, sc, attempt);
	} else if (lookup(l, n, "kill")) {
		return load_held_fault(l, n, field, sc, "kill", attempt);
	} else if (lookup(l, n, "stall")) {
		return load_held_fault(l, n, field, sc, "stall", attempt);
	} else if (lookup(l, n, "race")) {
		if (get_text(l, n, field, "race", 1, &sc->step) < 0)
			return -1;
		if (has_dups && sc->duplicates != 1)
			return fail_at(l, lookup(l, n, "duplicates"), field,
			    "a race is two deliveries at once: duplicates must be 1");
		sc->fault = "race";
		sc->duplicates = 1;
	} else if (sc->duplicates > 0) {
		sc->fault = "duplicate-publish";
	} else if (sc->conflicting_payloads) {
		sc->fault = "same-key";
	} else {
		return fail_at(l, n, field, "declares no fault (duplicates, kill, race, vendor, "
		    "stall or conflicting_payloads)");
	}
	return 0;
}

/* The jobs a scenario names, or none when every: selects them. */
static int
load_scenario_jobs(struct loader *l, const yaml_node_t *n, const char *field, int has_every)
{
	yaml_node_t *jobs = lookup(l, n, "jobs");
	yaml_node_item_t *ji;

	if ((jobs == NULL) == !has_every)
		return fail_at(l, n, field,
		    "name the jobs with jobs: [...] or select them with every: K");
	if (jobs == NULL)
		return 0;
	if (jobs->type != YAML_SEQUENCE_NODE ||
	    jobs->data.sequence.items.top == jobs->data.sequence.items.start)
		return fail_at(l, jobs, field, "jobs: expected a list of job ids");
	for (ji = jobs->data.sequence.items.start; ji < jobs->data.sequence.items.top; ji++)
		if (name_job(l, node(l, *ji), field) < 0)
			return -1;
	return 0;
}

static int
own_step(const struct idem_seed *s, const char *step)
{
	size_t i;

	for (i = 0; i < s->nown_steps; i++)
		if (strcmp(s->own_steps[i], step) == 0)
			return 1;
	return 0;
}

/* A scenario's step, under key: a standard one, or one of the worker's
 * own; a name near a standard one is a typo unless own_steps declares it. */
static int
check_step(struct loader *l, const yaml_node_t *n, const char *field, const char *key,
	   const char *step)
{
	const char *near;
	char sub[96];

	if (!valid_step(step))
		return fail_at(l, lookup(l, n, key), field,
		    "step name \"%s\" must be lowercase letters, digits and -_.", step);
	field_name(sub, sizeof(sub), field, key);
	near = idem_text_nearest(step, standard_steps);
	if (near != NULL && !own_step(l->seed, step))
		return fail_at(l, lookup(l, n, key), sub, "%s is not a standard step; did you mean "
		    "%s? A step of the worker's own is declared in own_steps: [%s]", step,
		    near, step);
	return 0;
}

/* own_steps: [NAME, ...], the worker's own steps that look like a slip. */
static int
load_own_steps(struct loader *l, const yaml_node_t *root)
{
	struct idem_seed *s = l->seed;
	char field[64];
	size_t i, j;

	if (get_text_list(l, root, "", "own_steps", &s->own_steps, &s->nown_steps) < 0)
		return -1;
	for (i = 0; i < s->nown_steps; i++) {
		const yaml_node_t *v = node(l, lookup(l, root, "own_steps")->data.sequence.items.start[i]);

		snprintf(field, sizeof(field), "own_steps[%zu]", i);
		if (!valid_step(s->own_steps[i]))
			return fail_at(l, v, field, "step name \"%s\" must be lowercase letters, "
			    "digits and -_.", s->own_steps[i]);
		for (j = 0; standard_steps[j]; j++)
			if (strcmp(standard_steps[j], s->own_steps[i]) == 0)
				return fail_at(l, v, field, "%s is a standard step, not the "
				    "worker's own", s->own_steps[i]);
	}
	return 0;
}

static int
load_scenarios(struct loader *l, const yaml_node_t *root)
{
	static const char *const keys[] = { "name", "jobs", "every", "duplicates", "within",
		"kill", "attempt", "race", "conflicting_payloads", "vendor", "stall", "until",
		"delay", "forget_after", NULL };
	struct idem_seed *s = l->seed;
	yaml_node_t *list = lookup(l, root, "scenarios");
	yaml_node_item_t *item;
	json_t *names = json_object();
	size_t i;
	int rc = -1;

	if (list == NULL) {
		rc = 0;
		goto out;
	}
	if (list->type != YAML_SEQUENCE_NODE) {
		fail_at(l, list, "scenarios", "expected a list, got a %s", node_kind_name(list));
		goto out;
	}
	i = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
	s->scenarios = idem_ereallocarray(NULL, i + 1, sizeof(*s->scenarios));
	for (item = list->data.sequence.items.start; item < list->data.sequence.items.top; item++) {
		yaml_node_t *n = node(l, *item);
		struct idem_seed_scenario *sc = &s->scenarios[s->nscenarios];
		long long attempt;
		char field[64];
		int has_attempt, has_dups, has_every;

		snprintf(field, sizeof(field), "scenarios[%zu]", s->nscenarios);
		memset(sc, 0, sizeof(*sc));
		if (check_mapping(l, n, field, keys) < 0)
			goto out;
		s->nscenarios++;
		if (get_text(l, n, field, "name", 1, &sc->name) < 0 ||
		    get_int(l, n, field, "duplicates", 0, 0, &sc->duplicates, &has_dups) < 0 ||
		    (sc->duplicates > 100 && fail_at(l, lookup(l, n, "duplicates"), field,
			"duplicates: at most 100 extra copies of a job") < 0) ||
		    get_duration(l, n, field, "within", 0, &sc->within_ms) < 0 ||
		    get_int(l, n, field, "attempt", 1, 1, &attempt, &has_attempt) < 0 ||
		    get_int(l, n, field, "every", 1, 0, &sc->every, &has_every) < 0 ||
		    get_bool(l, n, field, "conflicting_payloads", &sc->conflicting_payloads) < 0)
			goto out;
		if (json_object_get(names, sc->name) != NULL) {
			fail_at(l, lookup(l, n, "name"), field, "scenario name \"%s\" used twice",
			    sc->name);
			goto out;
		}
		json_object_set_new_nocheck(names, sc->name, json_true());
		if (load_fault(l, n, field, sc, attempt, has_dups) < 0)
			goto out;
		if (has_attempt && strcmp(sc->fault, "kill") != 0 && strcmp(sc->fault, "stall") != 0 &&
		    strcmp(sc->fault, "vendor-forget-keys") != 0) {
			fail_at(l, lookup(l, n, "attempt"), field, "attempt applies to kill and "
			    "stall only");
			goto out;
		}
		if (!lookup(l, n, "vendor") && (lookup(l, n, "delay") || lookup(l, n, "forget_after"))) {
			fail_at(l, lookup(l, n, "delay") ? lookup(l, n, "delay") :
			    lookup(l, n, "forget_after"), field, "delay and forget_after apply to "
			    "vendor: late-reply and vendor: forget-keys only");
			goto out;
		}
		if (lookup(l, n, "until") && strcmp(sc->fault, "stall") != 0) {
			fail_at(l, lookup(l, n, "until"), field, "until applies to stall only: the "
			    "step of the redelivered attempt that releases the stalled one");
			goto out;
		}
		if (sc->step && check_step(l, n, field, sc->fault[0] == 'r' ? "race" :
		    sc->fault[0] == 'v' ? "kill" : sc->fault, sc->step) < 0)
			goto out;
		if (lookup(l, n, "until") && (get_text(l, n, field, "until", 1, &sc->until) < 0 ||
		    check_step(l, n, field, "until", sc->until) < 0))
			goto out;
		if (load_scenario_jobs(l, n, field, has_every) < 0)
			goto out;
	}
	/* generated jobs are selected as they are made */
	for (i = 0; i < s->ndeclared; i++)
		if (s->declared[i].scenario < 0)
			s->declared[i].scenario = seed_selected_by_every(s, s->declared[i].id);
	rc = 0;
out:
	json_decref(names);
	return rc;
}

struct job_ref {
	const struct idem_seed_job *job;
	size_t index;
};

static int
by_id(const void *a, const void *b)
{
	const struct job_ref *x = a, *y = b;
	int c = strcmp(x->job->id, y->job->id);

	return c ? c : (x->index > y->index) - (x->index < y->index);
}

static int
by_number(const void *a, const void *b)
{
	const long long *x = a, *y = b;

	return (*x > *y) - (*x < *y);
}

/* A job as the checks remember it; id is owned only when kept. */
struct job_note {
	char *id;
	char payload_sha256[65];
	long long index;
	long line, column;
};

static struct job_note
note_of(const struct idem_seed_job *job, long long index)
{
	struct job_note n = { .id = job->id, .index = index, .line = job->line,
		.column = job->column };

	memcpy(n.payload_sha256, job->payload_sha256, sizeof(n.payload_sha256));
	return n;
}

static void
keep(struct job_note *dst, const struct job_note *src)
{
	*dst = *src;
	dst->id = idem_estrdup(src->id);
}

static int
fail_job(struct loader *l, const struct job_note *job, const char *fmt, const char *a,
	 const char *b)
{
	char msg[768];

	snprintf(msg, sizeof(msg), fmt, a, b);
	if (job->line == 0)
		return idem_error_set(l->err, IDEM_EXIT_USAGE, "%s: generate: generated job %s: %s",
		    l->path, job->id, msg);
	return idem_error_set(l->err, IDEM_EXIT_USAGE, "%s:%ld:%ld: jobs[%lld].%s", l->path,
	    job->line, job->column, job->index, msg);
}

/* The jobs of one business key seen so far, in job order: the first, and
 * the first whose payload differs from it, while all are in
 * conflicting_payloads scenarios; then the first outside such a scenario,
 * whose payload every job of the key must have. */
struct key_jobs {
	struct job_note first, differing, reference;
};

struct key_check {
	json_t *index;		/* business key -> index into keys */
	struct key_jobs *keys;
	size_t nkeys;
};

/* a, in no conflicting_payloads scenario, and b share a key, not a payload:
 * the message points at the declared one of the two, or at the later. */
static int
conflict(struct loader *l, const char *key, const struct job_note *a, const struct job_note *b)
{
	if ((a->line == 0) == (b->line == 0) ? a->index > b->index : b->line == 0) {
		const struct job_note *t = a;

		a = b;
		b = t;
	}
	return fail_job(l, b, "payload: business key %s is already seeded by job %s with another "
	    "payload; put both jobs in a scenario with conflicting_payloads: true if that is the "
	    "point", key, a->id);
}

static int
allows_conflict(const struct idem_seed *s, const struct idem_seed_job *job)
{
	return job->scenario >= 0 && s->scenarios[job->scenario].conflicting_payloads;
}

/* One more job, in job order, of its business key. */
static int
check_key(struct loader *l, struct key_check *c, const struct idem_seed_job *job,
	  long long index)
{
	json_t *found = json_object_get(c->index, job->business_key);
	struct job_note this = note_of(job, index);
	struct key_jobs *k;

	if (found == NULL) {
		c->keys = idem_ereallocarray(c->keys, c->nkeys + 1, sizeof(*c->keys));
		memset(&c->keys[c->nkeys], 0, sizeof(*c->keys));
		json_object_set_new_nocheck(c->index, job->business_key,
		    json_integer((json_int_t)c->nkeys));
		k = &c->keys[c->nkeys++];
	} else {
		k = &c->keys[json_integer_value(found)];
	}
	if (k->reference.id != NULL)
		return strcmp(k->reference.payload_sha256, this.payload_sha256) == 0 ? 0 :
		    conflict(l, job->business_key, &k->reference, &this);
	if (allows_conflict(l->seed, job)) {
		if (k->first.id == NULL)
			keep(&k->first, &this);
		else if (k->differing.id == NULL &&
		    strcmp(k->first.payload_sha256, this.payload_sha256) != 0)
			keep(&k->differing, &this);
		return 0;
	}
	keep(&k->reference, &this);
	if (k->first.id != NULL && strcmp(k->first.payload_sha256, this.payload_sha256) != 0)
		return conflict(l, job->business_key, &k->reference, &k->first);
	if (k->differing.id != NULL)
		return conflict(l, job->business_key, &k->reference, &k->differing);
	return 0;
}

/* The number of the generated job that could share a declared payload's
 * business key, or 0. Generated keys differ from one another when a key
 * field is a string or an integer: the first such field holds the number. */
static long long
generated_number_of_key(const struct idem_seed *s, const json_t *payload)
{
	size_t i;

	for (i = 0; i < s->nkey; i++) {
		const struct idem_seed_field *f = schema_field(s, s->key[i]);
		json_t *v = json_object_get(payload, f->name);

		if (f->type == IDEM_TYPE_INTEGER)
			return json_integer_value(v) >= 1 && json_integer_value(v) <= s->generate_count ?
			    json_integer_value(v) : 0;
		if (f->type == IDEM_TYPE_STRING)
			return seed_generated_number(s, json_string_value(v), f->name);
	}
	return 0;
}

static int
generated_keys_distinct(const struct idem_seed *s)
{
	size_t i;

	for (i = 0; i < s->nkey; i++)
		if (schema_field(s, s->key[i])->type != IDEM_TYPE_BOOLEAN)
			return 1;
	return 0;
}

/* Duplicate ids, and one business key with two payloads unless the seed
 * declares that is the point; without keeping every generated job. */
static int
check_jobs(struct loader *l)
{
	struct idem_seed *s = l->seed;
	long long nd = (long long)s->ndeclared, *numbers = NULL, n;
	struct key_check keys = { .index = json_object() };
	struct idem_seed_job buf = { 0 };
	struct job_note note;
	struct job_ref *refs;
	size_t i, end, nnumbers = 0;
	int rc = -1;

	/* generated ids are distinct: each declared id against the other
	 * declared ones, then against the generated ones */
	refs = idem_ereallocarray(NULL, s->ndeclared + 1, sizeof(*refs));
	for (i = 0; i < s->ndeclared; i++) {
		refs[i].job = &s->declared[i];
		refs[i].index = i;
	}
	qsort(refs, s->ndeclared, sizeof(*refs), by_id);
	for (i = 0; i < s->ndeclared; i = end) {
		for (end = i + 1; end < s->ndeclared && strcmp(refs[end].job->id, refs[i].job->id) == 0; end++)
			;
		if (end - i > 1)
			note = note_of(refs[i + 1].job, (long long)refs[i + 1].index);
		else if ((n = seed_generated_number(s, refs[i].job->id, "gen")) > 0)
			note = note_of(idem_seed_job(s, nd + n - 1, &buf), nd + n - 1);
		else
			continue;
		fail_job(l, &note, "id: job id \"%s\" is used twice%s", note.id, "");
		goto out;
	}
	/* business keys, in job order: the declared jobs, then the generated
	 * ones that may share a key with one of them, or, when generated keys
	 * may share one among themselves (booleans only), every one */
	for (i = 0; i < s->ndeclared; i++)
		if (check_key(l, &keys, &s->declared[i], (long long)i) < 0)
			goto out;
	if (generated_keys_distinct(s)) {
		numbers = idem_ereallocarray(NULL, s->ndeclared + 1, sizeof(*numbers));
		for (i = 0; i < s->ndeclared; i++)
			if ((n = generated_number_of_key(s, s->declared[i].payload)) > 0)
				numbers[nnumbers++] = n;
		qsort(numbers, nnumbers, sizeof(*numbers), by_number);
		for (i = 0; i < nnumbers; i++)
			if ((i == 0 || numbers[i] != numbers[i - 1]) && check_key(l, &keys,
			    idem_seed_job(s, nd + numbers[i] - 1, &buf), nd + numbers[i] - 1) < 0)
				goto out;
	} else {
		for (n = 1; n <= s->generate_count; n++)
			if (check_key(l, &keys, idem_seed_job(s, nd + n - 1, &buf), nd + n - 1) < 0)
				goto out;
	}
	rc = 0;
out:
	for (i = 0; i < keys.nkeys; i++) {
		free(keys.keys[i].first.id);
		free(keys.keys[i].differing.id);
		free(keys.keys[i].reference.id);
	}
	free(keys.keys);
	json_decref(keys.index);
	idem_seed_job_clear(&buf);
	free(numbers);
	free(refs);
	return rc;
}

/* A field of a business key: a string, integer or boolean field of
 * payload_schema. */
static int
check_key_field(struct loader *l, const yaml_node_t *n, const char *field, const char *name)
{
	const struct idem_seed_field *f = schema_field(l->seed, name);

	if (f == NULL || f->type == IDEM_TYPE_OBJECT || f->type == IDEM_TYPE_ARRAY)
		return fail_at(l, n, field,
		    "\"%s\" must be a string, integer or boolean field of payload_schema", name);
	return 0;
}

/* external: { name, key, honours_idempotency_key,
 * pending: { table, owner, key, state, settled } } */
static int
load_external(struct loader *l, const yaml_node_t *root)
{
	static const char *const external_keys[] = { "name", "key", "honours_idempotency_key",
		"pending", NULL };
	static const char *const pending_keys[] = { "table", "owner", "key", "state", "settled",
		NULL };
	struct idem_seed_external *e = &l->seed->external;
	yaml_node_t *n = lookup(l, root, "external"), *p;
	size_t i;

	if (n == NULL)
		return 0;
	if (check_mapping(l, n, "external", external_keys) < 0 ||
	    get_text(l, n, "external", "name", 1, &e->name) < 0 ||
	    get_text_list(l, n, "external", "key", &e->key, &e->nkey) < 0)
		return -1;
	if (e->nkey == 0)
		return fail_at(l, lookup(l, n, "key") ? lookup(l, n, "key") : n, "external.key",
		    "required: a list of the payload fields that form a call's business key, "
		    "read from the call's JSON body");
	for (i = 0; i < e->nkey; i++)
		if (check_key_field(l, lookup(l, n, "key"), "external.key", e->key[i]) < 0)
			return -1;
	if (lookup(l, n, "honours_idempotency_key") == NULL)
		return fail_at(l, n, "external.honours_idempotency_key", "required: true when the "
		    "vendor answers a repeated Idempotency-Key with its first response, else false");
	if (get_bool(l, n, "external", "honours_idempotency_key", &e->honours_idempotency_key) < 0)
		return -1;
	if ((p = lookup(l, n, "pending")) != NULL &&
	    (check_mapping(l, p, "external.pending", pending_keys) < 0 ||
	     get_text(l, p, "external.pending", "table", 1, &e->pending_table) < 0 ||
	     get_text(l, p, "external.pending", "owner", 1, &e->pending_owner) < 0 ||
	     get_text_list(l, p, "external.pending", "key", &e->pending_key, &e->npending_key) < 0 ||
	     get_text(l, p, "external.pending", "state", 0, &e->pending_state) < 0 ||
	     get_text_list(l, p, "external.pending", "settled", &e->pending_settled,
		 &e->npending_settled) < 0))
		return -1;
	if (p != NULL && lookup(l, p, "key") != NULL && e->npending_key == 0)
		return fail_at(l, lookup(l, p, "key"), "external.pending.key", "a list of the "
		    "columns of %s that hold a call's business key, at least one", e->pending_table);
	if (p != NULL && (e->pending_state == NULL) != (lookup(l, p, "settled") == NULL))
		return fail_at(l, p, e->pending_state ? "external.pending.settled" :
		    "external.pending.state", "state and settled go together: the column of %s "
		    "that says where a call stands, and its values for a call seen done",
		    e->pending_table);
	if (e->pending_state != NULL && e->npending_settled == 0)
		return fail_at(l, lookup(l, p, "settled"), "external.pending.settled", "a list of "
		    "the values of %s that mean a call seen done, at least one", e->pending_state);
	return 0;
}

/* guard: { table: TABLE, key: [COLUMN, ...] }, where the guard lives when
 * it is not on the effect table; or { enforceable: false, why: TEXT }, a
 * guard the database cannot enforce, which is reviewed as best effort. */
static int
load_guard(struct loader *l, const yaml_node_t *root)
{
	static const char *const guard_keys[] = { "table", "key", "enforceable", "why", NULL };
	struct idem_seed *s = l->seed;
	yaml_node_t *n = lookup(l, root, "guard");
	int enforceable = 1;

	if (n == NULL)
		return 0;
	if (check_mapping(l, n, "guard", guard_keys) < 0 || (lookup(l, n, "enforceable") &&
	    get_bool(l, n, "guard", "enforceable", &enforceable) < 0))
		return -1;
	if (!enforceable) {
		if (lookup(l, n, "table") != NULL || lookup(l, n, "key") != NULL)
			return fail_at(l, lookup(l, n, "table") ? lookup(l, n, "table") :
			    lookup(l, n, "key"), "guard", "a guard the database cannot enforce has "
			    "no table or key to probe: say why it cannot with why: ...");
		if (lookup(l, n, "why") == NULL)
			return fail_at(l, n, "guard.why", "required with enforceable: false: why "
			    "the database cannot enforce the guard");
		return get_text(l, n, "guard", "why", 1, &s->guard_best_effort);
	}
	if (lookup(l, n, "why") != NULL)
		return fail_at(l, lookup(l, n, "why"), "guard.why",
		    "only with enforceable: false, for a guard the database cannot enforce");
	if (get_text(l, n, "guard", "table", 1, &s->guard_table) < 0 ||
	    get_text_list(l, n, "guard", "key", &s->guard_key, &s->nguard_key) < 0)
		return -1;
	if (s->nguard_key == 0)
		return fail_at(l, lookup(l, n, "key") ? lookup(l, n, "key") : n, "guard.key",
		    "required: a list of the columns of %s that the guard makes unique",
		    s->guard_table);
	return 0;
}

/* Whether a path climbs out of where it starts: absolute, or with a ..
 * component. */
static int
leaves(const char *p)
{
	const char *c;
	size_t len;

	if (*p == '/')
		return 1;
	for (c = p; *c; c += len + (c[len] == '/')) {
		len = strcspn(c, "/");
		if (len == 2 && c[0] == '.' && c[1] == '.')
			return 1;
	}
	return 0;
}

/* Whether path, from its byte from on, names a symbolic link or goes
 * through one: the adapter it names could then be out of the repository,
 * where git keeps the link and not the file. */
static int
symlinked(const char *path, size_t from)
{
	char *p = idem_estrdup(path), *c = p + from;
	struct stat st;
	int found = 0;

	for (;;) {
		char *slash = strchr(c, '/');

		if (slash)
			*slash = '\0';
		if (lstat(p, &st) == 0 && S_ISLNK(st.st_mode))
			found = 1;
		if (slash == NULL || found)
			break;
		*slash = '/';
		c = slash + 1;
	}
	free(p);
	return found;
}

/* queue.adapter: the adapter file, from the seed's directory, read and
 * checked as every program that opens it will (idem-sandbox(1), QUEUE
 * ADAPTERS), its kind the seed's. */
static int
load_adapter(struct loader *l, const yaml_node_t *n, const char *kind)
{
	struct idem_seed *s = l->seed;
	const char *slash = strrchr(l->path, '/');
	struct idem_queue q;
	struct idem_error adapter_err;
	size_t dir = slash && strcmp(l->path, "-") != 0 ? (size_t)(slash - l->path) + 1 : 0;
	int rc;

	if (get_text(l, n, "queue", "adapter", 0, &s->queue_adapter) < 0)
		return -1;
	if (s->queue_adapter == NULL)
		return 0;
	if (leaves(s->queue_adapter))
		return fail_at(l, lookup(l, n, "adapter"), "queue.adapter", "%s: a path from the "
		    "seed's directory, not absolute and without ..", s->queue_adapter);
	s->queue_adapter_path = idem_emalloc(dir + strlen(s->queue_adapter) + 1);
	memcpy(s->queue_adapter_path, l->path, dir);
	strcpy(s->queue_adapter_path + dir, s->queue_adapter);
	if (symlinked(s->queue_adapter_path, dir))
		return fail_at(l, lookup(l, n, "adapter"), "queue.adapter", "%s: a symbolic link "
		    "on the way; the adapter is a file beside the seed, as git keeps it",
		    s->queue_adapter);
	if ((rc = idem_queue_open_file(&q, s->queue_adapter_path, kind, s->queue, &adapter_err)) == 0) {
		memcpy(s->queue_adapter_sha256, q.sha256, sizeof(s->queue_adapter_sha256));
		s->own_queue_kind = idem_estrdup(q.kind);
		s->queue_kind = s->own_queue_kind;
	} else
		fail_at(l, lookup(l, n, "adapter"), "queue.adapter", "%s", adapter_err.text);
	idem_queue_close(&q);
	return rc;
}

/* queue: a name, idem's own queue, or { kind: KIND, name: NAME }, with
 * adapter: PATH for a kind of the team's own. */
static int
load_queue(struct loader *l, const yaml_node_t *root)
{
	static const char *const queue_keys[] = { "kind", "name", "adapter", NULL };
	struct idem_seed *s = l->seed;
	yaml_node_t *n = lookup(l, root, "queue");
	char *kind = NULL;
	size_t i;
	int rc = -1;

	s->queue_kind = queue_kinds[0];
	if (n == NULL)
		return fail_at(l, root, "queue", "required key missing");
	if (n->type == YAML_SCALAR_NODE && resolve_plain(n) != PLAIN_NULL)
		return get_text(l, root, "", "queue", 1, &s->queue);
	if (n->type != YAML_MAPPING_NODE)
		return fail_at(l, n, "queue", "expected a queue name or a mapping "
		    "{ kind: KIND, name: NAME }, got a %s", node_kind_name(n));
	if (check_mapping(l, n, "queue", queue_keys) < 0 ||
	    get_text(l, n, "queue", "kind", 1, &kind) < 0 ||
	    get_text(l, n, "queue", "name", 1, &s->queue) < 0)
		goto out;
	if (lookup(l, n, "adapter") != NULL) {
		rc = load_adapter(l, n, kind);
		goto out;
	}
	for (i = 0; queue_kinds[i] && strcmp(queue_kinds[i], kind) != 0; i++)
		;
	if (queue_kinds[i] == NULL) {
		fail_at(l, lookup(l, n, "kind"), "queue.kind",
		    "expected idem, pg-boss or graphile-worker, got \"%s\"; a kind of your own "
		    "names its adapter: PATH", kind);
		goto out;
	}
	s->queue_kind = queue_kinds[i];
	rc = 0;
out:
	free(kind);
	return rc;
}

static int
check_database(struct loader *l, const yaml_node_t *root)
{
	PQconninfoOption *opts, *o;
	char *msg = NULL;
	int rc = 0;

	if (l->seed->database == NULL)
		return 0;
	opts = PQconninfoParse(l->seed->database, &msg);
	if (opts == NULL) {
		if (msg != NULL && *msg && msg[strlen(msg) - 1] == '\n')
			msg[strlen(msg) - 1] = '\0';
		rc = fail_at(l, lookup(l, root, "database"), "database",
		    "not a libpq connection string: %s", msg ? msg : "out of memory");
		PQfreemem(msg);
		return rc;
	}
	for (o = opts; o->keyword; o++)
		if (strcmp(o->keyword, "password") == 0 && o->val != NULL)
			rc = fail_at(l, lookup(l, root, "database"), "database",
			    "holds a password; seed files are committed: use a service file "
			    "or ~/.pgpass instead");
	PQconninfoFree(opts);
	return rc;
}

static int
load_rehearsal(struct loader *l, const yaml_node_t *root)
{
	struct idem_seed *s = l->seed;

	if (get_text(l, root, "", "rehearsal", 1, &s->rehearsal) < 0)
		return -1;
	if (!idem_file_name_valid(s->rehearsal, strlen(s->rehearsal)))
		return fail_at(l, lookup(l, root, "rehearsal"), "rehearsal", "must be letters, "
		    "digits, '.', '_' and '-', beginning with a letter or a digit, at most %d bytes: "
		    "it names the record's file", IDEM_FILE_NAME_MAX);
	if (get_text(l, root, "", "job_type", 1, &s->job_type) < 0 ||
	    load_queue(l, root) < 0 ||
	    get_text(l, root, "", "database", 0, &s->database) < 0 ||
	    get_text(l, root, "", "sandbox_account", 0, &s->sandbox_account) < 0 ||
	    get_text(l, root, "", "reconciliation_owner", 0, &s->reconciliation_owner) < 0 ||
	    get_text_list(l, root, "", "cannot_reproduce", &s->cannot_reproduce,
		&s->ncannot_reproduce) < 0 ||
	    check_database(l, root) < 0)
		return -1;
	return 0;
}

/* The worker's sources: paths from the top of the repository, which a
 * pull-request check watches, so none leaves it. */
static int
load_worker_sources(struct loader *l, const yaml_node_t *worker)
{
	struct idem_seed *s = l->seed;
	size_t i;

	if (get_text_list(l, worker, "worker", "sources", &s->worker_sources,
	    &s->nworker_sources) < 0)
		return -1;
	for (i = 0; i < s->nworker_sources; i++) {
		const char *p = s->worker_sources[i];

		if (*p == '/' || strcmp(p, "..") == 0 || strncmp(p, "../", 3) == 0 ||
		    strstr(p, "/../") != NULL || (strlen(p) >= 3 && strcmp(p + strlen(p) - 3, "/..") == 0))
			return fail_at(l, lookup(l, worker, "sources"), "worker.sources",
			    "%s: a path from the top of the repository, without ..", p);
	}
	return 0;
}

static int
load_worker_and_retry(struct loader *l, const yaml_node_t *root)
{
	static const char *const worker_keys[] = { "image", "version", "command", "sources", NULL };
	static const char *const retry_keys[] = { "visibility_timeout", "max_attempts", NULL };
	struct idem_seed *s = l->seed;
	yaml_node_t *n;

	if ((n = lookup(l, root, "worker")) != NULL &&
	    (check_mapping(l, n, "worker", worker_keys) < 0 ||
	     get_text(l, n, "worker", "image", 0, &s->worker_image) < 0 ||
	     get_text(l, n, "worker", "version", 0, &s->worker_version) < 0 ||
	     get_text(l, n, "worker", "command", 0, &s->worker_command) < 0 ||
	     load_worker_sources(l, n) < 0))
		return -1;
	s->visibility_timeout_ms = 30000;
	s->max_attempts = 5;
	if ((n = lookup(l, root, "retry")) != NULL &&
	    (check_mapping(l, n, "retry", retry_keys) < 0 ||
	     get_duration(l, n, "retry", "visibility_timeout", 30000, &s->visibility_timeout_ms) < 0 ||
	     (s->visibility_timeout_ms < 1 && fail_at(l, lookup(l, n, "visibility_timeout"),
		"retry.visibility_timeout", "must be at least 1ms") < 0) ||
	     get_int(l, n, "retry", "max_attempts", 1, 5, &s->max_attempts, NULL) < 0))
		return -1;
	return 0;
}

/* The effect, and the payload schema its key's fields are checked in. */
static int
load_effect(struct loader *l, const yaml_node_t *root)
{
	static const char *const effect_keys[] = { "name", "table", "key", "key_scope",
		"duplicate_acceptor", NULL };
	struct idem_seed *s = l->seed;
	yaml_node_t *n;
	size_t i;

	if ((n = lookup(l, root, "effect")) == NULL)
		return fail_at(l, root, "effect", "required key missing");
	if (check_mapping(l, n, "effect", effect_keys) < 0 ||
	    get_text(l, n, "effect", "name", 0, &s->effect_name) < 0 ||
	    get_text(l, n, "effect", "table", 1, &s->effect_table) < 0 ||
	    get_text(l, n, "effect", "key_scope", 0, &s->key_scope) < 0 ||
	    get_text(l, n, "effect", "duplicate_acceptor", 0, &s->duplicate_acceptor) < 0 ||
	    get_text_list(l, n, "effect", "key", &s->key, &s->nkey) < 0)
		return -1;
	if (s->nkey == 0)
		return fail_at(l, lookup(l, n, "key") ? lookup(l, n, "key") : n, "effect.key",
		    "required: a list of the payload fields that form the business key");
	if (s->key_scope == NULL)
		s->key_scope = idem_estrdup("business");
	if (strcmp(s->key_scope, "business") != 0 && strcmp(s->key_scope, "job") != 0)
		return fail_at(l, lookup(l, n, "key_scope"), "effect.key_scope",
		    "expected business or job, got \"%s\"", s->key_scope);
	if (load_schema(l, root) < 0)
		return -1;
	for (i = 0; i < s->nkey; i++) {
		if (check_key_field(l, lookup(l, n, "key"), "effect.key", s->key[i]) < 0)
			return -1;
		schema_field(s, s->key[i])->in_key = 1;
	}
	return 0;
}

static int
load_expect(struct loader *l, const yaml_node_t *root)
{
	static const char *const expect_keys[] = { "effects", "duplicates", "missing",
		"pending", "external", "verdict", NULL };
	struct idem_seed *s = l->seed;
	yaml_node_t *n;
	int has_external;

	if ((n = lookup(l, root, "expect")) == NULL)
		return fail_at(l, root, "expect", "required: write the expected counts before the "
		    "run (expect: { effects: N, duplicates: 0, missing: 0, pending: 0 })");
	if (check_mapping(l, n, "expect", expect_keys) < 0)
		return -1;
	if (lookup(l, n, "effects") == NULL)
		return fail_at(l, n, "expect.effects", "required key missing");
	if (get_int(l, n, "expect", "effects", 0, 0, &s->expect_effects, NULL) < 0 ||
	    get_int(l, n, "expect", "duplicates", 0, 0, &s->expect_duplicates, NULL) < 0 ||
	    get_int(l, n, "expect", "missing", 0, 0, &s->expect_missing, NULL) < 0 ||
	    get_int(l, n, "expect", "pending", 0, 0, &s->expect_pending, NULL) < 0 ||
	    get_int(l, n, "expect", "external", 0, -1, &s->expect_external, &has_external) < 0 ||
	    get_text(l, n, "expect", "verdict", 0, &s->expect_verdict) < 0)
		return -1;
	if (s->expect_verdict != NULL && strcmp(s->expect_verdict, "pass") != 0 &&
	    strcmp(s->expect_verdict, "fail") != 0)
		return fail_at(l, lookup(l, n, "verdict"), "expect.verdict",
		    "expected pass or fail, got \"%s\"", s->expect_verdict);
	if (s->external.name != NULL && !has_external)
		return fail_at(l, n, "expect.external", "required when external is declared: the "
		    "number of calls to %s expected to take effect", s->external.name);
	if (s->external.name == NULL && has_external)
		return fail_at(l, lookup(l, n, "external"), "expect.external",
		    "no external effect is declared: declare it with external: { name: ..., "
		    "key: [...], honours_idempotency_key: ... }, or leave this out");
	return 0;
}

static int
load_generate(struct loader *l, const yaml_node_t *root)
{
	static const char *const generate_keys[] = { "count", NULL };
	struct idem_seed *s = l->seed;
	yaml_node_t *n;
	long long count;

	if ((n = lookup(l, root, "generate")) != NULL &&
	    (check_mapping(l, n, "generate", generate_keys) < 0 ||
	     get_int(l, n, "generate", "count", 0, 0, &s->generate_count, NULL) < 0))
		return -1;
	if (s->generate_count > 100000000)
		return fail_at(l, lookup(l, n, "count"), "generate.count", "at most 100000000");
	for (count = s->generate_count; count >= 1000000; count /= 10)
		s->index->width++;
	return 0;
}

static int
load_root(struct loader *l, const yaml_node_t *root)
{
	static const char *const top[] = { "rehearsal", "job_type", "queue", "database",
		"worker", "retry", "sandbox_account", "effect", "reconciliation_owner",
		"payload_schema", "jobs", "generate", "scenarios", "expect",
		"cannot_reproduce", "external", "guard", "own_steps", NULL };

	if (root->type != YAML_MAPPING_NODE)
		return fail_at(l, root, "(top level)", "expected a mapping of keys, got a %s",
		    node_kind_name(root));
	if (check_mapping(l, root, "", top) < 0 ||
	    load_rehearsal(l, root) < 0 ||
	    load_worker_and_retry(l, root) < 0 ||
	    load_effect(l, root) < 0 ||
	    load_external(l, root) < 0 ||
	    load_guard(l, root) < 0 ||
	    load_expect(l, root) < 0 ||
	    load_generate(l, root) < 0 ||
	    load_own_steps(l, root) < 0 ||
	    load_jobs(l, root) < 0)
		return -1;
	if (l->seed->ndeclared == 0 && l->seed->generate_count == 0)
		return fail_at(l, root, "jobs", "no jobs: list some under jobs: or set generate: "
		    "{ count: N }");
	return load_scenarios(l, root) < 0 || check_jobs(l) < 0 ? -1 : 0;
}

int
idem_seed_load(struct idem_seed *seed, const char *path, struct idem_error *err)
{
	struct loader l = { .path = path, .err = err, .seed = seed };
	yaml_node_t *root;
	char *text;
	size_t len;
	int rc = -1;

	memset(seed, 0, sizeof(*seed));
	seed->path = idem_estrdup(path);
	seed->index = idem_emalloc(sizeof(*seed->index));
	seed->index->declared = json_object();
	seed->index->named = json_object();
	seed->index->fields = json_object();
	seed->index->width = 6;
	if ((text = idem_read_file_max(path, idem_seed_limits.bytes, &len, err)) == NULL)
		return -1;
	idem_sha256_hex(text, len, seed->sha256);
	if (idem_yaml_load(&l.doc, text, len, path, &idem_seed_limits, IDEM_EXIT_USAGE, err) == 0) {
		if ((root = yaml_document_get_root_node(&l.doc)) == NULL)
			idem_error_set(err, IDEM_EXIT_USAGE, "%s: empty seed file", path);
		else
			rc = load_root(&l, root);
		yaml_document_delete(&l.doc);
	}
	free(text);
	return rc;
}

void
idem_seed_free(struct idem_seed *s)
{
	char *const texts[] = { s->path, s->rehearsal, s->job_type, s->queue, s->database,
		s->sandbox_account, s->worker_image, s->worker_version, s->worker_command,
		s->effect_name, s->effect_table, s->key_scope, s->expect_verdict,
		s->duplicate_acceptor, s->reconciliation_owner, s->external.name,
		s->external.pending_table, s->external.pending_owner, s->external.pending_state,
		s->guard_table, s->guard_best_effort, s->queue_adapter, s->queue_adapter_path,
		s->own_queue_kind };
	size_t i;

	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		free(texts[i]);
	idem_free_list(s->key, s->nkey);
	idem_free_list(s->worker_sources, s->nworker_sources);
	idem_free_list(s->cannot_reproduce, s->ncannot_reproduce);
	idem_free_list(s->own_steps, s->nown_steps);
	idem_free_list(s->external.key, s->external.nkey);
	idem_free_list(s->external.pending_key, s->external.npending_key);
	idem_free_list(s->external.pending_settled, s->external.npending_settled);
	idem_free_list(s->guard_key, s->nguard_key);
	for (i = 0; i < s->nschema; i++)
		free(s->schema[i].name);
	free(s->schema);
	for (i = 0; i < s->ndeclared; i++)
		idem_seed_job_clear(&s->declared[i]);
	free(s->declared);
	if (s->index != NULL) {
		json_decref(s->index->declared);
		json_decref(s->index->named);
		json_decref(s->index->fields);
		free(s->index);
	}
	for (i = 0; i < s->nscenarios; i++) {
		free(s->scenarios[i].name);
		free(s->scenarios[i].step);
		free(s->scenarios[i].until);
	}
	free(s->scenarios);
	memset(s, 0, sizeof(*s));
}

int
idem_seed_ready(const struct idem_seed *s, char *missing, size_t size)
{
	const char *lacks[4];
	size_t i, n = 0, o = 0;
	int fault = 0;

	for (i = 0; i < s->nscenarios; i++)
		fault |= s->scenarios[i].duplicates > 0 || s->scenarios[i].step != NULL ||
		    strncmp(s->scenarios[i].fault, "vendor-", 7) == 0;
	if (s->effect_name == NULL)
		lacks[n++] = "no effect.name";
	if (s->reconciliation_owner == NULL)
		lacks[n++] = "no reconciliation_owner";
	if (s->duplicate_acceptor == NULL)
		lacks[n++] = "no effect.duplicate_acceptor";
	if (!fault)
		lacks[n++] = "no fault (a scenario with duplicates, kill, race, stall or vendor)";
	if (size > 0)
		*missing = '\0';
	for (i = 0; i < n && o < size; i++)
		o += (size_t)snprintf(missing + o, size - o, "%s%s", i ? ", " : "", lacks[i]);
	return n == 0;
}
