/* The client side of MCP's "Streamable HTTP" transport, for one upstream
 * server: every JSON-RPC message is its own POST to the server's URL, and
 * the answer is nothing (202/204), one JSON body (a message or a batch), or
 * an event stream that may carry the server's own requests and
 * notifications before the response; a GET stream carries what the server
 * sends unasked. The session id the server gives with
 * the answer to initialize goes on every later request, and the session is
 * ended with DELETE at shutdown. Transfers run on a curl_loop; messages are
 * handed on from the event loop, never from inside libcurl. Knows HTTP, not
 * MCP: the caller says which POST carries initialize and which request id.
 *
 * Header values are secrets: every message from here is masked with the
 * `mask` it was given (upstream/mask.h) before anything in it is cut. The
 * URL is shown without its user information and query, and an error
 * answer as a short excerpt (the JSON-RPC error's message, or the start of
 * the body): a server may echo the request, headers and all. */
#pragma once

#include "core/buf.h"
#include "core/curl_loop.h"
#include "core/util.h"

#include <jansson.h>
#include <stdbool.h>

struct mask;

/* ---- response bodies into messages (no I/O; fed what libcurl reads) */

enum http_body_kind {
        HTTP_BODY_JSON, /* application/json: one message, or an array of them */
        HTTP_BODY_SSE,  /* text/event-stream: the data of each event is one message */
};

struct http_body {
        enum http_body_kind kind;
        size_t max;      /* bytes per message (JSON: the whole body) */
        struct buf line; /* SSE: the line being read; JSON: the body so far */
        struct buf data; /* SSE: the current event's data lines, joined by "\n" */
        bool have_data;  /* SSE: a data field was seen in this event */
        bool after_cr;   /* SSE: the last byte was a CR (a CRLF may span feeds) */
        bool started;    /* SSE: past a leading byte order mark, if any */
        size_t bom;      /* SSE: bytes of a possible byte order mark matched so far */
};

void http_body_init(struct http_body *b, enum http_body_kind kind, size_t max);
void http_body_free(struct http_body *b);
/* Feed body bytes. For SSE each event completed by a blank line whose data
 * is not empty is passed to cb (not NUL-terminated); comments and the
 * event, id and retry fields are ignored. Returns -EMSGSIZE when a message
 * (or an SSE line) passes `max`, or cb's negative return, which stops it. */
int http_body_feed(struct http_body *b, const char *p, size_t n, line_cb cb, void *userdata);
/* The body ended. A JSON body is passed on now: an object as it came, each
 * member of an array encoded on its own; -EBADMSG when it is not JSON. An
 * SSE event not closed by a blank line is dropped, as SSE defines. */
int http_body_end(struct http_body *b, line_cb cb, void *userdata);

/* ---- the connection */

struct http_conn;

struct http_conn_ops {
        /* One message from the server (not NUL-terminated). */
        int (*message)(void *userdata, const char *msg, size_t len);
        /* The POST that carried request `id` (0: a notification or a
         * response) is over: `e` NULL when the server took it, and then
         * every message of its answer came before this; else why not, with
         * e->code -EMSGSIZE (a message over the limit), -ETIMEDOUT, or another
         * negative errno. `lost`: the connection is of no more use (the session
         * expired, the server cannot be reached); start again with a new
         * connection and initialize. */
        void (*post_done)(void *userdata, json_int_t id, const struct err *e, bool lost);
};

/* `url` must be http:// or https://; `headers` ("Name: value", may be
 * NULL) are sent with every request; `mask` (borrowed, may be NULL; it must
 * outlive the connection) holds the secrets no message may show;
 * `max_message` bounds each message. */
int http_conn_new(struct curl_loop *cl, const char *url, char *const *headers, struct mask *mask,
                  size_t max_message, const struct http_conn_ops *ops, void *userdata,
                  struct http_conn **ret, struct err *e);
/* Frees at once, from inside one of its own callbacks too (each callback
 * is made from the loop as the last use of the connection); no callback
 * follows. Ends no session. Accepts NULL. */
void http_conn_free(struct http_conn *c);

/* POST one encoded message (copied). `id`: the request id it carries, 0 for
 * none; `initialize`: take the session id from its answer. A request's POST
 * has no time limit of its own (its caller has one); others have 30 s. */
int http_conn_post(struct http_conn *c, const char *body, size_t len, json_int_t id,
                   bool initialize);
/* Open the GET stream on which the server may send requests and
 * notifications of its own at any time (once initialized). It is opened
 * again when it ends, later each time it fails at once; a server that
 * answers 405 has none. A 404 for the session is reported as a lost POST
 * (id 0). */
int http_conn_listen(struct http_conn *c);
/* The negotiated protocol version, sent as MCP-Protocol-Version from now
 * on; -EINVAL when it is not a short printable token. */
int http_conn_set_protocol_version(struct http_conn *c, const char *version);
/* The answer to request `id` is no longer wanted: stop its POST. */
void http_conn_forget(struct http_conn *c, json_int_t id);
/* Stop every POST and end the session with DELETE, waiting at most 2 s.
 * Returns true when `done` will be called (once the DELETE is over), false
 * when there is no session to end (`done` is not called). */
bool http_conn_shutdown(struct http_conn *c, void (*done)(void *), void *userdata);
/* Reach the server through the unix socket at `path` (the URL still names
 * the host and path sent). */
int http_conn_set_unix_socket(struct http_conn *c, const char *path);
/* The URL for messages: no user information, no query. */
const char *http_conn_url(const struct http_conn *c);
