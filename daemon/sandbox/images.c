#include "sandbox/images.h"

#include "engine/self.h"

#include "core/buf.h"
#include "core/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define IMAGES_MAX   64  /* images in the catalogue */
#define PACKAGES_MAX 600 /* bytes of an image's package summary kept */

const char *sandbox_image_plain(const char *name)
{
        static const char *const prefixes[] = {"localhost/", "docker.io/library/"};
        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
                if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
                        return name + strlen(prefixes[i]);
        return name;
}

void sandbox_image_advice(const struct config *cfg, const char *image, bool from_call, char *out,
                          size_t size)
{
        const char *src = from_call ? NULL : config_source(cfg, "image");
        if (!from_call && !src) {
                snprintf(out, size,
                         "build it with `corral image build`, or set `image` (--image, "
                         "CORRAL_IMAGE or the config file) to an image that has python3");
                return;
        }
        char other[400];
        if (from_call)
                snprintf(other, sizeof(other), "call without \"image\"");
        else if (strncmp(src, "--", 2) == 0)
                snprintf(other, sizeof(other), "give %s an image that has python3", src);
        else if (strncmp(src, "CORRAL_", 7) == 0)
                snprintf(other, sizeof(other), "set %s to an image that has python3", src);
        else
                snprintf(other, sizeof(other),
                         "set \"image\" in %.300s to an image that has python3",
                         cfg->config_file ? cfg->config_file : "the config file");
        snprintf(out, size, "build it with `corral image build --image %s`, or %s",
                 sandbox_image_plain(image), other);
}

/* "corral-NAME:TAG" (a registry or namespace before it allowed): NAME. */
static char *short_name_of(const char *name)
{
        const char *base = strrchr(name, '/');
        base = base ? base + 1 : name;
        if (strncmp(base, "corral-", 7) != 0)
                return NULL;
        base += 7;
        size_t n = strcspn(base, ":@");
        return n ? strndup(base, n) : NULL;
}

static int push(struct sandbox_images *im, const char *name, json_t *labels, bool is_default)
{
        for (size_t i = 0; i < im->n; i++)
                if (strcmp(im->v[i].name, name) == 0) {
                        im->v[i].is_default |= is_default;
                        return 0;
                }
        if (im->n == IMAGES_MAX)
                return 0;
        struct sandbox_image *v = realloc(im->v, (im->n + 1) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        im->v = v;
        const char *profile = json_string_value(json_object_get(labels, "io.corral.profile"));
        const char *packages = json_string_value(json_object_get(labels, "io.corral.packages"));
        struct sandbox_image *x = &v[im->n];
        *x = (struct sandbox_image){
            .name = strdup(name),
            .short_name = short_name_of(name),
            .profile = profile ? strndup(profile, 64) : NULL,
            .packages = packages ? strndup(packages, PACKAGES_MAX) : NULL,
            .is_default = is_default,
        };
        im->n++;
        if (!x->name)
                return -ENOMEM;
        /* Labels are the engine's word: shown to a model, so plain text. */
        if (x->profile)
                utf8_scrub(x->profile);
        if (x->packages)
                utf8_scrub(x->packages);
        return 0;
}

/* The labels of one image, or NULL (not there, or no engine). */
static json_t *image_labels(struct engine *eng, const char *name)
{
        if (!eng)
                return NULL;
        char path[600];
        char *esc = curl_easy_escape(NULL, name, 0);
        snprintf(path, sizeof(path), "/images/%s/json", esc ? esc : name);
        curl_free(esc);
        json_auto_t *body = NULL;
        struct err e = {0};
        long st = engine_call(eng, "GET", path, NULL, &body, &e);
        return st == 200 ? json_incref(json_object_get(json_object_get(body, "Config"), "Labels"))
                         : NULL;
}

int sandbox_images_load(struct engine *eng, const struct config *cfg, struct sandbox_images *ret,
                        struct err *e)
{
        struct sandbox_images im = {0};
        json_auto_t *labels = image_labels(eng, cfg->image);
        int r = push(&im, cfg->image, labels, true);
        for (size_t i = 0; r == 0 && cfg->images && cfg->images[i]; i++) {
                json_auto_t *more = image_labels(eng, cfg->images[i]);
                r = push(&im, cfg->images[i], more, false);
        }
        if (r == 0 && !cfg->images && eng) {
                /* What corral built here: every image with a profile label. */
                json_auto_t *list = NULL;
                struct err le = {0};
                long st = engine_call(
                    eng, "GET",
                    "/images/json?filters=%7B%22label%22%3A%5B%22io.corral.profile%22%5D%7D", NULL,
                    &list, &le);
                size_t i, j;
                json_t *img, *tag;
                if (st == 200)
                        json_array_foreach(list, i, img)
                        {
                                json_t *l = json_object_get(img, "Labels");
                                json_array_foreach(json_object_get(img, "RepoTags"), j, tag)
                                {
                                        const char *t = json_string_value(tag);
                                        if (t)
                                                t = sandbox_image_plain(t);
                                        /* corral's own image runs corral,
                                         * not code. */
                                        if (json_object_get(l, "io.corral.daemon"))
                                                continue;
                                        if (r == 0 && t && config_image_name_ok(t) &&
                                            strcmp(t, "<none>:<none>") != 0)
                                                r = push(&im, t, l, false);
                                }
                        }
                else
                        log_warn("cannot list the images corral built: %s",
                                 le.msg[0] ? le.msg : "the engine refused");
        }
        if (r < 0) {
                sandbox_images_free(&im);
                return err_set(e, ERR_INTERNAL, -r, "out of memory");
        }
        *ret = im;
        return 0;
}

void sandbox_images_free(struct sandbox_images *im)
{
        for (size_t i = 0; i < im->n; i++) {
                free(im->v[i].name);
                free(im->v[i].short_name);
                free(im->v[i].profile);
                free(im->v[i].packages);
        }
        free(im->v);
        *im = (struct sandbox_images){0};
}

const struct sandbox_image *sandbox_images_find(const struct sandbox_images *im, const char *arg)
{
        size_t n = strlen(arg);
        for (size_t i = 0; i < im->n; i++) {
                const struct sandbox_image *x = &im->v[i];
                if (strcmp(x->name, arg) == 0 || (x->short_name && strcmp(x->short_name, arg) == 0))
                        return x;
                /* Without its ":latest". */
                if (strncmp(x->name, arg, n) == 0 && strcmp(x->name + n, ":latest") == 0)
                        return x;
        }
        return NULL;
}

json_t *sandbox_images_choices(const struct sandbox_images *im)
{
        json_t *a = json_array();
        for (int pass = 0; a && pass < 2; pass++)
                for (size_t i = 0; i < im->n; i++) {
                        const struct sandbox_image *x = &im->v[i];
                        if (x->is_default == (pass == 0))
                                json_array_append_new(
                                    a, json_string(x->short_name ? x->short_name : x->name));
                }
        return a;
}

json_t *sandbox_mounts_resolve(const struct config *cfg, const struct engine_endpoint *ep,
                               struct err *e)
{
        json_auto_t *mounts = json_array();
        if (!mounts)
                return NULL;
        char sock_real[PATH_MAX];
        const char *sock = ep ? ep->unix_path : NULL;
        if (sock && realpath(sock, sock_real))
                sock = sock_real;
        bool in_container = cfg->mounts && self_in_container();
        for (size_t i = 0; cfg->mounts && cfg->mounts[i]; i++) {
                char host[PATH_MAX], target[PATH_MAX], real[PATH_MAX];
                if (config_mount_parse(cfg->mounts[i], host, target, sizeof(host), e) < 0)
                        return NULL;
                if (ep && ep->host) {
                        err_set(e, ERR_CONFIG, EINVAL,
                                "mounts need a local engine: the engine at %s would mount %s from "
                                "its own machine, not this one; remove `mounts` or use a local "
                                "engine",
                                ep->display, host);
                        return NULL;
                }
                /* In a container, a path on the engine's machine, which
                 * corral's container does not see: the engine checks it as
                 * it creates a sandbox, and only what is written can be
                 * judged here. */
                struct stat st = {.st_mode = S_IFDIR};
                const char *src = host;
                if (!in_container) {
                        if (!realpath(host, real) || stat(real, &st) < 0) {
                                err_set(e, ERR_CONFIG, errno,
                                        "mount %s: %s: %s (create it, or remove it "
                                        "from `mounts`)",
                                        cfg->mounts[i], host, strerror(errno));
                                return NULL;
                        }
                        src = real;
                }
                /* Both the path as written and where it leads. */
                const char *danger = config_mount_host_danger(src, sock);
                if (!danger)
                        danger = config_mount_host_danger(host, sock);
                if (danger && !cfg->mounts_unsafe) {
                        err_set(e, ERR_CONFIG, EPERM,
                                "mount %s: %s is refused: %s (set mounts_unsafe to true to "
                                "mount it anyway, read-only)",
                                cfg->mounts[i], src, danger);
                        return NULL;
                }
                if (danger)
                        log_warn("mount %s: %s: %s (allowed by mounts_unsafe)", cfg->mounts[i], src,
                                 danger);
                if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
                        err_set(e, ERR_CONFIG, EINVAL,
                                "mount %s: %s is neither a directory nor a regular file",
                                cfg->mounts[i], real);
                        return NULL;
                }
                if (in_container)
                        log_info("mount %s: %s is a path on the engine's machine (corral runs in "
                                 "a container): the engine checks it",
                                 cfg->mounts[i], host);
                json_t *m = json_pack("{s:s, s:s}", "Source", src, "Target", target);
                if (!m || json_array_append_new(mounts, m) < 0) {
                        err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
                        return NULL;
                }
        }
        return TAKE_PTR(mounts);
}
