#include "cli/cli.h"

#include "core/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CORRAL_IMAGES_DIR
#define CORRAL_IMAGES_DIR "/usr/local/share/corral/images"
#endif

static int build_rootfs(const char *out)
{
        const char *dir = getenv("CORRAL_IMAGES_DIR");
        char script[4096];
        snprintf(script, sizeof(script), "%s/build-python.sh",
                 dir && *dir ? dir : CORRAL_IMAGES_DIR);
        /* The one command that stays unconfined: mmdebstrap needs root's
         * mounts, chroot and namespaces to build the rootfs. */
        fprintf(stderr,
                "corral: building the rootfs with %s (this command runs a root recipe and does "
                "not confine itself, unlike serve and run)\n",
                script);
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
                execl("/bin/bash", "bash", script, out, (char *)NULL);
                _exit(127);
        }
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
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

#define IMAGE_USAGE "usage: corral image build [--if-missing] [--tar ROOTFS.tar] [--image NAME]\n"

static bool image_present(struct engine *eng, const char *image)
{
        char path[600];
        struct err e = {0};
        snprintf(path, sizeof(path), "/images/%s/json", image);
        return engine_call(eng, "GET", path, NULL, NULL, &e) == 200;
}

static int import_tar(struct loop *l, struct engine *eng, const char *tar, const char *repo,
                      const char *tag)
{
        int fd = open(tar, O_RDONLY | O_CLOEXEC);
        struct import_state st = {0};
        char path[768];
        /* Podman 4.3 ignores `tag=` on import; repo=NAME:TAG works on both. */
        snprintf(path, sizeof(path), "/images/create?fromSrc=-&repo=%s:%s", repo, tag);
        fprintf(stderr, "corral: importing %s into %s as %s:%s\n", tar,
                engine_endpoint(eng)->display, repo, tag);
        if (fd < 0) {
                snprintf(st.msg, sizeof(st.msg), "cannot read %s: %s", tar, strerror(errno));
        } else if (engine_request_file(eng, "POST", path, "application/x-tar", fd, imported, &st,
                                       NULL) == 0) {
                while (!st.done)
                        loop_iterate(l, -1);
        }
        if (fd >= 0)
                close(fd);
        if (st.status != 200) {
                fprintf(stderr, "corral: importing the image failed: %s\n",
                        st.msg[0] ? st.msg : "no answer");
                return -EIO;
        }
        return 0;
}

int cli_image(int argc, char **argv)
{
        struct config cfg;
        char **rest;
        int n_rest;
        if (cli_config(argc, argv, &cfg, &rest, &n_rest) < 0)
                return 2;
        const char *tar = NULL;
        bool build = false, if_missing = false;
        for (int i = 0; i < n_rest; i++) {
                if (strcmp(rest[i], "build") == 0 && !build)
                        build = true;
                else if (strcmp(rest[i], "--tar") == 0 && i + 1 < n_rest)
                        tar = rest[++i];
                else if (strcmp(rest[i], "--if-missing") == 0)
                        if_missing = true;
                else {
                        build = false; /* anything else: show the usage */
                        break;
                }
        }
        free(rest);
        if (!build) {
                fprintf(stderr, IMAGE_USAGE);
                config_free(&cfg);
                return 2;
        }
        /* repo[:tag], where a ':' before the last '/' belongs to a registry port. */
        char repo[512], tag[128] = "latest";
        snprintf(repo, sizeof(repo), "%s", cfg.image);
        char *colon = strrchr(repo, ':');
        if (colon && !strchr(colon, '/')) {
                snprintf(tag, sizeof(tag), "%s", colon + 1);
                *colon = '\0';
        }
        for (const char *p = cfg.image; *p; p++)
                if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789._-/:", *p)) {
                        fprintf(stderr, "corral: image name \"%s\" is not valid\n", cfg.image);
                        config_free(&cfg);
                        return 2;
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
        } else if (if_missing && image_present(ce.eng, cfg.image)) {
                fprintf(stderr, "corral: %s already has %s\n", engine_endpoint(ce.eng)->display,
                        cfg.image);
                rc = 0;
        } else {
                if (!tar) {
                        int fd = mkstemps(tmp, 4);
                        if (fd < 0) {
                                fprintf(stderr, "corral: cannot create a temporary file: %s\n",
                                        strerror(errno));
                                goto out;
                        }
                        close(fd);
                        tar = tmp;
                        if (build_rootfs(tmp) < 0) {
                                fprintf(stderr, "corral: building the rootfs failed (see above)\n");
                                goto out;
                        }
                }
                if (import_tar(l, ce.eng, tar, repo, tag) == 0 &&
                    image_present(ce.eng, cfg.image)) {
                        fprintf(stderr, "corral: image %s is ready\n", cfg.image);
                        rc = 0;
                }
        }
out:
        if (tar == tmp)
                unlink(tmp);
        cli_engine_close(&ce);
        loop_free(l);
        config_free(&cfg);
        return rc;
}
