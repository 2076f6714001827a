#include "cli/cli.h"

#include "bridge/policy.h"
#include "core/confine.h"
#include "core/log.h"
#include "upstream/registry.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern const char corral_default_policy[];

int cli_registry_load(const struct config *cfg, struct registry *ret, struct err *e)
{
        char cwd[PATH_MAX], self[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)))
                cwd[0] = '\0';
        if (!realpath("/proc/self/exe", self))
                self[0] = '\0';
        struct registry_sources src = {
            .home = getenv("HOME"),
            .cwd = cwd[0] ? cwd : NULL,
            .xdg_config = getenv("XDG_CONFIG_HOME"),
            .own = cfg->servers,
            .self_exe = self[0] ? self : NULL,
            .project_servers = cfg->project_servers,
            .only_own = !cfg->host_servers,
        };
        return registry_load(&src, ret, e);
}

int cli_config(int argc, char **argv, struct config *cfg, char ***rest, int *n_rest)
{
        struct err e = {0};
        int r;
        config_defaults(cfg);
        *rest = calloc((size_t)argc + 1, sizeof(char *));
        *n_rest = 0;
        if (!*rest)
                return -ENOMEM;
        /* The file first (lowest precedence), from --config or CORRAL_CONFIG. */
        const char *file = getenv("CORRAL_CONFIG");
        for (int i = 0; i < argc; i++)
                if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
                        file = argv[i + 1];
                else if (strncmp(argv[i], "--config=", 9) == 0)
                        file = argv[i] + 9;
        if (file) {
                cfg->settings_given = true; /* a file named is a setting */
                r = config_load_file(cfg, file, true, &e);
        } else {
                _cleanup_free_ char *def = config_default_path();
                r = def ? config_load_file(cfg, def, false, &e) : 0;
        }
        if (r == 0)
                r = config_load_env(cfg, &e);
        /* A flag given again: a list takes the items of each (--listen A
         * --listen B), any other the last value. */
        char given[64][64];
        size_t n_given = 0;
        for (int i = 0; r == 0 && i < argc; i++) {
                const char *a = argv[i];
                if (strncmp(a, "--", 2) != 0 || strcmp(a, "--") == 0) {
                        (*rest)[(*n_rest)++] = argv[i];
                        continue;
                }
                char key[64];
                const char *val = strchr(a, '=');
                size_t klen = val ? (size_t)(val - a - 2) : strlen(a + 2);
                if (klen >= sizeof(key)) {
                        (*rest)[(*n_rest)++] = argv[i];
                        continue;
                }
                memcpy(key, a + 2, klen);
                key[klen] = '\0';
                for (char *p = key; *p; p++)
                        if (*p == '-')
                                *p = '_';
                bool known = strcmp(key, "config") == 0;
                for (const char *const *k = config_key_names(); *k && !known; k++)
                        known = strcmp(*k, key) == 0;
                if (!known) {
                        (*rest)[(*n_rest)++] = argv[i];
                        continue;
                }
                if (!val) {
                        if (i + 1 >= argc) {
                                fprintf(stderr, "corral: %s needs a value\n", a);
                                return -EINVAL;
                        }
                        val = argv[++i];
                } else {
                        val++;
                }
                if (strcmp(key, "config") == 0)
                        continue;
                char source[80];
                snprintf(source, sizeof(source), "--%.60s", a + 2);
                if (strchr(source, '='))
                        *strchr(source, '=') = '\0';
                bool again = false;
                for (size_t g = 0; g < n_given && !again; g++)
                        again = strcmp(given[g], key) == 0;
                if (!again && n_given < ARRAY_SIZE(given))
                        snprintf(given[n_given++], sizeof(given[0]), "%s", key);
                r = again ? config_append(cfg, key, val, source, &e)
                          : config_set(cfg, key, val, source, &e);
        }
        if (r == 0)
                r = config_check(cfg, &e);
        if (r < 0) {
                fprintf(stderr, "corral: invalid configuration: %s\n", e.msg);
                return r;
        }
        log_max_level = cfg->log_level;
        return 0;
}

/* A found socket that is Docker Engine's by its name. */
static bool docker_socket(const char *url)
{
        size_t n = strlen(url);
        return n >= 12 && strcmp(url + n - 12, "/docker.sock") == 0;
}

void cli_engine_open(struct cli_engine *ce, struct loop *l, const struct config *cfg,
                     bool allow_private)
{
        *ce = (struct cli_engine){.priv = {.pid = -1}};
        _cleanup_free_ char *url = NULL;
        struct err perr = {0};
        ce->explicit_engine = cfg->engine != NULL;
        /* Podman's API cannot choose a runtime per container: for gVisor,
         * unless an engine is named, corral runs its own Podman service
         * with it (a Docker Engine socket, when that is the one found,
         * takes it per container). */
        const char *runtime = config_runsc(cfg) ? CONFIG_RUNSC_NAME : NULL;
        int discovered = 0;
        if (cfg->engine) {
                url = strdup(cfg->engine);
                const char *path = strncmp(cfg->engine, "unix://", 7) == 0 ? cfg->engine + 7
                                   : cfg->engine[0] == '/'                 ? cfg->engine
                                                                           : NULL;
                if (path && !unix_socket_answers(path))
                        log_warn("the engine named by the setting `engine` (%s) does not answer: "
                                 "every call will fail until it does",
                                 path);
        } else if ((discovered = engine_discover(&url, &ce->err)) == -ENOENT ||
                   (discovered == 0 && runtime && !docker_socket(url))) {
                _cleanup_free_ char *found = TAKE_PTR(url);
                int r = allow_private ? private_engine_start(&ce->priv, runtime, &perr) : -ENOENT;
                if (r < 0 && found)
                        err_set(&ce->err, ERR_ENGINE, ENOENT,
                                "runtime runsc: the Podman service at %s runs containers with its "
                                "own default, and corral could not start one with %s%s%s",
                                found, runtime, r == -ENOENT ? "" : ": ",
                                r == -ENOENT ? "" : perr.msg);
                else if (r < 0 && r != -ENOENT)
                        err_prefix(&ce->err, "%s; and", perr.msg);
                if (r < 0)
                        return;
                url = strdup(ce->priv.url);
        } else if (discovered < 0) {
                return; /* a named engine that does not answer: no fall-through */
        }
        if (!url || engine_new(l, url, 4 << 20, &ce->eng, &ce->err) < 0) {
                ce->eng = NULL;
                return;
        }
        log_debug("using the container engine at %s", url);
}

void cli_engine_close(struct cli_engine *ce)
{
        engine_free(ce->eng);
        ce->eng = NULL;
        /* Its files go before it stops (which may take seconds): a host
         * that gives up on corral meanwhile (SIGKILL) leaves none behind. */
        if (ce->priv.log)
                unlink(ce->priv.log);
        if (ce->priv.path)
                unlink(ce->priv.path);
        private_engine_stop(&ce->priv);
}

int cli_confine(const struct config *cfg)
{
        if (!cfg->confine) {
                log_warn("not confining corral itself (confine: false): it keeps every right "
                         "of its user");
                return 0;
        }
        struct confinement c;
        struct err e = {0};
        if (confine_self(&c, &e) < 0) {
                log_err("%s (set confine to false to run unconfined, at your own risk)", e.msg);
                return -1;
        }
        log_info("confined: no-new-privileges, no capabilities%s, seccomp filter denying %u "
                 "calls%s%s",
                 c.bounding ? " (bounding set empty)" : "", c.n_denied, c.note[0] ? "; " : "",
                 c.note);
        return 0;
}

bool cli_instance_alive(long pid)
{
        if (pid <= 0 || pid > INT_MAX || (kill((pid_t)pid, 0) < 0 && errno != EPERM))
                return false;
        char comm[32];
        return proc_comm(pid, comm, sizeof(comm)) == 0 && strcmp(comm, "corral") == 0;
}

/* The pid in a file name that is one corral's own: PREFIX-PID.SUFFIX with
 * one of the suffixes; else 0. */
static long own_file_pid(const char *name)
{
        static const char *const kinds[][2] = {
            {"status-", ".json"},
            {"status-", ".json.tmp"},
            {"podman-", ".sock"},
            {"podman-", ".log"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
                size_t n = strlen(kinds[i][0]);
                if (strncmp(name, kinds[i][0], n) != 0)
                        continue;
                char *end;
                errno = 0;
                long pid = strtol(name + n, &end, 10);
                if (!errno && end != name + n && (name[n] >= '1' && name[n] <= '9') &&
                    strcmp(end, kinds[i][1]) == 0)
                        return pid;
        }
        return 0;
}

void cli_runtime_sweep(void)
{
        char dir[256];
        struct err e = {0};
        if (runtime_dir(dir, sizeof(dir), &e) < 0)
                return;
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                long pid = own_file_pid(de->d_name);
                if (pid <= 0 || pid == (long)getpid() || cli_instance_alive(pid))
                        continue;
                char path[600];
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                if (unlink(path) == 0)
                        log_info("removed %s, left by a corral that was killed", path);
        }
        if (d)
                closedir(d);
}

int cli_policy_load(const struct config *cfg, struct policy **ret, struct err *e)
{
        if (cfg->policy)
                return policy_load(corral_default_policy, cfg->policy, true, ret, e);
        /* The first file that exists wins; one that exists in any form (a
         * link to nothing, a directory) but cannot be read or parsed is an
         * error, never a reason to try the next: a policy the user wrote
         * must not be skipped for a weaker one. */
        char *cands[2] = {NULL, NULL};
        if (cfg->config_file) {
                char real[PATH_MAX];
                _cleanup_free_ char *copy =
                    strdup(realpath(cfg->config_file, real) ? real : cfg->config_file);
                if (!copy || asprintf(&cands[0], "%s/policy.json", dirname(copy)) < 0)
                        return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        cands[1] = xdg_path("XDG_CONFIG_HOME", ".config", "corral/policy.json");
        int r = 0;
        struct policy *p = NULL;
        for (size_t i = 0; i < ARRAY_SIZE(cands) && r == 0 && !p; i++) {
                struct stat st;
                if (!cands[i])
                        continue;
                if (lstat(cands[i], &st) < 0 && errno == ENOENT)
                        continue;
                r = policy_load(corral_default_policy, cands[i], true, &p, e);
        }
        free(cands[0]);
        free(cands[1]);
        if (r == 0 && !p)
                r = policy_load(corral_default_policy, NULL, false, &p, e);
        if (r == 0)
                *ret = p;
        return r;
}
