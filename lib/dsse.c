#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "dsse.h"

unsigned char *
idem_dsse_pae(const char *type, const void *body, size_t body_len, size_t *len)
{
	size_t type_len = strlen(type), head_len;
	char head[64];
	unsigned char *out;

	head_len = (size_t)snprintf(head, sizeof(head), "DSSEv1 %zu ", type_len);
	*len = head_len + type_len + 1 + (size_t)snprintf(NULL, 0, "%zu ", body_len) + body_len;
	out = idem_emalloc(*len + 1);
	memcpy(out, head, head_len);
	memcpy(out + head_len, type, type_len);
	head_len += type_len;
	head_len += (size_t)sprintf((char *)out + head_len, " %zu ", body_len);
	memcpy(out + head_len, body, body_len);
	return out;
}

char *
idem_dsse_base64(const void *data, size_t len)
{
	size_t cap = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
	char *out = idem_emalloc(cap);

	sodium_bin2base64(out, cap, data, len, sodium_base64_VARIANT_ORIGINAL);
	return out;
}

unsigned char *
idem_dsse_unbase64(const char *text, size_t text_len, size_t *len)
{
	unsigned char *out = idem_emalloc(text_len / 4 * 3 + 1);

	/* every character read, the padding there: nothing else decodes */
	if (text_len % 4 != 0 || sodium_base642bin(out, text_len / 4 * 3 + 1, text, text_len, NULL,
	    len, NULL, sodium_base64_VARIANT_ORIGINAL) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

void
idem_dsse_keyid(const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES],
		char out[IDEM_DSSE_KEYID_SIZE])
{
	static const char type[] = "ssh-ed25519";
	unsigned char blob[4 + sizeof(type) - 1 + 4 + IDEM_SIG_PUBLIC_BYTES], *p = blob;
	unsigned char digest[crypto_hash_sha256_BYTES];

	/* the public key blob: string "ssh-ed25519", string key */
	*p++ = 0, *p++ = 0, *p++ = 0, *p++ = sizeof(type) - 1;
	memcpy(p, type, sizeof(type) - 1);
	p += sizeof(type) - 1;
	*p++ = 0, *p++ = 0, *p++ = 0, *p++ = IDEM_SIG_PUBLIC_BYTES;
	memcpy(p, public_key, IDEM_SIG_PUBLIC_BYTES);
	crypto_hash_sha256(digest, blob, sizeof(blob));
	memcpy(out, "SHA256:", 7);
	sodium_bin2base64(out + 7, IDEM_DSSE_KEYID_SIZE - 7, digest, sizeof(digest),
	    sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
}

char *
idem_dsse_sign(const struct idem_key *key, const char *type, const void *body, size_t len)
{
	unsigned char signature[crypto_sign_BYTES], *pae;
	char keyid[IDEM_DSSE_KEYID_SIZE], *payload, *sig, *text, *line;
	size_t pae_len;
	json_t *envelope;

	pae = idem_dsse_pae(type, body, len, &pae_len);
	crypto_sign_detached(signature, NULL, pae, pae_len, key->secret_key);
	free(pae);
	idem_dsse_keyid(key->public_key, keyid);
	payload = idem_dsse_base64(body, len);
	sig = idem_dsse_base64(signature, sizeof(signature));
	envelope = json_pack("{s:s,s:s,s:[{s:s,s:s}]}", "payload", payload, "payloadType", type,
	    "signatures", "keyid", keyid, "sig", sig);
	if (envelope == NULL || (text = json_dumps(envelope, JSON_COMPACT | JSON_SORT_KEYS)) == NULL)
		idem_die(IDEM_EXIT_ENV, "the envelope could not be made: out of memory");
	if (asprintf(&line, "%s\n", text) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(text);
	free(payload);
	free(sig);
	json_decref(envelope);
	return line;
}

/* A member of an object that must be a string. */
static const char *
member(const json_t *o, const char *name, size_t *len, struct idem_error *err)
{
	const json_t *v = json_object_get(o, name);

	if (!json_is_string(v)) {
		idem_error_set(err, IDEM_EXIT_FINDING, "the envelope has no %s string", name);
		return NULL;
	}
	*len = json_string_length(v);
	return json_string_value(v);
}

/* A keyid to name in a message: short, printable ASCII, no blank. */
static int
printable(const char *s, size_t len, size_t size)
{
	size_t i;

	if (len == 0 || len >= size)
		return 0;
	for (i = 0; i < len; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return 0;
	return 1;
}

int
idem_dsse_parse(struct idem_dsse *e, const char *text, size_t len, struct idem_error *err)
{
	const char *payload, *type, *keyid, *sig;
	size_t payload_len, type_len, keyid_len, sig_len, n;
	unsigned char *raw = NULL;
	json_error_t jerr;
	json_t *root, *sigs, *one;
	int rc = -1;

	memset(e, 0, sizeof(*e));
	if ((root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
		idem_error_set(err, IDEM_EXIT_FINDING, "not a JSON envelope: line %d: %s", jerr.line,
		    jerr.text);
		return -1;
	}
	sigs = json_object_get(root, "signatures");
	one = json_array_get(sigs, 0);
	if (!json_is_object(root) || (payload = member(root, "payload", &payload_len, err)) == NULL ||
	    (type = member(root, "payloadType", &type_len, err)) == NULL)
		goto out;
	if (!json_is_array(sigs) || json_array_size(sigs) != 1 || !json_is_object(one)) {
		idem_error_set(err, IDEM_EXIT_FINDING, "the envelope has not exactly one signature");
		goto out;
	}
	if ((keyid = member(one, "keyid", &keyid_len, err)) == NULL ||
	    (sig = member(one, "sig", &sig_len, err)) == NULL)
		goto out;
	if (type_len != strlen(type) || !printable(keyid, keyid_len, sizeof(e->keyid))) {
		idem_error_set(err, IDEM_EXIT_FINDING, "the envelope's payloadType or keyid is not a "
		    "plain string of its size");
		goto out;
	}
	if ((raw = idem_dsse_unbase64(sig, sig_len, &n)) == NULL || n != sizeof(e->signature)) {
		idem_error_set(err, IDEM_EXIT_FINDING, "the signature is not the base64 of 64 bytes");
		goto out;
	}
	memcpy(e->signature, raw, n);
	if ((e->body = idem_dsse_unbase64(payload, payload_len, &e->body_len)) == NULL) {
		idem_error_set(err, IDEM_EXIT_FINDING, "the payload is not base64");
		goto out;
	}
	e->type = idem_estrdup(type);
	memcpy(e->keyid, keyid, keyid_len + 1);
	rc = 0;
out:
	free(raw);
	json_decref(root);
	if (rc < 0)
		idem_dsse_free(e);
	return rc;
}

int
idem_dsse_check(const struct idem_dsse *e, const unsigned char public_key[IDEM_SIG_PUBLIC_BYTES],
		struct idem_error *err)
{
	char keyid[IDEM_DSSE_KEYID_SIZE];
	unsigned char *pae;
	size_t pae_len;
	int bad;

	idem_dsse_keyid(public_key, keyid);
	if (strcmp(e->keyid, keyid) != 0)
		return idem_error_set(err, IDEM_EXIT_FINDING, "signed by keyid %s, not by the "
		    "record's signer, %s", e->keyid, keyid);
	pae = idem_dsse_pae(e->type, e->body, e->body_len, &pae_len);
	bad = crypto_sign_verify_detached(e->signature, pae, pae_len, public_key) != 0;
	free(pae);
	if (bad)
		return idem_error_set(err, IDEM_EXIT_FINDING, "the signature does not verify with %s",
		    keyid);
	return 0;
}

void
idem_dsse_free(struct idem_dsse *e)
{
	free(e->type);
	free(e->body);
	e->type = NULL;
	e->body = NULL;
}
