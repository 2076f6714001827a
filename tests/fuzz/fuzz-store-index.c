/* store_index_parse, the reader of a hibernated session's index (a file
 * another service sharing the store may have written), on arbitrary
 * bytes: it never reads past them nor leaks; what it takes it formats
 * again into an index that parses to the same thing; an owner and name it
 * took always give a directory of the store (never ".", "..", or one with
 * a "//" or "/../" in its path). */
#include "sandbox/store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct store_entry e, f;
        struct err err = {0};
        if (store_index_parse((const char *)data, size, &e, &err) < 0) {
                if (e.grant || e.network || !err.msg[0])
                        abort();
                return 0;
        }
        char *text = store_index_format(&e);
        if (!text)
                abort();
        if (store_index_parse(text, strlen(text), &f, &err) < 0)
                abort();
        char *again = store_index_format(&f);
        if (!again || strcmp(text, again) != 0 || strcmp(e.owner, f.owner) != 0 ||
            strcmp(e.name, f.name) != 0 || e.bytes != f.bytes || e.saved_ms != f.saved_ms)
                abort();
        char dir[512];
        if (store_dir("/store", e.owner, e.name, dir, sizeof(dir)) < 0 || strstr(dir, "/../") ||
            strstr(dir, "//") || strcmp(strrchr(dir, '/'), "/..") == 0 ||
            strcmp(strrchr(dir, '/'), "/.") == 0)
                abort();
        free(text);
        free(again);
        store_entry_clear(&e);
        store_entry_clear(&f);
        return 0;
}
