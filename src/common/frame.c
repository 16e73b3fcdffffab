/* SPDX-License-Identifier: Apache-2.0 */
#include "frame.h"

#include <errno.h>
#include <string.h>

#include "util.h"

static void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint16_t get_be16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

const char *frame_type_name(uint8_t type)
{
	static const char *const names[] = {
	    [AIRLOCK_FRAME_HELLO] = "HELLO",
	    [AIRLOCK_FRAME_EXEC] = "EXEC",
	    [AIRLOCK_FRAME_STDIN] = "STDIN",
	    [AIRLOCK_FRAME_STDOUT] = "STDOUT",
	    [AIRLOCK_FRAME_STDERR] = "STDERR",
	    [AIRLOCK_FRAME_EXIT] = "EXIT",
	    [AIRLOCK_FRAME_ERROR] = "ERROR",
	    [AIRLOCK_FRAME_FILE_WRITE] = "FILE_WRITE",
	    [AIRLOCK_FRAME_FILE_READ] = "FILE_READ",
	    [AIRLOCK_FRAME_FILE_DATA] = "FILE_DATA",
	    [AIRLOCK_FRAME_OK] = "OK",
	    [AIRLOCK_FRAME_SHUTDOWN] = "SHUTDOWN",
	    [AIRLOCK_FRAME_SIGNAL] = "SIGNAL",
	    [AIRLOCK_FRAME_CREDIT] = "CREDIT",
	    [AIRLOCK_FRAME_RESIZE] = "RESIZE",
	    [AIRLOCK_FRAME_FILE_OP] = "FILE_OP",
	    [AIRLOCK_FRAME_METRICS] = "METRICS",
	    [AIRLOCK_FRAME_FREEZE] = "FREEZE",
	    [AIRLOCK_FRAME_THAW] = "THAW",
	    [AIRLOCK_FRAME_WATCH] = "WATCH",
	    [AIRLOCK_FRAME_WATCH_EVENTS] = "WATCH_EVENTS",
	};
	return type < ARRAY_SIZE(names) && names[type] ? names[type] : "an unknown frame";
}

void frame_header_encode(const struct airlock_frame_header *h, uint8_t out[AIRLOCK_FRAME_HEADER_SIZE])
{
	out[0] = h->version;
	out[1] = h->type;
	put_be16(out + 2, h->flags);
	put_be32(out + 4, h->stream);
	put_be32(out + 8, h->length);
}

int frame_header_decode(const uint8_t in[AIRLOCK_FRAME_HEADER_SIZE], struct airlock_frame_header *ret)
{
	struct airlock_frame_header h = {
	    .version = in[0],
	    .type = in[1],
	    .flags = get_be16(in + 2),
	    .stream = get_be32(in + 4),
	    .length = get_be32(in + 8),
	};
	if (h.version != AIRLOCK_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	if (h.type == 0 || h.type > AIRLOCK_FRAME_TYPE_MAX || h.flags != 0)
		return -EBADMSG;
	if (h.length > AIRLOCK_FRAME_MAX_PAYLOAD)
		return -EMSGSIZE;
	*ret = h;
	return 0;
}

void frame_reader_init(struct frame_reader *r)
{
	r->start = 0;
	r->len = 0;
}

uint8_t *frame_reader_space(struct frame_reader *r, size_t *ret_size)
{
	if (r->start > 0 && r->start + r->len > sizeof(r->buf) / 2) {
		memmove(r->buf, r->buf + r->start, r->len);
		r->start = 0;
	}
	*ret_size = sizeof(r->buf) - r->start - r->len;
	return r->buf + r->start + r->len;
}

void frame_reader_commit(struct frame_reader *r, size_t n)
{
	size_t space = sizeof(r->buf) - r->start - r->len;
	r->len += n < space ? n : space;
}

int frame_reader_next(struct frame_reader *r, struct airlock_frame_header *ret_h, const uint8_t **ret_payload)
{
	if (r->len < AIRLOCK_FRAME_HEADER_SIZE)
		return 0;
	struct airlock_frame_header h;
	int rc = frame_header_decode(r->buf + r->start, &h);
	if (rc < 0)
		return rc;
	size_t total = AIRLOCK_FRAME_HEADER_SIZE + (size_t)h.length;
	if (r->len < total)
		return 0;
	*ret_h = h;
	*ret_payload = r->buf + r->start + AIRLOCK_FRAME_HEADER_SIZE;
	r->start += total;
	r->len -= total;
	if (r->len == 0)
		r->start = 0;
	return 1;
}

int frame_reader_feed(struct frame_reader *r, const uint8_t *data, size_t n, size_t *ret_frames)
{
	size_t frames = 0;
	while (n > 0) {
		size_t space;
		uint8_t *p = frame_reader_space(r, &space);
		size_t c = n < space ? n : space;
		memcpy(p, data, c);
		frame_reader_commit(r, c);
		data += c;
		n -= c;
		for (;;) {
			struct airlock_frame_header h;
			const uint8_t *payload;
			int rc = frame_reader_next(r, &h, &payload);
			if (rc < 0)
				return rc;
			if (rc == 0)
				break;
			frames++;
		}
	}
	if (ret_frames)
		*ret_frames = frames;
	return 0;
}

int frame_write(int fd, uint8_t type, uint32_t stream, const void *payload, size_t len, int timeout_ms)
{
	if (len > AIRLOCK_FRAME_MAX_PAYLOAD)
		return -EMSGSIZE;
	uint8_t buf[AIRLOCK_FRAME_MAX_SIZE];
	struct airlock_frame_header h = {
	    .version = AIRLOCK_PROTO_VERSION,
	    .type = type,
	    .stream = stream,
	    .length = (uint32_t)len,
	};
	frame_header_encode(&h, buf);
	if (len)
		memcpy(buf + AIRLOCK_FRAME_HEADER_SIZE, payload, len);
	return write_full_timeout(fd, buf, AIRLOCK_FRAME_HEADER_SIZE + len, timeout_ms);
}
