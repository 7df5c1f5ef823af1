/* seed.h: seed files (man/idem-seed.5) */
#ifndef IDEM_SEED_H
#define IDEM_SEED_H

#include <jansson.h>

#include "error.h"
#include "yamljson.h"

enum idem_payload_type {
	IDEM_TYPE_STRING, IDEM_TYPE_INTEGER, IDEM_TYPE_BOOLEAN,
	IDEM_TYPE_OBJECT, IDEM_TYPE_ARRAY
};

struct idem_seed_field {
	char *name;
	enum idem_payload_type type;
	int in_key;		/* named by effect.key */
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
	const char *fault;	/* duplicate-publish, kill, race, same-key, vendor-error,
				 * vendor-timeout, stall, vendor-lost-reply,
				 * vendor-late-reply, vendor-forget-keys */
	char *step;		/* kill (also of vendor-forget-keys), race or stall
				 * step, or NULL */
	char *until;		/* stall: the redelivered attempt's step that releases
				 * the stalled one, or NULL for its ack */
	long long attempt;	/* kill or stall attempt, or 0 */
	long long duplicates;	/* extra copies published */
	long long within_ms;
	long long vendor_ms;	/* the late reply's delay, the forgotten keys' window */
	long long every;	/* selects one job in every, or 0 */
	int conflicting_payloads;
};

/* The call to an external system (external:), served in a rehearsal by
 * the vendor double; name is NULL when the seed declares none. */
struct idem_seed_external {
	char *name;
	char **key;		/* fields of a call's JSON body, in key order */
	size_t nkey;
	int honours_idempotency_key;
	char *pending_table, *pending_owner;	/* or NULL */
	char **pending_key;	/* the columns of the business key, or none: key's names */
	size_t npending_key;
	char *pending_state;	/* or NULL: every row is a call not seen done */
	char **pending_settled;	/* the state's values for a call seen done */
	size_t npending_settled;
};

struct idem_seed_index;

struct idem_seed {
	char *path;
	char sha256[65];
	char *rehearsal, *job_type, *queue, *database, *sandbox_account;
	const char *queue_kind;	/* idem, pg-boss, graphile-worker, or an adapter file's */
	/* queue.adapter: the adapter file as the seed names it (from the
	 * seed's directory), the same from the current directory, and the
	 * SHA-256 of its bytes as read; NULL when the kind is built in */
	char *queue_adapter, *queue_adapter_path;
	char queue_adapter_sha256[65];
	char *own_queue_kind;	/* what queue_kind points to when it is not built in */
	char *worker_image, *worker_version, *worker_command;
	char **worker_sources;	/* paths from the top of the repository */
	size_t nworker_sources;
	long long visibility_timeout_ms, max_attempts;
	char *effect_name, *effect_table, *key_scope, *duplicate_acceptor;
	char **key;
	size_t nkey;
	char *reconciliation_owner;
	struct idem_seed_field *schema;
	size_t nschema;
	char **cannot_reproduce;
	size_t ncannot_reproduce;
	/* own_steps: the worker's own step names that are near a standard one */
	char **own_steps;
	size_t nown_steps;
	struct idem_seed_job *declared;	/* the jobs the file lists */
	size_t ndeclared;
	struct idem_seed_scenario *scenarios;
	size_t nscenarios;
	long long generate_count;	/* jobs made on demand after them */
	struct idem_seed_index *index;	/* lookups of the loader's own */
	long long expect_effects, expect_duplicates, expect_missing, expect_pending;
	struct idem_seed_external external;
	long long expect_external;	/* -1 when no external effect is declared */
	char *expect_verdict;		/* pass or fail when the seed says, else NULL */
	char *guard_table;		/* guard: where the guard lives, or NULL */
	char **guard_key;		/* its columns */
	size_t nguard_key;
	char *guard_best_effort;	/* guard: { enforceable: false, why }: why, or NULL */
};

/* The limits of a seed file: see LIMITS in idem-seed(5). */
extern const struct idem_yaml_limits idem_seed_limits;

/* Loads and validates a seed file; "-" is standard input. On failure err
 * names file:line:column and the field. Free the seed either way. */
int idem_seed_load(struct idem_seed *seed, const char *path, struct idem_error *err);
void idem_seed_free(struct idem_seed *seed);
/* Whether a loaded seed is ready to rehearse (seed-gen(1), READINESS):
 * 1, or 0 with what it lacks written into missing, as "no effect.name,
 * no fault (...)". */
int idem_seed_ready(const struct idem_seed *seed, char *missing, size_t size);

/* The number of jobs: the declared ones, then the generated ones. */
long long idem_seed_njobs(const struct idem_seed *seed);
/* Job i, 0 <= i < idem_seed_njobs(seed): a declared job where it is, or a
 * generated one made into buf (which the next call reuses), so that a run
 * of any length costs one job's memory. Clear buf when done. */
const struct idem_seed_job *idem_seed_job(const struct idem_seed *seed, long long i,
					  struct idem_seed_job *buf);
void idem_seed_job_clear(struct idem_seed_job *job);

const char *idem_payload_type_name(enum idem_payload_type type);
/* A business key as idem-seed(5) writes it, from the fields of an object in
 * key order: one field as its plain value, several as a canonical JSON
 * array; NULL when a field is missing or is not a string, integer or
 * boolean. Caller frees. */
char *idem_business_key(const json_t *object, char *const *fields, size_t nfields);
/* A job as a JSON object: id, business_key, payload (canonical JSON),
 * payload_sha256 and scenario (a name or null); caller decrefs. */
json_t *idem_seed_job_to_json(const struct idem_seed *seed, const struct idem_seed_job *job);
/* The seed as a JSON object, for rendering templates, with its declared
 * jobs under "jobs"; caller decrefs. */
json_t *idem_seed_to_json(const struct idem_seed *seed);

#endif
