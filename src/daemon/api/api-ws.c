/* SPDX-License-Identifier: Apache-2.0 */
/* WebSocket (RFC 6455), the server's side, pure (api-ws.h). */
#include <openssl/evp.h>
#include <strings.h>

#include "api-ws.h"
#include "json-cleanup.h"
#include "sandbox-model.h"
#include "util.h"

/* ---- the handshake ------------------------------------------------------------------------------- */

bool ws_key_valid(const char *key)
{
	if (!key || strnlen(key, WS_KEY_LEN + 1) != WS_KEY_LEN || strcmp(key + WS_KEY_LEN - 2, "=="))
		return false;
	uint8_t *raw = NULL;
	size_t n = 0;
	if (base64_decode(key, WS_KEY_LEN, &raw, &n) < 0)
		return false;
	free(raw);
	return n == 16;
}

void ws_accept_compute(const char *key, char ret_accept[WS_ACCEPT_LEN + 1])
{
	char joined[WS_KEY_LEN + sizeof(WS_GUID)];
	size_t n = (size_t)snprintf(joined, sizeof(joined), "%s%s", key, WS_GUID);
	uint8_t digest[EVP_MAX_MD_SIZE];
	unsigned digest_len = 0;
	if (n >= sizeof(joined) || EVP_Digest(joined, n, digest, &digest_len, EVP_sha1(), NULL) != 1)
		abort(); /* a valid key fits; SHA-1 does not fail */
	cleanup_free char *b64 = base64_encode(digest, digest_len, NULL);
	strlcpy_al(ret_accept, b64, WS_ACCEPT_LEN + 1);
}

/* RFC 7230's tchar: what a subprotocol name is made of. */
static bool tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("._~+-", c));
}

/* One item of the list (not empty, tchars only) into p. */
static int protocol_item(const char *item, size_t len, struct ws_protocols *p)
{
	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		if (!tchar(item[i]))
			return -EINVAL;
	size_t prefix = strlen(WS_PROTOCOL_BEARER);
	if (len == strlen(WS_PROTOCOL_PTY) && !memcmp(item, WS_PROTOCOL_PTY, len)) {
		p->pty = true;
		return 0;
	}
	if (len < prefix || memcmp(item, WS_PROTOCOL_BEARER, prefix))
		return 0; /* someone else's subprotocol: never chosen */
	size_t tn = len - prefix;
	if (p->bearer || tn == 0)
		return -EINVAL;
	if (tn > WS_TOKEN_MAX)
		return -E2BIG;
	for (size_t i = 0; i < tn; i++)
		if (!token_char(item[prefix + i]))
			return -EINVAL;
	memcpy(p->token, item + prefix, tn);
	p->token[tn] = '\0';
	p->bearer = true;
	return 0;
}

int ws_protocols_parse(const char *value, struct ws_protocols *ret)
{
	if (!value)
		return -EINVAL;
	size_t n = strnlen(value, WS_PROTOCOLS_MAX + 1);
	if (n > WS_PROTOCOLS_MAX)
		return -E2BIG;
	struct ws_protocols p = {0};
	unsigned count = 0;
	for (size_t i = 0; i <= n;) {
		size_t end = i;
		while (end < n && value[end] != ',')
			end++;
		size_t a = i, b = end;
		while (a < b && (value[a] == ' ' || value[a] == '\t'))
			a++;
		while (b > a && (value[b - 1] == ' ' || value[b - 1] == '\t'))
			b--;
		if (++count > WS_PROTOCOL_COUNT_MAX)
			return -EINVAL;
		int r = protocol_item(value + a, b - a, &p);
		if (r < 0) {
			explicit_bzero(&p, sizeof(p));
			return r;
		}
		i = end + 1;
	}
	*ret = p;
	explicit_bzero(&p, sizeof(p));
	return 0;
}

/* The authority of an Origin without its scheme's default port, or NULL
 * with *ret_len unset if origin is not scheme://host[:port]. */
static const char *origin_authority(const char *origin, size_t *ret_len, const char **ret_default_port)
{
	static const struct {
		const char *scheme, *port;
	} schemes[] = {{"http://", ":80"}, {"https://", ":443"}};
	for (size_t s = 0; s < ARRAY_SIZE(schemes); s++) {
		size_t sl = strlen(schemes[s].scheme);
		if (strncasecmp(origin, schemes[s].scheme, sl))
			continue;
		const char *auth = origin + sl;
		size_t n = strlen(auth);
		if (n == 0 || strcspn(auth, "/?#@\\ \t") != n)
			return NULL;
		*ret_default_port = schemes[s].port;
		*ret_len = n;
		return auth;
	}
	return NULL;
}

/* len without a trailing default port. */
static size_t strip_port(const char *s, size_t len, const char *port)
{
	size_t pl = strlen(port);
	if (len > pl && !memcmp(s + len - pl, port, pl))
		return len - pl;
	return len;
}

bool ws_origin_allowed(const char *origin, const char *host)
{
	if (!origin)
		return true;
	if (!host || strnlen(origin, WS_ORIGIN_MAX + 1) > WS_ORIGIN_MAX ||
	    strnlen(host, WS_ORIGIN_MAX + 1) > WS_ORIGIN_MAX)
		return false;
	size_t alen = 0;
	const char *port = NULL;
	const char *auth = origin_authority(origin, &alen, &port);
	if (!auth)
		return false;
	size_t hlen = strlen(host);
	if (hlen == 0 || strcspn(host, "/?#@\\ \t") != hlen)
		return false;
	alen = strip_port(auth, alen, port);
	hlen = strip_port(host, hlen, port);
	return alen == hlen && strncasecmp(auth, host, alen) == 0;
}

/* ---- frames -------------------------------------------------------------------------------------- */

struct ws_decoder {
	uint8_t head[WS_HEAD_MAX];
	size_t head_have, head_need;
	bool in_payload;
	/* The frame being read. */
	uint8_t opcode, mask[4];
	bool fin;
	uint64_t payload_len, payload_have;
	/* The data message being reassembled: msg_opcode 0 while there is none. */
	uint8_t msg_opcode;
	size_t msg_len;
	bool msg_delivered; /* handed out by the last feed: forget it on the next */
	bool done;          /* after an error or a close: nothing more */
	uint8_t control[WS_CONTROL_MAX];
	uint8_t msg[WS_MESSAGE_MAX];
};

struct ws_decoder *ws_decoder_new(void)
{
	return xcalloc(1, sizeof(struct ws_decoder));
}

void ws_decoder_free(struct ws_decoder *d)
{
	free(d);
}

static bool opcode_control(uint8_t op)
{
	return op >= WS_OP_CLOSE;
}

/* Checks the first two bytes of a head; the bytes a whole head needs. */
static int head_start(struct ws_decoder *d, size_t *ret_need)
{
	uint8_t b0 = d->head[0], b1 = d->head[1];
	uint8_t op = b0 & 0x0f, len7 = b1 & 0x7f;
	if (b0 & 0x70)
		return -EPROTO; /* no extension was negotiated */
	if (op != WS_OP_CONTINUATION && op != WS_OP_TEXT && op != WS_OP_BINARY && op != WS_OP_CLOSE &&
	    op != WS_OP_PING && op != WS_OP_PONG)
		return -EPROTO;
	if (!(b1 & 0x80))
		return -EPROTO; /* a client masks every frame (RFC 6455 5.1) */
	if (opcode_control(op) && (!(b0 & 0x80) || len7 > WS_CONTROL_MAX))
		return -EPROTO;
	if (op == WS_OP_CONTINUATION && !d->msg_opcode)
		return -EPROTO;
	if ((op == WS_OP_TEXT || op == WS_OP_BINARY) && d->msg_opcode)
		return -EPROTO; /* a new message inside a fragmented one */
	*ret_need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + 4;
	return 0;
}

/* The whole head is there: its length and mask. */
static int head_finish(struct ws_decoder *d)
{
	uint8_t len7 = d->head[1] & 0x7f;
	uint64_t len = len7;
	size_t at = 2;
	if (len7 == 126) {
		len = (uint64_t)d->head[2] << 8 | d->head[3];
		at = 4;
		if (len < 126)
			return -EPROTO; /* not the minimal length encoding */
	} else if (len7 == 127) {
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | d->head[2 + i];
		at = 10;
		if (len >> 63 || len <= 0xffff)
			return -EPROTO;
	}
	d->opcode = d->head[0] & 0x0f;
	d->fin = d->head[0] & 0x80;
	memcpy(d->mask, d->head + at, 4);
	if (!opcode_control(d->opcode) && len > WS_MESSAGE_MAX - d->msg_len)
		return -EMSGSIZE;
	if (d->opcode == WS_OP_TEXT || d->opcode == WS_OP_BINARY)
		d->msg_opcode = d->opcode;
	d->payload_len = len;
	d->payload_have = 0;
	d->in_payload = true;
	return 0;
}

static bool close_code_valid(unsigned code)
{
	if (code >= 3000 && code <= 4999)
		return true;
	return code >= 1000 && code <= 1014 && code != 1004 && code != 1005 && code != 1006;
}

/* A whole frame's payload is in: 1 and *ret_msg if a message is complete. */
static int frame_complete(struct ws_decoder *d, struct ws_message *ret_msg)
{
	d->in_payload = false;
	d->head_have = 0;
	size_t len = (size_t)d->payload_len;
	if (opcode_control(d->opcode)) {
		*ret_msg = (struct ws_message){.opcode = d->opcode, .data = d->control, .len = len};
		if (d->opcode != WS_OP_CLOSE)
			return 1;
		if (len == 1)
			return -EPROTO;
		if (len >= 2) {
			unsigned code = (unsigned)d->control[0] << 8 | d->control[1];
			if (!close_code_valid(code))
				return -EPROTO;
			if (!utf8_valid(d->control + 2, len - 2))
				return -EILSEQ;
			ret_msg->close_code = (uint16_t)code;
		}
		d->done = true;
		return 1;
	}
	d->msg_len += len;
	if (!d->fin)
		return 0;
	if (d->msg_opcode == WS_OP_TEXT && !utf8_valid(d->msg, d->msg_len))
		return -EILSEQ;
	*ret_msg = (struct ws_message){.opcode = d->msg_opcode, .data = d->msg, .len = d->msg_len};
	d->msg_delivered = true;
	return 1;
}

/* Copies payload bytes, unmasking them. */
static size_t payload_take(struct ws_decoder *d, const uint8_t *in, size_t n)
{
	uint64_t left = d->payload_len - d->payload_have;
	size_t take = (size_t)MIN((uint64_t)n, left);
	uint8_t *dst = opcode_control(d->opcode) ? d->control : d->msg + d->msg_len;
	for (size_t i = 0; i < take; i++) {
		uint64_t at = d->payload_have + i;
		dst[at] = in[i] ^ d->mask[at % 4];
	}
	d->payload_have += take;
	return take;
}

static uint16_t close_code_of(int r)
{
	return r == -EMSGSIZE ? WS_CLOSE_TOO_BIG : r == -EILSEQ ? WS_CLOSE_BAD_DATA : WS_CLOSE_PROTOCOL;
}

/* Reads what in holds of the frame's head; 1 once the head is whole. */
static int head_take(struct ws_decoder *d, const uint8_t *in, size_t n, size_t *used)
{
	for (;;) {
		size_t need = d->head_have < 2 ? 2 : d->head_need;
		size_t take = MIN(n - *used, need - d->head_have);
		memcpy(d->head + d->head_have, in + *used, take);
		d->head_have += take;
		*used += take;
		if (d->head_have < need)
			return 0;
		if (need > 2)
			return 1;
		/* The first two bytes say how long the head is (always more than 2). */
		int r = head_start(d, &d->head_need);
		if (r < 0)
			return r;
	}
}

int ws_decoder_feed(struct ws_decoder *d, const uint8_t *in, size_t n, size_t *ret_used, struct ws_message *ret_msg,
                    uint16_t *ret_close)
{
	*ret_used = 0;
	if (d->done) {
		*ret_close = WS_CLOSE_PROTOCOL;
		return -EPROTO;
	}
	if (d->msg_delivered) {
		d->msg_delivered = false;
		d->msg_opcode = 0;
		d->msg_len = 0;
	}
	size_t used = 0;
	int r = 0;
	for (;;) {
		if (!d->in_payload) {
			r = head_take(d, in, n, &used);
			if (r <= 0)
				break;
			r = head_finish(d);
			if (r < 0)
				break;
		}
		used += payload_take(d, in + used, n - used);
		if (d->payload_have < d->payload_len)
			break; /* all of in is used */
		/* Each frame takes at least a head's bytes: the loop ends. */
		r = frame_complete(d, ret_msg);
		if (r != 0)
			break;
	}
	if (r < 0) {
		d->done = true;
		*ret_close = close_code_of(r);
		return r;
	}
	*ret_used = used;
	return r;
}

size_t ws_frame_head(uint8_t out[WS_HEAD_MAX], enum ws_opcode opcode, uint64_t len)
{
	out[0] = (uint8_t)(0x80 | opcode);
	if (len < 126) {
		out[1] = (uint8_t)len;
		return 2;
	}
	if (len <= 0xffff) {
		out[1] = 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
		return 4;
	}
	out[1] = 127;
	for (int i = 0; i < 8; i++)
		out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
	return 10;
}

/* ---- control messages ---------------------------------------------------------------------------- */

static bool size_in(json_t *v, json_int_t max, unsigned *ret)
{
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
		return false;
	*ret = (unsigned)json_integer_value(v);
	return true;
}

int ws_control_parse(const uint8_t *text, size_t len, struct ws_control *ret)
{
	if (len > WS_CONTROL_TEXT_MAX)
		return -EINVAL;
	cleanup_json json_t *j = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(j) || json_object_size(j) != 3)
		return -EINVAL;
	const char *type = json_string_value(json_object_get(j, "type"));
	struct ws_control c = {0};
	if (!type || strcmp(type, "resize") || !size_in(json_object_get(j, "rows"), PTY_ROWS_MAX, &c.rows) ||
	    !size_in(json_object_get(j, "cols"), PTY_COLS_MAX, &c.cols))
		return -EINVAL;
	*ret = c;
	return 0;
}
