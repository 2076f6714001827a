#include "core/jsonrpc.h"

#include "core/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static bool id_valid(const json_t *id)
{
        return json_is_string(id) || json_is_integer(id) || json_is_real(id);
}

int jrpc_parse(const char *line, size_t len, struct jrpc_msg *ret, json_t **ret_id, struct err *e)
{
        json_error_t jerr;
        *ret_id = NULL;
        /* jansson validates UTF-8 and refuses NUL bytes in strings. */
        /* DECODE_ANY so that a bare scalar is an invalid request, not a
         * parse error; ALLOW_NUL because program output may hold NUL bytes
         * (every consumer uses string lengths; the method is checked). */
        json_t *root =
            json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!root) {
                err_set(e, ERR_PROTOCOL, EINVAL, "parse error: %s at position %d", jerr.text,
                        jerr.position);
                return JRPC_PARSE_ERROR;
        }
        if (!json_is_object(root)) {
                bool batch = json_is_array(root);
                json_decref(root);
                err_set(e, ERR_PROTOCOL, EINVAL,
                        batch ? "batches are not supported" : "a message must be a JSON object");
                return JRPC_INVALID_REQUEST;
        }
        json_t *id = json_object_get(root, "id");
        if (id && id_valid(id))
                *ret_id = json_incref(id);
        const char *ver = json_string_value(json_object_get(root, "jsonrpc"));
        if (!ver || strcmp(ver, "2.0") != 0) {
                json_decref(root);
                err_set(e, ERR_PROTOCOL, EINVAL, "\"jsonrpc\" must be \"2.0\"");
                return JRPC_INVALID_REQUEST;
        }
        json_t *method = json_object_get(root, "method");
        json_t *params = json_object_get(root, "params");
        json_t *result = json_object_get(root, "result");
        json_t *error = json_object_get(root, "error");
        struct jrpc_msg m = {.root = root, .id = id};
        const char *why = NULL;
        if (method) {
                if (!json_is_string(method) || json_string_length(method) == 0 ||
                    strlen(json_string_value(method)) != json_string_length(method))
                        why = "\"method\" must be a non-empty string without NUL";
                else if (params && !json_is_object(params) && !json_is_array(params))
                        why = "\"params\" must be an object or an array";
                else if (id && !id_valid(id))
                        why = "\"id\" must be a string or a number";
                m.kind = id ? JRPC_REQUEST : JRPC_NOTIFICATION;
                m.method = json_string_value(method);
                m.params = params;
        } else if (result || error) {
                if (!id || (!id_valid(id) && !json_is_null(id)))
                        why = "a response needs an \"id\"";
                else if (result && error)
                        why = "a response has either \"result\" or \"error\"";
                else if (error && (!json_is_object(error) ||
                                   !json_is_integer(json_object_get(error, "code"))))
                        why = "\"error\" must be an object with an integer \"code\"";
                m.kind = result ? JRPC_RESULT : JRPC_ERROR;
                m.result = result;
                m.error = error;
        } else {
                why = "a message needs \"method\", \"result\" or \"error\"";
        }
        if (why) {
                json_decref(root);
                err_set(e, ERR_PROTOCOL, EINVAL, "%s", why);
                return JRPC_INVALID_REQUEST;
        }
        *ret = m;
        return 0;
}

void jrpc_msg_done(struct jrpc_msg *m)
{
        json_decref(m->root);
        *m = (struct jrpc_msg){0};
}

static json_t *envelope(void)
{
        json_t *o = json_object();
        if (o)
                json_object_set_new(o, "jsonrpc", json_string("2.0"));
        return o;
}

json_t *jrpc_result(json_t *id, json_t *result)
{
        json_t *o = envelope();
        if (!o) {
                json_decref(result);
                return NULL;
        }
        json_object_set(o, "id", id ? id : json_null());
        json_object_set_new(o, "result", result ? result : json_object());
        return o;
}

json_t *jrpc_error(json_t *id, int code, const char *message, json_t *data)
{
        json_t *o = envelope();
        json_t *err = json_object();
        if (!o || !err) {
                json_decref(o);
                json_decref(err);
                json_decref(data);
                return NULL;
        }
        /* Messages quote outside text cut at byte limits: keep them valid. */
        char *text = utf8_scrub(strdup(message ? message : ""));
        json_object_set_new(err, "code", json_integer(code));
        json_object_set_new(err, "message", json_string(text ? text : "error"));
        free(text);
        if (data)
                json_object_set_new(err, "data", data);
        json_object_set(o, "id", id ? id : json_null());
        json_object_set_new(o, "error", err);
        return o;
}

json_t *jrpc_request(json_int_t id, const char *method, json_t *params)
{
        json_t *o = envelope();
        if (!o) {
                json_decref(params);
                return NULL;
        }
        json_object_set_new(o, "id", json_integer(id));
        json_object_set_new(o, "method", json_string(method));
        if (params)
                json_object_set_new(o, "params", params);
        return o;
}

json_t *jrpc_notification(const char *method, json_t *params)
{
        json_t *o = envelope();
        if (!o) {
                json_decref(params);
                return NULL;
        }
        json_object_set_new(o, "method", json_string(method));
        if (params)
                json_object_set_new(o, "params", params);
        return o;
}

/* ---- encoding
 *
 * jansson writes a string a character at a time (a UTF-8 step and an
 * escape test each): for the megabytes of base64 of a file it is most of
 * the answer's cost. Strings of at least LONG_STRING bytes of ASCII are
 * therefore written here: each is swapped for a short placeholder
 * (unguessable, checked to occur once) while jansson writes the rest,
 * then put back in its place with jansson's escapes, found by a scan and
 * copied in runs. The text is the very text json_dumps makes. */

#define LONG_STRING (64 * 1024)
#define LONG_MAX    8 /* strings of a message written this way; the rest by jansson */

struct long_string {
        json_t *parent; /* object or array */
        void *iter;     /* in an object: its member */
        size_t index;   /* in an array */
        json_t *value;  /* the string (a reference held while swapped) */
        size_t escaped; /* bytes of its JSON text, quotes included */
        char mark[64];  /* the placeholder's JSON text */
        const char *at; /* where the placeholder is in jansson's text */
};

/* What jansson does with a byte of a string (no flags): 0 writes it as it
 * is, 1 escapes it with a letter or itself (\n, \"), 5 as \u00XX, and
 * 0xff for a byte that is not ASCII (such a string is left to jansson,
 * which checks UTF-8). */
static const unsigned char escape_cost[256] = {
    [0 ... 7] = 5,
    ['\b'] = 1,
    ['\t'] = 1,
    ['\n'] = 1,
    [0x0b] = 5,
    ['\f'] = 1,
    ['\r'] = 1,
    [0x0e ... 0x1f] = 5,
    ['"'] = 1,
    ['\\'] = 1,
    [0x80 ... 0xff] = 0xff,
};

/* Bytes of `s` written as a JSON string, quotes included; 0 when it holds
 * a byte that is not ASCII. Eight bytes at a time: a word with no byte
 * below 0x20, no '"', no '\\' and none above 0x7f is written as it is. */
static size_t escaped_len(const char *s, size_t n)
{
        const uint64_t ones = 0x0101010101010101ULL, highs = ones * 0x80;
        size_t k = n + 2, i = 0;
        unsigned bad = 0;
        for (; i + 8 <= n; i += 8) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
                /* Any byte below 0x20, any zero byte of q and b (exact as
                 * "any"), any byte with its high bit. */
                uint64_t hit = ((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b) | w;
                if (!(hit & highs))
                        continue;
                for (size_t j = i; j < i + 8; j++) {
                        unsigned char c = escape_cost[(unsigned char)s[j]];
                        bad |= c;
                        k += c;
                }
        }
        for (; i < n; i++) {
                unsigned char c = escape_cost[(unsigned char)s[i]];
                bad |= c;
                k += c;
        }
        /* (0xff's own count does not matter: the string is not taken.) */
        return (bad & 0x80) ? 0 : k;
}

static char *put_escaped(char *o, const char *s, size_t n, bool plain)
{
        static const char hex[] = "0123456789ABCDEF";
        *o++ = '"';
        if (plain) { /* nothing to escape (base64): one copy */
                memcpy(o, s, n);
                o[n] = '"';
                return o + n + 1;
        }
        size_t run = 0;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (!escape_cost[c])
                        continue;
                memcpy(o, s + run, i - run);
                o += i - run;
                run = i + 1;
                *o++ = '\\';
                switch (c) {
                case '"':
                case '\\':
                        *o++ = (char)c;
                        break;
                case '\b':
                        *o++ = 'b';
                        break;
                case '\f':
                        *o++ = 'f';
                        break;
                case '\n':
                        *o++ = 'n';
                        break;
                case '\r':
                        *o++ = 'r';
                        break;
                case '\t':
                        *o++ = 't';
                        break;
                default:
                        memcpy(o, "u00", 3);
                        o[3] = hex[c >> 4];
                        o[4] = hex[c & 15];
                        o += 5;
                }
        }
        memcpy(o, s + run, n - run);
        o += n - run;
        *o++ = '"';
        return o;
}

static void take_long(json_t *parent, void *iter, size_t index, json_t *v, struct long_string *l,
                      size_t *n)
{
        if (*n >= LONG_MAX || !json_is_string(v) || json_string_length(v) < LONG_STRING)
                return;
        size_t k = escaped_len(json_string_value(v), json_string_length(v));
        if (k)
                l[(*n)++] = (struct long_string){
                    .parent = parent, .iter = iter, .index = index, .value = v, .escaped = k};
}

static void find_long(json_t *v, struct long_string *l, size_t *n, int depth)
{
        if (depth > 64)
                return;
        if (json_is_object(v)) {
                for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
                        json_t *x = json_object_iter_value(it);
                        take_long(v, it, 0, x, l, n);
                        find_long(x, l, n, depth + 1);
                }
        } else if (json_is_array(v)) {
                for (size_t i = 0; i < json_array_size(v); i++) {
                        json_t *x = json_array_get(v, i);
                        take_long(v, NULL, i, x, l, n);
                        find_long(x, l, n, depth + 1);
                }
        }
}

static int put_back(struct long_string *l, json_t *v)
{
        return l->iter ? json_object_iter_set_new(l->parent, l->iter, v)
                       : json_array_set_new(l->parent, l->index, v);
}

static int by_place(const void *a, const void *b)
{
        const struct long_string *x = a, *y = b;
        return x->at < y->at ? -1 : x->at > y->at;
}

static char *dump_spliced(const json_t *msg, size_t *ret_len)
{
        struct long_string l[LONG_MAX];
        size_t n = 0;
        find_long((json_t *)msg, l, &n, 0);
        if (n == 0)
                return NULL;
        static unsigned long long nonce, count;
        if (!nonce && getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
                nonce =
                    (unsigned long long)time(NULL) * 2654435761ULL ^ (unsigned long long)getpid();
        count++;
        size_t swapped = 0;
        char *skel = NULL, *out = NULL;
        for (; swapped < n; swapped++) {
                /* jansson escapes the control character: \u0001 in its text. */
                char text[48];
                snprintf(text, sizeof(text), "\001corral-long:%016llx:%llu:%zu", nonce, count,
                         swapped);
                snprintf(l[swapped].mark, sizeof(l[swapped].mark), "\"\\u0001%s\"", text + 1);
                json_t *mark = json_string(text);
                json_incref(l[swapped].value);
                if (!mark || put_back(&l[swapped], mark) < 0) {
                        json_decref(l[swapped].value);
                        break;
                }
        }
        if (swapped == n)
                skel = json_dumps(msg, JSON_COMPACT);
        for (size_t i = 0; i < swapped; i++)
                put_back(&l[i], l[i].value); /* cannot fail: the slot is there */
        if (!skel)
                return NULL;
        size_t total = strlen(skel);
        for (size_t i = 0; i < n; i++) {
                size_t k = strlen(l[i].mark);
                l[i].at = strstr(skel, l[i].mark);
                if (!l[i].at || strstr(l[i].at + 1, l[i].mark)) {
                        free(skel);
                        return NULL;
                }
                total = total - k + l[i].escaped;
        }
        qsort(l, n, sizeof(l[0]), by_place);
        out = malloc(total + 2); /* room for a newline and NUL */
        if (out) {
                char *o = out;
                const char *from = skel;
                for (size_t i = 0; i < n; i++) {
                        memcpy(o, from, (size_t)(l[i].at - from));
                        o += l[i].at - from;
                        size_t k = json_string_length(l[i].value);
                        o = put_escaped(o, json_string_value(l[i].value), k, l[i].escaped == k + 2);
                        from = l[i].at + strlen(l[i].mark);
                }
                size_t rest = strlen(from);
                memcpy(o, from, rest);
                o += rest;
                *o = '\0';
                *ret_len = (size_t)(o - out);
        }
        free(skel);
        return out;
}

char *jrpc_dump(const json_t *msg, size_t *ret_len)
{
        if (!msg)
                return NULL;
        char *s = dump_spliced(msg, ret_len);
        if (s)
                return s;
        s = json_dumps(msg, JSON_COMPACT);
        if (s)
                *ret_len = strlen(s);
        return s;
}

char *jrpc_encode(json_t *msg, size_t *ret_len)
{
        if (!msg)
                return NULL;
        /* Compact output never contains a raw newline: strings escape it. */
        size_t n = 0;
        char *s = jrpc_dump(msg, &n);
        json_decref(msg);
        if (!s)
                return NULL;
        char *out = realloc(s, n + 2);
        if (!out) {
                free(s);
                return NULL;
        }
        out[n] = '\n';
        out[n + 1] = '\0';
        *ret_len = n + 1;
        return out;
}

bool jrpc_id_equal(const json_t *a, const json_t *b)
{
        if (json_is_string(a) && json_is_string(b))
                return json_string_length(a) == json_string_length(b) &&
                       memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) ==
                           0;
        if (json_is_integer(a) && json_is_integer(b))
                return json_integer_value(a) == json_integer_value(b);
        if (json_is_number(a) && json_is_number(b))
                return json_number_value(a) == json_number_value(b);
        return false;
}

/* ---- the id of a line too long to parse */

enum {
        SC_VALUE,        /* a value: the root, after ':', after ',' in an array */
        SC_VALUE_OR_END, /* after '[' */
        SC_KEY,          /* after ',' in an object */
        SC_KEY_OR_END,   /* after '{' */
        SC_COLON,
        SC_NEXT, /* after a value in a container: ',' or its closing bracket */
        SC_DONE, /* after the root value: whitespace only */
        SC_STRING,
        SC_ESCAPE,    /* after a backslash */
        SC_HEX,       /* the digits of \uXXXX */
        SC_LOW_SLASH, /* after a high surrogate: the low one's backslash */
        SC_LOW_U,     /* ... and its 'u' */
        SC_UTF8,      /* the continuation bytes of a UTF-8 sequence */
        SC_MINUS,
        SC_ZERO,
        SC_INT,
        SC_DOT,
        SC_FRAC,
        SC_EXP,
        SC_EXP_SIGN,
        SC_EXP_DIGITS,
        SC_LITERAL,
        SC_BAD, /* stays: nothing read from this line is used */
};

enum { MEMBER_OTHER, MEMBER_ID, MEMBER_METHOD };

void jrpc_id_scan_init(struct jrpc_id_scan *s)
{
        /* Most of the struct is the id and the nesting bits: those need no
         * clearing. */
        s->depth = 0;
        s->state = SC_VALUE;
        s->in_key = s->root_object = s->method = s->low = s->capture = s->id_kept = false;
        s->member = MEMBER_OTHER;
        s->ids = 0;
        s->hex = 0;
        s->cp = 0;
        s->utf8_left = 0;
        s->literal = NULL;
        s->literal_at = 0;
        s->key_len = 0;
        s->id_len = 0;
}

static bool sc_space(unsigned char c)
{
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool sc_object(const struct jrpc_id_scan *s)
{
        unsigned i = s->depth - 1;
        return s->objects[i / 8] >> (i % 8) & 1;
}

/* A byte of the id's text. */
static void sc_keep(struct jrpc_id_scan *s, unsigned char c)
{
        if (!s->capture)
                return;
        if (s->id_len == sizeof(s->id)) {
                s->capture = false; /* too long to answer with: not used */
                return;
        }
        s->id[s->id_len++] = (char)c;
}

/* A decoded byte of a key of the root object (only its start matters). */
static void sc_key_byte(struct jrpc_id_scan *s, unsigned char c)
{
        if (!s->in_key || s->depth != 1)
                return;
        if (s->key_len < sizeof(s->key))
                s->key[s->key_len] = (char)c;
        if (s->key_len <= sizeof(s->key))
                s->key_len++;
}

static void sc_value_end(struct jrpc_id_scan *s)
{
        if (s->capture) {
                s->capture = false;
                s->id_kept = true;
        }
        s->state = s->depth == 0 ? SC_DONE : SC_NEXT;
}

static void sc_string_end(struct jrpc_id_scan *s)
{
        if (!s->in_key) {
                sc_value_end(s);
                return;
        }
        s->in_key = false;
        s->state = SC_COLON;
        if (s->depth != 1)
                return;
        if (s->key_len == 2 && memcmp(s->key, "id", 2) == 0) {
                s->member = MEMBER_ID;
                if (s->ids < 2)
                        s->ids++;
        } else if (s->key_len == 6 && memcmp(s->key, "method", 6) == 0) {
                s->member = MEMBER_METHOD;
        } else {
                s->member = MEMBER_OTHER;
        }
}

static void sc_value_start(struct jrpc_id_scan *s, unsigned char c)
{
        /* jansson counts the value itself: one more than the containers
         * around it. */
        if (s->depth >= JRPC_SCAN_DEPTH) {
                s->state = SC_BAD;
                return;
        }
        bool root_member = s->depth == 1 && s->root_object;
        if (s->depth == 0)
                s->root_object = c == '{';
        s->capture = root_member && s->member == MEMBER_ID &&
                     (c == '"' || c == '-' || (c >= '0' && c <= '9'));
        if (s->capture)
                s->id_len = 0;
        sc_keep(s, c);
        switch (c) {
        case '{':
        case '[': {
                unsigned i = s->depth++;
                if (c == '{')
                        s->objects[i / 8] |= (unsigned char)(1u << (i % 8));
                else
                        s->objects[i / 8] &= (unsigned char)~(1u << (i % 8));
                s->state = c == '{' ? SC_KEY_OR_END : SC_VALUE_OR_END;
                return;
        }
        case '"':
                if (root_member && s->member == MEMBER_METHOD)
                        s->method = true;
                s->in_key = false;
                s->state = SC_STRING;
                return;
        case '-':
                s->state = SC_MINUS;
                return;
        case '0':
                s->state = SC_ZERO;
                return;
        case 't':
        case 'f':
        case 'n':
                s->literal = c == 't' ? "true" : c == 'f' ? "false" : "null";
                s->literal_at = 1;
                s->state = SC_LITERAL;
                return;
        default:
                s->state = c >= '1' && c <= '9' ? SC_INT : SC_BAD;
                return;
        }
}

static void sc_close(struct jrpc_id_scan *s)
{
        s->depth--;
        sc_value_end(s);
}

/* The first byte of a UTF-8 sequence in a string: the bounds of the next
 * byte exclude overlong forms, surrogates and values past U+10FFFF. */
static void sc_utf8_lead(struct jrpc_id_scan *s, unsigned char c)
{
        s->utf8_lo = 0x80;
        s->utf8_hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
                s->utf8_left = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
                s->utf8_left = 2;
                if (c == 0xE0)
                        s->utf8_lo = 0xA0;
                else if (c == 0xED)
                        s->utf8_hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
                s->utf8_left = 3;
                if (c == 0xF0)
                        s->utf8_lo = 0x90;
                else if (c == 0xF4)
                        s->utf8_hi = 0x8F;
        } else {
                s->state = SC_BAD;
                return;
        }
        s->state = SC_UTF8;
}

/* A \uXXXX escape complete: surrogates must pair, and a key may not hold
 * U+0000 (jansson refuses both). */
static void sc_escape_done(struct jrpc_id_scan *s)
{
        unsigned cp = s->cp;
        s->state = SC_STRING;
        if (s->low) {
                s->low = false;
                if (cp < 0xDC00 || cp > 0xDFFF)
                        s->state = SC_BAD;
                else
                        sc_key_byte(s, 0xFF); /* not ASCII: no key that counts */
                return;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
                s->low = true;
                s->state = SC_LOW_SLASH;
        } else if ((cp >= 0xDC00 && cp <= 0xDFFF) || (cp == 0 && s->in_key)) {
                s->state = SC_BAD;
        } else {
                sc_key_byte(s, cp < 0x80 ? (unsigned char)cp : 0xFF);
        }
}

/* The end of a number: terminal states only. The byte that ended it is
 * read again in the state after the value. */
static bool sc_number_end(struct jrpc_id_scan *s)
{
        if (s->state != SC_ZERO && s->state != SC_INT && s->state != SC_FRAC &&
            s->state != SC_EXP_DIGITS) {
                s->state = SC_BAD;
                return false;
        }
        sc_value_end(s);
        return true;
}

static void sc_byte(struct jrpc_id_scan *s, unsigned char c)
{
        bool digit = c >= '0' && c <= '9';
again:
        switch (s->state) {
        case SC_VALUE:
        case SC_VALUE_OR_END:
                if (sc_space(c))
                        return;
                if (c == ']' && s->state == SC_VALUE_OR_END)
                        sc_close(s);
                else
                        sc_value_start(s, c);
                return;
        case SC_KEY:
        case SC_KEY_OR_END:
                if (sc_space(c))
                        return;
                if (c == '}' && s->state == SC_KEY_OR_END) {
                        sc_close(s);
                } else if (c == '"') {
                        s->in_key = true;
                        s->key_len = 0;
                        s->state = SC_STRING;
                } else {
                        s->state = SC_BAD;
                }
                return;
        case SC_COLON:
                if (!sc_space(c))
                        s->state = c == ':' ? SC_VALUE : SC_BAD;
                return;
        case SC_NEXT:
                if (sc_space(c))
                        return;
                if (c == ',')
                        s->state = sc_object(s) ? SC_KEY : SC_VALUE;
                else if (c == (sc_object(s) ? '}' : ']'))
                        sc_close(s);
                else
                        s->state = SC_BAD;
                return;
        case SC_DONE:
                if (!sc_space(c))
                        s->state = SC_BAD;
                return;
        case SC_STRING:
                sc_keep(s, c);
                if (c == '"') {
                        sc_string_end(s);
                } else if (c == '\\') {
                        s->state = SC_ESCAPE;
                } else if (c < 0x20) {
                        s->state = SC_BAD;
                } else {
                        if (c >= 0x80)
                                sc_utf8_lead(s, c);
                        sc_key_byte(s, c);
                }
                return;
        case SC_ESCAPE: {
                sc_keep(s, c);
                static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
                const char *at = c ? strchr(from, c) : NULL;
                if (c == 'u') {
                        s->hex = 0;
                        s->cp = 0;
                        s->state = SC_HEX;
                } else if (at) {
                        sc_key_byte(s, (unsigned char)to[at - from]);
                        s->state = SC_STRING;
                } else {
                        s->state = SC_BAD;
                }
                return;
        }
        case SC_HEX: {
                sc_keep(s, c);
                int v = hex_value(c);
                if (v < 0) {
                        s->state = SC_BAD;
                        return;
                }
                s->cp = s->cp << 4 | (unsigned)v;
                if (++s->hex == 4)
                        sc_escape_done(s);
                return;
        }
        case SC_LOW_SLASH:
                sc_keep(s, c);
                s->state = c == '\\' ? SC_LOW_U : SC_BAD;
                return;
        case SC_LOW_U:
                sc_keep(s, c);
                if (c == 'u') {
                        s->hex = 0;
                        s->cp = 0;
                        s->state = SC_HEX;
                } else {
                        s->state = SC_BAD;
                }
                return;
        case SC_UTF8:
                sc_keep(s, c);
                if (c < s->utf8_lo || c > s->utf8_hi) {
                        s->state = SC_BAD;
                        return;
                }
                sc_key_byte(s, c);
                s->utf8_lo = 0x80;
                s->utf8_hi = 0xBF;
                if (--s->utf8_left == 0)
                        s->state = SC_STRING;
                return;
        case SC_MINUS:
                if (digit)
                        s->state = c == '0' ? SC_ZERO : SC_INT;
                else
                        s->state = SC_BAD;
                sc_keep(s, c);
                return;
        case SC_ZERO:
        case SC_INT:
        case SC_FRAC:
        case SC_EXP_DIGITS:
                if (digit && s->state != SC_ZERO) {
                        /* stays */
                } else if (c == '.' && (s->state == SC_ZERO || s->state == SC_INT)) {
                        s->state = SC_DOT;
                } else if ((c == 'e' || c == 'E') && s->state != SC_EXP_DIGITS) {
                        s->state = SC_EXP;
                } else if (digit) {
                        s->state = SC_BAD; /* a leading zero */
                        return;
                } else {
                        if (sc_number_end(s))
                                goto again;
                        return;
                }
                sc_keep(s, c);
                return;
        case SC_DOT:
                s->state = digit ? SC_FRAC : SC_BAD;
                sc_keep(s, c);
                return;
        case SC_EXP:
                s->state = digit ? SC_EXP_DIGITS : c == '+' || c == '-' ? SC_EXP_SIGN : SC_BAD;
                sc_keep(s, c);
                return;
        case SC_EXP_SIGN:
                s->state = digit ? SC_EXP_DIGITS : SC_BAD;
                sc_keep(s, c);
                return;
        case SC_LITERAL:
                if (c != (unsigned char)s->literal[s->literal_at]) {
                        s->state = SC_BAD;
                        return;
                }
                if (s->literal[++s->literal_at] == '\0')
                        sc_value_end(s);
                return;
        default:
                return;
        }
}

void jrpc_id_scan_feed(struct jrpc_id_scan *s, const char *p, size_t n)
{
        const unsigned char *u = (const unsigned char *)p;
        for (size_t i = 0; i < n && s->state != SC_BAD; i++) {
                /* The bulk of a long line is string content nobody keeps:
                 * step over plain ASCII at once. */
                if (s->state == SC_STRING && !s->capture && !(s->in_key && s->depth == 1)) {
                        while (i < n && u[i] >= 0x20 && u[i] < 0x80 && u[i] != '"' && u[i] != '\\')
                                i++;
                        if (i == n)
                                break;
                }
                sc_byte(s, u[i]);
        }
}

enum jrpc_scan_result jrpc_id_scan_end(struct jrpc_id_scan *s, json_t **ret_id)
{
        *ret_id = NULL;
        /* A number at the very end of the line has nothing after it to end it. */
        if (s->state == SC_ZERO || s->state == SC_INT || s->state == SC_FRAC ||
            s->state == SC_EXP_DIGITS)
                sc_number_end(s);
        if (s->state != SC_DONE)
                return JRPC_SCAN_INVALID;
        if (!s->root_object)
                return JRPC_SCAN_NO_ID;
        if (s->ids == 0)
                return s->method ? JRPC_SCAN_NOTIFICATION : JRPC_SCAN_NO_ID;
        if (s->ids > 1 || !s->id_kept)
                return JRPC_SCAN_NO_ID;
        /* The kept text is one string or number token: jansson makes the
         * value (and refuses a number out of its range). */
        json_t *id = json_loadb(s->id, s->id_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!id)
                return JRPC_SCAN_NO_ID;
        *ret_id = id;
        return JRPC_SCAN_ID;
}
