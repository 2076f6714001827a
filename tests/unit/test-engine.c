/* Engine endpoints: parsing the URL forms, and discovery in DESIGN's order.
 * No engine is needed: discovery is pointed at sockets this test makes. */
#include "engine/engine.h"

#include "tap.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const struct ep_case {
        const char *url;
        bool good;
        const char *unix_path, *host;
        int port;
        const char *display;
} ep_cases[] = {
    {"unix:///x", true, "/x", NULL, 0, "/x"},
    {"/x", true, "/x", NULL, 0, "/x"},
    {"unix:///run/podman/podman.sock", true, "/run/podman/podman.sock", NULL, 0,
     "/run/podman/podman.sock"},
    {"tcp://h:1", true, NULL, "h", 1, "h:1"},
    {"tcp://127.0.0.1:2375", true, NULL, "127.0.0.1", 2375, "127.0.0.1:2375"},
    {"tcp://engine.example:65535", true, NULL, "engine.example", 65535, "engine.example:65535"},
    {"tcp://h", false},
    {"tcp://h:0", false},
    {"tcp://h:65536", false},
    {"tcp://h:", false},
    {"tcp://:80", false},
    {"tcp://h:80x", false},
    {"tcp://h:-1", false},
    {"tcp://h:99999999999999999999", false},
    {"tcp://", false},
    {"http://h:1", false},
    {"https://h:2376", false},
    {"ssh://core@h", false},
    {"npipe:////./pipe/docker_engine", false},
    {"unix://", false},
    {"unix://relative.sock", false},
    {"relative.sock", false},
    {"", false},
};

static void test_endpoint_parse(void)
{
        for (size_t i = 0; i < ARRAY_SIZE(ep_cases); i++) {
                const struct ep_case *tc = &ep_cases[i];
                struct engine_endpoint ep = {0};
                struct err e = {0};
                int rc = engine_endpoint_parse(tc->url, &ep, &e);
                if (!tc->good) {
                        is_int(rc, -EINVAL, "\"%s\" is refused", tc->url);
                        like(e.msg, tc->url, "... the message quotes it");
                        ok(ep.unix_path == NULL && ep.host == NULL && ep.display == NULL,
                           "... and the output is untouched");
                        continue;
                }
                is_int(rc, 0, "\"%s\" parses", tc->url);
                is_str(ep.unix_path, tc->unix_path, "... unix path");
                is_str(ep.host, tc->host, "... host");
                is_int(ep.port, tc->port, "... port");
                is_str(ep.display, tc->display, "... display");
                engine_endpoint_done(&ep);
                ok(ep.display == NULL, "... engine_endpoint_done clears it");
        }

        /* sun_path holds 107 bytes and the NUL. */
        char url[160] = "unix://";
        memset(url + 7, 'a', 107);
        url[7] = '/';
        url[7 + 107] = '\0';
        struct engine_endpoint ep = {0};
        struct err e = {0};
        is_int(engine_endpoint_parse(url, &ep, &e), 0, "a 107-byte socket path fits");
        engine_endpoint_done(&ep);
        url[7 + 107] = 'a';
        url[7 + 108] = '\0';
        is_int(engine_endpoint_parse(url, &ep, &e), -EINVAL, "a 108-byte socket path does not");
        like(e.msg, "108", "... saying why");

        /* An IPv6 literal must lose its brackets before getaddrinfo (used by
         * attach.c's connect_socket) can resolve it. */
        e = (struct err){0};
        if (engine_endpoint_parse("tcp://[::1]:2375", &ep, &e) == 0) {
                is_str(ep.host, "::1", "IPv6 literal host without brackets");
                engine_endpoint_done(&ep);
        } else {
                ok(false, "IPv6 literal parses (%s)", e.msg);
        }
}

static char tmpdir[64];

static int listen_unix(const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0) {
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        return fd;
}

static void set_or_unset(const char *var, const char *value)
{
        if (value)
                setenv(var, value, 1);
        else
                unsetenv(var);
}

static void test_discover(void)
{
        char live[128], dead[128], xdg[128], podman_dir[160], xdg_sock[192];
        snprintf(live, sizeof(live), "%s/live.sock", tmpdir);
        snprintf(dead, sizeof(dead), "%s/dead.sock", tmpdir);
        snprintf(xdg, sizeof(xdg), "%s/xdg", tmpdir);
        snprintf(podman_dir, sizeof(podman_dir), "%s/podman", xdg);
        snprintf(xdg_sock, sizeof(xdg_sock), "%s/podman.sock", podman_dir);
        int live_fd = listen_unix(live);
        /* A socket file nobody listens on any more: connect is refused. */
        int dead_fd = listen_unix(dead);
        if (dead_fd >= 0)
                close(dead_fd);
        mkdir(xdg, 0700);
        mkdir(podman_dir, 0700);
        int xdg_fd = listen_unix(xdg_sock);
        if (!ok(live_fd >= 0 && xdg_fd >= 0, "listening sockets for discovery")) {
                skip(1, "no unix sockets");
                return;
        }
        char live_url[160], dead_url[160], xdg_url[220];
        snprintf(live_url, sizeof(live_url), "unix://%s", live);
        snprintf(dead_url, sizeof(dead_url), "unix://%s", dead);
        snprintf(xdg_url, sizeof(xdg_url), "unix://%s", xdg_sock);

        static const char *const nowhere = "/nonexistent-corral-test";
        const struct {
                const char *name, *container_host, *docker_host, *xdg_runtime_dir, *want;
                int rc;
                const char *msg; /* in the message, when rc < 0 */
        } cases[] = {
            {"CONTAINER_HOST tcp:// is taken as is", "tcp://10.0.0.1:2375", live_url, xdg,
             "tcp://10.0.0.1:2375", 0, NULL},
            {"CONTAINER_HOST before DOCKER_HOST", live_url, "tcp://h:2", xdg, live_url, 0, NULL},
            {"DOCKER_HOST tcp:// when CONTAINER_HOST is unset", NULL, "tcp://h:2", xdg, "tcp://h:2",
             0, NULL},
            /* A named engine is the only candidate: never the next one. */
            {"ssh:// is refused, not skipped", "ssh://core@h", live_url, xdg, NULL,
             -EPROTONOSUPPORT, "CONTAINER_HOST is ssh://core@h"},
            {"a dead named socket is an error, not skipped", dead_url, live_url, xdg, NULL,
             -ECONNREFUSED, dead},
            {"a dead DOCKER_HOST is an error, not the XDG socket", NULL, dead_url, xdg, NULL,
             -ECONNREFUSED, "DOCKER_HOST names the engine at"},
            {"empty variables are skipped", "", "", xdg, xdg_url, 0, NULL},
            {"XDG_RUNTIME_DIR podman socket", NULL, NULL, xdg, xdg_url, 0, NULL},
            {"a relative XDG_RUNTIME_DIR is ignored", NULL, live_url, "relative", live_url, 0,
             NULL},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                set_or_unset("CONTAINER_HOST", cases[i].container_host);
                set_or_unset("DOCKER_HOST", cases[i].docker_host);
                set_or_unset("XDG_RUNTIME_DIR", cases[i].xdg_runtime_dir);
                char *url = NULL;
                struct err e = {0};
                int rc = engine_discover(&url, &e);
                is_int(rc, cases[i].rc, "discover: %s", cases[i].name);
                is_str(url, cases[i].want, "... found %s", cases[i].want ? cases[i].want : "none");
                if (cases[i].msg)
                        like(e.msg, cases[i].msg, "... the message says why");
                free(url);
        }

        /* Nothing answers: only meaningful where the fallbacks are absent. */
        set_or_unset("CONTAINER_HOST", NULL);
        set_or_unset("DOCKER_HOST", NULL);
        set_or_unset("XDG_RUNTIME_DIR", nowhere);
        if (access("/run/podman/podman.sock", F_OK) == 0 ||
            access("/var/run/docker.sock", F_OK) == 0) {
                skip(3, "a system engine socket exists on this host");
        } else {
                char *url = NULL;
                struct err e = {0};
                is_int(engine_discover(&url, &e), -ENOENT, "discover: nothing answers");
                like(e.msg, nowhere, "... the message lists what was tried");
                like(e.msg, "systemctl", "... and how to start an engine");
        }
        unsetenv("CONTAINER_HOST");
        unsetenv("XDG_RUNTIME_DIR");
        close(live_fd);
        close(xdg_fd);
        unlink(live);
        unlink(dead);
        unlink(xdg_sock);
        rmdir(podman_dir);
        rmdir(xdg);
}

static void test_kind(void)
{
        static const char podman[] = "Libpod-Api-Version: 4.3.1\r\n",
                          api[] = "Api-Version: 1.41\r\n", server[] = "Server: Docker/20.10\r\n",
                          lower[] = "libpod-api-version: 5.0\r\n";
        is_int(engine_kind_of_header(podman, strlen(podman)), ENGINE_PODMAN,
               "Libpod-Api-Version: Podman");
        is_int(engine_kind_of_header(lower, strlen(lower)), ENGINE_PODMAN,
               "header names in any case");
        is_int(engine_kind_of_header(api, strlen(api)), ENGINE_DOCKER, "Api-Version: Docker");
        is_int(engine_kind_of_header(server, strlen(server)), ENGINE_UNKNOWN,
               "any other header: unknown");
        is_int(engine_kind_of_header(podman, 10), ENGINE_UNKNOWN, "a cut line: unknown");
}

int main(void)
{
        test_kind();
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/corral-test-XXXXXX");
        if (!mkdtemp(tmpdir)) {
                perror("mkdtemp");
                return 1;
        }
        test_endpoint_parse();
        test_discover();
        rmdir(tmpdir);
        return done_testing();
}
