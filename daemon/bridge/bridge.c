#include "bridge/bridge.h"

#include "bridge/egress.h"

#include "core/buf.h"
#include "core/list.h"
#include "core/log.h"
#include "core/metrics.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define MAX_RUN_SERVERS     32
#define ENVELOPE            256  /* room in a frame for what wraps a result */
#define DENIALS_AUDITED     100  /* per run; code in a loop must not fill the disk */
#define ASK_ARGUMENTS_SHOWN 1500 /* bytes of a call's arguments put to a person */

struct bridge {
        struct loop *loop;
        const struct config *cfg;
        struct upstream_set *ups;
        struct policy *pol;
        struct audit *audit;
        struct egress *egress; /* the way out of sandboxes */
};

const char *bridge_answer_name(enum bridge_answer answer)
{
        static const char *const names[] = {[BRIDGE_ACCEPTED] = "accepted",
                                            [BRIDGE_DECLINED] = "declined",
                                            [BRIDGE_CANCELLED] = "cancelled",
                                            [BRIDGE_TIMED_OUT] = "timed out",
                                            [BRIDGE_GONE] = "no answer"};
        return names[answer];
}

void bridge_audit(struct bridge *b, const struct audit_entry *e)
{
        if (b && b->audit)
                audit_write(b->audit, e);
}

enum bcall_kind { BC_LIST, BC_CALL };

/* One request of the sandbox in flight. */
struct bcall {
        struct bridge_run *run;
        struct list node; /* r->bcalls */
        enum bcall_kind kind;
        json_t *id; /* the runtime's */
        struct upstream *u;
        struct upstream_call *uc; /* NULL between stages */
        char *tool;               /* as asked, then as resolved */
        json_t *arguments;
        size_t argument_bytes;
        long long t0;
        /* The policy said ask: the question out (a handle of the asker's),
         * then the answer and how long it took, for the audit line. */
        void *ask;
        long long ask_t0, ask_ms;
        const char *ask_answer;
};

struct bridge_run {
        struct bridge *b;
        char **servers; /* NULL-terminated */
        size_t n_servers;
        char sandbox[64];
        bridge_send_fn send;
        void *userdata;
        long calls;         /* tools/call requests this run */
        long denials;       /* refused ones: only the first DENIALS_AUDITED are written */
        long in_flight;     /* all requests being served */
        struct list bcalls; /* in flight */
        const struct bridge_asker *asker; /* NULL: nobody to ask */
        struct egress_run *net;           /* its connections through the proxy */
        /* Answers go out from the loop (core/loop.h), in order. */
        json_t *outbox;
        struct defer flush_d;
};

int bridge_new(struct loop *l, const struct config *cfg, struct upstream_set *ups,
               struct policy *pol, struct audit *audit, struct bridge **ret, struct err *e)
{
        struct bridge *b = calloc(1, sizeof(*b));
        if (!b)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        *b = (struct bridge){.loop = l, .cfg = cfg, .ups = ups, .pol = pol, .audit = audit};
        int r = egress_new(l, cfg, pol, audit, &b->egress, e);
        if (r < 0) {
                free(b);
                return r;
        }
        *ret = b;
        return 0;
}

void bridge_free(struct bridge *b)
{
        if (b)
                egress_free(b->egress);
        free(b);
}

struct upstream_set *bridge_upstreams(struct bridge *b)
{
        return b->ups;
}

const struct policy *bridge_policy(const struct bridge *b)
{
        return b->pol;
}

static void known_servers(struct bridge *b, char *out, size_t size)
{
        size_t n = 0;
        out[0] = '\0';
        for (size_t i = 0; i < upstream_count(b->ups); i++) {
                const char *name = upstream_spec(upstream_at(b->ups, i))->name;
                if (!policy_server(b->pol, name)->enabled)
                        continue;
                int k = snprintf(out + n, size - n, "%s%s", n ? ", " : "", name);
                if (k < 0 || (size_t)k >= size - n)
                        break;
                n += (size_t)k;
        }
        if (!n)
                snprintf(out, size, "none are configured");
}

static void alias_of(const char *name, char *out, size_t size)
{
        size_t n = 0;
        if (isdigit((unsigned char)name[0]) && n + 1 < size)
                out[n++] = '_';
        for (const char *p = name; *p && n + 1 < size; p++) {
                char c = (char)tolower((unsigned char)*p);
                out[n++] =
                    (isalnum((unsigned char)c) && (unsigned char)c < 128) || c == '_' ? c : '_';
        }
        out[n] = '\0';
}

int bridge_check_servers(struct bridge *b, json_t *names, struct err *e)
{
        char known[600];
        if (!json_is_array(names) || json_array_size(names) > MAX_RUN_SERVERS) {
                return err_set(e, ERR_INVALID, -EINVAL,
                               "argument \"servers\" must be an array of at most %d names",
                               MAX_RUN_SERVERS);
        }
        size_t i, j;
        json_t *v;
        json_array_foreach(names, i, v)
        {
                const char *name = json_string_value(v);
                if (!name) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "argument \"servers\" must hold names (strings)");
                }
                char alias[160], other[160];
                alias_of(name, alias, sizeof(alias));
                for (j = 0; j < i; j++) {
                        const char *prev = json_string_value(json_array_get(names, j));
                        if (strcmp(prev, name) == 0) {
                                return err_set(e, ERR_INVALID, -EINVAL,
                                               "server \"%.100s\" is named twice", name);
                        }
                        /* Each becomes a Python name: they must differ. */
                        alias_of(prev, other, sizeof(other));
                        if (strcmp(alias, other) == 0) {
                                return err_set(e, ERR_INVALID, -EINVAL,
                                               "servers \"%.100s\" and \"%.100s\" would both be "
                                               "mcp_%s in Python; name only one of them per call",
                                               prev, name, alias);
                        }
                }
                struct upstream *u = b->ups ? upstream_get(b->ups, name) : NULL;
                const struct registry_skip *skip =
                    u || !b->ups ? NULL : registry_find_skipped(upstream_registry(b->ups), name);
                if (skip) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "MCP server \"%.100s\" is skipped: %s", name, skip->reason);
                }
                if (!u || upstream_spec(u)->disabled) {
                        known_servers(b, known, sizeof(known));
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "no MCP server named \"%.100s\" (known: %s)", name, known);
                }
                if (!policy_server(b->pol, name)->enabled) {
                        return err_set(e, ERR_INVALID, -EINVAL,
                                       "the policy disables server \"%.100s\"", name);
                }
        }
        return 0;
}

int bridge_run_new(struct bridge *b, json_t *names, json_t *network, bridge_send_fn send,
                   bridge_lines_fn send_lines, void *userdata, struct bridge_run **ret)
{
        struct bridge_run *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->b = b;
        r->send = send;
        r->userdata = userdata;
        list_init(&r->bcalls);
        size_t n = json_array_size(names);
        r->servers = calloc(n + 1, sizeof(char *));
        r->outbox = json_array();
        if (!r->servers || !r->outbox) {
                free(r->servers);
                json_decref(r->outbox);
                free(r);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                r->servers[i] = strdup(json_string_value(json_array_get(names, i)));
                if (!r->servers[i]) {
                        bridge_run_free(r);
                        return -ENOMEM;
                }
                r->n_servers++;
        }
        if (egress_run_new(b->egress, network, send_lines, userdata, &r->net) < 0) {
                bridge_run_free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

int bridge_check_network(json_t *network, struct err *e)
{
        return egress_check_grant(network, e);
}

void bridge_run_set_sandbox(struct bridge_run *r, const char *id)
{
        snprintf(r->sandbox, sizeof(r->sandbox), "%s", id ? id : "");
        egress_run_set_names(r->net, r->sandbox, NULL);
}

void bridge_run_set_client(struct bridge_run *r, const char *client)
{
        egress_run_set_names(r->net, NULL, client);
}

json_t *bridge_run_exec_network(const struct bridge_run *r)
{
        return egress_run_exec_params(r->net);
}

json_t *bridge_run_exec_servers(const struct bridge_run *r)
{
        json_t *a = json_array();
        for (size_t i = 0; a && i < r->n_servers; i++) {
                char alias[160];
                alias_of(r->servers[i], alias, sizeof(alias));
                json_array_append_new(
                    a, json_pack("{s:s, s:s}", "name", r->servers[i], "alias", alias));
        }
        return a;
}

static bool run_has(const struct bridge_run *r, const char *name)
{
        for (size_t i = 0; i < r->n_servers; i++)
                if (strcmp(r->servers[i], name) == 0)
                        return true;
        return false;
}

/* ---- answers */

static const char *type_of(int code)
{
        switch (code) {
        case BRIDGE_DENIED:
                return "PolicyDenied";
        case BRIDGE_UNAVAILABLE:
                return "ServerUnavailable";
        case BRIDGE_TIMEOUT:
                return "Timeout";
        case BRIDGE_TOO_LARGE:
                return "TooLarge";
        case BRIDGE_TOO_MANY_CALLS:
                return "TooManyCalls";
        case BRIDGE_NO_TOOL:
                return "ToolNotFound";
        case JRPC_INVALID_PARAMS:
                return "InvalidParams";
        case JRPC_METHOD_NOT_FOUND:
                return "MethodNotFound";
        case JRPC_PARSE_ERROR:
        case JRPC_INVALID_REQUEST:
                return "ProtocolError";
        default:
                return "ServerError";
        }
}

static void flush(void *userdata)
{
        struct bridge_run *r = userdata;
        size_t i;
        json_t *msg;
        json_t *out = r->outbox;
        r->outbox = json_array();
        json_array_foreach(out, i, msg) r->send(r->userdata, json_incref(msg));
        json_decref(out);
}

/* An answer to the sandbox (stolen): sent from the loop, never from inside
 * the call that produced it. */
static void send_later(struct bridge_run *r, json_t *msg)
{
        if (!msg || !r->outbox || json_array_append_new(r->outbox, msg) < 0)
                return;
        loop_defer(r->b->loop, &r->flush_d, flush, r);
}

static void reply_error(struct bridge_run *r, json_t *id, int code, const char *msg)
{
        char text[1100];
        snprintf(text, sizeof(text), "%s", msg);
        utf8_scrub(text);
        send_later(r, jrpc_error(id, code, text, json_pack("{s:s}", "type", type_of(code))));
}

static void audit_ask(struct bridge_run *r, const char *server, const char *tool,
                      size_t argument_bytes, size_t result_bytes, long long t0, bool allowed,
                      const char *error, const char *ask, long long ask_ms)
{
        struct audit_entry en = {
            .sandbox = r->sandbox[0] ? r->sandbox : NULL,
            .server = server,
            .tool = tool,
            .argument_bytes = argument_bytes,
            .result_bytes = result_bytes,
            .duration_ms = t0 ? now_ms() - t0 : 0,
            .allowed = allowed,
            .error = error,
            .ask = ask,
            .ask_ms = ask_ms,
        };
        metrics_bridge(server, !allowed ? "denied" : error ? "error" : "ok");
        if (!allowed && ++r->denials > DENIALS_AUDITED)
                return; /* counted; bridge_run_free writes how many */
        audit_write(r->b->audit, &en);
        if (!allowed)
                log_event(LOG_WARN, "policy", "sandbox %s: denied %s.%s: %s", r->sandbox, server,
                          tool, error ? error : "");
}

static void audit(struct bridge_run *r, const char *server, const char *tool, size_t argument_bytes,
                  size_t result_bytes, long long t0, bool allowed, const char *error)
{
        audit_ask(r, server, tool, argument_bytes, result_bytes, t0, allowed, error, NULL, 0);
}

/* A tools/call's line, with its ask when there was one. */
static void audit_call(struct bcall *c, size_t result_bytes, bool allowed, const char *error)
{
        audit_ask(c->run, upstream_spec(c->u)->name, c->tool, c->argument_bytes, result_bytes,
                  c->t0, allowed, error, c->ask_answer, c->ask_ms);
}

static struct bcall *bcall_new(struct bridge_run *r, enum bcall_kind kind, json_t *id,
                               struct upstream *u)
{
        struct bcall *c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        c->run = r;
        c->kind = kind;
        c->id = json_incref(id);
        c->u = u;
        c->t0 = now_ms();
        list_push(&r->bcalls, &c->node);
        r->in_flight++;
        return c;
}

static void bcall_free(struct bcall *c)
{
        struct bridge_run *r = c->run;
        if (c->ask)
                r->asker->withdraw(c->ask);
        list_del(&c->node);
        r->in_flight--;
        json_decref(c->id);
        json_decref(c->arguments);
        free(c->tool);
        free(c);
}

void bridge_run_set_asker(struct bridge_run *r, const struct bridge_asker *asker)
{
        r->asker = asker;
        egress_run_set_asker(r->net, asker);
}

void bridge_run_free(struct bridge_run *r)
{
        if (!r)
                return;
        while (!list_empty(&r->bcalls)) {
                struct bcall *c = list_first(&r->bcalls, struct bcall, node);
                upstream_call_cancel(c->uc);
                if (c->ask) {
                        c->ask_answer = "withdrawn";
                        c->ask_ms = now_ms() - c->ask_t0;
                }
                if (c->kind == BC_CALL)
                        audit_call(c, 0, true, "withdrawn: the sandbox ended first");
                bcall_free(c);
        }
        if (r->denials > DENIALS_AUDITED) {
                char msg[160];
                snprintf(msg, sizeof(msg), "%ld more refused calls of this run were not written",
                         r->denials - DENIALS_AUDITED);
                r->denials = 0; /* this summary itself is written */
                audit(r, "*", "*", 0, 0, 0, false, msg);
        }
        egress_run_free(r->net);
        defer_cancel(&r->flush_d); /* answers not sent yet go with it */
        json_decref(r->outbox);
        for (size_t i = 0; i < r->n_servers; i++)
                free(r->servers[i]);
        free(r->servers);
        free(r);
}

/* ---- tools/list */

static json_t *allowed_tools(struct bridge_run *r, struct upstream *u, json_t *tools)
{
        const char *server = upstream_spec(u)->name;
        json_t *out = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t)
        {
                const char *name = json_string_value(json_object_get(t, "name"));
                if (name && policy_tool_allowed(r->b->pol, server, name))
                        json_array_append(out, t);
        }
        return out;
}

/* Whether `v` fits in one frame to the sandbox with its envelope: an
 * answer the runtime drops for its size would leave the code waiting. */
static bool fits_frame(const struct bridge_run *r, json_t *v, size_t *ret_len, size_t *ret_room)
{
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        size_t max = r->b->cfg->max_frame;
        *ret_len = text ? strlen(text) : 0;
        *ret_room = max > ENVELOPE ? max - ENVELOPE : 0;
        free(text);
        return *ret_len > 0 && *ret_len <= *ret_room;
}

static void list_ready(void *userdata, json_t *tools, const struct err *e)
{
        struct bcall *c = userdata;
        struct bridge_run *r = c->run;
        c->uc = NULL;
        if (!tools) {
                reply_error(r, c->id, e->code, e->msg);
        } else {
                json_t *list = allowed_tools(r, c->u, tools);
                size_t len, room;
                if (!fits_frame(r, list, &len, &room)) {
                        char msg[300];
                        snprintf(msg, sizeof(msg),
                                 "the tool list of server '%s' is %zu bytes; a frame to the "
                                 "sandbox holds at most %zu (max_frame)",
                                 upstream_spec(c->u)->name, len, room);
                        json_decref(list);
                        reply_error(r, c->id, BRIDGE_TOO_LARGE, msg);
                } else {
                        send_later(r, jrpc_result(c->id, json_pack("{s:o}", "tools", list)));
                }
        }
        bcall_free(c);
}

/* ---- tools/call */

/* "get_sum" finds "get-sum": lower case, without '-' and '_'. */
static void squash(const char *in, char *out, size_t size)
{
        size_t n = 0;
        for (; *in && n + 1 < size; in++)
                if (*in != '-' && *in != '_')
                        out[n++] = (char)tolower((unsigned char)*in);
        out[n] = '\0';
}

/* The tool's real name, NULL when none or several match. */
static const char *resolve_tool(json_t *tools, const char *asked)
{
        size_t i;
        json_t *t;
        const char *found = NULL;
        char want[300], have[300];
        json_array_foreach(tools, i, t)
        {
                const char *name = json_string_value(json_object_get(t, "name"));
                if (name && strcmp(name, asked) == 0)
                        return name;
        }
        squash(asked, want, sizeof(want));
        json_array_foreach(tools, i, t)
        {
                const char *name = json_string_value(json_object_get(t, "name"));
                if (!name)
                        continue;
                squash(name, have, sizeof(have));
                if (strcmp(have, want) == 0) {
                        if (found)
                                return NULL;
                        found = name;
                }
        }
        return found;
}

static void tool_names(json_t *tools, char *out, size_t size)
{
        size_t n = 0, i;
        json_t *t;
        out[0] = '\0';
        json_array_foreach(tools, i, t)
        {
                const char *name = json_string_value(json_object_get(t, "name"));
                int k = snprintf(out + n, size - n, "%s%s", n ? ", " : "", name ? name : "?");
                if (k < 0 || (size_t)k >= size - n) {
                        snprintf(out + (n > size - 6 ? size - 6 : n), 6, ", ...");
                        break;
                }
                n += (size_t)k;
        }
}

static void called(void *userdata, json_t *result, const struct err *e)
{
        struct bcall *c = userdata;
        struct bridge_run *r = c->run;
        const char *server = upstream_spec(c->u)->name;
        c->uc = NULL;
        if (!result) {
                audit_call(c, 0, true, e->msg);
                reply_error(r, c->id, e->code, e->msg);
                bcall_free(c);
                return;
        }
        /* The answer must fit in one frame to the sandbox. */
        size_t len, room;
        if (!fits_frame(r, result, &len, &room)) {
                char msg[300];
                snprintf(msg, sizeof(msg),
                         "the result of %s.%s is %zu bytes; a frame to the sandbox holds at most "
                         "%zu (max_frame)",
                         server, c->tool, len, room);
                audit_call(c, len, true, msg);
                reply_error(r, c->id, BRIDGE_TOO_LARGE, msg);
                bcall_free(c);
                return;
        }
        audit_call(c, len, true,
                   json_is_true(json_object_get(result, "isError")) ? "the tool reported an error"
                                                                    : NULL);
        send_later(r, jrpc_result(c->id, json_incref(result)));
        bcall_free(c);
}

/* Stage three: the call goes to the server. Its time limit counts from
 * the request, less the time a person took to answer. */
static void call_send(struct bcall *c)
{
        struct bridge_run *r = c->run;
        const struct policy_server *ps = policy_server(r->b->pol, upstream_spec(c->u)->name);
        double left = ps->timeout_s - (double)(now_ms() - c->t0 - c->ask_ms) / 1000.0;
        json_t *params = json_pack("{s:s, s:o}", "name", c->tool, "arguments",
                                   c->arguments ? json_incref(c->arguments) : json_object());
        int rc = upstream_request(c->u, "tools/call", params, left > 0.05 ? left : 0.05,
                                  ps->max_result_bytes, called, c, &c->uc);
        if (rc < 0) {
                reply_error(r, c->id, JRPC_INTERNAL_ERROR, strerror(-rc));
                bcall_free(c);
        }
        /* Else `called` answers, perhaps already. */
}

/* The policy said ask and nobody can be: refused, unless the settings
 * explicitly let such calls through. */
static void not_asked(struct bcall *c, const char *why)
{
        struct bridge_run *r = c->run;
        const char *server = upstream_spec(c->u)->name;
        char answer[300], msg[1200];
        snprintf(answer, sizeof(answer), "not asked: %s", why);
        c->ask_answer = answer;
        if (r->b->cfg->ask_allow_unasked) {
                log_event(LOG_WARN, "policy",
                          "sandbox %s: %s.%s called without asking (%s; ask_allow_unasked is on)",
                          r->sandbox, server, c->tool, why);
                c->ask_answer = "not asked: allowed by ask_allow_unasked";
                call_send(c);
                return;
        }
        snprintf(msg, sizeof(msg),
                 "tool '%s' of server '%s' needs a person's approval (the policy's \"ask\"), and "
                 "%s: use an MCP host that supports elicitation, move the tool to \"allow\" in "
                 "the policy, or set ask_allow_unasked to let such calls through unasked",
                 c->tool, server, why);
        audit_call(c, 0, false, msg);
        c->ask_answer = NULL;
        reply_error(r, c->id, BRIDGE_DENIED, msg);
        bcall_free(c);
}

static void answered(void *userdata, enum bridge_answer answer, const char *why)
{
        struct bcall *c = userdata;
        struct bridge_run *r = c->run;
        c->ask = NULL;
        c->ask_ms = now_ms() - c->ask_t0;
        c->ask_answer = bridge_answer_name(answer);
        if (answer == BRIDGE_ACCEPTED) {
                call_send(c);
                return;
        }
        char msg[1200];
        const char *server = upstream_spec(c->u)->name;
        if (answer == BRIDGE_DECLINED)
                snprintf(msg, sizeof(msg), "the user declined the call of %s.%s", server, c->tool);
        else if (answer == BRIDGE_CANCELLED)
                snprintf(msg, sizeof(msg), "the user dismissed the request to call %s.%s", server,
                         c->tool);
        else if (answer == BRIDGE_TIMED_OUT)
                snprintf(msg, sizeof(msg),
                         "nobody approved the call of %s.%s within ask_timeout_s (%g s)", server,
                         c->tool, r->b->cfg->ask_timeout_s);
        else
                snprintf(msg, sizeof(msg), "the call of %s.%s was not approved: %s", server,
                         c->tool, why ? why : "the MCP client gave no answer");
        audit_call(c, 0, false, msg);
        reply_error(r, c->id, BRIDGE_DENIED, msg);
        bcall_free(c);
}

/* The policy says ask: the question to the person, through the client.
 * The arguments are the sandboxed code's own text, so they must not shape
 * the question around them: they go in a fenced block they cannot close,
 * on one line (JSON has its newlines escaped), with every character that
 * breaks a line, reorders text or draws as nothing shown as a \u escape
 * (core/buf.h, buf_append_fenced), and all that corral says is outside
 * the block. The tool's name is the upstream server's: shown escaped too. */
static void ask_person(struct bcall *c)
{
        struct bridge_run *r = c->run;
        if (!r->asker) {
                not_asked(c, "this run has no MCP client to ask");
                return;
        }
        const char *server = upstream_spec(c->u)->name;
        _cleanup_free_ char *args =
            c->arguments ? json_dumps(c->arguments, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        /* Arguments may hold the user's secrets: masked whole, then cut. */
        _cleanup_free_ char *shown =
            upstream_mask(r->b->ups, args ? args : "{}", ASK_ARGUMENTS_SHOWN);
        /* An escape is at most six bytes for one (\u001b), and a fence at
         * most one longer than a run of backticks, which stay: eight bytes
         * for each one shown is room enough. */
        struct buf block, tool, msg;
        buf_init(&block, 8 * ASK_ARGUMENTS_SHOWN + 16);
        buf_init(&tool, 1024);
        buf_init(&msg, 9 * ASK_ARGUMENTS_SHOWN + 1024);
        size_t escaped = 0;
        if (!shown || buf_append_fenced(&block, shown, strlen(shown), SHOWN_JSON, &escaped) < 0)
                buf_append(&block, "(withheld)\n", 11);
        buf_append_shown(&tool, c->tool, strlen(c->tool));
        char head[1400], count[80] = "";
        if (escaped)
                snprintf(count, sizeof(count), "; %zu character%s shown as \\u escapes", escaped,
                         escaped == 1 ? "" : "s");
        snprintf(head, sizeof(head),
                 "Code running in sandbox %s asks to call the tool %s of the MCP server %s, "
                 "with these arguments (%zu bytes%s%s):\n",
                 r->sandbox[0] ? r->sandbox : "(starting)", buf_str(&tool), server,
                 c->argument_bytes,
                 shown && strlen(shown) < c->argument_bytes ? ", shown in part" : "", count);
        buf_append_some(&msg, head, strlen(head));
        buf_append_some(&msg, block.data, block.len);
        buf_append_some(&msg, "\nAllow this one call?", 21);
        buf_free(&block);
        buf_free(&tool);
        c->ask_t0 = now_ms();
        int rc = r->asker->ask(r->asker->ud, buf_str(&msg), answered, c, &c->ask);
        buf_free(&msg);
        if (rc == -ENOTSUP) {
                c->ask = NULL;
                not_asked(c, "the MCP client cannot be asked (it did not offer elicitation)");
        } else if (rc < 0) {
                c->ask = NULL;
                not_asked(c, strerror(-rc));
        }
}

/* Stage two: the server is up and its tools are known. */
static void call_ready(void *userdata, json_t *tools, const struct err *e)
{
        struct bcall *c = userdata;
        struct bridge_run *r = c->run;
        const char *server = upstream_spec(c->u)->name;
        char msg[1200];
        c->uc = NULL;
        if (!tools) {
                audit(r, server, c->tool, c->argument_bytes, 0, c->t0, true, e->msg);
                reply_error(r, c->id, e->code, e->msg);
                bcall_free(c);
                return;
        }
        const char *real = resolve_tool(tools, c->tool);
        if (!real) {
                char names[800];
                tool_names(tools, names, sizeof(names));
                snprintf(msg, sizeof(msg), "server '%s' has no tool '%.100s' (it has: %s)", server,
                         c->tool, names);
                audit(r, server, c->tool, c->argument_bytes, 0, c->t0, true, msg);
                reply_error(r, c->id, BRIDGE_NO_TOOL, msg);
                bcall_free(c);
                return;
        }
        char *name = strdup(real);
        if (!name) {
                reply_error(r, c->id, JRPC_INTERNAL_ERROR, "out of memory");
                bcall_free(c);
                return;
        }
        free(c->tool);
        c->tool = name;
        enum policy_decision d = policy_tool_decision(r->b->pol, server, name);
        if (d == POLICY_DENY) {
                snprintf(msg, sizeof(msg), "the policy does not allow tool '%s' of server '%s'",
                         name, server);
                audit(r, server, name, c->argument_bytes, 0, c->t0, false, msg);
                reply_error(r, c->id, BRIDGE_DENIED, msg);
                bcall_free(c);
                return;
        }
        if (d == POLICY_ASK)
                ask_person(c);
        else
                call_send(c);
}

static void handle_call(struct bridge_run *r, json_t *id, json_t *params)
{
        struct bridge *b = r->b;
        const char *server = json_string_value(json_object_get(params, "server"));
        const char *tool = json_string_value(json_object_get(params, "name"));
        json_t *args = json_object_get(params, "arguments");
        char msg[1200];
        if (!server || !tool || (args && !json_is_object(args)) || strlen(tool) > 256 ||
            strlen(server) > 256) {
                reply_error(r, id, JRPC_INVALID_PARAMS,
                            "tools/call needs \"server\" and \"name\" strings and an object of "
                            "\"arguments\"");
                return;
        }
        if (!run_has(r, server)) {
                char known[600] = "";
                size_t n = 0;
                for (size_t i = 0; i < r->n_servers && n < sizeof(known); i++) {
                        int k = snprintf(known + n, sizeof(known) - n, "%s%s", i ? ", " : "",
                                         r->servers[i]);
                        if (k > 0)
                                n += (size_t)k;
                }
                snprintf(msg, sizeof(msg),
                         "server '%.100s' is not available to this run (it may call: %s); name "
                         "it in run_python's \"servers\"",
                         server, r->n_servers ? known : "no servers");
                audit(r, server, tool, 0, 0, 0, false, msg);
                reply_error(r, id, BRIDGE_DENIED, msg);
                return;
        }
        struct upstream *u = upstream_get(b->ups, server);
        const struct policy_server *ps = policy_server(b->pol, server);
        char *text = args ? json_dumps(args, JSON_COMPACT) : NULL;
        size_t arg_bytes = text ? strlen(text) : 2;
        free(text);
        if (r->calls >= policy_max_calls(b->pol)) {
                snprintf(msg, sizeof(msg), "this run made its %ld tool calls, the policy's limit",
                         policy_max_calls(b->pol));
                audit(r, server, tool, arg_bytes, 0, 0, false, msg);
                reply_error(r, id, BRIDGE_TOO_MANY_CALLS, msg);
                return;
        }
        if (r->in_flight >= policy_max_concurrent(b->pol)) {
                snprintf(msg, sizeof(msg),
                         "%ld requests of this run are in flight, the policy's limit; wait for "
                         "some to finish",
                         r->in_flight);
                audit(r, server, tool, arg_bytes, 0, 0, false, msg);
                reply_error(r, id, BRIDGE_TOO_MANY_CALLS, msg);
                return;
        }
        r->calls++;
        if (arg_bytes > ps->max_argument_bytes) {
                snprintf(msg, sizeof(msg),
                         "the arguments of %s.%.100s are %zu bytes; the policy allows %llu", server,
                         tool, arg_bytes, ps->max_argument_bytes);
                audit(r, server, tool, arg_bytes, 0, 0, false, msg);
                reply_error(r, id, BRIDGE_TOO_LARGE, msg);
                return;
        }
        struct bcall *c = bcall_new(r, BC_CALL, id, u);
        if (!c || !(c->tool = strdup(tool))) {
                if (c)
                        bcall_free(c);
                reply_error(r, id, JRPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        c->arguments = json_incref(args);
        c->argument_bytes = arg_bytes;
        int rc = upstream_when_ready(u, ps->timeout_s, call_ready, c, &c->uc);
        if (rc < 0) {
                reply_error(r, id, JRPC_INTERNAL_ERROR, strerror(-rc));
                bcall_free(c);
        }
}

static void handle_list(struct bridge_run *r, json_t *id, json_t *params)
{
        const char *server = json_string_value(json_object_get(params, "server"));
        char msg[400];
        if (!server) {
                reply_error(r, id, JRPC_INVALID_PARAMS, "tools/list needs a \"server\" string");
                return;
        }
        if (!run_has(r, server)) {
                snprintf(msg, sizeof(msg), "server '%.100s' is not available to this run", server);
                reply_error(r, id, BRIDGE_DENIED, msg);
                return;
        }
        if (r->in_flight >= policy_max_concurrent(r->b->pol)) {
                reply_error(r, id, BRIDGE_TOO_MANY_CALLS,
                            "too many requests of this run are in flight");
                return;
        }
        struct upstream *u = upstream_get(r->b->ups, server);
        struct bcall *c = bcall_new(r, BC_LIST, id, u);
        if (!c) {
                reply_error(r, id, JRPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        int rc = upstream_when_ready(u, policy_server(r->b->pol, server)->timeout_s, list_ready, c,
                                     &c->uc);
        if (rc < 0) {
                reply_error(r, id, JRPC_INTERNAL_ERROR, strerror(-rc));
                bcall_free(c);
        }
}

static void handle_servers(struct bridge_run *r, json_t *id)
{
        json_t *list = json_array();
        for (size_t i = 0; list && i < r->n_servers; i++) {
                struct upstream *u = upstream_get(r->b->ups, r->servers[i]);
                json_t *d = upstream_describe(u);
                char alias[160];
                alias_of(r->servers[i], alias, sizeof(alias));
                json_object_set_new(d, "alias", json_string(alias));
                json_object_del(d, "source"); /* host paths are not the sandbox's business */
                json_array_append_new(list, d);
        }
        send_later(r, jrpc_result(id, json_pack("{s:o}", "servers", list)));
}

static void handle_cancel(struct bridge_run *r, json_t *params)
{
        json_t *rid = json_object_get(params, "requestId");
        struct bcall *c;
        if (!rid)
                return;
        list_for_each(c, &r->bcalls, node)
        {
                if (json_equal(c->id, rid)) {
                        upstream_call_cancel(c->uc);
                        if (c->kind == BC_CALL)
                                audit(r, upstream_spec(c->u)->name, c->tool, c->argument_bytes, 0,
                                      c->t0, true, "cancelled by the sandbox");
                        bcall_free(c);
                        return;
                }
        }
}

void bridge_run_handle(struct bridge_run *r, const struct jrpc_msg *m)
{
        if (m->kind == JRPC_NOTIFICATION) {
                if (strcmp(m->method, "notifications/cancelled") == 0)
                        handle_cancel(r, m->params);
                else if (strncmp(m->method, "net/", 4) == 0 && json_is_object(m->params))
                        egress_run_frame(r->net, m->method, m->params);
                return;
        }
        if (m->kind != JRPC_REQUEST)
                return;
        if (m->params && !json_is_object(m->params)) {
                reply_error(r, m->id, JRPC_INVALID_PARAMS, "params must be an object");
                return;
        }
        if (!r->b->ups) {
                reply_error(r, m->id, BRIDGE_UNAVAILABLE, "the bridge is not running");
                return;
        }
        if (strcmp(m->method, "tools/call") == 0) {
                handle_call(r, m->id, m->params);
        } else if (strcmp(m->method, "tools/list") == 0) {
                handle_list(r, m->id, m->params);
        } else if (strcmp(m->method, "servers/list") == 0) {
                handle_servers(r, m->id);
        } else {
                char msg[200];
                snprintf(msg, sizeof(msg), "method not found: %.100s", m->method);
                reply_error(r, m->id, JRPC_METHOD_NOT_FOUND, msg);
        }
}
