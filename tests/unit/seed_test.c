#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "seed.h"
#include "tsv.h"
#include "unit.h"

/* A refused seed's message, for a file of fixtures/bad. */
static void
refused(const char *name, const char *want)
{
	struct idem_seed s;
	struct idem_error err;
	char path[128];

	snprintf(path, sizeof(path), "tests/fixtures/bad/%s.yaml", name);
	CHECK(idem_seed_load(&s, path, &err) < 0 && err.status == IDEM_EXIT_USAGE, name);
	CHECK(strncmp(err.text, path, strlen(path)) == 0 && strstr(err.text, want) != NULL, want);
	idem_seed_free(&s);
}

/* The text the templates see under key in the seed's JSON, or NULL. */
static const char *
seen_by_templates(const struct idem_seed *s, const char *key)
{
	static char text[256];
	json_t *json = idem_seed_to_json(s);
	const char *value = json_string_value(json_object_get(json, key));

	if (value != NULL)
		snprintf(text, sizeof(text), "%s", value);
	json_decref(json);
	return value != NULL ? text : NULL;
}

/* The queue: a text is idem's queue of that name; a mapping names its kind. */
static void
queue(void)
{
	struct idem_seed s;
	struct idem_error err;
	char kinds[64] = "";
	char *k;

	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/minimal.yaml", &err) == 0, "minimal seed loads");
	CHECK_STR(s.queue, "rehearsal_minimal", "a text queue is its name");
	CHECK_STR(s.queue_kind, "idem", "a text queue is idem's");
	CHECK_STR(seen_by_templates(&s, "queue_kind"), "idem", "the templates see the kind");
	idem_seed_free(&s);

	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/queue-pg-boss.yaml", &err) == 0,
	    "a mapping queue loads");
	CHECK_STR(s.queue, "send-confirmation", "a mapping queue's name");
	CHECK_STR(s.queue_kind, "pg-boss", "a mapping queue's kind");
	CHECK_STR(seen_by_templates(&s, "queue"), "send-confirmation",
	    "the templates see the name as queue");
	CHECK_STR(seen_by_templates(&s, "queue_kind"), "pg-boss", "and the kind as queue_kind");
	idem_seed_free(&s);

	CHECK(idem_seed_load(&s, "tests/fuzz/corpus/seed/queue-graphile-worker.yaml", &err) == 0,
	    "a graphile-worker queue loads");
	CHECK_STR(s.queue_kind, "graphile-worker", "graphile-worker");
	idem_seed_free(&s);

	/* every kind the stream knows is one a seed may name */
	snprintf(kinds, sizeof(kinds), "%s", IDEM_QUEUE_KINDS);
	for (k = strtok(kinds, " "); k != NULL; k = strtok(NULL, " ")) {
		char path[] = "/tmp/seed_test.XXXXXX", text[512];
		int fd = mkstemp(path);

		snprintf(text, sizeof(text), "rehearsal: r\njob_type: t\nqueue: { kind: %s, name: q }\n"
		    "effect: { table: t.t, key: [k] }\npayload_schema: { k: string }\n"
		    "jobs: [ { id: a, payload: { k: x } } ]\nexpect: { effects: 1 }\n", k);
		CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "temp seed");
		close(fd);
		CHECK(idem_seed_load(&s, path, &err) == 0, k);
		CHECK(s.queue_kind != NULL && strcmp(s.queue_kind, k) == 0, k);
		idem_seed_free(&s);
		unlink(path);
	}

	refused("queue-kind-other", ":3:16: queue.kind: expected idem, pg-boss or graphile-worker, got \"sqs\"");
	refused("queue-kind-missing", ":3:8: queue.kind: required key missing");
	refused("queue-kind-twice", ":3:25: queue.kind: key given twice");
	refused("queue-name-missing", ":3:8: queue.name: required key missing");
	refused("queue-name-empty", ":3:39: queue.name: empty");
	refused("queue-name-null", ":3:31: queue.name: expected text, got a null");
	refused("queue-unknown-key", ":6:3: queue.schema: unknown key (a typo?)");
	refused("queue-list", ":3:8: queue: expected a queue name or a mapping { kind: KIND, name: NAME }, got a list");
	refused("queue-null", ":3:7: queue: expected a queue name or a mapping");
}

/* The external call: its fields, its expected count, the vendor's faults,
 * and what is refused. */
static void
external(void)
{
	char *one[] = { "invoice_id" }, *two[] = { "invoice_id", "line_no" }, *flag[] = { "urgent" };
	char *missing[] = { "invoice_id", "absent" }, *nested[] = { "extra" };
	struct idem_seed s;
	struct idem_error err;
	json_t *json, *body;
	char *key;

	CHECK(idem_seed_load(&s, "seeds/invoice-line.yaml", &err) == 0, "example seed loads");
	CHECK_STR(s.external.name, "payment charge", "the external call's name");
	CHECK(s.external.nkey == 2 && strcmp(s.external.key[0], "invoice_id") == 0 &&
	    strcmp(s.external.key[1], "line_no") == 0, "its key, in order");
	CHECK(!s.external.honours_idempotency_key, "a vendor that does not honour keys");
	CHECK_STR(s.external.pending_table, "demo.pending_calls", "the pending table");
	CHECK_STR(s.external.pending_owner, "owner", "its owner column");
	CHECK(s.expect_external == 6, "one charge per job expected");
	json = idem_seed_to_json(&s);
	CHECK(json_integer_value(json_object_get(json_object_get(json, "expect"), "external")) == 6,
	    "the templates see the expected calls");
	CHECK(json_is_false(json_object_get(json_object_get(json, "external"),
	    "honours_idempotency_key")), "and whether keys are honoured");
	json_decref(json);
	idem_seed_free(&s);

	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/external.yaml", &err) == 0,
	    "a seed with the vendor's faults loads");
	CHECK(s.nscenarios == 3 && strcmp(s.scenarios[1].fault, "vendor-error") == 0 &&
	    strcmp(s.scenarios[2].fault, "vendor-timeout") == 0, "vendor: error and timeout");
	CHECK(s.scenarios[1].step == NULL && s.scenarios[1].attempt == 0,
	    "a vendor fault has no step and no attempt");
	CHECK(s.scenarios[2].duplicates == 1, "and may ask for duplicates");
	CHECK(s.external.honours_idempotency_key, "a vendor that honours keys");
	idem_seed_free(&s);

	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/vendor-answers.yaml", &err) == 0,
	    "a seed with lost, late and forgotten answers loads");
	CHECK(s.nscenarios == 3 && strcmp(s.scenarios[0].fault, "vendor-lost-reply") == 0 &&
	    s.scenarios[0].vendor_ms == 0, "vendor: lost-reply, with no delay");
	CHECK(strcmp(s.scenarios[1].fault, "vendor-late-reply") == 0 && s.scenarios[1].vendor_ms == 3000,
	    "vendor: late-reply, and its delay");
	CHECK(strcmp(s.scenarios[2].fault, "vendor-forget-keys") == 0 &&
	    s.scenarios[2].vendor_ms == 86400000LL && strcmp(s.scenarios[2].step, "external-call") == 0 &&
	    s.scenarios[2].attempt == 1, "vendor: forget-keys, its window and its kill");
	CHECK(s.external.npending_key == 1 && strcmp(s.external.pending_key[0], "key") == 0 &&
	    strcmp(s.external.pending_state, "status") == 0 && s.external.npending_settled == 2,
	    "the pending table's key, state and settled values");
	idem_seed_free(&s);

	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/minimal.yaml", &err) == 0, "minimal seed loads");
	CHECK(s.external.name == NULL && s.expect_external == -1, "no external call declared");
	json = idem_seed_to_json(&s);
	CHECK(json_is_null(json_object_get(json, "external")) &&
	    json_is_null(json_object_get(json_object_get(json, "expect"), "external")),
	    "the templates see none");
	json_decref(json);
	idem_seed_free(&s);

	refused("external-name-missing", ":6:11: external.name: required key missing");
	refused("external-key-missing", ":6:11: external.key: required: a list of the payload fields");
	refused("external-key-unknown", ":6:40: external.key: \"order_no\" must be a string, integer "
	    "or boolean field of payload_schema");
	refused("external-key-object", ":6:40: external.key: \"note\" must be a string");
	refused("external-honours-missing", ":6:11: external.honours_idempotency_key: required: true "
	    "when the vendor answers a repeated Idempotency-Key");
	refused("external-honours-text", ":6:77: external.honours_idempotency_key: expected true or "
	    "false, got a string");
	refused("external-unknown-key", ":6:84: external.url: unknown key (a typo?)");
	refused("external-pending-owner", ":10:12: external.pending.owner: required key missing");
	refused("external-not-mapping", ":6:11: external: expected a mapping, got a string");
	refused("expect-external-missing", ":9:9: expect.external: required when external is declared");
	refused("expect-external-undeclared", ":8:33: expect.external: no external effect is declared");
	refused("external-call-undeclared", ":8:54: scenarios[0]: kill: external-call is the call to an "
	    "external system: declare it with external:");
	refused("vendor-undeclared", ":8:54: scenarios[0]: vendor: a vendor fault needs the external "
	    "call it faults");
	refused("vendor-unknown", ":9:54: scenarios[0]: vendor: expected error, timeout, lost-reply, late-reply or forget-keys, got \"slow\"");
	refused("vendor-late-no-delay", ":9:14: scenarios[0].delay: required with vendor: late-reply");
	refused("vendor-late-too-long", ":9:66: scenarios[0].delay: a delay from 1ms to 60s");
	refused("vendor-delay-on-error", ":9:61: scenarios[0].delay: applies to vendor: late-reply only");
	refused("vendor-forget-no-kill", ":9:14: scenarios[0]: vendor: forget-keys goes with a kill");
	refused("external-pending-state-alone", ":10:12: external.pending.settled: state and settled "
	    "go together");
	refused("vendor-and-kill", ":9:14: scenarios[0]: declare one of kill, race, vendor and stall, not two");

	/* a call's business key, read from its body as a job's from its payload */
	body = json_loads("{\"invoice_id\":\"inv-1\",\"line_no\":1,\"urgent\":true,\"extra\":{}}",
	    0, NULL);
	key = idem_business_key(body, one, 1);
	CHECK_STR(key, "inv-1", "one string field: its text");
	free(key);
	key = idem_business_key(body, two, 2);
	CHECK_STR(key, "[\"inv-1\",1]", "two fields: a JSON array in key order");
	free(key);
	key = idem_business_key(body, flag, 1);
	CHECK_STR(key, "true", "one boolean field: true or false");
	free(key);
	CHECK(idem_business_key(body, missing, 2) == NULL, "a missing field: no key");
	CHECK(idem_business_key(body, nested, 1) == NULL, "an object field: no key");
	json_decref(body);
}

static const struct idem_seed_job *
job(const struct idem_seed *s, const char *id)
{
	size_t i;

	for (i = 0; i < s->ndeclared; i++)
		if (strcmp(s->declared[i].id, id) == 0)
			return &s->declared[i];
	return NULL;
}

/* Writes text to dir/name. */
static void
put(const char *dir, const char *name, const char *text, size_t len)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	CHECK(f != NULL && fwrite(text, 1, len, f) == len && fclose(f) == 0, path);
}

/* A seed of dir/s.yaml whose queue is the mapping queue_map. */
static int
load_with_queue(struct idem_seed *s, const char *dir, const char *queue_map,
		struct idem_error *err)
{
	char text[512], path[256];

	snprintf(text, sizeof(text), "rehearsal: r\njob_type: t\nqueue: %s\n"
	    "effect: { table: t.t, key: [k] }\npayload_schema: { k: string }\n"
	    "jobs: [ { id: a, payload: { k: x } } ]\nexpect: { effects: 1 }\n", queue_map);
	put(dir, "s.yaml", text, strlen(text));
	snprintf(path, sizeof(path), "%s/s.yaml", dir);
	return idem_seed_load(s, path, err);
}

/* queue.adapter: a file of the team's own, from the seed's directory, of
 * the seed's kind, read and checked as the programs will open it. */
static void
adapter(void)
{
	char dir[] = "/tmp/seed_adapter.XXXXXX", sub[64], path[128], *idem, *own, *p;
	struct idem_seed s;
	struct idem_error err;
	size_t len;

	CHECK(mkdtemp(dir) != NULL, "temp dir");
	snprintf(sub, sizeof(sub), "%s/queues", dir);
	CHECK(mkdir(sub, 0700) == 0, "queues dir");
	idem = idem_read_file_max("lib/queues/idem.sql", 1 << 20, &len, &err);
	CHECK(idem != NULL && strncmp(idem, "-- kind: idem\n", 14) == 0, "the idem adapter");
	own = idem_emalloc(len + 16);
	snprintf(own, len + 16, "-- kind: team-jobs%s", idem + 13);
	put(dir, "queues/team.sql", own, strlen(own));
	/* the same without its observe section */
	p = strstr(own, "-- @observe\n");
	CHECK(p != NULL, "the idem adapter has an observe section");
	memcpy(p, "-- @observed\n", 13);
	put(dir, "queues/bad.sql", own, strlen(own));

	CHECK(load_with_queue(&s, dir, "{ kind: team-jobs, name: q, adapter: queues/team.sql }",
	    &err) == 0, "a kind of the team's own with its adapter");
	CHECK_STR(s.queue_kind, "team-jobs", "the adapter's kind");
	CHECK_STR(s.queue_adapter, "queues/team.sql", "the adapter as the seed names it");
	snprintf(path, sizeof(path), "%s/queues/team.sql", dir);
	CHECK_STR(s.queue_adapter_path, path, "the adapter from the seed's directory");
	CHECK(strlen(s.queue_adapter_sha256) == 64, "the adapter's SHA-256");
	idem_seed_free(&s);

	CHECK(load_with_queue(&s, dir, "{ kind: pg-boss, name: q, adapter: queues/team.sql }",
	    &err) < 0 && err.status == IDEM_EXIT_USAGE &&
	    strstr(err.text, ":3:43: queue.adapter: ") != NULL &&
	    strstr(err.text, "queues/team.sql:1: kind team-jobs: the seed's queue is of kind pg-boss")
	    != NULL, "a kind that is not the adapter's");
	idem_seed_free(&s);
	CHECK(load_with_queue(&s, dir, "{ kind: team-jobs, name: q, adapter: queues/bad.sql }",
	    &err) < 0 && err.status == IDEM_EXIT_USAGE &&
	    strstr(err.text, "queues/bad.sql:") != NULL &&
	    strstr(err.text, "section @observed: not a section of an adapter") != NULL,
	    "an adapter with a section of no known name");
	idem_seed_free(&s);
	CHECK(load_with_queue(&s, dir, "{ kind: team-jobs, name: q, adapter: /etc/team.sql }",
	    &err) < 0 && strstr(err.text, "queue.adapter: /etc/team.sql: a path from the seed's "
	    "directory, not absolute and without ..") != NULL, "an absolute adapter path");
	idem_seed_free(&s);
	CHECK(load_with_queue(&s, dir, "{ kind: team-jobs, name: q, adapter: queues/../queues/team.sql }",
	    &err) < 0 && strstr(err.text, "queue.adapter: queues/../queues/team.sql: a path from")
	    != NULL, "an adapter path with ..");
	idem_seed_free(&s);
	CHECK(load_with_queue(&s, dir, "{ kind: team-jobs, name: q, adapter: queues/x.sql/.. }",
	    &err) < 0, "an adapter path that ends in ..");
	idem_seed_free(&s);
	CHECK(load_with_queue(&s, dir, "{ kind: team-jobs, name: q, adapter: queues/no.sql }",
	    &err) < 0 && err.status == IDEM_EXIT_USAGE && strstr(err.text, "no.sql") != NULL,
	    "an adapter file that is not there");
	idem_seed_free(&s);

	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	CHECK(system(path) == 0, "temp dir removed");
	free(idem);
	free(own);
}

int
main(void)
{
	struct idem_seed s, again;
	struct idem_seed_job buf = { 0 }, buf_again = { 0 };
	struct idem_error err;
	const struct idem_seed_job *j, *k;
	size_t in_dups = 0, in_kills = 0, same = 1;
	long long i;

	CHECK(idem_seed_load(&s, "seeds/invoice-line.yaml", &err) == 0, "example seed loads");
	j = job(&s, "job-0001");
	CHECK(j != NULL, "job-0001 present");
	if (j) {
		CHECK_STR(j->payload_json,
		    "{\"amount_cents\":1250,\"currency\":\"EUR\",\"invoice_id\":\"inv-1001\",\"line_no\":1}",
		    "payload is canonical: sorted keys, no white space");
		CHECK_STR(j->business_key, "[\"inv-1001\",1]", "two key columns: a JSON array in key order");
		CHECK_STR(s.scenarios[j->scenario].name, "duplicate-publish", "job knows its scenario");
	}
	CHECK(s.visibility_timeout_ms == 2000 && s.max_attempts == 5, "retry policy");
	CHECK(s.nscenarios == 5 && strcmp(s.scenarios[4].fault, "race") == 0 &&
	    s.scenarios[4].duplicates == 1, "a race is one extra copy");
	CHECK(strcmp(s.scenarios[1].fault, "kill") == 0 && s.scenarios[1].attempt == 1 &&
	    strcmp(s.scenarios[1].step, "after-commit") == 0, "kill scenario");
	idem_seed_free(&s);

	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/escapes.yaml", &err) == 0, "escapes seed loads");
	j = job(&s, "job\tone");
	CHECK(j != NULL, "a job id with a tab");
	if (j) {
		CHECK_STR(j->business_key, "tab\there", "one key column: its plain value");
		CHECK_STR(j->payload_json, "{\"name\":\"tab\\there\",\"note\":\"line\\nbreak\\r\\n\"}",
		    "control characters escaped in JSON");
	}
	j = job(&s, "job-three");
	if (j)
		CHECK_STR(j->payload_json, "{\"name\":\"\\\\N\",\"note\":\"quote \\\" and / and \\u0001\"}",
		    "quote, slash and U+0001 in canonical JSON");
	idem_seed_free(&s);

	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/generate.yaml", &err) == 0, "volume seed loads");
	CHECK(idem_seed_load(&again, "tests/fixtures/seeds/generate.yaml", &err) == 0, "and again");
	CHECK(s.ndeclared == 1 && idem_seed_njobs(&s) == 1001, "listed and generated jobs");
	CHECK_STR(idem_seed_job(&s, 1, &buf)->id, "gen-000001", "generated ids");
	CHECK_STR(idem_seed_job(&s, 1000, &buf)->business_key, "[\"order_id-001000\",1000]",
	    "generated keys are distinct");
	CHECK_STR(idem_seed_job(&s, 0, &buf)->id, "job-0001", "the declared job first");
	for (i = 0; i < idem_seed_njobs(&s); i++) {
		j = idem_seed_job(&s, i, &buf);
		k = idem_seed_job(&again, i, &buf_again);
		same &= strcmp(j->payload_sha256, k->payload_sha256) == 0 && j->scenario == k->scenario;
		in_dups += j->scenario == 0;
		in_kills += j->scenario == 1;
	}
	idem_seed_job_clear(&buf);
	idem_seed_job_clear(&buf_again);
	CHECK(same, "generation and selection are pure functions of the seed");
	CHECK(in_dups > 60 && in_dups < 140, "every: 10 selects about a tenth");
	CHECK(in_kills > 5 && in_kills < 40, "every: 50 selects about a fiftieth of the rest");
	idem_seed_free(&s);
	idem_seed_free(&again);

	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/same-key.yaml", &err) == 0,
	    "same key: same payload allowed, other payload inside conflicting_payloads");
	idem_seed_free(&s);

	CHECK(idem_seed_load(&s, "tests/fixtures/bad/no-expect.yaml", &err) < 0 &&
	    err.status == IDEM_EXIT_USAGE, "no expect: refused with status 2");
	idem_seed_free(&s);
	CHECK(idem_seed_load(&s, "tests/fixtures/seeds/absent.yaml", &err) < 0 &&
	    strstr(err.text, "absent.yaml: No such file") != NULL, "missing file named");
	idem_seed_free(&s);

	queue();
	adapter();
	external();
	return unit_done("seed");
}
