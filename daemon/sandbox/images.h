/* What a sandbox may be made of: the images a call may ask for, and the
 * host directories mounted into every sandbox.
 *
 * Images: those `corral image build` labelled on the engine
 * (io.corral.profile, io.corral.packages), plus the configured default; or,
 * when the `images` setting lists some, exactly those plus the default. A
 * call names one by its full name (corral-data:latest), without ":latest",
 * or by its profile's short name (data, for corral-NAME:TAG).
 *
 * Mounts: the `mounts` setting, each "HOST:SANDBOX", checked once at start:
 * the engine must be local (a remote one would mount its own host's path),
 * the host path must exist, and is resolved then (a symlink swapped later
 * changes nothing). Every mount is a read-only bind; symlinks in it resolve
 * inside the container, as all paths there do. */
#pragma once

#include "core/config.h"
#include "engine/engine.h"

#include <jansson.h>

struct sandbox_image {
        char *name;       /* as the engine knows it */
        char *short_name; /* the profile's name for corral-NAME:TAG, else NULL */
        char *profile;    /* io.corral.profile, or NULL for an image corral did not build */
        char *packages;   /* io.corral.packages ("numpy 1.24.2, pandas 1.5.3"), or NULL */
        bool is_default;
};

struct sandbox_images {
        struct sandbox_image *v;
        size_t n;
};

/* The catalogue, from the engine (NULL or unreachable: the configured
 * images alone, with no labels). Blocks on the engine: for start-up. */
int sandbox_images_load(struct engine *eng, const struct config *cfg, struct sandbox_images *ret,
                        struct err *e);
void sandbox_images_free(struct sandbox_images *im);
/* The image a call's `image` argument names, or NULL. */
const struct sandbox_image *sandbox_images_find(const struct sandbox_images *im, const char *arg);
/* What a call may pass: each image's short name, else its name, default
 * first (a new reference: a JSON array of strings). */
json_t *sandbox_images_choices(const struct sandbox_images *im);

/* An image's name as corral writes it: without the "localhost/" or
 * "docker.io/library/" that Podman puts before a name it imported. */
const char *sandbox_image_plain(const char *name);

/* What to do about `image` missing from the engine, fit to how it was
 * named: by a call (`from_call`), or as the default by a flag, a
 * variable, the config file or nobody (config_source). Starts with
 * "build it". */
void sandbox_image_advice(const struct config *cfg, const char *image, bool from_call, char *out,
                          size_t size);

/* The `mounts` setting, checked: [{Source (resolved), Target}] (a new
 * reference; an empty array when there are none), or NULL and a message
 * that says what to change. sandbox_create_body writes them the way each
 * engine takes them. */
json_t *sandbox_mounts_resolve(const struct config *cfg, const struct engine_endpoint *ep,
                               struct err *e);
