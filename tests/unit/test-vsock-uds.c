/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the host end of Firecracker's hybrid vsock
 * (src/daemon/vmm/firecracker/vsock-uds.c): the CONNECT/OK handshake and the framed channel
 * that follows it, over socket pairs (this host has no vhost-vsock). */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cmocka.h>

#include "frame.h"
#include "util.h"
#include "vsock-uds.h"

static void test_parse_ack(void **state)
{
	(void)state;
	uint32_t p = 7;
	assert_int_equal(vsock_uds_parse_ack("OK 1073741824", 13, &p), 0);
	assert_int_equal(p, 1073741824u);
	assert_int_equal(vsock_uds_parse_ack("OK 0", 4, &p), 0);
	assert_int_equal(p, 0);
	assert_int_equal(vsock_uds_parse_ack("OK 4294967295", 13, &p), 0);
	assert_int_equal(p, 4294967295u);
	static const char *const bad[] = {
	    "OK 4294967296", "OK 01",           "ok 1",  "OK",    "OK ",    "OK -1", "OK 1 ",
	    "NO 1",          "OK 123456789012", " OK 1", "OK  1", "OK 1\r", "OK +1"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		if (vsock_uds_parse_ack(bad[i], strlen(bad[i]), &p) != -EPROTO)
			fail_msg("accepted \"%s\"", bad[i]);
}

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

/* What the host wrote: exactly the CONNECT line. */
static void expect_connect_line(int fd, uint32_t port)
{
	char buf[64] = "", want[64];
	snprintf(want, sizeof(want), "CONNECT %u\n", port);
	assert_int_equal(read(fd, buf, sizeof(buf) - 1), (ssize_t)strlen(want));
	assert_string_equal(buf, want);
}

static void test_handshake_keeps_guest_bytes(void **state)
{
	(void)state;
	int sv[2];
	pair(sv);
	/* Firecracker's answer and the agent's HELLO in one segment. */
	uint8_t seg[256];
	size_t off = 0;
	memcpy(seg, "OK 1073741824\n", 14);
	off = 14;
	const char *hello = "{\"proto\":1,\"agent\":\"0.1.0\",\"generation\":0}";
	struct airlock_frame_header h = {
	    .version = AIRLOCK_PROTO_VERSION, .type = AIRLOCK_FRAME_HELLO, .length = (uint32_t)strlen(hello)};
	frame_header_encode(&h, seg + off);
	off += AIRLOCK_FRAME_HEADER_SIZE;
	memcpy(seg + off, hello, strlen(hello));
	off += strlen(hello);
	assert_int_equal(write(sv[1], seg, off), (ssize_t)off);

	char why[160] = "";
	assert_int_equal(vsock_uds_handshake(sv[0], AIRLOCK_VSOCK_PORT, now_ms_monotonic() + 2000, why, sizeof(why)),
	                 0);
	expect_connect_line(sv[1], AIRLOCK_VSOCK_PORT);

	/* The channel's framing works from the first byte after the answer. */
	static struct frame_reader rd;
	frame_reader_init(&rd);
	size_t space;
	uint8_t *buf = frame_reader_space(&rd, &space);
	ssize_t n = read(sv[0], buf, space);
	assert_int_equal(n, (ssize_t)(AIRLOCK_FRAME_HEADER_SIZE + strlen(hello)));
	frame_reader_commit(&rd, (size_t)n);
	struct airlock_frame_header got;
	const uint8_t *payload;
	assert_int_equal(frame_reader_next(&rd, &got, &payload), 1);
	assert_int_equal(got.type, AIRLOCK_FRAME_HELLO);
	assert_memory_equal(payload, hello, strlen(hello));

	/* And the other way: frames the host writes arrive whole. */
	assert_int_equal(frame_write(sv[0], AIRLOCK_FRAME_EXEC, 7, "{\"argv\":[\"true\"]}", 17, 1000), 0);
	frame_reader_init(&rd);
	buf = frame_reader_space(&rd, &space);
	n = read(sv[1], buf, space);
	frame_reader_commit(&rd, (size_t)n);
	assert_int_equal(frame_reader_next(&rd, &got, &payload), 1);
	assert_int_equal(got.type, AIRLOCK_FRAME_EXEC);
	assert_int_equal(got.stream, 7);
	close(sv[0]);
	close(sv[1]);
}

static void test_handshake_refusals(void **state)
{
	(void)state;
	char why[160];
	int sv[2];

	/* Nothing listens on the guest port: Firecracker closes, after or
	 * before the CONNECT line. */
	pair(sv);
	assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
	assert_int_equal(vsock_uds_handshake(sv[0], 1024, now_ms_monotonic() + 1000, why, sizeof(why)), -ECONNREFUSED);
	assert_non_null(strstr(why, "nothing listens on guest port 1024"));
	close(sv[0]);
	close(sv[1]);
	pair(sv);
	close(sv[1]);
	assert_int_equal(vsock_uds_handshake(sv[0], 1024, now_ms_monotonic() + 1000, why, sizeof(why)), -ECONNREFUSED);
	close(sv[0]);

	/* Something else answers. */
	pair(sv);
	assert_int_equal(write(sv[1], "HTTP/1.1 400 \r\n", 15), 15);
	assert_int_equal(vsock_uds_handshake(sv[0], 1024, now_ms_monotonic() + 1000, why, sizeof(why)), -EPROTO);
	assert_non_null(strstr(why, "unexpected answer to CONNECT 1024: \"HTTP/1.1 400 ?\""));
	close(sv[0]);
	close(sv[1]);

	/* An endless line. */
	pair(sv);
	char junk[100];
	memset(junk, 'O', sizeof(junk));
	assert_int_equal(write(sv[1], junk, sizeof(junk)), (ssize_t)sizeof(junk));
	assert_int_equal(vsock_uds_handshake(sv[0], 1024, now_ms_monotonic() + 1000, why, sizeof(why)), -EPROTO);
	assert_non_null(strstr(why, "longer than 32 bytes"));
	close(sv[0]);
	close(sv[1]);

	/* No answer at all: the deadline holds. */
	pair(sv);
	uint64_t t0 = now_ms_monotonic();
	assert_int_equal(vsock_uds_handshake(sv[0], 1024, t0 + 150, why, sizeof(why)), -ETIMEDOUT);
	assert_true(now_ms_monotonic() - t0 < 1000);
	close(sv[0]);
	close(sv[1]);
}

struct muxer {
	int listen_fd;
	char got[64];
};

static void *muxer_main(void *arg)
{
	struct muxer *m = arg;
	int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, m->got, sizeof(m->got) - 1);
	if (n > 0)
		m->got[n] = '\0';
	(void)!write(fd, "OK 1073741825\n", 14);
	usleep(50 * 1000);
	close(fd);
	return NULL;
}

static void test_connect_through_socket(void **state)
{
	(void)state;
	char dir[] = "/tmp/airlock-test-vsock.XXXXXX";
	assert_non_null(mkdtemp(dir));
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct al_error err = {0};
	int fd = -1;
	assert_int_equal(vsock_uds_connect(dirfd, "v.sock", 1024, 500, &fd, &err), -ENOENT);
	assert_non_null(strstr(err.message, "cannot connect to the vsock socket v.sock"));

	struct muxer m = {0};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/v.sock", dir);
	m.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(m.listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(m.listen_fd, 1), 0);
	pthread_t t;
	pthread_create(&t, NULL, muxer_main, &m);
	assert_int_equal(vsock_uds_connect(dirfd, "v.sock", 1024, 2000, &fd, &err), 0);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	pthread_join(t, NULL);
	assert_string_equal(m.got, "CONNECT 1024\n");
	close(fd);
	close(m.listen_fd);
	close(dirfd);
	rm_rf(dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN); /* as in airlockd: a closed peer is an error, not a signal */
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_ack),
	    cmocka_unit_test(test_handshake_keeps_guest_bytes),
	    cmocka_unit_test(test_handshake_refusals),
	    cmocka_unit_test(test_connect_through_socket),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
