/* The runtime's answers to file requests (sandbox/file/read, write) come
 * from inside the sandbox and are untrusted: files_read_chunk must take at
 * most `max` bytes in all and a real path under /workspace, or refuse;
 * files_error_message must always write one printable, bounded sentence.
 * Paths from the MCP host are untrusted too: files_path must only ever
 * answer with a normalised path under /workspace. */
#include "sandbox/files.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX 4096

static void check_answer(json_t *msg)
{
        json_t *result = json_object_get(msg, "result");
        json_t *error = json_object_get(msg, "error");
        if (result) {
                struct buf got;
                buf_init(&got, MAX);
                long long fsize = -1;
                const char *path = NULL;
                /* Twice: the second chunk lands after the first. */
                for (int i = 0; i < 2; i++) {
                        size_t before = got.len;
                        int n = files_read_chunk(result, MAX, &got, &fsize, &path);
                        if (got.len > MAX)
                                abort();
                        if (n >= 0 && ((size_t)n != got.len - before || fsize < 0 || !path ||
                                       strncmp(path, FILES_ROOT "/", strlen(FILES_ROOT "/")) != 0))
                                abort();
                        if (n == -EBADMSG && got.len != before)
                                abort();
                        if (n < 0 && n != -EBADMSG && n != -EFBIG)
                                abort();
                }
                if (got.len)
                        (void)((volatile const char *)got.data)[got.len - 1];
                buf_free(&got);
        }
        if (error) {
                char msg_out[600];
                for (int write = 0; write < 2; write++) {
                        int r = files_error_message(error, "/workspace/a", write, MAX, msg_out,
                                                    sizeof(msg_out));
                        if (r >= 0 || strnlen(msg_out, sizeof(msg_out)) >= sizeof(msg_out))
                                abort();
                        for (const unsigned char *p = (const unsigned char *)msg_out; *p; p++)
                                if (*p < 0x20 || *p == 0x7f)
                                        abort();
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_t *msg = json_loadb((const char *)data, size, JSON_DISABLE_EOF_CHECK, NULL);
        if (msg) {
                check_answer(msg);
                json_decref(msg);
        }

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
