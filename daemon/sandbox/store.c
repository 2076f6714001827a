#include "sandbox/store.h"

#include "core/buf.h"
#include "core/log.h"
#include "sandbox/files.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

long long store_wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void store_entry_clear(struct store_entry *e)
{
        json_decref(e->grant);
        json_decref(e->network);
        json_decref(e->lost);
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
               *grant = json_object_get(root, "grant"), *network = json_object_get(root, "network"),
               *lost = json_object_get(root, "lost");
        struct err ne = {0};
        const char *bad = NULL, *key;
        json_t *val;
        json_object_foreach(root, key, val)
        {
                static const char *const known[] = {"format", "owner",    "name",
                                                    "image",  "saved_ms", "bytes",
                                                    "grant",  "network",  "lost"};
                bool found = false;
                for (size_t i = 0; i < ARRAY_SIZE(known) && !found; i++)
                        found = strcmp(key, known[i]) == 0;
                if (!found)
                        return err_set(err, ERR_INVALID, -EINVAL,
                                       "index has a field corral does not write");
        }
        if (!json_is_integer(format) || json_integer_value(format) != STORE_FORMAT)
                bad = "format";
        else if (!json_is_string(owner) ||
                 !owner_ok(json_string_value(owner), json_string_length(owner)))
                bad = "owner";
        else if (!json_is_string(name) ||
                 strlen(json_string_value(name)) != json_string_length(name) ||
                 session_name_check(json_string_value(name), &ne) < 0 ||
                 strcmp(json_string_value(name), ".") == 0 ||
                 strcmp(json_string_value(name), "..") == 0)
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
        else if (!string_list(lost, 1000, SESSION_NAME_MAX * 4))
                bad = "lost";
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
        e->lost = json_is_array(lost) ? json_incref(lost) : NULL;
        return 0;
}

char *store_index_format(const struct store_entry *e)
{
        json_auto_t *root = json_pack(
            "{s:i, s:s, s:s, s:s, s:I, s:I, s:O?, s:O?}", "format", STORE_FORMAT, "owner", e->owner,
            "name", e->name, "image", e->image, "saved_ms", (json_int_t)e->saved_ms, "bytes",
            (json_int_t)e->bytes, "grant", e->grant, "network", e->network);
        if (root && e->lost)
                json_object_set(root, "lost", e->lost);
        return root ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
}

static void owner_hex(const char *owner, char *hex)
{
        hex[0] = '_';
        hex[1] = '\0';
        for (size_t i = 0; owner[i]; i++)
                snprintf(hex + 2 * i, 3, "%02x", (unsigned char)owner[i]);
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
        char hex[2 * SESSION_OWNER_MAX + 1];
        owner_hex(owner, hex);
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
        for (size_t i = 0; i < n; i++) /* saturating: sizes come from indexes read back */
                total = total + v[i].bytes < total ? ~0ULL : total + v[i].bytes;
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
                if (total != ~0ULL)
                        total -= v[oldest].bytes;
        }
        return k;
}

/* ---- on disk
 *
 * Below the root, every step is taken from a directory descriptor with
 * O_NOFOLLOW and checked to be a directory of ours: another user of a
 * shared store, or anything that wrote into it, cannot point corral at a
 * directory elsewhere through a link. */

#define ORPHAN_MS (3600LL * 1000) /* a directory without an index, left this long, is reaped */

/* A directory `name` under dirfd (made 0700 when create), or -errno;
 * -ENOTDIR for anything but a directory of this user's. */
static int open_dir_at(int dirfd, const char *name, bool create)
{
        if (create && mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
                return -errno;
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ELOOP ? -ENOTDIR : -errno;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
                close(fd);
                return -ENOTDIR;
        }
        return fd;
}

/* The owner's directory (create: made with the root), or -errno. */
static int open_owner(const char *root, const char *owner, bool create)
{
        char hex[2 * SESSION_OWNER_MAX + 1];
        if (!owner_ok(owner, strlen(owner)))
                return -EINVAL;
        owner_hex(owner, hex);
        if (create) {
                char probe[PATH_MAX];
                int n = snprintf(probe, sizeof(probe), "%s/x", root);
                if (n < 0 || (size_t)n >= sizeof(probe))
                        return -ENAMETOOLONG;
                int r = mkdir_parents(probe);
                if (r < 0)
                        return r;
        }
        int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return -errno;
        int fd = open_dir_at(rfd, hex, create);
        close(rfd);
        return fd;
}

static bool dir_name_ok(const char *name)
{
        struct err e = {0};
        return session_name_check(name, &e) == 0 && strcmp(name, ".") != 0 &&
               strcmp(name, "..") != 0;
}

/* A session's directory, and its owner's in *ret_ofd when asked; -errno. */
static int open_session(const char *root, const char *owner, const char *name, bool create,
                        int *ret_ofd)
{
        if (!dir_name_ok(name))
                return -EINVAL;
        int ofd = open_owner(root, owner, create);
        if (ofd < 0)
                return ofd;
        int fd = open_dir_at(ofd, name, create);
        if (fd < 0 || !ret_ofd)
                close(ofd);
        else
                *ret_ofd = ofd;
        return fd;
}

int store_read(const char *root, const char *owner, const char *name, struct store_entry *e,
               struct err *err)
{
        char text[STORE_INDEX_MAX + 1], shown[80];
        memset(e, 0, sizeof(*e));
        str_printable(name, shown, sizeof(shown));
        int dfd = open_session(root, owner, name, false, NULL);
        if (dfd < 0)
                return err_set(err, dfd == -ENOENT ? ERR_REFUSED : ERR_INTERNAL, dfd,
                               "session \"%s\": no store directory (%s)", shown, strerror(-dfd));
        int fd = openat(dfd, STORE_INDEX, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        int r = fd < 0 ? -errno : 0;
        close(dfd);
        if (fd < 0)
                return err_set(err, r == -ENOENT ? ERR_REFUSED : ERR_INTERNAL, r,
                               "session \"%s\": cannot open its index (%s)", shown, strerror(-r));
        struct stat st;
        size_t got = 0;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > STORE_INDEX_MAX) {
                close(fd);
                return err_set(err, ERR_INVALID, -EINVAL,
                               "session \"%s\": its index is not a regular file of at most %d "
                               "bytes",
                               shown, STORE_INDEX_MAX);
        }
        while (got < sizeof(text)) {
                ssize_t k = read(fd, text + got, sizeof(text) - got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                got += (size_t)k;
        }
        close(fd);
        struct err pe = {0};
        if (store_index_parse(text, got, e, &pe) < 0)
                return err_set(err, ERR_INVALID, -EINVAL, "session \"%s\": %s", shown, pe.msg);
        if (strcmp(e->owner, owner) != 0 || strcmp(e->name, name) != 0) {
                store_entry_clear(e);
                return err_set(err, ERR_INVALID, -EINVAL,
                               "session \"%s\": its index names another session than the one "
                               "whose directory it is in",
                               shown);
        }
        return 0;
}

/* The space the regular files in dfd take but the index (blocks, not
 * apparent sizes: a sparse file costs what it holds), at most
 * STORE_BYTES_LIMIT; -errno. */
static long long dir_bytes(int dfd)
{
        int fd = dup(dfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                int r = -errno;
                if (fd >= 0)
                        close(fd);
                return r;
        }
        unsigned long long total = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                struct stat st;
                if (strcmp(de->d_name, STORE_INDEX) == 0 || strncmp(de->d_name, ".index.", 7) == 0)
                        continue;
                if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
                        total += (unsigned long long)st.st_blocks * 512;
                if (total > STORE_BYTES_LIMIT)
                        total = STORE_BYTES_LIMIT;
        }
        closedir(d);
        return (long long)total;
}

int store_write(const char *root, struct store_entry *e, struct err *err)
{
        char shown[80], tmp[64];
        str_printable(e->name, shown, sizeof(shown));
        int dfd = open_session(root, e->owner, e->name, true, NULL);
        if (dfd < 0)
                return err_set(err, ERR_INTERNAL, dfd,
                               "session \"%s\": cannot make its store "
                               "directory (%s)",
                               shown, strerror(-dfd));
        long long bytes = dir_bytes(dfd);
        if (bytes < 0) {
                close(dfd);
                return err_set(err, ERR_INTERNAL, (int)bytes,
                               "session \"%s\": cannot read its "
                               "store directory (%s)",
                               shown, strerror((int)-bytes));
        }
        e->bytes = (unsigned long long)bytes;
        _cleanup_free_ char *text = store_index_format(e);
        struct store_entry check;
        struct err pe = {0};
        if (!text || store_index_parse(text, strlen(text), &check, &pe) < 0) {
                close(dfd);
                return err_set(err, ERR_INTERNAL, text ? -EINVAL : -ENOMEM,
                               "session \"%s\": no index to write (%s)", shown,
                               text ? pe.msg : "out of memory");
        }
        store_entry_clear(&check);
        /* A name of its own (two services may save at once), made afresh. */
        int fd = -1;
        for (int tries = 0; fd < 0 && tries < 16; tries++) {
                snprintf(tmp, sizeof(tmp), ".index.%d.%08x", (int)getpid(),
                         (unsigned)(store_wall_ms() * 2654435761u + (unsigned)tries));
                fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (fd < 0 && errno != EEXIST)
                        break;
        }
        if (fd < 0) {
                int r = -errno;
                close(dfd);
                return err_set(err, ERR_INTERNAL, r, "session \"%s\": cannot write its index (%s)",
                               shown, strerror(-r));
        }
        int r = write_all(fd, text, strlen(text));
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && renameat(dfd, tmp, dfd, STORE_INDEX) < 0)
                r = -errno;
        if (r < 0)
                unlinkat(dfd, tmp, 0);
        else
                fsync(dfd);
        close(dfd);
        if (r < 0)
                return err_set(err, ERR_INTERNAL, r, "session \"%s\": cannot write its index (%s)",
                               shown, strerror(-r));
        return 0;
}

int store_remove(const char *root, const char *owner, const char *name, struct err *err)
{
        char shown[80];
        str_printable(name, shown, sizeof(shown));
        int ofd = -1, dfd = open_session(root, owner, name, false, &ofd);
        if (dfd == -ENOENT)
                return 0;
        if (dfd < 0)
                return err_set(err, ERR_INTERNAL, dfd,
                               "session \"%s\": cannot open its store "
                               "directory (%s)",
                               shown, strerror(-dfd));
        DIR *d = fdopendir(dfd);
        if (!d) {
                int r = -errno;
                close(dfd);
                close(ofd);
                return err_set(err, ERR_INTERNAL, r,
                               "session \"%s\": cannot read its store "
                               "directory (%s)",
                               shown, strerror(-r));
        }
        struct dirent *de;
        int failed = 0;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                /* The index first is not possible in readdir order; whatever
                 * order, a directory left half removed has no index at the end
                 * or soon after, and store_enforce reaps it. Never into a
                 * directory: unlinkat without AT_REMOVEDIR fails on one, and a
                 * link goes itself, not what it points to. */
                if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
                        failed = errno;
        }
        closedir(d);
        int r = unlinkat(ofd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
        close(ofd);
        if (r < 0 || failed)
                return err_set(err, ERR_INTERNAL, r < 0 ? r : -failed,
                               "session \"%s\": cannot remove its store directory (%s)", shown,
                               strerror(r < 0 ? -r : failed));
        return 0;
}

int store_copy(const char *root, const char *owner, const char *from, const char *to,
               struct store_entry *ret, struct err *err)
{
        char shown[80], shown_to[80], tmp[64];
        str_printable(from, shown, sizeof(shown));
        str_printable(to, shown_to, sizeof(shown_to));
        struct store_entry e;
        int r = store_read(root, owner, from, &e, err);
        if (r < 0)
                return r;
        /* The new directory is claimed with mkdir: one that is there in
         * any state (stored, being saved by another service, damaged) is
         * not written over. */
        int sfd = open_session(root, owner, from, false, NULL);
        int ofd = sfd < 0 || !dir_name_ok(to) ? -1 : open_owner(root, owner, false);
        r = sfd < 0 ? sfd : !dir_name_ok(to) ? -EINVAL : ofd < 0 ? ofd : 0;
        if (r == 0 && mkdirat(ofd, to, 0700) < 0)
                r = -errno;
        int dfd = r < 0 ? -1 : open_dir_at(ofd, to, false);
        if (r == 0 && dfd < 0)
                r = dfd;
        if (ofd >= 0)
                close(ofd);
        if (r < 0) {
                if (sfd >= 0)
                        close(sfd);
                store_entry_clear(&e);
                if (r == -EEXIST)
                        return err_set(err, ERR_REFUSED, -EEXIST,
                                       "session \"%s\" is already in the store: close it first",
                                       shown_to);
                return err_set(err, ERR_INTERNAL, r,
                               "session \"%s\": cannot open its store directory (%s)",
                               sfd < 0 ? shown : shown_to, strerror(-r));
        }
        /* The files under a name of their own, then the index: a copy cut
         * short has no index, and store_enforce reaps it. */
        int in = openat(sfd, STORE_TAR, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        r = in < 0 && errno != ENOENT ? -errno : 0;
        if (in >= 0) {
                struct stat st;
                /* The directory is new and ours: no one else writes here. */
                snprintf(tmp, sizeof(tmp), ".%s.%d.copy", STORE_TAR, (int)getpid());
                int out = -1;
                if (fstat(in, &st) < 0)
                        r = -errno;
                else if (!S_ISREG(st.st_mode))
                        r = -EINVAL;
                else if ((out =
                              openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                                     0600)) < 0)
                        r = -errno;
                char buf[1 << 16];
                while (r == 0) {
                        ssize_t k = read(in, buf, sizeof(buf));
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k < 0)
                                r = -errno;
                        if (k <= 0)
                                break;
                        r = write_all(out, buf, (size_t)k);
                }
                if (out >= 0) {
                        if (r == 0 && fsync(out) < 0)
                                r = -errno;
                        if (close(out) < 0 && r == 0)
                                r = -errno;
                        if (r == 0 && renameat(dfd, tmp, dfd, STORE_TAR) < 0)
                                r = -errno;
                        if (r < 0)
                                unlinkat(dfd, tmp, 0);
                }
                close(in);
        }
        close(sfd);
        close(dfd);
        if (r < 0) {
                store_entry_clear(&e);
                store_remove(root, owner, to, NULL);
                return err_set(err, ERR_INTERNAL, r, "session \"%s\": cannot copy its files (%s)",
                               shown, strerror(-r));
        }
        snprintf(e.name, sizeof(e.name), "%s", to);
        e.saved_ms = store_wall_ms();
        r = store_write(root, &e, err);
        if (r < 0)
                store_remove(root, owner, to, NULL);
        if (r < 0 || !ret)
                store_entry_clear(&e);
        else
                *ret = e;
        return r;
}

/* The owner a store directory's name stands for ("_": ""), or -EINVAL. */
static int owner_of_dir(const char *hex, char *out, size_t size)
{
        size_t len = strlen(hex);
        if (strcmp(hex, "_") == 0) {
                out[0] = '\0';
                return 0;
        }
        if (len == 0 || len % 2 || len / 2 >= size)
                return -EINVAL;
        for (size_t i = 0; i < len; i += 2) {
                unsigned v;
                char pair[3] = {hex[i], hex[i + 1], 0};
                if (!strchr("0123456789abcdef", pair[0]) || !strchr("0123456789abcdef", pair[1]) ||
                    sscanf(pair, "%2x", &v) != 1)
                        return -EINVAL;
                out[i / 2] = (char)v;
        }
        out[len / 2] = '\0';
        return owner_ok(out, len / 2) ? 0 : -EINVAL;
}

/* Reads one owner's sessions into *v; with reap, also removes directories
 * without an index left for ORPHAN_MS (a removal or a save cut short).
 * -ENOMEM only: whatever else is wrong is skipped with a warning. */
static int list_owner(const char *root, const char *owner, bool reap, struct store_entry **v,
                      size_t *n, size_t *cap)
{
        char shown[80];
        int ofd = open_owner(root, owner, false);
        if (ofd < 0) {
                if (ofd != -ENOENT) {
                        str_printable(owner, shown, sizeof(shown));
                        log_warn("session store %s: skipping client \"%s\": %s", root, shown,
                                 strerror(-ofd));
                }
                return 0;
        }
        DIR *d = fdopendir(ofd);
        if (!d) {
                close(ofd);
                return 0;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
                struct err e = {0};
                struct stat st;
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                str_printable(de->d_name, shown, sizeof(shown));
                if (!dir_name_ok(de->d_name)) {
                        log_warn("session store %s: skipping \"%s\": not a session name", root,
                                 shown);
                        continue;
                }
                if (*n == *cap) {
                        size_t c = *cap ? 2 * *cap : 16;
                        struct store_entry *nv = realloc(*v, c * sizeof(**v));
                        if (!nv) {
                                closedir(d);
                                return -ENOMEM;
                        }
                        *v = nv;
                        *cap = c;
                }
                if (store_read(root, owner, de->d_name, &(*v)[*n], &e) == 0) {
                        /* The size is what the directory holds now, not what
                         * its index says: an index another wrote could claim
                         * enough to evict every other session. */
                        int sfd = open_dir_at(dirfd(d), de->d_name, false);
                        long long bytes = sfd >= 0 ? dir_bytes(sfd) : -1;
                        if (sfd >= 0)
                                close(sfd);
                        if (bytes >= 0)
                                (*v)[*n].bytes = (unsigned long long)bytes;
                        (*n)++;
                        continue;
                }
                if (reap && fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISDIR(st.st_mode) &&
                    store_wall_ms() - (long long)st.st_mtime * 1000 > ORPHAN_MS) {
                        int sfd = open_dir_at(dirfd(d), de->d_name, false);
                        bool has_index =
                            sfd >= 0 && faccessat(sfd, STORE_INDEX, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
                        if (sfd >= 0)
                                close(sfd);
                        struct err re = {0};
                        if (sfd >= 0 && !has_index &&
                            store_remove(root, owner, de->d_name, &re) == 0) {
                                log_event(LOG_INFO, "store",
                                          "removed \"%s\", a session directory without an index "
                                          "(a save or a removal cut short)",
                                          shown);
                                continue;
                        }
                }
                log_warn("session store %s: skipping: %s", root, e.msg);
        }
        closedir(d);
        return 0;
}

static int list_all(const char *root, const char *owner, bool reap, struct store_entry **ret,
                    size_t *ret_n)
{
        struct store_entry *v = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
        if (owner) {
                r = list_owner(root, owner, reap, &v, &n, &cap);
        } else {
                DIR *d = opendir(root);
                struct dirent *de;
                if (!d && errno != ENOENT)
                        r = -errno;
                while (d && r >= 0 && (de = readdir(d))) {
                        char who[SESSION_OWNER_MAX + 1], shown[80];
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        if (owner_of_dir(de->d_name, who, sizeof(who)) < 0) {
                                str_printable(de->d_name, shown, sizeof(shown));
                                log_warn("session store %s: skipping \"%s\": not a client's "
                                         "directory",
                                         root, shown);
                                continue;
                        }
                        r = list_owner(root, who, reap, &v, &n, &cap);
                }
                if (d)
                        closedir(d);
        }
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        store_entry_clear(&v[i]);
                free(v);
                return r;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

int store_list(const char *root, const char *owner, struct store_entry **ret, size_t *ret_n)
{
        return list_all(root, owner, false, ret, ret_n);
}

int store_enforce(const char *root, unsigned long long max_bytes, long long keep_ms,
                  const char *keep_owner, const char *keep_name)
{
        struct store_entry *v;
        size_t n, keep;
        int r = list_all(root, NULL, true, &v, &n);
        if (r < 0)
                return r;
        for (keep = 0; keep < n; keep++)
                if (keep_name && strcmp(v[keep].owner, keep_owner ? keep_owner : "") == 0 &&
                    strcmp(v[keep].name, keep_name) == 0)
                        break;
        _cleanup_free_ size_t *out = calloc(n ? n : 1, sizeof(*out));
        size_t k = out ? store_evict_pick(v, n, max_bytes, keep_ms, store_wall_ms(), keep, out) : 0;
        int gone = 0;
        for (size_t i = 0; i < k; i++) {
                const struct store_entry *e = &v[out[i]];
                struct store_entry now;
                struct err err = {0};
                char shown_o[80];
                /* Saved again since the listing (by another service, say):
                 * not the session that was judged. */
                if (store_read(root, e->owner, e->name, &now, &err) < 0)
                        continue;
                bool same = now.saved_ms == e->saved_ms;
                store_entry_clear(&now);
                if (!same)
                        continue;
                if (store_remove(root, e->owner, e->name, &err) < 0) {
                        log_warn("session store: cannot evict session \"%s\": %s", e->name,
                                 err.msg);
                        continue;
                }
                gone++;
                str_printable(e->owner, shown_o, sizeof(shown_o));
                log_event(LOG_INFO, "store",
                          "evicted hibernated session \"%s\" of client \"%s\" (%llu bytes, saved "
                          "%lld s ago): %s",
                          e->name, shown_o, e->bytes, (store_wall_ms() - e->saved_ms) / 1000,
                          keep_ms > 0 && store_wall_ms() - e->saved_ms > keep_ms
                              ? "older than the store keeps sessions"
                              : "the store was over its size bound");
        }
        for (size_t i = 0; i < n; i++)
                store_entry_clear(&v[i]);
        free(v);
        return out ? gone : -ENOMEM;
}

/* ---- a session's /workspace as a tar */

/* The tar is written here, not by libarchive: its writers for the tar
 * formats pull in its table of every format (and so libxml2 and ICU, 30 MiB
 * that corral's own image would carry for nothing). What corral writes is
 * small: regular files, their mode and size, in POSIX pax form, a name
 * that ustar cannot hold going in a pax `path` record, as libarchive's
 * pax_restricted does. The reader (store_unpack) is libarchive's. */
#define TAR_BLOCK 512

struct store_pack {
        int dfd, fd;
        char tmp[64];
        int error; /* the first write's failure, or 0 */
};

static void tar_octal(char *field, size_t width, unsigned long long v)
{
        /* width - 1 octal digits, zero-padded, then NUL */
        snprintf(field, width, "%0*llo", (int)width - 1, v);
}

static void tar_header(char h[TAR_BLOCK], const char *name, size_t name_len, char type,
                       unsigned mode, unsigned long long size)
{
        memset(h, 0, TAR_BLOCK);
        memcpy(h, name, name_len < 100 ? name_len : 100);
        tar_octal(h + 100, 8, mode & 0777);
        tar_octal(h + 108, 8, 0);
        tar_octal(h + 116, 8, 0);
        tar_octal(h + 124, 12, size);
        tar_octal(h + 136, 12, 0);
        h[156] = type;
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (size_t i = 0; i < TAR_BLOCK; i++)
                sum += (unsigned char)h[i];
        snprintf(h + 148, 8, "%06o", sum); /* six digits, NUL, and the space stays */
}

static void pack_write(struct store_pack *p, const void *data, size_t len)
{
        if (p->error == 0 && len > 0)
                p->error = write_all(p->fd, data, len);
}

static void pack_pad(struct store_pack *p, size_t len)
{
        static const char zero[TAR_BLOCK];
        if (len % TAR_BLOCK)
                pack_write(p, zero, TAR_BLOCK - len % TAR_BLOCK);
}

static bool plain_ascii(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
                        return false;
        return true;
}

/* Temporary tars a crash left in a session's directory: no save takes an
 * hour, so one older than that is no one's. */
static void pack_reap(int dfd)
{
        int fd = dup(dfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        size_t pre = strlen(STORE_TAR) + 2;
        time_t old = time(NULL) - 3600;
        struct dirent *de;
        while ((de = readdir(d))) {
                size_t n = strlen(de->d_name);
                struct stat st;
                if (n > pre + 4 && de->d_name[0] == '.' &&
                    strncmp(de->d_name + 1, STORE_TAR ".", pre - 1) == 0 &&
                    strcmp(de->d_name + n - 4, ".new") == 0 &&
                    fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode) && st.st_mtime < old)
                        unlinkat(dfd, de->d_name, 0);
        }
        closedir(d);
}

int store_pack_begin(const char *root, const char *owner, const char *name, struct store_pack **ret,
                     struct err *err)
{
        char shown[80];
        str_printable(name, shown, sizeof(shown));
        struct store_pack *p = calloc(1, sizeof(*p));
        if (!p)
                return err_set(err, ERR_INTERNAL, -ENOMEM, "out of memory");
        p->fd = -1;
        p->dfd = open_session(root, owner, name, true, NULL);
        if (p->dfd < 0) {
                int r = p->dfd;
                free(p);
                return err_set(err, ERR_INTERNAL, r,
                               "session \"%s\": cannot make its store "
                               "directory (%s)",
                               shown, strerror(-r));
        }
        pack_reap(p->dfd);
        /* A name of its own: two corrals may save one session at once, and
         * corrals in containers share their pid. */
        p->fd = -1;
        for (int tries = 0; p->fd < 0 && tries < 16; tries++) {
                unsigned rnd = 0;
                if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
                        rnd = (unsigned)(store_wall_ms() * 2654435761u + (unsigned)tries);
                snprintf(p->tmp, sizeof(p->tmp), ".%s.%d.%08x.new", STORE_TAR, (int)getpid(), rnd);
                p->fd = openat(p->dfd, p->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                               0600);
                if (p->fd < 0 && errno != EEXIST)
                        break;
        }
        if (p->fd < 0) {
                int r = -errno;
                store_pack_end(p, false, NULL);
                return err_set(err, ERR_INTERNAL, r, "session \"%s\": cannot write its files (%s)",
                               shown, strerror(-r));
        }
        *ret = p;
        return 0;
}

int store_pack_add(struct store_pack *p, const char *rel, unsigned mode, const void *data,
                   size_t len, struct err *err)
{
        size_t n = strlen(rel);
        char h[TAR_BLOCK];
        bool ascii = plain_ascii(rel, n);
        /* ustar's size field holds 11 octal digits: a file of 8 GiB or more
         * would need a pax size record, and none comes from a sandbox. */
        if (len > 077777777777ULL)
                return err_set(err, ERR_INTERNAL, -EFBIG,
                               "cannot store %s: a file of 8 GiB or more", rel);
        if (n == 0)
                return err_set(err, ERR_INTERNAL, -EINVAL, "cannot store a file without a name");
        if (n == 0 || n > 100 || !ascii) {
                /* "LEN path=REL\n", LEN counting itself. A name that is not
                 * ASCII is marked as bytes (hdrcharset=BINARY): a reader in
                 * the C locale, such as corral's, then takes it as it is
                 * instead of failing to convert it from UTF-8. */
                static const char binary[] = "21 hdrcharset=BINARY\n";
                size_t pre = ascii ? 0 : sizeof(binary) - 1;
                size_t base = n + 7, rec = base + 1;
                while (snprintf(NULL, 0, "%zu", rec) + base != rec)
                        rec++;
                _cleanup_free_ char *x = malloc(pre + rec + 1);
                if (!x)
                        return err_set(err, ERR_INTERNAL, -ENOMEM, "out of memory");
                memcpy(x, binary, pre);
                snprintf(x + pre, rec + 1, "%zu path=%s\n", rec, rel);
                tar_header(h, "PaxHeaders/entry", 16, 'x', 0644, pre + rec);
                pack_write(p, h, sizeof(h));
                pack_write(p, x, pre + rec);
                pack_pad(p, pre + rec);
        }
        tar_header(h, rel, n, '0', mode, len);
        pack_write(p, h, sizeof(h));
        pack_write(p, data, len);
        pack_pad(p, len);
        if (p->error < 0)
                return err_set(err, ERR_INTERNAL, p->error, "cannot write %s to the store: %s", rel,
                               strerror(-p->error));
        return 0;
}

int store_pack_end(struct store_pack *p, bool commit, struct err *err)
{
        int r = 0;
        if (p->fd >= 0) {
                static const char end[2 * TAR_BLOCK];
                if (commit)
                        pack_write(p, end, sizeof(end));
                r = p->error;
                if (commit && r == 0 && fsync(p->fd) < 0)
                        r = -errno;
                close(p->fd);
        }
        if (commit && r == 0 && renameat(p->dfd, p->tmp, p->dfd, STORE_TAR) < 0)
                r = -errno;
        if (!commit || r < 0)
                unlinkat(p->dfd, p->tmp, 0);
        close(p->dfd);
        free(p);
        if (commit && r < 0)
                return err_set(err, ERR_INTERNAL, r, "cannot finish the stored files (%s)",
                               strerror(-r));
        return 0;
}

void store_files_free(struct sandbox_file *v, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free((char *)v[i].path);
                free((char *)v[i].data);
        }
        free(v);
}

int store_unpack(const char *root, const char *owner, const char *name,
                 unsigned long long max_bytes, struct sandbox_file **ret, size_t *ret_n,
                 struct err *err)
{
        char shown[80];
        str_printable(name, shown, sizeof(shown));
        *ret = NULL;
        *ret_n = 0;
        int dfd = open_session(root, owner, name, false, NULL);
        int fd =
            dfd < 0 ? -1 : openat(dfd, STORE_TAR, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (dfd >= 0)
                close(dfd);
        if (fd < 0)
                return errno == ENOENT ? 0 /* no files */
                                       : err_set(err, ERR_INTERNAL, -errno,
                                                 "session \"%s\": cannot read its files (%s)",
                                                 shown, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) { /* a FIFO would hold the loop */
                close(fd);
                return err_set(err, ERR_INVALID, -EINVAL,
                               "session \"%s\": its stored files are not a regular file", shown);
        }
        struct archive *a = archive_read_new();
        struct sandbox_file *v = NULL;
        size_t n = 0;
        unsigned long long total = 0;
        int r = 0;
        if (!a) {
                close(fd);
                return err_set(err, ERR_INTERNAL, -ENOMEM, "out of memory");
        }
        archive_read_support_format_tar(a);
        if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK)
                r = err_set(err, ERR_INVALID, -EINVAL,
                            "session \"%s\": its stored files are not a "
                            "tar",
                            shown);
        struct archive_entry *e;
        int h = ARCHIVE_OK;
        while (r == 0 && (h = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
                char path[FILES_PATH_MAX + 16];
                struct err pe = {0};
                const char *rel = archive_entry_pathname(e);
                la_int64_t size = archive_entry_size(e);
                if (archive_entry_filetype(e) != AE_IFREG || !rel || size < 0 ||
                    files_path(rel, false, path, sizeof(path), &pe) < 0) {
                        r = err_set(err, ERR_INVALID, -EINVAL,
                                    "session \"%s\": its stored files hold an entry that is not a "
                                    "file under /workspace",
                                    shown);
                        break;
                }
                if ((unsigned long long)size > max_bytes - total) {
                        r = err_set(err, ERR_INVALID, -EFBIG,
                                    "session \"%s\": its stored files hold more than %llu bytes",
                                    shown, max_bytes);
                        break;
                }
                struct sandbox_file *nv = realloc(v, (n + 1) * sizeof(*v));
                char *data = malloc(size ? (size_t)size : 1);
                char *copy = strdup(path);
                if (nv)
                        v = nv;
                if (!nv || !data || !copy) {
                        free(data);
                        free(copy);
                        r = err_set(err, ERR_INTERNAL, -ENOMEM, "out of memory");
                        break;
                }
                size_t got = 0;
                while (got < (size_t)size) {
                        la_ssize_t k = archive_read_data(a, data + got, (size_t)size - got);
                        if (k <= 0)
                                break;
                        got += (size_t)k;
                }
                v[n++] = (struct sandbox_file){.path = copy, .data = data, .len = got};
                if (got != (size_t)size) {
                        r = err_set(err, ERR_INVALID, -EINVAL,
                                    "session \"%s\": its stored files are cut short", shown);
                        break;
                }
                total += got;
        }
        if (r == 0 && h != ARCHIVE_EOF) /* not the end: a damaged header */
                r = err_set(err, ERR_INVALID, -EINVAL,
                            "session \"%s\": its stored files are "
                            "damaged (%s)",
                            shown,
                            archive_error_string(a) ? archive_error_string(a) : "a bad header");
        archive_read_free(a);
        close(fd);
        if (r < 0) {
                store_files_free(v, n);
                return r;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}
