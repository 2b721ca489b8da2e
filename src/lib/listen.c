/* listen.c -- see listen.h. */
#include "lib/listen.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

struct evconnlistener *listen_tcp(struct event_base *base, const char *bind,
                                  int port, evconnlistener_cb cb, void *arg,
                                  const char *what, char *addr, size_t addrlen,
                                  char *err, size_t errlen) {
    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    snprintf(addr, addrlen, strchr(bind, ':') ? "[%s]:%d" : "%s:%d", bind, port);
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen)) {
        snprintf(err, errlen, "invalid --bind address '%s'", bind);
        return NULL;
    }
    struct evconnlistener *l = evconnlistener_new_bind(
        base, cb, arg,
        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 511,
        (struct sockaddr *)&ss, sslen);
    if (!l)
        snprintf(err, errlen, "cannot listen on %s (%s): %s", addr, what,
                 strerror(errno));
    return l;
}
