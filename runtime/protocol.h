/* What the daemon and the sandbox runtime must agree on, in one place.
 *
 * The daemon includes this header. runtime/assemble.py reads each RT_NAME
 * define below and puts NAME = value at the top of the assembled runtime,
 * so the Python parts use the same figures under the names without RT_.
 * Values are integer expressions of literals, *, << and parentheses. */
#pragma once

#define RT_PROTOCOL          1           /* frame protocol version (sandbox/ready) */
#define RT_OUT_FILES_MAX     64          /* /workspace/out files reported per run */
#define RT_LIST_MAX          10000       /* entries of one sandbox/list (list_files) */
#define RT_MIN_MAX_FRAME     (64 << 10)  /* smallest max_frame */
#define RT_DEFAULT_MAX_FRAME (16 << 20)  /* max_frame when none is given */
#define RT_TIME_LIMIT_MAX_S  (2 * 86400) /* longest time_limit_ms, in seconds */

/* The frames' tags (runtime/README.md, "Frame protocol"). */
#define RT_TAG_HEX            64 /* hex digits of a line's HMAC-SHA256, then a space */
#define RT_TO_RUNTIME_SEQ_BIT 63 /* set in the numbers of the daemon's own lines */

/* A file request's frame: the base64 of its chunk and the rest, which
 * gets max_frame/4, at most this much; the chunk is the base64 room's
 * bytes (files_chunk in daemon/sandbox/files.c, file_read in the runtime). */
#define RT_FILE_SLACK_MAX (64 << 10)

/* The network proxy's frames (net/ ones, runtime/README.md "Network"). */
#define RT_NET_HEAD_MAX  16384       /* a request head, request line through CRLFCRLF */
#define RT_NET_DATA_MAX  65536       /* raw bytes of one net/data */
#define RT_NET_WINDOW    (256 << 10) /* un-acked bytes per connection and direction */
#define RT_NET_ACK_EVERY 65536       /* acks at least this often, and when a queue empties */
