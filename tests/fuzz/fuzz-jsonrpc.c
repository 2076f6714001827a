/* jrpc_parse on arbitrary bytes. Beyond "no crash, no leak": every outcome
 * is one of the documented codes, every message is valid UTF-8 (it is sent
 * to the host as a JSON string), and every accepted message re-encodes to
 * one line that parses back to the same kind. */
#include "core/jsonrpc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_line(const char *line, size_t len)
{
        if (!line || len == 0 || line[len - 1] != '\n' || memchr(line, '\n', len - 1) ||
            strlen(line) != len)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct jrpc_msg m;
        json_t *id = NULL;
        struct err e = {0};
        int rc = jrpc_parse((const char *)data, size, &m, &id, &e);
        size_t len;
        if (rc == 0) {
                if (m.kind != JRPC_REQUEST && m.kind != JRPC_NOTIFICATION &&
                    m.kind != JRPC_RESULT && m.kind != JRPC_ERROR)
                        abort();
                if ((m.kind == JRPC_REQUEST || m.kind == JRPC_NOTIFICATION) &&
                    (!m.method || !*m.method))
                        abort();
                if (m.params && !json_is_object(m.params) && !json_is_array(m.params))
                        abort();
                char *line = jrpc_encode(json_incref(m.root), &len);
                check_line(line, len);
                struct jrpc_msg again;
                json_t *id2 = NULL;
                if (jrpc_parse(line, len - 1, &again, &id2, &e) != 0 || again.kind != m.kind ||
                    !json_equal(again.root, m.root))
                        abort();
                json_decref(id2);
                jrpc_msg_done(&again);
                free(line);
                /* A reply to a request always encodes. */
                if (m.kind == JRPC_REQUEST) {
                        line = jrpc_encode(jrpc_result(m.id, json_object()), &len);
                        check_line(line, len);
                        free(line);
                }
                jrpc_msg_done(&m);
        } else {
                if (rc != JRPC_PARSE_ERROR && rc != JRPC_INVALID_REQUEST)
                        abort();
                if (!e.msg[0])
                        abort();
                if (id && !json_is_string(id) && !json_is_number(id))
                        abort();
                /* The error reply, with the message, must encode as is. */
                json_t *msg = json_string(e.msg);
                if (!msg)
                        abort();
                json_decref(msg);
                char *line = jrpc_encode(
                    jrpc_error(rc == JRPC_PARSE_ERROR ? NULL : id, rc, e.msg, NULL), &len);
                check_line(line, len);
                free(line);
        }
        json_decref(id);
        return 0;
}
