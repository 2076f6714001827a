#include "upstream/http.h"

#include "core/list.h"
#include "upstream/mask.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define CONNECT_TIMEOUT_MS 10000
#define OTHER_POST_MS      30000 /* notifications and responses: nothing to wait for */
#define DELETE_TIMEOUT_MS  2000
#define MAX_REDIRECTS      3
#define SESSION_ID_MAX     1024
#define ERROR_BODY_MAX     16384 /* of an error answer, read for its message */
#define ERROR_MESSAGE_MAX  300   /* bytes of its JSON-RPC message in ours... */
#define ERROR_TEXT_MAX     200   /* ...or of the start of its text */
#define CONTENT_TYPE_MAX   128
#define SSE_LINE_SLACK     64    /* room for "data: " before a message-sized value */
#define LISTEN_RETRY_MS    1000  /* the GET stream ended: open it again after this... */
#define LISTEN_RETRY_MAX   30000 /* ...doubled while it keeps failing at once */

/* ---- response bodies */

void http_body_init(struct http_body *b, enum http_body_kind kind, size_t max)
{
        *b = (struct http_body){.kind = kind, .max = max};
        if (kind == HTTP_BODY_JSON) {
                buf_init(&b->line, max);
        } else {
                buf_init(&b->line, max + SSE_LINE_SLACK);
                buf_init(&b->data, max + 1); /* + the "\n" after every data line */
        }
}

void http_body_free(struct http_body *b)
{
        buf_free(&b->line);
        buf_free(&b->data);
}

/* One SSE line (in b->line, without its end). */
static int sse_line(struct http_body *b, line_cb cb, void *userdata)
{
        const char *s = b->line.data;
        size_t len = b->line.len;
        int r = 0;
        if (len == 0) {
                /* A blank line ends the event. The last "\n" joined nothing. */
                if (b->have_data && b->data.len > 1)
                        r = cb(userdata, b->data.data, b->data.len - 1);
                b->data.len = 0;
                b->have_data = false;
                return r < 0 ? r : 0;
        }
        if (s[0] != ':') { /* ':' starts a comment (keep-alives) */
                const char *colon = memchr(s, ':', len);
                size_t flen = colon ? (size_t)(colon - s) : len;
                if (flen == 4 && memcmp(s, "data", 4) == 0) {
                        const char *v = colon ? colon + 1 : s + len;
                        size_t vlen = (size_t)(s + len - v);
                        if (vlen && *v == ' ') {
                                v++;
                                vlen--;
                        }
                        if (buf_append(&b->data, v, vlen) < 0 || buf_append(&b->data, "\n", 1) < 0)
                                return -EMSGSIZE;
                        b->have_data = true;
                }
                /* event, id, retry and unknown fields: nothing for us. */
        }
        b->line.len = 0;
        return 0;
}

static int sse_feed(struct http_body *b, const char *p, size_t n, line_cb cb, void *userdata)
{
        static const char bom[] = "\xEF\xBB\xBF";
        while (n > 0 && !b->started) {
                /* One byte order mark may open the stream; it is not data. */
                if (*p == bom[b->bom]) {
                        p++;
                        n--;
                        if (++b->bom == 3)
                                b->started = true;
                        continue;
                }
                b->started = true;
                if (buf_append(&b->line, bom, b->bom) < 0)
                        return -EMSGSIZE;
        }
        while (n > 0) {
                if (b->after_cr) {
                        b->after_cr = false;
                        if (*p == '\n') { /* the LF of a CRLF */
                                p++;
                                n--;
                                continue;
                        }
                }
                size_t k = 0;
                while (k < n && p[k] != '\n' && p[k] != '\r')
                        k++;
                if (buf_append(&b->line, p, k) < 0)
                        return -EMSGSIZE;
                if (k == n)
                        break;
                b->after_cr = p[k] == '\r';
                p += k + 1;
                n -= k + 1;
                int r = sse_line(b, cb, userdata);
                if (r < 0)
                        return r;
        }
        return 0;
}

int http_body_feed(struct http_body *b, const char *p, size_t n, line_cb cb, void *userdata)
{
        if (b->kind == HTTP_BODY_SSE)
                return sse_feed(b, p, n, cb, userdata);
        return buf_append(&b->line, p, n) < 0 ? -EMSGSIZE : 0;
}

int http_body_end(struct http_body *b, line_cb cb, void *userdata)
{
        if (b->kind == HTTP_BODY_SSE) {
                b->line.len = b->data.len = 0;
                b->have_data = false;
                return 0;
        }
        const char *s = b->line.data;
        size_t len = b->line.len;
        while (len && isspace((unsigned char)*s)) {
                s++;
                len--;
        }
        while (len && isspace((unsigned char)s[len - 1]))
                len--;
        int r = 0;
        if (len == 0) {
                /* nothing */
        } else if (*s != '[') {
                /* One message: the codec reads it (and judges it) as it came. */
                r = cb(userdata, s, len);
        } else {
                json_t *batch = json_loadb(s, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
                if (!json_is_array(batch)) {
                        r = -EBADMSG;
                } else {
                        size_t i;
                        json_t *m;
                        json_array_foreach(batch, i, m)
                        {
                                char *one = json_dumps(m, JSON_COMPACT | JSON_ENCODE_ANY);
                                if (!one) {
                                        r = -ENOMEM;
                                        break;
                                }
                                r = cb(userdata, one, strlen(one));
                                free(one);
                                if (r < 0)
                                        break;
                        }
                }
                json_decref(batch);
        }
        b->line.len = 0;
        return r < 0 ? r : 0;
}

/* ---- the connection */

/* What the event loop hands on: a message, or the end of a POST. */
struct event {
        struct list node; /* c->queue */
        bool done;        /* else a message */
        json_int_t id;
        bool failed, lost;
        struct err e;
        size_t len;
        char data[];
};

struct post {
        struct http_conn *c;
        struct list node; /* c->posts */
        CURL *easy;
        struct curl_slist *headers;
        char *url; /* this POST's target (after a redirect), or NULL: the connection's */
        char *body;
        size_t len;
        json_int_t id;
        bool initialize;
        bool get; /* the GET stream for messages of the server's own */
        long long started_ms;
        bool had_session; /* sent with a session id: a 404 means it expired */
        bool paused;      /* its output waits for the queue to drain */
        int redirects;
        /* The answer being read. */
        char content_type[CONTENT_TYPE_MAX]; /* "(too long)" when it did not fit */
        char session[SESSION_ID_MAX + 1];
        bool session_bad;
        enum { BODY_UNDECIDED, BODY_MESSAGES, BODY_ERROR, BODY_IGNORED } mode;
        struct http_body parser;
        struct buf error_body;
        bool error_cut; /* the error answer was longer than ERROR_BODY_MAX */
        int fail;       /* set when the body broke a limit (-EMSGSIZE) */
};

struct http_conn {
        struct curl_loop *cl;
        struct mask *mask; /* borrowed */
        char *url;
        char *display;  /* masked */
        char **headers; /* "Name: value" */
        size_t max;
        char *session;
        char *protocol;
        char *unix_socket; /* connect there instead of the URL's host */
        const struct http_conn_ops *ops;
        void *userdata;
        struct list posts;
        struct list queue;   /* struct event, oldest first */
        size_t queued;       /* message bytes waiting in the queue */
        struct defer kick;   /* hands on the queue's first event */
        bool closed;         /* shut down: no more requests */
        struct post *listen; /* the GET stream, when open */
        struct timer *relisten;
        long long listen_delay;
        /* The session's DELETE at shutdown. */
        CURL *del;
        struct curl_slist *del_headers;
        void (*del_done)(void *);
        void *del_ud;
};

/* scheme://host[:port]/path: what a message may show of a URL, masked (a
 * ${VAR} may be in its path). */
static char *display_url(const char *url, struct mask *mask)
{
        CURLU *u = curl_url();
        char *out = NULL, *shown = NULL;
        if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK) {
                curl_url_set(u, CURLUPART_USER, NULL, 0);
                curl_url_set(u, CURLUPART_PASSWORD, NULL, 0);
                curl_url_set(u, CURLUPART_OPTIONS, NULL, 0);
                curl_url_set(u, CURLUPART_QUERY, NULL, 0);
                curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0);
                if (curl_url_get(u, CURLUPART_URL, &out, 0) == CURLUE_OK)
                        shown = strdup(out);
                curl_free(out);
        }
        curl_url_cleanup(u);
        if (!shown)
                return strdup("(the server's URL)");
        char *m = mask_text(mask, shown, strlen(shown), 0, 0);
        free(shown);
        return m;
}

static char *url_part(CURLU *u, CURLUPart what, unsigned flags)
{
        char *v = NULL;
        return curl_url_get(u, what, &v, flags) == CURLUE_OK ? v : NULL;
}

/* A redirect is followed only to the same host and port, over http(s),
 * never from https down to http: the configured headers are secrets, and
 * libcurl would withhold only Authorization and Cookie from another host. */
static bool redirect_ok(const char *from, const char *to)
{
        CURLU *a = curl_url(), *b = curl_url();
        bool ok = false;
        if (a && b && curl_url_set(a, CURLUPART_URL, from, 0) == CURLUE_OK &&
            curl_url_set(b, CURLUPART_URL, to, 0) == CURLUE_OK) {
                char *sa = url_part(a, CURLUPART_SCHEME, 0), *sb = url_part(b, CURLUPART_SCHEME, 0);
                char *ha = url_part(a, CURLUPART_HOST, 0), *hb = url_part(b, CURLUPART_HOST, 0);
                char *pa = url_part(a, CURLUPART_PORT, CURLU_DEFAULT_PORT);
                char *pb = url_part(b, CURLUPART_PORT, CURLU_DEFAULT_PORT);
                bool scheme_ok = sa && sb &&
                                 (strcasecmp(sb, "https") == 0 || strcasecmp(sa, "http") == 0) &&
                                 (strcasecmp(sb, "http") == 0 || strcasecmp(sb, "https") == 0);
                bool same_host = ha && hb && strcasecmp(ha, hb) == 0;
                /* An upgrade to https changes the default port with it. */
                bool same_port =
                    pa && pb &&
                    (strcmp(pa, pb) == 0 ||
                     (strcasecmp(sa, sb) != 0 && strcmp(pa, "80") == 0 && strcmp(pb, "443") == 0));
                ok = scheme_ok && same_host && same_port;
                curl_free(sa);
                curl_free(sb);
                curl_free(ha);
                curl_free(hb);
                curl_free(pa);
                curl_free(pb);
        }
        curl_url_cleanup(a);
        curl_url_cleanup(b);
        return ok;
}

static bool token_ok(const char *s, size_t max)
{
        size_t n = strlen(s);
        if (n == 0 || n > max)
                return false;
        for (; *s; s++)
                if (*s < 0x21 || *s > 0x7e)
                        return false;
        return true;
}

static void dispatch(void *userdata);

static void kick(struct http_conn *c)
{
        loop_defer(curl_loop_loop(c->cl), &c->kick, dispatch, c);
}

static void enqueue(struct http_conn *c, struct event *ev)
{
        list_append(&c->queue, &ev->node);
        c->queued += ev->len;
        kick(c);
}

static int queue_message(void *userdata, const char *msg, size_t len)
{
        struct post *po = userdata;
        struct event *ev = malloc(sizeof(*ev) + len);
        if (!ev)
                return -ENOMEM;
        *ev = (struct event){.len = len};
        memcpy(ev->data, msg, len);
        enqueue(po->c, ev);
        return 0;
}

static void post_free(struct post *po)
{
        struct http_conn *c = po->c;
        if (po->easy) {
                curl_loop_remove(c->cl, po->easy);
                curl_easy_cleanup(po->easy);
        }
        list_del(&po->node);
        if (c->listen == po)
                c->listen = NULL;
        curl_slist_free_all(po->headers);
        http_body_free(&po->parser);
        buf_free(&po->error_body);
        free(po->url);
        free(po->body);
        free(po);
}

static void queue_clear(struct http_conn *c)
{
        while (!list_empty(&c->queue)) {
                struct event *ev = list_first(&c->queue, struct event, node);
                list_del(&ev->node);
                free(ev);
        }
        c->queued = 0;
}

static void conn_destroy(struct http_conn *c)
{
        while (!list_empty(&c->posts))
                post_free(list_first(&c->posts, struct post, node));
        if (c->del) {
                curl_loop_remove(c->cl, c->del);
                curl_easy_cleanup(c->del);
        }
        curl_slist_free_all(c->del_headers);
        queue_clear(c);
        defer_cancel(&c->kick);
        timer_remove(c->relisten);
        for (char **h = c->headers; h && *h; h++)
                free(*h);
        free(c->headers);
        free(c->url);
        free(c->display);
        free(c->session);
        free(c->protocol);
        free(c->unix_socket);
        free(c);
}

void http_conn_free(struct http_conn *c)
{
        if (c)
                conn_destroy(c);
}

/* Hand on what the transfers produced, in order, outside libcurl: one
 * event per deferred call, each as the last use of the connection (the
 * callback may free it). */
static void dispatch(void *userdata)
{
        struct http_conn *c = userdata;
        if (list_empty(&c->queue))
                return;
        struct event *ev = list_first(&c->queue, struct event, node);
        list_del(&ev->node);
        c->queued -= ev->len;
        if (!list_empty(&c->queue))
                kick(c);
        /* Transfers held back while the queue was full may go on. Resuming
         * may feed the queue again at once. */
        struct post *po;
        list_for_each(po, &c->posts, node)
        {
                if (c->queued >= c->max)
                        break;
                if (po->paused) {
                        po->paused = false;
                        curl_easy_pause(po->easy, CURLPAUSE_CONT);
                }
        }
        const struct http_conn_ops *ops = c->ops;
        void *ud = c->userdata;
        if (ev->done)
                ops->post_done(ud, ev->id, ev->failed ? &ev->e : NULL, ev->lost);
        else
                ops->message(ud, ev->data, ev->len);
        free(ev);
}

/* Header lines of every answer (a redirect's and a 1xx's too: each status
 * line starts over). */
static size_t on_header(char *p, size_t size, size_t n, void *userdata)
{
        struct post *po = userdata;
        size_t len = size * n;
        if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
                po->content_type[0] = '\0';
                po->session[0] = '\0';
                po->session_bad = false;
                return len;
        }
        const char *colon = memchr(p, ':', len);
        if (!colon)
                return len;
        size_t nlen = (size_t)(colon - p);
        const char *v = colon + 1, *end = p + len;
        while (v < end && (*v == ' ' || *v == '\t'))
                v++;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
                end--;
        size_t vlen = (size_t)(end - v);
        if (nlen == 12 && strncasecmp(p, "content-type", 12) == 0) {
                /* The media type only, lower case: "text/event-stream". */
                size_t k = 0;
                while (k < vlen && v[k] != ';' && v[k] != ' ')
                        k++;
                if (k > CONTENT_TYPE_MAX - 1) {
                        /* Never cut: a message quotes it. */
                        snprintf(po->content_type, sizeof(po->content_type), "(too long)");
                } else {
                        for (size_t i = 0; i < k; i++)
                                po->content_type[i] = (char)tolower((unsigned char)v[i]);
                        po->content_type[k] = '\0';
                }
        } else if (nlen == 14 && strncasecmp(p, "mcp-session-id", 14) == 0) {
                if (vlen > SESSION_ID_MAX) {
                        po->session_bad = true;
                } else {
                        memcpy(po->session, v, vlen);
                        po->session[vlen] = '\0';
                        /* Visible ASCII only, as MCP requires: it goes back
                         * into our own headers. */
                        po->session_bad = !token_ok(po->session, SESSION_ID_MAX);
                }
        }
        return len;
}

/* The session id comes with the answer to initialize, and is taken before
 * any message of that answer is handed on: the next POST must carry it. */
static void take_session(struct post *po)
{
        struct http_conn *c = po->c;
        if (po->initialize && po->session[0] && !po->session_bad && !c->session)
                c->session = strdup(po->session);
}

static size_t on_body(char *p, size_t size, size_t n, void *userdata)
{
        struct post *po = userdata;
        struct http_conn *c = po->c;
        size_t len = size * n;
        if (po->mode == BODY_UNDECIDED) {
                long status = 0;
                curl_easy_getinfo(po->easy, CURLINFO_RESPONSE_CODE, &status);
                if (status == 202 || status == 204) {
                        po->mode = BODY_IGNORED; /* taken; some say so in words */
                } else if (status >= 200 && status < 300) {
                        take_session(po);
                        bool sse = strcmp(po->content_type, "text/event-stream") == 0;
                        bool json =
                            !po->get && (strcmp(po->content_type, "application/json") == 0 ||
                                         (strncmp(po->content_type, "application/", 12) == 0 &&
                                          strstr(po->content_type, "+json")));
                        if (sse || json) {
                                po->mode = BODY_MESSAGES;
                                http_body_init(&po->parser, sse ? HTTP_BODY_SSE : HTTP_BODY_JSON,
                                               c->max);
                        } else {
                                po->mode = BODY_ERROR; /* judged at the end */
                        }
                } else if (status >= 300 && status < 400) {
                        po->mode = BODY_IGNORED;
                } else {
                        po->mode = BODY_ERROR;
                }
        }
        if (po->mode == BODY_ERROR) {
                if (buf_append_some(&po->error_body, p, len) < len)
                        po->error_cut = true;
                return len;
        }
        if (po->mode == BODY_IGNORED)
                return len;
        /* Bounded: while a message's worth waits to be handed on, the
         * transfer is held (libcurl keeps these bytes and offers them
         * again). */
        if (c->queued >= c->max) {
                po->paused = true;
                return CURL_WRITEFUNC_PAUSE;
        }
        int r = http_body_feed(&po->parser, p, len, queue_message, po);
        if (r < 0) {
                po->fail = r;
                return 0; /* ends the transfer with CURLE_WRITE_ERROR */
        }
        return len;
}

static void post_done(CURL *easy, CURLcode cc, void *userdata);

static struct curl_slist *add_header(struct curl_slist *list, const char *h, bool *ok)
{
        struct curl_slist *n = curl_slist_append(list, h);
        if (!n) {
                *ok = false;
                return list;
        }
        return n;
}

/* `accept`: the Accept header's value, or NULL for none; `json_body`: the
 * request has one. */
static struct curl_slist *request_headers(struct http_conn *c, const char *accept, bool json_body,
                                          bool *ret_session)
{
        struct curl_slist *l = NULL;
        bool ok = true;
        char line[SESSION_ID_MAX + 64];
        if (json_body)
                l = add_header(l, "Content-Type: application/json", &ok);
        if (accept) {
                snprintf(line, sizeof(line), "Accept: %s", accept);
                l = add_header(l, line, &ok);
        }
        /* No "100 Continue" round trip before large bodies. */
        l = add_header(l, "Expect:", &ok);
        for (char **h = c->headers; h && *h; h++)
                l = add_header(l, *h, &ok);
        if (c->protocol) {
                snprintf(line, sizeof(line), "MCP-Protocol-Version: %s", c->protocol);
                l = add_header(l, line, &ok);
        }
        if (c->session) {
                snprintf(line, sizeof(line), "Mcp-Session-Id: %s", c->session);
                l = add_header(l, line, &ok);
        }
        if (!ok) {
                curl_slist_free_all(l);
                return NULL;
        }
        if (ret_session)
                *ret_session = c->session != NULL;
        return l;
}

static void common_options(const struct http_conn *c, CURL *easy)
{
        curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
        if (c->unix_socket)
                curl_easy_setopt(easy, CURLOPT_UNIX_SOCKET_PATH, c->unix_socket);
        curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
        curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
        /* Redirects are judged by us (redirect_ok), never followed by libcurl. */
        curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
        curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
#else
        curl_easy_setopt(easy, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
}

/* (Re)start a POST's transfer: a new easy handle each time. */
static int post_start(struct post *po)
{
        struct http_conn *c = po->c;
        if (po->easy) {
                curl_easy_cleanup(po->easy);
                po->easy = NULL;
        }
        curl_slist_free_all(po->headers);
        po->headers = request_headers(
            c, po->get ? "text/event-stream" : "application/json, text/event-stream", !po->get,
            &po->had_session);
        if (!po->headers || !(po->easy = curl_easy_init()))
                return -ENOMEM;
        po->content_type[0] = '\0';
        po->session[0] = '\0';
        po->session_bad = false;
        po->paused = false;
        po->fail = 0;
        if (po->mode == BODY_MESSAGES)
                http_body_free(&po->parser);
        po->mode = BODY_UNDECIDED;
        po->started_ms = now_ms();
        buf_free(&po->error_body);
        buf_init(&po->error_body, ERROR_BODY_MAX);
        po->error_cut = false;
        CURL *easy = po->easy;
        common_options(c, easy);
        curl_easy_setopt(easy, CURLOPT_URL, po->url ? po->url : c->url);
        if (po->get) {
                curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
        } else {
                curl_easy_setopt(easy, CURLOPT_POST, 1L);
                curl_easy_setopt(easy, CURLOPT_POSTFIELDS, po->body);
                curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)po->len);
        }
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, po->headers);
        curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(easy, CURLOPT_HEADERDATA, po);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, po);
        if (!po->id && !po->get)
                curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)OTHER_POST_MS);
        return curl_loop_add(c->cl, easy, post_done, po) < 0 ? -EIO : 0;
}

/* What an error answer says, for a message: the JSON-RPC error's message,
 * or the start of the text; NULL for neither (or out of memory). The body
 * may echo the request, its headers too, and the code in a sandbox chooses
 * the length of what comes before them: it is masked whole, then cut. */
static char *error_detail(struct post *po)
{
        struct mask *mask = po->c->mask;
        const char *body = po->error_body.data;
        size_t len = po->error_body.len;
        if (len == 0)
                return NULL;
        json_t *j = po->error_cut ? NULL : json_loadb(body, len, 0, NULL);
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        if (!m)
                m = json_string_value(json_object_get(j, "message"));
        if (!m)
                m = json_string_value(json_object_get(j, "error"));
        char *shown = NULL;
        if (m)
                shown = mask_text(mask, m, strlen(m), ERROR_MESSAGE_MAX, 0);
        else if (strncmp(po->content_type, "text/", 5) == 0 ||
                 strcmp(po->content_type, "application/json") == 0)
                shown =
                    mask_text(mask, body, len, ERROR_TEXT_MAX, po->error_cut ? MASK_CUT_BEFORE : 0);
        json_decref(j);
        for (char *p = shown; p && *p; p++)
                if (*p == '\n' || *p == '\r' || *p == '\t')
                        *p = ' ';
        return utf8_scrub(shown);
}

/* MCP says a server answers 404 to a session it no longer has, but some
 * (the SDK's own examples among them) answer 400 saying so: both mean
 * "initialize again". */
static bool session_refused(struct post *po)
{
        return po->error_body.len > 0 && strcasestr(buf_str(&po->error_body), "session");
}

/* The GET stream ended: open it again later, unless the server offers none
 * (405) or the session is gone (which the caller hears as a lost POST). */
static void listen_done(struct post *po, CURLcode cc, long status)
{
        struct http_conn *c = po->c;
        bool lived = now_ms() - po->started_ms > 10000;
        bool lost = cc == CURLE_OK && po->had_session &&
                    (status == 404 || (status == 400 && session_refused(po)));
        struct event *ev = lost ? calloc(1, sizeof(*ev)) : NULL;
        if (ev) {
                ev->done = ev->failed = ev->lost = true;
                err_set(&ev->e, ERR_PROTOCOL, ENOENT,
                        "%s no longer knows the session (HTTP %ld): it expired or the server "
                        "restarted",
                        c->display, status);
        }
        post_free(po);
        if (ev) {
                enqueue(c, ev);
                return;
        }
        if (lost || (cc == CURLE_OK && status == 405))
                return;
        c->listen_delay = lived || !c->listen_delay ? LISTEN_RETRY_MS : 2 * c->listen_delay;
        if (c->listen_delay > LISTEN_RETRY_MAX)
                c->listen_delay = LISTEN_RETRY_MAX;
        timer_arm(c->relisten, c->listen_delay);
}

static void post_done(CURL *easy, CURLcode cc, void *userdata)
{
        struct post *po = userdata;
        struct http_conn *c = po->c;
        long status = 0;
        (void)easy;
        curl_easy_getinfo(po->easy, CURLINFO_RESPONSE_CODE, &status);
        if (po->get) {
                listen_done(po, cc, status);
                return;
        }
        struct event *ev = calloc(1, sizeof(*ev));
        if (!ev) {
                post_free(po);
                return;
        }
        ev->done = true;
        ev->id = po->id;
        struct err *e = &ev->e;
        const char *url = c->display;
        if (po->fail == -EMSGSIZE) {
                err_set(e, ERR_PROTOCOL, EMSGSIZE, "%s answered with a message over %zu bytes", url,
                        c->max);
        } else if (po->fail) {
                err_set(e, ERR_INTERNAL, -po->fail, "reading the answer from %s failed: %s", url,
                        strerror(-po->fail));
        } else if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
                   cc == CURLE_COULDNT_RESOLVE_PROXY) {
                long os = 0;
                curl_easy_getinfo(po->easy, CURLINFO_OS_ERRNO, &os);
                err_set(e, ERR_PROTOCOL, ECONNREFUSED, "cannot connect to %s: %s%s%s", url,
                        curl_easy_strerror(cc), os ? ": " : "", os ? strerror((int)os) : "");
                ev->lost = true;
        } else if (cc == CURLE_OPERATION_TIMEDOUT) {
                err_set(e, ERR_PROTOCOL, ETIMEDOUT, "%s did not answer in time (%s)", url,
                        status ? "while sending its answer" : "no answer");
        } else if (cc != CURLE_OK) {
                err_set(e, ERR_PROTOCOL, EIO, "the request to %s failed: %s", url,
                        curl_easy_strerror(cc));
        } else if (status == 307 || status == 308) {
                char *to = NULL;
                curl_easy_getinfo(po->easy, CURLINFO_REDIRECT_URL, &to);
                const char *from = po->url ? po->url : c->url;
                if (to && ++po->redirects <= MAX_REDIRECTS && redirect_ok(from, to)) {
                        char *next = strdup(to);
                        if (next) {
                                free(po->url);
                                po->url = next;
                                if (status == 308 && po->redirects == 1) {
                                        /* Permanent: later POSTs go there
                                         * directly. */
                                        char *u = strdup(next), *d = display_url(next, c->mask);
                                        if (u && d) {
                                                free(c->url);
                                                free(c->display);
                                                c->url = u;
                                                c->display = d;
                                        } else {
                                                free(u);
                                                free(d);
                                        }
                                }
                                if (post_start(po) == 0) {
                                        free(ev);
                                        return;
                                }
                        }
                        err_set(e, ERR_INTERNAL, ENOMEM, "cannot follow the redirect from %s", url);
                } else {
                        _cleanup_free_ char *shown = to ? display_url(to, c->mask) : NULL;
                        err_set(e, ERR_PROTOCOL, EPROTO,
                                "%s redirects to %s; corral follows a redirect only to the same "
                                "host and port over http(s), at most %d times: put the final URL "
                                "in the configuration",
                                url, shown ? shown : "nowhere", MAX_REDIRECTS);
                }
        } else if (status >= 300 && status < 400) {
                err_set(e, ERR_PROTOCOL, EPROTO,
                        "%s answered HTTP %ld, a redirect that would turn the POST into a GET: "
                        "put the final URL in the configuration",
                        url, status);
        } else if (po->had_session && (status == 404 || (status == 400 && session_refused(po)))) {
                _cleanup_free_ char *detail = error_detail(po);
                err_set(e, ERR_PROTOCOL, ENOENT,
                        "%s no longer knows the session (HTTP %ld%s%s): it expired or the server "
                        "restarted",
                        url, status, detail ? ": " : "", detail ? detail : "");
                ev->lost = true;
        } else if (status >= 400 || status < 200) {
                _cleanup_free_ char *detail = error_detail(po);
                const char *hint = "";
                if (status == 401 || status == 403)
                        hint = " (check the credentials in the headers configured for it)";
                err_set(e, ERR_PROTOCOL, status == 408 || status == 504 ? ETIMEDOUT : EIO,
                        "%s answered HTTP %ld%s%s%s", url, status, detail ? ": " : "",
                        detail ? detail : "", hint);
        } else if (po->mode == BODY_MESSAGES) {
                /* Every message of the answer is in the queue already (the
                 * session id was taken before the first). */
                int r = http_body_end(&po->parser, queue_message, po);
                if (r == -EBADMSG)
                        err_set(e, ERR_PROTOCOL, EBADMSG,
                                "%s answered with a body that is not JSON", url);
                else if (r < 0)
                        err_set(e, ERR_INTERNAL, -r, "reading the answer from %s failed: %s", url,
                                strerror(-r));
        } else if (po->mode == BODY_ERROR && po->error_body.len > 0 && po->id) {
                const char *type = po->content_type[0] ? po->content_type : "(none)";
                _cleanup_free_ char *shown = mask_text(c->mask, type, strlen(type), 0, 0);
                err_set(e, ERR_PROTOCOL, EPROTO,
                        "%s answered HTTP %ld with a body of type \"%s\", neither JSON nor an "
                        "event stream",
                        url, status, shown ? shown : "?");
        }
        /* Else 202, 204, an empty 200, or any 2xx to a message that wants no
         * answer: taken. */
        if (cc == CURLE_OK && status >= 200 && status < 300)
                take_session(po);
        ev->failed = e->kind != ERR_NONE;
        post_free(po);
        enqueue(c, ev);
}

static void relisten(struct timer *t, void *userdata)
{
        (void)t;
        http_conn_listen(userdata);
}

int http_conn_new(struct curl_loop *cl, const char *url, char *const *headers, struct mask *mask,
                  size_t max_message, const struct http_conn_ops *ops, void *userdata,
                  struct http_conn **ret, struct err *e)
{
        CURLU *u = curl_url();
        char *scheme = NULL;
        bool ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
                  (scheme = url_part(u, CURLUPART_SCHEME, 0)) &&
                  (strcasecmp(scheme, "http") == 0 || strcasecmp(scheme, "https") == 0);
        curl_free(scheme);
        curl_url_cleanup(u);
        if (!ok) {
                _cleanup_free_ char *shown = display_url(url, mask);
                return err_set(e, ERR_CONFIG, EINVAL, "%s is not an http:// or https:// URL",
                               shown ? shown : "the URL");
        }
        struct http_conn *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->cl = cl;
        list_init(&c->posts);
        list_init(&c->queue);
        c->mask = mask;
        c->max = max_message;
        c->ops = ops;
        c->userdata = userdata;
        size_t n = 0;
        while (headers && headers[n])
                n++;
        c->headers = calloc(n + 1, sizeof(char *));
        bool nomem = !c->headers;
        for (size_t i = 0; !nomem && i < n; i++)
                nomem = !(c->headers[i] = strdup(headers[i]));
        c->url = strdup(url);
        c->display = display_url(url, mask);
        if (nomem || !c->url || !c->display ||
            timer_add(curl_loop_loop(cl), relisten, c, &c->relisten) < 0) {
                conn_destroy(c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

int http_conn_post(struct http_conn *c, const char *body, size_t len, json_int_t id,
                   bool initialize)
{
        if (c->closed)
                return -ESHUTDOWN;
        struct post *po = calloc(1, sizeof(*po));
        if (!po)
                return -ENOMEM;
        po->c = c;
        po->id = id;
        po->initialize = initialize;
        po->len = len;
        po->body = malloc(len ? len : 1);
        list_push(&c->posts, &po->node);
        if (!po->body) {
                post_free(po);
                return -ENOMEM;
        }
        memcpy(po->body, body, len);
        int r = post_start(po);
        if (r < 0)
                post_free(po);
        return r;
}

int http_conn_listen(struct http_conn *c)
{
        if (c->listen || c->closed)
                return 0;
        struct post *po = calloc(1, sizeof(*po));
        if (!po)
                return -ENOMEM;
        po->c = c;
        po->get = true;
        list_push(&c->posts, &po->node);
        int r = post_start(po);
        if (r < 0) {
                post_free(po);
                return r;
        }
        c->listen = po;
        return 0;
}

int http_conn_set_protocol_version(struct http_conn *c, const char *version)
{
        if (!version || !token_ok(version, 64))
                return -EINVAL;
        char *v = strdup(version);
        if (!v)
                return -ENOMEM;
        free(c->protocol);
        c->protocol = v;
        return 0;
}

void http_conn_forget(struct http_conn *c, json_int_t id)
{
        if (!c || !id)
                return;
        struct post *po;
        list_for_each(po, &c->posts, node)
        {
                if (po->id == id) {
                        post_free(po);
                        return;
                }
        }
}

static size_t discard(char *p, size_t size, size_t n, void *userdata)
{
        (void)p;
        (void)userdata;
        return size * n;
}

static void delete_done(CURL *easy, CURLcode cc, void *userdata)
{
        struct http_conn *c = userdata;
        (void)cc;
        curl_easy_cleanup(easy);
        c->del = NULL;
        /* 2xx, 405 (the server does not let clients end sessions) or no
         * answer at all: nothing more to do either way. */
        void (*done)(void *) = c->del_done;
        c->del_done = NULL;
        if (done)
                done(c->del_ud);
}

bool http_conn_shutdown(struct http_conn *c, void (*done)(void *), void *userdata)
{
        c->closed = true;
        timer_arm(c->relisten, 0);
        while (!list_empty(&c->posts))
                post_free(list_first(&c->posts, struct post, node));
        queue_clear(c);
        if (!c->session || c->del)
                return false;
        c->del_headers = request_headers(c, NULL, false, NULL);
        c->del = c->del_headers ? curl_easy_init() : NULL;
        if (!c->del)
                return false;
        common_options(c, c->del);
        curl_easy_setopt(c->del, CURLOPT_URL, c->url);
        curl_easy_setopt(c->del, CURLOPT_CUSTOMREQUEST, "DELETE");
        curl_easy_setopt(c->del, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(c->del, CURLOPT_HTTPHEADER, c->del_headers);
        curl_easy_setopt(c->del, CURLOPT_CONNECTTIMEOUT_MS, (long)DELETE_TIMEOUT_MS);
        curl_easy_setopt(c->del, CURLOPT_TIMEOUT_MS, (long)DELETE_TIMEOUT_MS);
        c->del_done = done;
        c->del_ud = userdata;
        if (curl_loop_add(c->cl, c->del, delete_done, c) < 0) {
                curl_easy_cleanup(c->del);
                c->del = NULL;
                return false;
        }
        return true;
}

int http_conn_set_unix_socket(struct http_conn *c, const char *path)
{
        free(c->unix_socket);
        c->unix_socket = strdup(path);
        return c->unix_socket ? 0 : -ENOMEM;
}

const char *http_conn_url(const struct http_conn *c)
{
        return c->display;
}
