/* Persistent clients of upstream MCP servers (corral as an MCP client).
 * A stdio server is spawned on first use in its own process group; a
 * streamable HTTP server is connected to on first use (upstream/http.h).
 * Either gets the `initialize` handshake, has its tools listed (every page)
 * and cached, is restarted on a later call when it died (the process
 * exited, or the connection was lost: unreachable, session expired), with a
 * back-off when it keeps dying, and is stopped at shutdown (the process
 * group killed, the HTTP session ended with DELETE). Requests run
 * concurrently, each with its own deadline. */
#pragma once

#include "core/config.h"
#include "core/loop.h"
#include "upstream/registry.h"

#include <jansson.h>

/* Error codes a failed request reports in err.code (JSON-RPC codes of the
 * frame protocol; see runtime/README.md). */
#define UPE_UNAVAILABLE -32002 /* cannot start, died, or closed its output */
#define UPE_TIMEOUT     -32003
#define UPE_TOO_LARGE   -32004

struct upstream;
struct upstream_set;
struct upstream_call;

/* Called exactly once per request unless it was cancelled first: with the
 * result (borrowed) on success, else with NULL and `e`. The server's own
 * JSON-RPC error keeps its code and message (kind ERR_PROTOCOL); a failure
 * of the link has one of the UPE_* codes (kind ERR_INTERNAL). Messages
 * have every secret masked. */
typedef void (*upstream_cb)(void *userdata, json_t *result, const struct err *e);

/* Takes the registry (freed with the set). */
int upstream_set_new(struct loop *l, const struct config *cfg, struct registry *reg,
                     struct upstream_set **ret);
/* Stop every server (stdin closed, SIGTERM to its process group, SIGKILL
 * after a grace period); `done` once all have exited. */
void upstream_set_shutdown(struct upstream_set *set, void (*done)(void *), void *userdata);
/* Kills whatever still runs (no waiting) and frees. */
void upstream_set_free(struct upstream_set *set);

size_t upstream_count(const struct upstream_set *set);
struct upstream *upstream_at(struct upstream_set *set, size_t i);
struct upstream *upstream_get(struct upstream_set *set, const char *name);
const struct upstream_spec *upstream_spec(const struct upstream *u);
/* A copy of text with every configured secret masked, then cut to at most
 * `max` bytes (0: no limit) and made valid UTF-8, as upstream/mask.h says
 * (caller frees; NULL when out of memory). */
char *upstream_mask(const struct upstream_set *set, const char *text, size_t max);

/* "idle" (never started), "starting", "connected", "error" (the last start
 * or the process failed; see last_error). */
const char *upstream_state(const struct upstream *u);
const char *upstream_last_error(const struct upstream *u); /* or NULL */
/* Calls waiting for its start or its answer, not cancelled. */
size_t upstream_pending(const struct upstream *u);
/* The cached tools array (borrowed), NULL before the first listing. */
json_t *upstream_tools(const struct upstream *u);
/* Name, description, transport, status, tools (count or null), error and
 * source, and "project": true for a project's server, for listings (new
 * reference). */
json_t *upstream_describe(const struct upstream *u);
/* The registry the set was made from (its skipped servers too). */
const struct registry *upstream_registry(const struct upstream_set *set);

/* Send `method` with `params` (stolen; NULL for none) once the server is
 * connected, starting it if needed. `max_result` bounds the encoded result
 * (0: only the line limit). */
int upstream_request(struct upstream *u, const char *method, json_t *params, double timeout_s,
                     size_t max_result, upstream_cb cb, void *userdata, struct upstream_call **ret);
/* Call back (result: the tools array) once connected and listed. */
int upstream_when_ready(struct upstream *u, double timeout_s, upstream_cb cb, void *userdata,
                        struct upstream_call **ret);
/* Withdraw a call: no callback follows; the server is told if it had it. */
void upstream_call_cancel(struct upstream_call *c);
