/* The client's requests in flight, one table for every kind: a request is
 * in it from the moment corral takes it until it is answered, withdrawn
 * by the client (notifications/cancelled) or dropped with the client.
 * What each kind holds on the way (a sandbox's run, a file operation, an
 * upstream's listing, a question to the person) it frees in its own
 * operations; this file knows only ids. */
#include "mcp/internal.h"

#include "core/jsonrpc.h"
#include "core/log.h"
#include "mcp/transport.h"

void mcp_send(struct mcp_server *s, json_t *msg)
{
        if (!s->transport || s->closing) {
                json_decref(msg);
                return;
        }
        transport_send(s->transport, msg);
}

void mcp_send_error(struct mcp_server *s, json_t *id, int code, const char *message)
{
        mcp_send(s, jrpc_error(id, code, message, NULL));
}

void mcp_send_result(struct mcp_server *s, json_t *id, json_t *result)
{
        if (result)
                mcp_send(s, jrpc_result(id, result));
        else
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "cannot encode the result");
}

void request_begin(struct mcp_server *s, struct request *r, json_t *id,
                   const struct request_ops *ops)
{
        r->srv = s;
        r->id = json_incref(id);
        r->ops = ops;
        list_append(&s->requests, &r->node);
}

bool request_live(const struct request *r)
{
        return list_linked(&r->node);
}

void request_end(struct request *r)
{
        list_del(&r->node);
        json_decref(r->id);
        r->id = NULL;
}

void request_answer(struct request *r, json_t *result)
{
        if (!request_live(r)) {
                json_decref(result);
                return;
        }
        mcp_send_result(r->srv, r->id, result);
        request_end(r);
}

void request_error(struct request *r, int code, const char *message)
{
        if (!request_live(r))
                return;
        mcp_send_error(r->srv, r->id, code, message);
        request_end(r);
}

struct request *request_find(const struct mcp_server *s, const json_t *id)
{
        struct request *r;
        list_for_each(r, &s->requests, node) if (jrpc_id_equal(r->id, id)) return r;
        return NULL;
}

bool request_withdraw(struct mcp_server *s, const json_t *id, const char *why)
{
        struct request *r = request_find(s, id);
        if (!r)
                return false;
        log_info("host cancelled %s%s%s", r->ops->what, why ? ": " : "", why ? why : "");
        /* Out of the table first: no answer follows, and the kind may
         * free the request with its work. */
        request_end(r);
        r->ops->withdraw(r);
        return true;
}

void requests_drop_all(struct mcp_server *s)
{
        while (!list_empty(&s->requests)) {
                struct request *r = list_first(&s->requests, struct request, node);
                request_end(r);
                r->ops->drop(r);
        }
}

bool requests_pending(const struct mcp_server *s)
{
        return !list_empty(&s->requests);
}
