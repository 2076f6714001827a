/* What the files of upstream/ share: a server's client (client.c), its
 * transport (transport.h: stdio.c, transport_http.c) and, for stdio, its
 * process (process.c). */
#pragma once

#include "core/list.h"
#include "core/log.h"
#include "upstream/client.h"

#include <stdarg.h>
#include <sys/types.h>

struct transport;
struct uproc;

#define UPSTREAM_PROTOCOL_VERSION "2025-06-18" /* what corral asks for in initialize */

/* One function, client.c's set_state, assigns it. */
enum ustate {
        U_IDLE,     /* never started */
        U_STARTING, /* spawned or connected; initialize and tools/list under way */
        U_READY,
        U_DEAD, /* exited or failed to start; the next call restarts it */
};

struct upstream {
        struct upstream_set *set;
        const struct upstream_spec *spec;
        enum ustate state;
        struct transport *t; /* while starting or ready */
        json_int_t next_id, init_id, list_id;
        json_t *tools;   /* cached listing */
        json_t *listing; /* pages so far */
        int pages;
        unsigned long long listing_bytes; /* of the pages so far */
        bool relist;                      /* the list changed while it was being read */
        struct list calls;                /* newest first */
        struct timer *start_timer;        /* spawned or connected .. tools listed */
        struct timer *restart_timer;      /* the back-off is over: start for the calls waiting */
        char *last_error;
        long long started_ms, retry_at_ms;
        long long backoff_ms;
        bool stopping;     /* shut down: never started again */
        bool stop_pending; /* its transport's stop is under way */
        bool wait_reap;    /* a start waits for its last process to be reaped */
        /* Its own secrets of MASK_ANSWER_MIN bytes or more, masked in its
         * successful answers and tool list (upstream/mask.h). */
        struct mask *answer_mask;
};

struct upstream_set {
        struct loop *loop;
        struct curl_loop *curl; /* for HTTP servers; made on first use */
        const struct config *cfg;
        struct registry reg;
        struct upstream *v;
        size_t n;
        struct list procs; /* struct uproc: every process not reaped yet */
        /* A process was reaped (process.c): the shutdown may be over. */
        void (*reaped)(struct upstream_set *set);
        bool shutting_down;
        void (*done)(void *);
        void *done_ud;
};

/* ---- process.c: a stdio server's process */

/* Spawn u's command in a process group of its own, behind a guardian that
 * kills the group if corral dies. Its stdin and stdout come back in
 * *ret_in and *ret_out (non-blocking; the caller's); its stderr goes to the
 * log. `exited(userdata, how)` is called once it is reaped ("exited with
 * status 1"), unless detached first. */
int uproc_spawn(struct upstream *u, void (*exited)(void *userdata, const char *how), void *userdata,
                int *ret_in, int *ret_out, struct uproc **ret, struct err *e);
/* Signal the whole group. */
void uproc_kill(struct uproc *p, int sig);
/* SIGTERM to the group now, SIGKILL after a grace period. */
void uproc_stop(struct uproc *p);
/* No `exited` call any more; the process, killed, is reaped and freed on
 * its own. */
void uproc_detach(struct uproc *p);
/* Whether it has exited and is not reaped yet. */
bool uproc_exit_pending(const struct uproc *p);
/* Whether an exit will be noticed (pidfd) without polling for it. */
bool uproc_watched(const struct uproc *p);
/* The last line it wrote to stderr (masked), or NULL. */
const char *uproc_last_words(const struct uproc *p);
/* Kill and reap (waiting) every process of the set; frees them. */
void uproc_kill_all(struct upstream_set *set);
/* Whether a process of u's is still there (not reaped yet). */
bool uproc_running_for(const struct upstream *u);
