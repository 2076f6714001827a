#include "mcp/server.h"

#include "bridge/bridge.h"
#include "core/jsonrpc.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/loop.h"
#include "core/util.h"
#include "mcp/internal.h"
#include "mcp/tools.h"
#include "mcp/transport.h"
#include "sandbox/sandbox.h"
#include "sandbox/session.h"

#include <stdio.h>
#include <string.h>

#ifndef CORRAL_VERSION
#define CORRAL_VERSION "0"
#endif

static const char *const protocol_versions[] = {
    "2025-11-25", /* latest first: offered when the client's is unknown */
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
};

/* ---- tools/call */

bool tool_args_object(struct mcp_server *s, json_t *id, json_t *args)
{
        if (!args || json_is_object(args))
                return true;
        mcp_send_result(s, id, arguments_error("arguments must be an object"));
        return false;
}

void tool_sandbox_status(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        if (args && (!json_is_object(args) || json_object_size(args) > 0)) {
                mcp_send_result(s, id, arguments_error("sandbox_status takes no arguments"));
                return;
        }
        mcp_send(s, jrpc_result(id, tools_status_result(sandbox_mgr_status(s->mgr))));
}

/* params.task: an object, with "ttl" a number of milliseconds >= 0. */
static bool task_valid(json_t *task)
{
        json_t *ttl = json_object_get(task, "ttl");
        return json_is_object(task) &&
               (!ttl || (json_is_integer(ttl) && json_integer_value(ttl) >= 0));
}

static void tools_call(struct mcp_server *s, json_t *id, json_t *params)
{
        const char *name = json_string_value(json_object_get(params, "name"));
        char msg[700], names[300];
        if (!name) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, "tools/call needs a \"name\" string");
                return;
        }
        /* A client of a protocol before tasks was offered none: a "task"
         * it sends anyway is not one, and the call runs as any other. */
        if (!mcp_server_tasks(s) && json_object_get(params, "task"))
                json_object_del(params, "task");
        json_t *task = json_object_get(params, "task");
        if (task && !task_valid(task)) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "\"task\" must be an object, with \"ttl\" a number of milliseconds");
                return;
        }
        const struct mcp_tool *t = tools_find(name);
        if (task && (!t || !t->task)) {
                tools_names(true, names, sizeof(names));
                snprintf(msg, sizeof(msg), "tool \"%.100s\" does not run as a task (only %s do)",
                         name, names);
                mcp_send_error(s, id, JRPC_METHOD_NOT_FOUND, utf8_scrub(msg));
                return;
        }
        if (!t) {
                tools_unknown(name, msg, sizeof(msg));
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, utf8_scrub(msg));
                return;
        }
        metrics_tool_call(t->name);
        t->call(s, id, json_object_get(params, "arguments"), params);
}

static void cancel_request(struct mcp_server *s, json_t *params)
{
        json_t *rid = json_object_get(params, "requestId");
        if (rid)
                request_withdraw(s, rid, json_string_value(json_object_get(params, "reason")));
}

/* ---- lifecycle */

/* The version both speak: the client's when corral knows it, else the
 * latest. */
static const char *negotiate(json_t *params)
{
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        for (size_t i = 0; asked && i < ARRAY_SIZE(protocol_versions); i++)
                if (strcmp(asked, protocol_versions[i]) == 0)
                        return protocol_versions[i];
        return protocol_versions[0];
}

/* Tasks came with 2025-11-25: an older client is offered none. */
static bool with_tasks(const char *version)
{
        return strcmp(version, "2025-11-25") >= 0;
}

static json_t *initialize_result(const char *version)
{
        json_t *caps =
            json_pack("{s:{s:b}, s:{}, s:{s:b, s:b}, s:{}}", "tools", "listChanged", 0, "logging",
                      "resources", "listChanged", 1, "subscribe", 0, "completions");
        if (caps && with_tasks(version))
                json_object_set_new(caps, "tasks",
                                    json_pack("{s:{}, s:{}, s:{s:{s:{}}}}", "list", "cancel",
                                              "requests", "tools", "call"));
        return json_pack(
            "{s:s, s:o, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", version, "capabilities", caps,
            "serverInfo", "name", "corral", "title", "corral sandbox", "version", CORRAL_VERSION,
            "instructions",
            "Use run_python or run_shell to run code in a fresh, isolated sandbox "
            "(no network, read-only root, writable /tmp and /workspace). Each call gets a "
            "new sandbox, unless it names a `session`: then variables, imports and "
            "/workspace files persist across the calls with that name (write_file, "
            "read_file and list_files reach its files; session_close ends it). Files the "
            "code writes under /workspace/out/ come back with the result. More, with "
            "examples: resource " GUIDE_URI ".");
}

static void initialize(struct mcp_server *s, json_t *id, json_t *params)
{
        if (!json_is_string(json_object_get(params, "protocolVersion"))) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "initialize needs a \"protocolVersion\" string");
                return;
        }
        const char *version = negotiate(params);
        snprintf(s->protocol, sizeof(s->protocol), "%s", version);
        /* Elicitation in form mode: an empty object (form implied) or one
         * naming "form". */
        json_t *el = json_object_get(json_object_get(params, "capabilities"), "elicitation");
        s->elicit_form =
            json_is_object(el) && (json_object_size(el) == 0 || json_object_get(el, "form"));
        mcp_send(s, jrpc_result(id, initialize_result(version)));
        s->initialized = true;
}

static void ping(struct mcp_server *s, json_t *id, json_t *params)
{
        mcp_send(s, jrpc_result(id, json_object()));
}

static void tools_list_request(struct mcp_server *s, json_t *id, json_t *params)
{
        /* One page holds every tool: no cursor was ever given out. */
        if (json_object_get(params, "cursor")) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "unknown cursor: corral lists every tool on one page");
                return;
        }
        mcp_send(s, jrpc_result(id, json_pack("{s:o}", "tools",
                                              tools_list(s->names, sandbox_mgr_images(s->mgr),
                                                         sandbox_mgr_mounts(s->mgr),
                                                         mcp_server_tasks(s)))));
}

static void set_level(struct mcp_server *s, json_t *id, json_t *params)
{
        const char *level = json_string_value(json_object_get(params, "level"));
        enum log_level l;
        if (!level || log_level_parse(level, &l) < 0) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "level must be one of debug, info, notice, warning, error, "
                               "critical, alert, emergency");
                return;
        }
        /* What this client is sent (notifications/message); corral's own
         * log on stderr keeps the level of its settings. */
        s->log_level = l;
        mcp_send(s, jrpc_result(id, json_object()));
}

/* The requests corral answers; params is absent or an object. */
static const struct {
        const char *method;
        void (*answer)(struct mcp_server *s, json_t *id, json_t *params);
} methods[] = {
    {"initialize", initialize},
    {"ping", ping},
    {"tools/list", tools_list_request},
    {"tools/call", tools_call},
    {"tasks/get", tasks_get},
    {"tasks/result", tasks_result},
    {"tasks/cancel", tasks_cancel},
    {"tasks/list", tasks_list},
    {"logging/setLevel", set_level},
    {"resources/list", resources_list},
    {"resources/templates/list", resources_templates_list},
    {"resources/read", resources_read},
    {"completion/complete", completion_complete},
};

static void handle_request(struct mcp_server *s, struct jrpc_msg *m)
{
        const char *method = m->method;
        /* JSON-RPC gives no other way to answer than with the same id: the
         * host sees this error under the id of its running request, whose
         * own answer (or cancellation) still comes as if this one had not
         * been sent. */
        /* A second request with the id of one not answered yet would make
         * the answers, and a notifications/cancelled, ambiguous. */
        if (request_find(s, m->id)) {
                mcp_send_error(s, m->id, JRPC_INVALID_REQUEST,
                               "this id belongs to a request still running: a request needs an id "
                               "that no unanswered request of this session uses");
                return;
        }
        /* MCP lifecycle: initialize first; ping is always answered. Requests
         * between the initialize answer and notifications/initialized are
         * served: SDK clients send them without waiting. */
        if (!s->initialized && strcmp(method, "initialize") != 0 && strcmp(method, "ping") != 0) {
                char msg[200];
                snprintf(msg, sizeof(msg),
                         "\"%.60s\" before initialize: send \"initialize\" first (only "
                         "\"ping\" is answered before it)",
                         method);
                mcp_send_error(s, m->id, JRPC_INVALID_REQUEST, utf8_scrub(msg));
                return;
        }
        if (m->params && !json_is_object(m->params)) {
                mcp_send_error(s, m->id, JRPC_INVALID_PARAMS, "params must be an object");
                return;
        }
        if (strncmp(method, "tasks/", 6) == 0 && !mcp_server_tasks(s)) {
                mcp_send_error(s, m->id, JRPC_METHOD_NOT_FOUND,
                               "tasks came with protocol 2025-11-25; this session negotiated an "
                               "older one");
                return;
        }
        for (size_t i = 0; i < ARRAY_SIZE(methods); i++)
                if (strcmp(method, methods[i].method) == 0) {
                        methods[i].answer(s, m->id, m->params);
                        return;
                }
        char msg[160];
        snprintf(msg, sizeof(msg), "method not found: %.100s", method);
        mcp_send_error(s, m->id, JRPC_METHOD_NOT_FOUND, msg);
}

/* A message over the transport's limit: refused, under its id when it
 * could be read, so that the host's request does not wait forever. */
static void on_too_long(void *userdata, json_t *id, bool notification)
{
        struct mcp_server *s = userdata;
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "message larger than the limit of %zu bytes (max_frame, raised to fit a "
                 "write_file of file_max_bytes in base64); skipped",
                 s->line_max);
        if (notification) {
                log_warn("%s (a notification: no reply)", msg);
                return;
        }
        log_warn("%s%s", msg, id ? "" : " (its id could not be read: answered with id null)");
        mcp_send_error(s, id, JRPC_INVALID_REQUEST, msg);
}

static void on_message(void *userdata, const char *text, size_t len)
{
        struct mcp_server *s = userdata;
        struct jrpc_msg m;
        json_t *id = NULL;
        struct err e = {0};
        int code = jrpc_parse(text, len, &m, &id, &e);
        if (code < 0) {
                mcp_send_error(s, code == JRPC_PARSE_ERROR ? NULL : id, code, e.msg);
                json_decref(id);
                return;
        }
        json_decref(id);
        switch (m.kind) {
        case JRPC_REQUEST:
                handle_request(s, &m);
                break;
        case JRPC_NOTIFICATION:
                if (strcmp(m.method, "notifications/cancelled") == 0)
                        cancel_request(s, m.params);
                /* Other notifications (initialized, roots changes...) need
                 * nothing, and a notification never gets a reply. */
                break;
        default:
                /* Answers to our questions (elicit.c); anything else is
                 * stray: ignored. */
                mcp_asks_response(s, &m);
                break;
        }
        jrpc_msg_done(&m);
}

static void on_ended(void *userdata)
{
        struct mcp_server *s = userdata;
        if (s->on_eof)
                s->on_eof(s->userdata);
}

const struct transport_events mcp_server_events = {
    .message = on_message,
    .too_long = on_too_long,
    .ended = on_ended,
};

int mcp_server_new(struct loop *l, const struct config *cfg, struct sandbox_mgr *mgr,
                   struct session_mgr *sessions, struct bridge *bridge, const char *owner,
                   void (*on_eof)(void *), void *userdata, struct mcp_server **ret)
{
        struct mcp_server *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        *s = (struct mcp_server){.loop = l,
                                 .cfg = cfg,
                                 .mgr = mgr,
                                 .sessions = sessions,
                                 .bridge = bridge,
                                 .on_eof = on_eof,
                                 .userdata = userdata};
        snprintf(s->owner, sizeof(s->owner), "%s", owner ? owner : "");
        s->log_level = LOG_WARN; /* until the client sets one */
        list_init(&s->calls);
        list_init(&s->requests);
        mcp_asks_init(s);
        if (resources_init(s) < 0) {
                free(s);
                return -ENOMEM;
        }
        servers_names(bridge, s->names, sizeof(s->names));
        s->line_max = tools_line_max(cfg);
        *ret = s;
        return 0;
}

void mcp_server_keep_sessions(struct mcp_server *s)
{
        s->keep_sessions = true;
}

void mcp_server_attach(struct mcp_server *s, struct transport *t)
{
        s->transport = t;
}

int mcp_server_serve_stdio(struct mcp_server *s, int in_fd, int out_fd)
{
        return transport_stdio_new(s->loop, in_fd, out_fd, s->line_max, &mcp_server_events, s,
                                   &s->transport);
}

void mcp_server_notify_log(struct mcp_server *s, enum log_level level, const char *logger,
                           const char *text)
{
        if (!s || !s->initialized || s->closing || level > s->log_level)
                return;
        mcp_send(s, jrpc_notification("notifications/message",
                                      json_pack("{s:s, s:s, s:s}", "level", log_level_name(level),
                                                "logger", logger, "data", text)));
}

bool mcp_server_tasks(const struct mcp_server *s)
{
        return with_tasks(s->protocol[0] ? s->protocol : protocol_versions[0]);
}

bool mcp_server_busy(const struct mcp_server *s)
{
        return calls_running(s) || requests_pending(s);
}

void mcp_server_stop(struct mcp_server *s)
{
        if (s && s->transport)
                transport_stop(s->transport);
}

void mcp_server_flush(struct mcp_server *s, int timeout_ms)
{
        if (s->transport)
                transport_flush(s->transport, timeout_ms);
}

void mcp_server_close(struct mcp_server *s)
{
        if (!s || s->closing)
                return;
        mcp_server_stop(s);
        transport_free(s->transport);
        s->transport = NULL;
        s->closing = true;
        mcp_asks_close(s);
        requests_drop_all(s);
        resources_free(s);
        /* A named client's sessions wait for its next MCP session (or
         * their idle time). */
        if (s->owner[0] && !s->keep_sessions)
                session_close_owner(s->sessions, s->owner);
        if (!calls_close(s))
                mcp_server_free(s);
}

void mcp_server_free(struct mcp_server *s)
{
        if (!s)
                return;
        mcp_server_stop(s);
        mcp_asks_close(s);
        requests_drop_all(s);
        calls_free(s);
        resources_free(s);
        results_free(s);
        transport_free(s->transport);
        free(s);
}
