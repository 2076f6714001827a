/* Settings: defaults, sizes, the range of every key, and each source
 * (config_set, the environment, the JSON file) naming itself in errors. */
#include "core/config.h"

#include "tap.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_defaults(void)
{
        struct config c;
        config_defaults(&c);
        ok(c.engine == NULL, "default engine: discover");
        is_str(c.image, "corral-data:latest", "default image: the data profile");
        ok(!c.images && !c.mounts && !c.preload, "no images, mounts or preload set");
        is_int(c.memory, 512LL << 20, "default memory 512 MiB");
        is_int(c.pids, 128, "default pids");
        ok(c.cpus == 1.0, "default cpus 1");
        ok(c.timeout_s == 30, "default timeout_s 30");
        ok(c.max_timeout_s == 600, "default max_timeout_s 600");
        ok(c.start_timeout_s == 60, "default start_timeout_s 60");
        is_int(c.output_limit, 1 << 20, "default output_limit 1 MiB");
        is_int(c.max_frame, 16 << 20, "default max_frame 16 MiB");
        is_int(c.tmp_size, 64 << 20, "default tmp_size 64 MiB");
        is_int(c.workspace_size, 256 << 20, "default workspace_size 256 MiB");
        is_int(c.max_sandboxes, 16, "default max_sandboxes");
        is_int(c.max_queue, 256, "default max_queue");
        is_int(c.log_level, LOG_INFO, "default log_level info");
        is_int(c.max_sessions, 4, "default max_sessions 4");
        ok(c.session_idle_s == 600, "default session_idle_s 600");
        ok(c.session_max_s == 14400, "default session_max_s 4 h");
        ok(c.session_hibernate && !c.session_store,
           "default: sessions hibernate, the store under XDG");
        ok(c.session_store_max == 4ULL << 30 && c.session_keep_s == 7 * 86400,
           "default session_store_max 4 GiB, session_keep_s 7 days");
        is_int(c.file_max_bytes, 16 << 20, "default file_max_bytes 16 MiB");
        is_int(c.out_max_bytes, 8 << 20, "default out_max_bytes 8 MiB");
        ok(c.config_file == NULL, "no config file read yet");
        ok(c.service, "default service: true (a stdio corral without settings relays)");
        ok(!c.settings_given, "no setting given yet");
        struct err e = {0};
        is_int(config_check(&c, &e), 0, "the defaults pass config_check");
        config_free(&c);
        ok(c.image == NULL, "config_free clears the strings");
        config_free(&c);
        ok(true, "config_free twice is harmless");

        const char *const *names = config_key_names();
        size_t n = 0;
        while (names[n])
                n++;
        is_int(n, 70, "config_key_names lists 70 keys, NULL-terminated");
        is_str(names[0], "engine", "... starting with engine");
}

static const struct size_case {
        const char *in;
        int rc;
        unsigned long long want;
} size_cases[] = {
    {"512m", 0, 512ULL << 20},
    {"1g", 0, 1ULL << 30},
    {"64k", 0, 64ULL << 10},
    {"1048576", 0, 1048576},
    {"1MiB", 0, 1ULL << 20},
    {"1mib", 0, 1ULL << 20},
    {"2GB", 0, 2ULL << 30},
    {"3K", 0, 3ULL << 10},
    {"0", 0, 0},
    {"18446744073709551615", 0, ULLONG_MAX},
    {"17179869183g", 0, 17179869183ULL << 30}, /* 2^34 - 1 GiB fits */
    {"", -EINVAL, 0},
    {"12x", -EINVAL, 0},
    {"-1", -EINVAL, 0},
    {"+1", -EINVAL, 0},
    {" 1", -EINVAL, 0},
    {"1 ", -EINVAL, 0},
    {"m", -EINVAL, 0},
    {"1.5g", -EINVAL, 0},
    {"0x10", -EINVAL, 0},
    {"1kk", -EINVAL, 0},
    {"1t", -EINVAL, 0},
    {"1mx", -EINVAL, 0},
    {"18446744073709551616", -EINVAL, 0}, /* 2^64 */
    {"99999999999999999999999", -EINVAL, 0},
    {"17179869184g", -ERANGE, 0},       /* 2^34 GiB = 2^64 */
    {"18014398509481984k", -ERANGE, 0}, /* 2^54 KiB = 2^64 */
    {"17592186044416m", -ERANGE, 0},    /* 2^44 MiB = 2^64 */
};

static void test_parse_size(void)
{
        for (size_t i = 0; i < ARRAY_SIZE(size_cases); i++) {
                const struct size_case *tc = &size_cases[i];
                unsigned long long v = 4242;
                int rc = parse_size(tc->in, &v);
                is_int(rc, tc->rc, "parse_size(\"%s\") returns %d", tc->in, tc->rc);
                if (tc->rc == 0)
                        ok(v == tc->want, "parse_size(\"%s\") = %llu", tc->in, tc->want);
                else
                        ok(v == 4242, "parse_size(\"%s\") leaves the output alone", tc->in);
        }
        unsigned long long v;
        is_int(parse_size(NULL, &v), -EINVAL, "parse_size(NULL)");
}

/* Read a numeric field by key name, for the table below. */
static double field(const struct config *c, const char *key)
{
        if (strcmp(key, "memory") == 0)
                return (double)c->memory;
        if (strcmp(key, "pids") == 0)
                return (double)c->pids;
        if (strcmp(key, "cpus") == 0)
                return c->cpus;
        if (strcmp(key, "timeout_s") == 0)
                return c->timeout_s;
        if (strcmp(key, "max_timeout_s") == 0)
                return c->max_timeout_s;
        if (strcmp(key, "start_timeout_s") == 0)
                return c->start_timeout_s;
        if (strcmp(key, "output_limit") == 0)
                return (double)c->output_limit;
        if (strcmp(key, "max_frame") == 0)
                return (double)c->max_frame;
        if (strcmp(key, "tmp_size") == 0)
                return (double)c->tmp_size;
        if (strcmp(key, "workspace_size") == 0)
                return (double)c->workspace_size;
        if (strcmp(key, "max_sandboxes") == 0)
                return (double)c->max_sandboxes;
        if (strcmp(key, "max_queue") == 0)
                return (double)c->max_queue;
        if (strcmp(key, "log_level") == 0)
                return c->log_level;
        if (strcmp(key, "max_sessions") == 0)
                return (double)c->max_sessions;
        if (strcmp(key, "session_idle_s") == 0)
                return c->session_idle_s;
        if (strcmp(key, "session_max_s") == 0)
                return c->session_max_s;
        if (strcmp(key, "file_max_bytes") == 0)
                return (double)c->file_max_bytes;
        if (strcmp(key, "out_max_bytes") == 0)
                return (double)c->out_max_bytes;
        if (strcmp(key, "http_header_timeout_s") == 0)
                return c->http_header_timeout_s;
        return NAN;
}

#define BAD NAN /* the set must fail */

static const struct set_case {
        const char *key, *value;
        double want; /* BAD, or the value the field must hold */
} set_cases[] = {
    /* sizes */
    {"memory", "6m", 6 << 20},
    {"memory", "6291455", BAD}, /* 6 MiB - 1 */
    {"memory", "1g", 1 << 30},
    {"memory", "1000000000000000", 1e15},
    {"memory", "1000000000000001", BAD},
    {"memory", "12x", BAD},
    {"memory", "", BAD},
    {"memory", "-1", BAD},
    {"memory", "17179869184g", BAD},
    {"output_limit", "1k", 1024},
    {"output_limit", "1023", BAD},
    {"output_limit", "1g", 1 << 30},
    {"output_limit", "1073741825", BAD},
    {"max_frame", "64k", 64 << 10},
    {"max_frame", "65535", BAD},
    {"max_frame", "1g", 1 << 30},
    {"max_frame", "2g", BAD},
    {"tmp_size", "1m", 1 << 20},
    {"tmp_size", "1048575", BAD},
    {"tmp_size", "10000000000000", 1e13},
    {"tmp_size", "10000000000001", BAD},
    {"workspace_size", "1MiB", 1 << 20},
    {"workspace_size", "1023k", BAD},
    {"file_max_bytes", "1k", 1024},
    {"file_max_bytes", "1023", BAD},
    {"file_max_bytes", "1g", 1 << 30},
    {"file_max_bytes", "1073741825", BAD},
    {"out_max_bytes", "0", 0},
    {"out_max_bytes", "2g", BAD},
    {"max_sessions", "0", 0},
    {"max_sessions", "4096", 4096},
    {"max_sessions", "-1", BAD},
    {"session_idle_s", "1", 1},
    {"session_idle_s", "0.5", BAD},
    {"session_max_s", "2592000", 2592000},
    {"session_max_s", "2592001", BAD},
    {"http_header_timeout_s", "0.1", 0.1},
    {"http_header_timeout_s", "0", BAD},
    {"http_header_timeout_s", "3601", BAD},
    /* integers */
    {"pids", "8", 8},
    {"pids", "7", BAD},
    {"pids", "4194304", 4194304},
    {"pids", "4194305", BAD},
    {"pids", "abc", BAD},
    {"pids", "8x", BAD},
    {"pids", "", BAD},
    {"pids", "1.5", BAD},
    {"pids", "99999999999999999999", BAD},
    {"max_sandboxes", "1", 1},
    {"max_sandboxes", "0", BAD},
    {"max_sandboxes", "4096", 4096},
    {"max_sandboxes", "4097", BAD},
    {"max_queue", "0", 0},
    {"max_queue", "-1", BAD},
    {"max_queue", "1048576", 1048576},
    {"max_queue", "1048577", BAD},
    /* numbers */
    {"cpus", "0.01", 0.01},
    {"cpus", "0.009", BAD},
    {"cpus", "1024", 1024},
    {"cpus", "1024.5", BAD},
    {"cpus", "2.5", 2.5},
    {"cpus", "nan", BAD},
    {"cpus", "inf", BAD},
    {"cpus", "1e400", BAD},
    {"cpus", "", BAD},
    {"cpus", "1x", BAD},
    {"cpus", "-1", BAD},
    {"timeout_s", "0.1", 0.1},
    {"timeout_s", "0.05", BAD},
    {"timeout_s", "86400", 86400},
    {"timeout_s", "86401", BAD},
    {"max_timeout_s", "0.1", 0.1},
    {"max_timeout_s", "0", BAD},
    {"max_timeout_s", "86400", 86400},
    {"start_timeout_s", "1", 1},
    {"start_timeout_s", "0.5", BAD},
    {"start_timeout_s", "3600", 3600},
    {"start_timeout_s", "3601", BAD},
    /* log levels */
    {"log_level", "error", LOG_ERR},
    {"log_level", "warning", LOG_WARN},
    {"log_level", "warn", LOG_WARN},
    {"log_level", "info", LOG_INFO},
    {"log_level", "debug", LOG_DEBUG},
    {"log_level", "verbose", BAD},
    {"log_level", "DEBUG", BAD},
    {"log_level", "", BAD},
};

static void test_set_table(void)
{
        for (size_t i = 0; i < ARRAY_SIZE(set_cases); i++) {
                const struct set_case *tc = &set_cases[i];
                struct config c;
                config_defaults(&c);
                double before = field(&c, tc->key);
                struct err e = {0};
                int rc = config_set(&c, tc->key, tc->value, "--test", &e);
                if (isnan(tc->want)) {
                        is_int(rc, -EINVAL, "%s = \"%s\" is refused", tc->key, tc->value);
                        ok(field(&c, tc->key) == before, "... and %s keeps its value", tc->key);
                        like(e.msg, tc->key, "... the message names the key");
                        like(e.msg, "--test", "... and the source");
                        is_int(e.kind, ERR_CONFIG, "... kind ERR_CONFIG");
                } else {
                        is_int(rc, 0, "%s = \"%s\" is accepted", tc->key, tc->value);
                        ok(field(&c, tc->key) == tc->want, "... %s is %g (got %g)", tc->key,
                           tc->want, field(&c, tc->key));
                }
                config_free(&c);
        }
}

static void test_set_strings(void)
{
        struct config c;
        struct err e = {0};
        config_defaults(&c);
        is_int(config_set(&c, "image", "python:3.12-slim", "--image", &e), 0, "set image");
        is_str(c.image, "python:3.12-slim", "... stored");
        is_int(config_set(&c, "engine", "unix:///run/x.sock", "--engine", &e), 0, "set engine");
        is_str(c.engine, "unix:///run/x.sock", "... stored");
        is_int(config_set(&c, "engine", "tcp://h:1", "--engine", &e), 0, "set engine again");
        is_str(c.engine, "tcp://h:1", "... replaced (the old one freed)");

        static const struct {
                const char *key, *value, *why;
        } bad[] = {
            {"image", "", "must be 1 to 4096"},     {"image", "a\nb", "control character"},
            {"image", "a\tb", "control character"}, {"engine", "\x7f", "control character"},
            {"engine", "", "must be 1 to 4096"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                e = (struct err){0};
                is_int(config_set(&c, bad[i].key, bad[i].value, "CORRAL_X", &e), -EINVAL,
                       "%s: bad string #%zu refused", bad[i].key, i);
                like(e.msg, bad[i].why, "... because it %s", bad[i].why);
                like(e.msg, "CORRAL_X", "... naming the source");
        }
        is_str(c.image, "python:3.12-slim", "image unchanged after refusals");

        char long_value[4098];
        memset(long_value, 'a', sizeof(long_value));
        long_value[4096] = '\0';
        is_int(config_set(&c, "image", long_value, "x", &e), 0, "a 4096-character string is fine");
        long_value[4096] = 'a';
        long_value[4097] = '\0';
        is_int(config_set(&c, "image", long_value, "x", &e), -EINVAL, "4097 characters is not");

        e = (struct err){0};
        is_int(config_set(&c, "memroy", "1g", "--memroy", &e), -EINVAL, "unknown key refused");
        like(e.msg, "memroy", "... the message names it");
        like(e.msg, "unknown setting", "... as unknown");

        /* The message carries the value that was refused. */
        e = (struct err){0};
        config_set(&c, "memory", "12x", "config.json: memory", &e);
        like(e.msg, "config.json: memory", "size error names the source");
        like(e.msg, "\"12x\"", "... and quotes the value");
        config_free(&c);
}

static void clear_corral_env(void)
{
        for (const char *const *n = config_key_names(); *n; n++) {
                char var[64] = "CORRAL_";
                size_t k = strlen(var);
                for (const char *p = *n; *p; p++)
                        var[k++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
                var[k] = '\0';
                unsetenv(var);
        }
}

static void test_env(void)
{
        struct config c;
        struct err e = {0};
        clear_corral_env();
        config_defaults(&c);
        is_int(config_load_env(&c, &e), 0, "no CORRAL_* variables: nothing to do");
        is_int(c.memory, 512LL << 20, "... memory still default");

        setenv("CORRAL_MEMORY", "1g", 1);
        setenv("CORRAL_PIDS", "64", 1);
        setenv("CORRAL_CPUS", "0.5", 1);
        setenv("CORRAL_MAX_TIMEOUT_S", "100", 1);
        setenv("CORRAL_LOG_LEVEL", "debug", 1);
        setenv("CORRAL_ENGINE", "unix:///run/user/1000/podman/podman.sock", 1);
        setenv("CORRAL_WORKSPACE_SIZE", "32m", 1);
        is_int(config_load_env(&c, &e), 0, "CORRAL_* variables load");
        is_int(c.memory, 1LL << 30, "CORRAL_MEMORY");
        is_int(c.pids, 64, "CORRAL_PIDS");
        ok(c.cpus == 0.5, "CORRAL_CPUS");
        ok(c.max_timeout_s == 100, "CORRAL_MAX_TIMEOUT_S (multi-word key)");
        is_int(c.log_level, LOG_DEBUG, "CORRAL_LOG_LEVEL");
        is_str(c.engine, "unix:///run/user/1000/podman/podman.sock", "CORRAL_ENGINE");
        is_int(c.workspace_size, 32 << 20, "CORRAL_WORKSPACE_SIZE");

        setenv("CORRAL_PIDS", "1", 1);
        e = (struct err){0};
        is_int(config_load_env(&c, &e), -EINVAL, "a bad CORRAL_PIDS fails the load");
        like(e.msg, "CORRAL_PIDS", "... the message names the variable");
        like(e.msg, "pids", "... and the key");
        is_int(c.pids, 64, "... the old value stays");

        clear_corral_env();
        setenv("CORRAL_memory", "1m", 1); /* only upper case is read */
        setenv("CORRAL_IMAGE", "", 1);
        e = (struct err){0};
        is_int(config_load_env(&c, &e), -EINVAL, "an empty CORRAL_IMAGE is refused");
        like(e.msg, "CORRAL_IMAGE", "... naming the variable");
        unsetenv("CORRAL_memory");
        clear_corral_env();
        config_free(&c);
}

static char tmpdir[64];

static char *write_file(const char *name, const char *text, size_t len)
{
        char *path;
        if (asprintf(&path, "%s/%s", tmpdir, name) < 0)
                return NULL;
        FILE *f = fopen(path, "we");
        if (!f || fwrite(text, 1, len, f) != len) {
                if (f)
                        fclose(f);
                free(path);
                return NULL;
        }
        fclose(f);
        return path;
}

static const struct file_case {
        const char *name;
        const char *text;
        const char *err[3]; /* substrings of the message; none: must load */
} file_cases[] = {
    {"unknown key", "{\"memory\": \"1g\", \"colour\": \"red\"}", {"colour", "unknown setting"}},
    {"bad JSON", "{\n  \"memory\": ,\n}\n", {":2:13:", "unexpected token"}},
    {"truncated JSON", "{\"pids\": 8", {":1:"}},
    {"empty file", "", {":1:0:"}},
    {"array at top level", "[1, 2]", {"top level must be a JSON object"}},
    {"string at top level", "\"x\"", {":1:"}},
    {"out of range", "{\"pids\": 1}", {": pids", "integer from 8"}},
    {"bool for a number", "{\"pids\": true}", {": pids", "integer from 8"}},
    {"number for a bool", "{\"host_servers\": 1.5}", {": host_servers", "true or false"}},
    {"servers not an object", "{\"servers\": []}", {": servers", "object of servers"}},
    {"bridge keys",
     "{\"servers\": {\"a\": {\"command\": \"x\"}}, \"host_servers\": false,"
     " \"policy\": \"/etc/p.json\", \"audit_log\": \"off\"}",
     {NULL}},
    {"null value", "{\"image\": null}", {": image", "string or a number"}},
    {"object value", "{\"memory\": {}}", {": memory", "string or a number"}},
    {"real for an integer", "{\"pids\": 8.5}", {": pids", "\"8.5\""}},
    {"negative size", "{\"memory\": -5}", {": memory", "\"-5\""}},
    {"duplicate key", "{\"pids\": 8, \"pids\": 9}", {"duplicate"}},
    {"NUL escape", "{\"image\": \"a\\u0000b\"}", {":1:"}},
    {"invalid UTF-8", "{\"image\": \"\xff\"}", {":1:"}},
    {"numbers and strings",
     "{\"memory\": \"1g\", \"pids\": 64, \"cpus\": 0.5, \"timeout_s\": 10,\n"
     " \"max_timeout_s\": 60.0, \"image\": \"x:y\", \"max_frame\": 1048576,\n"
     " \"tmp_size\": 134217728.0, \"log_level\": \"warning\", \"max_queue\": 0}",
     {NULL}},
};

static void test_file(void)
{
        for (size_t i = 0; i < ARRAY_SIZE(file_cases); i++) {
                const struct file_case *tc = &file_cases[i];
                char name[32];
                snprintf(name, sizeof(name), "case%zu.json", i);
                char *path = write_file(name, tc->text, strlen(tc->text));
                if (!ok(path != NULL, "%s: wrote the file", tc->name))
                        continue;
                struct config c;
                struct err e = {0};
                config_defaults(&c);
                int rc = config_load_file(&c, path, true, &e);
                if (!tc->err[0]) {
                        is_int(rc, 0, "%s: loads (%s)", tc->name, e.msg);
                        is_str(c.config_file, path, "%s: remembers the file", tc->name);
                } else {
                        ok(rc < 0, "%s: fails", tc->name);
                        like(e.msg, path, "%s: the message names the file", tc->name);
                        for (size_t k = 0; k < ARRAY_SIZE(tc->err) && tc->err[k]; k++)
                                like(e.msg, tc->err[k], "%s: message has \"%s\"", tc->name,
                                     tc->err[k]);
                        is_int(e.kind, ERR_CONFIG, "%s: kind ERR_CONFIG", tc->name);
                        ok(c.config_file == NULL, "%s: no file remembered", tc->name);
                }
                if (strcmp(tc->name, "numbers and strings") == 0) {
                        is_int(c.memory, 1LL << 30, "file: memory from a string");
                        is_int(c.pids, 64, "file: pids from an integer");
                        ok(c.cpus == 0.5, "file: cpus from a real");
                        ok(c.timeout_s == 10, "file: timeout_s from an integer");
                        ok(c.max_timeout_s == 60, "file: max_timeout_s from a real");
                        is_str(c.image, "x:y", "file: image");
                        is_int(c.max_frame, 1048576, "file: max_frame from an integer");
                        is_int(c.tmp_size, 128 << 20, "file: tmp_size from an integral real");
                        is_int(c.log_level, LOG_WARN, "file: log_level");
                        is_int(c.max_queue, 0, "file: max_queue 0");
                }
                config_free(&c);
                unlink(path);
                free(path);
        }

        /* Missing files. */
        struct config c;
        struct err e = {0};
        char missing[128];
        snprintf(missing, sizeof(missing), "%s/nope.json", tmpdir);
        config_defaults(&c);
        is_int(config_load_file(&c, missing, false, &e), 0, "a missing optional file is fine");
        ok(c.config_file == NULL, "... and nothing is remembered");
        is_int(config_load_file(&c, missing, true, &e), -ENOENT, "a missing --config is -ENOENT");
        like(e.msg, missing, "... naming the path");

        /* A file that is too big is refused before parsing. */
        size_t big = (1 << 20) + 16;
        char *text = malloc(big);
        memset(text, ' ', big);
        text[big - 2] = '{';
        text[big - 1] = '}';
        char *path = write_file("big.json", text, big);
        free(text);
        e = (struct err){0};
        is_int(config_load_file(&c, path, true, &e), -EFBIG, "a file over 1 MiB is refused");
        like(e.msg, "larger than 1 MiB", "... saying why");
        unlink(path);
        free(path);

        /* Loading stops at the first bad key. */
        static const char partial[] = "{\"pids\": 16, \"cpus\": 0}";
        path = write_file("partial.json", partial, strlen(partial));
        e = (struct err){0};
        ok(config_load_file(&c, path, true, &e) < 0, "a bad second key fails the load");
        like(e.msg, "cpus", "... naming it");
        unlink(path);
        free(path);
        config_free(&c);
}

/* What makes a stdio corral its own (cli/serve.c relays when nothing
 * does): any setting but `service`, from any source. */
static void test_settings_given(void)
{
        struct config c;
        struct err e = {0};
        config_defaults(&c);
        is_int(config_set(&c, "service", "false", "--service", &e), 0, "service: false");
        ok(!c.service && !c.settings_given, "service alone is no setting of its own");
        is_int(config_set(&c, "log_level", "debug", "--log-level", &e), 0, "log_level: debug");
        ok(c.settings_given, "any other flag is");
        config_free(&c);

        static const char only_service[] = "{\"service\": true}",
                          a_list[] = "{\"service\": true, \"images\": [\"a:b\"]}",
                          servers[] = "{\"servers\": {}}", empty[] = "{}";
        static const struct {
                const char *text, *name;
                bool given;
        } files[] = {
            {only_service, "a file with service alone: none", false},
            {empty, "an empty file: none", false},
            {a_list, "a file with a list key: given", true},
            {servers, "a file with servers: given", true},
        };
        for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
                char *path = write_file("given.json", files[i].text, strlen(files[i].text));
                config_defaults(&c);
                is_int(config_load_file(&c, path, true, &e), 0, "%s: loads", files[i].name);
                is_int(c.settings_given, files[i].given, "%s", files[i].name);
                config_free(&c);
                unlink(path);
                free(path);
        }

        config_defaults(&c);
        setenv("CORRAL_SERVICE", "no", 1);
        is_int(config_load_env(&c, &e), 0, "CORRAL_SERVICE=no loads");
        ok(!c.service && !c.settings_given, "CORRAL_SERVICE alone: off, and no setting");
        setenv("CORRAL_PIDS", "64", 1);
        is_int(config_load_env(&c, &e), 0, "with CORRAL_PIDS");
        ok(c.settings_given, "CORRAL_PIDS is a setting");
        unsetenv("CORRAL_SERVICE");
        unsetenv("CORRAL_PIDS");
        config_free(&c);
}

static void test_check(void)
{
        static const struct {
                double timeout, max;
                const char *engine;
                bool good;
                const char *why;
        } cases[] = {
            {30, 600, NULL, true, NULL},
            {600, 600, NULL, true, NULL},
            {601, 600, NULL, false, "must not exceed max_timeout_s"},
            {30, 10, NULL, false, "timeout_s (30)"},
            {30, 600, "unix:///run/podman/podman.sock", true, NULL},
            {30, 600, "/var/run/docker.sock", true, NULL},
            {30, 600, "tcp://127.0.0.1:2375", true, NULL},
            {30, 600, "http://127.0.0.1:2375", false, "engine must be"},
            {30, 600, "ssh://core@host", false, "\"ssh://core@host\""},
            {30, 600, "docker.sock", false, "absolute socket path"},
            {30, 600, "npipe:////./pipe/docker_engine", false, "engine must be"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct config c;
                struct err e = {0};
                config_defaults(&c);
                c.timeout_s = cases[i].timeout;
                c.max_timeout_s = cases[i].max;
                if (cases[i].engine)
                        c.engine = strdup(cases[i].engine);
                int rc = config_check(&c, &e);
                if (cases[i].good) {
                        is_int(rc, 0, "config_check #%zu passes", i);
                } else {
                        is_int(rc, -EINVAL, "config_check #%zu fails", i);
                        like(e.msg, cases[i].why, "... because %s", cases[i].why);
                }
                config_free(&c);
        }
        /* The session store: absolute, or the working directory chooses it. */
        for (int rel = 0; rel < 2; rel++) {
                struct config c;
                struct err e = {0};
                config_defaults(&c);
                c.session_store = strdup(rel ? "state/sessions" : "/var/lib/corral/sessions");
                int rc = config_check(&c, &e);
                ok(rel ? rc == -EINVAL && strstr(e.msg, "session_store") : rc == 0,
                   "session_store %s: %s", c.session_store, rel ? "refused" : "taken");
                config_free(&c);
        }
        /* The policy file: absolute, or a clone's working directory would
         * choose it. */
        static const struct {
                const char *value;
                bool good;
        } pol[] = {{"/home/me/.config/corral/policy.json", true},
                   {"policy.json", false},
                   {"./policy.json", false},
                   {"../x/policy.json", false}};
        for (size_t i = 0; i < ARRAY_SIZE(pol); i++) {
                struct config c;
                struct err e = {0};
                config_defaults(&c);
                c.policy = strdup(pol[i].value);
                int rc = config_check(&c, &e);
                is_int(rc, pol[i].good ? 0 : -EINVAL, "policy \"%s\" %s", pol[i].value,
                       pol[i].good ? "passes" : "is refused");
                if (!pol[i].good)
                        like(e.msg, "absolute path", "... saying it must be absolute");
                config_free(&c);
        }
        /* The runtime: runc, runsc, nothing else; config_runsc follows. */
        static const struct {
                const char *value;
                bool good, runsc;
        } rt[] = {{"runc", true, false},
                  {"runsc", true, true},
                  {"kata", false, false},
                  {"RUNSC", false, false},
                  {"runsc ", false, false}};
        for (size_t i = 0; i < ARRAY_SIZE(rt); i++) {
                struct config c;
                struct err e = {0};
                config_defaults(&c);
                ok(!config_runsc(&c), "runtime unset: not gVisor");
                is_int(config_set(&c, "runtime", rt[i].value, "test", &e), 0, "runtime %s is set",
                       rt[i].value);
                int rc = config_check(&c, &e);
                is_int(rc, rt[i].good ? 0 : -EINVAL, "runtime \"%s\" %s", rt[i].value,
                       rt[i].good ? "passes" : "is refused");
                if (!rt[i].good)
                        like(e.msg, "runtime must be runc", "... naming the choices");
                ok(config_runsc(&c) == rt[i].runsc, "config_runsc for \"%s\"", rt[i].value);
                config_free(&c);
        }
}

static void test_lists(void)
{
        struct config c;
        struct err e = {0};
        config_defaults(&c);
        is_int(config_set(&c, "images", " corral-data:latest , corral-python:latest,,",
                          "CORRAL_IMAGES", &e),
               0, "a list from text: items split at commas, spaces dropped");
        ok(c.images && c.images[0] && c.images[1] && !c.images[2], "...two items");
        is_str(c.images ? c.images[1] : NULL, "corral-python:latest", "...in order");
        is_int(config_set(&c, "preload", "", "CORRAL_PRELOAD", &e), 0, "\"\": the empty list");
        ok(c.preload && !c.preload[0], "...which is set, and empty (not the image's default)");
        char many[64 * 3 + 8] = "";
        for (int i = 0; i < 65; i++)
                strcat(many, "a,");
        is_int(config_set(&c, "preload", many, "CORRAL_PRELOAD", &e), -EINVAL, "65 items: refused");
        like(e.msg, "more than 64", "...saying the bound");
        is_int(config_set(&c, "mounts", "/a\x01:/b", "--mounts", &e), -EINVAL,
               "a control character: refused");
        char *path = write_file("lists.json",
                                "{\"mounts\": [\"/srv/data:/data\", \"/x:/y:ro\"], "
                                "\"preload\": []}",
                                strlen("{\"mounts\": [\"/srv/data:/data\", \"/x:/y:ro\"], "
                                       "\"preload\": []}"));
        is_int(config_load_file(&c, path, true, &e), 0, "lists from a JSON file (%s)", e.msg);
        is_str(c.mounts ? c.mounts[0] : NULL, "/srv/data:/data", "...its items");
        ok(c.preload && !c.preload[0], "...[] is the empty list");
        is_int(config_check(&c, &e), 0, "...and they pass config_check (%s)", e.msg);
        const char *bad_text = "{\"mounts\": \"/a:/b\"}", *bad2_text = "{\"images\": [1]}";
        char *bad = write_file("lists-bad.json", bad_text, strlen(bad_text));
        is_int(config_load_file(&c, bad, true, &e), -EINVAL, "a list given as a string: refused");
        like(e.msg, "must be a list of strings", "...saying so");
        char *bad2 = write_file("lists-bad2.json", bad2_text, strlen(bad2_text));
        is_int(config_load_file(&c, bad2, true, &e), -EINVAL, "an item that is no string: refused");
        like(e.msg, "item 1 is not a string", "...naming it");
        free(path);
        free(bad);
        free(bad2);
        config_free(&c);
        ok(!c.images && !c.mounts && !c.preload, "config_free clears the lists");

        static const struct {
                const char *spec, *host, *target, *why;
        } mounts[] = {
            {"/home/me/data:/data", "/home/me/data", "/data", NULL},
            {"/srv/x:/mnt/x:ro", "/srv/x", "/mnt/x", NULL},
            {"/srv/x:/mnt/x:rw", NULL, NULL, "HOST:SANDBOX"},
            {"/srv/x", NULL, NULL, "HOST:SANDBOX"},
            {"relative:/data", NULL, NULL, "absolute"},
            {"/srv/x:/data/../etc", NULL, NULL, "absolute"},
            {"/srv/x:/data/", NULL, NULL, "absolute"},
            {"/srv/x:/", NULL, NULL, "absolute"},
            {"/srv/x:/etc", NULL, NULL, "hide the image's /etc"},
            {"/srv/x:/usr", NULL, NULL, "hide the image's /usr"},
            {"/srv/x:/mnt", NULL, NULL, "hide the image's /mnt"},
            {"/srv/x:/workspace/in", NULL, NULL, "corral's or the engine's"},
            {"/srv/x:/tmp", NULL, NULL, "corral's or the engine's"},
            {"/srv/x:/proc/x", NULL, NULL, "corral's or the engine's"},
            {"/srv/x:/var/tmp/d", NULL, NULL, "corral's or the engine's"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(mounts); i++) {
                char host[256], target[256];
                struct err ebox = {0};
                char *msg = ebox.msg;
                int r = config_mount_parse(mounts[i].spec, host, target, sizeof(host), &ebox);
                if (mounts[i].host) {
                        is_int(r, 0, "mount %s is taken (%s)", mounts[i].spec, r ? msg : "");
                        is_str(host, mounts[i].host, "...host %s", mounts[i].host);
                        is_str(target, mounts[i].target, "...sandbox %s", mounts[i].target);
                } else {
                        is_int(r, -EINVAL, "mount %s is refused", mounts[i].spec);
                        like(msg, mounts[i].why, "...because: %s", mounts[i].why);
                }
        }
        static const struct {
                const char *key, *value;
                bool good;
        } names[] = {
            {"preload", "numpy,matplotlib.pyplot,_x", true},
            {"preload", "os.path.", false},
            {"preload", "1abc", false},
            {"preload", "a-b", false},
            {"images", "localhost/corral-data:1.0", true},
            {"images", "Corral:latest", false},
            {"image", "corral data", false},
            {"project_servers", "github, db.local,my_server-2", true},
            {"project_servers", "*", false},
            {"project_servers", "a/b", false},
        };
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                config_defaults(&c);
                int r = config_set(&c, names[i].key, names[i].value, "test", &e);
                if (r == 0)
                        r = config_check(&c, &e);
                if (names[i].good)
                        is_int(r, 0, "%s %s passes", names[i].key, names[i].value);
                else
                        is_int(r, -EINVAL, "%s %s is refused (%s)", names[i].key, names[i].value,
                               e.msg);
                config_free(&c);
        }
}

static void test_default_path(void)
{
        char *saved_xdg = getenv("XDG_CONFIG_HOME") ? strdup(getenv("XDG_CONFIG_HOME")) : NULL;
        char *saved_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
        setenv("XDG_CONFIG_HOME", "/x/conf", 1);
        setenv("HOME", "/home/u", 1);
        char *p = config_default_path();
        is_str(p, "/x/conf/corral/config.json", "default path under XDG_CONFIG_HOME");
        free(p);
        setenv("XDG_CONFIG_HOME", "relative", 1);
        p = config_default_path();
        is_str(p, "/home/u/.config/corral/config.json", "a relative XDG_CONFIG_HOME is ignored");
        free(p);
        unsetenv("XDG_CONFIG_HOME");
        unsetenv("HOME");
        p = config_default_path();
        ok(p == NULL, "no HOME and no XDG_CONFIG_HOME: no default file");
        free(p);
        if (saved_xdg)
                setenv("XDG_CONFIG_HOME", saved_xdg, 1);
        if (saved_home)
                setenv("HOME", saved_home, 1);
        free(saved_xdg);
        free(saved_home);
}

/* Where each key was set, for advice that names it; a list flag given
 * again adds its items. */
static void test_sources(void)
{
        struct config c;
        struct err e = {0};
        config_defaults(&c);
        ok(config_source(&c, "image") == NULL, "a default has no source");
        is_int(config_set(&c, "image", "a:1", "CORRAL_IMAGE", &e), 0, "image set");
        is_str(config_source(&c, "image"), "CORRAL_IMAGE", "...its source is kept");
        is_int(config_set(&c, "image", "b:1", "--image", &e), 0, "image set again");
        is_str(config_source(&c, "image"), "--image", "...the last source counts");
        is_int(config_set(&c, "image", "a\x01", "--image", &e), -EINVAL, "a bad value");
        is_str(config_source(&c, "image"), "--image", "...leaves the source as it was");
        is_int(config_set(&c, "listen", "unix", "--listen", &e), 0, "listen set");
        is_int(config_append(&c, "listen", "tcp:127.0.0.1:1,unix:/x.sock", "--listen", &e), 0,
               "listen given again (%s)", e.msg);
        ok(c.listen && c.listen[0] && c.listen[1] && c.listen[2] && !c.listen[3],
           "...holds the items of both");
        is_str(c.listen ? c.listen[2] : NULL, "unix:/x.sock", "...in order");
        is_int(config_append(&c, "pids", "64", "--pids", &e), 0, "append to a number");
        is_int(c.pids, 64, "...sets it");
        config_free(&c);
        ok(c.sources == NULL, "config_free drops the sources");
}

/* Host paths that would hand a sandbox the host itself. */
static void test_mount_danger(void)
{
        static const struct {
                const char *host, *sock;
                bool danger;
        } cases[] = {
            {"/", NULL, true},
            {"/proc", NULL, true},
            {"/proc/1/root", NULL, true},
            {"/sys/fs/cgroup", NULL, true},
            {"/dev", NULL, true},
            {"/run", NULL, true},
            {"/run/user/1000", NULL, true},
            {"/var/run", NULL, true},
            {"/running", NULL, false},
            {"/procfs-copy", NULL, false},
            {"/home/me/data", NULL, false},
            {"/srv/engine", "/srv/engine/docker.sock", true},
            {"/srv", "/srv/engine/docker.sock", true},
            {"/srv/engine/docker.sock", "/srv/engine/docker.sock", true},
            {"/srv/engine-data", "/srv/engine/docker.sock", false},
            {"/srv/engine/sub", "/srv/engine/docker.sock", false},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                const char *why = config_mount_host_danger(cases[i].host, cases[i].sock);
                ok((why != NULL) == cases[i].danger, "mount of host %s (engine socket %s): %s",
                   cases[i].host, cases[i].sock ? cases[i].sock : "-",
                   cases[i].danger ? "refused" : "allowed");
        }
}

int main(void)
{
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir, sizeof(tmpdir), "%s/corral-test-XXXXXX",
                 t && *t == '/' && strlen(t) < 40 ? t : "/tmp");
        if (!mkdtemp(tmpdir)) {
                perror("mkdtemp");
                return 1;
        }
        test_defaults();
        test_parse_size();
        test_set_table();
        test_set_strings();
        test_env();
        test_file();
        test_settings_given();
        test_check();
        test_lists();
        test_default_path();
        test_sources();
        test_mount_danger();
        rmdir(tmpdir);
        return done_testing();
}
