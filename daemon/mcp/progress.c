/* notifications/progress for a call whose host sent a progressToken: the
 * newest lines of its output, or the code's own reports, at most five a
 * second and at least one every five seconds. */
#include "mcp/internal.h"

#include "core/buf.h"
#include "core/jsonrpc.h"
#include "core/log.h"
#include "core/util.h"

#include <math.h>
#include <string.h>

#define PROGRESS_MIN_MS       200  /* at most five a second */
#define PROGRESS_HEARTBEAT_MS 5000 /* and one at least this often */
#define PROGRESS_TAIL         4096 /* bytes of newest output kept */
#define PROGRESS_LINES        5    /* lines of it in a message */
#define PROGRESS_MESSAGE_MAX  1000 /* bytes */

struct progress {
        struct mcp_server *srv;
        json_t *token;
        char task_id[JOB_ID_MAX]; /* "" or the task it is tied to */
        struct timer *timer;
        long long last_ms; /* when we last sent */
        double last;       /* the last progress value sent */
        double done;       /* the code's last report, if above last */
        double total;      /* the code's, < 0 when it gave none */
        char *message;     /* the code's last message, or NULL */
        bool pending;      /* something new since the last one */
        char tail[PROGRESS_TAIL];
        size_t tail_len;
};

void progress_free(struct progress *p)
{
        if (!p)
                return;
        timer_remove(p->timer);
        json_decref(p->token);
        free(p->message);
        free(p);
}

/* The newest lines of output, at most PROGRESS_MESSAGE_MAX bytes. */
static char *progress_lines(const struct progress *p)
{
        size_t end = p->tail_len;
        while (end > 0 && (p->tail[end - 1] == '\n' || p->tail[end - 1] == '\r'))
                end--;
        size_t start = end;
        for (int lines = 0; start > 0; start--)
                if (p->tail[start - 1] == '\n' && ++lines == PROGRESS_LINES)
                        break;
        if (end - start > PROGRESS_MESSAGE_MAX)
                start = end - PROGRESS_MESSAGE_MAX;
        /* Never start inside a UTF-8 sequence. */
        while (start < end && ((unsigned char)p->tail[start] & 0xC0) == 0x80)
                start++;
        return strndup(p->tail + start, end - start);
}

/* The next value, which must grow with every notification: the code's own
 * report counts when it does (never above its total); otherwise a small
 * step above the last (small, so that output between the code's reports
 * does not run ahead of them), rounded to the step so it prints short.
 * Below a total, a step that would reach it goes halfway instead. Whether
 * the total goes with it: not once the value had to pass it (after the
 * code reported it, output and heartbeats still need a larger value), so
 * a notification never shows more done than its total. */
static double progress_next(const struct progress *p, bool *with_total)
{
        bool total = p->total >= 0;
        double done = total && p->done > p->total ? p->total : p->done;
        double value = done > p->last ? done : round((p->last + 0.001) * 1000) / 1000;
        if (total && done <= p->last && value >= p->total && p->last < p->total) {
                double half = p->last + (p->total - p->last) / 2;
                if (half > p->last && half < p->total)
                        value = half;
        }
        *with_total = total && value <= p->total;
        return value;
}

static void progress_send(struct progress *p)
{
        bool with_total;
        double value = progress_next(p, &with_total);
        char *lines = progress_lines(p);
        const char *msg = p->message ? p->message : lines;
        json_t *params = json_pack("{s:O, s:f}", "progressToken", p->token, "progress", value);
        if (params && with_total)
                json_object_set_new(params, "total", json_real(p->total));
        if (params && msg && *msg)
                json_object_set_new(params, "message", json_string(msg));
        if (params && p->task_id[0]) /* the tasks specification: tied to its task */
                json_object_set_new(params, "_meta",
                                    json_pack("{s:{s:s}}", RELATED_TASK_KEY, "taskId", p->task_id));
        free(lines);
        if (params)
                mcp_send(p->srv, jrpc_notification("notifications/progress", params));
        p->last = value;
        p->last_ms = now_ms();
        p->pending = false;
        timer_arm(p->timer, PROGRESS_HEARTBEAT_MS);
}

static void progress_tick(struct timer *t, void *userdata)
{
        (void)t;
        progress_send(userdata);
}

/* Send now, or when PROGRESS_MIN_MS has passed since the last one. */
static void progress_soon(struct progress *p)
{
        long long wait = p->last_ms + PROGRESS_MIN_MS - now_ms();
        if (p->last_ms == 0 || wait <= 0)
                progress_send(p);
        else if (!p->pending) {
                p->pending = true;
                timer_arm(p->timer, wait);
        }
}

void progress_output(struct progress *p, const char *data, size_t n)
{
        if (!p || n == 0)
                return;
        if (n >= PROGRESS_TAIL) {
                memcpy(p->tail, data + n - PROGRESS_TAIL, PROGRESS_TAIL);
                p->tail_len = PROGRESS_TAIL;
        } else {
                if (p->tail_len + n > PROGRESS_TAIL) {
                        size_t drop = p->tail_len + n - PROGRESS_TAIL;
                        memmove(p->tail, p->tail + drop, p->tail_len - drop);
                        p->tail_len -= drop;
                }
                memcpy(p->tail + p->tail_len, data, n);
                p->tail_len += n;
        }
        /* The code's own message stays until it reports again. */
        progress_soon(p);
}

void progress_report(struct progress *p, double done, double total, const char *message)
{
        if (!p)
                return;
        free(p->message);
        p->message = NULL;
        if (message) {
                size_t n = strlen(message);
                if (n > PROGRESS_MESSAGE_MAX)
                        n = utf8_cut(message, PROGRESS_MESSAGE_MAX);
                p->message = strndup(message, n);
        }
        p->total = total;
        p->done = done;
        progress_soon(p);
}

struct progress *progress_new(struct mcp_server *s, json_t *params, const char *task_id)
{
        json_t *tok = json_object_get(json_object_get(params, "_meta"), "progressToken");
        if (!json_is_string(tok) && !json_is_integer(tok))
                return NULL;
        struct progress *p = calloc(1, sizeof(*p));
        if (!p || timer_add(s->loop, progress_tick, p, &p->timer) < 0) {
                free(p);
                log_warn("cannot follow a call's progress: out of memory");
                return NULL;
        }
        p->srv = s;
        p->token = json_incref(tok);
        snprintf(p->task_id, sizeof(p->task_id), "%s", task_id ? task_id : "");
        p->total = -1;
        timer_arm(p->timer, PROGRESS_HEARTBEAT_MS);
        return p;
}
