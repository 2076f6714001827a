/* HMAC-SHA256 tags on the runtime's frames (frame_auth.h). */
#include "sandbox/frame_auth.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static const char hexdigits[] = "0123456789abcdef";

int frame_auth_init(struct frame_auth *fa)
{
        size_t got = 0;
        while (got < FRAME_KEY_LEN) {
                ssize_t k = getrandom(fa->key + got, FRAME_KEY_LEN - got, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -EIO;
                got += (size_t)k;
        }
        fa->seq = 0;
        fa->out_seq = 0;
        return 0;
}

size_t frame_auth_key_line(const struct frame_auth *fa, char *out, size_t size)
{
        char hex[2 * FRAME_KEY_LEN + 1];
        for (size_t i = 0; i < FRAME_KEY_LEN; i++) {
                hex[2 * i] = hexdigits[fa->key[i] >> 4];
                hex[2 * i + 1] = hexdigits[fa->key[i] & 15];
        }
        hex[2 * FRAME_KEY_LEN] = '\0';
        int n = snprintf(
            out, size,
            "{\"jsonrpc\":\"2.0\",\"method\":\"sandbox/key\",\"params\":{\"key\":\"%s\"}}\n", hex);
        OPENSSL_cleanse(hex, sizeof(hex));
        return n < 0 || (size_t)n >= size ? 0 : (size_t)n;
}

/* The one HMAC implementation, fetched once (the daemon is one thread). */
static EVP_MAC *hmac_impl(void)
{
        static EVP_MAC *mac;
        if (!mac)
                mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
        return mac;
}

/* HMAC-SHA256(key, seq (8 bytes, big endian) || a || b); b may be empty. */
static bool mac_of(const unsigned char key[FRAME_KEY_LEN], uint64_t seq, const char *a, size_t alen,
                   const char *b, size_t blen, unsigned char out[32])
{
        EVP_MAC *mac = hmac_impl();
        EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
        if (!ctx)
                return false;
        char digest[] = "SHA256";
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
        unsigned char be[8];
        for (int i = 0; i < 8; i++)
                be[i] = (unsigned char)(seq >> (56 - 8 * i));
        size_t n = 0;
        bool ok = EVP_MAC_init(ctx, key, FRAME_KEY_LEN, params) == 1 &&
                  EVP_MAC_update(ctx, be, sizeof(be)) == 1 &&
                  EVP_MAC_update(ctx, (const unsigned char *)a, alen) == 1 &&
                  (!blen || EVP_MAC_update(ctx, (const unsigned char *)b, blen) == 1) &&
                  EVP_MAC_final(ctx, out, &n, 32) == 1 && n == 32;
        EVP_MAC_CTX_free(ctx);
        return ok;
}

static void tag_hex(const unsigned char key[FRAME_KEY_LEN], uint64_t seq, const char *a,
                    size_t alen, const char *b, size_t blen, char *out)
{
        unsigned char md[32];
        if (!mac_of(key, seq, a, alen, b, blen, md))
                memset(md, 0, sizeof(md)); /* no tag then: every check fails */
        for (size_t i = 0; i < 32; i++) {
                out[2 * i] = hexdigits[md[i] >> 4];
                out[2 * i + 1] = hexdigits[md[i] & 15];
        }
}

void frame_auth_tag(const unsigned char key[FRAME_KEY_LEN], uint64_t seq, const char *json,
                    size_t len, char out[FRAME_TAG_HEX + 1])
{
        tag_hex(key, seq, json, len, NULL, 0, out);
        out[FRAME_TAG_HEX] = '\0';
}

void frame_auth_tag_data(const unsigned char key[FRAME_KEY_LEN], uint64_t seq, const char *head,
                         size_t head_len, const char *data, size_t size,
                         char out[FRAME_TAG_HEX + 1])
{
        /* The line's newline is the bytes' first: no line holds one, so
         * the bytes' tag is never a line's. */
        tag_hex(key, seq, head, head_len + 1, data, size, out);
        out[FRAME_TAG_HEX] = '\0';
}

/* A decimal number of 1 to `most` digits, no leading zero, from *p to
 * before `end`: its value, and *p past it; -1 when there is none. */
static long long decimal(const char **p, const char *end, int most)
{
        const char *q = *p;
        long long v = 0;
        int k = 0;
        while (q < end && *q >= '0' && *q <= '9' && k < most + 1) {
                v = v * 10 + (*q++ - '0');
                k++;
        }
        if (k == 0 || k > most || (k > 1 && **p == '0'))
                return -1;
        *p = q;
        return v;
}

long frame_data_size(const char *line, size_t len, long long *conn)
{
        if (!len || line[0] != '#')
                return 0;
        const char *p = line + 1, *end = line + len;
        long long c = decimal(&p, end, 16);
        if (c <= 0 || p >= end || *p++ != ' ')
                return -1;
        long long size = decimal(&p, end, 6);
        if (size <= 0 || size > RT_NET_DATA_MAX || p != end)
                return -1;
        if (conn)
                *conn = c;
        return (long)size;
}

static int unhex(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        return -1;
}

enum frame_verdict frame_auth_check(struct frame_auth *fa, const char *line, size_t len,
                                    const char **json, size_t *json_len)
{
        unsigned char got[32], want[32];
        if (len < FRAME_TAG_HEX + 1 || line[FRAME_TAG_HEX] != ' ')
                return FRAME_NO_TAG;
        for (size_t i = 0; i < 32; i++) {
                int hi = unhex(line[2 * i]), lo = unhex(line[2 * i + 1]);
                if (hi < 0 || lo < 0)
                        return FRAME_NO_TAG;
                got[i] = (unsigned char)(hi << 4 | lo);
        }
        const char *body = line + FRAME_TAG_HEX + 1;
        size_t n = len - FRAME_TAG_HEX - 1;
        if (!mac_of(fa->key, fa->seq, body, n, NULL, 0, want) || CRYPTO_memcmp(got, want, 32) != 0)
                return FRAME_BAD_TAG;
        fa->seq++;
        *json = body;
        *json_len = n;
        return FRAME_OK;
}

/* The frame at p (before end): its line's length (newline excluded) and
 * its data's (0 for a JSON line); -EINVAL for a piece without its
 * newline or a data frame that is malformed or cut short, -EMSGSIZE for a
 * line over max_line. */
static int frame_at(const char *p, const char *end, size_t max_line, size_t *line, size_t *data)
{
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
                return -EINVAL;
        *line = (size_t)(nl - p);
        if (*line > max_line)
                return -EMSGSIZE;
        long size = frame_data_size(p, *line, NULL);
        if (size < 0 || (size_t)(end - nl - 1) < (size_t)size)
                return -EINVAL;
        *data = (size_t)size;
        return 0;
}

int frame_auth_seal(const struct frame_auth *fa, const char *frames, size_t len, size_t max_line,
                    char **out, size_t *out_len, size_t *count)
{
        const char *end = frames + len;
        size_t n = 0, n_data = 0, line, data;
        if (!len)
                return -EINVAL;
        for (const char *p = frames; p < end; n++) {
                int r = frame_at(p, end, max_line, &line, &data);
                if (r < 0)
                        return r;
                n_data += data > 0;
                p += line + 1 + data;
        }
        size_t total = len + n * (FRAME_TAG_HEX + 1) + n_data * FRAME_TAG_HEX;
        char *buf = malloc(total), *o = buf;
        if (!buf)
                return -ENOMEM;
        uint64_t seq = fa->out_seq;
        for (const char *p = frames; p < end; seq++) {
                frame_at(p, end, max_line, &line, &data);
                uint64_t number = FRAME_SEQ_TO_RUNTIME | seq;
                tag_hex(fa->key, number, p, line, NULL, 0, o);
                o[FRAME_TAG_HEX] = ' ';
                size_t k = line + 1 + data;
                memcpy(o + FRAME_TAG_HEX + 1, p, k);
                o += FRAME_TAG_HEX + 1 + k;
                if (data) { /* then the tag of its line, newline and bytes */
                        tag_hex(fa->key, number, p, line + 1, p + line + 1, data, o);
                        o += FRAME_TAG_HEX;
                }
                p += k;
        }
        *out = buf;
        *out_len = total;
        *count = n;
        return 0;
}

const char *frame_verdict_name(enum frame_verdict v)
{
        switch (v) {
        case FRAME_OK:
                return "authenticated";
        case FRAME_NO_TAG:
                return "a line without a tag";
        case FRAME_BAD_TAG:
                return "a tag that is not the runtime's for this line (forged, replayed, or out of "
                       "order)";
        }
        return "?";
}

void frame_auth_clear(struct frame_auth *fa)
{
        OPENSSL_cleanse(fa, sizeof(*fa));
}
