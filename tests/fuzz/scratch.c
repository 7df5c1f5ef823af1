#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz.h"

static char dir[64], path[96];

static void
remove_scratch(void)
{
	unlink(path);
	rmdir(dir);
}

const char *
fuzz_scratch_file(const uint8_t *data, size_t size)
{
	const char *tmp = getenv("TMPDIR");
	size_t done = 0;
	ssize_t n;
	int fd;

	if (dir[0] == '\0') {
		snprintf(dir, sizeof(dir), "%s/idem-fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
		if (mkdtemp(dir) == NULL)
			fuzz_fail("cannot make a scratch directory");
		snprintf(path, sizeof(path), "%s/input", dir);
		atexit(remove_scratch);
	}
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
		fuzz_fail("cannot open the scratch file");
	while (done < size) {
		if ((n = write(fd, data + done, size - done)) <= 0)
			fuzz_fail("cannot write the scratch file");
		done += (size_t)n;
	}
	close(fd);
	return path;
}

void
fuzz_fail(const char *what)
{
	fprintf(stderr, "fuzz: %s\n", what);
	abort();
}
