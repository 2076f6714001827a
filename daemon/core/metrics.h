/* The process's counters for /metrics (Prometheus text format 0.0.4):
 * MCP tool calls by tool, runs by tool and status with a latency
 * histogram, and bridge calls by server and decision. Label values come
 * from bounded sets (the tool table, the statuses, the configured servers)
 * and at most METRICS_SERIES_MAX series are kept per family; past that,
 * new label values are counted under "other". The loop's thread only. */
#pragma once

#include "core/buf.h"

#define METRICS_SERIES_MAX 512

/* A tools/call for a tool of corral's table. */
void metrics_tool_call(const char *tool);
/* A run_python or run_shell call ended with `status` after `seconds`. */
void metrics_run(const char *tool, const char *status, double seconds);
/* A call from sandboxed code to an upstream server: "ok", "error" (it was
 * allowed and failed) or "denied" (the policy refused it). */
void metrics_bridge(const char *server, const char *decision);
/* The counter families, appended to `b`. */
/* A connection of sandboxed code through the proxy, when it ends:
 * "allowed", "accepted" (a person said yes) or "denied", and its bytes. */
void metrics_network(const char *decision, unsigned long long bytes_out,
                     unsigned long long bytes_in);
void metrics_render(struct buf *b);
/* A line "name{k="v",...} value" appended to `b`, the values escaped as
 * the format asks; the labels are "k", "v" pairs ended by NULL. */
void metrics_line(struct buf *b, const char *name, double value, ...);
