/* What the files of mcp/ share, and nothing outside mcp/ includes: the
 * server's state, and what each file offers the others. */
#pragma once

#include "bridge/bridge.h"

#include "core/buf.h"
#include "core/config.h"
#include "core/list.h"
#include "core/log.h"
#include "core/loop.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* "job-<n>", the id of a job and of a task alike. */
#define JOB_ID_MAX 24
/* The _meta key that ties a message to its task (MCP tasks, 2025-11-25). */
#define RELATED_TASK_KEY "io.modelcontextprotocol/related-task"

struct bridge;
struct file_call; /* session_tools.c */
struct job_wait;  /* jobs.c */
struct progress;  /* progress.c */
struct sandbox;
struct sandbox_mgr;
struct sandbox_result;
struct kept_run; /* results.c */
struct results;
struct search; /* search.c */
struct session_mgr;
struct transport;

/* ---- request.c: the client's requests in flight, one table of them */

struct request;

/* What a kind of request does when it goes unanswered. Each is called
 * with the request out of the table already (no answer can follow), and
 * may free it with what holds it. */
struct request_ops {
        const char *what; /* for the log: "a file call" */
        /* notifications/cancelled: its work is stopped and freed. */
        void (*withdraw)(struct request *r);
        /* The client goes: the same, without a word to anyone. */
        void (*drop)(struct request *r);
};

/* Embedded in each kind's own struct (run.c's call, jobs.c's wait,
 * session_tools.c's file call, search.c's search, resources.c's
 * operation, run.c's ask and wait). */
struct request {
        struct mcp_server *srv;
        struct list node; /* in srv->requests while in flight */
        json_t *id;       /* NULL once it has ended */
        const struct request_ops *ops;
};

/* The kind's struct of `r`, whose member `req` it is. */
#define request_of(r, type) ((type *)((char *)(r)-offsetof(type, req)))

/* Into the table under `id` (taken with a reference of its own). */
void request_begin(struct mcp_server *s, struct request *r, json_t *id,
                   const struct request_ops *ops);
/* Whether it is in the table (not answered, withdrawn or dropped). */
bool request_live(const struct request *r);
/* Its answer (a tool's result, stolen: NULL is an internal error) or a
 * JSON-RPC error, and out of the table; nothing when it is not live. */
void request_answer(struct request *r, json_t *result);
void request_error(struct request *r, int code, const char *message);
/* Out of the table, unanswered (idempotent). */
void request_end(struct request *r);
/* The live request with this id, or NULL: a new request may not reuse
 * it, and notifications/cancelled names it. */
struct request *request_find(const struct mcp_server *s, const json_t *id);
/* notifications/cancelled: whether a request had this id. */
bool request_withdraw(struct mcp_server *s, const json_t *id, const char *why);
/* The client goes: every request is dropped. */
void requests_drop_all(struct mcp_server *s);
/* Whether any request is in flight. */
bool requests_pending(const struct mcp_server *s);

/* A run_python or run_shell call, from its start until it is answered, or
 * as a job or task until its result is dropped. Its request is live until
 * it is answered: with its result, as a job's "running", or as a task. */
struct call {
        struct request req;        /* req.srv: its client, for its whole life */
        struct list node;          /* in srv->calls */
        struct sandbox *sb;        /* NULL once it has ended */
        struct progress *progress; /* NULL: the host asked for none */
        bool stopping;             /* cancelled (any way): its code is being stopped */
        const char *tool;          /* run_python or run_shell */
        char *code_line;           /* the start of its code, for job_list */
        char *session;             /* the session it runs in, or NULL */
        struct kept_run *kept;     /* where its whole output goes (results.c), or NULL */
        size_t max_chars;          /* its result's text at most (result_max_chars) */
        long long t_start, t_end;
        struct timer *sync_timer; /* sync_wait_s */
        char job_id[JOB_ID_MAX];  /* "" until it becomes a job */
        json_t *result;           /* a finished job's result */
        struct timer *expire;     /* job_retention_s after it ended */
        struct list waits;        /* struct job_wait: job_result, tasks/result */
        /* A task: a job from its start. */
        bool task;
        bool task_cancelled;    /* tasks/cancel: it stays "cancelled" */
        long long created_wall; /* ms since the epoch */
        long long updated_wall;
        long long ttl_ms; /* kept at least this long from creation */
};

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
        struct list calls;        /* struct call: run_python, run_shell, jobs, tasks */
        unsigned job_seq;         /* the last job-<n> given */
        struct list requests;     /* struct request: every request in flight */
        bool initialized;         /* initialize answered */
        bool closing;             /* mcp_server_close: freed when its last call ends */
        char owner[40];           /* the client, for the session manager ("": stdio's) */
        char protocol[16];        /* the version initialize settled on */
        enum log_level log_level; /* notifications/message up to this (logging/setLevel) */
        bool elicit_form;         /* the client offered elicitation in form mode */
        struct list asks;         /* struct ask (elicit.c), the first one out */
        unsigned ask_seq;
        struct bridge_asker asker;   /* the bridge asks this client's person */
        struct session_watch *watch; /* the client's sessions, for list_changed */
        struct results *results;     /* its runs' kept output (results.c); NULL until used */
        bool keep_sessions;          /* a named client: its sessions outlive it */
        void (*on_eof)(void *);
        void *userdata;
};

/* ---- elicit.c: questions to the client's person (policy "ask") */

void mcp_asks_init(struct mcp_server *s);
/* Whether the client can be asked (it offered elicitation, form mode). */
bool mcp_server_can_elicit(const struct mcp_server *s);
/* A response from the client: true when it was to one of our questions. */
bool mcp_asks_response(struct mcp_server *s, const struct jrpc_msg *m);
/* The client goes: every question ends unanswered. */
void mcp_asks_close(struct mcp_server *s);

/* ---- request.c: sending to the client */

/* A message (stolen) to the client, through the transport. */
void mcp_send(struct mcp_server *s, json_t *msg);
/* A JSON-RPC error answer to request `id` (NULL: id null). */
void mcp_send_error(struct mcp_server *s, json_t *id, int code, const char *message);
/* A tool's result (stolen) as the answer to `id`; NULL (it could not be
 * built) is answered with an internal error. */
void mcp_send_result(struct mcp_server *s, json_t *id, json_t *result);

/* ---- server.c: what the tools share */

/* Whether the client's protocol has MCP tasks (2025-11-25 on). */
bool mcp_server_tasks(const struct mcp_server *s);

/* Whether a tool's `args` is absent or an object; else answers that it
 * must be one. */
bool tool_args_object(struct mcp_server *s, json_t *id, json_t *args);
void tool_sandbox_status(struct mcp_server *s, json_t *id, json_t *args, json_t *params);

/* ---- progress.c: notifications/progress for one call */

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

/* ---- run.c: run_python and run_shell */

/* The handler of both (params.name says which); params.task, checked,
 * makes it a task. */
void tool_run(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
/* How the call's result shows its run (mcp/tools.h). */
struct result_view call_view(const struct call *c);
/* Unlinks and frees a call (its progress, waits and result with it). */
void call_free(struct call *c);
/* Whether a call of this client runs (a sandbox is working for it). */
bool calls_running(const struct mcp_server *s);
void calls_free(struct mcp_server *s);
/* The client went away: running calls are cancelled (their ends free
 * them), the rest freed. Whether any still runs. */
bool calls_close(struct mcp_server *s);

/* ---- jobs.c: jobs and MCP tasks */

/* Makes the call a task (a job from its start), with params.task's ttl. */
void task_start(struct call *c, json_t *task);
/* The Task object of the tasks specification (new reference). */
json_t *task_json(const struct call *c);
/* sync_wait_s passed: the call becomes a job, answered "running". */
void job_detach(struct call *c);
/* A job's end: its result (stolen; NULL: it could not be built) is kept
 * and given to those waiting; a task's status is notified. */
void job_store(struct call *c, json_t *result);
/* job_store of the run's result. */
void job_finished(struct call *c, const struct sandbox_result *res);
void tool_job_status(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tool_job_result(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tool_job_cancel(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tool_job_list(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tasks_get(struct mcp_server *s, json_t *id, json_t *params);
/* Answered when the task ends. */
void tasks_result(struct mcp_server *s, json_t *id, json_t *params);
void tasks_cancel(struct mcp_server *s, json_t *id, json_t *params);
void tasks_list(struct mcp_server *s, json_t *id, json_t *params);
/* Frees the job_result and tasks/result calls waiting for `c`. */
void job_waits_free(struct call *c);

/* ---- search.c: list_servers and search_tools */

/* The servers sandboxed code may call, ", "-separated and cut with ", ..."
 * to fit `size` (at least 8), for run_python's description. */
void servers_names(struct bridge *b, char *out, size_t size);
void tool_list_servers(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
/* Answered once every server asked has listed its tools, or failed to. */
void tool_search_tools(struct mcp_server *s, json_t *id, json_t *args, json_t *params);

/* ---- session_tools.c: session_list, session_close, write_file, read_file,
 * list_files */

void tool_session_list(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tool_session_close(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tool_session_save(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tool_session_fork(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
/* Opens the session when there is none: its first run writes the file. */
void tool_write_file(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tool_read_file(struct mcp_server *s, json_t *id, json_t *args, json_t *params);
void tool_list_files(struct mcp_server *s, json_t *id, json_t *args, json_t *params);

/* ---- resources.c: the sessions' files as MCP resources */

/* ---- results.c: the whole output of the client's runs, kept on the host */

/* A run's output from its start (NULL: nothing is kept: result_store_max
 * or result_keep_s is 0, or the store failed). `session`: it stays while
 * that session is open. */
struct kept_run *kept_start(struct mcp_server *s, const char *session);
/* Each piece of a stream, as the run writes it (k may be NULL). */
void kept_output(struct kept_run *k, bool is_stderr, const char *p, size_t n);
/* The run ended: a single-use run's /workspace/out files are kept too,
 * and its time (result_keep_s) starts. */
void kept_finish(struct kept_run *k, const struct sandbox_result *res);
const char *kept_id(const struct kept_run *k);
/* Bytes of the stream the store holds (it may have stopped at its bound). */
unsigned long long kept_bytes(const struct kept_run *k, bool is_stderr);
/* Whether the run's out file `path` (relative to /workspace) is kept. */
bool kept_has_out(const struct kept_run *k, const char *path);
struct kept_run *results_find(struct mcp_server *s, const char *id);
/* Whether `uri` names kept output (corral://run/...). */
bool results_uri(const char *uri);
/* The most one read of kept output gives: its JSON, even with every
 * byte escaped, stays under what clients take in one message (the
 * TypeScript SDK's stdio client drops the connection past 10 MiB). */
#define KEPT_PIECE_MAX (1 << 20)
/* A piece of kept output. */
struct kept_piece {
        struct buf data;         /* the bytes; text starts and ends on whole characters */
        size_t offset;           /* where they start in the whole */
        unsigned long long size; /* the whole's size as kept */
        bool text;               /* stdout, stderr: UTF-8 text */
        bool partial;            /* the store kept only the first `size` bytes */
        const char *mime_type;   /* borrowed until the next event; may be NULL */
};
/* Bytes [offset, offset+limit) of corral://run/{id}/stdout, /stderr or
 * /out/{path}, limit at most KEPT_PIECE_MAX: 0 (ret->data to free), or -ENOENT (no such run or
 * file) or -EINVAL, and *e. */
int results_read(struct mcp_server *s, const char *uri, size_t offset, size_t limit,
                 struct kept_piece *ret, struct err *e);
void results_free(struct mcp_server *s);

/* Follows the client's sessions (list_changed): 0 or -ENOMEM. */
int resources_init(struct mcp_server *s);
void resources_list(struct mcp_server *s, json_t *id, json_t *params);
void resources_templates_list(struct mcp_server *s, json_t *id, json_t *params);
void resources_read(struct mcp_server *s, json_t *id, json_t *params);
/* `prefix` and then `rel` percent-encoded (what is not unreserved, RFC
 * 3986, or '/'), as corral's resource URIs are. */
void resource_uri(const char *prefix, const char *rel, char *out, size_t size);
/* A URI's path part decoded: 0, or -EINVAL and *e. */
int resource_path_decode(const char *enc, char *rel, size_t rel_size, struct err *e);
void completion_complete(struct mcp_server *s, json_t *id, json_t *params);
/* write_file wrote `path` (full) in an open session. */
void resources_files_written(struct mcp_server *s, const char *session, const char *path);
/* Stops following the sessions. */
void resources_free(struct mcp_server *s);

/* ---- guide.c: the guide to the tools, resource GUIDE_URI */

/* Its resources/list entry, and its resources/read result (new references). */
json_t *guide_resource(void);
json_t *guide_read(struct mcp_server *s);

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
        FAILED_SESSION_SAVE,  /* session_save, session_fork, and their end */
        FAILED_SESSION_GET,   /* session_sandbox, or no engine to reach it */
        FAILED_FILE_START,    /* sandbox_read_file, sandbox_write_file */
        FAILED_FILE,          /* a file operation's end (files_result.error) */
        FAILED_ASK,           /* sandbox_ask */
        FAILED_LIST,          /* the runtime's answer to sandbox/list */
        FAILED_RUN_ASK,       /* ask_run: the person did not approve the run */
};

/* The CallToolResult (isError) for `reason` (a negative errno; 0: none
 * given) of `what`: status and type from the one table in errors.c, and
 * `message` (the facts), or when it is NULL or empty the table's, or
 * strerror; then the table's advice, if any. A new
 * reference, or NULL. */
json_t *error_result(enum failed what, int reason, const char *message);
/* error_result of `reason` and e's message (made valid UTF-8 first). */
json_t *err_result(enum failed what, int reason, struct err *e);
/* Arguments the model can correct: invalid_arguments, InvalidArguments. */
json_t *arguments_error(const char *message);
