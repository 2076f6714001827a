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

/* Compact encoding, the text json_dumps(msg, JSON_COMPACT) makes, with
 * long strings (a file's base64) copied in runs instead of a character at
 * a time; msg is borrowed. *ret_len is the text's length; NULL on
 * allocation failure. */
char *jrpc_dump(const json_t *msg, size_t *ret_len);

/* Compact one-line encoding with the trailing newline; steals `msg`.
 * Returns NULL on allocation failure. */
char *jrpc_encode(json_t *msg, size_t *ret_len);

/* Whether two ids name the same request: strings with the same bytes, or
 * numbers of the same value (1 and 1.0 alike; 1 and "1" differ). */
bool jrpc_id_equal(const json_t *a, const json_t *b);

/* The id of a line too long to parse, read as its bytes go by, so that the
 * refusal can be addressed (an SDK may put "id" last, after the large
 * params). A strict scanner with a few kilobytes of state and no tree: it
 * accepts the syntax jrpc_parse's decoder accepts (UTF-8, escapes,
 * surrogate pairs, numbers, its nesting limit; but no NUL byte anywhere),
 * so an id is only taken from a line that is one well-formed JSON value.
 * It is laxer than jrpc_parse in two harmless ways: a line with duplicate
 * keys, which jrpc_parse refuses with id null, is still refused under its
 * single "id"; and an empty or odd "method" is not checked (the line is
 * refused either way, only the id matters). */
#define JRPC_SCAN_DEPTH  2048 /* jansson's nesting limit: values at most this deep */
#define JRPC_SCAN_ID_MAX 1024 /* bytes of an id's JSON text kept; a longer id is not used */

struct jrpc_id_scan {
        unsigned char objects[JRPC_SCAN_DEPTH / 8]; /* per open container: object (1) or array */
        unsigned depth;                             /* containers open */
        unsigned char state;
        bool in_key;          /* the string being read is an object key */
        bool root_object;     /* the line's value is an object */
        unsigned char member; /* which member of the root object is being read */
        unsigned char ids;    /* "id" members of the root object (2: more than one) */
        bool method;          /* the root object has a string "method" */
        unsigned char hex;    /* digits of a \u escape read so far */
        unsigned cp;          /* their value */
        bool low;             /* the \u escape being read must be a low surrogate */
        unsigned char utf8_left, utf8_lo, utf8_hi; /* a UTF-8 sequence being read */
        const char *literal;                       /* true, false or null being read */
        unsigned char literal_at;
        char key[8]; /* the first bytes of a root member's key (decoded) */
        size_t key_len;
        bool capture; /* the root's "id" value is being kept */
        bool id_kept; /* ... and all of it was */
        size_t id_len;
        char id[JRPC_SCAN_ID_MAX];
};

enum jrpc_scan_result {
        JRPC_SCAN_INVALID,      /* not one well-formed JSON value */
        JRPC_SCAN_NO_ID,        /* JSON, but no id to use (none, null, not a string or number,
                                 * more than one, too long, not an object) */
        JRPC_SCAN_NOTIFICATION, /* an object with a string "method" and no "id" */
        JRPC_SCAN_ID,           /* *ret_id is the id (a new reference) */
};

void jrpc_id_scan_init(struct jrpc_id_scan *s);
void jrpc_id_scan_feed(struct jrpc_id_scan *s, const char *p, size_t n);
/* At the end of the line (its newline not fed). Then init again to reuse. */
enum jrpc_scan_result jrpc_id_scan_end(struct jrpc_id_scan *s, json_t **ret_id);
