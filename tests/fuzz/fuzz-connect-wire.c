/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the Connect wire format of E2B's envd API
 * (src/daemon/api/connect-wire.c), all fed with client input:
 *
 *   connect_request_unwrap()  the body of a server-streaming request
 *   connect_base64_decode()   protobuf's bytes fields (stdin, file data)
 *   connect_timeout_parse()   the Connect-Timeout-Ms header
 *   connect_end_stream()      an error message quoting any bytes
 *
 * Each input goes to all four: the unwrapper gets a buffer of exactly the
 * input's size (reading past the body is an ASan error), the others the
 * input as a C string (up to its first NUL). Beyond the sanitizers:
 *  - an accepted request has flags 0 and a length field equal to the bytes
 *    after the header, and is a JSON object; enveloped again it has a
 *    length field equal to its message's length, unwraps to an equal
 *    object, and enveloping that gives the same bytes;
 *  - a refused request leaves *ret_msg alone and says why, with -EINVAL
 *    (invalid_argument) or -E2BIG (too large);
 *  - decoded base64 is at most max bytes, exactly the bits of its
 *    non-padding characters, decodes again from its own encoding, and a
 *    max one below its length is -E2BIG; a refusal writes nothing;
 *  - an accepted timeout is 1 to 10 digits and their value;
 *  - an end-of-stream envelope is always made, whatever the message, and
 *    its message is {"error":{"code","message"}} with the code's name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "connect-wire.h"
#include "json-cleanup.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-connect-wire: check failed: %s (line %d)\n", #cond, __LINE__);           \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static uint32_t length_field(const uint8_t *buf)
{
	return (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 | buf[4];
}

static void fuzz_unwrap(const uint8_t *data, size_t size)
{
	uint8_t *body = xmalloc(size ? size : 1);
	memcpy(body, data, size);
	json_t *msg = (json_t *)body; /* a sentinel: must stay as it is on failure */
	struct al_error err = {0};
	int r = connect_request_unwrap(body, size, &msg, &err);
	if (r < 0) {
		CHECK(msg == (json_t *)body);
		CHECK((r == -EINVAL && err.code == AL_ERR_INVALID_ARGUMENT) ||
		      (r == -E2BIG && err.code == AL_ERR_TOO_LARGE));
		CHECK(err.message[0] != '\0' && memchr(err.message, '\0', sizeof(err.message)));
		free(body);
		return;
	}
	CHECK(r == 0 && json_is_object(msg));
	CHECK(size >= CONNECT_ENVELOPE_HEADER && body[0] == 0);
	CHECK(length_field(body) == size - CONNECT_ENVELOPE_HEADER && length_field(body) <= CONNECT_MESSAGE_MAX);

	size_t len = 0;
	uint8_t *again = connect_envelope(0, msg, &len);
	CHECK(len >= CONNECT_ENVELOPE_HEADER + 2 && again[0] == 0);
	CHECK(length_field(again) == len - CONNECT_ENVELOPE_HEADER);
	json_t *back = NULL;
	CHECK(connect_request_unwrap(again, len, &back, &err) == 0);
	CHECK(json_equal(msg, back));
	size_t len2 = 0;
	uint8_t *third = connect_envelope(0, back, &len2);
	CHECK(len2 == len && memcmp(third, again, len) == 0);
	free(third);
	json_decref(back);
	free(again);
	json_decref(msg);
	free(body);
}

static bool b64_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/' ||
	       c == '-' || c == '_';
}

static void fuzz_base64(const char *text, size_t n, size_t max)
{
	static uint8_t sentinel[1];
	uint8_t *out = sentinel;
	size_t out_len = 12345;
	int r = connect_base64_decode(text, max, &out, &out_len);
	if (r < 0) {
		CHECK(r == -EINVAL || r == -E2BIG);
		CHECK(out == sentinel && out_len == 12345);
		return;
	}
	CHECK(r == 0 && out_len <= max);
	/* The alphabet and the padding: '=' only at the end, at most two. */
	size_t chars = 0, pad = 0;
	for (size_t i = 0; i < n; i++) {
		if (text[i] == '=') {
			pad++;
			continue;
		}
		CHECK(pad == 0 && b64_char(text[i]));
		chars++;
	}
	CHECK(pad <= 2 && chars % 4 != 1);
	CHECK(out_len == chars * 6 / 8);
	/* Its own encoding decodes to the same bytes, with max its length. */
	char *enc = base64_encode(out, out_len, NULL);
	uint8_t *out2 = NULL;
	size_t out2_len = 0;
	CHECK(connect_base64_decode(enc, out_len, &out2, &out2_len) == 0);
	CHECK(out2_len == out_len && memcmp(out2, out, out_len) == 0);
	free(out2);
	if (out_len > 0) {
		uint8_t *none = NULL;
		size_t none_len = 0;
		CHECK(connect_base64_decode(text, out_len - 1, &none, &none_len) == -E2BIG);
		CHECK(!none);
	}
	free(enc);
	free(out);
}

static void fuzz_timeout(const char *text, size_t n)
{
	uint64_t ms = 77;
	int r = connect_timeout_parse(text, &ms);
	if (r < 0) {
		CHECK(r == -EINVAL && ms == 77);
		return;
	}
	CHECK(r == 0 && n >= 1 && n <= 10 && strspn(text, "0123456789") == n);
	CHECK(ms == strtoull(text, NULL, 10) && ms <= 9999999999ull);
}

static void fuzz_end_stream(const char *text, uint8_t code_byte)
{
	struct al_error err = {.code = (enum al_error_code)(code_byte % AL_ERR__COUNT)};
	strlcpy_al(err.message, text, sizeof(err.message));
	size_t len = 0;
	uint8_t *buf = connect_end_stream(&err, &len);
	CHECK(buf && len >= CONNECT_ENVELOPE_HEADER + 2);
	CHECK(buf[0] == CONNECT_FLAG_END_STREAM && length_field(buf) == len - CONNECT_ENVELOPE_HEADER);
	json_error_t jerr;
	json_t *m = json_loadb((const char *)buf + CONNECT_ENVELOPE_HEADER, len - CONNECT_ENVELOPE_HEADER, 0, &jerr);
	CHECK(json_is_object(m));
	if (err.code == AL_ERR_NONE) {
		CHECK(json_object_size(m) == 0);
	} else {
		json_t *e = json_object_get(m, "error");
		const char *code = json_string_value(json_object_get(e, "code"));
		CHECK(code && !strcmp(code, connect_code_name(err.code)));
		int status = connect_code_http_status(code);
		CHECK(status >= 400 && status <= 599);
		const char *msg = json_string_value(json_object_get(e, "message"));
		CHECK(msg);
		/* A message that is UTF-8 is sent as it is. */
		if (utf8_valid((const uint8_t *)err.message, strlen(err.message)))
			CHECK(!strcmp(msg, err.message));
	}
	json_decref(m);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_unwrap(data, size);

	size_t n = strnlen((const char *)data, size);
	char *text = xmalloc(n + 1);
	memcpy(text, data, n);
	text[n] = '\0';
	/* max: unbounded, the input's own worth, and a small one. */
	size_t maxes[] = {SIZE_MAX / 2, n * 3 / 4, size ? data[size - 1] % 16 : 0};
	for (size_t i = 0; i < ARRAY_SIZE(maxes); i++)
		fuzz_base64(text, n, maxes[i]);
	fuzz_timeout(text, n);
	fuzz_end_stream(text, size ? data[0] : 0);
	free(text);
	return 0;
}
