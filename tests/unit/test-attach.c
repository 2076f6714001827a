/* The attach stream demultiplexer: [stream, 0, 0, 0, len32be] + payload. */
#include "engine/attach.h"

#include "core/buf.h"

#include "tap.h"

#include <string.h>

struct frame {
        int stream;
        const char *payload;
        size_t len;
};

/* Payloads per stream, and how the pieces arrived. */
struct sink {
        struct buf out[3];
        int calls;
        int empty_calls;
        int stop_at; /* return -7 on this call (1-based); 0: never */
};

static void sink_init(struct sink *s)
{
        *s = (struct sink){0};
        for (int i = 0; i < 3; i++)
                buf_init(&s->out[i], 1 << 20);
}

static void sink_free(struct sink *s)
{
        for (int i = 0; i < 3; i++)
                buf_free(&s->out[i]);
}

static int sink_cb(void *userdata, int stream, const char *p, size_t n)
{
        struct sink *s = userdata;
        s->calls++;
        if (n == 0)
                s->empty_calls++;
        if (stream >= 0 && stream <= 2)
                buf_append(&s->out[stream], p, n);
        return s->calls == s->stop_at ? -7 : 0;
}

static size_t encode(const struct frame *f, size_t nf, char *out, size_t size)
{
        size_t n = 0;
        for (size_t i = 0; i < nf; i++) {
                if (n + 8 + f[i].len > size)
                        break;
                unsigned char hdr[8] = {(unsigned char)f[i].stream,
                                        0,
                                        0,
                                        0,
                                        (unsigned char)(f[i].len >> 24),
                                        (unsigned char)(f[i].len >> 16),
                                        (unsigned char)(f[i].len >> 8),
                                        (unsigned char)f[i].len};
                memcpy(out + n, hdr, 8);
                memcpy(out + n + 8, f[i].payload, f[i].len);
                n += 8 + f[i].len;
        }
        return n;
}

static void expect(const struct frame *f, size_t nf, char want[3][1024], size_t want_len[3])
{
        for (int k = 0; k < 3; k++)
                want_len[k] = 0;
        for (size_t i = 0; i < nf; i++) {
                memcpy(want[f[i].stream] + want_len[f[i].stream], f[i].payload, f[i].len);
                want_len[f[i].stream] += f[i].len;
        }
}

/* Feed `in` cut at the offsets in `cuts`; true when every stream got
 * exactly `want` and no callback was empty. */
static bool feed_cut(const char *in, size_t n, const size_t *cuts, size_t ncuts, char want[3][1024],
                     const size_t want_len[3])
{
        struct demux d = {0};
        struct sink s;
        sink_init(&s);
        size_t at = 0;
        int rc = 0;
        for (size_t i = 0; i <= ncuts && rc == 0; i++) {
                size_t end = i < ncuts ? cuts[i] : n;
                rc = demux_feed(&d, in + at, end - at, sink_cb, &s);
                at = end;
        }
        bool good = rc == 0 && s.empty_calls == 0 && d.remaining == 0 && d.hdr_len == 0;
        for (int k = 0; k < 3; k++)
                good = good && s.out[k].len == want_len[k] &&
                       memcmp(s.out[k].data ? s.out[k].data : "", want[k], want_len[k]) == 0;
        sink_free(&s);
        return good;
}

static const char big_payload[300] = "a 300-byte frame: its length needs two header bytes";

static const struct stream_case {
        const char *name;
        struct frame frames[6];
        size_t nframes;
} stream_cases[] = {
    {"one stdout frame", {{1, "hello\n", 6}}, 1},
    {"stdout and stderr interleaved",
     {{1, "out1 ", 5}, {2, "err1 ", 5}, {1, "out2", 4}, {2, "err2", 4}},
     4},
    {"zero-length frames between data",
     {{1, "", 0}, {1, "a", 1}, {2, "", 0}, {2, "b", 1}, {1, "", 0}},
     5},
    {"only zero-length frames", {{1, "", 0}, {2, "", 0}}, 2},
    {"stream 0 (stdin) is allowed", {{0, "in", 2}, {1, "out", 3}}, 2},
    {"a 300-byte frame", {{2, big_payload, sizeof(big_payload)}, {1, "x", 1}}, 2},
    {"binary payload with NULs and header-like bytes",
     {{1, "\0\0\0\0\0\0\0\x05", 8}, {2, "\x01\x00\x00\x00", 4}},
     2},
};

static void test_splits(void)
{
        for (size_t t = 0; t < ARRAY_SIZE(stream_cases); t++) {
                const struct stream_case *tc = &stream_cases[t];
                char in[2048], want[3][1024];
                size_t want_len[3];
                size_t n = encode(tc->frames, tc->nframes, in, sizeof(in));
                expect(tc->frames, tc->nframes, want, want_len);

                ok(feed_cut(in, n, NULL, 0, want, want_len), "%s: in one feed", tc->name);

                int bad = 0;
                for (size_t cut = 0; cut <= n; cut++)
                        if (!feed_cut(in, n, &cut, 1, want, want_len)) {
                                if (!bad)
                                        diag("first failing split at byte %zu", cut);
                                bad++;
                        }
                is_int(bad, 0, "%s: split at every byte boundary (%zu bytes)", tc->name, n);

                /* Two cuts: every header is split somewhere in some run. */
                bad = 0;
                for (size_t a = 0; a <= n; a++)
                        for (size_t b = a; b <= n; b++) {
                                size_t cuts[2] = {a, b};
                                bad += !feed_cut(in, n, cuts, 2, want, want_len);
                        }
                is_int(bad, 0, "%s: every pair of cuts", tc->name);

                size_t cuts[2048];
                for (size_t i = 0; i + 1 < n; i++)
                        cuts[i] = i + 1;
                ok(feed_cut(in, n, cuts, n ? n - 1 : 0, want, want_len), "%s: one byte at a time",
                   tc->name);
        }
}

static void test_state(void)
{
        struct demux d = {0};
        struct sink s;
        sink_init(&s);
        /* The header arrives 3 + 5 bytes, then part of the payload. */
        static const char hdr[8] = {2, 0, 0, 0, 0, 0, 0, 5};
        is_int(demux_feed(&d, hdr, 3, sink_cb, &s), 0, "three header bytes");
        is_int(s.calls, 0, "... no callback yet");
        is_int(d.hdr_len, 3, "... they are held");
        is_int(demux_feed(&d, hdr + 3, 5, sink_cb, &s), 0, "the rest of the header");
        is_int(s.calls, 0, "... still no callback: no payload yet");
        is_int(d.remaining, 5, "... 5 payload bytes expected");
        is_int(demux_feed(&d, "abc", 3, sink_cb, &s), 0, "three payload bytes");
        is_int(d.remaining, 2, "... 2 to go");
        is_mem(s.out[2].data, s.out[2].len, "abc", 3, "... delivered at once, on stderr");
        is_int(demux_feed(&d, "de", 2, sink_cb, &s), 0, "the last two");
        is_mem(s.out[2].data, s.out[2].len, "abcde", 5, "... the whole payload");
        is_int(demux_feed(&d, "", 0, sink_cb, &s), 0, "an empty feed is a no-op");
        is_int(s.calls, 2, "two callbacks in all");
        sink_free(&s);

        /* A big length is just a long frame, fed as it comes. */
        d = (struct demux){0};
        sink_init(&s);
        static const char huge[8] = {1, 0, 0, 0, (char)0xff, (char)0xff, (char)0xff, (char)0xff};
        demux_feed(&d, huge, 8, sink_cb, &s);
        ok(d.remaining == 0xffffffffu, "a 4 GiB length is accepted as a stream");
        demux_feed(&d, "xyz", 3, sink_cb, &s);
        ok(d.remaining == 0xffffffffu - 3, "... and counted down");
        sink_free(&s);
}

static void test_bad_stream(void)
{
        static const unsigned char ids[] = {3, 4, 0x80, 0xff};
        for (size_t i = 0; i < ARRAY_SIZE(ids); i++) {
                struct demux d = {0};
                struct sink s;
                sink_init(&s);
                char in[12] = {1, 0, 0, 0, 0, 0, 0, 1, 'a', (char)ids[i], 0, 0};
                is_int(demux_feed(&d, in, 9, sink_cb, &s), 0, "a good frame first");
                is_int(demux_feed(&d, in + 9, 3, sink_cb, &s), 0,
                       "stream id %u: partial header waits", ids[i]);
                char rest[5] = {0, 0, 0, 0, 2};
                is_int(demux_feed(&d, rest, 5, sink_cb, &s), -EPROTO, "stream id %u is -EPROTO",
                       ids[i]);
                is_mem(s.out[1].data, s.out[1].len, "a", 1,
                       "... the frame before it was delivered");
                is_int(s.calls, 1, "... and nothing after it");
                sink_free(&s);
        }
        /* The whole header in one feed too. */
        struct demux d = {0};
        struct sink s;
        sink_init(&s);
        static const char bad[10] = {3, 0, 0, 0, 0, 0, 0, 2, 'x', 'y'};
        is_int(demux_feed(&d, bad, sizeof(bad), sink_cb, &s), -EPROTO, "stream 3 in one feed");
        is_int(s.calls, 0, "... its payload is not delivered");
        sink_free(&s);
}

static void test_stop(void)
{
        struct frame f[] = {{1, "one", 3}, {2, "two", 3}, {1, "three", 5}};
        char in[64];
        size_t n = encode(f, 3, in, sizeof(in));
        struct demux d = {0};
        struct sink s;
        sink_init(&s);
        s.stop_at = 2;
        is_int(demux_feed(&d, in, n, sink_cb, &s), -7, "a negative callback return stops the feed");
        is_int(s.calls, 2, "... after the second callback");
        is_mem(s.out[2].data, s.out[2].len, "two", 3, "... which got its payload");
        ok(s.out[1].len == 3, "... the third frame was not delivered");
        sink_free(&s);
}

int main(void)
{
        test_splits();
        test_state();
        test_bad_stream();
        test_stop();
        return done_testing();
}
