/* demux_feed with random feed splits, checked against a model that parses
 * the whole stream at once: the same payload per stream, the same result
 * (0, or -EPROTO at the first bad stream id), and no empty callbacks. */
#include "core/buf.h"
#include "engine/attach.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int collect_cb(void *userdata, int stream, const char *p, size_t n)
{
        struct buf *out = userdata;
        if (stream < 0 || stream > 2 || n == 0)
                abort();
        buf_append(&out[stream], p, n);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        uint32_t seed = data[0];
        const char *p = (const char *)data + 1;
        size_t n = size - 1;

        struct buf model[3], got[3];
        for (int i = 0; i < 3; i++) {
                buf_init(&model[i], 1 << 24);
                buf_init(&got[i], 1 << 24);
        }
        int want = 0;
        for (size_t at = 0; at + 8 <= n;) {
                const uint8_t *h = (const uint8_t *)p + at;
                if (h[0] > 2) {
                        want = -EPROTO;
                        break;
                }
                size_t len = (size_t)h[4] << 24 | (size_t)h[5] << 16 | (size_t)h[6] << 8 | h[7];
                at += 8;
                size_t take = len < n - at ? len : n - at;
                buf_append(&model[h[0]], p + at, take);
                at += take;
        }

        struct demux d = {0};
        int rc = 0;
        for (size_t at = 0; at < n && rc == 0;) {
                seed = seed * 1103515245u + 12345u;
                size_t k = (seed >> 16) % 4 == 0 ? (seed >> 8) % 64 : 1 + (seed >> 16) % 9;
                if (k > n - at)
                        k = n - at;
                rc = demux_feed(&d, p + at, k, collect_cb, got);
                at += k;
        }
        if (rc != want)
                abort();
        for (int i = 0; i < 3; i++) {
                if (got[i].len != model[i].len ||
                    (got[i].len && memcmp(got[i].data, model[i].data, got[i].len) != 0))
                        abort();
                buf_free(&model[i]);
                buf_free(&got[i]);
        }
        return 0;
}
