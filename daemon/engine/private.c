#include "engine/private.h"

#include "core/log.h"

#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

static bool socket_answers(const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        return connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
}

int private_engine_start(struct private_engine *pe, const char *runtime, struct err *e)
{
        *pe = (struct private_engine){.pid = -1};
        _cleanup_free_ char *podman = path_find("podman");
        if (!podman)
                return -ENOENT;
        char dir[256];
        int r = runtime_dir(dir, sizeof(dir), e);
        if (r < 0)
                return r;
        if (asprintf(&pe->path, "%s/podman-%d.sock", dir, (int)getpid()) < 0 ||
            asprintf(&pe->url, "unix://%s", pe->path) < 0)
                return -ENOMEM;
        unlink(pe->path);
        char log_path[300];
        snprintf(log_path, sizeof(log_path), "%s/podman-%d.log", dir, (int)getpid());
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0)
                return err_set(e, ERR_ENGINE, errno, "cannot start podman: %s", strerror(errno));
        if (pid == 0) {
                /* The service must not outlive corral, even after kill -9. */
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (getppid() != parent)
                        _exit(1);
                sigset_t all;
                sigfillset(&all);
                sigprocmask(SIG_UNBLOCK, &all, NULL);
                /* Its own session: a Ctrl-C or a signal to corral's process
                 * group must not stop the engine while corral still removes
                 * its containers; corral stops it last. */
                setsid();
                /* conmon writes files (an "oom" marker) into the working
                 * directory it inherits: not the user's. */
                if (chdir("/") < 0)
                        _exit(1);
                int null = open("/dev/null", O_RDWR | O_CLOEXEC);
                dup2(null, STDIN_FILENO);
                dup2(null, STDOUT_FILENO); /* stdout belongs to the MCP host */
                /* Podman's own chatter goes to a log beside the socket, not
                 * into the host's log of corral. */
                int logfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                if (logfd >= 0)
                        dup2(logfd, STDERR_FILENO);
                if (runtime)
                        execl(podman, "podman", "--runtime", runtime, "system", "service",
                              "--time=0", pe->url, (char *)NULL);
                else
                        execl(podman, "podman", "system", "service", "--time=0", pe->url,
                              (char *)NULL);
                _exit(127);
        }
        pe->pid = pid;
        log_info("started a private podman service (pid %d) at %s; its log: %s", (int)pid, pe->path,
                 log_path);
        /* Polled often: every corral that starts its own engine waits
         * here before its first sandbox (15 s at most). */
        for (int i = 0; i < 1500; i++) {
                if (socket_answers(pe->path)) {
                        /* Kept only while it runs: a failed start leaves it. */
                        pe->log = strdup(log_path);
                        return 0;
                }
                int status;
                if (waitpid(pid, &status, WNOHANG) == pid) {
                        pe->pid = -1;
                        private_engine_stop(pe);
                        return err_set(e, ERR_ENGINE, ECHILD,
                                       "a private `podman system service` exited at once (status "
                                       "%d): see %s, or run `podman info`",
                                       WIFEXITED(status) ? WEXITSTATUS(status) : -1, log_path);
                }
                nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000}, NULL);
        }
        private_engine_stop(pe);
        return err_set(e, ERR_ENGINE, ETIMEDOUT,
                       "a private `podman system service` did not open its socket within 15 s");
}

void private_engine_stop(struct private_engine *pe)
{
        if (pe->pid > 0) {
                kill(pe->pid, SIGTERM);
                for (int i = 0; i < 100; i++) {
                        if (waitpid(pe->pid, NULL, WNOHANG) == pe->pid) {
                                pe->pid = -1;
                                break;
                        }
                        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000000}, NULL);
                }
                if (pe->pid > 0) {
                        kill(pe->pid, SIGKILL);
                        waitpid(pe->pid, NULL, 0);
                }
        }
        if (pe->path)
                unlink(pe->path);
        if (pe->log)
                unlink(pe->log);
        free(pe->log);
        free(pe->path);
        free(pe->url);
        *pe = (struct private_engine){.pid = -1};
}
