#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sanitize.h"
#include "text.h"

void
idem_sanitize_init(struct idem_sanitizer *s, const unsigned char *key, size_t len)
{
	memset(s, 0, sizeof(*s));
	/* the key of the HMAC is a hash of the key given, of a fixed size */
	crypto_generichash(s->key, sizeof(s->key), key, len, NULL, 0);
	idem_map_init(&s->path_index);
}

void
idem_sanitize_free(struct idem_sanitizer *s)
{
	size_t i;

	sodium_memzero(s->key, sizeof(s->key));
	for (i = 0; i < s->npaths; i++) {
		free(s->paths[i].path);
		idem_map_free(&s->paths[i].distinct);
	}
	free(s->paths);
	idem_map_free(&s->path_index);
	idem_free_list(s->coarse_paths, s->ncoarse);
	free(s->coarse_by);
	json_decref(s->schema);
}

int
idem_sanitize_coarsen(struct idem_sanitizer *s, const char *spec, struct idem_error *err)
{
	const char *eq = strrchr(spec, '=');
	char *end;
	long long by;

	if (eq == NULL || eq == spec)
		return idem_error_set(err, IDEM_EXIT_USAGE, "-c %s: expected path=multiple", spec);
	errno = 0;
	by = strtoll(eq + 1, &end, 10);
	if (errno || *end || end == eq + 1 || by < 2)
		return idem_error_set(err, IDEM_EXIT_USAGE, "-c %s: the multiple is a whole number "
		    "from 2", spec);
	s->coarse_paths = idem_ereallocarray(s->coarse_paths, s->ncoarse + 1, sizeof(char *));
	s->coarse_by = idem_ereallocarray(s->coarse_by, s->ncoarse + 1, sizeof(long long));
	s->coarse_paths[s->ncoarse] = idem_estrndup(spec, (size_t)(eq - spec));
	s->coarse_by[s->ncoarse++] = by;
	return 0;
}

void
idem_sanitize_pseudonym(const struct idem_sanitizer *s, const char *text, size_t len, char out[22])
{
	unsigned char mac[crypto_auth_hmacsha256_BYTES];
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, s->key, sizeof(s->key));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)text, len);
	crypto_auth_hmacsha256_final(&st, mac);
	out[0] = 'p';
	sodium_bin2hex(out + 1, 21, mac, 10);
}

static struct idem_sanitize_path *
path_entry(struct idem_sanitizer *s, const char *path)
{
	size_t i = idem_map_get(&s->path_index, path);

	if (i != IDEM_MAP_NONE)
		return &s->paths[i];
	s->paths = idem_ereallocarray(s->paths, s->npaths + 1, sizeof(*s->paths));
	memset(&s->paths[s->npaths], 0, sizeof(*s->paths));
	s->paths[s->npaths].path = idem_estrdup(path);
	idem_map_init(&s->paths[s->npaths].distinct);
	idem_map_put(&s->path_index, path, s->npaths);
	return &s->paths[s->npaths++];
}

static int
plain_name(const char *name)
{
	size_t i, n = strlen(name);

	if (n == 0 || n > IDEM_SANITIZE_NAME_MAX || !(isalpha((unsigned char)name[0]) || name[0] == '_'))
		return 0;
	for (i = 1; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-')
			return 0;
	return 1;
}

static long long
coarse_by(const struct idem_sanitizer *s, const char *path)
{
	size_t i;

	for (i = 0; i < s->ncoarse; i++)
		if (strcmp(s->coarse_paths[i], path) == 0)
			return s->coarse_by[i];
	return 0;
}

static json_t *
sanitize(struct idem_sanitizer *s, json_t *v, const char *path, int depth, const char *where,
	 struct idem_error *err)
{
	struct idem_sanitize_path *p;
	json_t *out, *item, *copy;
	const char *name;
	char pseudonym[22], *sub;
	long long n, by;
	size_t i;

	if (depth > IDEM_SANITIZE_DEPTH) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: field %s: nested deeper than %d; it cannot "
		    "reach the strings there", where, path, IDEM_SANITIZE_DEPTH);
		return NULL;
	}
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		out = json_object();
		json_object_foreach(v, name, item) {
			if (!plain_name(name)) {
				char shown[41];

				/* shown in printable ASCII, so the message stays one line */
				for (i = 0; name[i] && i < sizeof(shown) - 1; i++)
					shown[i] = name[i] > 0x20 && name[i] < 0x7f ? name[i] : '?';
				shown[i] = '\0';
				idem_error_set(err, IDEM_EXIT_USAGE, "%s: field %s%s\"%s\": not a plain name "
				    "(a letter or _, then letters, digits, _ or -, at most %d): it may be "
				    "data", where, path, *path ? "." : "", shown, IDEM_SANITIZE_NAME_MAX);
				json_decref(out);
				return NULL;
			}
			if (asprintf(&sub, "%s%s%s", path, *path ? "." : "", name) < 0)
				idem_die(IDEM_EXIT_ENV, "asprintf:");
			copy = sanitize(s, item, sub, depth + 1, where, err);
			free(sub);
			if (copy == NULL) {
				json_decref(out);
				return NULL;
			}
			json_object_set_new(out, name, copy);
		}
		return out;
	case JSON_ARRAY:
		out = json_array();
		if (asprintf(&sub, "%s[]", path) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		json_array_foreach(v, i, item) {
			if ((copy = sanitize(s, item, sub, depth + 1, where, err)) == NULL) {
				free(sub);
				json_decref(out);
				return NULL;
			}
			json_array_append_new(out, copy);
		}
		free(sub);
		return out;
	case JSON_STRING:
		p = path_entry(s, path);
		idem_sanitize_pseudonym(s, json_string_value(v), json_string_length(v), pseudonym);
		p->strings++;
		idem_map_put(&p->distinct, pseudonym, 1);
		return json_string(pseudonym);
	case JSON_INTEGER:
		p = path_entry(s, path);
		n = json_integer_value(v);
		p->integers++;
		if ((by = coarse_by(s, path)) > 0) {
			long long r = n % by;

			n -= r < 0 ? r + by : r;
			p->coarsened++;
		}
		return json_integer(n);
	case JSON_REAL:
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: field %s: a real number; a seed takes "
		    "integers only (such as cents)", where, path);
		return NULL;
	case JSON_TRUE:
	case JSON_FALSE:
	case JSON_NULL:
		return json_incref(v);
	}
	return NULL;
}

static const char *
type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_STRING: return "string";
	case JSON_INTEGER: return "integer";
	case JSON_TRUE:
	case JSON_FALSE: return "boolean";
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	default: return NULL;
	}
}

/* Every payload has the first one's fields, each of its type. */
static int
check_shape(struct idem_sanitizer *s, json_t *v, const char *where, struct idem_error *err)
{
	json_t *schema = json_object(), *item;
	const char *name, *type;

	json_object_foreach(v, name, item) {
		if ((type = type_name(item)) == NULL) {
			json_decref(schema);
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s: field %s: null; a seed's "
			    "payload field has a type", where, name);
		}
		json_object_set_new(schema, name, json_string(type));
	}
	if (json_object_size(schema) == 0) {
		json_decref(schema);
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: an empty object; a seed's payload "
		    "has a field at least", where);
	}
	if (s->schema == NULL) {
		s->schema = schema;
		return 0;
	}
	if (!json_equal(schema, s->schema)) {
		json_decref(schema);
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: not the shape of the first line "
		    "(its fields and their types): a seed's payloads have one shape", where);
	}
	json_decref(schema);
	return 0;
}

json_t *
idem_sanitize_line(struct idem_sanitizer *s, const char *line, size_t len, const char *where,
		   struct idem_error *err)
{
	json_error_t jerr;
	json_t *v, *out;

	if (!idem_utf8_valid(line, len)) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: not UTF-8", where);
		return NULL;
	}
	if ((v = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: not JSON: %s", where, jerr.text);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: not a JSON object; a payload is one", where);
		return NULL;
	}
	if ((out = sanitize(s, v, "", 0, where, err)) == NULL) {
		json_decref(v);
		return NULL;
	}
	if (check_shape(s, v, where, err) < 0) {
		json_decref(out);
		json_decref(v);
		return NULL;
	}
	json_decref(v);
	s->lines++;
	return out;
}
