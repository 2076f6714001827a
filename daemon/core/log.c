#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum log_level log_max_level = LOG_INFO;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

static log_sink_fn sink;
static void *sink_ud;

const char *log_level_name(enum log_level level)
{
        return level_names[level];
}

void log_set_sink(log_sink_fn fn, void *userdata)
{
        sink = fn;
        sink_ud = userdata;
}

static void write_line(enum log_level level, const char *fmt, va_list ap)
{
        if (level > log_max_level)
                return;
        char line[2048];
        int n = snprintf(line, sizeof(line), "corral[%d] %s: ", (int)getpid(), level_names[level]);
        vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        size_t len = strlen(line);
        line[len++] = '\n';
        /* One write per line so concurrent writers do not interleave. */
        ssize_t w = write(STDERR_FILENO, line, len);
        (void)w;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        write_line(level, fmt, ap);
        va_end(ap);
}

void log_event(enum log_level level, const char *logger, const char *fmt, ...)
{
        char text[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        log_msg(level, "%s", text);
        if (sink)
                sink(sink_ud, level, logger, text);
}

int log_level_parse(const char *s, enum log_level *ret)
{
        static const struct {
                const char *name;
                enum log_level level;
        } names[] = {
            {"error", LOG_ERR},    {"warning", LOG_WARN}, {"warn", LOG_WARN},
            {"notice", LOG_INFO},  {"info", LOG_INFO},    {"debug", LOG_DEBUG},
            {"critical", LOG_ERR}, {"alert", LOG_ERR},    {"emergency", LOG_ERR},
        };
        for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                if (strcmp(s, names[i].name) == 0) {
                        *ret = names[i].level;
                        return 0;
                }
        return -EINVAL;
}
