#include "cli/cli.h"

#include "core/log.h"
#include "mcp/server.h"
#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>

struct serve {
        struct loop *loop;
        struct sandbox_mgr *mgr;
        struct mcp_server *srv;
        bool stopping;
        struct timer *status_timer;
        char status_path[300]; /* read by `corral status`; empty: none */
};

/* Once a second, the figures `corral status` prints, written whole (a
 * reader never sees half a file). */
static void write_status(struct timer *t, void *userdata)
{
        struct serve *s = userdata;
        timer_arm(t, 1000);
        char tmp[320];
        snprintf(tmp, sizeof(tmp), "%s.tmp", s->status_path);
        json_t *st = sandbox_mgr_status(s->mgr);
        if (st && json_dump_file(st, tmp, JSON_COMPACT) == 0 && rename(tmp, s->status_path) < 0)
                unlink(tmp);
        json_decref(st);
}

static void status_start(struct serve *s)
{
        char dir[256];
        struct err e = {0};
        if (runtime_dir(dir, sizeof(dir), &e) < 0) {
                log_warn("no status file for `corral status`: %s", e.msg);
                return;
        }
        snprintf(s->status_path, sizeof(s->status_path), "%s/status-%d.json", dir, (int)getpid());
        if (timer_add(s->loop, write_status, s, &s->status_timer) == 0)
                timer_arm(s->status_timer, -1);
}

static void status_stop(struct serve *s)
{
        timer_remove(s->status_timer);
        s->status_timer = NULL;
        if (s->status_path[0])
                unlink(s->status_path);
}

static void drained(void *userdata)
{
        struct serve *s = userdata;
        loop_quit(s->loop);
}

static void stop(struct serve *s, const char *why)
{
        if (s->stopping)
                return;
        s->stopping = true;
        log_info("stopping (%s): removing every sandbox", why);
        mcp_server_stop(s->srv);
        sandbox_mgr_shutdown(s->mgr, drained, s);
}

static void on_eof(void *userdata)
{
        stop(userdata, "stdin closed");
}

static void on_signal(int signo, void *userdata)
{
        stop(userdata, strsignal(signo));
}

int cli_serve(int argc, char **argv)
{
        struct config cfg;
        char **rest;
        int n_rest;
        if (cli_config(argc, argv, &cfg, &rest, &n_rest) < 0)
                return 2;
        if (n_rest > 0) {
                fprintf(stderr, "corral: unknown argument \"%s\" (see corral --help)\n", rest[0]);
                free(rest);
                return 2;
        }
        free(rest);
        /* A host that goes away must not kill us before cleanup. */
        signal(SIGPIPE, SIG_IGN);
        int in_flags = fcntl(STDIN_FILENO, F_GETFL), out_flags = fcntl(STDOUT_FILENO, F_GETFL);
        struct serve s = {0};
        struct cli_engine ce;
        int r = loop_new(&s.loop);
        if (r < 0) {
                log_err("cannot create the event loop: %s", strerror(-r));
                return 1;
        }
        cli_engine_open(&ce, s.loop, &cfg, true);
        if (!ce.eng)
                log_warn("%s (tool calls will report this until an engine answers)", ce.err.msg);
        else
                log_info("serving on stdio; engine %s, image %s", engine_endpoint(ce.eng)->display,
                         cfg.image);
        r = sandbox_mgr_new(s.loop, &cfg, ce.eng, &s.mgr);
        if (r == 0) {
                sandbox_mgr_sweep(s.mgr);
                sandbox_mgr_start_pool(s.mgr);
                status_start(&s);
        }
        if (r == 0)
                r = mcp_server_new(s.loop, &cfg, s.mgr, STDIN_FILENO, STDOUT_FILENO, on_eof, &s,
                                   &s.srv);
        if (r == 0)
                r = loop_signal(s.loop, SIGTERM, on_signal, &s);
        if (r == 0)
                r = loop_signal(s.loop, SIGINT, on_signal, &s);
        if (r == 0)
                r = loop_signal(s.loop, SIGHUP, on_signal, &s);
        if (r == 0)
                r = loop_run(s.loop);
        if (r < 0)
                log_err("serving failed: %s", strerror(-r));
        if (s.srv)
                mcp_server_flush(s.srv, 1000);
        status_stop(&s);
        mcp_server_free(s.srv);
        sandbox_mgr_free(s.mgr);
        cli_engine_close(&ce);
        loop_free(s.loop);
        config_free(&cfg);
        fcntl(STDIN_FILENO, F_SETFL, in_flags);
        fcntl(STDOUT_FILENO, F_SETFL, out_flags);
        return r < 0 ? 1 : 0;
}
