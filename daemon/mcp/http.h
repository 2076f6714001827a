/* corral as a service: MCP streamable HTTP (2025-11-25) on unix sockets
 * and loopback TCP, for many clients at once. Each MCP session
 * (Mcp-Session-Id) is an mcp_server of its own with this module as its
 * transport; all of them share the one sandbox manager, pool and engine
 * connection of the process. HTTP itself is libmicrohttpd's, driven by
 * corral's loop (its epoll fd is one watch, its timeout one timer). */
#pragma once

#include "core/config.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/util.h"

#include <jansson.h>
#include <stdbool.h>

struct mcp_http;
struct mcp_server;

/* A client may name itself on initialize (header Corral-Client: NAME;
 * corral connect --as NAME): its sandbox sessions then belong to the name,
 * not to the one MCP session, so that every MCP session under that name
 * (a host's windows, a host that restarts, the Inspector) reaches them,
 * and they outlive each of them (until session_idle_s). The service serves
 * one user: the name shares, it does not guard. */
#define CLIENT_NAME_MAX 32
/* 1 to CLIENT_NAME_MAX of [A-Za-z0-9_.-]: 0, or -EINVAL and *e. */
int mcp_client_name_check(const char *name, struct err *e);

/* A new MCP session's server, made by whoever holds the managers
 * (cli/serve.c); `owner` names the client for what it owns (sessions).
 * The transport is attached by mcp_http. */
typedef int (*mcp_http_server_new)(void *userdata, const char *owner, struct mcp_server **ret);

int mcp_http_new(struct loop *l, const struct config *cfg, mcp_http_server_new server_new,
                 void *userdata, struct mcp_http **ret, struct err *e);
/* Listens on `addr`: "unix:PATH" (mode 0600, peers of another uid are
 * refused) or "tcp:HOST:PORT" (loopback unless http_public; a bearer
 * token on every request). Each kind has its own connection slots; a TCP
 * connection holds one for http_header_timeout_s until it presents the
 * token (mcp/http.c, "who holds a slot"). */
int mcp_http_listen(struct mcp_http *h, const char *addr, struct err *e);
/* Takes a socket that already listens (systemd's LISTEN_FDS). */
int mcp_http_adopt(struct mcp_http *h, int fd, struct err *e);
/* Starts taking connections on the listeners; until then they wait in the
 * backlog (the listeners are opened before the engine and the pool start,
 * so that a port in use or a bad token stops start-up before anything is
 * made; clients are served once the managers exist). */
int mcp_http_start(struct mcp_http *h, struct err *e);
/* What /health and /metrics report beside the HTTP side's own figures:
 * `status` returns {pool (sandbox_mgr_status's), sessions, upstreams:
 * [{name, state}]} (a new reference); `mgr` is asked on /health whether
 * the engine answers and has the image (sandbox_mgr_health). */
struct sandbox_mgr;
void mcp_http_set_status(struct mcp_http *h, json_t *(*status)(void *userdata), void *userdata,
                         struct sandbox_mgr *mgr);
/* The token TCP clients must send (empty when no TCP listener). */
const char *mcp_http_token(const struct mcp_http *h);
/* An event for the user, to every client (mcp_server_notify_log). */
void mcp_http_notify_log(struct mcp_http *h, enum log_level level, const char *logger,
                         const char *text);
/* Stop taking new MCP sessions and report not ready on /health; the
 * sessions there go on. done(busy) runs once no call runs in any of them
 * (busy 0), or when bound_s has passed (busy: the sessions still running a
 * call), and then the caller stops. -EALREADY when draining or stopping. */
int mcp_http_drain(struct mcp_http *h, double bound_s, void (*done)(void *userdata, long busy),
                   void *userdata);
/* Stops accepting and ends every MCP session (their calls and sessions). */
void mcp_http_stop(struct mcp_http *h);
void mcp_http_free(struct mcp_http *h);
/* {clients, listeners[]} for the status (new reference). */
json_t *mcp_http_status(const struct mcp_http *h);

/* The sockets systemd passed (LISTEN_PID, LISTEN_FDS), from fd 3 on: how
 * many; 0 when none were passed to this process. */
int systemd_listen_fds(void);
/* Tells systemd (NOTIFY_SOCKET) `state`, e.g. "READY=1"; nothing when not
 * under systemd. */
void systemd_notify(const char *state);
