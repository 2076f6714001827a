/* Bounded dynamic byte buffers: everything read from outside lands in one,
 * and every one has a maximum size past which appends fail with -ENOBUFS. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct buf {
        char *data;
        size_t len;
        size_t cap;
        size_t max;
};

void buf_init(struct buf *b, size_t max);
void buf_free(struct buf *b);
/* Append; -ENOBUFS when the result would exceed b->max (nothing appended). */
int buf_append(struct buf *b, const void *p, size_t n);
/* Append formatted text (as buf_append: -ENOBUFS past the maximum). */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append at most what still fits; returns how many bytes were taken. */
size_t buf_append_some(struct buf *b, const void *p, size_t n);
/* The length of the longest prefix of p[0..n) that does not end inside a
 * UTF-8 sequence (for cutting valid text at a byte limit). */
size_t utf8_cut(const char *p, size_t n);
/* Replace every byte that is not part of a valid UTF-8 sequence with '?', in
 * place, so that text cut at a byte limit or taken from outside can always
 * become a JSON string. Returns s. */
char *utf8_scrub(char *s);
/* Whether p[0..n) is text: valid UTF-8 with no NUL byte. Reads no byte
 * past n. */
bool utf8_text(const char *p, size_t n);
/* The value of a hexadecimal digit (either case), or -1. */
int hex_value(int c);
/* Text from outside made fit for a message: non-printable bytes become '?'
 * and what does not fit in `size` is cut with "...". */
void str_printable(const char *s, char *out, size_t size);
/* A name from outside (a file name from a sandbox) appended to b as text fit
 * to show a person or a model: control characters (C0, DEL, C1), the line
 * and paragraph separators, the format characters that reorder text or draw
 * as nothing (bidirectional marks, embeddings, overrides, isolates;
 * zero-width spaces and joiners, the soft hyphen, tags, variation
 * selectors, ...), bytes that are not UTF-8, and the backslash itself
 * become escapes (\n, \t, \e, \x01 for C0 and DEL; \u009b, \u202e for
 * characters past ASCII, \U000e0041 past U+FFFF; \xff for a byte that is
 * not UTF-8; \\), so a name can neither move a terminal's cursor nor pass
 * for another. The rest is copied. What does not fit in b is left out
 * (never half an escape). Returns the number of escapes written. */
size_t buf_append_shown(struct buf *b, const char *s, size_t n);
/* How buf_append_shown_as shows text other than names. With either, the
 * backslash stays (it is the text's own: JSON's escapes, code's string
 * literals) and every character escaped is written \uXXXX, so a count of
 * the escapes tells a person how many \u in the text are corral's. */
enum {
        /* JSON text (json_dumps): past U+FFFF, a surrogate pair, so what is
         * shown is still the same JSON. */
        SHOWN_JSON = 1 << 0,
        /* Code: '\n' and '\t' stay, its lines and indentation; past U+FFFF,
         * \U00XXXXXX. */
        SHOWN_CODE = 1 << 1,
};
/* buf_append_shown with `how` (0: as a name). */
size_t buf_append_shown_as(struct buf *b, const char *s, size_t n, unsigned how);
/* s[0..n) shown (buf_append_shown_as) in a Markdown fenced code block, so a
 * renderer shows it as literal text (no link, no emphasis): a line of
 * backticks, one more than the longest run of them in the text (at least
 * three), so that nothing in it can close the block; the text; a newline
 * if it has none at its end; the same fence and a newline. The number of
 * characters escaped goes to *ret_escaped. -ENOBUFS when the whole block
 * does not fit in b (nothing appended). */
int buf_append_fenced(struct buf *b, const char *s, size_t n, unsigned how, size_t *ret_escaped);
/* Drop the first n bytes. */
void buf_consume(struct buf *b, size_t n);
/* The whole of a regular file of at most `max` bytes into `b` (initialised
 * here): -ENOENT when it does not exist, -EFBIG when too large, -EINVAL when
 * it is not a regular file (opening does not block on a FIFO), or another
 * negative errno. */
int buf_read_file(const char *path, size_t max, struct buf *b);
/* NUL-terminated view of the contents (the NUL is not counted in len). */
const char *buf_str(struct buf *b);

/* Base64 (RFC 4648, with padding) of p[0..n) appended to b; -ENOBUFS when
 * it does not fit (nothing appended). */
int base64_encode(struct buf *b, const void *p, size_t n);
/* The bytes of base64 text appended to b. Whitespace is skipped; padding is
 * optional; -EINVAL for any other character or a cut group, -ENOBUFS when
 * it does not fit (b may then hold part of it). */
int base64_decode(struct buf *b, const char *s, size_t n);

/* Splits a byte stream into newline-terminated lines of at most `max` bytes
 * (newline not counted). A longer line is reported once as too long and then
 * skipped up to its newline, so the stream stays in step. A line held in
 * pieces does not keep a large buffer allocated once it is delivered. */
struct line_reader {
        struct buf pending;
        size_t max;
        bool skipping;
        void (*on_long)(void *userdata, const char *p, size_t n);
        void *long_userdata;
};

/* Called for each complete line (without its newline; not NUL-terminated),
 * or with line == NULL for a line that was too long. `line` may point into
 * the reader, so the callback must not feed this reader again. A negative
 * return stops the feed and is returned from line_reader_feed: the way to
 * say that the callback reset or freed the reader (or its owner). */
typedef int (*line_cb)(void *userdata, const char *line, size_t len);

void line_reader_init(struct line_reader *r, size_t max);
/* Let `fn` see every byte of a line that is too long (what was held, then
 * the rest as it arrives; not its newline), in bounded memory, and report
 * that line when its newline arrives rather than at once, so that the
 * report can use what `fn` read (the id of a request, say). A line that
 * never ends is then never reported. */
void line_reader_watch_long(struct line_reader *r,
                            void (*fn)(void *userdata, const char *p, size_t n), void *userdata);
void line_reader_free(struct line_reader *r);
int line_reader_feed(struct line_reader *r, const char *p, size_t n, line_cb cb, void *userdata);
