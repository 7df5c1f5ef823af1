/* timeline.c: a record's jobs on one time axis, as a Mermaid gantt
 * chart and an SVG drawing */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "map.h"
#include "timeline.h"
#include "error.h"

/* What a lane holds: bars from start to end, and marks at start. */
enum mark {
	BAR_ACKED, BAR_KILLED, BAR_OPEN, BAR_STALLED, GAP, PENDING, PUBLISH, COMMIT, KILL, ACK,
	CALL, STALL, RELEASE, LATE
};

struct item {
	enum mark mark;
	long long start, end;	/* ms from the run's start */
	char label[128];
};

/* One message of a job, or the calls of no attempt. */
struct lane {
	char name[64];
	const char *msg;
	struct item *items;
	size_t n;
};

/* One job, or the calls of no attempt. */
struct section {
	char name[160];
	struct lane *lanes;
	size_t n;
};

/* A job of the evidence: its rows, in order, and whether it is one of a
 * scenario's: killed, delivered more than once, or not acked. */
struct job {
	const char *name;
	size_t *rows, n;
	int of_scenario;
};

struct timeline {
	struct section *sections;
	size_t n;
	long long start_us, span;	/* the run's start, and its length in ms */
	size_t jobs, shown;		/* jobs in the evidence, and on the timeline */
};

void
idem_timeline_duration(long long ms, char *out, size_t size)
{
	const char *sign = ms < 0 ? "-" : "";
	long long a = ms < 0 ? -ms : ms;

	if (a < 10000)
		snprintf(out, size, "%s%lld ms", sign, a);
	else if (a < 120000 && a % 1000 / 100 == 0)
		snprintf(out, size, "%s%lld s", sign, a / 1000);
	else if (a < 120000)
		snprintf(out, size, "%s%lld.%lld s", sign, a / 1000, a % 1000 / 100);
	else if (a < 7200000 && a / 1000 % 60 == 0)
		snprintf(out, size, "%s%lld min", sign, a / 60000);
	else if (a < 7200000)
		snprintf(out, size, "%s%lld min %lld s", sign, a / 60000, a / 1000 % 60);
	else if (a < 172800000 && a / 60000 % 60 == 0)
		snprintf(out, size, "%s%lld h", sign, a / 3600000);
	else if (a < 172800000)
		snprintf(out, size, "%s%lld h %lld min", sign, a / 3600000, a / 60000 % 60);
	else if (a / 3600000 % 24 == 0)
		snprintf(out, size, "%s%lld d", sign, a / 86400000);
	else
		snprintf(out, size, "%s%lld d %lld h", sign, a / 86400000, a / 3600000 % 24);
}

long long
idem_timeline_parse_time(const char *text)
{
	struct tm tm;
	const char *p;
	long long us = 0, scale = 100000;
	time_t secs;

	if (text == NULL)
		return -1;
	memset(&tm, 0, sizeof(tm));
	if ((p = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm)) == NULL)
		return -1;
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++) {
			us += (*p - '0') * scale;
			scale /= 10;
		}
		if (scale == 100000 || scale < 0)
			return -1;
	}
	if (strcmp(p, "Z") != 0 || (secs = timegm(&tm)) < 0)
		return -1;
	return (long long)secs * 1000000 + us;
}

static void
earliest(long long *start, const char *text)
{
	long long t = idem_timeline_parse_time(text);

	if (t >= 0 && (*start < 0 || t < *start))
		*start = t;
}

static const char *
str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* A text of the record, or "" when it has none. */
static const char *
text_of(const json_t *o, const char *key)
{
	return str(o, key) ? str(o, key) : "";
}

long long
idem_timeline_start(const json_t *record)
{
	static const char *const times[] = { "published_at", "consumed_at", "committed_at",
		"acked_at", NULL };
	long long start = -1;
	const json_t *row;
	size_t i, k;

	json_array_foreach(json_object_get(record, "evidence"), i, row)
		for (k = 0; times[k]; k++)
			earliest(&start, str(row, times[k]));
	json_array_foreach(json_object_get(record, "kill_points"), i, row)
		earliest(&start, str(row, "killed_at"));
	json_array_foreach(json_object_get(record, "stalls"), i, row)
		earliest(&start, str(row, "stalled_at"));
	json_array_foreach(json_object_get(record, "calls"), i, row)
		earliest(&start, str(row, "at"));
	json_array_foreach(json_object_get(record, "measures"), i, row)
		earliest(&start, str(json_object_get(row, "window"), "start"));
	return start;
}

long long
idem_timeline_offset_ms(const char *time, long long start)
{
	long long t = idem_timeline_parse_time(time);

	if (t < 0 || start < 0)
		return -1;
	return (t - start + (t >= start ? 500 : -500)) / 1000;
}

/* Text fit for a Mermaid task or section name and for SVG: what Mermaid's
 * gantt grammar or XML would read as syntax (":", "#", ";", "%", "<", "&",
 * quotes, braces, brackets) becomes a blank, and blanks are collapsed. */
static void
plain(char *out, size_t size, const char *text)
{
	size_t o = 0;
	const unsigned char *p;

	for (p = (const unsigned char *)(text ? text : ""); *p && o + 1 < size; p++) {
		int c = *p;

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    strchr(" _.,()/+=@-", c) != NULL) || c == '\0')
			c = ' ';
		if (c == ' ' && (o == 0 || out[o - 1] == ' '))
			continue;
		out[o++] = (char)c;
	}
	while (o > 0 && out[o - 1] == ' ')
		o--;
	out[o] = '\0';
}

static struct item *
add(struct lane *lane, enum mark mark, long long start, long long end, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static struct item *
add(struct lane *lane, enum mark mark, long long start, long long end, const char *fmt, ...)
{
	struct item *it;
	char raw[256];
	va_list ap;

	if (start < 0)
		return NULL;
	lane->items = idem_ereallocarray(lane->items, lane->n + 1, sizeof(*lane->items));
	it = &lane->items[lane->n++];
	it->mark = mark;
	it->start = start;
	it->end = end < start ? start : end;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	plain(it->label, sizeof(it->label), raw);
	return it;
}

static struct lane *
lane_of(struct section *sec, const char *msg)
{
	char raw[96];
	size_t i;

	for (i = 0; i < sec->n; i++)
		if (sec->lanes[i].msg && msg && strcmp(sec->lanes[i].msg, msg) == 0)
			return &sec->lanes[i];
	sec->lanes = idem_ereallocarray(sec->lanes, sec->n + 1, sizeof(*sec->lanes));
	memset(&sec->lanes[sec->n], 0, sizeof(*sec->lanes));
	sec->lanes[sec->n].msg = msg ? idem_estrdup(msg) : NULL;
	snprintf(raw, sizeof(raw), "msg %s", msg ? msg : "none");
	plain(sec->lanes[sec->n].name, sizeof(sec->lanes[sec->n].name), raw);
	return &sec->lanes[sec->n++];
}

/* A message id as text, whether the record holds a number or a string. */
static const char *
msg_text(const json_t *row, char *buf, size_t size)
{
	const json_t *v = json_object_get(row, "msg_id");

	if (json_is_integer(v)) {
		snprintf(buf, size, "%lld", (long long)json_integer_value(v));
		return buf;
	}
	return json_string_value(v);
}

static long long
at(const struct timeline *tl, const json_t *o, const char *key)
{
	return idem_timeline_offset_ms(str(o, key), tl->start_us);
}

/* The kill point of an attempt: same job and attempt, and same message
 * when the kill point names one. */
static const json_t *
kill_of(const json_t *record, const json_t *row, const char *msg)
{
	const json_t *k;
	char buf[32];
	size_t i;

	json_array_foreach(json_object_get(record, "kill_points"), i, k) {
		const char *kmsg = msg_text(k, buf, sizeof(buf));

		if (json_equal(json_object_get(k, "job"), json_object_get(row, "job")) &&
		    json_equal(json_object_get(k, "attempt"), json_object_get(row, "attempt")) &&
		    (kmsg == NULL || (msg && strcmp(kmsg, msg) == 0)))
			return k;
	}
	return NULL;
}

/* The stall of an attempt: same job and attempt. */
static const json_t *
stall_of(const json_t *record, const json_t *row)
{
	const json_t *st;
	size_t i;

	json_array_foreach(json_object_get(record, "stalls"), i, st)
		if (json_equal(json_object_get(st, "job"), json_object_get(row, "job")) &&
		    json_equal(json_object_get(st, "attempt"), json_object_get(row, "attempt")))
			return st;
	return NULL;
}

/* A stalled attempt, from its delivery to its end: the last of its ack,
 * commit, write and release, or the end of the run when it was never
 * released; marked where it was held and where it was let go. */
static void
stalled_attempt(const struct timeline *tl, struct lane *lane, const json_t *row, const json_t *st,
		const char *msg)
{
	static const char *const ends[] = { "acked_at", "committed_at", "written_at", NULL };
	long long end = at(tl, st, "released_at"), t;
	size_t i;

	for (i = 0; ends[i]; i++)
		if ((t = at(tl, row, ends[i])) > end)
			end = t;
	if (json_is_null(json_object_get(st, "released_at")))
		end = tl->span;
	add(lane, BAR_STALLED, at(tl, row, "consumed_at"), end, "msg %s try %lld stalled at %s, %s, %s",
	    msg ? msg : "", (long long)json_integer_value(json_object_get(row, "attempt")),
	    text_of(st, "step"), str(row, "branch") ? str(row, "branch") : "no branch logged",
	    text_of(row, "outcome"));
	add(lane, COMMIT, at(tl, row, "committed_at"), -1, "commit msg %s", msg ? msg : "");
	add(lane, STALL, at(tl, st, "stalled_at"), -1, "STALL at %s", text_of(st, "step"));
	add(lane, RELEASE, at(tl, st, "released_at"), -1, "release on %s", text_of(st, "release"));
	add(lane, ACK, at(tl, row, "acked_at"), -1, "ack msg %s", msg ? msg : "");
}

/* Two lanes whose attempts overlap in time: deliveries at once, a race. */
static int
lanes_overlap(const struct section *sec)
{
	size_t a, b, i, j;

	for (a = 0; a < sec->n; a++)
		for (b = a + 1; b < sec->n; b++)
			for (i = 0; i < sec->lanes[a].n; i++)
				for (j = 0; j < sec->lanes[b].n; j++) {
					const struct item *x = &sec->lanes[a].items[i], *y = &sec->lanes[b].items[j];

					if (x->mark <= BAR_STALLED && y->mark <= BAR_STALLED &&
					    x->start <= y->end && y->start <= x->end)
						return 1;
				}
	return 0;
}

/* A call, and for an answer that came late a mark of its own when it
 * came; a lost answer is a call whose label says so, with no mark after. */
static void
add_call(const struct timeline *tl, struct lane *lane, const json_t *call)
{
	add(lane, CALL, at(tl, call, "at"), -1, "external call %s %s %lld %s", text_of(call, "method"),
	    text_of(call, "path"), (long long)json_integer_value(json_object_get(call, "status")),
	    text_of(call, "answer"));
	if (strcmp(text_of(call, "answer"), "late") == 0)
		add(lane, LATE, at(tl, call, "answered_at"), -1, "LATE answer to call %lld",
		    (long long)json_integer_value(json_object_get(call, "id")));
}

static void
job_section(struct timeline *tl, const json_t *record, const json_t *rows, const struct job *jb)
{
	const char *job = jb->name;
	struct section *sec;
	const json_t *row, *k, *call;
	char buf[32], scen[128] = "";
	size_t i, j, r;
	int stalled = 0;

	tl->sections = idem_ereallocarray(tl->sections, tl->n + 1, sizeof(*tl->sections));
	sec = &tl->sections[tl->n++];
	memset(sec, 0, sizeof(*sec));
	json_array_foreach(json_object_get(record, "kill_points"), i, k)
		if (strcmp(text_of(k, "job"), job) == 0 && str(k, "scenario") &&
		    strstr(scen, str(k, "scenario")) == NULL)
			snprintf(scen + strlen(scen), sizeof(scen) - strlen(scen), " %s", str(k, "scenario"));
	json_array_foreach(json_object_get(record, "stalls"), i, k)
		if (strcmp(text_of(k, "job"), job) == 0 && str(k, "scenario") &&
		    strstr(scen, str(k, "scenario")) == NULL) {
			snprintf(scen + strlen(scen), sizeof(scen) - strlen(scen), " %s", str(k, "scenario"));
			stalled = 1;
		}
	for (r = 0; r < jb->n; r++) {
		const char *msg, *outcome;
		struct lane *lane;
		long long consumed, end, killed = -1;
		const json_t *next = NULL;
		enum mark bar;

		row = json_array_get(rows, jb->rows[r]);
		msg = msg_text(row, buf, sizeof(buf));
		outcome = str(row, "outcome");
		consumed = at(tl, row, "consumed_at");
		lane = lane_of(sec, msg);
		if (lane->n == 0)
			add(lane, PUBLISH, at(tl, row, "published_at"), -1, "publish msg %s", msg ? msg : "");
		if ((k = stall_of(record, row)) != NULL) {
			stalled_attempt(tl, lane, row, k, msg);
			continue;
		}
		if ((k = kill_of(record, row, msg)) != NULL)
			killed = at(tl, k, "killed_at");
		end = at(tl, row, "acked_at");
		bar = end >= 0 ? BAR_ACKED : killed >= 0 ? BAR_KILLED : BAR_OPEN;
		if (outcome && strncmp(outcome, "killed", 6) == 0)
			bar = BAR_KILLED;
		if (end < 0)
			end = killed;
		if (end < 0)
			end = at(tl, row, "committed_at");
		if (end < 0)
			end = at(tl, row, "written_at");
		add(lane, bar, consumed, end, "msg %s try %lld %s, %s", msg ? msg : "",
		    (long long)json_integer_value(json_object_get(row, "attempt")),
		    str(row, "branch") ? str(row, "branch") : "no branch logged", text_of(row, "outcome"));
		add(lane, COMMIT, at(tl, row, "committed_at"), -1, "commit msg %s", msg ? msg : "");
		json_array_foreach(json_object_get(row, "calls"), j, call)
			add_call(tl, lane, call);
		if (killed >= 0)
			add(lane, KILL, killed, -1, "KILL at %s", text_of(k, "step"));
		add(lane, ACK, at(tl, row, "acked_at"), -1, "ack msg %s", msg ? msg : "");
		if (at(tl, row, "acked_at") >= 0)
			continue;
		/* the visibility gap: to the message's next delivery, if any */
		for (j = r + 1; j < jb->n && next == NULL; j++) {
			const json_t *r2 = json_array_get(rows, jb->rows[j]);
			char b2[32];
			const char *m2 = msg_text(r2, b2, sizeof(b2));

			if (m2 && msg && strcmp(m2, msg) == 0)
				next = r2;
		}
		if (end < 0)
			end = consumed;
		if (next != NULL) {
			char d[32];

			idem_timeline_duration(at(tl, next, "consumed_at") - end, d, sizeof(d));
			add(lane, GAP, end, at(tl, next, "consumed_at"), "visibility gap %s, redelivery", d);
		} else {
			add(lane, PENDING, end, tl->span, "never redelivered, pending");
		}
	}
	snprintf(sec->name, sizeof(sec->name), "%s%s%s", job, scen,
	    sec->n > 1 ? (lanes_overlap(sec) ? " race, two lanes on one key" : " duplicate publish") :
	    stalled ? " stall, two attempts at once" : "");
	{
		char clean[160];

		plain(clean, sizeof(clean), sec->name);
		memcpy(sec->name, clean, sizeof(clean));
	}
}

static void
timeline_free(struct timeline *tl)
{
	size_t i, j;

	for (i = 0; i < tl->n; i++) {
		for (j = 0; j < tl->sections[i].n; j++) {
			free((char *)tl->sections[i].lanes[j].msg);
			free(tl->sections[i].lanes[j].items);
		}
		free(tl->sections[i].lanes);
	}
	free(tl->sections);
}

/* The last time the record knows of, in ms from the start. */
static long long
span_of(const json_t *record, long long start)
{
	static const char *const times[] = { "published_at", "consumed_at", "committed_at",
		"acked_at", NULL };
	const json_t *row;
	long long last = 0, t;
	size_t i, k;

	json_array_foreach(json_object_get(record, "evidence"), i, row)
		for (k = 0; times[k]; k++)
			if ((t = idem_timeline_offset_ms(str(row, times[k]), start)) > last)
				last = t;
	json_array_foreach(json_object_get(record, "kill_points"), i, row)
		if ((t = idem_timeline_offset_ms(str(row, "killed_at"), start)) > last)
			last = t;
	json_array_foreach(json_object_get(record, "stalls"), i, row)
		if ((t = idem_timeline_offset_ms(str(row, "released_at"), start)) > last)
			last = t;
	json_array_foreach(json_object_get(record, "calls"), i, row) {
		if ((t = idem_timeline_offset_ms(str(row, "at"), start)) > last)
			last = t;
		if ((t = idem_timeline_offset_ms(str(row, "answered_at"), start)) > last)
			last = t;
	}
	json_array_foreach(json_object_get(record, "measures"), i, row)
		if ((t = idem_timeline_offset_ms(str(json_object_get(row, "window"), "end"), start)) > last)
			last = t;
	return last;
}

/*
 * The jobs of the evidence in the order they first appear, each with its
 * rows, in one pass: a job of a kill point, one delivered more than once
 * and one not acked are the scenarios'. Sets *n; caller frees.
 */
static struct job *
jobs_of(const json_t *record, size_t *n)
{
	const json_t *rows = json_object_get(record, "evidence"), *row, *k;
	struct job *jobs = NULL;
	struct idem_map index;
	size_t i, at;

	idem_map_init(&index);
	*n = 0;
	json_array_foreach(rows, i, row) {
		struct job *jb;

		if ((at = idem_map_get(&index, text_of(row, "job"))) == IDEM_MAP_NONE) {
			jobs = idem_ereallocarray(jobs, *n + 1, sizeof(*jobs));
			jobs[*n] = (struct job){ .name = text_of(row, "job") };
			idem_map_put(&index, text_of(row, "job"), at = (*n)++);
		}
		jb = &jobs[at];
		jb->rows = idem_ereallocarray(jb->rows, jb->n + 1, sizeof(*jb->rows));
		jb->rows[jb->n++] = i;
		if (jb->n > 1 || strcmp(text_of(row, "outcome"), "acked") != 0)
			jb->of_scenario = 1;
	}
	json_array_foreach(json_object_get(record, "kill_points"), i, k)
		if ((at = idem_map_get(&index, text_of(k, "job"))) != IDEM_MAP_NONE)
			jobs[at].of_scenario = 1;
	json_array_foreach(json_object_get(record, "stalls"), i, k)
		if ((at = idem_map_get(&index, text_of(k, "job"))) != IDEM_MAP_NONE)
			jobs[at].of_scenario = 1;
	idem_map_free(&index);
	return jobs;
}

static void
build(struct timeline *tl, const json_t *record)
{
	const json_t *rows = json_object_get(record, "evidence"), *call;
	struct job *jobs;
	size_t njobs, i;
	int volume;

	memset(tl, 0, sizeof(*tl));
	tl->start_us = idem_timeline_start(record);
	tl->span = span_of(record, tl->start_us);
	jobs = jobs_of(record, &njobs);
	tl->jobs = njobs;
	volume = njobs > IDEM_TIMELINE_VOLUME ||
	    json_integer_value(json_object_get(record, "jobs")) > IDEM_TIMELINE_VOLUME;
	for (i = 0; i < njobs; i++) {
		if (!volume || (tl->shown < IDEM_TIMELINE_MAX_JOBS && jobs[i].of_scenario)) {
			job_section(tl, record, rows, &jobs[i]);
			tl->shown++;
		}
		free(jobs[i].rows);
	}
	free(jobs);
	/* calls that no attempt made */
	json_array_foreach(json_object_get(record, "calls"), i, call) {
		struct section *sec;

		if (!json_is_null(json_object_get(call, "job")) && json_object_get(call, "job") != NULL)
			continue;
		if (tl->n == 0 || strcmp(tl->sections[tl->n - 1].name, "calls of no attempt") != 0) {
			tl->sections = idem_ereallocarray(tl->sections, tl->n + 1, sizeof(*tl->sections));
			sec = &tl->sections[tl->n++];
			memset(sec, 0, sizeof(*sec));
			snprintf(sec->name, sizeof(sec->name), "calls of no attempt");
			lane_of(sec, NULL);
			snprintf(sec->lanes[0].name, sizeof(sec->lanes[0].name), "no worker");
		}
		add_call(tl, &tl->sections[tl->n - 1].lanes[0], call);
	}
}

static const char *const mermaid_tags[] = {
	[BAR_ACKED] = "done, ", [BAR_KILLED] = "crit, ", [BAR_OPEN] = "active, ",
	[BAR_STALLED] = "active, ", [GAP] = "", [PENDING] = "active, ",
	[PUBLISH] = "milestone, ", [COMMIT] = "milestone, ", [KILL] = "crit, milestone, ",
	[ACK] = "done, milestone, ", [CALL] = "milestone, ", [STALL] = "crit, milestone, ",
	[RELEASE] = "milestone, ", [LATE] = "milestone, ",
};

char *
idem_timeline_mermaid(const json_t *record)
{
	struct timeline tl;
	char *buf = NULL;
	size_t len = 0, i, j, k;
	FILE *out;

	build(&tl, record);
	if ((out = open_memstream(&buf, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	fputs("gantt\n", out);
	if (tl.shown < tl.jobs)
		fprintf(out, "    title the jobs of the scenarios, %zu of %zu, in ms from the run's start\n",
		    tl.shown, tl.jobs);
	else
		fputs("    title every job, in ms from the run's start\n", out);
	fputs("    dateFormat x\n", out);
	fprintf(out, "    axisFormat %s\n", tl.span < 60000 ? "%S.%L s" : tl.span < 3600000 ?
	    "%M min %S s" : "%H h %M min");
	fputs("    todayMarker off\n", out);
	for (i = 0; i < tl.n; i++) {
		const struct section *sec = &tl.sections[i];
		size_t items = 0;

		for (j = 0; j < sec->n; j++)
			items += sec->lanes[j].n;
		if (items == 0)
			continue;
		fprintf(out, "    section %s\n", sec->name);
		for (j = 0; j < sec->n; j++)
			for (k = 0; k < sec->lanes[j].n; k++) {
				const struct item *it = &sec->lanes[j].items[k];

				fprintf(out, "    %s :%s%lld, %lld\n", it->label, mermaid_tags[it->mark],
				    it->start, it->end);
			}
	}
	if (fclose(out) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	timeline_free(&tl);
	return buf;
}

/* XML text: the few characters that are markup, as entities; control
 * characters, which XML 1.0 does not allow, as blanks. */
static void
xml_text(FILE *out, const char *s)
{
	for (; *s; s++)
		switch (*s) {
		case '&': fputs("&amp;", out); break;
		case '<': fputs("&lt;", out); break;
		case '>': fputs("&gt;", out); break;
		case '"': fputs("&quot;", out); break;
		default: putc((unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s, out);
		}
}

#define SVG_WIDTH 1000
#define SVG_LABELS 240
#define SVG_RIGHT 30
#define SVG_TOP 70
#define SVG_ROW 22

static double
svg_x(const struct timeline *tl, long long ms)
{
	double plot = SVG_WIDTH - SVG_LABELS - SVG_RIGHT;

	return SVG_LABELS + (double)ms * plot / (double)(tl->span > 0 ? tl->span : 1);
}

static long long
tick_step(long long span)
{
	static const long long nice[] = { 1, 2, 5 };
	long long mag;
	int i;

	for (mag = 1;; mag *= 10)
		for (i = 0; i < 3; i++)
			if (span / (nice[i] * mag) <= 8)
				return nice[i] * mag;
}

static void
svg_item(FILE *out, const struct timeline *tl, const struct item *it, int y)
{
	static const char *const fill[] = { [BAR_ACKED] = "#2e8b57", [BAR_KILLED] = "#c0392b",
		[BAR_OPEN] = "#e67e22", [BAR_STALLED] = "#8e44ad" };
	double x = svg_x(tl, it->start), x2 = svg_x(tl, it->end);
	int mid = y + SVG_ROW / 2;

	fputs("<g><title>", out);
	xml_text(out, it->label);
	fprintf(out, " (%lld to %lld ms)</title>", it->start, it->end);
	switch (it->mark) {
	case BAR_ACKED:
	case BAR_KILLED:
	case BAR_OPEN:
	case BAR_STALLED:
		fprintf(out, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"10\" fill=\"%s\"/>",
		    x, mid - 5, x2 - x < 2 ? 2 : x2 - x, fill[it->mark]);
		break;
	case GAP:
	case PENDING:
		fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" "
		    "stroke-width=\"%s\" stroke-dasharray=\"4 3\"/>", x, mid, x2, mid,
		    it->mark == GAP ? "#888" : "#e67e22", it->mark == GAP ? "1" : "2");
		break;
	case PUBLISH:
		fprintf(out, "<circle cx=\"%.1f\" cy=\"%d\" r=\"3.5\" fill=\"#fff\" stroke=\"#555\"/>", x, mid);
		break;
	case COMMIT:
		fprintf(out, "<polygon points=\"%.1f,%d %.1f,%d %.1f,%d %.1f,%d\" fill=\"#1f6fb2\"/>",
		    x, mid - 5, x + 4, mid, x, mid + 5, x - 4, mid);
		break;
	case KILL:
		fprintf(out, "<path d=\"M%.1f %d l8 8 m0 -8 l-8 8\" stroke=\"#c0392b\" stroke-width=\"2.5\"/>",
		    x - 4, mid - 4);
		/* a kill of the run, not the legend's, says so in words too */
		if (strncmp(it->label, "KILL", 4) == 0)
			fprintf(out, "<text x=\"%.1f\" y=\"%d\" font-size=\"9\" fill=\"#c0392b\">KILL</text>",
			    x + 6, mid - 4);
		break;
	case ACK:
		fprintf(out, "<path d=\"M%.1f %d l3 4 l6 -8\" fill=\"none\" stroke=\"#2e8b57\" "
		    "stroke-width=\"2\"/>", x - 3, mid);
		break;
	case CALL:
		fprintf(out, "<rect x=\"%.1f\" y=\"%d\" width=\"7\" height=\"7\" fill=\"#7d3c98\"/>",
		    x - 3.5, mid + 2);
		break;
	case STALL:
		fprintf(out, "<path d=\"M%.1f %d v10 m5 -10 v10\" stroke=\"#8e44ad\" stroke-width=\"2.5\"/>"
		    "<text x=\"%.1f\" y=\"%d\" font-size=\"9\" fill=\"#8e44ad\">STALL</text>",
		    x - 2.5, mid - 5, x + 6, mid - 4);
		break;
	case RELEASE:
		fprintf(out, "<polygon points=\"%.1f,%d %.1f,%d %.1f,%d\" fill=\"#8e44ad\"/>",
		    x - 3, mid - 5, x + 5, mid, x - 3, mid + 5);
		break;
	case LATE:
		fprintf(out, "<rect x=\"%.1f\" y=\"%d\" width=\"7\" height=\"7\" fill=\"#fff\" "
		    "stroke=\"#7d3c98\" stroke-width=\"1.5\"/><text x=\"%.1f\" y=\"%d\" "
		    "font-size=\"9\" fill=\"#7d3c98\">LATE</text>",
		    x - 3.5, mid + 2, x + 6, mid - 4);
		break;
	}
	fputs("</g>\n", out);
}

/* The heading: the rehearsal, its verdict, and whose jobs are drawn. */
static void
svg_heading(FILE *out, const json_t *record, const struct timeline *tl, int height)
{
	const char *rehearsal = str(record, "rehearsal") ? str(record, "rehearsal") : "rehearsal";
	const char *verdict = str(record, "verdict") ? str(record, "verdict") : "no verdict";

	fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	    "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
	    SVG_WIDTH, height, SVG_WIDTH, height);
	fputs("<title>", out);
	xml_text(out, rehearsal);
	fprintf(out, ": %s, the timeline of %s</title>\n", verdict,
	    tl->shown < tl->jobs ? "the scenarios' jobs" : "every job");
	fprintf(out, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", SVG_WIDTH, height);
	fputs("<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", out);
	xml_text(out, rehearsal);
	fprintf(out, ": %s", verdict);
	if (tl->shown < tl->jobs)
		fprintf(out, " (the jobs of the scenarios, %zu of %zu)", tl->shown, tl->jobs);
	fputs("</text>\n", out);
}

/* The legend: each mark as the drawing shows it, and its name. */
static void
svg_legend(FILE *out)
{
	static const struct { enum mark mark; const char *name; } legend[] = {
		{ BAR_ACKED, "attempt, acked" }, { BAR_KILLED, "attempt, killed" },
		{ BAR_OPEN, "attempt, not acked" }, { GAP, "visibility gap" },
		{ PENDING, "pending" }, { PUBLISH, "publish" },
		{ COMMIT, "commit" }, { KILL, "kill" }, { ACK, "ack" }, { CALL, "external call" },
	};
	size_t i;
	int x;

	for (i = 0, x = 10; i < sizeof(legend) / sizeof(legend[0]); i++) {
		struct item it = { .mark = legend[i].mark, .start = 0, .end = 0 };
		struct timeline one = { .span = 1 };

		snprintf(it.label, sizeof(it.label), "%s", legend[i].name);
		/* draw the legend's mark at x: an axis of one ms, x at 0 */
		fprintf(out, "<g transform=\"translate(%d 24)\">", x - SVG_LABELS + 8);
		if (it.mark == GAP || it.mark == PENDING)
			it.end = 1, one.span = (SVG_WIDTH - SVG_LABELS - SVG_RIGHT) / 18;
		if (it.mark <= BAR_OPEN)
			it.end = 1, one.span = (SVG_WIDTH - SVG_LABELS - SVG_RIGHT) / 14;
		svg_item(out, &one, &it, 0);
		fprintf(out, "</g><text x=\"%d\" y=\"39\">%s</text>\n", x + 30, legend[i].name);
		x += 36 + 6 * (int)strlen(legend[i].name);
	}
}

/* The time axis, ticked over rows rows, then each section and its lanes. */
static void
svg_sections(FILE *out, const struct timeline *tl, size_t rows)
{
	long long step = tick_step(tl->span > 0 ? tl->span : 1), t;
	char d[32];
	size_t i, j, k;
	int y;

	for (t = 0; t <= tl->span; t += step) {
		idem_timeline_duration(t, d, sizeof(d));
		fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>"
		    "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
		    svg_x(tl, t), SVG_TOP - 6, svg_x(tl, t), SVG_TOP + (int)rows * SVG_ROW,
		    svg_x(tl, t), SVG_TOP - 9, d);
	}
	y = SVG_TOP;
	for (i = 0; i < tl->n; i++) {
		const struct section *sec = &tl->sections[i];

		fprintf(out, "<line x1=\"0\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#bbb\"/>\n"
		    "<text x=\"6\" y=\"%d\" font-weight=\"bold\">", y, SVG_WIDTH, y, y + 15);
		xml_text(out, sec->name);
		fputs("</text>\n", out);
		y += SVG_ROW;
		for (j = 0; j < sec->n; j++, y += SVG_ROW) {
			fprintf(out, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#555\">",
			    SVG_LABELS - 12, y + 15);
			xml_text(out, sec->lanes[j].name);
			fputs("</text>\n", out);
			for (k = 0; k < sec->lanes[j].n; k++)
				svg_item(out, tl, &sec->lanes[j].items[k], y);
		}
	}
}

/* The histogram of recovery times, from top down, bars to scale. */
static void
svg_histogram(FILE *out, const json_t *hist, int top)
{
	long long most = 1;
	json_t *bin;
	size_t i;

	json_array_foreach(hist, i, bin)
		if (json_integer_value(json_object_get(bin, "kills")) > most)
			most = json_integer_value(json_object_get(bin, "kills"));
	fprintf(out, "<text x=\"10\" y=\"%d\" font-weight=\"bold\">recovery time, kill to clean "
	    "retry ack: kills per range</text>\n", top + 10);
	json_array_foreach(hist, i, bin) {
		long long n = json_integer_value(json_object_get(bin, "kills"));
		int by = top + 22 + (int)i * 18;

		fprintf(out, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", SVG_LABELS - 6, by + 11);
		xml_text(out, str(bin, "range"));
		fprintf(out, "</text><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"12\" fill=\"#1f6fb2\"/>"
		    "<text x=\"%.1f\" y=\"%d\">%lld</text>\n", SVG_LABELS, by,
		    (double)n * (SVG_WIDTH - SVG_LABELS - SVG_RIGHT - 40) / (double)most,
		    SVG_LABELS + 4 + (double)n * (SVG_WIDTH - SVG_LABELS - SVG_RIGHT - 40) / (double)most,
		    by + 11, n);
	}
}

char *
idem_timeline_svg(const json_t *record)
{
	struct timeline tl;
	json_t *hist = idem_timeline_histogram(record);
	char *buf = NULL;
	size_t len = 0, i, rows = 0;
	int height, hist_top;
	FILE *out;

	build(&tl, record);
	/* a row for each section's name, and one for each of its lanes */
	for (i = 0; i < tl.n; i++)
		rows += tl.sections[i].n + 1;
	hist_top = SVG_TOP + (int)rows * SVG_ROW + 30;
	height = hist_top + (json_array_size(hist) > 0 ? 40 + 18 * (int)json_array_size(hist) : 0) + 10;
	if ((out = open_memstream(&buf, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	svg_heading(out, record, &tl, height);
	svg_legend(out);
	svg_sections(out, &tl, rows);
	if (json_array_size(hist) > 0)
		svg_histogram(out, hist, hist_top);
	fputs("</svg>\n", out);
	if (fclose(out) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	json_decref(hist);
	timeline_free(&tl);
	return buf;
}

json_t *
idem_timeline_histogram(const json_t *record)
{
	json_t *out = json_array(), *k;
	long long *ms = NULL, lo = 0, hi = 0, width, most = 0, counts[8] = { 0 };
	size_t n = 0, i, njobs = 0;
	int bins, b;

	njobs = (size_t)json_integer_value(json_object_get(record, "jobs"));
	if (njobs <= IDEM_TIMELINE_VOLUME && json_array_size(json_object_get(record, "evidence")) <=
	    IDEM_TIMELINE_VOLUME)
		return out;
	json_array_foreach(json_object_get(record, "kill_points"), i, k) {
		json_t *v = json_object_get(k, "recovery_ms");

		if (!json_is_integer(v))
			continue;
		ms = idem_ereallocarray(ms, n + 1, sizeof(*ms));
		ms[n] = json_integer_value(v);
		if (n == 0 || ms[n] < lo)
			lo = ms[n];
		if (n == 0 || ms[n] > hi)
			hi = ms[n];
		n++;
	}
	/* eight ranges at most, no more than there are recovery times */
	bins = n == 0 ? 0 : hi == lo ? 1 : n < 8 ? (int)n : 8;
	width = bins > 1 ? (hi - lo) / bins + 1 : 1;
	for (i = 0; i < n; i++) {
		b = bins > 1 ? (int)((ms[i] - lo) / width) : 0;
		if (++counts[b] > most)
			most = counts[b];
	}
	for (b = 0; b < bins; b++) {
		char from[32], to[32], range[80], bar[3 * 30 + 1] = "";
		long long len = counts[b] == 0 ? 0 : counts[b] * 30 / most, c;

		idem_timeline_duration(lo + b * width, from, sizeof(from));
		idem_timeline_duration(bins > 1 ? lo + (b + 1) * width - 1 : hi, to, sizeof(to));
		if (bins > 1)
			snprintf(range, sizeof(range), "%s to %s", from, to);
		else
			snprintf(range, sizeof(range), "%s", from);
		if (counts[b] > 0 && len == 0)
			len = 1;
		for (c = 0; c < len; c++)
			strcat(bar, "\xe2\x96\x88");
		json_array_append_new(out, json_pack("{s:s,s:I,s:s}", "range", range, "kills",
		    (json_int_t)counts[b], "bar", bar));
	}
	free(ms);
	return out;
}
