/* The network rules' pure pieces, row by row: host patterns (a run's grant
 * and the policy's globs), address ranges and special addresses, the
 * proxy's request head (parsed, written anew for the origin, and the
 * proxy's own answers), the policy's "network" section, and the checks of
 * a call's `network` argument and of network_routes/network_resolve. */
#include "bridge/egress.h"
#include "bridge/netrules.h"
#include "bridge/policy.h"
#include "bridge/proxy_head.h"
#include "core/buf.h"
#include "core/config.h"

#include "tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

extern const char corral_default_policy[];

/* A string of `n` copies of `c` (static buffers, one per call site). */
static const char *repeat(char *buf, size_t size, char c, size_t n, const char *tail)
{
        if (n + strlen(tail) + 1 > size)
                bail_out("repeat: %zu does not fit", n);
        memset(buf, c, n);
        strcpy(buf + n, tail);
        return buf;
}

/* A socket address from its numeric text (IPv4 or IPv6). */
static const struct sockaddr *sa_of(const char *text, struct sockaddr_storage *ss)
{
        memset(ss, 0, sizeof(*ss));
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET, text, &in->sin_addr) == 1)
                in->sin_family = AF_INET;
        else if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1)
                in6->sin6_family = AF_INET6;
        else
                bail_out("not an address: %s", text);
        return (const struct sockaddr *)ss;
}

/* ---- net_pattern_parse */

static const struct {
        const char *s;
        bool glob;
        int rc;
        const char *host; /* when rc == 0 */
        int port;
        const char *why; /* a part of the reason, when rc < 0 */
} parse_rows[] = {
    {"pypi.org", false, 0, "pypi.org", 0, NULL},
    {"PyPI.ORG", false, 0, "pypi.org", 0, NULL},
    {"api.example.com:8443", false, 0, "api.example.com", 8443, NULL},
    {"files.test:41234", true, 0, "files.test", 41234, NULL},
    {"10.1.2.3", false, 0, "10.1.2.3", 0, NULL},
    {"10.1.2.3:8080", false, 0, "10.1.2.3", 8080, NULL},
    {"_dmarc.x.org", false, 0, "_dmarc.x.org", 0, NULL},
    {"x.org:1", false, 0, "x.org", 1, NULL},
    {"x.org:65535", false, 0, "x.org", 65535, NULL},
    {"x.org:0080", false, 0, "x.org", 80, NULL},
    {"[::1]", false, 0, "::1", 0, NULL},
    {"[::1]:8443", false, 0, "::1", 8443, NULL},
    {"[2001:DB8::1]", false, 0, "2001:db8::1", 0, NULL},
    {"[::ffff:127.0.0.1]:80", false, 0, "::ffff:127.0.0.1", 80, NULL},
    /* '*' only in a glob */
    {"*.pythonhosted.org", true, 0, "*.pythonhosted.org", 0, NULL},
    {"*.pythonhosted.org", false, -EINVAL, NULL, 0, "letters, digits"},
    {"*", true, 0, "*", 0, NULL},
    {"*", false, -EINVAL, NULL, 0, "letters, digits"},
    {"*:443", true, 0, "*", 443, NULL},
    {"*:*", true, -EINVAL, NULL, 0, "port"},
    /* ports */
    {"x.org:0", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org:65536", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org:99999999999999999999", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org:", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org:+80", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org:-1", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org: 80", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org:80 ", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org:8a", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"x.org:80:90", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"[::1]:0", false, -EINVAL, NULL, 0, "1 to 65535"},
    {"[::1]:", false, -EINVAL, NULL, 0, "1 to 65535"},
    /* IPv6 literals */
    {"::1", false, -EINVAL, NULL, 0, "empty"},
    {"[::1", false, -EINVAL, NULL, 0, "closing"},
    {"[::1]x", false, -EINVAL, NULL, 0, "after"},
    {"[::1]]", false, -EINVAL, NULL, 0, "after"},
    {"[]", false, -EINVAL, NULL, 0, "IPv6"},
    {"[pypi.org]", false, -EINVAL, NULL, 0, "IPv6"},
    {"[1.2.3.4]", false, -EINVAL, NULL, 0, "IPv6"},
    {"[*]", true, -EINVAL, NULL, 0, "IPv6"},
    {"[::1%eth0]", false, -EINVAL, NULL, 0, "IPv6"},
    /* the shape of a name */
    {"", false, -EINVAL, NULL, 0, "1 to 260"},
    {":80", false, -EINVAL, NULL, 0, "empty"},
    {".x.org", false, -EINVAL, NULL, 0, "'.'"},
    {"x.org.", false, -EINVAL, NULL, 0, "'.'"},
    {"a..b", false, -EINVAL, NULL, 0, "'.'"},
    {"a b", false, -EINVAL, NULL, 0, "letters"},
    {"a/b", false, -EINVAL, NULL, 0, "letters"},
    {"user@x.org", false, -EINVAL, NULL, 0, "letters"},
    {"x.org\t", false, -EINVAL, NULL, 0, "letters"},
    {"x.org\r\n", false, -EINVAL, NULL, 0, "letters"},
    {"x\x01.org", false, -EINVAL, NULL, 0, "letters"},
    {"caf\xc3\xa9.org", false, -EINVAL, NULL, 0, "letters"},
    {"x?.org", true, -EINVAL, NULL, 0, "letters"},
    {"x[a].org", true, -EINVAL, NULL, 0, "letters"},
    {"http://x.org", false, -EINVAL, NULL, 0, "1 to 65535"},
};

static void test_pattern_parse(void)
{
        for (size_t i = 0; i < sizeof(parse_rows) / sizeof(parse_rows[0]); i++) {
                char host[NET_HOST_MAX + 4] = "untouched";
                int port = -1;
                const char *why = NULL;
                int rc = net_pattern_parse(parse_rows[i].s, parse_rows[i].glob, host, sizeof(host),
                                           &port, &why);
                is_int(rc, parse_rows[i].rc, "parse %s \"%s\"",
                       parse_rows[i].glob ? "glob" : "host", parse_rows[i].s);
                if (parse_rows[i].rc == 0) {
                        is_str(host, parse_rows[i].host, "... host");
                        is_int(port, parse_rows[i].port, "... port");
                } else {
                        like(why, parse_rows[i].why, "... says why");
                        is_int(port, 0, "... and names no port");
                }
        }

        char big[600], h[NET_HOST_MAX + 4];
        int port;
        const char *why = NULL;
        /* A DNS name is at most 253 characters; the pattern at most 260. */
        is_int(net_pattern_parse(repeat(big, sizeof(big), 'a', 253, ""), false, h, sizeof(h), &port,
                                 &why),
               0, "a 253-character host is taken");
        is_int(strlen(h), 253, "... whole");
        is_int(net_pattern_parse(repeat(big, sizeof(big), 'a', 253, ":65535"), false, h, sizeof(h),
                                 &port, &why),
               0, "... with a port");
        is_int(port, 65535, "... which is read");
        is_int(net_pattern_parse(repeat(big, sizeof(big), 'a', 254, ""), false, h, sizeof(h), &port,
                                 &why),
               -EINVAL, "a 254-character host is refused");
        like(why, "253", "... saying the bound");
        is_int(net_pattern_parse(repeat(big, sizeof(big), 'a', 255, ":1"), false, h, sizeof(h),
                                 &port, &why),
               -EINVAL, "a 254-character host with a port is refused");
        is_int(net_pattern_parse(repeat(big, sizeof(big), 'a', 500, ""), false, h, sizeof(h), &port,
                                 &why),
               -EINVAL, "a 500-character pattern is refused");
        like(why, "260", "... by its length");
        is_int(net_pattern_parse(NULL, true, h, sizeof(h), &port, &why), -EINVAL,
               "NULL is refused");
        /* The caller's buffer bounds what is written. */
        char small[6];
        memset(small, 'X', sizeof(small));
        is_int(net_pattern_parse("pypi.org", false, small, sizeof(small), &port, &why), -EINVAL,
               "a host longer than the caller's buffer is refused");
        ok(memchr(small, '\0', sizeof(small)) == NULL, "... and nothing is written into it");
        is_int(net_pattern_parse("x.org", false, small, sizeof(small), &port, &why), 0,
               "a host that just fits is taken");
        is_str(small, "x.org", "... whole");
}

/* ---- net_pattern_match */

enum { GRANT, POLICY };

static const struct {
        const char *pattern;
        const char *host;
        int port;
        int kind; /* GRANT: no port means 80 and 443; POLICY: any port */
        bool want;
} match_rows[] = {
    {"pypi.org", "pypi.org", 443, GRANT, true},
    {"pypi.org", "pypi.org", 80, GRANT, true},
    {"pypi.org", "pypi.org", 8080, GRANT, false},
    {"pypi.org", "pypi.org", 8080, POLICY, true},
    {"pypi.org", "pypi.org", 22, POLICY, true},
    {"PyPI.Org", "pypi.org", 443, GRANT, true},
    {"pypi.org", "pypi.org.evil.test", 443, GRANT, false},
    {"pypi.org", "evilpypi.org", 443, GRANT, false},
    {"pypi.org", "x.pypi.org", 443, GRANT, false},
    {"pypi.org", "pypi.or", 443, GRANT, false},
    /* '*' spans any run of characters, dots too; "*.x.org" needs a dot */
    {"*.x.org", "a.x.org", 443, GRANT, true},
    {"*.x.org", "a.b.c.x.org", 443, GRANT, true},
    {"*.x.org", "x.org", 443, GRANT, false},
    {"*.x.org", "x.org", 443, POLICY, false},
    {"*.x.org", "ax.org", 443, GRANT, false},
    {"*.x.org", "a.x.org.evil.test", 443, GRANT, false},
    {"*.x.org", "a.x.org", 8443, GRANT, false},
    {"*.x.org", "a.x.org", 8443, POLICY, true},
    {"*x.org", "ax.org", 443, GRANT, true},
    {"*x.org", "x.org", 443, GRANT, true},
    {"a.*.org", "a.b.c.org", 443, GRANT, true},
    {"a.*.org", "a.org", 443, GRANT, false},
    /* '*' alone: a grant is still held to 80 and 443, a policy glob not */
    {"*", "anything.example", 443, GRANT, true},
    {"*", "anything.example", 80, GRANT, true},
    {"*", "anything.example", 22, GRANT, false},
    {"*", "anything.example", 22, POLICY, true},
    {"*", "10.0.0.1", 443, GRANT, true},
    {"*", "::1", 443, POLICY, true},
    {"*:8443", "anything.example", 8443, GRANT, true},
    {"*:8443", "anything.example", 443, GRANT, false},
    /* a named port is that port alone */
    {"api.example.com:8443", "api.example.com", 8443, GRANT, true},
    {"api.example.com:8443", "api.example.com", 443, GRANT, false},
    {"api.example.com:8443", "api.example.com", 443, POLICY, false},
    {"files.test:41234", "files.test", 41234, GRANT, true},
    /* addresses are matched as written */
    {"10.1.2.3", "10.1.2.3", 80, GRANT, true},
    {"10.1.2.3", "10.1.2.30", 80, GRANT, false},
    {"10.1.2.3", "110.1.2.3", 80, GRANT, false},
    {"10.1.2.3:8080", "10.1.2.3", 8080, GRANT, true},
    {"[::1]", "::1", 443, GRANT, true},
    {"[::1]:8080", "::1", 8080, GRANT, true},
    {"[::1]:8080", "::1", 8081, GRANT, false},
    {"[::1]", "0:0:0:0:0:0:0:1", 443, GRANT, true},
    {"[::ffff:127.0.0.1]", "::ffff:7f00:1", 443, POLICY, true},
    {"[::1]", "[::1]", 443, GRANT, false},
    {"[2001:db8::1]", "2001:db8::1", 443, POLICY, true},
    {"[2001:db8::1]", "2001:db8::2", 443, POLICY, false},
    /* a bracketed address is not a set of characters */
    {"[::1]", "1", 443, GRANT, false},
    {"[::1]", ":", 443, GRANT, false},
    {"[2001:db8::1]", "d", 443, POLICY, false},
    /* a pattern that does not parse matches nothing */
    {"a b", "a b", 443, POLICY, false},
    {"", "", 443, POLICY, false},
    {"x.org:0", "x.org", 0, POLICY, false},
};

static const int default_ports[] = {80, 443};

static void test_pattern_match(void)
{
        for (size_t i = 0; i < sizeof(match_rows) / sizeof(match_rows[0]); i++) {
                bool grant = match_rows[i].kind == GRANT;
                bool got =
                    net_pattern_match(match_rows[i].pattern, match_rows[i].host, match_rows[i].port,
                                      grant ? default_ports : NULL, grant ? 2 : 0);
                ok(got == match_rows[i].want, "%s \"%s\" %s %s:%d", grant ? "grant" : "policy",
                   match_rows[i].pattern, match_rows[i].want ? "covers" : "does not cover",
                   match_rows[i].host, match_rows[i].port);
        }
        int only_8080 = 8080;
        ok(net_pattern_match("x.org", "x.org", 8080, &only_8080, 1),
           "a portless pattern covers the caller's default ports");
        ok(!net_pattern_match("x.org", "x.org", 443, &only_8080, 1), "... and only those");
        ok(!net_pattern_match("x.org", "x.org", 443, default_ports, 0),
           "no default ports: a portless grant covers no port");
}

/* ---- net_range_parse, net_range_contains */

static const struct {
        const char *s;
        int rc;
        int family;
        int bits;
} range_rows[] = {
    {"10.0.0.0/8", 0, AF_INET, 8},
    {"127.0.0.1", 0, AF_INET, 32},
    {"0.0.0.0/0", 0, AF_INET, 0},
    {"10.0.0.1/32", 0, AF_INET, 32},
    {"10.0.0.0/08", 0, AF_INET, 8},
    {"::1", 0, AF_INET6, 128},
    {"fc00::/7", 0, AF_INET6, 7},
    {"::/0", 0, AF_INET6, 0},
    {"::/128", 0, AF_INET6, 128},
    {"::ffff:10.0.0.0/104", 0, AF_INET6, 104},
    {"10.0.0.0/33", -EINVAL, 0, 0},
    {"::/129", -EINVAL, 0, 0},
    {"10.0.0.0/", -EINVAL, 0, 0},
    {"10.0.0.0/x", -EINVAL, 0, 0},
    {"10.0.0.0/-1", -EINVAL, 0, 0},
    {"10.0.0.0/+8", -EINVAL, 0, 0},
    {"10.0.0.0/ 8", -EINVAL, 0, 0},
    {"10.0.0.0/8 ", -EINVAL, 0, 0},
    {"10.0.0.0/8/8", -EINVAL, 0, 0},
    {"10.0.0.0/99999999999999999999", -EINVAL, 0, 0},
    {"/8", -EINVAL, 0, 0},
    {"", -EINVAL, 0, 0},
    {"10.0.0", -EINVAL, 0, 0},
    {"10.0.0.256", -EINVAL, 0, 0},
    {" 10.0.0.1", -EINVAL, 0, 0},
    {"localhost", -EINVAL, 0, 0},
    {"[::1]", -EINVAL, 0, 0},
    {"fe80::1%eth0", -EINVAL, 0, 0},
    {"1111:2222:3333:4444:5555:6666:7777:8888:9999:aaaa:bbbb:cccc:dddd:eeee", -EINVAL, 0, 0},
};

static const struct {
        const char *range;
        const char *addr;
        bool want;
} contains_rows[] = {
    {"10.0.0.0/8", "10.0.0.0", true},
    {"10.0.0.0/8", "10.255.255.255", true},
    {"10.0.0.0/8", "11.0.0.0", false},
    {"10.0.0.0/8", "9.255.255.255", false},
    {"172.16.0.0/12", "172.31.255.255", true},
    {"172.16.0.0/12", "172.32.0.0", false},
    {"172.16.0.0/12", "172.15.255.255", false},
    {"192.168.1.128/25", "192.168.1.128", true},
    {"192.168.1.128/25", "192.168.1.255", true},
    {"192.168.1.128/25", "192.168.1.127", false},
    {"10.0.0.1/8", "10.9.9.9", true}, /* host bits are ignored */
    {"127.0.0.1", "127.0.0.1", true},
    {"127.0.0.1", "127.0.0.2", false},
    {"0.0.0.0/0", "8.8.8.8", true},
    {"0.0.0.0/0", "255.255.255.255", true},
    /* IPv4 inside IPv6 is judged as IPv4 */
    {"127.0.0.1", "::ffff:127.0.0.1", true},
    {"127.0.0.0/8", "64:ff9b::7f00:1", true},
    {"10.0.0.0/8", "::10.1.2.3", true},
    {"0.0.0.0/0", "::ffff:8.8.8.8", true},
    {"0.0.0.0/0", "2001:db8::1", false},
    {"127.0.0.1", "::1", false}, /* IPv6's own loopback, not ::127.0.0.1 */
    {"0.0.0.0/0", "::", false},
    {"127.0.0.1", "::ffff:127.0.0.2", false},
    {"127.0.0.1", "64:ff9c::7f00:1", false},
    /* IPv6 ranges */
    {"::1", "::1", true},
    {"::1", "127.0.0.1", false},
    {"fe80::/10", "fe80::1", true},
    {"fe80::/10", "febf:ffff::1", true},
    {"fe80::/10", "fec0::1", false},
    {"fc00::/7", "fdff:ffff::1", true},
    {"fc00::/7", "fe00::1", false},
    {"::/0", "2606:4700::1111", true},
    {"::/0", "8.8.8.8", false},
    {"::ffff:0:0/96", "::ffff:10.0.0.1", true},
};

static void test_ranges(void)
{
        for (size_t i = 0; i < sizeof(range_rows) / sizeof(range_rows[0]); i++) {
                struct net_range r;
                memset(&r, 0x55, sizeof(r));
                int rc = net_range_parse(range_rows[i].s, &r);
                is_int(rc, range_rows[i].rc, "range \"%s\" %s", range_rows[i].s,
                       range_rows[i].rc ? "is refused" : "is taken");
                if (rc == 0 && range_rows[i].rc == 0) {
                        is_int(r.family, range_rows[i].family, "... family");
                        is_int(r.bits, range_rows[i].bits, "... bits");
                }
        }
        for (size_t i = 0; i < sizeof(contains_rows) / sizeof(contains_rows[0]); i++) {
                struct net_range r;
                struct sockaddr_storage ss;
                if (net_range_parse(contains_rows[i].range, &r) < 0)
                        bail_out("range %s", contains_rows[i].range);
                ok(net_range_contains(&r, sa_of(contains_rows[i].addr, &ss)) ==
                       contains_rows[i].want,
                   "%s %s %s", contains_rows[i].range,
                   contains_rows[i].want ? "contains" : "does not contain", contains_rows[i].addr);
        }
        struct net_range all;
        net_range_parse("0.0.0.0/0", &all);
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        ok(!net_range_contains(&all, (const struct sockaddr *)&un),
           "no range contains a unix socket address");
}

/* ---- net_address_special, net_address_text */

static const struct {
        const char *addr;
        const char *why; /* NULL: public */
} special_rows[] = {
    {"169.254.169.254", "cloud metadata"},
    {"169.254.170.2", "cloud metadata"},
    {"100.100.100.200", "cloud metadata"},
    {"fd00:ec2::254", "cloud metadata"},
    {"::ffff:169.254.169.254", "cloud metadata"},
    {"::ffff:a9fe:a9fe", "cloud metadata"},
    {"64:ff9b::169.254.169.254", "cloud metadata"},
    {"::169.254.169.254", "cloud metadata"},
    {"169.254.169.253", "link-local"},
    {"169.254.0.1", "link-local"},
    {"169.254.255.255", "link-local"},
    {"fe80::1", "link-local"},
    {"127.0.0.1", "loopback"},
    {"127.255.255.255", "loopback"},
    {"::1", "loopback"},
    {"::ffff:127.0.0.1", "loopback"},
    {"64:ff9b::127.0.0.1", "loopback"},
    {"::127.0.0.2", "loopback"},
    {"0.0.0.0", "unspecified"},
    {"0.255.255.255", "unspecified"},
    {"::", "unspecified"},
    {"::ffff:0.0.0.0", "unspecified"},
    {"10.0.0.1", "private"},
    {"10.255.255.255", "private"},
    {"172.16.0.0", "private"},
    {"172.31.255.255", "private"},
    {"192.168.0.1", "private"},
    {"::ffff:192.168.1.1", "private"},
    {"fc00::1", "private"},
    {"fd12:3456::1", "private"},
    {"100.64.0.1", "shared (carrier-grade NAT)"},
    {"100.127.255.255", "shared (carrier-grade NAT)"},
    {"224.0.0.1", "multicast"},
    {"239.255.255.255", "multicast"},
    {"ff02::1", "multicast"},
    {"::ffff:224.0.0.251", "multicast"},
    {"240.0.0.1", "reserved"},
    {"255.255.255.255", "reserved"},
    {"192.0.2.1", "documentation"},
    {"2001:db8::1", "documentation"},
    {"fec0::1", "site-local"},
    /* public */
    {"8.8.8.8", NULL},
    {"1.1.1.1", NULL},
    {"172.15.255.255", NULL},
    {"172.32.0.0", NULL},
    {"100.63.255.255", NULL},
    {"100.128.0.0", NULL},
    {"11.0.0.0", NULL},
    {"9.255.255.255", NULL},
    {"128.0.0.1", NULL},
    {"223.255.255.255", NULL},
    {"2606:4700::1111", NULL},
    {"::ffff:8.8.8.8", NULL},
    {"64:ff9b::8.8.8.8", NULL},
};

static void test_special(void)
{
        for (size_t i = 0; i < sizeof(special_rows) / sizeof(special_rows[0]); i++) {
                struct sockaddr_storage ss;
                is_str(net_address_special(sa_of(special_rows[i].addr, &ss)), special_rows[i].why,
                       "%s is %s", special_rows[i].addr,
                       special_rows[i].why ? special_rows[i].why : "public");
        }
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        is_str(net_address_special((const struct sockaddr *)&un), "not an internet address",
               "a unix socket address is not an internet one");

        struct sockaddr_storage ss;
        char text[64];
        net_address_text(sa_of("127.0.0.1", &ss), text, sizeof(text));
        is_str(text, "127.0.0.1", "the text of an IPv4 address");
        net_address_text(sa_of("::FFFF:127.0.0.1", &ss), text, sizeof(text));
        is_str(text, "::ffff:127.0.0.1", "the text of a mapped address");
        net_address_text(sa_of("2001:db8:0:0:0:0:0:1", &ss), text, sizeof(text));
        is_str(text, "2001:db8::1", "the text of an IPv6 address, shortened");
        net_address_text((const struct sockaddr *)&un, text, sizeof(text));
        is_str(text, "?", "a unix socket address has no text");
        char tiny[4];
        net_address_text(sa_of("10.0.0.1", &ss), tiny, sizeof(tiny));
        is_str(tiny, "?", "too small a buffer gets \"?\", not a cut address");
}

/* ---- proxy_head_parse */

static const struct {
        const char *name;
        const char *head;
        int rc;
        int status;      /* when rc < 0 */
        const char *why; /* a part of it */
        const char *method, *host;
        int port;
        const char *path; /* NULL: CONNECT */
        size_t n_headers;
} head_rows[] = {
    {"CONNECT host:port", "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", 0, 0, NULL,
     "CONNECT", "pypi.org", 443, NULL, 1},
    {"CONNECT an IPv6 literal", "CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", 0, 0, NULL, "CONNECT", "::1",
     8443, NULL, 0},
    {"CONNECT upper case host", "CONNECT PyPI.Org:443 HTTP/1.0\r\n\r\n", 0, 0, NULL, "CONNECT",
     "pypi.org", 443, NULL, 0},
    {"absolute form with port and query",
     "GET http://files.test:41234/simple/x/?a=1&b=%20 HTTP/1.1\r\nAccept: */*\r\n\r\n", 0, 0, NULL,
     "GET", "files.test", 41234, "/simple/x/?a=1&b=%20", 1},
    {"absolute form, no path", "GET http://Files.TEST HTTP/1.0\r\n\r\n", 0, 0, NULL, "GET",
     "files.test", 80, "/", 0},
    {"absolute form, query without path", "GET http://x.test?q=1 HTTP/1.1\r\n\r\n", 0, 0, NULL,
     "GET", "x.test", 80, "/?q=1", 0},
    {"absolute form, fragment dropped", "GET http://x.test/a?b#frag HTTP/1.1\r\n\r\n", 0, 0, NULL,
     "GET", "x.test", 80, "/a?b", 0},
    {"absolute form, fragment alone", "GET http://x.test#frag HTTP/1.1\r\n\r\n", 0, 0, NULL, "GET",
     "x.test", 80, "/", 0},
    {"absolute form, IPv6 literal", "PUT http://[2001:db8::1]:8080/p HTTP/1.1\r\n\r\n", 0, 0, NULL,
     "PUT", "2001:db8::1", 8080, "/p", 0},
    {"scheme in upper case", "HEAD HTTP://X.TEST/A HTTP/1.1\r\n\r\n", 0, 0, NULL, "HEAD", "x.test",
     80, "/A", 0},
    {"an '@' in the path is no credential", "GET http://x.test/a@b HTTP/1.1\r\n\r\n", 0, 0, NULL,
     "GET", "x.test", 80, "/a@b", 0},
    {"a name that starts like a number", "CONNECT 1password.com:443 HTTP/1.1\r\n\r\n", 0, 0, NULL,
     "CONNECT", "1password.com", 443, NULL, 0},
    {"a name of digits and letters", "CONNECT 0x1.example:443 HTTP/1.1\r\n\r\n", 0, 0, NULL,
     "CONNECT", "0x1.example", 443, NULL, 0},
    {"IPv6 loopback", "CONNECT [::1]:443 HTTP/1.1\r\n\r\n", 0, 0, NULL, "CONNECT", "::1", 443, NULL,
     0},
    {"IPv6 unspecified", "CONNECT [::]:443 HTTP/1.1\r\n\r\n", 0, 0, NULL, "CONNECT", "::", 443,
     NULL, 0},
    {"an extension method", "PURGE http://x.test/ HTTP/1.1\r\n\r\n", 0, 0, NULL, "PURGE", "x.test",
     80, "/", 0},
    {"the same Content-Length twice",
     "POST http://x.test/ HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n", 0, 0, NULL,
     "POST", "x.test", 80, "/", 2},
    {"Transfer-Encoding alone",
     "POST http://x.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 0, NULL, "POST",
     "x.test", 80, "/", 1},
    {"an empty header value", "GET http://x.test/ HTTP/1.1\r\nX-Empty:\r\n\r\n", 0, 0, NULL, "GET",
     "x.test", 80, "/", 1},
    /* refused */
    {"CONNECT without a port", "CONNECT pypi.org HTTP/1.1\r\n\r\n", -EINVAL, 400, "host:port"},
    {"CONNECT to port 0", "CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"CONNECT to port 65536", "CONNECT pypi.org:65536 HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"CONNECT to a URL", "CONNECT http://pypi.org:443/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"CONNECT to a bare IPv6 literal", "CONNECT ::1:443 HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"CONNECT with credentials", "CONNECT user:pw@pypi.org:443 HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "credentials"},
    {"https:// absolute form", "GET https://pypi.org/simple/ HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "CONNECT"},
    {"HTTPS:// absolute form", "GET HTTPS://pypi.org/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "CONNECT"},
    {"origin form", "GET /simple/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", -EINVAL, 400, "absolute"},
    {"asterisk form", "OPTIONS * HTTP/1.1\r\n\r\n", -EINVAL, 400, "absolute"},
    {"another scheme", "GET ftp://x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "absolute"},
    {"credentials in the URL", "GET http://user:pw@x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "credentials"},
    {"a user alone in the URL", "GET http://user@x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "credentials"},
    {"an escaped '@' hiding a host", "GET http://x.test%2f@evil.test/ HTTP/1.1\r\n\r\n", -EINVAL,
     400, "credentials"},
    {"a backslash in the host", "GET http://good.test\\evil.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "host"},
    {"port 0 in the URL", "GET http://x.test:0/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"port 65536 in the URL", "GET http://x.test:65536/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"two ports in the URL", "GET http://x.test:80:90/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"an empty port in the URL", "GET http://x.test:/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"no host in the URL", "GET http:///x HTTP/1.1\r\n\r\n", -EINVAL, 400, "no host"},
    {"an unclosed IPv6 literal", "GET http://[::1/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "host"},
    {"a zone in an IPv6 literal", "GET http://[fe80::1%25eth0]/ HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "host"},
    /* an address in one spelling only: another would slip past a policy
     * glob naming it (getaddrinfo reads 0x0a.1.2.3 as 10.1.2.3, and a
     * socket connects ::ffff:10.1.2.3 to 10.1.2.3) */
    {"a hex IPv4 address", "CONNECT 0x0a.1.2.3:443 HTTP/1.1\r\n\r\n", -EINVAL, 400, "IPv4"},
    {"a 32-bit number for an address", "CONNECT 167837955:443 HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "IPv4"},
    {"an octal IPv4 address", "GET http://010.1.2.3/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "IPv4"},
    {"a three-part IPv4 address", "GET http://10.1.515/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "IPv4"},
    {"a mapped IPv4 address", "CONNECT [::ffff:10.1.2.3]:443 HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "IPv4"},
    {"a mapped IPv4 address in hex", "GET http://[::ffff:a01:203]/ HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "IPv4"},
    {"a NAT64 IPv4 address", "CONNECT [64:ff9b::a01:203]:443 HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "IPv4"},
    {"a compatible IPv4 address", "CONNECT [::10.1.2.3]:443 HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "IPv4"},
    {"HTTP/2.0", "GET http://x.test/ HTTP/2.0\r\n\r\n", -EINVAL, 505, "HTTP/1.0"},
    {"HTTP/1.2", "GET http://x.test/ HTTP/1.2\r\n\r\n", -EINVAL, 505, "HTTP/1.0"},
    {"lower-case version", "GET http://x.test/ http/1.1\r\n\r\n", -EINVAL, 505, "HTTP/1.0"},
    {"no version", "GET http://x.test/\r\n\r\n", -EINVAL, 400, "METHOD TARGET"},
    {"two spaces", "GET  http://x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "METHOD TARGET"},
    {"a trailing space", "GET http://x.test/ HTTP/1.1 \r\n\r\n", -EINVAL, 400, "METHOD TARGET"},
    {"a tab for a space", "GET\thttp://x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "METHOD TARGET"},
    {"a leading space", " GET http://x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "METHOD TARGET"},
    {"a method that is not a token", "G@T http://x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400, "token"},
    {"a 24-byte method", "ABCDEFGHIJKLMNOPQRSTUVWX http://x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "too long"},
    {"DEL in the target", "GET http://x.test/\x7f HTTP/1.1\r\n\r\n", -EINVAL, 400, "character"},
    {"a high byte in the target", "GET http://x.test/\xc3\xa9 HTTP/1.1\r\n\r\n", -EINVAL, 400,
     "character"},
    {"lower-case connect", "connect pypi.org:443 HTTP/1.1\r\n\r\n", -EINVAL, 400, "absolute"},
    /* the shape of the head */
    {"no blank line", "GET http://x.test/ HTTP/1.1\r\nHost: x\r\n", -EINVAL, 400, "blank line"},
    {"LF LF for the blank line", "GET http://x.test/ HTTP/1.1\n\n", -EINVAL, 400, "blank line"},
    {"the blank line alone", "\r\n\r\n", -EINVAL, 400, "request line"},
    {"nothing", "", -EINVAL, 400, "blank line"},
    {"a blank line first", "\r\nGET http://x.test/ HTTP/1.1\r\n\r\n", -EINVAL, 400, NULL},
    {"a blank line inside", "GET http://x.test/ HTTP/1.1\r\n\r\nX-A: 1\r\n\r\n", -EINVAL, 400,
     "without a name"},
    {"a bare LF ending the request line", "GET http://x.test/ HTTP/1.1\nX-A: 1\r\n\r\n", -EINVAL,
     400, "bare"},
    {"a bare LF inside a header", "GET http://x.test/ HTTP/1.1\r\nX-A: 1\nX-B: 2\r\n\r\n", -EINVAL,
     400, "bare"},
    {"a bare CR inside a header", "GET http://x.test/ HTTP/1.1\r\nX-A: 1\rX-B: 2\r\n\r\n", -EINVAL,
     400, "bare"},
    {"a CR before CRLF", "GET http://x.test/ HTTP/1.1\r\r\n\r\n", -EINVAL, 400, "bare"},
    {"a bare LF before the blank line", "GET http://x.test/ HTTP/1.1\r\nX-A: 1\n\r\n\r\n", -EINVAL,
     400, "bare"},
    {"a folded header (space)", "GET http://x.test/ HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n", -EINVAL, 400,
     "folded"},
    {"a folded header (tab)", "GET http://x.test/ HTTP/1.1\r\nX-A: 1\r\n\t2\r\n\r\n", -EINVAL, 400,
     "folded"},
    {"a header without a colon", "GET http://x.test/ HTTP/1.1\r\nX-A\r\n\r\n", -EINVAL, 400,
     "without a name"},
    {"a header without a name", "GET http://x.test/ HTTP/1.1\r\n: v\r\n\r\n", -EINVAL, 400,
     "without a name"},
    {"a space before the colon", "GET http://x.test/ HTTP/1.1\r\nHost : x\r\n\r\n", -EINVAL, 400,
     "token"},
    {"a space inside a name", "GET http://x.test/ HTTP/1.1\r\nX A: 1\r\n\r\n", -EINVAL, 400,
     "token"},
    {"a control character in a value", "GET http://x.test/ HTTP/1.1\r\nX-A: a\x01z\r\n\r\n",
     -EINVAL, 400, "control"},
    {"ESC in a value", "GET http://x.test/ HTTP/1.1\r\nX-A: \x1b[0m\r\n\r\n", -EINVAL, 400,
     "control"},
    {"two different Content-Length",
     "POST http://x.test/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", -EINVAL, 400,
     "two different"},
    {"Content-Length 5 and 05",
     "POST http://x.test/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 05\r\n\r\n", -EINVAL,
     400, "two different"},
    {"Content-Length and Transfer-Encoding",
     "POST http://x.test/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
     -EINVAL, 400, "both"},
    {"Transfer-Encoding and Content-Length",
     "POST http://x.test/ HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n",
     -EINVAL, 400, "both"},
    {"Content-Length not a number", "POST http://x.test/ HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
     -EINVAL, 400, "not a number"},
    {"Content-Length empty", "POST http://x.test/ HTTP/1.1\r\nContent-Length:\r\n\r\n", -EINVAL,
     400, "not a number"},
    {"Content-Length negative", "POST http://x.test/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
     -EINVAL, 400, "not a number"},
    {"Content-Length with a sign", "POST http://x.test/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
     -EINVAL, 400, "not a number"},
    {"Content-Length as a list", "POST http://x.test/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
     -EINVAL, 400, "not a number"},
    {"Content-Length of 19 digits",
     "POST http://x.test/ HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", -EINVAL, 400,
     "not a number"},
};

static void test_head_parse(void)
{
        for (size_t i = 0; i < sizeof(head_rows) / sizeof(head_rows[0]); i++) {
                struct proxy_head h;
                int status = 0;
                const char *why = NULL;
                int rc = proxy_head_parse(head_rows[i].head, strlen(head_rows[i].head), &h, &status,
                                          &why);
                is_int(rc, head_rows[i].rc, "head: %s: %s", head_rows[i].name,
                       head_rows[i].rc ? "refused" : "taken");
                if (head_rows[i].rc == 0 && rc == 0) {
                        is_str(h.method, head_rows[i].method, "... method");
                        is_str(h.host, head_rows[i].host, "... host");
                        is_int(h.port, head_rows[i].port, "... port");
                        is_str(h.path, head_rows[i].path, "... path");
                        ok(h.connect == (head_rows[i].path == NULL), "... CONNECT or not");
                        is_int(h.n_headers, head_rows[i].n_headers, "... header lines");
                } else if (head_rows[i].rc < 0) {
                        is_int(status, head_rows[i].status, "... status");
                        if (head_rows[i].why)
                                like(why, head_rows[i].why, "... says why");
                        ok(h.copy == NULL && h.path == NULL, "... and keeps nothing");
                }
                proxy_head_free(&h);
                proxy_head_free(&h);
        }
}

/* What is bounded: the head's size, the number of lines, NUL bytes. */
static void test_head_bounds(void)
{
        static const char line[] = "GET http://x.test/ HTTP/1.1\r\n";
        static char head[PROXY_HEAD_MAX + 64];
        struct proxy_head h;
        int status = 0;
        const char *why = NULL;

        /* Exactly 16384 bytes: one header padded to fit. */
        size_t fixed = strlen(line) + strlen("X-Pad: \r\n\r\n");
        size_t pad = PROXY_HEAD_MAX - fixed;
        int n = snprintf(head, sizeof(head), "%sX-Pad: %0*d\r\n\r\n", line, (int)pad, 0);
        is_int(n, PROXY_HEAD_MAX, "a head of exactly 16384 bytes is built");
        is_int(proxy_head_parse(head, (size_t)n, &h, &status, &why), 0, "... and taken");
        is_int(h.n_headers, 1, "... with its one header");
        is_int(h.n_headers ? strlen(h.headers[0].value) : 0, pad, "... whole");
        proxy_head_free(&h);
        n = snprintf(head, sizeof(head), "%sX-Pad: %0*d\r\n\r\n", line, (int)pad + 1, 0);
        is_int(proxy_head_parse(head, (size_t)n, &h, &status, &why), -EINVAL,
               "a head of 16385 bytes is refused");
        is_int(status, 431, "... with 431");

        /* 100 header lines, then 101. */
        size_t k = (size_t)snprintf(head, sizeof(head), "%s", line);
        for (int i = 0; i < PROXY_HEADERS_MAX; i++)
                k += (size_t)snprintf(head + k, sizeof(head) - k, "X-%d: %d\r\n", i, i);
        strcpy(head + k, "\r\n");
        is_int(proxy_head_parse(head, k + 2, &h, &status, &why), 0, "100 header lines are taken");
        is_int(h.n_headers, PROXY_HEADERS_MAX, "... all of them");
        is_str(h.n_headers ? h.headers[99].name : NULL, "X-99", "... the last by name");
        is_str(h.n_headers ? h.headers[99].value : NULL, "99", "... and value");
        proxy_head_free(&h);
        k += (size_t)snprintf(head + k, sizeof(head) - k, "X-last: 1\r\n");
        strcpy(head + k, "\r\n");
        is_int(proxy_head_parse(head, k + 2, &h, &status, &why), -EINVAL,
               "101 header lines are refused");
        is_int(status, 431, "... with 431");

        /* NUL bytes: the length is the caller's, not strlen's. */
        static const char with_nul[] = "GET http://x.test/ HTTP/1.1\r\nX-A: a\0b\r\n\r\n";
        is_int(proxy_head_parse(with_nul, sizeof(with_nul) - 1, &h, &status, &why), -EINVAL,
               "a NUL inside a header value is refused");
        is_int(status, 400, "... with 400");
        like(why, "NUL", "... naming it");
        static const char nul_host[] = "GET http://x.test\0.evil.test/ HTTP/1.1\r\n\r\n";
        is_int(proxy_head_parse(nul_host, sizeof(nul_host) - 1, &h, &status, &why), -EINVAL,
               "a NUL inside the host is refused");
        static const char nul_end[] = "GET http://x.test/ HTTP/1.1\r\n\0\r\n\r\n";
        is_int(proxy_head_parse(nul_end, sizeof(nul_end) - 1, &h, &status, &why), -EINVAL,
               "a NUL before the blank line is refused");

        /* Hosts over the bound, in CONNECT and in a URL. */
        char big[400];
        snprintf(head, sizeof(head), "CONNECT %s:443 HTTP/1.1\r\n\r\n",
                 repeat(big, sizeof(big), 'a', 254, ""));
        is_int(proxy_head_parse(head, strlen(head), &h, &status, &why), -EINVAL,
               "CONNECT to a 254-character host is refused");
        is_int(status, 400, "... with 400");
        snprintf(head, sizeof(head), "GET http://%s/ HTTP/1.1\r\n\r\n",
                 repeat(big, sizeof(big), 'a', 300, ""));
        is_int(proxy_head_parse(head, strlen(head), &h, &status, &why), -EINVAL,
               "a URL with a 300-character host is refused");
        snprintf(head, sizeof(head), "GET http://%s/ HTTP/1.1\r\n\r\n",
                 repeat(big, sizeof(big), 'a', 253, ""));
        is_int(proxy_head_parse(head, strlen(head), &h, &status, &why), 0,
               "a URL with a 253-character host is taken");
        is_int(strlen(h.host), 253, "... whole");
        proxy_head_free(&h);
        /* A long path is fine (bounded by the head). */
        snprintf(head, sizeof(head), "GET http://x.test/%s HTTP/1.1\r\n\r\n",
                 repeat(big, sizeof(big), 'p', 390, ""));
        is_int(proxy_head_parse(head, strlen(head), &h, &status, &why), 0,
               "a 391-byte path is taken");
        is_int(h.path ? strlen(h.path) : 0, 391, "... whole");
        proxy_head_free(&h);
}

/* ---- proxy_head_write */

/* Whether `head` (NUL-terminated) has a line "name: value" (name compared
 * without case); its count. */
static int count_header(const char *head, const char *name)
{
        int n = 0;
        size_t k = strlen(name);
        for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
                if (strncasecmp(p + 2, name, k) == 0 && p[2 + k] == ':')
                        n++;
        return n;
}

static bool no_bare_lf(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if ((s[i] == '\n' && (i == 0 || s[i - 1] != '\r')) ||
                    (s[i] == '\r' && (i + 1 == n || s[i + 1] != '\n')))
                        return false;
        return true;
}

static void test_head_write(void)
{
        static const char in[] = "GET http://api.test/v1/items?x=1 HTTP/1.0\r\n"
                                 "Host: wrong.test\r\n"
                                 "User-Agent: t/1\r\n"
                                 "Proxy-Authorization: Basic c2VjcmV0\r\n"
                                 "Proxy-Connection: keep-alive\r\n"
                                 "Proxy-Authenticate: Basic\r\n"
                                 "Proxy-Token: leak\r\n"
                                 "proxy-foo: leak\r\n"
                                 "Connection: keep-alive, X-Drop ,\t x-also-drop\r\n"
                                 "X-Drop: 1\r\n"
                                 "X-Also-Drop: 2\r\n"
                                 "Keep-Alive: timeout=5\r\n"
                                 "TE: trailers\r\n"
                                 "Trailer: X-Sum\r\n"
                                 "Upgrade: h2c\r\n"
                                 "AUTHORIZATION: Bearer mine\r\n"
                                 "X-Keep: a:b\r\n"
                                 "Accept: */*\r\n"
                                 "\r\n";
        struct proxy_head h;
        int status;
        const char *why;
        if (proxy_head_parse(in, strlen(in), &h, &status, &why) < 0)
                bail_out("the request to rewrite does not parse: %s", why);
        const char *names[] = {"Authorization", "X-Route"};
        const char *values[] = {"Bearer theirs", "1"};
        struct buf out;
        buf_init(&out, 65536);
        is_int(proxy_head_write(&h, "api.test:8443", names, values, 2, &out), 0,
               "the head for the origin is written");
        static const char want[] = "GET /v1/items?x=1 HTTP/1.1\r\n"
                                   "Host: api.test:8443\r\n"
                                   "User-Agent: t/1\r\n"
                                   "X-Keep: a:b\r\n"
                                   "Accept: */*\r\n"
                                   "Authorization: Bearer theirs\r\n"
                                   "X-Route: 1\r\n"
                                   "Connection: close\r\n"
                                   "\r\n";
        is_mem(out.data, out.len, want, strlen(want), "... exactly");
        char *s = strndup(out.data ? out.data : "", out.len);
        is_int(count_header(s, "Host"), 1, "... one Host");
        is_int(count_header(s, "Authorization"), 1, "... one Authorization, the route's");
        ok(!strstr(s, "mine"), "... the code's own Authorization is gone");
        is_int(count_header(s, "Connection"), 1, "... one Connection");
        static const char *const gone[] = {"Proxy-Authorization",
                                           "Proxy-Connection",
                                           "Proxy-Authenticate",
                                           "Proxy-Token",
                                           "Proxy-Foo",
                                           "X-Drop",
                                           "X-Also-Drop",
                                           "Keep-Alive",
                                           "TE",
                                           "Trailer",
                                           "Upgrade"};
        for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
                is_int(count_header(s, gone[i]), 0, "... no %s", gone[i]);
        ok(!strstr(s, "c2VjcmV0"), "... the proxy credentials are not passed on");
        ok(!strstr(s, "leak"), "... nor any Proxy-* value");
        ok(out.len >= 4 && memcmp(out.data + out.len - 4, "\r\n\r\n", 4) == 0,
           "... it ends with the blank line");
        ok(no_bare_lf(out.data, out.len), "... with no bare CR or LF");
        free(s);
        buf_free(&out);

        /* Set names are compared without case, either way. */
        buf_init(&out, 65536);
        const char *lower[] = {"authorization"};
        const char *v2[] = {"X"};
        proxy_head_write(&h, "api.test", lower, v2, 1, &out);
        s = strndup(out.data ? out.data : "", out.len);
        is_int(count_header(s, "Authorization"), 1, "a lower-case route header replaces too");
        ok(strstr(s, "\r\nauthorization: X\r\n") != NULL, "... with its value");
        free(s);
        buf_free(&out);

        /* No route: the code's own headers stay. */
        buf_init(&out, 65536);
        proxy_head_write(&h, "api.test", NULL, NULL, 0, &out);
        s = strndup(out.data ? out.data : "", out.len);
        ok(strstr(s, "\r\nAUTHORIZATION: Bearer mine\r\n") != NULL,
           "without a route the code's Authorization goes on as it was");
        free(s);
        buf_free(&out);

        /* Too small a buffer: an error, never a cut head. */
        buf_init(&out, 40);
        ok(proxy_head_write(&h, "api.test", names, values, 2, &out) < 0,
           "a head over the buffer's bound is an error");
        buf_free(&out);
        proxy_head_free(&h);

        /* A header that Connection names is dropped even when a route sets
         * it: the route's value is still written. */
        static const char in2[] = "POST http://api.test/ HTTP/1.1\r\n"
                                  "Connection: Authorization\r\n"
                                  "Authorization: mine\r\n"
                                  "Content-Length: 3\r\n"
                                  "\r\n";
        if (proxy_head_parse(in2, strlen(in2), &h, &status, &why) < 0)
                bail_out("the second request does not parse: %s", why);
        buf_init(&out, 65536);
        proxy_head_write(&h, "api.test", names, values, 1, &out);
        static const char want2[] = "POST / HTTP/1.1\r\n"
                                    "Host: api.test\r\n"
                                    "Content-Length: 3\r\n"
                                    "Authorization: Bearer theirs\r\n"
                                    "Connection: close\r\n"
                                    "\r\n";
        is_mem(out.data, out.len, want2, strlen(want2),
               "a route header the code's Connection names is still set");
        buf_free(&out);
        proxy_head_free(&h);
}

/* ---- proxy_answer */

static void test_answer(void)
{
        struct buf out;
        buf_init(&out, 65536);
        is_int(proxy_answer(&out, 403, "pypi.org:443 is not in this run's network grant"), 0,
               "an answer is written");
        static const char want[] = "HTTP/1.1 403 Forbidden\r\n"
                                   "Content-Type: text/plain; charset=utf-8\r\n"
                                   "Connection: close\r\n"
                                   "Content-Length: 56\r\n"
                                   "X-Corral-Refused: 403\r\n"
                                   "\r\n"
                                   "corral: pypi.org:443 is not in this run's network grant\n";
        is_mem(out.data, out.len, want, strlen(want), "... exactly");
        buf_free(&out);

        static const struct {
                int status;
                const char *line;
        } rows[] = {
            {400, "HTTP/1.1 400 Bad Request\r\n"},
            {403, "HTTP/1.1 403 Forbidden\r\n"},
            {431, "HTTP/1.1 431 Request Header Fields Too Large\r\n"},
            {502, "HTTP/1.1 502 Bad Gateway\r\n"},
            {503, "HTTP/1.1 503 Service Unavailable\r\n"},
            {504, "HTTP/1.1 504 Gateway Timeout\r\n"},
            {505, "HTTP/1.1 505 HTTP Version Not Supported\r\n"},
        };
        char long_why[3000];
        repeat(long_why, sizeof(long_why), 'w', 2500, "");
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
                for (int pass = 0; pass < 2; pass++) {
                        const char *why = pass ? long_why : "x";
                        buf_init(&out, 65536);
                        proxy_answer(&out, rows[i].status, why);
                        char *s = strndup(out.data ? out.data : "", out.len);
                        ok(strncmp(s, rows[i].line, strlen(rows[i].line)) == 0, "%d%s: %s",
                           rows[i].status, pass ? " (long reason)" : "", rows[i].line);
                        const char *body = strstr(s, "\r\n\r\n");
                        const char *cl = strstr(s, "\r\nContent-Length: ");
                        long want_len = cl ? strtol(cl + 18, NULL, 10) : -1;
                        is_int(body ? (long)strlen(body + 4) : -2, want_len,
                               "... Content-Length is the body's length");
                        ok(body && strncmp(body + 4, "corral: ", 8) == 0, "... the body says who");
                        ok(body && no_bare_lf(s, (size_t)(body + 4 - s)),
                           "... a head with no bare LF");
                        free(s);
                        buf_free(&out);
                }
        }
}

/* ---- the policy's network section */

static char dir[128], file[256];

static int load_user(const char *text, struct policy **ret, struct err *e)
{
        FILE *f = fopen(file, "w");
        if (!f)
                bail_out("cannot write %s", file);
        fputs(text, f);
        fclose(f);
        *ret = NULL;
        *e = (struct err){0};
        return policy_load(corral_default_policy, file, true, ret, e);
}

static const char *decision_name(enum policy_decision d)
{
        return d == POLICY_DENY ? "deny" : d == POLICY_ASK ? "ask" : "allow";
}

static void test_policy(void)
{
        struct err e = {0};
        struct policy *p = NULL;
        struct sockaddr_storage ss;
        if (policy_load(corral_default_policy, NULL, false, &p, &e) < 0)
                bail_out("the default policy: %s", e.msg);
        static const struct {
                const char *host;
                int port;
        } any[] = {{"pypi.org", 443}, {"10.0.0.1", 22}, {"::1", 1}, {"x", 65535}};
        for (size_t i = 0; i < sizeof(any) / sizeof(any[0]); i++)
                is_str(decision_name(policy_network_decision(p, any[i].host, any[i].port)), "ask",
                       "the default policy asks about %s:%d", any[i].host, any[i].port);
        static const char *const refused[] = {"127.0.0.1", "10.0.0.1", "169.254.169.254", "::1",
                                              "::ffff:127.0.0.1"};
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
                ok(!policy_network_address_ok(p, sa_of(refused[i], &ss)),
                   "the default policy names no address: %s", refused[i]);
        policy_free(p);

        is_int(load_user("{\"network\": {"
                         "\"deny\": [\"*.evil.test\", \"bad.test:443\"],"
                         "\"ask\": [\"ask.test\", \"*.ask.test:8443\"],"
                         "\"allow\": [\"*.test\", \"[::1]:8080\", \"10.1.2.3\"],"
                         "\"addresses\": [\"127.0.0.1\", \"10.0.0.0/8\", \"fd00::/8\"]}}",
                         &p, &e),
               0, "a user's network section loads");
        if (!p)
                bail_out("%s", e.msg);
        static const struct {
                const char *host;
                int port;
                const char *want;
        } rows[] = {
            {"x.evil.test", 443, "deny"}, /* deny wins over allow */
            {"evil.test", 443, "allow"},  /* "*.evil.test" needs a dot */
            {"bad.test", 443, "deny"},    {"bad.test", 8443, "allow"}, /* its port alone */
            {"ask.test", 443, "ask"},     {"ask.test", 1, "ask"}, /* a glob without a port: any port
                                                                   */
            {"a.ask.test", 8443, "ask"},  {"a.ask.test", 443, "allow"}, {"x.test", 22, "allow"},
            {"other.org", 443, "deny"}, /* none matching */
            {"test", 443, "deny"},        {"10.1.2.3", 5432, "allow"},  {"10.1.2.4", 5432, "deny"},
            {"::1", 8080, "allow"},       {"::1", 8081, "deny"},
        };
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
                is_str(decision_name(policy_network_decision(p, rows[i].host, rows[i].port)),
                       rows[i].want, "%s:%d is %s", rows[i].host, rows[i].port, rows[i].want);
        static const struct {
                const char *addr;
                bool want;
        } addrs[] = {
            {"127.0.0.1", true},        {"127.0.0.2", false}, {"::ffff:127.0.0.1", true},
            {"10.255.0.1", true},       {"11.0.0.1", false},  {"::ffff:10.1.1.1", true},
            {"64:ff9b::a01:101", true}, {"fd00::1", true},    {"fc00::1", false},
            {"169.254.169.254", false}, {"::1", false},       {"8.8.8.8", false},
        };
        for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++)
                ok(policy_network_address_ok(p, sa_of(addrs[i].addr, &ss)) == addrs[i].want,
                   "network.addresses %s %s", addrs[i].want ? "names" : "does not name",
                   addrs[i].addr);
        policy_free(p);

        /* A file's section replaces the default's whole: allow alone
         * allows its hosts, asks about none, denies the rest. */
        is_int(load_user("{\"network\": {\"allow\": [\"pypi.org\"]}}", &p, &e), 0,
               "a network section with allow alone loads");
        is_str(p ? decision_name(policy_network_decision(p, "pypi.org", 443)) : NULL, "allow",
               "... the default's ask [\"*\"] is gone with the rest of its section");
        is_str(p ? decision_name(policy_network_decision(p, "other.org", 443)) : NULL, "deny",
               "... and a host it does not name is denied");
        policy_free(p);
        is_int(load_user("{\"network\": {\"ask\": [], \"allow\": [\"pypi.org\"]}}", &p, &e), 0,
               "ask emptied, allow named");
        is_str(p ? decision_name(policy_network_decision(p, "pypi.org", 443)) : NULL, "allow",
               "... the host is allowed");
        is_str(p ? decision_name(policy_network_decision(p, "files.pythonhosted.org", 443)) : NULL,
               "deny", "... and the rest denied");
        policy_free(p);
        is_int(load_user("{\"network\": {}}", &p, &e), 0, "an empty network section loads");
        is_str(p ? decision_name(policy_network_decision(p, "pypi.org", 443)) : NULL, "deny",
               "... and denies every host");
        policy_free(p);

        /* Mistakes name the file and the key. */
        static const struct {
                const char *text;
                const char *key;
        } bad[] = {
            {"{\"network\": []}", "network: must be an object"},
            {"{\"network\": \"*\"}", "network: must be an object"},
            {"{\"network\": {\"allow\": \"pypi.org\"}}", "network.allow: must be an array"},
            {"{\"network\": {\"ask\": [1]}}", "network.ask[0]"},
            {"{\"network\": {\"allow\": [\"a b\"]}}", "network.allow[0]: \"a b\": a host may"},
            {"{\"network\": {\"deny\": [\"ok.test\", \"x:0\"]}}", "network.deny[1]: \"x:0\""},
            {"{\"network\": {\"deny\": [\"\"]}}", "network.deny[0]"},
            {"{\"network\": {\"allow\": [\"::1\"]}}", "network.allow[0]"},
            {"{\"network\": {\"allow\": [\"[::1\"]}}", "network.allow[0]"},
            {"{\"network\": {\"allow\": [\"http://x.test\"]}}", "network.allow[0]"},
            {"{\"network\": {\"addresses\": \"10.0.0.1\"}}", "network.addresses: must be an array"},
            {"{\"network\": {\"addresses\": [\"10.0.0.0/33\"]}}",
             "network.addresses[0]: not an IP"},
            {"{\"network\": {\"addresses\": [\"127.0.0.1\", 5]}}", "network.addresses[1]"},
            {"{\"network\": {\"addresses\": [\"localhost\"]}}", "network.addresses[0]"},
            {"{\"network\": {\"addresses\": [\"10.0.0.0/\"]}}", "network.addresses[0]"},
            {"{\"network\": {\"Allow\": []}}", "network.Allow: unknown key"},
            {"{\"network\": {\"bogus\\u0001\": []}}", "network.bogus"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                is_int(load_user(bad[i].text, &p, &e), -EINVAL, "refused: %s", bad[i].text);
                ok(p == NULL, "... no policy");
                like(e.msg, bad[i].key, "... naming the key");
                like(e.msg, file, "... and the file");
                policy_free(p);
        }
        /* A glob over the bound of one pattern. */
        char text[1024], big[400];
        snprintf(text, sizeof(text), "{\"network\": {\"allow\": [\"%s\"]}}",
                 repeat(big, sizeof(big), 'a', 254, ""));
        is_int(load_user(text, &p, &e), -EINVAL, "a 254-character host in a glob is refused");
        like(e.msg, "network.allow[0]", "... naming the key");
        policy_free(p);
        snprintf(text, sizeof(text), "{\"network\": {\"allow\": [\"%s\"]}}",
                 repeat(big, sizeof(big), 'a', 253, ""));
        is_int(load_user(text, &p, &e), 0, "a 253-character host in a glob is taken");
        policy_free(p);
}

/* ---- a call's `network` argument */

static void test_grant(void)
{
        struct err e = {0};
        json_t *good =
            json_pack("[sssssss]", "pypi.org", "*.pythonhosted.org", "api.example.com:8443",
                      "10.1.2.3", "files.test:41234", "[::1]:8080", "*");
        is_int(egress_check_grant(good, &e), 0, "a grant of the usual shapes is taken");
        json_decref(good);
        json_t *empty = json_array();
        is_int(egress_check_grant(empty, &e), 0, "an empty grant is taken");
        json_decref(empty);
        json_t *full = json_array();
        for (int i = 0; i < EGRESS_GRANT_MAX; i++)
                json_array_append_new(full, json_sprintf("h%d.test", i));
        is_int(egress_check_grant(full, &e), 0, "32 patterns are taken");
        json_array_append_new(full, json_string("one-more.test"));
        e = (struct err){0};
        is_int(egress_check_grant(full, &e), -EINVAL, "33 are refused");
        like(e.msg, "at most 32", "... saying the bound");
        json_decref(full);

        json_t *not_arrays[] = {json_string("pypi.org"), json_object(), json_null(),
                                json_integer(1)};
        for (size_t i = 0; i < sizeof(not_arrays) / sizeof(not_arrays[0]); i++) {
                e = (struct err){0};
                is_int(egress_check_grant(not_arrays[i], &e), -EINVAL,
                       "a grant that is not an array is refused (%zu)", i);
                like(e.msg, "must be an array", "... saying so");
                json_decref(not_arrays[i]);
        }
        is_int(egress_check_grant(NULL, &e), -EINVAL, "no grant at all is refused here");

        char big[400];
        static const struct {
                const char *item2; /* after a good first item */
                const char *why;
        } rows[] = {
            {"a b", "letters"},
            {"x.test:0", "1 to 65535"},
            {"x.test:65536", "1 to 65535"},
            {"", "1 to 260"},
            {"::1", "empty"},
            {"[::1", "closing"},
            {"user@x.test", "letters"},
            {"http://x.test", "1 to 65535"},
            {".x.test", "'.'"},
        };
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
                json_t *g = json_pack("[ss]", "ok.test", rows[i].item2);
                e = (struct err){0};
                is_int(egress_check_grant(g, &e), -EINVAL, "grant item \"%s\" is refused",
                       rows[i].item2);
                like(e.msg, "item 2", "... naming which");
                like(e.msg, rows[i].why, "... and why");
                is_int(e.kind, ERR_INVALID, "... as the caller's mistake");
                json_decref(g);
        }
        json_t *g = json_pack("[si]", "ok.test", 443);
        e = (struct err){0};
        is_int(egress_check_grant(g, &e), -EINVAL, "a number in a grant is refused");
        like(e.msg, "item 2", "... naming which");
        like(e.msg, "must be a string", "... and why");
        json_decref(g);
        g = json_pack("[s]", repeat(big, sizeof(big), 'a', 254, ".test"));
        e = (struct err){0};
        is_int(egress_check_grant(g, &e), -EINVAL, "a 259-character host is refused");
        json_decref(g);
        g = json_pack("[s]", "evil.test\r\nX-Injected: 1");
        e = (struct err){0};
        is_int(egress_check_grant(g, &e), -EINVAL, "CR LF in a grant item is refused");
        ok(!strchr(e.msg, '\n') && !strchr(e.msg, '\r'), "... and not echoed raw");
        json_decref(g);
        /* JSON strings may hold NUL (\u0000): an item is all of its bytes. */
        g = json_array();
        json_array_append_new(g, json_stringn("evil.test\0pypi.org", 18));
        e = (struct err){0};
        is_int(egress_check_grant(g, &e), -EINVAL, "a grant item holding a NUL is refused");
        like(e.msg, "NUL", "... saying so");
        json_decref(g);
}

/* ---- network_routes and network_resolve */

static int check_config(const char *routes, const char *resolve, struct err *e)
{
        struct config cfg;
        memset(&cfg, 0, sizeof(cfg));
        json_error_t jerr;
        cfg.network_routes = routes ? json_loads(routes, 0, &jerr) : NULL;
        cfg.network_resolve = resolve ? json_loads(resolve, 0, &jerr) : NULL;
        if ((routes && !cfg.network_routes) || (resolve && !cfg.network_resolve))
                bail_out("bad JSON in the test: %s", jerr.text);
        *e = (struct err){0};
        int r = egress_check_config(&cfg, e);
        json_decref(cfg.network_routes);
        json_decref(cfg.network_resolve);
        return r;
}

static void test_config(void)
{
        struct err e;
        setenv("CORRAL_TEST_TOKEN", "tok-123", 1);
        unsetenv("CORRAL_TEST_UNSET");
        setenv("CORRAL_TEST_NEWLINE", "a\r\nX-Injected: 1", 1);
        is_int(check_config(NULL, NULL, &e), 0, "no routes and no resolve: fine");
        is_int(check_config("{}", "{}", &e), 0, "empty ones: fine");

        static const struct {
                const char *routes;
                const char *why; /* NULL: taken */
        } rows[] = {
            {"{\"https://api.test:8443\": {\"headers\": {\"Authorization\": \"Bearer "
             "${CORRAL_TEST_TOKEN}\"}, \"ca_file\": \"/etc/ssl/ca.pem\"}}",
             NULL},
            {"{\"https://api.test\": {}}", NULL},
            {"{\"https://api.test/\": {}}", NULL},
            {"{\"http://api.test:8080\": {\"headers\": {}}}", NULL},
            {"{\"https://10.1.2.3:8443\": {}}", NULL},
            {"{\"https://api.test\": {\"headers\": {\"X-A\": \"${CORRAL_TEST_UNSET:-none}\"}}}",
             NULL},
            {"{\"https://api.test\": {\"headers\": {\"X-A\": \"$x ${1} $${y\"}}}", NULL},
            {"{\"https://api.test\": {\"headers\": {\"Authorization\": \"Bearer "
             "${CORRAL_TEST_UNSET}\"}}}",
             "headers.Authorization: environment variable CORRAL_TEST_UNSET is not set"},
            {"{\"https://api.test\": {\"headers\": {\"X-A\": \"${CORRAL_TEST_NEWLINE}\"}}}",
             "headers.X-A: a control character"},
            {"{\"https://api.test\": {\"headers\": {\"X-A\": \"a\\r\\nX-B: 1\"}}}",
             "headers.X-A: a control character"},
            /* headers that frame the request are corral's to write */
            {"{\"https://api.test\": {\"headers\": {\"Host\": \"other.test\"}}}",
             "headers.Host: corral writes"},
            {"{\"https://api.test\": {\"headers\": {\"content-length\": \"0\"}}}",
             "headers.content-length: corral writes"},
            {"{\"https://api.test\": {\"headers\": {\"Transfer-Encoding\": \"chunked\"}}}",
             "headers.Transfer-Encoding: corral writes"},
            {"{\"https://api.test\": {\"headers\": {\"Connection\": \"keep-alive\"}}}",
             "headers.Connection: corral writes"},
            {"{\"https://api.test\": {\"headers\": {\"Upgrade\": \"h2c\"}}}",
             "headers.Upgrade: corral writes"},
            {"{\"https://api.test\": {\"headers\": {\"Proxy-Authorization\": \"x\"}}}",
             "headers.Proxy-Authorization: corral writes"},
            {"{\"https://api.test\": {\"headers\": {\"X A\": \"1\"}}}", "header name"},
            {"{\"https://api.test\": {\"headers\": {\"X-A:\": \"1\"}}}", "header name"},
            {"{\"https://api.test\": {\"headers\": {\"\": \"1\"}}}", "header name"},
            {"{\"https://api.test\": {\"headers\": {\"X-A\": 1}}}", "string value"},
            {"{\"https://api.test\": {\"headers\": []}}", "at most 16"},
            {"{\"https://api.test\": {\"ca_file\": \"ca.pem\"}}", "absolute path"},
            {"{\"https://api.test\": {\"ca_file\": 1}}", "absolute path"},
            {"{\"https://api.test\": {\"timeout\": 1}}", "timeout: unknown key"},
            {"{\"https://api.test\": []}", "must be an object"},
            {"{\"https://api.test\": \"x\"}", "must be an object"},
            {"{\"ftp://api.test\": {}}", "https://host[:port]"},
            {"{\"api.test\": {}}", "https://host[:port]"},
            {"{\"HTTPS://api.test\": {}}", "https://host[:port]"},
            {"{\"https://\": {}}", "network_routes: \"https://\""},
            {"{\"https://api.test/v1\": {}}", "network_routes: \"https://api.test/v1\""},
            {"{\"https://user@api.test\": {}}", "network_routes: \"https://user@api.test\""},
            {"{\"https://api.test:0\": {}}", "1 to 65535"},
            {"{\"https://api.test:65536\": {}}", "1 to 65535"},
            {"{\"https://*.test\": {}}", "letters"},
            {"{\"https://api.test?x\": {}}", "letters"},
        };
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
                int r = check_config(rows[i].routes, NULL, &e);
                if (!rows[i].why) {
                        is_int(r, 0, "route taken: %s", rows[i].routes);
                        if (r < 0)
                                diag("%s", e.msg);
                        continue;
                }
                is_int(r, -EINVAL, "route refused: %s", rows[i].routes);
                like(e.msg, rows[i].why, "... says why");
                like(e.msg, "network_routes", "... naming the setting");
        }
        /* 16 headers, then 17; a value of 8192 bytes, then 8193. */
        char routes[40000];
        size_t k =
            (size_t)snprintf(routes, sizeof(routes), "{\"https://api.test\": {\"headers\": {");
        for (int i = 0; i < 16; i++)
                k += (size_t)snprintf(routes + k, sizeof(routes) - k, "%s\"X-%d\": \"v\"",
                                      i ? ", " : "", i);
        snprintf(routes + k, sizeof(routes) - k, "}}}");
        is_int(check_config(routes, NULL, &e), 0, "16 route headers are taken");
        snprintf(routes + k, sizeof(routes) - k, ", \"X-16\": \"v\"}}}");
        is_int(check_config(routes, NULL, &e), -EINVAL, "17 are refused");
        static char value[9000];
        repeat(value, sizeof(value), 'v', 8192, "");
        snprintf(routes, sizeof(routes), "{\"https://api.test\": {\"headers\": {\"X-A\": \"%s\"}}}",
                 value);
        is_int(check_config(routes, NULL, &e), 0, "an 8192-byte header value is taken");
        repeat(value, sizeof(value), 'v', 8193, "");
        snprintf(routes, sizeof(routes), "{\"https://api.test\": {\"headers\": {\"X-A\": \"%s\"}}}",
                 value);
        is_int(check_config(routes, NULL, &e), -EINVAL, "an 8193-byte one is refused");
        like(e.msg, "over 8192 bytes", "... saying the bound");
        /* Expansion counts: a variable's value can push a header over. */
        setenv("CORRAL_TEST_BIG", repeat(value, sizeof(value), 't', 8190, ""), 1);
        is_int(check_config("{\"https://api.test\": {\"headers\": {\"X-A\": \"Bearer "
                            "${CORRAL_TEST_BIG}\"}}}",
                            NULL, &e),
               -EINVAL, "a header over 8192 bytes once expanded is refused");
        like(e.msg, "headers.X-A", "... naming it");

        static const struct {
                const char *resolve;
                const char *why; /* NULL: taken */
        } res[] = {
            {"{\"files.test\": \"127.0.0.1\"}", NULL},
            {"{\"files.test\": \"::1\"}", NULL},
            {"{\"Files.Test\": \"10.1.2.3\", \"other.test\": \"2001:db8::1\"}", NULL},
            {"{\"files.test:80\": \"127.0.0.1\"}", "not a host name"},
            {"{\"*.test\": \"127.0.0.1\"}", "not a host name"},
            {"{\"[::1]:80\": \"127.0.0.1\"}", "not a host name"},
            {"{\"a b\": \"127.0.0.1\"}", "not a host name"},
            {"{\"\": \"127.0.0.1\"}", "not a host name"},
            {"{\"files.test\": \"10.0.0.0/8\"}", "must be an IP address"},
            {"{\"files.test\": \"localhost\"}", "must be an IP address"},
            {"{\"files.test\": \"[::1]\"}", "must be an IP address"},
            {"{\"files.test\": \"127.0.0.1:80\"}", "must be an IP address"},
            {"{\"files.test\": 5}", "must be an IP address"},
            {"{\"files.test\": [\"127.0.0.1\"]}", "must be an IP address"},
        };
        for (size_t i = 0; i < sizeof(res) / sizeof(res[0]); i++) {
                int r = check_config(NULL, res[i].resolve, &e);
                if (!res[i].why) {
                        is_int(r, 0, "resolve taken: %s", res[i].resolve);
                        continue;
                }
                is_int(r, -EINVAL, "resolve refused: %s", res[i].resolve);
                like(e.msg, res[i].why, "... says why");
                like(e.msg, "network_resolve", "... naming the setting");
        }
        unsetenv("CORRAL_TEST_TOKEN");
        unsetenv("CORRAL_TEST_NEWLINE");
        unsetenv("CORRAL_TEST_BIG");
}

int main(void)
{
        snprintf(dir, sizeof(dir), "/tmp/corral-netrules-XXXXXX");
        if (!mkdtemp(dir))
                bail_out("mkdtemp");
        snprintf(file, sizeof(file), "%s/policy.json", dir);

        test_pattern_parse();
        test_pattern_match();
        test_ranges();
        test_special();
        test_head_parse();
        test_head_bounds();
        test_head_write();
        test_answer();
        test_policy();
        test_grant();
        test_config();

        unlink(file);
        rmdir(dir);
        return done_testing();
}
