/* The store of hibernated sessions (issue 29): one directory a session,
 * <root>/<owner>/<name>/, holding an index (index.json, what corral needs
 * to resume it) and the state files the sandbox made (opaque bytes: corral
 * never parses them). Two services may share a root, so every index read
 * back is untrusted input: bounded, validated, refused whole when wrong.
 *
 * sandbox/session.c writes here when a session hibernates and reads back
 * when a call resumes it (runtime/README.md, language "state"). */
#pragma once

#include "core/util.h"
#include "sandbox/session.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define STORE_INDEX       "index.json"
#define STORE_INDEX_MAX   (64 * 1024) /* bytes of an index read back */
#define STORE_FORMAT      1
#define STORE_IMAGE_MAX   255
#define STORE_BYTES_LIMIT (1ULL << 50) /* larger is not a figure corral wrote */

struct store_entry {
        char owner[SESSION_OWNER_MAX + 1]; /* "" for the stdio client */
        char name[SESSION_NAME_MAX + 1];
        char image[STORE_IMAGE_MAX + 1];
        long long saved_ms;       /* wall clock (ms since the epoch) of the save */
        unsigned long long bytes; /* the session's files in the store */
        json_t *grant;            /* the servers its code may call: array of strings, or NULL */
        json_t *network;          /* the hosts it may reach: array of strings, or NULL */
        json_t *lost;             /* globals the save could not keep: array of names, or NULL */
};

/* Parses an index (len bytes, not NUL-terminated). On success fills e (its
 * arrays owned by e: store_entry_clear) and returns 0; else a message in
 * err and -EINVAL, e left clear. */
int store_index_parse(const char *text, size_t len, struct store_entry *e, struct err *err);

/* The index of e as compact JSON (malloc'd), or NULL (no memory). */
char *store_index_format(const struct store_entry *e);

void store_entry_clear(struct store_entry *e);

/* Now, as saved_ms counts it: the wall clock (another host reads it). */
long long store_wall_ms(void);

/* The directory of a session: <root>/<owner as lower-case hex, or "_" for
 * "">/<name>. -ENAMETOOLONG when it does not fit, -EINVAL for a name or
 * owner corral would not make, and for "." and "..". */
int store_dir(const char *root, const char *owner, const char *name, char *out, size_t size);

/* Which entries go, oldest save first, so that those left are within
 * max_bytes (0: no bound) and none is older than keep_ms (0: no bound) at
 * now_ms; never the entry at index `keep` (the session being resumed; n
 * or more: none). Writes the indexes that go to out (room for n) and
 * returns how many. */
size_t store_evict_pick(const struct store_entry *v, size_t n, unsigned long long max_bytes,
                        long long keep_ms, long long now_ms, size_t keep, size_t *out);

/* ---- on disk. Every function takes the store's root; below it each
 * step is opened from a directory descriptor without following a link,
 * and must be a directory of this user's. A session's directory holds
 * regular files only, all written by corral. */

/* Reads the session's index (not a link, at most STORE_INDEX_MAX bytes)
 * and checks that it names the session whose directory it is in. */
int store_read(const char *root, const char *owner, const char *name, struct store_entry *e,
               struct err *err);

/* Writes e's index into its directory (made 0700 with its parents if
 * missing) through a file of its own name, fsync and a rename, after
 * setting e->bytes to the space the directory's other files take. */
int store_write(const char *root, struct store_entry *e, struct err *err);

/* Removes a session's directory: its entries (never entering one), then
 * itself. A directory that is not there is not an error. */
int store_remove(const char *root, const char *owner, const char *name, struct err *err);

/* Copies session `from`'s files and index to session `to` of the same
 * owner (a fork), saved now: -EEXIST (and *err) when `to` is in the store
 * already, else as store_read and store_write. The new index in *ret
 * (NULL: not wanted; else to store_entry_clear). */
int store_copy(const char *root, const char *owner, const char *from, const char *to,
               struct store_entry *ret, struct err *err);

/* Every session of the store whose index reads back (owner NULL: every
 * client's), in *ret (malloc'd; each to store_entry_clear) and *n, each
 * with the space its directory takes now (not what its index says). What
 * does not read back is skipped with a warning that says why; only
 * -ENOMEM, or an unreadable root, fails. */
int store_list(const char *root, const char *owner, struct store_entry **ret, size_t *n);

/* Applies the bounds (store_evict_pick) to the whole store, never evicting
 * keep_owner's keep_name (NULL: none) nor a session saved again since it
 * was listed, logging each eviction; removes session directories left
 * without an index for an hour (a save or a removal cut short). Returns
 * how many sessions were evicted, or a negative errno. Two services
 * evicting at once can still race (no lock is taken). */
int store_enforce(const char *root, unsigned long long max_bytes, long long keep_ms,
                  const char *keep_owner, const char *keep_name);

/* ---- a session's /workspace, as a tar in its directory (STORE_TAR) */

#define STORE_TAR "workspace.tar"

struct store_pack;

/* Starts writing the session's tar (under a temporary name; its directory
 * made if missing). */
int store_pack_begin(const char *root, const char *owner, const char *name, struct store_pack **ret,
                     struct err *err);
/* Adds a regular file: `rel` relative to /workspace, mode bits 0777 at most. */
int store_pack_add(struct store_pack *p, const char *rel, unsigned mode, const void *data,
                   size_t len, struct err *err);
/* Ends it: renamed into place when commit, else removed. Frees p. */
int store_pack_end(struct store_pack *p, bool commit, struct err *err);

/* The session's files from its tar, each checked (a regular file, a path
 * files_path takes under /workspace) and in all at most max_bytes: *ret
 * (malloc'd paths and data: store_files_free) and *n. */
struct sandbox_file;
int store_unpack(const char *root, const char *owner, const char *name,
                 unsigned long long max_bytes, struct sandbox_file **ret, size_t *n,
                 struct err *err);
void store_files_free(struct sandbox_file *v, size_t n);
