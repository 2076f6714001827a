/* A run's files: the request's files written into /workspace before the
 * code, and what the code wrote under /workspace/out fetched after it,
 * each checked on its way. The sandbox's runtime moves them (files.h),
 * with the sandbox's own rights: code left running in a session's
 * background can do nothing to them that it could not do itself. */
#include "sandbox/internal.h"

#include "core/log.h"
#include "runtime/protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COLLECT_MAX_MS 30000 /* fetching /workspace/out after a run */
#define OUT_FILES_MAX  RT_OUT_FILES_MAX

void transfer_cancel(struct run *r)
{
        files_op_cancel(r->fop);
        r->fop = NULL;
}

/* ---- files in */

static void upload_next(struct sandbox *s);

static void uploaded(void *userdata, const struct files_result *res)
{
        struct sandbox *s = userdata;
        s->run->fop = NULL;
        if (res->error) {
                run_failed(s, ST_ERROR, "FileError", res->message);
                return;
        }
        s->run->i_file++;
        upload_next(s);
}

static void files_clear(struct run *r)
{
        for (size_t i = 0; i < r->n_files; i++) {
                free((char *)r->files[i].path);
                free((char *)r->files[i].data);
        }
        free(r->files);
        r->files = NULL;
        r->n_files = r->i_file = 0;
}

static void upload_next(struct sandbox *s)
{
        struct run *r = s->run;
        if (r->i_file >= r->n_files) {
                files_clear(r);
                run_send_exec(s);
                return;
        }
        const struct sandbox_file *f = &r->files[r->i_file];
        if (files_write(s, f->path, f->data, f->len, uploaded, s, &r->fop) < 0)
                run_failed(s, ST_ERROR, "FileError", "cannot write the files: out of memory");
}

void transfer_upload(struct sandbox *s)
{
        if (s->run->n_files == 0)
                run_send_exec(s);
        else
                upload_next(s);
}

void transfer_free(struct run *r)
{
        files_clear(r);
        json_decref(r->out_list);
        r->out_list = NULL;
}

/* ---- files out */

static void collect_next(struct sandbox *s);

static void out_note(struct run *r, const char *path, json_int_t size, const char *note)
{
        json_array_append_new(r->res.out_files,
                              json_pack("{s:s, s:I, s:s?, s:s}", "path", path, "size", size,
                                        "mime_type", files_mime_type(path), "note", note));
}

static void collected(void *userdata, const struct files_result *res)
{
        struct sandbox *s = userdata;
        struct run *r = s->run;
        r->fop = NULL;
        json_t *f = json_array_get(r->out_list, r->i_out);
        const char *path = json_string_value(json_object_get(f, "path"));
        json_int_t size = json_integer_value(json_object_get(f, "size"));
        if (res->error) {
                out_note(r, path, size, res->message);
        } else {
                /* The runtime's base64 when it is canonical, else encoded
                 * here; ASCII either way, not checked again as UTF-8. */
                struct buf b64;
                buf_init(&b64, (res->len + 2) / 3 * 4 + 1);
                if (res->b64 || base64_encode(&b64, res->data, res->len) == 0) {
                        json_t *data =
                            res->b64 ? json_stringn_nocheck(res->b64, res->b64_len)
                                     : json_stringn_nocheck(b64.data ? b64.data : "", b64.len);
                        json_array_append_new(r->res.out_files,
                                              json_pack("{s:s, s:I, s:s?, s:o}", "path", path,
                                                        "size", (json_int_t)res->len, "mime_type",
                                                        files_mime_type(path), "data", data));
                        r->out_bytes += res->len;
                } else {
                        out_note(r, path, size, "out of memory");
                }
                buf_free(&b64);
        }
        r->i_out++;
        collect_next(s);
}

/* An entry of the runtime's out_files (the container's word), checked:
 * its path under /workspace/out relative to /workspace, or NULL. A path
 * under out/ that corral cannot fetch (a control character in its name)
 * gets the reason in `why` and its relative form in *ret_shown; anything
 * else is malformed and `why` stays empty. */
static const char *out_path(json_t *f, char *full, size_t size, char *why, size_t why_size,
                            const char **ret_shown)
{
        const char *path = json_string_value(json_object_get(f, "path"));
        json_t *bytes = json_object_get(f, "size");
        why[0] = '\0';
        if (!path || !json_is_integer(bytes) || json_integer_value(bytes) < 0)
                return NULL;
        struct err e = {0};
        if (files_path(path, false, full, size, &e) < 0) {
                size_t n = strnlen(e.msg, why_size - 1); /* cut: it is a note */
                memcpy(why, e.msg, n);
                why[n] = '\0';
                const char *rel = strncmp(path, FILES_ROOT "/", strlen(FILES_ROOT "/")) == 0
                                      ? path + strlen(FILES_ROOT "/")
                                      : path;
                if (strncmp(rel, "out/", 4) != 0 || strstr(rel, "/../") || strstr(rel, "/./"))
                        why[0] = '\0';
                *ret_shown = rel;
                return NULL;
        }
        if (strncmp(full, FILES_ROOT "/out/", strlen(FILES_ROOT "/out/")) != 0)
                return NULL;
        return full + strlen(FILES_ROOT) + 1;
}

/* A file the runtime put in its result (a single-use run's, read by PID 1
 * as the sandbox's user once the code's processes were gone): taken when
 * its base64 is sound, of the size listed and within `max`; else the
 * engine fetches it like any other. */
static bool inline_taken(struct run *r, json_t *f, size_t max)
{
        json_t *data = json_object_get(f, "data");
        json_int_t size = json_integer_value(json_object_get(f, "size"));
        if (!json_is_string(data) || size < 0 || (unsigned long long)size > max ||
            json_string_length(data) != ((size_t)size + 2) / 3 * 4)
                return false;
        struct buf raw;
        buf_init(&raw, (size_t)size);
        bool ok = base64_decode(&raw, json_string_value(data), json_string_length(data)) == 0 &&
                  raw.len == (size_t)size;
        buf_free(&raw);
        if (!ok)
                return false;
        const char *path = json_string_value(json_object_get(f, "path"));
        json_array_append_new(r->res.out_files,
                              json_pack("{s:s, s:I, s:s?, s:O}", "path", path, "size", size,
                                        "mime_type", files_mime_type(path), "data", data));
        r->out_bytes += (unsigned long long)size;
        return true;
}

/* Whether entry `f` is done with here (listed with a note, skipped, or
 * taken inline) rather than to be fetched from `full`. */
static bool collect_settled(struct sandbox *s, json_t *f, char *full, size_t full_size,
                            size_t *ret_max)
{
        const struct config *cfg = s->mgr->cfg;
        struct run *r = s->run;
        json_t *size = json_object_get(f, "size");
        char why[300];
        const char *shown = NULL;
        if (!out_path(f, full, full_size, why, sizeof(why), &shown)) {
                if (why[0]) {
                        /* Listed, not lost: the result says why. */
                        char note[400];
                        snprintf(note, sizeof(note),
                                 "not returned: %s; rename it (mv in run_shell) to fetch it", why);
                        out_note(r, shown, json_integer_value(size), note);
                } else {
                        log_warn("sandbox %s: ignored a malformed out_files entry", s->short_id);
                }
                return true;
        }
        unsigned long long want = (unsigned long long)json_integer_value(size);
        unsigned long long room = cfg->out_max_bytes - r->out_bytes;
        if (want > room) {
                char note[200];
                snprintf(note, sizeof(note),
                         "not returned: %llu bytes, over what is left of out_max_bytes "
                         "(%llu); read it with read_file in a session, or raise "
                         "out_max_bytes",
                         want, room);
                out_note(r, full + strlen(FILES_ROOT) + 1, json_integer_value(size), note);
                return true;
        }
        /* The entry's path, relative, for the result. */
        json_object_set_new(f, "path", json_string(full + strlen(FILES_ROOT) + 1));
        *ret_max = room < cfg->file_max_bytes ? room : cfg->file_max_bytes;
        return inline_taken(r, f, *ret_max);
}

/* One file at a time, each checked on its way, up to out_max_bytes in all. */
static void collect_next(struct sandbox *s)
{
        struct run *r = s->run;
        while (r->i_out < json_array_size(r->out_list) &&
               json_array_size(r->res.out_files) < OUT_FILES_MAX) {
                json_t *f = json_array_get(r->out_list, r->i_out);
                char full[FILES_PATH_MAX + 64];
                size_t max = 0;
                if (collect_settled(s, f, full, sizeof(full), &max)) {
                        r->i_out++;
                        continue;
                }
                if (files_read(s, full, max, collected, s, &r->fop) < 0) {
                        out_note(r, full + strlen(FILES_ROOT) + 1,
                                 json_integer_value(json_object_get(f, "size")), "out of memory");
                        r->i_out++;
                        continue;
                }
                return;
        }
        run_end(s);
}

/* Fetching took too long: what is left is listed, not returned. */
static void collect_expired(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        struct run *r = s->run;
        (void)t;
        transfer_cancel(r);
        log_warn("sandbox %s: fetching /workspace/out took over %d ms; giving up", s->short_id,
                 COLLECT_MAX_MS);
        for (; r->i_out < json_array_size(r->out_list) &&
               json_array_size(r->res.out_files) < OUT_FILES_MAX;
             r->i_out++) {
                json_t *f = json_array_get(r->out_list, r->i_out);
                char full[FILES_PATH_MAX + 64], why[300];
                const char *shown = NULL;
                const char *path = out_path(f, full, sizeof(full), why, sizeof(why), &shown);
                if (!path && why[0])
                        path = shown;
                if (path)
                        out_note(r, path, json_integer_value(json_object_get(f, "size")),
                                 "not returned: fetching it took too long");
        }
        run_end(s);
}

void transfer_collect(struct sandbox *s)
{
        struct run *r = s->run;
        sandbox_set_state(s, S_COLLECTING);
        r->res.out_files = json_array();
        timer_stop(r->limit_timer);
        if (timer_set(s->mgr->loop, &r->collect_timer, collect_expired, s, COLLECT_MAX_MS) < 0)
                log_warn("sandbox %s: no time limit on fetching /workspace/out", s->short_id);
        collect_next(s);
}
