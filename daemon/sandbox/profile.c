#include "sandbox/profile.h"

#include "core/log.h"

#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>

extern const char corral_seccomp_policy[];

/* Docker's and Podman's default lists together, plus the kernel's build
 * configuration and symbol and module lists, which tell an exploit what it
 * faces, and /dev/mqueue, where open() makes POSIX message queues (writable
 * space the seccomp profile closes only for mq_open). Most of the rest is
 * readable by root only, or does not exist on a given kernel (the engines
 * skip a path that is not there). */
const char *const sandbox_masked_paths[] = {
    "/dev/mqueue",       "/proc/acpi",          "/proc/asound",
    "/proc/config.gz",   "/proc/kallsyms",      "/proc/kcore",
    "/proc/keys",        "/proc/latency_stats", "/proc/modules",
    "/proc/sched_debug", "/proc/scsi",          "/proc/timer_list",
    "/proc/timer_stats", "/sys/dev/block",      "/sys/devices/virtual/powercap",
    "/sys/firmware",     "/sys/fs/selinux",     NULL,
};

static const struct {
        const char *name;
        int code;
} errnos[] = {
    {"EPERM", EPERM},     {"ENOENT", ENOENT},
    {"EACCES", EACCES},   {"EINVAL", EINVAL},
    {"ENOSYS", ENOSYS},   {"EOPNOTSUPP", EOPNOTSUPP},
    {"ENOTSUP", ENOTSUP}, {"EAFNOSUPPORT", EAFNOSUPPORT},
};

void seccomp_rules_done(struct seccomp_rules *r)
{
        free(r->v);
        r->v = NULL;
        r->n = 0;
}

const struct seccomp_rule *seccomp_rules_find(const struct seccomp_rules *r, const char *name)
{
        for (size_t i = 0; i < r->n; i++)
                if (strcmp(r->v[i].name, name) == 0)
                        return &r->v[i];
        return NULL;
}

/* A call or group name: lower case, digits, '_' (and '-' in groups). */
static bool word_ok(const char *w, size_t max, bool dash)
{
        size_t n = strlen(w);
        if (n == 0 || n >= max)
                return false;
        for (const char *p = w; *p; p++)
                if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_' ||
                      (dash && *p == '-')))
                        return false;
        return true;
}

/* Decimal or 0x-hexadecimal, at most INT64_MAX (the engines' JSON carries
 * it as a number; jansson's integers are signed). */
static bool parse_value(const char *s, uint64_t *ret)
{
        bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
        const char *d = hex ? s + 2 : s;
        if (!*d || strlen(d) > 20)
                return false;
        for (const char *p = d; *p; p++)
                if (hex ? !isxdigit((unsigned char)*p) : !isdigit((unsigned char)*p))
                        return false;
        if (!hex && d[0] == '0' && d[1])
                return false; /* no octal surprises */
        errno = 0;
        unsigned long long v = strtoull(d, NULL, hex ? 16 : 10);
        if (errno == ERANGE || v > (unsigned long long)INT64_MAX)
                return false;
        *ret = v;
        return true;
}

struct parser {
        const char *source;
        unsigned line;
        char group[40];
        struct seccomp_rules *out;
        struct err *e;
};

_printf_(2, 3) static int perr(struct parser *p, const char *fmt, ...)
{
        char msg[600];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return err_set(p->e, ERR_CONFIG, EINVAL, "%s:%u: %s", p->source, p->line, msg);
}

static int add_rule(struct parser *p, const char *name, struct seccomp_rule *tmpl)
{
        if (!word_ok(name, sizeof(tmpl->name), false))
                return perr(p, "\"%.60s\" is not a system call name", name);
        /* A call is named once, but for several allow lines with
         * conditions, which are alternatives. */
        const struct seccomp_rule *old = seccomp_rules_find(p->out, name);
        bool alternative = old && old->action == SC_ALLOW && old->n_conds &&
                           tmpl->action == SC_ALLOW && tmpl->n_conds;
        if (old && !alternative)
                return perr(p,
                            "%s is already named on line %u: name each call once (only allow "
                            "lines with conditions may name it again)",
                            name, old->line);
        if (p->out->n >= SECCOMP_RULES_MAX)
                return perr(p, "more than %d calls", SECCOMP_RULES_MAX);
        struct seccomp_rule *v = realloc(p->out->v, (p->out->n + 1) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        p->out->v = v;
        struct seccomp_rule *r = &v[p->out->n++];
        *r = *tmpl;
        snprintf(r->name, sizeof(r->name), "%s", name);
        snprintf(r->group, sizeof(r->group), "%s", p->group);
        r->line = p->line;
        return 0;
}

/* One condition at tok[0..n): "argN in V..." (values up to the next
 * "argN") or "argN & MASK == V". Sets *used to the words it took. */
static int parse_condition(struct parser *p, const char *call, char **tok, size_t n,
                           struct seccomp_cond *c, size_t *used)
{
        if (n < 3 || strncmp(tok[0], "arg", 3) != 0 || !isdigit((unsigned char)tok[0][3]) ||
            tok[0][4] || tok[0][3] > '5')
                return perr(p, "expected \"allow CALL argN in V...\" or "
                               "\"allow CALL argN & MASK == V\" (N from 0 to 5)");
        c->arg = tok[0][3] - '0';
        /* The policy names clone's arguments as most architectures order
         * them (flags first); s390 and s390x take (stack, flags, ...). */
        uint32_t arch = seccomp_arch_native();
        if (strcmp(call, "clone") == 0 && c->arg < 2 &&
            (arch == SCMP_ARCH_S390X || arch == SCMP_ARCH_S390))
                c->arg = 1 - c->arg;
        if (strcmp(tok[1], "in") == 0) {
                size_t k = 2;
                for (; k < n && strncmp(tok[k], "arg", 3) != 0; k++) {
                        if (c->n_vals == ARRAY_SIZE(c->vals))
                                return perr(p, "at most %zu values", ARRAY_SIZE(c->vals));
                        if (!parse_value(tok[k], &c->vals[c->n_vals++]))
                                return perr(p, "\"%.40s\" is not a value (decimal or 0x...)",
                                            tok[k]);
                }
                if (c->n_vals == 0)
                        return perr(p, "expected values after \"%s in\"", tok[0]);
                *used = k;
                return 0;
        }
        if (strcmp(tok[1], "&") == 0 && n >= 5 && strcmp(tok[3], "==") == 0) {
                c->masked = true;
                c->n_vals = 1;
                if (!parse_value(tok[2], &c->mask) || !parse_value(tok[4], &c->vals[0]))
                        return perr(p, "a mask and a value, decimal or 0x...");
                if (c->vals[0] & ~c->mask)
                        return perr(p, "the value has bits outside the mask: it never matches");
                *used = 5;
                return 0;
        }
        return perr(p, "expected \"in\" or \"& MASK == V\" after %s", tok[0]);
}

/* allow NAME COND...: every condition holds (AND). */
static int parse_conditions(struct parser *p, char **tok, size_t n, struct seccomp_rule *r)
{
        size_t combos = 1;
        for (size_t i = 2; i < n;) {
                if (r->n_conds == SECCOMP_CONDS_MAX)
                        return perr(p, "at most %d conditions in one line", SECCOMP_CONDS_MAX);
                struct seccomp_cond *c = &r->cond[r->n_conds];
                size_t used = 0;
                int k = parse_condition(p, tok[1], tok + i, n - i, c, &used);
                if (k < 0)
                        return k;
                /* libseccomp refuses two conditions on one argument in a
                 * rule, and the engines' runtimes (runc, crun) make such
                 * an entry's conditions alternatives instead: an AND
                 * would silently become an OR. */
                for (unsigned j = 0; j < r->n_conds; j++)
                        if (r->cond[j].arg == c->arg)
                                return perr(p, "%s has two conditions in one line", tok[i]);
                r->n_conds++;
                combos *= c->n_vals;
                if (combos > SECCOMP_COMBOS_MAX)
                        return perr(p, "at most %d combinations of values in one line",
                                    SECCOMP_COMBOS_MAX);
                i += used;
        }
        return 0;
}

static int parse_statement(struct parser *p, char **tok, size_t n)
{
        struct seccomp_rule r = {0};
        if (strcmp(tok[0], "group") == 0) {
                if (n != 2 || !word_ok(tok[1], sizeof(p->group), true))
                        return perr(p, "expected \"group NAME\" (a-z, 0-9, _ and -)");
                snprintf(p->group, sizeof(p->group), "%s", tok[1]);
                return 0;
        }
        size_t first = 1;
        if (strcmp(tok[0], "allow") == 0) {
                r.action = SC_ALLOW;
                if (n > 2 && strncmp(tok[2], "arg", 3) == 0) {
                        int k = parse_conditions(p, tok, n, &r);
                        return k < 0 ? k : add_rule(p, tok[1], &r);
                }
        } else if (strcmp(tok[0], "deny") == 0) {
                r.action = SC_DENY;
        } else if (strcmp(tok[0], "errno") == 0) {
                r.action = SC_ERRNO;
                r.errno_ret = -1;
                for (size_t i = 0; n > 1 && i < ARRAY_SIZE(errnos); i++)
                        if (strcmp(tok[1], errnos[i].name) == 0)
                                r.errno_ret = errnos[i].code;
                if (r.errno_ret < 0)
                        return perr(p, "expected \"errno ENAME CALL...\" with one of EPERM, "
                                       "ENOENT, EACCES, EINVAL, ENOSYS, EOPNOTSUPP, "
                                       "EAFNOSUPPORT");
                first = 2;
        } else {
                return perr(p, "unknown statement \"%.40s\" (group, allow, errno or deny)", tok[0]);
        }
        if (n <= first)
                return perr(p, "%s names no call", tok[0]);
        for (size_t i = first; i < n; i++) {
                int k = add_rule(p, tok[i], &r);
                if (k < 0)
                        return k;
        }
        return 0;
}

int seccomp_rules_parse(const char *text, size_t len, const char *source, struct seccomp_rules *ret,
                        struct err *e)
{
        *ret = (struct seccomp_rules){0};
        struct parser p = {.source = source, .out = ret, .e = e};
        if (len > SECCOMP_SRC_MAX)
                return err_set(e, ERR_CONFIG, EFBIG, "%s: larger than %d KiB", source,
                               SECCOMP_SRC_MAX >> 10);
        int r = 0;
        for (size_t at = 0; at < len && r == 0;) {
                const char *nl = memchr(text + at, '\n', len - at);
                size_t ll = nl ? (size_t)(nl - (text + at)) : len - at;
                char line[SECCOMP_LINE_MAX + 1];
                p.line++;
                if (ll > SECCOMP_LINE_MAX) {
                        r = perr(&p, "line longer than %d bytes", SECCOMP_LINE_MAX);
                        break;
                }
                memcpy(line, text + at, ll);
                line[ll] = '\0';
                at += ll + 1;
                if (memchr(line, '\0', ll)) {
                        r = perr(&p, "a NUL byte");
                        break;
                }
                char *hash = strchr(line, '#');
                if (hash)
                        *hash = '\0';
                char *tok[64], *save = NULL;
                size_t n = 0;
                for (char *t = strtok_r(line, " \t\r", &save); t;
                     t = strtok_r(NULL, " \t\r", &save)) {
                        if (n == ARRAY_SIZE(tok)) {
                                r = perr(&p, "more than %zu words on one line", ARRAY_SIZE(tok));
                                break;
                        }
                        tok[n++] = t;
                }
                if (r == 0 && n > 0)
                        r = parse_statement(&p, tok, n);
        }
        if (r == 0 && ret->n == 0)
                r = err_set(e, ERR_CONFIG, EINVAL, "%s: allows no system call", source);
        if (r < 0)
                seccomp_rules_done(ret);
        return r;
}

/* The architectures one filter covers: the native one and those whose
 * programs it can run (32-bit x86 and x32 on x86_64, arm on aarch64). */
static json_t *architectures(void)
{
        uint32_t a = seccomp_arch_native();
        if (a == SCMP_ARCH_X86_64)
                return json_pack("[s,s,s]", "SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32");
        if (a == SCMP_ARCH_AARCH64)
                return json_pack("[s,s]", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM");
        static const struct {
                uint32_t arch;
                const char *name;
        } one[] = {
            {SCMP_ARCH_X86, "SCMP_ARCH_X86"},         {SCMP_ARCH_ARM, "SCMP_ARCH_ARM"},
            {SCMP_ARCH_PPC64LE, "SCMP_ARCH_PPC64LE"}, {SCMP_ARCH_S390X, "SCMP_ARCH_S390X"},
            {SCMP_ARCH_RISCV64, "SCMP_ARCH_RISCV64"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(one); i++)
                if (one[i].arch == a)
                        return json_pack("[s]", one[i].name);
        return json_array(); /* the engine's native one */
}

static bool known_here(const char *name)
{
        return seccomp_syscall_resolve_name(name) != __NR_SCMP_ERROR;
}

/* Rules with conditions become one engine entry, or one libseccomp rule,
 * per combination of their conditions' values: conditions within one are
 * ANDed, and entries (rules) for a call are ORed. */
static size_t combinations(const struct seccomp_rule *x)
{
        size_t n = 1;
        for (unsigned j = 0; j < x->n_conds; j++)
                n *= x->cond[j].n_vals;
        return n;
}

/* Condition j of combination k: each condition's values in turn, the
 * first condition's fastest. */
static struct scmp_arg_cmp combination_cmp(const struct seccomp_rule *x, unsigned j, size_t k)
{
        const struct seccomp_cond *c = &x->cond[j];
        if (c->masked)
                return (struct scmp_arg_cmp){.arg = (unsigned)c->arg,
                                             .op = SCMP_CMP_MASKED_EQ,
                                             .datum_a = c->mask,
                                             .datum_b = c->vals[0]};
        for (unsigned i = 0; i < j; i++)
                k /= x->cond[i].n_vals;
        return (struct scmp_arg_cmp){
            .arg = (unsigned)c->arg, .op = SCMP_CMP_EQ, .datum_a = c->vals[k % c->n_vals]};
}

/* The engines' form of a condition: for MASKED_EQ, value is the mask and
 * valueTwo the datum. */
static json_t *arg_cmp(const struct scmp_arg_cmp *c)
{
        return json_pack("{s:i, s:I, s:I, s:s}", "index", (int)c->arg, "value",
                         (json_int_t)c->datum_a, "valueTwo",
                         (json_int_t)(c->op == SCMP_CMP_MASKED_EQ ? c->datum_b : 0), "op",
                         c->op == SCMP_CMP_MASKED_EQ ? "SCMP_CMP_MASKED_EQ" : "SCMP_CMP_EQ");
}

json_t *seccomp_rules_engine_json(const struct seccomp_rules *r, unsigned flags, char **ret_skipped)
{
        json_auto_t *prof =
            json_pack("{s:s, s:i, s:o, s:[]}", "defaultAction", "SCMP_ACT_ERRNO", "defaultErrnoRet",
                      EPERM, "architectures", architectures(), "syscalls");
        json_auto_t *plain = json_array();
        json_t *calls = json_object_get(prof, "syscalls");
        char skipped[2048] = "";
        size_t used = 0;
        if (!prof || !plain)
                return NULL;
        for (size_t i = 0; i < r->n; i++) {
                const struct seccomp_rule *x = &r->v[i];
                if (x->action == SC_DENY)
                        continue;
                if (!known_here(x->name)) {
                        int k = snprintf(skipped + used, sizeof(skipped) - used, "%s%s",
                                         used ? ", " : "", x->name);
                        if (k > 0 && (size_t)k < sizeof(skipped) - used)
                                used += (size_t)k;
                        continue;
                }
                /* gVisor (runsc 2022-12, --oci-seccomp) answers every
                 * errno rule with EPERM, which would stop the C library's
                 * fallback from clone3 to clone: threads could not start.
                 * Its kernel implements none of the calls the policy
                 * answers with ENOSYS (clone3 alone today) and answers
                 * ENOSYS itself, so they are let through to it. */
                bool gvisor_enosys = (flags & SECCOMP_JSON_GVISOR) && x->action == SC_ERRNO &&
                                     x->errno_ret == ENOSYS;
                if ((x->action == SC_ALLOW && !x->n_conds) || gvisor_enosys) {
                        json_array_append_new(plain, json_string(x->name));
                } else if (x->action == SC_ERRNO) {
                        json_array_append_new(calls, json_pack("{s:[s], s:s, s:i}", "names",
                                                               x->name, "action", "SCMP_ACT_ERRNO",
                                                               "errnoRet", x->errno_ret));
                } else {
                        for (size_t k = 0; k < combinations(x); k++) {
                                json_t *args = json_array();
                                for (unsigned j = 0; j < x->n_conds; j++) {
                                        struct scmp_arg_cmp c = combination_cmp(x, j, k);
                                        json_array_append_new(args, arg_cmp(&c));
                                }
                                json_array_append_new(
                                    calls, json_pack("{s:[s], s:s, s:o}", "names", x->name,
                                                     "action", "SCMP_ACT_ALLOW", "args", args));
                        }
                }
        }
        if (json_array_insert_new(
                calls, 0, json_pack("{s:O, s:s}", "names", plain, "action", "SCMP_ACT_ALLOW")) < 0)
                return NULL;
        if (ret_skipped)
                *ret_skipped = used ? strdup(skipped) : NULL;
        return TAKE_PTR(prof);
}

int seccomp_rules_load(const struct seccomp_rules *r, struct err *e)
{
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
        if (!ctx)
                return err_set(e, ERR_INTERNAL, ENOMEM, "seccomp_init failed");
        int k = 0;
        for (size_t i = 0; i < r->n && k == 0; i++) {
                const struct seccomp_rule *x = &r->v[i];
                int nr = seccomp_syscall_resolve_name(x->name);
                if (x->action == SC_DENY || nr == __NR_SCMP_ERROR)
                        continue;
                uint32_t act =
                    x->action == SC_ERRNO ? SCMP_ACT_ERRNO((uint32_t)x->errno_ret) : SCMP_ACT_ALLOW;
                if (act == SCMP_ACT_ERRNO(EPERM))
                        continue; /* the default already */
                for (size_t c = 0; c < combinations(x) && k == 0; c++) {
                        struct scmp_arg_cmp cmp[SECCOMP_CONDS_MAX];
                        for (unsigned j = 0; j < x->n_conds; j++)
                                cmp[j] = combination_cmp(x, j, c);
                        k = seccomp_rule_add_array(ctx, act, nr, x->n_conds, cmp);
                }
                if (k < 0)
                        err_set(e, ERR_INTERNAL, -k, "seccomp rule for %s: %s", x->name,
                                strerror(-k));
        }
        if (k == 0 && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                k = err_set(e, ERR_INTERNAL, errno, "no_new_privs: %s", strerror(errno));
        if (k == 0 && (k = seccomp_load(ctx)) < 0)
                err_set(e, ERR_INTERNAL, -k, "loading the filter: %s", strerror(-k));
        seccomp_release(ctx);
        return k;
}

/* The user's file: the engine's JSON (checked to be a profile object), or
 * corral's syntax. */
static int load_file(const char *path, struct seccomp_rules *rules, json_t **ret_json,
                     struct err *e)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return err_set(e, ERR_CONFIG, errno, "seccomp: cannot open %s: %s", path,
                               strerror(errno));
        if (!S_ISREG(st.st_mode) || st.st_size > SECCOMP_SRC_MAX)
                return err_set(e, ERR_CONFIG, EINVAL,
                               "seccomp: %s must be a regular file of at most %d KiB", path,
                               SECCOMP_SRC_MAX >> 10);
        _cleanup_free_ char *text = malloc((size_t)st.st_size + 1);
        size_t len = 0;
        while (text && len < (size_t)st.st_size) {
                ssize_t k = read(fd, text + len, (size_t)st.st_size - len);
                if (k <= 0)
                        break;
                len += (size_t)k;
        }
        if (!text)
                return -ENOMEM;
        const char *p = text;
        while (p < text + len && isspace((unsigned char)*p))
                p++;
        if (p < text + len && *p == '{') {
                json_error_t je;
                json_auto_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
                const char *def = json_string_value(json_object_get(j, "defaultAction"));
                if (!j || !def || !json_is_array(json_object_get(j, "syscalls")))
                        return err_set(e, ERR_CONFIG, EINVAL,
                                       "seccomp: %s is not an engine seccomp profile (a JSON "
                                       "object with defaultAction and syscalls)%s%s",
                                       path, j ? "" : ": ", j ? "" : je.text);
                *ret_json = TAKE_PTR(j);
                return 0;
        }
        return seccomp_rules_parse(text, len, path, rules, e);
}

/* The profile in a file named by its content in corral's runtime
 * directory, where a local Podman can read it: written once, atomically,
 * and shared by every corral of this user. */
static int write_profile(const char *json, char **ret_path, struct err *e)
{
        char dir[256];
        int r = runtime_dir(dir, sizeof(dir), e);
        if (r < 0)
                return r;
        uint64_t h = 14695981039346656037ULL; /* FNV-1a */
        for (const unsigned char *c = (const unsigned char *)json; *c; c++)
                h = (h ^ *c) * 1099511628211ULL;
        char path[320], tmp[340];
        snprintf(path, sizeof(path), "%s/seccomp-%016" PRIx64 ".json", dir, h);
        snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
        size_t len = strlen(json);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, json, len) != (ssize_t)len || fsync(fd) < 0 ||
            rename(tmp, path) < 0) {
                int k = errno;
                unlink(tmp);
                return err_set(e, ERR_CONFIG, k, "seccomp: cannot write %s: %s", path, strerror(k));
        }
        *ret_path = strdup(path);
        return *ret_path ? 0 : -ENOMEM;
}

int sandbox_profile_load(const struct config *cfg, struct sandbox_profile *ret, struct err *e)
{
        *ret = (struct sandbox_profile){0};
        const char *which = cfg->seccomp ? cfg->seccomp : "corral";
        if (strcmp(which, "engine") == 0) {
                snprintf(ret->summary, sizeof(ret->summary),
                         "the engine's default seccomp profile (seccomp: engine)");
                return 0;
        }
        struct seccomp_rules rules = {0};
        json_auto_t *json = NULL;
        int r;
        if (strcmp(which, "corral") == 0)
                r = seccomp_rules_parse(corral_seccomp_policy, strlen(corral_seccomp_policy),
                                        "policy/seccomp.policy", &rules, e);
        else
                r = load_file(which, &rules, &json, e);
        if (r < 0)
                return r;
        _cleanup_free_ char *skipped = NULL;
        size_t allowed = 0;
        for (size_t i = 0; i < rules.n; i++) /* calls, not the lines of one */
                allowed += rules.v[i].action != SC_DENY &&
                           seccomp_rules_find(&rules, rules.v[i].name) == &rules.v[i];
        if (!json)
                json = seccomp_rules_engine_json(
                    &rules, config_runsc(cfg) ? SECCOMP_JSON_GVISOR : 0, &skipped);
        seccomp_rules_done(&rules);
        ret->seccomp_json = json ? json_dumps(json, JSON_COMPACT) : NULL;
        if (!ret->seccomp_json)
                return -ENOMEM;
        if (skipped)
                log_info("seccomp: not on this architecture, left out of the profile: %s", skipped);
        if (allowed)
                snprintf(ret->summary, sizeof(ret->summary),
                         "%.200s: %zu calls allowed or answered%s%.300s, every other one EPERM",
                         strcmp(which, "corral") == 0 ? "corral's policy/seccomp.policy" : which,
                         allowed, skipped ? "; not on this architecture: " : "",
                         skipped ? skipped : "");
        else
                snprintf(ret->summary, sizeof(ret->summary), "%.500s (engine JSON format)", which);
        r = write_profile(ret->seccomp_json, &ret->seccomp_path, e);
        if (r < 0)
                sandbox_profile_done(ret);
        return r;
}

void sandbox_profile_done(struct sandbox_profile *p)
{
        free(p->seccomp_json);
        free(p->seccomp_path);
        free(p->engine_path);
        p->seccomp_json = p->seccomp_path = p->engine_path = NULL;
}

int sandbox_profile_apply(const struct sandbox_profile *p, const struct config *cfg,
                          enum engine_kind kind, json_t *body)
{
        json_t *hc = json_object_get(body, "HostConfig");
        json_t *opts = json_object_get(hc, "SecurityOpt");
        json_t *tmpfs = json_object_get(hc, "Tmpfs");
        if (!json_is_array(opts) || !json_is_object(tmpfs))
                return -EINVAL;
        bool docker = kind == ENGINE_DOCKER;
        /* Docker takes the profile itself; Podman's API takes a path. */
        if (p->seccomp_json) {
                const char *v = docker           ? p->seccomp_json
                                : p->engine_path ? p->engine_path
                                                 : p->seccomp_path;
                /* Never the path in corral's container (sandbox.c says why). */
                if (!docker && p->in_container && !p->engine_path)
                        return -ENOENT;
                size_t n = strlen(v) + 9;
                _cleanup_free_ char *opt = malloc(n);
                if (!opt)
                        return -ENOMEM;
                snprintf(opt, n, "seccomp=%s", v);
                if (json_array_append_new(opts, json_string(opt)) < 0)
                        return -ENOMEM;
        }
        /* Docker replaces its default list with MaskedPaths (ours includes
         * it); Podman reads MaskedPaths not, but adds `mask=` paths to its
         * defaults. */
        if (docker) {
                json_t *m = json_array();
                for (size_t i = 0; sandbox_masked_paths[i]; i++)
                        json_array_append_new(m, json_string(sandbox_masked_paths[i]));
                if (json_object_set_new(hc, "MaskedPaths", m) < 0)
                        return -ENOMEM;
        } else {
                char opt[1024] = "mask=";
                for (size_t i = 0; sandbox_masked_paths[i]; i++) {
                        if (i)
                                strncat(opt, ":", sizeof(opt) - strlen(opt) - 1);
                        strncat(opt, sandbox_masked_paths[i], sizeof(opt) - strlen(opt) - 1);
                }
                if (json_array_append_new(opts, json_string(opt)) < 0)
                        return -ENOMEM;
        }
        /* Podman mounts writable tmpfs, as large as the host allows, on /run
         * and /var/tmp of a read-only container; Docker leaves them in the
         * read-only image. Empty read-only mounts make both the same: the
         * only writable places are /tmp, /workspace and /dev/shm, each with
         * a size. */
        static const char ro[] = "ro,nosuid,nodev,noexec,size=4k,mode=755";
        if (json_object_set_new(tmpfs, "/run", json_string(ro)) < 0 ||
            json_object_set_new(tmpfs, "/var/tmp", json_string(ro)) < 0 ||
            json_object_set_new(hc, "ShmSize", json_integer((json_int_t)cfg->shm_size)) < 0)
                return -ENOMEM;
        return 0;
}
