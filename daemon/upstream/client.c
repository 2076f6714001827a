#include "upstream/client.h"

#include "core/buf.h"
#include "core/curl_loop.h"
#include "core/jsonrpc.h"
#include "core/confine.h"
#include "core/list.h"
#include "core/log.h"
#include "upstream/http.h"
#include "upstream/mask.h"

#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef CORRAL_VERSION
#define CORRAL_VERSION "0"
#endif

#define PROTOCOL_VERSION "2025-06-18"
#define START_TIMEOUT_MS 60000 /* spawn..tools listed (npx may download first) */
#define STOP_GRACE_MS    2000  /* SIGTERM..SIGKILL at shutdown */
#define SHORT_LIFE_MS    10000 /* dying sooner than this backs the restart off */
#define BACKOFF_MAX_MS   30000
#define MAX_TOOL_PAGES   100
#define MAX_TOOLS        10000
#define STDERR_LINE_MAX  4096
#define STDERR_LOG_MAX   (256 * 1024) /* stderr bytes logged per process */
/* Bytes of what a server says that go on, each masked before it is cut
 * (upstream/mask.h): the code in a sandbox controls the length of what it
 * sends, and so where a cut of an echo of it would land. */
#define LAST_ERROR_MAX  1000 /* last_error, which list_servers shows */
#define STDERR_SHOWN    1000 /* a stderr line in the log */
#define STDERR_IN_ERROR 400  /* the last stderr line in last_error */
#define MESSAGE_SHOWN   300  /* a server's own error message in last_error */
#define LOG_SHOWN       1000 /* a server's log message, or why a listing failed */
#define LINE_SHOWN      200  /* a line that is not JSON-RPC */

extern char **environ;

enum ustate {
        U_IDLE,     /* never started */
        U_STARTING, /* spawned; initialize and tools/list under way */
        U_READY,
        U_DEAD, /* exited or failed to start; the next call restarts it */
};

struct upstream_call {
        struct upstream *u;
        struct list node; /* u->calls */
        json_int_t id;    /* 0 until sent */
        char *method;
        json_t *params;
        bool ready_wait; /* upstream_when_ready: no request of its own */
        size_t max_result;
        struct timer *timer;
        upstream_cb cb;
        void *userdata;
        /* Ended: its outcome, handed to the caller from the loop. */
        bool ended;
        json_t *result;
        struct err err;
        bool failed;
        struct defer d;
};

struct upstream {
        struct upstream_set *set;
        const struct upstream_spec *spec;
        enum ustate state;
        pid_t pid; /* > 0 while a process exists (until reaped) */
        int pidfd, in_fd, out_fd, err_fd;
        struct watch *w_in, *w_out, *w_err, *w_pid;
        struct buf wbuf;
        struct line_reader lines, errlines;
        unsigned long long err_logged;
        json_int_t next_id, init_id, list_id;
        json_t *tools;   /* cached listing */
        json_t *listing; /* pages so far */
        int pages;
        unsigned long long listing_bytes; /* of the pages so far */
        bool relist;                      /* the list changed while it was being read */
        struct list calls;                /* newest first */
        struct timer *timer;              /* start deadline, restart back-off, kill grace */
        char *last_error;
        char *last_stderr;
        long long started_ms, retry_at_ms;
        long long backoff_ms;
        bool stopping;
        bool out_eof; /* its stdout closed; its exit is awaited briefly */
        /* A streamable HTTP server: the connection instead of a process. */
        struct http_conn *http;
        bool http_stopping; /* its session's DELETE is under way */
        /* Its own secrets of MASK_ANSWER_MIN bytes or more, masked in its
         * successful answers and tool list (upstream/mask.h). */
        struct mask *answer_mask;
};

struct upstream_set {
        struct loop *loop;
        struct curl_loop *curl; /* for HTTP servers; made on first use */
        const struct config *cfg;
        struct registry reg;
        struct upstream *v;
        size_t n;
        bool shutting_down;
        struct timer *grace;
        void (*done)(void *);
        void *done_ud;
};

static void u_kill(struct upstream *u, int sig);
static void u_died(struct upstream *u, const char *why);
static void u_start(struct upstream *u);
static void flush_in(struct upstream *u);
static void check_stopped(struct upstream_set *set);

/* ---- small helpers */

/* text[0..len) masked, cut to `max` (0: not cut) and made valid UTF-8
 * (caller frees; NULL when out of memory). */
static char *masked_n(const struct upstream_set *set, const char *text, size_t len, size_t max,
                      unsigned flags)
{
        return utf8_scrub(mask_text(set->reg.mask, text, len, max, flags));
}

/* A message made whole, then masked and cut to fit in out[0..size): what
 * it quotes (a command, a path, a server's words) may hold a secret. */
static void masked_message(const struct upstream_set *set, char *out, size_t size, const char *fmt,
                           va_list ap) _printf_(4, 0);
static void masked_message(const struct upstream_set *set, char *out, size_t size, const char *fmt,
                           va_list ap)
{
        char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0) {
                snprintf(out, size, "out of memory");
                return;
        }
        mask_into(set->reg.mask, msg, strlen(msg), 0, out, size);
        utf8_scrub(out);
        free(msg);
}

static int err_masked(const struct upstream_set *set, struct err *e, enum err_kind kind, int code,
                      const char *fmt, ...) _printf_(5, 6);
static int err_masked(const struct upstream_set *set, struct err *e, enum err_kind kind, int code,
                      const char *fmt, ...)
{
        err_set(e, kind, code, "out of memory");
        va_list ap;
        va_start(ap, fmt);
        masked_message(set, e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        return e->code;
}

static void set_last_error(struct upstream *u, const char *fmt, ...) _printf_(2, 3);
static void set_last_error(struct upstream *u, const char *fmt, ...)
{
        char *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        va_end(ap);
        free(u->last_error);
        u->last_error = msg ? upstream_mask(u->set, msg, LAST_ERROR_MAX) : NULL;
        free(msg);
}

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
        return (int)syscall(SYS_pidfd_open, pid, 0);
#else
        errno = ENOSYS;
        return -1;
#endif
}

static void call_unlink(struct upstream_call *c)
{
        list_del(&c->node);
}

static void call_free(struct upstream_call *c)
{
        /* Over HTTP the request has a transfer of its own: stop it. */
        if (c->id && c->u->http)
                http_conn_forget(c->u->http, c->id);
        timer_remove(c->timer);
        json_decref(c->params);
        free(c->method);
        free(c);
}

/* Unlink, call back once, free. */
static void call_deliver(void *userdata)
{
        struct upstream_call *c = userdata;
        upstream_cb cb = c->cb;
        void *ud = c->userdata;
        json_t *result = c->result;
        struct err e = c->err;
        bool failed = c->failed;
        free(c);
        cb(ud, result, failed ? &e : NULL);
        json_decref(result);
}

/* The call is over: off the server's list now, its caller told from the
 * loop (core/loop.h). `result` is borrowed. */
static void call_finish(struct upstream_call *c, json_t *result, const struct err *e)
{
        struct loop *l = c->u->set->loop;
        call_unlink(c);
        if (c->id && c->u->http)
                http_conn_forget(c->u->http, c->id);
        timer_remove(c->timer);
        c->timer = NULL;
        json_decref(c->params);
        c->params = NULL;
        free(c->method);
        c->method = NULL;
        c->ended = true;
        c->result = json_incref(result);
        if (e) {
                c->err = *e;
                c->failed = true;
        }
        loop_defer(l, &c->d, call_deliver, c);
}

static void call_fail(struct upstream_call *c, int code, const char *fmt, ...) _printf_(3, 4);
static void call_fail(struct upstream_call *c, int code, const char *fmt, ...)
{
        struct err e = {.kind = ERR_INTERNAL, .code = code};
        va_list ap;
        va_start(ap, fmt);
        masked_message(c->u->set, e.msg, sizeof(e.msg), fmt, ap);
        va_end(ap);
        call_finish(c, NULL, &e);
}

static int send_json(struct upstream *u, json_t *msg)
{
        json_int_t id = 0;
        bool initialize = false;
        if (u->spec->transport == UP_HTTP && msg) {
                /* The POST of a request of ours carries its answer. */
                const char *method = json_string_value(json_object_get(msg, "method"));
                json_t *jid = json_object_get(msg, "id");
                if (method && json_is_integer(jid)) {
                        id = json_integer_value(jid);
                        initialize = strcmp(method, "initialize") == 0;
                }
        }
        size_t len;
        char *line = jrpc_encode(msg, &len);
        if (!line)
                return -ENOMEM;
        if (u->spec->transport == UP_HTTP) {
                int k = u->http ? http_conn_post(u->http, line, len, id, initialize) : -ENOTCONN;
                free(line);
                return k;
        }
        int r = buf_append(&u->wbuf, line, len);
        free(line);
        if (r < 0)
                return r;
        flush_in(u);
        return 0;
}

/* ---- writing to the server's stdin */

static void in_ready(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        flush_in(userdata);
}

static void flush_in(struct upstream *u)
{
        while (u->in_fd >= 0 && u->wbuf.len > 0) {
                ssize_t k = write(u->in_fd, u->wbuf.data, u->wbuf.len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN) {
                                /* EPIPE: it is dying; its exit is noticed. */
                                u->wbuf.len = 0;
                        }
                        break;
                }
                buf_consume(&u->wbuf, (size_t)k);
        }
        if (u->in_fd < 0)
                return;
        if (u->wbuf.len > 0 && !u->w_in) {
                if (watch_add(u->set->loop, u->in_fd, EPOLLOUT, in_ready, u, &u->w_in) < 0)
                        log_err("upstream %s: cannot wait for its stdin", u->spec->name);
        } else if (u->wbuf.len == 0 && u->w_in) {
                watch_remove(u->w_in);
                u->w_in = NULL;
        }
}

/* ---- requests */

static void send_call(struct upstream_call *c)
{
        struct upstream *u = c->u;
        c->id = ++u->next_id;
        json_t *params = c->params;
        c->params = NULL;
        json_t *msg = jrpc_request(c->id, c->method, params);
        int r = msg ? send_json(u, msg) : -ENOMEM;
        if (r < 0 && u->spec->transport == UP_HTTP)
                call_fail(c, UPE_UNAVAILABLE, "cannot send %s to server '%s': %s", c->method,
                          u->spec->name, strerror(-r));
        else if (r < 0)
                call_fail(c, UPE_TOO_LARGE,
                          "the request does not fit in what corral queues for server '%s'",
                          u->spec->name);
}

/* The newest call not sent yet, or NULL. */
static struct upstream_call *first_unsent(struct upstream *u)
{
        struct upstream_call *c;
        list_for_each(c, &u->calls, node)
        {
                if (c->id == 0)
                        return c;
        }
        return NULL;
}

static void became_ready(struct upstream *u)
{
        u->state = U_READY;
        u->backoff_ms = 0;
        timer_arm(u->timer, 0);
        free(u->last_error);
        u->last_error = NULL;
        log_info("upstream %s: connected, %zu tools", u->spec->name, json_array_size(u->tools));
        /* Those that waited go (their callers hear from the loop). Each
         * step sends or ends one, and the walk starts over: whatever a
         * step does to the list, no stale neighbour is followed. */
        struct upstream_call *c;
        while ((c = first_unsent(u)))
                if (c->ready_wait)
                        call_finish(c, u->tools, NULL);
                else
                        send_call(c);
}

static void request_tools(struct upstream *u, const char *cursor)
{
        json_t *params = cursor ? json_pack("{s:s}", "cursor", cursor) : NULL;
        u->list_id = ++u->next_id;
        if (send_json(u, jrpc_request(u->list_id, "tools/list", params)) < 0)
                u_died(u, "cannot send tools/list");
}

static void tools_page(struct upstream *u, json_t *result, json_t *error, size_t len)
{
        if (u->http && u->list_id)
                http_conn_forget(u->http, u->list_id);
        u->list_id = 0;
        u->listing_bytes += len;
        if (error) {
                /* A server without tools: an empty list, not a failure. */
                const char *m = json_string_value(json_object_get(error, "message"));
                char *masked = upstream_mask(u->set, m ? m : "no message", LOG_SHOWN);
                log_info("upstream %s: tools/list failed: %s", u->spec->name,
                         masked ? masked : "?");
                free(masked);
        } else {
                json_t *tools = json_object_get(result, "tools");
                size_t i;
                json_t *t;
                json_array_foreach(tools, i, t)
                {
                        const char *name = json_string_value(json_object_get(t, "name"));
                        if (!name || !*name || strlen(name) > 256) {
                                log_warn("upstream %s: ignored a tool without a valid name",
                                         u->spec->name);
                                continue;
                        }
                        if (json_array_size(u->listing) >= MAX_TOOLS)
                                break;
                        json_array_append(u->listing, t);
                }
                const char *cursor = json_string_value(json_object_get(result, "nextCursor"));
                /* Bounded in pages, tools and bytes: a listing must fit in
                 * one frame to a sandbox anyway. */
                if (cursor && u->listing_bytes > 2 * u->set->cfg->max_frame)
                        log_warn("upstream %s: its tool list passed %llu bytes; the rest is "
                                 "ignored",
                                 u->spec->name, 2 * u->set->cfg->max_frame);
                else if (cursor && ++u->pages < MAX_TOOL_PAGES &&
                         json_array_size(u->listing) < MAX_TOOLS) {
                        request_tools(u, cursor);
                        return;
                }
        }
        /* Tool descriptions reach sandboxed code and the client: masked as
         * answers are, but for the names, by which calls find the tools. */
        json_t *masked = mask_json(u->answer_mask, u->listing);
        size_t ti;
        json_t *tool;
        json_array_foreach(masked, ti, tool)
        {
                json_t *name = json_object_get(json_array_get(u->listing, ti), "name");
                if (json_is_object(tool) && name)
                        json_object_set(tool, "name", name);
        }
        json_decref(u->listing);
        json_decref(u->tools);
        u->tools = masked ? masked : json_array();
        u->listing = json_array();
        u->pages = 0;
        u->listing_bytes = 0;
        if (u->relist) {
                u->relist = false;
                request_tools(u, NULL);
        }
        if (u->state == U_STARTING)
                became_ready(u);
}

static void list_again(struct upstream *u)
{
        if (u->list_id) {
                u->relist = true;
                return;
        }
        json_array_clear(u->listing);
        u->listing_bytes = 0;
        u->pages = 0;
        request_tools(u, NULL);
}

static void initialized(struct upstream *u, json_t *result, json_t *error)
{
        /* Over HTTP its POST may stay open (an event stream): end it. */
        if (u->http && u->init_id)
                http_conn_forget(u->http, u->init_id);
        u->init_id = 0;
        if (error || !json_is_object(result)) {
                const char *m = json_string_value(json_object_get(error, "message"));
                _cleanup_free_ char *shown =
                    upstream_mask(u->set, m ? m : "not an object", MESSAGE_SHOWN);
                set_last_error(u, "initialize failed: %s", shown ? shown : "?");
                u_kill(u, SIGKILL);
                u_died(u, NULL);
                return;
        }
        const char *v = json_string_value(json_object_get(result, "protocolVersion"));
        _cleanup_free_ char *shown = upstream_mask(u->set, v ? v : "?", 100);
        log_debug("upstream %s: protocol %s", u->spec->name, shown ? shown : "?");
        /* Over HTTP every later request names the version agreed on. */
        if (u->http && http_conn_set_protocol_version(u->http, v) < 0)
                http_conn_set_protocol_version(u->http, PROTOCOL_VERSION);
        if (send_json(u, jrpc_notification("notifications/initialized", NULL)) < 0) {
                u_died(u, "cannot send notifications/initialized");
                return;
        }
        /* What the server sends unasked (list changes, logs) comes on a
         * stream of its own. */
        if (u->http && http_conn_listen(u->http) < 0)
                log_warn("upstream %s: cannot open the stream for its own messages", u->spec->name);
        request_tools(u, NULL);
}

/* The server asks something of us. */
static void answer_server(struct upstream *u, struct jrpc_msg *m)
{
        json_t *reply;
        if (strcmp(m->method, "ping") == 0)
                reply = jrpc_result(m->id, json_object());
        else if (strcmp(m->method, "roots/list") == 0)
                reply = jrpc_result(m->id, json_pack("{s:[]}", "roots")); /* none declared */
        else if (strcmp(m->method, "elicitation/create") == 0)
                reply = jrpc_result(m->id, json_pack("{s:s}", "action", "decline"));
        else if (strcmp(m->method, "sampling/createMessage") == 0)
                reply = jrpc_error(m->id, JRPC_METHOD_NOT_FOUND,
                                   "corral does not offer sampling to servers", NULL);
        else
                reply = jrpc_error(m->id, JRPC_METHOD_NOT_FOUND, "method not found", NULL);
        if (send_json(u, reply) < 0) {
                _cleanup_free_ char *shown = upstream_mask(u->set, m->method, 100);
                log_warn("upstream %s: cannot answer its %s", u->spec->name, shown ? shown : "?");
        }
}

static struct upstream_call *call_with_id(struct upstream *u, json_int_t id)
{
        struct upstream_call *c;
        list_for_each(c, &u->calls, node)
        {
                if (c->id != 0 && c->id == id)
                        return c;
        }
        return NULL;
}

static struct upstream_call *call_by_id(struct upstream *u, json_t *id)
{
        return json_is_integer(id) ? call_with_id(u, json_integer_value(id)) : NULL;
}

static int on_line(void *userdata, const char *line, size_t len)
{
        struct upstream *u = userdata;
        if (!line) {
                log_warn("upstream %s: dropped a message over %llu bytes", u->spec->name,
                         (unsigned long long)u->lines.max);
                /* Its id is unknown. A tool list being read is the likely
                 * one (its pages are the largest answers nobody bounds);
                 * else a single call waiting must be this one. */
                if (u->list_id) {
                        json_t *why = json_pack("{s:s}", "message", "a page over the limit");
                        tools_page(u, NULL, why, 0);
                        json_decref(why);
                } else if (list_length(&u->calls) == 1 &&
                           list_first(&u->calls, struct upstream_call, node)->id)
                        call_fail(list_first(&u->calls, struct upstream_call, node), UPE_TOO_LARGE,
                                  "server '%s' answered with a message over %llu bytes",
                                  u->spec->name, (unsigned long long)u->lines.max);
                return 0;
        }
        if (len && line[len - 1] == '\r')
                len--;
        if (len == 0)
                return 0;
        struct jrpc_msg m;
        json_t *id = NULL;
        struct err e = {0};
        int r = jrpc_parse(line, len, &m, &id, &e);
        if (r < 0) {
                if (r != JRPC_PARSE_ERROR && id) {
                        /* A malformed request of its own: tell it. */
                        send_json(u, jrpc_error(id, r, e.msg, NULL));
                } else if (r == JRPC_PARSE_ERROR) {
                        /* Not jansson's words: they quote the line cut at
                         * 160 bytes, before anything could mask it. */
                        char *masked = masked_n(u->set, line, len, LINE_SHOWN, 0);
                        log_warn("upstream %s: a message that is not JSON: %s", u->spec->name,
                                 masked ? masked : "?");
                        free(masked);
                } else {
                        log_warn("upstream %s: bad message: %s", u->spec->name, e.msg);
                }
                json_decref(id);
                return 0;
        }
        json_decref(id);
        if (m.kind == JRPC_REQUEST) {
                answer_server(u, &m);
        } else if (m.kind == JRPC_NOTIFICATION) {
                if (strcmp(m.method, "notifications/tools/list_changed") == 0 &&
                    u->state == U_READY) {
                        log_info("upstream %s: tools changed, listing again", u->spec->name);
                        list_again(u);
                } else if (strcmp(m.method, "notifications/message") == 0) {
                        char *text = json_dumps(json_object_get(m.params, "data"),
                                                JSON_COMPACT | JSON_ENCODE_ANY);
                        char *masked = text ? upstream_mask(u->set, text, LOG_SHOWN) : NULL;
                        log_info("upstream %s: %s", u->spec->name, masked ? masked : "");
                        free(text);
                        free(masked);
                }
        } else {
                json_t *error = m.kind == JRPC_ERROR ? m.error : NULL;
                if (u->init_id && json_is_integer(m.id) && json_integer_value(m.id) == u->init_id) {
                        initialized(u, m.result, error);
                } else if (u->list_id && json_is_integer(m.id) &&
                           json_integer_value(m.id) == u->list_id) {
                        tools_page(u, m.result, error, len);
                } else {
                        struct upstream_call *c = call_by_id(u, m.id);
                        if (!c) {
                                log_debug("upstream %s: an answer nobody waits for", u->spec->name);
                        } else if (error) {
                                struct err ue = {.kind = ERR_PROTOCOL};
                                json_t *code = json_object_get(error, "code");
                                const char *msg =
                                    json_string_value(json_object_get(error, "message"));
                                ue.code = json_is_integer(code) ? (int)json_integer_value(code)
                                                                : JRPC_INTERNAL_ERROR;
                                if (!msg)
                                        msg = "error";
                                mask_into(u->set->reg.mask, msg, strlen(msg), 0, ue.msg,
                                          sizeof(ue.msg));
                                utf8_scrub(ue.msg);
                                call_finish(c, NULL, &ue);
                        } else if (c->max_result && len > c->max_result) {
                                call_fail(c, UPE_TOO_LARGE,
                                          "the result of %s from server '%s' is %zu bytes, over "
                                          "the limit of %zu",
                                          c->method, u->spec->name, len, c->max_result);
                        } else if (!json_is_object(m.result)) {
                                call_fail(c, JRPC_INTERNAL_ERROR,
                                          "server '%s' answered with a result that is not an "
                                          "object",
                                          u->spec->name);
                        } else {
                                /* A server may echo what it was given to
                                 * keep (its env, a header) in an answer,
                                 * as it may in an error: masked the same. */
                                json_t *masked = mask_json(u->answer_mask, m.result);
                                if (masked)
                                        call_finish(c, masked, NULL);
                                else
                                        call_fail(c, JRPC_INTERNAL_ERROR, "out of memory");
                                json_decref(masked);
                        }
                }
        }
        jrpc_msg_done(&m);
        /* It may have died in a callback: its reader was reset under us. */
        return u->http || u->out_fd >= 0 ? 0 : -1;
}

static void out_ready(struct watch *w, uint32_t events, void *userdata)
{
        struct upstream *u = userdata;
        (void)w;
        (void)events;
        char chunk[65536];
        for (int i = 0; i < 64; i++) {
                ssize_t k = read(u->out_fd, chunk, sizeof(chunk));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return;
                if (k <= 0) {
                        /* Closed its output: it is as good as gone. Its exit
                         * status tells more, so wait a moment for it. */
                        watch_remove(u->w_out);
                        u->w_out = NULL;
                        if (u->state == U_STARTING || u->state == U_READY) {
                                if (u->pidfd >= 0) {
                                        u->out_eof = true;
                                        timer_arm(u->timer, 1000);
                                } else {
                                        u_kill(u, SIGKILL);
                                        u_died(u, "closed its output");
                                }
                        }
                        return;
                }
                line_reader_feed(&u->lines, chunk, (size_t)k, on_line, u);
                if (u->out_fd < 0)
                        return; /* it died while we read */
        }
}

static int on_err_line(void *userdata, const char *line, size_t len)
{
        struct upstream *u = userdata;
        if (!line)
                return 0;
        /* The whole line is masked, then cut. */
        char *masked = masked_n(u->set, line, len, STDERR_SHOWN, 0);
        if (!masked)
                return 0;
        if (u->err_logged < STDERR_LOG_MAX)
                log_info("upstream %s stderr: %s", u->spec->name, masked);
        u->err_logged += len;
        if (*masked) {
                free(u->last_stderr);
                u->last_stderr = masked;
        } else {
                free(masked);
        }
        return 0;
}

static void err_ready(struct watch *w, uint32_t events, void *userdata)
{
        struct upstream *u = userdata;
        (void)w;
        (void)events;
        char chunk[8192];
        ssize_t k = read(u->err_fd, chunk, sizeof(chunk));
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
                return;
        if (k <= 0) {
                watch_remove(u->w_err);
                u->w_err = NULL;
                close(u->err_fd);
                u->err_fd = -1;
                return;
        }
        line_reader_feed(&u->errlines, chunk, (size_t)k, on_err_line, u);
}

/* ---- process life */

static void close_pipes(struct upstream *u)
{
        watch_remove(u->w_in);
        watch_remove(u->w_out);
        u->w_in = u->w_out = NULL;
        if (u->in_fd >= 0)
                close(u->in_fd);
        if (u->out_fd >= 0)
                close(u->out_fd);
        u->in_fd = u->out_fd = -1;
        u->wbuf.len = 0;
        line_reader_free(&u->lines);
        line_reader_init(&u->lines, 2 * u->set->cfg->max_frame);
}

static void u_kill(struct upstream *u, int sig)
{
        /* The whole process group: npx and sh wrappers leave children. */
        if (u->pid > 0 && kill(-u->pid, sig) < 0)
                kill(u->pid, sig);
}

static void reap(struct upstream *u)
{
        int st;
        if (u->pid <= 0)
                return; /* waitpid(0) would take another child's status */
        pid_t r = waitpid(u->pid, &st, WNOHANG);
        if (r == 0)
                return;
        char how[96] = "exited";
        if (r == u->pid && WIFEXITED(st))
                snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(st));
        else if (r == u->pid && WIFSIGNALED(st))
                snprintf(how, sizeof(how), "was killed by signal %d (%s)", WTERMSIG(st),
                         strsignal(WTERMSIG(st)));
        /* Whatever it left in its group goes too. */
        kill(-u->pid, SIGKILL);
        watch_remove(u->w_pid);
        u->w_pid = NULL;
        if (u->pidfd >= 0)
                close(u->pidfd);
        u->pidfd = -1;
        pid_t pid = u->pid;
        u->pid = 0;
        if (u->stopping) {
                log_info("upstream %s: stopped", u->spec->name);
                check_stopped(u->set);
                return;
        }
        log_info("upstream %s: process %d %s", u->spec->name, (int)pid, how);
        if (u->state == U_STARTING || u->state == U_READY)
                u_died(u, how);
}

static void pid_ready(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        reap(userdata);
}

/* It is gone, or as good as gone: fail what waits for it, and decide when
 * a restart may happen. `why` NULL: last_error is already set. */
static void u_died(struct upstream *u, const char *why)
{
        if (u->state == U_DEAD)
                return;
        bool was_starting = u->state == U_STARTING;
        u->state = U_DEAD;
        u->out_eof = false;
        if (why) {
                _cleanup_free_ char *line =
                    u->last_stderr ? upstream_mask(u->set, u->last_stderr, STDERR_IN_ERROR) : NULL;
                if (line)
                        set_last_error(u, "server '%s' %s%s; its last stderr line: %s",
                                       u->spec->name, why, was_starting ? " while starting" : "",
                                       line);
                else
                        set_last_error(u, "server '%s' %s%s", u->spec->name, why,
                                       was_starting ? " while starting" : "");
        }
        close_pipes(u);
        http_conn_free(u->http);
        u->http = NULL;
        u->init_id = u->list_id = 0;
        u->relist = false;
        json_array_clear(u->listing);
        u->listing_bytes = 0;
        u->pages = 0;
        long long lived = now_ms() - u->started_ms;
        if (lived < SHORT_LIFE_MS)
                u->backoff_ms = u->backoff_ms ? u->backoff_ms * 2 : 1000;
        else
                u->backoff_ms = 0;
        if (u->backoff_ms > BACKOFF_MAX_MS)
                u->backoff_ms = BACKOFF_MAX_MS;
        u->retry_at_ms = now_ms() + u->backoff_ms;
        timer_arm(u->timer, 0);
        log_event(LOG_ERR, "upstream", "%s", u->last_error ? u->last_error : "upstream died");
        /* What the server had fails: calls in flight, and calls queued for
         * a start that failed. A call not yet sent to a server that was
         * ready waits for the next one (the timer starts it). Each failed
         * call leaves the list, and the walk starts over. */
        for (;;) {
                struct upstream_call *c, *found = NULL;
                list_for_each(c, &u->calls, node)
                {
                        if (was_starting || c->id || c->ready_wait) {
                                found = c;
                                break;
                        }
                }
                if (!found)
                        break;
                call_fail(found, UPE_UNAVAILABLE, "%s (corral restarts it on the next call)",
                          u->last_error ? u->last_error : "the server is gone");
        }
        /* Calls wait to be sent: the next server starts for them, after
         * the back-off (-1: at once). */
        if (u->state == U_DEAD && !list_empty(&u->calls))
                timer_arm(u->timer, u->backoff_ms ? u->backoff_ms : -1);
}

/* What a server inherits of corral's environment: enough to run a program
 * as this user, and none of the credentials that may sit beside it. A
 * server that needs more names it in its "env" (with ${VAR} to take it
 * from here). */
static const char *const inherited[] = {
    "HOME", "LOGNAME", "PATH",     "SHELL",  "TERM", "USER",
    "LANG", "LC_ALL",  "LC_CTYPE", "TMPDIR", "TZ",
};

static bool inherits(const char *entry)
{
        const char *eq = strchr(entry, '=');
        size_t kl = eq ? (size_t)(eq - entry) : strlen(entry);
        for (size_t i = 0; i < ARRAY_SIZE(inherited); i++)
                if (strlen(inherited[i]) == kl && strncmp(inherited[i], entry, kl) == 0)
                        return true;
        return false;
}

static char **build_env(const struct upstream_spec *spec)
{
        size_t n = 0, m = 0;
        while (environ[n])
                n++;
        while (spec->env && spec->env[m])
                m++;
        char **env = calloc(n + m + 1, sizeof(char *));
        if (!env)
                return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                if (!inherits(environ[i]))
                        continue;
                size_t kl = (size_t)(strchr(environ[i], '=') - environ[i]);
                bool overridden = false;
                for (size_t j = 0; j < m && !overridden; j++)
                        overridden =
                            strncmp(spec->env[j], environ[i], kl) == 0 && spec->env[j][kl] == '=';
                if (!overridden)
                        env[k++] = environ[i];
        }
        for (size_t j = 0; j < m; j++)
                env[k++] = spec->env[j];
        return env;
}

static void close_all(int *fds, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -1;
                }
}

/* The guardian's answer to corral's death: the whole group, itself too. */
static void parent_died(int sig)
{
        (void)sig;
        kill(0, SIGKILL);
}

/* In the child, between fork and exec: only async-signal-safe calls.
 *
 * The child leads a new process group and stays as its guardian: it forks
 * the server, holds none of its pipes, and waits for it. If corral dies,
 * even by SIGKILL, the kernel signals the guardian (PR_SET_PDEATHSIG), which
 * kills the whole group: grandchildren that npx or sh started as well,
 * which a parent-death signal to the server alone would leave behind. The
 * guardian ignores the group's SIGTERM (that one is for the server) and
 * exits as the server did, so corral sees the server's exit status. */
_Noreturn static void child(const struct upstream_spec *spec, char **env, int fds[8], pid_t parent)
{
        int in_r = fds[0], out_w = fds[3], err_w = fds[5], rep_w = fds[7];
        int saved, st;
        sigset_t none;
        pid_t server;
        setsid(); /* its own process group, killed as a whole */
        signal(SIGUSR2, parent_died);
        prctl(PR_SET_PDEATHSIG, SIGUSR2);
        if (getppid() != parent)
                _exit(127); /* corral died before the line above */
        /* A third party's program: no capabilities and no way to gain any,
         * whatever corral itself kept. */
        if (confine_child() < 0)
                goto fail;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* the loop blocks signals for signalfd */
        signal(SIGPIPE, SIG_DFL);
        if (dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
                goto fail;
        /* Nothing else of corral's reaches the server (or stays open in the
         * guardian, which never execs): the report pipe moves to 3 first. */
        if (rep_w != 3) {
                if (dup3(rep_w, 3, O_CLOEXEC) < 0)
                        goto fail;
                rep_w = 3;
        }
#ifdef SYS_close_range
        if (syscall(SYS_close_range, 4U, ~0U, 0U) < 0)
#endif
                for (int fd = 4; fd < 65536; fd++)
                        close(fd);
        server = fork();
        if (server < 0)
                goto fail;
        if (server == 0) {
                signal(SIGUSR2, SIG_DFL);
                prctl(PR_SET_PDEATHSIG, 0);
                if (spec->cwd && chdir(spec->cwd) < 0)
                        goto fail;
                execvpe(spec->argv[0], spec->argv, env);
                goto fail;
        }
        /* The guardian: the server's pipes and the report pipe are its. */
        close(0);
        close(1);
        close(2);
        close(rep_w);
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        while (waitpid(server, &st, 0) < 0)
                if (errno != EINTR)
                        _exit(127);
        if (WIFSIGNALED(st)) {
                signal(WTERMSIG(st), SIG_DFL);
                kill(getpid(), WTERMSIG(st));
        }
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 127);
fail:
        saved = errno;
        if (write(rep_w, &saved, sizeof(saved)) < 0) {
                /* nothing more to do */
        }
        _exit(127);
}

static int spawn(struct upstream *u, struct err *e)
{
        const struct upstream_spec *spec = u->spec;
        /* in_r in_w out_r out_w err_r err_w rep_r rep_w */
        int fds[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
        _cleanup_free_ char **env = build_env(spec);
        if (!env)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        for (int i = 0; i < 8; i += 2)
                if (pipe2(fds + i, O_CLOEXEC) < 0) {
                        int r = -errno;
                        close_all(fds, 8);
                        return err_set(e, ERR_INTERNAL, -r, "cannot make pipes: %s", strerror(-r));
                }
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int r = -errno;
                close_all(fds, 8);
                return err_set(e, ERR_INTERNAL, -r, "cannot fork: %s", strerror(-r));
        }
        if (pid == 0)
                child(spec, env, fds, parent);
        close(fds[0]);
        close(fds[3]);
        close(fds[5]);
        close(fds[7]);
        /* exec closes the report pipe: EOF means it ran. This waits only
         * for the child to reach exec, not for the server to start. */
        int child_errno = 0;
        ssize_t k;
        do
                k = read(fds[6], &child_errno, sizeof(child_errno));
        while (k < 0 && errno == EINTR);
        close(fds[6]);
        if (k == (ssize_t)sizeof(child_errno)) {
                waitpid(pid, NULL, 0);
                close(fds[1]);
                close(fds[2]);
                close(fds[4]);
                return err_masked(u->set, e, ERR_INTERNAL, child_errno, "cannot run `%s`%s%s: %s",
                                  spec->argv[0], spec->cwd ? " in " : "",
                                  spec->cwd ? spec->cwd : "", strerror(child_errno));
        }
        u->pid = pid;
        u->in_fd = fds[1];
        u->out_fd = fds[2];
        u->err_fd = fds[4];
        for (int i = 0; i < 3; i++) {
                int fd = i == 0 ? u->in_fd : i == 1 ? u->out_fd : u->err_fd;
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        }
        u->pidfd = pidfd_open_(pid);
        struct loop *l = u->set->loop;
        int r = watch_add(l, u->out_fd, EPOLLIN, out_ready, u, &u->w_out);
        if (r == 0)
                r = watch_add(l, u->err_fd, EPOLLIN, err_ready, u, &u->w_err);
        if (r == 0 && u->pidfd >= 0)
                r = watch_add(l, u->pidfd, EPOLLIN, pid_ready, u, &u->w_pid);
        if (r < 0)
                return err_set(e, ERR_INTERNAL, -r, "cannot watch the server's pipes: %s",
                               strerror(-r));
        return 0;
}

static void u_timer(struct timer *t, void *userdata)
{
        struct upstream *u = userdata;
        (void)t;
        if (u->stopping) {
                u_kill(u, SIGKILL);
                if (u->pidfd < 0)
                        reap(u);
                if (u->pid > 0 && u->pidfd < 0)
                        timer_arm(u->timer, 50); /* not dead yet: look again */
                return;
        }
        if (u->out_eof && (u->state == U_STARTING || u->state == U_READY)) {
                u_kill(u, SIGKILL);
                u_died(u, "closed its output");
        } else if (u->state == U_STARTING) {
                set_last_error(u, "server '%s' did not finish starting within %d s", u->spec->name,
                               START_TIMEOUT_MS / 1000);
                u_kill(u, SIGKILL);
                u_died(u, NULL);
        } else if (u->state == U_DEAD && !list_empty(&u->calls)) {
                u_start(u); /* the back-off is over and calls wait */
        }
}

/* Spawned or connected: the handshake, within the start deadline. */
static void send_initialize(struct upstream *u)
{
        timer_arm(u->timer, START_TIMEOUT_MS);
        json_t *params =
            json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", PROTOCOL_VERSION,
                      "capabilities", "clientInfo", "name", "corral", "version", CORRAL_VERSION);
        u->init_id = ++u->next_id;
        if (send_json(u, jrpc_request(u->init_id, "initialize", params)) < 0) {
                u_kill(u, SIGKILL);
                u_died(u, "could not be sent initialize");
        }
}

/* ---- streamable HTTP servers: a connection stands for the process */

/* A POST is over (see http.h): fail what it carried if it failed or came
 * back without the answer, and start over when the connection is lost. */
static void http_post_done(void *userdata, json_int_t id, const struct err *e, bool lost)
{
        struct upstream *u = userdata;
        const char *name = u->spec->name;
        const char *what = e ? e->msg : "the server ended its answer without a response";
        if (id && id == u->init_id) {
                set_last_error(u, "server '%s': initialize: %s", name, what);
                u_died(u, NULL);
                return;
        }
        if (id && id == u->list_id) {
                if (u->state == U_STARTING) {
                        set_last_error(u, "server '%s': tools/list: %s", name, what);
                        u_died(u, NULL);
                        return;
                }
                /* A new listing failed: keep the tools known so far. */
                char *masked = upstream_mask(u->set, what, 0);
                log_warn("upstream %s: tools/list: %s", name, masked ? masked : "failed");
                free(masked);
                u->list_id = 0;
                u->relist = false;
                json_array_clear(u->listing);
                u->listing_bytes = 0;
                u->pages = 0;
        }
        struct upstream_call *c = id ? call_with_id(u, id) : NULL;
        if (c) {
                int code = !e                      ? UPE_UNAVAILABLE
                           : e->code == -EMSGSIZE  ? UPE_TOO_LARGE
                           : e->code == -ETIMEDOUT ? UPE_TIMEOUT
                                                   : UPE_UNAVAILABLE;
                call_fail(c, code, "%s on server '%s': %s", c->method, name, what);
        } else if (e && !id && !lost) {
                char *masked = upstream_mask(u->set, e->msg, 0);
                log_warn("upstream %s: %s", name, masked ? masked : "a message was not delivered");
                free(masked);
        }
        if (lost && e && u->http) {
                set_last_error(u, "server '%s': %s", name, e->msg);
                u_died(u, NULL);
        }
}

static const struct http_conn_ops http_ops = {
    .message = on_line,
    .post_done = http_post_done,
};

static void http_start(struct upstream *u, long long now)
{
        struct upstream_set *set = u->set;
        struct err e = {0};
        u->state = U_STARTING;
        u->started_ms = now;
        log_info("upstream %s: connecting", u->spec->name);
        int r = set->curl ? 0 : curl_loop_new(set->loop, &set->curl);
        if (r < 0)
                err_set(&e, ERR_INTERNAL, -r, "cannot set up libcurl: %s", strerror(-r));
        else
                /* Room for a result of a whole frame plus the envelope, as
                 * on stdio. */
                r = http_conn_new(set->curl, u->spec->url, u->spec->headers, set->reg.mask,
                                  2 * set->cfg->max_frame, &http_ops, u, &u->http, &e);
        if (r < 0) {
                set_last_error(u, "server '%s': %s", u->spec->name,
                               e.msg[0] ? e.msg : strerror(-r));
                u_died(u, NULL);
                return;
        }
        send_initialize(u);
}

static void http_stopped(void *userdata)
{
        struct upstream *u = userdata;
        u->http_stopping = false;
        log_info("upstream %s: session ended", u->spec->name);
        check_stopped(u->set);
}

static void u_start(struct upstream *u)
{
        if (u->state == U_STARTING || u->state == U_READY || u->stopping)
                return;
        long long now = now_ms();
        if (u->state == U_DEAD && now < u->retry_at_ms) {
                timer_arm(u->timer, u->retry_at_ms - now);
                return;
        }
        if (u->spec->error) {
                set_last_error(u, "%s", u->spec->error);
                u->state = U_STARTING; /* so that u_died fails the calls */
                u->started_ms = now;
                u_died(u, NULL);
                return;
        }
        if (u->spec->transport == UP_HTTP) {
                http_start(u, now);
                return;
        }
        if (u->pid > 0) {
                /* The old process has not been reaped yet. */
                u_kill(u, SIGKILL);
                reap(u);
                if (u->pid > 0) {
                        timer_arm(u->timer, 50);
                        return;
                }
        }
        if (u->err_fd >= 0) {
                /* The old process's stderr, if it never reached EOF. */
                watch_remove(u->w_err);
                u->w_err = NULL;
                close(u->err_fd);
                u->err_fd = -1;
        }
        line_reader_free(&u->errlines);
        line_reader_init(&u->errlines, STDERR_LINE_MAX);
        struct err e = {0};
        u->state = U_STARTING;
        u->started_ms = now;
        u->err_logged = 0;
        free(u->last_stderr);
        u->last_stderr = NULL;
        log_info("upstream %s: starting", u->spec->name);
        if (spawn(u, &e) < 0) {
                set_last_error(u, "server '%s': %s", u->spec->name, e.msg);
                close_pipes(u);
                u_died(u, NULL);
                return;
        }
        send_initialize(u);
}

/* ---- calls */

static void call_timeout(struct timer *t, void *userdata)
{
        struct upstream_call *c = userdata;
        struct upstream *u = c->u;
        (void)t;
        if (c->id) {
                /* Tell the server to stop working on it. */
                json_t *p = json_pack("{s:I, s:s}", "requestId", (json_int_t)c->id, "reason",
                                      "timed out in corral");
                send_json(u, jrpc_notification("notifications/cancelled", p));
        }
        call_fail(c, UPE_TIMEOUT, "%s on server '%s' did not answer within the time limit%s",
                  c->ready_wait ? "starting" : c->method, u->spec->name,
                  u->state == U_STARTING ? " (the server is still starting)" : "");
}

/* Whether a stdio server that still counts as ready is visibly gone: its
 * stdout ended (it is awaited briefly for its exit status), or the loop has
 * yet to read that or its exit. Every writer of that pipe is the server's
 * (the guardian keeps none), so neither sign can be wrong. */
static bool looks_gone(struct upstream *u)
{
        if (u->state != U_READY || u->http)
                return false;
        if (u->out_eof)
                return true;
        struct pollfd p[2] = {{.fd = u->out_fd, .events = POLLIN},
                              {.fd = u->pidfd, .events = POLLIN}};
        return poll(p, 2, 0) > 0 &&
               ((p[0].revents & (POLLHUP | POLLERR)) || (p[1].revents & POLLIN));
}

static int add_call(struct upstream *u, const char *method, json_t *params, double timeout_s,
                    size_t max_result, bool ready_wait, upstream_cb cb, void *userdata,
                    struct upstream_call **ret)
{

        struct upstream_call *c = calloc(1, sizeof(*c));
        if (!c) {
                json_decref(params);
                return -ENOMEM;
        }
        c->u = u;
        c->method = method ? strdup(method) : NULL;
        c->params = params;
        c->ready_wait = ready_wait;
        c->max_result = max_result;
        c->cb = cb;
        c->userdata = userdata;
        int r = timer_add(u->set->loop, call_timeout, c, &c->timer);
        if (r == 0) {
                long long ms = (long long)ceil(timeout_s * 1000);
                r = timer_arm(c->timer, ms > 0 ? ms : 1);
        }
        if (r < 0 || (method && !c->method)) {
                call_free(c);
                return r < 0 ? r : -ENOMEM;
        }
        list_push(&u->calls, &c->node);
        *ret = c;
        if (u->set->shutting_down) {
                call_fail(c, UPE_UNAVAILABLE, "corral is shutting down");
                return 0;
        }
        if (u->state == U_READY && !ready_wait && looks_gone(u)) {
                /* Not sent to a dead server: it waits, unsent, while the
                 * loop settles the death, and starts the next server. */
        } else if (u->state == U_READY) {
                if (ready_wait)
                        call_finish(c, u->tools, NULL);
                else
                        send_call(c);
        } else {
                u_start(u); /* may fail c at once */
        }
        return 0;
}

int upstream_request(struct upstream *u, const char *method, json_t *params, double timeout_s,
                     size_t max_result, upstream_cb cb, void *userdata, struct upstream_call **ret)
{
        return add_call(u, method, params, timeout_s, max_result, false, cb, userdata, ret);
}

int upstream_when_ready(struct upstream *u, double timeout_s, upstream_cb cb, void *userdata,
                        struct upstream_call **ret)
{
        return add_call(u, NULL, NULL, timeout_s, 0, true, cb, userdata, ret);
}

void upstream_call_cancel(struct upstream_call *c)
{
        if (!c)
                return;
        if (c->ended) { /* over, but not told yet: it will not be */
                defer_cancel(&c->d);
                json_decref(c->result);
                free(c);
                return;
        }
        struct upstream *u = c->u;
        if (c->id && u->state == U_READY) {
                json_t *p = json_pack("{s:I, s:s}", "requestId", (json_int_t)c->id, "reason",
                                      "the sandbox ended");
                send_json(u, jrpc_notification("notifications/cancelled", p));
        }
        call_unlink(c);
        call_free(c);
}

/* ---- the set */

int upstream_set_new(struct loop *l, const struct config *cfg, struct registry *reg,
                     struct upstream_set **ret)
{
        struct upstream_set *set = calloc(1, sizeof(*set));
        if (!set)
                return -ENOMEM;
        set->loop = l;
        set->cfg = cfg;
        set->reg = *reg;
        *reg = (struct registry){0};
        set->n = set->reg.n;
        set->v = calloc(set->n ? set->n : 1, sizeof(*set->v));
        if (!set->v) {
                registry_free(&set->reg);
                free(set);
                return -ENOMEM;
        }
        for (size_t i = 0; i < set->n; i++) {
                struct upstream *u = &set->v[i];
                u->set = set;
                u->spec = &set->reg.v[i];
                u->pidfd = u->in_fd = u->out_fd = u->err_fd = -1;
                list_init(&u->calls);
                /* What may queue for its stdin: a few calls of a frame each. */
                buf_init(&u->wbuf, 4 * cfg->max_frame);
                /* Room for a result of a whole frame plus the envelope. */
                line_reader_init(&u->lines, 2 * cfg->max_frame);
                line_reader_init(&u->errlines, STDERR_LINE_MAX);
                u->listing = json_array();
                u->answer_mask = mask_new();
                if (!u->listing || !u->answer_mask ||
                    mask_add_strv_min(u->answer_mask, u->spec->secrets, MASK_ANSWER_MIN) < 0 ||
                    timer_add(l, u_timer, u, &u->timer) < 0) {
                        set->n = i + 1;
                        upstream_set_free(set);
                        return -ENOMEM;
                }
        }
        *ret = set;
        return 0;
}

static void check_stopped(struct upstream_set *set)
{
        if (!set->shutting_down || !set->done)
                return;
        for (size_t i = 0; i < set->n; i++)
                if (set->v[i].pid > 0 || set->v[i].http_stopping)
                        return;
        void (*done)(void *) = set->done;
        set->done = NULL;
        done(set->done_ud);
}

void upstream_set_shutdown(struct upstream_set *set, void (*done)(void *), void *userdata)
{
        set->shutting_down = true;
        set->done = done;
        set->done_ud = userdata;
        for (size_t i = 0; i < set->n; i++) {
                struct upstream *u = &set->v[i];
                while (!list_empty(&u->calls))
                        call_fail(list_first(&u->calls, struct upstream_call, node),
                                  UPE_UNAVAILABLE, "corral is shutting down");
                if (u->http) {
                        /* End the session (best effort, briefly). */
                        u->stopping = true;
                        timer_arm(u->timer, 0);
                        u->http_stopping = http_conn_shutdown(u->http, http_stopped, u);
                        continue;
                }
                if (u->pid <= 0)
                        continue;
                u->stopping = true;
                log_info("upstream %s: stopping", u->spec->name);
                flush_in(u);
                close_pipes(u); /* EOF on its stdin: the polite way */
                u_kill(u, SIGTERM);
                timer_arm(u->timer, STOP_GRACE_MS);
                if (u->pidfd < 0)
                        reap(u);
        }
        check_stopped(set);
}

void upstream_set_free(struct upstream_set *set)
{
        if (!set)
                return;
        for (size_t i = 0; i < set->n; i++) {
                struct upstream *u = &set->v[i];
                while (!list_empty(&u->calls)) {
                        struct upstream_call *c = list_first(&u->calls, struct upstream_call, node);
                        call_unlink(c);
                        call_free(c);
                }
                if (u->pid > 0) {
                        u_kill(u, SIGKILL);
                        waitpid(u->pid, NULL, 0);
                        u->pid = 0;
                }
                u->stopping = true;
                close_pipes(u);
                http_conn_free(u->http);
                u->http = NULL;
                u->answer_mask = mask_free(u->answer_mask);
                watch_remove(u->w_err);
                watch_remove(u->w_pid);
                if (u->err_fd >= 0)
                        close(u->err_fd);
                if (u->pidfd >= 0)
                        close(u->pidfd);
                timer_remove(u->timer);
                buf_free(&u->wbuf);
                line_reader_free(&u->lines);
                line_reader_free(&u->errlines);
                json_decref(u->tools);
                json_decref(u->listing);
                free(u->last_error);
                free(u->last_stderr);
        }
        free(set->v);
        curl_loop_free(set->curl);
        registry_free(&set->reg);
        free(set);
}

size_t upstream_count(const struct upstream_set *set)
{
        return set->n;
}

struct upstream *upstream_at(struct upstream_set *set, size_t i)
{
        return i < set->n ? &set->v[i] : NULL;
}

struct upstream *upstream_get(struct upstream_set *set, const char *name)
{
        for (size_t i = 0; i < set->n; i++)
                if (strcmp(set->v[i].spec->name, name) == 0)
                        return &set->v[i];
        return NULL;
}

const struct upstream_spec *upstream_spec(const struct upstream *u)
{
        return u->spec;
}

char *upstream_mask(const struct upstream_set *set, const char *text, size_t max)
{
        text = text ? text : "";
        return masked_n(set, text, strlen(text), max, 0);
}

const char *upstream_state(const struct upstream *u)
{
        switch (u->state) {
        case U_IDLE:
                return u->spec->error ? "error" : "idle";
        case U_STARTING:
                return "starting";
        case U_READY:
                return "connected";
        case U_DEAD:
                return "error";
        }
        return "error";
}

const char *upstream_last_error(const struct upstream *u)
{
        return u->last_error ? u->last_error : u->spec->error;
}

json_t *upstream_tools(const struct upstream *u)
{
        return u->tools;
}

const struct registry *upstream_registry(const struct upstream_set *set)
{
        return set ? &set->reg : NULL;
}

json_t *upstream_describe(const struct upstream *u)
{
        const struct upstream_spec *spec = u->spec;
        const char *err = upstream_last_error(u);
        json_t *d = json_pack(
            "{s:s, s:s?, s:s, s:s, s:o, s:s?, s:s?}", "name", spec->name, "description",
            spec->description, "transport", spec->transport == UP_STDIO ? "stdio" : "http",
            "status", upstream_state(u), "tools",
            u->tools ? json_integer((json_int_t)json_array_size(u->tools)) : json_null(), "error",
            err, "source", spec->source);
        if (d && spec->project)
                json_object_set_new(d, "project", json_true());
        return d;
}
