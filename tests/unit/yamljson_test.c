#include <stdlib.h>

#include "unit.h"
#include "yamljson.h"

static const struct idem_yaml_limits tight = {
	.bytes = 100, .nodes = 5, .depth = 2, .expanded = 7, .kind = "a test",
};
static const struct idem_yaml_limits no_aliases = {
	.bytes = 100, .nodes = 100, .depth = 8, .expanded = 0, .kind = "a test",
};

/* Loads text within limits; the error text, or "" when it loads. */
static const char *
load(const char *text, size_t len, const struct idem_yaml_limits *limits)
{
	static struct idem_error err;
	yaml_document_t doc;

	if (idem_yaml_load(&doc, text, len, "t", limits, 2, &err) < 0)
		return err.text;
	yaml_document_delete(&doc);
	return "";
}

/* Texts and what loading them within limits says. */
static const struct {
	const char *text;
	const struct idem_yaml_limits *limits;
	const char *want, *name;
} loads[] = {
	{ "[a, b, c, d]", &tight, "", "five nodes: at the limit" },
	{ "[a, b, c, d, e]", &tight, "t:1:14: more than 5 nodes (scalars, mappings and lists)",
	    "six: over it, named" },
	{ "[[a]]", &tight, "", "two deep: at the limit" },
	{ "[[[a]]]", &tight, "t:1:3: mappings and lists nested more than 2 deep", "three deep: over it" },
	{ "[&x [a, b], *x]", &tight, "", "an alias counts what it stands for: 7" },
	{ "[&x [a, b], *x, *x]", &tight, "t:1:17: aliases expand to more than 7 nodes",
	    "one more alias: 10, over it, at the alias" },
	{ "[&x [a, *x]]", &tight, "t:1:9: alias *x is inside the node it names",
	    "an alias inside its own node: a cycle" },
	{ "[*x, &x a]", &tight, "t:1:2: YAML: alias *x names no anchor before it",
	    "an alias before its anchor" },
	{ "[&x a, &x b]", &tight, "t:1:8: YAML: anchor &x given twice", "an anchor twice" },
	{ "a: &x 1\nb: *x\n", &no_aliases, "t:2:4: alias *x: aliases are not allowed in a test",
	    "aliases refused" },
	{ "a: 1\n---\nb: 2\n", &no_aliases, "t: more than one YAML document", "one document" },
	{ "a: \"x\\0y\"\n", &no_aliases, "t:1:4: a text holds a NUL character (\\0)", "a NUL by escape" },
	{ "a: 1\nb: 'caf\xc3\xa9 \x01'\n", &no_aliases,
	    "t:2:10: YAML: control characters are not allowed (U+0001)",
	    "a control character: line and column in characters, from the offset" },
	{ "a: 1\r\nb: 2\rc: \xff\n", &no_aliases, "t:3:4: YAML: invalid leading UTF-8 octet (byte 0xFF)",
	    "CR LF and CR end lines" },
	{ "a: [1, 2\n", &no_aliases,
	    "t:2:1: YAML: did not find expected ',' or ']' while parsing a flow sequence",
	    "a syntax error: libyaml's mark and words" },
};

int
main(void)
{
	struct idem_error err;
	yaml_document_t doc;
	char big[101];
	json_t *v;
	size_t i;

	for (i = 0; i < sizeof(loads) / sizeof(loads[0]); i++)
		CHECK_STR(load(loads[i].text, strlen(loads[i].text), loads[i].limits), loads[i].want,
		    loads[i].name);
	memset(big, ' ', sizeof(big));
	CHECK_STR(load(big, sizeof(big), &no_aliases), "t: larger than 100 bytes", "bytes");
	CHECK(idem_yaml_load(&doc, "# nothing\n", 10, "t", &tight, 2, &err) == 0 &&
	    yaml_document_get_root_node(&doc) == NULL, "no document: no root");
	yaml_document_delete(&doc);

	v = idem_yaml_to_json("a: \"1\"\nb: 1\nc: [true, null, x]\n", 31, "r", &err);
	CHECK(v != NULL && json_is_string(json_object_get(v, "a")) &&
	    json_integer_value(json_object_get(v, "b")) == 1 &&
	    json_is_true(json_array_get(json_object_get(v, "c"), 0)), "a record's values");
	json_decref(v);
	CHECK(idem_yaml_to_json("a: 1\na: 2\n", 10, "r", &err) == NULL &&
	    strcmp(err.text, "r:2:1: key a given twice") == 0, "a key twice in a record");
	CHECK(idem_yaml_to_json("[a]: 1\n", 7, "r", &err) == NULL &&
	    strcmp(err.text, "r:1:1: keys must be scalars") == 0, "a list as a key");
	CHECK(idem_yaml_to_json("a: &x 1\nb: *x\n", 14, "r", &err) == NULL &&
	    strcmp(err.text, "r:2:4: alias *x: aliases are not allowed in a record") == 0 &&
	    err.status == IDEM_EXIT_FINDING, "a record has no aliases");
	return unit_done("yamljson");
}
