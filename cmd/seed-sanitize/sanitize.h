/* sanitize.h: real payloads made into seed payloads of the same shape
 * (seed-sanitize(1)): every string a keyed pseudonym, integers kept or
 * coarsened, field names and types kept, nothing else carried over. */
#ifndef IDEM_SANITIZE_H
#define IDEM_SANITIZE_H

#include <stddef.h>

#include <jansson.h>
#include <sodium.h>

#include "map.h"
#include "error.h"

#define IDEM_SANITIZE_DEPTH 32		/* nesting it reaches into */
#define IDEM_SANITIZE_NAME_MAX 64	/* a field name's length */

/* What was done at one field path ("a", "a.b", "a[]"). */
struct idem_sanitize_path {
	char *path;
	long long strings, integers, coarsened;
	struct idem_map distinct;	/* pseudonyms seen there */
};

struct idem_sanitizer {
	unsigned char key[crypto_auth_hmacsha256_KEYBYTES];
	/* coarsening: path: multiple */
	char **coarse_paths;
	long long *coarse_by;
	size_t ncoarse;
	/* the report */
	struct idem_sanitize_path *paths;
	size_t npaths;
	struct idem_map path_index;
	/* the shape: the first payload's fields and their types */
	json_t *schema;
	long long lines;
};

/* A sanitizer whose pseudonyms are keyed by key (at least 16 bytes; only
 * a hash of it is kept). */
void idem_sanitize_init(struct idem_sanitizer *s, const unsigned char *key, size_t len);
void idem_sanitize_free(struct idem_sanitizer *s);
/* Integers at path made a multiple of by (rounded down); -1 with err for
 * a bad spec "PATH=N". */
int idem_sanitize_coarsen(struct idem_sanitizer *s, const char *spec, struct idem_error *err);

/* The pseudonym of a string: "p" and 20 hex digits of its HMAC-SHA256;
 * out holds 22 bytes. */
void idem_sanitize_pseudonym(const struct idem_sanitizer *s, const char *text, size_t len,
			     char out[22]);

/* One line of JSON, a payload: its sanitized copy (caller decrefs), or NULL
 * with err naming the line (where, such as "payloads.jsonl:3") and the
 * field when it cannot be made safe: not JSON, not an object, a field
 * name that is not a plain name, a real number, nesting deeper than
 * IDEM_SANITIZE_DEPTH, a null field, or a shape other than the first
 * line's. */
json_t *idem_sanitize_line(struct idem_sanitizer *s, const char *line, size_t len,
			   const char *where, struct idem_error *err);

#endif
