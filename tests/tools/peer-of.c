/* peer-of: the process that holds the client end of a database session,
 * as kill-at(1) finds it, among the process groups given, so that the
 * command tests can hold it against the process they started. Not
 * installed. */
#include <stdio.h>
#include <stdlib.h>

#include "kill-at/peer.h"
#include "error.h"

static const char synopsis[] = "usage: peer-of backend-pid client-port group ...\n";

int
main(int argc, char *argv[])
{
	struct idem_error err;
	pid_t *groups, found;
	int i;

	argv0 = "peer-of";
	if (argc < 4)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	groups = idem_ereallocarray(NULL, (size_t)argc - 3, sizeof(*groups));
	for (i = 3; i < argc; i++)
		groups[i - 3] = (pid_t)atoi(argv[i]);
	found = idem_peer_process((pid_t)atoi(argv[1]), atoi(argv[2]), groups, (size_t)argc - 3, &err);
	free(groups);
	if (found < 0)
		idem_die_error(&err);
	if (found == 0)
		return IDEM_EXIT_FINDING;
	printf("%d\n", (int)found);
	idem_close_stdout();
	return 0;
}
