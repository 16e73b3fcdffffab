/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's connections (docs/egress.md, "Decision rules"): the epoll
 * loop over every sandbox's listeners, and one thread per guest TCP
 * connection (kept a while for the next one when it ends) that
 *   1. takes the destination the guest asked for from SO_ORIGINAL_DST;
 *   2. port 80: reads the HTTP request head (Host); port 443: the TLS
 *      ClientHello (SNI); other ports: the names this sandbox's DNS answers
 *      gave for the address, or an IP/CIDR rule;
 *   3. decides with one policy reference; a denied connection is closed
 *      (HTTP: 403) and nothing is resolved or dialled for it;
 *   4. resolves the allowed name itself, keeps the addresses it may dial,
 *      and dials one of them at the destination port (never the guest's
 *      address merely because the guest asked for it);
 *   5. forwards what it read, then splices bytes both ways until both
 *      sides are done, an idle or total limit is hit, or the sandbox is
 *      removed; or, for TLS that a secret binding or "tls":"inspect" asks
 *      to intercept (egress_intercept_decide), hands the connection to
 *      egress-intercept.c, which terminates TLS and checks every request;
 *      or, for plain HTTP, hands it to egress-plain.c, which checks every
 *      request too (responses stay spliced).
 * Each step that decides something emits an audit event.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "egress-http.h"
#include "egress-http1.h"
#include "egress-runtime.h"
#include "egress-tls.h"
#include "util.h"

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80 /* <linux/netfilter_ipv4.h>, which clashes with <netinet/in.h> */
#endif

#define CONN_BUF_MAX MAX(EGRESS_HTTP_HEAD_MAX, EGRESS_TLS_PEEK_MAX)
#define DRAIN_MAX (64 * 1024) /* bytes read and dropped after a 403 */
#define DRAIN_TIMEOUT_MS 1000
/* Enlarged pipes: EGRESS_PIPE_SIZE while the budget allows, then
 * EGRESS_PIPE_SIZE_SMALL, then the default size. */
#define EGRESS_PIPE_SIZE (1024 * 1024)
#define EGRESS_PIPE_SIZE_SMALL (256 * 1024)
#define EGRESS_BIG_PIPES_BYTES (16 * 1024 * 1024) /* 16 MiB of enlarged pipe buffers at most */

static atomic_size_t big_pipe_bytes;
#define PUMP_ROUNDS 16 /* splices per direction before looking at the other */
#define REASON_MAX 384

static const char *const proto_names[] = {"http", "tls", "tcp"};

/* ------------------------------------------------------------ helpers */

socklen_t egress_addr_sockaddr(const struct policy_addr *a, uint16_t port, struct sockaddr_storage *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (a->family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ret;
		*sin = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = a->v4};
		return sizeof(*sin);
	}
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ret;
	*sin6 = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = a->v6};
	return sizeof(*sin6);
}

void egress_close_reset(int fd)
{
	struct linger l = {.l_onoff = 1, .l_linger = 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

static int remaining_ms(uint64_t deadline_ms)
{
	uint64_t now = now_ms_monotonic();
	if (now >= deadline_ms)
		return 0;
	uint64_t left = deadline_ms - now;
	return left > INT32_MAX ? INT32_MAX : (int)left;
}

int egress_wait_fd(int fd, short events, uint64_t deadline_ms)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int left = remaining_ms(deadline_ms);
		if (left == 0)
			return 0;
		int n = poll(&p, 1, left);
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static enum egress_conn_proto proto_of_port(uint16_t port)
{
	return port == POLICY_PORT_HTTP  ? EGRESS_PROTO_HTTP
	       : port == POLICY_PORT_TLS ? EGRESS_PROTO_TLS
	                                 : EGRESS_PROTO_TCP;
}

static int original_dst(int fd, struct policy_addr *ret, uint16_t *ret_port)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	/* SECURITY: conntrack's record of the address the guest's packets
	 * were sent to before the redirect; the guest cannot forge where the
	 * connection arrived (the listener) and this is only what it asked. */
	if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &sin, &len) < 0)
		return -errno;
	if (len < sizeof(sin) || sin.sin_family != AF_INET || sin.sin_port == 0)
		return -EAFNOSUPPORT;
	*ret = (struct policy_addr){.family = AF_INET, .v4 = sin.sin_addr};
	*ret_port = ntohs(sin.sin_port);
	return 0;
}

/* ------------------------------------------------------------ events */

json_t *egress_conn_event_data(const struct egress_conn *c, const char *verdict, const char *reason)
{
	char dst[64] = "";
	if (c->have_dst)
		policy_addr_format(&c->dst, c->port, dst, sizeof(dst));
	/* Every string here is ASCII: canonical hosts, addresses, rule text
	 * (valid UTF-8 from airlockd), escaped reasons. */
	json_t *d =
	    json_pack("{ssss?siss?ss?ssss?ss?}", "proto", proto_names[c->proto], "dst", c->have_dst ? dst : NULL,
	              "port", (int)c->port, "host", c->have_host ? c->host.name : NULL, "addr",
	              c->addr[0] ? c->addr : NULL, "verdict", verdict, "rule", c->rule, "reason", reason);
	if (!d)
		abort();
	if (c->asked[0] && (!c->have_host || strcmp(c->asked, c->host.name) != 0))
		json_object_set_new(d, "asked_host", json_string(c->asked));
	if (c->proto == EGRESS_PROTO_TLS && strcmp(verdict, "allow") == 0) {
		json_object_set_new(d, "tls",
		                    json_string(c->tls == EGRESS_TLS_INTERCEPTED ? "intercepted" : "spliced"));
		json_object_set_new(d, "tls_reason", c->tls_reason ? json_string(c->tls_reason) : json_null());
	}
	return d;
}

static void conn_event(struct egress_conn *c, const char *type, const char *verdict, const char *reason)
{
	egress_event(c->sb, type, egress_conn_event_data(c, verdict, reason));
}

static void conn_event_close(struct egress_conn *c, const char *reason)
{
	json_t *d = egress_conn_event_data(c, "allow", reason);
	json_object_set_new(d, "bytes_up", json_integer((json_int_t)c->bytes_up));
	json_object_set_new(d, "bytes_down", json_integer((json_int_t)c->bytes_down));
	json_object_set_new(d, "duration_ms", json_integer((json_int_t)(now_ms_monotonic() - c->start_ms)));
	egress_event(c->sb, "network.close", d);
}

/* ------------------------------------------------------------ replies */

/* After a reply the guest's unread request bytes would turn our close into
 * a reset that can destroy the reply in flight: read them away, bounded. */
void egress_drain(int fd)
{
	uint64_t deadline = now_ms_monotonic() + DRAIN_TIMEOUT_MS;
	size_t total = 0;
	char sink[4096];
	while (total < DRAIN_MAX) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = remaining_ms(deadline);
		if (left == 0 || poll(&p, 1, left) <= 0)
			return;
		ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
			return;
		if (n > 0)
			total += (size_t)n;
	}
}

size_t egress_http_reply_format(char *buf, size_t size, int status, const char *status_text, const char *body)
{
	int n = snprintf(buf, size,
	                 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
	                 "Connection: close\r\nCache-Control: no-store\r\n\r\n%s",
	                 status, status_text, strlen(body), body);
	return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

void egress_http_reply(int fd, int status, const char *status_text, const char *body)
{
	char resp[1024];
	size_t n = egress_http_reply_format(resp, sizeof(resp), status, status_text, body);
	if (n == 0)
		return;
	if (write_full_timeout(fd, resp, n, EGRESS_REPLY_TIMEOUT_MS) == 0) {
		shutdown(fd, SHUT_WR);
		egress_drain(fd);
	}
}

/* Denied: the event, then the guest learns it (HTTP: 403, or the status
 * egress_plain_first() chose; else a reset). */
static void conn_deny(struct egress_conn *c, const char *reason)
{
	conn_event(c, "network.deny", "deny", reason);
	if (c->proto == EGRESS_PROTO_HTTP && c->len > 0) {
		char body[512];
		if (c->http_status)
			snprintf(body, sizeof(body), "airlock egress gateway: %s\n", reason);
		else
			snprintf(body, sizeof(body), "Forbidden by airlock's egress policy: %s (%s)\n",
			         c->have_host ? c->host.name : "this request", reason);
		egress_http_reply(c->fd, c->http_status ? c->http_status : 403,
		                  c->http_status ? c->http_status_text : "Forbidden", body);
		close(TAKE_FD(c->fd));
		return;
	}
	egress_close_reset(TAKE_FD(c->fd));
}

/* ------------------------------------------------------------ sniffing */

/* Reads what is there, up to cap bytes in all (<= CONN_BUF_MAX), waiting
 * until deadline. Returns bytes read, 0 at EOF, -ETIMEDOUT, -ENOBUFS (cap
 * reached) or -errno. */
static ssize_t conn_read_more(struct egress_conn *c, size_t cap, uint64_t deadline_ms)
{
	if (c->len >= cap)
		return -ENOBUFS;
	for (;;) {
		ssize_t n = recv(c->fd, c->buf + c->len, cap - c->len, MSG_DONTWAIT);
		if (n >= 0) {
			c->len += (size_t)n;
			return n;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		int left = remaining_ms(deadline_ms);
		if (left == 0)
			return -ETIMEDOUT;
		if (poll(&p, 1, left) < 0 && errno != EINTR)
			return -errno;
	}
}

static const char *read_failure(ssize_t n, const char *what)
{
	if (n == 0)
		return "the guest closed the connection before sending its request";
	if (n == -ETIMEDOUT)
		return what;
	return "reading from the guest failed";
}

/* Takes a raw Host or SNI: the escaped text for "asked_host", then the
 * canonical host. SECURITY: raw guest bytes go no further than here. */
static int conn_set_host(struct egress_conn *c, const uint8_t *raw, size_t len, char *reason, size_t reason_size)
{
	egress_text_escape(raw, len, c->asked, sizeof(c->asked));
	struct al_error err = {0};
	if (policy_host_canonicalize(raw, len, &c->host, &err) < 0) {
		snprintf(reason, reason_size, "invalid host name: %.120s", err.message);
		return -EINVAL;
	}
	c->have_host = true;
	return 0;
}

/* SECURITY: the request head is guest input, read into a bounded buffer
 * until the strict parser says it is complete; anything it refuses, and a
 * Host whose port is not the destination port, is denied. The head must
 * also pass egress-http1's parser, which then reads every later request of
 * the connection (egress-plain.c): what that one refuses is answered with
 * its status (400, 403, 405, 431), not 403. */
static int sniff_http(struct egress_conn *c, char *reason, size_t reason_size)
{
	uint64_t deadline = now_ms_monotonic() + c->rt->opt.sniff_timeout_ms;
	struct egress_http_request req;
	struct al_error err = {0};
	int r = -EAGAIN;
	while (r == -EAGAIN) {
		ssize_t n = conn_read_more(c, EGRESS_HTTP_HEAD_MAX, deadline);
		if (n == -ENOBUFS) {
			snprintf(reason, reason_size, "HTTP request head over %d bytes", EGRESS_HTTP_HEAD_MAX);
			return -E2BIG;
		}
		if (n <= 0) {
			snprintf(reason, reason_size, "%s",
			         read_failure(n, "no complete HTTP request head within the time limit"));
			return -EIO;
		}
		r = egress_http_read_request_head(c->buf, c->len, &req, &err);
	}
	if (r < 0) {
		egress_text_escape((const uint8_t *)err.message, strlen(err.message), reason, reason_size);
		return r;
	}
	const uint8_t *h;
	size_t hlen;
	uint16_t hport = 0;
	egress_text_escape((const uint8_t *)req.host, req.host_len, c->asked, sizeof(c->asked));
	if (policy_host_split_port((const uint8_t *)req.host, req.host_len, &h, &hlen, &hport, &err) < 0) {
		snprintf(reason, reason_size, "invalid Host: %.120s", err.message);
		return -EINVAL;
	}
	if (hport != 0 && hport != c->port) {
		snprintf(reason, reason_size, "the Host port (%u) is not the destination port (%u)", hport, c->port);
		return -EINVAL;
	}
	r = conn_set_host(c, h, hlen, reason, reason_size);
	if (r < 0)
		return r;
	return egress_plain_first(c, req.head_len, reason, reason_size);
}

/* SECURITY: the ClientHello is guest input, reassembled from as many
 * segments and records as it comes in (bounded); no SNI, an Encrypted
 * ClientHello, anything malformed, or an IP address as SNI is denied. */
static int sniff_tls(struct egress_conn *c, char *reason, size_t reason_size)
{
	uint64_t deadline = now_ms_monotonic() + c->rt->opt.sniff_timeout_ms;
	struct egress_tls_client_hello hello;
	struct al_error err = {0};
	size_t need = EGRESS_TLS_RECORD_HEADER_SIZE;
	int r = -EAGAIN;
	while (r == -EAGAIN) {
		while (c->len < need) {
			ssize_t n = conn_read_more(c, EGRESS_TLS_PEEK_MAX, deadline);
			if (n <= 0) {
				snprintf(reason, reason_size, "%s",
				         n == -ENOBUFS
				             ? "TLS ClientHello too large"
				             : read_failure(n, "no complete TLS ClientHello within the time limit"));
				return -EIO;
			}
		}
		r = egress_tls_read_client_hello(c->buf, c->len, &hello, &need, &err);
	}
	if (r < 0) {
		const char *what = r == -ENODATA  ? "TLS ClientHello without SNI"
		                   : r == -EACCES ? "Encrypted ClientHello (the server name is hidden)"
		                                  : NULL;
		if (what)
			snprintf(reason, reason_size, "%s", what);
		else
			egress_text_escape((const uint8_t *)err.message, strlen(err.message), reason, reason_size);
		return r;
	}
	r = conn_set_host(c, hello.sni, hello.sni_len, reason, reason_size);
	if (r == 0 && c->host.kind != POLICY_HOST_NAME) {
		/* RFC 6066: a literal IP address is not permitted in SNI. */
		snprintf(reason, reason_size, "an IP address as TLS SNI");
		c->have_host = false;
		return -EINVAL;
	}
	return r;
}

/* ------------------------------------------------------------ dialling */

/* connect() on a non-blocking socket, waiting at most timeout_ms: 0 or
 * -errno. */
static int connect_wait(int fd, const struct sockaddr_storage *ss, socklen_t sl, unsigned timeout_ms)
{
	if (connect(fd, (const struct sockaddr *)ss, sl) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int n;
	do
		n = poll(&p, 1, (int)timeout_ms);
	while (n < 0 && errno == EINTR);
	int soerr = 0;
	socklen_t len = sizeof(soerr);
	if (n == 0)
		return -ETIMEDOUT;
	if (n < 0)
		return -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
		return -errno;
	return -soerr;
}

static int connect_one(struct egress_conn *c, const struct policy_addr *a, char *reason, size_t reason_size)
{
	struct sockaddr_storage ss;
	socklen_t sl = egress_addr_sockaddr(a, c->port, &ss);
	char text[64];
	policy_addr_format(a, c->port, text, sizeof(text));
	cleanup_close int fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(reason, reason_size, "socket: %s", strerror(errno));
		return -errno;
	}
	if (egress_sandbox_set_upstream(c->sb, &c->track, fd) < 0) {
		snprintf(reason, reason_size, "sandbox removed");
		return -ECANCELED;
	}
	/* SECURITY: the address dialled is exactly the one that was checked. */
	int r = connect_wait(fd, &ss, sl, c->rt->opt.connect_timeout_ms);
	if (r < 0) {
		egress_sandbox_set_upstream(c->sb, &c->track, -1);
		snprintf(reason, reason_size, "connecting to %s: %s", text, strerror(-r));
		return r;
	}
	c->up = TAKE_FD(fd);
	snprintf(c->addr, sizeof(c->addr), "%s", text);
	return 0;
}

static int dial_list(struct egress_conn *c, const struct policy_addr *addrs, size_t n, char *reason, size_t reason_size)
{
	int r = -EHOSTUNREACH;
	snprintf(reason, reason_size, "no address to dial");
	for (size_t i = 0; i < n && i < EGRESS_DIAL_ATTEMPTS_MAX; i++) {
		r = connect_one(c, &addrs[i], reason, reason_size);
		if (r == 0 || r == -ECANCELED)
			return r;
	}
	return r;
}

/*
 * Resolves the allowed name and dials one of its checked addresses. IPv4
 * first (the guest has no IPv6); AAAA only when the name has no A record.
 * SECURITY: the guest's destination address plays no part: a connection
 * whose SNI or Host names an allowed host reaches that host only.
 * Returns 0, -EACCES (denied: every address forbidden) or another error
 * (allowed, but unreachable); reason says which.
 */
static int dial_name(struct egress_conn *c, char *reason, size_t reason_size)
{
	struct policy_addr addrs[EGRESS_DNS_ADDRS_MAX];
	size_t n = 0;
	uint32_t ttl;
	int r = egress_resolve_checked(c->rt, c->policy, &c->host, c->port, AF_INET, addrs, ARRAY_SIZE(addrs), &n, &ttl,
	                               reason, reason_size);
	if (r == -ENOENT)
		r = egress_resolve_checked(c->rt, c->policy, &c->host, c->port, AF_INET6, addrs, ARRAY_SIZE(addrs), &n,
		                           &ttl, reason, reason_size);
	if (r < 0)
		return r;
	return dial_list(c, addrs, n, reason, reason_size);
}

/* An IP literal (Host: 203.0.113.7, or an address allowed by an IP rule):
 * exactly that address, if it may be dialled. */
static int dial_addr(struct egress_conn *c, const struct policy_addr *a, char *reason, size_t reason_size)
{
	if (!egress_addr_dialable(c->rt, c->policy, a, c->port)) {
		snprintf(reason, reason_size, "forbidden address (%s)", egress_addr_refusal(a));
		return -EACCES;
	}
	return dial_list(c, a, 1, reason, reason_size);
}

/* ------------------------------------------------------------ relaying */

/* The pipe filled up: bulk data. A bigger pipe moves more per splice
 * (256 KiB took a third less CPU per GiB than 64 KiB, 1 MiB a quarter less
 * again: bench/egress), so it is enlarged, once; a connection that never
 * fills its pipe (a small request or answer) keeps the default and costs
 * no fcntl. Pipes are charged to the gateway's user (64 MiB soft limit by
 * default, then new pipes get one page): enlarged pipes take at most
 * EGRESS_BIG_PIPES_BYTES in all, so a connection flood still gets
 * default-size pipes. */
static void splice_grow(struct egress_splice *d)
{
	static const size_t sizes[] = {EGRESS_PIPE_SIZE, EGRESS_PIPE_SIZE_SMALL};
	d->grown = true;
	for (size_t i = 0; i < ARRAY_SIZE(sizes) && !d->big_bytes; i++) {
		if (sizes[i] <= d->pipe_size)
			break;
		if (atomic_fetch_add(&big_pipe_bytes, sizes[i]) + sizes[i] <= EGRESS_BIG_PIPES_BYTES &&
		    fcntl(d->pipe[1], F_SETPIPE_SZ, (int)sizes[i]) > 0) {
			d->big_bytes = sizes[i];
			d->pipe_size = sizes[i];
		} else {
			atomic_fetch_sub(&big_pipe_bytes, sizes[i]);
		}
	}
}

/* Moves what can be moved without blocking. Returns 0 or -errno. */
int egress_splice_pump(struct egress_splice *d, bool *progress)
{
	for (int round = 0; round < PUMP_ROUNDS; round++) {
		bool moved = false;
		if (!d->eof && d->inpipe < d->pipe_size && d->limit > 0) {
			ssize_t n =
			    splice(d->from, NULL, d->pipe[1], NULL, (size_t)MIN(d->pipe_size - d->inpipe, d->limit),
			           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n > 0) {
				d->inpipe += (size_t)n;
				d->bytes_in += (uint64_t)n;
				d->limit -= (uint64_t)n;
				moved = true;
				if (d->inpipe >= d->pipe_size && !d->grown)
					splice_grow(d);
			} else if (n == 0) {
				d->eof = true;
				moved = true;
			} else if (errno != EAGAIN && errno != EINTR) {
				return -errno;
			}
		}
		if (d->inpipe > 0) {
			ssize_t n = splice(d->pipe[0], NULL, d->to, NULL, d->inpipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n > 0) {
				d->inpipe -= (size_t)n;
				*d->bytes += (uint64_t)n;
				moved = true;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				return -errno;
			}
		}
		if (d->eof && d->inpipe == 0 && !d->shut && !d->hold_shut) {
			/* Half-close: the other side sees EOF, the other
			 * direction goes on. */
			shutdown(d->to, SHUT_WR);
			d->shut = true;
		}
		if (!moved)
			return 0;
		*progress = true;
	}
	return 0;
}

bool egress_splice_open(struct egress_splice *d, int from, int to, uint64_t *bytes)
{
	*d = (struct egress_splice){.from = from, .to = to, .pipe = {-1, -1}, .limit = UINT64_MAX, .bytes = bytes};
	if (pipe2(d->pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return false;
	int size = fcntl(d->pipe[1], F_GETPIPE_SZ);
	d->pipe_size = size > 0 ? (size_t)size : 65536;
	return true;
}

void egress_splice_close(struct egress_splice *d)
{
	if (d->big_bytes) {
		atomic_fetch_sub(&big_pipe_bytes, d->big_bytes);
		d->big_bytes = 0;
	}
	for (int i = 0; i < 2; i++)
		if (d->pipe[i] >= 0)
			close(d->pipe[i]);
	d->pipe[0] = d->pipe[1] = -1;
}

bool egress_splice_wants_in(const struct egress_splice *d)
{
	/* Read only into an empty pipe: a pipe holding data waits for the
	 * writer's POLLOUT instead (a pipe can be full with fewer bytes than
	 * its size, so "not empty" is the only safe test). */
	return !d->eof && d->inpipe == 0 && d->limit > 0;
}

static short relay_events(const struct egress_splice *rd, const struct egress_splice *wr)
{
	short ev = 0;
	if (egress_splice_wants_in(rd))
		ev |= POLLIN;
	if (wr->inpipe > 0)
		ev |= POLLOUT;
	return ev;
}

const char *egress_io_failure(int r, const char *what)
{
	if (r == -ECONNRESET)
		return "reset";
	if (r == -EPIPE)
		return "peer closed";
	return what;
}

void egress_conn_timer_start(struct egress_conn_timer *t, const struct egress_conn *c)
{
	const struct egress_options *o = &c->rt->opt;
	t->end_ms = c->start_ms + (uint64_t)o->max_connection_s * 1000;
	t->idle_ms = (uint64_t)o->idle_timeout_s * 1000;
	t->last_ms = now_ms_monotonic();
}

const char *egress_conn_timer_check(struct egress_conn_timer *t, uint64_t now, bool progress)
{
	if (progress)
		t->last_ms = now;
	if (now >= t->end_ms)
		return "max duration";
	if (now >= t->last_ms + t->idle_ms)
		return "idle timeout";
	return NULL;
}

uint64_t egress_conn_timer_wake(const struct egress_conn_timer *t)
{
	return MIN(t->end_ms, t->last_ms + t->idle_ms);
}

/* Splices both ways until both directions are closed. Returns the reason
 * the connection ended (for the close event). */
static const char *relay(struct egress_conn *c)
{
	cleanup_egress_splice struct egress_splice up = EGRESS_SPLICE_CLOSED, down = EGRESS_SPLICE_CLOSED;
	if (!egress_splice_open(&up, c->fd, c->up, &c->bytes_up) ||
	    !egress_splice_open(&down, c->up, c->fd, &c->bytes_down))
		return "out of resources (pipe)";
	struct egress_conn_timer timer;
	egress_conn_timer_start(&timer, c);
	unsigned fruitless = 0;
	for (;;) {
		bool progress = false;
		int r = egress_splice_pump(&up, &progress);
		if (r == 0)
			r = egress_splice_pump(&down, &progress);
		if (r < 0)
			return egress_io_failure(r, "relay error");
		if (up.shut && down.shut)
			return "closed";
		const char *expired = egress_conn_timer_check(&timer, now_ms_monotonic(), progress);
		if (expired)
			return expired;
		if (progress) {
			/* Pumped again at once (a poll would only cost a syscall). */
			fruitless = 0;
			continue;
		}
		/* A side we want nothing from is left out: a socket reports
		 * POLLHUP whether asked or not, and would wake us in a loop.
		 * Errors show when we next read or write it. Both sides are
		 * never left out: then both directions would be done. */
		short ev_client = relay_events(&up, &down), ev_server = relay_events(&down, &up);
		struct pollfd p[2] = {
		    {.fd = ev_client ? c->fd : -1, .events = ev_client},
		    {.fd = ev_server ? c->up : -1, .events = ev_server},
		};
		/* POLLOUT can come a little before a splice would succeed:
		 * after many fruitless wake-ups, breathe instead of spinning. */
		if (++fruitless > 64)
			poll(NULL, 0, 1);
		int n = poll(p, 2, remaining_ms(egress_conn_timer_wake(&timer)));
		if (n < 0 && errno != EINTR)
			return "relay error";
	}
}

/* ------------------------------------------------------------ deciding */

/* Other ports: no sniffing (the server may speak first). The destination
 * is allowed by an IP/CIDR rule for that port, or by a rule for that port
 * naming one of the names this sandbox's DNS answers gave for the address.
 * A deny rule matching the address or any of those names wins. */
static int decide_other(struct egress_conn *c, bool *ret_by_name, char *reason, size_t reason_size)
{
	const char *addr_rule = NULL, *deny_rule = NULL, *name_rule = NULL;
	bool addr_ok = egress_policy_decide_addr(c->policy, &c->dst, c->port, &addr_rule);
	if (!addr_ok && addr_rule)
		deny_rule = addr_rule;
	char names[EGRESS_NAMEMAP_NAMES_MAX][POLICY_HOST_NAME_MAX + 1];
	size_t n = egress_namemap_find(c->sb, &c->dst, names, ARRAY_SIZE(names));
	struct policy_host allowed_host;
	bool have_allowed = false;
	for (size_t i = 0; i < n; i++) {
		struct policy_host h;
		if (policy_host_canonicalize((const uint8_t *)names[i], strlen(names[i]), &h, NULL) < 0)
			continue;
		const char *rule = NULL;
		if (egress_policy_decide_host(c->policy, &h, c->port, &rule)) {
			if (!have_allowed) {
				allowed_host = h;
				name_rule = rule;
				have_allowed = true;
			}
		} else if (rule && !deny_rule) {
			deny_rule = rule;
			c->host = h; /* the denied name, for the event */
			c->have_host = true;
		}
	}
	if (deny_rule) {
		c->rule = deny_rule;
		snprintf(reason, reason_size, "denied by rule");
		return -EACCES;
	}
	if (addr_ok) {
		c->rule = addr_rule;
		*ret_by_name = false;
		return 0;
	}
	if (have_allowed) {
		c->host = allowed_host;
		c->have_host = true;
		c->rule = name_rule;
		*ret_by_name = true;
		return 0;
	}
	snprintf(reason, reason_size, "%s",
	         n ? "no rule allows this port for the names of this address"
	           : "no rule allows this address and port (and no DNS answer named it)");
	return -EACCES;
}

static void conn_run(struct egress_conn *c)
{
	char reason[REASON_MAX] = "";
	int r = original_dst(c->fd, &c->dst, &c->port);
	if (r < 0) {
		conn_deny(c, "no original destination");
		return;
	}
	c->have_dst = true;
	c->proto = proto_of_port(c->port);
	c->buf = xmalloc(CONN_BUF_MAX);

	if (c->proto == EGRESS_PROTO_HTTP)
		r = sniff_http(c, reason, sizeof(reason));
	else if (c->proto == EGRESS_PROTO_TLS)
		r = sniff_tls(c, reason, sizeof(reason));
	if (r < 0) {
		conn_deny(c, reason);
		return;
	}

	/* SECURITY: one policy reference for the whole decision. */
	c->policy = egress_policy_slot_get(&c->sb->policy);
	bool by_name;
	if (c->proto == EGRESS_PROTO_TCP) {
		r = decide_other(c, &by_name, reason, sizeof(reason));
	} else {
		by_name = c->host.kind == POLICY_HOST_NAME;
		if (!egress_policy_decide_host(c->policy, &c->host, c->port, &c->rule)) {
			snprintf(reason, sizeof(reason), "%s", c->rule ? "denied by rule" : "no rule allows it");
			r = -EACCES;
		}
	}
	if (r == 0 && c->proto == EGRESS_PROTO_TLS)
		r = egress_intercept_decide(c, reason, sizeof(reason));
	if (r < 0) {
		conn_deny(c, reason);
		return;
	}

	/* Allowed: only now is anything resolved or dialled. */
	if (by_name)
		r = dial_name(c, reason, sizeof(reason));
	else
		r = dial_addr(c, c->proto == EGRESS_PROTO_TCP ? &c->dst : &c->host.addr, reason, sizeof(reason));
	if (r == -EACCES) {
		conn_deny(c, reason);
		return;
	}
	conn_event(c, "network.allow", "allow", r < 0 ? reason : NULL);
	if (r < 0) {
		if (c->proto == EGRESS_PROTO_HTTP && r != -ECANCELED) {
			char body[512];
			snprintf(body, sizeof(body), "airlock egress gateway: cannot reach %s: %s\n", c->host.name,
			         reason);
			egress_http_reply(c->fd, 502, "Bad Gateway", body);
		}
		conn_event_close(c, reason);
		return;
	}

	if (c->tls == EGRESS_TLS_INTERCEPTED) {
		const char *why = egress_intercept_run(c, reason, sizeof(reason));
		conn_event_close(c, egress_sandbox_removed(c->sb) ? "sandbox removed" : why);
		return;
	}
	if (c->proto == EGRESS_PROTO_HTTP) {
		const char *why = egress_plain_run(c, reason, sizeof(reason));
		conn_event_close(c, egress_sandbox_removed(c->sb) ? "sandbox removed" : why);
		return;
	}

	/* What was read to decide goes first, unchanged. */
	if (c->len > 0) {
		r = write_full_timeout(c->up, c->buf, c->len, (int)MIN(c->rt->opt.idle_timeout_s * 1000u, INT32_MAX));
		if (r < 0) {
			conn_event_close(c, "writing to the server failed");
			return;
		}
		c->bytes_up += c->len;
	}
	free(TAKE_PTR(c->buf));
	const char *why = relay(c);
	if (egress_sandbox_removed(c->sb))
		why = "sandbox removed";
	conn_event_close(c, why);
}

static void conn_free(struct egress_conn *c)
{
	egress_sandbox_untrack(c->sb, &c->track, false);
	if (c->fd >= 0)
		close(c->fd);
	if (c->up >= 0)
		close(c->up);
	free(c->buf);
	egress_http1_parser_free(c->http1);
	egress_policy_unref(c->policy);
	egress_bindings_unref(c->bindings);
	egress_ca_unref(c->ca);
	egress_sandbox_unref(c->sb);
	atomic_fetch_sub(&c->rt->n_conns, 1);
	free(c);
}

/* ------------------------------------------------------------ threads */

/*
 * A connection's thread does not exit when the connection ends: it waits
 * (at most CONN_IDLE_MS, at most CONN_IDLE_THREADS of them) for the next
 * connection, which then costs a wake-up instead of a clone, a new stack
 * and an exit (bench/egress: connection latency). A connection is handed
 * to an idle thread only when one is free to take it; else it gets a new
 * thread, as before. The connection limits count connections, not
 * threads, and are unchanged.
 */
#define CONN_IDLE_THREADS 16
#define CONN_IDLE_MS 10000

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond;       /* CLOCK_MONOTONIC; initialised by egress_loop_run */
static struct egress_conn *idle_queue; /* handed over, not yet taken (LIFO, linked by next_idle) */
static unsigned idle_threads;          /* waiting for a connection */
static unsigned idle_queued;           /* in idle_queue; always <= idle_threads */

/* Hands c to an idle thread; false when none is free. */
static bool conn_handoff(struct egress_conn *c)
{
	pthread_mutex_lock(&idle_lock);
	bool ok = idle_threads > idle_queued;
	if (ok) {
		c->next_idle = idle_queue;
		idle_queue = c;
		idle_queued++;
		pthread_cond_signal(&idle_cond);
	}
	pthread_mutex_unlock(&idle_lock);
	return ok;
}

/* The next connection for this thread, or NULL (time to exit). */
static struct egress_conn *conn_wait_next(void)
{
	struct timespec until = monotonic_in_ms(CONN_IDLE_MS);
	pthread_mutex_lock(&idle_lock);
	if (idle_threads >= CONN_IDLE_THREADS) {
		pthread_mutex_unlock(&idle_lock);
		return NULL;
	}
	idle_threads++;
	int r = 0;
	while (!idle_queue && r != ETIMEDOUT)
		r = pthread_cond_timedwait(&idle_cond, &idle_lock, &until);
	/* A queued connection is taken even after the time is up: it was
	 * queued because this thread counted as idle. */
	struct egress_conn *c = idle_queue;
	if (c) {
		idle_queue = c->next_idle;
		idle_queued--;
	}
	idle_threads--;
	pthread_mutex_unlock(&idle_lock);
	return c;
}

static void *conn_main(void *arg)
{
	for (struct egress_conn *c = arg; c; c = conn_wait_next()) {
		conn_run(c);
		conn_free(c);
	}
	return NULL;
}

/* Refused before a thread exists: the event, then a reset. */
static void conn_refuse(struct egress_runtime *rt, struct egress_sandbox *sb, int fd, const char *reason)
{
	struct egress_conn c = {.rt = rt, .sb = sb, .fd = fd, .up = -1};
	if (original_dst(fd, &c.dst, &c.port) == 0) {
		c.have_dst = true;
		c.proto = proto_of_port(c.port);
	} else {
		c.proto = EGRESS_PROTO_TCP;
	}
	conn_event(&c, "network.deny", "deny", reason);
	egress_close_reset(fd);
}

static void conn_start(struct egress_runtime *rt, struct egress_sandbox *sb, int fd)
{
	if (atomic_fetch_add(&rt->n_conns, 1) >= rt->opt.max_connections) {
		atomic_fetch_sub(&rt->n_conns, 1);
		conn_refuse(rt, sb, fd, "connection limit");
		return;
	}
	struct egress_conn *c = xcalloc(1, sizeof(*c));
	*c = (struct egress_conn){.rt = rt, .fd = fd, .up = -1, .start_ms = now_ms_monotonic()};
	c->track = (struct egress_track){.client_fd = fd, .upstream_fd = -1};
	if (!egress_sandbox_track(sb, &c->track, false)) {
		free(c);
		atomic_fetch_sub(&rt->n_conns, 1);
		conn_refuse(rt, sb, fd, "connection limit");
		return;
	}
	c->sb = egress_sandbox_ref(sb);
	if (conn_handoff(c))
		return;
	int r = egress_thread_start(conn_main, c);
	if (r < 0) {
		egress_log(EGRESS_LOG_WARN, "%s: no thread for a connection: %s", sb->id, strerror(-r));
		c->fd = -1;
		conn_free(c);
		conn_refuse(rt, sb, fd, "out of resources");
	}
}

/* ------------------------------------------------------------ the loop */

/* accept4() that sheds the connection instead of spinning when the process
 * is out of fds. Returns the fd (O_CLOEXEC|O_NONBLOCK) or -errno. */
static int accept_one(struct egress_runtime *rt, int listen_fd)
{
	for (;;) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0)
			return fd;
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if ((errno == EMFILE || errno == ENFILE) && rt->reserve_fd >= 0) {
			/* Out of fds: a level-triggered listener would wake us
			 * forever. Use the reserve to take one connection and
			 * reset it, so the guest sees a refusal. */
			close(rt->reserve_fd);
			fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				egress_close_reset(fd);
			rt->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			egress_log(EGRESS_LOG_WARN, "out of file descriptors: a connection was refused");
			return -EMFILE;
		}
		return -errno;
	}
}

void egress_accept_batch(struct egress_runtime *rt, struct egress_sandbox *sb, int which, const char *what,
                         void (*start)(struct egress_runtime *rt, struct egress_sandbox *sb, int fd))
{
	for (int i = 0; i < EGRESS_LOOP_BATCH; i++) {
		int fd = accept_one(rt, sb->fds[which]);
		if (fd < 0) {
			if (fd != -EAGAIN && fd != -EMFILE)
				egress_log(EGRESS_LOG_WARN, "%s: %s: %s", sb->id, what, strerror(-fd));
			return;
		}
		start(rt, sb, fd);
	}
}

void egress_conn_accept(struct egress_runtime *rt, struct egress_sandbox *sb)
{
	egress_accept_batch(rt, sb, EGRESS_FD_TCP, "accept", conn_start);
}

int egress_loop_watch(struct egress_runtime *rt, struct egress_sandbox *sb)
{
	for (unsigned i = 0; i < EGRESS_FD_COUNT; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = sb->key << 2 | i};
		if (epoll_ctl(rt->epoll_fd, EPOLL_CTL_ADD, sb->fds[i], &ev) < 0)
			return -errno;
	}
	return 0;
}

void egress_loop_unwatch(struct egress_runtime *rt, struct egress_sandbox *sb)
{
	for (unsigned i = 0; i < EGRESS_FD_COUNT; i++)
		if (sb->fds[i] >= 0)
			epoll_ctl(rt->epoll_fd, EPOLL_CTL_DEL, sb->fds[i], NULL);
}

int egress_loop_run(struct egress_runtime *rt)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&idle_cond, &ca);
	pthread_condattr_destroy(&ca);
	struct epoll_event evs[64];
	for (;;) {
		int n = epoll_wait(rt->epoll_fd, evs, ARRAY_SIZE(evs), -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			egress_log(EGRESS_LOG_ERROR, "epoll_wait: %s", strerror(errno));
			return -errno;
		}
		pthread_mutex_lock(&rt->loop_lock);
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			if (tag == 0) {
				pthread_mutex_unlock(&rt->loop_lock);
				return 0;
			}
			/* A sandbox removed (or re-added) since epoll_wait
			 * returned is not found: the event is stale. */
			struct egress_sandbox *sb = egress_sandbox_by_key(rt, tag >> 2);
			if (!sb)
				continue;
			switch (tag & 3) {
			case EGRESS_FD_TCP:
				egress_conn_accept(rt, sb);
				break;
			case EGRESS_FD_DNS_UDP:
				egress_dnsd_udp_ready(rt, sb);
				break;
			case EGRESS_FD_DNS_TCP:
				egress_dnsd_tcp_accept(rt, sb);
				break;
			}
		}
		pthread_mutex_unlock(&rt->loop_lock);
	}
}
