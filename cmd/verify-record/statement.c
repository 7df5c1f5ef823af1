/* statement.c: the in-toto statement beside a record, checked against
 * the record and its signer */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "statement.h"
#include "dsse.h"
#include "file.h"
#include "intoto.h"
#include "yamljson.h"

/* The sha256 digest of the subject named name, or NULL. */
static const char *
subject_sha256(const json_t *statement, const char *name)
{
	const json_t *subject;
	size_t i;

	json_array_foreach(json_object_get(statement, "subject"), i, subject)
		if (json_is_string(json_object_get(subject, "name")) &&
		    strcmp(json_string_value(json_object_get(subject, "name")), name) == 0)
			return json_string_value(json_object_get(json_object_get(subject, "digest"),
			    "sha256"));
	return NULL;
}

/* What the statement says of the record, its seed, its queue adapter
 * and its verdict. */
static int
check_claims(const json_t *s, const char *name, const json_t *record, const char sha256[65],
	     struct idem_error *err)
{
	const char *seed = idem_json_str(record, "seed.repo_path");
	const char *seed_sha = idem_json_str(record, "seed.sha256"), *got;
	const char *adapter = idem_json_str(record, "queue.adapter.repo_path");
	const char *adapter_sha = idem_json_str(record, "queue.adapter.sha256");
	const char *result = idem_json_str(s, "predicate.result");
	const char *want = idem_intoto_result(idem_json_str(record, "verdict"));

	if (!json_is_object(s) || idem_json_str(s, "_type") == NULL ||
	    strcmp(idem_json_str(s, "_type"), IDEM_INTOTO_STATEMENT) != 0 ||
	    idem_json_str(s, "predicateType") == NULL ||
	    strcmp(idem_json_str(s, "predicateType"), IDEM_INTOTO_PREDICATE) != 0)
		return idem_error_set(err, IDEM_EXIT_FINDING, "not an in-toto statement v1 of a test "
		    "result v0.1");
	if ((got = subject_sha256(s, name)) == NULL)
		return idem_error_set(err, IDEM_EXIT_FINDING, "no subject names the record, %s, with "
		    "a sha256", name);
	if (strcmp(got, sha256) != 0)
		return idem_error_set(err, IDEM_EXIT_FINDING, "the record's subject has another "
		    "SHA-256 than the record, %s: the record changed after the statement was made",
		    sha256);
	if (seed == NULL || seed_sha == NULL || (got = subject_sha256(s, seed)) == NULL ||
	    strcmp(got, seed_sha) != 0)
		return idem_error_set(err, IDEM_EXIT_FINDING, "no subject names the record's seed, "
		    "%s, with its SHA-256 %s", seed ? seed : "(none)", seed_sha ? seed_sha : "(none)");
	if (adapter != NULL && (adapter_sha == NULL || (got = subject_sha256(s, adapter)) == NULL ||
	    strcmp(got, adapter_sha) != 0))
		return idem_error_set(err, IDEM_EXIT_FINDING, "no subject names the record's queue "
		    "adapter, %s, with its SHA-256 %s", adapter, adapter_sha ? adapter_sha : "(none)");
	if (result == NULL || strcmp(result, want) != 0)
		return idem_error_set(err, IDEM_EXIT_FINDING, "its result is not %s, as the "
		    "record's verdict gives", want);
	return 0;
}

int
idem_statement_check(const char *path, const json_t *record, const char sha256[65],
		     const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES], struct idem_error *err)
{
	char file[PATH_MAX], *text = NULL;
	const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t len = strlen(path), text_len;
	struct idem_dsse e = { .type = NULL };
	json_t *s = NULL;
	json_error_t jerr;
	int rc = -1;

	if (len < 5 || strcmp(path + len - 5, ".yaml") != 0)
		return 0;
	if (snprintf(file, sizeof(file), "%.*s%s", (int)(len - 5), path, IDEM_INTOTO_SUFFIX) >=
	    (int)sizeof(file))
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: path too long", path);
	/* a record made before the statements has none: nothing to check;
	 * every signed record since format 10 has one */
	if (access(file, F_OK) < 0 && errno == ENOENT)
		return idem_json_num(record, "record") < IDEM_STATEMENT_SINCE_FORMAT ? 0 :
		    idem_error_set(err, IDEM_EXIT_FINDING, "%s: missing: a signed record of format "
		    "%d or later has its in-toto statement beside it", file,
		    IDEM_STATEMENT_SINCE_FORMAT);
	if ((text = idem_read_file_max(file, IDEM_DSSE_FILE_MAX, &text_len, err)) == NULL)
		return -1;
	if (text_len == 0 || text[text_len - 1] != '\n' || memchr(text, '\n', text_len - 1) != NULL)
		idem_error_set(err, IDEM_EXIT_FINDING, "%s: not one line", file);
	else if (idem_dsse_parse(&e, text, text_len, err) < 0)
		;
	else if (strcmp(e.type, IDEM_DSSE_INTOTO_TYPE) != 0)
		idem_error_set(err, IDEM_EXIT_FINDING, "the payloadType is not "
		    IDEM_DSSE_INTOTO_TYPE);
	else if (idem_dsse_check(&e, public_key, err) < 0)
		;
	else if ((s = json_loadb((const char *)e.body, e.body_len, JSON_REJECT_DUPLICATES,
	    &jerr)) == NULL)
		idem_error_set(err, IDEM_EXIT_FINDING, "the payload is not JSON: %s", jerr.text);
	else
		rc = check_claims(s, name, record, sha256, err);
	if (rc < 0 && strncmp(err->text, file, strlen(file)) != 0) {
		char why[sizeof(err->text)];

		snprintf(why, sizeof(why), "%s", err->text);
		idem_error_set(err, IDEM_EXIT_FINDING, "%s: %s", file, why);
	}
	json_decref(s);
	idem_dsse_free(&e);
	free(text);
	return rc;
}
