#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "file.h"

int
main(void)
{
	char path[] = "/tmp/idem-file-test.XXXXXX", line[16], *mem = NULL, got[64], dir[8];
	size_t memlen = 0;
	FILE *from = tmpfile(), *to = NULL, *app = NULL, *m = open_memstream(&mem, &memlen);
	int fd;

	/* the directory of a path */
	idem_dir_of("records/r.yaml", path, sizeof(path));
	CHECK_STR(path, "records", "dir_of: a relative path");
	idem_dir_of("r.yaml", path, sizeof(path));
	CHECK_STR(path, ".", "dir_of: a bare name");
	idem_dir_of("/r.yaml", path, sizeof(path));
	CHECK_STR(path, "/", "dir_of: a name under the root");
	idem_dir_of("/a/b/c.yaml", path, sizeof(path));
	CHECK_STR(path, "/a/b", "dir_of: an absolute path");
	idem_dir_of("abcdefghij/k", dir, sizeof(dir));
	CHECK_STR(dir, "abcdefg", "dir_of: cut to its size, terminated");
	/* what a held file holds after its first line, behind what
	 * stdio holds for each side: to a file (the kernel copies),
	 * to a file opened to append and to memory (a buffer does) */
	strcpy(path, "/tmp/idem-file-test.XXXXXX");
	fd = mkstemp(path);
	CHECK(from != NULL && m != NULL && fd >= 0, "copy: files");
	if (from != NULL && m != NULL && fd >= 0) {
		fputs("first\nsecond\nthird\n", from);
		rewind(from);
		CHECK(fgets(line, sizeof(line), from) != NULL, "copy: the first line read");
		to = fdopen(fd, "w+");
		fputs("held:", to);
		CHECK(idem_copy_stream(from, to) == 0, "copy: to a file");
		rewind(to);
		CHECK(fgets(got, sizeof(got), to) != NULL, "copy: read back");
		CHECK_STR(got, "held:second\n", "copy: what stdio held, then the rest");
		fseek(from, 6, SEEK_SET);
		app = fopen(path, "a");
		CHECK(app != NULL && idem_copy_stream(from, app) == 0 && fclose(app) == 0,
		    "copy: to a file opened to append");
		fseek(from, 6, SEEK_SET);
		CHECK(idem_copy_stream(from, m) == 0 && fflush(m) == 0, "copy: to memory");
		CHECK_STR(mem, "second\nthird\n", "copy: memory holds the rest");
		fclose(to);
		to = fopen(path, "r");
		memset(got, 0, sizeof(got));
		CHECK(to != NULL && fread(got, 1, sizeof(got) - 1, to) > 0, "copy: the file");
		CHECK_STR(got, "held:second\nthird\nsecond\nthird\n", "copy: appended after");
	}
	if (to != NULL)
		fclose(to);
	/* from a pipe, whose first line stdio holds */
	{
		int p[2];
		FILE *r = NULL, *w = NULL;

		if (pipe(p) == 0 && (r = fdopen(p[0], "r")) != NULL &&
		    (w = fdopen(p[1], "w")) != NULL) {
			fputs("one\ntwo\n", w);
			fclose(w);
			w = NULL;
			CHECK(fgets(line, sizeof(line), r) != NULL, "copy: a pipe's first line");
			to = fopen(path, "w+");
			CHECK(to != NULL && idem_copy_stream(r, to) == 0, "copy: from a pipe");
			if (to != NULL) {
				rewind(to);
				memset(got, 0, sizeof(got));
				CHECK(fread(got, 1, sizeof(got) - 1, to) > 0, "copy: the pipe's rest");
				CHECK_STR(got, "two\n", "copy: what stdio held of the pipe");
				fclose(to);
				to = NULL;
			}
		}
		if (r != NULL)
			fclose(r);
		if (w != NULL)
			fclose(w);
	}
	if (from != NULL)
		fclose(from);
	if (m != NULL)
		fclose(m);
	free(mem);
	unlink(path);
	return unit_done("file");
}
