/* Fuzzes the vendor double's reading of a request body: a key it finds
 * is UTF-8, and for two fields a JSON array of two values. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "kill-at/vendor.h"
#include "text.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *one[] = { "invoice_id" }, *two[] = { "invoice_id", "line_no" }, *key;
	json_t *array;

	if ((key = idem_vendor_body_key((const char *)data, size, one, 1)) != NULL) {
		if (!idem_utf8_valid(key, strlen(key)))
			fuzz_fail("a one-field key is not UTF-8");
		free(key);
	}
	if ((key = idem_vendor_body_key((const char *)data, size, two, 2)) != NULL) {
		array = json_loads(key, 0, NULL);
		if (!json_is_array(array) || json_array_size(array) != 2)
			fuzz_fail("a two-field key is not a JSON array of two values");
		json_decref(array);
		free(key);
	}
	return 0;
}
