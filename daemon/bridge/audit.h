/* The audit trail of the bridge: one JSON line per upstream call a sandbox
 * made or tried (allowed or denied), appended to a file of the user's. */
#pragma once

#include "core/util.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>

struct audit;

struct audit_entry {
        const char *sandbox; /* short container id, or NULL */
        const char *server;
        const char *tool;
        size_t argument_bytes;
        size_t result_bytes;
        long long duration_ms;
        bool allowed;
        const char *error; /* NULL when it succeeded */
        /* When the policy said `ask`: the person's answer ("accepted",
         * "declined", "cancelled", "timed out", "not asked: ...",
         * "withdrawn") and how long it took; NULL: not asked. */
        const char *ask;
        long long ask_ms;
        const char *session; /* the session it concerns, or NULL (not written) */
};

/* Open (creating it 0600, and its directory 0700) for appending, and write
 * a header record: {"event": "start", "pid", "policy", "config"}. `policy`
 * names the policy in force (a file, or "built-in default"); every line
 * after it carries it too, as several corrals may share one log. */
int audit_open(const char *path, const char *policy, const char *config, struct audit **ret,
               struct err *e);
void audit_close(struct audit *a);
/* The default path: $XDG_STATE_HOME/corral/audit.jsonl, else
 * ~/.local/state/corral/audit.jsonl (caller frees), or NULL. */
char *audit_default_path(void);
/* One line, written whole. A failure is logged (once), never fatal. */
void audit_write(struct audit *a, const struct audit_entry *entry);
/* A line of another kind (`line` has its "event"; stolen): the time and
 * the policy are added. */
void audit_write_event(struct audit *a, json_t *line);
