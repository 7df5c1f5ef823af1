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

/* The keys each attempt sent, when the calls have numbers; a key changed
 * against a vendor that honours keys, and a pending check that failed,
 * each fail the verdict. */
static void
keys_by_attempt(const struct idem_handoff_files *files)
{
	json_t *ctx, *m;

	ctx = json_loads("{\"external\": {\"honours_idempotency_key\": true},"
	    " \"evidence\": [{\"job\": \"j\", \"attempt\": 1,"
	    "   \"consumed_at\": \"2026-12-01T10:00:00.000000Z\", \"calls\": ["
	    "   {\"id\": 1, \"idempotency_key\": \"k-1\", \"answer\": \"lost\", \"effect\": \"yes\","
	    "    \"at\": \"2026-12-01T10:00:00.100000Z\", \"answered_at\": null},"
	    "   {\"id\": 2, \"idempotency_key\": null, \"answer\": \"late\", \"effect\": \"yes\","
	    "    \"at\": \"2026-12-01T10:00:00.200000Z\","
	    "    \"answered_at\": \"2026-12-01T10:00:03.200000Z\"}]}],"
	    " \"calls\": [{\"id\": 1, \"at\": \"2026-12-01T10:00:00.100000Z\"},"
	    "  {\"id\": 2, \"at\": \"2026-12-01T10:00:00.200000Z\"}],"
	    " \"rekeyed\": [{\"business_key\": \"b\", \"keys\": [\"k-1\", null], \"calls\": [1, 2],"
	    "   \"effects\": 2}],"
	    " \"forgotten_keys\": [{\"at\": \"2026-12-01T10:00:01.000000Z\", \"window_ms\": 86400000}],"
	    " \"pending_calls\": [{\"result\": \"owned\"}, {\"result\": \"wrong-owner\"}]}", 0, NULL);
	CHECK(ctx != NULL, "the keys fixture parses");
	idem_handoff_context(ctx, files);
	m = json_object_get(ctx, "keys_sent");
	CHECK(json_array_size(m) == 2, "one row per call of an attempt");
	CHECK_STR(field(json_array_get(m, 0), "answered"), "none", "a lost answer came never");
	CHECK_STR(field(json_array_get(m, 1), "answered"), "3200 ms", "a late one, from the run's start");
	CHECK(json_is_null(json_object_get(json_array_get(m, 1), "idempotency_key")),
	    "a call without a key says so");
	m = json_array_get(json_object_get(ctx, "rekeyed"), 0);
	CHECK_STR(field(m, "keys_text"), "`k-1`, none", "the keys in words");
	CHECK_STR(field(m, "calls_text"), "1, 2", "the calls by their numbers");
	CHECK(json_is_true(json_object_get(m, "fails")) && json_is_true(json_object_get(ctx,
	    "rekeyed_fails")), "a changed key fails against a vendor that honours keys");
	CHECK(json_is_false(json_object_get(json_array_get(json_object_get(ctx, "pending_calls"), 0),
	    "fails")) && json_is_true(json_object_get(json_array_get(json_object_get(ctx,
	    "pending_calls"), 1), "fails")) && json_is_true(json_object_get(ctx, "pending_fails")),
	    "owned passes the pending check, wrong-owner fails it");
	CHECK_STR(field(json_array_get(json_object_get(ctx, "forgotten_keys"), 0), "window"), "24 h",
	    "a key's window in human units");
	json_decref(ctx);
	ctx = json_loads("{\"external\": {\"honours_idempotency_key\": false},"
	    " \"rekeyed\": [{\"business_key\": \"b\", \"keys\": [\"a\", \"b\"], \"calls\": [1, 2],"
	    "   \"effects\": 1}], \"calls\": [{\"id\": null}]}", 0, NULL);
	idem_handoff_context(ctx, files);
	CHECK(json_is_false(json_object_get(json_array_get(json_object_get(ctx, "rekeyed"), 0),
	    "fails")) && json_object_get(ctx, "rekeyed_fails") == NULL,
	    "a changed key against a vendor that does not honour keys is shown only");
	CHECK(json_array_size(json_object_get(ctx, "keys_sent")) == 0,
	    "no keys by attempt when the calls have no numbers");
	json_decref(ctx);
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
	CHECK(json_array_size(json_object_get(ctx, "keys_sent")) == 0,
	    "no keys by attempt for a record without calls");
	json_decref(ctx);

	keys_by_attempt(&files);
	return unit_done("handoff");
}
