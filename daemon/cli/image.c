#include "cli/cli.h"

#include "core/buf.h"
#include "core/log.h"
#include "sandbox/images.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <curl/curl.h>
#include <time.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CORRAL_IMAGES_DIR
#define CORRAL_IMAGES_DIR "/usr/local/share/corral/images"
#endif

/* The profile NAME: the user's file beside corral's config wins, then
 * corral's own (images/profiles). 0 with the path, or -ENOENT. */
static int profile_path(const char *name, char *out, size_t size)
{
        char rel[128];
        snprintf(rel, sizeof(rel), "corral/images/%s.profile", name);
        _cleanup_free_ char *user = xdg_path("XDG_CONFIG_HOME", ".config", rel);
        if (user && access(user, R_OK) == 0) {
                snprintf(out, size, "%s", user);
                return 0;
        }
        const char *dir = getenv("CORRAL_IMAGES_DIR");
        snprintf(out, size, "%s/profiles/%s.profile", dir && *dir ? dir : CORRAL_IMAGES_DIR, name);
        return access(out, R_OK) == 0 ? 0 : -ENOENT;
}

static bool profile_name_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 64 || !(islower((unsigned char)s[0]) || isdigit((unsigned char)s[0])))
                return false;
        for (; *s; s++)
                if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) ||
                      strchr("._-", *s)))
                        return false;
        return true;
}

static int build_rootfs(const char *out, const char *profile)
{
        const char *dir = getenv("CORRAL_IMAGES_DIR");
        char script[4096];
        snprintf(script, sizeof(script), "%s/build.sh", dir && *dir ? dir : CORRAL_IMAGES_DIR);
        /* The one command that stays unconfined: mmdebstrap needs root's
         * mounts, chroot and namespaces to build the rootfs. */
        fprintf(stderr,
                "corral: building the rootfs with %s %s (this command runs a root recipe and does "
                "not confine itself, unlike serve and run)\n",
                script, profile);
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                /* Keep stdout clean: the recipe's chatter goes to stderr. */
                dup2(STDERR_FILENO, STDOUT_FILENO);
                /* libcurl's sockets (the engine check above) are not
                 * close-on-exec. Leaked into the recipe they also push
                 * mmdebstrap's status pipe to fd 10, which dash cannot
                 * redirect ("Bad fd number"), and the build fails. */
                close_range(3, ~0U, 0);
                /* A profile with "daemon: corral" puts this binary in. */
                char self[4096];
                ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
                if (k > 0) {
                        self[k] = '\0';
                        setenv("CORRAL_BINARY", self, 1);
                }
                execl("/bin/bash", "bash", script, out, profile, (char *)NULL);
                _exit(127);
        }
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* The image's profile.json (images/build.sh), read from the rootfs tarball,
 * or NULL: a tarball corral did not build. */
static json_t *tar_profile(const char *tar)
{
        struct archive *a = archive_read_new();
        json_t *found = NULL;
        if (!a)
                return NULL;
        archive_read_support_format_tar(a);
        if (archive_read_open_filename(a, tar, 1 << 16) == ARCHIVE_OK) {
                struct archive_entry *e;
                int r;
                /* ARCHIVE_WARN is an entry libarchive read but could not
                 * convert, such as a UTF-8 name (ca-certificates has some)
                 * in the C locale: the entries after it still count. */
                while (!found &&
                       ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN)) {
                        const char *name = archive_entry_pathname(e);
                        if (name && strncmp(name, "./", 2) == 0)
                                name += 2;
                        if (!name || strcmp(name, "usr/share/corral/profile.json") != 0 ||
                            archive_entry_size(e) > (1 << 20))
                                continue;
                        struct buf b;
                        buf_init(&b, 1 << 20);
                        char chunk[16384];
                        la_ssize_t k;
                        while ((k = archive_read_data(a, chunk, sizeof(chunk))) > 0)
                                buf_append_some(&b, chunk, (size_t)k);
                        found =
                            json_loadb(b.data ? b.data : "", b.len, JSON_REJECT_DUPLICATES, NULL);
                        buf_free(&b);
                        if (!json_is_object(found)) {
                                json_decref(found);
                                found = NULL;
                        }
                }
        }
        archive_read_free(a);
        return found;
}

/* A Debian version as people say it: 1:1.24.2-1+deb12u1 -> 1.24.2. */
static void upstream_version(const char *v, char *out, size_t size)
{
        const char *colon = strchr(v, ':');
        if (colon)
                v = colon + 1;
        size_t n = strcspn(v, "-+~");
        snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), v);
}

/* "numpy 1.24.2, pandas 1.5.3, ...": the Python packages the profile asked
 * for, for the tools' descriptions. */
static void package_summary(json_t *profile, char *out, size_t size)
{
        json_t *versions = json_object_get(profile, "packages");
        size_t i, k = 0;
        json_t *p;
        out[0] = '\0';
        json_array_foreach(json_object_get(profile, "requested"), i, p)
        {
                const char *name = json_string_value(p);
                const char *v = json_string_value(json_object_get(versions, name ? name : ""));
                if (!name || !v || strncmp(name, "python3-", 8) != 0)
                        continue;
                char ver[64];
                upstream_version(v, ver, sizeof(ver));
                int w = snprintf(out + k, size - k, "%s%s %s", k ? ", " : "", name + 8, ver);
                if (w < 0 || (size_t)w >= size - k) {
                        out[k] = '\0';
                        break;
                }
                k += (size_t)w;
        }
}

/* Label values go into a Dockerfile LABEL line: keep to a plain set. */
static void label_clean(char *s)
{
        for (; *s; s++)
                if (!isalnum((unsigned char)*s) && !strchr(" ,.:+~_-/", *s))
                        *s = '_';
}

struct import_state {
        bool done;
        long status;
        char msg[1100];
};

static void imported(void *userdata, long status, json_t *body, const struct err *e)
{
        struct import_state *st = userdata;
        st->done = true;
        st->status = status;
        if (e)
                snprintf(st->msg, sizeof(st->msg), "%s", e->msg);
        else if (status != 200)
                snprintf(st->msg, sizeof(st->msg), "HTTP %ld: %s", status,
                         engine_error_message(body));
}

#define IMAGE_USAGE                                                                                \
        "usage: corral image build [--profile NAME] [--image NAME] [--if-missing] [--tar "         \
        "ROOTFS.tar]\n"                                                                            \
        "       corral image list\n"

static bool image_present(struct engine *eng, const char *image)
{
        char path[600];
        struct err e = {0};
        snprintf(path, sizeof(path), "/images/%s/json", image);
        return engine_call(eng, "GET", path, NULL, NULL, &e) == 200;
}

struct size_text {
        char text[32];
};

/* The image's size as the engine counts it (its layers, uncompressed). */
static struct size_text image_size(struct engine *eng, const char *image)
{
        struct size_text t = {"size unknown"};
        char path[600];
        struct err e = {0};
        json_auto_t *body = NULL;
        snprintf(path, sizeof(path), "/images/%s/json", image);
        if (engine_call(eng, "GET", path, NULL, &body, &e) == 200 &&
            json_is_number(json_object_get(body, "Size")))
                snprintf(t.text, sizeof(t.text), "%.1f MB",
                         json_number_value(json_object_get(body, "Size")) / 1e6);
        return t;
}

static int import_tar(struct loop *l, struct engine *eng, const char *tar, const char *repo,
                      const char *tag)
{
        _cleanup_close_ int fd = open(tar, O_RDONLY | O_CLOEXEC);
        struct import_state st = {0};
        char path[4096];
        /* Podman 4.3 ignores `tag=` on import; repo=NAME:TAG works on both. */
        int n = snprintf(path, sizeof(path), "/images/create?fromSrc=-&repo=%s:%s", repo, tag);
        /* Labels, from the profile.json images/build.sh put in: what
         * `corral image list` and the tools' descriptions show, and how
         * serve finds the images corral built (changes=LABEL works on both
         * engines). */
        json_auto_t *profile = tar_profile(tar);
        const char *pname = json_string_value(json_object_get(profile, "profile"));
        if (pname) {
                char summary[600], built[32], name[80];
                time_t now = time(NULL);
                strftime(built, sizeof(built), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
                package_summary(profile, summary, sizeof(summary));
                snprintf(name, sizeof(name), "%s", pname);
                label_clean(name);
                label_clean(summary);
                /* An image of corral itself runs it, and is never offered
                 * to the code as a sandbox (io.corral.daemon). */
                bool daemon = json_is_string(json_object_get(profile, "daemon"));
                char changes[5][800];
                size_t k = 0;
                snprintf(changes[k++], sizeof(changes[0]), "LABEL io.corral.profile=\"%s\"", name);
                snprintf(changes[k++], sizeof(changes[0]), "LABEL io.corral.packages=\"%s\"",
                         summary);
                snprintf(changes[k++], sizeof(changes[0]), "LABEL io.corral.built=\"%s\"", built);
                if (daemon) {
                        snprintf(changes[k++], sizeof(changes[0]),
                                 "LABEL io.corral.daemon=\"corral\"");
                        snprintf(changes[k++], sizeof(changes[0]),
                                 "ENTRYPOINT [\"/usr/bin/corral\"]");
                }
                for (size_t i = 0; i < k && n > 0 && (size_t)n < sizeof(path); i++) {
                        char *esc = curl_easy_escape(NULL, changes[i], 0);
                        n += snprintf(path + n, sizeof(path) - (size_t)n, "&changes=%s",
                                      esc ? esc : "");
                        curl_free(esc);
                }
                fprintf(stderr, "corral: profile %s: %s\n", name,
                        daemon       ? "corral itself"
                        : summary[0] ? summary
                                     : "python3");
        } else {
                fprintf(
                    stderr,
                    "corral: %s has no /usr/share/corral/profile.json: imported without labels, "
                    "so serve offers it only when the `images` setting names it\n",
                    tar);
        }
        if (n < 0 || (size_t)n >= sizeof(path)) {
                fprintf(stderr, "corral: the image's labels are too long\n");
                return -EIO;
        }
        fprintf(stderr, "corral: importing %s into %s as %s:%s\n", tar,
                engine_endpoint(eng)->display, repo, tag);
        struct stat fs;
        if (fd < 0) {
                snprintf(st.msg, sizeof(st.msg), "cannot read %s: %s", tar, strerror(errno));
        } else if (fstat(fd, &fs) < 0 || !S_ISREG(fs.st_mode) || fs.st_size < 1024) {
                /* A tar has two blocks at least: an empty file, a device or
                 * a pipe would replace the image with nothing. */
                snprintf(st.msg, sizeof(st.msg),
                         "%s is not a rootfs tarball (a regular file of "
                         "1 KiB or more)",
                         tar);
        } else if (engine_request_file(eng, "POST", path, "application/x-tar", fd, imported, &st,
                                       NULL) == 0) {
                while (!st.done)
                        loop_iterate(l, -1);
        }
        if (st.status != 200) {
                fprintf(stderr, "corral: importing the image failed: %s\n",
                        st.msg[0] ? st.msg : "no answer");
                return -EIO;
        }
        return 0;
}

/* `corral image list`: what corral built on this engine. */
static int list_images(struct engine *eng, const struct config *cfg)
{
        json_auto_t *list = NULL;
        struct err e = {0};
        long st = engine_call(
            eng, "GET", "/images/json?filters=%7B%22label%22%3A%5B%22io.corral.profile%22%5D%7D",
            NULL, &list, &e);
        if (st != 200) {
                fprintf(stderr, "corral: cannot list images: %s\n",
                        e.msg[0] ? e.msg : engine_error_message(list));
                return 1;
        }
        printf("%-28s %-12s %9s %-20s %s\n", "IMAGE", "PROFILE", "SIZE", "BUILT", "PACKAGES");
        size_t unnamed = 0;
        size_t i, j;
        json_t *img, *tag;
        bool default_seen = false;
        json_array_foreach(list, i, img)
        {
                json_t *labels = json_object_get(img, "Labels");
                json_array_foreach(json_object_get(img, "RepoTags"), j, tag)
                {
                        const char *t = json_string_value(tag);
                        if (!t)
                                continue;
                        t = sandbox_image_plain(t);
                        if (strcmp(t, "<none>:<none>") == 0) {
                                unnamed++; /* an older build, its name taken by a newer one */
                                continue;
                        }
                        bool is_default = strcmp(t, cfg->image) == 0;
                        default_seen |= is_default;
                        char size[32];
                        snprintf(size, sizeof(size), "%.0f MB",
                                 json_number_value(json_object_get(img, "Size")) / 1e6);
                        const char *built =
                            json_string_value(json_object_get(labels, "io.corral.built"));
                        const char *pk =
                            json_string_value(json_object_get(labels, "io.corral.packages"));
                        if (json_object_get(labels, "io.corral.daemon"))
                                pk = "corral itself, not a sandbox";
                        printf("%-28s %-12s %9s %-20s %s%s\n", t,
                               json_string_value(json_object_get(labels, "io.corral.profile")),
                               size, built ? built : "?", pk && *pk ? pk : "python3",
                               is_default ? "  (the default)" : "");
                }
        }
        if (unnamed)
                printf("(and %zu older builds that newer ones replaced, without a name: the "
                       "engine's image prune removes them)\n",
                       unnamed);
        if (!default_seen)
                printf(
                    "(the default image, %s, is not among them: `corral image build` makes it)\n",
                    cfg->image);
        return 0;
}

int cli_image(int argc, char **argv)
{
        _cleanup_config_ struct config cfg = {0};
        _cleanup_free_ char **rest = NULL;
        int n_rest;
        /* Whether --image was given: else --profile names the image. */
        bool image_given = false;
        for (int i = 0; i < argc; i++)
                image_given |=
                    strcmp(argv[i], "--image") == 0 || strncmp(argv[i], "--image=", 8) == 0;
        if (cli_config(argc, argv, &cfg, &rest, &n_rest) < 0)
                return 2;
        const char *tar = NULL, *profile = NULL;
        bool build = false, list = false, if_missing = false, bad = n_rest == 0;
        for (int i = 0; i < n_rest && !bad; i++) {
                if (i == 0 && strcmp(rest[i], "build") == 0)
                        build = true;
                else if (i == 0 && strcmp(rest[i], "list") == 0)
                        list = true;
                else if (build && strcmp(rest[i], "--tar") == 0 && i + 1 < n_rest)
                        tar = rest[++i];
                else if (build && strcmp(rest[i], "--profile") == 0 && i + 1 < n_rest)
                        profile = rest[++i];
                else if (build && strcmp(rest[i], "--if-missing") == 0)
                        if_missing = true;
                else
                        bad = true;
        }
        if (bad) {
                fprintf(stderr, IMAGE_USAGE);
                return 2;
        }
        char name[300], inferred[80] = "", pfile[4096] = "";
        if (build) {
                /* corral-NAME, but corral's own images (profiles corral
                 * and corral-*) are named after their profile. */
                if (profile && !image_given && strncmp(profile, "corral", 6) == 0)
                        snprintf(name, sizeof(name), "%s:latest", profile);
                else if (profile && !image_given)
                        snprintf(name, sizeof(name), "corral-%s:latest", profile);
                else
                        snprintf(name, sizeof(name), "%s", cfg.image);
                if (!profile) {
                        /* corral-NAME[:TAG] is built from profile NAME. */
                        const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
                        if (strncmp(base, "corral-", 7) == 0)
                                snprintf(inferred, sizeof(inferred), "%.*s",
                                         (int)strcspn(base + 7, ":@"), base + 7);
                        profile = inferred;
                }
                if (!tar && !profile_name_ok(profile)) {
                        fprintf(
                            stderr,
                            "corral: which profile makes %s? Give --profile NAME (python, data, "
                            "or a NAME.profile of yours in $XDG_CONFIG_HOME/corral/images)\n",
                            name);
                        return 2;
                }
                /* corral-NAME is corral's own image where a profile
                 * corral-NAME exists (corral-node): a profile NAME of yours
                 * would take its name. */
                char own[96], ownfile[4096];
                snprintf(own, sizeof(own), "corral-%s", profile);
                if (!image_given && strncmp(profile, "corral", 6) != 0 &&
                    profile_path(own, ownfile, sizeof(ownfile)) == 0) {
                        fprintf(stderr,
                                "corral: %s:latest is the name of corral's own image (profile "
                                "%s): name your profile otherwise, or give --image\n",
                                own, own);
                        return 2;
                }
                if (!tar && profile_path(profile, pfile, sizeof(pfile)) < 0) {
                        fprintf(stderr,
                                "corral: no profile \"%s\": corral has %s/profiles/*.profile, and "
                                "yours go in $XDG_CONFIG_HOME/corral/images/%s.profile\n",
                                profile,
                                getenv("CORRAL_IMAGES_DIR") ? getenv("CORRAL_IMAGES_DIR")
                                                            : CORRAL_IMAGES_DIR,
                                profile);
                        return 2;
                }
                if (!config_image_name_ok(name)) {
                        fprintf(stderr, "corral: image name \"%s\" is not valid\n", name);
                        return 2;
                }
        }
        /* repo[:tag], where a ':' before the last '/' belongs to a registry port. */
        char repo[512], tag[128] = "latest";
        snprintf(repo, sizeof(repo), "%s", build ? name : "");
        char *colon = strrchr(repo, ':');
        if (colon && !strchr(colon, '/')) {
                snprintf(tag, sizeof(tag), "%s", colon + 1);
                *colon = '\0';
        }

        /* The engine first: the one `corral serve` would use, so the image
         * lands where sandboxes will look for it, and a missing engine fails
         * before a minute of building. */
        struct loop *l;
        if (loop_new(&l) < 0)
                return 1;
        struct cli_engine ce;
        cli_engine_open(&ce, l, &cfg, true);
        char tmp[] = "/var/tmp/corral-rootfs-XXXXXX.tar";
        int rc = 1;
        if (!ce.eng) {
                fprintf(stderr, "corral: %s\n", ce.err.msg);
        } else if (list) {
                rc = list_images(ce.eng, &cfg);
        } else if (if_missing && image_present(ce.eng, name)) {
                fprintf(stderr, "corral: %s already has %s\n", engine_endpoint(ce.eng)->display,
                        name);
                rc = 0;
        } else {
                long long t0 = now_ms();
                if (!tar) {
                        int fd = mkstemps(tmp, 4);
                        if (fd < 0) {
                                fprintf(stderr, "corral: cannot create a temporary file: %s\n",
                                        strerror(errno));
                                goto out;
                        }
                        close(fd);
                        tar = tmp;
                        if (build_rootfs(tmp, pfile) < 0) {
                                fprintf(stderr, "corral: building the rootfs failed (see above)\n");
                                goto out;
                        }
                }
                if (import_tar(l, ce.eng, tar, repo, tag) == 0 && image_present(ce.eng, name)) {
                        fprintf(stderr, "corral: image %s is ready: %s, %s in %.0f s\n", name,
                                image_size(ce.eng, name).text,
                                tar == tmp ? "built and imported" : "imported",
                                (now_ms() - t0) / 1000.0);
                        rc = 0;
                }
        }
out:
        if (tar == tmp)
                unlink(tmp);
        cli_engine_close(&ce);
        loop_free(l);
        return rc;
}
