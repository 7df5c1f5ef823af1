/* calls.c: the Idempotency-Keys that the POST calls of each business key
 * sent, in a fixed state per key as the stream goes by, and the calls of
 * the keys that sent more than one, from the held stream read again */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "count-effects.h"
#include "tsv.h"

/* the entries of c.rekeyed made so far */
static size_t nfilled;

_Static_assert(crypto_shorthash_BYTES == 8, "a 64-bit hash");

/* A fixed key: a stream gives the same verdict on every run. */
static const unsigned char idempotency_key_key[crypto_shorthash_KEYBYTES] = {
	'i', 'd', 'e', 'm', ' ', 'i', 'd', 'e', 'm', 'p', 'o', 't', 'e', 'n', 'c', 'y'
};

/* A key sent in the Idempotency-Key header, by a keyed 64-bit hash
 * (SipHash-2-4, a pure function: no sodium_init()), never all 0; all 0
 * for a call without the header. */
static void
idempotency_hash(const char *key, unsigned char out[crypto_shorthash_BYTES])
{
	static const unsigned char none[crypto_shorthash_BYTES];

	memset(out, 0, crypto_shorthash_BYTES);
	if (key == NULL)
		return;
	crypto_shorthash(out, (const unsigned char *)key, strlen(key), idempotency_key_key);
	if (memcmp(out, none, crypto_shorthash_BYTES) == 0)
		out[0] = 1;
}

static int
is_post(const struct idem_tsv_reader *r)
{
	return strcmp(r->fields[CALL_METHOD], "POST") == 0 && r->fields[CALL_BUSINESS_KEY] != NULL;
}

/* A call row, after the external row: the Idempotency-Key of a POST, as
 * the first of its business key or another, and whether it was killed. A
 * key no job has, called with no effect, gets an entry with nothing
 * expected and nothing observed, which no count row shows. */
void
read_call(const struct idem_tsv_reader *r)
{
	const char *business_key = r->fields[CALL_BUSINESS_KEY];
	int killed = strcmp(r->fields[CALL_ANSWER], "killed") == 0;
	struct key_count *k;
	unsigned char h[crypto_shorthash_BYTES];

	if (business_key == NULL || (!killed && !is_post(r)))
		return;
	k = call_key(business_key);
	k->killed |= killed;
	if (!is_post(r))
		return;
	idempotency_hash(r->fields[CALL_IDEMPOTENCY_KEY], h);
	if (k->idempotency_keys == 0) {
		memcpy(k->idempotency_hash, h, sizeof(k->idempotency_hash));
		k->idempotency_keys = 1;
		c.post_keys++;
	} else if (k->idempotency_keys == 1 &&
	    memcmp(k->idempotency_hash, h, sizeof(k->idempotency_hash)) != 0) {
		k->idempotency_keys = 2;
		c.nrekeyed++;
	}
}

/* A call row of the held stream read again, the ordinal-th (from 1): the
 * POST calls of a rekeyed business key, by their id, or by their ordinal
 * in a stream from before ids; the keys they sent, each once. */
void
reread_call(const struct idem_tsv_reader *r, long long ordinal)
{
	const char *sent = r->fields[CALL_IDEMPOTENCY_KEY];
	struct rekeyed_key *rk;
	struct key_count *k;
	json_t *key, *known;
	size_t i;
	int seen = 0;

	if (!is_post(r) || (i = idem_map_get(&c.call_index, r->fields[CALL_BUSINESS_KEY])) ==
	    IDEM_MAP_NONE || c.calls[i].idempotency_keys != 2)
		return;
	k = &c.calls[i];
	if (k->rekeyed == 0) {
		/* nrekeyed of them, each met here first once */
		if (c.rekeyed == NULL)
			c.rekeyed = idem_ereallocarray(NULL, c.nrekeyed, sizeof(*c.rekeyed));
		rk = &c.rekeyed[nfilled];
		memset(rk, 0, sizeof(*rk));
		rk->keys = json_array();
		k->rekeyed = (uint32_t)++nfilled;
	}
	rk = &c.rekeyed[k->rekeyed - 1];
	if (rk->nids == rk->ids_cap) {
		rk->ids_cap = rk->ids_cap ? 2 * rk->ids_cap : 4;
		rk->ids = idem_ereallocarray(rk->ids, rk->ids_cap, sizeof(*rk->ids));
	}
	rk->ids[rk->nids++] = idem_tsv_number(r, CALL_ID, ordinal);
	if (strcmp(r->fields[CALL_EFFECT], "yes") == 0)
		rk->effects++;
	key = sent != NULL ? json_string(sent) : json_null();
	if (key == NULL)
		idem_die(IDEM_EXIT_ENV, "%s:%ld: keeping an Idempotency-Key: out of memory",
		    r->name, r->line_no);
	json_array_foreach(rk->keys, i, known)
		if (json_equal(known, key)) {
			seen = 1;
			break;
		}
	if (seen)
		json_decref(key);
	else
		json_array_append_new(rk->keys, key);
}

static char *
compact(const json_t *array)
{
	char *out = json_dumps(array, JSON_COMPACT);

	if (out == NULL)
		idem_die(IDEM_EXIT_ENV, "json_dumps: out of memory");
	return out;
}

/* One rekeyed row per business key rekeyed, in key order, as the calls
 * are sorted. */
void
write_rekeyed(void)
{
	char effects[32];
	size_t i, j;

	for (i = 0; i < c.ncalls; i++) {
		const struct key_count *k = &c.calls[i];
		const struct rekeyed_key *rk;
		json_t *ids;
		const char *row[4];
		char *keys, *calls;

		if (k->idempotency_keys != 2 || k->rekeyed == 0)
			continue;
		rk = &c.rekeyed[k->rekeyed - 1];
		ids = json_array();
		for (j = 0; j < rk->nids; j++)
			json_array_append_new(ids, json_integer(rk->ids[j]));
		keys = compact(rk->keys);
		calls = compact(ids);
		snprintf(effects, sizeof(effects), "%lld", rk->effects);
		row[0] = k->key;
		row[1] = keys;
		row[2] = calls;
		row[3] = effects;
		write_row("rekeyed", row, 4);
		free(keys);
		free(calls);
		json_decref(ids);
	}
}

/* The distinct Idempotency-Keys over the business keys with a POST: one
 * each, and for those rekeyed, as many as they sent. */
long long
distinct_keys(void)
{
	long long n = c.post_keys - (long long)c.nrekeyed;
	size_t i;

	for (i = 0; i < nfilled; i++)
		n += (long long)json_array_size(c.rekeyed[i].keys);
	return n;
}

void
free_calls(void)
{
	size_t i;

	for (i = 0; i < nfilled; i++) {
		json_decref(c.rekeyed[i].keys);
		free(c.rekeyed[i].ids);
	}
	free(c.rekeyed);
}
