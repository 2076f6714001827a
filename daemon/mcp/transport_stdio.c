/* The stdio transport: one JSON-RPC message per line on in_fd, answers as
 * lines on out_fd (mcp/transport.h). */
#include "mcp/transport.h"

#include "core/buf.h"
#include "core/jsonrpc.h"
#include "core/log.h"
#include "core/util.h"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define READ_CHUNK    65536
#define READS_A_ROUND 16 /* then other work gets its turn */

struct stdio_transport {
        struct transport t; /* first: the transport is the whole */
        struct loop *loop;
        const struct transport_events *events;
        void *userdata;
        int in_fd, out_fd;
        struct watch *in_watch, *out_watch;
        struct timer *file_timer; /* stdin that epoll cannot watch (a file) */
        struct line_reader lines;
        struct jrpc_id_scan scan; /* the id of a line too long to take */
        struct buf out;
        size_t out_off; /* out's bytes before this are written */
        bool stopped;
};

static void flush_out(struct stdio_transport *x);

static void out_ready(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        flush_out(userdata);
}

/* Bytes of out not yet written. */
static size_t out_left(const struct stdio_transport *x)
{
        return x->out.len - x->out_off;
}

/* Writes what the client takes now; waits for the rest with EPOLLOUT. What
 * is written is only counted (out_off): moving the rest to the front after
 * each write made a long answer (a file's megabytes, written a pipe's
 * capacity at a time) cost its size squared over the pipe's. */
static void flush_out(struct stdio_transport *x)
{
        while (out_left(x) > 0) {
                ssize_t k = write(x->out_fd, x->out.data + x->out_off, out_left(x));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN) {
                                log_err("writing to the host failed: %s", strerror(errno));
                                x->out_off = x->out.len;
                        }
                        break;
                }
                x->out_off += (size_t)k;
        }
        if (out_left(x) == 0) {
                buf_consume(&x->out, x->out.len);
                x->out_off = 0;
        }
        if (x->out.len > 0 && !x->out_watch) {
                if (watch_add(x->loop, x->out_fd, EPOLLOUT, out_ready, x, &x->out_watch) < 0)
                        log_err("cannot wait for the host to read");
        } else if (x->out.len == 0 && x->out_watch) {
                watch_remove(x->out_watch);
                x->out_watch = NULL;
        }
}

static void stdio_send(struct transport *t, json_t *msg)
{
        struct stdio_transport *x = (struct stdio_transport *)t;
        size_t len;
        char *line = jrpc_encode(msg, &len);
        if (!line) {
                log_err("cannot encode a message for the host");
                return;
        }
        /* What is written goes before more comes: one move a message. */
        if (x->out_off) {
                buf_consume(&x->out, x->out_off);
                x->out_off = 0;
        }
        if (buf_append(&x->out, line, len) < 0)
                log_err("output to the host is backed up; dropped a %zu-byte message", len);
        free(line);
        flush_out(x);
}

/* The bytes of a line too long to take go by the id scanner only. */
static void long_line_bytes(void *userdata, const char *p, size_t n)
{
        struct stdio_transport *x = userdata;
        jrpc_id_scan_feed(&x->scan, p, n);
}

/* A line too long to take has ended: reported with its id when it could
 * be read, so that the client's request does not wait forever. */
static void long_line_ended(struct stdio_transport *x)
{
        json_t *id = NULL;
        enum jrpc_scan_result k = jrpc_id_scan_end(&x->scan, &id);
        jrpc_id_scan_init(&x->scan);
        x->events->too_long(x->userdata, id, k == JRPC_SCAN_NOTIFICATION);
        json_decref(id);
}

static int on_line(void *userdata, const char *line, size_t len)
{
        struct stdio_transport *x = userdata;
        if (!line) {
                long_line_ended(x);
                return 0;
        }
        /* Tolerate CRLF and blank lines. */
        if (len && line[len - 1] == '\r')
                len--;
        if (len > 0)
                x->events->message(x->userdata, line, len);
        return 0;
}

static void stdio_stop(struct transport *t)
{
        struct stdio_transport *x = (struct stdio_transport *)t;
        if (x->stopped)
                return;
        x->stopped = true;
        watch_remove(x->in_watch);
        x->in_watch = NULL;
        timer_remove(x->file_timer);
        x->file_timer = NULL;
}

static void read_input(struct stdio_transport *x)
{
        char chunk[READ_CHUNK];
        for (int i = 0; i < READS_A_ROUND && !x->stopped; i++) {
                ssize_t k = read(x->in_fd, chunk, sizeof(chunk));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        log_err("reading from the host failed: %s", strerror(errno));
                        k = 0;
                }
                if (k == 0) {
                        log_info("the host closed stdin");
                        stdio_stop(&x->t);
                        x->events->ended(x->userdata);
                        return;
                }
                line_reader_feed(&x->lines, chunk, (size_t)k, on_line, x);
        }
        /* More may be waiting on a plain file: come back after other work. */
        if (x->file_timer)
                timer_arm(x->file_timer, -1);
}

static void in_ready(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        read_input(userdata);
}

static void in_file_tick(struct timer *t, void *userdata)
{
        (void)t;
        read_input(userdata);
}

static void stdio_flush(struct transport *t, int timeout_ms)
{
        struct stdio_transport *x = (struct stdio_transport *)t;
        long long deadline = now_ms() + timeout_ms;
        while (out_left(x) > 0 && now_ms() < deadline) {
                struct pollfd p = {.fd = x->out_fd, .events = POLLOUT};
                if (poll(&p, 1, (int)(deadline - now_ms())) <= 0)
                        break;
                size_t before = out_left(x);
                flush_out(x);
                if (out_left(x) == before)
                        break;
        }
}

static void stdio_free(struct transport *t)
{
        struct stdio_transport *x = (struct stdio_transport *)t;
        stdio_stop(t);
        watch_remove(x->out_watch);
        line_reader_free(&x->lines);
        buf_free(&x->out);
        free(x);
}

static const struct transport_ops stdio_ops = {
    .send = stdio_send,
    .stop = stdio_stop,
    .flush = stdio_flush,
    .free = stdio_free,
};

/* Reading starts: by epoll, or for a regular file or /dev/null (always
 * readable, which epoll refuses) between rounds of the loop. */
static int start_reading(struct stdio_transport *x)
{
        int r = watch_add(x->loop, x->in_fd, EPOLLIN, in_ready, x, &x->in_watch);
        if (r != -EPERM)
                return r;
        x->in_watch = NULL;
        r = timer_add(x->loop, in_file_tick, x, &x->file_timer);
        return r < 0 ? r : timer_arm(x->file_timer, -1);
}

int transport_stdio_new(struct loop *l, int in_fd, int out_fd, size_t max,
                        const struct transport_events *events, void *userdata,
                        struct transport **ret)
{
        struct stdio_transport *x = calloc(1, sizeof(*x));
        if (!x)
                return -ENOMEM;
        *x = (struct stdio_transport){.t = {.ops = &stdio_ops},
                                      .loop = l,
                                      .events = events,
                                      .userdata = userdata,
                                      .in_fd = in_fd,
                                      .out_fd = out_fd};
        line_reader_init(&x->lines, max);
        line_reader_watch_long(&x->lines, long_line_bytes, x);
        jrpc_id_scan_init(&x->scan);
        /* Output is ours to produce; the bound only catches a client that
         * stopped reading altogether. */
        buf_init(&x->out, 1ULL << 30);
        fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
        fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK);
        int r = start_reading(x);
        if (r < 0) {
                stdio_free(&x->t);
                return r;
        }
        *ret = &x->t;
        return 0;
}
