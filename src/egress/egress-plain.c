/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plain HTTP after the dial (docs/egress.md, "Port 80: HTTP"). egress-conn.c
 * decided the connection on its first request head (the Host, the policy),
 * resolved that host and dialled it; a kept-alive connection can carry more
 * requests, and a server that hosts several sites (virtual hosts, a CDN)
 * routes each by its own Host. So every request after the first is read by
 * egress-http1's strict parser (the one intercepted TLS uses; its first
 * head was already checked by egress_plain_first) and checked before a byte
 * of it is forwarded:
 *   - its Host, canonicalised (a port must be 80), must be the first
 *     request's host, else 421 Misdirected Request;
 *   - that host must still be allowed by the sandbox's current policy (a
 *     policy change applies to the next request of an open connection),
 *     else 403;
 *   - what the parser refuses (framing two parsers could read differently,
 *     TRACE, CONNECT, upgrades, over a limit) gets 400, 403, 405, 413, 431.
 * A refused request is a "network.deny" event and ends the connection: the
 * answers to the requests forwarded before it are relayed first (our side
 * toward the server is closed, then we wait for the server's end or 1 s of
 * its silence, at most 10 s), then the refusal, with "Connection: close".
 *
 * Heads go to the server exactly as received (plain HTTP never gets a
 * secret); bodies as they arrive, through one bounded buffer (never whole),
 * except the bulk of a Content-Length body, which is spliced (zero-copy)
 * up to its last byte and only counted by the parser. Responses are not
 * parsed: the server -> guest direction stays spliced.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress-http1.h"
#include "egress-runtime.h"
#include "util.h"

#define PLAIN_CHUNK (64 * 1024)      /* guest bytes read at once */
#define PLAIN_REFUSE_QUIET_MS 1000   /* after a refusal: server silence that ends the wait */
#define PLAIN_REFUSE_MAX_MS 10000    /* after a refusal: the longest wait for earlier answers */
#define PLAIN_FRUITLESS_MAX 64       /* wake-ups without progress before breathing 1 ms */
#define PLAIN_SPLICE_MIN (16 * 1024) /* Content-Length body bytes left worth splicing */

struct plain {
	/* rq.parser is c->http1; rq.out a head (in the parser, valid until
	 * the next request's bytes are fed) or body bytes in rq.in. */
	struct egress_requests rq;
	bool g_eof;
	unsigned forwarded; /* request heads sent to the server */
	bool u_shut;        /* our side toward the server is closed */

	/* A Content-Length body: its bytes not yet counted by the parser.
	 * Runs of them go through up (spliced, never more than this), and the
	 * parser is told their count; nothing else is written to the server
	 * until up's pipe is empty. */
	uint64_t length_left;
	struct egress_splice up; /* guest -> server, body runs only */

	struct egress_splice down; /* server -> guest */
	uint64_t last_down_ms;     /* the server last sent a byte */
};

/* ------------------------------------------------------------ refusals */

/* The refusal's answer, then the end. */
static void refusal_reply(struct plain *pl)
{
	char body[EGRESS_REQUEST_REASON_MAX + 64];
	snprintf(body, sizeof(body), "airlock egress gateway: %s\n", pl->rq.reason);
	egress_http_reply(pl->rq.c->fd, pl->rq.status, pl->rq.status_text, body);
}

/* ------------------------------------------------------------ requests */

int egress_plain_first(struct egress_conn *c, size_t head_len, char *reason, size_t reason_size)
{
	struct al_error err = {0};
	size_t used = 0;
	c->http1 = egress_http1_parser_new();
	int r = egress_http1_feed(c->http1, c->buf, head_len, &used, &err);
	if (r == EGRESS_HTTP1_EV_HEAD && used == head_len)
		return 0;
	if (r >= 0) {
		/* SECURITY: the two parsers disagree on where the head ends;
		 * the server might too. */
		snprintf(reason, reason_size, "the request head is framed ambiguously");
		c->http_status = 400;
		c->http_status_text = "Bad Request";
		return -EBADMSG;
	}
	c->http_status = egress_request_refusal(c, r, &err, false, &c->http_status_text, reason, reason_size);
	return r;
}

/* Plain HTTP never carries a secret; a placeholder in a head is an event.
 * The sandbox's bindings as they are now (rotations apply to each request). */
static void plain_secret_events(struct plain *pl, const uint8_t *head, size_t len)
{
	struct egress_conn *c = pl->rq.c;
	egress_bindings_unref(c->bindings);
	c->bindings = NULL;
	egress_intercept_plain_http(c, head, len);
}

/* A checked head goes to the server as it was received. */
static void forward_head(struct plain *pl, const struct egress_http1_head *h)
{
	pl->rq.out = h->raw;
	pl->rq.out_len = h->len;
	pl->rq.out_off = 0;
	pl->forwarded++;
	pl->length_left = h->framing == EGRESS_HTTP1_LENGTH ? h->content_length : 0;
}

/* EGRESS_HTTP1_EV_HEAD of a request after the first: check it (Host,
 * policy); forward its head as received, or refuse it. */
static void on_head(struct plain *pl)
{
	const struct egress_http1_head *h = egress_http1_parser_head(pl->rq.parser);
	struct egress_request_shown shown;
	struct policy_host host;
	if (egress_requests_check_head(&pl->rq, h, &shown, &host) < 0)
		return;
	plain_secret_events(pl, h->raw, h->len);
	forward_head(pl, h);
}

/* Feeds the parser once and acts on its event. */
static void parse_step(struct plain *pl)
{
	size_t used = 0;
	int ev = egress_requests_feed(&pl->rq, &used);
	if (ev == EGRESS_HTTP1_EV_HEAD)
		on_head(pl);
	else if (ev == EGRESS_HTTP1_EV_BODY && pl->length_left > 0)
		pl->length_left -= used;
}

/* ------------------------------------------------------------ relaying */

/* guest -> server: writes what the parser let through. Returns 0 (*wait
 * set when the server's socket is full) or -errno. */
static int up_write(struct plain *pl, bool *progress, bool *wait)
{
	ssize_t n = send(pl->rq.c->up, pl->rq.out + pl->rq.out_off, pl->rq.out_len - pl->rq.out_off,
	                 MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		*wait = true; /* poll says when to try again */
		return 0;
	}
	pl->rq.out_off += (size_t)n;
	pl->rq.c->bytes_up += (uint64_t)n;
	*progress = true;
	if (pl->rq.out_off == pl->rq.out_len)
		pl->rq.out_len = pl->rq.out_off = 0;
	return 0;
}

/* Reads the guest's next bytes into the (drained) buffer. Returns 0 (*wait
 * set when there is nothing to read) or -errno. */
static int guest_read(struct plain *pl, bool *progress, bool *wait)
{
	ssize_t n = recv(pl->rq.c->fd, pl->rq.in, PLAIN_CHUNK, MSG_DONTWAIT);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		*wait = true; /* poll says when to try again */
		return 0;
	}
	if (n == 0)
		pl->g_eof = true;
	pl->rq.in_len = (size_t)n;
	pl->rq.in_off = 0;
	*progress = true;
	return 0;
}

/* Body bytes spliced past the parser: it is told their count. In a
 * Content-Length body it only counts (the body is opaque), so it is fed zeros.
 * SECURITY: a run never passes the body's last byte (up.limit): the server
 * gets exactly the body the parser framed, and the next bytes are parsed as
 * the next request, as the server will read them. */
static int count_body_run(struct plain *pl, uint64_t n)
{
	static const uint8_t zeros[PLAIN_CHUNK];
	while (n > 0) {
		size_t k = (size_t)MIN(n, (uint64_t)sizeof(zeros)), used = 0;
		int ev = egress_http1_feed(pl->rq.parser, zeros, k, &used, NULL);
		if (ev != EGRESS_HTTP1_EV_BODY || used != k || k > pl->length_left)
			return -EPROTO; /* cannot happen: the run is inside the body */
		pl->length_left -= k;
		n -= k;
	}
	pl->rq.parse_pending = true; /* the END of the request may be due */
	return 0;
}

/* Relays until the connection ends; returns why (for the close event), or
 * NULL when a refused request ended it (why is in pl->rq.reason). */
static const char *pump(struct plain *pl)
{
	struct egress_conn *c = pl->rq.c;
	struct egress_conn_timer timer;
	egress_conn_timer_start(&timer, c);
	unsigned fruitless = 0;
	for (;;) {
		bool progress = false, g_wait = false, u_wait = false;
		int r;

		/* guest -> server, through the parser; a body run's pipe
		 * empties before anything else is written. */
		if (pl->up.inpipe == 0) {
			if (pl->rq.out_len > 0 && (r = up_write(pl, &progress, &u_wait)) < 0)
				return egress_io_failure(r, "writing to the server failed");
			while (!pl->rq.refusing && pl->rq.out_len == 0 &&
			       (pl->rq.in_off < pl->rq.in_len || pl->rq.parse_pending)) {
				parse_step(pl);
				progress = true;
			}
		}
		bool drained = !pl->rq.refusing && pl->rq.out_len == 0 && pl->rq.in_off == pl->rq.in_len;
		bool run = drained && !pl->g_eof && pl->length_left >= PLAIN_SPLICE_MIN;
		if (drained && !run && !pl->g_eof && pl->up.inpipe == 0 && (r = guest_read(pl, &progress, &g_wait)) < 0)
			return egress_io_failure(r, "reading from the guest failed");
		uint64_t up_in = pl->up.bytes_in;
		pl->up.limit = run ? pl->length_left : 0;
		if ((r = egress_splice_pump(&pl->up, &progress)) < 0)
			return egress_io_failure(r, "relay error");
		if (pl->up.bytes_in != up_in && count_body_run(pl, pl->up.bytes_in - up_in) < 0)
			return "relay error";
		if (pl->up.eof)
			pl->g_eof = true;
		if (drained && pl->up.inpipe == 0 && pl->g_eof && !pl->u_shut) {
			if (!egress_http1_parser_idle(pl->rq.parser))
				return "the guest closed in the middle of a request";
			shutdown(c->up, SHUT_WR);
			pl->u_shut = true;
			progress = true;
		}
		if (pl->rq.refusing && !pl->u_shut) {
			/* The server answers what it was sent, then sees the
			 * end (the first request always went to it). */
			shutdown(c->up, SHUT_WR);
			pl->u_shut = true;
			progress = true;
		}

		/* server -> guest, spliced; kept open for a refusal's answer. */
		uint64_t down_in = pl->down.bytes_in;
		pl->down.hold_shut = pl->rq.refusing;
		if ((r = egress_splice_pump(&pl->down, &progress)) < 0)
			return egress_io_failure(r, "relay error");
		uint64_t now = now_ms_monotonic();
		if (pl->down.bytes_in != down_in)
			pl->last_down_ms = now;

		if (pl->rq.refusing) {
			if (pl->down.eof && pl->down.inpipe == 0) {
				refusal_reply(pl);
				return NULL;
			}
			/* Earlier requests' answers had their chance: the
			 * server went quiet. Still answering after the
			 * longest wait (or the guest does not read): ours
			 * would land in the middle of an answer, so none. */
			uint64_t quiet_since = MAX(pl->last_down_ms, pl->rq.refuse_ms);
			if (now >= quiet_since + PLAIN_REFUSE_QUIET_MS && pl->down.inpipe == 0) {
				refusal_reply(pl);
				return NULL;
			}
			if (now >= pl->rq.refuse_ms + PLAIN_REFUSE_MAX_MS)
				return NULL;
		} else if (pl->u_shut && pl->down.shut) {
			return "closed";
		}

		const char *expired = egress_conn_timer_check(&timer, now, progress);
		if (expired)
			return expired;
		if (progress) {
			fruitless = 0;
			continue;
		}
		uint64_t wake = egress_conn_timer_wake(&timer);
		if (pl->rq.refusing)
			wake = MIN(wake, MAX(pl->last_down_ms, pl->rq.refuse_ms) + PLAIN_REFUSE_QUIET_MS);
		/* A side we want nothing from is left out (a socket reports
		 * POLLHUP whether asked or not). */
		bool g_in = g_wait || egress_splice_wants_in(&pl->up);
		bool u_out = u_wait || pl->up.inpipe > 0;
		short gev = (short)((g_in ? POLLIN : 0) | (pl->down.inpipe > 0 ? POLLOUT : 0));
		short uev = (short)((u_out ? POLLOUT : 0) | (egress_splice_wants_in(&pl->down) ? POLLIN : 0));
		struct pollfd p[2] = {
		    {.fd = gev ? c->fd : -1, .events = gev},
		    {.fd = uev ? c->up : -1, .events = uev},
		};
		/* POLLOUT can come a little before a splice would succeed:
		 * after many fruitless wake-ups, breathe instead of spinning. */
		if (++fruitless > PLAIN_FRUITLESS_MAX)
			poll(NULL, 0, 1);
		uint64_t left = wake > now ? wake - now : 0;
		if (poll(p, 2, (int)MIN(left, (uint64_t)INT32_MAX)) < 0 && errno != EINTR)
			return "relay error";
	}
}

static void plain_release(struct plain *pl)
{
	egress_splice_close(&pl->up);
	egress_splice_close(&pl->down);
	free(pl->rq.in);
}
#define cleanup_plain __attribute__((cleanup(plain_release)))

const char *egress_plain_run(struct egress_conn *c, char *reason, size_t reason_size)
{
	cleanup_plain struct plain pl = {
	    .rq = {.c = c, .parser = c->http1}, .up = EGRESS_SPLICE_CLOSED, .down = EGRESS_SPLICE_CLOSED};
	if (!egress_splice_open(&pl.down, c->up, c->fd, &c->bytes_down) ||
	    !egress_splice_open(&pl.up, c->fd, c->up, &c->bytes_up))
		return "out of resources (pipe)";
	pl.up.hold_shut = true; /* the guest's end is handled with the parser's state */
	pl.up.limit = 0;
	/* The first request was decided by egress-conn.c: its head goes as
	 * received (the parser holds it), what came after it is parsed. */
	const struct egress_http1_head *h = egress_http1_parser_head(pl.rq.parser);
	pl.rq.in = xmalloc(PLAIN_CHUNK);
	pl.rq.in_len = MIN(c->len - h->len, (size_t)PLAIN_CHUNK);
	memcpy(pl.rq.in, c->buf + h->len, pl.rq.in_len);
	free(TAKE_PTR(c->buf));
	plain_secret_events(&pl, h->raw, h->len);
	forward_head(&pl, h);
	pl.rq.in_body = true;
	pl.rq.parse_pending = true;

	const char *why = pump(&pl);
	if (why)
		return why;
	/* It lives in pl: the caller gets a copy. */
	snprintf(reason, reason_size, "%s", pl.rq.reason);
	return reason;
}
