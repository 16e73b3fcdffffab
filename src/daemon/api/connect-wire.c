/* SPDX-License-Identifier: Apache-2.0 */
/* Connect envelopes, end-of-stream messages and error codes (connect-wire.h). */
#include <errno.h>
#include <string.h>

#include "connect-wire.h"
#include "json-cleanup.h"
#include "util.h"

const char *connect_code_name(enum al_error_code code)
{
	switch (code) {
	case AL_ERR_INVALID_ARGUMENT:
	case AL_ERR_TOO_LARGE:
	case AL_ERR_UNSUPPORTED_MEDIA:
		return "invalid_argument";
	case AL_ERR_NOT_FOUND:
		return "not_found";
	case AL_ERR_METHOD:
		return "unimplemented";
	case AL_ERR_CONFLICT:
		return "failed_precondition";
	case AL_ERR_QUOTA:
		return "resource_exhausted";
	case AL_ERR_UNAUTHORIZED:
		return "unauthenticated";
	case AL_ERR_FORBIDDEN:
		return "permission_denied";
	case AL_ERR_UNAVAILABLE:
	case AL_ERR_GUEST:
		return "unavailable";
	case AL_ERR_TIMEOUT:
		return "deadline_exceeded";
	case AL_ERR_NONE:
	case AL_ERR_BOOT_FAILED:
	case AL_ERR_INTERNAL:
	case AL_ERR__COUNT:
		break;
	}
	return "internal";
}

int connect_code_http_status(const char *code)
{
	/* The protocol's table since its 2024 amendment (connectrpc.com RFC 003):
	 * failed_precondition is 400, no longer 412 (@connectrpc/connect's
	 * codeToHttpStatus agrees). */
	static const struct {
		const char *name;
		int status;
	} table[] = {
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
	for (size_t i = 0; i < ARRAY_SIZE(table); i++)
		if (!strcmp(code, table[i].name))
			return table[i].status;
	return 500;
}

int connect_request_unwrap(const uint8_t *body, size_t len, json_t **ret_msg, struct al_error *err)
{
	if (len < CONNECT_ENVELOPE_HEADER)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "a Connect streaming request is one enveloped message; %zu bytes is shorter "
		                    "than an envelope's header",
		                    len);
	uint8_t flags = body[0];
	uint32_t n = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 | body[4];
	if (flags & CONNECT_FLAG_COMPRESSED)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "a compressed Connect message: this server accepts no Connect-Content-Encoding");
	if (flags != 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the request's envelope has flags 0x%02x; a request message has none", flags);
	if (n > CONNECT_MESSAGE_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG,
		                    "a Connect message of %u bytes is above the limit of %u bytes", n,
		                    CONNECT_MESSAGE_MAX);
	if ((size_t)n != len - CONNECT_ENVELOPE_HEADER)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the request's envelope says %u bytes but %zu follow it (one message expected)", n,
		                    len - CONNECT_ENVELOPE_HEADER);
	json_error_t jerr;
	json_t *msg = json_loadb((const char *)body + CONNECT_ENVELOPE_HEADER, n, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(msg)) {
		json_decref(msg);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the request message is not a JSON object%s%s", jerr.text[0] && !msg ? ": " : "",
		                    !msg ? jerr.text : "");
	}
	*ret_msg = msg;
	return 0;
}

uint8_t *connect_envelope(uint8_t flags, const json_t *msg, size_t *ret_len)
{
	cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
	if (!text)
		abort();
	size_t n = strlen(text);
	if (n > UINT32_MAX)
		abort(); /* our own messages are small */
	uint8_t *buf = xmalloc(CONNECT_ENVELOPE_HEADER + n);
	buf[0] = flags;
	buf[1] = (uint8_t)(n >> 24);
	buf[2] = (uint8_t)(n >> 16);
	buf[3] = (uint8_t)(n >> 8);
	buf[4] = (uint8_t)n;
	memcpy(buf + CONNECT_ENVELOPE_HEADER, text, n);
	*ret_len = CONNECT_ENVELOPE_HEADER + n;
	return buf;
}

uint8_t *connect_end_stream(const struct al_error *err, size_t *ret_len)
{
	cleanup_json json_t *msg = NULL;
	if (err && err->code != AL_ERR_NONE) {
		cleanup_free char *text = utf8_repair(err->message);
		msg = json_pack("{s:{s:s, s:s}}", "error", "code", connect_code_name(err->code), "message", text);
	} else {
		msg = json_object();
	}
	return connect_envelope(CONNECT_FLAG_END_STREAM, msg, ret_len);
}

int connect_digits_parse(const char *s, uint64_t *ret)
{
	size_t n = s ? strlen(s) : 0;
	if (n < 1 || n > 10 || strspn(s, "0123456789") != n)
		return -EINVAL;
	uint64_t x = 0;
	for (size_t i = 0; i < n; i++)
		x = x * 10 + (uint64_t)(s[i] - '0');
	*ret = x;
	return 0;
}

int connect_timeout_parse(const char *value, uint64_t *ret_ms)
{
	return connect_digits_parse(value, ret_ms);
}

int connect_base64_decode(const char *text, size_t max, uint8_t **ret, size_t *ret_len)
{
	size_t n = strlen(text);
	/* 4 characters hold 3 bytes: refuse before copying what could not fit. */
	if (n / 4 > max / 3 + 1)
		return -E2BIG;
	cleanup_free char *std = xmalloc(n + 4);
	for (size_t i = 0; i < n; i++)
		std[i] = text[i] == '-' ? '+' : text[i] == '_' ? '/' : text[i];
	size_t m = n;
	while (m % 4)
		std[m++] = '=';
	uint8_t *out = NULL;
	size_t out_len = 0;
	if (base64_decode(std, m, &out, &out_len) < 0)
		return -EINVAL;
	if (out_len > max) {
		free(out);
		return -E2BIG;
	}
	*ret = out;
	*ret_len = out_len;
	return 0;
}
