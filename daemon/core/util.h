/* Small helpers shared by every part of the daemon: cleanup attributes,
 * ownership transfer and the error object that carries a human message. */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#define ARRAY_SIZE(a)  (sizeof(a) / sizeof((a)[0]))
#define _unused_       __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

static inline void freep(void *p)
{
        free(*(void **)p);
}
static inline void closep(int *fd)
{
        if (*fd >= 0)
                close(*fd);
}
#define _cleanup_free_  __attribute__((cleanup(freep)))
#define _cleanup_close_ __attribute__((cleanup(closep)))

/* Hand a pointer out of a cleanup scope: returns it and leaves NULL behind. */
#define TAKE_PTR(p)                                                                                \
        ({                                                                                         \
                __typeof__(p) _t = (p);                                                            \
                (p) = NULL;                                                                        \
                _t;                                                                                \
        })
#define TAKE_FD(fd)                                                                                \
        ({                                                                                         \
                int _t = (fd);                                                                     \
                (fd) = -1;                                                                         \
                _t;                                                                                \
        })

/* The error idiom: functions return 0 or a negative errno-style code and,
 * on failure only, fill an optional error object with a message a person can
 * act on. `kind` classifies the cause (configuration, engine, protocol). */
enum err_kind {
        ERR_NONE = 0,
        ERR_INTERNAL,
        ERR_CONFIG,
        ERR_ENGINE,   /* engine unreachable or answered an error */
        ERR_PROTOCOL, /* a peer broke the frame or HTTP protocol */
        ERR_INVALID,  /* the caller's input is not valid (a name, an argument) */
        ERR_REFUSED,  /* valid, but not now or not here: busy, at a limit, gone */
};

struct err {
        enum err_kind kind;
        int code;
        char msg[1024];
};

_printf_(4, 5) int err_set(struct err *e, enum err_kind kind, int code, const char *fmt, ...);
/* Prefix context to an existing message ("creating container: ..."). */
_printf_(2, 3) void err_prefix(struct err *e, const char *fmt, ...);

/* NULL-terminated arrays of strings: their length, and freeing one
 * (returns NULL for `v = strv_free(v)`). Both accept NULL. */
size_t strv_len(char **v);
/* Append `s`, which is taken (freed on failure; NULL: -ENOMEM, as from a
 * failed strdup). */
int strv_push(char ***v, char *s);
char **strv_free(char **v);

/* A file of corral's under an XDG base directory: $`var`/`rel` when that
 * variable holds an absolute path, else $HOME/`home_dir`/`rel` (caller
 * frees), or NULL when neither is set. */
char *xdg_path(const char *var, const char *home_dir, const char *rel);

/* Whether a[0..n) and b[0..n) are equal, in time that depends on n only
 * (for secrets: tokens, session ids). */
bool str_equal_ct(const char *a, const char *b, size_t n);

/* Monotonic clock in milliseconds. */
long long now_ms(void);
long long now_us(void);

/* The command name of process `pid` (/proc/PID/comm, at most 15 bytes,
 * without its newline): 0, or a negative errno (no such process). */
int proc_comm(long pid, char *buf, size_t size);
/* Host memory of a container's processes: PSS (RSS where the kernel has
 * no smaps_rollup) summed over the parent of `pid` (the engine's monitor:
 * conmon, containerd-shim) and every process under that parent. Returns
 * the number of processes counted, or negative errno. */
int proc_tree_pss(long pid, long long *ret_kb);
/* The parent of `pid`, or -1 (no such process). */
long proc_ppid(long pid);
/* One process's PSS in kB (its RSS where smaps_rollup cannot be read: not
 * ours, or no such file), 0 for one with no memory, -1 when it is gone. */
long long proc_pss_kb(long pid);

/* corral's private directory for this user ($XDG_RUNTIME_DIR/corral, else
 * /tmp/corral-UID), created 0700 and checked to be ours: it holds the private
 * engine socket and the status files. */
int runtime_dir(char *buf, size_t size, struct err *e);

/* Makes the directories above `path` that are missing, mode 0700: 0 or a
 * negative errno. */
/* The program `name` runs, as execvp finds it: itself when it has a '/',
 * else the first executable of that name in PATH (a default when unset).
 * Malloc'd, or NULL. */
char *path_find(const char *name);
int mkdir_parents(const char *path);

/* Writes all n bytes to fd (retrying short writes and EINTR): 0, or a
 * negative errno (-EIO when write made no progress). */
int write_all(int fd, const void *p, size_t n);

/* Whether something accepts connections on the unix socket at `path` (a
 * socket file left by a process that died accepts none). */
bool unix_socket_answers(const char *path);

/* The service's default socket: runtime_dir()/corral.sock. */
int service_socket_path(char *buf, size_t size, struct err *e);

/* This process's resident memory (and its peak) in KiB and CPU time in ms. */
void proc_usage(long *ret_rss_kb, long *ret_hwm_kb, long long *ret_cpu_ms);

/* Parse a size such as "512m", "64k", "1g" or a plain byte count. */
int parse_size(const char *s, unsigned long long *ret);
