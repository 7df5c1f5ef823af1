#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "error.h"
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
		char t[32];

		idem_format_time(1796000000123456LL, t);
		CHECK_STR(t, "2026-11-30T00:53:20.123456Z", "RFC 3339 with microseconds");
		idem_format_time(1796000000000007LL, t);
		CHECK_STR(t, "2026-11-30T00:53:20.000007Z", "the same second again, from the cache");
		idem_format_time(0, t);
		CHECK_STR(t, "1970-01-01T00:00:00.000000Z", "the epoch");
	}

	{
		static const char *const steps[] = { "before-write", "after-commit",
			"external-call", NULL };

		CHECK(idem_text_distance("kil", "kill") == 1, "distance: one left out");
		CHECK(idem_text_distance("aftre", "after") == 1, "distance: neighbours swapped");
		CHECK(idem_text_distance("", "abc") == 3, "distance from nothing");
		CHECK(idem_text_near("aftercommit", "after-commit"), "near: one left out");
		CHECK(!idem_text_near("ab", "ax"), "not near: half the length changed");
		CHECK(!idem_text_near("kill", "kill"), "not near: the name itself");
		CHECK_STR(idem_text_nearest("after_commit", steps), "after-commit", "nearest");
		CHECK(idem_text_nearest("ledger-flushed", steps) == NULL, "nothing near");
	}

	idem_sha256_hex("abc", 3, hex);
	CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	    "sha256 of abc (FIPS 180-2 vector)");
	return unit_done("text");
}
