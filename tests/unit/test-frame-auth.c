/* The tags on the runtime's frames (sandbox/frame_auth.h): a good line,
 * then every way a line may be wrong: a flipped bit, another number, a
 * replay, a short or absent tag. The expected tags were computed apart
 * from this code (Python's hmac module, the runtime's own). */
#include "sandbox/frame_auth.h"

#include "tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TAG0 "8e8d8e4704cc41e169d2ac70064ad4b6c14a9378577013e91109a909ddea1d0b"
#define TAG1 "46ef04771b48f3647ba56bd91843111e7ae737af1db74477c5f37561270508b7"

static void fixed_key(struct frame_auth *fa)
{
        for (int i = 0; i < FRAME_KEY_LEN; i++)
                fa->key[i] = (unsigned char)i;
        fa->seq = 0;
}

static enum frame_verdict check(struct frame_auth *fa, const char *line)
{
        const char *json = NULL;
        size_t n = 0;
        return frame_auth_check(fa, line, strlen(line), &json, &n);
}

static void test_good(void)
{
        struct frame_auth fa;
        fixed_key(&fa);
        char tag[FRAME_TAG_HEX + 1];
        frame_auth_tag(fa.key, 0, "{\"a\":1}", 7, tag);
        is_str(tag, TAG0, "the tag of frame 0 is HMAC-SHA256(key, 8-byte 0 || JSON)");
        const char *json = NULL;
        size_t n = 0;
        const char *line = TAG0 " {\"a\":1}";
        is_int(frame_auth_check(&fa, line, strlen(line), &json, &n), FRAME_OK,
               "a line with its tag is authenticated");
        is_mem(json, n, "{\"a\":1}", 7, "... and the JSON after the tag is handed on");
        ok(fa.seq == 1, "... and the count moved to 1");
        is_int(check(&fa, TAG1 " {\"b\":2}"), FRAME_OK, "the next line, tagged as number 1");
        ok(fa.seq == 2, "the count is 2");
}

static void test_bad(void)
{
        struct frame_auth fa;
        fixed_key(&fa);
        char line[256];

        snprintf(line, sizeof(line), "%s %s", TAG0, "{\"a\":2}");
        is_int(check(&fa, line), FRAME_BAD_TAG, "another JSON under a good tag is refused");
        ok(fa.seq == 0, "a refused line does not move the count");

        for (int bit = 0; bit < 8; bit++) {
                snprintf(line, sizeof(line), "%s %s", TAG0, "{\"a\":1}");
                line[FRAME_TAG_HEX + 3] ^= (char)(1 << bit);
                if (check(&fa, line) != FRAME_BAD_TAG)
                        break;
                if (bit == 7)
                        ok(true, "a flipped bit in the JSON is refused (each of 8)");
        }
        snprintf(line, sizeof(line), "%s %s", TAG0, "{\"a\":1}");
        line[10] = line[10] == '0' ? '1' : '0';
        is_int(check(&fa, line), FRAME_BAD_TAG, "a changed digit of the tag is refused");

        is_int(check(&fa, TAG1 " {\"b\":2}"), FRAME_BAD_TAG,
               "a line tagged for number 1 while 0 is due is refused (one dropped)");
        is_int(check(&fa, TAG0 " {\"a\":1}"), FRAME_OK, "number 0 itself passes");
        is_int(check(&fa, TAG0 " {\"a\":1}"), FRAME_BAD_TAG,
               "the same line again is a replay: refused");
        is_int(check(&fa, TAG1 " {\"b\":2}"), FRAME_OK, "and the real number 1 still passes");

        fixed_key(&fa);
        is_int(check(&fa, "{\"a\":1}"), FRAME_NO_TAG, "a line without a tag is refused");
        is_int(check(&fa, ""), FRAME_NO_TAG, "an empty line is refused");
        is_int(check(&fa, "8e8d8e47 {\"a\":1}"), FRAME_NO_TAG, "a short tag is refused");
        snprintf(line, sizeof(line), "%s{\"a\":1}", TAG0);
        is_int(check(&fa, line), FRAME_NO_TAG, "a tag without its space is refused");
        snprintf(line, sizeof(line), "%s", TAG0 " {\"a\":1}");
        for (char *p = line; *p != ' '; p++)
                if (*p >= 'a' && *p <= 'f')
                        *p = (char)(*p - 'a' + 'A');
        is_int(check(&fa, line), FRAME_NO_TAG, "upper-case hex is not the tag's form: refused");
        is_int(check(&fa, TAG0 " "), FRAME_BAD_TAG, "a tag over nothing is refused");
        ok(fa.seq == 0, "none of them moved the count");

        struct frame_auth other;
        fixed_key(&other);
        other.key[31] ^= 1;
        is_int(check(&other, TAG0 " {\"a\":1}"), FRAME_BAD_TAG, "another key's tag is refused");
}

static void test_key(void)
{
        struct frame_auth a, b;
        is_int(frame_auth_init(&a), 0, "a key is drawn");
        is_int(frame_auth_init(&b), 0, "and another");
        ok(memcmp(a.key, b.key, FRAME_KEY_LEN) != 0 && a.seq == 0, "two draws differ; counts at 0");
        char line[FRAME_KEY_LINE_MAX];
        size_t n = frame_auth_key_line(&a, line, sizeof(line));
        ok(n > 0 && line[n - 1] == '\n' && memchr(line, '\n', n - 1) == NULL,
           "the key frame is one line");
        json_t *msg = json_loadb(line, n, 0, NULL);
        const char *hex = json_string_value(json_object_get(json_object_get(msg, "params"), "key"));
        is_str(json_string_value(json_object_get(msg, "method")), "sandbox/key",
               "its method is sandbox/key");
        ok(json_object_get(msg, "id") == NULL, "it is a notification");
        ok(hex && strlen(hex) == 64 && strspn(hex, "0123456789abcdef") == 64,
           "its key is 64 lower-case hex digits");
        int same = 0;
        for (int i = 0; hex && i < FRAME_KEY_LEN; i++) {
                unsigned v;
                same += sscanf(hex + 2 * i, "%2x", &v) == 1 && v == a.key[i];
        }
        is_int(same, FRAME_KEY_LEN, "they are the key's bytes");
        json_decref(msg);
        is_int((int)frame_auth_key_line(&a, line, 20), 0, "a buffer too small gives nothing");
        frame_auth_clear(&a);
        static const unsigned char zero[FRAME_KEY_LEN];
        ok(memcmp(a.key, zero, FRAME_KEY_LEN) == 0, "clear forgets the key");
}

/* The daemon's own lines to the runtime: each behind its tag, numbered on
 * their own with the top bit set (tags from Python's hmac). */
#define DTAG5 "fb81a0da9f9e2513a282ca4ee75db8b040ab945e860b86b316b888f73e45bc7a"
#define DTAG6 "3b116ada7624b619853e5ab708259a6682ea4143772e1ec41c0fbe88b94b1a2c"

/* A data frame (net/data's bytes), then a line: the data frame's line
 * has a line's tag, its bytes (newlines among them, not taken for lines)
 * are followed by the tag of line, newline and bytes, under the same
 * number. */
#define DTAG7  "f44e6cdcad4e9a34d26807148faec950997fb0ffe013330fa6e4a1d660ce3b46"
#define DTAG7D "33084375baf567b1ed45abb4014f6af33a203ca9baeb821f7db598240d9a55b5"
#define DTAG8  "fba1f590e4ee278e706b8610a5136b3dd2e872ec4f7fdc7f5c05f8a6c9d46bcb"

static int seal(const struct frame_auth *fa, const char *frames, size_t len, size_t max, char **out,
                size_t *n, size_t *count)
{
        *out = NULL;
        int r = frame_auth_seal(fa, frames, len, max, out, n, count);
        free(r < 0 ? NULL : *out);
        return r;
}

static void test_seal(void)
{
        struct frame_auth fa;
        fixed_key(&fa);
        fa.out_seq = 5;
        size_t n = 0, count = 0;
        char *out = NULL;
        const char *lines = "{\"a\":1}\n{\"b\":2}\n";
        is_int(frame_auth_seal(&fa, lines, strlen(lines), 100, &out, &n, &count), 0, "sealed");
        const char *want = DTAG5 " {\"a\":1}\n" DTAG6 " {\"b\":2}\n";
        ok(out && n == strlen(want) && memcmp(out, want, n) == 0,
           "two lines sealed: each behind HMAC-SHA256(key, 2^63 | n || JSON), n from out_seq");
        is_int((int)count, 2, "and counted");
        is_int((int)fa.out_seq, 5, "the numbers move only when the caller says the lines went");
        free(out);
        is_int(seal(&fa, "{}", 2, 100, &out, &n, &count), -EINVAL,
               "a piece without its newline: refused");
        is_int(seal(&fa, "", 0, 100, &out, &n, &count), -EINVAL, "nothing: refused");
        is_int(seal(&fa, "{\"a\":1}\n", 8, 6, &out, &n, &count), -EMSGSIZE,
               "a line over the limit: refused");
        is_int(seal(&fa, "{\"a\":1}\n", 8, 7, &out, &n, &count), 0, "one at the limit: sealed");

        fa.out_seq = 7;
        const char frames[] = "#3 5\na\nb\nc{\"c\":3}\n";
        is_int(frame_auth_seal(&fa, frames, sizeof(frames) - 1, 100, &out, &n, &count), 0,
               "a data frame and a line sealed");
        const char want2[] = DTAG7 " #3 5\na\nb\nc" DTAG7D DTAG8 " {\"c\":3}\n";
        ok(out && n == sizeof(want2) - 1 && memcmp(out, want2, n) == 0,
           "the data frame's line behind a line's tag, its 5 bytes (newlines among them) followed "
           "by the tag of line, newline and bytes under the same number, as Python's hmac computes "
           "them; the line after it is numbered next");
        is_int((int)count, 2, "two frames");
        free(out);
        is_int(seal(&fa, "#3 5\nabc", 8, 100, &out, &n, &count), -EINVAL,
               "a data frame cut short: refused");
        is_int(seal(&fa, "#3 0\n", 5, 100, &out, &n, &count), -EINVAL, "of 0 bytes: refused");
        is_int(seal(&fa, "#03 1\nx", 7, 100, &out, &n, &count), -EINVAL,
               "with a leading zero: refused");

        long long conn = 0;
        is_int((int)frame_data_size("#12 65536", 9, &conn), 65536, "65536 bytes announced");
        is_int((int)conn, 12, "for connection 12");
        is_int((int)frame_data_size("#12 65537", 9, NULL), -1, "65537: not a data frame's line");
        is_int((int)frame_data_size("#12  1", 6, NULL), -1, "two spaces: not");
        is_int((int)frame_data_size("#12 1 ", 6, NULL), -1, "a space after: not");
        is_int((int)frame_data_size("#0 1", 4, NULL), -1, "connection 0: not");
        is_int((int)frame_data_size("#1234567890123456 1", 19, NULL), 1,
               "a connection of 16 digits");
        is_int((int)frame_data_size("#12345678901234567 1", 20, NULL), -1, "17 digits: not");
        is_int((int)frame_data_size("{\"a\":1}", 7, NULL), 0, "a JSON line: 0");
        fa.seq = 5;
        const char *json = NULL;
        size_t jn = 0;
        const char *as_ours = DTAG5 " {\"a\":1}";
        is_int(frame_auth_check(&fa, as_ours, strlen(as_ours), &json, &jn), FRAME_BAD_TAG,
               "a line of the daemon's does not pass as the runtime's of the same number");
}

int main(void)
{
        test_good();
        test_bad();
        test_key();
        test_seal();
        return done_testing();
}
