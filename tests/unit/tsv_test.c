#include <limits.h>
#include <stdlib.h>

#include <jansson.h>

#include "tsv.h"
#include "unit.h"
#include "text.h"

/* A stream's first lines: the magic line and a good seed row. */
#define HEAD "#idem-tsv\t1\n" SEED_ROW
#define SEED_ROW SEED_ROW_BASE "\n"
#define SEED_ROW_BASE "seed\ts.yaml\t" \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\t" \
	"r\tt.job\tq\t\\N\t1000\t5\t\\N\t\\N\td.t\t[\"k\"]\tbusiness\t\\N\t\\N\t" \
	"\\N\t\\N\t\\N\t{\"k\":\"string\"}\t[]"
#define HASH "fb1c733540d60fd992c1dfcef293a78deed74a67ecb22b51650e816c0a7ca107"

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

	char into[64];
	char *end = idem_tsv_escape_to(into, field);

	CHECK(strchr(escaped, '\t') == NULL && strchr(escaped, '\n') == NULL &&
	    strchr(escaped, '\r') == NULL, name);
	CHECK(rc == 0 && len == strlen(field) && memcmp(copy, field, len) == 0, name);
	/* into a buffer, the same bytes as into a string */
	CHECK((size_t)(end - into) == strlen(escaped) && memcmp(into, escaped, strlen(escaped)) == 0,
	    name);
	free(escaped);
	free(copy);
}


/* The reader's message for a stream, or "" when it reads to the end. */
static const char *
refusal(const char *text, struct idem_error *err)
{
	int rows, comments, kinds;

	return read_all(text, err, &rows, &comments, &kinds) < 0 ? err->text : "";
}

/* 300000 job rows whose ids are job- and 0 to 299999 in width digits:
 * read to the end, and refused as want says with the rows of more after. */
static void
many_job_ids(int width, const char *more, const char *want, const char *name)
{
	struct idem_error err;
	size_t n = 300000, i, o;
	char *text = malloc(n * 100 + 512);

	o = (size_t)sprintf(text, "%s", HEAD);
	for (i = 0; i < n; i++)
		o += (size_t)sprintf(text + o, "job\tjob-%0*zu\tk\t{}\t%s\t\\N\n", width, i, HASH);
	CHECK_STR(refusal(text, &err), "", "300000 distinct job ids");
	strcpy(text + o, more);
	CHECK_STR(refusal(text, &err), want, name);
	free(text);
}

/* What the type of a kind's field says of a value: "" when it fits. */
static const char *
check(enum idem_kind kind, size_t field, const char *value)
{
	static char buf[256];
	const char *problem = idem_tsv_check_field(kind, field, value, strlen(value), buf,
	    sizeof(buf));

	return problem ? problem : "";
}

static int
fits(enum idem_kind kind, size_t field, const char *value)
{
	return *check(kind, field, value) == '\0';
}

/* The payload check agrees with jansson on whether a text is JSON. */
static void
same_as_jansson(const char *value)
{
	char *object = NULL, name[160];
	json_t *parsed;

	if (asprintf(&object, "{\"v\":%s}", value) < 0)
		return;
	parsed = json_loads(object, 0, NULL);
	snprintf(name, sizeof(name), "JSON %s: the check agrees with jansson", value);
	CHECK(fits(IDEM_KIND_JOB, JOB_PAYLOAD, object) == (parsed != NULL), name);
	json_decref(parsed);
	free(object);
}

/* The fields whose types are checked: a kind of row and a field of it. */
struct field {
	enum idem_kind kind;
	size_t field;
};
static const struct field effects = { IDEM_KIND_EXPECT, EXPECT_EFFECTS },
    rehearsal = { IDEM_KIND_SEED, SEED_REHEARSAL },
    visibility_timeout_ms = { IDEM_KIND_SEED, SEED_VISIBILITY_TIMEOUT_MS },
    msg_id = { IDEM_KIND_PUBLISH, PUBLISH_MSG_ID },
    step_worker = { IDEM_KIND_STEP, STEP_WORKER },
    step_attempt = { IDEM_KIND_STEP, STEP_ATTEMPT },
    published_at = { IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT },
    payload_sha256 = { IDEM_KIND_JOB, JOB_PAYLOAD_SHA256 },
    payload = { IDEM_KIND_JOB, JOB_PAYLOAD },
    cannot_reproduce = { IDEM_KIND_SEED, SEED_CANNOT_REPRODUCE },
    key_columns = { IDEM_KIND_SEED, SEED_KEY_COLUMNS },
    payload_schema = { IDEM_KIND_SEED, SEED_PAYLOAD_SCHEMA },
    publish_status = { IDEM_KIND_PUBLISH, PUBLISH_STATUS },
    fault = { IDEM_KIND_SCENARIO, SCENARIO_FAULT },
    job_id = { IDEM_KIND_JOB, JOB_ID },
    business_key = { IDEM_KIND_JOB, JOB_BUSINESS_KEY },
    measure_value = { IDEM_KIND_MEASURE, MEASURE_VALUE };

/* Values of fields, and what the type of the field says of each: FITS,
 * REFUSED (whatever the message says) or the message itself. */
#define FITS ""
#define REFUSED NULL
static const struct {
	const struct field *field;
	const char *value, *problem, *name;
} field_values[] = {
	/* counts: the one spelling of 0 .. LLONG_MAX */
	{ &effects, "0", FITS, "count 0" },
	{ &effects, "9223372036854775807", FITS, "count LLONG_MAX" },
	{ &effects, "9223372036854775808",
	    "\"9223372036854775808\" is out of range (at most 9223372036854775807)",
	    "count LLONG_MAX + 1" },
	{ &effects, "99999999999999999999",
	    "\"99999999999999999999\" is out of range (at most 9223372036854775807)",
	    "count far out of range" },
	{ &effects, "-1",
	    "expected a whole number from 0 (digits, no sign, no leading zeros), got \"-1\"",
	    "count -1" },
	{ &effects, "\x1b]0;x\x07",
	    "expected a whole number from 0 (digits, no sign, no leading zeros), got "
	    "\"\\x1b]0;x\\x07\"", "control characters are shown escaped" },
	{ &rehearsal, "invoice-line.v2_1", FITS, "a rehearsal name" },
	{ &rehearsal, "../x", REFUSED, "a rehearsal name with a path" },
	{ &rehearsal, "a/b", REFUSED, "a rehearsal name with a slash" },
	{ &rehearsal, ".hidden", REFUSED, "a rehearsal name with a dot first" },
	{ &rehearsal, "-x", REFUSED, "a rehearsal name like an option" },
	{ &effects, "+1", REFUSED, "count +1" },
	{ &effects, " 1", REFUSED, "count with a leading space" },
	{ &effects, "1 ", REFUSED, "count with a trailing space" },
	{ &effects, "", REFUSED, "count empty" },
	{ &effects, "01", REFUSED, "count with a leading zero" },
	{ &effects, "00", REFUSED, "count 00" },
	{ &effects, "1e3", REFUSED, "count 1e3" },
	{ &effects, "0x10", REFUSED, "count in hex" },
	{ &effects, "99999999999999999999x", REFUSED,
	    "a long run of digits with junk is not a number, not out of range" },
	{ &effects, "\xd9\xa1", REFUSED, "count in Arabic-Indic digits" },
	/* positive: from 1 */
	{ &visibility_timeout_ms, "0", REFUSED, "visibility timeout 0" },
	{ &visibility_timeout_ms, "1", FITS, "visibility timeout 1" },
	/* msg_id: a name, whatever the queue's ids look like */
	{ &msg_id, "1", FITS, "msg_id 1" },
	{ &msg_id, "0f8c2a52-7a3e-5d1e-9a0e-2b7b6f1f3c11", FITS, "msg_id a UUID" },
	{ &msg_id, "", REFUSED, "msg_id empty" },
	/* integer: signed */
	{ &step_worker, "-1", FITS, "worker -1" },
	{ &step_attempt, "-9223372036854775808", FITS, "integer LLONG_MIN" },
	{ &step_attempt, "-9223372036854775809",
	    "\"-9223372036854775809\" is out of range (from -9223372036854775808 to "
	    "9223372036854775807)", "integer LLONG_MIN - 1" },
	{ &step_attempt, "-0", REFUSED, "integer -0" },
	{ &step_attempt, "-", REFUSED, "integer -" },
	{ &step_attempt, "--1", REFUSED, "integer --1" },
	{ &step_attempt, "-01", REFUSED, "integer -01" },
	/* times: what idem_format_time writes, and real dates only */
	{ &published_at, "2026-11-29T13:48:32.247642Z", FITS, "a time" },
	{ &published_at, "2026-11-29T13:48:32.247642+00:00",
	    "expected a UTC time such as 2026-11-29T13:48:32.247642Z, got "
	    "\"2026-11-29T13:48:32.247642+00:00\"", "a time with an offset" },
	{ &published_at, "2026-11-29T14:48:32.247642+01:00", REFUSED, "a time in another zone" },
	{ &published_at, "2026-11-29T13:48:32Z", REFUSED, "a time without microseconds" },
	{ &published_at, "2026-11-29T13:48:32.247Z", REFUSED, "a time in milliseconds" },
	{ &published_at, "2026-11-29 13:48:32.247642Z", REFUSED, "a time with a space" },
	{ &published_at, "2026-11-29t13:48:32.247642z", REFUSED, "a time in lowercase" },
	{ &published_at, "2026-02-29T00:00:00.000000Z", REFUSED, "29 February of a common year" },
	{ &published_at, "2028-02-29T00:00:00.000000Z", FITS, "29 February of a leap year" },
	{ &published_at, "2100-02-29T00:00:00.000000Z", REFUSED, "29 February 2100" },
	{ &published_at, "2000-02-29T00:00:00.000000Z", FITS, "29 February 2000" },
	{ &published_at, "2026-11-31T00:00:00.000000Z", REFUSED, "31 November" },
	{ &published_at, "2026-13-01T00:00:00.000000Z", REFUSED, "month 13" },
	{ &published_at, "2026-11-00T00:00:00.000000Z", REFUSED, "day 0" },
	{ &published_at, "2026-11-29T24:00:00.000000Z", REFUSED, "hour 24" },
	{ &published_at, "2026-11-29T23:59:60.000000Z", REFUSED, "a leap second (never written)" },
	{ &published_at, "out-of-range", REFUSED, "no time" },
	/* hashes */
	{ &payload_sha256, HASH, FITS, "a SHA-256" },
	{ &payload_sha256, "FB1C733540D60FD992C1DFCEF293A78DEED74A67ECB22B51650E816C0A7CA107",
	    "expected a SHA-256 in 64 lowercase hex digits, got "
	    "\"FB1C733540D60FD992C1DFCEF293A78DEED74A67...\"",
	    "an uppercase SHA-256, cut in the message" },
	{ &payload_sha256, HASH "0", REFUSED, "65 digits" },
	{ &payload_sha256, HASH + 1, REFUSED, "63 digits" },
	{ &payload_sha256, "gb1c733540d60fd992c1dfcef293a78deed74a67ecb22b51650e816c0a7ca107",
	    REFUSED, "a g" },
	/* JSON */
	{ &payload, "{\"id\":1}", FITS, "a payload" },
	{ &payload, "[1]", "expected a JSON object, got \"[1]\"", "a payload that is an array" },
	{ &payload, "{\"id\":}", "not JSON (at byte 7): \"{\\\"id\\\":}\"",
	    "a payload that is not JSON" },
	{ &cannot_reproduce, "[\"a\",\"b\"]", FITS, "cannot_reproduce" },
	{ &cannot_reproduce, "[]", FITS, "cannot_reproduce empty" },
	{ &cannot_reproduce, "[\"a\",[\"b\"]]", REFUSED, "cannot_reproduce with a nested array" },
	{ &key_columns, "[\"invoice_id\",\"line_no\"]", FITS, "key_columns" },
	{ &key_columns, "[]", "expected a JSON array of one or more strings, got \"[]\"",
	    "key_columns empty" },
	{ &key_columns, "[\"a\",1]", REFUSED, "key_columns with a number" },
	{ &key_columns, "\"a\"", REFUSED, "key_columns a string" },
	{ &key_columns, "invoice_id", REFUSED, "key_columns not JSON" },
	{ &payload_schema, "[]", REFUSED, "payload_schema an array" },
	/* enumerations, names, decimals */
	{ &publish_status, "published", FITS, "status published" },
	{ &publish_status, "existing", FITS, "status existing" },
	{ &publish_status, "publish", "expected one of published, existing; got \"publish\"",
	    "status, a prefix of a value" },
	{ &publish_status, "Published", REFUSED, "status in capitals" },
	{ &publish_status, "published existing", REFUSED, "status two values" },
	{ &publish_status, "", REFUSED, "status empty" },
	{ &fault, "same-key", FITS, "fault same-key" },
	{ &fault, "timeout", REFUSED, "fault timeout" },
	{ &job_id, "", "empty", "an empty job id" },
	{ &business_key, "", FITS, "an empty business key is text" },
	{ &measure_value, "12.500", FITS, "decimal 12.500" },
	{ &measure_value, "7", FITS, "decimal 7" },
	{ &measure_value, ".5", REFUSED, "decimal .5" },
	{ &measure_value, "1.", REFUSED, "decimal 1." },
	{ &measure_value, "-1", REFUSED, "decimal -1" },
	{ &measure_value, "nan", REFUSED, "decimal nan" },
};

static void
types(void)
{
	static const char *const json_samples[] = {
		"1", "-0", "0.5", "1e5", "1E-5", "-1.25e+3", "01", "1.", ".5", "-", "+1", "1e",
		"\"\"", "\"\\u00e9\"", "\"caf\xc3\xa9\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
		"\"\\x\"", "\"\\u12\"", "\"\\u12g4\"", "\"\\ud83d\\ude00\"", "\"\\udc00\"",
		"\"\\ud800\"", "\"\\ud800x\"", "\"\\ud800\\u0041\"", "\"\\u0000\"", "\"a\tb\"",
		"\"open", "true", "false", "null", "tru", "nul", "True", "[]", "[1,[2,{}]]",
		"[1,]", "[,1]", "{\"a\":1,}", "{\"a\" 1}", "{1:2}", "{\"\":0}",
		"{\"a\":1,\"a\":2}", " [ 1 , 2 ] ", "[1]x", "[1] [2]", NULL
	};
	char deep[2 * 2049 + 16];
	size_t i;

	for (i = 0; i < sizeof(field_values) / sizeof(field_values[0]); i++) {
		const struct field *f = field_values[i].field;
		const char *got = check(f->kind, f->field, field_values[i].value);

		if (field_values[i].problem == REFUSED)
			CHECK(*got != '\0', field_values[i].name);
		else
			CHECK_STR(got, field_values[i].problem, field_values[i].name);
	}
	/* what idem_format_time writes fits a time */
	for (i = 0; i < 4; i++) {
		static const long long us[] = { 0, 951782400000000LL, 1796997599999999LL,
			253402300799999999LL };
		char t[32];

		idem_format_time(us[i], t);
		CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, t), "idem_format_time's times fit");
	}
	for (i = 0; json_samples[i]; i++)
		same_as_jansson(json_samples[i]);
	/* as deep as jansson goes, 2048 levels, and no deeper */
	for (i = 2048; i <= 2049; i++) {
		char *p = deep;
		size_t j;
		json_t *parsed;

		p += sprintf(p, "{\"a\":");
		for (j = 1; j < i; j++)
			*p++ = '[';
		for (j = 1; j < i; j++)
			*p++ = ']';
		strcpy(p, "}");
		parsed = json_loads(deep, 0, NULL);
		CHECK(fits(IDEM_KIND_JOB, JOB_PAYLOAD, deep) == (i == 2048) && (parsed != NULL) == (i == 2048),
		    "JSON nested 2048 deep is read, 2049 deep refused, as jansson does");
		json_decref(parsed);
	}
}

/* The message for the first len bytes of text read as a stream, or "". */
static const char *
refusal_of(const char *text, size_t len, struct idem_error *err)
{
	FILE *f = fmemopen((void *)text, len, "r");
	struct idem_tsv_reader r;
	int rc;

	idem_tsv_reader_init(&r, f, "t");
	while ((rc = idem_tsv_next(&r, err)) > 0)
		;
	idem_tsv_reader_free(&r);
	fclose(f);
	return rc < 0 ? err->text : "";
}

/* A NUL, a carriage return or a byte that is not UTF-8 is refused by name
 * wherever it stands on a line, in its first bytes as in its last; an
 * escape or \N is decoded wherever it stands. */
static void
every_byte(void)
{
	static const char *const bad[][2] = {
		{ "\r", "t:3: a raw carriage return" }, { "", "t:3: a NUL byte" },
		{ "\xff", "t:3: invalid UTF-8" }, { "\x80", "t:3: invalid UTF-8" },
	};
	const char row[] = "job\tgen-1\t[\"k-1\",1]\t{\"a\":1}\t" HASH "\t\\N\n";
	char text[1024], name[96], pad[40];
	struct idem_error err;
	size_t head = strlen(HEAD), i, b, wrong;

	for (b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
		for (i = 0, wrong = 0; i < sizeof(row) - 2; i++) {
			memcpy(text, HEAD, head);
			memcpy(text + head, row, sizeof(row));
			text[head + i] = bad[b][0][0];
			if (strncmp(refusal_of(text, head + sizeof(row) - 1, &err), bad[b][1],
			    strlen(bad[b][1])) != 0)
				wrong++;
		}
		snprintf(name, sizeof(name), "%s at every byte of a job row", bad[b][1] + 5);
		CHECK(wrong == 0, name);
	}
	for (i = 0, wrong = 0; i < sizeof(pad) - 1; i++) {
		struct idem_tsv_reader r;
		FILE *f;

		memset(pad, 'k', i);
		pad[i] = '\0';
		snprintf(text, sizeof(text), HEAD "job\tgen-1\t%s\\t\t{}\t" HASH "\t\\N\n"
		    "job\tgen-2\t%s\t{}\t" HASH "\t\\N\n"
		    "log\t2026-11-29T13:48:32.247642Z\t0\t1\t%s\xc3\xa9\\t\n", pad, pad, pad);
		f = fmemopen(text, strlen(text), "r");
		idem_tsv_reader_init(&r, f, "t");
		while (idem_tsv_next(&r, &err) > 0 && r.kind != IDEM_KIND_JOB)
			;
		if (r.kind != IDEM_KIND_JOB || strncmp(r.fields[JOB_BUSINESS_KEY], pad, i) != 0 ||
		    strcmp(r.fields[JOB_BUSINESS_KEY] + i, "\t") != 0 || r.fields[JOB_SCENARIO] != NULL)
			wrong++;
		if (idem_tsv_next(&r, &err) != IDEM_TSV_ROW || r.kind != IDEM_KIND_JOB ||
		    strcmp(r.fields[JOB_BUSINESS_KEY], pad) != 0 || r.fields[JOB_SCENARIO] != NULL)
			wrong++;
		/* a non-ASCII byte among a line's last bytes: the line is not
		 * plain, and an escape after it is decoded all the same */
		if (idem_tsv_next(&r, &err) != IDEM_TSV_ROW || r.kind != IDEM_KIND_LOG ||
		    strncmp(r.fields[LOG_LINE], pad, i) != 0 ||
		    strcmp(r.fields[LOG_LINE] + i, "\xc3\xa9\t") != 0)
			wrong++;
		idem_tsv_reader_free(&r);
		fclose(f);
	}
	CHECK(wrong == 0, "an escape and \\N are decoded wherever they stand on a line");
}

/* Escaped fields and what idem_tsv_unescape makes of them: 1 for \N, the
 * null, -1 for what it refuses. */
static const struct {
	const char *field;
	int want;
	const char *name;
} unescapes[] = {
	{ "\\N", 1, "\\N alone is null" },
	{ "a\\xb", -1, "unknown escape refused" },
	{ "a\\", -1, "trailing backslash refused" },
};

/* Streams the reader refuses with a message that holds the words given. */
static const struct {
	const char *text, *words, *name;
} refused_streams[] = {
	{ "seed\tx\n", "t:1: not an idem-tsv stream", "missing header refused" },
	{ "#idem-tsv\t2\n", "version 2 is not supported", "version 2 refused" },
	{ HEAD "\nexpect\t1\t0\t0\t0\t9\n", "t:3: row without a kind", "empty line refused" },
	{ HEAD "job\ta\\qb\tk\t{}\th\t\\N\n", "t:3: job row, field job_id: bad escape",
	    "bad escape names line and field" },
	{ HEAD "expect\t1\t0\t0\t0", "no newline", "truncated last line refused" },
	{ "#idem-tsv\t1.x\n", "version 1.x is not supported", "version 1.x refused" },
	{ HEAD "expect\t1\t0\t0\t0\r\n", "t:3: a raw carriage return", "CRLF refused with a hint" },
};

/* Streams and the reader's whole message for each, "" for those it reads to
 * the end. */
static const struct {
	const char *text, *message, *name;
} streams[] = {
	{ "#idem-tsv\t1.3\n" SEED_ROW, "", "minor version accepted" },
	{ HEAD "future\t\\q\n", "", "unknown kinds are not decoded" },
	{ HEAD "digest\tafter\t0\n", "t:3: digest row has 2 fields, expected 3",
	    "wrong field count names the line" },
	{ HEAD "expect\t1\t0\t0\n", "t:3: expect row has 3 fields, expected 4 to 6",
	    "a kind extended since 1.0 takes its old count or its new one" },
	{ HEAD "expect\t1\t0\t0\t0\n\xff\n", "t:4: invalid UTF-8", "invalid UTF-8 names the line" },
	{ HEAD "expect\t1\t0\t0\t0\t0\tpass\t\\q\n", "t:3: expect row has 7 fields, expected 4 to 6",
	    "the field count is checked before the escapes" },
	{ HEAD "kill\tk\ta\t1\tafter-commit\t42\n", "t:3: kill row has 5 fields, expected 6 to 7",
	    "a kind with fields of 1.1 says both counts" },
	{ HEAD "kill\tk\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\tdisk\n",
	    "t:3: kill row, field observed: expected one of database, socket, vendor; got \"disk\"",
	    "observed is database, socket or vendor" },

	/* no escape makes a NUL: \0 is refused, \\0 is a backslash and a zero */
	{ HEAD "job\ta\\0\tk\t{}\t" HASH "\t\\N\n",
	    "t:3: job row, field job_id: bad escape (only \\\\ \\t \\n \\r and \\N are allowed)",
	    "the escape \\0 is refused" },
	{ HEAD "job\ta\\\\0\tk\t{}\t" HASH "\t\\N\n", "", "an escaped backslash before 0 is text" },

	/* every field has its type; the message names line, kind, field and value */
	{ HEAD "expect\t1\t0\t\\N\t0\n", "t:3: expect row, field missing: missing (\\N)",
	    "\\N where a field may not be missing" },
	{ HEAD "job\ta\tk\t{}\t" HASH "\t\\N\n", "", "\\N where it may be" },
	{ HEAD "publish\ta\t0\t1\t2026-11-29T13:48:32.247642Z\tsent\n",
	    "t:3: publish row, field status: expected one of published, existing; got \"sent\"",
	    "a status that is no status" },
	{ HEAD "job\ta\tk\t{\"a\":1,}\t" HASH "\t\\N\n",
	    "t:3: job row, field payload: not JSON (at byte 8): \"{\\\"a\\\":1,}\"",
	    "a payload that is not JSON, with where" },
	{ HEAD "job\ta\tk\\tl\t{\"k\":\"x\\ty\"}\t" HASH "\t\\N\n",
	    "t:3: job row, field payload: not JSON (at byte 8): \"{\\\"k\\\":\\\"x\\ty\\\"}\"",
	    "a raw tab in a JSON string, shown escaped" },

	/* the rules of the stream as a whole */
	{ "#idem-tsv\t1\n# no seed\nfuture\tx\n", "t: no seed row: start the stream with seed-gen",
	    "a stream without a seed row" },
	{ "#idem-tsv\t1\nexpect\t1\t0\t0\t0\n",
	    "t:2: an expect row before the seed row; start the stream with seed-gen",
	    "a row before the seed row" },
	{ "#idem-tsv\t1\nfuture\tx\n# c\n" SEED_ROW, "",
	    "comments and unknown kinds before the seed row" },
	{ HEAD SEED_ROW, "t:3: a second seed row", "two seed rows" },
	/* 1.10: an adapter file and its SHA-256 at the end of the seed row */
	{ "#idem-tsv\t1.10\n" SEED_ROW_BASE "\tteam-jobs\tfalse\t\\N\tq/team.sql\t" HASH "\n"
	    "queue\tteam-jobs\tq\t\\N\n", "", "a kind of the team's own with its adapter file" },
	{ "#idem-tsv\t1.10\n" SEED_ROW_BASE "\tteam-jobs\tfalse\t\\N\n",
	    "t:2: seed row, field queue_kind: team-jobs has no adapter built in (idem pg-boss "
	    "graphile-worker have), and the row names no adapter file",
	    "a kind of the team's own without its adapter file" },
	{ "#idem-tsv\t1.10\n" SEED_ROW_BASE "\tidem\tfalse\t\\N\tq/team.sql\t\\N\n",
	    "t:2: seed row, field adapter_sha256: missing (\\N), but adapter is there",
	    "an adapter file without its SHA-256" },
	{ "#idem-tsv\t1.10\n" SEED_ROW_BASE "\tTeam\tfalse\t\\N\tq/team.sql\t" HASH "\n",
	    "t:2: seed row, field queue_kind: expected a queue's kind: 1 to 64 lowercase letters, "
	    "digits and -, not first, got \"Team\"", "a kind that is no kind" },
	{ HEAD "expect\t1\t0\t0\t0\nexpect\t1\t0\t0\t0\n", "t:4: a second expect row",
	    "two expect rows" },
	{ HEAD "database\tid-1\tidem\t15.18 (Debian)\t150018\tread committed\n", "",
	    "a database row (1.6)" },
	{ HEAD "database\tid-1\tidem\t15.18\t150018\tread committed\n"
	    "database\tid-1\tidem\t15.18\t150018\tread committed\n", "t:4: a second database row",
	    "two database rows" },
	{ HEAD "database\tid-1\tidem\t15.18\t15.18\tread committed\n",
	    "t:3: database row, field server_version_num: expected a whole number from 0 (digits, "
	    "no sign, no leading zeros), got \"15.18\"", "a database row's version number is a count" },
	{ HEAD "job\ta\tk\t{}\t" HASH "\t\\N\njob\tb\tk\t{}\t" HASH "\t\\N\n"
	    "job\ta\tl\t{}\t" HASH "\t\\N\n",
	    "t:5: job row, field job_id: job \"a\" appears twice in the stream", "a job id twice" },
	{ HEAD "scenario\ts\tkill\tbefore-commit\t1\t0\t0\n" "job\ta\tk\t{}\t" HASH "\ts\n", "",
	    "a job of a scenario" },
	{ HEAD "job\ta\tk\t{}\t" HASH "\ts\n",
	    "t:3: job row, field scenario: no scenario row named \"s\" before it",
	    "a job of a scenario not declared" },
	{ HEAD "scenario\ts\tkill\tbefore-commit\t1\t0\t0\n"
	    "scenario\ts\trace\tbefore-write\t\\N\t1\t0\n",
	    "t:4: scenario row, field name: scenario \"s\" appears twice in the stream",
	    "a scenario name twice" },
	/* the rows of 1.7: a stall scenario, its until step, stall and lease rows */
	{ HEAD "scenario\ts\tstall\tbefore-commit\t1\t0\t0\tbefore-ack\n", "",
	    "a stall scenario with an until step (1.7)" },
	{ HEAD "scenario\ts\tstall\tafter-commit\t1\t0\t0\t\\N\n", "",
	    "a stall scenario that runs to the ack (1.7)" },
	{ HEAD "scenario\ts\tkill\tbefore-commit\t1\t0\t0\tbefore-ack\n",
	    "t:3: scenario row, field until: a step for a stall only, not for a kill",
	    "an until step on a kill" },
	{ HEAD "scenario\ts\tstall\tbefore-commit\t1\t0\t0\t\n",
	    "t:3: scenario row, field until: empty", "an empty until step" },
	{ HEAD "scenario\ts\tstall\tbefore-commit\t1\t0\t0\tacked\t1\tx\n",
	    "t:3: scenario row has 9 fields, expected 6 to 8", "a scenario row with a field too many" },
	{ HEAD "stall\ts\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\t2026-11-29T13:48:32.247642Z\tacked\tsocket\n", "",
	    "a stall row, released" },
	{ HEAD "stall\ts\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\t\\N\tbound\tdatabase\n", "",
	    "a stall row never released" },
	{ HEAD "stall\ts\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\t\\N\tlate\tdatabase\n",
	    "t:3: stall row, field release: expected one of acked, until, blocked, bound; got \"late\"",
	    "a stall row's release is one of four" },
	{ HEAD "stall\ts\ta\t0\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\t\\N\tbound\tdatabase\n",
	    "t:3: stall row, field attempt: expected a whole number from 1 (digits, no sign, no "
	    "leading zeros), got \"0\"", "a stall row's attempt is positive" },
	{ HEAD "stall\ts\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\t\\N\tbound\n",
	    "t:3: stall row has 8 fields, expected 9", "a stall row has no field added since" },
	{ HEAD "lease\t2026-11-29T13:48:32.247642Z\t7\ta\t1\tstall\n", "", "a lease row" },
	{ HEAD "lease\t2026-11-29T13:48:32.247642Z\t7\ta\t1\tlost\n",
	    "t:3: lease row, field why: expected one of kill, stall, exit, bound; got \"lost\"",
	    "a lease row's why is one of four" },
	{ HEAD "lease\t2026-11-29T13:48:32.247642Z\t\\N\ta\t1\tkill\n", "t:3: lease row, field msg_id: missing (\\N)",
	    "a lease row names its message" },
	{ HEAD "missed\tstall\ts\ta\t1\tbefore-ack\n", "", "a stall never reached (1.7)" },
	/* the rows of 1.8: the vendor faults of an answer lost, late or
	 * forgotten, the keys a business key's calls sent, the pending check */
	{ HEAD "scenario\ts\tvendor-lost-reply\t\\N\t\\N\t0\t0\t\\N\t\\N\n", "",
	    "a lost reply (1.8)" },
	{ HEAD "scenario\ts\tvendor-late-reply\t\\N\t\\N\t0\t0\t\\N\t3000\n", "",
	    "a late reply and its delay (1.8)" },
	{ HEAD "scenario\ts\tvendor-late-reply\t\\N\t\\N\t0\t0\t\\N\t\\N\n",
	    "t:3: scenario row, field vendor_ms: required for a vendor-late-reply scenario",
	    "a late reply with no delay" },
	{ HEAD "scenario\ts\tvendor-late-reply\t\\N\t\\N\t0\t0\t\\N\t60001\n",
	    "t:3: scenario row, field vendor_ms: a delay from 1 to 60000", "a late reply too late" },
	{ HEAD "scenario\ts\tvendor-forget-keys\texternal-call\t1\t0\t0\t\\N\t0\n",
	    "t:3: scenario row, field vendor_ms: a window of at least 1", "keys forgotten at once" },
	{ HEAD "external\tp\t[\"k\"]\ttrue\tt\to\t[\"k\"]\tstatus\t\\N\n",
	    "t:3: external row, field pending_settled: pending_state and pending_settled go together",
	    "a pending state without its settled values" },
	{ HEAD "scenario\ts\tkill\tbefore-commit\t1\t0\t0\t\\N\t5\n",
	    "t:3: scenario row, field vendor_ms: only for a vendor-late-reply or "
	    "vendor-forget-keys scenario, not for a kill", "a kill with a vendor delay" },
	{ HEAD "scenario\ts\tvendor-forget-keys\texternal-call\t1\t0\t0\t\\N\t86400000\n", "",
	    "keys forgotten after a kill (1.8)" },
	{ HEAD "scenario\ts\tvendor-forget-keys\t\\N\t\\N\t0\t0\t\\N\t86400000\n",
	    "t:3: scenario row, field step: required for a vendor-forget-keys scenario: the step "
	    "of its kill", "keys forgotten with no kill" },
	{ HEAD "call\t2026-11-29T13:48:32.247642Z\t0\t42\tPOST\t/v1/charges\tk1\t" HASH
	    "\tinv-1\t200\tlate\tyes\tex_000001\t3\t2026-11-29T13:48:35.247642Z\n", "",
	    "a late answer, numbered, with when it went (1.8)" },
	{ HEAD "call\t2026-11-29T13:48:32.247642Z\t0\t42\tPOST\t/v1/charges\tk1\t" HASH
	    "\tinv-1\t0\tlost\tyes\tex_000001\t1\t\\N\n", "", "a lost answer (1.8)" },
	{ HEAD "forgot\t2026-11-29T13:48:32.247642Z\tinv-1\tk1\t1\t86400000\n", "",
	    "a key the vendor forgot" },
	{ HEAD "rekeyed\tinv-1\t[\"k1\",null]\t[1,4]\t1\n", "", "a business key's keys changed" },
	{ HEAD "rekeyed\tinv-1\t{}\t[1,4]\t1\n",
	    "t:3: rekeyed row, field keys: expected a JSON array, got \"{}\"",
	    "a rekeyed row's keys are a list" },
	{ HEAD "pending_call\tinv-1\tyes\t1\tbilling\towned\n", "", "a killed call's pending row" },
	{ HEAD "pending_call\tinv-1\tno\t0\t\\N\tlost\n",
	    "t:3: pending_call row, field result: expected one of owned, missing, wrong-owner, "
	    "open; got \"lost\"", "a pending check's result is one of four" },
	/* the rows of 1.9: the workers' spans, those a killed attempt never sent, the receiver */
	{ HEAD "span\t4bf92f3577b34da6a3ce929d0e0e4736\t00f067aa0ba902b7\t\\N\tpg.query:INSERT idem\t3\t2026-11-29T13:48:32.247642Z\t2026-11-29T13:48:32.247642Z\tunset\t42\t0\tjob-0001\t1\t@opentelemetry/instrumentation-pg\t{\"db.query.text\":\"INSERT\"}\t[]\tprotobuf\n", "",
	    "a span of a job's attempt (1.9)" },
	{ HEAD "span\t4bf92f3577b34da6a3ce929d0e0e4736\t00f067aa0ba902b7\ta3ce929d0e0e4736\tpg.query:INSERT idem\t3\t2026-11-29T13:48:32.247642Z\t2026-11-29T13:48:32.247642Z\terror\t\\N\t-1\t\\N\t\\N\t\\N\t{\"db.query.text\":\"INSERT\"}\t[{\"name\":\"retry\",\"time\":\"2026-11-29T13:48:32.247642Z\",\"attributes\":{}}]\tjson\n", "",
	    "a span of no attempt, its process unknown (1.9)" },
	{ HEAD "span\t4BF92F3577B34DA6A3CE929D0E0E4736\t00f067aa0ba902b7\t\\N\tpg.query:INSERT idem\t3\t2026-11-29T13:48:32.247642Z\t2026-11-29T13:48:32.247642Z\tunset\t42\t0\tjob-0001\t1\t@opentelemetry/instrumentation-pg\t{\"db.query.text\":\"INSERT\"}\t[]\tprotobuf\n", "t:3: span row, field trace_id: expected a trace id in 32 lowercase hex digits, got \"4BF92F3577B34DA6A3CE929D0E0E4736\"",
	    "a trace id in lowercase hex" },
	{ HEAD "span\t4bf92f3577b34da6a3ce929d0e0e4736\t00f067aa0ba9\t\\N\tpg.query:INSERT idem\t3\t2026-11-29T13:48:32.247642Z\t2026-11-29T13:48:32.247642Z\tunset\t42\t0\tjob-0001\t1\t@opentelemetry/instrumentation-pg\t{\"db.query.text\":\"INSERT\"}\t[]\tprotobuf\n", "t:3: span row, field span_id: expected a span id in 16 lowercase hex digits, got \"00f067aa0ba9\"",
	    "a span id of 8 bytes" },
	{ HEAD "span\t4bf92f3577b34da6a3ce929d0e0e4736\t00f067aa0ba902b7\t\\N\tpg.query:INSERT idem\t6\t2026-11-29T13:48:32.247642Z\t2026-11-29T13:48:32.247642Z\tunset\t42\t0\tjob-0001\t1\t@opentelemetry/instrumentation-pg\t{\"db.query.text\":\"INSERT\"}\t[]\tprotobuf\n", "t:3: span row, field kind: expected one of 0, 1, 2, 3, 4, 5; got \"6\"",
	    "a span kind of OTLP" },
	{ HEAD "span\t4bf92f3577b34da6a3ce929d0e0e4736\t00f067aa0ba902b7\t\\N\tpg.query:INSERT idem\t3\t2026-11-29T13:48:32.247642Z\t2026-11-29T13:48:32.247642Z\tfailed\t42\t0\tjob-0001\t1\t@opentelemetry/instrumentation-pg\t{\"db.query.text\":\"INSERT\"}\t[]\tprotobuf\n", "t:3: span row, field status: expected one of unset, ok, error; got \"failed\"",
	    "a span status of three" },
	{ HEAD "span\t4bf92f3577b34da6a3ce929d0e0e4736\t00f067aa0ba902b7\t\\N\tpg.query:INSERT idem\t3\t2026-11-29T13:48:32.247642Z\t2026-11-29T13:48:32.247642Z\tunset\t42\t0\tjob-0001\t1\t@opentelemetry/instrumentation-pg\t[]\t[]\tprotobuf\n", "t:3: span row, field attributes: expected a JSON object, got \"[]\"",
	    "a span's attributes are an object" },
	{ HEAD "span_lost\tjob-0002\t1\t42\t[\"00f067aa0ba902b7\"]\t2026-11-29T13:48:32.247642Z\n", "",
	    "the parents a killed attempt never sent (1.9)" },
	{ HEAD "span_lost\tjob-0002\t1\t42\t[]\t2026-11-29T13:48:32.247642Z\n", "",
	    "a killed attempt that lost no parent" },
	{ HEAD "span_lost\tjob-0002\t0\t42\t[]\t2026-11-29T13:48:32.247642Z\n", "t:3: span_lost row, field attempt: expected a whole number from 1 (digits, no sign, no leading zeros), got \"0\"",
	    "a span_lost row's attempt is positive" },
	{ HEAD "receiver\thttp://127.0.0.1:40000/v1/traces\t13\t40\t{\"too-large\":1}\t0\tset\n", "",
	    "the receiver row (1.9)" },
	{ HEAD "receiver\t\t0\t0\t{}\t0\toff\n", "",
	    "no receiver" },
	{ HEAD "receiver\t\t0\t0\t{}\t0\ton\n", "t:3: receiver row, field env: expected one of set, user, off; got \"on\"",
	    "the receiver's env is one of three" },
	/* ids in byte order are only listed; the first out of that order
	 * finds every id listed before it */
	{ HEAD "job\ta\tk\t{}\t" HASH "\t\\N\njob\ta\tl\t{}\t" HASH "\t\\N\n",
	    "t:4: job row, field job_id: job \"a\" appears twice in the stream",
	    "a job id twice in a row" },
	{ HEAD "job\ta\tk\t{}\t" HASH "\t\\N\njob\tc\tk\t{}\t" HASH "\t\\N\n"
	    "job\tb\tk\t{}\t" HASH "\t\\N\njob\td\tk\t{}\t" HASH "\t\\N\n"
	    "job\tc\tk\t{}\t" HASH "\t\\N\n",
	    "t:7: job row, field job_id: job \"c\" appears twice in the stream",
	    "a job id listed in order, again after the order ended" },
};

/* A kill row of version 1.0 has no observed field; 1.1 adds it. */
static void
kill_rows(void)
{
	static const char *const kills[] = {
		HEAD "kill\tk\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\n",
		HEAD "kill\tk\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\tdatabase\n",
	};
	struct idem_error err;
	struct idem_tsv_reader r;
	FILE *f;
	size_t i;
	int rc;

	for (i = 0; i < 2; i++) {
		f = fmemopen((void *)kills[i], strlen(kills[i]), "r");
		idem_tsv_reader_init(&r, f, "t");
		while ((rc = idem_tsv_next(&r, &err)) > 0 && r.kind != IDEM_KIND_KILL)
			;
		CHECK(rc == IDEM_TSV_ROW && r.nfields == KILL_OBSERVED + 1 &&
		    strcmp(r.fields[KILL_PID], "42") == 0 &&
		    (i == 0 ? r.fields[KILL_OBSERVED] == NULL :
		    strcmp(r.fields[KILL_OBSERVED], "database") == 0),
		    i == 0 ? "a kill row of 1.0 reads, observed \\N" : "a kill row of 1.1 reads");
		idem_tsv_reader_free(&r);
		fclose(f);
	}
}

/* A scenario row of 1.6 has no until field; 1.7 adds it, 1.8 vendor_ms. */
static void
scenario_rows(void)
{
	static const char *const scenarios[] = {
		HEAD "scenario\ts\tkill\tafter-commit\t1\t0\t0\n",
		HEAD "scenario\ts\tstall\tafter-commit\t1\t0\t0\tbefore-ack\n",
	};
	struct idem_error err;
	struct idem_tsv_reader r;
	FILE *f;
	size_t i;
	int rc;

	for (i = 0; i < 2; i++) {
		f = fmemopen((void *)scenarios[i], strlen(scenarios[i]), "r");
		idem_tsv_reader_init(&r, f, "t");
		while ((rc = idem_tsv_next(&r, &err)) > 0 && r.kind != IDEM_KIND_SCENARIO)
			;
		CHECK(rc == IDEM_TSV_ROW && r.nfields == SCENARIO_VENDOR_MS + 1 &&
		    r.fields[SCENARIO_VENDOR_MS] == NULL &&
		    (i == 0 ? r.fields[SCENARIO_UNTIL] == NULL :
		    strcmp(r.fields[SCENARIO_UNTIL], "before-ack") == 0),
		    i == 0 ? "a scenario row of 1.6 reads, until \\N" : "a scenario row of 1.7 reads");
		idem_tsv_reader_free(&r);
		fclose(f);
	}
}

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

int
main(void)
{
	struct idem_error err;
	int rows, comments, kinds = 0, rc;
	char *s, buf[64];
	size_t len, i;

	every_byte();
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
	for (i = 0; i < COUNT(unescapes); i++) {
		strcpy(buf, unescapes[i].field);
		len = strlen(buf);
		CHECK(idem_tsv_unescape(buf, &len) == unescapes[i].want, unescapes[i].name);
	}

	rc = read_all(HEAD "# comment\nexpect\t1\t0\t0\t0\nfuture\tx\ty\n", &err,
	    &rows, &comments, &kinds);
	CHECK(rc == IDEM_TSV_EOF && rows == 3 && comments == 1 && kinds == 2,
	    "header, comment, known and unknown kinds");
	rc = read_all("", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "empty stream") && err.status == IDEM_EXIT_USAGE,
	    "empty stream refused");
	for (i = 0; i < COUNT(refused_streams); i++) {
		rc = read_all(refused_streams[i].text, &err, &rows, &comments, &kinds);
		CHECK(rc == -1 && strstr(err.text, refused_streams[i].words), refused_streams[i].name);
	}
	for (i = 0; i < COUNT(streams); i++)
		CHECK_STR(refusal(streams[i].text, &err), streams[i].message, streams[i].name);
	CHECK_STR(refusal(HEAD "expect\t-1\t0\t0\t0\n", &err),
	    "t:3: expect row, field effects: expected a whole number from 0 (digits, no sign, "
	    "no leading zeros), got \"-1\"", "expect effects -1");
	CHECK(err.status == IDEM_EXIT_USAGE, "a bad field is bad input");
	kill_rows();
	scenario_rows();
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

	/* many jobs: the set grows and still finds the first */
	many_job_ids(0, "job\tjob-0\tk\t{}\t" HASH "\t\\N\n",
	    "t:300003: job row, field job_id: job \"job-0\" appears twice in the stream",
	    "the first of 300000 job ids, again");
	/* 300000 ids in byte order, then one of the middle again */
	many_job_ids(6, "job\tjob-300000\tk\t{}\t" HASH "\t\\N\njob\tjob-150000\tk\t{}\t" HASH
	    "\t\\N\n", "t:300004: job row, field job_id: job \"job-150000\" appears twice in the stream",
	    "one of 300000 job ids in byte order, again");

	types();

	CHECK(idem_kind_nfields(IDEM_KIND_SEED) == 25, "seed has 25 fields, draft and best_effort "
	    "since 1.6, adapter and adapter_sha256 since 1.10");
	CHECK(idem_kind_nfields(IDEM_KIND_QUEUE) == 3, "queue has 3 fields");
	CHECK(idem_kind_nfields(IDEM_KIND_WORKER) == 5 && idem_kind_nfields(IDEM_KIND_MISSED) == 5 &&
	    idem_kind_nfields(IDEM_KIND_DECLARED_GUARD) == 2, "the rows of 1.4");
	CHECK(idem_kind_nfields(IDEM_KIND_STALL) == 9 && idem_kind_nfields(IDEM_KIND_LEASE) == 5,
	    "the rows of 1.7");
	CHECK(idem_kind_nfields(IDEM_KIND_SCENARIO) == 8 && idem_kind_nfields(IDEM_KIND_CALL) == 14 &&
	    idem_kind_nfields(IDEM_KIND_EXTERNAL) == 8 && idem_kind_nfields(IDEM_KIND_FORGOT) == 5 &&
	    idem_kind_nfields(IDEM_KIND_REKEYED) == 4 && idem_kind_nfields(IDEM_KIND_PENDING_CALL) == 5,
	    "the rows of 1.8");
	CHECK(idem_kind_nfields(IDEM_KIND_SPAN) == 16 && idem_kind_nfields(IDEM_KIND_SPAN_LOST) == 5 &&
	    idem_kind_nfields(IDEM_KIND_RECEIVER) == 6, "the rows of 1.9");
	CHECK_STR(idem_kind_field_name(IDEM_KIND_SPAN, SPAN_ENCODING), "encoding",
	    "the span row's last field");
	CHECK_STR(idem_kind_name(IDEM_KIND_PENDING_CALL), "pending_call", "the pending_call kind by name");
	CHECK_STR(idem_kind_name(IDEM_KIND_STALL), "stall", "the stall kind by name");
	CHECK_STR(idem_kind_name(IDEM_KIND_LEASE), "lease", "the lease kind by name");
	CHECK_STR(idem_kind_field_name(IDEM_KIND_JOB, JOB_PAYLOAD_SHA256), "payload_sha256",
	    "field names by position");
	return unit_done("tsv");
}
