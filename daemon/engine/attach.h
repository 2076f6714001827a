/* The hijacked attach stream of one container: after `POST .../attach` the
 * engine answers 101 and the connection becomes raw stdin one way and
 * multiplexed stdout/stderr the other ([stream,0,0,0,len32be] + payload).
 * A plain non-blocking socket in the event loop carries it. */
#pragma once

#include "engine/engine.h"

#include <stddef.h>
#include <stdint.h>

/* Demultiplexer for the 8-byte-header stream format; pure, for tests and
 * fuzzing. The callback gets payload pieces (a frame may arrive in pieces);
 * a negative return stops the feed and is returned. */
struct demux {
        uint8_t hdr[8];
        size_t hdr_len;
        uint32_t remaining;
        int stream;
};
typedef int (*demux_cb)(void *userdata, int stream, const char *p, size_t n);
/* Returns 0, the callback's negative value, or -EPROTO for a stream id other
 * than 0, 1 or 2. */
int demux_feed(struct demux *d, const char *p, size_t n, demux_cb cb, void *userdata);

struct attach;

struct attach_ops {
        /* The engine switched protocols; stdin may be written from now on. */
        void (*on_open)(void *userdata);
        /* Output: stream 1 stdout, 2 stderr. Return negative to stop reading
         * (closing the attach inside the callback stops it too). */
        int (*on_data)(void *userdata, int stream, const char *p, size_t n);
        /* The stream ended: e is NULL at a clean EOF (the container exited). */
        void (*on_close)(void *userdata, const struct err *e);
};

/* Connect and send the attach request; callbacks follow from the loop.
 * `max_out` bounds the bytes queued for the container's stdin. */
int attach_open(struct engine *eng, const char *container_id, const struct attach_ops *ops,
                void *userdata, size_t max_out, struct attach **ret, struct err *e);
/* Queue bytes for the container's stdin: -ENOBUFS past max_out. */
int attach_write(struct attach *a, const void *p, size_t n);
/* Close without any further callback. Accepts NULL. Safe inside any of
 * its callbacks: the attach is freed when the loop's round ends. */
void attach_close(struct attach *a);
