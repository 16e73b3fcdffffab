/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the host <-> guest frame codec (src/common/frame.c). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "frame.h"
#include "util.h"

/* Appends one frame (header + payload filled with a pattern derived from
 * seed) to buf at *off. */
static void put_frame(uint8_t *buf, size_t *off, uint8_t type, uint32_t stream, uint32_t len, unsigned seed)
{
	struct airlock_frame_header h = {
	    .version = AIRLOCK_PROTO_VERSION,
	    .type = type,
	    .stream = stream,
	    .length = len,
	};
	frame_header_encode(&h, buf + *off);
	*off += AIRLOCK_FRAME_HEADER_SIZE;
	for (uint32_t i = 0; i < len; i++)
		buf[*off + i] = (uint8_t)(seed * 31u + i * 7u + (i >> 8));
	*off += len;
}

static void check_payload(const uint8_t *p, uint32_t len, unsigned seed)
{
	for (uint32_t i = 0; i < len; i++) {
		if (p[i] != (uint8_t)(seed * 31u + i * 7u + (i >> 8)))
			fail_msg("payload byte %u of frame %u differs", i, seed);
	}
}

static void raw_header(uint8_t out[AIRLOCK_FRAME_HEADER_SIZE], uint8_t version, uint8_t type, uint16_t flags,
                       uint32_t stream, uint32_t length)
{
	struct airlock_frame_header h = {version, type, flags, stream, length};
	frame_header_encode(&h, out);
}

/* ------------------------------------------------------------ header */

static void test_header_encode_is_big_endian(void **state)
{
	(void)state;
	uint8_t out[AIRLOCK_FRAME_HEADER_SIZE];
	struct airlock_frame_header h = {
	    .version = 1, .type = 4, .flags = 0, .stream = 0x01020304u, .length = 0x0000a0b1u};
	frame_header_encode(&h, out);
	const uint8_t want[AIRLOCK_FRAME_HEADER_SIZE] = {1, 4, 0, 0, 1, 2, 3, 4, 0, 0, 0xa0, 0xb1};
	assert_memory_equal(out, want, sizeof(want));
}

static void test_header_roundtrip(void **state)
{
	(void)state;
	const uint32_t streams[] = {0, 1, 0x7fffffffu, 0xffffffffu};
	const uint32_t lengths[] = {0, 1, 4096, AIRLOCK_FRAME_MAX_PAYLOAD - 1, AIRLOCK_FRAME_MAX_PAYLOAD};
	for (unsigned type = 1; type <= AIRLOCK_FRAME_TYPE_MAX; type++) {
		for (size_t s = 0; s < ARRAY_SIZE(streams); s++) {
			for (size_t l = 0; l < ARRAY_SIZE(lengths); l++) {
				struct airlock_frame_header in = {
				    .version = AIRLOCK_PROTO_VERSION,
				    .type = (uint8_t)type,
				    .stream = streams[s],
				    .length = lengths[l],
				};
				uint8_t buf[AIRLOCK_FRAME_HEADER_SIZE];
				frame_header_encode(&in, buf);
				struct airlock_frame_header out;
				memset(&out, 0xee, sizeof(out));
				assert_int_equal(frame_header_decode(buf, &out), 0);
				assert_int_equal(out.version, in.version);
				assert_int_equal(out.type, in.type);
				assert_int_equal(out.flags, 0);
				assert_int_equal(out.stream, in.stream);
				assert_int_equal(out.length, in.length);
			}
		}
	}
}

/* A rejected header must leave the output untouched (ret_* only on success). */
static void expect_decode_error(uint8_t version, uint8_t type, uint16_t flags, uint32_t length, int want)
{
	uint8_t buf[AIRLOCK_FRAME_HEADER_SIZE];
	raw_header(buf, version, type, flags, 7, length);
	struct airlock_frame_header out, untouched;
	memset(&out, 0x5a, sizeof(out));
	memcpy(&untouched, &out, sizeof(out));
	assert_int_equal(frame_header_decode(buf, &out), want);
	assert_memory_equal(&out, &untouched, sizeof(out));
}

static void test_header_rejects_bad_version(void **state)
{
	(void)state;
	expect_decode_error(0, 1, 0, 0, -EPROTONOSUPPORT);
	expect_decode_error(2, 1, 0, 0, -EPROTONOSUPPORT);
	expect_decode_error(0xff, 1, 0, 0, -EPROTONOSUPPORT);
}

static void test_header_rejects_bad_type(void **state)
{
	(void)state;
	expect_decode_error(1, 0, 0, 0, -EBADMSG);
	expect_decode_error(1, AIRLOCK_FRAME_TYPE_MAX + 1, 0, 0, -EBADMSG);
	expect_decode_error(1, 0xff, 0, 0, -EBADMSG);
}

static void test_header_rejects_flags(void **state)
{
	(void)state;
	expect_decode_error(1, 1, 1, 0, -EBADMSG);
	expect_decode_error(1, 1, 0x8000, 0, -EBADMSG);
	expect_decode_error(1, 1, 0xffff, 0, -EBADMSG);
}

static void test_header_rejects_oversize(void **state)
{
	(void)state;
	expect_decode_error(1, 4, 0, AIRLOCK_FRAME_MAX_PAYLOAD + 1, -EMSGSIZE);
	expect_decode_error(1, 4, 0, 0x80000000u, -EMSGSIZE);
	expect_decode_error(1, 4, 0, 0xffffffffu, -EMSGSIZE);
}

/* ------------------------------------------------------------ reader */

static struct frame_reader *reader_new(void)
{
	struct frame_reader *r = xmalloc(sizeof(*r));
	frame_reader_init(r);
	return r;
}

/* Feeds n bytes through space/commit in chunks of `chunk` bytes, taking every
 * complete frame out after each commit and checking it against the expected
 * sequence (types/streams/lengths/seeds). Returns the number of frames. */
struct expect {
	uint8_t type;
	uint32_t stream;
	uint32_t len;
};

static size_t feed_chunked(struct frame_reader *r, const uint8_t *data, size_t n, size_t chunk,
                           const struct expect *want, size_t nwant)
{
	size_t got = 0, off = 0;
	while (off < n) {
		size_t space;
		uint8_t *p = frame_reader_space(r, &space);
		assert_true(space > 0);
		size_t c = MIN(MIN(chunk, space), n - off);
		memcpy(p, data + off, c);
		frame_reader_commit(r, c);
		off += c;
		for (;;) {
			struct airlock_frame_header h;
			const uint8_t *payload;
			int rc = frame_reader_next(r, &h, &payload);
			assert_true(rc >= 0);
			if (rc == 0)
				break;
			assert_true(got < nwant);
			assert_int_equal(h.type, want[got].type);
			assert_int_equal(h.stream, want[got].stream);
			assert_int_equal(h.length, want[got].len);
			assert_true(payload >= r->buf && payload + h.length <= r->buf + sizeof(r->buf));
			check_payload(payload, h.length, (unsigned)got);
			got++;
		}
	}
	return got;
}

static void test_reader_byte_by_byte(void **state)
{
	(void)state;
	const struct expect want[] = {
	    {AIRLOCK_FRAME_HELLO, 0, 40},   {AIRLOCK_FRAME_STDOUT, 1, 0}, {AIRLOCK_FRAME_STDOUT, 1, 1},
	    {AIRLOCK_FRAME_STDERR, 2, 300}, {AIRLOCK_FRAME_EXIT, 1, 13},
	};
	size_t cap = 4096, n = 0;
	cleanup_free uint8_t *buf = xmalloc(cap);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		put_frame(buf, &n, want[i].type, want[i].stream, want[i].len, (unsigned)i);
	struct frame_reader *r = reader_new();
	/* Nothing is complete until the last byte of each frame arrives. */
	assert_int_equal(feed_chunked(r, buf, n, 1, want, ARRAY_SIZE(want)), ARRAY_SIZE(want));
	assert_int_equal(r->len, 0);
	free(r);
}

static void test_reader_partial_header_waits(void **state)
{
	(void)state;
	uint8_t buf[AIRLOCK_FRAME_HEADER_SIZE];
	raw_header(buf, 1, AIRLOCK_FRAME_STDOUT, 0, 1, 5);
	struct frame_reader *r = reader_new();
	size_t frames = 99;
	assert_int_equal(frame_reader_feed(r, buf, AIRLOCK_FRAME_HEADER_SIZE - 1, &frames), 0);
	assert_int_equal(frames, 0);
	/* Header complete, payload not yet: still waiting. */
	assert_int_equal(frame_reader_feed(r, buf + AIRLOCK_FRAME_HEADER_SIZE - 1, 1, &frames), 0);
	assert_int_equal(frames, 0);
	const uint8_t payload[5] = "hello";
	assert_int_equal(frame_reader_feed(r, payload, 4, &frames), 0);
	assert_int_equal(frames, 0);
	assert_int_equal(frame_reader_feed(r, payload + 4, 1, &frames), 0);
	assert_int_equal(frames, 1);
	free(r);
}

static void test_reader_several_frames_in_one_feed(void **state)
{
	(void)state;
	size_t n = 0;
	cleanup_free uint8_t *buf = xmalloc(64 * 1024);
	for (unsigned i = 0; i < 100; i++)
		put_frame(buf, &n, AIRLOCK_FRAME_STDOUT, i + 1, i * 3, i);
	struct frame_reader *r = reader_new();
	size_t frames = 0;
	assert_int_equal(frame_reader_feed(r, buf, n, &frames), 0);
	assert_int_equal(frames, 100);
	assert_int_equal(r->len, 0);

	/* The same through next(), in one commit. */
	frame_reader_init(r);
	struct expect want[100];
	for (unsigned i = 0; i < 100; i++)
		want[i] = (struct expect){AIRLOCK_FRAME_STDOUT, i + 1, i * 3};
	assert_int_equal(feed_chunked(r, buf, n, n, want, 100), 100);
	free(r);
}

static void test_reader_exactly_max_payload(void **state)
{
	(void)state;
	size_t n = 0;
	cleanup_free uint8_t *buf = xmalloc(3 * AIRLOCK_FRAME_MAX_SIZE);
	put_frame(buf, &n, AIRLOCK_FRAME_STDOUT, 9, AIRLOCK_FRAME_MAX_PAYLOAD, 0);
	put_frame(buf, &n, AIRLOCK_FRAME_STDERR, 9, AIRLOCK_FRAME_MAX_PAYLOAD, 1);
	put_frame(buf, &n, AIRLOCK_FRAME_EXIT, 9, 2, 2);
	const struct expect want[] = {
	    {AIRLOCK_FRAME_STDOUT, 9, AIRLOCK_FRAME_MAX_PAYLOAD},
	    {AIRLOCK_FRAME_STDERR, 9, AIRLOCK_FRAME_MAX_PAYLOAD},
	    {AIRLOCK_FRAME_EXIT, 9, 2},
	};
	struct frame_reader *r = reader_new();
	/* All at once (as much as the reader offers each time). */
	assert_int_equal(feed_chunked(r, buf, n, n, want, 3), 3);
	/* In odd chunks that straddle the frame boundaries. */
	frame_reader_init(r);
	assert_int_equal(feed_chunked(r, buf, n, 4093, want, 3), 3);
	/* And through the convenience wrapper. */
	frame_reader_init(r);
	size_t frames = 0;
	assert_int_equal(frame_reader_feed(r, buf, n, &frames), 0);
	assert_int_equal(frames, 3);
	free(r);
}

/* The header of an oversize frame is rejected as soon as its 12 bytes are
 * in, before any of the payload it announces is buffered. */
static void test_reader_oversize_rejected_before_buffering(void **state)
{
	(void)state;
	uint8_t hdr[AIRLOCK_FRAME_HEADER_SIZE];
	raw_header(hdr, 1, AIRLOCK_FRAME_STDOUT, 0, 1, AIRLOCK_FRAME_MAX_PAYLOAD + 1);
	struct frame_reader *r = reader_new();
	size_t space;
	uint8_t *p = frame_reader_space(r, &space);
	memcpy(p, hdr, sizeof(hdr));
	frame_reader_commit(r, sizeof(hdr));
	struct airlock_frame_header h;
	const uint8_t *payload;
	assert_int_equal(frame_reader_next(r, &h, &payload), -EMSGSIZE);

	frame_reader_init(r);
	raw_header(hdr, 1, AIRLOCK_FRAME_STDOUT, 0, 1, 0xffffffffu);
	assert_int_equal(frame_reader_feed(r, hdr, sizeof(hdr), NULL), -EMSGSIZE);
	free(r);
}

static void test_reader_bad_header_after_good_frames(void **state)
{
	(void)state;
	size_t n = 0;
	uint8_t buf[256];
	put_frame(buf, &n, AIRLOCK_FRAME_HELLO, 0, 10, 0);
	put_frame(buf, &n, AIRLOCK_FRAME_STDOUT, 1, 10, 1);
	raw_header(buf + n, 1, 0, 0, 1, 0); /* type 0 */
	n += AIRLOCK_FRAME_HEADER_SIZE;

	struct frame_reader *r = reader_new();
	size_t space;
	uint8_t *p = frame_reader_space(r, &space);
	memcpy(p, buf, n);
	frame_reader_commit(r, n);
	struct airlock_frame_header h;
	const uint8_t *payload;
	assert_int_equal(frame_reader_next(r, &h, &payload), 1);
	assert_int_equal(frame_reader_next(r, &h, &payload), 1);
	assert_int_equal(frame_reader_next(r, &h, &payload), -EBADMSG);
	/* The error is sticky: the stream cannot be resynchronised. */
	assert_int_equal(frame_reader_next(r, &h, &payload), -EBADMSG);

	const uint8_t bad_version[AIRLOCK_FRAME_HEADER_SIZE] = {2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
	frame_reader_init(r);
	assert_int_equal(frame_reader_feed(r, bad_version, sizeof(bad_version), NULL), -EPROTONOSUPPORT);
	const uint8_t flags[AIRLOCK_FRAME_HEADER_SIZE] = {1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
	frame_reader_init(r);
	assert_int_equal(frame_reader_feed(r, flags, sizeof(flags), NULL), -EBADMSG);
	free(r);
}

/* Many frames of varied sizes in chunks that never line up with frame
 * boundaries: the reader must compact its buffer again and again without
 * losing or reordering a byte, and always offer space while no complete
 * frame is buffered. */
static void test_reader_compaction_across_many_frames(void **state)
{
	(void)state;
	enum { NFRAMES = 600 };
	static struct expect want[NFRAMES];
	size_t total = 0;
	uint32_t rng = 12345;
	for (unsigned i = 0; i < NFRAMES; i++) {
		rng = rng * 1103515245u + 12345u;
		uint32_t len;
		switch (i % 5) {
		case 0:
			len = AIRLOCK_FRAME_MAX_PAYLOAD - (rng >> 20) % 8;
			break;
		case 1:
			len = 0;
			break;
		default:
			len = (rng >> 8) % 20000;
		}
		want[i] = (struct expect){(uint8_t)(1 + i % AIRLOCK_FRAME_TYPE_MAX), i, len};
		total += AIRLOCK_FRAME_HEADER_SIZE + len;
	}
	cleanup_free uint8_t *buf = xmalloc(total);
	size_t n = 0;
	for (unsigned i = 0; i < NFRAMES; i++)
		put_frame(buf, &n, want[i].type, want[i].stream, want[i].len, i);
	assert_int_equal(n, total);

	struct frame_reader *r = reader_new();
	const size_t chunks[] = {1, 7, 13, 4099, 65537, 100003, sizeof(r->buf)};
	for (size_t c = 0; c < ARRAY_SIZE(chunks); c++) {
		frame_reader_init(r);
		/* Byte by byte over the whole stream is slow under ASan: do a prefix. */
		size_t len = chunks[c] == 1 ? 300000 : n;
		size_t frames = 0, off = 0;
		for (size_t i = 0, acc = 0; i < NFRAMES && acc + AIRLOCK_FRAME_HEADER_SIZE + want[i].len <= len; i++) {
			acc += AIRLOCK_FRAME_HEADER_SIZE + want[i].len;
			frames = i + 1;
			off = acc;
		}
		assert_int_equal(feed_chunked(r, buf, off, chunks[c], want, NFRAMES), frames);
		assert_int_equal(r->len, 0);
	}
	free(r);
}

static void test_reader_space_never_zero_without_complete_frame(void **state)
{
	(void)state;
	struct frame_reader *r = reader_new();
	/* Fill with a partial max-size frame at an odd offset, after a small one. */
	size_t n = 0;
	cleanup_free uint8_t *buf = xmalloc(2 * AIRLOCK_FRAME_MAX_SIZE);
	put_frame(buf, &n, AIRLOCK_FRAME_STDOUT, 1, 100, 0);
	put_frame(buf, &n, AIRLOCK_FRAME_STDOUT, 1, AIRLOCK_FRAME_MAX_PAYLOAD, 1);
	size_t off = 0;
	while (off < n - 1) {
		size_t space;
		uint8_t *p = frame_reader_space(r, &space);
		assert_true(space > 0);
		size_t c = MIN(space, n - 1 - off);
		memcpy(p, buf + off, c);
		frame_reader_commit(r, c);
		off += c;
		struct airlock_frame_header h;
		const uint8_t *payload;
		while (frame_reader_next(r, &h, &payload) == 1)
			;
	}
	size_t space;
	frame_reader_space(r, &space);
	assert_true(space > 0);
	free(r);
}

/* commit() never accounts for more than the space it offered. */
static void test_reader_commit_clamped(void **state)
{
	(void)state;
	struct frame_reader *r = reader_new();
	size_t space;
	frame_reader_space(r, &space);
	frame_reader_commit(r, space + 1000);
	assert_true(r->start + r->len <= sizeof(r->buf));
	free(r);
}

/* ------------------------------------------------------------ frame_write */

static void test_frame_write_roundtrip(void **state)
{
	(void)state;
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	assert_true(fcntl(fds[1], F_SETPIPE_SZ, 1 << 20) >= (int)AIRLOCK_FRAME_MAX_SIZE);
	cleanup_free uint8_t *payload = xmalloc(AIRLOCK_FRAME_MAX_PAYLOAD + 1);
	memset(payload, 'x', AIRLOCK_FRAME_MAX_PAYLOAD + 1);

	assert_int_equal(frame_write(fds[1], AIRLOCK_FRAME_STDIN, 42, "abc", 3, 1000), 0);
	assert_int_equal(frame_write(fds[1], AIRLOCK_FRAME_STDIN, 42, NULL, 0, 1000), 0);
	assert_int_equal(frame_write(fds[1], AIRLOCK_FRAME_STDOUT, 1, payload, AIRLOCK_FRAME_MAX_PAYLOAD, 1000), 0);
	assert_int_equal(frame_write(fds[1], AIRLOCK_FRAME_STDOUT, 1, payload, AIRLOCK_FRAME_MAX_PAYLOAD + 1, 1000),
	                 -EMSGSIZE);
	close(fds[1]);

	size_t cap = 2 * AIRLOCK_FRAME_MAX_SIZE;
	cleanup_free uint8_t *buf = xmalloc(cap);
	ssize_t n = read_full(fds[0], buf, cap);
	close(fds[0]);
	assert_int_equal(n, 3 * AIRLOCK_FRAME_HEADER_SIZE + 3 + AIRLOCK_FRAME_MAX_PAYLOAD);

	struct frame_reader *r = reader_new();
	size_t space;
	uint8_t *p = frame_reader_space(r, &space);
	memcpy(p, buf, (size_t)n);
	frame_reader_commit(r, (size_t)n);
	struct airlock_frame_header h;
	const uint8_t *pl;
	assert_int_equal(frame_reader_next(r, &h, &pl), 1);
	assert_int_equal(h.type, AIRLOCK_FRAME_STDIN);
	assert_int_equal(h.stream, 42);
	assert_int_equal(h.length, 3);
	assert_memory_equal(pl, "abc", 3);
	assert_int_equal(frame_reader_next(r, &h, &pl), 1);
	assert_int_equal(h.length, 0);
	assert_int_equal(frame_reader_next(r, &h, &pl), 1);
	assert_int_equal(h.type, AIRLOCK_FRAME_STDOUT);
	assert_int_equal(h.length, AIRLOCK_FRAME_MAX_PAYLOAD);
	assert_memory_equal(pl, payload, AIRLOCK_FRAME_MAX_PAYLOAD);
	assert_int_equal(frame_reader_next(r, &h, &pl), 0);
	free(r);
}

static void test_frame_write_times_out_on_full_pipe(void **state)
{
	(void)state;
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
	int size = fcntl(fds[1], F_SETPIPE_SZ, 4096);
	assert_true(size > 0);
	cleanup_free uint8_t *payload = xcalloc(1, AIRLOCK_FRAME_MAX_PAYLOAD);
	assert_int_equal(frame_write(fds[1], AIRLOCK_FRAME_STDOUT, 1, payload, AIRLOCK_FRAME_MAX_PAYLOAD, 50),
	                 -ETIMEDOUT);
	close(fds[0]);
	close(fds[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_header_encode_is_big_endian),
	    cmocka_unit_test(test_header_roundtrip),
	    cmocka_unit_test(test_header_rejects_bad_version),
	    cmocka_unit_test(test_header_rejects_bad_type),
	    cmocka_unit_test(test_header_rejects_flags),
	    cmocka_unit_test(test_header_rejects_oversize),
	    cmocka_unit_test(test_reader_byte_by_byte),
	    cmocka_unit_test(test_reader_partial_header_waits),
	    cmocka_unit_test(test_reader_several_frames_in_one_feed),
	    cmocka_unit_test(test_reader_exactly_max_payload),
	    cmocka_unit_test(test_reader_oversize_rejected_before_buffering),
	    cmocka_unit_test(test_reader_bad_header_after_good_frames),
	    cmocka_unit_test(test_reader_compaction_across_many_frames),
	    cmocka_unit_test(test_reader_space_never_zero_without_complete_frame),
	    cmocka_unit_test(test_reader_commit_clamped),
	    cmocka_unit_test(test_frame_write_roundtrip),
	    cmocka_unit_test(test_frame_write_times_out_on_full_pipe),
	};
	return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
