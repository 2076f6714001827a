/* The create body: every security default of a sandbox in one place. */
#include "sandbox/internal.h"
#include "engine/self.h"

#include "core/log.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Host tasks of a gVisor sandbox (see pids below): its own, with a margin
 * over the 56 seen, and per process of the code, over the 6.6 seen. */
#define RUNSC_TASKS_BASE        96
#define RUNSC_TASKS_PER_PROCESS 8

/* Who owns a container: this host and boot, and a pid in a pid namespace.
 * Together they let a new instance tell a live owner from one that was
 * killed; a pid of another namespace (corral in a container beside one on
 * the host, or in another container) cannot be judged from here. */
const struct identity *host_identity(void)
{
        static struct identity id;
        if (id.host[0])
                return &id;
        if (gethostname(id.host, sizeof(id.host) - 1) < 0 || !id.host[0])
                snprintf(id.host, sizeof(id.host), "unknown");
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
        if (!f || !fgets(id.boot, sizeof(id.boot), f))
                snprintf(id.boot, sizeof(id.boot), "unknown");
        if (f)
                fclose(f);
        id.boot[strcspn(id.boot, "\n")] = '\0';
        /* In a container (corral's own image) the host name is that
         * container's, new with each one: every corral in a container on
         * this machine is the same host instead, so that the next one sweeps
         * what a killed one left (by its pid namespace: once it has ended).
         * The kernel's boot id is the machine's, in a container too. */
        if (self_in_container())
                snprintf(id.host, sizeof(id.host), "in-containers@%.36s", id.boot);
        ssize_t n = readlink("/proc/self/ns/pid", id.pidns, sizeof(id.pidns) - 1);
        if (n <= 0)
                snprintf(id.pidns, sizeof(id.pidns), "unknown");
        else
                id.pidns[n] = '\0';
        /* A killed corral's container is gone, and its namespace's number
         * goes to the next container: the next corral there would take the
         * killed one's sandboxes for its own (the same number, and its pid
         * too, as runc starts every container alike). */
        char cid[80];
        if (n > 0 && self_container_id(cid, sizeof(cid)) == 0)
                snprintf(id.pidns + n, sizeof(id.pidns) - (size_t)n, "@%.12s", cid);
        utf8_scrub(id.host);
        utf8_scrub(id.pidns);
        return &id;
}

json_t *sandbox_create_body(const struct config *cfg, const struct sandbox_profile *prof,
                            const char *instance, const char *loader,
                            const struct sandbox_spec *spec, enum engine_kind kind)
{
        bool preload = spec && spec->preload;
        char tmp_opts[128], ws_opts[128], vol_opts[128], frame_env[64], pid_label[32];
        snprintf(tmp_opts, sizeof(tmp_opts), "rw,nosuid,nodev,exec,size=%llu,mode=1777",
                 cfg->tmp_size);
        snprintf(ws_opts, sizeof(ws_opts), "rw,nosuid,nodev,exec,size=%llu,mode=1777",
                 cfg->workspace_size);
        snprintf(vol_opts, sizeof(vol_opts), "size=%llu,mode=1777,nosuid,nodev",
                 cfg->workspace_size);
        snprintf(frame_env, sizeof(frame_env), "CORRAL_MAX_FRAME=%llu", cfg->max_frame);
        snprintf(pid_label, sizeof(pid_label), "%d", (int)getpid());
        /* pids. Under runc the host's pids limit counts the code's tasks.
         * Under gVisor it counts gVisor's own instead: about 56 threads of
         * its kernel and gofer for an idle sandbox, and about 6.6 more per
         * process of the code (a stub process and the threads that trace
         * it, with --platform=ptrace); threads of the code cost the host
         * almost nothing. A fork bomb that reached the host's limit ended
         * the whole sandbox. So under gVisor its kernel holds the code to
         * `pids` (RLIMIT_NPROC, which it counts per sandbox, threads
         * included: fork fails with EAGAIN as under runc), and the host's
         * limit is that many processes' cost and gVisor's own above it. */
        long long pids_host = cfg->pids, nproc = 4096;
        if (config_runsc(cfg)) {
                pids_host = RUNSC_TASKS_BASE + RUNSC_TASKS_PER_PROCESS * cfg->pids;
                nproc = cfg->pids;
        }
        /* No WorkingDir: Docker would create /workspace in the image as root
         * 0755 and the tmpfs would copy that mode; the runtime changes into
         * /workspace itself. Both engines get explicit tmpfs options so they
         * behave alike (Docker would add noexec, Podman would not).
         * Every field below is a security default: no network, read-only
         * root, no capabilities, no privilege gain through setuid binaries,
         * an unprivileged user, bounded memory (no swap), pids, CPU, files,
         * and no core dumps. Nothing from the host is mounted. */
        // clang-format off
        json_auto_t *body = json_pack(
                "{s:s, s:[s,s,s,s,s,s], s:[s,s,s,s], s:s, s:s, s:b, s:b, s:b, s:b, s:b, s:b,"
                " s:{s:s, s:s, s:s, s:s, s:s, s:s},"
                " s:{s:s, s:b, s:[s], s:[s], s:I, s:I, s:I, s:I, s:s,"
                "    s:{s:s, s:s},"
                "    s:[{s:s,s:i,s:i},{s:s,s:i,s:i},{s:s,s:i,s:i}]}}",
                "Image", spec && spec->image ? spec->image : cfg->image,
                "Cmd", "python3", "-I", "-S", "-B", "-c", loader,
                "Env", "HOME=/tmp", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", frame_env,
                "User", "65534:65534",
                "Hostname", "sandbox",
                "Tty", 0, "OpenStdin", 1, "StdinOnce", 1,
                "AttachStdin", 1, "AttachStdout", 1, "AttachStderr", 1,
                "Labels",
                        "io.corral.owner", "corral",
                        "io.corral.instance", instance,
                        "io.corral.pid", pid_label,
                        "io.corral.host", host_identity()->host,
                        "io.corral.boot", host_identity()->boot,
                        "io.corral.pidns", host_identity()->pidns,
                "HostConfig",
                        "NetworkMode", "none",
                        "ReadonlyRootfs", 1,
                        "CapDrop", "ALL",
                        "SecurityOpt", "no-new-privileges",
                        "Memory", (json_int_t)cfg->memory,
                        "MemorySwap", (json_int_t)cfg->memory,
                        "PidsLimit", (json_int_t)pids_host,
                        "NanoCpus", (json_int_t)llround(cfg->cpus * 1e9),
                        "IpcMode", "private",
                        "Tmpfs", "/tmp", tmp_opts, "/workspace", ws_opts,
                        "Ulimits",
                                "Name", "nofile", "Soft", 1024, "Hard", 1024,
                                "Name", "nproc", "Soft", (int)nproc, "Hard", (int)nproc,
                                "Name", "core", "Soft", 0, "Hard", 0);
        // clang-format on
        /* Docker's archive endpoints (files in and out) do not see a tmpfs
         * mounted with Tmpfs, only the directory under it, and refuse to
         * write to a read-only root. An anonymous volume of the local
         * driver backed by tmpfs is the same memory-backed, size-capped,
         * nosuid,nodev space that they do see; it is created empty and
         * removed with the container (DELETE ...?v=1). Podman's archive
         * endpoints enter the container's mounts and see a Tmpfs. */
        if (body && kind == ENGINE_DOCKER) {
                json_t *hc = json_object_get(body, "HostConfig");
                json_object_del(json_object_get(hc, "Tmpfs"), "/workspace");
                json_t *mounts = json_pack(
                    "[{s:s, s:s, s:{s:b, s:{s:s, s:{s:s, s:s, s:s}}}}]", "Type", "volume", "Target",
                    "/workspace", "VolumeOptions", "NoCopy", 1, "DriverConfig", "Name", "local",
                    "Options", "type", "tmpfs", "device", "tmpfs", "o", vol_opts);
                if (!mounts || json_object_set_new(hc, "Mounts", mounts) < 0)
                        return NULL;
        }
        /* gVisor: Docker takes the runtime per container. Podman's compat
         * API has no such field: the Podman service itself runs with
         * `--runtime corral-runsc` (sandbox_mgr checks that it does). */
        if (body && kind == ENGINE_DOCKER && config_runsc(cfg) &&
            json_object_set_new(json_object_get(body, "HostConfig"), "Runtime",
                                json_string(CONFIG_RUNSC_NAME)) < 0)
                return NULL;
        /* The kernel surface: corral's seccomp profile, masked /proc and
         * /sys entries, and no writable space but /tmp, /workspace and
         * /dev/shm, the same on both engines. */
        if (body && sandbox_profile_apply(prof, cfg, kind, body) < 0)
                return NULL;
        /* Host data the user chose: read-only, nosuid, nodev. Podman takes
         * those options on a bind (and keeps it private); Docker refuses
         * them there, and gets them through its local volume driver, a
         * bind the engine mounts with them (removed with the container). */
        json_t *hc = body ? json_object_get(body, "HostConfig") : NULL;
        for (size_t i = 0; hc && spec && i < json_array_size(spec->mounts); i++) {
                json_t *x = json_array_get(spec->mounts, i);
                const char *src = json_string_value(json_object_get(x, "Source"));
                const char *dst = json_string_value(json_object_get(x, "Target"));
                const char *key = kind == ENGINE_DOCKER ? "Mounts" : "Binds";
                json_t *list = json_object_get(hc, key), *item = NULL;
                if (!list && json_object_set_new(hc, key, list = json_array()) < 0)
                        list = NULL;
                if (src && dst && kind == ENGINE_DOCKER) {
                        item = json_pack("{s:s, s:s, s:{s:b, s:{s:s, s:{s:s, s:s, s:s}}}}", "Type",
                                         "volume", "Target", dst, "VolumeOptions", "NoCopy", 1,
                                         "DriverConfig", "Name", "local", "Options", "type", "none",
                                         "device", src, "o", "bind,ro,nosuid,nodev");
                } else if (src && dst) {
                        char bind[2 * 4096 + 64];
                        snprintf(bind, sizeof(bind), "%s:%s:ro,nosuid,nodev,rprivate", src, dst);
                        item = json_string(bind);
                }
                if (!list || !item || json_array_append_new(list, item) < 0)
                        return NULL;
        }
        /* A pool sandbox has time to import more before its call comes:
         * asyncio, and the image's modules or those `preload` names. */
        json_t *env = body ? json_object_get(body, "Env") : NULL;
        if (env && preload && json_array_append_new(env, json_string("CORRAL_PRELOAD=1")) < 0)
                return NULL;
        if (env && preload && cfg->memory_merge &&
            json_array_append_new(env, json_string("CORRAL_MERGE=1")) < 0)
                return NULL;
        if (env && preload && cfg->preload) {
                struct buf list;
                buf_init(&list, 16 << 10);
                buf_append_some(&list, "CORRAL_PRELOAD_MODULES=", 23);
                for (size_t i = 0; cfg->preload[i]; i++) {
                        if (i)
                                buf_append_some(&list, ",", 1);
                        buf_append_some(&list, cfg->preload[i], strlen(cfg->preload[i]));
                }
                int r = json_array_append_new(env, json_string(buf_str(&list)));
                buf_free(&list);
                if (r < 0)
                        return NULL;
        }
        return TAKE_PTR(body);
}
