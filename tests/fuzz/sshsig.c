/* Fuzzes the SSHSIG armor and blob parser, then the signature check. */
#include "fuzz.h"
#include "sig.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char message[] = "record: fuzz\n";
	struct idem_error err;
	struct idem_sig sig;

	if (idem_sig_parse(&sig, (const char *)data, size, "idem-record", &err) == 0)
		idem_sig_check(&sig, "idem-record", message, sizeof(message) - 1, &err);
	return 0;
}
