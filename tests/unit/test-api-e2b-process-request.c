/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for envd's process messages as Airlock's
 * (src/daemon/api/api-e2b-process-request.c): StartRequest as E2B's SDK
 * sends it and malformed, selectors, SendInput, SendSignal, Update and the
 * end event's wording. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api-e2b-process-request.h"
#include "json-cleanup.h"
#include "util.h"

static const struct e2b_user user = {.name = "user", .uid = 1000, .gid = 1000, .home = "/home/user"};

static json_t *parse(const char *text)
{
	json_error_t jerr;
	json_t *j = json_loads(text, JSON_ALLOW_NUL, &jerr);
	if (!j)
		fail_msg("bad test JSON %s: %s", text, jerr.text);
	return j;
}

static const char *env_of(const struct exec_request *er, const char *key)
{
	for (size_t i = 0; i < er->env.n; i++)
		if (!strcmp(er->env.keys[i], key))
			return er->env.values[i];
	return NULL;
}

/* ------------------------------------------------------------ Start */

static void test_start_as_the_sdk_sends_it(void **state)
{
	(void)state;
	cleanup_json json_t *msg = parse("{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hi\"],"
	                                 "\"envs\":{\"A\":\"b\"}},\"stdin\":false}");
	struct exec_request er;
	struct al_error err = {0};
	assert_int_equal(e2b_start_request_parse(msg, &user, 60000, &er, &err), 0);
	assert_int_equal(er.argc, 4);
	assert_string_equal(er.argv[0], "/bin/bash");
	assert_string_equal(er.argv[3], "echo hi");
	assert_null(er.argv[4]);
	assert_string_equal(er.cwd, "/home/user");
	assert_int_equal(er.uid, 1000);
	assert_int_equal(er.gid, 1000);
	assert_string_equal(env_of(&er, "A"), "b");
	assert_string_equal(env_of(&er, "HOME"), "/home/user");
	assert_string_equal(env_of(&er, "USER"), "user");
	assert_false(er.stdin_stream);
	assert_int_equal(er.pty_rows, 0);
	assert_int_equal(er.timeout_s, 60);
	assert_true(er.timeout_given);
	assert_string_equal(er.tag, "");
	exec_request_release(&er);
}

static void test_start_options(void **state)
{
	(void)state;
	struct exec_request er;
	struct al_error err = {0};
	/* A PTY (the SDK's pty.create), a tag, a relative cwd, envs that set HOME. */
	cleanup_json json_t *pty =
	    parse("{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-i\",\"-l\"],\"cwd\":\"work\","
	          "\"envs\":{\"HOME\":\"/x\"}},\"pty\":{\"size\":{\"cols\":100,\"rows\":\"30\"}},"
	          "\"tag\":\"t1\",\"unknown\":{\"ignored\":1}}");
	assert_int_equal(e2b_start_request_parse(pty, &user, 1, &er, &err), 0);
	assert_int_equal(er.pty_rows, 30);
	assert_int_equal(er.pty_cols, 100);
	assert_true(er.stdin_stream);
	assert_string_equal(er.tag, "t1");
	assert_string_equal(er.cwd, "/home/user/work");
	assert_string_equal(env_of(&er, "HOME"), "/x");
	assert_int_equal(er.timeout_s, 1); /* 1 ms is rounded up to a second */
	exec_request_release(&er);
	/* No size: 24 x 80; null fields are their defaults; no timeout. */
	cleanup_json json_t *plain =
	    parse("{\"process\":{\"cmd\":\"cat\",\"args\":null,\"envs\":null,\"cwd\":\"\"},\"pty\":{},\"stdin\":true,"
	          "\"tag\":null}");
	assert_int_equal(e2b_start_request_parse(plain, &user, 0, &er, &err), 0);
	assert_int_equal(er.argc, 1);
	assert_int_equal(er.pty_rows, 24);
	assert_int_equal(er.pty_cols, 80);
	assert_string_equal(er.cwd, "/home/user");
	assert_int_equal(er.timeout_s, 0);
	assert_false(er.timeout_given);
	exec_request_release(&er);
}

static void start_fails(const char *text, uint64_t timeout_ms, const char *want)
{
	cleanup_json json_t *msg = parse(text);
	struct exec_request er = {.argc = 12345};
	struct al_error err = {0};
	assert_int_equal(e2b_start_request_parse(msg, &user, timeout_ms, &er, &err), -EINVAL);
	assert_int_equal(er.argc, 12345); /* untouched */
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	if (!strstr(err.message, want))
		fail_msg("%s: \"%s\" does not say \"%s\"", text, err.message, want);
}

static void test_start_malformed(void **state)
{
	(void)state;
	start_fails("{}", 0, "ProcessConfig");
	start_fails("{\"process\":[]}", 0, "ProcessConfig");
	start_fails("{\"process\":{}}", 0, "process.cmd is required");
	start_fails("{\"process\":{\"cmd\":\"\"}}", 0, "process.cmd is required");
	start_fails("{\"process\":{\"cmd\":1}}", 0, "cmd must be a string");
	start_fails("{\"process\":{\"cmd\":\"a\\u0000b\"}}", 0, "cmd must be a string");
	start_fails("{\"process\":{\"cmd\":\"x\",\"args\":\"-c\"}}", 0, "process.args must be an array");
	start_fails("{\"process\":{\"cmd\":\"x\",\"args\":[1]}}", 0, "process.args[0]");
	start_fails("{\"process\":{\"cmd\":\"x\",\"envs\":[\"A=b\"]}}", 0, "process.envs must be an object");
	start_fails("{\"process\":{\"cmd\":\"x\",\"envs\":{\"A B\":\"c\"}}}", 0, "must match");
	start_fails("{\"process\":{\"cmd\":\"x\",\"envs\":{\"A\":1}}}", 0, "process.envs.A");
	start_fails("{\"process\":{\"cmd\":\"x\",\"cwd\":7}}", 0, "cwd must be a string");
	start_fails("{\"process\":{\"cmd\":\"x\"},\"stdin\":\"yes\"}", 0, "stdin must be true or false");
	start_fails("{\"process\":{\"cmd\":\"x\"},\"tag\":5}", 0, "tag must be a string");
	start_fails("{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"rows\":0,\"cols\":80}}}", 0, "pty must be");
	start_fails("{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"rows\":24}}}", 0, "pty must be");
	start_fails("{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"rows\":1001,\"cols\":80}}}", 0, "pty must be");
	start_fails("{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"rows\":-1,\"cols\":80}}}", 0, "pty must be");
	start_fails("{\"process\":{\"cmd\":\"x\"},\"pty\":true}", 0, "pty must be");
	start_fails("{\"process\":{\"cmd\":\"x\"}}", 86400001, "Connect-Timeout-Ms");
}

static void test_start_limits(void **state)
{
	(void)state;
	struct exec_request er;
	struct al_error err = {0};
	/* The most arguments and env entries, then one more. */
	cleanup_json json_t *msg = parse("{\"process\":{\"cmd\":\"x\",\"args\":[],\"envs\":{}}}");
	json_t *args = json_object_get(json_object_get(msg, "process"), "args");
	json_t *envs = json_object_get(json_object_get(msg, "process"), "envs");
	for (int i = 0; i < EXEC_ARGV_MAX - 1; i++)
		json_array_append_new(args, json_string("a"));
	for (int i = 0; i < ENV_ENTRIES_MAX - 2; i++) {
		char name[16];
		snprintf(name, sizeof(name), "V%d", i);
		json_object_set_new(envs, name, json_string("v"));
	}
	assert_int_equal(e2b_start_request_parse(msg, &user, 0, &er, &err), 0);
	assert_int_equal(er.argc, EXEC_ARGV_MAX);
	assert_int_equal(er.env.n, ENV_ENTRIES_MAX);
	exec_request_release(&er);
	json_array_append_new(args, json_string("a"));
	assert_int_equal(e2b_start_request_parse(msg, &user, 0, &er, &err), -EINVAL);
	json_array_remove(args, 0);
	json_object_set_new(envs, "ONE_MORE", json_string("v"));
	assert_int_equal(e2b_start_request_parse(msg, &user, 0, &er, &err), -EINVAL);
	json_object_del(envs, "ONE_MORE");
	/* cmd and args together within EXEC_ARGV_TOTAL_MAX. */
	char *big = xmalloc(EXEC_ARG_MAX + 1);
	memset(big, 'a', EXEC_ARG_MAX);
	big[EXEC_ARG_MAX] = '\0';
	json_array_clear(args);
	for (unsigned i = 0; i < EXEC_ARGV_TOTAL_MAX / EXEC_ARG_MAX; i++)
		json_array_append_new(args, json_string(big));
	memset(&err, 0, sizeof(err));
	assert_int_equal(e2b_start_request_parse(msg, &user, 0, &er, &err), -EINVAL);
	assert_non_null(strstr(err.message, "bytes together"));
	free(big);
}

/* ------------------------------------------------------------ selectors */

static void test_selector(void **state)
{
	(void)state;
	struct e2b_selector sel;
	struct al_error err = {0};
	cleanup_json json_t *pid = parse("{\"process\":{\"pid\":42}}");
	assert_int_equal(e2b_selector_parse(pid, &sel, &err), 0);
	assert_int_equal(sel.pid, 42);
	assert_null(sel.tag);
	cleanup_json json_t *text = parse("{\"process\":{\"pid\":\"4294967295\"}}");
	assert_int_equal(e2b_selector_parse(text, &sel, &err), 0);
	assert_int_equal(sel.pid, UINT32_MAX);
	cleanup_json json_t *tag = parse("{\"process\":{\"tag\":\"start-cmd\",\"pid\":null}}");
	assert_int_equal(e2b_selector_parse(tag, &sel, &err), 0);
	assert_string_equal(sel.tag, "start-cmd");
	const char *bad[] = {
	    "{}",
	    "{\"process\":{}}",
	    "{\"process\":{\"pid\":1,\"tag\":\"t\"}}",
	    "{\"process\":{\"pid\":-1}}",
	    "{\"process\":{\"pid\":4294967296}}",
	    "{\"process\":{\"pid\":\"4294967296\"}}",
	    "{\"process\":{\"pid\":\"1x\"}}",
	    "{\"process\":{\"pid\":1.5}}",
	    "{\"process\":{\"tag\":3}}",
	    "{\"process\":7}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		cleanup_json json_t *m = parse(bad[i]);
		memset(&err, 0, sizeof(err));
		if (e2b_selector_parse(m, &sel, &err) != -EINVAL || err.code != AL_ERR_INVALID_ARGUMENT)
			fail_msg("%s accepted", bad[i]);
	}
}

/* ------------------------------------------------------------ input, signal, update */

static void test_input(void **state)
{
	(void)state;
	struct al_error err = {0};
	uint8_t *data = NULL;
	size_t len = 0;
	bool pty = true;
	cleanup_json json_t *std = parse("{\"process\":{\"pid\":1},\"input\":{\"stdin\":\"aGVsbG8K\"}}");
	assert_int_equal(e2b_input_parse(std, &data, &len, &pty, &err), 0);
	assert_int_equal(len, 6);
	assert_memory_equal(data, "hello\n", 6);
	assert_false(pty);
	free(data);
	/* URL-safe, unpadded, as protobuf's JSON allows. */
	cleanup_json json_t *p = parse("{\"input\":{\"pty\":\"-_8\"}}");
	assert_int_equal(e2b_input_parse(p, &data, &len, &pty, &err), 0);
	assert_int_equal(len, 2);
	assert_int_equal(data[0], 0xfb);
	assert_int_equal(data[1], 0xff);
	assert_true(pty);
	free(data);
	const char *bad[] = {"{}", "{\"input\":{}}", "{\"input\":{\"stdin\":\"aA==\",\"pty\":\"aA==\"}}",
	                     "{\"input\":{\"stdin\":5}}", "{\"input\":{\"stdin\":\"!!\"}}"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		cleanup_json json_t *m = parse(bad[i]);
		data = NULL;
		if (e2b_input_parse(m, &data, &len, &pty, &err) != -EINVAL || data)
			fail_msg("%s accepted", bad[i]);
	}
}

static void test_input_limit(void **state)
{
	(void)state;
	/* E2B_INPUT_MAX bytes pass, one more does not. */
	uint8_t *raw = xcalloc(E2B_INPUT_MAX + 1, 1);
	cleanup_free char *ok = base64_encode(raw, E2B_INPUT_MAX, NULL);
	cleanup_free char *over = base64_encode(raw, E2B_INPUT_MAX + 1, NULL);
	free(raw);
	struct al_error err = {0};
	uint8_t *data = NULL;
	size_t len = 0;
	bool pty = false;
	cleanup_json json_t *m1 = json_pack("{s:{s:s}}", "input", "stdin", ok);
	assert_int_equal(e2b_input_parse(m1, &data, &len, &pty, &err), 0);
	assert_int_equal(len, E2B_INPUT_MAX);
	free(data);
	cleanup_json json_t *m2 = json_pack("{s:{s:s}}", "input", "stdin", over);
	assert_int_equal(e2b_input_parse(m2, &data, &len, &pty, &err), -EINVAL);
	assert_non_null(strstr(err.message, "at most"));
}

static void test_signal(void **state)
{
	(void)state;
	struct al_error err = {0};
	int sig = 0;
	const struct {
		const char *text;
		int want;
	} cases[] = {
	    {"{\"signal\":\"SIGNAL_SIGKILL\"}", SIGKILL},
	    {"{\"signal\":\"SIGNAL_SIGTERM\"}", SIGTERM},
	    {"{\"signal\":9}", SIGKILL},
	    {"{\"signal\":15}", SIGTERM},
	    {"{\"signal\":\"SIGNAL_UNSPECIFIED\"}", -1},
	    {"{\"signal\":0}", -1},
	    {"{\"signal\":1}", -1},
	    {"{\"signal\":\"SIGKILL\"}", -1},
	    {"{}", -1},
	    {"{\"signal\":null}", -1},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		cleanup_json json_t *m = parse(cases[i].text);
		sig = 0;
		int r = e2b_signal_parse(m, &sig, &err);
		if (cases[i].want < 0 ? r != -EINVAL || sig != 0 : r != 0 || sig != cases[i].want)
			fail_msg("%s: %d, signal %d", cases[i].text, r, sig);
	}
}

static void test_update(void **state)
{
	(void)state;
	struct al_error err = {0};
	bool has = true;
	unsigned rows = 0, cols = 0;
	cleanup_json json_t *none = parse("{\"process\":{\"pid\":1}}");
	assert_int_equal(e2b_update_parse(none, &has, &rows, &cols, &err), 0);
	assert_false(has);
	cleanup_json json_t *size = parse("{\"process\":{\"pid\":1},\"pty\":{\"size\":{\"cols\":120,\"rows\":40}}}");
	assert_int_equal(e2b_update_parse(size, &has, &rows, &cols, &err), 0);
	assert_true(has);
	assert_int_equal(rows, 40);
	assert_int_equal(cols, 120);
	/* Update has no defaults: a PTY without a size says nothing to resize to. */
	cleanup_json json_t *empty = parse("{\"pty\":{}}");
	assert_int_equal(e2b_update_parse(empty, &has, &rows, &cols, &err), -EINVAL);
	cleanup_json json_t *big = parse("{\"pty\":{\"size\":{\"cols\":1001,\"rows\":40}}}");
	assert_int_equal(e2b_update_parse(big, &has, &rows, &cols, &err), -EINVAL);
}

/* ------------------------------------------------------------ end event */

static void end_is(json_t *end, const char *want)
{
	cleanup_free char *text = json_dumps(end, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(end);
	assert_string_equal(text, want);
}

static void test_end_event(void **state)
{
	(void)state;
	end_is(e2b_end_event(true, 0, 0, false), "{\"exitCode\":0,\"exited\":true,\"status\":\"exit status 0\"}");
	end_is(e2b_end_event(true, 3, 0, false),
	       "{\"error\":\"exit status 3\",\"exitCode\":3,\"exited\":true,\"status\":\"exit status 3\"}");
	end_is(e2b_end_event(false, 0, SIGKILL, false),
	       "{\"error\":\"signal: killed\",\"exitCode\":-1,\"exited\":false,\"status\":\"signal: killed\"}");
	end_is(e2b_end_event(false, 0, SIGTERM, false),
	       "{\"error\":\"signal: terminated\",\"exitCode\":-1,\"exited\":false,\"status\":\"signal: terminated\"}");
	end_is(e2b_end_event(false, 0, 42, false),
	       "{\"error\":\"signal: signal 42\",\"exitCode\":-1,\"exited\":false,\"status\":\"signal: signal 42\"}");
	json_t *timed = e2b_end_event(false, 0, SIGKILL, true);
	assert_non_null(strstr(json_string_value(json_object_get(timed, "error")), "timeoutMs"));
	assert_string_equal(json_string_value(json_object_get(timed, "status")), "signal: killed");
	json_decref(timed);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_start_as_the_sdk_sends_it),
	    cmocka_unit_test(test_start_options),
	    cmocka_unit_test(test_start_malformed),
	    cmocka_unit_test(test_start_limits),
	    cmocka_unit_test(test_selector),
	    cmocka_unit_test(test_input),
	    cmocka_unit_test(test_input_limit),
	    cmocka_unit_test(test_signal),
	    cmocka_unit_test(test_update),
	    cmocka_unit_test(test_end_event),
	};
	return cmocka_run_group_tests_name("api-e2b-process-request", tests, NULL, NULL);
}
