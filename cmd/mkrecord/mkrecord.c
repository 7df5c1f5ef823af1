/* mkrecord: turn a whole rehearsal stream into the record (YAML, see
 * idem-record(5)) and its handoff (Markdown), sign the record with an
 * OpenSSH ed25519 key, and commit both with a signed commit. */
#include <sys/stat.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "approve.h"
#include "build.h"
#include "git.h"
#include "handoff.h"
#include "run.h"
#include "sig.h"
#include "sign.h"
#include "statement.h"
#include "template.h"
#include "timeline.h"
#include "trace.h"
#include "error.h"
#include "file.h"
#include "intoto.h"
#include "text.h"
#include "record.h"
#include "yamljson.h"
#include "embed.h"

EMBED(idem_tpl_handoff, "templates/handoff.md");
extern const char idem_tpl_handoff[];

static const char synopsis[] =
	"usage: mkrecord [-o dir] [-k key] [-c] [-r reproduce] [-n next-review]\n"
	"                [-w cause=duration] [-f format] [--allow-dirty] [file]\n"
	"       mkrecord --approve record -k key [-c]\n";

struct options {
	const char *dir, *key_path, *format, *path, *approval;
	char *reproduce, *next_review, **waits;
	size_t nwaits;
	int do_commit, allow_dirty;
};

/* One file of the record: its text, the end of its name, and where it is. */
struct out_file {
	const char *text, *suffix;
	char tmp[PATH_MAX], path[PATH_MAX];
	int written, linked;
};

/* What mkrecord makes of a run: the record as the handoff renders it,
 * the stored record, its signature, in-toto statement, handoff and
 * timeline, and the files they are published as. */
struct made {
	json_t *record;
	char *yaml, *sig, *intoto, *md, *svg, *likely, *trace;
	struct out_file out[6];
	size_t nout;
	const char *path, *sig_path, *intoto_path, *md_path, *svg_path, *trace_path;
};

static int
valid_date(const char *d)
{
	struct tm tm;
	char *end;

	memset(&tm, 0, sizeof(tm));
	end = strptime(d, "%Y-%m-%d", &tm);
	return end != NULL && *end == '\0' && strlen(d) == 10;
}

static json_t *
parse_wait(char **specs, size_t n)
{
	json_t *out = json_array();
	size_t i, c;

	for (i = 0; i < n; i++) {
		char *eq = strchr(specs[i], '=');
		long long ms;

		if (eq == NULL)
			idem_die(IDEM_EXIT_USAGE, "-w %s: expected cause=duration", specs[i]);
		*eq = '\0';
		for (c = 0; idem_wait_causes[c] && strcmp(idem_wait_causes[c], specs[i]) != 0; c++)
			;
		if (idem_wait_causes[c] == NULL)
			idem_die(IDEM_EXIT_USAGE, "-w %s: the cause is one of reviewer-queue, "
			    "sandbox-availability, vendor-limit, owner-approval", specs[i]);
		if ((ms = idem_parse_duration_ms(eq + 1)) < 0)
			idem_die(IDEM_EXIT_USAGE, "-w %s=%s: expected a duration such as 2h", specs[i], eq + 1);
		json_array_append_new(out, json_pack("{s:s,s:I}", "cause", specs[i], "duration_ms",
		    (json_int_t)ms));
	}
	return out;
}

/* Removes what publish made, the names it took or the temporary files
 * too, keeping errno for the message that follows. */
static void
unmake(struct out_file *files, size_t n, int temps_too)
{
	int saved = errno;
	size_t i;

	for (i = 0; i < n; i++) {
		if (files[i].linked && unlink(files[i].path) == 0)
			files[i].linked = 0;
		if (temps_too && files[i].written && unlink(files[i].tmp) == 0)
			files[i].written = 0;
	}
	errno = saved;
}

static void
name_of(char *out, const char *base, const char *suffix, struct out_file *files, size_t n)
{
	int len = snprintf(out, PATH_MAX, "%s%s", base, suffix);

	if (len < 0 || len >= PATH_MAX) {
		unmake(files, n, 1);
		idem_die(IDEM_EXIT_USAGE, "%s%s: path too long", base, suffix);
	}
}

/*
 * Publishes the files under the first free name of dir/DATE-REHEARSAL,
 * DATE-REHEARSAL-2, -3 and on, without end. Each file is written to a
 * temporary file in dir, then linked to its name, which fails when the
 * name exists: nothing is ever replaced, and two runs at once never take
 * one name. A name is taken when any of its three files exists, with or
 * without a signature to write. The .yaml is linked last, so a record
 * never shows without its signature and handoff.
 */
static void
publish(struct out_file *files, size_t n, const char *dir, const char *name, int signed_record)
{
	char *date = idem_date_from_now(0), base[PATH_MAX], sig_name[PATH_MAX];
	const char *tmps[IDEM_FSYNC_MAX];
	struct idem_error err;
	struct stat st;
	unsigned long number;
	size_t i;
	int link_errno = 0;

	for (i = 0; i < n; i++) {
		name_of(files[i].tmp, dir, "/.mkrecord-XXXXXX", files, n);
		if (idem_write_temp_file_unsynced(files[i].tmp, files[i].text, strlen(files[i].text),
		    &err) < 0) {
			unmake(files, n, 1);
			idem_die_error(&err);
		}
		files[i].written = 1;
	}
	/* every byte on disk before any name is made, the files synced
	 * together so that their waits on the disk overlap */
	for (i = 0; i < n; i++)
		tmps[i] = files[i].tmp;
	if (idem_fsync_paths(tmps, n, &err) < 0) {
		unmake(files, n, 1);
		idem_die_error(&err);
	}
	for (number = 1;; number++) {
		int len = number == 1 ? snprintf(base, sizeof(base), "%s/%s-%s", dir, date, name) :
		    snprintf(base, sizeof(base), "%s/%s-%s-%lu", dir, date, name, number);

		if (len < 0 || (size_t)len >= sizeof(base) || number == ULONG_MAX) {
			unmake(files, n, 1);
			idem_die(IDEM_EXIT_USAGE, "%s/%s-%s: no name can be made for the record", dir,
			    date, name);
		}
		if (!signed_record) {
			name_of(sig_name, base, ".yaml.sig", files, n);
			if (lstat(sig_name, &st) == 0)
				continue;
			if (errno != ENOENT) {
				unmake(files, n, 1);
				idem_die(IDEM_EXIT_ENV, "%s:", sig_name);
			}
		}
		for (i = 0; i < n; i++) {
			name_of(files[i].path, base, files[i].suffix, files, n);
			if (link(files[i].tmp, files[i].path) < 0) {
				link_errno = errno;
				break;
			}
			files[i].linked = 1;
		}
		if (i == n)
			break;
		if (link_errno != EEXIST) {
			unmake(files, n, 1);
			errno = link_errno;
			idem_die(IDEM_EXIT_ENV, "%s:", files[i].path);
		}
		unmake(files, n, 0);
	}
	for (i = 0; i < n; i++)
		if (unlink(files[i].tmp) == 0)
			files[i].written = 0;
	free(date);
}

/* The name publish will most likely give the record: the first of
 * dir/DATE-REHEARSAL, -2, -3 and on with none of its files there. The
 * handoff names the record by it; when another run takes the name first,
 * the handoff is rendered again for the name the record got. */
static char *
likely_record(const char *dir, const char *name, const char *const *suffixes)
{
	char *date = idem_date_from_now(0), *base = NULL, path[PATH_MAX];
	struct stat st;
	unsigned long number;
	size_t i;

	for (number = 1; number < ULONG_MAX; number++) {
		free(base);
		if ((number == 1 ? asprintf(&base, "%s/%s-%s", dir, date, name) :
		    asprintf(&base, "%s/%s-%s-%lu", dir, date, name, number)) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		for (i = 0; suffixes[i]; i++) {
			snprintf(path, sizeof(path), "%s%s", base, suffixes[i]);
			if (lstat(path, &st) == 0)
				break;
		}
		if (suffixes[i] == NULL)
			break;
	}
	free(date);
	if (asprintf(&date, "%s.yaml", base) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(base);
	return date;
}

/* The signer as the handoff names it: the key's fingerprint, and its
 * principal in dir/allowed_signers when a line there allows it. */
struct signer {
	char fingerprint[64], *principal, signers[PATH_MAX];
};

static void
find_signer(struct signer *who, const struct idem_key *key, const char *dir)
{
	struct idem_signers *signers;
	struct idem_error err;

	idem_handoff_fingerprint(key->public_key, who->fingerprint);
	snprintf(who->signers, sizeof(who->signers), "%s/allowed_signers", dir);
	who->principal = NULL;
	if ((signers = idem_signers_load(who->signers, &err)) != NULL) {
		who->principal = idem_signers_find(signers, key->public_key, "idem-record", time(NULL),
		    &err);
		idem_signers_free(signers);
	}
}

/* The handoff of the record named record: the record r with the
 * conveniences of the handoff, rendered, prose folded to its width. */
static char *
handoff(const json_t *r, const char *record, const struct signer *who)
{
	json_t *ctx = json_deep_copy(r);
	struct idem_error err;
	char *md, *folded, svg[PATH_MAX];
	const char *slash = strrchr(record, '/');
	struct idem_handoff_files files = { .record = record, .svg = svg,
		.signers = who ? who->signers : NULL, .principal = who ? who->principal : NULL,
		.fingerprint = who ? who->fingerprint : NULL };

	snprintf(svg, sizeof(svg), "%.*s.svg", (int)(strlen(slash ? slash + 1 : record) - 5),
	    slash ? slash + 1 : record);
	idem_handoff_context(ctx, &files);
	if ((md = idem_template_render("handoff.md", idem_tpl_handoff, ctx, IDEM_ESCAPE_MARKDOWN,
	    &err)) == NULL)
		idem_die_error(&err);
	folded = idem_handoff_fold(md, IDEM_HANDOFF_WIDTH);
	free(md);
	json_decref(ctx);
	return folded;
}

static char *
default_reproduce(const struct idem_run *run)
{
	char *out;

	const char *draft = idem_run_seed(run, "draft");

	if (asprintf(&out, "seed-gen %s%s | count-effects --before | dup-publish | kill-at | "
	    "count-effects", draft && strcmp(draft, "true") == 0 ? "--draft " : "",
	    idem_run_seed(run, "path")) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	return out;
}

static void
parse_options(int argc, char *argv[], struct options *o)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "sign", required_argument, NULL, 'k' },
		{ "commit", no_argument, NULL, 'c' },
		{ "reproduce", required_argument, NULL, 'r' },
		{ "next-review", required_argument, NULL, 'n' },
		{ "wait", required_argument, NULL, 'w' },
		{ "format", required_argument, NULL, 'f' },
		{ "allow-dirty", no_argument, NULL, 'A' },
		{ "approve", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "o:k:cr:n:w:f:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': o->dir = optarg; break;
		case 'k': o->key_path = optarg; break;
		case 'c': o->do_commit = 1; break;
		case 'r': o->reproduce = idem_estrdup(optarg); break;
		case 'n':
			if (!valid_date(optarg))
				idem_die(IDEM_EXIT_USAGE, "-n %s: expected a date YYYY-MM-DD", optarg);
			o->next_review = idem_estrdup(optarg);
			break;
		case 'w':
			o->waits = idem_ereallocarray(o->waits, o->nwaits + 1, sizeof(char *));
			o->waits[o->nwaits++] = optarg;
			break;
		case 'f':
			if (strcmp(optarg, "yaml") != 0 && strcmp(optarg, "md") != 0)
				idem_die(IDEM_EXIT_USAGE, "-f %s: expected yaml or md", optarg);
			o->format = optarg;
			break;
		case 'A': o->allow_dirty = 1; break;
		case 'P': o->approval = optarg; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("mkrecord " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (argc - optind > 1)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	o->path = optind < argc ? argv[optind] : NULL;
	if (o->approval != NULL && (o->path != NULL || strcmp(o->dir, "records") != 0 ||
	    o->reproduce || o->next_review || o->nwaits || strcmp(o->format, "yaml") != 0 ||
	    o->allow_dirty))
		idem_usage(synopsis, IDEM_EXIT_USAGE);
}

/* The seed as committed: same bytes as the stream's, at a revision. */
static void
seed_revision(const struct idem_run *run, int allow_dirty, struct idem_git_revision *rev)
{
	const char *path = idem_run_seed(run, "path");
	char sha[65], *text;
	struct idem_error err;
	size_t len;

	if ((text = idem_read_file(path, &len, &err)) == NULL)
		idem_die(IDEM_EXIT_USAGE, "the seed of the stream, %s, is not here: run mkrecord where "
		    "seed-gen ran", path);
	idem_sha256_hex(text, len, sha);
	free(text);
	if (strcmp(sha, idem_run_seed(run, "sha256")) != 0)
		idem_die(IDEM_EXIT_USAGE, "%s changed since the stream was made (SHA-256 %s, the "
		    "stream says %s)", path, sha, idem_run_seed(run, "sha256"));
	if (idem_git_seed_ready(path, allow_dirty, rev, &err) < 0)
		idem_die_error(&err);
}

/* The seed's adapter file, when the stream names one, as committed: the
 * bytes seed-gen read, at a revision, as the seed is. */
static int
adapter_revision(const struct idem_run *run, int allow_dirty, struct idem_git_revision *rev)
{
	const char *path = idem_run_seed(run, "adapter"), *want = idem_run_seed(run, "adapter_sha256");
	struct idem_error err;
	char sha[65];

	if (path == NULL)
		return 0;
	if (idem_sha256_file(path, sha) < 0)
		idem_die(IDEM_EXIT_USAGE, "the queue adapter of the stream, %s, is not here: run "
		    "mkrecord where seed-gen ran", path);
	if (strcmp(sha, want) != 0)
		idem_die(IDEM_EXIT_USAGE, "%s changed since the stream was made (SHA-256 %s, the "
		    "stream says %s)", path, sha, want);
	if (idem_git_seed_ready(path, allow_dirty, rev, &err) < 0)
		idem_die_error(&err);
	return 1;
}

/* The trace beside the record (idem-record(5), THE TRACE), its SHA-256
 * in the record, sent to IDEM_OTLP_ENDPOINT too when that is set: a
 * trace not sent is a warning, the record stands without it. */
static char *
trace(json_t *record, const struct idem_run *run)
{
	const char *endpoint = getenv(IDEM_TRACE_ENDPOINT);
	struct idem_error err;
	json_t *otlp;
	char *text, sha[65];

	idem_trace_deliveries(run->spans, run->attempts);
	idem_trace_annotate(record, run->spans);
	otlp = idem_trace_build(record, run->spans);
	if ((text = json_dumps(otlp, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)) == NULL)
		idem_die(IDEM_EXIT_ENV, "the trace: out of memory");
	json_decref(otlp);
	idem_sha256_hex(text, strlen(text), sha);
	json_object_set_new(record, "trace", json_pack("{s:s,s:s}", "sha256", sha, "format",
	    "OTLP JSON, ExportTraceServiceRequest"));
	if (endpoint != NULL && *endpoint != '\0' && idem_trace_post(endpoint, text, &err) < 0)
		idem_warn("%s: the trace was not sent: %s", IDEM_TRACE_ENDPOINT, err.text);
	return text;
}

/* One record: the handoff renders it with a few conveniences more. A
 * signature that does not verify is never written. */
static void
render(struct made *m, const struct idem_run *run, const struct idem_git_revision *rev,
     const struct idem_git_revision *adapter, const struct options *o, const struct idem_key *key, const struct signer *who)
{
	static const char *const suffixes[] = { ".yaml", ".yaml.sig", IDEM_INTOTO_SUFFIX, ".md",
		".svg", IDEM_TRACE_SUFFIX, NULL };
	struct idem_error err;
	json_t *stored;

	m->record = idem_build_record(run, rev, adapter, o->reproduce, o->next_review,
	    parse_wait(o->waits, o->nwaits));
	m->trace = trace(m->record, run);
	stored = json_deep_copy(m->record);
	json_object_del(stored, "counts_differ");
	json_object_del(stored, "duplicate_keys");
	json_object_del(stored, "duplicate_calls");
	json_object_del(json_object_get(stored, "counts"), "total_rows");
	if ((m->yaml = idem_yaml_from_json(stored, &err)) == NULL)
		idem_die_error(&err);
	json_decref(stored);
	m->likely = likely_record(o->dir, idem_run_seed(run, "rehearsal"), suffixes);
	m->md = handoff(m->record, m->likely, who);
	m->svg = idem_timeline_svg(m->record);
	if (key != NULL) {
		m->sig = idem_sign(key, o->key_path, "idem-record", m->yaml, strlen(m->yaml));
		m->intoto = idem_statement_envelope(m->record, m->yaml, m->likely, key);
	}
}

/* A published file made again: its new text written to a temporary file
 * in dir, then renamed over it. */
static void
replace(struct made *m, const char *dir, const char *path, const char *text)
{
	struct idem_error err;
	char tmp[PATH_MAX];

	name_of(tmp, dir, "/.mkrecord-XXXXXX", m->out, m->nout);
	if (idem_write_temp_file(tmp, text, strlen(text), &err) < 0) {
		unmake(m->out, m->nout, 0);
		idem_die_error(&err);
	}
	if (rename(tmp, path) < 0) {
		unlink(tmp);
		unmake(m->out, m->nout, 0);
		idem_die(IDEM_EXIT_ENV, "%s:", path);
	}
}

/* The files of the record, published; when another run took the name
 * the handoff and the statement name, they are made again for the
 * record's own. */
static void
publish_made(struct made *m, const char *dir, const char *rehearsal, const struct signer *who,
	     const struct idem_key *key)
{
	if (m->sig != NULL)
		m->out[m->nout++] = (struct out_file){ .text = m->sig, .suffix = ".yaml.sig" };
	if (m->intoto != NULL)
		m->out[m->nout++] = (struct out_file){ .text = m->intoto, .suffix = IDEM_INTOTO_SUFFIX };
	m->out[m->nout++] = (struct out_file){ .text = m->md, .suffix = ".md" };
	m->out[m->nout++] = (struct out_file){ .text = m->svg, .suffix = ".svg" };
	m->out[m->nout++] = (struct out_file){ .text = m->trace, .suffix = IDEM_TRACE_SUFFIX };
	m->out[m->nout++] = (struct out_file){ .text = m->yaml, .suffix = ".yaml" };
	publish(m->out, m->nout, dir, rehearsal, m->sig != NULL);
	m->path = m->out[m->nout - 1].path;
	m->trace_path = m->out[m->nout - 2].path;
	m->svg_path = m->out[m->nout - 3].path;
	m->md_path = m->out[m->nout - 4].path;
	m->sig_path = m->sig != NULL ? m->out[0].path : "";
	m->intoto_path = m->intoto != NULL ? m->out[1].path : "";
	if (strcmp(m->path, m->likely) == 0)
		return;
	free(m->md);
	m->md = handoff(m->record, m->path, who);
	replace(m, dir, m->md_path, m->md);
	if (m->intoto != NULL) {
		free(m->intoto);
		m->intoto = idem_statement_envelope(m->record, m->yaml, m->path, key);
		replace(m, dir, m->intoto_path, m->intoto);
	}
}

/* The record's files in one signed commit, its message the verdict and
 * the totals; a commit that fails takes the files' names back. */
static void
commit(struct made *m, const char *rehearsal, const char *evidence, const struct idem_key *key)
{
	const char *files[7] = { m->path, m->sig_path, m->md_path, m->svg_path, m->trace_path };
	json_t *totals = json_object_get(json_object_get(m->record, "counts"), "totals"), *external;
	char calls[96] = "", id[41], *message;
	struct idem_error err;
	size_t nfiles = 5;

	if ((external = json_object_get(totals, "external")) != NULL)
		snprintf(calls, sizeof(calls), ", external calls %lld of %lld",
		    (long long)json_integer_value(json_object_get(external, "observed")),
		    (long long)json_integer_value(json_object_get(external, "expected")));
	if (asprintf(&message, "record: %s %s (effects %lld of %lld expected, "
	    "duplicates %lld%s)\n\nRecord %s, signed.\n", rehearsal,
	    json_string_value(json_object_get(m->record, "verdict")),
	    (long long)json_integer_value(json_object_get(json_object_get(totals, "effects"), "observed")),
	    (long long)json_integer_value(json_object_get(json_object_get(totals, "effects"), "expected")),
	    (long long)json_integer_value(json_object_get(json_object_get(totals, "duplicates"), "observed")),
	    calls, m->path) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if (*m->intoto_path)
		files[nfiles++] = m->intoto_path;
	if (*evidence)
		files[nfiles++] = evidence;
	if (idem_git_commit(files, nfiles, message, key, id, &err) < 0) {
		unmake(m->out, m->nout, 0);
		idem_die_error(&err);
	}
	free(message);
}

static void
made_free(struct made *m)
{
	json_decref(m->record);
	free(m->yaml);
	free(m->md);
	free(m->svg);
	free(m->trace);
	free(m->likely);
	free(m->sig);
	free(m->intoto);
}

int
main(int argc, char *argv[])
{
	struct options o = { .dir = "records", .format = "yaml" };
	struct signer who = { .principal = NULL };
	const struct idem_run *run;
	struct idem_git_revision rev, adapter;
	struct idem_key key;
	struct idem_error err;
	struct made m = { .nout = 0 };
	const char *evidence, *name;
	FILE *in;
	int have_adapter;

	argv0 = "mkrecord";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &o);
	if (o.approval != NULL)
		return idem_approve(o.approval, o.key_path, o.do_commit);
	if (o.do_commit && o.key_path == NULL)
		idem_die(IDEM_EXIT_USAGE, "-c: a record is committed signed: give -k key");
	if (o.key_path != NULL && idem_key_load(&key, o.key_path, &err) < 0)
		idem_die_error(&err);
	if (o.key_path != NULL)
		find_signer(&who, &key, o.dir);
	in = idem_eopen_input(o.path, &name);
	run = idem_run_read(in, name, o.dir);
	if (in != stdin)
		fclose(in);
	seed_revision(run, o.allow_dirty, &rev);
	have_adapter = adapter_revision(run, o.allow_dirty, &adapter);
	if (o.reproduce == NULL)
		o.reproduce = default_reproduce(run);
	if (o.next_review == NULL)
		o.next_review = idem_date_from_now(91);
	render(&m, run, &rev, have_adapter ? &adapter : NULL, &o, o.key_path ? &key : NULL, o.key_path ? &who : NULL);

	idem_sign_hold_interrupts();
	if (mkdir(o.dir, 0755) < 0 && errno != EEXIST)
		idem_die(IDEM_EXIT_ENV, "%s:", o.dir);
	evidence = idem_run_publish_evidence(o.dir);
	publish_made(&m, o.dir, idem_run_seed(run, "rehearsal"), o.key_path ? &who : NULL,
	    o.key_path ? &key : NULL);
	if (o.do_commit)
		commit(&m, idem_run_seed(run, "rehearsal"), evidence, &key);
	idem_run_keep_evidence();
	if (o.key_path != NULL)
		idem_key_wipe(&key);
	if (strcmp(o.format, "md") == 0)
		fputs(m.md, stdout);
	else
		printf("%s\n", m.path);
	made_free(&m);
	free(who.principal);
	free(o.reproduce);
	free(o.next_review);
	free(o.waits);
	idem_git_close();
	idem_close_stdout();
	return 0;
}
