/* Bounded buffers, the line reader (and its watch on long lines), utf8_cut,
 * and names shown escaped. */
#include "core/buf.h"
#include "core/util.h"

#include "tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void test_append_bound(void)
{
        struct buf b;
        buf_init(&b, 8);
        is_str(buf_str(&b), "", "an empty buffer reads as \"\"");
        is_int(buf_append(&b, "12345", 5), 0, "append within the bound");
        is_int(buf_append(&b, "6789", 4), -ENOBUFS, "append past max is -ENOBUFS");
        is_mem(b.data, b.len, "12345", 5, "... and nothing of it was appended");
        is_int(buf_append(&b, "678", 3), 0, "append up to exactly max");
        is_mem(b.data, b.len, "12345678", 8, "contents at max");
        is_int(buf_append(&b, "", 0), 0, "an empty append on a full buffer is fine");
        is_int(buf_append(&b, "x", 1), -ENOBUFS, "one more byte is refused");
        ok(b.cap <= b.max + 1, "capacity never exceeds max + 1 (cap %zu)", b.cap);
        is_str(buf_str(&b), "12345678", "buf_str is NUL-terminated at len");
        buf_free(&b);
        ok(b.data == NULL && b.len == 0, "buf_free resets the buffer");
        buf_free(&b);
        ok(true, "buf_free twice is harmless");

        buf_init(&b, 0);
        is_int(buf_append(&b, "", 0), 0, "max 0: empty append");
        is_int(buf_append(&b, "a", 1), -ENOBUFS, "max 0: any byte is refused");
        buf_free(&b);

        /* Grow one byte at a time across the initial capacity. */
        buf_init(&b, 1000);
        int bad = 0;
        for (int i = 0; i < 1000; i++) {
                char c = (char)('a' + i % 26);
                if (buf_append(&b, &c, 1) < 0)
                        bad++;
        }
        is_int(bad, 0, "1000 one-byte appends up to max 1000");
        int wrong = 0;
        for (int i = 0; i < 1000; i++)
                wrong += b.data[i] != (char)('a' + i % 26);
        is_int(wrong, 0, "contents survive reallocation");
        is_int(buf_append(&b, "z", 1), -ENOBUFS, "the 1001st byte is refused");
        ok(b.cap <= 1001, "capacity bounded by max + 1 (cap %zu)", b.cap);
        buf_free(&b);
}

static void test_append_some_consume(void)
{
        struct buf b;
        buf_init(&b, 8);
        buf_append(&b, "12345", 5);
        is_int(buf_append_some(&b, "abcdef", 6), 3, "buf_append_some takes what fits");
        is_mem(b.data, b.len, "12345abc", 8, "... the first 3 bytes");
        is_int(buf_append_some(&b, "x", 1), 0, "buf_append_some on a full buffer takes 0");
        is_int(b.len, 8, "... and the length is unchanged");

        buf_consume(&b, 2);
        is_mem(b.data, b.len, "345abc", 6, "consume drops the front");
        is_str(buf_str(&b), "345abc", "... and keeps the NUL");
        is_int(buf_append_some(&b, "XYZ", 3), 2, "room came back after consume");
        is_mem(b.data, b.len, "345abcXY", 8, "contents after refill");
        buf_consume(&b, 0);
        is_int(b.len, 8, "consume 0 is a no-op");
        buf_consume(&b, 100);
        is_int(b.len, 0, "consume past len empties the buffer");
        is_str(buf_str(&b), "", "... and it reads as \"\"");
        buf_free(&b);

        buf_init(&b, 4);
        buf_consume(&b, 1);
        is_int(b.len, 0, "consume on a never-allocated buffer is harmless");
        is_int(buf_append_some(&b, "abcdef", 6), 4, "buf_append_some into a fresh buffer");
        buf_free(&b);
}

/* ---- line_reader: every delivered line is rendered as "[line]" and every
 * too-long report as "!", so a whole run compares as one string. */

struct collect {
        struct buf out;
        int calls;
        int stop_at; /* return -42 on this call (1-based); 0: never */
};

static int collect_cb(void *userdata, const char *line, size_t len)
{
        struct collect *c = userdata;
        c->calls++;
        if (line) {
                buf_append(&c->out, "[", 1);
                buf_append(&c->out, line, len);
                buf_append(&c->out, "]", 1);
        } else {
                ok(len == 0, "a too-long report has length 0");
                buf_append(&c->out, "!", 1);
        }
        return c->calls == c->stop_at ? -42 : 0;
}

static const struct line_case {
        const char *name;
        size_t max;
        const char *feeds[8]; /* fed in order; NULL ends */
        const char *expect;
} line_cases[] = {
    {"two lines in one feed", 16, {"a\nbb\n"}, "[a][bb]"},
    {"lines split across feeds", 16, {"he", "llo\nwor", "ld\n"}, "[hello][world]"},
    {"a partial line is held back", 16, {"abc"}, ""},
    {"CRLF is left to the caller", 16, {"a\r\n", "b\r", "\n"}, "[a\r][b\r]"},
    {"empty lines", 16, {"\n\n", "\n"}, "[][][]"},
    {"exactly max is accepted", 4, {"abcd\n"}, "[abcd]"},
    {"exactly max in pieces", 4, {"ab", "cd", "\n"}, "[abcd]"},
    {"exactly max then the newline alone", 4, {"abcd", "\n"}, "[abcd]"},
    {"max + 1 is too long, next line intact", 4, {"abcde\nok\n"}, "![ok]"},
    {"too long, split over many feeds, reported once",
     4,
     {"ab", "cd", "ef", "gh", "ij", "\n", "ok\n"},
     "![ok]"},
    {"too long without newline, then the rest", 4, {"abcdefgh", "ijk\nok\n"}, "![ok]"},
    {"pending at max, one more byte", 4, {"abcd", "e\nx\n"}, "![x]"},
    {"two too-long lines in a row", 4, {"aaaaaa\nbbbbbb\nc\n"}, "!![c]"},
    {"too long, then an empty line", 2, {"abc\n\n"}, "![]"},
    {"max 0 takes only empty lines", 0, {"\n", "a\n", "\n"}, "[]![]"},
    {"too long partial at the end is reported", 3, {"ok\n", "toolong"}, "[ok]!"},
};

static size_t case_input(const struct line_case *tc, char *in, size_t size)
{
        size_t n = 0;
        for (size_t i = 0; i < ARRAY_SIZE(tc->feeds) && tc->feeds[i]; i++) {
                size_t k = strlen(tc->feeds[i]);
                if (n + k < size) {
                        memcpy(in + n, tc->feeds[i], k);
                        n += k;
                }
        }
        return n;
}

/* Feed `in` cut at the given offsets; returns the rendering. */
static char *run_split(size_t max, const char *in, size_t n, const size_t *cuts, size_t ncuts,
                       int *ret_rc)
{
        struct line_reader r;
        struct collect c = {0};
        line_reader_init(&r, max);
        buf_init(&c.out, 1 << 16);
        size_t at = 0;
        int rc = 0;
        for (size_t i = 0; i <= ncuts && rc == 0; i++) {
                size_t end = i < ncuts ? cuts[i] : n;
                rc = line_reader_feed(&r, in + at, end - at, collect_cb, &c);
                at = end;
        }
        line_reader_free(&r);
        *ret_rc = rc;
        char *s = strdup(buf_str(&c.out));
        buf_free(&c.out);
        return s;
}

static void test_line_reader_table(void)
{
        for (size_t t = 0; t < ARRAY_SIZE(line_cases); t++) {
                const struct line_case *tc = &line_cases[t];
                struct line_reader r;
                struct collect c = {0};
                int rc = 0;
                line_reader_init(&r, tc->max);
                buf_init(&c.out, 1 << 16);
                for (size_t i = 0; i < ARRAY_SIZE(tc->feeds) && tc->feeds[i]; i++)
                        rc |= line_reader_feed(&r, tc->feeds[i], strlen(tc->feeds[i]), collect_cb,
                                               &c);
                is_int(rc, 0, "%s: feed returns 0", tc->name);
                is_str(buf_str(&c.out), tc->expect, "%s", tc->name);
                line_reader_free(&r);
                buf_free(&c.out);

                /* The result must not depend on where the feeds were cut:
                 * one byte at a time, and every two-piece split. */
                char in[256];
                size_t n = case_input(tc, in, sizeof(in));
                size_t cuts[256];
                for (size_t i = 0; i < n; i++)
                        cuts[i] = i + 1;
                char *s = run_split(tc->max, in, n, cuts, n ? n - 1 : 0, &rc);
                is_str(s, tc->expect, "%s: one byte at a time", tc->name);
                free(s);
                int mismatches = 0;
                for (size_t cut = 0; cut <= n; cut++) {
                        s = run_split(tc->max, in, n, &cut, 1, &rc);
                        if (strcmp(s, tc->expect) != 0 || rc != 0) {
                                if (!mismatches)
                                        diag("split at %zu gives \"%s\"", cut, s);
                                mismatches++;
                        }
                        free(s);
                }
                is_int(mismatches, 0, "%s: every two-piece split", tc->name);
        }
}

static void test_line_reader_binary(void)
{
        struct line_reader r;
        struct collect c = {0};
        line_reader_init(&r, 8);
        buf_init(&c.out, 1024);
        line_reader_feed(&r, "a\0b", 3, collect_cb, &c);
        line_reader_feed(&r, "\xff\nz\0\n", 5, collect_cb, &c);
        is_mem(c.out.data, c.out.len, "[a\0b\xff][z\0]", 10,
               "NUL and non-UTF-8 bytes pass through");
        line_reader_free(&r);
        buf_free(&c.out);
}

static void test_line_reader_stop(void)
{
        struct line_reader r;
        struct collect c = {.stop_at = 2};
        line_reader_init(&r, 16);
        buf_init(&c.out, 1024);
        is_int(line_reader_feed(&r, "a\nb\nc\n", 6, collect_cb, &c), -42,
               "a negative callback return is returned from the feed");
        is_str(buf_str(&c.out), "[a][b]", "... and no line after it is delivered");
        is_int(c.calls, 2, "... two calls in all");
        line_reader_free(&r);
        buf_free(&c.out);

        /* The same from a line assembled in the pending buffer. */
        c = (struct collect){.stop_at = 1};
        line_reader_init(&r, 16);
        buf_init(&c.out, 1024);
        line_reader_feed(&r, "ab", 2, collect_cb, &c);
        is_int(line_reader_feed(&r, "c\nd\n", 4, collect_cb, &c), -42,
               "stop from a line completed across feeds");
        is_str(buf_str(&c.out), "[abc]", "... only that line was delivered");
        line_reader_free(&r);
        buf_free(&c.out);

        /* And from a too-long report. */
        c = (struct collect){.stop_at = 1};
        line_reader_init(&r, 2);
        buf_init(&c.out, 1024);
        is_int(line_reader_feed(&r, "abc\nd\n", 6, collect_cb, &c), -42,
               "stop from a too-long report");
        is_str(buf_str(&c.out), "!", "... nothing after it");
        line_reader_free(&r);
        buf_free(&c.out);
}

/* A line reader that is fed a huge line through many small feeds keeps its
 * memory bounded by max. */
static void test_line_reader_bounded(void)
{
        struct line_reader r;
        struct collect c = {0};
        line_reader_init(&r, 100);
        buf_init(&c.out, 1024);
        char chunk[64];
        memset(chunk, 'x', sizeof(chunk));
        for (int i = 0; i < 1000; i++)
                line_reader_feed(&r, chunk, sizeof(chunk), collect_cb, &c);
        ok(r.pending.cap <= 101, "pending memory stays within max + 1 (cap %zu)", r.pending.cap);
        line_reader_feed(&r, "\nfine\n", 6, collect_cb, &c);
        is_str(buf_str(&c.out), "![fine]", "64000-byte line in 64-byte feeds: one report");
        line_reader_free(&r);
        buf_free(&c.out);
}

/* ---- line_reader_watch_long: a too-long line is reported at its newline,
 * after the watcher saw its bytes; rendered "!{bytes seen}". */

struct watched {
        struct collect c;
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
        int k = collect_cb(&w->c, line, len);
        if (!line) {
                buf_append(&w->c.out, "{", 1);
                buf_append(&w->c.out, w->seen.data, w->seen.len);
                buf_append(&w->c.out, "}", 1);
                w->seen.len = 0;
        }
        return k;
}

static const struct watch_case {
        const char *name;
        size_t max;
        const char *in;
        const char *expect;
        const char *left; /* seen, of a too-long line not ended */
} watch_cases[] = {
    {"short lines pass as before", 8, "a\nbb\n", "[a][bb]", ""},
    {"too long: at its newline, every byte seen", 4, "abcdefghijk\nok\n", "!{abcdefghijk}[ok]", ""},
    {"one byte over max", 4, "abcde\nx\n", "!{abcde}[x]", ""},
    {"two in a row", 4, "aaaaaa\nbbbbbb\nc\n", "!{aaaaaa}!{bbbbbb}[c]", ""},
    {"not ended: not reported yet", 3, "ok\ntoolong", "[ok]", "toolong"},
    {"not yet too long: held, not seen", 8, "ok\nshort", "[ok]", ""},
};

static void test_line_reader_watch(void)
{
        for (size_t t = 0; t < ARRAY_SIZE(watch_cases); t++) {
                const struct watch_case *tc = &watch_cases[t];
                size_t n = strlen(tc->in);
                int mismatches = 0;
                /* All at once, one byte at a time, and every two-piece split. */
                for (size_t step = 0; step <= n + 1; step++) {
                        struct line_reader r;
                        struct watched w = {0};
                        line_reader_init(&r, tc->max);
                        line_reader_watch_long(&r, watch_cb, &w);
                        buf_init(&w.c.out, 1 << 16);
                        buf_init(&w.seen, 1 << 16);
                        size_t cut = step == n + 1 ? 0 : step;
                        if (step == n + 1) { /* one byte at a time */
                                for (size_t i = 0; i < n; i++)
                                        line_reader_feed(&r, tc->in + i, 1, watched_cb, &w);
                        } else {
                                line_reader_feed(&r, tc->in, cut, watched_cb, &w);
                                line_reader_feed(&r, tc->in + cut, n - cut, watched_cb, &w);
                        }
                        if (strcmp(buf_str(&w.c.out), tc->expect) != 0 ||
                            strcmp(buf_str(&w.seen), tc->left) != 0) {
                                if (!mismatches)
                                        diag("%s, feed %zu: \"%s\", left \"%s\"", tc->name, step,
                                             buf_str(&w.c.out), buf_str(&w.seen));
                                mismatches++;
                        }
                        line_reader_free(&r);
                        buf_free(&w.c.out);
                        buf_free(&w.seen);
                }
                is_int(mismatches, 0, "watch: %s (every split)", tc->name);
        }
}

/* One large line must not keep its buffer once delivered or skipped. */
static void test_line_reader_release(void)
{
        struct line_reader r;
        struct collect c = {0};
        line_reader_init(&r, 1 << 20);
        buf_init(&c.out, 1 << 20);
        char chunk[4096];
        memset(chunk, 'x', sizeof(chunk));
        for (int i = 0; i < 75; i++)
                line_reader_feed(&r, chunk, sizeof(chunk), collect_cb, &c);
        ok(r.pending.cap >= 75 * sizeof(chunk), "a 300 KiB line in pieces is held (cap %zu)",
           r.pending.cap);
        line_reader_feed(&r, "\n", 1, collect_cb, &c);
        is_int(c.out.len, 75 * sizeof(chunk) + 2, "... and delivered whole");
        ok(r.pending.cap <= 64 << 10, "... then its buffer is released (cap %zu)", r.pending.cap);
        for (int i = 0; i < 300; i++)
                line_reader_feed(&r, chunk, sizeof(chunk), collect_cb, &c);
        line_reader_feed(&r, "\nok\n", 4, collect_cb, &c);
        ok(r.pending.cap <= 64 << 10, "a line over max is dropped with its buffer (cap %zu)",
           r.pending.cap);
        line_reader_free(&r);
        buf_free(&c.out);
}

/* ---- buf_append_shown */

#define S(lit) lit, sizeof(lit) - 1 /* a literal with its exact length (NULs too) */

static void test_shown(void)
{
        static const struct {
                const char *in;
                size_t len;
                const char *out;
                size_t escapes;
        } cases[] = {
            {S("plain name.txt"), "plain name.txt", 0},
            {S("caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad"),
             "caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad", 0},
            {S("red\x1b[31mX"), "red\\e[31mX", 1},
            {S("bell\a"), "bell\\a", 1},
            {S("two\nlines\r"), "two\\nlines\\r", 2},
            {S("\t\b\v\f"), "\\t\\b\\v\\f", 4},
            {S("\x01\x7f"), "\\x01\\x7f", 2},
            {S("a\0b"), "a\\x00b", 1},
            {S("back\\slash"), "back\\\\slash", 1},
            {S("csi\xc2\x9b"
               "2J"),
             "csi\\u009b2J", 1},                    /* C1 */
            {S("nel\xc2\x85"), "nel\\u0085", 1},    /* C1 NEL, a line break */
            {S("\xc2\xa0nbsp"), "\xc2\xa0nbsp", 0}, /* U+00A0 is printable */
            {S("abc\xe2\x80\xae"
               "fdp.exe"),
             "abc\\u202efdp.exe", 1},                                            /* RLO */
            {S("\xe2\x81\xa6x\xe2\x81\xa9"), "\\u2066x\\u2069", 2},              /* isolates */
            {S("\xd8\x9c\xe2\x80\x8e\xe2\x80\x8f"), "\\u061c\\u200e\\u200f", 3}, /* marks */
            {S("\xe2\x80\xaa\xe2\x80\xad"), "\\u202a\\u202d", 2}, /* embedding, LRO */
            {S("line\xe2\x80\xa8sep\xe2\x80\xa9"), "line\\u2028sep\\u2029", 2},
            /* Zero width space, non-joiner, joiner, word joiner, invisible
             * plus, byte order mark, soft hyphen, Mongolian vowel
             * separator: drawn as nothing. */
            {S("a\xe2\x80\x8b\xe2\x80\x8c\xe2\x80\x8d"
               "b"),
             "a\\u200b\\u200c\\u200db", 3},
            {S("\xe2\x81\xa0\xe2\x81\xa4\xef\xbb\xbf\xc2\xad\xe1\xa0\x8e"),
             "\\u2060\\u2064\\ufeff\\u00ad\\u180e", 5},
            /* Tags (TAG LATIN SMALL LETTER A, CANCEL TAG) and variation
             * selectors, which can carry hidden text. */
            {S("x\xf3\xa0\x81\xa1\xf3\xa0\x81\xbf"), "x\\U000e0061\\U000e007f", 2},
            {S("\xe2\x9d\xa4\xef\xb8\x8f\xf3\xa0\x84\x80"), "\xe2\x9d\xa4\\ufe0f\\U000e0100", 2},
            /* Hangul filler, interlinear annotation anchor: invisible. */
            {S("\xe3\x85\xa4\xef\xbf\xb9"), "\\u3164\\ufff9", 2},
            {S("\xe2\x80\x8a\xe2\x80\x90"), "\xe2\x80\x8a\xe2\x80\x90", 0}, /* hair space, hyphen */
            {S("\xff"), "\\xff", 1},
            {S("cut \xe2\x82"), "cut \\xe2\\x82", 2},
            {S("\xc0\xaf"), "\\xc0\\xaf", 2},          /* overlong */
            {S("\xed\xa0\x80"), "\\xed\\xa0\\x80", 3}, /* surrogate */
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct buf b;
                buf_init(&b, 1024);
                size_t k = buf_append_shown(&b, cases[i].in, cases[i].len);
                is_str(buf_str(&b), cases[i].out, "shown: case %zu", i);
                is_int(k, cases[i].escapes, "shown: case %zu, escapes", i);
                ok(utf8_text(b.data, b.len), "shown: case %zu is text", i);
                buf_free(&b);
        }
        /* Bounded: never half an escape. */
        struct buf b;
        buf_init(&b, 9);
        is_int(buf_append_shown(&b, "abcdefgh\x1b", 9), 0,
               "an escape that does not fit is left out");
        is_str(buf_str(&b), "abcdefgh", "... whole");
        buf_free(&b);
        buf_init(&b, 10);
        buf_append_shown(&b, "abcdefgh\x1b", 9);
        is_str(buf_str(&b), "abcdefgh\\e", "... and in when it fits");
        buf_free(&b);
}

/* The UTF-8 of one code point; its length. */
static size_t utf8_of(unsigned cp, char *out)
{
        if (cp < 0x80) {
                out[0] = (char)cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char)(0xC0 | cp >> 6);
                out[1] = (char)(0x80 | (cp & 0x3F));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (char)(0xE0 | cp >> 12);
                out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
                out[2] = (char)(0x80 | (cp & 0x3F));
                return 3;
        }
        out[0] = (char)(0xF0 | cp >> 18);
        out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
}

/* Every control (Cc), format character (Cf) and line or paragraph
 * separator (Zl, Zp) of Unicode 15, from its UnicodeData.txt, apart from
 * buf.c's own table: each is escaped in every mode, but '\n' and '\t' in
 * code. */
static void test_shown_classes(void)
{
        static const struct {
                unsigned lo, hi;
        } must[] = {
            {0x00, 0x1F},       {0x7F, 0x9F},       {0xAD, 0xAD},       {0x600, 0x605},
            {0x61C, 0x61C},     {0x6DD, 0x6DD},     {0x70F, 0x70F},     {0x890, 0x891},
            {0x8E2, 0x8E2},     {0x180E, 0x180E},   {0x200B, 0x200F},   {0x2028, 0x2029},
            {0x202A, 0x202E},   {0x2060, 0x2064},   {0x2066, 0x206F},   {0xFEFF, 0xFEFF},
            {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD}, {0x110CD, 0x110CD}, {0x13430, 0x1343F},
            {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F},
        };
        static const unsigned how[] = {0, SHOWN_JSON, SHOWN_CODE};
        int missed = 0;
        for (size_t h = 0; h < ARRAY_SIZE(how); h++)
                for (size_t i = 0; i < ARRAY_SIZE(must); i++)
                        for (unsigned cp = must[i].lo; cp <= must[i].hi; cp++) {
                                char in[4];
                                size_t n = utf8_of(cp, in);
                                struct buf b;
                                buf_init(&b, 64);
                                size_t k = buf_append_shown_as(&b, in, n, how[h]);
                                bool kept = how[h] == SHOWN_CODE && (cp == '\n' || cp == '\t');
                                if (kept ? k != 0 : k != 1 || b.data[0] != '\\') {
                                        diag("U+%04X, how %u: %zu escapes, \"%s\"", cp, how[h], k,
                                             buf_str(&b));
                                        missed++;
                                }
                                buf_free(&b);
                        }
        is_int(missed, 0, "every Cc, Cf, Zl and Zp character is escaped in each mode");
        /* Letters, digits, spaces, marks and symbols of many scripts stay. */
        static const unsigned kept[] = {'a',   ' ',    '~',     0xE9,  0x3B1,  0x5D0,  0x627,
                                        0x928, 0x4E2D, 0x1F600, 0x301, 0x2003, 0x2764, 0xFFFD};
        int changed = 0;
        for (size_t i = 0; i < ARRAY_SIZE(kept); i++) {
                char in[4];
                size_t n = utf8_of(kept[i], in);
                struct buf b;
                buf_init(&b, 64);
                if (buf_append_shown_as(&b, in, n, SHOWN_JSON) != 0 || b.len != n ||
                    memcmp(b.data, in, n) != 0) {
                        diag("U+%04X changed", kept[i]);
                        changed++;
                }
                buf_free(&b);
        }
        is_int(changed, 0, "ordinary characters are copied");
}

/* JSON and code: the backslash stays, every escape is \u. */
static void test_shown_as(void)
{
        static const struct {
                unsigned how;
                const char *in, *out;
                size_t escapes;
        } cases[] = {
            {SHOWN_JSON, "{\"a\":\"x\\\\y\\n\\u001b\"}", "{\"a\":\"x\\\\y\\n\\u001b\"}", 0},
            {SHOWN_JSON, "{\"a\":\"\xe2\x80\xae\xc2\x9b\xc2\x85\xe2\x80\xa8\"}",
             "{\"a\":\"\\u202e\\u009b\\u0085\\u2028\"}", 4},
            {SHOWN_JSON, "\xf3\xa0\x81\xa1", "\\udb40\\udc61", 1}, /* a surrogate pair */
            {SHOWN_JSON, "[ok](http://evil) `x`", "[ok](http://evil) `x`", 0},
            {SHOWN_CODE, "if x:\n\tprint('\\n')\r\n", "if x:\n\tprint('\\n')\\u000d\n", 1},
            {SHOWN_CODE, "s = '\x1b[2J\xe2\x80\xae'\x7f", "s = '\\u001b[2J\\u202e'\\u007f", 3},
            {SHOWN_CODE, "t = '\xf3\xa0\x81\xa1'", "t = '\\U000e0061'", 1},
            {SHOWN_CODE, "\xe2\x80\xa9\xc2\x85\x0b\x0c", "\\u2029\\u0085\\u000b\\u000c", 4},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct buf b;
                buf_init(&b, 1024);
                size_t k = buf_append_shown_as(&b, cases[i].in, strlen(cases[i].in), cases[i].how);
                is_str(buf_str(&b), cases[i].out, "shown as: case %zu", i);
                is_int(k, cases[i].escapes, "shown as: case %zu, escapes", i);
                buf_free(&b);
        }
        /* A JSON string with escapes that jansson reads back as the text. */
        json_error_t je;
        const char *in = "[\"\xe2\x80\xae\xf3\xa0\x81\xa1\"]";
        struct buf b;
        buf_init(&b, 1024);
        buf_append_shown_as(&b, in, strlen(in), SHOWN_JSON);
        json_t *j = json_loads(buf_str(&b), 0, &je);
        is_str(json_string_value(json_array_get(j, 0)), "\xe2\x80\xae\xf3\xa0\x81\xa1",
               "what SHOWN_JSON shows is the same JSON");
        json_decref(j);
        buf_free(&b);
}

static void test_fenced(void)
{
        struct buf b;
        size_t k = 99;
        buf_init(&b, 1024);
        is_int(buf_append_fenced(&b, "{\"a\":\"[ok](http://evil)\"}", 25, SHOWN_JSON, &k), 0,
               "fenced: appended");
        is_str(buf_str(&b), "```\n{\"a\":\"[ok](http://evil)\"}\n```\n", "fenced: three backticks");
        is_int(k, 0, "fenced: no escapes");
        buf_free(&b);

        /* Runs of backticks in the text, even a line of them: the fence is
         * longer than the longest. */
        buf_init(&b, 1024);
        const char *code = "a = 1\n```\nAllow? ``x`` ````\n\xe2\x80\xa8print(a)\n";
        is_int(buf_append_fenced(&b, code, strlen(code), SHOWN_CODE, &k), 0, "fenced code");
        is_str(buf_str(&b), "`````\na = 1\n```\nAllow? ``x`` ````\n\\u2028print(a)\n`````\n",
               "fenced: five backticks around a run of four; lines kept, no extra newline");
        is_int(k, 1, "fenced: one escape counted");
        buf_free(&b);

        /* Every line of the block but the fences holds fewer backticks in a
         * row than the fence, for texts made of backticks and newlines. */
        int bad = 0;
        for (unsigned mask = 0; mask < 1u << 10; mask++) {
                char t[11];
                for (int i = 0; i < 10; i++)
                        t[i] = mask >> i & 1 ? '`' : '\n';
                t[10] = '\0';
                buf_init(&b, 1024);
                if (buf_append_fenced(&b, t, 10, SHOWN_CODE, NULL) < 0) {
                        bad++;
                        buf_free(&b);
                        continue;
                }
                const char *s = buf_str(&b), *first_nl = strchr(s, '\n');
                size_t fence = (size_t)(first_nl - s);
                const char *body = first_nl + 1, *end = s + b.len - fence - 1;
                if (strncmp(end, s, fence) != 0 || end[-1] != '\n')
                        bad++;
                size_t run = 0;
                for (const char *p = body; p < end; p++) {
                        run = *p == '`' ? run + 1 : 0;
                        if (run >= fence)
                                bad++;
                }
                buf_free(&b);
        }
        is_int(bad, 0, "fenced: no text of backticks and newlines can close its block");

        /* Whole or nothing. */
        buf_init(&b, 12);
        buf_append(&b, "x", 1);
        is_int(buf_append_fenced(&b, "abc", 3, SHOWN_JSON, &k), -ENOBUFS,
               "fenced: a block that does not fit is refused");
        is_str(buf_str(&b), "x", "... and nothing is appended");
        buf_free(&b);
        buf_init(&b, 13);
        is_int(buf_append_fenced(&b, "abc", 3, SHOWN_JSON, &k), 0, "... and it fits exactly");
        buf_free(&b);
}

/* ---- utf8_cut */

static void check_cuts(const char *text, const size_t *bounds, size_t nbounds, const char *what)
{
        size_t n = strlen(text);
        int wrong = 0;
        for (size_t k = 0; k <= n; k++) {
                size_t want = 0;
                for (size_t i = 0; i < nbounds; i++)
                        if (bounds[i] <= k)
                                want = bounds[i];
                size_t got = utf8_cut(text, k);
                if (got != want) {
                        diag("%s: utf8_cut(.., %zu) = %zu, want %zu", what, k, got, want);
                        wrong++;
                }
        }
        is_int(wrong, 0, "utf8_cut at every position of %s", what);
}

static void test_utf8_cut(void)
{
        /* 1-, 2-, 3- and 4-byte sequences, in both orders. */
        static const char fwd[] = "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
        static const size_t fwd_b[] = {0, 1, 3, 6, 10};
        static const char rev[] = "\xf0\x9f\x98\x80\xe2\x82\xac\xc3\xa9"
                                  "A";
        static const size_t rev_b[] = {0, 4, 7, 9, 10};
        check_cuts(fwd, fwd_b, ARRAY_SIZE(fwd_b), "A e-acute euro emoji");
        check_cuts(rev, rev_b, ARRAY_SIZE(rev_b), "emoji euro e-acute A");

        static const struct {
                const char *seq;
                size_t len;
        } seqs[] = {{"a", 1}, {"\xc3\xa9", 2}, {"\xe2\x82\xac", 3}, {"\xf0\x9f\x98\x80", 4}};
        for (size_t i = 0; i < ARRAY_SIZE(seqs); i++) {
                char text[16];
                for (size_t k = 0; k <= seqs[i].len; k++) {
                        /* "xy" + the first k bytes of the sequence */
                        memcpy(text, "xy", 2);
                        memcpy(text + 2, seqs[i].seq, k);
                        size_t want = k == seqs[i].len ? 2 + k : 2;
                        is_int(utf8_cut(text, 2 + k), want, "%zu-byte sequence cut after %zu bytes",
                               seqs[i].len, k);
                }
        }
        is_int(utf8_cut("", 0), 0, "utf8_cut of nothing");

        /* Arbitrary bytes: the cut never grows the text and never drops
         * more than an incomplete sequence (3 bytes). */
        unsigned seed = 12345;
        int bad = 0;
        for (int round = 0; round < 20000; round++) {
                char text[8];
                size_t n = (size_t)(round % 8) + 1;
                for (size_t i = 0; i < n; i++) {
                        seed = seed * 1103515245u + 12345u;
                        text[i] = (char)(seed >> 16);
                }
                size_t got = utf8_cut(text, n);
                if (got > n || got + 3 < n)
                        bad++;
        }
        is_int(bad, 0, "utf8_cut on random bytes stays within [n-3, n]");
}

/* RFC 4648 test vectors, both ways; malformed input and the bound. */
static void test_base64(void)
{
        static const struct {
                const char *plain, *coded;
        } v[] = {{"", ""},
                 {"f", "Zg=="},
                 {"fo", "Zm8="},
                 {"foo", "Zm9v"},
                 {"foob", "Zm9vYg=="},
                 {"fooba", "Zm9vYmE="},
                 {"foobar", "Zm9vYmFy"}};
        for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
                struct buf b;
                buf_init(&b, 64);
                is_int(base64_encode(&b, v[i].plain, strlen(v[i].plain)), 0, "encode \"%s\"",
                       v[i].plain);
                is_mem(b.data ? b.data : "", b.len, v[i].coded, strlen(v[i].coded), "encode \"%s\"",
                       v[i].plain);
                buf_free(&b);
                buf_init(&b, 64);
                is_int(base64_decode(&b, v[i].coded, strlen(v[i].coded)), 0, "decode \"%s\"",
                       v[i].coded);
                is_mem(b.data ? b.data : "", b.len, v[i].plain, strlen(v[i].plain), "decode \"%s\"",
                       v[i].coded);
                buf_free(&b);
        }
        unsigned char all[256];
        for (int i = 0; i < 256; i++)
                all[i] = (unsigned char)i;
        struct buf c, d;
        buf_init(&c, 1024);
        buf_init(&d, 1024);
        ok(base64_encode(&c, all, sizeof(all)) == 0 && base64_decode(&d, c.data, c.len) == 0,
           "every byte value round-trips");
        is_mem(d.data, d.len, (const char *)all, sizeof(all), "the bytes come back");
        buf_free(&d);
        buf_init(&d, 1024);
        is_int(base64_decode(&d, "Zm9v\nYmFy \r\n", 12), 0, "whitespace is skipped");
        is_mem(d.data, d.len, "foobar", 6, "...and the bytes are right");
        buf_free(&d);
        buf_init(&d, 1024);
        is_int(base64_decode(&d, "Zm9vYg", 6), 0, "padding is optional");
        is_mem(d.data, d.len, "foob", 4, "...unpadded decodes");
        static const char *const bad[] = {"Zm9v!", "Zg==Zg==", "Z", "Zm9vY", "Zg==="};
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                buf_free(&d);
                buf_init(&d, 1024);
                is_int(base64_decode(&d, bad[i], strlen(bad[i])), -EINVAL, "\"%s\" is refused",
                       bad[i]);
        }
        buf_free(&d);
        buf_init(&d, 3);
        is_int(base64_decode(&d, "Zm9vYmFy", 8), -ENOBUFS, "decoding past the bound: -ENOBUFS");
        buf_free(&d);
        buf_init(&d, 7);
        is_int(base64_encode(&d, "foobar", 6), -ENOBUFS, "encoding past the bound: -ENOBUFS");
        is_int((long long)d.len, 0, "...and nothing appended");
        buf_free(&d);
        buf_free(&c);
}

static void test_utf8_text(void)
{
        static const struct {
                const char *s;
                size_t n;
                bool text;
        } cases[] = {
            {"", 0, true},
            {"plain ascii\n", 12, true},
            {"na\xc3\xafve \xe2\x82\xac \xf0\x9f\x98\x80", 15, true},
            {"a\0b", 3, false},             /* a NUL is not text */
            {"\xff", 1, false},             /* never a UTF-8 byte */
            {"\xc3", 1, false},             /* cut sequence */
            {"\xe2\x82\xac", 2, false},     /* cut by n, though the bytes after it would do */
            {"\xc0\xaf", 2, false},         /* overlong */
            {"\xed\xa0\x80", 3, false},     /* surrogate */
            {"\xf4\x90\x80\x80", 4, false}, /* past U+10FFFF */
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
                ok(utf8_text(cases[i].s, cases[i].n) == cases[i].text, "utf8_text case %zu: %s", i,
                   cases[i].text ? "text" : "not text");
}

int main(void)
{
        test_base64();
        test_utf8_text();
        test_append_bound();
        test_append_some_consume();
        test_line_reader_table();
        test_line_reader_binary();
        test_line_reader_stop();
        test_line_reader_bounded();
        test_line_reader_watch();
        test_line_reader_release();
        test_shown();
        test_shown_classes();
        test_shown_as();
        test_fenced();
        test_utf8_cut();
        return done_testing();
}
