/* The seccomp profile syntax from untrusted bytes (a user's `seccomp` file):
 * whatever parses must hold only valid names within the bounds, named twice
 * only by allow lines with conditions, and turn into an engine profile. */
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
                if (!x->name[0] || strlen(x->name) >= sizeof(x->name) ||
                    x->n_conds > SECCOMP_CONDS_MAX || (x->n_conds && x->action != SC_ALLOW))
                        abort();
                size_t combos = 1;
                for (unsigned j = 0; j < x->n_conds; j++) {
                        const struct seccomp_cond *c = &x->cond[j];
                        if (c->arg < 0 || c->arg > 5 || c->n_vals == 0 || c->n_vals > 16 ||
                            (c->masked && (c->n_vals != 1 || (c->vals[0] & ~c->mask))))
                                abort();
                        for (unsigned k = 0; k < j; k++)
                                if (x->cond[k].arg == c->arg)
                                        abort(); /* one condition per argument */
                        combos *= c->n_vals;
                }
                if (combos > SECCOMP_COMBOS_MAX)
                        abort();
                for (const char *p = x->name; *p; p++)
                        if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '_')
                                abort();
                /* Named twice only as alternatives: allow lines with
                 * conditions. */
                const struct seccomp_rule *first = seccomp_rules_find(&r, x->name);
                if (first != x && (!x->n_conds || !first->n_conds))
                        abort();
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
