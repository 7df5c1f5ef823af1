#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsse.h"
#include "sig.h"
#include "unit.h"
#include "file.h"

#define PREFIX "{\"payload\":\"eyJhIjoxfQ==\",\"payloadType\":\"application/vnd.in-toto+json\"," \
	"\"signatures\":[{\"keyid\":\"SHA256:FUbzFCgQ0auYiM36s72d5DhZmiY2AzG5QdyGbNxP4CY\",\"sig\":\""
#define KEY "tests/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519"

/* protocol.md, "Test Vectors" */
static void
test_pae(void)
{
	unsigned char *pae;
	size_t len;

	pae = idem_dsse_pae("http://example.com/HelloWorld", "hello world", 11, &len);
	CHECK(len == strlen("DSSEv1 29 http://example.com/HelloWorld 11 hello world") &&
	    memcmp(pae, "DSSEv1 29 http://example.com/HelloWorld 11 hello world", len) == 0,
	    "PAE of the spec's vector");
	free(pae);
	pae = idem_dsse_pae("", "", 0, &len);
	CHECK(len == 12 && memcmp(pae, "DSSEv1 0  0 ", len) == 0, "PAE of nothing: zeros, no padding");
	free(pae);
	pae = idem_dsse_pae("t", "a\0b", 3, &len);
	CHECK(len == 16 && memcmp(pae, "DSSEv1 1 t 3 a\0b", len) == 0, "PAE keeps a NUL byte of the body");
	free(pae);
}

static void
test_base64(void)
{
	static const char *const bad[] = { "aGVsbG8gd29ybGQ", "aGVsbG8gd29ybGQ==", "aGVsbG8gd29ybGR=",
		"aGVsbG8-d29ybGQ=", "aGVsbG8_d29ybGQ=", " aGVsbG8gd29ybGQ=", "aGVsbG8gd29ybGQ=\n",
		"aGVs\nbG8gd29ybGQ=", NULL };
	unsigned char *raw;
	char *text;
	size_t len, i;

	text = idem_dsse_base64("hello world", 11);
	CHECK_STR(text, "aGVsbG8gd29ybGQ=", "base64 of the spec's body");
	free(text);
	raw = idem_dsse_unbase64("aGVsbG8gd29ybGQ=", 16, &len);
	CHECK(raw != NULL && len == 11 && memcmp(raw, "hello world", 11) == 0, "base64 read back");
	free(raw);
	raw = idem_dsse_unbase64("", 0, &len);
	CHECK(raw != NULL && len == 0, "the base64 of nothing is nothing");
	free(raw);
	for (i = 0; bad[i]; i++) {
		raw = idem_dsse_unbase64(bad[i], strlen(bad[i]), &len);
		CHECK(raw == NULL, bad[i]);
		free(raw);
	}
}

/* The fixture key, copied where only its owner may read it. */
static int
load_fixture_key(struct idem_key *key, struct idem_error *err)
{
	char path[512], *text;
	size_t len;
	int rc;

	if ((text = idem_read_file(KEY, &len, err)) == NULL)
		return -1;
	snprintf(path, sizeof(path), "%s/idem-dsse-test-key.%ld", getenv("TMPDIR") ?
	    getenv("TMPDIR") : "/tmp", (long)getpid());
	rc = idem_write_file_atomic(path, text, len, err) < 0 || chmod(path, 0600) < 0 ? -1 :
	    idem_key_load(key, path, err);
	unlink(path);
	free(text);
	return rc;
}

static void
test_envelope(void)
{
	struct idem_error err;
	struct idem_dsse e;
	struct idem_key key, other;
	char keyid[IDEM_DSSE_KEYID_SIZE], *line, *flip;
	size_t i;

	if (load_fixture_key(&key, &err) < 0) {
		printf("not ok - %s\n", err.text);
		exit(1);
	}
	idem_dsse_keyid(key.public_key, keyid);
	CHECK_STR(keyid, "SHA256:FUbzFCgQ0auYiM36s72d5DhZmiY2AzG5QdyGbNxP4CY",
	    "the keyid is the fingerprint ssh-keygen -l prints");
	line = idem_dsse_sign(&key, IDEM_DSSE_INTOTO_TYPE, "{\"a\":1}", 7);
	CHECK(strchr(line, '\n') == line + strlen(line) - 1, "the envelope is one line");
	CHECK(strncmp(line, PREFIX, strlen(PREFIX)) == 0, "the envelope's members, sorted");
	CHECK(idem_dsse_parse(&e, line, strlen(line), &err) == 0, "the envelope parses");
	CHECK(e.body_len == 7 && memcmp(e.body, "{\"a\":1}", 7) == 0, "its payload read back");
	CHECK(idem_dsse_check(&e, key.public_key, &err) == 0, "its signature verifies");
	memcpy(&other, &key, sizeof(key));
	other.public_key[0] ^= 1;
	CHECK(idem_dsse_check(&e, other.public_key, &err) < 0 && strstr(err.text, "keyid") != NULL,
	    "another key is refused by its keyid first");
	e.body[0] = '[';
	CHECK(idem_dsse_check(&e, key.public_key, &err) < 0 && strstr(err.text, "does not verify"),
	    "a changed payload does not verify");
	idem_dsse_free(&e);
	/* a flipped byte of the line: refused, whichever byte it is */
	flip = idem_estrdup(line);
	for (i = 0; i + 1 < strlen(line); i++) {
		int refused;

		flip[i] ^= 1;
		refused = idem_dsse_parse(&e, flip, strlen(flip), &err) < 0 ||
		    idem_dsse_check(&e, key.public_key, &err) < 0;
		if (!refused)
			printf("# byte %zu flipped still verifies: %s", i, flip);
		CHECK(refused, "a flipped byte anywhere is refused");
		idem_dsse_free(&e);
		flip[i] = line[i];
	}
	free(flip);
	free(line);
	CHECK(idem_dsse_parse(&e, "{\"payload\":\"\",\"payloadType\":\"t\",\"signatures\":[]}", 48,
	    &err) < 0 && strstr(err.text, "exactly one"), "no signature is refused");
	CHECK(idem_dsse_parse(&e, "[]", 2, &err) < 0, "an array is not an envelope");
	idem_key_wipe(&key);
}

int
main(void)
{
	test_pae();
	test_base64();
	test_envelope();
	return unit_done("dsse");
}
