/* Secrets and the one way text that may show them leaves corral.
 *
 * A secret is a value the user gave an upstream server to keep (an env or
 * header value, anything ${VAR} put in). Text from an upstream server, or
 * made from its configuration, may hold one: an HTTP error body that echoes
 * the request headers, a line of a server's stderr, a URL. Such text is
 * masked whole first and cut after: cut first, a secret split at the cut
 * no longer matches and its start goes out. Code in a sandbox controls the
 * length of what it sends, so it can make a cut land anywhere.
 *
 * The rule:
 *  - a value under MASK_MIN bytes is no secret (masking "1" or "on" would
 *    garble every message and hide nothing worth hiding);
 *  - a secret is found in any ASCII case, and also as JSON encoders write
 *    it ("\/" or not, \uXXXX for non-ASCII or not, <>& as \u003c... as Go
 *    does or not) and percent-encoded (RFC 3986, encodeURIComponent, HTML
 *    forms), as an error body that echoes it may show it;
 *  - parts of a secret that text may show alone are secrets too: each line
 *    of one with several (a PEM key), the credentials of "Scheme
 *    credentials" (an Authorization value), and for Basic the decoded
 *    "user:password" and the password;
 *  - each run of text covered by secrets (overlapping or adjacent ones
 *    too) becomes one MASK_MARK;
 *  - where corral cuts the text, or its sender may have (MASK_CUT_BEFORE),
 *    an end that is the start of a secret, of any length, is masked too; at
 *    the end of text as it came, only a start of MASK_MIN bytes or more (a
 *    message that ends in "1" is no leak of a secret "1abc...").
 * A prefix of a secret in the middle of a text is not masked: only a
 * sender that cut the secret itself can put one there. */
#pragma once

#include "core/util.h"

#include <stdarg.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define MASK_MIN 4 /* bytes: shorter values are no secrets */
/* In a server's successful answers only values of this many bytes or more
 * are masked: an answer is data the code asked for, and masking a short
 * setting there ("json", "true", a port) would garble it, while a
 * credential is longer. Errors and logs keep MASK_MIN. */
#define MASK_ANSWER_MIN 8
#define MASK_MARK       "***"

struct mask;

struct mask *mask_new(void);
/* Accepts NULL; returns NULL. */
struct mask *mask_free(struct mask *m);
/* Add the secret value[0..len) and the forms it may take in text; a value
 * under MASK_MIN bytes is ignored. 0 or -ENOMEM. */
int mask_add(struct mask *m, const char *value, size_t len);
/* mask_add each string of a NULL-terminated array (NULL: none). */
int mask_add_strv(struct mask *m, char *const *values);
/* The same for the strings of `min` bytes or more only. */
int mask_add_strv_min(struct mask *m, char *const *values, size_t min);
/* Number of distinct forms held (for tests). */
size_t mask_forms(struct mask *m);

/* The text may have been cut at its end before it came here (a body or a
 * line read up to a limit). */
#define MASK_CUT_BEFORE 1u

/* A copy of text[0..len) with every secret masked, then cut to at most
 * `max` bytes (0: no limit) on a UTF-8 boundary, the end masked as the rule
 * above says. `m` NULL masks nothing but still cuts. Caller frees; NULL
 * only when out of memory. */
char *mask_text(struct mask *m, const char *text, size_t len, size_t max, unsigned flags);
/* The same into out[0..size) (size > 0), always NUL-terminated; when out
 * of memory the whole text is withheld as MASK_MARK. Returns the length. */
size_t mask_into(struct mask *m, const char *text, size_t len, unsigned flags, char *out,
                 size_t size);
/* mask_text made valid UTF-8: what is shown in a log line or an error. */
char *mask_shown(struct mask *m, const char *text, size_t len, size_t max, unsigned flags);
/* err_set with its message made whole, then masked and cut to fit: what
 * it quotes (a command, a path, a server's words) may hold a secret. */
_printf_(5, 6) int mask_err(struct mask *m, struct err *e, enum err_kind kind, int code,
                            const char *fmt, ...);
/* The same into out[0..size). */
_printf_(4, 0) void mask_vformat(struct mask *m, char *out, size_t size, const char *fmt,
                                 va_list ap);
/* A copy of `v` with every string value in it masked as mask_text does
 * (uncut) and made valid UTF-8: what an upstream server answers may echo a
 * secret it was given, and its answer goes to sandboxed code. Object keys
 * are kept: they are the answer's structure, and a server that echoes its
 * environment shows a secret's name there, not its value. `v` itself (a
 * new reference) when `m` holds no secret; NULL when out of memory. A
 * string's bytes after an embedded NUL are dropped. */
json_t *mask_json(struct mask *m, json_t *v);
