#include <stdlib.h>

#include "mkrecord/handoff.h"
#include "unit.h"

static void
expect_block(const char *command, int sql, size_t width, const char *want, const char *name)
{
	char *got = idem_handoff_block(command, sql, width);

	CHECK_STR(got, want, name);
	free(got);
}

static void
expect_fold(const char *md, size_t width, const char *want, const char *name)
{
	char *got = idem_handoff_fold(md, width);

	CHECK_STR(got, want, name);
	free(got);
}

static const char *
field(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

int
main(void)
{
	json_t *ctx, *m;
	struct idem_handoff_files files = { .record = "records/r.yaml", .svg = "r.svg",
		.signers = "records/allowed_signers", .principal = "eng@example.org",
		.fingerprint = "SHA256:abc" };

	expect_block("seed-gen s.yaml | count-effects --before | dup-publish | kill-at", 0, 40,
	    "    seed-gen s.yaml |\n        count-effects --before |\n        dup-publish | kill-at",
	    "a pipeline breaks after a pipe where it can");
	expect_block("a && bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 0, 30,
	    "    a &&\n        bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "after && too");
	expect_block("echo 'a b c d e f g h' x", 0, 16,
	    "    echo \\\n        'a b c d e f g h' \\\n        x", "never inside quotes");
	expect_block("SELECT 'a b c' AS x FROM t", 1, 20,
	    "    SELECT 'a b c'\n        AS x FROM t", "SQL: no backslash");
	expect_block("short", 0, 120, "    short", "a short command stays on its line");

	expect_fold("- one two three four five six\n", 14,
	    "- one two\n  three four\n  five six\n", "a list item hangs under its text");
	expect_fold("| a long table row stays |\n    a long code line stays\n", 10,
	    "| a long table row stays |\n    a long code line stays\n", "tables and code stay");
	expect_fold("```mermaid\nsection a long line stays\n```\n", 10,
	    "```mermaid\nsection a long line stays\n```\n", "fenced blocks stay");
	expect_fold("unbreakable_word_longer than", 10, "unbreakable_word_longer\nthan",
	    "a word longer than the width stands alone, no newline added at the end");

	ctx = json_loads("{\"reproduce\": \"seed-gen s.yaml\", \"retry\": {\"visibility_timeout_ms\": 2000},"
	    " \"guards\": [{\"kind\": \"none\", \"definition\": \"none: best effort\"},"
	    "  {\"kind\": \"unique\", \"definition\": \"UNIQUE (k)\"}],"
	    " \"waiting\": [{\"cause\": \"reviewer-queue\", \"duration_ms\": 93600000}],"
	    " \"evidence\": [{\"job\": \"j\", \"published_at\": \"2026-12-01T10:00:00.000000Z\","
	    "   \"consumed_at\": \"2026-12-01T10:00:12.345678Z\", \"outcome\": \"acked\", \"branch\": \"inserted\"}],"
	    " \"measures\": [{\"name\": \"duplicate_effects_per_1000_jobs\", \"value\": \"166.667\","
	    "   \"numerator\": 1, \"denominator\": 6, \"unit\": \"per 1000 accepted jobs\","
	    "   \"window\": {\"start\": \"2026-12-01T10:00:00.000000Z\", \"end\": \"2026-12-01T10:00:02.500000Z\"},"
	    "   \"interval\": {\"low\": 4.2, \"high\": 641.3, \"confidence\": 0.95}},"
	    "  {\"name\": \"recovery_ms_max\", \"value\": \"93600000\", \"numerator\": null, \"denominator\": 3,"
	    "   \"unit\": \"ms from kill to clean retry ack\","
	    "   \"window\": {\"start\": \"2026-12-01T10:00:00.000000Z\", \"end\": \"2026-12-01T10:00:02.500000Z\"}}]}",
	    0, NULL);
	CHECK(ctx != NULL, "the context fixture parses");
	idem_handoff_context(ctx, &files);
	m = json_array_get(json_object_get(ctx, "measures"), 0);
	CHECK_STR(field(m, "value_text"), "166.667 per 1000 accepted jobs", "a rate with its unit");
	CHECK_STR(field(m, "numerator_text"), "1", "its numerator");
	CHECK_STR(field(m, "denominator_text"), "6 accepted jobs", "its denominator, not merged into the unit");
	CHECK_STR(field(m, "window_text"), "0 ms to 2500 ms", "its window from the run's start");
	CHECK_STR(field(m, "interval_text"), "95%: 4.200 to 641.300", "its interval when the record has one");
	m = json_array_get(json_object_get(ctx, "measures"), 1);
	CHECK_STR(field(m, "value_text"), "26 h from kill to clean retry ack", "a duration in human units");
	CHECK_STR(field(m, "denominator_text"), "n = 3", "how many it is of");
	CHECK(json_object_get(m, "interval_text") == NULL, "no interval when the record has none");
	CHECK_STR(field(json_array_get(json_object_get(ctx, "waiting"), 0), "duration"), "26 h",
	    "waiting in human units");
	CHECK(json_is_true(json_object_get(json_array_get(json_object_get(ctx, "guards"), 0), "none")) &&
	    json_is_false(json_object_get(json_array_get(json_object_get(ctx, "guards"), 1), "none")),
	    "a guard of kind none is marked");
	CHECK_STR(field(json_array_get(json_object_get(ctx, "evidence"), 0), "consumed"), "12.3 s",
	    "evidence times from the run's start");
	CHECK_STR(field(json_array_get(json_object_get(ctx, "evidence"), 0), "result"), "acked: inserted",
	    "outcome and branch");
	CHECK_STR(field(ctx, "run_start"), "2026-12-01T10:00:00.000Z", "the run's start, in ms");
	CHECK_STR(field(json_object_get(ctx, "retry"), "visibility_timeout"), "2000 ms",
	    "the visibility timeout");
	CHECK_STR(field(json_object_get(ctx, "commands"), "verify"), "    verify-record records/r.yaml",
	    "the command that verifies the record");
	CHECK_STR(field(json_object_get(ctx, "commands"), "ssh_keygen"),
	    "    ssh-keygen -Y verify -f records/allowed_signers -I eng@example.org -n idem-record -s "
	    "records/r.yaml.sig \\\n        <records/r.yaml", "and ssh-keygen's, folded to fit");
	CHECK_STR(field(json_object_get(ctx, "signer"), "fingerprint"), "SHA256:abc", "the signer");
	CHECK(field(json_object_get(ctx, "timeline"), "mermaid") != NULL, "the timeline");
	json_decref(ctx);
	return unit_done("handoff");
}
