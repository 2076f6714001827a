/* The way out of a sandbox: connections that sandboxed code opens through
 * the runtime's loopback proxy arrive as net/ frames (runtime/README.md,
 * "Network"); here each is checked against its run's `network` grant and
 * the policy's network rules (a person asked when they say so), the name
 * resolved by corral and the addresses judged (loopback, private,
 * link-local, multicast and metadata refused unless the policy names
 * them), connected, and relayed with flow control and limits. A route
 * (`network_routes`) makes a plain-HTTP request over HTTPS with headers
 * the sandbox never sees. One audit line per connection. */
#pragma once

#include "core/config.h"
#include "core/util.h"
#include "runtime/protocol.h"

#include <jansson.h>

struct loop;
struct policy;
struct audit;
struct bridge_asker;
struct egress;
struct egress_run;

#define EGRESS_GRANT_MAX 32              /* patterns in one call's `network` */
#define EGRESS_WINDOW    RT_NET_WINDOW   /* bytes in flight per connection and direction */
#define EGRESS_CHUNK     RT_NET_DATA_MAX /* raw bytes per net/data frame */

/* Checks the config's network_routes and network_resolve: 0, or -EINVAL
 * and *e naming the entry (so corral refuses to start on a bad one). */
int egress_check_config(const struct config *cfg, struct err *e);
/* Borrows all but the result; audit may be NULL. */
int egress_new(struct loop *l, const struct config *cfg, const struct policy *pol,
               struct audit *audit, struct egress **ret, struct err *e);
void egress_free(struct egress *g);

/* A call's `network` argument: an array of at most EGRESS_GRANT_MAX host
 * patterns. 0, or -EINVAL and *e. */
int egress_check_grant(json_t *network, struct err *e);

/* Encoded frames to the runtime, one or more lines: 0, or a negative
 * errno when its input queue cannot take them. */
typedef int (*egress_lines_fn)(void *userdata, const char *lines, size_t len);
/* One run's connections; `grant` (checked, borrowed: copied) may be NULL
 * or empty: then every connection is refused. */
int egress_run_new(struct egress *g, json_t *grant, egress_lines_fn send, void *userdata,
                   struct egress_run **ret);
/* Closes what is open (audited), withdraws questions. Accepts NULL. */
void egress_run_free(struct egress_run *r);
void egress_run_set_asker(struct egress_run *r, const struct bridge_asker *asker);
/* For the audit log and the person's question (copied). */
void egress_run_set_names(struct egress_run *r, const char *sandbox, const char *client);
/* `network` of sandbox/exec, {"env": {...}} (new reference), or NULL when
 * the run has no grant. */
json_t *egress_run_exec_params(const struct egress_run *r);
/* A net/ notification from the runtime (its params borrowed). */
void egress_run_frame(struct egress_run *r, const char *method, json_t *params);
/* Connections open or being decided, for tests. */
size_t egress_run_connections(const struct egress_run *r);
