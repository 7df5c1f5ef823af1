/* timeline.h: a record's jobs on one time axis, in milliseconds from the
 * run's start, as a Mermaid gantt chart for the handoff and as an SVG
 * drawing beside it (mkrecord(1), THE HANDOFF) */
#ifndef IDEM_TIMELINE_H
#define IDEM_TIMELINE_H

#include <stddef.h>

#include <jansson.h>

/* Runs of more jobs than this are volume runs: their timeline shows the
 * jobs of the scenarios, at most IDEM_TIMELINE_MAX_JOBS of them, and a
 * histogram of recovery times instead of every job. */
#define IDEM_TIMELINE_VOLUME 50
#define IDEM_TIMELINE_MAX_JOBS 30

/* A duration in human units, truncated: "850 ms" below 10 s, "12.3 s"
 * below 2 min, "2 min 30 s" below 2 h, "26 h" below 2 days, "3 d 4 h". */
void idem_timeline_duration(long long ms, char *out, size_t size);

/* An RFC 3339 UTC time as idem-tsv(5) writes it ("2026-11-29T14:28:31.432631Z",
 * fewer fraction digits allowed) in microseconds since the epoch; -1 when
 * the text is not one. */
long long idem_timeline_parse_time(const char *text);

/* The run's start: the earliest time of the record's evidence, kill
 * points, calls and measure windows, in microseconds; -1 when it has none. */
long long idem_timeline_start(const json_t *record);

/* A time of the record as milliseconds from start, rounded; -1 for NULL
 * or what is not a time. */
long long idem_timeline_offset_ms(const char *time, long long start);

/* The timeline of a record (idem-record(5)): a Mermaid gantt chart (the
 * lines between the fences, without them), and a complete SVG document.
 * Caller frees. */
char *idem_timeline_mermaid(const json_t *record);
char *idem_timeline_svg(const json_t *record);

/* The histogram of a volume run's recovery times, for the handoff: a list
 * of {range, kills, bar} in ranges of equal width, eight at most and no
 * more than there are recovery times; empty for a run that is not a
 * volume run or had no recovery. Caller decrefs. */
json_t *idem_timeline_histogram(const json_t *record);

#endif
