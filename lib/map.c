#include <stdlib.h>
#include <string.h>

#include "map.h"
#include "error.h"

uint64_t
idem_map_hash(const char *s)
{
	uint64_t h = UINT64_C(14695981039346656037);

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
	h ^= h >> 33;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 33;
	h *= UINT64_C(0xc4ceb9fe1a85ec53);
	return h ^ (h >> 33);
}

void
idem_index_reserve(struct idem_index *ix, size_t n, idem_index_hash *hash_of, const void *ctx)
{
	struct idem_index_slot *old = ix->slots;
	size_t old_cap = ix->cap, cap = 64, i;

	if (n > UINT32_MAX / 2)
		idem_die(IDEM_EXIT_ENV, "more than %u entries in a hash table",
		    (unsigned)(UINT32_MAX / 2));
	if (2 * n <= ix->cap)
		return;
	while (cap < 2 * n)
		cap *= 2;
	ix->slots = idem_ereallocarray(NULL, cap, sizeof(*ix->slots));
	memset(ix->slots, 0, cap * sizeof(*ix->slots));
	ix->cap = cap;
	for (i = 0; i < old_cap; i++) {
		uint64_t h;
		size_t j;

		if (old[i].entry == 0)
			continue;
		h = hash_of(ctx, old[i].entry - 1);
		for (j = (size_t)h & (cap - 1); ix->slots[j].entry != 0; j = (j + 1) & (cap - 1))
			;
		ix->slots[j] = old[i];
	}
	free(old);
}

void
idem_index_free(struct idem_index *ix)
{
	free(ix->slots);
	ix->slots = NULL;
	ix->cap = ix->n = 0;
}

struct lookup {
	const struct idem_map *m;
	const char *key;
};

static int
same_key(const void *ctx, size_t entry)
{
	const struct lookup *l = ctx;

	return strcmp(l->m->entries[entry].key, l->key) == 0;
}

static uint64_t
entry_hash(const void *ctx, size_t entry)
{
	return ((const struct idem_map *)ctx)->entries[entry].hash;
}

void
idem_map_init(struct idem_map *m)
{
	memset(m, 0, sizeof(*m));
}

void
idem_map_free(struct idem_map *m)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		free(m->entries[i].key);
	free(m->entries);
	idem_index_free(&m->index);
	idem_map_init(m);
}

size_t
idem_map_get(const struct idem_map *m, const char *key)
{
	struct lookup l = { m, key };
	const struct idem_index_slot *s = idem_index_slot(&m->index, idem_map_hash(key), same_key, &l);

	return s != NULL && s->entry != 0 ? m->entries[s->entry - 1].value : IDEM_MAP_NONE;
}

size_t
idem_map_put(struct idem_map *m, const char *key, size_t value)
{
	struct lookup l = { m, key };
	uint64_t h = idem_map_hash(key);
	struct idem_index_slot *s;
	size_t before;

	idem_index_reserve(&m->index, m->n + 1, entry_hash, m);
	s = idem_index_slot(&m->index, h, same_key, &l);
	if (s->entry != 0) {
		before = m->entries[s->entry - 1].value;
		m->entries[s->entry - 1].value = value;
		return before;
	}
	if (m->n == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 64;
		m->entries = idem_ereallocarray(m->entries, m->cap, sizeof(*m->entries));
	}
	m->entries[m->n] = (struct idem_map_entry){ idem_estrdup(key), value, h };
	idem_index_fill(&m->index, s, h, m->n++);
	return IDEM_MAP_NONE;
}
