/* corral as an MCP server over stdio: newline-delimited JSON-RPC 2.0 on
 * stdin/stdout, lifecycle, and dispatch to the tools. The only part of the
 * daemon that knows MCP, and the only writer of stdout while serving. */
#pragma once

#include "core/config.h"
#include "core/loop.h"
#include "sandbox/sandbox.h"

struct mcp_server;

/* `on_eof` is called once when the host closes stdin. `bridge` (may be
 * NULL) serves list_servers, search_tools and run_python's `servers`. */
struct bridge;
struct session_mgr;
int mcp_server_new(struct loop *l, const struct config *cfg, struct sandbox_mgr *mgr,
                   struct session_mgr *sessions, struct bridge *bridge, int in_fd, int out_fd,
                   void (*on_eof)(void *), void *userdata, struct mcp_server **ret);
/* Stop reading; calls still running will not be answered. */
void mcp_server_stop(struct mcp_server *s);
/* Try to write what is left, blocking up to timeout_ms (for exit). */
void mcp_server_flush(struct mcp_server *s, int timeout_ms);
void mcp_server_free(struct mcp_server *s);
