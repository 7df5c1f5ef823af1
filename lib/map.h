/* map.h: the project's one hash table. An index finds entries that the
 * caller keeps in an array of its own, by a 64-bit hash, in 8 bytes a
 * slot (open addressing, linear probing, at most half full): a million
 * keys cost a counter each and a few slots, not an allocation each. On it,
 * a map from strings to indexes, so that evidence is joined in time
 * linear in its size. */
#ifndef IDEM_MAP_H
#define IDEM_MAP_H

#include <stddef.h>
#include <stdint.h>

#define IDEM_MAP_NONE SIZE_MAX

/* FNV-1a, then MurmurHash3's final mix: keys that differ only in their
 * last characters spread over the low bits too. For the run's own ids;
 * input an attacker chooses wants a keyed hash (crypto_shorthash). */
uint64_t idem_map_hash(const char *s);

struct idem_index {
	struct idem_index_slot {
		uint32_t entry;		/* + 1 into the caller's array; 0 empty */
		uint32_t tag;		/* the high half of the entry's hash */
	} *slots;
	size_t cap, n;
};

/* Whether entry number entry is the one looked for (ctx says which). */
typedef int idem_index_same(const void *ctx, size_t entry);
/* The hash of entry number entry, to place it again as the index grows. */
typedef uint64_t idem_index_hash(const void *ctx, size_t entry);

/* The slot of the entry of hash h that same says is the one, or the empty
 * slot where it would go; NULL while the index has no slots. Inline, so
 * that same is too. */
static inline struct idem_index_slot *
idem_index_slot(const struct idem_index *ix, uint64_t h, idem_index_same *same, const void *ctx)
{
	uint32_t tag = (uint32_t)(h >> 32);
	size_t mask = ix->cap - 1, i = (size_t)h & mask;

	if (ix->cap == 0)
		return NULL;
	while (ix->slots[i].entry != 0 &&
	    (ix->slots[i].tag != tag || !same(ctx, ix->slots[i].entry - 1)))
		i = (i + 1) & mask;
	return &ix->slots[i];
}

/* Puts entry, of hash h, in the empty slot that idem_index_slot gave. */
static inline void
idem_index_fill(struct idem_index *ix, struct idem_index_slot *slot, uint64_t h, size_t entry)
{
	slot->entry = (uint32_t)(entry + 1);
	slot->tag = (uint32_t)(h >> 32);
	ix->n++;
}

/* Asks the cache for the slot where hash h is looked for first: only a
 * hint, for a look-up made a little later. */
static inline void
idem_index_prefetch(const struct idem_index *ix, uint64_t h)
{
	if (ix->cap > 0)
		__builtin_prefetch(&ix->slots[(size_t)h & (ix->cap - 1)]);
}

/* Makes room for n entries in all, placing those already in the index
 * again by hash_of; slots given before are void after it. Exits as the
 * idem_e* functions do past 2^31 entries. */
void idem_index_reserve(struct idem_index *ix, size_t n, idem_index_hash *hash_of,
			const void *ctx);
void idem_index_free(struct idem_index *ix);

struct idem_map {
	struct idem_map_entry {
		char *key;
		size_t value;
		uint64_t hash;
	} *entries;
	size_t n, cap;
	struct idem_index index;
};

void idem_map_init(struct idem_map *m);
void idem_map_free(struct idem_map *m);
/* The value of key, or IDEM_MAP_NONE. */
size_t idem_map_get(const struct idem_map *m, const char *key);
/* Sets key (copied) to value; returns its value before, or IDEM_MAP_NONE. */
size_t idem_map_put(struct idem_map *m, const char *key, size_t value);

#endif
