/* libcurl's multi interface driven by the event loop: libcurl says which
 * sockets to watch and when to wake it up, the loop hands back readiness and
 * timeouts, and every finished transfer is reported to the callback given
 * when its easy handle was added. Shared by the engine client and the HTTP
 * upstream client; nothing here blocks. */
#pragma once

#include "core/loop.h"

#include <curl/curl.h>

struct curl_loop;

/* A transfer ended (`result` CURLE_OK: it got a whole answer, whatever its
 * status). The handle has already left the multi handle, so the callback may
 * clean it up, add it again or add others. It runs outside every libcurl
 * callback. */
typedef void (*curl_done_cb)(CURL *easy, CURLcode result, void *userdata);

/* Also initialises libcurl once per process. */
int curl_loop_new(struct loop *l, struct curl_loop **ret);
/* Transfers still added are removed (not cleaned up) without a callback.
 * Accepts NULL. */
void curl_loop_free(struct curl_loop *cl);
struct loop *curl_loop_loop(const struct curl_loop *cl);

/* Start a transfer. The curl loop owns the handle's CURLOPT_PRIVATE while
 * it is added; do not set or read it. Must not be called from inside a
 * libcurl callback (libcurl refuses recursive calls). */
int curl_loop_add(struct curl_loop *cl, CURL *easy, curl_done_cb cb, void *userdata);
/* The same for a CURLOPT_CONNECT_ONLY handle whose connection the caller
 * then uses (curl_easy_send, curl_easy_recv): when it is made (or fails)
 * the callback runs with the handle still added, and it stays added,
 * holding the connection, until curl_loop_remove. */
int curl_loop_add_kept(struct curl_loop *cl, CURL *easy, curl_done_cb cb, void *userdata);
/* Abort a transfer: no callback follows. Harmless for a handle that is not
 * added (or already finished). Same restriction as curl_loop_add. */
void curl_loop_remove(struct curl_loop *cl, CURL *easy);
