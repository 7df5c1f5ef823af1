/* statement.h: the in-toto statement mkrecord writes beside a record,
 * RECORD.intoto.jsonl (idem-record(5), THE IN-TOTO STATEMENT) */
#ifndef MKRECORD_STATEMENT_H
#define MKRECORD_STATEMENT_H

#include <jansson.h>

#include "sig.h"

/* The statement of record (its JSON), stored as yaml at record_path, in
 * a DSSE envelope signed with key: one line. Caller frees. */
char *idem_statement_envelope(const json_t *record, const char *yaml, const char *record_path,
			   const struct idem_key *key);

/* The statement's tests: each scenario's name in passed, warned or
 * failed, and the whole run's, as the rule of idem-record(5) puts them.
 * The lists are the caller's to decref. */
void idem_statement_tests(const json_t *record, json_t *passed, json_t *warned, json_t *failed);

#endif
