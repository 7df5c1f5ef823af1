/* seed_impl.h: what the two files of the seed module share, lib/seed.c
 * (reading a seed file) and lib/seed_jobs.c (its jobs); no program
 * includes it */
#ifndef IDEM_SEED_IMPL_H
#define IDEM_SEED_IMPL_H

#include <jansson.h>

#include "seed.h"

/* What the loader indexes, for its checks and for generated jobs. */
struct idem_seed_index {
	json_t *declared;	/* declared job id -> the index of its first declaration */
	json_t *named;		/* generated job id named by a scenario -> the scenario */
	json_t *fields;		/* payload_schema field name -> its index */
	int width;		/* digits of a generated job's number */
};

/* A job's canonical payload, its hash and business key, from its payload. */
void seed_finish_job(const struct idem_seed *s, struct idem_seed_job *job);
/* The first scenario with every: K, in the order of the file, that selects
 * a job no scenario names; or -1. */
long seed_selected_by_every(const struct idem_seed *s, const char *id);
/* The number in a generated job's id ("gen-000042"), or in the value of one
 * of its string fields ("invoice_id-000042"): the seed's width of digits
 * after the prefix and a hyphen, from 1 to generate.count; else 0. */
long long seed_generated_number(const struct idem_seed *s, const char *text, const char *prefix);

#endif
