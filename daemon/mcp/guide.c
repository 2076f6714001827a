/* The guide to corral's tools as an MCP resource, corral://guide: the
 * text of daemon/mcp/guide.md (embedded at build time), followed by what
 * this corral's sandboxes are made of, with package versions, and the MCP
 * servers its code may call. The tools' descriptions stay short and name
 * it; an agent reads it when it needs more. */
#include "mcp/internal.h"

#include "core/buf.h"
#include "mcp/tools.h"
#include "sandbox/images.h"
#include "sandbox/sandbox.h"

#include <string.h>

json_t *guide_resource(void)
{
        return json_pack("{s:s, s:s, s:s, s:s, s:s}", "uri", GUIDE_URI, "name", "guide", "title",
                         "How to use corral's tools", "description",
                         "What the tools' descriptions leave out, with examples that run as "
                         "written; and this corral's images and MCP servers.",
                         "mimeType", "text/markdown");
}

json_t *guide_read(struct mcp_server *s)
{
        struct buf b;
        buf_init(&b, 256 << 10);
        buf_append_some(&b, corral_guide, strlen(corral_guide));
        static const char head[] = "\n## This corral\n\n";
        buf_append_some(&b, head, strlen(head));
        struct buf env;
        buf_init(&env, 64 << 10);
        const struct sandbox_images *images = sandbox_mgr_images(s->mgr);
        tools_environment_text(images, sandbox_mgr_mounts(s->mgr), true, &env);
        if (env.len > 1) /* each sentence starts with a space */
                buf_append_some(&b, env.data + 1, env.len - 1);
        buf_free(&env);
        static const char first[] = " The first image is the default; `image` names another.";
        if (images && images->n > 1)
                buf_append_some(&b, first, strlen(first));
        const char *servers = s->names[0] ? s->names : "none";
        static const char srv[] = "\nMCP servers its code may call (`servers`): ";
        buf_append_some(&b, srv, strlen(srv));
        buf_append_some(&b, servers, strlen(servers));
        buf_append_some(&b, ".\n", 2);
        json_t *r = json_pack("{s:[{s:s, s:s, s:s%}]}", "contents", "uri", GUIDE_URI, "mimeType",
                              "text/markdown", "text", b.data ? b.data : "", b.len);
        buf_free(&b);
        return r;
}
