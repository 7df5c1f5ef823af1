#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sig.h"
#include "unit.h"
#include "file.h"

#define DIR "tests/fixtures/records/"

static char *
slurp(const char *path, size_t *len)
{
	struct idem_error err;
	char *text = idem_read_file(path, len, &err);

	if (text == NULL) {
		printf("not ok - %s\n", err.text);
		exit(1);
	}
	return text;
}

/* The whole check verify-record makes: parse, find the key, verify. */
static int
verifies(const struct idem_signers *signers, const char *armor, size_t armor_len,
	 const char *data, size_t len, const char *namespace, time_t when)
{
	struct idem_error err;
	struct idem_sig sig;
	char *who;

	if (idem_sig_parse(&sig, armor, armor_len, namespace, &err) < 0)
		return 0;
	if ((who = idem_signers_find(signers, sig.public_key, namespace, when, &err)) == NULL)
		return 0;
	free(who);
	return idem_sig_check(&sig, namespace, data, len, &err) == 0;
}

/* OpenSSH's match_pattern_list, as ssh_config(5) PATTERNS describes it. */
static void
check_patterns(void)
{
	static const struct { const char *string, *patterns; int want; } cases[] = {
		{ "idem-record", "idem-record", 1 },
		{ "idem-record", "*", 1 },
		{ "idem-record", "*,!idem-record", -1 },
		{ "idem-record", "!idem-record,*", -1 },
		{ "idem-record", "", 0 },
		{ "idem-record", "git", 0 },
		{ "idem-record", "idem-*", 1 },
		{ "idem-record", "idem-recor?", 1 },
		{ "idem-record", "idem-record?", 0 },
		{ "idem-record", "git,idem-record", 1 },
		{ "idem-record", "git,,idem-record", 1 },
		{ "idem-record", "git, idem-record", 0 },
		{ "idem-record", "IDEM-RECORD", 0 },
		{ "idem-record", "[i]dem-record", 0 },
		{ "idem-record", "*-*-*", 0 },
		{ "a-b-c", "*-*-*", 1 },
		{ "", "", 0 },
		{ "", "*", 1 },
		{ "", "a,", 0 },
		{ "", ",a", 1 },
		{ "", "a,!", -1 },
		{ "*", "?", 1 },
		{ "bob", "!bob,*", -1 },
		{ "eve", "!bob,*", 1 },
		{ "!bob", "!bob,*", 1 },
		{ "aaab", "*a*ab", 1 },
		{ "aaac", "*a*ab", 0 },
	};
	char long_list[1100];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[128];

		snprintf(name, sizeof(name), "\"%s\" against \"%s\"", cases[i].string, cases[i].patterns);
		CHECK(idem_signers_match(cases[i].string, cases[i].patterns) == cases[i].want, name);
	}
	/* a pattern of 1023 characters or more matches nothing, and ends the
	 * list there, an earlier match or not */
	strcpy(long_list, "idem-record,");
	memset(long_list + 12, 'x', 1022);
	long_list[12 + 1022] = '\0';
	CHECK(idem_signers_match("idem-record", long_list) == 1, "a pattern of 1022 characters is one");
	strcat(long_list, "x");
	CHECK(idem_signers_match("idem-record", long_list) == 0, "a pattern of 1023 characters ends the list");
}

/* A copy of a fixture key that only its owner may read. */
static void
private_copy(const char *from, char *to, size_t size)
{
	struct idem_error err;
	size_t len;
	char *text = slurp(from, &len);

	snprintf(to, size, "%s/idem-sig-test-key.%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
	    (long)getpid());
	if (idem_write_file_atomic(to, text, len, &err) < 0 || chmod(to, 0600) < 0) {
		printf("not ok - %s\n", to);
		exit(1);
	}
	free(text);
}

static void
check_keys(void)
{
	struct idem_error err;
	struct idem_key key;
	char path[512], *armor;

	private_copy("tests/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519", path, sizeof(path));
	CHECK(idem_key_load(&key, path, &err) == 0, "the fixture key loads");
	armor = idem_sig_sign(&key, "idem-record", "data", 4);
	CHECK(armor != NULL, "and signs");
	free(armor);
	/* a seed that does not derive the public key signs what nothing verifies */
	key.secret_key[0] ^= 1;
	CHECK(idem_sig_sign(&key, "idem-record", "data", 4) == NULL,
	    "a signature that does not verify is never handed out");
	idem_key_wipe(&key);
	unlink(path);

	private_copy("tests/fixtures/keys/idem-test-fixture-DAMAGED-NOT-SECRET_ed25519", path, sizeof(path));
	CHECK(idem_key_load(&key, path, &err) < 0 && err.status == IDEM_EXIT_USAGE &&
	    strstr(err.text, ": the private key does not match its public key: the key file is "
	    "damaged") != NULL, "a key whose seed does not derive its public key is refused");
	unlink(path);
}

int
main(void)
{
	struct idem_error err;
	struct idem_signers *signers = idem_signers_load(DIR "allowed_signers", &err);
	size_t record_len, sig_len, forged_len, i, accepted = 0;
	char *record = slurp(DIR "sample.yaml", &record_len);
	char *sig = slurp(DIR "sample.yaml.sig", &sig_len);
	char *forged = slurp(DIR "forged.yaml", &forged_len);
	time_t now = time(NULL);

	CHECK(signers != NULL, "allowed_signers loads");
	CHECK(verifies(signers, sig, sig_len, record, record_len, "idem-record", now),
	    "the fixture record verifies");
	CHECK(!verifies(signers, sig, sig_len, forged, forged_len, "idem-record", now),
	    "the committed forgery does not");
	CHECK(!verifies(signers, sig, sig_len, record, record_len, "git", now),
	    "a signature for idem-record is not one for git");

	for (i = 0; i < record_len; i++) {
		record[i] ^= 0x01;
		accepted += verifies(signers, sig, sig_len, record, record_len, "idem-record", now);
		record[i] ^= 0x01;
	}
	CHECK(accepted == 0, "every single-byte change of the record is rejected");
	accepted = 0;
	for (i = 0; i < sig_len; i++) {
		int b;

		for (b = 0; b < 8; b++) {
			sig[i] ^= (char)(1 << b);
			accepted += verifies(signers, sig, sig_len, record, record_len, "idem-record", now);
			sig[i] ^= (char)(1 << b);
		}
	}
	CHECK(accepted == 0, "every single-bit change of the signature is rejected");
	CHECK(verifies(signers, sig, sig_len - 1, record, record_len, "idem-record", now),
	    "the armor may lack its final newline");

	{
		struct idem_key key;

		chmod("tests/fixtures/records/allowed_signers", 0644);
		CHECK(idem_key_load(&key, DIR "allowed_signers", &err) < 0 &&
		    strstr(err.text, "permissions 0644 are too open") != NULL,
		    "a key file others may read is refused before anything else");
		CHECK(idem_key_load(&key, "tests/fixtures", &err) < 0 && err.status == IDEM_EXIT_USAGE &&
		    strcmp(err.text, "tests/fixtures: not a key file but a directory") == 0,
		    "a directory given as a key is bad input");
	}
	check_patterns();
	check_keys();
	free(record);
	free(sig);
	free(forged);
	idem_signers_free(signers);
	return unit_done("sig");
}
