#include "cli/cli.h"

#include "bridge/bridge.h"
#include "core/log.h"
#include "mcp/http.h"
#include "mcp/server.h"
#include "sandbox/sandbox.h"
#include "sandbox/session.h"
#include "upstream/registry.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define STOP_HURRY_MS 1000 /* a signal while stopping: the engine's last chance */
/* The sessions' saves as corral stops, at most: over stdio, before the
 * host's SIGTERM (2 s after it closed stdin); a service, longer. */
#define STOP_SAVE_STDIO_MS 1500
#define STOP_SAVE_MS       30000

struct serve {
        struct loop *loop;
        struct sandbox_mgr *mgr;
        struct session_mgr *sessions;
        struct mcp_server *srv; /* stdio's; NULL when serving HTTP */
        struct mcp_http *http;  /* the service's listeners and clients */
        const struct config *cfg;
        /* The bridge to upstream MCP servers. */
        struct upstream_set *ups;
        struct policy *pol;
        struct audit *audit;
        struct bridge *bridge;
        int draining; /* parts still stopping: sandboxes, upstreams */
        bool stopping;
        bool saving;  /* sessions are being saved to the store before the rest stops */
        bool drained; /* a signal began the drain: a second one stops without saving */
        struct timer *save_timer;
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
        json_auto_t *st = sandbox_mgr_status(s->mgr);
        if (st)
                json_object_set_new(st, "policy", json_string(policy_source_name(s->pol)));
        if (st && s->http)
                json_object_set_new(st, "service", mcp_http_status(s->http));
        if (st && json_dump_file(st, tmp, JSON_COMPACT) == 0 && rename(tmp, s->status_path) < 0)
                unlink(tmp);
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
        if (--s->draining == 0)
                loop_quit(s->loop);
}

static void stop_rest(struct serve *s)
{
        s->saving = false;
        timer_remove(s->save_timer);
        s->save_timer = NULL;
        log_info("removing every sandbox");
        s->draining = s->ups ? 2 : 1;
        sandbox_mgr_shutdown(s->mgr, drained, s);
        if (s->ups)
                upstream_set_shutdown(s->ups, drained, s);
}

static void sessions_saved(void *userdata)
{
        struct serve *s = userdata;
        if (s->saving)
                stop_rest(s);
}

static void saves_late(struct timer *t, void *userdata)
{
        struct serve *s = userdata;
        (void)t;
        log_warn("the sessions' saves did not end within %d ms: those not finished are abandoned",
                 s->http ? STOP_SAVE_MS : STOP_SAVE_STDIO_MS);
        stop_rest(s);
}

/* No new calls; with session_hibernate, the sessions are saved to the
 * store (the next corral resumes them); then the sandboxes go. */
static void stop(struct serve *s, const char *why, bool save)
{
        if (s->stopping)
                return;
        s->stopping = true;
        log_info("stopping (%s)", why);
        /* `corral status` shows running corrals: not this one now. */
        status_stop(s);
        systemd_notify("STOPPING=1");
        mcp_server_stop(s->srv);
        mcp_http_stop(s->http);
        s->saving = true;
        if (!save || session_mgr_save_all(s->sessions, sessions_saved, s) == 0) {
                stop_rest(s);
                return;
        }
        if (timer_add(s->loop, saves_late, s, &s->save_timer) == 0)
                timer_arm(s->save_timer, s->http ? STOP_SAVE_MS : STOP_SAVE_STDIO_MS);
}

static void on_eof(void *userdata)
{
        stop(userdata, "stdin closed", true);
}

static void drain_done(void *userdata, long busy)
{
        struct serve *s = userdata;
        if (busy == 0) {
                stop(s, "drained", true);
                return;
        }
        char why[96];
        snprintf(why, sizeof(why), "drain_s passed with calls running in %ld MCP session(s)", busy);
        stop(s, why, true);
}

/* The service drains first (a balancer sees /health fail and sends new
 * sessions elsewhere, running calls end); a second signal, or stdio,
 * stops at once. */
static void on_signal(int signo, void *userdata)
{
        struct serve *s = userdata;
        if (s->http && !s->stopping && s->cfg->drain_s > 0 &&
            mcp_http_drain(s->http, s->cfg->drain_s, drain_done, s) == 0) {
                s->drained = true;
                log_info("%s: draining (a second signal stops at once)", strsignal(signo));
                systemd_notify("STOPPING=1");
                return;
        }
        if (s->saving) {
                log_warn("%s while saving sessions: the saves not finished are abandoned",
                         strsignal(signo));
                stop_rest(s);
        }
        if (s->stopping) {
                /* A host that closed stdin sends SIGTERM when corral has
                 * not exited 2 s later, and SIGKILL 2 s after that: exit
                 * before, with what is left to the next start's sweep. */
                log_info("%s while stopping: waiting at most %d ms more for the engine",
                         strsignal(signo), STOP_HURRY_MS);
                sandbox_mgr_drain_within(s->mgr, STOP_HURRY_MS);
                return;
        }
        stop(s, strsignal(signo), !s->drained);
}

/* The registry, the policy, the audit log and the upstream clients. A bad
 * setting stops start-up; an audit log that cannot be opened only when it
 * was asked for by name. */
static int bridge_open(struct serve *s, const struct config *cfg)
{
        struct err e = {0};
        struct registry reg = {0};
        if (cli_registry_load(cfg, &reg, &e) < 0) {
                log_err("%s", e.msg);
                return -1;
        }
        if (cli_policy_load(cfg, &s->pol, &e) < 0) {
                log_err("%s", e.msg);
                registry_free(&reg);
                return -1;
        }
        log_info("policy: %s", policy_source_name(s->pol));
        char net[1200];
        policy_network_text(s->pol, net, sizeof(net));
        log_info("network for sandboxes (only hosts a call names): %s", net);
        if (!cfg->audit_log || strcmp(cfg->audit_log, "off") != 0) {
                _cleanup_free_ char *path =
                    cfg->audit_log ? strdup(cfg->audit_log) : audit_default_path();
                if (path && audit_open(path, policy_source_name(s->pol), cfg->config_file,
                                       &s->audit, &e) < 0) {
                        if (cfg->audit_log) {
                                log_err("%s", e.msg);
                                registry_free(&reg);
                                return -1;
                        }
                        log_warn("%s (no audit log)", e.msg);
                }
        }
        size_t n = reg.n;
        if (upstream_set_new(s->loop, cfg, &reg, &s->ups) < 0) {
                registry_free(&reg);
                log_err("out of memory");
                return -1;
        }
        if (bridge_new(s->loop, cfg, s->ups, s->pol, s->audit, &s->bridge, &e) < 0) {
                registry_free(&reg);
                log_err("%s", e.msg);
                return -1;
        }
        char names[600] = "";
        size_t used = 0;
        for (size_t i = 0; i < n && used < sizeof(names); i++) {
                int k = snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
                                 upstream_spec(upstream_at(s->ups, i))->name);
                if (k > 0)
                        used += (size_t)k;
        }
        log_info("%zu MCP server(s) for sandboxed code%s%s", n, n ? ": " : "", names);
        return 0;
}

/* A client of the service: its own server, the shared managers. */
static int http_server_new(void *userdata, const char *owner, struct mcp_server **ret)
{
        struct serve *s = userdata;
        return mcp_server_new(s->loop, s->cfg, s->mgr, s->sessions, s->bridge, owner, NULL, NULL,
                              ret);
}

/* Events for the user go to every client as notifications/message. */
static void to_clients(void *userdata, enum log_level level, const char *logger, const char *text)
{
        struct serve *s = userdata;
        if (s->srv)
                mcp_server_notify_log(s->srv, level, logger, text);
        if (s->http)
                mcp_http_notify_log(s->http, level, logger, text);
}

/* What /health and /metrics show of the managers. */
static json_t *service_status(void *userdata)
{
        struct serve *s = userdata;
        json_t *st = sandbox_mgr_status(s->mgr);
        json_t *ups = json_array();
        for (size_t i = 0; s->ups && i < upstream_count(s->ups); i++) {
                struct upstream *u = upstream_at(s->ups, i);
                json_array_append_new(ups, json_pack("{s:s, s:s}", "name", upstream_spec(u)->name,
                                                     "state", upstream_state(u)));
        }
        if (st) {
                json_object_set_new(st, "upstreams", ups);
                json_object_set_new(st, "sessions", json_integer(session_total(s->sessions)));
                json_object_set_new(st, "policy", json_string(policy_source_name(s->pol)));
        } else {
                json_decref(ups);
        }
        return st;
}

/* The listeners: systemd's sockets when it passed some, else `listen`
 * ("unix" alone: the default socket). Opened first, before the engine or
 * the pool: a port in use, a bad token or socket path stops start-up with
 * nothing made. */
static int http_open(struct serve *s, const struct config *cfg, int n_fds)
{
        struct err e = {0};
        int r = mcp_http_new(s->loop, cfg, http_server_new, s, &s->http, &e);
        for (int i = 0; r == 0 && i < n_fds; i++)
                r = mcp_http_adopt(s->http, 3 + i, &e);
        for (char **a = cfg->listen; r == 0 && n_fds == 0 && a && *a; a++) {
                char path[300];
                if (strcmp(*a, "unix") == 0 || strcmp(*a, "unix:") == 0) {
                        r = service_socket_path(path, sizeof(path), &e);
                        char spec[310];
                        snprintf(spec, sizeof(spec), "unix:%s", path);
                        if (r == 0)
                                r = mcp_http_listen(s->http, spec, &e);
                } else {
                        r = mcp_http_listen(s->http, *a, &e);
                }
        }
        if (r < 0) {
                log_err("%s", e.msg);
                return -1;
        }
        return 0;
}

/* A stdio corral with no settings of its own (no key but `service` in a
 * config file, no CORRAL_* setting, no flag) serves its host through the
 * user's service when that runs: its pool is warm and its engine up, where
 * this corral would start both. Any setting keeps it standalone, since the
 * service runs with settings of its own. A socket that is absent or
 * refuses costs one connect(2). */
static bool service_to_relay(const struct config *cfg, char *path, size_t size)
{
        struct err e = {0};
        if (!cfg->service || cfg->settings_given || service_socket_path(path, size, &e) < 0)
                return false;
        return unix_socket_answers(path);
}

static void bridge_close(struct serve *s)
{
        bridge_free(s->bridge);
        upstream_set_free(s->ups);
        policy_free(s->pol);
        audit_close(s->audit);
}

int cli_serve(int argc, char **argv)
{
        _cleanup_config_ struct config cfg = {0};
        _cleanup_free_ char **rest = NULL;
        int n_rest;
        if (cli_config(argc, argv, &cfg, &rest, &n_rest) < 0)
                return 2;
        if (n_rest > 0) {
                fprintf(stderr, "corral: unknown argument \"%s\" (see corral --help)\n", rest[0]);
                return 2;
        }
        /* A host that goes away must not kill us before cleanup. */
        signal(SIGPIPE, SIG_IGN);
        cli_runtime_sweep();
        int in_flags = fcntl(STDIN_FILENO, F_GETFL), out_flags = fcntl(STDOUT_FILENO, F_GETFL);
        int n_fds = systemd_listen_fds();
        bool service = n_fds > 0 || cfg.listen;
        char relay_path[300];
        if (!service && service_to_relay(&cfg, relay_path, sizeof(relay_path))) {
                log_info("relaying to the corral service at %s: this corral has no settings of "
                         "its own (the setting `service: false` keeps it standalone)",
                         relay_path);
                int rc = cli_relay(&cfg, relay_path, NULL);
                fcntl(STDIN_FILENO, F_SETFL, in_flags);
                fcntl(STDOUT_FILENO, F_SETFL, out_flags);
                return rc;
        }
        struct serve s = {.cfg = &cfg};
        struct cli_engine ce;
        int r = loop_new(&s.loop);
        if (r < 0) {
                log_err("cannot create the event loop: %s", strerror(-r));
                return 1;
        }
        /* The settings that can stop corral come first: nothing is started
         * for a configuration that will be refused (the listeners, the
         * servers and the policy). */
        if (service && http_open(&s, &cfg, n_fds) < 0) {
                mcp_http_free(s.http);
                loop_free(s.loop);
                return 2;
        }
        if (bridge_open(&s, &cfg) < 0) {
                mcp_http_free(s.http);
                bridge_close(&s);
                loop_free(s.loop);
                return 2;
        }
        cli_engine_open(&ce, s.loop, &cfg, true);
        if (!ce.eng && service)
                log_warn("%s (tool calls will report this until an engine answers)", ce.err.msg);
        else if (!ce.eng)
                /* A host shows the tool calls' results, which say what to
                 * do: the log does not repeat it. */
                log_warn("no container engine answers yet: each tool call looks again, and says "
                         "how to start one while none answers");
        else
                log_info("serving on %s; engine %s, image %s", service ? "HTTP" : "stdio",
                         engine_endpoint(ce.eng)->display, cfg.image);
        r = sandbox_mgr_new(s.loop, &cfg, ce.eng, &s.mgr);
        struct err pe = {0};
        if (r == 0 && sandbox_mgr_prepare(s.mgr, &pe) < 0) {
                log_err("%s", pe.msg);
                r = -EINVAL;
        }
        if (r == 0) {
                /* The pool's first creates go to the engine before the
                 * sweep's list: the first call waits for them, for nothing
                 * else. */
                sandbox_mgr_start_pool(s.mgr);
                sandbox_mgr_sweep(s.mgr);
                status_start(&s);
        }
        if (r == 0)
                r = session_mgr_new(s.loop, &cfg, s.mgr, &s.sessions);
        if (r == 0 && service) {
                struct err he = {0};
                mcp_http_set_status(s.http, service_status, &s, s.mgr);
                r = mcp_http_start(s.http, &he);
                if (r < 0)
                        log_err("%s", he.msg);
        }
        if (r == 0 && !service) {
                r = mcp_server_new(s.loop, &cfg, s.mgr, s.sessions, s.bridge, NULL, on_eof, &s,
                                   &s.srv);
                if (r == 0)
                        r = mcp_server_serve_stdio(s.srv, STDIN_FILENO, STDOUT_FILENO);
        }
        if (r == 0)
                r = loop_signal(s.loop, SIGTERM, on_signal, &s);
        if (r == 0)
                r = loop_signal(s.loop, SIGINT, on_signal, &s);
        if (r == 0)
                r = loop_signal(s.loop, SIGHUP, on_signal, &s);
        /* Everything that needs the user's full rights has started (the
         * configuration, the engine and a private one, the audit log, the
         * sandbox profile): from here on corral has none it does not need. */
        if (r == 0 && cli_confine(&cfg) < 0)
                r = -EPERM;
        if (r == 0)
                log_set_sink(to_clients, &s);
        if (r == 0 && service)
                systemd_notify("READY=1");
        if (r == 0)
                r = loop_run(s.loop);
        if (r < 0)
                log_err("serving failed: %s", strerror(-r));
        if (s.srv)
                mcp_server_flush(s.srv, 1000);
        log_set_sink(NULL, NULL);
        status_stop(&s);
        mcp_server_free(s.srv);
        mcp_http_free(s.http);
        /* Sessions hold sandboxes: they go before the sandbox manager. */
        session_mgr_free(s.sessions);
        sandbox_mgr_free(s.mgr);
        bridge_close(&s);
        cli_engine_close(&ce);
        loop_free(s.loop);
        fcntl(STDIN_FILENO, F_SETFL, in_flags);
        fcntl(STDOUT_FILENO, F_SETFL, out_flags);
        return r < 0 ? 1 : 0;
}
