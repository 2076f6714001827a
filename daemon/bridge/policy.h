/* What sandboxed code may call through the bridge: per server and per tool
 * allow and deny globs, size and time limits, and a call budget per run.
 * The built-in default is policy/default.json (embedded at build time); a
 * user's file overrides it key by key. */
#pragma once

#include "core/util.h"

#include <stdbool.h>

struct policy_server {
        bool enabled;
        char **allow;                          /* NULL-terminated fnmatch globs */
        char **deny;                           /* NULL-terminated; deny wins */
        char **ask;                            /* NULL-terminated; then ask, then allow */
        double timeout_s;                      /* per upstream call */
        unsigned long long max_argument_bytes; /* the encoded "arguments" object */
        unsigned long long max_result_bytes;   /* the encoded CallToolResult */
};

struct policy;

/* Parse the default text (must be valid) and then, when `user_path` is not
 * NULL, the user's file over it. A missing user file is an error only when
 * `required`. Messages name the file and key. */
int policy_load(const char *default_text, const char *user_path, bool required, struct policy **ret,
                struct err *e);
void policy_free(struct policy *p);
/* The user's file that policy_load read, or NULL when the built-in default
 * alone is in force. */
const char *policy_source(const struct policy *p);
/* The same for a person: the file, or "built-in default". */
const char *policy_source_name(const struct policy *p);

/* The rules in effect for `server`: its own entry's fields over those of
 * "*" (never NULL). */
const struct policy_server *policy_server(const struct policy *p, const char *server);
enum policy_decision { POLICY_DENY, POLICY_ASK, POLICY_ALLOW };
/* What a call of `tool` of `server` gets: denied when the server is off or
 * a deny glob matches; else asked (the user approves each call through
 * the MCP host) when an ask glob matches; else allowed when an allow glob
 * matches; else denied. */
enum policy_decision policy_tool_decision(const struct policy *p, const char *server,
                                          const char *tool);
/* Whether `tool` of `server` may be called at all (allowed or asked): what
 * sandboxed code is shown. */
bool policy_tool_allowed(const struct policy *p, const char *server, const char *tool);
/* A connection of sandboxed code to host:port through corral's proxy:
 * the "network" section's deny globs, then ask, then allow; none: deny. */
enum policy_decision policy_network_decision(const struct policy *p, const char *host, int port);
/* The network section in words, for the log and `corral doctor`:
 * "deny [..], ask [*], allow [..]; N special address range(s) allowed". */
void policy_network_text(const struct policy *p, char *out, size_t size);
/* Whether the policy names this special address (loopback, private, ...)
 * in network.addresses: such addresses are refused otherwise. */
struct sockaddr;
bool policy_network_address_ok(const struct policy *p, const struct sockaddr *sa);
long policy_max_calls(const struct policy *p);      /* per run */
long policy_max_concurrent(const struct policy *p); /* in flight per sandbox */
