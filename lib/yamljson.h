/* yamljson.h: YAML read within limits; JSON values as YAML and back, for
 * records (idem-record(5)) */
#ifndef IDEM_YAMLJSON_H
#define IDEM_YAMLJSON_H

#include <jansson.h>
#include <yaml.h>

#include "error.h"

/* What a YAML file may cost, checked as it is parsed, before each node is
 * built. */
struct idem_yaml_limits {
	size_t bytes;		/* the file's size */
	long nodes;		/* scalars, mappings and lists, as written */
	int depth;		/* mappings and lists within one another */
	long expanded;		/* nodes, each alias counted as the nodes it
				 * stands for; 0 refuses aliases */
	const char *kind;	/* the file, in messages: "a record" */
};

/* The limits of a record: see LIMITS in idem-record(5). */
extern const struct idem_yaml_limits idem_record_limits;

/* Loads a YAML stream of at most one document into doc within limits, built
 * from libyaml's events; a text holding NUL is refused. Without a document,
 * doc has no root node. On failure (err with status, naming
 * name:line:column) there is no doc to delete. */
int idem_yaml_load(yaml_document_t *doc, const char *text, size_t len, const char *name,
		   const struct idem_yaml_limits *limits, int status, struct idem_error *err);

/* YAML for a JSON value, emitted with libyaml: every string quoted, so it
 * reads back as a string; keys in the object's order. Caller frees. */
char *idem_yaml_from_json(const json_t *value, struct idem_error *err);

/* The JSON value of a record's YAML, read within idem_record_limits:
 * quoted scalars are strings, plain ones integers, booleans, null or
 * strings by the YAML core schema; keys are scalars, each once. */
json_t *idem_yaml_to_json(const char *text, size_t len, const char *name,
			  struct idem_error *err);

/* A record's string at a path of keys joined by dots ("seed.revision"),
 * or NULL; its integer at a key, or 0. */
const char *idem_json_str(const json_t *o, const char *path);
long long idem_json_num(const json_t *o, const char *key);

#endif
