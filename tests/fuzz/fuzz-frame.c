/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the host <-> guest frame codec (src/common/frame.c):
 * the bytes a hostile guest can put on the channel.
 *
 * The input is the byte stream; its first byte also seeds the chunking, so
 * the same stream is delivered in varied read sizes. Checks, beyond the
 * sanitizers:
 *  - the reader agrees with a straightforward reference parser (same frames,
 *    same error) whatever the chunking;
 *  - every frame it returns has a valid header, a length within the limit and
 *    a payload inside its buffer that equals the bytes of the stream;
 *  - it always offers space while no complete frame is buffered;
 *  - frame_reader_feed() agrees too, and decode(encode(h)) == h.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-frame: check failed: %s (line %d)\n", #cond, __LINE__);                  \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

/* The reference: walk the stream header by header. Returns the number of
 * complete frames before the end or the first bad header (*ret_err). */
static size_t reference_parse(const uint8_t *data, size_t size, int *ret_err)
{
	size_t pos = 0, frames = 0;
	*ret_err = 0;
	while (size - pos >= AIRLOCK_FRAME_HEADER_SIZE) {
		struct airlock_frame_header h;
		int rc = frame_header_decode(data + pos, &h);
		if (rc < 0) {
			*ret_err = rc;
			break;
		}
		if (size - pos - AIRLOCK_FRAME_HEADER_SIZE < h.length)
			break;
		pos += AIRLOCK_FRAME_HEADER_SIZE + h.length;
		frames++;
	}
	return frames;
}

static struct frame_reader reader;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int want_err;
	size_t want_frames = reference_parse(data, size, &want_err);

	/* Header roundtrip on the first 12 bytes, when they decode. */
	if (size >= AIRLOCK_FRAME_HEADER_SIZE) {
		struct airlock_frame_header h;
		if (frame_header_decode(data, &h) == 0) {
			uint8_t again[AIRLOCK_FRAME_HEADER_SIZE];
			frame_header_encode(&h, again);
			CHECK(memcmp(again, data, AIRLOCK_FRAME_HEADER_SIZE) == 0);
		}
	}

	uint32_t rng = size ? data[0] * 2654435761u + 1 : 1;
	frame_reader_init(&reader);
	size_t pos = 0, frames = 0, consumed = 0;
	int err = 0;
	while (pos < size && err == 0) {
		size_t space;
		uint8_t *p = frame_reader_space(&reader, &space);
		CHECK(space > 0);
		CHECK(p >= reader.buf && p + space <= reader.buf + sizeof(reader.buf));
		rng = rng * 1103515245u + 12345u;
		size_t chunk;
		switch ((rng >> 16) % 4) {
		case 0:
			chunk = 1 + (rng >> 8) % 16;
			break;
		case 1:
			chunk = 1 + (rng >> 4) % 4096;
			break;
		default:
			chunk = space;
		}
		chunk = MIN(MIN(chunk, space), size - pos);
		memcpy(p, data + pos, chunk);
		frame_reader_commit(&reader, chunk);
		pos += chunk;
		for (;;) {
			struct airlock_frame_header h;
			const uint8_t *payload;
			int rc = frame_reader_next(&reader, &h, &payload);
			if (rc < 0) {
				err = rc;
				break;
			}
			if (rc == 0)
				break;
			CHECK(rc == 1);
			CHECK(h.version == AIRLOCK_PROTO_VERSION);
			CHECK(h.type >= 1 && h.type <= AIRLOCK_FRAME_TYPE_MAX);
			CHECK(h.flags == 0);
			CHECK(h.length <= AIRLOCK_FRAME_MAX_PAYLOAD);
			CHECK(payload >= reader.buf && payload + h.length <= reader.buf + sizeof(reader.buf));
			/* The frame is exactly the next bytes of the stream. */
			CHECK(consumed + AIRLOCK_FRAME_HEADER_SIZE + h.length <= size);
			CHECK(memcmp(payload, data + consumed + AIRLOCK_FRAME_HEADER_SIZE, h.length) == 0);
			consumed += AIRLOCK_FRAME_HEADER_SIZE + h.length;
			frames++;
		}
	}
	CHECK(frames == want_frames);
	CHECK(err == want_err);
	CHECK(reader.start + reader.len <= sizeof(reader.buf));
	if (!err)
		CHECK(reader.len == size - consumed);

	/* The convenience wrapper agrees. */
	frame_reader_init(&reader);
	size_t n = 0;
	int rc = frame_reader_feed(&reader, data, size, &n);
	CHECK(rc == want_err);
	if (rc == 0)
		CHECK(n == want_frames);
	return 0;
}
