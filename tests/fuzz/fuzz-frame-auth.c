/* frame_auth_check on any line, under any key and count, against what it
 * promises: a verdict of "no tag" exactly when the line does not start
 * with 64 lower-case hex digits and a space; "authenticated" exactly when
 * those digits are the tag of the rest under the key and the count (and
 * then the count moves on by one and the JSON handed on is the rest);
 * otherwise "bad tag" and nothing moves. A line tagged right passes once:
 * the same again is refused, and so is it with any one byte changed.
 * Input: 32 bytes of key, 8 of the count, one byte choosing the byte to
 * change, then the line.
 *
 * The same bytes are then sealed as frames to the runtime
 * (frame_auth_seal, a line limit of 16 plus the choosing byte): sealed
 * exactly when a reading of this file's own finds whole lines within the
 * limit and data frames ("#CONN SIZE", then SIZE bytes) well formed, each
 * frame then behind the tag of its number over its line, a data frame's
 * bytes followed by the tag over its line, newline and bytes, nothing
 * else changed; refused with the reason that reading finds
 * first otherwise. */
#include "sandbox/frame_auth.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool tag_form(const char *p, size_t n)
{
        if (n < FRAME_TAG_HEX + 1 || p[FRAME_TAG_HEX] != ' ')
                return false;
        for (size_t i = 0; i < FRAME_TAG_HEX; i++)
                if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
                        return false;
        return true;
}

static enum frame_verdict check(struct frame_auth *fa, const char *line, size_t n,
                                const char **json, size_t *json_len)
{
        /* A copy of exactly n bytes: a read past the line shows up under ASan. */
        char *copy = malloc(n ? n : 1);
        if (!copy)
                abort();
        memcpy(copy, line, n);
        *json = NULL;
        uint64_t before = fa->seq;
        enum frame_verdict v = frame_auth_check(fa, copy, n, json, json_len);
        if (v == FRAME_OK) {
                if (fa->seq != before + 1 || *json != copy + FRAME_TAG_HEX + 1 ||
                    *json_len != n - FRAME_TAG_HEX - 1)
                        abort();
        } else if (fa->seq != before || *json != NULL) {
                abort();
        }
        free(copy);
        return v;
}

/* A decimal of 1 to most digits without a leading zero at p[0..n): its
 * value, or -1. */
static long long number(const char *p, size_t n, size_t most)
{
        if (n == 0 || n > most || (n > 1 && p[0] == '0'))
                return -1;
        long long v = 0;
        for (size_t i = 0; i < n; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return -1;
                v = v * 10 + (p[i] - '0');
        }
        return v;
}

/* The data a line announces: 0 for a line not starting with '#', -1 for
 * one that does but is not "#CONN SIZE". */
static long long announced(const char *p, size_t n)
{
        if (!n || p[0] != '#')
                return 0;
        const char *sp = memchr(p, ' ', n);
        if (!sp)
                return -1;
        long long conn = number(p + 1, (size_t)(sp - p - 1), 16);
        long long size = number(sp + 1, (size_t)(p + n - sp - 1), 6);
        return conn > 0 && size > 0 && size <= RT_NET_DATA_MAX ? size : -1;
}

static void check_seal(const struct frame_auth *fa, const char *in, size_t n, size_t max)
{
        /* What the reading expects: 0, or the first frame's refusal. */
        int want = n ? 0 : -EINVAL;
        size_t frames = 0, data_frames = 0;
        for (size_t at = 0; at < n && want == 0; frames++) {
                const char *nl = memchr(in + at, '\n', n - at);
                size_t line = nl ? (size_t)(nl - in - at) : 0;
                long long size = nl ? announced(in + at, line) : 0;
                if (!nl)
                        want = -EINVAL;
                else if (line > max)
                        want = -EMSGSIZE;
                else if (size < 0 || n - at - line - 1 < (size_t)size)
                        want = -EINVAL;
                else
                        at += line + 1 + (size_t)size;
                data_frames += size > 0;
        }
        char *out = NULL;
        size_t out_len = 0, count = 0;
        int r = frame_auth_seal(fa, in, n, max, &out, &out_len, &count);
        if (r != want)
                abort();
        if (r < 0)
                return;
        if (count != frames ||
            out_len != n + frames * (FRAME_TAG_HEX + 1) + data_frames * FRAME_TAG_HEX)
                abort();
        const char *o = out;
        for (size_t at = 0, i = 0; i < frames; i++) {
                const char *nl = memchr(in + at, '\n', n - at);
                size_t line = (size_t)(nl - in - at);
                size_t k = line + 1 + (size_t)announced(in + at, line);
                uint64_t number = FRAME_SEQ_TO_RUNTIME | (fa->out_seq + i);
                char tag[FRAME_TAG_HEX + 1];
                frame_auth_tag(fa->key, number, in + at, line, tag);
                if (memcmp(o, tag, FRAME_TAG_HEX) != 0 || o[FRAME_TAG_HEX] != ' ' ||
                    memcmp(o + FRAME_TAG_HEX + 1, in + at, k) != 0)
                        abort();
                o += FRAME_TAG_HEX + 1 + k;
                if (k > line + 1) { /* a data frame: the tag of line, newline and bytes */
                        frame_auth_tag_data(fa->key, number, in + at, line, nl + 1, k - line - 1,
                                            tag);
                        if (memcmp(o, tag, FRAME_TAG_HEX) != 0)
                                abort();
                        o += FRAME_TAG_HEX;
                }
                at += k;
        }
        free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < FRAME_KEY_LEN + 9)
                return 0;
        struct frame_auth fa;
        memcpy(fa.key, data, FRAME_KEY_LEN);
        uint64_t seq = 0;
        for (int i = 0; i < 8; i++)
                seq = seq << 8 | data[FRAME_KEY_LEN + i];
        fa.seq = seq;
        size_t flip_at = data[FRAME_KEY_LEN + 8];
        const char *line = (const char *)data + FRAME_KEY_LEN + 9;
        size_t n = size - FRAME_KEY_LEN - 9;
        const char *json;
        size_t json_len;

        /* The line as it came. */
        enum frame_verdict v = check(&fa, line, n, &json, &json_len);
        if ((v == FRAME_NO_TAG) != !tag_form(line, n))
                abort();
        if (v != FRAME_NO_TAG) {
                char want[FRAME_TAG_HEX + 1];
                frame_auth_tag(fa.key, seq, line + FRAME_TAG_HEX + 1, n - FRAME_TAG_HEX - 1, want);
                if ((v == FRAME_OK) != (memcmp(want, line, FRAME_TAG_HEX) == 0))
                        abort();
        }

        /* The same bytes as the JSON of a line tagged right. */
        fa.seq = seq;
        char *tagged = malloc(FRAME_TAG_HEX + 1 + n);
        if (!tagged)
                abort();
        char tag[FRAME_TAG_HEX + 1];
        frame_auth_tag(fa.key, seq, line, n, tag);
        memcpy(tagged, tag, FRAME_TAG_HEX);
        tagged[FRAME_TAG_HEX] = ' ';
        memcpy(tagged + FRAME_TAG_HEX + 1, line, n);
        size_t tn = FRAME_TAG_HEX + 1 + n;
        if (check(&fa, tagged, tn, &json, &json_len) != FRAME_OK)
                abort();
        if (check(&fa, tagged, tn, &json, &json_len) != FRAME_BAD_TAG)
                abort(); /* a replay */
        fa.seq = seq;
        /* One byte changed, anywhere in the tag, the space or the JSON. */
        size_t at = flip_at % tn;
        tagged[at] ^= (char)(1 + (flip_at >> 4) % 255);
        if (check(&fa, tagged, tn, &json, &json_len) == FRAME_OK)
                abort();
        free(tagged);

        fa.out_seq = seq;
        check_seal(&fa, line, n, 16 + flip_at);
        return 0;
}
