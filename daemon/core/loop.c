#include "core/loop.h"

#include "core/log.h"
#include "core/util.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define MAX_SIGNALS 8

struct watch {
        struct loop *loop;
        int fd;
        watch_cb cb;
        void *userdata;
        bool dead;
        struct watch *next_dead;
};

struct timer {
        struct watch *w;
        int fd;
        timer_cb cb;
        void *userdata;
};

struct loop {
        int epfd;
        bool quit;
        struct list deferred; /* deferred calls, oldest first */
        struct watch *dead;   /* freed after the current dispatch round */
        int sigfd;
        struct watch *sigwatch;
        sigset_t sigmask;
        struct {
                int signo;
                signal_cb cb;
                void *userdata;
        } signals[MAX_SIGNALS];
        size_t n_signals;
};

int loop_new(struct loop **ret)
{
        struct loop *l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (l->epfd < 0) {
                int r = -errno;
                free(l);
                return r;
        }
        l->sigfd = -1;
        list_init(&l->deferred);
        sigemptyset(&l->sigmask);
        *ret = l;
        return 0;
}

static void loop_reap(struct loop *l)
{
        while (l->dead) {
                struct watch *w = l->dead;
                l->dead = w->next_dead;
                free(w);
        }
}

void loop_free(struct loop *l)
{
        if (!l)
                return;
        watch_remove(l->sigwatch);
        if (l->sigfd >= 0)
                close(l->sigfd);
        loop_reap(l);
        close(l->epfd);
        free(l);
}

void loop_quit(struct loop *l)
{
        l->quit = true;
}

void loop_defer(struct loop *l, struct defer *d, defer_cb cb, void *userdata)
{
        if (list_linked(&d->node))
                return;
        *d = (struct defer){.loop = l, .cb = cb, .userdata = userdata};
        list_append(&l->deferred, &d->node);
}

void defer_cancel(struct defer *d)
{
        if (d)
                list_del(&d->node);
}

bool defer_queued(const struct defer *d)
{
        return d && list_linked(&d->node);
}

/* The calls asked for before this round's, in order: they move to a
 * batch, and each is unlinked before it is made, so a call may cancel
 * another of the batch, or free what held its own. Calls asked for
 * meanwhile wait for the next round. */
static void run_deferred(struct loop *l)
{
        struct list batch;
        list_init(&batch);
        list_splice_tail(&batch, &l->deferred);
        while (!list_empty(&batch)) {
                struct defer *d = list_first(&batch, struct defer, node);
                list_del(&d->node);
                d->cb(d->userdata);
        }
}

int loop_iterate(struct loop *l, int timeout_ms)
{
        struct epoll_event evs[64];
        /* Deferred calls waiting: look at the events without waiting. */
        int n = epoll_wait(l->epfd, evs, (int)ARRAY_SIZE(evs),
                           list_empty(&l->deferred) ? timeout_ms : 0);
        if (n < 0 && errno != EINTR)
                return -errno;
        for (int i = 0; i < n; i++) {
                struct watch *w = evs[i].data.ptr;
                /* A callback earlier in this round may have removed it; dead
                 * watches stay allocated until the reap below. */
                if (!w->dead)
                        w->cb(w, evs[i].events, w->userdata);
        }
        run_deferred(l);
        loop_reap(l);
        return n < 0 ? 0 : n;
}

int loop_run(struct loop *l)
{
        while (!l->quit) {
                int r = loop_iterate(l, -1);
                if (r < 0)
                        return r;
        }
        return 0;
}

int watch_add(struct loop *l, int fd, uint32_t events, watch_cb cb, void *userdata,
              struct watch **ret)
{
        struct watch *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        *w = (struct watch){.loop = l, .fd = fd, .cb = cb, .userdata = userdata};
        struct epoll_event ev = {.events = events, .data.ptr = w};
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                int r = -errno;
                free(w);
                return r;
        }
        *ret = w;
        return 0;
}

int watch_modify(struct watch *w, uint32_t events)
{
        struct epoll_event ev = {.events = events, .data.ptr = w};
        return epoll_ctl(w->loop->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0 ? -errno : 0;
}

void watch_remove(struct watch *w)
{
        if (!w || w->dead)
                return;
        /* The fd may already be closed by its owner; ignore errors. */
        epoll_ctl(w->loop->epfd, EPOLL_CTL_DEL, w->fd, NULL);
        w->dead = true;
        w->next_dead = w->loop->dead;
        w->loop->dead = w;
}

void watch_close(struct watch **w, int *fd)
{
        watch_remove(*w);
        *w = NULL;
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

static void timer_fired(struct watch *w, uint32_t events, void *userdata)
{
        struct timer *t = userdata;
        uint64_t ticks;
        (void)w;
        (void)events;
        if (read(t->fd, &ticks, sizeof(ticks)) != sizeof(ticks))
                return;
        t->cb(t, t->userdata);
}

int timer_add(struct loop *l, timer_cb cb, void *userdata, struct timer **ret)
{
        struct timer *t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (t->fd < 0) {
                int r = -errno;
                free(t);
                return r;
        }
        t->cb = cb;
        t->userdata = userdata;
        int r = watch_add(l, t->fd, EPOLLIN, timer_fired, t, &t->w);
        if (r < 0) {
                close(t->fd);
                free(t);
                return r;
        }
        *ret = t;
        return 0;
}

int timer_arm(struct timer *t, long long ms)
{
        struct itimerspec its = {0};
        if (ms > 0) {
                its.it_value.tv_sec = ms / 1000;
                its.it_value.tv_nsec = (ms % 1000) * 1000000;
        } else if (ms == 0) {
                /* Zero disarms; callers wanting "now" pass a negative value. */
        } else {
                its.it_value.tv_nsec = 1;
        }
        return timerfd_settime(t->fd, 0, &its, NULL) < 0 ? -errno : 0;
}

int timer_set(struct loop *l, struct timer **t, timer_cb cb, void *userdata, long long ms)
{
        if (!*t) {
                int r = timer_add(l, cb, userdata, t);
                if (r < 0)
                        return r;
        }
        return timer_arm(*t, ms);
}

void timer_stop(struct timer *t)
{
        if (t)
                timer_arm(t, 0);
}

void timer_remove(struct timer *t)
{
        if (!t)
                return;
        watch_remove(t->w);
        close(t->fd);
        free(t);
}

static void signal_fired(struct watch *w, uint32_t events, void *userdata)
{
        struct loop *l = userdata;
        struct signalfd_siginfo si;
        (void)w;
        (void)events;
        while (read(l->sigfd, &si, sizeof(si)) == sizeof(si))
                for (size_t i = 0; i < l->n_signals; i++)
                        if (l->signals[i].signo == (int)si.ssi_signo)
                                l->signals[i].cb((int)si.ssi_signo, l->signals[i].userdata);
}

int loop_signal(struct loop *l, int signo, signal_cb cb, void *userdata)
{
        if (l->n_signals >= MAX_SIGNALS)
                return -ENOSPC;
        sigaddset(&l->sigmask, signo);
        if (sigprocmask(SIG_BLOCK, &l->sigmask, NULL) < 0)
                return -errno;
        int fd = signalfd(l->sigfd, &l->sigmask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (l->sigfd < 0) {
                l->sigfd = fd;
                int r = watch_add(l, fd, EPOLLIN, signal_fired, l, &l->sigwatch);
                if (r < 0)
                        return r;
        }
        l->signals[l->n_signals].signo = signo;
        l->signals[l->n_signals].cb = cb;
        l->signals[l->n_signals].userdata = userdata;
        l->n_signals++;
        return 0;
}
