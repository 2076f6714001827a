/* The MCP tools corral offers: the one table of them, their descriptions
 * and schemas, argument validation, and how a sandbox result is shown to
 * the host. */
#pragma once

#include "core/config.h"
#include "sandbox/sandbox.h"
#include "sandbox/session.h"

#include <jansson.h>

/* job_result's wait_s may not exceed this. */
#define JOB_WAIT_MAX_S 300.0
/* The guide to the tools (daemon/mcp/guide.md), a resource: what their
 * descriptions leave out. */
#define GUIDE_URI "corral://guide"
extern const char corral_guide[];

/* `files` of one run_python or run_shell call, at most. */
#define FILES_PER_CALL 64

struct mcp_server;
struct sandbox_images;

/* What the tools' descriptions say of this corral: `servers` names the MCP
 * servers sandboxed code may call (for run_python's), `images` and
 * `mounts` (may be NULL) shape run_python's and run_shell's `image`
 * argument and descriptions. */
struct tools_context {
        const char *servers;
        const struct sandbox_images *images;
        json_t *mounts;
};

/* One tool corral offers. One table of them (tools.c) serves tools/list,
 * in its order, and tools/call, by name. */
struct mcp_tool {
        const char *name;
        /* Its tools/list entry but for "execution" (new reference). */
        json_t *(*describe)(const char *name, const struct tools_context *x);
        /* Answers a tools/call of it, now or later: `args` is
         * params.arguments as sent (NULL when absent), `params` the whole
         * (name, task, _meta), checked. */
        void (*call)(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
        /* It may run as an MCP task: execution.taskSupport "optional". */
        bool task;
};

/* The tool named `name`, or NULL. */
const struct mcp_tool *tools_find(const char *name);
/* The tools' names, "a, b and c"; only those that may run as tasks when
 * `tasks_only`. */
void tools_names(bool tasks_only, char *out, size_t size);
/* The message for a tools/call of a tool corral does not offer. */
void tools_unknown(const char *name, char *msg, size_t msg_size);

/* The `tools` array for tools/list (new reference, or NULL); `tasks`: the
 * client negotiated a protocol with tasks (2025-11-25), so the tools that
 * may run as one say so (execution.taskSupport). */
json_t *tools_list(const char *servers, const struct sandbox_images *images, json_t *mounts,
                   bool tasks);

/* What a sandbox is made of, appended to `b` as sentences, each starting
 * with a space: the images a call may choose (the default first) with
 * their packages, with versions or names alone, and the host directories
 * mounted read-only (`mounts` may be NULL). */
void tools_environment_text(const struct sandbox_images *images, json_t *mounts, bool versions,
                            struct buf *b);

/* Validate a tools/call of run_python or run_shell. Returns 0 and fills
 * *req (borrowing from args; `files` are decoded, and `servers` holds
 * session_servers too, in memory that tools_request_free releases), or
 * -ENOENT for another tool (a protocol
 * error) or -EINVAL for bad arguments, with *e for the caller.
 * `images`: what `image` may name (NULL: only the default). */
int tools_parse_call(const char *name, json_t *args, const struct config *cfg,
                     const struct sandbox_images *images, struct sandbox_request *req,
                     struct err *e);
void tools_request_free(struct sandbox_request *req);

/* The longest line the host may send: max_frame, or more when a write_file
 * of file_max_bytes in base64, with its request around it, needs more. */
size_t tools_line_max(const struct config *cfg);

/* `content` of a file argument as bytes (utf-8 as is, or base64 decoded),
 * at most `max` of them: 0, or -EINVAL / -EFBIG and *e. */
int tools_file_content(json_t *content, json_t *encoding, size_t max, struct buf *ret,
                       struct err *e);

/* How a result shows a run. Its text is at most max_chars: a stream that
 * does not fit shows its first and last bytes, with a line between that
 * says how much is left out and, when `kept` holds it, where the whole
 * is (corral://run/{id}/stdout, read back with read_file or
 * resources/read). */
struct kept_run;
struct result_view {
        const char *session;         /* the session the call ran in, or NULL */
        size_t max_chars;            /* result_max_chars, or the call's own */
        const struct kept_run *kept; /* the run's whole output (mcp/results.c), or NULL */
        double keep_s;               /* how long it is kept */
        bool running;                /* a job's output so far */
        bool links;                  /* the client takes resource_link content (2025-06-18 on) */
};

/* A CallToolResult for a sandbox result (new reference). Files the code
 * wrote under /workspace/out become image content (pictures) or embedded
 * resources, named by URIs that resources/read reads back. */
json_t *tools_result(const struct sandbox_result *res, const struct result_view *v);
/* The result of a call that goes on as job `job_id`: status "running",
 * the output so far (`partial`), isError false (new reference). */
json_t *tools_running_result(const struct sandbox_result *partial, const char *job_id,
                             long long elapsed_ms, const struct result_view *v);
/* A successful result: `text` for a person, `structured` (stolen) for
 * code (new reference). */
json_t *tools_text_result(json_t *structured, const char *text);
/* The result of sandbox_status for these figures (stolen). */
json_t *tools_status_result(json_t *status);
/* A CallToolResult for a failure before any sandbox ran. */
json_t *tools_error_result(const char *status, const char *type, const char *message);
