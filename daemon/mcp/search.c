/* list_servers and search_tools: the upstream MCP servers that sandboxed
 * code may call, and their tools, for the client writing that code. */
#include "mcp/internal.h"

#include "bridge/bridge.h"
#include "core/buf.h"
#include "core/jsonrpc.h"
#include "core/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A search_tools call waiting for servers to start. */
struct search;
struct search_wait {
        struct search *search;
        struct upstream *u;
        struct upstream_call *uc;
        char *error; /* the server could not be listed */
        bool cached; /* searched as listed before: nothing to wait for */
};

struct search {
        struct request req;
        char *query;
        long limit;
        size_t n, pending;
        struct search_wait *waits;
        json_t *not_searched; /* [{server, reason}] */
};

#define NOT_STARTED                                                                                \
        "a project's server, not started yet: name it in search_tools's \"server\" or in "         \
        "run_python's \"servers\" to start it"

/* Not disabled in its spec, nor by the policy. */
static bool server_enabled(struct bridge *b, struct upstream *u)
{
        const char *name = upstream_spec(u)->name;
        return !upstream_spec(u)->disabled && policy_server(bridge_policy(b), name)->enabled;
}

void servers_names(struct bridge *b, char *out, size_t size)
{
        struct upstream_set *ups = b ? bridge_upstreams(b) : NULL;
        size_t used = 0;
        out[0] = '\0';
        for (size_t i = 0; ups && i < upstream_count(ups); i++) {
                struct upstream *u = upstream_at(ups, i);
                if (!server_enabled(b, u))
                        continue;
                int k = snprintf(out + used, size - used, "%s%s", used ? ", " : "",
                                 upstream_spec(u)->name);
                if (k < 0 || (size_t)k >= size - used) {
                        snprintf(out + (used < size - 8 ? used : size - 8), 8, ", ...");
                        break;
                }
                used += (size_t)k;
        }
}

/* A project's server that is not offered: listed, so that the person
 * learns why and what would change it. */
static json_t *skipped_describe(const struct registry_skip *k)
{
        return json_pack("{s:s, s:n, s:s, s:s, s:n, s:n, s:s, s:s}", "name", k->name, "description",
                         "transport", k->transport == UP_HTTP ? "http" : "stdio", "status",
                         "skipped", "tools", "error", "source", k->source, "reason", k->reason);
}

static json_t *servers_listing(struct mcp_server *s)
{
        json_t *list = json_array();
        struct upstream_set *ups = s->bridge ? bridge_upstreams(s->bridge) : NULL;
        for (size_t i = 0; ups && list && i < upstream_count(ups); i++) {
                struct upstream *u = upstream_at(ups, i);
                json_t *d = upstream_describe(u);
                if (!server_enabled(s->bridge, u))
                        json_object_set_new(d, "status", json_string("disabled"));
                json_array_append_new(list, d);
        }
        const struct registry *reg = ups ? upstream_registry(ups) : NULL;
        for (size_t i = 0; reg && list && i < reg->n_skipped; i++)
                json_array_append_new(list, skipped_describe(&reg->skipped[i]));
        return list;
}

void tool_list_servers(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        if (args && (!json_is_object(args) || json_object_size(args) > 0)) {
                mcp_send_result(s, id, arguments_error("list_servers takes no arguments"));
                return;
        }
        json_t *list = servers_listing(s);
        struct buf text;
        buf_init(&text, 1 << 20);
        size_t i;
        json_t *d;
        char line[1600];
        const char *policy = s->bridge ? policy_source_name(bridge_policy(s->bridge)) : NULL;
        if (policy) {
                snprintf(line, sizeof(line), "Policy in force: %.1500s\n", policy);
                buf_append_some(&text, line, strlen(line));
        }
        json_array_foreach(list, i, d)
        {
                json_t *tools = json_object_get(d, "tools");
                const char *desc = json_string_value(json_object_get(d, "description"));
                const char *err = json_string_value(json_object_get(d, "error"));
                const char *reason = json_string_value(json_object_get(d, "reason"));
                char count[40] = "";
                if (json_is_integer(tools))
                        snprintf(count, sizeof(count), ", %lld tools",
                                 (long long)json_integer_value(tools));
                snprintf(line, sizeof(line), "%s [%s%s]%s%s%s%s%s%s%s\n",
                         json_string_value(json_object_get(d, "name")),
                         json_string_value(json_object_get(d, "status")), count, desc ? ": " : "",
                         desc ? desc : "", err ? " -- last error: " : "", err ? err : "",
                         reason ? ": " : "", reason ? reason : "",
                         json_is_true(json_object_get(d, "project"))
                             ? " (a project's server: starts when a call names it)"
                             : "");
                buf_append_some(&text, line, strlen(line));
        }
        if (json_array_size(list) == 0) {
                const char *none = "No MCP servers are configured for sandboxed code (see "
                                   "corral's README: servers in config.json or the MCP hosts' "
                                   "own files).\n";
                buf_append_some(&text, none, strlen(none));
        }
        utf8_scrub((char *)buf_str(&text));
        json_t *result = json_pack("{s:[{s:s, s:s}], s:{s:o, s:s?}, s:b}", "content", "type",
                                   "text", "text", buf_str(&text), "structuredContent", "servers",
                                   list, "policy", policy, "isError", 0);
        buf_free(&text);
        mcp_send(s, jrpc_result(id, result));
}

static void search_free(struct search *q)
{
        request_end(&q->req);
        for (size_t i = 0; i < q->n; i++) {
                upstream_call_cancel(q->waits[i].uc);
                free(q->waits[i].error);
        }
        free(q->waits);
        json_decref(q->not_searched);
        free(q->query);
        free(q);
}

/* Withdrawn, or its client gone: the servers' listings it waits for are
 * no longer wanted. */
static void search_gone(struct request *r)
{
        search_free(request_of(r, struct search));
}

static const struct request_ops search_ops = {
    .what = "a search_tools",
    .withdraw = search_gone,
    .drop = search_gone,
};

/* Every word of the query in the name or description; the name counts more. */
static long match_score(const char *query, const char *name, const char *desc)
{
        long score = 0;
        char word[128];
        const char *p = query;
        while (*p) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                size_t n = 0;
                while (*p && *p != ' ' && *p != '\t' && *p != ',') {
                        if (n + 1 < sizeof(word))
                                word[n++] = *p;
                        p++;
                }
                if (!n)
                        break;
                word[n] = '\0';
                bool in_name = strcasestr(name, word) != NULL;
                bool in_desc = desc && strcasestr(desc, word) != NULL;
                if (!in_name && !in_desc)
                        return 0;
                score += in_name ? 3 : 1;
        }
        return score ? score : 1;
}

struct hit {
        long score;
        json_t *entry;
};

static int cmp_hit(const void *a, const void *b)
{
        const struct hit *x = a, *y = b;
        return (y->score > x->score) - (y->score < x->score);
}

static void search_answer(struct search *q)
{
        struct mcp_server *s = q->req.srv;
        size_t cap = 0, n = 0;
        struct hit *hits = NULL;
        json_t *errors = json_array();
        json_t *searched = json_array();
        for (size_t i = 0; i < q->n; i++) {
                struct search_wait *w = &q->waits[i];
                const char *server = upstream_spec(w->u)->name;
                json_array_append_new(searched, json_string(server));
                if (w->error) {
                        json_array_append_new(
                            errors, json_pack("{s:s, s:s}", "server", server, "error", w->error));
                        continue;
                }
                size_t j;
                json_t *t;
                json_array_foreach(upstream_tools(w->u), j, t)
                {
                        const char *name = json_string_value(json_object_get(t, "name"));
                        const char *desc = json_string_value(json_object_get(t, "description"));
                        if (!name || !policy_tool_allowed(bridge_policy(s->bridge), server, name))
                                continue;
                        long score = match_score(q->query, name, desc);
                        if (!score)
                                continue;
                        if (n == cap) {
                                size_t nc = cap ? cap * 2 : 32;
                                struct hit *nh = realloc(hits, nc * sizeof(*hits));
                                if (!nh)
                                        break;
                                hits = nh;
                                cap = nc;
                        }
                        json_t *schema = json_object_get(t, "inputSchema");
                        hits[n].score = score;
                        hits[n].entry =
                            json_pack("{s:s, s:s, s:s?, s:O?}", "server", server, "name", name,
                                      "description", desc, "inputSchema", schema);
                        if (hits[n].entry)
                                n++;
                }
        }
        if (n)
                qsort(hits, n, sizeof(*hits), cmp_hit);
        json_t *tools = json_array();
        struct buf text;
        buf_init(&text, 4 << 20);
        for (size_t i = 0; i < n; i++) {
                if ((long)i < q->limit) {
                        json_t *e = hits[i].entry;
                        const char *desc = json_string_value(json_object_get(e, "description"));
                        char *schema = json_dumps(json_object_get(e, "inputSchema"), JSON_COMPACT);
                        char head[700];
                        snprintf(head, sizeof(head), "%s.%s: %.500s\n  input: ",
                                 json_string_value(json_object_get(e, "server")),
                                 json_string_value(json_object_get(e, "name")), desc ? desc : "");
                        buf_append_some(&text, head, strlen(head));
                        buf_append_some(&text, schema ? schema : "{}",
                                        strlen(schema ? schema : "{}"));
                        buf_append_some(&text, "\n", 1);
                        free(schema);
                        json_array_append(tools, e);
                }
                json_decref(hits[i].entry);
        }
        free(hits);
        size_t k;
        json_t *er;
        json_array_foreach(errors, k, er)
        {
                char line[1300];
                snprintf(line, sizeof(line), "(server %s could not be searched: %s)\n",
                         json_string_value(json_object_get(er, "server")),
                         json_string_value(json_object_get(er, "error")));
                buf_append_some(&text, line, strlen(line));
        }
        if (json_array_size(tools) == 0)
                buf_append_some(&text, "No tool matches.\n", 17);
        json_array_foreach(q->not_searched, k, er)
        {
                char line[1300];
                snprintf(line, sizeof(line), "(server %s was not searched: %s)\n",
                         json_string_value(json_object_get(er, "server")),
                         json_string_value(json_object_get(er, "reason")));
                buf_append_some(&text, line, strlen(line));
        }
        utf8_scrub((char *)buf_str(&text));
        json_t *result =
            json_pack("{s:[{s:s, s:s}], s:{s:o, s:o, s:o, s:O}, s:b}", "content", "type", "text",
                      "text", buf_str(&text), "structuredContent", "tools", tools, "errors", errors,
                      "searched", searched, "not_searched", q->not_searched, "isError", 0);
        buf_free(&text);
        request_answer(&q->req, result);
        search_free(q);
}

static void search_ready(void *userdata, json_t *tools, const struct err *e)
{
        struct search_wait *w = userdata;
        struct search *q = w->search;
        w->uc = NULL;
        if (!tools)
                w->error = strdup(e->msg);
        if (--q->pending == 0)
                search_answer(q);
}

void tool_search_tools(struct mcp_server *s, json_t *id, json_t *args, json_t *params)
{
        const char *query = json_string_value(json_object_get(args, "query"));
        json_t *server = json_object_get(args, "server");
        json_t *limit = json_object_get(args, "limit");
        const char *key;
        json_t *v;
        json_object_foreach(args, key, v)
        {
                if (strcmp(key, "query") && strcmp(key, "server") && strcmp(key, "limit")) {
                        mcp_send_result(s, id,
                                        arguments_error("search_tools takes query, server "
                                                        "and limit"));
                        return;
                }
        }
        if (!query || strlen(query) > 1000 || (server && !json_is_string(server)) ||
            (limit && (!json_is_integer(limit) || json_integer_value(limit) < 1 ||
                       json_integer_value(limit) > 200))) {
                mcp_send_result(s, id,
                                arguments_error("search_tools needs a \"query\" string "
                                                "(at most 1000 bytes), an optional "
                                                "\"server\" name and a \"limit\" from 1 "
                                                "to 200"));
                return;
        }
        struct upstream_set *ups = s->bridge ? bridge_upstreams(s->bridge) : NULL;
        if (server) {
                json_auto_t *one = json_pack("[O]", server);
                struct err e = {0};
                int r = s->bridge
                            ? bridge_check_servers(s->bridge, one, &e)
                            : err_set(&e, ERR_INVALID, -EINVAL, "no MCP servers are configured");
                if (r < 0) {
                        mcp_send_result(s, id, err_result(FAILED_ARGUMENTS, -EINVAL, &e));
                        return;
                }
        }
        struct search *q = calloc(1, sizeof(*q));
        size_t total = ups ? upstream_count(ups) : 0;
        if (!q || !(q->query = strdup(query)) ||
            !(q->waits = calloc(total ? total : 1, sizeof(*q->waits)))) {
                if (q)
                        free(q->query);
                free(q);
                mcp_send_error(s, id, JRPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        request_begin(s, &q->req, id, &search_ops);
        q->limit = limit ? (long)json_integer_value(limit) : 20;
        q->not_searched = json_array();
        for (size_t i = 0; i < total; i++) {
                struct upstream *u = upstream_at(ups, i);
                const struct upstream_spec *spec = upstream_spec(u);
                if (server ? strcmp(spec->name, json_string_value(server)) != 0
                           : !server_enabled(s->bridge, u))
                        continue;
                /* A project's server starts only when a call names it: a
                 * search of everything reads what it listed before, if
                 * anything, and never runs what a clone brought. */
                bool running = strcmp(upstream_state(u), "connected") == 0;
                bool cached = !server && spec->project && !running && upstream_tools(u);
                if (!server && spec->project && !running && !cached) {
                        json_array_append_new(
                            q->not_searched,
                            json_pack("{s:s, s:s}", "server", spec->name, "reason", NOT_STARTED));
                        continue;
                }
                q->waits[q->n++] = (struct search_wait){.search = q, .u = u, .cached = cached};
        }
        const struct registry *reg = ups && !server ? upstream_registry(ups) : NULL;
        for (size_t i = 0; reg && i < reg->n_skipped; i++)
                json_array_append_new(q->not_searched,
                                      json_pack("{s:s, s:s}", "server", reg->skipped[i].name,
                                                "reason", reg->skipped[i].reason));
        /* Answers come from the loop, after this returns (core/loop.h). */
        q->pending = q->n;
        for (size_t i = 0; i < q->n; i++) {
                struct search_wait *w = &q->waits[i];
                if (w->cached) {
                        q->pending--;
                        continue;
                }
                double t =
                    policy_server(bridge_policy(s->bridge), upstream_spec(w->u)->name)->timeout_s;
                if (upstream_when_ready(w->u, t, search_ready, w, &w->uc) < 0) {
                        w->error = strdup("out of memory");
                        q->pending--;
                }
        }
        if (q->pending == 0)
                search_answer(q);
}
