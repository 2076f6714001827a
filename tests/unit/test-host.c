/* The service's Host and Origin checks (mcp/host.h): what each takes and
 * refuses, row by row. */
#include "mcp/host.h"

#include "tap.h"

#include <string.h>

static char *const hosts[] = {"corral.example", "lb.example:8443", NULL};

static const struct {
        const char *host;
        bool any_name; /* http_public with no http_hosts */
        bool want;
} host_rows[] = {
    {"localhost", false, true},
    {"LOCALHOST", false, true},
    {"localhost:8080", false, true},
    {"localhost:1", false, true},
    {"localhost:65535", false, true},
    {"127.0.0.1", false, true},
    {"127.0.0.1:80", false, true},
    {"[::1]", false, true},
    {"[::1]:8080", false, true},
    {"corral.example", false, true},
    {"Corral.Example:443", false, true},
    {"lb.example:8443", false, true},
    /* what follows the name is a port or nothing */
    {"localhost:evil", false, false},
    {"localhost:", false, false},
    {"localhost:0", false, false},
    {"localhost:65536", false, false},
    {"localhost:123456", false, false},
    {"localhost:+80", false, false},
    {"localhost:80 ", false, false},
    {"localhost:8080:80", false, false},
    {"localhost:80/", false, false},
    {"[::1]x", false, false},
    {"[::1]:", false, false},
    {"[::1", false, false},
    /* names nobody named */
    {"", false, false},
    {"localhost.", false, false},
    {"localhost.evil.example", false, false},
    {"evil.example", false, false},
    {"evil.example:8080", false, false},
    {"127.0.0.2", false, false},
    {"[::2]", false, false},
    {"lb.example", false, false},
    {"lb.example:8080", false, false},
    {"corral.example.evil", false, false},
    /* any well-formed name when allowed, and nothing else */
    {"evil.example:8080", true, true},
    {"a-b_c~d.example", true, true},
    {"[fe80::1]:443", true, true},
    {"evil.example:evil", true, false},
    {"user@evil.example", true, false},
    {"evil.example/", true, false},
    {"evil example", true, false},
    {"[]", true, false},
    {"[::g]", true, false},
    {"", true, false},
    {":8080", true, false},
};

static const struct {
        const char *origin;
        bool want;
} origin_rows[] = {
    {"http://localhost", true},
    {"http://localhost:6274", true},
    {"https://127.0.0.1:8443", true},
    {"HTTP://[::1]:80", true},
    {"http://localhost:evil", false},
    {"http://localhost/", false},
    {"http://localhost:80/x", false},
    {"http://localhost.evil.example", false},
    {"http://evil.example", false},
    {"ftp://localhost", false},
    {"localhost", false},
    {"null", false},
    {"http://", false},
    {"http://corral.example", false}, /* http_hosts names a Host, not an Origin */
};

int main(void)
{
        for (size_t i = 0; i < sizeof(host_rows) / sizeof(host_rows[0]); i++) {
                const char *h = host_rows[i].host;
                ok(http_host_allowed(h, strlen(h), hosts, host_rows[i].any_name) ==
                       host_rows[i].want,
                   "Host \"%s\"%s: %s", h, host_rows[i].any_name ? " (any name)" : "",
                   host_rows[i].want ? "taken" : "refused");
        }
        /* The length given is the value: what lies past it is not read. */
        ok(http_host_allowed("localhost:8080evil", 14, hosts, false), "a value ends at its length");
        ok(!http_host_allowed("localhost", 5, hosts, false), "\"local\" is not a name");
        ok(!http_host_allowed("localhost\0:80", 13, hosts, false), "a NUL inside is refused");
        ok(http_host_allowed("localhost:80", 12, NULL, false), "no http_hosts: loopback names");
        for (size_t i = 0; i < sizeof(origin_rows) / sizeof(origin_rows[0]); i++)
                ok(http_origin_loopback(origin_rows[i].origin) == origin_rows[i].want,
                   "Origin \"%s\": %s", origin_rows[i].origin,
                   origin_rows[i].want ? "taken" : "refused");
        return done_testing();
}
