/* frame_auth_check on any line, under any key and count, against what it
 * promises: a verdict of "no tag" exactly when the line does not start
 * with 64 lower-case hex digits and a space; "authenticated" exactly when
 * those digits are the tag of the rest under the key and the count (and
 * then the count moves on by one and the JSON handed on is the rest);
 * otherwise "bad tag" and nothing moves. A line tagged right passes once:
 * the same again is refused, and so is it with any one byte changed.
 * Input: 32 bytes of key, 8 of the count, one byte choosing the byte to
 * change, then the line. */
#include "sandbox/frame_auth.h"

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
        return 0;
}
