/* dsse.h: DSSE envelopes (secure-systems-lab/dsse, protocol.md and
 * envelope.md, version 1.0) signed with an OpenSSH ed25519 key, as
 * mkrecord(1) writes an in-toto statement beside a record and
 * verify-record(1) checks it */
#ifndef IDEM_DSSE_H
#define IDEM_DSSE_H

#include <stddef.h>

#include "sig.h"
#include "error.h"

#define IDEM_DSSE_INTOTO_TYPE "application/vnd.in-toto+json"
/* The most bytes read of an envelope file: far above any statement. */
#define IDEM_DSSE_FILE_MAX (1024 * 1024)
/* "SHA256:" and 43 base64 characters, and a NUL. */
#define IDEM_DSSE_KEYID_SIZE 64

/* PAE(type, body): "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body,
 * LEN the decimal byte length without leading zeros; *len its length.
 * Caller frees. */
unsigned char *idem_dsse_pae(const char *type, const void *body, size_t body_len, size_t *len);

/* Standard base64 with padding (RFC 4648, section 4), and back: decoding
 * refuses any other character, a missing pad and trailing bits. Caller
 * frees; decode gives NULL for text that is not such base64. */
char *idem_dsse_base64(const void *data, size_t len);
unsigned char *idem_dsse_unbase64(const char *text, size_t text_len, size_t *len);

/* The key's fingerprint as ssh-keygen -l prints it, "SHA256:..." with no
 * padding: the keyid of its signatures. */
void idem_dsse_keyid(const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES],
		     char out[IDEM_DSSE_KEYID_SIZE]);

/* The envelope of body (of type type) signed with key: one line of JSON,
 * {"payload","payloadType","signatures":[{"keyid","sig"}]}, ending in a
 * newline. Caller frees. */
char *idem_dsse_sign(const struct idem_key *key, const char *type, const void *body,
		     size_t len);

/* An envelope read: its type and body, and its one signature. */
struct idem_dsse {
	char *type;
	unsigned char *body;
	size_t body_len;
	char keyid[IDEM_DSSE_KEYID_SIZE];
	unsigned char signature[64];
};

/* Parses an envelope of exactly one signature, an ed25519 one; err says
 * what is wrong, in one line. Free with idem_dsse_free. */
int idem_dsse_parse(struct idem_dsse *e, const char *text, size_t len, struct idem_error *err);
/* Checks its keyid, then its signature over PAE, against public_key. */
int idem_dsse_check(const struct idem_dsse *e, const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES],
		    struct idem_error *err);
void idem_dsse_free(struct idem_dsse *e);

#endif
