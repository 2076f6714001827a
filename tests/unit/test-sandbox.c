/* The container spec: every hardening default is asserted field by field,
 * since a regression here would weaken every sandbox silently. */
#include "sandbox/images.h"
#include "sandbox/profile.h"
#include "sandbox/sandbox.h"

#include "tap.h"

#include <string.h>
#include <unistd.h>

static struct sandbox_profile prof;

static bool array_has(json_t *a, const char *s)
{
        size_t i;
        json_t *v;
        json_array_foreach(a, i, v)
        {
                if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
                        return true;
        }
        return false;
}

/* The element of array `a` that starts with `prefix`, or NULL. */
static const char *array_prefixed(json_t *a, const char *prefix)
{
        size_t i;
        json_t *v;
        json_array_foreach(a, i, v)
        {
                const char *s = json_string_value(v);
                if (s && strncmp(s, prefix, strlen(prefix)) == 0)
                        return s;
        }
        return NULL;
}

static const char *str(json_t *o, const char *key)
{
        return json_string_value(json_object_get(o, key));
}

static long long num(json_t *o, const char *key)
{
        return json_integer_value(json_object_get(o, key));
}

static void check_tmpfs(json_t *tmpfs, const char *dir, unsigned long long size)
{
        const char *opts = str(tmpfs, dir);
        if (!ok(opts != NULL, "Tmpfs %s is mounted", dir))
                return;
        char want[64];
        snprintf(want, sizeof(want), "size=%llu", size);
        /* Match whole comma-separated options, not substrings. */
        char copy[256];
        snprintf(copy, sizeof(copy), "%s", opts);
        bool nosuid = false, nodev = false, has_size = false, rw = false;
        for (char *save, *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
                nosuid |= strcmp(o, "nosuid") == 0;
                nodev |= strcmp(o, "nodev") == 0;
                has_size |= strcmp(o, want) == 0;
                rw |= strcmp(o, "rw") == 0;
                ok(strcmp(o, "suid") != 0 && strcmp(o, "dev") != 0, "Tmpfs %s: no %s", dir, o);
        }
        ok(nosuid, "Tmpfs %s: nosuid (%s)", dir, opts);
        ok(nodev, "Tmpfs %s: nodev", dir);
        ok(has_size, "Tmpfs %s: %s", dir, want);
        ok(rw, "Tmpfs %s: rw", dir);
}

/* Docker: /workspace is an anonymous volume of the local driver on tmpfs
 * (its archive endpoints see those), with the Tmpfs mount's options. */
static void check_volume(json_t *mounts, const struct config *cfg, const char *what)
{
        if (!ok(json_array_size(mounts) == 1, "%s: one mount", what))
                return;
        json_t *m = json_array_get(mounts, 0);
        is_str(str(m, "Type"), "volume", "%s: the mount is a volume", what);
        is_str(str(m, "Target"), "/workspace", "%s: at /workspace", what);
        ok(!json_object_get(m, "Source"), "%s: anonymous (no Source, nothing from the host)", what);
        json_t *vo = json_object_get(m, "VolumeOptions");
        ok(json_is_true(json_object_get(vo, "NoCopy")), "%s: NoCopy (starts empty)", what);
        json_t *dc = json_object_get(vo, "DriverConfig");
        is_str(str(dc, "Name"), "local", "%s: driver local", what);
        json_t *o = json_object_get(dc, "Options");
        is_str(str(o, "type"), "tmpfs", "%s: type tmpfs", what);
        is_str(str(o, "device"), "tmpfs", "%s: device tmpfs", what);
        char want[64], copy[256];
        snprintf(want, sizeof(want), "size=%llu", cfg->workspace_size);
        snprintf(copy, sizeof(copy), "%s", str(o, "o") ? str(o, "o") : "");
        bool nosuid = false, nodev = false, has_size = false;
        for (char *save, *x = strtok_r(copy, ",", &save); x; x = strtok_r(NULL, ",", &save)) {
                nosuid |= strcmp(x, "nosuid") == 0;
                nodev |= strcmp(x, "nodev") == 0;
                has_size |= strcmp(x, want) == 0;
                ok(strcmp(x, "suid") != 0 && strcmp(x, "dev") != 0, "%s: volume: no %s", what, x);
        }
        ok(nosuid && nodev && has_size, "%s: volume options nosuid, nodev, %s (%s)", what, want,
           str(o, "o"));
}

static void check_body_docker(const struct config *cfg, const char *what)
{
        json_t *b =
            sandbox_create_body(cfg, &prof, "0123456789abcdef", "pass", NULL, ENGINE_DOCKER);
        json_t *p =
            sandbox_create_body(cfg, &prof, "0123456789abcdef", "pass", NULL, ENGINE_PODMAN);
        if (!ok(b && p, "%s (Docker): the body builds", what))
                goto out;
        json_t *hc = json_object_get(b, "HostConfig");
        json_t *tmpfs = json_object_get(hc, "Tmpfs");
        is_int(json_object_size(tmpfs), 3, "%s (Docker): three tmpfs mounts", what);
        check_tmpfs(tmpfs, "/tmp", cfg->tmp_size);
        check_volume(json_object_get(hc, "Mounts"), cfg, what);
        /* The profile goes inline to Docker, by path to Podman; Docker
         * takes MaskedPaths, Podman `mask=`. */
        json_t *dopts = json_object_get(hc, "SecurityOpt");
        json_t *popts = json_object_get(json_object_get(p, "HostConfig"), "SecurityOpt");
        const char *inline_prof = array_prefixed(dopts, "seccomp=");
        ok(inline_prof && strcmp(inline_prof + 8, prof.seccomp_json) == 0,
           "%s (Docker): the seccomp profile inline", what);
        char want[600];
        snprintf(want, sizeof(want), "seccomp=%s", prof.seccomp_path);
        ok(array_has(popts, want), "%s (Podman): the seccomp profile by path", what);
        json_t *masked = json_object_get(hc, "MaskedPaths");
        size_t n_masked = 0;
        while (sandbox_masked_paths[n_masked])
                n_masked++;
        is_int((long long)json_array_size(masked), (long long)n_masked,
               "%s (Docker): every masked path", what);
        ok(array_has(masked, "/proc/config.gz") && array_has(masked, "/proc/kcore") &&
               array_has(masked, "/proc/keys") && array_has(masked, "/proc/timer_list") &&
               array_has(masked, "/proc/sched_debug"),
           "%s (Docker): MaskedPaths keeps Docker's own and adds /proc/config.gz", what);
        const char *mask = array_prefixed(popts, "mask=");
        ok(mask && strstr(mask, ":/proc/config.gz:") && strstr(mask, "/proc/kcore"),
           "%s (Podman): SecurityOpt mask= lists the same paths (%.60s...)", what, mask);
        ok(!json_object_get(json_object_get(p, "HostConfig"), "MaskedPaths"),
           "%s (Podman): no MaskedPaths (Podman's API ignores it)", what);
        /* Otherwise the very same body as for Podman. */
        json_t *php = json_deep_copy(json_object_get(p, "HostConfig"));
        json_t *dhc = json_deep_copy(hc);
        json_object_del(json_object_get(php, "Tmpfs"), "/workspace");
        json_object_del(dhc, "Mounts");
        json_object_del(dhc, "MaskedPaths");
        json_object_del(dhc, "SecurityOpt");
        json_object_del(php, "SecurityOpt");
        ok(json_equal(php, dhc), "%s (Docker): no other difference in HostConfig", what);
        json_decref(php);
        json_decref(dhc);
        json_object_del(b, "HostConfig");
        json_object_del(p, "HostConfig");
        ok(json_equal(b, p), "%s (Docker): nor elsewhere", what);
out:
        json_decref(b);
        json_decref(p);
}

/* The command of a real sandbox: the build's loader, which embeds the
 * runtime's length and SHA-256, not the runtime (runtime/assemble.py). */
extern const char corral_runtime_src[];
extern const size_t corral_runtime_len;
extern const char corral_runtime_loader[];

static void check_loader(const struct config *cfg)
{
        json_t *b = sandbox_create_body(cfg, &prof, "0123456789abcdef", corral_runtime_loader, NULL,
                                        ENGINE_PODMAN);
        json_t *cmd = json_object_get(b, "Cmd"), *arg;
        size_t i, total = 0;
        json_array_foreach(cmd, i, arg) total += json_string_length(arg) + 1;
        ok(total > 100 && total < 4096, "the container's whole command is under 4 KB (%zu bytes)",
           total);
        is_int(json_array_size(cmd), 6, "python3 -I -S -B -c LOADER");
        is_str(json_string_value(json_array_get(cmd, 4)), "-c", "the loader is -c code");
        char len[32];
        snprintf(len, sizeof(len), "<%zu:", corral_runtime_len);
        const char *loader = json_string_value(json_array_get(cmd, 5));
        ok(loader && strstr(loader, len) && strstr(loader, "os.read(0,") &&
               strstr(loader, "hashlib.sha256(b).hexdigest()!="),
           "the loader reads the runtime's length from fd 0 and checks its SHA-256");
        ok(corral_runtime_len == strlen(corral_runtime_src) && corral_runtime_len > 4096,
           "the runtime's length is its bytes' (%zu)", corral_runtime_len);
        json_decref(b);
}

static void check_body(const struct config *cfg, const char *what)
{
        static const char runtime[] = "import sys\nprint('runtime')\n";
        json_t *b =
            sandbox_create_body(cfg, &prof, "0123456789abcdef", runtime, NULL, ENGINE_PODMAN);
        if (!ok(b != NULL, "%s: the body builds", what))
                return;
        json_t *hc = json_object_get(b, "HostConfig");

        /* No network, no writable root, no capabilities, no privilege gain. */
        is_str(str(hc, "NetworkMode"), "none", "%s: NetworkMode none", what);
        ok(json_is_true(json_object_get(hc, "ReadonlyRootfs")), "%s: ReadonlyRootfs true", what);
        json_t *capdrop = json_object_get(hc, "CapDrop");
        ok(json_array_size(capdrop) == 1 && array_has(capdrop, "ALL"), "%s: CapDrop [ALL]", what);
        ok(!json_object_get(hc, "CapAdd") || json_array_size(json_object_get(hc, "CapAdd")) == 0,
           "%s: no CapAdd", what);
        ok(array_has(json_object_get(hc, "SecurityOpt"), "no-new-privileges"),
           "%s: SecurityOpt has no-new-privileges", what);
        ok(!json_is_true(json_object_get(hc, "Privileged")), "%s: not privileged", what);
        is_str(str(b, "User"), "65534:65534", "%s: User 65534:65534", what);
        is_str(str(hc, "IpcMode"), "private", "%s: IpcMode private", what);

        /* Bounded memory (no swap), processes and CPU. */
        is_int(num(hc, "Memory"), cfg->memory, "%s: Memory", what);
        is_int(num(hc, "MemorySwap"), num(hc, "Memory"), "%s: MemorySwap == Memory (no swap)",
               what);
        is_int(num(hc, "PidsLimit"), cfg->pids, "%s: PidsLimit", what);
        long long nano = num(hc, "NanoCpus");
        ok(llabs(nano - (long long)(cfg->cpus * 1e9 + 0.5)) <= 1, "%s: NanoCpus %lld for %g CPUs",
           what, nano, cfg->cpus);

        /* Writable space only as bounded tmpfs; Podman's own writable /run
         * and /var/tmp are covered by empty read-only ones. */
        json_t *tmpfs = json_object_get(hc, "Tmpfs");
        is_int(json_object_size(tmpfs), 4, "%s: four tmpfs mounts", what);
        check_tmpfs(tmpfs, "/tmp", cfg->tmp_size);
        check_tmpfs(tmpfs, "/workspace", cfg->workspace_size);
        static const char *const ro_dirs[] = {"/run", "/var/tmp"};
        for (size_t d = 0; d < ARRAY_SIZE(ro_dirs); d++) {
                const char *o = str(tmpfs, ro_dirs[d]);
                ok(o && strncmp(o, "ro,", 3) == 0 && strstr(o, "nosuid") && strstr(o, "nodev") &&
                       strstr(o, "noexec"),
                   "%s: %s is an empty read-only tmpfs (%s)", what, ro_dirs[d], o);
        }
        is_int(num(hc, "ShmSize"), cfg->shm_size, "%s: ShmSize (/dev/shm) bounded", what);
        const char *sc = array_prefixed(json_object_get(hc, "SecurityOpt"), "seccomp=");
        if (cfg->seccomp && strcmp(cfg->seccomp, "engine") == 0)
                ok(!sc, "%s: seccomp engine: no seccomp= option", what);
        else
                ok(sc && strcmp(sc + 8, prof.seccomp_path) == 0,
                   "%s: SecurityOpt seccomp= names corral's profile", what);

        /* No core dumps; files and processes bounded. */
        json_t *ul = json_object_get(hc, "Ulimits");
        bool core0 = false, nofile = false;
        size_t i;
        json_t *u;
        json_array_foreach(ul, i, u)
        {
                const char *name = str(u, "Name");
                if (name && strcmp(name, "core") == 0)
                        core0 = num(u, "Soft") == 0 && num(u, "Hard") == 0 &&
                                json_is_integer(json_object_get(u, "Hard"));
                if (name && strcmp(name, "nofile") == 0)
                        nofile = num(u, "Hard") > 0;
        }
        ok(core0, "%s: Ulimits core 0/0", what);
        ok(nofile, "%s: Ulimits nofile bounded", what);

        /* Nothing from the host: no binds, mounts, volumes, devices. */
        static const char *const host_keys[] = {"Binds",   "Mounts",     "Devices", "VolumesFrom",
                                                "PidMode", "UsernsMode", "Links"};
        for (size_t k = 0; k < ARRAY_SIZE(host_keys); k++)
                ok(!json_object_get(hc, host_keys[k]), "%s: no HostConfig.%s", what, host_keys[k]);
        ok(!json_object_get(b, "Volumes"), "%s: no Volumes", what);
        ok(!json_object_get(b, "WorkingDir"), "%s: no WorkingDir (the runtime changes dir)", what);

        /* Labels let corral find its containers (and only its own). */
        json_t *labels = json_object_get(b, "Labels");
        is_str(str(labels, "io.corral.owner"), "corral", "%s: label io.corral.owner", what);
        is_str(str(labels, "io.corral.instance"), "0123456789abcdef",
               "%s: label io.corral.instance", what);
        char pid[32];
        snprintf(pid, sizeof(pid), "%d", (int)getpid());
        is_str(str(labels, "io.corral.pid"), pid, "%s: label io.corral.pid", what);

        /* The loader is passed inline; stdin is how the runtime and frames reach it. */
        is_str(str(b, "Image"), cfg->image, "%s: Image", what);
        json_t *cmd = json_object_get(b, "Cmd");
        is_str(json_string_value(json_array_get(cmd, 0)), "python3", "%s: Cmd runs python3", what);
        ok(array_has(cmd, "-I"), "%s: python3 -I (isolated mode)", what);
        is_str(json_string_value(json_array_get(cmd, json_array_size(cmd) - 1)), runtime,
               "%s: the loader is the last argument", what);
        ok(json_is_false(json_object_get(b, "Tty")), "%s: no TTY (the stream is multiplexed)",
           what);
        ok(json_is_true(json_object_get(b, "OpenStdin")) &&
               json_is_true(json_object_get(b, "AttachStdin")),
           "%s: stdin open and attached", what);
        json_t *env = json_object_get(b, "Env");
        char frame[64];
        snprintf(frame, sizeof(frame), "CORRAL_MAX_FRAME=%llu", cfg->max_frame);
        ok(array_has(env, frame), "%s: Env has %s", what, frame);
        size_t e;
        json_t *ev;
        int leaked = 0;
        json_array_foreach(env, e, ev)
        {
                const char *s = json_string_value(ev);
                if (!s || (strncmp(s, "HOME=", 5) && strncmp(s, "PATH=", 5) &&
                           strncmp(s, "LANG=", 5) && strncmp(s, "CORRAL_", 7)))
                        leaked++;
        }
        is_int(leaked, 0, "%s: Env holds only what the sandbox needs", what);

        ok(!array_has(env, "CORRAL_PRELOAD=1"), "%s: a call's sandbox preloads nothing", what);

        char *s = json_dumps(b, JSON_COMPACT);
        ok(s && strlen(s) > 100, "%s: the body encodes", what);
        free(s);

        /* The same body for the pool, plus the preload flag (and with
         * memory_merge the merge flag) and nothing else. */
        struct sandbox_spec pool = {.preload = true};
        json_t *p =
            sandbox_create_body(cfg, &prof, "0123456789abcdef", runtime, &pool, ENGINE_PODMAN);
        json_t *penv = json_object_get(p, "Env");
        ok(array_has(penv, "CORRAL_PRELOAD=1"), "%s: a pool sandbox gets CORRAL_PRELOAD=1", what);
        ok(array_has(penv, "CORRAL_MERGE=1") == cfg->memory_merge,
           "%s: CORRAL_MERGE=1 exactly when memory_merge is on", what);
        ok(!array_has(env, "CORRAL_MERGE=1"), "%s: a call's sandbox offers nothing to merge", what);
        is_int((long long)json_array_size(penv),
               (long long)json_array_size(env) + 1 + (cfg->memory_merge ? 1 : 0),
               "%s: and no other difference in Env", what);
        ok(json_equal(json_object_get(p, "HostConfig"), hc),
           "%s: a pool sandbox has the same HostConfig", what);
        json_decref(p);

        /* Another image, host mounts, and the `preload` setting. */
        json_t *mounts = json_pack("[{s:s, s:s}]", "Source", "/srv/data", "Target", "/data");
        struct sandbox_spec spec = {.image = "corral-python:latest", .mounts = mounts};
        json_t *o =
            sandbox_create_body(cfg, &prof, "0123456789abcdef", runtime, &spec, ENGINE_PODMAN);
        is_str(json_string_value(json_object_get(o, "Image")), "corral-python:latest",
               "%s: the image a call asked for", what);
        json_t *binds = json_object_get(json_object_get(o, "HostConfig"), "Binds");
        is_str(json_string_value(json_array_get(binds, 0)),
               "/srv/data:/data:ro,nosuid,nodev,rprivate",
               "%s (podman): a private read-only, nosuid, nodev bind", what);
        json_decref(o);
        o = sandbox_create_body(cfg, &prof, "0123456789abcdef", runtime, &spec, ENGINE_DOCKER);
        json_t *om = json_object_get(json_object_get(o, "HostConfig"), "Mounts");
        json_t *vol = json_array_get(om, json_array_size(om) - 1);
        json_t *opts = json_object_get(
            json_object_get(json_object_get(vol, "VolumeOptions"), "DriverConfig"), "Options");
        is_str(json_string_value(json_object_get(vol, "Target")), "/data",
               "%s (docker): a volume at /data, beside /workspace's", what);
        is_str(json_string_value(json_object_get(opts, "device")), "/srv/data",
               "%s: of the host path", what);
        is_str(json_string_value(json_object_get(opts, "o")), "bind,ro,nosuid,nodev",
               "%s: bound read-only, nosuid, nodev by the local driver", what);
        ok(!json_object_get(json_object_get(o, "HostConfig"), "Binds"), "%s (docker): no Binds",
           what);
        json_decref(o);
        char *list[] = {"numpy", "matplotlib.pyplot", NULL};
        struct config with = *cfg; /* shallow: not freed */
        with.preload = list;
        json_t *pl =
            sandbox_create_body(&with, &prof, "0123456789abcdef", runtime, &pool, ENGINE_PODMAN);
        ok(array_has(json_object_get(pl, "Env"), "CORRAL_PRELOAD_MODULES=numpy,matplotlib.pyplot"),
           "%s: `preload` reaches a pool sandbox's runtime", what);
        json_decref(pl);
        json_t *np =
            sandbox_create_body(&with, &prof, "0123456789abcdef", runtime, NULL, ENGINE_PODMAN);
        ok(!array_has(json_object_get(np, "Env"), "CORRAL_PRELOAD_MODULES=numpy,matplotlib.pyplot"),
           "%s: ...and not a call's own", what);
        json_decref(np);
        json_decref(mounts);
        json_decref(b);
        check_body_docker(cfg, what);
}

/* ImageMissing's advice fits how the image was named. */
static void check_image_advice(void)
{
        static const struct {
                const char *source; /* NULL: the default; "": a call's "image" */
                const char *want, *not ;
        } cases[] = {
            {NULL, "build it with `corral image build`, or set `image` (--image, CORRAL_IMAGE",
             "--image x:1"},
            {"--image", "build it with `corral image build --image x:1`, or give --image an image",
             "CORRAL_IMAGE"},
            {"CORRAL_IMAGE",
             "build it with `corral image build --image x:1`, or set CORRAL_IMAGE to an image",
             "--image an"},
            {"/etc/c.json: image",
             "build it with `corral image build --image x:1`, or set \"image\" in /etc/c.json",
             "CORRAL_IMAGE"},
            {"", "build it with `corral image build --image x:1`, or call without \"image\"",
             "CORRAL_IMAGE"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct config c;
                struct err e = {0};
                config_defaults(&c);
                c.config_file = strdup("/etc/c.json");
                if (cases[i].source && cases[i].source[0])
                        config_set(&c, "image", "x:1", cases[i].source, &e);
                bool call = cases[i].source && !cases[i].source[0];
                char out[600];
                sandbox_image_advice(&c, call ? "x:1" : c.image, call, out, sizeof(out));
                like(out, cases[i].want, "image advice, named by %s",
                     !cases[i].source ? "nobody"
                     : call           ? "a call"
                                      : cases[i].source);
                ok(!strstr(out, cases[i].not ), "...and not \"%s\"", cases[i].not );
                config_free(&c);
        }
}

/* A stream's last bytes: from the ring, in order across its wrap, joined
 * to the head when nothing was lost between, never overlapping the head
 * shown, starting on a whole character. */
static void check_tail(void)
{
        struct sandbox_output o = {0};
        buf_init(&o.data, 8);
        buf_append(&o.data, "ABCDEFGH", 8);
        buf_init(&o.tail, 10);
        buf_append(&o.tail, "6789012345", 10); /* the oldest is at 4: "0123456789" */
        o.tail_at = 4;
        o.total = 8 + 10 + 30; /* 30 bytes went by between head and ring */
        struct buf t;
        buf_init(&t, 64);
        is_int(sandbox_tail(&o, 4, 0, &t), 4, "the last 4");
        is_str(t.data, "6789", "...in order");
        t.len = 0;
        is_int(sandbox_tail(&o, 15, 0, &t), 10, "no more than the ring past a gap");
        is_str(t.data, "0123456789", "...across its wrap");
        o.total = 8 + 10; /* no gap: the head's end joins */
        t.len = 0;
        is_int(sandbox_tail(&o, 13, 0, &t), 13, "joined to the head's end");
        is_str(t.data, "FGH0123456789", "...which comes first");
        t.len = 0;
        is_int(sandbox_tail(&o, 18, 6, &t), 12, "never into the head shown (6 bytes)");
        is_str(t.data, "GH0123456789", "...so from its 7th byte");
        buf_free(&o.tail);
        buf_init(&o.tail, 10);
        buf_append(&o.tail, "\xa9xyz", 4); /* the rest of an \xc3\xa9 cut between */
        o.tail_at = 0;
        o.total = 8 + 4 + 100;
        t.len = 0;
        is_int(sandbox_tail(&o, 4, 0, &t), 3, "a cut character's rest is left out");
        is_str(t.data, "xyz", "...so the tail is valid UTF-8");
        buf_free(&t);
        buf_free(&o.tail);
        buf_free(&o.data);
}

/* The processes of the code and of the host under gVisor: its kernel holds
 * the code to `pids` (RLIMIT_NPROC), the host's limit leaves room for
 * gVisor's own tasks above that; under runc the host's limit is `pids`. */
static long long nproc_of(json_t *hc)
{
        size_t i;
        json_t *u;
        json_array_foreach(json_object_get(hc, "Ulimits"), i, u)
        {
                if (str(u, "Name") && strcmp(str(u, "Name"), "nproc") == 0 &&
                    num(u, "Soft") == num(u, "Hard"))
                        return num(u, "Hard");
        }
        return -1;
}

static void check_pids_runsc(struct config *cfg)
{
        struct err e;
        static const enum engine_kind kinds[] = {ENGINE_PODMAN, ENGINE_DOCKER};
        const char *names[] = {"Podman", "Docker"};
        for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
                config_set(cfg, "runtime", "runc", "test", &e);
                json_t *b = sandbox_create_body(cfg, &prof, "x", "pass", NULL, kinds[k]);
                json_t *hc = json_object_get(b, "HostConfig");
                is_int(num(hc, "PidsLimit"), cfg->pids, "runc (%s): the host's PidsLimit is pids",
                       names[k]);
                ok(nproc_of(hc) >= cfg->pids, "runc (%s): RLIMIT_NPROC above pids", names[k]);
                json_decref(b);
                config_set(cfg, "runtime", "runsc", "test", &e);
                b = sandbox_create_body(cfg, &prof, "x", "pass", NULL, kinds[k]);
                hc = json_object_get(b, "HostConfig");
                is_int(nproc_of(hc), cfg->pids, "runsc (%s): RLIMIT_NPROC is pids", names[k]);
                is_int(num(hc, "PidsLimit"), 96 + 8 * cfg->pids,
                       "runsc (%s): the host's PidsLimit leaves gVisor's tasks room", names[k]);
                json_decref(b);
        }
        config_set(cfg, "runtime", "runc", "test", &e);
}

int main(void)
{
        check_image_advice();
        check_tail();
        struct config cfg;
        config_defaults(&cfg);
        struct err pe = {0};
        if (!ok(sandbox_profile_load(&cfg, &prof, &pe) == 0, "the default profile loads (%s)",
                pe.msg))
                return done_testing();
        ok(prof.seccomp_json && strstr(prof.seccomp_json, "\"defaultAction\":\"SCMP_ACT_ERRNO\""),
           "the profile denies by default");
        check_body(&cfg, "defaults");
        check_loader(&cfg);

        struct err e = {0};
        config_set(&cfg, "memory", "1g", "test", &e);
        config_set(&cfg, "pids", "64", "test", &e);
        config_set(&cfg, "cpus", "0.5", "test", &e);
        config_set(&cfg, "tmp_size", "16m", "test", &e);
        config_set(&cfg, "workspace_size", "1g", "test", &e);
        config_set(&cfg, "max_frame", "1m", "test", &e);
        config_set(&cfg, "image", "registry.example/corral-python:1", "test", &e);
        config_set(&cfg, "memory_merge", "true", "test", &e);
        check_body(&cfg, "custom");
        check_pids_runsc(&cfg);

        /* CPU shares whose product with 1e9 lands just below an integer in
         * binary (2.01 * 1e9 = 2009999999.9999998) should still give the
         * nearest NanoCpus value, not one less. */
        static const char *const cpus[] = {"2.01", "4.1", "1.001"};
        for (size_t i = 0; i < ARRAY_SIZE(cpus); i++) {
                config_set(&cfg, "cpus", cpus[i], "test", &e);
                json_t *b = sandbox_create_body(&cfg, &prof, "x", "pass", NULL, ENGINE_PODMAN);
                long long nano = num(json_object_get(b, "HostConfig"), "NanoCpus");
                long long want = (long long)(strtod(cpus[i], NULL) * 1e9 + 0.5);
                is_int(nano, want, "cpus %s gives NanoCpus %lld", cpus[i], want);
                json_decref(b);
        }
        config_free(&cfg);
        sandbox_profile_done(&prof);

        /* The pool's size: the demand between pool_min and pool_max, and
         * never past what the memory budget pays for. */
        static const struct {
                long min, max, demand, budget, want;
                const char *why;
        } sizes[] = {
            {2, 16, 0, 20, 2, "pool_min"},      {2, 16, 2, 20, 2, "pool_min"},
            {2, 16, 8, 20, 8, "demand"},        {2, 16, 30, 20, 16, "pool_max"},
            {2, 16, 30, 10, 10, "pool_memory"}, {2, 16, 0, 1, 1, "pool_memory"},
            {0, 16, 0, 20, 0, "pool_min"},      {2, 16, 8, 0, 0, "pool_memory"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
                const char *why = NULL;
                long t =
                    pool_target(sizes[i].min, sizes[i].max, sizes[i].demand, sizes[i].budget, &why);
                ok(t == sizes[i].want && why && strcmp(why, sizes[i].why) == 0,
                   "pool size: min %ld, max %ld, demand %ld, budget %ld: %ld (%s)", sizes[i].min,
                   sizes[i].max, sizes[i].demand, sizes[i].budget, t, why ? why : "-");
        }

        /* What pool_memory pays for; with page merging, a sandbox the
         * merger has not been through yet at its unmerged cost. */
        static const struct {
                unsigned long long budget;
                long long cost, fresh;
                unsigned long long merged;
                long want;
        } budgets[] = {
            {1024, 100, 0, 0, 10},  {1024, 0, 0, 0, 8},          {100, 0, 0, 0, 1},
            {100, 200, 0, 0, 0},    {1024, 25, 0, 0, 40},        {1024, 25, 115, 0, 8},
            {1024, 25, 115, 8, 15}, {1024, 25, 115, 40, 40},     {1024, 25, 115, 99, 40},
            {1024, 115, 25, 3, 8},  {1ULL << 40, 1, 0, 0, 4096},
        };
        for (size_t i = 0; i < ARRAY_SIZE(budgets); i++) {
                long n = pool_budget_n(budgets[i].budget << 10, budgets[i].cost << 10,
                                       budgets[i].fresh << 10, budgets[i].merged);
                is_int(n, budgets[i].want,
                       "pool_memory %llu MiB at %lld MiB (%lld unmerged), %llu merged",
                       budgets[i].budget, budgets[i].cost, budgets[i].fresh, budgets[i].merged);
        }

        /* The pace of calls one after another: as many ready as arrive
         * while one refills, and one more. */
        static const long long every_s[] = {0, 1000, 2000, 3000, 4000};
        static const long long every_half_s[] = {8000, 8500, 9000, 9500, 10000};
        static const long long burst[] = {10000, 10001, 10002, 10003, 10004, 10005};
        static const long long old_and_two[] = {-5000, 9000, 10000};
        static const long long burst_then_one[] = {9000, 9001, 9002, 9003, 9004, 10000};
        static const long long burst_then_two[] = {8000, 8001, 8002, 8003, 9000, 10000};
        static const struct {
                const long long *arrive;
                size_t n;
                long long now, refill;
                long want;
        } paces[] = {
            {every_s, 5, 4000, 3500, 5},         /* runsc: 1 a second, 3.5 s a refill */
            {every_s, 5, 4000, 300, 2},          /* runc: a refill is quicker than the pace */
            {every_half_s, 5, 10000, 1300, 4},   /* data image, 2 a second */
            {burst, 6, 10005, 1300, 0},          /* together: a burst, not a pace */
            {every_s, 2, 1000, 3500, 0},         /* two calls are no pace yet */
            {old_and_two, 3, 10000, 3500, 0},    /* one is older than the window */
            {every_s, 5, 4000, 0, 0},            /* no refill measured yet */
            {burst_then_one, 6, 10000, 1300, 0}, /* a burst and one call: two arrivals */
            {burst_then_two, 6, 10000, 1300, 3}, /* a burst counts once in a pace */
        };
        for (size_t i = 0; i < ARRAY_SIZE(paces); i++)
                is_int(pool_pace_need(paces[i].arrive, paces[i].n, paces[i].now, paces[i].refill),
                       paces[i].want, "pace: %zu calls, refill %lld ms", paces[i].n,
                       paces[i].refill);
        return done_testing();
}
