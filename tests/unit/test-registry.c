/* The registry of upstream MCP servers: every host file it reads, their
 * precedence, corral's own config, a project's servers only as approved,
 * ${VAR} expansion, secret masking (and masking before any cut,
 * upstream/mask.h; in JSON answers too), never listing corral itself, and
 * the bounds on what the files may hold. Each test builds a fresh HOME and
 * project directory under /tmp. */
#include "upstream/registry.h"

#include "core/buf.h"
#include "core/log.h"
#include "tap.h"
#include "upstream/mask.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Short enough that every path made from them fits in PATH_MAX. */
static char root[128], home[256], cwd[256];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        return remove(path);
}

static void fresh_dirs(void)
{
        if (root[0])
                nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        snprintf(root, sizeof(root), "/tmp/corral-test-registry-XXXXXX");
        if (!mkdtemp(root)) {
                perror("mkdtemp");
                exit(1);
        }
        snprintf(home, sizeof(home), "%s/home", root);
        snprintf(cwd, sizeof(cwd), "%s/proj", root);
        mkdir(home, 0700);
        mkdir(cwd, 0700);
}

static void make_dirs_for(const char *path)
{
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s", path);
        for (char *p = tmp + 1; *p; p++)
                if (*p == '/') {
                        *p = '\0';
                        mkdir(tmp, 0700);
                        *p = '/';
                }
}

/* Write `text` to `dir`/`rel`, making the folders on the way. */
static void put(const char *dir, const char *rel, const char *text)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, rel);
        make_dirs_for(path);
        FILE *f = fopen(path, "w");
        if (!f) {
                perror(path);
                exit(1);
        }
        fputs(text, f);
        fclose(f);
}

static void drop(const char *dir, const char *rel)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, rel);
        unlink(path);
}

/* corral config's project_servers for load(): the project's servers the
 * tests of sources and precedence read. */
static char **approved;

static int load(json_t *own, bool only_own, struct registry *reg, struct err *e)
{
        struct registry_sources src = {.home = home,
                                       .cwd = cwd,
                                       .own = own,
                                       .only_own = only_own,
                                       .project_servers = approved};
        *reg = (struct registry){0};
        return registry_load(&src, reg, e);
}

static json_t *parse(const char *text)
{
        json_error_t jerr;
        json_t *j = json_loads(text, 0, &jerr);
        if (!j) {
                diag("bad JSON in the test: %s", jerr.text);
                exit(1);
        }
        return j;
}

static size_t strv_count(char **v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

static bool has_secret(const struct upstream_spec *s, const char *value)
{
        for (size_t i = 0; s && s->secrets && s->secrets[i]; i++)
                if (strcmp(s->secrets[i], value) == 0)
                        return true;
        return false;
}

static void test_expand(void)
{
        struct err e = {0};
        char **secrets = NULL, *out = NULL;
        setenv("CRT_A", "alpha1", 1);
        setenv("CRT_SHORT", "ab", 1);
        setenv("CRT_EMPTY", "", 1);
        unsetenv("CRT_UNSET");

        is_int(registry_expand("x-${CRT_A}-y", &secrets, &out, &e), 0, "expand ${VAR}");
        is_str(out, "x-alpha1-y", "... to its value");
        free(out);
        is_int(strv_count(secrets), 1, "... which becomes a secret");
        is_str(secrets ? secrets[0] : NULL, "alpha1", "... the value itself");

        is_int(registry_expand("${env:CRT_A}${CRT_A}", &secrets, &out, &e), 0, "expand ${env:VAR}");
        is_str(out, "alpha1alpha1", "... like ${VAR}");
        free(out);
        is_int(strv_count(secrets), 1, "the same secret is kept once");

        is_int(registry_expand("${CRT_SHORT}", &secrets, &out, &e), 0, "a short value expands");
        is_str(out, "ab", "... to itself");
        free(out);
        is_int(strv_count(secrets), 1, "... but under 4 bytes it is no secret");

        is_int(registry_expand("${CRT_UNSET:-fallback}/${CRT_EMPTY:-dflt}|${CRT_EMPTY}|", &secrets,
                               &out, &e),
               0, "defaults");
        is_str(out, "fallback/dflt||", "... apply to unset and empty variables; empty stays empty");
        free(out);
        is_int(registry_expand("${CRT_A:-other}", &secrets, &out, &e), 0, "default not needed");
        is_str(out, "alpha1", "... the value wins");
        free(out);
        is_int(registry_expand("${CRT_UNSET:-}", &secrets, &out, &e), 0, "empty default");
        is_str(out, "", "... expands to nothing");
        free(out);

        out = NULL;
        is_int(registry_expand("a ${CRT_UNSET} b", &secrets, &out, &e), -ENOENT,
               "an undefined variable fails with -ENOENT");
        is_str(e.msg, "environment variable CRT_UNSET is not set", "... naming it");
        ok(out == NULL, "... and gives no string");

        is_int(registry_expand("${input:api_key}", &secrets, &out, &e), -EOPNOTSUPP,
               "${input:...} fails");
        is_str(e.msg, "VS Code input variables are not supported", "... with a clear reason");
        is_int(registry_expand("${config:x}", &secrets, &out, &e), -EOPNOTSUPP,
               "another prefix fails");
        like(e.msg, "unsupported variable ${config:x}", "... naming it");

        is_int(registry_expand("$HOME $$ ${1} ${a b} ${unterminated", &secrets, &out, &e), 0,
               "text that is no reference");
        is_str(out, "$HOME $$ ${1} ${a b} ${unterminated", "... is kept as written");
        free(out);
        is_int(registry_expand("", &secrets, &out, &e), 0, "empty input");
        is_str(out, "", "... empty output");
        free(out);

        /* The result is bounded like every string of the registry. */
        char *big = malloc(40 << 10);
        memset(big, 'z', (40 << 10) - 1);
        big[(40 << 10) - 1] = '\0';
        setenv("CRT_BIG", big, 1);
        free(big);
        is_int(registry_expand("${CRT_BIG}${CRT_BIG}", &secrets, &out, &e), -E2BIG,
               "an expansion past 64 KiB fails");
        like(e.msg, "64 KiB", "... saying so");
        unsetenv("CRT_BIG");

        for (size_t i = 0; secrets && secrets[i]; i++)
                free(secrets[i]);
        free(secrets);
}

static void test_own(void)
{
        fresh_dirs();
        struct err e = {0};
        struct registry reg;
        setenv("CRT_TOKEN", "tok-123456", 1);
        json_t *own = parse("{"
                            "\"fs\": {\"command\": \"~/bin/fs-server\", \"args\": [\"--root\", "
                            "\"${CRT_TOKEN}\"], \"env\": {\"K\": \"v\", \"SECRET\": "
                            "\"lit-secret\"}, \"cwd\": \"~/work\", \"description\": \"files\", "
                            "\"x-host-field\": {\"anything\": 1}},"
                            "\"web\": {\"type\": \"http\", \"url\": \"https://example.com/mcp\", "
                            "\"headers\": {\"Authorization\": \"Bearer ${CRT_TOKEN}\"}, "
                            "\"disabled\": true},"
                            "\"web2\": {\"type\": \"streamable-http\", \"url\": \"http://h:1/\"},"
                            "\"web3\": {\"type\": \"streamableHttp\", \"url\": \"http://h:2/\"},"
                            "\"inferred\": {\"url\": \"http://h:3/\"}"
                            "}");
        int r = load(own, false, &reg, &e);
        is_int(r, 0, "corral's own servers load");
        if (r < 0)
                diag("%s", e.msg);
        is_int(reg.n, 5, "... all five");
        const struct upstream_spec *fs = registry_find(&reg, "fs");
        ok(fs != NULL, "fs is found");
        if (fs) {
                char want[PATH_MAX];
                is_int(fs->transport, UP_STDIO, "fs is stdio (inferred from command)");
                snprintf(want, sizeof(want), "%s/bin/fs-server", home);
                is_str(fs->command, want, "~/ in command is the home directory");
                is_str(fs->argv ? fs->argv[0] : NULL, want, "argv[0] is the command");
                is_int(strv_count(fs->argv), 3, "argv has the command and two args");
                is_str(fs->argv ? fs->argv[2] : NULL, "tok-123456", "args are expanded");
                is_int(strv_count(fs->env), 2, "two env entries");
                is_str(fs->env ? fs->env[0] : NULL, "K=v", "env is KEY=value");
                snprintf(want, sizeof(want), "%s/work", home);
                is_str(fs->cwd, want, "~/ in cwd is the home directory");
                is_str(fs->description, "files", "description");
                is_str(fs->source, "corral config", "source names corral's config");
                ok(fs->error == NULL, "no error");
                ok(!fs->disabled, "not disabled");
                ok(has_secret(fs, "tok-123456"), "the expanded variable is a secret");
                ok(has_secret(fs, "lit-secret"), "a literal env value is a secret");
                ok(!has_secret(fs, "v"), "a 1-byte env value is not");
        }
        const struct upstream_spec *web = registry_find(&reg, "web");
        ok(web != NULL, "web is found");
        if (web) {
                is_int(web->transport, UP_HTTP, "web is http");
                is_str(web->url, "https://example.com/mcp", "url");
                is_int(strv_count(web->headers), 1, "one header");
                is_str(web->headers ? web->headers[0] : NULL, "Authorization: Bearer tok-123456",
                       "headers are \"Name: value\", expanded");
                ok(web->disabled, "disabled: true is kept");
                ok(has_secret(web, "Bearer tok-123456"), "the header value is a secret");
                ok(web->command == NULL && web->argv == NULL, "no command for http");
        }
        const char *http_names[] = {"web2", "web3", "inferred"};
        for (size_t i = 0; i < ARRAY_SIZE(http_names); i++) {
                const struct upstream_spec *s = registry_find(&reg, http_names[i]);
                ok(s && s->transport == UP_HTTP && !s->error, "%s is http", http_names[i]);
        }
        ok(registry_find(&reg, "nope") == NULL, "registry_find of an unknown name is NULL");
        ok(registry_find(&reg, NULL) == NULL, "registry_find(NULL) is NULL");
        registry_free(&reg);
        is_int(reg.n, 0, "registry_free empties it");
        registry_free(&reg);
        ok(true, "registry_free twice is harmless");
        json_decref(own);
}

static const struct own_bad {
        const char *json, *want;
} own_bad[] = {
    {"{\"x\": {\"command\": \"a\", \"args\": \"b\"}}", "server 'x' in corral config: args"},
    {"{\"x\": {\"command\": \"a\", \"args\": [1]}}", "args must be an array of strings"},
    {"{\"x\": {\"command\": 5}}", "server 'x' in corral config: command must be a string"},
    {"{\"x\": {\"command\": \"\"}}", "command must not be empty"},
    {"{\"x\": {\"command\": \"a\", \"env\": {\"A=B\": \"v\"}}}", "env: \"A=B\""},
    {"{\"x\": {\"command\": \"a\", \"env\": {\"\": \"v\"}}}", "env: \"\""},
    {"{\"x\": {\"command\": \"a\", \"env\": {\"A\": 1}}}", "env must be an object of strings"},
    {"{\"x\": {\"command\": \"a\", \"env\": []}}", "env must be an object of strings"},
    {"{\"x\": {\"command\": \"a\", \"cwd\": false}}", "cwd must be a string"},
    {"{\"x\": {\"url\": \"ftp://h/\"}}", "url must be an http:// or https:// URL"},
    {"{\"x\": {\"url\": \"http://\"}}", "url must be an http:// or https:// URL"},
    {"{\"x\": {\"url\": \"http://h/a b\"}}", "url must be an http:// or https:// URL"},
    {"{\"x\": {\"url\": \"http://h/\", \"headers\": {\"Bad Name\": \"v\"}}}",
     "headers: \"Bad Name\" is not a valid header name"},
    {"{\"x\": {\"url\": \"http://h/\", \"headers\": {\"A\": \"v\\r\\nB: c\"}}}",
     "the value of A has a line break"},
    {"{\"x\": {\"type\": \"sse\", \"url\": \"http://h/\"}}",
     "the SSE transport is not supported; use streamable HTTP"},
    {"{\"x\": {\"type\": \"websocket\", \"url\": \"http://h/\"}}", "unknown type \"websocket\""},
    {"{\"x\": {\"type\": 1, \"url\": \"http://h/\"}}", "type must be a string"},
    {"{\"x\": {\"type\": \"stdio\", \"url\": \"http://h/\"}}", "needs a \"command\""},
    {"{\"x\": {\"type\": \"http\", \"command\": \"a\"}}", "needs a \"url\""},
    {"{\"x\": {\"args\": []}}", "needs a \"command\" (stdio) or a \"url\" (HTTP)"},
    {"{\"x\": {\"command\": \"a\", \"disabled\": \"yes\"}}", "disabled must be true or false"},
    {"{\"x\": {\"command\": \"a\", \"description\": 1}}", "description must be a string"},
    {"{\"x\": []}", "server 'x' in corral config: must be an object"},
    {"{\"x\": {\"command\": \"a ${input:tok}\"}}", "VS Code input variables are not supported"},
    {"{\"bad name\": {\"command\": \"a\"}}", "\"bad name\" is not a valid server name"},
    {"{\"\": {\"command\": \"a\"}}", "\"\" is not a valid server name"},
    {"{\"a/b\": {\"command\": \"a\"}}", "\"a/b\" is not a valid server name"},
    {"{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": "
     "{\"command\": \"a\"}}",
     "is not a valid server name"},
    {"[]", "corral config: servers must be an object"},
};

static void test_own_invalid(void)
{
        fresh_dirs();
        for (size_t i = 0; i < ARRAY_SIZE(own_bad); i++) {
                struct err e = {0};
                struct registry reg;
                json_t *own = parse(own_bad[i].json);
                int r = load(own, true, &reg, &e);
                is_int(r, -EINVAL, "own config %s is refused", own_bad[i].json);
                like(e.msg, own_bad[i].want, "... with \"%s\"", own_bad[i].want);
                if (r == 0)
                        registry_free(&reg);
                json_decref(own);
        }

        /* A name of exactly 64 characters and every allowed character. */
        struct err e = {0};
        struct registry reg;
        json_t *own =
            parse("{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": "
                  "{\"command\": \"a\"}, \"Az09_.-\": {\"command\": \"a\"}}");
        is_int(load(own, true, &reg, &e), 0, "names of 64 characters and of A-Za-z0-9_.- pass");
        is_int(reg.n, 2, "... both listed");
        registry_free(&reg);
        json_decref(own);

        /* A variable this environment lacks is no fault of the file: the
         * entry stays with its reason, even in corral's own config. */
        unsetenv("CRT_MISSING");
        own = parse("{\"gh\": {\"command\": \"gh-mcp\", \"env\": {\"T\": \"${CRT_MISSING}\"}}}");
        is_int(load(own, true, &reg, &e), 0, "an undefined variable in own config is not fatal");
        const struct upstream_spec *gh = registry_find(&reg, "gh");
        is_str(gh ? gh->error : NULL,
               "environment variable CRT_MISSING is not set (used in env of server 'gh' in "
               "corral config)",
               "... the entry carries the reason");
        ok(gh && gh->argv == NULL && gh->command == NULL && gh->env == NULL,
           "... and nothing to launch");
        registry_free(&reg);
        json_decref(own);

        own = json_object();
        for (int i = 0; i < 257; i++) {
                char name[16];
                snprintf(name, sizeof(name), "s%d", i);
                json_object_set_new(own, name, parse("{\"command\": \"a\"}"));
        }
        is_int(load(own, true, &reg, &e), -EINVAL, "257 servers in own config are refused");
        like(e.msg, "more than 256 servers", "... saying so");
        json_object_del(own, "s0");
        is_int(load(own, true, &reg, &e), 0, "256 are fine");
        is_int(reg.n, 256, "... all listed");
        registry_free(&reg);
        json_decref(own);
}

/* One file of each kind, each defining a server named after it. */
static void test_sources(void)
{
        static char *project[] = {"project-mcp", "vscode-project", "cursor-project", NULL};
        approved = project;
        fresh_dirs();
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/.config", home);
        put(cwd, ".mcp.json", "{\"mcpServers\": {\"project-mcp\": {\"command\": \"a\"}}}");
        char claude[4096];
        snprintf(claude, sizeof(claude),
                 "{\"numStartups\": 3, \"projects\": {\"%s\": {\"mcpServers\": "
                 "{\"claude-local\": {\"command\": \"b\"}}}, \"/elsewhere\": {\"mcpServers\": "
                 "{\"other-project\": {\"command\": \"b\"}}}}, \"mcpServers\": "
                 "{\"claude-user\": {\"type\": \"http\", \"url\": \"https://u/\"}}}",
                 cwd);
        put(home, ".claude.json", claude);
        /* VS Code writes JSONC: comments and trailing commas. */
        put(cwd, ".vscode/mcp.json",
            "// the project's servers\n{\"servers\": {\"vscode-project\": "
            "{\"type\": \"stdio\", \"command\": \"c\", /* inline */ \"args\": [\"//not a "
            "comment\", \"${workspaceFolder}\",],},},\n \"inputs\": []}");
        put(cwd, ".cursor/mcp.json",
            "{\"mcpServers\": {\"cursor-project\": {\"command\": \"d\"}}}");
        put(home, ".cursor/mcp.json", "{\"mcpServers\": {\"cursor-user\": {\"command\": \"e\"}}}");
        put(dir, "Code/User/mcp.json", "{\"servers\": {\"vscode-user\": {\"command\": \"f\"}}}");
        put(dir, "Claude/claude_desktop_config.json",
            "{\"mcpServers\": {\"desktop\": {\"command\": \"g\"}}}");
        put(dir, "mcp/servers/b.json", "{\"servers\": {\"dir-servers\": {\"command\": \"h\"}}}");
        put(dir, "mcp/servers/a.json", "{\"mcpServers\": {\"dir-mcp\": {\"command\": \"i\"}}}");
        put(dir, "mcp/servers/single.json", "{\"command\": \"j\", \"args\": [\"k\"]}");
        put(dir, "mcp/servers/nothing.json", "{\"hello\": 1}");
        put(dir, "mcp/servers/notes.txt", "{\"command\": \"not json files\"}");
        put(dir, "mcp/servers/.hidden.json", "{\"command\": \"hidden\"}");

        struct err e = {0};
        struct registry reg;
        is_int(load(NULL, false, &reg, &e), 0, "all host files load");
        static const struct {
                const char *name, *base, *file;
        } want[] = {
            /* The person's own files first, a project's last (it can
             * never take the name of one of theirs). */
            {"claude-local", "home", ".claude.json"},
            {"claude-user", "home", ".claude.json"},
            {"cursor-user", "home", ".cursor/mcp.json"},
            {"vscode-user", "home", ".config/Code/User/mcp.json"},
            {"desktop", "home", ".config/Claude/claude_desktop_config.json"},
            {"dir-mcp", "home", ".config/mcp/servers/a.json"},
            {"dir-servers", "home", ".config/mcp/servers/b.json"},
            {"single", "home", ".config/mcp/servers/single.json"},
            {"project-mcp", "cwd", ".mcp.json"},
            {"vscode-project", "cwd", ".vscode/mcp.json"},
            {"cursor-project", "cwd", ".cursor/mcp.json"},
        };
        is_int(reg.n, ARRAY_SIZE(want), "one server from each source, nothing else");
        for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
                char path[PATH_MAX];
                snprintf(path, sizeof(path), "%s/%s", strcmp(want[i].base, "cwd") ? home : cwd,
                         want[i].file);
                const struct upstream_spec *s = registry_find(&reg, want[i].name);
                ok(s && !s->error, "%s is listed, usable", want[i].name);
                is_str(s ? s->source : NULL, path, "... from %s", want[i].file);
                /* The registry keeps the order of precedence. */
                ok(i < reg.n && strcmp(reg.v[i].name, want[i].name) == 0, "... in place %zu", i);
        }
        ok(registry_find(&reg, "other-project") == NULL, "another project's servers are not");
        ok(registry_find(&reg, "nothing") == NULL && registry_find(&reg, "notes") == NULL &&
               registry_find(&reg, ".hidden") == NULL,
           "files with no server, not .json or hidden are not read as servers");
        const struct upstream_spec *vs = registry_find(&reg, "vscode-project");
        is_int(vs ? strv_count(vs->argv) : 0, 3, "the JSONC file's args are read");
        is_str(vs && vs->argv ? vs->argv[1] : NULL, "//not a comment",
               "... '//' inside a string is not a comment");
        is_str(vs && vs->argv ? vs->argv[2] : NULL, cwd, "${workspaceFolder} is the project");
        ok(vs && !has_secret(vs, cwd), "... which is not a secret");
        const struct upstream_spec *single = registry_find(&reg, "single");
        is_str(single && single->argv ? single->argv[1] : NULL, "k",
               "a one-server file is read as that server");
        registry_free(&reg);

        /* An explicit XDG config folder replaces ~/.config. */
        char xdg[512];
        snprintf(xdg, sizeof(xdg), "%s/xdg", root);
        put(xdg, "Claude/claude_desktop_config.json",
            "{\"mcpServers\": {\"xdg-desktop\": {\"command\": \"g\"}}}");
        struct registry_sources src = {
            .home = home, .cwd = cwd, .xdg_config = xdg, .project_servers = project};
        is_int(registry_load(&src, &reg, &e), 0, "load with xdg_config");
        ok(registry_find(&reg, "xdg-desktop") != NULL, "... reads xdg_config/Claude");
        ok(registry_find(&reg, "desktop") == NULL, "... and not ~/.config/Claude");
        ok(registry_find(&reg, "cursor-user") != NULL, "... still reads ~/.cursor");
        registry_free(&reg);

        /* No home: only the project's files; no cwd: only the user's. */
        src = (struct registry_sources){.cwd = cwd, .project_servers = project};
        is_int(registry_load(&src, &reg, &e), 0, "load without home");
        is_int(reg.n, 3, "... only the three project files");
        ok(registry_find(&reg, "project-mcp") && registry_find(&reg, "cursor-project"),
           "... .mcp.json and .cursor/mcp.json");
        registry_free(&reg);
        src = (struct registry_sources){.home = home};
        is_int(registry_load(&src, &reg, &e), 0, "load without cwd");
        ok(registry_find(&reg, "claude-user") && !registry_find(&reg, "claude-local") &&
               !registry_find(&reg, "project-mcp"),
           "... the user's files only, no project scope");
        registry_free(&reg);

        /* only_own reads corral's config alone. */
        json_t *own = parse("{\"mine\": {\"command\": \"m\"}}");
        is_int(load(own, true, &reg, &e), 0, "load with only_own");
        is_int(reg.n, 1, "... one server");
        is_str(reg.n ? reg.v[0].name : NULL, "mine", "... corral's own");
        registry_free(&reg);
        is_int(load(NULL, true, &reg, &e), 0, "only_own and no servers");
        is_int(reg.n, 0, "... an empty registry");
        registry_free(&reg);
        json_decref(own);
        approved = NULL;
}

/* The same name in every source: the first in precedence wins, and taking
 * each winner away in turn shows the whole order. */
static void test_precedence(void)
{
        static char *project[] = {"dup", NULL};
        approved = project;
        fresh_dirs();
        char dir[512], claude[4096];
        snprintf(dir, sizeof(dir), "%s/.config", home);
        static const struct {
                int base; /* 0 cwd, 1 home, 2 ~/.config */
                const char *rel, *key;
        } files[] = {
            /* The person's files, then a project's: a project's file can
             * never take the name of one of theirs. */
            {1, ".claude.json", NULL}, /* project scope, then user scope */
            {1, ".claude.json", NULL},
            {1, ".cursor/mcp.json", "mcpServers"},
            {2, "Code/User/mcp.json", "servers"},
            {2, "Claude/claude_desktop_config.json", "mcpServers"},
            {2, "mcp/servers/a.json", "mcpServers"},
            {2, "mcp/servers/b.json", "servers"},
            {2, "mcp/servers/dup.json", NULL},
            {0, ".mcp.json", "mcpServers"},
            {0, ".vscode/mcp.json", "servers"},
            {0, ".cursor/mcp.json", "mcpServers"},
        };
        const char *bases[] = {cwd, home, dir};
        for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
                char text[512];
                if (i == 0 || i == 1)
                        continue;
                if (files[i].key)
                        snprintf(text, sizeof(text), "{\"%s\": {\"dup\": {\"command\": \"c%zu\"}}}",
                                 files[i].key, i);
                else
                        snprintf(text, sizeof(text), "{\"command\": \"c%zu\"}", i);
                put(bases[files[i].base], files[i].rel, text);
        }
        snprintf(claude, sizeof(claude),
                 "{\"projects\": {\"%s\": {\"mcpServers\": {\"dup\": {\"command\": \"c0\"}}}}, "
                 "\"mcpServers\": {\"dup\": {\"command\": \"c1\"}}}",
                 cwd);
        put(home, ".claude.json", claude);

        struct err e = {0};
        struct registry reg;
        json_t *own = parse("{\"dup\": {\"command\": \"own\"}}");
        is_int(load(own, false, &reg, &e), 0, "load with own and every host file");
        is_int(reg.n, 1, "... one 'dup'");
        is_str(reg.n ? reg.v[0].command : NULL, "own", "corral's own config wins");
        registry_free(&reg);
        json_decref(own);

        for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
                char want[16];
                snprintf(want, sizeof(want), "c%zu", i);
                is_int(load(NULL, false, &reg, &e), 0, "load, round %zu", i);
                const struct upstream_spec *s = registry_find(&reg, "dup");
                is_str(s ? s->command : NULL, want, "%s%s wins next", files[i].rel,
                       i == 0   ? " (project scope)"
                       : i == 1 ? " (user scope)"
                                : "");
                registry_free(&reg);
                if (i > 1) {
                        drop(bases[files[i].base], files[i].rel);
                } else if (i == 0) {
                        put(home, ".claude.json",
                            "{\"mcpServers\": {\"dup\": {\"command\": \"c1\"}}}");
                } else {
                        drop(home, ".claude.json");
                }
        }
        is_int(load(NULL, false, &reg, &e), 0, "load with every file gone");
        is_int(reg.n, 0, "... nothing left");
        registry_free(&reg);
        approved = NULL;
}

static const struct registry_skip *skipped(const struct registry *r, const char *name)
{
        return registry_find_skipped(r, name);
}

/* A project's files come with a clone: their servers are offered only as
 * the person approved them, outside the project, and never with the
 * person's environment in them. */
static void test_project(void)
{
        fresh_dirs();
        struct err e = {0};
        struct registry reg;
        char text[4096];
        put(cwd, ".mcp.json",
            "{\"mcpServers\": {\"a\": {\"command\": \"a\"}, \"b\": {\"command\": \"b\"}, "
            "\"web\": {\"type\": \"http\", \"url\": \"http://127.0.0.1:9/\"}}}");
        put(cwd, ".vscode/mcp.json", "{\"servers\": {\"v\": {\"command\": \"v\"}}}");
        put(cwd, ".cursor/mcp.json", "{\"mcpServers\": {\"cu\": {\"command\": \"cu\"}}}");

        is_int(load(NULL, false, &reg, &e), 0, "a project's files, nothing approved");
        is_int(reg.n, 0, "... no server is offered");
        is_int(reg.n_skipped, 5, "... each is listed as skipped");
        const struct registry_skip *k = skipped(&reg, "a");
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/.mcp.json", cwd);
        is_str(k ? k->source : NULL, path, "... with its file");
        like(k ? k->reason : NULL, "not approved", "... and why");
        like(k ? k->reason : NULL, "enabledMcpjsonServers", "... and where Claude Code approves");
        like(k ? k->reason : NULL, "project_servers", "... or corral's config");
        is_int(k ? (int)k->transport : -1, UP_STDIO, "... a stdio entry");
        k = skipped(&reg, "web");
        is_int(k ? (int)k->transport : -1, UP_HTTP, "an HTTP entry is listed as such");
        k = skipped(&reg, "v");
        like(k ? k->reason : NULL, "VS Code records no approvals", ".vscode/mcp.json: VS Code");
        k = skipped(&reg, "cu");
        like(k ? k->reason : NULL, "Cursor records no approvals", ".cursor/mcp.json: Cursor");
        registry_free(&reg);

        /* The project cannot approve itself, in any of Claude Code's
         * project files. */
        const char *self_approval = "{\"enabledMcpjsonServers\": [\"a\", \"v\"], "
                                    "\"enableAllProjectMcpServers\": true}";
        put(cwd, ".claude/settings.json", self_approval);
        put(cwd, ".claude/settings.local.json", self_approval);
        is_int(load(NULL, false, &reg, &e), 0, "the project's .claude/settings*.json approve");
        is_int(reg.n, 0, "... nothing: a file cannot vouch for itself");
        registry_free(&reg);

        /* The person's own Claude Code settings do. */
        put(home, ".claude/settings.json", "{\"enabledMcpjsonServers\": [\"a\", \"v\", 7]}");
        snprintf(text, sizeof(text),
                 "{\"projects\": {\"%s\": {\"enabledMcpjsonServers\": [\"b\"]}, "
                 "\"/elsewhere\": {\"enabledMcpjsonServers\": [\"web\"]}}}",
                 cwd);
        put(home, ".claude.json", text);
        is_int(load(NULL, false, &reg, &e), 0,
               "approved in ~/.claude/settings.json and ~/.claude.json");
        const struct upstream_spec *s = registry_find(&reg, "a");
        ok(s && !s->error && s->project, "a: approved by ~/.claude/settings.json, a project's");
        ok(registry_find(&reg, "b"), "b: approved in ~/.claude.json for this project");
        ok(!registry_find(&reg, "web") && skipped(&reg, "web"),
           "web: approved for another project only, skipped");
        ok(!registry_find(&reg, "v") && skipped(&reg, "v"),
           "v: Claude Code's approval does not reach VS Code's file");
        is_int(reg.n, 2, "... two offered");
        registry_free(&reg);

        /* enableAllProjectMcpServers, from the person; a refusal anywhere
         * wins, the project's own files too. */
        put(home, ".claude/settings.json", "{\"enableAllProjectMcpServers\": true}");
        put(cwd, ".claude/settings.json", "{\"disabledMcpjsonServers\": [\"a\"]}");
        is_int(load(NULL, false, &reg, &e), 0, "enableAllProjectMcpServers, a disabled");
        ok(registry_find(&reg, "b") && registry_find(&reg, "web"), "... every .mcp.json server");
        ok(!registry_find(&reg, "v") && !registry_find(&reg, "cu"), "... of .mcp.json only");
        k = skipped(&reg, "a");
        snprintf(path, sizeof(path), "%s/.claude/settings.json", cwd);
        like(k ? k->reason : NULL, "disabledMcpjsonServers", "a is skipped: disabled");
        like(k ? k->reason : NULL, path, "... naming the file that disabled it");
        registry_free(&reg);
        drop(cwd, ".claude/settings.json");
        drop(cwd, ".claude/settings.local.json");
        drop(home, ".claude/settings.json");
        drop(home, ".claude.json");

        /* corral's own project_servers approves any host's, by name. */
        static char *mine[] = {"v", "cu", NULL};
        approved = mine;
        is_int(load(NULL, false, &reg, &e), 0, "project_servers names v and cu");
        ok(registry_find(&reg, "v") && registry_find(&reg, "cu"), "... both are offered");
        ok(skipped(&reg, "a") && !registry_find(&reg, "a"), "... the others are not");
        registry_free(&reg);

        /* Approved, but no ${VAR} from the environment: the file chose
         * where the value goes. */
        setenv("CRT_PROJECT_SECRET", "hunter2-project", 1);
        put(cwd, ".vscode/mcp.json",
            "{\"servers\": {\"v\": {\"type\": \"http\", \"url\": \"http://127.0.0.1:9/\", "
            "\"headers\": {\"A\": \"${CRT_PROJECT_SECRET}\"}}, "
            "\"cu\": {\"command\": \"x\", \"args\": [\"${CRT_PROJECT_SECRET:-none}\"]}}}");
        put(cwd, ".cursor/mcp.json",
            "{\"mcpServers\": {\"w\": {\"command\": \"${workspaceFolder}/run\", "
            "\"args\": [\"${userHome}\", \"${1}\"], \"env\": {\"E\": \"${env:HOME}\"}}, "
            "\"p\": {\"command\": \"${workspaceFolder}/run\"}}}");
        static char *vars[] = {"v", "cu", "w", "p", NULL};
        approved = vars;
        is_int(load(NULL, false, &reg, &e), 0, "approved entries with ${VAR}");
        s = registry_find(&reg, "v");
        ok(s && s->error && !s->url && !s->headers, "a header's ${VAR}: kept with an error");
        like(s ? s->error : NULL, "not expanded from a project's files", "... saying why");
        ok(s && s->error && !strstr(s->error, "hunter2"), "... without the value");
        ok(s && !has_secret(s, "hunter2-project"), "... which it never read");
        s = registry_find(&reg, "cu");
        ok(s && s->error && !s->argv, "${VAR:-default}: the same");
        s = registry_find(&reg, "w");
        like(s ? s->error : NULL, "${HOME}", "${env:HOME}: the same");
        s = registry_find(&reg, "p");
        snprintf(path, sizeof(path), "%s/run", cwd);
        is_str(s && !s->error ? s->command : NULL, path, "${workspaceFolder} is a path: expanded");
        registry_free(&reg);
        unsetenv("CRT_PROJECT_SECRET");
        approved = NULL;

        /* A project's entry does not hide the person's of that name. */
        put(cwd, ".mcp.json", "{\"mcpServers\": {\"dup\": {\"command\": \"project\"}}}");
        put(home, ".cursor/mcp.json", "{\"mcpServers\": {\"dup\": {\"command\": \"mine\"}}}");
        is_int(load(NULL, false, &reg, &e), 0, "dup in .mcp.json (skipped) and ~/.cursor");
        s = registry_find(&reg, "dup");
        is_str(s ? s->command : NULL, "mine", "... the person's runs");
        ok(s && !s->project, "... as the person's");
        ok(skipped(&reg, "dup") != NULL, "... and the project's is listed as skipped");
        registry_free(&reg);
        /* Approved by name, it still cannot take the person's place. */
        static char *dup_ok[] = {"dup", NULL};
        approved = dup_ok;
        is_int(load(NULL, false, &reg, &e), 0, "dup approved by name in project_servers");
        s = registry_find(&reg, "dup");
        is_str(s ? s->command : NULL, "mine", "... the person's still runs");
        like(skipped(&reg, "dup") ? skipped(&reg, "dup")->reason : NULL, "cannot replace it",
             "... and the project's is skipped, saying why");
        registry_free(&reg);
        approved = NULL;

        /* A project in the home directory: ~/.cursor/mcp.json and
         * ~/.claude/settings.json are the person's own. */
        struct registry_sources src = {.home = home, .cwd = home};
        put(home, ".mcp.json", "{\"mcpServers\": {\"h\": {\"command\": \"h\"}}}");
        put(home, ".claude/settings.json", "{\"enabledMcpjsonServers\": [\"h\"]}");
        is_int(registry_load(&src, &reg, &e), 0, "cwd is the home directory");
        s = registry_find(&reg, "dup");
        ok(s && !s->project, "... ~/.cursor/mcp.json is the person's, not skipped");
        ok(registry_find(&reg, "h") != NULL, "... ~/.claude/settings.json approves ~/.mcp.json");
        is_int(reg.n_skipped, 0, "... nothing skipped");
        registry_free(&reg);
}

static void write_exe(const char *path)
{
        FILE *f = fopen(path, "w");
        fputs("#!/bin/sh\n", f);
        fclose(f);
        chmod(path, 0755);
}

static void test_self(void)
{
        fresh_dirs();
        char bin[256], self[512], link[512], other[512];
        snprintf(bin, sizeof(bin), "%s/bin", root);
        mkdir(bin, 0700);
        snprintf(self, sizeof(self), "%s/corral-build", bin);
        snprintf(link, sizeof(link), "%s/cr", bin);
        snprintf(other, sizeof(other), "%s/other-server", bin);
        write_exe(self);
        write_exe(other);
        if (symlink(self, link) < 0)
                perror("symlink");
        const char *old_path = getenv("PATH");
        char *saved = old_path ? strdup(old_path) : NULL;
        setenv("PATH", bin, 1);

        char mcp[4096];
        snprintf(mcp, sizeof(mcp),
                 "{\"mcpServers\": {"
                 "\"corral\": {\"command\": \"python3\"},"
                 "\"by-base\": {\"command\": \"/opt/x/bin/corral\", \"args\": [\"serve\"]},"
                 "\"by-link\": {\"command\": \"%s\"},"
                 "\"by-path\": {\"command\": \"corral-build\"},"
                 "\"by-relative\": {\"command\": \"./bin/corral-build\", \"cwd\": \"%s\"},"
                 "\"not-self\": {\"command\": \"other-server\"},"
                 "\"not-found\": {\"command\": \"no-such-program\"},"
                 "\"claimed\": {\"command\": \"ok-server\"}"
                 "}}",
                 link, root);
        put(home, ".claude.json", mcp);
        /* A name whose first definition is corral stays taken. */
        json_t *own = parse("{\"claimed\": {\"command\": \"corral\"}}");
        struct registry_sources src = {.home = home, .cwd = cwd, .own = own, .self_exe = self};
        struct err e = {0};
        struct registry reg = {0};
        is_int(registry_load(&src, &reg, &e), 0, "load with self_exe");
        ok(!registry_find(&reg, "corral"), "a server named corral is never listed");
        ok(!registry_find(&reg, "by-base"), "nor a command named corral");
        ok(!registry_find(&reg, "by-link"), "nor a path that resolves to corral");
        ok(!registry_find(&reg, "by-path"), "nor a bare name PATH resolves to corral");
        ok(!registry_find(&reg, "by-relative"), "nor a relative path from the entry's cwd");
        ok(!registry_find(&reg, "claimed"),
           "a name that was corral in own config is not taken by a later file");
        ok(registry_find(&reg, "not-self") != NULL, "another program in PATH is listed");
        ok(registry_find(&reg, "not-found") != NULL, "a program not found is listed");
        is_int(reg.n, 2, "... and nothing else");
        registry_free(&reg);
        json_decref(own);
        if (saved)
                setenv("PATH", saved, 1);
        free(saved);
}

static void test_host_errors(void)
{
        fresh_dirs();
        unsetenv("CRT_NOPE");
        put(home, ".claude.json",
            "{\"mcpServers\": {"
            "\"good\": {\"command\": \"a\"},"
            "\"undef\": {\"command\": \"a\", \"args\": [\"--x=${CRT_NOPE}\"]},"
            "\"input\": {\"command\": \"a\", \"env\": {\"K\": \"${input:key}\"}},"
            "\"legacy\": {\"type\": \"sse\", \"url\": \"http://h/sse\"},"
            "\"bad-args\": {\"command\": \"a\", \"args\": {}},"
            "\"not-object\": 42,"
            "\"has space\": {\"command\": \"a\"},"
            "\"off\": {\"command\": \"a\", \"disabled\": true}"
            "}}");
        struct err e = {0};
        struct registry reg;
        char file[512], want[2048];
        snprintf(file, sizeof(file), "%s/.claude.json", home);
        is_int(load(NULL, false, &reg, &e), 0, "invalid host entries are not fatal");
        is_int(reg.n, 7, "all but the badly named one are listed");
        ok(!registry_find(&reg, "has space"), "an invalid name is skipped");
        const struct upstream_spec *s = registry_find(&reg, "good");
        ok(s && !s->error, "a good entry has no error");
        s = registry_find(&reg, "undef");
        snprintf(want, sizeof(want),
                 "environment variable CRT_NOPE is not set (used in args of server 'undef' in %s)",
                 file);
        is_str(s ? s->error : NULL, want, "an undefined variable: the exact reason");
        ok(s && !s->argv && !s->command, "... and nothing to launch");
        s = registry_find(&reg, "input");
        like(s ? s->error : NULL, "VS Code input variables are not supported",
             "${input:...}: the reason");
        like(s ? s->error : NULL, "used in env of server 'input'", "... and where");
        s = registry_find(&reg, "legacy");
        like(s ? s->error : NULL, "the SSE transport is not supported; use streamable HTTP",
             "sse is kept with its reason");
        is_int(s ? (int)s->transport : -1, UP_HTTP, "... as an HTTP entry");
        s = registry_find(&reg, "bad-args");
        snprintf(want, sizeof(want), "server 'bad-args' in %s: args must be an array of strings",
                 file);
        is_str(s ? s->error : NULL, want, "a wrong type: the file, the server and the key");
        s = registry_find(&reg, "not-object");
        like(s ? s->error : NULL, "must be an object", "an entry that is no object");
        s = registry_find(&reg, "off");
        ok(s && s->disabled && !s->error, "a disabled entry is listed as disabled");
        registry_free(&reg);
}

static void test_masking(void)
{
        fresh_dirs();
        unsetenv("CRT_NOPE");
        setenv("CRT_URL_TOKEN", "sekrit99", 1);
        put(home, ".claude.json",
            "{\"mcpServers\": {"
            "\"holder\": {\"command\": \"a\", \"env\": {\"API_KEY\": \"hunter22\", \"SHORT\": "
            "\"abc\"}},"
            "\"leaky\": {\"type\": \"http\", \"url\": \"ftp://user:hunter22@h/${CRT_URL_TOKEN}\"},"
            "\"own-env\": {\"command\": \"a\", \"env\": {\"T\": \"pa55word\"}, \"args\": "
            "[\"${CRT_NOPE}\"]},"
            "\"header\": {\"url\": \"ftp://k3y-value/\", \"headers\": {\"X-Key\": "
            "\"k3y-value\"}}"
            "}}");
        struct err e = {0};
        struct registry reg;
        is_int(load(NULL, false, &reg, &e), 0, "load");
        const struct upstream_spec *s = registry_find(&reg, "leaky");
        const char *err = s ? s->error : NULL;
        like(err, "url must be an http:// or https:// URL", "a bad url is reported");
        like(err, "ftp://user:***@h/***",
             "... with another entry's env value and a variable masked");
        ok(err && !strstr(err, "hunter22") && !strstr(err, "sekrit99"), "... neither secret shows");
        s = registry_find(&reg, "header");
        like(s ? s->error : NULL, "not \"ftp://***/\"",
             "a header value is masked in its own entry's error");
        ok(s && has_secret(s, "k3y-value"), "... which are secrets");

        _cleanup_free_ char *m =
            registry_mask(&reg, "key=hunter22 url=sekrit99 pw=pa55word abc", 0);
        is_str(m, "key=*** url=*** pw=*** abc", "registry_mask hides every secret, not short ones");
        _cleanup_free_ char *plain = registry_mask(&reg, "nothing to hide", 0);
        is_str(plain, "nothing to hide", "text with no secret is unchanged");
        _cleanup_free_ char *empty = registry_mask(&reg, "", 0);
        is_str(empty, "", "empty text");
        registry_free(&reg);

        /* The longest secret first: one that contains another is hidden
         * whole, not as "***" plus its tail. */
        json_t *own = parse("{\"a\": {\"command\": \"a\", \"env\": {\"S\": \"abcd\", \"L\": "
                            "\"abcdefgh\"}}, \"b\": {\"command\": \"b\", \"env\": {\"M\": "
                            "\"xabcdefghx\"}}}");
        is_int(load(own, true, &reg, &e), 0, "load nested secrets");
        _cleanup_free_ char *n1 = registry_mask(&reg, "[abcdefgh] [abcd] [xabcdefghx] [abc]", 0);
        is_str(n1, "[***] [***] [***] [abc]", "longest first, across entries");
        registry_free(&reg);
        json_decref(own);

        struct registry none = {0};
        _cleanup_free_ char *n2 = registry_mask(&none, "hunter22", 0);
        is_str(n2, "hunter22", "an empty registry masks nothing");
}

/* ---- masking before cutting (upstream/mask.h) */

static char *masked(struct mask *m, const char *text, size_t max, unsigned flags)
{
        return mask_text(m, text, strlen(text), max, flags);
}

/* Whether `s` holds `min` or more bytes in a row of `secret` anywhere. */
static bool shows_part(const char *s, const char *secret, size_t min)
{
        size_t n = strlen(secret);
        for (size_t i = 0; i + min <= n; i++) {
                char part[256];
                snprintf(part, sizeof(part), "%.*s", (int)min, secret + i);
                if (strstr(s, part))
                        return true;
        }
        return false;
}

/* The length of the longest end of `s` that starts `secret`. */
static size_t ends_with_start(const char *s, const char *secret)
{
        size_t n = strlen(s), best = 0;
        for (size_t k = 1; k <= n && k <= strlen(secret); k++)
                if (strncmp(s + n - k, secret, k) == 0)
                        best = k;
        return best;
}

static void test_mask_forms(void)
{
        struct mask *m = mask_new();
        ok(m && mask_add(m, "abc", 3) == 0 && mask_forms(m) == 0,
           "a value under 4 bytes is no secret");
        ok(mask_add(m, "s3cr3t-T0ken", 12) == 0 && mask_forms(m) == 1,
           "a plain token is one form (it reads the same escaped)");
        ok(mask_add(m, "s3cr3t-T0ken", 12) == 0 && mask_forms(m) == 1, "... added once");
        _cleanup_free_ char *a = masked(m, "id s3cr3t-T0ken, again S3CR3T-t0KEN.", 0, 0);
        is_str(a, "id ***, again ***.", "found in any ASCII case");

        /* As JSON (jansson, JavaScript; PHP with \/; Python with \uXXXX)
         * and a URL would write it. */
        const char *odd = "ab\"cd/ef\\gh\tp\xc3\xa4ss";
        ok(mask_add(m, odd, strlen(odd)) == 0, "a value JSON escapes");
        const char *forms[] = {
            "x ab\"cd/ef\\gh\tp\xc3\xa4ss y",        "x ab\\\"cd/ef\\\\gh\\tp\xc3\xa4ss y",
            "x ab\\\"cd\\/ef\\\\gh\\tp\xc3\xa4ss y", "x ab\\\"cd/ef\\\\gh\\tp\\u00e4ss y",
            "x ab\\\"cd\\/ef\\\\gh\\tp\\u00E4ss y",  "x ab%22cd%2Fef%5Cgh%09p%C3%A4ss y",
            "x AB%22CD%2fEF%5cGH%09P%c3%a4SS y",
        };
        for (size_t i = 0; i < ARRAY_SIZE(forms); i++) {
                _cleanup_free_ char *f = masked(m, forms[i], 0, 0);
                is_str(f, "x *** y", "form %zu: %s", i, forms[i]);
        }
        const char *astral = "k\xf0\x9f\x94\x91y-1234";
        mask_add(m, astral, strlen(astral));
        _cleanup_free_ char *sp = masked(m, "[k\\ud83d\\udd11y-1234]", 0, 0);
        is_str(sp, "[***]", "a character past U+FFFF as its surrogate pair");
        mask_free(m);

        /* Overlapping, nested and adjacent secrets: one mark, nothing of
         * either left over. */
        m = mask_new();
        mask_add(m, "abcdefgh", 8);
        mask_add(m, "efghijkl", 8);
        mask_add(m, "cdef", 4);
        _cleanup_free_ char *o1 = masked(m, "[abcdefghijkl] [xxcdefxx] [abcdefghabcdefgh]", 0, 0);
        is_str(o1, "[***] [xx***xx] [***]", "overlapping, nested and adjacent secrets");
        _cleanup_free_ char *o2 = masked(m, "[efghabcd]", 0, 0);
        is_str(o2, "[efghabcd]", "text that merely shares letters stays");
        mask_free(m);

        _cleanup_free_ char *none = mask_text(NULL, "hello world", 11, 5, 0);
        is_str(none, "hello", "no secrets: only the cut");

        /* Parts of a secret that text may hold alone. */
        m = mask_new();
        const char *bearer = "Bearer sk-live-abc123";
        mask_add(m, bearer, strlen(bearer));
        _cleanup_free_ char *b1 = masked(m, "401: invalid api key sk-live-abc123", 0, 0);
        is_str(b1, "401: invalid api key ***", "the credentials of \"Bearer X\" alone");
        _cleanup_free_ char *b2 = masked(m, "Bearer is a scheme", 0, 0);
        is_str(b2, "Bearer is a scheme", "...not the scheme's name");
        const char *basic = "Basic dXNlcjpodW50ZXIyMg=="; /* user:hunter22 */
        mask_add(m, basic, strlen(basic));
        _cleanup_free_ char *b3 =
            masked(m, "[dXNlcjpodW50ZXIyMg==] [user:hunter22] [pw hunter22]", 0, 0);
        is_str(b3, "[***] [***] [pw ***]", "Basic: the base64, user:password and the password");
        const char *pem = "-----BEGIN KEY-----\nMIIEabcdefgh\r\nQWERTYUIOP12\n-----END KEY-----";
        mask_add(m, pem, strlen(pem));
        _cleanup_free_ char *b4 = masked(m, "read: MIIEabcdefgh and QWERTYUIOP12", 0, 0);
        is_str(b4, "read: *** and ***", "each line of a secret of several lines");
        const char *html = "a<b>&c-123";
        mask_add(m, html, strlen(html));
        _cleanup_free_ char *b5 = masked(m, "{\"k\":\"a\\u003cb\\u003e\\u0026c-123\"}", 0, 0);
        is_str(b5, "{\"k\":\"***\"}", "as Go's encoding/json writes it (<, >, & escaped)");
        const char *words = "two words (here)!";
        mask_add(m, words, strlen(words));
        _cleanup_free_ char *b6 =
            masked(m, "q=two+words+%28here%29%21&r=two%20words%20(here)!", 0, 0);
        is_str(b6, "q=***&r=***", "as an HTML form and encodeURIComponent write it");
        mask_free(m);

        char one[1] = {'x'};
        is_int((long long)mask_into(NULL, "abc", 3, 0, one, 1), 0,
               "mask_into with room for the NUL alone");
        is_int(one[0], 0, "...writes only the NUL");
}

/* An answer that echoes a secret: every string value masked; keys, the
 * structure, kept (a key "text" must stay "text" whatever a setting says). */
static void test_mask_json(void)
{
        struct mask *m = mask_new();
        json_t *in =
            parse("{\"content\": [{\"type\": \"text\", \"text\": \"TOKEN=s3cr3t-value!\"}],"
                  " \"structuredContent\": {\"s3cr3t-value\": [1, true, null, "
                  "\"a S3CR3T-VALUE b\"]}, \"isError\": false}");
        json_t *same = mask_json(m, in);
        ok(same == in, "no secret: the same JSON, not a copy");
        json_decref(same);
        mask_add(m, "s3cr3t-value", 12);
        json_t *out = mask_json(m, in);
        char *text = json_dumps(out, JSON_SORT_KEYS | JSON_COMPACT);
        is_str(text,
               "{\"content\":[{\"text\":\"TOKEN=***!\",\"type\":\"text\"}],\"isError\":false,"
               "\"structuredContent\":{\"s3cr3t-value\":[1,true,null,\"a *** b\"]}}",
               "every string value masked, keys and the rest as they were");
        /* Short settings are masked in errors, not in answers. */
        struct mask *a = mask_new();
        char *values[] = {"json", "text", "s3cr3t-value", NULL};
        is_int(mask_add_strv_min(a, values, MASK_ANSWER_MIN), 0, "mask_add_strv_min");
        json_t *short_ones = parse("[\"plain text as json\", \"s3cr3t-value\"]");
        json_t *o2 = mask_json(a, short_ones);
        char *t2 = json_dumps(o2, JSON_COMPACT);
        is_str(t2, "[\"plain text as json\",\"***\"]",
               "values under MASK_ANSWER_MIN are not masked in an answer; longer ones are");
        free(t2);
        json_decref(o2);
        json_decref(short_ones);
        mask_free(a);
        free(text);
        json_decref(out);
        json_decref(in);
        mask_free(m);
}

static void test_mask_ends(void)
{
        struct mask *m = mask_new();
        mask_add(m, "s3cr3t-T0ken", 12);
        /* The end of a text as it came: a start of 4 bytes or more goes. */
        _cleanup_free_ char *a = masked(m, "the key is s3cr", 0, 0);
        is_str(a, "the key is ***", "an end of 4 bytes that starts a secret is masked");
        _cleanup_free_ char *b = masked(m, "status s3c", 0, 0);
        is_str(b, "status s3c", "... one of 3 is not (its sender did not cut it)");
        _cleanup_free_ char *c = masked(m, "status s3c", 0, MASK_CUT_BEFORE);
        is_str(c, "status ***", "... unless the text may have been cut before");
        _cleanup_free_ char *d = masked(m, "[s3cr3t] and on", 0, 0);
        is_str(d, "[s3cr3t] and on", "a start of a secret inside the text stays");
        /* Corral's own cut: a start of any length goes. */
        _cleanup_free_ char *e = masked(m, "0123456789 xs3cr3t-T0", 12, 0);
        is_str(e, "0123456789 x", "no start of a secret at this cut: a plain cut");
        _cleanup_free_ char *f = masked(m, "0123456789 s3cr3t-X", 14, 0);
        is_str(f, "0123456789 ***", "a start of 3 bytes at the cut is masked");
        _cleanup_free_ char *g = masked(m, "0123456789 s3cr3t-X", 13, 0);
        is_str(g, "0123456789***", "... the mark within the limit, the cut made earlier");
        /* What precedes the mark must not start a secret either. */
        mask_free(m);
        m = mask_new();
        mask_add(m, "abcdWXYZ", 8);
        mask_add(m, "cdefghij", 8);
        _cleanup_free_ char *h = masked(m, "--abcdefgh-----", 9, 0);
        is_str(h, "--***", "a start that ends where another starts goes too");
        mask_free(m);

        /* A cut inside a UTF-8 sequence is never made. */
        m = mask_new();
        mask_add(m, "p\xc3\xa4sswort", 9);
        _cleanup_free_ char *u = masked(m, "\xc3\xa4\xc3\xa4\xc3\xa4 p\xc3\xa4", 9, 0);
        ok(u && utf8_text(u, strlen(u)) && strlen(u) <= 9, "the cut keeps UTF-8 whole: %s",
           u ? u : "(null)");
        ok(u && !strstr(u, "p\xc3"), "... and the start of the secret went");
        mask_free(m);
}

/* The attack: code pads what it sends so that a cut of an echo of it
 * lands anywhere in a secret. At every pad and every limit, nothing of the
 * secret shows, and the result is the masked text cut, with a mark where a
 * secret's start was at the cut. */
static void test_mask_every_cut(void)
{
        const char *token = "Zq8-Vw2.Kp4-Jx9.Rm4";
        const char *header = "Bearer Zq8-Vw2.Kp4-Jx9.Rm4";
        struct mask *m = mask_new();
        mask_add(m, header, strlen(header));
        mask_add(m, token, strlen(token));
        int bad_len = 0, bad_part = 0, bad_end = 0, bad_shape = 0, runs = 0;
        for (int pad = 0; pad < 64; pad++) {
                char text[512];
                snprintf(text, sizeof(text),
                         "{\"args\":\"%.*s\",\"headers\":{\"authorization\":\"%s\",\"x\":"
                         "\"%s\"}} tail",
                         pad, "................................................................",
                         header, token);
                _cleanup_free_ char *whole = masked(m, text, 0, 0);
                size_t n = strlen(text);
                for (size_t max = 1; max <= n + 1; max++) {
                        _cleanup_free_ char *o = masked(m, text, max, 0);
                        runs++;
                        if (!o || strlen(o) > max) {
                                bad_len++;
                                continue;
                        }
                        if (shows_part(o, token, 4) || shows_part(o, "Bearer Z", 4))
                                bad_part++;
                        if (ends_with_start(o, header) || ends_with_start(o, token))
                                bad_end++;
                        /* A prefix of the masked whole, or one and a mark. */
                        size_t ol = strlen(o);
                        bool prefix = strncmp(o, whole, ol) == 0;
                        bool marked = ol >= 3 && strcmp(o + ol - 3, "***") == 0 &&
                                      strncmp(o, whole, ol - 3) == 0;
                        if (!prefix && !marked)
                                bad_shape++;
                }
        }
        is_int(bad_len, 0, "%d cuts: none longer than its limit", runs);
        is_int(bad_part, 0, "... none shows 4 bytes in a row of the secret");
        is_int(bad_end, 0, "... none ends with the start of a secret");
        is_int(bad_shape, 0, "... each is the masked text cut (and perhaps a mark)");
        mask_free(m);
}

/* A URL with a ${VAR} in it, quoted by an entry's error: the variable's
 * value is masked before the message is cut, wherever the cut falls. */
static void test_error_cuts(void)
{
        fresh_dirs();
        const char *token = "Zq8-Vw2.Kp4-Jx9.Rm4";
        setenv("CRT_CUT_TOKEN", token, 1);
        int shown_host = 0, shown_own = 0, tried = 0;
        for (int pad = 150; pad < 260; pad++) {
                char text[2048], pads[300];
                memset(pads, 'p', (size_t)pad);
                pads[pad] = '\0';
                snprintf(text, sizeof(text),
                         "{\"mcpServers\": {\"cut\": {\"type\": \"http\", \"url\": "
                         "\"ftp://h/%s${CRT_CUT_TOKEN}/mcp\"}}}",
                         pads);
                put(home, ".claude.json", text);
                struct err e = {0};
                struct registry reg;
                tried++;
                if (load(NULL, false, &reg, &e) == 0) {
                        const struct upstream_spec *s = registry_find(&reg, "cut");
                        if (!s || !s->error || shows_part(s->error, token, 4)) {
                                if (!shown_host)
                                        diag("pad %d: %s", pad, s && s->error ? s->error : "?");
                                shown_host++;
                        }
                }
                registry_free(&reg);
                /* corral's own config: the same error stops start-up. */
                snprintf(text, sizeof(text),
                         "{\"cut\": {\"type\": \"http\", \"url\": \"ftp://h/%s${CRT_CUT_TOKEN}\"}}",
                         pads);
                json_t *own = parse(text);
                e = (struct err){0};
                if (load(own, true, &reg, &e) == 0 || shows_part(e.msg, token, 4)) {
                        if (!shown_own)
                                diag("pad %d: %s", pad, e.msg);
                        shown_own++;
                }
                registry_free(&reg);
                json_decref(own);
        }
        drop(home, ".claude.json");
        is_int(shown_host, 0, "%d URLs: no entry's error shows 4 bytes of the variable", tried);
        is_int(shown_own, 0, "... nor does the error that stops start-up");
        unsetenv("CRT_CUT_TOKEN");
}

static void test_bounds(void)
{
        fresh_dirs();
        struct err e = {0};
        struct registry reg;

        /* 300 servers in one file: the registry stops at 256. */
        size_t cap = 1 << 20, len = 0;
        char *text = malloc(cap);
        len += (size_t)snprintf(text + len, cap - len, "{\"mcpServers\": {");
        for (int i = 0; i < 300; i++)
                len += (size_t)snprintf(text + len, cap - len, "%s\"s%03d\": {\"command\": \"a\"}",
                                        i ? "," : "", i);
        snprintf(text + len, cap - len, "}}");
        put(home, ".claude.json", text);
        put(home, ".cursor/mcp.json", "{\"mcpServers\": {\"late\": {\"command\": \"a\"}}}");
        is_int(load(NULL, false, &reg, &e), 0, "300 servers load");
        is_int(reg.n, 256, "... only 256 are kept");
        ok(registry_find(&reg, "s255") && !registry_find(&reg, "s256"), "... the first 256");
        ok(!registry_find(&reg, "late"), "... and no later file adds more");
        registry_free(&reg);

        /* A file past 64 MiB is skipped whole; the next source still counts. */
        memset(text, ' ', cap - 1);
        text[cap - 1] = '\0';
        FILE *f;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/.claude.json", home);
        f = fopen(path, "w");
        fputs("{\"mcpServers\": {\"huge\": {\"command\": \"a\"}}", f);
        for (int i = 0; i < 65; i++)
                fputs(text, f);
        fputs("}", f);
        fclose(f);
        is_int(load(NULL, false, &reg, &e), 0, "a file past 64 MiB is not fatal");
        ok(!registry_find(&reg, "huge"), "... it is skipped");
        ok(registry_find(&reg, "late") != NULL, "... the other files are read");
        registry_free(&reg);
        free(text);

        /* Not JSON, not an object, or not a file: skipped. */
        put(cwd, ".mcp.json", "{\"mcpServers\": {\"broken\": ");
        put(home, ".claude.json", "[1, 2]");
        snprintf(path, sizeof(path), "%s/.vscode/mcp.json", cwd);
        make_dirs_for(path);
        mkdir(path, 0700);
        put(cwd, ".cursor/mcp.json", "{\"mcpServers\": [\"not an object\"]}");
        is_int(load(NULL, false, &reg, &e), 0, "broken files are not fatal");
        is_int(reg.n, 1, "... only the good file's server is listed");
        ok(registry_find(&reg, "late") != NULL, "... which is 'late'");
        registry_free(&reg);
        rmdir(path);

        /* Duplicate keys in one object are refused, as jansson is told to. */
        put(home, ".claude.json",
            "{\"mcpServers\": {\"twice\": {\"command\": \"a\"}, \"twice\": {\"command\": \"b\"}}}");
        is_int(load(NULL, false, &reg, &e), 0, "a file with a duplicate key");
        ok(!registry_find(&reg, "twice"), "... is skipped");
        registry_free(&reg);

        /* Per-entry bounds. */
        text = malloc(200 << 10);
        len = (size_t)snprintf(text, 200 << 10,
                               "{\"mcpServers\": {\"many-args\": {\"command\": "
                               "\"a\", \"args\": [");
        for (int i = 0; i < 257; i++)
                len += (size_t)snprintf(text + len, (200 << 10) - len, "%s\"x\"", i ? "," : "");
        len += (size_t)snprintf(text + len, (200 << 10) - len,
                                "]}, \"ok-args\": {\"command\": \"a\", \"args\": [");
        for (int i = 0; i < 256; i++)
                len += (size_t)snprintf(text + len, (200 << 10) - len, "%s\"x\"", i ? "," : "");
        len += (size_t)snprintf(text + len, (200 << 10) - len,
                                "]}, \"many-env\": {\"command\": \"a\", \"env\": {");
        for (int i = 0; i < 257; i++)
                len += (size_t)snprintf(text + len, (200 << 10) - len, "%s\"E%d\": \"x\"",
                                        i ? "," : "", i);
        len += (size_t)snprintf(text + len, (200 << 10) - len,
                                "}}, \"long-arg\": {\"command\": \"a\", \"args\": [\"");
        memset(text + len, 'y', (64 << 10) + 1);
        len += (64 << 10) + 1;
        snprintf(text + len, (200 << 10) - len, "\"]}}}");
        put(home, ".claude.json", text);
        free(text);
        is_int(load(NULL, false, &reg, &e), 0, "entries past their bounds load");
        const struct upstream_spec *s = registry_find(&reg, "many-args");
        like(s ? s->error : NULL, "args has more than 256 entries", "257 args: an error");
        s = registry_find(&reg, "ok-args");
        ok(s && !s->error && strv_count(s->argv) == 257, "256 args are fine");
        s = registry_find(&reg, "many-env");
        like(s ? s->error : NULL, "env has more than 256 entries", "257 env entries: an error");
        s = registry_find(&reg, "long-arg");
        like(s ? s->error : NULL, "longer than 64 KiB", "an arg past 64 KiB: an error");
        registry_free(&reg);

        /* Bad names in a host file are skipped, good ones kept. */
        put(home, ".claude.json",
            "{\"mcpServers\": {\"has space\": {\"command\": \"a\"}, \"\": {\"command\": \"a\"}, "
            "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": "
            "{\"command\": \"a\"}, \"sl/ash\": {\"command\": \"a\"}, \"fine.name_1-2\": "
            "{\"command\": \"a\"}}}");
        drop(home, ".cursor/mcp.json");
        is_int(load(NULL, false, &reg, &e), 0, "bad names are not fatal in host files");
        is_int(reg.n, 1, "... only the valid name is listed");
        ok(registry_find(&reg, "fine.name_1-2") != NULL, "... fine.name_1-2");
        registry_free(&reg);
}

int main(void)
{
        /* Warnings about the broken files below are expected: keep the
         * output to TAP. */
        log_max_level = LOG_ERR;
        test_expand();
        test_own();
        test_own_invalid();
        test_sources();
        test_precedence();
        test_project();
        test_self();
        test_host_errors();
        test_masking();
        test_mask_forms();
        test_mask_json();
        test_mask_ends();
        test_mask_every_cut();
        test_error_cuts();
        test_bounds();
        if (root[0])
                nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        return done_testing();
}
