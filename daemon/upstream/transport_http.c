/* The streamable HTTP transport (transport.h) over http.c's connection: a
 * connection stands for the process. Its events come from http.c's
 * dispatch, one per deferred call, so they reach the client from the loop
 * as transport.h requires. */
#include "upstream/internal.h"
#include "upstream/transport.h"

#include "core/curl_loop.h"
#include "upstream/http.h"

#include <string.h>

struct http_transport {
        struct transport t;
        struct upstream *u;
        struct http_conn *conn;
};

static int on_message(void *userdata, const char *msg, size_t len)
{
        struct http_transport *ht = userdata;
        ht->t.ev->message(ht->t.userdata, msg, len);
        return 0;
}

static void on_post_done(void *userdata, json_int_t id, const struct err *e, bool lost)
{
        struct http_transport *ht = userdata;
        ht->t.ev->failed(ht->t.userdata, id, e, lost);
}

static const struct http_conn_ops conn_ops = {
    .message = on_message,
    .post_done = on_post_done,
};

static int http_send(struct transport *t, const char *msg, size_t len, json_int_t id,
                     bool initialize)
{
        struct http_transport *ht = (struct http_transport *)t;
        return http_conn_post(ht->conn, msg, len, id, initialize);
}

static void http_forget(struct transport *t, json_int_t id)
{
        struct http_transport *ht = (struct http_transport *)t;
        http_conn_forget(ht->conn, id);
}

static void http_agreed(struct transport *t, const char *version)
{
        struct http_transport *ht = (struct http_transport *)t;
        /* Every later request names the version agreed on. */
        if (http_conn_set_protocol_version(ht->conn, version) < 0)
                http_conn_set_protocol_version(ht->conn, UPSTREAM_PROTOCOL_VERSION);
}

static void http_opened(struct transport *t)
{
        struct http_transport *ht = (struct http_transport *)t;
        /* What the server sends unasked (list changes, logs) comes on a
         * stream of its own. */
        if (http_conn_listen(ht->conn) < 0)
                log_warn("upstream %s: cannot open the stream for its own messages",
                         ht->u->spec->name);
}

static void session_ended(void *userdata)
{
        struct http_transport *ht = userdata;
        ht->t.ev->stopped(ht->t.userdata);
}

/* End the session with DELETE (best effort, briefly). */
static bool http_stop(struct transport *t)
{
        struct http_transport *ht = (struct http_transport *)t;
        return http_conn_shutdown(ht->conn, session_ended, ht);
}

static void http_close(struct transport *t)
{
        struct http_transport *ht = (struct http_transport *)t;
        if (!ht)
                return;
        http_conn_free(ht->conn);
        free(ht);
}

static const struct transport_ops http_ops = {
    .send = http_send,
    .forget = http_forget,
    .agreed = http_agreed,
    .opened = http_opened,
    .stop = http_stop,
    .close = http_close,
};

int http_transport_open(struct upstream *u, const struct transport_events *ev, void *userdata,
                        struct transport **ret, struct err *e)
{
        struct upstream_set *set = u->set;
        int r = set->curl ? 0 : curl_loop_new(set->loop, &set->curl);
        if (r < 0)
                return err_set(e, ERR_INTERNAL, -r, "cannot set up libcurl: %s", strerror(-r));
        struct http_transport *ht = calloc(1, sizeof(*ht));
        if (!ht)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        ht->t = (struct transport){.ops = &http_ops, .ev = ev, .userdata = userdata};
        ht->u = u;
        /* Room for a result of a whole frame plus the envelope, as on
         * stdio. */
        r = http_conn_new(set->curl, u->spec->url, u->spec->headers, set->reg.mask,
                          2 * set->cfg->max_frame, &conn_ops, ht, &ht->conn, e);
        if (r < 0) {
                if (!e->msg[0])
                        err_set(e, ERR_INTERNAL, -r, "%s", strerror(-r));
                free(ht);
                return r;
        }
        *ret = &ht->t;
        return 0;
}
