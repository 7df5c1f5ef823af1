/* statement.h: the in-toto statement beside a record checked
 * (verify-record(1)): its envelope, its signature by the record's signer,
 * and what it says of the record, its seed and its verdict */
#ifndef VERIFY_RECORD_STATEMENT_H
#define VERIFY_RECORD_STATEMENT_H

#include <jansson.h>

#include "sig.h"
#include "error.h"

/* The first record format whose signed records all have a statement:
 * mkrecord wrote statements from late in format 8 on. */
#define IDEM_STATEMENT_SINCE_FORMAT 10

/* Checks RECORD.intoto.jsonl beside the record at path: the record (its
 * JSON) whose bytes have SHA-256 sha256, signed by public_key. 0 when it
 * holds, or when there is none and the record's format is older than
 * IDEM_STATEMENT_SINCE_FORMAT; -1 with err set to why not, in one line. */
int idem_statement_check(const char *path, const json_t *record, const char sha256[65],
			 const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES],
			 struct idem_error *err);

#endif
