#include "mcp/server.h"

#include "bridge/bridge.h"
#include "core/jsonrpc.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/util.h"
#include "mcp/internal.h"
#include "mcp/tools.h"
#include "mcp/transport.h"
#include "sandbox/sandbox.h"

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

void mcp_send(struct mcp_server *s, json_t *msg)
{
        transport_send(s->transport, msg);
}

void mcp_send_error(struct mcp_server *s, json_t *id, int code, const char *message)
{
        mcp_send(s, jrpc_error(id, code, message, NULL));
}

void mcp_send_result(struct mcp_server *s, json_t *id, json_t *result)
{
        if (result)
                mcp_send(s, jrpc_result(id, result));
        else
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "cannot encode the result");
}

/* ---- tools/call */

static void tools_call(struct mcp_server *s, json_t *id, json_t *params)
{
        const char *name = json_string_value(json_object_get(params, "name"));
        json_t *args = json_object_get(params, "arguments");
        char msg[512];
        if (!name) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, "tools/call needs a \"name\" string");
                return;
        }
        json_t *task = json_object_get(params, "task");
        if (task &&
            (!json_is_object(task) || (json_object_get(task, "ttl") &&
                                       (!json_is_integer(json_object_get(task, "ttl")) ||
                                        json_integer_value(json_object_get(task, "ttl")) < 0)))) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "\"task\" must be an object, with \"ttl\" a number of milliseconds");
                return;
        }
        /* Only the tools that run code declare taskSupport (optional). */
        if (task && strcmp(name, "run_python") != 0 && strcmp(name, "run_shell") != 0) {
                snprintf(msg, sizeof(msg),
                         "tool \"%.100s\" does not run as a task (only run_python and run_shell "
                         "do)",
                         name);
                mcp_send_error(s, id, JRPC_METHOD_NOT_FOUND, utf8_scrub(msg));
                return;
        }
        if (strcmp(name, "sandbox_status") == 0) {
                if (args && (!json_is_object(args) || json_object_size(args) > 0)) {
                        mcp_send_result(s, id,
                                        arguments_error("sandbox_status takes no arguments"));
                        return;
                }
                mcp_send(s, jrpc_result(id, tools_status_result(sandbox_mgr_status(s->mgr))));
                return;
        }
        if (strcmp(name, "list_servers") == 0) {
                tool_list_servers(s, id, args);
                return;
        }
        if (strcmp(name, "search_tools") == 0) {
                tool_search_tools(s, id, args);
                return;
        }
        static const struct {
                const char *name;
                void (*fn)(struct mcp_server *, json_t *, json_t *);
        } others[] = {{"job_status", tool_job_status},     {"job_result", tool_job_result},
                      {"job_cancel", tool_job_cancel},     {"job_list", tool_job_list},
                      {"session_list", tool_session_list}, {"session_close", tool_session_close},
                      {"write_file", tool_write_file},     {"read_file", tool_read_file},
                      {"list_files", tool_list_files}};
        for (size_t i = 0; i < ARRAY_SIZE(others); i++)
                if (strcmp(name, others[i].name) == 0) {
                        if (args && !json_is_object(args)) {
                                mcp_send_result(s, id,
                                                arguments_error("arguments must be an object"));
                                return;
                        }
                        others[i].fn(s, id, args);
                        return;
                }
        tool_run(s, id, args, params);
}

static void cancel_request(struct mcp_server *s, json_t *params)
{
        json_t *rid = json_object_get(params, "requestId");
        if (!rid)
                return;
        /* A job_result waiting: it ends without an answer. */
        if (!job_wait_withdraw(s, rid))
                calls_cancel(s, rid, json_string_value(json_object_get(params, "reason")));
}

/* ---- lifecycle */

static json_t *initialize_result(json_t *params)
{
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        const char *version = protocol_versions[0];
        for (size_t i = 0; asked && i < ARRAY_SIZE(protocol_versions); i++)
                if (strcmp(asked, protocol_versions[i]) == 0)
                        version = protocol_versions[i];
        return json_pack(
            "{s:s, s:{s:{s:b}, s:{}, s:{s:{}, s:{}, s:{s:{s:{}}}}}, s:{s:s, s:s, s:s}, s:s}",
            "protocolVersion", version, "capabilities", "tools", "listChanged", 0, "logging",
            "tasks", "list", "cancel", "requests", "tools", "call", "serverInfo", "name", "corral",
            "title", "corral sandbox", "version", CORRAL_VERSION, "instructions",
            "Use run_python or run_shell to run code in a fresh, isolated sandbox "
            "(no network, read-only root, writable /tmp and /workspace). Each call gets a "
            "new sandbox, unless it names a `session`: then variables, imports and "
            "/workspace files persist across the calls with that name (write_file, "
            "read_file and list_files reach its files; session_close ends it). Files the "
            "code writes under /workspace/out/ come back with the result.");
}

/* Whether `id` names a request not answered yet: a second one with it
 * would make the answers, and a notifications/cancelled, ambiguous. */
static bool id_in_flight(struct mcp_server *s, const json_t *id)
{
        return calls_in_flight(s, id) || job_waits_in_flight(s, id) ||
               file_calls_in_flight(s, id) || searches_in_flight(s, id);
}

static void handle_request(struct mcp_server *s, struct jrpc_msg *m)
{
        const char *method = m->method;
        /* JSON-RPC gives no other way to answer than with the same id: the
         * host sees this error under the id of its running request, whose
         * own answer (or cancellation) still comes as if this one had not
         * been sent. */
        if (id_in_flight(s, m->id)) {
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
        if (strcmp(method, "initialize") == 0) {
                if (!json_is_string(json_object_get(m->params, "protocolVersion"))) {
                        mcp_send_error(s, m->id, JRPC_INVALID_PARAMS,
                                       "initialize needs a \"protocolVersion\" string");
                        return;
                }
                mcp_send(s, jrpc_result(m->id, initialize_result(m->params)));
                s->initialized = true;
        } else if (strcmp(method, "ping") == 0) {
                mcp_send(s, jrpc_result(m->id, json_object()));
        } else if (strcmp(method, "tools/list") == 0) {
                mcp_send(
                    s, jrpc_result(m->id, json_pack("{s:o}", "tools",
                                                    tools_list(s->names, sandbox_mgr_images(s->mgr),
                                                               sandbox_mgr_mounts(s->mgr)))));
        } else if (strcmp(method, "tools/call") == 0) {
                tools_call(s, m->id, m->params);
        } else if (strcmp(method, "tasks/get") == 0) {
                tasks_get(s, m->id, m->params);
        } else if (strcmp(method, "tasks/result") == 0) {
                tasks_result(s, m->id, m->params);
        } else if (strcmp(method, "tasks/cancel") == 0) {
                tasks_cancel(s, m->id, m->params);
        } else if (strcmp(method, "tasks/list") == 0) {
                tasks_list(s, m->id, m->params);
        } else if (strcmp(method, "logging/setLevel") == 0) {
                const char *level = json_string_value(json_object_get(m->params, "level"));
                enum log_level l;
                if (!level || log_level_parse(level, &l) < 0) {
                        mcp_send_error(s, m->id, JRPC_INVALID_PARAMS,
                                       "level must be one of debug, info, notice, warning, error, "
                                       "critical, alert, emergency");
                        return;
                }
                /* Logs still go to stderr only; the level filters them. */
                log_max_level = l;
                mcp_send(s, jrpc_result(m->id, json_object()));
        } else {
                char msg[160];
                snprintf(msg, sizeof(msg), "method not found: %.100s", method);
                mcp_send_error(s, m->id, JRPC_METHOD_NOT_FOUND, msg);
        }
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
                /* We send no requests, so responses are stray: ignore. */
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

static const struct transport_events stdio_events = {
    .message = on_message,
    .too_long = on_too_long,
    .ended = on_ended,
};

int mcp_server_new(struct loop *l, const struct config *cfg, struct sandbox_mgr *mgr,
                   struct session_mgr *sessions, struct bridge *bridge, int in_fd, int out_fd,
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
        servers_names(bridge, s->names, sizeof(s->names));
        s->line_max = tools_line_max(cfg);
        int r = transport_stdio_new(l, in_fd, out_fd, s->line_max, &stdio_events, s, &s->transport);
        if (r < 0) {
                mcp_server_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

void mcp_server_stop(struct mcp_server *s)
{
        if (s->transport)
                transport_stop(s->transport);
}

void mcp_server_flush(struct mcp_server *s, int timeout_ms)
{
        transport_flush(s->transport, timeout_ms);
}

void mcp_server_free(struct mcp_server *s)
{
        if (!s)
                return;
        mcp_server_stop(s);
        calls_free(s);
        file_calls_free(s);
        searches_free(s);
        transport_free(s->transport);
        free(s);
}
