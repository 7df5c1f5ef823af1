/* yamljson.h: JSON values as YAML and back, for records (idem-record(5)) */
#ifndef IDEM_YAMLJSON_H
#define IDEM_YAMLJSON_H

#include <jansson.h>

#include "util.h"

/* YAML for a JSON value, emitted with libyaml: every string quoted, so it
 * reads back as a string; keys in the object's order. Caller frees. */
char *idem_yaml_from_json(const json_t *value, struct idem_error *err);

/* The JSON value of a YAML document: quoted scalars are strings, plain ones
 * integers, booleans, null or strings by the YAML core schema. */
json_t *idem_yaml_to_json(const char *text, size_t len, const char *name,
			  struct idem_error *err);

#endif
