/* The single event loop: epoll over file descriptors, one timerfd per timer,
 * and a signalfd. Nothing registered here may block. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct loop;
struct watch;
struct timer;

typedef void (*watch_cb)(struct watch *w, uint32_t events, void *userdata);
typedef void (*timer_cb)(struct timer *t, void *userdata);
typedef void (*signal_cb)(int signo, void *userdata);

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

/* One-shot timer firing after `ms` milliseconds (0 disarms). */
int timer_add(struct loop *l, timer_cb cb, void *userdata, struct timer **ret);
int timer_arm(struct timer *t, long long ms);
/* Safe to call from inside the timer's own callback. Accepts NULL. */
void timer_remove(struct timer *t);

/* Block `signo` and deliver it through the loop. */
int loop_signal(struct loop *l, int signo, signal_cb cb, void *userdata);
