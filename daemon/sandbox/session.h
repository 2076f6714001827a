/* Named sessions: a sandbox kept across calls (Python globals and imports,
 * files in /workspace), one per name, bounded in number (max_sessions),
 * idle time (session_idle_s) and lifetime (session_max_s). A session runs
 * one call at a time. A session belongs to the client that opened it (its
 * owner: "" for the one client of stdio, the MCP session's client when
 * serving HTTP): another client can neither see nor reach it, and may use
 * the same name for a session of its own. */
#pragma once

#include "core/config.h"
#include "core/loop.h"
#include "core/util.h"
#include "sandbox/sandbox.h"

#include <jansson.h>

#define SESSION_NAME_MAX  64
#define SESSION_OWNER_MAX 39

struct session_mgr;

int session_mgr_new(struct loop *l, const struct config *cfg, struct sandbox_mgr *sm,
                    struct session_mgr **ret);
/* Forgets every session (their sandboxes go with the sandbox manager). */
void session_mgr_free(struct session_mgr *m);
/* Sessions open at most (max_sessions, at most max_sandboxes - 1). */
long session_max(const struct session_mgr *m);

/* A name is 1 to 64 of [A-Za-z0-9_.-]: 0, or -EINVAL and *e. */
int session_name_check(const char *name, struct err *e);

/* Runs `req` in session req->session of req->owner, opening it on first use. On success
 * *ret is the sandbox running it (for sandbox_cancel and sandbox_partial
 * until `cb`), and `cb` follows exactly once, from the loop (core/loop.h).
 * Errors, returned and in *e (its code, and a message that states the
 * facts: what to do about them is the caller's to say):
 *   -EBUSY    the session runs another call
 *   -EAGAIN   it is not open yet and no sandbox slot is free (max_sandboxes
 *             busy, max_queue calls waiting)
 *   -EUSERS   max_sessions sessions are open
 *   -ENOLINK  the session ended since its last call (why is in the
 *             message); it is forgotten, so the next call opens a new one
 *   -ENOTSUP  sessions are off (max_sessions 0)
 *   -EACCES   it names MCP servers the session was not given (below)
 *   -EINVAL   a bad name, too many servers, -ENOMEM */
int session_run(struct session_mgr *m, const struct sandbox_request *req, sandbox_done_cb cb,
                void *userdata, struct sandbox **ret, struct err *e);
/* The MCP servers a session's code may call are fixed by its first call
 * that runs code (req->servers); a later call may name only those, or add
 * more in req->session_servers (which session_run grants, and logs). A
 * call that names fewer leaves the grant as it is. session_run refuses a
 * call naming others with -EACCES (and *e) before anything reaches the
 * sandbox; this says the same beforehand (0 when no such session is
 * open). */
int session_check_servers(struct session_mgr *m, const struct sandbox_request *req, struct err *e);

/* The sandbox of an open session, for its files (counts as activity): 0
 * and *ret, or a negative errno and *e:
 *   -ENOENT   no session of that name was opened
 *   -ENOLINK  it ended (why is in the message)
 *   -EAGAIN   its first call has not ended yet (still starting) */
int session_sandbox(struct session_mgr *m, const char *owner, const char *name,
                    struct sandbox **ret, struct err *e);
/* The sandbox of an open session, or NULL; looking is not activity (a
 * client listing its sessions' files keeps none of them open). */
struct sandbox *session_peek(struct session_mgr *m, const char *owner, const char *name);
/* Whether a session of that owner and name is open (or starting). */
bool session_exists(struct session_mgr *m, const char *owner, const char *name);

/* Closes it: its container is removed, a call still running ends
 * "cancelled". Else *e and -ENOENT when none of that name was opened,
 * -ENOLINK when it had ended already. */
int session_close(struct session_mgr *m, const char *owner, const char *name, struct err *e);
/* How many sessions are open (or starting), of every owner. */
long session_total(const struct session_mgr *m);
/* How many sessions `owner` has open (or starting). */
long session_count(struct session_mgr *m, const char *owner);
/* Closes every session of `owner` (its client went away). */
void session_close_owner(struct session_mgr *m, const char *owner);

/* Following `owner`'s sessions, for what a client shows of their files (MCP
 * resources): `fn` hears of a session that opened (its first call ended
 * with it kept), of a call or file write that changed its /workspace/out,
 * of any other call that ended in it (it may have changed the rest of
 * /workspace), and of its end, with the session's name. Called from inside the session manager's
 * work: `fn` must not open or close sessions. */
enum session_change { SESSION_OPENED, SESSION_FILES, SESSION_RAN, SESSION_ENDED };
typedef void (*session_watch_cb)(void *userdata, const char *name, enum session_change what);
struct session_watch;
int session_watch(struct session_mgr *m, const char *owner, session_watch_cb fn, void *userdata,
                  struct session_watch **ret);
/* Accepts NULL. */
void session_unwatch(struct session_watch *w);
/* Something other than a call changed the files of `owner`'s session
 * `name` (write_file): its watchers are told. */
void session_files_changed(struct session_mgr *m, const char *owner, const char *name);

/* ---- the store (sandbox/store.h): saving a session, forking one */

/* What a save or a fork came to. */
struct session_saved {
        const char *error;         /* NULL when it was saved */
        bool kept;                 /* the session still runs (a checkpoint) */
        const char *forked;        /* session_fork: the new session's name */
        unsigned long long bytes;  /* what the store holds of it */
        long long ms;              /* the save's time */
        json_t *not_saved;         /* names of globals that could not be kept (borrowed), or NULL */
        const char *globals_error; /* its globals were not saved at all (why), or NULL */
};
typedef void (*session_saved_cb)(void *userdata, const struct session_saved *r);

/* Saves session `name` of `owner` to the store: its Python globals, its
 * /workspace, its image and servers. `keep`: a checkpoint (it runs on,
 * and a call after its end resumes from the copy); else it hibernates now
 * (its container goes; the next call naming it resumes it). 0: `cb`
 * follows once, from the loop. 1: it is hibernated already (*done says
 * how big; no cb). Else *e and
 *   -ENOENT, -ENOLINK  no such session, or it ended
 *   -EBUSY    a call, or a save, runs in it
 *   -EAGAIN   it is still starting
 *   -EPERM    its client is anonymous (only the stdio client's and named
 *             clients' sessions outlive this process)
 *   -ENOTSUP  no store */
int session_save(struct session_mgr *m, const char *owner, const char *name, bool keep,
                 session_saved_cb cb, void *userdata, struct session_saved *done, struct err *e);
/* A new session `to` from `from`'s saved state, hibernated until a call
 * names it: a live `from` is checkpointed first (0, then cb), a
 * hibernated one copied at once (1, *done filled). Errors as
 * session_save, and -EEXIST when `to` is open or stored. */
int session_fork(struct session_mgr *m, const char *owner, const char *from, const char *to,
                 session_saved_cb cb, void *userdata, struct session_saved *done, struct err *e);
/* Corral is stopping: with session_hibernate, every idle session whose
 * client outlives this process is saved. Returns how many saves are under
 * way (then `done` follows once they all ended), or 0 (no `done`). */
int session_mgr_save_all(struct session_mgr *m, void (*done)(void *userdata), void *userdata);

/* [{name, image, servers (its grant), state (starting|idle|busy), age_s,
 * idle_s, calls, memory_bytes, container}] (new reference). */
json_t *session_list(struct session_mgr *m, const char *owner);
