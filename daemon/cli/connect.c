/* corral connect: a stdio MCP server for hosts that start one, relaying to
 * the user's corral service over its unix socket (streamable HTTP), so that
 * every host window shares the service's pool and sessions outlive none of
 * them. Starts nothing: with no service it answers the host's first request
 * with how to start one and exits, or, with connect_fallback, serves stdio
 * itself (corral serve). A plain stdio corral with no settings of its own
 * relays the same way (cli_relay) when the service runs. */
#include "cli/cli.h"

#include "core/curl_loop.h"
#include "core/jsonrpc.h"
#include "core/log.h"
#include "mcp/http.h"
#include "mcp/transport.h"
#include "upstream/http.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* How long a host that started `corral connect` with no service may take
 * to send its first request, which is answered with the advice. */
#define NO_SERVICE_WAIT_MS 10000

#define PENDING_MAX 1024 /* host requests on their way at once */

struct pending {
        json_int_t tag; /* the POST's, 0: free */
        json_t *id;     /* the host's id */
        bool initialize;
};

struct relay {
        struct loop *loop;
        struct curl_loop *cl;
        struct http_conn *conn;
        struct transport *host;
        struct pending pending[PENDING_MAX];
        json_int_t seq;
        json_t *init_id; /* the initialize request's id, until answered */
        bool listening, ended;
        int status;
};

static void finish(void *userdata)
{
        loop_quit(((struct relay *)userdata)->loop);
}

static void stop(struct relay *r, int status)
{
        if (r->ended)
                return;
        r->ended = true;
        r->status = status;
        transport_stop(r->host);
        if (!http_conn_shutdown(r->conn, finish, r))
                loop_quit(r->loop);
}

/* From the service: to the host as it came. */
static int from_service(void *userdata, const char *msg, size_t len)
{
        struct relay *r = userdata;
        json_t *m = json_loadb(msg, len, 0, NULL);
        if (!m)
                return 0;
        json_t *id = json_object_get(m, "id");
        if (r->init_id && id && json_equal(id, r->init_id) && !json_object_get(m, "method")) {
                /* The version the service chose goes on every later POST;
                 * its own messages come on the GET stream from now on. */
                const char *v = json_string_value(
                    json_object_get(json_object_get(m, "result"), "protocolVersion"));
                if (v)
                        http_conn_set_protocol_version(r->conn, v);
                json_decref(r->init_id);
                r->init_id = NULL;
                if (v && !r->listening && http_conn_listen(r->conn) == 0)
                        r->listening = true;
        }
        transport_send(r->host, m);
        return 0;
}

static struct pending *pending_find(struct relay *r, json_int_t tag)
{
        for (size_t i = 0; i < PENDING_MAX; i++)
                if (r->pending[i].tag == tag)
                        return &r->pending[i];
        return NULL;
}

static void post_done(void *userdata, json_int_t tag, const struct err *e, bool lost)
{
        struct relay *r = userdata;
        struct pending *p = tag ? pending_find(r, tag) : NULL;
        if (e) {
                char msg[600];
                snprintf(msg, sizeof(msg), "the corral service did not answer: %.500s", e->msg);
                log_err("%s", msg);
                if (p)
                        transport_send(r->host, jrpc_error(p->id, JRPC_INTERNAL_ERROR, msg, NULL));
        }
        if (p) {
                json_decref(p->id);
                *p = (struct pending){0};
        }
        if (lost) {
                log_err("lost the corral service (it stopped, or ended this MCP session): "
                        "restart the MCP server in your host");
                stop(r, 1);
        }
}

static const struct http_conn_ops service_ops = {
    .message = from_service,
    .post_done = post_done,
};

/* From the host: one POST each; a request's POST is tagged, so that a
 * failure can be answered under the host's id. */
static void from_host(void *userdata, const char *text, size_t len)
{
        struct relay *r = userdata;
        json_auto_t *m = json_loadb(text, len, 0, NULL);
        const char *method = json_string_value(json_object_get(m, "method"));
        json_t *id = json_object_get(m, "id");
        json_int_t tag = 0;
        bool init = method && strcmp(method, "initialize") == 0;
        if (method && id) {
                struct pending *p = pending_find(r, 0);
                if (!p) {
                        transport_send(r->host, jrpc_error(id, JRPC_INTERNAL_ERROR,
                                                           "too many requests on their way", NULL));
                        return;
                }
                tag = ++r->seq;
                *p = (struct pending){.tag = tag, .id = json_incref(id), .initialize = init};
                if (init) {
                        json_decref(r->init_id);
                        r->init_id = json_incref(id);
                }
        }
        if (!m) {
                /* Not JSON: the service says so, under no id. */
                tag = 0;
        }
        if (http_conn_post(r->conn, text, len, tag, init) < 0)
                log_err("cannot send a message to the service");
}

static void host_too_long(void *userdata, json_t *id, bool notification)
{
        struct relay *r = userdata;
        if (!notification)
                transport_send(r->host, jrpc_error(id, JRPC_INVALID_REQUEST,
                                                   "message larger than max_frame; skipped", NULL));
}

static void host_ended(void *userdata)
{
        stop(userdata, 0);
}

static const struct transport_events host_events = {
    .message = from_host,
    .too_long = host_too_long,
    .ended = host_ended,
};

static void on_signal(int signo, void *userdata)
{
        (void)signo;
        stop(userdata, 0);
}

/* ---- no service: the host's first request gets the advice */

struct refusal {
        struct loop *loop;
        struct transport *host;
        struct timer *timer;
        const char *msg;
};

static void refuse_message(void *userdata, const char *text, size_t len)
{
        struct refusal *f = userdata;
        json_auto_t *m = json_loadb(text, len, 0, NULL);
        json_t *id = json_object_get(m, "id");
        if (!json_is_string(json_object_get(m, "method")) || !id || json_is_null(id))
                return; /* a notification wants no answer */
        transport_send(f->host, jrpc_error(id, JRPC_INTERNAL_ERROR, f->msg, NULL));
        transport_stop(f->host);
        loop_quit(f->loop);
}

static void refuse_too_long(void *userdata, json_t *id, bool notification)
{
        struct refusal *f = userdata;
        if (notification || !id)
                return;
        transport_send(f->host, jrpc_error(id, JRPC_INTERNAL_ERROR, f->msg, NULL));
        loop_quit(f->loop);
}

static void refuse_ended(void *userdata)
{
        loop_quit(((struct refusal *)userdata)->loop);
}

static void refuse_timeout(struct timer *t, void *userdata)
{
        (void)t;
        loop_quit(((struct refusal *)userdata)->loop);
}

static const struct transport_events refuse_events = {
    .message = refuse_message,
    .too_long = refuse_too_long,
    .ended = refuse_ended,
};

/* A host that starts `corral connect` waits for the answer to its
 * `initialize`: an exit without one reads as a crash, and the advice in
 * the log is seldom shown. The first request gets an error that carries
 * the advice; then connect exits. From a terminal, the log line is it. */
static void refuse_host(const struct config *cfg, const char *msg)
{
        if (isatty(STDIN_FILENO))
                return;
        signal(SIGPIPE, SIG_IGN);
        struct refusal f = {.msg = msg};
        int rc = loop_new(&f.loop);
        if (rc == 0)
                rc = transport_stdio_new(f.loop, STDIN_FILENO, STDOUT_FILENO, cfg->max_frame,
                                         &refuse_events, &f, &f.host);
        if (rc == 0)
                rc = timer_set(f.loop, &f.timer, refuse_timeout, &f, NO_SERVICE_WAIT_MS);
        if (rc == 0)
                loop_run(f.loop);
        if (f.host)
                transport_flush(f.host, 1000);
        transport_free(f.host);
        timer_remove(f.timer);
        loop_free(f.loop);
}

int cli_relay(const struct config *cfg, const char *path, const char *client_name)
{
        struct err e = {0};
        /* A name keeps the host's sessions for its next connection, and
         * shares them with its other windows (mcp/http.h). */
        char client[sizeof("Corral-Client: ") + CLIENT_NAME_MAX] = "";
        if (client_name)
                snprintf(client, sizeof(client), "Corral-Client: %s", client_name);
        char *headers[] = {client[0] ? client : NULL, NULL};
        signal(SIGPIPE, SIG_IGN);
        struct relay r = {0};
        int rc = loop_new(&r.loop);
        size_t max = cfg->max_frame;
        if (rc == 0)
                rc = curl_loop_new(r.loop, &r.cl);
        if (rc == 0 && http_conn_new(r.cl, "http://localhost/mcp", headers, NULL, max, &service_ops,
                                     &r, &r.conn, &e) < 0)
                rc = -EINVAL;
        if (rc == 0)
                rc = http_conn_set_unix_socket(r.conn, path);
        if (rc == 0)
                rc = transport_stdio_new(r.loop, STDIN_FILENO, STDOUT_FILENO, max, &host_events, &r,
                                         &r.host);
        if (rc == 0)
                rc = loop_signal(r.loop, SIGTERM, on_signal, &r);
        if (rc == 0)
                rc = loop_signal(r.loop, SIGINT, on_signal, &r);
        if (rc == 0)
                rc = loop_run(r.loop);
        if (rc < 0)
                log_err("corral connect: %s", e.msg[0] ? e.msg : strerror(-rc));
        if (r.host)
                transport_flush(r.host, 1000);
        transport_free(r.host);
        http_conn_free(r.conn);
        curl_loop_free(r.cl);
        for (size_t i = 0; i < PENDING_MAX; i++)
                json_decref(r.pending[i].id);
        json_decref(r.init_id);
        loop_free(r.loop);
        return rc < 0 ? 1 : r.status;
}

int cli_connect(int argc, char **argv)
{
        _cleanup_config_ struct config cfg = {0};
        _cleanup_free_ char **rest = NULL;
        int n_rest;
        if (cli_config(argc, argv, &cfg, &rest, &n_rest) < 0)
                return 2;
        char path[300] = "";
        for (int i = 0; i < n_rest; i++) {
                if (strcmp(rest[i], "--socket") == 0 && i + 1 < n_rest) {
                        snprintf(path, sizeof(path), "%s", rest[++i]);
                } else if (strcmp(rest[i], "--as") == 0 && i + 1 < n_rest) {
                        free(cfg.client_name);
                        cfg.client_name = strdup(rest[++i]);
                } else {
                        fprintf(stderr, "corral connect: unknown argument \"%s\"\n", rest[i]);
                        return 2;
                }
        }
        for (char **a = cfg.listen; !path[0] && a && *a; a++)
                if (strncmp(*a, "unix:", 5) == 0 && (*a)[5])
                        snprintf(path, sizeof(path), "%s", *a + 5);
        struct err e = {0};
        if (cfg.client_name && mcp_client_name_check(cfg.client_name, &e) < 0) {
                fprintf(stderr, "corral connect: %s\n", e.msg);
                return 2;
        }
        if (!path[0] && service_socket_path(path, sizeof(path), &e) < 0) {
                log_err("%s", e.msg);
                return 1;
        }
        if (!unix_socket_answers(path)) {
                if (cfg.connect_fallback) {
                        log_info("no corral service at %s: serving this host alone "
                                 "(connect_fallback)",
                                 path);
                        /* Without connect's own arguments: serving alone,
                         * there is no socket and no one to share with. */
                        int n = 0;
                        for (int i = 0; i < argc; i++) {
                                if ((strcmp(argv[i], "--socket") == 0 ||
                                     strcmp(argv[i], "--as") == 0) &&
                                    i + 1 < argc)
                                        i++;
                                else
                                        argv[n++] = argv[i];
                        }
                        argv[n] = NULL;
                        return cli_serve(n, argv);
                }
                char msg[600];
                snprintf(msg, sizeof(msg),
                         "no corral service at %s: start it with `systemctl --user start "
                         "corral.socket` (the units in contrib/systemd), or `corral serve "
                         "--listen unix &`; or set connect_fallback to serve this host alone",
                         path);
                log_err("%s", msg);
                refuse_host(&cfg, msg);
                return 1;
        }
        return cli_relay(&cfg, path, cfg.client_name);
}
