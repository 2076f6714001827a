#include "core/curl_loop.h"

#include "core/list.h"
#include "core/util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>

#define CURL_LOOP_IDLE_MAX 8 /* idle connections kept, all hosts together */

/* One added transfer: what to call when it ends. */
struct xfer {
        struct list node; /* cl->xfers */
        CURL *easy;
        curl_done_cb cb;
        void *userdata;
        bool kept; /* curl_loop_add_kept */
};

struct curl_loop {
        struct loop *loop;
        CURLM *multi;
        struct timer *timer;
        struct list xfers;
};

/* A socket libcurl asked us to watch. */
struct sockinfo {
        struct curl_loop *cl;
        curl_socket_t fd;
        struct watch *w;
};

/* Called after every curl_multi_socket_action, outside libcurl's callbacks,
 * so that completion callbacks may add and remove handles. */
static void check_done(struct curl_loop *cl)
{
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(cl->multi, &left))) {
                if (m->msg != CURLMSG_DONE)
                        continue;
                CURL *easy = m->easy_handle;
                CURLcode result = m->data.result;
                struct xfer *x = NULL;
                curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
                if (x && x->kept) {
                        /* A connection made for its owner: it stays in the
                         * multi handle, which holds it, until removed. */
                        curl_done_cb cb = x->cb;
                        x->cb = NULL;
                        if (cb)
                                cb(easy, result, x->userdata);
                        continue;
                }
                curl_multi_remove_handle(cl->multi, easy);
                curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
                if (!x)
                        continue;
                list_del(&x->node);
                curl_done_cb cb = x->cb;
                void *ud = x->userdata;
                free(x);
                cb(easy, result, ud);
        }
}

static void on_socket_event(struct watch *w, uint32_t events, void *userdata)
{
        struct sockinfo *si = userdata;
        struct curl_loop *cl = si->cl;
        int flags = 0, running;
        (void)w;
        if (events & EPOLLIN)
                flags |= CURL_CSELECT_IN;
        if (events & EPOLLOUT)
                flags |= CURL_CSELECT_OUT;
        if (events & (EPOLLERR | EPOLLHUP))
                flags |= CURL_CSELECT_ERR;
        /* si may be freed inside this call (CURL_POLL_REMOVE). */
        curl_multi_socket_action(cl->multi, si->fd, flags, &running);
        check_done(cl);
}

static int multi_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
        struct curl_loop *cl = userp;
        struct sockinfo *si = socketp;
        (void)easy;
        if (what == CURL_POLL_REMOVE) {
                if (si) {
                        watch_remove(si->w);
                        free(si);
                        curl_multi_assign(cl->multi, fd, NULL);
                }
                return 0;
        }
        uint32_t ev = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
        if (!si) {
                si = calloc(1, sizeof(*si));
                if (!si)
                        return -1;
                si->cl = cl;
                si->fd = fd;
                if (watch_add(cl->loop, fd, ev, on_socket_event, si, &si->w) < 0) {
                        free(si);
                        return -1;
                }
                curl_multi_assign(cl->multi, fd, si);
                return 0;
        }
        return watch_modify(si->w, ev) < 0 ? -1 : 0;
}

static void on_timer(struct timer *t, void *userdata)
{
        struct curl_loop *cl = userdata;
        int running;
        (void)t;
        curl_multi_socket_action(cl->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        check_done(cl);
}

static int multi_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
        struct curl_loop *cl = userp;
        (void)multi;
        /* libcurl: -1 deletes the timer, 0 means "as soon as possible";
         * timer_arm: 0 disarms, a negative value fires at once. */
        timer_arm(cl->timer, timeout_ms < 0 ? 0 : timeout_ms == 0 ? -1 : timeout_ms);
        return 0;
}

int curl_loop_new(struct loop *l, struct curl_loop **ret)
{
        static bool curl_ready;
        if (!curl_ready) {
                if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
                        return -EIO;
                curl_ready = true;
        }
        struct curl_loop *cl = calloc(1, sizeof(*cl));
        if (!cl)
                return -ENOMEM;
        cl->loop = l;
        list_init(&cl->xfers);
        if (!(cl->multi = curl_multi_init()) || timer_add(l, on_timer, cl, &cl->timer) < 0) {
                curl_loop_free(cl);
                return -ENOMEM;
        }
        curl_multi_setopt(cl->multi, CURLMOPT_SOCKETFUNCTION, multi_socket_cb);
        curl_multi_setopt(cl->multi, CURLMOPT_SOCKETDATA, cl);
        curl_multi_setopt(cl->multi, CURLMOPT_TIMERFUNCTION, multi_timer_cb);
        curl_multi_setopt(cl->multi, CURLMOPT_TIMERDATA, cl);
        /* Idle connections kept for reuse. libcurl's default grows with the
         * peak number of transfers at once (four each), so a burst would
         * leave its descriptors open for good: a fixed bound instead. */
        curl_multi_setopt(cl->multi, CURLMOPT_MAXCONNECTS, (long)CURL_LOOP_IDLE_MAX);
        *ret = cl;
        return 0;
}

void curl_loop_free(struct curl_loop *cl)
{
        if (!cl)
                return;
        while (!list_empty(&cl->xfers))
                curl_loop_remove(cl, list_first(&cl->xfers, struct xfer, node)->easy);
        if (cl->multi)
                curl_multi_cleanup(cl->multi);
        timer_remove(cl->timer);
        free(cl);
}

struct loop *curl_loop_loop(const struct curl_loop *cl)
{
        return cl->loop;
}

int curl_loop_add_kept(struct curl_loop *cl, CURL *easy, curl_done_cb cb, void *userdata)
{
        int r = curl_loop_add(cl, easy, cb, userdata);
        if (r == 0) {
                struct xfer *x = NULL;
                curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
                x->kept = true;
        }
        return r;
}

int curl_loop_add(struct curl_loop *cl, CURL *easy, curl_done_cb cb, void *userdata)
{
        struct xfer *x = calloc(1, sizeof(*x));
        if (!x)
                return -ENOMEM;
        x->easy = easy;
        x->cb = cb;
        x->userdata = userdata;
        curl_easy_setopt(easy, CURLOPT_PRIVATE, x);
        if (curl_multi_add_handle(cl->multi, easy) != CURLM_OK) {
                curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
                free(x);
                return -EIO;
        }
        list_push(&cl->xfers, &x->node);
        return 0;
}

void curl_loop_remove(struct curl_loop *cl, CURL *easy)
{
        struct xfer *x = NULL;
        if (!cl || !easy)
                return;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
        if (!x)
                return;
        curl_multi_remove_handle(cl->multi, easy);
        curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
        list_del(&x->node);
        free(x);
}
