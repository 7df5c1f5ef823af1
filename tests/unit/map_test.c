#include <stdio.h>

#include "map.h"
#include "unit.h"

int
main(void)
{
	struct idem_map m;
	char key[32];
	size_t i, wrong = 0;

	idem_map_init(&m);
	CHECK(idem_map_get(&m, "a") == IDEM_MAP_NONE, "an empty map has nothing");
	CHECK(idem_map_put(&m, "a", 1) == IDEM_MAP_NONE, "a new key has no value before");
	CHECK(idem_map_put(&m, "a", 2) == 1, "putting again gives the value before");
	CHECK(idem_map_get(&m, "a") == 2, "and keeps the new one");
	CHECK(idem_map_get(&m, "") == IDEM_MAP_NONE, "the empty key is a key like any");
	idem_map_put(&m, "", 7);
	CHECK(idem_map_get(&m, "") == 7, "the empty key has its value");
	for (i = 0; i < 100000; i++) {
		snprintf(key, sizeof(key), "job-%zu", i);
		idem_map_put(&m, key, i);
	}
	for (i = 0; i < 100000; i++) {
		snprintf(key, sizeof(key), "job-%zu", i);
		wrong += idem_map_get(&m, key) != i;
	}
	CHECK(wrong == 0, "100000 keys, each with its value, through every growth");
	CHECK(m.n == 100002, "and counted once each");
	CHECK(idem_map_get(&m, "job-100000") == IDEM_MAP_NONE, "a key never put is not there");
	idem_map_free(&m);
	CHECK(idem_map_get(&m, "a") == IDEM_MAP_NONE, "a freed map is empty");
	return unit_done("map");
}
