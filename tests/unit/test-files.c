/* Paths under /workspace, tar streams both ways, MIME types: the pure parts
 * of the files module (the engine side is exercised end to end). */
#include "sandbox/files.h"

#include "tap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void test_paths(void)
{
        static const struct {
                const char *in, *want; /* want NULL: refused */
                bool root;
        } cases[] = {
            {"a.txt", "/workspace/a.txt", false},
            {"data/x.csv", "/workspace/data/x.csv", false},
            {"./data//x.csv/", "/workspace/data/x.csv", false},
            {"/workspace/out/p.png", "/workspace/out/p.png", false},
            {"/workspace//out/./p.png", "/workspace/out/p.png", false},
            {"na\xc3\xafve.txt", "/workspace/na\xc3\xafve.txt", false},
            {".hidden", "/workspace/.hidden", false},
            {"...", "/workspace/...", false},
            {"a..b", "/workspace/a..b", false},
            {"/workspace", NULL, false},
            {"/workspace", "/workspace", true},
            {".", "/workspace", true},
            {"", "/workspace", true},
            {"", NULL, false},
            {"../etc/passwd", NULL, false},
            {"a/../../etc/passwd", NULL, false},
            {"a/..", NULL, false},
            {"/etc/passwd", NULL, false},
            {"/workspaces/x", NULL, false},
            {"/workspace/../etc", NULL, false},
            {"/tmp/x", NULL, false},
            {"a\nb", NULL, false},
            {"a\tb", NULL, false},
            {"bad\xff.txt", NULL, false},
            {"\xc3", NULL, false},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                char out[FILES_PATH_MAX + 64] = "";
                struct err ebox = {0};
                char *msg = ebox.msg;
                int r = files_path(cases[i].in, cases[i].root, out, sizeof(out), &ebox);
                char shown[64];
                str_printable(cases[i].in, shown, sizeof(shown));
                if (cases[i].want) {
                        is_int(r, 0, "path \"%s\" is accepted (%s)", shown, msg);
                        is_str(out, cases[i].want, "path \"%s\" -> %s", shown, cases[i].want);
                } else {
                        is_int(r, -EINVAL, "path \"%s\" is refused", shown);
                        ok(msg[0] != '\0', "...with a message: %s", msg);
                }
        }
        char out[FILES_PATH_MAX + 64];
        struct err ebox = {0};
        char *msg = ebox.msg;
        files_path("../etc/passwd", false, out, sizeof(out), &ebox);
        like(msg, "\"..\"", "the message names the \"..\"");
        files_path("/etc/passwd", false, out, sizeof(out), &ebox);
        like(msg, "outside /workspace", "an absolute path elsewhere: outside /workspace");

        /* Bounds: a name of 255 bytes passes, 256 does not; 32 levels pass, 33 do not. */
        char name[300];
        memset(name, 'n', 255);
        name[255] = '\0';
        is_int(files_path(name, false, out, sizeof(out), &ebox), 0, "a 255-byte name");
        memset(name, 'n', 256);
        name[256] = '\0';
        is_int(files_path(name, false, out, sizeof(out), &ebox), -EINVAL,
               "a 256-byte name is refused");
        char deep[200] = "";
        for (int i = 0; i < 32; i++)
                strcat(deep, i ? "/d" : "d");
        is_int(files_path(deep, false, out, sizeof(out), &ebox), 0, "32 levels");
        strcat(deep, "/d");
        is_int(files_path(deep, false, out, sizeof(out), &ebox), -EINVAL, "33 levels are refused");
        char longp[2000];
        size_t at = 0;
        for (int i = 0; i < 5; i++) {
                if (i)
                        longp[at++] = '/';
                memset(longp + at, 'n', 250);
                at += 250;
        }
        longp[at] = '\0';
        is_int(files_path(longp, false, out, sizeof(out), &ebox), -EINVAL,
               "a path over %d bytes is refused", FILES_PATH_MAX);
}

struct seen {
        int n;
        char names[8][128];
        int types[8];
        long long sizes[8];
        struct buf data;
        int stop_at;
};

static int collect(void *userdata, const struct files_entry *e)
{
        struct seen *s = userdata;
        if (s->n < 8) {
                snprintf(s->names[s->n], sizeof(s->names[0]), "%s", e->path);
                s->types[s->n] = e->type;
                s->sizes[s->n] = e->size;
        }
        if (e->type == FILES_REG)
                buf_append(&s->data, e->data, e->len);
        return ++s->n == s->stop_at ? 7 : 0;
}

static void test_tar(void)
{
        struct buf tar;
        buf_init(&tar, 1 << 20);
        static const char content[] = "hello\n\0binary\xff";
        is_int(files_tar_build("a/b/c.txt", true, content, sizeof(content), &tar), 0,
               "a tar of a/b/c.txt with its directories builds");
        ok(tar.len % 512 == 0 && tar.len >= 5 * 512, "its size is whole 512-byte blocks (%zu)",
           tar.len);
        struct seen s = {0};
        buf_init(&s.data, 1 << 20);
        struct err e = {0};
        is_int(files_tar_each(tar.data, tar.len, 1 << 20, collect, &s, &e), 0, "it reads back");
        is_int(s.n, 3, "three entries");
        is_str(s.names[0], "a/", "first the directory a");
        is_int(s.types[0], FILES_DIR, "...a directory");
        is_str(s.names[1], "a/b/", "then a/b");
        is_str(s.names[2], "a/b/c.txt", "then the file");
        is_int(s.types[2], FILES_REG, "...a regular file");
        is_int(s.sizes[2], (long long)sizeof(content), "...of its size");
        is_mem(s.data.data, s.data.len, content, sizeof(content), "...with its bytes, NUL and all");
        buf_free(&s.data);

        /* The callback's non-zero value stops the walk and is returned. */
        struct seen stop = {.stop_at = 2};
        buf_init(&stop.data, 1 << 20);
        is_int(files_tar_each(tar.data, tar.len, 1 << 20, collect, &stop, &e), 7,
               "a callback's non-zero return stops the walk");
        is_int(stop.n, 2, "...after the second entry");
        buf_free(&stop.data);

        /* A file over the read bound is refused, not truncated. */
        struct seen big = {0};
        buf_init(&big.data, 1 << 20);
        is_int(files_tar_each(tar.data, tar.len, 4, collect, &big, &e), -EFBIG,
               "a file over max is -EFBIG");
        like(e.msg, "limit", "...with a message");
        buf_free(&big.data);

        /* A long name goes through pax. */
        char name[600];
        memset(name, 'x', 300);
        memcpy(name + 300, "/", 1);
        memset(name + 301, 'y', 200);
        name[501] = '\0';
        struct buf t2;
        buf_init(&t2, 1 << 20);
        is_int(files_tar_build(name, false, "z", 1, &t2), 0, "a 501-byte name builds");
        struct seen ln = {0};
        buf_init(&ln.data, 1 << 20);
        is_int(files_tar_each(t2.data, t2.len, 1 << 20, collect, &ln, &e), 0, "...and reads");
        is_int(ln.n, 1, "...as one entry (no directories asked for)");
        ok(strlen(ln.names[0]) == 127, "...whose name we kept the start of");
        buf_free(&ln.data);
        buf_free(&t2);

        /* Malformed input: errors, never a crash. */
        struct seen bad = {0};
        buf_init(&bad.data, 1 << 20);
        char junk[1024];
        memset(junk, 'j', sizeof(junk));
        ok(files_tar_each(junk, sizeof(junk), 1 << 20, collect, &bad, &e) < 0, "junk is an error");
        ok(files_tar_each(tar.data, 700, 1 << 20, collect, &bad, &e) < 0 || bad.n < 3,
           "a cut stream is an error or ends early");
        is_int(files_tar_each("", 0, 1 << 20, collect, &bad, &e) <= 0, 1, "an empty stream");
        buf_free(&bad.data);

        /* The bound of the output buffer holds. */
        struct buf small;
        buf_init(&small, 1000);
        is_int(files_tar_build("f", false, content, sizeof(content), &small), -ENOBUFS,
               "a tar that does not fit the buffer: -ENOBUFS");
        buf_free(&small);
        buf_free(&tar);
}

static void test_mime(void)
{
        is_str(files_mime_type("out/plot.png"), "image/png", ".png");
        is_str(files_mime_type("a.JPG"), "image/jpeg", ".JPG");
        is_str(files_mime_type("x.jpeg"), "image/jpeg", ".jpeg");
        is_str(files_mime_type("d.svg"), "image/svg+xml", ".svg");
        is_str(files_mime_type("data.csv"), "text/csv", ".csv");
        ok(files_mime_type("README") == NULL, "no extension: none");
        ok(files_mime_type("dir.d/file") == NULL, "a dot in a directory name only: none");
        ok(files_mime_type("x.unknownext") == NULL, "an unknown extension: none");
}

int main(void)
{
        test_paths();
        test_tar();
        test_mime();
        return done_testing();
}
