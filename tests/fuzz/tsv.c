/* Fuzzes the idem-tsv reader; every row it accepts must come back the same
 * after being written and read again. A row is read in the context of the
 * rows before it (one seed row first, unique job ids, ...), so the rows
 * accepted are written as one stream and that stream is read again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tsv.h"

/* Reads size bytes of data as a stream named name and writes the rows it
 * accepts (only those of a known kind with known_only) as a new stream, in
 * *written of *len bytes; returns the number of rows written, and sets
 * *refused when the reader stopped at a row it refused. */
static size_t
rewrite(const char *data, size_t size, const char *name, int known_only, char **written,
	size_t *len, int *refused)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	size_t rows = 0;
	FILE *in, *out;
	int rc;

	if ((in = fmemopen((void *)data, size, "r")) == NULL ||
	    (out = open_memstream(written, len)) == NULL)
		fuzz_fail("fmemopen");
	if (idem_tsv_write_header(out) < 0)
		fuzz_fail("write");
	idem_tsv_reader_init(&r, in, name);
	while ((rc = idem_tsv_next(&r, &err)) > 0)
		if (rc == IDEM_TSV_ROW && (!known_only || r.kind != IDEM_KIND_UNKNOWN)) {
			if (idem_tsv_write_row(out, idem_kind_name(r.kind),
			    (const char *const *)r.fields + 1, r.nfields - 1) < 0)
				fuzz_fail("write");
			rows++;
		}
	idem_tsv_reader_free(&r);
	fclose(in);
	fclose(out);
	*refused = rc < 0;
	return rows;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *written = NULL, *again = NULL;
	size_t len = 0, again_len = 0, rows;
	int refused;

	if (size == 0)
		return 0;
	rows = rewrite((const char *)data, size, "fuzz", 1, &written, &len, &refused);
	if (rows > 0) {
		/* the rows written, read again and written again: the same bytes */
		if (rewrite(written, len, "again", 0, &again, &again_len, &refused) != rows || refused)
			fuzz_fail("a row that was read and written is refused");
		if (again_len != len || memcmp(again, written, len) != 0)
			fuzz_fail("a written row comes back changed");
		free(again);
	}
	free(written);
	return 0;
}
