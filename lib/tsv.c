#include <sys/stat.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "json.h"
#include "tsv.h"
#include "text.h"

#define MAX_FIELDS 26
/* bytes of a value quoted in a message */
#define QUOTE_MAX 40

/* The type of a field, in idem-tsv(5)'s words. */
enum type {
	TEXT,		/* any text */
	NAME,		/* text, not empty */
	FILE_NAME,	/* a name that stands in a file name */
	COUNT,		/* whole number 0 .. LLONG_MAX */
	POSITIVE,	/* whole number 1 .. LLONG_MAX */
	INTEGER,	/* whole number LLONG_MIN .. LLONG_MAX */
	DECIMAL,	/* digits, maybe a point and digits */
	TIME,		/* 2026-11-29T13:48:32.247642Z */
	SHA256,		/* 64 lowercase hex digits */
	TRACE_ID,	/* 32 lowercase hex digits */
	SPAN_ID,	/* 16 lowercase hex digits */
	JSON_OBJECT,
	JSON_STRINGS,	/* a JSON array of strings */
	JSON_NAMES,	/* a JSON array of one or more strings */
	JSON_ARRAY,	/* any JSON array */
	ENUM,		/* one of the words in values */
	KIND_NAME	/* a queue's kind: lowercase letters, digits and -, not first */
};

struct field {
	const char *name;
	unsigned char type;
	unsigned char nullable;	/* \N allowed */
	const char *values;	/* ENUM: the words, separated by spaces */
	unsigned char added;	/* a trailing field added since 1.0: rows may end before it */
};

#define F(name, type) { name, type, 0, NULL, 0 }
#define N(name, type) { name, type, 1, NULL, 0 }
#define E(name, values) { name, ENUM, 0, values, 0 }
/* fields added since 1.0 (in the minor version of their name), at the end
 * of their kind: a row written before lacks them */
#define N11(name, type) { name, type, 1, NULL, 1 }
#define E11(name, values) { name, ENUM, 1, values, 1 }
#define N12(name, type) { name, type, 1, NULL, 1 }
#define N13(name, type) { name, type, 1, NULL, 1 }
#define N14(name, type) { name, type, 1, NULL, 1 }
#define E14(name, values) { name, ENUM, 1, values, 1 }
#define E16(name, values) { name, ENUM, 1, values, 1 }
#define N16(name, type) { name, type, 1, NULL, 1 }
#define N17(name, type) { name, type, 1, NULL, 1 }
#define N18(name, type) { name, type, 1, NULL, 1 }
#define N110(name, type) { name, type, 1, NULL, 1 }

static const struct {
	const char *name;
	struct field fields[MAX_FIELDS];
} kinds[IDEM_KIND_COUNT] = {
	[IDEM_KIND_SEED] = { "seed", { F("path", NAME), F("sha256", SHA256),
		F("rehearsal", FILE_NAME), F("job_type", NAME), F("queue", NAME),
		N("database", TEXT), F("visibility_timeout_ms", POSITIVE),
		F("max_attempts", POSITIVE), N("sandbox_account", TEXT),
		N("effect_name", TEXT), F("effect_table", NAME), F("key_columns", JSON_NAMES),
		E("key_scope", "business job"), N("duplicate_acceptor", TEXT),
		N("reconciliation_owner", TEXT), N("worker_image", TEXT),
		N("worker_version", TEXT), N("worker_command", TEXT),
		F("payload_schema", JSON_OBJECT), F("cannot_reproduce", JSON_STRINGS),
		N12("queue_kind", KIND_NAME), E16("draft", "true false"),
		N16("best_effort", TEXT), N110("adapter", NAME), N110("adapter_sha256", SHA256) } },
	[IDEM_KIND_EXPECT] = { "expect", { F("effects", COUNT), F("duplicates", COUNT),
		F("missing", COUNT), F("pending", COUNT), N13("external", COUNT),
		E14("verdict", "pass fail") } },
	[IDEM_KIND_SCENARIO] = { "scenario", { F("name", NAME),
		E("fault", "duplicate-publish kill race same-key vendor-error vendor-timeout stall "
		    "vendor-lost-reply vendor-late-reply vendor-forget-keys"),
		N("step", NAME),
		N("attempt", POSITIVE), F("duplicates", COUNT), F("within_ms", COUNT),
		N17("until", NAME), N18("vendor_ms", COUNT) } },
	[IDEM_KIND_JOB] = { "job", { F("job_id", NAME), F("business_key", TEXT),
		F("payload", JSON_OBJECT), F("payload_sha256", SHA256), N("scenario", NAME) } },
	[IDEM_KIND_PUBLISH] = { "publish", { F("job_id", NAME), F("copy", COUNT),
		F("msg_id", NAME), F("published_at", TIME),
		E("status", "published existing") } },
	[IDEM_KIND_STEP] = { "step", { F("at", TIME), F("worker", INTEGER), F("pid", COUNT),
		F("name", TEXT), F("job_id", TEXT), F("attempt", INTEGER),
		E("action", "go hold release kill"), E11("observed", "database socket vendor") } },
	[IDEM_KIND_KILL] = { "kill", { F("scenario", NAME), F("job_id", NAME),
		F("attempt", POSITIVE), F("step", NAME), F("pid", COUNT), F("killed_at", TIME),
		E11("observed", "database socket vendor") } },
	[IDEM_KIND_ATTEMPT] = { "attempt", { F("job_id", NAME), F("msg_id", NAME),
		F("attempt", POSITIVE), N("pid", COUNT), F("consumed_at", TIME),
		N("committed_at", TIME), N("acked_at", TIME), N("rows_written", COUNT),
		N("branch", TEXT), N11("written_at", TIME), N11("rows_updated", COUNT) } },
	[IDEM_KIND_RECOVER] = { "recover", { F("job_id", NAME), F("msg_id", NAME),
		F("killed_at", TIME), N("acked_at", TIME), N("recovery_ms", COUNT) } },
	[IDEM_KIND_LOG] = { "log", { F("at", TIME), F("worker", INTEGER), F("pid", COUNT),
		F("line", TEXT) } },
	[IDEM_KIND_QUERY] = { "query", { E("phase", "before after"), F("name", NAME),
		F("sql", TEXT) } },
	[IDEM_KIND_COUNT_ROW] = { "count", { E("phase", "before after"),
		E("scope", "key unexpected total external external-unknown"), F("key", TEXT),
		F("expected", COUNT),
		F("observed", COUNT) } },
	[IDEM_KIND_GUARD] = { "guard", { E("kind", "constraint index none"), N("name", TEXT),
		F("definition", TEXT), N("flags", TEXT), N14("table", NAME) } },
	[IDEM_KIND_PROBE] = { "probe", { E("result", "enforced not-enforced skipped inconclusive"),
		N("sqlstate", TEXT), F("message", TEXT), F("sql", TEXT), N14("table", NAME) } },
	[IDEM_KIND_MEASURE] = { "measure", { F("name", NAME), N("value", DECIMAL),
		N("numerator", COUNT), F("denominator", COUNT), F("unit", TEXT),
		N("window_start", TIME), N("window_end", TIME) } },
	[IDEM_KIND_DIGEST] = { "digest", { E("phase", "before after"), F("sha256", SHA256),
		F("rows", COUNT) } },
	[IDEM_KIND_QUEUE] = { "queue", { F("kind", KIND_NAME), F("name", NAME),
		N("version", TEXT) } },
	[IDEM_KIND_EXTERNAL] = { "external", { F("name", NAME), F("key_fields", JSON_NAMES),
		E("honours_idempotency_key", "true false"), N("pending_table", NAME),
		N("pending_owner", NAME), N18("pending_key", JSON_NAMES), N18("pending_state", NAME),
		N18("pending_settled", JSON_STRINGS) } },
	[IDEM_KIND_DECLARED_GUARD] = { "declared_guard", { F("table", NAME),
		F("key_columns", JSON_NAMES) } },
	[IDEM_KIND_WORKER] = { "worker", { F("argv", JSON_STRINGS), N("executable", TEXT),
		N("executable_sha256", SHA256), N("script", TEXT), N("script_sha256", SHA256) } },
	[IDEM_KIND_STALL] = { "stall", { F("scenario", NAME), F("job_id", NAME),
		F("attempt", POSITIVE), F("step", NAME), F("pid", COUNT), F("stalled_at", TIME),
		N("released_at", TIME), E("release", "acked until blocked bound"),
		E("observed", "database socket vendor") } },
	[IDEM_KIND_LEASE] = { "lease", { F("at", TIME), F("msg_id", NAME), F("job_id", NAME),
		F("attempt", POSITIVE), E("why", "kill stall exit bound") } },
	[IDEM_KIND_MISSED] = { "missed", { E("what", "kill race stall"), F("scenario", NAME),
		F("job_id", TEXT), N("attempt", POSITIVE), F("step", NAME) } },
	[IDEM_KIND_BASELINE] = { "baseline", { E("result", "none passed failed"), F("jobs", COUNT),
		F("messages", COUNT), F("unacked", COUNT), F("expected", COUNT),
		F("observed", COUNT), F("duplicates", COUNT), F("missing", COUNT) } },
	[IDEM_KIND_GRANT] = { "grant", { F("role", NAME), E("phase", "setup run"),
		E("type", "attribute member database schema table view sequence function"),
		F("object", TEXT), F("privilege", NAME), E("listed", "yes no") } },
	[IDEM_KIND_DENIED] = { "denied", { F("role", NAME), F("object", TEXT),
		F("privilege", NAME), E("held", "yes no") } },
	[IDEM_KIND_DATABASE] = { "database", { F("sandbox_id", NAME), F("dbname", NAME),
		F("server_version", NAME), F("server_version_num", COUNT), F("isolation", NAME) } },
	[IDEM_KIND_CALL] = { "call", { F("at", TIME), F("worker", INTEGER), F("pid", COUNT),
		F("method", NAME), F("path", TEXT), N("idempotency_key", TEXT),
		F("body_sha256", SHA256), N("business_key", TEXT), F("status", COUNT),
		E("answer", "ok replayed error timeout killed lost late"), E("effect", "yes no"),
		N("response_id", TEXT), N18("id", POSITIVE), N18("answered_at", TIME) } },
	[IDEM_KIND_FORGOT] = { "forgot", { F("at", TIME), F("business_key", TEXT),
		F("idempotency_key", TEXT), F("first_call", POSITIVE), F("window_ms", COUNT) } },
	[IDEM_KIND_REKEYED] = { "rekeyed", { F("business_key", TEXT), F("keys", JSON_ARRAY),
		F("calls", JSON_ARRAY), F("effects", COUNT) } },
	[IDEM_KIND_PENDING_CALL] = { "pending_call", { F("business_key", TEXT),
		E("killed", "yes no"), F("rows", COUNT), N("owner", TEXT),
		E("result", "owned missing wrong-owner open") } },
	[IDEM_KIND_SPAN] = { "span", { F("trace_id", TRACE_ID), F("span_id", SPAN_ID),
		N("parent_span_id", SPAN_ID), F("name", TEXT), E("kind", "0 1 2 3 4 5"),
		F("start", TIME), F("end", TIME), E("status", "unset ok error"), N("pid", COUNT),
		F("worker", INTEGER), N("job_id", TEXT), N("attempt", POSITIVE), N("scope", TEXT),
		F("attributes", JSON_OBJECT), F("events", JSON_ARRAY),
		E("encoding", "json protobuf") } },
	[IDEM_KIND_SPAN_LOST] = { "span_lost", { F("job_id", NAME), F("attempt", POSITIVE),
		F("pid", COUNT), F("parents", JSON_STRINGS), F("killed_at", TIME) } },
	[IDEM_KIND_RECEIVER] = { "receiver", { F("endpoint", TEXT), F("requests", COUNT),
		F("spans", COUNT), F("refused", JSON_OBJECT), F("dropped_attributes", COUNT),
		E("env", "set user off") } },
};

#undef F
#undef N
#undef E
#undef N11
#undef E11
#undef N12
#undef N13
#undef N14
#undef E14
#undef E16
#undef N16
#undef N17
#undef N18
#undef N110

const char *
idem_kind_name(enum idem_kind kind)
{
	return kind >= 0 && kind < IDEM_KIND_COUNT ? kinds[kind].name : NULL;
}

size_t
idem_kind_nfields(enum idem_kind kind)
{
	size_t n = 0;

	if (kind < 0 || kind >= IDEM_KIND_COUNT)
		return 0;
	while (n < MAX_FIELDS && kinds[kind].fields[n].name != NULL)
		n++;
	return n;
}

const char *
idem_kind_field_name(enum idem_kind kind, size_t field)
{
	if (field == 0 || field > idem_kind_nfields(kind))
		return "kind";
	return kinds[kind].fields[field - 1].name;
}

/* A value for a message: escaped as in the stream, so it stays on one
 * line, and cut after QUOTE_MAX bytes at a character boundary. */
static const char *
quote(const char *v, size_t len, char *out, size_t size)
{
	size_t o = 0, i;

	for (i = 0; i < len && o + 8 < size; i++) {
		const char *esc = NULL;

		if (o >= QUOTE_MAX && ((unsigned char)v[i] & 0xc0) != 0x80) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		switch (v[i]) {
		case '\\': esc = "\\\\"; break;
		case '\t': esc = "\\t"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '"': esc = "\\\""; break;
		}
		if (esc != NULL) {
			memcpy(out + o, esc, 2);
			o += 2;
		} else if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) {
			/* no control character reaches a terminal as it is */
			o += (size_t)snprintf(out + o, size - o, "\\x%02x", (unsigned char)v[i]);
		} else {
			out[o++] = v[i];
		}
	}
	out[o] = '\0';
	return out;
}

/*
 * A whole number in its one spelling: digits, a leading - where sign is
 * allowed, no leading zeros, no -0. 0 when it is one and fits, -1 when it
 * is not one, -2 when it is out of range.
 */
static int
parse_whole(const char *s, size_t len, int sign, long long *out)
{
	unsigned long long v = 0, limit = LLONG_MAX;
	size_t i = 0;
	int negative = sign && len > 0 && s[0] == '-';

	if (negative) {
		i = 1;
		limit = (unsigned long long)LLONG_MAX + 1;
	}
	if (i == len || (s[i] == '0' && (len - i > 1 || negative)))
		return -1;
	for (; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (v > (limit - d) / 10) {
			/* the rest must still be digits to call it out of range */
			while (++i < len)
				if (s[i] < '0' || s[i] > '9')
					return -1;
			return -2;
		}
		v = v * 10 + d;
	}
	*out = negative ? (v == limit ? LLONG_MIN : -(long long)v) : (long long)v;
	return 0;
}

static int
digits(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return n > 0;
}

static int
number_at(const char *s, size_t n)
{
	int v = 0;
	size_t i;

	for (i = 0; i < n; i++)
		v = v * 10 + (s[i] - '0');
	return v;
}

/* The form idem_format_time writes, a real date and time of day. */
static int
valid_time(const char *s, size_t len)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int year, month, day;

	if (len != 27 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
	    s[16] != ':' || s[19] != '.' || s[26] != 'Z' || !digits(s, 4) ||
	    !digits(s + 5, 2) || !digits(s + 8, 2) || !digits(s + 11, 2) ||
	    !digits(s + 14, 2) || !digits(s + 17, 2) || !digits(s + 20, 6))
		return 0;
	year = number_at(s, 4);
	month = number_at(s + 5, 2);
	day = number_at(s + 8, 2);
	if (month < 1 || month > 12 || day < 1)
		return 0;
	if (day > days[month - 1] + (month == 2 && year % 4 == 0 &&
	    (year % 100 != 0 || year % 400 == 0)))
		return 0;
	return number_at(s + 11, 2) < 24 && number_at(s + 14, 2) < 60 && number_at(s + 17, 2) < 60;
}

/* len lowercase hex digits, n of them. */
static int
valid_hex(const char *s, size_t len, size_t n)
{
	static const unsigned char lower_hex[256] = {
		['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,
		['7'] = 1, ['8'] = 1, ['9'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1,
		['e'] = 1, ['f'] = 1
	};
	unsigned char all = 1;
	size_t i;

	if (len != n)
		return 0;
	/* no branch per digit: one on every job row */
	for (i = 0; i < n; i++)
		all &= lower_hex[(unsigned char)s[i]];
	return all;
}

static int
valid_decimal(const char *s, size_t len)
{
	const char *point = memchr(s, '.', len);

	if (point == NULL)
		return digits(s, len);
	return digits(s, (size_t)(point - s)) && digits(point + 1, len - (size_t)(point - s) - 1);
}

/* Whether word is one of the space-separated words. */
static int
one_of(const char *words, const char *word, size_t len)
{
	const char *w = words;

	while (*w) {
		size_t n = strcspn(w, " ");

		if (n == len && memcmp(w, word, len) == 0)
			return 1;
		w += n;
		w += *w == ' ';
	}
	return 0;
}

/* NULL when the value fits the field's type, else what is wrong, in buf. */
static int
valid_queue_kind(const char *value, size_t len)
{
	size_t i;

	if (len == 0 || len > 64)
		return 0;
	for (i = 0; i < len; i++)
		if (!((value[i] >= 'a' && value[i] <= 'z') || (value[i] >= '0' && value[i] <= '9') ||
		    (value[i] == '-' && i > 0)))
			return 0;
	return 1;
}

static const char *
check_value(const struct field *f, const char *value, size_t len, char *buf, size_t size)
{
	struct idem_json_shape shape;
	char shown[QUOTE_MAX * 2 + 8];
	const char *what = NULL;
	long long n;
	int rc;

	switch (f->type) {
	case TEXT:
		return NULL;
	case NAME:
		if (len > 0)
			return NULL;
		snprintf(buf, size, "empty");
		return buf;
	case COUNT:
	case POSITIVE:
	case INTEGER:
		rc = parse_whole(value, len, f->type == INTEGER, &n);
		if (rc == 0 && (f->type != POSITIVE || n > 0))
			return NULL;
		if (rc == -2) {
			snprintf(buf, size, "\"%s\" is out of range (%s %lld)",
			    quote(value, len, shown, sizeof(shown)),
			    f->type == INTEGER ? "from -9223372036854775808 to" : "at most", LLONG_MAX);
			return buf;
		}
		what = f->type == COUNT ? "a whole number from 0 (digits, no sign, no leading zeros)" :
		    f->type == POSITIVE ? "a whole number from 1 (digits, no sign, no leading zeros)" :
		    "a whole number (digits after an optional -, no leading zeros)";
		break;
	case KIND_NAME:
		if (valid_queue_kind(value, len))
			return NULL;
		what = "a queue's kind: 1 to 64 lowercase letters, digits and -, not first";
		break;
	case FILE_NAME:
		if (idem_file_name_valid(value, len))
			return NULL;
		what = "a name of letters, digits, '.', '_' and '-' that begins with a letter or a "
		    "digit, at most 100 bytes (it names a file)";
		break;
	case DECIMAL:
		if (valid_decimal(value, len))
			return NULL;
		what = "a decimal number such as 12.5";
		break;
	case TIME:
		if (valid_time(value, len))
			return NULL;
		what = "a UTC time such as 2026-11-29T13:48:32.247642Z";
		break;
	case SHA256:
		if (valid_hex(value, len, 64))
			return NULL;
		what = "a SHA-256 in 64 lowercase hex digits";
		break;
	case TRACE_ID:
	case SPAN_ID:
		if (valid_hex(value, len, f->type == TRACE_ID ? 32 : 16))
			return NULL;
		what = f->type == TRACE_ID ? "a trace id in 32 lowercase hex digits" :
		    "a span id in 16 lowercase hex digits";
		break;
	case JSON_OBJECT:
	case JSON_STRINGS:
	case JSON_NAMES:
	case JSON_ARRAY:
		if (!idem_json_check(value, len, &shape)) {
			snprintf(buf, size, "not JSON (at byte %zu): \"%s\"", shape.at + 1,
			    quote(value, len, shown, sizeof(shown)));
			return buf;
		}
		if (f->type == JSON_OBJECT && shape.top == '{')
			return NULL;
		if (f->type == JSON_ARRAY && shape.top == '[')
			return NULL;
		if (f->type != JSON_OBJECT && shape.top == '[' && shape.strings_only &&
		    (f->type == JSON_STRINGS || shape.elements > 0))
			return NULL;
		what = f->type == JSON_OBJECT ? "a JSON object" : f->type == JSON_ARRAY ?
		    "a JSON array" : f->type == JSON_STRINGS ? "a JSON array of strings" :
		    "a JSON array of one or more strings";
		break;
	case ENUM: {
		char words[128];
		size_t i, o = 0;

		if (one_of(f->values, value, len))
			return NULL;
		for (i = 0; f->values[i] && o + 3 < sizeof(words); i++) {
			if (f->values[i] == ' ')
				words[o++] = ',';
			words[o++] = f->values[i];
		}
		words[o] = '\0';
		snprintf(buf, size, "expected one of %s; got \"%s\"", words,
		    quote(value, len, shown, sizeof(shown)));
		return buf;
	}
	}
	snprintf(buf, size, "expected %s, got \"%s\"", what, quote(value, len, shown, sizeof(shown)));
	return buf;
}

const char *
idem_tsv_check_field(enum idem_kind kind, size_t field, const char *value, size_t len,
		     char *buf, size_t size)
{
	if (field == 0 || field > idem_kind_nfields(kind))
		return NULL;
	return check_value(&kinds[kind].fields[field - 1], value, len, buf, size);
}

static enum idem_kind
lookup_kind(const char *name, size_t len)
{
	int k;

	for (k = 0; k < IDEM_KIND_COUNT; k++)
		if (strlen(kinds[k].name) == len && memcmp(kinds[k].name, name, len) == 0)
			return k;
	return IDEM_KIND_UNKNOWN;
}

/* A fixed key: a stream gives the same verdict on every run. */
static const unsigned char names_key[crypto_shorthash_KEYBYTES] = {
	'i', 'd', 'e', 'm', '-', 't', 's', 'v', ' ', 'n', 'a', 'm', 'e', 's', ' ', '1'
};

/* crypto_shorthash (SipHash-2-4) is a pure function: it needs no
 * sodium_init(). 0 marks an empty slot, so no name hashes to it. */
static unsigned long long
name_hash(const char *name, size_t len)
{
	unsigned char out[crypto_shorthash_BYTES];
	unsigned long long h;

	crypto_shorthash(out, (const unsigned char *)name, len, names_key);
	memcpy(&h, out, sizeof(h));
	return h ? h : 1;
}

struct name_lookup {
	const struct idem_tsv_names *set;
	unsigned long long h;
};

static int
same_name(const void *ctx, size_t entry)
{
	const struct name_lookup *l = ctx;

	return l->set->hashes[entry] == l->h;
}

static uint64_t
hash_of_name(const void *ctx, size_t entry)
{
	return ((const struct idem_tsv_names *)ctx)->hashes[entry];
}

static struct idem_index_slot *
names_slot(const struct idem_tsv_names *set, unsigned long long h)
{
	struct name_lookup l = { set, h };

	return idem_index_slot(&set->index, h, same_name, &l);
}

static int
names_has(const struct idem_tsv_names *set, const char *name)
{
	struct idem_index_slot *slot = names_slot(set, name_hash(name, strlen(name)));

	return slot != NULL && slot->entry != 0;
}

/* Lists h, not indexed yet. */
static void
names_list(struct idem_tsv_names *set, unsigned long long h)
{
	if (set->n == set->cap) {
		set->cap = set->cap ? 2 * set->cap : 1024;
		set->hashes = idem_ereallocarray(set->hashes, set->cap, sizeof(*set->hashes));
	}
	set->hashes[set->n++] = h;
}

/* Adds a name by its name_hash h; 0 when it was there already. */
static int
names_add(struct idem_tsv_names *set, unsigned long long h)
{
	struct idem_index_slot *slot;

	idem_index_reserve(&set->index, set->n + 1, hash_of_name, set);
	slot = names_slot(set, h);
	if (slot->entry != 0)
		return 0;
	names_list(set, h);
	idem_index_fill(&set->index, slot, h, set->n - 1);
	return 1;
}

/* Whether a job id, of name_hash h, is new. While the ids come in byte
 * order, as seed-gen writes them, each is: its hash is only listed, with
 * no look-up in an index that outgrows the caches. The first id that
 * does not come after the one before indexes the listed hashes, where it
 * and every later id are looked up. */
static int
job_id_new(struct idem_tsv_reader *r, const char *id, unsigned long long h)
{
	struct idem_tsv_names *set = &r->job_ids;
	size_t len = strlen(id), i;

	if (!r->job_ids_unordered) {
		if (set->n == 0 || strcmp(r->last_job_id, id) < 0) {
			names_list(set, h);
			if (len + 1 > r->last_job_id_cap) {
				r->last_job_id_cap = 2 * (len + 1);
				r->last_job_id = idem_erealloc(r->last_job_id, r->last_job_id_cap);
			}
			memcpy(r->last_job_id, id, len + 1);
			return 1;
		}
		r->job_ids_unordered = 1;
		idem_index_reserve(&set->index, set->n + 1, hash_of_name, set);
		for (i = 0; i < set->n; i++)
			idem_index_fill(&set->index, names_slot(set, set->hashes[i]), set->hashes[i], i);
	}
	return names_add(set, h);
}

static void
names_free(struct idem_tsv_names *set)
{
	free(set->hashes);
	idem_index_free(&set->index);
}

void
idem_tsv_reader_init(struct idem_tsv_reader *r, FILE *in, const char *name)
{
	memset(r, 0, sizeof(*r));
	r->in = in;
	r->name = name;
	r->kind = IDEM_KIND_UNKNOWN;
}

void
idem_tsv_reader_free(struct idem_tsv_reader *r)
{
	free(r->line);
	free(r->decoded);
	free(r->fields);
	names_free(&r->job_ids);
	free(r->last_job_id);
	names_free(&r->scenario_names);
	memset(r, 0, sizeof(*r));
}

int
idem_tsv_unescape(char *field, size_t *len)
{
	char *src = field, *dst = field, *end = field + *len;

	if (*len == 2 && field[0] == '\\' && field[1] == 'N')
		return 1;
	/* most fields have no escape: nothing moves before the first */
	if ((src = memchr(field, '\\', *len)) == NULL) {
		*end = '\0';
		return 0;
	}
	dst = src;
	while (src < end) {
		if (*src != '\\') {
			*dst++ = *src++;
			continue;
		}
		if (src + 1 == end)
			return -1;
		switch (src[1]) {
		case '\\': *dst++ = '\\'; break;
		case 't': *dst++ = '\t'; break;
		case 'n': *dst++ = '\n'; break;
		case 'r': *dst++ = '\r'; break;
		default: return -1;
		}
		src += 2;
	}
	*dst = '\0';
	*len = (size_t)(dst - field);
	return 0;
}

/* Splits the row into fields, decodes them and checks each against its
 * type; a row of a known kind before the seed row is refused first. */
static int
decode_fields(struct idem_tsv_reader *r, int backslash, struct idem_error *err)
{
	const char *kind = kinds[r->kind].name, *problem;
	size_t want = idem_kind_nfields(r->kind) + 1, least = want, n = 0, len, tabs = 0;
	size_t at[MAX_FIELDS + 1];	/* where the tabs are, as many as a row may have */
	char *p, *tab, *end, buf[256];
	const char *t;
	int rc;

	while (least > 1 && kinds[r->kind].fields[least - 2].added)
		least--;
	for (t = r->line; (t = memchr(t, '\t', r->line_len - (size_t)(t - r->line))) != NULL; t++)
		if (tabs < want)
			at[tabs++] = (size_t)(t - r->line);
		else
			tabs++;
	if (tabs + 1 < least || tabs + 1 > want) {
		if (least == want)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: %s row has %zu fields, expected %zu", r->name, r->line_no,
			    kind, tabs, want - 1);
		return idem_error_set(err, IDEM_EXIT_USAGE,
		    "%s:%ld: %s row has %zu fields, expected %zu to %zu", r->name, r->line_no,
		    kind, tabs, least - 1, want - 1);
	}
	if (!r->seen[IDEM_KIND_SEED] && r->kind != IDEM_KIND_SEED)
		return idem_error_set(err, IDEM_EXIT_USAGE,
		    "%s:%ld: %s %s row before the seed row; start the stream with seed-gen",
		    r->name, r->line_no, strchr("aeiou", kind[0]) ? "an" : "a", kind);
	if (r->decoded_cap < r->line_len + 1) {
		r->decoded_cap = r->line_len + 1;
		r->decoded = idem_erealloc(r->decoded, r->decoded_cap);
	}
	memcpy(r->decoded, r->line, r->line_len + 1);
	p = r->decoded;
	end = p + r->line_len;
	for (;;) {
		tab = n < tabs ? r->decoded + at[n] : end;
		*tab = '\0';
		if (n == r->fields_cap) {
			r->fields_cap = r->fields_cap ? r->fields_cap * 2 : 32;
			r->fields = idem_ereallocarray(r->fields, r->fields_cap, sizeof(*r->fields));
		}
		len = (size_t)(tab - p);
		/* with no backslash on the line, no field is \N or has an escape */
		rc = backslash ? idem_tsv_unescape(p, &len) : 0;
		if (rc < 0)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: %s row, field %s: bad escape (only \\\\ \\t \\n \\r and \\N are allowed)",
			    r->name, r->line_no, kind, idem_kind_field_name(r->kind, n));
		if (n > 0 && rc == 1 && !kinds[r->kind].fields[n - 1].nullable)
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: %s row, field %s: missing (\\N)",
			    r->name, r->line_no, kind, kinds[r->kind].fields[n - 1].name);
		if (n > 0 && rc == 0 && (problem = check_value(&kinds[r->kind].fields[n - 1], p, len,
		    buf, sizeof(buf))) != NULL)
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: %s row, field %s: %s",
			    r->name, r->line_no, kind, kinds[r->kind].fields[n - 1].name, problem);
		if (n == JOB_ID && r->kind == IDEM_KIND_JOB) {
			r->job_id_hash = name_hash(p, len);
			idem_index_prefetch(&r->job_ids.index, r->job_id_hash);
		}
		r->fields[n++] = rc == 1 ? NULL : p;
		if (tab == end)
			break;
		p = tab + 1;
	}
	/* a row of version 1.0 has no value for the fields added since */
	while (n < want) {
		if (n == r->fields_cap) {
			r->fields_cap *= 2;
			r->fields = idem_ereallocarray(r->fields, r->fields_cap, sizeof(*r->fields));
		}
		r->fields[n++] = NULL;
	}
	r->nfields = n;
	return 0;
}

/* What makes a baseline row's result disagree with its counts, or NULL:
 * none is a baseline of no jobs; passed, one with every message acked and
 * the effects expected, no more and no fewer. */
static const char *
baseline_problem(const struct idem_tsv_reader *r)
{
	const char *result = r->fields[BASELINE_RESULT];
	long long jobs = idem_tsv_number(r, BASELINE_JOBS, 0),
	    messages = idem_tsv_number(r, BASELINE_MESSAGES, 0),
	    unacked = idem_tsv_number(r, BASELINE_UNACKED, 0),
	    expected = idem_tsv_number(r, BASELINE_EXPECTED, 0),
	    observed = idem_tsv_number(r, BASELINE_OBSERVED, 0),
	    duplicates = idem_tsv_number(r, BASELINE_DUPLICATES, 0),
	    missing = idem_tsv_number(r, BASELINE_MISSING, 0);
	int clean = unacked == 0 && duplicates == 0 && missing == 0;

	if (unacked > messages)
		return "more messages unacked than the baseline has";
	if (observed - expected != duplicates - missing)
		return "observed minus expected is not duplicates minus missing";
	if ((strcmp(result, "none") == 0) != (jobs == 0))
		return jobs == 0 ? "a baseline of no jobs is none" : "none, but the baseline has jobs";
	if (strcmp(result, "passed") == 0 && !clean)
		return "passed, with messages unacked or effects duplicate or missing";
	if (strcmp(result, "failed") == 0 && clean)
		return "failed, with every message acked and every effect as expected";
	return NULL;
}

/* Whether a queue's kind has its adapter built in (IDEM_QUEUE_KINDS). */
static int
built_in_kind(const char *kind)
{
	static const char built_in[] = IDEM_QUEUE_KINDS;
	const char *p = built_in;
	size_t len = strlen(kind);

	while ((p = strstr(p, kind)) != NULL) {
		if ((p == built_in || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0'))
			return 1;
		p += len;
	}
	return 0;
}

/* The kinds of which a stream has one row at most. */
static const unsigned char once[IDEM_KIND_COUNT] = {
	[IDEM_KIND_SEED] = 1, [IDEM_KIND_EXPECT] = 1, [IDEM_KIND_QUEUE] = 1,
	[IDEM_KIND_EXTERNAL] = 1, [IDEM_KIND_DECLARED_GUARD] = 1, [IDEM_KIND_BASELINE] = 1,
	[IDEM_KIND_DATABASE] = 1,
};

/* The rules of the stream as a whole, for rows whose fields are good: one
 * seed row and at most one expect row, one external row and one queue
 * row, of the seed's kind; scenario names and job ids unique; an until
 * step only for a stall; vendor_ms for the vendor faults that take one,
 * and a kill step for vendor-forget-keys; a job's scenario named by a scenario row before it. */
static int
check_row(struct idem_tsv_reader *r, struct idem_error *err)
{
	char shown[QUOTE_MAX * 2 + 8];
	const char *v;
	long long ms;
	int late;

	if (once[r->kind] && r->seen[r->kind]++)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: a second %s row", r->name,
		    r->line_no, kinds[r->kind].name);
	switch (r->kind) {
	case IDEM_KIND_SEED:
		v = r->fields[SEED_QUEUE_KIND] ? r->fields[SEED_QUEUE_KIND] : "idem";
		snprintf(r->queue_kind, sizeof(r->queue_kind), "%s", v);
		if ((r->fields[SEED_ADAPTER] == NULL) != (r->fields[SEED_ADAPTER_SHA256] == NULL))
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: seed row, field %s: missing (\\N), but %s is there", r->name,
			    r->line_no, r->fields[SEED_ADAPTER] ? "adapter_sha256" : "adapter",
			    r->fields[SEED_ADAPTER] ? "adapter" : "adapter_sha256");
		if (r->fields[SEED_ADAPTER] == NULL && !built_in_kind(v))
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: seed row, field queue_kind: %s has no adapter built in (%s have), "
			    "and the row names no adapter file", r->name, r->line_no, v,
			    IDEM_QUEUE_KINDS);
		break;
	case IDEM_KIND_QUEUE:
		if (strcmp(r->fields[QUEUE_KIND], r->queue_kind) != 0)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: queue row, field kind: %s, but the seed row names a queue of kind %s",
			    r->name, r->line_no, r->fields[QUEUE_KIND], r->queue_kind);
		break;
	case IDEM_KIND_BASELINE:
		if ((v = baseline_problem(r)) != NULL)
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: baseline row, field result: %s",
			    r->name, r->line_no, v);
		break;
	case IDEM_KIND_SCENARIO:
		v = r->fields[SCENARIO_NAME];
		if (!names_add(&r->scenario_names, name_hash(v, strlen(v))))
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: scenario row, field name: scenario \"%s\" appears twice in the stream",
			    r->name, r->line_no, quote(v, strlen(v), shown, sizeof(shown)));
		if (r->fields[SCENARIO_UNTIL] != NULL && strcmp(r->fields[SCENARIO_FAULT], "stall") != 0)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: scenario row, field until: a step for a stall only, not for a %s",
			    r->name, r->line_no, r->fields[SCENARIO_FAULT]);
		v = r->fields[SCENARIO_FAULT];
		late = strcmp(v, "vendor-late-reply") == 0;
		if (r->fields[SCENARIO_VENDOR_MS] != NULL && !late &&
		    strcmp(v, "vendor-forget-keys") != 0)
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: scenario row, field "
			    "vendor_ms: only for a vendor-late-reply or vendor-forget-keys scenario, "
			    "not for a %s", r->name, r->line_no, v);
		if (r->fields[SCENARIO_VENDOR_MS] == NULL && (late ||
		    strcmp(v, "vendor-forget-keys") == 0))
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: scenario row, field "
			    "vendor_ms: required for a %s scenario", r->name, r->line_no, v);
		ms = r->fields[SCENARIO_VENDOR_MS] ? strtoll(r->fields[SCENARIO_VENDOR_MS], NULL, 10) :
		    1;
		if (ms < 1 || (late && ms > IDEM_TSV_MAX_LATE_MS))
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: scenario row, field "
			    "vendor_ms: %s", r->name, r->line_no, late ? "a delay from 1 to 60000" :
			    "a window of at least 1");
		if (strcmp(v, "vendor-forget-keys") == 0 && r->fields[SCENARIO_STEP] == NULL)
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: scenario row, field "
			    "step: required for a vendor-forget-keys scenario: the step of its kill",
			    r->name, r->line_no);
		break;
	case IDEM_KIND_EXTERNAL:
		if ((r->fields[EXTERNAL_PENDING_STATE] == NULL) !=
		    (r->fields[EXTERNAL_PENDING_SETTLED] == NULL))
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: external row, field %s: "
			    "pending_state and pending_settled go together", r->name, r->line_no,
			    r->fields[EXTERNAL_PENDING_STATE] ? "pending_settled" : "pending_state");
		break;
	case IDEM_KIND_JOB:
		v = r->fields[JOB_SCENARIO];
		if (v != NULL && !names_has(&r->scenario_names, v))
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: job row, field scenario: no scenario row named \"%s\" before it",
			    r->name, r->line_no, quote(v, strlen(v), shown, sizeof(shown)));
		v = r->fields[JOB_ID];
		if (!job_id_new(r, v, r->job_id_hash))
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:%ld: job row, field job_id: job \"%s\" appears twice in the stream",
			    r->name, r->line_no, quote(v, strlen(v), shown, sizeof(shown)));
		break;
	default:
		break;
	}
	return 0;
}

/* Whether every byte is ASCII, neither NUL nor a carriage return: such a
 * line passes the checks for NUL, UTF-8 and CR at once, eight bytes at a
 * step. The others take those checks one by one, for their message. Sets
 * *backslash to whether a plain line has a backslash, and leaves it alone
 * for a line that is not plain. */
static int
plain_ascii(const char *s, size_t len, int *backslash)
{
	const uint64_t ones = UINT64_C(0x0101010101010101), highs = UINT64_C(0x8080808080808080),
	    crs = ones * '\r', backslashes = ones * '\\';
	uint64_t w, x, y, bad = 0, escaped = 0;
	size_t i = 0;
	int seen;

	for (; i + 8 <= len; i += 8) {
		memcpy(&w, s + i, sizeof(w));
		x = w ^ crs;
		y = w ^ backslashes;
		/* a byte's high bit: it was 0x80 or more, 0, or \r */
		bad |= w | ((w - ones) & ~w) | ((x - ones) & ~x);
		escaped |= (y - ones) & ~y;
	}
	if (bad & highs)
		return 0;
	seen = (escaped & highs) != 0;
	for (; i < len; i++) {
		if (s[i] == '\0' || s[i] == '\r' || (unsigned char)s[i] >= 0x80)
			return 0;
		if (s[i] == '\\')
			seen = 1;
	}
	*backslash = seen;
	return 1;
}

/* An empty stream from a pipe is what a stage gets when the one before it
 * failed: that one said why, and this one keeps quiet (idem-tsv(5)). */
static int
empty_from_pipe(FILE *in)
{
	struct stat st;
	int fd = fileno(in);

	return fd >= 0 && fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

int
idem_tsv_next(struct idem_tsv_reader *r, struct idem_error *err)
{
	ssize_t got;
	size_t kind_len;
	int backslash = 1;

	errno = 0;
	got = getline(&r->line, &r->line_cap, r->in);
	if (got < 0) {
		if (ferror(r->in))
			return idem_error_set(err, IDEM_EXIT_ENV, "%s: read error:", r->name);
		if (!r->header_seen && empty_from_pipe(r->in))
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s", "");
		if (!r->header_seen)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s: empty stream: expected the header line \"#idem-tsv<TAB>%s\"",
			    r->name, IDEM_TSV_MAGIC + 10);
		if (!r->seen[IDEM_KIND_SEED])
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s: no seed row: start the stream with seed-gen", r->name);
		return IDEM_TSV_EOF;
	}
	r->line_no++;
	r->line_len = (size_t)got;
	if (r->line_len > 0 && r->line[r->line_len - 1] == '\n')
		r->line[--r->line_len] = '\0';
	else
		return idem_error_set(err, IDEM_EXIT_USAGE,
		    "%s:%ld: last line has no newline (truncated stream?)", r->name, r->line_no);
	if (!plain_ascii(r->line, r->line_len, &backslash)) {
		if (memchr(r->line, '\0', r->line_len) != NULL)
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: a NUL byte",
			    r->name, r->line_no);
		if (!idem_utf8_valid(r->line, r->line_len))
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: invalid UTF-8",
			    r->name, r->line_no);
		if (memchr(r->line, '\r', r->line_len) != NULL)
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: a raw carriage return "
			    "(CRLF line ends?); write it as \\r", r->name, r->line_no);
	}
	r->kind = IDEM_KIND_UNKNOWN;
	r->nfields = 0;
	if (!r->header_seen) {
		if (strncmp(r->line, "#idem-tsv\t", 10) != 0)
			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:1: not an idem-tsv stream: expected the header line \"#idem-tsv<TAB>%s\"",
			    r->name, IDEM_TSV_MAGIC + 10);
		if (strcmp(r->line + 10, "1") != 0 && (strncmp(r->line + 10, "1.", 2) != 0 ||
		    r->line[12] == '\0' || strspn(r->line + 12, "0123456789") != strlen(r->line + 12))) {
			char shown[QUOTE_MAX * 2 + 8];

			return idem_error_set(err, IDEM_EXIT_USAGE,
			    "%s:1: idem-tsv version %s is not supported (this is version 1)", r->name,
			    quote(r->line + 10, r->line_len - 10, shown, sizeof(shown)));
		}
		r->header_seen = 1;
		return IDEM_TSV_HEADER;
	}
	if (r->line[0] == '#')
		return IDEM_TSV_COMMENT;
	kind_len = strcspn(r->line, "\t");
	if (kind_len == 0)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%ld: row without a kind",
		    r->name, r->line_no);
	r->kind = lookup_kind(r->line, kind_len);
	if (r->kind != IDEM_KIND_UNKNOWN && (decode_fields(r, backslash, err) < 0 ||
	    check_row(r, err) < 0))
		return -1;
	return IDEM_TSV_ROW;
}

int
idem_tsv_pass(FILE *out, const struct idem_tsv_reader *r)
{
	if (fwrite(r->line, 1, r->line_len, out) != r->line_len || putc('\n', out) == EOF)
		return -1;
	return 0;
}

int
idem_tsv_write_header(FILE *out)
{
	return fputs(IDEM_TSV_MAGIC "\n", out) == EOF ? -1 : 0;
}

int
idem_tsv_write_field(FILE *out, const char *field)
{
	const char *p, *run;

	if (field == NULL)
		return fputs("\\N", out) == EOF ? -1 : 0;
	for (run = p = field; *p; p++) {
		const char *esc;

		switch (*p) {
		case '\\': esc = "\\\\"; break;
		case '\t': esc = "\\t"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		default: continue;
		}
		if (p > run && fwrite(run, 1, (size_t)(p - run), out) != (size_t)(p - run))
			return -1;
		if (fputs(esc, out) == EOF)
			return -1;
		run = p + 1;
	}
	if (p > run && fwrite(run, 1, (size_t)(p - run), out) != (size_t)(p - run))
		return -1;
	return 0;
}

int
idem_tsv_write_row(FILE *out, const char *kind, const char *const *fields, size_t n)
{
	size_t i;

	if (fputs(kind, out) == EOF)
		return -1;
	for (i = 0; i < n; i++)
		if (putc('\t', out) == EOF || idem_tsv_write_field(out, fields[i]) < 0)
			return -1;
	return putc('\n', out) == EOF ? -1 : 0;
}

long long
idem_tsv_number(const struct idem_tsv_reader *r, size_t field, long long if_null)
{
	const char *s = field < r->nfields ? r->fields[field] : NULL;

	return s ? strtoll(s, NULL, 10) : if_null;
}

char *
idem_tsv_escape_to(char *out, const char *field)
{
	for (; *field; field++) {
		switch (*field) {
		case '\\': *out++ = '\\'; *out++ = '\\'; break;
		case '\t': *out++ = '\\'; *out++ = 't'; break;
		case '\n': *out++ = '\\'; *out++ = 'n'; break;
		case '\r': *out++ = '\\'; *out++ = 'r'; break;
		default: *out++ = *field; break;
		}
	}
	return out;
}

char *
idem_tsv_escape(const char *field)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	idem_tsv_write_field(f, field);
	if (fclose(f) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	return buf;
}
