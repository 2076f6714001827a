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
