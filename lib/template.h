/* template.h: a small subset of Mustache for templates/ (see idem-seed(5)) */
#ifndef IDEM_TEMPLATE_H
#define IDEM_TEMPLATE_H

#include <jansson.h>

#include "error.h"

enum idem_template_escape {
	IDEM_ESCAPE_NONE,
	IDEM_ESCAPE_MARKDOWN	/* "|" and line breaks, so values stay in a table cell */
};

/* Renders {{name}}, {{{unescaped}}}, {{a.b}}, {{.}}, {{#section}}...{{/section}} and
 * {{^inverted}}...{{/inverted}} against a JSON context. Returns a malloc'd
 * string, or NULL with err set when the template is malformed. */
char *idem_template_render(const char *name, const char *tpl, json_t *context,
			   enum idem_template_escape escape, struct idem_error *err);

#endif
