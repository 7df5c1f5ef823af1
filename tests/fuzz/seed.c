/* Fuzzes the seed loader, its readiness, and the JSON it hands to the
 * templates. */
#include <stdlib.h>

#include "fuzz.h"
#include "seed.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idem_seed seed;
	struct idem_error err;
	json_t *json;
	char missing[256];

	if (idem_seed_load(&seed, fuzz_scratch_file(data, size), &err) == 0) {
		if (!idem_seed_ready(&seed, missing, sizeof(missing)) && *missing == '\0')
			fuzz_fail("a seed not ready says nothing is missing");
		if ((json = idem_seed_to_json(&seed)) == NULL)
			fuzz_fail("a loaded seed has no JSON form");
		json_decref(json);
	}
	idem_seed_free(&seed);
	return 0;
}
