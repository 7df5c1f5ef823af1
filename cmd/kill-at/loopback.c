#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loopback.h"
#include "error.h"

int
loopback_gather(struct loopback_body *body, const char *data, size_t *size, size_t max)
{
	if (*size == 0)
		return 0;
	if (body->len + *size > max) {
		body->too_large = 1;
	} else {
		body->text = idem_erealloc(body->text, body->len + *size + 1);
		memcpy(body->text + body->len, data, *size);
		body->len += *size;
		body->text[body->len] = '\0';
	}
	*size = 0;
	return 1;
}

static void
completed(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode how)
{
	struct loopback_body *body = *state;

	(void)cls;
	(void)c;
	(void)how;
	if (body != NULL) {
		free(body->text);
		free(body);
	}
	*state = NULL;
}

struct MHD_Daemon *
loopback_start(MHD_AccessHandlerCallback handler, void *cls, unsigned timeout_s, const char *what,
	       unsigned *port, struct idem_error *err)
{
	const union MHD_DaemonInfo *info;
	struct sockaddr_in addr;
	struct MHD_Daemon *d;

	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0,
	    NULL, NULL, handler, cls, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
	    MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
	    MHD_OPTION_END);
	if (d == NULL) {
		idem_error_set(err, IDEM_EXIT_ENV, "starting %s on 127.0.0.1: %s", what,
		    strerror(errno));
		return NULL;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	*port = info ? (unsigned)info->port : 0u;
	return d;
}
