/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the API request parsers (src/daemon/api/api-request.c):
 * bodies from any client allowed on the socket.
 *
 * Each input goes to both create_request_parse() and exec_request_parse(),
 * from a buffer of exactly its size (no NUL after it), so that reading past
 * the body is an ASan error. Beyond the sanitizers (and LeakSanitizer for
 * what the parsers allocate) it checks that an accepted request is within
 * every limit of api-request.h, and that a rejected one carries
 * invalid_argument with a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api-request.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-api-request: check failed: %s (line %d)\n", #cond, __LINE__);            \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static void check_error(const struct al_error *err)
{
	CHECK(err->code == AL_ERR_INVALID_ARGUMENT);
	CHECK(err->message[0] != '\0');
	CHECK(memchr(err->message, '\0', sizeof(err->message)) != NULL);
}

static void check_kv(const struct kv_list *l, bool env)
{
	CHECK(l->n <= (env ? ENV_ENTRIES_MAX : METADATA_ENTRIES_MAX));
	for (size_t i = 0; i < l->n; i++) {
		CHECK(l->keys[i] && l->values[i]);
		size_t k = strlen(l->keys[i]);
		if (env) {
			CHECK(env_name_valid(l->keys[i]));
			CHECK(k <= ENV_NAME_MAX);
			CHECK(strlen(l->values[i]) <= ENV_VALUE_MAX);
		} else {
			CHECK(k >= 1 && k <= METADATA_KEY_MAX);
			CHECK(strlen(l->values[i]) <= METADATA_VALUE_MAX);
		}
	}
}

static void fuzz_create(const char *body, size_t size, unsigned host_mib)
{
	struct create_request r;
	struct al_error err = {0};
	memset(&r, 0xa5, sizeof(r));
	if (create_request_parse(body, size, host_mib, &r, &err) < 0) {
		check_error(&err);
		return;
	}
	CHECK(memchr(r.template_name, '\0', sizeof(r.template_name)) != NULL);
	CHECK(template_name_valid(r.template_name));
	CHECK(r.vcpus >= 1 && r.vcpus <= SANDBOX_VCPUS_MAX);
	CHECK(r.memory_mib >= SANDBOX_MEMORY_MIB_MIN && r.memory_mib <= SANDBOX_MEMORY_MIB_MAX);
	if (host_mib >= SANDBOX_MEMORY_MIB_MIN)
		CHECK(r.memory_mib <= host_mib);
	check_kv(&r.env, true);
	check_kv(&r.metadata, false);
	create_request_release(&r);
}

static void fuzz_exec(const char *body, size_t size)
{
	struct exec_request r;
	struct al_error err = {0};
	memset(&r, 0xa5, sizeof(r));
	if (exec_request_parse(body, size, &r, &err) < 0) {
		check_error(&err);
		return;
	}
	CHECK(r.argc >= 1 && r.argc <= EXEC_ARGV_MAX);
	CHECK(r.argv && r.argv[r.argc] == NULL);
	size_t total = 0;
	for (size_t i = 0; i < r.argc; i++) {
		CHECK(r.argv[i]);
		size_t n = strlen(r.argv[i]);
		CHECK(n <= EXEC_ARG_MAX);
		total += n;
	}
	CHECK(total <= EXEC_ARGV_TOTAL_MAX);
	CHECK(r.argv[0][0] != '\0');
	check_kv(&r.env, true);
	CHECK(r.cwd && r.cwd[0] == '/' && strlen(r.cwd) <= EXEC_CWD_MAX);
	CHECK(r.stdin_len <= EXEC_STDIN_MAX);
	CHECK(r.stdin_data != NULL || r.stdin_len == 0);
	CHECK(r.uid <= EXEC_ID_MAX && r.gid <= EXEC_ID_MAX);
	CHECK(r.timeout_s >= 1 && r.timeout_s <= EXEC_TIMEOUT_S_MAX);
	CHECK(r.max_output_bytes >= 1 && r.max_output_bytes <= EXEC_OUTPUT_MAX);
	exec_request_release(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > API_CREATE_BODY_MAX)
		return 0;
	/* Exactly size bytes: the parsers take (body, len) and must not need a NUL. */
	char *body = malloc(size ? size : 1);
	if (!body)
		abort();
	memcpy(body, data, size);
	fuzz_create(body, size, 0);
	fuzz_create(body, size, 1024);
	fuzz_exec(body, size);
	free(body);
	return 0;
}
