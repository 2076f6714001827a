/* Questions to the person behind an MCP client: `elicitation/create`
 * (form mode, MCP 2025-11-25) for the bridge's `ask` policy. One question
 * of a client is out at a time, the others wait their turn in order: a
 * person reads and answers one call at once, and a second dialog on top
 * of the first would hide which call each answer is for. Each question has
 * its bound (ask_timeout_s) from when it was asked, waiting included. */
#include "mcp/internal.h"

#include "core/buf.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>

#define ASK_ID_PREFIX "corral-ask-"

struct ask {
        struct mcp_server *srv;
        struct list node; /* srv->asks, in order; the first is out when sent */
        char id[40];
        bool sent;
        char *message;
        struct timer *timer;
        bridge_answer_fn done;
        void *done_ud;
};

static void ask_free(struct ask *a)
{
        list_del(&a->node);
        timer_remove(a->timer);
        free(a->message);
        free(a);
}

/* The next question out, when none is. */
static void ask_next(struct mcp_server *s)
{
        if (list_empty(&s->asks) || s->closing)
                return;
        struct ask *a = list_first(&s->asks, struct ask, node);
        if (a->sent)
                return;
        a->sent = true;
        /* Form mode with no fields: the person accepts or declines. */
        json_t *params = json_pack("{s:s, s:s, s:{s:s, s:{}}}", "mode", "form", "message",
                                   a->message, "requestedSchema", "type", "object", "properties");
        json_t *req = json_pack("{s:s, s:s, s:s, s:o}", "jsonrpc", "2.0", "id", a->id, "method",
                                "elicitation/create", "params", params);
        if (!req) {
                a->done(a->done_ud, BRIDGE_GONE, "out of memory");
                ask_free(a);
                ask_next(s);
                return;
        }
        mcp_send(s, req);
}

/* The answer is given, the question goes, the next one comes. */
static void ask_end(struct ask *a, enum bridge_answer answer, const char *why)
{
        struct mcp_server *s = a->srv;
        bool was_out = a->sent;
        bridge_answer_fn done = a->done;
        void *ud = a->done_ud;
        ask_free(a);
        done(ud, answer, why);
        if (was_out)
                ask_next(s);
}

/* A question out is taken back from the client (MCP cancellation). */
static void ask_cancel_out(struct ask *a, const char *reason)
{
        if (a->sent && !a->srv->closing)
                mcp_send(a->srv, jrpc_notification("notifications/cancelled",
                                                   json_pack("{s:s, s:s}", "requestId", a->id,
                                                             "reason", reason)));
}

static void on_ask_timeout(struct timer *t, void *userdata)
{
        struct ask *a = userdata;
        (void)t;
        ask_cancel_out(a, "ask_timeout_s passed");
        ask_end(a, BRIDGE_TIMED_OUT, NULL);
}

bool mcp_server_can_elicit(const struct mcp_server *s)
{
        return s->elicit_form && !s->closing && s->transport;
}

static int ask(void *ud, const char *message, bridge_answer_fn done, void *done_ud, void **handle)
{
        struct mcp_server *s = ud;
        if (!mcp_server_can_elicit(s))
                return -ENOTSUP;
        struct ask *a = calloc(1, sizeof(*a));
        if (!a || !(a->message = strdup(message))) {
                free(a);
                return -ENOMEM;
        }
        a->srv = s;
        a->done = done;
        a->done_ud = done_ud;
        snprintf(a->id, sizeof(a->id), ASK_ID_PREFIX "%u", ++s->ask_seq);
        if (timer_add(s->loop, on_ask_timeout, a, &a->timer) < 0) {
                free(a->message);
                free(a);
                return -ENOMEM;
        }
        timer_arm(a->timer, (long long)(s->cfg->ask_timeout_s * 1000));
        list_append(&s->asks, &a->node); /* in order: the first is out */
        *handle = a;
        ask_next(s);
        return 0;
}

/* Taken back: the call was cancelled, or its run ended. A question already
 * out is withdrawn from the client too. */
static void withdraw(void *handle)
{
        struct ask *a = handle;
        struct mcp_server *s = a->srv;
        bool was_out = a->sent;
        ask_cancel_out(a, "the call it was about ended");
        ask_free(a);
        if (was_out)
                ask_next(s);
}

void mcp_asks_init(struct mcp_server *s)
{
        list_init(&s->asks);
        s->asker = (struct bridge_asker){.ask = ask, .withdraw = withdraw, .ud = s};
}

bool mcp_asks_response(struct mcp_server *s, const struct jrpc_msg *m)
{
        const char *id = json_string_value(m->id);
        if (!id || strncmp(id, ASK_ID_PREFIX, strlen(ASK_ID_PREFIX)) != 0)
                return false;
        struct ask *a;
        list_for_each(a, &s->asks, node)
        {
                if (!a->sent || strcmp(a->id, id) != 0)
                        continue;
                if (m->kind == JRPC_ERROR) {
                        char why[300];
                        snprintf(why, sizeof(why), "the MCP client answered with an error: %.200s",
                                 json_string_value(json_object_get(m->error, "message"))
                                     ? json_string_value(json_object_get(m->error, "message"))
                                     : "(no message)");
                        utf8_scrub(why);
                        ask_end(a, BRIDGE_GONE, why);
                        return true;
                }
                const char *action = json_string_value(json_object_get(m->result, "action"));
                if (action && strcmp(action, "accept") == 0)
                        ask_end(a, BRIDGE_ACCEPTED, NULL);
                else if (action && strcmp(action, "decline") == 0)
                        ask_end(a, BRIDGE_DECLINED, NULL);
                else if (action && strcmp(action, "cancel") == 0)
                        ask_end(a, BRIDGE_CANCELLED, NULL);
                else
                        ask_end(a, BRIDGE_GONE, "the MCP client's answer has no known action");
                return true;
        }
        return true; /* ours, but no longer waited for (timed out, withdrawn) */
}

void mcp_asks_close(struct mcp_server *s)
{
        while (!list_empty(&s->asks)) {
                struct ask *a = list_first(&s->asks, struct ask, node);
                a->sent = false; /* nothing more to the client */
                ask_end(a, BRIDGE_GONE, "the MCP client went away");
        }
}
