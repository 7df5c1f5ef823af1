#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seed.h"
#include "json.h"
#include "template.h"
#include "text.h"

#define MAX_DEPTH 16

struct render {
	const char *name;
	FILE *out;
	json_t *stack[MAX_DEPTH];
	int depth;
	enum idem_template_escape escape;
	struct idem_error *err;
};

static json_t *
resolve(struct render *r, const char *path, size_t len)
{
	char key[256];
	const char *dot;
	json_t *v = NULL;
	int i;

	if (len == 1 && path[0] == '.')
		return r->stack[r->depth - 1];
	dot = memchr(path, '.', len);
	snprintf(key, sizeof(key), "%.*s", (int)((dot ? dot : path + len) - path), path);
	for (i = r->depth - 1; i >= 0 && v == NULL; i--)
		if (json_is_object(r->stack[i]))
			v = json_object_get(r->stack[i], key);
	while (v != NULL && dot != NULL) {
		const char *next = memchr(dot + 1, '.', (size_t)(path + len - dot - 1));

		snprintf(key, sizeof(key), "%.*s", (int)((next ? next : path + len) - dot - 1),
		    dot + 1);
		if (json_is_array(v) && key[0] >= '0' && key[0] <= '9')
			v = json_array_get(v, strtoul(key, NULL, 10));
		else
			v = json_object_get(v, key);
		dot = next;
	}
	return v;
}

static int
truthy(const json_t *v)
{
	if (v == NULL || json_is_null(v) || json_is_false(v))
		return 0;
	if (json_is_array(v))
		return json_array_size(v) > 0;
	if (json_is_string(v))
		return json_string_length(v) > 0;
	return 1;
}

static void
emit_value(struct render *r, const json_t *v)
{
	char *text = NULL, num[32];
	const char *s, *p;

	if (v == NULL || json_is_null(v))
		return;
	if (json_is_string(v)) {
		s = json_string_value(v);
	} else if (json_is_integer(v)) {
		snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
		s = num;
	} else if (json_is_real(v)) {
		idem_format_real(json_real_value(v), num);
		s = num;
	} else if (json_is_boolean(v)) {
		s = json_is_true(v) ? "true" : "false";
	} else {
		s = text = idem_json_canonical(v);
	}
	for (p = s; *p; p++) {
		if (r->escape == IDEM_ESCAPE_MARKDOWN && *p == '|')
			fputs("\\|", r->out);
		else if (r->escape == IDEM_ESCAPE_MARKDOWN && *p == '\n')
			fputs("<br>", r->out);
		else if (r->escape == IDEM_ESCAPE_MARKDOWN && *p == '\r')
			continue;
		else
			putc(*p, r->out);
	}
	free(text);
}

/* The end of the section named name that starts at p: where its closing tag
 * begins, and (in *after) where the text after it begins. */
static const char *
section_end(const char *p, const char *end, const char *name, size_t len, const char **after)
{
	int level = 1;

	while ((p = strstr(p, "{{")) != NULL && p < end) {
		const char *close = strstr(p, "}}");

		if (close == NULL)
			return NULL;
		if ((p[2] == '#' || p[2] == '^' || p[2] == '/') &&
		    (size_t)(close - p - 3) == len && memcmp(p + 3, name, len) == 0) {
			level += p[2] == '/' ? -1 : 1;
			if (level == 0) {
				*after = close + 2;
				return p;
			}
		}
		p = close + 2;
	}
	return NULL;
}

static int
render_range(struct render *r, const char *p, const char *end)
{
	while (p < end) {
		const char *open = strstr(p, "{{"), *close, *name, *body_end, *after;
		size_t len;
		json_t *v;

		if (open == NULL || open >= end) {
			fwrite(p, 1, (size_t)(end - p), r->out);
			break;
		}
		fwrite(p, 1, (size_t)(open - p), r->out);
		if ((close = strstr(open, "}}")) == NULL || close > end)
			return idem_error_set(r->err, IDEM_EXIT_USAGE, "template %s: unclosed {{",
			    r->name);
		if (open[2] == '{') {
			enum idem_template_escape saved = r->escape;

			/* {{{name}}}: the value as it is, unescaped */
			if ((close = strstr(open, "}}}")) == NULL || close > end)
				return idem_error_set(r->err, IDEM_EXIT_USAGE, "template %s: unclosed {{{",
				    r->name);
			r->escape = IDEM_ESCAPE_NONE;
			emit_value(r, resolve(r, open + 3, (size_t)(close - open - 3)));
			r->escape = saved;
			p = close + 3;
			continue;
		}
		name = open + 2;
		if (*name == '#' || *name == '^' || *name == '/')
			name++;
		len = (size_t)(close - name);
		if (open[2] == '/')
			return idem_error_set(r->err, IDEM_EXIT_USAGE,
			    "template %s: {{/%.*s}} without a section", r->name, (int)len, name);
		if (open[2] != '#' && open[2] != '^') {
			emit_value(r, resolve(r, name, len));
			p = close + 2;
			continue;
		}
		if ((body_end = section_end(close + 2, end, name, len, &after)) == NULL)
			return idem_error_set(r->err, IDEM_EXIT_USAGE,
			    "template %s: section %.*s is not closed", r->name, (int)len, name);
		v = resolve(r, name, len);
		if (r->depth == MAX_DEPTH)
			return idem_error_set(r->err, IDEM_EXIT_USAGE,
			    "template %s: sections nested too deep", r->name);
		if (open[2] == '^') {
			if (!truthy(v) && render_range(r, close + 2, body_end) < 0)
				return -1;
		} else if (json_is_array(v)) {
			size_t i;

			for (i = 0; i < json_array_size(v); i++) {
				r->stack[r->depth++] = json_array_get(v, i);
				if (render_range(r, close + 2, body_end) < 0)
					return -1;
				r->depth--;
			}
		} else if (truthy(v)) {
			r->stack[r->depth++] = v;
			if (render_range(r, close + 2, body_end) < 0)
				return -1;
			r->depth--;
		}
		p = after;
	}
	return 0;
}

/* A line holding nothing but a section tag is dropped whole, as in Mustache. */
static char *
strip_standalone(const char *tpl)
{
	char *out = idem_emalloc(strlen(tpl) + 1), *o = out;
	const char *line = tpl;

	while (*line) {
		const char *nl = strchr(line, '\n'), *end = nl ? nl + 1 : line + strlen(line);
		const char *p = line + strspn(line, " \t"), *close;

		if (p[0] == '{' && p[1] == '{' && (p[2] == '#' || p[2] == '^' || p[2] == '/') &&
		    (close = strstr(p, "}}")) != NULL && close < end &&
		    close + 2 + strspn(close + 2, " \t") == (nl ? nl : end)) {
			memcpy(o, p, (size_t)(close + 2 - p));
			o += close + 2 - p;
		} else {
			memcpy(o, line, (size_t)(end - line));
			o += end - line;
		}
		line = end;
	}
	*o = '\0';
	return out;
}

char *
idem_template_render(const char *name, const char *tpl, json_t *context,
		     enum idem_template_escape escape, struct idem_error *err)
{
	struct render r = { .name = name, .escape = escape, .err = err, .depth = 1 };
	char *buf = NULL, *text = strip_standalone(tpl);
	size_t len = 0;
	int rc;

	r.stack[0] = context;
	if ((r.out = open_memstream(&buf, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	rc = render_range(&r, text, text + strlen(text));
	if (fclose(r.out) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	free(text);
	if (rc < 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
