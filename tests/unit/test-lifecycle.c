/* The sandbox state machine against a fake engine (fake-engine.h), with no
 * container engine: each path of a sandbox's life, the exact sequence of
 * states it goes through (read back from the debug log, where
 * sandbox_set_state names every transition), and the loop contract: a
 * completion never runs inside the call that started the work.
 * tests/unit/test-mutation.sh shows this test failing when a transition
 * is broken. */
#include "fake-engine.h"
#include "sandbox/internal.h"
#include "sandbox/session.h"

#include "core/jsonrpc.h"
#include "core/log.h"
#include "tap.h"
#include "wait.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct loop *L;
static struct fake_engine *F;
static struct engine *E;
static char dir[] = "/tmp/corral-lifecycle.XXXXXX";
static char log_path[128];

#define WAIT_UNTIL(cond, ms) LOOP_WAIT(L, cond, ms)

struct done {
        int calls;
        enum sandbox_status st;
        char type[64], msg[600], out[256];
        bool kept;
        long long memory;
};

static void on_done(void *userdata, const struct sandbox_result *res)
{
        struct done *d = userdata;
        d->calls++;
        d->st = res->status;
        snprintf(d->type, sizeof(d->type), "%s", res->error_type ? res->error_type : "");
        snprintf(d->msg, sizeof(d->msg), "%s", res->error_message ? res->error_message : "");
        snprintf(d->out, sizeof(d->out), "%.*s", (int)res->out.data.len,
                 res->out.data.data ? res->out.data.data : "");
        d->kept = res->kept;
        d->memory = res->memory_bytes;
}

static struct sandbox_request req(const char *code, double timeout_s)
{
        return (struct sandbox_request){.lang = LANG_PYTHON, .code = code, .timeout_s = timeout_s};
}

static struct config cfg_new(void)
{
        struct config c;
        config_defaults(&c);
        c.pool_max = 0;
        c.pool_min = 0;
        return c;
}

static struct sandbox_mgr *mgr_new(const struct config *c)
{
        struct sandbox_mgr *m = NULL;
        if (sandbox_mgr_new(L, c, E, &m) < 0)
                abort();
        return m;
}

/* Waits until every sandbox of m is gone, then frees it. */
static void mgr_done(struct sandbox_mgr *m)
{
        ok(WAIT_UNTIL(list_empty(&m->all) && list_empty(&m->done), 10000),
           "every sandbox of the manager is released and freed");
        sandbox_mgr_free(m);
}

/* The transitions the log shows for sandbox #seq: "from>to from>to ...". */
static const char *transitions(unsigned long seq)
{
        static char out[1024];
        char line[2048], tag[32];
        out[0] = '\0';
        snprintf(tag, sizeof(tag), "sandbox #%lu ", seq);
        FILE *f = fopen(log_path, "re");
        if (!f)
                return out;
        while (fgets(line, sizeof(line), f)) {
                char *p = strstr(line, tag), *colon, *arrow;
                if (!p || !(colon = strstr(p, ": ")) || !(arrow = strstr(colon, " -> ")))
                        continue;
                char from[32] = "", to[32] = "";
                if (sscanf(colon + 2, "%31s", from) != 1 || sscanf(arrow + 4, "%31s", to) != 1)
                        continue;
                size_t n = strlen(out);
                snprintf(out + n, sizeof(out) - n, "%s%s>%s", n ? " " : "", from, to);
        }
        fclose(f);
        return out;
}

static int log_count(const char *needle)
{
        char line[2048];
        int n = 0;
        FILE *f = fopen(log_path, "re");
        while (f && fgets(line, sizeof(line), f))
                n += strstr(line, needle) != NULL;
        if (f)
                fclose(f);
        return n;
}

/* ---- the tests */

static void test_cold_run(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct done d = {0};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("print:hi", 5);
        is_int(sandbox_run(m, &r, on_done, &d, &s), 0, "cold run: sandbox_run starts it");
        is_int(d.calls, 0, "cold run: its callback has not run when sandbox_run returns");
        unsigned long seq = s->seq;
        ok(WAIT_UNTIL(d.calls == 1, 5000), "cold run: the result comes from the loop");
        is_int(d.st, ST_OK, "cold run: status ok");
        is_str(d.out, "hi\n", "cold run: its output");
        mgr_done(m);
        is_str(transitions(seq),
               "new>creating creating>attaching attaching>starting starting>started "
               "started>busy busy>removing removing>done",
               "cold run: the log shows each transition by name, in order");
        is_int(fake_engine_alive(F), 0, "cold run: its container is removed");
        is_int(d.calls, 1, "cold run: one callback");
        config_free(&c);
}

static long sandboxes(const struct sandbox_mgr *m)
{
        long n = 0;
        struct sandbox *s;
        list_for_each(s, &m->all, all_node) n++;
        return n;
}

/* On a cold engine the pool's first sandbox starts alone; once it is
 * ready the rest start at once, pool_max_starting at a time, without
 * waiting for the pool's tick. */
static void test_first_alone(void)
{
        struct config c = cfg_new();
        c.pool_min = c.pool_max = c.pool_max_starting = 3;
        struct sandbox_mgr *m = mgr_new(&c);
        sandbox_mgr_start_pool(m);
        is_int(sandboxes(m), 1, "cold engine: the pool starts one sandbox first");
        ok(WAIT_UNTIL(m->n_ready >= 1, 5000), "cold engine: it becomes ready");
        ok(m->refill_armed || sandboxes(m) > 1, "then the rest are on their way, not after a tick");
        ok(WAIT_UNTIL(m->n_ready == 3, 5000), "the pool fills to pool_min");
        sandbox_mgr_shutdown(m, NULL, NULL);
        mgr_done(m);
        config_free(&c);
}

static void test_warm_run(void)
{
        struct config c = cfg_new();
        c.pool_min = 1;
        c.pool_max = 1;
        struct sandbox_mgr *m = mgr_new(&c);
        sandbox_mgr_start_pool(m);
        ok(WAIT_UNTIL(m->n_ready == 1, 5000), "warm run: the pool holds a ready sandbox");
        struct sandbox *ready = list_first(&m->ready, struct sandbox, place);
        unsigned long seq = ready->seq;
        struct done d = {0};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("print:warm", 5);
        is_int(sandbox_run(m, &r, on_done, &d, &s), 0, "warm run: sandbox_run takes it");
        ok(s == ready, "warm run: the call got the ready sandbox");
        is_int(d.calls, 0, "warm run: its callback has not run when sandbox_run returns");
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_OK, "warm run: status ok");
        is_int((int)m->hits, 1, "warm run: counted as a pool hit");
        ok(WAIT_UNTIL(m->n_ready == 1, 5000), "warm run: the pool refills after the answer");
        sandbox_mgr_shutdown(m, NULL, NULL);
        mgr_done(m);
        is_str(transitions(seq),
               "new>creating creating>attaching attaching>starting starting>started "
               "started>ready ready>busy busy>removing removing>done",
               "warm run: the pooled sandbox's transitions");
        config_free(&c);
}

/* The engine's /info is read once, in the background after the first
 * create; an engine that does not answer it still gets its sandboxes. */
static void test_info(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct done d = {0};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("print:x", 5);
        int before = fake_engine_count(F, "info");
        fake_engine_fail(F, "info", 500, 1);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_OK, "/info answers 500: the run is ok");
        memset(&d, 0, sizeof(d));
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_OK, "a second run: ok");
        is_int(fake_engine_count(F, "info") - before, 1, "/info was asked once, not per sandbox");
        mgr_done(m);
        config_free(&c);
}

static void test_failures(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct done d = {0};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("print:x", 5);

        fake_engine_fail(F, "create", 500, 1);
        sandbox_run(m, &r, on_done, &d, &s);
        unsigned long seq = s->seq;
        ok(WAIT_UNTIL(d.calls == 1, 5000), "create fails: the call hears of it");
        is_int(d.st, ST_ENGINE_ERROR, "create fails: engine_error");
        is_str(d.type, "EngineError", "create fails: EngineError");
        like(d.msg, "HTTP 500", "create fails: the message has the engine's status");
        ok(WAIT_UNTIL(list_empty(&m->all), 5000), "create fails: the sandbox is released");
        is_str(transitions(seq), "new>creating creating>removing removing>done",
               "create fails: creating -> removing -> done");

        memset(&d, 0, sizeof(d));
        fake_engine_fail(F, "create", 404, 1);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000), "image missing: the call hears of it");
        is_str(d.type, "ImageMissing", "image missing: ImageMissing");
        like(d.msg, "build it with `corral image build`, or set `image`",
             "image missing, the default image: build it, or set `image`");

        memset(&d, 0, sizeof(d));
        r = req("die", 5);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000), "died: the call hears of it");
        is_str(d.type, "SandboxDied", "died: SandboxDied");
        like(d.msg, "exit code 3", "died: with the exit code the engine reported");

        /* Frames the runtime's supervisor did not write: untagged, tagged
         * for another number, an earlier line again. The forged "ok" is
         * not taken; the sandbox is ended and the call says why. */
        static const char *const forgeries[] = {"forge", "forge-seq", "replay"};
        for (size_t i = 0; i < ARRAY_SIZE(forgeries); i++) {
                memset(&d, 0, sizeof(d));
                r = req(forgeries[i], 5);
                sandbox_run(m, &r, on_done, &d, &s);
                ok(WAIT_UNTIL(d.calls == 1, 5000), "%s: the call hears of it", forgeries[i]);
                is_int(d.st, ST_ERROR, "%s: status error, not the forged ok", forgeries[i]);
                is_str(d.type, "ChannelForged", "%s: ChannelForged", forgeries[i]);
                like(d.msg, "could not authenticate", "%s: the message says why", forgeries[i]);
                is_str(d.out, "real\n", "%s: the output before it stands", forgeries[i]);
                ok(WAIT_UNTIL(fake_engine_alive(F) == 0, 5000), "%s: its container is removed",
                   forgeries[i]);
        }
        ok(log_count("on its frame channel: corral ended it") == 3, "each forgery is logged");

        memset(&d, 0, sizeof(d));
        r = req("oom", 5);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000), "oom: the call hears of it");
        is_int(d.st, ST_OOM, "oom: status oom");

        memset(&d, 0, sizeof(d));
        r = req("fail", 5);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000), "error: the call hears of it");
        ok(d.st == ST_ERROR && strcmp(d.type, "ValueError") == 0, "error: the code's ValueError");

        memset(&d, 0, sizeof(d));
        fake_engine_fail(F, "delete", 409, 2);
        r = req("print:again", 5);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_OK, "removal refused twice: result ok");
        ok(WAIT_UNTIL(fake_engine_alive(F) == 0, 5000),
           "removal refused twice: asked again until the container is gone");
        mgr_done(m);
        config_free(&c);
}

static void test_fail_fast(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct done d[POOL_FAIL_FAST + 1] = {{0}};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("print:x", 5);
        fake_engine_fail(F, "create", 500, POOL_FAIL_FAST);
        for (int i = 0; i < POOL_FAIL_FAST; i++) {
                sandbox_run(m, &r, on_done, &d[i], &s);
                WAIT_UNTIL(d[i].calls == 1, 5000);
        }
        int creates = fake_engine_count(F, "create");
        is_int(sandbox_run(m, &r, on_done, &d[POOL_FAIL_FAST], &s), 0,
               "fail fast: a call after %d failed starts is taken", POOL_FAIL_FAST);
        is_int(d[POOL_FAIL_FAST].calls, 0,
               "fail fast: refused at once, yet not from inside sandbox_run");
        unsigned long seq = s->seq;
        ok(WAIT_UNTIL(d[POOL_FAIL_FAST].calls == 1, 5000), "fail fast: the refusal comes later");
        like(d[POOL_FAIL_FAST].msg, "HTTP 500", "fail fast: it says why the starts fail");
        is_int(fake_engine_count(F, "create"), creates, "fail fast: no container was created");
        mgr_done(m);
        is_str(transitions(seq), "new>done", "fail fast: new -> done");
        config_free(&c);
}

static void test_limits(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct done d = {0};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("hang", 0.2);
        sandbox_run(m, &r, on_done, &d, &s);
        unsigned long seq = s->seq;
        ok(WAIT_UNTIL(d.calls == 1, 5000), "time limit: the call ends");
        is_int(d.st, ST_TIMEOUT, "time limit: status timeout");
        like(d.msg, "time limit of 0.2 s and was killed", "time limit: it says so");
        ok(WAIT_UNTIL(list_empty(&m->all), 5000), "time limit: the sandbox is released");
        is_str(transitions(seq),
               "new>creating creating>attaching attaching>starting starting>started "
               "started>busy busy>removing removing>done",
               "time limit: killed while busy");

        memset(&d, 0, sizeof(d));
        r = req("hang", 30);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(s->state == S_BUSY, 5000), "cancel: the code runs");
        sandbox_cancel(s);
        is_int(d.calls, 0, "cancel: its callback does not run inside sandbox_cancel");
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_CANCELLED, "cancel: status cancelled");

        memset(&d, 0, sizeof(d));
        int creates = fake_engine_count(F, "create");
        sandbox_run(m, &r, on_done, &d, &s);
        sandbox_cancel(s); /* its create request is out */
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_CANCELLED,
           "cancel while creating: status cancelled");
        ok(WAIT_UNTIL(fake_engine_alive(F) == 0, 5000) &&
               fake_engine_count(F, "create") == creates + 1,
           "cancel while creating: the container created meanwhile is removed");
        mgr_done(m);

        c.start_timeout_s = 0.3;
        m = mgr_new(&c);
        fake_engine_set_silent(F, true);
        memset(&d, 0, sizeof(d));
        r = req("print:x", 5);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000), "start bound: the call ends");
        ok(d.st == ST_ENGINE_ERROR && strstr(d.msg, "did not start within 0.3 s"),
           "start bound: engine_error, did not start");
        fake_engine_set_silent(F, false);
        mgr_done(m);
        config_free(&c);
}

static void test_queue(void)
{
        struct config c = cfg_new();
        c.max_sandboxes = 1;
        c.max_queue = 1;
        struct sandbox_mgr *m = mgr_new(&c);
        struct done a = {0}, b = {0}, x = {0};
        struct sandbox *sa = NULL, *sb = NULL, *sx = NULL;
        struct sandbox_request ra = req("hang", 30), rb = req("print:queued", 5);
        sandbox_run(m, &ra, on_done, &a, &sa);
        is_int(sandbox_run(m, &rb, on_done, &b, &sb), 0, "queue: a second call waits");
        unsigned long seq = sb->seq;
        is_int(sandbox_run(m, &rb, on_done, &x, &sx), -EBUSY, "queue: a third gets -EBUSY");
        ok(WAIT_UNTIL(sa->state == S_BUSY, 5000), "queue: the first runs");
        is_int(b.calls, 0, "queue: the second has not run");
        sandbox_cancel(sa);
        ok(WAIT_UNTIL(b.calls == 1, 5000) && b.st == ST_OK, "queue: the second runs after it");
        is_str(b.out, "queued\n", "queue: its output");
        is_int(x.calls, 0, "queue: the refused call got no callback");
        mgr_done(m);
        is_str(transitions(seq),
               "new>queued queued>creating creating>attaching attaching>starting "
               "starting>started started>busy busy>removing removing>done",
               "queue: new -> queued -> creating ...");
        config_free(&c);
}

static void on_ask(void *userdata, json_t *result, const struct err *why)
{
        int *n = userdata;
        (*n) += result && !why ? 1 : 100;
}

static void on_file(void *userdata, const struct files_result *r)
{
        int *n = userdata;
        (*n)++;
        (void)r;
}

static int gone_calls;
static void on_gone(void *owner, const char *why)
{
        (void)owner;
        (void)why;
        gone_calls++;
}

static void test_kept(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct done d = {0};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("print:one", 5);
        r.keep = true;
        sandbox_run(m, &r, on_done, &d, &s);
        unsigned long seq = s->seq;
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_OK && d.kept, "kept: first run, kept");
        ok(sandbox_idle(s), "kept: idle after it");
        sandbox_set_owner(s, on_gone, NULL);

        memset(&d, 0, sizeof(d));
        r.code = "print:two";
        is_int(sandbox_exec(s, &r, on_done, &d), 0, "kept: a second run starts");
        is_int(d.calls, 0, "kept: its callback has not run when sandbox_exec returns");
        is_int(sandbox_exec(s, &r, on_done, &d), -EBUSY, "kept: not two at once");
        ok(WAIT_UNTIL(d.calls == 1, 5000) && strcmp(d.out, "two\n") == 0, "kept: second run");

        int asked = 0, filed = 0;
        struct sandbox_ask *a = NULL;
        struct sandbox_fop *fo = NULL;
        is_int(sandbox_ask(s, "sandbox/list", json_object(), on_ask, &asked, &a), 0,
               "kept: a request to its runtime goes");
        is_int(sandbox_read_file(s, "/workspace/x", 100, on_file, &filed, &fo), 0,
               "kept: a file operation starts");
        ok(asked == 0 && filed == 0, "kept: neither calls back inside the call that started it");
        ok(WAIT_UNTIL(asked == 1 && filed == 1, 5000), "kept: both call back from the loop");

        memset(&d, 0, sizeof(d));
        r = req("hang", 0.2);
        r.keep = true;
        sandbox_exec(s, &r, on_done, &d);
        ok(WAIT_UNTIL(d.calls == 1, 5000), "kept: a run over its time limit ends");
        ok(d.st == ST_TIMEOUT && d.kept, "kept: interrupted, the session kept");
        ok(sandbox_idle(s), "kept: idle again");

        memset(&d, 0, sizeof(d));
        r.code = "stubborn";
        sandbox_exec(s, &r, on_done, &d);
        ok(WAIT_UNTIL(d.calls == 1, 8000), "kept: a run that ignores the interrupt ends");
        ok(d.st == ST_TIMEOUT && !d.kept && strstr(d.msg, "did not stop when interrupted"),
           "kept: after the grace the sandbox goes");
        is_int(gone_calls, 0, "kept: a run's end is not reported as the session gone");
        mgr_done(m);
        is_str(transitions(seq),
               "new>creating creating>attaching attaching>starting starting>started "
               "started>busy busy>idle idle>busy busy>idle idle>busy busy>idle idle>busy "
               "busy>removing removing>done",
               "kept: each run without files straight to busy and back to idle, then "
               "removed");
        config_free(&c);
}

static void test_session_gone(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct done d = {0};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("print:x", 5);
        r.keep = true;
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000), "idle session: ready");
        gone_calls = 0;
        sandbox_set_owner(s, on_gone, NULL);
        sandbox_mgr_shutdown(m, NULL, NULL);
        is_int(gone_calls, 1, "idle session: its owner hears that it ends");
        mgr_done(m);
        config_free(&c);
}

static int drained_calls;
static void on_drained(void *userdata)
{
        (void)userdata;
        drained_calls++;
}

static void test_shutdown(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct done d = {0};
        struct sandbox *s = NULL;
        struct sandbox_request r = req("hang", 30);
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(s->state == S_BUSY, 5000), "shutdown: a run is busy");
        sandbox_mgr_shutdown(m, on_drained, NULL);
        is_int(sandbox_run(m, &r, on_done, &d, &s), -ESHUTDOWN, "shutdown: no new runs");
        ok(WAIT_UNTIL(drained_calls == 1, 5000), "shutdown: drained once every container is gone");
        ok(d.calls == 1 && d.st == ST_CANCELLED, "shutdown: the run ended cancelled");
        is_int(fake_engine_alive(F), 0, "shutdown: nothing is left on the engine");
        mgr_done(m);
        config_free(&c);
}

/* ---- the frame hook: a run's frames for the layer above, seen from the
 * sandbox layer with a stand-in for the bridge */

struct hook_seen {
        int opened, closed, frames, answered;
        char servers[64], sandbox[32], method[32];
        sandbox_send_fn send;
        void *to;
        json_t *id;     /* of the request being answered */
        struct defer d; /* the answer goes from the loop */
        bool fail_open;
};

static int hook_open(void *ud, json_t *servers, json_t *network, sandbox_send_fn send,
                     sandbox_line_fn send_lines, void *to, void **ret)
{
        (void)network;
        (void)send_lines;
        struct hook_seen *h = ud;
        if (h->fail_open)
                return -ENOMEM;
        h->opened++;
        char *names = json_dumps(servers, JSON_COMPACT);
        snprintf(h->servers, sizeof(h->servers), "%s", names ? names : "");
        free(names);
        h->send = send;
        h->to = to;
        *ret = h;
        return 0;
}

static void hook_set_sandbox(void *run, const char *id)
{
        struct hook_seen *h = run;
        snprintf(h->sandbox, sizeof(h->sandbox), "%s", id);
}

static void hook_exec_params(void *run, json_t *params)
{
        (void)run;
        json_object_set_new(params, "servers",
                            json_pack("[{s:s, s:s}]", "name", "a", "alias", "a"));
}

static void hook_answer(void *userdata)
{
        struct hook_seen *h = userdata;
        h->answered++;
        h->send(h->to, json_pack("{s:s, s:o, s:{s:s}}", "jsonrpc", "2.0", "id", h->id, "result",
                                 "answered", h->method));
        h->id = NULL;
}

static void hook_frame(void *run, const struct jrpc_msg *m)
{
        struct hook_seen *h = run;
        h->frames++;
        snprintf(h->method, sizeof(h->method), "%s", m->method ? m->method : "");
        json_decref(h->id);
        h->id = json_incref(m->id);
        loop_defer(L, &h->d, hook_answer, h);
}

static void hook_close(void *run)
{
        struct hook_seen *h = run;
        defer_cancel(&h->d);
        json_decref(h->id);
        h->id = NULL;
        h->closed++;
}

static const struct sandbox_frame_ops hook_ops = {
    .open = hook_open,
    .set_sandbox = hook_set_sandbox,
    .exec_params = hook_exec_params,
    .frame = hook_frame,
    .close = hook_close,
};

static void test_frame_hook(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct hook_seen h = {0};
        json_t *servers = json_pack("[s]", "a");
        struct done d = {0};
        struct sandbox *s = NULL;

        struct sandbox_request r = req("servers", 5);
        r.servers = servers;
        r.frames = (struct sandbox_frame_hook){.ops = &hook_ops, .ud = &h};
        is_int(sandbox_run(m, &r, on_done, &d, &s), 0, "hook: a run with servers starts");
        ok(h.opened == 1 && strcmp(h.servers, "[\"a\"]") == 0,
           "hook: opened when a sandbox takes the run, with the request's servers");
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_OK, "hook: the run ends ok");
        is_str(d.out, "[\"a\"]\n", "hook: sandbox/exec carries the hook's servers");
        is_int((int)strlen(h.sandbox), 12, "hook: told the container's short id");
        is_int(h.closed, 1, "hook: closed once when the run ends");

        memset(&d, 0, sizeof(d));
        h = (struct hook_seen){0};
        r.code = "call";
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000) && d.st == ST_OK, "hook: a run whose code calls ends ok");
        ok(h.frames == 1 && strcmp(h.method, "tools/call") == 0,
           "hook: the runtime's request goes to the hook");
        is_str(d.out,
               "{\"id\":\"" FAKE_CALL_ID "\",\"jsonrpc\":\"2.0\","
               "\"result\":{\"answered\":\"tools/call\"}}",
               "hook: what it sends reaches the runtime");
        is_int(h.closed, 1, "hook: closed once");

        memset(&d, 0, sizeof(d));
        h = (struct hook_seen){0};
        r.servers = NULL;
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000), "hook: a run with no servers ends");
        is_int(h.opened, 0, "hook: not opened for a run with no servers");
        like(d.out, "\"code\":-32001", "hook: the runtime's request is refused with PolicyDenied");
        like(d.out, "this run may call no MCP servers", "hook: ... saying why");

        memset(&d, 0, sizeof(d));
        r.servers = servers;
        r.frames.ops = NULL;
        sandbox_run(m, &r, on_done, &d, &s);
        ok(WAIT_UNTIL(d.calls == 1, 5000) && strstr(d.out, "\"code\":-32001"),
           "hook: with servers but no hook, refused the same");

        h = (struct hook_seen){.fail_open = true};
        r.frames = (struct sandbox_frame_hook){.ops = &hook_ops, .ud = &h};
        memset(&d, 0, sizeof(d));
        is_int(sandbox_run(m, &r, on_done, &d, &s), -ENOMEM,
               "hook: a hook that cannot open refuses the run");
        is_int(d.calls, 0, "hook: ... with no callback");
        json_decref(servers);
        mgr_done(m);
        config_free(&c);
}

/* ---- the engine's health, for /health */

struct health_seen {
        int calls;
        char text[256];
};

static void on_health(void *userdata, json_t *health)
{
        struct health_seen *h = userdata;
        h->calls++;
        char *t = json_dumps(health, JSON_COMPACT | JSON_SORT_KEYS);
        snprintf(h->text, sizeof(h->text), "%s", t ? t : "");
        free(t);
}

static void test_health(void)
{
        struct config c = cfg_new();
        struct sandbox_mgr *m = mgr_new(&c);
        struct health_seen a = {0}, b = {0}, x = {0};
        struct sandbox_health_wait *wa, *wb, *wx;
        char want[256];
        snprintf(want, sizeof(want),
                 "{\"engine\":{\"error\":null,\"reachable\":true},\"image\":{\"name\":"
                 "\"%s\",\"present\":true}}",
                 c.image);
        int asked = fake_engine_count(F, "image");
        is_int(sandbox_mgr_health(m, on_health, &a, &wa), 0, "health: asked");
        is_int(sandbox_mgr_health(m, on_health, &b, &wb), 0, "health: asked again meanwhile");
        is_int(a.calls + b.calls, 0, "health: no answer inside the call");
        ok(WAIT_UNTIL(a.calls == 1 && b.calls == 1, 5000), "health: both answered from the loop");
        is_int(fake_engine_count(F, "image") - asked, 1, "health: one request to the engine");
        is_str(a.text, want, "health: reachable, and the image is there");

        asked = fake_engine_count(F, "image");
        memset(&a, 0, sizeof(a));
        sandbox_mgr_health(m, on_health, &a, &wa);
        is_int(a.calls, 0, "health: a fresh answer too comes from the loop");
        ok(WAIT_UNTIL(a.calls == 1, 5000) && strcmp(a.text, want) == 0,
           "health: an answer less than a second old serves");
        is_int(fake_engine_count(F, "image") - asked, 0, "health: ... without asking the engine");

        m->health_ms -= 1000; /* a second later */
        fake_engine_fail(F, "image", 404, 1);
        memset(&a, 0, sizeof(a));
        sandbox_mgr_health(m, on_health, &a, &wa);
        ok(WAIT_UNTIL(a.calls == 1, 5000) && strstr(a.text, "\"present\":false") &&
               strstr(a.text, "\"reachable\":true"),
           "health: an older one is asked again; 404: reachable, the image missing");
        m->health_ms -= 1000;
        fake_engine_fail(F, "image", 500, 1);
        memset(&a, 0, sizeof(a));
        sandbox_mgr_health(m, on_health, &a, &wa);
        ok(WAIT_UNTIL(a.calls == 1, 5000) &&
               strstr(a.text, "{\"engine\":{\"error\":\"the engine answered 500\","
                              "\"reachable\":false}"),
           "health: 500: not reachable, and why");

        m->health_ms -= 1000;
        memset(&a, 0, sizeof(a));
        sandbox_mgr_health(m, on_health, &x, &wx);
        sandbox_mgr_health(m, on_health, &a, &wa);
        sandbox_health_cancel(wx);
        ok(m->health_req != NULL, "health: a cancelled wait leaves the request to the others");
        ok(WAIT_UNTIL(a.calls == 1, 5000) && x.calls == 0,
           "health: the cancelled wait is not called");
        m->health_ms -= 1000;
        sandbox_mgr_health(m, on_health, &x, &wx);
        sandbox_health_cancel(wx);
        ok(m->health_req == NULL, "health: the last wait cancelled, the request is too");
        loop_iterate(L, 50);
        is_int(x.calls, 0, "health: ... and nobody is called");
        sandbox_health_cancel(NULL);
        sandbox_mgr_health(m, on_health, &x, &wx); /* freed with the manager, uncalled */
        mgr_done(m);
        is_int(x.calls, 0, "health: a wait left at the manager's end is not called");

        struct sandbox_mgr *none = NULL;
        if (sandbox_mgr_new(L, &c, NULL, &none) < 0)
                abort();
        memset(&a, 0, sizeof(a));
        sandbox_mgr_health(none, on_health, &a, &wa);
        ok(WAIT_UNTIL(a.calls == 1, 5000), "health: with no engine, answered");
        is_str(a.text, "{\"engine\":{\"error\":\"no engine configured\",\"reachable\":false}}",
               "health: ... that none is configured");
        sandbox_mgr_free(none);
        config_free(&c);
}

int main(void)
{
        if (!mkdtemp(dir))
                return 1;
        snprintf(log_path, sizeof(log_path), "%s/log", dir);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int saved_stderr = dup(STDERR_FILENO);
        if (fd < 0 || saved_stderr < 0 || dup2(fd, STDERR_FILENO) < 0)
                return 1;
        close(fd);
        log_max_level = LOG_DEBUG;
        if (loop_new(&L) < 0)
                return 1;
        F = fake_engine_new(L, dir);
        struct err e = {0};
        if (engine_new(L, fake_engine_url(F), 4 << 20, &E, &e) < 0)
                return 1;

        test_cold_run();
        test_first_alone();
        test_warm_run();
        test_info();
        test_failures();
        test_fail_fast();
        test_limits();
        test_queue();
        test_kept();
        test_session_gone();
        test_shutdown();
        test_frame_hook();
        test_health();
        is_int(log_count("unexpected transition"), 0, "no transition the state table forbids");

        dup2(saved_stderr, STDERR_FILENO); /* a sanitizer's report, if any, shows */
        engine_free(E);
        fake_engine_free(F);
        loop_free(L);
        diag_file_on_failure(log_path); /* the log explains a failure */
        unlink(log_path);
        rmdir(dir);
        return done_testing();
}
