/* One single-use sandbox per call: create (hardened) -> attach -> start ->
 * ready -> busy -> done -> removed, or failed. The manager bounds how many
 * run at once, queues the rest, and removes every container it created. */
#pragma once

#include "core/buf.h"
#include "core/config.h"
#include "core/loop.h"
#include "engine/engine.h"

#include <jansson.h>
#include <stdbool.h>

enum sandbox_lang { LANG_PYTHON, LANG_SHELL };

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

struct sandbox_request {
        enum sandbox_lang lang;
        const char *code;
        double timeout_s;
        json_t *servers;    /* borrowed: MCP servers the code may call (checked), or NULL */
        double sync_wait_s; /* MCP layer only: when the call becomes a job (sandbox.c ignores it) */
        /* Optional, called while the code runs (with sandbox_run's userdata):
         * each piece of output as it arrives (valid UTF-8, not NUL-ended),
         * and each progress report of the code's own (corral.progress();
         * done and total finite, total < 0 when not given, message may be
         * NULL). Neither is called after the done callback. */
        void (*on_output)(void *userdata, bool is_stderr, const char *data, size_t n);
        void (*on_progress)(void *userdata, double done, double total, const char *message);
};

struct sandbox_output {
        struct buf data;          /* first output_limit bytes */
        unsigned long long total; /* true byte count */
        bool truncated;
};

struct sandbox_result {
        enum sandbox_status status;
        bool has_exit_code;
        int exit_code;
        struct sandbox_output out, err;
        long long duration_ms;
        char *error_type, *error_message, *error_traceback; /* may be NULL */
        char *container_id;                                 /* short id, may be NULL */
};

struct sandbox;
struct sandbox_mgr;

/* Called exactly once per sandbox_run; the result is borrowed. */
typedef void (*sandbox_done_cb)(void *userdata, const struct sandbox_result *res);

/* `eng` may be NULL when no engine answered at start-up: each call then
 * looks again (and reports why not). The manager does not own `eng`. */
int sandbox_mgr_new(struct loop *l, const struct config *cfg, struct engine *eng,
                    struct sandbox_mgr **ret);
/* Stop everything and remove every container; calls `drained` once no
 * container and no engine request remains (or the deadline passed). */
void sandbox_mgr_shutdown(struct sandbox_mgr *m, void (*drained)(void *), void *userdata);
void sandbox_mgr_free(struct sandbox_mgr *m);

/* Let sandboxes call upstream MCP servers (the manager borrows it). */
struct bridge;
void sandbox_mgr_set_bridge(struct sandbox_mgr *m, struct bridge *b);

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
/* Kill the sandbox; its callback then reports ST_CANCELLED. */
void sandbox_cancel(struct sandbox *s);
/* What a running sandbox has so far: its output (status and timing not
 * final). Valid until its done callback. */
const struct sandbox_result *sandbox_partial(const struct sandbox *s);

/* The hardened create body for the engine (exposed for tests). Steals
 * nothing. preload: the sandbox is for the warm pool, so the runtime may
 * import more up front (CORRAL_PRELOAD=1). kind: on Docker /workspace is a
 * tmpfs-backed volume, elsewhere a Tmpfs mount (the archive endpoints must
 * see it). */
json_t *sandbox_create_body(const struct config *cfg, const char *instance, const char *runtime_src,
                            bool preload, enum engine_kind kind);
