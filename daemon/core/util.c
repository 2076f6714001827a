#include "core/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

long long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
