#include "core/config.h"

#include "core/buf.h"
#include "runtime/protocol.h"
#include "upstream/registry.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum key_type { K_STRING, K_SIZE, K_LONG, K_DOUBLE, K_LEVEL, K_BOOL, K_LIST };

#define LIST_MAX 64 /* items of a list setting */

static const struct config_key {
        const char *name;
        enum key_type type;
        size_t offset;
        double min, max; /* for numbers and sizes */
} keys[] = {
    {"engine", K_STRING, offsetof(struct config, engine), 0, 0},
    {"image", K_STRING, offsetof(struct config, image), 0, 0},
    {"images", K_LIST, offsetof(struct config, images), 0, 0},
    {"mounts", K_LIST, offsetof(struct config, mounts), 0, 0},
    {"mounts_unsafe", K_BOOL, offsetof(struct config, mounts_unsafe), 0, 0},
    {"preload", K_LIST, offsetof(struct config, preload), 0, 0},
    {"memory_merge", K_BOOL, offsetof(struct config, memory_merge), 0, 0},
    {"memory", K_SIZE, offsetof(struct config, memory), 6 << 20, 1e15},
    {"pids", K_LONG, offsetof(struct config, pids), 8, 1 << 22},
    {"cpus", K_DOUBLE, offsetof(struct config, cpus), 0.01, 1024},
    {"timeout_s", K_DOUBLE, offsetof(struct config, timeout_s), 0.1, 86400},
    {"max_timeout_s", K_DOUBLE, offsetof(struct config, max_timeout_s), 0.1, 86400},
    {"start_timeout_s", K_DOUBLE, offsetof(struct config, start_timeout_s), 1, 3600},
    {"output_limit", K_SIZE, offsetof(struct config, output_limit), 1024, 1 << 30},
    {"result_max_chars", K_LONG, offsetof(struct config, result_max_chars), 1000, 1 << 24},
    {"result_keep_s", K_DOUBLE, offsetof(struct config, result_keep_s), 0, 7 * 86400},
    {"result_store_max", K_SIZE, offsetof(struct config, result_store_max), 0, 1e13},
    {"max_frame", K_SIZE, offsetof(struct config, max_frame), RT_MIN_MAX_FRAME, 1 << 30},
    {"tmp_size", K_SIZE, offsetof(struct config, tmp_size), 1 << 20, 1e13},
    {"workspace_size", K_SIZE, offsetof(struct config, workspace_size), 1 << 20, 1e13},
    {"shm_size", K_SIZE, offsetof(struct config, shm_size), 1 << 20, 1e13},
    {"max_sandboxes", K_LONG, offsetof(struct config, max_sandboxes), 1, 4096},
    {"max_queue", K_LONG, offsetof(struct config, max_queue), 0, 1 << 20},
    {"pool_min", K_LONG, offsetof(struct config, pool_min), 0, 4096},
    {"pool_max", K_LONG, offsetof(struct config, pool_max), 0, 4096},
    {"pool_max_starting", K_LONG, offsetof(struct config, pool_max_starting), 1, 256},
    {"pool_idle_s", K_DOUBLE, offsetof(struct config, pool_idle_s), 1, 86400},
    {"pool_memory", K_SIZE, offsetof(struct config, pool_memory), 1 << 20, 1e15},
    {"sync_wait_s", K_DOUBLE, offsetof(struct config, sync_wait_s), 0, 86400},
    {"job_retention_s", K_DOUBLE, offsetof(struct config, job_retention_s), 1, 7 * 86400},
    {"max_sessions", K_LONG, offsetof(struct config, max_sessions), 0, 4096},
    {"session_idle_s", K_DOUBLE, offsetof(struct config, session_idle_s), 1, 30 * 86400},
    {"session_max_s", K_DOUBLE, offsetof(struct config, session_max_s), 1, 30 * 86400},
    {"session_hibernate", K_BOOL, offsetof(struct config, session_hibernate), 0, 0},
    {"session_store", K_STRING, offsetof(struct config, session_store), 0, 0},
    {"session_store_max", K_SIZE, offsetof(struct config, session_store_max), 1 << 20, 1e15},
    {"session_keep_s", K_DOUBLE, offsetof(struct config, session_keep_s), 60, 365 * 86400},
    {"file_max_bytes", K_SIZE, offsetof(struct config, file_max_bytes), 1024, 1 << 30},
    {"out_max_bytes", K_SIZE, offsetof(struct config, out_max_bytes), 0, 1 << 30},
    {"log_level", K_LEVEL, offsetof(struct config, log_level), 0, 0},
    {"host_servers", K_BOOL, offsetof(struct config, host_servers), 0, 0},
    {"project_servers", K_LIST, offsetof(struct config, project_servers), 0, 0},
    {"policy", K_STRING, offsetof(struct config, policy), 0, 0},
    {"audit_log", K_STRING, offsetof(struct config, audit_log), 0, 0},
    {"seccomp", K_STRING, offsetof(struct config, seccomp), 0, 0},
    {"runtime", K_STRING, offsetof(struct config, runtime), 0, 0},
    {"confine", K_BOOL, offsetof(struct config, confine), 0, 0},
    {"listen", K_LIST, offsetof(struct config, listen), 0, 0},
    {"token", K_STRING, offsetof(struct config, token), 0, 0},
    {"http_public", K_BOOL, offsetof(struct config, http_public), 0, 0},
    {"http_origins", K_LIST, offsetof(struct config, http_origins), 0, 0},
    {"http_hosts", K_LIST, offsetof(struct config, http_hosts), 0, 0},
    {"max_clients", K_LONG, offsetof(struct config, max_clients), 1, 100000},
    {"client_idle_s", K_DOUBLE, offsetof(struct config, client_idle_s), 1, 30 * 86400},
    {"http_header_timeout_s", K_DOUBLE, offsetof(struct config, http_header_timeout_s), 0.1, 3600},
    {"client_max_sandboxes", K_LONG, offsetof(struct config, client_max_sandboxes), 0, 4096},
    {"connect_fallback", K_BOOL, offsetof(struct config, connect_fallback), 0, 0},
    {"service", K_BOOL, offsetof(struct config, service), 0, 0},
    {"tcp_token", K_BOOL, offsetof(struct config, tcp_token), 0, 0},
    {"drain_s", K_DOUBLE, offsetof(struct config, drain_s), 0, 3600},
    {"ask_timeout_s", K_DOUBLE, offsetof(struct config, ask_timeout_s), 1, 3600},
    {"ask_allow_unasked", K_BOOL, offsetof(struct config, ask_allow_unasked), 0, 0},
    {"ask_run", K_BOOL, offsetof(struct config, ask_run), 0, 0},
    {"client_name", K_STRING, offsetof(struct config, client_name), 0, 0},
    {"resources_workspace", K_BOOL, offsetof(struct config, resources_workspace), 0, 0},
    {"network_max_connections", K_LONG, offsetof(struct config, network_max_connections), 1, 4096},
    {"network_max_bytes", K_SIZE, offsetof(struct config, network_max_bytes), 1024, 1e15},
    {"network_idle_s", K_DOUBLE, offsetof(struct config, network_idle_s), 1, 86400},
    {"network_connect_timeout_s", K_DOUBLE, offsetof(struct config, network_connect_timeout_s), 0.1,
     600},
    {"pip_index", K_STRING, offsetof(struct config, pip_index), 0, 0},
};

void config_defaults(struct config *c)
{
        *c = (struct config){
            .image = strdup("corral-data:latest"),
            .memory = 512ULL << 20,
            .pids = 128,
            .cpus = 1.0,
            .timeout_s = 30,
            .max_timeout_s = 600,
            .start_timeout_s = 60,
            .output_limit = 1 << 20,
            /* A result a model reads: well under every host's limit
             * (Claude Code's is 25,000 tokens). The whole output is kept
             * for reading back, a quarter of an hour. */
            .result_max_chars = 20000,
            .result_keep_s = 900,
            .result_store_max = 256ULL << 20,
            .max_frame = RT_DEFAULT_MAX_FRAME,
            .tmp_size = 64 << 20,
            .workspace_size = 256 << 20,
            .shm_size = 64 << 20,
            .max_sandboxes = 16,
            .max_queue = 256,
            /* A laptop: two warm sandboxes, up to four under load. */
            .pool_min = 2,
            .pool_max = 16,
            .pool_max_starting = 2,
            .pool_idle_s = 120,
            .pool_memory = 1ULL << 30,
            .sync_wait_s = 25,
            .job_retention_s = 600,
            /* Sessions hold a container each: a few, closed when idle. */
            .max_sessions = 4,
            .session_idle_s = 600,
            /* Idle, and when corral stops, a session is saved, not lost. */
            .session_hibernate = true,
            .session_max_s = 4 * 3600,
            .session_store_max = 4ULL << 30,
            .session_keep_s = 7 * 86400,
            .file_max_bytes = 16 << 20,
            .out_max_bytes = 8 << 20,
            .log_level = LOG_INFO,
            .host_servers = true,
            .confine = true,
            /* The service: a few hundred clients, idle ones gone after an
             * hour; no client takes more than half the slots. */
            .max_clients = 256,
            .client_idle_s = 3600,
            /* A TCP connection's headers, with the token, come at once. */
            .http_header_timeout_s = 10,
            .client_max_sandboxes = 0,
            .tcp_token = true,
            /* A stdio corral without settings uses the user's service. */
            .service = true,
            /* A service told to stop lets running calls end first. */
            .drain_s = 30,
            /* A person has two minutes to approve a call (policy "ask"). */
            .ask_timeout_s = 120,
            /* The way out: a few connections at once, a gigabyte each way. */
            .network_max_connections = 32,
            .network_max_bytes = 1ULL << 30,
            .network_idle_s = 60,
            .network_connect_timeout_s = 10,
        };
}

void config_free(struct config *c)
{
        free(c->engine);
        free(c->image);
        free(c->config_file);
        free(c->policy);
        free(c->audit_log);
        free(c->session_store);
        c->session_store = NULL;
        free(c->seccomp);
        free(c->runtime);
        free(c->token);
        free(c->client_name);
        c->client_name = NULL;
        free(c->pip_index);
        c->pip_index = NULL;
        json_decref(c->network_routes);
        json_decref(c->network_resolve);
        c->network_routes = c->network_resolve = NULL;
        json_decref(c->servers);
        json_decref(c->sources);
        c->sources = NULL;
        c->images = strv_free(c->images);
        c->mounts = strv_free(c->mounts);
        c->preload = strv_free(c->preload);
        c->listen = strv_free(c->listen);
        c->http_origins = strv_free(c->http_origins);
        c->http_hosts = strv_free(c->http_hosts);
        c->project_servers = strv_free(c->project_servers);
        c->token = NULL;
        c->engine = c->image = c->config_file = c->policy = c->audit_log = c->seccomp = c->runtime =
            NULL;
        c->servers = NULL;
}

static const struct config_key *key_find(const char *name)
{
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                if (strcmp(keys[i].name, name) == 0)
                        return &keys[i];
        return NULL;
}

/* One item of a list, or the value of a string setting: 1 to 4096
 * characters, none of them a control character. */
static int text_ok(const char *value, const char *source, const char *name, struct err *e)
{
        if (!*value || strlen(value) > 4096)
                return err_set(e, ERR_CONFIG, EINVAL, "%s: %s must be 1 to 4096 characters", source,
                               name);
        for (const char *p = value; *p; p++)
                if (iscntrl((unsigned char)*p))
                        return err_set(e, ERR_CONFIG, EINVAL, "%s: %s contains a control character",
                                       source, name);
        return 0;
}

/* A list setting from n items (each checked), replacing what it held. */
static int list_set(char ***field, const char *const *items, size_t n, const char *source,
                    const char *name, struct err *e)
{
        if (n > LIST_MAX)
                return err_set(e, ERR_CONFIG, EINVAL, "%s: %s has more than %d items", source, name,
                               LIST_MAX);
        char **v = calloc(n + 1, sizeof(char *));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                int r = text_ok(items[i], source, name, e);
                if (r == 0 && !(v[i] = strdup(items[i])))
                        r = -ENOMEM;
                if (r < 0) {
                        strv_free(v);
                        return r;
                }
        }
        strv_free(*field);
        *field = v;
        return 0;
}

static int set_value(struct config *c, const char *name, const char *value, const char *source,
                     struct err *e);

static int source_note(struct config *c, const char *name, const char *source)
{
        if (!c->sources && !(c->sources = json_object()))
                return -ENOMEM;
        return json_object_set_new(c->sources, name, json_string(source)) < 0 ? -ENOMEM : 0;
}

int config_set(struct config *c, const char *name, const char *value, const char *source,
               struct err *e)
{
        int r = set_value(c, name, value, source, e);
        return r < 0 ? r : source_note(c, name, source);
}

const char *config_source(const struct config *c, const char *key)
{
        return json_string_value(json_object_get(c->sources, key));
}

static int set_value(struct config *c, const char *name, const char *value, const char *source,
                     struct err *e)
{
        const struct config_key *k = key_find(name);
        if (!k)
                return err_set(e, ERR_CONFIG, EINVAL, "%s: unknown setting \"%s\"", source, name);
        /* Any setting but `service` makes a stdio corral its own: the
         * service runs with settings of its own. */
        if (strcmp(name, "service") != 0)
                c->settings_given = true;
        void *field = (char *)c + k->offset;
        char *end = NULL;
        switch (k->type) {
        case K_STRING: {
                int r = text_ok(value, source, name, e);
                if (r < 0)
                        return r;
                char *s = strdup(value);
                if (!s)
                        return -ENOMEM;
                free(*(char **)field);
                *(char **)field = s;
                return 0;
        }
        case K_SIZE: {
                unsigned long long v;
                if (parse_size(value, &v) < 0 || v < k->min || v > k->max)
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "%s: %s must be a size between %.0f and %.0f bytes "
                                       "(e.g. 512m), not \"%s\"",
                                       source, name, k->min, k->max, value);
                *(unsigned long long *)field = v;
                return 0;
        }
        case K_LONG: {
                errno = 0;
                long v = strtol(value, &end, 10);
                if (errno || end == value || *end || v < k->min || v > k->max)
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "%s: %s must be an integer from %.0f to %.0f, not \"%s\"",
                                       source, name, k->min, k->max, value);
                *(long *)field = v;
                return 0;
        }
        case K_DOUBLE: {
                errno = 0;
                double v = strtod(value, &end);
                if (errno || end == value || *end || !isfinite(v) || v < k->min || v > k->max)
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "%s: %s must be a number from %g to %g, not \"%s\"", source,
                                       name, k->min, k->max, value);
                *(double *)field = v;
                return 0;
        }
        case K_BOOL:
                if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0 ||
                    strcmp(value, "yes") == 0)
                        *(bool *)field = true;
                else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0 ||
                         strcmp(value, "no") == 0)
                        *(bool *)field = false;
                else
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "%s: %s must be true or false, not \"%s\"", source, name,
                                       value);
                return 0;
        case K_LIST: {
                /* From a flag or a variable: items separated by commas,
                 * spaces around them dropped; "" is the empty list. */
                const char *items[LIST_MAX + 1];
                char copy[4096 * 4];
                size_t n = 0;
                if (strlen(value) >= sizeof(copy))
                        return err_set(e, ERR_CONFIG, EINVAL, "%s: %s is too long", source, name);
                snprintf(copy, sizeof(copy), "%s", value);
                for (char *save = NULL, *t = strtok_r(copy, ",", &save); t;
                     t = strtok_r(NULL, ",", &save)) {
                        while (isspace((unsigned char)*t))
                                t++;
                        size_t len = strlen(t);
                        while (len && isspace((unsigned char)t[len - 1]))
                                t[--len] = '\0';
                        if (!len)
                                continue;
                        if (n == LIST_MAX + 1)
                                break;
                        items[n++] = t;
                }
                return list_set((char ***)field, items, n, source, name, e);
        }
        case K_LEVEL:
                if (log_level_parse(value, (enum log_level *)field) < 0)
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "%s: %s must be one of error, warning, info, debug, "
                                       "not \"%s\"",
                                       source, name, value);
                return 0;
        }
        return -EINVAL;
}

int config_load_env(struct config *c, struct err *e)
{
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                char var[64] = "CORRAL_";
                size_t n = strlen(var);
                for (const char *p = keys[i].name; *p && n < sizeof(var) - 1; p++)
                        var[n++] = (char)toupper((unsigned char)*p);
                var[n] = '\0';
                const char *v = getenv(var);
                if (!v)
                        continue;
                int r = config_set(c, keys[i].name, v, var, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

int config_load_file(struct config *c, const char *path, bool required, struct err *e)
{
        /* A config file is small: refuse anything past 1 MiB. */
        struct buf text;
        int rr = buf_read_file(path, 1 << 20, &text);
        if (rr == -ENOENT && !required)
                return 0;
        if (rr == -EFBIG)
                return err_set(e, ERR_CONFIG, EFBIG, "%s: config file larger than 1 MiB", path);
        if (rr == -EINVAL)
                return err_set(e, ERR_CONFIG, EINVAL, "config file %s is not a regular file", path);
        if (rr < 0)
                return err_set(e, ERR_CONFIG, -rr, "cannot read config file %s: %s", path,
                               strerror(-rr));
        json_error_t jerr;
        size_t n = text.len;
        json_auto_t *root =
            json_loadb(text.data ? text.data : "", n, JSON_REJECT_DUPLICATES, &jerr);
        buf_free(&text);
        if (!root)
                return err_set(e, ERR_CONFIG, EINVAL, "%s:%d:%d: %s", path, jerr.line, jerr.column,
                               jerr.text);
        if (!json_is_object(root))
                return err_set(e, ERR_CONFIG, EINVAL, "%s: top level must be a JSON object", path);
        const char *name;
        json_t *v;
        int r = 0;
        json_object_foreach(root, name, v)
        {
                char source[512], text_val[64];
                const char *val;
                snprintf(source, sizeof(source), "%s: %s", path, name);
                if (strcmp(name, "service") != 0)
                        c->settings_given = true;
                if (strcmp(name, "servers") == 0) {
                        /* Upstream MCP servers: the registry checks each
                         * entry; here only the shape. */
                        if (!json_is_object(v)) {
                                r = err_set(e, ERR_CONFIG, EINVAL,
                                            "%s: must be an object of servers by name", source);
                                break;
                        }
                        json_decref(c->servers);
                        c->servers = json_incref(v);
                        continue;
                }
                if (strcmp(name, "network_routes") == 0 || strcmp(name, "network_resolve") == 0) {
                        /* Objects: their entries are checked where they are
                         * used (bridge/egress.c), before corral serves. */
                        if (!json_is_object(v) || json_object_size(v) > 256) {
                                r = err_set(e, ERR_CONFIG, EINVAL,
                                            "%s: must be an object of at most 256 entries", source);
                                break;
                        }
                        json_t **field = strcmp(name, "network_routes") == 0 ? &c->network_routes
                                                                             : &c->network_resolve;
                        json_decref(*field);
                        *field = json_incref(v);
                        continue;
                }
                const struct config_key *k = key_find(name);
                if (!k) {
                        /* Unknown keys are refused so a typo does not pass
                         * unnoticed. */
                        r = err_set(e, ERR_CONFIG, EINVAL, "%s: unknown setting", source);
                        break;
                }
                if (k->type == K_LIST) {
                        const char *items[LIST_MAX + 1];
                        size_t i, count = 0;
                        json_t *item;
                        if (!json_is_array(v)) {
                                r = err_set(e, ERR_CONFIG, EINVAL, "%s: must be a list of strings",
                                            source);
                                break;
                        }
                        json_array_foreach(v, i, item)
                        {
                                if (!json_is_string(item)) {
                                        r = err_set(e, ERR_CONFIG, EINVAL,
                                                    "%s: item %zu is not a string", source, i + 1);
                                        break;
                                }
                                if (count <= LIST_MAX)
                                        items[count++] = json_string_value(item);
                        }
                        if (r == 0)
                                r = list_set((char ***)((char *)c + k->offset), items, count,
                                             source, name, e);
                        if (r == 0)
                                r = source_note(c, name, source);
                        if (r < 0)
                                break;
                        continue;
                }
                if (json_is_boolean(v)) {
                        val = json_is_true(v) ? "true" : "false";
                } else if (json_is_string(v)) {
                        val = json_string_value(v);
                } else if (json_is_integer(v)) {
                        snprintf(text_val, sizeof(text_val), "%lld",
                                 (long long)json_integer_value(v));
                        val = text_val;
                } else if (json_is_real(v)) {
                        snprintf(text_val, sizeof(text_val), "%.17g", json_real_value(v));
                        val = text_val;
                } else {
                        r = err_set(e, ERR_CONFIG, EINVAL, "%s: must be a string or a number",
                                    source);
                        break;
                }
                r = config_set(c, name, val, source, e);
                if (r < 0)
                        break;
        }
        if (r == 0) {
                free(c->config_file);
                c->config_file = strdup(path);
        }
        return r;
}

/* A path with no empty, "." or ".." component, not ending in "/". */
static bool path_plain(const char *p)
{
        if (p[0] != '/' || (p[1] && p[strlen(p) - 1] == '/'))
                return false;
        for (const char *q = p; *q;) {
                q++;
                const char *end = strchrnul(q, '/');
                size_t n = (size_t)(end - q);
                if ((n == 0 && *end) || (n == 1 && q[0] == '.') ||
                    (n == 2 && q[0] == '.' && q[1] == '.'))
                        return false;
                q = end;
        }
        return true;
}

static bool path_within(const char *p, const char *dir)
{
        size_t n = strlen(dir);
        return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

const char *config_mount_host_danger(const char *host, const char *engine_socket)
{
        /* The host's kernel interfaces and devices, its runtime state
         * (engine and systemd sockets live under /run), and the root that
         * holds them all: read-only is no wall for a socket, which a
         * sandbox can still connect to, nor for what /proc and /sys tell. */
        static const char *const host_dirs[] = {"/proc", "/sys", "/dev", "/run", "/var/run"};
        if (strcmp(host, "/") == 0)
                return "it is the host's whole file system";
        for (size_t i = 0; i < ARRAY_SIZE(host_dirs); i++)
                if (path_within(host, host_dirs[i]))
                        return "it holds the host's kernel interfaces, devices or runtime "
                               "sockets";
        if (engine_socket && path_within(engine_socket, host))
                return "it holds the container engine's socket, which would let sandboxed "
                       "code start containers of its own";
        return NULL;
}

int config_mount_parse(const char *spec, char *host, char *target, size_t size, struct err *e)
{
        /* Places the image's system lives in (a mount over them would replace
         * it) and places corral or the engine manage. */
        static const char *const system[] = {"/bin",   "/boot",   "/etc",  "/lib", "/lib32",
                                             "/lib64", "/libx32", "/sbin", "/usr", "/var",
                                             "/home",  "/opt",    "/root", "/srv", "/mnt"};
        static const char *const managed[] = {"/proc", "/sys",     "/dev",      "/run",
                                              "/tmp",  "/var/tmp", "/workspace"};
        const char *colon = strchr(spec, ':');
        const char *second = colon ? strchr(colon + 1, ':') : NULL;
        size_t hl = colon ? (size_t)(colon - spec) : 0;
        size_t tl = colon ? (second ? (size_t)(second - colon - 1) : strlen(colon + 1)) : 0;
        if (!colon || (second && strcmp(second, ":ro") != 0) || hl == 0 || tl == 0 || hl >= size ||
            tl >= size) {
                return err_set(e, ERR_CONFIG, -EINVAL,
                               "mount \"%.200s\" must be HOST:SANDBOX, two absolute paths (it is "
                               "always read-only)",
                               spec);
        }
        memcpy(host, spec, hl);
        host[hl] = '\0';
        memcpy(target, colon + 1, tl);
        target[tl] = '\0';
        if (!path_plain(host) || !path_plain(target) || strcmp(target, "/") == 0) {
                return err_set(e, ERR_CONFIG, -EINVAL,
                               "mount \"%.200s\": both paths must be absolute, without \".\", "
                               "\"..\" or \"//\", and the sandbox's not /",
                               spec);
        }
        for (size_t i = 0; i < ARRAY_SIZE(system); i++)
                if (path_within(system[i], target)) {
                        return err_set(e, ERR_CONFIG, -EINVAL,
                                       "mount \"%.200s\": %s would hide the image's %s; mount it "
                                       "under a new directory such as /data or /mnt/NAME",
                                       spec, target, system[i]);
                }
        for (size_t i = 0; i < ARRAY_SIZE(managed); i++)
                if (path_within(target, managed[i]) || path_within(managed[i], target)) {
                        return err_set(e, ERR_CONFIG, -EINVAL,
                                       "mount \"%.200s\": %s is corral's or the engine's (%s); "
                                       "choose another place such as /data",
                                       spec, target, managed[i]);
                }
        return 0;
}

static bool module_name_ok(const char *s)
{
        bool start = true;
        for (; *s; s++) {
                if (*s == '.' && !start) {
                        start = true;
                        continue;
                }
                if (!(isalpha((unsigned char)*s) || *s == '_' ||
                      (!start && isdigit((unsigned char)*s))))
                        return false;
                start = false;
        }
        return !start;
}

bool config_image_name_ok(const char *s)
{
        if (!*s || strlen(s) > 255)
                return false;
        for (; *s; s++)
                if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789._-/:@", *s))
                        return false;
        return true;
}

int config_check(const struct config *c, struct err *e)
{
        char host[4096], target[4096];
        for (size_t i = 0; c->mounts && c->mounts[i]; i++) {
                int r = config_mount_parse(c->mounts[i], host, target, sizeof(host), e);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; c->preload && c->preload[i]; i++)
                if (!module_name_ok(c->preload[i]))
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "preload: \"%.200s\" is not a Python module name",
                                       c->preload[i]);
        /* Names only, never patterns: each one is a choice of the person's
         * about one server of a project's file. */
        for (size_t i = 0; c->project_servers && c->project_servers[i]; i++)
                if (!registry_name_valid(c->project_servers[i]))
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "project_servers: \"%.200s\" is not a server name (1 to "
                                       "%d of A-Z a-z 0-9 _ . -)",
                                       c->project_servers[i], REGISTRY_MAX_NAME);
        for (size_t i = 0; c->images && c->images[i]; i++)
                if (!config_image_name_ok(c->images[i]))
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "images: \"%.200s\" is not an image name (lower case, "
                                       "digits and ._-/:@)",
                                       c->images[i]);
        if (!config_image_name_ok(c->image))
                return err_set(e, ERR_CONFIG, EINVAL,
                               "image: \"%.200s\" is not an image name (lower case, digits and "
                               "._-/:@)",
                               c->image);
        if (c->timeout_s > c->max_timeout_s)
                return err_set(e, ERR_CONFIG, EINVAL,
                               "timeout_s (%g) must not exceed max_timeout_s (%g)", c->timeout_s,
                               c->max_timeout_s);
        if (c->engine && strncmp(c->engine, "unix://", 7) != 0 &&
            strncmp(c->engine, "tcp://", 6) != 0 && c->engine[0] != '/')
                return err_set(e, ERR_CONFIG, EINVAL,
                               "engine must be unix:///path/to.sock, tcp://host:port or an "
                               "absolute socket path, not \"%s\"",
                               c->engine);
        if (c->seccomp && strcmp(c->seccomp, "corral") != 0 && strcmp(c->seccomp, "engine") != 0 &&
            c->seccomp[0] != '/')
                return err_set(e, ERR_CONFIG, EINVAL,
                               "seccomp must be corral, engine or the absolute path of a "
                               "profile, not \"%s\"",
                               c->seccomp);
        /* Relative, it would be found from the working directory: a cloned
         * repository's, whose files choose nothing here. */
        if (c->policy && c->policy[0] != '/')
                return err_set(e, ERR_CONFIG, EINVAL,
                               "policy must be the absolute path of a file, not \"%.200s\"",
                               c->policy);
        if (c->session_store && c->session_store[0] != '/')
                return err_set(e, ERR_CONFIG, EINVAL,
                               "session_store must be the absolute path of a directory, not "
                               "\"%.200s\"",
                               c->session_store);
        if (c->runtime && strcmp(c->runtime, "runc") != 0 && strcmp(c->runtime, "runsc") != 0)
                return err_set(e, ERR_CONFIG, EINVAL,
                               "runtime must be runc (the engine's default) or runsc (gVisor), "
                               "not \"%.200s\"",
                               c->runtime);
        return 0;
}

char *config_default_path(void)
{
        return xdg_path("XDG_CONFIG_HOME", ".config", "corral/config.json");
}

int config_append(struct config *c, const char *name, const char *value, const char *source,
                  struct err *e)
{
        const struct config_key *k = key_find(name);
        char **old = k && k->type == K_LIST ? *(char ***)((char *)c + k->offset) : NULL;
        if (!old || !old[0])
                return config_set(c, name, value, source, e);
        struct buf b;
        buf_init(&b, 4096 * 4 + 1); /* past the limit when cut: config_set refuses it */
        for (char **a = old; *a; a++) {
                buf_append_some(&b, *a, strlen(*a));
                buf_append_some(&b, ",", 1);
        }
        buf_append_some(&b, value, strlen(value));
        int r = config_set(c, name, buf_str(&b), source, e);
        buf_free(&b);
        return r;
}

const char *const *config_key_names(void)
{
        static const char *names[ARRAY_SIZE(keys) + 1];
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                names[i] = keys[i].name;
        return names;
}
