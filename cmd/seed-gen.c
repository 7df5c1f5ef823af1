/* seed-gen: read a seed file, check it, and write the seed, external,
 * expect, scenario and job rows that begin an idem-tsv stream; or write a new seed
 * skeleton (--init) or the rehearsal ticket (--ticket). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seed.h"
#include "template.h"
#include "tsv.h"
#include "error.h"
#include "embed.h"

EMBED(idem_tpl_seed, "templates/seed.yaml");
EMBED(idem_tpl_ticket, "templates/ticket.md");
extern const char idem_tpl_seed[], idem_tpl_ticket[];

#define TICKET_JOBS 200

static const char synopsis[] =
	"usage: seed-gen [--ticket] seed-file\n"
	"       seed-gen --init name\n";

static char *
number(long long v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%lld", v);
	return idem_estrdup(buf);
}

static char *
json_text_list(char **items, size_t n)
{
	json_t *a = json_array();
	char *s;
	size_t i;

	for (i = 0; i < n; i++)
		json_array_append_new(a, json_string(items[i]));
	s = idem_json_canonical(a);
	json_decref(a);
	return s;
}

static char *
schema_json(const struct idem_seed *s)
{
	json_t *o = json_object();
	char *text;
	size_t i;

	for (i = 0; i < s->nschema; i++)
		json_object_set_new(o, s->schema[i].name,
		    json_string(idem_payload_type_name(s->schema[i].type)));
	text = idem_json_canonical(o);
	json_decref(o);
	return text;
}

static void
write_stream(const struct idem_seed *s)
{
	char *owned[16];
	const char *seed_row[21], *expect_row[6], *external_row[5], *row[6];
	struct idem_seed_job buf = { 0 };
	size_t i, nowned = 0;
	long long n, njobs = idem_seed_njobs(s);

	idem_tsv_write_header(stdout);
	seed_row[0] = s->path;
	seed_row[1] = s->sha256;
	seed_row[2] = s->rehearsal;
	seed_row[3] = s->job_type;
	seed_row[4] = s->queue;
	seed_row[5] = s->database;
	seed_row[6] = owned[nowned++] = number(s->visibility_timeout_ms);
	seed_row[7] = owned[nowned++] = number(s->max_attempts);
	seed_row[8] = s->sandbox_account;
	seed_row[9] = s->effect_name;
	seed_row[10] = s->effect_table;
	seed_row[11] = owned[nowned++] = json_text_list(s->key, s->nkey);
	seed_row[12] = s->key_scope;
	seed_row[13] = s->duplicate_acceptor;
	seed_row[14] = s->reconciliation_owner;
	seed_row[15] = s->worker_image;
	seed_row[16] = s->worker_version;
	seed_row[17] = s->worker_command;
	seed_row[18] = owned[nowned++] = schema_json(s);
	seed_row[19] = owned[nowned++] = json_text_list(s->cannot_reproduce, s->ncannot_reproduce);
	seed_row[20] = s->queue_kind;
	idem_tsv_write_row(stdout, "seed", seed_row, 21);
	if (s->guard_table != NULL) {
		const char *guard_row[2] = { s->guard_table,
			owned[nowned++] = json_text_list(s->guard_key, s->nguard_key) };

		idem_tsv_write_row(stdout, "declared_guard", guard_row, 2);
	}
	if (s->external.name != NULL) {
		external_row[0] = s->external.name;
		external_row[1] = owned[nowned++] = json_text_list(s->external.key, s->external.nkey);
		external_row[2] = s->external.honours_idempotency_key ? "true" : "false";
		external_row[3] = s->external.pending_table;
		external_row[4] = s->external.pending_owner;
		idem_tsv_write_row(stdout, "external", external_row, 5);
	}
	expect_row[0] = owned[nowned++] = number(s->expect_effects);
	expect_row[1] = owned[nowned++] = number(s->expect_duplicates);
	expect_row[2] = owned[nowned++] = number(s->expect_missing);
	expect_row[3] = owned[nowned++] = number(s->expect_pending);
	expect_row[4] = s->expect_external >= 0 ? (owned[nowned++] = number(s->expect_external)) : NULL;
	/* the verdict only when the seed says, so a row is as it was without it */
	expect_row[5] = s->expect_verdict;
	idem_tsv_write_row(stdout, "expect", expect_row, s->expect_verdict ? 6 : 5);
	for (i = 0; i < nowned; i++)
		free(owned[i]);
	for (i = 0; i < s->nscenarios; i++) {
		const struct idem_seed_scenario *sc = &s->scenarios[i];
		char attempt[32], duplicates[32], within[32];

		snprintf(attempt, sizeof(attempt), "%lld", sc->attempt);
		snprintf(duplicates, sizeof(duplicates), "%lld", sc->duplicates);
		snprintf(within, sizeof(within), "%lld", sc->within_ms);
		row[0] = sc->name;
		row[1] = sc->fault;
		row[2] = sc->step;
		row[3] = sc->attempt ? attempt : NULL;
		row[4] = duplicates;
		row[5] = within;
		idem_tsv_write_row(stdout, "scenario", row, 6);
	}
	/* generated jobs are made as they are written */
	for (n = 0; n < njobs; n++) {
		const struct idem_seed_job *j = idem_seed_job(s, n, &buf);

		row[0] = j->id;
		row[1] = j->business_key;
		row[2] = j->payload_json;
		row[3] = j->payload_sha256;
		row[4] = j->scenario >= 0 ? s->scenarios[j->scenario].name : NULL;
		idem_tsv_write_row(stdout, "job", row, 5);
	}
	idem_seed_job_clear(&buf);
}

/* The ticket lists the declared jobs and every job a scenario touches, not
 * a whole volume run. */
static void
write_ticket(const struct idem_seed *s)
{
	struct idem_error err;
	struct idem_seed_job buf = { 0 };
	json_t *ctx = idem_seed_to_json(s), *shown = json_array();
	long long i, njobs = idem_seed_njobs(s);
	char *text;

	for (i = 0; i < njobs && json_array_size(shown) < TICKET_JOBS; i++) {
		const struct idem_seed_job *j = idem_seed_job(s, i, &buf);

		if (j->line > 0 || j->scenario >= 0)
			json_array_append_new(shown, idem_seed_job_to_json(s, j));
	}
	idem_seed_job_clear(&buf);
	json_object_set_new(ctx, "ticket_jobs", shown);
	text = idem_template_render("ticket.md", idem_tpl_ticket, ctx, IDEM_ESCAPE_MARKDOWN, &err);
	json_decref(ctx);
	if (text == NULL)
		idem_die_error(&err);
	fputs(text, stdout);
	free(text);
}

static void
write_skeleton(const char *name)
{
	struct idem_error err;
	json_t *ctx;
	char *text, *queue_name, *p;

	if (*name == '\0' || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-_") != strlen(name))
		idem_die(IDEM_EXIT_USAGE, "--init %s: a rehearsal name is lowercase letters, "
		    "digits, - and _", name);
	queue_name = idem_estrdup(name);
	for (p = queue_name; *p; p++)
		if (*p == '-')
			*p = '_';
	ctx = json_pack("{s:s,s:s}", "rehearsal", name, "queue_name", queue_name);
	text = idem_template_render("seed.yaml", idem_tpl_seed, ctx, IDEM_ESCAPE_NONE, &err);
	json_decref(ctx);
	free(queue_name);
	if (text == NULL)
		idem_die_error(&err);
	fputs(text, stdout);
	free(text);
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "init", required_argument, NULL, 'i' },
		{ "ticket", no_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct idem_seed seed;
	struct idem_error err;
	const char *init = NULL;
	int c, ticket = 0;

	argv0 = "seed-gen";
	argv[0] = (char *)argv0;
	while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'i': init = optarg; break;
		case 't': ticket = 1; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("seed-gen " IDEM_VERSION); idem_close_stdout(); return 0;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (init != NULL) {
		if (optind != argc || ticket)
			idem_usage(synopsis, IDEM_EXIT_USAGE);
		write_skeleton(init);
		idem_close_stdout();
		return 0;
	}
	if (optind + 1 != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (idem_seed_load(&seed, argv[optind], &err) < 0) {
		idem_seed_free(&seed);
		idem_die_error(&err);
	}
	if (ticket)
		write_ticket(&seed);
	else
		write_stream(&seed);
	idem_seed_free(&seed);
	idem_close_stdout();
	return 0;
}
