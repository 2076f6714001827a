/* The MCP tools corral offers: their descriptions and schemas, argument
 * validation, and how a sandbox result is shown to the host. */
#pragma once

#include "core/config.h"
#include "sandbox/sandbox.h"

#include <jansson.h>

/* job_result's wait_s may not exceed this. */
#define JOB_WAIT_MAX_S 300.0

/* The `tools` array for tools/list (new reference). `servers` names the
 * MCP servers sandboxed code may call, for run_python's description. */
json_t *tools_list(const char *servers);

/* Validate a tools/call. Returns 0 and fills *req (borrowing from args), or
 * -ENOENT for an unknown tool (a protocol error) or -EINVAL for bad
 * arguments, with a message for the caller. */
int tools_parse_call(const char *name, json_t *args, const struct config *cfg,
                     struct sandbox_request *req, char *msg, size_t msg_size);

/* A CallToolResult for a sandbox result (new reference). */
json_t *tools_result(const struct sandbox_result *res);
/* The result of a call that goes on as job `job_id`: status "running",
 * the output so far (`partial`), isError false (new reference). */
json_t *tools_running_result(const struct sandbox_result *partial, const char *job_id,
                             long long elapsed_ms);
/* The result of sandbox_status for these figures (stolen). */
json_t *tools_status_result(json_t *status);
/* A CallToolResult for a failure before any sandbox ran. */
json_t *tools_error_result(const char *status, const char *type, const char *message);
