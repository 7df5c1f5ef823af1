/* Fuzzes the allowed_signers reader and the lookup of a key in it. */
#include <stdlib.h>

#include "fuzz.h"
#include "sig.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* the public half of tests/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519 */
	static const unsigned char key[IDEM_SIG_PUBLIC_BYTES] = {
		0x25, 0x79, 0xc8, 0x83, 0x81, 0xf5, 0x75, 0xc6, 0x6c, 0xbf, 0x91, 0x01,
		0x3d, 0xf9, 0xad, 0xf8, 0xf7, 0xaf, 0x9f, 0x46, 0x50, 0xd2, 0x5a, 0x5a,
		0xbb, 0xfa, 0x9e, 0x3b, 0x14, 0x0a, 0xd6, 0x64
	};
	struct idem_signers *signers;
	struct idem_error err;

	if ((signers = idem_signers_load(fuzz_scratch_file(data, size), &err)) == NULL)
		return 0;
	free(idem_signers_find(signers, key, "idem-record", 1764000000, &err));
	free(idem_signers_find(signers, key, "git", 0, &err));
	idem_signers_free(signers);
	return 0;
}
