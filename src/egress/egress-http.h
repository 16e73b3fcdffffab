/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTTP/1.x request head reader of the egress gateway: from the first bytes of
 * a plain-HTTP connection, finds the end of the request head, checks the
 * request line and header fields, and returns the Host the request is for.
 *
 * SECURITY: the input is fully guest-controlled. The head is bounded
 * (EGRESS_HTTP_HEAD_MAX, per-line and header-count limits) and parsed
 * strictly (RFC 9112): CRLF line ends only, no obs-fold, no whitespace before
 * the colon, no control characters in values, exactly one Host, and an
 * absolute-form target whose authority equals Host. Where two parsers could
 * read the head differently the request is refused. Only the first request
 * of a connection is read here (to decide and dial); every later request on
 * the connection is checked by egress-plain.c with egress-http1.c (same
 * host, still allowed).
 */
#ifndef AIRLOCK_EGRESS_HTTP_H
#define AIRLOCK_EGRESS_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "error.h"

#define EGRESS_HTTP_HEAD_MAX (16 * 1024) /* request line + headers + CRLFCRLF */
#define EGRESS_HTTP_LINE_MAX (8 * 1024)  /* one line, without its CRLF */
#define EGRESS_HTTP_HEADERS_MAX 100
#define EGRESS_HTTP_METHOD_MAX 32
#define EGRESS_HTTP_HOST_MAX 1100 /* the Host value (host[:port]), bytes */

struct egress_http_request {
	char method[EGRESS_HTTP_METHOD_MAX + 1];
	/* The Host field value without surrounding whitespace, NUL-terminated;
	 * never contains NUL, CR, LF or other control characters. Not yet
	 * canonical: split it with policy_host_split_port() and canonicalise. */
	char host[EGRESS_HTTP_HOST_MAX + 1];
	size_t host_len;
	int minor_version;  /* 0 or 1 (HTTP/1.0, HTTP/1.1) */
	bool absolute_form; /* the request-target was "http://authority/..." */
	size_t head_len;    /* bytes up to and including the empty line */
};

/*
 * Reads the request head from the first len bytes of the connection.
 *
 * Returns
 *   0          *ret_req is filled;
 *   -EAGAIN    the head is not complete yet, and what there is of it is valid;
 *   -E2BIG     the head, a line or the number of header fields is over its
 *              limit;
 *   -EBADMSG   not a valid HTTP/1.0 or 1.1 request head (including CONNECT
 *              and authority-form, which a transparent gateway does not
 *              serve; a duplicate Host; an absolute-form target that
 *              disagrees with Host);
 *   -ENODATA   a valid head without a Host field.
 * err (may be NULL) says what was wrong.
 */
int egress_http_read_request_head(const uint8_t *buf, size_t len, struct egress_http_request *ret_req,
                                  struct al_error *err);

/* ------------------------------------------------------------ characters */

/* RFC 9110's characters as both request parsers read them (this one and
 * egress-http1.c): they must agree byte for byte. */

/* tchar of RFC 9110 5.6.2 */
static inline bool egress_http_is_tchar(uint8_t c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar, SP or HTAB (RFC 9110 5.5): no NUL, CR, LF, other controls, DEL. */
static inline bool egress_http_is_field_char(uint8_t c)
{
	return c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7f);
}

static inline uint8_t egress_http_ascii_lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 0x20) : c;
}

/* Equal but for the case of ASCII letters (names, schemes, hosts). */
static inline bool egress_http_case_equal(const void *a, size_t alen, const void *b, size_t blen)
{
	if (alen != blen)
		return false;
	const uint8_t *x = a, *y = b;
	for (size_t i = 0; i < alen; i++) {
		if (egress_http_ascii_lower(x[i]) != egress_http_ascii_lower(y[i]))
			return false;
	}
	return true;
}

#endif
