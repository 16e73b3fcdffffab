/* SPDX-License-Identifier: Apache-2.0 */
/* The airlockd <-> airlock-egress control channel: messages, fds, limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctlmsg.h"
#include "json-cleanup.h"
#include "util.h"

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	int size = 4 * 1024 * 1024;
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size));
}

static void test_message_and_fds(void **state)
{
	(void)state;
	int sv[2], p[2];
	pair(sv);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	cleanup_json json_t *m = json_pack("{s:s, s:i}", "op", "add", "seq", 7);
	int fds[3] = {p[0], p[1], p[0]};
	assert_int_equal(ctlmsg_send(sv[0], m, fds, 3), 0);
	json_t *got = NULL;
	int rfds[CTLMSG_FDS_MAX];
	size_t n = 0;
	assert_int_equal(ctlmsg_recv(sv[1], &got, rfds, CTLMSG_FDS_MAX, &n), 0);
	assert_true(json_equal(got, m));
	assert_int_equal(n, 3);
	/* The received fds are new descriptors of the same pipe. */
	assert_int_equal(write(rfds[1], "x", 1), 1);
	char c;
	assert_int_equal(read(rfds[0], &c, 1), 1);
	assert_int_equal(c, 'x');
	assert_true(fcntl(rfds[0], F_GETFD) & FD_CLOEXEC);
	for (size_t i = 0; i < n; i++)
		close(rfds[i]);
	json_decref(got);
	close(p[0]), close(p[1]), close(sv[0]), close(sv[1]);
}

static void test_refusals(void **state)
{
	(void)state;
	int sv[2];
	pair(sv);
	json_t *got = NULL;
	size_t n = 0;
	int rfds[CTLMSG_FDS_MAX];
	/* Not an object, not JSON. */
	assert_int_equal(send(sv[0], "[1,2]", 5, 0), 5);
	assert_int_equal(ctlmsg_recv(sv[1], &got, rfds, CTLMSG_FDS_MAX, &n), -EBADMSG);
	assert_int_equal(send(sv[0], "{\"a\":", 5, 0), 5);
	assert_int_equal(ctlmsg_recv(sv[1], &got, rfds, CTLMSG_FDS_MAX, &n), -EBADMSG);
	/* Duplicate keys are refused (two parsers could disagree). */
	assert_int_equal(send(sv[0], "{\"a\":1,\"a\":2}", 13, 0), 13);
	assert_int_equal(ctlmsg_recv(sv[1], &got, rfds, CTLMSG_FDS_MAX, &n), -EBADMSG);
	/* fds where none are expected: closed, refused. */
	cleanup_json json_t *m = json_pack("{s:s}", "op", "ping");
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_int_equal(ctlmsg_send(sv[0], m, &fd, 1), 0);
	assert_int_equal(ctlmsg_recv(sv[1], &got, NULL, 0, &n), -EPROTO);
	close(fd);
	/* Over the limit: the sender refuses. */
	char *big = xmalloc(CTLMSG_MAX + 10);
	memset(big, 'a', CTLMSG_MAX + 9);
	big[CTLMSG_MAX + 9] = '\0';
	cleanup_json json_t *huge = json_pack("{s:s}", "x", big);
	free(big);
	assert_int_equal(ctlmsg_send(sv[0], huge, NULL, 0), -EMSGSIZE);
	/* End of stream. */
	close(sv[0]);
	assert_int_equal(ctlmsg_recv(sv[1], &got, rfds, CTLMSG_FDS_MAX, &n), -EPIPE);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_message_and_fds),
	    cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
