#include <sys/stat.h>

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "sig.h"

#define KEY_TYPE "ssh-ed25519"
#define SIG_BEGIN "-----BEGIN SSH SIGNATURE-----"
#define SIG_END "-----END SSH SIGNATURE-----"
#define KEY_BEGIN "-----BEGIN OPENSSH PRIVATE KEY-----"
#define KEY_END "-----END OPENSSH PRIVATE KEY-----"

/* Reading and writing the SSH wire format: uint32 big-endian, strings with
 * a uint32 length. */
struct reader {
	const unsigned char *p;
	size_t left;
};

struct buffer {
	unsigned char *data;
	size_t len, cap;
};

static int
get_u32(struct reader *r, uint32_t *v)
{
	if (r->left < 4)
		return -1;
	*v = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 | r->p[3];
	r->p += 4;
	r->left -= 4;
	return 0;
}

static int
get_string(struct reader *r, const unsigned char **s, size_t *len)
{
	uint32_t n;

	if (get_u32(r, &n) < 0 || r->left < n)
		return -1;
	*s = r->p;
	*len = n;
	r->p += n;
	r->left -= n;
	return 0;
}

static int
string_is(const unsigned char *s, size_t len, const char *want)
{
	return len == strlen(want) && memcmp(s, want, len) == 0;
}

static void
put(struct buffer *b, const void *data, size_t len)
{
	if (b->len + len > b->cap) {
		b->cap = (b->len + len) * 2 + 64;
		b->data = idem_erealloc(b->data, b->cap);
	}
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

static void
put_u32(struct buffer *b, uint32_t v)
{
	unsigned char be[4] = { v >> 24, v >> 16, v >> 8, v };

	put(b, be, 4);
}

static void
put_string(struct buffer *b, const void *data, size_t len)
{
	put_u32(b, (uint32_t)len);
	put(b, data, len);
}

static void
put_cstring(struct buffer *b, const char *s)
{
	put_string(b, s, strlen(s));
}

static void
public_blob(struct buffer *b, const unsigned char public_key[32])
{
	put_cstring(b, KEY_TYPE);
	put_string(b, public_key, 32);
}

/*
 * Base64 between two armor lines, strictly: the text starts with the begin
 * line and ends with the end line and at most one line break; the base64
 * is canonical (it encodes back to itself), so no byte of an armored
 * signature can change without the change being seen. Lines may be broken
 * anywhere, with LF or CRLF.
 */
static unsigned char *
unarmor(const char *text, size_t len, const char *begin, const char *end, size_t *out_len)
{
	const char *b, *e, *tail;
	unsigned char *bin;
	char *stripped, *again;
	size_t cap, n = 0, i, again_cap;

	if (len < strlen(begin) || memcmp(text, begin, strlen(begin)) != 0)
		return NULL;
	b = text + strlen(begin);
	e = memmem(b, len - (size_t)(b - text), end, strlen(end));
	if (e == NULL)
		return NULL;
	tail = e + strlen(end);
	if (!(tail == text + len || (tail + 1 == text + len && *tail == '\n') ||
	    (tail + 2 == text + len && tail[0] == '\r' && tail[1] == '\n')))
		return NULL;
	cap = (size_t)(e - b);
	stripped = idem_emalloc(cap + 1);
	for (i = 0; i < cap; i++) {
		if (b[i] == '\n' || (b[i] == '\r' && i + 1 < cap && b[i + 1] == '\n'))
			continue;
		stripped[n++] = b[i];
	}
	stripped[n] = '\0';
	bin = idem_emalloc(cap + 1);
	if (sodium_base642bin(bin, cap, stripped, n, NULL, out_len, NULL,
	    sodium_base64_VARIANT_ORIGINAL) != 0) {
		free(bin);
		free(stripped);
		return NULL;
	}
	again_cap = sodium_base64_encoded_len(*out_len, sodium_base64_VARIANT_ORIGINAL);
	again = idem_emalloc(again_cap);
	sodium_bin2base64(again, again_cap, bin, *out_len, sodium_base64_VARIANT_ORIGINAL);
	if (strcmp(again, stripped) != 0) {
		free(bin);
		bin = NULL;
	}
	free(again);
	free(stripped);
	return bin;
}

int
idem_key_load(struct idem_key *key, const char *path, struct idem_error *err)
{
	const unsigned char *s, *pub, *sec, *comment, *priv;
	size_t len, text_len, bin_len = 0, pub_len, sec_len, comment_len, priv_len;
	struct reader r, pr;
	unsigned char *bin = NULL;
	uint32_t n, check1, check2;
	struct stat st;
	char *text;
	int rc = -1;

	memset(key, 0, sizeof(*key));
	if (stat(path, &st) < 0)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:", path);
	if (st.st_mode & 077)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: permissions %04o are too open: a "
		    "private key must not be readable by group or others (chmod 600 %s)", path,
		    (unsigned)(st.st_mode & 07777), path);
	if ((text = idem_read_file(path, &text_len, err)) == NULL)
		return -1;
	bin = unarmor(text, text_len, KEY_BEGIN, KEY_END, &bin_len);
	if (bin == NULL) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: not an OpenSSH private key", path);
		goto out;
	}
	r.p = bin;
	r.left = bin_len;
	if (bin_len < 15 || memcmp(bin, "openssh-key-v1", 15) != 0) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: not an openssh-key-v1 key", path);
		goto out;
	}
	r.p += 15;
	r.left -= 15;
	if (get_string(&r, &s, &len) < 0)
		goto bad;
	if (!string_is(s, len, "none")) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: the key is encrypted (%.*s); idem signs "
		    "with an unencrypted key kept for rehearsals, or decrypt a copy with "
		    "ssh-keygen -p", path, (int)len, s);
		goto out;
	}
	if (get_string(&r, &s, &len) < 0 || !string_is(s, len, "none") ||
	    get_string(&r, &s, &len) < 0 || get_u32(&r, &n) < 0 || n != 1 ||
	    get_string(&r, &pub, &pub_len) < 0 || get_string(&r, &priv, &priv_len) < 0)
		goto bad;
	pr.p = priv;
	pr.left = priv_len;
	if (get_u32(&pr, &check1) < 0 || get_u32(&pr, &check2) < 0 || check1 != check2 ||
	    get_string(&pr, &s, &len) < 0)
		goto bad;
	if (!string_is(s, len, KEY_TYPE)) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: a %.*s key; idem signs with ed25519 keys "
		    "(ssh-keygen -t ed25519)", path, (int)len, s);
		goto out;
	}
	if (get_string(&pr, &pub, &pub_len) < 0 || pub_len != 32 ||
	    get_string(&pr, &sec, &sec_len) < 0 || sec_len != 64 ||
	    get_string(&pr, &comment, &comment_len) < 0 || memcmp(sec + 32, pub, 32) != 0)
		goto bad;
	memcpy(key->public_key, pub, 32);
	memcpy(key->secret_key, sec, 64);
	snprintf(key->comment, sizeof(key->comment), "%.*s", (int)comment_len, comment);
	rc = 0;
	goto out;
bad:
	idem_error_set(err, IDEM_EXIT_USAGE, "%s: a malformed openssh-key-v1 key", path);
out:
	if (bin != NULL) {
		sodium_memzero(bin, bin_len);
		free(bin);
	}
	sodium_memzero(text, text_len);
	free(text);
	return rc;
}

void
idem_key_wipe(struct idem_key *key)
{
	sodium_memzero(key, sizeof(*key));
}

char *
idem_key_public_text(const unsigned char public_key[32])
{
	struct buffer b = { 0 };
	size_t cap;
	char *out;

	public_blob(&b, public_key);
	cap = sodium_base64_encoded_len(b.len, sodium_base64_VARIANT_ORIGINAL);
	out = idem_emalloc(strlen(KEY_TYPE) + 1 + cap);
	strcpy(out, KEY_TYPE " ");
	sodium_bin2base64(out + strlen(out), cap, b.data, b.len, sodium_base64_VARIANT_ORIGINAL);
	free(b.data);
	return out;
}

/* What SSHSIG signs: magic, namespace, reserved, hash name, H(message). */
static void
signed_data(struct buffer *b, const char *namespace, const char *hash, const void *data,
	    size_t len)
{
	unsigned char digest[crypto_hash_sha512_BYTES];
	size_t digest_len;

	if (strcmp(hash, "sha256") == 0) {
		crypto_hash_sha256(digest, data, len);
		digest_len = crypto_hash_sha256_BYTES;
	} else {
		crypto_hash_sha512(digest, data, len);
		digest_len = crypto_hash_sha512_BYTES;
	}
	put(b, "SSHSIG", 6);
	put_cstring(b, namespace);
	put_string(b, "", 0);
	put_cstring(b, hash);
	put_string(b, digest, digest_len);
}

char *
idem_sig_sign(const struct idem_key *key, const char *namespace, const void *data, size_t len)
{
	struct buffer tosign = { 0 }, sigblob = { 0 }, blob = { 0 };
	unsigned char signature[crypto_sign_BYTES];
	char *b64, *armor, *o;
	size_t b64_cap, i, n;

	signed_data(&tosign, namespace, "sha512", data, len);
	crypto_sign_detached(signature, NULL, tosign.data, tosign.len, key->secret_key);
	put_cstring(&sigblob, KEY_TYPE);
	put_string(&sigblob, signature, sizeof(signature));
	put(&blob, "SSHSIG", 6);
	put_u32(&blob, 1);
	put_u32(&blob, 0);
	blob.len -= 4;
	{
		struct buffer pub = { 0 };

		public_blob(&pub, key->public_key);
		put_string(&blob, pub.data, pub.len);
		free(pub.data);
	}
	put_cstring(&blob, namespace);
	put_string(&blob, "", 0);
	put_cstring(&blob, "sha512");
	put_string(&blob, sigblob.data, sigblob.len);
	b64_cap = sodium_base64_encoded_len(blob.len, sodium_base64_VARIANT_ORIGINAL);
	b64 = idem_emalloc(b64_cap);
	sodium_bin2base64(b64, b64_cap, blob.data, blob.len, sodium_base64_VARIANT_ORIGINAL);
	n = strlen(b64);
	armor = idem_emalloc(n + n / 70 + 2 + sizeof(SIG_BEGIN) + sizeof(SIG_END) + 4);
	o = armor + sprintf(armor, "%s\n", SIG_BEGIN);
	for (i = 0; i < n; i += 70) {
		size_t chunk = n - i < 70 ? n - i : 70;

		memcpy(o, b64 + i, chunk);
		o += chunk;
		*o++ = '\n';
	}
	sprintf(o, "%s\n", SIG_END);
	free(b64);
	free(tosign.data);
	free(sigblob.data);
	free(blob.data);
	return armor;
}

int
idem_sig_parse(struct idem_sig *sig, const char *armor, size_t armor_len, const char *namespace,
	       struct idem_error *err)
{
	const unsigned char *s, *pub, *sigblob;
	size_t len, bin_len = 0, pub_len, sigblob_len;
	struct reader r, pr;
	unsigned char *bin;
	uint32_t version;
	int rc = -1;

	memset(sig, 0, sizeof(*sig));
	bin = unarmor(armor, armor_len, SIG_BEGIN, SIG_END, &bin_len);
	if (bin == NULL)
		return idem_error_set(err, IDEM_EXIT_FINDING, "not an armored SSH signature");
	r.p = bin;
	r.left = bin_len;
	if (bin_len < 6 || memcmp(bin, "SSHSIG", 6) != 0)
		goto bad;
	r.p += 6;
	r.left -= 6;
	if (get_u32(&r, &version) < 0)
		goto bad;
	if (version != 1) {
		idem_error_set(err, IDEM_EXIT_FINDING, "SSHSIG version %u is not supported", version);
		goto out;
	}
	if (get_string(&r, &pub, &pub_len) < 0)
		goto bad;
	pr.p = pub;
	pr.left = pub_len;
	if (get_string(&pr, &s, &len) < 0 || !string_is(s, len, KEY_TYPE) ||
	    get_string(&pr, &s, &len) < 0 || len != 32 || pr.left != 0) {
		idem_error_set(err, IDEM_EXIT_FINDING, "not an ed25519 signature");
		goto out;
	}
	memcpy(sig->public_key, s, 32);
	if (get_string(&r, &s, &len) < 0)
		goto bad;
	if (!string_is(s, len, namespace)) {
		idem_error_set(err, IDEM_EXIT_FINDING, "signature is for namespace \"%.*s\", not \"%s\"",
		    (int)len, s, namespace);
		goto out;
	}
	if (get_string(&r, &s, &len) < 0 || get_string(&r, &s, &len) < 0)
		goto bad;
	if (!string_is(s, len, "sha512") && !string_is(s, len, "sha256")) {
		idem_error_set(err, IDEM_EXIT_FINDING, "unsupported hash %.*s", (int)len, s);
		goto out;
	}
	memcpy(sig->hash, s, len);
	if (get_string(&r, &sigblob, &sigblob_len) < 0 || r.left != 0)
		goto bad;
	pr.p = sigblob;
	pr.left = sigblob_len;
	if (get_string(&pr, &s, &len) < 0 || !string_is(s, len, KEY_TYPE) ||
	    get_string(&pr, &s, &len) < 0 || len != 64 || pr.left != 0)
		goto bad;
	memcpy(sig->signature, s, 64);
	rc = 0;
	goto out;
bad:
	idem_error_set(err, IDEM_EXIT_FINDING, "malformed SSH signature");
out:
	free(bin);
	return rc;
}

int
idem_sig_check(const struct idem_sig *sig, const char *namespace, const void *data, size_t len,
	       struct idem_error *err)
{
	struct buffer tosign = { 0 };
	int ok;

	signed_data(&tosign, namespace, sig->hash, data, len);
	ok = crypto_sign_verify_detached(sig->signature, tosign.data, tosign.len,
	    sig->public_key) == 0;
	free(tosign.data);
	if (!ok)
		return idem_error_set(err, IDEM_EXIT_FINDING, "signature does not verify");
	return 0;
}

struct signer {
	char *principals;
	char **namespaces;
	size_t nnamespaces;
	time_t valid_after, valid_before;	/* 0: unset */
	int cert_authority;
	unsigned char public_key[32];
};

struct idem_signers {
	struct signer *list;
	size_t n;
};

/* YYYYMMDD[Z] or YYYYMMDDHHMM[SS][Z]; local time unless Z. */
static int
parse_time(const char *s, time_t *out)
{
	struct tm tm = { 0 };
	size_t digits = strspn(s, "0123456789");
	int utc = s[digits] == 'Z' || s[digits] == 'z';
	char buf[16];

	if ((digits != 8 && digits != 12 && digits != 14) || s[digits + (size_t)utc] != '\0')
		return -1;
	memcpy(buf, s, digits);
	buf[digits] = '\0';
	if (sscanf(buf, "%4d%2d%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday) != 3)
		return -1;
	if (digits >= 12 && sscanf(buf + 8, "%2d%2d", &tm.tm_hour, &tm.tm_min) != 2)
		return -1;
	if (digits == 14 && sscanf(buf + 12, "%2d", &tm.tm_sec) != 1)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	tm.tm_isdst = -1;
	*out = utc ? timegm(&tm) : mktime(&tm);
	return *out == (time_t)-1 ? -1 : 0;
}

static char *
next_token(char **p)
{
	char *start, *o;
	int quoted = 0;

	while (**p == ' ' || **p == '\t')
		(*p)++;
	if (**p == '\0')
		return NULL;
	start = o = *p;
	for (; **p && (quoted || (**p != ' ' && **p != '\t')); (*p)++) {
		if (**p == '"')
			quoted = !quoted;
		*o++ = **p;
	}
	if (**p)
		(*p)++;
	*o = '\0';
	return start;
}

static int
parse_options(struct signer *s, char *options, const char *where, struct idem_error *err)
{
	char *p = options, *opt;
	int seen_after = 0, seen_before = 0, seen_ns = 0;

	while (*p) {
		int quoted = 0;

		opt = p;
		for (; *p && (quoted || *p != ','); p++)
			if (*p == '"')
				quoted = !quoted;
		if (*p)
			*p++ = '\0';
		if (strcasecmp(opt, "cert-authority") == 0) {
			s->cert_authority = 1;
		} else if (strncasecmp(opt, "namespaces=", 11) == 0) {
			char *v = opt + 11, *ns, *save = NULL;
			size_t vlen = strlen(v);

			if (seen_ns++)
				return idem_error_set(err, IDEM_EXIT_USAGE, "%s: namespaces given twice", where);
			if (vlen >= 2 && v[0] == '"' && v[vlen - 1] == '"') {
				v[vlen - 1] = '\0';
				v++;
			}
			for (ns = strtok_r(v, ",", &save); ns; ns = strtok_r(NULL, ",", &save)) {
				s->namespaces = idem_ereallocarray(s->namespaces, s->nnamespaces + 1,
				    sizeof(char *));
				s->namespaces[s->nnamespaces++] = idem_estrdup(ns);
			}
		} else if (strncasecmp(opt, "valid-after=", 12) == 0) {
			char *v = opt + 12;

			if (*v == '"')
				v++, v[strcspn(v, "\"")] = '\0';
			if (seen_after++ || parse_time(v, &s->valid_after) < 0)
				return idem_error_set(err, IDEM_EXIT_USAGE, "%s: bad or repeated valid-after",
				    where);
		} else if (strncasecmp(opt, "valid-before=", 13) == 0) {
			char *v = opt + 13;

			if (*v == '"')
				v++, v[strcspn(v, "\"")] = '\0';
			if (seen_before++ || parse_time(v, &s->valid_before) < 0)
				return idem_error_set(err, IDEM_EXIT_USAGE, "%s: bad or repeated valid-before",
				    where);
		} else {
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s: unknown option %s", where, opt);
		}
	}
	if (s->valid_after && s->valid_before && s->valid_before <= s->valid_after)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: valid-before is not after valid-after",
		    where);
	return 0;
}

void
idem_signers_free(struct idem_signers *signers)
{
	size_t i, j;

	if (signers == NULL)
		return;
	for (i = 0; i < signers->n; i++) {
		free(signers->list[i].principals);
		for (j = 0; j < signers->list[i].nnamespaces; j++)
			free(signers->list[i].namespaces[j]);
		free(signers->list[i].namespaces);
	}
	free(signers->list);
	free(signers);
}

struct idem_signers *
idem_signers_load(const char *path, struct idem_error *err)
{
	struct idem_signers *signers = calloc(1, sizeof(*signers));
	char *text, *line, *save, where[512];
	size_t len;
	long line_no = 0;

	if (sodium_init() < 0)
		idem_die(IDEM_EXIT_ENV, "libsodium could not start");
	if (signers == NULL)
		idem_die(IDEM_EXIT_ENV, "calloc:");
	if ((text = idem_read_file(path, &len, err)) == NULL) {
		free(signers);
		return NULL;
	}
	for (save = text; (line = strsep(&save, "\n")) != NULL; ) {
		char *p = line, *principals, *tok, *type, *b64;
		unsigned char blob[128];
		size_t blob_len;
		struct signer s = { 0 };
		struct reader r;
		const unsigned char *str;
		size_t str_len;

		line_no++;
		line[strcspn(line, "\r")] = '\0';
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0' || *p == '#')
			continue;
		snprintf(where, sizeof(where), "%s:%ld", path, line_no);
		principals = next_token(&p);
		tok = next_token(&p);
		if (tok != NULL && strncmp(tok, "ssh-", 4) != 0 && strncmp(tok, "ecdsa-", 6) != 0 &&
		    strncmp(tok, "sk-", 3) != 0) {
			if (parse_options(&s, tok, where, err) < 0)
				goto fail;
			tok = next_token(&p);
		}
		type = tok;
		b64 = next_token(&p);
		if (principals == NULL || type == NULL || b64 == NULL) {
			idem_error_set(err, IDEM_EXIT_USAGE, "%s: expected principals [options] "
			    "keytype key", where);
			goto fail;
		}
		if (strcmp(type, KEY_TYPE) != 0 || s.cert_authority)
			goto skip;	/* other key types and certificate authorities: not ours */
		if (sodium_base642bin(blob, sizeof(blob), b64, strlen(b64), NULL, &blob_len, NULL,
		    sodium_base64_VARIANT_ORIGINAL) != 0)
			goto bad_key;
		r.p = blob;
		r.left = blob_len;
		if (get_string(&r, &str, &str_len) < 0 || !string_is(str, str_len, KEY_TYPE) ||
		    get_string(&r, &str, &str_len) < 0 || str_len != 32 || r.left != 0)
			goto bad_key;
		memcpy(s.public_key, str, 32);
		s.principals = idem_estrdup(principals);
		signers->list = idem_ereallocarray(signers->list, signers->n + 1, sizeof(s));
		signers->list[signers->n++] = s;
		continue;
bad_key:
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: a malformed ssh-ed25519 key", where);
		goto fail;
skip:
		{
			size_t j;

			for (j = 0; j < s.nnamespaces; j++)
				free(s.namespaces[j]);
			free(s.namespaces);
		}
		continue;
fail:
		{
			size_t j;

			for (j = 0; j < s.nnamespaces; j++)
				free(s.namespaces[j]);
			free(s.namespaces);
		}
		free(text);
		idem_signers_free(signers);
		return NULL;
	}
	free(text);
	return signers;
}

static char *
fingerprint(const unsigned char public_key[32])
{
	struct buffer b = { 0 };
	unsigned char digest[32];
	char b64[64], *out;

	public_blob(&b, public_key);
	crypto_hash_sha256(digest, b.data, b.len);
	free(b.data);
	sodium_bin2base64(b64, sizeof(b64), digest, sizeof(digest),
	    sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
	out = idem_emalloc(strlen(b64) + 8);
	sprintf(out, "SHA256:%s", b64);
	return out;
}

char *
idem_signers_find(const struct idem_signers *signers, const unsigned char public_key[32],
		  const char *namespace, time_t when, struct idem_error *err)
{
	const char *reason = NULL;
	char *fp = fingerprint(public_key);
	size_t i, j;

	for (i = 0; i < signers->n; i++) {
		const struct signer *s = &signers->list[i];
		int ns_ok = s->nnamespaces == 0;

		if (sodium_memcmp(s->public_key, public_key, 32) != 0)
			continue;
		for (j = 0; j < s->nnamespaces; j++)
			ns_ok |= fnmatch(s->namespaces[j], namespace, 0) == 0;
		if (!ns_ok) {
			reason = "is not allowed to sign in this namespace";
			continue;
		}
		if ((s->valid_after && when < s->valid_after) ||
		    (s->valid_before && when > s->valid_before)) {
			reason = "is outside its validity window";
			continue;
		}
		free(fp);
		return idem_estrdup(s->principals);
	}
	if (reason)
		idem_error_set(err, IDEM_EXIT_FINDING, "key %s %s (namespace %s)", fp, reason, namespace);
	else
		idem_error_set(err, IDEM_EXIT_FINDING, "key %s is not in allowed_signers", fp);
	free(fp);
	return NULL;
}
