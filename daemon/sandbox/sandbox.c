/* The sandbox manager and the life of a container: create (hardened,
 * spec.c) -> attach -> start -> ready -> its run (run.c) -> removed. The
 * manager bounds how many run at once, queues the rest, and removes every
 * container it created. One function, sandbox_set_state, changes a
 * sandbox's state. */
#include "sandbox/internal.h"
#include "engine/self.h"

#include "core/jsonrpc.h"
#include "core/log.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* runtime/assemble.py: the runtime, its length, and the loader the
 * container runs, which reads it from stdin and checks it. */
extern const char corral_runtime_src[];
extern const size_t corral_runtime_len;
extern const char corral_runtime_loader[];

#define STDERR_LOG_MAX (64 * 1024) /* container stderr bytes logged per sandbox */
#define INSPECT_TRIES  30          /* a dead sandbox's container asked again while running */
#define DRAIN_MAX_MS   15000       /* shutdown: waiting for the engine's removals */
#define REMOVE_TRIES   5

const char *sandbox_status_name(enum sandbox_status s)
{
        static const char *const names[] = {
            [ST_OK] = "ok",     [ST_ERROR] = "error",         [ST_TIMEOUT] = "timeout",
            [ST_OOM] = "oom",   [ST_CANCELLED] = "cancelled", [ST_ENGINE_ERROR] = "engine_error",
            [ST_BUSY] = "busy",
        };
        return names[s];
}

/* ---- the state */

#define TO(x) (1u << (x))

static const struct {
        const char *name;
        unsigned next; /* the states it may go to */
} states[] = {
    [S_NEW] = {"new", TO(S_QUEUED) | TO(S_CREATING) | TO(S_DONE)},
    [S_QUEUED] = {"queued", TO(S_CREATING) | TO(S_DONE)},
    [S_CREATING] = {"creating", TO(S_ATTACHING) | TO(S_REMOVING)},
    [S_ATTACHING] = {"attaching", TO(S_STARTING) | TO(S_REMOVING)},
    [S_STARTING] = {"starting",
                    TO(S_STARTED) | TO(S_READY) | TO(S_UPLOADING) | TO(S_BUSY) | TO(S_REMOVING)},
    [S_STARTED] = {"started", TO(S_READY) | TO(S_UPLOADING) | TO(S_BUSY) | TO(S_REMOVING)},
    [S_READY] = {"ready", TO(S_UPLOADING) | TO(S_BUSY) | TO(S_REMOVING)},
    [S_UPLOADING] = {"uploading", TO(S_BUSY) | TO(S_IDLE) | TO(S_REMOVING)},
    [S_BUSY] = {"busy", TO(S_COLLECTING) | TO(S_IDLE) | TO(S_REMOVING)},
    [S_COLLECTING] = {"collecting", TO(S_IDLE) | TO(S_REMOVING)},
    [S_IDLE] = {"idle", TO(S_UPLOADING) | TO(S_BUSY) | TO(S_REMOVING)},
    [S_REMOVING] = {"removing", TO(S_DONE)},
    [S_DONE] = {"done", 0},
};

const char *sandbox_state_name(enum sandbox_state st)
{
        return st < ARRAY_SIZE(states) && states[st].name ? states[st].name : "?";
}

/* Every change of state goes through here, and shows in the debug log as
 * "sandbox #N [id]: from -> to". One the table above does not expect is
 * a bug: it is logged as a warning (and made, so that nothing hangs). */
void sandbox_set_state(struct sandbox *s, enum sandbox_state to)
{
        enum sandbox_state from = s->state;
        if (from == to)
                return;
        if (!(states[from].next & TO(to)))
                log_warn("sandbox #%lu %s: unexpected transition %s -> %s", s->seq, s->short_id,
                         sandbox_state_name(from), sandbox_state_name(to));
        else
                log_debug("sandbox #%lu %s: %s -> %s", s->seq, s->short_id,
                          sandbox_state_name(from), sandbox_state_name(to));
        s->state = to;
        if (to <= S_STARTED)
                s->t_state_us[to] = now_us();
}

/* ---- the manager */

int sandbox_mgr_new(struct loop *l, const struct config *cfg, struct engine *eng,
                    struct sandbox_mgr **ret)
{
        struct sandbox_mgr *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->loop = l;
        m->cfg = cfg;
        m->eng = eng;
        list_init(&m->all);
        list_init(&m->queue);
        list_init(&m->ready);
        list_init(&m->done);
        list_init(&m->leftovers);
        list_init(&m->health_waits);
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
        /* In a container, the profile file is in corral's container:
         * Podman opens the path it has on the engine's machine. */
        m->profile.in_container = m->profile.seccomp_path && self_in_container();
        if (m->profile.in_container && !m->eng && !m->profile.engine_path)
                snprintf(m->profile.engine_path_err, sizeof(m->profile.engine_path_err),
                         "Podman takes the seccomp profile as a path on its machine, and corral "
                         "runs in a container and found no engine when it started, so it could "
                         "not learn that path: restart corral now that the engine answers");
        if (m->eng && m->profile.in_container && !m->profile.engine_path) {
                char path[PATH_MAX];
                struct err pe = {0};
                if (self_engine_path(m->eng, m->profile.seccomp_path, path, sizeof(path), &pe) ==
                    0) {
                        m->profile.engine_path = strdup(path);
                        m->profile.engine_path_err[0] = '\0';
                        log_info("in a container: the engine reads the seccomp profile at %s",
                                 path);
                } else {
                        snprintf(m->profile.engine_path_err, sizeof(m->profile.engine_path_err),
                                 "Podman takes the seccomp profile as a path on its machine, "
                                 "and %.330s",
                                 pe.msg);
                }
        }
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

const struct sandbox_profile *sandbox_mgr_profile(const struct sandbox_mgr *m)
{
        return &m->profile;
}

struct engine *sandbox_mgr_engine(const struct sandbox_mgr *m)
{
        return m->eng;
}

struct engine *mgr_engine(struct sandbox_mgr *m, struct err *e)
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

static void mgr_check_drained(struct sandbox_mgr *m)
{
        if (!m->shutting_down || !list_empty(&m->all) || !m->drained)
                return;
        void (*drained)(void *) = m->drained;
        m->drained = NULL;
        timer_remove(m->drain_timer);
        m->drain_timer = NULL;
        drained(m->drained_ud);
}

/* ---- a sandbox's beginning and end */

struct sandbox *sandbox_alloc(struct sandbox_mgr *m)
{
        static unsigned long seq; /* unique in the process, for the log */
        struct sandbox *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->mgr = m;
        s->seq = ++seq;
        s->t_created = now_ms();
        list_init(&s->asks);
        list_init(&s->fops);
        /* a frame and its tag: "TAG JSON" */
        line_reader_init(&s->frames, m->cfg->max_frame + FRAME_TAG_HEX + 1);
        line_reader_init(&s->diag, 4096);
        list_push(&m->all, &s->all_node);
        return s;
}

/* The last of it, from the loop: after its result was handed over. */
static void sandbox_destroy(void *userdata)
{
        struct sandbox *s = userdata;
        list_del(&s->place);
        defer_cancel(&s->free_d);
        run_free(s->run); /* only when the manager is freed: no one to tell */
        frame_auth_clear(&s->auth);
        free(s->image);
        free(s->id);
        free(s);
}

/* Done: out of the manager's lists and nothing of it left running; freed
 * from the loop once its result is handed over. */
static void sandbox_release(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        pool_remove(s);
        list_del(&s->place); /* the queue */
        sandbox_set_state(s, S_DONE);
        run_quiesce(s);
        ask_release(s);
        list_del(&s->all_node);
        engine_request_cancel(s->req);
        s->req = NULL;
        attach_close(s->attach);
        s->attach = NULL;
        timer_remove(s->start_timer);
        s->start_timer = NULL;
        timer_remove(s->remove_timer);
        s->remove_timer = NULL;
        timer_remove(s->inspect_timer);
        s->inspect_timer = NULL;
        line_reader_free(&s->frames);
        line_reader_free(&s->diag);
        list_push(&m->done, &s->place);
        loop_defer(m->loop, &s->free_d, sandbox_destroy, s);
}

static void slot_release(struct sandbox_mgr *m)
{
        m->active--;
        /* Start queued calls now that a slot is free. */
        while (!list_empty(&m->queue) && m->active < m->cfg->max_sandboxes && !m->shutting_down) {
                struct sandbox *q = list_first(&m->queue, struct sandbox, place);
                list_del(&q->place);
                m->queued--;
                sandbox_create(q);
        }
        mgr_check_drained(m);
        pool_refill(m);
}

void sandbox_finish(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        bool held_slot = s->state != S_NEW && s->state != S_QUEUED;
        run_deliver(s);
        sandbox_release(s);
        if (held_slot)
                slot_release(m);
        else
                mgr_check_drained(m);
}

void sandbox_notify_gone(struct sandbox *s, const char *why)
{
        void (*gone)(void *, const char *) = s->gone;
        s->gone = NULL;
        if (gone && !s->closing)
                gone(s->owner, why);
}

/* ---- removal */

static void send_remove(struct sandbox *s);

/* The removal's next step: after a retired sandbox's answer (its stream
 * still open), or after the engine asked for a moment. */
static void remove_again(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        long long hold = t && s->remove_tries == 0 ? pool_burst_hold(s->mgr, s->remove_due_ms) : 0;
        if (hold > 0 && timer_arm(t, hold) == 0)
                return; /* its answer is out: the rest of the burst first */
        attach_close(s->attach);
        s->attach = NULL;
        send_remove(s);
}

static void removed(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        s->req = NULL;
        /* A container that is stopping by itself makes the engine refuse a
         * forced removal for a moment (Podman: "container state improper",
         * Docker: "removal already in progress"); ask again shortly. */
        if ((status == 409 || status == 500) && ++s->remove_tries < REMOVE_TRIES &&
            timer_set(s->mgr->loop, &s->remove_timer, remove_again, s, 100LL * s->remove_tries) ==
                0) {
                log_debug("removing container %s: HTTP %ld (%s); trying again", s->id, status,
                          engine_error_message(body));
                return;
        }
        if (status == 0)
                log_warn("removing container %s failed: %s", s->id, e->msg);
        else if (status >= 400 && status != 404)
                log_warn("removing container %s failed: HTTP %ld: %s", s->id, status,
                         engine_error_message(body));
        sandbox_finish(s);
}

static void send_remove(struct sandbox *s)
{
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", s->id);
        if (engine_request(s->mgr->eng, "DELETE", path, NULL, removed, s, &s->req) < 0) {
                log_warn("cannot remove container %s", s->id);
                sandbox_finish(s);
        }
}

void sandbox_remove(struct sandbox *s)
{
        if (s->state == S_REMOVING || s->state == S_DONE)
                return;
        pool_remove(s);
        run_quiesce(s);
        attach_close(s->attach);
        s->attach = NULL;
        timer_stop(s->start_timer);
        engine_request_cancel(s->req);
        s->req = NULL;
        sandbox_set_state(s, S_REMOVING);
        if (!s->id) {
                sandbox_finish(s);
                return;
        }
        if (!s->killing)
                run_deliver(s);
        send_remove(s);
}

/* A single-use sandbox whose run has ended: the answer goes now, the
 * container a moment later. Closing its stream ends the runtime, and the
 * container's end sets the engine to work (conmon, cleanup, removal):
 * begun during the answer, that work takes the CPU from the caller
 * reading it. */
void sandbox_retire(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        if (s->killing || !s->id || !s->attach || m->shutting_down || s->state == S_REMOVING ||
            s->state == S_DONE) {
                sandbox_remove(s);
                return;
        }
        run_quiesce(s);
        timer_stop(s->start_timer);
        engine_request_cancel(s->req);
        s->req = NULL;
        sandbox_set_state(s, S_REMOVING);
        run_deliver(s);
        s->remove_due_ms = now_ms();
        if (timer_set(m->loop, &s->remove_timer, remove_again, s, AFTER_ANSWER_MS) < 0)
                remove_again(NULL, s);
}

void sandbox_fail(struct sandbox *s, enum sandbox_status st, const char *type, const char *msg)
{
        /* Only the default image's starts count: a call that asked for
         * another image must not make the pool's calls fail fast. */
        if (st == ST_ENGINE_ERROR && s->state < S_READY && !s->killing && !s->image)
                pool_note_failure(s->mgr, msg);
        run_settle(s->run, st, type, msg);
        sandbox_remove(s);
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
        sandbox_fail(s, ST_ENGINE_ERROR, "EngineError", msg);
}

void sandbox_kill(struct sandbox *s, enum sandbox_status why, const char *msg)
{
        if (s->state == S_REMOVING || s->state == S_DONE)
                return;
        run_settle(s->run, why,
                   why == ST_TIMEOUT     ? "Timeout"
                   : why == ST_CANCELLED ? "Cancelled"
                                         : "EngineError",
                   msg);
        if (s->state == S_IDLE)
                sandbox_notify_gone(s, msg ? msg : "it was removed");
        if (s->state == S_QUEUED) {
                list_del(&s->place);
                s->mgr->queued--;
                sandbox_finish(s);
                return;
        }
        /* The result waits until the engine confirms the container is gone. */
        s->killing = true;
        if (s->state == S_CREATING && s->req)
                return; /* created() removes it once its id is known */
        sandbox_remove(s);
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

/* ---- the container's start */

static void step_attach(struct sandbox *s);

int sandbox_write_lines(struct sandbox *s, const char *lines, size_t len)
{
        size_t n, count;
        char *sealed;
        if (!s->attach)
                return -EPIPE;
        int r = frame_auth_seal(&s->auth, lines, len, s->mgr->cfg->max_frame, &sealed, &n, &count);
        if (r < 0)
                return r;
        r = attach_write(s->attach, sealed, n);
        if (r >= 0)
                s->auth.out_seq += count;
        free(sealed);
        return r;
}

int sandbox_send_frame(struct sandbox *s, json_t *msg)
{
        size_t len;
        char *line = jrpc_encode(msg, &len);
        int r = line ? sandbox_write_lines(s, line, len) : -EIO;
        free(line);
        return r;
}

static int on_diag_line(void *userdata, const char *line, size_t len)
{
        struct sandbox *s = userdata;
        if (s->diag_logged > STDERR_LOG_MAX)
                return 0;
        s->diag_logged += len;
        if (line)
                log_info("sandbox %s stderr: %.*s", s->short_id, (int)(len > 1000 ? 1000 : len),
                         line);
        return 0;
}

static int on_attach_data(void *userdata, int stream, const char *p, size_t n)
{
        struct sandbox *s = userdata;
        if (stream == 2)
                return line_reader_feed(&s->diag, p, n, on_diag_line, s);
        return line_reader_feed(&s->frames, p, n, run_on_frame, s);
}

static void start_inspect(struct sandbox *s);

static void inspect_again(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        (void)t;
        if (s->state != S_REMOVING && s->state != S_DONE && !s->req)
                start_inspect(s);
}

static void inspected(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        struct run *r = s->run;
        s->req = NULL;
        (void)e;
        json_t *state = json_object_get(body, "State");
        json_t *code = json_object_get(state, "ExitCode");
        /* Its stream ended before the engine saw it stop (gVisor's
         * teardown takes a moment, and Podman says exit code 0 meanwhile):
         * ask again, every 100 ms for up to 3 s, for the real end. */
        if (r && !r->final && status == 200 && json_is_true(json_object_get(state, "Running")) &&
            s->inspect_tries++ < INSPECT_TRIES &&
            timer_set(s->mgr->loop, &s->inspect_timer, inspect_again, s, 100) == 0)
                return;
        if (r && !r->final) {
                if (status == 200 && json_is_integer(code)) {
                        r->res.has_exit_code = true;
                        r->res.exit_code = (int)json_integer_value(code);
                }
                char msg[256];
                snprintf(msg, sizeof(msg),
                         "the sandbox ended before reporting a result (exit code %d)",
                         r->res.has_exit_code ? r->res.exit_code : -1);
                /* gVisor's kernel runs in the container's cgroup: past the
                 * memory limit the host kills it, and with it the whole
                 * sandbox, with SIGKILL (137), and the engines do not see
                 * an OOM kill. Podman with runsc sometimes reports such an
                 * end as exit code 0, which the runtime's PID 1 never gives
                 * in the middle of a run (code inside cannot end it, and
                 * its input's end there gives 75), so a stopped container
                 * with 0 counts too. corral's own kills settle the run
                 * first. */
                bool stopped = json_is_false(json_object_get(state, "Running"));
                bool gvisor_oom =
                    config_runsc(s->mgr->cfg) && r->res.has_exit_code &&
                    (r->res.exit_code == 128 + SIGKILL || (r->res.exit_code == 0 && stopped));
                if (json_is_true(json_object_get(state, "OOMKilled")))
                        run_settle(r, ST_OOM, "MemoryError",
                                   "the sandbox exceeded its memory limit and was killed");
                else if (gvisor_oom)
                        run_settle(r, ST_OOM, "MemoryError",
                                   "the sandbox was killed (SIGKILL): under gVisor that is how "
                                   "the host ends a sandbox past its memory limit");
                else
                        run_settle(r, ST_ERROR, "SandboxDied", msg);
        }
        sandbox_remove(s);
}

static void start_inspect(struct sandbox *s)
{
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s/json", s->id);
        if (engine_request(s->mgr->eng, "GET", path, NULL, inspected, s, &s->req) < 0)
                sandbox_fail(s, ST_ERROR, "SandboxDied",
                             "the sandbox ended before reporting a result");
}

static void on_attach_close(void *userdata, const struct err *e)
{
        struct sandbox *s = userdata;
        s->attach = NULL;
        if (s->state == S_REMOVING)
                return; /* retired: its removal is on its way */
        if (s->state == S_IDLE) {
                /* A session's container ended between its runs (OOM
                 * killer, engine restart, `rm -f`): its owner hears why. */
                char why[1300];
                snprintf(why, sizeof(why), "its container ended between calls (%s)",
                         e ? e->msg : "the container exited");
                log_warn("session sandbox %s: %s", s->short_id, why);
                sandbox_notify_gone(s, why);
                sandbox_remove(s);
                return;
        }
        if (s->state == S_READY) {
                /* Died while waiting in the pool (engine restart, OOM killer,
                 * someone's `rm -f`): it never gets a call. Replace it. */
                struct sandbox_mgr *m = s->mgr;
                log_warn("ready sandbox %s ended by itself; replacing it", s->short_id);
                sandbox_remove(s);
                pool_refill(m);
                return;
        }
        if (s->killing || (s->run && s->run->final))
                return;
        if (e) {
                char msg[1200];
                snprintf(msg, sizeof(msg), "lost the sandbox's stream: %s", e->msg);
                sandbox_fail(s, ST_ENGINE_ERROR, "EngineError", msg);
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

static void started(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        s->req = NULL;
        if (status != 204 && status != 304) {
                engine_failed(s, "starting the sandbox failed", status, body, e);
                return;
        }
        if (s->state == S_STARTING)
                sandbox_set_state(s, S_STARTED);
        if (s->stream_ended && !(s->run && s->run->final))
                start_inspect(s);
}

/* What the container reads first on its stdin: the runtime's bytes, which
 * its loader checks and runs, then the key the runtime's supervisor tags
 * its frames with (frame_auth.h), drawn for this sandbox alone. */
static int send_start_bytes(struct sandbox *s)
{
        char line[FRAME_KEY_LINE_MAX];
        if (frame_auth_init(&s->auth) < 0)
                return -EIO;
        s->ready_seen = false;
        size_t n = frame_auth_key_line(&s->auth, line, sizeof(line));
        int r = n ? attach_write(s->attach, corral_runtime_src, corral_runtime_len) : -EIO;
        if (r >= 0)
                r = attach_write(s->attach, line, n);
        OPENSSL_cleanse(line, sizeof(line));
        return r;
}

/* The stream is open: start the container (the runtime's first frame
 * must find someone reading). */
static void on_attach_open(void *userdata)
{
        struct sandbox *s = userdata;
        char path[256];
        if (s->state != S_STARTING)
                return;
        if (send_start_bytes(s) < 0) {
                sandbox_fail(s, ST_ERROR, "InternalError",
                             "cannot queue the runtime and its key for the sandbox");
                return;
        }
        snprintf(path, sizeof(path), "/containers/%s/start", s->id);
        if (engine_request(s->mgr->eng, "POST", path, NULL, started, s, &s->req) < 0)
                sandbox_fail(s, ST_ENGINE_ERROR, "EngineError", "cannot start an engine request");
}

static const struct attach_ops attach_ops = {
    .on_open = on_attach_open,
    .on_data = on_attach_data,
    .on_close = on_attach_close,
};

static void step_attach(struct sandbox *s)
{
        struct err e = {0};
        sandbox_set_state(s, S_ATTACHING);
        /* Its stdin's queue holds the runtime and its key, then frames. */
        size_t room = 2 * s->mgr->cfg->max_frame + corral_runtime_len + FRAME_KEY_LINE_MAX;
        if (attach_open(s->mgr->eng, s->id, &attach_ops, s, room, &s->attach, &e) < 0) {
                engine_failed(s, "attaching to the sandbox failed", 0, NULL, &e);
                return;
        }
        /* on_attach_open sends the start. */
        sandbox_set_state(s, S_STARTING);
}

/* What the engine said it ignored of a create body ("Warnings"): rootless
 * Podman on cgroup v1, for one, applies no memory or pids limit and says
 * so only here. Each warning goes to the log and to the clients, once. */
static void engine_warnings(struct sandbox_mgr *m, json_t *body)
{
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(body, "Warnings"), i, w)
        {
                const char *t = json_string_value(w);
                if (!t || !t[0])
                        continue;
                unsigned long h = 5381;
                for (const char *p = t; *p; p++)
                        h = h * 33 + (unsigned char)*p;
                bool seen = false;
                for (size_t k = 0; k < m->n_warned; k++)
                        seen |= m->warned[k] == h;
                if (seen || m->n_warned == sizeof(m->warned) / sizeof(m->warned[0]))
                        continue;
                m->warned[m->n_warned++] = h;
                char msg[320];
                snprintf(msg, sizeof(msg), "%.300s", t);
                utf8_scrub(msg);
                log_event(LOG_WARN, "corral.sandbox",
                          "the engine did not apply all of the sandbox's settings: %s (`corral "
                          "doctor` says what this host can enforce)",
                          msg);
        }
}

static void limits_ask(struct sandbox_mgr *m);

static void created(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        s->req = NULL;
        /* Both engines' create answers 404 for an image they lack (Docker
         * Engine API: "no such image"; Podman's compat API the same). */
        if (status == 404) {
                const char *image = s->image ? s->image : s->mgr->cfg->image;
                char msg[1400], advice[600];
                snprintf(msg, sizeof(msg),
                         "the sandbox image \"%s\" is not present in the engine at %s (%s)", image,
                         engine_endpoint(s->mgr->eng)->display, engine_error_message(body));
                /* The log says what happened; what to do about it goes
                 * once, with the call's result. */
                log_warn("%s", msg);
                sandbox_image_advice(s->mgr->cfg, image, s->image != NULL, advice, sizeof(advice));
                size_t n = strlen(msg);
                snprintf(msg + n, sizeof(msg) - n, ": %s", advice);
                sandbox_fail(s, ST_ENGINE_ERROR, "ImageMissing", msg);
                return;
        }
        const char *id = json_string_value(json_object_get(body, "Id"));
        if (status != 201 || !id || strlen(id) > 128) {
                engine_failed(s, "creating the sandbox failed", status, body, e);
                return;
        }
        engine_warnings(s->mgr, body);
        limits_ask(s->mgr);
        s->id = strdup(id);
        snprintf(s->short_id, sizeof(s->short_id), "%.12s", id);
        if (!s->id) {
                sandbox_fail(s, ST_ERROR, "InternalError", "out of memory");
                return;
        }
        if (s->run && !s->run->res.container_id)
                s->run->res.container_id = strdup(s->short_id);
        if (s->killing) {
                sandbox_remove(s);
                return;
        }
        step_attach(s);
}

static void send_create(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        struct sandbox_spec spec = {
            .image = s->image, .mounts = m->mounts, .preload = s->pooled && !s->run};
        json_t *body = sandbox_create_body(m->cfg, &m->profile, m->instance, corral_runtime_loader,
                                           &spec, engine_kind(m->eng));
        if (!body) {
                sandbox_fail(s, ST_ERROR, "InternalError", "cannot build the container spec");
                return;
        }
        if (engine_request(m->eng, "POST", "/containers/create", body, created, s, &s->req) < 0)
                sandbox_fail(s, ST_ENGINE_ERROR, "EngineError", "cannot start an engine request");
}

/* Whether the engine runs sandboxes under the runtime the settings ask
 * for; if not, why not and what to do, in msg. */
bool sandbox_runsc_offered(json_t *info, bool podman)
{
        if (!podman)
                return json_object_get(json_object_get(info, "Runtimes"), CONFIG_RUNSC_NAME);
        const char *def = json_string_value(json_object_get(info, "DefaultRuntime"));
        return def && strcmp(def, CONFIG_RUNSC_NAME) == 0;
}

static bool runtime_offered(struct sandbox_mgr *m, json_t *info, char *msg, size_t size)
{
        const char *where = engine_endpoint(m->eng)->display;
        bool podman = engine_kind(m->eng) != ENGINE_DOCKER;
        if (sandbox_runsc_offered(info, podman))
                return true;
        if (!podman) {
                snprintf(msg, size,
                         "runtime runsc: the Docker Engine at %s has no runtime named "
                         "%s: run contrib/setup, which installs gVisor and registers it with "
                         "the flags this host needs, then restart dockerd",
                         where, CONFIG_RUNSC_NAME);
                return false;
        }
        const char *def = json_string_value(json_object_get(info, "DefaultRuntime"));
        snprintf(msg, size,
                 "runtime runsc: the Podman service at %s runs containers with %.60s, and "
                 "Podman's API cannot choose a runtime per container: start that service as "
                 "`podman --runtime %s system service`, or leave `engine` unset and corral "
                 "starts its own (contrib/setup registers %s with Podman)",
                 where, def ? def : "its default runtime", CONFIG_RUNSC_NAME, CONFIG_RUNSC_NAME);
        return false;
}

/* A question to the engine before the create came back: false when the
 * sandbox went another way (killed meanwhile, or the engine failed `what`). */
static bool asked_ok(struct sandbox *s, const char *what, long status, json_t *body,
                     const struct err *e)
{
        s->req = NULL;
        if (s->killing) {
                sandbox_remove(s);
                return false;
        }
        if (status != 200) {
                engine_failed(s, what, status, body, e);
                return false;
        }
        return true;
}

/* Rootless engines on cgroup v1 take the create's memory and pids limits
 * and apply neither, saying so on their own stderr at most: corral says
 * it to the log and the clients, once. */
static void limits_check(struct sandbox_mgr *m, json_t *info)
{
        const char *cg = json_string_value(json_object_get(info, "CgroupVersion"));
        /* Podman says "Rootless", Docker a security option. */
        bool rootless = json_is_true(json_object_get(info, "Rootless"));
        size_t i;
        json_t *o;
        json_array_foreach(json_object_get(info, "SecurityOptions"), i, o)
        {
                const char *v = json_string_value(o);
                rootless |= v && strcmp(v, "name=rootless") == 0;
        }
        if (rootless && cg && strcmp(cg, "1") == 0)
                log_event(LOG_WARN, "corral.sandbox",
                          "the engine at %s is rootless on cgroup v1: it applies no memory or "
                          "pids limit to sandboxes (time, CPU count and the rest still hold); "
                          "use rootful Podman or Docker, or cgroup v2, for those limits",
                          engine_endpoint(m->eng)->display);
}

/* Without gVisor, the create needs nothing of /info: it is read once, in
 * the background, after the first container was created (Podman takes
 * about half a second to compose it, which no first sandbox should wait
 * for). */
static void limits_answered(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox_mgr *m = userdata;
        (void)e;
        m->info_req = NULL;
        m->info_checked = true;
        if (status == 200)
                limits_check(m, body);
        else if (status != 0) /* 0: no answer; the sandboxes say why */
                log_warn("the engine answered %ld to GET /info: cannot tell whether it applies "
                         "the sandboxes' memory and pids limits (`corral doctor` checks)",
                         status);
}

static void limits_ask(struct sandbox_mgr *m)
{
        if (m->info_checked || m->info_req || config_runsc(m->cfg) || m->shutting_down)
                return;
        if (engine_request(m->eng, "GET", "/info", NULL, limits_answered, m, &m->info_req) < 0)
                m->info_req = NULL;
}

/* Under gVisor, before each create until the engine is seen to offer the
 * runtime (the user may fix the engine while corral runs). */
static void info_answered(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        if (!asked_ok(s, "asking the engine for its settings failed", status, body, e))
                return;
        if (!s->mgr->info_checked) {
                s->mgr->info_checked = true;
                limits_check(s->mgr, body);
        }
        char msg[800];
        if (!runtime_offered(s->mgr, body, msg, sizeof(msg))) {
                log_warn("%s", msg);
                if (!s->image)
                        pool_note_failure(s->mgr, msg);
                sandbox_fail(s, ST_ENGINE_ERROR, "RuntimeMissing", msg);
                return;
        }
        s->mgr->runtime_checked = true;
        send_create(s);
}

/* The create, once the engine's kind is known and, under gVisor, once the
 * engine is known to offer it. */
static void create_when_known(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        if (engine_kind(m->eng) == ENGINE_PODMAN && m->profile.in_container &&
            !m->profile.engine_path) {
                sandbox_fail(s, ST_ENGINE_ERROR, "EngineError",
                             m->profile.engine_path_err[0]
                                 ? m->profile.engine_path_err
                                 : "corral runs in a container and does not know where Podman "
                                   "reads its seccomp profile");
                return;
        }
        if (config_runsc(m->cfg) && !m->runtime_checked) {
                if (engine_request(m->eng, "GET", "/info", NULL, info_answered, s, &s->req) < 0)
                        sandbox_fail(s, ST_ENGINE_ERROR, "EngineError",
                                     "cannot start an engine request");
                return;
        }
        send_create(s);
}

static void probed(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox *s = userdata;
        if (!asked_ok(s, "asking the engine for its version failed", status, body, e))
                return;
        create_when_known(s); /* now that the engine's kind is known */
}

/* The start bound (start_timeout_s), from creation to ready. */
static void start_expired(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        char msg[160];
        (void)t;
        snprintf(msg, sizeof(msg),
                 "the sandbox did not start within %g s: check the engine with `corral doctor`",
                 s->mgr->cfg->start_timeout_s);
        if (!s->image)
                pool_note_failure(s->mgr, msg);
        sandbox_kill(s, ST_ENGINE_ERROR, msg);
}

void sandbox_create(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        m->active++;
        sandbox_set_state(s, S_CREATING);
        if (timer_set(m->loop, &s->start_timer, start_expired, s,
                      (long long)(m->cfg->start_timeout_s * 1000)) < 0) {
                sandbox_fail(s, ST_ERROR, "InternalError", "cannot arm the start timer");
                return;
        }
        if (engine_kind(m->eng) == ENGINE_UNKNOWN) {
                /* Once per engine: the create body depends on it. */
                if (engine_probe(m->eng, probed, s, &s->req) < 0)
                        sandbox_fail(s, ST_ENGINE_ERROR, "EngineError",
                                     "cannot start an engine request");
                return;
        }
        create_when_known(s);
}

/* ---- shutdown */

static void drain_deadline(struct timer *t, void *userdata)
{
        struct sandbox_mgr *m = userdata;
        struct sandbox *s, *tmp;
        (void)t;
        list_for_each(s, &m->all, all_node)
            log_warn("container %s may be left behind: the engine did not confirm its removal",
                     s->id ? s->id : "(being created)");
        /* Give up waiting: release what remains so the caller can exit. */
        list_for_each_safe(s, tmp, &m->all, all_node)
        {
                bool held = s->state != S_NEW && s->state != S_QUEUED;
                run_deliver(s);
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
        timer_remove(m->refill_timer);
        m->refill_timer = NULL;
        pool_cost_cancel(m);
        engine_request_cancel(m->info_req);
        m->info_req = NULL;
        m->drained = drained;
        m->drained_ud = userdata;
        if (timer_add(m->loop, drain_deadline, m, &m->drain_timer) == 0)
                timer_arm(m->drain_timer, DRAIN_MAX_MS);
        /* Kill everything; each sandbox is released once its container is
         * confirmed gone (a queued one at once). */
        struct sandbox *s, *tmp;
        list_for_each_safe(s, tmp, &m->all, all_node)
        {
                if (s->state != S_REMOVING)
                        sandbox_kill(s, ST_CANCELLED, "corral is shutting down");
        }
        mgr_check_drained(m);
}

void sandbox_mgr_drain_within(struct sandbox_mgr *m, long long ms)
{
        if (m && m->drain_timer)
                timer_arm(m->drain_timer, ms);
}

void sandbox_mgr_free(struct sandbox_mgr *m)
{
        if (!m)
                return;
        m->freeing = true;
        pool_cost_cancel(m); /* before its sandbox, which frees its ask silently */
        while (!list_empty(&m->all))
                sandbox_release(list_first(&m->all, struct sandbox, all_node));
        while (!list_empty(&m->done))
                sandbox_destroy(list_first(&m->done, struct sandbox, place));
        timer_remove(m->drain_timer);
        timer_remove(m->tick);
        timer_remove(m->refill_timer);
        pool_cost_cancel(m);
        engine_request_cancel(m->info_req);
        health_free(m);
        sweep_free(m);
        if (m->owns_eng)
                engine_free(m->eng);
        sandbox_profile_done(&m->profile);
        sandbox_images_free(&m->images);
        json_decref(m->mounts);
        free(m);
}
