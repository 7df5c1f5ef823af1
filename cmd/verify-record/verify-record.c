/* verify-record: check a record as a reviewer would (signature against
 * allowed_signers, seed hash at the recorded revision, the record's own
 * arithmetic), rerun it to the same counts as a second engineer would, or
 * audit every signed commit and record in the history as an auditor would. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit.h"
#include "check.h"
#include "git.h"
#include "rerun.h"
#include "trust.h"
#include "error.h"
#include "yamljson.h"

static const char synopsis[] =
	"usage: verify-record [-f allowed-signers] record ...\n"
	"       verify-record [-f allowed-signers] --rerun [-d conninfo] record\n"
	"       verify-record [-f allowed-signers] --history [-a] [-c] [-t | -g] [-s rev]\n"
	"                     [-m summary] [-d conninfo] [dir]\n";

struct options {
	const char *signers_path;
	int signers_given;		/* -f: the root is kept outside the history */
	int do_rerun, do_history;
	struct idem_audit_options audit;	/* and the conninfo of --rerun */
};

/*
 * The line of a record checked: NOT verified with its reasons, or
 * verified with its signer and its verdict against the one its seed
 * expects (pass, unless it says fail). Returns IDEM_EXIT_FINDING for a
 * record not verified and for a verdict other than the expected one (a
 * best effort stands for a pass, which the audit holds to the owner's
 * approval): a reviewer's one-record check shows the verdict, and fails
 * on it.
 */
static int
print_check(const struct check *c)
{
	const char *verdict, *expected;
	size_t i;

	if (c->nreasons > 0) {
		printf("%s: NOT verified\n", c->path);
		for (i = 0; i < c->nreasons; i++)
			printf("%s: %s\n", c->path, c->reasons[i]);
		return IDEM_EXIT_FINDING;
	}
	verdict = idem_json_str(c->record, "verdict");
	if ((expected = idem_json_str(c->record, "expected_verdict")) == NULL)
		expected = "pass";
	printf("%s: verified, signed by %s; verdict %s", c->path, c->principal,
	    verdict ? verdict : "none");
	if (verdict == NULL || strcmp(verdict, expected) == 0) {
		printf("%s\n", verdict && strcmp(verdict, "pass") != 0 ? ", as the seed expects" : "");
		return 0;
	}
	/* the audit asks for the approval that lets it stand */
	if (strcmp(verdict, "best effort") == 0 && strcmp(expected, "pass") == 0) {
		printf(", which stands only with the owner's approval\n");
		return 0;
	}
	if (strcmp(expected, "pass") != 0)
		printf(", but the seed expects %s", expected);
	printf("\n");
	return IDEM_EXIT_FINDING;
}

/* Reruns a record that verified; 1 when the rerun differs. */
static int
rerun(const struct check *c, const char *conninfo)
{
	struct idem_error err;
	int rc;

	if ((rc = idem_rerun(c->path, c->record, conninfo, stdout, &err)) < 0)
		idem_die_error(&err);
	return rc;
}

/* Checks each record, and with --rerun reruns it when it verified;
 * IDEM_EXIT_FINDING when one does not verify, gives a verdict its seed
 * does not expect, or its rerun differs. */
static int
verify(char **paths, int n, int do_rerun, const char *conninfo, struct checker *k)
{
	int i, rc = 0;

	for (i = 0; i < n; i++) {
		struct check chk = { .path = paths[i] };

		idem_check_record(k, &chk);
		if (print_check(&chk) != 0)
			rc = IDEM_EXIT_FINDING;
		if (chk.nreasons == 0 && do_rerun && rerun(&chk, conninfo))
			rc = IDEM_EXIT_FINDING;
		idem_check_free(&chk);
	}
	return rc;
}

static int
format_of(const char *name)
{
	if (strcmp(name, "github") == 0)
		return IDEM_AUDIT_GITHUB;
	if (strcmp(name, "tsv") == 0)
		return IDEM_AUDIT_TSV;
	if (strcmp(name, "table") == 0)
		return IDEM_AUDIT_TABLE;
	idem_die(IDEM_EXIT_USAGE, "--format %s: expected table, tsv or github", name);
}

static void
parse_options(int argc, char *argv[], struct options *o)
{
	static const struct option longopts[] = {
		{ "allowed-signers", required_argument, NULL, 'f' },
		{ "rerun", no_argument, NULL, 'R' },
		{ "dbname", required_argument, NULL, 'd' },
		{ "history", no_argument, NULL, 'H' },
		{ "since", required_argument, NULL, 's' },
		{ "commits-only", no_argument, NULL, 'c' },
		{ "format", required_argument, NULL, 'F' },
		{ "require-approval", no_argument, NULL, 'a' },
		{ "summary", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct idem_audit_options *a = &o->audit;
	int c;

	while ((c = getopt_long(argc, argv, "f:d:s:actgm:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'f': o->signers_path = optarg; o->signers_given = 1; break;
		case 'R': o->do_rerun = 1; break;
		case 'd': a->conninfo = optarg; break;
		case 'H': o->do_history = 1; break;
		case 's': a->since = optarg; break;
		case 'c': a->commits_only = 1; break;
		case 't': a->format = IDEM_AUDIT_TSV; break;
		case 'a': a->require_approval = 1; break;
		case 'm': a->summary_path = optarg; break;
		case 'g': a->format = IDEM_AUDIT_GITHUB; break;
		case 'F': a->format = format_of(optarg); break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("verify-record " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if ((o->do_history && o->do_rerun) ||
	    ((a->commits_only || a->require_approval || a->summary_path) && !o->do_history))
		idem_usage(synopsis, IDEM_EXIT_USAGE);
}

/*
 * The audit. Given a base and no -f, the keys trusted are those of
 * allowed_signers as the base holds it, changed only by the commits a key
 * it trusts to approve signed: the change under review cannot trust
 * itself.
 */
static int
history(struct options *o, struct checker *k)
{
	struct idem_error err;
	struct trust t;
	int rc;

	if (o->audit.since == NULL || o->signers_given) {
		idem_checker_init(k, o->signers_path);
		return idem_audit(&o->audit, k);
	}
	if (idem_trust_from_base(o->signers_path, o->audit.since, &t, &err) < 0)
		idem_die_error(&err);
	k->signers = idem_trust_now(&t);
	idem_checker_init(k, t.label);
	o->audit.trust = &t;
	rc = idem_audit(&o->audit, k);
	k->signers = NULL;	/* the trust's */
	idem_trust_free(&t);
	return rc;
}

int
main(int argc, char *argv[])
{
	struct options o = { .signers_path = "records/allowed_signers",
		.audit = { .dir = "records", .format = IDEM_AUDIT_TABLE } };
	struct checker k = { .signers = NULL };
	int rc;

	argv0 = "verify-record";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &o);
	if (o.do_history) {
		if (argc - optind > 1)
			idem_usage(synopsis, IDEM_EXIT_USAGE);
		if (optind < argc)
			o.audit.dir = argv[optind];
		rc = history(&o, &k);
	} else {
		idem_checker_init(&k, o.signers_path);
		if (optind == argc || (o.do_rerun && argc - optind != 1))
			idem_usage(synopsis, IDEM_EXIT_USAGE);
		rc = verify(argv + optind, argc - optind, o.do_rerun, o.audit.conninfo, &k);
	}
	idem_checker_free(&k);
	idem_git_close();
	idem_close_stdout();
	return rc;
}
