#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mkrecord/statement.h"
#include "intoto.h"
#include "unit.h"

/* The tests of a record given as JSON: "passed|warned|failed", each list
 * joined with commas. */
static char *
tests_of(const char *record_json)
{
	json_t *record = json_loads(record_json, 0, NULL), *lists[3];
	char *out = calloc(1, 1024);
	size_t i, j;

	for (i = 0; i < 3; i++)
		lists[i] = json_array();
	idem_statement_tests(record, lists[0], lists[1], lists[2]);
	for (i = 0; i < 3; i++) {
		for (j = 0; j < json_array_size(lists[i]); j++) {
			if (j > 0)
				strcat(out, ",");
			strcat(out, json_string_value(json_array_get(lists[i], j)));
		}
		if (i < 2)
			strcat(out, "|");
		json_decref(lists[i]);
	}
	json_decref(record);
	return out;
}

#define SCENARIOS "\"scenarios\":[{\"name\":\"a\"},{\"name\":\"b\"},{\"name\":\"c\"}]"

int
main(void)
{
	char *got;

	CHECK_STR(idem_intoto_result("pass"), "PASSED", "pass is PASSED");
	CHECK_STR(idem_intoto_result("best effort"), "WARNED", "best effort is WARNED");
	CHECK_STR(idem_intoto_result("fail"), "FAILED", "fail is FAILED");
	CHECK_STR(idem_intoto_result(NULL), "FAILED", "no verdict is FAILED");
	got = tests_of("{\"verdict\":\"pass\"," SCENARIOS ",\"kill_points\":[{\"scenario\":\"a\","
	    "\"acked_at\":\"2026-12-01T10:00:02Z\"}]}");
	CHECK_STR(got, "a,b,c,(run)||", "a pass: every scenario and the run passed");
	free(got);
	got = tests_of("{\"verdict\":\"best effort\"," SCENARIOS "}");
	CHECK_STR(got, "|a,b,c,(run)|", "best effort: every test warned");
	free(got);
	got = tests_of("{\"verdict\":\"fail\"," SCENARIOS ",\"missed\":[{\"scenario\":\"b\"}],"
	    "\"stalls\":[{\"scenario\":\"c\",\"release\":\"acked\"}],"
	    "\"kill_points\":[{\"scenario\":\"a\",\"acked_at\":\"2026-12-01T10:00:02Z\"}]}");
	CHECK_STR(got, "a,c||b,(run)", "a missed point fails its scenario, and the run");
	free(got);
	got = tests_of("{\"verdict\":\"fail\"," SCENARIOS ",\"stalls\":[{\"scenario\":\"c\","
	    "\"release\":\"bound\"}],\"kill_points\":[{\"scenario\":\"a\",\"acked_at\":null}]}");
	CHECK_STR(got, "b||a,c,(run)", "a stall at its bound, a kill never acked after: failed");
	free(got);
	got = tests_of("{\"verdict\":\"fail\"," SCENARIOS "}");
	CHECK_STR(got, "a,b,c||(run)", "counts that differ name no scenario: the run failed");
	free(got);
	return unit_done("statement");
}
