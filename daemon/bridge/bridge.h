/* The bridge: requests that code in a sandbox sends to upstream MCP servers
 * (servers/list, tools/list, tools/call in the frame protocol), checked
 * against the call's own server list and the policy, sent on through the
 * persistent upstream clients, answered in any order, and audited. */
#pragma once

#include "bridge/audit.h"
#include "bridge/policy.h"
#include "core/config.h"
#include "core/jsonrpc.h"
#include "core/loop.h"
#include "upstream/client.h"

#include <jansson.h>

/* JSON-RPC error codes of the bridge (data.type names them too). */
#define BRIDGE_DENIED         -32001
#define BRIDGE_UNAVAILABLE    UPE_UNAVAILABLE
#define BRIDGE_TIMEOUT        UPE_TIMEOUT
#define BRIDGE_TOO_LARGE      UPE_TOO_LARGE
#define BRIDGE_TOO_MANY_CALLS -32005
#define BRIDGE_NO_TOOL        -32006

struct bridge;
struct bridge_run;

/* Borrows all four (audit may be NULL: no audit log). */
struct loop;
/* Sets up the way out of sandboxes too (bridge/egress.h): a bad
 * network_routes or network_resolve entry is an error in *e. */
int bridge_new(struct loop *l, const struct config *cfg, struct upstream_set *ups,
               struct policy *pol, struct audit *audit, struct bridge **ret, struct err *e);
void bridge_free(struct bridge *b);
struct upstream_set *bridge_upstreams(struct bridge *b);
const struct policy *bridge_policy(const struct bridge *b);

/* Check a call's `servers` argument (array of names). 0, or -EINVAL and
 * *e for the caller. */
int bridge_check_servers(struct bridge *b, json_t *names, struct err *e);

/* Check a call's `network` argument (host patterns). 0, or -EINVAL and
 * *e. */
int bridge_check_network(json_t *network, struct err *e);

/* Frames to the sandbox go through `send` (the message is stolen), or as
 * encoded lines through `send_lines` (bulk data: 0 or a negative errno). */
typedef void (*bridge_send_fn)(void *userdata, json_t *msg);
typedef int (*bridge_lines_fn)(void *userdata, const char *lines, size_t len);

/* A person asked to approve one call (the policy's `ask`), through the
 * MCP client of the run. ask() puts `message` to the person; 0 and later,
 * from the loop, done(done_ud, answer, why) once; or -ENOTSUP when the
 * client cannot be asked (no elicitation), and done is never called.
 * withdraw(handle) takes a question back (done is not called then). */
enum bridge_answer {
        BRIDGE_ACCEPTED,
        BRIDGE_DECLINED,  /* the person said no */
        BRIDGE_CANCELLED, /* the person dismissed it */
        BRIDGE_TIMED_OUT, /* ask_timeout_s passed */
        BRIDGE_GONE,      /* the client went away, or answered with an error */
};
typedef void (*bridge_answer_fn)(void *done_ud, enum bridge_answer answer, const char *why);
/* The answer as the audit log words it ("accepted", ..., "no answer"). */
const char *bridge_answer_name(enum bridge_answer answer);
struct bridge_asker {
        int (*ask)(void *ud, const char *message, bridge_answer_fn done, void *done_ud,
                   void **handle);
        void (*withdraw)(void *handle);
        void *ud;
};

/* A line in the audit log for something else a person was asked about
 * (ask_run: a run itself). Accepts NULL (no bridge, or no audit log). */
void bridge_audit(struct bridge *b, const struct audit_entry *e);

/* One sandbox run's view: the servers it may call and the hosts it may
 * reach. `names` and `network` (may be NULL) are checked already
 * (bridge_check_servers, bridge_check_network) and copied. */
int bridge_run_new(struct bridge *b, json_t *names, json_t *network, bridge_send_fn send,
                   bridge_lines_fn send_lines, void *userdata, struct bridge_run **ret);
/* Withdraws what is still in flight (audited as such). Accepts NULL. */
void bridge_run_free(struct bridge_run *r);
/* Who to ask when the policy says `ask` (borrowed; it outlives the run).
 * Without one, such calls are refused as when the client cannot be asked. */
void bridge_run_set_asker(struct bridge_run *r, const struct bridge_asker *asker);
/* The container, for the audit log (copied). */
void bridge_run_set_sandbox(struct bridge_run *r, const char *id);
/* The client the run is for, for the audit log (copied). */
void bridge_run_set_client(struct bridge_run *r, const char *client);
/* `network` for sandbox/exec ({"env": ...}, a new reference), or NULL when
 * the run may reach no host. */
json_t *bridge_run_exec_network(const struct bridge_run *r);
/* `servers` for sandbox/exec: [{name, alias}] (new reference). */
json_t *bridge_run_exec_servers(const struct bridge_run *r);
/* A request or notification the runtime sent. Its answer goes to `send`
 * from the loop, never before this returns (core/loop.h). */
void bridge_run_handle(struct bridge_run *r, const struct jrpc_msg *m);
