/* SPDX-License-Identifier: Apache-2.0 */
/* The Connect protocol's wire format (connectrpc.com/docs/protocol), JSON
 * codec only: what E2B's SDK speaks to the in-sandbox API ("envd").
 *
 * A unary call is a plain POST of one JSON message (application/json); its
 * error is a non-200 status with {"code":"not_found","message":"…"}.
 * A streaming call (application/connect+json) carries messages in 5-byte
 * envelopes: flags (1 byte; 0x01 compressed, 0x02 end of stream), then the
 * length (4 bytes, big-endian), then the message. A server stream ends
 * with an end-of-stream envelope whose message is {} or {"error":{…}}. */
#ifndef AIRLOCK_CONNECT_WIRE_H
#define AIRLOCK_CONNECT_WIRE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define CONNECT_ENVELOPE_HEADER 5
#define CONNECT_FLAG_COMPRESSED 0x01u
#define CONNECT_FLAG_END_STREAM 0x02u
/* The largest request message accepted (an envd request is a few KiB; input
 * for a process's stdin is the biggest). */
#define CONNECT_MESSAGE_MAX (16u << 20)
#define CONNECT_STREAM_CONTENT_TYPE "application/connect+json"

/* The Connect code name of an Airlock error code ("not_found", …). */
const char *connect_code_name(enum al_error_code code);
/* The HTTP status a unary Connect error is sent with, for a Connect code
 * name (the protocol's table: not_found 404, invalid_argument 400, …). */
int connect_code_http_status(const char *code);

/* SECURITY: body is a client's whole request body. Parses the single
 * enveloped message of a server-streaming request: exactly one envelope,
 * not compressed, not an end-of-stream, length within the body and at most
 * CONNECT_MESSAGE_MAX, and a JSON object. -EINVAL with err saying which. */
int connect_request_unwrap(const uint8_t *body, size_t len, json_t **ret_msg, struct al_error *err);

/* One envelope around msg (not stolen) with flags; returns a malloc'd
 * buffer and its length in *ret_len. */
uint8_t *connect_envelope(uint8_t flags, const json_t *msg, size_t *ret_len);
/* The end-of-stream envelope: {} when err is NULL or has no code, else
 * {"error":{"code":C,"message":M}} (M with U+FFFD for each byte of the
 * message that is not UTF-8). */
uint8_t *connect_end_stream(const struct al_error *err, size_t *ret_len);

/* SECURITY: 1 to 10 ASCII digits (no sign, no space), else -EINVAL: the
 * Connect-Timeout-Ms header (connect_timeout_parse) and protobuf JSON's
 * 32-bit integers written as strings. */
int connect_digits_parse(const char *s, uint64_t *ret);

/* SECURITY: the Connect-Timeout-Ms header's value: 1 to 10 ASCII digits
 * (no sign, no space), else -EINVAL, as @connectrpc/connect's parseTimeout
 * reads it; "0" is 0, a deadline already passed: the caller decides. */
int connect_timeout_parse(const char *value, uint64_t *ret_ms);

/* Protobuf's JSON for bytes is base64 (util.h's base64_encode writes it).
 * SECURITY: client input. Accepts standard or URL-safe base64, with or
 * without padding (protobuf's JSON readers take both); at most max decoded
 * bytes. -EINVAL on anything else. */
int connect_base64_decode(const char *text, size_t max, uint8_t **ret, size_t *ret_len);

#endif
