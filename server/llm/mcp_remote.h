/* mcp_remote.h - the assistant's external MCP servers (docs/assistant.md):
 * --assistant-mcp-servers-file names a JSON file holding
 * [{"name","endpoint","auth-token"}] (the reference's format; auth-token
 * optional, sent as a bearer token, never logged nor answered). Each
 * server is spoken to over MCP's Streamable HTTP (JSON or an SSE stream
 * of one response): initialize, notifications/initialized, tools/list
 * and tools/call. Its tools are offered to the model as "NAME__TOOL".
 *
 * Bounds: at most MCP_REMOTE_MAX servers, MCP_REMOTE_MAX_TOOLS tools each,
 * answers of at most 4 MiB, a 30 s timeout a request.
 * Threading: the tool lists are fetched again for each assistant request
 * (a server may change them); the list of servers is read only.
 */
#ifndef EMBER_SERVER_MCP_REMOTE_H
#define EMBER_SERVER_MCP_REMOTE_H

#include <jansson.h>

#include "buf.h"

#define MCP_REMOTE_MAX 16
#define MCP_REMOTE_MAX_TOOLS 64

struct mcp_remotes;

/* Reads the file (NULL or "": none, *out NULL). 0, or -1 with err. */
int mcp_remotes_open(const char *path, struct mcp_remotes **out, struct buf *err);
void mcp_remotes_free(struct mcp_remotes *m);

/* Appends every server's tools (llm.h tool objects, named NAME__TOOL) to
 * tools; a server that fails is left out, and its failure appended to
 * notes (one line each). */
void mcp_remotes_tools(struct mcp_remotes *m, json_t *tools, struct buf *notes);
/* Whether name is an external tool (NAME__TOOL of a configured server). */
int mcp_remotes_owns(const struct mcp_remotes *m, const char *name);
/* Calls it: 0 with *result a CallToolResult, or -1 with err. */
int mcp_remotes_call(struct mcp_remotes *m, const char *name, json_t *args, json_t **result, struct buf *err);

#endif
