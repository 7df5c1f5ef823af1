#include <stdlib.h>

#include "tsv.h"
#include "unit.h"

/* Reads text as a stream; returns the status of the last call, the error in err. */
static int
read_all(const char *text, struct idem_error *err, int *rows, int *comments, int *kinds)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	struct idem_tsv_reader r;
	int rc;

	*rows = *comments = 0;
	idem_tsv_reader_init(&r, f, "t");
	while ((rc = idem_tsv_next(&r, err)) > 0) {
		if (rc == IDEM_TSV_ROW) {
			++*rows;
			if (r.kind != IDEM_KIND_UNKNOWN)
				++*kinds;
		}
		*comments += rc == IDEM_TSV_COMMENT;
	}
	idem_tsv_reader_free(&r);
	fclose(f);
	return rc;
}

static void
round_trip(const char *field, const char *name)
{
	char *escaped = idem_tsv_escape(field), *copy = strdup(escaped);
	size_t len = strlen(copy);
	int rc = idem_tsv_unescape(copy, &len);

	CHECK(strchr(escaped, '\t') == NULL && strchr(escaped, '\n') == NULL &&
	    strchr(escaped, '\r') == NULL, name);
	CHECK(rc == 0 && len == strlen(field) && memcmp(copy, field, len) == 0, name);
	free(escaped);
	free(copy);
}

int
main(void)
{
	struct idem_error err;
	int rows, comments, kinds = 0, rc;
	char *s, buf[64];
	size_t len;

	round_trip("plain", "round trip plain");
	round_trip("tab\there", "round trip tab");
	round_trip("line\nbreak\r\n", "round trip newline and CR");
	round_trip("back\\slash\\N\\t", "round trip backslash and a literal \\N");
	round_trip("\\N", "round trip the text \\N, not a null");
	round_trip("caf\xc3\xa9 \xe2\x82\xac", "round trip non-ASCII");
	round_trip("", "round trip empty");

	s = idem_tsv_escape(NULL);
	CHECK_STR(s, "\\N", "null is written as \\N");
	free(s);
	s = idem_tsv_escape("\\N");
	CHECK_STR(s, "\\\\N", "the text \\N is written escaped");
	free(s);
	strcpy(buf, "\\N");
	len = 2;
	CHECK(idem_tsv_unescape(buf, &len) == 1, "\\N alone is null");
	strcpy(buf, "a\\xb");
	len = 4;
	CHECK(idem_tsv_unescape(buf, &len) == -1, "unknown escape refused");
	strcpy(buf, "a\\");
	len = 2;
	CHECK(idem_tsv_unescape(buf, &len) == -1, "trailing backslash refused");

	rc = read_all("#idem-tsv\t1\n# comment\nexpect\t1\t0\t0\t0\nfuture\tx\ty\n", &err,
	    &rows, &comments, &kinds);
	CHECK(rc == IDEM_TSV_EOF && rows == 2 && comments == 1 && kinds == 1,
	    "header, comment, known and unknown kinds");

	rc = read_all("#idem-tsv\t1.3\n", &err, &rows, &comments, &kinds);
	CHECK(rc == IDEM_TSV_EOF, "minor version accepted");

	rc = read_all("", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "empty stream") && err.status == IDEM_EXIT_USAGE,
	    "empty stream refused");
	rc = read_all("seed\tx\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "t:1: not an idem-tsv stream"), "missing header refused");
	rc = read_all("#idem-tsv\t2\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "version 2 is not supported"), "version 2 refused");
	rc = read_all("#idem-tsv\t1\nexpect\t1\t0\t0\n", &err, &rows, &comments, &kinds);
	CHECK_STR(rc == -1 ? err.text : "", "t:2: expect row has 3 fields, expected 4",
	    "wrong field count names the line");
	rc = read_all("#idem-tsv\t1\n\nexpect\t1\t0\t0\t0\t9\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "t:2: row without a kind"), "empty line refused");
	rc = read_all("#idem-tsv\t1\nexpect\t1\t0\t0\t0\n\xff\n", &err, &rows, &comments, &kinds);
	CHECK_STR(rc == -1 ? err.text : "", "t:3: invalid UTF-8", "invalid UTF-8 names the line");
	rc = read_all("#idem-tsv\t1\njob\ta\\qb\tk\t{}\th\t\\N\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "t:2: job row, field job_id: bad escape"),
	    "bad escape names line and field");
	rc = read_all("#idem-tsv\t1\nexpect\t1\t0\t0\t0", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "no newline"), "truncated last line refused");
	rc = read_all("#idem-tsv\t1\nfuture\t\\q\n", &err, &rows, &comments, &kinds);
	CHECK(rc == IDEM_TSV_EOF, "unknown kinds are not decoded");

	rc = read_all("#idem-tsv\t1.x\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "version 1.x is not supported"), "version 1.x refused");
	rc = read_all("#idem-tsv\t1\nexpect\t1\t0\t0\t0\r\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "t:2: a raw carriage return"), "CRLF refused with a hint");
	rc = read_all("#idem-tsv\t1\nexpect\t1\t0\t0\t0\t\\q\n", &err, &rows, &comments, &kinds);
	CHECK_STR(rc == -1 ? err.text : "", "t:2: expect row has 5 fields, expected 4",
	    "the field count is checked before the escapes");
	{
		static const char nul[] = "#idem-tsv\t1\nexpect\t1\0\t0\t0\t0\n";
		FILE *f = fmemopen((void *)nul, sizeof(nul) - 1, "r");
		struct idem_tsv_reader r;

		idem_tsv_reader_init(&r, f, "t");
		idem_tsv_next(&r, &err);
		rc = idem_tsv_next(&r, &err);
		CHECK(rc == -1 && strstr(err.text, "t:2: a NUL byte"), "NUL refused by name");
		idem_tsv_reader_free(&r);
		fclose(f);
	}

	CHECK(idem_kind_nfields(IDEM_KIND_SEED) == 20, "seed has 20 fields");
	CHECK_STR(idem_kind_field_name(IDEM_KIND_JOB, JOB_PAYLOAD_SHA256), "payload_sha256",
	    "field names by position");
	return unit_done("tsv");
}
