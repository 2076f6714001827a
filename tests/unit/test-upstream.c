/* The upstream MCP client (upstream/client.h) against a fake server
 * (fake-upstream.c, run as a real child process over stdio): the normal
 * path (started, tools listed page by page, calls answered, the server's
 * own request answered, a cancelled call never answered, shutdown), and
 * faults: a server that dies at start or mid-call (restarted on the next
 * call, after a back-off that grows), answers late, floods, or speaks
 * garbage. A fake streamable HTTP server in this file covers the HTTP
 * transport: an event-stream answer, a lost session, DELETE at shutdown. The transitions of each
 * server are read back from the debug log, where set_state names every one;
 * tests/unit/test-mutation.sh shows this test failing when the transition table is broken.
 *
 *   test-upstream PATH-OF-FAKE-UPSTREAM */
#include "upstream/client.h"

#include "core/log.h"
#include "core/util.h"
#include "tap.h"
#include "wait.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct loop *L;
static struct upstream_set *S;
static struct config C;
static char dir[] = "/tmp/corral-upstream.XXXXXX";
static char log_path[128], trace_path[128];

#define WAIT_UNTIL(cond, ms) LOOP_WAIT(L, cond, ms)

/* What a call's callback was told. */
struct got {
        int calls;
        bool failed;
        int code;
        char msg[1024];
        char text[256];
        size_t tools;
        long long at_ms;
};

static void on_answer(void *userdata, json_t *result, const struct err *e)
{
        struct got *g = userdata;
        g->calls++;
        g->at_ms = now_ms();
        g->failed = e != NULL;
        if (e) {
                g->code = e->code;
                snprintf(g->msg, sizeof(g->msg), "%s", e->msg);
                return;
        }
        if (json_is_array(result)) {
                g->tools = json_array_size(result);
                return;
        }
        const char *t = json_string_value(
            json_object_get(json_array_get(json_object_get(result, "content"), 0), "text"));
        snprintf(g->text, sizeof(g->text), "%s", t ? t : "");
}

static struct upstream *server(const char *name)
{
        struct upstream *u = upstream_get(S, name);
        if (!u)
                abort();
        return u;
}

/* tools/call of `tool` with `args` (stolen). */
static struct upstream_call *call(const char *name, const char *tool, json_t *args,
                                  double timeout_s, size_t max_result, struct got *g)
{
        struct upstream_call *c = NULL;
        json_t *params = json_pack("{s:s, s:o}", "name", tool, "arguments", args);
        if (upstream_request(server(name), "tools/call", params, timeout_s, max_result, on_answer,
                             g, &c) < 0)
                abort();
        return c;
}

static bool ready(const char *name, struct got *g)
{
        struct upstream_call *c = NULL;
        if (upstream_when_ready(server(name), 20, on_answer, g, &c) < 0)
                abort();
        return WAIT_UNTIL(g->calls == 1, 20000);
}

static int count_in(const char *path, const char *needle)
{
        char line[4096];
        int n = 0;
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof(line), f))
                n += strstr(line, needle) != NULL;
        if (f)
                fclose(f);
        return n;
}

static int log_count(const char *needle)
{
        return count_in(log_path, needle);
}

static int trace_count(const char *needle)
{
        return count_in(trace_path, needle);
}

/* The transitions the log shows for server `name`: "from>to ...". */
static const char *transitions(const char *name)
{
        static char out[1024];
        char line[2048], tag[96];
        out[0] = '\0';
        snprintf(tag, sizeof(tag), "upstream %s: ", name);
        FILE *f = fopen(log_path, "re");
        while (f && fgets(line, sizeof(line), f)) {
                char *p = strstr(line, tag), *arrow;
                if (!p || !(arrow = strstr(p, " -> ")))
                        continue;
                char from[32] = "", to[32] = "";
                if (sscanf(p + strlen(tag), "%31s", from) != 1 ||
                    sscanf(arrow + 4, "%31s", to) != 1)
                        continue;
                size_t n = strlen(out);
                snprintf(out + n, sizeof(out) - n, "%s%s>%s", n ? " " : "", from, to);
        }
        if (f)
                fclose(f);
        return out;
}

/* ---- a fake streamable HTTP server on loopback TCP, on the test's loop:
 * one request per connection. initialize answers JSON with a session id,
 * tools/list JSON, tools/call "echo" an event stream, tools/call "lose"
 * 404 for the session (the session is gone); the GET stream is 405, and
 * DELETE ends the session. */

struct hconn {
        int fd;
        struct watch *w;
        size_t len;
        char buf[65536];
};

static struct {
        int fd;
        struct watch *w;
        int port;
        int initializes, deletes, sessions;
        bool initialized_versioned; /* notifications/initialized named the version */
        char last_session[64];
} H;

static void respond(int fd, int status, const char *type, const char *body)
{
        char head[512];
        size_t n = body ? strlen(body) : 0;
        int k =
            snprintf(head, sizeof(head),
                     "HTTP/1.1 %d X\r\n%s%s%sContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, type ? "Content-Type: " : "", type ? type : "", type ? "\r\n" : "", n);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        if (write(fd, head, (size_t)k) != k || (n && write(fd, body, n) != (ssize_t)n))
                diag("the fake HTTP server could not answer");
}

static void hconn_free(struct hconn *h)
{
        watch_remove(h->w);
        close(h->fd);
        free(h);
}

/* A whole request is in: answer it. */
static void http_answer(struct hconn *h, const char *body)
{
        char *sid = strcasestr(h->buf, "mcp-session-id: ");
        if (sid)
                sscanf(sid + 16, "%63s", H.last_session);
        if (strncmp(h->buf, "GET ", 4) == 0) {
                respond(h->fd, 405, NULL, NULL);
                return;
        }
        if (strncmp(h->buf, "DELETE ", 7) == 0) {
                H.deletes++;
                respond(h->fd, 200, NULL, NULL);
                return;
        }
        json_t *m = json_loads(body, 0, NULL);
        const char *method = json_string_value(json_object_get(m, "method"));
        json_t *id = json_object_get(m, "id");
        const char *tool = json_string_value(json_object_get(json_object_get(m, "params"), "name"));
        char out[1024], ids[32];
        snprintf(ids, sizeof(ids), "%lld", (long long)json_integer_value(id));
        if (!method || !id) {
                if (method && strcmp(method, "notifications/initialized") == 0)
                        H.initialized_versioned =
                            strcasestr(h->buf, "mcp-protocol-version: 2025-06-18\r\n") != NULL;
                respond(h->fd, 202, NULL, NULL);
        } else if (strcmp(method, "initialize") == 0) {
                char head[512];
                H.initializes++;
                snprintf(out, sizeof(out),
                         "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"protocolVersion\":"
                         "\"2025-06-18\",\"capabilities\":{},\"serverInfo\":{\"name\":\"web\","
                         "\"version\":\"1\"}}}",
                         ids);
                int k = snprintf(head, sizeof(head),
                                 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 "Mcp-Session-Id: session-%d\r\nContent-Length: %zu\r\n"
                                 "Connection: close\r\n\r\n%s",
                                 ++H.sessions, strlen(out), out);
                if (write(h->fd, head, (size_t)k) != k)
                        diag("the fake HTTP server could not answer");
        } else if (strcmp(method, "tools/list") == 0) {
                snprintf(out, sizeof(out),
                         "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"tools\":[{\"name\":"
                         "\"echo\",\"inputSchema\":{\"type\":\"object\"}}]}}",
                         ids);
                respond(h->fd, 200, "application/json", out);
        } else if (tool && strcmp(tool, "lose") == 0) {
                respond(h->fd, 404, "text/plain", "session not found");
        } else {
                snprintf(out, sizeof(out),
                         ": a comment\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":"
                         "{\"content\":[{\"type\":\"text\",\"text\":\"over http\"}]}}\n\n",
                         ids);
                respond(h->fd, 200, "text/event-stream", out);
        }
        json_decref(m);
}

static void hconn_ready(struct watch *w, uint32_t events, void *userdata)
{
        struct hconn *h = userdata;
        (void)w;
        (void)events;
        ssize_t k = read(h->fd, h->buf + h->len, sizeof(h->buf) - 1 - h->len);
        if (k < 0 && errno == EAGAIN)
                return;
        if (k <= 0) {
                hconn_free(h);
                return;
        }
        h->len += (size_t)k;
        h->buf[h->len] = '\0';
        char *end = strstr(h->buf, "\r\n\r\n");
        if (!end)
                return;
        char *cl = strcasestr(h->buf, "content-length: ");
        size_t want = cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
        if (h->len < (size_t)(end + 4 - h->buf) + want)
                return;
        http_answer(h, end + 4);
        hconn_free(h);
}

static void http_accept(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        (void)userdata;
        int fd = accept4(H.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
                return;
        struct hconn *h = calloc(1, sizeof(*h));
        h->fd = fd;
        if (watch_add(L, fd, EPOLLIN, hconn_ready, h, &h->w) < 0)
                hconn_free(h);
}

static int http_fake_start(void)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        H.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (H.fd < 0 || bind(H.fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(H.fd, 16) < 0 ||
            getsockname(H.fd, (struct sockaddr *)&a, &len) < 0)
                return -1;
        H.port = ntohs(a.sin_port);
        return watch_add(L, H.fd, EPOLLIN, http_accept, NULL, &H.w);
}

/* ---- the tests */

/* Whether the first server started: nothing else can run without it. */
static bool started;

static void test_normal(void)
{
        struct got g = {0};
        struct upstream_call *c = NULL;
        is_str(upstream_state(server("fake")), "idle", "normal: idle before the first use");
        upstream_when_ready(server("fake"), 10, on_answer, &g, &c);
        is_int(g.calls, 0, "normal: no callback inside the call that started it");
        is_str(upstream_state(server("fake")), "starting", "normal: starting");
        started = ok(WAIT_UNTIL(g.calls == 1, 12000) && !g.failed, "normal: ready once started");
        if (!started)
                return;
        is_int(g.tools, 7, "normal: both pages of tools listed");
        is_int(json_array_size(upstream_tools(server("fake"))), 7, "normal: the tools are cached");
        is_str(upstream_state(server("fake")), "connected", "normal: connected");
        is_str(transitions("fake"), "idle>starting starting>ready",
               "normal: the log shows each transition by name");
        ok(upstream_last_error(server("fake")) == NULL, "normal: no error");

        struct got a = {0};
        call("fake", "echo", json_pack("{s:s}", "text", "hello"), 5, 0, &a);
        is_int(a.calls, 0, "call: no callback inside upstream_request");
        ok(WAIT_UNTIL(a.calls == 1, 5000) && !a.failed, "call: answered");
        is_str(a.text, "hello", "call: the server's answer");

        struct got n = {0};
        call("fake", "nosuch", json_object(), 5, 0, &n);
        ok(WAIT_UNTIL(n.calls == 1, 5000) && n.failed, "call: the server's error is an error");
        is_int(n.code, -32602, "call: ...with the server's code");
        is_str(n.msg, "no such tool", "call: ...and its message");

        struct got b = {0};
        call("fake", "echo", json_pack("{s:s}", "text", "a text longer than ten bytes"), 5, 10, &b);
        ok(WAIT_UNTIL(b.calls == 1, 5000) && b.failed, "call: a result over max_result fails");
        is_int(b.code, UPE_TOO_LARGE, "call: ...as too large");
        like(b.msg, "over the limit of 10", "call: ...saying the limit");

        json_t *d = upstream_describe(server("fake"));
        is_str(json_string_value(json_object_get(d, "status")), "connected", "describe: status");
        is_int(json_integer_value(json_object_get(d, "tools")), 7, "describe: tools");
        json_decref(d);
}

static void test_garbage(void)
{
        struct got g = {0};
        call("fake", "garbage", json_object(), 5, 0, &g);
        ok(WAIT_UNTIL(g.calls == 1, 5000) && !g.failed, "garbage: the call is still answered");
        is_str(g.text, "after garbage", "garbage: ...with its own answer");
        ok(log_count("a message that is not JSON: this is not json {") == 1,
           "garbage: a line that is not JSON is logged, and skipped");
        ok(log_count("an answer nobody waits for") >= 2,
           "garbage: answers to unknown and string ids are dropped");
        ok(WAIT_UNTIL(trace_count("\"id\":77,\"result\":{}") == 1, 5000),
           "garbage: the server's own ping is answered");
        is_str(upstream_state(server("fake")), "connected", "garbage: still connected");
}

static void test_late(void)
{
        struct got g = {0};
        long long t0 = now_ms();
        call("fake", "slow", json_pack("{s:i}", "ms", 1500), 0.3, 0, &g);
        ok(WAIT_UNTIL(g.calls == 1, 5000) && g.failed, "late: the call fails at its limit");
        ok(g.at_ms - t0 < 1400, "late: ...before the server answers (%lld ms)", g.at_ms - t0);
        int before = log_count("an answer nobody waits for");
        is_int(g.code, UPE_TIMEOUT, "late: ...as a timeout");
        like(g.msg, "tools/call on server 'fake' did not answer within the time limit",
             "late: ...saying so");
        ok(WAIT_UNTIL(trace_count("timed out in corral") == 1, 5000),
           "late: the server is told the call is cancelled");
        ok(WAIT_UNTIL(log_count("an answer nobody waits for") > before, 5000),
           "late: the late answer is dropped");
        struct got a = {0};
        call("fake", "echo", json_pack("{s:s}", "text", "still here"), 5, 0, &a);
        ok(WAIT_UNTIL(a.calls == 1, 5000) && !a.failed, "late: the next call is answered");
        is_int(g.calls, 1, "late: the timed-out call was told once");
}

static void test_cancel(void)
{
        struct got g = {0};
        struct upstream_call *c = call("fake", "slow", json_pack("{s:i}", "ms", 300), 5, 0, &g);
        upstream_call_cancel(c);
        ok(WAIT_UNTIL(trace_count("the sandbox ended") == 1, 5000), "cancel: the server is told");
        struct got a = {0};
        call("fake", "echo", json_pack("{s:s}", "text", "after"), 5, 0, &a);
        ok(WAIT_UNTIL(a.calls == 1, 5000) && !a.failed, "cancel: a later call is answered");
        is_int(g.calls, 0, "cancel: the cancelled call is never answered");
}

static void test_flood(void)
{
        /* With two calls waiting, a line over the bound is nobody's. */
        struct got g = {0}, s = {0};
        call("fake", "flood", json_pack("{s:i, s:i}", "lines", 3000, "big", 300000), 10, 0, &g);
        call("fake", "slow", json_pack("{s:i}", "ms", 10), 10, 0, &s);
        ok(WAIT_UNTIL(g.calls == 1, 10000) && !g.failed, "flood: the call is answered");
        ok(WAIT_UNTIL(s.calls == 1, 10000) && !s.failed, "flood: so is the other");
        is_str(g.text, "flooded", "flood: ...with its answer after the flood");
        is_int(log_count("dropped a message over 131072 bytes"), 1,
               "flood: the line over the bound is dropped, and logged");
        ok(log_count("upstream fake: 2999") == 1, "flood: every message before it was read");

        struct got b = {0};
        call("fake", "big", json_pack("{s:i}", "size", 200000), 10, 0, &b);
        ok(WAIT_UNTIL(b.calls == 1, 10000) && b.failed, "flood: an answer over the bound fails");
        is_int(b.code, UPE_TOO_LARGE, "flood: ...as too large");
        like(b.msg, "server 'fake' answered with a message over 131072 bytes",
             "flood: ...saying so");
        is_str(upstream_state(server("fake")), "connected", "flood: still connected");
}

static void test_list_changed(void)
{
        struct got g = {0};
        call("fake", "change", json_object(), 5, 0, &g);
        ok(WAIT_UNTIL(g.calls == 1, 5000) && !g.failed, "list_changed: the call is answered");
        ok(WAIT_UNTIL(json_array_size(upstream_tools(server("fake"))) == 8, 5000),
           "list_changed: the tools are listed again");
}

static void test_die(void)
{
        struct got r = {0};
        ok(ready("phoenix", &r) && !r.failed, "die: a second server is ready");
        struct got g = {0};
        call("phoenix", "die", json_object(), 5, 0, &g);
        ok(WAIT_UNTIL(g.calls == 1, 5000) && g.failed, "die: the call in flight fails");
        is_int(g.code, UPE_UNAVAILABLE, "die: ...as unavailable");
        is_str(g.msg,
               "server 'phoenix' exited with status 3; its last stderr line: dying on purpose "
               "(corral restarts it on the next call)",
               "die: ...saying how, with its last words");
        is_str(upstream_state(server("phoenix")), "error", "die: its state is error");
        like(upstream_last_error(server("phoenix")), "exited with status 3",
             "die: last_error says how");

        /* Died young: the restart waits a second, then two. */
        struct got a = {0};
        long long t0 = now_ms();
        call("phoenix", "echo", json_pack("{s:s}", "text", "again"), 10, 0, &a);
        ok(WAIT_UNTIL(a.calls == 1, 10000) && !a.failed, "restart: the next call restarts it");
        is_str(a.text, "again", "restart: ...and is answered");
        ok(a.at_ms - t0 >= 900, "restart: after a back-off of a second (%lld ms)", a.at_ms - t0);
        is_str(transitions("phoenix"),
               "idle>starting starting>ready ready>dead dead>starting starting>ready",
               "restart: the log shows each transition by name");
}

static void test_start_faults(void)
{
        struct got g = {0};
        ok(ready("crash", &g) && g.failed, "die at start: the wait fails");
        is_int(g.code, UPE_UNAVAILABLE, "die at start: ...as unavailable");
        is_str(g.msg,
               "server 'crash' exited with status 2 while starting; its last stderr line: cannot "
               "start: no config (corral restarts it on the next call)",
               "die at start: ...saying how, with its last words");
        is_str(upstream_state(server("crash")), "error", "die at start: error");
        /* Dying at every start: the back-off doubles (a start that
         * reaches ready resets it). */
        struct got g2 = {0}, g3 = {0};
        long long t0 = now_ms();
        ok(ready("crash", &g2) && g2.failed, "die at start: the next wait fails too");
        ok(g2.at_ms - t0 >= 900, "die at start: after a second (%lld ms)", g2.at_ms - t0);
        t0 = now_ms();
        ok(ready("crash", &g3) && g3.failed, "die at start: and the next");
        ok(g3.at_ms - t0 >= 1900, "die at start: after two (%lld ms)", g3.at_ms - t0);
        is_str(transitions("crash"),
               "idle>starting starting>dead dead>starting starting>dead dead>starting "
               "starting>dead",
               "die at start: the log shows each transition by name");

        struct got i = {0};
        ok(ready("refuses", &i) && i.failed, "initialize error: the wait fails");
        like(i.msg, "initialize failed: not today", "initialize error: ...with its message");

        struct got m = {0};
        ok(ready("missing", &m) && m.failed, "no program: the wait fails");
        like(m.msg, "server 'missing': cannot run `/nonexistent/corral-fake`: No such file",
             "no program: ...saying so");
        is_str(transitions("missing"), "idle>starting starting>dead",
               "no program: starting, then dead");
}

static void test_http(void)
{
        struct got r = {0};
        ok(ready("web", &r) && !r.failed, "http: ready once connected");
        is_int(r.tools, 1, "http: its tools listed");
        is_str(upstream_state(server("web")), "connected", "http: connected");
        ok(H.initialized_versioned, "http: notifications/initialized names the protocol version");
        struct got g = {0};
        call("web", "echo", json_object(), 5, 0, &g);
        is_int(g.calls, 0, "http: no callback inside upstream_request");
        ok(WAIT_UNTIL(g.calls == 1, 5000) && !g.failed, "http: a call answered on an event stream");
        is_str(g.text, "over http", "http: ...with its answer");
        is_str(H.last_session, "session-1", "http: the session id goes with every request");

        /* The session is gone: the call fails, the connection is freed
         * from inside its own callback, and the next call starts over. */
        struct got l = {0};
        call("web", "lose", json_object(), 5, 0, &l);
        ok(WAIT_UNTIL(l.calls == 1, 5000) && l.failed, "http: a lost session fails the call");
        like(l.msg, "no longer knows the session (HTTP 404: session not found)",
             "http: ...saying so");
        is_str(upstream_state(server("web")), "error", "http: its state is error");
        struct got a = {0};
        call("web", "echo", json_object(), 10, 0, &a);
        ok(WAIT_UNTIL(a.calls == 1, 10000) && !a.failed, "http: the next call connects again");
        is_int(H.initializes, 2, "http: ...with a new initialize");
        is_str(H.last_session, "session-2", "http: ...and the new session");
        is_str(transitions("web"),
               "idle>starting starting>ready ready>dead dead>starting starting>ready",
               "http: the log shows each transition by name");
}

static int shutdown_calls;
static void on_shutdown(void *userdata)
{
        (void)userdata;
        shutdown_calls++;
}

static pid_t last_pid(void)
{
        char line[256];
        int pid = 0, p;
        FILE *f = fopen(trace_path, "re");
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "pid %d", &p) == 1)
                        pid = p;
        if (f)
                fclose(f);
        return pid;
}

static void test_shutdown(void)
{
        pid_t pid = last_pid();
        ok(pid > 0 && kill(pid, 0) == 0, "shutdown: a server runs");
        struct got g = {0};
        call("fake", "slow", json_pack("{s:i}", "ms", 100), 5, 0, &g);
        upstream_set_shutdown(S, on_shutdown, NULL);
        ok(WAIT_UNTIL(g.calls == 1, 1000) && g.failed, "shutdown: a call in flight fails");
        like(g.msg, "corral is shutting down", "shutdown: ...saying so");
        ok(WAIT_UNTIL(shutdown_calls == 1, 5000), "shutdown: done once every server is stopped");
        is_int(log_count("upstream fake: stopping"), 1, "shutdown: the log says it stops");
        is_int(log_count("upstream fake: stopped"), 1, "shutdown: ...and that it stopped");
        ok(kill(pid, 0) < 0 && errno == ESRCH, "shutdown: no process is left");
        is_int(H.deletes, 1, "shutdown: the HTTP session is ended with DELETE");
        struct got a = {0};
        call("fake", "echo", json_pack("{s:s}", "text", "late"), 5, 0, &a);
        ok(WAIT_UNTIL(a.calls == 1, 1000) && a.failed, "shutdown: a new call fails");
        like(a.msg, "corral is shutting down", "shutdown: ...saying so");
        /* The loop turns on: done is not told again. */
        WAIT_UNTIL(shutdown_calls > 1, 300);
        is_int(shutdown_calls, 1, "shutdown: done is told once");
}

int main(int argc, char **argv)
{
        if (argc < 2 || !mkdtemp(dir))
                return 1;
        const char *fake = argv[1];
        snprintf(log_path, sizeof(log_path), "%s/log", dir);
        snprintf(trace_path, sizeof(trace_path), "%s/trace", dir);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int saved_stderr = dup(STDERR_FILENO);
        if (fd < 0 || saved_stderr < 0 || dup2(fd, STDERR_FILENO) < 0)
                return 1;
        close(fd);
        log_max_level = LOG_DEBUG;
        signal(SIGPIPE, SIG_IGN); /* as corral does: a dead server's pipe is EPIPE */
        if (loop_new(&L) < 0)
                return 1;
        if (http_fake_start() < 0)
                return 1;
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/mcp", H.port);
        config_defaults(&C);
        C.max_frame = 64 * 1024; /* a line bound of 128 KiB */
        json_t *own = json_pack(
            "{s:{s:s, s:[s], s:{s:s}}, s:{s:s, s:[s], s:{s:s}}, s:{s:s, s:[s]}, s:{s:s, s:[s]},"
            " s:{s:s}, s:{s:s, s:s}}",
            "fake", "command", fake, "args", "ok", "env", "FAKE_UPSTREAM_LOG", trace_path,
            "phoenix", "command", fake, "args", "ok", "env", "FAKE_UPSTREAM_LOG", trace_path,
            "crash", "command", fake, "args", "die-at-start", "refuses", "command", fake, "args",
            "init-error", "missing", "command", "/nonexistent/corral-fake", "web", "type", "http",
            "url", url);
        struct registry_sources src = {.own = own, .only_own = true};
        struct registry reg = {0};
        struct err e = {0};
        if (!own || registry_load(&src, &reg, &e) < 0 || upstream_set_new(L, &C, &reg, &S) < 0) {
                fprintf(stdout, "# setup failed: %s\n", e.msg);
                return 1;
        }
        json_decref(own);

        test_normal();
        if (started) {
                test_garbage();
                test_late();
                test_cancel();
                test_flood();
                test_list_changed();
                test_die();
                test_start_faults();
                test_http();
                test_shutdown();
        }
        is_int(log_count("forbidden transition"), 0, "no transition the state table forbids");

        dup2(saved_stderr, STDERR_FILENO); /* a sanitizer's report, if any, shows */
        upstream_set_free(S);
        watch_remove(H.w);
        close(H.fd);
        loop_free(L);
        config_free(&C);
        diag_file_on_failure(log_path); /* the log explains a failure */
        unlink(log_path);
        unlink(trace_path);
        rmdir(dir);
        return done_testing();
}
