/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the warm pools' parsers (src/daemon/api/api-pool-request.c):
 * the body of PUT /v1/pools (any client allowed on the socket, or a tenant's
 * token) and airlockd's --warm-pool TEMPLATE[:VCPUS:MiB]=N.
 *
 * Each input goes to pool_request_parse() from a buffer of exactly its size
 * (no NUL after it: reading past the body is an ASan error) and, as a C
 * string, to pool_flag_parse(), each with no host memory cap and with a
 * small one. An accepted spec must be within every bound of the model; a
 * rejected one carries invalid_argument (or too_large for an oversize body)
 * and a message, and leaves the output untouched. Seeds:
 * tests/fuzz/corpus/fuzz-pool-request, written by hand.
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
			fprintf(stderr, "fuzz-pool-request: check failed: %s (line %d)\n", #cond, __LINE__);           \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static void check_spec(const struct pool_spec *p, unsigned host_mib, bool from_flag)
{
	CHECK(memchr(p->template_name, '\0', sizeof(p->template_name)) != NULL);
	CHECK(memchr(p->tenant, '\0', sizeof(p->tenant)) != NULL);
	CHECK(template_name_valid(p->template_name));
	CHECK(p->tenant[0] == '\0' || tenant_name_valid(p->tenant));
	CHECK(!from_flag || p->tenant[0] == '\0');
	CHECK(p->vcpus >= 1 && p->vcpus <= SANDBOX_VCPUS_MAX);
	CHECK(p->memory_mib >= SANDBOX_MEMORY_MIB_MIN && p->memory_mib <= SANDBOX_MEMORY_MIB_MAX);
	CHECK(host_mib == 0 || p->memory_mib <= host_mib);
	CHECK(p->size <= POOL_SIZE_MAX);
}

static void check_error(const struct al_error *err, const struct pool_spec *out, bool too_large)
{
	CHECK(err->code == (too_large ? AL_ERR_TOO_LARGE : AL_ERR_INVALID_ARGUMENT));
	CHECK(err->message[0] != '\0');
	CHECK(memchr(err->message, '\0', sizeof(err->message)) != NULL);
	/* ret is written only on success */
	for (size_t i = 0; i < sizeof(*out); i++)
		CHECK(((const unsigned char *)out)[i] == 0xa5);
}

static void fuzz_body(const char *body, size_t size, unsigned host_mib)
{
	struct pool_spec p;
	struct al_error err = {0};
	memset(&p, 0xa5, sizeof(p));
	if (pool_request_parse(body, size, host_mib, &p, &err) < 0)
		check_error(&err, &p, size > POOL_BODY_MAX);
	else
		check_spec(&p, host_mib, false);
}

static void fuzz_flag(const char *arg, unsigned host_mib)
{
	struct pool_spec p;
	struct al_error err = {0};
	memset(&p, 0xa5, sizeof(p));
	if (pool_flag_parse(arg, host_mib, &p, &err) < 0)
		check_error(&err, &p, false);
	else
		check_spec(&p, host_mib, true);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *body = xmalloc(size ? size : 1);
	memcpy(body, data, size);
	fuzz_body(body, size, 0);
	fuzz_body(body, size, 512);
	free(body);

	/* A command-line argument is a C string: up to the first NUL. */
	const uint8_t *nul = memchr(data, '\0', size);
	size_t n = nul ? (size_t)(nul - data) : size;
	char *arg = xmalloc(n + 1);
	memcpy(arg, data, n);
	arg[n] = '\0';
	fuzz_flag(arg, 0);
	fuzz_flag(arg, 512);
	free(arg);
	return 0;
}
