/* sign.c: a signature made and checked, and the interrupts held, for
 * both modes of mkrecord */
#include <signal.h>
#include <stddef.h>

#include "sig.h"
#include "sign.h"
#include "error.h"

char *
idem_sign(const struct idem_key *key, const char *key_path, const char *namespace,
	  const char *text, size_t len)
{
	char *sig;

	if ((sig = idem_sig_sign(key, namespace, text, len)) == NULL)
		idem_die(IDEM_EXIT_USAGE, "%s: the signature made with this key does not verify: the "
		    "key is damaged", key_path);
	return sig;
}

void
idem_sign_hold_interrupts(void)
{
	static const int interrupts[] = { SIGINT, SIGTERM, SIGHUP };
	sigset_t block;
	size_t i;

	sigemptyset(&block);
	for (i = 0; i < sizeof(interrupts) / sizeof(interrupts[0]); i++)
		sigaddset(&block, interrupts[i]);
	sigprocmask(SIG_BLOCK, &block, NULL);
}
