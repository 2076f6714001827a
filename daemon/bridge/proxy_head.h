/* The head of a request that sandboxed code sends to corral's proxy:
 * `CONNECT host:port` (a tunnel; TLS stays end to end) or an absolute-form
 * `GET http://host[:port]/path` (plain HTTP, which corral makes itself,
 * over HTTPS when a route says so). Parsed strictly and bounded; the head
 * that goes on to the origin is written anew, never copied through.
 * Pure functions: fuzzed (tests/fuzz/fuzz-proxy-head.c). */
#pragma once

#include "bridge/netrules.h"
#include "core/buf.h"
#include "runtime/protocol.h"

#include <stdbool.h>
#include <stddef.h>

#define PROXY_HEAD_MAX    RT_NET_HEAD_MAX /* bytes of a head, request line to blank line */
#define PROXY_HEADERS_MAX 100

struct proxy_header {
        const char *name, *value; /* into the head's copy, NUL-terminated */
};

struct proxy_head {
        char method[24];
        bool connect;
        char host[NET_HOST_MAX + 4]; /* lowercased; an IPv6 address without brackets */
        int port;
        char *path; /* origin-form ("/x?y"); NULL for CONNECT */
        struct proxy_header headers[PROXY_HEADERS_MAX];
        size_t n_headers;
        char *copy; /* the head's lines, cut in place */
};

/* Whether `s` is an HTTP token (a method, a header's name): not empty,
 * and only letters, digits and !#$%&'*+-.^_`|~. */
bool proxy_token(const char *s);

/* The whole head (`n` bytes, ending with the blank line). 0, or -EINVAL
 * with *status (400, 431, 505) and *why (a static string). An IPv4
 * address is taken only as a.b.c.d (not in hex, octal, fewer parts, or
 * inside an IPv6 address), so that a glob naming it cannot be passed. */
int proxy_head_parse(const char *p, size_t n, struct proxy_head *h, int *status, const char **why);
void proxy_head_free(struct proxy_head *h);

/* The head for the origin: origin-form request line (HTTP/1.1), Host
 * first (`host_value`), the request's headers without the hop-by-hop ones
 * (Connection and what it names, Proxy-*, Keep-Alive, TE, Trailer,
 * Upgrade) and without any of `set_names`, then `set_names`/`set_values`
 * (a NULL value: the header is dropped, not set), then `Connection:
 * close`. */
int proxy_head_write(const struct proxy_head *h, const char *host_value,
                     const char *const *set_names, const char *const *set_values, size_t n_set,
                     struct buf *out);

/* A complete answer from the proxy itself: status line, text/plain,
 * Connection: close, the body "corral: <why>\n". */
int proxy_answer(struct buf *out, int status, const char *why);
