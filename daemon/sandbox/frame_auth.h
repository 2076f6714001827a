/* The frames a sandbox's runtime writes, authenticated: each line after
 * sandbox/ready is "TAG JSON", TAG the lowercase hex of
 * HMAC-SHA256(key, SEQ || JSON), SEQ the line's number (8 bytes, big
 * endian, 0 for the first line after sandbox/ready). The key is drawn per
 * sandbox and given to the runtime's supervisor only (runtime/README.md,
 * "Frame protocol"). A line that does not carry the tag of the next
 * number was not written by the supervisor, or is a replay, or a line was
 * dropped or injected: the sandbox is ended, nothing of it is taken.
 *
 * The daemon's frames to the runtime, after the key line, carry tags the
 * same way, numbered on their own with the top bit set
 * (FRAME_SEQ_TO_RUNTIME | n): a line written into the runtime's stdin by
 * anyone else fails the runtime's check, and it tells corral so
 * (sandbox/forged) and ends. */
#pragma once

#include "runtime/protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FRAME_KEY_LEN 32
#define FRAME_TAG_HEX RT_TAG_HEX /* the tag's hex digits; a space follows them */

struct frame_auth {
        unsigned char key[FRAME_KEY_LEN];
        uint64_t seq;     /* the number the next line must carry */
        uint64_t out_seq; /* the number of our next line to the runtime */
};

#define FRAME_SEQ_TO_RUNTIME (UINT64_C(1) << RT_TO_RUNTIME_SEQ_BIT)

enum frame_verdict {
        FRAME_OK = 0,
        FRAME_NO_TAG,  /* no "64 hex digits, a space" ahead of the JSON */
        FRAME_BAD_TAG, /* a tag, but not this key's for this number and these bytes */
};

/* A fresh key (getrandom) and the count at 0: 0, or -errno. */
int frame_auth_init(struct frame_auth *fa);

/* The key frame the daemon writes to the runtime, newline included, into
 * out (at least FRAME_KEY_LINE_MAX bytes): its length. */
#define FRAME_KEY_LINE_MAX 160
size_t frame_auth_key_line(const struct frame_auth *fa, char *out, size_t size);

/* The tag of json as line number seq, as FRAME_TAG_HEX hex digits and a
 * NUL in out. For the checker and for tests that play the runtime. */
void frame_auth_tag(const unsigned char key[FRAME_KEY_LEN], uint64_t seq, const char *json,
                    size_t len, char out[FRAME_TAG_HEX + 1]);

/* Checks one line (without its newline). FRAME_OK: *json and *json_len
 * are the JSON after the tag, and the count moved on; else nothing
 * changed and the line must not be acted on. */
enum frame_verdict frame_auth_check(struct frame_auth *fa, const char *line, size_t len,
                                    const char **json, size_t *json_len);

/* A data frame (runtime/README.md, "Frame protocol"): the line
 * "#CONN SIZE" (decimal, no leading zeros, CONN at most 16 digits, 1 <=
 * SIZE <= RT_NET_DATA_MAX), then SIZE raw bytes: net/data of connection
 * CONN without base64 or JSON. Sealed, the line carries a line's tag (so
 * that the runtime checks it before it waits for the bytes), and the
 * bytes are followed by a second tag, over the line, its newline and the
 * bytes, under the same number. frame_data_size: the SIZE a line (no
 * newline) announces, and *conn (may be NULL); 0 for a line that does
 * not start with '#' (a JSON one), -1 for one that does but is not a
 * data frame's. */
long frame_data_size(const char *line, size_t len, long long *conn);
/* The second tag of a data frame (head: its line without the newline). */
void frame_auth_tag_data(const unsigned char key[FRAME_KEY_LEN], uint64_t seq, const char *head,
                         size_t head_len, const char *data, size_t size,
                         char out[FRAME_TAG_HEX + 1]);

/* `frames` (one or more frames to the runtime: lines each ending in a
 * newline, a data frame's line followed by its bytes), each behind its
 * tag and a space (a data frame's bytes followed by their own), numbered
 * from fa->out_seq on, into *out (*out_len bytes; free it), *count
 * frames. 0, or -EINVAL for nothing, a piece
 * without its newline or a data frame malformed or cut short, -EMSGSIZE
 * for a line over max_line bytes (the runtime takes a longer line for
 * someone else's), -ENOMEM. The caller adds *count to fa->out_seq once
 * the buffer is on its way, so that a write refused whole leaves the
 * numbers as they were. */
int frame_auth_seal(const struct frame_auth *fa, const char *frames, size_t len, size_t max_line,
                    char **out, size_t *out_len, size_t *count);

/* The verdict in words, for the log. */
const char *frame_verdict_name(enum frame_verdict v);

/* Forgets the key. */
void frame_auth_clear(struct frame_auth *fa);
