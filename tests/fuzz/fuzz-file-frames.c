/* The runtime's answers to file requests (sandbox/file/read, write) come
 * from inside the sandbox and are untrusted: files_read_chunk must take at
 * most `max` bytes in all and a real path under /workspace, or refuse;
 * files_error_message must always write one printable, bounded sentence.
 * files_b64_canonical must take a chunk's text only when it is the very
 * base64 of the bytes it decoded to.
 * files_frame_parse must give exactly what jrpc_parse gives (the same
 * outcome, tree and error) for any line, its quick way for a read
 * answer's layout included: the input is tried as it is and, so that the
 * quick way is reached often, with a run of base64 put in before a final
 * "}} when it has one.
 * Paths from the MCP host are untrusted too: files_path must only ever
 * answer with a normalised path under /workspace. */
#include "sandbox/files.h"

#include "core/jsonrpc.h"

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
                        /* Taken as canonical: then it is what the encoder
                         * writes for those bytes, to the byte. */
                        const json_t *text = json_object_get(result, "data");
                        if (n >= 0 && files_b64_canonical(got.data ? got.data + before : "",
                                                          (size_t)n, json_string_value(text),
                                                          json_string_length(text))) {
                                struct buf again;
                                buf_init(&again, 2 * MAX + 8);
                                if (base64_encode(&again, got.data ? got.data + before : "",
                                                  (size_t)n) < 0 ||
                                    again.len != json_string_length(text) ||
                                    memcmp(again.data ? again.data : "", json_string_value(text),
                                           again.len) != 0)
                                        abort();
                                buf_free(&again);
                        }
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

static bool same(const json_t *a, const json_t *b)
{
        return (!a && !b) || json_equal(a, b);
}

static void check_parse(const char *line, size_t len)
{
        struct jrpc_msg a = {0}, b = {0};
        json_t *ida = NULL, *idb = NULL;
        struct err ea = {0}, eb = {0};
        int ra = files_frame_parse(line, len, &a, &ida, &ea);
        int rb = jrpc_parse(line, len, &b, &idb, &eb);
        if (ra != rb || !same(ida, idb))
                abort();
        if (ra == 0) {
                if (a.kind != b.kind || !json_equal(a.root, b.root) || !same(a.result, b.result) ||
                    !same(a.params, b.params) || !same(a.error, b.error) || !same(a.id, b.id) ||
                    (a.method == NULL) != (b.method == NULL) ||
                    (a.method && strcmp(a.method, b.method) != 0))
                        abort();
                jrpc_msg_done(&a);
                jrpc_msg_done(&b);
        } else if (strcmp(ea.msg, eb.msg) != 0) {
                abort();
        }
        json_decref(ida);
        json_decref(idb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check_parse((const char *)data, size);
        /* With FILES_FAST_MIN base64 characters (and a few of the input's
         * own) before a final "}}: the quick way's layout. */
        if (size >= 3 && size < 8192 && memcmp(data + size - 3, "\"}}", 3) == 0) {
                static const char alphabet[] =
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
                size_t pad = FILES_FAST_MIN + (size & 3);
                char *line = malloc(size + pad);
                if (line) {
                        memcpy(line, data, size - 3);
                        for (size_t i = 0; i < pad; i++)
                                line[size - 3 + i] = alphabet[(i * 31 + size) % 64];
                        memcpy(line + size - 3 + pad, "\"}}", 3);
                        check_parse(line, size + pad);
                        free(line);
                }
        }

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
