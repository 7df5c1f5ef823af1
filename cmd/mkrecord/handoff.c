/* handoff.c: the conveniences the handoff shows beside the record's own
 * fields, and its prose folded to width */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "handoff.h"
#include "sig.h"
#include "record.h"
#include "timeline.h"
#include "error.h"
#include "text.h"

static const char *
str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* A time of the record as the handoff shows it: milliseconds from the
 * run's start, in human units past 10 s; null when there is none. */
static json_t *
since_start(const json_t *o, const char *key, long long start)
{
	long long ms = idem_timeline_offset_ms(str(o, key), start);
	char d[32];

	if (ms < 0)
		return json_null();
	idem_timeline_duration(ms, d, sizeof(d));
	return json_string(d);
}

static json_t *
human(const json_t *ms)
{
	char d[32];

	if (!json_is_integer(ms))
		return json_null();
	idem_timeline_duration(json_integer_value(ms), d, sizeof(d));
	return json_string(d);
}

/* A number of the record as text: integers plainly, reals with three
 * decimals, strings as they are. */
static void
number(const json_t *v, char *out, size_t size)
{
	if (json_is_integer(v))
		snprintf(out, size, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(out, size, "%.3f", json_real_value(v));
	else if (json_is_string(v))
		snprintf(out, size, "%s", json_string_value(v));
	else
		snprintf(out, size, "none");
}

/*
 * A measure on one line: its value with its unit, numerator, denominator
 * with what it counts, its window from the run's start, and its interval
 * when the record has one. The unit "per 1000 accepted jobs" makes the
 * value "166.667 per 1000 accepted jobs" and the denominator "6 accepted
 * jobs"; a unit in ms makes the value a duration and the denominator
 * "n = 3"; "keys per business key called" makes it "6 business keys
 * called".
 */
static void
measure_line(json_t *m, long long start)
{
	const char *unit = str(m, "unit") ? str(m, "unit") : "", *what = unit;
	json_t *value = json_object_get(m, "value"), *interval = json_object_get(m, "interval");
	char v[64], n[64], d[64], text[512], from[32], to[32];
	long long a, b;

	number(json_object_get(m, "numerator"), n, sizeof(n));
	number(json_object_get(m, "denominator"), d, sizeof(d));
	if (json_is_null(value) || value == NULL) {
		snprintf(text, sizeof(text), "none (nothing to divide by)");
	} else if (strncmp(unit, "ms ", 3) == 0) {
		number(value, v, sizeof(v));
		idem_timeline_duration(strtoll(v, NULL, 10), v, sizeof(v));
		snprintf(text, sizeof(text), "%s %s", v, unit + 3);
	} else {
		number(value, v, sizeof(v));
		snprintf(text, sizeof(text), "%s %s", v, unit);
	}
	json_object_set_new(m, "value_text", json_string(text));
	json_object_set_new(m, "numerator_text", json_is_null(json_object_get(m, "numerator")) ||
	    json_object_get(m, "numerator") == NULL ? json_string("") : json_string(n));
	if (strncmp(unit, "per ", 4) == 0) {
		what = unit + 4 + strspn(unit + 4, "0123456789");
		what += strspn(what, " ");
	}
	if (strncmp(unit, "ms ", 3) == 0)
		snprintf(text, sizeof(text), "n = %s", d);
	else if (strstr(unit, " per business key ") != NULL)
		/* "keys per business key called ...": it counts business keys */
		snprintf(text, sizeof(text), "%s business keys %s", d,
		    strstr(unit, " per business key ") + strlen(" per business key "));
	else if (strncmp(what, "killed calls' business keys ", 28) == 0)
		/* pending_calls_owned: of every killed call's key, with a row or not */
		snprintf(text, sizeof(text), "%s killed calls' business keys", d);
	else if (strstr(what, " whose ") != NULL)
		/* "rows of T whose owner is X": the denominator counts every row of T */
		snprintf(text, sizeof(text), "%s %.*s", d, (int)(strstr(what, " whose ") - what), what);
	else
		snprintf(text, sizeof(text), "%s %s", d, what);
	json_object_set_new(m, "denominator_text", json_string(text));
	a = idem_timeline_offset_ms(str(json_object_get(m, "window"), "start"), start);
	b = idem_timeline_offset_ms(str(json_object_get(m, "window"), "end"), start);
	if (a >= 0 && b >= 0) {
		idem_timeline_duration(a, from, sizeof(from));
		idem_timeline_duration(b, to, sizeof(to));
		snprintf(text, sizeof(text), "%s to %s", from, to);
		json_object_set_new(m, "window_text", json_string(text));
	}
	if (json_is_object(interval)) {
		const json_t *c = json_object_get(interval, "confidence");
		double conf = json_is_number(c) ? json_number_value(c) : 0;
		char lo[64], hi[64];

		number(json_object_get(interval, "low"), lo, sizeof(lo));
		number(json_object_get(interval, "high"), hi, sizeof(hi));
		if (conf > 0 && conf <= 1)
			conf *= 100;
		if (conf > 0)
			snprintf(text, sizeof(text), "%g%%: %s to %s", conf, lo, hi);
		else
			snprintf(text, sizeof(text), "%s to %s", lo, hi);
		json_object_set_new(m, "interval_text", json_string(text));
	}
}

void
idem_handoff_fingerprint(const unsigned char public_key[32], char out[64])
{
	char *text = idem_key_public_text(public_key);
	unsigned char blob[128], digest[crypto_hash_sha256_BYTES];
	size_t len = 0;

	out[0] = '\0';
	if (sodium_base642bin(blob, sizeof(blob), strchr(text, ' ') + 1, strlen(strchr(text, ' ') + 1),
	    NULL, &len, NULL, sodium_base64_VARIANT_ORIGINAL) == 0) {
		crypto_hash_sha256(digest, blob, len);
		memcpy(out, "SHA256:", 7);
		sodium_bin2base64(out + 7, 64 - 7, digest, sizeof(digest),
		    sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
	}
	free(text);
}

/* Whether the text from p is a top-level "|" or "&&" of a shell command. */
static size_t
operator_at(const char *p)
{
	if (p[0] == '|' && p[1] == '|')
		return 2;
	if (p[0] == '&' && p[1] == '&')
		return 2;
	if (p[0] == '|')
		return 1;
	return 0;
}

char *
idem_handoff_block(const char *command, int sql, size_t width)
{
	char *buf = NULL;
	size_t len = 0, col, indent = 4;
	const char *p = command, *line = command, *brk = NULL, *brk_op = NULL;
	char quote = 0;
	FILE *out;

	if ((out = open_memstream(&buf, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	/* scan, remembering the last blank (and the last operator's end) where
	 * the line may break; break when the line grows past width */
	for (; *p; p++) {
		size_t op;

		if (quote) {
			if (*p == quote)
				quote = 0;
			else if (*p == '\\' && quote == '"' && !sql && p[1])
				p++;
		} else if (*p == '\'' || *p == '"') {
			quote = *p;
		} else if (*p == ' ') {
			brk = p;
		} else if (!sql && (op = operator_at(p)) > 0 && p[op] == ' ') {
			brk_op = p + op;
			p += op - 1;
			continue;
		}
		/* room for the " \\" of a break at a blank */
		col = indent + (size_t)(p - line) + 1;
		if (col + (sql ? 0 : 2) > width && !quote && (brk_op > line || brk > line)) {
			const char *at = brk_op > line ? brk_op : brk;

			fprintf(out, "%*s%.*s%s\n", (int)indent, "", (int)(at - line), line,
			    at == brk_op || sql ? "" : " \\");
			line = at + strspn(at, " ");
			indent = 8;
			brk = brk_op = NULL;
			quote = 0;
			p = line - 1;
		}
	}
	fprintf(out, "%*s%s", (int)indent, "", line);
	if (fclose(out) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	return buf;
}

/* Writes one prose line folded at blanks, its continuations indented by
 * hang. */
static void
fold_line(FILE *out, const char *line, size_t len, size_t width, size_t hang)
{
	size_t indent = 0;

	while (len > width - indent) {
		size_t cut = width - indent;

		while (cut > 0 && line[cut] != ' ')
			cut--;
		if (cut <= hang) {
			/* no blank to fold at before width: at the first after it */
			for (cut = width - indent; cut < len && line[cut] != ' '; cut++)
				;
			if (cut == len)
				break;
		}
		fprintf(out, "%*s%.*s\n", (int)indent, "", (int)cut, line);
		line += cut + 1;
		len -= cut + 1;
		indent = hang;
	}
	fprintf(out, "%*s%.*s\n", (int)indent, "", (int)len, line);
}

char *
idem_handoff_fold(const char *md, size_t width)
{
	char *buf = NULL;
	size_t len = 0;
	const char *line = md;
	int fenced = 0;
	FILE *out;

	if ((out = open_memstream(&buf, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	while (*line) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line), hang = 0;

		if (strncmp(line, "```", 3) == 0)
			fenced = !fenced;
		if (fenced || n <= width || line[0] == '|' || strncmp(line, "    ", 4) == 0 ||
		    line[0] == '\t') {
			fwrite(line, 1, n, out);
			if (nl)
				putc('\n', out);
		} else {
			if (line[0] == '-' || line[0] == '*')
				hang = 2;
			fold_line(out, line, n, width, hang);
		}
		line = nl ? nl + 1 : line + n;
	}
	if (fclose(out) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	/* a folded last line without a newline keeps none */
	if (len > 0 && md[strlen(md) - 1] != '\n' && buf[len - 1] == '\n')
		buf[len - 1] = '\0';
	return buf;
}

/* The elements of a list of keys or call numbers as the handoff shows
 * them: a key in backquotes, a number as it is, null as "none". */
static json_t *
list_text(const json_t *list, int quoted)
{
	char *buf = NULL;
	size_t len = 0, i;
	const json_t *v;
	json_t *text;
	FILE *out;

	if ((out = open_memstream(&buf, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	json_array_foreach(list, i, v) {
		fputs(i > 0 ? ", " : "", out);
		if (json_is_string(v))
			fprintf(out, quoted ? "`%s`" : "%s", json_string_value(v));
		else if (json_is_integer(v))
			fprintf(out, "%lld", (long long)json_integer_value(v));
		else
			fputs("none", out);
	}
	if (fclose(out) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	text = json_string(buf);
	free(buf);
	return text;
}

/*
 * The keys each attempt sent: one row per call of an attempt, with its
 * number, its Idempotency-Key, its answer, when it was answered and
 * whether it took effect. Only when the calls have numbers (idem-tsv
 * 1.8), by which the rekeyed business keys name them.
 */
static void
keys_sent(json_t *ctx, long long start)
{
	json_t *rows = json_array(), *row, *call;
	size_t i, j;
	int numbered = 0;

	json_array_foreach(json_object_get(ctx, "calls"), i, call)
		numbered |= json_is_integer(json_object_get(call, "id"));
	json_array_foreach(json_object_get(ctx, "evidence"), i, row)
		json_array_foreach(json_object_get(row, "calls"), j, call) {
			json_t *answered = since_start(call, "answered_at", start);

			/* null is a constant of jansson's: no reference to drop */
			if (json_is_null(answered))
				answered = json_string("none");
			json_array_append_new(rows, json_pack("{s:O,s:O,s:O,s:O,s:O,s:O,s:o}",
			    "job", json_object_get(row, "job"),
			    "attempt", json_object_get(row, "attempt"),
			    "id", json_object_get(call, "id"),
			    "idempotency_key", json_object_get(call, "idempotency_key"),
			    "answer", json_object_get(call, "answer"),
			    "effect", json_object_get(call, "effect"), "answered", answered));
		}
	json_object_set_new(ctx, "keys_sent", numbered ? rows : json_array());
	if (!numbered)
		json_decref(rows);
}

/* The keys changed, forgotten and pending: their lists in words, and
 * which of them fail the verdict. */
static void
keys_and_pending(json_t *ctx, long long start)
{
	int honours = json_is_true(json_object_get(json_object_get(ctx, "external"),
	    "honours_idempotency_key")), pending_fails = 0;
	json_t *row;
	size_t i;

	json_array_foreach(json_object_get(ctx, "rekeyed"), i, row) {
		json_object_set_new(row, "keys_text", list_text(json_object_get(row, "keys"), 1));
		json_object_set_new(row, "calls_text", list_text(json_object_get(row, "calls"), 0));
		json_object_set_new(row, "fails", json_boolean(honours));
	}
	if (honours && json_array_size(json_object_get(ctx, "rekeyed")) > 0)
		json_object_set_new(ctx, "rekeyed_fails", json_true());
	json_array_foreach(json_object_get(ctx, "pending_calls"), i, row) {
		int fails = !idem_record_pending_ok(str(row, "result"));

		json_object_set_new(row, "fails", json_boolean(fails));
		pending_fails |= fails;
	}
	if (pending_fails)
		json_object_set_new(ctx, "pending_fails", json_true());
	json_array_foreach(json_object_get(ctx, "forgotten_keys"), i, row) {
		json_object_set_new(row, "forgotten", since_start(row, "at", start));
		json_object_set_new(row, "window", human(json_object_get(row, "window_ms")));
	}
	keys_sent(ctx, start);
}

/* Beside each total after the run, the same count before it (null when
 * count-effects --before did not count it). */
static void
counts_before(json_t *counts)
{
	json_t *row, *before;
	size_t i, j;

	json_array_foreach(json_object_get(counts, "total_rows"), i, row) {
		json_object_set_new(row, "before", json_null());
		json_array_foreach(json_object_get(counts, "before"), j, before)
			if (str(before, "scope") && strcmp(str(before, "scope"), "total") == 0 &&
			    str(before, "key") && str(row, "name") &&
			    strcmp(str(before, "key"), str(row, "name")) == 0)
				json_object_set(row, "before", json_object_get(before, "observed"));
	}
}

void
idem_handoff_context(json_t *ctx, const struct idem_handoff_files *files)
{
	long long start = idem_timeline_start(ctx);
	json_t *row, *v;
	size_t i;
	char when[32], *text;
	const char *record = files->record;

	if ((text = idem_record_why(ctx)) != NULL)
		json_object_set_new(ctx, "why", json_string(text));
	free(text);
	if (start >= 0) {
		idem_format_time(start, when);
		/* milliseconds are enough for the start of the axis */
		memcpy(when + 23, "Z", 2);
		json_object_set_new(ctx, "run_start", json_string(when));
	}
	/* and seconds for when the record was made */
	if (str(ctx, "created_at") && strlen(str(ctx, "created_at")) > 19) {
		memcpy(when, str(ctx, "created_at"), 19);
		memcpy(when + 19, "Z", 2);
		json_object_set_new(ctx, "created", json_string(when));
	}
	json_array_foreach(json_object_get(ctx, "evidence"), i, row) {
		const char *outcome = str(row, "outcome"), *branch = str(row, "branch");
		const json_t *lease = json_object_get(row, "lease_ended");

		json_object_set_new(row, "published", since_start(row, "published_at", start));
		json_object_set_new(row, "consumed", since_start(row, "consumed_at", start));
		json_object_set_new(row, "committed", since_start(row, "committed_at", start));
		json_object_set_new(row, "acked", since_start(row, "acked_at", start));
		json_object_set_new(row, "result", branch && *branch ?
		    json_sprintf("%s: %s", outcome ? outcome : "", branch) :
		    json_string(outcome ? outcome : ""));
		if (json_is_object(lease)) {
			json_t *at = since_start(lease, "at", start);

			json_object_set_new(row, "result", json_sprintf("%s; lease ended %s (%s)",
			    str(row, "result"), json_string_value(at) ? json_string_value(at) : "",
			    str(lease, "why") ? str(lease, "why") : ""));
			json_decref(at);
		}
	}
	json_array_foreach(json_object_get(ctx, "stalls"), i, row) {
		const char *release = str(row, "release") ? str(row, "release") : "";

		json_object_set_new(row, "stalled", since_start(row, "stalled_at", start));
		json_object_set_new(row, "released", json_is_null(json_object_get(row, "released_at")) ?
		    json_string("never") : since_start(row, "released_at", start));
		json_object_set_new(row, "release_text", json_string(
		    strcmp(release, "acked") == 0 ? "the redelivered attempt's ack" :
		    strcmp(release, "until") == 0 ? "the redelivered attempt's until step" :
		    strcmp(release, "blocked") == 0 ? "a lock the stalled attempt held" :
		    strcmp(release, "bound") == 0 ? "**the bound ran out: a finding**" : release));
	}
	json_array_foreach(json_object_get(ctx, "kill_points"), i, row) {
		json_object_set_new(row, "killed", since_start(row, "killed_at", start));
		json_object_set_new(row, "recovery", human(json_object_get(row, "recovery_ms")));
	}
	json_array_foreach(json_object_get(ctx, "calls"), i, row)
		json_object_set_new(row, "since_start", since_start(row, "at", start));
	keys_and_pending(ctx, start);
	counts_before(json_object_get(ctx, "counts"));
	json_array_foreach(json_object_get(ctx, "measures"), i, row)
		measure_line(row, start);
	json_array_foreach(json_object_get(ctx, "waiting"), i, row)
		json_object_set_new(row, "duration", human(json_object_get(row, "duration_ms")));
	json_array_foreach(json_object_get(ctx, "guards"), i, row)
		json_object_set_new(row, "none", json_boolean(str(row, "kind") &&
		    strcmp(str(row, "kind"), "none") == 0));
	v = json_object_get(json_object_get(ctx, "retry"), "visibility_timeout_ms");
	json_object_set_new(json_object_get(ctx, "retry"), "visibility_timeout", human(v));
	if (str(ctx, "reproduce")) {
		text = idem_handoff_block(str(ctx, "reproduce"), 0, IDEM_HANDOFF_WIDTH);
		json_object_set_new(ctx, "reproduce_block", json_string(text));
		free(text);
	}
	if (str(json_object_get(ctx, "counts"), "query")) {
		text = idem_handoff_block(str(json_object_get(ctx, "counts"), "query"), 1,
		    IDEM_HANDOFF_WIDTH);
		json_object_set_new(json_object_get(ctx, "counts"), "query_block", json_string(text));
		free(text);
	}
	/* the commands that check the record, by the name it has */
	if (record != NULL) {
		json_t *cmds = json_object();
		char *c;

		json_object_set_new(cmds, "verify", json_sprintf("    verify-record %s", record));
		json_object_set_new(cmds, "rerun", json_sprintf("    verify-record --rerun %s", record));
		if (files->fingerprint != NULL) {
			if (asprintf(&c, "ssh-keygen -Y verify -f %s -I %s -n idem-record -s %s.sig <%s",
			    files->signers ? files->signers : "records/allowed_signers",
			    files->principal ? files->principal : "PRINCIPAL", record, record) < 0)
				idem_die(IDEM_EXIT_ENV, "asprintf:");
			text = idem_handoff_block(c, 0, IDEM_HANDOFF_WIDTH);
			json_object_set_new(cmds, "ssh_keygen", json_string(text));
			free(text);
			free(c);
		}
		json_object_set_new(ctx, "commands", cmds);
	}
	json_object_set_new(ctx, "signer", files->fingerprint == NULL ? json_null() :
	    json_pack("{s:s,s:o,s:o}", "fingerprint", files->fingerprint, "principal",
	    files->principal ? json_string(files->principal) : json_null(), "signers",
	    files->signers ? json_string(files->signers) : json_null()));
	{
		char *mermaid = idem_timeline_mermaid(ctx);
		json_t *hist = idem_timeline_histogram(ctx);

		json_object_set_new(ctx, "timeline", json_pack("{s:s,s:o,s:o}", "mermaid", mermaid,
		    "svg", files->svg ? json_string(files->svg) : json_null(), "histogram", hist));
		free(mermaid);
	}
}
