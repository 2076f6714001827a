/* The session tools: session_list, session_close, session_save and
 * session_fork, and the files of a
 * session's /workspace: write_file, read_file, list_files. */
#include "mcp/internal.h"

#include "core/buf.h"
#include "core/jsonrpc.h"
#include "core/util.h"
#include "mcp/tools.h"
#include "runtime/protocol.h"
#include "sandbox/files.h"
#include "sandbox/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A write_file, read_file or list_files on its way. */
struct file_call {
        struct request req;
        bool opening; /* write_file's session is opening: write_opened frees it */
        char session[SESSION_NAME_MAX + 1];
        char path[FILES_PATH_MAX + 64]; /* normalised, under /workspace */
        struct sandbox_fop *fop;
        struct sandbox_ask *ask;
        size_t offset, limit; /* read_file's window */
        size_t bytes;         /* write_file's content */
};

/* Checks that args is an object (or absent) with only these keys
 * (NULL-ended); else answers. */
static bool only_keys(struct mcp_server *s, json_t *id, json_t *args, const char *tool,
                      const char *const *keys)
{
        if (!tool_args_object(s, id, args))
                return false;
        const char *key;
        json_t *v;
        json_object_foreach(args, key, v)
        {
                bool known = false;
                for (const char *const *k = keys; *k && !known; k++)
                        known = strcmp(*k, key) == 0;
                if (!known) {
                        char msg[400], list[200] = "";
                        for (const char *const *k = keys; *k; k++)
                                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                                         k == keys ? "" : ", ", *k);
                        snprintf(msg, sizeof(msg), "unknown argument \"%.100s\" (%s takes %s)", key,
                                 tool, list);
                        mcp_send_result(s, id, arguments_error(utf8_scrub(msg)));
                        return false;
                }
        }
        return true;
}

/* The "session" argument, checked; NULL after answering. */
static const char *session_arg(struct mcp_server *s, json_t *id, json_t *args, const char *tool)
{
        const char *name = json_string_value(json_object_get(args, "session"));
        char msg[300];
        if (!name) {
                snprintf(msg, sizeof(msg), "%s needs \"session\", a session's name", tool);
                mcp_send_result(s, id, arguments_error(msg));
                return NULL;
        }
        struct err e = {0};
        if (session_name_check(name, &e) < 0) {
                mcp_send_result(s, id, err_result(FAILED_ARGUMENTS, -EINVAL, &e));
                return NULL;
        }
        return name;
}

/* What the file tools share: only `keys`, a session name, and `path`
 * made a path under /workspace (`dflt` when absent, NULL: required; the
 * root itself only when allow_root). The session's name, or NULL after
 * answering. */
static const char *file_args(struct mcp_server *s, json_t *id, json_t *args, const char *tool,
                             const char *const *keys, const char *dflt, bool allow_root, char *full,
                             size_t full_size)
{
        if (!only_keys(s, id, args, tool, keys))
                return NULL;
        const char *name = session_arg(s, id, args, tool);
        if (!name)
                return NULL;
        json_t *p = json_object_get(args, "path");
        char msg[600];
        if ((p && !json_is_string(p)) || (!p && !dflt)) {
                snprintf(msg, sizeof(msg), "%s needs \"path\", a string", tool);
                mcp_send_result(s, id, arguments_error(msg));
                return NULL;
        }
        struct err e = {0};
        int r = files_path(p ? json_string_value(p) : dflt, allow_root, full, full_size, &e);
        if (r < 0) {
                mcp_send_result(s, id, err_result(FAILED_PATH, r, &e));
                return NULL;
        }
        return name;
}

void tool_session_list(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        static const char *const keys[] = {NULL};
        if (!only_keys(s, id, args, "session_list", keys))
                return;
        json_t *list = session_list(s->sessions, s->owner);
        struct buf text;
        buf_init(&text, 1 << 20);
        char line[400];
        size_t i, stored = 0;
        json_t *x;
        json_array_foreach(list, i, x) stored +=
            strcmp(json_string_value(json_object_get(x, "state")), "hibernated") == 0;
        snprintf(line, sizeof(line),
                 "%zu session(s) open (at most %ld; %s after %g s without calls, or closed %g s "
                 "after opening)%s",
                 json_array_size(list) - stored, session_max(s->sessions),
                 s->cfg->session_hibernate ? "hibernated" : "closed", s->cfg->session_idle_s,
                 s->cfg->session_max_s, stored ? "" : "\n");
        buf_append_some(&text, line, strlen(line));
        if (stored) {
                snprintf(line, sizeof(line), "; %zu hibernated (a call resumes it)\n", stored);
                buf_append_some(&text, line, strlen(line));
        }
        json_array_foreach(list, i, x)
        {
                if (json_object_get(x, "stored_bytes")) {
                        snprintf(line, sizeof(line), "%s: hibernated %.0f s ago, %.1f MiB stored\n",
                                 json_string_value(json_object_get(x, "name")),
                                 json_real_value(json_object_get(x, "idle_s")),
                                 (double)json_integer_value(json_object_get(x, "stored_bytes")) /
                                     (1 << 20));
                        buf_append_some(&text, line, strlen(line));
                        continue;
                }
                json_t *mem = json_object_get(x, "memory_bytes");
                char memtext[40] = "memory unknown";
                if (json_is_integer(mem))
                        snprintf(memtext, sizeof(memtext), "%.1f MiB",
                                 (double)json_integer_value(mem) / (1 << 20));
                snprintf(line, sizeof(line), "%s: %s, %.0f s old, idle %.0f s, %lld calls, %s\n",
                         json_string_value(json_object_get(x, "name")),
                         json_string_value(json_object_get(x, "state")),
                         json_real_value(json_object_get(x, "age_s")),
                         json_real_value(json_object_get(x, "idle_s")),
                         (long long)json_integer_value(json_object_get(x, "calls")), memtext);
                buf_append_some(&text, line, strlen(line));
        }
        json_t *st = json_pack("{s:o, s:I, s:f, s:f}", "sessions", list, "max_sessions",
                               (json_int_t)session_max(s->sessions), "session_idle_s",
                               s->cfg->session_idle_s, "session_max_s", s->cfg->session_max_s);
        mcp_send_result(s, id, st ? tools_text_result(st, buf_str(&text)) : NULL);
        buf_free(&text);
}

void tool_session_close(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        static const char *const keys[] = {"session", NULL};
        if (!only_keys(s, id, args, "session_close", keys))
                return;
        const char *name = session_arg(s, id, args, "session_close");
        if (!name)
                return;
        char text[200];
        struct err e = {0};
        int r = session_close(s->sessions, s->owner, name, &e);
        if (r < 0) {
                mcp_send_result(s, id, err_result(FAILED_SESSION_CLOSE, r, &e));
                return;
        }
        snprintf(text, sizeof(text), "session \"%s\" closed: its sandbox is being removed", name);
        mcp_send_result(
            s, id, tools_text_result(json_pack("{s:s, s:b}", "session", name, "closed", 1), text));
}

/* A session_save or session_fork on its way: the save, once started,
 * cannot be stopped halfway, so its end frees this. */
struct save_call {
        struct request req;
        bool waiting;
        bool fork;
        char session[SESSION_NAME_MAX + 1];
        char to[SESSION_NAME_MAX + 1];
};

static void scall_free(struct save_call *sc)
{
        request_end(&sc->req);
        free(sc);
}

static void scall_gone(struct request *r)
{
        struct save_call *sc = request_of(r, struct save_call);
        if (!sc->waiting)
                scall_free(sc);
}

static const struct request_ops scall_ops = {
    .what = "a session save",
    .withdraw = scall_gone,
    .drop = scall_gone,
};

static json_t *saved_result(const struct save_call *sc, const struct session_saved *r)
{
        char text[1400], lost[600] = "";
        size_t i;
        json_t *v;
        json_array_foreach(r->not_saved, i, v)
        {
                char shown[80];
                str_printable(json_string_value(v), shown, sizeof(shown));
                size_t len = strlen(lost);
                if (len + strlen(shown) + 8 >= sizeof(lost)) {
                        snprintf(lost + len, sizeof(lost) - len, ", ...");
                        break;
                }
                snprintf(lost + len, sizeof(lost) - len, "%s%s", i ? ", " : "", shown);
        }
        double mib = (double)r->bytes / (1 << 20);
        if (sc->fork)
                snprintf(text, sizeof(text),
                         "session \"%s\" forked from \"%s\": %.1f MiB stored; it is hibernated, "
                         "and the next call naming it resumes it. \"%s\" is unchanged.%s%s",
                         sc->to, sc->session, mib, sc->session, lost[0] ? " Not saved: " : "",
                         lost);
        else
                snprintf(text, sizeof(text),
                         "session \"%s\" %s: %.1f MiB stored in %lld ms. %s%s%s", sc->session,
                         r->kept ? "checkpointed (it runs on)"
                                 : "hibernated (its container is gone)",
                         mib, r->ms,
                         r->kept ? "If it ends, the next call naming it resumes from this copy."
                                 : "The next call naming it resumes it.",
                         lost[0] ? " Not saved (they will not come back): " : "", lost);
        if (r->globals_error) {
                char shown[240];
                str_printable(r->globals_error, shown, sizeof(shown));
                size_t len = strlen(text);
                snprintf(text + len, sizeof(text) - len,
                         " Its Python globals could not be saved (%s): only its files will come "
                         "back.",
                         shown);
        }
        utf8_scrub(text);
        json_t *st =
            json_pack("{s:s, s:s, s:I, s:I, s:O?, s:b}", "session", sc->fork ? sc->to : sc->session,
                      "state", r->kept ? "checkpointed" : "hibernated", "stored_bytes",
                      (json_int_t)r->bytes, "save_ms", (json_int_t)r->ms, "not_saved", r->not_saved,
                      "globals_saved", r->globals_error == NULL);
        if (st && sc->fork)
                json_object_set_new(st, "forked_from", json_string(sc->session));
        return st ? tools_text_result(st, text) : NULL;
}

static void save_done(void *userdata, const struct session_saved *r)
{
        struct save_call *sc = userdata;
        if (request_live(&sc->req)) {
                if (r->error) {
                        char msg[700];
                        snprintf(msg, sizeof(msg), "session \"%s\" was not %s: %s", sc->session,
                                 sc->fork ? "forked" : "saved", r->error);
                        request_answer(&sc->req,
                                       error_result(FAILED_SESSION_SAVE, -EIO, utf8_scrub(msg)));
                } else {
                        struct session_saved shown = *r;
                        if (sc->fork)
                                shown.kept = false; /* the fork is hibernated */
                        request_answer(&sc->req, saved_result(sc, &shown));
                }
        }
        scall_free(sc);
}

static void save_or_fork(struct mcp_server *s, json_t *id, json_t *args, bool fork)
{
        static const char *const save_keys[] = {"session", "keep_running", NULL};
        static const char *const fork_keys[] = {"session", "new_session", NULL};
        const char *tool = fork ? "session_fork" : "session_save";
        if (!only_keys(s, id, args, tool, fork ? fork_keys : save_keys))
                return;
        const char *name = session_arg(s, id, args, tool);
        if (!name)
                return;
        json_t *keep = json_object_get(args, "keep_running");
        const char *to = json_string_value(json_object_get(args, "new_session"));
        if (keep && !json_is_boolean(keep)) {
                mcp_send_result(s, id, arguments_error("\"keep_running\" is true or false"));
                return;
        }
        if (fork && !to) {
                mcp_send_result(s, id,
                                arguments_error("session_fork needs \"new_session\", the new "
                                                "session's name"));
                return;
        }
        struct save_call *sc = calloc(1, sizeof(*sc));
        if (!sc) {
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        sc->fork = fork;
        snprintf(sc->session, sizeof(sc->session), "%s", name);
        snprintf(sc->to, sizeof(sc->to), "%s", to ? to : "");
        struct session_saved done = {0};
        struct err e = {0};
        int r = fork ? session_fork(s->sessions, s->owner, name, to, save_done, sc, &done, &e)
                     : session_save(s->sessions, s->owner, name, json_is_true(keep), save_done, sc,
                                    &done, &e);
        if (r < 0) {
                mcp_send_result(s, id, err_result(FAILED_SESSION_SAVE, r, &e));
                free(sc);
                return;
        }
        /* The save's callback comes from the loop, never from inside
         * session_save or session_fork. */
        request_begin(s, &sc->req, id, &scall_ops);
        if (r == 1) { /* hibernated already, or forked from a hibernated one */
                request_answer(&sc->req, saved_result(sc, &done));
                scall_free(sc);
                return;
        }
        sc->waiting = true;
}

void tool_session_save(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        (void)params;
        save_or_fork(s, id, args, false);
}

void tool_session_fork(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        (void)params;
        save_or_fork(s, id, args, true);
}

static void fcall_free(struct file_call *fc)
{
        request_end(&fc->req);
        sandbox_fop_cancel(fc->fop);
        sandbox_ask_cancel(fc->ask);
        free(fc);
}

/* Withdrawn, or its client gone: its file operation stops. A session
 * being opened for it cannot be stopped halfway: its end frees it. */
static void fcall_gone(struct request *r)
{
        struct file_call *fc = request_of(r, struct file_call);
        if (!fc->opening)
                fcall_free(fc);
}

static const struct request_ops fcall_ops = {
    .what = "a file call",
    .withdraw = fcall_gone,
    .drop = fcall_gone,
};

static struct file_call *fcall_new(struct mcp_server *s, json_t *id, const char *session,
                                   const char *path)
{
        struct file_call *fc = calloc(1, sizeof(*fc));
        if (!fc) {
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return NULL;
        }
        request_begin(s, &fc->req, id, &fcall_ops);
        snprintf(fc->session, sizeof(fc->session), "%s", session);
        snprintf(fc->path, sizeof(fc->path), "%s", path);
        return fc;
}

/* The sandbox of args.session for a file tool; NULL after answering. */
static struct sandbox *file_session(struct mcp_server *s, json_t *id, const char *name)
{
        struct err e = {0};
        struct sandbox *sb;
        int r = session_sandbox(s->sessions, s->owner, name, &sb, &e);
        if (r < 0) {
                mcp_send_result(s, id, err_result(FAILED_SESSION_GET, r, &e));
                return NULL;
        }
        if (!sandbox_mgr_engine(s->mgr) || !sandbox_container(sb)) {
                mcp_send_result(s, id, error_result(FAILED_SESSION_GET, -ENOTCONN, NULL));
                return NULL;
        }
        return sb;
}

static void write_answer(struct file_call *fc)
{
        char head[64], tail[SESSION_NAME_MAX + 32];
        struct buf text;
        buf_init(&text, 16 << 10);
        snprintf(head, sizeof(head), "wrote %zu bytes to ", fc->bytes);
        snprintf(tail, sizeof(tail), " (session \"%s\")", fc->session);
        buf_append_some(&text, head, strlen(head));
        buf_append_shown(&text, fc->path, strlen(fc->path));
        buf_append_some(&text, tail, strlen(tail));
        utf8_scrub((char *)buf_str(&text));
        request_answer(
            &fc->req, tools_text_result(json_pack("{s:s, s:s, s:I}", "session", fc->session, "path",
                                                  fc->path, "bytes", (json_int_t)fc->bytes),
                                        buf_str(&text)));
        buf_free(&text);
}

static void write_done(void *userdata, const struct files_result *r)
{
        struct file_call *fc = userdata;
        fc->fop = NULL;
        if (r->error) {
                request_answer(&fc->req, error_result(FAILED_FILE, r->error, r->message));
        } else {
                write_answer(fc);
                resources_files_written(fc->req.srv, fc->session, r->path);
        }
        fcall_free(fc);
}

/* write_file that opened its session: the session's first run wrote it.
 * A withdrawn call, or one whose client went, gets no answer (and its
 * server may be gone). */
static void write_opened(void *userdata, const struct sandbox_result *res)
{
        struct file_call *fc = userdata;
        if (request_live(&fc->req) && res->status == ST_OK) {
                write_answer(fc);
        } else if (request_live(&fc->req)) {
                struct result_view v = {.session = fc->session,
                                        .max_chars = (size_t)fc->req.srv->cfg->result_max_chars};
                request_answer(&fc->req, tools_result(res, &v));
        }
        fcall_free(fc);
}

void tool_write_file(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        static const char *const keys[] = {"session", "path", "content", "encoding", NULL};
        char full[FILES_PATH_MAX + 64];
        struct err e = {0};
        const char *name =
            file_args(s, id, args, "write_file", keys, NULL, false, full, sizeof(full));
        if (!name)
                return;
        struct buf data;
        int r =
            tools_file_content(json_object_get(args, "content"), json_object_get(args, "encoding"),
                               s->cfg->file_max_bytes, &data, &e);
        if (r < 0) {
                mcp_send_result(s, id, err_result(FAILED_ARGUMENTS, r, &e));
                return;
        }
        struct file_call *fc = fcall_new(s, id, name, full);
        if (!fc) {
                buf_free(&data);
                return;
        }
        fc->bytes = data.len;
        if (session_exists(s->sessions, s->owner, name)) {
                struct sandbox *sb = file_session(s, id, name);
                r = sb ? sandbox_write_file(sb, full, data.data ? data.data : "", data.len,
                                            write_done, fc, &fc->fop)
                       : 1;
                if (r < 0)
                        mcp_send_result(s, id, error_result(FAILED_FILE_START, r, NULL));
                if (r != 0)
                        fcall_free(fc);
                buf_free(&data);
                return;
        }
        /* A new session: its first run writes the file and runs nothing. */
        struct sandbox_file f = {.path = full, .data = data.data ? data.data : "", .len = data.len};
        struct sandbox_request req = {
            .lang = LANG_PYTHON,
            .code = "",
            .timeout_s = s->cfg->timeout_s,
            .session = name,
            .owner = s->owner,
            .files = &f,
            .n_files = 1,
        };
        struct sandbox *sb;
        fc->opening = true;
        r = session_run(s->sessions, &req, write_opened, fc, &sb, &e);
        buf_free(&data);
        if (r < 0) {
                mcp_send_result(s, id, err_result(FAILED_SESSION_RUN, r, &e));
                fcall_free(fc);
        }
}

static void read_done(void *userdata, const struct files_result *r)
{
        struct file_call *fc = userdata;
        fc->fop = NULL;
        if (r->error) {
                request_answer(&fc->req, error_result(FAILED_FILE, r->error, r->message));
                fcall_free(fc);
                return;
        }
        size_t size = r->len;
        size_t from = fc->offset < size ? fc->offset : size;
        size_t to = size - from > fc->limit ? from + fc->limit : size;
        /* Text: valid UTF-8 with no NUL. Its window starts and ends on
         * whole characters. */
        bool text = utf8_text(r->data, size);
        if (text) {
                while (from < to && ((unsigned char)r->data[from] & 0xC0) == 0x80)
                        from++;
                if (to < size)
                        to = from + utf8_cut(r->data + from, to - from);
        }
        const char *mime = files_mime_type(fc->path);
        bool more = to < size;
        json_t *st = json_pack("{s:s, s:s, s:I, s:I, s:I, s:o, s:b, s:s, s:s?}", "session",
                               fc->session, "path", r->path, "size", (json_int_t)size, "offset",
                               (json_int_t)from, "length", (json_int_t)(to - from), "next_offset",
                               more ? json_integer((json_int_t)to) : json_null(), "truncated", more,
                               "encoding", text ? "utf-8" : "base64", "mime_type", mime);
        json_t *result = NULL;
        char about[300];
        snprintf(about, sizeof(about), ": %zu bytes%s%s; bytes %zu to %zu%s", size,
                 mime ? ", " : "", mime ? mime : "", from, to,
                 more ? " (more: read on from next_offset)" : "");
        struct buf shown;
        buf_init(&shown, 16 << 10);
        buf_append_shown(&shown, r->path, strlen(r->path));
        buf_append_some(&shown, about, strlen(about));
        utf8_scrub((char *)buf_str(&shown));
        const char *head = buf_str(&shown);
        if (text) {
                result =
                    json_pack("{s:[{s:s, s:s%}], s:o, s:b}", "content", "type", "text", "text",
                              r->data + from, to - from, "structuredContent", st, "isError", 0);
        } else {
                struct buf b64;
                buf_init(&b64, (to - from + 2) / 3 * 4 + 1);
                json_t *item = NULL;
                /* The whole file: its base64 as the runtime sent it, when
                 * that is the canonical one; else encoded here. */
                bool whole = r->b64 && from == 0 && to == size;
                if (whole || base64_encode(&b64, r->data + from, to - from) == 0) {
                        char uri[FILES_PATH_MAX + 16];
                        snprintf(uri, sizeof(uri), "file://%s", r->path);
                        utf8_scrub(uri);
                        /* Base64 is ASCII: no need to check its megabytes as UTF-8. */
                        json_t *blob =
                            whole ? json_stringn_nocheck(r->b64, r->b64_len)
                                  : json_stringn_nocheck(b64.data ? b64.data : "", b64.len);
                        if (mime && strncmp(mime, "image/", 6) == 0 && from == 0 && !more)
                                item = json_pack("{s:s, s:o, s:s}", "type", "image", "data", blob,
                                                 "mimeType", mime);
                        else
                                item = json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "resource",
                                                 "resource", "uri", uri, "mimeType",
                                                 mime ? mime : "application/octet-stream", "blob",
                                                 blob);
                }
                buf_free(&b64);
                if (item)
                        result =
                            json_pack("{s:[{s:s, s:s}, o], s:o, s:b}", "content", "type", "text",
                                      "text", head, item, "structuredContent", st, "isError", 0);
                else
                        json_decref(st);
        }
        buf_free(&shown);
        request_answer(&fc->req, result);
        fcall_free(fc);
}

static bool window_arg(struct mcp_server *s, json_t *id, json_t *args, const char *key, size_t *ret,
                       size_t min)
{
        json_t *v = json_object_get(args, key);
        if (!v)
                return true;
        if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min) {
                char msg[120];
                snprintf(msg, sizeof(msg), "argument \"%s\" must be an integer >= %zu", key, min);
                mcp_send_result(s, id, arguments_error(msg));
                return false;
        }
        *ret = (size_t)json_integer_value(v);
        return true;
}

static bool window_arg(struct mcp_server *s, json_t *id, json_t *args, const char *key, size_t *ret,
                       size_t min);

/* read_file of a run's kept output (corral://run/{id}/...): a window of
 * it, by default result_max_chars, for a model reads it a piece at a
 * time. */
static void read_kept(struct mcp_server *s, json_t *id, json_t *args, const char *uri)
{
        size_t offset = 0, limit = (size_t)s->cfg->result_max_chars;
        if (json_object_get(args, "session")) {
                mcp_send_result(s, id,
                                arguments_error("a corral://run/ path names its run: give no "
                                                "\"session\""));
                return;
        }
        if (!window_arg(s, id, args, "offset", &offset, 0) ||
            !window_arg(s, id, args, "limit", &limit, 1))
                return;
        struct kept_piece p;
        struct err e = {0};
        int r = results_read(s, uri, offset, limit, &p, &e);
        if (r < 0) {
                mcp_send_result(s, id, err_result(FAILED_FILE, r, &e));
                return;
        }
        size_t end = p.offset + p.data.len;
        bool more = end < p.size;
        json_t *st = json_pack("{s:s, s:I, s:I, s:I, s:o, s:b, s:s, s:s?, s:b}", "path", uri,
                               "size", (json_int_t)p.size, "offset", (json_int_t)p.offset, "length",
                               (json_int_t)p.data.len, "next_offset",
                               more ? json_integer((json_int_t)end) : json_null(), "truncated",
                               more, "encoding", p.text ? "utf-8" : "base64", "mime_type",
                               p.mime_type, "partial", p.partial);
        json_t *result = NULL;
        if (p.text) {
                char foot[200];
                snprintf(foot, sizeof(foot), "\n[bytes %zu to %zu of %llu%s]", p.offset, end,
                         p.size, more ? "; more: read on from next_offset" : "");
                struct buf text;
                buf_init(&text, p.data.len + sizeof(foot));
                buf_append(&text, p.data.data ? p.data.data : "", p.data.len);
                buf_append_some(&text, foot, strlen(foot));
                result = json_pack("{s:[{s:s, s:s%}], s:o, s:b}", "content", "type", "text", "text",
                                   text.data ? text.data : "", text.len, "structuredContent", st,
                                   "isError", 0);
                buf_free(&text);
        } else {
                struct buf b64;
                buf_init(&b64, (p.data.len + 2) / 3 * 4 + 1);
                if (base64_encode(&b64, p.data.data ? p.data.data : "", p.data.len) == 0)
                        result = json_pack("{s:[{s:s, s:{s:s, s:s, s:s%}}], s:o, s:b}", "content",
                                           "type", "resource", "resource", "uri", uri, "mimeType",
                                           p.mime_type ? p.mime_type : "application/octet-stream",
                                           "blob", b64.data ? b64.data : "", b64.len,
                                           "structuredContent", st, "isError", 0);
                else
                        json_decref(st);
                buf_free(&b64);
        }
        buf_free(&p.data);
        mcp_send_result(s, id, result);
}

void tool_read_file(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        static const char *const keys[] = {"session", "path", "offset", "limit", NULL};
        const char *path = json_string_value(json_object_get(args, "path"));
        if (path && results_uri(path)) {
                if (only_keys(s, id, args, "read_file", keys))
                        read_kept(s, id, args, path);
                return;
        }
        char full[FILES_PATH_MAX + 64];
        const char *name =
            file_args(s, id, args, "read_file", keys, NULL, false, full, sizeof(full));
        if (!name)
                return;
        size_t offset = 0, limit = s->cfg->output_limit;
        if (!window_arg(s, id, args, "offset", &offset, 0) ||
            !window_arg(s, id, args, "limit", &limit, 1))
                return;
        struct sandbox *sb = file_session(s, id, name);
        if (!sb)
                return;
        struct file_call *fc = fcall_new(s, id, name, full);
        if (!fc)
                return;
        fc->offset = offset;
        fc->limit = limit;
        int r = sandbox_read_file(sb, full, s->cfg->file_max_bytes, read_done, fc, &fc->fop);
        if (r < 0) {
                mcp_send_result(s, id, error_result(FAILED_FILE_START, r, NULL));
                fcall_free(fc);
        }
}

static void list_done(void *userdata, json_t *result, const struct err *why)
{
        struct file_call *fc = userdata;
        fc->ask = NULL;
        if (!result) {
                /* The runtime's words, bounded. */
                char msg[700];
                snprintf(msg, sizeof(msg), "%.600s", why->msg);
                utf8_scrub(msg);
                request_answer(&fc->req, error_result(FAILED_LIST, 0, msg));
                fcall_free(fc);
                return;
        }
        /* The container's answer: only well-formed entries pass. */
        json_t *entries = json_array();
        struct buf text;
        buf_init(&text, 4 << 20);
        size_t i, escaped = 0;
        json_t *e;
        json_array_foreach(json_object_get(result, "entries"), i, e)
        {
                const char *path = json_string_value(json_object_get(e, "path"));
                const char *type = json_string_value(json_object_get(e, "type"));
                json_t *size = json_object_get(e, "size");
                if (!path || !type || !json_is_integer(size) || i >= RT_LIST_MAX)
                        continue;
                const char *target = json_string_value(json_object_get(e, "target"));
                json_t *clean = json_pack("{s:s, s:s, s:O, s:O?, s:O?, s:s?}", "path", path, "type",
                                          type, "size", size, "mode", json_object_get(e, "mode"),
                                          "mtime", json_object_get(e, "mtime"), "target", target);
                if (!clean)
                        continue;
                json_array_append_new(entries, clean);
                /* Names are the sandbox's: shown escaped, so that none can
                 * move a terminal's cursor or pass for another line; the
                 * structured entries keep them exact. */
                char line[100];
                snprintf(line, sizeof(line), "%-7.20s %10lld  ", type,
                         (long long)json_integer_value(size));
                buf_append_some(&text, line, strlen(line));
                escaped += buf_append_shown(&text, path, strlen(path));
                if (strcmp(type, "dir") == 0)
                        buf_append_some(&text, "/", 1);
                if (target) {
                        buf_append_some(&text, " -> ", 4);
                        escaped += buf_append_shown(&text, target, strlen(target));
                }
                buf_append_some(&text, "\n", 1);
        }
        bool truncated = json_is_true(json_object_get(result, "truncated"));
        char foot[200];
        snprintf(foot, sizeof(foot), "%zu entries in ", json_array_size(entries));
        buf_append_some(&text, foot, strlen(foot));
        escaped += buf_append_shown(&text, fc->path, strlen(fc->path));
        snprintf(foot, sizeof(foot), "%s%s", truncated ? " (more: raise limit)" : "",
                 escaped ? "; control characters in names are shown as C escapes (\\n, \\e, "
                           "\\xNN; \\\\ is a backslash), structuredContent has them exact"
                         : "");
        buf_append_some(&text, foot, strlen(foot));
        utf8_scrub((char *)buf_str(&text));
        json_t *st = json_pack("{s:s, s:s, s:o, s:b}", "session", fc->session, "path", fc->path,
                               "entries", entries, "truncated", truncated);
        request_answer(&fc->req, st ? tools_text_result(st, buf_str(&text)) : NULL);
        buf_free(&text);
        fcall_free(fc);
}

void tool_list_files(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        static const char *const keys[] = {"session", "path", "recursive", "limit", NULL};
        char full[FILES_PATH_MAX + 64];
        const char *name =
            file_args(s, id, args, "list_files", keys, ".", true, full, sizeof(full));
        if (!name)
                return;
        json_t *rec = json_object_get(args, "recursive");
        if (rec && !json_is_boolean(rec)) {
                mcp_send_result(s, id,
                                arguments_error("list_files takes \"recursive\", true or "
                                                "false"));
                return;
        }
        size_t limit = 1000;
        if (!window_arg(s, id, args, "limit", &limit, 1))
                return;
        if (limit > RT_LIST_MAX)
                limit = RT_LIST_MAX;
        struct sandbox *sb = file_session(s, id, name);
        if (!sb)
                return;
        struct file_call *fc = fcall_new(s, id, name, full);
        if (!fc)
                return;
        json_t *what = json_pack("{s:s, s:b, s:I}", "path", full, "recursive", json_is_true(rec),
                                 "limit", (json_int_t)limit);
        int r = sandbox_ask(sb, "sandbox/list", what, list_done, fc, &fc->ask);
        if (r < 0) {
                mcp_send_result(s, id, error_result(FAILED_ASK, r, NULL));
                fcall_free(fc);
        }
}
