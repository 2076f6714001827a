/* The warm pool: sandboxes started ahead of calls, each waiting ready
 * (S_READY) for the single request it will serve. A call takes one in
 * constant time; the pool refills after the answer, shrinks when idle,
 * and backs off while starts fail. */
#include "sandbox/internal.h"

#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pool sandbox on its way to ready, with no call yet. */
bool pool_starting(const struct sandbox *s)
{
        return s->pooled && !s->run && !s->killing && s->state >= S_CREATING && s->state < S_READY;
}

/* Sandboxes starting for the pool, and sandboxes with a call. */
static void pool_counts(const struct sandbox_mgr *m, long *ret_starting, long *ret_busy)
{
        long starting = 0, busy = 0;
        struct sandbox *s;
        list_for_each(s, &m->all, all_node)
        {
                if (pool_starting(s))
                        starting++;
                else if (s->run && s->state >= S_CREATING && s->state <= S_COLLECTING)
                        busy++;
        }
        *ret_starting = starting;
        *ret_busy = busy;
}

/* The warm path: the ready sandbox started last, or NULL. */
struct sandbox *pool_take(struct sandbox_mgr *m)
{
        struct sandbox *s = list_first(&m->ready, struct sandbox, place);
        if (s)
                pool_remove(s);
        return s;
}

static void pool_spawn(struct sandbox_mgr *m)
{
        struct sandbox *s = sandbox_alloc(m);
        if (!s)
                return;
        s->pooled = true;
        sandbox_create(s);
}

/* Start sandboxes until the pool holds what the load asks for: pool_min
 * spare beyond the calls running now, at most pool_max, no more than
 * pool_max_starting at once, never while calls wait for a slot. */
void pool_refill(struct sandbox_mgr *m)
{
        if (!m->pool_on || m->shutting_down || m->queued > 0 || !m->eng)
                return;
        long starting, busy;
        pool_counts(m, &starting, &busy);
        long target = busy + m->pool_min;
        if (target > m->pool_max)
                target = m->pool_max;
        if (target < m->pool_min)
                target = m->pool_min;
        long room = m->cfg->pool_max_starting - starting;
        if (m->consecutive_failures > 0) {
                /* Failing: one probe at a time, after a back-off. */
                if (now_ms() < m->retry_at_ms || starting > 0)
                        return;
                room = 1;
        }
        while (room-- > 0 && m->n_ready + starting < target && m->active < m->cfg->max_sandboxes) {
                pool_spawn(m);
                starting++;
        }
}

void pool_ready(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        long long ms = now_ms() - s->t_created;
        m->refill_ms[m->n_refill % ARRAY_SIZE(m->refill_ms)] = ms;
        m->n_refill++;
        m->consecutive_failures = 0;
        timer_stop(s->start_timer); /* the start bound no longer applies */
        sandbox_set_state(s, S_READY);
        list_push(&m->ready, &s->place);
        m->n_ready++;
        log_debug("sandbox %s ready for the pool in %lld ms", s->short_id, ms);
}

void pool_remove(struct sandbox *s)
{
        if (s->state != S_READY || !list_linked(&s->place))
                return;
        list_del(&s->place);
        s->mgr->n_ready--;
}

/* A start failed for a reason the engine gave: remember it, back off. */
void pool_note_failure(struct sandbox_mgr *m, const char *msg)
{
        m->failures++;
        m->consecutive_failures++;
        snprintf(m->last_error, sizeof(m->last_error), "%s", msg ? msg : "sandbox start failed");
        utf8_scrub(m->last_error);
        int shift = m->consecutive_failures < 5 ? m->consecutive_failures : 5;
        m->retry_at_ms = now_ms() + (250LL << shift); /* 0.5 s doubling to 8 s */
}

static void on_tick(struct timer *t, void *userdata)
{
        struct sandbox_mgr *m = userdata;
        timer_arm(t, 1000);
        if (m->shutting_down)
                return;
        /* Idle: shrink to pool_min. */
        if (now_ms() - m->last_call_ms > (long long)(m->cfg->pool_idle_s * 1000))
                while (m->n_ready > m->pool_min) {
                        struct sandbox *s = list_first(&m->ready, struct sandbox, place);
                        log_debug("pool idle: removing ready sandbox %s", s->short_id);
                        sandbox_kill(s, ST_CANCELLED, "the pool shrank");
                }
        pool_refill(m);
}

void sandbox_mgr_start_pool(struct sandbox_mgr *m)
{
        long max =
            m->cfg->pool_max < m->cfg->max_sandboxes ? m->cfg->pool_max : m->cfg->max_sandboxes;
        m->pool_max = max;
        m->pool_min = m->cfg->pool_min < max ? m->cfg->pool_min : max;
        m->pool_on = max > 0;
        m->last_call_ms = now_ms();
        if (m->pool_on && timer_add(m->loop, on_tick, m, &m->tick) == 0)
                timer_arm(m->tick, 1000);
        pool_refill(m);
}

static int cmp_ll(const void *a, const void *b)
{
        long long x = *(const long long *)a, y = *(const long long *)b;
        return x < y ? -1 : x > y;
}

json_t *sandbox_mgr_status(const struct sandbox_mgr *m)
{
        long starting, busy;
        pool_counts(m, &starting, &busy);
        long long sorted[ARRAY_SIZE(m->refill_ms)];
        size_t n = m->n_refill < ARRAY_SIZE(sorted) ? m->n_refill : ARRAY_SIZE(sorted);
        memcpy(sorted, m->refill_ms, n * sizeof(sorted[0]));
        qsort(sorted, n, sizeof(sorted[0]), cmp_ll);
        json_t *p50 = n ? json_integer(sorted[n / 2]) : json_null();
        json_t *p95 = n ? json_integer(sorted[(n * 95 + 99) / 100 - 1]) : json_null();
        long rss, hwm;
        long long cpu;
        proc_usage(&rss, &hwm, &cpu);
        json_t *pool = json_pack(
            "{s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, "
            "s:s?}",
            "enabled", m->pool_on, "min", (json_int_t)m->pool_min, "max", (json_int_t)m->pool_max,
            "ready", (json_int_t)m->n_ready, "starting", (json_int_t)starting, "busy",
            (json_int_t)busy, "queued", (json_int_t)m->queued, "containers", (json_int_t)m->active,
            "hits", (json_int_t)m->hits, "misses", (json_int_t)m->misses, "failures",
            (json_int_t)m->failures, "consecutive_failures", (json_int_t)m->consecutive_failures,
            "refill_p50_ms", p50, "refill_p95_ms", p95, "last_error",
            m->consecutive_failures ? m->last_error : NULL);
        return json_pack(
            "{s:i, s:s, s:s?, s:s, s:o, s:I, s:I, s:I, s:I}", "pid", (int)getpid(), "instance",
            m->instance, "engine", m->eng ? engine_endpoint(m->eng)->display : NULL, "image",
            m->cfg->image, "pool", pool, "calls", (json_int_t)(m->hits + m->misses), "rss_kb",
            (json_int_t)rss, "peak_rss_kb", (json_int_t)hwm, "cpu_ms", (json_int_t)cpu);
}
