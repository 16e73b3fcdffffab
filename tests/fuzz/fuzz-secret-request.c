/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the body of POST /v1/secrets (secret_request_parse()
 * in src/daemon/secrets.c): client input that carries a credential.
 *
 * Beyond the sanitizers it checks that an accepted request is within the
 * limits of secrets.h (a value of 1..SECRET_VALUE_MAX bytes without control
 * characters, a canonical spec that is a JSON object), and, the property
 * that matters most here, that no error message ever quotes the value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

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

static size_t occurrences(const char *hay, size_t n, const char *needle)
{
	size_t k = 0, len = strlen(needle);
	for (const char *p = hay; (p = memmem(p, n - (size_t)(p - hay), needle, len)); p++)
		k++;
	return k;
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
		CHECK(r.value && r.value_len >= 1 && r.value_len <= SECRET_VALUE_MAX);
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
		/* SECURITY: the message never carries the value (unless the
		 * client also put the same text in another field, which a
		 * message may quote). */
		json_t *j = json_loadb(body, size, 0, NULL);
		const char *v = json_string_value(json_object_get(j, "value"));
		if (v && strlen(v) >= 6 && occurrences(body, size, v) == 1)
			CHECK(!strstr(err.message, v));
		json_decref(j);
	}
	free(body);
	return 0;
}
