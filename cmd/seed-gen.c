/* seed-gen: read a seed file, check it, and write the seed, external,
 * expect, scenario and job rows that begin an idem-tsv stream; or write a new seed
 * skeleton (--init) or the rehearsal ticket (--ticket). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "seed.h"
#include "template.h"
#include "tsv.h"
#include "error.h"
#include "embed.h"
#include "file.h"

EMBED(idem_tpl_seed, "templates/seed.yaml");
EMBED(idem_tpl_ticket, "templates/ticket.md");
extern const char idem_tpl_seed[], idem_tpl_ticket[];

#define TICKET_JOBS 200
#define INIT_JOBS 9	/* one a scenario, those commented out too, and the baseline */

static const char synopsis[] =
	"usage: seed-gen [--draft] [--ticket] seed-file\n"
	"       seed-gen --init table [-k column[:type][,...]] [-o file]\n";

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

/* The seed row: the seed's settings, in the columns of idem-tsv(5); draft
 * and best_effort only when one of them is said, adapter and its SHA-256
 * only for an adapter file, so a row is as it was without them. */
static void
write_seed_row(const struct idem_seed *s, int draft)
{
	char *visibility_timeout_ms = number(s->visibility_timeout_ms);
	char *max_attempts = number(s->max_attempts);
	char *key = json_text_list(s->key, s->nkey);
	char *schema = schema_json(s);
	char *cannot_reproduce = json_text_list(s->cannot_reproduce, s->ncannot_reproduce);
	const char *row[25] = {
		s->path, s->sha256, s->rehearsal, s->job_type, s->queue, s->database,
		visibility_timeout_ms, max_attempts, s->sandbox_account,
		s->effect_name, s->effect_table, key, s->key_scope,
		s->duplicate_acceptor, s->reconciliation_owner,
		s->worker_image, s->worker_version, s->worker_command,
		schema, cannot_reproduce, s->queue_kind, draft ? "true" : "false",
		s->guard_best_effort, s->queue_adapter_path,
		s->queue_adapter ? s->queue_adapter_sha256 : NULL,
	};

	idem_tsv_write_row(stdout, "seed", row, s->queue_adapter ? 25 :
	    draft || s->guard_best_effort ? 23 : 21);
	free(visibility_timeout_ms);
	free(max_attempts);
	free(key);
	free(schema);
	free(cannot_reproduce);
}

/* The declared guard and the external effect, when the seed has them. */
static void
write_declarations(const struct idem_seed *s)
{
	const char *row[8];
	char *key, *pending_key = NULL, *settled = NULL;

	if (s->guard_table != NULL) {
		row[0] = s->guard_table;
		row[1] = key = json_text_list(s->guard_key, s->nguard_key);
		idem_tsv_write_row(stdout, "declared_guard", row, 2);
		free(key);
	}
	if (s->external.name != NULL) {
		row[0] = s->external.name;
		row[1] = key = json_text_list(s->external.key, s->external.nkey);
		row[2] = s->external.honours_idempotency_key ? "true" : "false";
		row[3] = s->external.pending_table;
		row[4] = s->external.pending_owner;
		/* the pending table's key columns default to the body's field names */
		if (s->external.pending_table != NULL)
			pending_key = s->external.npending_key > 0 ?
			    json_text_list(s->external.pending_key, s->external.npending_key) :
			    json_text_list(s->external.key, s->external.nkey);
		if (s->external.pending_state != NULL)
			settled = json_text_list(s->external.pending_settled,
			    s->external.npending_settled);
		row[5] = pending_key;
		row[6] = s->external.pending_state;
		row[7] = settled;
		idem_tsv_write_row(stdout, "external", row, 8);
		free(key);
		free(pending_key);
		free(settled);
	}
}

static void
write_expect_row(const struct idem_seed *s)
{
	char *owned[5];
	const char *row[6];
	size_t i, nowned = 0;

	row[0] = owned[nowned++] = number(s->expect_effects);
	row[1] = owned[nowned++] = number(s->expect_duplicates);
	row[2] = owned[nowned++] = number(s->expect_missing);
	row[3] = owned[nowned++] = number(s->expect_pending);
	row[4] = s->expect_external >= 0 ? (owned[nowned++] = number(s->expect_external)) : NULL;
	/* the verdict only when the seed says, so a row is as it was without it */
	row[5] = s->expect_verdict;
	idem_tsv_write_row(stdout, "expect", row, s->expect_verdict ? 6 : 5);
	for (i = 0; i < nowned; i++)
		free(owned[i]);
}

static void
write_scenario_rows(const struct idem_seed *s)
{
	char attempt[32], duplicates[32], within[32], vendor_ms[32];
	const char *row[8];
	size_t i;

	for (i = 0; i < s->nscenarios; i++) {
		const struct idem_seed_scenario *sc = &s->scenarios[i];

		snprintf(attempt, sizeof(attempt), "%lld", sc->attempt);
		snprintf(duplicates, sizeof(duplicates), "%lld", sc->duplicates);
		snprintf(within, sizeof(within), "%lld", sc->within_ms);
		row[0] = sc->name;
		row[1] = sc->fault;
		row[2] = sc->step;
		row[3] = sc->attempt ? attempt : NULL;
		row[4] = duplicates;
		row[5] = within;
		row[6] = sc->until;
		snprintf(vendor_ms, sizeof(vendor_ms), "%lld", sc->vendor_ms);
		row[7] = sc->vendor_ms ? vendor_ms : NULL;
		idem_tsv_write_row(stdout, "scenario", row, 8);
	}
}

/* Generated jobs are made as they are written. */
static void
write_job_rows(const struct idem_seed *s)
{
	struct idem_seed_job buf = { 0 };
	long long n, njobs = idem_seed_njobs(s);
	const char *row[5];

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

static void
write_stream(const struct idem_seed *s, int draft)
{
	idem_tsv_write_header(stdout);
	write_seed_row(s, draft);
	write_declarations(s);
	write_expect_row(s);
	write_scenario_rows(s);
	write_job_rows(s);
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

/* s, which it frees, and the formatted text after it. */
static char * __attribute__((format(printf, 2, 3)))
appendf(char *s, const char *fmt, ...)
{
	va_list ap;
	char *more, *both;

	va_start(ap, fmt);
	if (vasprintf(&more, fmt, ap) < 0)
		idem_die(IDEM_EXIT_ENV, "out of memory");
	va_end(ap);
	both = idem_emalloc(strlen(s) + strlen(more) + 1);
	strcpy(stpcpy(both, s), more);
	free(s);
	free(more);
	return both;
}

/* A plain SQL name: lowercase letters, digits and _, not first a digit. */
static int
plain_name(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	return 1;
}

/* The key's columns, "column[:type],...", as the seed's effect.key and
 * payload_schema in YAML flow style, and each job's payload. */
static void
init_key(json_t *ctx, const char *key)
{
	json_t *jobs = json_array();
	char *columns = idem_estrdup(key), *column, *type, *next, *list, *schema;
	char *payload[INIT_JOBS] = { 0 };
	size_t i, ncolumns = 0;

	list = idem_estrdup("[");
	schema = idem_estrdup("{ ");
	for (column = columns; column != NULL; column = next, ncolumns++) {
		if ((next = strchr(column, ',')) != NULL)
			*next++ = '\0';
		if ((type = strchr(column, ':')) != NULL)
			*type++ = '\0';
		if (!plain_name(column, strlen(column)) ||
		    (type != NULL && strcmp(type, "string") != 0 && strcmp(type, "integer") != 0))
			idem_die(IDEM_EXIT_USAGE, "-k %s: a key is column[:type],... where a column "
			    "is lowercase letters, digits and _, and a type string or integer", key);
		list = appendf(list, "%s%s", ncolumns ? ", " : "", column);
		schema = appendf(schema, "%s%s: %s", ncolumns ? ", " : "", column,
		    type ? type : "string");
		for (i = 0; i < INIT_JOBS; i++) {
			payload[i] = appendf(payload[i] ? payload[i] : idem_estrdup("{ "),
			    "%s%s: ", ncolumns ? ", " : "", column);
			if (type != NULL && strcmp(type, "integer") == 0)
				payload[i] = appendf(payload[i], "%zu", 1001 + i);
			else
				payload[i] = appendf(payload[i], "%s-%zu", column, 1001 + i);
		}
	}
	for (i = 0; i < INIT_JOBS; i++) {
		char id[16];

		snprintf(id, sizeof(id), "job-%04zu", i + 1);
		payload[i] = appendf(payload[i], " }");
		json_array_append_new(jobs, json_pack("{s:s,s:s}", "id", id, "payload", payload[i]));
		free(payload[i]);
	}
	list = appendf(list, "]");
	schema = appendf(schema, " }");
	json_object_set_new(ctx, "key", json_string(list));
	json_object_set_new(ctx, "schema", json_string(schema));
	json_object_set_new(ctx, "jobs", jobs);
	json_object_set_new(ctx, "njobs", json_integer(INIT_JOBS));
	free(list);
	free(schema);
	free(columns);
}

/* Puts text at path through a temporary file and a rename that never
 * replaces a file: one there already, even one made meanwhile, stays.
 * Nothing is left behind on an error, and nothing is still held. */
static int
write_new_file(const char *path, const char *text, struct idem_error *err)
{
	char *tmp;
	int rc, linked = 0, saved;

	if (access(path, F_OK) == 0)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: exists; not overwritten", path);
	tmp = appendf(idem_estrdup(path), ".XXXXXX");
	if (idem_write_temp_file(tmp, text, strlen(text), err) < 0) {
		saved = errno;
		free(tmp);
		errno = saved;
		/* the file's name, not the temporary one's */
		return idem_error_set(err, err->status, "%s:", path);
	}
	rc = renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE);
	if (rc < 0 && (errno == EINVAL || errno == ENOSYS)) {
		/* a file system without it: a link never replaces either */
		rc = link(tmp, path);
		linked = 1;
	}
	saved = errno;
	if (rc < 0 || linked)
		unlink(tmp);
	free(tmp);
	errno = saved;
	if (rc < 0 && errno == EEXIST)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: exists; not overwritten", path);
	if (rc < 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", path);
	return 0;
}

/* --init: a ready seed for the table, its business key the -k columns,
 * on standard output or in a new file. */
static void
write_skeleton(const char *table, const char *key, const char *output)
{
	struct idem_error err;
	const char *dot = strchr(table, '.'), *name = dot ? dot + 1 : table;
	json_t *ctx;
	char *text, *rehearsal, *p;
	int rc;

	if (!(dot ? plain_name(table, (size_t)(dot - table)) && plain_name(name, strlen(name))
	    : plain_name(table, strlen(table))))
		idem_die(IDEM_EXIT_USAGE, "--init %s: a table is [schema.]name, each lowercase "
		    "letters, digits and _", table);
	rehearsal = idem_estrdup(name);
	for (p = rehearsal; *p; p++)
		if (*p == '_')
			*p = '-';
	ctx = json_pack("{s:s,s:s,s:s}", "rehearsal", rehearsal, "queue_name", name, "table", table);
	init_key(ctx, key ? key : "id");
	text = idem_template_render("seed.yaml", idem_tpl_seed, ctx, IDEM_ESCAPE_NONE, &err);
	json_decref(ctx);
	free(rehearsal);
	if (text == NULL)
		idem_die_error(&err);
	if (output != NULL && strcmp(output, "-") != 0) {
		rc = write_new_file(output, text, &err);
		free(text);
		if (rc < 0)
			idem_die_error(&err);
		return;
	}
	fputs(text, stdout);
	free(text);
}

/* What the options ask for. */
struct options {
	const char *init;	/* --init: the effect's table */
	const char *key;	/* -k: its business key's columns */
	const char *output;	/* -o: the new seed's file */
	const char *seed_path;
	int ticket;
	int draft;	/* --draft: a seed that is not ready, to try things out */
};

static void
parse_options(int argc, char *argv[], struct options *opt)
{
	static const struct option longopts[] = {
		{ "init", required_argument, NULL, 'i' },
		{ "ticket", no_argument, NULL, 't' },
		{ "draft", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	memset(opt, 0, sizeof(*opt));
	while ((c = getopt_long(argc, argv, "k:o:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'i': opt->init = optarg; break;
		case 'k': opt->key = optarg; break;
		case 'o': opt->output = optarg; break;
		case 't': opt->ticket = 1; break;
		case 'd': opt->draft = 1; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("seed-gen " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (opt->init != NULL && (optind != argc || opt->ticket || opt->draft))
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (opt->init == NULL && (optind + 1 != argc || opt->key || opt->output))
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	opt->seed_path = argv[optind];
}

int
main(int argc, char *argv[])
{
	struct options opt;
	struct idem_seed seed;
	struct idem_error err;
	char missing[256];

	argv0 = "seed-gen";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &opt);
	if (opt.init != NULL) {
		write_skeleton(opt.init, opt.key, opt.output);
		idem_close_stdout();
		return 0;
	}
	if (idem_seed_load(&seed, opt.seed_path, &err) < 0) {
		idem_seed_free(&seed);
		idem_die_error(&err);
	}
	if (!opt.draft && !idem_seed_ready(&seed, missing, sizeof(missing)))
		idem_die(IDEM_EXIT_USAGE, "%s: not ready: %s", opt.seed_path, missing);
	if (opt.ticket)
		write_ticket(&seed);
	else
		write_stream(&seed, opt.draft);
	idem_seed_free(&seed);
	idem_close_stdout();
	return 0;
}
