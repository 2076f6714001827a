/* corral confines itself once it holds what it needs, in OpenSMTPD's order
 * put in Linux words: read the configuration, open the engine socket and
 * whatever must start with the user's full rights (a private Podman
 * service), then set no-new-privileges, drop every capability (libcap-ng)
 * and load a seccomp filter (libseccomp) that denies what a supervisor never
 * needs, and only then enter the event loop. The children it starts
 * (upstream MCP servers) inherit all three and drop again for themselves. */
#pragma once

#include "core/util.h"

#include <stdbool.h>

struct confinement {
        bool no_new_privs;
        bool no_caps;      /* effective, permitted, inheritable, ambient empty */
        bool bounding;     /* the bounding set is empty too */
        unsigned n_denied; /* calls the filter denies (0: no filter) */
        char note[300];    /* what could not be done, and why */
};

/* Confine the calling process (every thread it will start, every child it
 * will fork). Fails only when the filter cannot be loaded; *ret says what
 * holds. */
int confine_self(struct confinement *ret, struct err *e);

/* In a child between fork and exec (async-signal-safe): no-new-privileges,
 * no capabilities in any set, an empty bounding set where it can be
 * emptied. Returns 0 or -errno. */
int confine_child(void);

/* What /proc/<pid>/status says of a process's confinement, for doctor and
 * tests: "NoNewPrivs 1, Seccomp 2 (filter), CapEff 0000000000000000, ...". */
int confine_describe(int pid, char *buf, size_t size);

/* The daemon filter's denied calls (NULL-terminated), for doctor and tests. */
extern const char *const confine_denied_calls[];
