#include "sandbox/files.h"

#include "core/log.h"
#include "sandbox/internal.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/types.h>
#include <stdio.h>
#include <string.h>

/* ---- paths */

int files_path(const char *in, bool allow_root, char *out, size_t out_size, struct err *e)
{
        char shown[120];
        str_printable(in, shown, sizeof(shown));
        for (const unsigned char *p = (const unsigned char *)in; *p; p++)
                if (*p < 0x20 || *p == 0x7f) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "path \"%s\" has a control character", shown);
                }
        if (!utf8_text(in, strlen(in))) {
                return err_set(e, ERR_INVALID, -EINVAL, "path \"%s\" is not valid UTF-8", shown);
        }
        const char *rel = in;
        if (in[0] == '/') {
                size_t n = strlen(FILES_ROOT);
                if (strncmp(in, FILES_ROOT, n) != 0 || (in[n] != '\0' && in[n] != '/')) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "path \"%s\" is outside %s: give a path relative to %s, or "
                                       "one that starts with %s/",
                                       shown, FILES_ROOT, FILES_ROOT, FILES_ROOT);
                }
                rel = in + n;
        }
        size_t len = (size_t)snprintf(out, out_size, "%s", FILES_ROOT);
        int depth = 0;
        const char *p = rel;
        while (*p) {
                while (*p == '/')
                        p++;
                const char *end = strchrnul(p, '/');
                size_t n = (size_t)(end - p);
                if (n == 0)
                        break;
                if (n == 1 && p[0] == '.') {
                        p = end;
                        continue;
                }
                if (n == 2 && p[0] == '.' && p[1] == '.') {
                        return err_set(
                            e, ERR_INVALID, -EINVAL,
                            "path \"%s\" contains \"..\": paths stay inside %s; give one "
                            "without \"..\"",
                            shown, FILES_ROOT);
                }
                if (n > FILES_NAME_MAX || ++depth > FILES_DEPTH_MAX || len + 1 + n >= out_size ||
                    len + 1 + n > strlen(FILES_ROOT) + FILES_PATH_MAX) {
                        return err_set(
                            e, ERR_INVALID, -EINVAL,
                            "path \"%s\" is too long (at most %d bytes, %d levels, %d bytes "
                            "a name)",
                            shown, FILES_PATH_MAX, FILES_DEPTH_MAX, FILES_NAME_MAX);
                }
                out[len++] = '/';
                memcpy(out + len, p, n);
                len += n;
                out[len] = '\0';
                p = end;
        }
        if (depth == 0 && !allow_root) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "path \"%s\" names %s itself: give a file's path", shown,
                               FILES_ROOT);
        }
        return 0;
}

/* ---- operations through the sandbox's runtime */

/* What the runtime's error for a file request comes to: a negative errno
 * and the words users see (as they were when the engine did the work). */
int files_error_message(const json_t *error, const char *asked, bool write, size_t max, char *msg,
                        size_t size)
{
        const json_t *data = json_object_get(error, "data");
        const char *kind = json_string_value(json_object_get(data, "kind"));
        const char *at = json_string_value(json_object_get(data, "at"));
        const char *said = json_string_value(json_object_get(error, "message"));
        const char *what = write ? "writing" : "reading";
        char shown_at[FILES_PATH_MAX + 64], shown[200], said_shown[300];
        str_printable(at ? at : asked, shown_at, sizeof(shown_at));
        str_printable(said ? said : "no reason given", said_shown, sizeof(said_shown));
        int r;
        if (!kind) {
                r = -EIO;
                snprintf(msg, size, "%s %s: %s", what, asked, said_shown);
        } else if (strcmp(kind, "ENOENT") == 0) {
                r = -ENOENT;
                snprintf(msg, size, "no such file or directory: %s", asked);
        } else if (strcmp(kind, "EPERM") == 0) {
                const char *target = json_string_value(json_object_get(data, "target"));
                str_printable(target ? target : "?", shown, sizeof(shown));
                r = -EPERM;
                snprintf(msg, size,
                         "%s: %s is a symbolic link to %s, outside %s; corral's file tools stay "
                         "inside %s",
                         asked, shown_at, shown, FILES_ROOT, FILES_ROOT);
        } else if (strcmp(kind, "ELOOP") == 0) {
                r = -ELOOP;
                snprintf(msg, size, "%s: too many symbolic links", asked);
        } else if (strcmp(kind, "ENOTDIR") == 0) {
                r = -ENOTDIR;
                snprintf(msg, size, "%s: %s is not a directory", asked, shown_at);
        } else if (strcmp(kind, "EISDIR") == 0) {
                r = -EISDIR;
                snprintf(msg, size,
                         write ? "%s is a directory" : "%s is a directory (list_files lists it)",
                         asked);
        } else if (strcmp(kind, "EINVAL") == 0 && said && strcmp(said, "not a regular file") == 0) {
                r = -EINVAL;
                snprintf(msg, size, "%s is not a regular file", asked);
        } else if (strcmp(kind, "EFBIG") == 0 && !write) {
                json_t *bytes = json_object_get(data, "size");
                r = -EFBIG;
                snprintf(msg, size,
                         "%s is %lld bytes, over the %zu-byte limit of a file moved in or out "
                         "(file_max_bytes): read part of it with run_shell (head -c, tail -c), "
                         "or raise the limit",
                         asked,
                         json_is_integer(bytes) ? (long long)json_integer_value(bytes) : -1LL, max);
        } else if (strcmp(kind, "ENOSPC") == 0 || strcmp(kind, "EFBIG") == 0) {
                r = -ENOSPC;
                snprintf(msg, size,
                         "%s %s: no space left in %s (its size is the workspace_size setting)",
                         what, asked, FILES_ROOT);
        } else {
                r = strcmp(kind, "EINVAL") == 0 ? -EINVAL : -EIO;
                snprintf(msg, size, "%s %s: %s", what, asked, said_shown);
        }
        utf8_scrub(msg);
        return r;
}

int files_read_chunk(const json_t *result, size_t max, struct buf *got, long long *ret_size,
                     const char **ret_path)
{
        const json_t *data = json_object_get(result, "data");
        const json_t *size = json_object_get(result, "size");
        const char *path = json_string_value(json_object_get(result, "path"));
        if (!json_is_string(data) || !json_is_integer(size) || json_integer_value(size) < 0 ||
            !path || strncmp(path, FILES_ROOT "/", strlen(FILES_ROOT "/")) != 0)
                return -EBADMSG;
        size_t before = got->len;
        size_t n = json_string_length(data);
        if (n / 4 * 3 > max - got->len + 3)
                return -EFBIG;
        int r = base64_decode(got, json_string_value(data), n);
        if (r == -ENOBUFS)
                return -EFBIG;
        if (r < 0) {
                got->len = before;
                return -EBADMSG;
        }
        *ret_size = json_integer_value(size);
        *ret_path = path;
        return (int)(got->len - before > INT_MAX ? INT_MAX : got->len - before);
}

/* ---- the runtime's frames */

/* Base64's alphabet, without '=' (base64_std) and with it (base64_char). */
static const unsigned char base64_std[256] = {
    ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1, ['0' ... '9'] = 1, ['+'] = 1, ['/'] = 1,
};

static const bool base64_char[256] = {
    ['A' ... 'Z'] = true, ['a' ... 'z'] = true, ['0' ... '9'] = true,
    ['+'] = true,         ['/'] = true,         ['='] = true,
};

/* The last member of object `o` (jansson keeps members in the order they
 * came): its key's length, or -1 when it has none. */
static ssize_t last_member(json_t *o, const char **key, json_t **value)
{
        ssize_t n = -1;
        for (void *it = json_object_iter(o); it; it = json_object_iter_next(o, it)) {
                *key = json_object_iter_key(it);
#if JANSSON_VERSION_HEX >= 0x020e00 /* keys may hold NUL from 2.14 on */
                n = (ssize_t)json_object_iter_key_len(it);
#else
                n = (ssize_t)strlen(*key);
#endif
                *value = json_object_iter_value(it);
        }
        return n;
}

int files_frame_parse(const char *line, size_t len, struct jrpc_msg *ret, json_t **ret_id,
                      struct err *e)
{
        static const char key[] = ",\"data\":\"", tail[] = "\"}}";
        const size_t klen = sizeof(key) - 1, tlen = sizeof(tail) - 1;
        if (len < klen + FILES_FAST_MIN + tlen || memcmp(line + len - tlen, tail, tlen) != 0)
                return jrpc_parse(line, len, ret, ret_id, e);
        size_t end = len - tlen, start = end;
        while (start > 0 && base64_char[(unsigned char)line[start - 1]])
                start--;
        size_t n = end - start;
        /* The bytes before the span: a comma, the key "data", a colon and
         * the string's quote. Valid JSON with them there has them as these
         * tokens: a comma or quote inside a string would leave `data` bare.
         * So if the envelope (the frame without the span) parses, the
         * frame parses to the same tree with the span in that string: base64
         * characters need no escape and are valid UTF-8. */
        if (n < FILES_FAST_MIN || n % 4 != 0 || start < klen || start - klen > FILES_FRAME_SLACK ||
            memcmp(line + start - klen, key, klen) != 0)
                return jrpc_parse(line, len, ret, ret_id, e);
        char *env = malloc(start + tlen);
        if (!env)
                return jrpc_parse(line, len, ret, ret_id, e);
        memcpy(env, line, start);
        memcpy(env + start, tail, tlen);
        struct jrpc_msg m;
        json_t *id = NULL, *inner = NULL, *value = NULL, *str = NULL;
        const char *k = NULL;
        struct err ignored = {0};
        int r = jrpc_parse(env, start + tlen, &m, &id, &ignored);
        free(env);
        if (r < 0) {
                /* Malformed whole as well: its error as jrpc_parse gives it. */
                json_decref(id);
                return jrpc_parse(line, len, ret, ret_id, e);
        }
        /* The empty string is the last member's ("data") of the object that
         * is the frame's last member: that is where the span goes. */
        if (last_member(m.root, &k, &inner) < 0 || !json_is_object(inner) ||
            last_member(inner, &k, &value) != 4 || memcmp(k, "data", 4) != 0 ||
            !json_is_string(value) || json_string_length(value) != 0 ||
            !(str = json_stringn_nocheck(line + start, n)) ||
            json_object_set_new(inner, "data", str) < 0) {
                jrpc_msg_done(&m);
                json_decref(id);
                return jrpc_parse(line, len, ret, ret_id, e);
        }
        *ret = m;
        *ret_id = id;
        return 0;
}

bool files_b64_canonical(const char *raw, size_t n, const char *text, size_t tlen)
{
        if (!text || tlen != (n + 2) / 3 * 4)
                return false;
        if (n == 0)
                return true;
        /* The decoder also takes base64url's '-' and '_', and whitespace:
         * every group but the last in the standard alphabet, no padding. */
        unsigned plain = 1;
        for (size_t i = 0; i + 4 < tlen; i++)
                plain &= base64_std[(unsigned char)text[i]];
        if (!plain)
                return false;
        /* The length holds every group but the last whole; that one must
         * be what encoding the last bytes gives (padding, no stray bits). */
        size_t tail = n % 3 ? n % 3 : 3;
        struct buf last;
        buf_init(&last, 8);
        bool same = base64_encode(&last, raw + n - tail, tail) == 0 && last.len == 4 &&
                    memcmp(last.data, text + tlen - 4, 4) == 0;
        buf_free(&last);
        return same;
}

struct files_op {
        struct sandbox *sb;
        bool write;
        char asked[FILES_PATH_MAX + 64]; /* the path as given, for messages */
        char real[FILES_PATH_MAX + 64];  /* where it led */
        files_cb cb;
        void *userdata;
        struct sandbox_ask *ask;
        size_t chunk; /* bytes a request moves, from max_frame */
        /* write: data[0..len), off of it sent */
        char *data;
        size_t len, off;
        /* read: what came, at most max; its base64 as it came, while each
         * chunk's is canonical and ends a whole group (b64_ok) */
        struct buf got;
        size_t max;
        struct buf b64;
        bool b64_ok;
};

static void op_free(struct files_op *op)
{
        sandbox_ask_cancel(op->ask);
        free(op->data);
        buf_free(&op->got);
        buf_free(&op->b64);
        free(op);
}

void files_op_cancel(struct files_op *op)
{
        if (op)
                op_free(op);
}

static void op_done(struct files_op *op, int error, const char *message, const char *data,
                    size_t len)
{
        struct files_result r = {
            .error = error,
            .message = message,
            .path = op->real,
            .data = data,
            .len = len,
        };
        if (data && !op->write && op->b64_ok && len == op->got.len) {
                r.b64 = op->b64.data ? op->b64.data : "";
                r.b64_len = op->b64.len;
        }
        op->ask = NULL;
        /* Freed after the callback: r points into it. */
        op->cb(op->userdata, &r);
        op_free(op);
}

static _printf_(3, 4) void op_fail(struct files_op *op, int error, const char *fmt, ...)
{
        char msg[1200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        utf8_scrub(msg);
        op_done(op, error, msg, NULL, 0);
}

static int op_next(struct files_op *op);

/* The runtime answered a request of the operation: on to the next chunk,
 * or done. */
static void op_answered(void *userdata, json_t *result, const struct err *e)
{
        struct files_op *op = userdata;
        const char *what = op->write ? "writing" : "reading";
        op->ask = NULL;
        if (!result) {
                const json_t *error = sandbox_ask_error(e);
                if (!error) {
                        op_fail(op, -EIO, "%s %s: %s", what, op->asked,
                                e && e->code == -ENOTCONN ? "the sandbox is gone"
                                : e                       ? e->msg
                                                          : "no answer");
                        return;
                }
                char msg[1200];
                int k = files_error_message(error, op->asked, op->write, op->max, msg, sizeof(msg));
                op_done(op, k, msg, NULL, 0);
                return;
        }
        const char *path = json_string_value(json_object_get(result, "path"));
        if (!path || strncmp(path, FILES_ROOT "/", strlen(FILES_ROOT "/")) != 0 ||
            strlen(path) >= sizeof(op->real)) {
                op_fail(op, -EIO, "%s %s: the sandbox's runtime gave no path", what, op->asked);
                return;
        }
        snprintf(op->real, sizeof(op->real), "%s", path);
        if (op->write) {
                if (op->off >= op->len) {
                        op_done(op, 0, NULL, NULL, 0);
                        return;
                }
        } else {
                long long size = 0;
                int n = files_read_chunk(result, op->max, &op->got, &size, &path);
                if (n == -EFBIG || (n >= 0 && (unsigned long long)size > op->max)) {
                        op_fail(op, -EFBIG,
                                "%s is %lld bytes, over the %zu-byte limit of a file moved in or "
                                "out (file_max_bytes): read part of it with run_shell (head -c, "
                                "tail -c), or raise the limit",
                                op->asked, n >= 0 ? size : (long long)op->got.len, op->max);
                        return;
                }
                if (n < 0) {
                        op_fail(op, -EIO, "%s %s: the sandbox's runtime sent a malformed answer",
                                what, op->asked);
                        return;
                }
                /* Its base64 kept for an answer that needs it, while the
                 * chunks join up to the file's base64. */
                const json_t *text = json_object_get(result, "data");
                size_t at = op->got.len - (size_t)n;
                if (op->b64_ok &&
                    (at % 3 != 0 ||
                     !files_b64_canonical(op->got.data + at, (size_t)n, json_string_value(text),
                                          json_string_length(text)) ||
                     buf_append(&op->b64, json_string_value(text), json_string_length(text)) < 0)) {
                        op->b64_ok = false;
                        buf_free(&op->b64);
                }
                /* The size the file had is the end; so is an empty chunk (it
                 * shrank meanwhile). A short one is not: the runtime may cut
                 * a chunk to fit its own frames. */
                if (n == 0 || op->got.len >= (unsigned long long)size) {
                        op_done(op, 0, NULL, op->got.data ? op->got.data : "", op->got.len);
                        return;
                }
        }
        if (op_next(op) < 0)
                op_fail(op, -EIO, "%s %s: the sandbox's runtime cannot be asked", what, op->asked);
}

size_t files_chunk(unsigned long long max_frame)
{
        unsigned long long slack =
            max_frame / 4 < FILES_FRAME_SLACK ? max_frame / 4 : FILES_FRAME_SLACK;
        return (size_t)((max_frame - slack) / 4 * 3);
}

/* Asks for the next chunk: 0, or a negative errno when it cannot be sent. */
static int op_next(struct files_op *op)
{
        /* The path as the runtime takes it: relative to /workspace. */
        const char *rel = op->asked + strlen(FILES_ROOT "/");
        json_t *params;
        if (op->write) {
                size_t n = op->len - op->off < op->chunk ? op->len - op->off : op->chunk;
                struct buf b64;
                buf_init(&b64, (n + 2) / 3 * 4 + 1);
                if (base64_encode(&b64, op->data + op->off, n) < 0) {
                        buf_free(&b64);
                        return -ENOMEM;
                }
                params = json_pack("{s:s, s:I, s:s%}", "path", rel, "offset", (json_int_t)op->off,
                                   "data", b64.data ? b64.data : "", b64.len);
                buf_free(&b64);
                op->off += n;
        } else {
                params = json_pack("{s:s, s:I, s:I, s:I}", "path", rel, "offset",
                                   (json_int_t)op->got.len, "length", (json_int_t)op->chunk, "max",
                                   (json_int_t)op->max);
        }
        if (!params)
                return -ENOMEM;
        return sandbox_ask(op->sb, op->write ? "sandbox/file/write" : "sandbox/file/read", params,
                           op_answered, op, &op->ask);
}

static int op_start(struct sandbox *s, bool write, const char *path, files_cb cb, void *userdata,
                    struct files_op **ret)
{
        /* A path from files_path, below /workspace: at least one component. */
        size_t root = strlen(FILES_ROOT);
        if (strncmp(path, FILES_ROOT, root) || path[root] != '/' || !path[root + 1] ||
            strlen(path) >= sizeof(((struct files_op *)0)->asked))
                return -EINVAL;
        struct files_op *op = *ret;
        op->sb = s;
        op->write = write;
        op->cb = cb;
        op->userdata = userdata;
        snprintf(op->asked, sizeof(op->asked), "%s", path);
        snprintf(op->real, sizeof(op->real), "%s", path);
        /* A chunk's base64, and the frame around it, fit max_frame. */
        op->chunk = files_chunk(s->mgr->cfg->max_frame);
        /* The first request is made here: a failure is returned, not called back. */
        return op_next(op);
}

int files_write(struct sandbox *s, const char *path, const void *data, size_t len, files_cb cb,
                void *userdata, struct files_op **ret)
{
        struct files_op *op = calloc(1, sizeof(*op));
        if (!op || !(op->data = malloc(len ? len : 1))) {
                free(op);
                return -ENOMEM;
        }
        memcpy(op->data, data, len);
        op->len = len;
        buf_init(&op->got, 0);
        buf_init(&op->b64, 0);
        int r = op_start(s, true, path, cb, userdata, &op);
        if (r < 0) {
                op->ask = NULL;
                op_free(op);
                return r;
        }
        *ret = op;
        return 0;
}

int files_read(struct sandbox *s, const char *path, size_t max, files_cb cb, void *userdata,
               struct files_op **ret)
{
        struct files_op *op = calloc(1, sizeof(*op));
        if (!op)
                return -ENOMEM;
        op->max = max;
        buf_init(&op->got, max);
        buf_init(&op->b64, max / 3 * 4 + 4);
        op->b64_ok = true;
        int r = op_start(s, false, path, cb, userdata, &op);
        if (r < 0) {
                op->ask = NULL;
                op_free(op);
                return r;
        }
        *ret = op;
        return 0;
}

const char *files_mime_type(const char *name)
{
        static const struct {
                const char *ext, *mime;
        } types[] = {
            {".png", "image/png"},       {".jpg", "image/jpeg"},
            {".jpeg", "image/jpeg"},     {".gif", "image/gif"},
            {".webp", "image/webp"},     {".svg", "image/svg+xml"},
            {".txt", "text/plain"},      {".md", "text/markdown"},
            {".csv", "text/csv"},        {".json", "application/json"},
            {".html", "text/html"},      {".xml", "application/xml"},
            {".pdf", "application/pdf"}, {".py", "text/x-python"},
            {".log", "text/plain"},      {".zip", "application/zip"},
            {".gz", "application/gzip"}, {".tar", "application/x-tar"},
            {".wav", "audio/wav"},       {".mp3", "audio/mpeg"},
        };
        const char *dot = strrchr(name, '.');
        if (!dot || strchr(dot, '/'))
                return NULL;
        for (size_t i = 0; i < ARRAY_SIZE(types); i++)
                if (strcasecmp(dot, types[i].ext) == 0)
                        return types[i].mime;
        return NULL;
}
