/* The start-up sweep: containers that earlier corral instances on this
 * host left behind (killed, or their engine requests lost) are removed,
 * in the background, by their labels. */
#include "sandbox/internal.h"

#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct leftover {
        struct sandbox_mgr *mgr;
        struct list node; /* mgr->leftovers */
        struct timer *timer;
        int tries;
        char id[129];
};

/* Whether the instance that labelled a container may still run (state:
 * the container's, as the engine lists it). */
static bool owner_alive(json_t *labels, const char *state, long long age_s, double start_bound_s)
{
        const struct identity *me = host_identity();
        const char *boot = json_string_value(json_object_get(labels, "io.corral.boot"));
        const char *pid_s = json_string_value(json_object_get(labels, "io.corral.pid"));
        const char *pidns = json_string_value(json_object_get(labels, "io.corral.pidns"));
        if (boot && strcmp(boot, me->boot) != 0)
                return false; /* the machine rebooted since */
        /* Its pid counts in another namespace (or one of the two is not
         * known): what runs here under that number says nothing of it. A
         * container of its still running is left to it; one that ended
         * (its owner's stdin closed it, or it was killed) is a leftover,
         * which no corral of its own namespace will come to sweep. Labels
         * of corrals before this one have no namespace: judged by the
         * pid, as they were. */
        if (pidns && (strcmp(pidns, me->pidns) != 0 || strcmp(pidns, "unknown") == 0)) {
                /* Created and never started, long past the bound on a
                 * start: its owner died while making it. */
                if (state && strcmp(state, "created") == 0 && age_s > 2 * start_bound_s + 30)
                        return false;
                return !state || (strcmp(state, "exited") != 0 && strcmp(state, "dead") != 0);
        }
        long pid = pid_s ? strtol(pid_s, NULL, 10) : 0;
        if (pid <= 0)
                return false;
        char comm[32];
        return proc_comm(pid, comm, sizeof(comm)) == 0 && strncmp(comm, "corral", 6) == 0;
}

/* Seconds since the engine created the container (its list's Created);
 * 0 when it does not say. */
static long long created_age(json_t *c)
{
        json_t *v = json_object_get(c, "Created");
        long long at = json_is_integer(v) ? (long long)json_integer_value(v) : 0;
        return at > 0 ? (long long)time(NULL) - at : 0;
}

static void leftover_remove(struct leftover *lo);

static void leftover_free(struct leftover *lo)
{
        list_del(&lo->node);
        timer_remove(lo->timer);
        free(lo);
}

static void swept_one(void *userdata, long status, json_t *body, const struct err *e)
{
        struct leftover *lo = userdata;
        /* As for our own removals: an engine refuses a forced removal for a
         * moment while a container stops by itself. */
        if ((status == 409 || status == 500) && ++lo->tries < 5 && lo->timer) {
                timer_arm(lo->timer, 200LL * lo->tries);
                return;
        }
        if (status == 204 || status == 200 || status == 404)
                log_info("removed container %.12s left behind by an earlier corral", lo->id);
        else
                log_warn("removing leftover container %.12s failed: %s", lo->id,
                         status ? engine_error_message(body) : e->msg);
        leftover_free(lo);
}

static void leftover_tick(struct timer *t, void *userdata)
{
        (void)t;
        leftover_remove(userdata);
}

static void leftover_remove(struct leftover *lo)
{
        char path[256];
        snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", lo->id);
        if (engine_request(lo->mgr->eng, "DELETE", path, NULL, swept_one, lo, NULL) < 0)
                leftover_free(lo);
}

static void leftover_add(struct sandbox_mgr *m, const char *id)
{
        struct leftover *lo = calloc(1, sizeof(*lo));
        if (!lo)
                return;
        lo->mgr = m;
        list_push(&m->leftovers, &lo->node);
        snprintf(lo->id, sizeof(lo->id), "%s", id);
        if (timer_add(m->loop, leftover_tick, lo, &lo->timer) < 0)
                lo->timer = NULL; /* then no retry */
        leftover_remove(lo);
}

static void swept(void *userdata, long status, json_t *body, const struct err *e)
{
        struct sandbox_mgr *m = userdata;
        if (status != 200 || !json_is_array(body)) {
                log_warn("cannot list containers to remove leftovers: %s",
                         status ? engine_error_message(body) : e->msg);
                return;
        }
        size_t i;
        json_t *c;
        json_array_foreach(body, i, c)
        {
                json_t *labels = json_object_get(c, "Labels");
                const char *id = json_string_value(json_object_get(c, "Id"));
                const char *host = json_string_value(json_object_get(labels, "io.corral.host"));
                const char *inst = json_string_value(json_object_get(labels, "io.corral.instance"));
                /* Labels, not names, decide: another host's containers on a
                 * shared engine and live instances' are left alone. */
                if (!id || strlen(id) > 128 || (inst && strcmp(inst, m->instance) == 0) ||
                    (host && strcmp(host, host_identity()->host) != 0) ||
                    owner_alive(labels, json_string_value(json_object_get(c, "State")),
                                created_age(c), m->cfg->start_timeout_s))
                        continue;
                leftover_add(m, id);
        }
}

void sandbox_mgr_sweep(struct sandbox_mgr *m)
{
        if (!m->eng)
                return;
        /* filters={"label":["io.corral.owner=corral"]}, URL-encoded */
        engine_request(m->eng, "GET",
                       "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22io.corral.owner%3D"
                       "corral%22%5D%7D",
                       NULL, swept, m, NULL);
}

void sweep_free(struct sandbox_mgr *m)
{
        /* Their engine requests go with the engine, unanswered. */
        struct leftover *lo, *tmp;
        list_for_each_safe(lo, tmp, &m->leftovers, node) leftover_free(lo);
}
