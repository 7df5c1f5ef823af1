#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "json.h"

/* nesting of JSON values, as deep as jansson parses */
#define JSON_MAX_DEPTH 2048

char *
idem_json_canonical(const struct json_t *value)
{
	char *s = json_dumps(value, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);

	if (s == NULL)
		idem_die(IDEM_EXIT_ENV, "json_dumps failed");
	return s;
}

static int
hex4(const unsigned char *p, const unsigned char *end, unsigned *out)
{
	unsigned v = 0;
	int i;

	if (end - p < 4)
		return -1;
	for (i = 0; i < 4; i++) {
		unsigned c = p[i];

		if (c >= '0' && c <= '9')
			v = v * 16 + (c - '0');
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			v = v * 16 + ((c | 0x20) - 'a' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

/* Moves *pp past one JSON string (*pp at its opening quote), or to where
 * it goes wrong and returns -1. The bytes are valid UTF-8 already. As
 * PostgreSQL's jsonb, refuses \u0000 and a surrogate escape not in a pair. */
static int
skip_string(const unsigned char **pp, const unsigned char *end)
{
	const unsigned char *p = *pp;
	unsigned u, low;
	int rc = -1;

	for (p++; p < end; p++) {
		if (*p == '"') {
			p++;
			rc = 0;
			break;
		}
		if (*p < 0x20)
			break;
		if (*p != '\\')
			continue;
		if (p + 1 == end || (p[1] != 'u' && strchr("\"\\/bfnrt", p[1]) == NULL))
			break;
		if (p[1] != 'u') {
			p++;
			continue;
		}
		if (hex4(p + 2, end, &u) < 0 || u == 0 || (u >= 0xdc00 && u <= 0xdfff))
			break;
		if (u >= 0xd800 && u <= 0xdbff && (end - p < 12 || p[6] != '\\' || p[7] != 'u' ||
		    hex4(p + 8, end, &low) < 0 || low < 0xdc00 || low > 0xdfff))
			break;
		p += u >= 0xd800 && u <= 0xdbff ? 11 : 5;
	}
	*pp = p;
	return rc;
}

static int
skip_number(const unsigned char **pp, const unsigned char *end)
{
	const unsigned char *p = *pp, *start;
	int rc = -1;

	if (p < end && *p == '-')
		p++;
	if (p < end && *p == '0')
		p++;
	else if (p < end && *p >= '1' && *p <= '9')
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	else
		goto out;
	if (p < end && *p == '.') {
		for (start = ++p; p < end && *p >= '0' && *p <= '9'; p++)
			;
		if (p == start)
			goto out;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		for (start = p; p < end && *p >= '0' && *p <= '9'; p++)
			;
		if (p == start)
			goto out;
	}
	rc = 0;
out:
	*pp = p;
	return rc;
}

/* A check without building the value: a reader meets a payload on every
 * job row, and a parse into a tree would cost as much as the rest of the
 * row. */
int
idem_json_check(const char *s, size_t len, struct idem_json_shape *shape)
{
	const unsigned char *start = (const unsigned char *)s, *p = start, *end = p + len;
	unsigned char objects[JSON_MAX_DEPTH / 8];	/* per depth: 1 object, 0 array */
	size_t depth = 0;
	int in_object;

	memset(shape, 0, sizeof(*shape));
	shape->strings_only = 1;
#define SKIP_SPACE() while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++
#define FAIL() do { shape->at = (size_t)(p - start); return 0; } while (0)
value:
	SKIP_SPACE();
	if (p == end)
		FAIL();
	if (depth == 1) {
		shape->elements++;
		if (*p != '"')
			shape->strings_only = 0;
	}
	switch (*p) {
	case '{':
	case '[':
		if (depth == JSON_MAX_DEPTH)
			FAIL();
		if (depth == 0)
			shape->top = (char)*p;
		if (*p == '{')
			objects[depth / 8] |= (unsigned char)(1u << depth % 8);
		else
			objects[depth / 8] &= (unsigned char)~(1u << depth % 8);
		depth++;
		p++;
		SKIP_SPACE();
		if (p < end && *p == (objects[(depth - 1) / 8] >> (depth - 1) % 8 & 1 ? '}' : ']')) {
			p++;
			depth--;
			goto after;
		}
		if (objects[(depth - 1) / 8] >> (depth - 1) % 8 & 1)
			goto key;
		goto value;
	case '"':
		if (skip_string(&p, end) < 0)
			FAIL();
		goto after;
	case 't':
	case 'f':
	case 'n': {
		const char *word = *p == 't' ? "true" : *p == 'f' ? "false" : "null";
		size_t n = strlen(word);

		if ((size_t)(end - p) < n || memcmp(p, word, n) != 0)
			FAIL();
		p += n;
		goto after;
	}
	default:
		if (skip_number(&p, end) < 0)
			FAIL();
		goto after;
	}
key:
	SKIP_SPACE();
	if (p == end || *p != '"' || skip_string(&p, end) < 0)
		FAIL();
	SKIP_SPACE();
	if (p == end || *p != ':')
		FAIL();
	p++;
	goto value;
after:
	SKIP_SPACE();
	if (depth == 0) {
		if (p != end)
			FAIL();
		return 1;
	}
	if (p == end)
		FAIL();
	in_object = objects[(depth - 1) / 8] >> (depth - 1) % 8 & 1;
	if (*p == ',') {
		p++;
		if (in_object)
			goto key;
		goto value;
	}
	if (*p != (in_object ? '}' : ']'))
		FAIL();
	p++;
	depth--;
	goto after;
#undef SKIP_SPACE
#undef FAIL
}

