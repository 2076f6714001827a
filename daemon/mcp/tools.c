#include "mcp/tools.h"

#include "bridge/bridge.h"
#include "core/buf.h"
#include "core/util.h"
#include "mcp/internal.h"
#include "sandbox/files.h"
#include "sandbox/images.h"
#include "runtime/protocol.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* tools/list is read in every conversation, so the descriptions say what
 * a model needs to call right; the rest is in the guide (GUIDE_URI,
 * daemon/mcp/guide.md), which they name. */
#define GUIDE_NOTE " Guide: resource " GUIDE_URI "."

/* The fields of a run's result; what the nested ones hold (error, files,
 * session) is in the README, not in every tools/list. */
static json_t *output_schema(void)
{
        json_t *schema = json_pack(
            "{s:s, s:{"
            "s:{s:s, s:[s,s,s,s,s,s,s,s,s,s]},"
            "s:{s:[s,s]}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s},"
            "s:{s:s}, s:{s:[s,s]}, s:{s:[s,s]}, s:{s:s}, s:{s:s}, s:{s:s}"
            "}, s:[s,s,s,s,s]}",
            "type", "object", "properties", "status", "type", "string", "enum", "ok", "error",
            "timeout", "oom", "cancelled", "engine_error", "busy", "invalid_arguments", "running",
            "session_lost", "exit_code", "type", "integer", "null", "stdout", "type", "string",
            "stderr", "type", "string", "stdout_bytes", "type", "integer", "stderr_bytes", "type",
            "integer", "stdout_truncated", "type", "boolean", "stderr_truncated", "type", "boolean",
            "duration_ms", "type", "integer", "container", "type", "string", "null", "error",
            "type", "object", "null", "job_id", "type", "string", "files", "type", "array",
            "session", "type", "object", "required", "status", "exit_code", "stdout", "stderr",
            "duration_ms");
        /* Where a cut stream's whole text is kept (read_file, resources/read). */
        json_t *props = json_object_get(schema, "properties");
        json_object_set_new(props, "stdout_uri", json_pack("{s:[s,s]}", "type", "string", "null"));
        json_object_set_new(props, "stderr_uri", json_pack("{s:[s,s]}", "type", "string", "null"));
        return schema;
}

/* A tool's annotations as MCP reads them, each hint only where it differs
 * from MCP's default (readOnly false, destructive true, idempotent false,
 * openWorld true); destructive and idempotent mean something only for a
 * tool that is not read-only. */
static json_t *annotations(bool readonly, bool destructive, bool idempotent, bool open_world)
{
        json_t *a = json_object();
        if (readonly)
                json_object_set_new(a, "readOnlyHint", json_true());
        if (!readonly && !destructive)
                json_object_set_new(a, "destructiveHint", json_false());
        if (!readonly && idempotent)
                json_object_set_new(a, "idempotentHint", json_true());
        if (!open_world)
                json_object_set_new(a, "openWorldHint", json_false());
        return a;
}

/* A property's schema with its description, or without when `desc` is
 * NULL (run_shell's arguments are described once, in run_python's). */
static json_t *described(json_t *schema, const char *desc)
{
        if (schema && desc)
                json_object_set_new(schema, "description", json_string(desc));
        return schema;
}

/* run_python or run_shell, with the code argument `arg` and timeout_s.
 * Input schemas leave out what corral checks itself and says in its
 * answer (unknown arguments, lengths and counts): tools/list is paid for
 * in every conversation. */
static json_t *tool(const char *name, const char *title, const char *desc, const char *arg,
                    bool open_world, bool describe_args)
{
        json_t *props =
            json_pack("{s:{s:s}, s:o}", arg, "type", "string", "timeout_s",
                      described(json_pack("{s:s, s:f}", "type", "number", "exclusiveMinimum", 0.0),
                                describe_args ? "Time limit, default 30." : NULL));
        return json_pack("{s:s, s:s, s:s, s:{s:s, s:o, s:[s]}, s:o, s:o}", "name", name, "title",
                         title, "description", desc, "inputSchema", "type", "object", "properties",
                         props, "required", arg, "outputSchema", output_schema(), "annotations",
                         annotations(false, false, false, open_world));
}

/* An image's packages, "numpy 1.24.2, pandas 1.5.3", with their versions
 * or as names alone ("numpy, pandas"). */
static void packages_text(const char *packages, bool versions, struct buf *b)
{
        if (versions) {
                buf_append_some(b, packages, strlen(packages));
                return;
        }
        for (const char *p = packages; *p;) {
                size_t item = strcspn(p, ","), name = strcspn(p, " ,");
                buf_append_some(b, p, name < item ? name : item);
                p += item;
                if (*p == ',') {
                        buf_append_some(b, ", ", 2);
                        p += strspn(p, ", ");
                }
        }
}

void tools_environment_text(const struct sandbox_images *images, json_t *mounts, bool versions,
                            struct buf *b)
{
        /* The default first, as `image` lists them. */
        size_t k = 0;
        for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; images && i < images->n; i++) {
                        const struct sandbox_image *x = &images->v[i];
                        if (x->is_default != (pass == 0))
                                continue;
                        const char *name = x->short_name ? x->short_name : x->name;
                        const char *sep = k++ ? "; " : " Images: ";
                        buf_append_some(b, sep, strlen(sep));
                        buf_append_some(b, name, strlen(name));
                        if (x->packages && *x->packages) {
                                buf_append_some(b, " (", 2);
                                packages_text(x->packages, versions, b);
                                buf_append_some(b, ")", 1);
                        }
                }
        if (k)
                buf_append_some(b, ".", 1);
        size_t i;
        json_t *m;
        json_array_foreach(mounts, i, m)
        {
                const char *target = json_string_value(json_object_get(m, "Target"));
                const char *sep = i ? ", " : " Read-only host data: ";
                buf_append_some(b, sep, strlen(sep));
                buf_append_some(b, target, strlen(target));
                if (i + 1 == json_array_size(mounts))
                        buf_append_some(b, ".", 1);
        }
}

static json_t *session_prop(void);

/* run_python and run_shell: a call that outlives sync_wait_s becomes a job;
 * `session` keeps the sandbox for later calls; `files` go in first; `image`
 * picks one of those corral offers. */
static json_t *with_sync_wait(json_t *t, const struct sandbox_images *images, json_t *mounts,
                              bool first)
{
        json_t *props = json_object_get(json_object_get(t, "inputSchema"), "properties");
        struct buf env;
        buf_init(&env, 16 << 10);
        if (first)
                tools_environment_text(images, mounts, false, &env);
        if (env.len) {
                struct buf d;
                buf_init(&d, 32 << 10);
                const char *old = json_string_value(json_object_get(t, "description"));
                buf_append_some(&d, old, strlen(old));
                buf_append_some(&d, env.data, env.len);
                json_object_set_new(t, "description", json_string(buf_str(&d)));
                buf_free(&d);
        }
        buf_free(&env);
        json_t *choices = images ? sandbox_images_choices(images) : NULL;
        if (json_array_size(choices) > 1)
                json_object_set_new(
                    props, "image",
                    described(json_pack("{s:s, s:o}", "type", "string", "enum", choices),
                              first ? "A session keeps its own." : NULL));
        else
                json_decref(choices);
        json_object_set_new(
            props, "session",
            described(session_prop(),
                      first ? "Keep the sandbox under this name for later calls." : NULL));
        json_object_set_new(
            props, "files",
            described(json_pack("{s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s, s:[s,s]}}, s:[s,s]}}",
                                "type", "array", "items", "type", "object", "properties", "path",
                                "type", "string", "content", "type", "string", "encoding", "type",
                                "string", "enum", "utf-8", "base64", "required", "path", "content"),
                      first ? "Written under /workspace first." : NULL));
        json_object_set_new(
            props, "network",
            described(json_pack("{s:s, s:{s:s}}", "type", "array", "items", "type", "string"),
                      first ? "Hosts to reach via corral's proxy (pypi.org, *.x.org:8443); the "
                              "policy decides. pip works."
                            : NULL));
        json_object_set_new(props, "sync_wait_s",
                            described(json_pack("{s:s, s:f}", "type", "number", "minimum", 0.0),
                                      first ? "Default 25; a longer run goes on as a job." : NULL));
        json_object_set_new(
            props, "result_max_chars",
            described(json_pack("{s:s}", "type", "integer"),
                      first ? "Default 20000; longer output shows its ends." : NULL));
        return t;
}

/* A tool that runs no code. Its name reads as what it does, so it has no
 * title; no outputSchema either: {"type": "object"} would tell a host
 * nothing that structuredContent does not. */
static json_t *annotated_tool(const char *name, const char *desc, json_t *properties,
                              json_t *required, bool readonly, bool destructive, bool idempotent)
{
        json_t *t = json_pack("{s:s, s:s, s:{s:s, s:o}, s:o}", "name", name, "description", desc,
                              "inputSchema", "type", "object", "properties", properties,
                              "annotations", annotations(readonly, destructive, idempotent, false));
        /* An empty "required" says nothing: left out. */
        if (t && json_array_size(required))
                json_object_set(json_object_get(t, "inputSchema"), "required", required);
        json_decref(required);
        return t;
}

/* A job tool: job_id when `args`, and what it changes. */
static json_t *job_tool(const char *name, const char *desc, bool args, bool readonly)
{
        json_t *props = args ? json_pack("{s:{s:s}}", "job_id", "type", "string") : json_object();
        return annotated_tool(name, desc, props, args ? json_pack("[s]", "job_id") : json_array(),
                              readonly, !readonly, true);
}

/* A session's name (its length corral checks). */
static json_t *session_prop(void)
{
        return json_pack("{s:s, s:s}", "type", "string", "pattern", "^[A-Za-z0-9_.-]+$");
}

/* A list of MCP server names, as `servers` and `session_servers` take. */
static json_t *server_names_schema(const char *description)
{
        return json_pack("{s:s, s:{s:s}, s:s}", "type", "array", "items", "type", "string",
                         "description", description);
}

static json_t *run_python_tool(const char *name, const char *servers, bool open_world)
{
        char desc[2048];
        snprintf(
            desc, sizeof(desc),
            "Run Python 3 in a fresh sandbox: no network but `network`, writable /tmp, /workspace "
            "only, time and memory limits. print() results; top-level await works; files "
            "written to /workspace/out/ are returned. With `servers`, "
            "mcp_<server>.<tool>(**args) calls an MCP tool (.text, .structured; errors "
            "raise corral.McpError subclasses). Servers: %s." GUIDE_NOTE,
            servers && *servers ? servers : "none");
        json_t *t = tool(name, "Run Python in a sandbox", desc, "code", open_world, true);
        json_t *props = json_object_get(json_object_get(t, "inputSchema"), "properties");
        json_object_set_new(props, "servers",
                            server_names_schema("MCP servers the code may call."));
        /* Code a session ran before can act in its later calls: a server
         * granted to it is granted to that code too, so adding one is said
         * in so many words (README, Sessions). */
        json_object_set_new(props, "session_servers",
                            server_names_schema("With session: servers to add, for its earlier "
                                                "code too."));
        return t;
}

/* ---- each tool's tools/list entry, but for execution (from the table) */

static json_t *describe_run_python(const char *name, const struct tools_context *x)
{
        /* Code that may call the user's MCP servers reaches past the
         * sandbox: the hint says so when there are any. */
        return with_sync_wait(run_python_tool(name, x->servers, x->servers && x->servers[0]),
                              x->images, x->mounts, true);
}

static json_t *describe_run_shell(const char *name, const struct tools_context *x)
{
        /* The images are described once, in run_python's. */
        return with_sync_wait(tool(name, "Run shell in a sandbox",
                                   "Run a /bin/sh -c command in a sandbox as run_python does, with "
                                   "the same arguments." GUIDE_NOTE,
                                   "command", false, false),
                              x->images, NULL, false);
}

static json_t *describe_sandbox_status(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(name, "Warm pool, calls, memory and CPU figures of this corral.",
                              json_object(), json_array(), true, false, true);
}

static json_t *describe_list_servers(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(name,
                              "MCP servers run_python code may call (name them in `servers`).",
                              json_object(), json_array(), true, false, true);
}

static json_t *describe_search_tools(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(
            name,
            "Find MCP servers' tools by words, with their input schemas, for run_python code.",
            json_pack("{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}}", "query", "type", "string",
                      "description", "Words that must all match; empty: all.", "server", "type",
                      "string", "description", "Only this server.", "limit", "type", "integer",
                      "description", "Default 20."),
            json_pack("[s]", "query"), true, false, true);
}

static json_t *describe_job_status(const char *name, const struct tools_context *x)
{
        (void)x;
        return job_tool(name, "Whether a job runs, and its newest output.", true, true);
}

static json_t *describe_job_result(const char *name, const struct tools_context *x)
{
        (void)x;
        json_t *t = job_tool(name,
                             "A job's result, as run_python's, once ended (else status "
                             "\"running\").",
                             true, true);
        json_object_set_new(json_object_get(json_object_get(t, "inputSchema"), "properties"),
                            "wait_s",
                            json_pack("{s:s, s:s}", "type", "number", "description",
                                      "Seconds to wait for the end (default 0)."));
        return t;
}

static json_t *describe_job_cancel(const char *name, const struct tools_context *x)
{
        (void)x;
        return job_tool(name, "Kill a job's sandbox (status \"cancelled\").", true, false);
}

static json_t *describe_job_list(const char *name, const struct tools_context *x)
{
        (void)x;
        return job_tool(name, "Running and kept jobs.", false, true);
}

static json_t *describe_session_list(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(name, "Open sessions (state, servers, age, memory) and their limits.",
                              json_object(), json_array(), true, false, true);
}

static json_t *describe_session_close(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(name, "Close a session, removing its sandbox.",
                              json_pack("{s:o}", "session", session_prop()),
                              json_pack("[s]", "session"), false, true, true);
}

static json_t *describe_session_save(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(
            name, "Save a session to disk; a call resumes it (keep_running: a checkpoint).",
            json_pack("{s:o, s:{s:s}}", "session", session_prop(), "keep_running", "type",
                      "boolean"),
            json_pack("[s]", "session"), false, false, true);
}

static json_t *describe_session_fork(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(
            name, "A new session from another's saved state.",
            json_pack("{s:o, s:o}", "session", session_prop(), "new_session", session_prop()),
            json_pack("[s,s]", "session", "new_session"), false, false, false);
}

static json_t *describe_write_file(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(
            name, "Write a file under a session's /workspace (opening the session if needed).",
            json_pack("{s:o, s:{s:s}, s:{s:s}, s:{s:s, s:[s,s], s:s}}", "session", session_prop(),
                      "path", "type", "string", "content", "type", "string", "encoding", "type",
                      "string", "enum", "utf-8", "base64", "description", "Default utf-8."),
            json_pack("[s,s,s]", "session", "path", "content"), false, true, true);
}

static json_t *describe_read_file(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(
            name,
            "Read a file under a session's /workspace: text, images as images; a long "
            "one in pieces (offset, limit; the answer's next_offset). Without session: "
            "a run's whole output, the corral://run/ path its result names.",
            json_pack("{s:o, s:{s:s}, s:{s:s}, s:{s:s, s:s}}", "session", session_prop(), "path",
                      "type", "string", "offset", "type", "integer", "limit", "type", "integer",
                      "description", "Default 1 MiB; for run output, 20000."),
            json_pack("[s]", "path"), true, false, true);
}

static json_t *describe_list_files(const char *name, const struct tools_context *x)
{
        (void)x;
        return annotated_tool(
            name, "List a directory under a session's /workspace (default: /workspace).",
            json_pack("{s:o, s:{s:s}, s:{s:s}, s:{s:s}}", "session", session_prop(), "path", "type",
                      "string", "recursive", "type", "boolean", "limit", "type", "integer"),
            json_pack("[s]", "session"), true, false, true);
}

/* ---- the one table: tools/list in this order, tools/call by name */

static const struct mcp_tool tools[] = {
    {"run_python", describe_run_python, tool_run, true},
    {"run_shell", describe_run_shell, tool_run, true},
    {"sandbox_status", describe_sandbox_status, tool_sandbox_status, false},
    {"list_servers", describe_list_servers, tool_list_servers, false},
    {"search_tools", describe_search_tools, tool_search_tools, false},
    {"job_status", describe_job_status, tool_job_status, false},
    {"job_result", describe_job_result, tool_job_result, false},
    {"job_cancel", describe_job_cancel, tool_job_cancel, false},
    {"job_list", describe_job_list, tool_job_list, false},
    {"session_list", describe_session_list, tool_session_list, false},
    {"session_close", describe_session_close, tool_session_close, false},
    {"write_file", describe_write_file, tool_write_file, false},
    {"read_file", describe_read_file, tool_read_file, false},
    {"list_files", describe_list_files, tool_list_files, false},
    {"session_save", describe_session_save, tool_session_save, false},
    {"session_fork", describe_session_fork, tool_session_fork, false},
};

const struct mcp_tool *tools_find(const char *name)
{
        for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
                if (strcmp(tools[i].name, name) == 0)
                        return &tools[i];
        return NULL;
}

void tools_names(bool tasks_only, char *out, size_t size)
{
        size_t n = 0, k = 0, at = 0;
        for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
                n += !tasks_only || tools[i].task;
        out[0] = '\0';
        for (size_t i = 0; i < ARRAY_SIZE(tools) && at < size; i++) {
                if (tasks_only && !tools[i].task)
                        continue;
                const char *sep = k == 0 ? "" : k + 1 == n ? " and " : ", ";
                int w = snprintf(out + at, size - at, "%s%s", sep, tools[i].name);
                at += w > 0 ? (size_t)w : 0;
                k++;
        }
}

void tools_unknown(const char *name, char *msg, size_t msg_size)
{
        char names[400];
        tools_names(false, names, sizeof(names));
        snprintf(msg, msg_size, "unknown tool \"%.100s\" (corral offers %s)", name, names);
}

json_t *tools_list(const char *servers, const struct sandbox_images *images, json_t *mounts,
                   bool tasks)
{
        const struct tools_context x = {.servers = servers, .images = images, .mounts = mounts};
        json_t *list = json_array();
        for (size_t i = 0; list && i < ARRAY_SIZE(tools); i++) {
                json_t *t = tools[i].describe(tools[i].name, &x);
                /* MCP tasks (2025-11-25): a host may run these as tasks. */
                if (t && tasks && tools[i].task)
                        json_object_set_new(t, "execution",
                                            json_pack("{s:s}", "taskSupport", "optional"));
                if (!t || json_array_append_new(list, t) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

json_t *tools_text_result(json_t *structured, const char *text)
{
        return json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text", text,
                         "structuredContent", structured, "isError", 0);
}

json_t *tools_status_result(json_t *status)
{
        char *text = json_dumps(status, JSON_INDENT(2) | JSON_SORT_KEYS);
        json_t *r = json_pack("{s:[{s:s, s:s}], s:O, s:b}", "content", "type", "text", "text",
                              text ? text : "{}", "structuredContent", status, "isError", 0);
        free(text);
        json_decref(status);
        return r;
}

/* `servers` (may be NULL) then the names of `more` it lacks, as a new
 * array: what a call with session_servers may use. Only strings are
 * compared; the result is checked as a whole (bridge_check_servers). */
static int union_names(json_t *servers, json_t *more, json_t **ret)
{
        json_t *all = servers ? json_copy(servers) : json_array();
        size_t i, j;
        json_t *v, *w;
        json_array_foreach(more, i, v)
        {
                bool have = false;
                json_array_foreach(all, j, w) have = have || json_equal(v, w);
                if (all && !have && json_array_append(all, v) < 0) {
                        json_decref(all);
                        all = NULL;
                }
        }
        if (!all)
                return -ENOMEM;
        *ret = all;
        return 0;
}

static int parse_call(const char *name, json_t *args, const struct config *cfg,
                      const struct sandbox_images *images, struct sandbox_request *req,
                      struct err *e);

int tools_parse_call(const char *name, json_t *args, const struct config *cfg,
                     const struct sandbox_images *images, struct sandbox_request *req,
                     struct err *e)
{
        req->files = NULL;
        req->n_files = 0;
        req->servers = NULL;
        req->session_servers = NULL;
        req->network = NULL;
        int r = parse_call(name, args, cfg, images, req, e);
        /* Messages quote names from the host cut at a byte limit. */
        if (r < 0) {
                utf8_scrub(e->msg);
                tools_request_free(req);
        }
        return r;
}

void tools_request_free(struct sandbox_request *req)
{
        json_decref(req->servers);
        req->servers = NULL;
        req->session_servers = NULL;
        req->network = NULL;
        for (size_t i = 0; i < req->n_files; i++) {
                free((char *)req->files[i].path);
                free((char *)req->files[i].data);
        }
        free((struct sandbox_file *)req->files);
        req->files = NULL;
        req->n_files = 0;
}

/* Room for the request around write_file's content: jsonrpc, id, method,
 * the session's name and the path (even with every byte escaped as \uXXXX),
 * encoding, _meta. */
#define LINE_ROOM (64 << 10)

/* A cut stream's marker line, at most. */
#define MARKER_ROOM 400

size_t tools_line_max(const struct config *cfg)
{
        unsigned long long b64 = (cfg->file_max_bytes + 2) / 3 * 4;
        unsigned long long want = b64 + LINE_ROOM;
        return (size_t)(want > cfg->max_frame ? want : cfg->max_frame);
}

int tools_file_content(json_t *content, json_t *encoding, size_t max, struct buf *ret,
                       struct err *e)
{
        const char *enc = encoding ? json_string_value(encoding) : "utf-8";
        if (!json_is_string(content)) {
                return err_set(e, ERR_INVALID, -EINVAL, "\"content\" must be a string");
        }
        if (!enc || (strcmp(enc, "utf-8") != 0 && strcmp(enc, "base64") != 0)) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "\"encoding\" must be \"utf-8\" or \"base64\"");
        }
        buf_init(ret, max);
        const char *p = json_string_value(content);
        size_t n = json_string_length(content);
        int r = strcmp(enc, "base64") == 0 ? base64_decode(ret, p, n) : buf_append(ret, p, n);
        if (r == -ENOBUFS) {
                buf_free(ret);
                return err_set(e, ERR_INVALID, -EFBIG,
                               "the content is over %zu bytes, the limit of a file moved in or "
                               "out (file_max_bytes)",
                               max);
        }
        if (r < 0) {
                buf_free(ret);
                return err_set(e, ERR_INVALID, -EINVAL, "\"content\" is not valid base64");
        }
        return 0;
}

/* `files`: [{path, content, encoding?}], decoded into req->files. */
static int parse_files(json_t *files, const struct config *cfg, struct sandbox_request *req,
                       struct err *e)
{
        if (!json_is_array(files) || json_array_size(files) > FILES_PER_CALL) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "argument \"files\" must be an array of at most %d {path, content, "
                               "encoding} objects",
                               FILES_PER_CALL);
        }
        struct sandbox_file *out = calloc(json_array_size(files) + 1, sizeof(*out));
        if (!out)
                return -ENOMEM;
        req->files = out;
        unsigned long long total = 0;
        size_t i;
        json_t *f;
        json_array_foreach(files, i, f)
        {
                char path[FILES_PATH_MAX + 64];
                struct err why = {0};
                const char *key;
                json_t *v;
                json_object_foreach(f, key, v)
                {
                        if (strcmp(key, "path") && strcmp(key, "content") &&
                            strcmp(key, "encoding")) {
                                return err_set(e, ERR_INVALID, -EINVAL,
                                               "files[%zu]: unknown key \"%.60s\" (path, content, "
                                               "encoding)",
                                               i, key);
                        }
                }
                const char *p = json_string_value(json_object_get(f, "path"));
                if (!json_is_object(f) || !p) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "files[%zu] needs a \"path\" string", i);
                }
                if (files_path(p, false, path, sizeof(path), &why) < 0)
                        return err_set(e, ERR_INVALID, -EINVAL, "files[%zu]: %s", i, why.msg);
                struct buf data;
                if (tools_file_content(json_object_get(f, "content"),
                                       json_object_get(f, "encoding"), cfg->file_max_bytes, &data,
                                       &why) < 0)
                        return err_set(e, ERR_INVALID, -EINVAL, "files[%zu] (%s): %s", i, p,
                                       why.msg);
                total += data.len;
                out[i].path = strdup(path);
                out[i].data = data.data ? data.data : strdup("");
                out[i].len = data.len;
                req->n_files = i + 1;
                if (!out[i].path || !out[i].data)
                        return -ENOMEM;
                if (total > cfg->max_frame) {
                        return err_set(
                            e, ERR_INVALID, -EINVAL,
                            "\"files\" hold over %llu bytes in all (max_frame): write large "
                            "files one by one with write_file",
                            cfg->max_frame);
                }
        }
        return 0;
}

/* The images a call may ask for, for a message: "data (the default),
 * python". */
static void image_choices(const struct sandbox_images *images, char *out, size_t size)
{
        json_t *names = images ? sandbox_images_choices(images) : NULL;
        size_t i, k = 0;
        json_t *v;
        out[0] = '\0';
        json_array_foreach(names, i, v)
        {
                int n = snprintf(out + k, size - k, "%s%s%s", i ? ", " : "", json_string_value(v),
                                 i ? "" : " (the default)");
                if (n < 0 || (size_t)n >= size - k)
                        break;
                k += (size_t)n;
        }
        json_decref(names);
}

/* `image`: one of `images`, by name or short name; req->image borrows the
 * catalogue's name. */
static int parse_image(json_t *image, const struct sandbox_images *images,
                       struct sandbox_request *req, struct err *e)
{
        const struct sandbox_image *x = json_is_string(image) && images
                                            ? sandbox_images_find(images, json_string_value(image))
                                            : NULL;
        if (!x) {
                char choices[600];
                image_choices(images, choices, sizeof(choices));
                return err_set(
                    e, ERR_INVALID, -EINVAL,
                    "argument \"image\" must name an image this corral offers: %s. Another "
                    "is built with `corral image build --profile NAME` and offered when the "
                    "`images` setting lists it",
                    choices[0] ? choices : "none");
        }
        req->image = x->name;
        return 0;
}

static int parse_call(const char *name, json_t *args, const struct config *cfg,
                      const struct sandbox_images *images, struct sandbox_request *req,
                      struct err *e)
{
        const char *code_key;
        if (strcmp(name, "run_python") == 0) {
                req->lang = LANG_PYTHON;
                code_key = "code";
        } else if (strcmp(name, "run_shell") == 0) {
                req->lang = LANG_SHELL;
                code_key = "command";
        } else {
                tools_unknown(name, e->msg, sizeof(e->msg));
                return -ENOENT;
        }
        if (args && !json_is_object(args)) {
                return err_set(e, ERR_INVALID, -EINVAL, "arguments must be an object");
        }
        const char *key;
        json_t *v;
        json_object_foreach(args, key, v)
        {
                if (strcmp(key, code_key) != 0 && strcmp(key, "timeout_s") != 0 &&
                    strcmp(key, "sync_wait_s") != 0 && strcmp(key, "session") != 0 &&
                    strcmp(key, "files") != 0 && strcmp(key, "image") != 0 &&
                    strcmp(key, "result_max_chars") != 0 && strcmp(key, "network") != 0 &&
                    ((strcmp(key, "servers") != 0 && strcmp(key, "session_servers") != 0) ||
                     req->lang != LANG_PYTHON)) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "unknown argument \"%.100s\" (%s takes %s, timeout_s, "
                                       "sync_wait_s, session, files, image, result_max_chars, "
                                       "network%s)",
                                       key, name, code_key,
                                       req->lang == LANG_PYTHON ? ", servers, session_servers"
                                                                : "");
                }
        }
        json_t *code = json_object_get(args, code_key);
        if (!json_is_string(code)) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "argument \"%s\" is required and must be a string", code_key);
        }
        /* The code travels in one frame; leave room for the envelope. */
        if (json_string_length(code) > cfg->max_frame / 2) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "argument \"%s\" is %zu bytes; the limit is %llu", code_key,
                               json_string_length(code), cfg->max_frame / 2);
        }
        if (strlen(json_string_value(code)) != json_string_length(code)) {
                return err_set(e, ERR_INVALID, -EINVAL, "argument \"%s\" contains a NUL character",
                               code_key);
        }
        req->code = json_string_value(code);
        req->timeout_s = cfg->timeout_s;
        req->result_max_chars = (size_t)cfg->result_max_chars;
        json_t *chars = json_object_get(args, "result_max_chars");
        if (chars) {
                json_int_t n = json_integer_value(chars);
                if (!json_is_integer(chars) || n < 1000 ||
                    (unsigned long long)n > cfg->output_limit) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "argument \"result_max_chars\" must be an integer from "
                                       "1000 to %llu (output_limit)",
                                       cfg->output_limit);
                }
                req->result_max_chars = (size_t)n;
        }
        req->servers = NULL;
        req->session_servers = NULL;
        json_t *servers = json_object_get(args, "servers");
        if (servers && !json_is_array(servers)) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "argument \"servers\" must be an array of server names");
        }
        json_t *widen = json_object_get(args, "session_servers");
        if (widen && !json_is_array(widen)) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "argument \"session_servers\" must be an array of server names");
        }
        if (widen && !json_object_get(args, "session")) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "argument \"session_servers\" adds servers to a session: give it "
                               "with \"session\" (a call without one takes \"servers\" only)");
        }
        /* The names are checked against the registry by the caller. */
        if (widen && json_array_size(widen) > 0) {
                int r = union_names(servers, widen, &req->servers);
                if (r < 0)
                        return err_set(e, ERR_INTERNAL, r, "out of memory");
                req->session_servers = widen;
        } else if (servers) {
                req->servers = json_incref(servers);
        }
        req->network = json_object_get(args, "network");
        if (req->network) {
                int r = bridge_check_network(req->network, e);
                if (r < 0)
                        return r;
        }
        json_t *t = json_object_get(args, "timeout_s");
        if (t) {
                double d = json_number_value(t);
                if (!json_is_number(t) || !isfinite(d) || d <= 0) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "argument \"timeout_s\" must be a positive number");
                }
                req->timeout_s = d < cfg->max_timeout_s ? d : cfg->max_timeout_s;
        }
        json_t *session = json_object_get(args, "session");
        req->session = NULL;
        if (session) {
                if (!json_is_string(session)) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "argument \"session\" must be a string (a name)");
                }
                int r = session_name_check(json_string_value(session), e);
                if (r < 0)
                        return r;
                req->session = json_string_value(session);
        }
        req->image = NULL;
        json_t *image = json_object_get(args, "image");
        if (image) {
                int r = parse_image(image, images, req, e);
                if (r < 0)
                        return r;
        }
        req->files = NULL;
        req->n_files = 0;
        req->want_out = true;
        json_t *files = json_object_get(args, "files");
        if (files) {
                int r = parse_files(files, cfg, req, e);
                if (r < 0)
                        return r;
        }
        req->sync_wait_s = cfg->sync_wait_s;
        json_t *w = json_object_get(args, "sync_wait_s");
        if (w) {
                double d = json_number_value(w);
                if (!json_is_number(w) || !isfinite(d) || d < 0) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "argument \"sync_wait_s\" must be a number >= 0 (seconds)");
                }
                req->sync_wait_s = d;
        }
        return 0;
}

static json_t *error_object(const char *type, const char *message, const char *traceback)
{
        if (!type && !message)
                return json_null();
        return json_pack("{s:s, s:s, s:s?}", "type", type ? type : "Error", "message",
                         message ? message : "", "traceback", traceback);
}

static void append_text(struct buf *t, const char *s)
{
        buf_append_some(t, s, strlen(s));
}

static json_t *result_json(const struct sandbox_result *res, const char *status,
                           const struct result_view *v, size_t room);

static bool text_mime(const char *mime)
{
        return mime && (strncmp(mime, "text/", 5) == 0 || strcmp(mime, "application/json") == 0 ||
                        strcmp(mime, "application/xml") == 0);
}

/* Appends p[0..n) to the result's first (text) content item. */
static void text_content_append(json_t *result, const char *p, size_t n)
{
        json_t *text =
            json_object_get(json_array_get(json_object_get(result, "content"), 0), "text");
        struct buf t;
        buf_init(&t, (size_t)-1 / 2);
        buf_append(&t, json_string_value(text), json_string_length(text));
        buf_append(&t, p, n);
        utf8_scrub((char *)buf_str(&t));
        json_string_setn(text, t.data, t.len);
        buf_free(&t);
}

/* The files a run wrote under /workspace/out: content items (images as
 * pictures, the rest as embedded resources), a listing in structured
 * content, and a line each in the text. */
/* Where a result's file can be read back (resources/read): a session's
 * as long as the session has it, a single-use run's as long as the run is
 * kept; else a file: URI that says where it was. */
static bool out_file_uri(const struct result_view *v, const char *path, char *out, size_t size)
{
        char prefix[SESSION_NAME_MAX + 64];
        if (v->session) {
                snprintf(prefix, sizeof(prefix), "corral://session/%s/", v->session);
                resource_uri(prefix, path, out, size);
                return true;
        }
        if (v->kept && kept_has_out(v->kept, path)) {
                snprintf(prefix, sizeof(prefix), "corral://run/%s/", kept_id(v->kept));
                resource_uri(prefix, path, out, size); /* path is out/... */
                return true;
        }
        snprintf(out, size, "file://" FILES_ROOT "/%s", path);
        return false;
}

/* A file's text, when it is text that fits in *room (which it takes). */
static json_t *embedded_text(json_t *data, const char *mime, const char *uri, size_t *room)
{
        if (!text_mime(mime))
                return NULL;
        struct buf raw;
        buf_init(&raw, (size_t)-1 / 2);
        json_t *resource = NULL;
        if (base64_decode(&raw, json_string_value(data), json_string_length(data)) == 0 &&
            raw.len <= *room && utf8_text(raw.data ? raw.data : "", raw.len)) {
                resource = json_pack("{s:s, s:s, s:s%}", "uri", uri, "mimeType", mime, "text",
                                     raw.data ? raw.data : "", raw.len);
                *room -= raw.len;
        }
        buf_free(&raw);
        return resource;
}

/* The files the code wrote: pictures as images; text as embedded
 * resources while their text stays within max_chars; the rest that came
 * back, when the client takes resource links (2025-06-18 on) and the file
 * can be read back (a session's, or a kept run's), as links; else
 * embedded. */
static void add_out_files(json_t *result, json_t *out_files, const struct result_view *v)
{
        json_t *content = json_object_get(result, "content");
        json_t *listing = json_array();
        struct buf lines;
        buf_init(&lines, 1 << 20);
        /* Embedded text takes at most half the result's; the file lines a
         * quarter, then one line says how many more there are. */
        size_t room = v->max_chars / 2, lines_max = v->max_chars / 4, more = 0, i;
        json_t *f;
        json_array_foreach(out_files, i, f)
        {
                const char *path = json_string_value(json_object_get(f, "path"));
                const char *mime = json_string_value(json_object_get(f, "mime_type"));
                const char *note = json_string_value(json_object_get(f, "note"));
                json_t *data = json_object_get(f, "data");
                json_int_t size = json_integer_value(json_object_get(f, "size"));
                if (!path)
                        continue;
                char uri[3 * FILES_PATH_MAX + 160], line[sizeof(uri) + 100];
                bool readable = out_file_uri(v, path, uri, sizeof(uri));
                const char *how = "not returned";
                json_t *item = NULL;
                if (json_is_string(data) && mime && strncmp(mime, "image/", 6) == 0) {
                        item = json_pack("{s:s, s:O, s:s}", "type", "image", "data", data,
                                         "mimeType", mime);
                        how = "returned as an image";
                } else if (json_is_string(data) && (item = embedded_text(data, mime, uri, &room))) {
                        item = json_pack("{s:s, s:o}", "type", "resource", "resource", item);
                        how = "returned as an embedded resource";
                } else if (json_is_string(data) && readable && v->links) {
                        item = json_pack("{s:s, s:s, s:s, s:s, s:I}", "type", "resource_link",
                                         "uri", uri, "name", path, "mimeType",
                                         mime ? mime : "application/octet-stream", "size", size);
                        how = "linked";
                        note = "linked: resources/read of its uri reads it";
                } else if (json_is_string(data)) {
                        /* bytes, or text that is not UTF-8 */
                        item = json_pack("{s:s, s:{s:s, s:s, s:O}}", "type", "resource", "resource",
                                         "uri", uri, "mimeType",
                                         mime ? mime : "application/octet-stream", "blob", data);
                        how = "returned as an embedded resource";
                }
                if (item)
                        json_array_append_new(content, item);
                bool returned = item && strcmp(how, "linked") != 0;
                json_array_append_new(
                    listing, json_pack("{s:s, s:I, s:s?, s:b, s:s*, s:s*}", "path", path, "size",
                                       size, "mime_type", mime, "returned", returned, "note",
                                       returned ? NULL : note, "uri", readable ? uri : NULL));
                if (lines.len > lines_max) {
                        more++;
                        continue;
                }
                /* The name is the code's: shown escaped (the listing keeps it exact). */
                append_text(&lines, "\n[file ");
                buf_append_shown(&lines, path, strlen(path));
                if (strcmp(how, "linked") == 0) {
                        snprintf(line, sizeof(line), ": %lld bytes, linked: resources/read %s]",
                                 (long long)size, uri);
                        append_text(&lines, line);
                        continue;
                }
                /* A note may say "not returned: why" itself. */
                if (!returned && note && strncmp(note, how, strlen(how)) == 0)
                        how = "";
                snprintf(line, sizeof(line), ": %lld bytes, %s%s%s]", (long long)size, how,
                         returned || !note || !how[0] ? "" : ": ", returned || !note ? "" : note);
                append_text(&lines, line);
        }
        if (more) {
                char line[120];
                snprintf(line, sizeof(line),
                         "\n[... and %zu more files: structuredContent.files lists them]", more);
                append_text(&lines, line);
        }
        json_object_set_new(json_object_get(result, "structuredContent"), "files", listing);
        if (lines.len)
                text_content_append(result, lines.data, lines.len);
        buf_free(&lines);
}

/* Where the session stands after this call, and a note when it changed. */
static void add_session(json_t *result, const struct sandbox_result *res, const char *name)
{
        const char *state = res->not_resumed  ? "hibernated"
                            : !res->kept      ? "ended"
                            : res->state_lost ? "reset"
                            : res->resumed    ? "resumed"
                            : res->restarted  ? "restarted"
                                              : "kept";
        json_t *session =
            json_pack("{s:s, s:s, s:o}", "name", name, "state", state, "memory_bytes",
                      res->memory_bytes >= 0 ? json_integer(res->memory_bytes) : json_null());
        json_t *rep = res->resume_report;
        if (session && res->resumed && rep) {
                json_object_set(session, "not_restored", json_object_get(rep, "not_restored"));
                json_object_set(session, "resume_ms", json_object_get(rep, "resume_ms"));
                if (json_is_string(json_object_get(rep, "error")))
                        json_object_set(session, "resume_error", json_object_get(rep, "error"));
        }
        json_object_set_new(json_object_get(result, "structuredContent"), "session", session);
        char note[600] = "";
        if (res->not_resumed) {
                /* its error says why and what to do */
        } else if (res->kept && !res->state_lost && res->resumed && rep) {
                char names[300] = "";
                json_t *v;
                size_t i;
                json_array_foreach(json_object_get(rep, "not_restored"), i, v)
                {
                        size_t at = strlen(names);
                        if (at > sizeof(names) - 80)
                                break;
                        char shown[64]; /* a name the sandbox wrote: shown escaped */
                        str_printable(json_string_value(v) ? json_string_value(v) : "?", shown,
                                      sizeof(shown));
                        snprintf(names + at, sizeof(names) - at, "%s%s", i ? ", " : "", shown);
                }
                bool loaded = !json_is_string(json_object_get(rep, "error"));
                snprintf(note, sizeof(note),
                         "\n[session \"%s\" was resumed from hibernation in %lld ms: %s%s%s]", name,
                         (long long)json_integer_value(json_object_get(rep, "resume_ms")),
                         loaded ? "its files and Python globals are back"
                                : "its files are back, but its Python globals could not be "
                                  "loaded",
                         names[0] ? "; not restored: " : "", names);
                utf8_scrub(note);
        } else if (!res->kept)
                snprintf(note, sizeof(note),
                         "\n[session \"%s\" ended: its sandbox is gone; the next call with this "
                         "name opens a new one]",
                         name);
        else if (res->state_lost)
                snprintf(note, sizeof(note),
                         "\n[session \"%s\": its Python interpreter ended during this call, so "
                         "its variables are gone; files in /workspace remain]",
                         name);
        else if (res->restarted)
                snprintf(note, sizeof(note),
                         "\n[session \"%s\": this call ran in a new Python interpreter (the "
                         "previous one had ended), so earlier variables are gone]",
                         name);
        if (note[0])
                text_content_append(result, note, strlen(note));
}

/* The text a result carries: its text items' and the text of the files
 * it embeds. */
static size_t text_length(json_t *result)
{
        size_t n = 0, i;
        json_t *item;
        json_array_foreach(json_object_get(result, "content"), i, item)
        {
                json_t *t = json_object_get(item, "text");
                if (!t)
                        t = json_object_get(json_object_get(item, "resource"), "text");
                if (json_is_string(t))
                        n += json_string_length(t);
        }
        return n;
}

static json_t *result_whole(const struct sandbox_result *res, const char *status,
                            const struct result_view *v, size_t room)
{
        json_t *result = result_json(res, status, v, room);
        if (result && v->session)
                add_session(result, res, v->session);
        if (result && json_array_size(res->out_files))
                add_out_files(result, res->out_files, v);
        return result;
}

/* Past every other bound (a tiny max_chars against a traceback, notes
 * and file lines), the first text item loses its middle. */
static void hard_bound(json_t *result, size_t max)
{
        size_t n = text_length(result);
        json_t *item = json_array_get(json_object_get(result, "content"), 0);
        const char *text = json_string_value(json_object_get(item, "text"));
        if (n <= max || !text)
                return;
        size_t len = strlen(text), cut = n - max + 80, keep_end = 200;
        if (cut + keep_end > len)
                return; /* nothing left to cut */
        size_t head = utf8_cut(text, len - cut - keep_end);
        const char *end = text + len - keep_end;
        while (((unsigned char)*end & 0xC0) == 0x80)
                end++;
        struct buf b;
        buf_init(&b, len + 1);
        buf_append_some(&b, text, head);
        append_text(&b, "\n[... cut to result_max_chars ...]\n");
        append_text(&b, end);
        json_object_set_new(item, "text", json_string(buf_str(&b)));
        buf_free(&b);
}

/* The output's share is what the rest of the text leaves of max_chars:
 * tried with all of it, then with what each try measured over. */
static json_t *result_bounded(const struct sandbox_result *res, const char *status,
                              const struct result_view *v)
{
        size_t max = v->max_chars, room = max;
        json_t *result = result_whole(res, status, v, room);
        for (int tries = 0; result && tries < 4; tries++) {
                size_t n = text_length(result);
                if (n <= max || room == 0)
                        break;
                size_t over = n - max + 64;
                room = room > over ? room - over : 0;
                json_decref(result);
                result = result_whole(res, status, v, room);
        }
        if (result)
                hard_bound(result, max);
        return result;
}

json_t *tools_result(const struct sandbox_result *res, const struct result_view *v)
{
        return result_bounded(res, sandbox_status_name(res->status), v);
}

json_t *tools_running_result(const struct sandbox_result *partial, const char *job_id,
                             long long elapsed_ms, const struct result_view *v)
{
        struct sandbox_result r = *partial;
        r.has_exit_code = false;
        r.duration_ms = elapsed_ms;
        r.error_type = r.error_message = r.error_traceback = NULL;
        r.out_files = NULL;
        struct result_view so_far = *v;
        so_far.session = NULL;
        so_far.running = true;
        json_t *result = result_bounded(&r, "running", &so_far);
        if (!result)
                return NULL;
        json_object_set_new(json_object_get(result, "structuredContent"), "job_id",
                            json_string(job_id));
        json_object_set_new(result, "isError", json_false());
        char hint[256];
        snprintf(hint, sizeof(hint),
                 "Still running after %lld ms as job %s: it goes on in its sandbox. "
                 "job_result with wait_s waits for its result; job_status, job_cancel.",
                 elapsed_ms, job_id);
        json_array_append_new(json_object_get(result, "content"),
                              json_pack("{s:s, s:s}", "type", "text", "text", hint));
        return result;
}

/* The line between a cut stream's first and last bytes: how much is left
 * out, and where the whole is. */
static void marker(struct buf *t, const char *name, const struct sandbox_output *o, size_t head,
                   size_t tail, bool is_stderr, const struct result_view *v)
{
        char line[MARKER_ROOM];
        unsigned long long kept = v->kept ? kept_bytes(v->kept, is_stderr) : 0;
        unsigned long long left = o->total - head - tail;
        int n = snprintf(line, sizeof(line), "[... %llu bytes of %s%s left out (%llu in all). ",
                         left, name, v->running ? " so far" : "", o->total);
        if (!kept) {
                snprintf(line + n, sizeof(line) - (size_t)n, "The rest is not kept ...]\n");
        } else {
                /* The store's bound may have stopped it: then it says how
                 * much it holds. */
                char what[64] = "Whole text";
                if (kept < o->total && !v->running)
                        snprintf(what, sizeof(what), "Its first %llu bytes", kept);
                snprintf(line + n, sizeof(line) - (size_t)n,
                         "%s: read_file path \"corral://run/%s/%s\" with offset and limit, or "
                         "resources/read of that URI; kept %.0f min ...]\n",
                         what, kept_id(v->kept), name, v->keep_s / 60);
        }
        append_text(t, line);
}

/* A stream as the result shows it: whole when it fits in `share` bytes,
 * else its first third and last two thirds with a marker between (the
 * end matters most: errors and final lines are there). Whether it was
 * cut. */
static bool excerpt(struct buf *t, const char *name, const struct sandbox_output *o, size_t share,
                    bool is_stderr, const struct result_view *v)
{
        if (o->total <= share && o->total <= o->data.len) {
                buf_append_some(t, o->data.data, (size_t)o->total);
                return false;
        }
        size_t head = share / 3 < o->data.len ? share / 3 : o->data.len;
        struct buf tail;
        buf_init(&tail, share - head + 1);
        size_t tn = sandbox_tail(o, share - head, head, &tail);
        /* Past a gap (the runtime relayed less than it counted) there is no
         * tail to show: the head takes the room. */
        if (tn < share - head && o->total > o->data.len + o->tail.len)
                head = share - tn < o->data.len ? share - tn : o->data.len;
        head = utf8_cut(o->data.data, head);
        buf_append_some(t, o->data.data, head);
        if (head && o->data.data[head - 1] != '\n')
                append_text(t, "\n");
        marker(t, name, o, head, tn, is_stderr, v);
        buf_append_some(t, tail.data, tail.len);
        buf_free(&tail);
        return true;
}

/* How the room divides: stderr gets at least a quarter when both are
 * long, and what stdout leaves. */
static void shares(const struct sandbox_result *res, size_t room, size_t *out, size_t *err)
{
        unsigned long long o = res->out.total, e = res->err.total;
        if (o + e <= room) {
                *out = (size_t)o;
                *err = (size_t)e;
                return;
        }
        size_t quarter = room / 4;
        size_t e_share = (size_t)(e < quarter ? e : (o < room - quarter ? room - o : quarter));
        if (e_share > e)
                e_share = (size_t)e;
        size_t o_share = room - e_share;
        if (o_share > o)
                o_share = (size_t)o;
        *out = o_share;
        *err = room - o_share < e ? room - o_share : (size_t)e;
}

/* The code's traceback, its last `max` bytes when longer. */
static void append_traceback(struct buf *t, const char *tb, size_t max)
{
        size_t n = strlen(tb);
        if (n > max) {
                char line[120];
                snprintf(line, sizeof(line), "[... the traceback's first %zu bytes left out ...]\n",
                         n - max);
                append_text(t, line);
                tb += n - max;
                while (((unsigned char)*tb & 0xC0) == 0x80)
                        tb++;
        }
        append_text(t, tb);
        if (tb[0] && tb[strlen(tb) - 1] != '\n')
                append_text(t, "\n");
}

static json_t *result_json(const struct sandbox_result *res, const char *status,
                           const struct result_view *v, size_t room)
{
        struct buf text, out, err;
        buf_init(&text, (size_t)-1 / 2);
        buf_init(&out, (size_t)-1 / 2);
        buf_init(&err, (size_t)-1 / 2);
        char line[512];
        size_t out_share, err_share;
        shares(res, room, &out_share, &err_share);
        bool out_cut = excerpt(&out, "stdout", &res->out, out_share, false, v);
        bool err_cut = excerpt(&err, "stderr", &res->err, err_share, true, v);
        if (out.len) {
                buf_append(&text, out.data, out.len);
                if (out.data[out.len - 1] != '\n')
                        append_text(&text, "\n");
        }
        if (err.len) {
                append_text(&text, "--- stderr ---\n");
                buf_append(&text, err.data, err.len);
                if (err.data[err.len - 1] != '\n')
                        append_text(&text, "\n");
        }
        if (res->error_traceback && res->error_traceback[0]) {
                if (!res->err.data.len || !strstr(buf_str(&text), res->error_traceback)) {
                        append_text(&text, "--- error ---\n");
                        append_traceback(&text, res->error_traceback, v->max_chars / 4);
                }
        } else if (res->error_message && res->status != ST_OK) {
                append_text(&text, "--- error ---\n");
                append_text(&text, res->error_type ? res->error_type : "Error");
                append_text(&text, ": ");
                append_traceback(&text, res->error_message, v->max_chars / 4);
        }
        if (res->has_exit_code)
                snprintf(line, sizeof(line), "[status: %s, exit code %d, %lld ms]", status,
                         res->exit_code, res->duration_ms);
        else
                snprintf(line, sizeof(line), "[status: %s, %lld ms]", status, res->duration_ms);
        append_text(&text, line);

        char uri[2][64] = {"", ""};
        for (int i = 0; v->kept && i < 2; i++)
                snprintf(uri[i], sizeof(uri[i]), "corral://run/%s/%s", kept_id(v->kept),
                         i ? "stderr" : "stdout");
        bool out_uri = out_cut && kept_bytes(v->kept, false) > 0;
        bool err_uri = err_cut && kept_bytes(v->kept, true) > 0;
        json_t *structured = json_pack(
            "{s:s, s:o, s:o, s:o, s:I, s:I, s:b, s:b, s:I, s:o, s:o, s:o, s:o}", "status", status,
            "exit_code", res->has_exit_code ? json_integer(res->exit_code) : json_null(), "stdout",
            json_stringn(out.data ? out.data : "", out.len), "stderr",
            json_stringn(err.data ? err.data : "", err.len), "stdout_bytes",
            (json_int_t)res->out.total, "stderr_bytes", (json_int_t)res->err.total,
            "stdout_truncated", out_cut, "stderr_truncated", err_cut, "duration_ms",
            (json_int_t)res->duration_ms, "container",
            res->container_id ? json_string(res->container_id) : json_null(), "error",
            error_object(res->error_type, res->error_message, res->error_traceback), "stdout_uri",
            out_uri ? json_string(uri[0]) : json_null(), "stderr_uri",
            err_uri ? json_string(uri[1]) : json_null());
        json_t *result = json_pack("{s:[{s:s, s:s%}], s:o, s:b}", "content", "type", "text", "text",
                                   text.data ? text.data : "", text.len, "structuredContent",
                                   structured, "isError", strcmp(status, "ok") != 0);
        buf_free(&text);
        buf_free(&out);
        buf_free(&err);
        return result;
}

json_t *tools_error_result(const char *status, const char *type, const char *message)
{
        char text[2048];
        _cleanup_free_ char *t = utf8_scrub(strdup(type));
        _cleanup_free_ char *m = utf8_scrub(strdup(message));
        if (!t || !m)
                return NULL;
        type = t;
        message = m;
        snprintf(text, sizeof(text), "%s: %s\n[status: %s]", type, message, status);
        utf8_scrub(text); /* the cut at sizeof(text) may split a character */
        return json_pack("{s:[{s:s, s:s}], s:{s:s, s:n, s:s, s:s, s:I, s:I, s:b, s:b, s:I, s:n,"
                         " s:{s:s, s:s}, s:n, s:n}, s:b}",
                         "content", "type", "text", "text", text, "structuredContent", "status",
                         status, "exit_code", "stdout", "", "stderr", "", "stdout_bytes",
                         (json_int_t)0, "stderr_bytes", (json_int_t)0, "stdout_truncated", 0,
                         "stderr_truncated", 0, "duration_ms", (json_int_t)0, "container", "error",
                         "type", type, "message", message, "stdout_uri", "stderr_uri", "isError",
                         1);
}
