#include "bridge/policy.h"

#include "bridge/netrules.h"

#include "core/buf.h"
#include "upstream/registry.h"

#include <ctype.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE     (1 << 20) /* bytes of a policy file */
#define MAX_GLOBS    256       /* entries of allow or deny */
#define MAX_GLOB_LEN 256
#define MAX_SERVERS  1024 /* server entries, all files together */

/* The fields of a server entry, as bits of what a file set. */
enum {
        F_ENABLED = 1 << 0,
        F_ALLOW = 1 << 1,
        F_DENY = 1 << 2,
        F_TIMEOUT = 1 << 3,
        F_MAX_ARG = 1 << 4,
        F_MAX_RESULT = 1 << 5,
        F_ASK = 1 << 6,
        F_ALL = (1 << 7) - 1,
};

struct rules {
        char *name;
        unsigned set;             /* the F_* some file gave for this entry */
        struct policy_server own; /* those fields (owns allow and deny) */
        struct policy_server eff; /* own over "*": what policy_server returns (borrows) */
};

struct policy {
        long max_calls;
        long max_concurrent;
        bool have_max_calls, have_max_concurrent;
        struct rules star;
        struct rules *v;
        size_t n;
        char *source; /* the user's file that was read, or NULL: the default alone */
        /* "network": host globs (host or host:port) and the special
         * addresses that may be reached all the same. */
        char **net_allow, **net_ask, **net_deny;
        struct net_range *net_addresses;
        size_t n_net_addresses;
        bool have_network;
};

static void rules_free(struct rules *r)
{
        free(r->name);
        strv_free(r->own.allow);
        strv_free(r->own.deny);
        strv_free(r->own.ask);
        *r = (struct rules){0};
}

void policy_free(struct policy *p)
{
        if (!p)
                return;
        rules_free(&p->star);
        for (size_t i = 0; i < p->n; i++)
                rules_free(&p->v[i]);
        free(p->v);
        free(p->source);
        strv_free(p->net_allow);
        strv_free(p->net_ask);
        strv_free(p->net_deny);
        free(p->net_addresses);
        free(p);
}

static int get_integer(json_t *v, long long min, long long max, long long *ret, const char *label,
                       const char *path, struct err *e)
{
        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
                return err_set(e, ERR_CONFIG, EINVAL,
                               "%s: %s: must be an integer from %lld to %lld", label, path, min,
                               max);
        *ret = json_integer_value(v);
        return 0;
}

static int get_globs(json_t *v, char ***ret, const char *label, const char *path, struct err *e)
{
        if (!json_is_array(v))
                return err_set(e, ERR_CONFIG, EINVAL, "%s: %s: must be an array of glob strings",
                               label, path);
        size_t n = json_array_size(v);
        if (n > MAX_GLOBS)
                return err_set(e, ERR_CONFIG, EINVAL, "%s: %s: more than %d patterns", label, path,
                               MAX_GLOBS);
        char **globs = calloc(n + 1, sizeof(char *));
        if (!globs)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                json_t *g = json_array_get(v, i);
                if (!json_is_string(g) || json_string_length(g) == 0 ||
                    json_string_length(g) > MAX_GLOB_LEN) {
                        strv_free(globs);
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "%s: %s[%zu]: must be a glob of 1 to %d characters", label,
                                       path, i, MAX_GLOB_LEN);
                }
                if (!(globs[i] = strdup(json_string_value(g)))) {
                        strv_free(globs);
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                }
        }
        *ret = globs;
        return 0;
}

static int rules_get(struct policy *p, const char *name, struct rules **ret, const char *label,
                     struct err *e)
{
        if (strcmp(name, "*") == 0) {
                *ret = &p->star;
                return 0;
        }
        for (size_t i = 0; i < p->n; i++)
                if (strcmp(p->v[i].name, name) == 0) {
                        *ret = &p->v[i];
                        return 0;
                }
        if (p->n >= MAX_SERVERS)
                return err_set(e, ERR_CONFIG, EINVAL, "%s: servers: more than %d entries", label,
                               MAX_SERVERS);
        struct rules *v = realloc(p->v, (p->n + 1) * sizeof(*v));
        if (!v)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        p->v = v;
        v[p->n] = (struct rules){.name = strdup(name)};
        if (!v[p->n].name)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        *ret = &v[p->n++];
        return 0;
}

/* One server entry of a file over what earlier files said: each field it
 * names replaces that field, the others stay. */
static int parse_server(struct policy *p, const char *name, json_t *obj, const char *label,
                        struct err *e)
{
        if (strcmp(name, "*") != 0 && !registry_name_valid(name)) {
                char shown[80];
                str_printable(name, shown, sizeof(shown));
                return err_set(e, ERR_CONFIG, EINVAL,
                               "%s: servers.%s: not a server name (1 to %d of A-Z a-z 0-9 _ . -) "
                               "nor \"*\"",
                               label, shown, REGISTRY_MAX_NAME);
        }
        if (!json_is_object(obj))
                return err_set(e, ERR_CONFIG, EINVAL, "%s: servers.%s: must be an object", label,
                               name);
        struct rules *r = NULL;
        int rc = rules_get(p, name, &r, label, e);
        if (rc < 0)
                return rc;
        const char *key;
        json_t *v;
        json_object_foreach(obj, key, v)
        {
                char shown[80], path[200];
                long long n;
                str_printable(key, shown, sizeof(shown));
                snprintf(path, sizeof(path), "servers.%s.%s", name, shown);
                if (strcmp(key, "enabled") == 0) {
                        if (!json_is_boolean(v))
                                return err_set(e, ERR_CONFIG, EINVAL,
                                               "%s: %s: must be true or false", label, path);
                        r->own.enabled = json_is_true(v);
                        r->set |= F_ENABLED;
                } else if (strcmp(key, "allow") == 0 || strcmp(key, "deny") == 0 ||
                           strcmp(key, "ask") == 0) {
                        char **globs = NULL;
                        if ((rc = get_globs(v, &globs, label, path, e)) < 0)
                                return rc;
                        char ***field = strcmp(key, "allow") == 0  ? &r->own.allow
                                        : strcmp(key, "deny") == 0 ? &r->own.deny
                                                                   : &r->own.ask;
                        strv_free(*field);
                        *field = globs;
                        r->set |= strcmp(key, "allow") == 0  ? F_ALLOW
                                  : strcmp(key, "deny") == 0 ? F_DENY
                                                             : F_ASK;
                } else if (strcmp(key, "timeout_s") == 0) {
                        double t = json_number_value(v);
                        if (!json_is_number(v) || !isfinite(t) || t < 0.1 || t > 86400)
                                return err_set(e, ERR_CONFIG, EINVAL,
                                               "%s: %s: must be a number from 0.1 to 86400", label,
                                               path);
                        r->own.timeout_s = t;
                        r->set |= F_TIMEOUT;
                } else if (strcmp(key, "max_argument_bytes") == 0) {
                        if ((rc = get_integer(v, 1024, 1LL << 30, &n, label, path, e)) < 0)
                                return rc;
                        r->own.max_argument_bytes = (unsigned long long)n;
                        r->set |= F_MAX_ARG;
                } else if (strcmp(key, "max_result_bytes") == 0) {
                        if ((rc = get_integer(v, 1024, 1LL << 30, &n, label, path, e)) < 0)
                                return rc;
                        r->own.max_result_bytes = (unsigned long long)n;
                        r->set |= F_MAX_RESULT;
                } else {
                        /* A misspelt key must not silently leave a tool
                         * allowed. */
                        return err_set(e, ERR_CONFIG, EINVAL, "%s: %s: unknown key", label, path);
                }
        }
        return 0;
}

/* "network": {allow, ask, deny, addresses}, replacing the whole section
 * of earlier files: a key left out is empty. (Key by key, the default's
 * `"ask": ["*"]` would catch every host a user's `allow` names.) */
static int parse_network(struct policy *p, json_t *obj, const char *label, struct err *e)
{
        if (!json_is_object(obj))
                return err_set(e, ERR_CONFIG, EINVAL,
                               "%s: network: must be an object (allow, ask, deny, addresses)",
                               label);
        char ***lists[] = {&p->net_allow, &p->net_ask, &p->net_deny};
        for (size_t i = 0; i < ARRAY_SIZE(lists); i++) {
                strv_free(*lists[i]);
                *lists[i] = calloc(1, sizeof(char *));
                if (!*lists[i])
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        free(p->net_addresses);
        p->net_addresses = NULL;
        p->n_net_addresses = 0;
        const char *key;
        json_t *v;
        json_object_foreach(obj, key, v)
        {
                char shown[80], path[120];
                int r;
                str_printable(key, shown, sizeof(shown));
                snprintf(path, sizeof(path), "network.%s", shown);
                if (strcmp(key, "allow") == 0 || strcmp(key, "ask") == 0 ||
                    strcmp(key, "deny") == 0) {
                        char **globs = NULL;
                        if ((r = get_globs(v, &globs, label, path, e)) < 0)
                                return r;
                        for (size_t i = 0; globs[i]; i++) {
                                char host[NET_HOST_MAX + 4];
                                int port;
                                const char *why;
                                if (net_pattern_parse(globs[i], true, host, sizeof(host), &port,
                                                      &why) < 0) {
                                        char g[80];
                                        str_printable(globs[i], g, sizeof(g));
                                        strv_free(globs);
                                        return err_set(e, ERR_CONFIG, EINVAL,
                                                       "%s: %s[%zu]: \"%s\": %s", label, path, i, g,
                                                       why);
                                }
                        }
                        char ***field = strcmp(key, "allow") == 0 ? &p->net_allow
                                        : strcmp(key, "ask") == 0 ? &p->net_ask
                                                                  : &p->net_deny;
                        strv_free(*field);
                        *field = globs;
                } else if (strcmp(key, "addresses") == 0) {
                        size_t n = json_array_size(v);
                        if (!json_is_array(v) || n > MAX_GLOBS)
                                return err_set(e, ERR_CONFIG, EINVAL,
                                               "%s: %s: must be an array of at most %d addresses "
                                               "or ranges (\"127.0.0.1\", \"10.0.0.0/8\")",
                                               label, path, MAX_GLOBS);
                        struct net_range *ranges = calloc(n + 1, sizeof(*ranges));
                        if (!ranges)
                                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                        for (size_t i = 0; i < n; i++) {
                                const char *a = json_string_value(json_array_get(v, i));
                                if (!a || net_range_parse(a, &ranges[i]) < 0) {
                                        free(ranges);
                                        return err_set(e, ERR_CONFIG, EINVAL,
                                                       "%s: %s[%zu]: not an IP address or "
                                                       "address/bits",
                                                       label, path, i);
                                }
                        }
                        free(p->net_addresses);
                        p->net_addresses = ranges;
                        p->n_net_addresses = n;
                } else {
                        return err_set(e, ERR_CONFIG, EINVAL, "%s: %s: unknown key", label, path);
                }
        }
        p->have_network = true;
        return 0;
}

static int parse_layer(struct policy *p, json_t *root, const char *label, struct err *e)
{
        if (!json_is_object(root))
                return err_set(e, ERR_CONFIG, EINVAL, "%s: top level must be a JSON object", label);
        const char *key;
        json_t *v;
        json_object_foreach(root, key, v)
        {
                long long n;
                int r = 0;
                if (strcmp(key, "version") == 0) {
                        if (!json_is_integer(v) || json_integer_value(v) != 1)
                                return err_set(e, ERR_CONFIG, EINVAL,
                                               "%s: version: must be 1 (the only format corral "
                                               "knows)",
                                               label);
                } else if (strcmp(key, "max_calls_per_run") == 0) {
                        if ((r = get_integer(v, 1, 1000000, &n, label, key, e)) < 0)
                                return r;
                        p->max_calls = (long)n;
                        p->have_max_calls = true;
                } else if (strcmp(key, "max_concurrent_calls") == 0) {
                        if ((r = get_integer(v, 1, 1024, &n, label, key, e)) < 0)
                                return r;
                        p->max_concurrent = (long)n;
                        p->have_max_concurrent = true;
                } else if (strcmp(key, "network") == 0) {
                        if ((r = parse_network(p, v, label, e)) < 0)
                                return r;
                } else if (strcmp(key, "servers") == 0) {
                        if (!json_is_object(v))
                                return err_set(e, ERR_CONFIG, EINVAL,
                                               "%s: servers: must be an object of servers by name",
                                               label);
                        const char *name;
                        json_t *s;
                        json_object_foreach(v, name, s)
                        {
                                if ((r = parse_server(p, name, s, label, e)) < 0)
                                        return r;
                        }
                } else {
                        char shown[80];
                        str_printable(key, shown, sizeof(shown));
                        return err_set(e, ERR_CONFIG, EINVAL, "%s: %s: unknown key", label, shown);
                }
        }
        return 0;
}

static int parse_text(struct policy *p, const char *text, size_t len, const char *label,
                      struct err *e)
{
        json_error_t jerr;
        json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                return err_set(e, ERR_CONFIG, EINVAL, "%s:%d:%d: %s", label, jerr.line, jerr.column,
                               jerr.text);
        int r = parse_layer(p, root, label, e);
        json_decref(root);
        return r;
}

/* The user's file, bounded; -ENOENT (and no message) when missing. */
static int read_policy_file(const char *path, struct buf *b, struct err *e)
{
        int r = buf_read_file(path, MAX_FILE, b);
        if (r == -ENOENT || r == 0)
                return r;
        if (r == -EFBIG)
                return err_set(e, ERR_CONFIG, EFBIG, "%s: policy file larger than %d MiB", path,
                               MAX_FILE >> 20);
        if (r == -EINVAL)
                return err_set(e, ERR_CONFIG, EINVAL, "policy file %s is not a regular file", path);
        return err_set(e, ERR_CONFIG, -r, "cannot read policy file %s: %s", path, strerror(-r));
}

static const char *const field_names[] = {
    "enabled", "allow", "deny", "timeout_s", "max_argument_bytes", "max_result_bytes", "ask",
};

/* What each entry holds in effect: its own fields, the rest from "*". */
static void resolve(struct policy *p)
{
        p->star.eff = p->star.own;
        for (size_t i = 0; i < p->n; i++) {
                struct rules *r = &p->v[i];
                r->eff = p->star.own;
                if (r->set & F_ENABLED)
                        r->eff.enabled = r->own.enabled;
                if (r->set & F_ALLOW)
                        r->eff.allow = r->own.allow;
                if (r->set & F_DENY)
                        r->eff.deny = r->own.deny;
                if (r->set & F_TIMEOUT)
                        r->eff.timeout_s = r->own.timeout_s;
                if (r->set & F_MAX_ARG)
                        r->eff.max_argument_bytes = r->own.max_argument_bytes;
                if (r->set & F_MAX_RESULT)
                        r->eff.max_result_bytes = r->own.max_result_bytes;
                if (r->set & F_ASK)
                        r->eff.ask = r->own.ask;
        }
}

int policy_load(const char *default_text, const char *user_path, bool required, struct policy **ret,
                struct err *e)
{
        static const char default_label[] = "default policy";
        if (!default_text)
                return err_set(e, ERR_INTERNAL, EINVAL, "%s: missing", default_label);
        struct policy *p = calloc(1, sizeof(*p));
        if (!p)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        int r = parse_text(p, default_text, strlen(default_text), default_label, e);
        /* Every field must have a value before any user file: the default
         * is what a missing key means. */
        if (r == 0 && !p->have_max_calls)
                r = err_set(e, ERR_CONFIG, EINVAL, "%s: max_calls_per_run: missing", default_label);
        if (r == 0 && !p->have_max_concurrent)
                r = err_set(e, ERR_CONFIG, EINVAL, "%s: max_concurrent_calls: missing",
                            default_label);
        for (size_t i = 0; r == 0 && i < ARRAY_SIZE(field_names); i++)
                if (!(p->star.set & (1u << i)))
                        r = err_set(e, ERR_CONFIG, EINVAL, "%s: servers.*.%s: missing",
                                    default_label, field_names[i]);
        if (r == 0 && (!p->have_network || !p->net_allow || !p->net_ask || !p->net_deny))
                r = err_set(e, ERR_CONFIG, EINVAL, "%s: network: allow, ask and deny: missing",
                            default_label);
        if (r == 0 && user_path) {
                struct buf b = {0};
                r = read_policy_file(user_path, &b, e);
                if (r == -ENOENT && !required) {
                        r = 0;
                } else if (r == -ENOENT) {
                        r = err_set(e, ERR_CONFIG, ENOENT, "cannot read policy file %s: %s",
                                    user_path, strerror(ENOENT));
                } else if (r == 0) {
                        r = parse_text(p, b.data ? b.data : "", b.len, user_path, e);
                        buf_free(&b);
                        if (r == 0 && !(p->source = strdup(user_path)))
                                r = err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                }
        }
        if (r < 0) {
                policy_free(p);
                return r;
        }
        resolve(p);
        *ret = p;
        return 0;
}

const char *policy_source(const struct policy *p)
{
        return p->source;
}

const char *policy_source_name(const struct policy *p)
{
        return p->source ? p->source : "built-in default";
}

const struct policy_server *policy_server(const struct policy *p, const char *server)
{
        for (size_t i = 0; server && i < p->n; i++)
                if (strcmp(p->v[i].name, server) == 0)
                        return &p->v[i].eff;
        return &p->star.eff;
}

static bool matches_any(char **globs, const char *tool)
{
        for (size_t i = 0; globs && globs[i]; i++)
                if (fnmatch(globs[i], tool, 0) == 0)
                        return true;
        return false;
}

enum policy_decision policy_tool_decision(const struct policy *p, const char *server,
                                          const char *tool)
{
        const struct policy_server *s = policy_server(p, server);
        if (!tool || !s->enabled || matches_any(s->deny, tool))
                return POLICY_DENY;
        if (matches_any(s->ask, tool))
                return POLICY_ASK;
        return matches_any(s->allow, tool) ? POLICY_ALLOW : POLICY_DENY;
}

bool policy_tool_allowed(const struct policy *p, const char *server, const char *tool)
{
        return policy_tool_decision(p, server, tool) != POLICY_DENY;
}

long policy_max_calls(const struct policy *p)
{
        return p->max_calls;
}

long policy_max_concurrent(const struct policy *p)
{
        return p->max_concurrent;
}

static void globs_text(char **globs, char *out, size_t size, size_t *k)
{
        if (*k >= size)
                return;
        *k += (size_t)snprintf(out + *k, size - *k, "[");
        for (size_t i = 0; globs && globs[i] && *k < size; i++)
                *k += (size_t)snprintf(out + *k, size - *k, "%s%s", i ? ", " : "", globs[i]);
        if (*k < size)
                *k += (size_t)snprintf(out + *k, size - *k, "]");
}

void policy_network_text(const struct policy *p, char *out, size_t size)
{
        size_t k = 0;
        out[0] = '\0';
        k += (size_t)snprintf(out, size, "deny ");
        globs_text(p->net_deny, out, size, &k);
        if (k < size)
                k += (size_t)snprintf(out + k, size - k, ", ask ");
        globs_text(p->net_ask, out, size, &k);
        if (k < size)
                k += (size_t)snprintf(out + k, size - k, ", allow ");
        globs_text(p->net_allow, out, size, &k);
        if (k < size)
                k += (size_t)snprintf(out + k, size - k, "; %zu special address range(s) allowed",
                                      p->n_net_addresses);
}

enum policy_decision policy_network_decision(const struct policy *p, const char *host, int port)
{
        for (char **g = p->net_deny; g && *g; g++)
                if (net_pattern_match(*g, host, port, NULL, 0))
                        return POLICY_DENY;
        for (char **g = p->net_ask; g && *g; g++)
                if (net_pattern_match(*g, host, port, NULL, 0))
                        return POLICY_ASK;
        for (char **g = p->net_allow; g && *g; g++)
                if (net_pattern_match(*g, host, port, NULL, 0))
                        return POLICY_ALLOW;
        return POLICY_DENY;
}

bool policy_network_address_ok(const struct policy *p, const struct sockaddr *sa)
{
        for (size_t i = 0; i < p->n_net_addresses; i++)
                if (net_range_contains(&p->net_addresses[i], sa))
                        return true;
        return false;
}
