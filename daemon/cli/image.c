#include "cli/cli.h"

#include "core/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#ifndef CORRAL_IMAGES_DIR
#define CORRAL_IMAGES_DIR "/usr/local/share/corral/images"
#endif

static int build_rootfs(const char *out)
{
        const char *dir = getenv("CORRAL_IMAGES_DIR");
        char script[4096];
        snprintf(script, sizeof(script), "%s/build-python.sh",
                 dir && *dir ? dir : CORRAL_IMAGES_DIR);
        fprintf(stderr, "corral: building the rootfs with %s\n", script);
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                /* Keep stdout clean: the recipe's chatter goes to stderr. */
                dup2(STDERR_FILENO, STDOUT_FILENO);
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

int cli_image(int argc, char **argv)
{
        struct config cfg;
        char **rest;
        int n_rest;
        if (cli_config(argc, argv, &cfg, &rest, &n_rest) < 0)
                return 2;
        const char *tar = NULL;
        bool build = false;
        for (int i = 0; i < n_rest; i++) {
                if (strcmp(rest[i], "build") == 0 && !build)
                        build = true;
                else if (strcmp(rest[i], "--tar") == 0 && i + 1 < n_rest)
                        tar = rest[++i];
                else {
                        fprintf(stderr,
                                "usage: corral image build [--tar ROOTFS.tar] [--image NAME]\n");
                        free(rest);
                        return 2;
                }
        }
        free(rest);
        if (!build) {
                fprintf(stderr, "usage: corral image build [--tar ROOTFS.tar] [--image NAME]\n");
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
        for (const char *p = repo; *p; p++)
                if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789._-/:", *p)) {
                        fprintf(stderr, "corral: image name \"%s\" is not valid\n", cfg.image);
                        return 2;
                }

        char tmp[] = "/var/tmp/corral-rootfs-XXXXXX.tar";
        if (!tar) {
                int fd = mkstemps(tmp, 4);
                if (fd < 0) {
                        fprintf(stderr, "corral: cannot create a temporary file: %s\n",
                                strerror(errno));
                        return 1;
                }
                close(fd);
                if (build_rootfs(tmp) < 0) {
                        unlink(tmp);
                        fprintf(stderr, "corral: building the rootfs failed (see above)\n");
                        return 1;
                }
                tar = tmp;
        }
        struct loop *l;
        if (loop_new(&l) < 0)
                return 1;
        struct cli_engine ce;
        cli_engine_open(&ce, l, &cfg, true);
        int rc = 1;
        if (!ce.eng) {
                fprintf(stderr, "corral: %s\n", ce.err.msg);
        } else {
                int fd = open(tar, O_RDONLY | O_CLOEXEC);
                char path[768];
                /* Podman 4.3 ignores `tag=` on import; repo=NAME:TAG works on
                 * both engines. */
                snprintf(path, sizeof(path), "/images/create?fromSrc=-&repo=%s:%s", repo, tag);
                fprintf(stderr, "corral: importing %s into %s as %s:%s\n", tar,
                        engine_endpoint(ce.eng)->display, repo, tag);
                struct import_state st = {0};
                if (fd < 0)
                        snprintf(st.msg, sizeof(st.msg), "cannot read %s: %s", tar,
                                 strerror(errno));
                else if (engine_request_file(ce.eng, "POST", path, "application/x-tar", fd,
                                             imported, &st, NULL) == 0) {
                        while (!st.done)
                                loop_iterate(l, -1);
                }
                if (fd >= 0)
                        close(fd);
                char check[600];
                snprintf(check, sizeof(check), "/images/%s/json", cfg.image);
                struct err e = {0};
                if (st.status == 200 && engine_call(ce.eng, "GET", check, NULL, NULL, &e) == 200) {
                        fprintf(stderr, "corral: image %s is ready\n", cfg.image);
                        rc = 0;
                } else {
                        fprintf(stderr, "corral: importing the image failed: %s\n",
                                st.msg[0] ? st.msg : e.msg);
                }
        }
        if (tar == tmp)
                unlink(tmp);
        cli_engine_close(&ce);
        loop_free(l);
        config_free(&cfg);
        return rc;
}
