/* tracefile.c: the trace beside a record, checked against the SHA-256
 * the signed record names */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tracefile.h"
#include "error.h"
#include "file.h"

char *
idem_tracefile_check(const char *path, const json_t *record)
{
	const char *want = json_string_value(json_object_get(json_object_get(record, "trace"),
	    "sha256"));
	size_t len = strlen(path);
	char trace[PATH_MAX], hex[65], *why = NULL;
	int n;

	if (json_integer_value(json_object_get(record, "record")) < 9)
		return NULL;
	if (len < 5 || strcmp(path + len - 5, ".yaml") != 0)
		n = snprintf(trace, sizeof(trace), "%s.trace.json", path);
	else
		n = snprintf(trace, sizeof(trace), "%.*s.trace.json", (int)(len - 5), path);
	if (n < 0 || (size_t)n >= sizeof(trace))
		return idem_estrdup("trace: the path of the trace beside the record is too long");
	if (want == NULL) {
		why = idem_estrdup("trace: the record names no SHA-256 of its trace");
	} else if (idem_sha256_file(trace, hex) < 0) {
		if (asprintf(&why, "trace: %s: %s", trace, strerror(errno)) < 0)
			why = NULL;
	} else if (strcmp(hex, want) != 0 && asprintf(&why, "trace: %s has SHA-256 %s, the record "
	    "says %s: not the trace that was signed", trace, hex, want) < 0) {
		why = NULL;
	}
	return why;
}
