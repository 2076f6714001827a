/* What the kernel shows a sandbox beyond the create body's limits: corral's
 * seccomp profile (source policy/seccomp.policy, or the user's own file),
 * the /proc and /sys entries masked, and the extra mounts that make both
 * engines expose the same writable space. The profile is parsed here,
 * checked against the host's architecture with libseccomp, and written in
 * the engines' JSON format: Docker takes it inline, Podman by path. */
#pragma once

#include "core/config.h"
#include "core/util.h"
#include "engine/engine.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

enum seccomp_action { SC_ALLOW, SC_ERRNO, SC_DENY };

/* One condition on an argument. */
struct seccomp_cond {
        int arg;           /* 0 to 5 */
        bool masked;       /* arg & mask == vals[0] */
        uint64_t mask;     /* when masked */
        uint64_t vals[16]; /* arg equals one of these (or the masked value) */
        unsigned n_vals;
};

#define SECCOMP_CONDS_MAX  3  /* conditions in one rule, on as many arguments */
#define SECCOMP_COMBOS_MAX 64 /* rules a line becomes: the product of its value counts */

/* A call's rule. An allow with conditions holds when all of them do; a
 * call may have several such rules (several lines), and it is allowed when
 * one of them holds. Every other call has one rule. */
struct seccomp_rule {
        char name[40];
        enum seccomp_action action;
        int errno_ret; /* SC_ERRNO */
        struct seccomp_cond cond[SECCOMP_CONDS_MAX];
        unsigned n_conds; /* 0: no condition on the arguments */
        unsigned line;
        char group[40];
};

struct seccomp_rules {
        struct seccomp_rule *v;
        size_t n;
};

/* Bounds on a profile's source: bytes, one line, statements' names. */
#define SECCOMP_SRC_MAX   (256 << 10)
#define SECCOMP_LINE_MAX  1024
#define SECCOMP_RULES_MAX 2048

/* Parse the profile syntax of policy/seccomp.policy. `source` names the
 * file in messages ("policy/seccomp.policy:12: ..."). */
int seccomp_rules_parse(const char *text, size_t len, const char *source, struct seccomp_rules *ret,
                        struct err *e);
void seccomp_rules_done(struct seccomp_rules *r);
/* The call's first rule (the others of an allow with conditions follow it
 * in r->v), or NULL. */
const struct seccomp_rule *seccomp_rules_find(const struct seccomp_rules *r, const char *name);

/* The engine's JSON profile (Docker's format, which Podman reads too) for
 * this host's architecture: default EPERM, the rules that are not `deny`.
 * Names the architecture lacks are left out and listed, comma-separated, in
 * *ret_skipped (caller frees; NULL when none). New reference or NULL. */
enum {
        /* For gVisor: calls answered ENOSYS go to its kernel, which lacks them. */
        SECCOMP_JSON_GVISOR = 1 << 0,
};
json_t *seccomp_rules_engine_json(const struct seccomp_rules *r, unsigned flags,
                                  char **ret_skipped);
/* Load the same rules as a filter on the calling thread (tests and probes:
 * it sets no-new-privileges first). */
int seccomp_rules_load(const struct seccomp_rules *r, struct err *e);

/* What every sandbox of this corral gets. */
struct sandbox_profile {
        char *seccomp_json; /* the engine JSON profile, compact; NULL: the engine's own */
        char *seccomp_path; /* the same in a file (Podman takes a path); NULL: none */
        /* corral in a container: that file's path on the engine's machine
         * (what Podman opens), or why there is none (creates on Podman then
         * fail with it: the profile is never dropped). */
        char *engine_path;
        char engine_path_err[400];
        bool in_container; /* then Podman gets engine_path, or nothing */
        char summary[600]; /* for logs and doctor: which profile, how many calls */
};

/* From the `seccomp` setting: "corral" (the embedded policy/seccomp.policy),
 * "engine" (the engine's default profile), or a file in either syntax. The
 * JSON is written to a content-named file in corral's runtime directory. */
int sandbox_profile_load(const struct config *cfg, struct sandbox_profile *ret, struct err *e);
void sandbox_profile_done(struct sandbox_profile *p);

/* Add the profile, the masked paths, the read-only /run and /var/tmp and
 * the /dev/shm size to a create body, in the form `kind` takes. */
int sandbox_profile_apply(const struct sandbox_profile *p, const struct config *cfg,
                          enum engine_kind kind, json_t *body);

/* The /proc and /sys entries every sandbox gets masked (NULL-terminated). */
extern const char *const sandbox_masked_paths[];
