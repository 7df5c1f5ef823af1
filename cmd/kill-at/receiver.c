/* receiver.c: the span receiver (receiver.h) */
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>
#include <zlib.h>

#include "loopback.h"
#include "otlp.h"
#include "peer.h"
#include "receiver.h"
#include "text.h"
#include "tsv.h"

#define MAX_GROUPS 64
#define MAX_HEARD 1024			/* processes whose last span is kept */

struct receiver {
	struct MHD_Daemon *daemon;
	char endpoint[64];
	long long skew_us;
	pthread_mutex_t lock;
	FILE *rows;
	long long requests, spans, dropped;
	json_t *refused;
	int write_failed;
	pid_t groups[MAX_GROUPS];
	int ngroups;
	struct { pid_t pid; long long at_us; } heard[MAX_HEARD];
	size_t nheard, next_heard;
};

/* A request's state, from its first byte to its answer. */
struct request {
	struct loopback_body body;	/* first: loopback frees it */
	int gzip;
	enum otlp_encoding encoding;
};

/* What a request's spans are written with. */
struct writing {
	struct receiver *r;
	struct MHD_Connection *c;
	enum otlp_encoding encoding;
	FILE *buf;
	pid_t peer;			/* the connection's process, -1 not looked up yet */
	pid_t last_pid;
	int last_worker;
};

static int
answer(struct MHD_Connection *c, unsigned status, enum otlp_encoding encoding, const char *why)
{
	struct MHD_Response *resp;
	const void *body;
	char *text = NULL;
	size_t len;
	int rc;

	if (status == MHD_HTTP_OK) {
		body = otlp_empty_response(encoding, &len);
	} else if (encoding == OTLP_JSON) {
		/* google.rpc.Status, as OTLP/JSON writes it: 3 INVALID_ARGUMENT */
		json_t *doc = json_pack("{s:i,s:s}", "code", 3, "message", why);

		body = text = json_dumps(doc, JSON_COMPACT);
		json_decref(doc);
		len = text ? strlen(text) : 0;
	} else {
		body = "";
		len = 0;
	}
	resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	free(text);
	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	    encoding == OTLP_JSON ? "application/json" : "application/x-protobuf");
	rc = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* Counts a request, refused for reason (NULL: taken), and answers it. */
static int
refuse(struct receiver *r, struct MHD_Connection *c, unsigned status, const char *reason,
       enum otlp_encoding encoding, const char *why)
{
	json_t *n;

	pthread_mutex_lock(&r->lock);
	r->requests++;
	n = json_object_get(r->refused, reason);
	json_object_set_new(r->refused, reason, json_integer(n ? json_integer_value(n) + 1 : 1));
	pthread_mutex_unlock(&r->lock);
	return answer(c, status, encoding, why);
}

/* The encoding a Content-Type names: 0, else -1. */
static int
content_type(struct MHD_Connection *c, enum otlp_encoding *encoding)
{
	const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_CONTENT_TYPE);
	size_t n;

	if (type == NULL)
		return -1;
	n = strcspn(type, "; \t");
	if (n == 16 && strncasecmp(type, "application/json", n) == 0)
		*encoding = OTLP_JSON;
	else if (n == 22 && strncasecmp(type, "application/x-protobuf", n) == 0)
		*encoding = OTLP_PROTOBUF;
	else
		return -1;
	return 0;
}

/* The process at the client end of the connection, among the workers'
 * groups, or 0. Called with the lock held. */
static pid_t
peer_of(struct receiver *r, struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
	    MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	struct idem_error err;
	pid_t pid;

	if (sa == NULL || sa->sa_family != AF_INET)
		return 0;
	pid = idem_peer_process(0, ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port),
	    r->groups, (size_t)r->ngroups, &err);
	return pid > 0 ? pid : 0;
}

static int
worker_of(struct receiver *r, pid_t pid)
{
	pid_t group = pid > 0 ? getpgid(pid) : -1;
	int i;

	for (i = 0; group > 0 && i < r->ngroups; i++)
		if (r->groups[i] == group)
			return i;
	return -1;
}

/* A span as a span row, its job and attempt \N until the run's end. */
static int
write_span(void *ctx, const struct otlp_span *s)
{
	struct writing *w = ctx;
	char kind[4], start[32], end[32], pid[24], worker[16];
	pid_t p = (pid_t)s->pid;
	const char *f[16];

	if (p == 0) {
		if (w->peer < 0) {
			pthread_mutex_lock(&w->r->lock);
			w->peer = peer_of(w->r, w->c);
			pthread_mutex_unlock(&w->r->lock);
		}
		p = w->peer;
	}
	if (p != w->last_pid) {
		pthread_mutex_lock(&w->r->lock);
		w->last_worker = worker_of(w->r, p);
		pthread_mutex_unlock(&w->r->lock);
		w->last_pid = p;
	}
	snprintf(kind, sizeof(kind), "%d", s->kind);
	idem_format_time(s->start_us, start);
	idem_format_time(s->end_us, end);
	snprintf(pid, sizeof(pid), "%d", (int)p);
	snprintf(worker, sizeof(worker), "%d", w->last_worker);
	f[0] = s->trace_id;
	f[1] = s->span_id;
	f[2] = s->parent_span_id[0] ? s->parent_span_id : NULL;
	f[3] = s->name;
	f[4] = kind;
	f[5] = start;
	f[6] = end;
	f[7] = s->status;
	f[8] = p > 0 ? pid : NULL;
	f[9] = worker;
	f[10] = NULL;
	f[11] = NULL;
	f[12] = s->scope;
	f[13] = s->attributes;
	f[14] = s->events;
	f[15] = w->encoding == OTLP_JSON ? "json" : "protobuf";
	return idem_tsv_write_row(w->buf, "span", f, 16);
}

static void
heard_from(struct receiver *r, pid_t pid, long long now_us)
{
	size_t i;

	for (i = 0; i < r->nheard; i++)
		if (r->heard[i].pid == pid) {
			r->heard[i].at_us = now_us;
			return;
		}
	if (r->nheard < MAX_HEARD)
		i = r->nheard++;
	else
		i = r->next_heard++ % MAX_HEARD;
	r->heard[i].pid = pid;
	r->heard[i].at_us = now_us;
}

/* Decodes a body and appends its rows, all of them or none. */
static int
take(struct receiver *r, struct MHD_Connection *c, const struct request *req)
{
	struct writing w = { r, c, req->encoding, NULL, -1, -1, -1 };
	char why[256], *rows = NULL;
	size_t nspans = 0, dropped = 0, len = 0;
	int rc;

	if ((w.buf = open_memstream(&rows, &len)) == NULL)
		return refuse(r, c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", req->encoding,
		    "out of memory");
	rc = otlp_decode(req->encoding, req->body.text ? req->body.text : "", req->body.len,
	    RECEIVER_MAX_REQUEST_SPANS, r->skew_us, write_span, &w, &nspans, &dropped, why,
	    sizeof(why));
	if (fclose(w.buf) != 0 && rc == OTLP_OK)
		rc = OTLP_STOPPED;
	if (rc != OTLP_OK) {
		free(rows);
		return rc == OTLP_TOO_MANY ? refuse(r, c, MHD_HTTP_CONTENT_TOO_LARGE, "too-many-spans",
		    req->encoding, why) : rc == OTLP_BAD ? refuse(r, c, MHD_HTTP_BAD_REQUEST,
		    req->encoding == OTLP_JSON ? "bad-json" : "bad-protobuf", req->encoding, why) :
		    refuse(r, c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", req->encoding,
		    "out of memory");
	}
	pthread_mutex_lock(&r->lock);
	if (r->spans + (long long)nspans > RECEIVER_MAX_RUN_SPANS) {
		pthread_mutex_unlock(&r->lock);
		free(rows);
		return refuse(r, c, MHD_HTTP_CONTENT_TOO_LARGE, "run-spans", req->encoding,
		    "the run's spans are at their limit");
	}
	if (len > 0 && fwrite(rows, 1, len, r->rows) != len)
		r->write_failed = 1;
	r->requests++;
	r->spans += (long long)nspans;
	r->dropped += (long long)dropped;
	if (nspans > 0)
		heard_from(r, w.last_pid, idem_now_us());
	pthread_mutex_unlock(&r->lock);
	free(rows);
	return answer(c, MHD_HTTP_OK, req->encoding, "");
}

/* A gzip body inflated, at most RECEIVER_MAX_BODY bytes: 0, -1 when it
 * is not gzip, -2 when it inflates to more. */
static int
gunzip(struct request *req)
{
	z_stream z;
	char *out = idem_emalloc(RECEIVER_MAX_BODY + 1);
	int rc;

	memset(&z, 0, sizeof(z));
	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
		free(out);
		return -1;
	}
	z.next_in = (Bytef *)req->body.text;
	z.avail_in = (uInt)req->body.len;
	z.next_out = (Bytef *)out;
	z.avail_out = RECEIVER_MAX_BODY + 1;
	rc = inflate(&z, Z_FINISH);
	inflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(out);
		return rc == Z_BUF_ERROR && z.avail_out == 0 ? -2 : -1;
	}
	free(req->body.text);
	req->body.text = out;
	req->body.len = z.total_out;
	return 0;
}

/* The headers of a request, on its first call: NULL when it may go on,
 * else the reason it is refused and, in *status, the status. */
static const char *
check_headers(struct MHD_Connection *c, const char *url, const char *method,
	      struct request *req, unsigned *status)
{
	const char *encoding = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_CONTENT_ENCODING);
	const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_CONTENT_LENGTH);

	if (strcmp(url, "/v1/traces") != 0)
		return *status = MHD_HTTP_NOT_FOUND, "not-found";
	if (strcmp(method, "POST") != 0)
		return *status = MHD_HTTP_METHOD_NOT_ALLOWED, "method";
	if (content_type(c, &req->encoding) < 0)
		return *status = MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "content-type";
	if (encoding != NULL && strcasecmp(encoding, "identity") != 0) {
		if (strcasecmp(encoding, "gzip") != 0)
			return *status = MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "content-encoding";
		req->gzip = 1;
	}
	if (length != NULL && strtoull(length, NULL, 10) > RECEIVER_MAX_BODY)
		return *status = MHD_HTTP_CONTENT_TOO_LARGE, "too-large";
	return NULL;
}

static enum MHD_Result
handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
       const char *version, const char *upload_data, size_t *upload_data_size, void **state)
{
	struct receiver *r = cls;
	struct request *req = *state;
	const char *reason;
	unsigned status;
	int rc;

	(void)version;
	if (req == NULL) {
		*state = req = idem_emalloc(sizeof(*req));
		memset(req, 0, sizeof(*req));
		req->encoding = OTLP_JSON;
		if ((reason = check_headers(c, url, method, req, &status)) != NULL)
			return refuse(r, c, status, reason, req->encoding, reason);
		return MHD_YES;
	}
	if (loopback_gather(&req->body, upload_data, upload_data_size, RECEIVER_MAX_BODY))
		return MHD_YES;
	if (req->body.too_large)
		return refuse(r, c, MHD_HTTP_CONTENT_TOO_LARGE, "too-large", req->encoding,
		    "body too large");
	if (req->gzip && (rc = gunzip(req)) < 0)
		return rc == -2 ? refuse(r, c, MHD_HTTP_CONTENT_TOO_LARGE, "too-large", req->encoding,
		    "body too large, inflated") : refuse(r, c, MHD_HTTP_BAD_REQUEST, "bad-gzip",
		    req->encoding, "not gzip");
	return take(r, c, req);
}

struct receiver *
receiver_start(long long skew_us, struct idem_error *err)
{
	struct receiver *r = idem_emalloc(sizeof(*r));
	unsigned port;

	memset(r, 0, sizeof(*r));
	r->skew_us = skew_us;
	r->refused = json_object();
	pthread_mutex_init(&r->lock, NULL);
	if ((r->rows = tmpfile()) == NULL) {
		idem_error_set(err, IDEM_EXIT_ENV, "holding the spans: %s", strerror(errno));
		goto fail;
	}
	if ((r->daemon = loopback_start(handle, r, 30u, "the span receiver", &port, err)) == NULL)
		goto fail;
	snprintf(r->endpoint, sizeof(r->endpoint), "http://127.0.0.1:%u/v1/traces", port);
	return r;
fail:
	receiver_free(r);
	return NULL;
}

const char *
receiver_endpoint(const struct receiver *r)
{
	return r->endpoint;
}

void
receiver_workers(struct receiver *r, const pid_t *groups, int n)
{
	pthread_mutex_lock(&r->lock);
	r->ngroups = n < MAX_GROUPS ? n : MAX_GROUPS;
	memcpy(r->groups, groups, (size_t)r->ngroups * sizeof(*groups));
	pthread_mutex_unlock(&r->lock);
}

long long
receiver_heard_us(struct receiver *r, pid_t pid)
{
	long long at = 0;
	size_t i;

	pthread_mutex_lock(&r->lock);
	for (i = 0; i < r->nheard; i++)
		if (r->heard[i].pid == pid)
			at = r->heard[i].at_us;
	pthread_mutex_unlock(&r->lock);
	return at;
}

int
receiver_heard_any(struct receiver *r)
{
	int any;

	pthread_mutex_lock(&r->lock);
	any = r->nheard > 0;
	pthread_mutex_unlock(&r->lock);
	return any;
}

FILE *
receiver_stop(struct receiver *r, struct receiver_counts *counts)
{
	if (r->daemon != NULL)
		MHD_stop_daemon(r->daemon);
	r->daemon = NULL;
	counts->requests = r->requests;
	counts->spans = r->spans;
	counts->dropped_attributes = r->dropped;
	counts->refused = json_dumps(r->refused, JSON_COMPACT | JSON_SORT_KEYS);
	counts->write_failed = r->write_failed || fflush(r->rows) != 0 ||
	    fseek(r->rows, 0, SEEK_SET) != 0;
	return r->rows;
}

void
receiver_free(struct receiver *r)
{
	if (r == NULL)
		return;
	if (r->daemon != NULL)
		MHD_stop_daemon(r->daemon);
	if (r->rows != NULL)
		fclose(r->rows);
	json_decref(r->refused);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
