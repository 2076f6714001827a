/* line_reader with random feed splits, checked against a model: every
 * newline-terminated segment is delivered if it fits in max and reported
 * once as too long if not; a trailing partial line is reported only when it
 * is already too long. The result must not depend on the splits. A second
 * reader watches long lines (line_reader_watch_long): each too-long line
 * is reported at its newline, after the watcher saw exactly its bytes. */
#include "core/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Rendering: 'L' + 4-byte length + bytes for a line, 'N' for too long. */
static void put_line(struct buf *out, const char *line, size_t len)
{
        if (!line) {
                buf_append(out, "N", 1);
                return;
        }
        uint32_t n = (uint32_t)len;
        buf_append(out, "L", 1);
        buf_append(out, &n, sizeof(n));
        buf_append(out, line, len);
}

static int render_cb(void *userdata, const char *line, size_t len)
{
        if (!line && len != 0)
                abort();
        put_line(userdata, line, len);
        return 0;
}

/* The watched reader: a too-long line renders as 'N' + what the watcher saw. */
struct watched {
        struct buf out;
        struct buf seen;
};

static void watch_cb(void *userdata, const char *p, size_t n)
{
        struct watched *w = userdata;
        buf_append(&w->seen, p, n);
}

static int watched_cb(void *userdata, const char *line, size_t len)
{
        struct watched *w = userdata;
        put_line(&w->out, line, len);
        if (!line) {
                put_line(&w->out, w->seen.data ? w->seen.data : "", w->seen.len);
                w->seen.len = 0;
        }
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 2)
                return 0;
        size_t max = data[0] % 64;
        uint32_t seed = data[1];
        const char *p = (const char *)data + 2;
        size_t n = size - 2;

        struct buf model, got, model_w;
        buf_init(&model, 1 << 24);
        buf_init(&got, 1 << 24);
        buf_init(&model_w, 1 << 24);
        size_t start = 0;
        for (size_t i = 0; i < n; i++)
                if (p[i] == '\n') {
                        size_t len = i - start;
                        put_line(&model, len <= max ? p + start : NULL, len);
                        put_line(&model_w, len <= max ? p + start : NULL, len);
                        if (len > max)
                                put_line(&model_w, p + start, len);
                        start = i + 1;
                }
        if (n - start > max)
                put_line(&model, NULL, 0);

        struct line_reader r, rw;
        struct watched w;
        buf_init(&w.out, 1 << 24);
        buf_init(&w.seen, 1 << 24);
        line_reader_init(&r, max);
        line_reader_init(&rw, max);
        line_reader_watch_long(&rw, watch_cb, &w);
        for (size_t at = 0; at < n;) {
                seed = seed * 1103515245u + 12345u;
                size_t k = (seed >> 16) % 8 == 0 ? (seed >> 8) % 300 : 1 + (seed >> 16) % 5;
                if (k > n - at)
                        k = n - at;
                if (line_reader_feed(&r, p + at, k, render_cb, &got) != 0 ||
                    line_reader_feed(&rw, p + at, k, watched_cb, &w) != 0)
                        abort();
                if (r.pending.len > max || r.pending.cap > max + 1)
                        abort();
                at += k;
        }
        if (got.len != model.len || (got.len && memcmp(got.data, model.data, got.len) != 0))
                abort();
        if (w.out.len != model_w.len || (w.out.len && memcmp(w.out.data, model_w.data, w.out.len)))
                abort();
        /* A trailing line already too long: seen so far, not reported. */
        size_t tail = n - start > max ? n - start : 0;
        if (w.seen.len != tail || (tail && memcmp(w.seen.data, p + start, tail) != 0))
                abort();
        line_reader_free(&r);
        line_reader_free(&rw);
        buf_free(&model);
        buf_free(&model_w);
        buf_free(&got);
        buf_free(&w.out);
        buf_free(&w.seen);
        return 0;
}
