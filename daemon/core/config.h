/* Settings, from (highest first) command-line flags, CORRAL_* environment
 * variables, the JSON file ($XDG_CONFIG_HOME/corral/config.json or --config),
 * then built-in defaults. Every value is validated; a bad one stops start-up
 * with a message naming the key. */
#pragma once

#include "core/log.h"
#include "core/util.h"

#include <jansson.h>
#include <stdbool.h>
#include <string.h>

struct config {
        char *engine;                        /* unix:///path or tcp://host:port; NULL: discover */
        char *image;                         /* sandbox image: the default of every call */
        char **images;                       /* images a call may ask for; NULL: those
                                              * corral built on the engine, and `image` */
        char **mounts;                       /* "HOST:SANDBOX" bind mounts, read-only; NULL:
                                              * none */
        bool mounts_unsafe;                  /* mounts may show the host's /, /proc, /sys,
                                              * /dev, /run or the engine's socket */
        char **preload;                      /* modules a ready sandbox imports; NULL: the
                                              * image's own list (its profile.json) */
        unsigned long long memory;           /* bytes; swap is set equal (none) */
        long pids;                           /* pids limit */
        double cpus;                         /* CPU share (NanoCpus / 1e9) */
        double timeout_s;                    /* default per-call time limit */
        double max_timeout_s;                /* cap on a caller's timeout_s */
        double start_timeout_s;              /* create..ready bound */
        unsigned long long output_limit;     /* bytes kept per stream in memory: the head,
                                              * and the tail past it */
        long result_max_chars;               /* a tool result's text, at most (a call may ask
                                              * for 1000..output_limit) */
        double result_keep_s;                /* a run's whole output is kept this long */
        unsigned long long result_store_max; /* bytes of kept output per client; 0: none */
        unsigned long long max_frame;        /* bytes per JSON line, all links */
        unsigned long long tmp_size;         /* tmpfs /tmp */
        unsigned long long workspace_size;   /* tmpfs /workspace */
        unsigned long long shm_size;         /* /dev/shm */
        long max_sandboxes;                  /* sandboxes alive at once */
        long max_queue;                      /* calls waiting for a slot */
        long pool_min;                       /* ready sandboxes kept when idle */
        long pool_max;                       /* ready sandboxes under load; 0: no pool.
                                              * In effect: min(pool_max, max_sandboxes),
                                              * and pool_min at most that. */
        long pool_max_starting;              /* pool sandboxes starting at once */
        double pool_idle_s;                  /* idle time before shrinking to pool_min; the
                                              * window over which the pool keeps a demand */
        unsigned long long pool_memory;      /* bytes of host memory ready sandboxes may take */
        double sync_wait_s;                  /* a call still running then becomes a job */
        double job_retention_s;              /* a finished job's result is kept this long */
        long max_sessions;                   /* sessions open at once; 0: none. In effect at
                                              * most max_sandboxes - 1, so that one-shot
                                              * calls always have a slot. */
        double session_idle_s;               /* a session without calls this long is closed */
        double session_max_s;                /* and any session after this long */
        bool session_hibernate;              /* an idle session is saved to the store, not closed */
        char *session_store; /* the store's directory; NULL: under $XDG_STATE_HOME */
        unsigned long long session_store_max; /* bytes the store holds at most */
        double session_keep_s;                /* a hibernated session is kept this long */
        unsigned long long file_max_bytes;    /* a file moved in or out of a sandbox */
        unsigned long long out_max_bytes;     /* /workspace/out files returned with one result */
        enum log_level log_level;
        /* The bridge to upstream MCP servers. */
        json_t *servers;   /* "servers" of the config file (mcpServers format), or NULL */
        bool host_servers; /* also read the MCP hosts' files */
        char *policy;      /* the user's policy file, or NULL for the default path */
        char *audit_log;   /* JSON-lines audit file, "off", or NULL for the default path */
        char *seccomp;     /* sandboxes' profile: "corral" (NULL too), "engine" or a file */
        char *runtime;     /* "runc" (NULL too: the engine's default) or "runsc" (gVisor) */
        /* Names of servers in a project's files the person opts into
         * (upstream/registry.h); NULL: none. */
        char **project_servers;
        bool confine;      /* corral confines itself (no_new_privs, no capabilities, seccomp) */
        bool memory_merge; /* ready sandboxes offer their heap to KSM (a loosening: opt in) */
        char *config_file; /* the file that was read, if any */
        /* The service (mcp/http.h). */
        char **listen;             /* "unix:PATH", "tcp:HOST:PORT"; NULL: stdio */
        char *token;               /* TCP clients' bearer token; NULL: the token file */
        bool http_public;          /* TCP listeners on non-loopback addresses allowed */
        char **http_origins;       /* Origins allowed besides loopback pages */
        char **http_hosts;         /* Host names allowed besides loopback ones */
        long max_clients;          /* MCP sessions at once */
        double client_idle_s;      /* an MCP session with no request this long ends */
        double drain_s;            /* SIGTERM: running calls get this long to end */
        double ask_timeout_s;      /* a person's approval of a call (policy "ask") */
        bool ask_allow_unasked;    /* a client without elicitation: "ask" calls go through */
        bool ask_run;              /* the person approves each run_python and run_shell */
        char *client_name;         /* corral connect: the name its sessions are kept under */
        bool resources_workspace;  /* resources: all of /workspace, not only /workspace/out */
        long client_max_sandboxes; /* sandboxes one client may hold; 0: half of max_sandboxes */
        bool connect_fallback;     /* corral connect serves stdio itself when no service */
        bool service;              /* a stdio corral with no settings of its own relays to
                                    * the user's running service */
        bool settings_given;       /* a setting other than `service` was given (file,
                                    * variable, flag), or a config file was named */
        bool tcp_token;            /* TCP clients need the token; false: loopback only, no token */
        /* A TCP connection's time from accept to its headers with the token. */
        double http_header_timeout_s;
        /* The way out of a sandbox (bridge/egress.h). */
        json_t *network_routes;               /* {"https://origin": {headers, ca_file}}, or NULL */
        json_t *network_resolve;              /* {"name": "address"} (tests), or NULL */
        long network_max_connections;         /* per run, at once */
        unsigned long long network_max_bytes; /* per run, each way */
        double network_idle_s;                /* a connection with no byte either way ends */
        double network_connect_timeout_s;     /* resolving and connecting */
        char *pip_index;                      /* PIP_INDEX_URL in sandboxes, or NULL */
        /* Where each key given was set, for advice that names it:
         * {"image": "--image"}, "CORRAL_IMAGE" or "FILE: image". */
        json_t *sources;
};

/* The name an engine knows corral's gVisor runtime by (contrib/setup
 * registers it with both engines, with the flags this host needs). */
#define CONFIG_RUNSC_NAME "corral-runsc"

/* The sandboxes run under gVisor. */
static inline bool config_runsc(const struct config *c)
{
        return c->runtime && strcmp(c->runtime, "runsc") == 0;
}

void config_defaults(struct config *c);
void config_free(struct config *c);
/* A struct config released at the end of its scope (zero-initialise it:
 * config_free of a zeroed or freed config does nothing). */
#define _cleanup_config_ __attribute__((cleanup(config_free)))
/* Set one key from text (used by flags, env and file alike). `source` names
 * where it came from for the error ("--memory", "CORRAL_MEMORY", "config.json: memory"). */
int config_set(struct config *c, const char *key, const char *value, const char *source,
               struct err *e);
/* A list key given again (a repeated flag): its items are added to those
 * it has; any other key is set as by config_set. */
int config_append(struct config *c, const char *name, const char *value, const char *source,
                  struct err *e);
/* Where `key` was set ("--image", "CORRAL_IMAGE", "FILE: image"), or
 * NULL when it has its default. */
const char *config_source(const struct config *c, const char *key);
/* Load a JSON object of keys. A missing file is not an error unless `required`. */
int config_load_file(struct config *c, const char *path, bool required, struct err *e);
/* Apply CORRAL_<KEY> variables from the environment. */
int config_load_env(struct config *c, struct err *e);
/* Cross-field checks after everything is applied. */
int config_check(const struct config *c, struct err *e);
/* The default file path (caller frees), or NULL. */
char *config_default_path(void);
/* A "HOST:SANDBOX" (or "HOST:SANDBOX:ro") mount: both absolute, SANDBOX
 * neither a system directory nor in one of the places corral or the engine
 * manages (/proc, /sys, /dev, /run, /tmp, /workspace). The paths go to
 * host[0..size) and target[0..size); 0, or -EINVAL and *e (ERR_CONFIG). */
int config_mount_parse(const char *spec, char *host, char *target, size_t size, struct err *e);
/* Why mounting the host path `host` (resolved, absolute) would hand a
 * sandbox the host itself: it is /, under /proc, /sys, /dev, /run or
 * /var/run, or it is or holds `engine_socket` (may be NULL). NULL when
 * none of these; the setting mounts_unsafe lets such a mount through. */
const char *config_mount_host_danger(const char *host, const char *engine_socket);
/* An engine's image reference: lower case, digits and ._-/:@, 1 to 255. */
bool config_image_name_ok(const char *s);
/* Names of all keys, for --help; NULL-terminated. */
const char *const *config_key_names(void);
