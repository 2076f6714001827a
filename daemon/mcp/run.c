/* run_python and run_shell: a call from its arguments to its answer. It
 * runs in a sandbox of its own or in its session's; past sync_wait_s, or
 * from the start when it is a task, it goes on as a job (mcp/jobs.c). */
#include "mcp/internal.h"

#include "bridge/bridge.h"
#include "core/jsonrpc.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/util.h"
#include "mcp/server.h"
#include "mcp/tools.h"
#include "sandbox/sandbox.h"
#include "sandbox/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CODE_LINE_MAX 80 /* bytes of the code's first line, for job_list */

/* The run's output and the code's own reports, for its progress. */
static void call_output(void *userdata, bool is_stderr, const char *data, size_t n)
{
        struct call *c = userdata;
        kept_output(c->kept, is_stderr, data, n);
        progress_output(c->progress, data, n);
}

static void call_progress(void *userdata, double done, double total, const char *message)
{
        struct call *c = userdata;
        progress_report(c->progress, done, total, message);
}

void call_free(struct call *c)
{
        kept_finish(c->kept, NULL); /* a call that never ran, or ends with its client */
        progress_free(c->progress);
        job_waits_free(c);
        timer_remove(c->sync_timer);
        timer_remove(c->expire);
        json_decref(c->result);
        free(c->code_line);
        free(c->session);
        list_del(&c->node);
        request_end(&c->req);
        free(c);
}

struct result_view call_view(const struct call *c)
{
        return (struct result_view){
            .session = c->session,
            .max_chars = c->max_chars ? c->max_chars : (size_t)c->req.srv->cfg->result_max_chars,
            .kept = c->kept,
            .keep_s = c->req.srv->cfg->result_keep_s,
            /* resource_link came with 2025-06-18 */
            .links = strcmp(c->req.srv->protocol, "2025-06-18") >= 0};
}

/* sync_wait_s passed: answer "running", and let the sandbox go on. */
static void call_detach(struct timer *t, void *userdata)
{
        struct call *c = userdata;
        (void)t;
        if (!request_live(&c->req) || !c->sb)
                return;
        job_detach(c);
}

static void run_waits_wake(struct mcp_server *s, const char *session);

static void call_done(void *userdata, const struct sandbox_result *res)
{
        struct call *c = userdata;
        struct mcp_server *s = c->req.srv;
        c->sb = NULL;
        if (c->stopping && c->session)
                run_waits_wake(s, c->session);
        timer_remove(c->sync_timer);
        c->sync_timer = NULL;
        metrics_run(c->tool, sandbox_status_name(res->status),
                    (double)(now_ms() - c->t_start) / 1000);
        /* Its output is whole: its time in the store starts. */
        kept_finish(c->kept, res);
        if (s->closing) {
                /* Its client went away: the last call's end frees the server. */
                call_free(c);
                if (list_empty(&s->calls))
                        mcp_server_free(s);
                return;
        }
        if (c->job_id[0]) {
                job_finished(c, res);
                return;
        }
        /* A withdrawn call gets no response (MCP cancellation rules). */
        if (request_live(&c->req)) {
                struct result_view v = call_view(c);
                request_answer(&c->req, tools_result(res, &v));
        }
        call_free(c);
}

/* notifications/cancelled: the call ends with no answer, its code is
 * stopped, and call_done frees it. */
static void call_withdraw(struct request *r)
{
        struct call *c = request_of(r, struct call);
        c->stopping = true;
        /* A withdrawn call says nothing more. */
        progress_free(c->progress);
        c->progress = NULL;
        sandbox_cancel(c->sb); /* call_done follows */
}

/* The client goes: calls_close stops its calls, answered or not. */
static void call_drop(struct request *r)
{
        (void)r;
}

static const struct request_ops call_ops = {
    .what = "a call",
    .withdraw = call_withdraw,
    .drop = call_drop,
};

/* A call of run_python or run_shell, linked; with `task`, a task (a job
 * from the start) whose id is the job id. NULL after answering. */
static struct call *call_new(struct mcp_server *s, json_t *id, json_t *task, const char *tool)
{
        struct call *c = calloc(1, sizeof(*c));
        if (!c) {
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return NULL;
        }
        request_begin(s, &c->req, id, &call_ops);
        list_init(&c->waits);
        list_push(&s->calls, &c->node);
        c->tool = strcmp(tool, "run_shell") == 0 ? "run_shell" : "run_python";
        c->t_start = now_ms();
        if (task)
                task_start(c, task);
        return c;
}

/* The call could not start: its answer (stolen), or for a task its result. */
static void call_failed(struct call *c, json_t *result)
{
        kept_finish(c->kept, NULL);
        c->kept = NULL;
        if (c->task) {
                job_store(c, result);
                return;
        }
        request_answer(&c->req, result);
        call_free(c);
}

/* ---- the run's frame hook: its code calls MCP servers through the bridge,
 * which asks this client's person about the calls the policy says to ask
 * about (sandbox/sandbox.h, struct sandbox_frame_ops). */

static int frames_open(void *ud, json_t *servers, json_t *network, sandbox_send_fn send,
                       sandbox_line_fn send_lines, void *to, void **ret)
{
        struct mcp_server *s = ud;
        struct bridge_run *br;
        int r = bridge_run_new(s->bridge, servers, network, send, send_lines, to, &br);
        if (r < 0)
                return r;
        bridge_run_set_asker(br, &s->asker); /* the server outlives its runs */
        bridge_run_set_client(br, s->owner[0] ? s->owner : "stdio");
        *ret = br;
        return 0;
}

static void frames_set_sandbox(void *run, const char *id)
{
        bridge_run_set_sandbox(run, id);
}

static void frames_exec_params(void *run, json_t *params)
{
        json_object_set_new(params, "servers", bridge_run_exec_servers(run));
        json_t *network = bridge_run_exec_network(run);
        if (network)
                json_object_set_new(params, "network", network);
}

static void frames_frame(void *run, const struct jrpc_msg *m)
{
        bridge_run_handle(run, m);
}

static void frames_close(void *run)
{
        bridge_run_free(run);
}

static const struct sandbox_frame_ops bridge_frames = {
    .open = frames_open,
    .set_sandbox = frames_set_sandbox,
    .exec_params = frames_exec_params,
    .frame = frames_frame,
    .close = frames_close,
};

/* The arguments as a request, and the MCP servers it names checked
 * against the bridge: 0, or -EINVAL and *e. */
static int parse_request(struct mcp_server *s, const char *name, json_t *args,
                         struct sandbox_request *req, struct err *e)
{
        int r = tools_parse_call(name, args, s->cfg, sandbox_mgr_images(s->mgr), req, e);
        if (r == 0 && req->network && !s->bridge)
                r = err_set(e, ERR_INVALID, -EINVAL, "this corral has no way out for sandboxes");
        if (r < 0) {
                if (req->network)
                        tools_request_free(req);
                return r;
        }
        if (!req->servers || json_array_size(req->servers) == 0)
                return r;
        if (!s->bridge) {
                r = err_set(e, ERR_INVALID, -EINVAL, "no MCP servers are configured for sandboxes");
        } else {
                r = bridge_check_servers(s->bridge, req->servers, e);
                utf8_scrub(e->msg);
        }
        if (r < 0)
                tools_request_free(req);
        return r;
}

/* The call does not run: `bad` (stolen) is its result; a task is created
 * all the same, and fails at once. */
static void refuse_with(struct mcp_server *s, json_t *id, json_t *task, const char *name,
                        json_t *bad)
{
        if (!task) {
                mcp_send_result(s, id, bad);
                return;
        }
        struct call *c = call_new(s, id, task, name);
        if (!c) {
                json_decref(bad);
                return;
        }
        request_answer(&c->req, json_pack("{s:o}", "task", task_json(c)));
        call_failed(c, bad);
}

/* Bad arguments are a tool error the model can correct. */
static void refuse(struct mcp_server *s, json_t *id, json_t *task, const char *name,
                   const char *msg)
{
        refuse_with(s, id, task, name, arguments_error(msg));
}

/* What the call keeps of its request, and its hooks in it. */
static void call_follow(struct call *c, json_t *params, struct sandbox_request *req)
{
        c->progress = progress_new(c->req.srv, params, c->task ? c->job_id : NULL);
        size_t line = strcspn(req->code, "\n");
        c->code_line = strndup(req->code, line < CODE_LINE_MAX ? line : CODE_LINE_MAX);
        if (c->code_line)
                utf8_scrub(c->code_line);
        c->t_start = now_ms();
        c->session = req->session ? strdup(req->session) : NULL;
        c->max_chars = req->result_max_chars;
        /* The whole output goes to the store: the runtime relays it all. */
        c->kept = kept_start(c->req.srv, req->session);
        if (c->kept)
                req->relay_max = c->req.srv->cfg->result_store_max;
        req->on_output = call_output;
        req->hook_userdata = c; /* a session wraps the done callback, not these */
        req->on_progress = call_progress;
}

/* Starts the run, in its session or a sandbox of its own: 0, or a
 * negative errno and *failure, the result that says why not. */
/* The sandboxes one client of the service may hold at once: its running
 * calls and its sessions. (stdio's one client has no cap of its own.) */
static long client_cap(const struct mcp_server *s)
{
        if (!s->owner[0])
                return -1;
        if (s->cfg->client_max_sandboxes > 0)
                return s->cfg->client_max_sandboxes;
        long half = s->cfg->max_sandboxes / 2;
        return half > 0 ? half : 1;
}

static long client_held(const struct mcp_server *s, const char *session)
{
        long n = 0;
        struct call *c;
        list_for_each(c, &s->calls, node)
        {
                if (c->sb && !c->session)
                        n++;
        }
        n += session_count(s->sessions, s->owner);
        /* A call in a session this client has open takes no new one. */
        if (session && session_exists(s->sessions, s->owner, session))
                n--;
        return n;
}

/* A session given servers with session_servers: one audit line each,
 * since the session's earlier code can use them from now on too. */
static void audit_widening(struct mcp_server *s, const struct sandbox_request *req,
                           const struct sandbox *sb)
{
        const char *id = sb ? sandbox_container(sb) : NULL;
        char short_id[13] = "";
        if (id)
                snprintf(short_id, sizeof(short_id), "%s", id);
        size_t i;
        json_t *v;
        json_array_foreach(req->session_servers, i, v)
        {
                struct audit_entry en = {.sandbox = short_id[0] ? short_id : NULL,
                                         .server = json_string_value(v),
                                         .tool = "session_servers",
                                         .session = req->session,
                                         .allowed = true};
                bridge_audit(s->bridge, &en);
        }
}

static int call_start(struct call *c, const struct sandbox_request *in, json_t **failure)
{
        struct mcp_server *s = c->req.srv;
        char msg[512] = "";
        struct sandbox_request q = *in, *req = &q;
        q.owner = s->owner;
        long cap = client_cap(s);
        if (cap >= 0 && client_held(s, req->session) >= cap) {
                snprintf(msg, sizeof(msg),
                         "this client holds %ld sandboxes (calls and sessions), the most one "
                         "client of the service may (client_max_sandboxes): wait for a call to "
                         "end, or close a session",
                         cap);
                *failure = error_result(FAILED_SANDBOX_RUN, -EBUSY, msg);
                return -EBUSY;
        }
        if (req->session) {
                struct err e = {0};
                int r = session_run(s->sessions, req, call_done, c, &c->sb, &e);
                if (r < 0)
                        *failure = err_result(FAILED_SESSION_RUN, r, &e);
                else
                        audit_widening(s, req, c->sb);
                return r;
        }
        int r = sandbox_run(s->mgr, req, call_done, c, &c->sb);
        if (r == -EBUSY)
                snprintf(msg, sizeof(msg),
                         "every sandbox slot is in use (%ld) and %ld calls are already "
                         "waiting",
                         s->cfg->max_sandboxes, s->cfg->max_queue);
        if (r < 0)
                *failure = error_result(FAILED_SANDBOX_RUN, r, msg);
        return r;
}

/* ---- a call into a session whose cancelled call is still stopping */

/* How long such a call waits for the stop before it is refused as busy:
 * a cancel interrupts the code, which takes a round trip to the runtime. */
#define STOP_WAIT_MS 1000

/* The call waits, as received, until the cancelled call ends or
 * STOP_WAIT_MS passed; then it is made. */
struct run_wait {
        struct request req;
        json_t *args, *params;
        char *session;
        struct timer *timer;
        struct defer go;
};

static void run_call(struct mcp_server *s, json_t *id, json_t *args, json_t *params, bool may_wait);

static void run_wait_free(struct run_wait *w)
{
        defer_cancel(&w->go);
        timer_remove(w->timer);
        request_end(&w->req);
        json_decref(w->args);
        json_decref(w->params);
        free(w->session);
        free(w);
}

static void run_wait_gone(struct request *r)
{
        run_wait_free(request_of(r, struct run_wait));
}

static const struct request_ops run_wait_ops = {
    .what = "a call that waited for its session",
    .withdraw = run_wait_gone,
    .drop = run_wait_gone,
};

static void run_wait_go(void *userdata)
{
        struct run_wait *w = userdata;
        struct mcp_server *s = w->req.srv;
        json_t *id = json_incref(w->req.id), *args = json_incref(w->args),
               *params = json_incref(w->params);
        run_wait_free(w);
        run_call(s, id, args, params, false);
        json_decref(id);
        json_decref(args);
        json_decref(params);
}

static void run_wait_expired(struct timer *t, void *userdata)
{
        struct run_wait *w = userdata;
        (void)t;
        log_info("session %s: its cancelled call did not stop within %d ms", w->session,
                 STOP_WAIT_MS);
        loop_defer(w->req.srv->loop, &w->go, run_wait_go, w);
}

/* The cancelled call in `session` ended: what waited for it is made after
 * this round, once the session has taken the end. */
static void run_waits_wake(struct mcp_server *s, const char *session)
{
        struct request *r;
        list_for_each(r, &s->requests, node)
        {
                struct run_wait *w = request_of(r, struct run_wait);
                if (r->ops == &run_wait_ops && strcmp(w->session, session) == 0) {
                        timer_stop(w->timer);
                        loop_defer(s->loop, &w->go, run_wait_go, w);
                }
        }
}

/* Whether a call of this client in `session` was cancelled and still runs. */
static bool session_stopping(const struct mcp_server *s, const char *session)
{
        const struct call *c;
        list_for_each(c, &s->calls, node) if (c->sb && c->stopping && c->session &&
                                              strcmp(c->session, session) == 0) return true;
        return false;
}

/* Parks the call when its session's cancelled call still stops: true
 * when it waits. */
static bool run_wait(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        const char *session = json_string_value(json_object_get(args, "session"));
        if (!session || !session_stopping(s, session))
                return false;
        struct run_wait *w = calloc(1, sizeof(*w));
        if (!w || !(w->session = strdup(session)) ||
            timer_add(s->loop, run_wait_expired, w, &w->timer) < 0) {
                if (w)
                        free(w->session);
                free(w);
                return false; /* it is made now, and is refused as busy */
        }
        request_begin(s, &w->req, id, &run_wait_ops);
        w->args = json_incref(args);
        w->params = json_incref(params);
        timer_arm(w->timer, STOP_WAIT_MS);
        log_debug("session %s: a call waits for its cancelled call to stop", session);
        return true;
}

static void run_now(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        run_call(s, id, args, params, true);
}

static void run_call(struct mcp_server *s, json_t *id, json_t *args, json_t *params, bool may_wait)
{
        if (may_wait && run_wait(s, id, args, params))
                return;
        const char *name = json_string_value(json_object_get(params, "name"));
        json_t *task = json_object_get(params, "task");
        struct sandbox_request req = {0};
        struct err e = {0};
        int r = parse_request(s, name, args, &req, &e);
        if (r < 0) {
                refuse(s, id, task, name, e.msg);
                return;
        }
        if (s->bridge)
                req.frames = (struct sandbox_frame_hook){.ops = &bridge_frames, .ud = s};
        struct call *c =
            call_new(s, id, task, req.lang == LANG_PYTHON ? "run_python" : "run_shell");
        if (!c) {
                tools_request_free(&req);
                return;
        }
        call_follow(c, params, &req);
        if (task) {
                /* A task answers at once; the run is followed with tasks/get. */
                request_answer(&c->req, json_pack("{s:o}", "task", task_json(c)));
        } else if (timer_add(s->loop, call_detach, c, &c->sync_timer) == 0) {
                long long ms = (long long)ceil(req.sync_wait_s * 1000);
                timer_arm(c->sync_timer, ms > 0 ? ms : 1);
        }
        json_t *failed = NULL;
        r = call_start(c, &req, &failed);
        tools_request_free(&req); /* the sandbox has its copy */
        if (r < 0)
                call_failed(c, failed);
}

/* ---- ask_run: the person approves each run before it starts */

#define RUN_ASK_CODE_MAX 2000 /* bytes of the code the question shows */

/* A run waiting for the person's answer; the call itself is made (as if
 * just received) once it is accepted. */
struct run_ask {
        struct request req;
        json_t *args, *params;
        void *handle; /* the question, until answered */
        const char *tool;
        long long t0;
};

static void run_ask_free(struct run_ask *ra)
{
        if (ra->handle)
                ra->req.srv->asker.withdraw(ra->handle);
        request_end(&ra->req);
        json_decref(ra->args);
        json_decref(ra->params);
        free(ra);
}

static void run_ask_audit(struct mcp_server *s, const char *tool, bool allowed, const char *answer,
                          long long ms);

/* The host withdrew the run: its question is taken back, no answer follows. */
static void run_ask_withdraw(struct request *r)
{
        struct run_ask *ra = request_of(r, struct run_ask);
        run_ask_audit(r->srv, ra->tool, false, "withdrawn", now_ms() - ra->t0);
        run_ask_free(ra);
}

static void run_ask_drop(struct request *r)
{
        run_ask_free(request_of(r, struct run_ask));
}

static const struct request_ops run_ask_ops = {
    .what = "a run the person was asked about",
    .withdraw = run_ask_withdraw,
    .drop = run_ask_drop,
};

static void run_ask_audit(struct mcp_server *s, const char *tool, bool allowed, const char *answer,
                          long long ms)
{
        struct audit_entry en = {.server = "corral",
                                 .tool = tool,
                                 .allowed = allowed,
                                 .error = allowed ? NULL : "not approved",
                                 .ask = answer,
                                 .ask_ms = ms};
        bridge_audit(s->bridge, &en);
        log_info("%s: %s (ask_run, after %lld ms)", tool, answer, ms);
}

static void run_answered(void *ud, enum bridge_answer answer, const char *why)
{
        struct run_ask *ra = ud;
        struct mcp_server *s = ra->req.srv;
        ra->handle = NULL;
        long long ms = now_ms() - ra->t0;
        if (s->closing) {
                run_ask_free(ra);
                return;
        }
        run_ask_audit(s, ra->tool, answer == BRIDGE_ACCEPTED, bridge_answer_name(answer), ms);
        /* The request goes on under the same id, as the run or its refusal. */
        json_auto_t *id = json_incref(ra->req.id);
        request_end(&ra->req);
        if (answer == BRIDGE_ACCEPTED) {
                run_now(s, id, ra->args, ra->params);
                run_ask_free(ra);
                return;
        }
        char msg[500];
        snprintf(msg, sizeof(msg), "the person did not approve this run (ask_run): %s",
                 answer == BRIDGE_DECLINED    ? "declined"
                 : answer == BRIDGE_CANCELLED ? "the question was dismissed"
                 : answer == BRIDGE_TIMED_OUT ? "no answer within ask_timeout_s"
                                              : (why ? why : "no answer"));
        refuse_with(s, id, json_object_get(ra->params, "task"), ra->tool,
                    error_result(FAILED_RUN_ASK, -EACCES, utf8_scrub(msg)));
        run_ask_free(ra);
}

/* The question: the tool, its session or image, and the code, bounded.
 * The code is text a model wrote, maybe at the bidding of what it read, so
 * it must not shape the question around it: it goes in a fenced block it
 * cannot close, with every character that breaks a line, reorders text or
 * draws as nothing shown as a \u escape (core/buf.h, buf_append_fenced).
 * Its own newlines stay, for code is read by its lines: each one is a line
 * inside the block, since nothing in the code can end the block, and it is
 * the only line break the code can make (CR, VT, FF, NEL, U+2028 and
 * U+2029 are escaped). What corral says is before the block, and after it
 * only how much was left out. */
static char *run_question(const struct sandbox_request *req)
{
        size_t n = strlen(req->code), shown = n > RUN_ASK_CODE_MAX ? RUN_ASK_CODE_MAX : n;
        shown = utf8_cut(req->code, shown);
        /* An escape is at most six bytes for one (\u001b), and a fence at
         * most one longer than a run of backticks, which stay: eight bytes
         * for each one shown is room enough. */
        struct buf block, b;
        buf_init(&block, 8 * RUN_ASK_CODE_MAX + 16);
        buf_init(&b, 9 * RUN_ASK_CODE_MAX + 1024);
        size_t escaped = 0;
        if (buf_append_fenced(&block, req->code, shown, SHOWN_CODE, &escaped) < 0) {
                buf_free(&block);
                return NULL;
        }
        char head[400], count[80] = "";
        if (escaped)
                snprintf(count, sizeof(count), " (%zu character%s shown as \\u escapes)", escaped,
                         escaped == 1 ? "" : "s");
        snprintf(head, sizeof(head), "corral: run this %s in a sandbox%s%s%s%s?%s\n\n",
                 req->lang == LANG_PYTHON ? "Python code" : "shell command",
                 req->session ? " (session " : "", req->session ? req->session : "",
                 req->session ? ")" : "", req->image ? ", image as asked" : "", count);
        buf_append_some(&b, head, strlen(head));
        /* What the code may reach matters as much as the code: the MCP
         * servers it gets, and those a session keeps for its earlier code
         * too. Names are [A-Za-z0-9_.-] (registry_name_valid): a code span
         * shows them as they are. */
        static const char *const kinds[] = {"MCP servers it may call: ",
                                            "MCP servers added to the session for good (its "
                                            "earlier code may call them too): "};
        json_t *lists[] = {req->servers, req->session_servers};
        for (size_t k = 0; k < ARRAY_SIZE(lists); k++) {
                size_t i;
                json_t *v;
                if (json_array_size(lists[k]) == 0)
                        continue;
                buf_append_some(&b, kinds[k], strlen(kinds[k]));
                json_array_foreach(lists[k], i, v)
                {
                        const char *name = json_string_value(v);
                        buf_append_some(&b, i ? ", `" : "`", i ? 3 : 1);
                        buf_append_some(&b, name ? name : "?", strlen(name ? name : "?"));
                        buf_append_some(&b, "`", 1);
                }
                buf_append_some(&b, ".\n\n", 3);
        }
        buf_append_some(&b, block.data, block.len);
        buf_free(&block);
        if (shown < n) {
                char more[80];
                snprintf(more, sizeof(more), "... (%zu more bytes not shown)", n - shown);
                buf_append_some(&b, more, strlen(more));
        }
        char *text = strdup(buf_str(&b));
        buf_free(&b);
        return text ? utf8_scrub(text) : NULL;
}

void tool_run(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        if (!s->cfg->ask_run) {
                run_now(s, id, args, params);
                return;
        }
        const char *name = json_string_value(json_object_get(params, "name"));
        json_t *task = json_object_get(params, "task");
        const char *tool = name && strcmp(name, "run_shell") == 0 ? "run_shell" : "run_python";
        /* Arguments the run would refuse are refused before anyone is asked. */
        struct sandbox_request req = {0};
        struct err e = {0};
        if (parse_request(s, name, args, &req, &e) < 0) {
                refuse(s, id, task, name, e.msg);
                return;
        }
        req.owner = s->owner;
        int r = session_check_servers(s->sessions, &req, &e);
        if (r < 0) {
                tools_request_free(&req);
                refuse_with(s, id, task, tool, err_result(FAILED_SESSION_RUN, r, &e));
                return;
        }
        _cleanup_free_ char *question = run_question(&req);
        tools_request_free(&req);
        if (!mcp_server_can_elicit(s)) {
                if (s->cfg->ask_allow_unasked) {
                        run_ask_audit(s, tool, true, "not asked: the client has no elicitation", 0);
                        run_now(s, id, args, params);
                        return;
                }
                run_ask_audit(s, tool, false, "not asked: the client has no elicitation", 0);
                refuse_with(s, id, task, tool,
                            error_result(FAILED_RUN_ASK, -EACCES,
                                         "ask_run is set, and this MCP client cannot ask its "
                                         "person (it offered no elicitation): use a host with "
                                         "elicitation, set ask_run false, or set "
                                         "ask_allow_unasked to run without asking"));
                return;
        }
        struct run_ask *ra = calloc(1, sizeof(*ra));
        if (!ra || !question) {
                free(ra);
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        *ra = (struct run_ask){
            .args = json_incref(args), .params = json_incref(params), .tool = tool, .t0 = now_ms()};
        request_begin(s, &ra->req, id, &run_ask_ops);
        if (s->asker.ask(s->asker.ud, question, run_answered, ra, &ra->handle) < 0) {
                ra->handle = NULL;
                run_ask_free(ra);
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "cannot ask the person");
        }
}

bool calls_running(const struct mcp_server *s)
{
        /* Ended jobs and tasks stay linked for their results: not running. */
        const struct call *c;
        list_for_each(c, &s->calls, node) if (c->sb) return true;
        return false;
}

bool calls_close(struct mcp_server *s)
{
        struct call *c, *n;
        bool running = false;
        list_for_each_safe(c, n, &s->calls, node)
        {
                if (c->sb) {
                        running = true;
                        progress_free(c->progress);
                        c->progress = NULL;
                        job_waits_free(c);
                        sandbox_cancel(c->sb); /* call_done follows */
                } else {
                        call_free(c);
                }
        }
        return running;
}

void calls_free(struct mcp_server *s)
{
        while (!list_empty(&s->calls))
                call_free(list_first(&s->calls, struct call, node));
}
