#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "yamljson.h"

struct out {
	char *buf;
	size_t len, cap;
};

static int
write_handler(void *data, unsigned char *buffer, size_t size)
{
	struct out *o = data;

	if (o->len + size + 1 > o->cap) {
		o->cap = (o->len + size + 1) * 2;
		o->buf = idem_erealloc(o->buf, o->cap);
	}
	memcpy(o->buf + o->len, buffer, size);
	o->len += size;
	o->buf[o->len] = '\0';
	return 1;
}

static int
scalar(yaml_emitter_t *e, const char *text, int quoted)
{
	yaml_event_t ev;

	yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text, (int)strlen(text),
	    !quoted, quoted, quoted ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_PLAIN_SCALAR_STYLE);
	return yaml_emitter_emit(e, &ev);
}

static int
emit(yaml_emitter_t *e, const json_t *v)
{
	yaml_event_t ev;
	const char *key;
	json_t *item;
	size_t i;
	char num[32];

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
		    json_object_size(v) ? YAML_BLOCK_MAPPING_STYLE : YAML_FLOW_MAPPING_STYLE);
		if (!yaml_emitter_emit(e, &ev))
			return 0;
		json_object_foreach((json_t *)v, key, item)
			if (!scalar(e, key, 0) || !emit(e, item))
				return 0;
		yaml_mapping_end_event_initialize(&ev);
		return yaml_emitter_emit(e, &ev);
	case JSON_ARRAY:
		yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
		    json_array_size(v) ? YAML_BLOCK_SEQUENCE_STYLE : YAML_FLOW_SEQUENCE_STYLE);
		if (!yaml_emitter_emit(e, &ev))
			return 0;
		json_array_foreach(v, i, item)
			if (!emit(e, item))
				return 0;
		yaml_sequence_end_event_initialize(&ev);
		return yaml_emitter_emit(e, &ev);
	case JSON_STRING:
		return scalar(e, json_string_value(v), 1);
	case JSON_INTEGER:
		snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
		return scalar(e, num, 0);
	case JSON_REAL:
		snprintf(num, sizeof(num), "%.17g", json_real_value(v));
		return scalar(e, num, 0);
	case JSON_TRUE:
		return scalar(e, "true", 0);
	case JSON_FALSE:
		return scalar(e, "false", 0);
	default:
		return scalar(e, "null", 0);
	}
}

char *
idem_yaml_from_json(const json_t *value, struct idem_error *err)
{
	yaml_emitter_t e;
	yaml_event_t ev;
	struct out o = { 0 };
	int ok;

	if (!yaml_emitter_initialize(&e))
		idem_die(IDEM_EXIT_ENV, "yaml_emitter_initialize failed");
	yaml_emitter_set_output(&e, write_handler, &o);
	yaml_emitter_set_unicode(&e, 1);
	yaml_emitter_set_width(&e, -1);
	yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
	ok = yaml_emitter_emit(&e, &ev);
	yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
	ok = ok && yaml_emitter_emit(&e, &ev);
	ok = ok && emit(&e, value);
	yaml_document_end_event_initialize(&ev, 1);
	ok = ok && yaml_emitter_emit(&e, &ev);
	yaml_stream_end_event_initialize(&ev);
	ok = ok && yaml_emitter_emit(&e, &ev);
	if (!ok) {
		idem_error_set(err, IDEM_EXIT_ENV, "writing YAML: %s",
		    e.problem ? e.problem : "emitter error");
		free(o.buf);
		o.buf = NULL;
	}
	yaml_emitter_delete(&e);
	return o.buf;
}

#define MAX_DEPTH 64

static json_t *
node_to_json(yaml_document_t *doc, yaml_node_t *n, int depth, long *budget)
{
	json_t *out, *v;

	/* aliases can make a cycle, or aliases of aliases a billion nodes */
	if (depth > MAX_DEPTH || --*budget < 0)
		return NULL;

	switch (n->type) {
	case YAML_MAPPING_NODE: {
		yaml_node_pair_t *p;

		out = json_object();
		for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(doc, p->key);

			if (k->type != YAML_SCALAR_NODE || (v = node_to_json(doc,
			    yaml_document_get_node(doc, p->value), depth + 1, budget)) == NULL) {
				json_decref(out);
				return NULL;
			}
			json_object_set_new(out, (const char *)k->data.scalar.value, v);
		}
		return out;
	}
	case YAML_SEQUENCE_NODE: {
		yaml_node_item_t *it;

		out = json_array();
		for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
			if ((v = node_to_json(doc, yaml_document_get_node(doc, *it), depth + 1, budget)) == NULL) {
				json_decref(out);
				return NULL;
			}
			json_array_append_new(out, v);
		}
		return out;
	}
	case YAML_SCALAR_NODE: {
		const char *s = (const char *)n->data.scalar.value, *p;
		char *end;
		long long i;

		if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
			return json_stringn(s, n->data.scalar.length);
		if (*s == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0)
			return json_null();
		if (strcmp(s, "true") == 0)
			return json_true();
		if (strcmp(s, "false") == 0)
			return json_false();
		p = s + (*s == '-');
		if (*p >= '0' && *p <= '9' && p[strspn(p, "0123456789")] == '\0') {
			errno = 0;
			i = strtoll(s, &end, 10);
			if (errno == 0)
				return json_integer(i);
		}
		return json_string(s);
	}
	default:
		return json_null();
	}
}

json_t *
idem_yaml_to_json(const char *text, size_t len, const char *name, struct idem_error *err)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	yaml_node_t *root;
	json_t *out = NULL;
	long budget = 10000000;

	if (!yaml_parser_initialize(&parser))
		idem_die(IDEM_EXIT_ENV, "yaml_parser_initialize failed");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &doc)) {
		idem_error_set(err, IDEM_EXIT_FINDING, "%s:%lu:%lu: YAML: %s", name,
		    (unsigned long)parser.problem_mark.line + 1,
		    (unsigned long)parser.problem_mark.column + 1,
		    parser.problem ? parser.problem : "syntax error");
		yaml_parser_delete(&parser);
		return NULL;
	}
	if ((root = yaml_document_get_root_node(&doc)) == NULL)
		idem_error_set(err, IDEM_EXIT_FINDING, "%s: empty", name);
	else if ((out = node_to_json(&doc, root, 0, &budget)) == NULL)
		idem_error_set(err, IDEM_EXIT_FINDING, "%s: keys must be scalars, nesting at "
		    "most %d deep and nodes at most ten million (aliases may make more)", name, MAX_DEPTH);
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	return out;
}
