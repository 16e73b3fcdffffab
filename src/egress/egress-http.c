/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTTP/1.x request head reader (RFC 9112 2-3, 5; RFC 9110 5.5, 7.2).
 *
 * The head is read line by line as far as the bytes go, so a request that is
 * already wrong is refused before the rest arrives, and -EAGAIN means "valid
 * so far".
 */
#include "egress-http.h"

#include <errno.h>
#include <string.h>

#include "util.h"

static int bad(struct al_error *err, const char *what)
{
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG, "malformed HTTP request: %s", what);
}

struct head_state {
	struct egress_http_request req;
	bool host_seen;
	unsigned headers;
	const uint8_t *authority; /* absolute-form only */
	size_t authority_len;
};

static int parse_request_line(const uint8_t *line, size_t len, struct head_state *st, struct al_error *err)
{
	if (len == 0)
		return bad(err, "empty line before the request line");
	const uint8_t *sp1 = memchr(line, ' ', len);
	if (!sp1)
		return bad(err, "request line without spaces");
	size_t mlen = (size_t)(sp1 - line);
	if (mlen == 0 || mlen > EGRESS_HTTP_METHOD_MAX)
		return bad(err, "method missing or too long");
	for (size_t i = 0; i < mlen; i++) {
		if (!egress_http_is_tchar(line[i]))
			return bad(err, "method is not a token");
	}
	const uint8_t *target = sp1 + 1;
	size_t rest = len - mlen - 1;
	const uint8_t *sp2 = memchr(target, ' ', rest);
	if (!sp2)
		return bad(err, "request line without HTTP version");
	size_t tlen = (size_t)(sp2 - target);
	const uint8_t *version = sp2 + 1;
	size_t vlen = rest - tlen - 1;
	if (tlen == 0)
		return bad(err, "empty request-target");
	for (size_t i = 0; i < tlen; i++) {
		if (target[i] < 0x21 || target[i] > 0x7e)
			return bad(err, "request-target contains a byte outside visible ASCII");
	}
	if (vlen == 8 && memcmp(version, "HTTP/1.1", 8) == 0)
		st->req.minor_version = 1;
	else if (vlen == 8 && memcmp(version, "HTTP/1.0", 8) == 0)
		st->req.minor_version = 0;
	else
		return bad(err, "HTTP version is not HTTP/1.0 or HTTP/1.1");
	memcpy(st->req.method, line, mlen);
	st->req.method[mlen] = '\0';

	if (mlen == 7 && memcmp(line, "CONNECT", 7) == 0)
		return bad(err, "CONNECT is not served by the transparent gateway");
	if (target[0] == '/')
		return 0;
	if (tlen == 1 && target[0] == '*') {
		if (mlen == 7 && memcmp(line, "OPTIONS", 7) == 0)
			return 0;
		return bad(err, "asterisk-form request-target outside OPTIONS");
	}
	static const char scheme[] = "http://";
	if (tlen < sizeof(scheme) - 1 ||
	    !egress_http_case_equal(target, sizeof(scheme) - 1, scheme, sizeof(scheme) - 1))
		return bad(err, "request-target is neither origin-form nor an http:// absolute-form");
	const uint8_t *auth = target + sizeof(scheme) - 1;
	size_t alen = 0, amax = tlen - (sizeof(scheme) - 1);
	while (alen < amax && auth[alen] != '/' && auth[alen] != '?' && auth[alen] != '#')
		alen++;
	if (alen == 0)
		return bad(err, "absolute-form request-target without a host");
	/* SECURITY: "http://allowed@evil/" style userinfo is a classic way to
	 * make two parsers see different hosts. */
	if (memchr(auth, '@', alen))
		return bad(err, "userinfo in the request-target");
	st->req.absolute_form = true;
	st->authority = auth;
	st->authority_len = alen;
	return 0;
}

static int parse_header_line(const uint8_t *line, size_t len, struct head_state *st, struct al_error *err)
{
	/* SECURITY: obs-fold would let one parser join a line another treats as
	 * a new field; RFC 9112 5.2 lets a server reject it, so we do. */
	if (line[0] == ' ' || line[0] == '\t')
		return bad(err, "obsolete line folding (continuation line)");
	if (++st->headers > EGRESS_HTTP_HEADERS_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "HTTP request has more than %d header fields",
		                    EGRESS_HTTP_HEADERS_MAX);
	size_t nlen = 0;
	while (nlen < len && egress_http_is_tchar(line[nlen]))
		nlen++;
	if (nlen == 0 || nlen == len || line[nlen] != ':')
		return bad(err, "header field name is not a token followed by ':'");
	const uint8_t *v = line + nlen + 1;
	size_t vlen = len - nlen - 1;
	for (size_t i = 0; i < vlen; i++) {
		if (!egress_http_is_field_char(v[i]))
			return bad(err, "control character in a header field value");
	}
	while (vlen > 0 && (v[0] == ' ' || v[0] == '\t')) {
		v++;
		vlen--;
	}
	while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;
	if (!egress_http_case_equal(line, nlen, "host", 4))
		return 0;
	if (st->host_seen)
		return bad(err, "more than one Host header field");
	st->host_seen = true;
	if (vlen == 0)
		return bad(err, "empty Host header field");
	if (vlen > EGRESS_HTTP_HOST_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "Host header field longer than %d bytes",
		                    EGRESS_HTTP_HOST_MAX);
	if (memchr(v, ' ', vlen) || memchr(v, '\t', vlen))
		return bad(err, "whitespace inside the Host header field");
	memcpy(st->req.host, v, vlen);
	st->req.host[vlen] = '\0';
	st->req.host_len = vlen;
	return 0;
}

/* The start of a line that has not ended yet: refuse it now if it can no
 * longer become valid. */
static int check_partial_line(const uint8_t *p, size_t n, bool request_line, struct al_error *err)
{
	if (n > EGRESS_HTTP_LINE_MAX + 1)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "HTTP request line or header longer than %d bytes",
		                    EGRESS_HTTP_LINE_MAX);
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\r' && i == n - 1)
			break;
		if (!egress_http_is_field_char(p[i]))
			return bad(err, "control character in the request head");
	}
	if (request_line) {
		size_t i = 0;
		while (i < n && p[i] != ' ') {
			if (!egress_http_is_tchar(p[i]) && !(p[i] == '\r' && i == n - 1))
				return bad(err, "method is not a token");
			i++;
		}
		if (i > EGRESS_HTTP_METHOD_MAX)
			return bad(err, "method missing or too long");
	}
	return 0;
}

int egress_http_read_request_head(const uint8_t *buf, size_t len, struct egress_http_request *ret_req,
                                  struct al_error *err)
{
	struct head_state st = {0};
	size_t scan = MIN(len, (size_t)EGRESS_HTTP_HEAD_MAX);
	size_t pos = 0;
	int r;

	for (unsigned line_no = 0;; line_no++) {
		const uint8_t *lf = memchr(buf + pos, '\n', scan - pos);
		if (!lf) {
			r = check_partial_line(buf + pos, scan - pos, line_no == 0, err);
			if (r < 0)
				return r;
			if (len >= EGRESS_HTTP_HEAD_MAX)
				return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG,
				                    "HTTP request head longer than %d bytes", EGRESS_HTTP_HEAD_MAX);
			return -EAGAIN;
		}
		size_t end = (size_t)(lf - buf);
		if (end == pos || buf[end - 1] != '\r')
			return bad(err, "line ends in a bare LF");
		const uint8_t *line = buf + pos;
		size_t line_len = end - 1 - pos;
		if (memchr(line, '\r', line_len))
			return bad(err, "bare CR inside a line");
		if (line_len > EGRESS_HTTP_LINE_MAX)
			return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG,
			                    "HTTP request line or header longer than %d bytes", EGRESS_HTTP_LINE_MAX);
		pos = end + 1;
		if (line_no == 0)
			r = parse_request_line(line, line_len, &st, err);
		else if (line_len == 0)
			break;
		else
			r = parse_header_line(line, line_len, &st, err);
		if (r < 0)
			return r;
	}

	if (!st.host_seen)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENODATA, "HTTP request without a Host header field");
	/* SECURITY: a proxy-style target wins over Host at the origin
	 * (RFC 9112 3.2.2); both must name the same host or we would check one
	 * and the server would serve the other. */
	if (st.req.absolute_form &&
	    !egress_http_case_equal(st.authority, st.authority_len, st.req.host, st.req.host_len))
		return bad(err, "absolute-form request-target and Host name different hosts");
	st.req.head_len = pos;
	*ret_req = st.req;
	return 0;
}
