/* SPDX-License-Identifier: Apache-2.0 */
/* WebSocket (RFC 6455), the server's side, pure: the opening handshake's
 * headers (Sec-WebSocket-Key and -Accept, the offered subprotocols, the
 * Origin check), an incremental decoder of a client's frames that
 * reassembles messages, the server's frame heads, and the JSON control
 * messages of the PTY attach (docs/api.md, "The WebSocket variant").
 * No I/O, no logging: api-processes.c owns the socket. */
#ifndef AIRLOCK_API_WS_H
#define AIRLOCK_API_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WS_PROTOCOL_PTY "airlock.pty.v1"
#define WS_PROTOCOL_BEARER "airlock.bearer." /* + the token */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

#define WS_KEY_LEN 24           /* base64 of 16 bytes, with its "==" */
#define WS_ACCEPT_LEN 28        /* base64 of a SHA-1 */
#define WS_PROTOCOLS_MAX 1024   /* longest Sec-WebSocket-Protocol value looked at */
#define WS_PROTOCOL_COUNT_MAX 8 /* subprotocols offered at most */
#define WS_TOKEN_MAX 256        /* longest token in airlock.bearer.<token> */
#define WS_ORIGIN_MAX 1024      /* longest Origin or Host value looked at */
#define WS_MESSAGE_MAX 65536u   /* a whole (reassembled) data message */
#define WS_CONTROL_MAX 125u     /* a control frame's payload (RFC 6455 5.5) */
#define WS_HEAD_MAX 14          /* 2 + 8 (length) + 4 (mask) */
#define WS_CONTROL_TEXT_MAX 512 /* a JSON control message from the client */

enum ws_opcode {
	WS_OP_CONTINUATION = 0x0,
	WS_OP_TEXT = 0x1,
	WS_OP_BINARY = 0x2,
	WS_OP_CLOSE = 0x8,
	WS_OP_PING = 0x9,
	WS_OP_PONG = 0xA,
};

/* Close codes (RFC 6455 7.4.1) the server sends. */
enum {
	WS_CLOSE_NORMAL = 1000,
	WS_CLOSE_GOING_AWAY = 1001,
	WS_CLOSE_PROTOCOL = 1002,
	WS_CLOSE_BAD_DATA = 1007, /* a text message that is not UTF-8 */
	WS_CLOSE_POLICY = 1008,   /* a control message that is not one of ours */
	WS_CLOSE_TOO_BIG = 1009,
	WS_CLOSE_INTERNAL = 1011,
};

/* True if key is a Sec-WebSocket-Key: base64 of exactly 16 bytes. */
bool ws_key_valid(const char *key);
/* The Sec-WebSocket-Accept for a valid key (SHA-1 of key + WS_GUID, base64). */
void ws_accept_compute(const char *key, char ret_accept[WS_ACCEPT_LEN + 1]);

struct ws_protocols {
	bool pty;                     /* airlock.pty.v1 was offered */
	bool bearer;                  /* airlock.bearer.<token> was offered */
	char token[WS_TOKEN_MAX + 1]; /* that token */
};

/* SECURITY: value is a client's Sec-WebSocket-Protocol header, and may carry
 * its credential. Strict: a comma-separated list (optional spaces or tabs
 * around each item) of at most WS_PROTOCOL_COUNT_MAX RFC 7230 tokens, no
 * empty item, at most WS_PROTOCOLS_MAX bytes, at most one airlock.bearer.
 * item whose token is 1..WS_TOKEN_MAX characters of [A-Za-z0-9._~+-]
 * (what Airlock's tokens are made of; auth_token_verify checks it again).
 * Unknown subprotocols are allowed (and never chosen). -EINVAL if
 * malformed, -E2BIG if too long; *ret is written only on success. */
int ws_protocols_parse(const char *value, struct ws_protocols *ret);

/* SECURITY: the cross-site WebSocket hijacking check. A browser sends the
 * page's origin ("scheme://host[:port]"); the upgrade is allowed only if
 * it names the host the request was sent to (the Host header): the same
 * host and port, compared without case, the scheme's default port (http
 * 80, https 443) equal to none. An absent Origin (not a browser) is
 * allowed; "null", another scheme, a path, user info or a host that
 * differs is not. */
bool ws_origin_allowed(const char *origin, const char *host);

/* An incremental decoder of one client's frames. */
struct ws_message {
	uint8_t opcode;      /* WS_OP_TEXT/BINARY (reassembled), CLOSE, PING or PONG */
	const uint8_t *data; /* the payload, unmasked; valid until the next feed */
	size_t len;
	uint16_t close_code; /* WS_OP_CLOSE: the client's code, 0 if it sent none */
};

struct ws_decoder;
struct ws_decoder *ws_decoder_new(void);
void ws_decoder_free(struct ws_decoder *d);

/* SECURITY: in is bytes from the client, any split, any content. Consumes
 * at most n bytes (*ret_used) and returns 1 when a message is complete
 * (*ret_msg), 0 when it needs more, or < 0 with the close code to send in
 * *ret_close: WS_CLOSE_PROTOCOL for an unmasked frame, reserved bits or
 * opcodes, a fragmented or long control frame, a continuation out of
 * place, a length that is not minimal or has its top bit, or a bad close
 * payload; WS_CLOSE_TOO_BIG for a message above WS_MESSAGE_MAX (checked
 * on each frame's head, before its payload is read); WS_CLOSE_BAD_DATA
 * for a text message or close reason that is not UTF-8. Nothing is
 * allocated beyond the decoder's own WS_MESSAGE_MAX. After an error or a
 * close message the decoder accepts nothing more. */
int ws_decoder_feed(struct ws_decoder *d, const uint8_t *in, size_t n, size_t *ret_used, struct ws_message *ret_msg,
                    uint16_t *ret_close);

/* The head of a server frame (FIN, unmasked) for a payload of len bytes;
 * returns its length (2..10). */
size_t ws_frame_head(uint8_t out[WS_HEAD_MAX], enum ws_opcode opcode, uint64_t len);

/* A control message of the client (a text message). */
struct ws_control {
	unsigned rows, cols; /* "resize": 1..PTY_ROWS_MAX, 1..PTY_COLS_MAX */
};
/* SECURITY: text is a client's whole text message (UTF-8, checked by the
 * decoder). It must be a JSON object {"type":"resize","cols":N,"rows":N},
 * at most WS_CONTROL_TEXT_MAX bytes, no other field, each size an integer
 * in range. -EINVAL otherwise (*ret unwritten). */
int ws_control_parse(const uint8_t *text, size_t len, struct ws_control *ret);

#endif
