/* What the files of mcp/ share, and nothing outside mcp/ includes: the
 * server's state, and what each file offers the others. */
#pragma once

#include "core/config.h"
#include "core/loop.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* "job-<n>", the id of a job and of a task alike. */
#define JOB_ID_MAX 24
/* The _meta key that ties a message to its task (MCP tasks, 2025-11-25). */
#define RELATED_TASK_KEY "io.modelcontextprotocol/related-task"

struct call;
struct file_call;
struct search;

/* One MCP client's server: its transport, what it has running, and the
 * managers it borrows. */
struct mcp_server {
        struct loop *loop;
        const struct config *cfg;
        struct sandbox_mgr *mgr;
        struct session_mgr *sessions;
        struct bridge *bridge; /* may be NULL */
        struct transport *transport;
        size_t line_max;          /* the longest message taken (tools_line_max) */
        char names[512];          /* the servers, for run_python's description */
        struct call *calls;       /* run_python and run_shell, jobs, tasks */
        unsigned job_seq;         /* the last job-<n> given */
        struct file_call *fcalls; /* file tools on their way */
        struct search *searches;  /* search_tools waiting for servers */
        bool initialized;         /* initialize answered */
        void (*on_eof)(void *);
        void *userdata;
};

/* ---- server.c: sending to the client */

/* A message (stolen) to the client, through the transport. */
void mcp_send(struct mcp_server *s, json_t *msg);
/* A JSON-RPC error answer to request `id` (NULL: id null). */
void mcp_send_error(struct mcp_server *s, json_t *id, int code, const char *message);
/* A tool's result (stolen) as the answer to `id`; NULL (it could not be
 * built) is answered with an internal error. */
void mcp_send_result(struct mcp_server *s, json_t *id, json_t *result);

/* ---- progress.c: notifications/progress for one call */

struct progress;
/* Follows a call whose tools/call `params` carry _meta.progressToken (a
 * string or an integer); NULL when they do not, or out of memory. A
 * task's notifications name `task_id` (NULL: not a task). */
struct progress *progress_new(struct mcp_server *s, json_t *params, const char *task_id);
/* A piece of the run's output; its newest lines make the message. */
void progress_output(struct progress *p, const char *data, size_t n);
/* The code's own report: done of total (< 0: no total), and a message
 * (NULL: none), shown until it reports again. */
void progress_report(struct progress *p, double done, double total, const char *message);
/* No more notifications. All three accept NULL. */
void progress_free(struct progress *p);

/* ---- search.c: list_servers and search_tools */

struct bridge;
/* The servers sandboxed code may call, ", "-separated and cut with ", ..."
 * to fit `size` (at least 8), for run_python's description. */
void servers_names(struct bridge *b, char *out, size_t size);
void tool_list_servers(struct mcp_server *s, json_t *id, json_t *args);
/* Answered once every server asked has listed its tools, or failed to. */
void tool_search_tools(struct mcp_server *s, json_t *id, json_t *args);
/* Whether a search_tools with this id waits for its answer. */
bool searches_in_flight(const struct mcp_server *s, const json_t *id);
/* Withdraws every search_tools still waiting: no answers follow. */
void searches_free(struct mcp_server *s);

/* ---- session_tools.c: session_list, session_close, write_file, read_file,
 * list_files */

void tool_session_list(struct mcp_server *s, json_t *id, json_t *args);
void tool_session_close(struct mcp_server *s, json_t *id, json_t *args);
/* Opens the session when there is none: its first run writes the file. */
void tool_write_file(struct mcp_server *s, json_t *id, json_t *args);
void tool_read_file(struct mcp_server *s, json_t *id, json_t *args);
void tool_list_files(struct mcp_server *s, json_t *id, json_t *args);
/* Whether a file tool with this id is on its way. */
bool file_calls_in_flight(const struct mcp_server *s, const json_t *id);
/* Withdraws every file tool on its way: no answers follow. */
void file_calls_free(struct mcp_server *s);

/* ---- errors.c: how a failed tool call is shown */

/* Which call failed, for its reason: an errno means different things from
 * different calls (-ENOENT from session_sandbox is no such session, from
 * a file operation no such file). When the sandbox layer returns typed
 * reasons that say this themselves, this goes and the reasons alone key
 * the table. */
enum failed {
        FAILED_ARGUMENTS,     /* a tool's arguments: -EFBIG (content over
                               * file_max_bytes) or any other */
        FAILED_PATH,          /* files_path refused a path */
        FAILED_SANDBOX_RUN,   /* sandbox_run */
        FAILED_SESSION_RUN,   /* session_run (sandbox/session.h) */
        FAILED_SESSION_CLOSE, /* session_close */
        FAILED_SESSION_GET,   /* session_sandbox, or no engine to reach it */
        FAILED_FILE_START,    /* sandbox_read_file, sandbox_write_file */
        FAILED_FILE,          /* a file operation's end (files_result.error) */
        FAILED_ASK,           /* sandbox_ask */
        FAILED_LIST,          /* the runtime's answer to sandbox/list */
};

/* The CallToolResult (isError) for `reason` (a negative errno; 0: none
 * given) of `what`: status and type from the one table in errors.c, and
 * `message`, or when it is NULL or empty the table's, or strerror. A new
 * reference, or NULL. */
json_t *error_result(enum failed what, int reason, const char *message);
/* Arguments the model can correct: invalid_arguments, InvalidArguments. */
json_t *arguments_error(const char *message);
