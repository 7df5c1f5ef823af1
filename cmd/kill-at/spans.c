/* spans.c: the workers' spans in a run (spans.h) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "run.h"
#include "receiver.h"
#include "spans.h"
#include "text.h"
#include "tsv.h"

#define BATCH_DELAY_MS 50		/* OTEL_BSP_SCHEDULE_DELAY given to the workers */
#define MAX_IDS 65536			/* span ids kept of a killed attempt */
#define SPAN_FIELDS 17			/* the kind and 16 */

static struct receiver *receiver;
static const char *env_mode = "off";	/* set user off */
static char *user_endpoint;
static long long batch_delay_ms = BATCH_DELAY_MS;

/* An attempt's window on a process: from its consumption to its ack, or
 * to the process's next consumption. */
struct window {
	pid_t pid;
	long long from_us, to_us, attempt;
	size_t job;			/* its job id, escaped, in jobs */
};

/* A killed attempt: the spans received of it, the parents they name. */
struct lost {
	const struct kill_point *kp;
	size_t window;
	char (*received)[17], (*parents)[17];
	size_t nreceived, nparents;
};

void
spans_start(int off)
{
	const char *user = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
	const char *delay = getenv("OTEL_BSP_SCHEDULE_DELAY");
	struct idem_error err;
	char *end;

	if (user == NULL || *user == '\0')
		user = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
	if (off)
		return;
	if (user != NULL && *user != '\0') {
		env_mode = "user";
		user_endpoint = idem_estrdup(user);
		idem_warn("the environment names an OTLP endpoint (%s): the workers' spans go there, "
		    "no span receiver", user);
		return;
	}
	if (delay != NULL && *delay != '\0') {
		batch_delay_ms = strtoll(delay, &end, 10);
		if (*end != '\0' || batch_delay_ms < 0)
			batch_delay_ms = BATCH_DELAY_MS;
	}
	/* the spans' times are the worker's clock's, as its SDK wrote them: the
	 * worker and the sandbox share a host, and a skew measured there is
	 * noise */
	if ((receiver = receiver_start(0, &err)) == NULL)
		idem_die_error(&err);
	env_mode = "set";
}

void
spans_setenv(void)
{
	char value[32];

	if (receiver == NULL)
		return;
	setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver_endpoint(receiver), 1);
	if (getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") == NULL &&
	    getenv("OTEL_EXPORTER_OTLP_PROTOCOL") == NULL)
		setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", 1);
	snprintf(value, sizeof(value), "%lld", batch_delay_ms);
	setenv("OTEL_BSP_SCHEDULE_DELAY", value, 1);
	setenv("OTEL_TRACES_EXPORTER", "otlp", 0);
	/* the receiver takes traces only: an SDK's metrics and logs would go
	 * to its default endpoint, whatever listens there, and its shutdown
	 * wait on their retries */
	setenv("OTEL_METRICS_EXPORTER", "none", 0);
	setenv("OTEL_LOGS_EXPORTER", "none", 0);
}

void
spans_workers(const pid_t *groups, int n)
{
	if (receiver != NULL)
		receiver_workers(receiver, groups, n);
}

void
spans_before_kill(pid_t pid)
{
	long long start = idem_now_us(), quiet_us = 2 * batch_delay_ms * 1000, last, now;

	/* a run whose workers send no spans waits for none */
	if (receiver == NULL || pid <= 0 || !receiver_heard_any(receiver))
		return;
	for (;;) {
		now = idem_now_us();
		last = receiver_heard_us(receiver, pid);
		if (last < start)
			last = start;
		if (now - last >= quiet_us || now - start >= SPANS_QUIET_MAX_US)
			return;
		usleep(5000);
	}
}

/* A time of the stream in microseconds; -1 for \N or another. */
static long long
parse_time(const char *s)
{
	struct tm tm;
	int us;

	memset(&tm, 0, sizeof(tm));
	if (strlen(s) != 27 || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ", &tm.tm_year, &tm.tm_mon,
	    &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &us) != 7)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (long long)timegm(&tm) * 1000000 + us;
}

/* Splits a line of escaped fields at its tabs, in place: their number. */
static size_t
split(char *line, char **f, size_t max)
{
	size_t n = 0;

	while (n < max) {
		f[n++] = line;
		if ((line = strchr(line, '\t')) == NULL)
			break;
		*line++ = '\0';
	}
	return n;
}

static int
by_pid_then_time(const void *a, const void *b)
{
	const struct window *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return (x->from_us > y->from_us) - (x->from_us < y->from_us);
}

/* The attempt rows of out from offset from, as windows sorted by process
 * and time; their job ids in *jobs. */
static struct window *
read_windows(FILE *out, long from, size_t *n, char **jobs)
{
	struct window *w = NULL;
	size_t cap = 0, jobs_len = 0, i, line_cap = 0;
	char *line = NULL, *f[12];
	long long acked;

	*n = 0;
	*jobs = NULL;
	if (fseek(out, from, SEEK_SET) != 0)
		return NULL;
	while (getline(&line, &line_cap, out) > 0) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "attempt\t", 8) != 0 || split(line, f, 12) < 8 ||
		    strcmp(f[ATTEMPT_PID], "\\N") == 0)
			continue;
		if (*n == cap)
			w = idem_ereallocarray(w, cap = cap ? 2 * cap : 64, sizeof(*w));
		acked = parse_time(f[ATTEMPT_ACKED_AT]);
		w[*n] = (struct window){ (pid_t)atol(f[ATTEMPT_PID]), parse_time(f[ATTEMPT_CONSUMED_AT]),
		    acked < 0 ? -1 : acked, atoll(f[ATTEMPT_ATTEMPT]), jobs_len };
		*jobs = idem_erealloc(*jobs, jobs_len + strlen(f[ATTEMPT_JOB_ID]) + 1);
		strcpy(*jobs + jobs_len, f[ATTEMPT_JOB_ID]);
		jobs_len += strlen(f[ATTEMPT_JOB_ID]) + 1;
		++*n;
	}
	free(line);
	if (*n > 1)
		qsort(w, *n, sizeof(*w), by_pid_then_time);
	for (i = 0; i < *n; i++)
		if (i + 1 < *n && w[i + 1].pid == w[i].pid &&
		    (w[i].to_us < 0 || w[i + 1].from_us < w[i].to_us))
			w[i].to_us = w[i + 1].from_us;
	return w;
}

/* The window of process pid holding time at, or SIZE_MAX. A time in
 * whole milliseconds is from a clock no finer (OpenTelemetry JS writes
 * its spans' times so) and stands for any instant of that millisecond: it
 * is in the last window that millisecond meets. */
static size_t
window_of(const struct window *w, size_t n, pid_t pid, long long at)
{
	size_t lo = 0, hi = n, mid;
	long long latest = at >= 0 && at % 1000 == 0 ? at + 999 : at;

	/* the first window after (pid, at) */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (w[mid].pid < pid || (w[mid].pid == pid && w[mid].from_us <= latest))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || w[lo - 1].pid != pid || (w[lo - 1].to_us >= 0 && at > w[lo - 1].to_us))
		return SIZE_MAX;
	return lo - 1;
}

static void
add_id(char (**ids)[17], size_t *n, const char *id)
{
	if (*n >= MAX_IDS || strlen(id) != 16)
		return;
	*ids = idem_ereallocarray(*ids, *n + 1, sizeof(**ids));
	memcpy((*ids)[(*n)++], id, 17);
}

/* The killed attempts, each with its window. */
static struct lost *
killed_attempts(const struct window *w, size_t nw, const char *jobs, size_t *n)
{
	struct lost *lost = idem_ereallocarray(NULL, run.plan.nkills + 1, sizeof(*lost));
	size_t i, j;
	char *job;

	*n = 0;
	for (i = 0; i < run.plan.nkills; i++) {
		const struct kill_point *kp = &run.kills[i];

		if (!kp->fired || kp->cannot || kp->pid <= 0)
			continue;
		job = idem_tsv_escape(kp->plan->job_id);
		lost[*n] = (struct lost){ .kp = kp, .window = SIZE_MAX };
		for (j = 0; j < nw; j++)
			if (w[j].pid == kp->pid && w[j].attempt == kp->plan->attempt &&
			    strcmp(jobs + w[j].job, job) == 0)
				lost[*n].window = j;
		free(job);
		++*n;
	}
	return lost;
}

/* One span row of the receiver's, with its job and attempt. */
static int
write_span(FILE *out, char **f, const struct window *w, size_t nw, const char *jobs,
	   struct lost *lost, size_t nlost)
{
	size_t at = strcmp(f[9], "\\N") == 0 ? SIZE_MAX :
	    window_of(w, nw, (pid_t)atol(f[9]), parse_time(f[6])), i;
	char attempt[24];

	snprintf(attempt, sizeof(attempt), "%lld", at == SIZE_MAX ? 0 : w[at].attempt);
	for (i = 0; i < nlost && at != SIZE_MAX; i++)
		if (lost[i].window == at) {
			add_id(&lost[i].received, &lost[i].nreceived, f[2]);
			if (strcmp(f[3], "\\N") != 0)
				add_id(&lost[i].parents, &lost[i].nparents, f[3]);
		}
	for (i = 0; i < SPAN_FIELDS; i++)
		if (fputs(i == 11 ? (at == SIZE_MAX ? "\\N" : jobs + w[at].job) :
		    i == 12 ? (at == SIZE_MAX ? "\\N" : attempt) : f[i], out) == EOF ||
		    putc(i + 1 < SPAN_FIELDS ? '\t' : '\n', out) == EOF)
			return -1;
	return 0;
}

static int
by_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The span_lost row of a killed attempt: the parents never received. */
static int
write_lost(FILE *out, struct lost *l)
{
	json_t *missing = json_array();
	char attempt[24], pid[24], at[32], *text;
	const char *f[5];
	size_t i;
	int rc;

	/* qsort and bsearch take no null array, even of nothing */
	if (l->nreceived > 1)
		qsort(l->received, l->nreceived, sizeof(*l->received), by_id);
	if (l->nparents > 1)
		qsort(l->parents, l->nparents, sizeof(*l->parents), by_id);
	for (i = 0; i < l->nparents; i++)
		if ((i == 0 || strcmp(l->parents[i], l->parents[i - 1]) != 0) &&
		    (l->nreceived == 0 || bsearch(l->parents[i], l->received, l->nreceived,
		    sizeof(*l->received), by_id) == NULL))
			json_array_append_new(missing, json_string(l->parents[i]));
	text = json_dumps(missing, JSON_COMPACT);
	json_decref(missing);
	snprintf(attempt, sizeof(attempt), "%lld", l->kp->plan->attempt);
	snprintf(pid, sizeof(pid), "%d", (int)l->kp->pid);
	idem_format_time(l->kp->killed_at, at);
	f[0] = l->kp->plan->job_id;
	f[1] = attempt;
	f[2] = pid;
	f[3] = text;
	f[4] = at;
	rc = idem_tsv_write_row(out, "span_lost", f, 5);
	free(text);
	free(l->received);
	free(l->parents);
	return rc;
}

/* The receiver's span rows, with their attempts, and the span_lost rows. */
static int
copy_spans(FILE *out, FILE *rows, long attempts_from)
{
	struct window *w;
	struct lost *lost;
	size_t nw, nlost, line_cap = 0, i;
	char *jobs, *line = NULL, *f[SPAN_FIELDS];
	int rc = 0;

	w = read_windows(out, attempts_from, &nw, &jobs);
	lost = killed_attempts(w, nw, jobs, &nlost);
	if (fseek(out, 0, SEEK_END) != 0)
		rc = -1;
	while (rc == 0 && getline(&line, &line_cap, rows) > 0) {
		line[strcspn(line, "\n")] = '\0';
		if (split(line, f, SPAN_FIELDS) == SPAN_FIELDS)
			rc = write_span(out, f, w, nw, jobs, lost, nlost);
	}
	if (ferror(rows))
		rc = -1;
	for (i = 0; i < nlost; i++)
		if (write_lost(out, &lost[i]) < 0)
			rc = -1;
	free(line);
	free(lost);
	free(w);
	free(jobs);
	return rc;
}

int
spans_write(FILE *out, long attempts_from)
{
	struct receiver_counts counts = { 0, 0, 0, NULL, 0 };
	char requests[24], spans[24], dropped[24];
	const char *f[6];
	FILE *rows;
	int rc = 0;

	if (receiver != NULL) {
		rows = receiver_stop(receiver, &counts);
		if (counts.write_failed || copy_spans(out, rows, attempts_from) < 0)
			rc = -1;
	}
	snprintf(requests, sizeof(requests), "%lld", counts.requests);
	snprintf(spans, sizeof(spans), "%lld", counts.spans);
	snprintf(dropped, sizeof(dropped), "%lld", counts.dropped_attributes);
	f[0] = receiver ? receiver_endpoint(receiver) : user_endpoint ? user_endpoint : "";
	f[1] = requests;
	f[2] = spans;
	f[3] = counts.refused ? counts.refused : "{}";
	f[4] = dropped;
	f[5] = env_mode;
	if (idem_tsv_write_row(out, "receiver", f, 6) < 0)
		rc = -1;
	free(counts.refused);
	return rc;
}

void
spans_free(void)
{
	receiver_free(receiver);
	receiver = NULL;
	free(user_endpoint);
	user_endpoint = NULL;
}
