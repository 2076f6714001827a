/* MCP streamable HTTP (mcp/http.h). Two libmicrohttpd daemons with no
 * listening socket of their own, one for the unix sockets and one for TCP:
 * corral accepts (so that it can check a unix peer's uid before a byte is
 * read, and decide who holds a slot) and hands each connection over.
 *
 * A POST carries one JSON-RPC message. A request's answer comes on that
 * POST's response: application/json, or an event stream when the call may
 * send notifications first (tools/call with a progress token). Everything
 * else the server sends (task status, log messages) goes on the session's
 * GET stream, or waits for one in a small bounded queue. A response body
 * that has nothing to send yet suspends its connection; a message resumes
 * it. */
#include "mcp/http.h"

#include "core/buf.h"
#include "core/jsonrpc.h"
#include "core/list.h"
#include "core/log.h"
#include "core/metrics.h"
#include "mcp/host.h"
#include "mcp/server.h"
#include "mcp/tools.h"
#include "mcp/transport.h"
#include "sandbox/sandbox.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MCP_PATH         "/mcp"
#define SESSION_ID_BYTES 16
#define SESSION_ID_LEN   (2 * SESSION_ID_BYTES)
#define HELD_MAX         64        /* messages waiting for a GET stream */
#define STREAM_OUT_MAX   (1 << 30) /* a stream's unsent bytes (ours to make) */
#define TICK_MS          5000
#define LISTENERS_MAX    16
#define TOKEN_BYTES      32
#define FD_RESERVE       256 /* descriptors kept for the engine, sandboxes, upstreams */
/* Connections corral closed that MHD has yet to end (on its next run): up
 * to two for each of a round's 32 accepts, on two TCP listeners. */
#define MHD_SLACK     128
#define PEER_BUCKETS  256
#define PEER_KEY      17
#define WARN_EVERY_MS 60000

static const char *const protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                "2024-11-05"};

struct listener {
        struct mcp_http *h;
        int fd;
        bool unix_socket;
        char display[300];
        char unlink_path[256]; /* a socket file we made: removed at the end */
        struct watch *watch;
        struct timer *retry; /* out of descriptors: accept again later */
};

/* A door: one libmicrohttpd daemon, driven by the loop (its epoll fd one
 * watch, its timeout one timer). The unix sockets and TCP have one each,
 * because a slot is a slot: no number of TCP connections, which any user
 * of the machine can open, may take one the owner's unix socket needs. */
enum { DOOR_UNIX, DOOR_TCP, DOORS };

struct door {
        struct mcp_http *h;
        struct MHD_Daemon *mhd;
        struct watch *watch;
        struct timer *timer;
        struct defer run_d;
        int again; /* MHD_run calls in a row that asked for more at once */
        bool tcp;
        long max;  /* connections held at once */
        long held; /* connections held (not those corral closed) */
        long n_pending;
        /* TCP connections that have not presented the token yet, oldest
         * first: each has http_header_timeout_s from its accept to do so. */
        struct list pending;
        struct timer *deadline;
        struct conn *adding; /* in MHD_add_connection, until MHD takes it */
};

/* An address's unauthenticated TCP connections. */
struct peer {
        struct peer *next;
        unsigned char key[PEER_KEY]; /* the family, then the address (IPv6: its /64) */
        long pending;
};

/* One connection, from accept until MHD ends it (its socket context). */
struct conn {
        struct door *d;
        int fd;            /* MHD's from MHD_add_connection on */
        struct list node;  /* in d->pending until it authenticates */
        struct peer *peer; /* TCP, while pending */
        long long deadline_ms;
        bool closing; /* shut by corral; MHD ends it on its next run */
};

struct session;

/* One HTTP request, from its headers until MHD says it is complete. */
struct req {
        struct mcp_http *h;
        struct door *door;
        struct MHD_Connection *conn;
        struct session *sess; /* the MCP session it belongs to, or NULL */
        struct list node;     /* in sess->streams while it is one */
        struct buf body;
        int status;    /* an answer decided before the body was read */
        char why[600]; /* room for the token file's path */
        bool too_long;
        /* A stream: the answer to `id` (and, SSE, what comes before it) or
         * a GET stream. */
        bool stream, sse, get, done, suspended;
        bool health; /* parked until the sandbox manager answers /health */
        bool parked; /* a JSON answer not there yet: suspended, no response */
        char new_session[SESSION_ID_LEN + 1]; /* initialize's: sent as Mcp-Session-Id */
        json_t *id, *ptoken;
        struct buf out;
};

struct session {
        struct mcp_http *h;
        struct list node; /* in h->sessions */
        char id[SESSION_ID_LEN + 1];
        char owner[40];
        struct transport t; /* what the server sends through */
        struct mcp_server *srv;
        struct list streams; /* struct req */
        json_t *held;        /* messages for a GET stream not open yet */
        long long last_ms;
        bool ended;
};

struct mcp_http {
        struct loop *loop;
        const struct config *cfg;
        mcp_http_server_new server_new;
        void *userdata;
        struct door doors[DOORS];
        struct timer *tick;
        struct peer *peers[PEER_BUCKETS];
        long peer_max; /* unauthenticated TCP connections of one address */
        /* TCP connections closed before they presented the token: past
         * http_header_timeout_s, to make room, or refused (every slot
         * authenticated); when corral last said so. */
        unsigned long long closed_timeout, closed_room, refused_full;
        long long room_warned_ms, fds_warned_ms;
        bool accepting;
        struct listener *ls[LISTENERS_MAX];
        size_t n_ls;
        struct list sessions;
        long n_sessions;
        unsigned long long seq;
        char token[2 * TOKEN_BYTES + 1];
        char token_where[512]; /* for the 401: the file, or the setting */
        bool stopping;
        /* Draining: no new MCP sessions, not ready, until the running
         * calls end or the bound passes; then done() (mcp_http_drain). */
        bool draining;
        long long drain_end_ms;
        struct timer *drain_timer;
        void (*drain_done)(void *userdata, long busy);
        void *drain_ud;
        /* /health and /metrics */
        json_t *(*status)(void *userdata);
        void *status_ud;
        struct sandbox_mgr *mgr;
        struct sandbox_health_wait *health_wait; /* one question for every waiting /health */
        struct list health_waits;                /* struct req, parked */
        json_t *health;                          /* the last answer, for those waiting */
};

/* ---- driving libmicrohttpd from the loop */

static void mhd_run_d(void *userdata);

/* MHD's work, then its next deadline: "now" is taken after this round of
 * the loop (a few times in a row, then 1 ms later, so that nothing spins). */
static void mhd_run(struct door *d)
{
        MHD_run(d->mhd);
        MHD_UNSIGNED_LONG_LONG t;
        if (MHD_get_timeout(d->mhd, &t) != MHD_YES) {
                timer_stop(d->timer);
                d->again = 0;
        } else if (t == 0 && d->again < 4) {
                d->again++;
                loop_defer(d->h->loop, &d->run_d, mhd_run_d, d);
        } else {
                d->again = 0;
                timer_arm(d->timer, t > 0 ? (long long)t : 1);
        }
}

static void mhd_run_d(void *userdata)
{
        mhd_run(userdata);
}

/* After work done outside MHD's callbacks (a resume, a new connection). */
static void mhd_kick(struct door *d)
{
        loop_defer(d->h->loop, &d->run_d, mhd_run_d, d);
}

static void on_mhd_fd(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        mhd_run(userdata);
}

static void on_mhd_timer(struct timer *t, void *userdata)
{
        (void)t;
        mhd_run(userdata);
}

/* ---- who holds a slot, and who loses it first
 *
 * Anyone on the machine can open TCP connections, and hold each one by
 * sending a byte now and then (all of them from 127.0.0.1, so an address
 * tells local users apart no better than it tells them from the token
 * holder). So a TCP connection holds its slot for http_header_timeout_s
 * only, until its headers are in with the token; then it keeps it until
 * idle. When the slots run out, the oldest that has not presented the
 * token is closed for the newcomer; one address holds at most a quarter of
 * the slots unauthenticated, and past that closes its own oldest. A flood
 * without the token so only ever takes slots from itself, and the unix
 * sockets have a door of their own. */

static void peer_key(const struct sockaddr *sa, unsigned char key[PEER_KEY])
{
        memset(key, 0, PEER_KEY);
        key[0] = (unsigned char)sa->sa_family;
        if (sa->sa_family == AF_INET) {
                memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                if (IN6_IS_ADDR_V4MAPPED(a)) {
                        key[0] = AF_INET;
                        memcpy(key + 1, a->s6_addr + 12, 4);
                } else {
                        /* Whoever has one address of a /64 has them all. */
                        memcpy(key + 1, a->s6_addr, 8);
                }
        }
}

static struct peer **peer_bucket(struct mcp_http *h, const unsigned char key[PEER_KEY])
{
        uint32_t x = 2166136261u;
        for (size_t i = 0; i < PEER_KEY; i++)
                x = (x ^ key[i]) * 16777619u;
        return &h->peers[x % PEER_BUCKETS];
}

/* The address's entry with one more pending connection, made when new. */
static struct peer *peer_hold(struct mcp_http *h, const struct sockaddr *sa)
{
        unsigned char key[PEER_KEY];
        peer_key(sa, key);
        struct peer **b = peer_bucket(h, key), *p;
        for (p = *b; p; p = p->next)
                if (memcmp(p->key, key, PEER_KEY) == 0)
                        break;
        if (!p) {
                p = calloc(1, sizeof(*p));
                if (!p)
                        return NULL;
                memcpy(p->key, key, PEER_KEY);
                p->next = *b;
                *b = p;
        }
        p->pending++;
        return p;
}

static void peer_release(struct mcp_http *h, struct peer *p)
{
        if (--p->pending > 0)
                return;
        for (struct peer **pp = peer_bucket(h, p->key); *pp; pp = &(*pp)->next) {
                if (*pp == p) {
                        *pp = p->next;
                        break;
                }
        }
        free(p);
}

/* Off the pending list: it authenticated, or it is gone. */
static void conn_unpend(struct conn *c)
{
        if (list_linked(&c->node)) {
                list_del(&c->node);
                c->d->n_pending--;
        }
        if (c->peer)
                peer_release(c->d->h, c->peer);
        c->peer = NULL;
}

/* A connection that has not presented the token goes: its socket is shut,
 * and MHD, finding it so on its next run, ends it and its request. Its
 * slot is free at once. */
static void conn_close(struct conn *c, unsigned long long *counter)
{
        conn_unpend(c);
        c->closing = true;
        c->d->held--;
        (*counter)++;
        shutdown(c->fd, SHUT_RDWR);
        mhd_kick(c->d);
}

static void on_deadline(struct timer *t, void *userdata)
{
        struct door *d = userdata;
        long long now = now_ms();
        struct conn *c;
        while ((c = list_first(&d->pending, struct conn, node)) && c->deadline_ms <= now)
                conn_close(c, &d->h->closed_timeout);
        if (c)
                timer_arm(t, c->deadline_ms - now);
}

/* A slot for a newcomer from `peer` (already counted in it; NULL: a unix
 * peer): false when every slot is held by a connection that authenticated. */
static bool make_room(struct door *d, struct peer *peer)
{
        struct mcp_http *h = d->h;
        bool closed = false;
        if (peer && peer->pending > h->peer_max) {
                struct conn *c;
                list_for_each(c, &d->pending, node)
                {
                        if (c->peer == peer) {
                                conn_close(c, &h->closed_room);
                                closed = true;
                                break;
                        }
                }
        }
        if (d->held >= d->max) {
                struct conn *oldest = list_first(&d->pending, struct conn, node);
                if (!oldest)
                        return false;
                conn_close(oldest, &h->closed_room);
                closed = true;
        }
        if (closed && now_ms() - h->room_warned_ms > WARN_EVERY_MS) {
                h->room_warned_ms = now_ms();
                log_warn("TCP connections at their limit (%ld at once, %ld of one address before "
                         "the token): closing the oldest that have not presented the token",
                         d->max, h->peer_max);
        }
        return true;
}

/* MHD takes a connection (from door_add, at once) or ends one. */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
        struct door *d = cls;
        (void)mc;
        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                *socket_context = d->adding;
                d->adding = NULL;
                return;
        }
        struct conn *c = *socket_context;
        if (!c)
                return;
        conn_unpend(c);
        if (!c->closing)
                c->d->held--;
        free(c);
        *socket_context = NULL;
}

/* A connection corral accepted, to its door: it takes a slot, making room
 * if it must, or is refused. */
static void door_add(struct door *d, int fd, const struct sockaddr *sa, socklen_t len,
                     const char *display)
{
        struct mcp_http *h = d->h;
        struct conn *c = calloc(1, sizeof(*c));
        if (c && d->tcp && !(c->peer = peer_hold(h, sa))) {
                free(c);
                c = NULL;
        }
        if (!c) {
                close(fd);
                log_warn("%s: out of memory for a connection", display);
                return;
        }
        c->d = d;
        c->fd = fd;
        if (!make_room(d, c->peer)) {
                h->refused_full++;
                if (now_ms() - h->room_warned_ms > WARN_EVERY_MS) {
                        h->room_warned_ms = now_ms();
                        log_warn("%s: refused a connection: all %ld slots are held by clients "
                                 "that %s (max_clients sets the number)",
                                 display, d->max,
                                 d->tcp ? "presented the token" : "came by a unix socket");
                }
                conn_unpend(c);
                close(fd);
                free(c);
                return;
        }
        d->held++;
        if (d->tcp) {
                long long wait = (long long)(h->cfg->http_header_timeout_s * 1000);
                c->deadline_ms = now_ms() + wait;
                if (list_empty(&d->pending))
                        timer_arm(d->deadline, wait);
                list_append(&d->pending, &c->node);
                d->n_pending++;
        }
        d->adding = c;
        if (MHD_add_connection(d->mhd, fd, sa, len) != MHD_YES)
                log_warn("%s: could not take a connection: %s", display, strerror(errno));
        if (d->adding) {
                /* MHD did not take it (and closed the socket). */
                d->adding = NULL;
                conn_unpend(c);
                d->held--;
                free(c);
        }
}

/* The connection of an MHD connection, or NULL. */
static struct conn *conn_of(struct MHD_Connection *mc)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return ci ? ci->socket_context : NULL;
}

/* ---- streams */

static void stream_wake(struct req *q)
{
        if (q->suspended) {
                q->suspended = false;
                MHD_resume_connection(q->conn);
                mhd_kick(q->door);
        }
}

/* One message onto a stream: an SSE event, or the JSON body. */
static void stream_put(struct req *q, const char *text, size_t len)
{
        int r = q->sse ? buf_append(&q->out, "event: message\ndata: ", 21) : 0;
        if (r == 0)
                r = buf_append(&q->out, text, len);
        if (r == 0 && q->sse)
                r = buf_append(&q->out, "\n\n", 2);
        if (r < 0)
                log_err("a client's stream is backed up; dropped a %zu-byte message", len);
        stream_wake(q);
}

static void stream_end(struct req *q)
{
        q->done = true;
        if (q->stream && list_linked(&q->node))
                list_del(&q->node);
        stream_wake(q);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
        struct req *q = cls;
        (void)pos;
        if (q->out.len > 0) {
                size_t n = q->out.len < max ? q->out.len : max;
                memcpy(out, q->out.data, n);
                buf_consume(&q->out, n);
                return (ssize_t)n;
        }
        if (q->done)
                return MHD_CONTENT_READER_END_OF_STREAM;
        /* Nothing yet: park the connection until a message comes. */
        q->suspended = true;
        MHD_suspend_connection(q->conn);
        return 0;
}

/* ---- the transport of one MCP session */

/* The stream waiting for the answer to `id`: the newest (a request that
 * reused a running one's id is refused at once, on its own stream). */
static struct req *stream_for_id(struct session *s, json_t *id)
{
        struct req *q, *found = NULL;
        list_for_each(q, &s->streams, node)
        {
                if (!q->get && !q->done && q->id && json_equal(q->id, id))
                        found = q;
        }
        return found;
}

static struct req *stream_for_token(struct session *s, json_t *token)
{
        struct req *q;
        list_for_each(q, &s->streams, node)
        {
                if (q->sse && !q->get && !q->done && q->ptoken && json_equal(q->ptoken, token))
                        return q;
        }
        return NULL;
}

static struct req *get_stream(struct session *s)
{
        struct req *q;
        list_for_each(q, &s->streams, node)
        {
                if (q->get && !q->done)
                        return q;
        }
        return NULL;
}

/* One message (borrowed) onto a stream. */
static void put_json(struct req *q, json_t *msg)
{
        size_t len = 0;
        char *text = jrpc_dump(msg, &len);
        if (!text) {
                log_err("cannot encode a message for a client");
                return;
        }
        stream_put(q, text, len);
        free(text);
}

static void session_send(struct transport *t, json_t *msg)
{
        struct session *s = (struct session *)((char *)t - offsetof(struct session, t));
        json_t *id = json_object_get(msg, "id");
        bool response = id && !json_object_get(msg, "method");
        struct req *q = NULL;
        if (response) {
                q = stream_for_id(s, id);
                if (q) {
                        put_json(q, msg);
                        stream_end(q);
                }
                /* Else the client went away: "disconnection is not
                 * cancellation", the answer has nowhere to go. */
                json_decref(msg);
                return;
        }
        json_t *token = json_object_get(json_object_get(msg, "params"), "progressToken");
        if (token)
                q = stream_for_token(s, token);
        if (!q)
                q = get_stream(s);
        if (q) {
                put_json(q, msg);
                json_decref(msg);
                return;
        }
        if (json_array_size(s->held) >= HELD_MAX)
                json_array_remove(s->held, 0);
        json_array_append_new(s->held, msg);
}

static void session_tr_stop(struct transport *t)
{
        (void)t;
}

static void session_tr_flush(struct transport *t, int timeout_ms)
{
        (void)t;
        (void)timeout_ms;
}

/* The session owns its server, not the other way round. */
static void session_tr_free(struct transport *t)
{
        (void)t;
}

static const struct transport_ops session_ops = {
    .send = session_send,
    .stop = session_tr_stop,
    .flush = session_tr_flush,
    .free = session_tr_free,
};

static void session_end(struct session *s, const char *why)
{
        if (s->ended)
                return;
        s->ended = true;
        log_info("MCP session %.8s... (client %s) ended: %s", s->id, s->owner, why);
        struct req *q, *n;
        list_for_each_safe(q, n, &s->streams, node)
        {
                q->sess = NULL;
                stream_end(q);
        }
        list_del(&s->node);
        s->h->n_sessions--;
        mcp_server_close(s->srv);
        json_decref(s->held);
        free(s);
}

static struct session *session_find(struct mcp_http *h, const char *id)
{
        struct session *s;
        if (!id || strlen(id) != SESSION_ID_LEN)
                return NULL;
        list_for_each(s, &h->sessions, node)
        {
                if (str_equal_ct(s->id, id, SESSION_ID_LEN))
                        return s;
        }
        return NULL;
}

int mcp_client_name_check(const char *name, struct err *e)
{
        size_t n = strlen(name);
        bool ok = n >= 1 && n <= CLIENT_NAME_MAX;
        for (const char *p = name; ok && *p; p++)
                ok = isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.';
        if (ok)
                return 0;
        char shown[80];
        str_printable(name, shown, sizeof(shown));
        return err_set(e, ERR_INVALID, -EINVAL,
                       "client name \"%s\" is not valid: use 1 to %d letters, digits, '_', '-' "
                       "or '.'",
                       shown, CLIENT_NAME_MAX);
}

/* `name`: the client's, or NULL for an MCP session that owns its sandbox
 * sessions alone. */
static int session_new(struct mcp_http *h, const char *name, struct session **ret)
{
        unsigned char raw[SESSION_ID_BYTES];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return -EIO;
        struct session *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->h = h;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(s->id + 2 * i, 3, "%02x", raw[i]);
        /* A named client's sessions belong to the name, shared by its MCP
         * sessions ("n:NAME"); else to this MCP session alone ("cN"). */
        ++h->seq;
        if (name)
                snprintf(s->owner, sizeof(s->owner), "n:%s", name);
        else
                snprintf(s->owner, sizeof(s->owner), "c%llu", h->seq);
        s->t.ops = &session_ops;
        s->last_ms = now_ms();
        list_init(&s->streams);
        s->held = json_array();
        int r = s->held ? h->server_new(h->userdata, s->owner, &s->srv) : -ENOMEM;
        if (r == 0)
                mcp_server_attach(s->srv, &s->t);
        if (r == 0 && name)
                mcp_server_keep_sessions(s->srv);
        if (r < 0) {
                mcp_server_free(s->srv);
                json_decref(s->held);
                free(s);
                return r;
        }
        list_push(&h->sessions, &s->node);
        h->n_sessions++;
        *ret = s;
        return 0;
}

/* Idle sessions end, with what they hold. */
static void on_tick(struct timer *t, void *userdata)
{
        struct mcp_http *h = userdata;
        timer_arm(t, TICK_MS);
        long long now = now_ms(), idle = (long long)(h->cfg->client_idle_s * 1000);
        struct session *s, *n;
        list_for_each_safe(s, n, &h->sessions, node)
        {
                if (list_empty(&s->streams) && now - s->last_ms > idle && !mcp_server_busy(s->srv))
                        session_end(s, "idle past client_idle_s");
        }
}

/* ---- answers */

static enum MHD_Result answer_text(struct MHD_Connection *c, unsigned code, const char *ctype,
                                   const char *text)
{
        struct MHD_Response *r =
            MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, "Content-Type", ctype);
        if (code == 401)
                MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"corral\"");
        if (code == 405)
                MHD_add_response_header(r, "Allow", "GET, POST, DELETE");
        enum MHD_Result ok = MHD_queue_response(c, code, r);
        MHD_destroy_response(r);
        return ok;
}

/* A transport-level refusal: the status, and a JSON-RPC error with no id
 * that says why. */
static enum MHD_Result answer_error(struct MHD_Connection *c, unsigned code, const char *why)
{
        json_auto_t *e = jrpc_error(NULL, code == 404 ? -32001 : JRPC_INVALID_REQUEST, why, NULL);
        _cleanup_free_ char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
        return answer_text(c, code, "application/json", text ? text : "{}");
}

/* ---- access: the checks every request passes first */

static const char *header(struct MHD_Connection *c, const char *name)
{
        return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

static bool listed(char **list, const char *s)
{
        for (char **p = list; p && *p; p++)
                if (strcasecmp(*p, s) == 0)
                        return true;
        return false;
}

/* An Origin a browser sends: allowed when it is a loopback page or one the
 * user named (http_origins). */
static bool origin_ok(const struct mcp_http *h, const char *origin)
{
        return listed(h->cfg->http_origins, origin) || http_origin_loopback(origin);
}

/* A loopback name or one in http_hosts; any name when serving other
 * machines without naming any (then the token alone guards). */
static bool host_ok(const struct mcp_http *h, const char *host)
{
        return http_host_allowed(host, strlen(host), h->cfg->http_hosts,
                                 h->cfg->http_public && !h->cfg->http_hosts);
}

/* How many of the headers that frame a request's body it has. */
struct framing {
        int content_length, transfer_encoding, host;
        bool not_chunked;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
        struct framing *f = cls;
        (void)kind;
        if (strcasecmp(key, "Content-Length") == 0) {
                f->content_length++;
        } else if (strcasecmp(key, "Transfer-Encoding") == 0) {
                f->transfer_encoding++;
                f->not_chunked |= !value || strcasecmp(value, "chunked") != 0;
        } else if (strcasecmp(key, "Host") == 0) {
                f->host++;
        }
        return MHD_YES;
}

/* NULL, or why the request is refused with 400 before its body is read.
 * libmicrohttpd reads a body by the first Content-Length, or by
 * Transfer-Encoding when both are there; a proxy in front may have read it
 * by another, and what it took for the body would be the next request
 * here (request smuggling). So a body that two headers frame two ways is
 * refused, and so is a second Host, which the checks below would not see. */
static const char *framing_refused(struct MHD_Connection *c)
{
        struct framing f = {0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
        if (f.content_length > 1)
                return "more than one Content-Length";
        if (f.transfer_encoding > 0 && f.content_length > 0)
                return "both Transfer-Encoding and Content-Length";
        if (f.transfer_encoding > 1 || f.not_chunked)
                return "a Transfer-Encoding other than chunked";
        if (f.host > 1)
                return "more than one Host";
        return NULL;
}

static bool via_unix(struct MHD_Connection *c)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        return ci && ci->client_addr && ci->client_addr->sa_family == AF_UNIX;
}

/* 0, or the status to refuse with and why. */
static unsigned access_check(struct mcp_http *h, struct MHD_Connection *c, char *why, size_t size)
{
        const char *origin = header(c, "Origin");
        if (origin && !origin_ok(h, origin)) {
                snprintf(why, size,
                         "Origin not allowed: corral takes requests from loopback pages and the "
                         "origins in http_origins");
                return 403;
        }
        if (via_unix(c))
                return 0; /* the peer's uid was checked at accept */
        const char *host = header(c, "Host");
        if (!host || !host_ok(h, host)) {
                snprintf(why, size,
                         "Host not allowed: corral answers localhost, 127.0.0.1, [::1] and the "
                         "names in http_hosts (this guards against DNS rebinding)");
                return 403;
        }
        if (!h->cfg->tcp_token)
                return 0; /* explicitly off: loopback listeners only (listen_tcp) */
        const char *auth = header(c, "Authorization");
        if (!auth || strncasecmp(auth, "Bearer ", 7) != 0) {
                snprintf(why, size, "this needs \"Authorization: Bearer TOKEN\" (%s)",
                         h->token_where);
                return 401;
        }
        const char *tok = auth + 7;
        size_t n = strlen(tok), want = strlen(h->token);
        /* Constant time over the token's length; the length itself is no
         * secret. */
        if (!(n == want && str_equal_ct(tok, h->token, want))) {
                snprintf(why, size, "wrong token");
                return 401;
        }
        return 0;
}

static bool accepts(struct MHD_Connection *c, const char *type)
{
        const char *a = header(c, "Accept");
        return a && (strstr(a, type) || strstr(a, "*/*"));
}

static bool version_ok(const char *v)
{
        for (size_t i = 0; i < ARRAY_SIZE(protocol_versions); i++)
                if (strcmp(v, protocol_versions[i]) == 0)
                        return true;
        return false;
}

/* ---- the MCP endpoint */

static enum MHD_Result queue_stream(struct req *q, unsigned code, const char *session_id)
{
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, q, NULL);
        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, "Content-Type",
                                q->sse ? "text/event-stream" : "application/json");
        if (q->sse)
                MHD_add_response_header(r, "Cache-Control", "no-cache");
        if (session_id)
                MHD_add_response_header(r, "Mcp-Session-Id", session_id);
        enum MHD_Result ok = MHD_queue_response(q->conn, code, r);
        MHD_destroy_response(r);
        return ok;
}

/* A JSON answer, whole: one write with its length. */
static enum MHD_Result queue_json(struct req *q)
{
        struct MHD_Response *r = MHD_create_response_from_buffer(
            q->out.len, q->out.data ? q->out.data : "", MHD_RESPMEM_MUST_COPY);
        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "application/json");
        if (q->new_session[0])
                MHD_add_response_header(r, "Mcp-Session-Id", q->new_session);
        enum MHD_Result ok = MHD_queue_response(q->conn, 200, r);
        MHD_destroy_response(r);
        buf_consume(&q->out, q->out.len);
        return ok;
}

static enum MHD_Result mcp_post(struct mcp_http *h, struct req *q)
{
        struct MHD_Connection *c = q->conn;
        if (!accepts(c, "application/json") || !accepts(c, "text/event-stream"))
                return answer_error(c, 406,
                                    "Accept must list both application/json and text/event-stream");
        const char *ctype = header(c, "Content-Type");
        if (!ctype || strncasecmp(ctype, "application/json", 16) != 0)
                return answer_error(c, 415, "Content-Type must be application/json");
        if (q->too_long) {
                char why[160];
                snprintf(why, sizeof(why), "message larger than the limit of %zu bytes",
                         q->body.max);
                return answer_error(c, 413, why);
        }
        json_error_t je;
        json_auto_t *msg = json_loadb(q->body.data ? q->body.data : "", q->body.len, 0, &je);
        if (!msg) {
                json_auto_t *e = jrpc_error(NULL, JRPC_PARSE_ERROR, "not JSON", NULL);
                _cleanup_free_ char *text = json_dumps(e, JSON_COMPACT);
                return answer_text(c, 400, "application/json", text ? text : "{}");
        }
        if (!json_is_object(msg))
                return answer_error(c, 400, "a POST carries one JSON-RPC message (an object)");
        const char *method = json_string_value(json_object_get(msg, "method"));
        json_t *id = json_object_get(msg, "id");
        bool request = method && id;
        const char *sid = header(c, "Mcp-Session-Id");
        struct session *s = NULL;
        bool fresh = false;
        if (request && strcmp(method, "initialize") == 0 && !sid) {
                if (h->draining)
                        return answer_error(c, 503,
                                            "this corral is draining (it is stopping): open the "
                                            "MCP session on another instance");
                if (h->n_sessions >= h->cfg->max_clients)
                        return answer_error(c, 503,
                                            "too many MCP sessions (max_clients): end one, or "
                                            "raise the setting");
                const char *name = header(c, "Corral-Client");
                struct err e = {0};
                if (name && mcp_client_name_check(name, &e) < 0)
                        return answer_error(c, 400, e.msg);
                int r = session_new(h, name, &s);
                if (r < 0)
                        return answer_error(c, 500, "cannot open an MCP session");
                fresh = true;
                log_info("MCP session %.8s... opened for client %s%s", s->id, s->owner,
                         via_unix(c) ? " (unix socket)" : "");
        } else {
                if (!sid)
                        return answer_error(c, 400, "Mcp-Session-Id missing: initialize first");
                s = session_find(h, sid);
                if (!s)
                        return answer_error(c, 404,
                                            "no such MCP session here (it ended, or the corral "
                                            "that held it stopped, with its sandboxes and "
                                            "running calls): initialize a new one");
                const char *v = header(c, "MCP-Protocol-Version");
                if (v && !version_ok(v))
                        return answer_error(c, 400, "unsupported MCP-Protocol-Version");
        }
        s->last_ms = now_ms();
        const char *text = q->body.data;
        size_t len = q->body.len;
        if (!request) {
                /* A notification or a response: taken, no body. */
                mcp_server_events.message(s->srv, text, len);
                return answer_text(c, 202, "application/json", "");
        }
        q->stream = true;
        q->sess = s;
        q->id = json_incref(id);
        q->ptoken = json_incref(json_object_get(
            json_object_get(json_object_get(msg, "params"), "_meta"), "progressToken"));
        q->sse = q->ptoken && strcmp(method, "tools/call") == 0;
        buf_init(&q->out, STREAM_OUT_MAX);
        if (fresh)
                snprintf(q->new_session, sizeof(q->new_session), "%s", s->id);
        list_push(&s->streams, &q->node);
        mcp_server_events.message(s->srv, text, len);
        if (q->sse)
                return queue_stream(q, 200, fresh ? s->id : NULL);
        if (q->done)
                return queue_json(q);
        /* Answered later: the connection waits, suspended, and is resumed
         * by the answer (stream_wake), which is then queued whole. */
        q->parked = q->suspended = true;
        MHD_suspend_connection(q->conn);
        return MHD_YES;
}

static enum MHD_Result mcp_get(struct mcp_http *h, struct req *q)
{
        struct MHD_Connection *c = q->conn;
        if (!accepts(c, "text/event-stream"))
                return answer_error(c, 406, "Accept must list text/event-stream");
        struct session *s = session_find(h, header(c, "Mcp-Session-Id"));
        if (!s)
                return answer_error(c, header(c, "Mcp-Session-Id") ? 404 : 400,
                                    "a GET stream needs the Mcp-Session-Id of a live session");
        s->last_ms = now_ms();
        q->stream = q->sse = q->get = true;
        q->sess = s;
        buf_init(&q->out, STREAM_OUT_MAX);
        list_push(&s->streams, &q->node);
        /* What waited for a stream. */
        size_t i;
        json_t *m;
        json_array_foreach(s->held, i, m) put_json(q, m);
        json_array_clear(s->held);
        return queue_stream(q, 200, NULL);
}

static enum MHD_Result mcp_delete(struct mcp_http *h, struct req *q)
{
        struct session *s = session_find(h, header(q->conn, "Mcp-Session-Id"));
        if (!s)
                return answer_error(q->conn, header(q->conn, "Mcp-Session-Id") ? 404 : 400,
                                    "DELETE needs the Mcp-Session-Id of a live session");
        session_end(s, "the client ended it");
        return answer_text(q->conn, 200, "application/json", "");
}

/* ---- /health and /metrics */

static json_t *status_now(struct mcp_http *h)
{
        json_t *st = h->status ? h->status(h->status_ud) : NULL;
        return st ? st : json_object();
}

/* Ready: the engine answered and has the image, the pool is not failing,
 * and corral takes new clients. */
static enum MHD_Result health_answer(struct mcp_http *h, struct req *q)
{
        json_auto_t *st = status_now(h);
        json_t *pool = json_object_get(st, "pool");
        json_t *eng = json_object_get(h->health, "engine");
        bool engine_ok = json_is_true(json_object_get(eng, "reachable"));
        bool image_ok =
            json_is_true(json_object_get(json_object_get(h->health, "image"), "present"));
        long failing = (long)json_integer_value(json_object_get(pool, "consecutive_failures"));
        bool draining = h->stopping || h->draining;
        bool ready = engine_ok && image_ok && failing == 0 && !draining;
        json_auto_t *body =
            json_pack("{s:s, s:b, s:b, s:O?, s:O?, s:{s:O?, s:O?, s:O?, s:O?, s:O?}, s:I, s:b, "
                      "s:O?}",
                      "status", ready ? "ok" : "unavailable", "live", 1, "ready", ready, "engine",
                      eng, "image", json_object_get(h->health, "image"), "pool", "ready",
                      json_object_get(pool, "ready"), "target", json_object_get(pool, "target"),
                      "starting", json_object_get(pool, "starting"), "consecutive_failures",
                      json_object_get(pool, "consecutive_failures"), "last_error",
                      json_object_get(pool, "last_error"), "clients", (json_int_t)h->n_sessions,
                      "draining", draining, "policy", json_object_get(st, "policy"));
        _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        return answer_text(q->conn, ready ? 200 : 503, "application/json", text ? text : "{}");
}

static void health_known(void *userdata, json_t *health)
{
        struct mcp_http *h = userdata;
        h->health_wait = NULL;
        json_decref(h->health);
        h->health = json_incref(health);
        struct req *q, *n;
        list_for_each_safe(q, n, &h->health_waits, node)
        {
                list_del(&q->node);
                list_init(&q->node);
                stream_wake(q);
        }
}

/* The engine's part comes from the sandbox manager (at most a second
 * old), from the loop: the request waits, suspended, until then. */
static enum MHD_Result health_get(struct mcp_http *h, struct req *q)
{
        if (!h->health_wait && sandbox_mgr_health(h->mgr, health_known, h, &h->health_wait) < 0) {
                h->health_wait = NULL;
                return answer_error(q->conn, 500, "cannot ask the engine");
        }
        q->health = q->parked = q->suspended = true;
        list_push(&h->health_waits, &q->node);
        MHD_suspend_connection(q->conn);
        return MHD_YES;
}

/* One family of one sample: its HELP and TYPE lines, and the value. */
static void single(struct buf *b, const char *type, const char *name, const char *help, json_t *v)
{
        char hd[300];
        snprintf(hd, sizeof(hd), "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
        buf_append(b, hd, strlen(hd));
        metrics_line(b, name, json_number_value(v), NULL);
}

static enum MHD_Result metrics_get(struct mcp_http *h, struct req *q)
{
        json_auto_t *st = status_now(h);
        json_t *pool = json_object_get(st, "pool");
        struct buf b;
        buf_init(&b, 4 << 20);
        metrics_render(&b);
        static const char *const states[] = {"ready", "starting", "busy"};
        const char *hd = "# HELP corral_pool_sandboxes sandboxes of the pool by state\n"
                         "# TYPE corral_pool_sandboxes gauge\n";
        buf_append(&b, hd, strlen(hd));
        for (size_t i = 0; i < ARRAY_SIZE(states); i++)
                metrics_line(&b, "corral_pool_sandboxes",
                             json_number_value(json_object_get(pool, states[i])), "state",
                             states[i], NULL);
        single(&b, "gauge", "corral_pool_target", "ready sandboxes the pool aims at",
               json_object_get(pool, "target"));
        single(&b, "gauge", "corral_queued_calls", "calls waiting for a sandbox slot",
               json_object_get(pool, "queued"));
        single(&b, "gauge", "corral_sandboxes", "containers corral holds (pool, calls, sessions)",
               json_object_get(pool, "containers"));
        single(&b, "counter", "corral_pool_hits_total", "calls answered by a ready sandbox",
               json_object_get(pool, "hits"));
        single(&b, "counter", "corral_pool_misses_total",
               "calls that waited for a sandbox to start", json_object_get(pool, "misses"));
        single(&b, "counter", "corral_pool_failures_total", "sandbox starts that failed",
               json_object_get(pool, "failures"));
        single(&b, "gauge", "corral_sessions", "sessions open", json_object_get(st, "sessions"));
        json_auto_t *clients = json_integer(h->n_sessions);
        single(&b, "gauge", "corral_clients", "MCP sessions of the service", clients);
        const struct door *du = &h->doors[DOOR_UNIX], *dt = &h->doors[DOOR_TCP];
        hd = "# HELP corral_http_connections connections held, by listener and whether they "
             "presented the token\n"
             "# TYPE corral_http_connections gauge\n";
        buf_append(&b, hd, strlen(hd));
        metrics_line(&b, "corral_http_connections", (double)du->held, "listener", "unix", "state",
                     "authenticated", NULL);
        metrics_line(&b, "corral_http_connections", (double)(dt->held - dt->n_pending), "listener",
                     "tcp", "state", "authenticated", NULL);
        metrics_line(&b, "corral_http_connections", (double)dt->n_pending, "listener", "tcp",
                     "state", "unauthenticated", NULL);
        hd = "# HELP corral_http_connections_closed_total TCP connections ended before they "
             "presented the token: past http_header_timeout_s, closed to make room, or refused "
             "with every slot authenticated\n"
             "# TYPE corral_http_connections_closed_total counter\n";
        buf_append(&b, hd, strlen(hd));
        metrics_line(&b, "corral_http_connections_closed_total", (double)h->closed_timeout,
                     "reason", "header_timeout", NULL);
        metrics_line(&b, "corral_http_connections_closed_total", (double)h->closed_room, "reason",
                     "make_room", NULL);
        metrics_line(&b, "corral_http_connections_closed_total", (double)h->refused_full, "reason",
                     "full", NULL);
        hd = "# HELP corral_upstream_up MCP servers for sandboxed code: 1 when running\n"
             "# TYPE corral_upstream_up gauge\n";
        buf_append(&b, hd, strlen(hd));
        size_t i;
        json_t *u;
        json_array_foreach(json_object_get(st, "upstreams"), i, u)
        {
                const char *state = json_string_value(json_object_get(u, "state"));
                metrics_line(&b, "corral_upstream_up", state && strcmp(state, "running") == 0,
                             "server", json_string_value(json_object_get(u, "name")), "state",
                             state ? state : "unknown", NULL);
        }
        long rss, hwm;
        long long cpu;
        proc_usage(&rss, &hwm, &cpu);
        json_auto_t *rss_b = json_integer((json_int_t)rss * 1024);
        single(&b, "gauge", "corral_resident_memory_bytes", "corral's resident memory", rss_b);
        struct MHD_Response *r =
            MHD_create_response_from_buffer(b.len, b.data ? b.data : "", MHD_RESPMEM_MUST_COPY);
        buf_free(&b);
        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
        enum MHD_Result ok = MHD_queue_response(q->conn, 200, r);
        MHD_destroy_response(r);
        return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
        struct mcp_http *h = cls;
        struct req *q = *con_cls;
        (void)version;
        if (!q) {
                /* Answered before the body is read, and then closed: no
                 * way to tell where the next request would start. */
                const char *framing = framing_refused(c);
                if (framing) {
                        char why[120];
                        snprintf(why, sizeof(why), "a request with %s", framing);
                        return answer_error(c, 400, why);
                }
                struct conn *cn = conn_of(c);
                if (!cn)
                        return MHD_NO;
                q = calloc(1, sizeof(*q));
                if (!q)
                        return MHD_NO;
                q->h = h;
                q->door = cn->d;
                q->conn = c;
                list_init(&q->node);
                buf_init(&q->body, tools_line_max(h->cfg));
                q->status = access_check(h, c, q->why, sizeof(q->why));
                /* It presented the token (or needs none): it keeps its
                 * slot until idle. */
                if (!q->status)
                        conn_unpend(cn);
                *con_cls = q;
                return MHD_YES;
        }
        if (*data_size > 0) {
                if (!q->status && !q->too_long && buf_append(&q->body, data, *data_size) < 0) {
                        q->too_long = true;
                        buf_free(&q->body);
                }
                *data_size = 0;
                return MHD_YES;
        }
        if (q->parked && q->health) {
                q->parked = false;
                return health_answer(h, q);
        }
        if (q->parked) {
                /* Resumed: the answer came, or the session ended. */
                q->parked = false;
                if (q->out.len > 0)
                        return queue_json(q);
                return answer_error(c, 503, "the MCP session ended before this was answered");
        }
        if (q->status)
                return answer_error(c, (unsigned)q->status, q->why);
        if (h->stopping)
                return answer_error(c, 503, "corral is stopping");
        if (strcmp(url, "/health") == 0 && strcmp(method, "GET") == 0)
                return health_get(h, q);
        if (strcmp(url, "/metrics") == 0 && strcmp(method, "GET") == 0)
                return metrics_get(h, q);
        if (strcmp(url, MCP_PATH) != 0)
                return answer_error(c, 404,
                                    "not found: MCP is at " MCP_PATH
                                    ", health at /health, metrics at /metrics");
        if (strcmp(method, "POST") == 0)
                return mcp_post(h, q);
        if (strcmp(method, "GET") == 0)
                return mcp_get(h, q);
        if (strcmp(method, "DELETE") == 0)
                return mcp_delete(h, q);
        return answer_error(c, 405, "MCP takes GET, POST and DELETE");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
        struct req *q = *con_cls;
        (void)cls;
        (void)c;
        (void)toe;
        if (!q)
                return;
        if (list_linked(&q->node))
                list_del(&q->node);
        if (q->sess)
                q->sess->last_ms = now_ms();
        json_decref(q->id);
        json_decref(q->ptoken);
        buf_free(&q->body);
        buf_free(&q->out);
        free(q);
        *con_cls = NULL;
}

/* ---- listeners */

static void on_accept_retry(struct timer *t, void *userdata)
{
        struct listener *l = userdata;
        (void)t;
        if (l->watch)
                watch_modify(l->watch, EPOLLIN);
}

static void on_accept(struct watch *w, uint32_t events, void *userdata)
{
        struct listener *l = userdata;
        struct door *d = &l->h->doors[l->unix_socket ? DOOR_UNIX : DOOR_TCP];
        (void)w;
        (void)events;
        for (int i = 0; i < 32; i++) {
                struct sockaddr_storage ss;
                socklen_t len = sizeof(ss);
                int fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0 &&
                    (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
                        /* The connection stays in the backlog and the
                         * socket readable: try again in a while rather
                         * than spin on it. */
                        if (now_ms() - l->h->fds_warned_ms > WARN_EVERY_MS) {
                                l->h->fds_warned_ms = now_ms();
                                log_warn("accept on %s: %s (RLIMIT_NOFILE)", l->display,
                                         strerror(errno));
                        }
                        watch_modify(l->watch, 0);
                        timer_set(l->h->loop, &l->retry, on_accept_retry, l, 100);
                        break;
                }
                if (fd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                log_warn("accept on %s: %s", l->display, strerror(errno));
                        break;
                }
                if (l->unix_socket) {
                        struct ucred cr;
                        socklen_t cl = sizeof(cr);
                        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
                            cr.uid != geteuid()) {
                                log_warn("%s: refused a peer of uid %ld (only uid %ld may connect)",
                                         l->display, cl ? (long)cr.uid : -1L, (long)geteuid());
                                close(fd);
                                continue;
                        }
                        memset(&ss, 0, sizeof(ss));
                        ss.ss_family = AF_UNIX;
                        len = sizeof(struct sockaddr_un);
                } else {
                        /* An answer is written in pieces (headers, chunks):
                         * Nagle would hold each behind the client's ACK. */
                        int one = 1;
                        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                }
                door_add(d, fd, (struct sockaddr *)&ss, len, l->display);
        }
        mhd_kick(d);
}

static int listener_add(struct mcp_http *h, int fd, bool unix_socket, const char *display,
                        const char *unlink_path, struct err *e)
{
        if (h->n_ls >= LISTENERS_MAX) {
                close(fd);
                return err_set(e, ERR_CONFIG, E2BIG, "at most %d listeners", LISTENERS_MAX);
        }
        struct listener *l = calloc(1, sizeof(*l));
        if (!l) {
                close(fd);
                return -ENOMEM;
        }
        *l = (struct listener){.h = h, .fd = fd, .unix_socket = unix_socket};
        snprintf(l->display, sizeof(l->display), "%s", display);
        if (unlink_path)
                snprintf(l->unlink_path, sizeof(l->unlink_path), "%s", unlink_path);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        /* Connections wait in the backlog until mcp_http_start. */
        h->ls[h->n_ls++] = l;
        return 0;
}

int mcp_http_start(struct mcp_http *h, struct err *e)
{
        if (h->accepting)
                return 0;
        for (size_t i = 0; i < h->n_ls; i++) {
                struct listener *l = h->ls[i];
                int r = watch_add(h->loop, l->fd, EPOLLIN, on_accept, l, &l->watch);
                if (r < 0)
                        return err_set(e, ERR_INTERNAL, -r, "cannot watch %s", l->display);
                log_info("listening on %s", l->display);
        }
        h->accepting = true;
        return 0;
}

static int listen_unix(struct mcp_http *h, const char *path, struct err *e)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (!*path || strlen(path) >= sizeof(sa.sun_path))
                return err_set(e, ERR_CONFIG, EINVAL,
                               "listen: unix socket path empty or too long "
                               "(at most %zu bytes)",
                               sizeof(sa.sun_path) - 1);
        memcpy(sa.sun_path, path, strlen(path));
        int r = mkdir_parents(path);
        if (r < 0)
                return err_set(e, ERR_CONFIG, -r, "listen: cannot make the directory of %s: %s",
                               path, strerror(-r));
        if (unix_socket_answers(path))
                return err_set(e, ERR_CONFIG, EADDRINUSE,
                               "listen: %s: another corral already serves there", path);
        /* A socket file left by a corral that died: nobody answers on it. */
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                unlink(path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return err_set(e, ERR_INTERNAL, errno, "socket: %s", strerror(errno));
        mode_t old = umask(0077);
        r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        int saved = errno;
        umask(old);
        if (r < 0 || chmod(path, 0600) < 0 || listen(fd, 128) < 0) {
                if (r == 0)
                        saved = errno;
                close(fd);
                return err_set(e, ERR_CONFIG, saved, "listen: %s: %s", path, strerror(saved));
        }
        char display[300];
        snprintf(display, sizeof(display), "unix:%s", path);
        return listener_add(h, fd, true, display, path, e);
}

static bool addr_loopback(const struct sockaddr *sa)
{
        if (sa->sa_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
        if (sa->sa_family == AF_INET6)
                return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
        return false;
}

static int listen_tcp(struct mcp_http *h, const char *spec, struct err *e)
{
        char host[256], port[16];
        const char *colon = strrchr(spec, ':');
        if (!colon || colon == spec || strlen(colon + 1) == 0 ||
            strlen(colon + 1) >= sizeof(port) || (size_t)(colon - spec) >= sizeof(host))
                return err_set(e, ERR_CONFIG, EINVAL, "listen: tcp:HOST:PORT, not \"tcp:%.100s\"",
                               spec);
        memcpy(host, spec, (size_t)(colon - spec));
        host[colon - spec] = '\0';
        snprintf(port, sizeof(port), "%s", colon + 1);
        if (host[0] == '[' && host[strlen(host) - 1] == ']') {
                memmove(host, host + 1, strlen(host));
                host[strlen(host) - 1] = '\0';
        }
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
        int g = getaddrinfo(strcmp(host, "localhost") == 0 ? "127.0.0.1" : host, port, &hints, &ai);
        if (g != 0)
                return err_set(e, ERR_CONFIG, EINVAL, "listen: tcp:%.200s: %s", spec,
                               gai_strerror(g));
        if (!addr_loopback(ai->ai_addr) && !h->cfg->tcp_token) {
                freeaddrinfo(ai);
                return err_set(e, ERR_CONFIG, EPERM,
                               "listen: tcp:%.200s is not a loopback address, and tcp_token is "
                               "off: a listener without the token serves this machine only",
                               spec);
        }
        if (!addr_loopback(ai->ai_addr) && !h->cfg->http_public) {
                freeaddrinfo(ai);
                return err_set(e, ERR_CONFIG, EPERM,
                               "listen: tcp:%.200s is not a loopback address: set http_public to "
                               "serve other machines (and put TLS in front: README, Service)",
                               spec);
        }
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
                int saved = errno;
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(ai);
                return err_set(e, ERR_CONFIG, saved, "listen: tcp:%.200s: %s", spec,
                               strerror(saved));
        }
        freeaddrinfo(ai);
        char display[300];
        snprintf(display, sizeof(display), "tcp:%s", spec);
        return listener_add(h, fd, false, display, NULL, e);
}

/* The token TCP clients must present: CORRAL_TOKEN (the setting), else
 * the file, made on first start. */
static int token_load(struct mcp_http *h, struct err *e)
{
        if (h->token[0])
                return 0;
        if (h->cfg->token) {
                if (strlen(h->cfg->token) < 16 || strlen(h->cfg->token) >= sizeof(h->token))
                        return err_set(e, ERR_CONFIG, EINVAL, "token: 16 to %zu characters",
                                       sizeof(h->token) - 1);
                snprintf(h->token, sizeof(h->token), "%s", h->cfg->token);
                const char *from = config_source(h->cfg, "token");
                snprintf(h->token_where, sizeof(h->token_where), "the token is the one set by %s",
                         from ? from : "the setting token");
                return 0;
        }
        _cleanup_free_ char *path = xdg_path("XDG_CONFIG_HOME", ".config", "corral/token");
        if (!path)
                return -ENOMEM;
        snprintf(h->token_where, sizeof(h->token_where),
                 "the token is in %s, or set one with CORRAL_TOKEN", path);
        struct buf b;
        int r = buf_read_file(path, sizeof(h->token) + 16, &b);
        if (r == 0) {
                size_t n = b.len;
                while (n && isspace((unsigned char)b.data[n - 1]))
                        n--;
                if (n < 16 || n >= sizeof(h->token)) {
                        buf_free(&b);
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "%s: the token must be 16 to %zu "
                                       "characters",
                                       path, sizeof(h->token) - 1);
                }
                memcpy(h->token, b.data, n);
                h->token[n] = '\0';
                buf_free(&b);
                return 0;
        }
        if (r != -ENOENT)
                return err_set(e, ERR_CONFIG, -r, "%s: %s", path, strerror(-r));
        unsigned char raw[TOKEN_BYTES];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return err_set(e, ERR_INTERNAL, EIO, "getrandom failed");
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(h->token + 2 * i, 3, "%02x", raw[i]);
        mkdir_parents(path);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, h->token, strlen(h->token)) != (ssize_t)strlen(h->token) ||
            write(fd, "\n", 1) != 1) {
                int saved = errno;
                if (fd >= 0)
                        close(fd);
                return err_set(e, ERR_CONFIG, saved, "%s: cannot write the token: %s", path,
                               strerror(saved));
        }
        close(fd);
        log_info("made a token for TCP clients in %s", path);
        return 0;
}

int mcp_http_listen(struct mcp_http *h, const char *addr, struct err *e)
{
        if (strncmp(addr, "unix:", 5) == 0)
                return listen_unix(h, addr + 5, e);
        if (strncmp(addr, "tcp:", 4) == 0) {
                int r = h->cfg->tcp_token ? token_load(h, e) : 0;
                if (!h->cfg->tcp_token)
                        log_warn("listen: tcp:%s takes requests without a token (tcp_token "
                                 "off): any local user can use it",
                                 addr + 4);
                return r < 0 ? r : listen_tcp(h, addr + 4, e);
        }
        return err_set(e, ERR_CONFIG, EINVAL,
                       "listen: \"%.100s\" is neither unix:PATH nor tcp:HOST:PORT", addr);
}

int mcp_http_adopt(struct mcp_http *h, int fd, struct err *e)
{
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int type = 0;
        socklen_t tl = sizeof(type);
        if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM)
                return err_set(e, ERR_CONFIG, EINVAL, "fd %d from systemd is not a stream socket",
                               fd);
        char display[300];
        if (ss.ss_family == AF_UNIX) {
                snprintf(display, sizeof(display), "unix:%s (from systemd)",
                         ((struct sockaddr_un *)&ss)->sun_path);
                return listener_add(h, fd, true, display, NULL, e);
        }
        if (!addr_loopback((struct sockaddr *)&ss) && !h->cfg->http_public)
                return err_set(e, ERR_CONFIG, EPERM,
                               "the TCP socket from systemd is not loopback: "
                               "set http_public to serve other machines");
        int r = token_load(h, e);
        if (r < 0)
                return r;
        snprintf(display, sizeof(display), "tcp fd %d (from systemd)", fd);
        return listener_add(h, fd, false, display, NULL, e);
}

void mcp_http_set_status(struct mcp_http *h, json_t *(*status)(void *userdata), void *userdata,
                         struct sandbox_mgr *mgr)
{
        h->status = status;
        h->status_ud = userdata;
        h->mgr = mgr;
}

const char *mcp_http_token(const struct mcp_http *h)
{
        return h->token;
}

/* Connections each door holds at once: four per MCP session (its GET
 * stream, calls in flight), within the descriptors the process may open.
 * Past those, accept fails on the unix socket too, the owner's way in: so
 * the soft limit is raised as far as both doors need (the hard one allows),
 * FD_RESERVE stay for the engine, the sandboxes' streams and the upstream
 * servers, and the doors share the rest. */
static long door_max(const struct config *cfg)
{
        /* Each door may also hold MHD_SLACK connections corral closed that
         * MHD has yet to end: budgeted, so that they never eat the
         * reserve. */
        long want = 4 * cfg->max_clients + 16, need = 2 * (want + MHD_SLACK) + FD_RESERVE;
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
                return want;
        if (rl.rlim_cur < (rlim_t)need) {
                struct rlimit up = rl;
                up.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need
                                  ? rl.rlim_max
                                  : (rlim_t)need;
                if (up.rlim_cur > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &up) == 0)
                        rl = up;
        }
        long fds = rl.rlim_cur > (rlim_t)need ? need : (long)rl.rlim_cur;
        long each = (fds - FD_RESERVE) / 2 - MHD_SLACK;
        if (each < 16)
                each = 16;
        if (each < want)
                log_warn("HTTP: at most %ld connections over TCP and %ld on unix sockets "
                         "(RLIMIT_NOFILE %ld; max_clients %ld asks for %ld each)",
                         each, each, fds, cfg->max_clients, want);
        return each < want ? each : want;
}

static int door_open(struct mcp_http *h, struct door *d, bool tcp, long max)
{
        *d = (struct door){.h = h, .tcp = tcp, .max = max};
        list_init(&d->pending);
        d->mhd = MHD_start_daemon(
            MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL,
            on_request, h, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
            MHD_OPTION_NOTIFY_CONNECTION, on_connection, d, MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned)120, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(max + MHD_SLACK),
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_END);
        if (!d->mhd)
                return -EIO;
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_EPOLL_FD);
        int r = di ? watch_add(h->loop, di->epoll_fd, EPOLLIN, on_mhd_fd, d, &d->watch) : -EIO;
        if (r == 0)
                r = timer_add(h->loop, on_mhd_timer, d, &d->timer);
        if (r == 0 && tcp)
                r = timer_add(h->loop, on_deadline, d, &d->deadline);
        return r;
}

static void door_close(struct door *d)
{
        defer_cancel(&d->run_d);
        if (d->mhd) {
                /* Every suspended connection must be resumed before the
                 * daemon stops: their streams ended (mcp_http_stop). */
                MHD_run(d->mhd);
                MHD_stop_daemon(d->mhd);
                d->mhd = NULL;
        }
        watch_remove(d->watch);
        timer_remove(d->timer);
        timer_remove(d->deadline);
        d->watch = NULL;
        d->timer = d->deadline = NULL;
}

int mcp_http_new(struct loop *l, const struct config *cfg, mcp_http_server_new server_new,
                 void *userdata, struct mcp_http **ret, struct err *e)
{
        struct mcp_http *h = calloc(1, sizeof(*h));
        if (!h)
                return -ENOMEM;
        *h = (struct mcp_http){
            .loop = l, .cfg = cfg, .server_new = server_new, .userdata = userdata};
        list_init(&h->sessions);
        list_init(&h->health_waits);
        long max = door_max(cfg);
        h->peer_max = max / 4 > 8 ? max / 4 : 8;
        int r = door_open(h, &h->doors[DOOR_UNIX], false, max);
        if (r == 0)
                r = door_open(h, &h->doors[DOOR_TCP], true, max);
        if (r == 0)
                r = timer_add(l, on_tick, h, &h->tick);
        if (r < 0) {
                mcp_http_free(h);
                return err_set(e, ERR_INTERNAL, -r, "cannot start the HTTP server");
        }
        timer_arm(h->tick, TICK_MS);
        *ret = h;
        return 0;
}

void mcp_http_notify_log(struct mcp_http *h, enum log_level level, const char *logger,
                         const char *text)
{
        struct session *s;
        list_for_each(s, &h->sessions, node) mcp_server_notify_log(s->srv, level, logger, text);
}

/* MCP sessions with a call running. */
static long sessions_busy(const struct mcp_http *h)
{
        long n = 0;
        struct session *s;
        list_for_each(s, &h->sessions, node) n += mcp_server_busy(s->srv);
        return n;
}

static void on_drain_tick(struct timer *t, void *userdata)
{
        struct mcp_http *h = userdata;
        long busy = sessions_busy(h);
        if (busy > 0 && now_ms() < h->drain_end_ms) {
                timer_arm(t, 100);
                return;
        }
        h->drain_done(h->drain_ud, busy);
}

int mcp_http_drain(struct mcp_http *h, double bound_s, void (*done)(void *userdata, long busy),
                   void *userdata)
{
        if (h->draining || h->stopping)
                return -EALREADY;
        int r = timer_add(h->loop, on_drain_tick, h, &h->drain_timer);
        if (r < 0)
                return r;
        h->draining = true;
        h->drain_end_ms = now_ms() + (long long)(bound_s * 1000);
        h->drain_done = done;
        h->drain_ud = userdata;
        log_info("draining: no new MCP sessions, /health not ready; %ld session(s) with calls "
                 "running get up to %gs",
                 sessions_busy(h), bound_s);
        timer_arm(h->drain_timer, -1);
        return 0;
}

void mcp_http_stop(struct mcp_http *h)
{
        if (!h || h->stopping)
                return;
        h->stopping = true;
        timer_remove(h->drain_timer);
        h->drain_timer = NULL;
        sandbox_health_cancel(h->health_wait);
        h->health_wait = NULL;
        struct req *q, *qn;
        list_for_each_safe(q, qn, &h->health_waits, node)
        {
                list_del(&q->node);
                list_init(&q->node);
                stream_wake(q);
        }
        for (size_t i = 0; i < h->n_ls; i++) {
                watch_remove(h->ls[i]->watch);
                timer_remove(h->ls[i]->retry);
                h->ls[i]->watch = NULL;
                h->ls[i]->retry = NULL;
        }
        struct session *s, *n;
        list_for_each_safe(s, n, &h->sessions, node) session_end(s, "corral is stopping");
        for (int i = 0; i < DOORS; i++)
                if (h->doors[i].mhd)
                        mhd_run(&h->doors[i]);
}

void mcp_http_free(struct mcp_http *h)
{
        if (!h)
                return;
        mcp_http_stop(h);
        for (int i = 0; i < DOORS; i++)
                door_close(&h->doors[i]);
        timer_remove(h->tick);
        json_decref(h->health);
        for (size_t i = 0; i < h->n_ls; i++) {
                struct listener *l = h->ls[i];
                watch_remove(l->watch);
                timer_remove(l->retry);
                close(l->fd);
                if (l->unlink_path[0])
                        unlink(l->unlink_path);
                free(l);
        }
        free(h);
}

json_t *mcp_http_status(const struct mcp_http *h)
{
        json_t *ls = json_array();
        for (size_t i = 0; i < h->n_ls; i++)
                json_array_append_new(ls, json_string(h->ls[i]->display));
        return json_pack("{s:I, s:I, s:o}", "clients", (json_int_t)h->n_sessions, "max_clients",
                         (json_int_t)h->cfg->max_clients, "listeners", ls);
}

/* ---- systemd, without libsystemd: the two protocols are small */

int systemd_listen_fds(void)
{
        const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
        if (!pid || !fds || strtol(pid, NULL, 10) != (long)getpid())
                return 0;
        long n = strtol(fds, NULL, 10);
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
        if (n <= 0 || n > LISTENERS_MAX)
                return 0;
        for (int fd = 3; fd < 3 + n; fd++)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
        return (int)n;
}

void systemd_notify(const char *state)
{
        const char *path = getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (!path || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(sa.sun_path))
                return;
        memcpy(sa.sun_path, path, strlen(path));
        if (sa.sun_path[0] == '@')
                sa.sun_path[0] = '\0';
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return;
        socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
        if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
                log_warn("sd_notify: %s", strerror(errno));
        close(fd);
}
