/* corral as an MCP server over stdio: newline-delimited JSON-RPC 2.0 on
 * stdin/stdout, lifecycle, and dispatch to the tools. The only part of the
 * daemon that knows MCP, and the only writer of stdout while serving. */
#pragma once

#include "core/config.h"
#include "core/log.h"
#include "core/loop.h"
#include "sandbox/sandbox.h"

#include <stdbool.h>
#include <stddef.h>

struct mcp_server;

/* One client's server, with no transport yet. `on_eof` is called once
 * when the client's input ends (stdio). `bridge` (may be NULL) serves
 * list_servers, search_tools and run_python's `servers`. `owner` names the
 * client to the session manager (NULL or "": the one client of stdio). */
struct bridge;
struct session_mgr;
struct transport;
struct transport_events;
int mcp_server_new(struct loop *l, const struct config *cfg, struct sandbox_mgr *mgr,
                   struct session_mgr *sessions, struct bridge *bridge, const char *owner,
                   void (*on_eof)(void *), void *userdata, struct mcp_server **ret);
/* What a transport calls, with the server as its userdata. */
extern const struct transport_events mcp_server_events;
/* Serves over newline-delimited JSON on the two descriptors. */
int mcp_server_serve_stdio(struct mcp_server *s, int in_fd, int out_fd);
/* Sends through `t`, a transport that calls mcp_server_events with the
 * server as userdata; its free op is called by mcp_server_free. */
void mcp_server_attach(struct mcp_server *s, struct transport *t);
/* The client named itself (mcp/http.h): the sandbox sessions it opens stay
 * when this MCP session ends, for the next one under its name. */
void mcp_server_keep_sessions(struct mcp_server *s);
/* An event for the user (log_event) as notifications/message, when the
 * client's level (logging/setLevel; warning until set) lets it through. */
void mcp_server_notify_log(struct mcp_server *s, enum log_level level, const char *logger,
                           const char *text);
/* Whether calls, file tools or searches of this client are under way
 * (finished jobs and tasks kept for their results do not count). */
bool mcp_server_busy(const struct mcp_server *s);
/* Stop reading; calls still running will not be answered. */
void mcp_server_stop(struct mcp_server *s);
/* Try to write what is left, blocking up to timeout_ms (for exit). */
void mcp_server_flush(struct mcp_server *s, int timeout_ms);
void mcp_server_free(struct mcp_server *s);
/* Its client went away: nothing more is sent, its sessions close, its
 * running calls are cancelled, and it frees itself once they ended (now,
 * when none runs). */
void mcp_server_close(struct mcp_server *s);
