/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the body of POST /v1/secrets (secret_request_parse()
 * in src/daemon/api/api-request-secrets.c): client input that carries a
 * credential.
 *
 * Beyond the sanitizers it checks that an accepted request is within the
 * limits of secrets.h (a value of 1..POLICY_SECRET_VALUE_MAX bytes without control
 * characters, a canonical spec that is a JSON object), and, the property
 * that matters most here, that no error message ever quotes the value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api-request.h"
#include "secrets.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-secret-request: check failed: %s (line %d)\n", #cond, __LINE__);         \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

/* The message for the request as given (re-serialized) and for the same
 * request with another value of the same length and kinds of characters
 * (letters and digits rotated): text of the value in the first message
 * that the second lacks came from the value. The value's text alone is not
 * enough: it may also be words of the message ("secret"), or of another
 * field the message may quote. */
static void check_value_not_quoted(json_t *j, const char *v)
{
	size_t n = strlen(v);
	char *other = xmalloc(n + 1);
	for (size_t i = 0; i <= n; i++) {
		char c = v[i];
		if (c >= 'a' && c <= 'z')
			c = (char)('a' + (c - 'a' + 13) % 26);
		else if (c >= 'A' && c <= 'Z')
			c = (char)('A' + (c - 'A' + 13) % 26);
		else if (c >= '0' && c <= '9')
			c = (char)('0' + (c - '0' + 5) % 10);
		other[i] = c;
	}
	if (strcmp(v, other) == 0) {
		/* No letter or digit to change: nothing tells the value from
		 * the message's own punctuation and spaces. */
		free(other);
		return;
	}
	char *given = json_dumps(j, JSON_COMPACT);
	json_t *j2 = json_deep_copy(j);
	json_object_set_new(j2, "value", json_string(other));
	char *changed = json_dumps(j2, JSON_COMPACT);
	if (given && changed) {
		struct secret_request r1, r2;
		struct al_error e1 = {0}, e2 = {0};
		int rc1 = secret_request_parse(given, strlen(given), &r1, &e1);
		int rc2 = secret_request_parse(changed, strlen(changed), &r2, &e2);
		if (rc1 == 0)
			secret_request_release(&r1);
		if (rc2 == 0)
			secret_request_release(&r2);
		if (rc1 < 0 && rc2 < 0)
			CHECK(!strstr(e1.message, v) || strstr(e2.message, v));
	}
	free(given);
	free(changed);
	json_decref(j2);
	free(other);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *body = xmalloc(size ? size : 1);
	memcpy(body, data, size);
	struct secret_request r;
	struct al_error err = {0};
	int rc = secret_request_parse(body, size, &r, &err);
	if (rc == 0) {
		CHECK(r.name[0] != '\0');
		CHECK(r.value && r.value_len >= 1 && r.value_len <= POLICY_SECRET_VALUE_MAX);
		CHECK(strlen(r.value) == r.value_len);
		for (size_t i = 0; i < r.value_len; i++)
			CHECK((unsigned char)r.value[i] >= 0x20 || r.value[i] == '\t');
		CHECK((unsigned char)r.value[r.value_len - 1] != 0x7f);
		json_t *spec = json_loads(r.spec_json, 0, NULL);
		CHECK(json_is_object(spec));
		json_decref(spec);
		secret_request_release(&r);
	} else {
		CHECK(err.code == AL_ERR_INVALID_ARGUMENT || err.code == AL_ERR_TOO_LARGE);
		CHECK(err.message[0] != '\0');
		/* SECURITY: the message never carries the value. */
		json_t *j = json_loadb(body, size, 0, NULL);
		const char *v = json_string_value(json_object_get(j, "value"));
		if (v && strlen(v) >= 6)
			check_value_not_quoted(j, v);
		json_decref(j);
	}
	free(body);
	return 0;
}
