/* The seccomp profile syntax from untrusted bytes (a user's `seccomp` file):
 * whatever parses must hold only valid, unique names within the bounds, and
 * turn into an engine profile. */
#include "sandbox/profile.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct seccomp_rules r;
        struct err e = {0};
        if (seccomp_rules_parse((const char *)data, size, "fuzz", &r, &e) < 0) {
                if (!e.msg[0])
                        abort(); /* every refusal says why */
                return 0;
        }
        if (r.n == 0 || r.n > SECCOMP_RULES_MAX)
                abort();
        for (size_t i = 0; i < r.n; i++) {
                const struct seccomp_rule *x = &r.v[i];
                if (!x->name[0] || strlen(x->name) >= sizeof(x->name) || x->arg > 5 ||
                    x->n_vals > 16 || (x->arg >= 0 && x->n_vals == 0) ||
                    (x->masked && (x->vals[0] & ~x->mask)))
                        abort();
                for (const char *p = x->name; *p; p++)
                        if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '_')
                                abort();
                if (seccomp_rules_find(&r, x->name) != x)
                        abort(); /* named twice */
        }
        char *skipped = NULL;
        json_t *j = seccomp_rules_engine_json(&r, (unsigned)(size & 1), &skipped);
        if (!j)
                abort();
        json_decref(j);
        free(skipped);
        seccomp_rules_done(&r);
        return 0;
}
