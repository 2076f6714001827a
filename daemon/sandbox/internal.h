/* What the files of sandbox/ share, and nothing outside it includes:
 *
 *   sandbox.c   the manager and a container's life: create, attach, start,
 *               remove; the one function that changes a sandbox's state
 *   run.c       a run in a sandbox: its request, the exec, the frames of
 *               the runtime, the time limit, the result and its delivery
 *   transfer.c  a run's files: uploads before it, /workspace/out after it
 *   ask.c       requests to the runtime (sandbox_ask), read_file and
 *               write_file on a session
 *   pool.c      the warm pool of ready sandboxes
 *   sweep.c     containers that dead instances left behind
 *   spec.c      the hardened create body
 *
 * A sandbox is one container; a run is one request in it, in its own
 * struct, freed whole once its result is handed over. A single-use
 * sandbox has one run; a kept one (a session) one at a time; a pool
 * sandbox none until a call takes it. */
#pragma once

#include "sandbox/sandbox.h"

#include "core/buf.h"
#include "core/list.h"
#include "core/loop.h"
#include "engine/attach.h"
#include "sandbox/frame_auth.h"
#include "sandbox/images.h"
#include "sandbox/profile.h"

#define POOL_FAIL_FAST 3 /* failed starts in a row before calls fail fast */
/* After an answer, the work it leaves (the container's removal, the
 * pool's refill) waits this long: the caller reads its answer first; and
 * during a burst, until the burst is answered (pool_burst_hold). */
#define AFTER_ANSWER_MS 5

/* Every state a sandbox passes through; only sandbox_set_state assigns one
 * (it logs the transition by name, and warns of one it does not expect). */
enum sandbox_state {
        S_NEW,        /* allocated; holds no slot */
        S_QUEUED,     /* waits for a slot (mgr->queue) */
        S_CREATING,   /* the create request is out (and the version probe) */
        S_ATTACHING,  /* the attach stream is opening */
        S_STARTING,   /* the start request is out */
        S_STARTED,    /* waiting for sandbox/ready */
        S_READY,      /* in the pool (mgr->ready): the runtime waits for a request */
        S_UPLOADING,  /* the run's files go into /workspace */
        S_BUSY,       /* the exec is sent: the code runs */
        S_COLLECTING, /* fetching what the code wrote under /workspace/out */
        S_IDLE,       /* kept (a session): waiting for its next run */
        S_REMOVING,   /* the engine is asked to remove the container */
        S_DONE,       /* released (mgr->done), freed from the loop */
};

/* Where a run's time goes, for the log at debug level (run_deliver):
 * microsecond stamps of the steps on the call's path. */
enum run_step {
        RS_CALL,   /* the call came (run_new) */
        RS_READY,  /* it had a ready sandbox: taken from the pool, or started for it */
        RS_EXEC,   /* the exec frame went to the runtime */
        RS_RESULT, /* the runtime's result arrived */
        RS_ANSWER, /* the caller had it */
        RS_N,
};

/* One request in a sandbox, from assign to the hand-over of its result. */
struct run {
        struct sandbox_mgr *mgr;
        struct sandbox *sb; /* set when delivering: it leaves the sandbox then */
        struct sandbox_result res;
        bool final;      /* res holds the outcome: later failures keep it */
        bool delivering; /* its result is on its way to the caller */
        enum sandbox_lang lang;
        char *code;
        double timeout_s;
        sandbox_done_cb cb;
        void *userdata;
        void (*on_output)(void *userdata, bool is_stderr, const char *data, size_t n);
        void (*on_progress)(void *userdata, double done, double total, const char *message);
        void *hook_ud; /* their userdata */
        /* The hook its code's calls of MCP servers go to, and its state
         * for this run; NULL when it has none (sandbox_request.frames). */
        const struct sandbox_frame_ops *frame_ops;
        void *frames;
        long long t_start;
        long long t_us[RS_N];    /* enum run_step; 0: not reached */
        bool demand;             /* counted in mgr->demand until answered */
        long long runtime_us[3]; /* the runtime's word: record, exit, answer after the exec */
        /* Files in (before the code) and out (after it): transfer.c. */
        struct sandbox_file *files;
        size_t n_files, i_file;
        bool want_out;
        unsigned long long relay_max; /* sandbox_request's */
        json_t *out_list;             /* the runtime's out_files, being fetched */
        size_t i_out;
        unsigned long long out_bytes;
        struct files_op *fop;
        /* Stopping a session's run without losing the session. */
        enum sandbox_status interrupting; /* ST_OK, or why */
        char *interrupt_msg;
        /* A timer per purpose. */
        struct timer *limit_timer;   /* the code's time limit (and its uploads') */
        struct timer *grace_timer;   /* an interrupted run's last chance */
        struct timer *collect_timer; /* fetching /workspace/out */
        struct defer deliver_d;
};

struct sandbox {
        struct sandbox_mgr *mgr;
        struct list all_node; /* mgr->all, until released */
        /* By state: mgr->queue (S_QUEUED), mgr->ready (S_READY) or mgr->done
         * (S_DONE); on none otherwise. */
        struct list place;
        unsigned long seq; /* for the log, before the container has an id */
        enum sandbox_state state;
        bool pooled;       /* started by the pool, before any request */
        char *image;       /* the image a call asked for; NULL: the default */
        bool keep;         /* a session's: stays after a run (S_IDLE) */
        bool closing;      /* its owner removes it */
        bool killing;      /* its result waits for the engine's word that it is gone */
        bool stream_ended; /* attach EOF while the start request was out */
        long long t_created;
        /* When it entered each state up to S_STARTED (us; 0: never), for
         * where a call's wait for its sandbox went (run.c, log_steps). */
        long long t_state_us[S_STARTED + 1];
        long long ksm_scans;    /* the merger's full scans when it became ready; -1: unknown */
        char *id;               /* the container's */
        char short_id[13];      /* for messages and results */
        struct engine_req *req; /* one engine request at a time */
        struct attach *attach;
        struct line_reader frames;
        /* The runtime's lines after sandbox/ready carry tags (frame_auth.h). */
        struct frame_auth auth;
        bool ready_seen; /* its first line, sandbox/ready, came */
        struct line_reader diag;
        unsigned long long diag_logged;
        int remove_tries;
        long long remove_due_ms;     /* its removal came due (sandbox_retire) */
        struct timer *start_timer;   /* start_timeout_s */
        struct timer *remove_timer;  /* asks the engine again */
        struct timer *inspect_timer; /* asks again for a container still running */
        int inspect_tries;
        struct run *run;    /* the request it serves, or NULL */
        json_int_t exec_id; /* of the latest sandbox/exec */
        void (*gone)(void *owner, const char *why);
        void *owner;
        /* ask.c */
        struct list asks; /* struct sandbox_ask */
        unsigned ask_seq;
        struct list fops; /* struct sandbox_fop */
        /* What called out finds it S_DONE, never freed: freed from the
         * loop, after its result was handed over (core/loop.h). */
        struct defer free_d;
};

/* Calls that came together: from no call in flight back to none. */
struct pool_burst {
        long calls, hits;            /* hits: served by a ready sandbox */
        long long t0_ms;             /* the first call came */
        long long first_ms, last_ms; /* its first and last answers, after t0 */
};

struct sandbox_mgr {
        struct loop *loop;
        const struct config *cfg;
        struct sandbox_profile profile; /* seccomp profile and masks of every sandbox */
        struct engine *eng;
        bool owns_eng; /* found after start-up by mgr_engine */
        char instance[17];
        struct list all;   /* every sandbox not yet released */
        struct list queue; /* S_QUEUED, oldest first */
        long queued;
        long active; /* sandboxes holding a slot (created..removed) */
        bool shutting_down;
        bool runtime_checked;        /* the engine offers the runtime the settings ask for */
        bool info_checked;           /* its /info read once: what it can enforce */
        struct engine_req *info_req; /* that read, in the background */
        /* The engine's warnings on create, each said once (a hash each). */
        unsigned long warned[8];
        size_t n_warned;
        struct timer *drain_timer;
        /* The warm pool: ready sandboxes, each still for a single request. */
        bool pool_on;
        long pool_min, pool_max; /* in effect (see config.h) */
        struct list ready;       /* stack of S_READY sandboxes */
        long n_ready;
        struct timer *tick;
        struct timer *refill_timer; /* pool_refill_soon */
        bool refill_armed;
        long long refill_since_ms; /* when the armed refill came due */
        long long last_call_ms;
        unsigned long long hits, misses, failures;
        int consecutive_failures; /* starts that failed in a row */
        long long retry_at_ms;    /* no new start before this while failing */
        char last_error[1400];
        long long refill_ms[128]; /* creation to ready, newest last */
        unsigned n_refill;
        /* Demand (pool.c): calls for the default image in flight now, the
         * most at once in this window of pool_idle_s and in the last one,
         * and the pool size they ask for (and why that size). */
        long demand, peak_cur, peak_prev;
        /* Calls one after another: when the latest came (newest last), and
         * the ready sandboxes their pace asks for, per window as above. */
        long long arrive_ms[64];
        unsigned n_arrive;
        long pace_cur, pace_prev;
        long long window_ms; /* when peak_cur's window began */
        long target;
        const char *target_why;
        struct pool_burst last_burst, burst; /* calls from demand 0 back to 0 */
        /* What a ready sandbox costs the host (pool.c), measured now and
         * then: its processes (their runtime's word, or /proc) and the
         * engine's monitor (/proc). */
        long long cost_kb, cost_at_ms;
        int cost_procs;
        /* With page merging a new ready sandbox costs more than one the
         * merger has been through: the most measured, and the merger's
         * full scans (/sys/kernel/mm/ksm/full_scans, read on the tick). */
        long long cost_fresh_kb, ksm_scans;
        bool cost_unmerged;           /* the one being measured: not merged yet */
        struct sandbox_ask *cost_ask; /* sandbox/memory to the measured one */
        long long cost_rt_kb;         /* its answer; -1: none */
        int cost_rt_n;
        char cost_id[129]; /* the measured container */
        struct engine_req *cost_req;
        /* The engine's health (health.c): the last answer, when it came,
         * the request in flight and who waits for it. */
        json_t *health;
        long long health_ms;
        struct engine_req *health_req;
        struct list health_waits;     /* struct sandbox_health_wait */
        struct list leftovers;        /* being removed by the sweep */
        struct list done;             /* released sandboxes, freed from the loop */
        bool freeing;                 /* sandbox_mgr_free: the loop runs no more */
        struct sandbox_images images; /* what a call may ask for (sandbox_mgr_prepare) */
        json_t *mounts;               /* HostConfig.Mounts binds of every sandbox, or NULL */
        void (*drained)(void *);
        void *drained_ud;
};

/* sandbox.c */
void sandbox_set_state(struct sandbox *s, enum sandbox_state to);
const char *sandbox_state_name(enum sandbox_state st);
struct sandbox *sandbox_alloc(struct sandbox_mgr *m);
/* Take a slot and create the container. */
void sandbox_create(struct sandbox *s);
/* Remove the container (killing it if it runs); the result goes to the
 * caller now, unless it is being killed: then once the engine confirms. */
void sandbox_remove(struct sandbox *s);
/* Kill it for `why`, which becomes the result unless one is final. */
void sandbox_kill(struct sandbox *s, enum sandbox_status why, const char *msg);
/* A single-use sandbox whose run ended: answer now, remove shortly after. */
void sandbox_retire(struct sandbox *s);
void sandbox_fail(struct sandbox *s, enum sandbox_status st, const char *type, const char *msg);
/* Out of every list and nothing of it running; the result (if any) goes
 * to its caller, the slot to the next call. Refused: held no slot. */
void sandbox_finish(struct sandbox *s);
int sandbox_send_frame(struct sandbox *s, json_t *msg);
/* Frames to the runtime (one or more lines, each ending in a newline; a
 * data frame's line followed by its bytes), each behind its tag
 * (frame_auth.h), written whole or not at all: the one way anything
 * reaches a runtime after its key. */
int sandbox_write_lines(struct sandbox *s, const char *lines, size_t len);
void sandbox_notify_gone(struct sandbox *s, const char *why);
struct engine *mgr_engine(struct sandbox_mgr *m, struct err *e);

/* run.c */
struct run *run_new(struct sandbox *s, const struct sandbox_request *req, sandbox_done_cb cb,
                    void *userdata);
void run_free(struct run *r);
void run_set_error(struct sandbox_result *res, const char *type, const char *msg);
/* The run's outcome, unless one is final already. */
void run_settle(struct run *r, enum sandbox_status st, const char *type, const char *msg);
/* The sandbox is ready for its run: files first, then the code. */
void run_begin(struct sandbox *s);
int run_send_exec(struct sandbox *s);
/* The run is over: a kept sandbox waits for the next, any other goes. */
void run_end(struct sandbox *s);
void run_failed(struct sandbox *s, enum sandbox_status st, const char *type, const char *msg);
/* Hand the result over, once, from the loop. */
void run_deliver(struct sandbox *s);
/* A frame from the runtime. */
int run_on_frame(void *userdata, const char *line, size_t len);
/* Stop every timer of the run. */
void run_stop_timers(struct run *r);
/* The run's code no longer runs: its transfers, timers and MCP
 * calls stop; its result stays. */
void run_quiesce(struct sandbox *s);
/* Stop a session's run, keeping the session: the runtime interrupts it. */
void run_interrupt(struct sandbox *s, enum sandbox_status why, const char *msg);

/* transfer.c */
void transfer_upload(struct sandbox *s);
void transfer_collect(struct sandbox *s);
void transfer_cancel(struct run *r);
/* Its files in and the runtime's list of files out. */
void transfer_free(struct run *r);

/* ask.c */
/* The answer of the runtime to a sandbox_ask (a string id): its result,
 * or its error object. */
void ask_answered(struct sandbox *s, const char *id, json_t *result, json_t *error);
/* Ends what the sandbox's runtime and file operations still owe: answers
 * go out from the loop (none when the manager is being freed). */
void ask_release(struct sandbox *s);

/* pool.c */
struct sandbox *pool_take(struct sandbox_mgr *m);
bool pool_starting(const struct sandbox *s);
void pool_refill(struct sandbox_mgr *m);
void pool_refill_soon(struct sandbox_mgr *m);
/* While the calls of a burst (two or more) are being answered and none
 * waits for a slot, at most BURST_HOLD_MS from since_ms (when the work
 * first came due): how long work that can wait (a refill, a used
 * sandbox's removal) should wait before it looks again; 0: go. */
long long pool_burst_hold(const struct sandbox_mgr *m, long long since_ms);
/* A call for the default image came (hit: a ready sandbox took it), or its
 * answer went. */
void pool_demand_came(struct sandbox_mgr *m, struct run *r, bool hit);
void pool_demand_left(struct sandbox_mgr *m, struct run *r);
void pool_cost_cancel(struct sandbox_mgr *m);
void pool_ready(struct sandbox *s);
void pool_remove(struct sandbox *s);
void pool_note_failure(struct sandbox_mgr *m, const char *msg);

/* spec.c: who owns a container, this host and boot (with a pid, labels). */
struct identity {
        char host[256];
        char boot[64];
        /* "pid:[INODE]", whose pids the label's pid counts; in a container
         * "pid:[INODE]@ID12" (its id), as the kernel gives a freed
         * namespace's number to the next container's. */
        char pidns[96];
};
const struct identity *host_identity(void);

/* sweep.c */
void sweep_free(struct sandbox_mgr *m);

/* health.c: waits dropped uncalled, the request cancelled. */
void health_free(struct sandbox_mgr *m);
