#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tsv.h"

#define MAX_FIELDS 24

static const struct {
	const char *name;
	const char *fields[MAX_FIELDS];
} kinds[IDEM_KIND_COUNT] = {
	[IDEM_KIND_SEED] = { "seed", { "path", "sha256", "rehearsal", "job_type", "queue",
		"database", "visibility_timeout_ms", "max_attempts", "sandbox_account",
		"effect_name", "effect_table", "key_columns", "key_scope",
		"duplicate_acceptor", "reconciliation_owner", "worker_image",
		"worker_version", "worker_command", "payload_schema", "cannot_reproduce" } },
	[IDEM_KIND_EXPECT] = { "expect", { "effects", "duplicates", "missing", "pending" } },
	[IDEM_KIND_SCENARIO] = { "scenario", { "name", "fault", "step", "attempt",
		"duplicates", "within_ms" } },
	[IDEM_KIND_JOB] = { "job", { "job_id", "business_key", "payload",
		"payload_sha256", "scenario" } },
	[IDEM_KIND_PUBLISH] = { "publish", { "job_id", "copy", "msg_id",
		"published_at", "status" } },
	[IDEM_KIND_STEP] = { "step", { "at", "worker", "pid", "name", "job_id", "attempt",
		"action" } },
	[IDEM_KIND_KILL] = { "kill", { "scenario", "job_id", "attempt", "step", "pid",
		"killed_at" } },
	[IDEM_KIND_ATTEMPT] = { "attempt", { "job_id", "msg_id", "attempt", "pid",
		"consumed_at", "committed_at", "acked_at", "rows_written", "branch" } },
	[IDEM_KIND_RECOVER] = { "recover", { "job_id", "msg_id", "killed_at", "acked_at",
		"recovery_ms" } },
	[IDEM_KIND_LOG] = { "log", { "at", "worker", "pid", "line" } },
	[IDEM_KIND_QUERY] = { "query", { "phase", "name", "sql" } },
	[IDEM_KIND_COUNT_ROW] = { "count", { "phase", "scope", "key", "expected", "observed" } },
	[IDEM_KIND_GUARD] = { "guard", { "kind", "name", "definition", "flags" } },
	[IDEM_KIND_PROBE] = { "probe", { "result", "sqlstate", "message", "sql" } },
	[IDEM_KIND_MEASURE] = { "measure", { "name", "value", "numerator", "denominator",
		"unit", "window_start", "window_end" } },
	[IDEM_KIND_DIGEST] = { "digest", { "phase", "sha256", "rows" } },
};

const char *
idem_kind_name(enum idem_kind kind)
{
	return kind >= 0 && kind < IDEM_KIND_COUNT ? kinds[kind].name : NULL;
}

size_t
idem_kind_nfields(enum idem_kind kind)
{
	size_t n = 0;

	if (kind < 0 || kind >= IDEM_KIND_COUNT)
		return 0;
	while (n < MAX_FIELDS && kinds[kind].fields[n] != NULL)
		n++;
	return n;
}

const char *
idem_kind_field_name(enum idem_kind kind, size_t field)
{
	if (field == 0 || field > idem_kind_nfields(kind))
		return "kind";
	return kinds[kind].fields[field - 1];
}

static enum idem_kind
lookup_kind(const char *name, size_t len)
{
	int k;

	for (k = 0; k < IDEM_KIND_COUNT; k++)
		if (strlen(kinds[k].name) == len && memcmp(kinds[k].name, name, len) == 0)
			return k;
	return IDEM_KIND_UNKNOWN;
}

void
idem_tsv_reader_init(struct idem_tsv_reader *r, FILE *in, const char *name)
{
	memset(r, 0, sizeof(*r));
	r->in = in;
	r->name = name;
	r->kind = IDEM_KIND_UNKNOWN;
}

void
idem_tsv_reader_free(struct idem_tsv_reader *r)
{
	free(r->line);
	free(r->decoded);
	free(r->fields);
	memset(r, 0, sizeof(*r));
}

int
idem_tsv_unescape(char *field, size_t *len)
{
	char *src = field, *dst = field, *end = field + *len;

	if (*len == 2 && field[0] == '\\' && field[1] == 'N')
		return 1;
	while (src < end) {
		if (*src != '\\') {
			*dst++ = *src++;
			continue;
		}
		if (src + 1 == end)
			return -1;
		switch (src[1]) {
		case '\\': *dst++ = '\\'; break;
		case 't': *dst++ = '\t'; break;
		case 'n': *dst++ = '\n'; break;
		case 'r': *dst++ = '\r'; break;
		default: return -1;
		}
		src += 2;
	}
	*dst = '\0';
	*len = (size_t)(dst - field);
	return 0;
}

static int
decode_fields(struct idem_tsv_reader *r, struct idem_error *err)
{
	size_t want = idem_kind_nfields(r->kind) + 1, n = 0, len, tabs = 0;
	char *p, *tab, *end;
	const char *t;
	int rc;

	for (t = r->line; (t = memchr(t, '\t', r->line_len - (size_t)(t - r->line))) != NULL; t++)
		tabs++;
	if (tabs + 1 != want)
		return idem_error_set(err, IDEM_EXIT_USAGE,
		    "%s:%ld: %s row has %zu fields, expected %zu", r->name, r->line_no,
		    kinds[r->kind].name, tabs, want - 1);
	if (r->decoded_cap < r->line_len + 1) {
		r->decoded_cap = r->line_len + 1;
		r->decoded = idem_erealloc(r->decoded, r->decoded_cap);
	}
	memcpy(r->decoded, r->line, r->line_len + 1);
	p = r->decoded;
	end = p + r->line_len;
	for (;;) {
		tab = memchr(p, '\t', (size_t)(end - p));
		if (tab == NULL)
			tab = end;
		*tab = '\0';
		if (n == r->fields_cap) {
			r->fields_cap = r->fields_cap ? r->fields_cap * 2 : 32;
			r->fields = idem_ereallocarray(r->fields, r->fields_cap, sizeof(*r->fields));
		}
		len = (size_t)(tab - p);
		rc = idem_tsv_unescape(p, &len);
		if (rc < 0)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: %s row, field %s: bad escape (only \\\\ \\t \\n \\r and \\N are allowed)",
			    r->name, r->line_no, kinds[r->kind].name,
			    idem_kind_field_name(r->kind, n));
		r->fields[n++] = rc == 1 ? NULL : p;
		if (tab == end)
			break;
		p = tab + 1;
	}
	r->nfields = n;
	return 0;
}

int
idem_tsv_next(struct idem_tsv_reader *r, struct idem_error *err)
{
	ssize_t got;
	size_t kind_len;

	errno = 0;
	got = getline(&r->line, &r->line_cap, r->in);
	if (got < 0) {
		if (ferror(r->in))
			return idem_error_set(err, IDEM_EXIT_ENV, "%s: read error:", r->name);
		if (!r->header_seen)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s: empty stream: expected the line \"#idem-tsv<TAB>1\"", r->name);
		return IDEM_TSV_EOF;
	}
	r->line_no++;
	r->line_len = (size_t)got;
	if (r->line_len > 0 && r->line[r->line_len - 1] == '\n')
		r->line[--r->line_len] = '\0';
	else
		return idem_error_set(err, IDEM_EXIT_USAGE,
		    "%s:%ld: last line has no newline (truncated stream?)", r->name, r->line_no);
	if (memchr(r->line, '\0', r->line_len) != NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: a NUL byte", r->name, r->line_no);
	if (!idem_utf8_valid(r->line, r->line_len))
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: invalid UTF-8",
		    r->name, r->line_no);
	if (memchr(r->line, '\r', r->line_len) != NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: a raw carriage return (CRLF line "
		    "ends?); write it as \\r", r->name, r->line_no);
	r->kind = IDEM_KIND_UNKNOWN;
	r->nfields = 0;
	if (!r->header_seen) {
		if (strncmp(r->line, "#idem-tsv\t", 10) != 0)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:1: not an idem-tsv stream: expected \"#idem-tsv<TAB>1\"", r->name);
		if (strcmp(r->line + 10, "1") != 0 && (strncmp(r->line + 10, "1.", 2) != 0 ||
		    r->line[12] == '\0' || strspn(r->line + 12, "0123456789") != strlen(r->line + 12)))
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:1: idem-tsv version %s is not supported (this is version 1)",
			    r->name, r->line + 10);
		r->header_seen = 1;
		return IDEM_TSV_HEADER;
	}
	if (r->line[0] == '#')
		return IDEM_TSV_COMMENT;
	kind_len = strcspn(r->line, "\t");
	if (kind_len == 0)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: row without a kind",
		    r->name, r->line_no);
	r->kind = lookup_kind(r->line, kind_len);
	if (r->kind != IDEM_KIND_UNKNOWN && decode_fields(r, err) < 0)
		return -1;
	return IDEM_TSV_ROW;
}

int
idem_tsv_pass(FILE *out, const struct idem_tsv_reader *r)
{
	if (fwrite(r->line, 1, r->line_len, out) != r->line_len || putc('\n', out) == EOF)
		return -1;
	return 0;
}

int
idem_tsv_write_header(FILE *out)
{
	return fputs(IDEM_TSV_MAGIC "\n", out) == EOF ? -1 : 0;
}

int
idem_tsv_write_field(FILE *out, const char *field)
{
	const char *p, *run;

	if (field == NULL)
		return fputs("\\N", out) == EOF ? -1 : 0;
	for (run = p = field; *p; p++) {
		const char *esc;

		switch (*p) {
		case '\\': esc = "\\\\"; break;
		case '\t': esc = "\\t"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		default: continue;
		}
		if (p > run && fwrite(run, 1, (size_t)(p - run), out) != (size_t)(p - run))
			return -1;
		if (fputs(esc, out) == EOF)
			return -1;
		run = p + 1;
	}
	if (p > run && fwrite(run, 1, (size_t)(p - run), out) != (size_t)(p - run))
		return -1;
	return 0;
}

int
idem_tsv_write_row(FILE *out, const char *kind, const char *const *fields, size_t n)
{
	size_t i;

	if (fputs(kind, out) == EOF)
		return -1;
	for (i = 0; i < n; i++)
		if (putc('\t', out) == EOF || idem_tsv_write_field(out, fields[i]) < 0)
			return -1;
	return putc('\n', out) == EOF ? -1 : 0;
}

int
idem_tsv_count(const struct idem_tsv_reader *r, size_t field, long long *out,
	       struct idem_error *err)
{
	const char *s = field < r->nfields ? r->fields[field] : NULL;
	char *end;

	*out = 0;
	if (s == NULL)
		return 0;
	errno = 0;
	*out = strtoll(s, &end, 10);
	if (errno || *end || end == s || *out < 0)
		return idem_error_set(err, IDEM_EXIT_USAGE,
		    "%s:%ld: %s row, field %s: expected a count, got \"%s\"", r->name, r->line_no,
		    idem_kind_name(r->kind), idem_kind_field_name(r->kind, field), s);
	return 0;
}

char *
idem_tsv_escape(const char *field)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	idem_tsv_write_field(f, field);
	if (fclose(f) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	return buf;
}
