/* Fuzzes the record reader (YAML to JSON); every document it accepts must
 * read back as the same value after being written as YAML. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "yamljson.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idem_error err;
	json_t *value, *again;
	char *yaml;

	if ((value = idem_yaml_to_json((const char *)data, size, "fuzz", &err)) == NULL)
		return 0;
	if ((yaml = idem_yaml_from_json(value, &err)) == NULL)
		fuzz_fail("an accepted record cannot be written");
	if ((again = idem_yaml_to_json(yaml, strlen(yaml), "again", &err)) == NULL)
		fuzz_fail("a written record is refused");
	if (!json_equal(value, again))
		fuzz_fail("a written record reads back as another value");
	json_decref(again);
	free(yaml);
	json_decref(value);
	return 0;
}
