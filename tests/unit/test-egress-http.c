/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the HTTP/1.x request head reader of the egress gateway
 * (src/egress/egress-http.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "egress-http.h"
#include "util.h"

static int head(const char *s, struct egress_http_request *req)
{
	struct al_error err = {0};
	int r = egress_http_read_request_head((const uint8_t *)s, strlen(s), req, &err);
	if (r < 0 && r != -EAGAIN && err.message[0] == '\0')
		fail_msg("error %d without a message", r);
	return r;
}

struct http_case {
	const char *in;
	int want;
	const char *host; /* on success */
};

static const struct http_case cases[] = {
    {"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, "example.com"},
    {"GET / HTTP/1.0\r\nHost: example.com\r\n\r\n", 0, "example.com"},
    {"GET /a?b=c HTTP/1.1\r\nUser-Agent: x\r\nHOST:\t example.com:8080 \t\r\nAccept: */*\r\n\r\n", 0,
     "example.com:8080"},
    {"POST /x HTTP/1.1\r\nhost: [::1]:80\r\nContent-Length: 3\r\n\r\nabc", 0, "[::1]:80"},
    {"OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n", 0, "a.example"},
    {"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, "example.com"},
    {"GET HTTP://Example.COM:8080?q HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", 0, "example.com:8080"},
    {"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, "example.com"},
    {"GET / HTTP/1.1\r\nHost: b\xc3\xbc"
     "cher.example\r\n\r\n",
     0,
     "b\xc3\xbc"
     "cher.example"},
    {"GET / HTTP/1.1\r\nX-Empty:\r\nHost: a\r\n\r\n", 0, "a"},
    /* incomplete but valid so far */
    {"", -EAGAIN, NULL},
    {"G", -EAGAIN, NULL},
    {"GET / HTTP/1.1\r", -EAGAIN, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\n", -EAGAIN, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\n\r", -EAGAIN, NULL},
    /* Host */
    {"GET / HTTP/1.1\r\n\r\n", -ENODATA, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\nhOsT: b\r\n", -EBADMSG, NULL}, /* refused before the head ends */
    {"GET / HTTP/1.1\r\nHost:\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost:   \r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost: a\x7f\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\n: a\r\n\r\n", -EBADMSG, NULL},
    /* obs-fold */
    {"GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nX: a\r\n\tHost: b\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\n Host: b\r\n\r\n", -EBADMSG, NULL},
    /* line ends */
    {"GET / HTTP/1.1\nHost: a\n\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1\r\nHost: a\r\n\n", -EBADMSG, NULL},
    {"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    /* request line */
    {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET /\tx HTTP/1.1\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET / http/1.1\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET /\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET\r\n\r\n", -EBADMSG, NULL},
    {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"G(", -EBADMSG, NULL},
    {"\x16\x03\x01\x02\x00", -EBADMSG, NULL},
    {"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", -EBADMSG, NULL},
    {"GET example.com:80 HTTP/1.1\r\nHost: example.com:80\r\n\r\n", -EBADMSG, NULL},
    {"GET * HTTP/1.1\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL},
    {"GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    /* absolute-form must agree with Host */
    {"GET http://evil.test/ HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL},
    {"GET http://example.com:8080/ HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL},
    {"GET http://example.com.evil.test/ HTTP/1.1\r\nHost: example.com\r\n\r\n", -EBADMSG, NULL},
    {"GET http://example.com@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", -EBADMSG, NULL},
    {"GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", -EBADMSG, NULL},
    {"GET http://evil.test/ HTTP/1.1\r\n\r\n", -ENODATA, NULL},
};

static void test_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct egress_http_request req;
		int r = head(cases[i].in, &req);
		if (r != cases[i].want)
			fail_msg("case %zu: got %d, want %d", i, r, cases[i].want);
		if (r != 0)
			continue;
		if (strcmp(req.host, cases[i].host) != 0 || req.host_len != strlen(cases[i].host))
			fail_msg("case %zu: host \"%s\"", i, req.host);
	}
}

static void test_fields(void **state)
{
	(void)state;
	const char *s = "POST http://a.example/ HTTP/1.0\r\nHost: A.example\r\n\r\nbody";
	struct egress_http_request req;
	assert_int_equal(head(s, &req), 0);
	assert_string_equal(req.method, "POST");
	assert_int_equal(req.minor_version, 0);
	assert_true(req.absolute_form);
	assert_int_equal(req.head_len, strlen(s) - 4);
	assert_string_equal(req.host, "A.example");
}

/* Every prefix of a valid head asks for more; the whole head is accepted. */
static void test_every_prefix(void **state)
{
	(void)state;
	const char *s = "GET /index.html HTTP/1.1\r\nHost: www.example.com\r\nAccept: */*\r\n\r\n";
	size_t n = strlen(s);
	for (size_t len = 0; len < n; len++) {
		struct egress_http_request req;
		int r = egress_http_read_request_head((const uint8_t *)s, len, &req, NULL);
		if (r != -EAGAIN)
			fail_msg("prefix %zu: %d", len, r);
	}
	struct egress_http_request req;
	assert_int_equal(egress_http_read_request_head((const uint8_t *)s, n, &req, NULL), 0);
}

static void test_limits(void **state)
{
	(void)state;
	static char buf[EGRESS_HTTP_HEAD_MAX * 2];
	struct egress_http_request req;
	size_t o;

	/* a long line: fine at the limit, refused beyond -- even before it ends */
	o = (size_t)snprintf(buf, sizeof(buf), "GET /");
	memset(buf + o, 'a', EGRESS_HTTP_LINE_MAX - o - 9);
	o = EGRESS_HTTP_LINE_MAX - 9;
	o += (size_t)snprintf(buf + o, sizeof(buf) - o, " HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, o, &req, NULL), 0);
	memset(buf, 'a', EGRESS_HTTP_LINE_MAX + 2);
	memcpy(buf, "GET /", 5);
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, EGRESS_HTTP_LINE_MAX + 2, &req, NULL),
	                 -E2BIG);
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, EGRESS_HTTP_LINE_MAX, &req, NULL),
	                 -EAGAIN);

	/* header count */
	o = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 1; i < EGRESS_HTTP_HEADERS_MAX; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "X-%d: y\r\n", i);
	o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\r\n");
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, o, &req, NULL), 0);
	o -= 2;
	o += (size_t)snprintf(buf + o, sizeof(buf) - o, "X-last: y\r\n\r\n");
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, o, &req, NULL), -E2BIG);

	/* the head: many long headers without an end */
	o = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: a\r\n");
	while (o < EGRESS_HTTP_HEAD_MAX + 100) {
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "X-Pad: ");
		memset(buf + o, 'p', 4000);
		o += 4000;
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\r\n");
	}
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, EGRESS_HTTP_HEAD_MAX - 1, &req, NULL),
	                 -EAGAIN);
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, EGRESS_HTTP_HEAD_MAX, &req, NULL), -E2BIG);
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, o, &req, NULL), -E2BIG);

	/* a Host value over its limit */
	o = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: ");
	memset(buf + o, 'h', EGRESS_HTTP_HOST_MAX + 1);
	o += EGRESS_HTTP_HOST_MAX + 1;
	o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\r\n\r\n");
	assert_int_equal(egress_http_read_request_head((const uint8_t *)buf, o, &req, NULL), -E2BIG);

	/* NUL in a value (not visible to strlen-based tests) */
	static const char nul[] = "GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n";
	assert_int_equal(egress_http_read_request_head((const uint8_t *)nul, sizeof(nul) - 1, &req, NULL), -EBADMSG);
	assert_int_equal(egress_http_read_request_head((const uint8_t *)nul, 24, &req, NULL), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table),
	    cmocka_unit_test(test_fields),
	    cmocka_unit_test(test_every_prefix),
	    cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
