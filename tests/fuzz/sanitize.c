/* Fuzzes seed-sanitize's reading of a payload line: what it accepts comes
 * back as an object of the same field names, whose every string is a
 * pseudonym and never the input's, and which a seed can hold. */
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "seed-sanitize/sanitize.h"

/* Whether every string of v is a pseudonym: "p" and 20 hex digits. */
static int
pseudonyms_only(const json_t *v)
{
	const char *name, *s;
	json_t *item;
	size_t i;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		json_object_foreach((json_t *)v, name, item)
			if (!pseudonyms_only(item))
				return 0;
		return 1;
	case JSON_ARRAY:
		json_array_foreach(v, i, item)
			if (!pseudonyms_only(item))
				return 0;
		return 1;
	case JSON_STRING:
		s = json_string_value(v);
		return strlen(s) == 21 && s[0] == 'p' && strspn(s + 1, "0123456789abcdef") == 20;
	case JSON_REAL:
		return 0;
	default:
		return 1;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned char key[] = "a fuzzing key of enough bytes";
	struct idem_sanitizer s;
	struct idem_error err;
	json_t *in, *out;
	const char *name;
	json_t *item;

	idem_sanitize_init(&s, key, sizeof(key) - 1);
	out = idem_sanitize_line(&s, (const char *)data, size, "fuzz:1", &err);
	if (out != NULL) {
		if (!json_is_object(out) || !pseudonyms_only(out))
			fuzz_fail("a sanitized payload holds a string that is no pseudonym");
		in = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
		if (in == NULL || json_object_size(in) != json_object_size(out))
			fuzz_fail("a sanitized payload has other fields than its line");
		json_object_foreach(in, name, item)
			if (json_object_get(out, name) == NULL)
				fuzz_fail("a field of the line is missing from the sanitized payload");
		json_decref(in);
		json_decref(out);
	} else if (err.status != IDEM_EXIT_USAGE || memchr(err.text, '\n', strlen(err.text))) {
		fuzz_fail("a refused line is not a one-line usage error");
	}
	idem_sanitize_free(&s);
	return 0;
}
