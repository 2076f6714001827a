/* The MCP tools: their schemas, argument validation, and the exact shape of
 * a CallToolResult for each kind of outcome. */
#include "mcp/tools.h"

#include "core/buf.h"
#include "tap.h"
#include "sandbox/images.h"

/* What a call may name: the default (data) and python. */
static struct sandbox_image image_v[] = {
    {.name = "corral-data:latest", .short_name = "data", .profile = "data", .is_default = true},
    {.name = "corral-python:latest", .short_name = "python", .profile = "python"},
};
static const struct sandbox_images images = {.v = image_v, .n = 2};

#include <math.h>
#include <string.h>

static bool valid_utf8(const char *s)
{
        /* jansson validates UTF-8 when it makes a string. */
        json_t *j = json_string(s);
        json_decref(j);
        return j != NULL;
}

static void test_list_images(void)
{
        /* With images and mounts: run_python and run_shell offer `image`,
         * and their descriptions say what the sandbox holds. */
        image_v[0].packages = "numpy 1.24.2, pandas 1.5.3";
        json_t *mounts = json_pack("[{s:s}, {s:s}]", "Target", "/data", "Target", "/ref");
        json_t *list = tools_list(NULL, &images, mounts, true);
        for (size_t i = 0; i < 2; i++) {
                json_t *t = json_array_get(list, i);
                const char *name = json_string_value(json_object_get(t, "name"));
                json_t *im = json_object_get(
                    json_object_get(json_object_get(t, "inputSchema"), "properties"), "image");
                ok(json_is_object(im), "%s: takes `image`", name);
                json_t *want = json_pack("[s,s]", "data", "python");
                ok(json_equal(json_object_get(im, "enum"), want),
                   "%s: data or python, the default first", name);
                json_decref(want);
                /* Said once, in run_python's; run_shell's refers to it. */
                const char *d = json_string_value(json_object_get(t, "description"));
                if (i == 0) {
                        like(d, "Images: data (numpy, pandas); python.",
                             "%s: names the images, the default's packages (no versions)", name);
                        like(d, "Read-only host data: /data, /ref.", "%s: and the mounts", name);
                } else {
                        ok(!strstr(d, "Images:") && strstr(d, "same arguments"),
                           "%s: refers to run_python's", name);
                }
        }
        json_decref(list);
        /* The guide says it with the packages' versions. */
        struct buf b;
        buf_init(&b, 4096);
        tools_environment_text(&images, mounts, true, &b);
        is_str(buf_str(&b),
               " Images: data (numpy 1.24.2, pandas 1.5.3); python. Read-only host "
               "data: /data, /ref.",
               "environment text with versions");
        buf_free(&b);
        json_decref(mounts);
        image_v[0].packages = NULL;
        /* One image and no mounts: nothing to choose, nothing said. */
        struct sandbox_images one = {.v = image_v, .n = 1};
        list = tools_list(NULL, &one, NULL, true);
        json_t *props =
            json_object_get(json_object_get(json_array_get(list, 0), "inputSchema"), "properties");
        ok(!json_object_get(props, "image"), "one image: no `image` argument");
        json_decref(list);
}

/* A tool's hint as MCP reads it: absent means MCP's default (readOnly
 * false, destructive true, idempotent false, openWorld true). */
static bool hint(json_t *tool, const char *name)
{
        json_t *v = json_object_get(json_object_get(tool, "annotations"), name);
        if (v)
                return json_is_true(v);
        return strcmp(name, "destructiveHint") == 0 || strcmp(name, "openWorldHint") == 0;
}

/* run_python's openWorldHint tells whether its code may call the user's
 * servers; execution.taskSupport is offered only to a protocol with
 * tasks. */
static void test_list_hints(void)
{
        json_t *with = tools_list("everything, fs", NULL, NULL, true);
        json_t *without = tools_list(NULL, NULL, NULL, false);
        json_t *rp = json_array_get(with, 0), *rp0 = json_array_get(without, 0);
        is_str(json_string_value(json_object_get(rp, "name")), "run_python", "run_python first");
        ok(hint(rp, "openWorldHint"), "run_python with servers: openWorldHint true");
        ok(!hint(rp0, "openWorldHint"), "run_python with none: openWorldHint false");
        ok(!hint(json_array_get(with, 1), "openWorldHint"),
           "run_shell: openWorldHint false (it has no bridge)");
        ok(json_object_get(rp, "execution") != NULL, "tasks: run_python says taskSupport");
        size_t i;
        json_t *t;
        int with_execution = 0;
        json_array_foreach(without, i, t) with_execution += json_object_get(t, "execution") != NULL;
        is_int(with_execution, 0, "no tasks: no tool says taskSupport");
        json_decref(with);
        json_decref(without);
}

static void test_list(void)
{
        json_t *list = tools_list("everything, fs", NULL, NULL, true);
        if (!ok(json_is_array(list) && json_array_size(list) == 16, "tools_list has 16 tools"))
                return;
        /* The session tools: session_list, session_close, write_file,
         * read_file, list_files, each with the session it acts on. */
        static const struct {
                const char *name;
                bool readonly, destructive;
                size_t args, required;
        } sess[] = {{"session_list", true, false, 0, 0},
                    {"session_close", false, true, 1, 1},
                    {"write_file", false, true, 4, 3},
                    {"read_file", true, false, 4, 1}, /* a run's output needs no session */
                    {"list_files", true, false, 4, 1}};
        for (size_t i = 0; i < ARRAY_SIZE(sess); i++) {
                json_t *t = json_array_get(list, 9 + i);
                is_str(json_string_value(json_object_get(t, "name")), sess[i].name, "tool %zu name",
                       9 + i);
                /* destructiveHint means something only when not read-only. */
                ok(hint(t, "readOnlyHint") == sess[i].readonly &&
                       (sess[i].readonly || hint(t, "destructiveHint") == sess[i].destructive) &&
                       !hint(t, "openWorldHint"),
                   "%s: readOnlyHint %d, destructiveHint %d, openWorldHint false", sess[i].name,
                   sess[i].readonly, sess[i].destructive);
                json_t *in = json_object_get(t, "inputSchema");
                json_t *props = json_object_get(in, "properties");
                is_int(json_object_size(props), sess[i].args, "%s: %zu argument(s)", sess[i].name,
                       sess[i].args);
                is_int(json_array_size(json_object_get(in, "required")), sess[i].required,
                       "%s: %zu required", sess[i].name, sess[i].required);
                if (sess[i].args)
                        is_str(json_string_value(
                                   json_object_get(json_object_get(props, "session"), "pattern")),
                               "^[A-Za-z0-9_.-]+$", "%s: session names have a pattern",
                               sess[i].name);
        }
        /* session_save and session_fork, last: neither read-only nor
         * destructive (a save keeps everything), each with its session. */
        static const struct {
                const char *name, *second;
                bool idempotent;
        } saves[] = {{"session_save", "keep_running", true},
                     {"session_fork", "new_session", false}};
        for (size_t i = 0; i < ARRAY_SIZE(saves); i++) {
                json_t *t = json_array_get(list, 14 + i);
                is_str(json_string_value(json_object_get(t, "name")), saves[i].name,
                       "tool %zu name", 14 + i);
                ok(!hint(t, "readOnlyHint") && !hint(t, "destructiveHint") &&
                       hint(t, "idempotentHint") == saves[i].idempotent &&
                       !hint(t, "openWorldHint"),
                   "%s: not read-only, not destructive, idempotentHint %d", saves[i].name,
                   saves[i].idempotent);
                json_t *props = json_object_get(json_object_get(t, "inputSchema"), "properties");
                ok(json_object_size(props) == 2 && json_object_get(props, "session") &&
                       json_object_get(props, saves[i].second),
                   "%s: takes session and %s", saves[i].name, saves[i].second);
        }
        /* The job tools: job_status, job_result, job_cancel, job_list. */
        static const struct {
                const char *name;
                bool readonly;
                size_t args;
        } jobs[] = {{"job_status", true, 1},
                    {"job_result", true, 2},
                    {"job_cancel", false, 1},
                    {"job_list", true, 0}};
        for (size_t i = 0; i < ARRAY_SIZE(jobs); i++) {
                json_t *t = json_array_get(list, 5 + i);
                is_str(json_string_value(json_object_get(t, "name")), jobs[i].name, "tool %zu name",
                       5 + i);
                ok(hint(t, "readOnlyHint") == jobs[i].readonly, "%s: readOnlyHint %d", jobs[i].name,
                   jobs[i].readonly);
                json_t *in = json_object_get(t, "inputSchema");
                is_int(json_object_size(json_object_get(in, "properties")), jobs[i].args,
                       "%s: %zu argument(s)", jobs[i].name, jobs[i].args);
                is_int(json_array_size(json_object_get(in, "required")), jobs[i].args ? 1 : 0,
                       "%s: job_id required when it takes one", jobs[i].name);
        }
        /* MCP tasks: only the tools that run code may run as tasks. */
        size_t ti;
        json_t *tt;
        json_array_foreach(list, ti, tt)
        {
                const char *n = json_string_value(json_object_get(tt, "name"));
                const char *ts = json_string_value(
                    json_object_get(json_object_get(tt, "execution"), "taskSupport"));
                bool runs = strcmp(n, "run_python") == 0 || strcmp(n, "run_shell") == 0;
                ok(runs ? ts && strcmp(ts, "optional") == 0 : ts == NULL, "%s: taskSupport %s", n,
                   runs ? "optional" : "absent (forbidden)");
        }
        /* run_python names the servers and takes their names. */
        json_t *py = json_array_get(list, 0);
        like(json_string_value(json_object_get(py, "description")), "Servers: everything, fs",
             "run_python's description names the servers");
        json_t *sv = json_object_get(
            json_object_get(json_object_get(py, "inputSchema"), "properties"), "servers");
        is_str(json_string_value(json_object_get(sv, "type")), "array", "servers is an array");
        ok(!json_object_get(json_object_get(json_object_get(json_array_get(list, 1), "inputSchema"),
                                            "properties"),
                            "servers"),
           "run_shell takes no servers");
        /* Widening a session's servers says what it costs. */
        json_t *ss = json_object_get(
            json_object_get(json_object_get(py, "inputSchema"), "properties"), "session_servers");
        is_str(json_string_value(json_object_get(ss, "type")), "array",
               "session_servers is an array");
        like(json_string_value(json_object_get(ss, "description")), "for its earlier code too",
             "session_servers: the description says earlier code gets them too");
        static const char *const readonly[] = {"list_servers", "search_tools"};
        for (size_t i = 0; i < ARRAY_SIZE(readonly); i++) {
                json_t *t = json_array_get(list, 3 + i);
                is_str(json_string_value(json_object_get(t, "name")), readonly[i], "tool %zu name",
                       3 + i);
                ok(hint(t, "readOnlyHint"), "%s: readOnlyHint", readonly[i]);
        }
        /* The third, sandbox_status, is read-only and takes no arguments. */
        json_t *st = json_array_get(list, 2);
        is_str(json_string_value(json_object_get(st, "name")), "sandbox_status", "tool 2 name");
        ok(hint(st, "readOnlyHint"), "sandbox_status: readOnlyHint");
        ok(json_object_size(json_object_get(json_object_get(st, "inputSchema"), "properties")) == 0,
           "sandbox_status: no arguments");
        static const struct {
                const char *name, *arg;
        } want[] = {{"run_python", "code"}, {"run_shell", "command"}};
        for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
                json_t *t = json_array_get(list, i);
                is_str(json_string_value(json_object_get(t, "name")), want[i].name, "tool %zu name",
                       i);
                const char *desc = json_string_value(json_object_get(t, "description"));
                ok(desc && strlen(desc) > 50, "%s: has a description", want[i].name);
                like(desc, i == 0 ? "no network" : "as run_python does",
                     "%s: the description states the sandbox rules", want[i].name);
                like(desc, "Guide: resource " GUIDE_URI ".", "%s: names the guide", want[i].name);
                ok(json_is_string(json_object_get(t, "title")), "%s: has a title", want[i].name);

                json_t *in = json_object_get(t, "inputSchema");
                is_str(json_string_value(json_object_get(in, "type")), "object",
                       "%s: inputSchema is an object", want[i].name);
                json_t *props = json_object_get(in, "properties");
                is_int(json_object_size(props), i == 0 ? 9 : 7, "%s: %d arguments", want[i].name,
                       i == 0 ? 9 : 7);
                is_str(
                    json_string_value(json_object_get(json_object_get(props, "network"), "type")),
                    "array", "%s: network is an array", want[i].name);
                is_str(json_string_value(json_object_get(json_object_get(props, "files"), "type")),
                       "array", "%s: files is an array", want[i].name);
                is_str(
                    json_string_value(json_object_get(json_object_get(props, "session"), "type")),
                    "string", "%s: session is a string", want[i].name);
                json_t *sw = json_object_get(props, "sync_wait_s");
                ok(json_is_number(json_object_get(sw, "minimum")) &&
                       json_number_value(json_object_get(sw, "minimum")) == 0,
                   "%s: sync_wait_s, a number >= 0", want[i].name);
                is_str(
                    json_string_value(json_object_get(json_object_get(props, want[i].arg), "type")),
                    "string", "%s: %s is a string", want[i].name, want[i].arg);
                json_t *ts = json_object_get(props, "timeout_s");
                is_str(json_string_value(json_object_get(ts, "type")), "number",
                       "%s: timeout_s is a number", want[i].name);
                ok(json_number_value(json_object_get(ts, "exclusiveMinimum")) == 0 &&
                       json_is_number(json_object_get(ts, "exclusiveMinimum")),
                   "%s: timeout_s has exclusiveMinimum 0", want[i].name);
                json_t *req = json_object_get(in, "required");
                ok(json_is_array(req) && json_array_size(req) == 1 &&
                       strcmp(json_string_value(json_array_get(req, 0)), want[i].arg) == 0,
                   "%s: required is [%s]", want[i].name, want[i].arg);

                json_t *out = json_object_get(t, "outputSchema");
                is_str(json_string_value(json_object_get(out, "type")), "object",
                       "%s: outputSchema is an object", want[i].name);
                json_t *oprops = json_object_get(out, "properties");
                static const char *const fields[] = {
                    "status",
                    "exit_code",
                    "stdout",
                    "stderr",
                    "stdout_bytes",
                    "stderr_bytes",
                    "stdout_truncated",
                    "stderr_truncated",
                    "duration_ms",
                    "container",
                    "error",
                };
                int missing = 0;
                for (size_t k = 0; k < ARRAY_SIZE(fields); k++)
                        if (!json_object_get(oprops, fields[k])) {
                                diag("outputSchema lacks %s", fields[k]);
                                missing++;
                        }
                is_int(missing, 0, "%s: outputSchema has every result field", want[i].name);
                json_t *status_enum = json_object_get(json_object_get(oprops, "status"), "enum");
                is_int(json_array_size(status_enum), 10,
                       "%s: ten statuses (running and session_lost too)", want[i].name);
                ok(json_object_get(oprops, "job_id") != NULL, "%s: job_id in the output schema",
                   want[i].name);
                json_t *oreq = json_object_get(out, "required");
                bool has_status = false;
                for (size_t k = 0; k < json_array_size(oreq); k++)
                        has_status |=
                            strcmp(json_string_value(json_array_get(oreq, k)), "status") == 0;
                ok(has_status, "%s: status is required", want[i].name);
                json_t *ann = json_object_get(t, "annotations");
                /* This list names servers: run_python's code may reach them. */
                bool open = strcmp(want[i].name, "run_python") == 0;
                ok(ann && !hint(t, "readOnlyHint") && !hint(t, "destructiveHint") &&
                       hint(t, "openWorldHint") == open,
                   "%s: annotations (openWorldHint %s)", want[i].name, open ? "true" : "false");
        }
        char *s = json_dumps(list, JSON_COMPACT);
        ok(s != NULL, "tools_list encodes");
        free(s);
        json_decref(list);
}

/* The whole tools/list result stays within 9 KiB (a host sends it in every
 * conversation), with two images, the data image's packages, two servers
 * and tasks: tests/e2e measures it as sent. */
static void test_list_size(void)
{
        image_v[0].packages = "numpy 1.24.2, pandas 1.5.3, numexpr 2.8.4, bottleneck 1.3.5, scipy "
                              "1.10.1, statsmodels 0.13.5, sklearn 1.2.1, sympy 1.11.1, networkx "
                              "2.8.8, matplotlib 3.6.3, seaborn 0.12.2, pil 9.4.0, openpyxl 3.0.9, "
                              "xlsxwriter 3.0.2, xlrd 1.2.0, odf 1.4.2, lxml 4.9.2, bs4 4.11.2, "
                              "yaml 6.0, tabulate 0.8.9";
        json_t *result =
            json_pack("{s:o}", "tools", tools_list("everything, fs", &images, NULL, true));
        char *s = json_dumps(result, JSON_COMPACT);
        size_t n = s ? strlen(s) : 0;
        diag("tools/list result: %zu bytes", n);
        ok(s && n <= 9216, "tools/list result within 9216 bytes (%zu)", n);
        free(s);
        json_decref(result);
        image_v[0].packages = NULL;
}

/* A status name for every status value a result can hold. */
static void test_status_names(void)
{
        static const char *const names[] = {"ok",        "error",        "timeout", "oom",
                                            "cancelled", "engine_error", "busy"};
        for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                is_str(sandbox_status_name((enum sandbox_status)i), names[i], "status %zu is %s", i,
                       names[i]);
}

static const struct call_case {
        const char *tool;
        const char *args; /* JSON text, or NULL for absent arguments */
        int rc;
        enum sandbox_lang lang;
        const char *code;
        double timeout;  /* expected req.timeout_s on success */
        const char *msg; /* substring of the message on failure */
} call_cases[] = {
    {"run_python", "{\"code\":\"print(1)\"}", 0, LANG_PYTHON, "print(1)", 30, NULL},
    {"run_shell", "{\"command\":\"ls -l\"}", 0, LANG_SHELL, "ls -l", 30, NULL},
    {"run_python", "{\"code\":\"\"}", 0, LANG_PYTHON, "", 30, NULL},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":5}", 0, LANG_PYTHON, "x", 5, NULL},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":0.5}", 0, LANG_PYTHON, "x", 0.5, NULL},
    {"run_python", "{\"timeout_s\":600,\"code\":\"x\"}", 0, LANG_PYTHON, "x", 600, NULL},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":601}", 0, LANG_PYTHON, "x", 600, NULL},
    {"run_shell", "{\"command\":\"x\",\"timeout_s\":1e300}", 0, LANG_SHELL, "x", 600, NULL},
    {"run_ruby", "{\"code\":\"x\"}", -ENOENT, 0, NULL, 0, "run_ruby"},
    {"", "{\"code\":\"x\"}", -ENOENT, 0, NULL, 0, "unknown tool"},
    {"RUN_PYTHON", "{\"code\":\"x\"}", -ENOENT, 0, NULL, 0, "RUN_PYTHON"},
    {"run_python", NULL, -EINVAL, 0, NULL, 0, "\"code\" is required"},
    {"run_python", "{}", -EINVAL, 0, NULL, 0, "\"code\" is required"},
    {"run_python", "{\"code\":1}", -EINVAL, 0, NULL, 0, "must be a string"},
    {"run_python", "{\"code\":null}", -EINVAL, 0, NULL, 0, "must be a string"},
    {"run_python", "{\"code\":[\"x\"]}", -EINVAL, 0, NULL, 0, "must be a string"},
    {"run_shell", "{\"code\":\"ls\"}", -EINVAL, 0, NULL, 0, "unknown argument \"code\""},
    {"run_python", "{\"command\":\"ls\"}", -EINVAL, 0, NULL, 0, "unknown argument \"command\""},
    {"run_python", "{\"code\":\"x\",\"verbose\":true}", -EINVAL, 0, NULL, 0,
     "unknown argument \"verbose\""},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":-1}", -EINVAL, 0, NULL, 0, "timeout_s"},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":0}", -EINVAL, 0, NULL, 0, "positive number"},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":0.0}", -EINVAL, 0, NULL, 0, "timeout_s"},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":-0.0}", -EINVAL, 0, NULL, 0, "timeout_s"},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":\"5\"}", -EINVAL, 0, NULL, 0, "timeout_s"},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":\"NaN\"}", -EINVAL, 0, NULL, 0, "timeout_s"},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":true}", -EINVAL, 0, NULL, 0, "timeout_s"},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":null}", -EINVAL, 0, NULL, 0, "timeout_s"},
    {"run_python", "{\"code\":\"x\",\"timeout_s\":{}}", -EINVAL, 0, NULL, 0, "timeout_s"},
    {"run_python", "{\"code\":\"x\",\"servers\":[\"a\",\"b\"]}", 0, LANG_PYTHON, "x", 30, NULL},
    {"run_python", "{\"code\":\"x\",\"servers\":\"a\"}", -EINVAL, 0, NULL, 0,
     "\"servers\" must be an array"},
    {"run_shell", "{\"command\":\"x\",\"servers\":[\"a\"]}", -EINVAL, 0, NULL, 0,
     "unknown argument \"servers\""},
    {"run_python", "{\"code\":\"x\",\"session\":\"s\",\"session_servers\":[\"a\"]}", 0, LANG_PYTHON,
     "x", 30, NULL},
    {"run_python", "{\"code\":\"x\",\"session_servers\":[\"a\"]}", -EINVAL, 0, NULL, 0,
     "give it with \"session\""},
    {"run_python", "{\"code\":\"x\",\"session\":\"s\",\"session_servers\":\"a\"}", -EINVAL, 0, NULL,
     0, "\"session_servers\" must be an array"},
    {"run_shell", "{\"command\":\"x\",\"session\":\"s\",\"session_servers\":[\"a\"]}", -EINVAL, 0,
     NULL, 0, "unknown argument \"session_servers\""},
    {"run_python", "[\"x\"]", -EINVAL, 0, NULL, 0, "arguments must be an object"},
    {"run_python", "{\"code\":\"x\",\"session\":\"data-1.v2_x\"}", 0, LANG_PYTHON, "x", 30, NULL},
    {"run_shell", "{\"command\":\"x\",\"session\":\"s\"}", 0, LANG_SHELL, "x", 30, NULL},
    {"run_python", "{\"code\":\"x\",\"session\":\"two words\"}", -EINVAL, 0, NULL, 0,
     "session name"},
    {"run_python", "{\"code\":\"x\",\"session\":\"\"}", -EINVAL, 0, NULL, 0, "session name"},
    {"run_python", "{\"code\":\"x\",\"session\":5}", -EINVAL, 0, NULL, 0,
     "\"session\" must be a string"},
    {"run_python",
     "{\"code\":\"x\",\"session\":"
     "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
     -EINVAL, 0, NULL, 0, "1 to 64"},
    {"run_shell", "{\"command\":\"x\",\"files\":[{\"path\":\"a.txt\",\"content\":\"hi\"}]}", 0,
     LANG_SHELL, "x", 30, NULL},
    {"run_python", "{\"code\":\"x\",\"files\":{\"a\":\"b\"}}", -EINVAL, 0, NULL, 0,
     "must be an array"},
    {"run_python", "{\"code\":\"x\",\"files\":[{\"path\":\"../x\",\"content\":\"\"}]}", -EINVAL, 0,
     NULL, 0, "files[0]: path \"../x\" contains \"..\""},
    {"run_python", "{\"code\":\"x\",\"files\":[{\"path\":\"/etc/x\",\"content\":\"\"}]}", -EINVAL,
     0, NULL, 0, "outside /workspace"},
    {"run_python", "{\"code\":\"x\",\"files\":[{\"path\":\"a\",\"content\":\"\",\"mode\":1}]}",
     -EINVAL, 0, NULL, 0, "unknown key \"mode\""},
    {"run_python", "{\"code\":\"x\",\"files\":[{\"content\":\"\"}]}", -EINVAL, 0, NULL, 0,
     "needs a \"path\""},
    {"run_python", "{\"code\":\"x\",\"files\":[{\"path\":\"a\",\"content\":1}]}", -EINVAL, 0, NULL,
     0, "\"content\" must be a string"},
    {"run_python",
     "{\"code\":\"x\",\"files\":[{\"path\":\"a\",\"content\":\"!!\",\"encoding\":\"base64\"}]}",
     -EINVAL, 0, NULL, 0, "not valid base64"},
    {"run_python",
     "{\"code\":\"x\",\"files\":[{\"path\":\"a\",\"content\":\"x\",\"encoding\":\"latin1\"}]}",
     -EINVAL, 0, NULL, 0, "\"encoding\" must be"},
    {"run_python", "\"print(1)\"", -EINVAL, 0, NULL, 0, "arguments must be an object"},
};

static void test_parse_image(void)
{
        struct config cfg;
        config_defaults(&cfg);
        static const struct {
                const char *arg, *want;
                int rc;
        } cases[] = {
            {"\"python\"", "corral-python:latest", 0},
            {"\"corral-python\"", "corral-python:latest", 0},
            {"\"corral-python:latest\"", "corral-python:latest", 0},
            {"\"data\"", "corral-data:latest", 0},
            {"\"corral-data:latest\"", "corral-data:latest", 0},
            {"\"ubuntu:latest\"", NULL, -EINVAL},
            {"\"\"", NULL, -EINVAL},
            {"7", NULL, -EINVAL},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                char text[200];
                struct err ebox = {0};
                char *msg = ebox.msg;
                snprintf(text, sizeof(text), "{\"code\": \"1\", \"image\": %s}", cases[i].arg);
                json_t *args = json_loads(text, 0, NULL);
                struct sandbox_request req = {0};
                int rc = tools_parse_call("run_python", args, &cfg, &images, &req, &ebox);
                is_int(rc, cases[i].rc, "image %s: returns %d", cases[i].arg, cases[i].rc);
                if (rc == 0)
                        is_str(req.image, cases[i].want, "...the image %s",
                               cases[i].want ? cases[i].want : "(the default)");
                else
                        like(msg, "data (the default), python",
                             "...and the message lists what may be named");
                tools_request_free(&req);
                json_decref(args);
        }
        json_t *args = json_pack("{s:s, s:s}", "command", "true", "image", "python");
        struct sandbox_request req = {0};
        struct err ebox = {0};
        is_int(tools_parse_call("run_shell", args, &cfg, &images, &req, &ebox), 0,
               "run_shell takes image too");
        tools_request_free(&req);
        json_decref(args);
        config_free(&cfg);
}

static void test_parse_call(void)
{
        struct config cfg;
        config_defaults(&cfg);
        for (size_t i = 0; i < ARRAY_SIZE(call_cases); i++) {
                const struct call_case *tc = &call_cases[i];
                json_error_t jerr;
                json_t *args = tc->args ? json_loads(tc->args, JSON_DECODE_ANY, &jerr) : NULL;
                if (tc->args && !args) {
                        ok(false, "test data #%zu is JSON: %s", i, jerr.text);
                        continue;
                }
                struct sandbox_request req = {.timeout_s = -1};
                struct err ebox = {0};
                char *msg = ebox.msg;
                int rc = tools_parse_call(tc->tool, args, &cfg, &images, &req, &ebox);
                const char *what = tc->args ? tc->args : "(no arguments)";
                is_int(rc, tc->rc, "%s %s: returns %d", tc->tool, what, tc->rc);
                if (tc->rc == 0) {
                        is_int(req.lang, tc->lang, "... language");
                        is_str(req.code, tc->code, "... code");
                        ok(req.timeout_s == tc->timeout, "... timeout_s %g (got %g)", tc->timeout,
                           req.timeout_s);
                } else {
                        like(msg, tc->msg, "... message");
                }
                tools_request_free(&req);
                json_decref(args);
        }

        /* session_servers: the call's code gets them with `servers`, once each. */
        json_t *sa = json_loads("{\"code\":\"x\",\"session\":\"s\",\"servers\":[\"a\",\"b\"],"
                                "\"session_servers\":[\"b\",\"c\"]}",
                                0, NULL);
        struct sandbox_request sr = {0};
        struct err se = {0};
        is_int(tools_parse_call("run_python", sa, &cfg, &images, &sr, &se), 0,
               "servers with session_servers: accepted");
        char *names = json_dumps(sr.servers, JSON_COMPACT);
        is_str(names, "[\"a\",\"b\",\"c\"]", "... the call's servers are both, once each");
        free(names);
        is_int((int)json_array_size(sr.session_servers), 2, "... session_servers kept apart");
        tools_request_free(&sr);
        json_decref(sa);

        /* sync_wait_s: the configured default, or the caller's (>= 0). */
        static const struct {
                const char *args;
                int rc;
                double want;
        } waits[] = {
            {"{\"code\":\"x\"}", 0, 25},
            {"{\"code\":\"x\",\"sync_wait_s\":2}", 0, 2},
            {"{\"code\":\"x\",\"sync_wait_s\":0}", 0, 0},
            {"{\"code\":\"x\",\"sync_wait_s\":1e9}", 0, 1e9},
            {"{\"code\":\"x\",\"sync_wait_s\":-1}", -EINVAL, 0},
            {"{\"code\":\"x\",\"sync_wait_s\":\"2\"}", -EINVAL, 0},
            {"{\"code\":\"x\",\"sync_wait_s\":null}", -EINVAL, 0},
        };
        for (size_t i = 0; i < ARRAY_SIZE(waits); i++) {
                json_t *a = json_loads(waits[i].args, 0, NULL);
                struct sandbox_request r = {0};
                struct err ebox = {0};
                char *m = ebox.msg;
                int rc = tools_parse_call("run_python", a, &cfg, &images, &r, &ebox);
                is_int(rc, waits[i].rc, "%s: returns %d", waits[i].args, waits[i].rc);
                if (rc == 0)
                        ok(r.sync_wait_s == waits[i].want, "... sync_wait_s %g (got %g)",
                           waits[i].want, r.sync_wait_s);
                else
                        like(m, "sync_wait_s", "... naming sync_wait_s");
                json_decref(a);
        }

        /* JSON has no NaN or Infinity, and jansson cannot make them. */
        ok(json_real(NAN) == NULL && json_real(INFINITY) == NULL,
           "a NaN or infinite timeout_s cannot reach tools_parse_call");

        /* A NUL inside the code cannot be passed to a process. */
        struct sandbox_request req;
        struct err ebox = {0};
        char *msg = ebox.msg;
        json_t *args = json_pack("{s:s%}", "code", "a\0b", (size_t)3);
        is_int(tools_parse_call("run_python", args, &cfg, &images, &req, &ebox), -EINVAL,
               "code with a NUL is refused");
        like(msg, "NUL", "... saying why");
        json_decref(args);

        /* The code must fit in one frame with its envelope: max_frame / 2. */
        cfg.max_frame = 64 << 10;
        char *code = malloc((32 << 10) + 2);
        memset(code, 'x', (32 << 10) + 1);
        code[32 << 10] = '\0';
        args = json_pack("{s:s}", "code", code);
        is_int(tools_parse_call("run_python", args, &cfg, &images, &req, &ebox), 0,
               "code of max_frame / 2 bytes is accepted");
        json_decref(args);
        code[32 << 10] = 'x';
        code[(32 << 10) + 1] = '\0';
        args = json_pack("{s:s}", "code", code);
        is_int(tools_parse_call("run_python", args, &cfg, &images, &req, &ebox), -EINVAL,
               "one byte more is refused");
        like(msg, "32768", "... naming the limit");
        json_decref(args);
        free(code);

        /* The cap follows the configuration. */
        cfg.max_timeout_s = 10;
        args = json_pack("{s:s, s:f}", "code", "x", "timeout_s", 20.0);
        tools_parse_call("run_python", args, &cfg, &images, &req, &ebox);
        ok(req.timeout_s == 10, "timeout_s is capped at max_timeout_s (10)");
        json_decref(args);
        cfg.timeout_s = 7;
        args = json_pack("{s:s}", "code", "x");
        tools_parse_call("run_python", args, &cfg, &images, &req, &ebox);
        ok(req.timeout_s == 7, "no timeout_s: the configured default");
        json_decref(args);

        /* Messages go to the host as JSON strings: they must stay valid
         * UTF-8 even when a long name is cut. "%.100s" cuts bytes, so a
         * character straddling byte 100 is split; tools_error_result then
         * returns NULL and server.c sends `"result":{}` instead of an error
         * (or a JSON-RPC error without "message" for an unknown tool). */
        char name[128];
        memset(name, 'a', 99);
        memcpy(name + 99, "\xc3\xa9", 3); /* 'é' at bytes 99..100, then NUL */
        char argtext[160];
        snprintf(argtext, sizeof(argtext), "{\"code\":\"x\",\"%s\":1}", name);
        args = json_loads(argtext, 0, NULL);
        tools_parse_call("run_python", args, &cfg, &images, &req, &ebox);
        ok(valid_utf8(msg), "unknown-argument message is valid UTF-8");
        json_t *r = tools_error_result("invalid_arguments", "InvalidArguments", msg);
        ok(r != NULL, "... and can be sent as a tool error");
        json_decref(r);
        tools_parse_call(name, args, &cfg, &images, &req, &ebox);
        ok(valid_utf8(msg), "unknown-tool message is valid UTF-8");
        json_decref(args);
        config_free(&cfg);
}

/* ---- tools_result */

static void set_output(struct sandbox_output *o, const char *data, unsigned long long total,
                       bool truncated)
{
        buf_init(&o->data, 1 << 20);
        if (data)
                buf_append(&o->data, data, strlen(data));
        o->total = total;
        o->truncated = truncated;
}

static json_t *result_of(const struct sandbox_result *res, const char *session)
{
        struct result_view v = {.session = session, .max_chars = 20000};
        return tools_result(res, &v);
}

static void free_result(struct sandbox_result *r)
{
        buf_free(&r->out.data);
        buf_free(&r->err.data);
}

static const char *text_of(json_t *result)
{
        json_t *content = json_object_get(result, "content");
        if (json_array_size(content) != 1)
                return NULL;
        json_t *c = json_array_get(content, 0);
        const char *type = json_string_value(json_object_get(c, "type"));
        if (!type || strcmp(type, "text") != 0)
                return NULL;
        return json_string_value(json_object_get(c, "text"));
}

static const struct result_case {
        const char *name;
        enum sandbox_status status;
        bool has_exit;
        int exit_code;
        const char *out, *err;
        unsigned long long out_total, err_total;
        bool out_trunc, err_trunc;
        long long ms;
        const char *container, *etype, *emsg, *etb;
        /* expected */
        const char *text;
        const char *structured; /* compact JSON, keys in order */
} result_cases[] = {
    {"ok", ST_OK, true, 0, "hello\n", "", 6, 0, false, false, 12, "abc123def456", NULL, NULL, NULL,
     "hello\n[status: ok, exit code 0, 12 ms]",
     "{\"status\":\"ok\",\"exit_code\":0,\"stdout\":\"hello\\n\",\"stderr\":\"\","
     "\"stdout_bytes\":6,\"stderr_bytes\":0,\"stdout_truncated\":false,"
     "\"stderr_truncated\":false,\"duration_ms\":12,\"container\":\"abc123def456\","
     "\"error\":null,\"stdout_uri\":null,\"stderr_uri\":null}"},
    {"ok, no output, no container", ST_OK, true, 0, NULL, NULL, 0, 0, false, false, 5, NULL, NULL,
     NULL, NULL, "[status: ok, exit code 0, 5 ms]",
     "{\"status\":\"ok\",\"exit_code\":0,\"stdout\":\"\",\"stderr\":\"\","
     "\"stdout_bytes\":0,\"stderr_bytes\":0,\"stdout_truncated\":false,"
     "\"stderr_truncated\":false,\"duration_ms\":5,\"container\":null,\"error\":null,"
     "\"stdout_uri\":null,\"stderr_uri\":null}"},
    {"timeout", ST_TIMEOUT, false, 0, "partial", NULL, 7, 0, false, false, 1003, "c1", "Timeout",
     "the code ran longer than its time limit of 1 s and was killed", NULL,
     "partial\n--- error ---\nTimeout: the code ran longer than its time limit of 1 s and was "
     "killed\n[status: timeout, 1003 ms]",
     "{\"status\":\"timeout\",\"exit_code\":null,\"stdout\":\"partial\",\"stderr\":\"\","
     "\"stdout_bytes\":7,\"stderr_bytes\":0,\"stdout_truncated\":false,"
     "\"stderr_truncated\":false,\"duration_ms\":1003,\"container\":\"c1\",\"error\":{"
     "\"type\":\"Timeout\",\"message\":\"the code ran longer than its time limit of 1 s and "
     "was killed\",\"traceback\":null},\"stdout_uri\":null,\"stderr_uri\":null}"},
    {"truncated both: the runtime counted more than it relayed", ST_ERROR, true, 1, "ab", "e", 10,
     5, true, true, 3, NULL, NULL, NULL, NULL,
     "ab\n[... 8 bytes of stdout left out (10 in all). The rest is not kept "
     "...]\n--- stderr ---\ne\n[... 4 bytes of stderr left out (5 in all). The rest is not kept "
     "...]\n[status: error, exit code 1, 3 ms]",
     "{\"status\":\"error\",\"exit_code\":1,\"stdout\":\"ab\\n[... 8 bytes of stdout left out (10 "
     "in all). The rest is not kept ...]\\n\",\"stderr\":\"e\\n[... 4 bytes of "
     "stderr left out (5 in all). The rest is not kept ...]\\n\","
     "\"stdout_bytes\":10,\"stderr_bytes\":5,\"stdout_truncated\":true,"
     "\"stderr_truncated\":true,\"duration_ms\":3,\"container\":null,\"error\":null,"
     "\"stdout_uri\":null,\"stderr_uri\":null}"},
    {"traceback already in stderr", ST_ERROR, true, 1, NULL,
     "Traceback:\n  x\nZeroDivisionError: division by zero\n", 0, 51, false, false, 9, NULL,
     "ZeroDivisionError", "division by zero",
     "Traceback:\n  x\nZeroDivisionError: division by zero\n",
     "--- stderr ---\nTraceback:\n  x\nZeroDivisionError: division by zero\n[status: error, "
     "exit code 1, 9 ms]",
     "{\"status\":\"error\",\"exit_code\":1,\"stdout\":\"\",\"stderr\":\"Traceback:\\n  "
     "x\\nZeroDivisionError: division by zero\\n\",\"stdout_bytes\":0,\"stderr_bytes\":51,"
     "\"stdout_truncated\":false,\"stderr_truncated\":false,\"duration_ms\":9,\"container\":"
     "null,\"error\":{\"type\":\"ZeroDivisionError\",\"message\":\"division by zero\","
     "\"traceback\":\"Traceback:\\n  x\\nZeroDivisionError: division by "
     "zero\\n\"},\"stdout_uri\":null,\"stderr_uri\":null}"},
    {"traceback not in stderr", ST_ERROR, true, 1, "out\n", NULL, 4, 0, false, false, 2, NULL,
     "ValueError", "bad", "Traceback:\nValueError: bad",
     "out\n--- error ---\nTraceback:\nValueError: bad\n[status: error, exit code 1, 2 ms]",
     "{\"status\":\"error\",\"exit_code\":1,\"stdout\":\"out\\n\",\"stderr\":\"\","
     "\"stdout_bytes\":4,\"stderr_bytes\":0,\"stdout_truncated\":false,"
     "\"stderr_truncated\":false,\"duration_ms\":2,\"container\":null,\"error\":{\"type\":"
     "\"ValueError\",\"message\":\"bad\",\"traceback\":\"Traceback:\\nValueError: "
     "bad\"},\"stdout_uri\":null,\"stderr_uri\":null}"},
    {"oom without a type", ST_OOM, true, 137, NULL, NULL, 0, 0, false, false, 50, NULL, NULL,
     "the sandbox exceeded its memory limit and was killed", NULL,
     "--- error ---\nError: the sandbox exceeded its memory limit and was killed\n[status: "
     "oom, exit code 137, 50 ms]",
     "{\"status\":\"oom\",\"exit_code\":137,\"stdout\":\"\",\"stderr\":\"\","
     "\"stdout_bytes\":0,\"stderr_bytes\":0,\"stdout_truncated\":false,"
     "\"stderr_truncated\":false,\"duration_ms\":50,\"container\":null,\"error\":{\"type\":"
     "\"Error\",\"message\":\"the sandbox exceeded its memory limit and was "
     "killed\",\"traceback\":null},\"stdout_uri\":null,\"stderr_uri\":null}"},
    {"UTF-8 output cut at a character boundary", ST_OK, true, 0, "caf\xc3\xa9 \xe2\x82\xac", NULL,
     12, 0, true, false, 1, NULL, NULL, NULL, NULL,
     "caf\xc3\xa9 \xe2\x82\xac\n[... 3 bytes of stdout left out (12 in all). The rest is not kept "
     "...]\n[status: ok, exit code 0, 1 ms]",
     "{\"status\":\"ok\",\"exit_code\":0,\"stdout\":\"caf\xc3\xa9 \xe2\x82\xac\\n[... 3 bytes of "
     "stdout left out (12 in all). The rest is not kept ...]\\n\",\"stderr\":"
     "\"\",\"stdout_bytes\":12,\"stderr_bytes\":0,\"stdout_truncated\":true,"
     "\"stderr_truncated\":false,\"duration_ms\":1,\"container\":null,\"error\":null,"
     "\"stdout_uri\":null,\"stderr_uri\":null}"},
};

static void test_result_table(void)
{
        for (size_t i = 0; i < ARRAY_SIZE(result_cases); i++) {
                const struct result_case *tc = &result_cases[i];
                struct sandbox_result res = {
                    .status = tc->status,
                    .has_exit_code = tc->has_exit,
                    .exit_code = tc->exit_code,
                    .duration_ms = tc->ms,
                    .error_type = (char *)tc->etype,
                    .error_message = (char *)tc->emsg,
                    .error_traceback = (char *)tc->etb,
                    .container_id = (char *)tc->container,
                };
                set_output(&res.out, tc->out, tc->out_total, tc->out_trunc);
                set_output(&res.err, tc->err, tc->err_total, tc->err_trunc);
                json_t *r = result_of(&res, NULL);
                if (!ok(r != NULL, "%s: a result", tc->name)) {
                        free_result(&res);
                        continue;
                }
                is_str(text_of(r), tc->text, "%s: text content", tc->name);
                char *s = json_dumps(json_object_get(r, "structuredContent"), JSON_COMPACT);
                is_str(s, tc->structured, "%s: structuredContent", tc->name);
                free(s);
                ok(json_is_boolean(json_object_get(r, "isError")) &&
                       json_is_true(json_object_get(r, "isError")) == (tc->status != ST_OK),
                   "%s: isError is %s", tc->name, tc->status != ST_OK ? "true" : "false");
                is_int(json_object_size(r), 3, "%s: content, structuredContent, isError", tc->name);
                json_decref(r);
                free_result(&res);
        }

        /* Outputs are valid UTF-8 by construction (JSON frames, cut with
         * utf8_cut); bytes that are not cannot become a JSON string, and
         * tools_result says so with NULL rather than sending bad JSON. */
        struct sandbox_result res = {.status = ST_OK, .has_exit_code = true};
        set_output(&res.out, "\xff\xfe", 2, false);
        set_output(&res.err, NULL, 0, false);
        json_t *r = result_of(&res, NULL);
        ok(r == NULL, "invalid UTF-8 output gives NULL, never invalid JSON");
        json_decref(r);
        free_result(&res);

        /* The runtime forwards the exception's type name from user code
         * (clipped to 256 characters, so up to 1 KiB of UTF-8). With no
         * traceback it is printed into a 512-byte line with snprintf, which
         * can cut a character in half; the whole result is then lost. */
        char etype[700];
        size_t n = 0;
        etype[n++] = 'E'; /* two ASCII bytes put the 512-byte cut mid-character */
        etype[n++] = 'E';
        while (n + 2 < sizeof(etype) - 1) {
                memcpy(etype + n, "\xc3\xa9", 2);
                n += 2;
        }
        etype[n] = '\0';
        res = (struct sandbox_result){.status = ST_ERROR,
                                      .has_exit_code = true,
                                      .exit_code = 1,
                                      .error_type = etype,
                                      .error_message = "boom"};
        set_output(&res.out, "kept output\n", 12, false);
        set_output(&res.err, NULL, 0, false);
        r = result_of(&res, NULL);
        ok(r != NULL, "a long non-ASCII error type still gives a result");
        json_decref(r);
        free_result(&res);
}

static void test_error_result(void)
{
        json_t *r = tools_error_result("invalid_arguments", "InvalidArguments",
                                       "argument \"code\" is required and must be a string");
        if (!ok(r != NULL, "tools_error_result builds"))
                return;
        is_str(text_of(r),
               "InvalidArguments: argument \"code\" is required and must be a string\n[status: "
               "invalid_arguments]",
               "error result text");
        char *s = json_dumps(json_object_get(r, "structuredContent"), JSON_COMPACT);
        is_str(
            s,
            "{\"status\":\"invalid_arguments\",\"exit_code\":null,\"stdout\":\"\",\"stderr\":\"\","
            "\"stdout_bytes\":0,\"stderr_bytes\":0,\"stdout_truncated\":false,"
            "\"stderr_truncated\":false,\"duration_ms\":0,\"container\":null,\"error\":{"
            "\"type\":\"InvalidArguments\",\"message\":\"argument \\\"code\\\" is required and "
            "must be a string\"},\"stdout_uri\":null,\"stderr_uri\":null}",
            "error result structuredContent");
        free(s);
        ok(json_is_true(json_object_get(r, "isError")), "error result isError true");
        json_decref(r);

        /* Every field of the output schema is present in both shapes. */
        json_t *list = tools_list(NULL, NULL, NULL, true);
        json_t *props =
            json_object_get(json_object_get(json_array_get(list, 0), "outputSchema"), "properties");
        r = tools_error_result("busy", "Busy", "every sandbox slot is in use");
        json_t *sc = json_object_get(r, "structuredContent");
        const char *key;
        json_t *v;
        int extra = 0;
        json_object_foreach(sc, key, v)
        {
                if (!json_object_get(props, key)) {
                        diag("structuredContent has %s, not in the schema", key);
                        extra++;
                }
        }
        is_int(extra, 0, "error result fields are all in the output schema");
        is_int(json_object_size(sc) + 3, json_object_size(props),
               "... and all of them are there (but job_id, files and session, only in some)");
        json_decref(r);

        /* A call gone on as a job: status running, the output so far. */
        struct sandbox_result part = {.status = ST_OK, .has_exit_code = true, .exit_code = 0};
        buf_init(&part.out.data, 100);
        buf_append(&part.out.data, "step 1\n", 7);
        part.out.total = 7;
        buf_init(&part.err.data, 100);
        r = tools_running_result(&part, "job-7", 2001, &(struct result_view){.max_chars = 20000});
        sc = json_object_get(r, "structuredContent");
        is_str(json_string_value(json_object_get(sc, "status")), "running", "running: status");
        is_str(json_string_value(json_object_get(sc, "job_id")), "job-7", "running: job_id");
        ok(json_is_null(json_object_get(sc, "exit_code")), "running: no exit code yet");
        is_str(json_string_value(json_object_get(sc, "stdout")), "step 1\n",
               "running: the output so far");
        is_int(json_integer_value(json_object_get(sc, "duration_ms")), 2001, "running: elapsed");
        ok(json_is_false(json_object_get(r, "isError")), "running: not an error");
        extra = 0;
        json_object_foreach(sc, key, v) if (!json_object_get(props, key)) extra++;
        is_int(extra, 0, "running: every field is in the output schema");
        like(json_string_value(
                 json_object_get(json_array_get(json_object_get(r, "content"), 1), "text")),
             "job-7", "running: the text says which job and what to call");
        json_decref(r);
        buf_free(&part.out.data);
        buf_free(&part.err.data);
        json_decref(list);
}

/* `files`: paths normalised under /workspace, base64 decoded, freed. */
static void test_parse_files(void)
{
        struct config cfg;
        config_defaults(&cfg);
        json_t *args = json_loads(
            "{\"code\":\"x\",\"session\":\"s\",\"files\":["
            "{\"path\":\"data/in.csv\",\"content\":\"a,b\\n1,2\\n\"},"
            "{\"path\":\"/workspace/bin/x.bin\",\"content\":\"AAEC/w==\",\"encoding\":\"base64\"},"
            "{\"path\":\"empty\",\"content\":\"\"}]}",
            0, NULL);
        struct sandbox_request req = {0};
        struct err ebox = {0};
        char *msg = ebox.msg;
        is_int(tools_parse_call("run_python", args, &cfg, &images, &req, &ebox), 0,
               "three files parse (%s)", msg);
        is_str(req.session, "s", "the session name");
        ok(req.want_out, "run_python fetches /workspace/out");
        if (is_int((long long)req.n_files, 3, "three files")) {
                is_str(req.files[0].path, "/workspace/data/in.csv",
                       "a relative path, made absolute");
                is_mem(req.files[0].data, req.files[0].len, "a,b\n1,2\n", 8, "utf-8 content as is");
                is_str(req.files[1].path, "/workspace/bin/x.bin",
                       "an absolute path under /workspace");
                is_mem(req.files[1].data, req.files[1].len, "\x00\x01\x02\xff", 4,
                       "base64 content decoded");
                is_int((long long)req.files[2].len, 0, "an empty file");
        }
        tools_request_free(&req);
        ok(req.files == NULL && req.n_files == 0, "tools_request_free clears it");
        json_decref(args);

        /* Over file_max_bytes, and more than 64 files. */
        config_set(&cfg, "file_max_bytes", "1k", "test", NULL);
        char big[1100 + 64];
        memset(big, 'x', 1100);
        big[1100] = '\0';
        args =
            json_pack("{s:s, s:[{s:s, s:s}]}", "code", "x", "files", "path", "f", "content", big);
        is_int(tools_parse_call("run_python", args, &cfg, &images, &req, &ebox), -EINVAL,
               "a file over file_max_bytes is refused");
        like(msg, "file_max_bytes", "...naming the setting");
        json_decref(args);
        json_t *many = json_array();
        for (int i = 0; i < FILES_PER_CALL + 1; i++)
                json_array_append_new(many, json_pack("{s:s, s:s}", "path", "f", "content", ""));
        args = json_pack("{s:s, s:o}", "code", "x", "files", many);
        is_int(tools_parse_call("run_python", args, &cfg, &images, &req, &ebox), -EINVAL,
               "%d files are refused", FILES_PER_CALL + 1);
        json_decref(args);
        config_free(&cfg);
}

/* The result's text within max_chars whatever else it carries: short
 * output whole, long output cut, a long traceback and session note
 * counted too. */
static void test_budget(void)
{
        static const size_t maxes[] = {1000, 1200, 1500, 3000, 20000};
        char big[6000];
        memset(big, 'o', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        for (size_t i = 0; i < ARRAY_SIZE(maxes); i++) {
                struct sandbox_result res = {.status = ST_OK, .has_exit_code = true};
                set_output(&res.out, "hello\n", 6, false);
                set_output(&res.err, NULL, 0, false);
                struct result_view v = {.max_chars = maxes[i]};
                json_t *r = tools_result(&res, &v);
                like(text_of(r), "hello\n[status: ok", "max %zu: short output whole", maxes[i]);
                json_decref(r);
                free_result(&res);

                res = (struct sandbox_result){.status = ST_ERROR,
                                              .has_exit_code = true,
                                              .exit_code = 1,
                                              .error_type = "ValueError",
                                              .error_message = "bad",
                                              .error_traceback = big,
                                              .kept = false};
                set_output(&res.out, big, strlen(big), false);
                set_output(&res.err, big + 2000, strlen(big) - 2000, false);
                v.session = "s";
                r = tools_result(&res, &v);
                size_t n = strlen(text_of(r));
                ok(n <= maxes[i], "max %zu: long output, traceback and note: %zu characters",
                   maxes[i], n);
                like(text_of(r), "[status: error, exit code 1", "...the status line stays");
                json_decref(r);
                free_result(&res);
        }
}

/* Files from /workspace/out: images as image content, text as a text
 * resource, bytes as a blob, and the ones not returned say why. */
static void test_out_files(void)
{
        struct sandbox_result res = {
            .status = ST_OK, .has_exit_code = true, .kept = true, .memory_bytes = 12345};
        buf_init(&res.out.data, 100);
        buf_init(&res.err.data, 100);
        res.out_files = json_loads(
            "[{\"path\":\"out/p.png\",\"size\":3,\"mime_type\":\"image/png\",\"data\":\"AAEC\"},"
            "{\"path\":\"out/d.csv\",\"size\":4,\"mime_type\":\"text/csv\",\"data\":\"YSxiCg==\"},"
            "{\"path\":\"out/x.bin\",\"size\":2,\"data\":\"AAE=\"},"
            "{\"path\":\"out/big.dat\",\"size\":100,\"note\":\"not returned: too big\"}]",
            0, NULL);
        json_t *r = result_of(&res, "s1");
        json_t *content = json_object_get(r, "content");
        is_int((long long)json_array_size(content), 4, "text, image, two resources");
        json_t *img = json_array_get(content, 1);
        is_str(json_string_value(json_object_get(img, "type")), "image",
               "the PNG is image content");
        is_str(json_string_value(json_object_get(img, "mimeType")), "image/png", "...image/png");
        is_str(json_string_value(json_object_get(img, "data")), "AAEC", "...its base64 data");
        json_t *csv = json_object_get(json_array_get(content, 2), "resource");
        is_str(json_string_value(json_object_get(json_array_get(content, 2), "type")), "resource",
               "the CSV is an embedded resource");
        is_str(json_string_value(json_object_get(csv, "uri")), "corral://session/s1/out/d.csv",
               "...with a URI resources/read reads back");
        is_str(json_string_value(json_object_get(csv, "text")), "a,b\n", "...as text");
        json_t *bin = json_object_get(json_array_get(content, 3), "resource");
        is_str(json_string_value(json_object_get(bin, "blob")), "AAE=", "bytes are a blob");
        is_str(json_string_value(json_object_get(bin, "mimeType")), "application/octet-stream",
               "...application/octet-stream without a known type");
        json_t *files = json_object_get(json_object_get(r, "structuredContent"), "files");
        is_int((long long)json_array_size(files), 4, "structuredContent.files lists all four");
        ok(json_is_true(json_object_get(json_array_get(files, 0), "returned")) &&
               json_is_false(json_object_get(json_array_get(files, 3), "returned")),
           "returned: true for those returned, false for the big one");
        is_str(json_string_value(json_object_get(json_array_get(files, 3), "note")),
               "not returned: too big", "the big one says why");
        const char *text = json_string_value(json_object_get(json_array_get(content, 0), "text"));
        like(text, "[file out/p.png: 3 bytes, returned as an image]", "the text lists the image");
        like(text, "[file out/big.dat: 100 bytes, not returned: too big]",
             "...and the one left out");
        json_t *sess = json_object_get(json_object_get(r, "structuredContent"), "session");
        is_str(json_string_value(json_object_get(sess, "name")), "s1", "session name");
        is_str(json_string_value(json_object_get(sess, "state")), "kept", "session kept");
        is_int(json_integer_value(json_object_get(sess, "memory_bytes")), 12345,
               "session memory_bytes");
        json_decref(r);

        static const struct {
                bool kept, lost, restarted;
                const char *state, *note;
        } states[] = {{false, false, false, "ended", "ended: its sandbox is gone"},
                      {true, true, false, "reset", "its variables are gone"},
                      {true, false, true, "restarted", "ran in a new Python interpreter"}};
        for (size_t i = 0; i < ARRAY_SIZE(states); i++) {
                res.kept = states[i].kept;
                res.state_lost = states[i].lost;
                res.restarted = states[i].restarted;
                r = result_of(&res, "s1");
                sess = json_object_get(json_object_get(r, "structuredContent"), "session");
                is_str(json_string_value(json_object_get(sess, "state")), states[i].state,
                       "session state %s", states[i].state);
                like(json_string_value(
                         json_object_get(json_array_get(json_object_get(r, "content"), 0), "text")),
                     states[i].note, "...and the text says so");
                json_decref(r);
        }
        r = result_of(&res, NULL);
        ok(!json_object_get(json_object_get(r, "structuredContent"), "session"),
           "no session: no session field");
        json_decref(r);

        /* A client that takes resource links: text past half of max_chars
         * and bytes are links it reads back; the file lines stop at a
         * quarter of it. */
        json_decref(res.out_files);
        struct buf b64;
        char long_csv[1200];
        memset(long_csv, 'a', sizeof(long_csv));
        buf_init(&b64, 4096);
        base64_encode(&b64, long_csv, sizeof(long_csv));
        res.out_files = json_pack(
            "[{s:s, s:i, s:s, s:s}, {s:s, s:i, s:s}, {s:s, s:i, s:s}, {s:s, s:i, s:s}]", "path",
            "out/d.csv", "size", 1200, "mime_type", "text/csv", "data", buf_str(&b64), "path",
            "out/x.bin", "size", 2, "data", "AAE=", "path", "out/y.bin", "size", 2, "data",
            "AAE=", "path", "out/z.bin", "size", 2, "data", "AAE=");
        buf_free(&b64);
        struct result_view lv = {.session = "s1", .max_chars = 600, .links = true};
        r = tools_result(&res, &lv);
        content = json_object_get(r, "content");
        is_int((long long)json_array_size(content), 5, "text, four links");
        for (size_t i = 1; i < 5; i++)
                is_str(json_string_value(json_object_get(json_array_get(content, i), "type")),
                       "resource_link", "item %zu is a link", i);
        json_t *link = json_array_get(content, 1);
        is_str(json_string_value(json_object_get(link, "uri")), "corral://session/s1/out/d.csv",
               "a link names the session's file");
        is_int(json_integer_value(json_object_get(link, "size")), 1200, "...and its size");
        files = json_object_get(json_object_get(r, "structuredContent"), "files");
        ok(json_is_false(json_object_get(json_array_get(files, 0), "returned")) &&
               strcmp(json_string_value(json_object_get(json_array_get(files, 0), "uri")),
                      "corral://session/s1/out/d.csv") == 0,
           "structuredContent: not returned, with its uri");
        text = json_string_value(json_object_get(json_array_get(content, 0), "text"));
        like(text,
             "[file out/d.csv: 1200 bytes, linked: resources/read corral://session/s1/out/d.csv]",
             "the text says where it is");
        like(text, "more files: structuredContent.files lists them]",
             "past a quarter of max_chars, the lines stop with a count");
        ok(strlen(text) <= 600, "the text stays within max_chars (%zu)", strlen(text));
        json_decref(r);
        json_decref(res.out_files);
        buf_free(&res.out.data);
        buf_free(&res.err.data);
}

/* The names of out files come from the code: the text shows them escaped,
 * the listing keeps them exact. */
static void test_out_file_names(void)
{
        struct sandbox_result res = {.status = ST_OK, .has_exit_code = true};
        buf_init(&res.out.data, 100);
        buf_init(&res.err.data, 100);
        res.out_files = json_loads("[{\"path\":\"out/a\\u009b2J\\u202eb\\\\c.txt\",\"size\":1,"
                                   "\"note\":\"too big\"}]",
                                   0, NULL);
        json_t *r = result_of(&res, NULL);
        const char *text = json_string_value(
            json_object_get(json_array_get(json_object_get(r, "content"), 0), "text"));
        like(text, "[file out/a\\u009b2J\\u202eb\\\\c.txt: 1 bytes, not returned",
             "an out file's C1 and bidi controls and backslash are escaped in the text");
        json_t *f =
            json_array_get(json_object_get(json_object_get(r, "structuredContent"), "files"), 0);
        is_str(json_string_value(json_object_get(f, "path")),
               "out/a\xc2\x9b"
               "2J\xe2\x80\xae"
               "b\\c.txt",
               "...and kept exact in structuredContent");
        json_decref(r);
        json_decref(res.out_files);
        buf_free(&res.out.data);
        buf_free(&res.err.data);
}

/* The host's line limit lets a write_file of file_max_bytes in base64 in. */
static void test_line_max(void)
{
        struct config cfg;
        config_defaults(&cfg);
        size_t b64 = (cfg.file_max_bytes + 2) / 3 * 4;
        size_t max = tools_line_max(&cfg);
        ok(max > b64 + 8192 && max >= cfg.max_frame,
           "defaults: %zu bytes, above max_frame and the %zu of a 16 MiB file in base64", max, b64);
        ok(max <= b64 + (128 << 10), "...with bounded room for the request around it");
        config_set(&cfg, "max_frame", "64m", "test", NULL);
        is_int(tools_line_max(&cfg), 64 << 20, "a larger max_frame wins");
        config_set(&cfg, "max_frame", "64k", "test", NULL);
        config_set(&cfg, "file_max_bytes", "3k", "test", NULL);
        ok(tools_line_max(&cfg) >= 4096 + 1024 && tools_line_max(&cfg) < 200 << 10,
           "small settings: small limit (%zu)", tools_line_max(&cfg));
        config_free(&cfg);
}

int main(void)
{
        test_list();
        test_list_size();
        test_out_file_names();
        test_line_max();
        test_parse_files();
        test_out_files();
        test_budget();
        test_status_names();
        test_parse_call();
        test_parse_image();
        test_list_images();
        test_list_hints();
        test_result_table();
        test_error_result();
        return done_testing();
}
