/* A fake upstream MCP server for the unit tests of upstream/ (as
 * fake-engine.c is for the engine): JSON-RPC lines on stdio, and faults
 * to inject. It is a test double for corral's MCP client; the e2e suites
 * run real servers from npm.
 *
 *   fake-upstream [MODE]
 *     ok            (default) a server with tools, listed in two pages
 *     die-at-start  says "cannot start: no config" on stderr, exits 2
 *     init-error    answers initialize with a JSON-RPC error
 *
 * Its tools, by what they do when called:
 *   echo      answers {"content":[{"type":"text","text": TEXT}]}
 *   slow      answers after "ms" milliseconds (late, past a call's limit)
 *   die       says "dying on purpose" on stderr and exits 3, no answer
 *   flood     "lines" notifications/message lines, then one line of "big"
 *             bytes (over corral's bound), then the answer "flooded"
 *   big       answers with a text of "size" bytes
 *   garbage   a line that is not JSON, an answer to an id nobody asked,
 *             an answer with a string id, a ping request of its own, and
 *             then its answer "after garbage"
 *   change    notifications/tools/list_changed; from then on it also
 *             lists the tool "added"
 *
 * With FAKE_UPSTREAM_LOG set, it appends "pid N" when it starts, every
 * line it reads, and "eof" when its stdin ends (then it exits 0). */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static FILE *trace;
static bool changed;

static void note(const char *prefix, const char *s)
{
        if (!trace)
                return;
        fprintf(trace, "%s%s\n", prefix, s);
        fflush(trace);
}

static void say(json_t *msg)
{
        char *s = json_dumps(msg, JSON_COMPACT);
        json_decref(msg);
        if (s) {
                fputs(s, stdout);
                fputc('\n', stdout);
                fflush(stdout);
        }
        free(s);
}

static void raw(const char *line)
{
        fputs(line, stdout);
        fputc('\n', stdout);
        fflush(stdout);
}

static void answer(json_t *id, json_t *result)
{
        say(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static json_t *text(const char *s)
{
        return json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text", s);
}

static json_t *tool(const char *name)
{
        return json_pack("{s:s, s:s, s:{s:s}}", "name", name, "description", "a fake tool",
                         "inputSchema", "type", "object");
}

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0)
                ;
}

static void call(json_t *id, json_t *params)
{
        const char *name = json_string_value(json_object_get(params, "name"));
        json_t *args = json_object_get(params, "arguments");
        long n;
        if (!name)
                name = "";
        if (strcmp(name, "echo") == 0) {
                const char *t = json_string_value(json_object_get(args, "text"));
                answer(id, text(t ? t : ""));
        } else if (strcmp(name, "slow") == 0) {
                sleep_ms((long)json_integer_value(json_object_get(args, "ms")));
                answer(id, text("late"));
        } else if (strcmp(name, "die") == 0) {
                fputs("dying on purpose\n", stderr);
                exit(3);
        } else if (strcmp(name, "flood") == 0) {
                n = (long)json_integer_value(json_object_get(args, "lines"));
                for (long i = 0; i < n; i++)
                        say(json_pack("{s:s, s:s, s:{s:s, s:I}}", "jsonrpc", "2.0", "method",
                                      "notifications/message", "params", "level", "info", "data",
                                      (json_int_t)i));
                n = (long)json_integer_value(json_object_get(args, "big"));
                if (n > 0) {
                        char *big = malloc((size_t)n + 1);
                        memset(big, 'x', (size_t)n);
                        big[n] = '\0';
                        raw(big);
                        free(big);
                }
                answer(id, text("flooded"));
        } else if (strcmp(name, "big") == 0) {
                n = (long)json_integer_value(json_object_get(args, "size"));
                char *big = malloc((size_t)n + 1);
                memset(big, 'y', (size_t)n);
                big[n] = '\0';
                answer(id, text(big));
                free(big);
        } else if (strcmp(name, "garbage") == 0) {
                raw("this is not json {");
                raw("{\"jsonrpc\":\"2.0\",\"id\":424242,\"result\":{}}");
                raw("{\"jsonrpc\":\"2.0\",\"id\":\"weird\",\"result\":{}}");
                raw("{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"ping\"}");
                answer(id, text("after garbage"));
        } else if (strcmp(name, "change") == 0) {
                changed = true;
                raw("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
                answer(id, text("changed"));
        } else {
                say(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id, "error",
                              "code", -32602, "message", "no such tool"));
        }
}

static void list(json_t *id, json_t *params)
{
        const char *cursor = json_string_value(json_object_get(params, "cursor"));
        if (!cursor) {
                json_t *tools = json_array();
                const char *first[] = {"echo", "slow", "die", "flood", "big"};
                for (size_t i = 0; i < sizeof(first) / sizeof(*first); i++)
                        json_array_append_new(tools, tool(first[i]));
                answer(id, json_pack("{s:o, s:s}", "tools", tools, "nextCursor", "page-2"));
                return;
        }
        json_t *tools = json_pack("[o, o]", tool("garbage"), tool("change"));
        if (changed)
                json_array_append_new(tools, tool("added"));
        answer(id, json_pack("{s:o}", "tools", tools));
}

int main(int argc, char **argv)
{
        const char *mode = argc > 1 ? argv[1] : "ok";
        const char *path = getenv("FAKE_UPSTREAM_LOG");
        char pid[32];
        trace = path ? fopen(path, "a") : NULL;
        snprintf(pid, sizeof(pid), "%d", (int)getpid());
        note("pid ", pid);
        if (strcmp(mode, "die-at-start") == 0) {
                fputs("cannot start: no config\n", stderr);
                return 2;
        }
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, stdin) > 0) {
                line[strcspn(line, "\n")] = '\0';
                note("", line);
                json_t *m = json_loads(line, 0, NULL);
                const char *method = json_string_value(json_object_get(m, "method"));
                json_t *id = json_object_get(m, "id");
                json_t *params = json_object_get(m, "params");
                if (!method || !id) {
                        /* a notification, or an answer to our ping */
                } else if (strcmp(method, "initialize") == 0) {
                        if (strcmp(mode, "init-error") == 0)
                                say(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                                              id, "error", "code", -32603, "message", "not today"));
                        else
                                answer(id, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}}",
                                                     "protocolVersion", "2025-06-18",
                                                     "capabilities", "tools", "listChanged", 1,
                                                     "serverInfo", "name", "fake", "version", "1"));
                } else if (strcmp(method, "tools/list") == 0) {
                        list(id, params);
                } else if (strcmp(method, "tools/call") == 0) {
                        call(id, params);
                } else {
                        say(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id,
                                      "error", "code", -32601, "message", "method not found"));
                }
                json_decref(m);
        }
        note("", "eof");
        free(line);
        return 0;
}
