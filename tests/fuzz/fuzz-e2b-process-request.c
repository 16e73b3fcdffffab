/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for envd's process messages
 * (src/daemon/api/api-e2b-process-request.c), all client input:
 *
 *   e2b_start_request_parse()  StartRequest
 *   e2b_selector_parse()       the selector of Connect, SendInput, …
 *   e2b_input_parse()          SendInputRequest's input (base64)
 *   e2b_signal_parse()         SendSignalRequest's signal
 *   e2b_update_parse()         UpdateRequest's pty size
 *
 * Input: byte 0 picks the parser, bytes 1-4 a Connect-Timeout-Ms (Start),
 * the rest is the JSON message (as connect_request_unwrap or the unary
 * body parser would load it). Beyond the sanitizers:
 *  - a parsed Start has argv[0] non-empty and argv NULL-terminated within
 *    EXEC_ARGV_MAX, an absolute cwd of at most E2B_PATH_MAX bytes, HOME and
 *    USER in its env of at most ENV_ENTRIES_MAX valid names, the user's ids,
 *    a PTY within the limits (or none) with stdin kept open, and the
 *    timeout rounded up to seconds; a refusal leaves *ret alone and says why;
 *  - a selector has exactly one of pid and tag, the tag within EXEC_TAG_MAX;
 *  - input is at most E2B_INPUT_MAX bytes; a signal is 9 or 15; a size is
 *    within the PTY limits;
 *  - the end event of any status has a status and an error unless exit 0.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api-e2b-process-request.h"
#include "json-cleanup.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-e2b-process-request: check failed: %s (line %d)\n", #cond, __LINE__);    \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static const struct e2b_user fuzz_user = {.name = "user", .uid = 1000, .gid = 1001, .home = "/home/user"};

static bool env_has(const struct exec_request *er, const char *key)
{
	for (size_t i = 0; i < er->env.n; i++)
		if (!strcmp(er->env.keys[i], key))
			return true;
	return false;
}

static void check_refusal(int r, const struct al_error *err)
{
	CHECK(r == -EINVAL);
	CHECK(err->code == AL_ERR_INVALID_ARGUMENT);
	CHECK(err->message[0]);
}

static void fuzz_start(const json_t *msg, uint64_t timeout_ms)
{
	struct exec_request er = {.argc = 7777};
	struct al_error err = {0};
	int r = e2b_start_request_parse(msg, &fuzz_user, timeout_ms, &er, &err);
	if (r < 0) {
		check_refusal(r, &err);
		CHECK(er.argc == 7777);
		return;
	}
	CHECK(er.argc >= 1 && er.argc <= EXEC_ARGV_MAX);
	CHECK(er.argv[0] && er.argv[0][0]);
	CHECK(er.argv[er.argc] == NULL);
	CHECK(er.cwd && er.cwd[0] == '/' && strlen(er.cwd) <= E2B_PATH_MAX);
	CHECK(er.env.n <= ENV_ENTRIES_MAX && env_has(&er, "HOME") && env_has(&er, "USER"));
	for (size_t i = 0; i < er.env.n; i++)
		CHECK(env_name_valid(er.env.keys[i]) && strlen(er.env.values[i]) <= ENV_VALUE_MAX);
	CHECK(er.uid == fuzz_user.uid && er.gid == fuzz_user.gid);
	CHECK((er.pty_rows == 0) == (er.pty_cols == 0));
	CHECK(er.pty_rows <= PTY_ROWS_MAX && er.pty_cols <= PTY_COLS_MAX);
	CHECK(!er.pty_rows || er.stdin_stream);
	CHECK(er.stdin_data == NULL);
	CHECK(strlen(er.tag) <= EXEC_TAG_MAX);
	CHECK(er.timeout_s == (timeout_ms + 999) / 1000 && er.timeout_given == (timeout_ms > 0));
	exec_request_release(&er);
}

static void fuzz_selector(const json_t *msg)
{
	struct e2b_selector sel = {.pid = 5};
	struct al_error err = {0};
	int r = e2b_selector_parse(msg, &sel, &err);
	if (r < 0) {
		check_refusal(r, &err);
		return;
	}
	json_t *p = json_object_get(msg, "process");
	if (sel.tag) {
		CHECK(strlen(sel.tag) <= EXEC_TAG_MAX && sel.pid == 0);
		CHECK(!strcmp(sel.tag, json_string_value(json_object_get(p, "tag"))));
	} else {
		json_t *tag = json_object_get(p, "tag");
		CHECK(!tag || json_is_null(tag));
	}
}

static void fuzz_other(uint8_t which, const json_t *msg, const uint8_t *raw, size_t raw_len)
{
	struct al_error err = {0};
	if (which == 2) {
		uint8_t *in = NULL;
		size_t len = 0;
		bool pty = false;
		int r = e2b_input_parse(msg, &in, &len, &pty, &err);
		if (r < 0) {
			check_refusal(r, &err);
			CHECK(in == NULL);
		} else {
			CHECK(len <= E2B_INPUT_MAX);
			free(in);
		}
	} else if (which == 3) {
		int sig = 0;
		int r = e2b_signal_parse(msg, &sig, &err);
		if (r < 0)
			check_refusal(r, &err);
		else
			CHECK(sig == SIGKILL || sig == SIGTERM);
	} else if (which == 4) {
		bool has = false;
		unsigned rows = 0, cols = 0;
		int r = e2b_update_parse(msg, &has, &rows, &cols, &err);
		if (r < 0)
			check_refusal(r, &err);
		else if (has)
			CHECK(rows >= 1 && rows <= PTY_ROWS_MAX && cols >= 1 && cols <= PTY_COLS_MAX);
	} else if (raw_len >= 6) {
		bool exited = raw[0] & 1, timed_out = raw[0] & 2;
		int code = (int)((uint32_t)raw[1] << 24 | (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 8 | raw[4]);
		cleanup_json json_t *end = e2b_end_event(exited, code, raw[5], timed_out);
		const char *status = json_string_value(json_object_get(end, "status"));
		CHECK(status && status[0]);
		CHECK(json_is_integer(json_object_get(end, "exitCode")));
		CHECK((json_object_get(end, "error") != NULL) == (!exited || code != 0));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 5)
		return 0;
	uint8_t which = data[0] % 6;
	uint64_t timeout_ms = (uint64_t)data[1] << 24 | (uint64_t)data[2] << 16 | (uint64_t)data[3] << 8 | data[4];
	if (which == 5) {
		fuzz_other(which, NULL, data + 5, size - 5);
		return 0;
	}
	/* As the server loads them: duplicates refused, NUL not allowed. */
	cleanup_json json_t *msg = json_loadb((const char *)data + 5, size - 5, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(msg))
		return 0;
	if (which == 0)
		fuzz_start(msg, timeout_ms);
	else if (which == 1)
		fuzz_selector(msg);
	else
		fuzz_other(which, msg, NULL, 0);
	return 0;
}
