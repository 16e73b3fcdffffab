/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTTP/1.1 request stream parser and head rewriter of an intercepted
 * connection (RFC 9112 2-3, 5-7; RFC 9110 5, 7.2, 7.8).
 *
 * The head is taken byte by byte into a bounded buffer and checked line by
 * line as each line ends, so a request that is already wrong is refused
 * before the rest arrives, and the result cannot depend on how the stream
 * was split. Bodies are not buffered: Content-Length data is counted, chunked
 * framing is checked byte by byte by a small state machine, and the bytes are
 * handed back to be forwarded.
 */
#include "egress-http1.h"

#include <errno.h>
#include <string.h>

#include "egress-http.h"
#include "util.h"

_Static_assert(EGRESS_HTTP1_HEAD_MAX <= UINT16_MAX, "spans are 16-bit");
_Static_assert(EGRESS_HTTP1_LINE_MAX < EGRESS_HTTP1_HEAD_MAX, "a line fits in the head");

enum state {
	ST_HEAD,
	ST_LENGTH,               /* Content-Length data */
	ST_CHUNK_SIZE,           /* the hex digits of a chunk-size */
	ST_CHUNK_EXT_NAME0,      /* after ';': the first byte of a chunk-ext-name */
	ST_CHUNK_EXT_NAME,       /* in a chunk-ext-name */
	ST_CHUNK_EXT_VAL0,       /* after '=' */
	ST_CHUNK_EXT_TOKEN,      /* in a token chunk-ext-val */
	ST_CHUNK_EXT_QUOTED,     /* in a quoted-string chunk-ext-val */
	ST_CHUNK_EXT_QUOTED_ESC, /* after '\' in it */
	ST_CHUNK_EXT_QUOTED_END, /* after its closing '"' */
	ST_CHUNK_LINE_LF,        /* the chunk-size line's CR was seen */
	ST_CHUNK_DATA,
	ST_CHUNK_DATA_CR,
	ST_CHUNK_DATA_LF,
	ST_TRAILER_START, /* the first byte of a trailer line (or the final CR) */
	ST_TRAILER_NAME,
	ST_TRAILER_VALUE,
	ST_TRAILER_LF,
	ST_TRAILERS_END_LF,
	ST_END,    /* the request is complete; EV_END not yet reported */
	ST_FAILED, /* refused; failure holds the error */
};

struct egress_http1_parser {
	enum state state;
	int error;               /* ST_FAILED: the negative errno */
	struct al_error failure; /* ST_FAILED (or about to be): the message */
	bool have_head;          /* head holds a complete head */
	bool head_stale;         /* the next head byte starts a new head */

	/* head */
	size_t line_start; /* offset in head.raw of the line being read */
	size_t line_len;   /* its bytes so far, without CR */
	bool saw_cr;
	bool request_line_done;
	bool host_seen, cl_seen, te_seen, close_seen, keep_alive_seen;
	struct egress_http1_span authority; /* absolute-form */

	/* body */
	uint64_t remaining; /* ST_LENGTH, ST_CHUNK_DATA */
	uint64_t chunk_size;
	unsigned chunk_digits;
	size_t chunk_line_len;
	size_t trailer_bytes;
	size_t trailer_line_len;
	unsigned trailer_fields;
	char trailer_name[24]; /* the start of a trailer field's name (framing fields are refused) */
	size_t trailer_name_len;

	struct egress_http1_head head;
};

/* ------------------------------------------------------------ characters */

/* Equal to the NUL-terminated b but for the case of ASCII letters. */
static bool ascii_case_equal(const void *a, size_t alen, const char *b)
{
	return egress_http_case_equal(a, alen, b, strlen(b));
}

/* Field names as a lenient server may compare them: any case, and '_' the
 * same as '-' (CGI-style servers map both to '_'). */
static bool field_name_alike(const void *a, size_t alen, const char *b)
{
	if (alen != strlen(b))
		return false;
	const uint8_t *x = a;
	for (size_t i = 0; i < alen; i++) {
		uint8_t c = egress_http_ascii_lower(x[i]), d = egress_http_ascii_lower((uint8_t)b[i]);
		if (c == '_')
			c = '-';
		if (d == '_')
			d = '-';
		if (c != d)
			return false;
	}
	return true;
}

static struct egress_http1_span span(size_t off, size_t len)
{
	return (struct egress_http1_span){.off = (uint16_t)off, .len = (uint16_t)len};
}

/* ------------------------------------------------------------ errors */

static int bad(struct egress_http1_parser *p, const char *what)
{
	return al_error_set(&p->failure, AL_ERR_INVALID_ARGUMENT, EBADMSG, "malformed HTTP request: %s", what);
}

static int too_long(struct egress_http1_parser *p, const char *what, int limit)
{
	return al_error_set(&p->failure, AL_ERR_TOO_LARGE, E2BIG, "HTTP request refused: %s longer than %d bytes", what,
	                    limit);
}

static int too_many(struct egress_http1_parser *p, const char *what, int limit)
{
	return al_error_set(&p->failure, AL_ERR_TOO_LARGE, E2BIG, "HTTP request refused: more than %d %s", limit, what);
}

static int not_served(struct egress_http1_parser *p, enum al_error_code code, const char *what)
{
	return al_error_set(&p->failure, code, EOPNOTSUPP, "HTTP request refused: %s", what);
}

/* ------------------------------------------------------------ the head */

/* Fields the parser gives a meaning to: the rewriter never changes them. */
static const char *const interpreted_fields[] = {
    "host", "content-length", "transfer-encoding", "connection", "expect", "upgrade", "http2-settings",
};

static bool is_interpreted(const void *name, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(interpreted_fields); i++) {
		if (ascii_case_equal(name, len, interpreted_fields[i]))
			return true;
	}
	return false;
}

static int parse_absolute_form(struct egress_http1_parser *p, size_t toff, size_t tlen)
{
	const uint8_t *t = p->head.raw + toff;
	size_t skip;
	if (tlen >= 7 && ascii_case_equal(t, 7, "http://"))
		skip = 7;
	else if (tlen >= 8 && ascii_case_equal(t, 8, "https://"))
		skip = 8;
	else
		return bad(p, "request-target is neither origin-form nor an http:// or https:// absolute-form");
	size_t alen = 0;
	while (skip + alen < tlen && t[skip + alen] != '/' && t[skip + alen] != '?')
		alen++;
	if (alen == 0)
		return bad(p, "absolute-form request-target without a host");
	/* SECURITY: "http://allowed@evil/" style userinfo is a classic way to
	 * make two parsers see different hosts. */
	if (memchr(t + skip, '@', alen))
		return bad(p, "userinfo in the request-target");
	p->authority = span(toff + skip, alen);
	size_t path_off = skip + alen, path_len = 0;
	while (path_off + path_len < tlen && t[path_off + path_len] != '?')
		path_len++;
	p->head.form = EGRESS_HTTP1_ABSOLUTE_FORM;
	p->head.path = span(toff + path_off, path_len);
	return 0;
}

/* SECURITY: the request line decides the method and the path the caller's
 * rules look at; only the forms the origin server must read the same way are
 * let through. */
static int parse_request_line(struct egress_http1_parser *p, size_t off, size_t len)
{
	struct egress_http1_head *h = &p->head;
	const uint8_t *line = h->raw + off;
	if (len == 0)
		return bad(p, "empty line before the request line");
	const uint8_t *sp1 = memchr(line, ' ', len);
	if (!sp1)
		return bad(p, "request line without spaces");
	size_t mlen = (size_t)(sp1 - line);
	if (mlen == 0 || mlen > EGRESS_HTTP1_METHOD_MAX)
		return bad(p, "method missing or too long");
	for (size_t i = 0; i < mlen; i++) {
		if (!egress_http_is_tchar(line[i]))
			return bad(p, "method is not a token");
	}
	size_t toff = mlen + 1;
	const uint8_t *sp2 = memchr(line + toff, ' ', len - toff);
	if (!sp2)
		return bad(p, "request line without an HTTP version");
	size_t tlen = (size_t)(sp2 - (line + toff));
	const uint8_t *version = sp2 + 1;
	size_t vlen = len - toff - tlen - 1;
	if (tlen == 0)
		return bad(p, "empty request-target");
	for (size_t i = 0; i < tlen; i++) {
		uint8_t c = line[toff + i];
		if (c < 0x21 || c > 0x7e)
			return bad(p, "request-target contains a byte outside visible ASCII");
		if (c == '#')
			return bad(p, "request-target contains a fragment ('#')");
	}
	if (vlen == 8 && memcmp(version, "HTTP/1.1", 8) == 0)
		h->minor_version = 1;
	else if (vlen == 8 && memcmp(version, "HTTP/1.0", 8) == 0)
		h->minor_version = 0;
	else
		return bad(p, "HTTP version is not HTTP/1.0 or HTTP/1.1");
	memcpy(h->method, line, mlen);
	h->method[mlen] = '\0';
	h->request_line = span(off, len);
	h->target = span(off + toff, tlen);

	/* SECURITY: methods are case-sensitive, but a lenient server may not
	 * think so: refuse these in any case. */
	if (ascii_case_equal(line, mlen, "CONNECT"))
		return not_served(p, AL_ERR_METHOD, "CONNECT is not served on an intercepted connection");
	if (ascii_case_equal(line, mlen, "TRACE") || ascii_case_equal(line, mlen, "TRACK"))
		return not_served(p, AL_ERR_METHOD, "TRACE is refused: it would echo the injected credentials");

	const uint8_t *t = line + toff;
	if (t[0] == '/') {
		size_t plen = 0;
		while (plen < tlen && t[plen] != '?')
			plen++;
		h->form = EGRESS_HTTP1_ORIGIN_FORM;
		h->path = span(off + toff, plen);
		return 0;
	}
	if (tlen == 1 && t[0] == '*') {
		if (!(mlen == 7 && memcmp(line, "OPTIONS", 7) == 0))
			return bad(p, "asterisk-form request-target outside OPTIONS");
		h->form = EGRESS_HTTP1_ASTERISK_FORM;
		h->path = span(off + toff, 0);
		return 0;
	}
	return parse_absolute_form(p, off + toff, tlen);
}

static int field_host(struct egress_http1_parser *p, const uint8_t *v, size_t vlen)
{
	struct egress_http1_head *h = &p->head;
	if (p->host_seen)
		return bad(p, "more than one Host header field");
	p->host_seen = true;
	if (vlen == 0)
		return bad(p, "empty Host header field");
	if (vlen > EGRESS_HTTP1_HOST_MAX)
		return too_long(p, "the Host header field", EGRESS_HTTP1_HOST_MAX);
	for (size_t i = 0; i < vlen; i++) {
		if (v[i] == ' ' || v[i] == '\t' || strchr(",/?#@\\", v[i]))
			return bad(p, "the Host header field is not a single host[:port]");
	}
	memcpy(h->host, v, vlen);
	h->host[vlen] = '\0';
	h->host_len = vlen;
	return 0;
}

static int field_content_length(struct egress_http1_parser *p, const uint8_t *v, size_t vlen)
{
	/* SECURITY: one Content-Length, plain digits. Lists ("5, 5"), repeats
	 * (even equal), signs, spaces and leading zeros are where parsers
	 * differ. */
	if (p->cl_seen)
		return bad(p, "more than one Content-Length header field");
	p->cl_seen = true;
	if (vlen == 0)
		return bad(p, "empty Content-Length");
	if (vlen > 1 && v[0] == '0')
		return bad(p, "Content-Length with a leading zero");
	uint64_t n = 0;
	for (size_t i = 0; i < vlen; i++) {
		if (v[i] < '0' || v[i] > '9')
			return bad(p, "Content-Length is not a decimal number");
		unsigned d = (unsigned)(v[i] - '0');
		if (n > ((uint64_t)INT64_MAX - d) / 10)
			return bad(p, "Content-Length above 2^63-1");
		n = n * 10 + d;
	}
	p->head.content_length = n;
	return 0;
}

static int field_transfer_encoding(struct egress_http1_parser *p, const uint8_t *v, size_t vlen)
{
	/* SECURITY: "chunked" alone; a second field would make a list
	 * ("chunked, chunked"), and any other coding leaves the framing to a
	 * guess. */
	if (p->te_seen)
		return bad(p, "more than one Transfer-Encoding header field");
	p->te_seen = true;
	if (!ascii_case_equal(v, vlen, "chunked"))
		return bad(p, "Transfer-Encoding other than exactly \"chunked\"");
	return 0;
}

static int field_connection(struct egress_http1_parser *p, const uint8_t *v, size_t vlen)
{
	size_t i = 0;
	while (i <= vlen) {
		size_t end = i;
		while (end < vlen && v[end] != ',')
			end++;
		size_t a = i, b = end;
		while (a < b && (v[a] == ' ' || v[a] == '\t'))
			a++;
		while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
			b--;
		for (size_t k = a; k < b; k++) {
			if (!egress_http_is_tchar(v[k]))
				return bad(p, "Connection is not a list of tokens");
		}
		const uint8_t *tok = v + a;
		size_t tlen = b - a;
		if (ascii_case_equal(tok, tlen, "close"))
			p->close_seen = true;
		else if (ascii_case_equal(tok, tlen, "keep-alive"))
			p->keep_alive_seen = true;
		else if (ascii_case_equal(tok, tlen, "upgrade"))
			return not_served(p, AL_ERR_FORBIDDEN,
			                  "protocol upgrades are not served on an intercepted "
			                  "connection: use HTTP/1.1 without Upgrade");
		/* SECURITY: an intermediary drops the fields Connection names;
		 * dropping a framing or routing field reframes the stream. */
		else if (ascii_case_equal(tok, tlen, "host") || field_name_alike(tok, tlen, "content-length") ||
		         field_name_alike(tok, tlen, "transfer-encoding"))
			return bad(p, "Connection names Host, Content-Length or Transfer-Encoding");
		i = end + 1;
	}
	return 0;
}

static int field_line(struct egress_http1_parser *p, size_t off, size_t len)
{
	struct egress_http1_head *h = &p->head;
	const uint8_t *line = h->raw + off;
	/* SECURITY: obs-fold would let one parser join a line another treats as
	 * a new field; RFC 9112 5.2 lets a server reject it, so we do. */
	if (line[0] == ' ' || line[0] == '\t')
		return bad(p, "obsolete line folding (continuation line)");
	if (h->n_fields == EGRESS_HTTP1_FIELDS_MAX)
		return too_many(p, "header fields", EGRESS_HTTP1_FIELDS_MAX);
	size_t nlen = 0;
	while (nlen < len && egress_http_is_tchar(line[nlen]))
		nlen++;
	/* SECURITY: "Name : v" and "Na me: v" are read as other names by some. */
	if (nlen == 0 || nlen == len || line[nlen] != ':')
		return bad(p, "header field name is not a token followed by ':'");
	size_t voff = nlen + 1, vlen = len - nlen - 1;
	/* Control characters were refused byte by byte already. */
	while (vlen > 0 && (line[voff] == ' ' || line[voff] == '\t')) {
		voff++;
		vlen--;
	}
	while (vlen > 0 && (line[voff + vlen - 1] == ' ' || line[voff + vlen - 1] == '\t'))
		vlen--;
	h->fields[h->n_fields++] = (struct egress_http1_field){
	    .line = span(off, len), .name = span(off, nlen), .value = span(off + voff, vlen)};

	const uint8_t *v = line + voff;
	if (ascii_case_equal(line, nlen, "host"))
		return field_host(p, v, vlen);
	if (ascii_case_equal(line, nlen, "content-length"))
		return field_content_length(p, v, vlen);
	if (ascii_case_equal(line, nlen, "transfer-encoding"))
		return field_transfer_encoding(p, v, vlen);
	if (ascii_case_equal(line, nlen, "connection"))
		return field_connection(p, v, vlen);
	/* SECURITY: "Content_Length" is Content-Length to some servers. */
	if (field_name_alike(line, nlen, "content-length") || field_name_alike(line, nlen, "transfer-encoding"))
		return bad(p, "a field name some servers read as Content-Length or Transfer-Encoding");
	if (ascii_case_equal(line, nlen, "upgrade") || ascii_case_equal(line, nlen, "http2-settings"))
		return not_served(p, AL_ERR_FORBIDDEN,
		                  "protocol upgrades are not served on an intercepted "
		                  "connection: use HTTP/1.1 without Upgrade");
	/* SECURITY: with "Expect: 100-continue" a server may answer before the
	 * body (a final status instead of 100) and then read the body as the
	 * next request, one the gateway framed as body and never checked
	 * (issue 17). Clients send the body without waiting when no 100
	 * comes; no Expect is forwarded at all. */
	if (ascii_case_equal(line, nlen, "expect"))
		return al_error_set(&p->failure, AL_ERR_FORBIDDEN, ENOMSG,
		                    "HTTP request refused: Expect is not served (send the body without it)");
	return 0;
}

/* The empty line: the checks that need the whole head. */
static int head_finish(struct egress_http1_parser *p)
{
	struct egress_http1_head *h = &p->head;
	if (!p->host_seen)
		return bad(p, "no Host header field");
	/* SECURITY: an absolute-form target wins over Host at the origin
	 * (RFC 9112 3.2.2); both must name the same host or we would check one
	 * and the server would serve the other. */
	if (h->form == EGRESS_HTTP1_ABSOLUTE_FORM &&
	    !egress_http_case_equal(h->raw + p->authority.off, p->authority.len, h->host, h->host_len))
		return bad(p, "absolute-form request-target and Host name different hosts");
	/* SECURITY: CL.TE / TE.CL desync; TE in HTTP/1.0 is read as CL or as
	 * nothing by old servers (RFC 9112 6.1 lets us treat it as faulty). */
	if (p->cl_seen && p->te_seen)
		return bad(p, "both Content-Length and Transfer-Encoding");
	if (p->te_seen && h->minor_version == 0)
		return bad(p, "Transfer-Encoding in an HTTP/1.0 request");
	/* SECURITY: a body on GET or HEAD means nothing (RFC 9110 9.3.1) and
	 * servers disagree on it: one that ignores its framing reads the body
	 * as a second request the gateway never saw (issue 17). Any case of
	 * the method: some servers upper-case it. */
	if ((p->te_seen || (p->cl_seen && h->content_length > 0)) &&
	    (ascii_case_equal(h->method, strlen(h->method), "get") ||
	     ascii_case_equal(h->method, strlen(h->method), "head")))
		return bad(p, "a body on a GET or HEAD request");
	h->framing = p->te_seen ? EGRESS_HTTP1_CHUNKED : p->cl_seen ? EGRESS_HTTP1_LENGTH : EGRESS_HTTP1_NO_BODY;
	h->keep_alive = !p->close_seen && (h->minor_version == 1 || p->keep_alive_seen);
	return 0;
}

/* A complete line [off, off + len) without its CRLF. Returns 1 at the empty
 * line that ends the head. */
static int head_line(struct egress_http1_parser *p, size_t off, size_t len)
{
	if (!p->request_line_done) {
		p->request_line_done = true;
		return parse_request_line(p, off, len);
	}
	if (len == 0) {
		int r = head_finish(p);
		return r < 0 ? r : 1;
	}
	return field_line(p, off, len);
}

/* SECURITY: every head byte goes through here: the size limits, CRLF-only
 * line ends and the absence of control characters are checked before
 * anything looks at a line. */
static int head_byte(struct egress_http1_parser *p, uint8_t c)
{
	struct egress_http1_head *h = &p->head;
	if (h->len == EGRESS_HTTP1_HEAD_MAX)
		return too_long(p, "the request head", EGRESS_HTTP1_HEAD_MAX);
	h->raw[h->len++] = c;
	if (p->saw_cr) {
		if (c != '\n')
			return bad(p, "bare CR in the request head");
		p->saw_cr = false;
		size_t off = p->line_start, len = h->len - 2 - off;
		p->line_start = h->len;
		p->line_len = 0;
		return head_line(p, off, len);
	}
	if (c == '\r') {
		p->saw_cr = true;
		return 0;
	}
	if (c == '\n')
		return bad(p, "line ends in a bare LF");
	if (!egress_http_is_field_char(c))
		return bad(p, "control character in the request head");
	if (++p->line_len > EGRESS_HTTP1_LINE_MAX)
		return too_long(p, "a line of the request head", EGRESS_HTTP1_LINE_MAX);
	return 0;
}

static void head_reset(struct egress_http1_parser *p)
{
	memset(&p->head, 0, offsetof(struct egress_http1_head, raw));
	p->line_start = 0;
	p->line_len = 0;
	p->saw_cr = false;
	p->request_line_done = false;
	p->host_seen = p->cl_seen = p->te_seen = p->close_seen = p->keep_alive_seen = false;
	p->authority = span(0, 0);
	p->have_head = false;
	p->head_stale = false;
}

/* ------------------------------------------------------------ chunked bodies */

static void chunk_line_start(struct egress_http1_parser *p)
{
	p->state = ST_CHUNK_SIZE;
	p->chunk_size = 0;
	p->chunk_digits = 0;
	p->chunk_line_len = 0;
}

static void chunk_line_end(struct egress_http1_parser *p)
{
	if (p->chunk_size > 0) {
		p->state = ST_CHUNK_DATA;
		p->remaining = p->chunk_size;
		return;
	}
	p->state = ST_TRAILER_START;
	p->trailer_bytes = 0;
	p->trailer_line_len = 0;
	p->trailer_fields = 0;
}

/* A byte of a chunk-size line: chunk-size [ chunk-ext ] CRLF, where
 * chunk-ext = *( ";" token [ "=" ( token / quoted-string ) ] ) — without the
 * BWS RFC 9112 7.1.1 allows (no client needs it; lenient parsers disagree
 * about it). */
static int chunk_line_byte(struct egress_http1_parser *p, uint8_t c)
{
	if (p->state == ST_CHUNK_LINE_LF) {
		if (c != '\n')
			return bad(p, "bare CR in a chunk-size line");
		chunk_line_end(p);
		return 0;
	}
	if (c != '\r' && ++p->chunk_line_len > EGRESS_HTTP1_CHUNK_LINE_MAX)
		return too_long(p, "a chunk-size line", EGRESS_HTTP1_CHUNK_LINE_MAX);
	switch (p->state) {
	case ST_CHUNK_SIZE:
		if (hex_digit_value(c) >= 0) {
			/* SECURITY: no overflow (a parser that wraps reads another
			 * size) and nothing a signed 64-bit parser reads as negative. */
			unsigned d = (unsigned)hex_digit_value(c);
			if (++p->chunk_digits > 16 || p->chunk_size > ((uint64_t)INT64_MAX - d) / 16)
				return bad(p, "chunk size above 2^63-1");
			p->chunk_size = p->chunk_size * 16 + d;
			return 0;
		}
		if (p->chunk_digits == 0)
			return bad(p, "chunk size is not hexadecimal");
		if (c == ';')
			p->state = ST_CHUNK_EXT_NAME0;
		else if (c == '\r')
			p->state = ST_CHUNK_LINE_LF;
		else
			return bad(p, "chunk size followed by something other than ';' or CRLF");
		return 0;
	case ST_CHUNK_EXT_NAME0:
		if (!egress_http_is_tchar(c))
			return bad(p, "chunk extension name is not a token");
		p->state = ST_CHUNK_EXT_NAME;
		return 0;
	case ST_CHUNK_EXT_NAME:
	case ST_CHUNK_EXT_TOKEN:
	case ST_CHUNK_EXT_QUOTED_END:
		if (c == ';')
			p->state = ST_CHUNK_EXT_NAME0;
		else if (c == '\r')
			p->state = ST_CHUNK_LINE_LF;
		else if (c == '=' && p->state == ST_CHUNK_EXT_NAME)
			p->state = ST_CHUNK_EXT_VAL0;
		else if (!egress_http_is_tchar(c) || p->state == ST_CHUNK_EXT_QUOTED_END)
			return bad(p, "malformed chunk extension");
		return 0;
	case ST_CHUNK_EXT_VAL0:
		if (c == '"')
			p->state = ST_CHUNK_EXT_QUOTED;
		else if (egress_http_is_tchar(c))
			p->state = ST_CHUNK_EXT_TOKEN;
		else
			return bad(p, "chunk extension value is neither a token nor a quoted string");
		return 0;
	case ST_CHUNK_EXT_QUOTED:
		/* qdtext: HTAB, SP, VCHAR except '"' and '\', obs-text */
		if (c == '"')
			p->state = ST_CHUNK_EXT_QUOTED_END;
		else if (c == '\\')
			p->state = ST_CHUNK_EXT_QUOTED_ESC;
		else if (!egress_http_is_field_char(c))
			return bad(p, "control character in a chunk extension");
		return 0;
	case ST_CHUNK_EXT_QUOTED_ESC:
		if (!egress_http_is_field_char(c))
			return bad(p, "control character in a chunk extension");
		p->state = ST_CHUNK_EXT_QUOTED;
		return 0;
	default:
		return bad(p, "internal: not in a chunk-size line");
	}
}

static bool trailer_name_forbidden(const struct egress_http1_parser *p)
{
	if (p->trailer_name_len > sizeof(p->trailer_name))
		return false;
	return ascii_case_equal(p->trailer_name, p->trailer_name_len, "host") ||
	       field_name_alike(p->trailer_name, p->trailer_name_len, "content-length") ||
	       field_name_alike(p->trailer_name, p->trailer_name_len, "transfer-encoding");
}

/* A byte of the trailer section: *( field-line CRLF ) CRLF, checked like the
 * header fields (token names, no whitespace before ':', no obs-fold, no
 * controls), and bounded like them. */
static int trailer_byte(struct egress_http1_parser *p, uint8_t c)
{
	if (++p->trailer_bytes > EGRESS_HTTP1_TRAILERS_MAX)
		return too_long(p, "the trailer section", EGRESS_HTTP1_TRAILERS_MAX);
	if (c != '\r' && c != '\n' && ++p->trailer_line_len > EGRESS_HTTP1_LINE_MAX)
		return too_long(p, "a trailer line", EGRESS_HTTP1_LINE_MAX);
	switch (p->state) {
	case ST_TRAILER_START:
		if (c == '\r') {
			p->state = ST_TRAILERS_END_LF;
			return 0;
		}
		if (c == ' ' || c == '\t')
			return bad(p, "obsolete line folding in the trailers");
		if (!egress_http_is_tchar(c))
			return bad(p, "trailer field name is not a token followed by ':'");
		if (++p->trailer_fields > EGRESS_HTTP1_FIELDS_MAX)
			return too_many(p, "trailer fields", EGRESS_HTTP1_FIELDS_MAX);
		p->trailer_name[0] = (char)c;
		p->trailer_name_len = 1;
		p->state = ST_TRAILER_NAME;
		return 0;
	case ST_TRAILER_NAME:
		if (c == ':') {
			/* SECURITY: framing and routing fields count only in the head. */
			if (trailer_name_forbidden(p))
				return bad(p, "Host, Content-Length or Transfer-Encoding in the trailers");
			p->state = ST_TRAILER_VALUE;
			return 0;
		}
		if (!egress_http_is_tchar(c))
			return bad(p, "trailer field name is not a token followed by ':'");
		if (p->trailer_name_len < sizeof(p->trailer_name))
			p->trailer_name[p->trailer_name_len] = (char)c;
		if (p->trailer_name_len <= sizeof(p->trailer_name))
			p->trailer_name_len++;
		return 0;
	case ST_TRAILER_VALUE:
		if (c == '\r')
			p->state = ST_TRAILER_LF;
		else if (!egress_http_is_field_char(c))
			return bad(p, "control character in a trailer field");
		return 0;
	case ST_TRAILER_LF:
		if (c != '\n')
			return bad(p, "bare CR in the trailers");
		p->state = ST_TRAILER_START;
		p->trailer_line_len = 0;
		return 0;
	case ST_TRAILERS_END_LF:
		if (c != '\n')
			return bad(p, "bare CR at the end of the trailers");
		p->state = ST_END;
		return 0;
	default:
		return bad(p, "internal: not in the trailers");
	}
}

static int body_byte(struct egress_http1_parser *p, uint8_t c)
{
	switch (p->state) {
	case ST_CHUNK_DATA_CR:
		if (c != '\r')
			return bad(p, "chunk data longer than its chunk size (no CRLF after it)");
		p->state = ST_CHUNK_DATA_LF;
		return 0;
	case ST_CHUNK_DATA_LF:
		if (c != '\n')
			return bad(p, "bare CR after chunk data");
		chunk_line_start(p);
		return 0;
	case ST_TRAILER_START:
	case ST_TRAILER_NAME:
	case ST_TRAILER_VALUE:
	case ST_TRAILER_LF:
	case ST_TRAILERS_END_LF:
		return trailer_byte(p, c);
	default:
		return chunk_line_byte(p, c);
	}
}

/* ------------------------------------------------------------ feeding */

struct egress_http1_parser *egress_http1_parser_new(void)
{
	struct egress_http1_parser *p = xcalloc(1, sizeof(*p));
	p->state = ST_HEAD;
	return p;
}

void egress_http1_parser_free(struct egress_http1_parser *p)
{
	free(p);
}

const struct egress_http1_head *egress_http1_parser_head(const struct egress_http1_parser *p)
{
	return p->have_head ? &p->head : NULL;
}

bool egress_http1_parser_idle(const struct egress_http1_parser *p)
{
	return p->state == ST_HEAD && (p->head_stale || p->head.len == 0);
}

static int fail(struct egress_http1_parser *p, int r, struct al_error *err)
{
	p->state = ST_FAILED;
	p->error = r;
	if (err)
		*err = p->failure;
	return r;
}

static void body_start(struct egress_http1_parser *p)
{
	const struct egress_http1_head *h = &p->head;
	if (h->framing == EGRESS_HTTP1_CHUNKED) {
		chunk_line_start(p);
	} else if (h->framing == EGRESS_HTTP1_LENGTH && h->content_length > 0) {
		p->state = ST_LENGTH;
		p->remaining = h->content_length;
	} else {
		p->state = ST_END;
	}
}

static int feed_head(struct egress_http1_parser *p, const uint8_t *data, size_t len, size_t *ret_consumed,
                     struct al_error *err)
{
	if (p->head_stale && len > 0)
		head_reset(p);
	for (size_t i = 0; i < len; i++) {
		int r = head_byte(p, data[i]);
		if (r < 0)
			return fail(p, r, err);
		if (r > 0) {
			p->have_head = true;
			body_start(p);
			*ret_consumed = i + 1;
			return EGRESS_HTTP1_EV_HEAD;
		}
	}
	*ret_consumed = len;
	return EGRESS_HTTP1_EV_NEED_MORE;
}

int egress_http1_feed(struct egress_http1_parser *p, const uint8_t *data, size_t len, size_t *ret_consumed,
                      struct al_error *err)
{
	if (p->state == ST_FAILED)
		return fail(p, p->error, err);
	if (p->state == ST_END) {
		p->state = ST_HEAD;
		p->head_stale = true;
		*ret_consumed = 0;
		return EGRESS_HTTP1_EV_END;
	}
	if (p->state == ST_HEAD)
		return feed_head(p, data, len, ret_consumed, err);

	size_t i = 0;
	while (i < len && p->state != ST_END) {
		if (p->state == ST_LENGTH || p->state == ST_CHUNK_DATA) {
			size_t take = p->remaining < len - i ? (size_t)p->remaining : len - i;
			i += take;
			p->remaining -= take;
			if (p->remaining == 0)
				p->state = p->state == ST_LENGTH ? ST_END : ST_CHUNK_DATA_CR;
			continue;
		}
		int r = body_byte(p, data[i]);
		if (r < 0) {
			if (i == 0)
				return fail(p, r, err);
			/* The valid bytes before it first; the error next time. */
			p->state = ST_FAILED;
			p->error = r;
			break;
		}
		i++;
	}
	*ret_consumed = i;
	return i > 0 ? EGRESS_HTTP1_EV_BODY : EGRESS_HTTP1_EV_NEED_MORE;
}

/* ------------------------------------------------------------ the rewriter */

int egress_http1_head_find(const struct egress_http1_head *h, const char *name, size_t from)
{
	for (size_t i = from; i < h->n_fields; i++) {
		if (ascii_case_equal(h->raw + h->fields[i].name.off, h->fields[i].name.len, name))
			return (int)i;
	}
	return -ENOENT;
}

struct out {
	uint8_t *buf;
	size_t cap, len;
	bool overflow;
};

static void out_put(struct out *o, const void *data, size_t n)
{
	if (n == 0)
		return;
	if (o->overflow || n > o->cap - o->len) {
		o->overflow = true;
		return;
	}
	memcpy(o->buf + o->len, data, n);
	o->len += n;
}

static bool is_field_name(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > EGRESS_HTTP1_FIELD_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!egress_http_is_tchar((uint8_t)name[i]))
			return false;
	}
	return true;
}

/* Field content without whitespace at either end (which a recipient would
 * strip): no CR, LF, NUL or other controls, so no header injection. */
static bool is_field_content(const char *v, size_t n)
{
	if (n > EGRESS_HTTP1_VALUE_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!egress_http_is_field_char((uint8_t)v[i]))
			return false;
	}
	return n == 0 || (v[0] != ' ' && v[0] != '\t' && v[n - 1] != ' ' && v[n - 1] != '\t');
}

/* SECURITY: the rewrite comes from the gateway, not the guest, but a value
 * with CRLF in it would still inject fields; messages name the operation,
 * never a value. */
static int rewrite_check(const struct egress_http1_rewrite *rw, struct al_error *err)
{
	if (rw->n_remove > EGRESS_HTTP1_REWRITE_OPS_MAX || rw->n_add > EGRESS_HTTP1_REWRITE_OPS_MAX ||
	    rw->n_subst > EGRESS_HTTP1_REWRITE_OPS_MAX)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
		                    "HTTP head rewrite: more than %d operations of a kind",
		                    EGRESS_HTTP1_REWRITE_OPS_MAX);
	for (size_t i = 0; i < rw->n_remove; i++) {
		const char *n = rw->remove[i];
		if (!n || !is_field_name(n) || is_interpreted(n, strlen(n)))
			return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
			                    "HTTP head rewrite: field name %zu to remove is not a token, or names a "
			                    "field that frames or routes the request",
			                    i);
	}
	for (size_t i = 0; i < rw->n_add; i++) {
		const struct egress_http1_field_add *a = &rw->add[i];
		if (!a->name || !is_field_name(a->name) || is_interpreted(a->name, strlen(a->name)))
			return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
			                    "HTTP head rewrite: field name %zu to add is not a token, or names a "
			                    "field that frames or routes the request",
			                    i);
		if ((!a->value && a->value_len > 0) || !is_field_content(a->value, a->value_len))
			return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
			                    "HTTP head rewrite: the value of added field %zu is not valid field "
			                    "content (control characters, whitespace at an end, or too long)",
			                    i);
	}
	for (size_t i = 0; i < rw->n_subst; i++) {
		const struct egress_http1_subst *s = &rw->subst[i];
		if (!s->placeholder || s->placeholder_len == 0 || s->placeholder_len > EGRESS_HTTP1_PLACEHOLDER_MAX)
			return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
			                    "HTTP head rewrite: placeholder %zu is empty or longer than %d bytes", i,
			                    EGRESS_HTTP1_PLACEHOLDER_MAX);
		if ((!s->value && s->value_len > 0) || !is_field_content(s->value, s->value_len))
			return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
			                    "HTTP head rewrite: the replacement of placeholder %zu is not valid field "
			                    "content (control characters, whitespace at an end, or too long)",
			                    i);
		if (!s->fields || s->n_fields == 0 || s->n_fields > EGRESS_HTTP1_SUBST_FIELDS_MAX)
			return al_error_set(err, AL_ERR_INTERNAL, EINVAL,
			                    "HTTP head rewrite: placeholder %zu names no field or more than %d", i,
			                    EGRESS_HTTP1_SUBST_FIELDS_MAX);
		for (size_t k = 0; k < s->n_fields; k++) {
			const char *n = s->fields[k];
			if (!n || !is_field_name(n) || is_interpreted(n, strlen(n)))
				return al_error_set(
				    err, AL_ERR_INTERNAL, EINVAL,
				    "HTTP head rewrite: field %zu of placeholder %zu is not a token, or "
				    "names a field that frames or routes the request",
				    k, i);
		}
	}
	return 0;
}

/* SECURITY: "X_Api_Key" goes with "X-Api-Key": a server that reads one
 * as the other must not get the guest's value next to ours. */
static bool is_removed(const struct egress_http1_rewrite *rw, const uint8_t *name, size_t len)
{
	for (size_t i = 0; i < rw->n_remove; i++) {
		if (field_name_alike(name, len, rw->remove[i]))
			return true;
	}
	return false;
}

/* Is a substitution to be made in the field so named? */
static bool subst_names(const struct egress_http1_subst *s, const uint8_t *name, size_t len)
{
	for (size_t k = 0; k < s->n_fields; k++) {
		if (ascii_case_equal(name, len, s->fields[k]))
			return true;
	}
	return false;
}

/* Does any substitution name the field? */
static bool subst_any(const struct egress_http1_rewrite *rw, const uint8_t *name, size_t len)
{
	for (size_t k = 0; k < rw->n_subst; k++) {
		if (subst_names(&rw->subst[k], name, len))
			return true;
	}
	return false;
}

/* The value of the field so named with every placeholder that may go
 * there replaced, left to right. */
static void out_put_substituted(struct out *o, const struct egress_http1_rewrite *rw, const uint8_t *name,
                                size_t name_len, const uint8_t *v, size_t n)
{
	size_t run = 0, i = 0;
	while (i < n) {
		const struct egress_http1_subst *hit = NULL;
		for (size_t k = 0; k < rw->n_subst && !hit; k++) {
			const struct egress_http1_subst *s = &rw->subst[k];
			if (s->placeholder_len <= n - i && memcmp(v + i, s->placeholder, s->placeholder_len) == 0 &&
			    subst_names(s, name, name_len))
				hit = s;
		}
		if (!hit) {
			i++;
			continue;
		}
		out_put(o, v + run, i - run);
		out_put(o, hit->value, hit->value_len);
		i += hit->placeholder_len;
		run = i;
	}
	out_put(o, v + run, n - run);
}

int egress_http1_head_rewrite(const struct egress_http1_head *h, const struct egress_http1_rewrite *rw, uint8_t *out,
                              size_t out_size, size_t *ret_len, struct al_error *err)
{
	int r = rewrite_check(rw, err);
	if (r < 0)
		return r;
	struct out o = {.buf = out, .cap = MIN(out_size, (size_t)EGRESS_HTTP1_OUT_MAX)};
	out_put(&o, h->raw + h->request_line.off, h->request_line.len);
	out_put(&o, "\r\n", 2);
	for (size_t i = 0; i < h->n_fields; i++) {
		const struct egress_http1_field *f = &h->fields[i];
		const uint8_t *name = h->raw + f->name.off;
		if (is_removed(rw, name, f->name.len))
			continue;
		if (!subst_any(rw, name, f->name.len)) {
			out_put(&o, h->raw + f->line.off, f->line.len);
		} else {
			size_t value_end = (size_t)f->value.off + f->value.len,
			       line_end = (size_t)f->line.off + f->line.len;
			out_put(&o, h->raw + f->line.off, (size_t)f->value.off - f->line.off);
			out_put_substituted(&o, rw, name, f->name.len, h->raw + f->value.off, f->value.len);
			out_put(&o, h->raw + value_end, line_end - value_end);
		}
		out_put(&o, "\r\n", 2);
	}
	for (size_t i = 0; i < rw->n_add; i++) {
		out_put(&o, rw->add[i].name, strlen(rw->add[i].name));
		out_put(&o, ": ", 2);
		out_put(&o, rw->add[i].value, rw->add[i].value_len);
		out_put(&o, "\r\n", 2);
	}
	out_put(&o, "\r\n", 2);
	if (o.overflow) {
		/* SECURITY: what was written may hold secrets. */
		explicit_bzero(out, o.len);
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG,
		                    "HTTP request refused: the rewritten request head is over its limit of %zu bytes",
		                    o.cap);
	}
	*ret_len = o.len;
	return 0;
}
