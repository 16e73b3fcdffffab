/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/cli/cli-mcp-msg.c: airlock mcp's strict parser of a
 * client's JSON-RPC messages and of tool arguments, and the schema made from
 * the same table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/cli/cli-mcp.h"
#include "json-cleanup.h"
#include "util.h"

/* 0 and the message, or the fault's code. */
static int parse(const char *text, struct mcp_message *m)
{
	struct mcp_fault f = {0};
	int r = mcp_message_parse(text, strlen(text), m, &f);
	if (r == 0)
		return 0;
	mcp_fault_release(&f);
	return f.code;
}

static void test_request_notification_response(void **s)
{
	(void)s;
	struct mcp_message m = {0};
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{}}", &m), 0);
	assert_int_equal(m.kind, MCP_REQUEST);
	assert_string_equal(m.method, "tools/list");
	assert_int_equal(json_integer_value(m.id), 7);
	mcp_message_release(&m);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &m), 0);
	assert_int_equal(m.kind, MCP_NOTIFICATION);
	assert_null(m.id);
	assert_null(m.params);
	mcp_message_release(&m);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":{}}", &m), 0);
	assert_int_equal(m.kind, MCP_RESPONSE);
	mcp_message_release(&m);
}

static void test_faults(void **s)
{
	(void)s;
	struct mcp_message m = {0};
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",", &m), MCP_PARSE_ERROR);
	assert_int_equal(parse("", &m), MCP_PARSE_ERROR);
	assert_int_equal(parse("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", &m), MCP_INVALID_REQUEST);
	assert_int_equal(parse("\"ping\"", &m), MCP_INVALID_REQUEST);
	assert_int_equal(parse("{\"id\":1,\"method\":\"ping\"}", &m), MCP_INVALID_REQUEST);
	assert_int_equal(parse("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", &m), MCP_INVALID_REQUEST);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", &m), MCP_INVALID_REQUEST);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", &m), MCP_INVALID_REQUEST);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", &m), MCP_INVALID_REQUEST);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}", &m),
	                 MCP_INVALID_REQUEST);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"extra\":1}", &m),
	                 MCP_INVALID_REQUEST);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}", &m), MCP_PARSE_ERROR);
	assert_int_equal(parse("{\"jsonrpc\":\"2.0\",\"result\":{}}", &m), MCP_INVALID_REQUEST);
}

static void test_fault_keeps_id(void **s)
{
	(void)s;
	struct mcp_message m = {0};
	struct mcp_fault f = {0};
	const char *t = "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":42}";
	assert_true(mcp_message_parse(t, strlen(t), &m, &f) < 0);
	assert_int_equal(f.code, MCP_INVALID_REQUEST);
	assert_string_equal(json_string_value(f.id), "abc");
	cleanup_json json_t *e = mcp_error_response(f.id, f.code, f.message);
	assert_string_equal(json_string_value(json_object_get(e, "id")), "abc");
	mcp_fault_release(&f);
}

static void test_size_limit(void **s)
{
	(void)s;
	struct mcp_message m = {0};
	struct mcp_fault f = {0};
	/* The limit is checked before parsing: the bytes need not be JSON. */
	assert_true(mcp_message_parse("x", MCP_MESSAGE_MAX + 1, &m, &f) < 0);
	assert_int_equal(f.code, MCP_INVALID_REQUEST);
	mcp_fault_release(&f);
}

static const char *const enc[] = {"utf8", "base64", NULL};
static const struct mcp_arg spec[] = {
    {"sandbox_id", MCP_ARG_STRING, true, 0, 8, NULL, "id"}, {"n", MCP_ARG_INTEGER, false, 1, 10, NULL, "n"},
    {"flag", MCP_ARG_BOOLEAN, false, 0, 0, NULL, "flag"},   {"argv", MCP_ARG_STRING_ARRAY, false, 0, 2, NULL, "argv"},
    {"env", MCP_ARG_STRING_MAP, false, 0, 2, NULL, "env"},  {"encoding", MCP_ARG_STRING, false, 0, 8, enc, "encoding"},
};

static int check(const char *text)
{
	cleanup_json json_t *args = json_loads(text, 0, NULL);
	char msg[200];
	return mcp_args_check(spec, ARRAY_SIZE(spec), args, msg, sizeof(msg));
}

static void test_args(void **s)
{
	(void)s;
	assert_int_equal(check("{\"sandbox_id\":\"sb-1\",\"n\":3,\"flag\":true,\"argv\":[\"a\",\"b\"],"
	                       "\"env\":{\"A\":\"1\"},\"encoding\":\"base64\"}"),
	                 0);
	assert_true(check("{}") < 0);                                                  /* required */
	assert_true(check("{\"sandbox_id\":\"123456789\"}") < 0);                      /* too long */
	assert_true(check("{\"sandbox_id\":\"a\\u0000b\"}") < 0);                      /* NUL */
	assert_true(check("{\"sandbox_id\":\"a\",\"n\":11}") < 0);                     /* range */
	assert_true(check("{\"sandbox_id\":\"a\",\"n\":\"3\"}") < 0);                  /* type */
	assert_true(check("{\"sandbox_id\":\"a\",\"n\":3.0}") < 0);                    /* not an integer */
	assert_true(check("{\"sandbox_id\":\"a\",\"flag\":1}") < 0);                   /* not a boolean */
	assert_true(check("{\"sandbox_id\":\"a\",\"argv\":[\"a\",\"b\",\"c\"]}") < 0); /* items */
	assert_true(check("{\"sandbox_id\":\"a\",\"argv\":[1]}") < 0);
	assert_true(check("{\"sandbox_id\":\"a\",\"env\":{\"A\":1}}") < 0);
	assert_true(check("{\"sandbox_id\":\"a\",\"encoding\":\"hex\"}") < 0); /* enum */
	assert_true(check("{\"sandbox_id\":\"a\",\"other\":1}") < 0);          /* unknown */
	char msg[200];
	assert_int_equal(mcp_args_check(spec, 0, NULL, msg, sizeof(msg)), 0); /* absent = {} */
	cleanup_json json_t *arr = json_array();
	assert_true(mcp_args_check(spec, ARRAY_SIZE(spec), arr, msg, sizeof(msg)) < 0);
}

static void test_schema(void **s)
{
	(void)s;
	cleanup_json json_t *schema = mcp_args_schema(spec, ARRAY_SIZE(spec));
	assert_string_equal(json_string_value(json_object_get(schema, "type")), "object");
	assert_true(json_is_false(json_object_get(schema, "additionalProperties")));
	json_t *req = json_object_get(schema, "required");
	assert_int_equal(json_array_size(req), 1);
	assert_string_equal(json_string_value(json_array_get(req, 0)), "sandbox_id");
	json_t *n = json_object_get(json_object_get(schema, "properties"), "n");
	assert_int_equal(json_integer_value(json_object_get(n, "maximum")), 10);
	json_t *e = json_object_get(json_object_get(schema, "properties"), "encoding");
	assert_int_equal(json_array_size(json_object_get(e, "enum")), 2);
}

static void test_versions(void **s)
{
	(void)s;
	assert_string_equal(mcp_protocol_negotiate("2025-06-18"), "2025-06-18");
	assert_string_equal(mcp_protocol_negotiate("2024-11-05"), "2024-11-05");
	assert_string_equal(mcp_protocol_negotiate("1999-01-01"), mcp_protocol_versions[0]);
	assert_string_equal(mcp_protocol_negotiate(NULL), mcp_protocol_versions[0]);
	assert_true(mcp_protocol_known("2025-03-26"));
	assert_false(mcp_protocol_known("2025-03-27"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_request_notification_response),
	    cmocka_unit_test(test_faults),
	    cmocka_unit_test(test_fault_keeps_id),
	    cmocka_unit_test(test_size_limit),
	    cmocka_unit_test(test_args),
	    cmocka_unit_test(test_schema),
	    cmocka_unit_test(test_versions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
