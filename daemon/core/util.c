#include "core/util.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
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
