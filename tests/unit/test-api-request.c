/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the API request parsers (src/daemon/api/api-request.c): every
 * limit of api-request.h on both sides, unknown fields, wrong types,
 * malformed JSON. (POST /v1/secrets: test-secrets.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "api-request.h"
#include "network-policy.h"
#include "util.h"

/* ------------------------------------------------------------ helpers */

/* A string of n copies of c (caller frees). */
static char *rep(char c, size_t n)
{
	char *s = xmalloc(n + 1);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* Serialises j (stolen) to a body of exactly its length, without a NUL after
 * it, so that a parser reading past len trips ASan. */
struct body {
	char *data;
	size_t len;
};

static struct body body_json(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
	assert_non_null(s);
	json_decref(j);
	struct body b = {.len = strlen(s)};
	b.data = xmalloc(b.len ? b.len : 1);
	memcpy(b.data, s, b.len);
	free(s);
	return b;
}

static struct body body_str(const char *s)
{
	struct body b = {.len = strlen(s)};
	b.data = xmalloc(b.len ? b.len : 1);
	memcpy(b.data, s, b.len);
	return b;
}

static int create_ok(struct body b, unsigned host_mib, struct create_request *r)
{
	struct al_error err = {0};
	int rc = create_request_parse(b.data, b.len, host_mib, r, &err);
	if (rc < 0)
		fail_msg("create rejected %.*s: %s", (int)MIN(b.len, 200), b.data, err.message);
	free(b.data);
	return rc;
}

/* Expects a rejection whose message mentions `field`, and an untouched output. */
static void create_bad(struct body b, unsigned host_mib, const char *field)
{
	struct create_request r, before;
	memset(&r, 0xa5, sizeof(r));
	memcpy(&before, &r, sizeof(r));
	struct al_error err = {0};
	int rc = create_request_parse(b.data, b.len, host_mib, &r, &err);
	if (rc >= 0)
		fail_msg("create accepted %.*s", (int)MIN(b.len, 200), b.data);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	if (field && !strstr(err.message, field))
		fail_msg("create: message \"%s\" does not name \"%s\"", err.message, field);
	assert_memory_equal(&r, &before, sizeof(r));
	free(b.data);
}

static void exec_ok(struct body b, struct exec_request *r)
{
	struct al_error err = {0};
	if (exec_request_parse(b.data, b.len, r, &err) < 0)
		fail_msg("exec rejected %.*s: %s", (int)MIN(b.len, 200), b.data, err.message);
	free(b.data);
}

static void exec_bad(struct body b, const char *field)
{
	struct exec_request r, before;
	memset(&r, 0xa5, sizeof(r));
	memcpy(&before, &r, sizeof(r));
	struct al_error err = {0};
	int rc = exec_request_parse(b.data, b.len, &r, &err);
	if (rc >= 0)
		fail_msg("exec accepted %.*s", (int)MIN(b.len, 200), b.data);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	if (field && !strstr(err.message, field))
		fail_msg("exec: message \"%s\" does not name \"%s\"", err.message, field);
	assert_memory_equal(&r, &before, sizeof(r));
	free(b.data);
}

/* {"cmd":["true"], key: value} */
static struct body exec_with(const char *key, json_t *value)
{
	json_t *j = json_pack("{s:[s]}", "cmd", "true");
	json_object_set_new(j, key, value);
	return body_json(j);
}

static struct body create_with(const char *key, json_t *value)
{
	json_t *j = json_object();
	json_object_set_new(j, key, value);
	return body_json(j);
}

/* An object of n entries "<prefix>N": value. */
static json_t *object_of(size_t n, const char *prefix, const char *value)
{
	json_t *o = json_object();
	for (size_t i = 0; i < n; i++) {
		char k[64];
		snprintf(k, sizeof(k), "%s%zu", prefix, i);
		json_object_set_new(o, k, json_string(value));
	}
	return o;
}

/* ------------------------------------------------------------ create */

static void test_create_defaults(void **state)
{
	(void)state;
	struct create_request r;
	create_ok(body_str(""), 0, &r);
	assert_string_equal(r.template_name, "minimal");
	assert_int_equal(r.vcpus, 1);
	assert_int_equal(r.memory_mib, 256);
	assert_int_equal(r.env.n, 0);
	assert_int_equal(r.metadata.n, 0);
	create_request_release(&r);

	create_ok(body_str("{}"), 0, &r);
	assert_string_equal(r.template_name, "minimal");
	create_request_release(&r);

	/* null means "the default". */
	create_ok(body_str("{\"template\":null,\"vcpus\":null,\"memory_mib\":null,\"env\":null,\"metadata\":null}"), 0,
	          &r);
	assert_string_equal(r.template_name, "minimal");
	assert_int_equal(r.vcpus, 1);
	create_request_release(&r);
}

static void test_create_full(void **state)
{
	(void)state;
	struct create_request r;
	create_ok(body_json(json_pack("{s:s,s:i,s:i,s:{s:s,s:s},s:{s:s}}", "template", "base", "vcpus", 2, "memory_mib",
	                              512, "env", "FOO", "bar", "_x9", "", "metadata", "owner", "alice")),
	          0, &r);
	assert_string_equal(r.template_name, "base");
	assert_int_equal(r.vcpus, 2);
	assert_int_equal(r.memory_mib, 512);
	assert_int_equal(r.env.n, 2);
	for (size_t i = 0; i < r.env.n; i++) {
		if (!strcmp(r.env.keys[i], "FOO"))
			assert_string_equal(r.env.values[i], "bar");
		else
			assert_string_equal(r.env.keys[i], "_x9");
	}
	assert_int_equal(r.metadata.n, 1);
	assert_string_equal(r.metadata.keys[0], "owner");
	assert_string_equal(r.metadata.values[0], "alice");
	create_request_release(&r);
}

static void test_create_template(void **state)
{
	(void)state;
	struct create_request r;
	cleanup_free char *name63 = rep('a', SANDBOX_TEMPLATE_NAME_MAX);
	cleanup_free char *name64 = rep('a', SANDBOX_TEMPLATE_NAME_MAX + 1);
	create_ok(create_with("template", json_string(name63)), 0, &r);
	assert_string_equal(r.template_name, name63);
	create_request_release(&r);
	create_ok(create_with("template", json_string("a-b_9")), 0, &r);
	create_request_release(&r);

	const char *bad[] = {"", "-a", "_a", "Minimal", "a b", "../etc", "a/b", ".", "é"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		create_bad(create_with("template", json_string(bad[i])), 0, "template");
	create_bad(create_with("template", json_string(name64)), 0, "template");
	create_bad(body_str("{\"template\":\"mini\\u0000mal\"}"), 0, NULL);
	create_bad(create_with("template", json_integer(1)), 0, "template");
	create_bad(create_with("template", json_pack("[s]", "minimal")), 0, "template");
}

static void test_create_vcpus(void **state)
{
	(void)state;
	struct create_request r;
	create_ok(create_with("vcpus", json_integer(1)), 0, &r);
	assert_int_equal(r.vcpus, 1);
	create_ok(create_with("vcpus", json_integer(SANDBOX_VCPUS_MAX)), 0, &r);
	assert_int_equal(r.vcpus, SANDBOX_VCPUS_MAX);

	create_bad(create_with("vcpus", json_integer(0)), 0, "vcpus");
	create_bad(create_with("vcpus", json_integer(SANDBOX_VCPUS_MAX + 1)), 0, "vcpus");
	create_bad(create_with("vcpus", json_integer(999)), 0, "vcpus");
	create_bad(create_with("vcpus", json_integer(-1)), 0, "vcpus");
	create_bad(create_with("vcpus", json_integer(INT64_MIN)), 0, "vcpus");
	create_bad(create_with("vcpus", json_integer((json_int_t)1 << 32 | 1)), 0, "vcpus");
	create_bad(create_with("vcpus", json_string("2")), 0, "vcpus");
	create_bad(create_with("vcpus", json_real(2.0)), 0, "vcpus");
	create_bad(create_with("vcpus", json_true()), 0, "vcpus");
	create_bad(body_str("{\"vcpus\":99999999999999999999999}"), 0, NULL);
}

static void test_create_memory(void **state)
{
	(void)state;
	struct create_request r;
	create_ok(create_with("memory_mib", json_integer(SANDBOX_MEMORY_MIB_MIN)), 0, &r);
	assert_int_equal(r.memory_mib, SANDBOX_MEMORY_MIB_MIN);
	create_ok(create_with("memory_mib", json_integer(SANDBOX_MEMORY_MIB_MAX)), 0, &r);
	assert_int_equal(r.memory_mib, SANDBOX_MEMORY_MIB_MAX);
	create_bad(create_with("memory_mib", json_integer(SANDBOX_MEMORY_MIB_MIN - 1)), 0, "memory_mib");
	create_bad(create_with("memory_mib", json_integer(SANDBOX_MEMORY_MIB_MAX + 1)), 0, "memory_mib");
	create_bad(create_with("memory_mib", json_integer(0)), 0, "memory_mib");
	create_bad(create_with("memory_mib", json_string("256")), 0, "memory_mib");
	create_bad(create_with("memory_mib", json_real(256.5)), 0, "memory_mib");

	/* "and at most the host's memory" */
	create_ok(create_with("memory_mib", json_integer(1024)), 1024, &r);
	assert_int_equal(r.memory_mib, 1024);
	create_bad(create_with("memory_mib", json_integer(1025)), 1024, "memory_mib");
	/* A host bigger than the maximum does not raise the maximum. */
	create_bad(create_with("memory_mib", json_integer(SANDBOX_MEMORY_MIB_MAX + 1)), 1u << 20, "memory_mib");
}

static void test_create_env(void **state)
{
	(void)state;
	struct create_request r;
	create_ok(create_with("env", object_of(ENV_ENTRIES_MAX, "V", "x")), 0, &r);
	assert_int_equal(r.env.n, ENV_ENTRIES_MAX);
	create_request_release(&r);
	create_bad(create_with("env", object_of(ENV_ENTRIES_MAX + 1, "V", "x")), 0, "env");

	cleanup_free char *name_max = rep('N', ENV_NAME_MAX);
	cleanup_free char *name_over = rep('N', ENV_NAME_MAX + 1);
	cleanup_free char *value_max = rep('v', ENV_VALUE_MAX);
	cleanup_free char *value_over = rep('v', ENV_VALUE_MAX + 1);
	create_ok(create_with("env", json_pack("{s:s}", name_max, value_max)), 0, &r);
	assert_string_equal(r.env.keys[0], name_max);
	assert_int_equal(strlen(r.env.values[0]), ENV_VALUE_MAX);
	create_request_release(&r);
	create_bad(create_with("env", json_pack("{s:s}", name_over, "x")), 0, "env");
	create_bad(create_with("env", json_pack("{s:s}", "A", value_over)), 0, "env");

	const char *bad_names[] = {"", "1A", "A-B", "A=B", "A B", "é", "PATH\n"};
	for (size_t i = 0; i < ARRAY_SIZE(bad_names); i++)
		create_bad(create_with("env", json_pack("{s:s}", bad_names[i], "x")), 0, "env");
	create_bad(create_with("env", json_pack("{s:i}", "A", 1)), 0, "env");
	create_bad(create_with("env", json_pack("{s:n}", "A")), 0, "env");
	create_bad(create_with("env", json_pack("[s]", "A=1")), 0, "env");
	create_bad(create_with("env", json_string("A=1")), 0, "env");
	create_bad(body_str("{\"env\":{\"A\":\"x\\u0000y\"}}"), 0, NULL);
}

static void test_create_metadata(void **state)
{
	(void)state;
	struct create_request r;
	create_ok(create_with("metadata", object_of(METADATA_ENTRIES_MAX, "k", "v")), 0, &r);
	assert_int_equal(r.metadata.n, METADATA_ENTRIES_MAX);
	create_request_release(&r);
	create_bad(create_with("metadata", object_of(METADATA_ENTRIES_MAX + 1, "k", "v")), 0, "metadata");

	cleanup_free char *key_max = rep('k', METADATA_KEY_MAX);
	cleanup_free char *key_over = rep('k', METADATA_KEY_MAX + 1);
	cleanup_free char *value_max = rep('v', METADATA_VALUE_MAX);
	cleanup_free char *value_over = rep('v', METADATA_VALUE_MAX + 1);
	create_ok(create_with("metadata", json_pack("{s:s,s:s}", key_max, value_max, "any key: é", "")), 0, &r);
	assert_int_equal(r.metadata.n, 2);
	create_request_release(&r);
	create_bad(create_with("metadata", json_pack("{s:s}", key_over, "v")), 0, "metadata");
	create_bad(create_with("metadata", json_pack("{s:s}", "", "v")), 0, "metadata");
	create_bad(create_with("metadata", json_pack("{s:s}", "k", value_over)), 0, "metadata");
	create_bad(create_with("metadata", json_pack("{s:b}", "k", 1)), 0, "metadata");
	create_bad(create_with("metadata", json_integer(3)), 0, "metadata");
}

static void test_create_malformed(void **state)
{
	(void)state;
	const char *bad[] = {
	    "{",
	    "{\"vcpus\":",
	    "{\"vcpus\":1,}",
	    "nul",
	    "[]",
	    "\"minimal\"",
	    "1",
	    "null",
	    "{} {}",
	    "{'vcpus':1}",
	    "\xff\xfe{}",
	    "{\"template\":\"\xc3\x28\"}",
	    "{\"vcpus\":1, \"vcpus\":2}", /* duplicate keys */
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		create_bad(body_str(bad[i]), 0, NULL);
	/* A NUL inside the body is not the end of it. */
	struct body b = {.data = xmalloc(5), .len = 5};
	memcpy(b.data, "{}\0{}", 5);
	create_bad(b, 0, NULL);
}

static void test_create_unknown_field(void **state)
{
	(void)state;
	create_bad(create_with("templat", json_string("minimal")), 0, "templat");
	create_bad(create_with("VCPUS", json_integer(1)), 0, "VCPUS");
	create_bad(create_with("cmd", json_pack("[s]", "sh")), 0, "cmd");
	create_bad(create_with("", json_null()), 0, "unknown");
}

/* ------------------------------------------------------------ exec */

/* The operator's ceiling (issue 17) as the tests' fake internet has it: the
 * documentation ranges count as public. */
static void ceiling_set_test_nets(void)
{
	static const char *const nets[] = {"203.0.113.0/24", "2001:db8::/32"};
	struct policy_ceiling c;
	struct al_error err = {0};
	assert_int_equal(network_ceiling_parse(NULL, nets, ARRAY_SIZE(nets), &c, &err), 0);
	network_policy_set_ceiling(&c);
}

static void test_create_network(void **state)
{
	(void)state;
	struct create_request r;
	ceiling_set_test_nets();
	create_ok(body_str("{}"), 0, &r);
	assert_null(r.network_json); /* absent: the daemon's default applies */
	create_request_release(&r);

	create_ok(body_str("{\"network\":{\"deny\":[\"evil.example.com\"],\"allow\":[\"*.Example.COM\",\"a.b:8443\","
	                   "\"203.0.113.0/24:22\",\"[2001:db8::1]\"]}}"),
	          0, &r);
	/* Canonical text: sorted keys, both lists, rules as given (the gateway
	 * canonicalises them once more itself). */
	assert_string_equal(r.network_json, "{\"allow\":[\"*.Example.COM\",\"a.b:8443\",\"203.0.113.0/24:22\","
	                                    "\"[2001:db8::1]\"],\"deny\":[\"evil.example.com\"]}");
	create_request_release(&r);
	create_ok(body_str("{\"network\":{}}"), 0, &r);
	assert_string_equal(r.network_json, "{\"allow\":[],\"deny\":[]}");
	create_request_release(&r);
	/* Issue 6: TLS inspection and pinned hosts; an empty pinned list is
	 * left out; issue 17: an explicit "tls" is kept (no "tls": inspect,
	 * the default). */
	create_ok(body_str("{\"network\":{\"tls\":\"passthrough\",\"pinned\":[]}}"), 0, &r);
	assert_string_equal(r.network_json, "{\"allow\":[],\"deny\":[],\"tls\":\"passthrough\"}");
	create_request_release(&r);
	create_ok(body_str("{\"network\":{\"tls\":\"inspect\",\"pinned\":[\"*.bank.example\"],\"allow\":[\"a.b\"]}}"),
	          0, &r);
	assert_string_equal(r.network_json,
	                    "{\"allow\":[\"a.b\"],\"deny\":[],\"pinned\":[\"*.bank.example\"],\"tls\":\"inspect\"}");
	create_request_release(&r);

	static const char *const bad[] = {
	    "[]",
	    "{\"allow\":\"example.com\"}",
	    "{\"allow\":[1]}",
	    "{\"allow\":[\"*\"]}",
	    "{\"allow\":[\"*.com\"]}",
	    "{\"allow\":[\"*example.com\"]}",
	    "{\"allow\":[\"a.*.example.com\"]}",
	    "{\"allow\":[\"0x7f.0.0.1\"]}",
	    "{\"allow\":[\"127.1\"]}",
	    "{\"allow\":[\"203.0.113.1/24\"]}",
	    "{\"allow\":[\"example.com:0\"]}",
	    "{\"allow\":[\"example.com:65536\"]}",
	    "{\"deny\":[\"exa mple.com\"]}",
	    "{\"allow\":[],\"tls\":\"decrypt\"}",
	    "{\"allow\":[],\"tls\":true}",
	    "{\"pinned\":[\"203.0.113.0/24\"]}",
	    "{\"pinned\":[\"203.0.113.7\"]}",
	    "{\"allow\":[],\"other\":1}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		json_error_t je;
		create_bad(create_with("network", json_loads(bad[i], 0, &je)), 0, "network");
	}
	/* 513 rules */
	json_t *many = json_array();
	for (int i = 0; i < 513; i++)
		json_array_append_new(many, json_sprintf("h%d.example.com", i));
	create_bad(create_with("network", json_pack("{s:o}", "allow", many)), 0, "512");

	/* Outside the ceiling: 403, naming the rule and the ceiling. */
	static const char *const outside[] = {
	    "{\"allow\":[\"169.254.169.254\"]}",
	    "{\"allow\":[\"0.0.0.0/0:22\"]}",
	    "{\"allow\":[\"10.0.0.0/8\"]}",
	    "{\"allow\":[\"a.b\",\"metadata.google.internal\"]}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(outside); i++) {
		struct al_error err = {0};
		struct body b = create_with("network", json_loads(outside[i], 0, NULL));
		assert_true(create_request_parse(b.data, b.len, 0, &r, &err) < 0);
		assert_int_equal(err.code, AL_ERR_FORBIDDEN);
		assert_non_null(strstr(err.message, "outside the operator's network ceiling (public addresses, "
		                                    "203.0.113.0/24, 2001:db8::/32)"));
		free(b.data);
	}
	/* Deny rules open nothing: never checked. */
	create_ok(body_str("{\"network\":{\"deny\":[\"10.0.0.0/8\",\"169.254.169.254\"]}}"), 0, &r);
	create_request_release(&r);
}

static void test_exec_defaults(void **state)
{
	(void)state;
	struct exec_request r;
	exec_ok(body_str("{\"cmd\":[\"sh\",\"-c\",\"echo hi; exit 3\"]}"), &r);
	assert_int_equal(r.argc, 3);
	assert_string_equal(r.argv[0], "sh");
	assert_string_equal(r.argv[2], "echo hi; exit 3");
	assert_null(r.argv[3]);
	assert_int_equal(r.env.n, 0);
	assert_string_equal(r.cwd, "/");
	assert_null(r.stdin_data);
	assert_int_equal(r.stdin_len, 0);
	assert_int_equal(r.uid, 0);
	assert_int_equal(r.gid, 0);
	assert_int_equal(r.timeout_s, EXEC_TIMEOUT_S_DEFAULT);
	assert_int_equal(r.max_output_bytes, EXEC_OUTPUT_DEFAULT);
	exec_request_release(&r);
}

static void test_exec_cmd(void **state)
{
	(void)state;
	struct exec_request r;
	json_t *many = json_array();
	for (size_t i = 0; i < EXEC_ARGV_MAX; i++)
		json_array_append_new(many, json_string("a"));
	exec_ok(body_json(json_pack("{s:o}", "cmd", json_deep_copy(many))), &r);
	assert_int_equal(r.argc, EXEC_ARGV_MAX);
	exec_request_release(&r);
	json_array_append_new(many, json_string("a"));
	exec_bad(body_json(json_pack("{s:o}", "cmd", many)), "cmd");

	cleanup_free char *arg_max = rep('x', EXEC_ARG_MAX);
	cleanup_free char *arg_over = rep('x', EXEC_ARG_MAX + 1);
	exec_ok(body_json(json_pack("{s:[s,s]}", "cmd", "echo", arg_max)), &r);
	assert_int_equal(strlen(r.argv[1]), EXEC_ARG_MAX);
	exec_request_release(&r);
	exec_bad(body_json(json_pack("{s:[s,s]}", "cmd", "echo", arg_over)), "cmd[1]");

	/* Total: 8 x 128 KiB = 1 MiB is fine, one byte more is not. */
	json_t *total = json_array();
	for (int i = 0; i < 8; i++)
		json_array_append_new(total, json_string(arg_max));
	exec_ok(body_json(json_pack("{s:o}", "cmd", json_deep_copy(total))), &r);
	exec_request_release(&r);
	json_array_append_new(total, json_string("y"));
	exec_bad(body_json(json_pack("{s:o}", "cmd", total)), "cmd");

	exec_bad(body_str("{}"), "cmd");
	exec_bad(body_str("{\"cmd\":null}"), "cmd");
	exec_bad(body_str("{\"cmd\":[]}"), "cmd");
	exec_bad(body_str("{\"cmd\":[\"\"]}"), "cmd[0]");
	exec_bad(body_str("{\"cmd\":\"echo hi\"}"), "cmd");
	exec_bad(body_str("{\"cmd\":[\"echo\",1]}"), "cmd[1]");
	exec_bad(body_str("{\"cmd\":[\"echo\",null]}"), "cmd[1]");
	exec_bad(body_str("{\"cmd\":[[\"echo\"]]}"), "cmd[0]");
	exec_bad(body_str("{\"cmd\":[\"a\\u0000b\"]}"), NULL);
}

static void test_exec_env_and_cwd(void **state)
{
	(void)state;
	struct exec_request r;
	exec_ok(exec_with("env", json_pack("{s:s}", "FOO", "override")), &r);
	assert_int_equal(r.env.n, 1);
	assert_string_equal(r.env.keys[0], "FOO");
	assert_string_equal(r.env.values[0], "override");
	exec_request_release(&r);
	exec_ok(exec_with("env", object_of(ENV_ENTRIES_MAX, "E", "")), &r);
	exec_request_release(&r);
	exec_bad(exec_with("env", object_of(ENV_ENTRIES_MAX + 1, "E", "")), "env");
	exec_bad(exec_with("env", json_pack("{s:s}", "9", "x")), "env");
	exec_bad(exec_with("env", json_pack("[]")), "env");

	exec_ok(exec_with("cwd", json_string("/tmp")), &r);
	assert_string_equal(r.cwd, "/tmp");
	exec_request_release(&r);
	char cwd_max[EXEC_CWD_MAX + 2];
	memset(cwd_max, 'd', sizeof(cwd_max));
	cwd_max[0] = '/';
	cwd_max[EXEC_CWD_MAX] = '\0';
	exec_ok(exec_with("cwd", json_string(cwd_max)), &r);
	assert_int_equal(strlen(r.cwd), EXEC_CWD_MAX);
	exec_request_release(&r);
	cwd_max[EXEC_CWD_MAX] = 'd';
	cwd_max[EXEC_CWD_MAX + 1] = '\0';
	exec_bad(exec_with("cwd", json_string(cwd_max)), "cwd");
	exec_bad(exec_with("cwd", json_string("tmp")), "cwd");
	exec_bad(exec_with("cwd", json_string("")), "cwd");
	exec_bad(exec_with("cwd", json_integer(1)), "cwd");
	exec_bad(body_str("{\"cmd\":[\"pwd\"],\"cwd\":\"/t\\u0000mp\"}"), NULL);
}

static void test_exec_stdin(void **state)
{
	(void)state;
	struct exec_request r;
	exec_ok(exec_with("stdin", json_string("hello\n")), &r);
	assert_int_equal(r.stdin_len, 6);
	assert_memory_equal(r.stdin_data, "hello\n", 6);
	exec_request_release(&r);

	exec_ok(body_json(json_pack("{s:[s],s:s,s:s}", "cmd", "cat", "stdin", "AAEC/w==", "stdin_encoding", "base64")),
	        &r);
	assert_int_equal(r.stdin_len, 4);
	assert_memory_equal(r.stdin_data, "\x00\x01\x02\xff", 4);
	exec_request_release(&r);

	exec_ok(body_json(json_pack("{s:[s],s:s,s:s}", "cmd", "cat", "stdin", "x", "stdin_encoding", "utf8")), &r);
	assert_int_equal(r.stdin_len, 1);
	exec_request_release(&r);

	/* 8 MiB is the limit, decoded, in either encoding. */
	cleanup_free char *max = rep('s', EXEC_STDIN_MAX);
	cleanup_free char *over = rep('s', EXEC_STDIN_MAX + 1);
	exec_ok(exec_with("stdin", json_string(max)), &r);
	assert_int_equal(r.stdin_len, EXEC_STDIN_MAX);
	exec_request_release(&r);
	exec_bad(exec_with("stdin", json_string(over)), "stdin");

	cleanup_free uint8_t *raw = xcalloc(1, EXEC_STDIN_MAX + 1);
	cleanup_free char *b64_max = base64_encode(raw, EXEC_STDIN_MAX, NULL);
	cleanup_free char *b64_over = base64_encode(raw, EXEC_STDIN_MAX + 1, NULL);
	exec_ok(body_json(json_pack("{s:[s],s:s,s:s}", "cmd", "cat", "stdin", b64_max, "stdin_encoding", "base64")),
	        &r);
	assert_int_equal(r.stdin_len, EXEC_STDIN_MAX);
	exec_request_release(&r);
	exec_bad(body_json(json_pack("{s:[s],s:s,s:s}", "cmd", "cat", "stdin", b64_over, "stdin_encoding", "base64")),
	         "stdin");

	exec_bad(body_json(json_pack("{s:[s],s:s,s:s}", "cmd", "cat", "stdin", "AAE", "stdin_encoding", "base64")),
	         "stdin");
	exec_bad(body_json(json_pack("{s:[s],s:s,s:s}", "cmd", "cat", "stdin", "!!!!", "stdin_encoding", "base64")),
	         "stdin");
	exec_bad(body_json(json_pack("{s:[s],s:s,s:s}", "cmd", "cat", "stdin", "x", "stdin_encoding", "latin1")),
	         "stdin_encoding");
	exec_bad(exec_with("stdin_encoding", json_integer(1)), "stdin_encoding");
	exec_bad(exec_with("stdin", json_integer(1)), "stdin");
	exec_bad(exec_with("stdin", json_pack("[i]", 1)), "stdin");
}

static void test_exec_numbers(void **state)
{
	(void)state;
	struct exec_request r;
	exec_ok(body_json(json_pack("{s:[s],s:i,s:i,s:i,s:I}", "cmd", "id", "uid", EXEC_ID_MAX, "gid", EXEC_ID_MAX,
	                            "timeout_s", EXEC_TIMEOUT_S_MAX, "max_output_bytes", (json_int_t)EXEC_OUTPUT_MAX)),
	        &r);
	assert_int_equal(r.uid, EXEC_ID_MAX);
	assert_int_equal(r.gid, EXEC_ID_MAX);
	assert_int_equal(r.timeout_s, EXEC_TIMEOUT_S_MAX);
	assert_int_equal(r.max_output_bytes, EXEC_OUTPUT_MAX);
	exec_request_release(&r);
	exec_ok(body_json(json_pack("{s:[s],s:i,s:i,s:i,s:i}", "cmd", "id", "uid", 0, "gid", 0, "timeout_s", 1,
	                            "max_output_bytes", 1)),
	        &r);
	assert_int_equal(r.timeout_s, 1);
	assert_int_equal(r.max_output_bytes, 1);
	exec_request_release(&r);

	exec_bad(exec_with("uid", json_integer(EXEC_ID_MAX + 1)), "uid");
	exec_bad(exec_with("uid", json_integer(-1)), "uid");
	exec_bad(exec_with("gid", json_integer(EXEC_ID_MAX + 1)), "gid");
	exec_bad(exec_with("gid", json_string("0")), "gid");
	exec_bad(exec_with("timeout_s", json_integer(0)), "timeout_s");
	exec_bad(exec_with("timeout_s", json_integer(EXEC_TIMEOUT_S_MAX + 1)), "timeout_s");
	exec_bad(exec_with("timeout_s", json_real(1.5)), "timeout_s");
	exec_bad(exec_with("max_output_bytes", json_integer(0)), "max_output_bytes");
	exec_bad(exec_with("max_output_bytes", json_integer((json_int_t)EXEC_OUTPUT_MAX + 1)), "max_output_bytes");
	exec_bad(exec_with("max_output_bytes", json_integer(INT64_MAX)), "max_output_bytes");
	exec_bad(exec_with("uid", json_false()), "uid");
}

static void test_exec_malformed_and_unknown(void **state)
{
	(void)state;
	const char *bad[] = {"",
	                     "{",
	                     "[\"echo\"]",
	                     "null",
	                     "{\"cmd\":[\"a\"],}",
	                     "{\"cmd\":[\"a\"]} x",
	                     "{\"cmd\":[\"a\"],\"cmd\":[\"b\"]}"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		exec_bad(body_str(bad[i]), NULL);
	exec_bad(exec_with("command", json_pack("[s]", "a")), "command");
	exec_bad(exec_with("timeout", json_integer(1)), "timeout");
	exec_bad(exec_with("template", json_string("minimal")), "template");
	/* Only len bytes are the body: what follows is not parsed. */
	struct exec_request r;
	const char *s = "{\"cmd\":[\"a\"]}GARBAGE";
	struct body b = {.len = strlen(s) - 7};
	b.data = xmalloc(strlen(s));
	memcpy(b.data, s, strlen(s));
	exec_ok(b, &r);
	assert_string_equal(r.argv[0], "a");
	exec_request_release(&r);
}

static void test_name_validators(void **state)
{
	(void)state;
	assert_true(template_name_valid("minimal"));
	assert_true(template_name_valid("0"));
	assert_false(template_name_valid(""));
	assert_false(template_name_valid("-x"));
	assert_true(env_name_valid("_"));
	assert_true(env_name_valid("a1"));
	assert_false(env_name_valid("1a"));
	assert_false(env_name_valid(""));
}

/* ------------------------------------------------------------ tokens */

static void expect_bad(int r, const struct al_error *err, enum al_error_code code, const char *needle)
{
	assert_true(r < 0);
	assert_int_equal(err->code, code);
	if (needle && !strstr(err->message, needle))
		fail_msg("\"%s\" not in \"%s\"", needle, err->message);
}

#define PARSE_TOKEN(s, ret, err) token_create_request_parse((s), strlen(s), (ret), (err))

#define PARSE_QUOTA(s, ret, err) quota_request_parse((s), strlen(s), (ret), (err))

static void test_quota_request_parse(void **state)
{
	(void)state;
	struct tenant_quota q;
	struct al_error err = {0};
	assert_int_equal(PARSE_QUOTA("{\"max_sandboxes\":2,\"max_vcpus\":8,\"max_memory_mib\":4096}", &q, &err), 0);
	assert_int_equal(q.max_sandboxes, 2);
	assert_int_equal(q.max_vcpus, 8);
	assert_int_equal(q.max_memory_mib, 4096);
	assert_int_equal(PARSE_QUOTA("{}", &q, &err), 0);
	assert_int_equal(q.max_sandboxes + q.max_vcpus + q.max_memory_mib, 0);
	assert_int_equal(PARSE_QUOTA("{\"max_vcpus\":null,\"max_sandboxes\":1000000}", &q, &err), 0);
	assert_int_equal(q.max_sandboxes, QUOTA_MAX);
	assert_int_equal(q.max_vcpus, 0);
	assert_int_equal(PARSE_QUOTA("{\"max_sandboxes\":0}", &q, &err), 0);

	static const struct {
		const char *body, *needle;
	} bad[] = {
	    {"{\"max_sandboxes\":1000001}", "max_sandboxes"},
	    {"{\"max_vcpus\":-1}", "max_vcpus"},
	    {"{\"max_memory_mib\":1.5}", "max_memory_mib"},
	    {"{\"max_memory_mib\":1.0}", "max_memory_mib"},
	    {"{\"max_memory_mib\":\"4096\"}", "max_memory_mib"},
	    {"{\"max_vcpus\":true}", "max_vcpus"},
	    {"{\"max_vcpus\":99999999999999999999}", "not valid JSON"},
	    {"{\"max_cpus\":1}", "unknown field \"max_cpus\""},
	    {"{\"max_vcpus\":1,\"max_vcpus\":2}", "not valid JSON"},
	    {"null", "not valid JSON"},
	    {"[]", "JSON object"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		q = (struct tenant_quota){7, 7, 7};
		err = (struct al_error){0};
		expect_bad(PARSE_QUOTA(bad[i].body, &q, &err), &err, AL_ERR_INVALID_ARGUMENT, bad[i].needle);
		assert_int_equal(q.max_vcpus, 7);
	}
	char big[AUTH_BODY_MAX + 1];
	memset(big, ' ', sizeof(big));
	expect_bad(quota_request_parse(big, sizeof(big), &q, &err), &err, AL_ERR_TOO_LARGE, NULL);
}

static void test_token_request_parse(void **state)
{
	(void)state;
	struct token_create_request r;
	struct al_error err = {0};
	assert_int_equal(PARSE_TOKEN("{\"tenant\":\"team-a\",\"description\":\"ci\"}", &r, &err), 0);
	assert_string_equal(r.tenant, "team-a");
	assert_string_equal(r.description, "ci");
	assert_int_equal(PARSE_TOKEN("{\"tenant\":\"default\",\"description\":null}", &r, &err), 0);
	assert_string_equal(r.description, "");
	assert_int_equal(PARSE_TOKEN("{\"description\":\"x \\u00e9\",\"tenant\":\"a\"}", &r, &err), 0);
	assert_string_equal(r.description, "x \xc3\xa9");

	char body[AUTH_BODY_MAX + 64];
	char desc[TOKEN_DESCRIPTION_MAX + 2];
	memset(desc, 'd', sizeof(desc) - 1);
	desc[sizeof(desc) - 1] = '\0';
	snprintf(body, sizeof(body), "{\"tenant\":\"a\",\"description\":\"%s\"}", desc);
	expect_bad(PARSE_TOKEN(body, &r, &err), &err, AL_ERR_INVALID_ARGUMENT, "description");
	desc[TOKEN_DESCRIPTION_MAX] = '\0';
	snprintf(body, sizeof(body), "{\"tenant\":\"a\",\"description\":\"%s\"}", desc);
	assert_int_equal(PARSE_TOKEN(body, &r, &err), 0);
	assert_int_equal(strlen(r.description), TOKEN_DESCRIPTION_MAX);

	static const struct {
		const char *body, *needle;
	} bad[] = {
	    {"{}", "tenant: required"},
	    {"{\"tenant\":null}", "tenant: required"},
	    {"{\"tenant\":\"Team\"}", "tenant"},
	    {"{\"tenant\":\"\"}", "tenant"},
	    {"{\"tenant\":5}", "tenant"},
	    {"{\"tenant\":[\"a\"]}", "tenant"},
	    {"{\"tenant\":\"a\\u0000b\"}", "not valid JSON"}, /* jansson refuses NUL */
	    {"{\"tenant\":\"a\",\"description\":7}", "description"},
	    {"{\"tenant\":\"a\",\"description\":\"a\\nb\"}", "description"},
	    {"{\"tenant\":\"a\",\"description\":\"a\\u0000b\"}", "not valid JSON"},
	    {"{\"tenant\":\"a\",\"token\":\"alk_x\"}", "unknown field \"token\""},
	    {"{\"tenant\":\"a\",\"tenant\":\"b\"}", "not valid JSON"},
	    {"[\"a\"]", "JSON object"},
	    {"\"a\"", "not valid JSON"},
	    {"", "not valid JSON"},
	    {"{\"tenant\":\"a\"", "not valid JSON"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		strlcpy_al(r.tenant, "unchanged", sizeof(r.tenant));
		err = (struct al_error){0};
		expect_bad(PARSE_TOKEN(bad[i].body, &r, &err), &err, AL_ERR_INVALID_ARGUMENT, bad[i].needle);
		assert_string_equal(r.tenant, "unchanged");
	}

	/* Size: over AUTH_BODY_MAX is payload_too_large, before parsing. */
	memset(body, ' ', sizeof(body));
	expect_bad(token_create_request_parse(body, AUTH_BODY_MAX + 1, &r, &err), &err, AL_ERR_TOO_LARGE, NULL);
	/* A body without NUL after it is read only up to len. */
	const char exact[] = {'{', '"', 't', 'e', 'n', 'a', 'n', 't', '"', ':', '"', 'a', '"', '}'};
	assert_int_equal(token_create_request_parse(exact, sizeof(exact), &r, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_defaults),     cmocka_unit_test(test_create_network),
	    cmocka_unit_test(test_create_full),         cmocka_unit_test(test_create_template),
	    cmocka_unit_test(test_create_vcpus),        cmocka_unit_test(test_create_memory),
	    cmocka_unit_test(test_create_env),          cmocka_unit_test(test_create_metadata),
	    cmocka_unit_test(test_create_malformed),    cmocka_unit_test(test_create_unknown_field),
	    cmocka_unit_test(test_exec_defaults),       cmocka_unit_test(test_exec_cmd),
	    cmocka_unit_test(test_exec_env_and_cwd),    cmocka_unit_test(test_exec_stdin),
	    cmocka_unit_test(test_exec_numbers),        cmocka_unit_test(test_exec_malformed_and_unknown),
	    cmocka_unit_test(test_name_validators),     cmocka_unit_test(test_token_request_parse),
	    cmocka_unit_test(test_quota_request_parse),
	};
	return cmocka_run_group_tests_name("api-request", tests, NULL, NULL);
}
