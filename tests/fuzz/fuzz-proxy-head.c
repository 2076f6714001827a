/* The proxy's request head and host patterns on any bytes. The first byte
 * is the length (0 to 63) of a host pattern that follows it; the rest is a
 * request head as sandboxed code would send it. Whatever the parser takes
 * has the shape it promises (a host, an IPv4 address only as a.b.c.d,
 * a port of 1 to 65535, a path that starts with '/' or none for CONNECT,
 * clean header lines); the head written for the origin ends with one
 * blank line, has no bare CR or LF, one Host, the route's headers once
 * each, and no hop-by-hop or Proxy-* header; a refusal is an answer with
 * a body as long as it says. A pattern that parses covers its own host
 * and port. */
#include "bridge/netrules.h"
#include "bridge/proxy_head.h"
#include "core/buf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int default_ports[] = {80, 443};

static bool token(const char *s)
{
        if (!*s)
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
                        return false;
        return true;
}

/* A host as the parser gives it: a lowercase name or IPv4 address, or an
 * IPv6 address without brackets. */
static bool host_ok(const char *h)
{
        if (!*h || strlen(h) > NET_HOST_MAX)
                return false;
        if (strchr(h, ':')) {
                /* never IPv4 inside (mapped, compatible, NAT64) */
                static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
                static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
                struct in6_addr a;
                if (inet_pton(AF_INET6, h, &a) != 1)
                        return false;
                const unsigned char *b = a.s6_addr;
                size_t zeros = 0;
                while (zeros < 15 && !b[zeros])
                        zeros++;
                return memcmp(b, mapped, 12) != 0 && memcmp(b, nat64, 12) != 0 &&
                       (zeros < 12 || (zeros == 15 && b[15] <= 1));
        }
        /* IPv4 only as a.b.c.d in decimal */
        struct in_addr v4;
        if (inet_aton(h, &v4) && inet_pton(AF_INET, h, &v4) != 1)
                return false;
        for (const char *p = h; *p; p++)
                if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-' ||
                      *p == '.' || *p == '_'))
                        return false;
        return h[0] != '.' && h[strlen(h) - 1] != '.' && !strstr(h, "..");
}

static void check_pattern(const char *s)
{
        for (int glob = 0; glob < 2; glob++) {
                char host[NET_HOST_MAX + 4];
                int port = -1;
                const char *why = NULL;
                if (net_pattern_parse(s, glob, host, sizeof(host), &port, &why) < 0) {
                        if (!why || port != 0)
                                abort();
                        continue;
                }
                if (port < 0 || port > 65535 || !*host)
                        abort();
                /* An IPv6 address comes without its brackets, as the proxy
                 * sees a request's host. */
                bool v6 = strchr(host, ':') != NULL;
                for (const char *p = host; *p; p++)
                        if (isupper((unsigned char)*p) || (!glob && *p == '*') || *p == '[' ||
                            *p == ']' ||
                            (v6 && !(isxdigit((unsigned char)*p) || *p == ':' || *p == '.')) ||
                            (!v6 && !(isalnum((unsigned char)*p) || strchr("-._*", *p))))
                                abort();
                if (strchr(host, '*'))
                        continue;
                /* The pattern covers what it names. */
                const char *bare = host;
                int want = port ? port : 443;
                if (!net_pattern_match(s, bare, want, default_ports, 2))
                        abort();
                if (!net_pattern_match(s, bare, want, NULL, 0))
                        abort();
                if (port && net_pattern_match(s, bare, port == 1 ? 2 : port - 1, NULL, 0))
                        abort();
        }
}

/* The count of header lines named `name` (any case) in a written head. */
static int count(const char *head, const char *name)
{
        int n = 0;
        size_t k = strlen(name);
        for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
                if (strncasecmp(p + 2, name, k) == 0 && p[2 + k] == ':')
                        n++;
        return n;
}

static void check_written(const struct proxy_head *h)
{
        static const char *const names[] = {"Authorization", "X-Route"};
        static const char *const values[] = {"Bearer s3cret", "1"};
        struct buf out;
        buf_init(&out, PROXY_HEAD_MAX * 2);
        if (proxy_head_write(h, "origin.test:8443", names, values, 2, &out) < 0)
                abort(); /* what was parsed always fits twice its bound */
        char *s = malloc(out.len + 1);
        if (!s)
                abort();
        memcpy(s, out.data, out.len);
        s[out.len] = '\0';
        if (strlen(s) != out.len || out.len < 4 || memcmp(s + out.len - 4, "\r\n\r\n", 4) != 0)
                abort();
        /* The blank line only at the end; every LF after a CR, every CR
         * before an LF. */
        if ((size_t)(strstr(s, "\r\n\r\n") - s) != out.len - 4)
                abort();
        for (size_t i = 0; i < out.len; i++)
                if ((s[i] == '\n' && (i == 0 || s[i - 1] != '\r')) ||
                    (s[i] == '\r' && s[i + 1] != '\n'))
                        abort();
        /* METHOD SP /path SP HTTP/1.1 */
        size_t m = strlen(h->method);
        if (strncmp(s, h->method, m) != 0 || s[m] != ' ' || s[m + 1] != '/')
                abort();
        const char *eol = strstr(s, "\r\n");
        if (eol - s < 9 || memcmp(eol - 9, " HTTP/1.1", 9) != 0)
                abort();
        if (strncmp(eol, "\r\nHost: origin.test:8443\r\n", 26) != 0 || count(s, "Host") != 1)
                abort();
        if (count(s, "Authorization") != 1 || count(s, "X-Route") != 1 ||
            count(s, "Connection") != 1 || !strstr(s, "\r\nConnection: close\r\n\r\n"))
                abort();
        static const char *const hop[] = {"Keep-Alive", "TE", "Trailer", "Upgrade"};
        for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
                if (count(s, hop[i]))
                        abort();
        for (const char *p = strstr(s, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
                if (strncasecmp(p + 2, "Proxy-", 6) == 0)
                        abort();
        free(s);
        buf_free(&out);
}

static void check_parsed(const struct proxy_head *h, size_t n)
{
        if (!token(h->method) || !host_ok(h->host) || h->port < 1 || h->port > 65535)
                abort();
        if (h->connect != (strcmp(h->method, "CONNECT") == 0) || h->connect != (h->path == NULL))
                abort();
        if (h->path) {
                if (h->path[0] != '/' || strchr(h->path, '#') || strlen(h->path) > n)
                        abort();
                for (const char *p = h->path; *p; p++)
                        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                                abort();
        }
        if (h->n_headers > PROXY_HEADERS_MAX)
                abort();
        bool cl = false, te = false;
        for (size_t i = 0; i < h->n_headers; i++) {
                const char *name = h->headers[i].name, *v = h->headers[i].value;
                size_t k = strlen(v);
                if (!token(name) ||
                    (k && (v[0] == ' ' || v[0] == '\t' || v[k - 1] == ' ' || v[k - 1] == '\t')))
                        abort();
                for (const char *p = v; *p; p++)
                        if ((unsigned char)*p < 0x20 && *p != '\t')
                                abort();
                cl = cl || strcasecmp(name, "Content-Length") == 0;
                te = te || strcasecmp(name, "Transfer-Encoding") == 0;
        }
        if (cl && te)
                abort();
        check_written(h);
}

static void check_answer(int status, const char *why)
{
        struct buf out;
        buf_init(&out, 8192);
        if (proxy_answer(&out, status, why) < 0)
                abort();
        char *s = malloc(out.len + 1);
        if (!s)
                abort();
        memcpy(s, out.data, out.len);
        s[out.len] = '\0';
        const char *body = strstr(s, "\r\n\r\n");
        const char *cl = strstr(s, "\r\nContent-Length: ");
        if (!body || !cl || strtol(cl + 18, NULL, 10) != (long)(out.len - (size_t)(body + 4 - s)))
                abort();
        free(s);
        buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        size_t plen = data[0] & 0x3f;
        if (plen > size - 1)
                plen = size - 1;
        char pattern[64];
        memcpy(pattern, data + 1, plen);
        pattern[plen] = '\0';
        check_pattern(pattern);

        /* Exactly the head's bytes, no NUL after them: a read past is caught. */
        size_t n = size - 1 - plen;
        char *p = malloc(n ? n : 1);
        if (!p)
                return 0;
        memcpy(p, data + 1 + plen, n);
        struct proxy_head h;
        int status = 0;
        const char *why = NULL;
        int r = proxy_head_parse(p, n, &h, &status, &why);
        if (r == 0) {
                check_parsed(&h, n);
        } else {
                if (!why || (status != 400 && status != 431 && status != 505) || h.copy || h.path)
                        abort();
                check_answer(status, why);
        }
        proxy_head_free(&h);
        free(p);
        return 0;
}
