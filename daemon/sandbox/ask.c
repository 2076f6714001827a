/* Requests to a sandbox's runtime (sandbox_ask), and read_file and
 * write_file on a kept sandbox (a session), which are such requests
 * (sandbox/files.h): the runtime does them with the sandbox's own rights,
 * so nothing needs the session's processes held still meanwhile. */
#include "sandbox/internal.h"

#include "core/jsonrpc.h"
#include "core/log.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASK_TIMEOUT_MS 30000 /* a request to the runtime (sandbox/list, a file's chunk) */

struct sandbox_ask {
        struct sandbox *sb;
        struct list node; /* s->asks, until answered */
        char id[32];
        sandbox_ask_cb cb;
        void *userdata;
        struct timer *timer; /* ASK_TIMEOUT_MS: an answer that never comes */
        /* Ended: the answer, handed over from the loop. */
        bool ended;
        json_t *result;
        struct err err; /* when there is no result */
        json_t *error;  /* the runtime's error object, when it sent one */
        struct defer d;
};

/* A read_file or write_file on a kept sandbox. */
struct sandbox_fop {
        struct sandbox *sb;
        struct list node; /* s->fops */
        files_cb cb;
        void *userdata;
        struct files_op *op;
        /* Failed before the runtime answered: the error, handed over from
         * the loop. */
        bool failed;
        int error;
        char path[FILES_PATH_MAX + 64];
        char message[600];
        struct defer d;
};

/* ---- requests to the runtime */

static void ask_free(struct sandbox_ask *a)
{
        list_del(&a->node);
        timer_remove(a->timer);
        defer_cancel(&a->d);
        json_decref(a->result);
        json_decref(a->error);
        free(a);
}

static void ask_deliver(void *userdata)
{
        struct sandbox_ask *a = userdata;
        if (a->cb)
                a->cb(a->userdata, a->result, a->result ? NULL : &a->err);
        ask_free(a);
}

/* The answer (or why there is none) goes to the caller from the loop. */
/* `result`, or none, with why (`kind` and `code`, and the runtime's words
 * or ours). */
static void ask_end(struct sandbox_ask *a, json_t *result, json_t *error, enum err_kind kind,
                    int code, const char *why)
{
        list_del(&a->node);
        timer_remove(a->timer);
        a->timer = NULL;
        a->ended = true;
        a->result = json_incref(result);
        a->error = result ? NULL : json_incref(error);
        if (!result)
                err_set(&a->err, kind, code, "%.600s", why ? why : "no answer");
        loop_defer(a->sb->mgr->loop, &a->d, ask_deliver, a);
}

static void ask_timeout(struct timer *t, void *userdata)
{
        (void)t;
        ask_end(userdata, NULL, NULL, ERR_PROTOCOL, -ETIMEDOUT,
                "the sandbox's runtime did not answer in time");
}

void ask_answered(struct sandbox *s, const char *id, json_t *result, json_t *error)
{
        struct sandbox_ask *a;
        const char *why = json_string_value(json_object_get(error, "message"));
        list_for_each(a, &s->asks, node)
        {
                if (strcmp(a->id, id) == 0) {
                        ask_end(a, result, json_is_object(error) ? error : NULL, ERR_REFUSED, -EIO,
                                why ? why : "error");
                        return;
                }
        }
}

const json_t *sandbox_ask_error(const struct err *e)
{
        /* Only an ask's own err reaches its callback. */
        return e ? ((const struct sandbox_ask *)((const char *)e -
                                                 offsetof(struct sandbox_ask, err)))
                       ->error
                 : NULL;
}

int sandbox_ask(struct sandbox *s, const char *method, json_t *params, sandbox_ask_cb cb,
                void *userdata, struct sandbox_ask **ret)
{
        if (!s->attach || s->state < S_READY || s->state >= S_REMOVING) {
                json_decref(params);
                return -ENOTCONN;
        }
        struct sandbox_ask *a = calloc(1, sizeof(*a));
        if (!a) {
                json_decref(params);
                return -ENOMEM;
        }
        a->sb = s;
        a->cb = cb;
        a->userdata = userdata;
        if (timer_add(s->mgr->loop, ask_timeout, a, &a->timer) == 0)
                timer_arm(a->timer, ASK_TIMEOUT_MS);
        /* String ids: the exec requests have the integers. */
        snprintf(a->id, sizeof(a->id), "ask-%u", ++s->ask_seq);
        json_t *msg = json_pack("{s:s, s:s, s:s, s:o}", "jsonrpc", "2.0", "id", a->id, "method",
                                method, "params", params ? params : json_object());
        if (!msg || sandbox_send_frame(s, msg) < 0) {
                ask_free(a);
                return -ENOBUFS;
        }
        list_push(&s->asks, &a->node);
        *ret = a;
        return 0;
}

void sandbox_ask_cancel(struct sandbox_ask *a)
{
        if (a)
                ask_free(a); /* its answer, if on its way, is not handed over */
}

size_t sandbox_pending(const struct sandbox *s)
{
        /* (A file operation's request in flight counts it twice: it is
         * only ever compared with 0.) */
        return list_length(&s->fops) + list_length(&s->asks);
}

/* ---- read_file and write_file on a session */

/* Out of the sandbox's hands: its file operation given up. */
static void fop_detach(struct sandbox_fop *f)
{
        list_del(&f->node);
        files_op_cancel(f->op);
        f->op = NULL;
}

static void fop_free(struct sandbox_fop *f)
{
        if (!f->failed)
                fop_detach(f);
        defer_cancel(&f->d);
        free(f);
}

/* The runtime answered (from the loop). */
static void fop_done(void *userdata, const struct files_result *r)
{
        struct sandbox_fop *f = userdata;
        f->op = NULL;
        fop_detach(f);
        f->cb(f->userdata, r);
        free(f);
}

static void fop_failed(void *userdata)
{
        struct sandbox_fop *f = userdata;
        struct files_result r = {.error = f->error, .message = f->message, .path = f->path};
        f->cb(f->userdata, &r);
        fop_free(f);
}

/* The operation fails: the caller hears of it from the loop. */
static void fop_fail(struct sandbox_fop *f, int error, const char *message)
{
        struct loop *l = f->sb->mgr->loop;
        fop_detach(f);
        f->failed = true;
        f->error = error;
        snprintf(f->message, sizeof(f->message), "%s", message);
        loop_defer(l, &f->d, fop_failed, f);
}

static int fop_start(struct sandbox *s, bool write, const char *path, const void *data, size_t len,
                     size_t max, files_cb cb, void *userdata, struct sandbox_fop **ret)
{
        if (!s->id || !s->attach || s->state < S_READY || s->state >= S_REMOVING ||
            strlen(path) >= sizeof(((struct sandbox_fop *)0)->path))
                return -ENOTCONN;
        struct sandbox_fop *f = calloc(1, sizeof(*f));
        if (!f)
                return -ENOMEM;
        f->sb = s;
        f->cb = cb;
        f->userdata = userdata;
        snprintf(f->path, sizeof(f->path), "%s", path);
        int r = write ? files_write(s, path, data, len, fop_done, f, &f->op)
                      : files_read(s, path, max, fop_done, f, &f->op);
        if (r < 0) {
                free(f);
                return r == -EINVAL || r == -ENOMEM ? r : -ENOTCONN;
        }
        list_push(&s->fops, &f->node);
        *ret = f;
        return 0;
}

int sandbox_read_file(struct sandbox *s, const char *path, size_t max, files_cb cb, void *userdata,
                      struct sandbox_fop **ret)
{
        return fop_start(s, false, path, NULL, 0, max, cb, userdata, ret);
}

int sandbox_write_file(struct sandbox *s, const char *path, const void *data, size_t len,
                       files_cb cb, void *userdata, struct sandbox_fop **ret)
{
        return fop_start(s, true, path, data, len, 0, cb, userdata, ret);
}

void sandbox_fop_cancel(struct sandbox_fop *f)
{
        if (f)
                fop_free(f);
}

void ask_release(struct sandbox *s)
{
        bool silent = s->mgr->freeing; /* nobody is left to tell */
        /* File operations under way end with an error. */
        while (!list_empty(&s->fops)) {
                struct sandbox_fop *f = list_first(&s->fops, struct sandbox_fop, node);
                if (silent)
                        fop_free(f);
                else
                        fop_fail(f, -EIO, "the session's sandbox ended first");
        }
        /* Requests to its runtime get their answer: there will be none. */
        while (!list_empty(&s->asks)) {
                struct sandbox_ask *a = list_first(&s->asks, struct sandbox_ask, node);
                if (silent)
                        ask_free(a);
                else
                        ask_end(a, NULL, NULL, ERR_REFUSED, -ENOTCONN,
                                "the sandbox ended before it answered");
        }
}
