#include "core/confine.h"

#include <cap-ng.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What a supervisor that talks to an engine over a socket and runs MCP
 * servers as plain child processes never needs. If a bug in one of its
 * parsers (frames, tar streams, HTTP answers) is ever exploited, these are
 * the calls an exploit reaches for: the kernel's large, rarely needed
 * interfaces, and anything that changes the host. */
const char *const confine_denied_calls[] = {
/* Reading or steering other processes' memory: corral only signals and
 * waits for its own children. (LeakSanitizer stops the world with
 * ptrace, so sanitizer builds keep it.) */
#if !defined(__SANITIZE_ADDRESS__)
    "ptrace",
#endif
    "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    /* Mounts and root changes. */
    "mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "pivot_root", "chroot",
    /* New namespaces (clone with CLONE_NEW* flags is denied separately). */
    "unshare", "setns",
    /* Replacing the kernel, loading modules, eBPF and performance counters. */
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",
    "perf_event_open",
    /* Keyrings, io_uring, userfaultfd and personality: large or exotic
     * kernel interfaces that exploits favour. */
    "keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "userfaultfd", "personality",
    /* Host administration. */
    "open_by_handle_at", "acct", "swapon", "swapoff", "reboot", "syslog", "quotactl",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "iopl", "ioperm", "fanotify_init", "lookup_dcookie", "uselib", NULL};

static const unsigned long clone_ns_flags[] = {
    CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
};

static int thread_count(void)
{
        char line[128];
        int n = -1;
        FILE *f = fopen("/proc/self/status", "re");
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "Threads: %d", &n) == 1)
                        break;
        if (f)
                fclose(f);
        return n;
}

static int load_filter(unsigned *ret_n, struct err *e)
{
        /* Default allow: this is a deny list for the daemon (the sandboxes
         * get an allow list of their own, policy/seccomp.policy). */
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return err_set(e, ERR_INTERNAL, ENOMEM, "confining: seccomp_init failed");
        unsigned n = 0;
        int r = 0;
        for (size_t i = 0; confine_denied_calls[i] && r == 0; i++) {
                int nr = seccomp_syscall_resolve_name(confine_denied_calls[i]);
                if (nr == __NR_SCMP_ERROR)
                        continue; /* not on this architecture */
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
                n += r == 0;
        }
        /* clone with any namespace flag: one rule per flag, since a rule's
         * comparisons must all hold. The flags are clone's first argument,
         * but its second on s390 and s390x (stack, flags, ...). */
        uint32_t arch = seccomp_arch_native();
        unsigned flags_arg = arch == SCMP_ARCH_S390X || arch == SCMP_ARCH_S390 ? 1 : 0;
        for (size_t i = 0; i < ARRAY_SIZE(clone_ns_flags) && r == 0; i++)
                r = seccomp_rule_add(
                    ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                    SCMP_CMP(flags_arg, SCMP_CMP_MASKED_EQ, clone_ns_flags[i], clone_ns_flags[i]));
        /* clone3 keeps its flags in memory where no filter can read them;
         * ENOSYS makes the C library use clone (threads, posix_spawn). */
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        n += r == 0 ? 2 : 0;
        if (r == 0)
                r = seccomp_load(ctx);
        seccomp_release(ctx);
        if (r < 0)
                return err_set(e, ERR_INTERNAL, -r, "confining: cannot load the seccomp filter: %s",
                               strerror(-r));
        *ret_n = n;
        return 0;
}

int confine_self(struct confinement *ret, struct err *e)
{
        *ret = (struct confinement){0};
        /* Capabilities are a thread's own: a thread started before this
         * would keep them. */
        int threads = thread_count();
        if (threads != 1)
                return err_set(e, ERR_INTERNAL, EBUSY,
                               "confining: %d threads run already; corral confines itself "
                               "before it starts any",
                               threads);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return err_set(e, ERR_INTERNAL, errno, "confining: no_new_privs: %s",
                               strerror(errno));
        ret->no_new_privs = true;

        /* Every capability, in every set. Nothing is kept: corral reaches
         * the engine through a socket it can open as its user, and owns the
         * processes it signals. Emptying the bounding set takes CAP_SETPCAP;
         * without it (an ordinary user) the set stays, and no-new-privileges
         * already keeps any exec from gaining capabilities. */
        capng_get_caps_process();
        bool setpcap = capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP);
        capng_select_t sel =
            setpcap ? CAPNG_SELECT_ALL : (CAPNG_SELECT_CAPS | CAPNG_SELECT_AMBIENT);
        capng_clear(sel);
        if (capng_apply(sel) < 0)
                return err_set(e, ERR_INTERNAL, EPERM, "confining: cannot drop capabilities");
        capng_get_caps_process();
        ret->no_caps = capng_have_capabilities(CAPNG_SELECT_CAPS) == CAPNG_NONE;
        ret->bounding = capng_have_capabilities(CAPNG_SELECT_BOUNDS) == CAPNG_NONE;
        if (!ret->no_caps)
                return err_set(e, ERR_INTERNAL, EPERM,
                               "confining: capabilities remain after "
                               "dropping them");
        if (!ret->bounding)
                snprintf(ret->note, sizeof(ret->note),
                         "the bounding set stays full (no CAP_SETPCAP to empty it); "
                         "no-new-privileges keeps an exec from gaining any of it");
        return load_filter(&ret->n_denied, e);
}

int confine_child(void)
{
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        /* Older kernels lack ambient capabilities: EINVAL is fine there. */
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return -errno;
        /* Needs CAP_SETPCAP; without it no-new-privileges has to do. */
        for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL && errno != EPERM)
                        return -errno;
        struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
        struct __user_cap_data_struct d[2] = {{0}};
        if (syscall(SYS_capset, &h, d) < 0)
                return -errno;
        return 0;
}

int confine_describe(int pid, char *buf, size_t size)
{
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        static const char *const keys[] = {
            "NoNewPrivs:", "Seccomp:", "CapEff:", "CapPrm:", "CapInh:", "CapAmb:", "CapBnd:"};
        size_t used = 0;
        buf[0] = '\0';
        while (fgets(line, sizeof(line), f)) {
                for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                        size_t kl = strlen(keys[i]);
                        if (strncmp(line, keys[i], kl) != 0)
                                continue;
                        char val[64] = "";
                        sscanf(line + kl, " %63s", val);
                        int k = snprintf(buf + used, size - used, "%s%.*s %s", used ? ", " : "",
                                         (int)kl - 1, keys[i], val);
                        if (k > 0 && (size_t)k < size - used)
                                used += (size_t)k;
                }
        }
        fclose(f);
        return 0;
}
