/* A private `podman system service` that corral starts for itself when no
 * engine was named and none answers, so a fresh machine needs no socket
 * setup. It is stopped when corral exits, and dies with corral. */
#pragma once

#include "core/util.h"

#include <sys/types.h>

struct private_engine {
        pid_t pid;
        char *url;  /* unix:///... */
        char *path; /* the socket path */
        char *log;  /* its stderr, removed at stop */
};

/* Returns -ENOENT quietly when no podman binary is installed. `runtime`:
 * the OCI runtime the service runs containers with (NULL: its default). */
int private_engine_start(struct private_engine *pe, const char *runtime, struct err *e);
void private_engine_stop(struct private_engine *pe);
