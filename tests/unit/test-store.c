/* The hibernated sessions' store (sandbox/store.h): what an index read back
 * takes and refuses, its round trip, the directory a session gets, and
 * which sessions a full or aged store evicts. */
#include "sandbox/store.h"

#include "tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char good[] = "{\"format\":1,\"owner\":\"c-17\",\"name\":\"eda\",\"image\":"
                           "\"corral-data:latest\",\"saved_ms\":1764000000000,\"bytes\":18000000,"
                           "\"grant\":[\"github\"],\"network\":null}";

static int parse(const char *text, struct store_entry *e, struct err *err)
{
        return store_index_parse(text, strlen(text), e, err);
}

static void index_rows(void)
{
        struct store_entry e;
        struct err err = {0};
        is_int(parse(good, &e, &err), 0, "a good index parses (%s)", err.msg);
        is_str(e.owner, "c-17", "its owner");
        is_str(e.name, "eda", "its name");
        is_str(e.image, "corral-data:latest", "its image");
        ok(e.saved_ms == 1764000000000LL && e.bytes == 18000000ULL, "its time and size");
        ok(json_array_size(e.grant) == 1 && e.network == NULL, "its grant; no network");
        char *again = store_index_format(&e);
        is_str(again,
               "{\"bytes\":18000000,\"format\":1,\"grant\":[\"github\"],\"image\":"
               "\"corral-data:latest\",\"name\":\"eda\",\"network\":null,\"owner\":\"c-1"
               "7\",\"saved_ms\":1764000000000}",
               "formatted again, keys sorted");
        struct store_entry f;
        is_int(parse(again, &f, &err), 0, "and that parses");
        char *third = store_index_format(&f);
        ok(again && third && strcmp(again, third) == 0, "to the same index");
        free(again);
        free(third);
        store_entry_clear(&f);
        store_entry_clear(&e);

        static const struct {
                const char *text, *field;
        } bad[] = {
            {"[]", "not a JSON object"},
            {"{\"format\":1", "not a JSON object"},
            {"{\"format\":2,\"owner\":\"\",\"name\":\"a\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":"
             "0}",
             "\"format\""},
            {"{\"format\":1,\"owner\":\"a "
             "b\",\"name\":\"a\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":0}",
             "\"owner\""},
            {"{\"format\":1,\"owner\":\"0123456789012345678901234567890123456789\",\"name\":\"a\","
             "\"image\":\"i\",\"saved_ms\":0,\"bytes\":0}",
             "\"owner\""},
            {"{\"format\":1,\"owner\":\"\",\"name\":\"../"
             "x\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":0}",
             "\"name\""},
            {"{\"format\":1,\"owner\":\"\",\"name\":\"a\\u0000b\",\"image\":\"i\",\"saved_ms\":0,"
             "\"bytes\":0}",
             "not a JSON object"},
            {"{\"format\":1,\"owner\":\"\",\"name\":\"a\",\"image\":\"\",\"saved_ms\":0,\"bytes\":"
             "0}",
             "\"image\""},
            {"{\"format\":1,\"owner\":\"\",\"name\":\"a\",\"image\":\"i\",\"saved_ms\":-1,"
             "\"bytes\":0}",
             "\"saved_ms\""},
            {"{\"format\":1,\"owner\":\"\",\"name\":\"a\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":"
             "2251799813685249}",
             "\"bytes\""},
            {"{\"format\":1,\"owner\":\"\",\"name\":\"a\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":"
             "0,"
             "\"grant\":[\"x\",\"x\"]}",
             "\"grant\""},
            {"{\"format\":1,\"owner\":\"\",\"name\":\"a\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":"
             "0,"
             "\"network\":\"x\"}",
             "\"network\""},
            {"{\"format\":1,\"format\":1,\"owner\":\"\",\"name\":\"a\",\"image\":\"i\",\"saved_"
             "ms\":0,"
             "\"bytes\":0}",
             "not a JSON object"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                struct err be = {0};
                int r = parse(bad[i].text, &e, &be);
                ok(r == -EINVAL && strstr(be.msg, bad[i].field) && !e.grant && !e.network,
                   "refused: %s (%s)", bad[i].text, be.msg);
        }
        char big[STORE_INDEX_MAX + 2];
        memset(big, ' ', sizeof(big));
        struct err be = {0};
        ok(store_index_parse(big, sizeof(big), &e, &be) == -EINVAL && strstr(be.msg, "at most"),
           "an index over %d bytes is refused unread (%s)", STORE_INDEX_MAX, be.msg);
}

static void dir_rows(void)
{
        char p[128];
        is_int(store_dir("/s", "", "eda", p, sizeof(p)), 0, "the stdio client's session");
        is_str(p, "/s/_/eda", "under _");
        is_int(store_dir("/s", "a/.b", "x.1", p, sizeof(p)), 0, "an owner with / and .");
        is_str(p, "/s/612f2e62/x.1", "hex: no / or . of the owner's in the path");
        is_int(store_dir("/s", "", "..", p, sizeof(p)), -EINVAL,
               "\"..\", a valid session name, is refused as a directory");
        is_int(store_dir("/s", "", ".", p, sizeof(p)), -EINVAL, "so is \".\"");
        is_int(store_dir("/s", "", "..a", p, sizeof(p)), 0, "\"..a\" is a name like any other");
        is_int(store_dir("/s", "", "a/b", p, sizeof(p)), -EINVAL, "a name with / is refused");
        is_int(store_dir("/s", "", "eda", p, 6), -ENAMETOOLONG, "a path that does not fit");
}

static void evict_rows(void)
{
        struct store_entry v[5] = {0};
        long long t[] = {500, 100, 400, 200, 300};
        for (size_t i = 0; i < 5; i++) {
                v[i].saved_ms = t[i];
                v[i].bytes = 10;
        }
        size_t out[5], k;
        k = store_evict_pick(v, 5, 0, 0, 1000, 5, out);
        is_int((long)k, 0, "no bound: nothing goes");
        k = store_evict_pick(v, 5, 30, 0, 1000, 5, out);
        ok(k == 2 && out[0] == 1 && out[1] == 3, "a full store: the two oldest go, oldest first");
        k = store_evict_pick(v, 5, 30, 0, 1000, 1, out);
        ok(k == 2 && out[0] == 3 && out[1] == 4,
           "never the one being resumed, even when it is the oldest");
        k = store_evict_pick(v, 5, 5, 0, 1000, 2, out);
        ok(k == 4 && out[0] == 1 && out[1] == 3 && out[2] == 4 && out[3] == 0,
           "the one being resumed stays when it alone is over the bound");
        k = store_evict_pick(v, 5, 0, 750, 1000, 5, out);
        ok(k == 2 && out[0] == 1 && out[1] == 3, "older than keep_ms: gone");
        k = store_evict_pick(v, 5, 0, 750, 1000, 3, out);
        ok(k == 1 && out[0] == 1, "an old one being resumed stays");
        k = store_evict_pick(v, 0, 1, 1, 1000, 0, out);
        is_int((long)k, 0, "an empty store");
}

/* A session's directory with one state file of `bytes` bytes, and its
 * index saved at `saved_ms`. */
static int put(const char *root, const char *owner, const char *name, size_t bytes,
               long long saved_ms)
{
        char dir[512], path[600];
        struct store_entry e = {0};
        struct err err = {0};
        if (store_dir(root, owner, name, dir, sizeof(dir)) < 0 || mkdir_parents(dir) < 0 ||
            (mkdir(dir, 0700) < 0 && errno != EEXIST))
                return -1;
        snprintf(path, sizeof(path), "%s/state", dir);
        FILE *f = fopen(path, "w");
        if (!f)
                return -1;
        for (size_t i = 0; i < bytes; i++)
                fputc('x', f);
        fclose(f);
        snprintf(e.owner, sizeof(e.owner), "%s", owner);
        snprintf(e.name, sizeof(e.name), "%s", name);
        snprintf(e.image, sizeof(e.image), "corral-data:latest");
        e.saved_ms = saved_ms;
        int r = store_write(root, &e, &err);
        if (r < 0)
                diag("store_write: %s", err.msg);
        store_entry_clear(&e);
        return r;
}

static size_t count_all(const char *root, const char *owner)
{
        struct store_entry *v;
        size_t n;
        if (store_list(root, owner, &v, &n) < 0)
                return (size_t)-1;
        for (size_t i = 0; i < n; i++)
                store_entry_clear(&v[i]);
        free(v);
        return n;
}

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        if (f) {
                fputs(text, f);
                fclose(f);
        }
}

#define KB4 4096 /* a block: sizes are counted in the blocks files take */

static void disk_rows(const char *root, const char *victim)
{
        char path[700], dir[512], other[800];
        long long now = store_wall_ms();
        ok(put(root, "", "a", KB4, now - 5000) == 0 &&
               put(root, "c-1", "b", 2 * KB4, now - 4000) == 0 &&
               put(root, "c-1", "c", 3 * KB4, now - 3000) == 0,
           "three sessions of two clients written");
        struct store_entry e, gone;
        struct err err = {0};
        is_int(store_read(root, "c-1", "c", &e, &err), 0, "one reads back (%s)", err.msg);
        ok(e.bytes == 3 * KB4 && e.saved_ms == now - 3000, "with its files' size and its time");
        store_entry_clear(&e);
        is_int((long)count_all(root, "c-1"), 2, "a client lists its own two");
        is_int((long)count_all(root, NULL), 3, "the whole store: three");

        /* A link in place of an index, to a good index of this very session
         * kept elsewhere: not followed. */
        store_dir(root, "c-1", "b", dir, sizeof(dir));
        snprintf(path, sizeof(path), "%s/index.json", dir);
        snprintf(other, sizeof(other), "%s/b-index.json", victim);
        FILE *src = fopen(path, "r");
        char buf[1024];
        size_t k = src ? fread(buf, 1, sizeof(buf) - 1, src) : 0;
        if (src)
                fclose(src);
        buf[k] = '\0';
        write_text(other, buf);
        unlink(path);
        ok(symlink(other, path) == 0 && store_read(root, "c-1", "b", &e, &err) < 0,
           "an index that is a link is not followed (%s)", err.msg);
        /* An index of another session copied in: refused, and skipped. */
        unlink(path);
        store_dir(root, "", "a", other, sizeof(other));
        strcat(other, "/index.json");
        src = fopen(other, "r");
        k = src ? fread(buf, 1, sizeof(buf) - 1, src) : 0;
        if (src)
                fclose(src);
        buf[k] = '\0';
        write_text(path, buf);
        ok(store_read(root, "c-1", "b", &e, &err) < 0 && strstr(err.msg, "another session"),
           "an index of another session is refused (%s)", err.msg);
        is_int((long)count_all(root, NULL), 2, "and skipped by the listing");
        ok(put(root, "c-1", "b", 2 * KB4, now - 4000) == 0, "written again");

        /* An index that claims far more than its directory holds does not
         * make the others go: sizes are read from the directory. */
        store_dir(root, "c-1", "c", dir, sizeof(dir));
        snprintf(path, sizeof(path), "%s/index.json", dir);
        char claim[512];
        snprintf(claim, sizeof(claim),
                 "{\"bytes\":1125899906842624,\"format\":1,\"image\":\"i\",\"name\":\"c\","
                 "\"owner\":\"c-1\",\"saved_ms\":%lld}",
                 now - 3000);
        write_text(path, claim);
        is_int(store_enforce(root, 7 * KB4, 0, NULL, NULL), 0,
               "an index claiming 1 PiB: nothing evicted (6 blocks held, 7 allowed)");

        /* Bounds: 6 blocks in all; at most 5 keeps the newest two, but the
         * oldest is being resumed, so the next oldest goes. */
        is_int(store_enforce(root, 5 * KB4, 0, "", "a"), 1, "a full store evicts one");
        ok(store_read(root, "", "a", &e, &err) == 0 &&
               store_read(root, "c-1", "b", &gone, &err) < 0,
           "not the one being resumed (the oldest), the next oldest");
        store_entry_clear(&e);
        is_int(store_enforce(root, 0, 3500, NULL, NULL), 1, "older than keep_ms: one more goes");
        ok(store_read(root, "c-1", "c", &e, &err) == 0, "the newest stays");
        store_entry_clear(&e);
        store_dir(root, "c-1", "c", dir, sizeof(dir));
        ok(store_remove(root, "c-1", "c", &err) == 0 && store_remove(root, "c-1", "c", &err) == 0 &&
               access(dir, F_OK) < 0,
           "removed, twice without an error, and gone");

        /* A directory without an index: a save in progress stays, one left
         * an hour ago is reaped. */
        store_dir(root, "c-1", "young", dir, sizeof(dir));
        mkdir(dir, 0700);
        store_dir(root, "c-1", "old", path, sizeof(path));
        mkdir(path, 0700);
        snprintf(other, sizeof(other), "%s/state", path);
        write_text(other, "half");
        struct timespec old[2] = {{.tv_sec = (now / 1000) - 7200}, {.tv_sec = (now / 1000) - 7200}};
        utimensat(AT_FDCWD, path, old, 0);
        store_enforce(root, 0, 0, NULL, NULL);
        ok(access(path, F_OK) < 0 && access(dir, F_OK) == 0,
           "a directory without an index is reaped after an hour, not before");
        rmdir(dir);

        /* Links planted in place of directories lead nowhere. */
        snprintf(path, sizeof(path), "%s/proj", victim);
        mkdir(path, 0700);
        snprintf(other, sizeof(other), "%s/proj/precious", victim);
        write_text(other, "keep me");
        snprintf(path, sizeof(path), "%s/6364", root); /* the owner "cd" */
        ok(symlink(victim, path) == 0 && store_remove(root, "cd", "proj", &err) < 0 &&
               access(other, F_OK) == 0,
           "a client's directory that is a link: nothing removed through it (%s)", err.msg);
        store_dir(root, "", "b", dir, sizeof(dir));
        snprintf(other, sizeof(other), "%s/index.json", victim);
        ok(symlink(victim, dir) == 0 && put(root, "", "b", 1, now) < 0 && access(other, F_OK) < 0,
           "a session's directory that is a link: nothing written through it");
        /* Not directories of the store's, at its root: skipped. */
        snprintf(path, sizeof(path), "%s/6162", root);
        write_text(path, "not a directory");
        snprintf(path, sizeof(path), "%s/zz", root);
        write_text(path, "not a client's");
        ok(put(root, "c-2", "d", 1, now) == 0 && count_all(root, NULL) == 1 &&
               store_enforce(root, 1, 0, NULL, NULL) == 1 && count_all(root, NULL) == 0,
           "files and links among the clients' directories do not stop the listing or the bounds");
}

/* The tar corral writes itself (store.c) read back by libarchive: names
 * that ustar holds and names that need a pax record (over 100 bytes, not
 * ASCII), empty files and a file of exactly one block. */
static void tar_rows(const char *root)
{
        char long_name[400], at100[101], at101[102];
        memset(at100, 'a', 100);
        at100[100] = '\0';
        memset(at101, 'b', 101);
        at101[101] = '\0';
        snprintf(long_name, sizeof(long_name), "deep/%.120s/%.120s/end.txt", at101, at101);
        char block[512];
        memset(block, 'x', sizeof(block));
        const struct {
                const char *rel, *data;
                size_t len;
        } in[] = {
            {"short.txt", "hello", 5},
            {at100, "at the ustar limit", 18},
            {at101, "one past it", 11},
            {long_name, "in a pax record", 15},
            {"donn\xc3\xa9"
             "es/\xc3\xa9t\xc3\xa9.csv",
             "a,b\n1,2\n", 8},
            {"empty", "", 0},
            {"block.bin", block, sizeof(block)},
        };
        struct store_pack *p;
        struct err err = {0};
        bool added = store_pack_begin(root, "n:tar", "names", &p, &err) == 0;
        for (size_t i = 0; added && i < ARRAY_SIZE(in); i++)
                added = store_pack_add(p, in[i].rel, 0644, in[i].data, in[i].len, &err) == 0;
        ok(added && store_pack_end(p, true, &err) == 0, "%zu files packed (%s)", ARRAY_SIZE(in),
           err.msg);
        struct sandbox_file *files = NULL;
        size_t n = 0;
        is_int(store_unpack(root, "n:tar", "names", 1 << 20, &files, &n, &err), 0,
               "and read back by libarchive (%s)", err.msg);
        is_int((long long)n, (long long)ARRAY_SIZE(in), "all of them");
        for (size_t i = 0; i < n && i < ARRAY_SIZE(in); i++) {
                char want[512];
                snprintf(want, sizeof(want), "/workspace/%s", in[i].rel);
                ok(strcmp(files[i].path, want) == 0 && files[i].len == in[i].len &&
                       memcmp(files[i].data, in[i].data, in[i].len) == 0,
                   "file %zu (%zu bytes of name): its name and bytes", i, strlen(in[i].rel));
        }
        store_files_free(files, n);
        char tar[600];
        store_dir(root, "n:tar", "names", tar, sizeof(tar) - 16);
        strcat(tar, "/workspace.tar");
        struct stat st = {0};
        int k = stat(tar, &st);
        /* Two saves of one session at once (two corrals, or two in
         * containers, which share their pid): each its own file, and the
         * last to finish wins whole. */
        struct store_pack *a, *b;
        bool both = store_pack_begin(root, "n:tar", "names", &a, &err) == 0 &&
                    store_pack_begin(root, "n:tar", "names", &b, &err) == 0;
        ok(both && store_pack_add(a, "who", 0644, "a", 1, &err) == 0 &&
               store_pack_add(b, "who", 0644, "b", 1, &err) == 0 &&
               store_pack_end(a, true, &err) == 0 && store_pack_end(b, true, &err) == 0,
           "two saves at once do not share a temporary file (%s)", err.msg);
        files = NULL;
        n = 0;
        ok(store_unpack(root, "n:tar", "names", 1 << 20, &files, &n, &err) == 0 && n == 1 &&
               files[0].len == 1 && files[0].data[0] == 'b',
           "the last one is what is stored, whole");
        store_files_free(files, n);
        /* A temporary tar a crash left an hour ago goes with the next save;
         * one of now (another corral's save under way) stays. */
        char dir[600], stale[700], fresh[700];
        store_dir(root, "n:tar", "names", dir, sizeof(dir));
        snprintf(stale, sizeof(stale), "%s/.workspace.tar.2.deadbeef.new", dir);
        snprintf(fresh, sizeof(fresh), "%s/.workspace.tar.2.cafef00d.new", dir);
        write_text(stale, "cut short");
        write_text(fresh, "under way");
        struct timespec then[2] = {{.tv_sec = time(NULL) - 7200}, {.tv_sec = time(NULL) - 7200}};
        utimensat(AT_FDCWD, stale, then, 0);
        ok(store_pack_begin(root, "n:tar", "names", &a, &err) == 0, "another save begins");
        is_int(store_pack_add(a, "huge", 0644, "x", 077777777777ULL + 1, &err), -EFBIG,
               "a file past ustar's size field is refused, not cut (%s)", err.msg);
        store_pack_end(a, false, NULL);
        ok(access(stale, F_OK) < 0 && access(fresh, F_OK) == 0,
           "and removes the stale temporary tar, not the fresh one");
        unlink(fresh);
        ok(k == 0 && st.st_size % 512 == 0 && st.st_size >= 1024,
           "the tar is whole blocks, with its end (%lld bytes)", (long long)st.st_size);
}

/* session_fork's copy: files and index under the new name, never over a
 * session there, never through a link. */
static void copy_rows(const char *root, const char *victim)
{
        struct store_pack *p;
        struct store_entry e = {0}, got;
        struct err err = {0};
        ok(store_pack_begin(root, "n:al", "src", &p, &err) == 0 &&
               store_pack_add(p, "data.txt", 0640, "loaded once", 11, &err) == 0 &&
               store_pack_end(p, true, &err) == 0,
           "a session's files packed (%s)", err.msg);
        snprintf(e.owner, sizeof(e.owner), "n:al");
        snprintf(e.name, sizeof(e.name), "src");
        snprintf(e.image, sizeof(e.image), "corral-data:latest");
        e.saved_ms = store_wall_ms() - 60000;
        e.lost = json_pack("[s]", "sock");
        ok(store_write(root, &e, &err) == 0, "and its index");
        is_int(store_copy(root, "n:al", "src", "dst", &got, &err), 0, "copied (%s)", err.msg);
        ok(strcmp(got.name, "dst") == 0 && strcmp(got.image, e.image) == 0 &&
               got.saved_ms > e.saved_ms && json_equal(got.lost, e.lost) && got.bytes > 0,
           "the copy's index: its own name, the image and what was lost, saved now, its size");
        store_entry_clear(&got);
        ok(store_read(root, "n:al", "dst", &got, &err) == 0 && strcmp(got.name, "dst") == 0,
           "and it reads back under the new name");
        store_entry_clear(&got);
        struct sandbox_file *files = NULL;
        size_t n = 0;
        ok(store_unpack(root, "n:al", "dst", 1 << 20, &files, &n, &err) == 0 && n == 1 &&
               files[0].len == 11 && memcmp(files[0].data, "loaded once", 11) == 0,
           "with the same files");
        store_files_free(files, n);
        is_int(store_copy(root, "n:al", "src", "dst", NULL, &err), -EEXIST,
               "not over a session in the store (%s)", err.msg);
        char half[512];
        store_dir(root, "n:al", "half", half, sizeof(half));
        mkdir(half, 0700);
        is_int(store_copy(root, "n:al", "src", "half", NULL, &err), -EEXIST,
               "nor over a directory without an index (a save under way elsewhere)");
        ok(access(half, F_OK) == 0, "which stays");
        rmdir(half);
        /* A FIFO in place of a tar would block the loop: refused. */
        char fifo[600];
        store_dir(root, "n:al", "dst", half, sizeof(half));
        snprintf(fifo, sizeof(fifo), "%s/%s", half, STORE_TAR);
        unlink(fifo);
        struct sandbox_file *fv = NULL;
        size_t fn = 0;
        ok(mkfifo(fifo, 0600) == 0 &&
               store_unpack(root, "n:al", "dst", 1 << 20, &fv, &fn, &err) < 0,
           "a FIFO as the stored files is refused at once (%s)", err.msg);
        unlink(fifo);
        ok(store_copy(root, "n:al", "none", "x", NULL, &err) < 0, "nor from one not there (%s)",
           err.msg);
        ok(store_copy(root, "n:bo", "src", "x", NULL, &err) < 0,
           "nor from another client's session of that name");
        /* A tar that is a link, to a file elsewhere: not copied through. */
        char dir[512], path[700], other[700];
        store_dir(root, "n:al", "src", dir, sizeof(dir));
        snprintf(path, sizeof(path), "%s/%s", dir, STORE_TAR);
        snprintf(other, sizeof(other), "%s/secret", victim);
        write_text(other, "not the store's");
        unlink(path);
        ok(symlink(other, path) == 0 && store_copy(root, "n:al", "src", "lnk", NULL, &err) < 0,
           "a tar that is a link is not followed (%s)", err.msg);
        struct store_entry none;
        store_dir(root, "n:al", "lnk", dir, sizeof(dir));
        ok(store_read(root, "n:al", "lnk", &none, &err) < 0 && access(dir, F_OK) < 0,
           "and nothing is left of the copy");
        unlink(path);
        is_int(store_copy(root, "n:al", "src", "bare", NULL, &err), 0,
               "a session without files copies (%s)", err.msg);
        store_entry_clear(&e);
        store_remove(root, "n:al", "src", &err);
        store_remove(root, "n:al", "dst", &err);
        store_remove(root, "n:al", "bare", &err);
        store_remove(root, "n:al", "lnk", &err);
}

static void dotted_rows(void)
{
        struct store_entry e;
        struct err err = {0};
        static const char *const texts[] = {
            "{\"format\":1,\"owner\":\"\",\"name\":\"..\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":"
            "0}",
            "{\"format\":1,\"owner\":\"\",\"name\":\".\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":"
            "0}",
            "{\"format\":1,\"owner\":\"\",\"name\":\"a\",\"image\":\"i\",\"saved_ms\":0,\"bytes\":"
            "0,"
            "\"extra\":1}",
        };
        for (size_t i = 0; i < ARRAY_SIZE(texts); i++)
                ok(store_index_parse(texts[i], strlen(texts[i]), &e, &err) == -EINVAL,
                   "refused: %s (%s)", texts[i], err.msg);
}

int main(void)
{
        index_rows();
        dir_rows();
        evict_rows();
        dotted_rows();
        char root[] = "/tmp/corral-store-XXXXXX", victim[] = "/tmp/corral-victim-XXXXXX";
        if (!mkdtemp(root) || !mkdtemp(victim)) {
                diag("no temporary directory");
                return 1;
        }
        disk_rows(root, victim);
        copy_rows(root, victim);
        tar_rows(root);
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "rm -rf %s %s", root, victim);
        if (system(cmd) != 0)
                diag("could not remove %s", root);
        return done_testing();
}
