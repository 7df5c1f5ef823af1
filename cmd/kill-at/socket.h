/* socket.h: the step socket of idem-step(7) (run.server, run.clients):
 * the plan of the steps written beside it, each worker's step lines read
 * and answered: go on, killed there, or held for a race */
#ifndef KILL_AT_SOCKET_H
#define KILL_AT_SOCKET_H

#include <stddef.h>

/* Listens, in a private directory removed at exit, and writes the plan
 * there. */
void socket_listen(void);
/* Takes a worker's connection. */
void socket_accept(void);
/* Reads and answers the step lines of client ci. */
void socket_read(size_t ci);
/* Closes the clients' connections. */
void socket_close(void);

#endif
