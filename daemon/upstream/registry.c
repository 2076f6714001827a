#include "upstream/registry.h"

#include "core/buf.h"
#include "core/log.h"
#include "upstream/mask.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Every bound below applies to text that other programs (and people) write:
 * a host's file may be huge, hostile or simply broken, and none of it may
 * make the daemon slow, big or confused. */
#define MAX_FILE      (64 << 20) /* bytes per file read (~/.claude.json keeps history too) */
#define MAX_SERVERS   256        /* entries in the registry */
#define MAX_NAME      REGISTRY_MAX_NAME
#define MAX_STRING    (64 << 10) /* any string, before and after expansion */
#define MAX_LIST      256        /* args, env and headers entries per server */
#define MAX_SCAN      1024       /* entries looked at per servers object */
#define MAX_DIR_FILES 256        /* files read from <xdg_config>/mcp/servers */
#define MAX_ERROR     1000       /* bytes of an entry's error, once masked */

#define OWN_SOURCE "corral config"

/* ---- NULL-terminated string arrays */

static bool strv_contains(char **v, const char *s)
{
        for (size_t i = 0; v && v[i]; i++)
                if (strcmp(v[i], s) == 0)
                        return true;
        return false;
}

static int secret_add(char ***secrets, const char *value, size_t len)
{
        if (len < MASK_MIN)
                return 0;
        for (size_t i = 0; *secrets && (*secrets)[i]; i++)
                if (strlen((*secrets)[i]) == len && memcmp((*secrets)[i], value, len) == 0)
                        return 0;
        return strv_push(secrets, strndup(value, len));
}

/* ---- ${VAR} expansion */

static bool is_identifier(const char *s, size_t n)
{
        if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
                        return false;
        return true;
}

/* Values the hosts define themselves (VS Code's ${workspaceFolder} and
 * ${userHome}); these are paths, not secrets. */
struct expand_vars {
        const char *workspace;
        const char *home;
        /* A project's file: nothing comes from the environment. The file
         * came with a clone, and ${TOKEN} in a header it wrote would send
         * the person's token wherever it says. */
        bool no_env;
};

static int expand(const char *in, const struct expand_vars *vars, char ***secrets, char **ret,
                  struct err *e)
{
        struct buf out;
        buf_init(&out, MAX_STRING);
        int r = 0;
        const char *p = in;
        while (*p && r == 0) {
                const char *d = strstr(p, "${");
                const char *close = d ? strchr(d + 2, '}') : NULL;
                if (!close) {
                        /* No (complete) reference left: the rest is literal. */
                        r = buf_append(&out, p, strlen(p));
                        break;
                }
                r = buf_append(&out, p, (size_t)(d - p));
                if (r < 0)
                        break;
                p = close + 1;
                const char *expr = d + 2;
                size_t n = (size_t)(close - expr);
                if (n >= 6 && strncmp(expr, "input:", 6) == 0) {
                        r = err_set(e, ERR_CONFIG, EOPNOTSUPP,
                                    "VS Code input variables are not supported");
                        break;
                }
                if (n >= 4 && strncmp(expr, "env:", 4) == 0) {
                        expr += 4;
                        n -= 4;
                }
                const char *def = NULL;
                size_t name_len = n, def_len = 0;
                for (size_t i = 0; i + 1 < n; i++)
                        if (expr[i] == ':' && expr[i + 1] == '-') {
                                name_len = i;
                                def = expr + i + 2;
                                def_len = n - i - 2;
                                break;
                        }
                if (!is_identifier(expr, name_len)) {
                        if (memchr(expr, ':', name_len)) {
                                r = err_set(e, ERR_CONFIG, EOPNOTSUPP,
                                            "unsupported variable ${%.*s}",
                                            (int)(n < 200 ? n : 200), expr);
                                break;
                        }
                        /* Not a variable reference ("${1}" in a shell
                         * snippet, say): kept as written. */
                        r = buf_append(&out, d, (size_t)(p - d));
                        continue;
                }
                _cleanup_free_ char *name = strndup(expr, name_len);
                if (!name) {
                        r = -ENOMEM;
                        break;
                }
                bool no_env = vars && vars->no_env;
                const char *value = no_env ? NULL : getenv(name);
                bool from_env = value != NULL;
                if (!value && vars && vars->workspace && strcmp(name, "workspaceFolder") == 0)
                        value = vars->workspace;
                if (!value && vars && vars->home && strcmp(name, "userHome") == 0)
                        value = vars->home;
                if (!value && no_env) {
                        r = err_set(e, ERR_CONFIG, EPERM,
                                    "${%s}: variables are not expanded from a project's files",
                                    name);
                        break;
                }
                if (def && (!value || !*value)) {
                        r = buf_append(&out, def, def_len);
                        continue;
                }
                if (!value) {
                        r = err_set(e, ERR_CONFIG, ENOENT, "environment variable %s is not set",
                                    name);
                        break;
                }
                /* A value from the environment is often a token: it is
                 * never shown, wherever it ends up. */
                if (from_env)
                        r = secret_add(secrets, value, strlen(value));
                if (r == 0)
                        r = buf_append(&out, value, strlen(value));
        }
        if (r == -ENOBUFS)
                r = err_set(e, ERR_CONFIG, E2BIG, "longer than %d KiB after expansion",
                            MAX_STRING >> 10);
        else if (r == -ENOMEM)
                r = err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        if (r < 0) {
                buf_free(&out);
                return r;
        }
        char *s = strdup(buf_str(&out));
        buf_free(&out);
        if (!s)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        *ret = s;
        return 0;
}

int registry_expand(const char *in, char ***secrets, char **ret, struct err *e)
{
        return expand(in, NULL, secrets, ret, e);
}

/* ---- masking */

char *registry_mask(const struct registry *r, const char *text, size_t max)
{
        text = text ? text : "";
        return mask_text(r ? r->mask : NULL, text, strlen(text), max, 0);
}

/* ---- reading the hosts' files */

/* VS Code and Cursor accept comments and trailing commas in their files
 * (JSONC). Blank them out in place, keeping line numbers for messages;
 * strict JSON passes through unchanged. */
static void strip_jsonc(char *s, size_t n)
{
        bool in_string = false;
        char *comma = NULL;
        for (size_t i = 0; i < n; i++) {
                if (in_string) {
                        if (s[i] == '\\' && i + 1 < n)
                                i++;
                        else if (s[i] == '"')
                                in_string = false;
                        continue;
                }
                if (s[i] == '/' && i + 1 < n && s[i + 1] == '/') {
                        while (i < n && s[i] != '\n')
                                s[i++] = ' ';
                        continue;
                }
                if (s[i] == '/' && i + 1 < n && s[i + 1] == '*') {
                        s[i] = s[i + 1] = ' ';
                        for (i += 2; i < n && !(s[i] == '*' && i + 1 < n && s[i + 1] == '/'); i++)
                                if (s[i] != '\n')
                                        s[i] = ' ';
                        if (i < n)
                                s[i] = s[i + 1] = ' ';
                        i++;
                        continue;
                }
                if (isspace((unsigned char)s[i]))
                        continue;
                if ((s[i] == '}' || s[i] == ']') && comma)
                        *comma = ' ';
                comma = s[i] == ',' ? s + i : NULL;
                if (s[i] == '"')
                        in_string = true;
        }
}

/* A host file as a JSON object, or NULL when it is missing (silently) or
 * cannot be used (with a warning: the other sources still count). */
static json_t *load_host_file(const char *path)
{
        struct buf b = {0};
        int r = buf_read_file(path, MAX_FILE, &b);
        if (r == -ENOENT)
                return NULL;
        if (r == -EFBIG) {
                log_warn("%s: larger than %d MiB; its MCP servers are ignored", path,
                         MAX_FILE >> 20);
                return NULL;
        }
        if (r < 0) {
                log_warn("%s: cannot read: %s; its MCP servers are ignored", path,
                         r == -EINVAL ? "not a regular file" : strerror(-r));
                return NULL;
        }
        strip_jsonc(b.data, b.len);
        json_error_t jerr;
        json_auto_t *root = json_loadb(b.data ? b.data : "", b.len, JSON_REJECT_DUPLICATES, &jerr);
        buf_free(&b);
        if (!root) {
                /* jansson quotes the text "near" the fault, which in these
                 * files may well be a token: the position must do. */
                char *near = strstr(jerr.text, " near ");
                if (near)
                        *near = '\0';
                log_warn("%s:%d:%d: %s; its MCP servers are ignored", path, jerr.line, jerr.column,
                         jerr.text);
                return NULL;
        }
        if (!json_is_object(root)) {
                log_warn("%s: top level is not a JSON object; its MCP servers are ignored", path);
                return NULL;
        }
        return TAKE_PTR(root);
}

/* ---- entries */

/* Who owns a project's file: where, if anywhere, the person's approval of
 * its servers is recorded. */
enum project_host { NOT_PROJECT, HOST_CLAUDE, HOST_VSCODE, HOST_CURSOR };

/* Claude Code's answers about a project's .mcp.json servers. */
struct approvals {
        char **enabled;     /* enabledMcpjsonServers of the person's own files */
        char **disabled;    /* disabledMcpjsonServers of any settings file */
        char **disabled_in; /* the file of each disabled[i] */
        char *all_in;       /* the file that set enableAllProjectMcpServers, or NULL */
};

struct loader {
        const struct registry_sources *src;
        char *self; /* realpath of src->self_exe */
        struct upstream_spec *v;
        size_t n;
        char **claimed; /* names whose first definition was corral itself */
        bool full_warned;
        struct approvals ap;
        struct registry_skip *skipped; /* MAX_SERVERS of them */
        size_t n_skipped;
        bool skipped_warned;
        /* The project is the home directory (compared as real paths: $HOME
         * may end in "/" or pass through a link): its files are the
         * person's own. */
        bool cwd_is_home;
};

/* What the entry being read is, for its messages. */
struct entry {
        struct loader *L;
        const char *name;
        const char *source;
        bool own;
        bool project; /* an approved server of a project's file */
        struct upstream_spec *spec;
        struct err *e;
};

bool registry_name_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > MAX_NAME)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i]))
                        return false;
        return true;
}

/* Drop what would run the server, so that an entry with an error can only
 * be shown, never started half-checked. */
static void spec_clear_launch(struct upstream_spec *spec)
{
        free(spec->command);
        free(spec->cwd);
        free(spec->url);
        spec->command = spec->cwd = spec->url = NULL;
        spec->argv = strv_free(spec->argv);
        spec->env = strv_free(spec->env);
        spec->headers = strv_free(spec->headers);
}

static void spec_free(struct upstream_spec *spec)
{
        spec_clear_launch(spec);
        free(spec->name);
        free(spec->description);
        free(spec->source);
        free(spec->error);
        strv_free(spec->secrets);
        *spec = (struct upstream_spec){0};
}

/* The entry cannot be used, for the reason in `msg` (taken; NULL: out of
 * memory). In corral's own config that stops start-up; elsewhere the entry
 * stays, with the reason, so list_servers can show it. Returns what the
 * caller returns.
 *
 * The reason may quote a value (a URL with a ${VAR} in it): it is masked
 * whole and cut only after, never cut first. A kept reason is masked with
 * this entry's secrets now and cut by registry_load, once every entry's
 * secrets are known; a fatal one, with the secrets known so far. */
static int entry_reject(struct entry *x, bool fatal, char *msg)
{
        struct upstream_spec *spec = x->spec;
        _cleanup_free_ char *raw = msg;
        struct mask *m = mask_new();
        int r = m && raw ? mask_add_strv(m, spec->secrets) : -ENOMEM;
        bool stop = x->own && fatal;
        for (size_t i = 0; r == 0 && stop && i < x->L->n; i++)
                r = mask_add_strv(m, x->L->v[i].secrets);
        if (r < 0) {
                mask_free(m);
                return err_set(x->e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        if (stop) {
                if (x->e) {
                        x->e->kind = ERR_CONFIG;
                        x->e->code = -EINVAL;
                        mask_into(m, raw, strlen(raw), 0, x->e->msg, sizeof(x->e->msg));
                }
                mask_free(m);
                return -EINVAL;
        }
        char *masked = mask_text(m, raw, strlen(raw), 0, 0);
        mask_free(m);
        if (!masked)
                return err_set(x->e, ERR_INTERNAL, ENOMEM, "out of memory");
        spec_clear_launch(spec);
        free(spec->error);
        spec->error = masked;
        return 0;
}

_printf_(2, 3) static int entry_invalid(struct entry *x, const char *fmt, ...)
{
        _cleanup_free_ char *reason = NULL;
        char *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&reason, fmt, ap) < 0)
                reason = NULL;
        va_end(ap);
        if (reason && asprintf(&msg, "server '%s' in %s: %s", x->name, x->source, reason) < 0)
                msg = NULL;
        return entry_reject(x, true, msg);
}

static int check_string(struct entry *x, json_t *v, const char *key, bool nonempty)
{
        if (!json_is_string(v))
                return entry_invalid(x, "%s must be a string", key);
        if (json_string_length(v) > MAX_STRING)
                return entry_invalid(x, "%s is longer than %d KiB", key, MAX_STRING >> 10);
        if (nonempty && json_string_length(v) == 0)
                return entry_invalid(x, "%s must not be empty", key);
        return 1;
}

/* An object of strings with at most MAX_LIST members; each key checked by
 * `key_ok` (NULL: any). Literal values are secrets from the start, so that
 * a message about this entry never shows one. */
static int check_string_object(struct entry *x, json_t *obj, const char *key,
                               bool (*key_ok)(const char *), const char *key_rule)
{
        if (!json_is_object(obj))
                return entry_invalid(x, "%s must be an object of strings", key);
        if (json_object_size(obj) > MAX_LIST)
                return entry_invalid(x, "%s has more than %d entries", key, MAX_LIST);
        const char *k;
        json_t *v;
        json_object_foreach(obj, k, v)
        {
                if (!json_is_string(v))
                        return entry_invalid(x, "%s must be an object of strings", key);
                const char *s = json_string_value(v);
                size_t len = json_string_length(v);
                if (!strstr(s, "${") && secret_add(&x->spec->secrets, s, len) < 0)
                        return err_set(x->e, ERR_INTERNAL, ENOMEM, "out of memory");
                if (strlen(k) > MAX_STRING || len > MAX_STRING)
                        return entry_invalid(x, "%s has a string longer than %d KiB", key,
                                             MAX_STRING >> 10);
                if (key_ok && !key_ok(k)) {
                        char shown[80];
                        str_printable(k, shown, sizeof(shown));
                        return entry_invalid(x, "%s: \"%s\" %s", key, shown, key_rule);
                }
        }
        return 1;
}

static bool env_key_ok(const char *k)
{
        return *k && !strchr(k, '=');
}

static bool header_name_ok(const char *k)
{
        /* An HTTP token (RFC 9110): nothing that could end the header or
         * start another. */
        if (!*k)
                return false;
        for (const char *p = k; *p; p++)
                if (!isalnum((unsigned char)*p) && !strchr("!#$%&'*+-.^_`|~", *p))
                        return false;
        return true;
}

/* Expand one value of field `key`. Returns 1 with *ret set, 0 when the
 * entry was rejected, or a negative code. */
static int entry_expand(struct entry *x, const char *in, const char *key, char **ret)
{
        const struct registry_sources *src = x->L->src;
        struct expand_vars vars = {.workspace = src->cwd, .home = src->home, .no_env = x->project};
        struct err ee = {0};
        int r = expand(in, &vars, &x->spec->secrets, ret, &ee);
        if (r == -ENOMEM)
                return err_set(x->e, ERR_INTERNAL, ENOMEM, "out of memory");
        if (r < 0) {
                char *msg = NULL;
                if (asprintf(&msg, "%s (used in %s of server '%s' in %s)", ee.msg, key, x->name,
                             x->source) < 0)
                        msg = NULL;
                /* A variable missing from this environment is no fault of
                 * the file: even corral's own entry stays, with the reason. */
                return entry_reject(x, r != -ENOENT, msg);
        }
        return 1;
}

/* "~/" at the start of a command or directory means the home directory. */
static int expand_tilde(struct entry *x, char **s)
{
        const char *home = x->L->src->home;
        if (!home || strncmp(*s, "~/", 2) != 0)
                return 0;
        char *t;
        if (asprintf(&t, "%s/%s", home, *s + 2) < 0)
                return -ENOMEM;
        free(*s);
        *s = t;
        return 0;
}

static const char *base_name(const char *path)
{
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

/* Whether `command` would run corral itself: an MCP host's file that lists
 * corral would otherwise make every sandbox able to start another corral,
 * without end. */
static bool is_self(struct entry *x, const char *command)
{
        if (strcmp(base_name(command), "corral") == 0)
                return true;
        const char *self = x->L->self;
        if (!self)
                return false;
        char real[PATH_MAX];
        if (strchr(command, '/')) {
                _cleanup_free_ char *joined = NULL;
                const char *path = command;
                if (command[0] != '/' && x->spec->cwd && x->spec->cwd[0] == '/') {
                        if (asprintf(&joined, "%s/%s", x->spec->cwd, command) < 0)
                                return false;
                        path = joined;
                }
                return realpath(path, real) && strcmp(real, self) == 0;
        }
        /* A bare name runs the first match in PATH, as execvp finds it. */
        const char *path = getenv("PATH");
        if (!path)
                path = "/usr/local/bin:/usr/bin:/bin";
        while (*path) {
                size_t dl = strcspn(path, ":");
                char cand[PATH_MAX];
                int k = snprintf(cand, sizeof(cand), "%.*s/%s", (int)dl, dl ? path : ".", command);
                struct stat st;
                if (k > 0 && (size_t)k < sizeof(cand) && stat(cand, &st) == 0 &&
                    S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
                        return realpath(cand, real) && strcmp(real, self) == 0;
                path += dl;
                if (*path == ':')
                        path++;
        }
        return false;
}

/* The launch fields of a stdio entry. Returns 1 when usable, 0 when
 * rejected, 2 when it is corral itself, or a negative code. */
static int entry_stdio(struct entry *x, json_t *entry)
{
        struct upstream_spec *spec = x->spec;
        json_t *command = json_object_get(entry, "command");
        json_t *args = json_object_get(entry, "args");
        json_t *env = json_object_get(entry, "env");
        json_t *cwd = json_object_get(entry, "cwd");
        int r;
        /* First the shape of everything, then the expansion: a broken file
         * is reported as such before a missing variable. */
        if (!command)
                return entry_invalid(x, "a stdio server needs a \"command\"");
        if ((r = check_string(x, command, "command", true)) <= 0)
                return r;
        if (strcmp(base_name(json_string_value(command)), "corral") == 0)
                return 2;
        if (args) {
                if (!json_is_array(args))
                        return entry_invalid(x, "args must be an array of strings");
                if (json_array_size(args) > MAX_LIST)
                        return entry_invalid(x, "args has more than %d entries", MAX_LIST);
                size_t i;
                json_t *a;
                json_array_foreach(args, i, a)
                {
                        if (!json_is_string(a))
                                return entry_invalid(x, "args must be an array of strings");
                        if (json_string_length(a) > MAX_STRING)
                                return entry_invalid(x, "args has a string longer than %d KiB",
                                                     MAX_STRING >> 10);
                }
        }
        if (env && (r = check_string_object(x, env, "env", env_key_ok,
                                            "is not a variable name (empty, or has '=')")) <= 0)
                return r;
        if (cwd && (r = check_string(x, cwd, "cwd", true)) <= 0)
                return r;

        if (cwd) {
                if ((r = entry_expand(x, json_string_value(cwd), "cwd", &spec->cwd)) <= 0)
                        return r;
                if (expand_tilde(x, &spec->cwd) < 0)
                        return -ENOMEM;
        }
        if ((r = entry_expand(x, json_string_value(command), "command", &spec->command)) <= 0)
                return r;
        if (expand_tilde(x, &spec->command) < 0)
                return -ENOMEM;
        if (!spec->command[0])
                return entry_invalid(x, "command is empty after expansion");
        if (is_self(x, spec->command))
                return 2;
        if (strv_push(&spec->argv, strdup(spec->command)) < 0)
                return -ENOMEM;
        size_t i;
        json_t *a;
        json_array_foreach(args, i, a)
        {
                char *s;
                if ((r = entry_expand(x, json_string_value(a), "args", &s)) <= 0)
                        return r;
                if (strv_push(&spec->argv, s) < 0)
                        return -ENOMEM;
        }
        const char *k;
        json_t *v;
        json_object_foreach(env, k, v)
        {
                _cleanup_free_ char *s = NULL;
                char *kv;
                if ((r = entry_expand(x, json_string_value(v), "env", &s)) <= 0)
                        return r;
                if (secret_add(&spec->secrets, s, strlen(s)) < 0 ||
                    asprintf(&kv, "%s=%s", k, s) < 0)
                        return -ENOMEM;
                if (strv_push(&spec->env, kv) < 0)
                        return -ENOMEM;
        }
        return 1;
}

static bool url_ok(const char *u)
{
        size_t skip;
        if (strncasecmp(u, "http://", 7) == 0)
                skip = 7;
        else if (strncasecmp(u, "https://", 8) == 0)
                skip = 8;
        else
                return false;
        if (!u[skip] || u[skip] == '/')
                return false; /* no host */
        for (const char *p = u; *p; p++)
                if ((unsigned char)*p <= ' ' || *p == 0x7f)
                        return false;
        return true;
}

static int entry_http(struct entry *x, json_t *entry)
{
        struct upstream_spec *spec = x->spec;
        json_t *url = json_object_get(entry, "url");
        json_t *headers = json_object_get(entry, "headers");
        int r;
        if (!url)
                return entry_invalid(x, "an HTTP server needs a \"url\"");
        if ((r = check_string(x, url, "url", true)) <= 0)
                return r;
        if (headers && (r = check_string_object(x, headers, "headers", header_name_ok,
                                                "is not a valid header name")) <= 0)
                return r;

        if ((r = entry_expand(x, json_string_value(url), "url", &spec->url)) <= 0)
                return r;
        if (!url_ok(spec->url))
                return entry_invalid(x, "url must be an http:// or https:// URL, not \"%s\"",
                                     spec->url);
        const char *k;
        json_t *v;
        json_object_foreach(headers, k, v)
        {
                _cleanup_free_ char *s = NULL;
                char *line;
                if ((r = entry_expand(x, json_string_value(v), "headers", &s)) <= 0)
                        return r;
                if (secret_add(&spec->secrets, s, strlen(s)) < 0)
                        return -ENOMEM;
                /* A line break in a value would let it add headers of its
                 * own choosing, or end the request head. */
                if (strpbrk(s, "\r\n"))
                        return entry_invalid(x, "headers: the value of %s has a line break", k);
                if (asprintf(&line, "%s: %s", k, s) < 0)
                        return -ENOMEM;
                if (strv_push(&spec->headers, line) < 0)
                        return -ENOMEM;
        }
        return 1;
}

/* The fields common to both transports, then the transport's own.
 * Returns as entry_stdio does. */
static int entry_fields(struct entry *x, json_t *entry)
{
        struct upstream_spec *spec = x->spec;
        int r;
        if (!json_is_object(entry))
                return entry_invalid(x, "must be an object");
        json_t *v = json_object_get(entry, "disabled");
        if (v && !json_is_boolean(v))
                return entry_invalid(x, "disabled must be true or false");
        spec->disabled = json_is_true(v);
        v = json_object_get(entry, "description");
        if (v) {
                if ((r = check_string(x, v, "description", false)) <= 0)
                        return r;
                if (!(spec->description = strdup(json_string_value(v))))
                        return -ENOMEM;
        }

        json_t *type = json_object_get(entry, "type");
        const char *t;
        if (!type) {
                if (json_object_get(entry, "command"))
                        t = "stdio";
                else if (json_object_get(entry, "url"))
                        t = "http";
                else
                        return entry_invalid(x, "needs a \"command\" (stdio) or a \"url\" (HTTP)");
        } else if (json_is_string(type)) {
                t = json_string_value(type);
        } else {
                return entry_invalid(x, "type must be a string");
        }
        if (strcmp(t, "stdio") == 0) {
                spec->transport = UP_STDIO;
                return entry_stdio(x, entry);
        }
        spec->transport = UP_HTTP;
        if (strcmp(t, "http") == 0 || strcmp(t, "streamable-http") == 0 ||
            strcmp(t, "streamableHttp") == 0)
                return entry_http(x, entry);
        if (strcmp(t, "sse") == 0)
                return entry_invalid(x, "the SSE transport is not supported; use streamable HTTP");
        return entry_invalid(x, "unknown type \"%.40s\" (stdio or http)", t);
}

/* Fill x->spec from `entry`. Returns 1 when it belongs in the registry
 * (usable, or with its error), 2 when it is corral itself, or a negative
 * code (fatal: corral's own config is wrong, or out of memory). */
static int entry_parse(struct entry *x, json_t *entry)
{
        struct upstream_spec *spec = x->spec;
        spec->name = strdup(x->name);
        spec->source = strdup(x->source);
        spec->project = x->project;
        if (!spec->name || !spec->source)
                return -ENOMEM;
        int r = entry_fields(x, entry);
        if (r < 0)
                return r;
        return r == 2 ? 2 : 1;
}

static bool name_taken(struct loader *L, const char *name)
{
        for (size_t i = 0; i < L->n; i++)
                if (strcmp(L->v[i].name, name) == 0)
                        return true;
        return strv_contains(L->claimed, name);
}

static const char *const host_names[] = {"", "Claude Code", "VS Code", "Cursor"};

/* Whether a project's server may be offered: 0 when it may, 1 with the
 * reason in *ret_reason when it may not, or -ENOMEM. A refusal anywhere
 * wins: it can only narrow what runs. */
static int project_decision(struct loader *L, enum project_host host, const char *name,
                            const char *source, char **ret_reason)
{
        struct approvals *ap = &L->ap;
        int k = 0;
        *ret_reason = NULL;
        for (size_t i = 0; ap->disabled && ap->disabled[i]; i++)
                if (strcmp(ap->disabled[i], name) == 0) {
                        k = asprintf(ret_reason,
                                     "defined in %s and disabled by disabledMcpjsonServers in %s",
                                     source, ap->disabled_in[i]);
                        return k < 0 ? -ENOMEM : 1;
                }
        if (strv_contains((char **)L->src->project_servers, name))
                return 0;
        if (host == HOST_CLAUDE && (ap->all_in || strv_contains(ap->enabled, name)))
                return 0;
        if (host == HOST_CLAUDE)
                k = asprintf(ret_reason,
                             "defined in %s and not approved: add it to enabledMcpjsonServers in "
                             "~/.claude/settings.json (Claude Code; the project's own "
                             ".claude/settings*.json cannot approve it), or to project_servers in "
                             "corral's config",
                             source);
        else
                k = asprintf(ret_reason,
                             "defined in %s, and %s records no approvals (it asks each time): add "
                             "it to project_servers in corral's config to use it",
                             source, host_names[host]);
        return k < 0 ? -ENOMEM : 1;
}

/* Keep a project's server that is not offered, with `reason` (taken). Its
 * entry is not read further: only its transport, for listings. */
static int skip_add(struct loader *L, const char *name, json_t *entry, const char *source,
                    char *reason)
{
        if (L->n_skipped >= MAX_SERVERS) {
                if (!L->skipped_warned)
                        log_warn("more than %d skipped MCP servers; '%s' in %s and later ones "
                                 "are not listed",
                                 MAX_SERVERS, name, source);
                L->skipped_warned = true;
                free(reason);
                return 0;
        }
        struct registry_skip *k = &L->skipped[L->n_skipped];
        k->name = strdup(name);
        k->source = strdup(source);
        k->reason = reason;
        const char *type = json_string_value(json_object_get(entry, "type"));
        k->transport =
            (type && strcmp(type, "stdio") != 0) ||
                    (!type && !json_object_get(entry, "command") && json_object_get(entry, "url"))
                ? UP_HTTP
                : UP_STDIO;
        if (!k->name || !k->source) {
                free(k->name);
                free(k->source);
                free(reason);
                *k = (struct registry_skip){0};
                return -ENOMEM;
        }
        log_debug("MCP server '%s' is skipped: %s", name, reason);
        L->n_skipped++;
        return 0;
}

static int add_entry(struct loader *L, const char *name, json_t *entry, const char *source,
                     bool own, enum project_host host, struct err *e)
{
        if (!registry_name_valid(name)) {
                char shown[80];
                str_printable(name, shown, sizeof(shown));
                if (own)
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "%s: \"%s\" is not a valid server name (1 to %d of "
                                       "A-Z a-z 0-9 _ . -)",
                                       source, shown, MAX_NAME);
                log_warn("%s: \"%s\" is not a valid MCP server name; ignored", source, shown);
                return 0;
        }
        if (name_taken(L, name)) {
                log_debug("%s: MCP server '%s' is already defined; this one is ignored", source,
                          name);
                /* Said where a person looks: a clone that reuses the name
                 * of one of theirs gets theirs, never its own. */
                const struct upstream_spec *had = NULL;
                for (size_t i = 0; i < L->n && !had; i++)
                        if (strcmp(L->v[i].name, name) == 0)
                                had = &L->v[i];
                char *reason = NULL;
                if (host != NOT_PROJECT && had &&
                    (asprintf(&reason,
                              "a server named %s is already defined in %s, which is used: a "
                              "project's file cannot replace it",
                              name, had->source) < 0 ||
                     skip_add(L, name, entry, source, reason) < 0))
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                return 0;
        }
        if (strcmp(name, "corral") == 0) {
                log_debug("%s: skipping MCP server 'corral' (corral itself)", source);
                return 0;
        }
        if (host != NOT_PROJECT) {
                char *reason;
                int d = project_decision(L, host, name, source, &reason);
                if (d != 0 && (d < 0 || skip_add(L, name, entry, source, reason) < 0))
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                if (d != 0)
                        return 0;
        }
        if (L->n >= MAX_SERVERS) {
                if (!L->full_warned)
                        log_warn("more than %d MCP servers; '%s' in %s and later ones are "
                                 "ignored",
                                 MAX_SERVERS, name, source);
                L->full_warned = true;
                return 0;
        }
        struct upstream_spec *spec = &L->v[L->n];
        struct entry x = {.L = L,
                          .name = name,
                          .source = source,
                          .own = own,
                          .project = host != NOT_PROJECT,
                          .spec = spec,
                          .e = e};
        int r = entry_parse(&x, entry);
        if (r == 2) {
                log_debug("%s: skipping MCP server '%s': it runs corral itself", source, name);
                spec_free(spec);
                if (strv_len(L->claimed) < MAX_SERVERS && strv_push(&L->claimed, strdup(name)) < 0)
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                return 0;
        }
        if (r < 0) {
                spec_free(spec);
                if (r == -ENOMEM)
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                return r;
        }
        L->n++;
        return 0;
}

static int add_servers(struct loader *L, json_t *servers, const char *source,
                       enum project_host host, struct err *e)
{
        const char *name;
        json_t *entry;
        size_t seen = 0;
        json_object_foreach(servers, name, entry)
        {
                if (++seen > MAX_SCAN) {
                        log_warn("%s: more than %d server entries; the rest are ignored", source,
                                 MAX_SCAN);
                        break;
                }
                int r = add_entry(L, name, entry, source, false, host, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* `key` of a host file's object, when it is an object of servers. */
static json_t *servers_in(json_t *obj, const char *key, const char *path)
{
        json_t *s = json_object_get(obj, key);
        if (s && !json_is_object(s)) {
                log_warn("%s: \"%s\" is not an object; ignored", path, key);
                return NULL;
        }
        return s;
}

static int load_simple(struct loader *L, const char *path, const char *key, enum project_host host,
                       struct err *e)
{
        json_auto_t *root = load_host_file(path);
        if (!root)
                return 0;
        json_t *s = servers_in(root, key, path);
        int r = s ? add_servers(L, s, path, host, e) : 0;
        return r;
}

/* ~/.claude.json's entry for this project: keyed by the project's
 * directory exactly as Claude Code wrote it. */
static json_t *claude_project(struct loader *L, json_t *root)
{
        json_t *projects = json_object_get(root, "projects");
        json_t *p =
            json_is_object(projects) && L->src->cwd ? json_object_get(projects, L->src->cwd) : NULL;
        return json_is_object(p) ? p : NULL;
}

static int load_claude_json(struct loader *L, json_t *root, const char *path, struct err *e)
{
        if (!root)
                return 0;
        int r = 0;
        /* Claude Code's local scope: servers of this project only, which
         * the person added (they live in the person's file, not the
         * project's). */
        json_t *project = claude_project(L, root);
        if (project) {
                json_t *s = servers_in(project, "mcpServers", path);
                if (s)
                        r = add_servers(L, s, path, NOT_PROJECT, e);
        }
        json_t *s = r == 0 ? servers_in(root, "mcpServers", path) : NULL;
        if (s)
                r = add_servers(L, s, path, NOT_PROJECT, e);
        return r;
}

/* Claude Code's approval keys of `obj`: a settings file, or ~/.claude.json's
 * entry for this project (where older versions kept them). `trusted`: a
 * file of the person's, outside the project, whose approvals count; a
 * file of the project's only refuses. */
static int approvals_read(struct loader *L, json_t *obj, const char *path, bool trusted)
{
        static const char *const keys[] = {"disabledMcpjsonServers", "enabledMcpjsonServers"};
        struct approvals *ap = &L->ap;
        if (!json_is_object(obj))
                return 0;
        for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
                json_t *list = json_object_get(obj, keys[k]);
                if (!list || (k == 1 && !trusted))
                        continue;
                if (!json_is_array(list)) {
                        log_warn("%s: %s is not a list; ignored", path, keys[k]);
                        continue;
                }
                size_t i;
                json_t *v;
                json_array_foreach(list, i, v)
                {
                        const char *name = json_string_value(v);
                        if (i >= MAX_SCAN) {
                                log_warn("%s: %s has more than %d names; the rest are ignored",
                                         path, keys[k], MAX_SCAN);
                                break;
                        }
                        if (!name || !registry_name_valid(name))
                                continue;
                        if (k == 1) {
                                if (strv_push(&ap->enabled, strdup(name)) < 0)
                                        return -ENOMEM;
                        } else if (strv_push(&ap->disabled, strdup(name)) < 0 ||
                                   strv_push(&ap->disabled_in, strdup(path)) < 0) {
                                return -ENOMEM;
                        }
                }
        }
        if (trusted && !ap->all_in &&
            json_is_true(json_object_get(obj, "enableAllProjectMcpServers")))
                if (!(ap->all_in = strdup(path)))
                        return -ENOMEM;
        return 0;
}

/* Where Claude Code records what the person said of a project's servers. */
static int load_approvals(struct loader *L, json_t *claude_json, const char *claude_json_path)
{
        const char *home = L->src->home, *cwd = L->src->cwd;
        static const struct {
                bool in_project;
                const char *rel;
        } files[] = {
            {false, ".claude/settings.json"},
            {true, ".claude/settings.json"},
            {true, ".claude/settings.local.json"},
        };
        int r = claude_json
                    ? approvals_read(L, claude_project(L, claude_json), claude_json_path, true)
                    : 0;
        for (size_t i = 0; r == 0 && i < ARRAY_SIZE(files); i++) {
                const char *base = files[i].in_project ? cwd : home;
                _cleanup_free_ char *path = NULL;
                if (!base)
                        continue;
                /* With the project in the home directory, ~/.claude is the
                 * person's own: read once, as such. */
                if (files[i].in_project && L->cwd_is_home)
                        continue;
                if (asprintf(&path, "%s/%s", base, files[i].rel) < 0)
                        return -ENOMEM;
                json_auto_t *root = load_host_file(path);
                r = approvals_read(L, root, path, !files[i].in_project);
        }
        return r;
}

static int name_cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.json files of <xdg_config>/mcp/servers, by name: each either a file in one of
 * the hosts' formats or one server named after the file. */
static int load_servers_dir(struct loader *L, const char *dir, struct err *e)
{
        DIR *d = opendir(dir);
        if (!d) {
                if (errno != ENOENT && errno != ENOTDIR)
                        log_warn("%s: cannot read: %s", dir, strerror(errno));
                return 0;
        }
        char **names = NULL;
        size_t n = 0;
        int r = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                size_t len = strlen(de->d_name);
                if (de->d_name[0] == '.' || len <= 5 || strcmp(de->d_name + len - 5, ".json") != 0)
                        continue;
                if (n >= MAX_DIR_FILES) {
                        log_warn("%s: more than %d files; the rest are ignored", dir,
                                 MAX_DIR_FILES);
                        break;
                }
                if (strv_push(&names, strdup(de->d_name)) < 0) {
                        r = err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                        break;
                }
                n++;
        }
        closedir(d);
        if (n)
                qsort(names, n, sizeof(char *), name_cmp);
        for (size_t i = 0; i < n && r == 0; i++) {
                _cleanup_free_ char *path = NULL;
                if (asprintf(&path, "%s/%s", dir, names[i]) < 0) {
                        r = err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                        break;
                }
                json_auto_t *root = load_host_file(path);
                if (!root)
                        continue;
                json_t *s = servers_in(root, "mcpServers", path);
                if (!s && !json_object_get(root, "mcpServers"))
                        s = servers_in(root, "servers", path);
                if (s) {
                        r = add_servers(L, s, path, NOT_PROJECT, e);
                } else if (json_object_get(root, "command") || json_object_get(root, "url")) {
                        names[i][strlen(names[i]) - 5] = '\0';
                        r = add_entry(L, names[i], root, path, false, NOT_PROJECT, e);
                } else if (!json_object_get(root, "mcpServers") &&
                           !json_object_get(root, "servers")) {
                        log_warn("%s: neither servers nor a server (\"command\" or \"url\"); "
                                 "ignored",
                                 path);
                }
        }
        strv_free(names);
        return r;
}

static int load_own(struct loader *L, json_t *own, struct err *e)
{
        if (!own)
                return 0;
        if (!json_is_object(own))
                return err_set(e, ERR_CONFIG, EINVAL, "%s: servers must be an object", OWN_SOURCE);
        if (json_object_size(own) > MAX_SERVERS)
                return err_set(e, ERR_CONFIG, EINVAL, "%s: more than %d servers", OWN_SOURCE,
                               MAX_SERVERS);
        const char *name;
        json_t *entry;
        json_object_foreach(own, name, entry)
        {
                int r = add_entry(L, name, entry, OWN_SOURCE, true, NOT_PROJECT, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int load_hosts(struct loader *L, struct err *e)
{
        const struct registry_sources *src = L->src;
        const char *home = src->home, *cwd = src->cwd;
        _cleanup_free_ char *xdg = NULL;
        /* As the XDG spec says, a relative or empty value is ignored. */
        bool xdg_given = src->xdg_config && src->xdg_config[0] == '/';
        if (xdg_given)
                xdg = strdup(src->xdg_config);
        else if (home && asprintf(&xdg, "%s/.config", home) < 0)
                xdg = NULL;
        if (!xdg && (xdg_given || home))
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");

        /* ~/.claude.json holds servers and, for this project, approvals:
         * read once. */
        _cleanup_free_ char *claude_path = NULL;
        json_auto_t *claude_json = NULL;
        if (home) {
                if (asprintf(&claude_path, "%s/.claude.json", home) < 0)
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                claude_json = load_host_file(claude_path);
        }
        if (load_approvals(L, claude_json, claude_path) < 0)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");

        /* In precedence order: the user's own files, Claude Code's first, as
         * corral usually runs under it, then a project's. A project's file
         * comes last so that it can never take the name of a server of
         * the person's own (a clone's "github" in place of theirs): an
         * approval by name is an approval of the person's definition
         * first. */
        static const struct {
                int base; /* 0 cwd, 1 home, 2 xdg_config */
                const char *path, *key;
                bool claude_json;
                enum project_host host; /* of a project's file */
        } files[] = {
            {1, ".claude.json", NULL, true, NOT_PROJECT},
            {1, ".cursor/mcp.json", "mcpServers", false, NOT_PROJECT},
            {2, "Code/User/mcp.json", "servers", false, NOT_PROJECT},
            {2, "Claude/claude_desktop_config.json", "mcpServers", false, NOT_PROJECT},
            {0, ".mcp.json", "mcpServers", false, HOST_CLAUDE},
            {0, ".vscode/mcp.json", "servers", false, HOST_VSCODE},
            {0, ".cursor/mcp.json", "mcpServers", false, HOST_CURSOR},
        };
        /* Two passes: the person's files, then the project's; the shared
         * folder of servers between them, as the person's. */
        for (int pass = 0; pass < 2; pass++) {
                for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
                        const char *base = files[i].base == 0   ? cwd
                                           : files[i].base == 1 ? home
                                                                : xdg;
                        if (!base || (files[i].base == 0) != (pass == 1))
                                continue;
                        /* With the project in the home directory,
                         * ~/.cursor/mcp.json is the person's own: read in
                         * the first pass, as such. */
                        if (files[i].host == HOST_CURSOR && L->cwd_is_home)
                                continue;
                        _cleanup_free_ char *path = NULL;
                        if (asprintf(&path, "%s/%s", base, files[i].path) < 0)
                                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                        int r = files[i].claude_json
                                    ? load_claude_json(L, claude_json, claude_path, e)
                                    : load_simple(L, path, files[i].key, files[i].host, e);
                        if (r < 0)
                                return r;
                }
                if (pass == 0 && xdg) {
                        _cleanup_free_ char *dir = NULL;
                        if (asprintf(&dir, "%s/mcp/servers", xdg) < 0)
                                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                        int r = load_servers_dir(L, dir, e);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int registry_load(const struct registry_sources *src, struct registry *ret, struct err *e)
{
        struct loader L = {.src = src};
        int r = 0;
        char real_cwd[PATH_MAX], real_home[PATH_MAX];
        L.cwd_is_home = src->cwd && src->home &&
                        (strcmp(src->cwd, src->home) == 0 ||
                         (realpath(src->cwd, real_cwd) && realpath(src->home, real_home) &&
                          strcmp(real_cwd, real_home) == 0));
        L.v = calloc(MAX_SERVERS, sizeof(*L.v));
        L.skipped = calloc(MAX_SERVERS, sizeof(*L.skipped));
        if (!L.v || !L.skipped) {
                free(L.v);
                free(L.skipped);
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        if (src->self_exe) {
                char real[PATH_MAX];
                L.self = strdup(realpath(src->self_exe, real) ? real : src->self_exe);
                if (!L.self)
                        r = err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        if (r == 0)
                r = load_own(&L, src->own, e);
        if (r == 0 && !src->only_own)
                r = load_hosts(&L, e);
        struct registry reg = {.v = L.v, .n = L.n, .skipped = L.skipped, .n_skipped = L.n_skipped};
        free(L.self);
        strv_free(L.claimed);
        strv_free(L.ap.enabled);
        strv_free(L.ap.disabled);
        strv_free(L.ap.disabled_in);
        free(L.ap.all_in);
        if (r < 0) {
                registry_free(&reg);
                return r;
        }
        /* Every entry's secrets, for every message from now on. */
        reg.mask = mask_new();
        for (size_t i = 0; reg.mask && i < reg.n; i++)
                if (mask_add_strv(reg.mask, reg.v[i].secrets) < 0)
                        reg.mask = mask_free(reg.mask);
        if (!reg.mask) {
                registry_free(&reg);
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        /* An error may quote a value that another entry holds as a secret
         * (the same token in two servers): mask each with all of them,
         * then cut it. */
        for (size_t i = 0; i < reg.n; i++) {
                if (!reg.v[i].error)
                        continue;
                char *m = registry_mask(&reg, reg.v[i].error, MAX_ERROR);
                if (!m) {
                        registry_free(&reg);
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                }
                free(reg.v[i].error);
                reg.v[i].error = m;
                log_debug("MCP server '%s' cannot be used: %s", reg.v[i].name, m);
        }
        *ret = reg;
        return 0;
}

void registry_free(struct registry *r)
{
        if (!r)
                return;
        for (size_t i = 0; i < r->n; i++)
                spec_free(&r->v[i]);
        free(r->v);
        r->v = NULL;
        r->n = 0;
        for (size_t i = 0; i < r->n_skipped; i++) {
                free(r->skipped[i].name);
                free(r->skipped[i].source);
                free(r->skipped[i].reason);
        }
        free(r->skipped);
        r->skipped = NULL;
        r->n_skipped = 0;
        r->mask = mask_free(r->mask);
}

const struct upstream_spec *registry_find(const struct registry *r, const char *name)
{
        for (size_t i = 0; r && name && i < r->n; i++)
                if (strcmp(r->v[i].name, name) == 0)
                        return &r->v[i];
        return NULL;
}

const struct registry_skip *registry_find_skipped(const struct registry *r, const char *name)
{
        for (size_t i = 0; r && name && i < r->n_skipped; i++)
                if (strcmp(r->skipped[i].name, name) == 0)
                        return &r->skipped[i];
        return NULL;
}
