/* SPDX-License-Identifier: Apache-2.0 */
/* airlock mcp: a Model Context Protocol server over the daemon's API
 * (docs/mcp.md). cli-mcp-msg.c parses what a client sends (pure, fuzzed);
 * cli-mcp.c speaks the protocol over stdio and streamable HTTP;
 * cli-mcp-tools.c holds the tools and resources. */
#ifndef AIRLOCK_CLI_MCP_H
#define AIRLOCK_CLI_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Max one message from a client: a line on stdio, a POST body over HTTP
 * (write_file's content and upload's archive travel in it, base64). */
#define MCP_MESSAGE_MAX (8u << 20)
/* Max "method" and string "id" of a message. */
#define MCP_METHOD_MAX 128
#define MCP_ID_MAX 256
/* Max string argument of a tool unless its spec says more. */
#define MCP_STRING_MAX 4096
/* Max text of one output stream in a tool's result (run_command, get_output). */
#define MCP_OUTPUT_MAX (64u << 10)

/* JSON-RPC 2.0 and MCP error codes. */
enum {
	MCP_PARSE_ERROR = -32700,
	MCP_INVALID_REQUEST = -32600,
	MCP_METHOD_NOT_FOUND = -32601,
	MCP_INVALID_PARAMS = -32602,
	MCP_INTERNAL_ERROR = -32603,
	MCP_RESOURCE_NOT_FOUND = -32002,
};

enum mcp_kind {
	MCP_REQUEST,      /* method and id: answered */
	MCP_NOTIFICATION, /* method, no id: never answered */
	MCP_RESPONSE,     /* result or error with an id: an answer to us (we ask nothing; ignored) */
};

struct mcp_message {
	enum mcp_kind kind;
	json_t *root;       /* owned */
	json_t *id;         /* in root: a string or an integer; NULL for a notification */
	const char *method; /* in root; NULL for a response */
	json_t *params;     /* in root, an object; NULL when absent */
};

/* What was wrong with a message: the JSON-RPC error to answer, and the id to
 * answer it with (a new reference, or NULL: answered with id null). */
struct mcp_fault {
	int code;
	char message[256];
	json_t *id;
};

/* SECURITY: buf is a client's message (hostile): at most MCP_MESSAGE_MAX
 * bytes (checked here too), one JSON object (no batch: MCP 2025-06-18 removed
 * them), "jsonrpc":"2.0", an id that is a string (<= MCP_ID_MAX) or an
 * integer, a method string (<= MCP_METHOD_MAX), params an object. 0 with
 * *ret filled (release it), or < 0 with *fault filled (release it). */
int mcp_message_parse(const char *buf, size_t len, struct mcp_message *ret, struct mcp_fault *fault);
void mcp_message_release(struct mcp_message *m);
void mcp_fault_release(struct mcp_fault *f);
/* Sets *f and returns -EINVAL. */
int mcp_fault_set(struct mcp_fault *f, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* {"jsonrpc":"2.0","id":id,"error":{"code","message"}} (id NULL: null). */
json_t *mcp_error_response(json_t *id, int code, const char *message);
/* {"jsonrpc":"2.0","id":id,"result":result}; steals result. */
json_t *mcp_result_response(json_t *id, json_t *result);

/* A tool's argument: its JSON Schema (mcp_args_schema) and its strict check
 * (mcp_args_check) come from the same table, so they cannot drift. */
enum mcp_arg_type {
	MCP_ARG_STRING,
	MCP_ARG_INTEGER,
	MCP_ARG_BOOLEAN,
	MCP_ARG_STRING_ARRAY, /* max: items */
	MCP_ARG_STRING_MAP,   /* object string -> string; max: entries */
};

struct mcp_arg {
	const char *name;
	enum mcp_arg_type type;
	bool required;
	long long min, max; /* integer: the range; string: max bytes (0: MCP_STRING_MAX); array, map: max entries */
	const char *const *choices; /* a string's allowed values, NULL-terminated (NULL: any) */
	const char *description;
};

/* SECURITY: args is a client's "arguments" (hostile): an object (NULL is {}),
 * no unknown member, each member of its type and within its limits, every
 * required member present, strings valid UTF-8 without NUL. 0, or -EINVAL
 * with msg saying which argument and why. */
int mcp_args_check(const struct mcp_arg *spec, size_t n, json_t *args, char *msg, size_t msg_size);
/* The JSON Schema of a tool's inputSchema. */
json_t *mcp_args_schema(const struct mcp_arg *spec, size_t n);

/* The protocol revisions this server speaks, newest first. */
extern const char *const mcp_protocol_versions[];
/* The version to answer an initialize that asked for `asked`: it, if we
 * speak it, else our newest (the client then decides). */
const char *mcp_protocol_negotiate(const char *asked);
bool mcp_protocol_known(const char *version);

/* ------------------------------------------------------------ tools (cli-mcp-tools.c) */

/* What a tool may say while it runs: notifications/progress (only when the
 * request had a progressToken; else progress is NULL). Returns < 0 when the
 * client is gone (the tool should stop). */
struct mcp_call {
	json_t *args;
	int (*progress)(void *ud, double done, const char *message);
	void *progress_ud;
};

struct mcp_tool {
	const char *name;
	const char *title;
	const char *description;
	const struct mcp_arg *args;
	size_t n_args;
	bool read_only, destructive;
	/* The CallToolResult (content, isError); never NULL. */
	json_t *(*run)(struct mcp_call *call);
};

extern const struct mcp_tool mcp_tools[];
extern const size_t mcp_tools_count;
const struct mcp_tool *mcp_tool_find(const char *name);

/* resources/list, resources/templates/list and resources/read results; a
 * read of an unknown or unreadable resource fills *fault. */
json_t *mcp_resources_list(void);
json_t *mcp_resource_templates(void);
int mcp_resource_read(const char *uri, json_t **ret_result, struct mcp_fault *fault);

/* airlock mcp [--http ADDR:PORT] */
int cli_cmd_mcp(int argc, char **argv);

#endif
