/* Streamable HTTP answers split into JSON-RPC messages: event streams (SSE
 * framing, fields, line ends, bounds, bytes split at every position) and
 * JSON bodies (one message, a batch, not JSON). */
#include "upstream/http.h"

#include "tap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The messages one body gave, joined by '|'. */
struct got {
        char text[8192];
        int n;
        int stop_after; /* return -ECANCELED after this many (0: never) */
};

static int collect(void *userdata, const char *msg, size_t len)
{
        struct got *g = userdata;
        size_t used = strlen(g->text);
        snprintf(g->text + used, sizeof(g->text) - used, "%s%.*s", g->n ? "|" : "", (int)len, msg);
        g->n++;
        if (g->stop_after && g->n >= g->stop_after)
                return -ECANCELED;
        return 0;
}

/* Feed `body` whole, then in every two-piece split, then byte by byte; all
 * must give `want` (and return `want_r`). */
static void sse_case(const char *body, size_t len, const char *want, int want_r, size_t max,
                     const char *what)
{
        struct got g = {0};
        struct http_body b;
        http_body_init(&b, HTTP_BODY_SSE, max);
        int r = http_body_feed(&b, body, len, collect, &g);
        if (r == 0)
                r = http_body_end(&b, collect, &g);
        http_body_free(&b);
        is_int(r, want_r, "%s: result", what);
        is_str(g.text, want, "%s: messages", what);

        int bad = 0;
        for (size_t cut = 0; cut <= len; cut++) {
                struct got h = {0};
                http_body_init(&b, HTTP_BODY_SSE, max);
                r = http_body_feed(&b, body, cut, collect, &h);
                if (r == 0)
                        r = http_body_feed(&b, body + cut, len - cut, collect, &h);
                if (r == 0)
                        r = http_body_end(&b, collect, &h);
                http_body_free(&b);
                if (r != want_r || strcmp(h.text, want) != 0) {
                        if (!bad)
                                diag("split at %zu gave %d \"%s\"", cut, r, h.text);
                        bad++;
                }
        }
        is_int(bad, 0, "%s: the same for every split into two feeds", what);

        struct got h = {0};
        http_body_init(&b, HTTP_BODY_SSE, max);
        r = 0;
        for (size_t i = 0; i < len && r == 0; i++)
                r = http_body_feed(&b, body + i, 1, collect, &h);
        if (r == 0)
                r = http_body_end(&b, collect, &h);
        http_body_free(&b);
        ok(r == want_r && strcmp(h.text, want) == 0, "%s: the same byte by byte", what);
}

#define SSE(body, want, what) sse_case(body, sizeof(body) - 1, want, 0, 4096, what)

static void test_sse_framing(void)
{
        SSE("data: {\"a\":1}\n\n", "{\"a\":1}", "one event");
        SSE("data: {\"a\":1}\n\ndata: {\"b\":2}\n\n", "{\"a\":1}|{\"b\":2}", "two events");
        SSE("data: {\"a\":\n"
            "data: 1}\n\n",
            "{\"a\":\n1}", "data lines are joined with a newline");
        SSE("data:{\"a\":1}\n\n", "{\"a\":1}", "no space after the colon");
        SSE("data:  x\n\n", " x", "only one space after the colon is dropped");
        SSE("data: {\"a\":1}\r\n\r\n", "{\"a\":1}", "CRLF line ends");
        SSE("data: {\"a\":1}\r\rdata: 2\r\r", "{\"a\":1}|2", "CR line ends");
        SSE("data: 1\r\n\ndata: 2\n\r\n", "1|2", "mixed line ends");
        SSE(": keep-alive\n\ndata: 1\n\n", "1", "comments are ignored");
        SSE("event: message\nid: 42\nretry: 1000\ndata: 1\n\n", "1",
            "event, id and retry are ignored");
        SSE("foo: bar\nfoo\ndata: 1\nbar\n\n", "1", "unknown fields are ignored");
        SSE("id: prime\ndata:\n\n", "", "an event with empty data gives nothing (priming)");
        SSE("id: prime\n\n", "", "an event without data gives nothing");
        SSE("\n\n\n", "", "blank lines alone give nothing");
        SSE("data: 1\n\ndata: 2\n", "1", "an event without its blank line is dropped at the end");
        SSE("data: 1", "", "an unterminated line is dropped at the end");
        SSE("\xEF\xBB\xBF"
            "data: 1\n\n",
            "1", "a byte order mark at the start is skipped");
        SSE("\xEF\xBB"
            "data: 1\n\n",
            "", "half a byte order mark spoils the first line only");
        SSE("data\n\n", "", "\"data\" with no colon is an empty data line");
        SSE("data: \xc3\xa9t\xc3\xa9\n\n", "\xc3\xa9t\xc3\xa9", "UTF-8 passes through");
        SSE("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n"
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}|"
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
            "a notification before the response");
}

static void test_sse_bounds(void)
{
        /* max 8: a message of 8 bytes passes, 9 does not. */
        sse_case("data: 12345678\n\n", 16, "12345678", 0, 8, "a message of exactly max bytes");
        sse_case("data: 123456789\n\n", 17, "", -EMSGSIZE, 8, "a message over max is -EMSGSIZE");
        sse_case("data: 1234\ndata: 5678\n\n", 23, "", -EMSGSIZE, 8,
                 "joined data lines count with their newline");
        sse_case("data: 1\n\ndata: 123456789\n\ndata: 2\n\n", 36, "1", -EMSGSIZE, 8,
                 "messages before the one over max are passed on");
        /* A comment line longer than any message is refused too: no line
         * grows without bound. */
        char big[200];
        memset(big, 'x', sizeof(big));
        big[0] = ':';
        struct http_body b;
        struct got g = {0};
        http_body_init(&b, HTTP_BODY_SSE, 8);
        int r = 0;
        for (int i = 0; i < 10 && r == 0; i++)
                r = http_body_feed(&b, big, sizeof(big), collect, &g);
        is_int(r, -EMSGSIZE, "an endless line is refused");
        ok(b.line.len <= b.line.max, "and the buffer stayed within its bound");
        http_body_free(&b);

        /* The callback stops the feed. */
        struct got s = {.stop_after = 1};
        http_body_init(&b, HTTP_BODY_SSE, 64);
        const char two[] = "data: 1\n\ndata: 2\n\n";
        r = http_body_feed(&b, two, sizeof(two) - 1, collect, &s);
        is_int(r, -ECANCELED, "a negative return from the callback is returned");
        is_str(s.text, "1", "and no later message is passed on");
        http_body_free(&b);
}

static void json_case(const char *body, const char *want, int want_r, size_t max, const char *what)
{
        struct got g = {0};
        struct http_body b;
        http_body_init(&b, HTTP_BODY_JSON, max);
        int r = 0;
        /* In pieces: nothing is passed on before the end. */
        size_t len = strlen(body);
        for (size_t i = 0; i < len && r == 0; i += 3)
                r = http_body_feed(&b, body + i, len - i < 3 ? len - i : 3, collect, &g);
        if (r == 0) {
                is_int(g.n, 0, "%s: nothing before the end", what);
                r = http_body_end(&b, collect, &g);
        }
        http_body_free(&b);
        is_int(r, want_r, "%s: result", what);
        is_str(g.text, want, "%s: messages", what);
}

static void test_json(void)
{
        json_case("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
                  "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", 0, 4096, "one message");
        json_case("\n  {\"id\": 1,\n \"x\": [1, 2]}\r\n", "{\"id\": 1,\n \"x\": [1, 2]}", 0, 4096,
                  "one message is passed on as it came, trimmed");
        json_case("[{\"id\":1},{\"method\":\"m\"}]", "{\"id\":1}|{\"method\":\"m\"}", 0, 4096,
                  "a batch gives each member");
        json_case(" [ ] ", "", 0, 4096, "an empty batch gives nothing");
        json_case("", "", 0, 4096, "an empty body gives nothing");
        json_case("[{\"a\":1,\"a\":2}]", "", -EBADMSG, 4096, "a batch with duplicate keys");
        json_case("[{\"a\":1}", "", -EBADMSG, 4096, "a broken batch");
        json_case("[1, \"x\"]", "1|\"x\"", 0, 4096,
                  "members that are not objects are passed on for the codec to refuse");
        json_case("not json", "not json", 0, 4096,
                  "a single body is not judged here (the codec does)");
        json_case("{\"a\":\"12345\"}", "{\"a\":\"12345\"}", 0, 13, "a body of exactly max bytes");
        json_case("{\"a\":\"123456\"}", "", -EMSGSIZE, 13, "a body over max is -EMSGSIZE");
}

int main(void)
{
        test_sse_framing();
        test_sse_bounds();
        test_json();
        return done_testing();
}
