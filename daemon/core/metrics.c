#include "core/metrics.h"

#include "core/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Upper bounds of the run latency buckets, in seconds; +Inf follows. */
static const double buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                 1,     2.5,  5,     10,   30,  60,   300};

#define LABELS    2
#define VALUE_MAX 64

struct series {
        char v[LABELS][VALUE_MAX];
        unsigned long long count;
        double sum;
        unsigned long long le[ARRAY_SIZE(buckets)];
};

struct family {
        const char *name, *help;
        const char *labels[LABELS]; /* NULL: unused */
        bool histogram;
        struct series *s;
        size_t n;
};

static struct family tool_calls = {
    "corral_tool_calls_total", "MCP tools/call requests by tool", {"tool", NULL}, false, NULL, 0};
static struct family runs = {"corral_runs_total",
                             "run_python and run_shell calls by status",
                             {"tool", "status"},
                             false,
                             NULL,
                             0};
static struct family run_seconds = {"corral_run_duration_seconds",
                                    "run_python and run_shell calls, start to answer",
                                    {"tool", NULL},
                                    true,
                                    NULL,
                                    0};
static struct family bridge = {"corral_bridge_calls_total",
                               "calls from sandboxed code to MCP servers, by decision",
                               {"server", "decision"},
                               false,
                               NULL,
                               0};

static struct family net_conns = {"corral_network_connections_total",
                                  "connections of sandboxed code through corral's proxy, by "
                                  "decision",
                                  {"decision", NULL},
                                  false,
                                  NULL,
                                  0};
static struct family net_bytes = {"corral_network_bytes_total",
                                  "bytes carried for sandboxed code through corral's proxy "
                                  "(out: to the host, in: to the sandbox)",
                                  {"direction", NULL},
                                  false,
                                  NULL,
                                  0};

static struct series *series_get(struct family *f, const char *a, const char *b)
{
        const char *want[LABELS] = {a, b ? b : ""};
        for (size_t i = 0; i < f->n; i++)
                if (strncmp(f->s[i].v[0], want[0], VALUE_MAX - 1) == 0 &&
                    strncmp(f->s[i].v[1], want[1], VALUE_MAX - 1) == 0)
                        return &f->s[i];
        if (f->n >= METRICS_SERIES_MAX) {
                if (strcmp(want[0], "other") == 0)
                        return &f->s[f->n - 1];
                return series_get(f, "other", b ? "other" : NULL);
        }
        struct series *s = realloc(f->s, (f->n + 1) * sizeof(*s));
        if (!s)
                return NULL;
        f->s = s;
        s = &f->s[f->n++];
        memset(s, 0, sizeof(*s));
        for (int i = 0; i < LABELS; i++)
                snprintf(s->v[i], VALUE_MAX, "%s", want[i]);
        return s;
}

void metrics_tool_call(const char *tool)
{
        struct series *s = series_get(&tool_calls, tool, NULL);
        if (s)
                s->count++;
}

void metrics_run(const char *tool, const char *status, double seconds)
{
        struct series *s = series_get(&runs, tool, status);
        if (s)
                s->count++;
        s = series_get(&run_seconds, tool, NULL);
        if (!s)
                return;
        s->count++;
        s->sum += seconds;
        for (size_t i = 0; i < ARRAY_SIZE(buckets); i++)
                if (seconds <= buckets[i])
                        s->le[i]++;
}

void metrics_bridge(const char *server, const char *decision)
{
        struct series *s = series_get(&bridge, server, decision);
        if (s)
                s->count++;
}

void metrics_network(const char *decision, unsigned long long bytes_out,
                     unsigned long long bytes_in)
{
        struct series *s = series_get(&net_conns, decision, NULL);
        if (s)
                s->count++;
        if ((s = series_get(&net_bytes, "out", NULL)))
                s->count += bytes_out;
        if ((s = series_get(&net_bytes, "in", NULL)))
                s->count += bytes_in;
}

static void escaped(struct buf *b, const char *v)
{
        for (const char *p = v; *p; p++) {
                if (*p == '\\' || *p == '"')
                        buf_append(b, "\\", 1);
                if (*p == '\n')
                        buf_append(b, "\\n", 2);
                else
                        buf_append(b, p, 1);
        }
}

static void number(struct buf *b, double v)
{
        char n[64];
        if (v == (double)(long long)v && v < 1e15 && v > -1e15)
                snprintf(n, sizeof(n), " %lld\n", (long long)v);
        else
                snprintf(n, sizeof(n), " %.6g\n", v);
        buf_append(b, n, strlen(n));
}

static void line_v(struct buf *b, const char *name, const char *const *kv, size_t n, double value)
{
        buf_append(b, name, strlen(name));
        for (size_t i = 0; i + 1 < n; i += 2) {
                buf_append(b, i ? "," : "{", 1);
                buf_append(b, kv[i], strlen(kv[i]));
                buf_append(b, "=\"", 2);
                escaped(b, kv[i + 1]);
                buf_append(b, "\"", 1);
        }
        if (n >= 2)
                buf_append(b, "}", 1);
        number(b, value);
}

void metrics_line(struct buf *b, const char *name, double value, ...)
{
        const char *kv[8];
        size_t n = 0;
        va_list ap;
        va_start(ap, value);
        for (const char *k; n + 1 < ARRAY_SIZE(kv) && (k = va_arg(ap, const char *));) {
                kv[n++] = k;
                kv[n++] = va_arg(ap, const char *);
        }
        va_end(ap);
        line_v(b, name, kv, n, value);
}

static void header(struct buf *b, const char *name, const char *help, const char *type)
{
        char h[400];
        snprintf(h, sizeof(h), "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
        buf_append(b, h, strlen(h));
}

static void render(struct buf *b, const struct family *f)
{
        header(b, f->name, f->help, f->histogram ? "histogram" : "counter");
        char name[128];
        for (size_t i = 0; i < f->n; i++) {
                const struct series *s = &f->s[i];
                const char *kv[6];
                size_t n = 0;
                for (int k = 0; k < LABELS && f->labels[k]; k++) {
                        kv[n++] = f->labels[k];
                        kv[n++] = s->v[k];
                }
                if (!f->histogram) {
                        line_v(b, f->name, kv, n, (double)s->count);
                        continue;
                }
                snprintf(name, sizeof(name), "%s_bucket", f->name);
                char le[32];
                kv[n] = "le";
                for (size_t k = 0; k <= ARRAY_SIZE(buckets); k++) {
                        if (k < ARRAY_SIZE(buckets))
                                snprintf(le, sizeof(le), "%g", buckets[k]);
                        else
                                snprintf(le, sizeof(le), "+Inf");
                        kv[n + 1] = le;
                        line_v(b, name, kv, n + 2,
                               (double)(k < ARRAY_SIZE(buckets) ? s->le[k] : s->count));
                }
                snprintf(name, sizeof(name), "%s_sum", f->name);
                line_v(b, name, kv, n, s->sum);
                snprintf(name, sizeof(name), "%s_count", f->name);
                line_v(b, name, kv, n, (double)s->count);
        }
}

void metrics_render(struct buf *b)
{
        render(b, &tool_calls);
        render(b, &runs);
        render(b, &run_seconds);
        render(b, &bridge);
        render(b, &net_conns);
        render(b, &net_bytes);
}
