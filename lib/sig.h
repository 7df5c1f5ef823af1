/* sig.h: OpenSSH ed25519 keys, SSHSIG signatures and allowed_signers
 * (OpenSSH PROTOCOL.sshsig, PROTOCOL.key, ssh-keygen(1) ALLOWED SIGNERS) */
#ifndef IDEM_SIG_H
#define IDEM_SIG_H

#include <stddef.h>
#include <time.h>

#include "util.h"

#define IDEM_SIG_PUBLIC_BYTES 32
#define IDEM_SIG_SECRET_BYTES 64

struct idem_key {
	unsigned char public_key[IDEM_SIG_PUBLIC_BYTES];
	unsigned char secret_key[IDEM_SIG_SECRET_BYTES];	/* seed and public key */
	char comment[256];
};

/* Loads an unencrypted OpenSSH ed25519 private key; refuses a file that
 * group or others may read, and an encrypted key. Wipe with idem_key_wipe. */
int idem_key_load(struct idem_key *key, const char *path, struct idem_error *err);
void idem_key_wipe(struct idem_key *key);

/* "ssh-ed25519 BASE64", as in a public key file or allowed_signers. */
char *idem_key_public_text(const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES]);

/* An armored SSHSIG signature over data with sha512, as ssh-keygen -Y sign
 * writes it: 70-column lines, ending in a newline. Caller frees. */
char *idem_sig_sign(const struct idem_key *key, const char *namespace,
		    const void *data, size_t len);

/* Parses an armored signature (70 or 76 columns, LF or CRLF, with or without
 * a final newline) for namespace; returns the signer's public key. */
struct idem_sig {
	unsigned char public_key[IDEM_SIG_PUBLIC_BYTES];
	unsigned char signature[64];
	char hash[8];			/* sha256 or sha512 */
};
int idem_sig_parse(struct idem_sig *sig, const char *armor, size_t armor_len,
		   const char *namespace, struct idem_error *err);
/* Checks the signature itself, after the key has been found trustworthy. */
int idem_sig_check(const struct idem_sig *sig, const char *namespace, const void *data,
		   size_t len, struct idem_error *err);

/* allowed_signers: which principal may sign with a key, for a namespace, at
 * a time. Returns the matching principal patterns (malloc'd) or NULL with
 * err set to the reason none matched. */
struct idem_signers;
struct idem_signers *idem_signers_load(const char *path, struct idem_error *err);
void idem_signers_free(struct idem_signers *signers);
char *idem_signers_find(const struct idem_signers *signers,
			const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES],
			const char *namespace, time_t when, struct idem_error *err);

#endif
