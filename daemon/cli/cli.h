/* The commands. Each parses its arguments, prints, and returns an exit code;
 * common.c holds what they share (settings, engine choice). */
#pragma once

#include "core/config.h"
#include "core/loop.h"
#include "engine/engine.h"
#include "engine/private.h"
#include "upstream/registry.h"

#include <stdbool.h>

int cli_serve(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_connect(int argc, char **argv);
int cli_doctor(int argc, char **argv);
int cli_image(int argc, char **argv);
int cli_status(int argc, char **argv);

/* Relay the host on stdio to the corral service at the unix socket `path`
 * (as `corral connect`), under `client_name` when not NULL (checked by the
 * caller). Returns the exit status. */
int cli_relay(const struct config *cfg, const char *path, const char *client_name);

/* Settings from flags, environment and file, in that order of precedence.
 * Flags this function does not know are left in *rest (argv order kept) for
 * the command; returns 0 or prints the problem and returns negative. */
int cli_config(int argc, char **argv, struct config *cfg, char ***rest, int *n_rest);

/* The upstream MCP servers as `serve` finds them: corral's config, and
 * unless host_servers is off the hosts' files of $HOME, $XDG_CONFIG_HOME
 * and the working directory (its servers as approved). 0, or negative with
 * `e` (a bad entry in corral's config). */
int cli_registry_load(const struct config *cfg, struct registry *ret, struct err *e);

struct cli_engine {
        struct engine *eng; /* NULL when none could be found */
        struct err err;     /* why not */
        struct private_engine priv;
        bool explicit_engine;
};

/* Confine this process (core/confine.h) unless the setting `confine` is
 * false, and log what holds. Call it once everything that needs the user's
 * full rights has started, before the event loop runs. Prints the problem
 * and returns negative when it cannot. */
int cli_confine(const struct config *cfg);

/* Whether `pid`, named by a status file in the runtime directory, is still
 * a corral: alive and its command corral. A status file outlives an
 * instance that was killed, and its pid may be another program's since. */
bool cli_instance_alive(long pid);
/* Removes from the runtime directory the files of corrals that were
 * killed (their status files, their private Podman's socket and log);
 * a corral that exits removes its own. */
void cli_runtime_sweep(void);

struct policy;
struct registry;

/* The policy in force, as serve and doctor resolve it: the file `policy`
 * names (it must exist); else policy.json beside the config file that was
 * read, then $XDG_CONFIG_HOME/corral/policy.json, the first that exists;
 * else the built-in default. A file that exists but cannot be read or
 * parsed is an error (fail closed). */
int cli_policy_load(const struct config *cfg, struct policy **ret, struct err *e);

/* Choose the engine: the setting, else discovery, else (when allowed) a
 * private podman service. */
void cli_engine_open(struct cli_engine *ce, struct loop *l, const struct config *cfg,
                     bool allow_private);
void cli_engine_close(struct cli_engine *ce);
