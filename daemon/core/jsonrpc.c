#include "core/jsonrpc.h"

#include "core/buf.h"

#include <string.h>

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

char *jrpc_encode(json_t *msg, size_t *ret_len)
{
        if (!msg)
                return NULL;
        /* Compact output never contains a raw newline: strings escape it. */
        char *s = json_dumps(msg, JSON_COMPACT);
        json_decref(msg);
        if (!s)
                return NULL;
        size_t n = strlen(s);
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
