/* count-effects: count the effect rows per business key with one printed
 * query, beside what the seed expects, and the external calls that took
 * effect per business key from the stream's call rows; find the guard the
 * database itself enforces and probe it with a copy of a row that is always
 * rolled back; append query, count, guard, probe, measure and digest rows. */

#include <sys/sendfile.h>
#include <sys/stat.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/evp.h>

#include "count-effects.h"
#include "file.h"
#include "role.h"
#include "seed.h"
#include "tsv.h"

static const char synopsis[] =
	"usage: count-effects [-d conninfo] [--before] [file]\n";

struct counting c = { .phase = "after" };

/* Where the stream waits until all of it was read and found good: a
 * temporary file, or the input itself when it is a regular file, which is
 * then passed on only if it is still as it was read. */
static struct {
	FILE *f;
	const char *name;
	int is_input;
	off_t start, end;		/* the stream's bytes in f */
	struct stat st;			/* the input's, before it was read */
} held;

void
write_row(const char *kind, const char *const *fields, size_t n)
{
	if (idem_tsv_write_row(stdout, kind, fields, n) < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
}

/* The external row: the fields of a call's business key. Each job row
 * after it is expected to call once with its payload's values. */
static void
read_external(const struct idem_tsv_reader *r)
{
	json_t *fields, *f;
	size_t i;

	if (c.njobs > 0 || c.calls_seen)
		idem_die(IDEM_EXIT_USAGE, "%s:%ld: an external row after job or call rows: "
		    "count-effects reads each job's call from its payload as its row goes by; "
		    "write it right after the seed row, as seed-gen does", r->name, r->line_no);
	/* the reader checked it is an array of one or more strings */
	fields = json_loads(r->fields[EXTERNAL_KEY_FIELDS], 0, NULL);
	c.nexternal_fields = json_array_size(fields);
	c.external_fields = idem_ereallocarray(NULL, c.nexternal_fields, sizeof(char *));
	json_array_foreach(fields, i, f)
		c.external_fields[i] = idem_estrdup(json_string_value(f));
	json_decref(fields);
	c.honours_keys = strcmp(r->fields[EXTERNAL_HONOURS_IDEMPOTENCY_KEY], "true") == 0;
	if (r->fields[EXTERNAL_PENDING_TABLE] && r->fields[EXTERNAL_PENDING_OWNER]) {
		c.pending_table = idem_estrdup(r->fields[EXTERNAL_PENDING_TABLE]);
		c.pending_owner = idem_estrdup(r->fields[EXTERNAL_PENDING_OWNER]);
		/* before 1.8, the external key's field names, as seed-gen's default */
		c.pending_key = idem_estrdup(r->fields[EXTERNAL_PENDING_KEY] ?
		    r->fields[EXTERNAL_PENDING_KEY] : r->fields[EXTERNAL_KEY_FIELDS]);
		if (r->fields[EXTERNAL_PENDING_STATE] && r->fields[EXTERNAL_PENDING_SETTLED]) {
			c.pending_state = idem_estrdup(r->fields[EXTERNAL_PENDING_STATE]);
			c.pending_settled = idem_estrdup(r->fields[EXTERNAL_PENDING_SETTLED]);
		}
	}
	c.have_external = 1;
}

/* A job's call, by the business key its payload gives the call: once per
 * key, or once per job when the key scope is the job, as its effect rows. */
static void
expect_call(const struct idem_tsv_reader *r)
{
	json_t *payload = json_loads(r->fields[JOB_PAYLOAD], 0, NULL);
	char *key = idem_business_key(payload, c.external_fields, c.nexternal_fields);
	struct key_count *k;

	json_decref(payload);
	if (key == NULL)
		idem_die(IDEM_EXIT_USAGE, "%s:%ld: job row, field payload: no string, integer or "
		    "boolean value for every field of the external row's key_fields", r->name,
		    r->line_no);
	k = call_key(key);
	if (strcmp(c.key_scope, "job") == 0 || !k->seeded)
		k->expected++;
	k->seeded = 1;
	free(key);
}

/* A call that took effect: counted under its business key, or apart when
 * its body held none. */
static void
took_effect(const char *key)
{
	if (key == NULL)
		c.external_unknown++;
	else
		call_key(key)->observed++;
}

/*
 * The held stream read again, once all of it was read, for what is kept
 * only of a few: the business key of each recovered job, in place of its
 * job id, from the job rows of those jobs, so that no job id is kept for
 * the others; and the calls of the business keys rekeyed.
 */
static void
reread_held(void)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	struct idem_map wanted;
	char **keys = idem_ereallocarray(NULL, c.nrecover + 1, sizeof(char *));
	size_t i, n = 0;
	long long ncalls = 0;
	int rc;

	idem_map_init(&wanted);
	for (i = 0; i < c.nrecover; i++)
		if (idem_map_get(&wanted, c.recover_keys[i]) == IDEM_MAP_NONE) {
			idem_map_put(&wanted, c.recover_keys[i], n);
			keys[n++] = NULL;
		}
	if (fflush(held.f) != 0 || fseeko(held.f, held.start, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	idem_tsv_reader_init(&r, held.f, held.name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		if (rc < 0)
			idem_die_error(&err);
		if (rc != IDEM_TSV_ROW)
			continue;
		if (r.kind == IDEM_KIND_JOB && n > 0 &&
		    (i = idem_map_get(&wanted, r.fields[JOB_ID])) != IDEM_MAP_NONE && keys[i] == NULL)
			keys[i] = idem_estrdup(r.fields[JOB_BUSINESS_KEY]);
		if (r.kind == IDEM_KIND_CALL && c.nrekeyed > 0)
			reread_call(&r, ++ncalls);
	}
	idem_tsv_reader_free(&r);
	for (i = 0; i < c.nrecover; i++) {
		const char *key = keys[idem_map_get(&wanted, c.recover_keys[i])];

		free(c.recover_keys[i]);
		c.recover_keys[i] = idem_estrdup(key ? key : "");
	}
	idem_free_list(keys, n);
	idem_map_free(&wanted);
}

/* The stream's database: the one reached must be it. The seed row came
 * first, so the database is reached. */
static void
read_database(const struct idem_tsv_reader *r)
{
	struct idem_pg_observed stream;
	struct idem_error err;
	int rc;

	idem_pg_observed_from(&stream, &r->fields[DATABASE_SANDBOX_ID]);
	rc = idem_pg_same_database(&stream, &c.here, c.how, &err);
	idem_pg_observed_free(&stream);
	if (rc < 0)
		idem_die_error(&err);
	c.have_stream_db = 1;
}

/* A grant or denied row of the sandbox account: a finding fails the
 * verdict. */
static void
read_account(const struct idem_tsv_reader *r)
{
	char *finding = idem_role_finding(r->kind, r->fields);

	if (c.account == NULL)
		c.account = idem_estrdup(r->fields[GRANT_ROLE]);
	if (finding == NULL)
		return;
	c.findings = idem_ereallocarray(c.findings, c.nfindings + 1, sizeof(char *));
	c.findings[c.nfindings++] = finding;
}

/* What counting needs of a row of a known kind. */
static void
read_row(const struct idem_tsv_reader *r)
{
	struct idem_error err;
	size_t i;

	switch (r->kind) {
	case IDEM_KIND_SEED:
		c.effect_table = idem_estrdup(r->fields[SEED_EFFECT_TABLE]);
		c.key_columns = idem_estrdup(r->fields[SEED_KEY_COLUMNS]);
		c.key_scope = idem_estrdup(r->fields[SEED_KEY_SCOPE]);
		if (r->fields[SEED_BEST_EFFORT] != NULL)
			c.best_effort = idem_estrdup(r->fields[SEED_BEST_EFFORT]);
		if (r->fields[SEED_RECONCILIATION_OWNER] != NULL)
			c.owner = idem_estrdup(r->fields[SEED_RECONCILIATION_OWNER]);
		if (idem_queue_open_seed(&c.q, r->fields[SEED_QUEUE_KIND], r->fields[SEED_QUEUE],
		    r->fields[SEED_ADAPTER], r->fields[SEED_ADAPTER_SHA256], &err) < 0)
			idem_die_error(&err);
		c.conninfo = idem_pg_choose(c.option, r->fields[SEED_DATABASE], &c.how);
		connect_and_count();
		break;
	case IDEM_KIND_DATABASE:
		read_database(r);
		break;
	case IDEM_KIND_GRANT:
	case IDEM_KIND_DENIED:
		read_account(r);
		break;
	case IDEM_KIND_EXPECT:
		for (i = 0; i < 4; i++)
			c.expect[i] = idem_tsv_number(r, EXPECT_EFFECTS + i, 0);
		c.expect_external = idem_tsv_number(r, EXPECT_EXTERNAL, -1);
		c.have_expect = 1;
		break;
	case IDEM_KIND_EXTERNAL:
		read_external(r);
		break;
	case IDEM_KIND_DECLARED_GUARD:
		c.declared_table = idem_estrdup(r->fields[DECLARED_GUARD_TABLE]);
		c.declared_columns = idem_estrdup(r->fields[DECLARED_GUARD_KEY_COLUMNS]);
		break;
	case IDEM_KIND_CALL:
		c.calls_seen = 1;
		if (c.have_external && strcmp(r->fields[CALL_EFFECT], "yes") == 0)
			took_effect(r->fields[CALL_BUSINESS_KEY]);
		if (c.have_external && strcmp(c.phase, "after") == 0)
			read_call(r);
		break;
	case IDEM_KIND_JOB:
		if (c.have_external)
			expect_call(r);
		seed_key(r->fields[JOB_BUSINESS_KEY], r->fields[JOB_PAYLOAD_SHA256]);
		c.njobs++;
		break;
	case IDEM_KIND_PUBLISH:
		if (idem_tsv_write_row(c.msg_ids, "m", (const char *const *)&r->fields[PUBLISH_MSG_ID],
		    1) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the message ids:");
		c.nmsgs++;
		if (c.first_publish == NULL ||
		    strcmp(r->fields[PUBLISH_PUBLISHED_AT], c.first_publish) < 0) {
			free(c.first_publish);
			c.first_publish = idem_estrdup(r->fields[PUBLISH_PUBLISHED_AT]);
		}
		break;
	case IDEM_KIND_ATTEMPT:
		if (r->fields[ATTEMPT_ACKED_AT] && (c.last_ack == NULL ||
		    strcmp(r->fields[ATTEMPT_ACKED_AT], c.last_ack) > 0)) {
			free(c.last_ack);
			c.last_ack = idem_estrdup(r->fields[ATTEMPT_ACKED_AT]);
		}
		break;
	case IDEM_KIND_KILL:
		c.nkills++;
		break;
	case IDEM_KIND_RECOVER:
		c.recovery_ms = idem_ereallocarray(c.recovery_ms, c.nrecover + 1, sizeof(long long));
		c.recover_keys = idem_ereallocarray(c.recover_keys, c.nrecover + 1, sizeof(char *));
		c.recovery_ms[c.nrecover] = idem_tsv_number(r, RECOVER_RECOVERY_MS, -1);
		c.recover_keys[c.nrecover] = idem_estrdup(r->fields[RECOVER_JOB_ID]);
		c.nrecover++;
		break;
	default:
		break;
	}
}

/* Keeps what counting needs, and holds the stream: it is passed on only
 * once all of it was read and found good. */
static void
read_stream(FILE *in, const char *name)
{
	struct idem_tsv_reader r;
	struct idem_error err;
	int rc;

	idem_tsv_reader_init(&r, in, name);
	while ((rc = idem_tsv_next(&r, &err)) != IDEM_TSV_EOF) {
		if (rc < 0)
			idem_die_error(&err);
		if (!held.is_input && idem_tsv_pass(held.f, &r) < 0)
			idem_die(IDEM_EXIT_ENV, "holding the stream:");
		if (rc != IDEM_TSV_ROW)
			continue;
		read_row(&r);
	}
	idem_tsv_reader_free(&r);
	if (held.is_input && (held.end = ftello(in)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", name);
	if (c.nrecover > 0 || c.nrekeyed > 0)
		reread_held();
}

/* Holds the stream in a temporary file, or, from a regular file, takes
 * note of where it starts and of the file as it is. */
static void
hold_stream(FILE *in, const char *name)
{
	held.name = name;
	if (fstat(fileno(in), &held.st) == 0 && S_ISREG(held.st.st_mode) &&
	    (held.start = ftello(in)) >= 0) {
		held.f = in;
		held.is_input = 1;
	} else if ((held.f = tmpfile()) == NULL) {
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	}
}

/* Whether the input file is still the one it was before it was read, and
 * read up to its end. */
static int
input_unchanged(void)
{
	struct stat now;

	return fstat(fileno(held.f), &now) == 0 && now.st_dev == held.st.st_dev &&
	    now.st_ino == held.st.st_ino && now.st_size == held.st.st_size &&
	    now.st_size == held.end && now.st_mtim.tv_sec == held.st.st_mtim.tv_sec &&
	    now.st_mtim.tv_nsec == held.st.st_mtim.tv_nsec &&
	    now.st_ctim.tv_sec == held.st.st_ctim.tv_sec &&
	    now.st_ctim.tv_nsec == held.st.st_ctim.tv_nsec;
}

/* Writes the bytes of a file from start to end on standard output: by
 * sendfile, in the kernel, when it can; else through a buffer. */
void
copy_out(FILE *from, off_t start, off_t end, const char *what)
{
	char buf[65536];
	size_t got;
	off_t at = start;
	ssize_t sent = 0;

	if (fflush(from) != 0)
		idem_die(IDEM_EXIT_ENV, "%s:", what);
	if (fflush(stdout) != 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	while (at < end && (sent = sendfile(fileno(stdout), fileno(from), &at,
	    (size_t)(end - at))) > 0)
		;
	if (sent < 0 && at == start && (errno == EINVAL || errno == ENOSYS))
		sent = 0;	/* not a kind of file sendfile writes to */
	else if (sent < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	if (fseeko(from, at, SEEK_SET) != 0)
		idem_die(IDEM_EXIT_ENV, "%s:", what);
	while (at < end && (got = fread(buf, 1, (size_t)(end - at) < sizeof(buf) ?
	    (size_t)(end - at) : sizeof(buf), from)) > 0) {
		if (fwrite(buf, 1, got, stdout) != got)
			idem_die(IDEM_EXIT_ENV, "write error on standard output:");
		at += (off_t)got;
	}
	if (ferror(from) || at < end)
		idem_die(IDEM_EXIT_ENV, "%s:", what);
}

/* Passes the held stream on, once it was read and found good; from the
 * input file only while it is as it was read. */
static void
pass_held(void)
{
	off_t end = held.end;

	if (held.is_input && !input_unchanged())
		idem_die(IDEM_EXIT_ENV, "%s: changed while it was read; nothing passed on", held.name);
	if (!held.is_input && (fflush(held.f) != 0 || fseeko(held.f, 0, SEEK_END) != 0 ||
	    (end = ftello(held.f)) < 0))
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	copy_out(held.f, held.start, end, "holding the stream");
	if (held.f != stdin)
		fclose(held.f);
}

/* The options; the input, opened, and its name in messages. */
static FILE *
parse_options(int argc, char *argv[], const char **name)
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "before", no_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "d:hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'd': c.option = optarg; break;
		case 'b': c.phase = "before"; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("count-effects " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (argc - optind > 1)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	return idem_eopen_input(optind < argc ? argv[optind] : NULL, name);
}

static void
free_all(void)
{
	size_t i;

	PQfinish(c.conn);
	while (c.key_text != NULL) {
		struct key_block *b = c.key_text;

		c.key_text = b->next;
		free(b);
	}
	free(c.keys);
	idem_index_free(&c.key_index);
	free(c.merge_last);
	free(c.row_buf);
	fclose(c.msg_ids);
	idem_queue_close(&c.q);
	idem_free_list(c.recover_keys, c.nrecover);
	free(c.recovery_ms);
	idem_free_list(c.column_sql, c.ncolumns);
	free(c.table_sql);
	free(c.effect_table);
	free(c.key_columns);
	free(c.declared_table);
	free(c.declared_columns);
	free(c.key_scope);
	free(c.best_effort);
	free(c.owner);
	free(c.first_publish);
	free(c.last_ack);
	for (i = 0; i < c.ncalls; i++)
		free(c.calls[i].key);
	free(c.calls);
	idem_map_free(&c.call_index);
	idem_free_list(c.external_fields, c.nexternal_fields);
	free(c.pending_table);
	free(c.pending_owner);
	free(c.pending_key);
	free(c.pending_state);
	free(c.pending_settled);
	free_calls();
	for (i = 0; i < c.npending_findings; i++) {
		free(c.pending_findings[i].key);
		free(c.pending_findings[i].owner);
	}
	free(c.pending_findings);
	free(c.pending_unchecked);
	idem_pg_observed_free(&c.here);
	free(c.account);
	idem_free_list(c.findings, c.nfindings);
}

int
main(int argc, char *argv[])
{
	const char *name;
	FILE *in;
	int rc = 0;

	argv0 = "count-effects";
	argv[0] = (char *)argv0;
	in = parse_options(argc, argv, &name);
	if ((c.msg_ids = tmpfile()) == NULL)
		idem_die(IDEM_EXIT_ENV, "holding the stream:");
	hold_stream(in, name);
	read_stream(in, held.name);
	if (in != stdin && !held.is_input)
		fclose(in);
	pass_held();
	/* the first program of the pipeline to reach the database names it */
	if (!c.have_stream_db && idem_pg_observed_write(stdout, &c.here) < 0)
		idem_die(IDEM_EXIT_ENV, "write error on standard output:");
	if ((c.digest_ctx = EVP_MD_CTX_new()) == NULL ||
	    EVP_DigestInit_ex(c.digest_ctx, EVP_sha256(), NULL) != 1)
		idem_die(IDEM_EXIT_ENV, "hashing the count rows: no SHA-256");
	sort_seeded();
	count();
	if (strcmp(c.phase, "after") == 0) {
		if (c.have_external)
			count_external();
		count_pending();
		totals();
		guards();
		measures();
		if (c.pending_table != NULL)
			pending_calls();
		rc = verdict();
	} else {
		totals();
	}
	digest();
	free_all();
	idem_close_stdout();
	return rc;
}
