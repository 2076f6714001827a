/* The MCP client of one upstream server, over a transport (transport.h):
 * the state (one setter, set_state, checked against a table and logged by
 * name), start and restart with back-off, the initialize handshake, the
 * tool list read page by page and cached, requests with a deadline each,
 * the server's own requests answered, and the set of every server with
 * its shutdown. Each timer has one purpose: a start's deadline, the
 * restart after a back-off, and one per call. */
#include "upstream/internal.h"

#include "core/buf.h"
#include "core/curl_loop.h"
#include "core/jsonrpc.h"
#include "upstream/mask.h"
#include "upstream/transport.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef CORRAL_VERSION
#define CORRAL_VERSION "0"
#endif

#define START_TIMEOUT_MS 60000 /* spawn..tools listed (npx may download first) */
#define SHORT_LIFE_MS    10000 /* dying sooner than this backs the restart off */
#define BACKOFF_MAX_MS   30000
#define MAX_TOOL_PAGES   100
#define MAX_TOOLS        10000
/* Bytes of what a server says that go on, each masked before it is cut
 * (upstream/mask.h): the code in a sandbox controls the length of what it
 * sends, and so where a cut of an echo of it would land. */
#define LAST_ERROR_MAX  1000 /* last_error, which list_servers shows */
#define STDERR_IN_ERROR 400  /* the last stderr line in last_error */
#define MESSAGE_SHOWN   300  /* a server's own error message in last_error */
#define LOG_SHOWN       1000 /* a server's log message, or why a listing failed */
#define LINE_SHOWN      200  /* a line that is not JSON-RPC */

struct upstream_call {
        struct upstream *u;
        struct list node; /* u->calls */
        json_int_t id;    /* 0 until sent */
        char *method;
        json_t *params;
        bool ready_wait; /* upstream_when_ready: no request of its own */
        size_t max_result;
        struct timer *timer; /* its deadline */
        upstream_cb cb;
        void *userdata;
        /* Ended: its outcome, handed to the caller from the loop. */
        bool ended;
        json_t *result;
        struct err err;
        bool failed;
        struct defer d;
};

static void u_died(struct upstream *u, const char *why);
static void u_start(struct upstream *u);

/* ---- the state */

#define TO(x) (1u << (x))

static const struct {
        const char *name;
        unsigned next; /* the states it may go to */
} states[] = {
    [U_IDLE] = {"idle", TO(U_STARTING)},
    [U_STARTING] = {"starting", TO(U_READY) | TO(U_DEAD)},
    [U_READY] = {"ready", TO(U_DEAD)},
    [U_DEAD] = {"dead", TO(U_STARTING)},
};

static const char *state_name(enum ustate st)
{
        return st < ARRAY_SIZE(states) && states[st].name ? states[st].name : "?";
}

/* Every change of state goes through here, and shows in the debug log as
 * "upstream NAME: from -> to". One the table above does not allow is a
 * bug: it is logged as one and refused (false). */
static bool set_state(struct upstream *u, enum ustate to)
{
        enum ustate from = u->state;
        if (from == to)
                return true;
        if (!(states[from].next & TO(to))) {
                log_err("upstream %s: bug: forbidden transition %s -> %s", u->spec->name,
                        state_name(from), state_name(to));
                return false;
        }
        log_debug("upstream %s: %s -> %s", u->spec->name, state_name(from), state_name(to));
        u->state = to;
        return true;
}

static void check_stopped(struct upstream_set *set);
static void reaped(struct upstream_set *set);

/* ---- small helpers */

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

/* The answer to `id` is no longer wanted: over HTTP its transfer stops. */
static void forget(struct upstream *u, json_int_t id)
{
        if (id && u->t && u->t->ops->forget)
                u->t->ops->forget(u->t, id);
}

static void call_unlink(struct upstream_call *c)
{
        list_del(&c->node);
}

static void call_destroy(struct upstream_call *c)
{
        forget(c->u, c->id);
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
        forget(c->u, c->id);
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
        mask_vformat(c->u->set->reg.mask, e.msg, sizeof(e.msg), fmt, ap);
        va_end(ap);
        call_finish(c, NULL, &e);
}

static int send_json(struct upstream *u, json_t *msg)
{
        json_int_t id = 0;
        bool initialize = false;
        if (msg) {
                /* Over HTTP the message of a request of ours carries its
                 * answer. */
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
        int r = u->t ? u->t->ops->send(u->t, line, len, id, initialize) : -ENOTCONN;
        free(line);
        return r;
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
        if (!set_state(u, U_READY))
                return;
        u->backoff_ms = 0;
        timer_stop(u->start_timer);
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
        forget(u, u->list_id);
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
        forget(u, u->init_id);
        u->init_id = 0;
        if (error || !json_is_object(result)) {
                const char *m = json_string_value(json_object_get(error, "message"));
                _cleanup_free_ char *shown =
                    upstream_mask(u->set, m ? m : "not an object", MESSAGE_SHOWN);
                set_last_error(u, "initialize failed: %s", shown ? shown : "?");
                u_died(u, NULL);
                return;
        }
        const char *v = json_string_value(json_object_get(result, "protocolVersion"));
        _cleanup_free_ char *shown = upstream_mask(u->set, v ? v : "?", 100);
        log_debug("upstream %s: protocol %s", u->spec->name, shown ? shown : "?");
        if (u->t->ops->agreed)
                u->t->ops->agreed(u->t, v);
        if (send_json(u, jrpc_notification("notifications/initialized", NULL)) < 0) {
                u_died(u, "cannot send notifications/initialized");
                return;
        }
        if (u->t->ops->opened)
                u->t->ops->opened(u->t);
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

/* A message from the server (transport.h); `line` NULL: one over `len`
 * bytes was dropped. */
static void on_message(void *userdata, const char *line, size_t len)
{
        struct upstream *u = userdata;
        if (!line) {
                log_warn("upstream %s: dropped a message over %llu bytes", u->spec->name,
                         (unsigned long long)len);
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
                                  u->spec->name, (unsigned long long)len);
                return;
        }
        if (len && line[len - 1] == '\r')
                len--;
        if (len == 0)
                return;
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
                        char *masked = mask_shown(u->set->reg.mask, line, len, LINE_SHOWN, 0);
                        log_warn("upstream %s: a message that is not JSON: %s", u->spec->name,
                                 masked ? masked : "?");
                        free(masked);
                } else {
                        log_warn("upstream %s: bad message: %s", u->spec->name, e.msg);
                }
                json_decref(id);
                return;
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
}

/* It is gone, or as good as gone: its transport closed (what runs is
 * killed), what waits for it failed, and when a restart may happen
 * decided. `why` NULL: last_error is already set. */
static void u_died(struct upstream *u, const char *why)
{
        if (u->state == U_DEAD)
                return;
        bool was_starting = u->state == U_STARTING;
        if (!set_state(u, U_DEAD))
                return;
        if (why) {
                const char *words =
                    u->t && u->t->ops->last_words ? u->t->ops->last_words(u->t) : NULL;
                _cleanup_free_ char *line =
                    words ? upstream_mask(u->set, words, STDERR_IN_ERROR) : NULL;
                if (line)
                        set_last_error(u, "server '%s' %s%s; its last stderr line: %s",
                                       u->spec->name, why, was_starting ? " while starting" : "",
                                       line);
                else
                        set_last_error(u, "server '%s' %s%s", u->spec->name, why,
                                       was_starting ? " while starting" : "");
        }
        if (u->t)
                u->t->ops->close(u->t);
        u->t = NULL;
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
        timer_stop(u->start_timer);
        log_event(LOG_ERR, "upstream", "%s", u->last_error ? u->last_error : "upstream died");
        /* What the server had fails: calls in flight, and calls queued for
         * a start that failed. A call not yet sent to a server that was
         * ready waits for the next one (the restart timer starts it). Each
         * failed call leaves the list, and the walk starts over. */
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
        if (!list_empty(&u->calls))
                timer_arm(u->restart_timer, u->backoff_ms ? u->backoff_ms : -1);
}

static void start_timeout(struct timer *t, void *userdata)
{
        struct upstream *u = userdata;
        (void)t;
        if (u->state != U_STARTING)
                return;
        set_last_error(u, "server '%s' did not finish starting within %d s", u->spec->name,
                       START_TIMEOUT_MS / 1000);
        u_died(u, NULL);
}

/* The back-off is over: start again if calls wait. */
static void restart_due(struct timer *t, void *userdata)
{
        struct upstream *u = userdata;
        (void)t;
        if (u->state == U_DEAD && !list_empty(&u->calls))
                u_start(u);
}

/* Spawned or connected: the handshake, within the start deadline. */
static void send_initialize(struct upstream *u)
{
        timer_arm(u->start_timer, START_TIMEOUT_MS);
        json_t *params =
            json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", UPSTREAM_PROTOCOL_VERSION,
                      "capabilities", "clientInfo", "name", "corral", "version", CORRAL_VERSION);
        u->init_id = ++u->next_id;
        if (send_json(u, jrpc_request(u->init_id, "initialize", params)) < 0)
                u_died(u, "could not be sent initialize");
}

/* ---- what the transport tells */

/* The message that carried a request failed (over HTTP, a POST; see
 * transport.h): fail what it carried, and start over when the link is
 * lost. */
static void on_failed(void *userdata, json_int_t id, const struct err *e, bool lost)
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
        if (lost && e && u->t) {
                set_last_error(u, "server '%s': %s", name, e->msg);
                u_died(u, NULL);
        }
}

static void on_ended(void *userdata, const char *how)
{
        u_died(userdata, how);
}

static void on_stopped(void *userdata)
{
        struct upstream *u = userdata;
        u->stop_pending = false;
        log_info("upstream %s: session ended", u->spec->name);
        check_stopped(u->set);
}

static const struct transport_events events = {
    .message = on_message,
    .failed = on_failed,
    .ended = on_ended,
    .stopped = on_stopped,
};

static void u_start(struct upstream *u)
{
        if (u->state == U_STARTING || u->state == U_READY || u->stopping)
                return;
        long long now = now_ms();
        if (u->state == U_DEAD && now < u->retry_at_ms) {
                timer_arm(u->restart_timer, u->retry_at_ms - now);
                return;
        }
        /* Its last process first goes (killed, not reaped yet): a port or a
         * lock it held is free for the next one. */
        if (u->spec->transport == UP_STDIO && uproc_running_for(u)) {
                u->wait_reap = true;
                return;
        }
        if (!set_state(u, U_STARTING))
                return;
        u->started_ms = now;
        if (u->spec->error) {
                set_last_error(u, "%s", u->spec->error);
                u_died(u, NULL); /* fails the calls */
                return;
        }
        bool http = u->spec->transport == UP_HTTP;
        log_info("upstream %s: %s", u->spec->name, http ? "connecting" : "starting");
        struct err e = {0};
        int r = http ? http_transport_open(u, &events, u, &u->t, &e)
                     : stdio_transport_open(u, &events, u, &u->t, &e);
        if (r < 0) {
                set_last_error(u, "server '%s': %s", u->spec->name, e.msg);
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

/* Whether a server that still counts as ready is visibly gone though the
 * loop has yet to hear it (a stdio server's stdout closed, or its exit). */
static bool looks_gone(struct upstream *u)
{
        return u->state == U_READY && u->t && u->t->ops->gone && u->t->ops->gone(u->t);
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
                call_destroy(c);
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
        call_destroy(c);
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
        list_init(&set->procs);
        set->reaped = reaped;
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
                list_init(&u->calls);
                u->listing = json_array();
                u->answer_mask = mask_new();
                if (!u->listing || !u->answer_mask ||
                    mask_add_strv_min(u->answer_mask, u->spec->secrets, MASK_ANSWER_MIN) < 0 ||
                    timer_add(l, start_timeout, u, &u->start_timer) < 0 ||
                    timer_add(l, restart_due, u, &u->restart_timer) < 0) {
                        set->n = i + 1;
                        upstream_set_free(set);
                        return -ENOMEM;
                }
        }
        *ret = set;
        return 0;
}

/* At shutdown: the set's `done` once nothing runs any more (also after
 * each process is reaped: process.c calls it through set->reaped). */
static void check_stopped(struct upstream_set *set)
{
        if (!set->shutting_down || !set->done || !list_empty(&set->procs))
                return;
        for (size_t i = 0; i < set->n; i++)
                if (set->v[i].stop_pending)
                        return;
        void (*done)(void *) = set->done;
        set->done = NULL;
        done(set->done_ud);
}

/* A process was reaped (process.c): a start that waited for it goes on
 * (from its timer), and the shutdown may be over. */
static void reaped(struct upstream_set *set)
{
        for (size_t i = 0; i < set->n; i++) {
                struct upstream *u = &set->v[i];
                if (u->wait_reap && !u->stopping && !uproc_running_for(u)) {
                        u->wait_reap = false;
                        timer_arm(u->restart_timer, 1);
                }
        }
        check_stopped(set);
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
                u->stopping = true;
                timer_stop(u->start_timer);
                timer_stop(u->restart_timer);
                if (!u->t)
                        continue;
                if (u->spec->transport == UP_STDIO)
                        log_info("upstream %s: stopping", u->spec->name);
                /* No event but `stopped` follows; the set waits for that
                 * and for every process (process.c). */
                u->stop_pending = u->t->ops->stop(u->t);
        }
        check_stopped(set);
}

void upstream_set_free(struct upstream_set *set)
{
        if (!set)
                return;
        set->done = NULL; /* freed: a shutdown still waiting is told nothing */
        for (size_t i = 0; i < set->n; i++) {
                struct upstream *u = &set->v[i];
                while (!list_empty(&u->calls)) {
                        struct upstream_call *c = list_first(&u->calls, struct upstream_call, node);
                        call_unlink(c);
                        call_destroy(c);
                }
                u->stopping = true;
                if (u->t)
                        u->t->ops->close(u->t);
                u->t = NULL;
                u->answer_mask = mask_free(u->answer_mask);
                timer_remove(u->start_timer);
                timer_remove(u->restart_timer);
                json_decref(u->tools);
                json_decref(u->listing);
                free(u->last_error);
        }
        uproc_kill_all(set);
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
        return mask_shown(set->reg.mask, text, strlen(text), max, 0);
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

size_t upstream_pending(const struct upstream *u)
{
        return list_length(&u->calls);
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
