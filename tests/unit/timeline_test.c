#include <stdlib.h>

#include "mkrecord/timeline.h"
#include "unit.h"

static void
expect_duration(long long ms, const char *want)
{
	char got[32];

	idem_timeline_duration(ms, got, sizeof(got));
	CHECK_STR(got, want, want);
}

/* A record of two jobs: job-1 killed after its commit and delivered
 * again after the visibility timeout, with a call during the kill;
 * job:2#x raced by two deliveries at once. */
static const char two_jobs[] =
    "{\"rehearsal\": \"a&b\", \"verdict\": \"pass\", \"jobs\": 2,"
    " \"kill_points\": [{\"scenario\": \"kill-after-commit\", \"job\": \"job-1\", \"attempt\": 1,"
    "   \"step\": \"after-commit\", \"killed_at\": \"2026-12-01T10:00:00.300000Z\", \"msg_id\": 1,"
    "   \"recovery_ms\": 2000}],"
    " \"evidence\": ["
    "  {\"job\": \"job-1\", \"msg_id\": 1, \"attempt\": 1, \"published_at\": \"2026-12-01T10:00:00.000000Z\","
    "   \"consumed_at\": \"2026-12-01T10:00:00.100000Z\", \"committed_at\": \"2026-12-01T10:00:00.200000Z\","
    "   \"acked_at\": null, \"outcome\": \"killed at after-commit\", \"branch\": \"inserted\","
    "   \"calls\": [{\"at\": \"2026-12-01T10:00:00.250000Z\", \"method\": \"POST\", \"path\": \"/v1/charges\","
    "     \"status\": 0, \"answer\": \"killed\"}]},"
    "  {\"job\": \"job:2#x\", \"msg_id\": 2, \"attempt\": 1, \"published_at\": \"2026-12-01T10:00:00.000000Z\","
    "   \"consumed_at\": \"2026-12-01T10:00:00.100000Z\", \"committed_at\": \"2026-12-01T10:00:00.150000Z\","
    "   \"acked_at\": \"2026-12-01T10:00:00.160000Z\", \"outcome\": \"acked\", \"branch\": \"inserted\"},"
    "  {\"job\": \"job:2#x\", \"msg_id\": 3, \"attempt\": 1, \"published_at\": \"2026-12-01T10:00:00.001000Z\","
    "   \"consumed_at\": \"2026-12-01T10:00:00.120000Z\", \"committed_at\": null,"
    "   \"acked_at\": \"2026-12-01T10:00:00.170000Z\", \"outcome\": \"acked\", \"branch\": \"conflict-noop\"},"
    "  {\"job\": \"job-1\", \"msg_id\": 1, \"attempt\": 2, \"published_at\": \"2026-12-01T10:00:00.000000Z\","
    "   \"consumed_at\": \"2026-12-01T10:00:02.300000Z\", \"committed_at\": null,"
    "   \"acked_at\": \"2026-12-01T10:00:02.310000Z\", \"outcome\": \"acked\", \"branch\": \"found-existing\"}],"
    " \"calls\": [], \"measures\": []}";

static int
has(const char *text, const char *part)
{
	return text != NULL && strstr(text, part) != NULL;
}

/* A volume run: 60 jobs, acked at once but for job-0007, killed and
 * recovered, and job-0042, never acked. */
static json_t *
volume_run(void)
{
	json_t *r = json_pack("{s:s,s:s,s:i,s:[],s:[],s:[]}", "rehearsal", "v", "verdict", "fail",
	    "jobs", 60, "evidence", "calls", "measures");
	json_t *kills = json_array();
	int i;

	for (i = 1; i <= 60; i++) {
		char job[16];

		snprintf(job, sizeof(job), "job-%04d", i);
		json_array_append_new(json_object_get(r, "evidence"), json_pack(
		    "{s:s,s:i,s:i,s:s,s:s,s:o,s:s,s:s}", "job", job, "msg_id", i, "attempt", 1,
		    "published_at", "2026-12-01T10:00:00.000000Z",
		    "consumed_at", "2026-12-01T10:00:01.000000Z",
		    "acked_at", i == 42 ? json_null() : json_string("2026-12-01T10:00:01.500000Z"),
		    "outcome", i == 7 ? "killed at before-commit" : i == 42 ? "not acked" : "acked",
		    "branch", "inserted"));
	}
	json_array_append_new(kills, json_pack("{s:s,s:s,s:i,s:s,s:s,s:i}", "scenario", "k",
	    "job", "job-0007", "attempt", 1, "step", "before-commit",
	    "killed_at", "2026-12-01T10:00:01.200000Z", "recovery_ms", 2100));
	json_array_append_new(kills, json_pack("{s:s,s:s,s:i,s:s,s:s,s:i}", "scenario", "k",
	    "job", "job-0009", "attempt", 1, "step", "before-commit",
	    "killed_at", "2026-12-01T10:00:01.200000Z", "recovery_ms", 2900));
	json_object_set_new(r, "kill_points", kills);
	return r;
}

int
main(void)
{
	json_t *record = json_loads(two_jobs, 0, NULL), *v, *hist;
	char *text;
	long long t;

	expect_duration(0, "0 ms");
	expect_duration(9999, "9999 ms");
	expect_duration(10000, "10 s");
	expect_duration(12345, "12.3 s");
	expect_duration(119999, "119.9 s");
	expect_duration(120000, "2 min");
	expect_duration(150000, "2 min 30 s");
	expect_duration(5400000, "90 min");
	expect_duration(7200000, "2 h");
	expect_duration(93600000, "26 h");
	expect_duration(95400000, "26 h 30 min");
	expect_duration(172800000, "2 d");
	expect_duration(183600000, "2 d 3 h");
	expect_duration(-1500, "-1500 ms");

	t = idem_timeline_parse_time("2026-11-29T14:28:31.432631Z");
	CHECK(t == 1795962511432631LL, "a time with microseconds");
	CHECK(idem_timeline_parse_time("2026-11-29T14:28:31Z") == 1795962511000000LL,
	    "a time without a fraction");
	CHECK(idem_timeline_parse_time("2026-11-29T14:28:31.4Z") == 1795962511400000LL,
	    "a time with tenths");
	CHECK(idem_timeline_parse_time("2026-11-29 14:28:31Z") == -1, "a blank for T is refused");
	CHECK(idem_timeline_parse_time("2026-11-29T14:28:31.Z") == -1, "a dot without digits");
	CHECK(idem_timeline_parse_time("2026-11-29T14:28:31.4") == -1, "a time without Z");
	CHECK(idem_timeline_parse_time(NULL) == -1, "no time");
	CHECK(idem_timeline_offset_ms("2026-11-29T14:28:31.433131Z", t) == 1, "offsets round");

	CHECK(record != NULL, "the record fixture parses");
	CHECK(idem_timeline_start(record) == idem_timeline_parse_time("2026-12-01T10:00:00Z"),
	    "the run starts at its first publish");
	text = idem_timeline_mermaid(record);
	CHECK(has(text, "gantt\n") && has(text, "    dateFormat x\n"), "a gantt chart in ms");
	CHECK(has(text, "    section job-1 kill-after-commit\n"), "a job's section names its scenario");
	CHECK(has(text, "    msg 1 try 1 inserted, killed at after-commit :crit, 100, 300\n"),
	    "the killed attempt ends at the kill");
	CHECK(has(text, "    KILL at after-commit :crit, milestone, 300, 300\n"), "the kill");
	CHECK(has(text, "    visibility gap 2000 ms, redelivery :300, 2300\n"), "the visibility gap");
	CHECK(has(text, "    external call POST /v1/charges 0 killed :milestone, 250, 250\n"),
	    "the call on the same axis");
	CHECK(has(text, "    msg 1 try 2 found-existing, acked :done, 2300, 2310\n"), "the redelivery");
	CHECK(has(text, "    section job 2 x race, two lanes on one key\n"),
	    "a race, its job's name without what Mermaid reads as syntax");
	CHECK(has(text, "    msg 3 try 1 conflict-noop, acked :done, 120, 170\n"), "the second lane");
	CHECK(!has(text, "section job:2"), "no colon in a section name");
	free(text);

	text = idem_timeline_svg(record);
	CHECK(has(text, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "), "an SVG document");
	CHECK(has(text, "<title>a&amp;b: pass"), "the rehearsal's name escaped");
	CHECK(has(text, "</svg>\n"), "the document ends");
	free(text);
	json_object_set_new(record, "rehearsal", json_string("a\001" "b"));
	text = idem_timeline_svg(record);
	CHECK(has(text, "<title>a b: pass") && !has(text, "\x01"),
	    "a control character, which XML forbids, becomes a blank");
	free(text);
	hist = idem_timeline_histogram(record);
	CHECK(json_array_size(hist) == 0, "no histogram for a run of a few jobs");
	json_decref(hist);
	/* a late answer, marked where it came, past the rest of the run */
	json_object_set_new(json_array_get(json_object_get(json_array_get(json_object_get(record,
	    "evidence"), 0), "calls"), 0), "answer", json_string("late"));
	json_object_set_new(json_array_get(json_object_get(json_array_get(json_object_get(record,
	    "evidence"), 0), "calls"), 0), "id", json_integer(7));
	json_object_set_new(json_array_get(json_object_get(json_array_get(json_object_get(record,
	    "evidence"), 0), "calls"), 0), "answered_at", json_string("2026-12-01T10:00:03.250000Z"));
	json_array_append_new(json_object_get(record, "calls"), json_pack("{s:s,s:s}", "at",
	    "2026-12-01T10:00:00.250000Z", "answered_at", "2026-12-01T10:00:03.250000Z"));
	text = idem_timeline_mermaid(record);
	CHECK(has(text, "    external call POST /v1/charges 0 late :milestone, 250, 250\n"),
	    "the late call where it was made");
	CHECK(has(text, "    LATE answer to call 7 :milestone, 3250, 3250\n"), "and its answer where it came");
	free(text);
	text = idem_timeline_svg(record);
	CHECK(has(text, ">LATE</text>") && has(text, "<title>LATE answer to call 7 (3250 to 3250 ms)"),
	    "the drawing marks it, in words too");
	free(text);
	json_decref(record);

	record = volume_run();
	text = idem_timeline_mermaid(record);
	CHECK(has(text, "title the jobs of the scenarios, 3 of 60,"), "a volume run shows its scenarios' jobs");
	CHECK(has(text, "section job-0007 k\n") && has(text, "section job-0009 k\n") &&
	    has(text, "section job-0042\n") && !has(text, "section job-0001\n"),
	    "the killed and the pending jobs, not the others");
	free(text);
	hist = idem_timeline_histogram(record);
	CHECK(json_array_size(hist) == 2, "no more ranges than recovery times");
	v = json_array_get(hist, 0);
	CHECK_STR(json_string_value(json_object_get(v, "range")), "2100 ms to 2500 ms", "the first range");
	CHECK(json_integer_value(json_object_get(v, "kills")) == 1, "one kill in the first range");
	CHECK(json_integer_value(json_object_get(json_array_get(hist, 1), "kills")) == 1,
	    "the slowest in the last range");
	json_decref(hist);
	/* eight more kills: ten recovery times in eight ranges */
	for (t = 0; t < 8; t++)
		json_array_append_new(json_object_get(record, "kill_points"), json_pack("{s:s,s:I}",
		    "job", "job-0009", "recovery_ms", (json_int_t)(2100 + t * 100)));
	hist = idem_timeline_histogram(record);
	CHECK(json_array_size(hist) == 8, "eight ranges at most");
	CHECK_STR(json_string_value(json_object_get(json_array_get(hist, 0), "range")),
	    "2100 ms to 2200 ms", "ranges of equal width from the fastest");
	CHECK(json_integer_value(json_object_get(json_array_get(hist, 0), "kills")) == 3,
	    "the fastest range counts its kills");
	CHECK(json_integer_value(json_object_get(json_array_get(hist, 7), "kills")) == 1,
	    "the slowest in the last range");
	json_decref(hist);
	json_decref(record);
	return unit_done("timeline");
}
