/* The service's Host and Origin checks on any bytes: no read past the
 * value, and whatever is taken has the one shape they promise: a name
 * then nothing or ':' and a port of 1 to 65535 in digits; a loopback or
 * listed name unless any name was allowed. First byte: bit 0 any_name,
 * bit 1 check the rest as an Origin too. */
#include "mcp/host.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *const names[] = {"corral.example", "lb.example:8443", NULL};

/* An independent reading: where the port starts (0: none) and whether the
 * text after the name is a port. */
static bool shape_ok(const char *s, size_t n, size_t *name_len)
{
        size_t k = n;
        if (n && s[0] == '[') {
                const char *close = memchr(s, ']', n);
                if (!close)
                        return false;
                k = (size_t)(close - s) + 1;
        } else {
                for (size_t i = 0; i < n; i++)
                        if (s[i] == ':') {
                                k = i;
                                break;
                        }
        }
        *name_len = k;
        if (k == 0)
                return false;
        if (k == n)
                return true;
        size_t digits = n - k - 1;
        if (s[k] != ':' || digits < 1 || digits > 5)
                return false;
        long port = 0;
        for (size_t i = k + 1; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                port = port * 10 + (s[i] - '0');
        }
        return port >= 1 && port <= 65535;
}

static bool known(const char *s, size_t n, size_t k, bool listed)
{
        static const char *const loopback[] = {"localhost", "127.0.0.1", "[::1]"};
        for (size_t i = 0; i < 3; i++)
                if (k == strlen(loopback[i]) && strncasecmp(s, loopback[i], k) == 0)
                        return true;
        for (char *const *p = names; listed && *p; p++)
                if ((k == strlen(*p) && strncasecmp(s, *p, k) == 0) ||
                    (n == strlen(*p) && strncasecmp(s, *p, n) == 0))
                        return true;
        return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        bool any = data[0] & 1, origin = data[0] & 2;
        size_t n = size - 1;
        /* Exactly n bytes, no NUL after them: a read past is caught. */
        char *s = malloc(n ? n : 1);
        if (!s)
                return 0;
        memcpy(s, data + 1, n);
        size_t k = 0;
        if (http_host_allowed(s, n, names, any)) {
                if (!shape_ok(s, n, &k) || (!any && !known(s, n, k, true)))
                        abort();
                for (size_t i = 0; i < k; i++)
                        if (s[i] == '\0' || s[i] == '/' || s[i] == '@' || s[i] == ' ')
                                abort();
        }
        if (origin) {
                char *z = malloc(n + 1);
                if (!z)
                        abort();
                memcpy(z, s, n);
                z[n] = '\0';
                if (http_origin_loopback(z)) {
                        /* A header is a C string: it ends at its first NUL. */
                        const char *p = strstr(z, "://");
                        if (!p)
                                abort();
                        size_t m = strlen(p + 3);
                        if (!shape_ok(p + 3, m, &k) || !known(p + 3, m, k, false))
                                abort();
                }
                free(z);
        }
        free(s);
        return 0;
}
