/* How messages reach one upstream server and come back: the one interface
 * the MCP client (client.c) talks through, with two implementations, the
 * server's stdio (stdio.c, over a child process of process.c) and
 * streamable HTTP (transport_http.c, over http.c). A transport knows lines
 * and links, not MCP.
 *
 * Events go up through `struct transport_events`, always from the loop,
 * each as the last thing the transport does in that call: a handler may
 * close the transport (which frees it) and nothing of it is touched after. */
#pragma once

#include "core/util.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct loop;
struct upstream;
struct transport;

struct transport_events {
        /* One message from the server (not NUL-terminated); `msg` NULL: one
         * over the bound of `len` bytes was dropped. */
        void (*message)(void *userdata, const char *msg, size_t len);
        /* The message that carried request `id` (0: none) failed (`e`), or
         * its answer ended without the response (`e` NULL). `lost`: the
         * link is of no more use with it (HTTP: the session expired, the
         * server cannot be reached). */
        void (*failed)(void *userdata, json_int_t id, const struct err *e, bool lost);
        /* The link is over: `how` completes "server 'x' ..." ("exited with
         * status 1"). */
        void (*ended)(void *userdata, const char *how);
        /* A stop (ops->stop) is complete. */
        void (*stopped)(void *userdata);
};

struct transport_ops {
        /* Send one encoded message. `id`: the request id it carries (0:
         * none); `initialize`: it is the handshake's request. -ENOBUFS when
         * it does not fit in what is queued for the server. */
        int (*send)(struct transport *t, const char *msg, size_t len, json_int_t id,
                    bool initialize);
        /* The answer to `id` is no longer wanted. May be NULL. */
        void (*forget)(struct transport *t, json_int_t id);
        /* The handshake agreed on protocol `version` (HTTP: named on every
         * later request). May be NULL. */
        void (*agreed)(struct transport *t, const char *version);
        /* notifications/initialized is sent: the server may send messages
         * of its own (HTTP: on a stream of their own). May be NULL. */
        void (*opened)(struct transport *t);
        /* Whether the link is visibly over though no event said so yet (a
         * closed stdout). May be NULL. */
        bool (*gone)(struct transport *t);
        /* The last line the server wrote to stderr (masked), or NULL. May
         * be NULL. */
        const char *(*last_words)(struct transport *t);
        /* End politely at shutdown; true when events->stopped follows. No
         * other event follows. */
        bool (*stop)(struct transport *t);
        /* End now (what runs is killed) and free; no event follows. */
        void (*close)(struct transport *t);
};

struct transport {
        const struct transport_ops *ops;
        const struct transport_events *ev;
        void *userdata;
};

/* Spawn the stdio server of `u` (process.c) and talk over its pipes. */
int stdio_transport_open(struct upstream *u, const struct transport_events *ev, void *userdata,
                         struct transport **ret, struct err *e);
/* Connect to the streamable HTTP server of `u`. */
int http_transport_open(struct upstream *u, const struct transport_events *ev, void *userdata,
                        struct transport **ret, struct err *e);
