/* How MCP messages reach corral and leave it, apart from what they mean: a
 * transport frames and bounds messages and carries the answers back, the
 * server (mcp/server.c) parses and dispatches them. stdio is the one there
 * is; another (streamable HTTP) implements these operations and needs no
 * change to dispatch. */
#pragma once

#include "core/loop.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct transport;

/* What a transport tells its user, always from the loop. */
struct transport_events {
        /* One whole message: `len` bytes at `text`, framing removed, not
         * parsed, not NUL-terminated, valid during the call only. */
        void (*message)(void *userdata, const char *text, size_t len);
        /* A message over the transport's limit was skipped: `id` is the
         * request's (borrowed) when it could be read from the bytes that
         * went by, else NULL; a notification wants no answer. */
        void (*too_long)(void *userdata, json_t *id, bool notification);
        /* No more input: the client closed it, or reading failed. Called
         * once, after the transport stopped reading; sending still works. */
        void (*ended)(void *userdata);
};

struct transport_ops {
        /* Queues `msg` (stolen) for the client and writes what it can
         * without blocking. A message that cannot be encoded, or that does
         * not fit the bounded queue, is dropped (and logged). */
        void (*send)(struct transport *t, json_t *msg);
        /* Stops reading: no more events. Idempotent. */
        void (*stop)(struct transport *t);
        /* Writes what is queued, blocking up to timeout_ms (for exit). */
        void (*flush)(struct transport *t, int timeout_ms);
        /* Stops and frees; what is still queued is lost. Accepts NULL. */
        void (*free)(struct transport *t);
};

/* Every transport starts with this. */
struct transport {
        const struct transport_ops *ops;
};

static inline void transport_send(struct transport *t, json_t *msg)
{
        t->ops->send(t, msg);
}

static inline void transport_stop(struct transport *t)
{
        t->ops->stop(t);
}

static inline void transport_flush(struct transport *t, int timeout_ms)
{
        t->ops->flush(t, timeout_ms);
}

static inline void transport_free(struct transport *t)
{
        if (t)
                t->ops->free(t);
}

/* Newline-delimited JSON over a pair of file descriptors (stdin and stdout
 * when serving; both are made non-blocking, neither is closed). A line may
 * hold at most `max` bytes; a longer one is skipped to its newline in
 * bounded memory, and reported by too_long when it ends. `events` and
 * `userdata` are kept. in_fd may be a regular file or /dev/null, which
 * epoll cannot watch: it is then read between rounds of the loop. */
int transport_stdio_new(struct loop *l, int in_fd, int out_fd, size_t max,
                        const struct transport_events *events, void *userdata,
                        struct transport **ret);
