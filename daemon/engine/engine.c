#include "engine/engine.h"

#include "core/list.h"

#include "core/buf.h"
#include "core/curl_loop.h"
#include "core/log.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

struct engine {
        struct loop *loop;
        struct curl_loop *curl;
        struct engine_endpoint ep;
        char *base_url;
        size_t max_body;
        enum engine_kind kind;
        struct list reqs; /* in flight, for engine_free */
};

struct engine_req {
        struct engine *eng;
        struct list node; /* eng->reqs */
        CURL *easy;
        struct curl_slist *headers;
        char *body;
        int upload_fd;
        struct buf resp;
        bool overflow;
        engine_done_cb cb;
        bool probe;                  /* GET /_ping: note the engine's kind */
        enum engine_kind probe_kind; /* what its headers said so far */
        void *userdata;
};

int engine_endpoint_parse(const char *url, struct engine_endpoint *ret, struct err *e)
{
        struct engine_endpoint ep = {0};
        if (strncmp(url, "unix://", 7) == 0 || url[0] == '/') {
                const char *path = url[0] == '/' ? url : url + 7;
                if (path[0] != '/' || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "engine socket must be an absolute path shorter than "
                                       "108 bytes: \"%s\"",
                                       url);
                ep.unix_path = strdup(path);
                ep.display = strdup(path);
        } else if (strncmp(url, "tcp://", 6) == 0) {
                const char *hp = url + 6;
                const char *colon = strrchr(hp, ':');
                char *end;
                long port =
                    colon && colon[1] >= '0' && colon[1] <= '9' ? strtol(colon + 1, &end, 10) : 0;
                if (!colon || colon == hp || port <= 0 || *end || port > 65535)
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "engine URL must be tcp://host:port, not \"%s\"", url);
                /* An IPv6 literal comes in brackets: [::1]:2375. */
                if (hp[0] == '[' && colon[-1] == ']')
                        ep.host = strndup(hp + 1, (size_t)(colon - hp - 2));
                else
                        ep.host = strndup(hp, (size_t)(colon - hp));
                ep.port = (int)port;
                ep.display = strdup(hp);
        } else {
                return err_set(e, ERR_CONFIG, EINVAL,
                               "unsupported engine URL \"%s\": use unix:///path or tcp://host:port",
                               url);
        }
        if (!ep.display || (!ep.unix_path && !ep.host)) {
                engine_endpoint_done(&ep);
                return -ENOMEM;
        }
        *ret = ep;
        return 0;
}

void engine_endpoint_done(struct engine_endpoint *ep)
{
        free(ep->unix_path);
        free(ep->host);
        free(ep->display);
        *ep = (struct engine_endpoint){0};
}

void engine_unreachable(struct err *e, const struct engine_endpoint *ep, int os_errno)
{
        const char *start = "start one: for rootless Podman `systemctl --user start "
                            "podman.socket`, for rootful Podman `sudo systemctl start "
                            "podman.socket`, for Docker `sudo systemctl start docker`; or point "
                            "CORRAL_ENGINE at a running engine (unix:///path/to.sock)";
        if (ep->host) {
                err_set(e, ERR_ENGINE, os_errno ? os_errno : ECONNREFUSED,
                        "the container engine at tcp://%s could not be reached (%s): check that "
                        "the engine listens there, or %s",
                        ep->display, strerror(os_errno ? os_errno : ECONNREFUSED), start);
                return;
        }
        switch (os_errno) {
        case ENOENT:
                err_set(e, ERR_ENGINE, ENOENT,
                        "no container engine socket at %s: the engine is not running there; %s",
                        ep->display, start);
                break;
        case EACCES:
        case EPERM:
                err_set(e, ERR_ENGINE, EACCES,
                        "permission denied opening the container engine socket %s: use rootless "
                        "Podman (`systemctl --user start podman.socket`) or add your user to "
                        "the group that owns the socket (e.g. `sudo usermod -aG docker $USER`, "
                        "then log in again)",
                        ep->display);
                break;
        default:
                err_set(e, ERR_ENGINE, os_errno ? os_errno : ECONNREFUSED,
                        "the container engine at %s refused the connection (%s): it is not "
                        "running; %s",
                        ep->display, strerror(os_errno ? os_errno : ECONNREFUSED), start);
        }
}

int engine_discover(char **ret_url, struct err *e)
{
        char tried[768] = "";
        char xdg_path[512] = "";
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        if (xdg && *xdg == '/')
                snprintf(xdg_path, sizeof(xdg_path), "unix://%s/podman/podman.sock", xdg);
        /* A variable the user set names the engine: it alone is tried, so
         * that a dead DOCKER_HOST is reported, not quietly replaced by
         * whatever other engine happens to answer. */
        static const char *const vars[] = {"CONTAINER_HOST", "DOCKER_HOST"};
        for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
                const char *c = getenv(vars[i]);
                if (!c || !*c)
                        continue;
                if (strncmp(c, "tcp://", 6) == 0 ||
                    (strncmp(c, "unix://", 7) == 0 && unix_socket_answers(c + 7))) {
                        *ret_url = strdup(c);
                        return *ret_url ? 0 : -ENOMEM;
                }
                if (strncmp(c, "unix://", 7) != 0)
                        return err_set(e, ERR_ENGINE, EPROTONOSUPPORT,
                                       "%s is %.300s: corral speaks to engines at unix:// and "
                                       "tcp:// addresses only; set CORRAL_ENGINE to one, or "
                                       "unset %s",
                                       vars[i], c, vars[i]);
                return err_set(e, ERR_ENGINE, ECONNREFUSED,
                               "%s names the engine at %.300s, which does not answer: start "
                               "it, or unset %s to let corral find another",
                               vars[i], c + 7, vars[i]);
        }
        const char *cands[] = {xdg_path, "unix:///run/podman/podman.sock",
                               "unix:///var/run/docker.sock"};
        for (size_t i = 0; i < ARRAY_SIZE(cands); i++) {
                const char *c = cands[i];
                if (!*c)
                        continue;
                if (unix_socket_answers(c + 7)) {
                        *ret_url = strdup(c);
                        return *ret_url ? 0 : -ENOMEM;
                }
                size_t n = strlen(tried);
                snprintf(tried + n, sizeof(tried) - n, "%s%s", n ? ", " : "", c + 7);
        }
        return err_set(e, ERR_ENGINE, ENOENT,
                       "no container engine answered (tried %s): start one: for rootless Podman "
                       "`systemctl --user start podman.socket`, for rootful Podman `sudo "
                       "systemctl start podman.socket`, for Docker `sudo systemctl start "
                       "docker`; or set CORRAL_ENGINE=unix:///path/to.sock",
                       *tried ? tried : "nothing");
}

int engine_new(struct loop *l, const char *url, size_t max_body, struct engine **ret, struct err *e)
{
        struct engine *eng = calloc(1, sizeof(*eng));
        if (!eng)
                return -ENOMEM;
        eng->loop = l;
        eng->max_body = max_body;
        list_init(&eng->reqs);
        int r = engine_endpoint_parse(url, &eng->ep, e);
        if (r < 0) {
                free(eng);
                return r;
        }
        if (eng->ep.host)
                r = asprintf(&eng->base_url, "http://%s:%d" ENGINE_API_PREFIX, eng->ep.host,
                             eng->ep.port);
        else
                r = asprintf(&eng->base_url, "http://localhost" ENGINE_API_PREFIX);
        if (r < 0) {
                engine_free(eng);
                return -ENOMEM;
        }
        r = curl_loop_new(l, &eng->curl);
        if (r < 0) {
                engine_free(eng);
                if (r == -EIO)
                        return err_set(e, ERR_INTERNAL, EIO, "libcurl failed to initialise");
                return r;
        }
        *ret = eng;
        return 0;
}

static void req_free(struct engine_req *r)
{
        if (!r)
                return;
        if (r->easy) {
                curl_loop_remove(r->eng->curl, r->easy);
                curl_easy_cleanup(r->easy);
        }
        list_del(&r->node);
        curl_slist_free_all(r->headers);
        free(r->body);
        buf_free(&r->resp);
        free(r);
}

void engine_free(struct engine *eng)
{
        if (!eng)
                return;
        /* Requests still pending are abandoned, callbacks unsaid. */
        while (!list_empty(&eng->reqs))
                req_free(list_first(&eng->reqs, struct engine_req, node));
        curl_loop_free(eng->curl);
        engine_endpoint_done(&eng->ep);
        free(eng->base_url);
        free(eng);
}

const struct engine_endpoint *engine_endpoint(const struct engine *eng)
{
        return &eng->ep;
}

struct loop *engine_loop(const struct engine *eng)
{
        return eng->loop;
}

static size_t write_cb(char *p, size_t size, size_t n, void *userdata)
{
        struct engine_req *r = userdata;
        size_t len = size * n;
        /* Bounded: an engine answer larger than max_body is cut and reported. */
        if (buf_append(&r->resp, p, len) < 0)
                r->overflow = true;
        return len;
}

static size_t read_fd_cb(char *p, size_t size, size_t n, void *userdata)
{
        struct engine_req *r = userdata;
        ssize_t k = read(r->upload_fd, p, size * n);
        return k < 0 ? CURL_READFUNC_ABORT : (size_t)k;
}

const char *engine_error_message(json_t *body)
{
        const char *m = json_string_value(json_object_get(body, "message"));
        if (!m)
                m = json_string_value(json_object_get(body, "cause"));
        return m ? m : "(no message)";
}

enum engine_kind engine_kind_of_header(const char *line, size_t len)
{
        static const char libpod[] = "libpod-api-version:", api[] = "api-version:";
        if (len >= sizeof(libpod) - 1 && strncasecmp(line, libpod, sizeof(libpod) - 1) == 0)
                return ENGINE_PODMAN;
        if (len >= sizeof(api) - 1 && strncasecmp(line, api, sizeof(api) - 1) == 0)
                return ENGINE_DOCKER;
        return ENGINE_UNKNOWN;
}

static void finish(CURL *easy, CURLcode cc, void *userdata)
{
        struct engine_req *r = userdata;
        (void)easy;
        long status = 0;
        struct err e = {0};
        json_auto_t *body = NULL;
        if (cc == CURLE_OK) {
                curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
                if (r->overflow) {
                        err_set(&e, ERR_PROTOCOL, EMSGSIZE,
                                "the engine's answer exceeded %zu bytes", r->resp.max);
                        status = 0;
                }
        } else if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST) {
                long os = 0;
                curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &os);
                engine_unreachable(&e, &r->eng->ep, (int)os);
        } else {
                err_set(&e, ERR_ENGINE, EIO, "talking to the container engine at %s failed: %s",
                        r->eng->ep.display, curl_easy_strerror(cc));
        }
        if (status && r->resp.len > 0) {
                body = json_loadb(r->resp.data, r->resp.len, 0, NULL);
                /* Some endpoints answer with a stream of JSON objects (image
                 * import): keep the last one. */
                if (!body) {
                        const char *last = r->resp.data;
                        for (const char *p = r->resp.data; *p; p++)
                                if (*p == '\n' && p[1] && p[1] != '\n')
                                        last = p + 1;
                        body = json_loads(last, JSON_DISABLE_EOF_CHECK, NULL);
                }
        }
        /* Anything that answers the ping without Podman's header is taken
         * for Docker: the conservative choice (a tmpfs volume works with
         * both). */
        if (r->probe && status == 200)
                r->eng->kind = r->probe_kind == ENGINE_PODMAN ? ENGINE_PODMAN : ENGINE_DOCKER;
        engine_done_cb cb = r->cb;
        void *ud = r->userdata;
        req_free(r);
        cb(ud, status, body, status ? NULL : &e);
}

static int req_start(struct engine *eng, const char *method, const char *path, engine_done_cb cb,
                     void *userdata, struct engine_req **ret)
{
        struct engine_req *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->eng = eng;
        r->cb = cb;
        r->userdata = userdata;
        r->upload_fd = -1;
        buf_init(&r->resp, eng->max_body);
        _cleanup_free_ char *url = NULL;
        if (asprintf(&url, "%s%s", eng->base_url, path) < 0 || !(r->easy = curl_easy_init())) {
                free(r);
                return -ENOMEM;
        }
        log_debug("engine: %s %s", method, path);
        list_push(&eng->reqs, &r->node);
        curl_easy_setopt(r->easy, CURLOPT_URL, url);
        if (eng->ep.unix_path)
                curl_easy_setopt(r->easy, CURLOPT_UNIX_SOCKET_PATH, eng->ep.unix_path);
        curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, write_cb);
        curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(r->easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
        r->headers = curl_slist_append(NULL, "Expect:");
        *ret = r;
        return 0;
}

static int req_submit(struct engine_req *r, struct engine_req **ret)
{
        curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
        int k = curl_loop_add(r->eng->curl, r->easy, finish, r);
        if (k < 0) {
                req_free(r);
                return k;
        }
        if (ret)
                *ret = r;
        return 0;
}

int engine_request(struct engine *eng, const char *method, const char *path, json_t *body,
                   engine_done_cb cb, void *userdata, struct engine_req **ret)
{
        struct engine_req *r;
        int k = req_start(eng, method, path, cb, userdata, &r);
        if (k < 0) {
                json_decref(body);
                return k;
        }
        if (body) {
                r->body = json_dumps(body, JSON_COMPACT);
                json_decref(body);
                if (!r->body) {
                        req_free(r);
                        return -ENOMEM;
                }
                r->headers = curl_slist_append(r->headers, "Content-Type: application/json");
                curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->body);
        } else if (strcmp(method, "POST") == 0) {
                curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, "");
        }
        /* No API call we make with a JSON body takes long; a hung engine
         * must not hang a sandbox forever. */
        curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, 120000L);
        return req_submit(r, ret);
}

int engine_request_file(struct engine *eng, const char *method, const char *path,
                        const char *content_type, int fd, engine_done_cb cb, void *userdata,
                        struct engine_req **ret)
{
        struct engine_req *r;
        int k = req_start(eng, method, path, cb, userdata, &r);
        if (k < 0)
                return k;
        char hdr[256];
        snprintf(hdr, sizeof(hdr), "Content-Type: %s", content_type);
        r->headers = curl_slist_append(r->headers, hdr);
        r->upload_fd = fd;
        struct stat st;
        curl_easy_setopt(r->easy, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(r->easy, CURLOPT_READFUNCTION, read_fd_cb);
        curl_easy_setopt(r->easy, CURLOPT_READDATA, r);
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
                curl_easy_setopt(r->easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t)st.st_size);
        return req_submit(r, ret);
}

static size_t probe_header_cb(char *p, size_t size, size_t n, void *userdata)
{
        struct engine_req *r = userdata;
        size_t len = size * n;
        enum engine_kind k = engine_kind_of_header(p, len);
        if (k != ENGINE_UNKNOWN && r->probe_kind != ENGINE_PODMAN)
                r->probe_kind = k;
        return len;
}

/* The ping, not /version: both engines name themselves in its headers,
 * and Podman takes most of a second to compose /version (it asks its
 * runtime and conmon for their versions each time), which every new
 * corral's first sandbox would wait for. */
int engine_probe(struct engine *eng, engine_done_cb cb, void *userdata, struct engine_req **ret)
{
        struct engine_req *r;
        int k = req_start(eng, "GET", "/_ping", cb, userdata, &r);
        if (k < 0)
                return k;
        r->probe = true;
        curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, probe_header_cb);
        curl_easy_setopt(r->easy, CURLOPT_HEADERDATA, r);
        curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, 120000L);
        return req_submit(r, ret);
}

enum engine_kind engine_kind(const struct engine *eng)
{
        return eng->kind;
}

void engine_request_cancel(struct engine_req *r)
{
        req_free(r);
}

char *engine_escape(const char *s)
{
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(s);
        char *out = malloc(3 * n + 1), *o = out;
        if (!out)
                return NULL;
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~/", *p)) {
                        *o++ = (char)*p;
                } else {
                        *o++ = '%';
                        *o++ = hex[*p >> 4];
                        *o++ = hex[*p & 15];
                }
        }
        *o = '\0';
        return out;
}

struct call_state {
        bool done;
        long status;
        json_t *body;
        struct err e;
};

static void call_done(void *userdata, long status, json_t *body, const struct err *e)
{
        struct call_state *s = userdata;
        s->done = true;
        s->status = status;
        s->body = json_incref(body);
        if (e)
                s->e = *e;
}

long engine_call(struct engine *eng, const char *method, const char *path, json_t *body,
                 json_t **ret_body, struct err *e)
{
        struct call_state s = {0};
        int r = engine_request(eng, method, path, body, call_done, &s, NULL);
        if (r < 0)
                return err_set(e, ERR_INTERNAL, r, "cannot start an engine request");
        while (!s.done) {
                r = loop_iterate(eng->loop, -1);
                if (r < 0)
                        return err_set(e, ERR_INTERNAL, r, "event loop failed");
        }
        if (s.status == 0) {
                if (e)
                        *e = s.e;
                json_decref(s.body);
                return s.e.code ? s.e.code : -EIO;
        }
        if (ret_body)
                *ret_body = s.body;
        else
                json_decref(s.body);
        return s.status;
}
