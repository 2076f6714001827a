#include "sandbox/sandbox.h"

#include "sandbox/images.h"

#include "bridge/bridge.h"
#include "core/jsonrpc.h"
#include "core/log.h"
#include "engine/attach.h"
#include "sandbox/files.h"
#include "sandbox/profile.h"
#include "runtime/protocol.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

extern const char corral_runtime_src[];

#define STDERR_LOG_MAX (64 * 1024) /* container stderr bytes logged per sandbox */
#define POOL_FAIL_FAST 3           /* failed starts in a row before calls fail fast */
/* A session's interrupted run: the runtime kills the worker one second
 * after SIGINT; past this the container goes. */
#define INTERRUPT_GRACE_MS 3000
#define COLLECT_MAX_MS     30000 /* fetching /workspace/out after a run */
#define ASK_TIMEOUT_MS     30000 /* a request to the runtime (sandbox/list, freeze) */
/* A freeze is renewed well before the runtime lifts it by itself. */
#define FREEZE_RENEW_MS (RT_FREEZE_MAX_S * 1000 * 2 / 3)
#define OUT_FILES_MAX   RT_OUT_FILES_MAX

enum sandbox_state {
        S_QUEUED,
        S_CREATING,
        S_ATTACHING,
        S_STARTING,
        S_STARTED,    /* waiting for sandbox/ready */
        S_READY,      /* in the pool: the runtime waits for its one request */
        S_UPLOADING,  /* the request's files go into /workspace */
        S_BUSY,       /* exec sent */
        S_COLLECTING, /* fetching what the code wrote under /workspace/out */
        S_IDLE,       /* kept (a session): waiting for its next run */
        S_REMOVING,
        S_DONE,
};

/* Holds the container's other processes stopped (sandbox/freeze) for a
 * file operation; see freeze_get. */
struct freeze_wait {
        struct freeze_wait *next;
        void (*ready)(void *userdata, const char *error);
        void *userdata;
};

struct sandbox {
        struct sandbox_mgr *mgr;
        struct sandbox *prev, *next; /* mgr->all */
        struct sandbox *qnext;       /* mgr queue */
        struct sandbox *rnext;       /* mgr ready list */
        bool pooled;                 /* started by the pool, before any request */
        char *image;                 /* the image a call asked for; NULL: the default */
        long long t_created;
        enum sandbox_state state;
        enum sandbox_lang lang;
        char *code;
        double timeout_s;
        char *id;
        struct engine_req *req;
        struct attach *attach;
        struct timer *timer;
        struct line_reader frames;
        struct line_reader diag;
        unsigned long long diag_logged;
        long long t_start;
        bool delivered; /* result handed to the caller */
        bool have_result;
        bool killing;      /* we asked the engine to remove it */
        bool stream_ended; /* attach EOF while the start request was out */
        int remove_tries;
        sandbox_done_cb cb;
        void *userdata;
        void (*on_output)(void *userdata, bool is_stderr, const char *data, size_t n);
        void (*on_progress)(void *userdata, double done, double total, const char *message);
        void *hook_ud;             /* their userdata */
        struct bridge_run *bridge; /* the MCP servers its code may call, if any */
        struct sandbox_result res;
        /* Sessions. */
        bool keep;                        /* stays after a run (S_IDLE) */
        bool closing;                     /* its owner removes it */
        json_int_t exec_id;               /* of the latest sandbox/exec */
        enum sandbox_status interrupting; /* ST_OK, or why its run is being interrupted */
        char *interrupt_msg;
        void (*gone)(void *owner, const char *why);
        void *owner;
        /* Files in (before the run) and out (after it). */
        struct sandbox_file *files;
        size_t n_files, i_file;
        bool want_out;
        json_t *out_list; /* the runtime's out_files, being fetched */
        size_t i_out;
        unsigned long long out_bytes;
        struct files_op *fop;
        /* Requests to the runtime (sandbox/list). */
        struct sandbox_ask *asks;
        unsigned ask_seq;
        /* Frozen while files move through the engine (kept sandboxes). */
        int freezes; /* holders */
        enum { FZ_THAWED, FZ_FREEZING, FZ_FROZEN } fz;
        struct freeze_wait *fz_waits;
        struct sandbox_fop *fops;
        struct freeze_wait run_wait;  /* this run's uploads or collection... */
        bool run_waiting, run_frozen; /* ...wait for a freeze, or hold one */
        void (*run_then)(struct sandbox *);
        bool exec_pending;      /* its exec waits for a file operation to end */
        struct timer *fz_timer; /* renews a long freeze before the runtime lifts it */
        /* The caller hears of the result from the loop (core/loop.h), and
         * a sandbox that is done is freed there too, after that: code that
         * called out finds it S_DONE, never freed. */
        struct defer deliver_d, free_d;
        struct sandbox *dnext; /* mgr->done: released, not yet freed */
};

struct sandbox_ask {
        struct sandbox *sb;
        struct sandbox_ask *next;
        char id[32];
        sandbox_ask_cb cb;
        void *userdata;
        struct timer *timer; /* ASK_TIMEOUT_MS: an answer that never comes */
        /* Ended: the answer, handed over from the loop. */
        bool ended;
        json_t *result;
        char *error;
        struct defer d;
};

/* A read_file or write_file on a kept sandbox, run frozen. */
struct sandbox_fop {
        struct sandbox *sb;
        struct sandbox_fop *next; /* s->fops */
        bool write;
        char path[FILES_PATH_MAX + 64];
        char *data;
        size_t len, max;
        files_cb cb;
        void *userdata;
        struct freeze_wait wait;
        bool waiting, frozen;
        struct files_op *op;
        /* Failed before the engine answered: the error, handed over from
         * the loop. */
        bool failed;
        int error;
        char message[600];
        struct defer d;
};

struct sandbox_mgr {
        struct loop *loop;
        const struct config *cfg;
        struct sandbox_profile profile; /* seccomp profile and masks of every sandbox */
        struct engine *eng;
        bool owns_eng; /* found after start-up by mgr_engine */
        char instance[17];
        struct sandbox *all;
        struct sandbox *qhead, *qtail;
        long queued;
        long active; /* sandboxes holding a slot (created..removed) */
        bool shutting_down;
        struct timer *drain_timer;
        /* The warm pool: ready sandboxes, each still for a single request. */
        bool pool_on;
        long pool_min, pool_max; /* in effect (see config.h) */
        struct sandbox *ready;   /* stack of S_READY sandboxes */
        long n_ready;
        struct timer *tick;
        long long last_call_ms;
        unsigned long long hits, misses, failures;
        int consecutive_failures; /* starts that failed in a row */
        long long retry_at_ms;    /* no new start before this while failing */
        char last_error[1400];
        long long refill_ms[128]; /* creation to ready, newest last */
        unsigned n_refill;
        struct leftover *leftovers;   /* being removed by the sweep */
        struct bridge *bridge;        /* NULL: sandboxes call no MCP servers */
        struct sandbox *done;         /* released sandboxes, freed from the loop */
        bool freeing;                 /* sandbox_mgr_free: the loop runs no more */
        struct sandbox_images images; /* what a call may ask for (sandbox_mgr_prepare) */
        json_t *mounts;               /* HostConfig.Mounts binds of every sandbox, or NULL */
        void (*drained)(void *);
        void *drained_ud;
};

const char *sandbox_status_name(enum sandbox_status s)
{
        static const char *const names[] = {
            [ST_OK] = "ok",     [ST_ERROR] = "error",         [ST_TIMEOUT] = "timeout",
            [ST_OOM] = "oom",   [ST_CANCELLED] = "cancelled", [ST_ENGINE_ERROR] = "engine_error",
            [ST_BUSY] = "busy",
        };
        return names[s];
}

/* Who owns a container: this host and boot, and a pid. Together they let a
 * new instance tell a live owner from one that was killed. */
struct identity {
        char host[256];
        char boot[64];
};

static const struct identity *host_identity(void)
{
        static struct identity id;
        if (id.host[0])
                return &id;
        if (gethostname(id.host, sizeof(id.host) - 1) < 0 || !id.host[0])
                snprintf(id.host, sizeof(id.host), "unknown");
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
        if (!f || !fgets(id.boot, sizeof(id.boot), f))
                snprintf(id.boot, sizeof(id.boot), "unknown");
        if (f)
                fclose(f);
        id.boot[strcspn(id.boot, "\n")] = '\0';
        utf8_scrub(id.host);
        return &id;
}

json_t *sandbox_create_body(const struct config *cfg, const struct sandbox_profile *prof,
                            const char *instance, const char *runtime_src,
                            const struct sandbox_spec *spec, enum engine_kind kind)
{
        bool preload = spec && spec->preload;
        char tmp_opts[128], ws_opts[128], vol_opts[128], frame_env[64], pid_label[32];
        snprintf(tmp_opts, sizeof(tmp_opts), "rw,nosuid,nodev,exec,size=%llu,mode=1777",
                 cfg->tmp_size);
        snprintf(ws_opts, sizeof(ws_opts), "rw,nosuid,nodev,exec,size=%llu,mode=1777",
                 cfg->workspace_size);
        snprintf(vol_opts, sizeof(vol_opts), "size=%llu,mode=1777,nosuid,nodev",
                 cfg->workspace_size);
        snprintf(frame_env, sizeof(frame_env), "CORRAL_MAX_FRAME=%llu", cfg->max_frame);
        snprintf(pid_label, sizeof(pid_label), "%d", (int)getpid());
        /* No WorkingDir: Docker would create /workspace in the image as root
         * 0755 and the tmpfs would copy that mode; the runtime changes into
         * /workspace itself. Both engines get explicit tmpfs options so they
         * behave alike (Docker would add noexec, Podman would not).
         * Every field below is a security default: no network, read-only
         * root, no capabilities, no privilege gain through setuid binaries,
         * an unprivileged user, bounded memory (no swap), pids, CPU, files,
         * and no core dumps. Nothing from the host is mounted. */
        // clang-format off
        json_t *body = json_pack(
                "{s:s, s:[s,s,s,s,s,s], s:[s,s,s,s], s:s, s:s, s:b, s:b, s:b, s:b, s:b, s:b,"
                " s:{s:s, s:s, s:s, s:s, s:s},"
                " s:{s:s, s:b, s:[s], s:[s], s:I, s:I, s:I, s:I, s:s,"
                "    s:{s:s, s:s},"
                "    s:[{s:s,s:i,s:i},{s:s,s:i,s:i},{s:s,s:i,s:i}]}}",
                "Image", spec && spec->image ? spec->image : cfg->image,
                "Cmd", "python3", "-I", "-S", "-B", "-c", runtime_src,
                "Env", "HOME=/tmp", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", frame_env,
                "User", "65534:65534",
                "Hostname", "sandbox",
                "Tty", 0, "OpenStdin", 1, "StdinOnce", 1,
                "AttachStdin", 1, "AttachStdout", 1, "AttachStderr", 1,
                "Labels",
                        "io.corral.owner", "corral",
                        "io.corral.instance", instance,
                        "io.corral.pid", pid_label,
                        "io.corral.host", host_identity()->host,
                        "io.corral.boot", host_identity()->boot,
                "HostConfig",
                        "NetworkMode", "none",
                        "ReadonlyRootfs", 1,
                        "CapDrop", "ALL",
                        "SecurityOpt", "no-new-privileges",
                        "Memory", (json_int_t)cfg->memory,
                        "MemorySwap", (json_int_t)cfg->memory,
                        "PidsLimit", (json_int_t)cfg->pids,
                        "NanoCpus", (json_int_t)llround(cfg->cpus * 1e9),
                        "IpcMode", "private",
                        "Tmpfs", "/tmp", tmp_opts, "/workspace", ws_opts,
                        "Ulimits",
                                "Name", "nofile", "Soft", 1024, "Hard", 1024,
                                "Name", "nproc", "Soft", 4096, "Hard", 4096,
                                "Name", "core", "Soft", 0, "Hard", 0);
        // clang-format on
        /* Docker's archive endpoints (files in and out) do not see a tmpfs
         * mounted with Tmpfs, only the directory under it, and refuse to
         * write to a read-only root. An anonymous volume of the local
         * driver backed by tmpfs is the same memory-backed, size-capped,
         * nosuid,nodev space that they do see; it is created empty and
         * removed with the container (DELETE ...?v=1). Podman's archive
         * endpoints enter the container's mounts and see a Tmpfs. */
        if (body && kind == ENGINE_DOCKER) {
                json_t *hc = json_object_get(body, "HostConfig");
                json_object_del(json_object_get(hc, "Tmpfs"), "/workspace");
                json_t *mounts = json_pack(
                    "[{s:s, s:s, s:{s:b, s:{s:s, s:{s:s, s:s, s:s}}}}]", "Type", "volume", "Target",
                    "/workspace", "VolumeOptions", "NoCopy", 1, "DriverConfig", "Name", "local",
                    "Options", "type", "tmpfs", "device", "tmpfs", "o", vol_opts);
                if (!mounts || json_object_set_new(hc, "Mounts", mounts) < 0) {
                        json_decref(body);
                        return NULL;
                }
        }
        /* The kernel surface: corral's seccomp profile, masked /proc and
         * /sys entries, and no writable space but /tmp, /workspace and
         * /dev/shm, the same on both engines. */
        if (body && sandbox_profile_apply(prof, cfg, kind, body) < 0) {
                json_decref(body);
                return NULL;
        }
        /* Host data the user chose: read-only, nosuid, nodev. Podman takes
         * those options on a bind (and keeps it private); Docker refuses
         * them there, and gets them through its local volume driver, a
         * bind the engine mounts with them (removed with the container). */
        json_t *hc = body ? json_object_get(body, "HostConfig") : NULL;
        for (size_t i = 0; hc && spec && i < json_array_size(spec->mounts); i++) {
                json_t *x = json_array_get(spec->mounts, i);
                const char *src = json_string_value(json_object_get(x, "Source"));
                const char *dst = json_string_value(json_object_get(x, "Target"));
                const char *key = kind == ENGINE_DOCKER ? "Mounts" : "Binds";
                json_t *list = json_object_get(hc, key), *item = NULL;
                if (!list && json_object_set_new(hc, key, list = json_array()) < 0)
                        list = NULL;
                if (src && dst && kind == ENGINE_DOCKER) {
                        item = json_pack("{s:s, s:s, s:{s:b, s:{s:s, s:{s:s, s:s, s:s}}}}", "Type",
                                         "volume", "Target", dst, "VolumeOptions", "NoCopy", 1,
                                         "DriverConfig", "Name", "local", "Options", "type", "none",
                                         "device", src, "o", "bind,ro,nosuid,nodev");
                } else if (src && dst) {
                        char bind[2 * 4096 + 64];
                        snprintf(bind, sizeof(bind), "%s:%s:ro,nosuid,nodev,rprivate", src, dst);
                        item = json_string(bind);
                }
                if (!list || !item || json_array_append_new(list, item) < 0) {
                        json_decref(body);
                        return NULL;
                }
        }
        /* A pool sandbox has time to import more before its call comes:
         * asyncio, and the image's modules or those `preload` names. */
        json_t *env = body ? json_object_get(body, "Env") : NULL;
        if (env && preload && json_array_append_new(env, json_string("CORRAL_PRELOAD=1")) < 0) {
                json_decref(body);
                return NULL;
        }
        if (env && preload && cfg->preload) {
                struct buf list;
                buf_init(&list, 16 << 10);
                buf_append_some(&list, "CORRAL_PRELOAD_MODULES=", 23);
                for (size_t i = 0; cfg->preload[i]; i++) {
                        if (i)
                                buf_append_some(&list, ",", 1);
                        buf_append_some(&list, cfg->preload[i], strlen(cfg->preload[i]));
                }
                int r = json_array_append_new(env, json_string(buf_str(&list)));
                buf_free(&list);
                if (r < 0) {
                        json_decref(body);
                        return NULL;
                }
        }
        return body;
}

int sandbox_mgr_new(struct loop *l, const struct config *cfg, struct engine *eng,
                    struct sandbox_mgr **ret)
{
        struct sandbox_mgr *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->loop = l;
        m->cfg = cfg;
        m->eng = eng;
        struct err e = {0};
        int r = sandbox_profile_load(cfg, &m->profile, &e);
        if (r < 0) {
                log_err("%s", e.msg);
                free(m);
                return r;
        }
        log_debug("sandbox seccomp profile: %s", m->profile.summary);
        unsigned char rnd[8];
        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
                long long t = now_ms() ^ getpid();
                memcpy(rnd, &t, sizeof(rnd));
        }
        for (size_t i = 0; i < sizeof(rnd); i++)
                snprintf(m->instance + 2 * i, 3, "%02x", rnd[i]);
        *ret = m;
        return 0;
}

int sandbox_mgr_prepare(struct sandbox_mgr *m, struct err *e)
{
        const struct engine_endpoint *ep = m->eng ? engine_endpoint(m->eng) : NULL;
        struct engine_endpoint parsed = {0};
        /* No engine yet: the configured one still tells local from remote. */
        if (!ep && m->cfg->engine && engine_endpoint_parse(m->cfg->engine, &parsed, NULL) == 0)
                ep = &parsed;
        json_decref(m->mounts);
        m->mounts = sandbox_mounts_resolve(m->cfg, ep, e);
        engine_endpoint_done(&parsed);
        if (!m->mounts)
                return -EINVAL;
        sandbox_images_free(&m->images);
        int r = sandbox_images_load(m->eng, m->cfg, &m->images, e);
        if (r < 0)
                return r;
        for (size_t i = 0; i < m->images.n; i++)
                log_info("image %s%s%s%s%s", m->images.v[i].name,
                         m->images.v[i].is_default ? " (the default)" : "",
                         m->images.v[i].profile ? ", profile " : "",
                         m->images.v[i].profile ? m->images.v[i].profile : "",
                         m->images.v[i].profile ? "" : ", not built by corral");
        for (size_t i = 0; i < json_array_size(m->mounts); i++) {
                json_t *x = json_array_get(m->mounts, i);
                log_info("mount %s read-only at %s",
                         json_string_value(json_object_get(x, "Source")),
                         json_string_value(json_object_get(x, "Target")));
        }
        return 0;
}

const struct sandbox_images *sandbox_mgr_images(const struct sandbox_mgr *m)
{
        return &m->images;
}

json_t *sandbox_mgr_mounts(const struct sandbox_mgr *m)
{
        return m->mounts;
}

static void sandbox_step(struct sandbox *s);
static void sandbox_kill(struct sandbox *s, enum sandbox_status why, const char *msg);
static int freeze_get(struct sandbox *s, struct freeze_wait *w);
static void freeze_put(struct sandbox *s);
static void freeze_cancel(struct sandbox *s, struct freeze_wait *w);
static void run_unfreeze(struct sandbox *s);
static void exec_when_thawed(struct sandbox *s);
static void mgr_check_drained(struct sandbox_mgr *m);
static void pool_refill(struct sandbox_mgr *m);
static void pool_ready(struct sandbox *s);
static void ready_remove(struct sandbox *s);
static void note_start_failure(struct sandbox_mgr *m, const char *msg);

static void output_init(struct sandbox_output *o, size_t limit)
{
        buf_init(&o->data, limit);
        o->total = 0;
        o->truncated = false;
}

static void set_error(struct sandbox_result *res, const char *type, const char *msg)
{
        free(res->error_type);
        free(res->error_message);
        /* Messages may quote engine text cut at a byte limit. */
        res->error_type = type ? utf8_scrub(strdup(type)) : NULL;
        res->error_message = msg ? utf8_scrub(strdup(msg)) : NULL;
}

/* Take s out of the manager's list (idempotent). */
static void sandbox_unlink(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        if (s->prev)
                s->prev->next = s->next;
        else if (m->all == s)
                m->all = s->next;
        if (s->next)
                s->next->prev = s->prev;
        s->prev = s->next = NULL;
}

static void files_clear(struct sandbox *s)
{
        for (size_t i = 0; i < s->n_files; i++) {
                free((char *)s->files[i].path);
                free((char *)s->files[i].data);
        }
        free(s->files);
        s->files = NULL;
        s->n_files = s->i_file = 0;
}

static void ask_unlink(struct sandbox_ask *a)
{
        struct sandbox *s = a->sb;
        for (struct sandbox_ask **pp = &s->asks; *pp; pp = &(*pp)->next)
                if (*pp == a) {
                        *pp = a->next;
                        break;
                }
        timer_remove(a->timer);
        a->timer = NULL;
}

static void ask_free(struct sandbox_ask *a)
{
        json_decref(a->result);
        free(a->error);
        free(a);
}

static void ask_deliver(void *userdata)
{
        struct sandbox_ask *a = userdata;
        if (a->cb)
                a->cb(a->userdata, a->result, a->error ? a->error : a->result ? NULL : "no answer");
        ask_free(a);
}

/* The answer (or why there is none) goes to the caller from the loop. */
static void ask_end(struct sandbox_ask *a, json_t *result, const char *error)
{
        ask_unlink(a);
        a->ended = true;
        a->result = json_incref(result);
        a->error = error ? strdup(error) : NULL;
        loop_defer(a->sb->mgr->loop, &a->d, ask_deliver, a);
}

static void ask_timeout(struct timer *t, void *userdata)
{
        (void)t;
        ask_end(userdata, NULL, "the sandbox's runtime did not answer in time");
}

static void fop_fail(struct sandbox_fop *f, int error, const char *message);
static void fop_free(struct sandbox_fop *f);

/* The last of it, from the loop: after its result was handed over. */
static void sandbox_destroy(void *userdata)
{
        struct sandbox *s = userdata;
        struct sandbox_mgr *m = s->mgr;
        for (struct sandbox **pp = &m->done; *pp; pp = &(*pp)->dnext)
                if (*pp == s) {
                        *pp = s->dnext;
                        break;
                }
        defer_cancel(&s->deliver_d);
        defer_cancel(&s->free_d);
        json_decref(s->res.out_files);
        buf_free(&s->res.out.data);
        buf_free(&s->res.err.data);
        free(s->res.error_type);
        free(s->res.error_message);
        free(s->res.error_traceback);
        free(s->res.container_id);
        free(s->code);
        free(s->image);
        free(s->id);
        free(s);
}

/* Done: out of the manager's lists, nothing of it left running, and freed
 * from the loop once its result is handed over (the result and the struct
 * stay until then). */
static void sandbox_release(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        s->state = S_DONE;
        /* File operations under way end with an error; nothing waits for a
         * freeze any more (the answer to it is ended just below). */
        s->fz_waits = NULL;
        while (s->fops) {
                if (m->freeing)
                        fop_free(s->fops); /* nobody is left to tell */
                else
                        fop_fail(s->fops, -EIO, "the session's sandbox ended first");
        }
        /* Requests to its runtime get their answer: there will be none. */
        while (s->asks) {
                if (m->freeing)
                        sandbox_ask_cancel(s->asks);
                else
                        ask_end(s->asks, NULL, "the sandbox ended before it answered");
        }
        sandbox_unlink(s);
        files_op_cancel(s->fop);
        s->fop = NULL;
        files_clear(s);
        json_decref(s->out_list);
        s->out_list = NULL;
        free(s->interrupt_msg);
        s->interrupt_msg = NULL;
        timer_remove(s->fz_timer);
        s->fz_timer = NULL;
        bridge_run_free(s->bridge);
        s->bridge = NULL;
        engine_request_cancel(s->req);
        s->req = NULL;
        attach_close(s->attach);
        s->attach = NULL;
        timer_remove(s->timer);
        s->timer = NULL;
        line_reader_free(&s->frames);
        line_reader_free(&s->diag);
        s->dnext = m->done;
        m->done = s;
        loop_defer(m->loop, &s->free_d, sandbox_destroy, s);
}

static void run_reset(struct sandbox *s);

static void deliver_now(void *userdata)
{
        struct sandbox *s = userdata;
        struct sandbox_mgr *m = s->mgr;
        s->cb(s->userdata, &s->res);
        /* A kept sandbox forgets the run, unless the callback began the next. */
        if (s->state == S_IDLE && s->delivered)
                run_reset(s);
        /* The caller has its answer: now is the time to top the pool up. */
        pool_refill(m);
}

/* The result is final: the caller hears of it once, from the loop. */
static void deliver(struct sandbox *s)
{
        if (s->delivered)
                return;
        s->delivered = true;
        if (!s->cb)
                return; /* a pool sandbox that never got a request */
        s->res.duration_ms = now_ms() - s->t_start;
        if (s->res.out.total > s->res.out.data.len)
                s->res.out.truncated = true;
        if (s->res.err.total > s->res.err.data.len)
                s->res.err.truncated = true;
        log_info("sandbox %s: %s in %lld ms", s->res.container_id ? s->res.container_id : "-",
                 sandbox_status_name(s->res.status), s->res.duration_ms);
        loop_defer(s->mgr->loop, &s->deliver_d, deliver_now, s);
}

static void slot_release(struct sandbox_mgr *m)
{
        m->active--;
        /* Start queued calls now that a slot is free. */
        while (m->qhead && m->active < m->cfg->max_sandboxes && !m->shutting_down) {
                struct sandbox *q = m->qhead;
                m->qhead = q->qnext;
                if (!m->qhead)
                        m->qtail = NULL;
                m->queued--;
                m->active++;
                q->state = S_CREATING;
                sandbox_step(q);
        }
        mgr_check_drained(m);
        pool_refill(m);
}

static void finish(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        bool held_slot = s->state != S_QUEUED;
        deliver(s);
        sandbox_release(s);
        if (held_slot)
                slot_release(m);
        else
                mgr_check_drained(m);
}

static void send_remove(struct sandbox *s);

static void removed(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        s->req = NULL;
        /* A container that is stopping by itself makes the engine refuse a
         * forced removal for a moment (Podman: "container state improper",
         * Docker: "removal already in progress"); ask again shortly. */
        if ((status == 409 || status == 500) && ++s->remove_tries < 5) {
                log_debug("removing container %s: HTTP %ld (%s); trying again", s->id, status,
                          engine_error_message(body));
                timer_arm(s->timer, 100LL * s->remove_tries);
                return;
        }
        if (status == 0)
                log_warn("removing container %s failed: %s", s->id, e->msg);
        else if (status >= 400 && status != 404)
                log_warn("removing container %s failed: HTTP %ld: %s", s->id, status,
                         engine_error_message(body));
        finish(s);
}

static void send_remove(struct sandbox *s)
{
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", s->id);
        if (engine_request(s->mgr->eng, "DELETE", path, NULL, removed, s, &s->req) < 0) {
                log_warn("cannot remove container %s", s->id);
                finish(s);
        }
}

/* Remove the container (killing it if it runs). The result is delivered at
 * once, unless we are killing it: then only the engine's word that the
 * container is gone lets us tell the caller so. */
static void start_remove(struct sandbox *s)
{
        if (s->state == S_REMOVING)
                return;
        if (s->state == S_READY)
                ready_remove(s);
        run_unfreeze(s);
        attach_close(s->attach);
        s->attach = NULL;
        files_op_cancel(s->fop);
        s->fop = NULL;
        /* Its code is gone: what it asked of MCP servers is withdrawn. */
        bridge_run_free(s->bridge);
        s->bridge = NULL;
        timer_arm(s->timer, 0);
        engine_request_cancel(s->req);
        s->req = NULL;
        s->state = S_REMOVING;
        if (!s->id) {
                finish(s);
                return;
        }
        if (!s->killing)
                deliver(s);
        send_remove(s);
}

static void fail(struct sandbox *s, enum sandbox_status st, const char *type, const char *msg)
{
        /* Only the default image's starts count: a call that asked for
         * another image must not make the pool's calls fail fast. */
        if (st == ST_ENGINE_ERROR && s->state < S_READY && !s->killing && !s->image)
                note_start_failure(s->mgr, msg);
        if (!s->have_result) {
                s->res.status = st;
                set_error(&s->res, type, msg);
                s->have_result = true;
        }
        start_remove(s);
}

static void engine_failed(struct sandbox *s, const char *what, long status, json_t *body,
                          const struct err *e)
{
        char msg[1400];
        if (status == 0)
                snprintf(msg, sizeof(msg), "%s: %s", what, e->msg);
        else
                snprintf(msg, sizeof(msg), "%s: the engine at %s answered HTTP %ld: %s", what,
                         engine_endpoint(s->mgr->eng)->display, status, engine_error_message(body));
        log_warn("%s", msg);
        fail(s, ST_ENGINE_ERROR, "EngineError", msg);
}

/* ---- frames from the runtime */

static void take_result(struct sandbox *s, json_t *r)
{
        const char *st = json_string_value(json_object_get(r, "status"));
        json_t *code = json_object_get(r, "exit_code");
        json_t *error = json_object_get(r, "error");
        s->res.status = !st                          ? ST_ERROR
                        : strcmp(st, "ok") == 0      ? ST_OK
                        : strcmp(st, "oom") == 0     ? ST_OOM
                        : strcmp(st, "timeout") == 0 ? ST_TIMEOUT
                                                     : ST_ERROR;
        if (json_is_integer(code)) {
                s->res.has_exit_code = true;
                s->res.exit_code = (int)json_integer_value(code);
        }
        json_int_t ob = json_integer_value(json_object_get(r, "stdout_bytes"));
        json_int_t eb = json_integer_value(json_object_get(r, "stderr_bytes"));
        if (ob > 0 && (unsigned long long)ob > s->res.out.total)
                s->res.out.total = (unsigned long long)ob;
        if (eb > 0 && (unsigned long long)eb > s->res.err.total)
                s->res.err.total = (unsigned long long)eb;
        if (s->res.status == ST_TIMEOUT) {
                /* The runtime's own limit, a second after ours: this daemon
                 * was late (stopped, or its loop held up). */
                char msg[160];
                snprintf(msg, sizeof(msg),
                         "the code ran longer than its time limit of %g s and was stopped by "
                         "the sandbox's runtime",
                         s->timeout_s);
                set_error(&s->res, "Timeout", msg);
        } else if (json_is_object(error)) {
                set_error(&s->res, json_string_value(json_object_get(error, "type")),
                          json_string_value(json_object_get(error, "message")));
                const char *tb = json_string_value(json_object_get(error, "traceback"));
                free(s->res.error_traceback);
                s->res.error_traceback = tb ? strdup(tb) : NULL;
        } else if (s->res.status == ST_OOM) {
                set_error(&s->res, "MemoryError", "the code exceeded the sandbox memory limit");

        } else if (st && strcmp(st, "killed") == 0) {
                char msg[96];
                json_int_t sig = json_integer_value(json_object_get(r, "signal"));
                snprintf(msg, sizeof(msg), "the code was killed by signal %d (%s)", (int)sig,
                         sig > 0 && sig < 65 ? strsignal((int)sig) : "unknown");
                set_error(&s->res, "Killed", msg);
        }
        json_t *mem = json_object_get(r, "memory_bytes");
        s->res.memory_bytes =
            json_is_integer(mem) && json_integer_value(mem) >= 0 ? json_integer_value(mem) : -1;
        const char *state = json_string_value(json_object_get(r, "state"));
        s->res.state_lost = s->keep && state && strcmp(state, "lost") == 0;
        s->res.restarted = s->keep && json_is_true(json_object_get(r, "restarted"));
        /* What the runtime says it wrote is checked when fetched. */
        json_t *out = json_object_get(r, "out_files");
        json_decref(s->out_list);
        s->out_list = s->want_out && json_is_array(out) ? json_incref(out) : NULL;
        if (s->interrupting != ST_OK) {
                /* We stopped it: say why, and whether the session kept its state. */
                char msg[700];
                snprintf(
                    msg, sizeof(msg), "%s; %s", s->interrupt_msg ? s->interrupt_msg : "stopped",
                    s->res.state_lost ? "its Python state was lost (files in /workspace remain)"
                                      : "the session and its state were kept");
                s->res.status = s->interrupting;
                set_error(&s->res, s->interrupting == ST_TIMEOUT ? "Timeout" : "Cancelled", msg);
                free(s->res.error_traceback);
                s->res.error_traceback = NULL;
        }
        s->have_result = true;
}

static void notify_gone(struct sandbox *s, const char *why)
{
        void (*gone)(void *, const char *) = s->gone;
        s->gone = NULL;
        if (gone && !s->closing)
                gone(s->owner, why);
}

/* Forget a finished run of a kept sandbox (its result was delivered). */
static void run_reset(struct sandbox *s)
{
        bridge_run_free(s->bridge);
        s->bridge = NULL;
        free(s->code);
        s->code = NULL;
        files_op_cancel(s->fop);
        s->fop = NULL;
        files_clear(s);
        json_decref(s->out_list);
        s->out_list = NULL;
        json_decref(s->res.out_files);
        s->res.out_files = NULL;
        s->i_out = 0;
        s->out_bytes = 0;
        buf_free(&s->res.out.data);
        buf_free(&s->res.err.data);
        output_init(&s->res.out, s->mgr->cfg->output_limit);
        output_init(&s->res.err, s->mgr->cfg->output_limit);
        set_error(&s->res, NULL, NULL);
        free(s->res.error_traceback);
        s->res.error_traceback = NULL;
        s->res.status = ST_OK;
        s->res.has_exit_code = false;
        s->res.exit_code = 0;
        s->res.duration_ms = 0;
        s->res.memory_bytes = -1;
        s->res.kept = s->res.state_lost = s->res.restarted = false;
        s->have_result = s->delivered = false;
        s->interrupting = ST_OK;
        free(s->interrupt_msg);
        s->interrupt_msg = NULL;
        s->cb = NULL;
        s->userdata = NULL;
        s->on_output = NULL;
        s->on_progress = NULL;
        s->hook_ud = NULL;
}

/* The run is over (its result taken, or it failed before the code ran): a
 * kept sandbox hands the result over and waits for the next run; any
 * other is removed. */
static void end_run(struct sandbox *s)
{
        timer_arm(s->timer, 0);
        s->exec_pending = false;
        run_unfreeze(s);
        if (!s->keep || s->killing || s->closing || !s->attach || s->mgr->shutting_down) {
                start_remove(s);
                return;
        }
        bridge_run_free(s->bridge); /* what its code asked is withdrawn */
        s->bridge = NULL;
        s->res.kept = true;
        s->state = S_IDLE;
        deliver(s); /* forgets the run once the caller has it */
}

/* The run ends before or without its code: status and message given. */
static void run_failed(struct sandbox *s, enum sandbox_status st, const char *type, const char *msg)
{
        if (!s->have_result) {
                s->res.status = st;
                set_error(&s->res, type, msg);
                s->have_result = true;
        }
        end_run(s);
}

static int send_exec(struct sandbox *s);

static void upload_next(struct sandbox *s);

static void uploaded(void *userdata, const struct files_result *r)
{
        struct sandbox *s = userdata;
        s->fop = NULL;
        if (r->error) {
                run_failed(s, ST_ERROR, "FileError", r->message);
                return;
        }
        s->i_file++;
        upload_next(s);
}

static void upload_next(struct sandbox *s)
{
        if (s->i_file >= s->n_files) {
                files_clear(s);
                run_unfreeze(s); /* the thaw frame goes before the exec */
                exec_when_thawed(s);
                return;
        }
        const struct sandbox_file *f = &s->files[s->i_file];
        int r = files_write(s->mgr->eng, s->id, f->path, f->data, f->len, uploaded, s, &s->fop);
        if (r < 0)
                run_failed(s, ST_ERROR, "FileError", "cannot write the files: out of memory");
}

static void run_frozen(void *userdata, const char *error)
{
        struct sandbox *s = userdata;
        s->run_waiting = false;
        if (error) {
                char msg[600];
                snprintf(msg, sizeof(msg), "cannot stop the session's processes to move files: %s",
                         error);
                run_failed(s, ST_ERROR, "FileError", msg);
                return;
        }
        s->run_frozen = true;
        void (*then)(struct sandbox *) = s->run_then;
        s->run_then = NULL;
        then(s);
}

/* A session's uploads and collection happen with its other processes
 * stopped: code left running in the background must not swap a checked
 * directory for a symlink while the engine (as root) follows the path. A
 * single-use sandbox needs none: no code has run before its uploads, and
 * every process of it is killed before its collection. */
static void run_freeze(struct sandbox *s, void (*then)(struct sandbox *))
{
        if (!s->keep) {
                then(s);
                return;
        }
        s->run_then = then;
        s->run_wait = (struct freeze_wait){.ready = run_frozen, .userdata = s};
        s->run_waiting = true;
        if (freeze_get(s, &s->run_wait) < 0) {
                s->run_waiting = false;
                run_failed(s, ST_ERROR, "FileError",
                           "cannot stop the session's processes to move files: its runtime does "
                           "not answer");
        }
}

static void run_unfreeze(struct sandbox *s)
{
        if (s->run_waiting) {
                s->run_waiting = false;
                freeze_cancel(s, &s->run_wait);
        }
        if (s->run_frozen) {
                s->run_frozen = false;
                freeze_put(s);
        }
}

/* The exec goes when no file operation holds the sandbox frozen: the
 * runtime would hand the request to a stopped worker (and block on it). */
static void exec_when_thawed(struct sandbox *s)
{
        if (s->freezes > 0 || s->fz != FZ_THAWED) {
                s->exec_pending = true; /* thawed() sends it */
                return;
        }
        send_exec(s);
}

/* The sandbox is ready for this run: its files first, then the code. */
static void begin_run(struct sandbox *s)
{
        if (!s->keep && s->n_files == 0) {
                send_exec(s); /* the warm path: nothing can hold a single-use sandbox */
                return;
        }
        s->state = S_UPLOADING; /* until the exec goes: files, or a freeze to wait out */
        long long ms = (long long)ceil(s->timeout_s * 1000);
        timer_arm(s->timer, ms > 0 ? ms : 1);
        if (s->n_files == 0)
                exec_when_thawed(s);
        else
                run_freeze(s, upload_next);
}

/* ---- what the code wrote under /workspace/out */

static void collect_next(struct sandbox *s);

static void out_note(struct sandbox *s, const char *path, json_int_t size, const char *note)
{
        json_array_append_new(s->res.out_files,
                              json_pack("{s:s, s:I, s:s?, s:s}", "path", path, "size", size,
                                        "mime_type", files_mime_type(path), "note", note));
}

static void collected(void *userdata, const struct files_result *r)
{
        struct sandbox *s = userdata;
        s->fop = NULL;
        json_t *f = json_array_get(s->out_list, s->i_out);
        const char *path = json_string_value(json_object_get(f, "path"));
        json_int_t size = json_integer_value(json_object_get(f, "size"));
        if (r->error) {
                out_note(s, path, size, r->message);
        } else {
                struct buf b64;
                buf_init(&b64, (r->len + 2) / 3 * 4 + 1);
                if (base64_encode(&b64, r->data, r->len) == 0) {
                        json_array_append_new(s->res.out_files,
                                              json_pack("{s:s, s:I, s:s?, s:s%}", "path", path,
                                                        "size", (json_int_t)r->len, "mime_type",
                                                        files_mime_type(path), "data",
                                                        b64.data ? b64.data : "", b64.len));
                        s->out_bytes += r->len;
                } else {
                        out_note(s, path, size, "out of memory");
                }
                buf_free(&b64);
        }
        s->i_out++;
        collect_next(s);
}

/* An entry of the runtime's out_files (the container's word), checked:
 * its path under /workspace/out relative to /workspace, or NULL. A path
 * under out/ that corral cannot fetch (a control character in its name)
 * gets the reason in `why` and its relative form in *ret_shown; anything
 * else is malformed and `why` stays empty. */
static const char *out_path(json_t *f, char *full, size_t size, char *why, size_t why_size,
                            const char **ret_shown)
{
        const char *path = json_string_value(json_object_get(f, "path"));
        json_t *bytes = json_object_get(f, "size");
        why[0] = '\0';
        if (!path || !json_is_integer(bytes) || json_integer_value(bytes) < 0)
                return NULL;
        if (files_path(path, false, full, size, why, why_size) < 0) {
                const char *rel = strncmp(path, FILES_ROOT "/", strlen(FILES_ROOT "/")) == 0
                                      ? path + strlen(FILES_ROOT "/")
                                      : path;
                if (strncmp(rel, "out/", 4) != 0 || strstr(rel, "/../") || strstr(rel, "/./"))
                        why[0] = '\0';
                *ret_shown = rel;
                return NULL;
        }
        if (strncmp(full, FILES_ROOT "/out/", strlen(FILES_ROOT "/out/")) != 0)
                return NULL;
        return full + strlen(FILES_ROOT) + 1;
}

/* A file the runtime put in its result (a single-use run's, read by PID 1
 * as the sandbox's user once the code's processes were gone): taken when
 * its base64 is sound, of the size listed and within `max`; else the
 * engine fetches it like any other. */
static bool inline_taken(struct sandbox *s, json_t *f, size_t max)
{
        json_t *data = json_object_get(f, "data");
        json_int_t size = json_integer_value(json_object_get(f, "size"));
        if (!json_is_string(data) || size < 0 || (unsigned long long)size > max ||
            json_string_length(data) != ((size_t)size + 2) / 3 * 4)
                return false;
        struct buf raw;
        buf_init(&raw, (size_t)size);
        bool ok = base64_decode(&raw, json_string_value(data), json_string_length(data)) == 0 &&
                  raw.len == (size_t)size;
        buf_free(&raw);
        if (!ok)
                return false;
        const char *path = json_string_value(json_object_get(f, "path"));
        json_array_append_new(s->res.out_files,
                              json_pack("{s:s, s:I, s:s?, s:O}", "path", path, "size", size,
                                        "mime_type", files_mime_type(path), "data", data));
        s->out_bytes += (unsigned long long)size;
        return true;
}

/* One file at a time, each checked on its way, up to out_max_bytes in all. */
static void collect_next(struct sandbox *s)
{
        const struct config *cfg = s->mgr->cfg;
        while (s->i_out < json_array_size(s->out_list) &&
               json_array_size(s->res.out_files) < OUT_FILES_MAX) {
                json_t *f = json_array_get(s->out_list, s->i_out);
                json_t *size = json_object_get(f, "size");
                char full[FILES_PATH_MAX + 64], why[300];
                const char *shown = NULL;
                if (!out_path(f, full, sizeof(full), why, sizeof(why), &shown)) {
                        if (why[0]) {
                                /* Listed, not lost: the result says why. */
                                char note[400];
                                snprintf(note, sizeof(note),
                                         "not returned: %s; rename it (mv in run_shell) to "
                                         "fetch it",
                                         why);
                                out_note(s, shown, json_integer_value(size), note);
                        } else {
                                log_warn("sandbox %s: ignored a malformed out_files entry",
                                         s->res.container_id);
                        }
                        s->i_out++;
                        continue;
                }
                unsigned long long want = (unsigned long long)json_integer_value(size);
                unsigned long long room = cfg->out_max_bytes - s->out_bytes;
                if (want > room) {
                        char note[200];
                        snprintf(note, sizeof(note),
                                 "not returned: %llu bytes, over what is left of out_max_bytes "
                                 "(%llu); read it with read_file in a session, or raise "
                                 "out_max_bytes",
                                 want, room);
                        out_note(s, full + strlen(FILES_ROOT) + 1, json_integer_value(size), note);
                        s->i_out++;
                        continue;
                }
                /* The entry's path, relative, for the result. */
                json_object_set_new(f, "path", json_string(full + strlen(FILES_ROOT) + 1));
                size_t max = room < cfg->file_max_bytes ? room : cfg->file_max_bytes;
                if (inline_taken(s, f, max)) {
                        s->i_out++;
                        continue;
                }
                if (files_read(s->mgr->eng, s->id, full, max, collected, s, &s->fop) < 0) {
                        out_note(s, full + strlen(FILES_ROOT) + 1, json_integer_value(size),
                                 "out of memory");
                        s->i_out++;
                        continue;
                }
                return;
        }
        run_unfreeze(s);
        end_run(s);
}

static void start_collect(struct sandbox *s)
{
        s->state = S_COLLECTING;
        s->res.out_files = json_array();
        timer_arm(s->timer, COLLECT_MAX_MS);
        run_freeze(s, collect_next);
}

/* ---- frames to and from the runtime */

static int send_frame(struct sandbox *s, json_t *msg)
{
        size_t len;
        char *line = jrpc_encode(msg, &len);
        int r = line && s->attach ? attach_write(s->attach, line, len) : -EIO;
        free(line);
        return r;
}

/* Returns negative when it failed: then s may be gone. */
static int send_exec(struct sandbox *s)
{
        /* Round up: a limit must never become 0, which disarms the timer. */
        long long ms = (long long)ceil(s->timeout_s * 1000);
        if (ms <= 0)
                ms = 1;
        /* The runtime holds the time limit too (a second later), so that the
         * code stops even when this daemon is killed or stopped meanwhile. */
        json_t *params =
            json_pack("{s:s, s:s, s:I, s:I}", "language",
                      s->lang == LANG_PYTHON ? "python" : "shell", "code", s->code, "output_limit",
                      (json_int_t)s->mgr->cfg->output_limit, "time_limit_ms", (json_int_t)ms);
        if (params && s->keep)
                json_object_set_new(params, "keep", json_true());
        /* A single-use run may send its /workspace/out files in its result
         * (up to this much base64), sparing a fetch through the engine. */
        if (params && !s->keep && s->want_out) {
                unsigned long long most = (s->mgr->cfg->out_max_bytes + 2) / 3 * 4;
                if (most > s->mgr->cfg->max_frame / 2)
                        most = s->mgr->cfg->max_frame / 2;
                json_object_set_new(params, "out_inline_max", json_integer((json_int_t)most));
        }
        if (params && s->bridge) {
                bridge_run_set_sandbox(s->bridge, s->res.container_id);
                json_object_set_new(params, "servers", bridge_run_exec_servers(s->bridge));
        }
        /* Each exec its own id: a late notifications/cancelled for an
         * earlier run of a session must not stop this one. */
        if (send_frame(s, jrpc_request(++s->exec_id, "sandbox/exec", params)) < 0) {
                fail(s, ST_ERROR, "FrameError", "the code does not fit in one frame");
                return -1;
        }
        s->state = S_BUSY;
        timer_arm(s->timer, ms);
        return 0;
}

/* A session's run is stopped without losing the session: the runtime
 * interrupts it and answers; past a grace the container goes after all. */
static void interrupt_run(struct sandbox *s, enum sandbox_status why, const char *msg)
{
        if (s->interrupting != ST_OK)
                return;
        s->interrupting = why;
        free(s->interrupt_msg);
        s->interrupt_msg = msg ? strdup(msg) : NULL;
        log_info("sandbox %s: interrupting its run (%s)", s->res.container_id,
                 sandbox_status_name(why));
        send_frame(s, jrpc_notification("notifications/cancelled",
                                        json_pack("{s:I}", "requestId", s->exec_id)));
        timer_arm(s->timer, INTERRUPT_GRACE_MS);
}

static int on_frame(void *userdata, const char *line, size_t len)
{
        struct sandbox *s = userdata;
        if (!line) {
                log_warn("sandbox %s: dropped a frame over %llu bytes", s->res.container_id,
                         s->mgr->cfg->max_frame);
                return 0;
        }
        struct jrpc_msg m;
        json_t *id = NULL;
        struct err e = {0};
        if (jrpc_parse(line, len, &m, &id, &e) < 0) {
                json_decref(id);
                log_warn("sandbox %s: bad frame: %s", s->res.container_id, e.msg);
                return 0;
        }
        int ret = 0;
        if (m.kind == JRPC_NOTIFICATION && strcmp(m.method, "sandbox/output") == 0) {
                const char *stream = json_string_value(json_object_get(m.params, "stream"));
                json_t *data = json_object_get(m.params, "data");
                if (stream && json_is_string(data) && s->state == S_BUSY) {
                        struct sandbox_output *o =
                            strcmp(stream, "stderr") == 0 ? &s->res.err : &s->res.out;
                        const char *p = json_string_value(data);
                        size_t n = json_string_length(data);
                        size_t room = o->data.max - o->data.len;
                        o->total += n;
                        /* Keep what fits, cut at a character boundary so
                         * the kept text stays valid UTF-8. */
                        if (o->truncated)
                                ;
                        else if (n <= room)
                                buf_append(&o->data, p, n);
                        else {
                                buf_append(&o->data, p, utf8_cut(p, room));
                                o->truncated = true;
                        }
                        if (s->on_output)
                                s->on_output(s->hook_ud, o == &s->res.err, p, n);
                }
        } else if (m.kind == JRPC_NOTIFICATION && strcmp(m.method, "corral/progress") == 0) {
                /* The code's own report, relayed by the runtime: untrusted. */
                json_t *done = json_object_get(m.params, "progress");
                json_t *total = json_object_get(m.params, "total");
                json_t *msg = json_object_get(m.params, "message");
                bool valid = json_is_number(done) && isfinite(json_number_value(done)) &&
                             (!total || json_is_null(total) ||
                              (json_is_number(total) && isfinite(json_number_value(total)) &&
                               json_number_value(total) >= 0)) &&
                             (!msg || json_is_null(msg) || json_is_string(msg));
                if (valid && s->on_progress && s->state == S_BUSY)
                        s->on_progress(s->hook_ud, json_number_value(done),
                                       json_is_number(total) ? json_number_value(total) : -1,
                                       json_string_value(msg));
        } else if (m.kind == JRPC_NOTIFICATION && strcmp(m.method, "sandbox/ready") == 0) {
                if (s->state == S_STARTED || s->state == S_STARTING) {
                        if (!s->cb) {
                                pool_ready(s);
                        } else {
                                begin_run(s);
                        }
                }
        } else if ((m.kind == JRPC_RESULT || m.kind == JRPC_ERROR) && json_is_integer(m.id) &&
                   json_integer_value(m.id) == s->exec_id && s->state == S_BUSY) {
                if (m.kind == JRPC_RESULT) {
                        take_result(s, m.result);
                } else {
                        s->res.status = ST_ERROR;
                        set_error(&s->res, "RuntimeError",
                                  json_string_value(json_object_get(m.error, "message")));
                        s->have_result = true;
                }
                if (s->out_list && json_array_size(s->out_list) > 0)
                        start_collect(s);
                else
                        end_run(s);
        } else if ((m.kind == JRPC_RESULT || m.kind == JRPC_ERROR) && json_is_string(m.id)) {
                /* The answer to a sandbox_ask. */
                for (struct sandbox_ask *a = s->asks; a; a = a->next)
                        if (strcmp(a->id, json_string_value(m.id)) == 0) {
                                const char *err =
                                    m.kind == JRPC_ERROR
                                        ? json_string_value(json_object_get(m.error, "message"))
                                        : NULL;
                                ask_end(a, m.kind == JRPC_RESULT ? m.result : NULL,
                                        m.kind == JRPC_ERROR ? (err ? err : "error") : NULL);
                                break;
                        }
        } else if (s->bridge && s->state == S_BUSY &&
                   (m.kind == JRPC_REQUEST || m.kind == JRPC_NOTIFICATION)) {
                /* Its code calls MCP servers; answers may come now or later. */
                bridge_run_handle(s->bridge, &m);
        } else if (m.kind == JRPC_REQUEST) {
                /* No server may be called from this run: say so instead of
                 * leaving it waiting. */
                size_t n;
                char *out = jrpc_encode(
                    jrpc_error(m.id, BRIDGE_DENIED,
                               "this run may call no MCP servers (name them in run_python's "
                               "\"servers\")",
                               json_pack("{s:s}", "type", "PolicyDenied")),
                    &n);
                if (out && attach_write(s->attach, out, n) < 0)
                        log_warn("sandbox %s: stdin queue full", s->res.container_id);
                free(out);
        }
        jrpc_msg_done(&m);
        json_decref(id);
        /* Something above may have ended it: stop reading then. */
        if (!s->attach)
                ret = -1;
        return ret;
}

static int on_diag_line(void *userdata, const char *line, size_t len)
{
        struct sandbox *s = userdata;
        if (s->diag_logged > STDERR_LOG_MAX)
                return 0;
        s->diag_logged += len;
        if (line)
                log_info("sandbox %s stderr: %.*s", s->res.container_id,
                         (int)(len > 1000 ? 1000 : len), line);
        return 0;
}

static void on_attach_open(void *userdata)
{
        struct sandbox *s = userdata;
        sandbox_step(s);
}

static int on_attach_data(void *userdata, int stream, const char *p, size_t n)
{
        struct sandbox *s = userdata;
        if (stream == 2)
                return line_reader_feed(&s->diag, p, n, on_diag_line, s);
        return line_reader_feed(&s->frames, p, n, on_frame, s);
}

static void inspected(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        s->req = NULL;
        (void)e;
        json_t *state = json_object_get(body, "State");
        bool oom = json_is_true(json_object_get(state, "OOMKilled"));
        json_t *code = json_object_get(state, "ExitCode");
        if (status == 200 && json_is_integer(code)) {
                s->res.has_exit_code = true;
                s->res.exit_code = (int)json_integer_value(code);
        }
        char msg[256];
        if (oom) {
                s->res.status = ST_OOM;
                set_error(&s->res, "MemoryError",
                          "the sandbox exceeded its memory limit and was killed");
        } else {
                snprintf(msg, sizeof(msg),
                         "the sandbox ended before reporting a result (exit code %d)",
                         s->res.has_exit_code ? s->res.exit_code : -1);
                s->res.status = ST_ERROR;
                set_error(&s->res, "SandboxDied", msg);
        }
        s->have_result = true;
        start_remove(s);
}

static void start_inspect(struct sandbox *s)
{
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s/json", s->id);
        if (engine_request(s->mgr->eng, "GET", path, NULL, inspected, s, &s->req) < 0)
                fail(s, ST_ERROR, "SandboxDied", "the sandbox ended before reporting a result");
}

static void on_attach_close(void *userdata, const struct err *e)
{
        struct sandbox *s = userdata;
        s->attach = NULL;
        if (s->state == S_IDLE) {
                /* A session's container ended between its runs (OOM
                 * killer, engine restart, `rm -f`): its owner hears why. */
                char why[1300];
                snprintf(why, sizeof(why), "its container ended between calls (%s)",
                         e ? e->msg : "the container exited");
                log_warn("session sandbox %s: %s", s->res.container_id, why);
                notify_gone(s, why);
                start_remove(s);
                return;
        }
        if (s->state == S_READY) {
                /* Died while waiting in the pool (engine restart, OOM killer,
                 * someone's `rm -f`): it never gets a call. Replace it. */
                struct sandbox_mgr *m = s->mgr;
                log_warn("ready sandbox %s ended by itself; replacing it", s->res.container_id);
                start_remove(s);
                pool_refill(m);
                return;
        }
        if (s->killing || s->have_result)
                return;
        if (e) {
                char msg[1200];
                snprintf(msg, sizeof(msg), "lost the sandbox's stream: %s", e->msg);
                fail(s, ST_ENGINE_ERROR, "EngineError", msg);
                return;
        }
        /* EOF without a result: the container died. Ask the engine why,
         * once the start request (if still out) has come back: s->req
         * holds one request at a time. */
        if (s->req)
                s->stream_ended = true;
        else
                start_inspect(s);
}

static const struct attach_ops attach_ops = {
    .on_open = on_attach_open,
    .on_data = on_attach_data,
    .on_close = on_attach_close,
};

static void created(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        s->req = NULL;
        if (status == 404 || (status >= 400 && strstr(engine_error_message(body), "image"))) {
                char msg[1400];
                snprintf(msg, sizeof(msg),
                         "the sandbox image \"%s\" is not present in the engine at %s (%s): "
                         "build it with `corral image build`, or set CORRAL_IMAGE to an image "
                         "that has python3",
                         s->mgr->cfg->image, engine_endpoint(s->mgr->eng)->display,
                         engine_error_message(body));
                log_warn("%s", msg);
                fail(s, ST_ENGINE_ERROR, "ImageMissing", msg);
                return;
        }
        const char *id = json_string_value(json_object_get(body, "Id"));
        if (status != 201 || !id || strlen(id) > 128) {
                engine_failed(s, "creating the sandbox failed", status, body, e);
                return;
        }
        s->id = strdup(id);
        s->res.container_id = strndup(id, 12);
        if (s->killing) {
                start_remove(s);
                return;
        }
        s->state = S_ATTACHING;
        sandbox_step(s);
}

static void probed(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        s->req = NULL;
        if (s->killing) {
                start_remove(s);
                return;
        }
        if (status != 200) {
                engine_failed(s, "asking the engine for its version failed", status, body, e);
                return;
        }
        sandbox_step(s); /* creating, now that the engine's kind is known */
}

static void started(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        s->req = NULL;
        if (status != 204 && status != 304) {
                engine_failed(s, "starting the sandbox failed", status, body, e);
                return;
        }
        if (s->state == S_STARTING)
                s->state = S_STARTED;
        if (s->stream_ended && !s->have_result)
                start_inspect(s);
}

static void on_timer(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        char msg[160];
        (void)t;
        if (s->state == S_REMOVING) {
                send_remove(s);
        } else if (s->state == S_BUSY && s->keep && s->interrupting == ST_OK) {
                snprintf(msg, sizeof(msg), "the code ran longer than its time limit of %g s",
                         s->timeout_s);
                interrupt_run(s, ST_TIMEOUT, msg);
        } else if (s->state == S_BUSY && s->keep) {
                /* The runtime did not stop the run: the session goes. */
                snprintf(msg, sizeof(msg),
                         "%s; it did not stop when interrupted, so the session's sandbox was "
                         "removed",
                         s->interrupt_msg ? s->interrupt_msg : "the run was stopped");
                sandbox_kill(s, s->interrupting, msg);
        } else if (s->state == S_BUSY) {
                snprintf(msg, sizeof(msg),
                         "the code ran longer than its time limit of %g s and was killed",
                         s->timeout_s);
                sandbox_kill(s, ST_TIMEOUT, msg);
        } else if (s->state == S_UPLOADING) {
                files_op_cancel(s->fop);
                s->fop = NULL;
                snprintf(msg, sizeof(msg),
                         "the code could not start within its time limit of %g s: writing its "
                         "files into /workspace, or another file operation on the session, "
                         "took that long",
                         s->timeout_s);
                if (s->keep)
                        run_failed(s, ST_TIMEOUT, "Timeout", msg);
                else
                        sandbox_kill(s, ST_TIMEOUT, msg);
        } else if (s->state == S_COLLECTING) {
                files_op_cancel(s->fop);
                s->fop = NULL;
                log_warn("sandbox %s: fetching /workspace/out took over %d ms; giving up",
                         s->res.container_id, COLLECT_MAX_MS);
                for (; s->i_out < json_array_size(s->out_list) &&
                       json_array_size(s->res.out_files) < OUT_FILES_MAX;
                     s->i_out++) {
                        json_t *f = json_array_get(s->out_list, s->i_out);
                        char full[FILES_PATH_MAX + 64], why[300];
                        const char *shown = NULL;
                        const char *path =
                            out_path(f, full, sizeof(full), why, sizeof(why), &shown);
                        if (!path && why[0])
                                path = shown;
                        if (path)
                                out_note(s, path, json_integer_value(json_object_get(f, "size")),
                                         "not returned: fetching it took too long");
                }
                end_run(s);
        } else {
                snprintf(msg, sizeof(msg),
                         "the sandbox did not start within %g s: check the engine with "
                         "`corral doctor`",
                         s->mgr->cfg->start_timeout_s);
                if (!s->image)
                        note_start_failure(s->mgr, msg);
                sandbox_kill(s, ST_ENGINE_ERROR, msg);
        }
}

static void sandbox_step(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        struct err e = {0};
        char path[256];
        int r;
        switch (s->state) {
        case S_CREATING: {
                timer_arm(s->timer, (long long)(m->cfg->start_timeout_s * 1000));
                if (engine_kind(m->eng) == ENGINE_UNKNOWN) {
                        /* Once per engine: the create body depends on it. */
                        r = engine_probe(m->eng, probed, s, &s->req);
                        if (r < 0)
                                fail(s, ST_ENGINE_ERROR, "EngineError",
                                     "cannot start an engine request");
                        return;
                }
                struct sandbox_spec spec = {
                    .image = s->image, .mounts = m->mounts, .preload = s->pooled && !s->cb};
                json_t *body = sandbox_create_body(m->cfg, &m->profile, m->instance,
                                                   corral_runtime_src, &spec, engine_kind(m->eng));
                if (!body) {
                        fail(s, ST_ERROR, "InternalError", "cannot build the container spec");
                        return;
                }
                r = engine_request(m->eng, "POST", "/containers/create", body, created, s, &s->req);
                if (r < 0)
                        fail(s, ST_ENGINE_ERROR, "EngineError", "cannot start an engine request");
                return;
        }
        case S_ATTACHING:
                r = attach_open(m->eng, s->id, &attach_ops, s, 2 * m->cfg->max_frame, &s->attach,
                                &e);
                if (r < 0) {
                        engine_failed(s, "attaching to the sandbox failed", 0, NULL, &e);
                        return;
                }
                /* on_attach_open moves on to starting. */
                s->state = S_STARTING;
                return;
        case S_STARTING:
                snprintf(path, sizeof(path), "/containers/%s/start", s->id);
                r = engine_request(m->eng, "POST", path, NULL, started, s, &s->req);
                if (r < 0)
                        fail(s, ST_ENGINE_ERROR, "EngineError", "cannot start an engine request");
                return;
        default:
                return;
        }
}

static void sandbox_kill(struct sandbox *s, enum sandbox_status why, const char *msg)
{
        if (s->state == S_REMOVING || s->state == S_DONE)
                return;
        if (!s->have_result) {
                s->res.status = why;
                set_error(&s->res,
                          why == ST_TIMEOUT     ? "Timeout"
                          : why == ST_CANCELLED ? "Cancelled"
                                                : "EngineError",
                          msg);
                s->have_result = true;
        }
        if (s->state == S_IDLE)
                notify_gone(s, msg ? msg : "it was removed");
        if (s->state == S_QUEUED) {
                struct sandbox **pp = &s->mgr->qhead, *prev = NULL;
                while (*pp && *pp != s) {
                        prev = *pp;
                        pp = &(*pp)->qnext;
                }
                if (*pp) {
                        *pp = s->qnext;
                        if (s->mgr->qtail == s)
                                s->mgr->qtail = prev;
                        s->mgr->queued--;
                }
                finish(s);
                return;
        }
        /* The result waits until the engine confirms the container is gone. */
        s->killing = true;
        if (s->state == S_CREATING && s->req)
                return; /* created() removes it once its id is known */
        start_remove(s);
}

void sandbox_cancel(struct sandbox *s)
{
        if (s->keep && s->state == S_BUSY) {
                interrupt_run(s, ST_CANCELLED, "the call was cancelled");
                return;
        }
        if (s->keep && s->state == S_UPLOADING) {
                files_op_cancel(s->fop);
                s->fop = NULL;
                run_failed(s, ST_CANCELLED, "Cancelled",
                           "the call was cancelled before its code ran");
                return;
        }
        if (s->keep && (s->state == S_COLLECTING || s->state == S_IDLE))
                return; /* its code has ended: nothing to stop */
        sandbox_kill(s, ST_CANCELLED, "the call was cancelled and its sandbox killed");
}

bool sandbox_idle(const struct sandbox *s)
{
        /* Not while the last result is still on its way to the caller. */
        return s->state == S_IDLE && !s->closing && !defer_queued(&s->deliver_d);
}

void sandbox_close(struct sandbox *s)
{
        s->closing = true;
        sandbox_kill(s, ST_CANCELLED, "the session was closed while this call ran");
}

void sandbox_set_owner(struct sandbox *s, void (*gone)(void *owner, const char *why), void *owner)
{
        s->gone = gone;
        s->owner = owner;
}

const char *sandbox_container(const struct sandbox *s)
{
        return s->id;
}

const struct sandbox_profile *sandbox_mgr_profile(const struct sandbox_mgr *m)
{
        return &m->profile;
}

struct engine *sandbox_mgr_engine(const struct sandbox_mgr *m)
{
        return m->eng;
}

int sandbox_ask(struct sandbox *s, const char *method, json_t *params, sandbox_ask_cb cb,
                void *userdata, struct sandbox_ask **ret)
{
        if (!s->attach || s->state < S_READY || s->state >= S_REMOVING) {
                json_decref(params);
                return -ENOTCONN;
        }
        struct sandbox_ask *a = calloc(1, sizeof(*a));
        if (!a) {
                json_decref(params);
                return -ENOMEM;
        }
        a->sb = s;
        a->cb = cb;
        a->userdata = userdata;
        if (timer_add(s->mgr->loop, ask_timeout, a, &a->timer) == 0)
                timer_arm(a->timer, ASK_TIMEOUT_MS);
        /* String ids: the exec requests have the integers. */
        snprintf(a->id, sizeof(a->id), "ask-%u", ++s->ask_seq);
        json_t *msg = json_pack("{s:s, s:s, s:s, s:o}", "jsonrpc", "2.0", "id", a->id, "method",
                                method, "params", params ? params : json_object());
        if (!msg || send_frame(s, msg) < 0) {
                timer_remove(a->timer);
                free(a);
                return -ENOBUFS;
        }
        a->next = s->asks;
        s->asks = a;
        *ret = a;
        return 0;
}

void sandbox_ask_cancel(struct sandbox_ask *a)
{
        if (!a)
                return;
        if (a->ended)
                defer_cancel(&a->d); /* its answer is not handed over */
        else
                ask_unlink(a);
        ask_free(a);
}

/* ---- freezing a kept sandbox while its files move */

static void thaw(struct sandbox *s);
static void thawed(struct sandbox *s);
static void freeze_renew(struct timer *t, void *userdata);

static void freeze_answer(void *userdata, json_t *result, const char *error)
{
        struct sandbox *s = userdata;
        struct freeze_wait *w = s->fz_waits;
        s->fz_waits = NULL;
        bool frozen = result && json_is_true(json_object_get(result, "frozen"));
        s->fz = frozen ? FZ_FROZEN : FZ_THAWED;
        if (frozen && (s->fz_timer || timer_add(s->mgr->loop, freeze_renew, s, &s->fz_timer) == 0))
                timer_arm(s->fz_timer, FREEZE_RENEW_MS);
        if (!frozen) {
                for (struct freeze_wait *x = w; x; x = x->next)
                        s->freezes--; /* each gives up its hold */
        } else if (s->freezes == 0) {
                thaw(s); /* everyone gave up meanwhile */
                return;
        }
        for (struct freeze_wait *next; w; w = next) {
                next = w->next;
                w->ready(w->userdata, frozen ? NULL : error ? error : "no answer");
        }
        if (!frozen && s->state != S_DONE)
                thawed(s); /* a run waiting for the freeze to end need not wait */
}

/* Take a hold on the freeze: w->ready follows (at once when frozen). */
static int freeze_get(struct sandbox *s, struct freeze_wait *w)
{
        s->freezes++;
        if (s->fz == FZ_FROZEN) {
                w->ready(w->userdata, NULL);
                return 0;
        }
        w->next = s->fz_waits;
        s->fz_waits = w;
        if (s->fz == FZ_THAWED) {
                struct sandbox_ask *a;
                if (sandbox_ask(s, "sandbox/freeze", NULL, freeze_answer, s, &a) < 0) {
                        s->fz_waits = w->next;
                        s->freezes--;
                        return -ENOTCONN;
                }
                s->fz = FZ_FREEZING;
        }
        return 0;
}

static void freeze_put(struct sandbox *s)
{
        if (--s->freezes == 0 && s->fz == FZ_FROZEN)
                thaw(s);
}

static void thaw(struct sandbox *s)
{
        struct sandbox_ask *a;
        /* The answer is not waited for: frames are in order, so whatever is
         * sent after the thaw finds the processes going again. */
        if (sandbox_ask(s, "sandbox/thaw", NULL, NULL, NULL, &a) < 0)
                log_warn("sandbox %s: cannot send sandbox/thaw (its runtime thaws by itself "
                         "in 30 s)",
                         s->res.container_id);
        s->fz = FZ_THAWED;
        timer_arm(s->fz_timer, 0);
        thawed(s);
}

/* A run that waited for file operations to end goes on. */
static void thawed(struct sandbox *s)
{
        if (s->exec_pending && s->freezes == 0 && s->fz == FZ_THAWED && s->state == S_UPLOADING) {
                s->exec_pending = false;
                send_exec(s);
        }
}

/* The runtime lifts a freeze by itself after 30 s (so that a lost daemon
 * cannot leave the code stopped): a file operation that takes longer
 * renews it. */
static void freeze_renew(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        struct sandbox_ask *a;
        if (s->fz != FZ_FROZEN)
                return;
        if (sandbox_ask(s, "sandbox/freeze", NULL, NULL, NULL, &a) < 0)
                log_warn("sandbox %s: cannot renew its freeze", s->res.container_id);
        timer_arm(t, FREEZE_RENEW_MS);
}

static void freeze_cancel(struct sandbox *s, struct freeze_wait *w)
{
        for (struct freeze_wait **pp = &s->fz_waits; *pp; pp = &(*pp)->next)
                if (*pp == w) {
                        *pp = w->next;
                        s->freezes--;
                        return;
                }
}

/* Out of the sandbox's hands: its freeze wait, file operation and hold
 * given up. */
static void fop_detach(struct sandbox_fop *f)
{
        struct sandbox *s = f->sb;
        for (struct sandbox_fop **pp = &s->fops; *pp; pp = &(*pp)->next)
                if (*pp == f) {
                        *pp = f->next;
                        break;
                }
        if (f->waiting)
                freeze_cancel(s, &f->wait);
        f->waiting = false;
        files_op_cancel(f->op);
        f->op = NULL;
        if (f->frozen)
                freeze_put(s);
        f->frozen = false;
}

static void fop_free(struct sandbox_fop *f)
{
        if (!f->failed)
                fop_detach(f);
        defer_cancel(&f->d);
        free(f->data);
        free(f);
}

/* The engine answered (from the loop): thawed before the answer goes out. */
static void fop_done(void *userdata, const struct files_result *r)
{
        struct sandbox_fop *f = userdata;
        f->op = NULL;
        fop_detach(f);
        f->cb(f->userdata, r);
        free(f->data);
        free(f);
}

static void fop_failed(void *userdata)
{
        struct sandbox_fop *f = userdata;
        struct files_result r = {.error = f->error, .message = f->message, .path = f->path};
        f->cb(f->userdata, &r);
        fop_free(f);
}

/* The operation fails: the caller hears of it from the loop. */
static void fop_fail(struct sandbox_fop *f, int error, const char *message)
{
        struct loop *l = f->sb->mgr->loop;
        fop_detach(f);
        f->failed = true;
        f->error = error;
        snprintf(f->message, sizeof(f->message), "%s", message);
        loop_defer(l, &f->d, fop_failed, f);
}

static void fop_frozen(void *userdata, const char *error)
{
        struct sandbox_fop *f = userdata;
        struct sandbox *s = f->sb;
        f->waiting = false;
        if (error) {
                char msg[600];
                snprintf(msg, sizeof(msg),
                         "cannot stop the session's processes to move the file: %s", error);
                fop_fail(f, -EIO, msg);
                return;
        }
        f->frozen = true;
        int r = f->write
                    ? files_write(s->mgr->eng, s->id, f->path, f->data, f->len, fop_done, f, &f->op)
                    : files_read(s->mgr->eng, s->id, f->path, f->max, fop_done, f, &f->op);
        if (r < 0)
                fop_fail(f, -ENOMEM, "out of memory");
}

static int fop_start(struct sandbox *s, bool write, const char *path, const void *data, size_t len,
                     size_t max, files_cb cb, void *userdata, struct sandbox_fop **ret)
{
        if (!s->id || !s->attach || !s->mgr->eng || s->state < S_READY || s->state >= S_REMOVING ||
            strlen(path) >= sizeof(((struct sandbox_fop *)0)->path))
                return -ENOTCONN;
        struct sandbox_fop *f = calloc(1, sizeof(*f));
        if (!f || (write && !(f->data = malloc(len ? len : 1)))) {
                free(f);
                return -ENOMEM;
        }
        f->sb = s;
        f->write = write;
        snprintf(f->path, sizeof(f->path), "%s", path);
        if (write)
                memcpy(f->data, data, len);
        f->len = len;
        f->max = max;
        f->cb = cb;
        f->userdata = userdata;
        f->next = s->fops;
        s->fops = f;
        f->wait = (struct freeze_wait){.ready = fop_frozen, .userdata = f};
        f->waiting = true;
        int r = freeze_get(s, &f->wait);
        if (r < 0) {
                f->waiting = false;
                fop_free(f);
                return r;
        }
        *ret = f;
        return 0;
}

int sandbox_read_file(struct sandbox *s, const char *path, size_t max, files_cb cb, void *userdata,
                      struct sandbox_fop **ret)
{
        return fop_start(s, false, path, NULL, 0, max, cb, userdata, ret);
}

int sandbox_write_file(struct sandbox *s, const char *path, const void *data, size_t len,
                       files_cb cb, void *userdata, struct sandbox_fop **ret)
{
        return fop_start(s, true, path, data, len, 0, cb, userdata, ret);
}

void sandbox_fop_cancel(struct sandbox_fop *f)
{
        if (f)
                fop_free(f);
}

static struct engine *mgr_engine(struct sandbox_mgr *m, struct err *e)
{
        if (m->eng)
                return m->eng;
        /* No engine at start-up: look again, it may have been started since. */
        char *url = NULL;
        if (engine_discover(&url, e) < 0)
                return NULL;
        int r = engine_new(m->loop, url, 4 << 20, &m->eng, e);
        if (r == 0) {
                m->owns_eng = true;
                log_info("using the container engine at %s", url);
        }
        free(url);
        return r < 0 ? NULL : m->eng;
}

/* A pool sandbox on its way to ready, with no call yet. */
static bool pool_starting(const struct sandbox *s)
{
        return s->pooled && !s->cb && !s->killing && s->state != S_QUEUED && s->state < S_READY;
}

/* Sandboxes starting for the pool, and sandboxes with a call. */
static void pool_counts(const struct sandbox_mgr *m, long *ret_starting, long *ret_busy)
{
        long starting = 0, busy = 0;
        for (const struct sandbox *s = m->all; s; s = s->next) {
                if (pool_starting(s))
                        starting++;
                else if (s->cb && s->state >= S_CREATING && s->state <= S_COLLECTING)
                        busy++;
        }
        *ret_starting = starting;
        *ret_busy = busy;
}

static struct sandbox *sandbox_alloc(struct sandbox_mgr *m)
{
        struct sandbox *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->mgr = m;
        s->t_created = s->t_start = now_ms();
        output_init(&s->res.out, m->cfg->output_limit);
        output_init(&s->res.err, m->cfg->output_limit);
        line_reader_init(&s->frames, m->cfg->max_frame);
        line_reader_init(&s->diag, 4096);
        s->next = m->all;
        if (m->all)
                m->all->prev = s;
        m->all = s;
        if (timer_add(m->loop, on_timer, s, &s->timer) < 0) {
                sandbox_release(s);
                return NULL;
        }
        return s;
}

/* Frames the bridge sends to this sandbox's runtime. */
static void bridge_send(void *userdata, json_t *msg)
{
        struct sandbox *s = userdata;
        json_t *id = json_incref(json_object_get(msg, "id"));
        size_t n;
        char *line = jrpc_encode(msg, &n);
        if (line && s->attach && attach_write(s->attach, line, n) < 0) {
                /* The code does not read its answers: a short error still
                 * fits (the queue keeps room), so no call waits forever. */
                free(line);
                line = jrpc_encode(jrpc_error(id, BRIDGE_TOO_LARGE,
                                              "the answer does not fit in the sandbox's input "
                                              "queue; too many large answers are waiting",
                                              json_pack("{s:s}", "type", "TooLarge")),
                                   &n);
                if (line && attach_write(s->attach, line, n) < 0)
                        log_warn("sandbox %s: dropped an answer to its code (input queue full)",
                                 s->res.container_id);
        }
        free(line);
        json_decref(id);
}

const struct sandbox_result *sandbox_partial(const struct sandbox *s)
{
        return &s->res;
}

/* Give s its one request. */
static int assign(struct sandbox *s, const struct sandbox_request *req, sandbox_done_cb cb,
                  void *userdata)
{
        if (req->servers && json_array_size(req->servers) > 0 && s->mgr->bridge &&
            bridge_run_new(s->mgr->bridge, req->servers, bridge_send, s, &s->bridge) < 0)
                return -ENOMEM;
        s->code = strdup(req->code);
        if (s->code && req->n_files) {
                s->files = calloc(req->n_files, sizeof(*s->files));
                for (size_t i = 0; s->files && i < req->n_files; i++, s->n_files++) {
                        const struct sandbox_file *f = &req->files[i];
                        char *path = strdup(f->path), *data = malloc(f->len ? f->len : 1);
                        if (!path || !data) {
                                free(path);
                                free(data);
                                break;
                        }
                        memcpy(data, f->data, f->len);
                        s->files[i] =
                            (struct sandbox_file){.path = path, .data = data, .len = f->len};
                }
        }
        if (!s->code || s->n_files != req->n_files) {
                /* A ready sandbox stays in the pool for the next call. */
                bridge_run_free(s->bridge);
                s->bridge = NULL;
                free(s->code);
                s->code = NULL;
                files_clear(s);
                return -ENOMEM;
        }
        s->keep = s->keep || req->keep;
        s->want_out = req->want_out;
        s->lang = req->lang;
        s->timeout_s = req->timeout_s;
        s->cb = cb;
        s->userdata = userdata;
        s->on_output = req->on_output;
        s->on_progress = req->on_progress;
        s->hook_ud = req->hook_userdata ? req->hook_userdata : userdata;
        s->t_start = now_ms();
        return 0;
}

int sandbox_exec(struct sandbox *s, const struct sandbox_request *req, sandbox_done_cb cb,
                 void *userdata)
{
        if (!sandbox_idle(s) || s->mgr->shutting_down)
                return -EBUSY;
        if (s->delivered)
                run_reset(s);
        int r = assign(s, req, cb, userdata);
        if (r < 0)
                return r;
        s->mgr->last_call_ms = now_ms();
        begin_run(s);
        return 0;
}

/* Refused before anything started (it holds no slot); the caller hears of
 * it from the loop, like of any result. */
static void refuse(struct sandbox *s, const char *type, const char *msg)
{
        s->state = S_QUEUED;
        s->res.status = ST_ENGINE_ERROR;
        set_error(&s->res, type, msg);
        s->have_result = true;
        finish(s);
}

int sandbox_run(struct sandbox_mgr *m, const struct sandbox_request *req, sandbox_done_cb cb,
                void *userdata, struct sandbox **ret)
{
        if (m->shutting_down)
                return -ESHUTDOWN;
        m->last_call_ms = now_ms();
        /* The pool holds the default image: a call for another gets a
         * sandbox made for it. */
        bool other = req->image && strcmp(req->image, m->cfg->image) != 0;
        /* The warm path: a ready sandbox, taken in constant time. */
        struct sandbox *s = other ? NULL : m->ready;
        if (s) {
                if (assign(s, req, cb, userdata) < 0)
                        return -ENOMEM;
                m->ready = s->rnext;
                s->rnext = NULL;
                m->n_ready--;
                m->hits++;
                *ret = s;
                s->state = S_STARTED; /* as if its ready frame came now */
                begin_run(s);
                /* No refill now: starting containers would take the CPU from
                 * this call. It follows the answer (deliver). */
                return 0;
        }
        /* A pool sandbox already on its way: it will run this call. */
        for (s = other ? NULL : m->all; s && !pool_starting(s); s = s->next)
                ;
        if (s) {
                if (assign(s, req, cb, userdata) < 0)
                        return -ENOMEM;
                m->misses++;
                *ret = s;
                pool_refill(m);
                return 0;
        }
        if (m->active >= m->cfg->max_sandboxes && m->queued >= m->cfg->max_queue)
                return -EBUSY;
        s = sandbox_alloc(m);
        if (!s || (other && !(s->image = strdup(req->image))) || assign(s, req, cb, userdata) < 0) {
                if (s) {
                        s->cb = NULL; /* nobody to tell */
                        sandbox_release(s);
                }
                return -ENOMEM;
        }
        m->misses++;
        *ret = s;
        struct err e = {0};
        if (!mgr_engine(m, &e)) {
                refuse(s, "EngineError", e.msg);
                return 0;
        }
        /* Starts keep failing (image gone, engine broken): say why at once
         * instead of making every call wait for the same failure. Past the
         * back-off a call starts a sandbox again and so probes the cause
         * (the pool probes too, when there is one). */
        if (m->consecutive_failures >= POOL_FAIL_FAST && now_ms() < m->retry_at_ms) {
                refuse(s, "EngineError", m->last_error);
                return 0;
        }
        if (m->active >= m->cfg->max_sandboxes) {
                s->state = S_QUEUED;
                if (m->qtail)
                        m->qtail->qnext = s;
                else
                        m->qhead = s;
                m->qtail = s;
                m->queued++;
                return 0;
        }
        m->active++;
        s->state = S_CREATING;
        sandbox_step(s);
        pool_refill(m);
        return 0;
}

/* ---- leftovers of earlier instances */

static bool owner_alive(json_t *labels)
{
        const struct identity *me = host_identity();
        const char *boot = json_string_value(json_object_get(labels, "io.corral.boot"));
        const char *pid_s = json_string_value(json_object_get(labels, "io.corral.pid"));
        if (boot && strcmp(boot, me->boot) != 0)
                return false; /* the machine rebooted since */
        long pid = pid_s ? strtol(pid_s, NULL, 10) : 0;
        if (pid <= 0)
                return false;
        char path[64], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        bool ok = fgets(comm, sizeof(comm), f) && strncmp(comm, "corral", 6) == 0;
        fclose(f);
        return ok;
}

struct leftover {
        struct sandbox_mgr *mgr;
        struct leftover *next; /* mgr->leftovers */
        struct timer *timer;
        int tries;
        char id[129];
};

static void leftover_remove(struct leftover *lo);

static void leftover_free(struct leftover *lo)
{
        for (struct leftover **pp = &lo->mgr->leftovers; *pp; pp = &(*pp)->next)
                if (*pp == lo) {
                        *pp = lo->next;
                        break;
                }
        timer_remove(lo->timer);
        free(lo);
}

static void swept_one(void *userdata, long status, json_t *body, const struct err *e)
{
        struct leftover *lo = userdata;
        /* As for our own removals: an engine refuses a forced removal for a
         * moment while a container stops by itself. */
        if ((status == 409 || status == 500) && ++lo->tries < 5 && lo->timer) {
                timer_arm(lo->timer, 200LL * lo->tries);
                return;
        }
        if (status == 204 || status == 200 || status == 404)
                log_info("removed container %.12s left behind by an earlier corral", lo->id);
        else
                log_warn("removing leftover container %.12s failed: %s", lo->id,
                         status ? engine_error_message(body) : e->msg);
        leftover_free(lo);
}

static void leftover_tick(struct timer *t, void *userdata)
{
        (void)t;
        leftover_remove(userdata);
}

static void leftover_remove(struct leftover *lo)
{
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", lo->id);
        if (engine_request(lo->mgr->eng, "DELETE", path, NULL, swept_one, lo, NULL) < 0)
                leftover_free(lo);
}

static void swept(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox_mgr *m = userdata;
        if (status != 200 || !json_is_array(body)) {
                log_warn("cannot list containers to remove leftovers: %s",
                         status ? engine_error_message(body) : e->msg);
                return;
        }
        size_t i;
        json_t *c;
        json_array_foreach(body, i, c)
        {
                json_t *labels = json_object_get(c, "Labels");
                const char *id = json_string_value(json_object_get(c, "Id"));
                const char *host = json_string_value(json_object_get(labels, "io.corral.host"));
                const char *inst = json_string_value(json_object_get(labels, "io.corral.instance"));
                /* Labels, not names, decide: another host's containers on a
                 * shared engine and live instances' are left alone. */
                if (!id || strlen(id) > 128 || (inst && strcmp(inst, m->instance) == 0) ||
                    (host && strcmp(host, host_identity()->host) != 0) || owner_alive(labels))
                        continue;
                struct leftover *lo = calloc(1, sizeof(*lo));
                if (!lo)
                        continue;
                lo->mgr = m;
                lo->next = m->leftovers;
                m->leftovers = lo;
                snprintf(lo->id, sizeof(lo->id), "%s", id);
                if (timer_add(m->loop, leftover_tick, lo, &lo->timer) < 0)
                        lo->timer = NULL; /* then no retry */
                leftover_remove(lo);
        }
}

void sandbox_mgr_sweep(struct sandbox_mgr *m)
{
        if (!m->eng)
                return;
        /* filters={"label":["io.corral.owner=corral"]}, URL-encoded */
        engine_request(m->eng, "GET",
                       "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22io.corral.owner%3D"
                       "corral%22%5D%7D",
                       NULL, swept, m, NULL);
}

/* ---- the warm pool */

static void pool_spawn(struct sandbox_mgr *m)
{
        struct sandbox *s = sandbox_alloc(m);
        if (!s)
                return;
        s->pooled = true;
        m->active++;
        s->state = S_CREATING;
        sandbox_step(s);
}

/* Start sandboxes until the pool holds what the load asks for: pool_min
 * spare beyond the calls running now, at most pool_max, no more than
 * pool_max_starting at once, never while calls wait for a slot. */
static void pool_refill(struct sandbox_mgr *m)
{
        if (!m->pool_on || m->shutting_down || m->queued > 0 || !m->eng)
                return;
        long starting, busy;
        pool_counts(m, &starting, &busy);
        long target = busy + m->pool_min;
        if (target > m->pool_max)
                target = m->pool_max;
        if (target < m->pool_min)
                target = m->pool_min;
        long room = m->cfg->pool_max_starting - starting;
        if (m->consecutive_failures > 0) {
                /* Failing: one probe at a time, after a back-off. */
                if (now_ms() < m->retry_at_ms || starting > 0)
                        return;
                room = 1;
        }
        while (room-- > 0 && m->n_ready + starting < target && m->active < m->cfg->max_sandboxes) {
                pool_spawn(m);
                starting++;
        }
}

static void pool_ready(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        long long ms = now_ms() - s->t_created;
        m->refill_ms[m->n_refill % ARRAY_SIZE(m->refill_ms)] = ms;
        m->n_refill++;
        m->consecutive_failures = 0;
        timer_arm(s->timer, 0); /* the start bound no longer applies */
        s->state = S_READY;
        s->rnext = m->ready;
        m->ready = s;
        m->n_ready++;
        log_debug("sandbox %s ready for the pool in %lld ms", s->res.container_id, ms);
}

static void ready_remove(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        for (struct sandbox **pp = &m->ready; *pp; pp = &(*pp)->rnext)
                if (*pp == s) {
                        *pp = s->rnext;
                        s->rnext = NULL;
                        m->n_ready--;
                        return;
                }
}

/* A start failed for a reason the engine gave: remember it, back off. */
static void note_start_failure(struct sandbox_mgr *m, const char *msg)
{
        m->failures++;
        m->consecutive_failures++;
        snprintf(m->last_error, sizeof(m->last_error), "%s", msg ? msg : "sandbox start failed");
        utf8_scrub(m->last_error);
        int shift = m->consecutive_failures < 5 ? m->consecutive_failures : 5;
        m->retry_at_ms = now_ms() + (250LL << shift); /* 0.5 s doubling to 8 s */
}

static void on_tick(struct timer *t, void *userdata)
{
        struct sandbox_mgr *m = userdata;
        timer_arm(t, 1000);
        if (m->shutting_down)
                return;
        /* Idle: shrink to pool_min. */
        if (now_ms() - m->last_call_ms > (long long)(m->cfg->pool_idle_s * 1000))
                while (m->n_ready > m->pool_min) {
                        struct sandbox *s = m->ready;
                        log_debug("pool idle: removing ready sandbox %s", s->res.container_id);
                        sandbox_kill(s, ST_CANCELLED, "the pool shrank");
                }
        pool_refill(m);
}

void sandbox_mgr_set_bridge(struct sandbox_mgr *m, struct bridge *b)
{
        m->bridge = b;
}

void sandbox_mgr_start_pool(struct sandbox_mgr *m)
{
        long max =
            m->cfg->pool_max < m->cfg->max_sandboxes ? m->cfg->pool_max : m->cfg->max_sandboxes;
        m->pool_max = max;
        m->pool_min = m->cfg->pool_min < max ? m->cfg->pool_min : max;
        m->pool_on = max > 0;
        m->last_call_ms = now_ms();
        if (m->pool_on && timer_add(m->loop, on_tick, m, &m->tick) == 0)
                timer_arm(m->tick, 1000);
        pool_refill(m);
}

static int cmp_ll(const void *a, const void *b)
{
        long long x = *(const long long *)a, y = *(const long long *)b;
        return x < y ? -1 : x > y;
}

json_t *sandbox_mgr_status(const struct sandbox_mgr *m)
{
        long starting, busy;
        pool_counts(m, &starting, &busy);
        long long sorted[ARRAY_SIZE(m->refill_ms)];
        size_t n = m->n_refill < ARRAY_SIZE(sorted) ? m->n_refill : ARRAY_SIZE(sorted);
        memcpy(sorted, m->refill_ms, n * sizeof(sorted[0]));
        qsort(sorted, n, sizeof(sorted[0]), cmp_ll);
        json_t *p50 = n ? json_integer(sorted[n / 2]) : json_null();
        json_t *p95 = n ? json_integer(sorted[(n * 95 + 99) / 100 - 1]) : json_null();
        long rss, hwm;
        long long cpu;
        proc_usage(&rss, &hwm, &cpu);
        json_t *pool = json_pack(
            "{s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, "
            "s:s?}",
            "enabled", m->pool_on, "min", (json_int_t)m->pool_min, "max", (json_int_t)m->pool_max,
            "ready", (json_int_t)m->n_ready, "starting", (json_int_t)starting, "busy",
            (json_int_t)busy, "queued", (json_int_t)m->queued, "containers", (json_int_t)m->active,
            "hits", (json_int_t)m->hits, "misses", (json_int_t)m->misses, "failures",
            (json_int_t)m->failures, "consecutive_failures", (json_int_t)m->consecutive_failures,
            "refill_p50_ms", p50, "refill_p95_ms", p95, "last_error",
            m->consecutive_failures ? m->last_error : NULL);
        return json_pack(
            "{s:i, s:s, s:s?, s:s, s:o, s:I, s:I, s:I, s:I}", "pid", (int)getpid(), "instance",
            m->instance, "engine", m->eng ? engine_endpoint(m->eng)->display : NULL, "image",
            m->cfg->image, "pool", pool, "calls", (json_int_t)(m->hits + m->misses), "rss_kb",
            (json_int_t)rss, "peak_rss_kb", (json_int_t)hwm, "cpu_ms", (json_int_t)cpu);
}

static void mgr_check_drained(struct sandbox_mgr *m)
{
        if (!m->shutting_down || m->all || !m->drained)
                return;
        void (*drained)(void *) = m->drained;
        m->drained = NULL;
        timer_remove(m->drain_timer);
        m->drain_timer = NULL;
        drained(m->drained_ud);
}

static void drain_deadline(struct timer *t, void *userdata)
{
        struct sandbox_mgr *m = userdata;
        (void)t;
        for (struct sandbox *s = m->all; s; s = s->next)
                log_warn("container %s may be left behind: the engine did not confirm its removal",
                         s->id ? s->id : "(being created)");
        /* Give up waiting: free what remains so the caller can exit. */
        while (m->all) {
                struct sandbox *s = m->all;
                bool held = s->state != S_QUEUED;
                deliver(s);
                sandbox_release(s);
                if (held)
                        m->active--;
        }
        mgr_check_drained(m);
}

void sandbox_mgr_shutdown(struct sandbox_mgr *m, void (*drained)(void *), void *userdata)
{
        m->shutting_down = true;
        timer_remove(m->tick);
        m->tick = NULL;
        m->drained = drained;
        m->drained_ud = userdata;
        if (timer_add(m->loop, drain_deadline, m, &m->drain_timer) == 0)
                timer_arm(m->drain_timer, 15000);
        /* Kill everything; each sandbox frees itself once its container is
         * confirmed gone. Iterate carefully: kill may free the current one. */
        struct sandbox *s = m->all;
        while (s) {
                struct sandbox *next = s->next;
                if (s->state != S_REMOVING)
                        sandbox_kill(s, ST_CANCELLED, "corral is shutting down");
                s = next;
        }
        mgr_check_drained(m);
}

void sandbox_mgr_free(struct sandbox_mgr *m)
{
        if (!m)
                return;
        m->freeing = true;
        while (m->all)
                sandbox_release(m->all);
        while (m->done)
                sandbox_destroy(m->done);
        timer_remove(m->drain_timer);
        timer_remove(m->tick);
        /* Their engine requests go with the engine, unanswered. */
        while (m->leftovers)
                leftover_free(m->leftovers);
        if (m->owns_eng)
                engine_free(m->eng);
        sandbox_profile_done(&m->profile);
        sandbox_images_free(&m->images);
        json_decref(m->mounts);
        free(m);
}
