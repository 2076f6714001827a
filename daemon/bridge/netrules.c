#include "bridge/netrules.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool host_char(char c, bool glob)
{
        return isalnum((unsigned char)c) || c == '-' || c == '.' || (glob && c == '*') || c == '_';
}

int net_pattern_parse(const char *s, bool glob, char *host, size_t host_size, int *port,
                      const char **why)
{
        *port = 0;
        if (!s || !*s || strlen(s) > NET_PATTERN_MAX)
                return *why = "must be 1 to 260 characters", -EINVAL;
        const char *end, *colon = NULL;
        if (s[0] == '[') {
                end = strchr(s, ']');
                if (!end)
                        return *why = "an IPv6 address needs its closing \"]\"", -EINVAL;
                if (end[1] == ':')
                        colon = end + 1;
                else if (end[1])
                        return *why = "text after \"]\" must be \":port\"", -EINVAL;
                end++;
                char v6[64];
                size_t n = (size_t)(end - s) - 2;
                struct in6_addr a;
                if (n >= sizeof(v6))
                        return *why = "not an IPv6 address", -EINVAL;
                memcpy(v6, s + 1, n);
                v6[n] = '\0';
                if (inet_pton(AF_INET6, v6, &a) != 1)
                        return *why = "not an IPv6 address", -EINVAL;
        } else {
                colon = strchr(s, ':');
                end = colon ? colon : s + strlen(s);
                if (end == s)
                        return *why = "the host is empty", -EINVAL;
                if ((size_t)(end - s) > NET_HOST_MAX)
                        return *why = "the host is longer than 253 characters", -EINVAL;
                for (const char *p = s; p < end; p++)
                        if (!host_char(*p, glob))
                                return *why = glob ? "a host may hold letters, digits, '-', '.', "
                                                     "'_' and '*'"
                                                   : "a host may hold letters, digits, '-', '.' "
                                                     "and '_'",
                                       -EINVAL;
                if (s[0] == '.' || end[-1] == '.' || strstr(s, ".."))
                        return *why = "a host cannot start or end with '.', or hold \"..\"",
                               -EINVAL;
        }
        if (colon) {
                char *e;
                errno = 0;
                long n = strtol(colon + 1, &e, 10);
                if (!isdigit((unsigned char)colon[1]) || *e || errno || n < 1 || n > 65535)
                        return *why = "the port must be a number from 1 to 65535", -EINVAL;
                *port = (int)n;
        }
        /* An IPv6 address without its brackets, as a request's host is. */
        const char *from = s[0] == '[' ? s + 1 : s;
        size_t n = (size_t)(end - s) - (s[0] == '[' ? 2 : 0);
        if (n + 1 > host_size)
                return *why = "the host is too long", -EINVAL;
        for (size_t i = 0; i < n; i++)
                host[i] = (char)tolower((unsigned char)from[i]);
        host[n] = '\0';
        return 0;
}

bool net_pattern_match(const char *pattern, const char *host, int port, const int *default_ports,
                       size_t n_default_ports)
{
        char h[NET_HOST_MAX + 4];
        int p;
        const char *why;
        if (net_pattern_parse(pattern, true, h, sizeof(h), &p, &why) < 0)
                return false;
        if (p && p != port)
                return false;
        if (!p && default_ports) {
                bool any = false;
                for (size_t i = 0; i < n_default_ports; i++)
                        any = any || default_ports[i] == port;
                if (!any)
                        return false;
        }
        if (strchr(h, ':')) {
                /* An IPv6 address (its brackets gone) is compared as an
                 * address, whatever its spelling. */
                struct in6_addr a, b;
                return inet_pton(AF_INET6, h, &a) == 1 && inet_pton(AF_INET6, host, &b) == 1 &&
                       memcmp(&a, &b, sizeof(a)) == 0;
        }
        /* The host is lowercased already; '*' spans dots. */
        return fnmatch(h, host, 0) == 0;
}

int net_range_parse(const char *s, struct net_range *ret)
{
        char a[64];
        const char *slash = strchr(s, '/');
        size_t n = slash ? (size_t)(slash - s) : strlen(s);
        if (n == 0 || n >= sizeof(a))
                return -EINVAL;
        memcpy(a, s, n);
        a[n] = '\0';
        *ret = (struct net_range){0};
        int max;
        if (inet_pton(AF_INET, a, ret->addr) == 1) {
                ret->family = AF_INET;
                max = 32;
        } else if (inet_pton(AF_INET6, a, ret->addr) == 1) {
                ret->family = AF_INET6;
                max = 128;
        } else {
                return -EINVAL;
        }
        ret->bits = max;
        if (slash) {
                char *e;
                long b = strtol(slash + 1, &e, 10);
                if (!isdigit((unsigned char)slash[1]) || *e || b < 0 || b > max)
                        return -EINVAL;
                ret->bits = (int)b;
        }
        return 0;
}

static bool prefix_eq(const unsigned char *a, const unsigned char *b, int bits)
{
        int whole = bits / 8, rest = bits % 8;
        if (memcmp(a, b, (size_t)whole) != 0)
                return false;
        if (!rest)
                return true;
        unsigned char mask = (unsigned char)(0xff << (8 - rest));
        return (a[whole] & mask) == (b[whole] & mask);
}

/* The IPv4 address an IPv6 one carries (mapped ::ffff:a.b.c.d, NAT64
 * 64:ff9b::a.b.c.d, the old compatible ::a.b.c.d), or false. */
static bool embedded_v4(const unsigned char *v6, unsigned char *v4)
{
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
        static const unsigned char compat[12] = {0};
        if (memcmp(v6, mapped, 12) && memcmp(v6, nat64, 12) && memcmp(v6, compat, 12))
                return false;
        if (!memcmp(v6, compat, 12) && (v6[12] | v6[13] | v6[14]) == 0 && v6[15] <= 1)
                return false; /* :: and ::1 are IPv6's own */
        memcpy(v4, v6 + 12, 4);
        return true;
}

bool net_range_contains(const struct net_range *r, const struct sockaddr *sa)
{
        unsigned char v4[4];
        if (sa->sa_family == AF_INET) {
                const unsigned char *a =
                    (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
                return r->family == AF_INET && prefix_eq(a, r->addr, r->bits);
        }
        if (sa->sa_family != AF_INET6)
                return false;
        const unsigned char *a =
            (const unsigned char *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (r->family == AF_INET6)
                return prefix_eq(a, r->addr, r->bits);
        return embedded_v4(a, v4) && prefix_eq(v4, r->addr, r->bits);
}

struct special {
        const char *range;
        const char *why;
};

/* Most specific first: the first match names the reason. */
static const struct special specials[] = {
    {"169.254.169.254/32", "cloud metadata"},
    {"169.254.170.2/32", "cloud metadata"},
    {"100.100.100.200/32", "cloud metadata"},
    {"fd00:ec2::254/128", "cloud metadata"},
    {"0.0.0.0/8", "unspecified"},
    {"127.0.0.0/8", "loopback"},
    {"10.0.0.0/8", "private"},
    {"172.16.0.0/12", "private"},
    {"192.168.0.0/16", "private"},
    {"100.64.0.0/10", "shared (carrier-grade NAT)"},
    {"169.254.0.0/16", "link-local"},
    {"192.0.0.0/24", "reserved"},
    {"192.0.2.0/24", "documentation"},
    {"198.18.0.0/15", "benchmarking"},
    {"198.51.100.0/24", "documentation"},
    {"203.0.113.0/24", "documentation"},
    {"224.0.0.0/4", "multicast"},
    {"240.0.0.0/4", "reserved"},
    {"::/128", "unspecified"},
    {"::1/128", "loopback"},
    {"fc00::/7", "private"},
    {"fe80::/10", "link-local"},
    {"fec0::/10", "site-local"},
    {"ff00::/8", "multicast"},
    {"2001:db8::/32", "documentation"},
    {"100::/64", "discard"},
};

const char *net_address_special(const struct sockaddr *sa)
{
        if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
                return "not an internet address";
        for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) {
                struct net_range r;
                if (net_range_parse(specials[i].range, &r) == 0 && net_range_contains(&r, sa))
                        return specials[i].why;
        }
        return NULL;
}

void net_address_text(const struct sockaddr *sa, char *out, size_t size)
{
        const void *a = sa->sa_family == AF_INET
                            ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                            : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
            !inet_ntop(sa->sa_family, a, out, (socklen_t)size))
                snprintf(out, size, "?");
}
