#include <limits.h>
#include <stdlib.h>

#include <jansson.h>

#include "tsv.h"
#include "unit.h"
#include "text.h"

/* A stream's first lines: the magic line and a good seed row. */
#define HEAD "#idem-tsv\t1\n" SEED_ROW
#define SEED_ROW "seed\ts.yaml\t" \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\t" \
	"r\tt.job\tq\t\\N\t1000\t5\t\\N\t\\N\td.t\t[\"k\"]\tbusiness\t\\N\t\\N\t" \
	"\\N\t\\N\t\\N\t{\"k\":\"string\"}\t[]\n"
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

	/* counts: the one spelling of 0 .. LLONG_MAX */
	CHECK(fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "0"), "count 0");
	CHECK(fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "9223372036854775807"), "count LLONG_MAX");
	CHECK_STR(check(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "9223372036854775808"),
	    "\"9223372036854775808\" is out of range (at most 9223372036854775807)",
	    "count LLONG_MAX + 1");
	CHECK_STR(check(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "99999999999999999999"),
	    "\"99999999999999999999\" is out of range (at most 9223372036854775807)",
	    "count far out of range");
	CHECK_STR(check(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "-1"),
	    "expected a whole number from 0 (digits, no sign, no leading zeros), got \"-1\"",
	    "count -1");
	CHECK_STR(check(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "\x1b]0;x\x07"),
	    "expected a whole number from 0 (digits, no sign, no leading zeros), got "
	    "\"\\x1b]0;x\\x07\"", "control characters are shown escaped");
	CHECK(fits(IDEM_KIND_SEED, SEED_REHEARSAL, "invoice-line.v2_1"), "a rehearsal name");
	CHECK(!fits(IDEM_KIND_SEED, SEED_REHEARSAL, "../x"), "a rehearsal name with a path");
	CHECK(!fits(IDEM_KIND_SEED, SEED_REHEARSAL, "a/b"), "a rehearsal name with a slash");
	CHECK(!fits(IDEM_KIND_SEED, SEED_REHEARSAL, ".hidden"), "a rehearsal name with a dot first");
	CHECK(!fits(IDEM_KIND_SEED, SEED_REHEARSAL, "-x"), "a rehearsal name like an option");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "+1"), "count +1");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, " 1"), "count with a leading space");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "1 "), "count with a trailing space");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, ""), "count empty");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "01"), "count with a leading zero");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "00"), "count 00");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "1e3"), "count 1e3");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "0x10"), "count in hex");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "99999999999999999999x"),
	    "a long run of digits with junk is not a number, not out of range");
	CHECK(!fits(IDEM_KIND_EXPECT, EXPECT_EFFECTS, "\xd9\xa1"), "count in Arabic-Indic digits");
	/* positive: from 1 */
	CHECK(!fits(IDEM_KIND_SEED, SEED_VISIBILITY_TIMEOUT_MS, "0"), "visibility timeout 0");
	CHECK(fits(IDEM_KIND_SEED, SEED_VISIBILITY_TIMEOUT_MS, "1"), "visibility timeout 1");
	/* msg_id: a name, whatever the queue's ids look like */
	CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_MSG_ID, "1"), "msg_id 1");
	CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_MSG_ID, "0f8c2a52-7a3e-5d1e-9a0e-2b7b6f1f3c11"),
	    "msg_id a UUID");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_MSG_ID, ""), "msg_id empty");
	/* integer: signed */
	CHECK(fits(IDEM_KIND_STEP, STEP_WORKER, "-1"), "worker -1");
	CHECK(fits(IDEM_KIND_STEP, STEP_ATTEMPT, "-9223372036854775808"), "integer LLONG_MIN");
	CHECK_STR(check(IDEM_KIND_STEP, STEP_ATTEMPT, "-9223372036854775809"),
	    "\"-9223372036854775809\" is out of range (from -9223372036854775808 to "
	    "9223372036854775807)", "integer LLONG_MIN - 1");
	CHECK(!fits(IDEM_KIND_STEP, STEP_ATTEMPT, "-0"), "integer -0");
	CHECK(!fits(IDEM_KIND_STEP, STEP_ATTEMPT, "-"), "integer -");
	CHECK(!fits(IDEM_KIND_STEP, STEP_ATTEMPT, "--1"), "integer --1");
	CHECK(!fits(IDEM_KIND_STEP, STEP_ATTEMPT, "-01"), "integer -01");

	/* times: what idem_format_time writes, and real dates only */
	CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29T13:48:32.247642Z"), "a time");
	for (i = 0; i < 4; i++) {
		static const long long us[] = { 0, 951782400000000LL, 1796997599999999LL,
			253402300799999999LL };
		char t[32];

		idem_format_time(us[i], t);
		CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, t), "idem_format_time's times fit");
	}
	CHECK_STR(check(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29T13:48:32.247642+00:00"),
	    "expected a UTC time such as 2026-11-29T13:48:32.247642Z, got "
	    "\"2026-11-29T13:48:32.247642+00:00\"", "a time with an offset");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29T14:48:32.247642+01:00"),
	    "a time in another zone");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29T13:48:32Z"),
	    "a time without microseconds");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29T13:48:32.247Z"),
	    "a time in milliseconds");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29 13:48:32.247642Z"),
	    "a time with a space");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29t13:48:32.247642z"),
	    "a time in lowercase");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-02-29T00:00:00.000000Z"),
	    "29 February of a common year");
	CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2028-02-29T00:00:00.000000Z"),
	    "29 February of a leap year");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2100-02-29T00:00:00.000000Z"),
	    "29 February 2100");
	CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2000-02-29T00:00:00.000000Z"),
	    "29 February 2000");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-31T00:00:00.000000Z"),
	    "31 November");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-13-01T00:00:00.000000Z"),
	    "month 13");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-00T00:00:00.000000Z"),
	    "day 0");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29T24:00:00.000000Z"),
	    "hour 24");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "2026-11-29T23:59:60.000000Z"),
	    "a leap second (never written)");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_PUBLISHED_AT, "out-of-range"), "no time");

	/* hashes */
	CHECK(fits(IDEM_KIND_JOB, JOB_PAYLOAD_SHA256, HASH), "a SHA-256");
	CHECK_STR(check(IDEM_KIND_JOB, JOB_PAYLOAD_SHA256,
	    "FB1C733540D60FD992C1DFCEF293A78DEED74A67ECB22B51650E816C0A7CA107"),
	    "expected a SHA-256 in 64 lowercase hex digits, got "
	    "\"FB1C733540D60FD992C1DFCEF293A78DEED74A67...\"", "an uppercase SHA-256, cut in the message");
	CHECK(!fits(IDEM_KIND_JOB, JOB_PAYLOAD_SHA256, HASH "0"), "65 digits");
	CHECK(!fits(IDEM_KIND_JOB, JOB_PAYLOAD_SHA256, HASH + 1), "63 digits");
	CHECK(!fits(IDEM_KIND_JOB, JOB_PAYLOAD_SHA256,
	    "gb1c733540d60fd992c1dfcef293a78deed74a67ecb22b51650e816c0a7ca107"), "a g");

	/* JSON */
	CHECK(fits(IDEM_KIND_JOB, JOB_PAYLOAD, "{\"id\":1}"), "a payload");
	CHECK_STR(check(IDEM_KIND_JOB, JOB_PAYLOAD, "[1]"), "expected a JSON object, got \"[1]\"",
	    "a payload that is an array");
	CHECK_STR(check(IDEM_KIND_JOB, JOB_PAYLOAD, "{\"id\":}"), "not JSON (at byte 7): \"{\\\"id\\\":}\"",
	    "a payload that is not JSON");
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
	CHECK(fits(IDEM_KIND_SEED, SEED_CANNOT_REPRODUCE, "[\"a\",\"b\"]"), "cannot_reproduce");
	CHECK(fits(IDEM_KIND_SEED, SEED_CANNOT_REPRODUCE, "[]"), "cannot_reproduce empty");
	CHECK(!fits(IDEM_KIND_SEED, SEED_CANNOT_REPRODUCE, "[\"a\",[\"b\"]]"),
	    "cannot_reproduce with a nested array");
	CHECK(fits(IDEM_KIND_SEED, SEED_KEY_COLUMNS, "[\"invoice_id\",\"line_no\"]"), "key_columns");
	CHECK_STR(check(IDEM_KIND_SEED, SEED_KEY_COLUMNS, "[]"),
	    "expected a JSON array of one or more strings, got \"[]\"", "key_columns empty");
	CHECK(!fits(IDEM_KIND_SEED, SEED_KEY_COLUMNS, "[\"a\",1]"), "key_columns with a number");
	CHECK(!fits(IDEM_KIND_SEED, SEED_KEY_COLUMNS, "\"a\""), "key_columns a string");
	CHECK(!fits(IDEM_KIND_SEED, SEED_KEY_COLUMNS, "invoice_id"), "key_columns not JSON");
	CHECK(!fits(IDEM_KIND_SEED, SEED_PAYLOAD_SCHEMA, "[]"), "payload_schema an array");

	/* enumerations, names, decimals */
	CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_STATUS, "published"), "status published");
	CHECK(fits(IDEM_KIND_PUBLISH, PUBLISH_STATUS, "existing"), "status existing");
	CHECK_STR(check(IDEM_KIND_PUBLISH, PUBLISH_STATUS, "publish"),
	    "expected one of published, existing; got \"publish\"", "status, a prefix of a value");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_STATUS, "Published"), "status in capitals");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_STATUS, "published existing"), "status two values");
	CHECK(!fits(IDEM_KIND_PUBLISH, PUBLISH_STATUS, ""), "status empty");
	CHECK(fits(IDEM_KIND_SCENARIO, SCENARIO_FAULT, "same-key"), "fault same-key");
	CHECK(!fits(IDEM_KIND_SCENARIO, SCENARIO_FAULT, "timeout"), "fault timeout");
	CHECK_STR(check(IDEM_KIND_JOB, JOB_ID, ""), "empty", "an empty job id");
	CHECK(fits(IDEM_KIND_JOB, JOB_BUSINESS_KEY, ""), "an empty business key is text");
	CHECK(fits(IDEM_KIND_MEASURE, MEASURE_VALUE, "12.500"), "decimal 12.500");
	CHECK(fits(IDEM_KIND_MEASURE, MEASURE_VALUE, "7"), "decimal 7");
	CHECK(!fits(IDEM_KIND_MEASURE, MEASURE_VALUE, ".5"), "decimal .5");
	CHECK(!fits(IDEM_KIND_MEASURE, MEASURE_VALUE, "1."), "decimal 1.");
	CHECK(!fits(IDEM_KIND_MEASURE, MEASURE_VALUE, "-1"), "decimal -1");
	CHECK(!fits(IDEM_KIND_MEASURE, MEASURE_VALUE, "nan"), "decimal nan");
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

int
main(void)
{
	struct idem_error err;
	int rows, comments, kinds = 0, rc;
	char *s, buf[64];
	size_t len;

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
	strcpy(buf, "\\N");
	len = 2;
	CHECK(idem_tsv_unescape(buf, &len) == 1, "\\N alone is null");
	strcpy(buf, "a\\xb");
	len = 4;
	CHECK(idem_tsv_unescape(buf, &len) == -1, "unknown escape refused");
	strcpy(buf, "a\\");
	len = 2;
	CHECK(idem_tsv_unescape(buf, &len) == -1, "trailing backslash refused");

	rc = read_all(HEAD "# comment\nexpect\t1\t0\t0\t0\nfuture\tx\ty\n", &err,
	    &rows, &comments, &kinds);
	CHECK(rc == IDEM_TSV_EOF && rows == 3 && comments == 1 && kinds == 2,
	    "header, comment, known and unknown kinds");

	rc = read_all("#idem-tsv\t1.3\n" SEED_ROW, &err, &rows, &comments, &kinds);
	CHECK(rc == IDEM_TSV_EOF, "minor version accepted");

	rc = read_all("", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "empty stream") && err.status == IDEM_EXIT_USAGE,
	    "empty stream refused");
	rc = read_all("seed\tx\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "t:1: not an idem-tsv stream"), "missing header refused");
	rc = read_all("#idem-tsv\t2\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "version 2 is not supported"), "version 2 refused");
	CHECK_STR(refusal(HEAD "digest\tafter\t0\n", &err), "t:3: digest row has 2 fields, expected 3",
	    "wrong field count names the line");
	CHECK_STR(refusal(HEAD "expect\t1\t0\t0\n", &err), "t:3: expect row has 3 fields, expected 4 to 6",
	    "a kind extended since 1.0 takes its old count or its new one");
	rc = read_all(HEAD "\nexpect\t1\t0\t0\t0\t9\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "t:3: row without a kind"), "empty line refused");
	CHECK_STR(refusal(HEAD "expect\t1\t0\t0\t0\n\xff\n", &err), "t:4: invalid UTF-8",
	    "invalid UTF-8 names the line");
	rc = read_all(HEAD "job\ta\\qb\tk\t{}\th\t\\N\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "t:3: job row, field job_id: bad escape"),
	    "bad escape names line and field");
	rc = read_all(HEAD "expect\t1\t0\t0\t0", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "no newline"), "truncated last line refused");
	rc = read_all(HEAD "future\t\\q\n", &err, &rows, &comments, &kinds);
	CHECK(rc == IDEM_TSV_EOF, "unknown kinds are not decoded");

	rc = read_all("#idem-tsv\t1.x\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "version 1.x is not supported"), "version 1.x refused");
	rc = read_all(HEAD "expect\t1\t0\t0\t0\r\n", &err, &rows, &comments, &kinds);
	CHECK(rc == -1 && strstr(err.text, "t:3: a raw carriage return"), "CRLF refused with a hint");
	CHECK_STR(refusal(HEAD "expect\t1\t0\t0\t0\t0\tpass\t\\q\n", &err), "t:3: expect row has 7 fields, expected 4 to 6",
	    "the field count is checked before the escapes");
	{
		/* a kill row of version 1.0 has no observed field; 1.1 adds it */
		static const char *const kills[] = {
			HEAD "kill\tk\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\n",
			HEAD "kill\tk\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\tdatabase\n",
		};
		FILE *f;
		struct idem_tsv_reader r;
		size_t i;

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
	CHECK_STR(refusal(HEAD "kill\tk\ta\t1\tafter-commit\t42\n", &err),
	    "t:3: kill row has 5 fields, expected 6 to 7", "a kind with fields of 1.1 says both counts");
	CHECK_STR(refusal(HEAD "kill\tk\ta\t1\tafter-commit\t42\t2026-11-29T13:48:32.247642Z\tdisk\n", &err),
	    "t:3: kill row, field observed: expected one of database, socket, vendor; got \"disk\"",
	    "observed is database, socket or vendor");
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

	/* no escape makes a NUL: \0 is refused, \\0 is a backslash and a zero */
	CHECK_STR(refusal(HEAD "job\ta\\0\tk\t{}\t" HASH "\t\\N\n", &err),
	    "t:3: job row, field job_id: bad escape (only \\\\ \\t \\n \\r and \\N are allowed)",
	    "the escape \\0 is refused");
	CHECK_STR(refusal(HEAD "job\ta\\\\0\tk\t{}\t" HASH "\t\\N\n", &err), "",
	    "an escaped backslash before 0 is text");

	/* every field has its type; the message names line, kind, field and value */
	CHECK_STR(refusal(HEAD "expect\t-1\t0\t0\t0\n", &err),
	    "t:3: expect row, field effects: expected a whole number from 0 (digits, no sign, "
	    "no leading zeros), got \"-1\"", "expect effects -1");
	CHECK(err.status == IDEM_EXIT_USAGE, "a bad field is bad input");
	CHECK_STR(refusal(HEAD "expect\t1\t0\t\\N\t0\n", &err),
	    "t:3: expect row, field missing: missing (\\N)", "\\N where a field may not be missing");
	CHECK_STR(refusal(HEAD "job\ta\tk\t{}\t" HASH "\t\\N\n", &err), "", "\\N where it may be");
	CHECK_STR(refusal(HEAD "publish\ta\t0\t1\t2026-11-29T13:48:32.247642Z\tsent\n", &err),
	    "t:3: publish row, field status: expected one of published, existing; got \"sent\"",
	    "a status that is no status");
	CHECK_STR(refusal(HEAD "job\ta\tk\t{\"a\":1,}\t" HASH "\t\\N\n", &err),
	    "t:3: job row, field payload: not JSON (at byte 8): \"{\\\"a\\\":1,}\"",
	    "a payload that is not JSON, with where");
	CHECK_STR(refusal(HEAD "job\ta\tk\\tl\t{\"k\":\"x\\ty\"}\t" HASH "\t\\N\n", &err),
	    "t:3: job row, field payload: not JSON (at byte 8): \"{\\\"k\\\":\\\"x\\ty\\\"}\"",
	    "a raw tab in a JSON string, shown escaped");

	/* the rules of the stream as a whole */
	CHECK_STR(refusal("#idem-tsv\t1\n# no seed\nfuture\tx\n", &err),
	    "t: no seed row: start the stream with seed-gen", "a stream without a seed row");
	CHECK_STR(refusal("#idem-tsv\t1\nexpect\t1\t0\t0\t0\n", &err),
	    "t:2: an expect row before the seed row; start the stream with seed-gen",
	    "a row before the seed row");
	CHECK_STR(refusal("#idem-tsv\t1\nfuture\tx\n# c\n" SEED_ROW, &err), "",
	    "comments and unknown kinds before the seed row");
	CHECK_STR(refusal(HEAD SEED_ROW, &err), "t:3: a second seed row", "two seed rows");
	CHECK_STR(refusal(HEAD "expect\t1\t0\t0\t0\nexpect\t1\t0\t0\t0\n", &err),
	    "t:4: a second expect row", "two expect rows");
	CHECK_STR(refusal(HEAD "job\ta\tk\t{}\t" HASH "\t\\N\njob\tb\tk\t{}\t" HASH "\t\\N\n"
	    "job\ta\tl\t{}\t" HASH "\t\\N\n", &err),
	    "t:5: job row, field job_id: job \"a\" appears twice in the stream", "a job id twice");
	CHECK_STR(refusal(HEAD "scenario\ts\tkill\tbefore-commit\t1\t0\t0\n"
	    "job\ta\tk\t{}\t" HASH "\ts\n", &err), "", "a job of a scenario");
	CHECK_STR(refusal(HEAD "job\ta\tk\t{}\t" HASH "\ts\n", &err),
	    "t:3: job row, field scenario: no scenario row named \"s\" before it",
	    "a job of a scenario not declared");
	CHECK_STR(refusal(HEAD "scenario\ts\tkill\tbefore-commit\t1\t0\t0\n"
	    "scenario\ts\trace\tbefore-write\t\\N\t1\t0\n", &err),
	    "t:4: scenario row, field name: scenario \"s\" appears twice in the stream",
	    "a scenario name twice");
	/* many jobs: the set grows and still finds the first */
	many_job_ids(0, "job\tjob-0\tk\t{}\t" HASH "\t\\N\n",
	    "t:300003: job row, field job_id: job \"job-0\" appears twice in the stream",
	    "the first of 300000 job ids, again");
	/* ids in byte order are only listed; the first out of that order
	 * finds every id listed before it */
	CHECK_STR(refusal(HEAD "job\ta\tk\t{}\t" HASH "\t\\N\njob\ta\tl\t{}\t" HASH "\t\\N\n", &err),
	    "t:4: job row, field job_id: job \"a\" appears twice in the stream",
	    "a job id twice in a row");
	CHECK_STR(refusal(HEAD "job\ta\tk\t{}\t" HASH "\t\\N\njob\tc\tk\t{}\t" HASH "\t\\N\n"
	    "job\tb\tk\t{}\t" HASH "\t\\N\njob\td\tk\t{}\t" HASH "\t\\N\n"
	    "job\tc\tk\t{}\t" HASH "\t\\N\n", &err),
	    "t:7: job row, field job_id: job \"c\" appears twice in the stream",
	    "a job id listed in order, again after the order ended");
	/* 300000 ids in byte order, then one of the middle again */
	many_job_ids(6, "job\tjob-300000\tk\t{}\t" HASH "\t\\N\njob\tjob-150000\tk\t{}\t" HASH
	    "\t\\N\n", "t:300004: job row, field job_id: job \"job-150000\" appears twice in the stream",
	    "one of 300000 job ids in byte order, again");

	types();

	CHECK(idem_kind_nfields(IDEM_KIND_SEED) == 21, "seed has 21 fields");
	CHECK(idem_kind_nfields(IDEM_KIND_QUEUE) == 3, "queue has 3 fields");
	CHECK(idem_kind_nfields(IDEM_KIND_WORKER) == 5 && idem_kind_nfields(IDEM_KIND_MISSED) == 5 &&
	    idem_kind_nfields(IDEM_KIND_DECLARED_GUARD) == 2, "the rows of 1.4");
	CHECK_STR(idem_kind_field_name(IDEM_KIND_JOB, JOB_PAYLOAD_SHA256), "payload_sha256",
	    "field names by position");
	return unit_done("tsv");
}
