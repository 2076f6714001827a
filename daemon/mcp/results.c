/* The whole output of a client's runs, kept on the host so that it can be
 * read back in pieces: a tool result shows at most result_max_chars of it
 * (tools.c), and names where the rest is, corral://run/{id}/stdout,
 * /stderr and, for a single-use run, /out/{path} for the files it wrote.
 * read_file and resources/read take those names (results_read).
 *
 * Each run's streams go to files of their own while it runs, under one
 * directory per client inside one per process ($XDG_CACHE_HOME/corral/
 * results/PID-XXXXXX, on disk: a run may print gigabytes). A run is kept
 * result_keep_s after it ended, and while its session is open; a client
 * keeps at most result_store_max bytes, and at most RUNS_MAX runs: the
 * oldest that ended go first. A client is its owner name (mcp/server.h):
 * a named client of the service finds its runs again in its next MCP
 * session, as it finds its sessions (the Inspector CLI makes one MCP
 * session a command); any other client's store goes with its MCP
 * session. The process's directory goes at its exit, and one left by a
 * corral that was killed when the next one starts (a lock file tells). */
#include "mcp/internal.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/util.h"
#include "sandbox/files.h"
#include "sandbox/session.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define RUNS_MAX             256 /* runs one client keeps */
#define OUT_MAX              64  /* files of one run kept (the runtime sends at most this many) */
#define ID_LEN               8   /* hex digits of a run's id */
#define URI_RUN              "corral://run/"
#define STREAM_OF(is_stderr) ((is_stderr) ? 1 : 0)

static const char *const stream_names[2] = {"stdout", "stderr"};

struct kept_stream {
        int fd;                   /* while the run writes; -1 */
        unsigned long long len;   /* bytes in the file */
        unsigned long long total; /* bytes the run wrote */
        bool full;                /* the store's bound stopped it */
};

struct kept_run {
        struct results *st;
        struct list node; /* in st->runs, oldest first */
        char id[ID_LEN + 1];
        char *session; /* kept while it is open; NULL: a single-use run */
        struct kept_stream s[2];
        json_t *out; /* [{path, mime_type, size}], the file out-N for entry N */
        unsigned long long out_bytes;
        bool running;
        long long expires; /* ms (now_ms), once it ended */
};

struct results {
        struct list node; /* in stores */
        char owner[40];
        int users;  /* MCP sessions of the client that hold it */
        bool named; /* it outlives them (a named client's) */
        struct loop *loop;
        const struct config *cfg;
        struct session_mgr *sessions;
        char dir[PATH_MAX - 64]; /* its files' names fit PATH_MAX */
        struct list runs;
        size_t n;
        unsigned long long bytes;
        struct timer *timer; /* the next run's expiry */
        bool warned;
};

/* Every client's store, by owner. */
static struct list stores = LIST_HEAD_INIT(stores);

/* ---- the process's directory: BASE/PID-XXXXXX, holding a lock file
 * locked while the process lives, so that another corral can tell a
 * directory left by a dead one (its lock is free) whatever its PID means
 * there (another host sharing the home, another PID namespace). */

static char process_dir[PATH_MAX - 128];
static pid_t process_pid;
static int process_lock = -1;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        remove(path);
        return 0;
}

static void remove_tree(const char *path)
{
        nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void process_dir_remove(void)
{
        /* Not from a child that exits without exec'ing. */
        if (process_dir[0] && getpid() == process_pid)
                remove_tree(process_dir);
}

/* Directories of corrals that are gone (their lock is free), removed. */
static void sweep(const char *base)
{
        DIR *d = opendir(base);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                const char *p = de->d_name;
                size_t digits = strspn(p, "0123456789");
                char path[PATH_MAX];
                if (!digits || p[digits] != '-' ||
                    snprintf(path, sizeof(path), "%s/%s/lock", base, p) >= (int)sizeof(path))
                        continue;
                int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        continue; /* being made, or not one of ours */
                bool gone = flock(fd, LOCK_EX | LOCK_NB) == 0;
                close(fd);
                if (gone && snprintf(path, sizeof(path), "%s/%s", base, p) < (int)sizeof(path))
                        remove_tree(path);
        }
        closedir(d);
}

/* A directory of this user's, 0700, made if missing: 0 or -errno. */
static int private_dir(const char *path)
{
        if (mkdir_parents(path) < 0 || (mkdir(path, 0700) < 0 && errno != EEXIST))
                return -errno;
        struct stat st;
        if (lstat(path, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
                return -EPERM;
        return 0;
}

static int process_dir_make(struct err *e)
{
        if (process_dir[0])
                return 0;
        /* On disk (a run may print gigabytes); the runtime directory when
         * the cache is not there to use. */
        _cleanup_free_ char *cache = xdg_path("XDG_CACHE_HOME", ".cache", "corral/results");
        char base[PATH_MAX - 192];
        int r = -ENOENT;
        if (cache && strlen(cache) < sizeof(base)) {
                snprintf(base, sizeof(base), "%s", cache);
                r = private_dir(base);
        }
        if (r < 0) {
                char run[PATH_MAX];
                if (runtime_dir(run, sizeof(run), e) < 0)
                        return -EIO;
                if (snprintf(base, sizeof(base), "%s/results", run) >= (int)sizeof(base))
                        return err_set(e, ERR_CONFIG, -ENAMETOOLONG, "%s: path too long", run);
                r = private_dir(base);
                if (r < 0)
                        return err_set(e, ERR_CONFIG, r, "cannot use %s: %s", base, strerror(-r));
        }
        sweep(base);
        char dir[sizeof(process_dir)];
        snprintf(dir, sizeof(dir), "%s/%d-XXXXXX", base, (int)getpid());
        if (!mkdtemp(dir))
                return err_set(e, ERR_CONFIG, -errno, "cannot create a directory in %s: %s", base,
                               strerror(errno));
        char lock[PATH_MAX];
        snprintf(lock, sizeof(lock), "%s/lock", dir);
        process_lock = open(lock, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (process_lock < 0 || flock(process_lock, LOCK_EX | LOCK_NB) < 0) {
                int err = errno;
                remove_tree(dir);
                return err_set(e, ERR_CONFIG, -err, "cannot lock %s: %s", lock, strerror(err));
        }
        snprintf(process_dir, sizeof(process_dir), "%s", dir);
        process_pid = getpid();
        atexit(process_dir_remove);
        return 0;
}

/* ---- one client's store */

static void store_free(struct results *st);
static void store_expired(struct timer *t, void *userdata);

static struct results *store(struct mcp_server *s)
{
        if (s->results)
                return s->results;
        if (s->cfg->result_store_max == 0 || s->cfg->result_keep_s <= 0)
                return NULL;
        struct results *st;
        list_for_each(st, &stores, node)
        {
                if (strcmp(st->owner, s->owner) == 0) {
                        st->users++;
                        st->named = st->named || s->keep_sessions;
                        s->results = st;
                        return st;
                }
        }
        struct err e = {0};
        static unsigned seq;
        st = calloc(1, sizeof(*st));
        if (!st)
                return NULL;
        snprintf(st->owner, sizeof(st->owner), "%s", s->owner);
        st->loop = s->loop;
        st->cfg = s->cfg;
        st->sessions = s->sessions;
        list_init(&st->runs);
        if (process_dir_make(&e) < 0 ||
            snprintf(st->dir, sizeof(st->dir), "%s/%u", process_dir, ++seq) >=
                (int)sizeof(st->dir) ||
            (mkdir(st->dir, 0700) < 0 && errno != EEXIST)) {
                static bool said;
                if (!said)
                        log_warn("results: runs' whole output is not kept: %s",
                                 e.msg[0] ? e.msg : strerror(errno));
                said = true;
                free(st);
                return NULL;
        }
        st->users = 1;
        st->named = s->keep_sessions;
        list_push(&stores, &st->node);
        s->results = st;
        return st;
}

static void file_path(const struct kept_run *k, const char *what, char *out, size_t size)
{
        snprintf(out, size, "%s/%s.%s", k->st->dir, k->id, what);
}

static void run_free(struct kept_run *k)
{
        char path[PATH_MAX];
        for (int i = 0; i < 2; i++) {
                if (k->s[i].fd >= 0)
                        close(k->s[i].fd);
                file_path(k, stream_names[i], path, sizeof(path));
                unlink(path);
        }
        for (size_t i = 0; i < json_array_size(k->out); i++) {
                char what[32];
                snprintf(what, sizeof(what), "out-%zu", i);
                file_path(k, what, path, sizeof(path));
                unlink(path);
        }
        struct results *st = k->st;
        st->bytes -= k->s[0].len + k->s[1].len + k->out_bytes;
        st->n--;
        json_decref(k->out);
        free(k->session);
        list_del(&k->node);
        free(k);
}

/* A named client's store, left by its MCP sessions, goes with its last
 * run: whether it went. */
static bool store_unused(struct results *st)
{
        if (st->users || !list_empty(&st->runs))
                return false;
        store_free(st);
        return true;
}

/* Room for `n` more bytes for run `self`, made by letting the oldest
 * ended runs go (never `self`, never a running one, and none when that
 * would not make room): whether it is there. */
static bool make_room(struct results *st, unsigned long long n, const struct kept_run *self)
{
        unsigned long long max = st->cfg->result_store_max, pinned = 0;
        struct kept_run *k, *tmp;
        if (st->bytes + n <= max)
                return true;
        list_for_each(k, &st->runs, node)
        {
                if (k->running || k == self)
                        pinned += k->s[0].len + k->s[1].len + k->out_bytes;
        }
        if (pinned + n > max)
                return false;
        list_for_each_safe(k, tmp, &st->runs, node)
        {
                if (st->bytes + n <= max)
                        break;
                if (!k->running && k != self)
                        run_free(k);
        }
        return st->bytes + n <= max;
}

struct kept_run *kept_start(struct mcp_server *s, const char *session)
{
        struct results *st = store(s);
        if (!st)
                return NULL;
        if (st->n >= RUNS_MAX) {
                struct kept_run *k, *tmp;
                list_for_each_safe(k, tmp, &st->runs, node)
                {
                        if (!k->running) {
                                run_free(k);
                                break;
                        }
                }
                if (st->n >= RUNS_MAX)
                        return NULL;
        }
        struct kept_run *k = calloc(1, sizeof(*k));
        if (!k || (session && !(k->session = strdup(session)))) {
                free(k);
                return NULL;
        }
        k->st = st;
        k->s[0].fd = k->s[1].fd = -1;
        k->running = true;
        /* An id no other run of this client has. */
        for (bool taken = true; taken;) {
                unsigned char rnd[ID_LEN / 2];
                if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
                        free(k->session);
                        free(k);
                        return NULL;
                }
                for (size_t i = 0; i < sizeof(rnd); i++)
                        snprintf(k->id + 2 * i, 3, "%02x", rnd[i]);
                taken = results_find(s, k->id) != NULL;
        }
        list_append(&st->runs, &k->node);
        st->n++;
        return k;
}

const char *kept_id(const struct kept_run *k)
{
        return k ? k->id : NULL;
}

unsigned long long kept_bytes(const struct kept_run *k, bool is_stderr)
{
        return k ? k->s[STREAM_OF(is_stderr)].len : 0;
}

static void stop_stream(struct kept_run *k, struct kept_stream *ks, const char *why)
{
        ks->full = true;
        if (!k->st->warned)
                log_warn("results: run %s's %s kept only in part: %s", k->id,
                         stream_names[ks - k->s], why);
        k->st->warned = true;
}

void kept_output(struct kept_run *k, bool is_stderr, const char *p, size_t n)
{
        if (!k || !n)
                return;
        struct kept_stream *ks = &k->s[STREAM_OF(is_stderr)];
        ks->total += n;
        if (ks->full)
                return;
        if (!make_room(k->st, n, k)) {
                stop_stream(k, ks, "result_store_max is reached");
                return;
        }
        if (ks->fd < 0) {
                char path[PATH_MAX];
                file_path(k, stream_names[ks - k->s], path, sizeof(path));
                ks->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (ks->fd < 0) {
                        stop_stream(k, ks, strerror(errno));
                        return;
                }
        }
        int r = write_all(ks->fd, p, n);
        if (r < 0) {
                /* Whatever part went in stays out of the count, and out of
                 * reach: reads stop at len. */
                stop_stream(k, ks, strerror(-r));
                return;
        }
        ks->len += n;
        k->st->bytes += n;
}

static long long keep_ms(const struct results *st)
{
        long long ms = (long long)(st->cfg->result_keep_s * 1000);
        return ms > 0 ? ms : 1;
}

/* One timer a store, for the run that expires first. */
static void store_arm(struct results *st)
{
        long long next = 0;
        struct kept_run *k;
        list_for_each(k, &st->runs, node)
        {
                if (!k->running && (!next || k->expires < next))
                        next = k->expires;
        }
        if (!next) {
                timer_stop(st->timer);
                return;
        }
        long long ms = next - now_ms();
        if (timer_set(st->loop, &st->timer, store_expired, st, ms > 0 ? ms : 1) < 0)
                log_warn("results: no timer: kept output stays until it is crowded out");
}

static void store_expired(struct timer *t, void *userdata)
{
        struct results *st = userdata;
        (void)t;
        long long now = now_ms();
        struct kept_run *k, *tmp;
        list_for_each_safe(k, tmp, &st->runs, node)
        {
                if (k->running || k->expires > now)
                        continue;
                /* A session's runs stay while it is open. */
                if (k->session && session_exists(st->sessions, st->owner, k->session))
                        k->expires = now + keep_ms(st);
                else
                        run_free(k);
        }
        if (!store_unused(st))
                store_arm(st);
}

/* A single-use run's /workspace/out files, as the result shows them. */
static void keep_out_files(struct kept_run *k, json_t *out_files)
{
        k->out = json_array();
        size_t i;
        json_t *f;
        json_array_foreach(out_files, i, f)
        {
                const char *path = json_string_value(json_object_get(f, "path"));
                json_t *data = json_object_get(f, "data");
                if (!path || !json_is_string(data) || json_array_size(k->out) >= OUT_MAX)
                        continue;
                struct buf raw;
                buf_init(&raw, json_string_length(data));
                char what[32], file[PATH_MAX];
                snprintf(what, sizeof(what), "out-%zu", json_array_size(k->out));
                file_path(k, what, file, sizeof(file));
                int fd = -1;
                if (base64_decode(&raw, json_string_value(data), json_string_length(data)) == 0 &&
                    make_room(k->st, raw.len, k) &&
                    (fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                               0600)) >= 0 &&
                    write_all(fd, raw.data ? raw.data : "", raw.len) == 0) {
                        json_array_append_new(k->out, json_pack("{s:s, s:O?, s:I}", "path", path,
                                                                "mime_type",
                                                                json_object_get(f, "mime_type"),
                                                                "size", (json_int_t)raw.len));
                        k->out_bytes += raw.len;
                        k->st->bytes += raw.len;
                } else {
                        unlink(file);
                }
                if (fd >= 0)
                        close(fd);
                buf_free(&raw);
        }
}

void kept_finish(struct kept_run *k, const struct sandbox_result *res)
{
        if (!k || !k->running)
                return;
        for (int i = 0; i < 2; i++) {
                if (k->s[i].fd >= 0)
                        close(k->s[i].fd);
                k->s[i].fd = -1;
        }
        /* Still running while its files go in: making room for them never
         * lets the run itself go. */
        if (res && !k->session && json_array_size(res->out_files))
                keep_out_files(k, res->out_files);
        k->running = false;
        k->expires = now_ms() + keep_ms(k->st);
        store_arm(k->st);
}

bool kept_has_out(const struct kept_run *k, const char *path)
{
        size_t i;
        json_t *f;
        json_array_foreach(k ? k->out : NULL, i, f)
        {
                if (strcmp(json_string_value(json_object_get(f, "path")), path) == 0)
                        return true;
        }
        return false;
}

struct kept_run *results_find(struct mcp_server *s, const char *id)
{
        /* A named client's runs from an earlier MCP session are found by
         * its name. */
        struct results *st = s->results, *x;
        list_for_each(x, &stores, node)
        {
                if (!st && strcmp(x->owner, s->owner) == 0)
                        st = x;
        }
        struct kept_run *k;
        if (!st)
                return NULL;
        list_for_each(k, &st->runs, node)
        {
                if (strcmp(k->id, id) == 0)
                        return k;
        }
        return NULL;
}

bool results_uri(const char *uri)
{
        return strncmp(uri, URI_RUN, strlen(URI_RUN)) == 0;
}

/* The name of a kept file: "corral://run/ID/stdout", ".../stderr" or
 * ".../out/PATH" (PATH percent-encoded as a resource's is). */
int results_read(struct mcp_server *s, const char *uri, size_t offset, size_t limit,
                 struct kept_piece *ret, struct err *e)
{
        char shown[120];
        str_printable(uri, shown, sizeof(shown));
        *ret = (struct kept_piece){0};
        if (limit > KEPT_PIECE_MAX)
                limit = KEPT_PIECE_MAX;
        buf_init(&ret->data, limit + 8); /* a window may widen to whole characters */
        const char *p = uri + strlen(URI_RUN), *slash = results_uri(uri) ? strchr(p, '/') : NULL;
        if (!slash || slash - p != ID_LEN)
                return err_set(e, ERR_INVALID, -EINVAL,
                               "\"%s\" is not a kept run's output: they are named "
                               "corral://run/{id}/stdout, /stderr or /out/{path}",
                               shown);
        char id[ID_LEN + 1];
        memcpy(id, p, ID_LEN);
        id[ID_LEN] = '\0';
        struct kept_run *k = results_find(s, id);
        if (!k)
                return err_set(e, ERR_INVALID, -ENOENT,
                               "%s: no such run is kept (a run's output is kept "
                               "result_keep_s, %.0f s, after it ended, while its session is "
                               "open, and within result_store_max)",
                               shown, s->cfg->result_keep_s);
        const char *what = slash + 1;
        char file[PATH_MAX], rel[FILES_PATH_MAX + 1];
        unsigned long long size = 0;
        ret->text = true;
        if (strcmp(what, "stdout") == 0 || strcmp(what, "stderr") == 0) {
                const struct kept_stream *ks = &k->s[strcmp(what, "stderr") == 0];
                file_path(k, what, file, sizeof(file));
                size = ks->len;
                ret->partial = ks->full;
                ret->mime_type = "text/plain";
        } else if (strncmp(what, "out/", 4) == 0 &&
                   resource_path_decode(what, rel, sizeof(rel), e) == 0) {
                size_t i;
                json_t *f = NULL;
                json_array_foreach(k->out, i, f)
                {
                        if (strcmp(json_string_value(json_object_get(f, "path")), rel) == 0)
                                break;
                }
                if (i >= json_array_size(k->out))
                        return err_set(e, ERR_INVALID, -ENOENT,
                                       "%s: the run wrote no such file, or it was not kept", shown);
                char n[32];
                snprintf(n, sizeof(n), "out-%zu", i);
                file_path(k, n, file, sizeof(file));
                size = (unsigned long long)json_integer_value(json_object_get(f, "size"));
                ret->mime_type = json_string_value(json_object_get(f, "mime_type"));
                ret->text = false;
        } else {
                if (!e->msg[0])
                        err_set(e, ERR_INVALID, -EINVAL,
                                "%s: a run keeps stdout, stderr and out/{path}", shown);
                return -EINVAL;
        }
        ret->size = size;
        if (offset > size)
                offset = (size_t)size;
        size_t want = size - offset < limit ? (size_t)(size - offset) : limit;
        /* Text: the window starts and ends on whole characters, so up to
         * three bytes on each side are read too. */
        size_t before = ret->text ? (offset < 3 ? offset : 3) : 0;
        size_t after = ret->text ? (size - offset - want < 3 ? size - offset - want : 3) : 0;
        size_t span = before + want + after;
        _cleanup_close_ int fd = size ? open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
        _cleanup_free_ char *raw = malloc(span + 1);
        if (!raw || (size && fd < 0))
                return err_set(e, ERR_INTERNAL, -EIO, "%s: cannot read it: %s", shown,
                               raw ? strerror(errno) : "out of memory");
        size_t got = 0;
        while (got < span) {
                ssize_t r = pread(fd, raw + got, span - got, (off_t)(offset - before + got));
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break;
                got += (size_t)r;
        }
        size_t from = before < got ? before : got, to = before + want < got ? before + want : got;
        if (ret->text) {
                /* Back to the start of the character the offset falls in;
                 * the end on the last whole one before the limit (at least
                 * one), unless it is the file's end. */
                while (from > 0 && from < got && ((unsigned char)raw[from] & 0xC0) == 0x80)
                        from--;
                bool at_end = offset - before + to == size;
                if (!at_end) {
                        size_t whole = utf8_cut(raw + from, to - from);
                        to = from + (whole ? whole : utf8_cut(raw + from, got - from));
                }
        }
        if (buf_append(&ret->data, raw + from, to - from) < 0) {
                buf_free(&ret->data);
                return err_set(e, ERR_INTERNAL, -ENOMEM, "out of memory");
        }
        ret->offset = offset - before + from;
        /* A file is text when what was read is. */
        if (!ret->text && utf8_text(ret->data.data ? ret->data.data : "", ret->data.len) &&
            ret->offset == 0 && ret->data.len == size)
                ret->text = true;
        return 0;
}

static void store_free(struct results *st)
{
        struct kept_run *k, *tmp;
        list_for_each_safe(k, tmp, &st->runs, node) run_free(k);
        timer_remove(st->timer);
        rmdir(st->dir);
        list_del(&st->node);
        free(st);
}

void results_free(struct mcp_server *s)
{
        struct results *st = s->results;
        if (!st)
                return;
        s->results = NULL;
        if (--st->users > 0)
                return;
        /* A named client's runs wait for its next MCP session, for as long
         * as each is kept; a running one ends with its call. */
        if (st->named) {
                struct kept_run *k, *tmp;
                list_for_each_safe(k, tmp, &st->runs, node)
                {
                        if (k->running)
                                run_free(k);
                }
                if (!store_unused(st))
                        store_arm(st);
                return;
        }
        store_free(st);
}
