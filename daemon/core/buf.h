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
 * to show a person or a model: control characters (C0, DEL, C1), the
 * Unicode controls that reorder text or break lines (bidirectional marks,
 * embeddings, overrides, isolates; line and paragraph separators), bytes
 * that are not UTF-8, and the backslash itself become C escapes (\n, \t,
 * \e, \x9b, \\), so a name can neither move a terminal's cursor nor pass
 * for another. The rest is copied. What does not fit in b is left out
 * (never half an escape). Returns the number of escapes written. */
size_t buf_append_shown(struct buf *b, const char *s, size_t n);
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
