#include "sandbox/session.h"

#include "core/list.h"
#include "core/log.h"
#include "sandbox/files.h"
#include "sandbox/images.h"
#include "sandbox/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOMBSTONES 32 /* sessions that ended unasked, remembered to say so once */

/* Why a session is saved: idle past session_idle_s, corral stopping,
 * session_save asking to hibernate now, or to checkpoint and keep running
 * (session_save keep_running, session_fork of a live session). */
enum save_kind { SAVE_IDLE, SAVE_STOP, SAVE_NOW, SAVE_CHECKPOINT };

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
        /* Hibernation (session_hibernate): saving it to the store, busy
         * meanwhile; the listing of /workspace, the file being read, the
         * tar being written, the globals the save could not keep. */
        bool hibernating;
        enum save_kind save;      /* why it is being saved */
        session_saved_cb save_cb; /* who asked for the save (session_save, _fork) */
        void *save_ud;
        char fork_to[SESSION_NAME_MAX + 1]; /* a checkpoint for session_fork: its new name */
        struct sandbox_ask *ask;
        struct sandbox_fop *fop;
        struct store_pack *pack;
        json_t *listing;
        json_t *tree; /* its directories and symbolic links: {dirs, links} */
        size_t i_listed;
        unsigned long long packed; /* bytes read into the tar so far */
        json_t *lost;
        bool state_saved;
        char state_error[200]; /* why its globals were not saved, when not */
        long long t_hibernate;
        /* Resuming: the call to run once its globals are back (its
         * pointers are the caller's, valid until cb), and what the result
         * says about it. */
        bool resuming;
        struct sandbox_request pending; /* its strings, JSON and files are ours (below) */
        char *p_code, *p_image;
        json_t *p_servers, *p_session_servers, *p_network;
        struct sandbox_file *p_files;
        size_t p_n_files;
        json_t *resume_report;
        long long t_resume;
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
        char *store; /* the hibernated sessions' store, or NULL (no directory for it) */
        char stdio_owner[SESSION_OWNER_MAX + 1]; /* the stdio client's owner there */
        /* session_mgr_save_all: told once no save is left. */
        void (*saved_all)(void *userdata);
        void *saved_all_ud;
        struct timer *saved_timer;
        struct timer *sweep; /* the store's bounds, applied hourly */
        struct tombstone graves[TOMBSTONES];
        unsigned n_graves; /* written so far; the newest TOMBSTONES are kept */
};

static void tick(struct timer *t, void *userdata);
static bool hibernate(struct session *x, enum save_kind kind);
static void stdio_owner_make(char *out, size_t size);

/* Whose sessions may outlive this process in the store: the stdio client
 * ("", the user's own) and a named client ("n:NAME", who is that name on
 * every service). An anonymous HTTP client's id ("cN") is counted afresh
 * by each process: another one could hold it next. */
static bool storable_owner(const char *owner)
{
        return owner[0] == '\0' || strncmp(owner, "n:", 2) == 0;
}

#define SWEEP_MS       (3600LL * 1000)
#define SWEEP_FIRST_MS (5LL * 1000)

/* The store's bounds (session_store_max, session_keep_s) hold even while
 * nothing is saved: shortly after start and once an hour. */
static void sweep(struct timer *t, void *userdata)
{
        struct session_mgr *m = userdata;
        if (m->store)
                store_enforce(m->store, m->cfg->session_store_max,
                              (long long)(m->cfg->session_keep_s * 1000), NULL, NULL);
        timer_arm(t, SWEEP_MS);
}

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
        /* The store is there for session_save and session_fork even when
         * idle sessions do not hibernate (nothing is written unasked). */
        stdio_owner_make(m->stdio_owner, sizeof(m->stdio_owner));
        m->store = cfg->session_store
                       ? strdup(cfg->session_store)
                       : xdg_path("XDG_STATE_HOME", ".local/state", "corral/sessions");
        if (!m->store)
                log_warn("sessions cannot be saved: no directory for their store (set "
                         "session_store)");
        else if (cfg->session_hibernate)
                log_info("idle sessions hibernate to %s (at most %llu bytes, kept %g s)", m->store,
                         cfg->session_store_max, cfg->session_keep_s);
        int r = timer_add(l, tick, m, &m->tick);
        if (r == 0 && m->store)
                r = timer_add(l, sweep, m, &m->sweep);
        if (r < 0) {
                timer_remove(m->tick);
                free(m->store);
                free(m);
                return r;
        }
        if (m->sweep) /* not before the first calls: the store may be slow */
                timer_arm(m->sweep, SWEEP_FIRST_MS);
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

/* Whose a session is in the store. A named client is its name on every
 * service. The stdio client ("") is the program that started this corral
 * in this directory (its parent's name and the working directory,
 * hashed): two MCP hosts of one user, or one host in two projects, do not
 * resume each other's sessions, and a host restarted where it was does. */
static const char *store_owner(const struct session_mgr *m, const char *owner)
{
        owner = owner_of(owner);
        return owner[0] ? owner : m->stdio_owner;
}

static void stdio_owner_make(char *out, size_t size)
{
        char comm[64] = "", cwd[4096] = "";
        if (proc_comm((long)getppid(), comm, sizeof(comm)) < 0)
                snprintf(comm, sizeof(comm), "?");
        if (!getcwd(cwd, sizeof(cwd)))
                snprintf(cwd, sizeof(cwd), "?");
        unsigned long long h = 0xcbf29ce484222325ULL; /* FNV-1a, 64 bits */
        for (const char *p = comm;; p++) {
                h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
                if (!*p)
                        break;
        }
        for (const char *p = cwd; *p; p++)
                h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
        snprintf(out, size, "h:%016llx", h);
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

/* Whether the store has room for `bytes` more (session_store_max): a fork
 * must not make the bounds evict its own source or another's session. */
static bool store_room(const struct session_mgr *m, unsigned long long bytes)
{
        struct store_entry *v = NULL;
        size_t n = 0;
        unsigned long long total = bytes;
        if (store_list(m->store, NULL, &v, &n) < 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                total += v[i].bytes;
                store_entry_clear(&v[i]);
        }
        free(v);
        return m->cfg->session_store_max == 0 || total <= m->cfg->session_store_max;
}

#define STORE_FULL "the store has no room for a copy (session_store_max): close a session first"

/* Tells whoever asked for the save (session_save, session_fork), once. */
static void save_tell(struct session *x, const char *error, unsigned long long bytes)
{
        session_saved_cb cb = x->save_cb;
        if (!cb)
                return;
        x->save_cb = NULL;
        struct session_saved r = {.error = error,
                                  .kept = x->save == SAVE_CHECKPOINT && !error,
                                  .forked = x->fork_to[0] && !error ? x->fork_to : NULL,
                                  .bytes = bytes,
                                  .ms = now_ms() - x->t_hibernate,
                                  .not_saved = error ? NULL : x->lost,
                                  .globals_error = error || x->state_saved ? NULL : x->state_error};
        cb(x->save_ud, &r);
}

static void hibernation_clear(struct session *x)
{
        /* A save that ends here unfinished (its sandbox gone with the
         * session) still answers whoever asked; not at exit. */
        if (x->save_cb && !x->mgr->freeing)
                save_tell(x, "its sandbox ended while it was being saved", 0);
        sandbox_ask_cancel(x->ask);
        x->ask = NULL;
        sandbox_fop_cancel(x->fop);
        x->fop = NULL;
        if (x->pack)
                store_pack_end(x->pack, false, NULL);
        x->pack = NULL;
        json_decref(x->listing);
        x->listing = NULL;
        json_decref(x->tree);
        x->tree = NULL;
        json_decref(x->lost);
        x->lost = NULL;
        x->fork_to[0] = '\0';
        x->save_cb = NULL;
        if (x->hibernating && x->mgr->saved_all)
                timer_arm(x->mgr->saved_timer, 1); /* counted from the loop */
        x->hibernating = false;
}

static bool stored_too_long(const struct session_mgr *m, const struct store_entry *se)
{
        return store_wall_ms() - se->saved_ms > (long long)(m->cfg->session_keep_s * 1000);
}

/* The call a resume runs once the globals are back: the caller frees its
 * request when session_run returns, so what it points to is copied. */
static void pending_clear(struct session *x)
{
        free(x->p_code);
        free(x->p_image);
        json_decref(x->p_servers);
        json_decref(x->p_session_servers);
        json_decref(x->p_network);
        store_files_free(x->p_files, x->p_n_files);
        x->p_code = x->p_image = NULL;
        x->p_servers = x->p_session_servers = x->p_network = NULL;
        x->p_files = NULL;
        x->p_n_files = 0;
        memset(&x->pending, 0, sizeof(x->pending));
}

static int pending_take(struct session *x, const struct sandbox_request *req)
{
        struct sandbox_request *q = &x->pending;
        *q = *req;
        q->session = x->name;
        q->owner = x->owner;
        x->p_code = req->code ? strdup(req->code) : NULL;
        x->p_image = req->image ? strdup(req->image) : NULL;
        x->p_servers = req->servers ? json_deep_copy(req->servers) : NULL;
        x->p_session_servers = req->session_servers ? json_deep_copy(req->session_servers) : NULL;
        x->p_network = req->network ? json_deep_copy(req->network) : NULL;
        x->p_files = req->n_files ? calloc(req->n_files, sizeof(*x->p_files)) : NULL;
        bool ok = (!req->code || x->p_code) && (!req->image || x->p_image) &&
                  (!req->servers || x->p_servers) &&
                  (!req->session_servers || x->p_session_servers) &&
                  (!req->network || x->p_network) && (!req->n_files || x->p_files);
        for (size_t i = 0; ok && i < req->n_files; i++) {
                char *path = strdup(req->files[i].path);
                char *data = malloc(req->files[i].len ? req->files[i].len : 1);
                if (!path || !data) {
                        free(path);
                        free(data);
                        ok = false;
                        break;
                }
                memcpy(data, req->files[i].data, req->files[i].len);
                x->p_files[x->p_n_files++] =
                    (struct sandbox_file){.path = path, .data = data, .len = req->files[i].len};
        }
        q->code = x->p_code;
        q->image = x->p_image;
        q->servers = x->p_servers;
        q->session_servers = x->p_session_servers;
        q->network = x->p_network;
        q->files = x->p_files;
        q->n_files = x->p_n_files;
        if (!ok)
                pending_clear(x);
        return ok ? 0 : -ENOMEM;
}

static void session_free(struct session *x)
{
        hibernation_clear(x);
        pending_clear(x);
        json_decref(x->resume_report);
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
                } else if (now - x->t_last >= (long long)(m->cfg->session_idle_s * 1000) &&
                           m->cfg->session_hibernate && m->store && x->sb &&
                           storable_owner(x->owner)) {
                        hibernate(x, SAVE_IDLE);
                } else if (now - x->t_last >= (long long)(m->cfg->session_idle_s * 1000)) {
                        snprintf(why, sizeof(why),
                                 "it was closed after %g s without calls (session_idle_s)",
                                 m->cfg->session_idle_s);
                        expire(x, why);
                }
        }
        arm(m);
}

static void session_done(void *userdata, const struct sandbox_result *res_in)
{
        struct session *x = userdata;
        struct session_mgr *m = x->mgr;
        sandbox_done_cb cb = x->cb;
        void *ud = x->userdata;
        /* The first call after a resume says so (the report lives until
         * the callback returned). */
        struct sandbox_result copy = *res_in;
        json_t *report = x->resume_report;
        x->resume_report = NULL;
        if (report) {
                copy.resumed = true;
                copy.resume_report = report;
        }
        const struct sandbox_result *res = &copy;
        json_auto_t *report_ref = report;
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

/* ---- hibernation: an idle session saved to the store, resumed by name
 *
 * Its globals are pickled inside its sandbox (a "state" exec, runtime/
 * README.md), its /workspace listed and read through the runtime, file by
 * file, into a tar in its store directory, and its index written last; then
 * its container goes. A save that fails ends the session as before, with
 * the reason. */

#define HIBERNATE_SAVE_S 120 /* the globals' save, at most */
/* The directories and symbolic links of /workspace, as a file of the tar
 * the runtime's load reads (runtime/README.md), and its bound. */
#define TREE_FILE      ".corral/tree.json"
#define TREE_MAX       (1 << 20)
#define HIBERNATE_LIST 10000
#define RESUME_LOAD_S  120

static void hibernate_next(struct session *x);

/* The session is gone, or was closed while it was being saved. */
static bool hibernate_stop(struct session *x)
{
        if (!x->closed && x->sb)
                return false;
        if (!x->closed)
                bury(x->mgr, x->owner, x->name, "its sandbox ended while it was being saved");
        save_tell(x,
                  x->closed ? "it was closed while it was being saved"
                            : "its sandbox ended while it was being saved",
                  0);
        hibernation_clear(x);
        x->busy = false;
        x->sb = NULL;
        session_free(x);
        return true;
}

static void hibernate_failed(struct session *x, const char *what)
{
        char why[400];
        struct session_mgr *m = x->mgr;
        if (x->save == SAVE_NOW || x->save == SAVE_CHECKPOINT) {
                /* Asked for: the session runs on, and the client hears why. */
                log_warn("session %s: saving it failed: %s", x->name, what);
                save_tell(x, what, 0);
                hibernation_clear(x);
                x->busy = false;
                x->t_last = now_ms();
                return;
        }
        if (x->save == SAVE_STOP)
                snprintf(why, sizeof(why), "corral stopped, and saving it failed: %s", what);
        else
                snprintf(why, sizeof(why),
                         "it was closed after %g s without calls (session_idle_s), and saving it "
                         "failed: %s",
                         m->cfg->session_idle_s, what);
        log_warn("session %s: %s", x->name, why);
        hibernation_clear(x);
        x->busy = false;
        expire(x, why);
}

static const char *save_reason(const struct session *x)
{
        switch (x->save) {
        case SAVE_IDLE:
                return "without calls (session_idle_s)";
        case SAVE_STOP:
                return "as corral stopped";
        case SAVE_NOW:
                return "as its client asked (session_save)";
        case SAVE_CHECKPOINT:
                break;
        }
        return "as a checkpoint (it runs on)";
}

static void hibernate_done(struct session *x)
{
        struct session_mgr *m = x->mgr;
        struct err e = {0};
        _cleanup_free_ char *tree = x->tree ? json_dumps(x->tree, JSON_COMPACT) : NULL;
        if (tree && store_pack_add(x->pack, TREE_FILE, 0600, tree, strlen(tree), &e) < 0) {
                hibernate_failed(x, e.msg);
                return;
        }
        if (store_pack_end(x->pack, true, &e) < 0) {
                x->pack = NULL;
                hibernate_failed(x, e.msg);
                return;
        }
        x->pack = NULL;
        struct store_entry se = {
            .saved_ms = store_wall_ms(), .grant = x->grant, .network = x->network, .lost = x->lost};
        snprintf(se.owner, sizeof(se.owner), "%s", store_owner(m, x->owner));
        snprintf(se.name, sizeof(se.name), "%s", x->name);
        snprintf(se.image, sizeof(se.image), "%s", x->image);
        if (store_write(m->store, &se, &e) < 0) {
                hibernate_failed(x, e.msg);
                return;
        }
        log_info("session %s: saved %s: %llu bytes in %s, in %lld ms", x->name, save_reason(x),
                 se.bytes, m->store, now_ms() - x->t_hibernate);
        store_enforce(m->store, m->cfg->session_store_max,
                      (long long)(m->cfg->session_keep_s * 1000), store_owner(m, x->owner),
                      x->name);
        if (x->save == SAVE_CHECKPOINT) {
                x->busy = false;
                x->t_last = now_ms();
                if (x->fork_to[0]) {
                        struct store_entry fe;
                        if (find(m, x->owner, x->fork_to)) {
                                char why[200];
                                snprintf(why, sizeof(why),
                                         "session \"%s\" was opened while the fork was saved",
                                         x->fork_to);
                                save_tell(x, why, 0);
                        } else if (!store_room(m, se.bytes)) {
                                save_tell(x, STORE_FULL, 0);
                        } else if (store_copy(m->store, store_owner(m, x->owner), x->name,
                                              x->fork_to, &fe, &e) < 0) {
                                save_tell(x, e.msg, 0);
                        } else {
                                log_info("session %s: forked from %s (%llu bytes)", fe.name,
                                         x->name, fe.bytes);
                                save_tell(x, NULL, fe.bytes);
                                store_entry_clear(&fe);
                        }
                }
                save_tell(x, NULL, se.bytes);
                hibernation_clear(x);
                return;
        }
        save_tell(x, NULL, se.bytes);
        struct sandbox *sb = x->sb;
        x->busy = false;
        session_free(x); /* no tombstone: the store has it */
        sandbox_close(sb);
}

static void hibernate_read(void *userdata, const struct files_result *r)
{
        struct session *x = userdata;
        x->fop = NULL;
        if (hibernate_stop(x))
                return;
        json_t *entry = json_array_get(x->listing, x->i_listed++);
        if (r->error == -ENOENT) { /* gone since the listing (code left running) */
                hibernate_next(x);
                return;
        }
        if (r->error) {
                hibernate_failed(x, r->message ? r->message : "a file could not be read");
                return;
        }
        unsigned mode = 0644;
        const char *ms = json_string_value(json_object_get(entry, "mode"));
        if (ms)
                mode = (unsigned)strtoul(ms, NULL, 8) & 0777;
        struct err e = {0};
        /* The listing's sizes are the sandbox's word; what was read counts. */
        x->packed += r->len;
        if (x->packed > x->mgr->cfg->session_store_max ||
            x->packed > x->mgr->cfg->workspace_size + (64 << 20)) {
                hibernate_failed(x, "its files grew past what the store holds (session_store_max)");
                return;
        }
        const char *rel = json_string_value(json_object_get(entry, "rel"));
        if (store_pack_add(x->pack, rel, mode, r->data, r->len, &e) < 0) {
                hibernate_failed(x, e.msg);
                return;
        }
        hibernate_next(x);
}

static void hibernate_next(struct session *x)
{
        if (x->i_listed >= json_array_size(x->listing)) {
                hibernate_done(x);
                return;
        }
        const char *path =
            json_string_value(json_object_get(json_array_get(x->listing, x->i_listed), "path"));
        if (sandbox_read_file(x->sb, path, x->mgr->cfg->workspace_size, hibernate_read, x,
                              &x->fop) < 0) {
                x->fop = NULL;
                hibernate_failed(x, "out of memory");
        }
}

static void hibernate_listed(void *userdata, json_t *result, const struct err *e)
{
        struct session *x = userdata;
        struct session_mgr *m = x->mgr;
        x->ask = NULL;
        if (hibernate_stop(x))
                return;
        if (e) {
                hibernate_failed(x, e->msg);
                return;
        }
        if (json_is_true(json_object_get(result, "truncated"))) {
                hibernate_failed(x, "/workspace holds more entries than a save lists (10000)");
                return;
        }
        /* Regular files under /workspace, read into the tar; directories
         * and symbolic links, named in the tree the runtime makes again
         * (TREE_FILE); not a state file that this save did not write. */
        json_t *files = json_array(), *entry;
        json_t *tree = json_pack("{s:[], s:[]}", "dirs", "links");
        size_t tree_bytes = 32; /* the object around the two lists */
        bool tree_full = false;
        unsigned long long total = 0;
        size_t i;
        json_array_foreach(json_object_get(result, "entries"), i, entry)
        {
                const char *path = json_string_value(json_object_get(entry, "path"));
                const char *type = json_string_value(json_object_get(entry, "type"));
                const char *target = json_string_value(json_object_get(entry, "target"));
                char where[FILES_PATH_MAX + 16];
                struct err te = {0};
                if (path && type && (strcmp(type, "dir") == 0 || strcmp(type, "symlink") == 0) &&
                    files_path(path, false, where, sizeof(where), &te) == 0) {
                        /* The sandbox's own words, for the sandbox: bounded
                         * as the JSON they make; corral's own .corral is not
                         * kept. What does not fit is said once and left. */
                        const char *rel = where + strlen(FILES_ROOT "/");
                        bool link = strcmp(type, "symlink") == 0;
                        if (strcmp(rel, ".corral") == 0 || strncmp(rel, ".corral/", 8) == 0 ||
                            (link && (!target || !*target)))
                                continue;
                        json_t *item = link ? json_pack("[s,s]", rel, target) : json_string(rel);
                        _cleanup_free_ char *text = item ? json_dumps(item, JSON_ENCODE_ANY) : NULL;
                        size_t add = text ? strlen(text) + 1 : TREE_MAX;
                        if (!tree || tree_bytes + add > TREE_MAX) {
                                if (tree && !tree_full)
                                        log_warn("session %s: more directories and links than a "
                                                 "save keeps (%d bytes of JSON): the rest are not "
                                                 "kept",
                                                 x->name, TREE_MAX);
                                tree_full = true;
                                json_decref(item);
                                continue;
                        }
                        tree_bytes += add;
                        json_array_append_new(json_object_get(tree, link ? "links" : "dirs"), item);
                        continue;
                }
                json_t *size = json_object_get(entry, "size");
                char checked[FILES_PATH_MAX + 16];
                struct err pe = {0};
                /* Paths come relative to /workspace, as the sandbox wrote
                 * them: each is checked as any path from outside. */
                if (!path || !json_is_string(json_object_get(entry, "type")) ||
                    strcmp(json_string_value(json_object_get(entry, "type")), "file") != 0 ||
                    files_path(path, false, checked, sizeof(checked), &pe) < 0)
                        continue;
                if ((!x->state_saved && strcmp(checked, FILES_ROOT "/.corral/state") == 0) ||
                    strcmp(checked, FILES_ROOT "/" TREE_FILE) == 0)
                        continue;
                if (json_is_integer(size) && json_integer_value(size) > 0)
                        total += (unsigned long long)json_integer_value(size);
                json_array_append_new(files, json_pack("{s:s, s:s, s:O?}", "path", checked, "rel",
                                                       checked + strlen(FILES_ROOT "/"), "mode",
                                                       json_object_get(entry, "mode")));
        }
        x->tree = tree;
        if (total > m->cfg->session_store_max) {
                json_decref(files);
                char what[200];
                snprintf(what, sizeof(what),
                         "its files take %llu bytes, more than the store holds (session_store_max)",
                         total);
                hibernate_failed(x, what);
                return;
        }
        x->listing = files;
        x->i_listed = 0;
        x->packed = 0;
        struct err pe = {0};
        if (store_pack_begin(m->store, store_owner(m, x->owner), x->name, &x->pack, &pe) < 0) {
                x->pack = NULL;
                hibernate_failed(x, pe.msg);
                return;
        }
        hibernate_next(x);
}

static void hibernate_saved(void *userdata, const struct sandbox_result *res)
{
        struct session *x = userdata;
        if (!res->kept)
                x->sb = NULL; /* its sandbox is gone with this run */
        if (hibernate_stop(x))
                return;
        /* The globals that were not saved come back as not restored. */
        x->state_saved = res->status == ST_OK && res->globals;
        snprintf(x->state_error, sizeof(x->state_error), "%s",
                 res->error_message ? res->error_message : "the runtime gave no report");
        json_decref(x->lost);
        x->lost = json_array();
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(res->globals, "not_saved"), i, v)
        {
                const char *name = json_string_value(json_object_get(v, "name"));
                if (name && *name && strlen(name) <= SESSION_NAME_MAX * 4 &&
                    json_array_size(x->lost) < 1000) {
                        json_t *n = json_string(name);
                        bool dup = false;
                        json_t *w;
                        size_t j;
                        json_array_foreach(x->lost, j, w) dup = dup || json_equal(w, n);
                        if (!dup)
                                json_array_append(x->lost, n);
                        json_decref(n);
                }
        }
        if (!x->state_saved)
                log_warn("session %s: its Python globals could not be saved (%s): only its files "
                         "will come back",
                         x->name, res->error_message ? res->error_message : "no report");
        json_t *params = json_pack("{s:s, s:b, s:i}", "path", FILES_ROOT, "recursive", 1, "limit",
                                   HIBERNATE_LIST);
        if (!params ||
            sandbox_ask(x->sb, "sandbox/list", params, hibernate_listed, x, &x->ask) < 0) {
                x->ask = NULL;
                hibernate_failed(x, "cannot list /workspace");
        }
}

/* Starts a save; false when it could not start (an idle or stopping
 * one has ended then, an asked-for one runs on). Never calls save_cb. */
static bool hibernate(struct session *x, enum save_kind kind)
{
        struct sandbox_request q = {
            .lang = LANG_STATE, .code = "save", .timeout_s = HIBERNATE_SAVE_S, .keep = true};
        x->busy = x->hibernating = true;
        x->save = kind;
        x->state_saved = false;
        x->t_hibernate = now_ms();
        log_info("session %s: saving it %s", x->name, save_reason(x));
        if (sandbox_exec(x->sb, &q, hibernate_saved, x) < 0) {
                hibernate_failed(x, "its sandbox cannot run the save");
                return false;
        }
        return true;
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

/* A session's sandbox could not be had (sandbox_run's r): the error. */
static int start_failed(struct session_mgr *m, int r, const char *verb, const char *name,
                        struct err *e)
{
        /* -EAGAIN: -EBUSY would say that the session itself is busy. */
        if (r == -EBUSY)
                return err_set(e, ERR_REFUSED, -EAGAIN,
                               "every sandbox slot is in use (%ld) and %ld calls are already "
                               "waiting",
                               m->cfg->max_sandboxes, m->cfg->max_queue);
        return err_set(e, ERR_INTERNAL, r, "cannot %s session \"%s\": %s", verb, name,
                       strerror(-r));
}

/* ---- resume: a hibernated session's files put back, then its globals
 * loaded, then the call that named it run */

static void resume_failed(struct session *x, const struct sandbox_result *res, const char *why)
{
        sandbox_done_cb cb = x->cb;
        void *ud = x->userdata;
        struct sandbox_result out = res ? *res : (struct sandbox_result){.status = ST_ERROR};
        char msg[600];
        log_warn("session %s: not resumed: %s", x->name, why);
        /* Not "ended": the stored copy stays, and the next call tries again. */
        snprintf(msg, sizeof(msg),
                 "session \"%s\" could not be resumed: %s%s%s. It stays hibernated: the next call "
                 "tries again, and session_close removes it",
                 x->name, why, res && res->error_message ? ": " : "",
                 res && res->error_message ? res->error_message : "");
        if (res && (res->status == ST_CANCELLED || res->status == ST_TIMEOUT)) {
                /* the call's own end: said as for any call */
        } else {
                out.status = ST_ERROR;
                out.error_type = "SessionNotResumed";
                out.error_message = msg;
                out.error_traceback = NULL;
                out.memory_bytes = -1;
        }
        out.kept = false;
        out.globals = NULL;
        out.not_resumed = true;
        struct sandbox *sb = x->sb;
        x->cb = NULL;
        x->busy = false;
        session_free(x);
        cb(ud, &out);
        if (sb)
                sandbox_close(sb);
}

static void resume_loaded(void *userdata, const struct sandbox_result *res)
{
        struct session *x = userdata;
        struct session_mgr *m = x->mgr;
        x->resuming = false;
        if (!res->kept)
                x->sb = NULL;
        if (x->closed || !x->sb) {
                resume_failed(x, res, "its sandbox ended while its state was loaded");
                return;
        }
        if (res->status == ST_CANCELLED || res->status == ST_TIMEOUT) {
                resume_failed(x, res, "the call ended while its state was loaded");
                return;
        }
        /* What came back and what did not: the globals the save could not
         * keep, and those the load could not. */
        json_t *g = res->globals;
        json_t *not_restored = x->lost ? json_deep_copy(x->lost) : json_array(), *v;
        size_t i;
        json_array_foreach(json_object_get(g, "not_restored"), i, v)
        {
                /* Names the sandbox wrote: bounded, each once. */
                json_t *name = json_object_get(v, "name"), *w;
                size_t j;
                bool dup = false;
                if (!not_restored || !json_is_string(name) || json_string_length(name) > 200 ||
                    json_array_size(not_restored) >= 1000)
                        continue;
                json_array_foreach(not_restored, j, w) dup = dup || json_equal(w, name);
                if (!dup)
                        json_array_append(not_restored, name);
        }
        x->resume_report = json_pack(
            "{s:o, s:I, s:s?}", "not_restored", not_restored ? not_restored : json_array(),
            "resume_ms", (json_int_t)(now_ms() - x->t_resume), "error",
            res->status == ST_OK ? NULL
                                 : (res->error_message ? res->error_message
                                                       : "its Python globals could not be loaded"));
        json_decref(x->lost);
        x->lost = NULL;
        struct err e = {0};
        if (store_remove(m->store, store_owner(m, x->owner), x->name, &e) < 0)
                log_warn("session %s: resumed, but its stored copy stays: %s", x->name, e.msg);
        log_info("session %s: resumed in %lld ms", x->name, now_ms() - x->t_resume);
        x->open = true;
        notify(m, x->owner, x->name, SESSION_OPENED);
        struct sandbox_request q = x->pending;
        q.keep = true;
        if (x->granted)
                q.network = x->network;
        int r = sandbox_exec(x->sb, &q, session_done, x);
        pending_clear(x); /* the sandbox has its copy */
        if (r < 0) {
                struct sandbox_result out = {.status = ST_ERROR,
                                             .error_type = "SessionError",
                                             .error_message =
                                                 "the resumed session cannot run a call now",
                                             .memory_bytes = -1,
                                             .kept = true};
                session_done(x, &out);
        }
}

static int session_resume(struct session_mgr *m, const struct sandbox_request *req,
                          struct store_entry *se, sandbox_done_cb cb, void *userdata,
                          struct sandbox **ret, struct err *e)
{
        const char *name = req->session;
        if (req->image && strcmp(req->image, se->image) != 0)
                return err_set(e, ERR_INVALID, -EINVAL,
                               "session \"%s\" (hibernated) runs image %s, and a session keeps "
                               "the image it opened with: call without \"image\", or use another "
                               "session name for %s",
                               name, se->image, req->image);
        long max = session_max(m);
        if (count(m) >= max)
                return err_set(e, ERR_REFUSED, -EUSERS,
                               "%ld sessions are open, the most allowed (max_sessions)", count(m));
        if (strcmp(se->image, m->cfg->image) != 0 &&
            !sandbox_images_find(sandbox_mgr_images(m->sm), se->image))
                return err_set(e, ERR_REFUSED, -ENOLINK,
                               "session \"%s\" is hibernated with image %s, which this corral does "
                               "not offer (images): it cannot be resumed here (session_close "
                               "removes it)",
                               name, se->image);
        struct sandbox_file *files = NULL;
        size_t n_files = 0;
        struct err ue = {0};
        if (store_unpack(m->store, store_owner(m, req->owner), name, m->cfg->workspace_size, &files,
                         &n_files, &ue) < 0)
                return err_set(e, ERR_REFUSED, -ENOLINK,
                               "session \"%s\" is hibernated but cannot be resumed: %s "
                               "(session_close removes it)",
                               name, ue.msg);
        struct session *x = calloc(1, sizeof(*x));
        if (!x) {
                store_files_free(files, n_files);
                return err_set(e, ERR_INTERNAL, -ENOMEM, "out of memory");
        }
        x->mgr = m;
        /* The MCP servers and hosts: the resuming call's, checked against
         * the policy as a first call's are (grant_take), never the index's,
         * which another service could have written. */
        x->grant = json_array();
        x->lost = se->lost ? json_deep_copy(se->lost) : NULL;
        snprintf(x->owner, sizeof(x->owner), "%s", owner_of(req->owner));
        snprintf(x->name, sizeof(x->name), "%s", name);
        snprintf(x->image, sizeof(x->image), "%s", se->image);
        int r = x->grant ? grant_check(x, req, e) : -ENOMEM;
        if (r < 0) {
                store_files_free(files, n_files);
                json_decref(x->grant);
                json_decref(x->network);
                json_decref(x->lost);
                free(x);
                return r == -ENOMEM ? err_set(e, ERR_INTERNAL, r, "out of memory") : r;
        }
        x->t_open = x->t_last = x->t_resume = now_ms();
        x->memory_bytes = -1;
        x->busy = x->resuming = true;
        x->calls = 1;
        x->cb = cb;
        x->userdata = userdata;
        if (pending_take(x, req) < 0) {
                store_files_free(files, n_files);
                session_free(x);
                return err_set(e, ERR_INTERNAL, -ENOMEM, "out of memory");
        }
        list_push(&m->all, &x->node);
        struct sandbox_request q = {.lang = LANG_STATE,
                                    .code = "load",
                                    .timeout_s = RESUME_LOAD_S,
                                    .keep = true,
                                    .files = files,
                                    .n_files = n_files,
                                    .image =
                                        strcmp(se->image, m->cfg->image) == 0 ? NULL : x->image};
        r = sandbox_run(m->sm, &q, resume_loaded, x, ret);
        store_files_free(files, n_files);
        if (r < 0) {
                session_free(x);
                return start_failed(m, r, "resume", name, e);
        }
        log_info("session %s resuming from the store (%zu files)", name, n_files);
        grant_take(x, req);
        x->sb = *ret;
        sandbox_set_owner(x->sb, gone, x);
        arm(m);
        return 0;
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
                if (x->hibernating)
                        return err_set(e, ERR_REFUSED, -EBUSY,
                                       "session \"%s\" is being saved to the store after %g s "
                                       "without calls: call again in a moment (it resumes then)",
                                       name, m->cfg->session_idle_s);
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
        struct store_entry se;
        struct err se_err = {0};
        if (m->store && store_read(m->store, store_owner(m, req->owner), name, &se, &se_err) == 0) {
                if (stored_too_long(m, &se)) {
                        store_entry_clear(&se);
                        store_remove(m->store, store_owner(m, req->owner), name, &se_err);
                        return err_set(e, ERR_REFUSED, -ENOLINK,
                                       "session \"%s\" was hibernated longer than the store keeps "
                                       "sessions (session_keep_s %g s), and is removed.",
                                       name, m->cfg->session_keep_s);
                }
                r = session_resume(m, req, &se, cb, userdata, ret, e);
                store_entry_clear(&se);
                return r;
        }
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
                return start_failed(m, r, "open", name, e);
        }
        log_info("session %s opening", name);
        grant_take(x, req);
        x->sb = *ret;
        sandbox_set_owner(x->sb, gone, x);
        arm(m);
        return 0;
}

/* A session hibernated in the store and not open: 1, its size (done,
 * when given), and whether it is older than the store keeps sessions
 * (too_old, when given); else 0. */
static int stored_only(struct session_mgr *m, const char *owner, const char *name,
                       struct session_saved *done, bool *too_old)
{
        struct store_entry se;
        struct err se_err = {0};
        if (find(m, owner, name) || !m->store || !storable_owner(owner_of(owner)) ||
            store_read(m->store, store_owner(m, owner), name, &se, &se_err) < 0)
                return 0;
        if (done)
                *done = (struct session_saved){.bytes = se.bytes, .ms = 0};
        if (too_old)
                *too_old = stored_too_long(m, &se);
        store_entry_clear(&se);
        return 1;
}

int session_sandbox(struct session_mgr *m, const char *owner, const char *name,
                    struct sandbox **ret, struct err *e)
{
        struct session *x = find(m, owner, name);
        char why[400];
        if (!x) {
                if (stored_only(m, owner, name, NULL, NULL))
                        return err_set(e, ERR_REFUSED, -EAGAIN,
                                       "session \"%s\" is hibernated: a call that runs code in "
                                       "it resumes it",
                                       name);
                if (exhume(m, owner, name, false, why, sizeof(why))) {
                        return err_set(e, ERR_REFUSED, -ENOLINK, "session \"%s\" ended: %s", name,
                                       why);
                }
                return err_set(e, ERR_INVALID, -ENOENT, "no session \"%s\"", name);
        }
        if (!x->open || !x->sb) {
                return err_set(e, ERR_REFUSED, -EAGAIN, "session \"%s\" is still starting", name);
        }
        if (x->hibernating) /* a file written now would miss the save */
                return err_set(e, ERR_REFUSED, -EAGAIN,
                               "session \"%s\" is being saved to the store: a call that runs code "
                               "in it resumes it",
                               name);
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
        if (!x && stored_only(m, owner, name, NULL, NULL)) {
                if (store_remove(m->store, store_owner(m, owner), name, e) < 0)
                        return -EIO;
                log_info("session %s: closed by the client while hibernated; its stored state "
                         "is removed",
                         name);
                return 0;
        }
        if (!x) {
                char why[400];
                if (exhume(m, owner, name, true, why, sizeof(why))) {
                        return err_set(e, ERR_REFUSED, -ENOLINK,
                                       "session \"%s\" had already ended: %s", name, why);
                }
                return err_set(e, ERR_INVALID, -ENOENT, "no session \"%s\"", name);
        }
        log_info("session %s: closed by the client", name);
        if (m->store) { /* a checkpoint, or the copy a resume has not removed yet */
                struct err re = {0};
                if (store_remove(m->store, store_owner(m, x->owner), x->name, &re) < 0)
                        log_warn("session %s: %s", name, re.msg);
        }
        close_now(x);
        return 0;
}

/* The open session a save or a fork starts from, ready to save: NULL
 * after *e. */
static struct session *savable(struct session_mgr *m, const char *owner, const char *name,
                               struct err *e)
{
        struct session *x = find(m, owner, name);
        if (!m->store) {
                err_set(e, ERR_REFUSED, -ENOTSUP,
                        "sessions cannot be saved here: no directory for the store (set "
                        "session_store)");
                return NULL;
        }
        if (!storable_owner(owner_of(owner))) {
                err_set(e, ERR_REFUSED, -EPERM,
                        "session \"%s\" belongs to an anonymous client, whose sessions end with "
                        "its MCP session: connect with a Corral-Client name to save sessions",
                        name);
                return NULL;
        }
        if (!x) {
                char why[400];
                if (exhume(m, owner, name, false, why, sizeof(why)))
                        err_set(e, ERR_REFUSED, -ENOLINK, "session \"%s\" ended: %s", name, why);
                else
                        err_set(e, ERR_INVALID, -ENOENT, "no session \"%s\"", name);
                return NULL;
        }
        if (x->hibernating) {
                err_set(e, ERR_REFUSED, -EBUSY, "session \"%s\" is being saved already", name);
                return NULL;
        }
        if (!x->open || !x->sb) {
                err_set(e, ERR_REFUSED, -EAGAIN, "session \"%s\" is still starting", name);
                return NULL;
        }
        if (x->busy || !sandbox_idle(x->sb)) {
                err_set(e, ERR_REFUSED, -EBUSY,
                        "session \"%s\" is running a call: save it once the call ended", name);
                return NULL;
        }
        return x;
}

int session_save(struct session_mgr *m, const char *owner, const char *name, bool keep,
                 session_saved_cb cb, void *userdata, struct session_saved *done, struct err *e)
{
        int r = session_name_check(name, e);
        if (r < 0)
                return r;
        if (stored_only(m, owner, name, done, NULL))
                return 1;
        struct session *x = savable(m, owner, name, e);
        if (!x)
                return e->code;
        if (!hibernate(x, keep ? SAVE_CHECKPOINT : SAVE_NOW))
                return err_set(e, ERR_INTERNAL, -EIO,
                               "session \"%s\" cannot be saved now: its sandbox cannot run the "
                               "save",
                               name);
        x->save_cb = cb;
        x->save_ud = userdata;
        return 0;
}

int session_fork(struct session_mgr *m, const char *owner, const char *from, const char *to,
                 session_saved_cb cb, void *userdata, struct session_saved *done, struct err *e)
{
        int r = session_name_check(from, e);
        if (r == 0)
                r = session_name_check(to, e);
        if (r < 0)
                return r;
        struct store_entry se;
        if (strcmp(from, to) == 0)
                return err_set(e, ERR_INVALID, -EEXIST, "a fork needs a new name, not \"%s\"", to);
        if (find(m, owner, to) || stored_only(m, owner, to, NULL, NULL)) {
                return err_set(e, ERR_REFUSED, -EEXIST,
                               "session \"%s\" exists already: fork into a new name, or close it "
                               "first",
                               to);
        }
        struct session_saved stored;
        bool old = false;
        if (stored_only(m, owner, from, &stored, &old)) {
                if (old) /* a fork does not make an old save new */
                        return err_set(e, ERR_REFUSED, -ENOLINK,
                                       "session \"%s\" was hibernated longer than the store keeps "
                                       "sessions (session_keep_s %g s): it cannot be forked",
                                       from, m->cfg->session_keep_s);
                if (!store_room(m, stored.bytes))
                        return err_set(e, ERR_REFUSED, -ENOSPC, STORE_FULL);
                r = store_copy(m->store, store_owner(m, owner), from, to, &se, e);
                if (r < 0)
                        return r;
                log_info("session %s: forked from %s (hibernated, %llu bytes)", to, from, se.bytes);
                *done = (struct session_saved){.forked = NULL, .bytes = se.bytes};
                store_entry_clear(&se);
                return 1;
        }
        struct session *x = savable(m, owner, from, e);
        if (!x)
                return e->code;
        if (!hibernate(x, SAVE_CHECKPOINT))
                return err_set(e, ERR_INTERNAL, -EIO,
                               "session \"%s\" cannot be saved now: its sandbox cannot run the "
                               "save",
                               from);
        snprintf(x->fork_to, sizeof(x->fork_to), "%s", to);
        x->save_cb = cb;
        x->save_ud = userdata;
        return 0;
}

static long saves_left(struct session_mgr *m)
{
        long n = 0;
        struct session *x;
        list_for_each(x, &m->all, node) n += x->hibernating;
        return n;
}

static void saved_tick(struct timer *t, void *userdata)
{
        struct session_mgr *m = userdata;
        (void)t;
        if (!m->saved_all || saves_left(m) > 0)
                return;
        void (*done)(void *) = m->saved_all;
        m->saved_all = NULL;
        done(m->saved_all_ud);
}

int session_mgr_save_all(struct session_mgr *m, void (*done)(void *userdata), void *userdata)
{
        if (!m->cfg->session_hibernate || !m->store)
                return 0;
        struct session *x, *next;
        list_for_each_safe(x, next, &m->all, node)
        {
                if (!storable_owner(x->owner) || x->hibernating)
                        continue;
                if (x->busy || !x->open || !x->sb) {
                        log_warn("session %s: not saved: %s when corral stopped", x->name,
                                 x->open ? "a call ran in it" : "it was still starting");
                        continue;
                }
                hibernate(x, SAVE_STOP);
        }
        long n = saves_left(m);
        if (n > 0 && (m->saved_timer || timer_add(m->loop, saved_tick, m, &m->saved_timer) == 0)) {
                m->saved_all = done;
                m->saved_all_ud = userdata;
                log_info("stopping: saving %ld session(s) to %s first", n, m->store);
                return (int)n;
        }
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
        struct store_entry *v = NULL;
        size_t n = 0;
        if (list && m->store && store_list(m->store, store_owner(m, owner), &v, &n) == 0) {
                long long wall = store_wall_ms();
                for (size_t i = 0; i < n; i++) {
                        if (!find(m, owner, v[i].name))
                                json_array_append_new(
                                    list,
                                    json_pack("{s:s, s:s, s:o, s:s, s:f, s:I, s:I}", "name",
                                              v[i].name, "image", v[i].image, "servers",
                                              v[i].grant ? json_incref(v[i].grant) : json_array(),
                                              "state", "hibernated", "idle_s",
                                              (double)(wall - v[i].saved_ms) / 1000.0,
                                              "stored_bytes", (json_int_t)v[i].bytes, "calls",
                                              (json_int_t)0));
                        store_entry_clear(&v[i]);
                }
                free(v);
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
        timer_remove(m->saved_timer);
        timer_remove(m->sweep);
        free(m->store);
        free(m);
}
