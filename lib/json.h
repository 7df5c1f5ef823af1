/* json.h: JSON as idem writes and checks it: canonical text, and a check
 * of well-formed JSON that builds no value */
#ifndef IDEM_JSON_H
#define IDEM_JSON_H

#include <stddef.h>

#include "error.h"

/* jansson's json_t, named without its header: its JSON_OBJECT and kin
 * would take names that the stream's field types use. */
struct json_t;

/* Canonical JSON of a value (sorted keys, compact, UTF-8); caller frees. */
char *idem_json_canonical(const struct json_t *value);

/* What idem_json_check saw of a value. */
struct idem_json_shape {
	char top;		/* '{', '[' or 0 for a scalar */
	int strings_only;	/* every element of a top-level array is a string */
	size_t elements;	/* of a top-level array or object */
	size_t at;		/* the offset of the first error */
};

/* Whether s is one well-formed JSON value (RFC 8259), and its shape. As
 * PostgreSQL's jsonb, refuses \u0000 and a surrogate escape not in a pair.
 * The bytes must be valid UTF-8 already. */
int idem_json_check(const char *s, size_t len, struct idem_json_shape *shape);

#endif
