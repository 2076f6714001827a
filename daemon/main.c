/* corral: command line. `serve` (the default) is the stdio MCP server; `run`,
 * `doctor` and `image build` are for people and scripts. The commands parse
 * and print; the work is done in core/, engine/, sandbox/ and mcp/. */
#include "cli/cli.h"

#include <cap-ng.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* As a container's entry point (corral's own image) corral is pid 1, and
 * pid 1 inherits every orphan of its namespace: what the stdio servers it
 * starts leave behind (npx and sh wrappers do) would stay zombies, as
 * corral waits only for its own children. So pid 1 forks: the child goes
 * on as corral, and the parent, holding no capability, only reaps every
 * child and passes signals on (as tini does), then exits as corral did.
 * Signals are blocked before the fork, so none is lost between the two:
 * pid 1 gets those it has blocked, and takes them with sigwaitinfo. */
static void init_if_pid1(void)
{
        if (getpid() != 1)
                return;
        sigset_t all, old;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, &old);
        /* An ignored SIGCHLD (inherited across exec) would reap children
         * unseen, and corral's exit would never be known. */
        signal(SIGCHLD, SIG_DFL);
        pid_t child = fork();
        if (child <= 0) { /* corral itself (or no fork: corral, unreaped) */
                sigprocmask(SIG_SETMASK, &old, NULL);
                return;
        }
        /* stdin and stdout are corral's alone: its host sees EOF when corral
         * closes stdout, not when this process does. */
        close(STDIN_FILENO);
        close(STDOUT_FILENO);
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        capng_clear(CAPNG_SELECT_BOTH);
        if (capng_apply(CAPNG_SELECT_BOTH) != 0)
                fprintf(stderr, "corral: its reaper (pid 1) could not drop its capabilities\n");
        for (;;) {
                siginfo_t si;
                int sig = sigwaitinfo(&all, &si);
                if (sig < 0)
                        continue;
                if (sig != SIGCHLD) {
                        /* A terminal's ^C or ^\ (SI_KERNEL) reached corral
                         * too, in the same process group: once is enough. */
                        if (si.si_code != SI_KERNEL)
                                kill(child, sig);
                        continue;
                }
                int st;
                pid_t pid;
                while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
                        if (pid == child)
                                _exit(WIFEXITED(st)     ? WEXITSTATUS(st)
                                      : WIFSIGNALED(st) ? 128 + WTERMSIG(st)
                                                        : 1);
        }
}

static void usage(FILE *f)
{
        fprintf(
            f,
            "usage: corral [serve] [OPTIONS]          stdio MCP server (what MCP hosts start);\n"
            "                                          with no settings, relays to a running "
            "service\n"
            "       corral serve --listen ADDR[,ADDR]  the service: unix[:PATH], tcp:HOST:PORT\n"
            "       corral connect [--socket PATH] [--as NAME]\n"
            "                                          stdio MCP server relaying to the service\n"
            "       corral run [OPTIONS] -c CODE | FILE | -   run Python once in a sandbox\n"
            "       corral run --shell [OPTIONS] -c COMMAND   run a shell command once\n"
            "       corral doctor [OPTIONS]           check the engine, image and host\n"
            "       corral image build [--profile NAME] [--if-missing] [--tar F]\n"
            "                                         build a sandbox image (data, python, yours)\n"
            "       corral image list                 the images corral built\n"
            "       corral status [--json]            pool figures of running instances\n"
            "       corral version\n"
            "\n"
            "Options (each also CORRAL_<NAME> in the environment, or a key in the JSON\n"
            "config file, by default $XDG_CONFIG_HOME/corral/config.json):\n"
            "  --config FILE        read settings from FILE\n"
            "  --engine URL         unix:///path/to.sock or tcp://host:port\n"
            "  --image NAME         default sandbox image (default corral-data:latest)\n"
            "  --memory SIZE        memory limit, no swap (default 512m)\n"
            "  --pids N             process limit (default 128)\n"
            "  --cpus N             CPU limit (default 1)\n"
            "  --timeout-s S        default time limit per call (default 30)\n"
            "  --max-timeout-s S    cap on a caller's timeout_s (default 600)\n"
            "  --start-timeout-s S  bound on starting a sandbox (default 60)\n"
            "  --output-limit SIZE  output kept per stream (default 1m)\n"
            "  --max-frame SIZE     largest JSON message on any link (default 16m)\n"
            "  --tmp-size SIZE      size of /tmp in the sandbox (default 64m)\n"
            "  --workspace-size SIZE size of /workspace (default 256m)\n"
            "  --max-sandboxes N    sandboxes at once (default 16)\n"
            "  --max-queue N        calls waiting for a sandbox (default 256)\n"
            "  --log-level LEVEL    error, warning, info, debug (default info)\n"
            "  --images, --preload, --mounts LIST  comma-separated (README: Images, Host data)\n");
}

int main(int argc, char **argv)
{
        init_if_pid1();
        const char *cmd = "serve";
        int first = 1;
        if (argc > 1 && argv[1][0] != '-') {
                cmd = argv[1];
                first = 2;
        }
        if (strcmp(cmd, "help") == 0 ||
            (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))) {
                usage(stdout);
                return 0;
        }
        if (strcmp(cmd, "version") == 0 || (argc > 1 && strcmp(argv[1], "--version") == 0)) {
                printf("corral %s\n", CORRAL_VERSION);
                return 0;
        }
        if (strcmp(cmd, "serve") == 0)
                return cli_serve(argc - first, argv + first);
        if (strcmp(cmd, "connect") == 0)
                return cli_connect(argc - first, argv + first);
        if (strcmp(cmd, "run") == 0)
                return cli_run(argc - first, argv + first);
        if (strcmp(cmd, "doctor") == 0)
                return cli_doctor(argc - first, argv + first);
        if (strcmp(cmd, "status") == 0)
                return cli_status(argc - first, argv + first);
        if (strcmp(cmd, "image") == 0)
                return cli_image(argc - first, argv + first);
        fprintf(stderr, "corral: unknown command \"%s\"\n\n", cmd);
        usage(stderr);
        return 2;
}
