#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "queue.h"
#include "unit.h"

static const char *const kinds[] = { "idem", "pg-boss", "graphile-worker" };
static const char *const required[] = { "installed", "version", "publish", "observe",
	"deliveries", "deliveries-of-key", "unacked", "unacked-list", "hold-back", "let-go",
	"account", "denied", "expire" };

/* Whether a section of the adapter holds a text. */
static int
section_holds(const struct idem_queue *q, const char *section, const char *text)
{
	size_t i;

	for (i = 0; i < q->nsections; i++)
		if (strcmp(q->sections[i].name, section) == 0)
			return memmem(q->sections[i].sql, q->sections[i].len, text, strlen(text)) != NULL;
	return 0;
}

/* Whether every :'queue' of a section lies outside dollar quotes, where it
 * is a literal of its own and not text inside a function body. */
static int
placeholders_outside_bodies(const struct idem_queue_section *s)
{
	const char *p = s->sql, *end = s->sql + s->len;
	int inside = 0;

	for (; p < end; p++) {
		if (p + 1 < end && p[0] == '$' && p[1] == '$') {
			inside = !inside;
			p++;
		} else if (inside && (size_t)(end - p) >= 8 && strncmp(p, ":'queue'", 8) == 0) {
			return 0;
		}
	}
	return !inside;
}

/* parse TEXT as the file a.sql of kind want (NULL: any): its status, and
 * the error's text in err */
static int
parse(const char *text, const char *want, struct idem_error *err)
{
	struct idem_queue q;
	int rc = idem_queue_parse(&q, "a.sql", idem_estrdup(text), strlen(text), want, "q", err);

	idem_queue_close(&q);
	return rc;
}

/* A team's adapter file: every built-in adapter read as a file is taken;
 * a section missing, unknown, twice or empty, a kind that is not a name
 * or not the seed's, are each refused naming the file, line and section. */
static void
test_files(void)
{
	struct idem_queue q;
	struct idem_error err;
	char *whole, *text;
	size_t len;

	CHECK(idem_queue_open_file(&q, "lib/queues/pg-boss.sql", "pg-boss", "q", &err) == 0,
	    "a built-in adapter is an adapter file too");
	CHECK_STR(q.kind, "pg-boss", "its kind from its header");
	CHECK(strlen(q.sha256) == 64 && q.path != NULL && idem_queue_has(&q, "rescue"),
	    "its SHA-256, path and sections");
	idem_queue_close(&q);
	CHECK(idem_queue_open_file(&q, "no/such.sql", NULL, "q", &err) < 0 &&
	    err.status == IDEM_EXIT_USAGE && strstr(err.text, "no/such.sql: No such file") != NULL,
	    "a file not there: bad input, naming it");
	idem_queue_close(&q);
	whole = idem_read_file("lib/queues/idem.sql", &len, &err);
	CHECK(whole != NULL && parse(whole, "idem", &err) == 0, "idem.sql parses");
	CHECK(parse(whole, "jobs", &err) < 0 && err.status == IDEM_EXIT_USAGE &&
	    strstr(err.text, "a.sql:1: kind idem: the seed's queue is of kind jobs") != NULL,
	    "another kind than the seed's");
	text = idem_estrdup(whole);
	memcpy(strstr(text, "-- @observe\n"), "-- @observd\n", 12);
	CHECK(parse(text, NULL, &err) < 0 && strstr(err.text, ": section @observd: not a section") &&
	    strncmp(err.text, "a.sql:", 6) == 0, "an unknown section, named with its line");
	free(text);
	text = idem_estrdup(whole);
	memcpy(strstr(text, "-- @observe\n"), "-- @version\n", 12);
	CHECK(parse(text, NULL, &err) < 0 && strstr(err.text, "section @version: a second one"),
	    "a section twice");
	free(text);
	CHECK(parse("-- kind: jobs\n-- @installed\nSELECT true\n", NULL, &err) < 0 &&
	    strstr(err.text, "a.sql:3: section @version: missing") != NULL, "a missing section");
	CHECK(parse("-- kind: Jobs\n-- @installed\nSELECT true\n", NULL, &err) < 0 &&
	    strstr(err.text, "a.sql:1: kind Jobs: lowercase") != NULL, "a kind that is not a name");
	CHECK(parse("-- @installed\nSELECT true\n", NULL, &err) < 0 &&
	    strstr(err.text, "a.sql:1: no \"-- kind: KIND\" line") != NULL, "no kind");
	CHECK(parse("-- kind: jobs\n-- @installed\n-- nothing\n\n-- @version\nSELECT 1\n", NULL,
	    &err) < 0 && strstr(err.text, "a.sql:2: section @installed: no SQL in it") != NULL,
	    "a section of comments only");
	free(whole);
}

/* The adapter a stream's seed row names: its file when it has one, whose
 * SHA-256 must still be the row's; the built-in adapter of its kind else. */
static void
test_seed_row(void)
{
	struct idem_queue q;
	struct idem_error err;
	char sha[65];

	CHECK(idem_queue_open_file(&q, "lib/queues/idem.sql", NULL, "q", &err) == 0,
	    "idem.sql read for its SHA-256");
	memcpy(sha, q.sha256, sizeof(sha));
	idem_queue_close(&q);
	CHECK(idem_queue_open_seed(&q, "idem", "q", "lib/queues/idem.sql", sha, &err) == 0 &&
	    strcmp(q.sha256, sha) == 0 && q.path != NULL, "an adapter file whose bytes are the row's");
	idem_queue_close(&q);
	sha[0] = sha[0] == '0' ? '1' : '0';
	CHECK(idem_queue_open_seed(&q, "idem", "q", "lib/queues/idem.sql", sha, &err) < 0 &&
	    err.status == IDEM_EXIT_USAGE && strncmp(err.text, "lib/queues/idem.sql: the adapter "
	    "changed since seed-gen read it (SHA-256 ", 60) == 0 &&
	    strstr(err.text, "): run the pipeline again from seed-gen") != NULL,
	    "an adapter file whose bytes changed since seed-gen: refused");
	idem_queue_close(&q);
	CHECK(idem_queue_open_seed(&q, "pg-boss", "q", NULL, NULL, &err) == 0 && q.path == NULL &&
	    strcmp(q.kind, "pg-boss") == 0, "no file: the built-in adapter of the kind");
	idem_queue_close(&q);
	CHECK(idem_queue_open_seed(&q, "team-jobs", "q", NULL, NULL, &err) < 0 &&
	    err.status == IDEM_EXIT_USAGE, "no file, and a kind with none built in: refused");
	idem_queue_close(&q);
}

int
main(void)
{
	struct idem_queue q;
	struct idem_error err;
	size_t i, j;
	char *a, *items[3] = { "plain", "with \"quotes\"", "back\\slash, comma" };

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		char name[64];

		CHECK(idem_queue_open(&q, kinds[i], "q", &err) == 0, "every kind has an adapter");
		CHECK_STR(q.kind, kinds[i], "the adapter says its kind");
		CHECK(q.install != NULL && strlen(q.install) > 20, "and how to install its library");
		for (j = 0; j < sizeof(required) / sizeof(required[0]); j++) {
			snprintf(name, sizeof(name), "%s has a %s section", kinds[i], required[j]);
			CHECK(idem_queue_has(&q, required[j]), name);
		}
		/* queue-check(1) takes and acks through them */
		snprintf(name, sizeof(name), "%s has consume and complete", kinds[i]);
		CHECK(idem_queue_has(&q, "consume") && idem_queue_has(&q, "complete") &&
		    section_holds(&q, "consume", "$1") && section_holds(&q, "complete", "$1"), name);
		for (j = 0; j < q.nsections; j++) {
			snprintf(name, sizeof(name), "%s %s: :'queue' outside function bodies", kinds[i],
			    q.sections[j].name);
			CHECK(placeholders_outside_bodies(&q.sections[j]), name);
			snprintf(name, sizeof(name), "%s %s: not empty", kinds[i], q.sections[j].name);
			CHECK(q.sections[j].len > 10, name);
		}
		idem_queue_close(&q);
	}
	CHECK(idem_queue_open(&q, NULL, "q", &err) == 0 && strcmp(q.kind, "idem") == 0,
	    "no kind is idem's queue");
	CHECK(idem_queue_has(&q, "copy") && !idem_queue_has(&q, "rescue"),
	    "idem's queue takes COPY and needs no rescue: its visibility timeout makes a message visible again");
	idem_queue_close(&q);
	CHECK(idem_queue_open(&q, "pg-boss", "q", &err) == 0 && idem_queue_has(&q, "rescue") &&
	    !idem_queue_has(&q, "copy"), "pg-boss's expiry is its rescue");
	idem_queue_close(&q);
	/* the plan's leases: held at each delivery, or passed over by the
	 * rescue where the rescue alone ends a lease */
	CHECK(idem_queue_open(&q, "idem", "q", &err) == 0 && idem_queue_has(&q, "hold-lease"),
	    "idem's queue holds the plan's leases at delivery");
	idem_queue_close(&q);
	CHECK(idem_queue_open(&q, "pg-boss", "q", &err) == 0 && idem_queue_has(&q, "hold-lease"),
	    "pg-boss holds the plan's leases in the fetched row, which its worker's timer reads");
	idem_queue_close(&q);
	CHECK(idem_queue_open(&q, "graphile-worker", "q", &err) == 0 &&
	    !idem_queue_has(&q, "hold-lease") && idem_queue_has(&q, "rescue") &&
	    section_holds(&q, "rescue", "idem_run.leased"),
	    "graphile-worker's rescue passes the plan's leases over");
	idem_queue_close(&q);
	CHECK(idem_queue_open(&q, "sqs", "q", &err) < 0 && err.status == IDEM_EXIT_USAGE,
	    "a kind without an adapter is refused");
	CHECK(strstr(err.text, "sqs") != NULL, "naming the kind");
	idem_queue_close(&q);

	a = idem_queue_text_array(items, 3);
	CHECK_STR(a, "{\"plain\",\"with \\\"quotes\\\"\",\"back\\\\slash, comma\"}",
	    "a text array quotes every element");
	free(a);
	a = idem_queue_text_array(items, 0);
	CHECK_STR(a, "{}", "an empty array");
	free(a);
	{
		struct idem_text_array grown = { 0 };
		char many[8];
		int i;

		a = idem_text_array_take(&grown);
		CHECK_STR(a, "{}", "an array grown by none is empty");
		free(a);
		for (i = 0; i < 3; i++)
			idem_text_array_add(&grown, items[i]);
		CHECK(grown.n == 3, "an array grown one element at a time counts them");
		CHECK_STR(grown.text, "{\"plain\",\"with \\\"quotes\\\"\",\"back\\\\slash, comma\"}",
		    "an array grown one element at a time is the same literal");
		a = idem_text_array_take(&grown);
		CHECK(grown.text == NULL && grown.n == 0, "taking its text empties it");
		free(a);
		for (i = 0; i < 1000; i++) {
			snprintf(many, sizeof(many), "m%d", i);
			idem_text_array_add(&grown, many);
		}
		CHECK(strncmp(grown.text, "{\"m0\",\"m1\",", 11) == 0 &&
		    strcmp(grown.text + grown.len - 7, "\"m999\"}") == 0 && grown.len == strlen(grown.text),
		    "a thousand elements, as it grows");
		free(idem_text_array_take(&grown));
	}
	test_files();
	test_seed_row();
	return unit_done("queue");
}
