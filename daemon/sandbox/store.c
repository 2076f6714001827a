#include "sandbox/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void store_entry_clear(struct store_entry *e)
{
        json_decref(e->grant);
        json_decref(e->network);
        memset(e, 0, sizeof(*e));
}

/* A list of distinct non-empty strings of at most max bytes each, at most
 * count of them, or null (absent). */
static bool string_list(json_t *v, size_t count, size_t max)
{
        if (!v || json_is_null(v))
                return true;
        if (!json_is_array(v) || json_array_size(v) > count)
                return false;
        size_t i, j;
        json_t *x;
        json_array_foreach(v, i, x)
        {
                if (!json_is_string(x) || json_string_length(x) == 0 ||
                    json_string_length(x) > max ||
                    strlen(json_string_value(x)) != json_string_length(x))
                        return false;
                for (j = 0; j < i; j++)
                        if (json_equal(json_array_get(v, j), x))
                                return false;
        }
        return true;
}

static bool owner_ok(const char *s, size_t len)
{
        if (len > SESSION_OWNER_MAX || strlen(s) != len)
                return false;
        for (size_t i = 0; i < len; i++)
                if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
                        return false;
        return true;
}

static bool image_ok(const char *s, size_t len)
{
        if (len == 0 || len > STORE_IMAGE_MAX || strlen(s) != len)
                return false;
        for (size_t i = 0; i < len; i++)
                if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
                        return false;
        return true;
}

int store_index_parse(const char *text, size_t len, struct store_entry *e, struct err *err)
{
        memset(e, 0, sizeof(*e));
        if (len > STORE_INDEX_MAX)
                return err_set(err, ERR_INVALID, -EINVAL, "index of %zu bytes (at most %d)", len,
                               STORE_INDEX_MAX);
        json_error_t je;
        json_auto_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!root || !json_is_object(root))
                return err_set(err, ERR_INVALID, -EINVAL, "index is not a JSON object%s%s",
                               root ? "" : ": ", root ? "" : je.text);
        json_t *format = json_object_get(root, "format"), *owner = json_object_get(root, "owner"),
               *name = json_object_get(root, "name"), *image = json_object_get(root, "image"),
               *saved = json_object_get(root, "saved_ms"), *bytes = json_object_get(root, "bytes"),
               *grant = json_object_get(root, "grant"), *network = json_object_get(root, "network");
        struct err ne = {0};
        const char *bad = NULL;
        if (!json_is_integer(format) || json_integer_value(format) != STORE_FORMAT)
                bad = "format";
        else if (!json_is_string(owner) ||
                 !owner_ok(json_string_value(owner), json_string_length(owner)))
                bad = "owner";
        else if (!json_is_string(name) ||
                 strlen(json_string_value(name)) != json_string_length(name) ||
                 session_name_check(json_string_value(name), &ne) < 0)
                bad = "name";
        else if (!json_is_string(image) ||
                 !image_ok(json_string_value(image), json_string_length(image)))
                bad = "image";
        else if (!json_is_integer(saved) || json_integer_value(saved) < 0 ||
                 json_integer_value(saved) > (1LL << 50))
                bad = "saved_ms";
        else if (!json_is_integer(bytes) || json_integer_value(bytes) < 0 ||
                 (unsigned long long)json_integer_value(bytes) > STORE_BYTES_LIMIT)
                bad = "bytes";
        else if (!string_list(grant, 256, 256))
                bad = "grant";
        else if (!string_list(network, 256, 256))
                bad = "network";
        if (bad)
                return err_set(err, ERR_INVALID, -EINVAL, "index field \"%s\" is missing or wrong",
                               bad);
        snprintf(e->owner, sizeof(e->owner), "%s", json_string_value(owner));
        snprintf(e->name, sizeof(e->name), "%s", json_string_value(name));
        snprintf(e->image, sizeof(e->image), "%s", json_string_value(image));
        e->saved_ms = json_integer_value(saved);
        e->bytes = (unsigned long long)json_integer_value(bytes);
        e->grant = json_is_array(grant) ? json_incref(grant) : NULL;
        e->network = json_is_array(network) ? json_incref(network) : NULL;
        return 0;
}

char *store_index_format(const struct store_entry *e)
{
        json_auto_t *root = json_pack(
            "{s:i, s:s, s:s, s:s, s:I, s:I, s:O?, s:O?}", "format", STORE_FORMAT, "owner", e->owner,
            "name", e->name, "image", e->image, "saved_ms", (json_int_t)e->saved_ms, "bytes",
            (json_int_t)e->bytes, "grant", e->grant, "network", e->network);
        return root ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
}

int store_dir(const char *root, const char *owner, const char *name, char *out, size_t size)
{
        struct err e = {0};
        /* "." and ".." pass the session name check: as a directory they
         * would be another. */
        if (!owner_ok(owner, strlen(owner)) || session_name_check(name, &e) < 0 ||
            strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return -EINVAL;
        /* Hex: an owner may hold '/', '.' or anything printable; a
         * directory name of [0-9a-f] or "_" holds none of them. */
        char hex[2 * SESSION_OWNER_MAX + 1] = "_";
        for (size_t i = 0; owner[i]; i++)
                snprintf(hex + 2 * i, 3, "%02x", (unsigned char)owner[i]);
        int n = snprintf(out, size, "%s/%s/%s", root, hex, name);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

size_t store_evict_pick(const struct store_entry *v, size_t n, unsigned long long max_bytes,
                        long long keep_ms, long long now_ms, size_t keep, size_t *out)
{
        /* Oldest first: a selection by saved_ms each round (n is small: the
         * sessions of one store), ties by position. */
        unsigned long long total = 0;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                total += v[i].bytes;
        for (;;) {
                size_t oldest = n;
                for (size_t i = 0; i < n; i++) {
                        bool taken = false;
                        for (size_t j = 0; j < k && !taken; j++)
                                taken = out[j] == i;
                        if (taken || i == keep)
                                continue;
                        if (oldest == n || v[i].saved_ms < v[oldest].saved_ms)
                                oldest = i;
                }
                if (oldest == n)
                        break;
                bool too_old = keep_ms > 0 && now_ms - v[oldest].saved_ms > keep_ms;
                bool too_big = max_bytes > 0 && total > max_bytes;
                if (!too_old && !too_big)
                        break;
                out[k++] = oldest;
                total -= v[oldest].bytes;
        }
        return k;
}
