#include "cli/cli.h"

#include "bridge/egress.h"
#include "bridge/policy.h"
#include "core/confine.h"
#include "core/log.h"
#include "engine/self.h"
#include "sandbox/images.h"
#include "sandbox/profile.h"
#include "sandbox/sandbox.h"
#include "upstream/registry.h"

#include <dirent.h>
#include <signal.h>

#include <cap-ng.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

static int failures;

static void report(bool ok, const char *what, const char *detail, const char *fix)
{
        printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail ? ": " : "", detail ? detail : "");
        if (!ok) {
                failures++;
                if (fix)
                        printf("     fix: %s\n", fix);
        }
}

static void note(const char *what, const char *detail)
{
        printf("note %s: %s\n", what, detail);
}

enum cgroup_mode { CG_V2, CG_HYBRID, CG_V1, CG_UNKNOWN };

static enum cgroup_mode cgroup_mode(void)
{
        struct statfs fs;
        if (statfs("/sys/fs/cgroup", &fs) < 0)
                return CG_UNKNOWN;
        if (fs.f_type == CGROUP2_SUPER_MAGIC)
                return CG_V2;
        if (fs.f_type != TMPFS_MAGIC)
                return CG_UNKNOWN;
        struct statfs u;
        if (statfs("/sys/fs/cgroup/unified", &u) == 0 && u.f_type == CGROUP2_SUPER_MAGIC)
                return CG_HYBRID;
        return CG_V1;
}

/* gVisor's platform in the runtime's flags (Docker's runtimeArgs) or in
 * the wrapper contrib/setup writes, with the reason it gives there. */
static void gvisor_platform(json_t *entry, char *platform, size_t psize, char *why, size_t wsize)
{
        size_t i;
        json_t *a;
        json_array_foreach(json_object_get(entry, "runtimeArgs"), i, a)
        {
                const char *v = json_string_value(a);
                if (v && strncmp(v, "--platform=", 11) == 0)
                        snprintf(platform, psize, "%.20s", v + 11);
        }
        const char *path = json_string_value(json_object_get(entry, "path"));
        FILE *f = path && path[0] == '/' ? fopen(path, "re") : NULL;
        char line[512];
        for (int n = 0; f && n < 20 && fgets(line, sizeof(line), f); n++) {
                line[strcspn(line, "\n")] = '\0';
                char *p = strstr(line, "--platform=");
                if (p)
                        snprintf(platform, psize, "%.*s", (int)strcspn(p + 11, " \""), p + 11);
                if (strncmp(line, "# Platform ", 11) == 0 && strchr(line, ':'))
                        snprintf(why, wsize, "%.300s", strchr(line, ':') + 2);
        }
        if (f)
                fclose(f);
}

/* runtime runsc: the engine offers corral-runsc (Podman: as the service's
 * runtime), on which platform and why. */
static void check_gvisor(json_t *info, bool podman)
{
        char detail[900], platform[40] = "ptrace (gVisor's default)", why[320] = "";
        json_t *entry = json_object_get(json_object_get(info, "Runtimes"), CONFIG_RUNSC_NAME);
        if (!sandbox_runsc_offered(info, podman)) {
                snprintf(detail, sizeof(detail), "the engine %s",
                         podman ? "is a Podman service that does not run corral-runsc"
                                : "has no runtime corral-runsc");
                report(false, "runtime runsc", detail,
                       podman ? "start it as `podman --runtime corral-runsc system service`, or "
                                "leave `engine` unset (corral starts one); run contrib/setup first"
                              : "run contrib/setup (it registers corral-runsc), then restart "
                                "dockerd");
                return;
        }
        gvisor_platform(entry, platform, sizeof(platform), why, sizeof(why));
        snprintf(detail, sizeof(detail), "gVisor as %s, platform %s%s%s", CONFIG_RUNSC_NAME,
                 platform, why[0] ? ": " : "", why);
        report(true, "runtime runsc", detail, NULL);
}

struct smoke {
        struct loop *loop;
        bool done;
        enum sandbox_status status;
        char out[256];
        char err[1100];
};

static void smoke_done(void *userdata, const struct sandbox_result *res)
{
        struct smoke *s = userdata;
        s->done = true;
        s->status = res->status;
        snprintf(s->out, sizeof(s->out), "%.*s", (int)res->out.data.len,
                 res->out.data.data ? res->out.data.data : "");
        snprintf(s->err, sizeof(s->err), "%s", res->error_message ? res->error_message : "");
}

static void smoke_drained(void *userdata)
{
        struct smoke *s = userdata;
        s->done = true;
}

static void check_sandbox(struct loop *l, const struct config *cfg, struct engine *eng)
{
        struct sandbox_mgr *m;
        struct sandbox *sb;
        struct smoke s = {.loop = l};
        /* The smoke test is also the seccomp probe: two calls the profile
         * closes (and one engine's default leaves open each), made the way
         * user code would make them. */
        struct sandbox_request req = {
            .lang = LANG_PYTHON,
            .code = "import os, ctypes, errno\n"
                    "libc = ctypes.CDLL(None, use_errno=True)\n"
                    "def probe(fn, *args):\n"
                    "    r = fn(*args)\n"
                    "    return 'allowed' if r >= 0 else errno.errorcode.get(ctypes.get_errno())\n"
                    /* unshare through the C library: its number differs
                     * between architectures; io_uring_setup is 425 on all. */
                    /* PR_GET_NO_NEW_PRIVS: gVisor's /proc/self/status
                     * has no NoNewPrivs line. */
                    "print(os.getuid(), libc.prctl(39, 0, 0, 0, 0), "
                    "probe(libc.unshare, 0x10000000), probe(libc.syscall, 425, 1, 0), "
                    "os.uname().release)",
            .timeout_s = 30,
        };
        if (sandbox_mgr_new(l, cfg, eng, &m) < 0) {
                report(false, "sandbox", "cannot start a sandbox", NULL);
                return;
        }
        struct err pe = {0};
        if (sandbox_mgr_prepare(m, &pe) < 0) {
                report(false, "settings", pe.msg, "`corral serve` will not start with these");
                sandbox_mgr_free(m);
                return;
        }
        const struct sandbox_profile *prof = sandbox_mgr_profile(m);
        report(true, "seccomp", prof->summary, NULL);
        if (sandbox_run(m, &req, smoke_done, &s, &sb) < 0) {
                sandbox_mgr_free(m);
                report(false, "sandbox", "cannot start a sandbox", NULL);
                return;
        }
        while (!s.done)
                loop_iterate(l, -1);
        s.done = false;
        sandbox_mgr_shutdown(m, smoke_drained, &s);
        while (!s.done)
                loop_iterate(l, -1);
        bool engine_profile = !prof->seccomp_json;
        sandbox_mgr_free(m);
        bool ok = s.status == ST_OK && strncmp(s.out, "65534 1", 7) == 0;
        char detail[1400];
        if (ok)
                snprintf(detail, sizeof(detail), "a hardened sandbox ran Python as uid 65534");
        else
                snprintf(detail, sizeof(detail), "status %s, output \"%.60s\" %s",
                         sandbox_status_name(s.status), s.out, s.err);
        report(ok, "sandbox", detail,
               "see the failures above; `corral run -c 'print(1)'` shows the whole error");
        if (!ok)
                return;
        char userns[32] = "", uring[32] = "", release[65] = "";
        sscanf(s.out, "%*d %*d %31s %31s %64s", userns, uring, release);
        if (config_runsc(cfg)) {
                /* The second wall: the code saw gVisor's kernel, not the host's. */
                struct utsname host;
                bool other = uname(&host) == 0 && release[0] && strcmp(release, host.release) != 0;
                snprintf(detail, sizeof(detail),
                         "the sandbox's kernel is gVisor's (release %s; the host's is %s)", release,
                         other ? host.release : "the same");
                report(other, "gVisor kernel", detail,
                       "the sandbox ran on the host's kernel: the engine's corral-runsc is not "
                       "gVisor; run contrib/setup");
        }
        snprintf(detail, sizeof(detail),
                 "in the sandbox, unshare(CLONE_NEWUSER) gave %s and io_uring_setup gave %s",
                 userns, uring);
        bool denied = strcmp(userns, "EPERM") == 0 && strcmp(uring, "EPERM") == 0;
        if (engine_profile)
                note("seccomp probe", detail);
        else
                report(denied, "seccomp probe", detail,
                       "the engine did not apply corral's profile: check that it can read the "
                       "profile's file (Podman) and that seccomp is enabled in its kernel");
}

/* A number from one of the kernel's KSM files, or -1. */
static long long ksm_value(const char *name)
{
        char path[128];
        long long v = -1;
        snprintf(path, sizeof(path), "/sys/kernel/mm/ksm/%s", name);
        FILE *f = fopen(path, "r");
        if (f && fscanf(f, "%lld", &v) != 1)
                v = -1;
        if (f)
                fclose(f);
        return v;
}

/* Page merging (memory_merge): ready sandboxes offer their preloaded heap
 * to KSM, which merges only while the host runs it. */
static void check_merge(const struct config *cfg)
{
        char detail[300];
        long long run = ksm_value("run");
        if (!cfg->memory_merge) {
                note("page merging",
                     run == 1 ? "off (memory_merge: false; the host's merger runs): each ready "
                                "sandbox keeps its own copy of its preloaded modules"
                              : "off (memory_merge: false): each ready sandbox keeps its own "
                                "copy of its preloaded modules");
                return;
        }
        if (run < 0) {
                note("page merging", "off: this kernel has no KSM (/sys/kernel/mm/ksm)");
                return;
        }
        if (!(run & 1)) {
                note("page merging",
                     "off: memory_merge is true but the host's merger is stopped "
                     "(/sys/kernel/mm/ksm/run is 0); CORRAL_SETUP_KSM=1 contrib/setup starts it, "
                     "or: echo 1 | sudo tee /sys/kernel/mm/ksm/run");
                return;
        }
        long long sharing = ksm_value("pages_sharing");
        long page = sysconf(_SC_PAGESIZE);
        snprintf(detail, sizeof(detail),
                 "on: ready sandboxes offer their preloaded heap to the kernel's merger, "
                 "which saves %.1f MiB on this host now (pages_sharing %lld; not under gVisor)",
                 sharing > 0 ? (double)sharing * (double)page / (1 << 20) : 0.0,
                 sharing > 0 ? sharing : 0);
        note("page merging", detail);
}

/* Every `corral serve` of this user, by its status file, and how confined
 * it runs. */
static void check_instances(void)
{
        char dir[256], detail[700];
        struct err e = {0};
        if (runtime_dir(dir, sizeof(dir), &e) < 0)
                return;
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                int pid;
                char tail[8];
                if (sscanf(de->d_name, "status-%d.%7s", &pid, tail) != 2 ||
                    strcmp(tail, "json") != 0 || !cli_instance_alive(pid))
                        continue; /* left by a killed instance */
                char desc[400], what[64];
                if (confine_describe(pid, desc, sizeof(desc)) < 0)
                        continue;
                snprintf(what, sizeof(what), "corral serve (pid %d)", pid);
                snprintf(detail, sizeof(detail), "%s", desc);
                bool confined = strstr(desc, "NoNewPrivs 1") && strstr(desc, "Seccomp 2") &&
                                strstr(desc, "CapEff 0000000000000000");
                report(confined, what, detail,
                       "it runs unconfined: remove `confine: false` from its settings, or see "
                       "its log for why it could not confine itself");
        }
        if (d)
                closedir(d);
}

/* The registry and the policy, loaded as `serve` loads them: what serve
 * would refuse to start with fails here too. Each server is named with
 * where it came from, and each of a project's that is skipped with why:
 * that a clone's servers do not run is by design, but the person should
 * see it. */
static void check_bridge(const struct config *cfg)
{
        struct registry reg = {0};
        struct err e = {0};
        char detail[1400];
        if (cli_registry_load(cfg, &reg, &e) < 0) {
                report(false, "servers", e.msg,
                       "correct the servers of corral's config: `corral serve` will not start "
                       "with it");
        } else {
                snprintf(detail, sizeof(detail),
                         "%zu MCP server(s) for sandboxed code, %zu skipped", reg.n, reg.n_skipped);
                report(true, "servers", detail, NULL);
                for (size_t i = 0; i < reg.n; i++) {
                        const struct upstream_spec *s = &reg.v[i];
                        snprintf(detail, sizeof(detail), "from %s%s%s", s->source,
                                 s->error ? "; cannot be used: " : "", s->error ? s->error : "");
                        char what[100];
                        snprintf(what, sizeof(what), "server %s", s->name);
                        note(what, detail);
                }
                for (size_t i = 0; i < reg.n_skipped; i++) {
                        char what[100];
                        snprintf(what, sizeof(what), "server %s", reg.skipped[i].name);
                        snprintf(detail, sizeof(detail), "skipped: %s", reg.skipped[i].reason);
                        note(what, detail);
                }
        }
        registry_free(&reg);
        struct policy *pol = NULL;
        if (cli_policy_load(cfg, &pol, &e) < 0)
                report(false, "policy", e.msg,
                       "fix or remove that file: `corral serve` will not start with it");
        else
                report(true, "policy", policy_source_name(pol), NULL);
        if (pol) {
                char text[1200];
                policy_network_text(pol, text, sizeof(text));
                note("network", text);
        }
        policy_free(pol);
        if (egress_check_config(cfg, &e) < 0)
                report(false, "network settings", e.msg,
                       "fix that setting: `corral serve` will not start with it");
        else if (json_object_size(cfg->network_routes))
                note("network routes", "headers added for the configured origins (values masked)");
}

/* corral in a container (the laptop image): say so, and what differs. */
static void check_container(const struct config *cfg, struct engine *eng, bool podman)
{
        if (!self_in_container())
                return;
        char id[256] = "?", detail[1400];
        self_container_id(id, sizeof(id));
        snprintf(detail, sizeof(detail),
                 "corral runs in container %.12s; its sandboxes are siblings on the engine at %s",
                 id, eng ? engine_endpoint(eng)->display : "(none)");
        note("container", detail);
        if (eng) {
                /* Whether the engine knows this container: Podman must open
                 * the seccomp profile through it. */
                char path[PATH_MAX];
                struct err e = {0};
                bool seen = self_engine_path(eng, "/tmp", path, sizeof(path), &e) == 0;
                if (podman)
                        report(seen, "container paths",
                               seen ? "Podman reads corral's seccomp profile from this "
                                      "container's writable layer"
                                    : e.msg,
                               "run corral's container on the engine whose socket it has, "
                               "without --read-only or a tmpfs on /tmp (or with a volume there)");
        }
        if (cfg->mounts)
                note("container mounts",
                     "`mounts` name paths on the engine's machine, which this container does not "
                     "see: the engine checks them as it creates a sandbox (the sandbox check "
                     "below shows whether it finds them)");
        struct registry reg = {0};
        struct err e = {0};
        if (cli_registry_load(cfg, &reg, &e) < 0)
                return;
        for (size_t i = 0; i < reg.n; i++) {
                const struct upstream_spec *u = &reg.v[i];
                _cleanup_free_ char *found = u->command ? path_find(u->command) : NULL;
                if (u->transport != UP_STDIO || !u->command || found)
                        continue;
                char what[100];
                snprintf(what, sizeof(what), "server %s", u->name);
                snprintf(detail, sizeof(detail),
                         "its command %.200s is not in corral's container: stdio servers run "
                         "there",
                         u->command);
                report(false, what, detail,
                       strcmp(u->command, "npx") == 0 || strcmp(u->command, "node") == 0
                           ? "run the corral-node image, which has Node and npm"
                           : "give it as an HTTP server on the host (host.docker.internal or "
                             "host.containers.internal), or build an image with it");
        }
        if (reg.n == 0)
                note("container servers",
                     "no MCP server configured: mount your host's config read-only (README, "
                     "\"corral in a container\")");
        registry_free(&reg);
}

int cli_doctor(int argc, char **argv)
{
        _cleanup_config_ struct config cfg = {0};
        _cleanup_free_ char **rest = NULL;
        int n_rest;
        char detail[1400];
        if (cli_config(argc, argv, &cfg, &rest, &n_rest) < 0)
                return 2;
        report(true, "config", cfg.config_file ? cfg.config_file : "defaults (no config file)",
               NULL);
        check_bridge(&cfg);

        struct loop *l;
        if (loop_new(&l) < 0)
                return 1;
        struct cli_engine ce;
        /* The engine `run` and `serve` would use, a private Podman service
         * included: doctor checks what they would meet. */
        cli_engine_open(&ce, l, &cfg, true);
        if (ce.priv.pid > 0)
                note("engine", "no engine socket answered: corral started its own Podman "
                               "service, as `run` and `serve` do (a `corral serve` shares its "
                               "pool and saves that start for each host)");
        bool engine_ok = false;
        bool podman = false;
        json_auto_t *info = NULL;
        if (!ce.eng) {
                report(false, "engine", ce.err.msg,
                       "start an engine as shown, or install podman: corral starts a private "
                       "`podman system service` when podman is installed and no engine is "
                       "named");
        } else {
                struct err e = {0};
                json_auto_t *ver = NULL;
                long st = engine_call(ce.eng, "GET", "/version", NULL, &ver, &e);
                if (st == 200) {
                        json_t *comp;
                        size_t i;
                        json_array_foreach(json_object_get(ver, "Components"), i, comp)
                        {
                                const char *n = json_string_value(json_object_get(comp, "Name"));
                                if (n && strstr(n, "Podman"))
                                        podman = true;
                        }
                        snprintf(detail, sizeof(detail), "%s %s at %s, API %s",
                                 podman ? "Podman" : "Docker Engine",
                                 json_string_value(json_object_get(ver, "Version")),
                                 engine_endpoint(ce.eng)->display,
                                 json_string_value(json_object_get(ver, "ApiVersion")));
                        const char *api = json_string_value(json_object_get(ver, "ApiVersion"));
                        int major = 0, minor = 0;
                        engine_ok = api && sscanf(api, "%d.%d", &major, &minor) == 2 &&
                                    (major > 1 || minor >= 41);
                        report(engine_ok, "engine", detail,
                               "corral needs engine API 1.41 or later (Docker 20.10+, Podman 3+)");
                } else if (st > 0) {
                        snprintf(detail, sizeof(detail), "HTTP %ld from %s", st,
                                 engine_endpoint(ce.eng)->display);
                        report(false, "engine", detail, "is this a Docker-compatible engine API?");
                } else {
                        report(false, "engine", e.msg, NULL);
                }
                if (engine_ok && engine_call(ce.eng, "GET", "/info", NULL, &info, &e) != 200) {
                        json_decref(info);
                        info = NULL;
                }
        }

        check_container(&cfg, engine_ok ? ce.eng : NULL, podman);
        if (engine_ok) {
                char path[600];
                struct err e = {0};
                snprintf(path, sizeof(path), "/images/%s/json", cfg.image);
                long st = engine_call(ce.eng, "GET", path, NULL, NULL, &e);
                snprintf(detail, sizeof(detail), "%s %s", cfg.image,
                         st == 200 ? "is present" : "is missing");
                char advice[600];
                sandbox_image_advice(&cfg, cfg.image, false, advice, sizeof(advice));
                report(st == 200, "image", detail, advice);
        }

        enum cgroup_mode cg = cgroup_mode();
        static const char *const cg_names[] = {"v2 (unified)", "hybrid (v1 with a v2 mount)", "v1",
                                               "unknown"};
        const char *runtime = json_string_value(json_object_get(info, "DefaultRuntime"));
        snprintf(detail, sizeof(detail), "cgroups %s; engine runtime %s", cg_names[cg],
                 runtime ? runtime : "unknown");
        bool crun_hybrid = podman && cg == CG_HYBRID && runtime && strcmp(runtime, "crun") == 0;
        report(!crun_hybrid, "cgroups", detail,
               "crun refuses hybrid cgroups: set `runtime = \"runc\"` under [engine] in "
               "/etc/containers/containers.conf (install the runc package)");
        if (cg != CG_V2)
                note("cgroups", "with cgroup v1, memory and pids limits work, but rootless "
                                "Podman cannot apply them; run rootful Podman or Docker, or "
                                "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1)");

        if (config_runsc(&cfg))
                check_gvisor(info, podman);

        struct rlimit nofile;
        getrlimit(RLIMIT_NOFILE, &nofile);
        bool has_resource = capng_have_capability(CAPNG_EFFECTIVE, CAP_SYS_RESOURCE);
        snprintf(detail, sizeof(detail), "nofile %llu/%llu, CAP_SYS_RESOURCE %s",
                 (unsigned long long)nofile.rlim_cur, (unsigned long long)nofile.rlim_max,
                 has_resource ? "present" : "absent");
        report(true, "rlimits", detail, NULL);
        if (!has_resource && podman)
                note("rlimits", "the engine cannot raise rlimits here; corral sets Ulimits "
                                "itself, but for plain `podman run` set default_ulimits = "
                                "[\"nofile=1024:1024\", \"nproc=4096:4096\"] in containers.conf");

        if (getuid() != 0) {
                FILE *f = fopen("/etc/subuid", "re");
                char line[256];
                bool found = false;
                const char *user = getenv("USER");
                while (f && user && fgets(line, sizeof(line), f))
                        if (strncmp(line, user, strlen(user)) == 0 && line[strlen(user)] == ':')
                                found = true;
                if (f)
                        fclose(f);
                report(
                    found || !podman, "rootless",
                    found ? "subordinate ids configured" : "no /etc/subuid entry",
                    "sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $USER");
        }

        check_instances();
        check_merge(&cfg);
        /* doctor confines itself as serve does, and shows what that means. */
        if (cli_confine(&cfg) == 0) {
                char desc[400];
                bool on = cfg.confine && confine_describe(getpid(), desc, sizeof(desc)) == 0;
                report(on || !cfg.confine, "confinement",
                       on ? desc : "off (confine: false): corral keeps every right of its user",
                       NULL);
        } else {
                report(false, "confinement", "corral cannot confine itself here (see above)",
                       "set confine to false to run unconfined");
        }
        if (engine_ok)
                check_sandbox(l, &cfg, ce.eng);
        cli_engine_close(&ce);
        loop_free(l);
        printf("%s\n", failures ? "some checks failed" : "all checks passed");
        return failures ? 1 : 0;
}
