/* Client for the Docker-compatible engine API (Podman and Docker Engine) over
 * a unix socket or TCP, driven by libcurl's multi interface inside the event
 * loop. Ordinary requests live here; the hijacked attach stream lives in
 * attach.h. Library code: it never writes to stdout. */
#pragma once

#include "core/loop.h"
#include "core/util.h"

#include <jansson.h>
#include <stdbool.h>

#define ENGINE_API_PREFIX "/v1.41"

struct engine;
struct engine_req;

struct engine_endpoint {
        char *unix_path; /* set for unix:// */
        char *host;      /* set for tcp:// */
        int port;
        char *display; /* for messages: the path or host:port */
};

/* Parse "unix:///path", "/path" or "tcp://host:port". */
int engine_endpoint_parse(const char *url, struct engine_endpoint *ret, struct err *e);
void engine_endpoint_done(struct engine_endpoint *ep);

/* Discovery in DESIGN's order: CONTAINER_HOST, DOCKER_HOST,
 * $XDG_RUNTIME_DIR/podman/podman.sock, /run/podman/podman.sock,
 * /var/run/docker.sock. Returns the first unix socket that accepts a
 * connection (or a tcp:// URL) as a newly allocated URL; -ENOENT with a
 * message listing what was tried when none answers. A variable that is set
 * is the only candidate: one that does not answer gives -ECONNREFUSED, one
 * that is not unix:// or tcp:// -EPROTONOSUPPORT, never the next. (The
 * explicit setting, CORRAL_ENGINE or --engine, is handled by the caller.) */
int engine_discover(char **ret_url, struct err *e);

int engine_new(struct loop *l, const char *url, size_t max_body, struct engine **ret,
               struct err *e);
void engine_free(struct engine *eng);
const struct engine_endpoint *engine_endpoint(const struct engine *eng);
struct loop *engine_loop(const struct engine *eng);

/* Completion: `status` is the HTTP status (0 when the request never got an
 * answer, then `e` says why and what to do); `body` is the parsed JSON body
 * or NULL (borrowed: incref to keep). Called exactly once unless cancelled. */
typedef void (*engine_done_cb)(void *userdata, long status, json_t *body, const struct err *e);

/* `path` is below the API prefix, e.g. "/containers/create". `body` is
 * stolen (may be NULL). */
int engine_request(struct engine *eng, const char *method, const char *path, json_t *body,
                   engine_done_cb cb, void *userdata, struct engine_req **ret);
/* Upload a file as the body (image import). */
int engine_request_file(struct engine *eng, const char *method, const char *path,
                        const char *content_type, int fd, engine_done_cb cb, void *userdata,
                        struct engine_req **ret);
/* The callback will not be called. Accepts NULL. */
void engine_request_cancel(struct engine_req *r);
/* `s` percent-encoded for a query value ('/' and RFC 3986's unreserved
 * characters stay as they are); caller frees, NULL without memory. */
char *engine_escape(const char *s);

/* Which engine answers: Podman and Docker differ where it matters to
 * corral (Docker's archive endpoints do not see tmpfs mounts). */
enum engine_kind { ENGINE_UNKNOWN, ENGINE_PODMAN, ENGINE_DOCKER };
enum engine_kind engine_kind(const struct engine *eng);
/* GET /_ping, which also records the engine's kind before `cb` runs (its
 * body is not JSON: `cb` gets NULL). */
int engine_probe(struct engine *eng, engine_done_cb cb, void *userdata, struct engine_req **ret);
/* The kind one header line of the ping's answer names: Podman's
 * Libpod-Api-Version, the Api-Version both send; else unknown (for tests). */
enum engine_kind engine_kind_of_header(const char *line, size_t len);

/* Run the loop until one request completes (for command-line tools; never
 * used while serving). Returns the HTTP status or a negative error; *ret_body
 * is a new reference or NULL. */
long engine_call(struct engine *eng, const char *method, const char *path, json_t *body,
                 json_t **ret_body, struct err *e);

/* The message for an engine error status, taken from the body's "message"
 * (both engines use it), bounded. */
const char *engine_error_message(json_t *body);

/* Advice for when the engine cannot be reached at all. */
void engine_unreachable(struct err *e, const struct engine_endpoint *ep, int os_errno);
