/* Archives from the engine (GET .../archive) and paths from the MCP host are
 * untrusted: files_tar_each must never crash or read out of bounds, must
 * hand over at most `max` bytes a file, and files_path must only ever
 * answer with a normalised path under /workspace. */
#include "sandbox/files.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX 4096

static int check_entry(void *userdata, const struct files_entry *e)
{
        size_t *n = userdata;
        if (!e->path || (e->type == FILES_REG && (e->len > MAX || (e->len && !e->data))))
                abort();
        if (e->type == FILES_REG && e->len)
                (void)((volatile const char *)e->data)[e->len - 1];
        return ++*n > 10000; /* a stream of endless empty entries stops */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        size_t n = 0;
        struct err e = {0};
        files_tar_each((const char *)data, size, MAX, check_entry, &n, &e);

        /* The same bytes as a path (up to the first NUL). */
        char in[2048], out[FILES_PATH_MAX + 64];
        struct err why = {0};
        size_t k = size < sizeof(in) - 1 ? size : sizeof(in) - 1;
        memcpy(in, data, k);
        in[k] = '\0';
        if (files_path(in, true, out, sizeof(out), &why) == 0) {
                if (strncmp(out, FILES_ROOT, strlen(FILES_ROOT)) != 0 ||
                    (out[strlen(FILES_ROOT)] != '\0' && out[strlen(FILES_ROOT)] != '/') ||
                    strstr(out, "/../") || strstr(out, "//") || strstr(out, "/./") ||
                    (strlen(out) >= 3 && strcmp(out + strlen(out) - 3, "/..") == 0))
                        abort();
        }
        return 0;
}
