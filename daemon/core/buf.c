#include "core/buf.h"

#include "core/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void buf_init(struct buf *b, size_t max)
{
        *b = (struct buf){.max = max};
}

void buf_free(struct buf *b)
{
        free(b->data);
        b->data = NULL;
        b->len = b->cap = 0;
}

static int buf_reserve(struct buf *b, size_t want)
{
        if (want + 1 <= b->cap)
                return 0;
        size_t cap = b->cap ? b->cap : 256;
        while (cap < want + 1)
                cap *= 2;
        if (cap > b->max + 1)
                cap = b->max + 1;
        char *p = realloc(b->data, cap);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->cap = cap;
        return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
        if (n > b->max - b->len)
                return -ENOBUFS;
        int r = buf_reserve(b, b->len + n);
        if (r < 0)
                return r;
        if (n)
                memcpy(b->data + b->len, p, n);
        b->len += n;
        b->data[b->len] = '\0';
        return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
        char small[512];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(small, sizeof(small), fmt, ap);
        va_end(ap);
        if (n < 0)
                return -EINVAL;
        if ((size_t)n < sizeof(small))
                return buf_append(b, small, (size_t)n);
        char *big = malloc((size_t)n + 1);
        if (!big)
                return -ENOMEM;
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        int r = buf_append(b, big, (size_t)n);
        free(big);
        return r;
}

size_t buf_append_some(struct buf *b, const void *p, size_t n)
{
        size_t room = b->max - b->len;
        if (n > room)
                n = room;
        return buf_append(b, p, n) < 0 ? 0 : n;
}

size_t utf8_cut(const char *p, size_t n)
{
        /* Step back over continuation bytes to the last lead byte and keep
         * it only if its whole sequence is present. */
        size_t i = n, back = 0;
        while (i > 0 && back < 4 && ((unsigned char)p[i - 1] & 0xC0) == 0x80) {
                i--;
                back++;
        }
        if (i == 0)
                return n;
        unsigned char lead = (unsigned char)p[i - 1];
        size_t need = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
        if (lead < 0x80 || (lead & 0xC0) == 0x80)
                return n;
        return back + 1 >= need ? n : i - 1;
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if it is invalid or
 * longer than `avail` bytes; *ret_cp (if not NULL) gets its code point.
 * Stops at the first byte that does not continue the sequence, so a NUL
 * ends it in a C string. */
static size_t utf8_seq(const unsigned char *p, size_t avail, unsigned *ret_cp)
{
        unsigned char c = p[0];
        size_t n;
        unsigned min;
        unsigned cp;
        if (c < 0x80) {
                n = 1;
                cp = c;
                min = 0;
        } else if ((c & 0xE0) == 0xC0) {
                n = 2;
                cp = c & 0x1F;
                min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
                n = 3;
                cp = c & 0x0F;
                min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
                n = 4;
                cp = c & 0x07;
                min = 0x10000;
        } else {
                return 0;
        }
        if (n > avail)
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((p[i] & 0xC0) != 0x80)
                        return 0;
                cp = cp << 6 | (p[i] & 0x3F);
        }
        /* Overlong forms, surrogates and values past U+10FFFF are invalid. */
        if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
                return 0;
        if (ret_cp)
                *ret_cp = cp;
        return n;
}

char *utf8_scrub(char *s)
{
        unsigned char *p = (unsigned char *)s;
        while (p && *p) {
                size_t n = utf8_seq(p, SIZE_MAX, NULL);
                if (n == 0) {
                        *p++ = '?';
                        continue;
                }
                p += n;
        }
        return s;
}

bool utf8_text(const char *s, size_t n)
{
        const unsigned char *p = (const unsigned char *)s;
        for (size_t i = 0; i < n;) {
                size_t k = utf8_seq(p + i, n - i, NULL);
                if (p[i] == 0 || k == 0)
                        return false;
                i += k;
        }
        return true;
}

void buf_consume(struct buf *b, size_t n)
{
        if (n >= b->len) {
                b->len = 0;
        } else {
                memmove(b->data, b->data + n, b->len - n);
                b->len -= n;
        }
        if (b->data)
                b->data[b->len] = '\0';
}

const char *buf_str(struct buf *b)
{
        if (!b->data && buf_reserve(b, 0) < 0)
                return "";
        b->data[b->len] = '\0';
        return b->data;
}

/* A delivered line leaves at most this much allocated behind it: one large
 * message must not hold its size for the rest of the run. */
#define LINE_KEEP (64 << 10)

void line_reader_init(struct line_reader *r, size_t max)
{
        buf_init(&r->pending, max);
        r->max = max;
        r->skipping = false;
        r->on_long = NULL;
        r->long_userdata = NULL;
}

void line_reader_watch_long(struct line_reader *r, void (*fn)(void *, const char *, size_t),
                            void *userdata)
{
        r->on_long = fn;
        r->long_userdata = userdata;
}

void line_reader_free(struct line_reader *r)
{
        buf_free(&r->pending);
}

static void line_reader_shrink(struct line_reader *r)
{
        if (r->pending.len == 0 && r->pending.cap > LINE_KEEP)
                buf_free(&r->pending);
}

int line_reader_feed(struct line_reader *r, const char *p, size_t n, line_cb cb, void *userdata)
{
        while (n > 0) {
                const char *nl = memchr(p, '\n', n);
                size_t seg = nl ? (size_t)(nl - p) : n;
                size_t advance = nl ? seg + 1 : n;
                int k = 0;

                if (r->skipping) {
                        if (r->on_long && seg)
                                r->on_long(r->long_userdata, p, seg);
                        if (nl) {
                                r->skipping = false;
                                if (r->on_long)
                                        k = cb(userdata, NULL, 0);
                        }
                } else if (seg > r->max - r->pending.len) {
                        if (r->on_long) {
                                if (r->pending.len)
                                        r->on_long(r->long_userdata, r->pending.data,
                                                   r->pending.len);
                                r->on_long(r->long_userdata, p, seg);
                        }
                        r->pending.len = 0;
                        line_reader_shrink(r);
                        r->skipping = !nl;
                        if (!r->on_long || nl)
                                k = cb(userdata, NULL, 0);
                } else if (!nl) {
                        k = buf_append(&r->pending, p, seg);
                } else if (r->pending.len == 0) {
                        k = cb(userdata, p, seg);
                } else {
                        k = buf_append(&r->pending, p, seg);
                        if (k == 0) {
                                /* Emptied before the callback, which may
                                 * reset the reader (and then returns < 0). */
                                size_t len = r->pending.len;
                                r->pending.len = 0;
                                k = cb(userdata, r->pending.data, len);
                                if (k == 0)
                                        line_reader_shrink(r);
                        }
                }
                if (k < 0)
                        return k;
                p += advance;
                n -= advance;
        }
        return 0;
}

void str_printable(const char *s, char *out, size_t size)
{
        size_t k = 0, i = 0;
        for (; s[i] && k + 4 < size; i++)
                out[k++] = isprint((unsigned char)s[i]) ? s[i] : '?';
        if (s[i]) {
                memcpy(out + k, "...", 3);
                k += 3;
        }
        out[k] = '\0';
}

/* Code points shown escaped though valid UTF-8: the C1 controls, the line
 * and paragraph separators, every format character (Unicode's Cf: the
 * bidirectional marks, embeddings, overrides and isolates, which reorder
 * what follows them; zero-width spaces and joiners; the soft hyphen; the
 * byte order mark; interlinear annotations, which hide text; tags) and the
 * other default-ignorable code points (variation selectors, Hangul
 * fillers, the combining grapheme joiner): what breaks a line, reorders
 * text or is drawn as nothing. Drawn as nothing, a character can hide data
 * from the person that a model still reads (a run of variation selectors
 * or tags after one letter carries any bytes), so variation selectors are
 * escaped too, at the price of showing an emoji's presentation selector.
 * Sorted, for a binary search. */
static const struct {
        unsigned lo, hi;
} shown_escaped_ranges[] = {
    {0x0080, 0x009F},   {0x00AD, 0x00AD},   {0x034F, 0x034F},   {0x0600, 0x0605},
    {0x061C, 0x061C},   {0x06DD, 0x06DD},   {0x070F, 0x070F},   {0x0890, 0x0891},
    {0x08E2, 0x08E2},   {0x115F, 0x1160},   {0x17B4, 0x17B5},   {0x180B, 0x180F},
    {0x200B, 0x200F},   {0x2028, 0x202E},   {0x2060, 0x206F},   {0x3164, 0x3164},
    {0xFE00, 0xFE0F},   {0xFEFF, 0xFEFF},   {0xFFA0, 0xFFA0},   {0xFFF0, 0xFFFB},
    {0x110BD, 0x110BD}, {0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3},
    {0x1D173, 0x1D17A}, {0xE0000, 0xE0FFF},
};

static bool shown_escaped(unsigned cp)
{
        size_t lo = 0, hi = ARRAY_SIZE(shown_escaped_ranges);
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (cp < shown_escaped_ranges[mid].lo)
                        hi = mid;
                else if (cp > shown_escaped_ranges[mid].hi)
                        lo = mid + 1;
                else
                        return true;
        }
        return false;
}

/* The C escape letter of a control byte, or 0. */
static char escape_letter(unsigned char c)
{
        switch (c) {
        case '\a':
                return 'a';
        case '\b':
                return 'b';
        case '\t':
                return 't';
        case '\n':
                return 'n';
        case '\v':
                return 'v';
        case '\f':
                return 'f';
        case '\r':
                return 'r';
        case 0x1B:
                return 'e';
        case '\\':
                return '\\';
        default:
                return 0;
        }
}

/* The escape of one character (or, k == 0, of one byte that is not UTF-8)
 * into e; its length. */
static size_t shown_escape(const unsigned char *p, size_t k, unsigned cp, unsigned how, char *e,
                           size_t size)
{
        int len;
        if (k == 0)
                len = snprintf(e, size, "\\x%02x", p[0]);
        else if (!how && k == 1 && escape_letter(p[0]))
                len = snprintf(e, size, "\\%c", escape_letter(p[0]));
        else if (!how && k == 1)
                len = snprintf(e, size, "\\x%02x", p[0]);
        else if (cp <= 0xFFFF)
                len = snprintf(e, size, "\\u%04x", cp);
        else if (how & SHOWN_JSON) /* JSON has only \u: a surrogate pair */
                len = snprintf(e, size, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                               0xDC00 + ((cp - 0x10000) & 0x3FF));
        else
                len = snprintf(e, size, "\\U%08x", cp);
        return len > 0 ? (size_t)len : 0;
}

/* buf_append_shown_as, and in *ret_used how many bytes of s were shown
 * before b was full. */
static size_t append_shown(struct buf *b, const char *s, size_t n, unsigned how, size_t *ret_used)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t escapes = 0, i = 0;
        while (i < n) {
                unsigned cp = 0;
                size_t k = utf8_seq(p + i, n - i, &cp);
                bool kept = (how & SHOWN_CODE) && (cp == '\n' || cp == '\t');
                bool escape = k == 0 || (cp < 0x20 && !kept) || cp == 0x7F ||
                              (cp == '\\' && !how) || shown_escaped(cp);
                if (!escape) {
                        if (buf_append(b, p + i, k) < 0)
                                break;
                        i += k;
                        continue;
                }
                char e[16];
                if (buf_append(b, e, shown_escape(p + i, k, cp, how, e, sizeof(e))) < 0)
                        break;
                escapes++;
                i += k ? k : 1;
        }
        *ret_used = i;
        return escapes;
}

size_t buf_append_shown_as(struct buf *b, const char *s, size_t n, unsigned how)
{
        size_t used;
        return append_shown(b, s, n, how, &used);
}

size_t buf_append_shown(struct buf *b, const char *s, size_t n)
{
        return buf_append_shown_as(b, s, n, 0);
}

int buf_append_fenced(struct buf *b, const char *s, size_t n, unsigned how, size_t *ret_escaped)
{
        struct buf text, block;
        buf_init(&text, b->max - b->len);
        buf_init(&block, b->max - b->len);
        size_t used;
        size_t escapes = append_shown(&text, s, n, how, &used);
        /* Shown whole or not at all: a cut block would end where the text
         * chose. */
        int r = used < n ? -ENOBUFS : 0;
        size_t run = 0, longest = 0;
        for (size_t i = 0; i < text.len; i++) {
                run = text.data[i] == '`' ? run + 1 : 0;
                if (run > longest)
                        longest = run;
        }
        /* CommonMark closes a fence of backticks only with a line of at
         * least as many: one more than the longest run inside cannot be.
         * And the only line breaks inside are the text's own '\n' (with
         * SHOWN_CODE), each one inside the block. */
        size_t fence = longest < 3 ? 3 : longest + 1;
        bool nl = text.len && text.data[text.len - 1] == '\n';
        for (size_t i = 0; i < fence && r == 0; i++)
                r = buf_append(&block, "`", 1);
        if (r == 0)
                r = buf_append(&block, "\n", 1);
        if (r == 0)
                r = buf_append(&block, text.data, text.len);
        if (r == 0 && !nl)
                r = buf_append(&block, "\n", 1);
        for (size_t i = 0; i < fence && r == 0; i++)
                r = buf_append(&block, "`", 1);
        if (r == 0)
                r = buf_append(&block, "\n", 1);
        if (r == 0)
                r = buf_append(b, block.data, block.len);
        if (r == 0 && ret_escaped)
                *ret_escaped = escapes;
        buf_free(&text);
        buf_free(&block);
        return r;
}

int buf_read_file(const char *path, size_t max, struct buf *b)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return errno == ENOTDIR ? -ENOENT : -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        if ((unsigned long long)st.st_size > max)
                return -EFBIG;
        buf_init(b, max);
        char chunk[16384];
        for (;;) {
                ssize_t k = read(fd, chunk, sizeof(chunk));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        int r = -errno;
                        buf_free(b);
                        return r;
                }
                if (k == 0)
                        return 0;
                if (buf_append(b, chunk, (size_t)k) < 0) {
                        buf_free(b);
                        return -EFBIG;
                }
        }
}

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_encode(struct buf *b, const void *p, size_t n)
{
        const unsigned char *in = p;
        if (n > (b->max - b->len) / 4 * 3)
                return -ENOBUFS;
        size_t out_len = (n + 2) / 3 * 4;
        if (out_len > b->max - b->len)
                return -ENOBUFS;
        int r = buf_reserve(b, b->len + out_len);
        if (r < 0)
                return r;
        char *o = b->data + b->len;
        for (size_t i = 0; i < n; i += 3) {
                unsigned v = (unsigned)in[i] << 16;
                if (i + 1 < n)
                        v |= (unsigned)in[i + 1] << 8;
                if (i + 2 < n)
                        v |= in[i + 2];
                *o++ = b64_chars[v >> 18 & 63];
                *o++ = b64_chars[v >> 12 & 63];
                *o++ = i + 1 < n ? b64_chars[v >> 6 & 63] : '=';
                *o++ = i + 2 < n ? b64_chars[v & 63] : '=';
        }
        b->len += out_len;
        b->data[b->len] = '\0';
        return 0;
}

int hex_value(int c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

static int b64_value(char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+' || c == '-')
                return 62;
        if (c == '/' || c == '_')
                return 63;
        return -1;
}

int base64_decode(struct buf *b, const char *s, size_t n)
{
        /* At most 3 bytes for every 4 characters. */
        size_t most = n / 4 * 3 + 3;
        if (most > b->max - b->len)
                most = b->max - b->len;
        int r = buf_reserve(b, b->len + most);
        if (r < 0)
                return r;
        unsigned v = 0;
        int bits = 0, pad = 0;
        size_t chars = 0, i = 0;
        /* Whole groups of four plain characters (all of a file's base64
         * but its end), a table look-up each; the loop below takes the
         * rest, and anything else, one character at a time. */
        static signed char value[256];
        if (!value['B']) {
                for (int c = 0; c < 256; c++)
                        value[c] = (signed char)b64_value((char)c);
        }
        const unsigned char *u = (const unsigned char *)s;
        while (i + 4 <= n && b->len + 3 <= b->max) {
                int a = value[u[i]], bb = value[u[i + 1]], c = value[u[i + 2]], d = value[u[i + 3]];
                if ((a | bb | c | d) < 0)
                        break;
                unsigned g =
                    (unsigned)a << 18 | (unsigned)bb << 12 | (unsigned)c << 6 | (unsigned)d;
                b->data[b->len++] = (char)(g >> 16);
                b->data[b->len++] = (char)(g >> 8 & 0xFF);
                b->data[b->len++] = (char)(g & 0xFF);
                i += 4;
                chars += 4;
        }
        for (; i < n; i++) {
                char c = s[i];
                if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
                        continue;
                if (c == '=') {
                        pad++;
                        continue;
                }
                int x = b64_value(c);
                if (x < 0 || pad)
                        return -EINVAL; /* not base64, or data after the padding */
                v = v << 6 | (unsigned)x;
                bits += 6;
                chars++;
                if (bits >= 8) {
                        bits -= 8;
                        if (b->len >= b->max)
                                return -ENOBUFS;
                        b->data[b->len++] = (char)(v >> bits & 0xFF);
                }
        }
        b->data[b->len] = '\0';
        /* One character of a group holds no whole byte. */
        if (chars % 4 == 1 || pad > 2)
                return -EINVAL;
        return 0;
}
