/* MCP server entries and policies from untrusted files: the input is the
 * "servers" object of corral's config (first byte even) or a user policy
 * file (first byte odd). Whatever is accepted must hold together: every
 * server has a valid name and an argv or a URL, and its error text shows
 * none of its secrets; every policy answers for any server. */
#include "bridge/policy.h"
#include "upstream/registry.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern const char corral_default_policy[];
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;
static char path[64];

static void check_registry(const struct registry *r)
{
        for (size_t i = 0; i < r->n; i++) {
                const struct upstream_spec *s = &r->v[i];
                if (!s->name || !*s->name || strlen(s->name) > 64)
                        abort();
                if (!s->error && s->transport == UP_STDIO && (!s->argv || !s->argv[0]))
                        abort();
                if (!s->error && s->transport == UP_HTTP && !s->url)
                        abort();
                for (char **sec = s->secrets; s->error && sec && *sec; sec++)
                        if (strstr(s->error, *sec))
                                abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        struct err e = {0};
        if (data[0] % 2 == 0) {
                json_t *own =
                    json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
                if (!own)
                        return 0;
                struct registry_sources src = {
                    .own = own, .only_own = true, .self_exe = "/usr/bin/corral"};
                struct registry reg = {0};
                if (json_is_object(own) && registry_load(&src, &reg, &e) == 0) {
                        check_registry(&reg);
                        registry_free(&reg);
                }
                json_decref(own);
                return 0;
        }
        if (memfd < 0) {
                memfd = memfd_create("fuzz-policy", MFD_CLOEXEC);
                if (memfd < 0)
                        abort();
                snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
        }
        if (ftruncate(memfd, 0) < 0 || pwrite(memfd, data + 1, size - 1, 0) != (ssize_t)(size - 1))
                abort();
        struct policy *p = NULL;
        if (policy_load(corral_default_policy, path, true, &p, &e) == 0) {
                const struct policy_server *s = policy_server(p, "anything");
                if (!s || s->timeout_s <= 0 || policy_max_calls(p) < 1 ||
                    policy_max_concurrent(p) < 1)
                        abort();
                policy_tool_allowed(p, "anything", "tool");
                policy_free(p);
        }
        return 0;
}
