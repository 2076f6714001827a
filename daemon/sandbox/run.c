/* A run: one request in a sandbox, from the call that asks for it to the
 * hand-over of its result. Its state is its own struct (struct run), made
 * when a sandbox is given the request and freed whole after the result
 * went to the caller, from the loop (core/loop.h). */
#include "sandbox/internal.h"

#include "core/jsonrpc.h"
#include "core/log.h"
#include "sandbox/files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A session's interrupted run: the runtime kills the worker one second
 * after SIGINT; past this the container goes. */
#define INTERRUPT_GRACE_MS 3000

static void output_init(struct sandbox_output *o, size_t limit)
{
        buf_init(&o->data, limit);
        buf_init(&o->tail, limit);
        o->tail_at = 0;
        o->total = 0;
        o->truncated = false;
}

void run_set_error(struct sandbox_result *res, const char *type, const char *msg)
{
        free(res->error_type);
        free(res->error_message);
        /* Messages may quote engine text cut at a byte limit. */
        res->error_type = type ? utf8_scrub(strdup(type)) : NULL;
        res->error_message = msg ? utf8_scrub(strdup(msg)) : NULL;
}

void run_settle(struct run *r, enum sandbox_status st, const char *type, const char *msg)
{
        if (!r || r->final)
                return;
        r->res.status = st;
        run_set_error(&r->res, type, msg);
        r->final = true;
}

/* The frame protocol's error codes for the runtime's requests, as the
 * bridge and runtime/api.py know them too (runtime/README.md). */
#define FRAME_DENIED    -32001
#define FRAME_TOO_LARGE -32004

/* The result of a run whose sandbox wrote a line without the runtime's
 * tag, with error type ChannelForged (runtime/README.md, "Frame protocol"). */
#define FORGED_MSG "the sandbox wrote a frame corral could not authenticate; it was ended"

/* Frames the run's frame hook sends to this sandbox's runtime. */
static int frame_send_lines(void *userdata, const char *lines, size_t len)
{
        return sandbox_write_lines(userdata, lines, len);
}

static void frame_send(void *userdata, json_t *msg)
{
        struct sandbox *s = userdata;
        json_t *id = json_incref(json_object_get(msg, "id"));
        size_t n;
        char *line = jrpc_encode(msg, &n);
        if (line && s->attach && sandbox_write_lines(s, line, n) < 0) {
                /* The code does not read its answers: a short error still
                 * fits (the queue keeps room), so no call waits forever. */
                free(line);
                line = jrpc_encode(jrpc_error(id, FRAME_TOO_LARGE,
                                              "the answer does not fit in the sandbox's input "
                                              "queue; too many large answers are waiting",
                                              json_pack("{s:s}", "type", "TooLarge")),
                                   &n);
                if (line && sandbox_write_lines(s, line, n) < 0)
                        log_warn("sandbox %s: dropped an answer to its code (input queue full)",
                                 s->short_id);
        }
        free(line);
        json_decref(id);
}

static int copy_files(struct run *r, const struct sandbox_request *req)
{
        if (!req->n_files)
                return 0;
        r->files = calloc(req->n_files, sizeof(*r->files));
        for (size_t i = 0; r->files && i < req->n_files; i++, r->n_files++) {
                const struct sandbox_file *f = &req->files[i];
                char *path = strdup(f->path), *data = malloc(f->len ? f->len : 1);
                if (!path || !data) {
                        free(path);
                        free(data);
                        break;
                }
                memcpy(data, f->data, f->len);
                r->files[i] = (struct sandbox_file){.path = path, .data = data, .len = f->len};
        }
        return r->n_files == req->n_files ? 0 : -ENOMEM;
}

/* The request's frame hook, for this run in s: what its code sends that is
 * not the sandbox's own goes there, and the hook answers through s. */
static int frames_open(struct run *r, const struct sandbox_request *req, struct sandbox *s)
{
        int rc = req->frames.ops->open(req->frames.ud, req->servers, req->network, frame_send,
                                       frame_send_lines, s, &r->frames);
        if (rc == 0)
                r->frame_ops = req->frames.ops;
        return rc;
}

/* What the run's code asked through its hook is withdrawn. */
static void frames_close(struct run *r)
{
        if (r->frame_ops)
                r->frame_ops->close(r->frames);
        r->frame_ops = NULL;
        r->frames = NULL;
}

/* Give s its request; NULL without memory (s is unchanged then: a ready
 * sandbox stays in the pool for the next call). */
struct run *run_new(struct sandbox *s, const struct sandbox_request *req, sandbox_done_cb cb,
                    void *userdata)
{
        struct sandbox_mgr *m = s->mgr;
        struct run *r = calloc(1, sizeof(*r));
        if (!r)
                return NULL;
        r->mgr = m;
        output_init(&r->res.out, m->cfg->output_limit);
        output_init(&r->res.err, m->cfg->output_limit);
        r->res.memory_bytes = -1;
        if (((json_array_size(req->servers) > 0 || json_array_size(req->network) > 0) &&
             req->frames.ops && frames_open(r, req, s) < 0) ||
            !(r->code = strdup(req->code)) || copy_files(r, req) < 0 ||
            (s->id && !(r->res.container_id = strdup(s->short_id)))) {
                run_free(r);
                return NULL;
        }
        s->keep = s->keep || req->keep;
        r->want_out = req->want_out;
        r->relay_max = req->relay_max;
        r->lang = req->lang;
        r->timeout_s = req->timeout_s;
        r->cb = cb;
        r->userdata = userdata;
        r->on_output = req->on_output;
        r->on_progress = req->on_progress;
        r->hook_ud = req->hook_userdata ? req->hook_userdata : userdata;
        r->t_start = now_ms();
        r->t_us[RS_CALL] = now_us();
        s->run = r;
        return r;
}

void run_stop_timers(struct run *r)
{
        timer_stop(r->limit_timer);
        timer_stop(r->grace_timer);
        timer_stop(r->collect_timer);
}

void run_free(struct run *r)
{
        if (!r)
                return;
        defer_cancel(&r->deliver_d);
        frames_close(r);
        transfer_cancel(r);
        transfer_free(r);
        timer_remove(r->limit_timer);
        timer_remove(r->grace_timer);
        timer_remove(r->collect_timer);
        json_decref(r->res.out_files);
        json_decref(r->res.globals);
        buf_free(&r->res.out.data);
        buf_free(&r->res.err.data);
        buf_free(&r->res.out.tail);
        buf_free(&r->res.err.tail);
        free(r->res.error_type);
        free(r->res.error_message);
        free(r->res.error_traceback);
        free(r->res.container_id);
        free(r->interrupt_msg);
        free(r->code);
        free(r);
}

/* The run's code no longer runs (or never will): what it had going stops,
 * its result stays. */
void run_quiesce(struct sandbox *s)
{
        struct run *r = s->run;
        if (!r)
                return;
        transfer_cancel(r);
        run_stop_timers(r);
        /* What its code asked of MCP servers is withdrawn. */
        frames_close(r);
}

/* ---- delivery */

/* Microseconds from step a to step b, or -1 when either was not reached. */
static long long step_us(const struct run *r, enum run_step a, enum run_step b)
{
        return r->t_us[a] && r->t_us[b] ? r->t_us[b] - r->t_us[a] : -1;
}

/* Microseconds from a sandbox's state a to state b (an S_ up to
 * S_STARTED, or S_READY: the runtime's word that it is ready, which is
 * the run's RS_READY), or -1 when it did not pass through both. */
static long long state_us(const struct run *r, const struct sandbox *s, enum sandbox_state a,
                          enum sandbox_state b)
{
        long long ta = s->t_state_us[a];
        long long tb = b == S_READY ? r->t_us[RS_READY] : s->t_state_us[b];
        return ta && tb && tb >= ta ? tb - ta : -1;
}

/* A call that waited this long for its sandbox says where the wait went
 * in the log, at info level: a loaded host or engine shows there. */
#define SLOW_SANDBOX_US 5000000LL

/* Where the call's time went, at debug level: what a warm call spends
 * that a session's does not shows here (tests/bench/README.md). A call
 * whose sandbox was started for it also has that start's steps, and at
 * info level when it waited SLOW_SANDBOX_US or more. */
static void log_steps(const struct run *r, const char *id)
{
        const struct sandbox *s = r->sb;
        long long wait = step_us(r, RS_CALL, RS_READY);
        /* Its first run only: a session's later runs did not wait for it. */
        if (s && !s->pooled && s->t_state_us[S_CREATING] &&
            r->t_us[RS_CALL] <= s->t_state_us[S_CREATING] &&
            (log_max_level >= LOG_DEBUG || wait >= SLOW_SANDBOX_US)) {
                long long queued = state_us(r, s, S_QUEUED, S_CREATING); /* -1: never queued */
                log_msg(
                    wait >= SLOW_SANDBOX_US ? LOG_INFO : LOG_DEBUG,
                    "sandbox %s: the call waited %lld ms for its sandbox: queued for a slot %lld, "
                    "engine create %lld, attach %lld, start %lld, runtime until ready %lld",
                    id, wait / 1000, queued / 1000, state_us(r, s, S_CREATING, S_ATTACHING) / 1000,
                    state_us(r, s, S_ATTACHING, S_STARTING) / 1000,
                    state_us(r, s, S_STARTING, S_STARTED) / 1000,
                    state_us(r, s, S_STARTED, S_READY) / 1000);
        }
        if (log_max_level < LOG_DEBUG)
                return;
        log_debug("sandbox %s: call path (us): sandbox %lld, exec %lld, runtime %lld "
                  "(record %lld, exit %lld, answer %lld), result %lld; total %lld",
                  id, step_us(r, RS_CALL, RS_READY), step_us(r, RS_READY, RS_EXEC),
                  step_us(r, RS_EXEC, RS_RESULT), r->runtime_us[0], r->runtime_us[1],
                  r->runtime_us[2], step_us(r, RS_RESULT, RS_ANSWER),
                  step_us(r, RS_CALL, RS_ANSWER));
}

static void deliver_now(void *userdata)
{
        struct run *r = userdata;
        struct sandbox_mgr *m = r->mgr;
        /* Off its sandbox first: the callback may give a kept sandbox its
         * next run. */
        if (r->sb && r->sb->run == r)
                r->sb->run = NULL;
        r->cb(r->userdata, &r->res);
        r->t_us[RS_ANSWER] = now_us();
        pool_demand_left(m, r);
        log_steps(r, r->res.container_id ? r->res.container_id : "-");
        run_free(r);
        /* The caller has its answer: top the pool up once it has read it. */
        pool_refill_soon(m);
}

void run_deliver(struct sandbox *s)
{
        struct run *r = s->run;
        if (!r || r->delivering)
                return;
        r->delivering = true;
        r->sb = s;
        r->res.duration_ms = now_ms() - r->t_start;
        if (r->res.out.total > r->res.out.data.len)
                r->res.out.truncated = true;
        if (r->res.err.total > r->res.err.data.len)
                r->res.err.truncated = true;
        if (!r->res.container_id && s->id)
                r->res.container_id = strdup(s->short_id);
        log_info("sandbox %s: %s in %lld ms", r->res.container_id ? r->res.container_id : "-",
                 sandbox_status_name(r->res.status), r->res.duration_ms);
        loop_defer(s->mgr->loop, &r->deliver_d, deliver_now, r);
}

/* ---- the run's course */

/* The run is over (its result taken, or it failed before the code ran): a
 * kept sandbox hands the result over and waits for the next run; any
 * other is removed. */
void run_end(struct sandbox *s)
{
        run_quiesce(s);
        if (!s->keep) {
                sandbox_retire(s);
                return;
        }
        if (s->killing || s->closing || !s->attach || s->mgr->shutting_down) {
                sandbox_remove(s);
                return;
        }
        s->run->res.kept = true;
        sandbox_set_state(s, S_IDLE);
        run_deliver(s);
}

void run_failed(struct sandbox *s, enum sandbox_status st, const char *type, const char *msg)
{
        run_settle(s->run, st, type, msg);
        run_end(s);
}

/* The time limit: a session's run is interrupted (the session stays), any
 * other sandbox is killed. Before the code started it was uploads, or a
 * file operation of the session, that took the time. */
static void limit_expired(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        struct run *r = s->run;
        char msg[256];
        (void)t;
        if (s->state == S_BUSY) {
                snprintf(msg, sizeof(msg), "the code ran longer than its time limit of %g s%s",
                         r->timeout_s, s->keep ? "" : " and was killed");
                if (s->keep)
                        run_interrupt(s, ST_TIMEOUT, msg);
                else
                        sandbox_kill(s, ST_TIMEOUT, msg);
        } else if (s->state == S_UPLOADING) {
                transfer_cancel(r);
                snprintf(msg, sizeof(msg),
                         "the code could not start within its time limit of %g s: writing its "
                         "files into /workspace took that long",
                         r->timeout_s);
                if (s->keep)
                        run_failed(s, ST_TIMEOUT, "Timeout", msg);
                else
                        sandbox_kill(s, ST_TIMEOUT, msg);
        }
}

static void arm_limit(struct sandbox *s)
{
        struct run *r = s->run;
        /* Round up: a limit must never become 0, which disarms the timer. */
        long long ms = (long long)ceil(r->timeout_s * 1000);
        if (ms <= 0)
                ms = 1;
        if (timer_set(s->mgr->loop, &r->limit_timer, limit_expired, s, ms) < 0)
                log_warn("sandbox %s: cannot arm its time limit", s->short_id);
}

void run_begin(struct sandbox *s)
{
        s->run->t_us[RS_READY] = now_us();
        timer_stop(s->start_timer); /* started: the run's own limit applies */
        if (s->run->n_files == 0) {
                run_send_exec(s); /* no files: the exec goes at once */
                return;
        }
        sandbox_set_state(s, S_UPLOADING); /* until the exec goes */
        arm_limit(s);
        transfer_upload(s);
}

/* Returns negative when it failed (the sandbox is being removed then). */
int run_send_exec(struct sandbox *s)
{
        struct run *r = s->run;
        const struct config *cfg = s->mgr->cfg;
        long long ms = (long long)ceil(r->timeout_s * 1000);
        if (ms <= 0)
                ms = 1;
        /* The runtime holds the time limit too (a second later), so that the
         * code stops even when this daemon is killed or stopped meanwhile. */
        json_t *params = json_pack(
            "{s:s, s:s, s:I, s:I}", "language",
            r->lang == LANG_PYTHON  ? "python"
            : r->lang == LANG_SHELL ? "shell"
                                    : "state",
            "code", r->code, "output_limit",
            (json_int_t)(r->relay_max > cfg->output_limit ? r->relay_max : cfg->output_limit),
            "time_limit_ms", (json_int_t)ms);
        if (params && s->keep)
                json_object_set_new(params, "keep", json_true());
        /* A single-use run may send its /workspace/out files in its result
         * (up to this much base64), sparing a fetch through the engine. */
        if (params && !s->keep && r->want_out) {
                unsigned long long most = (cfg->out_max_bytes + 2) / 3 * 4;
                if (most > cfg->max_frame / 2)
                        most = cfg->max_frame / 2;
                json_object_set_new(params, "out_inline_max", json_integer((json_int_t)most));
        }
        if (params && r->frame_ops) {
                r->frame_ops->set_sandbox(r->frames, s->short_id);
                r->frame_ops->exec_params(r->frames, params);
        }
        /* Each exec its own id: a late notifications/cancelled for an
         * earlier run of a session must not stop this one. */
        if (sandbox_send_frame(s, jrpc_request(++s->exec_id, "sandbox/exec", params)) < 0) {
                sandbox_fail(s, ST_ERROR, "FrameError", "the code does not fit in one frame");
                return -1;
        }
        r->t_us[RS_EXEC] = now_us();
        sandbox_set_state(s, S_BUSY);
        arm_limit(s); /* the code's whole time, whatever the uploads took */
        return 0;
}

/* An interrupted session run that did not stop: the session goes. */
static void grace_expired(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        struct run *r = s->run;
        char msg[800];
        (void)t;
        snprintf(msg, sizeof(msg),
                 "%s; it did not stop when interrupted, so the session's sandbox was removed",
                 r->interrupt_msg ? r->interrupt_msg : "the run was stopped");
        sandbox_kill(s, r->interrupting, msg);
}

/* A session's run is stopped without losing the session: the runtime
 * interrupts it and answers; past a grace the container goes after all. */
void run_interrupt(struct sandbox *s, enum sandbox_status why, const char *msg)
{
        struct run *r = s->run;
        if (r->interrupting != ST_OK)
                return;
        r->interrupting = why;
        free(r->interrupt_msg);
        r->interrupt_msg = msg ? strdup(msg) : NULL;
        log_info("sandbox %s: interrupting its run (%s)", s->short_id, sandbox_status_name(why));
        sandbox_send_frame(s, jrpc_notification("notifications/cancelled",
                                                json_pack("{s:I}", "requestId", s->exec_id)));
        timer_stop(r->limit_timer);
        if (timer_set(s->mgr->loop, &r->grace_timer, grace_expired, s, INTERRUPT_GRACE_MS) < 0)
                log_warn("sandbox %s: no grace timer for its interrupted run", s->short_id);
}

/* ---- frames from the runtime */

static void take_error(struct run *r, json_t *res, const char *st)
{
        json_t *error = json_object_get(res, "error");
        if (r->res.status == ST_TIMEOUT) {
                /* The runtime's own limit, a second after ours: this daemon
                 * was late (stopped, or its loop held up). */
                char msg[160];
                snprintf(msg, sizeof(msg),
                         "the code ran longer than its time limit of %g s and was stopped by "
                         "the sandbox's runtime",
                         r->timeout_s);
                run_set_error(&r->res, "Timeout", msg);
        } else if (json_is_object(error)) {
                run_set_error(&r->res, json_string_value(json_object_get(error, "type")),
                              json_string_value(json_object_get(error, "message")));
                const char *tb = json_string_value(json_object_get(error, "traceback"));
                free(r->res.error_traceback);
                r->res.error_traceback = tb ? strdup(tb) : NULL;
        } else if (r->res.status == ST_OOM) {
                run_set_error(&r->res, "MemoryError", "the code exceeded the sandbox memory limit");
        } else if (st && strcmp(st, "killed") == 0) {
                char msg[96];
                json_int_t sig = json_integer_value(json_object_get(res, "signal"));
                snprintf(msg, sizeof(msg), "the code was killed by signal %d (%s)", (int)sig,
                         sig > 0 && sig < 65 ? strsignal((int)sig) : "unknown");
                run_set_error(&r->res, "Killed", msg);
        }
}

/* The runtime's result of the exec (the container's word: checked). */
static void take_result(struct sandbox *s, json_t *res)
{
        struct run *r = s->run;
        const char *st = json_string_value(json_object_get(res, "status"));
        json_t *code = json_object_get(res, "exit_code");
        r->res.status = !st                          ? ST_ERROR
                        : strcmp(st, "ok") == 0      ? ST_OK
                        : strcmp(st, "oom") == 0     ? ST_OOM
                        : strcmp(st, "timeout") == 0 ? ST_TIMEOUT
                                                     : ST_ERROR;
        if (json_is_integer(code)) {
                r->res.has_exit_code = true;
                r->res.exit_code = (int)json_integer_value(code);
        }
        json_int_t ob = json_integer_value(json_object_get(res, "stdout_bytes"));
        json_int_t eb = json_integer_value(json_object_get(res, "stderr_bytes"));
        if (ob > 0 && (unsigned long long)ob > r->res.out.total)
                r->res.out.total = (unsigned long long)ob;
        if (eb > 0 && (unsigned long long)eb > r->res.err.total)
                r->res.err.total = (unsigned long long)eb;
        take_error(r, res, st);
        /* The runtime's own stamps, for the log only. */
        json_t *us = json_object_get(res, "us");
        for (size_t i = 0; i < ARRAY_SIZE(r->runtime_us); i++) {
                json_t *v = json_array_get(us, i);
                r->runtime_us[i] = json_is_integer(v) ? json_integer_value(v) : -1;
        }
        json_t *globals = json_object_get(res, "globals");
        if (json_is_object(globals) && !r->res.globals)
                r->res.globals = json_incref(globals);
        json_t *mem = json_object_get(res, "memory_bytes");
        r->res.memory_bytes =
            json_is_integer(mem) && json_integer_value(mem) >= 0 ? json_integer_value(mem) : -1;
        const char *state = json_string_value(json_object_get(res, "state"));
        r->res.state_lost = s->keep && state && strcmp(state, "lost") == 0;
        r->res.restarted = s->keep && json_is_true(json_object_get(res, "restarted"));
        /* What the runtime says it wrote is checked when fetched. */
        json_t *out = json_object_get(res, "out_files");
        json_decref(r->out_list);
        r->out_list = r->want_out && json_is_array(out) ? json_incref(out) : NULL;
        r->res.files_changed =
            json_array_size(out) > 0 || json_is_true(json_object_get(res, "out_removed"));
        if (r->interrupting != ST_OK) {
                /* We stopped it: say why, and whether the session kept its state. */
                char msg[700];
                snprintf(
                    msg, sizeof(msg), "%s; %s", r->interrupt_msg ? r->interrupt_msg : "stopped",
                    r->res.state_lost ? "its Python state was lost (files in /workspace remain)"
                                      : "the session and its state were kept");
                r->res.status = r->interrupting;
                run_set_error(&r->res, r->interrupting == ST_TIMEOUT ? "Timeout" : "Cancelled",
                              msg);
                free(r->res.error_traceback);
                r->res.error_traceback = NULL;
        }
        r->final = true;
}

/* Past the head, the ring keeps the latest bytes. */
static void tail_append(struct sandbox_output *o, const char *p, size_t n)
{
        struct buf *t = &o->tail;
        if (!t->max)
                return;
        if (n >= t->max) { /* the piece alone fills the ring */
                p += n - t->max;
                n = t->max;
        }
        size_t fits = t->max - t->len;
        size_t grow = n < fits ? n : fits;
        if (buf_append(t, p, grow) < 0 || !t->len)
                return; /* no memory: the tail keeps what it has */
        p += grow;
        n -= grow;
        while (n) { /* full: overwrite the oldest */
                size_t k = t->len - o->tail_at < n ? t->len - o->tail_at : n;
                memcpy(t->data + o->tail_at, p, k);
                o->tail_at = (o->tail_at + k) % t->len;
                p += k;
                n -= k;
        }
}

size_t sandbox_tail(const struct sandbox_output *o, size_t n, size_t after, struct buf *to)
{
        const struct buf *t = &o->tail;
        size_t head_left = o->data.len > after ? o->data.len - after : 0;
        /* The ring follows data without a gap until it first wraps. */
        bool joined = o->total - o->data.len <= t->len;
        size_t have = t->len + (joined ? head_left : 0);
        if (n > have)
                n = have;
        size_t from_head = n > t->len ? n - t->len : 0, from_ring = n - from_head;
        size_t start = to->len;
        if (from_head)
                buf_append_some(to, o->data.data + o->data.len - from_head, from_head);
        size_t first = t->len - o->tail_at; /* oldest..end of the array */
        size_t skip = t->len - from_ring;   /* of the ring's bytes, oldest first */
        if (!from_ring) {
                ;
        } else if (skip < first) {
                size_t k = first - skip < from_ring ? first - skip : from_ring;
                buf_append_some(to, t->data + o->tail_at + skip, k);
                buf_append_some(to, t->data, from_ring - k);
        } else {
                buf_append_some(to, t->data + (skip - first), from_ring);
        }
        /* Start on a whole character. */
        size_t cut = 0;
        while (start + cut < to->len && cut < 4 &&
               ((unsigned char)to->data[start + cut] & 0xC0) == 0x80)
                cut++;
        if (cut) {
                memmove(to->data + start, to->data + start + cut, to->len - start - cut);
                to->len -= cut;
                to->data[to->len] = '\0';
        }
        return to->len - start;
}

static void take_output(struct sandbox *s, json_t *params)
{
        struct run *r = s->run;
        const char *stream = json_string_value(json_object_get(params, "stream"));
        json_t *data = json_object_get(params, "data");
        if (!stream || !json_is_string(data))
                return;
        struct sandbox_output *o = strcmp(stream, "stderr") == 0 ? &r->res.err : &r->res.out;
        const char *p = json_string_value(data);
        size_t n = json_string_length(data);
        size_t room = o->data.max - o->data.len;
        o->total += n;
        /* The head keeps what fits, cut at a character boundary so that it
         * stays valid UTF-8; the rest goes to the tail's ring. */
        if (o->truncated) {
                tail_append(o, p, n);
        } else if (n <= room) {
                buf_append(&o->data, p, n);
        } else {
                size_t k = utf8_cut(p, room);
                buf_append(&o->data, p, k);
                o->truncated = true;
                tail_append(o, p + k, n - k);
        }
        if (r->on_output)
                r->on_output(r->hook_ud, o == &r->res.err, p, n);
}

/* The code's own report, relayed by the runtime: untrusted. */
static void take_progress(struct run *r, json_t *params)
{
        json_t *done = json_object_get(params, "progress");
        json_t *total = json_object_get(params, "total");
        json_t *msg = json_object_get(params, "message");
        bool valid = json_is_number(done) && isfinite(json_number_value(done)) &&
                     (!total || json_is_null(total) ||
                      (json_is_number(total) && isfinite(json_number_value(total)) &&
                       json_number_value(total) >= 0)) &&
                     (!msg || json_is_null(msg) || json_is_string(msg));
        if (valid && r->on_progress)
                r->on_progress(r->hook_ud, json_number_value(done),
                               json_is_number(total) ? json_number_value(total) : -1,
                               json_string_value(msg));
}

static void exec_answered(struct sandbox *s, const struct jrpc_msg *m)
{
        struct run *r = s->run;
        r->t_us[RS_RESULT] = now_us();
        if (m->kind == JRPC_RESULT) {
                take_result(s, m->result);
        } else {
                r->res.status = ST_ERROR;
                run_set_error(&r->res, "RuntimeError",
                              json_string_value(json_object_get(m->error, "message")));
                r->final = true;
        }
        if (r->out_list && json_array_size(r->out_list) > 0)
                transfer_collect(s);
        else
                run_end(s);
}

/* No server may be called from this run: say so instead of leaving the
 * code waiting. */
static void deny_request(struct sandbox *s, const struct jrpc_msg *m)
{
        size_t n;
        char *out = jrpc_encode(jrpc_error(m->id, FRAME_DENIED,
                                           "this run may call no MCP servers (name them in "
                                           "run_python's \"servers\")",
                                           json_pack("{s:s}", "type", "PolicyDenied")),
                                &n);
        if (out && sandbox_write_lines(s, out, n) < 0)
                log_warn("sandbox %s: stdin queue full", s->short_id);
        free(out);
}

static void on_message(struct sandbox *s, const struct jrpc_msg *m)
{
        struct run *r = s->run;
        bool busy = r && s->state == S_BUSY;
        bool note = m->kind == JRPC_NOTIFICATION,
             answer = m->kind == JRPC_RESULT || m->kind == JRPC_ERROR;
        if (note && strcmp(m->method, "sandbox/output") == 0) {
                if (busy)
                        take_output(s, m->params);
        } else if (note && strcmp(m->method, "corral/progress") == 0) {
                if (busy)
                        take_progress(r, m->params);
        } else if (note && strcmp(m->method, "sandbox/ready") == 0) {
                if (s->state == S_STARTED || s->state == S_STARTING) {
                        if (r)
                                run_begin(s);
                        else
                                pool_ready(s);
                }
        } else if (answer && json_is_integer(m->id)) {
                if (busy && json_integer_value(m->id) == s->exec_id)
                        exec_answered(s, m);
        } else if (answer && json_is_string(m->id)) {
                ask_answered(s, json_string_value(m->id), m->kind == JRPC_RESULT ? m->result : NULL,
                             m->kind == JRPC_ERROR ? m->error : NULL);
        } else if (busy && r->frame_ops &&
                   (m->kind == JRPC_REQUEST || m->kind == JRPC_NOTIFICATION)) {
                /* Its code calls MCP servers; answers may come now or later. */
                r->frame_ops->frame(r->frames, m);
        } else if (m->kind == JRPC_REQUEST) {
                deny_request(s, m);
        }
}

/* A line the runtime's supervisor did not write (frame_auth.h): code in
 * the sandbox reached the frame channel. Nothing of the line is acted on;
 * the sandbox is ended and its run, if any, says why. */
static int frame_forged(struct sandbox *s, const char *what)
{
        log_event(LOG_WARN, "corral.sandbox", "sandbox %s %s: corral ended it", s->short_id, what);
        run_settle(s->run, ST_ERROR, "ChannelForged", FORGED_MSG);
        sandbox_kill(s, ST_ERROR, FORGED_MSG);
        return -1;
}

int run_on_frame(void *userdata, const char *line, size_t len)
{
        struct sandbox *s = userdata;
        if (!line) {
                /* Its tag cannot be checked. Taken as the runtime's (whose
                 * frames are sized to fit, so this is a bug there): its
                 * number is spent. Had someone else written it, the
                 * runtime's next line fails its check. */
                log_warn("sandbox %s: dropped a frame over %llu bytes", s->short_id,
                         s->mgr->cfg->max_frame);
                if (s->ready_seen)
                        s->auth.seq++;
                return 0;
        }
        /* Only the first line, sandbox/ready, comes without a tag. */
        if (s->ready_seen) {
                enum frame_verdict v = frame_auth_check(&s->auth, line, len, &line, &len);
                if (v != FRAME_OK) {
                        char what[200];
                        snprintf(what, sizeof(what), "wrote %s on its frame channel",
                                 frame_verdict_name(v));
                        return frame_forged(s, what);
                }
        }
        struct jrpc_msg m;
        json_t *id = NULL;
        struct err e = {0};
        /* A file's read answer is taken apart quicker; the tree and the
         * errors are jrpc_parse's. */
        if (files_frame_parse(line, len, &m, &id, &e) < 0) {
                json_decref(id);
                if (!s->ready_seen)
                        return frame_forged(
                            s, "wrote a first line that is not sandbox/ready on its frame channel");
                log_warn("sandbox %s: bad frame: %s", s->short_id, e.msg);
                return 0;
        }
        if (!s->ready_seen) {
                if (m.kind != JRPC_NOTIFICATION || strcmp(m.method, "sandbox/ready") != 0) {
                        jrpc_msg_done(&m);
                        json_decref(id);
                        return frame_forged(
                            s, "wrote a first line that is not sandbox/ready on its frame channel");
                }
                s->ready_seen = true;
        }
        /* The runtime got a line on its stdin that corral did not write. */
        if (m.kind == JRPC_NOTIFICATION && strcmp(m.method, "sandbox/forged") == 0) {
                jrpc_msg_done(&m);
                json_decref(id);
                return frame_forged(s, "had a line on its runtime's input that corral did not "
                                       "write (the runtime said so)");
        }
        on_message(s, &m);
        jrpc_msg_done(&m);
        json_decref(id);
        /* Something above may have ended it: stop reading then. */
        return s->attach ? 0 : -1;
}

/* ---- the calls */

/* Refused before anything started (it holds no slot); the caller hears of
 * it from the loop, like of any result. */
static void refuse(struct sandbox *s, const char *type, const char *msg)
{
        run_settle(s->run, ST_ENGINE_ERROR, type, msg);
        sandbox_finish(s);
}

/* The warm path: a ready sandbox, taken in constant time. */
static int run_warm(struct sandbox_mgr *m, const struct sandbox_request *req, sandbox_done_cb cb,
                    void *userdata, struct sandbox **ret)
{
        struct sandbox *s = list_first(&m->ready, struct sandbox, place);
        if (!run_new(s, req, cb, userdata))
                return -ENOMEM;
        pool_take(m);
        m->hits++;
        *ret = s;
        run_begin(s);
        /* No refill now: starting containers would take the CPU from this
         * call. It follows the answer (deliver_now). */
        return 0;
}

/* A new sandbox for this call, started now or queued for a slot. */
static int run_cold(struct sandbox_mgr *m, const struct sandbox_request *req, bool other,
                    sandbox_done_cb cb, void *userdata, struct sandbox **ret)
{
        if (m->active >= m->cfg->max_sandboxes && m->queued >= m->cfg->max_queue)
                return -EBUSY;
        struct sandbox *s = sandbox_alloc(m);
        if (!s || (other && !(s->image = strdup(req->image))) || !run_new(s, req, cb, userdata)) {
                if (s)
                        sandbox_finish(s); /* no run: nobody to tell */
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
                sandbox_set_state(s, S_QUEUED);
                list_append(&m->queue, &s->place);
                m->queued++;
                return 0;
        }
        sandbox_create(s);
        pool_refill(m);
        return 0;
}

static int run_any(struct sandbox_mgr *m, const struct sandbox_request *req, bool other,
                   sandbox_done_cb cb, void *userdata, struct sandbox **ret);

int sandbox_run(struct sandbox_mgr *m, const struct sandbox_request *req, sandbox_done_cb cb,
                void *userdata, struct sandbox **ret)
{
        if (m->shutting_down)
                return -ESHUTDOWN;
        /* The pool holds the default image: a call for another gets a
         * sandbox made for it, and is no demand on the pool. */
        bool other = req->image && strcmp(req->image, m->cfg->image) != 0;
        unsigned long long hits = m->hits;
        int r = run_any(m, req, other, cb, userdata, ret);
        if (r == 0 && !other && m->pool_on)
                pool_demand_came(m, (*ret)->run, m->hits > hits);
        return r;
}

static int run_any(struct sandbox_mgr *m, const struct sandbox_request *req, bool other,
                   sandbox_done_cb cb, void *userdata, struct sandbox **ret)
{
        m->last_call_ms = now_ms();
        if (!other && !list_empty(&m->ready))
                return run_warm(m, req, cb, userdata, ret);
        /* A pool sandbox already on its way: it will run this call. */
        struct sandbox *s = NULL, *x;
        if (!other)
                list_for_each(x, &m->all, all_node)
                {
                        if (pool_starting(x)) {
                                s = x;
                                break;
                        }
                }
        if (s) {
                if (!run_new(s, req, cb, userdata))
                        return -ENOMEM;
                m->misses++;
                *ret = s;
                pool_refill(m);
                return 0;
        }
        return run_cold(m, req, other, cb, userdata, ret);
}

int sandbox_exec(struct sandbox *s, const struct sandbox_request *req, sandbox_done_cb cb,
                 void *userdata)
{
        if (!sandbox_idle(s) || s->mgr->shutting_down)
                return -EBUSY;
        if (!run_new(s, req, cb, userdata))
                return -ENOMEM;
        s->mgr->last_call_ms = now_ms();
        run_begin(s);
        return 0;
}

void sandbox_cancel(struct sandbox *s)
{
        if (s->keep && s->state == S_BUSY) {
                run_interrupt(s, ST_CANCELLED, "the call was cancelled");
                return;
        }
        if (s->keep && s->state == S_UPLOADING) {
                transfer_cancel(s->run);
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
        return s->state == S_IDLE && !s->closing && !s->run;
}

const struct sandbox_result *sandbox_partial(const struct sandbox *s)
{
        static const struct sandbox_result none = {.memory_bytes = -1};
        return s->run ? &s->run->res : &none;
}
