/* SPDX-License-Identifier: Apache-2.0 */
#include "fd-relay.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

/* One direction: a buffer read from `from` and not yet written to `to`. */
struct half {
	int from, to;
	uint8_t buf[FD_RELAY_BUF];
	size_t len, off;
	bool eof;  /* from ended; to's write side shut once the buffer is out */
	bool done; /* eof and buffer written */
	uint64_t moved;
};

/* Reads what `from` has, writes what `to` takes; -errno on a failure. */
static int half_step(struct half *h, short rev_from, short rev_to)
{
	if (!h->eof && h->len == 0 && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
		ssize_t n = recv(h->from, h->buf, sizeof(h->buf), MSG_DONTWAIT);
		if (n > 0) {
			h->len = (size_t)n;
			h->off = 0;
		} else if (n == 0) {
			h->eof = true;
		} else if (errno != EAGAIN && errno != EINTR) {
			return -errno;
		}
	}
	if (h->len > h->off && (rev_to & POLLOUT)) {
		ssize_t n = send(h->to, h->buf + h->off, h->len - h->off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			h->off += (size_t)n;
			h->moved += (uint64_t)n;
			if (h->off == h->len)
				h->len = h->off = 0;
		} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			return -errno;
		}
	}
	if (h->eof && h->len == 0 && !h->done) {
		shutdown(h->to, SHUT_WR);
		h->done = true;
	}
	return 0;
}

static short half_wants_from(const struct half *h)
{
	return !h->eof && h->len == 0 ? POLLIN : 0;
}

static short half_wants_to(const struct half *h)
{
	return h->len > h->off ? POLLOUT : 0;
}

int fd_relay_run(const struct fd_relay *r)
{
	struct half *ab = xcalloc(1, sizeof(*ab)), *ba = xcalloc(1, sizeof(*ba));
	ab->from = r->a, ab->to = r->b;
	ba->from = r->b, ba->to = r->a;
	uint64_t last_move = now_ms_monotonic(), last_report = last_move, reported_ab = 0, reported_ba = 0;
	int res = 0;
	while (!(ab->done && ba->done) && !(r->end_on_b_eof && ba->done)) {
		struct pollfd p[2] = {{.fd = r->a, .events = (short)(half_wants_from(ab) | half_wants_to(ba))},
		                      {.fd = r->b, .events = (short)(half_wants_from(ba) | half_wants_to(ab))}};
		/* A side nothing is wanted of is left out: its POLLHUP would
		 * otherwise wake the loop at once, again and again. */
		for (size_t i = 0; i < 2; i++)
			if (!p[i].events)
				p[i].fd = -1;
		int n = poll(p, 2, 1000);
		if (n < 0 && errno != EINTR) {
			res = -errno;
			break;
		}
		uint64_t before = ab->moved + ba->moved;
		if (n > 0 && ((res = half_step(ab, p[0].revents, p[1].revents)) < 0 ||
		              (res = half_step(ba, p[1].revents, p[0].revents)) < 0))
			break;
		uint64_t now = now_ms_monotonic();
		if (ab->moved + ba->moved != before || (n > 0 && (ab->eof || ba->eof)))
			last_move = now;
		else if (r->idle_ms && now - last_move >= r->idle_ms) {
			res = -ETIMEDOUT;
			break;
		}
		if (r->progress && r->progress_ms && now - last_report >= r->progress_ms &&
		    (ab->moved != reported_ab || ba->moved != reported_ba)) {
			r->progress(r->arg, ab->moved - reported_ab, ba->moved - reported_ba);
			reported_ab = ab->moved, reported_ba = ba->moved, last_report = now;
		}
	}
	if (r->progress && (ab->moved != reported_ab || ba->moved != reported_ba))
		r->progress(r->arg, ab->moved - reported_ab, ba->moved - reported_ba);
	free(ab);
	free(ba);
	return res;
}
