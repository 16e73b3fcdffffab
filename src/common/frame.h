/* SPDX-License-Identifier: Apache-2.0 */
/* Codec for the host <-> guest frames of include/airlock/proto.h. */
#ifndef AIRLOCK_FRAME_H
#define AIRLOCK_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "airlock/proto.h"

/* The frame type's name for messages ("EXEC"), or "an unknown frame". */
const char *frame_type_name(uint8_t type);

void frame_header_encode(const struct airlock_frame_header *h, uint8_t out[AIRLOCK_FRAME_HEADER_SIZE]);
/* SECURITY: validates everything the header claims: -EPROTONOSUPPORT for a
 * foreign version, -EBADMSG for an unknown type or non-zero flags, -EMSGSIZE
 * for a length above AIRLOCK_FRAME_MAX_PAYLOAD. */
int frame_header_decode(const uint8_t in[AIRLOCK_FRAME_HEADER_SIZE], struct airlock_frame_header *ret);

/* Incremental decoder over a byte stream: read into the space it offers, then
 * take whole frames out. Holds at most one maximum-size frame plus a header. */
struct frame_reader {
	uint8_t buf[AIRLOCK_FRAME_MAX_SIZE * 2];
	size_t start, len;
};

void frame_reader_init(struct frame_reader *r);
/* Free space at the end of the buffer (compacts first). Never 0 while no
 * complete frame is buffered. */
uint8_t *frame_reader_space(struct frame_reader *r, size_t *ret_size);
void frame_reader_commit(struct frame_reader *r, size_t n);
/* 1 and a frame (payload points into the reader, valid until the next call),
 * 0 when more bytes are needed, < 0 when the stream is corrupt (then the
 * channel must be dropped: there is no way to resynchronise). */
int frame_reader_next(struct frame_reader *r, struct airlock_frame_header *ret_h, const uint8_t **ret_payload);
/* Convenience for tests and fuzzing: feeds data and counts frames until the
 * end or an error. */
int frame_reader_feed(struct frame_reader *r, const uint8_t *data, size_t n, size_t *ret_frames);

/* Writes one frame to a blocking or non-blocking fd (waiting at most
 * timeout_ms, -1 = forever). -EMSGSIZE if len is above the maximum. */
int frame_write(int fd, uint8_t type, uint32_t stream, const void *payload, size_t len, int timeout_ms);

#endif
