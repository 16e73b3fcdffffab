/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the HTTP/1.1 request stream parser and head rewriter of
 * intercepted connections (src/egress/egress-http1.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "egress-http1.h"
#include "util.h"

/* ------------------------------------------------------------ a runner */

#define TRANSCRIPT_MAX 4096
#define FORWARD_MAX (64 * 1024)

/* What a stream of bytes made the parser say, as text: per request
 * "H method target host n_fields framing ka|close;" then "B<n>;" (the body
 * bytes of the request, all BODY events added up) and "E;", and at the end
 * "ok" (between requests), "more" (in a request) or the errno's name. */
struct run {
	char transcript[TRANSCRIPT_MAX];
	size_t tlen;
	uint8_t forwarded[FORWARD_MAX];
	size_t forwarded_len;
	int error;
	struct al_error err;
};

static void tprintf(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(struct run *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(r->transcript + r->tlen, sizeof(r->transcript) - r->tlen, fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < sizeof(r->transcript) - r->tlen);
	r->tlen += (size_t)n;
}

static const char *errno_name(int r)
{
	switch (r) {
	case -EBADMSG:
		return "EBADMSG";
	case -E2BIG:
		return "E2BIG";
	case -EOPNOTSUPP:
		return "EOPNOTSUPP";
	case -ENOMSG:
		return "ENOMSG";
	default:
		return "other";
	}
}

static void note_head(struct run *r, const struct egress_http1_head *h)
{
	char framing[32];
	if (h->framing == EGRESS_HTTP1_LENGTH)
		snprintf(framing, sizeof(framing), "cl=%llu", (unsigned long long)h->content_length);
	else
		snprintf(framing, sizeof(framing), "%s", h->framing == EGRESS_HTTP1_CHUNKED ? "chunked" : "none");
	tprintf(r, "H %s %.*s %s %zu %s %s;", h->method, (int)h->target.len, egress_http1_span_ptr(h, h->target),
	        h->host, h->n_fields, framing, h->keep_alive ? "ka" : "close");
}

/* Feeds in pieces of step bytes (0: all at once). */
static void run_stream(const uint8_t *in, size_t n, size_t step, struct run *r)
{
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	memset(r, 0, sizeof(*r));
	size_t pos = 0, body = 0;
	bool in_body = false;
	for (;;) {
		size_t piece = step == 0 ? n - pos : MIN(step, n - pos);
		const uint8_t *data = in + pos;
		size_t off = 0;
		for (;;) {
			size_t used = 0;
			int ev = egress_http1_feed(p, data + off, piece - off, &used, &r->err);
			if (ev < 0) {
				if (in_body)
					tprintf(r, "B%zu;", body);
				if (r->err.message[0] == '\0')
					fail_msg("error %d without a message", ev);
				r->error = ev;
				tprintf(r, "%s", errno_name(ev));
				return;
			}
			assert_true(used <= piece - off);
			if (ev == EGRESS_HTTP1_EV_HEAD) {
				note_head(r, egress_http1_parser_head(p));
				in_body = true;
				body = 0;
			} else if (ev == EGRESS_HTTP1_EV_BODY) {
				assert_true(used > 0);
				assert_true(r->forwarded_len + used <= sizeof(r->forwarded));
				memcpy(r->forwarded + r->forwarded_len, data + off, used);
				r->forwarded_len += used;
				body += used;
			} else if (ev == EGRESS_HTTP1_EV_END) {
				assert_int_equal(used, 0);
				tprintf(r, "B%zu;E;", body);
				in_body = false;
			}
			off += used;
			if (ev == EGRESS_HTTP1_EV_NEED_MORE) {
				assert_int_equal(off, piece);
				break;
			}
		}
		pos += piece;
		if (pos == n)
			break;
	}
	if (in_body)
		tprintf(r, "B%zu;", body);
	tprintf(r, "%s", egress_http1_parser_idle(p) ? "ok" : "more");
}

/* ------------------------------------------------------------ the table */

#define GET_A "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
#define POST_TE "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
#define POST_CL(n) "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: " n "\r\n\r\n"
#define HDR(f) "GET / HTTP/1.1\r\nHost: a\r\n" f "\r\n\r\n"
#define BIN(s) s, sizeof(s) - 1 /* with NUL bytes in it */

struct stream_case {
	const char *in;
	size_t len; /* 0: strlen(in) */
	const char *want;
	const char *body; /* the forwarded bytes, or NULL (not checked) */
};

static const struct stream_case cases[] = {
    /* ---- valid: single requests */
    {"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", 0, "H GET / a.example 1 none ka;B0;E;ok", ""},
    {"GET /a?b=c HTTP/1.1\r\nUser-Agent: x\r\nHOST:\t a.example:8080 \t\r\nAccept: */*\r\n\r\n", 0,
     "H GET /a?b=c a.example:8080 3 none ka;B0;E;ok", ""},
    {POST_CL("5") "hello", 0, "H POST / a 2 cl=5 ka;B5;E;ok", "hello"},
    {POST_CL("0"), 0, "H POST / a 2 cl=0 ka;B0;E;ok", ""},
    {POST_TE "5\r\nhello\r\n0\r\n\r\n", 0, "H POST / a 2 chunked ka;B15;E;ok", "5\r\nhello\r\n0\r\n\r\n"},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  CHUNKED \r\n\r\n0\r\n\r\n", 0,
     "H POST / a 2 chunked ka;B5;E;ok", "0\r\n\r\n"},
    {POST_TE "5;a=b;c=\"x y\\\"\";d\r\nhello\r\nA\r\n0123456789\r\n0005\r\nworld\r\n000;last\r\nX-Sum: 1\r\n"
             "Y:\r\n\r\n",
     0, "H POST / a 2 chunked ka;B80;E;ok",
     "5;a=b;c=\"x y\\\"\";d\r\nhello\r\nA\r\n0123456789\r\n0005\r\nworld\r\n000;last\r\nX-Sum: 1\r\nY:\r\n\r\n"},
    {POST_TE "a\r\n0123456789\r\nF\r\n0123456789abcde\r\n0\r\n\r\n", 0, "H POST / a 2 chunked ka;B40;E;ok", NULL},
    {"GET / HTTP/1.0\r\nHost: a\r\n\r\n", 0, "H GET / a 1 none close;B0;E;ok", ""},
    {"GET / HTTP/1.0\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n", 0, "H GET / a 2 none ka;B0;E;ok", ""},
    {"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, , close\r\n\r\n", 0, "H GET / a 2 none close;B0;E;ok", ""},
    {"GET http://a.example/x?y HTTP/1.1\r\nHost: A.example\r\n\r\n", 0,
     "H GET http://a.example/x?y A.example 1 none ka;B0;E;ok", ""},
    {"GET HTTPS://a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", 0,
     "H GET HTTPS://a.example:443 a.example:443 1 none ka;B0;E;ok", ""},
    {"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 0, "H OPTIONS * a 1 none ka;B0;E;ok", ""},
    {"PUT /f HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi", 0, "H PUT /f a 2 cl=2 ka;B2;E;ok", "hi"},
    {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", 0, "H GET / a 2 cl=0 ka;B0;E;ok", ""},
    {HDR("X-Empty:\r\nX-Obs: caf\xc3\xa9"), 0, "H GET / a 3 none ka;B0;E;ok", ""},
    {POST_CL("9223372036854775807"), 0, "H POST / a 2 cl=9223372036854775807 ka;B0;more", ""},
    /* ---- valid: keep-alive and pipelining */
    {GET_A POST_CL("3") "abc" POST_TE "3\r\nxyz\r\n0\r\n\r\n"
                        "GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
     0,
     "H GET / a 1 none ka;B0;E;H POST / a 2 cl=3 ka;B3;E;H POST / a 2 chunked ka;B13;E;"
     "H GET /last a 2 none close;B0;E;ok",
     "abc3\r\nxyz\r\n0\r\n\r\n"},
    {GET_A GET_A GET_A, 0, "H GET / a 1 none ka;B0;E;H GET / a 1 none ka;B0;E;H GET / a 1 none ka;B0;E;ok", ""},
    /* ---- incomplete */
    {"", 0, "ok", ""},
    {"GET / HTTP/1.1\r\nHost: a\r\n", 0, "more", ""},
    {POST_CL("5") "hel", 0, "H POST / a 2 cl=5 ka;B3;more", "hel"},
    {POST_TE "5\r\nhel", 0, "H POST / a 2 chunked ka;B6;more", "5\r\nhel"},
    {GET_A "G", 0, "H GET / a 1 none ka;B0;E;more", ""},
    /* ---- Content-Length and Transfer-Encoding */
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\nhello", 0, "EBADMSG", ""},
    {POST_CL("5, 5"), 0, "EBADMSG", ""},
    {POST_CL("+5"), 0, "EBADMSG", ""},
    {POST_CL("-1"), 0, "EBADMSG", ""},
    {POST_CL("5 5"), 0, "EBADMSG", ""},
    {POST_CL("0x5"), 0, "EBADMSG", ""},
    {POST_CL("05"), 0, "EBADMSG", ""},
    {POST_CL(""), 0, "EBADMSG", ""},
    {POST_CL("9223372036854775808"), 0, "EBADMSG", ""},
    {POST_CL("99999999999999999999999"), 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 0, "EBADMSG",
     ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", 0, "EBADMSG", ""},
    {"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 0, "EBADMSG", ""},
    {HDR("Connection: Content-Length"), 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent_Length: 5\r\n\r\nhello", 0, "EBADMSG", ""},
    {"POST / HTTP/1.1\r\nHost: a\r\nTRANSFER_encoding: chunked\r\n\r\n0\r\n\r\n", 0, "EBADMSG", ""},
    {HDR("Connection: close, transfer-encoding"), 0, "EBADMSG", ""},
    {HDR("Connection: host"), 0, "EBADMSG", ""},
    {HDR("Connection: a b"), 0, "EBADMSG", ""},
    /* ---- line ends, folding, field syntax, control characters */
    {"GET / HTTP/1.1\nHost: a\n\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a\r\n\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a\r\n\r\r\n", 0, "EBADMSG", ""},
    {HDR("X: a\r\n b"), 0, "EBADMSG", ""},
    {HDR("X: a\r\n\tb"), 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\n Host: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", 0, "EBADMSG", ""},
    {HDR("X Y: a"), 0, "EBADMSG", ""},
    {HDR(": a"), 0, "EBADMSG", ""},
    {HDR("X(: a"), 0, "EBADMSG", ""},
    {HDR("NoColon"), 0, "EBADMSG", ""},
    {BIN("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"), "EBADMSG", ""},
    {BIN("GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n"), "EBADMSG", ""},
    {HDR("X: a\x01"), 0, "EBADMSG", ""},
    {HDR("X: a\x7f"), 0, "EBADMSG", ""},
    {HDR("X: a\x1b[0m"), 0, "EBADMSG", ""},
    {"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {GET_A "\r\n" GET_A, 0, "H GET / a 1 none ka;B0;E;EBADMSG", ""},
    {POST_CL("2") "hi\r\n" GET_A, 0, "H POST / a 2 cl=2 ka;B2;E;EBADMSG", "hi"},
    {BIN("\x16\x03\x01\x02\x00"), "EBADMSG", ""},
    /* ---- Host */
    {"GET / HTTP/1.1\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a\r\nhOsT: b\r\n", 0, "EBADMSG", ""}, /* refused before the head ends */
    {"GET / HTTP/1.1\r\nHost:\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a,b\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET http://evil.test/ HTTP/1.1\r\nHost: a.example\r\n\r\n", 0, "EBADMSG", ""},
    {"GET http://a.example:8080/ HTTP/1.1\r\nHost: a.example\r\n\r\n", 0, "EBADMSG", ""},
    {"GET http://a.example@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 0, "EBADMSG", ""},
    {"GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    /* ---- request line */
    {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / http/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET /\tx HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"GET /\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    {"ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EBADMSG", ""},
    /* ---- methods and upgrades that are not served */
    {"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", 0, "EOPNOTSUPP", ""},
    {"connect a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", 0, "EOPNOTSUPP", ""},
    {"GET a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", 0, "EBADMSG", ""},
    {"TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EOPNOTSUPP", ""},
    {"trace / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EOPNOTSUPP", ""},
    {"TRACK / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "EOPNOTSUPP", ""},
    {GET_A "TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", 0, "H GET / a 1 none ka;B0;E;EOPNOTSUPP", ""},
    {HDR("Connection: Upgrade\r\nUpgrade: websocket"), 0, "EOPNOTSUPP", ""},
    {HDR("Upgrade: h2c"), 0, "EOPNOTSUPP", ""},
    {HDR("Connection: upgrade"), 0, "EOPNOTSUPP", ""},
    {HDR("HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"), 0, "EOPNOTSUPP", ""},
    {HDR("Expect: 100-continue, x"), 0, "ENOMSG", ""},
    {HDR("Expect: 200-ok"), 0, "ENOMSG", ""},
    /* ---- request hiding (issue 17): Expect, bodies on GET and HEAD */
    {"PUT /f HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\nhi", 0, "ENOMSG", ""},
    {"PUT /f HTTP/1.1\r\nHost: a\r\nexpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", 0, "ENOMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 41\r\n\r\nGET /admin HTTP/1.1\r\nHost: other\r\n\r\n", 0, "EBADMSG",
     ""},
    {"get / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx", 0, "EBADMSG", ""},
    {"HEAD / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0, "EBADMSG", ""},
    {"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0, "EBADMSG", ""},
    {"HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", 0, "EBADMSG", ""},
    /* ---- chunk sizes and extensions */
    {POST_TE "-1\r\n", 0, "H POST / a 2 chunked ka;B0;EBADMSG", ""},
    {POST_TE " 5\r\nhello\r\n0\r\n\r\n", 0, "H POST / a 2 chunked ka;B0;EBADMSG", ""},
    {POST_TE "5 \r\nhello\r\n0\r\n\r\n", 0, "H POST / a 2 chunked ka;B1;EBADMSG", "5"},
    {POST_TE "5 ;a\r\nhello\r\n0\r\n\r\n", 0, "H POST / a 2 chunked ka;B1;EBADMSG", "5"},
    {POST_TE "0x5\r\nhello\r\n0\r\n\r\n", 0, "H POST / a 2 chunked ka;B1;EBADMSG", "0"},
    {POST_TE "g\r\n", 0, "H POST / a 2 chunked ka;B0;EBADMSG", ""},
    {POST_TE "\r\n", 0, "H POST / a 2 chunked ka;B0;EBADMSG", ""},
    {POST_TE "5\nhello\r\n", 0, "H POST / a 2 chunked ka;B1;EBADMSG", "5"},
    {POST_TE "5\rhello\r\n", 0, "H POST / a 2 chunked ka;B2;EBADMSG", "5\r"},
    {POST_TE "10000000000000000\r\n", 0, "H POST / a 2 chunked ka;B16;EBADMSG", "1000000000000000"},
    {POST_TE "00000000000000001\r\n", 0, "H POST / a 2 chunked ka;B16;EBADMSG", "0000000000000000"},
    {POST_TE "8000000000000000\r\n", 0, "H POST / a 2 chunked ka;B15;EBADMSG", "800000000000000"},
    {POST_TE "7fffffffffffffff\r\nab", 0, "H POST / a 2 chunked ka;B20;more", "7fffffffffffffff\r\nab"},
    {POST_TE "ffffffffffffffffffff\r\n", 0, "H POST / a 2 chunked ka;B15;EBADMSG", "fffffffffffffff"},
    {POST_TE "5\r\nhelloX\r\n0\r\n\r\n", 0, "H POST / a 2 chunked ka;B8;EBADMSG", "5\r\nhello"},
    {POST_TE "5\r\nhello\n0\r\n\r\n", 0, "H POST / a 2 chunked ka;B8;EBADMSG", "5\r\nhello"},
    {POST_TE "5\r\nhello\r0\r\n\r\n", 0, "H POST / a 2 chunked ka;B9;EBADMSG", "5\r\nhello\r"},
    {POST_TE "5;\r\n", 0, "H POST / a 2 chunked ka;B2;EBADMSG", "5;"},
    {POST_TE "5;a=\r\n", 0, "H POST / a 2 chunked ka;B4;EBADMSG", "5;a="},
    {POST_TE "5; a\r\n", 0, "H POST / a 2 chunked ka;B2;EBADMSG", "5;"},
    {POST_TE "5;a =b\r\n", 0, "H POST / a 2 chunked ka;B3;EBADMSG", "5;a"},
    {POST_TE "5;a=\"x\r\n", 0, "H POST / a 2 chunked ka;B6;EBADMSG", "5;a=\"x"},
    {POST_TE "5;a=\"x\"y\r\n", 0, "H POST / a 2 chunked ka;B7;EBADMSG", "5;a=\"x\""},
    {POST_TE "5;a=b=c\r\n", 0, "H POST / a 2 chunked ka;B5;EBADMSG", "5;a=b"},
    /* ---- trailers */
    {POST_TE "0\r\nContent-Length: 5\r\n\r\n", 0, "H POST / a 2 chunked ka;B17;EBADMSG", NULL},
    {POST_TE "0\r\ncontent_length: 5\r\n\r\n", 0, "H POST / a 2 chunked ka;B17;EBADMSG", NULL},
    {POST_TE "0\r\nhost: b\r\n\r\n", 0, "H POST / a 2 chunked ka;B7;EBADMSG", NULL},
    {POST_TE "0\r\nTransfer-Encoding: chunked\r\n\r\n", 0, "H POST / a 2 chunked ka;B20;EBADMSG", NULL},
    {POST_TE "0\r\nX: a\r\n b\r\n\r\n", 0, "H POST / a 2 chunked ka;B9;EBADMSG", NULL},
    {POST_TE "0\r\nX : a\r\n\r\n", 0, "H POST / a 2 chunked ka;B4;EBADMSG", NULL},
    {POST_TE "0\r\nX: a\nY: b\r\n\r\n", 0, "H POST / a 2 chunked ka;B7;EBADMSG", NULL},
    {POST_TE "0\r\nX: a\x01\r\n\r\n", 0, "H POST / a 2 chunked ka;B7;EBADMSG", NULL},
    {POST_TE "0\r\n\r\r\n", 0, "H POST / a 2 chunked ka;B4;EBADMSG", NULL},
    {POST_TE "0\r\nContent-Lengthy: 5\r\nX-Host: b\r\n\r\n", 0, "H POST / a 2 chunked ka;B36;E;ok", NULL},
};

static void test_stream_table(void **state)
{
	(void)state;
	static struct run whole, piecewise;
	static const size_t steps[] = {1, 2, 3, 7, 64};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct stream_case *c = &cases[i];
		size_t n = c->len ? c->len : strlen(c->in);
		run_stream((const uint8_t *)c->in, n, 0, &whole);
		if (strcmp(whole.transcript, c->want) != 0)
			fail_msg("case %zu: got \"%s\", want \"%s\" (%s)", i, whole.transcript, c->want,
			         whole.err.message);
		if (c->body && (whole.forwarded_len != strlen(c->body) ||
		                memcmp(whole.forwarded, c->body, whole.forwarded_len) != 0))
			fail_msg("case %zu: forwarded \"%.*s\", want \"%s\"", i, (int)whole.forwarded_len,
			         (const char *)whole.forwarded, c->body);
		/* Any split gives the same events, errors, messages and bytes. */
		for (size_t s = 0; s < ARRAY_SIZE(steps); s++) {
			run_stream((const uint8_t *)c->in, n, steps[s], &piecewise);
			if (strcmp(piecewise.transcript, whole.transcript) != 0)
				fail_msg("case %zu, %zu bytes at a time: got \"%s\", want \"%s\"", i, steps[s],
				         piecewise.transcript, whole.transcript);
			assert_int_equal(piecewise.forwarded_len, whole.forwarded_len);
			assert_memory_equal(piecewise.forwarded, whole.forwarded, whole.forwarded_len);
			assert_string_equal(piecewise.err.message, whole.err.message);
			assert_int_equal(piecewise.err.code, whole.err.code);
		}
	}
}

/* ------------------------------------------------------------ details */

static const struct egress_http1_head *parse_one(struct egress_http1_parser *p, const char *s, size_t *ret_used)
{
	struct al_error err = {0};
	int ev = egress_http1_feed(p, (const uint8_t *)s, strlen(s), ret_used, &err);
	if (ev != EGRESS_HTTP1_EV_HEAD)
		fail_msg("\"%s\": event %d (%s)", s, ev, err.message);
	return egress_http1_parser_head(p);
}

static void test_head_fields(void **state)
{
	(void)state;
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	assert_null(egress_http1_parser_head(p));
	assert_true(egress_http1_parser_idle(p));
	const char *s = "POST http://a.example/v1/x?k=v HTTP/1.1\r\nhost: a.example\r\nX-Raw:\t spaced  value \t\r\n"
	                "Content-Length: 4\r\nX-Last: 1\r\n\r\nbody";
	size_t used;
	const struct egress_http1_head *h = parse_one(p, s, &used);
	assert_int_equal(used, strlen(s) - 4);
	assert_int_equal(h->len, used);
	assert_memory_equal(h->raw, s, h->len);
	assert_string_equal(h->method, "POST");
	assert_string_equal(h->host, "a.example");
	assert_int_equal(h->host_len, 9);
	assert_int_equal(h->minor_version, 1);
	assert_int_equal(h->form, EGRESS_HTTP1_ABSOLUTE_FORM);
	assert_int_equal(h->path.len, 5);
	assert_memory_equal(egress_http1_span_ptr(h, h->path), "/v1/x", 5);
	assert_int_equal(h->request_line.len, strlen("POST http://a.example/v1/x?k=v HTTP/1.1"));
	assert_int_equal(h->framing, EGRESS_HTTP1_LENGTH);
	assert_int_equal(h->content_length, 4);
	assert_true(h->keep_alive);
	assert_int_equal(h->n_fields, 4);
	const struct egress_http1_field *f = &h->fields[1];
	assert_int_equal(f->name.len, 5);
	assert_memory_equal(egress_http1_span_ptr(h, f->name), "X-Raw", 5);
	assert_int_equal(f->value.len, strlen("spaced  value"));
	assert_memory_equal(egress_http1_span_ptr(h, f->value), "spaced  value", f->value.len);
	assert_int_equal(f->line.len, strlen("X-Raw:\t spaced  value \t"));
	assert_int_equal(egress_http1_head_find(h, "HOST", 0), 0);
	assert_int_equal(egress_http1_head_find(h, "content-length", 1), 2);
	assert_int_equal(egress_http1_head_find(h, "host", 1), -ENOENT);
	assert_false(egress_http1_parser_idle(p));

	/* The head stays readable through the body and END. */
	struct al_error err = {0};
	size_t n;
	assert_int_equal(egress_http1_feed(p, (const uint8_t *)"bo", 2, &n, &err), EGRESS_HTTP1_EV_BODY);
	assert_int_equal(n, 2);
	assert_int_equal(egress_http1_feed(p, (const uint8_t *)"dyGET", 5, &n, &err), EGRESS_HTTP1_EV_BODY);
	assert_int_equal(n, 2);
	assert_string_equal(egress_http1_parser_head(p)->method, "POST");
	assert_int_equal(egress_http1_feed(p, (const uint8_t *)"GET", 3, &n, &err), EGRESS_HTTP1_EV_END);
	assert_int_equal(n, 0);
	assert_true(egress_http1_parser_idle(p));
	assert_string_equal(egress_http1_parser_head(p)->method, "POST");
	assert_int_equal(egress_http1_feed(p, (const uint8_t *)"GET", 3, &n, &err), EGRESS_HTTP1_EV_NEED_MORE);
	assert_null(egress_http1_parser_head(p));
	assert_false(egress_http1_parser_idle(p));

	/* origin-form path; asterisk-form */
	cleanup_egress_http1_parser struct egress_http1_parser *q = egress_http1_parser_new();
	h = parse_one(q, "GET /v1/chat?x=/y HTTP/1.1\r\nHost: a\r\n\r\n", &used);
	assert_int_equal(h->form, EGRESS_HTTP1_ORIGIN_FORM);
	assert_int_equal(h->path.len, 8);
	assert_memory_equal(egress_http1_span_ptr(h, h->path), "/v1/chat", 8);
	assert_int_equal(h->framing, EGRESS_HTTP1_NO_BODY);
}

static void test_errors_are_final(void **state)
{
	(void)state;
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	struct al_error err = {0}, again = {0};
	size_t n = 12345;
	const char *s = "TRACE / HTTP/1.1\r\nHost: a\r\n\r\n";
	assert_int_equal(egress_http1_feed(p, (const uint8_t *)s, strlen(s), &n, &err), -EOPNOTSUPP);
	assert_int_equal(n, 12345); /* ret_ written only on success */
	assert_int_equal(err.code, AL_ERR_METHOD);
	assert_non_null(strstr(err.message, "TRACE"));
	assert_int_equal(egress_http1_feed(p, (const uint8_t *)GET_A, strlen(GET_A), &n, &again), -EOPNOTSUPP);
	assert_string_equal(again.message, err.message);
	assert_int_equal(egress_http1_feed(p, NULL, 0, &n, NULL), -EOPNOTSUPP);

	/* codes for the status a caller answers with */
	const struct {
		const char *in;
		enum al_error_code code;
	} codes[] = {
	    {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", AL_ERR_INVALID_ARGUMENT},
	    {"CONNECT a:1 HTTP/1.1\r\n", AL_ERR_METHOD},
	    {HDR("Upgrade: websocket"), AL_ERR_FORBIDDEN},
	};
	for (size_t i = 0; i < ARRAY_SIZE(codes); i++) {
		cleanup_egress_http1_parser struct egress_http1_parser *q = egress_http1_parser_new();
		struct al_error e = {0};
		assert_true(egress_http1_feed(q, (const uint8_t *)codes[i].in, strlen(codes[i].in), &n, &e) < 0);
		assert_int_equal(e.code, codes[i].code);
	}
}

/* ------------------------------------------------------------ limits */

static char big[64 * 1024];

static int feed_all(const char *s, size_t n, int *ret_last_event)
{
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	size_t off = 0;
	int ev = 0;
	do {
		size_t used;
		struct al_error err = {0};
		ev = egress_http1_feed(p, (const uint8_t *)s + off, n - off, &used, &err);
		if (ev < 0)
			return ev;
		off += used;
		if (ev != EGRESS_HTTP1_EV_NEED_MORE)
			*ret_last_event = ev;
	} while (ev != EGRESS_HTTP1_EV_NEED_MORE);
	return egress_http1_parser_idle(p) ? 0 : -EAGAIN;
}

static size_t put(size_t o, const char *s)
{
	size_t n = strlen(s);
	assert_true(o + n <= sizeof(big));
	memcpy(big + o, s, n);
	return o + n;
}

static size_t fill(size_t o, char c, size_t n)
{
	assert_true(o + n <= sizeof(big));
	memset(big + o, c, n);
	return o + n;
}

static void test_limits_head(void **state)
{
	(void)state;
	int ev;
	size_t o;

	/* a line of exactly EGRESS_HTTP1_LINE_MAX bytes; one more is refused */
	o = put(0, "GET /");
	o = fill(o, 'a', EGRESS_HTTP1_LINE_MAX - strlen("GET / HTTP/1.1"));
	o = put(o, " HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_int_equal(feed_all(big, o, &ev), 0);
	o = put(0, "GET /");
	o = fill(o, 'a', EGRESS_HTTP1_LINE_MAX + 1 - strlen("GET / HTTP/1.1"));
	o = put(o, " HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_int_equal(feed_all(big, o, &ev), -E2BIG);
	/* refused before the line ends */
	o = put(0, "GET /");
	o = fill(o, 'a', EGRESS_HTTP1_LINE_MAX);
	assert_int_equal(feed_all(big, o, &ev), -E2BIG);
	o = put(0, "GET / HTTP/1.1\r\nX: ");
	o = fill(o, 'v', EGRESS_HTTP1_LINE_MAX - 3);
	o = put(o, "\r\nHost: a\r\n\r\n");
	assert_int_equal(feed_all(big, o, &ev), 0);
	o = put(0, "GET / HTTP/1.1\r\nX: ");
	o = fill(o, 'v', EGRESS_HTTP1_LINE_MAX - 2);
	o = put(o, "\r\nHost: a\r\n\r\n");
	assert_int_equal(feed_all(big, o, &ev), -E2BIG);

	/* EGRESS_HTTP1_FIELDS_MAX fields; one more is refused */
	o = put(0, "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 1; i < EGRESS_HTTP1_FIELDS_MAX; i++)
		o = put(o, "X: y\r\n");
	size_t at_max = o;
	o = put(o, "\r\n");
	assert_int_equal(feed_all(big, o, &ev), 0);
	o = put(at_max, "X: y\r\n\r\n");
	assert_int_equal(feed_all(big, o, &ev), -E2BIG);

	/* a head of exactly EGRESS_HTTP1_HEAD_MAX bytes; one more is refused */
	for (size_t extra = 0; extra <= 1; extra++) {
		o = put(0, "GET / HTTP/1.1\r\nHost: a\r\n");
		while (EGRESS_HTTP1_HEAD_MAX + extra - o > 4000 + 10) {
			o = put(o, "X-Pad: ");
			o = fill(o, 'p', 4000);
			o = put(o, "\r\n");
		}
		size_t pad = EGRESS_HTTP1_HEAD_MAX + extra - o - strlen("X-Last: \r\n\r\n");
		o = put(o, "X-Last: ");
		o = fill(o, 'q', pad);
		o = put(o, "\r\n\r\n");
		assert_int_equal(o, EGRESS_HTTP1_HEAD_MAX + extra);
		assert_int_equal(feed_all(big, o, &ev), extra ? -E2BIG : 0);
	}

	/* the Host value and the method */
	o = put(0, "GET / HTTP/1.1\r\nHost: ");
	o = fill(o, 'h', EGRESS_HTTP1_HOST_MAX);
	o = put(o, "\r\n\r\n");
	assert_int_equal(feed_all(big, o, &ev), 0);
	o = put(0, "GET / HTTP/1.1\r\nHost: ");
	o = fill(o, 'h', EGRESS_HTTP1_HOST_MAX + 1);
	o = put(o, "\r\n\r\n");
	assert_int_equal(feed_all(big, o, &ev), -E2BIG);
}

static void test_limits_body(void **state)
{
	(void)state;
	int ev;
	size_t o;

	/* a chunk-size line of EGRESS_HTTP1_CHUNK_LINE_MAX bytes; one more */
	for (size_t extra = 0; extra <= 1; extra++) {
		o = put(0, POST_TE "1;x=");
		o = fill(o, 'e', EGRESS_HTTP1_CHUNK_LINE_MAX + extra - 4);
		o = put(o, "\r\nz\r\n0\r\n\r\n");
		assert_int_equal(feed_all(big, o, &ev), extra ? -E2BIG : 0);
	}

	/* trailers: EGRESS_HTTP1_FIELDS_MAX fields; one more */
	for (size_t extra = 0; extra <= 1; extra++) {
		o = put(0, POST_TE "0\r\n");
		for (size_t i = 0; i < EGRESS_HTTP1_FIELDS_MAX + extra; i++)
			o = put(o, "T: v\r\n");
		o = put(o, "\r\n");
		assert_int_equal(feed_all(big, o, &ev), extra ? -E2BIG : 0);
	}
	/* a trailer line of EGRESS_HTTP1_LINE_MAX bytes; one more */
	for (size_t extra = 0; extra <= 1; extra++) {
		o = put(0, POST_TE "0\r\nT: ");
		o = fill(o, 'v', EGRESS_HTTP1_LINE_MAX + extra - 3);
		o = put(o, "\r\n\r\n");
		assert_int_equal(feed_all(big, o, &ev), extra ? -E2BIG : 0);
	}
	/* the trailer section: EGRESS_HTTP1_TRAILERS_MAX bytes; one more */
	for (size_t extra = 0; extra <= 1; extra++) {
		o = put(0, POST_TE "0\r\n");
		size_t start = o;
		while (EGRESS_HTTP1_TRAILERS_MAX + extra - (o - start) > 4000 + 10) {
			o = put(o, "T: ");
			o = fill(o, 't', 4000);
			o = put(o, "\r\n");
		}
		size_t pad = EGRESS_HTTP1_TRAILERS_MAX + extra - (o - start) - strlen("U: \r\n\r\n");
		o = put(o, "U: ");
		o = fill(o, 'u', pad);
		o = put(o, "\r\n\r\n");
		assert_int_equal(o - start, EGRESS_HTTP1_TRAILERS_MAX + extra);
		assert_int_equal(feed_all(big, o, &ev), extra ? -E2BIG : 0);
	}

	/* a large body is streamed, never held: a gigabyte announced, 3 bytes
	 * at a time for a while, all reported as body */
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	const char *h = POST_CL("1073741824");
	size_t used;
	struct al_error err = {0};
	assert_int_equal(egress_http1_feed(p, (const uint8_t *)h, strlen(h), &used, &err), EGRESS_HTTP1_EV_HEAD);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(egress_http1_feed(p, (const uint8_t *)"abc", 3, &used, &err), EGRESS_HTTP1_EV_BODY);
		assert_int_equal(used, 3);
	}
	assert_false(egress_http1_parser_idle(p));
}

/* ------------------------------------------------------------ rewriting */

static uint8_t out[EGRESS_HTTP1_OUT_MAX + 100];

static void rewrite_ok(const char *in, const struct egress_http1_rewrite *rw, const char *want)
{
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	size_t used, n = 0;
	const struct egress_http1_head *h = parse_one(p, in, &used);
	struct al_error err = {0};
	int r = egress_http1_head_rewrite(h, rw, out, sizeof(out), &n, &err);
	if (r < 0)
		fail_msg("rewrite of \"%s\": %d (%s)", in, r, err.message);
	if (n != strlen(want) || memcmp(out, want, n) != 0)
		fail_msg("rewrite of \"%s\":\n got \"%.*s\"\nwant \"%s\"", in, (int)n, (const char *)out, want);

	/* the result is a head that parses to the same request */
	cleanup_egress_http1_parser struct egress_http1_parser *q = egress_http1_parser_new();
	const struct egress_http1_head *g = parse_one(q, want, &used);
	assert_int_equal(used, n);
	assert_string_equal(g->method, h->method);
	assert_string_equal(g->host, h->host);
	assert_int_equal(g->framing, h->framing);
	assert_int_equal(g->content_length, h->content_length);
	assert_int_equal(g->target.len, h->target.len);
	assert_memory_equal(egress_http1_span_ptr(g, g->target), egress_http1_span_ptr(h, h->target), h->target.len);
	explicit_bzero(out, n);
}

static void rewrite_fails(const char *in, const struct egress_http1_rewrite *rw, size_t out_size, int want,
                          const char *secret)
{
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	size_t used, n = 777;
	const struct egress_http1_head *h = parse_one(p, in, &used);
	struct al_error err = {0};
	memset(out, 0, sizeof(out));
	assert_int_equal(egress_http1_head_rewrite(h, rw, out, out_size, &n, &err), want);
	assert_int_equal(n, 777);
	assert_true(err.message[0] != '\0');
	/* SECURITY: the secret is neither in the message nor left in out */
	if (secret) {
		assert_null(memmem(err.message, strlen(err.message), secret, strlen(secret)));
		assert_null(memmem(out, sizeof(out), secret, strlen(secret)));
	}
}

static void test_rewrite_remove_add(void **state)
{
	(void)state;
	const char *const remove[] = {"Authorization"};
	const struct egress_http1_field_add add[] = {{"Authorization", "Bearer s3cr3t", 13}};
	const struct egress_http1_rewrite rw = {.remove = remove, .n_remove = 1, .add = add, .n_add = 1};
	/* every spelling of the client's own credential goes; ours is added */
	rewrite_ok("GET /v1 HTTP/1.1\r\nAUTHORIZATION: Bearer guess\r\nHost: api.example\r\nauthorization:x\r\n"
	           "Accept: */*\r\nX-Authorization: kept\r\n\r\n",
	           &rw,
	           "GET /v1 HTTP/1.1\r\nHost: api.example\r\nAccept: */*\r\nX-Authorization: kept\r\n"
	           "Authorization: Bearer s3cr3t\r\n\r\n");
	/* nothing to remove */
	rewrite_ok("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &rw,
	           "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer s3cr3t\r\n\r\n");
	/* no operations: the head as received, raw spellings and all */
	const struct egress_http1_rewrite none = {0};
	const char *raw = "POST /x HTTP/1.0\r\nhOsT:\ta \r\nx-CUSTOM:  v  w \t\r\nContent-Length: 0\r\n\r\n";
	rewrite_ok(raw, &none, raw);
}

/* The fields the test substitutions name (issue 17: only those). */
static const char *const subst_fields[] = {"Authorization", "X-Two", "X-Mid", "X", "Cookie"};
#define SF subst_fields, 5

static void test_rewrite_placeholders(void **state)
{
	(void)state;
	const struct egress_http1_subst subst[] = {{"PH_123", 6, "s3cr3t", 6, SF}};
	const struct egress_http1_rewrite rw = {.subst = subst, .n_subst = 1};
	/* in several fields, several times in one value, at the edges */
	rewrite_ok("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer PH_123\r\nX-Two: PH_123PH_123 and PH_123\r\n"
	           "X-Mid:  a-PH_123-b \r\n\r\n",
	           &rw,
	           "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer s3cr3t\r\nX-Two: s3cr3ts3cr3t and s3cr3t\r\n"
	           "X-Mid:  a-s3cr3t-b \r\n\r\n");
	/* absent, or only partly there */
	rewrite_ok("GET / HTTP/1.1\r\nHost: a\r\nX: PH_12 PH_1234x\r\n\r\n", &rw,
	           "GET / HTTP/1.1\r\nHost: a\r\nX: PH_12 s3cr3t4x\r\n\r\n");
	rewrite_ok("GET / HTTP/1.1\r\nHost: a\r\nX: PH_12\r\n\r\n", &rw,
	           "GET / HTTP/1.1\r\nHost: a\r\nX: PH_12\r\n\r\n");
	/* never in the request line (path, query), nor in the fields that
	 * frame or route the request; field names are not values */
	rewrite_ok("GET /PH_123?key=PH_123 HTTP/1.1\r\nHost: a\r\nConnection: PH_123\r\nPH_123: v\r\n\r\n", &rw,
	           "GET /PH_123?key=PH_123 HTTP/1.1\r\nHost: a\r\nConnection: PH_123\r\nPH_123: v\r\n\r\n");
	rewrite_ok("GET http://PH_123.example/ HTTP/1.1\r\nHost: PH_123.example\r\n\r\n", &rw,
	           "GET http://PH_123.example/ HTTP/1.1\r\nHost: PH_123.example\r\n\r\n");

	/* SECURITY (issue 17): only in the fields named (any case), never in
	 * others a server may echo back (Origin, Referer, custom ones) */
	rewrite_ok("GET / HTTP/1.1\r\nHost: a\r\nOrigin: PH_123\r\nauthorization: PH_123\r\nReferer: /PH_123\r\n"
	           "X-Forwarded-For: PH_123\r\nX_Two: PH_123\r\nX-Twox: PH_123\r\n\r\n",
	           &rw,
	           "GET / HTTP/1.1\r\nHost: a\r\nOrigin: PH_123\r\nauthorization: s3cr3t\r\nReferer: /PH_123\r\n"
	           "X-Forwarded-For: PH_123\r\nX_Two: PH_123\r\nX-Twox: PH_123\r\n\r\n");
	const char *const only_auth[] = {"Authorization"};
	const struct egress_http1_subst auth[] = {{"PH_123", 6, "s3cr3t", 6, only_auth, 1}};
	const struct egress_http1_rewrite rw_auth = {.subst = auth, .n_subst = 1};
	rewrite_ok("GET / HTTP/1.1\r\nHost: a\r\nX: PH_123\r\nAuthorization: Bearer PH_123\r\nCookie: PH_123\r\n\r\n",
	           &rw_auth,
	           "GET / HTTP/1.1\r\nHost: a\r\nX: PH_123\r\nAuthorization: Bearer s3cr3t\r\nCookie: PH_123\r\n\r\n");

	/* several secrets; replacements are not scanned again; the first
	 * substitution that matches wins */
	const struct egress_http1_subst two[] = {
	    {"PH_A", 4, "PH_B", 4, SF}, {"PH_B", 4, "v-b", 3, SF}, {"PH_", 3, "z", 1, SF}};
	const struct egress_http1_rewrite rw2 = {.subst = two, .n_subst = 3};
	rewrite_ok("GET / HTTP/1.1\r\nHost: a\r\nX: PH_A PH_B PH_C\r\n\r\n", &rw2,
	           "GET / HTTP/1.1\r\nHost: a\r\nX: PH_B v-b zC\r\n\r\n");

	/* removal takes '_' for '-', as some servers do */
	const char *const rm_key[] = {"X-Api-Key"};
	const struct egress_http1_rewrite rw_key = {.remove = rm_key, .n_remove = 1};
	rewrite_ok("GET / HTTP/1.1\r\nHost: a\r\nx_api_key: g1\r\nX-API-KEY: g2\r\nX-Api-Keys: kept\r\n\r\n", &rw_key,
	           "GET / HTTP/1.1\r\nHost: a\r\nX-Api-Keys: kept\r\n\r\n");

	/* all at once: remove, substitute, add */
	const char *const remove[] = {"x-api-key"};
	const struct egress_http1_field_add add[] = {{"X-Api-Key", "k-secret", 8}, {"X-Via", "airlock", 7}};
	const struct egress_http1_rewrite all = {
	    .remove = remove, .n_remove = 1, .add = add, .n_add = 2, .subst = subst, .n_subst = 1};
	rewrite_ok("POST /v1 HTTP/1.1\r\nHost: a\r\nX-API-Key: PH_123\r\nCookie: t=PH_123\r\nContent-Length: 3\r\n\r\n",
	           &all,
	           "POST /v1 HTTP/1.1\r\nHost: a\r\nCookie: t=s3cr3t\r\nContent-Length: 3\r\nX-Api-Key: k-secret\r\n"
	           "X-Via: airlock\r\n\r\n");
}

static void test_rewrite_refusals(void **state)
{
	(void)state;
	const char *in = "GET / HTTP/1.1\r\nHost: a\r\nX: PH PH PH PH PH PH PH PH PH PH PH PH PH PH PH PH\r\n\r\n";

	/* the output limit: a value too big for it */
	static char secret[EGRESS_HTTP1_VALUE_MAX + 1];
	memset(secret, 'S', EGRESS_HTTP1_VALUE_MAX);
	const struct egress_http1_subst huge[] = {{"PH", 2, secret, EGRESS_HTTP1_VALUE_MAX, SF}};
	const struct egress_http1_rewrite rw_huge = {.subst = huge, .n_subst = 1};
	rewrite_fails(in, &rw_huge, sizeof(out), -E2BIG, secret);
	/* ... and a small buffer */
	const struct egress_http1_subst small[] = {{"PH", 2, "s3cr3t-value", 12, SF}};
	const struct egress_http1_rewrite rw_small = {.subst = small, .n_subst = 1};
	rewrite_fails(in, &rw_small, 60, -E2BIG, "s3cr3t-value");
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	size_t used, n;
	const struct egress_http1_head *h = parse_one(p, in, &used);
	assert_int_equal(egress_http1_head_rewrite(h, &rw_small, out, sizeof(out), &n, NULL), 0);
	assert_int_equal(n, strlen(in) + 16 * 10);
	explicit_bzero(out, n);
	/* a value longer than any line may be */
	const struct egress_http1_subst over[] = {{"PH", 2, secret, EGRESS_HTTP1_VALUE_MAX + 1, SF}};
	secret[EGRESS_HTTP1_VALUE_MAX] = 'S';
	const struct egress_http1_rewrite rw_over = {.subst = over, .n_subst = 1};
	rewrite_fails(in, &rw_over, sizeof(out), -EINVAL, NULL);

	/* SECURITY: secrets that would inject fields or be stripped */
	static const char *const bad_values[] = {
	    "s3cr3t\r\nX-Evil: 1", "s3cr3t\n", "s3\0cr3t", " s3cr3t", "s3cr3t\t", "s3\x7f"};
	for (size_t i = 0; i < ARRAY_SIZE(bad_values); i++) {
		size_t vlen = i == 2 ? 7 : strlen(bad_values[i]);
		const struct egress_http1_subst s[] = {{"PH", 2, bad_values[i], vlen, SF}};
		const struct egress_http1_rewrite rw = {.subst = s, .n_subst = 1};
		rewrite_fails(in, &rw, sizeof(out), -EINVAL, "s3");
		const struct egress_http1_field_add a[] = {{"Authorization", bad_values[i], vlen}};
		const struct egress_http1_rewrite rwa = {.add = a, .n_add = 1};
		rewrite_fails(in, &rwa, sizeof(out), -EINVAL, "s3");
	}

	/* names: not tokens, or fields that frame or route the request */
	static const char *const bad_names[] = {
	    "", "X Y", "X:", "Host", "content-length", "Transfer-Encoding", "Connection", "Expect", "Upgrade"};
	for (size_t i = 0; i < ARRAY_SIZE(bad_names); i++) {
		const char *const rm[] = {bad_names[i]};
		const struct egress_http1_rewrite rwr = {.remove = rm, .n_remove = 1};
		rewrite_fails(in, &rwr, sizeof(out), -EINVAL, NULL);
		const struct egress_http1_field_add a[] = {{bad_names[i], "v", 1}};
		const struct egress_http1_rewrite rwa = {.add = a, .n_add = 1};
		rewrite_fails(in, &rwa, sizeof(out), -EINVAL, NULL);
	}
	/* placeholders: empty or too long */
	const struct egress_http1_subst empty[] = {{"", 0, "v", 1, SF}};
	const struct egress_http1_rewrite rw_empty = {.subst = empty, .n_subst = 1};
	rewrite_fails(in, &rw_empty, sizeof(out), -EINVAL, NULL);
	const struct egress_http1_subst long_ph[] = {{secret, EGRESS_HTTP1_PLACEHOLDER_MAX + 1, "v", 1, SF}};
	const struct egress_http1_rewrite rw_long = {.subst = long_ph, .n_subst = 1};
	rewrite_fails(in, &rw_long, sizeof(out), -EINVAL, NULL);
	/* the fields of a placeholder: none, a framing one, not a token, too many */
	const struct egress_http1_subst nofield[] = {{"PH", 2, "v", 1, NULL, 0}};
	const struct egress_http1_rewrite rw_nofield = {.subst = nofield, .n_subst = 1};
	rewrite_fails(in, &rw_nofield, sizeof(out), -EINVAL, NULL);
	const char *const framing[] = {"X", "Connection"};
	const struct egress_http1_subst fr[] = {{"PH", 2, "v", 1, framing, 2}};
	const struct egress_http1_rewrite rw_fr = {.subst = fr, .n_subst = 1};
	rewrite_fails(in, &rw_fr, sizeof(out), -EINVAL, NULL);
	const char *const notoken[] = {"X Y"};
	const struct egress_http1_subst nt[] = {{"PH", 2, "v", 1, notoken, 1}};
	const struct egress_http1_rewrite rw_nt = {.subst = nt, .n_subst = 1};
	rewrite_fails(in, &rw_nt, sizeof(out), -EINVAL, NULL);
	const char *const nine[] = {"A", "B", "C", "D", "E", "F", "G", "H", "I"};
	const struct egress_http1_subst many[] = {{"PH", 2, "v", 1, nine, 9}};
	const struct egress_http1_rewrite rw_many = {.subst = many, .n_subst = 1};
	rewrite_fails(in, &rw_many, sizeof(out), -EINVAL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_stream_table),         cmocka_unit_test(test_head_fields),
	    cmocka_unit_test(test_errors_are_final),     cmocka_unit_test(test_limits_head),
	    cmocka_unit_test(test_limits_body),          cmocka_unit_test(test_rewrite_remove_add),
	    cmocka_unit_test(test_rewrite_placeholders), cmocka_unit_test(test_rewrite_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
