/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/front/front-head.c: the front's parser of a client's
 * request head (strict, as a smuggling defense), its rewrite for a node (the
 * client's credentials out, the delegation in, Connection: close), and the
 * port proxy's host form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "front-head.h"
#include "util.h"

static struct front_head head;

static int parse(const char *s, struct al_error *err)
{
	size_t n = strlen(s);
	assert_int_equal(front_head_end(s, n), n);
	return front_head_parse(s, n, &head, err);
}

static void assert_ok(const char *s)
{
	struct al_error err = {0};
	if (parse(s, &err) < 0)
		fail_msg("refused: %s: %s", s, err.message);
}

static void assert_bad(const char *s, int want)
{
	struct al_error err = {0};
	size_t n = strlen(s);
	int r = front_head_parse(s, n, &head, &err);
	if (r != want)
		fail_msg("%s: got %d, want %d (%s)", s, r, want, err.message);
	assert_true(err.message[0] != '\0');
}

static void test_simple(void **state)
{
	(void)state;
	assert_ok("GET /v1/sandboxes?all=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alk_a\r\n\r\n");
	assert_true(front_span_is(&head, head.method, "GET"));
	assert_true(front_span_is(&head, head.path, "/v1/sandboxes"));
	assert_true(front_span_is(&head, head.query, "all=true"));
	assert_int_equal(head.minor_version, 1);
	assert_int_equal(head.n_fields, 2);
	assert_int_equal(head.host, 0);
	char v[64];
	assert_int_equal(front_head_value(&head, "authorization", v, sizeof(v)), 1);
	assert_string_equal(v, "Bearer alk_a");
	assert_int_equal(front_head_value(&head, "X-API-KEY", v, sizeof(v)), 0);
	assert_int_equal(front_head_value(&head, "authorization", v, 5), -E2BIG);
	assert_false(head.has_length);
	assert_false(head.upgrade);
}

static void test_framing(void **state)
{
	(void)state;
	assert_ok("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n");
	assert_true(head.has_length);
	assert_int_equal(head.content_length, 12);
	assert_ok("PUT /f HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
	assert_true(head.chunked);
	assert_ok("GET / HTTP/1.0\r\n\r\n");
	assert_int_equal(head.minor_version, 0);
	assert_ok("GET /a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n");
	assert_true(head.upgrade);
	assert_ok("GET /a HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n");
	assert_false(head.upgrade); /* Upgrade without Connection: upgrade is no switch */
}

static void test_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "GET / HTTP/1.1\nHost: x\r\n\r\n",                         /* bare LF */
	    "GET / HTTP/1.1\r\nHost: x\rY: z\r\n\r\n",                 /* bare CR */
	    "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",            /* obs-fold */
	    "GET / HTTP/1.1\r\nHost : x\r\n\r\n",                      /* space before colon */
	    "GET / HTTP/1.1\r\nHo(st: x\r\n\r\n",                      /* not a token */
	    "GET / HTTP/1.1\r\nHost: x\r\nX: a\x01z\r\n\r\n",          /* control in a value */
	    "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n", /* not plain digits */
	    "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
	    "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
	    "GET / HTTP/1.1\r\n\r\n",                    /* no Host */
	    "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n", /* absolute-form */
	    "GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET / HTTP/2.0\r\nHost: x\r\n\r\n",
	    "G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /\x80 HTTP/1.1\r\nHost: x\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_bad(bad[i], -EBADMSG);
	char nul[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	nul[5] = '\0';
	struct al_error err = {0};
	assert_int_equal(front_head_parse(nul, sizeof(nul) - 1, &head, &err), -EBADMSG);
}

static void test_limits(void **state)
{
	(void)state;
	char *big = xmalloc(FRONT_HEAD_MAX + 64);
	size_t o = (size_t)snprintf(big, 64, "GET / HTTP/1.1\r\nHost: x\r\n");
	for (int i = 0; i < FRONT_FIELDS_MAX; i++)
		o += (size_t)snprintf(big + o, 64, "X-%d: v\r\n", i);
	memcpy(big + o, "\r\n", 3);
	assert_bad(big, -E2BIG); /* 101 fields */
	o = (size_t)snprintf(big, 64, "GET / HTTP/1.1\r\nHost: x\r\nX: ");
	memset(big + o, 'a', FRONT_HEAD_MAX);
	memcpy(big + o + FRONT_HEAD_MAX, "\r\n\r\n", 5);
	assert_bad(big, -E2BIG);
	free(big);
	assert_int_equal(front_head_end("GET / HTTP/1.1\r\nHost: x\r\n", 25), 0);
}

static void test_rewrite(void **state)
{
	(void)state;
	assert_ok("POST /v1/sandboxes HTTP/1.1\r\nHost: front\r\nAuthorization: Bearer alk_secret\r\n"
	          "X-Airlock-Principal: operator;exp=9\r\nX_Airlock_Principal: operator\r\nX-Api-Key: alk_k\r\n"
	          "Connection: keep-alive\r\nKeep-Alive: 5\r\nX-Forwarded-For: 6.6.6.6\r\nContent-Length: 2\r\n"
	          "Upgrade: h2c\r\nUser-Agent: t\r\n\r\n");
	struct front_rewrite rw = {
	    .principal = "tenant:a;exp=1", .authorization = "Bearer acl_mac", .forwarded_for = "10.0.0.1"};
	char out[FRONT_OUT_MAX];
	size_t n = 0;
	assert_int_equal(front_head_rewrite(&head, &rw, out, sizeof(out), &n), 0);
	out[n] = '\0';
	assert_string_equal(out, "POST /v1/sandboxes HTTP/1.1\r\nHost: front\r\nContent-Length: 2\r\nUser-Agent: t\r\n"
	                         "X-Airlock-Principal: tenant:a;exp=1\r\nAuthorization: Bearer acl_mac\r\n"
	                         "X-Forwarded-For: 10.0.0.1\r\nConnection: close\r\n\r\n");
	assert_int_equal(front_head_rewrite(&head, &rw, out, 40, &n), -E2BIG);
	/* ports and envd: the client's credentials pass; a switch keeps Upgrade */
	assert_ok(
	    "GET /x HTTP/1.1\r\nHost: 8000-sb-0123456789abcdef.example\r\nAuthorization: Bearer alk_t\r\n"
	    "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: airlock.bearer.alk_t, x\r\n\r\n");
	struct front_rewrite keep = {.keep_credentials = true, .ws_protocol = "x", .target = "/y"};
	assert_int_equal(front_head_rewrite(&head, &keep, out, sizeof(out), &n), 0);
	out[n] = '\0';
	assert_string_equal(out, "GET /y HTTP/1.1\r\nHost: 8000-sb-0123456789abcdef.example\r\n"
	                         "Authorization: Bearer alk_t\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: x\r\n"
	                         "Connection: Upgrade\r\n\r\n");
}

static void test_proxy_host(void **state)
{
	(void)state;
	char id[FRONT_SANDBOX_ID_LEN + 1];
	assert_int_equal(front_proxy_host("8000-sb-0123456789abcdef.localhost:8080", id), 0);
	assert_string_equal(id, "sb-0123456789abcdef");
	assert_int_equal(front_proxy_host("1-SB-0123456789ABCDEF.x", id), 0);
	assert_string_equal(id, "sb-0123456789abcdef");
	static const char *const no[] = {"front:8080",
	                                 "0-sb-0123456789abcdef.x",
	                                 "65536-sb-0123456789abcdef.x",
	                                 "80-sb-0123456789abcde.x",
	                                 "80-sb-0123456789abcdefa.x",
	                                 "80-sb-0123456789abcdef.",
	                                 "80-sb-0123456789abcdef",
	                                 "80sb-0123456789abcdef.x",
	                                 "-sb-0123456789abcdef.x",
	                                 "80-sb-0123456789abcdeg.x",
	                                 ""};
	for (size_t i = 0; i < ARRAY_SIZE(no); i++)
		if (front_proxy_host(no[i], id) != -ENOENT)
			fail_msg("accepted %s", no[i]);
	assert_true(front_sandbox_id_valid("sb-0123456789abcdef", 19));
	assert_false(front_sandbox_id_valid("sb-0123456789ABCDEF", 19));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_simple), cmocka_unit_test(test_framing), cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_limits), cmocka_unit_test(test_rewrite), cmocka_unit_test(test_proxy_host),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
