/* listen.h -- a TCP listener on the loop for "bind:port" (IPv4 or IPv6). */
#ifndef DQ_LISTEN_H
#define DQ_LISTEN_H

#include <stddef.h>
#include <event2/listener.h>

/* Listens on bind:port with a backlog of 511 (close-on-exec, address
 * reuse). cb may be NULL (the listener is enabled later, as evhttp does).
 * Writes "host:port" into addr. Returns the listener, or NULL with a
 * message naming `what` in err. */
struct evconnlistener *listen_tcp(struct event_base *base, const char *bind,
                                  int port, evconnlistener_cb cb, void *arg,
                                  const char *what, char *addr, size_t addrlen,
                                  char *err, size_t errlen);

#endif
