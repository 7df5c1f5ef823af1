/* trust.c: the trust root of an audit given a base. A pull request that
 * adds its author's key to allowed_signers, then signs its commits and a
 * record with it, must not pass: the keys trusted are those the base
 * holds, and a commit of the range may change them only when a key the
 * trusted lines allow to sign commits (namespace git) and to approve
 * records (idem-approval) signed it. Any other change fails the audit,
 * naming the commit and the line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trust.h"
#include "error.h"
#include "file.h"

/* The lines of a file compared, each against each, for the line a change
 * added: a file of more is named as changed, without the line, so that a
 * hostile one costs no more than 4096 squared comparisons. */
#define TRUST_COMPARE_LINES 4096

static void
change_detail(struct trust_change *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
change_detail(struct trust_change *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&c->detail, fmt, ap) < 0)
		idem_die(IDEM_EXIT_ENV, "vasprintf:");
	va_end(ap);
}

/* The signers of a file's text, named label; an absent file trusts
 * nobody. */
static struct idem_signers *
signers_of(const char *label, const char *text, size_t len)
{
	struct idem_signers *s;
	struct idem_error err;
	char *copy = idem_emalloc(len + 1);

	memcpy(copy, text ? text : "", len);
	copy[len] = '\0';
	if ((s = idem_signers_parse(label, copy, len, &err)) == NULL)
		idem_die_error(&err);
	free(copy);
	return s;
}

static void
add_epoch(struct trust *t, const char *from, struct idem_signers *s)
{
	t->epochs = idem_ereallocarray(t->epochs, t->nepochs + 1, sizeof(*t->epochs));
	t->signers = idem_ereallocarray(t->signers, t->nepochs + 1, sizeof(*t->signers));
	snprintf(t->epochs[t->nepochs].from, sizeof(t->epochs[t->nepochs].from), "%s", from);
	t->epochs[t->nepochs].signers = s;
	t->signers[t->nepochs++] = s;
}

/* Whether text holds the line (len bytes) as one of its lines. */
static int
holds_line(const char *text, size_t text_len, const char *line, size_t len)
{
	const char *p = text, *end = text + text_len, *nl;

	for (; p < end; p = nl + 1) {
		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
			nl = end;
		if ((size_t)(nl - p) == len && memcmp(p, line, len) == 0)
			return 1;
	}
	return 0;
}

static size_t
count_lines(const char *text, size_t len)
{
	size_t n = 0;
	const char *p = text, *end = text + len;

	while (text != NULL && p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		n++;
		p++;
	}
	return n + 1;
}

/* The first line of a that b does not hold: its number and text (cut
 * short at 100 bytes, control characters shown as ?), or 0. */
static long
first_line_not_in(const char *a, size_t a_len, const char *b, size_t b_len, char *out, size_t size)
{
	const char *p = a, *end = a + a_len, *nl;
	long n = 0;

	for (; a != NULL && p < end; p = nl + 1) {
		n++;
		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
			nl = end;
		if (b == NULL || !holds_line(b, b_len, p, (size_t)(nl - p))) {
			char *c;

			snprintf(out, size, "%.*s%s", (int)(nl - p > 100 ? 100 : nl - p), p,
			    nl - p > 100 ? "..." : "");
			for (c = out; *c; c++)
				if ((unsigned char)*c < 0x20 || *c == 0x7f)
					*c = '?';
			return n;
		}
	}
	return 0;
}

/* Who signed the change, when a key the current signers trust for git
 * and for idem-approval did (malloc'd); else NULL, and why. */
static char *
approver_of(const struct idem_signers *now, const struct idem_git_file_change *c, char *why,
	    size_t size)
{
	struct idem_error err;
	struct idem_sig sig;
	char *signer, *approver;

	if (c->armor == NULL) {
		snprintf(why, size, "the commit is not signed");
		return NULL;
	}
	if (idem_sig_parse(&sig, c->armor, c->armor_len, "git", &err) < 0) {
		snprintf(why, size, "its signature: %s", err.text);
		return NULL;
	}
	if ((signer = idem_signers_find(now, sig.public_key, "git", c->when, &err)) == NULL) {
		snprintf(why, size, "its signature: %s", err.text);
		return NULL;
	}
	free(signer);
	if (idem_sig_check(&sig, "git", c->data, c->data_len, &err) < 0) {
		snprintf(why, size, "its signature: %s", err.text);
		return NULL;
	}
	if ((approver = idem_signers_find(now, sig.public_key, "idem-approval", c->when, &err)) == NULL)
		snprintf(why, size, "its signer may not approve: %s", err.text);
	return approver;
}

/* One commit that changed the file: accepted, its lines trusted from
 * there on, or refused, naming the line it added or removed. */
static void
judge(struct trust *t, const struct idem_git_file_change *c)
{
	struct trust_change *out;
	char why[1400], what[1200], line[128], label[1200], *approver;
	long removed;

	t->changes = idem_ereallocarray(t->changes, t->nchanges + 1, sizeof(*t->changes));
	out = &t->changes[t->nchanges++];
	memset(out, 0, sizeof(*out));
	snprintf(out->id, sizeof(out->id), "%s", c->id);
	if ((approver = approver_of(t->signers[t->nepochs - 1], c, why, sizeof(why))) != NULL) {
		snprintf(label, sizeof(label), "%s at %.12s", t->path, c->id);
		add_epoch(t, c->id, signers_of(label, c->after, c->after_len));
		out->accepted = 1;
		change_detail(out, "changes %s, signed by %s, who may approve: its lines count from "
		    "this commit on: %s", t->path, approver, c->summary);
		free(approver);
		return;
	}
	if (count_lines(c->before, c->before_len) > TRUST_COMPARE_LINES ||
	    count_lines(c->after, c->after_len) > TRUST_COMPARE_LINES)
		snprintf(what, sizeof(what), "changes %s (more than %d lines)", t->path,
		    TRUST_COMPARE_LINES);
	else if ((out->line = first_line_not_in(c->after, c->after_len, c->before, c->before_len,
	    line, sizeof(line))) > 0)
		snprintf(what, sizeof(what), "changes %s, line %ld added: %s", t->path, out->line, line);
	else if ((removed = first_line_not_in(c->before, c->before_len, c->after, c->after_len,
	    line, sizeof(line))) > 0)
		snprintf(what, sizeof(what), "changes %s, line %ld removed: %s", t->path, removed, line);
	else
		snprintf(what, sizeof(what), "changes %s", t->path);
	change_detail(out, "%s; %s: only a key that %s trusts for git and idem-approval may "
	    "change it", what, why, t->label);
}

int
idem_trust_from_base(const char *file, const char *since, struct trust *t, struct idem_error *err)
{
	struct idem_git_file_history h;
	const char *trusted_text;
	size_t trusted_len, i;

	memset(t, 0, sizeof(*t));
	if (idem_git_file_history(file, since, &h, err) < 0)
		return -1;
	snprintf(t->path, sizeof(t->path), "%s", h.path);
	snprintf(t->label, sizeof(t->label), "%s at %s", h.path, since);
	t->at_base = h.at_base != NULL;
	add_epoch(t, "", signers_of(t->label, h.at_base, h.at_base_len));
	trusted_text = h.at_base;
	trusted_len = h.at_base_len;
	for (i = 0; i < h.nchanges; i++) {
		const struct idem_git_file_change *c = &h.changes[i];

		/* a commit that leaves the file as it is trusted (a merge of the
		 * base branch) grants nothing */
		if (trusted_text != NULL && c->after != NULL && c->after_len == trusted_len &&
		    memcmp(c->after, trusted_text, trusted_len) == 0)
			continue;
		judge(t, c);
		if (t->changes[t->nchanges - 1].accepted) {
			trusted_text = c->after;
			trusted_len = c->after_len;
		}
	}
	idem_git_file_history_free(&h);
	return 0;
}

struct idem_signers *
idem_trust_now(const struct trust *t)
{
	return t->signers[t->nepochs - 1];
}

void
idem_trust_free(struct trust *t)
{
	size_t i;

	for (i = 0; i < t->nepochs; i++)
		idem_signers_free(t->signers[i]);
	for (i = 0; i < t->nchanges; i++)
		free(t->changes[i].detail);
	free(t->signers);
	free(t->epochs);
	free(t->changes);
	memset(t, 0, sizeof(*t));
}
