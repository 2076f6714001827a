#include "mcp/server.h"

#include "bridge/bridge.h"
#include "core/buf.h"
#include "core/jsonrpc.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/util.h"
#include "mcp/internal.h"
#include "mcp/tools.h"
#include "mcp/transport.h"
#include "sandbox/files.h"
#include "sandbox/session.h"
#include "runtime/protocol.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifndef CORRAL_VERSION
#define CORRAL_VERSION "0"
#endif

static const char *const protocol_versions[] = {
    "2025-11-25", /* latest first: offered when the client's is unknown */
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
};

/* A call still running after its sync_wait_s is answered "running" and
 * goes on as a job, followed with job_status / job_result / job_cancel. */
#define JOB_KEEP_MAX 64   /* finished jobs kept at most; the oldest go first */
#define JOB_TAIL     2000 /* bytes of newest output in job_status */

struct call;

/* A job_result (or tasks/result) waiting for its job to end. */
struct job_wait {
        struct job_wait *next;
        struct call *job;
        json_t *id;
        struct timer *timer; /* NULL: tasks/result, which waits for the end */
};

/* MCP tasks (2025-11-25): a tools/call with `task` is a job from its start,
 * followed with tasks/get, tasks/result, tasks/cancel and tasks/list. */
#define TASK_POLL_MS    1000
#define TASK_TTL_MAX_MS (24LL * 3600 * 1000)

struct call {
        struct mcp_server *srv;
        struct call *prev, *next;
        json_t *id;
        struct sandbox *sb;        /* NULL once it has ended */
        struct progress *progress; /* NULL: the host asked for none */
        bool cancelled;            /* the host withdrew it: no response is sent */
        const char *tool;          /* run_python or run_shell */
        char *code_line;           /* the start of its code, for job_list */
        char *session;             /* the session it runs in, or NULL */
        long long t_start, t_end;
        struct timer *sync_timer; /* sync_wait_s */
        char job_id[JOB_ID_MAX];  /* "" until it becomes a job */
        json_t *result;           /* a finished job's result */
        struct timer *expire;     /* job_retention_s after it ended */
        struct job_wait *waits;
        /* A task: a job from its start. */
        bool task;
        bool task_cancelled;    /* tasks/cancel: it stays "cancelled" */
        long long created_wall; /* ms since the epoch */
        long long updated_wall;
        long long ttl_ms; /* kept at least this long from creation */
};

void mcp_send(struct mcp_server *s, json_t *msg)
{
        transport_send(s->transport, msg);
}

void mcp_send_error(struct mcp_server *s, json_t *id, int code, const char *message)
{
        mcp_send(s, jrpc_error(id, code, message, NULL));
}

void mcp_send_result(struct mcp_server *s, json_t *id, json_t *result)
{
        if (result)
                mcp_send(s, jrpc_result(id, result));
        else
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "cannot encode the result");
}

/* ---- tools/call */

/* The run's output and the code's own reports, for its progress. */
static void call_output(void *userdata, bool is_stderr, const char *data, size_t n)
{
        struct call *c = userdata;
        (void)is_stderr;
        progress_output(c->progress, data, n);
}

static void call_progress(void *userdata, double done, double total, const char *message)
{
        struct call *c = userdata;
        progress_report(c->progress, done, total, message);
}

static void job_wait_free(struct job_wait *w)
{
        struct call *c = w->job;
        for (struct job_wait **p = &c->waits; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        timer_remove(w->timer);
        json_decref(w->id);
        free(w);
}

static void call_free(struct call *c)
{
        struct mcp_server *s = c->srv;
        progress_free(c->progress);
        while (c->waits)
                job_wait_free(c->waits);
        timer_remove(c->sync_timer);
        timer_remove(c->expire);
        json_decref(c->result);
        free(c->code_line);
        free(c->session);
        if (c->prev)
                c->prev->next = c->next;
        else
                s->calls = c->next;
        if (c->next)
                c->next->prev = c->prev;
        json_decref(c->id);
        free(c);
}

static json_t *job_running_result(struct call *c)
{
        return tools_running_result(sandbox_partial(c->sb), c->job_id, now_ms() - c->t_start);
}

static void job_expire(struct timer *t, void *userdata)
{
        struct call *c = userdata;
        (void)t;
        log_info("job %s: result dropped after job_retention_s", c->job_id);
        call_free(c);
}

/* Keep at most JOB_KEEP_MAX finished jobs: drop the oldest. */
static void jobs_prune(struct mcp_server *s)
{
        for (;;) {
                size_t n = 0;
                struct call *oldest = NULL;
                for (struct call *c = s->calls; c; c = c->next)
                        if (c->job_id[0] && !c->sb) {
                                n++;
                                if (!oldest || c->t_end < oldest->t_end)
                                        oldest = c;
                        }
                if (n <= JOB_KEEP_MAX)
                        return;
                log_info("job %s: result dropped (more than %d finished jobs)", oldest->job_id,
                         JOB_KEEP_MAX);
                call_free(oldest);
        }
}

static long long wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void iso8601(long long ms, char *out, size_t size)
{
        time_t secs = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        size_t n = strftime(out, size, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out + n, size - n, ".%03lldZ", ms % 1000);
}

/* A task's status: working, or by its result (a tool result with isError
 * is "failed", as the tasks specification asks). */
static const char *task_status(const struct call *c)
{
        if (c->task_cancelled)
                return "cancelled";
        if (!c->t_end) /* not ended (it may not have a sandbox yet) */
                return "working";
        if (!c->result)
                return "failed";
        const char *st = json_string_value(
            json_object_get(json_object_get(c->result, "structuredContent"), "status"));
        if (st && strcmp(st, "cancelled") == 0)
                return "cancelled";
        return json_is_true(json_object_get(c->result, "isError")) ? "failed" : "completed";
}

/* The Task object of the tasks specification (new reference). */
static json_t *task_json(const struct call *c)
{
        char created[40], updated[40], msg[400];
        iso8601(c->created_wall, created, sizeof(created));
        iso8601(c->updated_wall, updated, sizeof(updated));
        const char *status = task_status(c);
        if (!c->t_end) {
                snprintf(msg, sizeof(msg), "%s running for %lld ms", c->tool,
                         now_ms() - c->t_start);
        } else {
                json_t *sc = json_object_get(c->result, "structuredContent");
                json_t *err = json_object_get(sc, "error");
                const char *type = json_string_value(json_object_get(err, "type"));
                const char *m = json_string_value(json_object_get(err, "message"));
                const char *run = json_string_value(json_object_get(sc, "status"));
                snprintf(msg, sizeof(msg), "%s%s%s%s%s",
                         c->task_cancelled ? "cancelled by tasks/cancel; the run: " : "",
                         run ? run : status, type ? ": " : "", type ? type : "", m ? ": " : "");
                if (m)
                        snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "%.300s", m);
                utf8_scrub(msg);
        }
        json_t *t = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:i}", "taskId", c->job_id, "status",
                              status, "statusMessage", msg, "createdAt", created, "lastUpdatedAt",
                              updated, "ttl", (json_int_t)c->ttl_ms, "pollInterval", TASK_POLL_MS);
        return t;
}

/* What tasks/result answers: the tool's result, tied to its task. */
static json_t *task_payload(const struct call *c)
{
        json_t *r = json_deep_copy(c->result);
        if (!r)
                return NULL;
        json_t *meta = json_object_get(r, "_meta");
        if (!json_is_object(meta)) {
                meta = json_object();
                json_object_set_new(r, "_meta", meta);
        }
        json_object_set_new(meta, RELATED_TASK_KEY, json_pack("{s:s}", "taskId", c->job_id));
        return r;
}

/* A job's end: its result (stolen) is kept and given to those waiting. */
static void job_store(struct call *c, json_t *result)
{
        struct mcp_server *s = c->srv;
        c->t_end = now_ms();
        c->result = result;
        if (c->result)
                json_object_set_new(json_object_get(c->result, "structuredContent"), "job_id",
                                    json_string(c->job_id));
        /* Progress belongs to a running call (a task's keeps its token). */
        progress_free(c->progress);
        c->progress = NULL;
        c->updated_wall = wall_ms();
        while (c->waits) {
                struct job_wait *w = c->waits;
                mcp_send_result(s, w->id, w->timer ? json_deep_copy(c->result) : task_payload(c));
                job_wait_free(w);
        }
        long long keep = (long long)(s->cfg->job_retention_s * 1000);
        if (c->task) {
                /* Kept job_retention_s after its end, and its ttl from its start. */
                long long by_ttl = c->created_wall + c->ttl_ms - c->updated_wall;
                keep = by_ttl > keep ? by_ttl : keep;
                mcp_send(s, jrpc_notification("notifications/tasks/status", task_json(c)));
        }
        if (timer_add(s->loop, job_expire, c, &c->expire) == 0)
                timer_arm(c->expire, keep > 0 ? keep : 1);
        jobs_prune(s);
}

static void job_finished(struct call *c, const struct sandbox_result *res)
{
        log_info("job %s: %s after %lld ms", c->job_id, sandbox_status_name(res->status),
                 now_ms() - c->t_start);
        job_store(c, tools_result(res, c->session));
}

/* sync_wait_s passed: answer "running", and let the sandbox go on. */
static void call_detach(struct timer *t, void *userdata)
{
        struct call *c = userdata;
        struct mcp_server *s = c->srv;
        (void)t;
        if (c->cancelled || !c->sb || c->job_id[0])
                return;
        snprintf(c->job_id, sizeof(c->job_id), "job-%u", ++s->job_seq);
        /* The request is answered: progress for it would now be wrong. */
        progress_free(c->progress);
        c->progress = NULL;
        log_info("%s goes on as %s", c->tool, c->job_id);
        mcp_send_result(s, c->id, job_running_result(c));
}

static void call_done(void *userdata, const struct sandbox_result *res)
{
        struct call *c = userdata;
        c->sb = NULL;
        timer_remove(c->sync_timer);
        c->sync_timer = NULL;
        if (c->job_id[0]) {
                job_finished(c, res);
                return;
        }
        /* A withdrawn call gets no response (MCP cancellation rules). */
        if (!c->cancelled)
                mcp_send_result(c->srv, c->id, tools_result(res, c->session));
        call_free(c);
}

/* ---- jobs */

/* The job named by args.job_id, or an answer saying why not (then NULL). */
static struct call *job_find(struct mcp_server *s, json_t *id, json_t *args, const char *tool,
                             const char *extra)
{
        char msg[512];
        const char *key;
        json_t *v;
        json_object_foreach(args, key, v)
        {
                if (strcmp(key, "job_id") != 0 && (!extra || strcmp(key, extra) != 0)) {
                        snprintf(msg, sizeof(msg),
                                 "unknown argument \"%.100s\" (%s takes job_id%s%s)", key, tool,
                                 extra ? " and " : "", extra ? extra : "");
                        utf8_scrub(msg);
                        mcp_send_result(s, id, arguments_error(msg));
                        return NULL;
                }
        }
        const char *job = json_string_value(json_object_get(args, "job_id"));
        if (!job) {
                snprintf(msg, sizeof(msg), "%s needs \"job_id\", a string", tool);
                mcp_send_result(s, id, arguments_error(msg));
                return NULL;
        }
        for (struct call *c = s->calls; c; c = c->next)
                if (c->job_id[0] && strcmp(c->job_id, job) == 0)
                        return c;
        snprintf(msg, sizeof(msg),
                 "no job \"%.64s\": job_list shows the running ones and the finished ones "
                 "still kept (%.0f s after they end)",
                 job, s->cfg->job_retention_s);
        utf8_scrub(msg);
        mcp_send_result(s, id, arguments_error(msg));
        return NULL;
}

static const char *job_status_name(const struct call *c)
{
        if (c->sb)
                return "running";
        const char *st = json_string_value(
            json_object_get(json_object_get(c->result, "structuredContent"), "status"));
        return st ? st : "error";
}

static json_t *job_summary(const struct call *c)
{
        return json_pack("{s:s, s:s, s:s, s:b, s:I, s:s, s:s?}", "job_id", c->job_id, "tool",
                         c->tool, "status", job_status_name(c), "running", c->sb != NULL,
                         "duration_ms", (json_int_t)((c->sb ? now_ms() : c->t_end) - c->t_start),
                         "code", c->code_line ? c->code_line : "", "session", c->session);
}

static void job_status(struct mcp_server *s, json_t *id, json_t *args)
{
        struct call *c = job_find(s, id, args, "job_status", NULL);
        if (!c)
                return;
        json_t *st = job_summary(c);
        const struct sandbox_result *r = c->sb ? sandbox_partial(c->sb) : NULL;
        if (r) {
                /* The newest output: stdout's kept text, its end. */
                size_t n = r->out.data.len, from = n > JOB_TAIL ? n - JOB_TAIL : 0;
                while (from < n && ((unsigned char)r->out.data.data[from] & 0xC0) == 0x80)
                        from++;
                json_object_set_new(st, "stdout_bytes", json_integer((json_int_t)r->out.total));
                json_object_set_new(st, "stderr_bytes", json_integer((json_int_t)r->err.total));
                json_object_set_new(st, "stdout_tail",
                                    json_stringn(n ? r->out.data.data + from : "", n - from));
        } else {
                json_t *sc = json_object_get(c->result, "structuredContent");
                json_object_set(st, "exit_code", json_object_get(sc, "exit_code"));
        }
        char text[256];
        snprintf(
            text, sizeof(text), "%s (%s): %s, %lld ms%s", c->job_id, c->tool, job_status_name(c),
            (long long)json_integer_value(json_object_get(st, "duration_ms")),
            c->sb ? "; job_result with wait_s waits for the end" : "; job_result gives the result");
        mcp_send_result(s, id, tools_text_result(st, text));
}

static void job_wait_tick(struct timer *t, void *userdata)
{
        struct job_wait *w = userdata;
        struct call *c = w->job;
        (void)t;
        mcp_send_result(c->srv, w->id, job_running_result(c));
        job_wait_free(w);
}

static void job_result(struct mcp_server *s, json_t *id, json_t *args)
{
        struct call *c = job_find(s, id, args, "job_result", "wait_s");
        if (!c)
                return;
        json_t *w = json_object_get(args, "wait_s");
        double wait = w ? json_number_value(w) : 0;
        if (w && (!json_is_number(w) || !isfinite(wait) || wait < 0 || wait > JOB_WAIT_MAX_S)) {
                char msg[128];
                snprintf(msg, sizeof(msg), "argument \"wait_s\" must be a number from 0 to %.0f",
                         JOB_WAIT_MAX_S);
                mcp_send_result(s, id, arguments_error(msg));
                return;
        }
        if (!c->sb) {
                mcp_send_result(s, id, json_deep_copy(c->result));
                return;
        }
        if (wait <= 0) {
                mcp_send_result(s, id, job_running_result(c));
                return;
        }
        struct job_wait *jw = calloc(1, sizeof(*jw));
        if (!jw || timer_add(s->loop, job_wait_tick, jw, &jw->timer) < 0) {
                free(jw);
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        jw->job = c;
        jw->id = json_incref(id);
        jw->next = c->waits;
        c->waits = jw;
        timer_arm(jw->timer, (long long)ceil(wait * 1000));
}

static void job_cancel(struct mcp_server *s, json_t *id, json_t *args)
{
        struct call *c = job_find(s, id, args, "job_cancel", NULL);
        if (!c)
                return;
        char text[160];
        if (!c->sb) {
                json_t *st = job_summary(c);
                json_object_set_new(st, "cancelled", json_false());
                snprintf(text, sizeof(text), "%s had already ended (%s): nothing to cancel",
                         c->job_id, job_status_name(c));
                mcp_send_result(s, id, tools_text_result(st, text));
                return;
        }
        log_info("host cancelled %s", c->job_id);
        snprintf(text, sizeof(text),
                 "%s cancelled: its sandbox is being removed; job_result gives "
                 "status \"cancelled\"",
                 c->job_id);
        json_t *st = json_pack("{s:s, s:b}", "job_id", c->job_id, "cancelled", 1);
        /* May finish the job at once (then c holds its result). */
        sandbox_cancel(c->sb);
        mcp_send_result(s, id, tools_text_result(st, text));
}

static void job_list(struct mcp_server *s, json_t *id, json_t *args)
{
        if (args && (!json_is_object(args) || json_object_size(args) > 0)) {
                mcp_send_result(s, id, arguments_error("job_list takes no arguments"));
                return;
        }
        json_t *jobs = json_array();
        size_t running = 0;
        for (struct call *c = s->calls; c; c = c->next)
                if (c->job_id[0]) {
                        json_array_append_new(jobs, job_summary(c));
                        running += c->sb != NULL;
                }
        char text[128];
        snprintf(text, sizeof(text), "%zu job(s), %zu running", json_array_size(jobs), running);
        mcp_send_result(s, id, tools_text_result(json_pack("{s:o}", "jobs", jobs), text));
}

/* A call of run_python or run_shell, linked; with `task`, a task (a job
 * from the start) whose id is the job id. NULL after answering. */
static struct call *call_new(struct mcp_server *s, json_t *id, json_t *task, const char *tool)
{
        struct call *c = calloc(1, sizeof(*c));
        if (!c) {
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return NULL;
        }
        c->srv = s;
        c->id = json_incref(id);
        c->next = s->calls;
        if (s->calls)
                s->calls->prev = c;
        s->calls = c;
        c->tool = strcmp(tool, "run_shell") == 0 ? "run_shell" : "run_python";
        c->t_start = now_ms();
        if (task) {
                c->task = true;
                snprintf(c->job_id, sizeof(c->job_id), "job-%u", ++s->job_seq);
                c->created_wall = c->updated_wall = wall_ms();
                json_t *ttl = json_object_get(task, "ttl");
                long long want = ttl ? (long long)json_integer_value(ttl)
                                     : (long long)(s->cfg->job_retention_s * 1000);
                c->ttl_ms = want < 1000 ? 1000 : want > TASK_TTL_MAX_MS ? TASK_TTL_MAX_MS : want;
                log_info("%s runs as task %s", c->tool, c->job_id);
        }
        return c;
}

/* The call could not start: its answer (stolen), or for a task its result. */
static void call_failed(struct call *c, json_t *result)
{
        if (c->task) {
                job_store(c, result);
                return;
        }
        mcp_send_result(c->srv, c->id, result);
        call_free(c);
}

static void tools_call(struct mcp_server *s, json_t *id, json_t *params)
{
        const char *name = json_string_value(json_object_get(params, "name"));
        json_t *args = json_object_get(params, "arguments");
        char msg[512] = "";
        struct sandbox_request req = {0};
        if (!name) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, "tools/call needs a \"name\" string");
                return;
        }
        json_t *task = json_object_get(params, "task");
        if (task &&
            (!json_is_object(task) || (json_object_get(task, "ttl") &&
                                       (!json_is_integer(json_object_get(task, "ttl")) ||
                                        json_integer_value(json_object_get(task, "ttl")) < 0)))) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "\"task\" must be an object, with \"ttl\" a number of milliseconds");
                return;
        }
        /* Only the tools that run code declare taskSupport (optional). */
        if (task && strcmp(name, "run_python") != 0 && strcmp(name, "run_shell") != 0) {
                snprintf(msg, sizeof(msg),
                         "tool \"%.100s\" does not run as a task (only run_python and run_shell "
                         "do)",
                         name);
                mcp_send_error(s, id, JRPC_METHOD_NOT_FOUND, utf8_scrub(msg));
                return;
        }
        if (strcmp(name, "sandbox_status") == 0) {
                if (args && (!json_is_object(args) || json_object_size(args) > 0)) {
                        mcp_send_result(s, id,
                                        arguments_error("sandbox_status takes no arguments"));
                        return;
                }
                mcp_send(s, jrpc_result(id, tools_status_result(sandbox_mgr_status(s->mgr))));
                return;
        }
        if (strcmp(name, "list_servers") == 0) {
                tool_list_servers(s, id, args);
                return;
        }
        if (strcmp(name, "search_tools") == 0) {
                tool_search_tools(s, id, args);
                return;
        }
        static const struct {
                const char *name;
                void (*fn)(struct mcp_server *, json_t *, json_t *);
        } others[] = {{"job_status", job_status},          {"job_result", job_result},
                      {"job_cancel", job_cancel},          {"job_list", job_list},
                      {"session_list", tool_session_list}, {"session_close", tool_session_close},
                      {"write_file", tool_write_file},     {"read_file", tool_read_file},
                      {"list_files", tool_list_files}};
        for (size_t i = 0; i < ARRAY_SIZE(others); i++)
                if (strcmp(name, others[i].name) == 0) {
                        if (args && !json_is_object(args)) {
                                mcp_send_result(s, id,
                                                arguments_error("arguments must be an object"));
                                return;
                        }
                        others[i].fn(s, id, args);
                        return;
                }
        int r = tools_parse_call(name, args, s->cfg, sandbox_mgr_images(s->mgr), &req, msg,
                                 sizeof(msg));
        if (r == 0 && req.servers && json_array_size(req.servers) > 0) {
                if (!s->bridge) {
                        snprintf(msg, sizeof(msg), "no MCP servers are configured for sandboxes");
                        r = -EINVAL;
                } else {
                        r = bridge_check_servers(s->bridge, req.servers, msg, sizeof(msg));
                        utf8_scrub(msg);
                }
        }
        if (r == -ENOENT) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, msg);
                return;
        }
        if (r < 0) {
                /* Bad arguments are a tool error the model can correct. */
                json_t *bad = arguments_error(msg);
                if (task) {
                        /* A task all the same: created, and failed at once. */
                        struct call *c = call_new(s, id, task, name);
                        if (c) {
                                mcp_send(s,
                                         jrpc_result(id, json_pack("{s:o}", "task", task_json(c))));
                                call_failed(c, bad);
                        } else {
                                json_decref(bad);
                        }
                } else {
                        mcp_send_result(s, id, bad);
                }
                return;
        }
        struct call *c =
            call_new(s, id, task, req.lang == LANG_PYTHON ? "run_python" : "run_shell");
        if (!c) {
                tools_request_free(&req);
                return;
        }
        c->progress = progress_new(s, params, c->task ? c->job_id : NULL);
        c->code_line =
            strndup(req.code, strcspn(req.code, "\n") < 80 ? strcspn(req.code, "\n") : 80);
        if (c->code_line)
                utf8_scrub(c->code_line);
        c->t_start = now_ms();
        c->session = req.session ? strdup(req.session) : NULL;
        req.on_output = call_output;
        req.hook_userdata = c; /* a session wraps the done callback, not these */
        req.on_progress = call_progress;
        if (task) {
                /* A task answers at once; the run is followed with tasks/get. */
                mcp_send(s, jrpc_result(id, json_pack("{s:o}", "task", task_json(c))));
        } else if (timer_add(s->loop, call_detach, c, &c->sync_timer) == 0) {
                long long ms = (long long)ceil(req.sync_wait_s * 1000);
                timer_arm(c->sync_timer, ms > 0 ? ms : 1);
        }
        json_t *failed = NULL;
        if (req.session) {
                r = session_run(s->sessions, &req, call_done, c, &c->sb, msg, sizeof(msg));
                if (r < 0)
                        failed = error_result(FAILED_SESSION_RUN, r, utf8_scrub(msg));
        } else {
                r = sandbox_run(s->mgr, &req, call_done, c, &c->sb);
                if (r == -EBUSY) {
                        snprintf(msg, sizeof(msg),
                                 "every sandbox slot is in use (%ld) and %ld calls are already "
                                 "waiting: try again shortly, or raise max_sandboxes / max_queue",
                                 s->cfg->max_sandboxes, s->cfg->max_queue);
                        failed = error_result(FAILED_SANDBOX_RUN, r, msg);
                } else if (r < 0) {
                        failed = error_result(FAILED_SANDBOX_RUN, r, NULL);
                }
        }
        tools_request_free(&req); /* the sandbox has its copy */
        if (r < 0)
                call_failed(c, failed);
}

/* ---- MCP tasks */

/* The task named by params.taskId, or NULL after answering -32602. */
static struct call *task_find(struct mcp_server *s, json_t *id, json_t *params)
{
        const char *tid = json_string_value(json_object_get(params, "taskId"));
        char msg[200];
        if (!tid) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, "\"taskId\" must be a string");
                return NULL;
        }
        for (struct call *c = s->calls; c; c = c->next)
                if (c->task && strcmp(c->job_id, tid) == 0)
                        return c;
        snprintf(msg, sizeof(msg),
                 "no task \"%.64s\": it never existed, or its result was dropped after its ttl",
                 tid);
        mcp_send_error(s, id, JRPC_INVALID_PARAMS, utf8_scrub(msg));
        return NULL;
}

static void tasks_request(struct mcp_server *s, const char *method, json_t *id, json_t *params)
{
        if (strcmp(method, "tasks/list") == 0) {
                if (json_object_get(params, "cursor")) {
                        mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                                       "unknown cursor: corral lists every task on one page");
                        return;
                }
                json_t *list = json_array();
                for (struct call *c = s->calls; c; c = c->next)
                        if (c->task)
                                json_array_append_new(list, task_json(c));
                mcp_send(s, jrpc_result(id, json_pack("{s:o}", "tasks", list)));
                return;
        }
        struct call *c = task_find(s, id, params);
        if (!c)
                return;
        if (strcmp(method, "tasks/get") == 0) {
                mcp_send(s, jrpc_result(id, task_json(c)));
        } else if (strcmp(method, "tasks/result") == 0) {
                if (c->t_end) {
                        mcp_send_result(s, id, task_payload(c));
                        return;
                }
                /* Blocks until the end (a notifications/cancelled ends the wait). */
                struct job_wait *w = calloc(1, sizeof(*w));
                if (!w) {
                        mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                        return;
                }
                w->job = c;
                w->id = json_incref(id);
                w->next = c->waits;
                c->waits = w;
        } else { /* tasks/cancel */
                if (c->t_end || c->task_cancelled) {
                        char msg[160];
                        snprintf(msg, sizeof(msg), "task %s has already ended (%s)", c->job_id,
                                 task_status(c));
                        mcp_send_error(s, id, JRPC_INVALID_PARAMS, msg);
                        return;
                }
                log_info("host cancelled task %s", c->job_id);
                c->task_cancelled = true;
                progress_free(c->progress); /* a cancelled task says nothing more */
                c->progress = NULL;
                c->updated_wall = wall_ms();
                json_t *t = task_json(c);
                if (c->sb)
                        sandbox_cancel(c->sb); /* may end the job at once: c stays (kept) */
                mcp_send(s, jrpc_result(id, t));
        }
}

static void cancel_request(struct mcp_server *s, json_t *params)
{
        json_t *rid = json_object_get(params, "requestId");
        if (!rid)
                return;
        for (struct call *c = s->calls; c; c = c->next) {
                /* A job_result waiting: it ends without an answer. */
                for (struct job_wait *w = c->waits; w; w = w->next)
                        if (jrpc_id_equal(w->id, rid)) {
                                job_wait_free(w);
                                return;
                        }
        }
        for (struct call *c = s->calls; c; c = c->next)
                if (jrpc_id_equal(c->id, rid) && !c->cancelled && !c->job_id[0]) {
                        const char *why = json_string_value(json_object_get(params, "reason"));
                        log_info("host cancelled a call%s%s", why ? ": " : "", why ? why : "");
                        c->cancelled = true;
                        /* A withdrawn call says nothing more. */
                        progress_free(c->progress);
                        c->progress = NULL;
                        sandbox_cancel(c->sb); /* call_done follows */
                        return;
                }
}

/* ---- lifecycle */

static json_t *initialize_result(json_t *params)
{
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        const char *version = protocol_versions[0];
        for (size_t i = 0; asked && i < ARRAY_SIZE(protocol_versions); i++)
                if (strcmp(asked, protocol_versions[i]) == 0)
                        version = protocol_versions[i];
        return json_pack(
            "{s:s, s:{s:{s:b}, s:{}, s:{s:{}, s:{}, s:{s:{s:{}}}}}, s:{s:s, s:s, s:s}, s:s}",
            "protocolVersion", version, "capabilities", "tools", "listChanged", 0, "logging",
            "tasks", "list", "cancel", "requests", "tools", "call", "serverInfo", "name", "corral",
            "title", "corral sandbox", "version", CORRAL_VERSION, "instructions",
            "Use run_python or run_shell to run code in a fresh, isolated sandbox "
            "(no network, read-only root, writable /tmp and /workspace). Each call gets a "
            "new sandbox, unless it names a `session`: then variables, imports and "
            "/workspace files persist across the calls with that name (write_file, "
            "read_file and list_files reach its files; session_close ends it). Files the "
            "code writes under /workspace/out/ come back with the result.");
}

/* Whether `id` names a request not answered yet: a second one with it
 * would make the answers, and a notifications/cancelled, ambiguous. */
static bool id_in_flight(struct mcp_server *s, const json_t *id)
{
        for (struct call *c = s->calls; c; c = c->next) {
                /* A job or task was answered; a cancelled call never will be. */
                if (!c->cancelled && !c->job_id[0] && jrpc_id_equal(c->id, id))
                        return true;
                for (struct job_wait *w = c->waits; w; w = w->next)
                        if (jrpc_id_equal(w->id, id))
                                return true;
        }
        return file_calls_in_flight(s, id) || searches_in_flight(s, id);
}

static void handle_request(struct mcp_server *s, struct jrpc_msg *m)
{
        const char *method = m->method;
        /* JSON-RPC gives no other way to answer than with the same id: the
         * host sees this error under the id of its running request, whose
         * own answer (or cancellation) still comes as if this one had not
         * been sent. */
        if (id_in_flight(s, m->id)) {
                mcp_send_error(s, m->id, JRPC_INVALID_REQUEST,
                               "this id belongs to a request still running: a request needs an id "
                               "that no unanswered request of this session uses");
                return;
        }
        /* MCP lifecycle: initialize first; ping is always answered. Requests
         * between the initialize answer and notifications/initialized are
         * served: SDK clients send them without waiting. */
        if (!s->initialized && strcmp(method, "initialize") != 0 && strcmp(method, "ping") != 0) {
                char msg[200];
                snprintf(msg, sizeof(msg),
                         "\"%.60s\" before initialize: send \"initialize\" first (only "
                         "\"ping\" is answered before it)",
                         method);
                mcp_send_error(s, m->id, JRPC_INVALID_REQUEST, utf8_scrub(msg));
                return;
        }
        if (m->params && !json_is_object(m->params)) {
                mcp_send_error(s, m->id, JRPC_INVALID_PARAMS, "params must be an object");
                return;
        }
        if (strcmp(method, "initialize") == 0) {
                if (!json_is_string(json_object_get(m->params, "protocolVersion"))) {
                        mcp_send_error(s, m->id, JRPC_INVALID_PARAMS,
                                       "initialize needs a \"protocolVersion\" string");
                        return;
                }
                mcp_send(s, jrpc_result(m->id, initialize_result(m->params)));
                s->initialized = true;
        } else if (strcmp(method, "ping") == 0) {
                mcp_send(s, jrpc_result(m->id, json_object()));
        } else if (strcmp(method, "tools/list") == 0) {
                mcp_send(
                    s, jrpc_result(m->id, json_pack("{s:o}", "tools",
                                                    tools_list(s->names, sandbox_mgr_images(s->mgr),
                                                               sandbox_mgr_mounts(s->mgr)))));
        } else if (strcmp(method, "tools/call") == 0) {
                tools_call(s, m->id, m->params);
        } else if (strcmp(method, "tasks/get") == 0 || strcmp(method, "tasks/result") == 0 ||
                   strcmp(method, "tasks/cancel") == 0 || strcmp(method, "tasks/list") == 0) {
                tasks_request(s, method, m->id, m->params);
        } else if (strcmp(method, "logging/setLevel") == 0) {
                const char *level = json_string_value(json_object_get(m->params, "level"));
                enum log_level l;
                if (!level || log_level_parse(level, &l) < 0) {
                        mcp_send_error(s, m->id, JRPC_INVALID_PARAMS,
                                       "level must be one of debug, info, notice, warning, error, "
                                       "critical, alert, emergency");
                        return;
                }
                /* Logs still go to stderr only; the level filters them. */
                log_max_level = l;
                mcp_send(s, jrpc_result(m->id, json_object()));
        } else {
                char msg[160];
                snprintf(msg, sizeof(msg), "method not found: %.100s", method);
                mcp_send_error(s, m->id, JRPC_METHOD_NOT_FOUND, msg);
        }
}

/* A message over the transport's limit: refused, under its id when it
 * could be read, so that the host's request does not wait forever. */
static void on_too_long(void *userdata, json_t *id, bool notification)
{
        struct mcp_server *s = userdata;
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "message larger than the limit of %zu bytes (max_frame, raised to fit a "
                 "write_file of file_max_bytes in base64); skipped",
                 s->line_max);
        if (notification) {
                log_warn("%s (a notification: no reply)", msg);
                return;
        }
        log_warn("%s%s", msg, id ? "" : " (its id could not be read: answered with id null)");
        mcp_send_error(s, id, JRPC_INVALID_REQUEST, msg);
}

static void on_message(void *userdata, const char *text, size_t len)
{
        struct mcp_server *s = userdata;
        struct jrpc_msg m;
        json_t *id = NULL;
        struct err e = {0};
        int code = jrpc_parse(text, len, &m, &id, &e);
        if (code < 0) {
                mcp_send_error(s, code == JRPC_PARSE_ERROR ? NULL : id, code, e.msg);
                json_decref(id);
                return;
        }
        json_decref(id);
        switch (m.kind) {
        case JRPC_REQUEST:
                handle_request(s, &m);
                break;
        case JRPC_NOTIFICATION:
                if (strcmp(m.method, "notifications/cancelled") == 0)
                        cancel_request(s, m.params);
                /* Other notifications (initialized, roots changes...) need
                 * nothing, and a notification never gets a reply. */
                break;
        default:
                /* We send no requests, so responses are stray: ignore. */
                break;
        }
        jrpc_msg_done(&m);
}

static void on_ended(void *userdata)
{
        struct mcp_server *s = userdata;
        if (s->on_eof)
                s->on_eof(s->userdata);
}

static const struct transport_events stdio_events = {
    .message = on_message,
    .too_long = on_too_long,
    .ended = on_ended,
};

int mcp_server_new(struct loop *l, const struct config *cfg, struct sandbox_mgr *mgr,
                   struct session_mgr *sessions, struct bridge *bridge, int in_fd, int out_fd,
                   void (*on_eof)(void *), void *userdata, struct mcp_server **ret)
{
        struct mcp_server *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        *s = (struct mcp_server){.loop = l,
                                 .cfg = cfg,
                                 .mgr = mgr,
                                 .sessions = sessions,
                                 .bridge = bridge,
                                 .on_eof = on_eof,
                                 .userdata = userdata};
        servers_names(bridge, s->names, sizeof(s->names));
        s->line_max = tools_line_max(cfg);
        int r = transport_stdio_new(l, in_fd, out_fd, s->line_max, &stdio_events, s, &s->transport);
        if (r < 0) {
                mcp_server_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

void mcp_server_stop(struct mcp_server *s)
{
        if (s->transport)
                transport_stop(s->transport);
}

void mcp_server_flush(struct mcp_server *s, int timeout_ms)
{
        transport_flush(s->transport, timeout_ms);
}

void mcp_server_free(struct mcp_server *s)
{
        if (!s)
                return;
        mcp_server_stop(s);
        while (s->calls)
                call_free(s->calls);
        file_calls_free(s);
        searches_free(s);
        transport_free(s->transport);
        free(s);
}
