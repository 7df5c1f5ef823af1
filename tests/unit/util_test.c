#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "error.h"
#include "file.h"
#include "text.h"

int
main(void)
{
	char hex[65];

	CHECK(idem_parse_duration_ms("500ms") == 500, "duration ms");
	CHECK(idem_parse_duration_ms("2s") == 2000, "duration s");
	CHECK(idem_parse_duration_ms("1m") == 60000, "duration m");
	CHECK(idem_parse_duration_ms("1h") == 3600000, "duration h");
	CHECK(idem_parse_duration_ms("0s") == 0, "duration zero");
	CHECK(idem_parse_duration_ms("2") == -1, "duration needs a unit");
	CHECK(idem_parse_duration_ms("s") == -1, "duration needs a number");
	CHECK(idem_parse_duration_ms("-1s") == -1, "duration not negative");
	CHECK(idem_parse_duration_ms("1.5s") == -1, "duration integer only");
	CHECK(idem_parse_duration_ms("99999999999999999999s") == -1, "duration overflow");
	CHECK(idem_parse_duration_ms("9223372036854775807h") == -1, "duration unit overflow");

	CHECK(idem_utf8_valid("plain", 5), "utf8 ascii");
	CHECK(idem_utf8_valid("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14), "utf8 multibyte");
	CHECK(!idem_utf8_valid("\xc3", 1), "utf8 truncated");
	CHECK(!idem_utf8_valid("\xc0\xaf", 2), "utf8 overlong two bytes");
	CHECK(!idem_utf8_valid("\xe0\x80\xaf", 3), "utf8 overlong three bytes");
	CHECK(!idem_utf8_valid("\xed\xa0\x80", 3), "utf8 surrogate");
	CHECK(!idem_utf8_valid("\xf4\x90\x80\x80", 4), "utf8 above U+10FFFF");
	CHECK(!idem_utf8_valid("a\0b", 3), "utf8 NUL refused");
	CHECK(!idem_utf8_valid("\xff", 1), "utf8 invalid byte");

	{
		/* what a held file holds after its first line, behind what
		 * stdio holds for each side: to a file (the kernel copies),
		 * to a file opened to append and to memory (a buffer does) */
		char path[] = "/tmp/idem-util-test.XXXXXX", line[16], *mem = NULL, got[64];
		size_t memlen = 0;
		FILE *from = tmpfile(), *to = NULL, *app = NULL, *m = open_memstream(&mem, &memlen);
		int fd = mkstemp(path);

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
	}

	{
		char t[32];

		idem_format_time(1796000000123456LL, t);
		CHECK_STR(t, "2026-11-30T00:53:20.123456Z", "RFC 3339 with microseconds");
		idem_format_time(1796000000000007LL, t);
		CHECK_STR(t, "2026-11-30T00:53:20.000007Z", "the same second again, from the cache");
		idem_format_time(0, t);
		CHECK_STR(t, "1970-01-01T00:00:00.000000Z", "the epoch");
	}

	idem_sha256_hex("abc", 3, hex);
	CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	    "sha256 of abc (FIPS 180-2 vector)");
	return unit_done("util");
}
