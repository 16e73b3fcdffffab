/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the response parser and streaming redactor of intercepted
 * connections (src/egress/egress-redact.c, issue 17). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "egress-redact.h"
#include "util.h"

#define SECRET "sk-live-0123456789abcdef"
#define MASK "************************"

/* Feeds in pieces of step bytes (0: all at once), sending what is ready as
 * it goes; returns the first error (or 0) and the output in out. */
static int run(struct egress_redactor *r, const char *in, size_t step, char *out, size_t out_size, size_t *ret_len)
{
	size_t n = strlen(in), off = 0, o = 0;
	int e = 0;
	while (off < n && e == 0) {
		size_t k = step ? MIN(step, n - off) : n - off;
		k = MIN(k, egress_redactor_room(r));
		assert_true(k > 0);
		struct al_error err = {0};
		e = egress_redactor_feed(r, (const uint8_t *)in + off, k, &err);
		if (e < 0) {
			assert_true(err.message[0] != '\0');
			assert_null(strstr(err.message, SECRET));
		}
		off += k;
		const uint8_t *p;
		size_t m = egress_redactor_ready(r, &p);
		assert_true(o + m <= out_size);
		memcpy(out + o, p, m);
		o += m;
		egress_redactor_sent(r, m);
	}
	if (e == 0)
		egress_redactor_finish(r);
	const uint8_t *p;
	size_t m = egress_redactor_ready(r, &p);
	memcpy(out + o, p, m);
	o += m;
	egress_redactor_sent(r, m);
	out[o] = '\0';
	*ret_len = o;
	return e;
}

static struct egress_redactor *with_requests(int n_get, bool identity)
{
	struct egress_redactor *r = egress_redactor_new();
	assert_int_equal(egress_redactor_add_value(r, SECRET, strlen(SECRET)), 0);
	for (int i = 0; i < n_get; i++)
		assert_int_equal(egress_redactor_request(r, false, identity), 0);
	return r;
}

struct redact_case {
	const char *in;
	const char *want; /* the output; NULL: same as in with SECRET masked */
	int requests;
	int error;
	uint64_t count;
};

static const struct redact_case cases[] = {
    /* headers and a Content-Length body */
    {"HTTP/1.1 200 OK\r\nX-Echo: " SECRET "\r\nContent-Length: 30\r\n\r\nkey=" SECRET "&x", NULL, 1, 0, 2},
    /* chunked, the value split across chunks (the framing is not data) */
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nsk-li\r\n3;ext=1\r\nve-\r\n"
     "10\r\n0123456789abcdef\r\n0\r\nX-T: " SECRET "\r\n\r\n",
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n*****\r\n3;ext=1\r\n***\r\n"
     "10\r\n****************\r\n0\r\nX-T: " MASK "\r\n\r\n",
     1, 0, 2},
    /* a value in a chunk extension (text a raw reader sees) */
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;e=" SECRET "\r\nok\r\n0\r\n\r\n", NULL, 1, 0, 1},
    /* two pipelined responses, close-delimited last; a near miss stays */
    {"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.0 200 OK\r\n\r\nsk-live-0123 " SECRET SECRET, NULL, 2, 0, 2},
    /* 1xx before the answer; 304 without a body */
    {"HTTP/1.1 103 Early Hints\r\nLink: " SECRET "\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
     NULL, 1, 0, 1},
    /* a prefix of the value at the end of the stream is masked (>= 8 bytes) */
    {"HTTP/1.1 200 OK\r\n\r\nabc sk-live-01", "HTTP/1.1 200 OK\r\n\r\nabc **********", 1, 0, 0},
    {"HTTP/1.1 200 OK\r\n\r\nabc sk-", "HTTP/1.1 200 OK\r\n\r\nabc sk-", 1, 0, 0},
    /* an unfinished head at the end of the stream is dropped, never checked:
     * here it would complete the short prefix a Content-Length body ended in */
    {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabcdsk-live-0123456789abcdef",
     "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabcdsk-li", 2, 0, 0},
    {"HTTP/1.1 200 OK\r\nContent-Le", "", 1, 0, 0},
    /* refusals: nothing of the refused response gets out */
    {"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", "", 1, -EPROTONOSUPPORT, 0},
    {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Encoding: br\r\n\r\n",
     "HTTP/1.1 200 "
     "OK\r\nContent-Length: 2\r\n\r\nok",
     2, -EPROTONOSUPPORT, 0},
    {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n\r\n",
     "HTTP/1.1 200 OK\r\nContent-Length: "
     "1\r\n\r\nx",
     1, -EBADMSG, 0},
    {"HTTP/1.1 101 Switching Protocols\r\n\r\n", "", 1, -EBADMSG, 0},
    {"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", "", 1, -EBADMSG, 0},
    {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", "", 1, -EBADMSG, 0},
    {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "", 1, -EBADMSG, 0},
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "", 1, -EBADMSG, 0},
    {"HTTP/1.1 200 OK\r\n X: folded\r\n\r\n", "", 1, -EBADMSG, 0},
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX",
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: "
     "chunked\r\n\r\n2\r\nab",
     1, -EBADMSG, 0},
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: "
     "chunked\r\n\r\n",
     1, -EBADMSG, 0},
    {"SSH-2.0-OpenSSH\r\n\r\n", "", 1, -EBADMSG, 0},
};

static void expect_masked(const char *in, char *want, size_t size)
{
	snprintf(want, size, "%s", in);
	for (char *p = strstr(want, SECRET); p; p = strstr(p, SECRET))
		memset(p, '*', strlen(SECRET));
}

static void test_cases(void **state)
{
	(void)state;
	static char out[8192], want[8192];
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		/* every split of the stream gives the same output */
		for (size_t step = 0; step <= 7; step++) {
			cleanup_egress_redactor struct egress_redactor *r = with_requests(cases[i].requests, true);
			size_t n;
			int e = run(r, cases[i].in, step, out, sizeof(out), &n);
			if (cases[i].want)
				snprintf(want, sizeof(want), "%s", cases[i].want);
			else
				expect_masked(cases[i].in, want, sizeof(want));
			if (e != cases[i].error || strcmp(out, want) != 0)
				fail_msg("case %zu step %zu: error %d (want %d)\n got  \"%s\"\n want \"%s\"", i, step,
				         e, cases[i].error, out, want);
			if (e == 0)
				assert_int_equal(egress_redactor_count(r, 0), cases[i].count);
		}
	}
}

static void test_head_and_identity(void **state)
{
	(void)state;
	static char out[4096];
	size_t n;
	/* HEAD: a Content-Length without a body; then the next response */
	cleanup_egress_redactor struct egress_redactor *r = egress_redactor_new();
	assert_int_equal(egress_redactor_add_value(r, SECRET, strlen(SECRET)), 0);
	assert_int_equal(egress_redactor_add_value(r, SECRET, strlen(SECRET)), 0); /* once */
	assert_int_equal(egress_redactor_request(r, true, true), 0);
	assert_int_equal(egress_redactor_request(r, false, false), 0);
	const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nHTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
	                 "Content-Length: 24\r\n\r\n" SECRET;
	/* (the second request carried no secret: its compressed answer passes,
	 * still matched) */
	assert_int_equal(run(r, in, 3, out, sizeof(out), &n), 0);
	assert_non_null(strstr(out, "\r\n\r\n" MASK));
	assert_true(egress_redactor_idle(r));

	/* a Content-Length body that ends in a value's beginning: all of it is
	 * ready at once (the client waits for its last byte), the tail masked */
	cleanup_egress_redactor struct egress_redactor *t = with_requests(2, true);
	const char *tail = "HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\nabcsk-live-012";
	assert_int_equal(egress_redactor_feed(t, (const uint8_t *)tail, strlen(tail), NULL), 0);
	const uint8_t *p;
	size_t m = egress_redactor_ready(t, &p);
	assert_int_equal(m, strlen(tail));
	assert_memory_equal(p + m - 14, "abc***********", 14);
	egress_redactor_sent(t, m);
	assert_true(egress_redactor_idle(t));

	/* limits: values, requests */
	cleanup_egress_redactor struct egress_redactor *l = egress_redactor_new();
	char v[8];
	for (int i = 0; i < EGRESS_REDACT_VALUES_MAX; i++) {
		snprintf(v, sizeof(v), "v%02d", i);
		assert_int_equal(egress_redactor_add_value(l, v, 3), i);
	}
	assert_int_equal(egress_redactor_add_value(l, "new", 3), -E2BIG);
	assert_int_equal(egress_redactor_add_value(l, "", 0), -EINVAL);
	for (int i = 0; i < EGRESS_REDACT_PENDING_MAX; i++)
		assert_int_equal(egress_redactor_request(l, false, false), 0);
	assert_int_equal(egress_redactor_request(l, false, false), -E2BIG);
}

/* A long body in small pieces, values everywhere: the output is the input
 * with every occurrence masked, and nothing of a value is ever ready before
 * it is masked. */
static void test_stream(void **state)
{
	(void)state;
	cleanup_egress_redactor struct egress_redactor *r = with_requests(1, true);
	assert_int_equal(egress_redactor_add_value(r, "aab", 3), 1);
	static char body[200000], in[210000], out[210000], want[210000];
	size_t bl = 0;
	unsigned seed = 7;
	while (bl < sizeof(body) - 64) {
		seed = seed * 1103515245 + 12345;
		switch ((seed >> 16) % 4) {
		case 0:
			memcpy(body + bl, SECRET, strlen(SECRET));
			bl += strlen(SECRET);
			break;
		case 1:
			memcpy(body + bl, "aaab", 4);
			bl += 4;
			break;
		default:
			body[bl++] = (char)('a' + (seed >> 20) % 3);
		}
	}
	body[bl] = '\0';
	int hl = snprintf(in, sizeof(in), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", bl);
	memcpy(in + hl, body, bl + 1);
	size_t n;
	assert_int_equal(run(r, in, 4093, out, sizeof(out), &n), 0);
	/* the expected output: the same masking done the slow way, left to
	 * right, per value (the values here cannot overlap each other) */
	snprintf(want, sizeof(want), "%s", in);
	for (char *p = strstr(want + hl, SECRET); p; p = strstr(p, SECRET))
		memset(p, '*', strlen(SECRET));
	for (char *p = strstr(want + hl, "aab"); p; p = strstr(p, "aab"))
		memset(p, '*', 3);
	assert_int_equal(n, strlen(in));
	assert_string_equal(out, want);
	assert_true(egress_redactor_count(r, 0) > 1000 && egress_redactor_count(r, 1) > 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cases),
	    cmocka_unit_test(test_head_and_identity),
	    cmocka_unit_test(test_stream),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
