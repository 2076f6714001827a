/* One single-use sandbox per call: create (hardened) -> attach -> start ->
 * ready -> busy -> done -> removed, or failed. The manager bounds how many
 * run at once, queues the rest, and removes every container it created. */
#pragma once

#include "core/buf.h"
#include "core/config.h"
#include "core/loop.h"
#include "engine/engine.h"
#include "sandbox/files.h"

#include <jansson.h>
#include <stdbool.h>

/* LANG_STATE: code "save" or "load", a session's Python globals to or
 * from /workspace/.corral/state (runtime/README.md). */
enum sandbox_lang { LANG_PYTHON, LANG_SHELL, LANG_STATE };

enum sandbox_status {
        ST_OK,
        ST_ERROR,
        ST_TIMEOUT,
        ST_OOM,
        ST_CANCELLED,
        ST_ENGINE_ERROR,
        ST_BUSY,
};
const char *sandbox_status_name(enum sandbox_status s);

/* A file to put under /workspace before the code runs. */
struct sandbox_file {
        const char *path; /* absolute, from files_path */
        const char *data;
        size_t len;
};

/* ---- a run's frames for the layer above
 *
 * The runtime's requests and notifications that the sandbox layer does not
 * answer itself (servers/list, tools/list, tools/call: code calling MCP
 * servers) go to a hook that the caller gives with the request; mcp/run.c
 * wires it to the bridge, so this layer knows no MCP server. */
struct jrpc_msg;

/* Sends a frame to the run's runtime (msg is stolen); `to` is what the
 * hook was opened with. When the runtime's input queue is full it sends a
 * short TooLarge error for the same id instead. */
typedef void (*sandbox_send_fn)(void *to, json_t *msg);
/* Lines already encoded (one or more frames, each ending with '\n'):
 * bulk data the hook writes itself. 0, or a negative errno when the
 * sandbox's input queue cannot take them. */
typedef int (*sandbox_line_fn)(void *to, const char *lines, size_t len);

struct sandbox_frame_ops {
        /* A sandbox takes a run whose request names servers (called from
         * inside sandbox_run or sandbox_exec): the hook's state for this
         * run in *ret, which sends frames through send(to, ..) until
         * close. 0, or a negative errno: the run is not made. */
        int (*open)(void *ud, json_t *servers, json_t *network, sandbox_send_fn send,
                    sandbox_line_fn send_lines, void *to, void **ret);
        /* The container's short id (copied), before exec_params. */
        void (*set_sandbox)(void *run, const char *id);
        /* Its part of the sandbox/exec frame's params: `servers`, and
         * `network` when the run may reach hosts. */
        void (*exec_params)(void *run, json_t *params);
        /* A request or notification from the runtime while the code runs;
         * its answer goes through send, from the loop (core/loop.h). */
        void (*frame)(void *run, const struct jrpc_msg *m);
        /* The code no longer runs: what is in flight is withdrawn, and
         * send is not called again. */
        void (*close)(void *run);
};

/* ops NULL: no hook, and the runtime's requests are refused. */
struct sandbox_frame_hook {
        const struct sandbox_frame_ops *ops;
        void *ud; /* open's (borrowed) */
};

struct sandbox_request {
        enum sandbox_lang lang;
        const char *code;
        double timeout_s;
        json_t *servers; /* borrowed: MCP servers the code may call (checked), or NULL */
        /* Borrowed, with `session` only: servers this call adds to what its
         * session may call (in `servers` too), or NULL (sandbox/session.h). */
        json_t *session_servers;
        /* Borrowed: host patterns the code may connect to through the
         * proxy (checked), or NULL (sandbox/session.h: a session's first
         * call sets them for all its calls). */
        json_t *network;
        /* Where the frames of code calling `servers` or reaching `network`
         * go (opened when a sandbox takes the run, only when either is not
         * empty). */
        struct sandbox_frame_hook frames;
        double sync_wait_s; /* MCP layer only: when the call becomes a job (sandbox.c ignores it) */
        size_t result_max_chars; /* MCP layer only: its result's text at most */
        const char *session;     /* MCP layer only: the session's name, or NULL */
        const char *owner;       /* MCP layer only: the client the session belongs to */
        bool keep; /* a session's run: the sandbox stays for the next (sandbox_exec) */
        const struct sandbox_file *files; /* written first (copied), n_files of them */
        size_t n_files;
        bool want_out; /* fetch what the code writes under /workspace/out (out_files) */
        /* Bytes of each stream the runtime relays (each piece reaches
         * on_output), when more than output_limit: a caller that keeps the
         * whole output elsewhere; 0: output_limit. */
        unsigned long long relay_max;
        const char *image; /* an image of sandbox_mgr_images (its name), NULL: the default */
        /* Optional, called while the code runs (with hook_userdata, else
         * sandbox_run's userdata): each piece of output as it arrives (valid
         * UTF-8, not NUL-ended), and each progress report of the code's own
         * (corral.progress(); done and total finite, total < 0 when not
         * given, message may be NULL). Neither is called after the done
         * callback. A layer that wraps the done callback (sessions) passes
         * these on untouched. */
        void (*on_output)(void *userdata, bool is_stderr, const char *data, size_t n);
        void (*on_progress)(void *userdata, double done, double total, const char *message);
        void *hook_userdata;
};

struct sandbox_output {
        struct buf data; /* first output_limit bytes */
        /* The last bytes past `data`, up to output_limit of them: a ring
         * whose oldest byte is at tail_at once it is full (sandbox_tail). */
        struct buf tail;
        size_t tail_at;
        unsigned long long total; /* true byte count */
        bool truncated;
};

/* The last `n` bytes the run kept of a stream (those of `data` too when the
 * stream was short), appended to `to`, starting on a whole UTF-8 character:
 * how many were appended. At most the kept bytes past data's first
 * `after`, so that a head of `after` bytes and this tail never overlap. */
size_t sandbox_tail(const struct sandbox_output *o, size_t n, size_t after, struct buf *to);

struct sandbox_result {
        enum sandbox_status status;
        bool has_exit_code;
        int exit_code;
        struct sandbox_output out, err;
        long long duration_ms;
        char *error_type, *error_message, *error_traceback; /* may be NULL */
        char *container_id;                                 /* short id, may be NULL */
        /* Files the code wrote under /workspace/out (want_out): [{path
         * (relative to /workspace), size, mime_type, and data (base64) or
         * note (why not returned)}], or NULL. */
        json_t *out_files;
        /* The runtime found /workspace/out changed by the run (a file new,
         * changed or gone), whether or not the files came back. */
        bool files_changed;
        long long memory_bytes; /* the container's memory use after the run; -1: unknown */
        /* keep (a session): */
        bool kept;       /* the sandbox is still there, idle, for the next run */
        bool state_lost; /* the interpreter died in this run: its variables are gone */
        bool restarted;  /* this run began in a new interpreter although the session had one */
        /* LANG_STATE: what the runtime says it saved or loaded (an object,
         * unchecked beyond that), or NULL. */
        json_t *globals;
        /* Set by the session layer: the session was resumed from the store
         * for this call; resume_report {not_restored, resume_ms, error}. */
        bool resumed;
        json_t *resume_report;
        bool not_resumed; /* it could not be: it stays in the store */
};

struct sandbox;
struct sandbox_mgr;

/* Called exactly once per sandbox_run or sandbox_exec, from the loop, never
 * before the call that started the run returned (core/loop.h); the result
 * is borrowed. The sandbox handle stays usable until then. */
typedef void (*sandbox_done_cb)(void *userdata, const struct sandbox_result *res);

/* `eng` may be NULL when no engine answered at start-up: each call then
 * looks again (and reports why not). The manager does not own `eng`. */
int sandbox_mgr_new(struct loop *l, const struct config *cfg, struct engine *eng,
                    struct sandbox_mgr **ret);
/* Stop everything and remove every container; calls `drained` once no
 * container and no engine request remains (or the deadline passed). */
void sandbox_mgr_shutdown(struct sandbox_mgr *m, void (*drained)(void *), void *userdata);
/* During that: the deadline comes `ms` from now instead (a host that
 * gives corral little time to exit). */
void sandbox_mgr_drain_within(struct sandbox_mgr *m, long long ms);
void sandbox_mgr_free(struct sandbox_mgr *m);

/* Keep ready sandboxes (config pool_*) from now on; `serve` calls it,
 * one-shot commands do not. */
void sandbox_mgr_start_pool(struct sandbox_mgr *m);
/* Remove containers that earlier, dead instances on this host left behind
 * (by their labels), in the background. */
void sandbox_mgr_sweep(struct sandbox_mgr *m);
/* Pool, call and process figures (new reference). */
json_t *sandbox_mgr_status(const struct sandbox_mgr *m);

int sandbox_run(struct sandbox_mgr *m, const struct sandbox_request *req, sandbox_done_cb cb,
                void *userdata, struct sandbox **ret);
/* Stop the run: kill the sandbox; its callback then reports ST_CANCELLED
 * (unless the result was final already). A kept sandbox's run is
 * interrupted instead, and the sandbox stays. */
void sandbox_cancel(struct sandbox *s);

/* Kept sandboxes (sessions). After a run with `keep` the sandbox waits,
 * idle, attached and with its container running. */
bool sandbox_idle(const struct sandbox *s);
/* Whether an engine's GET /info offers corral-runsc: Docker Engine among
 * its runtimes (chosen per container), Podman as the service's own. */
bool sandbox_runsc_offered(json_t *info, bool podman);
/* Its next run; -EBUSY when it is not idle (also while the last result is
 * on its way to the caller). `cb` as for sandbox_run. */
int sandbox_exec(struct sandbox *s, const struct sandbox_request *req, sandbox_done_cb cb,
                 void *userdata);
/* Remove it; a run in progress ends ST_CANCELLED (kept false). */
void sandbox_close(struct sandbox *s);
/* `gone` is called once if the sandbox ends while idle by anything but
 * sandbox_close (its container died, corral shuts down); s is gone then. A
 * run that the end interrupts reports kept false instead. */
void sandbox_set_owner(struct sandbox *s, void (*gone)(void *owner, const char *why), void *owner);
/* The full container id, or NULL before it is created. */
const char *sandbox_container(const struct sandbox *s);
/* The engine the manager uses now (NULL when none answered yet). */
struct engine *sandbox_mgr_engine(const struct sandbox_mgr *m);

/* The engine's health, as the service's /health shows it:
 * {"engine": {"reachable", "error" (when not, or failing)}, "image":
 * {"name", "present"}} for the default image, or {"engine": {"reachable":
 * false, "error": "no engine configured"}} while the manager has none. An
 * answer less than a second old serves, so that a prober cannot make
 * corral ask the engine more than once a second, and the callers waiting
 * meanwhile share one request. `cb` gets it (borrowed) once, from the
 * loop, unless cancelled; the wait is gone then. 0, or a negative errno
 * when the engine cannot be asked. */
struct sandbox_health_wait;
typedef void (*sandbox_health_cb)(void *userdata, json_t *health);
int sandbox_mgr_health(struct sandbox_mgr *m, sandbox_health_cb cb, void *userdata,
                       struct sandbox_health_wait **ret);
/* `cb` will not be called (the engine's answer is not waited for when
 * nobody else waits). Accepts NULL. */
void sandbox_health_cancel(struct sandbox_health_wait *w);

/* A file of a kept sandbox's /workspace, read or written by its runtime
 * (sandbox/files.h). `cb` once, from the loop, unless cancelled before it
 * ran. -ENOTCONN when the sandbox is not there. */
struct sandbox_fop;
int sandbox_read_file(struct sandbox *s, const char *path, size_t max, files_cb cb, void *userdata,
                      struct sandbox_fop **ret);
int sandbox_write_file(struct sandbox *s, const char *path, const void *data, size_t len,
                       files_cb cb, void *userdata, struct sandbox_fop **ret);
void sandbox_fop_cancel(struct sandbox_fop *f);

/* A request to a sandbox's runtime (sandbox/list): `cb` gets the result
 * object, or NULL and why (the runtime's message, or no answer), once, from the loop, unless
 * cancelled before it ran; also when the sandbox ends first. `params` is stolen. */
struct sandbox_ask;
typedef void (*sandbox_ask_cb)(void *userdata, json_t *result, const struct err *e);
int sandbox_ask(struct sandbox *s, const char *method, json_t *params, sandbox_ask_cb cb,
                void *userdata, struct sandbox_ask **ret);
/* The callback will not be called. Accepts NULL. */
void sandbox_ask_cancel(struct sandbox_ask *a);
/* In a sandbox_ask_cb given an error: the error object the runtime sent
 * (borrowed; its data says more), or NULL when it sent none. */
const json_t *sandbox_ask_error(const struct err *e);
/* What callers have on their way in it: requests to its runtime and file
 * operations. A caller that withdrew its own
 * leaves none. */
size_t sandbox_pending(const struct sandbox *s);
/* What a running sandbox has so far: its output (status and timing not
 * final). Valid until its done callback. */
const struct sandbox_result *sandbox_partial(const struct sandbox *s);

/* What differs between sandboxes of one manager. */
struct sandbox_spec {
        const char *image; /* NULL: cfg->image */
        json_t *mounts;    /* [{Source, Target}] (sandbox/images.h; borrowed), or NULL */
        bool preload;      /* for the warm pool: the runtime imports more up front
                            * (CORRAL_PRELOAD=1, and cfg->preload's modules) */
};

/* The hardened create body for the engine (exposed for tests). Steals
 * nothing; spec may be NULL. kind: on Docker /workspace is a tmpfs-backed
 * volume, elsewhere a Tmpfs mount (the archive endpoints must see it). */
struct sandbox_profile;
json_t *sandbox_create_body(const struct config *cfg, const struct sandbox_profile *prof,
                            const char *instance, const char *loader,
                            const struct sandbox_spec *spec, enum engine_kind kind);
/* At start-up, after sandbox_mgr_new: the images a call may ask for and the
 * mounts, checked (sandbox/images.h). -EINVAL with a message for a mount
 * that cannot be. Blocks on the engine. */
int sandbox_mgr_prepare(struct sandbox_mgr *m, struct err *e);
struct sandbox_images;
const struct sandbox_images *sandbox_mgr_images(const struct sandbox_mgr *m);
/* The mounts, [{Source, Target}] (borrowed; an empty array when none, NULL
 * before prepare). */
json_t *sandbox_mgr_mounts(const struct sandbox_mgr *m);
/* The profile every sandbox of this manager gets (its summary for doctor). */
const struct sandbox_profile *sandbox_mgr_profile(const struct sandbox_mgr *m);

/* The pool's size for a demand (the most calls at once of late), within
 * pool_min, pool_max and the budget_n sandboxes pool_memory pays for;
 * *why names what decided: "demand", "pool_min", "pool_max" or
 * "pool_memory". */
long pool_target(long min, long max, long demand, long budget_n, const char **why);
/* Ready sandboxes that calls arriving at the pace of `arrive` (times in
 * ms, any order, n of them) ask for when a refill takes refill_ms: as many
 * as arrive while one refills, and one more. Calls within
 * PACE_TOGETHER_MS (100 ms) of the first of a group count as one (a
 * burst is the peak's business); 0 with fewer than 3 such arrivals, or
 * less than a second from the first to the last, in the last
 * PACE_WINDOW_MS (10 s). */
long pool_pace_need(const long long *arrive, size_t n, long long now, long long refill_ms);
/* How many ready sandboxes a budget (kB) pays for at cost_kb each (<= 0:
 * not measured yet, a guess on the high side; then at least one). With
 * page merging, cost_kb holds for the `merged` sandboxes the merger has
 * been through, and fresh_kb (when larger) for any other: before the
 * merger reaches them, they hold their pages alone. */
long pool_budget_n(unsigned long long budget_kb, long long cost_kb, long long fresh_kb,
                   unsigned long long merged);
