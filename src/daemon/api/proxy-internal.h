/* SPDX-License-Identifier: Apache-2.0 */
/* What the proxy's listener (proxy-server.c) and its relay (proxy-relay.c)
 * share: one client connection. */
#ifndef AIRLOCK_PROXY_INTERNAL_H
#define AIRLOCK_PROXY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api-connlimit.h"
#include "proxy-http.h"
#include "proxy.h"
#include "sandbox.h"

#define PROXY_IN_MAX (PROXY_HEAD_MAX + 64 * 1024) /* client bytes buffered: a head and what follows */

struct proxy_conn {
	struct proxy_server *srv;
	int fd;
	struct conn_slot *slot;
	char source[CONN_SOURCE_MAX + 1];   /* the connection caps' key */
	char source64[CONN_SOURCE_MAX + 1]; /* auth failures' key (IPv6: its /64) */
	char addr[64];                      /* the client's address, for X-Forwarded-For */
	struct proxy_conn *prev, *next;     /* the server's list */
	bool answer_close;                  /* the proxy's answers to this request say Connection: close */
	bool answer_head;                   /* ... and have no body (a HEAD request) */
	/* Client bytes: in[0, in_len); a parsed head is at the front. */
	size_t in_len;
	uint8_t in[PROXY_IN_MAX];
	/* The guest's bytes of a response being relayed. */
	size_t r_len;
	uint8_t rbuf[PROXY_RESPONSE_HEAD_MAX];
	char out[PROXY_OUT_MAX];
	struct proxy_head head, rhead;
	/* The guest connection the last response left open (-1: none): the
	 * next request to the same sandbox and port on this connection reuses
	 * it, as browsers' kept-alive connections expect (a new one costs the
	 * guest an accept per request). Never another route's. */
	int up_fd;
	char up_id[SANDBOX_ID_MAX + 1];
	unsigned up_port;
};

/* A request that passed routing and access, about to be relayed. */
struct proxy_request {
	struct proxy_route route;
	size_t head_len;        /* bytes of the client's head at the front of in */
	const char *guest_head; /* the rewritten head for the guest */
	size_t guest_head_len;
	bool head_method;        /* HEAD: the response has no body */
	bool client_http11;      /* an HTTP/1.0 client gets no 1xx */
	bool client_keep_alive;  /* the client may send another request */
	bool upgrade;            /* the client asked for an Upgrade */
	uint64_t max_body_bytes; /* --proxy-max-body-mib */
	unsigned idle_timeout_s;
};

/* Relays one request to the guest's socket gfd and its response back,
 * streaming both ways; a 101 splices the two sockets until one side
 * closes. gfd is closed unless *ret_reusable says the guest left it ready
 * for another request (a complete response, framed by length or chunks or
 * bodiless, no Connection: close, nothing after it): then it is the
 * caller's. Returns true when the client connection may carry the next
 * request (the bytes after this request are at the front of in).
 * *ret_status: the status the client got (0: none). */
bool proxy_relay(struct proxy_conn *c, const struct proxy_request *req, int gfd, int *ret_status, bool *ret_reusable);

/* The connection was upgraded: its slot stays busy for good. */
void proxy_conn_pin(struct proxy_conn *c);
/* Sends all of buf; false when the peer is gone or stalled (SO_SNDTIMEO). */
bool proxy_send_all(int fd, const void *buf, size_t len);
/* Answers with a short text of the proxy's own (proxy_answer_format). */
void proxy_answer(struct proxy_conn *c, int status, bool close, const char *extra, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
