/* The names the service answers to (mcp/http.c): the Host header of a TCP
 * request and the Origin a browser sends. Apart from the HTTP code so that
 * the unit tests and a fuzz target reach them.
 *
 * Both guard against DNS rebinding: a page of evil.example whose name
 * resolves to 127.0.0.1 sends "Host: evil.example:PORT" and an Origin of
 * its own. So the name must be one corral was told about, and what follows
 * it must be a port and nothing else ("localhost:evil" is not a port). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Whether `host` (`n` bytes, not NUL-ended) names this service: a name,
 * then nothing or ':' and a port of 1 to 5 digits, 1 to 65535. The name is
 * "localhost", "127.0.0.1" or "[::1]", or one of `names` (NULL-ended, or
 * NULL; an entry with a port matches that port only), any case; with
 * `any_name`, any well-formed name (letters, digits, "-._~", or an IPv6
 * address in brackets) too. */
bool http_host_allowed(const char *host, size_t n, char *const *names, bool any_name);

/* Whether `origin` (a NUL-ended Origin header) is a page of this machine:
 * "http://" or "https://", then a host http_host_allowed takes with no
 * names, and nothing after it. */
bool http_origin_loopback(const char *origin);
