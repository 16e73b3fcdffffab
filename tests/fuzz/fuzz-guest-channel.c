/* SPDX-License-Identifier: Apache-2.0 */
/* Hostile guest frames through the host side of the channel: the frame
 * reader, then the per-frame handler with streams of both kinds open (HELLO
 * parsing, output caps and logs, CREDIT, EXIT/ERROR/OK payloads, unknown
 * streams and types), a WATCH stream (WATCH_EVENTS checked field by field),
 * and readers draining the logs as the daemon would. */
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
	/* Streams 1-3 are execs, stream 4 a WATCH. */
	struct guest_stream *s[4] = {NULL};
	json_t *msg = json_object();
	for (size_t i = 0; i < 4; i++)
		if (guest_stream_start(ch, i == 3 ? AIRLOCK_FRAME_WATCH : AIRLOCK_FRAME_EXEC, msg,
		                       i == 0 ? GUEST_STREAM_COLLECT : GUEST_STREAM_LOG, 4096, &s[i], NULL) < 0)
			abort();
	json_decref(msg);
	struct guest_cursor cur, wcur;
	if (guest_cursor_open(ch, s[1], true, &cur) < 0 || guest_cursor_open(ch, s[3], true, &wcur) < 0)
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
		/* Drain what the reader can see now, like a streaming response. */
		for (;;) {
			uint8_t type, *chunk = NULL;
			size_t len;
			uint64_t dropped;
			if (guest_cursor_read(ch, &cur, 0, &type, &chunk, &len, &dropped) != 1)
				break;
			free(chunk);
		}
		/* What a watch's reader gets is the checked copy: it must pass the
		 * check again, unchanged. */
		for (;;) {
			uint8_t type, *chunk = NULL;
			size_t len;
			uint64_t dropped;
			char why[160];
			if (guest_cursor_read(ch, &wcur, 0, &type, &chunk, &len, &dropped) != 1)
				break;
			json_t *j = guest_watch_events_check(chunk, len, why, sizeof(why));
			if (type != AIRLOCK_FRAME_WATCH_EVENTS || !j)
				abort();
			json_decref(j);
			free(chunk);
		}
		guest_channel_flush(ch);
	}
	struct guest_hello hello;
	(void)guest_channel_wait_hello(ch, 0, &hello);
	struct exec_output out[2];
	guest_stream_take_output(ch, s[0], out);
	free(out[0].data);
	free(out[1].data);
	guest_cursor_close(ch, &cur);
	guest_cursor_close(ch, &wcur);
	for (size_t i = 0; i < 4; i++)
		guest_stream_unref(ch, s[i]);
	free(r);
	guest_channel_free(ch);
	close(sv[1]);
	return 0;
}
