/* Fuzzes the idem-tsv reader; every row it accepts must come back the same
 * after being written and read again. A row is read in the context of the
 * rows before it (one seed row first, unique job ids, ...), so the rows
 * accepted are written as one stream and that stream is read again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tsv.h"

static void
write_row(FILE *f, const struct idem_tsv_reader *r)
{
	if (idem_tsv_write_row(f, idem_kind_name(r->kind), (const char *const *)r->fields + 1,
	    r->nfields - 1) < 0)
		fuzz_fail("write");
}

/* Reads the written rows again and writes what it read: the same bytes, or
 * a row came back changed. */
static void
round_trip(const char *written, size_t len, size_t rows)
{
	struct idem_tsv_reader again;
	struct idem_error err;
	char *buf = NULL;
	size_t buf_len = 0, n = 0;
	FILE *in, *out;
	int rc;

	if ((in = fmemopen((void *)written, len, "r")) == NULL ||
	    (out = open_memstream(&buf, &buf_len)) == NULL)
		fuzz_fail("fmemopen");
	if (idem_tsv_write_header(out) < 0)
		fuzz_fail("write");
	idem_tsv_reader_init(&again, in, "again");
	while ((rc = idem_tsv_next(&again, &err)) > 0)
		if (rc == IDEM_TSV_ROW) {
			write_row(out, &again);
			n++;
		}
	if (rc < 0 || n != rows)
		fuzz_fail("a row that was read and written is refused");
	fclose(out);
	if (buf_len != len || memcmp(buf, written, len) != 0)
		fuzz_fail("a written row comes back changed");
	idem_tsv_reader_free(&again);
	fclose(in);
	free(buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	char *written = NULL;
	size_t len = 0, rows = 0;
	FILE *f, *out;
	int rc;

	if (size == 0)
		return 0;
	if ((f = fmemopen((void *)data, size, "r")) == NULL ||
	    (out = open_memstream(&written, &len)) == NULL)
		fuzz_fail("fmemopen");
	if (idem_tsv_write_header(out) < 0)
		fuzz_fail("write");
	idem_tsv_reader_init(&r, f, "fuzz");
	while ((rc = idem_tsv_next(&r, &err)) > 0)
		if (rc == IDEM_TSV_ROW && r.kind != IDEM_KIND_UNKNOWN) {
			write_row(out, &r);
			rows++;
		}
	idem_tsv_reader_free(&r);
	fclose(f);
	fclose(out);
	if (rows > 0)
		round_trip(written, len, rows);
	free(written);
	return 0;
}
