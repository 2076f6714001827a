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
        struct defer *dq_head, *dq_tail; /* deferred calls, oldest first */
        struct defer *bq_head, *bq_tail; /* those of the round being made */
        struct watch *dead; /* freed after the current dispatch round */
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
        if (d->queued)
                return;
        *d = (struct defer){.loop = l, .cb = cb, .userdata = userdata, .prev = l->dq_tail,
                            .queued = true};
        if (l->dq_tail)
                l->dq_tail->next = d;
        else
                l->dq_head = d;
        l->dq_tail = d;
}

void defer_cancel(struct defer *d)
{
        if (!d || !d->queued)
                return;
        struct loop *l = d->loop;
        struct defer **head = d->in_batch ? &l->bq_head : &l->dq_head;
        struct defer **tail = d->in_batch ? &l->bq_tail : &l->dq_tail;
        if (d->prev)
                d->prev->next = d->next;
        else
                *head = d->next;
        if (d->next)
                d->next->prev = d->prev;
        else
                *tail = d->prev;
        d->prev = d->next = NULL;
        d->queued = d->in_batch = false;
}

bool defer_queued(const struct defer *d)
{
        return d && d->queued;
}

/* The calls asked for before this round's, in order: they move to the
 * batch, and each is unlinked before it is made, so a call may cancel
 * another of the batch, or free what held its own. Calls asked for
 * meanwhile wait for the next round. */
static void run_deferred(struct loop *l)
{
        l->bq_head = l->dq_head;
        l->bq_tail = l->dq_tail;
        l->dq_head = l->dq_tail = NULL;
        for (struct defer *d = l->bq_head; d; d = d->next)
                d->in_batch = true;
        while (l->bq_head) {
                struct defer *d = l->bq_head;
                defer_cb cb = d->cb;
                void *ud = d->userdata;
                defer_cancel(d);
                cb(ud);
        }
}

int loop_iterate(struct loop *l, int timeout_ms)
{
        struct epoll_event evs[64];
        /* Deferred calls waiting: look at the events without waiting. */
        int n = epoll_wait(l->epfd, evs, (int)ARRAY_SIZE(evs), l->dq_head ? 0 : timeout_ms);
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
