/* Fuzzes the idem-tsv reader; every row it accepts must come back the same
 * after being written and read again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tsv.h"

static void
round_trip(const struct idem_tsv_reader *r)
{
	struct idem_tsv_reader again;
	struct idem_error err;
	char *buf = NULL;
	size_t len = 0, i;
	FILE *f;

	if ((f = open_memstream(&buf, &len)) == NULL)
		fuzz_fail("open_memstream");
	if (idem_tsv_write_header(f) < 0 || idem_tsv_write_row(f, idem_kind_name(r->kind),
	    (const char *const *)r->fields + 1, r->nfields - 1) < 0)
		fuzz_fail("write");
	fclose(f);
	if ((f = fmemopen(buf, len, "r")) == NULL)
		fuzz_fail("fmemopen");
	idem_tsv_reader_init(&again, f, "again");
	if (idem_tsv_next(&again, &err) != IDEM_TSV_HEADER ||
	    idem_tsv_next(&again, &err) != IDEM_TSV_ROW)
		fuzz_fail("a row that was read and written is refused");
	if (again.kind != r->kind || again.nfields != r->nfields)
		fuzz_fail("a written row comes back with other fields");
	for (i = 0; i < r->nfields; i++) {
		if ((again.fields[i] == NULL) != (r->fields[i] == NULL) ||
		    (r->fields[i] != NULL && strcmp(again.fields[i], r->fields[i]) != 0))
			fuzz_fail("a written field comes back changed");
	}
	idem_tsv_reader_free(&again);
	fclose(f);
	free(buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	FILE *f;
	int rc;

	if (size == 0)
		return 0;
	if ((f = fmemopen((void *)data, size, "r")) == NULL)
		fuzz_fail("fmemopen");
	idem_tsv_reader_init(&r, f, "fuzz");
	while ((rc = idem_tsv_next(&r, &err)) > 0)
		if (rc == IDEM_TSV_ROW && r.kind != IDEM_KIND_UNKNOWN)
			round_trip(&r);
	idem_tsv_reader_free(&r);
	fclose(f);
	return 0;
}
