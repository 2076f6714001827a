/* The pieces of the network rules that need no state: host patterns (a
 * run's `network` grant, the policy's network globs), which addresses are
 * special (loopback, private, link-local, multicast, cloud metadata), and
 * address ranges the policy names. Pure functions, fuzzed and unit-tested. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define NET_HOST_MAX    253 /* a DNS name's length */
#define NET_PATTERN_MAX 260 /* host pattern with ":port" */

/* "host" or "host:port" where host is a DNS name (letters, digits, '-',
 * '.', and '*' when `glob`), an IPv4 address, or "[v6]". Lowercased into
 * host (NET_HOST_MAX + 3 bytes; an IPv6 address without its brackets, so
 * that '[' never reaches fnmatch); *port is 0 when none is named. 0, or
 * -EINVAL with why (a static string). */
int net_pattern_parse(const char *s, bool glob, char *host, size_t host_size, int *port,
                      const char **why);
/* Whether `pattern` (as net_pattern_parse takes it, glob allowed) covers
 * host:port; a pattern without a port covers `default_ports` (NULL: any).
 * `host` is lowercased, an IPv6 address without brackets (as
 * proxy_head_parse gives it); "[v6]" covers the same address however it
 * is written. */
bool net_pattern_match(const char *pattern, const char *host, int port, const int *default_ports,
                       size_t n_default_ports);

/* An address range: an IPv4 or IPv6 address, with an optional "/bits". */
struct net_range {
        int family; /* AF_INET or AF_INET6 */
        unsigned char addr[16];
        int bits;
};
int net_range_parse(const char *s, struct net_range *ret);
bool net_range_contains(const struct net_range *r, const struct sockaddr *sa);

/* Why an address is not an ordinary public one ("loopback", "private",
 * "link-local", "cloud metadata", "multicast", "reserved", ...), or NULL
 * when it is public. IPv4 inside IPv6 (mapped, NAT64) is judged as IPv4. */
const char *net_address_special(const struct sockaddr *sa);
/* The numeric form, for logs and errors. */
void net_address_text(const struct sockaddr *sa, char *out, size_t size);
