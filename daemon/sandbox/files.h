/* Files in and out of a sandbox's /workspace. The sandbox's runtime moves
 * them (sandbox/file/read and sandbox/file/write requests on the frame
 * channel, runtime/README.md), with the sandbox's own rights, as base64 in
 * chunks that fit max_frame; nothing is ever written to the host's disk.
 * Every path is confined to /workspace: no "..", nothing absolute elsewhere
 * (files_path, here), and no symlink that leads out of it (the runtime
 * walks the path a component at a time and follows a link only inside). */
#pragma once

#include "core/buf.h"
#include "core/jsonrpc.h"
#include "core/util.h"
#include "runtime/protocol.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>

#define FILES_ROOT      "/workspace"
#define FILES_PATH_MAX  1024 /* bytes of a path under /workspace */
#define FILES_NAME_MAX  255  /* bytes of one component */
#define FILES_DEPTH_MAX 32   /* components */

/* `in` (from outside) as an absolute, lexically normalised path under
 * /workspace ("a//b/./c" -> "/workspace/a/b/c"); a relative path starts at
 * /workspace. -EINVAL and *e for "..", NUL or control characters,
 * invalid UTF-8, a path outside /workspace, or one too long or too deep;
 * /workspace itself is accepted only when allow_root. */
int files_path(const char *in, bool allow_root, char *out, size_t out_size, struct err *e);

/* What an operation came to. */
struct files_result {
        int error;           /* 0, or a negative errno: ENOENT, EISDIR, ENOTDIR, EPERM
                              * (a symlink out of /workspace), ELOOP, EINVAL, EFBIG, ENOSPC, EIO */
        const char *message; /* for error: a sentence a person can act on */
        const char *path;    /* the real path (symlinks inside /workspace followed) */
        const char *data;    /* read: the file's bytes */
        size_t len;
        /* read: the base64 of data[0..len) as the runtime sent it, when it
         * is exactly what base64_encode would write (else NULL): an answer
         * that needs the whole file as base64 takes it as it is. */
        const char *b64;
        size_t b64_len;
};
typedef void (*files_cb)(void *userdata, const struct files_result *r);

struct files_op;
struct sandbox;

/* A frame's bytes besides the base64 of the chunk it carries, at most
 * (the envelope of a read answer is bounded by it). */
#define FILES_FRAME_SLACK RT_FILE_SLACK_MAX

/* The bytes of one chunk of a file request under max_frame, the same on
 * both sides: a quarter of the frame (at most FILES_FRAME_SLACK) for the
 * rest, the base64 of the chunk in what is left. */
size_t files_chunk(unsigned long long max_frame);

/* Writes `len` bytes (copied) to `path` (from files_path) in sandbox `s`,
 * making missing parent directories; an existing file is replaced. The
 * sandbox's runtime does it (sandbox/file/write, a chunk a request, each
 * fitting max_frame), with the sandbox's own rights, following symlinks
 * only inside /workspace. */
int files_write(struct sandbox *s, const char *path, const void *data, size_t len, files_cb cb,
                void *userdata, struct files_op **ret);
/* Reads the regular file `path` of sandbox `s`, at most `max` bytes (EFBIG
 * beyond, before anything is moved): sandbox/file/read, a chunk a request. */
int files_read(struct sandbox *s, const char *path, size_t max, files_cb cb, void *userdata,
               struct files_op **ret);
/* The callback will not be called. Accepts NULL. */
void files_op_cancel(struct files_op *op);

/* The runtime's error object for a file request (untrusted): a negative
 * errno, and in msg the words users see for `asked` (the path as given);
 * `max` is the read's limit. */
int files_error_message(const json_t *error, const char *asked, bool write, size_t max, char *msg,
                        size_t size);
/* A chunk of a read from the runtime's result (untrusted): its bytes
 * appended to `got` (at most `max` in all), the file's size and real path
 * (borrowed from result). The number of bytes taken, or -EFBIG past max,
 * -EBADMSG for a malformed answer. */
int files_read_chunk(const json_t *result, size_t max, struct buf *got, long long *ret_size,
                     const char **ret_path);

/* One frame from the runtime (untrusted; `line` without its newline)
 * parsed as jrpc_parse would, with the same tree and the same errors, but
 * quicker for a file's read answer: the runtime puts a chunk's base64 last
 * ({..., "result": {..., "data": "BASE64"}}), and when a frame ends in a
 * string of at least FILES_FAST_MIN base64 characters under a last key
 * "data" of its last member, only the rest (the envelope, with "data": "")
 * goes through jansson's lexer, and the span, checked to be base64's
 * alphabet only, is put in as the string it is. A frame of any other layout,
 * or whose envelope does not parse, goes through jrpc_parse whole. */
#define FILES_FAST_MIN 256
int files_frame_parse(const char *line, size_t len, struct jrpc_msg *ret, json_t **ret_id,
                      struct err *e);

/* Whether text[0..tlen) is the very base64 base64_encode writes for
 * raw[0..n) (which it decodes to): canonical length and padding, and no
 * bits set past the data in its last group. */
bool files_b64_canonical(const char *raw, size_t n, const char *text, size_t tlen);

/* A MIME type for a file name, from its extension ("image/png", ...), or
 * NULL when it has none that corral knows. */
const char *files_mime_type(const char *name);
