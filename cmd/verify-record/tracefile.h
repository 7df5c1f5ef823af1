/* tracefile.h: the trace beside a record of format 9 (idem-record(5),
 * THE TRACE), held to the SHA-256 the signed record names */
#ifndef IDEM_TRACEFILE_H
#define IDEM_TRACEFILE_H

#include <jansson.h>

/* Why the trace beside the record at path (its JSON) is not the one
 * signed, as one line; NULL when it is, or when the record is of a format
 * before 9. Caller frees. */
char *idem_tracefile_check(const char *path, const json_t *record);

#endif
