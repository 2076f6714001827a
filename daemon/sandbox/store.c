#include "sandbox/store.h"

#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A save's time is the wall clock's: another host reads it. */
static long long wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

/* ---- on disk */

int store_read(const char *root, const char *owner, const char *name, struct store_entry *e,
               struct err *err)
{
        char dir[PATH_MAX], path[PATH_MAX + 32], text[STORE_INDEX_MAX + 1];
        memset(e, 0, sizeof(*e));
        int r = store_dir(root, owner, name, dir, sizeof(dir));
        if (r < 0)
                return err_set(err, ERR_INVALID, r, "no store directory for session \"%s\"", name);
        snprintf(path, sizeof(path), "%s/" STORE_INDEX, dir);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
                return err_set(err, errno == ENOENT ? ERR_REFUSED : ERR_INTERNAL, -errno,
                               "cannot open %s: %s", path, strerror(errno));
        struct stat st;
        ssize_t got = 0;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > STORE_INDEX_MAX) {
                close(fd);
                return err_set(err, ERR_INVALID, -EINVAL,
                               "%s is not an index (a regular file of "
                               "at most %d bytes)",
                               path, STORE_INDEX_MAX);
        }
        while ((size_t)got < sizeof(text)) {
                ssize_t k = read(fd, text + got, sizeof(text) - (size_t)got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                got += k;
        }
        close(fd);
        if ((size_t)got > STORE_INDEX_MAX)
                return err_set(err, ERR_INVALID, -EINVAL, "%s grew past %d bytes", path,
                               STORE_INDEX_MAX);
        struct err pe = {0};
        if (store_index_parse(text, (size_t)got, e, &pe) < 0)
                return err_set(err, ERR_INVALID, -EINVAL, "%s: %s", path, pe.msg);
        if (strcmp(e->owner, owner) != 0 || strcmp(e->name, name) != 0) {
                store_entry_clear(e);
                return err_set(err, ERR_INVALID, -EINVAL,
                               "%s names another session than the one whose directory it is in",
                               path);
        }
        return 0;
}

/* The sizes of the regular files in dir but the index; -errno. */
static long long dir_bytes(const char *dir)
{
        DIR *d = opendir(dir);
        if (!d)
                return -errno;
        long long total = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                struct stat st;
                if (de->d_name[0] == '.' || strcmp(de->d_name, STORE_INDEX) == 0)
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode))
                        total += st.st_size;
        }
        closedir(d);
        return total;
}

int store_write(const char *root, struct store_entry *e, struct err *err)
{
        char dir[PATH_MAX], path[PATH_MAX + 32], tmp[PATH_MAX + 32];
        int r = store_dir(root, e->owner, e->name, dir, sizeof(dir));
        if (r < 0)
                return err_set(err, ERR_INVALID, r, "no store directory for session \"%s\"",
                               e->name);
        snprintf(path, sizeof(path), "%s/" STORE_INDEX, dir);
        snprintf(tmp, sizeof(tmp), "%s/.%s.new", dir, STORE_INDEX);
        if ((r = mkdir_parents(path)) < 0 || (mkdir(dir, 0700) < 0 && errno != EEXIST))
                return err_set(err, ERR_INTERNAL, r < 0 ? r : -errno, "cannot make %s: %s", dir,
                               strerror(r < 0 ? -r : errno));
        long long bytes = dir_bytes(dir);
        if (bytes < 0)
                return err_set(err, ERR_INTERNAL, (int)bytes, "cannot read %s: %s", dir,
                               strerror((int)-bytes));
        e->bytes = (unsigned long long)bytes;
        _cleanup_free_ char *text = store_index_format(e);
        if (!text)
                return err_set(err, ERR_INTERNAL, -ENOMEM, "out of memory");
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return err_set(err, ERR_INTERNAL, -errno, "cannot write %s: %s", tmp,
                               strerror(errno));
        size_t len = strlen(text), done = 0;
        while (done < len) {
                ssize_t k = write(fd, text + done, len - done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                done += (size_t)k;
        }
        int saved = errno;
        if (done < len || fsync(fd) < 0 || close(fd) < 0) {
                if (done < len)
                        errno = saved ? saved : EIO;
                int e2 = errno;
                unlink(tmp);
                return err_set(err, ERR_INTERNAL, -e2, "cannot write %s: %s", tmp, strerror(e2));
        }
        if (rename(tmp, path) < 0) {
                int e2 = errno;
                unlink(tmp);
                return err_set(err, ERR_INTERNAL, -e2, "cannot rename %s: %s", tmp, strerror(e2));
        }
        return 0;
}

int store_remove(const char *root, const char *owner, const char *name, struct err *err)
{
        char dir[PATH_MAX];
        int r = store_dir(root, owner, name, dir, sizeof(dir));
        if (r < 0)
                return err_set(err, ERR_INVALID, r, "no store directory for session \"%s\"", name);
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (dfd < 0)
                return errno == ENOENT ? 0
                                       : err_set(err, ERR_INTERNAL, -errno, "cannot open %s: %s",
                                                 dir, strerror(errno));
        DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return err_set(err, ERR_INTERNAL, -errno, "cannot read %s: %s", dir,
                               strerror(errno));
        }
        struct dirent *de;
        int failed = 0;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                /* Never into a directory (the store makes none in a session's):
                 * unlinkat without AT_REMOVEDIR fails on one, and a link goes
                 * itself, not what it points to. */
                if (unlinkat(dfd, de->d_name, 0) < 0 && errno != ENOENT)
                        failed = errno;
        }
        closedir(d);
        if (rmdir(dir) < 0 && errno != ENOENT)
                return err_set(err, ERR_INTERNAL, -(failed ? failed : errno),
                               "cannot remove %s: %s", dir, strerror(failed ? failed : errno));
        return 0;
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

static int list_owner(const char *root, const char *owner, struct store_entry **v, size_t *n,
                      size_t *cap)
{
        char dir[PATH_MAX];
        if (store_dir(root, owner, "x", dir, sizeof(dir)) < 0)
                return -EINVAL;
        dir[strlen(dir) - 2] = '\0'; /* the owner's directory */
        DIR *d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : -errno;
        struct dirent *de;
        while ((de = readdir(d))) {
                struct err e = {0};
                if (de->d_name[0] == '.' && (!de->d_name[1] || strcmp(de->d_name, "..") == 0))
                        continue;
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
                if (store_read(root, owner, de->d_name, &(*v)[*n], &e) < 0) {
                        log_warn("session store: skipping %s/%s: %s", dir, de->d_name, e.msg);
                        continue;
                }
                (*n)++;
        }
        closedir(d);
        return 0;
}

int store_list(const char *root, const char *owner, struct store_entry **ret, size_t *ret_n)
{
        struct store_entry *v = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
        if (owner) {
                r = list_owner(root, owner, &v, &n, &cap);
        } else {
                DIR *d = opendir(root);
                struct dirent *de;
                if (!d && errno != ENOENT)
                        r = -errno;
                while (d && r >= 0 && (de = readdir(d))) {
                        char who[SESSION_OWNER_MAX + 1];
                        if (de->d_name[0] == '.')
                                continue;
                        if (owner_of_dir(de->d_name, who, sizeof(who)) < 0) {
                                log_warn("session store: skipping %s/%s: not a client's directory",
                                         root, de->d_name);
                                continue;
                        }
                        r = list_owner(root, who, &v, &n, &cap);
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

int store_enforce(const char *root, unsigned long long max_bytes, long long keep_ms,
                  const char *keep_owner, const char *keep_name)
{
        struct store_entry *v;
        size_t n, keep;
        int r = store_list(root, NULL, &v, &n);
        if (r < 0)
                return r;
        for (keep = 0; keep < n; keep++)
                if (keep_name && strcmp(v[keep].owner, keep_owner ? keep_owner : "") == 0 &&
                    strcmp(v[keep].name, keep_name) == 0)
                        break;
        _cleanup_free_ size_t *out = calloc(n ? n : 1, sizeof(*out));
        size_t k = out ? store_evict_pick(v, n, max_bytes, keep_ms, wall_ms(), keep, out) : 0;
        int gone = 0;
        for (size_t i = 0; i < k; i++) {
                const struct store_entry *e = &v[out[i]];
                struct err err = {0};
                if (store_remove(root, e->owner, e->name, &err) < 0) {
                        log_warn("session store: cannot evict session \"%s\": %s", e->name,
                                 err.msg);
                        continue;
                }
                gone++;
                log_event(LOG_INFO, "store",
                          "evicted hibernated session \"%s\" of client \"%s\" (%llu bytes, saved "
                          "%lld s ago): %s",
                          e->name, e->owner, e->bytes, (wall_ms() - e->saved_ms) / 1000,
                          keep_ms > 0 && wall_ms() - e->saved_ms > keep_ms
                              ? "older than the store keeps sessions"
                              : "the store was over its size bound");
        }
        for (size_t i = 0; i < n; i++)
                store_entry_clear(&v[i]);
        free(v);
        return out ? gone : -ENOMEM;
}
