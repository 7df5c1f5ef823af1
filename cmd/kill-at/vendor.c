#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "loopback.h"
#include "peer.h"
#include "seed.h"
#include "vendor.h"
#include "text.h"

#define MAX_BODY (1024 * 1024)
#define MAX_WORKERS 64
/* how long past the last late answer's time the double waits for it */
#define LATE_GRACE_US 1000000LL

struct idem_vendor {
	struct MHD_Daemon *daemon;
	char url[64], *name;
	char **fields;			/* the business key's fields of a body */
	size_t nfields;
	int honours, event_fd;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	int stopping;
	/* by business key: the fault of its first POST, [fault, delay_ms];
	 * whether the next POST that takes effect is held; the ids of its
	 * effects */
	json_t *faults, *armed, *effects;
	json_t *replies;		/* idempotency key: the first reply */
	int nlate;			/* late answers not sent yet */
	long long late_until_us;	/* when the last of them is due */
	struct idem_vendor_call **calls;	/* each apart: a held request keeps its own */
	size_t ncalls;
	long next_effect;
	/* held requests: call id, and whether let go (1) or killed (2) */
	struct { long id; int released; } *held;
	size_t nheld;
	pid_t groups[MAX_WORKERS];
	int ngroups;
};

/* A request's state, from its first byte to its answer. */
struct request {
	struct loopback_body body;	/* first: loopback frees it */
};

static void
signal_event(struct idem_vendor *v)
{
	uint64_t one = 1;

	if (write(v->event_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return;
}

char *
idem_vendor_body_key(const char *body, size_t len, char *const *fields, size_t nfields)
{
	json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	char *out = json_is_object(doc) ? idem_business_key(doc, fields, nfields) : NULL;

	json_decref(doc);
	return out;
}

static int
answer(struct MHD_Connection *c, unsigned status, const char *json)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json,
	    MHD_RESPMEM_MUST_COPY);
	int rc;

	if (r == NULL)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

/* Answers a call, with the lock held, and notes when the answer went: when
 * libmicrohttpd took it to send (a client gone by then is not known
 * yet). Unlocks. */
static int
answer_call(struct idem_vendor *v, struct MHD_Connection *c, struct idem_vendor_call *call,
	    unsigned status, const char *json)
{
	int rc = answer(c, status, json);

	call->status = (int)status;
	if (rc == MHD_YES)
		call->answered_us = idem_now_us();
	pthread_mutex_unlock(&v->lock);
	return rc;
}

/* Resets the connection with no answer. The close is abortive (SO_LINGER
 * 0, a RST), and the connection is dropped at once: libmicrohttpd shuts
 * its side down before it closes, and the client would read that FIN as
 * an empty reply first. On Linux, connecting a TCP socket to AF_UNSPEC
 * aborts its connection. */
static void
reset(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
	    MHD_CONNECTION_INFO_CONNECTION_FD);
	struct linger abortive = { 1, 0 };
	struct sockaddr none;

	if (ci == NULL)
		return;
	memset(&none, 0, sizeof(none));
	none.sa_family = AF_UNSPEC;
	setsockopt(ci->connect_fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
	connect(ci->connect_fd, &none, sizeof(none));
}

static char *
dup_or_null(const char *s)
{
	return s ? idem_estrdup(s) : NULL;
}

/* The process that holds the client end of the connection, among the
 * workers' groups, and its worker's index. Called with the lock held. */
static void
client_of(struct idem_vendor *v, struct MHD_Connection *c, struct idem_vendor_call *call)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
	    MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	struct idem_error err;
	pid_t pid, group;
	int port, i;

	call->worker = -1;
	call->pid = 0;
	if (sa == NULL || sa->sa_family != AF_INET)
		return;
	port = ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
	if ((pid = idem_peer_process(0, port, v->groups, (size_t)v->ngroups, &err)) <= 0)
		return;
	call->pid = pid;
	group = getpgid(pid);
	for (i = 0; i < v->ngroups; i++)
		if (v->groups[i] == group)
			call->worker = i;
}

/* Waits, with the lock held, until the held call is let go or the double
 * stops: 1 let go, 2 killed or stopped. */
static int
wait_held(struct idem_vendor *v, long id)
{
	size_t i;

	v->held = idem_ereallocarray(v->held, v->nheld + 1, sizeof(*v->held));
	v->held[v->nheld].id = id;
	v->held[v->nheld++].released = 0;
	signal_event(v);
	for (;;) {
		for (i = 0; i < v->nheld && v->held[i].id != id; i++)
			;
		if (v->held[i].released || v->stopping) {
			int how = v->held[i].released == 1 && !v->stopping ? 1 : 2;

			v->held[i] = v->held[--v->nheld];
			return how;
		}
		pthread_cond_wait(&v->changed, &v->lock);
	}
}

/* The fault planned for a call's business key, taken when it applies:
 * error and timeout to its first POST, lost and late to the first that
 * takes effect (charges). */
static int
take_fault(struct idem_vendor *v, const struct idem_vendor_call *call, int charges,
	   long long *delay_ms)
{
	json_t *planned = call->business_key ? json_object_get(v->faults, call->business_key) :
	    NULL;
	int fault;

	if (planned == NULL)
		return 0;
	fault = (int)json_integer_value(json_array_get(planned, 0));
	*delay_ms = json_integer_value(json_array_get(planned, 1));
	if ((fault == IDEM_VENDOR_LOST || fault == IDEM_VENDOR_LATE) && !charges)
		return 0;
	json_object_del(v->faults, call->business_key);
	return fault;
}

/* Holds a late answer, with the lock held, until due_us, or until the
 * double stops without waiting: whether its time came. */
static int
wait_late(struct idem_vendor *v, long long due_us)
{
	struct timespec until = { (time_t)(due_us / 1000000), (long)(due_us % 1000000) * 1000 };
	int came;

	v->nlate++;
	if (due_us > v->late_until_us)
		v->late_until_us = due_us;
	while (!v->stopping && idem_now_us() < due_us)
		pthread_cond_timedwait(&v->changed, &v->lock, &until);
	came = idem_now_us() >= due_us;
	v->nlate--;
	pthread_cond_broadcast(&v->changed);
	return came;
}

/* A charge: recorded first, so that a held, killed, lost or late reply
 * has taken effect all the same (the vendor did charge), and stored for
 * replay at once: a repeat of its key while a late answer waits is
 * answered at once with it. */
static int
charge(struct idem_vendor *v, struct MHD_Connection *c, struct idem_vendor_call *call)
{
	json_t *ids, *reply = NULL;
	char id[32], *text;
	long long delay_ms = 0;
	int held, rc, fault;

	if (v->honours && call->idempotency_key)
		reply = json_object_get(v->replies, call->idempotency_key);
	fault = take_fault(v, call, reply == NULL, &delay_ms);
	if (fault == IDEM_VENDOR_ERROR) {
		call->answer = "error";
		return answer_call(v, c, call, MHD_HTTP_INTERNAL_SERVER_ERROR,
		    "{\"error\":{\"message\":\"the vendor failed (a fault of the rehearsal)\"}}");
	}
	if (fault == IDEM_VENDOR_TIMEOUT) {
		call->answer = "timeout";
		while (!v->stopping)
			pthread_cond_wait(&v->changed, &v->lock);
		pthread_mutex_unlock(&v->lock);
		return MHD_NO;
	}
	if (reply != NULL) {
		call->answer = "replayed";
		call->response_id = dup_or_null(json_string_value(json_object_get(reply, "id")));
		json_object_set_new(reply, "replayed", json_true());
		text = json_dumps(reply, JSON_COMPACT);
		json_object_set_new(reply, "replayed", json_false());
		rc = answer_call(v, c, call, MHD_HTTP_OK, text);
		free(text);
		return rc;
	}
	snprintf(id, sizeof(id), "ex_%06ld", ++v->next_effect);
	call->effect = 1;
	call->response_id = idem_estrdup(id);
	reply = json_pack("{s:s,s:s,s:o,s:b}", "id", id, "object", v->name,
	    "business_key", call->business_key ? json_string(call->business_key) : json_null(),
	    "replayed", 0);
	if (call->business_key) {
		if ((ids = json_object_get(v->effects, call->business_key)) == NULL)
			json_object_set_new(v->effects, call->business_key, ids = json_array());
		json_array_append_new(ids, json_string(id));
	}
	if (v->honours && call->idempotency_key)
		json_object_set(v->replies, call->idempotency_key, reply);
	text = json_dumps(reply, JSON_COMPACT);
	json_decref(reply);
	held = 0;
	if (call->business_key && json_object_get(v->armed, call->business_key)) {
		json_object_del(v->armed, call->business_key);
		held = wait_held(v, call->id);
	}
	if (held == 2 || fault == IDEM_VENDOR_LOST) {
		call->answer = held == 2 ? "killed" : "lost";
		pthread_mutex_unlock(&v->lock);
		free(text);
		if (held != 2)
			reset(c);
		return MHD_NO;
	}
	call->answer = "ok";
	if (fault == IDEM_VENDOR_LATE) {
		call->answer = "late";
		if (!wait_late(v, call->at_us + delay_ms * 1000)) {
			pthread_mutex_unlock(&v->lock);
			free(text);
			return MHD_NO;
		}
	}
	rc = answer_call(v, c, call, MHD_HTTP_OK, text);
	free(text);
	return rc;
}

/* The charges of a business key so far: what a worker's reconciliation
 * asks; no effect. */
static int
look_up(struct idem_vendor *v, struct MHD_Connection *c, struct idem_vendor_call *call)
{
	const char *key = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "key");
	json_t *ids = key ? json_object_get(v->effects, key) : NULL, *data = json_array(), *id, *doc;
	char *text;
	size_t i;
	int rc;

	free(call->business_key);
	call->business_key = dup_or_null(key);
	call->answer = "ok";
	json_array_foreach(ids, i, id)
		json_array_append_new(data, json_pack("{s:O}", "id", id));
	doc = json_pack("{s:o}", "data", data);
	text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	rc = answer_call(v, c, call, MHD_HTTP_OK, text);
	free(text);
	return rc;
}

static enum MHD_Result
handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
       const char *version, const char *upload_data, size_t *upload_data_size, void **state)
{
	struct idem_vendor *v = cls;
	struct request *req = *state;
	struct idem_vendor_call *call;

	(void)version;
	if (req == NULL) {
		*state = req = idem_emalloc(sizeof(*req));
		memset(req, 0, sizeof(*req));
		return MHD_YES;
	}
	if (loopback_gather(&req->body, upload_data, upload_data_size, MAX_BODY))
		return MHD_YES;
	pthread_mutex_lock(&v->lock);
	v->calls = idem_ereallocarray(v->calls, v->ncalls + 1, sizeof(*v->calls));
	call = v->calls[v->ncalls++] = idem_emalloc(sizeof(*call));
	memset(call, 0, sizeof(*call));
	call->id = (long)v->ncalls;
	call->at_us = idem_now_us();
	call->method = idem_estrdup(method);
	call->path = idem_estrdup(url);
	call->idempotency_key = dup_or_null(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	    "Idempotency-Key"));
	idem_sha256_hex(req->body.text ? req->body.text : "", req->body.len, call->body_sha256);
	call->business_key = req->body.too_large ? NULL :
	    idem_vendor_body_key(req->body.text ? req->body.text : "", req->body.len, v->fields, v->nfields);
	call->answer = "";
	client_of(v, c, call);
	signal_event(v);
	if (req->body.too_large) {
		call->answer = "error";
		return answer_call(v, c, call, MHD_HTTP_CONTENT_TOO_LARGE,
		    "{\"error\":{\"message\":\"body too large\"}}");
	}
	if (strcmp(method, "POST") == 0)
		return charge(v, c, call);
	if (strcmp(method, "GET") == 0)
		return look_up(v, c, call);
	call->answer = "error";
	return answer_call(v, c, call, MHD_HTTP_METHOD_NOT_ALLOWED,
	    "{\"error\":{\"message\":\"POST or GET\"}}");
}

struct idem_vendor *
idem_vendor_start(const char *name, const char *key_fields, int honours, struct idem_error *err)
{
	struct idem_vendor *v = idem_emalloc(sizeof(*v));
	unsigned port;
	json_t *fields, *field;
	size_t i;

	memset(v, 0, sizeof(*v));
	v->name = idem_estrdup(name);
	v->honours = honours;
	fields = json_loads(key_fields, 0, NULL);
	v->faults = json_object();
	v->armed = json_object();
	v->effects = json_object();
	v->replies = json_object();
	pthread_mutex_init(&v->lock, NULL);
	pthread_cond_init(&v->changed, NULL);
	json_array_foreach(fields, i, field) {
		if (!json_is_string(field))
			break;
		v->fields = idem_ereallocarray(v->fields, v->nfields + 1, sizeof(*v->fields));
		v->fields[v->nfields++] = idem_estrdup(json_string_value(field));
	}
	if (!json_is_array(fields) || v->nfields == 0 || v->nfields != json_array_size(fields)) {
		json_decref(fields);
		idem_error_set(err, IDEM_EXIT_USAGE, "the external effect's key fields %s: expected a "
		    "JSON array of field names", key_fields);
		goto fail;
	}
	json_decref(fields);
	if ((v->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		idem_error_set(err, IDEM_EXIT_ENV, "eventfd: %s", strerror(errno));
		goto fail;
	}
	if ((v->daemon = loopback_start(handle, v, 120u, "the vendor double", &port, err)) == NULL)
		goto fail;
	snprintf(v->url, sizeof(v->url), "http://127.0.0.1:%u", port);
	return v;
fail:
	idem_vendor_free(v);
	return NULL;
}

const char *
idem_vendor_url(const struct idem_vendor *v)
{
	return v->url;
}

int
idem_vendor_fd(const struct idem_vendor *v)
{
	return v->event_fd;
}

void
idem_vendor_drain(struct idem_vendor *v)
{
	uint64_t n;

	while (read(v->event_fd, &n, sizeof(n)) == (ssize_t)sizeof(n))
		;
}

void
idem_vendor_workers(struct idem_vendor *v, const pid_t *groups, int n)
{
	pthread_mutex_lock(&v->lock);
	v->ngroups = n < MAX_WORKERS ? n : MAX_WORKERS;
	memcpy(v->groups, groups, (size_t)v->ngroups * sizeof(*groups));
	pthread_mutex_unlock(&v->lock);
}

void
idem_vendor_fault(struct idem_vendor *v, const char *business_key, enum idem_vendor_fault fault,
		  long long delay_ms)
{
	pthread_mutex_lock(&v->lock);
	json_object_set_new(v->faults, business_key, json_pack("[i,I]", (int)fault,
	    (json_int_t)delay_ms));
	pthread_mutex_unlock(&v->lock);
}

void
idem_vendor_arm(struct idem_vendor *v, const char *business_key)
{
	pthread_mutex_lock(&v->lock);
	json_object_set_new(v->armed, business_key, json_true());
	pthread_mutex_unlock(&v->lock);
}

size_t
idem_vendor_held(struct idem_vendor *v, struct idem_vendor_held *out, size_t max)
{
	size_t i, j, n = 0;

	pthread_mutex_lock(&v->lock);
	for (i = 0; i < v->nheld && n < max; i++) {
		if (v->held[i].released)
			continue;
		j = (size_t)v->held[i].id - 1;	/* ids count the calls from 1 */
		out[n].id = v->held[i].id;
		out[n].worker = v->calls[j]->worker;
		out[n].pid = v->calls[j]->pid;
		out[n++].business_key = dup_or_null(v->calls[j]->business_key);
	}
	pthread_mutex_unlock(&v->lock);
	return n;
}

void
idem_vendor_release(struct idem_vendor *v, long id, int killed)
{
	size_t i;

	pthread_mutex_lock(&v->lock);
	for (i = 0; i < v->nheld; i++)
		if (v->held[i].id == id)
			v->held[i].released = killed ? 2 : 1;
	pthread_cond_broadcast(&v->changed);
	pthread_mutex_unlock(&v->lock);
}

/* The keys are found through the calls, which the double keeps, in
 * order: the first call that sent a key is the first found. */
size_t
idem_vendor_forget(struct idem_vendor *v, const char *business_key,
		   struct idem_vendor_forgot **out)
{
	const char *of;
	json_t *reply;
	size_t n = 0, i;

	*out = NULL;
	pthread_mutex_lock(&v->lock);
	for (i = 0; i < v->ncalls && json_object_size(v->replies) > 0; i++) {
		const struct idem_vendor_call *call = v->calls[i];

		if (call->idempotency_key == NULL ||
		    (reply = json_object_get(v->replies, call->idempotency_key)) == NULL)
			continue;
		of = json_string_value(json_object_get(reply, "business_key"));
		if (of == NULL || strcmp(of, business_key) != 0)
			continue;
		*out = idem_ereallocarray(*out, n + 1, sizeof(**out));
		(*out)[n].idempotency_key = idem_estrdup(call->idempotency_key);
		(*out)[n++].first_call = call->id;
		json_object_del(v->replies, call->idempotency_key);
	}
	pthread_mutex_unlock(&v->lock);
	return n;
}

int
idem_vendor_late_wait(struct idem_vendor *v, long long max_us)
{
	long long bound, until_us = idem_now_us() + max_us;
	struct timespec until = { (time_t)(until_us / 1000000), (long)(until_us % 1000000) * 1000 };
	int due;

	pthread_mutex_lock(&v->lock);
	while (v->nlate > 0 && idem_now_us() < until_us &&
	    idem_now_us() < v->late_until_us + LATE_GRACE_US)
		pthread_cond_timedwait(&v->changed, &v->lock, &until);
	bound = v->late_until_us + LATE_GRACE_US;
	due = v->nlate > 0 && idem_now_us() < bound;
	pthread_mutex_unlock(&v->lock);
	return due;
}

/* Stops the double; with for_late, once the late answers due have gone,
 * or a grace after the last one's time. */
static void
stop(struct idem_vendor *v, int for_late)
{
	struct timespec until;
	long long bound;

	pthread_mutex_lock(&v->lock);
	while (for_late && v->nlate > 0 &&
	    idem_now_us() < (bound = v->late_until_us + LATE_GRACE_US)) {
		until.tv_sec = (time_t)(bound / 1000000);
		until.tv_nsec = (long)(bound % 1000000) * 1000;
		pthread_cond_timedwait(&v->changed, &v->lock, &until);
	}
	v->stopping = 1;
	pthread_cond_broadcast(&v->changed);
	pthread_mutex_unlock(&v->lock);
	if (v->daemon != NULL)
		MHD_stop_daemon(v->daemon);
	v->daemon = NULL;
}

void
idem_vendor_stop(struct idem_vendor *v, struct idem_vendor_call *const **calls, size_t *n)
{
	stop(v, 1);
	*calls = v->calls;
	*n = v->ncalls;
}

void
idem_vendor_free(struct idem_vendor *v)
{
	size_t i;

	if (v == NULL)
		return;
	stop(v, 0);
	for (i = 0; i < v->ncalls; i++) {
		free(v->calls[i]->method);
		free(v->calls[i]->path);
		free(v->calls[i]->idempotency_key);
		free(v->calls[i]->business_key);
		free(v->calls[i]->response_id);
		free(v->calls[i]);
	}
	free(v->calls);
	free(v->held);
	free(v->name);
	idem_free_list(v->fields, v->nfields);
	json_decref(v->faults);
	json_decref(v->armed);
	json_decref(v->effects);
	json_decref(v->replies);
	if (v->event_fd > 0)
		close(v->event_fd);
	pthread_mutex_destroy(&v->lock);
	pthread_cond_destroy(&v->changed);
	free(v);
}
