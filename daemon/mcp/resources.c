/* The files of the client's sessions as MCP resources: what each holds
 * under /workspace/out (all of /workspace with resources_workspace), named
 * corral://session/{session}/{+path} with the path relative to /workspace.
 * resources/list asks each session's runtime for its files (sandbox/list);
 * resources/read goes through read_file's path checks (sandbox/files.h);
 * completion/complete fills the template's two arguments; the session
 * manager's watch says when to send notifications/resources/list_changed.
 * Runs' kept output, corral://run/{id}/..., is read from the result store
 * (results.c), whole or a piece at a time. The guide (guide.c) is one more
 * resource, first on the list. */
#include "mcp/internal.h"

#include "core/buf.h"
#include "core/jsonrpc.h"
#include "core/util.h"
#include "mcp/tools.h"
#include "runtime/protocol.h"
#include "sandbox/files.h"
#include "sandbox/session.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define URI_PREFIX       "corral://session/"
#define URI_TEMPLATE     URI_PREFIX "{session}/{+path}"
#define OUT_ROOT         FILES_ROOT "/out"
#define LIST_PAGE        1000   /* resources on one page of resources/list */
#define COMPLETE_MAX     100    /* values in one completion (the spec's most) */
#define RESOURCE_UNKNOWN -32002 /* the spec's "resource not found" */

/* A resources/list, resources/read or completion/complete on its way. */
struct res_op {
        struct request req;
        enum { OP_LIST, OP_READ, OP_COMPLETE } kind;
        json_t *names;     /* the sessions left to list (OP_LIST) */
        size_t next;       /* the next of them */
        json_t *found;     /* OP_LIST: resources; OP_COMPLETE: paths */
        size_t skip, want; /* OP_LIST: the cursor's offset, and how many past it to find */
        bool more;         /* found more than `want` */
        char session[SESSION_NAME_MAX + 1];
        char path[FILES_PATH_MAX + 64];  /* OP_READ: the full path */
        char prefix[FILES_PATH_MAX + 1]; /* OP_COMPLETE: what the person typed */
        char uri[sizeof(URI_PREFIX) + SESSION_NAME_MAX + 3 * FILES_PATH_MAX];
        struct sandbox_ask *ask;
        struct sandbox_fop *fop;
};

static const char *scope_root(const struct mcp_server *s)
{
        return s->cfg->resources_workspace ? FILES_ROOT : OUT_ROOT;
}

/* Whether the full path `p` (under /workspace) is one the resources show. */
static bool in_scope(const struct mcp_server *s, const char *p)
{
        const char *root = scope_root(s);
        size_t n = strlen(root);
        return strncmp(p, root, n) == 0 && p[n] == '/';
}

/* ---- URIs: the path relative to /workspace, each byte that is not
 * unreserved (RFC 3986) or '/' percent-encoded */

static bool uri_plain(unsigned char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
}

void resource_uri(const char *prefix, const char *rel, char *out, size_t size)
{
        size_t n = (size_t)snprintf(out, size, "%s", prefix);
        for (const unsigned char *p = (const unsigned char *)rel; *p && n + 4 < size; p++) {
                if (uri_plain(*p))
                        out[n++] = (char)*p;
                else
                        n += (size_t)snprintf(out + n, size - n, "%%%02X", *p);
        }
        out[n < size ? n : size - 1] = '\0';
}

static void uri_make(const char *session, const char *rel, char *out, size_t size)
{
        char prefix[sizeof(URI_PREFIX) + SESSION_NAME_MAX + 2];
        snprintf(prefix, sizeof(prefix), "%s%s/", URI_PREFIX, session);
        resource_uri(prefix, rel, out, size);
}

int resource_path_decode(const char *enc, char *rel, size_t rel_size, struct err *e)
{
        char shown[120];
        str_printable(enc, shown, sizeof(shown));
        size_t n = 0;
        for (const char *p = enc; *p; p++) {
                int c = (unsigned char)*p;
                if (c == '%') {
                        int hi = hex_value(p[1]), lo = hi < 0 ? -1 : hex_value(p[2]);
                        if (lo < 0 || (hi == 0 && lo == 0))
                                return err_set(e, ERR_INVALID, -EINVAL,
                                               "\"%s\": a %% not followed by two hex digits (or "
                                               "%%00)",
                                               shown);
                        c = hi * 16 + lo;
                        p += 2;
                }
                if (n + 1 >= rel_size)
                        return err_set(e, ERR_INVALID, -EINVAL, "\"%s\": the path is too long",
                                       shown);
                rel[n++] = (char)c;
        }
        rel[n] = '\0';
        return 0;
}

/* A resource URI into its session and the path relative to /workspace
 * (decoded; files_path checks it next): 0, or -EINVAL and *e. */
static int uri_parse(const char *uri, char *session, char *rel, size_t rel_size, struct err *e)
{
        char shown[120];
        str_printable(uri, shown, sizeof(shown));
        size_t pn = strlen(URI_PREFIX);
        const char *slash = strncmp(uri, URI_PREFIX, pn) == 0 ? strchr(uri + pn, '/') : NULL;
        if (!slash || slash == uri + pn || (size_t)(slash - uri - pn) > SESSION_NAME_MAX)
                return err_set(e, ERR_INVALID, -EINVAL,
                               "\"%s\" is not one of corral's resources: they are named "
                               "%s (resources/templates/list)",
                               shown, URI_TEMPLATE);
        memcpy(session, uri + pn, (size_t)(slash - uri - pn));
        session[slash - uri - pn] = '\0';
        int r = session_name_check(session, e);
        if (r < 0)
                return r;
        r = resource_path_decode(slash + 1, rel, rel_size, e);
        if (r < 0)
                return r;
        size_t n = strlen(rel);
        if (!n)
                return err_set(e, ERR_INVALID, -EINVAL, "\"%s\" names no file of the session",
                               shown);
        return 0;
}

/* ---- the operations */

static void op_free(struct res_op *op);

/* Withdrawn, or its client gone: its reads in the session stop. */
static void op_gone(struct request *r)
{
        op_free(request_of(r, struct res_op));
}

static const struct request_ops op_ops = {
    .what = "a resources request",
    .withdraw = op_gone,
    .drop = op_gone,
};

static struct res_op *op_new(struct mcp_server *s, json_t *id, int kind)
{
        struct res_op *op = calloc(1, sizeof(*op));
        if (!op) {
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return NULL;
        }
        request_begin(s, &op->req, id, &op_ops);
        op->kind = kind;
        return op;
}

static void op_free(struct res_op *op)
{
        request_end(&op->req);
        sandbox_ask_cancel(op->ask);
        sandbox_fop_cancel(op->fop);
        json_decref(op->names);
        json_decref(op->found);
        free(op);
}

static void op_error(struct res_op *op, int code, const char *msg)
{
        char text[700];
        snprintf(text, sizeof(text), "%.690s", msg);
        request_error(&op->req, code, utf8_scrub(text));
        op_free(op);
}

/* The open sessions of the client (not those still starting), by name. */
static json_t *open_sessions(struct mcp_server *s, const char *prefix)
{
        json_t *names = json_array();
        json_auto_t *list = session_list(s->sessions, s->owner);
        size_t i;
        json_t *x;
        json_array_foreach(list, i, x)
        {
                const char *name = json_string_value(json_object_get(x, "name"));
                const char *state = json_string_value(json_object_get(x, "state"));
                if (name && state && strcmp(state, "starting") != 0 &&
                    strncmp(name, prefix, strlen(prefix)) == 0)
                        json_array_append_new(names, json_string(name));
        }
        return names;
}

static void list_next(struct res_op *op);

/* One session's files: each regular file under the scope, in order. */
static void listed(void *userdata, json_t *result, const struct err *why)
{
        struct res_op *op = userdata;
        struct mcp_server *s = op->req.srv;
        op->ask = NULL;
        const char *root = scope_root(s);
        const char *real = json_string_value(json_object_get(result, "path"));
        /* The runtime follows a symlinked root: what it lists then is not
         * the scope's. A session without /workspace/out has nothing. */
        if (!result || !real || strcmp(real, root) != 0) {
                if (result)
                        log_debug("session %s: %s resolves to elsewhere: its files are not listed",
                                  op->session, root);
                else
                        log_debug("session %s: no files listed: %.300s", op->session, why->msg);
                list_next(op);
                return;
        }
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(result, "entries"), i, e)
        {
                const char *path = json_string_value(json_object_get(e, "path"));
                const char *type = json_string_value(json_object_get(e, "type"));
                json_t *size = json_object_get(e, "size");
                if (!path || !type || strcmp(type, "file") != 0 || !json_is_integer(size))
                        continue;
                /* path is relative to the root listed: made relative to
                 * /workspace, and checked as a client's would be. */
                char rel[FILES_PATH_MAX + 8], full[FILES_PATH_MAX + 64];
                struct err ignored = {0};
                const char *sub = root + strlen(FILES_ROOT); /* "" or "/out" */
                /* One too long to name whole is left out, not named cut. */
                if ((size_t)snprintf(rel, sizeof(rel), "%s%s%s", *sub ? sub + 1 : "",
                                     *sub ? "/" : "", path) >= sizeof(rel) ||
                    files_path(rel, false, full, sizeof(full), &ignored) < 0 || !in_scope(s, full))
                        continue;
                if (op->kind == OP_COMPLETE) {
                        if (strncmp(rel, op->prefix, strlen(op->prefix)) == 0)
                                json_array_append_new(op->found, json_string(rel));
                        continue;
                }
                if (json_array_size(op->found) >= op->skip + op->want) {
                        op->more = true;
                        break;
                }
                uri_make(op->session, rel, op->uri, sizeof(op->uri));
                char title[SESSION_NAME_MAX + FILES_PATH_MAX + 16];
                snprintf(title, sizeof(title), "%.1000s (session %.64s)", rel, op->session);
                const char *mime = files_mime_type(rel);
                json_t *r = json_pack("{s:s, s:s, s:s, s:O}", "uri", op->uri, "name", rel, "title",
                                      title, "size", size);
                if (r && mime)
                        json_object_set_new(r, "mimeType", json_string(mime));
                if (r)
                        json_array_append_new(op->found, r);
        }
        list_next(op);
}

static void list_answer(struct res_op *op)
{
        if (op->kind == OP_COMPLETE) {
                size_t total = json_array_size(op->found);
                json_t *values = json_array();
                for (size_t i = 0; i < total && i < COMPLETE_MAX; i++)
                        json_array_append(values, json_array_get(op->found, i));
                request_answer(&op->req, json_pack("{s:{s:o, s:I, s:b}}", "completion", "values",
                                                   values, "total", (json_int_t)total, "hasMore",
                                                   total > COMPLETE_MAX));
                op_free(op);
                return;
        }
        json_t *page = json_array();
        /* The guide heads the first page; the cursor counts files only. */
        if (op->skip == 0)
                json_array_append_new(page, guide_resource());
        size_t n = json_array_size(op->found);
        for (size_t i = op->skip; i < n; i++)
                json_array_append(page, json_array_get(op->found, i));
        json_t *result = json_pack("{s:o}", "resources", page);
        if (result && op->more) {
                char cursor[32];
                snprintf(cursor, sizeof(cursor), "%zu", op->skip + op->want);
                json_object_set_new(result, "nextCursor", json_string(cursor));
        }
        request_answer(&op->req, result);
        op_free(op);
}

/* Asks the next session for its files; answers after the last. */
static void list_next(struct res_op *op)
{
        struct mcp_server *s = op->req.srv;
        while (!op->more && op->next < json_array_size(op->names)) {
                const char *name = json_string_value(json_array_get(op->names, op->next++));
                /* One that ended since, or has no container: nothing to list. */
                struct sandbox *sb = session_peek(s->sessions, s->owner, name);
                if (!sb || !sandbox_container(sb))
                        continue;
                snprintf(op->session, sizeof(op->session), "%s", name);
                json_t *what = json_pack("{s:s, s:b, s:I}", "path", scope_root(s), "recursive", 1,
                                         "limit", (json_int_t)RT_LIST_MAX);
                if (sandbox_ask(sb, "sandbox/list", what, listed, op, &op->ask) == 0)
                        return;
        }
        list_answer(op);
}

void resources_list(struct mcp_server *s, json_t *id, json_t *params)
{
        json_t *cursor = json_object_get(params, "cursor");
        size_t skip = 0;
        if (cursor) {
                const char *c = json_string_value(cursor);
                char *end = NULL;
                unsigned long long v = c && *c >= '0' && *c <= '9' ? strtoull(c, &end, 10) : 0;
                if (!end || *end || v > 1000000) {
                        mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                                       "unknown cursor: give the nextCursor of the page before");
                        return;
                }
                skip = (size_t)v;
        }
        struct res_op *op = op_new(s, id, OP_LIST);
        if (!op)
                return;
        op->names = open_sessions(s, "");
        op->found = json_array();
        op->skip = skip;
        op->want = LIST_PAGE;
        list_next(op);
}

void resources_templates_list(struct mcp_server *s, json_t *id, json_t *params)
{
        if (json_object_get(params, "cursor")) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "unknown cursor: corral lists its templates on one page");
                return;
        }
        char about[300];
        snprintf(about, sizeof(about),
                 "A file of one of your sandbox sessions, under %s/ (path relative to %s, "
                 "e.g. out/report.csv)",
                 scope_root(s), FILES_ROOT);
        char kept[300];
        snprintf(kept, sizeof(kept),
                 "The whole stdout or stderr of a run (stream: stdout, stderr), or a file a "
                 "single-use run wrote (stream: out/PATH), kept %.0f s after the run and while "
                 "its session is open; ?offset=N&limit=M reads a piece (bytes)",
                 s->cfg->result_keep_s);
        mcp_send_result(s, id,
                        json_pack("{s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]}",
                                  "resourceTemplates", "uriTemplate", URI_TEMPLATE, "name",
                                  "session-file", "title", "Session file", "description", about,
                                  "uriTemplate", "corral://run/{id}/{+stream}{?offset,limit}",
                                  "name", "run-output", "title", "Run output", "description",
                                  kept));
}

static void read_done(void *userdata, const struct files_result *r)
{
        struct res_op *op = userdata;
        struct mcp_server *s = op->req.srv;
        op->fop = NULL;
        char msg[700];
        if (r->error) {
                snprintf(msg, sizeof(msg), "%.200s: %.480s", op->uri,
                         r->message ? r->message : "failed");
                op_error(op,
                         r->error == -ENOENT ? RESOURCE_UNKNOWN
                         : r->error == -EIO  ? JRPC_INTERNAL_ERROR
                                             : JRPC_INVALID_PARAMS,
                         msg);
                return;
        }
        /* read_file follows links within /workspace; a resource's must also
         * end in the scope. */
        if (!in_scope(s, r->path)) {
                snprintf(msg, sizeof(msg),
                         "%.200s: %.150s leads to %.150s, outside %s, where resources are%s",
                         op->uri, op->path, r->path, scope_root(s),
                         s->cfg->resources_workspace ? "" : " (resources_workspace widens them)");
                op_error(op, JRPC_INVALID_PARAMS, msg);
                return;
        }
        const char *mime = files_mime_type(op->path);
        json_t *item = NULL;
        if (utf8_text(r->data, r->len)) {
                item = json_pack("{s:s, s:s, s:s%}", "uri", op->uri, "mimeType",
                                 mime ? mime : "text/plain", "text", r->data, r->len);
        } else {
                /* The runtime's base64 when it is canonical, else encoded
                 * here; ASCII either way, not checked again as UTF-8. */
                struct buf b64;
                buf_init(&b64, (r->len + 2) / 3 * 4 + 1);
                if (r->b64 || base64_encode(&b64, r->data, r->len) == 0)
                        item = json_pack(
                            "{s:s, s:s, s:o}", "uri", op->uri, "mimeType",
                            mime ? mime : "application/octet-stream", "blob",
                            r->b64 ? json_stringn_nocheck(r->b64, r->b64_len)
                                   : json_stringn_nocheck(b64.data ? b64.data : "", b64.len));
                buf_free(&b64);
        }
        request_answer(&op->req, item ? json_pack("{s:[o]}", "contents", item) : NULL);
        op_free(op);
}

/* A number of the query "?offset=N&limit=M": whether it is well-formed
 * (absent keeps *v). */
static bool query_number(const char *query, const char *key, size_t *v)
{
        size_t kn = strlen(key);
        for (const char *p = query; p && *p; p = strchr(p, '&'), p = p ? p + 1 : NULL) {
                if (strncmp(p, key, kn) || p[kn] != '=')
                        continue;
                char *end;
                errno = 0;
                unsigned long long n = strtoull(p + kn + 1, &end, 10);
                if (errno || end == p + kn + 1 || (*end && *end != '&') || p[kn + 1] == '-' ||
                    n > SIZE_MAX / 2)
                        return false;
                *v = (size_t)n;
        }
        return true;
}

/* A kept run's output (results.c), read at once: whole up to
 * file_max_bytes, or the piece a query names. */
static void read_kept(struct mcp_server *s, json_t *id, const char *uri)
{
        char name[3 * FILES_PATH_MAX + 200], msg[1400];
        const char *q = strchr(uri, '?');
        size_t n = q ? (size_t)(q - uri) : strlen(uri);
        size_t offset = 0, limit = KEPT_PIECE_MAX;
        if (n >= sizeof(name) || !query_number(q ? q + 1 : NULL, "offset", &offset) ||
            !query_number(q ? q + 1 : NULL, "limit", &limit) || limit == 0) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "a kept run's output is read whole, or in pieces with "
                               "?offset=N&limit=M (bytes; limit at least 1)");
                return;
        }
        memcpy(name, uri, n);
        name[n] = '\0';
        struct kept_piece piece;
        struct err e = {0};
        int r = results_read(s, name, offset, limit, &piece, &e);
        if (r < 0) {
                mcp_send_error(s, id, r == -ENOENT ? RESOURCE_UNKNOWN : JRPC_INVALID_PARAMS, e.msg);
                return;
        }
        if (!q && piece.size > piece.data.len) {
                snprintf(msg, sizeof(msg),
                         "%.500s is %llu bytes, more than one read gives (%zu): read it in "
                         "pieces, %.500s?offset=0&limit=%zu and on, or with read_file",
                         name, piece.size, limit, name, limit);
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, msg);
                buf_free(&piece.data);
                return;
        }
        json_t *item = NULL;
        const char *data = piece.data.data ? piece.data.data : "";
        if (piece.text) {
                item = json_pack("{s:s, s:s, s:s%}", "uri", uri, "mimeType",
                                 piece.mime_type ? piece.mime_type : "text/plain", "text", data,
                                 piece.data.len);
        } else {
                struct buf b64;
                buf_init(&b64, (piece.data.len + 2) / 3 * 4 + 1);
                if (base64_encode(&b64, data, piece.data.len) == 0)
                        item = json_pack("{s:s, s:s, s:s%}", "uri", uri, "mimeType",
                                         piece.mime_type ? piece.mime_type
                                                         : "application/octet-stream",
                                         "blob", b64.data ? b64.data : "", b64.len);
                buf_free(&b64);
        }
        /* Where the piece lies in the whole, for a reader going on. */
        if (item)
                json_object_set_new(item, "_meta",
                                    json_pack("{s:I, s:I, s:b}", "offset", (json_int_t)piece.offset,
                                              "size", (json_int_t)piece.size, "partial",
                                              piece.partial));
        buf_free(&piece.data);
        mcp_send_result(s, id, item ? json_pack("{s:[o]}", "contents", item) : NULL);
}

void resources_read(struct mcp_server *s, json_t *id, json_t *params)
{
        const char *uri = json_string_value(json_object_get(params, "uri"));
        if (!uri) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "resources/read needs \"uri\", a string");
                return;
        }
        if (results_uri(uri)) {
                read_kept(s, id, uri);
                return;
        }
        if (strcmp(uri, GUIDE_URI) == 0) {
                mcp_send_result(s, id, guide_read(s));
                return;
        }
        struct res_op *op = op_new(s, id, OP_READ);
        if (!op)
                return;
        char rel[FILES_PATH_MAX + 1];
        struct err e = {0};
        if (uri_parse(uri, op->session, rel, sizeof(rel), &e) < 0 ||
            files_path(rel, false, op->path, sizeof(op->path), &e) < 0) {
                op_error(op, JRPC_INVALID_PARAMS, e.msg);
                return;
        }
        snprintf(op->uri, sizeof(op->uri), "%s", uri);
        char msg[600];
        if (!in_scope(s, op->path)) {
                snprintf(msg, sizeof(msg),
                         "%s is outside %s, where resources are%s: read it with read_file", rel,
                         scope_root(s),
                         s->cfg->resources_workspace ? "" : " (resources_workspace widens them)");
                op_error(op, JRPC_INVALID_PARAMS, msg);
                return;
        }
        struct sandbox *sb;
        int r = session_sandbox(s->sessions, s->owner, op->session, &sb, &e);
        if (r < 0 || !sandbox_container(sb)) {
                snprintf(msg, sizeof(msg), "%.200s: %.380s", uri,
                         r < 0 ? e.msg : "the session's sandbox is not there");
                op_error(op, r == -EAGAIN ? JRPC_INTERNAL_ERROR : RESOURCE_UNKNOWN, msg);
                return;
        }
        r = sandbox_read_file(sb, op->path, s->cfg->file_max_bytes, read_done, op, &op->fop);
        if (r < 0) {
                snprintf(msg, sizeof(msg), "%s: cannot read it now (%s)", uri, strerror(-r));
                op_error(op, JRPC_INTERNAL_ERROR, msg);
        }
}

/* completion/complete: the template's session (the client's open ones)
 * and path (the session's files, given context.arguments.session). */
void completion_complete(struct mcp_server *s, json_t *id, json_t *params)
{
        json_t *ref = json_object_get(params, "ref");
        const char *type = json_string_value(json_object_get(ref, "type"));
        const char *uri = json_string_value(json_object_get(ref, "uri"));
        json_t *arg = json_object_get(params, "argument");
        const char *name = json_string_value(json_object_get(arg, "name"));
        const char *value = json_string_value(json_object_get(arg, "value"));
        if (!type || !name || !value) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "completion/complete needs \"ref\" {type, ...} and \"argument\" "
                               "{name, value}");
                return;
        }
        if (strcmp(type, "ref/resource") != 0 || !uri || strcmp(uri, URI_TEMPLATE) != 0) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS,
                               "corral completes only its resource template, " URI_TEMPLATE
                               " (it has no prompts)");
                return;
        }
        if (strlen(value) > FILES_PATH_MAX) {
                mcp_send_error(s, id, JRPC_INVALID_PARAMS, "argument value too long");
                return;
        }
        struct res_op *op = op_new(s, id, OP_COMPLETE);
        if (!op)
                return;
        snprintf(op->prefix, sizeof(op->prefix), "%s", value);
        if (strcmp(name, "session") == 0) {
                op->found = open_sessions(s, value);
                list_answer(op);
                return;
        }
        op->found = json_array();
        op->names = json_array();
        const char *session = json_string_value(json_object_get(
            json_object_get(json_object_get(params, "context"), "arguments"), "session"));
        struct err e = {0};
        /* Paths need the session: none given, or none of that name, none. */
        if (strcmp(name, "path") == 0 && session && session_name_check(session, &e) == 0)
                json_array_append_new(op->names, json_string(session));
        list_next(op);
}

/* ---- list_changed */

static void on_change(void *userdata, const char *name, enum session_change what)
{
        struct mcp_server *s = userdata;
        (void)name;
        /* A call that left /workspace/out as it was changes nothing shown,
         * unless all of /workspace is. */
        if (!s->initialized || s->closing || (what == SESSION_RAN && !s->cfg->resources_workspace))
                return;
        mcp_send(s, jrpc_notification("notifications/resources/list_changed", NULL));
}

int resources_init(struct mcp_server *s)
{
        return session_watch(s->sessions, s->owner, on_change, s, &s->watch);
}

void resources_files_written(struct mcp_server *s, const char *session, const char *path)
{
        if (in_scope(s, path))
                session_files_changed(s->sessions, s->owner, session);
}

void resources_free(struct mcp_server *s)
{
        session_unwatch(s->watch);
        s->watch = NULL;
}
