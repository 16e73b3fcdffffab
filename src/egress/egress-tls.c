/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS ClientHello peek (RFC 8446 4.1.2, RFC 5246 7.4.1.2, RFC 6066 3).
 *
 * Two stages: the records are walked and their fragments appended to a
 * bounded handshake buffer until the ClientHello message is complete, then
 * the message is parsed with a cursor that refuses any read past the end of
 * its container.
 */
#include "egress-tls.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "egress-cursor.h"
#include "util.h"

#define TLS_CONTENT_HANDSHAKE 22
#define TLS_HANDSHAKE_CLIENT_HELLO 1
#define TLS_EXT_SERVER_NAME 0x0000
#define TLS_EXT_ECH 0xfe0d
#define TLS_EXT_ECH_DRAFT_FIRST 0xfe08
#define TLS_EXT_ECH_OUTER_EXTENSIONS 0xfd00
#define TLS_EXT_ESNI 0xffce
#define TLS_SNI_HOST_NAME 0
#define TLS_RANDOM_SIZE 32
#define TLS_SESSION_ID_MAX 32

/* ------------------------------------------------------------ cursor */

/* A vector with an 8- or 16-bit length prefix, as a sub-cursor. */
static bool cursor_vec8(struct egress_cursor *c, struct egress_cursor *ret_sub)
{
	uint8_t len;
	return egress_cursor_u8(c, &len) && egress_cursor_skip(c, len, ret_sub);
}

static bool cursor_vec16(struct egress_cursor *c, struct egress_cursor *ret_sub)
{
	uint16_t len;
	return egress_cursor_u16(c, &len) && egress_cursor_skip(c, len, ret_sub);
}

/* ------------------------------------------------------------ ClientHello body */

static int malformed(struct al_error *err, const char *what)
{
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG, "malformed TLS ClientHello: %s", what);
}

static bool is_ech(uint16_t type)
{
	return (type >= TLS_EXT_ECH_DRAFT_FIRST && type <= TLS_EXT_ECH) || type == TLS_EXT_ECH_OUTER_EXTENSIONS ||
	       type == TLS_EXT_ESNI;
}

static int parse_server_name(struct egress_cursor ext, struct egress_tls_client_hello *hello, struct al_error *err)
{
	struct egress_cursor list, name;
	uint8_t type;
	if (!cursor_vec16(&ext, &list) || ext.n != 0)
		return malformed(err, "server_name list length does not match its extension");
	if (!egress_cursor_u8(&list, &type) || !cursor_vec16(&list, &name))
		return malformed(err, "server_name entry overruns its list");
	if (type != TLS_SNI_HOST_NAME)
		return malformed(err, "server_name entry is not of type host_name");
	if (list.n != 0)
		return malformed(err, "more than one server_name entry");
	if (name.n == 0)
		return malformed(err, "empty server_name");
	if (name.n > EGRESS_TLS_SNI_MAX)
		return malformed(err, "server_name longer than 255 bytes");
	memcpy(hello->sni, name.p, name.n);
	hello->sni_len = name.n;
	return 0;
}

static int parse_client_hello(const uint8_t *msg, size_t len, struct egress_tls_client_hello *hello,
                              struct al_error *err)
{
	struct egress_cursor c = {msg, len}, skip, exts;
	uint8_t major, minor;
	if (!egress_cursor_u8(&c, &major) || !egress_cursor_u8(&c, &minor) || major != 3)
		return malformed(err, "legacy_version is not 3.x");
	hello->legacy_version = (uint16_t)((major << 8) | minor);
	if (!egress_cursor_skip(&c, TLS_RANDOM_SIZE, NULL))
		return malformed(err, "truncated random");
	if (!cursor_vec8(&c, &skip) || skip.n > TLS_SESSION_ID_MAX)
		return malformed(err, "bad legacy_session_id");
	if (!cursor_vec16(&c, &skip) || skip.n < 2 || skip.n % 2 != 0)
		return malformed(err, "bad cipher_suites");
	if (!cursor_vec8(&c, &skip) || skip.n < 1)
		return malformed(err, "bad legacy_compression_methods");
	if (c.n == 0)
		return al_error_set(err, AL_ERR_FORBIDDEN, ENODATA, "TLS ClientHello without extensions (no SNI)");
	if (!cursor_vec16(&c, &exts) || c.n != 0)
		return malformed(err, "extensions length does not match the message");

	/* One bit per extension type: duplicates are malformed (RFC 8446 4.2). */
	uint8_t seen[65536 / 8];
	memset(seen, 0, sizeof(seen));
	bool ech = false, sni = false;
	while (exts.n > 0) {
		uint16_t type;
		struct egress_cursor body;
		if (!egress_cursor_u16(&exts, &type) || !cursor_vec16(&exts, &body))
			return malformed(err, "extension overruns the extensions block");
		if (seen[type / 8] & (1u << (type % 8)))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
			                    "malformed TLS ClientHello: duplicate extension 0x%04x", type);
		seen[type / 8] |= (uint8_t)(1u << (type % 8));
		if (is_ech(type))
			ech = true;
		if (type == TLS_EXT_SERVER_NAME) {
			int r = parse_server_name(body, hello, err);
			if (r < 0)
				return r;
			sni = true;
		}
	}
	/* SECURITY: with ECH the SNI is only the provider's public name; the
	 * real destination is encrypted. */
	if (ech)
		return al_error_set(
		    err, AL_ERR_FORBIDDEN, EACCES,
		    "TLS ClientHello uses Encrypted ClientHello/ESNI: the destination cannot be checked");
	if (!sni)
		return al_error_set(err, AL_ERR_FORBIDDEN, ENODATA, "TLS ClientHello without server_name (SNI)");
	return 0;
}

/* ------------------------------------------------------------ records */

/* Checks the handshake header once its 4 bytes are known: a ClientHello
 * within the limit. Returns the message's total length (header included). */
static int check_handshake_header(const uint8_t h[EGRESS_TLS_HANDSHAKE_HEADER_SIZE], size_t *ret_total,
                                  struct al_error *err)
{
	if (h[0] != TLS_HANDSHAKE_CLIENT_HELLO)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "malformed TLS ClientHello: first handshake message has type %u", h[0]);
	size_t body = ((size_t)h[1] << 16) | ((size_t)h[2] << 8) | h[3];
	if (body + EGRESS_TLS_HANDSHAKE_HEADER_SIZE > EGRESS_TLS_CLIENT_HELLO_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG,
		                    "TLS ClientHello of %zu bytes is over the limit of %d",
		                    body + EGRESS_TLS_HANDSHAKE_HEADER_SIZE, EGRESS_TLS_CLIENT_HELLO_MAX);
	*ret_total = body + EGRESS_TLS_HANDSHAKE_HEADER_SIZE;
	return 0;
}

int egress_tls_read_client_hello(const uint8_t *buf, size_t len, struct egress_tls_client_hello *ret_hello,
                                 size_t *ret_need, struct al_error *err)
{
	uint8_t hs[EGRESS_TLS_CLIENT_HELLO_MAX]; /* reassembled handshake bytes */
	size_t hs_len = 0, total = 0;            /* total: 0 until the header is known */
	size_t pos = 0;
	int r;

	for (unsigned records = 0;; records++) {
		if (records >= EGRESS_TLS_RECORDS_MAX)
			return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG,
			                    "TLS ClientHello split into more than %d records", EGRESS_TLS_RECORDS_MAX);
		if (len - pos < EGRESS_TLS_RECORD_HEADER_SIZE) {
			/* Reject early what cannot become a TLS handshake record. */
			if (pos == 0 && ((len > 0 && buf[0] != TLS_CONTENT_HANDSHAKE) || (len > 1 && buf[1] != 3) ||
			                 (len > 2 && buf[2] > 4)))
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPROTO,
				                    "not TLS: the first bytes are not a TLS handshake record");
			*ret_need = pos + EGRESS_TLS_RECORD_HEADER_SIZE;
			return -EAGAIN;
		}
		const uint8_t *rec = buf + pos;
		size_t rlen = ((size_t)rec[3] << 8) | rec[4];
		/* SECURITY: handshake records only, TLS 1.x versions, non-empty and
		 * within the plaintext limit; nothing else may be interleaved. */
		if (rec[0] != TLS_CONTENT_HANDSHAKE || rec[1] != 3 || rec[2] > 4) {
			if (pos == 0)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPROTO,
				                    "not TLS: first record is not a TLS handshake record");
			return malformed(err, "a record that is not a handshake record inside the ClientHello");
		}
		if (rlen == 0 || rlen > EGRESS_TLS_RECORD_MAX)
			return malformed(err, "record length is 0 or over 2^14");

		size_t avail = MIN(rlen, len - pos - EGRESS_TLS_RECORD_HEADER_SIZE);
		const uint8_t *frag = rec + EGRESS_TLS_RECORD_HEADER_SIZE;
		if (total == 0 && hs_len + avail >= EGRESS_TLS_HANDSHAKE_HEADER_SIZE) {
			uint8_t h[EGRESS_TLS_HANDSHAKE_HEADER_SIZE];
			memcpy(h, hs, hs_len);
			memcpy(h + hs_len, frag, EGRESS_TLS_HANDSHAKE_HEADER_SIZE - hs_len);
			r = check_handshake_header(h, &total, err);
			if (r < 0)
				return r;
		}
		if (total != 0 && hs_len + rlen > total)
			return malformed(err, "bytes after the ClientHello in its last record");
		if (avail < rlen) {
			/* While the handshake header is incomplete (total == 0, so
			 * hs_len + avail < 4), ask only for the rest of it: the record
			 * is judged against the header, and an answer given before it
			 * would depend on how much of the input has arrived. */
			size_t want = total ? rlen : MIN(rlen, (size_t)EGRESS_TLS_HANDSHAKE_HEADER_SIZE - hs_len);
			*ret_need = pos + EGRESS_TLS_RECORD_HEADER_SIZE + want;
			return -EAGAIN;
		}
		memcpy(hs + hs_len, frag, rlen);
		hs_len += rlen;
		pos += EGRESS_TLS_RECORD_HEADER_SIZE + rlen;
		if (total != 0 && hs_len == total)
			break;
	}

	struct egress_tls_client_hello hello = {.consumed = pos};
	r = parse_client_hello(hs + EGRESS_TLS_HANDSHAKE_HEADER_SIZE, total - EGRESS_TLS_HANDSHAKE_HEADER_SIZE, &hello,
	                       err);
	if (r < 0)
		return r;
	*ret_hello = hello;
	return 0;
}
