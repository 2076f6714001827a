/* corral's seccomp profile: the parser's checks, the engine JSON, and the
 * rules themselves, loaded as a real filter in child processes, where every
 * call the hardening issue names as closed must fail with EPERM and what
 * programs need (threads, processes, sockets, files) must keep working. The
 * e2e suite checks the same through both engines. */
#include "sandbox/profile.h"

#include "tap.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern const char corral_seccomp_policy[];

static struct seccomp_rules policy;

static int parse(const char *text, struct err *e)
{
        struct seccomp_rules r;
        int k = seccomp_rules_parse(text, strlen(text), "t", &r, e);
        seccomp_rules_done(&r);
        return k;
}

static void check_parser(void)
{
        struct err e = {0};
        struct seccomp_rules r;
        static const char good[] = "# c\n\ngroup a-b\nallow read write # c\n"
                                   "allow clone arg0 & 0x7e020000 == 0\n"
                                   "allow personality arg0 in 0 8 0xffffffff\n"
                                   "errno ENOSYS clone3\ndeny unshare\n";
        is_int(seccomp_rules_parse(good, strlen(good), "t", &r, &e), 0,
               "a good profile parses (%s)", e.msg);
        is_int((long long)r.n, 6, "six calls");
        const struct seccomp_rule *c = seccomp_rules_find(&r, "clone");
        ok(c && c->n_conds == 1 && c->cond[0].masked && c->cond[0].mask == 0x7e020000 &&
               c->cond[0].vals[0] == 0 && c->cond[0].arg == 0,
           "clone: masked condition on arg0");
        c = seccomp_rules_find(&r, "personality");
        ok(c && c->n_conds == 1 && !c->cond[0].masked && c->cond[0].n_vals == 3 &&
               c->cond[0].vals[2] == 0xffffffff,
           "personality: in 3 values");
        c = seccomp_rules_find(&r, "clone3");
        ok(c && c->action == SC_ERRNO && c->errno_ret == ENOSYS, "clone3: errno ENOSYS");
        c = seccomp_rules_find(&r, "read");
        ok(c && c->action == SC_ALLOW && c->n_conds == 0 && strcmp(c->group, "a-b") == 0 &&
               c->line == 4,
           "read: allowed, group and line kept");
        seccomp_rules_done(&r);

        /* Conditions ANDed in one line, lines for one call ORed. */
        static const char two[] = "allow socket arg0 in 1 2 10\n"
                                  "allow socket arg0 in 16 arg2 in 0\n"
                                  "allow fcntl arg1 in 1 2 arg2 & 0xf0 == 0x10 arg0 in 3\n";
        is_int(seccomp_rules_parse(two, strlen(two), "t", &r, &e), 0,
               "conditions on several arguments parse (%s)", e.msg);
        is_int((long long)r.n, 3, "three rules, two of them for socket");
        c = seccomp_rules_find(&r, "socket");
        ok(c && c == &r.v[0] && c->n_conds == 1 && c->cond[0].n_vals == 3,
           "socket: the first line first");
        c = &r.v[1];
        ok(strcmp(c->name, "socket") == 0 && c->n_conds == 2 && c->cond[0].arg == 0 &&
               c->cond[0].n_vals == 1 && c->cond[0].vals[0] == 16 && c->cond[1].arg == 2 &&
               c->cond[1].n_vals == 1 && c->cond[1].vals[0] == 0 && c->line == 2,
           "socket: then arg0 == 16 and arg2 == 0");
        c = &r.v[2];
        ok(c->n_conds == 3 && c->cond[0].n_vals == 2 && c->cond[1].masked &&
               c->cond[1].mask == 0xf0 && c->cond[1].vals[0] == 0x10 && c->cond[2].arg == 0,
           "fcntl: an in, a mask and an in, in one line");
        seccomp_rules_done(&r);

        static const struct {
                const char *text, *msg;
        } bad[] = {
            {"allow socket arg0 in 16 arg0 in 1\n", "arg0 has two conditions in one line"},
            {"allow socket arg0 & 1 == 1 arg0 in 1\n", "two conditions"},
            {"allow x arg0 in 1 arg1 in 1 arg2 in 1 arg3 in 1\n", "at most 3 conditions"},
            {"allow x arg0 in 1 2 3 4 5 6 7 8 arg1 in 1 2 3 4 5 6 7 8 arg2 in 1 2\n",
             "at most 64 combinations"},
            {"allow socket arg0 in arg2 in 0\n", "expected values after \"arg0 in\""},
            {"allow socket arg0 in 1 junk\n", "not a value"},
            {"allow socket arg0 & 1 == 1 junk\n", "expected"},
            {"allow socket arg0 in 1\nallow socket\n", "t:2: socket is already named on line 1"},
            {"allow socket\nallow socket arg0 in 1\n", "already named"},
            {"errno EPERM socket\nallow socket arg0 in 1\n", "already named"},
            {"allow socket arg0 in 1\ndeny socket\n", "already named"},
            {"allow read\nallow read\n", "t:2: read is already named on line 1"},
            {"allow unshare\ndeny unshare\n", "already named"},
            {"permit read\n", "unknown statement"},
            {"allow\n", "names no call"},
            {"allow Read\n", "not a system call name"},
            {"allow read; write\n", "not a system call name"},
            {"allow clone arg6 in 0\n", "N from 0 to 5"},
            {"allow clone arg0 in\n", "expected"},
            {"allow clone arg0 in 08\n", "not a value"},
            {"allow clone arg0 in 0x\n", "not a value"},
            {"allow clone arg0 in 18446744073709551615\n", "not a value"},
            {"allow clone arg0 & 0xff == 0x100\n", "outside the mask"},
            {"allow clone arg0 & 0xff = 1\n", "expected"},
            {"allow x arg0 in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n", "at most 16"},
            {"errno EFOO read\n", "errno ENAME"},
            {"group\n", "group NAME"},
            {"group A\n", "group NAME"},
            {"# only a comment\n", "allows no system call"},
            {"", "allows no system call"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                e.msg[0] = '\0';
                ok(parse(bad[i].text, &e) == -EINVAL && strstr(e.msg, bad[i].msg),
                   "refused: %s (%s)", bad[i].msg, e.msg);
        }
        char longline[SECCOMP_LINE_MAX + 20];
        memset(longline, ' ', sizeof(longline) - 1);
        memcpy(longline, "allow read", 10);
        longline[sizeof(longline) - 1] = '\0';
        ok(parse(longline, &e) < 0 && strstr(e.msg, "line longer"), "an over-long line is refused");
        char nul[] = "allow read\0\n";
        ok(seccomp_rules_parse(nul, sizeof(nul) - 1, "t", &r, &e) < 0 && strstr(e.msg, "NUL"),
           "a NUL byte is refused");
}

/* Every call libseccomp knows on this architecture is either allowed,
 * answered or denied by name: nothing is closed (or open) by oversight. */
static void check_classified(void)
{
        int unnamed = 0;
        for (int nr = 0; nr < 1024; nr++) {
                char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
                if (!name)
                        continue;
                if (!seccomp_rules_find(&policy, name)) {
                        diag("not in policy/seccomp.policy: %s (allow it in a group or deny it)",
                             name);
                        unnamed++;
                }
                free(name);
        }
        is_int(unnamed, 0, "every system call of this architecture is named in the policy");
}

static const char *const closed[] = {
    "unshare",
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "mount",
    "umount2",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
    "pivot_root",
    "chroot",
    "open_by_handle_at",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "quotactl",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
};

static void check_closed_named(void)
{
        for (size_t i = 0; i < ARRAY_SIZE(closed); i++) {
                const struct seccomp_rule *r = seccomp_rules_find(&policy, closed[i]);
                ok(r && r->action == SC_DENY, "%s is denied", closed[i]);
        }
}

static void check_engine_json(void)
{
        char *skipped = NULL;
        json_t *j = seccomp_rules_engine_json(&policy, 0, &skipped);
        if (!ok(j != NULL, "the engine JSON builds"))
                return;
        is_str(json_string_value(json_object_get(j, "defaultAction")), "SCMP_ACT_ERRNO",
               "defaultAction SCMP_ACT_ERRNO");
        is_int(json_integer_value(json_object_get(j, "defaultErrnoRet")), EPERM,
               "defaultErrnoRet EPERM");
        ok(json_array_size(json_object_get(j, "architectures")) >= 1, "architectures listed");
        json_t *calls = json_object_get(j, "syscalls");
        bool clone_masked = false, clone3_enosys = false, unshare_listed = false;
        int personality = 0;
        size_t i;
        json_t *c;
        json_array_foreach(calls, i, c)
        {
                json_t *names = json_object_get(c, "names");
                const char *first = json_string_value(json_array_get(names, 0));
                const char *act = json_string_value(json_object_get(c, "action"));
                json_t *arg = json_array_get(json_object_get(c, "args"), 0);
                size_t k;
                json_t *n;
                json_array_foreach(names, k, n) unshare_listed |=
                    strcmp(json_string_value(n), "unshare") == 0;
                if (!first || !act)
                        continue;
                if (strcmp(first, "clone") == 0)
                        clone_masked =
                            strcmp(act, "SCMP_ACT_ALLOW") == 0 &&
                            json_integer_value(json_object_get(arg, "value")) == 0x7e020000 &&
                            json_integer_value(json_object_get(arg, "valueTwo")) == 0 &&
                            strcmp(json_string_value(json_object_get(arg, "op")),
                                   "SCMP_CMP_MASKED_EQ") == 0;
                if (strcmp(first, "clone3") == 0)
                        clone3_enosys =
                            strcmp(act, "SCMP_ACT_ERRNO") == 0 &&
                            json_integer_value(json_object_get(c, "errnoRet")) == ENOSYS;
                if (strcmp(first, "personality") == 0)
                        personality++;
        }
        ok(clone_masked, "clone: allowed with arg0 & CLONE_NEW* == 0 (value = mask, valueTwo = 0)");
        ok(clone3_enosys, "clone3: ENOSYS");
        is_int(personality, 6, "personality: one entry per allowed value");
        ok(!unshare_listed, "denied calls are not in the engine JSON (the default denies them)");
        if (skipped)
                diag("left out on this architecture: %s", skipped);
        free(skipped);
        json_decref(j);
}

/* A condition of an entry's args as "index op value [valueTwo]". */
static void arg_text(json_t *a, char *out, size_t size)
{
        snprintf(out, size, "%lld %s %lld %lld", json_integer_value(json_object_get(a, "index")),
                 json_string_value(json_object_get(a, "op")),
                 json_integer_value(json_object_get(a, "value")),
                 json_integer_value(json_object_get(a, "valueTwo")));
}

/* The entries (allow actions) for `name`, each as its args joined by
 * " && ", joined by " || ", in order. */
static void entries_text(json_t *j, const char *name, char *out, size_t size)
{
        size_t i, k, used = 0;
        json_t *c, *a;
        out[0] = '\0';
        json_array_foreach(json_object_get(j, "syscalls"), i, c)
        {
                const char *first =
                    json_string_value(json_array_get(json_object_get(c, "names"), 0));
                if (!first || strcmp(first, name) != 0)
                        continue;
                used += (size_t)snprintf(out + used, size - used, "%s", used ? " || " : "");
                json_array_foreach(json_object_get(c, "args"), k, a)
                {
                        char t[120];
                        arg_text(a, t, sizeof(t));
                        used +=
                            (size_t)snprintf(out + used, size - used, "%s%s", k ? " && " : "", t);
                }
                if (used >= size)
                        return;
        }
}

/* Conditions in one line are ANDed in one entry (Docker's and Podman's
 * runtimes AND an entry's args on distinct arguments); an `in` of several
 * values becomes one entry per combination; lines are entries, ORed. */
static void check_engine_json_conditions(void)
{
        json_t *j = seccomp_rules_engine_json(&policy, 0, NULL);
        char got[2048];
        entries_text(j, "socket", got, sizeof(got));
        is_str(got,
               "0 SCMP_CMP_EQ 1 0 || 0 SCMP_CMP_EQ 2 0 || 0 SCMP_CMP_EQ 10 0 || "
               "0 SCMP_CMP_EQ 16 0 && 2 SCMP_CMP_EQ 0 0",
               "socket: AF_UNIX, AF_INET, AF_INET6, or AF_NETLINK with NETLINK_ROUTE");
        json_decref(j);

        struct seccomp_rules r;
        struct err e = {0};
        static const char text[] = "allow fcntl arg1 in 1 2 arg2 & 0xf0 == 0x10 arg0 in 3 4 5\n";
        if (!ok(seccomp_rules_parse(text, strlen(text), "t", &r, &e) == 0, "parses (%s)", e.msg))
                return;
        j = seccomp_rules_engine_json(&r, 0, NULL);
        entries_text(j, "fcntl", got, sizeof(got));
        static const char want[] =
            "1 SCMP_CMP_EQ 1 0 && 2 SCMP_CMP_MASKED_EQ 240 16 && 0 SCMP_CMP_EQ 3 0 || "
            "1 SCMP_CMP_EQ 2 0 && 2 SCMP_CMP_MASKED_EQ 240 16 && 0 SCMP_CMP_EQ 3 0 || "
            "1 SCMP_CMP_EQ 1 0 && 2 SCMP_CMP_MASKED_EQ 240 16 && 0 SCMP_CMP_EQ 4 0 || "
            "1 SCMP_CMP_EQ 2 0 && 2 SCMP_CMP_MASKED_EQ 240 16 && 0 SCMP_CMP_EQ 4 0 || "
            "1 SCMP_CMP_EQ 1 0 && 2 SCMP_CMP_MASKED_EQ 240 16 && 0 SCMP_CMP_EQ 5 0 || "
            "1 SCMP_CMP_EQ 2 0 && 2 SCMP_CMP_MASKED_EQ 240 16 && 0 SCMP_CMP_EQ 5 0";
        is_str(got, want, "two ins and a mask: one entry per combination, each with all three");
        json_decref(j);
        seccomp_rules_done(&r);
}

/* Under gVisor, clone3 goes to its kernel (which answers ENOSYS) and
 * nothing else changes: clone keeps its condition, unshare stays out. */
static void check_engine_json_gvisor(void)
{
        json_t *j = seccomp_rules_engine_json(&policy, SECCOMP_JSON_GVISOR, NULL);
        json_t *plain = json_object_get(json_array_get(json_object_get(j, "syscalls"), 0), "names");
        bool clone3 = false, clone = false, unshare = false, errno_rule = false;
        size_t i, k;
        json_t *c, *n;
        json_array_foreach(plain, i, n)
        {
                clone3 |= strcmp(json_string_value(n), "clone3") == 0;
                clone |= strcmp(json_string_value(n), "clone") == 0;
        }
        json_array_foreach(json_object_get(j, "syscalls"), i, c)
        {
                errno_rule |=
                    strcmp(json_string_value(json_object_get(c, "action")), "SCMP_ACT_ERRNO") == 0;
                json_array_foreach(json_object_get(c, "names"), k, n) unshare |=
                    strcmp(json_string_value(n), "unshare") == 0;
        }
        ok(j && clone3, "gVisor: clone3 is let through to gVisor's kernel");
        ok(j && !clone, "gVisor: clone is still allowed only with its condition");
        ok(j && !errno_rule, "gVisor: no errno rule is left (gVisor would answer it EPERM)");
        ok(j && !unshare, "gVisor: unshare is still denied");
        json_decref(j);
}

/* In a child: load the filter, run `fn`, exit with its result. */
static int in_filter(int (*fn)(void))
{
        pid_t pid = fork();
        if (pid == 0) {
                struct err e = {0};
                if (seccomp_rules_load(&policy, &e) < 0) {
                        fprintf(stderr, "%s\n", e.msg);
                        _exit(99);
                }
                _exit(fn());
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) != pid)
                return -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Each returns 0 when the call failed with the expected errno. */
static int eperm(long r)
{
        return r == -1 && errno == EPERM ? 0 : 1;
}
static int t_unshare(void)
{
        return eperm(syscall(SYS_unshare, CLONE_NEWUSER));
}
static int t_setns(void)
{
        return eperm(syscall(SYS_setns, 0, 0));
}
static int t_io_uring(void)
{
        return eperm(syscall(__NR_io_uring_setup, 1, NULL));
}
static int t_keyctl(void)
{
        return eperm(syscall(SYS_keyctl, 0, 0, 0, 0, 0));
}
static int t_add_key(void)
{
        return eperm(syscall(SYS_add_key, "user", "k", "v", 1, -2));
}
static int t_bpf(void)
{
        return eperm(syscall(SYS_bpf, 0, NULL, 0));
}
static int t_perf(void)
{
        return eperm(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
}
static int t_userfaultfd(void)
{
        return eperm(syscall(SYS_userfaultfd, 0));
}
static int t_mount(void)
{
        return eperm(syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, NULL));
}
static int t_fsopen(void)
{
        return eperm(syscall(__NR_fsopen, "tmpfs", 0));
}
static int t_chroot(void)
{
        return eperm(syscall(SYS_chroot, "/"));
}
static int t_open_by_handle(void)
{
        return eperm(syscall(SYS_open_by_handle_at, -1, NULL, 0));
}
static int t_kexec(void)
{
        return eperm(syscall(SYS_kexec_load, 0, 0, NULL, 0));
}
static int t_init_module(void)
{
        return eperm(syscall(SYS_init_module, NULL, 0, ""));
}
static int t_personality(void)
{
        return eperm(syscall(SYS_personality, READ_IMPLIES_EXEC));
}
static int t_swapon(void)
{
        return eperm(syscall(SYS_swapon, "/x", 0));
}
static int t_syslog(void)
{
        return eperm(syscall(SYS_syslog, 3, NULL, 0));
}
static int t_settime(void)
{
        struct timespec ts = {0};
        return eperm(syscall(SYS_clock_settime, CLOCK_REALTIME, &ts));
}
static int t_clone_newns(void)
{
        return eperm(syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0));
}
static int t_socket_packet(void)
{
        return eperm(socket(AF_PACKET, SOCK_RAW, 0));
}
static int t_mq(void)
{
        return eperm(syscall(SYS_mq_open, "q", O_RDWR | O_CREAT, 0600, NULL));
}
static int t_clone3(void)
{
        long r = syscall(__NR_clone3, NULL, 0);
        return r == -1 && errno == ENOSYS ? 0 : 1;
}

/* What must keep working. */
static void *thread_fn(void *arg)
{
        return arg;
}
static int t_threads(void)
{
        pthread_t t;
        void *back = NULL;
        if (pthread_create(&t, NULL, thread_fn, (void *)7) != 0 || pthread_join(t, &back) != 0)
                return 1;
        return back == (void *)7 ? 0 : 1;
}
static int t_fork_exec(void)
{
        pid_t p = fork();
        if (p == 0) {
                execl("/bin/sh", "sh", "-c", "exit 5", (char *)NULL);
                _exit(1);
        }
        int st;
        return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 5 ? 0 : 1;
}
static int t_netlink_uevent(void)
{
        return eperm(socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT));
}
static int t_netlink_audit(void)
{
        return eperm(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_AUDIT));
}
static int t_netlink_generic(void)
{
        return eperm(socket(AF_NETLINK, SOCK_DGRAM, NETLINK_GENERIC));
}
static int t_sockets(void)
{
        int sv[2];
        int a = socket(AF_INET, SOCK_STREAM, 0), u = socket(AF_UNIX, SOCK_STREAM, 0);
        int tcp = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP),
            udp6 = socket(AF_INET6, SOCK_DGRAM, 17);
        int n = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        return a >= 0 && u >= 0 && tcp >= 0 && udp6 >= 0 && n >= 0 &&
                       socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0
                   ? 0
                   : 1;
}
static int t_personality_query(void)
{
        return syscall(SYS_personality, 0xffffffff) >= 0 && syscall(SYS_personality, 0) >= 0 ? 0
                                                                                             : 1;
}

static void check_filter(void)
{
        static const struct {
                const char *what;
                int (*fn)(void);
        } tests[] = {
            {"unshare(CLONE_NEWUSER) fails with EPERM", t_unshare},
            {"setns fails with EPERM", t_setns},
            {"io_uring_setup fails with EPERM", t_io_uring},
            {"keyctl fails with EPERM", t_keyctl},
            {"add_key fails with EPERM", t_add_key},
            {"bpf fails with EPERM", t_bpf},
            {"perf_event_open fails with EPERM", t_perf},
            {"userfaultfd fails with EPERM", t_userfaultfd},
            {"mount fails with EPERM", t_mount},
            {"fsopen fails with EPERM", t_fsopen},
            {"chroot fails with EPERM", t_chroot},
            {"open_by_handle_at fails with EPERM", t_open_by_handle},
            {"kexec_load fails with EPERM", t_kexec},
            {"init_module fails with EPERM", t_init_module},
            {"personality(READ_IMPLIES_EXEC) fails with EPERM", t_personality},
            {"swapon fails with EPERM", t_swapon},
            {"syslog fails with EPERM", t_syslog},
            {"clock_settime fails with EPERM", t_settime},
            {"clone(CLONE_NEWNS) fails with EPERM", t_clone_newns},
            {"socket(AF_PACKET) fails with EPERM", t_socket_packet},
            {"mq_open fails with EPERM", t_mq},
            {"clone3 fails with ENOSYS (the C library falls back to clone)", t_clone3},
            {"threads start and join", t_threads},
            {"fork, exec and wait work", t_fork_exec},
            {"socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT) fails with EPERM", t_netlink_uevent},
            {"socket(AF_NETLINK, NETLINK_AUDIT) fails with EPERM", t_netlink_audit},
            {"socket(AF_NETLINK, NETLINK_GENERIC) fails with EPERM", t_netlink_generic},
            {"AF_INET (protocol 0 and TCP), AF_INET6 UDP, AF_UNIX and NETLINK_ROUTE sockets and "
             "socketpair work",
             t_sockets},
            {"personality query and PER_LINUX work", t_personality_query},
        };
        for (size_t i = 0; i < ARRAY_SIZE(tests); i++) {
                int st = in_filter(tests[i].fn);
                ok(st == 0, "under the filter: %s (child status %d)", tests[i].what, st);
        }
}

int main(void)
{
        struct err e = {0};
        check_parser();
        if (!ok(seccomp_rules_parse(corral_seccomp_policy, strlen(corral_seccomp_policy),
                                    "policy/seccomp.policy", &policy, &e) == 0,
                "policy/seccomp.policy parses (%s)", e.msg))
                return done_testing();
        check_classified();
        check_closed_named();
        check_engine_json();
        check_engine_json_conditions();
        check_engine_json_gvisor();
        check_filter();
        seccomp_rules_done(&policy);
        return done_testing();
}
