/* The registry of upstream MCP servers: read from the files MCP hosts
 * already write (Claude Code, Claude Desktop, Cursor, VS Code, a shared
 * folder) and from corral's own config, which wins. Nothing here starts a
 * server; every string comes from outside and is bounded and checked.
 *
 * A project's files (.mcp.json, .vscode/mcp.json, .cursor/mcp.json in the
 * working directory) arrive with whatever was cloned: their servers are
 * offered only as the person approved them (see registry_load), and
 * otherwise listed as skipped, with the reason. */
#pragma once

#include "core/util.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

enum upstream_transport { UP_STDIO, UP_HTTP };

#define REGISTRY_MAX_NAME 64

/* A server name: 1 to REGISTRY_MAX_NAME of A-Z a-z 0-9 _ . - (the policy
 * names servers the same way). */
bool registry_name_valid(const char *s);

struct upstream_spec {
        char *name;
        char *description; /* "description" in the file, or NULL */
        enum upstream_transport transport;
        /* stdio */
        char *command;
        char **argv; /* NULL-terminated; argv[0] is the command */
        char **env;  /* NULL-terminated "KEY=value": the entry's own variables only */
        char *cwd;   /* or NULL */
        /* http (streamable HTTP) */
        char *url;
        char **headers; /* NULL-terminated "Name: value" */
        char *source;   /* the file this entry came from, or "corral config" */
        /* Non-NULL when the entry cannot be used (an undefined variable, an
         * unsupported transport...): the reason, with every entry's secrets
         * masked, at most 1000 bytes. */
        char *error;
        bool disabled; /* "disabled": true in the file */
        /* From a project's file (approved): started only when a call names
         * it, never by a search of every server. */
        bool project;
        /* Values never to show: every env and header value and every value
         * the environment gave a ${VAR} anywhere (only those of MASK_MIN, 4,
         * or more bytes; ${VAR:-default} defaults and the paths
         * ${workspaceFolder} and ${userHome} are not secrets). */
        char **secrets; /* NULL-terminated */
};

struct mask;

/* A project's server that is not offered, and why. */
struct registry_skip {
        char *name;
        enum upstream_transport transport; /* as the entry reads, unchecked */
        char *source;                      /* the project's file */
        char *reason;                      /* what to do to use it, in a sentence */
};

struct registry {
        struct upstream_spec *v;
        size_t n;
        struct mask *mask; /* every entry's secrets (upstream/mask.h), or NULL */
        struct registry_skip *skipped;
        size_t n_skipped;
};

struct registry_sources {
        const char *home;       /* $HOME; NULL skips the per-user files */
        const char *cwd;        /* project directory; NULL skips the project files */
        const char *xdg_config; /* $XDG_CONFIG_HOME, or NULL (or not absolute) for $HOME/.config */
        json_t *own;            /* corral config's "servers" object (borrowed), or NULL */
        const char *self_exe;   /* corral's own executable (realpath), for "never list itself" */
        /* corral config's project_servers: names of a project's servers the
         * person opts into (NULL-terminated, borrowed), or NULL. */
        char *const *project_servers;
        bool only_own; /* read corral's config only (tests, --no-host-servers) */
};

/* Build the registry. Files that are missing are skipped; a file that is
 * unreadable, too large or not JSON is skipped with a warning in the log
 * (comments and trailing commas, which VS Code and Cursor allow, are
 * accepted). An invalid entry in corral's own config fails the call (its
 * message names the server and key); an invalid entry elsewhere is kept
 * with `error` set. An environment variable that is not set is no fault of
 * a file: such an entry is kept with `error` set, in corral's config too.
 * Besides what registry_expand knows, entries may use ${workspaceFolder}
 * (src->cwd) and ${userHome} (src->home) as VS Code defines them.
 *
 * A server of a project's file is loaded only when approved and not
 * disabled, else it goes to `skipped`:
 *  - disabled: named in disabledMcpjsonServers of any Claude Code settings
 *    file (a refusal can only narrow, so the project's own files count);
 *  - approved: named in src->project_servers, or, for .mcp.json (Claude
 *    Code's), approved where Claude Code keeps approvals outside the
 *    project: enabledMcpjsonServers or enableAllProjectMcpServers in
 *    ~/.claude/settings.json or in ~/.claude.json's entry for this
 *    project. The project's .claude/settings.json and
 *    .claude/settings.local.json never approve: a clone may hold either
 *    (git-ignored is a habit of the person's checkout, not a guarantee of
 *    the repository), and a file cannot vouch for itself. VS Code and
 *    Cursor ask each time and record nothing, so only project_servers
 *    approves their files' servers.
 * An approved project server never has ${VAR} expanded from the
 * environment (the entry is kept with an error saying so): the file chose
 * which of the person's secrets to send where. ${workspaceFolder} and
 * ${userHome} are paths the server learns anyway (its cwd, its HOME). */
int registry_load(const struct registry_sources *src, struct registry *ret, struct err *e);
void registry_free(struct registry *r);
const struct upstream_spec *registry_find(const struct registry *r, const char *name);
/* The first skipped project server of that name, or NULL. */
const struct registry_skip *registry_find_skipped(const struct registry *r, const char *name);

/* A copy of `text` with every secret of every entry masked, then cut to at
 * most `max` bytes (0: no limit), as upstream/mask.h says (caller frees;
 * NULL only when out of memory). */
char *registry_mask(const struct registry *r, const char *text, size_t max);

/* Expand ${VAR}, ${VAR:-default} and ${env:VAR} in `in` from the
 * environment; the default applies when VAR is unset or empty. Returns 0
 * with a new string in *ret, or in `e`: -ENOENT naming the first undefined
 * variable, -EOPNOTSUPP for ${input:...} (VS Code prompts) and other
 * prefixed forms, -E2BIG past 64 KiB. Every value of 4 or more bytes taken
 * from the environment is appended to *secrets (a NULL-terminated array
 * that may be NULL at first and is reallocated). "$$" is not special; a "$"
 * not followed by "{", and a ${...} that holds no variable name (${1}), are
 * kept as is. */
int registry_expand(const char *in, char ***secrets, char **ret, struct err *e);
