#include "bridge/egress.h"

#include "bridge/audit.h"
#include "bridge/bridge.h"
#include "bridge/netrules.h"
#include "bridge/policy.h"
#include "bridge/proxy_head.h"
#include "core/buf.h"
#include "core/curl_loop.h"
#include "core/list.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/metrics.h"
#include "upstream/registry.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define ROUTE_HEADERS_MAX 16
#define HEADER_VALUE_MAX  8192
#define ASKED_MAX         64 /* hosts a run remembers the person's answer for */
#define TO_REMOTE_MAX     (EGRESS_WINDOW + EGRESS_CHUNK)
#define LOOKUPS_MAX       64          /* names being resolved at once, all runs together */
#define LOOKUP_SWEEP_MS   1000        /* the backstop sweep of lookups under way */
#define FLUSH_MAX         (128 << 10) /* frames to the runtime per write, about */
#define ADDRESSES_MAX     8           /* of a name, handed to libcurl */
#define DENIALS_AUDITED   100         /* per run; code in a loop must not fill the disk */

static const int default_ports[] = {80, 443};

struct route {
        char *origin; /* "https://host:port", as configured */
        bool tls;
        char host[NET_HOST_MAX + 4];
        int port;
        char *ca_file;
        char *names[ROUTE_HEADERS_MAX + 3], *values[ROUTE_HEADERS_MAX + 3];
        size_t n_headers; /* the configured ones, then Accept-Encoding */
        char **secrets;   /* what the answer must never show (NULL-terminated) */
        size_t longest;
};

struct egress {
        struct loop *loop;
        const struct config *cfg;
        const struct policy *pol;
        struct audit *audit;
        struct curl_loop *cl;
        struct route *routes;
        size_t n_routes;
        /* Names resolved by glibc's own bounded pool of threads
         * (getaddrinfo_a); each finished one says so on lookup_fd (an
         * eventfd the loop watches), and the loop then takes every
         * finished one. One given up on stays here until its thread is
         * done with it. */
        struct list lookups;
        size_t n_lookups;
        int lookup_fd;
        struct watch *lookup_w;
        /* Notifications still to come (a cancelled lookup sends none):
         * lookup_fd is closed only when none is, so that no late write
         * lands in another file that took its number. */
        size_t owed;
        /* A sweep every LOOKUP_SWEEP_MS while lookups are under way, for
         * a notification glibc could not send (no thread for it). */
        struct timer *sweep_t;
};

struct lookup {
        struct egress *g;
        struct conn *c; /* NULL: given up on */
        struct gaicb cb;
        struct addrinfo hints;
        char name[NET_HOST_MAX + 4];
        struct list node;
};

struct asked {
        char host[NET_HOST_MAX + 4];
        int port;
        int answer; /* -1: the question is out; else 0 no, 1 yes */
        void *handle;
        struct egress_run *run;
        struct list node;
};

enum conn_state { C_ASKING, C_RESOLVING, C_CONNECTING, C_OPEN };

struct conn {
        struct egress_run *run;
        struct list node;
        long long id;
        enum conn_state state;
        struct proxy_head head;
        const struct route *route;
        const char *decision; /* "allowed", "accepted" */
        CURL *easy;
        int fd; /* a duplicate of curl's socket, for the loop to watch */
        struct watch *w;
        uint32_t events;
        char errbuf[CURL_ERROR_SIZE];
        char address[64];
        char refused[400];    /* why an address was not connected to */
        struct buf head_out;  /* the head for the origin, sent first */
        struct buf to_remote; /* from the sandbox, not yet sent on */
        struct buf held;      /* a route's answer held back while a secret may straddle */
        long long to_ack;     /* bytes of the sandbox's sent on and not yet acked */
        long long in_flight;  /* bytes sent to the sandbox and not yet acked */
        bool sandbox_eof, remote_eof, shut;
        unsigned long long bytes_out, bytes_in;
        long long t0, last;
        struct timer *idle;
        struct defer read_d;
        struct curl_slist *resolve; /* the addresses libcurl may use, as its --resolve */
        struct lookup *lookup;      /* while C_RESOLVING */
        long long t_resolve;
};

struct egress_run {
        struct egress *g;
        char **grant; /* NULL-terminated */
        char sandbox[64], client[64];
        egress_lines_fn send;
        void *userdata;
        const struct bridge_asker *asker;
        struct list conns, asked;
        size_t n_asked;
        unsigned long long bytes_out, bytes_in;
        long denials;      /* refused connections: only the first DENIALS_AUDITED are written */
        struct buf outbox; /* frames written by hand, sent from the loop in order */
        struct defer flush_d;
        struct timer *retry; /* the sandbox's input queue was full: try again */
};

/* ---- configuration */

static void route_free(struct route *rt)
{
        free(rt->origin);
        free(rt->ca_file);
        for (size_t i = 0; i < rt->n_headers; i++) {
                free(rt->names[i]);
                free(rt->values[i]);
        }
        strv_free(rt->secrets);
}

/* Headers that frame the request or speak to a proxy: corral writes them
 * (Host, Connection: close) or passes the code's own on, never a route. */
static bool framing_header(const char *name)
{
        static const char *const own[] = {
            "Host",       "Connection", "Content-Length", "Transfer-Encoding",
            "Keep-Alive", "TE",         "Trailer",        "Upgrade"};
        if (strncasecmp(name, "Proxy-", 6) == 0)
                return true;
        for (size_t i = 0; i < ARRAY_SIZE(own); i++)
                if (strcasecmp(name, own[i]) == 0)
                        return true;
        return false;
}

static int route_parse(const char *origin, json_t *v, struct route *rt, struct err *e)
{
        *rt = (struct route){0};
        const char *rest;
        if (strncmp(origin, "https://", 8) == 0) {
                rt->tls = true;
                rest = origin + 8;
        } else if (strncmp(origin, "http://", 7) == 0) {
                rest = origin + 7;
        } else {
                return err_set(e, ERR_CONFIG, EINVAL,
                               "network_routes: \"%.100s\": an origin is https://host[:port] or "
                               "http://host[:port]",
                               origin);
        }
        const char *why;
        char authority[NET_PATTERN_MAX + 2];
        snprintf(authority, sizeof(authority), "%s", rest);
        size_t n = strlen(authority);
        if (n && authority[n - 1] == '/')
                authority[n - 1] = '\0';
        if (net_pattern_parse(authority, false, rt->host, sizeof(rt->host), &rt->port, &why) < 0)
                return err_set(e, ERR_CONFIG, EINVAL, "network_routes: \"%.100s\": %s", origin,
                               why);
        if (!rt->port)
                rt->port = rt->tls ? 443 : 80;
        if (!json_is_object(v))
                return err_set(e, ERR_CONFIG, EINVAL,
                               "network_routes: \"%.100s\": must be an object {headers, ca_file}",
                               origin);
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x)
        {
                if (strcmp(key, "ca_file") == 0) {
                        if (!json_is_string(x) || json_string_value(x)[0] != '/')
                                return err_set(e, ERR_CONFIG, EINVAL,
                                               "network_routes: \"%.100s\": ca_file must be an "
                                               "absolute path",
                                               origin);
                        free(rt->ca_file);
                        rt->ca_file = strdup(json_string_value(x));
                } else if (strcmp(key, "headers") != 0) {
                        char shown[80];
                        str_printable(key, shown, sizeof(shown));
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "network_routes: \"%.100s\": %s: unknown key (headers, "
                                       "ca_file)",
                                       origin, shown);
                }
        }
        json_t *headers = json_object_get(v, "headers");
        if (headers && (!json_is_object(headers) || json_object_size(headers) > ROUTE_HEADERS_MAX))
                return err_set(e, ERR_CONFIG, EINVAL,
                               "network_routes: \"%.100s\": headers must be an object of at most "
                               "%d strings",
                               origin, ROUTE_HEADERS_MAX);
        json_object_foreach(headers, key, x)
        {
                char *value = NULL;
                if (strlen(key) > 100 || !proxy_token(key) || !json_is_string(x))
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "network_routes: \"%.100s\": headers: \"%.60s\" must be a "
                                       "header name with a string value",
                                       origin, key);
                if (framing_header(key))
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "network_routes: \"%.100s\": headers.%s: corral writes "
                                       "this header itself (Host, Connection, Content-Length, "
                                       "Transfer-Encoding, hop-by-hop and Proxy-* headers)",
                                       origin, key);
                struct err bad = {0};
                if (registry_expand(json_string_value(x), &rt->secrets, &value, &bad) < 0)
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "network_routes: \"%.100s\": headers.%s: %s", origin, key,
                                       bad.msg);
                for (const char *p = value; *p; p++)
                        if ((unsigned char)*p < 0x20 && *p != '\t') {
                                free(value);
                                return err_set(e, ERR_CONFIG, EINVAL,
                                               "network_routes: \"%.100s\": headers.%s: a control "
                                               "character in the value",
                                               origin, key);
                        }
                if (strlen(value) > HEADER_VALUE_MAX) {
                        free(value);
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "network_routes: \"%.100s\": headers.%s: over %d bytes",
                                       origin, key, HEADER_VALUE_MAX);
                }
                rt->names[rt->n_headers] = strdup(key);
                rt->values[rt->n_headers++] = value;
                /* The whole value is a secret too, a literal one included. */
                if (strlen(value) >= 4 && strv_push(&rt->secrets, strdup(value)) < 0)
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        /* The answer is masked as it comes: it must come as sent, not
         * compressed nor (below, HTTP/1.0) cut in chunks, where a secret
         * could straddle what the masking sees. */
        rt->names[rt->n_headers] = strdup("Accept-Encoding");
        rt->values[rt->n_headers++] = strdup("identity");
        /* Nor in pieces the code chooses: a range of a reflected secret is
         * not the secret, and slices would spell it out. */
        rt->names[rt->n_headers] = strdup("Range");
        rt->values[rt->n_headers++] = NULL;
        rt->names[rt->n_headers] = strdup("If-Range");
        rt->values[rt->n_headers++] = NULL;
        for (char **s = rt->secrets; s && *s; s++)
                if (strlen(*s) > rt->longest)
                        rt->longest = strlen(*s);
        rt->origin = strdup(origin);
        return 0;
}

int egress_check_config(const struct config *cfg, struct err *e)
{
        const char *key;
        json_t *v;
        json_object_foreach(cfg->network_routes, key, v)
        {
                struct route rt;
                int r = route_parse(key, v, &rt, e);
                route_free(&rt);
                if (r < 0)
                        return r;
        }
        json_object_foreach(cfg->network_resolve, key, v)
        {
                char host[NET_HOST_MAX + 4];
                int port;
                const char *why;
                struct net_range a;
                if (net_pattern_parse(key, false, host, sizeof(host), &port, &why) < 0 || port)
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "network_resolve: \"%.100s\": not a host name", key);
                if (!json_is_string(v) || net_range_parse(json_string_value(v), &a) < 0 ||
                    strchr(json_string_value(v), '/'))
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "network_resolve: \"%.100s\": must be an IP address", key);
        }
        return 0;
}

static void lookups_done(struct watch *w, uint32_t events, void *userdata);

int egress_new(struct loop *l, const struct config *cfg, const struct policy *pol,
               struct audit *audit, struct egress **ret, struct err *e)
{
        int r = egress_check_config(cfg, e);
        if (r < 0)
                return r;
        struct egress *g = calloc(1, sizeof(*g));
        if (!g)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        *g = (struct egress){.loop = l, .cfg = cfg, .pol = pol, .audit = audit, .lookup_fd = -1};
        list_init(&g->lookups);
        size_t n = json_object_size(cfg->network_routes);
        g->routes = calloc(n + 1, sizeof(*g->routes));
        r = g->routes ? curl_loop_new(l, &g->cl) : -ENOMEM;
        g->lookup_fd = r == 0 ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1;
        if (r == 0 && g->lookup_fd < 0)
                r = -errno;
        if (r == 0)
                r = watch_add(l, g->lookup_fd, EPOLLIN, lookups_done, g, &g->lookup_w);
        const char *key;
        json_t *v;
        json_object_foreach(cfg->network_routes, key, v)
        {
                if (r == 0)
                        r = route_parse(key, v, &g->routes[g->n_routes++], e);
        }
        if (r < 0) {
                if (!e->msg[0])
                        err_set(e, ERR_INTERNAL, -r, "cannot set up the network proxy: %s",
                                strerror(-r));
                egress_free(g);
                return r;
        }
        *ret = g;
        return 0;
}

void egress_free(struct egress *g)
{
        if (!g)
                return;
        for (size_t i = 0; i < g->n_routes; i++)
                route_free(&g->routes[i]);
        free(g->routes);
        struct lookup *l, *next;
        list_for_each_safe(l, next, &g->lookups, node)
        {
                /* One whose thread still runs is left to it (corral exits). */
                int cancel = gai_cancel(&l->cb);
                if (cancel == EAI_CANCELED && g->owed)
                        g->owed--;
                if (cancel == EAI_CANCELED || gai_error(&l->cb) != EAI_INPROGRESS) {
                        if (l->cb.ar_result)
                                freeaddrinfo(l->cb.ar_result);
                        list_del(&l->node);
                        free(l);
                }
        }
        watch_remove(g->lookup_w);
        timer_remove(g->sweep_t);
        /* A notification still to come writes to it: the number must not
         * be another file's by then (corral is exiting: it stays open). */
        if (!g->owed && g->lookup_fd >= 0)
                close(g->lookup_fd);
        curl_loop_free(g->cl);
        free(g);
}

int egress_check_grant(json_t *network, struct err *e)
{
        if (!json_is_array(network) || json_array_size(network) > EGRESS_GRANT_MAX)
                return err_set(e, ERR_INVALID, -EINVAL,
                               "argument \"network\" must be an array of at most %d host "
                               "patterns (\"pypi.org\", \"*.pythonhosted.org\", "
                               "\"api.example.com:8443\")",
                               EGRESS_GRANT_MAX);
        size_t i;
        json_t *v;
        json_array_foreach(network, i, v)
        {
                char host[NET_HOST_MAX + 4], shown[80];
                int port;
                const char *s = json_string_value(v);
                /* A JSON string may hold NUL (\u0000): the item is all of
                 * its bytes, not the text before the first. */
                const char *why = !s                                   ? "must be a string"
                                  : strlen(s) != json_string_length(v) ? "holds a NUL byte"
                                                                       : NULL;
                if (why || net_pattern_parse(s, true, host, sizeof(host), &port, &why) < 0) {
                        str_printable(s ? s : "", shown, sizeof(shown));
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "argument \"network\": item %zu (\"%s\") %s", i + 1, shown,
                                       why);
                }
        }
        return 0;
}

/* ---- a run */

/* Frames go out from the loop, in order, as one write a round. They are
 * written by hand: encoding through jansson cost more than the relay. */
static void flush(void *userdata);

static void retry_flush(struct timer *t, void *userdata)
{
        (void)t;
        flush(userdata);
}

/* The length of the frame at p (of those this file writes: a line, or a
 * data frame "#CONN SIZE" and SIZE bytes), at most n. */
static size_t frame_len(const char *p, size_t n)
{
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) + 1 : n;
        const char *sp = p[0] == '#' ? memchr(p, ' ', k) : NULL;
        if (sp)
                k += strtoull(sp + 1, NULL, 10);
        return k < n ? k : n;
}

static void flush(void *userdata)
{
        struct egress_run *r = userdata;
        size_t sent = 0;
        /* In pieces of whole frames, at most FLUSH_MAX each (one always
         * fits the attach stream's queue, even at the smallest max_frame),
         * as far as the runtime's input queue takes them. */
        while (sent < r->outbox.len) {
                size_t piece = 0;
                do
                        piece +=
                            frame_len(r->outbox.data + sent + piece, r->outbox.len - sent - piece);
                while (sent + piece < r->outbox.len && piece < FLUSH_MAX);
                int rc = r->send(r->userdata, r->outbox.data + sent, piece);
                if (rc == -ENOBUFS) {
                        /* The runtime is behind on its input: the rest waits
                         * here (the windows bound it) and goes a moment later. */
                        buf_consume(&r->outbox, sent);
                        timer_set(r->g->loop, &r->retry, retry_flush, r, 5);
                        return;
                }
                if (rc < 0)
                        log_warn("network: sandbox %s: %zu bytes of frames not sent (%s)",
                                 r->sandbox, piece, strerror(-rc));
                sent += piece;
        }
        r->outbox.len = 0;
}

static void queued(struct egress_run *r)
{
        loop_defer(r->g->loop, &r->flush_d, flush, r);
}

static void send_note(struct conn *c, const char *method)
{
        if (buf_printf(&c->run->outbox,
                       "{\"jsonrpc\":\"2.0\",\"method\":\"%s\",\"params\":{\"conn\":%lld}}\n",
                       method, c->id) == 0)
                queued(c->run);
}

/* Bytes for the sandbox's client, as data frames of at most EGRESS_CHUNK
 * bytes each (frame_auth.h): a line "#CONN SIZE", then the bytes as they
 * are. */
static bool send_data(struct egress_run *r, long long id, const void *p, size_t n)
{
        size_t before = r->outbox.len;
        for (size_t at = 0; at < n;) {
                size_t k = n - at < EGRESS_CHUNK ? n - at : EGRESS_CHUNK;
                if (buf_printf(&r->outbox, "#%lld %zu\n", id, k) < 0 ||
                    buf_append(&r->outbox, (const char *)p + at, k) < 0) {
                        r->outbox.len = before;
                        log_warn("network: sandbox %s: a frame of connection %lld did not fit",
                                 r->sandbox, id);
                        return false;
                }
                at += k;
        }
        queued(r);
        return true;
}

static void send_ack(struct conn *c, bool all)
{
        if (c->to_ack <= 0 || (!all && c->to_ack < EGRESS_CHUNK))
                return;
        if (buf_printf(&c->run->outbox,
                       "{\"jsonrpc\":\"2.0\",\"method\":\"net/ack\",\"params\":{\"conn\":%lld,"
                       "\"bytes\":%lld}}\n",
                       c->id, c->to_ack) == 0)
                queued(c->run);
        c->to_ack = 0;
}

int egress_run_new(struct egress *g, json_t *grant, egress_lines_fn send, void *userdata,
                   struct egress_run **ret)
{
        struct egress_run *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        *r = (struct egress_run){.g = g, .send = send, .userdata = userdata};
        list_init(&r->conns);
        list_init(&r->asked);
        size_t n = json_array_size(grant);
        r->grant = calloc(n + 1, sizeof(char *));
        /* Each connection has at most a window in flight each way. */
        buf_init(&r->outbox,
                 (size_t)g->cfg->network_max_connections * (EGRESS_WINDOW + EGRESS_CHUNK) +
                     (1 << 20));
        bool copied = r->grant != NULL;
        for (size_t i = 0; copied && i < n; i++)
                copied = (r->grant[i] = strdup(json_string_value(json_array_get(grant, i))));
        if (!copied) {
                egress_run_free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

void egress_run_set_asker(struct egress_run *r, const struct bridge_asker *asker)
{
        r->asker = asker;
}

void egress_run_set_names(struct egress_run *r, const char *sandbox, const char *client)
{
        if (sandbox)
                snprintf(r->sandbox, sizeof(r->sandbox), "%s", sandbox);
        if (client)
                snprintf(r->client, sizeof(r->client), "%s", client);
}

json_t *egress_run_exec_params(const struct egress_run *r)
{
        if (!r->grant || !r->grant[0])
                return NULL;
        json_t *env = json_object();
        const char *index = r->g->cfg->pip_index;
        if (env && index) {
                json_object_set_new(env, "PIP_INDEX_URL", json_string(index));
                /* pip takes a plain-HTTP index only from a host it is told
                 * to trust; the person who set pip_index chose it. */
                if (strncmp(index, "http://", 7) == 0) {
                        char host[NET_HOST_MAX + 8];
                        size_t n = strcspn(index + 7, ":/?#");
                        if (n < sizeof(host)) {
                                memcpy(host, index + 7, n);
                                host[n] = '\0';
                                json_object_set_new(env, "PIP_TRUSTED_HOST", json_string(host));
                        }
                }
        }
        return env ? json_pack("{s:o}", "env", env) : NULL;
}

size_t egress_run_connections(const struct egress_run *r)
{
        size_t n = 0;
        struct conn *c;
        list_for_each(c, &r->conns, node) n++;
        return n;
}

/* ---- one connection's end */

static void audit_conn(struct conn *c, const char *decision, const char *reason)
{
        struct egress_run *r = c->run;
        long long ms = now_ms() - c->t0;
        metrics_network(decision, c->bytes_out, c->bytes_in);
        if (strcmp(decision, "denied") == 0 && ++r->denials > DENIALS_AUDITED)
                return;
        char why[300] = "";
        if (reason)
                snprintf(why, sizeof(why), "%s", reason);
        utf8_scrub(why);
        log_info("network: sandbox %s: %s:%d %s%s%s (%llu bytes out, %llu in)", r->sandbox,
                 c->head.host[0] ? c->head.host : "?", c->head.port, decision, why[0] ? ": " : "",
                 why, c->bytes_out, c->bytes_in);
        if (!r->g->audit)
                return;
        json_t *line = json_pack(
            "{s:s, s:s, s:s?, s:s?, s:s, s:i, s:s?, s:s, s:s?, s:s?, s:I, s:I, s:I}", "event",
            "network", "sandbox", r->sandbox, "client", r->client[0] ? r->client : NULL, "run",
            r->sandbox[0] ? r->sandbox : NULL, "host", c->head.host, "port", c->head.port,
            "address", c->address[0] ? c->address : NULL, "decision", decision, "reason",
            why[0] ? why : NULL, "route", c->route ? c->route->origin : NULL, "bytes_out",
            (json_int_t)c->bytes_out, "bytes_in", (json_int_t)c->bytes_in, "duration_ms",
            (json_int_t)ms);
        const char *nullable[] = {"client", "run", "address", "reason", "route"};
        for (size_t i = 0; line && i < ARRAY_SIZE(nullable); i++)
                if (!json_object_get(line, nullable[i]))
                        json_object_set_new(line, nullable[i], json_null());
        audit_write_event(r->g->audit, line);
}

static void conn_free(struct conn *c)
{
        if (c->easy) {
                curl_loop_remove(c->run->g->cl, c->easy);
                curl_easy_cleanup(c->easy);
        }
        curl_slist_free_all(c->resolve);
        if (c->lookup) {
                struct lookup *l = c->lookup;
                if (gai_cancel(&l->cb) == EAI_CANCELED) {
                        list_del(&l->node);
                        l->g->n_lookups--;
                        if (l->g->owed)
                                l->g->owed--;
                        free(l);
                } else {
                        l->c = NULL; /* its thread has it: the poll frees it */
                }
        }
        watch_close(&c->w, &c->fd);
        timer_remove(c->idle);
        defer_cancel(&c->read_d);
        proxy_head_free(&c->head);
        buf_free(&c->head_out);
        buf_free(&c->to_remote);
        buf_free(&c->held);
        list_del(&c->node);
        free(c);
}

/* The end of a connection: audited once, then gone. */
static void conn_end(struct conn *c, const char *decision, const char *reason)
{
        audit_conn(c, decision, reason);
        conn_free(c);
}

/* The proxy's own answer (status, one line of why), then the end. */
static void conn_answer(struct conn *c, int status, const char *why, const char *decision)
{
        struct buf b;
        buf_init(&b, 4096);
        if (proxy_answer(&b, status, why) == 0)
                send_data(c->run, c->id, b.data, b.len);
        buf_free(&b);
        send_note(c, "net/eof");
        conn_end(c, decision, why);
}

static void conn_refuse(struct conn *c, int status, const char *why)
{
        conn_answer(c, status, why, "denied");
}

/* Cut short: an answer when nothing of the origin's went to the sandbox
 * yet on a plain request, else the connection closes under the code. */
static void conn_abort(struct conn *c, int status, const char *why)
{
        if (!c->head.connect && c->bytes_in == 0 && c->state == C_OPEN) {
                conn_answer(c, status, why, c->decision);
                return;
        }
        send_note(c, "net/close");
        conn_end(c, c->decision ? c->decision : "denied", why);
}

void egress_run_free(struct egress_run *r)
{
        if (!r)
                return;
        while (!list_empty(&r->conns))
                conn_end(list_first(&r->conns, struct conn, node),
                         list_first(&r->conns, struct conn, node)->decision
                             ? list_first(&r->conns, struct conn, node)->decision
                             : "denied",
                         "the run ended");
        if (r->denials > DENIALS_AUDITED && r->g->audit) {
                char why[160];
                snprintf(why, sizeof(why),
                         "%ld more refused connections of this run were not written",
                         r->denials - DENIALS_AUDITED);
                log_info("network: sandbox %s: %s", r->sandbox, why);
                audit_write_event(r->g->audit,
                                  json_pack("{s:s, s:s, s:s, s:s}", "event", "network", "sandbox",
                                            r->sandbox, "decision", "denied", "reason", why));
        }
        while (!list_empty(&r->asked)) {
                struct asked *a = list_first(&r->asked, struct asked, node);
                if (a->handle && r->asker)
                        r->asker->withdraw(a->handle);
                list_del(&a->node);
                free(a);
        }
        defer_cancel(&r->flush_d);
        flush(r);
        timer_remove(r->retry);
        buf_free(&r->outbox);
        strv_free(r->grant);
        free(r);
}

/* ---- relaying */

static void on_socket(struct watch *w, uint32_t events, void *userdata);

static void conn_watch(struct conn *c)
{
        if (!c->w)
                return;
        uint32_t want = 0;
        if (!c->remote_eof && c->in_flight < EGRESS_WINDOW)
                want |= EPOLLIN;
        if (c->head_out.len || c->to_remote.len)
                want |= EPOLLOUT;
        if (want != c->events && watch_modify(c->w, want) == 0)
                c->events = want;
}

static void touch(struct conn *c)
{
        c->last = now_ms();
}

/* What the sandbox sent, on to the origin: the head first. False when
 * the connection ended (and is freed). */
static bool pump_out(struct conn *c)
{
        while (c->head_out.len || c->to_remote.len) {
                struct buf *b = c->head_out.len ? &c->head_out : &c->to_remote;
                size_t sent = 0;
                CURLcode rc = curl_easy_send(c->easy, b->data, b->len, &sent);
                if (rc == CURLE_AGAIN)
                        break;
                if (rc != CURLE_OK) {
                        conn_abort(c, 502, "the connection to the host failed while sending");
                        return false;
                }
                if (b == &c->to_remote)
                        c->to_ack += (long long)sent;
                buf_consume(b, sent);
                touch(c);
        }
        send_ack(c, !c->to_remote.len);
        if (!c->head_out.len && !c->to_remote.len && c->sandbox_eof && !c->shut && !c->route) {
                shutdown(c->fd, SHUT_WR);
                c->shut = true;
        }
        conn_watch(c);
        return true;
}

/* Secrets of a route never reach the sandbox: each is overwritten with
 * '*' (the length stays, so Content-Length holds), and the last bytes
 * are held back until the next read shows whether a secret goes on. */
static bool masked_send(struct conn *c, const char *p, size_t n, bool end)
{
        const struct route *rt = c->route;
        if (!rt || !rt->secrets || !rt->secrets[0]) {
                if (n && !send_data(c->run, c->id, p, n)) {
                        conn_abort(c, 502, "corral's frame queue for this sandbox is full");
                        return false;
                }
                return true;
        }
        if (buf_append(&c->held, p, n) < 0) {
                conn_abort(c, 502, "out of memory");
                return false;
        }
        for (char **s = rt->secrets; *s; s++) {
                size_t k = strlen(*s);
                for (char *q = c->held.data; q && (size_t)(q - c->held.data) + k <= c->held.len;) {
                        char *hit = memmem(q, c->held.len - (size_t)(q - c->held.data), *s, k);
                        if (!hit)
                                break;
                        memset(hit, '*', k);
                        q = hit + k;
                }
        }
        size_t keep = end ? 0 : rt->longest - 1;
        if (c->held.len > keep) {
                size_t out = c->held.len - keep;
                if (!send_data(c->run, c->id, c->held.data, out)) {
                        conn_abort(c, 502, "corral's frame queue for this sandbox is full");
                        return false;
                }
                buf_consume(&c->held, out);
        }
        return true;
}

/* The origin's bytes, to the sandbox, as far as the window lets. False
 * when the connection ended (and is freed). */
static bool pump_in(struct conn *c)
{
        static char chunk[EGRESS_CHUNK];
        struct egress_run *r = c->run;
        while (!c->remote_eof && c->in_flight < EGRESS_WINDOW) {
                size_t want = (size_t)(EGRESS_WINDOW - c->in_flight);
                if (want > sizeof(chunk))
                        want = sizeof(chunk);
                /* A frame as full as what is there allows: an origin that
                 * sends tiny TLS records must not make a frame of each. */
                size_t n = 0;
                CURLcode rc = CURLE_OK;
                while (n < want) {
                        size_t got = 0;
                        rc = curl_easy_recv(c->easy, chunk + n, want - n, &got);
                        if (rc != CURLE_OK || got == 0)
                                break;
                        n += got;
                }
                if (n == 0 && rc == CURLE_AGAIN)
                        break;
                if (n == 0 && rc != CURLE_OK) {
                        conn_abort(c, 502, "the connection to the host failed while receiving");
                        return false;
                }
                touch(c);
                if (n == 0) {
                        if (!masked_send(c, NULL, 0, true))
                                return false;
                        c->remote_eof = true;
                        send_note(c, "net/eof");
                        break;
                }
                if (r->bytes_in + n > r->g->cfg->network_max_bytes) {
                        char why[200];
                        snprintf(why, sizeof(why),
                                 "this run's download limit of %llu bytes is reached "
                                 "(network_max_bytes)",
                                 r->g->cfg->network_max_bytes);
                        conn_abort(c, 403, why);
                        return false;
                }
                c->bytes_in += n;
                r->bytes_in += n;
                c->in_flight += (long long)n;
                if (!masked_send(c, chunk, n, false))
                        return false;
        }
        conn_watch(c);
        return true;
}

/* The socket's watch, taken away while nothing can be done with it: a
 * hang-up is reported whatever is asked for, and would spin the loop
 * while the sandbox's window is full or the origin's side has ended. */
static void park(struct conn *c)
{
        watch_remove(c->w);
        c->w = NULL;
        c->events = 0;
}

static void unpark(struct conn *c)
{
        if (c->w || c->fd < 0 || c->remote_eof)
                return;
        if (watch_add(c->run->g->loop, c->fd, EPOLLIN, on_socket, c, &c->w) == 0)
                c->events = EPOLLIN;
}

static void on_socket(struct watch *w, uint32_t events, void *userdata)
{
        struct conn *c = userdata;
        (void)w;
        if ((events & EPOLLOUT) && !pump_out(c))
                return;
        if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !pump_in(c))
                return;
        if ((events & (EPOLLHUP | EPOLLERR)) && !c->head_out.len && !c->to_remote.len &&
            (c->remote_eof || c->in_flight >= EGRESS_WINDOW))
                park(c);
}

static void read_later(void *userdata)
{
        struct conn *c = userdata;
        unpark(c);
        pump_in(c);
}

static void on_idle(struct timer *t, void *userdata)
{
        struct conn *c = userdata;
        long long idle = (long long)(c->run->g->cfg->network_idle_s * 1000);
        long long left = c->last + idle - now_ms();
        if (c->state == C_ASKING)
                left = idle; /* the person's time is ask_timeout_s's */
        if (c->state == C_RESOLVING) {
                double bound = c->run->g->cfg->network_connect_timeout_s;
                left = c->t_resolve + (long long)(bound * 1000) - now_ms();
                if (left <= 0) {
                        char why[400];
                        snprintf(why, sizeof(why),
                                 "resolving %s took over %g s (network_connect_timeout_s)",
                                 c->route ? c->route->host : c->head.host, bound);
                        conn_answer(c, 504, why, c->decision);
                        return;
                }
        }
        if (left > 0) {
                timer_arm(t, left);
                return;
        }
        char why[120];
        snprintf(why, sizeof(why), "no byte either way for %g s (network_idle_s)",
                 c->run->g->cfg->network_idle_s);
        conn_abort(c, 504, why);
}

/* ---- connecting */

static curl_socket_t open_socket(void *userdata, curlsocktype purpose, struct curl_sockaddr *a)
{
        struct conn *c = userdata;
        (void)purpose;
        const struct sockaddr *sa = &a->addr;
        char text[64];
        net_address_text(sa, text, sizeof(text));
        snprintf(c->address, sizeof(c->address), "%s", text);
        const char *special = net_address_special(sa);
        if (special && !policy_network_address_ok(c->run->g->pol, sa)) {
                snprintf(c->refused, sizeof(c->refused),
                         "%s resolves to %s (%s), which the policy does not name in "
                         "network.addresses",
                         c->head.host, text, special);
                return CURL_SOCKET_BAD;
        }
        return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static void connected(CURL *easy, CURLcode result, void *userdata)
{
        struct conn *c = userdata;
        (void)easy;
        if (result != CURLE_OK) {
                char why[700];
                int status = result == CURLE_OPERATION_TIMEDOUT ? 504 : 502;
                if (c->refused[0])
                        snprintf(why, sizeof(why), "%s", c->refused);
                else if (result == CURLE_COULDNT_RESOLVE_HOST)
                        snprintf(why, sizeof(why), "cannot resolve %s", c->head.host);
                else
                        snprintf(why, sizeof(why), "cannot connect to %s:%d: %s", c->head.host,
                                 c->route ? c->route->port : c->head.port,
                                 c->errbuf[0] ? c->errbuf : curl_easy_strerror(result));
                if (c->refused[0])
                        conn_refuse(c, 403, why);
                else
                        conn_answer(c, status, why, c->decision);
                return;
        }
        curl_socket_t s = CURL_SOCKET_BAD;
        curl_easy_getinfo(c->easy, CURLINFO_ACTIVESOCKET, &s);
        c->fd = s == CURL_SOCKET_BAD ? -1 : fcntl(s, F_DUPFD_CLOEXEC, 3);
        int wr =
            c->fd < 0 ? -errno : watch_add(c->run->g->loop, c->fd, EPOLLIN, on_socket, c, &c->w);
        if (wr < 0) {
                char why[200];
                snprintf(why, sizeof(why), "cannot watch the connection (socket %d: %s)", (int)s,
                         strerror(-wr));
                conn_answer(c, 502, why, c->decision);
                return;
        }
        c->events = EPOLLIN;
        c->state = C_OPEN;
        char *ip = NULL;
        if (curl_easy_getinfo(c->easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK && ip && *ip)
                snprintf(c->address, sizeof(c->address), "%s", ip);
        c->bytes_out += c->head_out.len; /* the head as sent counts */
        c->run->bytes_out += c->head_out.len;
        touch(c);
        if (c->head.connect) {
                static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
                send_data(c->run, c->id, ok, sizeof(ok) - 1);
                c->in_flight += (long long)sizeof(ok) - 1; /* acked as any byte is */
        }
        pump_out(c);
}

static int conn_connect(struct conn *c, const char *resolved)
{
        struct egress *g = c->run->g;
        const struct route *rt = c->route;
        const char *host = rt ? rt->host : c->head.host;
        int port = rt ? rt->port : c->head.port;
        bool v6 = strchr(host, ':') != NULL;
        char url[NET_HOST_MAX + 40];
        snprintf(url, sizeof(url), "%s://%s%s%s:%d/", rt && rt->tls ? "https" : "http",
                 v6 ? "[" : "", host, v6 ? "]" : "", port);
        if (!c->head.connect) {
                /* The head for the origin, with the route's headers set. */
                char host_value[NET_HOST_MAX + 16];
                bool usual = port == ((rt && rt->tls) ? 443 : 80);
                snprintf(host_value, sizeof(host_value), "%s%s%s", v6 ? "[" : "", host,
                         v6 ? "]" : "");
                if (!usual)
                        snprintf(host_value + strlen(host_value),
                                 sizeof(host_value) - strlen(host_value), ":%d", port);
                buf_init(&c->head_out,
                         PROXY_HEAD_MAX + ROUTE_HEADERS_MAX * (HEADER_VALUE_MAX + 128));
                if (proxy_head_write(&c->head, host_value,
                                     rt ? (const char *const *)rt->names : NULL,
                                     rt ? (const char *const *)rt->values : NULL,
                                     rt ? rt->n_headers : 0, &c->head_out) < 0)
                        return -ENOBUFS;
                /* A route's request as HTTP/1.0: its answer has no chunks. */
                char *eol = rt ? strstr(c->head_out.data, "\r\n") : NULL;
                if (eol && eol - c->head_out.data >= 8 && memcmp(eol - 8, "HTTP/1.1", 8) == 0)
                        eol[-1] = '0';
        }
        CURL *e = curl_easy_init();
        if (!e)
                return -ENOMEM;
        c->easy = e;
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_CONNECT_ONLY, 1L);
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
        curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
        curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, c);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)(g->cfg->network_connect_timeout_s * 1000));
        curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
        /* The connection is ours until we remove it: libcurl must not
         * prune it as too old while another connection is made (it judges
         * a connect-only one by when it was made), and a handle removed
         * while its name resolves must not wait for the resolver thread
         * (the loop would stall for every client). */
        curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, (long)INT_MAX);
        curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
        /* network_resolve: this name's address instead of DNS (curl wants
         * host:port:address). */
        const char *fixed = json_string_value(json_object_get(g->cfg->network_resolve, host));
        if (resolved) {
                c->resolve = curl_slist_append(NULL, resolved);
                if (!c->resolve)
                        return -ENOMEM;
                curl_easy_setopt(e, CURLOPT_RESOLVE, c->resolve);
        } else if (fixed) {
                char line[NET_HOST_MAX + 80];
                snprintf(line, sizeof(line), "%s:%d:%s%s%s", host, port,
                         strchr(fixed, ':') ? "[" : "", fixed, strchr(fixed, ':') ? "]" : "");
                c->resolve = curl_slist_append(NULL, line);
                if (!c->resolve)
                        return -ENOMEM;
                curl_easy_setopt(e, CURLOPT_RESOLVE, c->resolve);
        }
        if (rt && rt->ca_file)
                curl_easy_setopt(e, CURLOPT_CAINFO, rt->ca_file);
        c->state = C_CONNECTING;
        return curl_loop_add_kept(g->cl, e, connected, c);
}

/* ---- deciding */

static struct asked *asked_find(struct egress_run *r, const char *host, int port)
{
        struct asked *a;
        list_for_each(a, &r->asked,
                      node) if (a->port == port && strcmp(a->host, host) == 0) return a;
        return NULL;
}

/* The name's addresses are in: the ones the rules let through go to
 * libcurl as its only choices (it resolves nothing itself). */
static void resolved(struct conn *c, int rc, const struct addrinfo *ai)
{
        const struct route *rt = c->route;
        const char *host = rt ? rt->host : c->head.host;
        int port = rt ? rt->port : c->head.port;
        char why[600];
        if (rc != 0) {
                snprintf(why, sizeof(why), "cannot resolve %s: %s", host, gai_strerror(rc));
                conn_answer(c, 502, why, c->decision);
                return;
        }
        char line[NET_HOST_MAX + 32 + ADDRESSES_MAX * 48];
        int k = snprintf(line, sizeof(line), "%s:%d:", host, port);
        size_t n = 0;
        why[0] = '\0';
        for (; ai && n < ADDRESSES_MAX; ai = ai->ai_next) {
                char text[64];
                net_address_text(ai->ai_addr, text, sizeof(text));
                const char *special = net_address_special(ai->ai_addr);
                if (special && !policy_network_address_ok(c->run->g->pol, ai->ai_addr)) {
                        if (!why[0])
                                snprintf(why, sizeof(why),
                                         "%s resolves to %s (%s), which the policy does not name "
                                         "in network.addresses",
                                         host, text, special);
                        continue;
                }
                if (strstr(line, text))
                        continue; /* the same address for another socket type */
                bool v6 = ai->ai_family == AF_INET6;
                k += snprintf(line + k, sizeof(line) - (size_t)k, "%s%s%s%s", n ? "," : "",
                              v6 ? "[" : "", text, v6 ? "]" : "");
                n++;
        }
        if (!n) {
                conn_refuse(c, 403, why[0] ? why : "the name has no address");
                return;
        }
        if (conn_connect(c, line) < 0)
                conn_answer(c, 502, "cannot start the connection", c->decision);
}

/* In the thread glibc starts for a finished lookup: only a write. */
static void lookup_finished(union sigval v)
{
        uint64_t one = 1;
        ssize_t k = write(v.sival_int, &one, sizeof(one));
        (void)k;
}

/* Every finished lookup, its connection told (one given up on freed). */
static void lookups_sweep(struct egress *g)
{
        struct lookup *l, *next;
        list_for_each_safe(l, next, &g->lookups, node)
        {
                int rc = gai_error(&l->cb);
                if (rc == EAI_INPROGRESS)
                        continue;
                list_del(&l->node);
                g->n_lookups--;
                if (l->c) {
                        l->c->lookup = NULL;
                        resolved(l->c, rc, l->cb.ar_result);
                }
                if (l->cb.ar_result)
                        freeaddrinfo(l->cb.ar_result);
                free(l);
        }
}

static void lookups_done(struct watch *w, uint32_t events, void *userdata)
{
        struct egress *g = userdata;
        uint64_t count;
        (void)w;
        (void)events;
        while (read(g->lookup_fd, &count, sizeof(count)) == sizeof(count))
                g->owed -= count < g->owed ? count : g->owed;
        lookups_sweep(g);
}

static void lookups_backstop(struct timer *t, void *userdata)
{
        struct egress *g = userdata;
        lookups_sweep(g);
        if (!list_empty(&g->lookups))
                timer_arm(t, LOOKUP_SWEEP_MS);
}

static bool is_address(const char *host)
{
        unsigned char a[16];
        return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

static void go(struct conn *c, const char *decision)
{
        struct egress *g = c->run->g;
        c->decision = decision;
        const char *host = c->route ? c->route->host : c->head.host;
        if (is_address(host) || json_object_get(g->cfg->network_resolve, host)) {
                if (conn_connect(c, NULL) < 0)
                        conn_answer(c, 502, "cannot start the connection", decision);
                return;
        }
        if (g->n_lookups >= LOOKUPS_MAX)
                lookups_sweep(g); /* finished ones whose notice was lost */
        if (g->n_lookups >= LOOKUPS_MAX) {
                conn_answer(c, 503, "too many names are being resolved at once; try again",
                            decision);
                return;
        }
        struct lookup *l = calloc(1, sizeof(*l));
        if (!l) {
                conn_answer(c, 503, "out of memory", decision);
                return;
        }
        *l = (struct lookup){.g = g, .c = c};
        snprintf(l->name, sizeof(l->name), "%s", host);
        l->hints.ai_socktype = SOCK_STREAM;
        l->cb.ar_name = l->name;
        l->cb.ar_request = &l->hints;
        struct gaicb *list[] = {&l->cb};
        struct sigevent done = {.sigev_notify = SIGEV_THREAD,
                                .sigev_value.sival_int = g->lookup_fd,
                                .sigev_notify_function = lookup_finished};
        bool first = list_empty(&g->lookups);
        if (getaddrinfo_a(GAI_NOWAIT, list, 1, &done) != 0) {
                /* Out of memory for its notice, glibc may have queued it
                 * all the same: then it is kept, given up on, for a sweep. */
                bool queued = gai_error(&l->cb) == EAI_INPROGRESS;
                if (queued) {
                        l->c = NULL;
                        list_append(&g->lookups, &l->node);
                        g->n_lookups++;
                        if (first)
                                timer_set(g->loop, &g->sweep_t, lookups_backstop, g,
                                          LOOKUP_SWEEP_MS);
                } else {
                        free(l);
                }
                conn_answer(c, 503, "cannot start resolving the name", decision);
                return;
        }
        g->owed++;
        if (first && timer_set(g->loop, &g->sweep_t, lookups_backstop, g, LOOKUP_SWEEP_MS) < 0)
                log_warn("network: cannot set the lookups' backstop timer");
        list_append(&g->lookups, &l->node);
        g->n_lookups++;
        c->lookup = l;
        c->state = C_RESOLVING;
        c->t_resolve = now_ms();
        timer_arm(c->idle, (long long)(g->cfg->network_connect_timeout_s * 1000));
}

static void answered(void *userdata, enum bridge_answer answer, const char *why)
{
        struct asked *a = userdata;
        struct egress_run *r = a->run;
        a->handle = NULL;
        a->answer = answer == BRIDGE_ACCEPTED;
        char reason[300];
        snprintf(reason, sizeof(reason), "the person was asked about %s:%d: %s%s%s", a->host,
                 a->port, bridge_answer_name(answer), why && *why ? ": " : "", why ? why : "");
        struct conn *c, *next;
        list_for_each_safe(c, next, &r->conns, node)
        {
                if (c->state != C_ASKING || c->head.port != a->port ||
                    strcmp(c->head.host, a->host) != 0)
                        continue;
                if (a->answer)
                        go(c, "accepted");
                else
                        conn_refuse(c, 403, reason);
        }
}

static void ask(struct conn *c)
{
        struct egress_run *r = c->run;
        struct asked *a = asked_find(r, c->head.host, c->head.port);
        if (a && a->answer == 1) {
                go(c, "accepted");
                return;
        }
        if (a && a->answer == 0) {
                char why[300];
                snprintf(why, sizeof(why), "the person declined %s:%d for this run", a->host,
                         a->port);
                conn_refuse(c, 403, why);
                return;
        }
        c->state = C_ASKING;
        if (a)
                return; /* the question is out: this one waits for it too */
        if (r->n_asked >= ASKED_MAX) {
                conn_refuse(c, 403, "this run asked about too many hosts already");
                return;
        }
        a = calloc(1, sizeof(*a));
        if (!a) {
                conn_refuse(c, 503, "out of memory");
                return;
        }
        snprintf(a->host, sizeof(a->host), "%s", c->head.host);
        a->port = c->head.port;
        a->answer = -1;
        a->run = r;
        list_append(&r->asked, &a->node);
        r->n_asked++;
        char message[800];
        snprintf(message, sizeof(message),
                 "Code in sandbox %s wants to connect to %s port %d%s. Allow this run to reach "
                 "%s:%d?",
                 r->sandbox[0] ? r->sandbox : "?", c->head.host, c->head.port,
                 c->head.connect ? " (an encrypted tunnel)" : " (plain HTTP)", c->head.host,
                 c->head.port);
        int rc =
            r->asker ? r->asker->ask(r->asker->ud, message, answered, a, &a->handle) : -ENOTSUP;
        if (rc == -ENOTSUP && r->g->cfg->ask_allow_unasked) {
                a->answer = 1;
                go(c, "allowed");
                return;
        }
        if (rc < 0) {
                char why[400];
                snprintf(why, sizeof(why),
                         "the policy asks a person about %s, and this MCP client cannot be asked "
                         "(no elicitation): name the host in policy.json network.allow",
                         c->head.host);
                a->answer = 0;
                conn_refuse(c, 403, why);
        }
}

static void decide(struct conn *c)
{
        struct egress_run *r = c->run;
        char why[600];
        bool granted = false;
        for (char **p = r->grant; p && *p && !granted; p++)
                granted = net_pattern_match(*p, c->head.host, c->head.port, default_ports,
                                            ARRAY_SIZE(default_ports));
        if (!granted) {
                char list[300] = "";
                size_t k = 0;
                for (char **p = r->grant; p && *p && k < sizeof(list) - 1; p++)
                        k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%s",
                                              p == r->grant ? "" : ", ", *p);
                snprintf(why, sizeof(why),
                         "%s:%d is not in this run's network grant (%s): name it in the call's "
                         "\"network\"",
                         c->head.host, c->head.port, list[0] ? list : "none");
                conn_refuse(c, 403, why);
                return;
        }
        if (!c->head.connect)
                for (size_t i = 0; i < r->g->n_routes; i++) {
                        const struct route *rt = &r->g->routes[i];
                        if (strcmp(rt->host, c->head.host) == 0 &&
                            (c->head.port == 80 || c->head.port == rt->port))
                                c->route = rt;
                }
        switch (policy_network_decision(r->g->pol, c->head.host, c->head.port)) {
        case POLICY_DENY:
                snprintf(why, sizeof(why),
                         "the policy (%s) does not allow %s:%d (network.deny, or not in "
                         "network.allow)",
                         policy_source_name(r->g->pol), c->head.host, c->head.port);
                conn_refuse(c, 403, why);
                return;
        case POLICY_ASK:
                ask(c);
                return;
        case POLICY_ALLOW:
                go(c, "allowed");
                return;
        }
}

/* ---- frames from the runtime */

static struct conn *conn_find(struct egress_run *r, long long id)
{
        struct conn *c;
        list_for_each(c, &r->conns, node) if (c->id == id) return c;
        return NULL;
}

static void on_open(struct egress_run *r, long long id, json_t *params)
{
        const char *b64 = json_string_value(json_object_get(params, "head"));
        if (conn_find(r, id)) {
                log_warn("network: sandbox %s: connection %lld opened twice", r->sandbox, id);
                return;
        }
        struct conn *c = calloc(1, sizeof(*c));
        if (!c)
                return;
        *c = (struct conn){.run = r, .id = id, .fd = -1, .t0 = now_ms()};
        c->last = c->t0;
        buf_init(&c->to_remote, TO_REMOTE_MAX);
        buf_init(&c->held, EGRESS_CHUNK + HEADER_VALUE_MAX);
        list_append(&r->conns, &c->node);
        if (timer_set(r->g->loop, &c->idle, on_idle, c,
                      (long long)(r->g->cfg->network_idle_s * 1000)) < 0) {
                conn_refuse(c, 503, "out of resources");
                return;
        }
        struct buf head;
        buf_init(&head, PROXY_HEAD_MAX);
        int status = 400;
        const char *why = "net/open without a head";
        int rc = b64 ? base64_decode(&head, b64, strlen(b64)) : -EINVAL;
        if (rc == -ENOBUFS)
                status = 431, why = "the request head is over 16384 bytes";
        if (rc == 0)
                rc =
                    proxy_head_parse(head.data ? head.data : "", head.len, &c->head, &status, &why);
        buf_free(&head);
        if (rc < 0) {
                conn_refuse(c, status, why);
                return;
        }
        if (egress_run_connections(r) > (size_t)r->g->cfg->network_max_connections) {
                char text[200];
                snprintf(text, sizeof(text),
                         "this run has %ld connections open, the most allowed "
                         "(network_max_connections)",
                         r->g->cfg->network_max_connections);
                conn_refuse(c, 403, text);
                return;
        }
        decide(c);
}

static void on_data(struct egress_run *r, struct conn *c, json_t *params)
{
        const char *b64 = json_string_value(json_object_get(params, "data"));
        size_t before = c->to_remote.len;
        if (!b64 || c->sandbox_eof) {
                conn_abort(c, 400, "net/data without data, or after the end");
                return;
        }
        int rc = base64_decode(&c->to_remote, b64, strlen(b64));
        if (rc < 0) {
                conn_abort(c, 400,
                           rc == -ENOBUFS ? "the sandbox overran the flow window"
                                          : "net/data is not base64");
                return;
        }
        size_t n = c->to_remote.len - before;
        if (r->bytes_out + n > r->g->cfg->network_max_bytes) {
                char why[200];
                snprintf(why, sizeof(why),
                         "this run's upload limit of %llu bytes is reached (network_max_bytes)",
                         r->g->cfg->network_max_bytes);
                c->to_remote.len = before;
                conn_abort(c, 403, why);
                return;
        }
        c->bytes_out += n;
        r->bytes_out += n;
        touch(c);
        if (c->state == C_OPEN) {
                unpark(c);
                pump_out(c);
        }
}

void egress_run_frame(struct egress_run *r, const char *method, json_t *params)
{
        json_t *idv = json_object_get(params, "conn");
        long long id = json_is_integer(idv) ? json_integer_value(idv) : 0;
        if (id <= 0 || id > (1LL << 53))
                return;
        if (strcmp(method, "net/open") == 0) {
                on_open(r, id, params);
                return;
        }
        struct conn *c = conn_find(r, id);
        if (!c)
                return; /* ended here already: the runtime learns it from our frames */
        if (strcmp(method, "net/data") == 0) {
                on_data(r, c, params);
        } else if (strcmp(method, "net/ack") == 0) {
                json_t *b = json_object_get(params, "bytes");
                long long n = json_is_integer(b) ? json_integer_value(b) : -1;
                if (n < 0 || n > c->in_flight) {
                        conn_abort(c, 400, "net/ack of bytes never sent");
                        return;
                }
                c->in_flight -= n;
                if (c->state == C_OPEN && !c->remote_eof) {
                        unpark(c);
                        conn_watch(c);
                        /* TLS may hold decrypted bytes the socket no longer
                         * signals: read now, from the loop. */
                        loop_defer(r->g->loop, &c->read_d, read_later, c);
                }
        } else if (strcmp(method, "net/eof") == 0) {
                c->sandbox_eof = true;
                if (c->state == C_OPEN)
                        pump_out(c);
        } else if (strcmp(method, "net/close") == 0) {
                conn_end(c, c->decision ? c->decision : "denied", NULL);
        }
}
