#include "cli/cli.h"

#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static void print_human(json_t *st)
{
        json_t *p = json_object_get(st, "pool");
#define I(o, k) ((long long)json_integer_value(json_object_get((o), (k))))
        printf("corral pid %lld: engine %s, image %s\n", I(st, "pid"),
               json_string_value(json_object_get(st, "engine")) ?: "(none)",
               json_string_value(json_object_get(st, "image")) ?: "?");
        printf("  policy: %s\n", json_string_value(json_object_get(st, "policy")) ?: "?");
        if (json_is_true(json_object_get(p, "enabled")))
                printf("  pool: %lld ready (min %lld, max %lld), %lld starting, %lld busy, "
                       "%lld queued\n",
                       I(p, "ready"), I(p, "min"), I(p, "max"), I(p, "starting"), I(p, "busy"),
                       I(p, "queued"));
        else
                printf("  pool: off; %lld busy, %lld queued\n", I(p, "busy"), I(p, "queued"));
        char p50[32] = "-", p95[32] = "-";
        if (json_is_integer(json_object_get(p, "refill_p50_ms")))
                snprintf(p50, sizeof(p50), "%lld", I(p, "refill_p50_ms"));
        if (json_is_integer(json_object_get(p, "refill_p95_ms")))
                snprintf(p95, sizeof(p95), "%lld", I(p, "refill_p95_ms"));
        printf("  calls %lld: %lld from the pool, %lld cold; refill p50 %s ms, p95 %s ms\n",
               I(st, "calls"), I(p, "hits"), I(p, "misses"), p50, p95);
        printf("  failures %lld (%lld in a row)%s%s\n", I(p, "failures"),
               I(p, "consecutive_failures"),
               json_is_string(json_object_get(p, "last_error")) ? ": " : "",
               json_string_value(json_object_get(p, "last_error")) ?: "");
        json_t *svc = json_object_get(st, "service");
        if (svc) {
                printf("  service: %lld clients (max %lld) on", I(svc, "clients"),
                       I(svc, "max_clients"));
                size_t i;
                json_t *l;
                json_array_foreach(json_object_get(svc, "listeners"), i, l)
                    printf(" %s", json_string_value(l) ?: "?");
                printf("\n");
        }
        printf("  memory %lld KiB (peak %lld KiB), CPU %lld ms\n", I(st, "rss_kb"),
               I(st, "peak_rss_kb"), I(st, "cpu_ms"));
#undef I
}

int cli_status(int argc, char **argv)
{
        bool as_json = argc > 0 && strcmp(argv[0], "--json") == 0;
        if (argc > (as_json ? 1 : 0)) {
                fprintf(stderr, "usage: corral status [--json]\n");
                return 2;
        }
        char dir[256];
        struct err e = {0};
        if (runtime_dir(dir, sizeof(dir), &e) < 0) {
                fprintf(stderr, "corral status: %s\n", e.msg);
                return 1;
        }
        DIR *d = opendir(dir);
        int found = 0;
        struct dirent *de;
        while (d && (de = readdir(d))) {
                long pid;
                char tail[8];
                if (sscanf(de->d_name, "status-%ld.%7s", &pid, tail) != 2 ||
                    strcmp(tail, "json") != 0)
                        continue;
                char path[600];
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                if (!cli_instance_alive(pid)) {
                        unlink(path); /* left by a killed instance */
                        continue;
                }
                json_auto_t *st = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
                if (!json_is_object(st))
                        continue;
                found++;
                if (as_json) {
                        _cleanup_free_ char *s = json_dumps(st, JSON_COMPACT);
                        printf("%s\n", s ? s : "{}");
                } else {
                        print_human(st);
                }
        }
        if (d)
                closedir(d);
        if (!found)
                fprintf(stderr, "corral status: no corral is serving as this user (%s)\n", dir);
        return found ? 0 : 1;
}
