#include "upstream/mask.h"

#include "core/buf.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MARK_LEN (sizeof(MASK_MARK) - 1)

struct form {
        char *s;
        size_t len;
};

struct mask {
        struct form *v;
        size_t n, cap;
        /* Built on first use after an add: the forms sorted by their first
         * byte (case folded), longest first within one, duplicates gone;
         * those starting with byte b are v[first[b] .. first[b + 1]). */
        bool dirty;
        size_t first[257];
        size_t longest;
};

static unsigned char fold(char c)
{
        unsigned char u = (unsigned char)c;
        return u >= 'A' && u <= 'Z' ? (unsigned char)(u + 32) : u;
}

static bool fold_eq(const char *a, const char *b, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (fold(a[i]) != fold(b[i]))
                        return false;
        return true;
}

struct mask *mask_new(void)
{
        return calloc(1, sizeof(struct mask));
}

struct mask *mask_free(struct mask *m)
{
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n; i++)
                free(m->v[i].s);
        free(m->v);
        free(m);
        return NULL;
}

/* Takes `s` (freed on failure). */
static int form_push(struct mask *m, char *s, size_t len)
{
        if (!s)
                return -ENOMEM;
        if (m->n == m->cap) {
                size_t cap = m->cap ? 2 * m->cap : 16;
                struct form *v = realloc(m->v, cap * sizeof(*v));
                if (!v) {
                        free(s);
                        return -ENOMEM;
                }
                m->v = v;
                m->cap = cap;
        }
        m->v[m->n++] = (struct form){.s = s, .len = len};
        m->dirty = true;
        return 0;
}

/* The code point of the UTF-8 sequence at p[0..n), and its length in
 * *ret_len; -1 when it is not valid. */
static long utf8_decode(const unsigned char *p, size_t n, size_t *ret_len)
{
        unsigned char c = p[0];
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (need == 0 || need > n)
                return -1;
        long cp = c & (0x7F >> need);
        for (size_t i = 1; i < need; i++) {
                if ((p[i] & 0xC0) != 0x80)
                        return -1;
                cp = (cp << 6) | (p[i] & 0x3F);
        }
        static const long min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[need] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return -1;
        *ret_len = need;
        return cp;
}

/* How JSON encoders write a string. */
enum {
        JSON_SLASH = 1, /* "/" as "\/" (PHP) */
        JSON_ASCII = 2, /* non-ASCII as \uXXXX, DEL too (Python's default) */
        JSON_HTML = 4,  /* "<", ">", "&" as \u003c... (Go's encoding/json) */
};

/* The value as it reads inside a JSON string, written as `how` says.
 * -EILSEQ for JSON_ASCII when the value is not UTF-8 (no encoder would
 * write it so), or -ENOMEM. */
static int json_form(const char *v, size_t len, unsigned how, char **ret, size_t *ret_len)
{
        bool slash = how & JSON_SLASH, ascii = how & JSON_ASCII, html = how & JSON_HTML;
        /* At most 6 bytes out for one in (a control character). */
        char *out = malloc(6 * len + 1);
        if (!out)
                return -ENOMEM;
        size_t k = 0;
        const unsigned char *p = (const unsigned char *)v;
        for (size_t i = 0; i < len;) {
                unsigned char c = p[i];
                const char *esc = NULL;
                switch (c) {
                case '"':
                        esc = "\\\"";
                        break;
                case '\\':
                        esc = "\\\\";
                        break;
                case '\b':
                        esc = "\\b";
                        break;
                case '\f':
                        esc = "\\f";
                        break;
                case '\n':
                        esc = "\\n";
                        break;
                case '\r':
                        esc = "\\r";
                        break;
                case '\t':
                        esc = "\\t";
                        break;
                case '/':
                        esc = slash ? "\\/" : NULL;
                        break;
                }
                if (esc) {
                        memcpy(out + k, esc, 2);
                        k += 2;
                        i++;
                } else if (c < 0x20 || (html && (c == '<' || c == '>' || c == '&')) ||
                           (ascii && c == 0x7f)) {
                        k += (size_t)sprintf(out + k, "\\u%04x", c);
                        i++;
                } else if (c < 0x80 || !ascii) {
                        out[k++] = (char)c;
                        i++;
                } else {
                        size_t n = 0;
                        long cp = utf8_decode(p + i, len - i, &n);
                        if (cp < 0) {
                                free(out);
                                return -EILSEQ;
                        }
                        if (cp >= 0x10000) {
                                cp -= 0x10000;
                                k += (size_t)sprintf(out + k, "\\u%04lx\\u%04lx",
                                                     0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                        } else {
                                k += (size_t)sprintf(out + k, "\\u%04lx", cp);
                        }
                        i += n;
                }
        }
        out[k] = '\0';
        *ret = out;
        *ret_len = k;
        return 0;
}

/* The value percent-encoded: all but RFC 3986's unreserved characters and
 * `keep`; a space as "+" when `plus` (HTML forms). */
static char *percent_form(const char *v, size_t len, const char *keep, bool plus, size_t *ret_len)
{
        static const char hex[] = "0123456789ABCDEF";
        char *out = malloc(3 * len + 1);
        if (!out)
                return NULL;
        size_t k = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)v[i];
                if (plus && c == ' ') {
                        out[k++] = '+';
                } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~' ||
                           (c && strchr(keep, c))) {
                        out[k++] = (char)c;
                } else {
                        out[k++] = '%';
                        out[k++] = hex[c >> 4];
                        out[k++] = hex[c & 15];
                }
        }
        out[k] = '\0';
        *ret_len = k;
        return out;
}

/* Add a form unless it reads as the value itself. */
static int form_add(struct mask *m, const char *v, size_t len, char *s, size_t slen)
{
        if (slen == len && memcmp(s, v, len) == 0) {
                free(s);
                return 0;
        }
        return form_push(m, s, slen);
}

/* One value and the forms it takes in text. */
static int add_forms(struct mask *m, const char *value, size_t len)
{
        if (len < MASK_MIN)
                return 0;
        int r = form_push(m, strndup(value, len), len);
        for (unsigned how = 0; r == 0 && how < 8; how++) {
                char *s = NULL;
                size_t n = 0;
                r = json_form(value, len, how, &s, &n);
                if (r == 0)
                        r = form_add(m, value, len, s, n);
                else if (r == -EILSEQ)
                        r = 0;
        }
        /* RFC 3986; JavaScript's encodeURIComponent; HTML forms. */
        static const struct {
                const char *keep;
                bool plus;
        } pct[] = {{"", false}, {"!'()*", false}, {"", true}};
        for (size_t i = 0; r == 0 && i < sizeof(pct) / sizeof(pct[0]); i++) {
                size_t n = 0;
                char *s = percent_form(value, len, pct[i].keep, pct[i].plus, &n);
                r = s ? form_add(m, value, len, s, n) : -ENOMEM;
        }
        return r;
}

/* "Scheme credentials" (an Authorization value): the credentials alone
 * are a secret too, and Basic's decoded "user:password" and password. */
static int add_credentials(struct mask *m, const char *value, size_t len)
{
        size_t i = 0;
        while (i < len && (isalnum((unsigned char)value[i]) || strchr("-._~+/", value[i])))
                i++;
        size_t scheme = i;
        while (i < len && (value[i] == ' ' || value[i] == '\t'))
                i++;
        if (scheme == 0 || i == scheme || i == len)
                return 0;
        const char *cred = value + i;
        size_t n = len - i;
        int r = add_forms(m, cred, n);
        if (r < 0 || scheme != 5 || strncasecmp(value, "basic", 5) != 0)
                return r;
        struct buf plain;
        buf_init(&plain, n);
        if (base64_decode(&plain, cred, n) == 0 && plain.len && utf8_text(plain.data, plain.len)) {
                r = add_forms(m, plain.data, plain.len);
                const char *colon = memchr(plain.data, ':', plain.len);
                if (r == 0 && colon)
                        r = add_forms(m, colon + 1, plain.len - (size_t)(colon + 1 - plain.data));
        }
        buf_free(&plain);
        return r;
}

int mask_add(struct mask *m, const char *value, size_t len)
{
        if (len < MASK_MIN)
                return 0;
        int r = add_forms(m, value, len);
        if (r == 0)
                r = add_credentials(m, value, len);
        /* A secret of several lines (a PEM key) is printed a line at a time
         * as often as whole: each line is one too. */
        for (const char *p = value, *end = value + len;
             r == 0 && memchr(value, '\n', len) && p < end;) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t n = (size_t)((nl ? nl : end) - p);
                r = add_forms(m, p, n > 0 && p[n - 1] == '\r' ? n - 1 : n);
                p = nl ? nl + 1 : end;
        }
        return r;
}

int mask_add_strv_min(struct mask *m, char *const *values, size_t min)
{
        for (size_t i = 0; values && values[i]; i++)
                if (strlen(values[i]) >= min && mask_add(m, values[i], strlen(values[i])) < 0)
                        return -ENOMEM;
        return 0;
}

int mask_add_strv(struct mask *m, char *const *values)
{
        for (size_t i = 0; values && values[i]; i++) {
                int r = mask_add(m, values[i], strlen(values[i]));
                if (r < 0)
                        return r;
        }
        return 0;
}

static int form_cmp(const void *a, const void *b)
{
        const struct form *x = a, *y = b;
        unsigned char fx = fold(x->s[0]), fy = fold(y->s[0]);
        if (fx != fy)
                return fx < fy ? -1 : 1;
        if (x->len != y->len)
                return x->len > y->len ? -1 : 1;
        for (size_t i = 0; i < x->len; i++)
                if (fold(x->s[i]) != fold(y->s[i]))
                        return fold(x->s[i]) < fold(y->s[i]) ? -1 : 1;
        return 0;
}

static void index_build(struct mask *m)
{
        if (!m->dirty)
                return;
        qsort(m->v, m->n, sizeof(*m->v), form_cmp);
        size_t k = 0;
        for (size_t i = 0; i < m->n; i++) {
                if (k > 0 && form_cmp(&m->v[k - 1], &m->v[i]) == 0) {
                        free(m->v[i].s);
                        continue;
                }
                m->v[k++] = m->v[i];
        }
        m->n = k;
        m->longest = 0;
        size_t j = 0;
        for (unsigned b = 0; b < 256; b++) {
                m->first[b] = j;
                while (j < m->n && fold(m->v[j].s[0]) == b) {
                        if (m->v[j].len > m->longest)
                                m->longest = m->v[j].len;
                        j++;
                }
        }
        m->first[256] = m->n;
        m->dirty = false;
}

size_t mask_forms(struct mask *m)
{
        if (!m)
                return 0;
        index_build(m);
        return m->n;
}

/* The length of the longest form at t[0..avail), or 0. */
static size_t match_at(const struct mask *m, const char *t, size_t avail)
{
        unsigned char b = fold(t[0]);
        for (size_t j = m->first[b]; j < m->first[b + 1]; j++)
                if (m->v[j].len <= avail && fold_eq(t, m->v[j].s, m->v[j].len))
                        return m->v[j].len;
        return 0;
}

/* The length of the longest end of o[0..c), of at least `min` bytes, that
 * is the start of a form; 0 for none. */
static size_t dangling(const struct mask *m, const char *o, size_t c, size_t min)
{
        if (!m || m->n == 0 || min > c)
                return 0;
        size_t from = c > m->longest ? c - m->longest : 0;
        for (size_t p = from; p + min <= c; p++) {
                unsigned char b = fold(o[p]);
                size_t k = c - p;
                /* Longest first: past the first form shorter than k, none
                 * of this byte can hold o[p..c) as its start. */
                for (size_t j = m->first[b]; j < m->first[b + 1] && m->v[j].len >= k; j++)
                        if (fold_eq(o + p, m->v[j].s, k))
                                return k;
        }
        return 0;
}

char *mask_text(struct mask *m, const char *text, size_t len, size_t max, unsigned flags)
{
        if (!text)
                text = "";
        if (m && m->n == 0)
                m = NULL;
        if (m)
                index_build(m);
        /* A byte once written is final: what covers it starts at or before
         * it. So the pass may stop one byte past `max`. */
        size_t room = max && max < len ? max + 1 : len;
        char *o = malloc(room + MARK_LEN + 1);
        if (!o)
                return NULL;
        size_t k = 0, until = 0;
        bool in_run = false;
        for (size_t i = 0; i < len && !(max && k > max); i++) {
                size_t hit = m ? match_at(m, text + i, len - i) : 0;
                if (i + hit > until)
                        until = i + hit;
                if (i < until) {
                        /* Each form is longer than the mark: o never
                         * outgrows the text. */
                        if (!in_run) {
                                memcpy(o + k, MASK_MARK, MARK_LEN);
                                k += MARK_LEN;
                        }
                        in_run = true;
                } else {
                        in_run = false;
                        o[k++] = text[i];
                }
        }
        size_t c = k, min = flags & MASK_CUT_BEFORE ? 1 : MASK_MIN;
        if (max && k > max) {
                c = utf8_cut(o, max);
                min = 1;
        }
        size_t d = dangling(m, o, c, min);
        if (d == 0) {
                o[c] = '\0';
                return o;
        }
        if (max && max < MARK_LEN) {
                o[0] = '\0';
                return o;
        }
        /* The start of a secret is left at the end: it goes, and the mark
         * takes its place, within `max`. What then precedes the mark must
         * not be the start of a secret either. */
        size_t p = c - d;
        if (max && p > max - MARK_LEN)
                p = max - MARK_LEN;
        p = utf8_cut(o, p);
        while ((d = dangling(m, o, p, 1)) > 0)
                p = utf8_cut(o, p - d);
        memcpy(o + p, MASK_MARK, MARK_LEN);
        o[p + MARK_LEN] = '\0';
        return o;
}

size_t mask_into(struct mask *m, const char *text, size_t len, unsigned flags, char *out,
                 size_t size)
{
        if (size == 1) { /* max 0 would mean "no limit" */
                out[0] = '\0';
                return 0;
        }
        char *s = mask_text(m, text, len, size - 1, flags);
        if (!s)
                snprintf(out, size, "%s", size > MARK_LEN ? MASK_MARK : "");
        else
                memcpy(out, s, strlen(s) + 1);
        free(s);
        return strlen(out);
}

json_t *mask_json(struct mask *m, json_t *v)
{
        if (!m || mask_forms(m) == 0 || !v)
                return json_incref(v);
        switch (json_typeof(v)) {
        case JSON_STRING: {
                char *t =
                    utf8_scrub(mask_text(m, json_string_value(v), json_string_length(v), 0, 0));
                json_t *out = t ? json_string(t) : NULL;
                free(t);
                return out;
        }
        case JSON_ARRAY: {
                json_t *out = json_array();
                size_t i;
                json_t *item;
                json_array_foreach(v, i, item)
                {
                        if (!out || json_array_append_new(out, mask_json(m, item)) < 0) {
                                json_decref(out);
                                return NULL;
                        }
                }
                return out;
        }
        case JSON_OBJECT: {
                json_t *out = json_object();
                const char *key;
                json_t *item;
                json_object_foreach(v, key, item)
                {
                        int r = out ? json_object_set_new(out, key, mask_json(m, item)) : -1;
                        if (r < 0) {
                                json_decref(out);
                                return NULL;
                        }
                }
                return out;
        }
        default:
                return json_incref(v);
        }
}

char *mask_shown(struct mask *m, const char *text, size_t len, size_t max, unsigned flags)
{
        return utf8_scrub(mask_text(m, text, len, max, flags));
}

void mask_vformat(struct mask *m, char *out, size_t size, const char *fmt, va_list ap)
{
        char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0) {
                snprintf(out, size, "out of memory");
                return;
        }
        mask_into(m, msg, strlen(msg), 0, out, size);
        utf8_scrub(out);
        free(msg);
}

int mask_err(struct mask *m, struct err *e, enum err_kind kind, int code, const char *fmt, ...)
{
        err_set(e, kind, code, "out of memory");
        va_list ap;
        va_start(ap, fmt);
        mask_vformat(m, e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        return e->code;
}
