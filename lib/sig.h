/* sig.h: OpenSSH ed25519 keys, SSHSIG signatures and allowed_signers
 * (OpenSSH PROTOCOL.sshsig, PROTOCOL.key, ssh-keygen(1) ALLOWED SIGNERS) */
#ifndef IDEM_SIG_H
#define IDEM_SIG_H

#include <stddef.h>
#include <time.h>

#include "error.h"

#define IDEM_SIG_PUBLIC_BYTES 32
#define IDEM_SIG_SECRET_BYTES 64

/* The most bytes read of an armored signature, a private key file and an
 * allowed_signers file: far above any real one, so a hostile file costs
 * little before it is refused. */
#define IDEM_SIG_ARMOR_MAX (64 * 1024)
#define IDEM_KEY_FILE_MAX (64 * 1024)
#define IDEM_SIGNERS_FILE_MAX (16 * 1024 * 1024)

struct idem_key {
	unsigned char public_key[IDEM_SIG_PUBLIC_BYTES];
	unsigned char secret_key[IDEM_SIG_SECRET_BYTES];	/* seed and public key */
};

/* Loads an unencrypted OpenSSH ed25519 private key; refuses what is not a
 * regular file, a file that group or others may read, an encrypted key,
 * and a damaged one: the public key of the file, of its private section
 * and of its secret key must be the one its seed derives. Wipe with
 * idem_key_wipe. */
int idem_key_load(struct idem_key *key, const char *path, struct idem_error *err);
void idem_key_wipe(struct idem_key *key);

/* "ssh-ed25519 BASE64", as in a public key file or allowed_signers. */
char *idem_key_public_text(const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES]);

/* An armored SSHSIG signature over data with sha512, as ssh-keygen -Y sign
 * writes it: 70-column lines, ending in a newline. Caller frees. Read back
 * and verified before it is returned: NULL when it does not verify under
 * the key's public key (a key damaged in memory). */
char *idem_sig_sign(const struct idem_key *key, const char *namespace,
		    const void *data, size_t len);

/* Parses an armored signature (70 or 76 columns, LF or CRLF after the begin
 * line, which ends in LF, with or without a final newline) for namespace;
 * returns the signer's public key. */
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

/* allowed_signers, read as ssh-keygen -Y verify of OpenSSH 9.2 reads it.
 * Loading fails only when the file cannot be read: a line ssh-keygen would
 * refuse is skipped, and idem_signers_skipped(signers, i) says why
 * ("file:line: why"), NULL past the last. */
struct idem_signers;
struct idem_signers *idem_signers_load(const char *path, struct idem_error *err);
/* The same from text in memory (a file as a commit holds it), named name
 * in what is skipped: len bytes and a byte past them, as
 * idem_read_file_max and idem_git_read_at give it; its newlines are
 * overwritten. */
struct idem_signers *idem_signers_parse(const char *name, char *text, size_t len,
					struct idem_error *err);
void idem_signers_free(struct idem_signers *signers);
const char *idem_signers_skipped(const struct idem_signers *signers, size_t i);

/* Who may sign with a key, for a namespace, at a time: the principals of
 * the first line that allows it, as written (malloc'd), or NULL with err
 * set to the reason none did. idem_signers_find_for takes only the lines
 * whose principals match principal, as ssh-keygen -Y verify -I does;
 * idem_signers_find takes any line that names a principal its own list
 * allows. cert-authority lines never allow a plain key. */
char *idem_signers_find(const struct idem_signers *signers,
			const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES],
			const char *namespace, time_t when, struct idem_error *err);
char *idem_signers_find_for(const struct idem_signers *signers,
			    const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES],
			    const char *principal, const char *namespace, time_t when,
			    struct idem_error *err);

/* An OpenSSH pattern list against a string: 1 when a pattern matches, -1
 * when a negated one (!pattern) does, whatever else matches, 0 otherwise.
 * Patterns are comma-separated, with * and ? as wildcards. */
int idem_signers_match(const char *string, const char *patterns);

#endif
