/* SPDX-License-Identifier: Apache-2.0 */
/* Hostile guest frames through the host side of the channel: the frame
 * reader, then the per-frame handler with a few streams open (HELLO parsing,
 * output caps, CREDIT, EXIT/ERROR/OK payloads, unknown streams and types). */
#include <stdint.h>
#include <sys/socket.h>

#include "guest-channel.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	struct guest_channel *ch = guest_channel_new(sv[0]);
	uint32_t ids[3];
	for (size_t i = 0; i < 3; i++)
		if (guest_channel_stream_open(ch, 4096, &ids[i], NULL) < 0)
			abort();
	struct frame_reader *r = xmalloc(sizeof(*r));
	frame_reader_init(r);
	size_t off = 0;
	bool broken = false;
	while (off < size && !broken) {
		size_t space;
		uint8_t *p = frame_reader_space(r, &space);
		size_t n = MIN(space, size - off);
		memcpy(p, data + off, n);
		frame_reader_commit(r, n);
		off += n;
		for (;;) {
			struct airlock_frame_header h;
			const uint8_t *payload;
			int rc = frame_reader_next(r, &h, &payload);
			if (rc == 0)
				break;
			if (rc < 0 || guest_channel_handle_frame(ch, &h, payload) < 0) {
				broken = true;
				break;
			}
		}
	}
	struct guest_hello hello;
	(void)guest_channel_wait_hello(ch, 0, &hello);
	for (size_t i = 0; i < 3; i++)
		guest_channel_stream_close(ch, ids[i]);
	free(r);
	guest_channel_free(ch);
	close(sv[1]);
	return 0;
}
