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
	 * canonical: split it with egress_host_split_port() and canonicalise. */
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

#endif
