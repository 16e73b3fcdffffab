/* SPDX-License-Identifier: Apache-2.0 */
/* airlock mcp's parser of a client's messages (src/cli/cli-mcp-msg.c): a
 * JSON-RPC message, then its params.arguments checked against a tool's
 * argument table, then the answers built from what was parsed. Whatever the
 * input: no crash, no leak, and a fault is one of the JSON-RPC codes. */
#include <stdint.h>

#include "cli-mcp.h"
#include "json-cleanup.h"
#include "util.h"

static const char *const choices[] = {"utf8", "base64", NULL};
static const struct mcp_arg spec[] = {
    {"sandbox_id", MCP_ARG_STRING, true, 0, 64, NULL, "id"},
    {"n", MCP_ARG_INTEGER, false, 1, 3600, NULL, "n"},
    {"flag", MCP_ARG_BOOLEAN, false, 0, 0, NULL, "flag"},
    {"argv", MCP_ARG_STRING_ARRAY, false, 0, 16, NULL, "argv"},
    {"env", MCP_ARG_STRING_MAP, false, 0, 16, NULL, "env"},
    {"encoding", MCP_ARG_STRING, false, 0, 8, choices, "encoding"},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_message m = {0};
	struct mcp_fault f = {0};
	if (mcp_message_parse((const char *)data, size, &m, &f) < 0) {
		if (f.code != MCP_PARSE_ERROR && f.code != MCP_INVALID_REQUEST)
			abort();
		json_decref(mcp_error_response(f.id, f.code, f.message));
		mcp_fault_release(&f);
		return 0;
	}
	if (m.kind == MCP_REQUEST && !m.id)
		abort();
	if (m.kind != MCP_RESPONSE && !m.method)
		abort();
	char msg[200];
	json_t *args = json_object_get(m.params, "arguments");
	(void)mcp_args_check(spec, ARRAY_SIZE(spec), args, msg, sizeof(msg));
	(void)mcp_protocol_negotiate(json_string_value(json_object_get(m.params, "protocolVersion")));
	if (m.id)
		json_decref(mcp_result_response(m.id, json_object()));
	mcp_message_release(&m);
	return 0;
}
