/* The engine's health as the service's /health shows it: whether the
 * engine answers and has the default image. The manager asks the engine,
 * at most once a second whoever asks, and every caller waiting meanwhile
 * shares that one request. */
#include "sandbox/internal.h"

#include "core/util.h"

#include <stdio.h>
#include <stdlib.h>

#define HEALTH_FRESH_MS 1000 /* an answer this young serves without asking again */

struct sandbox_health_wait {
        struct sandbox_mgr *mgr;
        struct list node; /* in mgr->health_waits */
        sandbox_health_cb cb;
        void *userdata;
        struct defer d; /* an answer already known, handed over from the loop */
};

static void wait_free(struct sandbox_health_wait *w)
{
        defer_cancel(&w->d);
        list_del(&w->node);
        free(w);
}

/* The wait is gone before its callback runs: the callback may ask again. */
static void hand_over(struct sandbox_health_wait *w)
{
        struct sandbox_mgr *m = w->mgr;
        sandbox_health_cb cb = w->cb;
        void *userdata = w->userdata;
        wait_free(w);
        cb(userdata, m->health);
}

static void hand_over_d(void *userdata)
{
        hand_over(userdata);
}

static void engine_answered(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox_mgr *m = userdata;
        (void)body;
        m->health_req = NULL;
        char why[300] = "";
        if (status == 0)
                snprintf(why, sizeof(why), "%.290s", e && e->msg[0] ? e->msg : "no answer");
        else if (status >= 500)
                snprintf(why, sizeof(why), "the engine answered %ld", status);
        utf8_scrub(why);
        bool reachable = status > 0 && status < 500;
        json_decref(m->health);
        m->health = json_pack("{s:{s:b, s:s?}, s:{s:s, s:b}}", "engine", "reachable", reachable,
                              "error", why[0] ? why : NULL, "image", "name", m->cfg->image,
                              "present", status == 200);
        m->health_ms = now_ms();
        /* From the first each time: a callback may cancel another wait. */
        while (!list_empty(&m->health_waits))
                hand_over(list_first(&m->health_waits, struct sandbox_health_wait, node));
}

/* One GET /images/NAME/json for every wait: 0, or negative. */
static int ask_engine(struct sandbox_mgr *m)
{
        if (m->health_req)
                return 0;
        _cleanup_free_ char *name = engine_escape(m->cfg->image);
        if (!name)
                return -ENOMEM;
        char path[600];
        snprintf(path, sizeof(path), "/images/%s/json", name);
        int r = engine_request(m->eng, "GET", path, NULL, engine_answered, m, &m->health_req);
        if (r < 0)
                m->health_req = NULL;
        return r;
}

int sandbox_mgr_health(struct sandbox_mgr *m, sandbox_health_cb cb, void *userdata,
                       struct sandbox_health_wait **ret)
{
        struct sandbox_health_wait *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        *w = (struct sandbox_health_wait){.mgr = m, .cb = cb, .userdata = userdata};
        list_push(&m->health_waits, &w->node);
        bool fresh = m->health && now_ms() - m->health_ms < HEALTH_FRESH_MS;
        if (!fresh && !m->eng) {
                json_decref(m->health);
                m->health = json_pack("{s:{s:b, s:s}}", "engine", "reachable", 0, "error",
                                      "no engine configured");
        }
        if (fresh || !m->eng) {
                loop_defer(m->loop, &w->d, hand_over_d, w);
        } else {
                int r = ask_engine(m);
                if (r < 0) {
                        wait_free(w);
                        return r;
                }
        }
        *ret = w;
        return 0;
}

void sandbox_health_cancel(struct sandbox_health_wait *w)
{
        if (!w)
                return;
        struct sandbox_mgr *m = w->mgr;
        wait_free(w);
        /* Nobody waits for the engine's answer any more. */
        if (list_empty(&m->health_waits)) {
                engine_request_cancel(m->health_req);
                m->health_req = NULL;
        }
}

void health_free(struct sandbox_mgr *m)
{
        while (!list_empty(&m->health_waits))
                wait_free(list_first(&m->health_waits, struct sandbox_health_wait, node));
        engine_request_cancel(m->health_req);
        m->health_req = NULL;
        json_decref(m->health);
        m->health = NULL;
}
