/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every request of a connection checked before a byte of it goes to the
 * server: what plain HTTP (egress-plain.c) and intercepted TLS
 * (egress-intercept.c) share. They move bytes each their own way (splice,
 * OpenSSL); both read the guest's requests with egress-http1's parser, check
 * each head's Host and the sandbox's current policy the same way, and refuse
 * a request the same way: a "network.deny" event at once, the answer once
 * the server is done with the requests before it, then the end.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egress-http1.h"
#include "egress-runtime.h"
#include "util.h"

int egress_request_refusal(const struct egress_conn *c, int r, const struct al_error *err, bool in_body,
                           const char **ret_text, char *why, size_t why_size)
{
	/* egress-http1's messages quote no guest bytes; those about methods
	 * and upgrades speak of intercepted connections, so plain HTTP says
	 * its own. */
	if (c->proto == EGRESS_PROTO_TLS)
		snprintf(why, why_size, "%.150s", err->message[0] ? err->message : "malformed request");
	else if (err->code == AL_ERR_METHOD)
		snprintf(why, why_size, "HTTP request refused: CONNECT, TRACE and TRACK are not served");
	else if (err->code == AL_ERR_FORBIDDEN && strstr(err->message, "upgrades"))
		snprintf(why, why_size, "HTTP request refused: protocol upgrades (WebSocket, h2c) are not served");
	else
		snprintf(why, why_size, "%.150s", err->message[0] ? err->message : "malformed HTTP request");

	if (r == -ENOMSG) {
		*ret_text = "Expectation Failed";
		return 417;
	}
	if (err->code == AL_ERR_METHOD) {
		*ret_text = "Method Not Allowed";
		return 405;
	}
	if (err->code == AL_ERR_FORBIDDEN) {
		*ret_text = "Forbidden";
		return 403;
	}
	if (r == -E2BIG && in_body) {
		*ret_text = "Content Too Large";
		return 413;
	}
	if (r == -E2BIG) {
		*ret_text = "Request Header Fields Too Large";
		return 431;
	}
	*ret_text = "Bad Request";
	return 400;
}

void egress_requests_refuse(struct egress_requests *rq, int status, const char *status_text,
                            const struct egress_request_shown *shown, const char *method, const char *rule,
                            const char *reason)
{
	/* "network.deny" for one request of an allowed connection: proto
	 * "http", or "https" on an intercepted TLS connection; host the
	 * connection's, the Host as asked when it differs. */
	struct egress_conn *c = rq->c;
	json_t *d = egress_conn_event_data(c, "deny", reason);
	if (c->proto == EGRESS_PROTO_TLS)
		json_object_set_new(d, "proto", json_string("https"));
	json_object_set_new(d, "rule", rule ? json_string(rule) : json_null());
	if (shown && strcmp(shown->asked, c->host.name) != 0)
		json_object_set_new(d, "asked_host", json_string(shown->asked));
	else
		json_object_del(d, "asked_host");
	if (method)
		json_object_set_new(d, "method", json_string(method));
	if (shown)
		json_object_set_new(d, "path", json_string(shown->path));
	egress_event(c->sb, "network.deny", d);

	rq->refusing = true;
	rq->status = status;
	rq->status_text = status_text;
	snprintf(rq->reason, sizeof(rq->reason), "%s", reason);
	rq->refuse_ms = now_ms_monotonic();
}

int egress_requests_feed(struct egress_requests *rq, size_t *ret_used)
{
	size_t used = 0;
	struct al_error err = {0};
	const uint8_t *data = rq->in + rq->in_off;
	int ev = egress_http1_feed(rq->parser, data, rq->in_len - rq->in_off, &used, &err);
	if (ev < 0) {
		/* A request the parser refused. */
		char why[EGRESS_REQUEST_REASON_MAX];
		const char *text;
		int status = egress_request_refusal(rq->c, ev, &err, rq->in_body, &text, why, sizeof(why));
		egress_requests_refuse(rq, status, text, NULL, NULL, NULL, why);
		return ev;
	}
	rq->in_off += used;
	rq->parse_pending = ev != EGRESS_HTTP1_EV_NEED_MORE;
	switch (ev) {
	case EGRESS_HTTP1_EV_HEAD:
		rq->in_body = true;
		break;
	case EGRESS_HTTP1_EV_BODY:
		/* Forwarded as framed, unchanged, straight from the buffer
		 * (nothing more is read into it until this is written). */
		rq->out = data;
		rq->out_len = used;
		rq->out_off = 0;
		break;
	case EGRESS_HTTP1_EV_END:
		rq->in_body = false;
		break;
	default:
		break;
	}
	*ret_used = used;
	return ev;
}

int egress_requests_check_head(struct egress_requests *rq, const struct egress_http1_head *h,
                               struct egress_request_shown *shown, struct policy_host *ret_host)
{
	struct egress_conn *c = rq->c;
	char why[EGRESS_REQUEST_REASON_MAX];
	egress_text_escape((const uint8_t *)h->host, h->host_len, shown->asked, sizeof(shown->asked));
	egress_text_escape((const uint8_t *)egress_http1_span_ptr(h, h->path), h->path.len, shown->path,
	                   sizeof(shown->path));

	/* SECURITY: the connection was decided, resolved, dialled (and, when
	 * intercepted, verified and given secrets) for one host name: the
	 * first request's Host, or the TLS server name. A server hosting
	 * several sites (virtual hosts, CDNs) routes each request by its
	 * Host, so no request may name another (domain fronting). */
	const uint8_t *hp;
	size_t hl;
	uint16_t hport = 0;
	struct policy_host host;
	if (policy_host_split_port((const uint8_t *)h->host, h->host_len, &hp, &hl, &hport, NULL) < 0 ||
	    policy_host_canonicalize(hp, hl, &host, NULL) < 0) {
		egress_requests_refuse(rq, 400, "Bad Request", shown, h->method, NULL, "invalid Host");
		return -EINVAL;
	}
	if ((hport != 0 && hport != c->port) || strcmp(host.name, c->host.name) != 0) {
		snprintf(why, sizeof(why), "Host %.80s is not %s %.80s", shown->asked,
		         c->proto == EGRESS_PROTO_TLS ? "the TLS server name" : "this connection's host", c->host.name);
		egress_requests_refuse(rq, 421, "Misdirected Request", shown, h->method, NULL, why);
		return -EACCES;
	}
	/* The sandbox's policy as it is now (it may have changed since the
	 * connection was decided). */
	cleanup_egress_policy struct egress_policy *policy = egress_policy_slot_get(&c->sb->policy);
	const char *rule = NULL;
	if (!egress_policy_decide_host(policy, &host, c->port, &rule)) {
		snprintf(why, sizeof(why), "%s is not allowed by the sandbox's egress policy", host.name);
		/* (rule lives in policy: the event copies it first.) */
		egress_requests_refuse(rq, 403, "Forbidden", shown, h->method, rule, why);
		return -EACCES;
	}
	*ret_host = host;
	return 0;
}
