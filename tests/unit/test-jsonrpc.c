/* The JSON-RPC codec: classification, the error code for each kind of bad
 * input, id recovery, the exact bytes the encoder writes, id equality, and
 * the id scanner for lines too long to parse. */
#include "core/jsonrpc.h"

#include "tap.h"

#include <stdlib.h>
#include <string.h>

#define KIND_NONE        -1
#define LONG_STRING_TEST (64 * 1024)          /* jsonrpc.c's LONG_STRING */
#define S(lit)           lit, sizeof(lit) - 1 /* a literal with its exact length (NULs too) */

static const struct parse_case {
        const char *name;
        const char *in;
        size_t len;
        int rc;         /* 0 or the JSON-RPC error code */
        int kind;       /* enum jrpc_kind when rc == 0 */
        const char *id; /* compact JSON of the (recovered) id, or NULL */
        const char *method;
} parse_cases[] = {
    /* valid messages */
    {"request", S("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"), 0, JRPC_REQUEST, "1",
     "ping"},
    {"request, string id, object params",
     S("{\"jsonrpc\":\"2.0\",\"id\":\"a-1\",\"method\":\"tools/call\",\"params\":{}}"), 0,
     JRPC_REQUEST, "\"a-1\"", "tools/call"},
    {"request, real id, array params",
     S("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"m\",\"params\":[1]}"), 0, JRPC_REQUEST, "1.5",
     "m"},
    {"notification", S("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"), 0,
     JRPC_NOTIFICATION, NULL, "notifications/initialized"},
    {"result", S("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"x\":1}}"), 0, JRPC_RESULT, "7", NULL},
    {"result null", S("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":null}"), 0, JRPC_RESULT, "7", NULL},
    {"error", S("{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-1,\"message\":\"x\"}}"), 0,
     JRPC_ERROR, "7", NULL},
    {"error with null id",
     S("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}"), 0,
     JRPC_ERROR, NULL, NULL},
    {"surrounding whitespace and CR", S(" {\"jsonrpc\":\"2.0\",\"method\":\"m\"} \r"), 0,
     JRPC_NOTIFICATION, NULL, "m"},
    {"non-ASCII UTF-8 in strings", S("{\"jsonrpc\":\"2.0\",\"method\":\"caf\xc3\xa9\"}"), 0,
     JRPC_NOTIFICATION, NULL, "caf\xc3\xa9"},

    /* -32700: not JSON */
    {"empty line", S(""), JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"truncated object", S("{\"jsonrpc\":\"2.0\""), JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"not JSON", S("hello"), JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"trailing garbage", S("{\"jsonrpc\":\"2.0\",\"method\":\"m\"} x"), JRPC_PARSE_ERROR, KIND_NONE,
     NULL, NULL},
    {"two objects on one line", S("{\"jsonrpc\":\"2.0\",\"method\":\"m\"}{}"), JRPC_PARSE_ERROR,
     KIND_NONE, NULL, NULL},
    {"invalid UTF-8 byte", S("{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}"), JRPC_PARSE_ERROR,
     KIND_NONE, NULL, NULL},
    {"overlong UTF-8", S("{\"jsonrpc\":\"2.0\",\"method\":\"\xc0\xaf\"}"), JRPC_PARSE_ERROR,
     KIND_NONE, NULL, NULL},
    {"UTF-8 encoded surrogate", S("{\"jsonrpc\":\"2.0\",\"method\":\"\xed\xa0\x80\"}"),
     JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"truncated UTF-8 sequence", S("{\"jsonrpc\":\"2.0\",\"method\":\"\xe2\x82\"}"),
     JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"invalid UTF-8 in a key", S("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"\x80\":1}"),
     JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"lone surrogate escape", S("{\"jsonrpc\":\"2.0\",\"method\":\"\\ud800\"}"), JRPC_PARSE_ERROR,
     KIND_NONE, NULL, NULL},
    /* NUL is allowed in data (program output may hold it) but not in a
     * method name, where C string handling would cut it. */
    {"\\u0000 in the method", S("{\"jsonrpc\":\"2.0\",\"method\":\"a\\u0000b\"}"),
     JRPC_INVALID_REQUEST, KIND_NONE, NULL, NULL},
    {"\\u0000 in params",
     S("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"d\":\"\\u0000\"}}"), 0,
     JRPC_NOTIFICATION, NULL, "m"},
    {"raw NUL in a string", S("{\"jsonrpc\":\"2.0\",\"method\":\"a\0b\"}"), JRPC_PARSE_ERROR,
     KIND_NONE, NULL, NULL},
    {"raw NUL after the object", S("{\"jsonrpc\":\"2.0\",\"method\":\"m\"}\0"), JRPC_PARSE_ERROR,
     KIND_NONE, NULL, NULL},
    {"raw newline in a string", S("{\"jsonrpc\":\"2.0\",\"method\":\"a\nb\"}"), JRPC_PARSE_ERROR,
     KIND_NONE, NULL, NULL},
    {"duplicate key", S("{\"jsonrpc\":\"2.0\",\"jsonrpc\":\"2.0\",\"method\":\"m\"}"),
     JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"duplicate id", S("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"m\"}"),
     JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"duplicate key in params",
     S("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"a\":1,\"a\":2}}"),
     JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},
    {"integer id too big", S("{\"jsonrpc\":\"2.0\",\"id\":99999999999999999999,\"method\":\"m\"}"),
     JRPC_PARSE_ERROR, KIND_NONE, NULL, NULL},

    /* -32600: JSON, but not a JSON-RPC 2.0 message */
    {"empty batch", S("[]"), JRPC_INVALID_REQUEST, KIND_NONE, NULL, NULL},
    {"batch", S("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}]"), JRPC_INVALID_REQUEST,
     KIND_NONE, NULL, NULL},
    {"empty object", S("{}"), JRPC_INVALID_REQUEST, KIND_NONE, NULL, NULL},
    {"missing jsonrpc", S("{\"id\":1,\"method\":\"m\"}"), JRPC_INVALID_REQUEST, KIND_NONE, "1",
     NULL},
    {"wrong version", S("{\"jsonrpc\":\"1.0\",\"id\":\"x\",\"method\":\"m\"}"),
     JRPC_INVALID_REQUEST, KIND_NONE, "\"x\"", NULL},
    {"version as a number", S("{\"jsonrpc\":2.0,\"id\":3,\"method\":\"m\"}"), JRPC_INVALID_REQUEST,
     KIND_NONE, "3", NULL},
    {"id is an object", S("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"m\"}"), JRPC_INVALID_REQUEST,
     KIND_NONE, NULL, NULL},
    {"id is a bool", S("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"m\"}"), JRPC_INVALID_REQUEST,
     KIND_NONE, NULL, NULL},
    {"id is an array", S("{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"m\"}"), JRPC_INVALID_REQUEST,
     KIND_NONE, NULL, NULL},
    {"request id is null", S("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"m\"}"),
     JRPC_INVALID_REQUEST, KIND_NONE, NULL, NULL},
    {"params is a string", S("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":\"x\"}"),
     JRPC_INVALID_REQUEST, KIND_NONE, "1", NULL},
    {"params is a number", S("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"m\",\"params\":5}"),
     JRPC_INVALID_REQUEST, KIND_NONE, "2", NULL},
    {"params is null", S("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":null}"),
     JRPC_INVALID_REQUEST, KIND_NONE, NULL, NULL},
    {"empty method", S("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}"), JRPC_INVALID_REQUEST,
     KIND_NONE, "1", NULL},
    {"method is a number", S("{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":5}"),
     JRPC_INVALID_REQUEST, KIND_NONE, "\"q\"", NULL},
    {"no method, result or error", S("{\"jsonrpc\":\"2.0\",\"id\":1}"), JRPC_INVALID_REQUEST,
     KIND_NONE, "1", NULL},
    {"response without id", S("{\"jsonrpc\":\"2.0\",\"result\":1}"), JRPC_INVALID_REQUEST,
     KIND_NONE, NULL, NULL},
    {"response with a bool id", S("{\"jsonrpc\":\"2.0\",\"id\":false,\"result\":1}"),
     JRPC_INVALID_REQUEST, KIND_NONE, NULL, NULL},
    {"both result and error",
     S("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{\"code\":1}}"), JRPC_INVALID_REQUEST,
     KIND_NONE, "1", NULL},
    {"error is a string", S("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"x\"}"), JRPC_INVALID_REQUEST,
     KIND_NONE, "1", NULL},
    {"error code not an integer", S("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"x\"}}"),
     JRPC_INVALID_REQUEST, KIND_NONE, "1", NULL},
};

static char *dump_any(const json_t *j)
{
        return j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
}

static void test_parse_table(void)
{
        for (size_t i = 0; i < ARRAY_SIZE(parse_cases); i++) {
                const struct parse_case *tc = &parse_cases[i];
                struct jrpc_msg m = {0};
                json_t *id = (json_t *)1; /* must be overwritten */
                struct err e = {0};
                int rc = jrpc_parse(tc->in, tc->len, &m, &id, &e);
                is_int(rc, tc->rc, "%s: code", tc->name);
                if (rc == 0) {
                        is_int(m.kind, tc->kind, "%s: kind", tc->name);
                        char *got = dump_any(m.id);
                        if (json_is_null(m.id)) {
                                free(got);
                                got = NULL;
                        }
                        is_str(got, tc->id, "%s: id", tc->name);
                        free(got);
                        is_str(m.method, tc->method, "%s: method", tc->name);
                        if (tc->kind == JRPC_RESULT)
                                ok(m.result != NULL, "%s: result set", tc->name);
                        if (tc->kind == JRPC_ERROR)
                                ok(json_is_object(m.error), "%s: error set", tc->name);
                        jrpc_msg_done(&m);
                        ok(m.root == NULL, "%s: jrpc_msg_done clears the message", tc->name);
                } else {
                        ok(e.msg[0] != '\0', "%s: has a message (%s)", tc->name, e.msg);
                        is_int(e.kind, ERR_PROTOCOL, "%s: error kind", tc->name);
                }
                if (id == (json_t *)1) {
                        ok(false, "%s: *ret_id was not set", tc->name);
                        continue;
                }
                char *got_id = dump_any(id);
                /* For a valid message *ret_id is the id too (or NULL). */
                const char *want_id = tc->id;
                is_str(got_id, want_id, "%s: recovered id", tc->name);
                free(got_id);
                json_decref(id);
        }

        /* JSON-RPC 2.0 says a valid JSON text that is not a Request object
         * is "Invalid Request"; jansson without JSON_DECODE_ANY refuses
         * top-level scalars at parse time, so jrpc_parse answers -32700 and
         * its "a message must be a JSON object" branch is unreachable. */
        static const char *const scalars[] = {"1", "\"x\"", "null", "true"};
        for (size_t i = 0; i < ARRAY_SIZE(scalars); i++) {
                struct jrpc_msg m;
                json_t *id;
                struct err e = {0};
                int rc = jrpc_parse(scalars[i], strlen(scalars[i]), &m, &id, &e);
                is_int(rc, JRPC_INVALID_REQUEST, "top-level %s is an invalid request", scalars[i]);
                json_decref(id);
        }

        /* A NULL error object is allowed. */
        struct jrpc_msg m;
        json_t *id;
        is_int(jrpc_parse("x", 1, &m, &id, NULL), JRPC_PARSE_ERROR, "parse with no error object");
        ok(id == NULL, "... no id");
}

/* The byte-exact wire form of each builder. */
static void test_encode(void)
{
        static const char *const want[] = {
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"text\":\"a\\nb\\r\\n\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":\"k\",\"result\":{}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"parse "
            "error\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32601,\"message\":\"no\\nsuch\","
            "\"data\":{\"line\":\"x\\ny\"}}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"sandbox/exec\",\"params\":{\"code\":"
            "\"print(1)\\n\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":"
            "\"\\u0001\\t\\u001F\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"m\"}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"s\":\"caf\xc3\xa9 \xe2\x80\xa8\"}}\n",
        };
        json_t *id1 = json_integer(1), *idk = json_string("k"), *id2 = json_integer(2),
               *id5 = json_integer(5);
        json_t *msgs[] = {
            jrpc_result(id1, json_pack("{s:s}", "text", "a\nb\r\n")),
            jrpc_result(idk, NULL),
            jrpc_error(NULL, JRPC_PARSE_ERROR, "parse error", NULL),
            jrpc_error(id2, JRPC_METHOD_NOT_FOUND, "no\nsuch", json_pack("{s:s}", "line", "x\ny")),
            jrpc_request(3, "sandbox/exec", json_pack("{s:s}", "code", "print(1)\n")),
            jrpc_request(4, "ping", NULL),
            jrpc_notification("notifications/message", json_pack("{s:s}", "data", "\x01\t\x1f")),
            jrpc_notification("m", NULL),
            jrpc_result(id5, json_pack("{s:s}", "s", "caf\xc3\xa9 \xe2\x80\xa8")),
        };
        /* The builders copied the ids. */
        json_decref(id1);
        json_decref(idk);
        json_decref(id2);
        json_decref(id5);
        for (size_t i = 0; i < ARRAY_SIZE(msgs); i++) {
                size_t len = 0;
                char *s = jrpc_encode(msgs[i], &len);
                is_str(s, want[i], "encode #%zu: exact bytes", i);
                if (!s)
                        continue;
                is_int(len, strlen(s), "encode #%zu: length", i);
                ok(len > 0 && s[len - 1] == '\n' && memchr(s, '\n', len - 1) == NULL,
                   "encode #%zu: one line, newline only at the end", i);
                /* What we write we can read back. */
                struct jrpc_msg m;
                json_t *rid;
                struct err e = {0};
                is_int(jrpc_parse(s, len - 1, &m, &rid, &e), 0, "encode #%zu: parses back", i);
                json_decref(rid);
                if (m.root)
                        jrpc_msg_done(&m);
                free(s);
        }
        size_t len = 77;
        ok(jrpc_encode(NULL, &len) == NULL, "encode NULL gives NULL");
        is_int(len, 77, "... and leaves the length alone");

        /* Every control character and a big payload still give one line. */
        char ctl[64];
        size_t n = 0;
        for (int c = 1; c < 0x20; c++)
                ctl[n++] = (char)c;
        ctl[n] = '\0';
        char *s = jrpc_encode(jrpc_notification("x", json_pack("{s:s}", "d", ctl)), &len);
        ok(s && memchr(s, '\n', len - 1) == NULL && memchr(s, '\r', len) == NULL,
           "control characters are escaped");
        free(s);
}

/* jrpc_dump writes long strings itself: its text must be json_dumps's to
 * the byte, whatever the strings hold and wherever they are. */
static void same_dump(json_t *msg, const char *name)
{
        size_t n = 0;
        char *got = jrpc_dump(msg, &n);
        char *want = json_dumps(msg, JSON_COMPACT);
        ok(got && want && n == strlen(want) && memcmp(got, want, n) == 0 && got[n] == '\0',
           "%s: the text json_dumps makes (%zu bytes)", name, want ? strlen(want) : 0);
        /* And the message is as it was. */
        char *again = json_dumps(msg, JSON_COMPACT);
        ok(again && want && strcmp(again, want) == 0, "%s: the message is left as it was", name);
        free(got);
        free(want);
        free(again);
        json_decref(msg);
}

static void test_dump_long(void)
{
        size_t big = 200 * 1024;
        char *b64 = malloc(big + 1), *ctl = malloc(big + 1), *utf = malloc(big + 1);
        for (size_t i = 0; i < big; i++) {
                b64[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i % 64];
                ctl[i] = (char)(i % 128); /* every ASCII byte: NUL, controls, quote, backslash */
                utf[i] = i % 2 ? (char)0xA9 : (char)0xC2; /* U+00A9, left to jansson */
        }
        b64[big] = ctl[big] = utf[big] = '\0';
        same_dump(json_pack("{s:s, s:{s:[{s:s, s:s%}]}}", "jsonrpc", "2.0", "result", "content",
                            "type", "resource", "blob", b64, big),
                  "a blob in a result");
        same_dump(json_pack("{s:s%, s:[s%, s%, i], s:s%}", "a", ctl, big, "b", b64, big, utf, big,
                            7, "c", b64, (size_t)LONG_STRING_TEST),
                  "escapes, non-ASCII and a string at the threshold");
        /* A short string holding the placeholder's form does not fool it. */
        same_dump(json_pack("{s:s, s:s%, s:s}", "x", "\001corral-long:0000000000000000:1:0", "y",
                            b64, big, "z", "\"\\u0001corral-long:"),
                  "a look-alike of the placeholder");
        /* One byte to escape among plain ones, wherever it falls in a word;
         * one byte that is not ASCII. */
        static const char odd[] = {'"', '\\', '\n', '\x01', '\x1f', '\x7f', (char)0xc3};
        for (size_t i = 0; i < sizeof(odd); i++) {
                char *x = strdup(b64);
                x[big / 2 + i] = odd[i];
                if (odd[i] == (char)0xc3)
                        x[big / 2 + i + 1] = (char)0xa9;
                char name[40];
                snprintf(name, sizeof(name), "one odd byte (%zu)", i);
                same_dump(json_pack("{s:s%}", "s", x, big), name);
                free(x);
        }
        json_t *many = json_array();
        for (int i = 0; i < 12; i++)
                json_array_append_new(many, json_stringn(b64, big - (size_t)i));
        same_dump(many, "more long strings than it takes");
        json_t *shared = json_stringn(b64, big);
        same_dump(json_pack("[O, O, {s:O}]", shared, shared, "k", shared), "one string thrice");
        json_decref(shared);
        free(b64);
        free(ctl);
        free(utf);
}

static void test_id_equal(void)
{
        static const struct {
                const char *a, *b;
                bool equal;
        } cases[] = {
            {"1", "1", true},           {"1", "\"1\"", false},   {"\"a\"", "\"a\"", true},
            {"\"a\"", "\"a \"", false}, {"1", "1.0", true},      {"1.5", "1.5", true},
            {"1", "2", false},          {"-0", "0", true},       {"\"a\\u0000b\"", "\"a\"", false},
            {"null", "null", false},    {"true", "true", false}, {"1", "null", false},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                json_t *a = json_loads(cases[i].a, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
                json_t *b = json_loads(cases[i].b, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
                ok(jrpc_id_equal(a, b) == cases[i].equal && jrpc_id_equal(b, a) == cases[i].equal,
                   "id %s %s id %s", cases[i].a, cases[i].equal ? "equals" : "differs from",
                   cases[i].b);
                json_decref(a);
                json_decref(b);
        }
        ok(!jrpc_id_equal(NULL, NULL), "no id equals no id: never in flight");
}

static const struct scan_case {
        const char *name;
        const char *in;
        size_t len;
        enum jrpc_scan_result result;
        const char *id; /* compact JSON of the id */
} scan_cases[] = {
    {"id first", S("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{}}"),
     JRPC_SCAN_ID, "7"},
    /* The TypeScript SDK writes method and params first, id last. */
    {"id last, after params holding an id",
     S("{\"method\":\"tools/call\",\"params\":{\"id\":1,\"a\":[{\"id\":2}]},\"jsonrpc\":\"2.0\","
       "\"id\":\"r-9\"}"),
     JRPC_SCAN_ID, "\"r-9\""},
    {"string id with escapes", S("{\"id\":\"\\u0041\\n\\\"\\ud83d\\ude00\"}"), JRPC_SCAN_ID,
     "\"A\\n\\\"\xf0\x9f\x98\x80\""},
    {"key written with an escape", S("{\"\\u0069d\":3}"), JRPC_SCAN_ID, "3"},
    {"real id", S("{\"id\":-1.5e+3}"), JRPC_SCAN_ID, "-1500.0"},
    {"whitespace everywhere", S(" { \"id\" :\t5 , \"method\" : \"m\" } \r"), JRPC_SCAN_ID, "5"},
    {"only params has an id", S("{\"jsonrpc\":\"2.0\",\"params\":{\"id\":1},\"x\":1}"),
     JRPC_SCAN_NO_ID, NULL},
    {"a notification", S("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\",\"params\":{}}"),
     JRPC_SCAN_NOTIFICATION, NULL},
    {"method not a string, no id", S("{\"method\":5}"), JRPC_SCAN_NO_ID, NULL},
    {"id null", S("{\"id\":null,\"method\":\"m\"}"), JRPC_SCAN_NO_ID, NULL},
    {"id an object", S("{\"id\":{\"id\":1},\"method\":\"m\"}"), JRPC_SCAN_NO_ID, NULL},
    {"id true", S("{\"id\":true}"), JRPC_SCAN_NO_ID, NULL},
    {"two ids", S("{\"id\":1,\"method\":\"m\",\"id\":2}"), JRPC_SCAN_NO_ID, NULL},
    {"two ids, one escaped", S("{\"id\":1,\"i\\u0064\":1}"), JRPC_SCAN_NO_ID, NULL},
    {"a key that only starts like id", S("{\"idx\":1,\"i\":2,\"\\u0069d\\ud83d\\ude00\":3}"),
     JRPC_SCAN_NO_ID, NULL},
    {"integer id out of range", S("{\"id\":99999999999999999999}"), JRPC_SCAN_NO_ID, NULL},
    {"an array", S("[{\"id\":1}]"), JRPC_SCAN_NO_ID, NULL},
    {"a number", S("12"), JRPC_SCAN_NO_ID, NULL},
    {"cut short", S("{\"id\":1,\"params\":{\"a\":\"xyz"), JRPC_SCAN_INVALID, NULL},
    {"trailing garbage", S("{\"id\":1} x"), JRPC_SCAN_INVALID, NULL},
    {"two values", S("{\"id\":1}{}"), JRPC_SCAN_INVALID, NULL},
    {"empty", S(""), JRPC_SCAN_INVALID, NULL},
    {"missing colon", S("{\"id\" 1}"), JRPC_SCAN_INVALID, NULL},
    {"trailing comma", S("{\"id\":1,}"), JRPC_SCAN_INVALID, NULL},
    {"array closed by a brace", S("{\"id\":1,\"a\":[1}"), JRPC_SCAN_INVALID, NULL},
    {"leading zero", S("{\"id\":01}"), JRPC_SCAN_INVALID, NULL},
    {"bare minus", S("{\"id\":-}"), JRPC_SCAN_INVALID, NULL},
    {"no digit after the point", S("{\"id\":1.}"), JRPC_SCAN_INVALID, NULL},
    {"no digit in the exponent", S("{\"id\":1e+}"), JRPC_SCAN_INVALID, NULL},
    {"a cut literal", S("{\"id\":1,\"a\":tru}"), JRPC_SCAN_INVALID, NULL},
    {"a capital literal", S("{\"id\":1,\"a\":True}"), JRPC_SCAN_INVALID, NULL},
    {"lone high surrogate", S("{\"id\":1,\"a\":\"\\ud800x\"}"), JRPC_SCAN_INVALID, NULL},
    {"lone low surrogate", S("{\"id\":1,\"a\":\"\\udc00\"}"), JRPC_SCAN_INVALID, NULL},
    {"bad escape", S("{\"id\":1,\"a\":\"\\x41\"}"), JRPC_SCAN_INVALID, NULL},
    {"short \\u escape", S("{\"id\":1,\"a\":\"\\u41\"}"), JRPC_SCAN_INVALID, NULL},
    {"raw control character", S("{\"id\":1,\"a\":\"\x1b\"}"), JRPC_SCAN_INVALID, NULL},
    {"invalid UTF-8", S("{\"id\":1,\"a\":\"\xff\"}"), JRPC_SCAN_INVALID, NULL},
    {"overlong UTF-8", S("{\"id\":1,\"a\":\"\xc0\xaf\"}"), JRPC_SCAN_INVALID, NULL},
    {"UTF-8 surrogate", S("{\"id\":1,\"a\":\"\xed\xa0\x80\"}"), JRPC_SCAN_INVALID, NULL},
    {"past U+10FFFF", S("{\"id\":1,\"a\":\"\xf4\x90\x80\x80\"}"), JRPC_SCAN_INVALID, NULL},
    {"UTF-8 outside a string", S("{\"id\":1}\xc2\xa0"), JRPC_SCAN_INVALID, NULL},
    {"\\u0000 in a key", S("{\"id\":1,\"a\\u0000\":1}"), JRPC_SCAN_INVALID, NULL},
    {"raw NUL after a number", S("{\"id\":1\0}"), JRPC_SCAN_INVALID, NULL},
    {"\\u0000 in a value", S("{\"id\":\"a\\u0000\"}"), JRPC_SCAN_ID, "\"a\\u0000\""},
};

/* Feeds in pieces of `step` bytes (0: all at once). */
static enum jrpc_scan_result scan_in_steps(struct jrpc_id_scan *s, const char *in, size_t len,
                                           size_t step, json_t **ret_id)
{
        jrpc_id_scan_init(s);
        for (size_t at = 0; at < len;) {
                size_t k = step && step < len - at ? step : len - at;
                jrpc_id_scan_feed(s, in + at, k);
                at += k;
        }
        return jrpc_id_scan_end(s, ret_id);
}

static void test_id_scan(void)
{
        static struct jrpc_id_scan s;
        for (size_t i = 0; i < ARRAY_SIZE(scan_cases); i++) {
                const struct scan_case *tc = &scan_cases[i];
                for (size_t step = 0; step <= 3; step += 3) {
                        json_t *id = NULL;
                        enum jrpc_scan_result r = scan_in_steps(&s, tc->in, tc->len, step, &id);
                        char *got = dump_any(id);
                        ok(r == tc->result && (tc->id ? got && strcmp(got, tc->id) == 0 : !got),
                           "scan %s%s: result %d, id %s", tc->name, step ? " (3 bytes a feed)" : "",
                           (int)r, got ? got : "none");
                        free(got);
                        json_decref(id);
                }
        }

        /* Nesting: jansson takes values 2048 deep, and so does the scanner. */
        size_t deep = 2047;
        char *line = malloc(2 * deep + 64);
        size_t n = (size_t)sprintf(line, "{\"id\":8,\"p\":");
        memset(line + n, '[', deep);
        n += deep;
        memset(line + n, ']', deep);
        n += deep;
        line[n++] = '}';
        json_t *id = NULL;
        ok(scan_in_steps(&s, line, n, 0, &id) == JRPC_SCAN_ID && json_integer_value(id) == 8,
           "2048 levels deep: the id is read");
        json_decref(id);
        id = NULL;
        memmove(line + 12 + deep + 1, line + 12 + deep, n - 12 - deep);
        line[12 + deep] = '1';
        ok(scan_in_steps(&s, line, n + 1, 0, &id) == JRPC_SCAN_INVALID && !id,
           "a value 2049 deep is refused, as jansson refuses it");
        ok(!json_loadb(line, n + 1, JSON_DECODE_ANY, NULL), "... (jansson does)");
        free(line);

        /* An id longer than the scanner keeps is not used; one that fits is. */
        char big[JRPC_SCAN_ID_MAX + 64];
        n = (size_t)sprintf(big, "{\"id\":\"");
        memset(big + n, 'x', JRPC_SCAN_ID_MAX - 2);
        n += JRPC_SCAN_ID_MAX - 2;
        n += (size_t)sprintf(big + n, "\"}");
        ok(scan_in_steps(&s, big, n, 7, &id) == JRPC_SCAN_ID &&
               json_string_length(id) == JRPC_SCAN_ID_MAX - 2,
           "an id of JRPC_SCAN_ID_MAX bytes of JSON is kept");
        json_decref(id);
        id = NULL;
        memmove(big + 8, big + 7, n - 7);
        big[7] = 'y';
        ok(scan_in_steps(&s, big, n + 1, 7, &id) == JRPC_SCAN_NO_ID && !id,
           "one byte more: not used");

        /* Megabytes of params before the id, fed as a reader would. */
        size_t pad = 3 << 20;
        char *huge = malloc(pad + 100);
        n = (size_t)sprintf(huge, "{\"method\":\"tools/call\",\"params\":{\"content\":\"");
        memset(huge + n, 'Q', pad);
        n += pad;
        n += (size_t)sprintf(huge + n, "\"},\"jsonrpc\":\"2.0\",\"id\":42}");
        ok(scan_in_steps(&s, huge, n, 65536, &id) == JRPC_SCAN_ID && json_integer_value(id) == 42,
           "the id after 3 MiB of params is read");
        json_decref(id);
        free(huge);
}

int main(void)
{
        test_dump_long();
        test_parse_table();
        test_encode();
        test_id_equal();
        test_id_scan();
        return done_testing();
}
