/* intoto.h: what mkrecord(1) and verify-record(1) share of the in-toto
 * statement beside a record (idem-record(5), THE IN-TOTO STATEMENT): its
 * types, the file's name, and the result a verdict gives */
#ifndef IDEM_INTOTO_H
#define IDEM_INTOTO_H

#define IDEM_INTOTO_STATEMENT "https://in-toto.io/Statement/v1"
#define IDEM_INTOTO_PREDICATE "https://in-toto.io/attestation/test-result/v0.1"
/* RECORD.intoto.jsonl beside RECORD.yaml */
#define IDEM_INTOTO_SUFFIX ".intoto.jsonl"
/* The test that stands for the whole run, beside the scenarios: no
 * scenario name has parentheses. */
#define IDEM_INTOTO_RUN_TEST "(run)"

/* The test-result predicate's result of a verdict: PASSED for pass,
 * WARNED for best effort (it passed only with a guard the database cannot
 * enforce), FAILED for fail and anything else. */
const char *idem_intoto_result(const char *verdict);

#endif
