/* The warm pool: sandboxes started ahead of calls, each waiting ready
 * (S_READY) for the single request it will serve. A call takes one in
 * constant time; the pool refills after the answer, shrinks when idle,
 * and backs off while starts fail.
 *
 * Its size follows the demand: the most calls for the default image in
 * flight at once, over the current window of pool_idle_s and the one
 * before, between pool_min and pool_max, and no more sandboxes than
 * pool_memory pays for at what a ready sandbox was measured to cost the
 * host (its processes and the engine's monitor, from /proc). */
#include "sandbox/internal.h"

#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a ready sandbox is taken to cost until one was measured: on the
 * high side (the data image's is about this). */
#define COST_GUESS_KB (128LL << 10)
#define COST_EVERY_MS 60000 /* measured again after this long */
/* With page merging the cost falls as the merger goes through the ready
 * sandboxes (tens of seconds): measured more often. */
#define COST_EVERY_MERGING_MS 10000
/* A refill, and the removal of a used sandbox, wait while a burst's calls
 * are still being answered (the engine's and the kernel's work would take
 * the CPU from them), at most this long after the burst's first call. */
#define BURST_HOLD_MS 500

/* A pool sandbox on its way to ready, with no call yet. */
bool pool_starting(const struct sandbox *s)
{
        return s->pooled && !s->run && !s->killing && s->state >= S_CREATING && s->state < S_READY;
}

/* Sandboxes starting for the pool, sandboxes with a call, and of those
 * the ones whose call waits for them to start. */
static void pool_counts(const struct sandbox_mgr *m, long *ret_starting, long *ret_busy,
                        long *ret_waiting)
{
        long starting = 0, busy = 0, waiting = 0;
        struct sandbox *s;
        list_for_each(s, &m->all, all_node)
        {
                if (pool_starting(s))
                        starting++;
                else if (s->run && s->state >= S_CREATING && s->state <= S_COLLECTING) {
                        busy++;
                        if (s->state < S_READY && !s->killing)
                                waiting++;
                }
        }
        *ret_starting = starting;
        *ret_busy = busy;
        if (ret_waiting)
                *ret_waiting = waiting;
}

/* How far back the pace of calls is read, and how close calls count as
 * one arrival (a burst is the peak's business, not the pace's). */
#define PACE_WINDOW_MS   10000
#define PACE_TOGETHER_MS 100

static int cmp_ll(const void *a, const void *b)
{
        long long x = *(const long long *)a, y = *(const long long *)b;
        return x < y ? -1 : x > y;
}

long pool_pace_need(const long long *arrive, size_t n, long long now, long long refill_ms)
{
        long long t[64];
        size_t k = 0;
        for (size_t i = 0; i < n && k < ARRAY_SIZE(t); i++)
                if (arrive[i] > now - PACE_WINDOW_MS && arrive[i] <= now)
                        t[k++] = arrive[i];
        qsort(t, k, sizeof(t[0]), cmp_ll);
        /* Arrivals: calls within PACE_TOGETHER_MS of the first of a group
         * count once. */
        long count = 0;
        long long first = 0, last = 0;
        for (size_t i = 0; i < k; i++)
                if (i == 0 || t[i] - last >= PACE_TOGETHER_MS) {
                        if (count++ == 0)
                                first = t[i];
                        last = t[i];
                }
        long long span = last - first;
        if (count < 3 || refill_ms <= 0 || span < 1000)
                return 0;
        long long need = ((count - 1) * refill_ms + span - 1) / span + 1;
        return need > 4096 ? 4096 : (long)need;
}

/* The median of the latest refills (creation to ready), or 0. */
static long long refill_recent_ms(const struct sandbox_mgr *m)
{
        long long v[16];
        size_t n = m->n_refill < ARRAY_SIZE(v) ? m->n_refill : ARRAY_SIZE(v);
        for (size_t i = 0; i < n; i++)
                v[i] = m->refill_ms[(m->n_refill - 1 - i) % ARRAY_SIZE(m->refill_ms)];
        qsort(v, n, sizeof(v[0]), cmp_ll);
        return n ? v[n / 2] : 0;
}

long pool_target(long min, long max, long demand, long budget_n, const char **why)
{
        long t = demand > min ? demand : min;
        *why = demand > min ? "demand" : "pool_min";
        if (t > max) {
                t = max;
                *why = "pool_max";
        }
        if (t > budget_n) {
                t = budget_n < 0 ? 0 : budget_n;
                *why = "pool_memory";
        }
        return t;
}

long pool_budget_n(unsigned long long budget_kb, long long cost_kb, long long fresh_kb,
                   unsigned long long merged)
{
        unsigned long long cost = cost_kb > 0 ? (unsigned long long)cost_kb : COST_GUESS_KB, n;
        if (fresh_kb > 0 && (unsigned long long)fresh_kb > cost) {
                if (merged * cost > budget_kb)
                        merged = budget_kb / cost;
                n = merged + (budget_kb - merged * cost) / (unsigned long long)fresh_kb;
        } else {
                n = budget_kb / cost;
        }
        if (n == 0 && cost_kb <= 0)
                n = 1;
        return n > 4096 ? 4096 : (long)n;
}

/* The merger's full scans so far, or -1 (not there, or not readable). */
static long long ksm_full_scans(void)
{
        long long n = -1;
        FILE *f = fopen("/sys/kernel/mm/ksm/full_scans", "re");
        if (f) {
                if (fscanf(f, "%lld", &n) != 1)
                        n = -1;
                fclose(f);
        }
        return n;
}

/* Whether the merger has been through a ready sandbox: two full scans
 * since it became ready (the first finds a page, the second merges it if
 * it has not changed). */
static bool merged(const struct sandbox_mgr *m, const struct sandbox *s)
{
        return s->ksm_scans >= 0 && m->ksm_scans >= s->ksm_scans + 2;
}

/* With page merging, the measured cost holds for the ready sandboxes the
 * merger has been through. */
static long budget_n(const struct sandbox_mgr *m)
{
        unsigned long long n = 0;
        const struct sandbox *s;
        if (!m->cfg->memory_merge)
                return pool_budget_n(m->cfg->pool_memory >> 10, m->cost_kb, 0, 0);
        list_for_each(s, &m->ready, place)
        {
                if (!s->image && merged(m, s))
                        n++;
        }
        return pool_budget_n(m->cfg->pool_memory >> 10, m->cost_kb, m->cost_fresh_kb, n);
}

/* The size the pool keeps: the most calls in flight at once, or the
 * ready sandboxes the pace of calls asks for, over this window and the
 * last (pool_target says the rest). */
static long target_of(const struct sandbox_mgr *m, const char **why)
{
        long peak = m->peak_cur > m->peak_prev ? m->peak_cur : m->peak_prev;
        long pace = m->pace_cur > m->pace_prev ? m->pace_cur : m->pace_prev;
        long t = pool_target(m->pool_min, m->pool_max, pace > peak ? pace : peak, budget_n(m), why);
        if (pace > peak && strcmp(*why, "demand") == 0)
                *why = "pace";
        return t;
}

static long update_target(struct sandbox_mgr *m)
{
        m->target = target_of(m, &m->target_why);
        return m->target;
}

void pool_demand_came(struct sandbox_mgr *m, struct run *r, bool hit)
{
        if (!r || r->demand)
                return;
        r->demand = true;
        if (m->demand++ == 0)
                m->burst = (struct pool_burst){.t0_ms = now_ms(), .first_ms = -1, .last_ms = -1};
        m->burst.calls++;
        m->burst.hits += hit;
        if (m->demand > m->peak_cur)
                m->peak_cur = m->demand;
        long long now = now_ms();
        m->arrive_ms[m->n_arrive++ % ARRAY_SIZE(m->arrive_ms)] = now;
        size_t n = m->n_arrive < ARRAY_SIZE(m->arrive_ms) ? m->n_arrive : ARRAY_SIZE(m->arrive_ms);
        long pace = pool_pace_need(m->arrive_ms, n, now, refill_recent_ms(m));
        if (pace > m->pace_cur)
                m->pace_cur = pace;
        update_target(m);
}

void pool_demand_left(struct sandbox_mgr *m, struct run *r)
{
        if (!r->demand || m->demand <= 0)
                return;
        r->demand = false;
        long long t = now_ms() - m->burst.t0_ms;
        if (m->burst.first_ms < 0)
                m->burst.first_ms = t;
        if (--m->demand > 0)
                return;
        m->burst.last_ms = t;
        m->last_burst = m->burst;
        if (m->burst.calls > 1)
                log_debug("a burst of %ld calls: first answer in %lld ms, last in %lld ms, %ld "
                          "from ready sandboxes",
                          m->burst.calls, m->burst.first_ms, m->burst.last_ms, m->burst.hits);
}

/* ---- what a ready sandbox costs */

/* Its processes' PSS as its runtime reads them (corral cannot: the
 * supervisor is not dumpable and corral keeps no capability to read
 * another user's smaps; it would read their RSS, which counts every
 * merged page in full), and the engine's monitor's, which runs as us. A
 * sandbox that never ran code answers; a number it could not have is
 * not taken. Without an answer, /proc as far as corral can read it. */
static void cost_inspected(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox_mgr *m = userdata;
        (void)e;
        m->cost_req = NULL;
        json_t *pid = json_object_get(json_object_get(body, "State"), "Pid");
        long long kb = 0;
        int n = 0;
        long init = json_is_integer(pid) ? (long)json_integer_value(pid) : 0;
        if (status == 200 && init > 1 && m->cost_rt_kb >= 0) {
                long monitor = proc_ppid(init);
                long long mk = monitor > 1 ? proc_pss_kb(monitor) : -1;
                kb = m->cost_rt_kb + (mk > 0 ? mk : 0);
                n = m->cost_rt_n + (mk > 0);
        } else if (status != 200 || init <= 1 || (n = proc_tree_pss(init, &kb)) <= 0) {
                log_debug("pool: cannot measure a ready sandbox's memory (HTTP %ld)", status);
                return;
        }
        m->cost_kb = kb;
        m->cost_procs = n;
        /* The unmerged cost: from one the merger had not been through, or
         * any that costs more. */
        if (m->cost_unmerged || kb > m->cost_fresh_kb)
                m->cost_fresh_kb = kb;
        log_debug("pool: a ready sandbox costs the host %lld KiB (%d processes%s)", kb, n,
                  m->cost_rt_kb >= 0 ? ", PSS from its runtime" : "");
        update_target(m);
}

static void cost_inspect(struct sandbox_mgr *m)
{
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s/json", m->cost_id);
        if (engine_request(m->eng, "GET", path, NULL, cost_inspected, m, &m->cost_req) < 0)
                m->cost_req = NULL;
}

static void cost_answered(void *userdata, json_t *result, const struct err *e)
{
        struct sandbox_mgr *m = userdata;
        m->cost_ask = NULL;
        json_t *kb = json_object_get(result, "pss_kb"), *n = json_object_get(result, "processes");
        m->cost_rt_kb = -1;
        if (!e && json_is_integer(kb) && json_is_integer(n) && json_integer_value(kb) > 0 &&
            json_integer_value(kb) < (1LL << 40) && json_integer_value(n) > 0 &&
            json_integer_value(n) <= 1 << 16) {
                m->cost_rt_kb = json_integer_value(kb);
                m->cost_rt_n = (int)json_integer_value(n);
        }
        cost_inspect(m);
}

/* Now and then (when a sandbox becomes ready, and on the pool's tick),
 * the host memory of the ready sandbox of the default image that has been
 * ready longest: with page merging (memory_merge) its preloaded heap has
 * had the most time to be merged with the others', and PSS counts a
 * merged page once across all who share it. */
static void cost_measure(struct sandbox_mgr *m)
{
        struct sandbox *s, *oldest = NULL;
        long long every = m->cfg->memory_merge ? COST_EVERY_MERGING_MS : COST_EVERY_MS;
        if (m->cost_req || m->cost_ask || (m->cost_at_ms && now_ms() - m->cost_at_ms < every))
                return;
        list_for_each(s, &m->ready, place) /* newest first */
        {
                if (!s->image)
                        oldest = s;
        }
        if (!oldest || !oldest->id)
                return;
        m->cost_at_ms = now_ms();
        /* Unmerged only if no full scan has ended since it was ready (the
         * first can already merge pages with those the merger shares). */
        m->cost_unmerged = oldest->ksm_scans >= 0 && ksm_full_scans() == oldest->ksm_scans;
        snprintf(m->cost_id, sizeof(m->cost_id), "%s", oldest->id);
        if (sandbox_ask(oldest, "sandbox/memory", NULL, cost_answered, m, &m->cost_ask) < 0) {
                m->cost_ask = NULL;
                m->cost_rt_kb = -1;
                cost_inspect(m);
        }
}

void pool_cost_cancel(struct sandbox_mgr *m)
{
        sandbox_ask_cancel(m->cost_ask);
        m->cost_ask = NULL;
        engine_request_cancel(m->cost_req);
        m->cost_req = NULL;
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

/* Start sandboxes until the pool holds what the demand asks for
 * (update_target), no more than pool_max_starting at once (one before the
 * first is ready), never while calls wait for a slot or for their own
 * sandbox to start: the engine's time is theirs first. */
void pool_refill(struct sandbox_mgr *m)
{
        if (!m->pool_on || m->shutting_down || m->queued > 0 || !m->eng)
                return;
        long starting, busy, waiting;
        pool_counts(m, &starting, &busy, &waiting);
        long target = update_target(m);
        if (waiting > 0)
                return;
        long room = m->cfg->pool_max_starting - starting;
        /* Until a pool sandbox was first ready, the engine is cold (its
         * first create, attach and start take several times a later
         * one's): one at a time, so that the first, which the first call
         * most likely takes, has the engine and the CPU to itself. */
        if (m->n_refill == 0 && room > 1 - starting)
                room = 1 - starting;
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

long long pool_burst_hold(const struct sandbox_mgr *m, long long since_ms)
{
        long long held = now_ms() - since_ms;
        /* Not for one call alone, nor while calls wait for a slot: a
         * removal frees one. */
        if (m->demand <= 0 || m->burst.calls < 2 || m->queued > 0 || m->shutting_down ||
            held >= BURST_HOLD_MS || held < 0)
                return 0;
        return BURST_HOLD_MS - held < 20 ? BURST_HOLD_MS - held : 20;
}

static void refill_now(struct timer *t, void *userdata)
{
        struct sandbox_mgr *m = userdata;
        long long hold = pool_burst_hold(m, m->refill_since_ms);
        if (hold > 0 && timer_arm(t, hold) == 0)
                return;
        m->refill_armed = false;
        pool_refill(m);
}

/* A refill AFTER_ANSWER_MS from now (not pushed back by later answers). */
void pool_refill_soon(struct sandbox_mgr *m)
{
        if (!m->pool_on || m->shutting_down || m->refill_armed)
                return;
        if (timer_set(m->loop, &m->refill_timer, refill_now, m, AFTER_ANSWER_MS) < 0) {
                pool_refill(m);
                return;
        }
        m->refill_armed = true;
        m->refill_since_ms = now_ms();
}

void pool_ready(struct sandbox *s)
{
        struct sandbox_mgr *m = s->mgr;
        long long ms = now_ms() - s->t_created;
        m->refill_ms[m->n_refill % ARRAY_SIZE(m->refill_ms)] = ms;
        m->n_refill++;
        m->consecutive_failures = 0;
        timer_stop(s->start_timer); /* the start bound no longer applies */
        s->ksm_scans = m->cfg->memory_merge ? ksm_full_scans() : -1;
        sandbox_set_state(s, S_READY);
        list_push(&m->ready, &s->place);
        m->n_ready++;
        log_debug("sandbox %s ready for the pool in %lld ms", s->short_id, ms);
        cost_measure(m);
        /* The first one started alone (pool_refill): the rest need not
         * wait for the next tick. */
        if (m->n_refill == 1)
                pool_refill_soon(m);
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
        /* The third failure in a row, and every tenth after it: the user
         * should know that calls will wait or fail. */
        if (m->consecutive_failures == 3 ||
            (m->consecutive_failures > 3 && m->consecutive_failures % 10 == 3))
                log_event(LOG_ERR, "pool",
                          "the pool failed to start a sandbox %d times in a row: %s",
                          m->consecutive_failures, m->last_error);
        int shift = m->consecutive_failures < 5 ? m->consecutive_failures : 5;
        m->retry_at_ms = now_ms() + (250LL << shift); /* 0.5 s doubling to 8 s */
}

static void on_tick(struct timer *t, void *userdata)
{
        struct sandbox_mgr *m = userdata;
        timer_arm(t, 1000);
        if (m->shutting_down)
                return;
        if (m->cfg->memory_merge)
                m->ksm_scans = ksm_full_scans();
        long long now = now_ms(), window = (long long)(m->cfg->pool_idle_s * 1000);
        /* Idle: the demand is forgotten, the pool shrinks to pool_min. A
         * window ended: its peak becomes the last one. */
        if (now - m->last_call_ms > window) {
                m->peak_cur = m->peak_prev = m->demand;
                m->pace_cur = m->pace_prev = 0;
                m->window_ms = now;
        } else if (now - m->window_ms >= window) {
                m->peak_prev = m->peak_cur;
                m->peak_cur = m->demand;
                m->pace_prev = m->pace_cur;
                m->pace_cur = 0;
                m->window_ms = now;
        }
        long target = update_target(m);
        while (m->n_ready > target) {
                struct sandbox *s = list_first(&m->ready, struct sandbox, place);
                log_debug("pool: removing ready sandbox %s (size %ld: %s)", s->short_id, target,
                          m->target_why);
                sandbox_kill(s, ST_CANCELLED, "the pool shrank");
        }
        if (pool_burst_hold(m, m->burst.t0_ms) == 0)
                pool_refill(m);
        cost_measure(m);
}

void sandbox_mgr_start_pool(struct sandbox_mgr *m)
{
        long max =
            m->cfg->pool_max < m->cfg->max_sandboxes ? m->cfg->pool_max : m->cfg->max_sandboxes;
        m->pool_max = max;
        m->pool_min = m->cfg->pool_min < max ? m->cfg->pool_min : max;
        m->pool_on = max > 0;
        m->last_call_ms = m->window_ms = now_ms();
        update_target(m);
        if (m->pool_on && timer_add(m->loop, on_tick, m, &m->tick) == 0)
                timer_arm(m->tick, 1000);
        pool_refill(m);
}

json_t *sandbox_mgr_status(const struct sandbox_mgr *m)
{
        long starting, busy;
        pool_counts(m, &starting, &busy, NULL);
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
        /* The size it keeps, and why: the demand, and what a ready sandbox
         * costs against the budget. */
        long peak = m->peak_cur > m->peak_prev ? m->peak_cur : m->peak_prev;
        long pace = m->pace_cur > m->pace_prev ? m->pace_cur : m->pace_prev;
        const struct pool_burst *b = &m->last_burst;
        const char *why;
        long target = target_of(m, &why);
        json_object_set_new(pool, "target", json_integer(target));
        json_object_set_new(pool, "target_reason", json_string(why));
        json_object_set_new(pool, "demand",
                            json_pack("{s:I, s:I, s:I, s:f}", "in_flight", (json_int_t)m->demand,
                                      "peak", (json_int_t)peak, "pace", (json_int_t)pace,
                                      "window_s", m->cfg->pool_idle_s));
        json_object_set_new(
            pool, "memory",
            json_pack("{s:I, s:o, s:b, s:I, s:I}", "budget_bytes", (json_int_t)m->cfg->pool_memory,
                      "sandbox_bytes",
                      json_integer((m->cost_kb > 0 ? m->cost_kb : COST_GUESS_KB) << 10), "measured",
                      m->cost_kb > 0, "sandbox_processes", (json_int_t)m->cost_procs, "fits",
                      (json_int_t)budget_n(m)));
        json_object_set_new(
            pool, "last_burst",
            b->calls ? json_pack("{s:I, s:I, s:I, s:I}", "calls", (json_int_t)b->calls, "from_pool",
                                 (json_int_t)b->hits, "first_ms", (json_int_t)b->first_ms,
                                 "last_ms", (json_int_t)b->last_ms)
                     : json_null());
        return json_pack(
            "{s:i, s:s, s:s?, s:s, s:o, s:I, s:I, s:I, s:I}", "pid", (int)getpid(), "instance",
            m->instance, "engine", m->eng ? engine_endpoint(m->eng)->display : NULL, "image",
            m->cfg->image, "pool", pool, "calls", (json_int_t)(m->hits + m->misses), "rss_kb",
            (json_int_t)rss, "peak_rss_kb", (json_int_t)hwm, "cpu_ms", (json_int_t)cpu);
}
