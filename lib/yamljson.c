#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "yamljson.h"
#include "text.h"

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
		idem_format_real(json_real_value(v), num);
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

const struct idem_yaml_limits idem_record_limits = {
	.bytes = 32 << 20, .nodes = 2000000, .depth = 64, .expanded = 0, .kind = "a record",
};

/* An open mapping or list. */
struct frame {
	int node;		/* its node in the document */
	int key;		/* a mapping's key that waits for its value, or 0 */
	char *anchor;		/* its anchor, or NULL */
	long expanded_before;	/* the loader's expanded count before it began */
};

/* What an anchor names: its node, and the nodes it stands for (-1 while
 * it is open). */
struct anchor {
	int node;
	long expanded;
};

struct loader {
	yaml_parser_t parser;
	yaml_document_t *doc;
	const char *text, *name;
	size_t len;
	const struct idem_yaml_limits *limits;
	int status, have_doc, documents, depth;
	struct idem_error *err;
	struct frame *frames;
	json_t *anchor_index;	/* anchor -> index into anchors */
	struct anchor *anchors;
	size_t nanchors;
	long nodes, expanded;
};

static int
fail_at(struct loader *l, const yaml_mark_t *mark, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int
fail_at(struct loader *l, const yaml_mark_t *mark, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return idem_error_set(l->err, l->status, "%s:%lu:%lu: %s", l->name,
	    (unsigned long)mark->line + 1, (unsigned long)mark->column + 1, msg);
}

/* Where a byte offset is, as libyaml counts lines and columns: columns in
 * characters, lines ended by LF, CR LF, CR, U+0085, U+2028 and U+2029. */
static yaml_mark_t
offset_mark(const char *text, size_t len, size_t offset)
{
	const unsigned char *s = (const unsigned char *)text;
	yaml_mark_t m = { 0, 0, 0 };
	size_t i = 0;

	if (offset > len)
		offset = len;
	if (offset >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0)
		i = 3;
	while (i < offset) {
		if (s[i] == '\n' || (s[i] == '\r' && (i + 1 == len || s[i + 1] != '\n'))) {
			m.line++;
			m.column = 0;
			i++;
		} else if (i + 1 < offset && s[i] == 0xC2 && s[i + 1] == 0x85) {
			m.line++;
			m.column = 0;
			i += 2;
		} else if (i + 2 < offset && s[i] == 0xE2 && s[i + 1] == 0x80 &&
		    (s[i + 2] == 0xA8 || s[i + 2] == 0xA9)) {
			m.line++;
			m.column = 0;
			i += 3;
		} else {
			m.column += (s[i] & 0xC0) != 0x80;
			i++;
		}
	}
	m.index = offset;
	return m;
}

static int
out_of_memory(struct loader *l)
{
	return idem_error_set(l->err, IDEM_EXIT_ENV, "%s: YAML: out of memory", l->name);
}

static int
parse_error(struct loader *l)
{
	yaml_parser_t *p = &l->parser;
	yaml_mark_t mark = p->problem_mark;
	char value[32] = "";

	if (p->error == YAML_MEMORY_ERROR)
		return out_of_memory(l);
	/* the reader decodes ahead of the scanner and gives no mark, only the
	 * offset of the byte at fault */
	if (p->error == YAML_READER_ERROR) {
		mark = offset_mark(l->text, l->len, p->problem_offset);
		if (p->problem_value >= 0)
			snprintf(value, sizeof(value), p->problem &&
			    strncmp(p->problem, "invalid", 7) != 0 ? " (U+%04X)" : " (byte 0x%02X)",
			    (unsigned)p->problem_value);
	}
	return fail_at(l, &mark, "YAML: %s%s%s%s", p->problem ? p->problem : "syntax error", value,
	    p->context ? " " : "", p->context ? p->context : "");
}

/* Counts a node before it is added. */
static int
count_node(struct loader *l, const yaml_mark_t *mark)
{
	if (++l->nodes > l->limits->nodes)
		return fail_at(l, mark, "more than %ld nodes (scalars, mappings and lists)",
		    l->limits->nodes);
	if (l->limits->expanded > 0 && ++l->expanded > l->limits->expanded)
		return fail_at(l, mark, "aliases expand to more than %ld nodes", l->limits->expanded);
	return 0;
}

static int
add_anchor(struct loader *l, const yaml_char_t *name, int node, long expanded,
	   const yaml_mark_t *mark)
{
	if (name == NULL)
		return 0;
	if (json_object_get(l->anchor_index, (const char *)name) != NULL)
		return fail_at(l, mark, "YAML: anchor &%s given twice", name);
	l->anchors = idem_ereallocarray(l->anchors, l->nanchors + 1, sizeof(*l->anchors));
	l->anchors[l->nanchors].node = node;
	l->anchors[l->nanchors].expanded = expanded;
	json_object_set_new_nocheck(l->anchor_index, (const char *)name,
	    json_integer((json_int_t)l->nanchors));
	l->nanchors++;
	return 0;
}

/* Makes node a child of the innermost open mapping or list; the first node
 * of the document is its root. */
static int
attach(struct loader *l, int node)
{
	struct frame *f;
	int ok = 1;

	if (node == 0)
		return out_of_memory(l);
	if (l->depth == 0)
		return 0;
	f = &l->frames[l->depth - 1];
	if (yaml_document_get_node(l->doc, f->node)->type == YAML_SEQUENCE_NODE) {
		ok = yaml_document_append_sequence_item(l->doc, f->node, node);
	} else if (f->key == 0) {
		f->key = node;
	} else {
		ok = yaml_document_append_mapping_pair(l->doc, f->node, f->key, node);
		f->key = 0;
	}
	return ok ? 0 : out_of_memory(l);
}

static yaml_node_t *
last_node(struct loader *l)
{
	return l->doc->nodes.top - 1;
}

static const yaml_char_t *
tag_of(const yaml_char_t *tag)
{
	return tag && strcmp((const char *)tag, "!") != 0 ? tag : NULL;
}

/* One event: checked against the limits, then added to the document. */
static int
load_event(struct loader *l, yaml_event_t *ev)
{
	const yaml_mark_t *mark = &ev->start_mark;
	json_t *found;
	struct anchor *a;
	struct frame *f;
	int node;

	switch (ev->type) {
	case YAML_DOCUMENT_START_EVENT:
		if (++l->documents > 1)
			return idem_error_set(l->err, l->status, "%s: more than one YAML document",
			    l->name);
		if (!yaml_document_initialize(l->doc, NULL, NULL, NULL, 1, 1))
			return out_of_memory(l);
		l->have_doc = 1;
		return 0;
	case YAML_ALIAS_EVENT:
		if (l->limits->expanded == 0)
			return fail_at(l, mark, "alias *%s: aliases are not allowed in %s",
			    ev->data.alias.anchor, l->limits->kind);
		if ((found = json_object_get(l->anchor_index, (const char *)ev->data.alias.anchor)) == NULL)
			return fail_at(l, mark, "YAML: alias *%s names no anchor before it",
			    ev->data.alias.anchor);
		a = &l->anchors[json_integer_value(found)];
		if (a->expanded < 0)
			return fail_at(l, mark, "alias *%s is inside the node it names",
			    ev->data.alias.anchor);
		if (a->expanded > l->limits->expanded - l->expanded)
			return fail_at(l, mark, "aliases expand to more than %ld nodes",
			    l->limits->expanded);
		l->expanded += a->expanded;
		return attach(l, a->node);
	case YAML_SCALAR_EVENT:
		if (count_node(l, mark) < 0)
			return -1;
		if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length) != NULL)
			return fail_at(l, mark, "a text holds a NUL character (\\0)");
		if (ev->data.scalar.length > INT_MAX)
			return fail_at(l, mark, "a text of more than %d bytes", INT_MAX);
		node = yaml_document_add_scalar(l->doc, tag_of(ev->data.scalar.tag),
		    ev->data.scalar.value, (int)ev->data.scalar.length, ev->data.scalar.style);
		if (node) {
			last_node(l)->start_mark = ev->start_mark;
			last_node(l)->end_mark = ev->end_mark;
		}
		if (attach(l, node) < 0)
			return -1;
		return add_anchor(l, ev->data.scalar.anchor, node, 1, mark);
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT:
		if (count_node(l, mark) < 0)
			return -1;
		if (l->depth == l->limits->depth)
			return fail_at(l, mark, "mappings and lists nested more than %d deep",
			    l->limits->depth);
		if (ev->type == YAML_SEQUENCE_START_EVENT)
			node = yaml_document_add_sequence(l->doc, tag_of(ev->data.sequence_start.tag),
			    ev->data.sequence_start.style);
		else
			node = yaml_document_add_mapping(l->doc, tag_of(ev->data.mapping_start.tag),
			    ev->data.mapping_start.style);
		if (node)
			last_node(l)->start_mark = ev->start_mark;
		if (attach(l, node) < 0)
			return -1;
		f = &l->frames[l->depth++];
		f->node = node;
		f->key = 0;
		f->anchor = NULL;
		f->expanded_before = l->expanded - 1;
		if (ev->type == YAML_SEQUENCE_START_EVENT && ev->data.sequence_start.anchor)
			f->anchor = idem_estrdup((const char *)ev->data.sequence_start.anchor);
		else if (ev->type == YAML_MAPPING_START_EVENT && ev->data.mapping_start.anchor)
			f->anchor = idem_estrdup((const char *)ev->data.mapping_start.anchor);
		/* open until its end: an alias to it inside it would be a cycle */
		return add_anchor(l, (const yaml_char_t *)f->anchor, node, -1, mark);
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		f = &l->frames[--l->depth];
		yaml_document_get_node(l->doc, f->node)->end_mark = ev->end_mark;
		if (f->anchor != NULL) {
			found = json_object_get(l->anchor_index, f->anchor);
			l->anchors[json_integer_value(found)].expanded = l->expanded - f->expanded_before;
			free(f->anchor);
			f->anchor = NULL;
		}
		return 0;
	default:
		return 0;
	}
}

int
idem_yaml_load(yaml_document_t *doc, const char *text, size_t len, const char *name,
	       const struct idem_yaml_limits *limits, int status, struct idem_error *err)
{
	struct loader l = { .doc = doc, .text = text, .name = name, .len = len,
		.limits = limits, .status = status, .err = err };
	yaml_event_t ev;
	int rc = -1, done = 0;

	if (len > limits->bytes)
		return idem_error_set(err, status, "%s: larger than %zu bytes", name, limits->bytes);
	if (!yaml_parser_initialize(&l.parser))
		idem_die(IDEM_EXIT_ENV, "yaml_parser_initialize failed");
	yaml_parser_set_input_string(&l.parser, (const unsigned char *)text, len);
	l.frames = idem_ereallocarray(NULL, (size_t)limits->depth + 1, sizeof(*l.frames));
	l.anchor_index = json_object();
	while (!done) {
		if (!yaml_parser_parse(&l.parser, &ev)) {
			parse_error(&l);
			goto out;
		}
		done = ev.type == YAML_STREAM_END_EVENT;
		if (load_event(&l, &ev) < 0) {
			yaml_event_delete(&ev);
			goto out;
		}
		yaml_event_delete(&ev);
	}
	if (!l.have_doc && !yaml_document_initialize(doc, NULL, NULL, NULL, 1, 1))
		idem_die(IDEM_EXIT_ENV, "yaml_document_initialize failed");
	l.have_doc = 1;
	rc = 0;
out:
	while (l.depth > 0)
		free(l.frames[--l.depth].anchor);
	if (rc < 0 && l.have_doc)
		yaml_document_delete(doc);
	free(l.frames);
	free(l.anchors);
	json_decref(l.anchor_index);
	yaml_parser_delete(&l.parser);
	return rc;
}

/* A record's node as JSON: aliases are refused and depth bounded when it is
 * loaded, so this recursion is too. */
static json_t *
node_to_json(yaml_document_t *doc, const yaml_node_t *n, const char *name, struct idem_error *err)
{
	json_t *out, *v;

	switch (n->type) {
	case YAML_MAPPING_NODE: {
		yaml_node_pair_t *p;

		out = json_object();
		for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(doc, p->key);
			const char *key;

			if (k->type != YAML_SCALAR_NODE) {
				idem_error_set(err, IDEM_EXIT_FINDING, "%s:%lu:%lu: keys must be scalars",
				    name, (unsigned long)k->start_mark.line + 1,
				    (unsigned long)k->start_mark.column + 1);
				goto fail;
			}
			key = (const char *)k->data.scalar.value;
			if (json_object_get(out, key) != NULL) {
				idem_error_set(err, IDEM_EXIT_FINDING, "%s:%lu:%lu: key %s given twice",
				    name, (unsigned long)k->start_mark.line + 1,
				    (unsigned long)k->start_mark.column + 1, key);
				goto fail;
			}
			if ((v = node_to_json(doc, yaml_document_get_node(doc, p->value), name, err)) == NULL)
				goto fail;
			json_object_set_new(out, key, v);
		}
		return out;
	}
	case YAML_SEQUENCE_NODE: {
		yaml_node_item_t *it;

		out = json_array();
		for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
			if ((v = node_to_json(doc, yaml_document_get_node(doc, *it), name, err)) == NULL)
				goto fail;
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
fail:
	json_decref(out);
	return NULL;
}

json_t *
idem_yaml_to_json(const char *text, size_t len, const char *name, struct idem_error *err)
{
	yaml_document_t doc;
	yaml_node_t *root;
	json_t *out = NULL;

	if (idem_yaml_load(&doc, text, len, name, &idem_record_limits, IDEM_EXIT_FINDING, err) < 0)
		return NULL;
	if ((root = yaml_document_get_root_node(&doc)) == NULL)
		idem_error_set(err, IDEM_EXIT_FINDING, "%s: empty", name);
	else
		out = node_to_json(&doc, root, name, err);
	yaml_document_delete(&doc);
	return out;
}

const char *
idem_json_str(const json_t *o, const char *path)
{
	char key[128];
	const char *dot;

	while ((dot = strchr(path, '.')) != NULL) {
		snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
		o = json_object_get(o, key);
		path = dot + 1;
	}
	return json_string_value(json_object_get(o, path));
}

long long
idem_json_num(const json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}
