#include "bridge/proxy_head.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool tchar(unsigned char c)
{
        return isalnum(c) || strchr("!#$%&'*+-.^_`|~", c);
}

bool proxy_token(const char *s)
{
        if (!*s)
                return false;
        for (; *s; s++)
                if (!tchar((unsigned char)*s))
                        return false;
        return true;
}

static int bad(int *status, const char **why, int code, const char *text)
{
        *status = code;
        *why = text;
        return -EINVAL;
}

/* Why an address is not in its one spelling, or NULL. getaddrinfo also
 * reads 0x0a.1.2.3, 010.1.2.3, 10.1.515 and a bare number as IPv4, and a
 * socket reaches an IPv4 address through IPv6 (mapped ::ffff:a.b.c.d,
 * compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d): each would slip past a
 * grant or policy glob that names the address, since those compare the
 * host as written. */
static const char *other_spelling(const char *host)
{
        if (strchr(host, ':')) {
                static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
                static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
                static const unsigned char zero[12] = {0};
                struct in6_addr a;
                if (inet_pton(AF_INET6, host, &a) != 1)
                        return NULL;
                const unsigned char *b = a.s6_addr;
                bool own = !memcmp(b, zero, 12) && !(b[12] | b[13] | b[14]) && b[15] <= 1;
                if (!memcmp(b, mapped, 12) || !memcmp(b, nat64, 12) ||
                    (!memcmp(b, zero, 12) && !own))
                        return "an IPv4 address inside an IPv6 one is not taken: write a.b.c.d";
                return NULL;
        }
        struct in_addr a;
        if (inet_aton(host, &a) && inet_pton(AF_INET, host, &a) != 1)
                return "an IPv4 address is taken only as a.b.c.d, in decimal";
        return NULL;
}

/* "host[:port]" of an absolute URL or of CONNECT: into h. */
static int authority(struct proxy_head *h, const char *a, size_t n, int default_port, int *status,
                     const char **why)
{
        char text[NET_PATTERN_MAX + 1];
        const char *reason;
        if (n == 0 || n > NET_PATTERN_MAX)
                return bad(status, why, 400, "the request names no host, or too long a one");
        memcpy(text, a, n);
        text[n] = '\0';
        if (memchr(text, '@', n))
                return bad(status, why, 400, "credentials in the URL are not passed on");
        if (net_pattern_parse(text, false, h->host, sizeof(h->host), &h->port, &reason) < 0)
                return bad(status, why, 400, "the request's host is not a host name or address");
        const char *other = other_spelling(h->host);
        if (other)
                return bad(status, why, 400, other);
        if (!h->port)
                h->port = default_port;
        if (!h->port)
                return bad(status, why, 400, "CONNECT needs host:port");
        return 0;
}

static int request_line(struct proxy_head *h, char *line, int *status, const char **why)
{
        char *sp1 = strchr(line, ' ');
        char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp1 || !sp2 || strchr(sp2 + 1, ' '))
                return bad(status, why, 400, "the request line is not METHOD TARGET HTTP/1.x");
        size_t mlen = (size_t)(sp1 - line);
        if (mlen == 0 || mlen >= sizeof(h->method))
                return bad(status, why, 400, "the method is empty or too long");
        for (size_t i = 0; i < mlen; i++)
                if (!tchar((unsigned char)line[i]))
                        return bad(status, why, 400, "the method is not a token");
        memcpy(h->method, line, mlen);
        h->method[mlen] = '\0';
        if (strcmp(sp2 + 1, "HTTP/1.1") != 0 && strcmp(sp2 + 1, "HTTP/1.0") != 0)
                return bad(status, why, 505, "only HTTP/1.0 and HTTP/1.1 are spoken here");
        const char *t = sp1 + 1;
        size_t tlen = (size_t)(sp2 - t);
        if (tlen == 0)
                return bad(status, why, 400, "the request has no target");
        for (size_t i = 0; i < tlen; i++)
                if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
                        return bad(status, why, 400, "the target holds a character URLs cannot");
        if (strcmp(h->method, "CONNECT") == 0) {
                h->connect = true;
                return authority(h, t, tlen, 0, status, why);
        }
        if (tlen >= 8 && strncasecmp(t, "https://", 8) == 0)
                return bad(status, why, 400,
                           "an https:// URL goes through CONNECT (HTTPS_PROXY), which keeps TLS "
                           "end to end");
        if (tlen < 7 || strncasecmp(t, "http://", 7) != 0)
                return bad(status, why, 400,
                           "a proxy request needs an absolute http:// URL, or CONNECT");
        const char *a = t + 7;
        size_t alen = strcspn(a, "/?#");
        if (a + alen > t + tlen)
                alen = (size_t)(t + tlen - a);
        int r = authority(h, a, alen, 80, status, why);
        if (r < 0)
                return r;
        const char *rest = a + alen;
        size_t rlen = (size_t)(t + tlen - rest);
        size_t frag = strcspn(rest, "#");
        if (frag < rlen)
                rlen = frag;
        h->path = malloc(rlen + 2);
        if (!h->path)
                return bad(status, why, 500, "out of memory");
        if (rlen == 0 || rest[0] != '/') {
                h->path[0] = '/';
                memcpy(h->path + 1, rest, rlen);
                h->path[rlen + 1] = '\0';
        } else {
                memcpy(h->path, rest, rlen);
                h->path[rlen] = '\0';
        }
        return 0;
}

int proxy_head_parse(const char *p, size_t n, struct proxy_head *h, int *status, const char **why)
{
        *h = (struct proxy_head){0};
        if (n > PROXY_HEAD_MAX)
                return bad(status, why, 431, "the request head is over 16384 bytes");
        if (n < 4 || memcmp(p + n - 4, "\r\n\r\n", 4) != 0)
                return bad(status, why, 400, "the request head does not end with a blank line");
        if (memchr(p, '\0', n))
                return bad(status, why, 400, "the request head holds a NUL byte");
        h->copy = malloc(n + 1);
        if (!h->copy)
                return bad(status, why, 500, "out of memory");
        memcpy(h->copy, p, n);
        h->copy[n - 2] = '\0'; /* the blank line's CRLF: after it, nothing */
        char *line = h->copy, *end = h->copy + n - 2;
        bool first = true;
        const char *cl = NULL;
        bool te = false;
        int r = 0;
        while (line < end && r == 0) {
                char *crlf = strstr(line, "\r\n");
                if (!crlf)
                        break;
                *crlf = '\0';
                if (memchr(line, '\r', (size_t)(crlf - line)) ||
                    memchr(line, '\n', (size_t)(crlf - line))) {
                        r = bad(status, why, 400, "a bare CR or LF inside a line");
                } else if (first) {
                        r = request_line(h, line, status, why);
                        first = false;
                } else if (*line == ' ' || *line == '\t') {
                        r = bad(status, why, 400, "folded header lines are not accepted");
                } else if (h->n_headers >= PROXY_HEADERS_MAX) {
                        r = bad(status, why, 431, "more than 100 header lines");
                } else {
                        char *colon = strchr(line, ':');
                        if (!colon || colon == line) {
                                r = bad(status, why, 400, "a header line without a name");
                                break;
                        }
                        for (char *q = line; q < colon && r == 0; q++)
                                if (!tchar((unsigned char)*q))
                                        r = bad(status, why, 400, "a header name is not a token");
                        if (r < 0)
                                break;
                        *colon = '\0';
                        char *v = colon + 1;
                        while (*v == ' ' || *v == '\t')
                                v++;
                        char *ve = v + strlen(v);
                        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                                *--ve = '\0';
                        for (char *q = v; *q && r == 0; q++)
                                if ((unsigned char)*q < 0x20 && *q != '\t')
                                        r = bad(status, why, 400,
                                                "a header value holds a control character");
                        if (strcasecmp(line, "Content-Length") == 0) {
                                if (cl && strcmp(cl, v) != 0)
                                        r = bad(status, why, 400, "two different Content-Length");
                                cl = v;
                        }
                        if (strcasecmp(line, "Transfer-Encoding") == 0)
                                te = true;
                        h->headers[h->n_headers++] = (struct proxy_header){line, v};
                }
                line = crlf + 2;
        }
        if (r == 0 && first)
                r = bad(status, why, 400, "the request has no request line");
        if (r == 0 && cl && te)
                r = bad(status, why, 400, "both Content-Length and Transfer-Encoding");
        if (r == 0 && cl) {
                for (const char *q = cl; *q && r == 0; q++)
                        if (!isdigit((unsigned char)*q))
                                r = bad(status, why, 400, "Content-Length is not a number");
                if (r == 0 && (!*cl || strlen(cl) > 18))
                        r = bad(status, why, 400, "Content-Length is not a number");
        }
        if (r < 0)
                proxy_head_free(h);
        return r;
}

void proxy_head_free(struct proxy_head *h)
{
        free(h->path);
        free(h->copy);
        h->path = h->copy = NULL;
        h->n_headers = 0;
}

/* Whether `name` is in the comma-separated token list `list`. */
static bool in_list(const char *list, const char *name)
{
        size_t n = strlen(name);
        for (const char *p = list; p && *p;) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                size_t k = strcspn(p, ", \t");
                if (k == n && strncasecmp(p, name, n) == 0)
                        return true;
                p += k;
        }
        return false;
}

static bool dropped(const struct proxy_head *h, const char *name, const char *const *set_names,
                    size_t n_set)
{
        static const char *const hop[] = {"Connection", "Keep-Alive", "TE",
                                          "Trailer",    "Upgrade",    "Host"};
        /* Proxy-* is for corral's proxy (its credentials, its connection),
         * never for the origin. */
        if (strncasecmp(name, "Proxy-", 6) == 0)
                return true;
        for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
                if (strcasecmp(name, hop[i]) == 0)
                        return true;
        for (size_t i = 0; i < n_set; i++)
                if (strcasecmp(name, set_names[i]) == 0)
                        return true;
        for (size_t i = 0; i < h->n_headers; i++)
                if (strcasecmp(h->headers[i].name, "Connection") == 0 &&
                    in_list(h->headers[i].value, name))
                        return true;
        return false;
}

int proxy_head_write(const struct proxy_head *h, const char *host_value,
                     const char *const *set_names, const char *const *set_values, size_t n_set,
                     struct buf *out)
{
        int r = buf_printf(out, "%s %s HTTP/1.1\r\nHost: %s\r\n", h->method,
                           h->path ? h->path : "/", host_value);
        for (size_t i = 0; r >= 0 && i < h->n_headers; i++)
                if (!dropped(h, h->headers[i].name, set_names, n_set))
                        r = buf_printf(out, "%s: %s\r\n", h->headers[i].name, h->headers[i].value);
        for (size_t i = 0; r >= 0 && i < n_set; i++)
                if (set_values[i])
                        r = buf_printf(out, "%s: %s\r\n", set_names[i], set_values[i]);
        if (r >= 0)
                r = buf_printf(out, "Connection: close\r\n\r\n");
        return r < 0 ? r : 0;
}

static const char *reason_phrase(int status)
{
        switch (status) {
        case 400:
                return "Bad Request";
        case 403:
                return "Forbidden";
        case 431:
                return "Request Header Fields Too Large";
        case 500:
                return "Internal Server Error";
        case 502:
                return "Bad Gateway";
        case 503:
                return "Service Unavailable";
        case 504:
                return "Gateway Timeout";
        case 505:
                return "HTTP Version Not Supported";
        default:
                return "Error";
        }
}

int proxy_answer(struct buf *out, int status, const char *why)
{
        char body[1200];
        int n = snprintf(body, sizeof(body), "corral: %s\n", why);
        if (n < 0 || (size_t)n >= sizeof(body))
                n = (int)sizeof(body) - 1;
        int r = buf_printf(out,
                           "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                           "Connection: close\r\nContent-Length: %d\r\nX-Corral-Refused: %d\r\n"
                           "\r\n%.*s",
                           status, reason_phrase(status), n, status, n, body);
        return r < 0 ? r : 0;
}
