/* sign.h: what both modes of mkrecord do alike when they sign: make a
 * signature that verifies, and hold the interrupts from then until the
 * files are written and committed */
#ifndef IDEM_SIGN_H
#define IDEM_SIGN_H

#include <stddef.h>

#include "sig.h"

/* The armored SSHSIG of text in namespace, made with key (read from
 * key_path, named when the key is damaged); exits when it does not
 * verify, so that such a signature is never written. Caller frees. */
char *idem_sign(const struct idem_key *key, const char *key_path, const char *namespace,
		const char *text, size_t len);

/* From here to the end, all or nothing: an interrupt waits. */
void idem_sign_hold_interrupts(void);

#endif
