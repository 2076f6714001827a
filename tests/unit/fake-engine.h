/* A small fake of the engine API for engine-free tests, served on the
 * test's own loop from a unix socket: the requests corral makes for a
 * sandbox's life (version, create, attach, start, inspect, remove, list),
 * a fake runtime behind each container's attach stream, and faults to
 * inject. It is a test double for the state machine and MCP dispatch; the
 * e2e suites run the real engines.
 *
 * The fake runtime does what the code of a sandbox/exec says:
 *   "print:TEXT"  TEXT and a newline on stdout, then status ok
 *   "servers"     the names of the exec's servers as JSON on stdout, ok
 *   "fail"        status error, a ValueError
 *   "progress"    a corral/progress report, then status ok
 *   "hang"        no answer; an interrupt (notifications/cancelled) ends
 *                 it with KeyboardInterrupt and the state kept
 *   "stubborn"    no answer, interrupts ignored
 *   "call"        sends its own tools/call request (id FAKE_CALL_ID), then
 *                 prints the answer it gets as JSON (keys sorted), ok
 *   "die"         the container exits (code 3) without a result
 *   "oom"         the container is OOM-killed without a result
 * and answers sandbox/list (no entries), sandbox/file/write and
 * sandbox/file/read (whole files, kept per container). */
#pragma once

#include "core/loop.h"

#include <jansson.h>
#include <stdbool.h>

#define FAKE_CALL_ID "call-1"

struct fake_engine;

/* Listens on DIR/fake.sock; the URL to give corral is fake_engine_url. */
struct fake_engine *fake_engine_new(struct loop *l, const char *dir);
void fake_engine_free(struct fake_engine *f);
const char *fake_engine_url(const struct fake_engine *f);

/* The next `times` requests of `route` ("ping", "create", "start",
 * "attach", "inspect", "delete", "list", "info", "image": an image's
 * inspect) answer HTTP `status`. */
void fake_engine_fail(struct fake_engine *f, const char *route, int status, int times);
/* Started containers never send sandbox/ready (a hung start) until it is
 * set false again. */
void fake_engine_set_silent(struct fake_engine *f, bool silent);
/* The runtimes hold requests of `method` ("sandbox/list") unanswered
 * until it is changed (NULL: none muted), then answer them; and how many
 * such they received. */
void fake_engine_mute(struct fake_engine *f, const char *method);
unsigned long long fake_engine_muted_seen(const struct fake_engine *f);

/* Requests seen for `route`, and containers created and not removed. */
int fake_engine_count(const struct fake_engine *f, const char *route);
int fake_engine_alive(const struct fake_engine *f);
/* The create body of the container created last (borrowed), or NULL. */
json_t *fake_engine_last_create(const struct fake_engine *f);
/* sandbox/exec frames the fake runtimes received. */
unsigned long long fake_engine_execs(const struct fake_engine *f);
