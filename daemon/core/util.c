#include "core/util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

int err_set(struct err *e, enum err_kind kind, int code, const char *fmt, ...)
{
        if (code > 0)
                code = -code;
        if (code == 0)
                code = -EIO;
        if (!e)
                return code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        e->kind = kind;
        e->code = code;
        return code;
}

void err_prefix(struct err *e, const char *fmt, ...)
{
        if (!e)
                return;
        char pre[256], old[sizeof(e->msg)];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(pre, sizeof(pre), fmt, ap);
        va_end(ap);
        memcpy(old, e->msg, sizeof(old));
        snprintf(e->msg, sizeof(e->msg), "%s: %.*s", pre, (int)(sizeof(e->msg) - strlen(pre) - 3),
                 old);
}

int runtime_dir(char *buf, size_t size, struct err *e)
{
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        if (xdg && *xdg == '/' && access(xdg, W_OK) == 0)
                snprintf(buf, size, "%s/corral", xdg);
        else
                snprintf(buf, size, "/tmp/corral-%d", (int)getuid());
        /* Private to this user: an engine socket there grants control of
         * the engine. */
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
                return err_set(e, ERR_CONFIG, errno, "cannot create %s: %s", buf, strerror(errno));
        struct stat st;
        if (lstat(buf, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
            (st.st_mode & 077))
                return err_set(e, ERR_CONFIG, EPERM,
                               "%s must be a directory owned by you with mode 0700", buf);
        return 0;
}

int write_all(int fd, const void *data, size_t n)
{
        const char *p = data;
        while (n) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EIO;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

char *path_find(const char *name)
{
        if (strchr(name, '/'))
                return access(name, X_OK) == 0 ? strdup(name) : NULL;
        const char *path = getenv("PATH");
        if (!path || !*path)
                path = "/usr/local/bin:/usr/bin:/bin";
        _cleanup_free_ char *copy = strdup(path);
        char *save = NULL;
        for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir;
             dir = strtok_r(NULL, ":", &save)) {
                _cleanup_free_ char *full = NULL;
                if (asprintf(&full, "%s/%s", dir, name) < 0) {
                        full = NULL;
                        break;
                }
                if (access(full, X_OK) == 0)
                        return TAKE_PTR(full);
        }
        return NULL;
}

int mkdir_parents(const char *path)
{
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        for (char *p = dir + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        return 0;
}

bool unix_socket_answers(const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sa.sun_path))
                return false;
        memcpy(sa.sun_path, path, strlen(path));
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool up = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        if (fd >= 0)
                close(fd);
        return up;
}

int service_socket_path(char *buf, size_t size, struct err *e)
{
        char dir[256];
        if (runtime_dir(dir, sizeof(dir), e) < 0)
                return -1;
        snprintf(buf, size, "%s/corral.sock", dir);
        return 0;
}

void proc_usage(long *ret_rss_kb, long *ret_hwm_kb, long long *ret_cpu_ms)
{
        char line[256];
        long rss = -1, hwm = -1;
        FILE *f = fopen("/proc/self/status", "re");
        while (f && fgets(line, sizeof(line), f)) {
                sscanf(line, "VmRSS: %ld", &rss);
                sscanf(line, "VmHWM: %ld", &hwm);
        }
        if (f)
                fclose(f);
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        *ret_rss_kb = rss;
        *ret_hwm_kb = hwm;
        *ret_cpu_ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool str_equal_ct(const char *a, const char *b, size_t n)
{
        volatile unsigned char d = 0;
        for (size_t i = 0; i < n; i++)
                d |= (unsigned char)a[i] ^ (unsigned char)b[i];
        return d == 0;
}

long long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long now_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int parse_size(const char *s, unsigned long long *ret)
{
        if (!s || !isdigit((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno)
                return -EINVAL;
        unsigned shift = 0;
        switch (tolower((unsigned char)*end)) {
        case '\0':
                break;
        case 'k':
                shift = 10;
                break;
        case 'm':
                shift = 20;
                break;
        case 'g':
                shift = 30;
                break;
        default:
                return -EINVAL;
        }
        if (*end) {
                end++;
                if (tolower((unsigned char)*end) == 'i')
                        end++;
                if (tolower((unsigned char)*end) == 'b')
                        end++;
                if (*end)
                        return -EINVAL;
        }
        if (shift && v > (~0ULL >> shift))
                return -ERANGE;
        *ret = v << shift;
        return 0;
}

int strv_push(char ***v, char *s)
{
        if (!s)
                return -ENOMEM;
        size_t n = strv_len(*v);
        char **nv = realloc(*v, (n + 2) * sizeof(char *));
        if (!nv) {
                free(s);
                return -ENOMEM;
        }
        nv[n] = s;
        nv[n + 1] = NULL;
        *v = nv;
        return 0;
}

size_t strv_len(char **v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

char **strv_free(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
        return NULL;
}

char *xdg_path(const char *var, const char *home_dir, const char *rel)
{
        const char *base = getenv(var);
        const char *home = getenv("HOME");
        char *p = NULL;
        if (base && *base == '/') {
                if (asprintf(&p, "%s/%s", base, rel) < 0)
                        return NULL;
        } else if (home && *home == '/') {
                if (asprintf(&p, "%s/%s/%s", home, home_dir, rel) < 0)
                        return NULL;
        }
        return p;
}

/* The parent of a process, from /proc/PID/stat (after the command's
 * closing parenthesis: state, then ppid). */
long proc_ppid(long pid)
{
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -1;
        size_t n = fread(line, 1, sizeof(line) - 1, f);
        fclose(f);
        line[n] = '\0';
        char *p = strrchr(line, ')');
        long ppid;
        if (!p || sscanf(p + 1, " %*c %ld", &ppid) != 1)
                return -1;
        return ppid;
}

long long proc_pss_kb(long pid)
{
        char path[64], line[256];
        long long kb = -1, v;
        snprintf(path, sizeof(path), "/proc/%ld/smaps_rollup", pid);
        FILE *f = fopen(path, "re");
        if (f) {
                while (kb < 0 && fgets(line, sizeof(line), f))
                        if (sscanf(line, "Pss: %lld kB", &v) == 1)
                                kb = v;
                fclose(f);
                if (kb >= 0)
                        return kb;
        }
        snprintf(path, sizeof(path), "/proc/%ld/status", pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (kb < 0 && fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %lld kB", &v) == 1)
                        kb = v;
        fclose(f);
        return kb < 0 ? 0 : kb; /* a kernel thread, a zombie: no memory */
}

#define PROC_TREE_MAX 4096 /* processes looked at, of the whole host */

int proc_tree_pss(long pid, long long *ret_kb)
{
        long top = proc_ppid(pid);
        if (top <= 1)
                top = pid; /* no monitor of its own: the container's processes only */
        DIR *d = opendir("/proc");
        if (!d)
                return -errno;
        long(*pp)[2] = malloc(PROC_TREE_MAX * sizeof(*pp)); /* pid, ppid */
        size_t n = 0;
        struct dirent *de;
        while (pp && n < PROC_TREE_MAX && (de = readdir(d))) {
                char *end;
                long p = strtol(de->d_name, &end, 10);
                long parent;
                if (*end || p <= 0 || (parent = proc_ppid(p)) < 0)
                        continue;
                pp[n][0] = p;
                pp[n][1] = parent;
                n++;
        }
        closedir(d);
        if (!pp)
                return -ENOMEM;
        /* Breadth first from the top: the list in front of i is the tree
         * found so far, its members moved there as they are found. */
        size_t found = 0;
        for (size_t i = 0; i < n; i++)
                if (pp[i][0] == top) {
                        long t[2] = {pp[i][0], pp[i][1]};
                        memcpy(pp[i], pp[0], sizeof(t));
                        memcpy(pp[0], t, sizeof(t));
                        found = 1;
                        break;
                }
        for (size_t i = 0; i < found; i++)
                for (size_t j = found; j < n; j++)
                        if (pp[j][1] == pp[i][0]) {
                                long t[2] = {pp[j][0], pp[j][1]};
                                memcpy(pp[j], pp[found], sizeof(t));
                                memcpy(pp[found], t, sizeof(t));
                                found++;
                        }
        long long kb = 0;
        int counted = 0;
        for (size_t i = 0; i < found; i++) {
                long long k = proc_pss_kb(pp[i][0]);
                if (k >= 0) {
                        kb += k;
                        counted++;
                }
        }
        free(pp);
        if (counted == 0)
                return -ESRCH;
        *ret_kb = kb;
        return counted;
}

int proc_comm(long pid, char *buf, size_t size)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        bool got = fgets(buf, (int)size, f) != NULL;
        fclose(f);
        if (!got)
                return -EIO;
        buf[strcspn(buf, "\n")] = '\0';
        return 0;
}
