/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the WebSocket codec of the PTY attach
 * (src/daemon/api/api-ws.c): the handshake's key and accept value, the
 * offered subprotocols, the Origin check, the client frame decoder (RFC
 * 6455's examples and its failure cases), the server's frame heads and
 * the JSON control messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api-ws.h"
#include "sandbox-model.h"
#include "util.h"

/* ------------------------------------------------------------ handshake */

static void test_key_and_accept(void **state)
{
	(void)state;
	/* RFC 6455 1.3's example. */
	assert_true(ws_key_valid("dGhlIHNhbXBsZSBub25jZQ=="));
	char accept[WS_ACCEPT_LEN + 1];
	ws_accept_compute("dGhlIHNhbXBsZSBub25jZQ==", accept);
	assert_string_equal(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");

	assert_false(ws_key_valid(NULL));
	assert_false(ws_key_valid(""));
	assert_false(ws_key_valid("dGhlIHNhbXBsZSBub25jZQ="));   /* short */
	assert_false(ws_key_valid("dGhlIHNhbXBsZSBub25jZQ===")); /* long */
	assert_false(ws_key_valid("dGhlIHNhbXBsZSBub25jZ!=="));  /* not base64 */
	assert_false(ws_key_valid("dGhlIHNhbXBsZSBub25jZQAA"));  /* 18 bytes */
}

static void test_protocols(void **state)
{
	(void)state;
	struct ws_protocols p;
	assert_int_equal(ws_protocols_parse("airlock.pty.v1", &p), 0);
	assert_true(p.pty);
	assert_false(p.bearer);

	assert_int_equal(ws_protocols_parse("airlock.pty.v1, airlock.bearer.alk_abc-DEF_123", &p), 0);
	assert_true(p.pty && p.bearer);
	assert_string_equal(p.token, "alk_abc-DEF_123");

	/* Spaces and tabs around items; others' subprotocols are allowed. */
	assert_int_equal(ws_protocols_parse(" \tchat ,airlock.bearer.t ,\tairlock.pty.v1\t", &p), 0);
	assert_true(p.pty && p.bearer);
	assert_string_equal(p.token, "t");
	assert_int_equal(ws_protocols_parse("chat", &p), 0);
	assert_false(p.pty || p.bearer);

	/* Strict. */
	struct ws_protocols untouched = {.pty = true, .token = "x"};
	p = untouched;
	const char *bad[] = {
	    "",
	    ",airlock.pty.v1",
	    "airlock.pty.v1,",
	    "airlock.pty.v1,,chat",
	    "airlock.pty v1",
	    "airlock.pty.v1; q=1",
	    "airlock.bearer.",
	    "airlock.bearer.a, airlock.bearer.b",
	    "airlock.bearer.a/b",
	    "airlock.bearer.abc=",
	    "airlock.pty.v1, airlock.bearer.a\x01",
	    "a,b,c,d,e,f,g,h,i",
	    "airlock.pty.v1\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		if (ws_protocols_parse(bad[i], &p) != -EINVAL)
			fail_msg("accepted \"%s\"", bad[i]);
		assert_memory_equal(&p, &untouched, sizeof(p));
	}
	assert_int_equal(ws_protocols_parse(NULL, &p), -EINVAL);

	/* A token of WS_TOKEN_MAX characters is fine; one more is too long. */
	char v[WS_PROTOCOLS_MAX + 2];
	size_t n = (size_t)snprintf(v, sizeof(v), "%s", WS_PROTOCOL_BEARER);
	memset(v + n, 'a', WS_TOKEN_MAX);
	v[n + WS_TOKEN_MAX] = '\0';
	assert_int_equal(ws_protocols_parse(v, &p), 0);
	assert_int_equal(strlen(p.token), WS_TOKEN_MAX);
	v[n + WS_TOKEN_MAX] = 'a';
	v[n + WS_TOKEN_MAX + 1] = '\0';
	assert_int_equal(ws_protocols_parse(v, &p), -E2BIG);
	/* The whole value is bounded. */
	memset(v, 'a', WS_PROTOCOLS_MAX + 1);
	v[WS_PROTOCOLS_MAX + 1] = '\0';
	assert_int_equal(ws_protocols_parse(v, &p), -E2BIG);
}

static void test_origin(void **state)
{
	(void)state;
	assert_true(ws_origin_allowed(NULL, "127.0.0.1:7070"));
	assert_true(ws_origin_allowed(NULL, NULL));
	assert_true(ws_origin_allowed("http://127.0.0.1:7070", "127.0.0.1:7070"));
	assert_true(ws_origin_allowed("HTTPS://Console.Example.com", "console.example.com"));
	assert_true(ws_origin_allowed("http://example.com", "example.com:80"));
	assert_true(ws_origin_allowed("https://example.com:443", "example.com"));
	assert_true(ws_origin_allowed("http://[::1]:7070", "[::1]:7070"));

	assert_false(ws_origin_allowed("http://evil.example", "127.0.0.1:7070"));
	assert_false(ws_origin_allowed("http://127.0.0.1:7071", "127.0.0.1:7070"));
	assert_false(ws_origin_allowed("http://127.0.0.1", "127.0.0.1:7070"));
	assert_false(ws_origin_allowed("https://example.com", "example.com:80"));
	assert_false(ws_origin_allowed("null", "127.0.0.1:7070"));
	assert_false(ws_origin_allowed("file://", "127.0.0.1"));
	assert_false(ws_origin_allowed("ftp://127.0.0.1", "127.0.0.1"));
	assert_false(ws_origin_allowed("http://127.0.0.1/", "127.0.0.1"));
	assert_false(ws_origin_allowed("http://user@127.0.0.1", "127.0.0.1"));
	assert_false(ws_origin_allowed("http://", ""));
	assert_false(ws_origin_allowed("http://127.0.0.1", NULL));
	assert_false(ws_origin_allowed("http://127.0.0.1", "127.0.0.1 x"));
	assert_false(ws_origin_allowed("http://127.0.0.1.evil", "127.0.0.1"));
}

/* ------------------------------------------------------------ frames */

/* A masked client frame; the caller frees it. */
static uint8_t *client_frame(uint8_t b0, const void *payload, size_t len, size_t *ret_len)
{
	static const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};
	uint8_t *f = xmalloc(WS_HEAD_MAX + len);
	size_t h = ws_frame_head(f, WS_OP_TEXT, len); /* the length bytes */
	f[0] = b0;
	f[1] |= 0x80;
	memcpy(f + h, mask, 4);
	for (size_t i = 0; i < len; i++)
		f[h + 4 + i] = ((const uint8_t *)payload)[i] ^ mask[i % 4];
	*ret_len = h + 4 + len;
	return f;
}

/* Feeds all of buf at once; the result, the message and the close code. */
static int feed_all(struct ws_decoder *d, const uint8_t *buf, size_t n, struct ws_message *msg, uint16_t *close)
{
	size_t used = 0;
	int r = ws_decoder_feed(d, buf, n, &used, msg, close);
	if (r >= 0 && r == 1)
		assert_true(used <= n);
	if (r == 0)
		assert_int_equal(used, n);
	return r;
}

static void test_decode_rfc_examples(void **state)
{
	(void)state;
	struct ws_decoder *d = ws_decoder_new();
	struct ws_message m;
	uint16_t close = 0;
	/* RFC 6455 5.7: a masked "Hello". */
	const uint8_t hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
	assert_int_equal(feed_all(d, hello, sizeof(hello), &m, &close), 1);
	assert_int_equal(m.opcode, WS_OP_TEXT);
	assert_int_equal(m.len, 5);
	assert_memory_equal(m.data, "Hello", 5);

	/* The same one byte at a time. */
	for (size_t i = 0; i < sizeof(hello); i++) {
		size_t used = 0;
		int r = ws_decoder_feed(d, hello + i, 1, &used, &m, &close);
		assert_int_equal(used, 1);
		assert_int_equal(r, i + 1 == sizeof(hello) ? 1 : 0);
	}
	assert_memory_equal(m.data, "Hello", 5);

	/* Two frames in one buffer: the first message, then the rest. */
	uint8_t two[2 * sizeof(hello)];
	memcpy(two, hello, sizeof(hello));
	memcpy(two + sizeof(hello), hello, sizeof(hello));
	size_t used = 0;
	assert_int_equal(ws_decoder_feed(d, two, sizeof(two), &used, &m, &close), 1);
	assert_int_equal(used, sizeof(hello));
	assert_int_equal(ws_decoder_feed(d, two + used, sizeof(two) - used, &used, &m, &close), 1);
	assert_int_equal(used, sizeof(hello));

	/* Binary of 256 bytes (16-bit length) and of 65536 (64-bit length). */
	size_t fl;
	uint8_t *payload = xmalloc(WS_MESSAGE_MAX);
	for (size_t i = 0; i < WS_MESSAGE_MAX; i++)
		payload[i] = (uint8_t)(i * 7);
	uint8_t *f = client_frame(0x82, payload, 256, &fl);
	assert_int_equal(fl, 4 + 4 + 256);
	assert_int_equal(feed_all(d, f, fl, &m, &close), 1);
	assert_int_equal(m.opcode, WS_OP_BINARY);
	assert_int_equal(m.len, 256);
	assert_memory_equal(m.data, payload, 256);
	free(f);
	f = client_frame(0x82, payload, WS_MESSAGE_MAX, &fl);
	assert_int_equal(fl, 10 + 4 + WS_MESSAGE_MAX);
	assert_int_equal(feed_all(d, f, fl, &m, &close), 1);
	assert_int_equal(m.len, WS_MESSAGE_MAX);
	assert_memory_equal(m.data, payload, WS_MESSAGE_MAX);
	free(f);
	free(payload);

	/* An empty binary message. */
	f = client_frame(0x82, "", 0, &fl);
	assert_int_equal(feed_all(d, f, fl, &m, &close), 1);
	assert_int_equal(m.opcode, WS_OP_BINARY);
	assert_int_equal(m.len, 0);
	free(f);
	ws_decoder_free(d);
}

static void test_decode_fragments_and_control(void **state)
{
	(void)state;
	struct ws_decoder *d = ws_decoder_new();
	struct ws_message m;
	uint16_t close = 0;
	size_t l1, l2, l3, lp;
	/* "Hel" (text, not FIN), a ping between, "lo" (continuation, FIN). */
	uint8_t *f1 = client_frame(0x01, "Hel", 3, &l1);
	uint8_t *ping = client_frame(0x89, "ping!", 5, &lp);
	uint8_t *f2 = client_frame(0x00, "l", 1, &l2);
	uint8_t *f3 = client_frame(0x80, "o", 1, &l3);
	assert_int_equal(feed_all(d, f1, l1, &m, &close), 0);
	assert_int_equal(feed_all(d, ping, lp, &m, &close), 1);
	assert_int_equal(m.opcode, WS_OP_PING);
	assert_memory_equal(m.data, "ping!", 5);
	assert_int_equal(feed_all(d, f2, l2, &m, &close), 0);
	assert_int_equal(feed_all(d, f3, l3, &m, &close), 1);
	assert_int_equal(m.opcode, WS_OP_TEXT);
	assert_int_equal(m.len, 5);
	assert_memory_equal(m.data, "Hello", 5);
	free(f1);
	free(f2);
	free(f3);
	free(ping);

	/* A pong is handed out (and ignored by the caller). */
	uint8_t *pong = client_frame(0x8A, "", 0, &lp);
	assert_int_equal(feed_all(d, pong, lp, &m, &close), 1);
	assert_int_equal(m.opcode, WS_OP_PONG);
	free(pong);

	/* Close with a code and reason; then nothing more. */
	uint8_t *c = client_frame(0x88,
	                          "\x03\xe8"
	                          "bye",
	                          5, &lp);
	assert_int_equal(feed_all(d, c, lp, &m, &close), 1);
	assert_int_equal(m.opcode, WS_OP_CLOSE);
	assert_int_equal(m.close_code, 1000);
	size_t used;
	assert_int_equal(ws_decoder_feed(d, c, lp, &used, &m, &close), -EPROTO);
	free(c);
	ws_decoder_free(d);

	/* Close without a code. */
	d = ws_decoder_new();
	c = client_frame(0x88, "", 0, &lp);
	assert_int_equal(feed_all(d, c, lp, &m, &close), 1);
	assert_int_equal(m.opcode, WS_OP_CLOSE);
	assert_int_equal(m.close_code, 0);
	free(c);
	ws_decoder_free(d);
}

/* A fresh decoder fed buf expects failure with close code want. */
static void decode_fails(const uint8_t *buf, size_t n, uint16_t want)
{
	struct ws_decoder *d = ws_decoder_new();
	struct ws_message m;
	uint16_t close = 0;
	size_t used;
	int r = ws_decoder_feed(d, buf, n, &used, &m, &close);
	if (r >= 0 || close != want)
		fail_msg("feed returned %d close %u, want close %u", r, close, want);
	/* And stays failed. */
	assert_true(ws_decoder_feed(d, buf, n, &used, &m, &close) < 0);
	ws_decoder_free(d);
}

static void test_decode_errors(void **state)
{
	(void)state;
	/* Unmasked (RFC 6455 5.1): the server closes with 1002. */
	const uint8_t unmasked[] = {0x81, 0x05, 'H', 'e', 'l', 'l', 'o'};
	decode_fails(unmasked, sizeof(unmasked), WS_CLOSE_PROTOCOL);
	/* Seen on the first two bytes already. */
	decode_fails(unmasked, 2, WS_CLOSE_PROTOCOL);

	size_t n;
	uint8_t *f;
	/* Reserved bits, reserved opcodes. */
	const uint8_t b0s[] = {0xC1, 0xA1, 0x91, 0x83, 0x87, 0x8B, 0x8F};
	for (size_t i = 0; i < ARRAY_SIZE(b0s); i++) {
		f = client_frame(b0s[i], "x", 1, &n);
		decode_fails(f, n, WS_CLOSE_PROTOCOL);
		free(f);
	}
	/* A fragmented control frame; a control frame above 125 bytes. */
	f = client_frame(0x09, "x", 1, &n);
	decode_fails(f, n, WS_CLOSE_PROTOCOL);
	free(f);
	uint8_t big[200] = {0};
	f = client_frame(0x89, big, 126, &n);
	decode_fails(f, n, WS_CLOSE_PROTOCOL);
	free(f);
	/* A continuation without a message; a new message inside one. */
	f = client_frame(0x80, "x", 1, &n);
	decode_fails(f, n, WS_CLOSE_PROTOCOL);
	free(f);
	size_t n1, n2;
	uint8_t *a = client_frame(0x01, "x", 1, &n1), *b = client_frame(0x82, "y", 1, &n2);
	uint8_t both[64];
	memcpy(both, a, n1);
	memcpy(both + n1, b, n2);
	decode_fails(both, n1 + n2, WS_CLOSE_PROTOCOL);
	free(a);
	free(b);
	/* Lengths: not minimal (16-bit for 5, 64-bit for 200), the top bit. */
	const uint8_t len16[] = {0x82, 0xFE, 0x00, 0x05, 1, 2, 3, 4};
	decode_fails(len16, sizeof(len16), WS_CLOSE_PROTOCOL);
	const uint8_t len64[] = {0x82, 0xFF, 0, 0, 0, 0, 0, 0, 0, 200, 1, 2, 3, 4};
	decode_fails(len64, sizeof(len64), WS_CLOSE_PROTOCOL);
	const uint8_t top[] = {0x82, 0xFF, 0x80, 0, 0, 0, 0, 1, 0, 0, 1, 2, 3, 4};
	decode_fails(top, sizeof(top), WS_CLOSE_PROTOCOL);
	/* Too big: one frame's head says so, before any payload. */
	const uint8_t huge[] = {0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 1, 1, 2, 3, 4};
	decode_fails(huge, sizeof(huge), WS_CLOSE_TOO_BIG);
	/* Too big in fragments. */
	uint8_t *payload = xcalloc(1, WS_MESSAGE_MAX);
	a = client_frame(0x02, payload, WS_MESSAGE_MAX - 10, &n1);
	b = client_frame(0x80, payload, 11, &n2);
	uint8_t *frag = xmalloc(n1 + n2);
	memcpy(frag, a, n1);
	memcpy(frag + n1, b, n2);
	decode_fails(frag, n1 + n2, WS_CLOSE_TOO_BIG);
	free(frag);
	free(a);
	free(b);
	free(payload);
	/* Text that is not UTF-8; a close reason that is not. */
	f = client_frame(0x81, "\xc3\x28", 2, &n);
	decode_fails(f, n, WS_CLOSE_BAD_DATA);
	free(f);
	f = client_frame(0x88, "\x03\xe8\xff", 3, &n);
	decode_fails(f, n, WS_CLOSE_BAD_DATA);
	free(f);
	/* Close payloads: one byte; codes never sent on the wire. */
	f = client_frame(0x88, "\x03", 1, &n);
	decode_fails(f, n, WS_CLOSE_PROTOCOL);
	free(f);
	const char *codes[] = {"\x03\xed", "\x03\xee", "\x03\xec", "\x00\x00", "\x03\xe7", "\x0b\xb7", "\x13\x88"};
	for (size_t i = 0; i < ARRAY_SIZE(codes); i++) {
		f = client_frame(0x88, codes[i], 2, &n);
		decode_fails(f, n, WS_CLOSE_PROTOCOL);
		free(f);
	}
}

static void test_frame_head(void **state)
{
	(void)state;
	uint8_t h[WS_HEAD_MAX];
	assert_int_equal(ws_frame_head(h, WS_OP_TEXT, 5), 2);
	assert_int_equal(h[0], 0x81);
	assert_int_equal(h[1], 5); /* unmasked */
	assert_int_equal(ws_frame_head(h, WS_OP_BINARY, 125), 2);
	assert_int_equal(h[1], 125);
	assert_int_equal(ws_frame_head(h, WS_OP_BINARY, 126), 4);
	assert_int_equal(h[1], 126);
	assert_int_equal(h[2] << 8 | h[3], 126);
	assert_int_equal(ws_frame_head(h, WS_OP_BINARY, 65535), 4);
	assert_int_equal(ws_frame_head(h, WS_OP_CLOSE, 65536), 10);
	assert_int_equal(h[0], 0x88);
	assert_int_equal(h[1], 127);
	const uint8_t want[] = {0, 0, 0, 0, 0, 1, 0, 0};
	assert_memory_equal(h + 2, want, 8);
}

/* ------------------------------------------------------------ control messages */

static void test_control(void **state)
{
	(void)state;
	struct ws_control c;
	const char *ok = "{\"type\":\"resize\",\"cols\":132,\"rows\":43}";
	assert_int_equal(ws_control_parse((const uint8_t *)ok, strlen(ok), &c), 0);
	assert_int_equal(c.cols, 132);
	assert_int_equal(c.rows, 43);

	struct ws_control untouched = {7, 7};
	const char *bad[] = {
	    "",
	    "[]",
	    "{\"type\":\"resize\",\"cols\":0,\"rows\":43}",
	    "{\"type\":\"resize\",\"cols\":1001,\"rows\":43}",
	    "{\"type\":\"resize\",\"cols\":80,\"rows\":1001}",
	    "{\"type\":\"resize\",\"cols\":80.5,\"rows\":24}",
	    "{\"type\":\"resize\",\"cols\":\"80\",\"rows\":24}",
	    "{\"type\":\"resize\",\"cols\":80}",
	    "{\"type\":\"resize\",\"cols\":80,\"rows\":24,\"x\":1}",
	    "{\"type\":\"resize\",\"cols\":80,\"rows\":24,\"rows\":25}",
	    "{\"type\":\"exit\",\"cols\":80,\"rows\":24}",
	    "{\"type\":null,\"cols\":80,\"rows\":24}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		c = untouched;
		if (ws_control_parse((const uint8_t *)bad[i], strlen(bad[i]), &c) != -EINVAL)
			fail_msg("accepted %s", bad[i]);
		assert_memory_equal(&c, &untouched, sizeof(c));
	}
	/* Bounded before parsing. */
	char big[WS_CONTROL_TEXT_MAX + 64];
	int n = snprintf(big, sizeof(big), "{\"type\":\"resize\",\"cols\":80,\"rows\":24%*s}", WS_CONTROL_TEXT_MAX, "");
	assert_int_equal(ws_control_parse((const uint8_t *)big, (size_t)n, &c), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_key_and_accept),
	    cmocka_unit_test(test_protocols),
	    cmocka_unit_test(test_origin),
	    cmocka_unit_test(test_decode_rfc_examples),
	    cmocka_unit_test(test_decode_fragments_and_control),
	    cmocka_unit_test(test_decode_errors),
	    cmocka_unit_test(test_frame_head),
	    cmocka_unit_test(test_control),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
