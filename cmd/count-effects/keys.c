/* keys.c: the business keys of count-effects(1): seeded, found, and looked
 * up in one index, a counter each */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "count-effects.h"
#include "seed.h"

/* bytes of a block of key text */
#define KEY_BLOCK 1048576

/* For qsort and bsearch: key_counts in key order. */
int
by_key(const void *a, const void *b)
{
	return strcmp(((const struct key_count *)a)->key, ((const struct key_count *)b)->key);
}

static int
same_key(const void *key, size_t entry)
{
	return strcmp(c.keys[entry].key, key) == 0;
}

static uint64_t
hash_of_key(const void *ctx, size_t entry)
{
	struct key_count *k = &c.keys[entry];

	(void)ctx;
	if (k->hash == 0)
		k->hash = idem_map_hash(k->key);
	return k->hash;
}

/* The slot of a seeded key, whose idem_map_hash is h: its own, or the
 * empty one where it goes. */
static struct idem_index_slot *
key_slot(const char *key, uint64_t h)
{
	return idem_index_slot(&c.key_index, h, same_key, key);
}

/* Places every key in the index, with room for cap keys and more. */
static void
index_keys(size_t cap)
{
	size_t i;

	idem_index_free(&c.key_index);
	idem_index_reserve(&c.key_index, cap, hash_of_key, NULL);
	for (i = 0; i < c.nkeys; i++) {
		uint64_t h = hash_of_key(NULL, i);

		idem_index_fill(&c.key_index, key_slot(c.keys[i].key, h), h, i);
	}
}

/* A copy of a seeded key, packed with the others: one allocation a block,
 * not one a key. */
static char *
keep_key(const char *key)
{
	size_t n = strlen(key) + 1;
	struct key_block *b = c.key_text;
	char *out;

	if (b == NULL || b->used + n > KEY_BLOCK) {
		b = idem_emalloc(sizeof(*b) + (n > KEY_BLOCK ? n : KEY_BLOCK));
		b->next = c.key_text;
		b->used = 0;
		c.key_text = b;
	}
	out = memcpy(b->text + b->used, key, n);
	b->used += n;
	return out;
}

static int
hex_digit(char x)
{
	return x >= 'a' ? x - 'a' + 10 : x - '0';
}

/* A job's business key, merged with the jobs seen before: expected once
 * per key, or once per job when the key scope is the job; a key seeded
 * with two payloads is a conflict. One entry per key, not per job. */
void
seed_key(const char *key, const char *payload_sha256)
{
	unsigned char hash[32];
	uint64_t h = 0;
	struct key_count *k;
	struct idem_index_slot *slot;
	size_t i;

	/* the reader checked 64 lowercase hex digits */
	for (i = 0; i < sizeof(hash); i++)
		hash[i] = (unsigned char)(hex_digit(payload_sha256[2 * i]) << 4 |
		    hex_digit(payload_sha256[2 * i + 1]));
	/* While the keys come in byte order, as seed-gen writes them, each is
	 * new and they are sorted already: no slot is needed until the first
	 * that does not come after the one before. */
	if (!c.seeded_unordered && c.nkeys > 0 && strcmp(c.keys[c.nkeys - 1].key, key) >= 0) {
		c.seeded_unordered = 1;
		index_keys(2 * c.nkeys + 1);
	}
	slot = NULL;
	if (c.seeded_unordered) {
		if (2 * (c.nkeys + 1) > c.key_index.cap)
			index_keys(2 * c.nkeys + 1);
		h = idem_map_hash(key);
		slot = key_slot(key, h);
	}
	if (slot != NULL && slot->entry != 0) {
		k = &c.keys[slot->entry - 1];
		if (strcmp(c.key_scope, "job") == 0)
			k->expected++;
		if (memcmp(k->first_hash, hash, sizeof(hash)) != 0)
			k->conflict = 1;
		return;
	}
	if (c.nkeys == c.keys_cap) {
		c.keys_cap = c.keys_cap ? c.keys_cap * 2 : 1024;
		c.keys = idem_ereallocarray(c.keys, c.keys_cap, sizeof(*c.keys));
	}
	k = &c.keys[c.nkeys++];
	memset(k, 0, sizeof(*k));
	k->key = keep_key(key);
	k->hash = h;
	memcpy(k->first_hash, hash, sizeof(hash));
	k->expected = 1;
	k->seeded = 1;
	if (slot != NULL)
		idem_index_fill(&c.key_index, slot, h, c.nkeys - 1);
}

/* The entry of a seeded key, or NULL. */
struct key_count *
find_key(const char *key)
{
	struct idem_index_slot *slot;

	if (!c.indexed) {
		index_keys(c.nkeys);
		c.indexed = 1;
	}
	slot = key_slot(key, idem_map_hash(key));
	return slot->entry != 0 ? &c.keys[slot->entry - 1] : NULL;
}

/* The entry of a call's business key, made with nothing expected. */
struct key_count *
call_key(const char *key)
{
	size_t i = idem_map_get(&c.call_index, key);

	if (i != IDEM_MAP_NONE)
		return &c.calls[i];
	if (c.ncalls == c.calls_cap) {
		c.calls_cap = c.calls_cap ? 2 * c.calls_cap : 64;
		c.calls = idem_ereallocarray(c.calls, c.calls_cap, sizeof(*c.calls));
	}
	memset(&c.calls[c.ncalls], 0, sizeof(*c.calls));
	c.calls[c.ncalls].key = idem_estrdup(key);
	idem_map_put(&c.call_index, key, c.ncalls);
	return &c.calls[c.ncalls++];
}

/* Seeded keys, one entry each (seed_key merged them), in key order. */
void
sort_seeded(void)
{
	if (c.nkeys > 1 && c.seeded_unordered)
		qsort(c.keys, c.nkeys, sizeof(*c.keys), by_key);
	c.indexed = 0;
}
