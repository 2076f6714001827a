/* MCP dispatch with no container engine: the MCP server of corral, its
 * sandbox and session managers as `corral serve` wires them, on pipes
 * for stdio and the fake engine of fake-engine.h. What reaches each tool
 * (and what does not), the errors a client gets, jobs and sessions. The
 * e2e suites drive the real binary with real clients and engines. */
#include "fake-engine.h"
#include "bridge/bridge.h"
#include "mcp/server.h"
#include "sandbox/session.h"
#include "upstream/client.h"
#include "upstream/registry.h"

#include "core/jsonrpc.h"
#include "tap.h"
#include "wait.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static struct loop *L;
static struct fake_engine *F;
static struct engine *E;
static struct config cfg;
static struct sandbox_mgr *M;
static struct session_mgr *S;
static struct upstream_set *U;
static struct policy *P;
static struct bridge *B;
extern const char corral_default_policy[];
/* A client of corral's: pipes to and from its server, and the messages
 * the server sent it, oldest first. */
struct client {
        struct mcp_server *srv;
        int to, from;        /* the client's ends */
        int srv_in, srv_out; /* the server's (its transport does not close them) */
        struct watch *reader;
        struct line_reader lines;
        json_t *inbox;
};
static struct client C0; /* the stdio client most tests use */
static char dir[] = "/tmp/corral-mcp.XXXXXX";
static int next_id;

static int on_line(void *userdata, const char *line, size_t len)
{
        struct client *c = userdata;
        json_t *msg = line ? json_loadb(line, len, 0, NULL) : NULL;
        if (msg)
                json_array_append_new(c->inbox, msg);
        else
                diag("unparsable line from the server: %.*s", (int)len, line ? line : "");
        return 0;
}

static void on_output(struct watch *w, uint32_t events, void *userdata)
{
        struct client *c = userdata;
        char chunk[65536];
        (void)w;
        (void)events;
        ssize_t k = read(c->from, chunk, sizeof(chunk));
        if (k > 0)
                line_reader_feed(&c->lines, chunk, (size_t)k, on_line, c);
}

static void on_eof(void *userdata)
{
        (void)userdata;
}

/* A server for a new client (owner NULL: stdio's), on pipes: 0 or -1. */
static int client_open(struct client *c, const char *owner)
{
        int in[2], out[2];
        *c = (struct client){.inbox = json_array()};
        line_reader_init(&c->lines, 64 << 20);
        if (pipe2(in, O_CLOEXEC) < 0)
                return -1;
        if (pipe2(out, O_CLOEXEC) < 0) {
                close(in[0]);
                close(in[1]);
                return -1;
        }
        c->srv_in = in[0];
        c->to = in[1];
        c->from = out[0];
        c->srv_out = out[1];
        if (mcp_server_new(L, &cfg, M, S, B, owner, on_eof, NULL, &c->srv) < 0 ||
            mcp_server_serve_stdio(c->srv, c->srv_in, c->srv_out) < 0)
                return -1;
        return watch_add(L, c->from, EPOLLIN, on_output, c, &c->reader);
}

/* The client goes: mcp_server_close, as a service does when its client
 * disconnects (a server with calls still running frees itself later). */
static void client_close(struct client *c, bool free_server)
{
        if (free_server)
                mcp_server_free(c->srv);
        else
                mcp_server_close(c->srv);
        c->srv = NULL;
        watch_remove(c->reader);
        close(c->to);
        close(c->from);
        close(c->srv_in);
        close(c->srv_out);
        line_reader_free(&c->lines);
        json_decref(c->inbox);
}

static void client_send(struct client *c, json_t *msg)
{
        char *text = json_dumps(msg, JSON_COMPACT);
        json_decref(msg);
        size_t n = strlen(text);
        if (write(c->to, text, n) != (ssize_t)n || write(c->to, "\n", 1) != 1)
                abort();
        free(text);
}

static void send_line(const char *text)
{
        client_send(&C0, json_loads(text, 0, NULL));
}

/* The answer to request `id` that came within `ms` (new reference), taken
 * from the inbox, or NULL. */
static json_t *client_await(struct client *c, int id, int ms)
{
        long long end = now_ms() + ms;
        while (now_ms() < end) {
                size_t i;
                json_t *x;
                json_array_foreach(c->inbox, i, x)
                {
                        json_t *xid = json_object_get(x, "id");
                        if (json_is_integer(xid) && json_integer_value(xid) == id &&
                            !json_object_get(x, "method")) {
                                json_incref(x);
                                json_array_remove(c->inbox, i);
                                return x;
                        }
                }
                loop_iterate(L, 10);
        }
        return NULL;
}

/* Sends a request and waits (up to `ms`) for its answer: the response
 * object (new reference), or NULL. */
static json_t *client_call(struct client *c, const char *method, json_t *params, int ms)
{
        int id = ++next_id;
        client_send(c, jrpc_request(id, method, params));
        return client_await(c, id, ms);
}

static json_t *call(const char *method, json_t *params, int ms)
{
        return client_call(&C0, method, params, ms);
}

/* tools/call: the result object (new reference), or NULL with a JSON-RPC
 * error's code in *ret_code. */
static json_t *tool(const char *name, json_t *args, int *ret_code)
{
        json_t *resp =
            call("tools/call", json_pack("{s:s, s:o}", "name", name, "arguments", args), 10000);
        json_t *result = json_incref(json_object_get(resp, "result"));
        if (ret_code)
                *ret_code = (int)json_integer_value(
                    json_object_get(json_object_get(resp, "error"), "code"));
        json_decref(resp);
        return result;
}

static const char *sc(json_t *result, const char *key)
{
        return json_string_value(
            json_object_get(json_object_get(result, "structuredContent"), key));
}

static const char *err_type(json_t *result)
{
        json_t *st = json_object_get(result, "structuredContent");
        return json_string_value(json_object_get(json_object_get(st, "error"), "type"));
}

static const char *err_msg(json_t *result)
{
        json_t *st = json_object_get(result, "structuredContent");
        return json_string_value(json_object_get(json_object_get(st, "error"), "message"));
}

static bool has_tool(json_t *tools, const char *name)
{
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t)
        {
                if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
                        return json_is_object(json_object_get(t, "inputSchema"));
        }
        return false;
}

static void test_lifecycle(void)
{
        json_t *r = call("tools/list", json_object(), 2000);
        ok(json_object_get(r, "error") != NULL, "tools/list before initialize is refused");
        json_decref(r);
        r = call("initialize",
                 json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", "2025-06-18",
                           "capabilities", "clientInfo", "name", "test", "version", "1"),
                 2000);
        json_t *res = json_object_get(r, "result");
        is_str(json_string_value(json_object_get(json_object_get(res, "serverInfo"), "name")),
               "corral", "initialize: serverInfo.name");
        is_str(json_string_value(json_object_get(res, "protocolVersion")), "2025-06-18",
               "initialize: the client's version is taken");
        json_decref(r);
        send_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
        r = call("ping", NULL, 2000);
        ok(json_is_object(json_object_get(r, "result")), "ping: an empty result");
        json_decref(r);
        r = call("no/such/method", json_object(), 2000);
        is_int((int)json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
               JRPC_METHOD_NOT_FOUND, "an unknown method: -32601");
        json_decref(r);
}

static void test_list(void)
{
        json_t *r = call("tools/list", json_object(), 2000);
        json_t *tools = json_object_get(json_object_get(r, "result"), "tools");
        static const char *const names[] = {
            "run_python",    "run_shell",    "sandbox_status", "job_status",
            "job_result",    "job_cancel",   "job_list",       "session_list",
            "session_close", "write_file",   "read_file",      "list_files",
            "list_servers",  "search_tools", "session_save",   "session_fork"};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                ok(has_tool(tools, names[i]), "tools/list: %s, with its input schema", names[i]);
        json_decref(r);
}

static void test_run(void)
{
        int code = 0;
        json_t *r = tool("run_python", json_pack("{s:s}", "code", "print:hello"), &code);
        is_str(sc(r, "status"), "ok", "run_python: status ok");
        is_str(sc(r, "stdout"), "hello\n", "run_python: its stdout");
        ok(json_is_false(json_object_get(r, "isError")), "run_python: not an error");
        json_decref(r);

        r = tool("run_shell", json_pack("{s:s}", "command", "fail"), &code);
        is_str(sc(r, "status"), "error", "run_shell: a failing run is status error");
        is_str(err_type(r), "ValueError", "run_shell: with the error of the run");
        ok(json_is_true(json_object_get(r, "isError")), "run_shell: isError");
        json_decref(r);

        r = tool("run_python", json_pack("{s:s}", "cod", "x"), &code);
        is_str(err_type(r), "InvalidArguments", "run_python with a wrong key: InvalidArguments");
        json_decref(r);

        r = tool("no_such_tool", json_object(), &code);
        ok(!r && code == JRPC_INVALID_PARAMS, "an unknown tool: -32602");
        json_decref(r);

        r = tool("sandbox_status", json_object(), &code);
        ok(json_object_get(json_object_get(r, "structuredContent"), "pool") != NULL,
           "sandbox_status: the pool's figures");
        json_decref(r);

        r = tool("list_servers", json_object(), &code);
        ok(r != NULL, "list_servers answers");
        json_decref(r);
}

static void test_jobs(void)
{
        int code = 0;
        json_t *r =
            tool("run_python", json_pack("{s:s, s:f}", "code", "hang", "sync_wait_s", 0.2), &code);
        is_str(sc(r, "status"), "running", "a run past sync_wait_s becomes a job");
        const char *job = sc(r, "job_id");
        char id[64];
        snprintf(id, sizeof(id), "%s", job ? job : "");
        ok(id[0], "the job has an id");
        json_decref(r);
        r = tool("job_status", json_pack("{s:s}", "job_id", id), &code);
        is_str(sc(r, "status"), "running", "job_status: running");
        json_decref(r);
        r = tool("job_cancel", json_pack("{s:s}", "job_id", id), &code);
        ok(r != NULL, "job_cancel answers");
        json_decref(r);
        r = tool("job_result", json_pack("{s:s, s:i}", "job_id", id, "wait_s", 5), &code);
        is_str(sc(r, "status"), "cancelled", "job_result: cancelled");
        json_decref(r);
        r = tool("job_status", json_pack("{s:s}", "job_id", "nope"), &code);
        is_str(err_type(r), "InvalidArguments", "job_status of an unknown job: InvalidArguments");
        json_t *st = json_object_get(r, "structuredContent");
        like(json_string_value(json_object_get(json_object_get(st, "error"), "message")),
             "no job \"nope\"", "which says there is no such job");
        json_decref(r);
}

static void test_sessions(void)
{
        int code = 0;
        json_t *r =
            tool("run_python", json_pack("{s:s, s:s}", "code", "print:a", "session", "s1"), &code);
        is_str(sc(r, "status"), "ok", "a session's first run");
        json_decref(r);
        r = tool("session_list", json_object(), &code);
        char *text = json_dumps(r, JSON_COMPACT);
        like(text, "\"s1\"", "session_list shows it");
        free(text);
        json_decref(r);
        r = tool("read_file", json_pack("{s:s, s:s}", "session", "nope", "path", "x"), &code);
        is_str(err_type(r), "NoSession", "read_file in no session: NoSession");
        /* Facts from the session layer, advice from the errors table. */
        is_str(err_msg(r),
               "no session \"nope\": run_python or run_shell with \"session\" opens one "
               "(session_list shows those open)",
               "with what opens one");
        json_decref(r);
        r = tool("session_close", json_pack("{s:s}", "session", "zz"), &code);
        is_str(err_msg(r), "no session \"zz\" (session_list shows those open)",
               "session_close of none: where to look");
        json_decref(r);
        r = tool("run_python",
                 json_pack("{s:s, s:s, s:f}", "code", "hang", "session", "s2", "sync_wait_s", 0.1),
                 &code);
        json_t *job = r;
        is_str(sc(job, "status"), "running", "a hanging first call in s2 becomes a job");
        r = tool("read_file", json_pack("{s:s, s:s}", "session", "s2", "path", "x"), &code);
        is_str(err_type(r), "SessionBusy", "read_file while s2 starts: SessionBusy");
        is_str(err_msg(r),
               "session \"s2\" is still starting: try again when its first call has ended",
               "which says when to try again");
        json_decref(r);
        r = tool("run_python", json_pack("{s:s, s:s}", "code", "print:c", "session", "s2"), &code);
        is_str(err_type(r), "SessionBusy", "another call in s2: SessionBusy");
        is_str(err_msg(r),
               "session \"s2\" is running another call: wait for it (if it became a job, "
               "job_result with wait_s), cancel it (job_cancel), or use another session",
               "which says what to do");
        json_decref(r);
        json_decref(tool("job_cancel", json_pack("{s:s}", "job_id", sc(job, "job_id")), &code));
        json_decref(job);
        json_decref(tool("session_close", json_pack("{s:s}", "session", "s2"), &code));
        r = tool("run_python", json_pack("{s:s, s:s}", "code", "print:b", "session", "bad name!"),
                 &code);
        is_str(err_type(r), "InvalidArguments", "a bad session name: InvalidArguments");
        json_decref(r);
        r = tool("session_close", json_pack("{s:s}", "session", "s1"), &code);
        ok(r && !json_is_true(json_object_get(r, "isError")), "session_close closes it");
        json_decref(r);
        r = tool("session_close", json_pack("{s:s}", "session", "s1"), &code);
        ok(json_is_true(json_object_get(r, "isError")), "closing it again is an error");
        json_decref(r);
}

/* A call right after the client cancelled its session's running call
 * waits for the interrupt to end that call, at most a second, then runs. */
static void test_call_after_cancel(void)
{
        int code = 0;
        json_t *r =
            tool("run_python", json_pack("{s:s, s:s}", "code", "print:a", "session", "w1"), &code);
        is_str(sc(r, "status"), "ok", "session w1 opens");
        json_decref(r);
        static const struct {
                const char *code, *status, *what;
        } cases[] = {
            {"hang", "ok", "the interrupt ends the cancelled call: the next call runs"},
            {"stubborn", "busy", "the cancelled call ignores the interrupt: SessionBusy"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                unsigned long long execs = fake_engine_execs(F);
                int id = ++next_id;
                client_send(&C0, jrpc_request(id, "tools/call",
                                              json_pack("{s:s, s:{s:s, s:s}}", "name", "run_python",
                                                        "arguments", "code", cases[i].code,
                                                        "session", "w1")));
                /* Its code runs once the runtime has the exec. */
                LOOP_WAIT(L, fake_engine_execs(F) != execs, 5000);
                ok(fake_engine_execs(F) > execs, "\"%s\" runs in w1", cases[i].code);
                client_send(&C0, jrpc_notification("notifications/cancelled",
                                                   json_pack("{s:i}", "requestId", id)));
                long long t0 = now_ms();
                r = tool("run_python",
                         json_pack("{s:s, s:s}", "code", "print:next", "session", "w1"), &code);
                long long ms = now_ms() - t0;
                is_str(sc(r, "status"), cases[i].status, "%s (after %lld ms)", cases[i].what, ms);
                if (strcmp(cases[i].status, "busy") == 0) {
                        is_str(err_type(r), "SessionBusy", "...SessionBusy");
                        ok(ms >= 900, "...once it waited a second for the interrupt (%lld ms)", ms);
                }
                json_decref(r);
        }
        json_decref(tool("session_close", json_pack("{s:s}", "session", "w1"), &code));
}

static void test_busy(void)
{
        /* Every slot but the session reserve is taken by hanging runs. */
        int code = 0;
        json_t *jobs[8];
        int n = 0;
        json_t *r = NULL;
        for (; n < 8; n++) {
                r = tool("run_python", json_pack("{s:s, s:f}", "code", "hang", "sync_wait_s", 0.1),
                         &code);
                const char *st = sc(r, "status");
                if (!st || strcmp(st, "running") != 0)
                        break;
                jobs[n] = r;
        }
        is_str(sc(r, "status"), "busy", "with every slot and the queue taken: status busy");
        is_str(err_type(r), "Busy", "and error type Busy");
        is_str(err_msg(r),
               "every sandbox slot is in use (3) and 0 calls are already waiting: try again "
               "shortly, or raise max_sandboxes / max_queue",
               "which names the settings");
        json_decref(r);
        for (int i = 0; i < n; i++) {
                json_decref(
                    tool("job_cancel", json_pack("{s:s}", "job_id", sc(jobs[i], "job_id")), &code));
                json_decref(jobs[i]);
        }
}

/* The servers of a session's code: those of its first call with code;
 * a later call naming others is refused before the sandbox hears of it,
 * unless it adds them with session_servers. */
static json_t *run_in(const char *session, const char *servers, const char *widen)
{
        json_t *args = json_pack("{s:s, s:s}", "code", "print:x", "session", session);
        if (servers)
                json_object_set_new(args, "servers", json_loads(servers, 0, NULL));
        if (widen)
                json_object_set_new(args, "session_servers", json_loads(widen, 0, NULL));
        return tool("run_python", args, NULL);
}

static char *granted(const char *session)
{
        json_t *r = tool("session_list", json_object(), NULL);
        json_t *list = json_object_get(json_object_get(r, "structuredContent"), "sessions");
        size_t i;
        json_t *x;
        char *names = NULL;
        json_array_foreach(list, i, x)
        {
                if (strcmp(json_string_value(json_object_get(x, "name")), session) == 0)
                        names = json_dumps(json_object_get(x, "servers"),
                                           JSON_COMPACT | JSON_ENCODE_ANY);
        }
        json_decref(r);
        return names ? names : strdup("(none)");
}

static void test_session_servers(void)
{
        json_t *r = run_in("g1", "[\"a\"]", NULL);
        is_str(sc(r, "status"), "ok", "a session opened with servers [a]");
        json_decref(r);
        char *names = granted("g1");
        is_str(names, "[\"a\"]", "session_list shows what it may call");
        free(names);
        unsigned long long execs = fake_engine_execs(F);
        r = run_in("g1", "[\"b\"]", NULL);
        is_str(err_type(r), "ServerNotGranted", "a later call naming b is refused");
        is_str(sc(r, "status"), "invalid_arguments", "... as invalid_arguments");
        is_str(err_msg(r),
               "session \"g1\" may call only the MCP servers it was given (a), and this call "
               "names b. Open a new session (another name) for them, or add them to this one "
               "with \"session_servers\", knowing that code its earlier calls ran can use them "
               "too",
               "... saying what it holds, what was named, and what to do");
        json_decref(r);
        is_int((int)(fake_engine_execs(F) - execs), 0, "... and the sandbox never heard of it");
        r = run_in("g1", NULL, NULL);
        is_str(sc(r, "status"), "ok", "a later call naming none runs");
        json_decref(r);
        r = run_in("g1", "[\"a\"]", NULL);
        is_str(sc(r, "status"), "ok", "... and the grant stays: a runs again");
        json_decref(r);
        r = tool("run_python",
                 json_pack("{s:s, s:s, s:[s], s:[s]}", "code", "servers", "session", "g1",
                           "servers", "a", "session_servers", "b"),
                 NULL);
        is_str(sc(r, "stdout"), "[\"a\",\"b\"]\n",
               "session_servers [b] adds b, and the call's code gets it");
        json_decref(r);
        r = run_in("g1", "[\"b\"]", NULL);
        is_str(sc(r, "status"), "ok", "... for later calls too");
        json_decref(r);
        names = granted("g1");
        is_str(names, "[\"a\",\"b\"]", "session_list shows both");
        free(names);

        json_decref(tool("session_close", json_pack("{s:s}", "session", "g1"), NULL));

        /* An opening that runs no code (write_file's) fixes nothing: the
         * first call with code does. */
        r = tool("run_python", json_pack("{s:s, s:s}", "code", "", "session", "g2"), NULL);
        is_str(sc(r, "status"), "ok", "g2 opens with no code");
        json_decref(r);
        r = run_in("g2", "[\"b\"]", NULL);
        is_str(sc(r, "status"), "ok", "its first call with code names b");
        json_decref(r);
        r = run_in("g2", "[\"a\"]", NULL);
        is_str(err_type(r), "ServerNotGranted", "... after which a is refused");
        json_decref(r);
        /* With ask_run, what the session would refuse is refused before
         * anyone is asked (this client could not be asked at all). */
        cfg.ask_run = true;
        r = run_in("g2", "[\"a\"]", NULL);
        is_str(err_type(r), "ServerNotGranted", "ask_run: refused before asking");
        json_decref(r);
        r = run_in("g2", "[\"b\"]", NULL);
        is_str(err_type(r), "PolicyDenied", "ask_run: a call it may make needs the person");
        json_decref(r);
        cfg.ask_run = false;
        json_decref(tool("session_close", json_pack("{s:s}", "session", "g2"), NULL));
        r = run_in("g3", NULL, "[\"a\"]");
        is_str(sc(r, "status"), "ok", "session_servers on the opening call grants them");
        json_decref(r);
        names = granted("g3");
        is_str(names, "[\"a\"]", "... as session_list shows");
        free(names);
        json_decref(tool("session_close", json_pack("{s:s}", "session", "g3"), NULL));
        r = tool("run_python", json_pack("{s:s, s:[s]}", "code", "print:x", "session_servers", "a"),
                 NULL);
        is_str(err_type(r), "InvalidArguments", "session_servers without a session is refused");
        json_decref(r);
}

/* ---- requests in flight, kind by kind */

/* What waits for the stall a kind's request is held by: a fake runtime's
 * exec, or a request it leaves unanswered. */
static unsigned long long base_execs, base_muted;

static bool runtime_has_exec(void)
{
        return fake_engine_execs(F) > base_execs;
}

static bool runtime_muted(void)
{
        return fake_engine_muted_seen(F) > base_muted;
}

static bool client_asked(struct client *c)
{
        size_t i;
        json_t *x;
        json_array_foreach(c->inbox, i,
                           x) if (strcmp(json_string_value(json_object_get(x, "method")) ?: "",
                                         "elicitation/create") == 0) return true;
        return false;
}

static struct client *K; /* the client of the kind under test */

static bool kind_asked(void)
{
        return client_asked(K);
}

/* tools/call of `name` with `args`, answered within 10 s (new reference). */
static json_t *k_tool(const char *name, json_t *args)
{
        json_t *r = client_call(K, "tools/call",
                                json_pack("{s:s, s:o}", "name", name, "arguments", args), 10000);
        json_t *result = json_incref(json_object_get(r, "result"));
        json_decref(r);
        return result;
}

/* A job of K's whose code hangs: its id in `out`. */
static void k_job(char *out, size_t size)
{
        json_t *r =
            k_tool("run_python", json_pack("{s:s, s:f}", "code", "hang", "sync_wait_s", 0.1));
        snprintf(out, size, "%s", sc(r, "job_id") ?: "");
        json_decref(r);
}

static char job_id[64];

static void open_session(void)
{
        json_decref(
            k_tool("run_python", json_pack("{s:s, s:s}", "code", "print:a", "session", "r")));
}

static void setup_job(void)
{
        k_job(job_id, sizeof(job_id));
}

static void setup_task(void)
{
        json_t *r = client_call(K, "tools/call",
                                json_pack("{s:s, s:{s:s}, s:{}}", "name", "run_python", "arguments",
                                          "code", "hang", "task"),
                                10000);
        json_t *task = json_object_get(json_object_get(r, "result"), "task");
        snprintf(job_id, sizeof(job_id), "%s",
                 json_string_value(json_object_get(task, "taskId")) ?: "");
        json_decref(r);
}

/* The job ends: what waited for it would be answered now. */
static void end_job(void)
{
        json_decref(k_tool("job_cancel", json_pack("{s:s}", "job_id", job_id)));
}

static void end_task(void)
{
        json_decref(client_call(K, "tasks/cancel", json_pack("{s:s}", "taskId", job_id), 2000));
}

static void setup_read_muted(void)
{
        open_session();
        fake_engine_mute(F, "sandbox/file/read");
}

static void setup_list_muted(void)
{
        open_session();
        fake_engine_mute(F, "sandbox/list");
}

static void setup_silent(void)
{
        fake_engine_set_silent(F, true);
}

static void setup_ask(void)
{
        cfg.ask_run = true;
}

/* A session whose call was cancelled and ignores it: the next call waits
 * for it to stop (a second at most). */
static void setup_stopping(void)
{
        open_session();
        int id = ++next_id;
        base_execs = fake_engine_execs(F);
        client_send(K, jrpc_request(id, "tools/call",
                                    json_pack("{s:s, s:{s:s, s:s}}", "name", "run_python",
                                              "arguments", "code", "stubborn", "session", "r")));
        LOOP_WAIT(L, runtime_has_exec(), 5000);
        client_send(
            K, jrpc_notification("notifications/cancelled", json_pack("{s:i}", "requestId", id)));
        json_decref(client_call(K, "ping", NULL, 2000));
}

static void undo_stalls(void)
{
        fake_engine_mute(F, NULL);
        fake_engine_set_silent(F, false);
        cfg.ask_run = false;
}

/* What the session "r" has on its way for its caller (sandbox_pending),
 * or -1 when there is no such session. */
static long session_r_pending(void)
{
        struct sandbox *sb = NULL;
        struct err e = {0};
        return session_sandbox(S, "withdrawer", "r", &sb, &e) == 0 ? (long)sandbox_pending(sb) : -1;
}

/* After a withdrawal, once the runtime answered what it held (a file's
 * chunk, a listing): the session's next run goes on. */
static void check_session(void)
{
        json_t *res =
            k_tool("run_python", json_pack("{s:s, s:s}", "code", "print:b", "session", "r"));
        is_str(sc(res, "status"), "ok", "... and its next run goes on");
        json_decref(res);
}

/* After a withdrawal: the server it waited for has no call of it left. */
static void check_upstream(void)
{
        is_int((int)upstream_pending(upstream_get(U, "slow")), 0,
               "... the server it waited for has nothing of it left");
}

/* After a withdrawal: the session it opened opens all the same (its file
 * written), and the withdrawn call is still not answered. */
static void check_opened(void)
{
        bool open = false;
        for (long long end = now_ms() + 5000; !open && now_ms() < end;) {
                json_t *r = k_tool("session_list", json_object());
                char *text = json_dumps(r, JSON_COMPACT);
                open = text && strstr(text, "\"name\":\"n\"") && strstr(text, "\"state\":\"idle\"");
                free(text);
                json_decref(r);
                if (!open)
                        loop_iterate(L, 50);
        }
        ok(open, "... its session opens all the same");
}

/* The message of `method` the client was sent last (borrowed), or NULL. */
static json_t *last_sent(struct client *c, const char *method)
{
        json_t *found = NULL, *x;
        size_t i;
        json_array_foreach(c->inbox, i,
                           x) if (strcmp(json_string_value(json_object_get(x, "method")) ?: "",
                                         method) == 0) found = x;
        return found;
}

/* After a withdrawal: the question is taken back from the person, and an
 * answer to it that comes anyway runs nothing. */
static void check_question(void)
{
        json_t *q = last_sent(K, "elicitation/create");
        json_t *back = last_sent(K, "notifications/cancelled");
        json_t *qid = json_object_get(q, "id");
        ok(qid && json_equal(json_object_get(json_object_get(back, "params"), "requestId"), qid),
           "... its question is taken back");
        unsigned long long execs = fake_engine_execs(F);
        json_t *answer = json_pack("{s:s, s:O, s:{s:s, s:{}}}", "jsonrpc", "2.0", "id",
                                   qid ?: json_null(), "result", "action", "accept", "content");
        client_send(K, answer);
        json_decref(client_call(K, "ping", NULL, 2000));
        is_int((int)(fake_engine_execs(F) - execs), 0, "... and an answer to it runs nothing");
}

static const struct kind {
        const char *name;
        void (*setup)(void);
        /* The request (its params: a JSON text, %s the job or task id). */
        const char *method, *params;
        bool (*stalled)(void); /* NULL: taken is enough */
        /* Its withdrawal ends no run: the client is idle at once. */
        bool idle_at_once;
        /* What it waited for ends (after its withdrawal), or NULL. */
        void (*end)(void);
        /* How long after that an answer could still come. */
        int answer_ms;
        /* Code runs after its withdrawal (what it started goes on). */
        bool runs_after;
        /* What else shows that it is gone, or NULL. */
        void (*check)(void);
} kinds[] = {
    {.name = "run_python",
     .method = "tools/call",
     .params = "{\"name\":\"run_python\",\"arguments\":{\"code\":\"hang\",\"sync_wait_s\":60}}",
     .stalled = runtime_has_exec},
    {.name = "job_result",
     .setup = setup_job,
     .method = "tools/call",
     .params = "{\"name\":\"job_result\",\"arguments\":{\"job_id\":\"%s\",\"wait_s\":60}}",
     .end = end_job},
    {.name = "tasks/result",
     .setup = setup_task,
     .method = "tasks/result",
     .params = "{\"taskId\":\"%s\"}",
     .end = end_task},
    {.name = "read_file",
     .setup = setup_read_muted,
     .method = "tools/call",
     .params = "{\"name\":\"read_file\",\"arguments\":{\"session\":\"r\",\"path\":\"x\"}}",
     .stalled = runtime_muted,
     .idle_at_once = true,
     .check = check_session},
    {.name = "list_files",
     .setup = setup_list_muted,
     .method = "tools/call",
     .params = "{\"name\":\"list_files\",\"arguments\":{\"session\":\"r\"}}",
     .stalled = runtime_muted,
     .idle_at_once = true,
     .check = check_session},
    /* The session opening cannot be stopped halfway: it opens, unanswered. */
    {.name = "write_file opening its session",
     .setup = setup_silent,
     .method = "tools/call",
     .params = "{\"name\":\"write_file\",\"arguments\":{\"session\":\"n\",\"path\":\"a\","
               "\"content\":\"x\"}}",
     .idle_at_once = true,
     .runs_after = true,
     .check = check_opened},
    {.name = "search_tools",
     .method = "tools/call",
     .params = "{\"name\":\"search_tools\",\"arguments\":{\"query\":\"x\",\"server\":\"slow\"}}",
     .idle_at_once = true,
     .check = check_upstream},
    {.name = "resources/read",
     .setup = setup_read_muted,
     .method = "resources/read",
     .params = "{\"uri\":\"corral://session/r/out/x\"}",
     .stalled = runtime_muted,
     .idle_at_once = true,
     .check = check_session},
    {.name = "resources/list",
     .setup = setup_list_muted,
     .method = "resources/list",
     .params = "{}",
     .stalled = runtime_muted,
     .idle_at_once = true,
     .check = check_session},
    {.name = "completion/complete",
     .setup = setup_list_muted,
     .method = "completion/complete",
     .params =
         "{\"ref\":{\"type\":\"ref/resource\",\"uri\":\"corral://session/{session}/{+path}\"},"
         "\"argument\":{\"name\":\"path\",\"value\":\"\"},\"context\":{\"arguments\":{"
         "\"session\":\"r\"}}}",
     .stalled = runtime_muted,
     .idle_at_once = true,
     .check = check_session},
    {.name = "run_python under ask_run",
     .setup = setup_ask,
     .method = "tools/call",
     .params = "{\"name\":\"run_python\",\"arguments\":{\"code\":\"print:x\"}}",
     .stalled = kind_asked,
     .idle_at_once = true,
     .check = check_question},
    /* Had it not been withdrawn, it would run (or be refused) after a second. */
    {.name = "run_python waiting for its session",
     .setup = setup_stopping,
     .method = "tools/call",
     .params = "{\"name\":\"run_python\",\"arguments\":{\"code\":\"print:x\",\"session\":\"r\"}}",
     .answer_ms = 1500},
};

/* A client of its own, initialized as an SDK client with elicitation. */
static void kind_client(struct client *c, const char *owner)
{
        if (client_open(c, owner) < 0)
                bail_out("cannot open a client");
        K = c;
        json_decref(client_call(c, "initialize",
                                json_pack("{s:s, s:{s:{}}, s:{s:s, s:s}}", "protocolVersion",
                                          "2025-11-25", "capabilities", "elicitation", "clientInfo",
                                          "name", "k", "version", "1"),
                                2000));
        client_send(c, jrpc_notification("notifications/initialized", NULL));
}

/* Sends the kind's request under `id`, and waits until its stall holds it. */
static void kind_start(const struct kind *k, int id)
{
        char text[1024];
        const char *at = strstr(k->params, "%s");
        if (at)
                snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - k->params), k->params, job_id,
                         at + 2);
        else
                snprintf(text, sizeof(text), "%s", k->params);
        json_t *params = json_loads(text, 0, NULL);
        if (!params)
                bail_out("%s: bad params in the test", k->name);
        base_execs = fake_engine_execs(F);
        base_muted = fake_engine_muted_seen(F);
        client_send(K, jrpc_request(id, k->method, params));
        /* Lines are taken in order: once the ping is answered, so is the
         * request taken. */
        json_decref(client_call(K, "ping", NULL, 2000));
        if (k->stalled)
                LOOP_WAIT(L, k->stalled(), 5000);
        if (k->stalled && !k->stalled())
                diag("%s: the request did not reach its stall", k->name);
}

/* Whether the client was sent anything under `id`. */
static bool sent_under(struct client *c, int id)
{
        size_t i;
        json_t *x;
        json_array_foreach(c->inbox, i, x)
        {
                json_t *xid = json_object_get(x, "id");
                if (json_is_integer(xid) && json_integer_value(xid) == id &&
                    !json_object_get(x, "method"))
                        return true;
        }
        return false;
}

/* Whether the client was sent an answer under id null. */
static bool sent_under_null(struct client *c)
{
        size_t i;
        json_t *x;
        json_array_foreach(c->inbox, i, x)
        {
                if (json_is_null(json_object_get(x, "id")) && !json_object_get(x, "method"))
                        return true;
        }
        return false;
}

/* Whether every session of `owner` is idle (or gone) within `ms`. */
static bool sessions_settle(const char *owner, int ms)
{
        for (long long end = now_ms() + ms;; loop_iterate(L, 10)) {
                json_t *list = session_list(S, owner);
                size_t i, busy = 0;
                json_t *x;
                json_array_foreach(list, i, x) busy +=
                    strcmp(json_string_value(json_object_get(x, "state")) ?: "", "idle") != 0;
                json_decref(list);
                if (busy == 0)
                        return true;
                if (now_ms() >= end)
                        return false;
        }
}

static bool wait_idle(struct client *c, int ms)
{
        return LOOP_WAIT(L, !mcp_server_busy(c->srv), ms);
}

static bool wait_removed(int alive, int ms)
{
        return LOOP_WAIT(L, fake_engine_alive(F) <= alive, ms);
}

/* Each kind of request: a second one with its id is refused, a withdrawn
 * one is never answered and frees its work, and a client that goes frees
 * all it had on its way (ASan's leak check holds the rest). */
static void test_requests(void)
{
        int alive = fake_engine_alive(F);
        cfg.client_max_sandboxes = 3;
        for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
                const struct kind *k = &kinds[i];
                struct client c;
                kind_client(&c, "withdrawer");
                if (k->setup)
                        k->setup();
                int id = ++next_id;
                kind_start(k, id);
                ok(mcp_server_busy(c.srv), "%s: in flight, the client is busy", k->name);
                client_send(&c, jrpc_request(id, "ping", NULL));
                json_t *r = client_await(&c, id, 2000);
                is_int(
                    (int)json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
                    JRPC_INVALID_REQUEST, "%s: a second request with its id is refused", k->name);
                json_decref(r);
                client_send(&c, jrpc_notification(
                                    "notifications/cancelled",
                                    json_pack("{s:i, s:s}", "requestId", id, "reason", "test")));
                json_decref(client_call(&c, "ping", NULL, 2000));
                unsigned long long execs = fake_engine_execs(F);
                if (k->idle_at_once)
                        ok(!mcp_server_busy(c.srv), "%s: withdrawn, it holds nothing", k->name);
                if (k->check == check_session)
                        is_int((int)session_r_pending(), 0,
                               "%s: ... nor anything in its session (its file operation, its "
                               "request to the runtime)",
                               k->name);
                if (k->end)
                        k->end();
                if (!k->idle_at_once)
                        ok(wait_idle(&c, 5000), "%s: withdrawn, its run ends", k->name);
                undo_stalls();
                LOOP_WAIT(L, sent_under(&c, id), k->answer_ms);
                if (!k->runs_after)
                        is_int((int)(fake_engine_execs(F) - execs), 0,
                               "%s: withdrawn, nothing of it runs", k->name);
                if (k->check)
                        k->check();
                ok(!sent_under(&c, id) && !sent_under_null(&c),
                   "%s: withdrawn, it is never answered", k->name);
                client_close(&c, false);
                ok(wait_removed(alive, 10000), "%s: its client's sandboxes are removed", k->name);

                /* A client that leaves, and one that leaves its sessions
                 * for its next MCP session (their runs end after it). */
                static const char *const leavers[] = {"leaver", "keeper"};
                for (size_t j = 0; j < ARRAY_SIZE(leavers); j++) {
                        kind_client(&c, leavers[j]);
                        if (j == 1)
                                mcp_server_keep_sessions(c.srv);
                        if (k->setup)
                                k->setup();
                        kind_start(k, ++next_id);
                        ok(mcp_server_busy(c.srv), "%s: a %s goes with it in flight", k->name,
                           leavers[j]);
                        client_close(&c, false);
                        undo_stalls();
                        if (j == 1) {
                                /* Its sessions' runs end without it; then they go. */
                                ok(sessions_settle("keeper", 10000),
                                   "%s: ... the sessions it left settle", k->name);
                                session_close_owner(S, "keeper");
                        }
                        ok(wait_removed(alive, 10000), "%s: ... its sandboxes are removed",
                           k->name);
                }
        }
        cfg.client_max_sandboxes = 0;
}

static void set_true(void *userdata)
{
        *(bool *)userdata = true;
}

static int bridge_up(void)
{
        struct err e = {0};
        /* a and b fail at once; slow never answers initialize. */
        json_t *own =
            json_pack("{s:{s:s}, s:{s:s}, s:{s:s, s:[s]}}", "a", "command", "/bin/false", "b",
                      "command", "/bin/false", "slow", "command", "/bin/sleep", "args", "30");
        struct registry_sources src = {.own = own, .only_own = true};
        struct registry reg = {0};
        int r = registry_load(&src, &reg, &e);
        json_decref(own);
        if (r < 0 || policy_load(corral_default_policy, NULL, false, &P, &e) < 0)
                return -1;
        if (upstream_set_new(L, &cfg, &reg, &U) < 0 ||
            bridge_new(L, &cfg, U, P, NULL, &B, &e) < 0) {
                registry_free(&reg);
                return -1;
        }
        return 0;
}

int main(void)
{
        if (!mkdtemp(dir))
                return 1;
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (devnull < 0 || dup2(devnull, STDERR_FILENO) < 0) /* the daemon's log */
                return 1;
        config_defaults(&cfg);
        cfg.pool_min = cfg.pool_max = 0;
        cfg.max_sandboxes = 3;
        cfg.max_queue = 0;
        /* A store of the test's own: never the user's. */
        char store[300];
        snprintf(store, sizeof(store), "%s/sessions", dir);
        cfg.session_store = strdup(store);
        if (loop_new(&L) < 0)
                return 1;
        F = fake_engine_new(L, dir);
        struct err e = {0};
        if (engine_new(L, fake_engine_url(F), 4 << 20, &E, &e) < 0 ||
            sandbox_mgr_new(L, &cfg, E, &M) < 0 || sandbox_mgr_prepare(M, &e) < 0 ||
            session_mgr_new(L, &cfg, M, &S) < 0 || bridge_up() < 0 || client_open(&C0, NULL) < 0) {
                printf("Bail out! set-up failed: %s\n", e.msg);
                return 1;
        }

        test_lifecycle();
        test_list();
        test_run();
        test_jobs();
        test_sessions();
        test_call_after_cancel();
        test_session_servers();
        test_busy();
        test_requests();

        /* serve's order: the sandboxes drain (their results reach the
         * calls still waiting), then the server and its calls go. */
        bool drained = false;
        sandbox_mgr_shutdown(M, set_true, &drained);
        LOOP_WAIT(L, drained, 10000);
        ok(drained, "the sandboxes drain at shutdown");
        is_int(fake_engine_alive(F), 0, "every container is removed at shutdown");
        client_close(&C0, true);
        session_mgr_free(S);
        sandbox_mgr_free(M);
        bridge_free(B);
        upstream_set_free(U);
        policy_free(P);
        engine_free(E);
        fake_engine_free(F);
        loop_free(L);
        config_free(&cfg);
        rmdir(dir);
        return done_testing();
}
