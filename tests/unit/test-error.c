/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/common/error.c: the error record and its HTTP mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "error.h"
#include "util.h"

static void test_set_returns_negative_errno(void **state)
{
	(void)state;
	struct al_error err = {0};
	assert_int_equal(al_error_set(&err, AL_ERR_NOT_FOUND, ENOENT, "sandbox %s: not found", "sb-1"), -ENOENT);
	assert_int_equal(err.code, AL_ERR_NOT_FOUND);
	assert_string_equal(err.message, "sandbox sb-1: not found");
	/* A negative errno is accepted too; 0 becomes -EINVAL. */
	assert_int_equal(al_error_set(&err, AL_ERR_INTERNAL, -EIO, "x"), -EIO);
	assert_int_equal(al_error_set(&err, AL_ERR_INVALID_ARGUMENT, 0, "x"), -EINVAL);
	/* A NULL record is allowed (the caller does not want the message). */
	assert_int_equal(al_error_set(NULL, AL_ERR_INTERNAL, EPERM, "x"), -EPERM);
}

static void test_prefix(void **state)
{
	(void)state;
	struct al_error err = {0};
	al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "must be an integer from 1 to 16, got %d", 999);
	al_error_prefix(&err, "%s", "vcpus");
	al_error_prefix(&err, "create");
	assert_string_equal(err.message, "create: vcpus: must be an integer from 1 to 16, got 999");
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	al_error_prefix(NULL, "ignored");
}

static void test_long_messages_truncate(void **state)
{
	(void)state;
	struct al_error err = {0};
	char big[3 * AL_ERROR_MSG_MAX];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	al_error_set(&err, AL_ERR_INTERNAL, EIO, "%s", big);
	assert_int_equal(strlen(err.message), AL_ERROR_MSG_MAX - 1);
	al_error_prefix(&err, "%s", big);
	assert_int_equal(strlen(err.message), AL_ERROR_MSG_MAX - 1);
}

static void test_codes_and_statuses(void **state)
{
	(void)state;
	static const struct {
		enum al_error_code code;
		const char *name;
		int status;
	} want[] = {
	    {AL_ERR_INVALID_ARGUMENT, "invalid_argument", 400},
	    {AL_ERR_NOT_FOUND, "not_found", 404},
	    {AL_ERR_METHOD, "method_not_allowed", 405},
	    {AL_ERR_CONFLICT, "conflict", 409},
	    {AL_ERR_TOO_LARGE, "payload_too_large", 413},
	    {AL_ERR_UNSUPPORTED_MEDIA, "unsupported_media_type", 415},
	    {AL_ERR_BOOT_FAILED, "boot_failed", 500},
	    {AL_ERR_INTERNAL, "internal", 500},
	    {AL_ERR_UNAVAILABLE, "unavailable", 503},
	    {AL_ERR_TIMEOUT, "timeout", 504},
	    {AL_ERR_GUEST, "guest_error", 502},
	};
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		assert_string_equal(al_error_code_name(want[i].code), want[i].name);
		assert_int_equal(al_error_http_status(want[i].code), want[i].status);
	}
	/* Out of range: the safe answer is an internal error. */
	assert_string_equal(al_error_code_name((enum al_error_code)1000), "internal");
	assert_int_equal(al_error_http_status((enum al_error_code)1000), 500);
	assert_string_equal(al_error_code_name((enum al_error_code) - 1), "internal");
	assert_int_equal(al_error_http_status((enum al_error_code) - 1), 500);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_set_returns_negative_errno),
	    cmocka_unit_test(test_prefix),
	    cmocka_unit_test(test_long_messages_truncate),
	    cmocka_unit_test(test_codes_and_statuses),
	};
	return cmocka_run_group_tests_name("error", tests, NULL, NULL);
}
