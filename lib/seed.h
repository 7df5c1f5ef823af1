/* seed.h: seed files (man/idem-seed.5) */
#ifndef IDEM_SEED_H
#define IDEM_SEED_H

#include <jansson.h>

#include "util.h"
#include "yamljson.h"

enum idem_payload_type {
	IDEM_TYPE_STRING, IDEM_TYPE_INTEGER, IDEM_TYPE_BOOLEAN,
	IDEM_TYPE_OBJECT, IDEM_TYPE_ARRAY
};

struct idem_seed_field {
	char *name;
	enum idem_payload_type type;
};

struct idem_seed_job {
	char *id;
	json_t *payload;
	char *payload_json;	/* canonical form, see idem-seed(5) */
	char payload_sha256[65];
	char *business_key;
	long scenario;		/* index into scenarios, or -1 */
	long line, column;	/* where it was declared; 0 when generated */
};

struct idem_seed_scenario {
	char *name;
	const char *fault;	/* duplicate-publish, kill, race, same-key */
	char *step;		/* kill or race step, or NULL */
	long long attempt;	/* kill attempt, or 0 */
	long long duplicates;	/* extra copies published */
	long long within_ms;
	int conflicting_payloads;
};

struct idem_seed {
	char *path;
	char sha256[65];
	char *rehearsal, *job_type, *queue, *database, *sandbox_account;
	char *worker_image, *worker_version, *worker_command;
	long long visibility_timeout_ms, max_attempts;
	char *effect_name, *effect_table, *key_scope, *duplicate_acceptor;
	char **key;
	size_t nkey;
	char *reconciliation_owner;
	struct idem_seed_field *schema;
	size_t nschema;
	char **cannot_reproduce;
	size_t ncannot_reproduce;
	struct idem_seed_job *jobs;
	size_t njobs;
	struct idem_seed_scenario *scenarios;
	size_t nscenarios;
	long long generate_count;
	long long expect_effects, expect_duplicates, expect_missing, expect_pending;
};

/* The limits of a seed file: see LIMITS in idem-seed(5). */
extern const struct idem_yaml_limits idem_seed_limits;

/* Loads and validates a seed file; "-" is standard input. On failure err
 * names file:line:column and the field. Free the seed either way. */
int idem_seed_load(struct idem_seed *seed, const char *path, struct idem_error *err);
void idem_seed_free(struct idem_seed *seed);

const char *idem_payload_type_name(enum idem_payload_type type);
/* Canonical JSON of a value (sorted keys, compact, UTF-8); caller frees. */
char *idem_json_canonical(const json_t *value);
/* The seed as a JSON object, for rendering templates; caller decrefs. */
json_t *idem_seed_to_json(const struct idem_seed *seed);

#endif
