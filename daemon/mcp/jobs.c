/* Jobs and MCP tasks: a run_python or run_shell call still running after
 * its sync_wait_s is answered "running" and goes on as a job (job_status,
 * job_result, job_cancel, job_list); a tools/call with `task` is a job from
 * its start (tasks/get, tasks/result, tasks/cancel, tasks/list). A job's
 * id is its task's. A finished job's result is kept job_retention_s (a
 * task's at least its ttl), and JOB_KEEP_MAX of them at most. */
#include "mcp/internal.h"

#include "core/jsonrpc.h"
#include "core/log.h"
#include "core/util.h"
#include "mcp/tools.h"
#include "sandbox/sandbox.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define JOB_KEEP_MAX    64   /* finished jobs kept at most; the oldest go first */
#define JOB_TAIL        2000 /* bytes of newest output in job_status */
#define TASK_POLL_MS    1000
#define TASK_TTL_MAX_MS (24LL * 3600 * 1000)

/* A job_result (or tasks/result) waiting for its job to end. */
struct job_wait {
        struct request req;
        struct list node; /* in job->waits */
        struct call *job;
        struct timer *timer; /* NULL: tasks/result, which waits for the end */
};

static void job_wait_free(struct job_wait *w)
{
        list_del(&w->node);
        timer_remove(w->timer);
        request_end(&w->req);
        free(w);
}

static void job_wait_gone(struct request *r)
{
        job_wait_free(request_of(r, struct job_wait));
}

static const struct request_ops job_wait_ops = {
    .what = "a wait for a job's result",
    .withdraw = job_wait_gone,
    .drop = job_wait_gone,
};

/* A job_result or tasks/result that waits for `c`, in the table. */
static struct job_wait *job_wait_new(struct mcp_server *s, json_t *id, struct call *c)
{
        struct job_wait *w = calloc(1, sizeof(*w));
        if (!w)
                return NULL;
        w->job = c;
        request_begin(s, &w->req, id, &job_wait_ops);
        list_push(&c->waits, &w->node);
        return w;
}

static json_t *job_running_result(struct call *c)
{
        struct result_view v = call_view(c);
        return tools_running_result(sandbox_partial(c->sb), c->job_id, now_ms() - c->t_start, &v);
}

static void job_name(struct call *c)
{
        snprintf(c->job_id, sizeof(c->job_id), "job-%u", ++c->req.srv->job_seq);
}

void job_detach(struct call *c)
{
        job_name(c);
        /* The request is answered: progress for it would now be wrong. */
        progress_free(c->progress);
        c->progress = NULL;
        log_info("%s goes on as %s", c->tool, c->job_id);
        request_answer(&c->req, job_running_result(c));
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
                struct call *oldest = NULL, *c;
                list_for_each(c, &s->calls, node) if (c->job_id[0] && !c->sb)
                {
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

void task_start(struct call *c, json_t *task)
{
        c->task = true;
        job_name(c);
        c->created_wall = c->updated_wall = wall_ms();
        json_t *ttl = json_object_get(task, "ttl");
        long long want = ttl ? (long long)json_integer_value(ttl)
                             : (long long)(c->req.srv->cfg->job_retention_s * 1000);
        c->ttl_ms = want < 1000 ? 1000 : want > TASK_TTL_MAX_MS ? TASK_TTL_MAX_MS : want;
        log_info("%s runs as task %s", c->tool, c->job_id);
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

json_t *task_json(const struct call *c)
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

void job_store(struct call *c, json_t *result)
{
        struct mcp_server *s = c->req.srv;
        c->t_end = now_ms();
        c->result = result;
        if (c->result)
                json_object_set_new(json_object_get(c->result, "structuredContent"), "job_id",
                                    json_string(c->job_id));
        /* Progress belongs to a running call (a task's keeps its token). */
        progress_free(c->progress);
        c->progress = NULL;
        c->updated_wall = wall_ms();
        while (!list_empty(&c->waits)) {
                struct job_wait *w = list_first(&c->waits, struct job_wait, node);
                request_answer(&w->req, w->timer ? json_deep_copy(c->result) : task_payload(c));
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

void job_finished(struct call *c, const struct sandbox_result *res)
{
        log_info("job %s: %s after %lld ms", c->job_id, sandbox_status_name(res->status),
                 now_ms() - c->t_start);
        struct result_view v = call_view(c);
        job_store(c, tools_result(res, &v));
        /* The job's result outlives what the store keeps of its run. */
        c->kept = NULL;
}

/* The job named by args.job_id, or an answer saying why not (then NULL). */
static struct call *job_find(struct mcp_server *s, json_t *id, json_t *args, const char *tool,
                             const char *extra)
{
        char msg[512];
        if (!tool_args_object(s, id, args))
                return NULL;
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
        struct call *c;
        list_for_each(c, &s->calls, node) if (c->job_id[0] && strcmp(c->job_id, job) == 0) return c;
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

void tool_job_status(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        struct call *c = job_find(s, id, args, "job_status", NULL);
        if (!c)
                return;
        json_t *st = job_summary(c);
        const struct sandbox_result *r = c->sb ? sandbox_partial(c->sb) : NULL;
        if (r) {
                /* The newest output: stdout's last bytes, past its head too. */
                struct buf tail;
                buf_init(&tail, JOB_TAIL + 1);
                sandbox_tail(&r->out, JOB_TAIL, 0, &tail);
                json_object_set_new(st, "stdout_bytes", json_integer((json_int_t)r->out.total));
                json_object_set_new(st, "stderr_bytes", json_integer((json_int_t)r->err.total));
                json_object_set_new(st, "stdout_tail",
                                    json_stringn(tail.data ? tail.data : "", tail.len));
                buf_free(&tail);
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
        request_answer(&w->req, job_running_result(c));
        job_wait_free(w);
}

void tool_job_result(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
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
        struct job_wait *jw = job_wait_new(s, id, c);
        if (!jw || timer_add(s->loop, job_wait_tick, jw, &jw->timer) < 0) {
                if (jw)
                        job_wait_free(jw);
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        timer_arm(jw->timer, (long long)ceil(wait * 1000));
}

void tool_job_cancel(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
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
        c->stopping = true;
        sandbox_cancel(c->sb);
        mcp_send_result(s, id, tools_text_result(st, text));
}

void tool_job_list(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        if (!tool_args_object(s, id, args))
                return;
        if (args && json_object_size(args) > 0) {
                mcp_send_result(s, id, arguments_error("job_list takes no arguments"));
                return;
        }
        json_t *jobs = json_array();
        size_t running = 0;
        struct call *c;
        list_for_each(c, &s->calls, node) if (c->job_id[0])
        {
                json_array_append_new(jobs, job_summary(c));
                running += c->sb != NULL;
        }
        char text[128];
        snprintf(text, sizeof(text), "%zu job(s), %zu running", json_array_size(jobs), running);
        mcp_send_result(s, id, tools_text_result(json_pack("{s:o}", "jobs", jobs), text));
}

/* The task named by params.taskId, or NULL after answering -32602. */
static struct call *task_find(struct mcp_server *s, json_t *id, json_t *params)
{
        const char *tid = json_string_value(json_object_get(params, "taskId"));
        char msg[200];
        if (!tid) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, "\"taskId\" must be a string");
                return NULL;
        }
        struct call *c;
        list_for_each(c, &s->calls, node) if (c->task && strcmp(c->job_id, tid) == 0) return c;
        snprintf(msg, sizeof(msg),
                 "no task \"%.64s\": it never existed, or its result was dropped after its ttl",
                 tid);
        mcp_send_error(s, id, JRPC_INVALID_PARAMS, utf8_scrub(msg));
        return NULL;
}

void tasks_list(struct mcp_server *s, json_t *id, json_t *params)
{
        if (json_object_get(params, "cursor")) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "unknown cursor: corral lists every task on one page");
                return;
        }
        json_t *list = json_array();
        struct call *c;
        list_for_each(c, &s->calls, node) if (c->task) json_array_append_new(list, task_json(c));
        mcp_send(s, jrpc_result(id, json_pack("{s:o}", "tasks", list)));
}

void tasks_get(struct mcp_server *s, json_t *id, json_t *params)
{
        struct call *c = task_find(s, id, params);
        if (c)
                mcp_send(s, jrpc_result(id, task_json(c)));
}

void tasks_result(struct mcp_server *s, json_t *id, json_t *params)
{
        struct call *c = task_find(s, id, params);
        if (!c)
                return;
        if (c->t_end) {
                mcp_send_result(s, id, task_payload(c));
                return;
        }
        /* Blocks until the end (a notifications/cancelled ends the wait). */
        if (!job_wait_new(s, id, c))
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
}

void tasks_cancel(struct mcp_server *s, json_t *id, json_t *params)
{
        struct call *c = task_find(s, id, params);
        if (!c)
                return;
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
        if (c->sb) {
                c->stopping = true;
                sandbox_cancel(c->sb); /* may end the job at once: c stays (kept) */
        }
        mcp_send(s, jrpc_result(id, t));
}

void job_waits_free(struct call *c)
{
        while (!list_empty(&c->waits))
                job_wait_free(list_first(&c->waits, struct job_wait, node));
}
