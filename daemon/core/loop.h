/* The single event loop: epoll over file descriptors, one timerfd per timer,
 * a signalfd, and deferred calls. Nothing registered here may block.
 *
 * Completions are always later. A function that starts work never calls
 * its caller's callback before it returns: the callback runs from the loop,
 * as a deferred call (loop_defer) or an event of a later round, with no
 * caller's frame below it. Cancelling after the function returned means no
 * callback. And what a callback closes stays allocated until the round
 * ends (a watch, an attach stream, a sandbox), so the code that called out
 * finds it closed, never freed. So no "was I freed meanwhile?" check is
 * needed anywhere. */
#pragma once

#include "core/list.h"

#include <stdbool.h>
#include <stdint.h>

struct loop;
struct watch;
struct timer;

typedef void (*watch_cb)(struct watch *w, uint32_t events, void *userdata);
typedef void (*timer_cb)(struct timer *t, void *userdata);
typedef void (*signal_cb)(int signo, void *userdata);
typedef void (*defer_cb)(void *userdata);

/* A deferred call, kept inside the object it is for (no allocation): made
 * once, after the current round of event dispatch, in the order asked. */
struct defer {
        struct loop *loop;
        defer_cb cb;
        void *userdata;
        struct list node; /* on the loop's queue, or a round's batch, while asked for */
};

int loop_new(struct loop **ret);
void loop_free(struct loop *l);
/* Runs until loop_quit; returns 0 or a negative errno. */
int loop_run(struct loop *l);
/* One round: wait up to timeout_ms (-1: forever) and dispatch. */
int loop_iterate(struct loop *l, int timeout_ms);
void loop_quit(struct loop *l);

/* Watch fd for EPOLLIN/EPOLLOUT; the fd stays owned by the caller. */
int watch_add(struct loop *l, int fd, uint32_t events, watch_cb cb, void *userdata,
              struct watch **ret);
int watch_modify(struct watch *w, uint32_t events);
/* Safe to call from inside the watch's own callback. Accepts NULL. */
void watch_remove(struct watch *w);
/* Removes *w (if any) and closes *fd (if >= 0), leaving them NULL and -1. */
void watch_close(struct watch **w, int *fd);

/* One-shot timer firing after `ms` milliseconds (0 disarms). */
int timer_add(struct loop *l, timer_cb cb, void *userdata, struct timer **ret);
int timer_arm(struct timer *t, long long ms);
/* Safe to call from inside the timer's own callback. Accepts NULL. */
void timer_remove(struct timer *t);
/* A timer per purpose, made when first needed: arm *t for `ms` (> 0),
 * adding it first when *t is NULL. */
int timer_set(struct loop *l, struct timer **t, timer_cb cb, void *userdata, long long ms);
/* Disarm; accepts NULL. */
void timer_stop(struct timer *t);

/* Ask for d->cb(userdata) after this round; asking again while queued
 * changes nothing (the first callback and userdata stay). A call asked for
 * from a deferred call is made in the next round. */
void loop_defer(struct loop *l, struct defer *d, defer_cb cb, void *userdata);
/* The call will not be made (if it was not made yet). Accepts NULL and an
 * idle defer; must be called before freeing what holds a queued one. */
void defer_cancel(struct defer *d);
/* Whether a call is asked for and not made yet. */
bool defer_queued(const struct defer *d);

/* Block `signo` and deliver it through the loop. */
int loop_signal(struct loop *l, int signo, signal_cb cb, void *userdata);
