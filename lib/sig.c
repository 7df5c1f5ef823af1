#include <sys/stat.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "sig.h"
#include "file.h"

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

/* The key of an ed25519 public key blob (string "ssh-ed25519", string of
 * 32 bytes, nothing after), or NULL. */
static const unsigned char *
blob_key(const unsigned char *blob, size_t blob_len)
{
	struct reader r = { blob, blob_len };
	const unsigned char *s;
	size_t len;

	if (get_string(&r, &s, &len) < 0 || !string_is(s, len, KEY_TYPE) ||
	    get_string(&r, &s, &len) < 0 || len != 32 || r.left != 0)
		return NULL;
	return s;
}

/*
 * Base64 between two armor lines, strictly: the text starts with the begin
 * line and ends with the end line and at most one line break; the base64
 * is canonical (it encodes back to itself), so no byte of an armored
 * signature can change without the change being seen. The begin line
 * ends in LF; the others may be broken anywhere, with LF or CRLF.
 */
static unsigned char *
unarmor(const char *text, size_t len, const char *begin, const char *end, size_t *out_len)
{
	const char *b, *e, *tail;
	unsigned char *bin;
	char *stripped, *again;
	size_t cap, n = 0, i, again_cap;

	/* the begin line ends in LF, as OpenSSH's reader requires, for both */
	if (len <= strlen(begin) || memcmp(text, begin, strlen(begin)) != 0 ||
	    text[strlen(begin)] != '\n')
		return NULL;
	b = text + strlen(begin) + 1;
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

/* The end of an unencrypted private section, as OpenSSH checks it: the
 * section is whole blocks of 8 bytes, padded with 1, 2, 3 and so on. */
static int
padding_bad(size_t section_len, const struct reader *r)
{
	size_t i;

	if (section_len % 8 != 0)
		return 1;
	for (i = 0; i < r->left; i++)
		if (r->p[i] != (unsigned char)((i + 1) & 0xff))
			return 1;
	return 0;
}

int
idem_key_load(struct idem_key *key, const char *path, struct idem_error *err)
{
	const unsigned char *s, *pub, *sec, *comment, *priv, *outer;
	size_t len, text_len, bin_len = 0, pub_len, sec_len, comment_len, priv_len, outer_len;
	unsigned char derived_public[32], derived_secret[64];
	struct reader r, pr;
	unsigned char *bin = NULL;
	uint32_t n, check1, check2;
	struct stat st;
	char *text;
	int rc = -1;

	memset(key, 0, sizeof(*key));
	if (sodium_init() < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "libsodium could not start");
	if (stat(path, &st) < 0)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:", path);
	if (!S_ISREG(st.st_mode))
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: not a key file but a %s", path,
		    S_ISDIR(st.st_mode) ? "directory" : "special file");
	if (st.st_mode & 077)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: permissions %04o are too open: a "
		    "private key must not be readable by group or others (chmod 600 %s)", path,
		    (unsigned)(st.st_mode & 07777), path);
	if ((text = idem_read_file_max(path, IDEM_KEY_FILE_MAX, &text_len, err)) == NULL)
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
	    get_string(&r, &outer, &outer_len) < 0 || get_string(&r, &priv, &priv_len) < 0)
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
	    get_string(&pr, &comment, &comment_len) < 0 || padding_bad(priv_len, &pr))
		goto bad;
	/* one key throughout: the public key of the file, the one of the
	 * private section, the one the secret key carries, and the one its
	 * seed derives; a key that fails this would sign what nobody verifies */
	if ((s = blob_key(outer, outer_len)) == NULL)
		goto bad;
	crypto_sign_seed_keypair(derived_public, derived_secret, sec);
	if (sodium_memcmp(s, pub, 32) != 0 || sodium_memcmp(sec + 32, pub, 32) != 0 ||
	    sodium_memcmp(derived_public, pub, 32) != 0) {
		idem_error_set(err, IDEM_EXIT_USAGE, "%s: the private key does not match its public "
		    "key: the key file is damaged", path);
		goto out;
	}
	memcpy(key->public_key, pub, 32);
	memcpy(key->secret_key, sec, 64);
	rc = 0;
	goto out;
bad:
	idem_error_set(err, IDEM_EXIT_USAGE, "%s: a malformed openssh-key-v1 key", path);
out:
	sodium_memzero(derived_secret, sizeof(derived_secret));
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
	struct idem_sig check;
	struct idem_error err;
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
	/* read back as a verifier reads it: never hand out what does not verify */
	if (idem_sig_parse(&check, armor, strlen(armor), namespace, &err) < 0 ||
	    sodium_memcmp(check.public_key, key->public_key, 32) != 0 ||
	    idem_sig_check(&check, namespace, data, len, &err) < 0) {
		free(armor);
		return NULL;
	}
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
	if ((s = blob_key(pub, pub_len)) == NULL) {
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

/*
 * allowed_signers, read as OpenSSH's ssh-keygen -Y verify reads it (sshsig.c,
 * match.c and misc.c of OpenSSH 9.2): the same tokens, the same options and
 * patterns, the same times, and a line that does not parse is skipped, as
 * ssh-keygen skips it, never the whole file.
 */
struct signer {
	char *principals;
	char *namespaces;		/* the pattern list; NULL: every namespace */
	time_t valid_after, valid_before;	/* 0: unset */
	int cert_authority;
	unsigned char public_key[32];
};

struct idem_signers {
	struct signer *list;
	size_t n;
	char **skipped;			/* "file:line: why", one a skipped line */
	size_t nskipped;
};

#define WHITESPACE " \t\r\n"
#define PATTERN_MAX 1023		/* a longer pattern matches nothing */

/* One pattern against a string: '*' is any run of characters, '?' any
 * one character, every other character itself. */
static int
wildcard_match(const char *s, const char *pattern, size_t len)
{
	size_t p = 0, star_at = 0;
	const char *retry = NULL;

	while (*s != '\0') {
		if (p < len && pattern[p] == '*') {
			star_at = ++p;
			retry = s;
		} else if (p < len && (pattern[p] == '?' || pattern[p] == *s)) {
			p++;
			s++;
		} else if (retry != NULL) {
			p = star_at;
			s = ++retry;
		} else {
			return 0;
		}
	}
	while (p < len && pattern[p] == '*')
		p++;
	return p == len;
}

int
idem_signers_match(const char *string, const char *patterns)
{
	const char *p = patterns;
	int positive = 0;

	while (*p != '\0') {
		int negated = *p == '!';
		size_t len;

		p += negated;
		len = strcspn(p, ",");
		if (len >= PATTERN_MAX)
			return 0;
		if (wildcard_match(string, p, len)) {
			if (negated)
				return -1;
			positive = 1;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return positive;
}

/* YYYYMMDD, YYYYMMDDHHMM or YYYYMMDDHHMMSS, in local time unless followed
 * by Z or UTC (either case); read with strptime and mktime or timegm from
 * a zeroed struct tm (so local times are taken as standard time), as
 * OpenSSH reads them. Times at or before the epoch are refused. */
static int
parse_time(const char *s, time_t *out)
{
	static const char separators[] = "--T::";
	static const char *const formats[] = { "%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S" };
	size_t len = strlen(s), i, o = 0, fields;
	char buf[32];
	const char *end;
	struct tm tm;
	int utc = 0;
	time_t t;

	if (len > 1 && (s[len - 1] == 'Z' || s[len - 1] == 'z')) {
		utc = 1;
		len -= 1;
	} else if (len > 3 && strcasecmp(s + len - 3, "UTC") == 0) {
		utc = 1;
		len -= 3;
	}
	if (len != 8 && len != 12 && len != 14)
		return -1;
	/* the year, then two characters a field, a separator before each */
	fields = (len - 4) / 2;
	memcpy(buf, s, 4);
	o = 4;
	for (i = 0; i < fields; i++) {
		buf[o++] = separators[i];
		buf[o++] = s[4 + 2 * i];
		buf[o++] = s[5 + 2 * i];
	}
	buf[o] = '\0';
	memset(&tm, 0, sizeof(tm));
	end = strptime(buf, formats[len == 8 ? 0 : len == 12 ? 1 : 2], &tm);
	if (end == NULL || *end != '\0')
		return -1;
	t = utc ? timegm(&tm) : mktime(&tm);
	if (t <= 0)
		return -1;
	*out = t;
	return 0;
}

/* A quoted option value: "..." with \" for a quote; *p moves past it. */
static char *
dequote(const char **p, const char **why)
{
	const char *s = *p;
	char *out;
	size_t n = 0;

	if (*s != '"') {
		*why = "missing start quote";
		return NULL;
	}
	out = idem_emalloc(strlen(s));
	for (s++; *s != '\0' && *s != '"'; s++) {
		if (s[0] == '\\' && s[1] == '"')
			s++;
		out[n++] = *s;
	}
	if (*s == '\0') {
		free(out);
		*why = "missing end quote";
		return NULL;
	}
	out[n] = '\0';
	*p = s + 1;
	return out;
}

/* name=, its name in any case. */
static int
option_named(const char **p, const char *name)
{
	size_t len = strlen(name);

	if (strncasecmp(*p, name, len) != 0 || (*p)[len] != '=')
		return 0;
	*p += len + 1;
	return 1;
}

static const char *
time_option(const char **p, time_t *t, const char *repeated, const char *invalid)
{
	const char *why = NULL;
	char *value;
	int bad;

	if (*t != 0)
		return repeated;
	if ((value = dequote(p, &why)) == NULL)
		return why;
	bad = parse_time(value, t) < 0;
	free(value);
	return bad ? invalid : NULL;
}

/* The options of a line, comma-separated; NULL, or why they are bad. An
 * empty option between commas is passed over, as OpenSSH passes it. */
static const char *
parse_options(struct signer *s, const char *p)
{
	const char *why = NULL;

	while (*p != '\0') {
		if (strncasecmp(p, "cert-authority", 14) == 0) {
			s->cert_authority = 1;
			p += 14;
		} else if (option_named(&p, "namespaces")) {
			if (s->namespaces != NULL)
				return "multiple \"namespaces\" clauses";
			if ((s->namespaces = dequote(&p, &why)) == NULL)
				return why;
		} else if (option_named(&p, "valid-after")) {
			if ((why = time_option(&p, &s->valid_after, "multiple \"valid-after\" clauses",
			    "invalid \"valid-after\" time")) != NULL)
				return why;
		} else if (option_named(&p, "valid-before")) {
			if ((why = time_option(&p, &s->valid_before, "multiple \"valid-before\" clauses",
			    "invalid \"valid-before\" time")) != NULL)
				return why;
		}
		if (*p == '\0')
			break;
		if (*p != ',')
			return "unknown key option";
		if (*++p == '\0')
			return "unexpected end-of-options";
	}
	if (s->valid_after != 0 && s->valid_before != 0 && s->valid_before <= s->valid_after)
		return "\"valid-before\" time is before \"valid-after\"";
	return NULL;
}

/* The key types OpenSSH 9.2 knows besides ssh-ed25519: a line with one of
 * them is a line for another key, never for an idem signature. */
static int
other_key_type(const char *s, size_t len)
{
	static const char *const types[] = {
		"ssh-rsa", "ssh-dss", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
		"ecdsa-sha2-nistp521", "sk-ecdsa-sha2-nistp256@openssh.com",
		"sk-ssh-ed25519@openssh.com", "ssh-xmss@openssh.com", "rsa-sha2-256",
		"rsa-sha2-512", "ssh-rsa-cert-v01@openssh.com", "ssh-dss-cert-v01@openssh.com",
		"ecdsa-sha2-nistp256-cert-v01@openssh.com", "ecdsa-sha2-nistp384-cert-v01@openssh.com",
		"ecdsa-sha2-nistp521-cert-v01@openssh.com", "ssh-ed25519-cert-v01@openssh.com",
		"sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
		"sk-ssh-ed25519-cert-v01@openssh.com", "ssh-xmss-cert-v01@openssh.com",
		"rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com", NULL
	};
	size_t i;

	for (i = 0; types[i] != NULL; i++)
		if (strlen(types[i]) == len && memcmp(types[i], s, len) == 0)
			return 1;
	return 0;
}

enum { KEY_NONE = -1, KEY_ED25519 = 0, KEY_OTHER = 1 };

/* "keytype base64 [comment]", as OpenSSH reads a public key: the type and
 * the base64 end at a space or tab, and whitespace inside the base64 is
 * ignored. A key of another type is taken as it comes. */
static int
read_key(const char *p, unsigned char public_key[32])
{
	size_t type_len = strcspn(p, " \t"), text_len, blob_len;
	unsigned char blob[128];
	const unsigned char *key;

	if (p[type_len] == '\0')
		return KEY_NONE;
	if (type_len != strlen(KEY_TYPE) || memcmp(p, KEY_TYPE, type_len) != 0)
		return other_key_type(p, type_len) ? KEY_OTHER : KEY_NONE;
	p += type_len;
	p += strspn(p, " \t");
	text_len = strcspn(p, " \t");
	if (text_len == 0 || sodium_base642bin(blob, sizeof(blob), p, text_len, "\n\r\v\f",
	    &blob_len, NULL, sodium_base64_VARIANT_ORIGINAL) != 0)
		return KEY_NONE;
	if ((key = blob_key(blob, blob_len)) == NULL)
		return KEY_NONE;
	memcpy(public_key, key, 32);
	return KEY_ED25519;
}

/*
 * One line: "principals [options] keytype base64 [comment]". Returns 1 for
 * an ed25519 key, 0 for a blank line, a comment or another key type, -1
 * with why for a line OpenSSH would refuse. The principals are a word that
 * ends at whitespace or at the second of two quotes, which are removed.
 */
static int
parse_line(char *line, struct signer *s, const char **why)
{
	char *p = line + strspn(line, " \t"), *principals, *options = NULL, *q;
	int key;

	/* OpenSSH passes over spaces and tabs only: after a carriage return
	 * at the start, the principals are empty and match nobody */
	if (*p == '#' || p[strspn(p, WHITESPACE)] == '\0')
		return 0;
	principals = p;
	if ((q = strpbrk(p, WHITESPACE "\"")) == NULL) {
		*why = "invalid line";
		return -1;
	}
	if (*q == '"') {
		memmove(q, q + 1, strlen(q));
		if ((q = strchr(q, '"')) == NULL) {
			*why = "invalid line";
			return -1;
		}
	}
	*q = '\0';
	p = q + 1 + strspn(q + 1, WHITESPACE);
	/* a key straight away, or options first */
	if ((key = read_key(p, s->public_key)) == KEY_NONE) {
		int quoted = 0;

		for (options = p; *p != '\0' && (quoted || (*p != ' ' && *p != '\t')); p++) {
			if (p[0] == '\\' && p[1] == '"')
				p++;
			else if (*p == '"')
				quoted = !quoted;
		}
		if (*p == '\0') {
			*why = quoted ? "invalid options" : "missing key";
			return -1;
		}
		*p++ = '\0';
		p += strspn(p, " \t");
		if ((key = read_key(p, s->public_key)) == KEY_NONE) {
			*why = "invalid key";
			return -1;
		}
	}
	if (options != NULL && (*why = parse_options(s, options)) != NULL)
		return -1;
	if (key != KEY_ED25519)
		return 0;
	s->principals = idem_estrdup(principals);
	return 1;
}

static void
signer_free(struct signer *s)
{
	free(s->principals);
	free(s->namespaces);
}

void
idem_signers_free(struct idem_signers *signers)
{
	size_t i;

	if (signers == NULL)
		return;
	for (i = 0; i < signers->n; i++)
		signer_free(&signers->list[i]);
	for (i = 0; i < signers->nskipped; i++)
		free(signers->skipped[i]);
	free(signers->list);
	free(signers->skipped);
	free(signers);
}

struct idem_signers *
idem_signers_load(const char *path, struct idem_error *err)
{
	struct idem_signers *signers;
	char *text;
	size_t len;

	if ((text = idem_read_file_max(path, IDEM_SIGNERS_FILE_MAX, &len, err)) == NULL)
		return NULL;
	signers = idem_signers_parse(path, text, len, err);
	free(text);
	return signers;
}

struct idem_signers *
idem_signers_parse(const char *name, char *text, size_t len, struct idem_error *err)
{
	struct idem_signers *signers;
	char *line, *end;
	long line_no = 0;

	if (sodium_init() < 0) {
		idem_error_set(err, IDEM_EXIT_ENV, "libsodium could not start");
		return NULL;
	}
	if ((signers = calloc(1, sizeof(*signers))) == NULL)
		idem_die(IDEM_EXIT_ENV, "calloc:");
	/* line by line, as getline reads them: a NUL byte ends its line only */
	for (line = text; line < text + len; line = end + 1) {
		struct signer s = { 0 };
		const char *why = NULL;
		int rc;

		if ((end = memchr(line, '\n', (size_t)(text + len - line))) == NULL)
			end = text + len;
		*end = '\0';
		line_no++;
		rc = parse_line(line, &s, &why);
		if (rc == 1) {
			signers->list = idem_ereallocarray(signers->list, signers->n + 1, sizeof(s));
			signers->list[signers->n++] = s;
			continue;
		}
		signer_free(&s);
		if (rc < 0) {
			char *msg;

			if (asprintf(&msg, "%s:%ld: %s", name, line_no, why) < 0)
				idem_die(IDEM_EXIT_ENV, "asprintf:");
			signers->skipped = idem_ereallocarray(signers->skipped, signers->nskipped + 1,
			    sizeof(char *));
			signers->skipped[signers->nskipped++] = msg;
		}
	}
	return signers;
}

const char *
idem_signers_skipped(const struct idem_signers *signers, size_t i)
{
	return i < signers->nskipped ? signers->skipped[i] : NULL;
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

/* Whether a line names a principal that its own list allows: some
 * comma-separated word of it that matches it. "!*" names nobody. */
static int
names_someone(const char *principals)
{
	char *copy = idem_estrdup(principals), *word, *rest = copy;
	int found = 0;

	while (!found && (word = strsep(&rest, ",")) != NULL)
		found = idem_signers_match(word, principals) == 1;
	free(copy);
	return found;
}

char *
idem_signers_find_for(const struct idem_signers *signers, const unsigned char public_key[32],
		      const char *principal, const char *namespace, time_t when,
		      struct idem_error *err)
{
	const char *reason = NULL;
	char *fp = fingerprint(public_key);
	size_t i;

	for (i = 0; i < signers->n; i++) {
		const struct signer *s = &signers->list[i];

		if (principal != NULL && idem_signers_match(principal, s->principals) != 1)
			continue;
		if (sodium_memcmp(s->public_key, public_key, 32) != 0)
			continue;
		/* a certificate authority signs certificates, and idem takes
		 * plain keys only */
		if (s->cert_authority) {
			reason = "is a cert-authority key, which signs only certificates";
			continue;
		}
		if (principal == NULL && !names_someone(s->principals)) {
			reason = "is on a line whose principals allow none of its names";
			continue;
		}
		if (s->namespaces != NULL && idem_signers_match(namespace, s->namespaces) != 1) {
			reason = "is not allowed to sign in this namespace";
			continue;
		}
		if ((s->valid_after != 0 && when < s->valid_after) ||
		    (s->valid_before != 0 && when > s->valid_before)) {
			reason = "is outside its validity window";
			continue;
		}
		free(fp);
		return idem_estrdup(s->principals);
	}
	if (reason)
		idem_error_set(err, IDEM_EXIT_FINDING, "key %s %s (namespace %s)", fp, reason, namespace);
	else if (principal != NULL)
		idem_error_set(err, IDEM_EXIT_FINDING, "key %s is not in allowed_signers for %s", fp,
		    principal);
	else
		idem_error_set(err, IDEM_EXIT_FINDING, "key %s is not in allowed_signers", fp);
	free(fp);
	return NULL;
}

char *
idem_signers_find(const struct idem_signers *signers, const unsigned char public_key[32],
		  const char *namespace, time_t when, struct idem_error *err)
{
	return idem_signers_find_for(signers, public_key, NULL, namespace, when, err);
}
