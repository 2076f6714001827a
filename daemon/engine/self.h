#pragma once
/* corral in a container of its own (the laptop image, images/profiles/
 * corral.profile): whether it runs in one, which one, and where the
 * engine finds a file corral wrote there. Its sandboxes are siblings on
 * the engine whose socket is mounted in, so a path the engine reads is a
 * path on the engine's machine, not in corral's container. */

#include "core/util.h"
#include "engine/engine.h"

#include <stdbool.h>
#include <stddef.h>

/* Whether this process runs in a container of Docker or Podman: one whose
 * /etc/hostname is a mount of the engine's, from a directory named by the
 * container's id, or one with Podman's /run/.containerenv (which
 * --no-hostname keeps; the id is then unknown, and self_engine_path says
 * so). Not /.dockerenv, which images built from a container keep (this
 * project's own CI machines have one), nor `container=`, which other
 * tools set. */
bool self_in_container(void);

/* The engine's id of this container: the 64 hex digits in the source of
 * the /etc/hostname both engines mount (/proc/self/mountinfo). 0, or
 * -ENOENT. */
int self_container_id(char *out, size_t size);
/* The same, from a mountinfo text (for tests). */
int self_container_id_from(const char *mountinfo, char *out, size_t size);

/* The path on the engine's machine of `local`, a file in this container:
 * through a bind or volume mount that holds it (Mounts[]), or in the
 * container's own writable layer (GraphDriver.Data.UpperDir) when it is
 * on the root filesystem. `inspect` is the engine's answer to GET
 * /containers/ID/json; `on_root` whether `local` is on the root filesystem
 * (same device as "/"). The deepest mount that holds it decides, and one
 * without a source on the engine's machine (a tmpfs) is no way. 0 with
 * the path (and in *ret_via the mount's destination, or NULL for the
 * layer), or an error that says why. */
int self_engine_path_from(json_t *inspect, const char *local, bool on_root, char *out, size_t size,
                          const char **ret_via, struct err *e);
/* The same, asking the engine about this container, for the path as it
 * really is, and only when no other file system is mounted between it and
 * the mount that holds it. */
int self_engine_path(struct engine *eng, const char *local, char *out, size_t size, struct err *e);
