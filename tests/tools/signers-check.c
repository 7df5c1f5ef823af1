/* signers-check: the signature check of verify-record(1), alone, with the
 * identity and the time as arguments, so that the command tests can hold
 * it against ssh-keygen -Y verify on the same inputs at the same instant.
 * Not installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sig.h"
#include "error.h"
#include "file.h"

static const char synopsis[] =
	"usage: signers-check [-I principal] -f allowed-signers -n namespace -s signature\n"
	"                     -t epoch-seconds < file\n";

int
main(int argc, char *argv[])
{
	const char *principal = NULL, *allowed = NULL, *namespace = NULL, *sig_path = NULL;
	const char *skipped;
	char *armor, *data, *who, *end;
	size_t armor_len, len, i;
	struct idem_signers *signers;
	struct idem_error err;
	struct idem_sig sig;
	long long when = -1;
	int c;

	argv0 = "signers-check";
	while ((c = getopt(argc, argv, "I:f:n:s:t:")) != -1) {
		switch (c) {
		case 'I': principal = optarg; break;
		case 'f': allowed = optarg; break;
		case 'n': namespace = optarg; break;
		case 's': sig_path = optarg; break;
		case 't':
			when = strtoll(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || when < 0)
				idem_usage(synopsis, IDEM_EXIT_USAGE);
			break;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (allowed == NULL || namespace == NULL || sig_path == NULL || when < 0 || optind != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if ((signers = idem_signers_load(allowed, &err)) == NULL ||
	    (armor = idem_read_file(sig_path, &armor_len, &err)) == NULL ||
	    (data = idem_read_file("-", &len, &err)) == NULL)
		idem_die_error(&err);
	for (i = 0; (skipped = idem_signers_skipped(signers, i)) != NULL; i++)
		idem_warn("%s: line skipped", skipped);
	/* as verify-record: the key must be trusted before the signature is checked */
	if (idem_sig_parse(&sig, armor, armor_len, namespace, &err) < 0 ||
	    (who = idem_signers_find_for(signers, sig.public_key, principal, namespace,
	    (time_t)when, &err)) == NULL)
		idem_die_error(&err);
	if (idem_sig_check(&sig, namespace, data, len, &err) < 0)
		idem_die_error(&err);
	printf("%s\n", who);
	free(who);
	free(armor);
	free(data);
	idem_signers_free(signers);
	idem_close_stdout();
	return 0;
}
