#include <stdlib.h>
#include <string.h>

#include "map.h"
#include "error.h"

/* FNV-1a: the keys are the run's own ids, not chosen to collide */
static uint64_t
hash_of(const char *key)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *key; key++) {
		h ^= (unsigned char)*key;
		h *= 1099511628211ULL;
	}
	return h;
}

void
idem_map_init(struct idem_map *m)
{
	m->slots = NULL;
	m->cap = m->n = 0;
}

void
idem_map_free(struct idem_map *m)
{
	size_t i;

	for (i = 0; i < m->cap; i++)
		free(m->slots[i].key);
	free(m->slots);
	idem_map_init(m);
}

/* The slot of key, or the empty slot where it goes; open addressing with
 * linear probing in a table never more than half full. */
static struct idem_map_slot *
find(const struct idem_map *m, const char *key, uint64_t h)
{
	size_t i = (size_t)h & (m->cap - 1);

	while (m->slots[i].key != NULL &&
	    (m->slots[i].hash != h || strcmp(m->slots[i].key, key) != 0))
		i = (i + 1) & (m->cap - 1);
	return &m->slots[i];
}

size_t
idem_map_get(const struct idem_map *m, const char *key)
{
	const struct idem_map_slot *s;

	if (m->n == 0)
		return IDEM_MAP_NONE;
	s = find(m, key, hash_of(key));
	return s->key ? s->value : IDEM_MAP_NONE;
}

size_t
idem_map_put(struct idem_map *m, const char *key, size_t value)
{
	uint64_t h = hash_of(key);
	struct idem_map_slot *s;
	size_t before;

	if (2 * (m->n + 1) > m->cap) {
		struct idem_map_slot *old = m->slots;
		size_t old_cap = m->cap, i;

		m->cap = m->cap ? m->cap * 2 : 64;
		m->slots = idem_ereallocarray(NULL, m->cap, sizeof(*m->slots));
		memset(m->slots, 0, m->cap * sizeof(*m->slots));
		for (i = 0; i < old_cap; i++)
			if (old[i].key != NULL)
				*find(m, old[i].key, old[i].hash) = old[i];
		free(old);
	}
	s = find(m, key, h);
	if (s->key != NULL) {
		before = s->value;
		s->value = value;
		return before;
	}
	s->key = idem_estrdup(key);
	s->hash = h;
	s->value = value;
	m->n++;
	return IDEM_MAP_NONE;
}
