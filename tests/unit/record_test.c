#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "path.h"
#include "record.h"
#include "unit.h"

/* kill-at's attempt rows are joined by PostgreSQL: tests/tools/evidence-join,
 * run by tests/evidence.bats, holds their cases. */
/* A changed key fails against a vendor that honours keys, before the
 * counts; not against one that does not; a pending check that failed,
 * then. */
static void
key_checks(void)
{
	json_t *r = json_loads("{\"verdict\": \"fail\","
	    " \"external\": {\"honours_idempotency_key\": true,"
	    " \"pending_table\": \"demo.pending_calls\"},"
	    " \"reconciliation_owner\": \"billing-oncall\","
	    " \"rekeyed\": [{\"business_key\": \"k1\", \"keys\": [\"a\", null],"
	    " \"calls\": [1, 3], \"effects\": 1}],"
	    " \"pending_calls\": [{\"business_key\": \"k2\", \"killed\": true,"
	    " \"rows\": 1, \"owner\": \"billing-oncall\", \"result\": \"owned\"},"
	    " {\"business_key\": \"k3\", \"killed\": true, \"rows\": 0,"
	    " \"owner\": null, \"result\": \"missing\"}],"
	    " \"counts\": {\"totals\": {\"duplicates\": {\"expected\": 0, \"observed\": 1}}}}",
	    0, NULL);
	char *why;

	CHECK(r != NULL, "keys: the record parses");
	why = idem_record_why(r);
	CHECK_STR(why ? why : "(null)", "business key k1 changed its Idempotency-Key across "
	    "calls 1, 3 (keys a, none; 1 took effect), against a vendor that honours the key",
	    "why: a changed key against a vendor that honours keys");
	free(why);
	json_object_set_new(json_object_get(r, "external"), "honours_idempotency_key",
	    json_false());
	why = idem_record_why(r);
	CHECK_STR(why ? why : "(null)", "the killed call of business key k3 left no row in "
	    "demo.pending_calls", "why: not against one that does not; a pending row missing");
	free(why);
	json_object_set_new(json_array_get(json_object_get(r, "pending_calls"), 1), "result",
	    json_string("wrong-owner"));
	json_object_set_new(json_array_get(json_object_get(r, "pending_calls"), 1), "rows",
	    json_integer(2));
	why = idem_record_why(r);
	CHECK_STR(why ? why : "(null)", "the killed call of business key k3 left 2 rows in "
	    "demo.pending_calls, none naming the reconciliation owner billing-oncall",
	    "why: a pending row of another owner");
	free(why);
	json_object_set_new(json_array_get(json_object_get(r, "pending_calls"), 1), "result",
	    json_string("owned"));
	why = idem_record_why(r);
	CHECK_STR(why ? why : "(null)", "the counts differ from the seed's expect: duplicates: "
	    "expected 0, observed 1", "why: then the counts");
	free(why);
	CHECK(idem_record_key_finding(r) == NULL, "keys: no finding once every check passes");
	json_object_set_new(r, "measures", json_pack("[{s:s,s:n,s:i,s:s}]", "name",
	    "pending_calls_owned", "numerator", "denominator", 1, "unit", "rows"));
	why = idem_record_key_finding(r);
	CHECK_STR(why ? why : "(null)", "the pending calls were not checked: demo.pending_calls has "
	    "no column the seed names for them", "keys: a pending check not made is a finding");
	free(why);
	CHECK(idem_record_pending_ok("owned") && !idem_record_pending_ok("open") &&
	    !idem_record_pending_ok("missing") && !idem_record_pending_ok(NULL),
	    "keys: only owned passes the pending check");
	json_decref(r);
}

/* The keys a rerun's calls sent: which business keys changed them, with
 * how many keys and effects, not the keys themselves; the pending
 * checks' results. */
static void
key_paths(void)
{
	json_t *none = json_array(), *diff;
	json_t *rec = json_loads("[{\"business_key\":\"k1\",\"keys\":[\"t1\",\"t2\"],"
	    "\"effects\":1}]", 0, NULL);
	json_t *again = json_loads("[{\"business_key\":\"k1\",\"keys\":[\"t8\",\"t9\"],"
	    "\"effects\":1}]", 0, NULL);
	json_t *pend = json_loads("[{\"business_key\":\"k2\",\"result\":\"owned\"}]", 0, NULL);
	json_t *pend_again = json_loads("[{\"business_key\":\"k2\",\"result\":\"missing\"},"
	    "{\"business_key\":\"k4\",\"result\":\"open\"}]", 0, NULL);
	struct idem_path a = { none, none, none, NULL, rec, pend };
	struct idem_path b = { none, none, none, NULL, again, pend };

	diff = idem_path_diff(&a, &b);
	CHECK(json_array_size(diff) == 0, "path: keys made anew on each run compare the same");
	json_decref(diff);
	json_object_set_new(json_array_get(again, 0), "effects", json_integer(2));
	diff = idem_path_diff(&a, &b);
	CHECK_STR(json_string_value(json_array_get(diff, 0)) ? json_string_value(
	    json_array_get(diff, 0)) : "(none)", "k1: the record's calls sent 2 "
	    "Idempotency-Keys, 1 taking effect; the rerun's 2, 2 taking effect",
	    "path: a rekeyed key's effects differ");
	json_decref(diff);
	b.rekeyed = none;
	b.pending = pend_again;
	diff = idem_path_diff(&a, &b);
	CHECK(json_array_size(diff) == 3, "path: a key rekeyed on one side, two pending checks");
	CHECK_STR(json_string_value(json_array_get(diff, 0)) ? json_string_value(
	    json_array_get(diff, 0)) : "(none)", "k1: the record's calls sent 2 "
	    "Idempotency-Keys, the rerun's one", "path: rekeyed in the record alone");
	CHECK_STR(json_string_value(json_array_get(diff, 1)) ? json_string_value(
	    json_array_get(diff, 1)) : "(none)", "k2: pending check owned in the record, "
	    "missing in the rerun", "path: a pending check's result differs");
	CHECK_STR(json_string_value(json_array_get(diff, 2)) ? json_string_value(
	    json_array_get(diff, 2)) : "(none)", "k4: pending check none in the record, "
	    "open in the rerun", "path: a pending check of the rerun alone");
	json_decref(diff);
	/* a record before format 8 has neither: they are not compared */
	a.rekeyed = a.pending = NULL;
	diff = idem_path_diff(&a, &b);
	CHECK(json_array_size(diff) == 0, "path: a record before format 8 compares no keys");
	json_decref(diff);
	json_decref(rec);
	json_decref(again);
	json_decref(pend);
	json_decref(pend_again);
	json_decref(none);
}

int
main(void)
{
	{
		/* published values of the Wilson score interval at 95% */
		double low, high;

		CHECK(idem_record_wilson(0, 6, &low, &high) == 0 && low == 0.0 &&
		    fabs(high - 0.390334) < 1e-6, "wilson: 0 of 6 is [0, 0.390334]");
		CHECK(idem_record_wilson(0, 1000000, &low, &high) == 0 && low == 0.0 &&
		    fabs(high - 3.841444e-6) < 1e-12, "wilson: 0 of 1000000 is [0, 3.841444e-6]");
		CHECK(idem_record_wilson(5, 100, &low, &high) == 0 && fabs(low - 0.021544) < 1e-6 &&
		    fabs(high - 0.111750) < 1e-6, "wilson: 5 of 100 is [0.021544, 0.111750]");
		CHECK(idem_record_wilson(3, 3, &low, &high) == 0 && fabs(low - 0.438503) < 1e-6 &&
		    high == 1.0, "wilson: 3 of 3 is [0.438503, 1]");
		CHECK(idem_record_wilson(0, 0, &low, &high) == -1, "wilson: no trials, no interval");
		CHECK(idem_record_wilson(7, 6, &low, &high) == -1, "wilson: more events than trials");
	}
	{
		/* every reason at once: each, taken away, lets the next show */
		json_t *r = json_loads("{\"verdict\": \"fail\","
		    " \"missed\": [{\"what\": \"kill\", \"scenario\": \"k\", \"job\": \"a\","
		    " \"attempt\": 1, \"step\": \"after-commit\"}],"
		    " \"counts\": {\"totals\": {\"effects\": {\"expected\": 2, \"observed\": 3},"
		    " \"duplicates\": {\"expected\": 0, \"observed\": 1},"
		    " \"pending\": {\"expected\": 0, \"observed\": 2}}},"
		    " \"baseline\": {\"result\": \"failed\", \"summary\": \"baseline failed: x\"},"
		    " \"worker\": {\"observed\": {\"as_declared\": false}},"
		    " \"account\": {\"findings\": [\"holds DELETE\"]}}", 0, NULL);
		static const char *const want[] = {
			"kill point never reached: step after-commit of job a, attempt 1 (scenario k)",
			"the deadline passed with messages unacked (pending: expected 0, observed 2)",
			"baseline failed: x",
			"the worker that ran is not the one the seed declares",
			"the sandbox account held more than its list: holds DELETE",
			"the counts differ from the seed's expect: duplicates: expected 0, observed 1",
		};
		char *why;
		size_t i;

		for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
			why = idem_record_why(r);
			CHECK_STR(why ? why : "(null)", want[i], "why: the reasons in order");
			free(why);
			switch (i) {
			case 0: json_object_set_new(r, "missed", json_array()); break;
			case 1: json_object_del(json_object_get(json_object_get(r, "counts"), "totals"),
				    "pending"); break;
			case 2: json_object_set_new(r, "baseline", json_null()); break;
			case 3: json_object_set_new(r, "worker", json_null()); break;
			case 4: json_object_set_new(r, "account", json_null()); break;
			}
		}
		json_object_set_new(r, "verdict", json_string("pass"));
		CHECK(idem_record_why(r) == NULL, "why: nothing for a pass");
		json_decref(r);
	}
	{
		/* two deliveries of one job taken at once, in either order: the
		 * same path; a branch that differs, a difference */
		json_t *rec = json_loads("[{\"job\":\"j\",\"msg_id\":\"7\",\"attempt\":1,"
		    "\"outcome\":\"acked\",\"branch\":\"conflict-noop\"},{\"job\":\"j\","
		    "\"msg_id\":\"5\",\"attempt\":1,\"outcome\":\"acked\",\"branch\":\"inserted\"}]",
		    0, NULL);
		json_t *again = json_loads("[{\"job\":\"j\",\"msg\":\"5\",\"attempt\":1,"
		    "\"outcome\":\"acked\",\"branch\":\"inserted\"},{\"job\":\"j\",\"msg\":\"7\","
		    "\"attempt\":1,\"outcome\":\"acked\",\"branch\":\"conflict-noop\"}]", 0, NULL);
		json_t *none = json_array(), *diff;
		struct idem_path a = { none, rec, none, NULL, NULL, NULL };
		struct idem_path b = { none, again, none, NULL, NULL, NULL };

		diff = idem_path_diff(&a, &b);
		CHECK(json_array_size(diff) == 0, "path: deliveries taken at once compare by message");
		json_decref(diff);
		json_object_set_new(json_array_get(again, 0), "branch", json_string("conflict-noop"));
		diff = idem_path_diff(&a, &b);
		CHECK(json_array_size(diff) == 1, "path: the message that wrote, not the order, counts");
		json_decref(diff);
		json_decref(rec);
		json_decref(again);
		json_decref(none);
	}
	key_checks();
	key_paths();
	return unit_done("record");
}
