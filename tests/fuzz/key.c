/* Fuzzes the OpenSSH private key reader; a key it accepts must sign. */
#include <stdlib.h>

#include "fuzz.h"
#include "sig.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idem_error err;
	struct idem_key key;
	char *armor;

	if (idem_key_load(&key, fuzz_scratch_file(data, size), &err) < 0)
		return 0;
	if ((armor = idem_sig_sign(&key, "idem-record", data, size)) == NULL)
		fuzz_fail("an accepted key does not sign");
	free(armor);
	idem_key_wipe(&key);
	return 0;
}
