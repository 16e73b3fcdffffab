/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The port proxy's listener and its connections (proxy.h): one thread per
 * client connection (small stacks), each reading request heads within
 * --proxy-header-timeout-s, routing and authorizing every request on its
 * own, dialing the guest's port in the sandbox's namespace and handing the
 * exchange to the relay (proxy-relay.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "log.h"
#include "metrics.h"
#include "proxy-internal.h"
#include "util.h"

#define PROXY_LINGER_MS 1000    /* reading what a refused client still sends, so it sees the answer */
#define PROXY_STOP_WAIT_MS 5000 /* stop waits this long for connection threads */
#define PROXY_URL_FORMS                                                                                                \
	"A sandbox's port is reached at http://<port>-<sandbox id>.%s/ or at http://HOST/sandbox/<sandbox "            \
	"id>/<port>/ (docs/api.md, \"Ports\").\n"

struct proxy_server {
	int listen_fd;
	pthread_t accept_thread;
	struct conn_table *conns;
	char domain[PROXY_DOMAIN_MAX + 1];
	struct proxy_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t idle;
	bool stopping;
	unsigned active;
	struct proxy_conn *list;
};

const char *proxy_server_domain(const struct proxy_server *s)
{
	return s->domain;
}

void proxy_conn_pin(struct proxy_conn *c)
{
	conn_table_pin(c->srv->conns, c->slot);
}

/* ------------------------------------------------------------ answers */

void proxy_answer(struct proxy_conn *c, int status, bool close, const char *extra, const char *fmt, ...)
{
	char body[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	size_t n = proxy_answer_format(c->out, sizeof(c->out), status, close || c->answer_close, extra, body);
	/* An answer to HEAD has no body: the next answer on the connection would start inside it. */
	const char *end = c->answer_head ? strstr(c->out, "\r\n\r\n") : NULL;
	if (end)
		n = (size_t)(end + 4 - c->out);
	proxy_send_all(c->fd, c->out, n);
}

/* After a refusal with "Connection: close": the client may still be sending
 * (a head over the limit, a body); reading a little of it first keeps the
 * kernel from answering it with a reset that destroys the answer. */
static void linger_close(struct proxy_conn *c)
{
	shutdown(c->fd, SHUT_WR);
	uint64_t deadline = now_ms_monotonic() + PROXY_LINGER_MS;
	uint8_t buf[4096];
	size_t total = 0;
	while (total < 256 * 1024) {
		uint64_t now = now_ms_monotonic();
		if (now >= deadline)
			break;
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		if (poll(&p, 1, (int)(deadline - now)) <= 0)
			break;
		ssize_t n = read(c->fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		total += (size_t)n;
	}
}

/* ------------------------------------------------------------ request heads */

enum head_result {
	HEAD_OK,
	HEAD_CLOSED, /* the client closed, or kept silent between requests: no answer */
	HEAD_REFUSED,
};

/* Reads until a complete head is at the front of in. The first request's
 * head, and every head once its first byte came, must be in within the
 * header timeout (408); between requests a connection may be silent for
 * PROXY_KEEPALIVE_S. */
static enum head_result head_read(struct proxy_conn *c, bool first, size_t *ret_head_len, int *ret_status)
{
	const struct proxy_config *cfg = &c->srv->cfg;
	uint64_t start = now_ms_monotonic();
	uint64_t deadline = c->in_len || first ? start + cfg->header_timeout_s * 1000ull : 0;
	for (;;) {
		size_t hl = proxy_head_end((const char *)c->in, MIN(c->in_len, (size_t)PROXY_HEAD_MAX));
		if (hl) {
			*ret_head_len = hl;
			return HEAD_OK;
		}
		if (c->in_len >= PROXY_HEAD_MAX) {
			proxy_answer(c, 431, true, NULL, "the request head is larger than %d bytes\n", PROXY_HEAD_MAX);
			*ret_status = 431;
			return HEAD_REFUSED;
		}
		uint64_t now = now_ms_monotonic();
		uint64_t until = deadline ? deadline : start + PROXY_KEEPALIVE_S * 1000ull;
		if (now >= until) {
			if (!deadline || (c->in_len == 0 && first))
				return HEAD_CLOSED;
			proxy_answer(c, 408, true, NULL, "the request head did not arrive within %u s\n",
			             cfg->header_timeout_s);
			*ret_status = 408;
			return HEAD_REFUSED;
		}
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		int pr = poll(&p, 1, (int)(until - now));
		if (pr < 0 && errno != EINTR)
			return HEAD_CLOSED;
		if (pr <= 0)
			continue;
		ssize_t n = read(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return HEAD_CLOSED;
		if (c->in_len == 0 && !deadline)
			deadline = now_ms_monotonic() + cfg->header_timeout_s * 1000ull;
		c->in_len += (size_t)n;
	}
}

/* ------------------------------------------------------------ access */

struct credentials {
	char header[PROXY_TOKEN_MAX + 1]; /* X-Airlock-Traffic-Token or e2b-traffic-access-token */
	bool has_header;
	char cookie_token[PROXY_TOKEN_MAX + 1];
	bool has_cookie;
	char cookie_rest[PROXY_HEAD_MAX]; /* the other cookies */
	char authorization[AUTH_HEADER_MAX + 1];
	bool has_authorization, authorization_ours; /* a Bearer alk_... value: never forwarded */
};

static void field_copy(const struct proxy_head *h, int i, char *out, size_t size)
{
	size_t n = MIN((size_t)h->fields[i].value.len, size - 1);
	memcpy(out, h->raw + h->fields[i].value.off, n);
	out[n] = '\0';
}

/* SECURITY: collects every credential the proxy reads, under any spelling
 * of its name a server could take for it, so that all of them are stripped. */
static int credentials_collect(const struct proxy_head *h, struct credentials *cr)
{
	for (size_t i = 0; i < h->n_fields; i++) {
		const char *name = h->raw + h->fields[i].name.off;
		size_t nlen = h->fields[i].name.len;
		if (proxy_name_alike(name, nlen, "x-airlock-traffic-token") ||
		    proxy_name_alike(name, nlen, "e2b-traffic-access-token")) {
			field_copy(h, (int)i, cr->header, sizeof(cr->header));
			cr->has_header = true;
		} else if (proxy_name_alike(name, nlen, "cookie")) {
			if (proxy_cookie_take(h->raw + h->fields[i].value.off, h->fields[i].value.len, cr->cookie_token,
			                      sizeof(cr->cookie_token), cr->cookie_rest, sizeof(cr->cookie_rest)) > 0)
				cr->has_cookie = true;
		} else if (proxy_name_alike(name, nlen, "authorization")) {
			if (h->fields[i].value.len > AUTH_HEADER_MAX)
				continue;
			field_copy(h, (int)i, cr->authorization, sizeof(cr->authorization));
			cr->has_authorization = true;
			/* Sticky: one Bearer alk_… among several Authorization fields drops them all. */
			cr->authorization_ours =
			    cr->authorization_ours || strncasecmp(cr->authorization, "bearer alk_", 11) == 0;
		}
	}
	return 0;
}

static void auth_failed(struct proxy_conn *c, const struct proxy_head *h, const char *credential, enum auth_failure why)
{
	char method[PROXY_METHOD_MAX + 1], target[256];
	snprintf(method, sizeof(method), "%.*s", (int)h->method.len, h->raw + h->method.off);
	snprintf(target, sizeof(target), "%.*s", (int)MIN(h->target.len, 255u), h->raw + h->target.off);
	const char *const parts[] = {method, target, credential};
	api_auth_failure_note(c->source64, c->addr, parts, why);
}

enum access {
	ACCESS_OK,
	ACCESS_ANSWERED, /* refused: the answer was sent */
};

/* Who may reach the port (docs/api.md, "Ports"): anyone when it is public;
 * else the sandbox's traffic token (header or cookie) or a token of its
 * tenant. *ret_bearer: access came from the Authorization header. */
static enum access access_check(struct proxy_conn *c, const struct proxy_head *h, const struct proxy_route *rt,
                                const struct port_target *pt, const struct credentials *cr, bool *ret_bearer,
                                int *ret_status)
{
	*ret_bearer = false;
	if (pt->public_port)
		return ACCESS_OK;
	if (cr->has_header && sandbox_traffic_token_check(pt->tenant, rt->id, cr->header))
		return ACCESS_OK;
	if (cr->has_cookie && sandbox_traffic_token_check(pt->tenant, rt->id, cr->cookie_token))
		return ACCESS_OK;
	if (cr->has_authorization) {
		char tenant[TENANT_NAME_MAX + 1];
		enum auth_failure why = AUTH_FAILURE_UNKNOWN;
		struct al_error err = {0};
		int r = auth_token_verify(cr->authorization, tenant, &why, &err);
		if (r >= 0 && strcmp(tenant, pt->tenant) == 0) {
			*ret_bearer = true;
			return ACCESS_OK;
		}
		if (r >= 0) {
			proxy_answer(c, 403, false, NULL,
			             "forbidden: port %u of sandbox %s is a port of another tenant's sandbox\n",
			             rt->port, rt->id);
			*ret_status = 403;
			return ACCESS_ANSWERED;
		}
		if (r != -EACCES) {
			proxy_answer(c, 500, true, NULL, "%s\n", err.message);
			*ret_status = 500;
			return ACCESS_ANSWERED;
		}
		auth_failed(c, h, cr->authorization, why);
	} else if (cr->has_header || cr->has_cookie) {
		auth_failed(c, h, cr->has_header ? cr->header : cr->cookie_token, AUTH_FAILURE_UNKNOWN);
	} else {
		auth_failed(c, h, "", AUTH_FAILURE_MISSING);
	}
	proxy_answer(c, 401, false, "WWW-Authenticate: Bearer realm=\"airlock\"\r\n",
	             "unauthorized: port %u of sandbox %s needs its traffic token (X-Airlock-Traffic-Token, or "
	             "?airlock_token= once in a browser) or a token of its tenant (Authorization: Bearer)%s\n",
	             rt->port, rt->id,
	             cr->has_header || cr->has_cookie || cr->has_authorization ? "; the one given is not valid" : "");
	*ret_status = 401;
	return ACCESS_ANSWERED;
}

/* ?airlock_token=att_... : a valid one is set as a cookie and the browser
 * sent back to the URL without it (so it does not stay in the address bar,
 * the history or a Referer). */
static enum access query_token(struct proxy_conn *c, const struct proxy_head *h, const struct proxy_route *rt,
                               const struct port_target *pt, bool *ret_handled, int *ret_status)
{
	char token[PROXY_TOKEN_MAX + 1], target[PROXY_HEAD_MAX];
	*ret_handled = false;
	int r =
	    proxy_query_take_token(h->raw + h->target.off, h->target.len, token, sizeof(token), target, sizeof(target));
	if (r == 0)
		return ACCESS_OK;
	*ret_handled = true;
	if (r < 0 || !sandbox_traffic_token_check(pt->tenant, rt->id, token)) {
		auth_failed(c, h, r < 0 ? "" : token, r < 0 ? AUTH_FAILURE_MALFORMED : AUTH_FAILURE_UNKNOWN);
		proxy_answer(c, 401, false, NULL,
		             "unauthorized: the airlock_token in the URL is not port %u of sandbox %s's "
		             "traffic token\n",
		             rt->port, rt->id);
		*ret_status = 401;
		return ACCESS_ANSWERED;
	}
	char extra[PROXY_HEAD_MAX + PROXY_TOKEN_MAX + 256];
	char path[64] = "/";
	if (rt->path_form)
		snprintf(path, sizeof(path), "%s%s/", PROXY_PATH_PREFIX, rt->id);
	snprintf(extra, sizeof(extra), "Location: %s\r\nSet-Cookie: %s=%s; HttpOnly; SameSite=Lax; Path=%s\r\n", target,
	         PROXY_COOKIE_NAME, token, path);
	proxy_answer(c, 302, false, extra, "the traffic token is now a cookie; go on to %s\n", target);
	*ret_status = 302;
	return ACCESS_ANSWERED;
}

/* ------------------------------------------------------------ one request */

static int dial_status(int r, const struct al_error *err)
{
	if (r == -ECONNREFUSED)
		return 502;
	if (r == -ETIMEDOUT || err->code == AL_ERR_TIMEOUT)
		return 504;
	return al_error_http_status(err->code);
}

static bool request_dial(struct proxy_conn *c, const struct proxy_route *rt, int *ret_fd, int *ret_status)
{
	struct al_error err = {0};
	int gfd = -1;
	int r = sandbox_port_dial(rt->id, rt->port, PROXY_DIAL_TIMEOUT_MS, &gfd, &err);
	if (r >= 0) {
		struct timeval tv = {.tv_sec = c->srv->cfg.idle_timeout_s};
		setsockopt(gfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		*ret_fd = gfd;
		return true;
	}
	int status = dial_status(r, &err);
	if (status == 502)
		proxy_answer(c, 502, false, NULL, "nothing listens on port %u of sandbox %s: %s\n", rt->port, rt->id,
		             err.message);
	else if (status == 504)
		proxy_answer(c, 504, false, NULL, "port %u of sandbox %s did not answer within %d s: %s\n", rt->port,
		             rt->id, PROXY_DIAL_TIMEOUT_MS / 1000, err.message);
	else
		proxy_answer(c, status, false, NULL, "%s\n", err.message);
	*ret_status = status;
	struct port_traffic t = {.requests = 1, .errors = 1};
	sandbox_port_traffic(rt->id, rt->port, &t);
	return false;
}

/* The head for the guest: the target without the path form's prefix,
 * credentials and hop-by-hop fields gone, X-Forwarded-* set. */
static bool request_rewrite(struct proxy_conn *c, const struct proxy_head *h, const struct proxy_route *rt,
                            const struct credentials *cr, bool bearer, struct proxy_request *req)
{
	char target[PROXY_HEAD_MAX], prefix[64], host[PROXY_HOST_MAX + 1] = "";
	if (!proxy_route_guest_target(rt, h->raw + h->target.off, h->target.len, target, sizeof(target)))
		return false;
	snprintf(prefix, sizeof(prefix), "%s%s/%u", PROXY_PATH_PREFIX, rt->id, rt->port);
	if (h->host >= 0)
		field_copy(h, h->host, host, sizeof(host));
	struct proxy_request_rewrite rw = {
	    .target = target,
	    .drop_authorization = bearer || cr->authorization_ours,
	    .cookie = cr->cookie_rest,
	    .upgrade = req->upgrade,
	    .forwarded_for = c->addr,
	    .forwarded_host = host[0] ? host : NULL,
	    .forwarded_proto = "http",
	    .forwarded_prefix = rt->path_form ? prefix : NULL,
	};
	size_t len;
	if (proxy_request_rewrite(h, &rw, c->out, sizeof(c->out), &len) < 0)
		return false;
	req->guest_head = c->out;
	req->guest_head_len = len;
	return true;
}

/* Ends the kept guest connection of c, if any. */
static void upstream_drop(struct proxy_conn *c)
{
	if (c->up_fd >= 0)
		sandbox_port_close(c->up_id, c->up_fd);
	c->up_fd = -1;
}

/* The guest connection the last request left open, for this request if it
 * goes to the same sandbox and port, which runs (a paused one is dialed
 * anew: the dial resumes it), and the guest has neither closed it nor
 * sent anything unasked on it; else -1 (and it is closed). */
static int upstream_take(struct proxy_conn *c, const struct proxy_route *rt, const struct port_target *pt)
{
	if (c->up_fd < 0)
		return -1;
	bool same = !strcmp(c->up_id, rt->id) && c->up_port == rt->port && pt->state == SANDBOX_RUNNING;
	struct pollfd p = {.fd = c->up_fd, .events = POLLIN | POLLRDHUP};
	if (!same || poll(&p, 1, 0) != 0) {
		upstream_drop(c);
		return -1;
	}
	int fd = c->up_fd;
	c->up_fd = -1;
	return fd;
}

/* Route, access, dial, relay. Returns whether the connection goes on;
 * *ret_relayed: the relay took the head (and body) from in. */
static bool request_handle(struct proxy_conn *c, size_t head_len, int *ret_status, bool *ret_relayed)
{
	struct proxy_server *srv = c->srv;
	struct al_error err = {0};
	struct proxy_head *h = &c->head;
	int r = proxy_head_parse((const char *)c->in, head_len, false, h, &err);
	if (r < 0) {
		*ret_status = r == -E2BIG ? 431 : 400;
		proxy_answer(c, *ret_status, true, NULL, "%s\n", err.message);
		return false;
	}
	struct proxy_request req = {
	    .head_len = head_len,
	    .client_http11 = h->minor_version == 1,
	    .head_method = h->method.len == 4 && memcmp(h->raw + h->method.off, "HEAD", 4) == 0,
	    .client_keep_alive = h->minor_version == 1 ? !h->conn_close : h->conn_keep_alive && !h->conn_close,
	    .upgrade = h->upgrade >= 0 && h->conn_upgrade,
	    .max_body_bytes = (uint64_t)srv->cfg.max_body_mib << 20,
	    .idle_timeout_s = srv->cfg.idle_timeout_s,
	};
	/* A refused request with a body: its bytes cannot be told from the next request's. */
	bool keep_refused = req.client_keep_alive && h->framing == PROXY_NO_BODY;
	c->answer_close = !keep_refused;
	c->answer_head = req.head_method;
	const char *host = h->host >= 0 ? h->raw + h->fields[h->host].value.off : NULL;
	if (proxy_route_parse(host, host ? h->fields[h->host].value.len : 0, h->raw + h->target.off, h->target.len,
	                      srv->domain, &req.route) < 0) {
		proxy_answer(c, 404, !keep_refused, NULL, "no sandbox port at this URL. " PROXY_URL_FORMS, srv->domain);
		*ret_status = 404;
		return keep_refused;
	}
	const struct proxy_route *rt = &req.route;
	struct port_target pt;
	if (sandbox_port_target(rt->id, rt->port, &pt, &err) < 0) {
		*ret_status = al_error_http_status(err.code);
		proxy_answer(c, *ret_status, !keep_refused, NULL, "%s\n", err.message);
		return keep_refused;
	}
	bool handled = false, bearer = false;
	if (query_token(c, h, rt, &pt, &handled, ret_status) == ACCESS_ANSWERED || handled)
		return keep_refused && *ret_status == 302;
	struct credentials *cr = xcalloc(1, sizeof(*cr));
	credentials_collect(h, cr);
	bool go = access_check(c, h, rt, &pt, cr, &bearer, ret_status) == ACCESS_OK;
	if (go && pt.state == SANDBOX_PAUSED && !pt.auto_resume) {
		proxy_answer(
		    c, 409, false, NULL,
		    "sandbox %s is paused: resume it (POST /v1/sandboxes/%s/resume, airlock resume %s) or turn "
		    "on its auto_resume so that a request resumes it\n",
		    rt->id, rt->id, rt->id);
		*ret_status = 409;
		go = false;
	}
	if (go && h->framing == PROXY_LENGTH && h->content_length > req.max_body_bytes) {
		proxy_answer(c, 413, true, NULL, "the request body is larger than %u MiB (--proxy-max-body-mib)\n",
		             srv->cfg.max_body_mib);
		*ret_status = 413;
		free(cr);
		return false;
	}
	if (go)
		go = request_rewrite(c, h, rt, cr, bearer, &req);
	free(cr);
	if (!go) {
		if (*ret_status == 0) {
			proxy_answer(c, 400, true, NULL, "the request does not fit in the proxy's buffers\n");
			*ret_status = 400;
			return false;
		}
		return keep_refused;
	}
	int gfd = upstream_take(c, rt, &pt);
	if (gfd < 0 && !request_dial(c, rt, &gfd, ret_status))
		return keep_refused;
	*ret_relayed = true;
	bool reusable = false;
	bool keep = proxy_relay(c, &req, gfd, ret_status, &reusable);
	if (reusable && keep) {
		c->up_fd = gfd;
		strlcpy_al(c->up_id, rt->id, sizeof(c->up_id));
		c->up_port = rt->port;
	} else if (reusable) {
		sandbox_port_close(rt->id, gfd);
	}
	return keep;
}

/* ------------------------------------------------------------ connections */

static void conn_drop_head(struct proxy_conn *c, size_t n)
{
	n = MIN(n, c->in_len);
	memmove(c->in, c->in + n, c->in_len - n);
	c->in_len -= n;
}

static void conn_serve(struct proxy_conn *c)
{
	for (bool first = true;; first = false) {
		size_t head_len = 0;
		int status = 0;
		enum head_result hr = head_read(c, first, &head_len, &status);
		if (hr != HEAD_OK) {
			if (status)
				metrics_count_proxy_request(status);
			if (hr == HEAD_REFUSED)
				linger_close(c);
			return;
		}
		conn_table_busy(c->srv->conns, c->slot);
		bool relayed = false;
		bool keep = request_handle(c, head_len, &status, &relayed);
		c->answer_close = c->answer_head = false;
		if (status)
			metrics_count_proxy_request(status);
		/* A request answered here (not relayed) leaves its head in front. */
		if (!relayed)
			conn_drop_head(c, head_len);
		conn_table_idle(c->srv->conns, c->slot, now_ms_monotonic());
		if (!keep) {
			if (status >= 400)
				linger_close(c);
			return;
		}
	}
}

static void *conn_thread(void *arg)
{
	struct proxy_conn *c = arg;
	struct proxy_server *srv = c->srv;
	metrics_proxy_connection(true);
	conn_serve(c);
	upstream_drop(c);
	metrics_proxy_connection(false);
	pthread_mutex_lock(&srv->lock);
	conn_table_remove(srv->conns, c->slot);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->list = c->next;
	if (c->next)
		c->next->prev = c->prev;
	close(c->fd);
	free(c);
	if (--srv->active == 0)
		pthread_cond_broadcast(&srv->idle);
	pthread_mutex_unlock(&srv->lock);
	return NULL;
}

static void conn_shed(void *ctx, int fd)
{
	(void)ctx;
	shutdown(fd, SHUT_RDWR);
}

static void conn_peer(struct proxy_conn *c, const struct sockaddr_storage *ss, socklen_t len)
{
	conn_source_key((const struct sockaddr *)ss, len, false, c->source);
	conn_source_key((const struct sockaddr *)ss, len, true, c->source64);
	strlcpy_al(c->addr, "?", sizeof(c->addr));
	if (ss->ss_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, c->addr, sizeof(c->addr));
	else if (ss->ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, c->addr, sizeof(c->addr));
}

/* SECURITY: the caps of api-connlimit.h, per listener and per client
 * address: an idle connection (one still sending its head, too) gives way
 * to a new one, so only connections with a request being answered fill it. */
static void conn_accept(struct proxy_server *srv, int fd, const struct sockaddr_storage *ss, socklen_t len)
{
	struct proxy_conn *c = xcalloc(1, sizeof(*c));
	c->srv = srv;
	c->fd = fd;
	c->up_fd = -1;
	conn_peer(c, ss, len);
	if (conn_table_admit(srv->conns, c->source, conn_shed, srv) != CONN_ADMIT) {
		close(fd);
		free(c);
		return;
	}
	struct timeval tv = {.tv_sec = srv->cfg.idle_timeout_s};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	pthread_mutex_lock(&srv->lock);
	c->slot = conn_table_add(srv->conns, c->source, fd, now_ms_monotonic());
	c->next = srv->list;
	if (srv->list)
		srv->list->prev = c;
	srv->list = c;
	srv->active++;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, PROXY_THREAD_STACK);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	if (pthread_create(&t, &attr, conn_thread, c) != 0) {
		srv->active--;
		srv->list = c->next;
		if (c->next)
			c->next->prev = NULL;
		conn_table_remove(srv->conns, c->slot);
		close(fd);
		free(c);
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_unlock(&srv->lock);
}

static void *accept_thread(void *arg)
{
	struct proxy_server *srv = arg;
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = accept4(srv->listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
		pthread_mutex_lock(&srv->lock);
		bool stopping = srv->stopping;
		pthread_mutex_unlock(&srv->lock);
		if (stopping) {
			if (fd >= 0)
				close(fd);
			return NULL;
		}
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				usleep(100 * 1000);
			continue;
		}
		conn_accept(srv, fd, &ss, len);
	}
}

/* ------------------------------------------------------------ the listener */

int proxy_server_start(const struct proxy_config *cfg, struct proxy_server **ret, struct al_error *err)
{
	int fd;
	unsigned port;
	int r = api_tcp_listen("--proxy-listen", cfg->listen, 0, &fd, &port, err);
	if (r < 0)
		return r;
	struct proxy_server *s = xcalloc(1, sizeof(*s));
	s->cfg = *cfg;
	s->listen_fd = fd;
	if (cfg->domain)
		strlcpy_al(s->domain, cfg->domain, sizeof(s->domain));
	else
		snprintf(s->domain, sizeof(s->domain), "localhost:%u", port);
	s->conns = conn_table_new(cfg->max_connections, cfg->max_per_client);
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->idle, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&s->accept_thread, NULL, accept_thread, s) != 0) {
		conn_table_free(s->conns);
		close(fd);
		free(s);
		return al_error_set(err, AL_ERR_INTERNAL, EAGAIN, "cannot start the proxy's thread");
	}
	*ret = s;
	return 0;
}

void proxy_server_stop(struct proxy_server *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_mutex_unlock(&s->lock);
	shutdown(s->listen_fd, SHUT_RDWR);
	pthread_join(s->accept_thread, NULL);
	pthread_mutex_lock(&s->lock);
	for (struct proxy_conn *c = s->list; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	struct timespec until = monotonic_in_ms(PROXY_STOP_WAIT_MS);
	while (s->active > 0)
		if (pthread_cond_timedwait(&s->idle, &s->lock, &until) != 0)
			break;
	bool left = s->active > 0;
	pthread_mutex_unlock(&s->lock);
	close(s->listen_fd);
	/* Threads still in a dial keep their memory: leaked, not freed under them. */
	if (left)
		return;
	conn_table_free(s->conns);
	free(s);
}
