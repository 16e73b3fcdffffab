/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the Connect wire format of E2B's envd API
 * (src/daemon/api/connect-wire.c): request envelopes, end-of-stream
 * messages, error codes, Connect-Timeout-Ms and protobuf's base64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "connect-wire.h"
#include "json-cleanup.h"
#include "util.h"

/* One envelope of flags and length field n around text (which may be
 * shorter or longer than n). The caller frees it. */
static uint8_t *envelope_raw(uint8_t flags, uint32_t n, const char *text, size_t *ret_len)
{
	size_t tl = strlen(text);
	uint8_t *buf = xmalloc(CONNECT_ENVELOPE_HEADER + tl);
	buf[0] = flags;
	buf[1] = (uint8_t)(n >> 24);
	buf[2] = (uint8_t)(n >> 16);
	buf[3] = (uint8_t)(n >> 8);
	buf[4] = (uint8_t)n;
	memcpy(buf + CONNECT_ENVELOPE_HEADER, text, tl);
	*ret_len = CONNECT_ENVELOPE_HEADER + tl;
	return buf;
}

/* Unwraps body, expecting failure r with code and a message containing want. */
static void unwrap_fails(const uint8_t *body, size_t len, int r, enum al_error_code code, const char *want)
{
	json_t *msg = NULL;
	struct al_error err = {0};
	assert_int_equal(connect_request_unwrap(body, len, &msg, &err), r);
	assert_null(msg);
	assert_int_equal(err.code, code);
	if (!strstr(err.message, want))
		fail_msg("error \"%s\" does not say \"%s\"", err.message, want);
}

/* ------------------------------------------------------------ unwrap */

static void test_unwrap_good(void **state)
{
	(void)state;
	const char *text = "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"true\"]},\"stdin\":false}";
	size_t len;
	cleanup_free uint8_t *body = envelope_raw(0, (uint32_t)strlen(text), text, &len);
	cleanup_json json_t *msg = NULL;
	struct al_error err = {0};
	assert_int_equal(connect_request_unwrap(body, len, &msg, &err), 0);
	assert_true(json_is_object(msg));
	assert_string_equal(json_string_value(json_object_get(json_object_get(msg, "process"), "cmd")), "/bin/sh");
	assert_true(json_is_false(json_object_get(msg, "stdin")));
	assert_int_equal(err.code, AL_ERR_NONE);

	/* The empty message is an object too. */
	cleanup_free uint8_t *empty = envelope_raw(0, 2, "{}", &len);
	cleanup_json json_t *m2 = NULL;
	assert_int_equal(connect_request_unwrap(empty, len, &m2, &err), 0);
	assert_int_equal(json_object_size(m2), 0);
}

static void test_unwrap_short_header(void **state)
{
	(void)state;
	const uint8_t body[] = {0, 0, 0, 0};
	for (size_t n = 0; n < CONNECT_ENVELOPE_HEADER; n++)
		unwrap_fails(body, n, -EINVAL, AL_ERR_INVALID_ARGUMENT, "shorter than an envelope's header");
	/* An empty header-only envelope is a whole envelope whose message is
	 * not JSON. */
	const uint8_t header[CONNECT_ENVELOPE_HEADER] = {0};
	unwrap_fails(header, sizeof(header), -EINVAL, AL_ERR_INVALID_ARGUMENT, "not a JSON object");
}

static void test_unwrap_flags(void **state)
{
	(void)state;
	size_t len;
	cleanup_free uint8_t *compressed = envelope_raw(CONNECT_FLAG_COMPRESSED, 2, "{}", &len);
	unwrap_fails(compressed, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "compressed");
	cleanup_free uint8_t *both = envelope_raw(CONNECT_FLAG_COMPRESSED | CONNECT_FLAG_END_STREAM, 2, "{}", &len);
	unwrap_fails(both, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "compressed");
	cleanup_free uint8_t *end = envelope_raw(CONNECT_FLAG_END_STREAM, 2, "{}", &len);
	unwrap_fails(end, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "flags 0x02");
	cleanup_free uint8_t *other = envelope_raw(0x80, 2, "{}", &len);
	unwrap_fails(other, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "flags 0x80");
}

static void test_unwrap_lengths(void **state)
{
	(void)state;
	size_t len;
	/* The length field says more than follows. */
	cleanup_free uint8_t *more = envelope_raw(0, 3, "{}", &len);
	unwrap_fails(more, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "says 3 bytes but 2 follow");
	/* Less: a second envelope (or garbage) after the message. */
	const uint8_t two[] = {0, 0, 0, 0, 2, '{', '}', 0, 0, 0, 0, 2, '{', '}'};
	unwrap_fails(two, sizeof(two), -EINVAL, AL_ERR_INVALID_ARGUMENT, "says 2 bytes but 9 follow");
	cleanup_free uint8_t *less = envelope_raw(0, 2, "{} ", &len);
	unwrap_fails(less, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "says 2 bytes but 3 follow");
	cleanup_free uint8_t *zero = envelope_raw(0, 0, "{}", &len);
	unwrap_fails(zero, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "says 0 bytes but 2 follow");
	/* Above the limit: refused on the length field alone. */
	cleanup_free uint8_t *big = envelope_raw(0, CONNECT_MESSAGE_MAX + 1, "{}", &len);
	unwrap_fails(big, len, -E2BIG, AL_ERR_TOO_LARGE, "above the limit");
	cleanup_free uint8_t *huge = envelope_raw(0, UINT32_MAX, "{}", &len);
	unwrap_fails(huge, len, -E2BIG, AL_ERR_TOO_LARGE, "above the limit");
	/* At the limit, with the body all there: accepted. */
	size_t n = CONNECT_MESSAGE_MAX;
	cleanup_free uint8_t *max = xmalloc(CONNECT_ENVELOPE_HEADER + n);
	memset(max, ' ', CONNECT_ENVELOPE_HEADER + n);
	max[0] = 0;
	max[1] = (uint8_t)(n >> 24);
	max[2] = (uint8_t)(n >> 16);
	max[3] = (uint8_t)(n >> 8);
	max[4] = (uint8_t)n;
	max[CONNECT_ENVELOPE_HEADER] = '{';
	max[CONNECT_ENVELOPE_HEADER + n - 1] = '}';
	cleanup_json json_t *msg = NULL;
	struct al_error err = {0};
	assert_int_equal(connect_request_unwrap(max, CONNECT_ENVELOPE_HEADER + n, &msg, &err), 0);
	assert_true(json_is_object(msg));
}

static void test_unwrap_not_an_object(void **state)
{
	(void)state;
	const char *bad[] = {"{", "nope", "{\"a\":1}x", "{\"a\":\"\xff\"}", "{\"a\":\"\\u0000\"}"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		size_t len;
		cleanup_free uint8_t *body = envelope_raw(0, (uint32_t)strlen(bad[i]), bad[i], &len);
		unwrap_fails(body, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "is not a JSON object: ");
	}
	/* JSON, but not an object: the message says so without a parser error. */
	const char *other[] = {"[]", "[{}]", "\"s\"", "1", "null", "true"};
	for (size_t i = 0; i < ARRAY_SIZE(other); i++) {
		size_t len;
		cleanup_free uint8_t *body = envelope_raw(0, (uint32_t)strlen(other[i]), other[i], &len);
		unwrap_fails(body, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "not a JSON object");
	}
	/* A NUL inside the message ends no string: it is an error. */
	const uint8_t nul[] = {0, 0, 0, 0, 4, '{', '}', 0, ' '};
	unwrap_fails(nul, sizeof(nul), -EINVAL, AL_ERR_INVALID_ARGUMENT, "not a JSON object");
}

static void test_unwrap_duplicate_keys(void **state)
{
	(void)state;
	const char *text = "{\"path\":\"/a\",\"path\":\"/etc/shadow\"}";
	size_t len;
	cleanup_free uint8_t *body = envelope_raw(0, (uint32_t)strlen(text), text, &len);
	unwrap_fails(body, len, -EINVAL, AL_ERR_INVALID_ARGUMENT, "duplicate");
	/* The same key in two different objects is not a duplicate. */
	const char *nested = "{\"a\":{\"k\":1},\"b\":{\"k\":2}}";
	cleanup_free uint8_t *ok = envelope_raw(0, (uint32_t)strlen(nested), nested, &len);
	cleanup_json json_t *msg = NULL;
	struct al_error err = {0};
	assert_int_equal(connect_request_unwrap(ok, len, &msg, &err), 0);
}

/* ------------------------------------------------------------ envelopes */

static uint32_t length_field(const uint8_t *buf)
{
	return (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 | buf[4];
}

static void test_envelope_round_trip(void **state)
{
	(void)state;
	cleanup_json json_t *msg = json_pack("{s:{s:i, s:s}}", "event", "pid", 42, "data", "aGk=");
	size_t len = 0;
	cleanup_free uint8_t *buf = connect_envelope(0, msg, &len);
	assert_int_equal(buf[0], 0);
	assert_int_equal(length_field(buf), len - CONNECT_ENVELOPE_HEADER);
	/* Compact JSON, and what the envelope carries unwraps to the same. */
	assert_memory_equal(buf + CONNECT_ENVELOPE_HEADER, "{\"event\":{\"pid\":42,\"data\":\"aGk=\"}}",
	                    len - CONNECT_ENVELOPE_HEADER);
	cleanup_json json_t *back = NULL;
	struct al_error err = {0};
	assert_int_equal(connect_request_unwrap(buf, len, &back, &err), 0);
	assert_true(json_equal(msg, back));

	/* The length is big-endian, all four bytes of it. */
	json_t *big = json_object();
	size_t n = 0x010203 - 8; /* {"s":"…"} adds 8 bytes */
	char *s = xmalloc(n + 1);
	memset(s, 'x', n);
	s[n] = '\0';
	json_object_set_new(big, "s", json_string(s));
	free(s);
	size_t blen = 0;
	cleanup_free uint8_t *bbuf = connect_envelope(CONNECT_FLAG_END_STREAM, big, &blen);
	json_decref(big);
	assert_int_equal(blen, CONNECT_ENVELOPE_HEADER + 0x010203);
	const uint8_t want[CONNECT_ENVELOPE_HEADER] = {CONNECT_FLAG_END_STREAM, 0x00, 0x01, 0x02, 0x03};
	assert_memory_equal(bbuf, want, sizeof(want));
}

static void test_end_stream(void **state)
{
	(void)state;
	size_t len = 0;
	cleanup_free uint8_t *ok = connect_end_stream(NULL, &len);
	const uint8_t want_ok[] = {CONNECT_FLAG_END_STREAM, 0, 0, 0, 2, '{', '}'};
	assert_int_equal(len, sizeof(want_ok));
	assert_memory_equal(ok, want_ok, sizeof(want_ok));

	/* An error record without a code is a success too. */
	struct al_error none = {0};
	cleanup_free uint8_t *ok2 = connect_end_stream(&none, &len);
	assert_int_equal(len, sizeof(want_ok));
	assert_memory_equal(ok2, want_ok, sizeof(want_ok));

	struct al_error err = {0};
	al_error_set(&err, AL_ERR_NOT_FOUND, ENOENT, "no such file \"%s\"", "/x");
	cleanup_free uint8_t *bad = connect_end_stream(&err, &len);
	assert_int_equal(bad[0], CONNECT_FLAG_END_STREAM);
	assert_int_equal(length_field(bad), len - CONNECT_ENVELOPE_HEADER);
	json_error_t jerr;
	cleanup_json json_t *m =
	    json_loadb((const char *)bad + CONNECT_ENVELOPE_HEADER, len - CONNECT_ENVELOPE_HEADER, 0, &jerr);
	assert_non_null(m);
	assert_int_equal(json_object_size(m), 1);
	json_t *e = json_object_get(m, "error");
	assert_int_equal(json_object_size(e), 2);
	assert_string_equal(json_string_value(json_object_get(e, "code")), "not_found");
	assert_string_equal(json_string_value(json_object_get(e, "message")), "no such file \"/x\"");
}

/* The message of the end-of-stream envelope of an error whose message is text. */
static json_t *end_stream_message(const char *text)
{
	struct al_error err = {.code = AL_ERR_GUEST};
	strlcpy_al(err.message, text, sizeof(err.message));
	size_t len = 0;
	cleanup_free uint8_t *buf = connect_end_stream(&err, &len);
	assert_non_null(buf);
	assert_int_equal(length_field(buf), len - CONNECT_ENVELOPE_HEADER);
	json_error_t jerr;
	json_t *m = json_loadb((const char *)buf + CONNECT_ENVELOPE_HEADER, len - CONNECT_ENVELOPE_HEADER, 0, &jerr);
	assert_non_null(m);
	json_t *e = json_object_get(m, "error");
	assert_string_equal(json_string_value(json_object_get(e, "code")), "unavailable");
	json_t *msg = json_incref(json_object_get(e, "message"));
	json_decref(m);
	return msg;
}

/* A message need not be UTF-8: it may quote what a guest sent, or be cut
 * inside a character at AL_ERROR_MSG_MAX. JSON strings must be UTF-8: each
 * byte that is not becomes U+FFFD, and the envelope is still made (it
 * aborted). */
static void test_end_stream_not_utf8(void **state)
{
	(void)state;
	cleanup_json json_t *m1 = end_stream_message("guest said \xff\xfe: no");
	assert_string_equal(json_string_value(m1), "guest said \xef\xbf\xbd\xef\xbf\xbd: no");

	/* Overlong, surrogate and truncated sequences. */
	cleanup_json json_t *m2 = end_stream_message("a\xc0\xaf"
	                                             "b\xed\xa0\x80"
	                                             "c\xe2\x82");
	assert_string_equal(json_string_value(m2), "a\xef\xbf\xbd\xef\xbf\xbd"
	                                           "b\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
	                                           "c\xef\xbf\xbd\xef\xbf\xbd");

	/* Valid UTF-8 is kept as it is. */
	cleanup_json json_t *m3 = end_stream_message("caf\xc3\xa9 \xf0\x9f\x92\xa9");
	assert_string_equal(json_string_value(m3), "caf\xc3\xa9 \xf0\x9f\x92\xa9");

	/* A whole message of bad bytes, as long as a message can be. */
	char text[AL_ERROR_MSG_MAX];
	memset(text, 0xff, sizeof(text) - 1);
	text[sizeof(text) - 1] = '\0';
	cleanup_json json_t *m4 = end_stream_message(text);
	assert_int_equal(json_string_length(m4), 3 * (sizeof(text) - 1));
}

/* ------------------------------------------------------------ codes */

/* The Connect protocol's table (connectrpc.com/docs/protocol, "Error
 * Codes"; @connectrpc/connect's codeToHttpStatus). */
static const struct {
	const char *name;
	int status;
} connect_statuses[] = {
    {"canceled", 499},
    {"unknown", 500},
    {"invalid_argument", 400},
    {"deadline_exceeded", 504},
    {"not_found", 404},
    {"already_exists", 409},
    {"permission_denied", 403},
    {"resource_exhausted", 429},
    {"failed_precondition", 400},
    {"aborted", 409},
    {"out_of_range", 400},
    {"unimplemented", 501},
    {"internal", 500},
    {"unavailable", 503},
    {"data_loss", 500},
    {"unauthenticated", 401},
};

static void test_code_names(void **state)
{
	(void)state;
	static const struct {
		enum al_error_code code;
		const char *name;
	} want[] = {
	    {AL_ERR_NONE, "internal"},
	    {AL_ERR_INVALID_ARGUMENT, "invalid_argument"},
	    {AL_ERR_NOT_FOUND, "not_found"},
	    {AL_ERR_METHOD, "unimplemented"},
	    {AL_ERR_CONFLICT, "failed_precondition"},
	    {AL_ERR_TOO_LARGE, "invalid_argument"},
	    {AL_ERR_UNSUPPORTED_MEDIA, "invalid_argument"},
	    {AL_ERR_BOOT_FAILED, "internal"},
	    {AL_ERR_INTERNAL, "internal"},
	    {AL_ERR_UNAVAILABLE, "unavailable"},
	    {AL_ERR_TIMEOUT, "deadline_exceeded"},
	    {AL_ERR_GUEST, "unavailable"},
	    {AL_ERR_QUOTA, "resource_exhausted"},
	    {AL_ERR_UNAUTHORIZED, "unauthenticated"},
	    {AL_ERR_FORBIDDEN, "permission_denied"},
	};
	/* Every code is in the table (a new one must be added here). */
	assert_int_equal(ARRAY_SIZE(want), AL_ERR__COUNT);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		assert_int_equal(want[i].code, (enum al_error_code)i);
		assert_string_equal(connect_code_name(want[i].code), want[i].name);
		/* Each name is one of the protocol's codes. */
		bool known = false;
		for (size_t k = 0; k < ARRAY_SIZE(connect_statuses); k++)
			known |= !strcmp(connect_statuses[k].name, want[i].name);
		assert_true(known);
	}
	assert_string_equal(connect_code_name(AL_ERR__COUNT), "internal");
	assert_string_equal(connect_code_name((enum al_error_code)1000), "internal");
}

static void test_code_http_status(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(connect_statuses); i++)
		if (connect_code_http_status(connect_statuses[i].name) != connect_statuses[i].status)
			fail_msg("%s: %d, want %d", connect_statuses[i].name,
			         connect_code_http_status(connect_statuses[i].name), connect_statuses[i].status);
	/* Not a Connect code: 500 (as "unknown"). */
	assert_int_equal(connect_code_http_status(""), 500);
	assert_int_equal(connect_code_http_status("NOT_FOUND"), 500);
	assert_int_equal(connect_code_http_status("cancelled"), 500);
}

/* ------------------------------------------------------------ Connect-Timeout-Ms */

static void test_timeout_parse(void **state)
{
	(void)state;
	uint64_t ms = 7;
	assert_int_equal(connect_timeout_parse("0", &ms), 0);
	assert_int_equal(ms, 0);
	assert_int_equal(connect_timeout_parse("1", &ms), 0);
	assert_int_equal(ms, 1);
	assert_int_equal(connect_timeout_parse("0000000042", &ms), 0);
	assert_int_equal(ms, 42);
	assert_int_equal(connect_timeout_parse("9999999999", &ms), 0);
	assert_int_equal(ms, 9999999999ull);

	const char *bad[] = {"10000000000", "00000000001", "", "-1", "+1", " 1", "1 ", "1.5", "1e3", "0x10", "١"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ms = 7;
		if (connect_timeout_parse(bad[i], &ms) != -EINVAL)
			fail_msg("\"%s\" was accepted", bad[i]);
		assert_int_equal(ms, 7); /* not written on failure */
	}
	assert_int_equal(connect_timeout_parse(NULL, &ms), -EINVAL);
	assert_int_equal(ms, 7);
}

/* ------------------------------------------------------------ base64 */

static void decodes_to(const char *text, size_t max, const void *want, size_t want_len)
{
	uint8_t *out = NULL;
	size_t n = 0;
	int r = connect_base64_decode(text, max, &out, &n);
	if (r != 0)
		fail_msg("\"%s\": %d", text, r);
	assert_int_equal(n, want_len);
	assert_memory_equal(out, want, want_len);
	free(out);
}

static void decode_fails(const char *text, size_t max, int want)
{
	uint8_t *out = (uint8_t *)"untouched";
	size_t n = 99;
	int r = connect_base64_decode(text, max, &out, &n);
	if (r != want)
		fail_msg("\"%s\" (max %zu): %d, want %d", text, max, r, want);
	assert_string_equal((const char *)out, "untouched");
	assert_int_equal(n, 99);
}

static void test_base64_decode(void **state)
{
	(void)state;
	/* Standard, padded and unpadded. */
	decodes_to("", 10, "", 0);
	decodes_to("aGk=", 10, "hi", 2);
	decodes_to("aGk", 10, "hi", 2);
	decodes_to("aA==", 10, "h", 1);
	decodes_to("aA", 10, "h", 1);
	decodes_to("aGV5", 10, "hey", 3);
	/* +/ and their URL-safe -_ (both are read, as protobuf's JSON does). */
	const uint8_t fb[] = {0xfb, 0xff, 0xbf};
	decodes_to("+/+/", 10, fb, 3);
	decodes_to("-_-_", 10, fb, 3);
	decodes_to("-/+_", 10, fb, 3);
	/* Binary, with NULs. */
	const uint8_t nul[] = {0, 0, 0, 1};
	decodes_to("AAAAAQ==", 10, nul, 4);
	decodes_to("AAAAAQ", 10, nul, 4);
	/* Exactly max bytes. */
	decodes_to("aGV5", 3, "hey", 3);
	decodes_to("", 0, "", 0);

	/* Bad characters and padding. */
	const char *bad[] = {"a",    "aGk=a", "aG=k",  "=aGk", "a===", "aGk==",    "aGk===",
	                     "aG.k", "aG k",  "aGk\n", "aGk*", "====", "aGk=aGk=", "\xff\xff\xff\xff"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		decode_fails(bad[i], 100, -EINVAL);
	/* One character left over after whole quads holds no byte. */
	decode_fails("aGV5a", 100, -EINVAL);

	/* Over max: -E2BIG, whether found before or after decoding. */
	decode_fails("aGV5", 2, -E2BIG);
	decode_fails("aGk", 1, -E2BIG);
	decode_fails("aA", 0, -E2BIG);
	size_t n = 4 * 1024;
	char *long_text = xmalloc(n + 1);
	memset(long_text, 'A', n);
	long_text[n] = '\0';
	decode_fails(long_text, 16, -E2BIG);
	decode_fails(long_text, n / 4 * 3 - 1, -E2BIG);
	uint8_t *out = NULL;
	size_t out_len = 0;
	assert_int_equal(connect_base64_decode(long_text, n / 4 * 3, &out, &out_len), 0);
	assert_int_equal(out_len, n / 4 * 3);
	free(out);
	free(long_text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_unwrap_good),          cmocka_unit_test(test_unwrap_short_header),
	    cmocka_unit_test(test_unwrap_flags),         cmocka_unit_test(test_unwrap_lengths),
	    cmocka_unit_test(test_unwrap_not_an_object), cmocka_unit_test(test_unwrap_duplicate_keys),
	    cmocka_unit_test(test_envelope_round_trip),  cmocka_unit_test(test_end_stream),
	    cmocka_unit_test(test_end_stream_not_utf8),  cmocka_unit_test(test_code_names),
	    cmocka_unit_test(test_code_http_status),     cmocka_unit_test(test_timeout_parse),
	    cmocka_unit_test(test_base64_decode),
	};
	return cmocka_run_group_tests_name("connect-wire", tests, NULL, NULL);
}
