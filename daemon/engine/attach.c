#include "engine/attach.h"

#include "core/buf.h"
#include "core/log.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define MAX_HEADER (16 * 1024)

int demux_feed(struct demux *d, const char *p, size_t n, demux_cb cb, void *userdata)
{
        while (n > 0) {
                if (d->remaining == 0) {
                        size_t take = sizeof(d->hdr) - d->hdr_len;
                        if (take > n)
                                take = n;
                        memcpy(d->hdr + d->hdr_len, p, take);
                        d->hdr_len += take;
                        p += take;
                        n -= take;
                        if (d->hdr_len < sizeof(d->hdr))
                                return 0;
                        d->hdr_len = 0;
                        if (d->hdr[0] > 2)
                                return -EPROTO;
                        d->stream = d->hdr[0];
                        d->remaining = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16 |
                                       (uint32_t)d->hdr[6] << 8 | d->hdr[7];
                        continue;
                }
                size_t take = d->remaining < n ? d->remaining : n;
                int r = cb(userdata, d->stream, p, take);
                if (r < 0)
                        return r;
                d->remaining -= (uint32_t)take;
                p += take;
                n -= take;
        }
        return 0;
}

enum attach_state { A_CONNECTING, A_HEADERS, A_STREAM };

struct attach {
        struct engine *eng;
        int fd;
        struct watch *w;
        enum attach_state state;
        struct buf out;    /* request, then stdin bytes */
        struct buf header; /* the HTTP response head */
        struct demux demux;
        const struct attach_ops *ops;
        void *userdata;
        /* Closed: no more callbacks. The memory stays until the round ends
         * (core/loop.h), so code that called out finds it closed. */
        bool closed;
        struct defer free_d;
};

static void attach_fail(struct attach *a, struct err *e)
{
        const struct attach_ops *ops = a->ops;
        void *ud = a->userdata;
        attach_close(a);
        ops->on_close(ud, e);
}

static void update_events(struct attach *a)
{
        uint32_t ev = EPOLLIN | EPOLLRDHUP;
        if (a->out.len > 0 || a->state == A_CONNECTING)
                ev |= EPOLLOUT;
        watch_modify(a->w, ev);
}

static int flush_out(struct attach *a)
{
        while (a->out.len > 0) {
                ssize_t k = send(a->fd, a->out.data, a->out.len, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        return -errno;
                }
                buf_consume(&a->out, (size_t)k);
        }
        update_events(a);
        return 0;
}

static int demux_to_ops(void *userdata, int stream, const char *p, size_t n)
{
        struct attach *a = userdata;
        int r = a->ops->on_data(a->userdata, stream, p, n);
        return a->closed ? -1 : r;
}

/* Returns negative when the attach was closed (callbacks may close it). */
static int handle_bytes(struct attach *a, const char *p, size_t n)
{
        struct err e = {0};
        if (a->state == A_HEADERS) {
                size_t room = MAX_HEADER - a->header.len;
                size_t take = n < room ? n : room;
                buf_append(&a->header, p, take);
                char *end = strstr(a->header.data, "\r\n\r\n");
                if (!end) {
                        if (a->header.len >= MAX_HEADER) {
                                err_set(&e, ERR_PROTOCOL, EPROTO,
                                        "the engine's attach answer has no end of headers");
                                attach_fail(a, &e);
                                return -1;
                        }
                        return 0;
                }
                size_t head_len = (size_t)(end + 4 - a->header.data);
                int status = 0;
                if (sscanf(a->header.data, "HTTP/1.%*d %d", &status) != 1 ||
                    (status != 101 && status != 200)) {
                        /* The body (if any arrived) says why, e.g. no such container. */
                        err_set(&e, ERR_ENGINE, EPROTO, "attach failed with HTTP %d: %.300s",
                                status, a->header.data + head_len);
                        attach_fail(a, &e);
                        return -1;
                }
                /* What came after the head in this read is stream data. */
                size_t used = head_len - (a->header.len - take);
                a->state = A_STREAM;
                a->ops->on_open(a->userdata);
                if (a->closed)
                        return -1;
                p += used;
                n -= used;
        }
        if (n == 0)
                return 0;
        int r = demux_feed(&a->demux, p, n, demux_to_ops, a);
        if (r == -EPROTO) {
                err_set(&e, ERR_PROTOCOL, EPROTO, "the engine's attach stream is malformed");
                attach_fail(a, &e);
        }
        return r;
}

static void on_event(struct watch *w, uint32_t events, void *userdata)
{
        struct attach *a = userdata;
        struct err e = {0};
        (void)w;
        if (a->state == A_CONNECTING) {
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                if (soerr) {
                        engine_unreachable(&e, engine_endpoint(a->eng), soerr);
                        attach_fail(a, &e);
                        return;
                }
                a->state = A_HEADERS;
        }
        if (events & EPOLLOUT) {
                int r = flush_out(a);
                if (r < 0) {
                        err_set(&e, ERR_ENGINE, r, "writing to the attach stream failed: %s",
                                strerror(-r));
                        attach_fail(a, &e);
                        return;
                }
        }
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
                char chunk[65536];
                /* Bounded work per wakeup so one busy container cannot
                 * starve the others. */
                for (int i = 0; i < 16; i++) {
                        ssize_t k = recv(a->fd, chunk, sizeof(chunk), 0);
                        if (k < 0) {
                                if (errno == EAGAIN || errno == EINTR)
                                        return;
                                err_set(&e, ERR_ENGINE, errno,
                                        "reading the attach stream failed: %s", strerror(errno));
                                attach_fail(a, &e);
                                return;
                        }
                        if (k == 0) {
                                if (a->state != A_STREAM) {
                                        err_set(&e, ERR_ENGINE, EPROTO,
                                                "the engine closed the attach connection early");
                                        attach_fail(a, &e);
                                } else {
                                        attach_fail(a, NULL);
                                }
                                return;
                        }
                        if (handle_bytes(a, chunk, (size_t)k) < 0)
                                return;
                }
        }
}

static int connect_socket(const struct engine_endpoint *ep, int *ret_fd)
{
        if (ep->unix_path) {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", ep->unix_path);
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return -errno;
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EAGAIN &&
                    errno != EINPROGRESS) {
                        int r = -errno;
                        close(fd);
                        return r;
                }
                *ret_fd = fd;
                return 0;
        }
        char port[16];
        snprintf(port, sizeof(port), "%d", ep->port);
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        /* Name resolution blocks; engines are normally named by address. */
        if (getaddrinfo(ep->host, port, &hints, &res) != 0 || !res)
                return -EHOSTUNREACH;
        int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                freeaddrinfo(res);
                return -errno;
        }
        int r = connect(fd, res->ai_addr, res->ai_addrlen) < 0 && errno != EINPROGRESS ? -errno : 0;
        freeaddrinfo(res);
        if (r < 0) {
                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

int attach_open(struct engine *eng, const char *container_id, const struct attach_ops *ops,
                void *userdata, size_t max_out, struct attach **ret, struct err *e)
{
        struct attach *a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->eng = eng;
        a->fd = -1;
        a->ops = ops;
        a->userdata = userdata;
        buf_init(&a->out, max_out + 4096);
        buf_init(&a->header, MAX_HEADER);
        int r = connect_socket(engine_endpoint(eng), &a->fd);
        if (r < 0) {
                engine_unreachable(e, engine_endpoint(eng), -r);
                attach_close(a);
                return r;
        }
        const struct engine_endpoint *ep = engine_endpoint(eng);
        char req[512];
        int n = snprintf(req, sizeof(req),
                         "POST " ENGINE_API_PREFIX "/containers/%s/attach?stream=1&stdin=1&stdout=1"
                         "&stderr=1 HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\n"
                         "Upgrade: tcp\r\nContent-Length: 0\r\n\r\n",
                         container_id, ep->host ? ep->display : "localhost");
        if (n < 0 || (size_t)n >= sizeof(req) || buf_append(&a->out, req, (size_t)n) < 0) {
                attach_close(a);
                return err_set(e, ERR_INTERNAL, EINVAL, "container id too long");
        }
        a->state = A_CONNECTING;
        r = watch_add(engine_loop(eng), a->fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, on_event, a, &a->w);
        if (r < 0) {
                attach_close(a);
                return err_set(e, ERR_INTERNAL, r, "cannot watch the attach socket");
        }
        *ret = a;
        return 0;
}

int attach_write(struct attach *a, const void *p, size_t n)
{
        if (a->closed)
                return -EPIPE;
        int r = buf_append(&a->out, p, n);
        if (r < 0)
                return r;
        if (a->state == A_STREAM)
                return flush_out(a);
        return 0;
}

static void attach_free(void *userdata)
{
        struct attach *a = userdata;
        buf_free(&a->out);
        buf_free(&a->header);
        free(a);
}

void attach_close(struct attach *a)
{
        if (!a || a->closed)
                return;
        a->closed = true;
        watch_remove(a->w);
        a->w = NULL;
        if (a->fd >= 0)
                close(a->fd);
        a->fd = -1;
        loop_defer(engine_loop(a->eng), &a->free_d, attach_free, a);
}
