/* The fake engine of fake-engine.h: HTTP/1.1 over a unix socket, one
 * request at a time per connection (what libcurl sends corral's way), and
 * the attach stream as Docker frames it (8-byte headers). */
#include "fake-engine.h"

#include "core/buf.h"
#include "core/list.h"
#include "sandbox/frame_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define ROUTES 9
static const char *const route_names[ROUTES] = {"ping",   "create", "start", "attach", "inspect",
                                                "delete", "list",   "info",  "image"};

struct fake_container {
        struct fake_engine *f;
        struct list node;
        char id[65];
        json_t *create;
        bool started, ready_sent, exited, oom;
        int exit_code;
        json_int_t hanging; /* the exec waiting for an interrupt, or 0 */
        json_int_t calling; /* the exec whose code waits for its tools/call's answer, or 0 */
        bool stubborn;
        struct fake_conn *stream;
        struct timer *ready_timer;
        json_t *held; /* muted requests (their lines), answered once unmuted */
        /* The runtime's tags (sandbox/frame_auth.h): the key corral sent,
         * and the number of the next frame after sandbox/ready. */
        unsigned char key[FRAME_KEY_LEN];
        bool keyed, tagging;
        uint64_t seq, in_seq; /* ours after sandbox/ready; corral's after the key */
        char *last;           /* the last tagged line sent, for a replay */
        json_t *files;        /* sandbox/file/read, write: path -> base64 of the bytes */
};

struct fake_conn {
        struct fake_engine *f;
        struct list node;
        int fd;
        struct watch *w;
        struct buf in, out;
        struct fake_container *c; /* set once upgraded to an attach stream */
        size_t loaded;            /* of the runtime's bytes, first on its stdin */
        bool close_after;         /* close once `out` is written */
};

struct fake_engine {
        struct loop *loop;
        int fd;
        struct watch *w;
        char path[108], url[128];
        struct list conns, containers;
        int counts[ROUTES];
        int fail_status[ROUTES], fail_times[ROUTES];
        bool silent;
        char muted[32]; /* a runtime method left unanswered ("": none) */
        unsigned long long muted_seen;
        unsigned long next_id;
        json_t *last_create;
        unsigned long long execs;
};

static int route_index(const char *route)
{
        for (int i = 0; i < ROUTES; i++)
                if (strcmp(route_names[i], route) == 0)
                        return i;
        return -1;
}

static void conn_free(struct fake_conn *c)
{
        if (c->c && c->c->stream == c)
                c->c->stream = NULL;
        list_del(&c->node);
        watch_remove(c->w);
        close(c->fd);
        buf_free(&c->in);
        buf_free(&c->out);
        free(c);
}

static void conn_flush(struct fake_conn *c)
{
        while (c->out.len) {
                ssize_t k = send(c->fd, c->out.data, c->out.len, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        c->out.len = 0;
                        c->close_after = true;
                        break;
                }
                buf_consume(&c->out, (size_t)k);
        }
        if (!c->out.len && c->close_after) {
                conn_free(c);
                return;
        }
        watch_modify(c->w, EPOLLIN | (c->out.len ? EPOLLOUT : 0));
}

static void respond(struct fake_conn *c, int status, json_t *body)
{
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        size_t n = text ? strlen(text) : 0;
        char head[256];
        int k = snprintf(head, sizeof(head),
                         "HTTP/1.1 %d Fake\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n",
                         status, n);
        buf_append(&c->out, head, (size_t)k);
        if (n)
                buf_append(&c->out, text, n);
        free(text);
        conn_flush(c);
}

static void respond_error(struct fake_conn *c, int status, const char *msg)
{
        respond(c, status, json_pack("{s:s}", "message", msg));
}

/* ---- the fake runtime behind an attach stream */

static void stream_write(struct fake_container *ct, int stream, const char *p, size_t n)
{
        struct fake_conn *c = ct->stream;
        if (!c)
                return;
        unsigned char h[8] = {(unsigned char)stream,
                              0,
                              0,
                              0,
                              (unsigned char)(n >> 24),
                              (unsigned char)(n >> 16),
                              (unsigned char)(n >> 8),
                              (unsigned char)n};
        buf_append(&c->out, h, sizeof(h));
        buf_append(&c->out, p, n);
        conn_flush(c);
}

/* Every frame after sandbox/ready goes with its tag, as the runtime's
 * supervisor writes it (without a key: untagged, so corral ends it). */
static void send_frame(struct fake_container *ct, json_t *msg)
{
        char *text = json_dumps(msg, JSON_COMPACT);
        json_decref(msg);
        if (!text)
                return;
        size_t n = strlen(text);
        char *line = malloc(FRAME_TAG_HEX + n + 2);
        size_t at = 0;
        if (ct->tagging && ct->keyed && line) {
                frame_auth_tag(ct->key, ct->seq++, text, n, line);
                line[FRAME_TAG_HEX] = ' ';
                at = FRAME_TAG_HEX + 1;
        }
        if (line) {
                memcpy(line + at, text, n);
                line[at + n] = '\n';
                stream_write(ct, 1, line, at + n + 1);
                if (at) {
                        free(ct->last);
                        ct->last = strndup(line, at + n + 1);
                }
        }
        free(line);
        free(text);
}

/* A forged frame: a plausible result for exec `id`, without a tag, with
 * the tag of another number, or an earlier line again. */
static void send_forged(struct fake_container *ct, json_t *id, const char *how)
{
        char *text = NULL;
        json_t *res = json_pack("{s:s, s:O, s:{s:s, s:i}}", "jsonrpc", "2.0", "id", id, "result",
                                "status", "ok", "exit_code", 0);
        text = json_dumps(res, JSON_COMPACT);
        json_decref(res);
        if (!text)
                return;
        char tag[FRAME_TAG_HEX + 1], *line = NULL;
        int n = -1;
        if (strcmp(how, "forge") == 0)
                n = asprintf(&line, "%s\n", text);
        else if (strcmp(how, "forge-seq") == 0) {
                frame_auth_tag(ct->key, ct->seq + 1, text, strlen(text), tag);
                n = asprintf(&line, "%s %s\n", tag, text);
        } else if (ct->last) /* replay */
                n = asprintf(&line, "%s", ct->last);
        if (n > 0)
                stream_write(ct, 1, line, (size_t)n);
        free(line);
        free(text);
}

static void send_result(struct fake_container *ct, json_t *id, json_t *result)
{
        send_frame(ct, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

/* Closes once what is queued went out, from the loop (not under a caller
 * that still uses it). */
static void conn_close_later(struct fake_conn *c)
{
        c->close_after = true;
        c->c = NULL;
        watch_modify(c->w, EPOLLIN | EPOLLOUT);
}

/* The container ends: its stream closes once what is queued went out. */
static void container_exit(struct fake_container *ct, int code, bool oom)
{
        ct->exited = true;
        ct->exit_code = code;
        ct->oom = oom;
        ct->hanging = 0;
        if (ct->stream)
                conn_close_later(ct->stream);
        ct->stream = NULL;
}

static void run_exec(struct fake_container *ct, json_t *id, json_t *params)
{
        const char *code = json_string_value(json_object_get(params, "code"));
        if (!code)
                code = "";
        if (strncmp(code, "print:", 6) == 0 || strcmp(code, "servers") == 0) {
                char *line = NULL, *names = NULL;
                if (code[0] == 's') { /* the names of the exec's servers, as JSON */
                        json_t *list = json_array();
                        size_t i;
                        json_t *v;
                        json_array_foreach(json_object_get(params, "servers"), i, v)
                            json_array_append(list, json_object_get(v, "name"));
                        names = json_dumps(list, JSON_COMPACT);
                        json_decref(list);
                }
                int k = asprintf(&line, "%s\n", names ? names : code + 6);
                free(names);
                if (k < 0)
                        return;
                send_frame(ct,
                           json_pack("{s:s, s:s, s:{s:s, s:s}}", "jsonrpc", "2.0", "method",
                                     "sandbox/output", "params", "stream", "stdout", "data", line));
                send_result(ct, id,
                            json_pack("{s:s, s:i, s:I, s:I}", "status", "ok", "exit_code", 0,
                                      "stdout_bytes", (json_int_t)strlen(line), "memory_bytes",
                                      (json_int_t)4096));
                free(line);
        } else if (strcmp(code, "fail") == 0) {
                send_result(ct, id,
                            json_pack("{s:s, s:i, s:{s:s, s:s, s:s}}", "status", "error",
                                      "exit_code", 1, "error", "type", "ValueError", "message",
                                      "bad value", "traceback", "ValueError: bad value"));
        } else if (strcmp(code, "progress") == 0) {
                send_frame(ct, json_pack("{s:s, s:s, s:{s:i, s:i, s:s}}", "jsonrpc", "2.0",
                                         "method", "corral/progress", "params", "progress", 1,
                                         "total", 2, "message", "half"));
                send_result(ct, id, json_pack("{s:s, s:i}", "status", "ok", "exit_code", 0));
        } else if (strcmp(code, "hang") == 0 || strcmp(code, "stubborn") == 0) {
                ct->hanging = json_integer_value(id);
                ct->stubborn = strcmp(code, "stubborn") == 0;
        } else if (strcmp(code, "call") == 0) {
                ct->calling = json_integer_value(id);
                send_frame(ct,
                           json_pack("{s:s, s:s, s:s, s:{s:s}}", "jsonrpc", "2.0", "id",
                                     FAKE_CALL_ID, "method", "tools/call", "params", "name", "t"));
        } else if (strcmp(code, "forge") == 0 || strcmp(code, "forge-seq") == 0 ||
                   strcmp(code, "replay") == 0) {
                send_frame(ct, json_pack("{s:s, s:s, s:{s:s, s:s}}", "jsonrpc", "2.0", "method",
                                         "sandbox/output", "params", "stream", "stdout", "data",
                                         "real\n"));
                send_forged(ct, id, code);
        } else if (strcmp(code, "die") == 0) {
                container_exit(ct, 3, false);
        } else if (strcmp(code, "oom") == 0) {
                container_exit(ct, 137, true);
        } else {
                send_result(ct, id, json_pack("{s:s, s:i}", "status", "ok", "exit_code", 0));
        }
}

static void runtime_frame(struct fake_container *ct, const char *line, size_t n)
{
        json_t *msg = json_loadb(line, n, 0, NULL);
        const char *method = json_string_value(json_object_get(msg, "method"));
        json_t *id = json_object_get(msg, "id");
        json_t *params = json_object_get(msg, "params");
        if (!method) {
                /* An answer to the code's own request: a "call" prints it. */
                if (ct->calling && json_is_string(id) &&
                    strcmp(json_string_value(id), FAKE_CALL_ID) == 0) {
                        json_t *eid = json_integer(ct->calling);
                        ct->calling = 0;
                        char *answer = json_dumps(msg, JSON_COMPACT | JSON_SORT_KEYS);
                        send_frame(ct, json_pack("{s:s, s:s, s:{s:s, s:s}}", "jsonrpc", "2.0",
                                                 "method", "sandbox/output", "params", "stream",
                                                 "stdout", "data", answer ? answer : "?"));
                        free(answer);
                        send_result(ct, eid,
                                    json_pack("{s:s, s:i}", "status", "ok", "exit_code", 0));
                        json_decref(eid);
                }
        } else if (strcmp(method, "sandbox/key") == 0) {
                const char *hex = json_string_value(json_object_get(params, "key"));
                ct->keyed = hex && strlen(hex) == 2 * FRAME_KEY_LEN;
                for (size_t i = 0; ct->keyed && i < FRAME_KEY_LEN; i++) {
                        unsigned v;
                        ct->keyed = sscanf(hex + 2 * i, "%2x", &v) == 1;
                        ct->key[i] = (unsigned char)v;
                }
        } else if (strcmp(method, ct->f->muted) == 0) {
                /* Answered late: once it is unmuted. */
                ct->f->muted_seen++;
                if (!ct->held)
                        ct->held = json_array();
                json_array_append_new(ct->held, json_stringn(line, n));
        } else if (strcmp(method, "sandbox/exec") == 0) {
                ct->f->execs++;
                run_exec(ct, id, params);
        } else if (strcmp(method, "sandbox/list") == 0) {
                send_result(ct, id, json_pack("{s:[]}", "entries"));
        } else if (strcmp(method, "sandbox/file/write") == 0) {
                /* Whole files only: a chunk at offset 0 replaces it. */
                const char *path = json_string_value(json_object_get(params, "path"));
                json_t *data = json_object_get(params, "data");
                char real[1200];
                snprintf(real, sizeof(real), "/workspace/%s", path ? path : "");
                if (!ct->files)
                        ct->files = json_object();
                if (path && json_is_string(data))
                        json_object_set(ct->files, path, data);
                send_result(ct, id,
                            json_pack("{s:s, s:I}", "path", real, "size",
                                      (json_int_t)json_string_length(data) / 4 * 3));
        } else if (strcmp(method, "sandbox/file/read") == 0) {
                const char *path = json_string_value(json_object_get(params, "path"));
                json_t *data = path && ct->files ? json_object_get(ct->files, path) : NULL;
                char real[1200];
                snprintf(real, sizeof(real), "/workspace/%s", path ? path : "");
                if (!data)
                        send_frame(ct, json_pack("{s:s, s:O, s:{s:i, s:s, s:{s:s}}}", "jsonrpc",
                                                 "2.0", "id", id, "error", "code", -32001,
                                                 "message", "no such file or directory", "data",
                                                 "kind", "ENOENT"));
                else
                        send_result(ct, id,
                                    json_pack("{s:s, s:O, s:I}", "path", real, "data", data, "size",
                                              (json_int_t)json_string_length(data) / 4 * 3));
        } else if (strcmp(method, "notifications/cancelled") == 0) {
                json_int_t rid = json_integer_value(json_object_get(params, "requestId"));
                if (ct->hanging && rid == ct->hanging && !ct->stubborn) {
                        json_t *hid = json_integer(ct->hanging);
                        ct->hanging = 0;
                        send_result(ct, hid,
                                    json_pack("{s:s, s:i, s:s, s:{s:s, s:s}}", "status", "error",
                                              "exit_code", 1, "state", "kept", "error", "type",
                                              "KeyboardInterrupt", "message", ""));
                        json_decref(hid);
                }
        }
        json_decref(msg);
}

static void ready_now(struct timer *t, void *userdata)
{
        struct fake_container *ct = userdata;
        (void)t;
        if (ct->ready_sent || ct->exited || !ct->stream || ct->f->silent)
                return;
        ct->ready_sent = true;
        send_frame(ct, json_pack("{s:s, s:s, s:{s:i, s:s}}", "jsonrpc", "2.0", "method",
                                 "sandbox/ready", "params", "protocol", 1, "runtime", "fake"));
        ct->tagging = true;
}

/* Started and attached: the runtime says it is ready a moment later (after
 * the start's answer, as a real runtime's import takes a while). */
static void maybe_ready(struct fake_container *ct)
{
        if (!ct->started || !ct->stream || ct->ready_sent || ct->f->silent)
                return;
        if (ct->ready_timer || timer_add(ct->f->loop, ready_now, ct, &ct->ready_timer) == 0)
                timer_arm(ct->ready_timer, 5);
}

/* ---- HTTP */

static struct fake_container *container_find(struct fake_engine *f, const char *id, size_t n)
{
        struct fake_container *ct;
        list_for_each(ct, &f->containers, node)
        {
                if (strlen(ct->id) == n && strncmp(ct->id, id, n) == 0)
                        return ct;
        }
        return NULL;
}

static void container_free(struct fake_container *ct)
{
        if (ct->stream)
                conn_close_later(ct->stream);
        list_del(&ct->node);
        timer_remove(ct->ready_timer);
        json_decref(ct->create);
        json_decref(ct->held);
        free(ct->last);
        json_decref(ct->files);
        free(ct);
}

/* Whether a fault answers this request instead. */
static bool faulted(struct fake_conn *c, int route)
{
        struct fake_engine *f = c->f;
        f->counts[route]++;
        if (f->fail_times[route] <= 0)
                return false;
        f->fail_times[route]--;
        c->close_after = route == 3; /* a refused attach closes */
        respond_error(c, f->fail_status[route], "fake engine: injected fault");
        return true;
}

static void do_create(struct fake_conn *c, const char *body, size_t n)
{
        struct fake_engine *f = c->f;
        struct fake_container *ct = calloc(1, sizeof(*ct));
        ct->f = f;
        ct->create = json_loadb(body, n, 0, NULL);
        snprintf(ct->id, sizeof(ct->id), "%064lx", ++f->next_id * 0x1f1f1f1fUL);
        json_decref(f->last_create);
        f->last_create = json_incref(ct->create);
        list_append(&f->containers, &ct->node);
        respond(c, 201, json_pack("{s:s, s:[]}", "Id", ct->id, "Warnings"));
}

static void do_attach(struct fake_conn *c, struct fake_container *ct)
{
        static const char head[] = "HTTP/1.1 101 UPGRADED\r\n"
                                   "Content-Type: application/vnd.docker.raw-stream\r\n"
                                   "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
        buf_append(&c->out, head, sizeof(head) - 1);
        c->c = ct;
        ct->stream = c;
        conn_flush(c);
        maybe_ready(ct);
}

static json_t *container_list(struct fake_engine *f)
{
        json_t *list = json_array();
        struct fake_container *ct;
        list_for_each(ct, &f->containers, node)
        {
                json_t *labels = json_object_get(ct->create, "Labels");
                json_array_append_new(list, json_pack("{s:s, s:O}", "Id", ct->id, "Labels",
                                                      labels ? labels : json_object()));
        }
        return list;
}

/* The container route "/containers/ID/what" or "/containers/ID?...". */
static void container_route(struct fake_conn *c, const char *method, const char *rest)
{
        struct fake_engine *f = c->f;
        size_t idlen = strcspn(rest, "/?");
        struct fake_container *ct = container_find(f, rest, idlen);
        const char *what = rest + idlen;
        int route = strncmp(what, "/attach", 7) == 0  ? 3
                    : strncmp(what, "/start", 6) == 0 ? 2
                    : strncmp(what, "/json", 5) == 0  ? 4
                    : strcmp(method, "DELETE") == 0   ? 5
                                                      : -1;
        if (route < 0) {
                respond_error(c, 404, "fake engine: no such route");
                return;
        }
        if (faulted(c, route))
                return;
        if (!ct) {
                c->close_after = route == 3; /* a refused attach closes */
                respond_error(c, 404, "no such container");
                return;
        }
        switch (route) {
        case 3:
                do_attach(c, ct);
                break;
        case 2:
                ct->started = true;
                respond(c, 204, NULL);
                maybe_ready(ct);
                break;
        case 4:
                respond(c, 200,
                        json_pack("{s:s, s:{s:b, s:i, s:b}}", "Id", ct->id, "State", "Running",
                                  !ct->exited, "ExitCode", ct->exit_code, "OOMKilled", ct->oom));
                break;
        default:
                container_free(ct);
                respond(c, 204, NULL);
        }
}

static void handle_request(struct fake_conn *c, const char *method, const char *path,
                           const char *body, size_t n)
{
        struct fake_engine *f = c->f;
        if (strncmp(path, "/v1.41", 6) == 0)
                path += 6;
        if (strcmp(path, "/_ping") == 0) {
                /* Docker's headers, not Podman's: taken for Docker. */
                if (!faulted(c, 0)) {
                        static const char ping[] = "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\n"
                                                   "Content-Type: text/plain\r\n"
                                                   "Content-Length: 2\r\n\r\nOK";
                        buf_append(&c->out, ping, sizeof(ping) - 1);
                        conn_flush(c);
                }
        } else if (strcmp(path, "/info") == 0) {
                /* What corral reads of it: what the engine can enforce. */
                if (!faulted(c, 7))
                        respond(c, 200,
                                json_pack("{s:s, s:b, s:[s]}", "CgroupVersion", "2", "Rootless", 0,
                                          "SecurityOptions", "name=seccomp,profile=default"));
        } else if (strcmp(path, "/containers/create") == 0) {
                if (!faulted(c, 1))
                        do_create(c, body, n);
        } else if (strncmp(path, "/containers/json", 16) == 0) {
                if (!faulted(c, 6))
                        respond(c, 200, container_list(f));
        } else if (strncmp(path, "/containers/", 12) == 0) {
                container_route(c, method, path + 12);
        } else if (strncmp(path, "/images/json", 12) == 0) {
                respond(c, 200, json_array()); /* none built by corral */
        } else if (strncmp(path, "/images/", 8) == 0) {
                /* Any image is there, with no labels. */
                if (!faulted(c, 8))
                        respond(
                            c, 200,
                            json_pack("{s:s, s:{s:{}}}", "Id", "sha256:fake", "Config", "Labels"));
        } else {
                respond_error(c, 404, "fake engine: no such route");
        }
}

/* One whole request in c->in: handled and consumed; false when not yet. */
static bool take_request(struct fake_conn *c)
{
        buf_append(&c->in, "", 1); /* a NUL for the string functions */
        c->in.len--;
        char *end = strstr(c->in.data, "\r\n\r\n");
        if (!end)
                return false;
        size_t head = (size_t)(end + 4 - c->in.data);
        const char *cl = strcasestr(c->in.data, "\r\nContent-Length:");
        size_t n = cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0;
        if (c->in.len < head + n)
                return false;
        char method[16] = "", path[1024] = "";
        if (sscanf(c->in.data, "%15s %1023s", method, path) != 2) {
                c->close_after = true;
                respond_error(c, 400, "bad request");
                return false;
        }
        char *body = malloc(n + 1);
        memcpy(body, c->in.data + head, n);
        body[n] = '\0';
        buf_consume(&c->in, head + n);
        handle_request(c, method, path, body, n);
        free(body);
        return true;
}

/* Stdin of an attached container: newline-ended frames. */
static bool conn_alive(struct fake_engine *f, struct fake_conn *c, int fd)
{
        struct fake_conn *x;
        list_for_each(x, &f->conns, node) if (x == c && x->fd == fd) return true;
        return false;
}

/* runtime/assemble.py: what the container's loader expects first. */
extern const char corral_runtime_src[];
extern const size_t corral_runtime_len;

static void take_stdin(struct fake_conn *c)
{
        struct fake_engine *f = c->f;
        int fd = c->fd;
        char *nl;
        /* As the loader does: the runtime's bytes first, or exit 70. */
        if (c->c && c->loaded < corral_runtime_len) {
                size_t n = corral_runtime_len - c->loaded;
                n = n < c->in.len ? n : c->in.len;
                if (memcmp(c->in.data, corral_runtime_src + c->loaded, n) != 0) {
                        container_exit(c->c, 70, false);
                        return;
                }
                c->loaded += n;
                buf_consume(&c->in, n);
        }
        while (c->c && (nl = memchr(c->in.data, '\n', c->in.len))) {
                size_t n = (size_t)(nl - c->in.data);
                char *line = malloc(n + 1);
                memcpy(line, c->in.data, n);
                line[n] = '\0';
                buf_consume(&c->in, n + 1);
                /* After the key, corral's lines carry their tags, numbered
                 * on their own; a line that fails ends the container (the
                 * runtime says sandbox/forged, corral's tests see it end). */
                const char *body = line;
                size_t bn = n;
                if (c->c->keyed) {
                        char want[FRAME_TAG_HEX + 1];
                        if (n > FRAME_TAG_HEX)
                                frame_auth_tag(c->c->key, FRAME_SEQ_TO_RUNTIME | c->c->in_seq,
                                               line + FRAME_TAG_HEX + 1, n - FRAME_TAG_HEX - 1,
                                               want);
                        if (n <= FRAME_TAG_HEX || line[FRAME_TAG_HEX] != ' ' ||
                            memcmp(want, line, FRAME_TAG_HEX) != 0) {
                                free(line);
                                container_exit(c->c, 71, false);
                                return;
                        }
                        c->c->in_seq++;
                        body = line + FRAME_TAG_HEX + 1;
                        bn = n - FRAME_TAG_HEX - 1;
                }
                runtime_frame(c->c, body, bn);
                free(line);
                /* An answer written to a stream corral closed frees it. */
                if (!conn_alive(f, c, fd))
                        return;
        }
}

static void conn_event(struct watch *w, uint32_t events, void *userdata)
{
        struct fake_conn *c = userdata;
        (void)w;
        if (events & EPOLLOUT) {
                conn_flush(c); /* may free c */
                return;
        }
        char chunk[65536];
        ssize_t k = recv(c->fd, chunk, sizeof(chunk), 0);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (k <= 0) {
                if (c->c)
                        c->c->stream = NULL;
                conn_free(c);
                return;
        }
        buf_append(&c->in, chunk, (size_t)k);
        if (c->c) {
                take_stdin(c);
                return;
        }
        struct fake_engine *f = c->f;
        int fd = c->fd;
        /* A request may turn the connection into a stream, or close it. */
        while (!c->c && !c->close_after && take_request(c)) {
                bool alive = false;
                struct fake_conn *x;
                list_for_each(x, &f->conns, node) alive = alive || (x == c && x->fd == fd);
                if (!alive)
                        return;
        }
}

static void accept_event(struct watch *w, uint32_t events, void *userdata)
{
        struct fake_engine *f = userdata;
        (void)w;
        (void)events;
        int fd = accept4(f->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
                return;
        struct fake_conn *c = calloc(1, sizeof(*c));
        c->f = f;
        c->fd = fd;
        buf_init(&c->in, 64 << 20);
        buf_init(&c->out, 64 << 20);
        list_append(&f->conns, &c->node);
        watch_add(f->loop, fd, EPOLLIN, conn_event, c, &c->w);
}

struct fake_engine *fake_engine_new(struct loop *l, const char *dir)
{
        struct fake_engine *f = calloc(1, sizeof(*f));
        f->loop = l;
        list_init(&f->conns);
        list_init(&f->containers);
        snprintf(f->path, sizeof(f->path), "%s/fake.sock", dir);
        snprintf(f->url, sizeof(f->url), "unix://%s", f->path);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
        unlink(f->path);
        f->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (f->fd < 0 || bind(f->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            listen(f->fd, 64) < 0 || watch_add(l, f->fd, EPOLLIN, accept_event, f, &f->w) < 0) {
                perror("fake engine");
                exit(1);
        }
        return f;
}

void fake_engine_free(struct fake_engine *f)
{
        while (!list_empty(&f->containers))
                container_free(list_first(&f->containers, struct fake_container, node));
        while (!list_empty(&f->conns))
                conn_free(list_first(&f->conns, struct fake_conn, node));
        watch_remove(f->w);
        close(f->fd);
        unlink(f->path);
        json_decref(f->last_create);
        free(f);
}

const char *fake_engine_url(const struct fake_engine *f)
{
        return f->url;
}

void fake_engine_fail(struct fake_engine *f, const char *route, int status, int times)
{
        int i = route_index(route);
        if (i < 0)
                abort();
        f->fail_status[i] = status;
        f->fail_times[i] = times;
}

void fake_engine_set_silent(struct fake_engine *f, bool silent)
{
        f->silent = silent;
        /* Those started while it was silent get ready now. */
        struct fake_container *ct;
        list_for_each(ct, &f->containers, node) maybe_ready(ct);
}

void fake_engine_mute(struct fake_engine *f, const char *method)
{
        snprintf(f->muted, sizeof(f->muted), "%s", method ? method : "");
        struct fake_container *ct;
        list_for_each(ct, &f->containers, node)
        {
                json_t *held = ct->held;
                ct->held = NULL;
                size_t i;
                json_t *line;
                json_array_foreach(held, i, line)
                    runtime_frame(ct, json_string_value(line), json_string_length(line));
                json_decref(held);
        }
}

unsigned long long fake_engine_muted_seen(const struct fake_engine *f)
{
        return f->muted_seen;
}

int fake_engine_count(const struct fake_engine *f, const char *route)
{
        int i = route_index(route);
        return i < 0 ? -1 : f->counts[i];
}

int fake_engine_alive(const struct fake_engine *f)
{
        return (int)list_length(&f->containers);
}

json_t *fake_engine_last_create(const struct fake_engine *f)
{
        return f->last_create;
}

unsigned long long fake_engine_execs(const struct fake_engine *f)
{
        return f->execs;
}
