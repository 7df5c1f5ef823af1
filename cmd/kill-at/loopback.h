/* loopback.h: the HTTP servers kill-at serves its workers on 127.0.0.1,
 * the vendor double and the span receiver: GNU libmicrohttpd, a thread
 * per connection, a port of the kernel's choosing, and each request's
 * body gathered up to a bound. */
#ifndef IDEM_LOOPBACK_H
#define IDEM_LOOPBACK_H

#include <stddef.h>

#include <microhttpd.h>

#include "error.h"

/* A request's body as it came: NUL-terminated text once there is any. */
struct loopback_body {
	char *text;
	size_t len;
	int too_large;		/* more than the bound came; the rest was dropped */
};

/* Takes one piece of a request's upload into body, up to max bytes in all:
 * 1 while the upload goes on (the handler answers MHD_YES), 0 once all
 * of it came. */
int loopback_gather(struct loopback_body *body, const char *data, size_t *size, size_t max);

/* Starts a server on 127.0.0.1 that calls handler with cls; a
 * connection's state, which the handler allocates with a struct
 * loopback_body as its first member, is freed when its request ends.
 * The port goes in *port. NULL with err set, naming what, on failure. */
struct MHD_Daemon *loopback_start(MHD_AccessHandlerCallback handler, void *cls,
				  unsigned timeout_s, const char *what, unsigned *port,
				  struct idem_error *err);

#endif
