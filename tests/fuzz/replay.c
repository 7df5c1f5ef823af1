/* replay: runs a harness over files given as arguments, without libFuzzer,
 * so make check replays the corpora and the regression inputs with the
 * compiler and sanitizers of the normal build. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "error.h"
#include "file.h"

int
main(int argc, char *argv[])
{
	struct idem_error err;
	char *data;
	size_t len;
	int i;

	for (i = 1; i < argc; i++) {
		if ((data = idem_read_file(argv[i], &len, &err)) == NULL) {
			fprintf(stderr, "replay: %s\n", err.text);
			return 2;
		}
		LLVMFuzzerTestOneInput((const uint8_t *)data, len);
		free(data);
	}
	printf("replay: %d inputs\n", argc - 1);
	return 0;
}
