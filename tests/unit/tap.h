/* A tiny TAP producer for the unit tests: one assertion per line on stdout,
 * diagnostics as "# ..." lines, the plan printed at the end. Each test file
 * is one translation unit, so the state below is simply static.
 *
 *      ok(cond, fmt, ...)              is_int(got, want, fmt, ...)
 *      is_str(got, want, fmt, ...)     is_mem(got, got_len, want, want_len, fmt, ...)
 *      like(got, substring, fmt, ...)  skip(n, why)
 *      todo_start(why) ... todo_end()  diag(fmt, ...)
 *      return done_testing();
 *
 * Inside a TODO block a failure is reported as "not ok N - msg # TODO why"
 * and does not fail the run: that is how a known bug in the code under test
 * stays visible without turning the suite red. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned tap_count;
static unsigned tap_failures;
static const char *tap_todo_reason;

__attribute__((format(printf, 1, 2))) static inline void diag(const char *fmt, ...)
{
        char text[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        /* Every line of a diagnostic starts with "# " so TAP parsers skip it. */
        for (const char *p = text; *p;) {
                const char *nl = strchr(p, '\n');
                int n = nl ? (int)(nl - p) : (int)strlen(p);
                printf("# %.*s\n", n, p);
                p += n + (nl ? 1 : 0);
        }
}

__attribute__((format(printf, 4, 0))) static inline void
tap_vresult(bool pass, const char *file, int line, const char *fmt, va_list ap)
{
        char name[512];
        vsnprintf(name, sizeof(name), fmt, ap);
        /* '#' would start a directive in the description. */
        for (char *p = name; *p; p++)
                if (*p == '#' || *p == '\n')
                        *p = '_';
        tap_count++;
        printf("%sok %u - %s", pass ? "" : "not ", tap_count, name);
        if (tap_todo_reason)
                printf(" # TODO %s", tap_todo_reason);
        printf("\n");
        if (!pass) {
                diag("  Failed %stest at %s:%d", tap_todo_reason ? "(TODO) " : "", file, line);
                if (!tap_todo_reason)
                        tap_failures++;
        }
        fflush(stdout);
}

__attribute__((format(printf, 4, 5))) static inline bool tap_ok(bool pass, const char *file,
                                                                int line, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        tap_vresult(pass, file, line, fmt, ap);
        va_end(ap);
        return pass;
}

__attribute__((format(printf, 5, 6))) static inline bool
tap_is_int(long long got, long long want, const char *file, int line, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        tap_vresult(got == want, file, line, fmt, ap);
        va_end(ap);
        if (got != want)
                diag("       got: %lld\n  expected: %lld", got, want);
        return got == want;
}

static inline void tap_diag_bytes(const char *label, const char *p, size_t n)
{
        char text[1024];
        size_t k = 0;
        if (!p) {
                diag("%s(null)", label);
                return;
        }
        text[k++] = '"';
        for (size_t i = 0; i < n && k < sizeof(text) - 8; i++) {
                unsigned char c = (unsigned char)p[i];
                if (c == '\\' || c == '"')
                        k += (size_t)snprintf(text + k, sizeof(text) - k, "\\%c", c);
                else if (c < 0x20 || c >= 0x7f)
                        k += (size_t)snprintf(text + k, sizeof(text) - k, "\\x%02x", c);
                else
                        text[k++] = (char)c;
        }
        text[k++] = '"';
        text[k] = '\0';
        diag("%s%s%s", label, text, k >= sizeof(text) - 8 ? "..." : "");
}

__attribute__((format(printf, 7, 8))) static inline bool
tap_is_mem(const char *got, size_t got_len, const char *want, size_t want_len, const char *file,
           int line, const char *fmt, ...)
{
        bool pass = (got == NULL && want == NULL) ||
                    (got && want && got_len == want_len && memcmp(got, want, got_len) == 0);
        va_list ap;
        va_start(ap, fmt);
        tap_vresult(pass, file, line, fmt, ap);
        va_end(ap);
        if (!pass) {
                tap_diag_bytes("       got: ", got, got_len);
                tap_diag_bytes("  expected: ", want, want_len);
        }
        return pass;
}

__attribute__((format(printf, 5, 6))) static inline bool
tap_is_str(const char *got, const char *want, const char *file, int line, const char *fmt, ...)
{
        bool pass = (got == NULL && want == NULL) || (got && want && strcmp(got, want) == 0);
        va_list ap;
        va_start(ap, fmt);
        tap_vresult(pass, file, line, fmt, ap);
        va_end(ap);
        if (!pass) {
                tap_diag_bytes("       got: ", got, got ? strlen(got) : 0);
                tap_diag_bytes("  expected: ", want, want ? strlen(want) : 0);
        }
        return pass;
}

__attribute__((format(printf, 5, 6))) static inline bool
tap_like(const char *got, const char *needle, const char *file, int line, const char *fmt, ...)
{
        bool pass = got && strstr(got, needle);
        va_list ap;
        va_start(ap, fmt);
        tap_vresult(pass, file, line, fmt, ap);
        va_end(ap);
        if (!pass) {
                tap_diag_bytes("          got: ", got, got ? strlen(got) : 0);
                tap_diag_bytes("  to contain: ", needle, strlen(needle));
        }
        return pass;
}

static inline void skip(unsigned n, const char *why)
{
        for (unsigned i = 0; i < n; i++)
                printf("ok %u # SKIP %s\n", ++tap_count, why);
        fflush(stdout);
}

static inline void todo_start(const char *why)
{
        tap_todo_reason = why;
}

static inline void todo_end(void)
{
        tap_todo_reason = NULL;
}

/* Each line of a file (a log) as a diagnostic, when the test failed. */
static inline void diag_file_on_failure(const char *path)
{
        if (!tap_failures)
                return;
        char line[2048];
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof(line), f))
                diag("%s", line);
        if (f)
                fclose(f);
}

/* The test cannot go on: TAP's bail-out line, and exit 1. */
__attribute__((format(printf, 1, 2), noreturn)) static inline void bail_out(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        printf("Bail out! ");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        fflush(stdout);
        exit(1);
}

static inline int done_testing(void)
{
        printf("1..%u\n", tap_count);
        if (tap_failures)
                diag("Looks like you failed %u test(s) of %u.", tap_failures, tap_count);
        return tap_failures ? 1 : 0;
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...)                                                                     \
        tap_is_int((long long)(got), (long long)(want), __FILE__, __LINE__, __VA_ARGS__)
#define is_str(got, want, ...) tap_is_str((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define is_mem(got, got_len, want, want_len, ...)                                                  \
        tap_is_mem((got), (got_len), (want), (want_len), __FILE__, __LINE__, __VA_ARGS__)
#define like(got, needle, ...) tap_like((got), (needle), __FILE__, __LINE__, __VA_ARGS__)
