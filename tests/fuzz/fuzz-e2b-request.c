/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for E2B's control API parsers
 * (src/daemon/api/api-e2b-request.c): bodies and query arguments from any
 * holder of a tenant token.
 *
 * Each input goes, from a buffer of exactly its size, to
 * e2b_create_request_parse() and e2b_network_request_parse(); then, split
 * at newlines into up to seven NUL-terminated strings, to
 * e2b_list_query_parse() as metadata, state, limit, nextToken, order,
 * startedAfter and template. Beyond the sanitizers it checks that an
 * accepted create is within E2B's fixed resources and Airlock's limits,
 * that an accepted list query is within its bounds, and that every refusal
 * is a 400 with a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api-e2b-request.h"
#include "network-policy.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-e2b-request: check failed: %s (line %d)\n", #cond, __LINE__);            \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static void check_error(const struct al_error *err)
{
	CHECK(err->code == AL_ERR_INVALID_ARGUMENT);
	CHECK(err->message[0] != '\0');
	CHECK(memchr(err->message, '\0', sizeof(err->message)) != NULL);
}

static void fuzz_create(const char *body, size_t size)
{
	struct create_request r;
	struct al_error err = {0};
	if (e2b_create_request_parse(body, size, 0, &r, &err) < 0) {
		check_error(&err);
		return;
	}
	CHECK(r.vcpus == E2B_VCPUS && r.memory_mib == E2B_MEMORY_MIB && !r.snapshot[0] && !r.tenant[0]);
	CHECK(template_name_valid(r.template_name));
	CHECK(r.timeouts.timeout_s >= 1 && r.timeouts.timeout_s <= SANDBOX_TIMEOUT_S_MAX);
	CHECK(r.env.n <= ENV_ENTRIES_MAX && r.metadata.n <= METADATA_ENTRIES_MAX && r.secrets.n == 0);
	create_request_release(&r);
}

static void fuzz_network(const char *body, size_t size)
{
	char *policy = NULL;
	struct al_error err = {0};
	if (e2b_network_request_parse(body, size, &policy, &err) < 0) {
		CHECK(policy == NULL);
		check_error(&err);
		return;
	}
	CHECK(policy && strlen(policy) <= NETWORK_POLICY_JSON_MAX);
	free(policy);
}

static void fuzz_list(const uint8_t *data, size_t size)
{
	char *text = xmalloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0';
	const char *fields[7] = {0};
	char *p = text;
	for (size_t i = 0; i < ARRAY_SIZE(fields) && p; i++) {
		fields[i] = p;
		p = strchr(p, '\n');
		if (p)
			*p++ = '\0';
	}
	struct e2b_list_args a = {.metadata = fields[0],
	                          .state = fields[1],
	                          .limit = fields[2],
	                          .next_token = fields[3],
	                          .order = fields[4],
	                          .started_after = fields[5],
	                          .template_name = fields[6]};
	for (int v2 = 0; v2 < 2; v2++) {
		struct e2b_list_query q;
		struct al_error err = {0};
		if (e2b_list_query_parse(&a, v2, &q, &err) < 0) {
			check_error(&err);
		} else {
			CHECK(q.n_meta <= E2B_METADATA_FILTERS_MAX);
			for (size_t i = 0; i < q.n_meta; i++)
				CHECK(q.keys[i][0] && strlen(q.keys[i]) <= METADATA_KEY_MAX &&
				      strlen(q.values[i]) <= METADATA_VALUE_MAX);
			CHECK(q.limit >= 1 && q.limit <= E2B_LIST_LIMIT_MAX);
			CHECK(q.running || q.paused);
			CHECK(!q.has_token || strlen(q.token_id) == 19);
		}
		e2b_list_query_release(&q);
	}
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ceiling_set;
	if (!ceiling_set) {
		struct policy_ceiling c;
		struct al_error err = {0};
		if (network_ceiling_parse(NULL, NULL, 0, &c, &err) < 0)
			abort();
		network_policy_set_ceiling(&c);
		ceiling_set = true;
	}
	if (size > API_CREATE_BODY_MAX)
		return 0;
	/* Exactly size bytes: the parsers take (body, len) and must not need a NUL. */
	char *body = malloc(size ? size : 1);
	if (!body)
		abort();
	memcpy(body, data, size);
	fuzz_create(body, size);
	fuzz_network(body, size);
	free(body);
	fuzz_list(data, size);
	return 0;
}
