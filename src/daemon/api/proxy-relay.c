/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The proxy's relay of one request (proxy-internal.h): the client's body to
 * the guest and the guest's response back, as the bytes arrive, each framed
 * by libhttp-parser fed the same bytes (after the strict head parser of
 * proxy-http.c checked each head), so the client connection can carry the
 * next request; a 101 splices both sockets.
 */
#include <errno.h>
#include <http_parser.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "proxy-internal.h"
#include "util.h"

enum relay_end {
	RELAY_DONE,   /* the response is complete */
	RELAY_SWITCH, /* a 101: splice */
	RELAY_CLOSE,  /* the response ended with the guest's connection, or was cut: close the client */
};

struct relay {
	struct proxy_conn *c;
	const struct proxy_request *req;
	int gfd;
	http_parser reqp, respp;
	bool req_done, resp_head_state, resp_head_sent, interim, resp_done;
	uint64_t body_bytes;
	bool body_too_large;
	int status;
	bool close_after;
	struct port_traffic t;
};

/* ------------------------------------------------------------ framing */

static int req_on_body(http_parser *p, const char *at, size_t len)
{
	(void)at;
	struct relay *r = p->data;
	r->body_bytes += len;
	if (r->body_bytes > r->req->max_body_bytes) {
		r->body_too_large = true;
		return -1;
	}
	return 0;
}

static int req_on_complete(http_parser *p)
{
	struct relay *r = p->data;
	r->req_done = true;
	http_parser_pause(p, 1);
	return 0;
}

static int resp_on_headers(http_parser *p)
{
	struct relay *r = p->data;
	/* 1: no body (the answer to a HEAD). */
	return r->req->head_method ? 1 : 0;
}

static int resp_on_complete(http_parser *p)
{
	struct relay *r = p->data;
	if (p->status_code >= 100 && p->status_code < 200 && p->status_code != 101)
		r->interim = true;
	else
		r->resp_done = true;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings req_settings = {
    .on_body = req_on_body,
    .on_message_complete = req_on_complete,
};
static const http_parser_settings resp_settings = {
    .on_headers_complete = resp_on_headers,
    .on_message_complete = resp_on_complete,
};

bool proxy_send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* ------------------------------------------------------------ the request side */

/* Feeds the client's bytes at the front of in to the request parser and
 * sends what belongs to this request to the guest; the rest (the next
 * request) stays. false: the request is malformed, too large or the guest
 * went away (answered when nothing was answered yet). */
static bool client_bytes(struct relay *r)
{
	struct proxy_conn *c = r->c;
	if (r->req_done || c->in_len == 0)
		return true;
	size_t n = http_parser_execute(&r->reqp, &req_settings, (const char *)c->in, c->in_len);
	enum http_errno e = HTTP_PARSER_ERRNO(&r->reqp);
	if (e != HPE_OK && e != HPE_PAUSED) {
		if (!r->resp_head_sent) {
			if (r->body_too_large)
				proxy_answer(c, 413, true, NULL,
				             "the request body is larger than %u MiB (--proxy-max-body-mib)\n",
				             (unsigned)(r->req->max_body_bytes >> 20));
			else
				proxy_answer(c, 400, true, NULL, "malformed request body: %s\n",
				             http_errno_description(e));
			r->status = r->body_too_large ? 413 : 400;
		}
		return false;
	}
	if (e == HPE_PAUSED)
		http_parser_pause(&r->reqp, 0);
	if (n > 0 && !proxy_send_all(r->gfd, c->in, n))
		return false;
	r->t.bytes_in += n;
	memmove(c->in, c->in + n, c->in_len - n);
	c->in_len -= n;
	return true;
}

/* ------------------------------------------------------------ the response side */

/* A complete response head at rbuf[off, off + hl): checked, rewritten, sent. */
static int response_head(struct relay *r, size_t off, size_t hl)
{
	struct proxy_conn *c = r->c;
	struct al_error err = {0};
	if (proxy_head_parse((const char *)c->rbuf + off, hl, true, &c->rhead, &err) < 0) {
		log_info("proxy: sandbox %s port %u: %s", r->req->route.id, r->req->route.port, err.message);
		return -EBADMSG;
	}
	const struct proxy_head *h = &c->rhead;
	bool interim = h->status >= 100 && h->status < 200 && h->status != 101;
	if (h->status == 101 && !r->req->upgrade)
		return -EBADMSG;
	/* A body that ends with the guest's connection ends the client's too. */
	bool bodyless = r->req->head_method || interim || h->status == 204 || h->status == 304;
	bool close = !r->req->client_keep_alive || (h->framing == PROXY_NO_BODY && !bodyless) || r->req->upgrade;
	if (!interim) {
		r->status = h->status;
		r->close_after = close;
	}
	size_t len;
	if (proxy_response_rewrite(h, close && !interim, c->out, sizeof(c->out), &len) < 0)
		return -E2BIG;
	if (!interim || r->req->client_http11) {
		if (!proxy_send_all(c->fd, c->out, len))
			return -ECONNABORTED;
	}
	r->resp_head_sent = r->resp_head_sent || !interim;
	r->t.bytes_out += len;
	return 0;
}

/* A message of the response parser ended (it paused): an interim 1xx
 * (another head follows), a 101, or the response. 1: done. */
static int message_end(struct relay *r, enum relay_end *ret_end)
{
	http_parser_pause(&r->respp, 0);
	if (r->interim) {
		r->interim = false;
		r->resp_head_state = true;
		return 0;
	}
	*ret_end = r->respp.upgrade ? RELAY_SWITCH : r->close_after ? RELAY_CLOSE : RELAY_DONE;
	return 1;
}

/* Works through the guest's bytes in rbuf: each head checked, rewritten and
 * sent (the parser is fed it to frame what follows), then body bytes as
 * framed, sent on as they come. Returns 1 when the response is complete or
 * switched (what follows stays in rbuf), 0 for more, < 0 to cut. */
static int guest_bytes(struct relay *r, enum relay_end *ret_end)
{
	struct proxy_conn *c = r->c;
	size_t off = 0;
	int result = 0;
	while (off < c->r_len && result == 0) {
		const char *at = (const char *)c->rbuf + off;
		size_t avail = c->r_len - off, n;
		if (r->resp_head_state) {
			size_t hl = proxy_head_end(at, avail);
			if (hl == 0) {
				if (avail >= PROXY_RESPONSE_HEAD_MAX)
					return -E2BIG;
				break;
			}
			int e = response_head(r, off, hl);
			if (e < 0)
				return e;
			r->resp_head_state = false;
			n = http_parser_execute(&r->respp, &resp_settings, at, hl);
			if (n != hl)
				return -EBADMSG;
		} else {
			n = http_parser_execute(&r->respp, &resp_settings, at, avail);
			if (n > 0 && !proxy_send_all(c->fd, at, n))
				return -ECONNABORTED;
			r->t.bytes_out += n;
		}
		off += n;
		enum http_errno e = HTTP_PARSER_ERRNO(&r->respp);
		if (e == HPE_PAUSED)
			result = message_end(r, ret_end);
		else if (e != HPE_OK)
			return -EBADMSG;
	}
	memmove(c->rbuf, c->rbuf + off, c->r_len - off);
	c->r_len -= off;
	return result;
}

/* The guest closed its side: a close-delimited body ends here. */
static int guest_eof(struct relay *r, enum relay_end *ret_end)
{
	if (!r->resp_head_sent)
		return -ECONNRESET;
	http_parser_execute(&r->respp, &resp_settings, NULL, 0);
	if (r->resp_done) {
		*ret_end = RELAY_CLOSE;
		return 1;
	}
	return -ECONNRESET;
}

/* ------------------------------------------------------------ the loop */

static int relay_guest_read(struct relay *r, enum relay_end *ret_end)
{
	struct proxy_conn *c = r->c;
	if (c->r_len == sizeof(c->rbuf))
		return -E2BIG;
	ssize_t n = read(r->gfd, c->rbuf + c->r_len, sizeof(c->rbuf) - c->r_len);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if (n == 0)
		return guest_eof(r, ret_end);
	c->r_len += (size_t)n;
	return guest_bytes(r, ret_end);
}

static int relay_client_read(struct relay *r)
{
	struct proxy_conn *c = r->c;
	if (c->in_len == sizeof(c->in))
		return client_bytes(r) ? 0 : -EBADMSG;
	ssize_t n = read(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if (n == 0)
		return -ECONNABORTED; /* the client cut its request short */
	c->in_len += (size_t)n;
	return client_bytes(r) ? 0 : -EBADMSG;
}

/* Both directions until the response is complete. */
static int relay_loop(struct relay *r, enum relay_end *ret_end)
{
	struct proxy_conn *c = r->c;
	int timeout_ms = (int)(r->req->idle_timeout_s * 1000u);
	for (;;) {
		/* After its request, the client is only watched for a hang-up:
		 * its next bytes are the next request's. */
		struct pollfd p[2] = {
		    {.fd = r->gfd, .events = POLLIN},
		    {.fd = c->fd, .events = r->req_done ? POLLRDHUP : POLLIN},
		};
		int pr = poll(p, 2, timeout_ms);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return -ETIMEDOUT;
		if (p[0].revents) {
			int g = relay_guest_read(r, ret_end);
			if (g != 0)
				return g < 0 ? g : 0;
		}
		if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
			if (r->req_done)
				return -ECONNABORTED;
		}
		if (p[1].revents & POLLIN && !r->req_done) {
			int e = relay_client_read(r);
			if (e < 0)
				return e;
		}
	}
}

/* Bytes both ways until either side closes (a WebSocket, after its 101). */
static void splice_loop(struct relay *r)
{
	struct proxy_conn *c = r->c;
	int fds[2] = {c->fd, r->gfd};
	bool open[2] = {true, true};
	uint8_t buf[16384];
	uint64_t reported = now_ms_monotonic();
	struct port_traffic t = {0};
	int timeout_ms = (int)(r->req->idle_timeout_s * 1000u);
	while (open[0] && open[1]) {
		struct pollfd p[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
		int pr = poll(p, 2, timeout_ms);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			ssize_t n = read(fds[i], buf, sizeof(buf));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0 || !proxy_send_all(fds[1 - i], buf, (size_t)n)) {
				open[i] = false;
				break;
			}
			if (i == 0)
				t.bytes_in += (uint64_t)n;
			else
				t.bytes_out += (uint64_t)n;
		}
		uint64_t now = now_ms_monotonic();
		if (now - reported >= PROXY_TRAFFIC_REPORT_MS) {
			sandbox_port_traffic(r->req->route.id, r->req->route.port, &t);
			t = (struct port_traffic){0};
			reported = now;
		}
	}
	sandbox_port_traffic(r->req->route.id, r->req->route.port, &t);
}

static void relay_switch(struct relay *r)
{
	struct proxy_conn *c = r->c;
	/* What either side sent after the handshake goes first. */
	if (c->r_len && !proxy_send_all(c->fd, c->rbuf, c->r_len))
		return;
	if (c->in_len && !proxy_send_all(r->gfd, c->in, c->in_len))
		return;
	r->t.bytes_out += c->r_len;
	r->t.bytes_in += c->in_len;
	c->r_len = c->in_len = 0;
	proxy_conn_pin(c);
	splice_loop(r);
}

bool proxy_relay(struct proxy_conn *c, const struct proxy_request *req, int gfd, int *ret_status, bool *ret_reusable)
{
	*ret_reusable = false;
	struct relay r = {.c = c, .req = req, .gfd = gfd, .resp_head_state = true};
	http_parser_init(&r.reqp, HTTP_REQUEST);
	http_parser_init(&r.respp, HTTP_RESPONSE);
	r.reqp.data = r.respp.data = &r;
	c->r_len = 0;
	bool keep = false;
	enum relay_end end = RELAY_CLOSE;
	/* The client's head was checked by proxy_head_parse; the parser is fed
	 * it too (not forwarded: the guest got the rewritten one), so it frames
	 * the body from the same fields. */
	size_t hn = http_parser_execute(&r.reqp, &req_settings, (const char *)c->in, req->head_len);
	enum http_errno he = HTTP_PARSER_ERRNO(&r.reqp);
	if ((he != HPE_OK && he != HPE_PAUSED) || (hn != req->head_len && !r.req_done)) {
		proxy_answer(c, 400, true, NULL, "malformed request head: %s\n", http_errno_description(he));
		*ret_status = 400;
		sandbox_port_close(req->route.id, gfd);
		return false;
	}
	if (he == HPE_PAUSED)
		http_parser_pause(&r.reqp, 0);
	memmove(c->in, c->in + req->head_len, c->in_len - req->head_len);
	c->in_len -= req->head_len;
	int e = 0;
	if (!proxy_send_all(gfd, req->guest_head, req->guest_head_len))
		e = -EPIPE;
	r.t.bytes_in += req->guest_head_len;
	if (e == 0 && !client_bytes(&r))
		e = -EBADMSG;
	if (e == 0)
		e = relay_loop(&r, &end);
	if (e < 0 && !r.resp_head_sent && r.status == 0) {
		if (e == -ETIMEDOUT) {
			proxy_answer(c, 504, true, NULL, "port %u of sandbox %s sent no answer within %u s\n",
			             req->route.port, req->route.id, req->idle_timeout_s);
			r.status = 504;
		} else if (e != -ECONNABORTED) {
			proxy_answer(c, 502, true, NULL,
			             "port %u of sandbox %s closed the connection or sent a malformed "
			             "response\n",
			             req->route.port, req->route.id);
			r.status = 502;
		}
	}
	if (e == 0 && end == RELAY_SWITCH) {
		relay_switch(&r);
	} else if (e == 0) {
		keep = end == RELAY_DONE && r.req_done && !req->upgrade;
	}
	r.t.requests = 1;
	r.t.errors = (e < 0 || r.status >= 500) ? 1 : 0;
	sandbox_port_traffic(req->route.id, req->route.port, &r.t);
	/* The guest may take another request on it: an HTTP/1.1 exchange that
	 * ended where its framing said, with nothing of the guest's after it. */
	if (keep && e == 0 && end == RELAY_DONE && req->client_http11 && !c->rhead.conn_close && c->r_len == 0)
		*ret_reusable = true;
	else
		sandbox_port_close(req->route.id, gfd);
	*ret_status = r.status;
	return keep;
}
