#include "sandbox/session.h"

#include "core/list.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>

#define TOMBSTONES 32 /* sessions that ended unasked, remembered to say so once */

struct session {
        struct session_mgr *mgr;
        struct list node; /* in mgr->all, until closed */
        char owner[SESSION_OWNER_MAX + 1];
        char name[SESSION_NAME_MAX + 1];
        char image[256]; /* what it opened with: its calls keep it */
        /* The MCP servers its code may call: those of its first call that
         * ran code, widened only by session_servers (see session_run). */
        json_t *grant;
        bool granted; /* a call with code fixed `grant` (write_file's opening runs none) */
        /* The hosts its code may reach (a `network` array, or NULL: none),
         * fixed with `grant` by the first call with code. */
        json_t *network;
        struct sandbox *sb;
        bool open;     /* its first run ended with the sandbox kept */
        bool busy;     /* a call runs in it */
        bool closed;   /* session_close while busy: freed when the call ends */
        bool expiring; /* past session_max_s while busy: closed when the call ends */
        sandbox_done_cb cb;
        void *userdata;
        long long t_open, t_last; /* ms */
        unsigned long long calls;
        long long memory_bytes;
};

/* A session that ended with no call to tell: the next call with its name
 * is told instead. */
struct tombstone {
        char owner[SESSION_OWNER_MAX + 1];
        char name[SESSION_NAME_MAX + 1];
        char why[400];
};

/* A client following the files of its sessions (resources). */
struct session_watch {
        struct session_mgr *mgr;
        struct list node; /* in mgr->watches */
        char owner[SESSION_OWNER_MAX + 1];
        session_watch_cb fn;
        void *userdata;
};

struct session_mgr {
        struct loop *loop;
        const struct config *cfg;
        struct sandbox_mgr *sm;
        struct list all;     /* struct session */
        struct list watches; /* struct session_watch */
        bool freeing;        /* session_mgr_free: no one is told any more */
        struct timer *tick;
        struct tombstone graves[TOMBSTONES];
        unsigned n_graves; /* written so far; the newest TOMBSTONES are kept */
};

static void tick(struct timer *t, void *userdata);

int session_mgr_new(struct loop *l, const struct config *cfg, struct sandbox_mgr *sm,
                    struct session_mgr **ret)
{
        struct session_mgr *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->loop = l;
        m->cfg = cfg;
        m->sm = sm;
        list_init(&m->all);
        list_init(&m->watches);
        int r = timer_add(l, tick, m, &m->tick);
        if (r < 0) {
                free(m);
                return r;
        }
        *ret = m;
        return 0;
}

long session_max(const struct session_mgr *m)
{
        /* One slot always stays for calls without a session. */
        long room = m->cfg->max_sandboxes - 1;
        return m->cfg->max_sessions < room ? m->cfg->max_sessions : room;
}

int session_name_check(const char *name, struct err *e)
{
        size_t n = strlen(name);
        bool ok = n >= 1 && n <= SESSION_NAME_MAX;
        for (const char *p = name; ok && *p; p++)
                ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' || *p == '.';
        if (ok)
                return 0;
        char shown[80];
        str_printable(name, shown, sizeof(shown));
        return err_set(
            e, ERR_INVALID, -EINVAL,
            "session name \"%s\" is not valid: use 1 to %d letters, digits, '_', '-' or '.'", shown,
            SESSION_NAME_MAX);
}

static const char *owner_of(const char *owner)
{
        return owner ? owner : "";
}

static struct session *find(struct session_mgr *m, const char *owner, const char *name)
{
        struct session *x;
        owner = owner_of(owner);
        list_for_each(x, &m->all, node)
        {
                if (strcmp(x->name, name) == 0 && strcmp(x->owner, owner) == 0)
                        return x;
        }
        return NULL;
}

static long count(const struct session_mgr *m)
{
        return (long)list_length(&m->all);
}

static void bury(struct session_mgr *m, const char *owner, const char *name, const char *why)
{
        struct tombstone *t = &m->graves[m->n_graves++ % TOMBSTONES];
        snprintf(t->owner, sizeof(t->owner), "%s", owner);
        snprintf(t->name, sizeof(t->name), "%s", name);
        snprintf(t->why, sizeof(t->why), "%s", why);
        utf8_scrub(t->why);
}

/* The newest tombstone of `name`, taken away when `take`. */
static bool exhume(struct session_mgr *m, const char *owner, const char *name, bool take, char *why,
                   size_t size)
{
        owner = owner_of(owner);
        unsigned n = m->n_graves < TOMBSTONES ? m->n_graves : TOMBSTONES;
        for (unsigned i = 0; i < n; i++) {
                struct tombstone *t = &m->graves[(m->n_graves - 1 - i) % TOMBSTONES];
                if (t->name[0] && strcmp(t->name, name) == 0 && strcmp(t->owner, owner) == 0) {
                        snprintf(why, size, "%s", t->why);
                        if (take)
                                t->name[0] = '\0';
                        return true;
                }
        }
        return false;
}

static void notify(struct session_mgr *m, const char *owner, const char *name,
                   enum session_change what)
{
        struct session_watch *w, *next;
        if (m->freeing)
                return;
        list_for_each_safe(w, next, &m->watches, node)
        {
                if (strcmp(w->owner, owner) == 0)
                        w->fn(w->userdata, name, what);
        }
}

static void session_free(struct session *x)
{
        list_del(&x->node);
        if (x->sb)
                sandbox_set_owner(x->sb, NULL, NULL);
        /* One that never opened had no files to show. */
        if (x->open)
                notify(x->mgr, x->owner, x->name, SESSION_ENDED);
        json_decref(x->grant);
        json_decref(x->network);
        free(x);
}

static void arm(struct session_mgr *m)
{
        timer_arm(m->tick, list_empty(&m->all) ? 0 : 1000);
}

/* Its sandbox ended between calls (no call to tell). */
static void gone(void *owner, const char *why)
{
        struct session *x = owner;
        char text[400];
        snprintf(text, sizeof(text), "its sandbox ended: %s", why);
        log_warn("session %s: %s", x->name, text);
        bury(x->mgr, x->owner, x->name, text);
        x->sb = NULL;
        session_free(x);
}

/* Close an idle session for a reason of corral's, remembered for its name. */
static void expire(struct session *x, const char *why)
{
        struct session_mgr *m = x->mgr;
        log_info("session %s: %s", x->name, why);
        bury(m, x->owner, x->name, why);
        struct sandbox *sb = x->sb;
        session_free(x);
        if (sb)
                sandbox_close(sb);
}

static void tick(struct timer *t, void *userdata)
{
        struct session_mgr *m = userdata;
        (void)t;
        long long now = now_ms();
        char why[200];
        struct session *x, *next;
        list_for_each_safe(x, next, &m->all, node)
        {
                if (!x->open || x->busy) {
                        if (x->busy && now - x->t_open >= (long long)(m->cfg->session_max_s * 1000))
                                x->expiring = true; /* closed once its call ends */
                        continue;
                }
                if (now - x->t_open >= (long long)(m->cfg->session_max_s * 1000)) {
                        snprintf(why, sizeof(why),
                                 "it was closed after its maximum lifetime of %g s "
                                 "(session_max_s)",
                                 m->cfg->session_max_s);
                        expire(x, why);
                } else if (now - x->t_last >= (long long)(m->cfg->session_idle_s * 1000)) {
                        snprintf(why, sizeof(why),
                                 "it was closed after %g s without calls (session_idle_s)",
                                 m->cfg->session_idle_s);
                        expire(x, why);
                }
        }
        arm(m);
}

static void session_done(void *userdata, const struct sandbox_result *res)
{
        struct session *x = userdata;
        struct session_mgr *m = x->mgr;
        sandbox_done_cb cb = x->cb;
        void *ud = x->userdata;
        x->cb = NULL;
        x->busy = false;
        x->t_last = now_ms();
        if (res->memory_bytes >= 0)
                x->memory_bytes = res->memory_bytes;
        if (!res->kept || x->closed) {
                /* Its sandbox is gone (this result says so), or it was closed. */
                if (!res->kept)
                        log_info("session %s ended with its call (%s)", x->name,
                                 sandbox_status_name(res->status));
                x->sb = NULL;
                session_free(x);
                cb(ud, res);
                return;
        }
        bool opened = !x->open;
        x->open = true;
        /* It opened (new to the list), its /workspace/out changed (the
         * runtime compared it before and after), or a call ended that may
         * have changed the rest of /workspace. The session may end below:
         * the watchers hear of the call first. */
        notify(m, x->owner, x->name,
               opened               ? SESSION_OPENED
               : res->files_changed ? SESSION_FILES
                                    : SESSION_RAN);
        if (x->expiring) {
                /* Past session_max_s: this call's result says the session
                 * ended (so no tombstone: it was told), and the sandbox goes
                 * once the answer is out; res stays valid until then. */
                log_info("session %s: closed after its maximum lifetime of %g s (session_max_s)",
                         x->name, m->cfg->session_max_s);
                struct sandbox_result ended = *res;
                ended.kept = false;
                struct sandbox *sb = x->sb;
                session_free(x);
                cb(ud, &ended);
                sandbox_close(sb);
                return;
        }
        cb(ud, res);
}

#define GRANT_MAX 64 /* servers one session may hold */

static bool has_name(json_t *names, json_t *name)
{
        size_t i;
        json_t *v;
        json_array_foreach(names, i, v) if (json_equal(v, name)) return true;
        return false;
}

/* The names of `names` that `grant` and `more` lack, comma-separated, in
 * `out` ("" when none). */
static void missing_names(json_t *names, json_t *grant, json_t *more, char *out, size_t size)
{
        size_t i, n = 0;
        json_t *v;
        out[0] = '\0';
        json_array_foreach(names, i, v)
        {
                if (has_name(grant, v) || (more && has_name(more, v)) || n >= size)
                        continue;
                int k = snprintf(out + n, size - n, "%s%s", n ? ", " : "", json_string_value(v));
                n = k < 0 ? size : n + (size_t)k;
        }
}

static void list_names(json_t *names, char *out, size_t size)
{
        json_t *none = json_array();
        missing_names(names, none, NULL, out, size);
        json_decref(none);
        if (!out[0])
                snprintf(out, size, "none");
}

/* A session is one principal: code its earlier calls left in its
 * interpreter can take over its later calls (hook the worker's loop, read
 * their code, answer them itself: runtime/README.md). So a server that a
 * later call names is a server that earlier code gets, and the session's
 * grant is fixed when it first runs code; only session_servers, said so
 * in as many words, adds to it. This runs in the daemon, before anything
 * reaches the sandbox: the runtime is the session's code's to change. */
/* A later call may repeat the session's `network` or leave it out; the
 * way out is the first call's for all of them. */
static int network_check(const struct session *x, const struct sandbox_request *req, struct err *e)
{
        if (!x->granted || !req->network || json_equal(req->network, x->network) ||
            (json_array_size(req->network) == 0 && json_array_size(x->network) == 0))
                return 0;
        char *held = json_array_size(x->network) ? json_dumps(x->network, JSON_COMPACT) : NULL;
        int r = err_set(e, ERR_REFUSED, -EPERM,
                        "session \"%s\" keeps the network its first call gave it (%.300s): call "
                        "without \"network\", or open another session for other hosts",
                        x->name, held ? held : "none");
        free(held);
        return r;
}

static int grant_check(const struct session *x, const struct sandbox_request *req, struct err *e)
{
        int nr = network_check(x, req, e);
        if (nr < 0)
                return nr;
        if (!x->granted || !req->servers)
                return 0;
        char extra[600], held[600];
        missing_names(req->servers, x->grant, req->session_servers, extra, sizeof(extra));
        if (extra[0]) {
                list_names(x->grant, held, sizeof(held));
                return err_set(e, ERR_REFUSED, -EACCES,
                               "session \"%s\" may call only the MCP servers it was given (%s), "
                               "and this call names %s",
                               x->name, held, extra);
        }
        size_t n = json_array_size(x->grant);
        size_t i;
        json_t *v;
        json_array_foreach(req->session_servers, i, v) n += !has_name(x->grant, v);
        if (n > GRANT_MAX)
                return err_set(e, ERR_INVALID, -EINVAL,
                               "session \"%s\" would hold %zu MCP servers, more than %d", x->name,
                               n, GRANT_MAX);
        return 0;
}

/* After the call started: its servers become the grant (the first call
 * with code), or session_servers widen it, logged. */
static void grant_take(struct session *x, const struct sandbox_request *req)
{
        if (!x->granted && !(req->code && req->code[0]))
                return; /* nothing ran that could outlive the call */
        if (!x->granted && json_array_size(req->network)) {
                x->network = json_copy(req->network);
                char *text = json_dumps(req->network, JSON_COMPACT);
                log_info("session %s: may reach %s through the proxy", x->name, text ? text : "?");
                free(text);
        }
        json_t *add = x->granted ? req->session_servers : req->servers;
        char names[600] = "";
        if (add)
                missing_names(add, x->grant, NULL, names, sizeof(names));
        x->granted = true;
        size_t i;
        json_t *v;
        json_array_foreach(add, i,
                           v) if (!has_name(x->grant, v) && json_array_append(x->grant, v) < 0)
        {
                log_err("session %s: out of memory for its servers", x->name);
        }
        if (names[0])
                log_info("session %s: may call MCP servers %s%s", x->name, names,
                         req->session_servers ? " (session_servers)" : "");
}

int session_check_servers(struct session_mgr *m, const struct sandbox_request *req, struct err *e)
{
        struct session *x = req->session ? find(m, req->owner, req->session) : NULL;
        return x ? grant_check(x, req, e) : 0;
}

int session_run(struct session_mgr *m, const struct sandbox_request *req, sandbox_done_cb cb,
                void *userdata, struct sandbox **ret, struct err *e)
{
        const char *name = req->session;
        int r = session_name_check(name, e);
        if (r < 0)
                return r;
        struct session *x = find(m, req->owner, name);
        if (x && req->image && strcmp(req->image, x->image) != 0) {
                return err_set(
                    e, ERR_INVALID, -EINVAL,
                    "session \"%s\" runs image %s, and a session keeps the image it opened "
                    "with: call without \"image\", or use another session name for %s",
                    name, x->image, req->image);
        }
        if (x) {
                if (x->busy || !x->open || !x->sb || !sandbox_idle(x->sb)) {
                        return err_set(e, ERR_REFUSED, -EBUSY,
                                       "session \"%s\" is running another call", name);
                }
                r = grant_check(x, req, e);
                if (r < 0)
                        return r;
                struct sandbox_request q = *req;
                q.keep = true;
                if (x->granted)
                        q.network = x->network;
                x->cb = cb;
                x->userdata = userdata;
                x->busy = true;
                x->calls++;
                x->t_last = now_ms();
                r = sandbox_exec(x->sb, &q, session_done, x);
                if (r < 0) {
                        x->busy = false;
                        x->cb = NULL;
                        return err_set(e, ERR_INTERNAL, r,
                                       "session \"%s\" cannot run a call now (%s)", name,
                                       strerror(-r));
                }
                grant_take(x, req);
                *ret = x->sb;
                return 0;
        }
        char why[400];
        if (exhume(m, req->owner, name, true, why, sizeof(why))) {
                return err_set(e, ERR_REFUSED, -ENOLINK,
                               "session \"%s\" ended since its last call: %s.", name, why);
        }
        long max = session_max(m);
        if (max <= 0) {
                return err_set(e, ERR_INVALID, -ENOTSUP,
                               "sessions are off here (max_sessions is %ld with max_sandboxes %ld)",
                               m->cfg->max_sessions, m->cfg->max_sandboxes);
        }
        if (count(m) >= max) {
                return err_set(e, ERR_REFUSED, -EUSERS,
                               "%ld sessions are open, the most allowed (max_sessions)", count(m));
        }
        x = calloc(1, sizeof(*x));
        if (!x || !(x->grant = json_array())) {
                free(x);
                return err_set(e, ERR_INTERNAL, -ENOMEM, "out of memory");
        }
        x->mgr = m;
        snprintf(x->owner, sizeof(x->owner), "%s", owner_of(req->owner));
        snprintf(x->name, sizeof(x->name), "%s", name);
        snprintf(x->image, sizeof(x->image), "%s", req->image ? req->image : m->cfg->image);
        x->t_open = x->t_last = now_ms();
        x->memory_bytes = -1;
        x->busy = true;
        x->calls = 1;
        x->cb = cb;
        x->userdata = userdata;
        list_push(&m->all, &x->node);
        struct sandbox_request q = *req;
        q.keep = true;
        r = sandbox_run(m->sm, &q, session_done, x, ret);
        if (r < 0) {
                session_free(x);
                /* -EAGAIN: -EBUSY would say that the session itself is busy. */
                if (r == -EBUSY)
                        return err_set(e, ERR_REFUSED, -EAGAIN,
                                       "every sandbox slot is in use (%ld) and %ld calls are "
                                       "already waiting",
                                       m->cfg->max_sandboxes, m->cfg->max_queue);
                return err_set(e, ERR_INTERNAL, r, "cannot open session \"%s\": %s", name,
                               strerror(-r));
        }
        log_info("session %s opening", name);
        grant_take(x, req);
        x->sb = *ret;
        sandbox_set_owner(x->sb, gone, x);
        arm(m);
        return 0;
}

int session_sandbox(struct session_mgr *m, const char *owner, const char *name,
                    struct sandbox **ret, struct err *e)
{
        struct session *x = find(m, owner, name);
        char why[400];
        if (!x) {
                if (exhume(m, owner, name, false, why, sizeof(why))) {
                        return err_set(e, ERR_REFUSED, -ENOLINK, "session \"%s\" ended: %s", name,
                                       why);
                }
                return err_set(e, ERR_INVALID, -ENOENT, "no session \"%s\"", name);
        }
        if (!x->open || !x->sb) {
                return err_set(e, ERR_REFUSED, -EAGAIN, "session \"%s\" is still starting", name);
        }
        x->t_last = now_ms();
        *ret = x->sb;
        return 0;
}

struct sandbox *session_peek(struct session_mgr *m, const char *owner, const char *name)
{
        struct session *x = find(m, owner, name);
        return x && x->open ? x->sb : NULL;
}

bool session_exists(struct session_mgr *m, const char *owner, const char *name)
{
        return find(m, owner, name) != NULL;
}

/* Removes its container; a call still running ends "cancelled", and
 * session_done frees the session then. */
static void close_now(struct session *x)
{
        struct sandbox *sb = x->sb;
        if (x->busy) {
                list_del(&x->node);
                x->closed = true;
        } else {
                session_free(x);
        }
        if (sb)
                sandbox_close(sb);
}

int session_close(struct session_mgr *m, const char *owner, const char *name, struct err *e)
{
        struct session *x = find(m, owner, name);
        if (!x) {
                char why[400];
                if (exhume(m, owner, name, true, why, sizeof(why))) {
                        return err_set(e, ERR_REFUSED, -ENOLINK,
                                       "session \"%s\" had already ended: %s", name, why);
                }
                return err_set(e, ERR_INVALID, -ENOENT, "no session \"%s\"", name);
        }
        log_info("session %s: closed by the client", name);
        close_now(x);
        return 0;
}

long session_total(const struct session_mgr *m)
{
        return count(m);
}

long session_count(struct session_mgr *m, const char *owner)
{
        long n = 0;
        struct session *x;
        owner = owner_of(owner);
        list_for_each(x, &m->all, node) n += strcmp(x->owner, owner) == 0;
        return n;
}

void session_close_owner(struct session_mgr *m, const char *owner)
{
        struct session *x, *n;
        owner = owner_of(owner);
        list_for_each_safe(x, n, &m->all, node)
        {
                if (strcmp(x->owner, owner) != 0)
                        continue;
                log_info("session %s: closed with its client's MCP session", x->name);
                close_now(x);
        }
}

json_t *session_list(struct session_mgr *m, const char *owner)
{
        json_t *list = json_array();
        long long now = now_ms();
        struct session *x;
        owner = owner_of(owner);
        list_for_each(x, &m->all, node)
        {
                if (!list)
                        break;
                if (strcmp(x->owner, owner) != 0)
                        continue;
                const char *id = x->sb ? sandbox_container(x->sb) : NULL;
                json_array_append_new(
                    list,
                    json_pack("{s:s, s:s, s:O, s:s, s:f, s:f, s:I, s:o, s:s%}", "name", x->name,
                              "image", x->image, "servers", x->grant, "state",
                              x->busy   ? (x->open ? "busy" : "starting")
                              : x->open ? "idle"
                                        : "starting",
                              "age_s", (double)(now - x->t_open) / 1000.0, "idle_s",
                              x->busy ? 0.0 : (double)(now - x->t_last) / 1000.0, "calls",
                              (json_int_t)x->calls, "memory_bytes",
                              x->memory_bytes >= 0 ? json_integer(x->memory_bytes) : json_null(),
                              "container", id ? id : "", id ? (size_t)12 : (size_t)0));
        }
        return list;
}

int session_watch(struct session_mgr *m, const char *owner, session_watch_cb fn, void *userdata,
                  struct session_watch **ret)
{
        struct session_watch *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->mgr = m;
        snprintf(w->owner, sizeof(w->owner), "%s", owner_of(owner));
        w->fn = fn;
        w->userdata = userdata;
        list_push(&m->watches, &w->node);
        *ret = w;
        return 0;
}

void session_unwatch(struct session_watch *w)
{
        if (!w)
                return;
        list_del(&w->node);
        free(w);
}

void session_files_changed(struct session_mgr *m, const char *owner, const char *name)
{
        struct session *x = find(m, owner, name);
        if (x && x->open)
                notify(m, x->owner, x->name, SESSION_FILES);
}

void session_mgr_free(struct session_mgr *m)
{
        if (!m)
                return;
        m->freeing = true;
        while (!list_empty(&m->watches))
                session_unwatch(list_first(&m->watches, struct session_watch, node));
        while (!list_empty(&m->all))
                session_free(list_first(&m->all, struct session, node));
        timer_remove(m->tick);
        free(m);
}
