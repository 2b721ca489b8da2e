/* redis_ev.h -- hiredis's async context on a libevent loop, with writes
 * held until the end of the loop turn (instead of hiredis's own adapter).
 *
 * hiredis's adapter asks for a write event for every command: the loop then
 * goes round once more (epoll_ctl, epoll_wait, write, epoll_ctl) before a
 * call leaves, and its one-shot read event is deleted and added again after
 * every reply. Here the commands a turn queues leave in one write at the end
 * of that turn, the read event persists, and a write event is asked for only
 * when the socket is full or still connecting. */
#ifndef DQ_REDIS_EV_H
#define DQ_REDIS_EV_H

#include <event2/event.h>
#include <hiredis/async.h>

/* Attaches ac to base; as redisLibeventAttach, REDIS_OK or REDIS_ERR. */
int redis_ev_attach(redisAsyncContext *ac, struct event_base *base);

#endif
