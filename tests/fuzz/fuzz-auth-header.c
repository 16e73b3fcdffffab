/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the parsers of tenants and tokens, all fed with
 * client input:
 *
 *   auth_header_parse()            the Authorization header of every TCP request (store/auth.c)
 *   token_create_request_parse()   POST /v1/tokens bodies (api/api-request.c)
 *   quota_request_parse()          PUT /v1/tenants/{name} bodies (api/api-request.c)
 *
 * Each input goes to all three. The header parser gets the input as a C
 * string (up to its first NUL, as libmicrohttpd would hand it over) in a
 * buffer of exactly that size, and once more with an output buffer too small
 * by one; the body parsers get a buffer of exactly the input's size (no NUL
 * after it), so reading past the body is an ASan error. Beyond the
 * sanitizers it checks that what is accepted is within the documented
 * limits and that what is rejected carries a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api-request.h"
#include "auth.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-auth-header: check failed: %s (line %d)\n", #cond, __LINE__);            \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static bool b64token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("-._~+/", c));
}

static void fuzz_header(const uint8_t *data, size_t size)
{
	size_t n = strnlen((const char *)data, size);
	char *value = xmalloc(n + 1);
	memcpy(value, data, n);
	value[n] = '\0';

	char token[AUTH_HEADER_MAX + 1];
	int r = auth_header_parse(value, token, sizeof(token));
	if (r == 0) {
		size_t tn = strlen(token);
		CHECK(n <= AUTH_HEADER_MAX);
		CHECK(tn >= 1 && tn + 7 == n);
		CHECK(strncasecmp(value, "bearer ", 7) == 0);
		CHECK(memcmp(value + 7, token, tn) == 0);
		size_t i = 0;
		while (i < tn && token[i] != '=')
			CHECK(b64token_char(token[i++]));
		CHECK(i >= 1);
		while (i < tn)
			CHECK(token[i++] == '=');
		/* The same header with a buffer one byte short must not truncate. */
		char *small = xmalloc(tn);
		CHECK(auth_header_parse(value, small, tn) == -E2BIG);
		free(small);
	} else {
		CHECK(r == -EINVAL || r == -E2BIG);
	}
	free(value);
}

static void check_error(const struct al_error *err)
{
	CHECK(err->code == AL_ERR_INVALID_ARGUMENT || err->code == AL_ERR_TOO_LARGE);
	CHECK(err->message[0] != '\0');
	CHECK(memchr(err->message, '\0', sizeof(err->message)) != NULL);
}

static void fuzz_bodies(const uint8_t *data, size_t size)
{
	/* An exact-size copy: the parsers must not read past len. */
	char *body = xmalloc(size ? size : 1);
	memcpy(body, data, size);

	struct token_create_request t;
	struct al_error err = {0};
	memset(&t, 0xa5, sizeof(t));
	if (token_create_request_parse(body, size, &t, &err) == 0) {
		CHECK(memchr(t.tenant, '\0', sizeof(t.tenant)) != NULL);
		CHECK(tenant_name_valid(t.tenant));
		CHECK(memchr(t.description, '\0', sizeof(t.description)) != NULL);
		size_t dn = strlen(t.description);
		CHECK(dn <= TOKEN_DESCRIPTION_MAX);
		CHECK(utf8_valid((const uint8_t *)t.description, dn));
		for (size_t i = 0; i < dn; i++)
			CHECK((unsigned char)t.description[i] >= 0x20 && t.description[i] != 0x7f);
	} else {
		check_error(&err);
	}

	struct tenant_quota q;
	err = (struct al_error){0};
	if (quota_request_parse(body, size, &q, &err) == 0) {
		CHECK(q.max_sandboxes <= QUOTA_MAX && q.max_vcpus <= QUOTA_MAX && q.max_memory_mib <= QUOTA_MAX);
		/* Whatever is accepted can be checked against any usage. */
		struct tenant_usage u = {q.max_sandboxes, q.max_vcpus, q.max_memory_mib};
		int r = tenant_quota_check("fuzz", &q, &u, 1, 1, &err);
		CHECK(r == 0 || (r == -EDQUOT && err.code == AL_ERR_QUOTA));
	} else {
		check_error(&err);
	}
	free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_header(data, size);
	fuzz_bodies(data, size);
	return 0;
}
