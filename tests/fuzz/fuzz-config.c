/* Configuration from untrusted text: config_load_file on arbitrary file
 * contents (first byte even) or config_set on "key\0value" (first byte
 * odd). Whatever is accepted must lie within the documented bounds. */
#include "core/config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;
static char path[64];

static void check_bounds(const struct config *c)
{
        if (c->memory < (6 << 20) || c->memory > 1e15 || c->pids < 8 || c->pids > (1 << 22) ||
            !(c->cpus >= 0.01 && c->cpus <= 1024) || !(c->timeout_s >= 0.1) ||
            !(c->max_timeout_s <= 86400) || c->output_limit < 1024 || c->output_limit > (1 << 30) ||
            c->max_frame < (64 << 10) || c->max_frame > (1 << 30) || c->tmp_size < (1 << 20) ||
            c->workspace_size < (1 << 20) || c->max_sandboxes < 1 || c->max_sandboxes > 4096 ||
            c->max_queue < 0 || c->max_queue > (1 << 20) || (int)c->log_level < LOG_ERR ||
            c->log_level > LOG_DEBUG || !c->image || !*c->image)
                abort();
        for (const char *s = c->engine; s && *s; s++)
                if ((unsigned char)*s < 0x20 || *s == 0x7f)
                        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        struct config c;
        struct err e = {0};
        config_defaults(&c);
        if (data[0] % 2 == 0) {
                if (memfd < 0) {
                        memfd = memfd_create("fuzz-config", MFD_CLOEXEC);
                        if (memfd < 0)
                                abort();
                        snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
                }
                if (ftruncate(memfd, 0) < 0 ||
                    pwrite(memfd, data + 1, size - 1, 0) != (ssize_t)(size - 1))
                        abort();
                if (config_load_file(&c, path, true, &e) == 0) {
                        if (!c.config_file || strcmp(c.config_file, path) != 0)
                                abort();
                } else if (!e.msg[0]) {
                        abort();
                }
        } else {
                const char *key = (const char *)data + 1;
                size_t rest = size - 1;
                const char *nul = memchr(key, '\0', rest);
                if (!nul) {
                        config_free(&c);
                        return 0;
                }
                char *value = strndup(nul + 1, rest - (size_t)(nul + 1 - key));
                if (!value)
                        abort();
                if (config_set(&c, key, value, "fuzz", &e) < 0 && !strstr(e.msg, "fuzz"))
                        abort();
                free(value);
        }
        check_bounds(&c);
        e = (struct err){0};
        if (config_check(&c, &e) < 0 && !e.msg[0])
                abort();
        config_free(&c);
        return 0;
}
