/* The service's Host and Origin checks (mcp/host.h). */
#include "mcp/host.h"

#include <string.h>
#include <strings.h>

static const char *const loopback_names[] = {"localhost", "127.0.0.1", "[::1]"};

/* `n` bytes of `s` are `name`, in any case. */
static bool same(const char *s, size_t n, const char *name)
{
        return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

static bool is_digit(char c)
{
        return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
        return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_alnum(char c)
{
        return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* 1 to 5 digits, 1 to 65535: nothing else is a port. */
static bool port_ok(const char *p, size_t n)
{
        if (n < 1 || n > 5)
                return false;
        unsigned long v = 0;
        for (size_t i = 0; i < n; i++) {
                if (!is_digit(p[i]))
                        return false;
                v = v * 10 + (unsigned long)(p[i] - '0');
        }
        return v >= 1 && v <= 65535;
}

/* A name as RFC 3986 writes one, without percent-encoding: unreserved
 * characters, or an IPv6 address in brackets. */
static bool name_ok(const char *s, size_t n)
{
        if (n == 0)
                return false;
        if (s[0] == '[') {
                if (n < 4 || s[n - 1] != ']')
                        return false;
                for (size_t i = 1; i + 1 < n; i++)
                        if (!is_hex(s[i]) && s[i] != ':' && s[i] != '.')
                                return false;
                return true;
        }
        for (size_t i = 0; i < n; i++)
                if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '.' && s[i] != '_' && s[i] != '~')
                        return false;
        return true;
}

bool http_host_allowed(const char *host, size_t n, char *const *names, bool any_name)
{
        /* The name ends at its closing bracket, or at the first ':'. */
        size_t k = n;
        if (n > 0 && host[0] == '[') {
                const char *close = memchr(host, ']', n);
                if (!close)
                        return false;
                k = (size_t)(close - host) + 1;
        } else {
                const char *colon = memchr(host, ':', n);
                if (colon)
                        k = (size_t)(colon - host);
        }
        if (k < n && !(host[k] == ':' && port_ok(host + k + 1, n - k - 1)))
                return false;
        if (!name_ok(host, k))
                return false;
        for (size_t i = 0; i < sizeof(loopback_names) / sizeof(loopback_names[0]); i++)
                if (same(host, k, loopback_names[i]))
                        return true;
        for (char *const *p = names; p && *p; p++)
                if (same(host, n, *p) || same(host, k, *p))
                        return true;
        return any_name;
}

bool http_origin_loopback(const char *origin)
{
        const char *p;
        if (strncasecmp(origin, "http://", 7) == 0)
                p = origin + 7;
        else if (strncasecmp(origin, "https://", 8) == 0)
                p = origin + 8;
        else
                return false;
        return http_host_allowed(p, strlen(p), NULL, false);
}
