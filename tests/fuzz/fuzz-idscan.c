/* jrpc_id_scan, the id scanner for lines too long to parse, on arbitrary
 * bytes fed in random pieces, checked against jansson (the decoder behind
 * jrpc_parse): the outcome must not depend on the pieces; the scanner
 * refuses a line only when jansson does; when jansson reads an object with a
 * string or number "id", the scanner finds the same id; and any id it finds
 * is the one jansson reads. */
#include "core/jsonrpc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static enum jrpc_scan_result scan(const char *p, size_t n, uint32_t seed, json_t **ret_id)
{
        static struct jrpc_id_scan s; /* a few KiB: not on the stack */
        jrpc_id_scan_init(&s);
        for (size_t at = 0; at < n;) {
                size_t k = n - at;
                if (seed) {
                        seed = seed * 1103515245u + 12345u;
                        k = (seed >> 16) % 8 == 0 ? (seed >> 8) % 300 : (seed >> 16) % 4;
                        if (k > n - at)
                                k = n - at;
                }
                jrpc_id_scan_feed(&s, p + at, k);
                at += k;
        }
        return jrpc_id_scan_end(&s, ret_id);
}

static bool string_method(json_t *root)
{
        return json_is_string(json_object_get(root, "method"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        const char *p = (const char *)data + 1;
        size_t n = size - 1;
        json_t *id = NULL, *id2 = NULL;
        enum jrpc_scan_result r = scan(p, n, 0, &id);
        enum jrpc_scan_result r2 = scan(p, n, data[0] | 0x100u, &id2);
        if (r != r2 || (r == JRPC_SCAN_ID) != (id != NULL) || (id == NULL) != (id2 == NULL) ||
            (id && !json_equal(id, id2)))
                abort();
        if (id && !json_is_string(id) && !json_is_number(id))
                abort();

        json_error_t jerr;
        const size_t flags = JSON_DECODE_ANY | JSON_ALLOW_NUL;
        json_t *loose = json_loadb(p, n, flags, &jerr);
        enum json_error_code code = json_error_code(&jerr);
        json_t *strict = json_loadb(p, n, flags | JSON_REJECT_DUPLICATES, NULL);
        /* Refused what the decoder takes. (jansson skips a NUL byte that
         * ends a number or a literal, "1\0": a NUL is never JSON, and the
         * scanner refuses it.) */
        if (r == JRPC_SCAN_INVALID && loose && !memchr(p, '\0', n))
                abort();
        if (r == JRPC_SCAN_INVALID)
                goto out;
        /* The one thing jansson refuses on top of the syntax: numbers out
         * of its range. */
        if (!loose && code != json_error_numeric_overflow)
                abort();
        if (strict && json_is_object(strict)) {
                json_t *want = json_object_get(strict, "id");
                if (json_is_string(want) || json_is_number(want)) {
                        if (r == JRPC_SCAN_ID ? !json_equal(id, want)
                                              : !(r == JRPC_SCAN_NO_ID && n > JRPC_SCAN_ID_MAX))
                                abort();
                } else if (!want) {
                        if (r != (string_method(strict) ? JRPC_SCAN_NOTIFICATION : JRPC_SCAN_NO_ID))
                                abort();
                } else if (r != JRPC_SCAN_NO_ID) {
                        abort();
                }
        } else if (strict && r != JRPC_SCAN_NO_ID) {
                abort(); /* not an object: never an id */
        }
        if (r == JRPC_SCAN_ID && loose && !json_equal(id, json_object_get(loose, "id")))
                abort();
out:
        json_decref(loose);
        json_decref(strict);
        json_decref(id);
        json_decref(id2);
        return 0;
}
