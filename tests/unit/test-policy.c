/* The bridge policy: the built-in default, a user's file merged over it
 * key by key, glob matching with deny winning, and every refusal naming
 * the file and the key. */
#include "bridge/policy.h"

#include "tap.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern const char corral_default_policy[];

static char dir[128], file[256];

static void put(const char *text)
{
        FILE *f = fopen(file, "w");
        if (!f) {
                perror(file);
                exit(1);
        }
        fputs(text, f);
        fclose(f);
}

/* Load the built-in default with `text` as the user's file. */
static int load_user(const char *text, struct policy **ret, struct err *e)
{
        put(text);
        return policy_load(corral_default_policy, file, true, ret, e);
}

static size_t count(char **v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

static void test_default(void)
{
        struct err e = {0};
        struct policy *p = NULL;
        is_int(policy_load(corral_default_policy, NULL, false, &p, &e), 0,
               "the built-in default loads");
        if (!p)
                return;
        is_int(policy_max_calls(p), 500, "max_calls_per_run 500");
        is_int(policy_max_concurrent(p), 32, "max_concurrent_calls 32");
        const struct policy_server *s = policy_server(p, "anything");
        ok(s->enabled, "servers are enabled");
        ok(s->timeout_s == 60, "timeout_s 60");
        is_int(s->max_argument_bytes, 1048576, "max_argument_bytes 1 MiB");
        is_int(s->max_result_bytes, 16777216, "max_result_bytes 16 MiB");
        is_int(count(s->allow), 1, "one allow glob");
        is_str(s->allow ? s->allow[0] : NULL, "*", "... \"*\"");
        is_int(count(s->deny), 0, "no deny glob");
        ok(policy_tool_allowed(p, "x", "any-tool"), "every tool is allowed");
        ok(!policy_tool_allowed(p, "x", NULL), "a NULL tool is not");
        ok(policy_server(p, NULL) == s, "a NULL server gets the \"*\" rules");
        policy_free(p);
        policy_free(NULL);
        ok(true, "policy_free(NULL) is harmless");

        /* A missing file is fine unless asked for by name. */
        char missing[PATH_MAX + 16];
        snprintf(missing, sizeof(missing), "%s/none.json", dir);
        p = NULL;
        is_int(policy_load(corral_default_policy, missing, false, &p, &e), 0,
               "a missing optional file is skipped");
        ok(p && policy_max_calls(p) == 500, "... the default applies");
        ok(p && policy_source(p) == NULL, "... and no file is named as its source");
        is_str(p ? policy_source_name(p) : NULL, "built-in default", "... but the default");
        policy_free(p);
        p = NULL;
        is_int(policy_load(corral_default_policy, missing, true, &p, &e), -ENOENT,
               "a missing required file fails");
        like(e.msg, "none.json", "... naming it");
        ok(p == NULL, "... and gives no policy");
        is_int(policy_load(corral_default_policy, dir, false, &p, &e), -EINVAL,
               "a directory as the file fails");
        like(e.msg, "not a regular file", "... saying so");
}

static void test_merge(void)
{
        struct err e = {0};
        struct policy *p = NULL;
        int r = load_user("{\"version\": 1, \"max_calls_per_run\": 10,"
                          " \"servers\": {"
                          "  \"*\": {\"timeout_s\": 5, \"deny\": [\"danger*\"]},"
                          "  \"github\": {\"deny\": [\"delete_*\", \"*_secret\"],"
                          "               \"max_result_bytes\": 2048},"
                          "  \"off\": {\"enabled\": false},"
                          "  \"slow\": {\"timeout_s\": 600.5, \"allow\": [\"read\"]}"
                          "}}",
                          &p, &e);
        is_int(r, 0, "a user file merges over the default");
        if (r < 0) {
                diag("%s", e.msg);
                return;
        }
        is_int(policy_max_calls(p), 10, "a top-level scalar replaces the default");
        is_int(policy_max_concurrent(p), 32, "one not given keeps the default");

        const struct policy_server *star = policy_server(p, "unlisted");
        ok(star->timeout_s == 5, "\"*\" field replaced by the user file");
        is_int(star->max_argument_bytes, 1048576, "\"*\" fields not given keep the default");
        ok(star->enabled && count(star->allow) == 1, "... enabled and allow \"*\" too");
        ok(!policy_tool_allowed(p, "unlisted", "danger_zone"), "the merged \"*\" deny applies");

        const struct policy_server *gh = policy_server(p, "github");
        ok(gh->timeout_s == 5, "a server without timeout_s takes the merged \"*\" one");
        is_int(gh->max_result_bytes, 2048, "its own max_result_bytes");
        is_int(gh->max_argument_bytes, 1048576, "the default max_argument_bytes");
        is_int(count(gh->deny), 2, "its own deny replaces \"*\"'s");
        ok(policy_tool_allowed(p, "github", "get_issue"), "github.get_issue is allowed");
        ok(!policy_tool_allowed(p, "github", "delete_repo"), "github.delete_repo is denied");
        ok(!policy_tool_allowed(p, "github", "token_secret"), "github.token_secret is denied");
        ok(policy_tool_allowed(p, "github", "danger_zone"),
           "\"*\"'s deny does not apply where the server has its own");

        ok(!policy_server(p, "off")->enabled, "enabled: false");
        ok(!policy_tool_allowed(p, "off", "anything"), "... no tool of it is allowed");
        ok(policy_server(p, "off")->timeout_s == 5, "... its other fields still come from \"*\"");

        const struct policy_server *slow = policy_server(p, "slow");
        ok(slow->timeout_s == 600.5, "a fractional timeout_s");
        ok(policy_tool_allowed(p, "slow", "read"), "slow: the allowed tool");
        ok(!policy_tool_allowed(p, "slow", "write"), "slow: a tool not in allow is denied");
        ok(!policy_tool_allowed(p, "slow", "danger"), "slow: \"*\"'s deny still applies");
        ok(policy_server(p, "Slow")->timeout_s == 5,
           "server names are case-sensitive: \"Slow\" gets the \"*\" rules");
        policy_free(p);
}

static const struct glob_case {
        const char *tool;
        bool allowed;
} glob_cases[] = {
    {"get_issue", true},  {"get_", true},        {"list_a", true},          {"list_ab", false},
    {"list_", false},     {"get_secret", false}, {"get_secret_key", false}, {"put_issue", false},
    {"apple", true},      {"banana", true},      {"cherry", false},         {"a.b", true},
    {"GET_issue", false}, {"", false},           {"star*", true},           {"starx", false},
    {"x/y", true},
};

static void test_globs(void)
{
        struct err e = {0};
        struct policy *p = NULL;
        int r = load_user("{\"servers\": {\"s\": {\"allow\": [\"get_*\", \"list_?\", \"[ab]*\","
                          " \"star\\\\*\", \"x/*\"], \"deny\": [\"get_secret*\"]}}}",
                          &p, &e);
        is_int(r, 0, "globs load");
        if (r < 0) {
                diag("%s", e.msg);
                return;
        }
        for (size_t i = 0; i < sizeof(glob_cases) / sizeof(glob_cases[0]); i++)
                is_int(policy_tool_allowed(p, "s", glob_cases[i].tool), glob_cases[i].allowed,
                       "s.%s is %s", glob_cases[i].tool,
                       glob_cases[i].allowed ? "allowed" : "denied");
        policy_free(p);

        /* deny wins over allow, whatever their order and overlap. */
        p = NULL;
        is_int(load_user("{\"servers\": {\"*\": {\"allow\": [\"*\"], \"deny\": [\"*\"]},"
                         " \"t\": {\"allow\": [\"exact\"], \"deny\": [\"ex*\"]}}}",
                         &p, &e),
               0, "overlapping allow and deny load");
        ok(!policy_tool_allowed(p, "any", "thing"), "allow * and deny *: denied");
        ok(!policy_tool_allowed(p, "t", "exact"), "an exact allow loses to a deny glob");
        policy_free(p);

        p = NULL;
        is_int(load_user("{\"servers\": {\"*\": {\"allow\": []}}}", &p, &e), 0, "allow []");
        ok(!policy_tool_allowed(p, "any", "thing"), "... allows nothing");
        policy_free(p);
}

static const struct bad_case {
        const char *json, *want;
} bad_cases[] = {
    {"{\"servers\": {\"github\": {\"alow\": [\"*\"]}}}", "servers.github.alow: unknown key"},
    {"{\"max_calls\": 3}", "max_calls: unknown key"},
    {"{\"servers\": {\"*\": {\"timeout\": 3}}}", "servers.*.timeout: unknown key"},
    {"{\"version\": 2}", "version: must be 1"},
    {"{\"version\": \"1\"}", "version: must be 1"},
    {"{\"max_calls_per_run\": 0}", "max_calls_per_run: must be an integer from 1 to 1000000"},
    {"{\"max_calls_per_run\": 1000001}", "max_calls_per_run: must be an integer"},
    {"{\"max_calls_per_run\": \"5\"}", "max_calls_per_run: must be an integer"},
    {"{\"max_calls_per_run\": 5.5}", "max_calls_per_run: must be an integer"},
    {"{\"max_concurrent_calls\": 0}", "max_concurrent_calls: must be an integer from 1 to 1024"},
    {"{\"max_concurrent_calls\": 1025}", "max_concurrent_calls: must be an integer"},
    {"{\"servers\": {\"a\": {\"timeout_s\": 0.05}}}",
     "servers.a.timeout_s: must be a number from 0.1 to 86400"},
    {"{\"servers\": {\"a\": {\"timeout_s\": 86401}}}", "servers.a.timeout_s: must be a number"},
    {"{\"servers\": {\"a\": {\"timeout_s\": \"1\"}}}", "servers.a.timeout_s: must be a number"},
    {"{\"servers\": {\"a\": {\"max_argument_bytes\": 1023}}}",
     "servers.a.max_argument_bytes: must be an integer from 1024 to 1073741824"},
    {"{\"servers\": {\"a\": {\"max_argument_bytes\": 1073741825}}}",
     "servers.a.max_argument_bytes: must be an integer"},
    {"{\"servers\": {\"a\": {\"max_result_bytes\": 2048.5}}}",
     "servers.a.max_result_bytes: must be an integer"},
    {"{\"servers\": {\"a\": {\"max_result_bytes\": -1}}}",
     "servers.a.max_result_bytes: must be an integer"},
    {"{\"servers\": {\"a\": {\"enabled\": \"yes\"}}}", "servers.a.enabled: must be true or false"},
    {"{\"servers\": {\"a\": {\"allow\": \"*\"}}}", "servers.a.allow: must be an array"},
    {"{\"servers\": {\"a\": {\"deny\": [1]}}}", "servers.a.deny[0]: must be a glob"},
    {"{\"servers\": {\"a\": {\"deny\": [\"x\", \"\"]}}}", "servers.a.deny[1]: must be a glob"},
    {"{\"servers\": []}", "servers: must be an object"},
    {"{\"servers\": {\"a\": true}}", "servers.a: must be an object"},
    {"{\"servers\": {\"bad name\": {}}}", "servers.bad name: not a server name"},
    {"{\"servers\": {\"\": {}}}", "servers.: not a server name"},
    {"[]", "top level must be a JSON object"},
    {"{\"servers\": ", ":1:"},
    {"{\"version\": 1, \"version\": 1}", "duplicate"},
    {"", ":1:"},
};

static void test_invalid(void)
{
        for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
                struct err e = {0};
                struct policy *p = NULL;
                int r = load_user(bad_cases[i].json, &p, &e);
                is_int(r, -EINVAL, "%s is refused", bad_cases[i].json);
                like(e.msg, bad_cases[i].want, "... with \"%s\"", bad_cases[i].want);
                ok(strncmp(e.msg, file, strlen(file)) == 0, "... naming the file first");
                ok(p == NULL, "... and no policy");
                policy_free(p);
        }

        /* The exact message of the example in the spec. */
        struct err e = {0};
        struct policy *p = NULL;
        char want[PATH_MAX + 64];
        load_user("{\"servers\": {\"github\": {\"alow\": []}}}", &p, &e);
        snprintf(want, sizeof(want), "%s: servers.github.alow: unknown key", file);
        is_str(e.msg, want, "the message is FILE: servers.github.alow: unknown key");

        /* 257 patterns, and one of 257 characters. */
        char *text = malloc(64 << 10);
        size_t len = (size_t)snprintf(text, 64 << 10, "{\"servers\": {\"a\": {\"allow\": [");
        for (int i = 0; i < 257; i++)
                len += (size_t)snprintf(text + len, (64 << 10) - len, "%s\"g%d\"", i ? "," : "", i);
        snprintf(text + len, (64 << 10) - len, "]}}}");
        is_int(load_user(text, &p, &e), -EINVAL, "257 allow patterns are refused");
        like(e.msg, "servers.a.allow: more than 256 patterns", "... saying so");
        memcpy(text + len - 7, "]}}}", 5); /* drop the last one: 256 */
        p = NULL;
        is_int(load_user(text, &p, &e), 0, "256 are fine");
        ok(p && policy_tool_allowed(p, "a", "g255") && !policy_tool_allowed(p, "a", "g256"),
           "... and all 256 count");
        policy_free(p);

        len = (size_t)snprintf(text, 64 << 10, "{\"servers\": {\"a\": {\"deny\": [\"");
        memset(text + len, 'x', 257);
        snprintf(text + len + 257, (64 << 10) - len - 257, "\"]}}}");
        is_int(load_user(text, &p, &e), -EINVAL, "a 257-character pattern is refused");
        like(e.msg, "servers.a.deny[0]: must be a glob of 1 to 256 characters", "... saying so");
        snprintf(text + len + 256, (64 << 10) - len - 256, "\"]}}}");
        p = NULL;
        is_int(load_user(text, &p, &e), 0, "a 256-character pattern is fine");
        policy_free(p);
        free(text);

        /* Past 1 MiB. */
        text = malloc((1 << 20) + 64);
        memset(text, ' ', (1 << 20) + 63);
        text[0] = '{';
        text[(1 << 20) + 62] = '}';
        text[(1 << 20) + 63] = '\0';
        is_int(load_user(text, &p, &e), -EFBIG, "a file past 1 MiB is refused");
        like(e.msg, "larger than 1 MiB", "... saying so");
        free(text);
}

static const struct edge_case {
        const char *json;
        const char *what;
} edge_cases[] = {
    {"{\"max_calls_per_run\": 1, \"max_concurrent_calls\": 1}", "the lowest counts"},
    {"{\"max_calls_per_run\": 1000000, \"max_concurrent_calls\": 1024}", "the highest counts"},
    {"{\"servers\": {\"a\": {\"timeout_s\": 0.1, \"max_argument_bytes\": 1024, "
     "\"max_result_bytes\": 1024}}}",
     "the lowest limits"},
    {"{\"servers\": {\"a\": {\"timeout_s\": 86400, \"max_argument_bytes\": 1073741824, "
     "\"max_result_bytes\": 1073741824}}}",
     "the highest limits"},
    {"{}", "an empty object"},
    {"{\"version\": 1, \"servers\": {}}", "no servers"},
    {"{\"servers\": {\"A.b-c_9\": {}}}", "a server name of every allowed kind, no fields"},
};

static void test_edges(void)
{
        for (size_t i = 0; i < sizeof(edge_cases) / sizeof(edge_cases[0]); i++) {
                struct err e = {0};
                struct policy *p = NULL;
                int r = load_user(edge_cases[i].json, &p, &e);
                is_int(r, 0, "%s: %s loads", edge_cases[i].what, edge_cases[i].json);
                if (r < 0)
                        diag("%s", e.msg);
                policy_free(p);
        }
        struct err e = {0};
        struct policy *p = NULL;
        load_user(edge_cases[3].json, &p, &e);
        const struct policy_server *s = p ? policy_server(p, "a") : NULL;
        ok(s && s->timeout_s == 86400 && s->max_argument_bytes == 1ULL << 30 &&
               s->max_result_bytes == 1ULL << 30,
           "the highest limits are kept exactly");
        policy_free(p);
}

static void test_default_text(void)
{
        struct err e = {0};
        struct policy *p = NULL;
        is_int(policy_load("{\"version\": 1, \"max_calls_per_run\": 1, \"max_concurrent_calls\": 1,"
                           " \"servers\": {\"*\": {\"enabled\": true, \"allow\": [], "
                           "\"timeout_s\": 1, \"max_argument_bytes\": 1024, "
                           "\"max_result_bytes\": 1024}}}",
                           NULL, false, &p, &e),
               -EINVAL, "a default without every \"*\" field fails");
        is_str(e.msg, "default policy: servers.*.deny: missing", "... naming the missing key");
        is_int(policy_load("{\"servers\": {}}", NULL, false, &p, &e), -EINVAL,
               "a default without the counts fails");
        like(e.msg, "default policy: max_calls_per_run: missing", "... naming it");
        is_int(policy_load("{\"x\": 1}", NULL, false, &p, &e), -EINVAL,
               "a default with an unknown key fails");
        is_str(e.msg, "default policy: x: unknown key", "... with the same message form");
        ok(p == NULL, "no policy from a bad default");
}

/* deny wins, then ask, then allow; ask alone makes a tool callable. */
static void test_ask(void)
{
        struct err e = {0};
        struct policy *p = NULL;
        int r = load_user("{\"version\": 1, \"servers\": {"
                          "  \"*\": {\"ask\": [\"send_*\"]},"
                          "  \"gh\": {\"allow\": [\"get_*\"], \"ask\": [\"create_*\", "
                          "\"get_secret\"], \"deny\": [\"create_repo\"]}"
                          "}}",
                          &p, &e);
        is_int(r, 0, "a policy with ask globs loads");
        if (r < 0) {
                diag("%s", e.msg);
                return;
        }
        is_int(policy_tool_decision(p, "gh", "get_issue"), POLICY_ALLOW, "allow alone: allowed");
        is_int(policy_tool_decision(p, "gh", "create_issue"), POLICY_ASK,
               "ask, not in allow: asked");
        is_int(policy_tool_decision(p, "gh", "get_secret"), POLICY_ASK,
               "ask wins over allow: asked");
        is_int(policy_tool_decision(p, "gh", "create_repo"), POLICY_DENY,
               "deny wins over ask: denied");
        is_int(policy_tool_decision(p, "gh", "delete_x"), POLICY_DENY, "no glob: denied");
        ok(policy_tool_allowed(p, "gh", "create_issue"), "an asked tool is shown to the code");
        is_int(policy_tool_decision(p, "other", "send_mail"), POLICY_ASK, "\"*\"'s ask applies");
        is_int(policy_tool_decision(p, "other", "read"), POLICY_ALLOW, "... and its allow");
        policy_free(p);
        r = load_user("{\"version\": 1, \"servers\": {\"x\": {\"ask\": \"send\"}}}", &p, &e);
        is_int(r, -EINVAL, "ask must be an array of globs");
        like(e.msg, "servers.x.ask", "... naming the key");
}

int main(void)
{
        snprintf(dir, sizeof(dir), "/tmp/corral-test-policy-XXXXXX");
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        snprintf(file, sizeof(file), "%s/policy.json", dir);
        test_default();
        test_merge();
        test_globs();
        test_invalid();
        test_edges();
        test_default_text();
        test_ask();
        unlink(file);
        rmdir(dir);
        return done_testing();
}
