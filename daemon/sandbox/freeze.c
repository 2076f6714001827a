/* A kept sandbox (a session) held still while files move: the engine
 * follows paths as root, and code left running must not swap a checked
 * directory for a symlink meanwhile. Holds are counted; the first asks the
 * runtime to stop every other process (sandbox/freeze), the last lets them
 * go (sandbox/thaw). Here too: requests to the runtime (sandbox_ask), and
 * read_file and write_file on a session. */
#include "sandbox/internal.h"

#include "core/jsonrpc.h"
#include "core/log.h"
#include "runtime/protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASK_TIMEOUT_MS 30000 /* a request to the runtime (sandbox/list, freeze) */
/* A freeze is renewed well before the runtime lifts it by itself. */
#define FREEZE_RENEW_MS (RT_FREEZE_MAX_S * 1000 * 2 / 3)

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
        struct defer d;
};

/* A read_file or write_file on a kept sandbox, run frozen. */
struct sandbox_fop {
        struct sandbox *sb;
        struct list node; /* s->fops */
        bool write;
        char path[FILES_PATH_MAX + 64];
        char *data;
        size_t len, max;
        files_cb cb;
        void *userdata;
        struct freeze_wait wait;
        bool waiting, frozen;
        struct files_op *op;
        /* Failed before the engine answered: the error, handed over from
         * the loop. */
        bool failed;
        int error;
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
static void ask_end(struct sandbox_ask *a, json_t *result, enum err_kind kind, int code,
                    const char *why)
{
        list_del(&a->node);
        timer_remove(a->timer);
        a->timer = NULL;
        a->ended = true;
        a->result = json_incref(result);
        if (!result)
                err_set(&a->err, kind, code, "%.600s", why ? why : "no answer");
        loop_defer(a->sb->mgr->loop, &a->d, ask_deliver, a);
}

static void ask_timeout(struct timer *t, void *userdata)
{
        (void)t;
        ask_end(userdata, NULL, ERR_PROTOCOL, -ETIMEDOUT,
                "the sandbox's runtime did not answer in time");
}

void freeze_ask_answered(struct sandbox *s, const char *id, json_t *result, const char *error)
{
        struct sandbox_ask *a;
        list_for_each(a, &s->asks, node)
        {
                if (strcmp(a->id, id) == 0) {
                        ask_end(a, result, ERR_REFUSED, -EIO, error);
                        return;
                }
        }
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

/* ---- the freeze */

static void thaw(struct sandbox *s);
static void freeze_renew(struct timer *t, void *userdata);

/* A run that waited for file operations to end goes on. */
static void thawed(struct sandbox *s)
{
        struct run *r = s->run;
        if (r && r->exec_pending && s->freezes == 0 && s->fz == FZ_THAWED &&
            s->state == S_UPLOADING) {
                r->exec_pending = false;
                run_send_exec(s);
        }
}

static void freeze_answer(void *userdata, json_t *result, const struct err *e)
{
        struct sandbox *s = userdata;
        bool frozen = result && json_is_true(json_object_get(result, "frozen"));
        s->fz = frozen ? FZ_FROZEN : FZ_THAWED;
        if (frozen && timer_set(s->mgr->loop, &s->fz_timer, freeze_renew, s, FREEZE_RENEW_MS) < 0)
                log_warn("sandbox %s: cannot renew its freeze later", s->short_id);
        /* The waiting holds are answered together: taken off the list
         * first (a hold asked for meanwhile waits for a freeze of its own),
         * and when the freeze failed each gives up its count first. */
        struct freeze_wait *answered = NULL, **tail = &answered;
        while (!list_empty(&s->fz_waits)) {
                struct freeze_wait *w = list_first(&s->fz_waits, struct freeze_wait, node);
                list_del(&w->node);
                if (!frozen)
                        s->freezes--;
                *tail = w;
                tail = &w->answered_next;
        }
        *tail = NULL;
        if (frozen && s->freezes == 0) {
                thaw(s); /* everyone gave up meanwhile */
                return;
        }
        struct err none = {0};
        if (!frozen && !e)
                err_set(&none, ERR_PROTOCOL, -EIO, "no answer");
        for (struct freeze_wait *w = answered, *next; w; w = next) {
                next = w->answered_next;
                w->ready(w->userdata, frozen ? NULL : e ? e : &none);
        }
        if (!frozen && s->state != S_DONE)
                thawed(s); /* a run waiting for the freeze to end need not wait */
}

static void freeze_granted(void *userdata)
{
        struct freeze_wait *w = userdata;
        w->ready(w->userdata, NULL);
}

/* Take a hold on the freeze: w->ready follows from the loop. */
int freeze_get(struct sandbox *s, struct freeze_wait *w)
{
        s->freezes++;
        if (s->fz == FZ_FROZEN) {
                loop_defer(s->mgr->loop, &w->d, freeze_granted, w);
                return 0;
        }
        list_append(&s->fz_waits, &w->node);
        if (s->fz == FZ_THAWED) {
                struct sandbox_ask *a;
                if (sandbox_ask(s, "sandbox/freeze", NULL, freeze_answer, s, &a) < 0) {
                        list_del(&w->node);
                        s->freezes--;
                        return -ENOTCONN;
                }
                s->fz = FZ_FREEZING;
        }
        return 0;
}

size_t sandbox_pending(const struct sandbox *s)
{
        /* The freeze's own request to the runtime is the sandbox's: a
         * caller's part in it is its hold. */
        size_t n = list_length(&s->fops) + (size_t)s->freezes;
        const struct sandbox_ask *a;
        list_for_each(a, &s->asks, node) n += a->cb != freeze_answer;
        return n;
}

void freeze_put(struct sandbox *s)
{
        if (--s->freezes == 0 && s->fz == FZ_FROZEN)
                thaw(s);
}

/* A hold not granted yet is given up. */
void freeze_cancel(struct sandbox *s, struct freeze_wait *w)
{
        if (defer_queued(&w->d)) {
                defer_cancel(&w->d);
                freeze_put(s);
        } else if (list_linked(&w->node)) {
                list_del(&w->node);
                s->freezes--;
        }
}

bool freeze_any(const struct sandbox *s)
{
        return s->freezes > 0 || s->fz != FZ_THAWED;
}

static void thaw(struct sandbox *s)
{
        struct sandbox_ask *a;
        /* The answer is not waited for: frames are in order, so whatever is
         * sent after the thaw finds the processes going again. */
        if (sandbox_ask(s, "sandbox/thaw", NULL, NULL, NULL, &a) < 0)
                log_warn("sandbox %s: cannot send sandbox/thaw (its runtime thaws by itself "
                         "in 30 s)",
                         s->short_id);
        s->fz = FZ_THAWED;
        timer_stop(s->fz_timer);
        thawed(s);
}

/* The runtime lifts a freeze by itself after 30 s (so that a lost daemon
 * cannot leave the code stopped): a file operation that takes longer
 * renews it. */
static void freeze_renew(struct timer *t, void *userdata)
{
        struct sandbox *s = userdata;
        struct sandbox_ask *a;
        if (s->fz != FZ_FROZEN)
                return;
        if (sandbox_ask(s, "sandbox/freeze", NULL, NULL, NULL, &a) < 0)
                log_warn("sandbox %s: cannot renew its freeze", s->short_id);
        timer_arm(t, FREEZE_RENEW_MS);
}

/* ---- read_file and write_file on a session */

/* Out of the sandbox's hands: its freeze wait, file operation and hold
 * given up. */
static void fop_detach(struct sandbox_fop *f)
{
        struct sandbox *s = f->sb;
        list_del(&f->node);
        if (f->waiting)
                freeze_cancel(s, &f->wait);
        f->waiting = false;
        files_op_cancel(f->op);
        f->op = NULL;
        if (f->frozen)
                freeze_put(s);
        f->frozen = false;
}

static void fop_free(struct sandbox_fop *f)
{
        if (!f->failed)
                fop_detach(f);
        defer_cancel(&f->d);
        free(f->data);
        free(f);
}

/* The engine answered (from the loop): thawed before the answer goes out. */
static void fop_done(void *userdata, const struct files_result *r)
{
        struct sandbox_fop *f = userdata;
        f->op = NULL;
        fop_detach(f);
        f->cb(f->userdata, r);
        free(f->data);
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

static void fop_frozen(void *userdata, const struct err *why)
{
        struct sandbox_fop *f = userdata;
        struct sandbox *s = f->sb;
        f->waiting = false;
        if (why) {
                char msg[600];
                snprintf(msg, sizeof(msg),
                         "cannot stop the session's processes to move the file: %.500s", why->msg);
                fop_fail(f, -EIO, msg);
                return;
        }
        f->frozen = true;
        int r = f->write
                    ? files_write(s->mgr->eng, s->id, f->path, f->data, f->len, fop_done, f, &f->op)
                    : files_read(s->mgr->eng, s->id, f->path, f->max, fop_done, f, &f->op);
        if (r < 0)
                fop_fail(f, -ENOMEM, "out of memory");
}

static int fop_start(struct sandbox *s, bool write, const char *path, const void *data, size_t len,
                     size_t max, files_cb cb, void *userdata, struct sandbox_fop **ret)
{
        if (!s->id || !s->attach || !s->mgr->eng || s->state < S_READY || s->state >= S_REMOVING ||
            strlen(path) >= sizeof(((struct sandbox_fop *)0)->path))
                return -ENOTCONN;
        struct sandbox_fop *f = calloc(1, sizeof(*f));
        if (!f || (write && !(f->data = malloc(len ? len : 1)))) {
                free(f);
                return -ENOMEM;
        }
        f->sb = s;
        f->write = write;
        snprintf(f->path, sizeof(f->path), "%s", path);
        if (write)
                memcpy(f->data, data, len);
        f->len = len;
        f->max = max;
        f->cb = cb;
        f->userdata = userdata;
        list_push(&s->fops, &f->node);
        f->wait = (struct freeze_wait){.ready = fop_frozen, .userdata = f};
        f->waiting = true;
        int r = freeze_get(s, &f->wait);
        if (r < 0) {
                f->waiting = false;
                fop_free(f);
                return r;
        }
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

void freeze_release(struct sandbox *s)
{
        bool silent = s->mgr->freeing; /* nobody is left to tell */
        /* File operations under way end with an error; nothing waits for a
         * freeze any more (the answer to it is ended just below). */
        while (!list_empty(&s->fops)) {
                struct sandbox_fop *f = list_first(&s->fops, struct sandbox_fop, node);
                if (silent)
                        fop_free(f);
                else
                        fop_fail(f, -EIO, "the session's sandbox ended first");
        }
        while (!list_empty(&s->fz_waits))
                list_del(s->fz_waits.next);
        /* Requests to its runtime get their answer: there will be none. */
        while (!list_empty(&s->asks)) {
                struct sandbox_ask *a = list_first(&s->asks, struct sandbox_ask, node);
                if (silent)
                        ask_free(a);
                else
                        ask_end(a, NULL, ERR_REFUSED, -ENOTCONN,
                                "the sandbox ended before it answered");
        }
        timer_remove(s->fz_timer);
        s->fz_timer = NULL;
}
