#include "bridge/audit.h"

#include "core/buf.h"
#include "core/log.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct audit {
        int fd;
        char *path;
        char *policy; /* the policy in force, named in every line */
        bool failed;  /* a write failed: logged once */
};

/* The time, to the millisecond, UTC. */
static void now_text(char *when, size_t size)
{
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        size_t n = strftime(when, size, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(when + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* One record as one line, in one write (steals `line`). */
static void write_line(struct audit *a, json_t *line)
{
        char *text = line ? json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(line);
        if (!text)
                return;
        size_t len = strlen(text);
        text[len] = '\n'; /* overwrites the NUL: one write of the whole line */
        ssize_t k = write(a->fd, text, len + 1);
        if (k != (ssize_t)(len + 1) && !a->failed) {
                a->failed = true;
                log_err("cannot append to audit log %s: %s", a->path,
                        k < 0 ? strerror(errno) : "short write");
        }
        free(text);
}

/* mkdir -p for the directory part of path, 0700 for what it creates. */
int audit_open(const char *path, const char *policy, const char *config, struct audit **ret,
               struct err *e)
{
        if (path[0] != '/')
                return err_set(e, ERR_CONFIG, EINVAL, "audit_log must be an absolute path, not %s",
                               path);
        int r = mkdir_parents(path);
        if (r < 0)
                return err_set(e, ERR_CONFIG, -r, "cannot make the directory of audit log %s: %s",
                               path, strerror(-r));
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
        if (fd < 0)
                return err_set(e, ERR_CONFIG, errno, "cannot open audit log %s: %s", path,
                               strerror(errno));
        struct audit *a = calloc(1, sizeof(*a));
        if (!a || !(a->path = strdup(path)) || !(a->policy = strdup(policy))) {
                if (a)
                        free(a->path);
                free(a);
                close(fd);
                return err_set(e, ERR_INTERNAL, ENOMEM, "out of memory");
        }
        a->fd = fd;
        char when[40];
        now_text(when, sizeof(when));
        write_line(a, json_pack("{s:s, s:s, s:I, s:s, s:s?}", "time", when, "event", "start", "pid",
                                (json_int_t)getpid(), "policy", policy, "config", config));
        *ret = a;
        return 0;
}

void audit_close(struct audit *a)
{
        if (!a)
                return;
        close(a->fd);
        free(a->path);
        free(a->policy);
        free(a);
}

char *audit_default_path(void)
{
        return xdg_path("XDG_STATE_HOME", ".local/state", "corral/audit.jsonl");
}

void audit_write(struct audit *a, const struct audit_entry *en)
{
        if (!a)
                return;
        char when[40];
        now_text(when, sizeof(when));
        /* Names come from sandbox code: keep them short and valid. */
        char server[257], tool[257];
        snprintf(server, sizeof(server), "%s", en->server ? en->server : "");
        snprintf(tool, sizeof(tool), "%s", en->tool ? en->tool : "");
        utf8_scrub(server);
        utf8_scrub(tool);
        _cleanup_free_ char *error = en->error ? utf8_scrub(strndup(en->error, 1000)) : NULL;
        json_t *line =
            json_pack("{s:s, s:s?, s:s, s:s, s:I, s:I, s:I, s:s, s:s?}", "time", when, "sandbox",
                      en->sandbox, "server", server, "tool", tool, "argument_bytes",
                      (json_int_t)en->argument_bytes, "result_bytes", (json_int_t)en->result_bytes,
                      "duration_ms", (json_int_t)en->duration_ms, "decision",
                      en->allowed ? "allowed" : "denied", "error", error);
        if (line && en->error && !error)
                json_object_set_new(line, "error", json_string("?"));
        if (line && !json_object_get(line, "sandbox"))
                json_object_set_new(line, "sandbox", json_null());
        if (line && !json_object_get(line, "error"))
                json_object_set_new(line, "error", json_null());
        if (line && en->session)
                json_object_set_new(line, "session", json_string(en->session));
        if (line && en->ask)
                json_object_set_new(
                    line, "ask",
                    json_pack("{s:s, s:I}", "answer", en->ask, "ms", (json_int_t)en->ask_ms));
        if (line)
                json_object_set_new(line, "policy", json_string(a->policy));
        write_line(a, line);
}

void audit_write_event(struct audit *a, json_t *line)
{
        if (!a || !line) {
                json_decref(line);
                return;
        }
        char when[40];
        now_text(when, sizeof(when));
        json_object_set_new(line, "time", json_string(when));
        json_object_set_new(line, "policy", json_string(a->policy));
        write_line(a, line);
}
