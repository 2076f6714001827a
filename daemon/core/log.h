/* Logging: to stderr only (stdout belongs to the MCP host). */
#pragma once

#include "core/util.h"

enum log_level { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };

extern enum log_level log_max_level;

_printf_(2, 3) void log_msg(enum log_level level, const char *fmt, ...);
int log_level_parse(const char *s, enum log_level *ret);

/* Events a user should see (an upstream server died, the pool keeps
 * failing, a policy denial): logged like log_msg, and handed to the sink,
 * which sends them to MCP clients as notifications/message. */
typedef void (*log_sink_fn)(void *userdata, enum log_level level, const char *logger,
                            const char *text);
void log_set_sink(log_sink_fn fn, void *userdata);
_printf_(3, 4) void log_event(enum log_level level, const char *logger, const char *fmt, ...);
/* "error", "warning", "info", "debug". */
const char *log_level_name(enum log_level level);

#define log_err(...)   log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
