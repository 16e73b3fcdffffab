/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the port proxy's pure parts (src/daemon/api/proxy-http.c,
 * proxy-route.c): the strict head parser, the rewriters, the routing, the
 * credentials taken from a query or cookies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proxy-http.h"
#include "util.h"

#define ID "sb-0123456789abcdef"

static struct proxy_head head;

static int parse(const char *text, bool response)
{
	struct al_error err = {0};
	size_t len = proxy_head_end(text, strlen(text));
	if (len == 0)
		return -EAGAIN;
	return proxy_head_parse(text, len, response, &head, &err);
}

static void test_head_ok(void **state)
{
	(void)state;
	assert_int_equal(parse("GET /a?b=1 HTTP/1.1\r\nHost: x\r\nCookie: a=1\r\n\r\n", false), 0);
	assert_int_equal(head.n_fields, 2);
	assert_int_equal(head.framing, PROXY_NO_BODY);
	assert_int_equal(head.minor_version, 1);
	assert_int_equal(head.host, 0);
	assert_memory_equal(head.raw + head.target.off, "/a?b=1", 6);
	assert_int_equal(parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n", false), 0);
	assert_int_equal(head.framing, PROXY_LENGTH);
	assert_int_equal(head.content_length, 12);
	assert_int_equal(parse("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n", false), 0);
	assert_int_equal(head.framing, PROXY_CHUNKED);
	assert_int_equal(
	    parse("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\n\r\n", false), 0);
	assert_true(head.conn_upgrade && head.conn_close && head.upgrade == 2);
	/* HTTP/1.0 needs no Host. */
	assert_int_equal(parse("GET / HTTP/1.0\r\n\r\n", false), 0);
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", true), 0);
	assert_int_equal(head.status, 200);
	assert_int_equal(parse("HTTP/1.1 204\r\n\r\n", true), 0);
	assert_int_equal(head.status, 204);
}

/* SECURITY: what request smuggling relies on. */
static void test_head_refused(void **state)
{
	(void)state;
	const char *bad[] = {
	    "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1,1\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nA: b\rc\r\n\r\n",
	    "GET / HTTP/1.1\nHost: x\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
	    "GET / HTTP/1.1\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: a@b\r\n\r\n",
	    "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
	    "CONNECT x:80 HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET / HTTP/2.0\r\nHost: x\r\n\r\n",
	    "G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
	    "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\nA: \x01\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int r = parse(bad[i], false);
		if (r != -EBADMSG)
			fail_msg("accepted or wrong error %d: %s", r, bad[i]);
	}
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", true),
	                 -EBADMSG);
	assert_int_equal(parse("HTTP/1.1 20 OK\r\n\r\n", true), -EBADMSG);
}

static void test_head_limits(void **state)
{
	(void)state;
	static char buf[PROXY_HEAD_MAX * 2];
	size_t n = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: x\r\n");
	for (int i = 0; i < PROXY_FIELDS_MAX; i++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "X-%d: y\r\n", i);
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, "\r\n");
	assert_int_equal(parse(buf, false), -E2BIG);
	struct al_error err = {0};
	memset(buf, 'a', sizeof(buf));
	memcpy(buf, "GET /", 5);
	assert_int_equal(proxy_head_parse(buf, PROXY_HEAD_MAX + 1, false, &head, &err), -E2BIG);
	assert_int_equal(proxy_head_end("GET / HTTP/1.1\r\nHost: x\r\n", 25), 0);
}

static void test_route(void **state)
{
	(void)state;
	struct proxy_route r;
	const char *host = "8000-" ID ".localhost:8081";
	assert_int_equal(proxy_route_parse(host, strlen(host), "/x", 2, "localhost:8081", &r), 0);
	assert_int_equal(r.port, 8000);
	assert_string_equal(r.id, ID);
	assert_false(r.path_form);
	/* Case-insensitive domain and id; a wrong port, domain or id is no match. */
	const char *upper = "8000-SB-0123456789ABCDEF.LocalHost:8081";
	assert_int_equal(proxy_route_parse(upper, strlen(upper), "/", 1, "localhost:8081", &r), 0);
	assert_string_equal(r.id, ID);
	const char *no[] = {"8000-" ID ".localhost:8082",       "8000-" ID ".localhost",
	                    "8000-" ID ".evil.localhost:8081x", "8000-" ID ".evil.localhost:8081",
	                    "0-" ID ".localhost:8081",          "65536-" ID ".localhost:8081",
	                    "8000-sb-0123.localhost:8081",      "08000-" ID ".localhost:8081",
	                    "8000-" ID "localhost:8081",        "localhost:8081"};
	for (size_t i = 0; i < ARRAY_SIZE(no); i++)
		assert_int_equal(proxy_route_parse(no[i], strlen(no[i]), "/", 1, "localhost:8081", &r), -ENOENT);
	/* A domain without a port takes any port in Host. */
	const char *h2 = "3000-" ID ".sb.example.com:443";
	assert_int_equal(proxy_route_parse(h2, strlen(h2), "/", 1, "sb.example.com", &r), 0);
	assert_int_equal(r.port, 3000);

	const char *t = "/sandbox/" ID "/8000/api/x?y=1";
	assert_int_equal(proxy_route_parse("localhost:8081", 14, t, strlen(t), "localhost:8081", &r), 0);
	assert_true(r.path_form);
	assert_int_equal(r.port, 8000);
	char out[256];
	assert_int_equal(proxy_route_guest_target(&r, t, strlen(t), out, sizeof(out)), strlen("/api/x?y=1"));
	assert_string_equal(out, "/api/x?y=1");
	const char *t2 = "/sandbox/" ID "/8000?q";
	assert_int_equal(proxy_route_parse(NULL, 0, t2, strlen(t2), "localhost:8081", &r), 0);
	proxy_route_guest_target(&r, t2, strlen(t2), out, sizeof(out));
	assert_string_equal(out, "/?q");
	const char *bad[] = {"/sandbox/" ID,
	                     "/sandbox/" ID "/",
	                     "/sandbox/" ID "/0/",
	                     "/sandbox/" ID "/80a/",
	                     "/sandbox/SB-0123456789ABCDEF/80/",
	                     "/sandboxes/" ID "/80/",
	                     "/"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_equal(proxy_route_parse(NULL, 0, bad[i], strlen(bad[i]), "localhost:8081", &r), -ENOENT);
}

static void test_query_token(void **state)
{
	(void)state;
	char tok[64], target[256];
	const char *cases[][2] = {
	    {"/p?airlock_token=att_1", "/p"},
	    {"/p?airlock_token=att_1&a=b", "/p?a=b"},
	    {"/p?a=b&airlock_token=att_1", "/p?a=b"},
	    {"/p?a=1&airlock_token=att_1&b=2", "/p?a=1&b=2"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		assert_int_equal(
		    proxy_query_take_token(cases[i][0], strlen(cases[i][0]), tok, sizeof(tok), target, sizeof(target)),
		    1);
		assert_string_equal(tok, "att_1");
		assert_string_equal(target, cases[i][1]);
	}
	assert_int_equal(proxy_query_take_token("/p?x_airlock_token=1", 20, tok, sizeof(tok), target, sizeof(target)),
	                 0);
	assert_int_equal(proxy_query_take_token("/p", 2, tok, sizeof(tok), target, sizeof(target)), 0);
	assert_int_equal(proxy_query_take_token("/p?airlock_token=0123456789", 27, tok, 4, target, sizeof(target)),
	                 -E2BIG);
}

static void test_cookie(void **state)
{
	(void)state;
	char tok[64] = "", rest[256] = "";
	const char *v = "a=1; airlock_token=att_2;b=2 ";
	assert_int_equal(proxy_cookie_take(v, strlen(v), tok, sizeof(tok), rest, sizeof(rest)), 1);
	assert_string_equal(tok, "att_2");
	assert_string_equal(rest, "a=1; b=2");
	const char *v2 = "c=3";
	assert_int_equal(proxy_cookie_take(v2, strlen(v2), tok, sizeof(tok), rest, sizeof(rest)), 0);
	assert_string_equal(rest, "a=1; b=2; c=3");
}

/* SECURITY: the guest never sees a credential or a hop-by-hop field. */
static void test_request_rewrite(void **state)
{
	(void)state;
	const char *in =
	    "GET /sandbox/" ID "/80/x HTTP/1.1\r\nHost: h:1\r\nX-Airlock-Traffic-Token: att_1\r\n"
	    "X_Airlock_Traffic_Token: att_1\r\ne2b-traffic-access-token: att_1\r\nAuthorization: Bearer "
	    "alk_x\r\nCookie: a=1; airlock_token=att_1\r\nConnection: keep-alive, X-Secret\r\n"
	    "X-Secret: s\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: 6.6.6.6\r\nAccept: */*\r\n\r\n";
	assert_int_equal(parse(in, false), 0);
	struct proxy_request_rewrite rw = {.target = "/x",
	                                   .drop_authorization = true,
	                                   .cookie = "a=1",
	                                   .forwarded_for = "127.0.0.1",
	                                   .forwarded_host = "h:1",
	                                   .forwarded_proto = "http",
	                                   .forwarded_prefix = "/sandbox/" ID "/80"};
	char out[4096];
	size_t len;
	assert_int_equal(proxy_request_rewrite(&head, &rw, out, sizeof(out) - 1, &len), 0);
	out[len] = '\0';
	assert_string_equal(out, "GET /x HTTP/1.1\r\nHost: h:1\r\nAccept: */*\r\nCookie: a=1\r\n"
	                         "X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h:1\r\n"
	                         "X-Forwarded-Prefix: /sandbox/" ID "/80\r\n\r\n");
	assert_int_equal(proxy_request_rewrite(&head, &rw, out, 20, &len), -E2BIG);

	const char *ws = "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
	                 "Sec-WebSocket-Key: k\r\n\r\n";
	assert_int_equal(parse(ws, false), 0);
	struct proxy_request_rewrite rw2 = {.target = "/ws", .upgrade = true};
	assert_int_equal(proxy_request_rewrite(&head, &rw2, out, sizeof(out) - 1, &len), 0);
	out[len] = '\0';
	assert_string_equal(out, "GET /ws HTTP/1.1\r\nHost: h\r\nSec-WebSocket-Key: k\r\nConnection: upgrade\r\n"
	                         "Upgrade: websocket\r\n\r\n");
}

static void test_response_rewrite(void **state)
{
	(void)state;
	const char *in = "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\nContent-Length: 2\r\n\r\n";
	assert_int_equal(parse(in, true), 0);
	char out[1024];
	size_t len;
	assert_int_equal(proxy_response_rewrite(&head, true, out, sizeof(out) - 1, &len), 0);
	out[len] = '\0';
	assert_string_equal(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n");
	const char *sw = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
	assert_int_equal(parse(sw, true), 0);
	assert_int_equal(proxy_response_rewrite(&head, false, out, sizeof(out) - 1, &len), 0);
	out[len] = '\0';
	assert_string_equal(out,
	                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n");
}

static void test_answer(void **state)
{
	(void)state;
	char out[512];
	size_t n = proxy_answer_format(out, sizeof(out), 404, true, NULL, "no\n");
	assert_true(n > 0);
	assert_non_null(strstr(out, "HTTP/1.1 404 Not Found\r\n"));
	assert_non_null(strstr(out, "Content-Length: 3\r\n"));
	assert_non_null(strstr(out, "Connection: close\r\n"));
	assert_string_equal(out + n - 3, "no\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_head_ok),         cmocka_unit_test(test_head_refused),
	    cmocka_unit_test(test_head_limits),     cmocka_unit_test(test_route),
	    cmocka_unit_test(test_query_token),     cmocka_unit_test(test_cookie),
	    cmocka_unit_test(test_request_rewrite), cmocka_unit_test(test_response_rewrite),
	    cmocka_unit_test(test_answer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
