#include "engine/self.h"

#include <ctype.h>
#include <limits.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool self_in_container(void)
{
        char id[80];
        return self_container_id(id, sizeof(id)) == 0 || access("/run/.containerenv", F_OK) == 0;
}

/* A path component of exactly 64 lower-case hex digits. */
static bool id_at(const char *p, size_t n)
{
        if (n != 64)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isxdigit((unsigned char)p[i]) || isupper((unsigned char)p[i]))
                        return false;
        return true;
}

int self_container_id_from(const char *mountinfo, char *out, size_t size)
{
        for (const char *line = mountinfo; line && *line;) {
                const char *end = strchr(line, '\n');
                size_t len = end ? (size_t)(end - line) : strlen(line);
                /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT ...": fields 4 and 5 */
                const char *f[5];
                size_t fl[5], k = 0;
                for (const char *p = line; k < 5 && p < line + len;) {
                        while (p < line + len && *p == ' ')
                                p++;
                        const char *s = p;
                        while (p < line + len && *p != ' ')
                                p++;
                        if (p > s) {
                                f[k] = s;
                                fl[k++] = (size_t)(p - s);
                        }
                }
                if (k == 5 && fl[4] == 13 && memcmp(f[4], "/etc/hostname", 13) == 0)
                        for (const char *c = f[3]; c < f[3] + fl[3];) {
                                const char *slash = memchr(c, '/', (size_t)(f[3] + fl[3] - c));
                                const char *ce = slash ? slash : f[3] + fl[3];
                                if (id_at(c, (size_t)(ce - c)) && size > 64) {
                                        memcpy(out, c, 64);
                                        out[64] = '\0';
                                        return 0;
                                }
                                c = ce + 1;
                        }
                line = end ? end + 1 : NULL;
        }
        return -ENOENT;
}

int self_container_id(char *out, size_t size)
{
        char text[64 << 10];
        size_t n = 0;
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (f) {
                n = fread(text, 1, sizeof(text) - 1, f);
                fclose(f);
        }
        text[n] = '\0';
        return self_container_id_from(text, out, size);
}

/* Whether `path` is `dir` or under it; the rest in *rest ("" or "/..."). */
static bool under(const char *path, const char *dir, const char **rest)
{
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
                n--;
        if (strncmp(path, dir, n) != 0 || (path[n] && path[n] != '/'))
                return false;
        *rest = path + n;
        return true;
}

int self_engine_path_from(json_t *inspect, const char *local, bool on_root, char *out, size_t size,
                          const char **ret_via, struct err *e)
{
        if (ret_via)
                *ret_via = NULL;
        if (local[0] != '/' || strstr(local, "/../") || strstr(local, "/./") || strstr(local, "//"))
                return err_set(e, ERR_CONFIG, EINVAL, "%s is not a plain absolute path", local);
        /* The mount that holds it: the deepest destination that is a prefix
         * of the path, whatever its kind. One without a source on the
         * engine's machine (a tmpfs) is no way through. */
        size_t i, best = 0;
        json_t *m;
        const char *src = NULL, *rest = NULL, *via = NULL;
        bool found = false;
        json_array_foreach(json_object_get(inspect, "Mounts"), i, m)
        {
                const char *dst = json_string_value(json_object_get(m, "Destination"));
                const char *s = json_string_value(json_object_get(m, "Source"));
                const char *r;
                if (dst && under(local, dst, &r) && (!found || strlen(dst) > best)) {
                        found = true;
                        best = strlen(dst);
                        src = s && *s == '/' ? s : NULL;
                        rest = r;
                        via = dst;
                }
        }
        const char *upper = json_string_value(json_object_get(
            json_object_get(json_object_get(inspect, "GraphDriver"), "Data"), "UpperDir"));
        if (!found && on_root && upper && *upper == '/') {
                src = upper;
                rest = local;
        }
        if (!src)
                return err_set(e, ERR_CONFIG, ENOENT,
                               "the engine cannot see %s: it is neither in a mount of corral's "
                               "container from the engine's machine nor in its writable layer "
                               "(a tmpfs, or --read-only); mount a volume there",
                               local);
        int n = snprintf(out, size, "%s%s", src, rest);
        if (n < 0 || (size_t)n >= size)
                return err_set(e, ERR_CONFIG, ENAMETOOLONG, "the engine's path of %s is too long",
                               local);
        if (ret_via)
                *ret_via = via;
        return 0;
}

int self_engine_path(struct engine *eng, const char *local, char *out, size_t size, struct err *e)
{
        char id[256], path[320];
        if (self_container_id(id, sizeof(id)) < 0)
                return err_set(e, ERR_CONFIG, ENOENT,
                               "cannot tell which container corral runs in (no id in "
                               "/proc/self/mountinfo)");
        snprintf(path, sizeof(path), "/containers/%s/json", id);
        json_auto_t *body = NULL;
        struct err ce = {0};
        long st = engine_call(eng, "GET", path, NULL, &body, &ce);
        if (st != 200)
                return err_set(e, ERR_CONFIG, EIO,
                               "the engine does not know corral's container %.64s (%s): is "
                               "corral's engine socket that of the engine it runs on?",
                               id, st < 0 ? ce.msg : engine_error_message(body));
        /* The path as it really is (no link, no ..), and the file system
         * it is on: the root's (the writable layer), or the mount's the
         * engine names, never one mounted below it (a tmpfs the engine
         * does not list). */
        char real[PATH_MAX];
        struct stat a, b;
        if (!realpath(local, real) || stat(real, &b) < 0)
                return err_set(e, ERR_CONFIG, errno, "%s: %s", local, strerror(errno));
        bool on_root = stat("/", &a) == 0 && a.st_dev == b.st_dev;
        const char *via = NULL;
        int r = self_engine_path_from(body, real, on_root, out, size, &via, e);
        if (r == 0 && via && (stat(via, &a) < 0 || a.st_dev != b.st_dev))
                return err_set(e, ERR_CONFIG, EXDEV,
                               "the engine cannot see %s: another file system is mounted "
                               "between it and the mount at %s",
                               real, via);
        return r;
}
