/* The stdio transport (transport.h): newline-delimited JSON-RPC over the
 * pipes of a server's process (process.c). What the server writes is split
 * into bounded lines and handed up from the loop, one message per deferred
 * call, so that a handler that closes the transport is never inside a read
 * of it; reading waits while a bound's worth waits to be handed up. The
 * link ends when the process exits (its last answers handed up first), or
 * when its stdout closes and no exit follows within a second. */
#include "upstream/internal.h"
#include "upstream/transport.h"

#include "core/buf.h"
#include "core/loop.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define EXIT_WAIT_MS 1000 /* stdout closed: how long its exit status is awaited */
#define READS_MAX    64   /* chunks read per wake-up */

enum inmsg_kind { IN_MESSAGE, IN_DROPPED };

/* What is handed up, in order. */
struct inmsg {
        struct list node; /* st->inbox */
        enum inmsg_kind kind;
        size_t len;
        char data[]; /* the message, NUL-terminated */
};

struct stdio_transport {
        struct transport t;
        struct upstream *u;
        struct uproc *proc; /* NULL once reaped */
        int in_fd, out_fd;
        struct watch *w_in, *w_out;
        struct buf wbuf;
        struct line_reader lines;
        struct list inbox; /* struct inmsg, oldest first */
        size_t inbox_bytes;
        bool reading_paused; /* the inbox holds a bound's worth */
        struct defer deliver;
        bool out_eof; /* its stdout closed */
        bool ending;  /* it ended: nothing more is read; `ended` follows the inbox */
        bool ended_sent;
        char end_how[128]; /* how it ended: kept here, so that telling needs no memory */
        struct timer *exit_wait;
        char *last_words; /* its last stderr line, kept when it was reaped */
};

static void deliver(void *userdata);

static void push(struct stdio_transport *st, enum inmsg_kind kind, const char *p, size_t len)
{
        struct inmsg *m = malloc(sizeof(*m) + len + 1);
        if (!m) {
                log_warn("upstream %s: out of memory: a message was dropped", st->u->spec->name);
                return;
        }
        m->kind = kind;
        m->len = len;
        if (len)
                memcpy(m->data, p, len);
        m->data[len] = '\0';
        list_append(&st->inbox, &m->node);
        st->inbox_bytes += len;
        loop_defer(st->u->set->loop, &st->deliver, deliver, st);
}

static int on_line(void *userdata, const char *line, size_t len)
{
        struct stdio_transport *st = userdata;
        if (line)
                push(st, IN_MESSAGE, line, len);
        else
                push(st, IN_DROPPED, NULL, 0);
        return 0;
}

static void close_out(struct stdio_transport *st)
{
        watch_close(&st->w_out, &st->out_fd);
}

static void close_in(struct stdio_transport *st)
{
        watch_close(&st->w_in, &st->in_fd);
        st->wbuf.len = 0;
}

/* The link is over: handed up after whatever was read before. */
static void end(struct stdio_transport *st, const char *how)
{
        if (st->ending)
                return;
        st->ending = true;
        timer_stop(st->exit_wait);
        close_out(st);
        snprintf(st->end_how, sizeof(st->end_how), "%s", how);
        loop_defer(st->u->set->loop, &st->deliver, deliver, st);
}

/* Read what there is; `all`: until it would block (the writer is gone). */
static void read_out(struct stdio_transport *st, bool all)
{
        char chunk[65536];
        for (int i = 0; (all || i < READS_MAX) && st->out_fd >= 0; i++) {
                if (!all && st->inbox_bytes >= st->lines.max) {
                        /* Held until the inbox drains: bounded memory. */
                        st->reading_paused = true;
                        watch_remove(st->w_out);
                        st->w_out = NULL;
                        return;
                }
                ssize_t k = read(st->out_fd, chunk, sizeof(chunk));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return;
                if (k <= 0) {
                        /* Closed its output: it is as good as gone. Its exit
                         * status tells more, so wait a moment for it. */
                        close_out(st);
                        st->out_eof = true;
                        if (st->proc && uproc_watched(st->proc)) {
                                timer_arm(st->exit_wait, EXIT_WAIT_MS);
                        } else {
                                uproc_kill(st->proc, SIGKILL);
                                end(st, "closed its output");
                        }
                        return;
                }
                line_reader_feed(&st->lines, chunk, (size_t)k, on_line, st);
        }
}

static void out_ready(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        read_out(userdata, false);
}

static void exit_wait_over(struct timer *t, void *userdata)
{
        struct stdio_transport *st = userdata;
        (void)t;
        uproc_kill(st->proc, SIGKILL);
        end(st, "closed its output");
}

/* Its process was reaped: what it wrote before it went comes first. */
static void on_exited(void *userdata, const char *how)
{
        struct stdio_transport *st = userdata;
        const char *words = uproc_last_words(st->proc);
        st->last_words = words ? strdup(words) : NULL;
        if (!st->ending)
                read_out(st, true);
        st->proc = NULL;
        end(st, how);
}

static void deliver(void *userdata)
{
        struct stdio_transport *st = userdata;
        const struct transport_events *ev = st->t.ev;
        void *ud = st->t.userdata;
        if (list_empty(&st->inbox)) {
                /* The end, after every message read before it. */
                if (!st->ending || st->ended_sent)
                        return;
                st->ended_sent = true;
                char how[sizeof(st->end_how)];
                memcpy(how, st->end_how, sizeof(how));
                ev->ended(ud, how); /* the last use of st: the handler may close it */
                return;
        }
        struct inmsg *m = list_first(&st->inbox, struct inmsg, node);
        list_del(&m->node);
        st->inbox_bytes -= m->len;
        if (!list_empty(&st->inbox) || (st->ending && !st->ended_sent))
                loop_defer(st->u->set->loop, &st->deliver, deliver, st);
        if (list_empty(&st->inbox) && st->reading_paused && st->out_fd >= 0) {
                st->reading_paused = false;
                if (watch_add(st->u->set->loop, st->out_fd, EPOLLIN, out_ready, st, &st->w_out) <
                    0) {
                        uproc_kill(st->proc, SIGKILL);
                        end(st, "could not be read any more");
                }
        }
        /* The last use of st: the handler may close it. */
        size_t max = st->lines.max;
        if (m->kind == IN_MESSAGE)
                ev->message(ud, m->data, m->len);
        else
                ev->message(ud, NULL, max);
        free(m);
}

/* ---- writing to its stdin */

static void flush_in(struct stdio_transport *st);

static void in_ready(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        flush_in(userdata);
}

static void flush_in(struct stdio_transport *st)
{
        while (st->in_fd >= 0 && st->wbuf.len > 0) {
                ssize_t k = write(st->in_fd, st->wbuf.data, st->wbuf.len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN) {
                                /* EPIPE: it is dying; its exit is noticed. */
                                st->wbuf.len = 0;
                        }
                        break;
                }
                buf_consume(&st->wbuf, (size_t)k);
        }
        if (st->in_fd < 0)
                return;
        if (st->wbuf.len > 0 && !st->w_in) {
                if (watch_add(st->u->set->loop, st->in_fd, EPOLLOUT, in_ready, st, &st->w_in) < 0)
                        log_err("upstream %s: cannot wait for its stdin", st->u->spec->name);
        } else if (st->wbuf.len == 0 && st->w_in) {
                watch_remove(st->w_in);
                st->w_in = NULL;
        }
}

/* ---- the operations */

static int stdio_send(struct transport *t, const char *msg, size_t len, json_int_t id,
                      bool initialize)
{
        struct stdio_transport *st = (struct stdio_transport *)t;
        (void)id;
        (void)initialize;
        int r = buf_append(&st->wbuf, msg, len);
        if (r < 0)
                return r;
        flush_in(st);
        return 0;
}

/* Its stdout ended, or the loop has yet to read that or its exit. Every
 * writer of that pipe is the server's (the guardian keeps none), so
 * neither sign can be wrong. */
static bool stdio_gone(struct transport *t)
{
        struct stdio_transport *st = (struct stdio_transport *)t;
        if (st->out_eof || st->ending || !st->proc)
                return true;
        struct pollfd p = {.fd = st->out_fd, .events = POLLIN};
        return (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) ||
               uproc_exit_pending(st->proc);
}

static const char *stdio_last_words(struct transport *t)
{
        struct stdio_transport *st = (struct stdio_transport *)t;
        return st->proc ? uproc_last_words(st->proc) : st->last_words;
}

static void inbox_clear(struct stdio_transport *st)
{
        defer_cancel(&st->deliver);
        while (!list_empty(&st->inbox)) {
                struct inmsg *m = list_first(&st->inbox, struct inmsg, node);
                list_del(&m->node);
                free(m);
        }
        st->inbox_bytes = 0;
}

/* EOF on its stdin (the polite way), SIGTERM, SIGKILL after a grace
 * period; the set waits for the process (process.c), not for an event. */
static bool stdio_stop(struct transport *t)
{
        struct stdio_transport *st = (struct stdio_transport *)t;
        flush_in(st);
        close_in(st);
        close_out(st);
        timer_stop(st->exit_wait);
        inbox_clear(st);
        st->ending = true;
        if (st->proc)
                uproc_stop(st->proc);
        st->proc = NULL;
        return false;
}

static void stdio_close(struct transport *t)
{
        struct stdio_transport *st = (struct stdio_transport *)t;
        if (!st)
                return;
        inbox_clear(st);
        close_in(st);
        close_out(st);
        uproc_detach(st->proc);
        timer_remove(st->exit_wait);
        buf_free(&st->wbuf);
        line_reader_free(&st->lines);
        free(st->last_words);
        free(st);
}

static const struct transport_ops stdio_ops = {
    .send = stdio_send,
    .gone = stdio_gone,
    .last_words = stdio_last_words,
    .stop = stdio_stop,
    .close = stdio_close,
};

int stdio_transport_open(struct upstream *u, const struct transport_events *ev, void *userdata,
                         struct transport **ret, struct err *e)
{
        struct stdio_transport *st = calloc(1, sizeof(*st));
        if (!st)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        st->t = (struct transport){.ops = &stdio_ops, .ev = ev, .userdata = userdata};
        st->u = u;
        st->in_fd = st->out_fd = -1;
        list_init(&st->inbox);
        const struct config *cfg = u->set->cfg;
        /* What may queue for its stdin: a few calls of a frame each. */
        buf_init(&st->wbuf, 4 * cfg->max_frame);
        /* Room for a result of a whole frame plus the envelope. */
        line_reader_init(&st->lines, 2 * cfg->max_frame);
        struct loop *l = u->set->loop;
        int r = timer_add(l, exit_wait_over, st, &st->exit_wait);
        if (r < 0) {
                stdio_close(&st->t);
                return err_set(e, ERR_INTERNAL, -r, "out of memory");
        }
        r = uproc_spawn(u, on_exited, st, &st->in_fd, &st->out_fd, &st->proc, e);
        if (r == 0) {
                r = watch_add(l, st->out_fd, EPOLLIN, out_ready, st, &st->w_out);
                if (r < 0)
                        err_set(e, ERR_INTERNAL, -r, "cannot watch the server's pipes: %s",
                                strerror(-r));
        }
        if (r < 0) {
                stdio_close(&st->t);
                return r;
        }
        *ret = &st->t;
        return 0;
}
