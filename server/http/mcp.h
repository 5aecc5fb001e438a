/* mcp.h - the Model Context Protocol server at /mcp (docs/mcp.md).
 *
 * Transport (server/http/mcp.c): JSON-RPC 2.0 over MCP's Streamable HTTP.
 * POST /mcp carries one request, notification or response, or a batch
 * (an array) of them; the answer is JSON (application/json): the response,
 * an array of responses, or 202 with no body when the POST held no
 * request. GET /mcp answers 405 (the server sends no messages of its
 * own, which the transport allows); DELETE /mcp ends a session.
 * initialize opens a session: its id comes back in the Mcp-Session-Id
 * header and every later request must send it (missing: 400; unknown,
 * expired or opened by another credential: 404, the client initializes
 * again). Protocol versions: MCP_VERSION_LATEST, _PREVIOUS and _OLDER (the
 * handshake revisions);
 * initialize answers with the client's version when it is one of them,
 * else the latest; a later MCP-Protocol-Version header naming another is
 * a 400.
 *
 * Bounds: a POST body of at most MCP_MAX_BODY (the route's limit: 413
 * beyond), MCP_MAX_BATCH messages in a batch, tool arguments of at most
 * MCP_MAX_ARGS bytes (JSON-RPC -32602 beyond), at most MCP_MAX_SESSIONS
 * sessions (the least recently used one is forgotten for a new one; one
 * unused for MCP_SESSION_IDLE_MS is forgotten), every tool's text at most
 * its max_chars argument (MCP_MAX_CHARS at most), and its whole answer at
 * most MCP_MAX_RESULT (beyond: a tool error saying what to narrow).
 *
 * DNS rebinding: the Host header (and the Origin header, when sent) must
 * name localhost, 127.0.0.1, [::1], the host of --listen (unless it is a
 * wildcard address) or one of --mcp-allowed-hosts ("*": any); else 403.
 *
 * Credentials: the route needs one whenever the server has auth (any
 * valid credential, AUTH_SIGNED_IN); each tool then checks project:read in
 * the project it reads (principal_can) and answers a tool error
 * (isError) naming the project when the credential lacks it.
 *
 * Tools and resources (server/http/mcp_tools.c) call the query functions the
 * REST handlers call (flamegraph_query, functions_query, entities_query,
 * events_query, metrics_query), with the REST API's request bodies: the
 * same validation, the same numbers.
 *
 * Thread-safety: the session table has its own lock; everything else is
 * per request.
 */
#ifndef EMBER_SERVER_MCP_H
#define EMBER_SERVER_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

#define MCP_VERSION_LATEST "2025-11-25"
#define MCP_VERSION_PREVIOUS "2025-06-18"
#define MCP_VERSION_OLDER "2025-03-26"
#define MCP_MAX_BODY (256u * 1024u)
#define MCP_MAX_BATCH 32
#define MCP_MAX_ARGS (16u * 1024u)
#define MCP_MAX_SESSIONS 1024
#define MCP_SESSION_IDLE_MS (3600 * 1000)
#define MCP_DEFAULT_CHARS 8000
#define MCP_MAX_CHARS 100000
#define MCP_MAX_RESULT (2u * 1024u * 1024u) /* a tool's whole answer, JSON */

struct mcp;
struct server;
struct principal;
struct http_req;
struct http_resp;

/* allowed_hosts: --mcp-allowed-hosts ("a,b"; may be NULL or empty);
 * listen: --listen (its host is allowed unless a wildcard). Never NULL. */
struct mcp *mcp_new(const char *allowed_hosts, const char *listen);
void mcp_free(struct mcp *m);

/* The route handlers (server/http/routes.c). */
void handle_mcp_post(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_mcp_get(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_mcp_delete(struct server *srv, const struct http_req *req, struct http_resp *resp);

/* Exposed for tests: whether a Host (or Origin) value passes. */
bool mcp_host_allowed(const struct mcp *m, const char *host);

/* server/http/mcp_tools.c. */

/* The tool catalogue: a new array of Tool objects (name, title,
 * description, inputSchema, outputSchema). */
json_t *mcp_tools_list(void);
/* Runs tool name with args (an object, or NULL) as who: 0 with *result a
 * new CallToolResult (isError true for a failure the assistant can act
 * on), or -1 for an unknown tool (err set: a JSON-RPC -32602). */
int mcp_tool_call(struct server *srv, const struct principal *who, const char *name,
		  json_t *args, json_t **result, struct buf *err);
/* resources/list (the entity lists of every project who may read),
 * resources/templates/list and resources/read: 0 with *result, or -1 with
 * err for a URI that names no resource (JSON-RPC -32002). */
json_t *mcp_resources_list(struct server *srv, const struct principal *who);
json_t *mcp_resource_templates(void);
int mcp_resource_read(struct server *srv, const struct principal *who, const char *uri,
		      json_t **result, struct buf *err);

#endif
