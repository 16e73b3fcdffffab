/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the Firecracker API client (src/daemon/vmm/firecracker/fc-api.c): the strict
 * parser of answers, request building, and the exchange over a real unix
 * socket (timeouts, early close, trailing bytes, error answers). */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cmocka.h>

#include "fc-api.h"
#include "json-cleanup.h"
#include "util.h"

static int parse(const char *text, struct fc_response *r, size_t *used, char *why)
{
	*r = (struct fc_response){0};
	return fc_response_parse(text, strlen(text), r, used, why, 256);
}

static void expect_bad(const char *text, int code, const char *needle)
{
	struct fc_response r;
	size_t used = 0;
	char why[256] = "";
	int rc = parse(text, &r, &used, why);
	if (rc != code)
		fail_msg("expected %d for %s, got %d (%s)", code, text, rc, why);
	if (needle && !strstr(why, needle))
		fail_msg("message \"%s\" does not say \"%s\"", why, needle);
}

/* ------------------------------------------------------------ parser */

static void test_parse_204_like_firecracker(void **state)
{
	(void)state;
	/* micro_http: empty reason phrase, no Content-Length on 204. */
	const char *t = "HTTP/1.1 204 \r\nServer: Firecracker API\r\nConnection: keep-alive\r\n\r\n";
	struct fc_response r;
	size_t used;
	char why[256];
	assert_int_equal(parse(t, &r, &used, why), 1);
	assert_int_equal(r.status, 204);
	assert_int_equal(used, strlen(t));
	assert_null(r.body);
	assert_false(r.deprecated);
	assert_string_equal(r.fault, "");
}

static void test_parse_200_body(void **state)
{
	(void)state;
	const char *body =
	    "{\"id\":\"sb-1\",\"state\":\"Paused\",\"vmm_version\":\"1.17.0\",\"app_name\":\"Firecracker\"}";
	cleanup_free char *t = xasprintf("HTTP/1.1 200 \r\nServer: Firecracker API\r\nConnection: keep-alive\r\n"
	                                 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
	                                 strlen(body), body);
	struct fc_response r;
	size_t used;
	char why[256];
	assert_int_equal(parse(t, &r, &used, why), 1);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.body, "state")), "Paused");
	fc_response_release(&r);
	/* Every proper prefix is "need more", never an error or an answer. */
	for (size_t n = 0; n < strlen(t); n++) {
		struct fc_response p = {0};
		assert_int_equal(fc_response_parse(t, n, &p, &used, why, sizeof(why)), 0);
	}
}

static void test_parse_error_answer(void **state)
{
	(void)state;
	const char *t = "HTTP/1.1 400 \r\nServer: Firecracker API\r\nConnection: keep-alive\r\nDeprecation: true\r\n"
	                "Content-Type: application/json\r\nContent-Length: 52\r\n\r\n"
	                "{\"fault_message\":\"Invalid kernel path.\\u0007\\n bad\"}";
	struct fc_response r;
	size_t used;
	char why[256];
	assert_int_equal(parse(t, &r, &used, why), 1);
	assert_int_equal(r.status, 400);
	assert_true(r.deprecated);
	/* Control characters of the guest-adjacent process never reach a log. */
	assert_string_equal(r.fault, "Invalid kernel path.?? bad");
	fc_response_release(&r);
}

static void test_parse_trailing_bytes_reported(void **state)
{
	(void)state;
	const char *t = "HTTP/1.1 204 \r\n\r\nHTTP/1.1 204 \r\n\r\n";
	struct fc_response r;
	size_t used;
	char why[256];
	assert_int_equal(parse(t, &r, &used, why), 1);
	assert_int_equal(used, strlen(t) / 2);
}

static void test_parse_bad_status_lines(void **state)
{
	(void)state;
	expect_bad("HTTP/1.0 204 \r\n\r\n", -EBADMSG, "status line");
	expect_bad("HTTP/1.1 20 \r\n\r\n", -EBADMSG, NULL);
	expect_bad("HTTP/1.1 2040 \r\n\r\n", -EBADMSG, "space after the status code");
	expect_bad("HTTP/1.1 204\r\n\r\n", -EBADMSG, NULL);
	expect_bad("HTTP/1.1 2x4 \r\n\r\n", -EBADMSG, "three digits");
	expect_bad("HTTP/1.1 100 Continue\r\n\r\n", -EBADMSG, "unexpected status 100");
	expect_bad("HTTP/1.1 600 \r\n\r\n", -EBADMSG, "unexpected status 600");
	expect_bad("HTTP/1.1 204 No\x01Content\r\n\r\n", -EBADMSG, "reason phrase");
	expect_bad("garbage\r\n\r\n", -EBADMSG, "status line");
}

static void test_parse_bad_line_endings(void **state)
{
	(void)state;
	expect_bad("HTTP/1.1 204 \nServer: x\r\n\r\n", -EBADMSG, "bare LF");
	expect_bad("HTTP/1.1 204 \r\nServer: x\ry\r\n\r\n", -EBADMSG, "bare CR");
	const char nul[] = "HTTP/1.1 204 \r\nServer: a\0b\r\n\r\n";
	struct fc_response r = {0};
	size_t used;
	char why[256];
	assert_int_equal(fc_response_parse(nul, sizeof(nul) - 1, &r, &used, why, sizeof(why)), -EBADMSG);
}

static void test_parse_bad_headers(void **state)
{
	(void)state;
	expect_bad("HTTP/1.1 204 \r\nServer: x\r\n folded\r\n\r\n", -EBADMSG, "folded");
	expect_bad("HTTP/1.1 204 \r\nno colon here\r\n\r\n", -EBADMSG, "colon");
	expect_bad("HTTP/1.1 204 \r\n: empty name\r\n\r\n", -EBADMSG, "colon");
	expect_bad("HTTP/1.1 204 \r\nBad Name: x\r\n\r\n", -EBADMSG, "header name");
	expect_bad("HTTP/1.1 204 \r\nX: a\x7f\r\n\r\n", -EBADMSG, "control character");
	expect_bad("HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\n\r\n", -EPROTO, "Transfer-Encoding");
	expect_bad("HTTP/1.1 200 \r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", -EBADMSG, "twice");
	expect_bad("HTTP/1.1 200 \r\nContent-Length: 1a\r\n\r\n", -EBADMSG, "decimal");
	expect_bad("HTTP/1.1 200 \r\nContent-Length: -1\r\n\r\n", -EBADMSG, "decimal");
	expect_bad("HTTP/1.1 200 \r\nContent-Length: +2\r\n\r\n{}", -EBADMSG, "decimal");
	expect_bad("HTTP/1.1 200 \r\nContent-Length:\r\n\r\n", -EMSGSIZE, "empty");
	/* More header fields than the limit. */
	char many[4096] = "HTTP/1.1 204 \r\n";
	for (int i = 0; i <= FC_HEADERS_MAX; i++) {
		size_t o = strlen(many);
		snprintf(many + o, sizeof(many) - o, "X-%d: y\r\n", i);
	}
	size_t o = strlen(many);
	snprintf(many + o, sizeof(many) - o, "\r\n");
	expect_bad(many, -EMSGSIZE, "header fields");
}

static void test_parse_body_rules(void **state)
{
	(void)state;
	expect_bad("HTTP/1.1 200 \r\nContent-Type: application/json\r\n\r\n{}", -EPROTO, "without Content-Length");
	expect_bad("HTTP/1.1 204 \r\nContent-Length: 2\r\n\r\n{}", -EBADMSG, "with a body");
	expect_bad("HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\n{}", -EPROTO, "application/json");
	expect_bad("HTTP/1.1 200 \r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", -EPROTO,
	           "application/json");
	expect_bad("HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n{x}", -EBADMSG,
	           "not valid JSON");
	expect_bad("HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]", -EBADMSG,
	           "not an object");
	expect_bad("HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"a\":1,\"a\":2}  ",
	           -EBADMSG, "not valid JSON");
	expect_bad("HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 70000\r\n\r\n", -EMSGSIZE,
	           "over the limit");
	expect_bad("HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 99999999\r\n\r\n", -EMSGSIZE,
	           NULL);
	/* application/json with a parameter is fine; an empty 200 is fine. */
	struct fc_response r;
	size_t used;
	char why[256];
	assert_int_equal(
	    parse("HTTP/1.1 200 \r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}", &r,
	          &used, why),
	    1);
	fc_response_release(&r);
	assert_int_equal(parse("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", &r, &used, why), 1);
	assert_null(r.body);
}

static void test_parse_head_too_long(void **state)
{
	(void)state;
	char *t = xmalloc(FC_HEAD_MAX + 100);
	snprintf(t, FC_HEAD_MAX + 100, "HTTP/1.1 204 \r\nX: ");
	size_t o = strlen(t);
	memset(t + o, 'a', FC_HEAD_MAX + 50 - o);
	t[FC_HEAD_MAX + 50] = '\0';
	expect_bad(t, -EMSGSIZE, "head is longer");
	free(t);
}

/* ------------------------------------------------------------ requests */

static void test_build_requests(void **state)
{
	(void)state;
	cleanup_json json_t *body = json_pack("{s:s}", "state", "Paused");
	char *req = NULL;
	size_t len = 0;
	assert_int_equal(fc_request_build("PATCH", "/vm", body, &req, &len), 0);
	assert_string_equal(req, "PATCH /vm HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
	                         "Content-Type: application/json\r\nContent-Length: 18\r\n\r\n{\"state\":\"Paused\"}");
	assert_int_equal(len, strlen(req));
	free(req);
	assert_int_equal(fc_request_build("GET", "/", NULL, &req, &len), 0);
	assert_string_equal(req, "GET / HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\r\n");
	free(req);

	assert_int_equal(fc_request_build("POST", "/vm", body, &req, &len), -EINVAL);
	assert_int_equal(fc_request_build("PUT", "vm", body, &req, &len), -EINVAL);
	assert_int_equal(fc_request_build("PUT", "/drives/a b", body, &req, &len), -EINVAL);
	assert_int_equal(fc_request_build("PUT", "/vm?x=1", body, &req, &len), -EINVAL);
	assert_int_equal(fc_request_build("PUT", "/vm\r\nX: y", body, &req, &len), -EINVAL);
	assert_int_equal(fc_request_build("PUT", "/vm", NULL, &req, &len), -EINVAL);
	cleanup_json json_t *arr = json_array();
	assert_int_equal(fc_request_build("PUT", "/vm", arr, &req, &len), -EINVAL);
	cleanup_free char *big = xmalloc(FC_REQUEST_BODY_MAX + 1);
	memset(big, 'x', FC_REQUEST_BODY_MAX);
	big[FC_REQUEST_BODY_MAX] = '\0';
	cleanup_json json_t *large = json_pack("{s:s}", "boot_args", big);
	assert_int_equal(fc_request_build("PUT", "/boot-source", large, &req, &len), -EMSGSIZE);
}

/* ------------------------------------------------------------ exchange */

struct server {
	char dir[64];
	int listen_fd, dirfd;
	const char *answer; /* NULL: answer nothing and keep the connection open */
	size_t answer_len;
	bool close_after;
	char request[4096];
	pthread_t thread;
};

static void *server_main(void *arg)
{
	struct server *s = arg;
	int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t len = 0;
	/* The whole request: head, then Content-Length bytes. */
	for (;;) {
		ssize_t n = read(fd, s->request + len, sizeof(s->request) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		s->request[len] = '\0';
		char *end = strstr(s->request, "\r\n\r\n");
		if (!end)
			continue;
		char *cl = strstr(s->request, "Content-Length: ");
		size_t want = cl ? strtoul(cl + 16, NULL, 10) : 0;
		if (len >= (size_t)(end + 4 - s->request) + want)
			break;
	}
	if (s->answer)
		(void)!write(fd, s->answer, s->answer_len);
	if (s->close_after || !s->answer) {
		if (!s->close_after)
			usleep(400 * 1000); /* longer than the client waits */
		close(fd);
	} else {
		usleep(100 * 1000);
		close(fd);
	}
	return NULL;
}

static void server_start(struct server *s, const char *answer, bool close_after)
{
	snprintf(s->dir, sizeof(s->dir), "/tmp/airlock-test-fc-api.XXXXXX");
	assert_non_null(mkdtemp(s->dir));
	s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/fc.sock", s->dir);
	s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s->listen_fd, 4), 0);
	s->answer = answer;
	s->answer_len = answer ? strlen(answer) : 0;
	s->close_after = close_after;
	pthread_create(&s->thread, NULL, server_main, s);
}

static void server_stop(struct server *s)
{
	pthread_join(s->thread, NULL);
	close(s->listen_fd);
	close(s->dirfd);
	rm_rf(s->dir);
}

static void test_call_ok_and_request_bytes(void **state)
{
	(void)state;
	struct server s = {0};
	server_start(&s, "HTTP/1.1 204 \r\nServer: Firecracker API\r\nConnection: keep-alive\r\n\r\n", false);
	cleanup_json json_t *body = json_pack("{s:s}", "action_type", "InstanceStart");
	struct al_error err = {0};
	assert_int_equal(fc_call(s.dirfd, "fc.sock", "PUT", "/actions", body, 2000, NULL, &err), 0);
	server_stop(&s);
	assert_non_null(strstr(s.request, "PUT /actions HTTP/1.1\r\n"));
	assert_non_null(strstr(s.request, "\r\n\r\n{\"action_type\":\"InstanceStart\"}"));
}

static void test_call_fault_quoted(void **state)
{
	(void)state;
	struct server s = {0};
	server_start(&s,
	             "HTTP/1.1 400 \r\nContent-Type: application/json\r\nContent-Length: 42\r\n\r\n"
	             "{\"fault_message\":\"Invalid kernel path. X\"}",
	             false);
	cleanup_json json_t *body = json_pack("{s:s}", "kernel_image_path", "/nope");
	struct al_error err = {0};
	assert_int_equal(fc_call(s.dirfd, "fc.sock", "PUT", "/boot-source", body, 2000, NULL, &err), -EIO);
	server_stop(&s);
	assert_string_equal(err.message, "Firecracker API PUT /boot-source: 400: Invalid kernel path. X");
}

static void test_call_timeout(void **state)
{
	(void)state;
	struct server s = {0};
	server_start(&s, NULL, false);
	struct al_error err = {0};
	uint64_t t0 = now_ms_monotonic();
	assert_int_equal(fc_call(s.dirfd, "fc.sock", "GET", "/", NULL, 200, NULL, &err), -ETIMEDOUT);
	uint64_t took = now_ms_monotonic() - t0;
	server_stop(&s);
	assert_true(took >= 190 && took < 1500);
	assert_int_equal(err.code, AL_ERR_TIMEOUT);
	assert_non_null(strstr(err.message, "GET /: bad answer: no complete answer in time"));
}

static void test_call_closed_early_and_trailing(void **state)
{
	(void)state;
	struct server s = {0};
	server_start(&s, "HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{}", true);
	struct al_error err = {0};
	assert_int_equal(fc_call(s.dirfd, "fc.sock", "GET", "/", NULL, 2000, NULL, &err), -ECONNRESET);
	server_stop(&s);
	assert_non_null(strstr(err.message, "closed the connection in the middle of its answer"));

	struct server t = {0};
	server_start(&t, "HTTP/1.1 204 \r\n\r\nHTTP/1.1 204 \r\n\r\n", true);
	assert_int_equal(fc_call(t.dirfd, "fc.sock", "GET", "/", NULL, 2000, NULL, &err), -EPROTO);
	server_stop(&t);
	assert_non_null(strstr(err.message, "after the answer"));
}

static void test_call_no_socket(void **state)
{
	(void)state;
	char dir[] = "/tmp/airlock-test-fc-api.XXXXXX";
	assert_non_null(mkdtemp(dir));
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct al_error err = {0};
	assert_int_equal(fc_call(dirfd, "fc.sock", "GET", "/", NULL, 200, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.message, "cannot connect to fc.sock"));
	close(dirfd);
	rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_204_like_firecracker),
	    cmocka_unit_test(test_parse_200_body),
	    cmocka_unit_test(test_parse_error_answer),
	    cmocka_unit_test(test_parse_trailing_bytes_reported),
	    cmocka_unit_test(test_parse_bad_status_lines),
	    cmocka_unit_test(test_parse_bad_line_endings),
	    cmocka_unit_test(test_parse_bad_headers),
	    cmocka_unit_test(test_parse_body_rules),
	    cmocka_unit_test(test_parse_head_too_long),
	    cmocka_unit_test(test_build_requests),
	    cmocka_unit_test(test_call_ok_and_request_bytes),
	    cmocka_unit_test(test_call_fault_quoted),
	    cmocka_unit_test(test_call_timeout),
	    cmocka_unit_test(test_call_closed_early_and_trailing),
	    cmocka_unit_test(test_call_no_socket),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
