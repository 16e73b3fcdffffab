/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the WebSocket attach (src/daemon/api/api-ws.c), all
 * fed with a browser's (any client's) bytes:
 *
 *   ws_decoder_feed()     the client's frames, in pieces of the size the
 *                         input's first byte says (1..256; 0: all at once)
 *   ws_protocols_parse()  Sec-WebSocket-Protocol
 *   ws_origin_allowed()   Origin and Host (the input split at its first NUL)
 *   ws_key_valid()        Sec-WebSocket-Key
 *   ws_control_parse()    a text message's JSON
 *
 * Beyond the sanitizers: the decoder never says it used more than it was
 * given, and uses all of it unless it hands out a message; a data message
 * is at most WS_MESSAGE_MAX, a text one is UTF-8, a control one at most
 * WS_CONTROL_MAX; a failure names one of the close codes and the decoder
 * stays failed, as after a close; a parsed token is of the allowed
 * characters and the offered list names it; an allowed Origin is absent
 * or http(s); a resize is in range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api-ws.h"
#include "sandbox-model.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-api-ws: check failed: %s (line %d)\n", #cond, __LINE__);                 \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static void check_message(const struct ws_message *m)
{
	switch (m->opcode) {
	case WS_OP_TEXT:
		CHECK(m->len <= WS_MESSAGE_MAX && utf8_valid(m->data, m->len));
		break;
	case WS_OP_BINARY:
		CHECK(m->len <= WS_MESSAGE_MAX);
		break;
	case WS_OP_CLOSE:
		CHECK(m->len <= WS_CONTROL_MAX && m->len != 1);
		CHECK((m->len == 0) == (m->close_code == 0));
		break;
	case WS_OP_PING:
	case WS_OP_PONG:
		CHECK(m->len <= WS_CONTROL_MAX);
		break;
	default:
		CHECK(!"an opcode that is not a message's");
	}
}

static void fuzz_decoder(const uint8_t *data, size_t size)
{
	if (size == 0)
		return;
	size_t piece = data[0] ? data[0] : size;
	data++;
	size--;
	struct ws_decoder *d = ws_decoder_new();
	bool over = false;
	for (size_t off = 0; off < size && !over;) {
		size_t n = MIN(piece, size - off);
		while (n > 0) {
			struct ws_message m;
			uint16_t close = 0;
			size_t used = 99999999;
			int r = ws_decoder_feed(d, data + off, n, &used, &m, &close);
			if (r < 0) {
				CHECK(close == WS_CLOSE_PROTOCOL || close == WS_CLOSE_TOO_BIG ||
				      close == WS_CLOSE_BAD_DATA);
				CHECK(ws_decoder_feed(d, data, size, &used, &m, &close) < 0 &&
				      close == WS_CLOSE_PROTOCOL);
				over = true;
				break;
			}
			CHECK(used <= n);
			if (r == 0) {
				CHECK(used == n);
			} else {
				check_message(&m);
				if (m.opcode == WS_OP_CLOSE) {
					CHECK(ws_decoder_feed(d, data, size, &used, &m, &close) < 0);
					over = true;
					break;
				}
			}
			off += used;
			n -= used;
		}
	}
	ws_decoder_free(d);
}

static void fuzz_headers(const char *text, size_t n, const char *second)
{
	struct ws_protocols p = {.pty = true, .token = "sentinel"};
	int r = ws_protocols_parse(text, &p);
	if (r < 0) {
		CHECK(r == -EINVAL || r == -E2BIG);
		CHECK(p.pty && !p.bearer && !strcmp(p.token, "sentinel"));
	} else {
		CHECK(r == 0 && n <= WS_PROTOCOLS_MAX);
		if (p.pty)
			CHECK(strstr(text, WS_PROTOCOL_PTY));
		if (p.bearer) {
			size_t tn = strlen(p.token);
			CHECK(tn >= 1 && tn <= WS_TOKEN_MAX &&
			      strspn(p.token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"
			                      "rstuvwxyz0123456789._~+-") == tn);
			CHECK(strstr(text, p.token));
		}
	}
	if (ws_origin_allowed(text, second))
		CHECK(!strncasecmp(text, "http://", 7) || !strncasecmp(text, "https://", 8));
	CHECK(ws_origin_allowed(NULL, second));
	if (ws_key_valid(text)) {
		CHECK(n == WS_KEY_LEN);
		char accept[WS_ACCEPT_LEN + 1];
		ws_accept_compute(text, accept);
		CHECK(strlen(accept) == WS_ACCEPT_LEN);
	}
}

static void fuzz_control(const uint8_t *data, size_t size)
{
	struct ws_control c = {0, 0};
	if (ws_control_parse(data, size, &c) == 0)
		CHECK(size <= WS_CONTROL_TEXT_MAX && c.rows >= 1 && c.rows <= PTY_ROWS_MAX && c.cols >= 1 &&
		      c.cols <= PTY_COLS_MAX);
	else
		CHECK(c.rows == 0 && c.cols == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_decoder(data, size);
	fuzz_control(data, size);
	size_t n = strnlen((const char *)data, size);
	char *text = xmalloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0';
	const char *second = n < size ? text + n + 1 : NULL;
	fuzz_headers(text, n, second);
	free(text);
	return 0;
}
