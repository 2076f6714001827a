#include "cli/cli.h"

#include "core/buf.h"
#include "core/log.h"
#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

struct run {
        struct loop *loop;
        struct sandbox_mgr *mgr;
        struct sandbox *sb;
        bool done;
        int exit_code;
};

static void drained(void *userdata)
{
        struct run *r = userdata;
        loop_quit(r->loop);
}

static void done(void *userdata, const struct sandbox_result *res)
{
        struct run *r = userdata;
        r->done = true;
        r->sb = NULL;
        /* A closed stdout or stderr: nothing to tell, the exit status says the rest. */
        (void)write_all(STDOUT_FILENO, res->out.data.data ? res->out.data.data : "",
                        res->out.data.len);
        (void)write_all(STDERR_FILENO, res->err.data.data ? res->err.data.data : "",
                        res->err.data.len);
        if (res->out.truncated)
                fprintf(stderr, "corral: stdout truncated: %zu of %llu bytes shown\n",
                        res->out.data.len, res->out.total);
        if (res->err.truncated)
                fprintf(stderr, "corral: stderr truncated: %zu of %llu bytes shown\n",
                        res->err.data.len, res->err.total);
        if (res->status != ST_OK && res->error_traceback && res->error_traceback[0])
                fprintf(stderr, "%s", res->error_traceback);
        else if (res->status != ST_OK && res->error_message)
                fprintf(stderr, "corral: %s: %s: %s\n", sandbox_status_name(res->status),
                        res->error_type ? res->error_type : "Error", res->error_message);
        /* Exit codes follow `docker run`: the code's own, 125 when the
         * sandbox could not run, 124 on timeout, 137 when killed. */
        switch (res->status) {
        case ST_OK:
        case ST_ERROR:
                r->exit_code = res->has_exit_code ? res->exit_code : 1;
                break;
        case ST_TIMEOUT:
                r->exit_code = 124;
                break;
        case ST_OOM:
                r->exit_code = 137;
                break;
        case ST_CANCELLED:
                r->exit_code = 130;
                break;
        default:
                r->exit_code = 125;
        }
        sandbox_mgr_shutdown(r->mgr, drained, r);
}

static void on_signal(int signo, void *userdata)
{
        struct run *r = userdata;
        (void)signo;
        if (r->sb)
                sandbox_cancel(r->sb);
        else
                sandbox_mgr_shutdown(r->mgr, drained, r);
}

/* The whole input, or NULL when it is longer than `max` bytes. */
static char *read_all(int fd, size_t max)
{
        struct buf b;
        buf_init(&b, max);
        char chunk[65536];
        for (;;) {
                ssize_t k = read(fd, chunk, sizeof(chunk));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                if (buf_append(&b, chunk, (size_t)k) < 0) {
                        buf_free(&b);
                        return NULL;
                }
        }
        return b.data ? b.data : strdup("");
}

static int too_long(size_t max)
{
        fprintf(stderr, "corral run: the code is longer than %zu bytes (max_frame / 2)\n", max);
        return 125;
}

int cli_run(int argc, char **argv)
{
        _cleanup_config_ struct config cfg = {0};
        _cleanup_free_ char **rest = NULL;
        int n_rest;
        if (cli_config(argc, argv, &cfg, &rest, &n_rest) < 0)
                return 125;
        bool shell = false;
        _cleanup_free_ char *code = NULL;
        /* The code travels in one frame, as through MCP (tools.c). */
        size_t max_code = cfg.max_frame / 2;
        for (int i = 0; i < n_rest; i++) {
                if (strcmp(rest[i], "--shell") == 0) {
                        shell = true;
                } else if (strcmp(rest[i], "-c") == 0 && i + 1 < n_rest && !code) {
                        code = strdup(rest[++i]);
                } else if (!code && strcmp(rest[i], "-") == 0) {
                        code = read_all(STDIN_FILENO, max_code);
                        if (!code)
                                return too_long(max_code);
                } else if (!code && rest[i][0] != '-') {
                        _cleanup_close_ int fd = open(rest[i], O_RDONLY | O_CLOEXEC);
                        if (fd < 0) {
                                fprintf(stderr, "corral: cannot read %s: %s\n", rest[i],
                                        strerror(errno));
                                return 125;
                        }
                        code = read_all(fd, max_code);
                        if (!code)
                                return too_long(max_code);
                } else {
                        fprintf(stderr, "corral run: unexpected argument \"%s\"\n", rest[i]);
                        return 125;
                }
        }
        if (!code) {
                fprintf(stderr, "corral run: give code with -c, a file, or - for stdin\n");
                return 125;
        }
        if (strlen(code) > max_code)
                return too_long(max_code);
        signal(SIGPIPE, SIG_IGN);
        struct run r = {.exit_code = 125};
        struct cli_engine ce;
        if (loop_new(&r.loop) < 0)
                return 125;
        cli_engine_open(&ce, r.loop, &cfg, true);
        struct sandbox_request req = {
            .lang = shell ? LANG_SHELL : LANG_PYTHON, .code = code, .timeout_s = cfg.timeout_s};
        int k = sandbox_mgr_new(r.loop, &cfg, ce.eng, &r.mgr);
        struct err pe = {0};
        if (k == 0 && sandbox_mgr_prepare(r.mgr, &pe) < 0) {
                fprintf(stderr, "corral run: %s\n", pe.msg);
                k = -EPERM; /* said already */
        }
        if (k == 0)
                k = loop_signal(r.loop, SIGINT, on_signal, &r);
        if (k == 0)
                k = loop_signal(r.loop, SIGTERM, on_signal, &r);
        /* Confined before the first engine request goes out (see serve). */
        if (k == 0 && cli_confine(&cfg) < 0)
                k = -EPERM;
        if (k == 0)
                k = sandbox_run(r.mgr, &req, done, &r, &r.sb);
        if (k == 0)
                k = loop_run(r.loop);
        if (k < 0 && k != -EPERM)
                fprintf(stderr, "corral run: %s\n", strerror(-k));
        sandbox_mgr_free(r.mgr);
        cli_engine_close(&ce);
        loop_free(r.loop);
        return r.exit_code;
}
