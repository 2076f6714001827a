/* A stdio server's process: spawned in a process group of its own behind a
 * guardian, its stderr read into the log, signalled as a group, reaped
 * through a pidfd, and stopped with a grace period. A process stays on its
 * set's list until reaped, whether or not its transport still wants it, so
 * that shutdown waits for every one and nothing is left behind. */
#include "upstream/internal.h"
#include "upstream/mask.h"

#include "core/buf.h"
#include "core/confine.h"
#include "core/loop.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define STOP_GRACE_MS   2000 /* SIGTERM..SIGKILL at shutdown */
#define REAP_POLL_MS    50   /* without a pidfd: how often to look for its exit */
#define STDERR_LINE_MAX 4096
#define STDERR_LOG_MAX  (256 * 1024) /* stderr bytes logged per process */
#define STDERR_SHOWN    1000         /* a stderr line in the log (masked, then cut) */

extern char **environ;

struct uproc {
        struct list node; /* set->procs */
        struct upstream *u;
        pid_t pid; /* > 0 until reaped */
        int pidfd, err_fd;
        struct watch *w_pid, *w_err;
        struct line_reader errlines;
        unsigned long long err_logged;
        char *last_stderr;
        struct timer *grace; /* a stop: SIGTERM..SIGKILL */
        struct timer *poll;  /* no pidfd: look for its exit */
        void (*exited)(void *userdata, const char *how);
        void *userdata;
};

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
        return (int)syscall(SYS_pidfd_open, pid, 0);
#else
        errno = ENOSYS;
        return -1;
#endif
}

/* ---- stderr, to the log */

static int on_err_line(void *userdata, const char *line, size_t len)
{
        struct uproc *p = userdata;
        if (!line)
                return 0;
        /* The whole line is masked, then cut. */
        char *masked = mask_shown(p->u->set->reg.mask, line, len, STDERR_SHOWN, 0);
        if (!masked)
                return 0;
        if (p->err_logged < STDERR_LOG_MAX)
                log_info("upstream %s stderr: %s", p->u->spec->name, masked);
        p->err_logged += len;
        if (*masked) {
                free(p->last_stderr);
                p->last_stderr = masked;
        } else {
                free(masked);
        }
        return 0;
}

static void err_close(struct uproc *p)
{
        watch_close(&p->w_err, &p->err_fd);
}

/* What is there to read now (all of it when `drain`). */
static void err_read(struct uproc *p, bool drain)
{
        char chunk[8192];
        do {
                ssize_t k = read(p->err_fd, chunk, sizeof(chunk));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return;
                if (k <= 0) {
                        err_close(p);
                        return;
                }
                line_reader_feed(&p->errlines, chunk, (size_t)k, on_err_line, p);
        } while (drain);
}

static void err_ready(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        err_read(userdata, false);
}

/* ---- its life */

static void proc_free(struct uproc *p)
{
        list_del(&p->node);
        err_close(p);
        watch_remove(p->w_pid);
        if (p->pidfd >= 0)
                close(p->pidfd);
        timer_remove(p->grace);
        timer_remove(p->poll);
        line_reader_free(&p->errlines);
        free(p->last_stderr);
        free(p);
}

void uproc_kill(struct uproc *p, int sig)
{
        /* The whole process group: npx and sh wrappers leave children. */
        if (p && p->pid > 0 && kill(-p->pid, sig) < 0)
                kill(p->pid, sig);
}

static void reap(struct uproc *p)
{
        int st;
        if (p->pid <= 0)
                return; /* waitpid(0) would take another child's status */
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == 0) {
                if (p->pidfd < 0)
                        timer_arm(p->poll, REAP_POLL_MS); /* not dead yet: look again */
                return;
        }
        char how[96] = "exited";
        if (r == p->pid && WIFEXITED(st))
                snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(st));
        else if (r == p->pid && WIFSIGNALED(st))
                snprintf(how, sizeof(how), "was killed by signal %d (%s)", WTERMSIG(st),
                         strsignal(WTERMSIG(st)));
        /* Whatever it left in its group goes too. */
        kill(-p->pid, SIGKILL);
        pid_t pid = p->pid;
        p->pid = 0;
        /* Its last words, before anyone quotes them. */
        if (p->err_fd >= 0)
                err_read(p, true);
        struct upstream *u = p->u;
        if (u->stopping)
                log_info("upstream %s: stopped", u->spec->name);
        else
                log_info("upstream %s: process %d %s", u->spec->name, (int)pid, how);
        if (p->exited)
                p->exited(p->userdata, how);
        proc_free(p);
        u->set->reaped(u->set);
}

static void pid_ready(struct watch *w, uint32_t events, void *userdata)
{
        (void)w;
        (void)events;
        reap(userdata);
}

static void poll_timer(struct timer *t, void *userdata)
{
        (void)t;
        reap(userdata);
}

static void grace_over(struct timer *t, void *userdata)
{
        struct uproc *p = userdata;
        (void)t;
        uproc_kill(p, SIGKILL);
        if (p->pidfd < 0)
                reap(p);
}

void uproc_stop(struct uproc *p)
{
        p->exited = NULL;
        p->userdata = NULL;
        uproc_kill(p, SIGTERM);
        timer_arm(p->grace, STOP_GRACE_MS);
        if (p->pidfd < 0)
                reap(p);
}

void uproc_detach(struct uproc *p)
{
        if (!p)
                return;
        p->exited = NULL;
        p->userdata = NULL;
        uproc_kill(p, SIGKILL);
        if (p->pidfd < 0)
                reap(p);
}

bool uproc_exit_pending(const struct uproc *p)
{
        struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
        return p->pidfd >= 0 && poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN);
}

bool uproc_watched(const struct uproc *p)
{
        return p->pidfd >= 0;
}

const char *uproc_last_words(const struct uproc *p)
{
        return p->last_stderr;
}

bool uproc_running_for(const struct upstream *u)
{
        const struct uproc *p;
        list_for_each(p, &u->set->procs, node) if (p->u == u) return true;
        return false;
}

void uproc_kill_all(struct upstream_set *set)
{
        while (!list_empty(&set->procs)) {
                struct uproc *p = list_first(&set->procs, struct uproc, node);
                if (p->pid > 0) {
                        uproc_kill(p, SIGKILL);
                        waitpid(p->pid, NULL, 0);
                        p->pid = 0;
                }
                proc_free(p);
        }
}

/* ---- spawning */

/* What a server inherits of corral's environment: enough to run a program
 * as this user, and none of the credentials that may sit beside it. A
 * server that needs more names it in its "env" (with ${VAR} to take it
 * from here). */
static const char *const inherited[] = {
    "HOME", "LOGNAME", "PATH",     "SHELL",  "TERM", "USER",
    "LANG", "LC_ALL",  "LC_CTYPE", "TMPDIR", "TZ",
};

static bool inherits(const char *entry)
{
        const char *eq = strchr(entry, '=');
        size_t kl = eq ? (size_t)(eq - entry) : strlen(entry);
        for (size_t i = 0; i < ARRAY_SIZE(inherited); i++)
                if (strlen(inherited[i]) == kl && strncmp(inherited[i], entry, kl) == 0)
                        return true;
        return false;
}

static char **build_env(const struct upstream_spec *spec)
{
        size_t n = 0, m = 0;
        while (environ[n])
                n++;
        while (spec->env && spec->env[m])
                m++;
        char **env = calloc(n + m + 1, sizeof(char *));
        if (!env)
                return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                if (!inherits(environ[i]))
                        continue;
                size_t kl = (size_t)(strchr(environ[i], '=') - environ[i]);
                bool overridden = false;
                for (size_t j = 0; j < m && !overridden; j++)
                        overridden =
                            strncmp(spec->env[j], environ[i], kl) == 0 && spec->env[j][kl] == '=';
                if (!overridden)
                        env[k++] = environ[i];
        }
        for (size_t j = 0; j < m; j++)
                env[k++] = spec->env[j];
        return env;
}

static void close_all(int *fds, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -1;
                }
}

/* The guardian's answer to corral's death: the whole group, itself too. */
static void parent_died(int sig)
{
        (void)sig;
        kill(0, SIGKILL);
}

/* In the child, between fork and exec: only async-signal-safe calls.
 *
 * The child leads a new process group and stays as its guardian: it forks
 * the server, holds none of its pipes, and waits for it. If corral dies,
 * even by SIGKILL, the kernel signals the guardian (PR_SET_PDEATHSIG), which
 * kills the whole group: grandchildren that npx or sh started as well,
 * which a parent-death signal to the server alone would leave behind. The
 * guardian ignores the group's SIGTERM (that one is for the server) and
 * exits as the server did, so corral sees the server's exit status. */
_Noreturn static void child(const struct upstream_spec *spec, char **env, int fds[8], pid_t parent)
{
        int in_r = fds[0], out_w = fds[3], err_w = fds[5], rep_w = fds[7];
        int saved, st;
        sigset_t none;
        pid_t server;
        setsid(); /* its own process group, killed as a whole */
        signal(SIGUSR2, parent_died);
        prctl(PR_SET_PDEATHSIG, SIGUSR2);
        if (getppid() != parent)
                _exit(127); /* corral died before the line above */
        /* A third party's program: no capabilities and no way to gain any,
         * whatever corral itself kept. */
        if (confine_child() < 0)
                goto fail;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* the loop blocks signals for signalfd */
        signal(SIGPIPE, SIG_DFL);
        if (dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
                goto fail;
        /* Nothing else of corral's reaches the server (or stays open in the
         * guardian, which never execs): the report pipe moves to 3 first. */
        if (rep_w != 3) {
                if (dup3(rep_w, 3, O_CLOEXEC) < 0)
                        goto fail;
                rep_w = 3;
        }
#ifdef SYS_close_range
        if (syscall(SYS_close_range, 4U, ~0U, 0U) < 0)
#endif
                for (int fd = 4; fd < 65536; fd++)
                        close(fd);
        server = fork();
        if (server < 0)
                goto fail;
        if (server == 0) {
                signal(SIGUSR2, SIG_DFL);
                prctl(PR_SET_PDEATHSIG, 0);
                if (spec->cwd && chdir(spec->cwd) < 0)
                        goto fail;
                execvpe(spec->argv[0], spec->argv, env);
                goto fail;
        }
        /* The guardian: the server's pipes and the report pipe are its. */
        close(0);
        close(1);
        close(2);
        close(rep_w);
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        while (waitpid(server, &st, 0) < 0)
                if (errno != EINTR)
                        _exit(127);
        if (WIFSIGNALED(st)) {
                signal(WTERMSIG(st), SIG_DFL);
                kill(getpid(), WTERMSIG(st));
        }
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 127);
fail:
        saved = errno;
        if (write(rep_w, &saved, sizeof(saved)) < 0) {
                /* nothing more to do */
        }
        _exit(127);
}

int uproc_spawn(struct upstream *u, void (*exited)(void *userdata, const char *how), void *userdata,
                int *ret_in, int *ret_out, struct uproc **ret, struct err *e)
{
        const struct upstream_spec *spec = u->spec;
        /* in_r in_w out_r out_w err_r err_w rep_r rep_w */
        int fds[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
        _cleanup_free_ char **env = build_env(spec);
        struct uproc *p = env ? calloc(1, sizeof(*p)) : NULL;
        if (!p)
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        p->u = u;
        p->pidfd = p->err_fd = -1;
        line_reader_init(&p->errlines, STDERR_LINE_MAX);
        struct loop *l = u->set->loop;
        if (timer_add(l, grace_over, p, &p->grace) < 0 ||
            timer_add(l, poll_timer, p, &p->poll) < 0) {
                proc_free(p);
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        for (int i = 0; i < 8; i += 2)
                if (pipe2(fds + i, O_CLOEXEC) < 0) {
                        int r = -errno;
                        close_all(fds, 8);
                        proc_free(p);
                        return err_set(e, ERR_INTERNAL, -r, "cannot make pipes: %s", strerror(-r));
                }
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int r = -errno;
                close_all(fds, 8);
                proc_free(p);
                return err_set(e, ERR_INTERNAL, -r, "cannot fork: %s", strerror(-r));
        }
        if (pid == 0)
                child(spec, env, fds, parent);
        close(fds[0]);
        close(fds[3]);
        close(fds[5]);
        close(fds[7]);
        /* exec closes the report pipe: EOF means it ran. This waits only
         * for the child to reach exec, not for the server to start. */
        int child_errno = 0;
        ssize_t k;
        do
                k = read(fds[6], &child_errno, sizeof(child_errno));
        while (k < 0 && errno == EINTR);
        close(fds[6]);
        if (k == (ssize_t)sizeof(child_errno)) {
                waitpid(pid, NULL, 0);
                close(fds[1]);
                close(fds[2]);
                close(fds[4]);
                proc_free(p);
                return mask_err(u->set->reg.mask, e, ERR_INTERNAL, child_errno,
                                "cannot run `%s`%s%s: %s", spec->argv[0], spec->cwd ? " in " : "",
                                spec->cwd ? spec->cwd : "", strerror(child_errno));
        }
        p->pid = pid;
        p->err_fd = fds[4];
        p->exited = exited;
        p->userdata = userdata;
        list_push(&u->set->procs, &p->node);
        for (int i = 1; i < 5; i++)
                if (i != 3)
                        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        p->pidfd = pidfd_open_(pid);
        int r = watch_add(l, p->err_fd, EPOLLIN, err_ready, p, &p->w_err);
        if (r == 0 && p->pidfd >= 0)
                r = watch_add(l, p->pidfd, EPOLLIN, pid_ready, p, &p->w_pid);
        if (r < 0) {
                close(fds[1]);
                close(fds[2]);
                uproc_kill(p, SIGKILL);
                waitpid(pid, NULL, 0);
                proc_free(p);
                return err_set(e, ERR_INTERNAL, -r, "cannot watch the server's pipes: %s",
                               strerror(-r));
        }
        *ret_in = fds[1];
        *ret_out = fds[2];
        *ret = p;
        return 0;
}
