/* Paths under /workspace, the runtime's answers to file requests, MIME
 * types: the pure parts of the files module (the requests themselves are
 * exercised end to end, and by the runtime's tests). */
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

static json_t *j(const char *text)
{
        json_t *v = json_loads(text, 0, NULL);
        if (!v)
                abort(); /* the test's own JSON */
        return v;
}

/* The runtime's errors for file requests become the words users saw when
 * the engine did the work. */
static void test_errors(void)
{
        static const struct {
                const char *error;
                bool write;
                int want;
                const char *msg;
        } cases[] = {
            {"{\"message\":\"x\",\"data\":{\"kind\":\"ENOENT\",\"at\":\"/workspace/a\"}}", false,
             -ENOENT, "no such file or directory: /workspace/a/b"},
            {"{\"message\":\"x\",\"data\":{\"kind\":\"EPERM\",\"at\":\"/workspace/pw\",\"target\":"
             "\"/etc/passwd\"}}",
             false, -EPERM,
             "/workspace/a/b: /workspace/pw is a symbolic link to /etc/passwd, outside /workspace; "
             "corral's file tools stay inside /workspace"},
            {"{\"message\":\"x\",\"data\":{\"kind\":\"ENOTDIR\",\"at\":\"/workspace/a\"}}", true,
             -ENOTDIR, "/workspace/a/b: /workspace/a is not a directory"},
            {"{\"message\":\"x\",\"data\":{\"kind\":\"EISDIR\"}}", false, -EISDIR,
             "/workspace/a/b is a directory (list_files lists it)"},
            {"{\"message\":\"x\",\"data\":{\"kind\":\"EISDIR\"}}", true, -EISDIR,
             "/workspace/a/b is a directory"},
            {"{\"message\":\"not a regular file\",\"data\":{\"kind\":\"EINVAL\"}}", false, -EINVAL,
             "/workspace/a/b is not a regular file"},
            {"{\"message\":\"x\",\"data\":{\"kind\":\"EFBIG\",\"size\":99}}", false, -EFBIG,
             "/workspace/a/b is 99 bytes, over the 10-byte limit"},
            {"{\"message\":\"x\",\"data\":{\"kind\":\"ENOSPC\"}}", true, -ENOSPC,
             "writing /workspace/a/b: no space left in /workspace (its size is the "
             "workspace_size setting)"},
            {"{\"message\":\"x\",\"data\":{\"kind\":\"ELOOP\"}}", false, -ELOOP,
             "/workspace/a/b: too many symbolic links"},
            {"{\"message\":\"Permission denied\",\"data\":{\"kind\":\"EIO\"}}", true, -EIO,
             "writing /workspace/a/b: Permission denied"},
            /* From a sandbox: no data, or words meant to mislead, stay its own. */
            {"{\"message\":\"\\u001b[2Jdone\"}", false, -EIO, "reading /workspace/a/b: ?[2Jdone"},
            {"{\"data\":{\"kind\":7}}", false, -EIO, "reading /workspace/a/b: no reason given"},
            {"{\"message\":\"x\",\"data\":{\"kind\":\"EPERM\",\"at\":\"/workspace/l\",\"target\":"
             "\"/etc\\n\\u0007\"}}",
             false, -EPERM, "symbolic link to /etc??, outside"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                json_t *e = j(cases[i].error);
                char msg[1200];
                int r =
                    files_error_message(e, "/workspace/a/b", cases[i].write, 10, msg, sizeof(msg));
                is_int(r, cases[i].want, "error %zu: its errno", i);
                like(msg, cases[i].msg, "error %zu: its words", i);
                json_decref(e);
        }
}

/* The chunks of a read: base64 taken within max, anything else malformed. */
static void test_chunks(void)
{
        struct buf got;
        buf_init(&got, 8);
        long long size = -1;
        const char *path = NULL;
        json_t *r = j("{\"path\":\"/workspace/x\",\"size\":6,\"data\":\"aGVsbG8K\"}");
        is_int(files_read_chunk(r, 8, &got, &size, &path), 6, "a chunk of 6 bytes");
        is_mem(got.data, got.len, "hello\n", 6, "...its bytes");
        ok(size == 6 && path && strcmp(path, "/workspace/x") == 0, "...the size and real path");
        json_decref(r);
        r = j("{\"path\":\"/workspace/x\",\"size\":9,\"data\":\"aGVsbG8K\"}");
        is_int(files_read_chunk(r, 8, &got, &size, &path), -EFBIG, "past max in all: -EFBIG");
        json_decref(r);
        got.len = 0;
        static const char *const bad[] = {
            "{\"path\":\"/workspace/x\",\"size\":1,\"data\":\"@@@@\"}",
            "{\"path\":\"/etc/passwd\",\"size\":1,\"data\":\"\"}",
            "{\"path\":\"/workspace/x\",\"size\":-1,\"data\":\"\"}",
            "{\"path\":\"/workspace/x\",\"data\":\"\"}",
            "{\"path\":\"/workspace/x\",\"size\":1,\"data\":5}",
            "{\"size\":1,\"data\":\"\"}",
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                r = j(bad[i]);
                is_int(files_read_chunk(r, 8, &got, &size, &path), -EBADMSG, "malformed %zu", i);
                json_decref(r);
        }
        is_int((int)got.len, 0, "...none of which left bytes behind");
        buf_free(&got);
}

/* files_frame_parse gives what jrpc_parse gives, for frames of the read
 * answer's layout and for look-alikes that are not. */
static bool same(const json_t *a, const json_t *b)
{
        return (!a && !b) || json_equal(a, b);
}

static void same_parse(const char *line, const char *name)
{
        struct jrpc_msg a = {0}, b = {0};
        json_t *ida = NULL, *idb = NULL;
        struct err ea = {0}, eb = {0};
        int ra = files_frame_parse(line, strlen(line), &a, &ida, &ea);
        int rb = jrpc_parse(line, strlen(line), &b, &idb, &eb);
        is_int(ra, rb, "%s: the same outcome", name);
        if (ra == 0 && rb == 0) {
                ok(json_equal(a.root, b.root), "%s: the same tree", name);
                ok(a.kind == b.kind && same(a.result, b.result) && same(a.params, b.params) &&
                       same(a.error, b.error),
                   "%s: the same message", name);
                jrpc_msg_done(&a);
                jrpc_msg_done(&b);
        } else {
                is_str(ea.msg, eb.msg, "%s: the same error", name);
        }
        ok(same(ida, idb), "%s: the same id", name);
        json_decref(ida);
        json_decref(idb);
}

static void test_frames(void)
{
        char b64[1025], line[2048];
        for (int i = 0; i < 1024; i++)
                b64[i] =
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i * 7 % 64];
        b64[1024] = '\0';
        b64[1022] = b64[1023] = '=';

        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":{\"path\":\"/workspace/a\","
                 "\"size\":766,\"data\":\"%s\"}}",
                 b64);
        struct jrpc_msg m = {0};
        json_t *id = NULL;
        struct err e = {0};
        is_int(files_frame_parse(line, strlen(line), &m, &id, &e), 0, "a read answer parses");
        const json_t *data = json_object_get(m.result, "data");
        ok(m.kind == JRPC_RESULT && json_string_length(data) == 1024 &&
               memcmp(json_string_value(data), b64, 1024) == 0,
           "its data is the base64 as sent");
        is_str(json_string_value(id), "ask-1", "its id");
        struct buf got;
        buf_init(&got, 1 << 20);
        long long size = 0;
        const char *path = NULL;
        is_int(files_read_chunk(m.result, 1 << 20, &got, &size, &path), 766,
               "its chunk decodes to 766 bytes");
        buf_free(&got);
        jrpc_msg_done(&m);
        json_decref(id);
        same_parse(line, "a read answer");

        static const char *const forms[] = {
            /* another object with an empty "data" before the last one */
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":{\"data\":\"\"},\"params\":{"
            "\"data\":\"%s\"}}",
            /* a duplicate key: refused as a whole frame is */
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":{\"data\":\"\",\"data\":\"%s\"}}",
            /* the look-alike inside a string */
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":{\"p\":\"a,\"data\":\"%s\"}}",
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":{\"p\":\"a\\\",\\\"data\\\":\\\"%s\"}"
            "}",
            /* not an object's member; a broken envelope */
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":[1,\"data\":\"%s\"}}",
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\" \"result\":{\"data\":\"%s\"}}",
            /* a character outside the alphabet; a length not a multiple of four */
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":{\"data\":\"%s-AAA\"}}",
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":{\"data\":\"%sA\"}}",
            /* the span where the message has no result: a request's params */
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"method\":\"m\",\"params\":{\"data\":\"%s\"}}",
            /* an error: its data is an object's last member too */
            "{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"error\":{\"code\":1,\"data\":\"%s\"}}",
            "{\"jsonrpc\":\"1.0\",\"id\":\"ask-1\",\"result\":{\"data\":\"%s\"}}",
            "[{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"result\":{\"data\":\"%s\"}}]",
        };
        for (size_t i = 0; i < ARRAY_SIZE(forms); i++) {
                char name[40];
                const char *at = strstr(forms[i], "%s");
                snprintf(line, sizeof(line), "%.*s%s%s", (int)(at - forms[i]), forms[i], b64,
                         at + 2);
                snprintf(name, sizeof(name), "look-alike %zu", i);
                same_parse(line, name);
        }
}

static void test_canonical(void)
{
        ok(files_b64_canonical("", 0, "", 0), "nothing is nothing");
        ok(files_b64_canonical("A", 1, "QQ==", 4), "one byte, padded");
        ok(!files_b64_canonical("A", 1, "QR==", 4), "stray bits after the byte");
        ok(!files_b64_canonical("A", 1, "QQ", 2), "no padding");
        ok(files_b64_canonical("AB", 2, "QUI=", 4), "two bytes");
        ok(!files_b64_canonical("AB", 2, "QUJ=", 4), "two bytes, stray bits");
        ok(files_b64_canonical("ABCD", 4, "QUJDRA==", 8), "a group and a byte");
        ok(!files_b64_canonical("ABCD", 4, "QUJD\nRA==", 9), "a newline inside");
        ok(!files_b64_canonical("ABC", 3, NULL, 0), "no text");
        /* The decoder takes base64url's characters too: "hello>" and 0x9e
         * 0xba '\\' decode from a text with '-' for '+'. */
        ok(!files_b64_canonical("hello>\x9e\xba\\", 9, "aGVsbG8-nrpc", 12),
           "base64url's '-' is not the canonical text");
        ok(files_b64_canonical("hello>\x9e\xba\\", 9, "aGVsbG8+nrpc", 12), "its '+' is");
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
        test_errors();
        test_frames();
        test_canonical();
        test_chunks();
        test_mime();
        return done_testing();
}
