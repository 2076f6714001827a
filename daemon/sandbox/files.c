#include "sandbox/files.h"

#include "core/log.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define SANDBOX_UID   65534
#define TAR_SLACK     (64 * 1024) /* headers around one file's bytes in a GET answer */
#define MAX_HOPS      40          /* symlinks followed in one walk */
#define GO_MODE_DIR   (1U << 31)  /* Go's os.FileMode bits, as both engines send them */
#define GO_MODE_LINK  (1U << 27)
#define GO_MODE_OTHER ((1U << 26) | (1U << 25) | (1U << 24) | (1U << 21) | (1U << 19))

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

/* ---- tar streams */

static la_ssize_t tar_write_cb(struct archive *a, void *userdata, const void *p, size_t n)
{
        struct buf *out = userdata;
        if (buf_append(out, p, n) < 0) {
                archive_set_error(a, ENOBUFS, "the archive does not fit");
                return -1;
        }
        return (la_ssize_t)n;
}

static struct archive_entry *new_entry(const char *name, mode_t type, mode_t perm, long long size)
{
        struct archive_entry *e = archive_entry_new();
        if (!e)
                return NULL;
        archive_entry_set_pathname_utf8(e, name);
        archive_entry_set_filetype(e, type);
        archive_entry_set_perm(e, perm);
        archive_entry_set_size(e, size);
        archive_entry_set_uid(e, SANDBOX_UID);
        archive_entry_set_gid(e, SANDBOX_UID);
        archive_entry_set_mtime(e, time(NULL), 0);
        return e;
}

int files_tar_build(const char *name, bool make_dirs, const void *data, size_t len, struct buf *out)
{
        struct archive *a = archive_write_new();
        if (!a)
                return -ENOMEM;
        int r = -EIO;
        /* pax: long names and sizes past 8 GiB without ustar's limits */
        if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
            archive_write_set_bytes_per_block(a, 0) != ARCHIVE_OK ||
            archive_write_open(a, out, NULL, tar_write_cb, NULL) != ARCHIVE_OK)
                goto out;
        if (make_dirs) {
                char dir[FILES_PATH_MAX + 1];
                for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/')) {
                        size_t n = (size_t)(s - name);
                        if (n == 0 || n >= sizeof(dir))
                                continue;
                        memcpy(dir, name, n);
                        dir[n] = '\0';
                        struct archive_entry *e = new_entry(dir, AE_IFDIR, 0755, 0);
                        int w = e ? archive_write_header(a, e) : ARCHIVE_FATAL;
                        archive_entry_free(e);
                        if (w != ARCHIVE_OK)
                                goto out;
                }
        }
        struct archive_entry *e = new_entry(name, AE_IFREG, 0644, (long long)len);
        int w = e ? archive_write_header(a, e) : ARCHIVE_FATAL;
        archive_entry_free(e);
        if (w != ARCHIVE_OK || (len && archive_write_data(a, data, len) != (la_ssize_t)len))
                goto out;
        if (archive_write_close(a) != ARCHIVE_OK)
                goto out;
        r = 0;
out:
        if (r < 0 && archive_errno(a) == ENOBUFS)
                r = -ENOBUFS;
        archive_write_free(a);
        return r;
}

int files_tar_each(const char *data, size_t len, size_t max,
                   int (*cb)(void *userdata, const struct files_entry *e), void *userdata,
                   struct err *e)
{
        struct archive *a = archive_read_new();
        if (!a)
                return -ENOMEM;
        archive_read_support_format_tar(a);
        int r = 0;
        struct buf content;
        buf_init(&content, max);
        if (archive_read_open_memory(a, data, len) != ARCHIVE_OK) {
                r = err_set(e, ERR_PROTOCOL, EBADMSG, "the engine sent no tar stream: %s",
                            archive_error_string(a) ? archive_error_string(a) : "unreadable");
                goto out;
        }
        for (;;) {
                struct archive_entry *ent;
                int h = archive_read_next_header(a, &ent);
                if (h == ARCHIVE_EOF)
                        break;
                if (h != ARCHIVE_OK && h != ARCHIVE_WARN) {
                        r = err_set(e, ERR_PROTOCOL, EBADMSG, "malformed tar stream: %s",
                                    archive_error_string(a) ? archive_error_string(a)
                                                            : "unreadable");
                        goto out;
                }
                const char *path = archive_entry_pathname_utf8(ent);
                if (!path)
                        path = archive_entry_pathname(ent);
                mode_t type = archive_entry_filetype(ent);
                struct files_entry fe = {
                    .path = path ? path : "",
                    .type = type == AE_IFREG   ? FILES_REG
                            : type == AE_IFDIR ? FILES_DIR
                            : type == AE_IFLNK ? FILES_SYMLINK
                                               : FILES_OTHER,
                    .size = archive_entry_size(ent),
                    .link = type == AE_IFLNK ? archive_entry_symlink(ent) : NULL,
                };
                content.len = 0;
                if (fe.type == FILES_REG) {
                        if (fe.size < 0 || (unsigned long long)fe.size > max) {
                                r = err_set(e, ERR_PROTOCOL, EFBIG,
                                            "a file in the archive is %lld bytes; the limit is "
                                            "%zu",
                                            fe.size, max);
                                goto out;
                        }
                        char chunk[65536];
                        for (;;) {
                                la_ssize_t k = archive_read_data(a, chunk, sizeof(chunk));
                                if (k == 0)
                                        break;
                                if (k < 0) {
                                        r = err_set(
                                            e, ERR_PROTOCOL, EBADMSG, "malformed tar stream: %s",
                                            archive_error_string(a) ? archive_error_string(a)
                                                                    : "unreadable data");
                                        goto out;
                                }
                                if (buf_append(&content, chunk, (size_t)k) < 0) {
                                        r = err_set(e, ERR_PROTOCOL, EFBIG,
                                                    "a file in the archive is over %zu bytes", max);
                                        goto out;
                                }
                        }
                        fe.data = content.data ? content.data : "";
                        fe.len = content.len;
                }
                r = cb(userdata, &fe);
                if (r != 0)
                        goto out;
        }
out:
        buf_free(&content);
        archive_read_free(a);
        return r;
}

/* ---- operations against a container */

enum op_kind { OP_READ, OP_WRITE };

struct files_op {
        struct engine *eng;
        enum op_kind kind;
        char id[129];
        files_cb cb;
        void *userdata;
        struct engine_req *req;
        /* The walk: `cur` is a directory under /workspace whose every
         * component was checked; `rest` the components still to check. */
        char cur[FILES_PATH_MAX + 64];
        char rest[FILES_PATH_MAX + 64];
        char asked[FILES_PATH_MAX + 64]; /* the path as given, for messages */
        int hops;
        bool exists; /* the last component exists (cur is its real path) */
        bool is_dir;
        long long size;
        /* write */
        char *data;
        size_t len;
        /* read */
        size_t max;
};

static void op_free(struct files_op *op)
{
        engine_request_cancel(op->req);
        free(op->data);
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
            .path = op->cur,
            .data = data,
            .len = len,
        };
        files_cb cb = op->cb;
        void *ud = op->userdata;
        /* Freed after the callback: r points into it. */
        op->req = NULL;
        cb(ud, &r);
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

static void engine_fail(struct files_op *op, const char *what, const struct engine_raw *r)
{
        if (r->status == 0) {
                op_fail(op, -EIO, "%s %s: %s", what, op->asked, r->e->msg);
                return;
        }
        const char *m = r->error_body ? engine_error_message(r->error_body) : "(no message)";
        if (strstr(m, "no space left") || strstr(m, "No space left"))
                op_fail(op, -ENOSPC,
                        "%s %s: no space left in %s (its size is the workspace_size setting)", what,
                        op->asked, FILES_ROOT);
        else if (strstr(m, "o such container"))
                op_fail(op, -EIO, "%s %s: the sandbox is gone (%s)", what, op->asked, m);
        else
                op_fail(op, -EIO, "%s %s: the engine answered HTTP %ld: %s", what, op->asked,
                        r->status, m);
}

static void walk(struct files_op *op);
static void fetch(struct files_op *op);
static void store(struct files_op *op);

/* The first component of op->rest, taken off it, into `name`. */
static bool next_component(struct files_op *op, char *name, size_t size)
{
        const char *p = op->rest;
        while (*p == '/')
                p++;
        if (!*p)
                return false;
        const char *end = strchrnul(p, '/');
        size_t n = (size_t)(end - p);
        snprintf(name, size, "%.*s", (int)n, p);
        memmove(op->rest, end, strlen(end) + 1);
        return true;
}

static bool rest_empty(const struct files_op *op)
{
        for (const char *p = op->rest; *p; p++)
                if (*p != '/')
                        return false;
        return true;
}

static void stat_done(void *userdata, const struct engine_raw *r)
{
        struct files_op *op = userdata;
        op->req = NULL;
        /* `cur` has the component just asked about appended. */
        if (r->status == 404) {
                if (op->kind == OP_READ) {
                        op_fail(op, -ENOENT, "no such file or directory: %s", op->asked);
                        return;
                }
                /* Writing: it and what follows are made by the tar. */
                op->exists = false;
                store(op);
                return;
        }
        if (r->status != 200 || !json_is_object(r->path_stat)) {
                if (r->status == 200)
                        op_fail(op, -EIO, "checking %s: the engine sent no file information",
                                op->asked);
                else
                        engine_fail(op, "checking", r);
                return;
        }
        json_int_t mode_i = json_integer_value(json_object_get(r->path_stat, "mode"));
        unsigned mode = (unsigned)mode_i;
        if (mode & GO_MODE_LINK) {
                /* Both engines give the link's target resolved within the
                 * container's root. A target out of /workspace is refused
                 * (read_file must not become a way to read, say,
                 * /etc/passwd); one inside is walked again from the top,
                 * with what is left of the path. */
                const char *target = json_string_value(json_object_get(r->path_stat, "linkTarget"));
                char checked[FILES_PATH_MAX + 64];
                struct err ignored = {0};
                if (!target || files_path(target, true, checked, sizeof(checked), &ignored) < 0 ||
                    target[0] != '/') {
                        char shown[200];
                        str_printable(target ? target : "?", shown, sizeof(shown));
                        op_fail(op, -EPERM,
                                "%s: %s is a symbolic link to %s, outside %s; corral's file "
                                "tools stay inside %s",
                                op->asked, op->cur, shown, FILES_ROOT, FILES_ROOT);
                        return;
                }
                if (++op->hops > MAX_HOPS) {
                        op_fail(op, -ELOOP, "%s: too many symbolic links", op->asked);
                        return;
                }
                char rest[sizeof(op->rest)];
                size_t tn = strlen(checked) - strlen(FILES_ROOT);
                if (tn + strlen(op->rest) >= sizeof(rest)) {
                        op_fail(op, -EINVAL, "%s: the path is too long once its links are followed",
                                op->asked);
                        return;
                }
                memcpy(rest, checked + strlen(FILES_ROOT), tn);
                memcpy(rest + tn, op->rest, strlen(op->rest) + 1);
                memcpy(op->rest, rest, strlen(rest) + 1);
                snprintf(op->cur, sizeof(op->cur), "%s", FILES_ROOT);
                walk(op);
                return;
        }
        op->is_dir = (mode & GO_MODE_DIR) != 0;
        op->size = json_integer_value(json_object_get(r->path_stat, "size"));
        if (!rest_empty(op) && !op->is_dir) {
                op_fail(op, -ENOTDIR, "%s: %s is not a directory", op->asked, op->cur);
                return;
        }
        if (rest_empty(op) && (mode & GO_MODE_OTHER)) {
                op_fail(op, -EINVAL, "%s is not a regular file", op->asked);
                return;
        }
        walk(op);
}

/* Asks the engine about the next component (HEAD): 0, or 1 when every
 * component is checked, or -ENOMEM when no request could be made. */
static int head_next(struct files_op *op)
{
        char name[FILES_NAME_MAX + 1];
        if (!next_component(op, name, sizeof(name)))
                return 1;
        size_t n = strlen(op->cur);
        snprintf(op->cur + n, sizeof(op->cur) - n, "/%s", name);
        char *esc = engine_escape(op->cur);
        char path[3 * sizeof(op->cur) + 200];
        snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", op->id, esc ? esc : "");
        free(esc);
        if (!esc || engine_request_raw(op->eng, "HEAD", path, NULL, NULL, 0, 4096, stat_done, op,
                                       &op->req) < 0)
                return -ENOMEM;
        return 0;
}

/* Checks the next component, or, all checked, moves on. */
static void walk(struct files_op *op)
{
        int r = head_next(op);
        if (r < 0) {
                op_fail(op, -ENOMEM, "checking %s: out of memory", op->asked);
        } else if (r > 0) {
                op->exists = true;
                if (op->kind == OP_READ)
                        fetch(op);
                else
                        store(op);
        }
}

static int first_file(void *userdata, const struct files_entry *e)
{
        struct files_op *op = userdata;
        if (e->type != FILES_REG) {
                op_fail(op, -EINVAL, "%s is not a regular file", op->asked);
                return 1;
        }
        op_done(op, 0, NULL, e->data, e->len);
        return 1;
}

static void fetched(void *userdata, const struct engine_raw *r)
{
        struct files_op *op = userdata;
        op->req = NULL;
        if (r->status != 200) {
                engine_fail(op, "reading", r);
                return;
        }
        struct err e = {0};
        int k = files_tar_each(r->data, r->len, op->max, first_file, op, &e);
        if (k == 0)
                op_fail(op, -EIO, "reading %s: the engine's archive held no file", op->asked);
        else if (k < 0)
                op_fail(op, k == -EFBIG ? -EFBIG : -EIO, "reading %s: %s", op->asked, e.msg);
        /* k > 0: first_file answered (and freed op) */
}

static void fetch(struct files_op *op)
{
        if (op->is_dir) {
                op_fail(op, -EISDIR, "%s is a directory (list_files lists it)", op->asked);
                return;
        }
        if (op->size < 0 || (unsigned long long)op->size > op->max) {
                op_fail(op, -EFBIG,
                        "%s is %lld bytes, over the %zu-byte limit of a file moved in or out "
                        "(file_max_bytes): read part of it with run_shell (head -c, tail -c), "
                        "or raise the limit",
                        op->asked, op->size, op->max);
                return;
        }
        char *esc = engine_escape(op->cur);
        char path[3 * sizeof(op->cur) + 200];
        snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", op->id, esc ? esc : "");
        free(esc);
        if (!esc || engine_request_raw(op->eng, "GET", path, NULL, NULL, 0, op->max + TAR_SLACK,
                                       fetched, op, &op->req) < 0)
                op_fail(op, -ENOMEM, "reading %s: out of memory", op->asked);
}

static void stored(void *userdata, const struct engine_raw *r)
{
        struct files_op *op = userdata;
        op->req = NULL;
        if (r->status != 200) {
                engine_fail(op, "writing", r);
                return;
        }
        op_done(op, 0, NULL, NULL, 0);
}

/* PUT a tar into the deepest directory that exists: with the directories
 * still missing, and the file. */
static void store(struct files_op *op)
{
        char base[sizeof(op->cur)], name[sizeof(op->cur) + sizeof(op->rest)];
        if (op->exists) {
                if (op->is_dir) {
                        op_fail(op, -EISDIR, "%s is a directory", op->asked);
                        return;
                }
                /* cur is the file: replace it in its directory. */
                char *slash = strrchr(op->cur, '/');
                snprintf(base, sizeof(base), "%.*s", (int)(slash - op->cur), op->cur);
                snprintf(name, sizeof(name), "%s", slash + 1);
        } else {
                /* cur ends with the first missing component. */
                char *slash = strrchr(op->cur, '/');
                snprintf(base, sizeof(base), "%.*s", (int)(slash - op->cur), op->cur);
                snprintf(name, sizeof(name), "%s%s", slash + 1, op->rest);
        }
        struct buf tar;
        buf_init(&tar, op->len + TAR_SLACK + 512 * FILES_DEPTH_MAX * 3);
        int k = files_tar_build(name, true, op->data, op->len, &tar);
        if (k < 0) {
                buf_free(&tar);
                op_fail(op, k, "writing %s: cannot build the archive", op->asked);
                return;
        }
        char *esc = engine_escape(base);
        char path[3 * sizeof(base) + 200];
        snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", op->id, esc ? esc : "");
        free(esc);
        size_t n = tar.len;
        char *body = tar.data;
        tar.data = NULL;
        if (!esc || engine_request_raw(op->eng, "PUT", path, "application/x-tar", body, n, 65536,
                                       stored, op, &op->req) < 0)
                op_fail(op, -ENOMEM, "writing %s: out of memory", op->asked);
}

static int op_new(struct engine *eng, enum op_kind kind, const char *id, const char *path,
                  files_cb cb, void *userdata, struct files_op **ret)
{
        /* A path from files_path, below /workspace: at least one component. */
        size_t root = strlen(FILES_ROOT);
        if (strlen(id) >= sizeof(((struct files_op *)0)->id) || strncmp(path, FILES_ROOT, root) ||
            path[root] != '/' || !path[root + 1] ||
            strlen(path) >= sizeof(((struct files_op *)0)->rest))
                return -EINVAL;
        struct files_op *op = calloc(1, sizeof(*op));
        if (!op)
                return -ENOMEM;
        *op = (struct files_op){.eng = eng, .kind = kind, .cb = cb, .userdata = userdata};
        snprintf(op->id, sizeof(op->id), "%s", id);
        snprintf(op->cur, sizeof(op->cur), "%s", FILES_ROOT);
        snprintf(op->rest, sizeof(op->rest), "%s", path + strlen(FILES_ROOT));
        snprintf(op->asked, sizeof(op->asked), "%s", path);
        *ret = op;
        return 0;
}

int files_write(struct engine *eng, const char *id, const char *path, const void *data, size_t len,
                files_cb cb, void *userdata, struct files_op **ret)
{
        struct files_op *op;
        int r = op_new(eng, OP_WRITE, id, path, cb, userdata, &op);
        if (r < 0)
                return r;
        op->data = malloc(len ? len : 1);
        if (!op->data) {
                free(op);
                return -ENOMEM;
        }
        memcpy(op->data, data, len);
        op->len = len;
        /* The first request is made here: a failure is returned, not called back. */
        r = head_next(op);
        if (r < 0) {
                op_free(op);
                return r;
        }
        *ret = op;
        return 0;
}

int files_read(struct engine *eng, const char *id, const char *path, size_t max, files_cb cb,
               void *userdata, struct files_op **ret)
{
        struct files_op *op;
        int r = op_new(eng, OP_READ, id, path, cb, userdata, &op);
        if (r < 0)
                return r;
        op->max = max;
        r = head_next(op);
        if (r < 0) {
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
