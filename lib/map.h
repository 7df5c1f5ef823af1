/* map.h: a hash map from strings to indexes, so that evidence is joined in
 * time linear in its size */
#ifndef IDEM_MAP_H
#define IDEM_MAP_H

#include <stddef.h>
#include <stdint.h>

#define IDEM_MAP_NONE SIZE_MAX

struct idem_map {
	struct idem_map_slot {
		char *key;		/* NULL: empty */
		size_t value;
		uint64_t hash;
	} *slots;
	size_t cap, n;
};

void idem_map_init(struct idem_map *m);
void idem_map_free(struct idem_map *m);
/* The value of key, or IDEM_MAP_NONE. */
size_t idem_map_get(const struct idem_map *m, const char *key);
/* Sets key (copied) to value; returns its value before, or IDEM_MAP_NONE. */
size_t idem_map_put(struct idem_map *m, const char *key, size_t value);

#endif
