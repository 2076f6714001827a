/* How a failed tool call is shown: one table from each reason to the
 * status and type the client sees, and to what the model can do about it
 * (mcp/internal.h). The layers below state facts; only here are MCP tools
 * and settings named as advice. */
#include "mcp/internal.h"

#include "core/util.h"
#include "mcp/tools.h"

#include <errno.h>
#include <string.h>

#define ANY 0 /* any reason not named above it, in the same `what` */

static const struct {
        enum failed what;
        int reason;          /* a negative errno, or ANY */
        const char *status;  /* structuredContent.status */
        const char *type;    /* structuredContent.error.type */
        const char *message; /* when the caller has none (NULL: strerror) */
        const char *advice;  /* appended to the message, or NULL */
} failures[] = {
    {FAILED_ARGUMENTS, -EFBIG, "invalid_arguments", "TooLarge", NULL, NULL},
    {FAILED_ARGUMENTS, ANY, "invalid_arguments", "InvalidArguments", NULL, NULL},
    {FAILED_PATH, ANY, "invalid_arguments", "InvalidPath", NULL, NULL},

    {FAILED_SANDBOX_RUN, -EBUSY, "busy", "Busy", NULL,
     ": try again shortly, or raise max_sandboxes / max_queue"},
    {FAILED_SANDBOX_RUN, ANY, "engine_error", "InternalError", NULL, NULL},

    {FAILED_SESSION_RUN, -EBUSY, "busy", "SessionBusy", NULL,
     ": wait for it (if it became a job, job_result with wait_s), cancel it (job_cancel), or "
     "use another session"},
    {FAILED_SESSION_RUN, -EAGAIN, "busy", "Busy", NULL, ": try again shortly"},
    {FAILED_SESSION_RUN, -EUSERS, "busy", "TooManySessions", NULL,
     ": close one with session_close (session_list shows them), or call without \"session\""},
    {FAILED_SESSION_RUN, -ENOLINK, "session_lost", "SessionLost", NULL,
     " Its variables and files are gone; call again with the same name to open a new session"},
    {FAILED_SESSION_RUN, -ENOTSUP, "invalid_arguments", "SessionsDisabled", NULL,
     ": call without \"session\""},
    {FAILED_SESSION_RUN, -EACCES, "invalid_arguments", "ServerNotGranted", NULL,
     ". Open a new session (another name) for them, or add them to this one with "
     "\"session_servers\", knowing that code its earlier calls ran can use them too"},
    {FAILED_SESSION_RUN, -EPERM, "invalid_arguments", "NetworkNotGranted", NULL, NULL},
    {FAILED_SESSION_RUN, -EINVAL, "invalid_arguments", "InvalidArguments", NULL, NULL},
    {FAILED_SESSION_RUN, ANY, "engine_error", "InternalError", NULL, NULL},
    {FAILED_SESSION_CLOSE, -ENOENT, "invalid_arguments", "InvalidArguments", NULL,
     " (session_list shows those open)"},
    {FAILED_SESSION_CLOSE, ANY, "invalid_arguments", "InvalidArguments", NULL, NULL},
    {FAILED_SESSION_SAVE, -EBUSY, "busy", "SessionBusy", NULL, ": try again once it ended"},
    {FAILED_SESSION_SAVE, -EAGAIN, "busy", "SessionBusy", NULL,
     ": try again when its first call has ended"},
    {FAILED_SESSION_SAVE, -ENOENT, "invalid_arguments", "NoSession", NULL,
     " (session_list shows those open and hibernated)"},
    {FAILED_SESSION_SAVE, -ENOLINK, "invalid_arguments", "NoSession", NULL, NULL},
    {FAILED_SESSION_SAVE, -EEXIST, "invalid_arguments", "SessionExists", NULL, NULL},
    {FAILED_SESSION_SAVE, -EPERM, "invalid_arguments", "NotSavable", NULL, NULL},
    {FAILED_SESSION_SAVE, -EINVAL, "invalid_arguments", "InvalidArguments", NULL, NULL},
    {FAILED_SESSION_SAVE, -ENOSPC, "error", "StoreFull", NULL, NULL},
    {FAILED_SESSION_SAVE, ANY, "error", "SaveFailed", NULL, NULL},
    {FAILED_SESSION_GET, -EAGAIN, "busy", "SessionBusy", NULL,
     ": try again when its first call has ended"},
    {FAILED_SESSION_GET, -ENOENT, "invalid_arguments", "NoSession", NULL,
     ": run_python or run_shell with \"session\" opens one (session_list shows those open)"},
    {FAILED_SESSION_GET, -ENOLINK, "invalid_arguments", "NoSession", NULL, NULL},
    {FAILED_SESSION_GET, ANY, "engine_error", "EngineError", "no container engine answers", NULL},

    {FAILED_FILE_START, -ENOTCONN, "engine_error", "EngineError",
     "the session's sandbox cannot be reached now (it is starting or being removed)", NULL},
    {FAILED_FILE_START, ANY, "engine_error", "InternalError", NULL, NULL},
    /* The model can fix a path. */
    {FAILED_FILE, -ENOENT, "invalid_arguments", "NotFound", NULL, NULL},
    {FAILED_FILE, -EISDIR, "invalid_arguments", "NotAFile", NULL, NULL},
    {FAILED_FILE, -ENOTDIR, "invalid_arguments", "NotAFile", NULL, NULL},
    {FAILED_FILE, -EINVAL, "invalid_arguments", "NotAFile", NULL, NULL},
    {FAILED_FILE, -EPERM, "invalid_arguments", "PathEscape", NULL, NULL},
    {FAILED_FILE, -ELOOP, "invalid_arguments", "PathEscape", NULL, NULL},
    {FAILED_FILE, -EFBIG, "invalid_arguments", "TooLarge", NULL, NULL},
    {FAILED_FILE, -ENOSPC, "error", "NoSpace", NULL, NULL},
    {FAILED_FILE, ANY, "engine_error", "EngineError", NULL, NULL},
    {FAILED_ASK, ANY, "engine_error", "EngineError", "the session's sandbox does not answer", NULL},
    {FAILED_LIST, ANY, "invalid_arguments", "NotFound", NULL, NULL},
    {FAILED_RUN_ASK, ANY, "error", "PolicyDenied", NULL, NULL},
};

json_t *error_result(enum failed what, int reason, const char *message)
{
        size_t i = 0;
        while (i < ARRAY_SIZE(failures) &&
               !(failures[i].what == what &&
                 (failures[i].reason == reason || failures[i].reason == ANY)))
                i++;
        if (i == ARRAY_SIZE(failures)) /* a `what` with no ANY row: a bug */
                return tools_error_result("engine_error", "InternalError", "unexpected failure");
        if (!message || !*message)
                message = failures[i].message ? failures[i].message : strerror(-reason);
        char text[1500];
        if (failures[i].advice) {
                snprintf(text, sizeof(text), "%s%s", message, failures[i].advice);
                message = text;
        }
        return tools_error_result(failures[i].status, failures[i].type, message);
}

json_t *arguments_error(const char *message)
{
        return error_result(FAILED_ARGUMENTS, -EINVAL, message);
}

json_t *err_result(enum failed what, int reason, struct err *e)
{
        return error_result(what, reason, utf8_scrub(e->msg));
}
