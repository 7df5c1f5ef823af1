#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "file.h"
#include "pg.h"
#include "queue.h"
#include "sql.h"
#include "text.h"

EMBED(idem_sql_queue_idem, "lib/queues/idem.sql");
EMBED(idem_sql_queue_pgboss, "lib/queues/pg-boss.sql");
EMBED(idem_sql_queue_graphile, "lib/queues/graphile-worker.sql");
extern const char idem_sql_queue_idem[], idem_sql_queue_pgboss[], idem_sql_queue_graphile[];

static const struct {
	const char *kind;
	const char *text;
} adapters[] = {
	{ "idem", idem_sql_queue_idem },
	{ "pg-boss", idem_sql_queue_pgboss },
	{ "graphile-worker", idem_sql_queue_graphile },
};

static const char PLACEHOLDER[] = ":'queue'";

const char *const idem_queue_required[] = {
	"installed", "version", "publish", "observe", "expire", "deliveries", "deliveries-of-key",
	"unacked", "unacked-list", "hold-back", "let-go", "account", "denied", NULL
};
const char *const idem_queue_optional[] = {
	"prepare", "copy", "published-after", "published-span", "hold-lease", "rescue",
	"setup-schemas", "consume", "complete", NULL
};

/* A header line "-- key: value" before the first section. */
static char *
header(const char *text, const char *key)
{
	size_t klen = strlen(key);
	const char *line, *end;

	for (line = text; *line && strncmp(line, "-- @", 4) != 0; line = end + (*end != '\0')) {
		end = strchr(line, '\n');
		if (end == NULL)
			end = line + strlen(line);
		if (strncmp(line, "-- ", 3) == 0 && strncmp(line + 3, key, klen) == 0 &&
		    line[3 + klen] == ':' && line[4 + klen] == ' ')
			return idem_estrndup(line + 5 + klen, (size_t)(end - line - 5 - (long)klen));
	}
	return NULL;
}

/* The adapter's sections (lib/sql.h). */
static void
split(struct idem_queue *q, const char *text)
{
	struct idem_sql_section s, *prev = NULL;

	while (idem_sql_section_next(text, prev, &s)) {
		struct idem_queue_section *qs;

		q->sections = idem_ereallocarray(q->sections, q->nsections + 1, sizeof(*q->sections));
		qs = &q->sections[q->nsections++];
		qs->name = idem_estrndup(s.head, s.head_len);
		qs->name_at = s.head;
		qs->sql = s.text;
		qs->len = s.len;
		prev = &s;
	}
}

int
idem_queue_open(struct idem_queue *q, const char *kind, const char *name, struct idem_error *err)
{
	size_t i;

	memset(q, 0, sizeof(*q));
	if (kind == NULL)
		kind = "idem";
	for (i = 0; i < sizeof(adapters) / sizeof(adapters[0]); i++)
		if (strcmp(adapters[i].kind, kind) == 0)
			break;
	if (i == sizeof(adapters) / sizeof(adapters[0]))
		return idem_error_set(err, IDEM_EXIT_USAGE, "queue kind %s: no adapter (idem, pg-boss "
		    "and graphile-worker have one)", kind);
	q->kind = adapters[i].kind;
	q->name = idem_estrdup(name);
	q->library = header(adapters[i].text, "library");
	q->install = header(adapters[i].text, "install");
	if (q->library == NULL)
		q->library = idem_estrdup(q->kind);
	split(q, adapters[i].text);
	return 0;
}

static int
listed(const char *const *names, const char *name)
{
	for (; *names; names++)
		if (strcmp(*names, name) == 0)
			return 1;
	return 0;
}

/* The line of text at p, from 1. */
static size_t
line_of(const char *text, const char *p)
{
	size_t n = 1;

	for (; text < p; text++)
		n += *text == '\n';
	return n;
}

/* The last line of text. */
static size_t
last_line(const char *text)
{
	size_t len = strlen(text);

	return line_of(text, text + len) - (len > 0 && text[len - 1] == '\n');
}

/* What is wrong with a kind's name, or NULL. */
static const char *
bad_kind(const char *kind)
{
	const char *p;

	if (*kind == '\0' || strlen(kind) > 64)
		return "1 to 64 characters";
	for (p = kind; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || (*p == '-' && p > kind)))
			return "lowercase letters, digits and -, not first";
	return NULL;
}

/* Checks the sections of q, read from text: each of a known name, once,
 * with SQL in it; the required ones there. */
static int
check_sections(const struct idem_queue *q, const char *path, const char *text,
	       struct idem_error *err)
{
	const char *const *r;
	size_t i, j;

	for (i = 0; i < q->nsections; i++) {
		const struct idem_queue_section *s = &q->sections[i];
		size_t line = line_of(text, s->name_at);

		if (!listed(idem_queue_required, s->name) && !listed(idem_queue_optional, s->name))
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%zu: section @%s: not a section "
			    "of an adapter (idem-sandbox(1), QUEUE ADAPTERS)", path, line, s->name);
		for (j = 0; j < i; j++)
			if (strcmp(q->sections[j].name, s->name) == 0)
				return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%zu: section @%s: a second "
				    "one (the first at line %zu)", path, line, s->name,
				    line_of(text, q->sections[j].name_at));
		if (s->len == 0)
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%zu: section @%s: no SQL in it",
			    path, line, s->name);
	}
	for (r = idem_queue_required; *r; r++)
		if (!idem_queue_has(q, *r))
			return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%zu: section @%s: missing; every "
			    "adapter has %s", path, last_line(text), *r,
			    "installed, version, publish, observe, expire, deliveries, deliveries-of-key, "
			    "unacked, unacked-list, hold-back, let-go, account and denied");
	return 0;
}

int
idem_queue_parse(struct idem_queue *q, const char *path, char *text, size_t len,
		 const char *kind, const char *name, struct idem_error *err)
{
	const char *problem;

	memset(q, 0, sizeof(*q));
	q->text = text;
	q->path = idem_estrdup(path);
	q->name = idem_estrdup(name);
	idem_sha256_hex(text, len, q->sha256);
	if (memchr(text, '\0', len) != NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%zu: a NUL byte: not a text file", path,
		    line_of(text, text + strlen(text)));	/* the line it is on */
	if ((q->own_kind = header(text, "kind")) == NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:1: no \"-- kind: KIND\" line before "
		    "the first section", path);
	q->kind = q->own_kind;
	if ((problem = bad_kind(q->kind)) != NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%zu: kind %s: %s", path,
		    line_of(text, strstr(text, "-- kind: ")), q->kind, problem);
	if (kind != NULL && strcmp(kind, q->kind) != 0)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:%zu: kind %s: the seed's queue is of "
		    "kind %s", path, line_of(text, strstr(text, "-- kind: ")), q->kind, kind);
	q->library = header(text, "library");
	q->install = header(text, "install");
	if (q->library == NULL)
		q->library = idem_estrdup(q->kind);
	split(q, text);
	return check_sections(q, path, text, err);
}

int
idem_queue_open_file(struct idem_queue *q, const char *path, const char *kind, const char *name,
		     struct idem_error *err)
{
	size_t len;
	char *text = idem_read_file_max(path, IDEM_QUEUE_ADAPTER_MAX, &len, err);

	if (text == NULL) {
		memset(q, 0, sizeof(*q));
		return -1;
	}
	return idem_queue_parse(q, path, text, len, kind, name, err);
}

int
idem_queue_open_seed(struct idem_queue *q, const char *kind, const char *name, const char *adapter,
		     const char *adapter_sha256, struct idem_error *err)
{
	if (adapter == NULL)
		return idem_queue_open(q, kind, name, err);
	if (idem_queue_open_file(q, adapter, kind, name, err) < 0)
		return -1;
	if (adapter_sha256 == NULL || strcmp(q->sha256, adapter_sha256) != 0)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: the adapter changed since seed-gen "
		    "read it (SHA-256 %.12s..., the seed row says %.12s...): run the pipeline again "
		    "from seed-gen", adapter, q->sha256, adapter_sha256 ? adapter_sha256 : "nothing");
	return 0;
}

void
idem_queue_close(struct idem_queue *q)
{
	size_t i;

	for (i = 0; i < q->nsections; i++)
		free((char *)q->sections[i].name);
	free(q->sections);
	free(q->name);
	free(q->library);
	free(q->install);
	free(q->path);
	free(q->text);
	free(q->own_kind);
	memset(q, 0, sizeof(*q));
}

static const struct idem_queue_section *
find(const struct idem_queue *q, const char *section)
{
	size_t i;

	for (i = 0; i < q->nsections; i++)
		if (strcmp(q->sections[i].name, section) == 0)
			return &q->sections[i];
	return NULL;
}

int
idem_queue_has(const struct idem_queue *q, const char *section)
{
	return find(q, section) != NULL;
}

char *
idem_queue_sql(const struct idem_queue *q, PGconn *conn, const char *section)
{
	const struct idem_queue_section *s = find(q, section);
	char *literal, *out, *o;
	const char *p, *at, *end;
	size_t n = 0, llen;

	if (s == NULL)
		return NULL;
	literal = idem_pg_quote_literal(conn, q->name);
	llen = strlen(literal);
	end = s->sql + s->len;
	for (p = s->sql; (at = memmem(p, (size_t)(end - p), PLACEHOLDER, sizeof(PLACEHOLDER) - 1)) != NULL;
	    p = at + sizeof(PLACEHOLDER) - 1)
		n++;
	out = o = idem_emalloc(s->len + n * llen + 1);
	for (p = s->sql; (at = memmem(p, (size_t)(end - p), PLACEHOLDER, sizeof(PLACEHOLDER) - 1)) != NULL;
	    p = at + sizeof(PLACEHOLDER) - 1) {
		memcpy(o, p, (size_t)(at - p));
		o += at - p;
		memcpy(o, literal, llen);
		o += llen;
	}
	memcpy(o, p, (size_t)(end - p));
	o[end - p] = '\0';
	free(literal);
	return out;
}

PGresult *
idem_queue_exec(const struct idem_queue *q, PGconn *conn, const char *section, const char *what,
		int nparams, const Oid *types, const char *const *params, struct idem_error *err)
{
	char *sql = idem_queue_sql(q, conn, section), msg[768];
	PGresult *res;
	ExecStatusType st;

	if (sql == NULL)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: the %s adapter has no %s section", what,
		    q->kind, section), NULL;
	res = PQexecParams(conn, sql, nparams, types, params, NULL, NULL, 0);
	free(sql);
	st = PQresultStatus(res);
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return res;
	idem_error_set(err, IDEM_EXIT_ENV, "%s: %s", what, idem_pg_message(conn, res, msg, sizeof(msg)));
	/* bad data (a payload, a clash with a message published before) is bad input */
	if (res != NULL && PQresultErrorField(res, PG_DIAG_SQLSTATE) != NULL &&
	    (strncmp(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22", 2) == 0 ||
	    strcmp(PQresultErrorField(res, PG_DIAG_SQLSTATE), "23505") == 0))
		err->status = IDEM_EXIT_USAGE;
	PQclear(res);
	return NULL;
}

int
idem_queue_version(const struct idem_queue *q, PGconn *conn, char **version,
		   struct idem_error *err)
{
	PGresult *res;
	char what[128];
	int installed;

	*version = NULL;
	snprintf(what, sizeof(what), "looking for %s's schema", q->library);
	if ((res = idem_queue_exec(q, conn, "installed", what, 0, NULL, NULL, err)) == NULL)
		return -1;
	installed = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!installed)
		return 0;
	snprintf(what, sizeof(what), "reading %s's version", q->library);
	if ((res = idem_queue_exec(q, conn, "version", what, 0, NULL, NULL, err)) == NULL)
		return -1;
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		*version = idem_estrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return 1;
}

int
idem_queue_check(const struct idem_queue *q, PGconn *conn, char **version, struct idem_error *err)
{
	int rc = idem_queue_version(q, conn, version, err);

	if (rc == 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "queue %s is a %s queue, but %s's schema is "
		    "not installed in this database: %s", q->name, q->kind, q->library,
		    q->install ? q->install : "install it first");
	return rc < 0 ? -1 : 0;
}

char *
idem_queue_text_array(char *const *items, size_t n)
{
	size_t len = 3, i;
	const char *v;
	char *out, *o;

	for (i = 0; i < n; i++)
		len += strlen(items[i]) * 2 + 3;
	out = o = idem_emalloc(len);
	*o++ = '{';
	for (i = 0; i < n; i++) {
		if (i)
			*o++ = ',';
		*o++ = '"';
		for (v = items[i]; *v; v++) {
			if (*v == '"' || *v == '\\')
				*o++ = '\\';
			*o++ = *v;
		}
		*o++ = '"';
	}
	*o++ = '}';
	*o = '\0';
	return out;
}

void
idem_text_array_add(struct idem_text_array *a, const char *item)
{
	size_t need = a->len + strlen(item) * 2 + 6;
	char *o;

	if (need > a->cap) {
		a->cap = need * 2;
		a->text = idem_erealloc(a->text, a->cap);
	}
	if (a->len == 0)
		a->len = 1;	/* the opening brace, written below */
	o = a->text + a->len - 1;
	*o++ = a->n++ > 0 ? ',' : '{';
	*o++ = '"';
	for (; *item; item++) {
		if (*item == '"' || *item == '\\')
			*o++ = '\\';
		*o++ = *item;
	}
	*o++ = '"';
	*o++ = '}';
	*o = '\0';
	a->len = (size_t)(o - a->text);
}

char *
idem_text_array_take(struct idem_text_array *a)
{
	char *text = a->text ? a->text : idem_estrdup("{}");

	memset(a, 0, sizeof(*a));
	return text;
}
