/* summary.c: the Markdown summary of verify-record --history -m */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "approval.h"
#include "git.h"
#include "summary.h"
#include "yamljson.h"
#include "file.h"

void
idem_summary_keep(struct idem_summary *s, const char *kind, const char *id, const char *status,
		  const char *detail)
{
	s->entries = idem_ereallocarray(s->entries, s->nentries + 1, sizeof(*s->entries));
	s->entries[s->nentries++] = (struct idem_summary_entry){ idem_estrdup(kind), idem_estrdup(id),
		idem_estrdup(status), idem_estrdup(detail) };
}

void
idem_summary_free(struct idem_summary *s)
{
	size_t i;

	for (i = 0; i < s->nentries; i++) {
		free(s->entries[i].kind);
		free(s->entries[i].id);
		free(s->entries[i].status);
		free(s->entries[i].detail);
	}
	free(s->entries);
	s->entries = NULL;
	s->nentries = 0;
}

static const char *
or_text(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

/* Text in Markdown as it reads: the characters that would format it are
 * escaped, a line break is a space. */
static void
md_text(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\n' || *s == '\r' || *s == '\t')
			fputc(' ', f);
		else {
			if (strchr("\\`*_[]<>|~#", *s) != NULL)
				fputc('\\', f);
			fputc(*s, f);
		}
	}
}

/* A code span that holds any text: fenced by one backtick more than the
 * longest run inside it. */
static void
md_code(FILE *f, const char *s)
{
	size_t run = 0, longest = 0, i;
	const char *p;

	for (p = s; *p; p++) {
		run = *p == '`' ? run + 1 : 0;
		longest = run > longest ? run : longest;
	}
	for (i = 0; i <= longest; i++)
		fputc('`', f);
	if (*s == '`' || (*s && s[strlen(s) - 1] == '`') || longest > 0)
		fputc(' ', f);
	for (p = s; *p; p++)
		fputc(*p == '\n' || *p == '\r' ? ' ' : *p, f);
	if (*s == '`' || (*s && s[strlen(s) - 1] == '`') || longest > 0)
		fputc(' ', f);
	for (i = 0; i <= longest; i++)
		fputc('`', f);
}

/*
 * Writes fmt to f, with the next argument for each %t as Markdown text,
 * for each %c as a code span, and for each %s as it is.
 */
static void
md(FILE *f, const char *fmt, ...)
{
	va_list ap;
	const char *p;

	va_start(ap, fmt);
	for (p = fmt; *p; p++) {
		if (*p != '%' || p[1] == '\0') {
			fputc(*p, f);
			continue;
		}
		switch (*++p) {
		case 't': md_text(f, va_arg(ap, const char *)); break;
		case 'c': md_code(f, va_arg(ap, const char *)); break;
		case 's': fputs(va_arg(ap, const char *), f); break;
		default: fputc(*p, f);
		}
	}
	va_end(ap);
}

/* The worst status of a record's entries: FAIL, warn, stale, then ok. */
static const char *
worst_status(const struct idem_summary *s, const char *path)
{
	static const char *const order[] = { "FAIL", "warn", "stale", "ok" };
	size_t i, k;

	for (k = 0; k < 4; k++)
		for (i = 0; i < s->nentries; i++)
			if (strcmp(s->entries[i].kind, "record") == 0 && strcmp(s->entries[i].id, path) == 0 &&
			    strcmp(s->entries[i].status, order[k]) == 0)
				return order[k];
	return "ok";
}

/* The totals a reviewer reads first, each against what the seed expected. */
static void
summary_counts(FILE *f, const json_t *record)
{
	static const char *const names[] = { "effects", "duplicates", "missing", "pending", "external",
		"external_duplicates", NULL };
	const json_t *totals = json_object_get(json_object_get(record, "counts"), "totals"), *t;
	size_t i;
	int first = 1;

	fputs("- **counts:** ", f);
	for (i = 0; names[i]; i++) {
		long long e, o;

		if ((t = json_object_get(totals, names[i])) == NULL)
			continue;
		e = idem_json_num(t, "expected");
		o = idem_json_num(t, "observed");
		fprintf(f, "%s%s%s %lld (expected %lld)%s", first ? "" : ", ", e != o ? "**" : "",
		    names[i], o, e, e != o ? "**" : "");
		first = 0;
	}
	fputs(first ? "none recorded\n" : "\n", f);
}

static void
summary_guard(FILE *f, const json_t *record)
{
	const json_t *g, *declared = json_object_get(record, "declared_guard");
	size_t i;

	fputs("- **guard:** ", f);
	json_array_foreach(json_object_get(record, "guards"), i, g) {
		md(f, "%s%t", i > 0 ? "; " : "", or_text(idem_json_str(g, "kind"), "none"));
		if (idem_json_str(g, "name"))
			md(f, " %c", idem_json_str(g, "name"));
		if (idem_json_str(g, "definition"))
			md(f, " %c", idem_json_str(g, "definition"));
	}
	if (json_array_size(json_object_get(record, "guards")) == 0)
		fputs("none found", f);
	md(f, ", probe: %t", or_text(idem_json_str(record, "probe.result"), "none"));
	if (json_is_object(declared) && idem_json_str(declared, "table"))
		md(f, "; declared on %c, probe: %t", idem_json_str(declared, "table"),
		    or_text(idem_json_str(declared, "probe.result"), "none"));
	fputc('\n', f);
}

/* The first few items of a list, each as item writes it, then how many
 * more there are. */
static void
md_list(FILE *f, const json_t *items, void (*item)(FILE *, const json_t *))
{
	enum { SHOWN = 10 };
	const json_t *it;
	size_t i;

	json_array_foreach(items, i, it) {
		if (i == SHOWN) {
			fprintf(f, ", and %zu more", json_array_size(items) - SHOWN);
			break;
		}
		fputs(i == 0 ? ": " : ", ", f);
		item(f, it);
	}
}

static void
kill_item(FILE *f, const json_t *k)
{
	md(f, "%t (%c", idem_json_str(k, "step"), or_text(idem_json_str(k, "job"), ""));
	fprintf(f, ", attempt %lld", idem_json_num(k, "attempt"));
	if (json_is_integer(json_object_get(k, "recovery_ms")))
		fprintf(f, ", recovered in %lld ms", idem_json_num(k, "recovery_ms"));
	fputc(')', f);
}

static void
missed_item(FILE *f, const json_t *k)
{
	md(f, "%t %t (%c)", idem_json_str(k, "what"), idem_json_str(k, "step"),
	    or_text(idem_json_str(k, "job"), ""));
}

/* The kill points reached and missed, the first few of each named. */
static void
summary_kills(FILE *f, const json_t *record)
{
	const json_t *kills = json_object_get(record, "kill_points");
	const json_t *missed = json_object_get(record, "missed");

	fprintf(f, "- **kill points:** %zu reached", json_array_size(kills));
	md_list(f, kills, kill_item);
	if (json_array_size(missed) == 0) {
		fputs("; none missed\n", f);
		return;
	}
	fprintf(f, "; **%zu missed**", json_array_size(missed));
	md_list(f, missed, missed_item);
	fputc('\n', f);
}

static void
stall_item(FILE *f, const json_t *k)
{
	md(f, "%t (%c", idem_json_str(k, "step"), or_text(idem_json_str(k, "job"), ""));
	fprintf(f, ", attempt %lld", idem_json_num(k, "attempt"));
	md(f, ", released on %t)", or_text(idem_json_str(k, "release"), "nothing"));
}

/* The stalls, when the record has any, the first few named. */
static void
summary_stalls(FILE *f, const json_t *record)
{
	const json_t *stalls = json_object_get(record, "stalls");

	if (json_array_size(stalls) == 0)
		return;
	fprintf(f, "- **stalls:** %zu", json_array_size(stalls));
	md_list(f, stalls, stall_item);
	fputc('\n', f);
}

/* One record as a reviewer reads it in the pull request. */
static void
summary_record(FILE *f, const struct idem_summary *s, const char *path,
	       const struct idem_summary_record *c)
{
	const char *status = c ? worst_status(s, path) : "removed";
	struct idem_approval a;
	size_t i;
	int stale = 0;

	md(f, "### %s %c\n\n", status, path);
	if (c == NULL) {
		fputs("The change removes this record.\n\n", f);
		return;
	}
	for (i = 0; i < s->nentries; i++)
		if (strcmp(s->entries[i].kind, "record") == 0 && strcmp(s->entries[i].id, path) == 0 &&
		    strcmp(s->entries[i].status, "ok") != 0) {
			md(f, "- **%s:** %t\n", s->entries[i].status, s->entries[i].detail);
			stale |= strcmp(s->entries[i].status, "stale") == 0;
		}
	if (c->refused) {
		fputc('\n', f);
		return;
	}
	md(f, "- **verdict:** %t", idem_json_str(c->record, "verdict"));
	if (idem_json_str(c->record, "expected_verdict"))
		md(f, ", the seed expects %t", idem_json_str(c->record, "expected_verdict"));
	md(f, "; signed by %t\n", c->principal);
	summary_counts(f, c->record);
	summary_guard(f, c->record);
	summary_kills(f, c->record);
	summary_stalls(f, c->record);
	if (!stale)
		md(f, "- **staleness:** not stale; next review %t\n",
		    or_text(idem_json_str(c->record, "next_review"), "none"));
	idem_approval_check(path, s->signers, s->signers_path, &a);
	md(f, "- **approval:** %t\n\n", a.text);
	idem_approval_free(&a);
}

/* The record a file of the records directory belongs to: its .yaml, .sig,
 * .approval.sig, handoff or in-toto statement; NULL for another file. */
static char *
record_of(const char *name)
{
	static const char *const suffixes[] = { ".yaml.approval.sig", ".yaml.sig", ".yaml", ".md",
		".intoto.jsonl", NULL };
	size_t len = strlen(name), s, n;
	char *out;

	for (s = 0; suffixes[s]; s++) {
		n = strlen(suffixes[s]);
		if (len > n && strcmp(name + len - n, suffixes[s]) == 0) {
			if (asprintf(&out, "%.*s.yaml", (int)(len - n), name) < 0)
				idem_die(IDEM_EXIT_ENV, "asprintf:");
			return out;
		}
	}
	return NULL;
}

/*
 * The overall result, the commits that fail, then each record the change
 * adds or touches (every record without since): its audit, verdict,
 * counts, guard, kill points, staleness and approval.
 */
int
idem_summary_write(const struct idem_summary *s, const char *summary_path,
		   const struct idem_summary_record *records, size_t nrecords, int bad,
		   struct idem_error *err)
{
	const char *dir = s->dir, *since = s->since;
	char *buf = NULL, **changed = NULL, **shown = NULL, *name;
	size_t len = 0, nchanged = 0, nshown = 0, ncommits = 0, nunsigned = 0, i, j;
	FILE *f = open_memstream(&buf, &len);
	int rc = -1;

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	if (since != NULL && idem_git_changed(dir, since, 0, &changed, &nchanged, err) < 0)
		goto out;
	for (i = 0; since != NULL && i < nchanged; i++) {
		char *path;

		if ((name = record_of(changed[i])) == NULL)
			continue;
		if (asprintf(&path, "%s/%s", dir, name) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(name);
		for (j = 0; j < nshown && strcmp(shown[j], path) != 0; j++)
			;
		if (j < nshown) {
			free(path);
			continue;
		}
		shown = idem_ereallocarray(shown, nshown + 1, sizeof(char *));
		shown[nshown++] = path;
	}
	for (i = 0; since == NULL && i < nrecords; i++) {
		shown = idem_ereallocarray(shown, nshown + 1, sizeof(char *));
		shown[nshown++] = idem_estrdup(records[i].path);
	}
	for (i = 0; i < s->nentries; i++)
		if (strcmp(s->entries[i].kind, "commit") == 0) {
			ncommits++;
			nunsigned += strcmp(s->entries[i].status, "ok") != 0;
		}
	fprintf(f, "## idem records: the check %s\n\n", bad ? "fails" : "passes");
	fprintf(f, "%zu record%s ", nshown, nshown == 1 ? "" : "s");
	if (since != NULL)
		md(f, "added, changed or removed since %c", since);
	else
		md(f, "in %c", dir);
	fprintf(f, "; %zu commit%s touching ", ncommits, ncommits == 1 ? "" : "s");
	md_code(f, dir);
	if (nunsigned > 0)
		fprintf(f, ", **%zu not signed by a trusted key**.\n\n", nunsigned);
	else
		fputs(ncommits > 0 ? ", all signed by trusted keys.\n\n" : ".\n\n", f);
	for (i = 0; i < s->nentries; i++)
		if (strcmp(s->entries[i].kind, "commit") == 0 && strcmp(s->entries[i].status, "ok") != 0) {
			md(f, "- **%s** commit %c: %t\n", s->entries[i].status, s->entries[i].id,
			    s->entries[i].detail);
		}
	if (nunsigned > 0)
		fputc('\n', f);
	/* the changes to the trusted keys, accepted or not: a reviewer reads
	 * each one */
	for (i = 0, j = 0; i < s->nentries; i++)
		if (strcmp(s->entries[i].kind, "signers") == 0) {
			md(f, "- **%s** allowed_signers, %c: %t\n", s->entries[i].status, s->entries[i].id,
			    s->entries[i].detail);
			j++;
		}
	if (j > 0)
		fputc('\n', f);
	for (i = 0; i < nshown; i++) {
		for (j = 0; j < nrecords && strcmp(records[j].path, shown[i]) != 0; j++)
			;
		summary_record(f, s, shown[i], j < nrecords ? &records[j] : NULL);
	}
	rc = 0;
out:
	if (fclose(f) != 0 && rc == 0)
		rc = idem_error_set(err, IDEM_EXIT_ENV, "writing the summary:");
	if (rc == 0)
		rc = idem_write_file_atomic(summary_path, buf, len, err);
	free(buf);
	idem_free_list(changed, nchanged);
	idem_free_list(shown, nshown);
	return rc;
}
