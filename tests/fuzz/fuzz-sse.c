/* The streamable HTTP body splitter (SSE and JSON) on answers from outside:
 * no crash, no buffer past its bound, and the messages (and the result) do
 * not depend on how the body was split into feeds. */
#include "upstream/http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Rendering: 4-byte length + bytes per message. */
static int render_cb(void *userdata, const char *msg, size_t len)
{
        struct buf *out = userdata;
        uint32_t n = (uint32_t)len;
        if (!msg || len == 0)
                abort(); /* never an empty or missing message */
        buf_append(out, &n, sizeof(n));
        buf_append(out, msg, len);
        return 0;
}

static int run(enum http_body_kind kind, size_t max, const char *p, size_t n, uint32_t seed,
               bool whole, struct buf *out)
{
        struct http_body b;
        http_body_init(&b, kind, max);
        int r = 0;
        for (size_t at = 0; at < n && r == 0;) {
                size_t k = n - at;
                if (!whole) {
                        seed = seed * 1103515245u + 12345u;
                        k = (seed >> 16) % 8 == 0 ? (seed >> 8) % 300 : 1 + (seed >> 16) % 5;
                        if (k > n - at)
                                k = n - at;
                }
                r = http_body_feed(&b, p + at, k, render_cb, out);
                if (b.line.len > b.line.max || b.data.len > b.data.max)
                        abort();
                at += k;
        }
        if (r == 0)
                r = http_body_end(&b, render_cb, out);
        http_body_free(&b);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 2)
                return 0;
        enum http_body_kind kind = data[0] & 1 ? HTTP_BODY_JSON : HTTP_BODY_SSE;
        size_t max = 1 + (data[0] >> 1) % 96;
        uint32_t seed = data[1];
        const char *p = (const char *)data + 2;
        size_t n = size - 2;
        struct buf whole, split;
        buf_init(&whole, 1 << 24);
        buf_init(&split, 1 << 24);
        int r1 = run(kind, max, p, n, seed, true, &whole);
        int r2 = run(kind, max, p, n, seed, false, &split);
        if (r1 != r2 || whole.len != split.len ||
            (whole.len && memcmp(whole.data, split.data, whole.len) != 0))
                abort();
        buf_free(&whole);
        buf_free(&split);
        return 0;
}
