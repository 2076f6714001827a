/* The one JSON-RPC 2.0 codec, newline-delimited, used on every link: the MCP
 * host (corral as server), sandbox runtimes (frames) and, later, upstream
 * servers (corral as client). Input is untrusted: duplicates are rejected,
 * the shape is validated, and the caller bounds the line length. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "core/util.h"

#define JRPC_PARSE_ERROR      -32700
#define JRPC_INVALID_REQUEST  -32600
#define JRPC_METHOD_NOT_FOUND -32601
#define JRPC_INVALID_PARAMS   -32602
#define JRPC_INTERNAL_ERROR   -32603

enum jrpc_kind { JRPC_REQUEST, JRPC_NOTIFICATION, JRPC_RESULT, JRPC_ERROR };

struct jrpc_msg {
        enum jrpc_kind kind;
        json_t *root;       /* owned; everything below borrows from it */
        json_t *id;         /* requests and responses (may be JSON null on errors) */
        const char *method; /* requests and notifications */
        json_t *params;     /* object or array, or NULL when absent */
        json_t *result;     /* JRPC_RESULT */
        json_t *error;      /* JRPC_ERROR */
};

/* Parse one line. On failure returns a JSON-RPC error code (negative) with a
 * message in `e`, and *ret_id is set to the request id when one could be
 * read (so the error can be addressed), else NULL; *ret_id is a new ref. */
int jrpc_parse(const char *line, size_t len, struct jrpc_msg *ret, json_t **ret_id, struct err *e);
void jrpc_msg_done(struct jrpc_msg *m);

/* Builders; they steal `result`, `params` and `data`, and copy `id` (which
 * may be NULL for JSON null). */
json_t *jrpc_result(json_t *id, json_t *result);
json_t *jrpc_error(json_t *id, int code, const char *message, json_t *data);
json_t *jrpc_request(json_int_t id, const char *method, json_t *params);
json_t *jrpc_notification(const char *method, json_t *params);

/* Compact one-line encoding with the trailing newline; steals `msg`.
 * Returns NULL on allocation failure. */
char *jrpc_encode(json_t *msg, size_t *ret_len);
