/* SPDX-License-Identifier: Apache-2.0 */
/* The front's connections to nodes: the delegation (cluster.h), a client's
 * request forwarded and its answer relayed, and the front's own calls (lists,
 * probes, adopt) read whole. */
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include "fd-relay.h"
#include "front.h"
#include "util.h"

#define NODE_HOST_MAX 200
#define NODE_STATUS_LINE 12       /* "HTTP/1.1 200" */
#define NODE_HEAD_MAX (64 * 1024) /* a node's answer head, for the front's own calls */

void front_delegation(const char *tenant, char principal[CLUSTER_PRINCIPAL_MAX + 1],
                      char authorization[FRONT_DELEGATION_AUTH_MAX])
{
	front_delegation_make(&front_cfg.key, tenant, (int64_t)time(NULL), principal, authorization);
}

/* "http://HOST:PORT" (HOST may be [v6]) into its parts. */
static int url_split(const char *url, char host[NODE_HOST_MAX + 1], char port[8])
{
	static const char scheme[] = "http://";
	if (strncmp(url, scheme, strlen(scheme)))
		return -EINVAL;
	const char *h = url + strlen(scheme), *colon;
	size_t hl;
	if (h[0] == '[') {
		const char *close = strchr(h, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		h++;
		hl = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(h, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - h);
	}
	size_t pl = strcspn(colon + 1, "/");
	if (hl == 0 || hl > NODE_HOST_MAX || pl == 0 || pl > 5)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	memcpy(port, colon + 1, pl);
	port[pl] = '\0';
	return 0;
}

void front_keepalive(int fd)
{
	int one = 1, idle_s = 60, interval_s = 10, count = 6;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

static int connect_timeout(int fd, const struct sockaddr *sa, socklen_t len)
{
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	if (connect(fd, sa, len) < 0) {
		if (errno != EINPROGRESS)
			return -errno;
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		if (poll(&p, 1, FRONT_CONNECT_TIMEOUT_MS) <= 0)
			return -ETIMEDOUT;
		int so = 0;
		socklen_t sl = sizeof(so);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
		if (so)
			return -so;
	}
	fcntl(fd, F_SETFL, fl);
	return 0;
}

int front_node_connect(const char *url, int *ret_fd)
{
	char host[NODE_HOST_MAX + 1], port[8];
	if (url_split(url, host, port) < 0)
		return -EINVAL;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
		return -EHOSTUNREACH;
	int r = -EHOSTUNREACH;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		cleanup_close int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		r = connect_timeout(fd, a->ai_addr, a->ai_addrlen);
		if (r == 0) {
			front_keepalive(fd);
			*ret_fd = TAKE_FD(fd);
			break;
		}
	}
	freeaddrinfo(ai);
	return r;
}

/* ------------------------------------------------------------ forwarding */

/* Reads the first bytes of the node's answer (its status): their count, 0 at
 * EOF before any, -errno. */
static ssize_t status_peek(int fd, char *buf, size_t size, int *ret_status)
{
	size_t have = 0;
	while (have < NODE_STATUS_LINE) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = poll(&p, 1, FRONT_ADOPT_TIMEOUT_MS);
		if (n == 0)
			return -ETIMEDOUT;
		if (n < 0 && errno == EINTR)
			continue;
		ssize_t got = recv(fd, buf + have, size - have, 0);
		if (got < 0)
			return -errno;
		if (got == 0)
			break;
		have += (size_t)got;
	}
	*ret_status = 0;
	if (have >= NODE_STATUS_LINE && !memcmp(buf, "HTTP/1.", 7))
		*ret_status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	return (ssize_t)have;
}

static int forward_send(struct front_conn *c, const struct front_forward *f, int fd)
{
	char principal[CLUSTER_PRINCIPAL_MAX + 1], auth[FRONT_DELEGATION_AUTH_MAX];
	struct front_rewrite rw = {
	    .target = f->target,
	    .forwarded_for = c->operator? NULL : c->remote,
	    .ws_protocol = f->ws_protocol,
	    .keep_credentials = !f->delegate,
	    .drop_expect = f->body != NULL,
	};
	if (f->delegate) {
		front_delegation(front_principal_tenant(c), principal, auth);
		rw.principal = principal;
		rw.authorization = auth;
	}
	char out[FRONT_OUT_MAX];
	size_t n = 0;
	if (front_head_rewrite(&c->head, &rw, out, sizeof(out), &n) < 0)
		return -E2BIG;
	int r = write_full(fd, out, n);
	explicit_bzero(out, sizeof(out));
	if (r < 0)
		return r;
	if (f->body)
		return f->body_len ? write_full(fd, f->body, f->body_len) : 0;
	size_t extra = c->have - c->head.len;
	return extra ? write_full(fd, c->buf + c->head.len, extra) : 0;
}

static void relay(struct front_conn *c, int node_fd)
{
	const struct fd_relay r = {.a = c->fd, .b = node_fd, .end_on_b_eof = !c->head.upgrade};
	c->answered = true;
	fd_relay_run(&r);
}

int front_forward(struct front_conn *c, const struct front_forward *f)
{
	cleanup_close int fd = -1;
	int r = front_node_connect(f->url, &fd);
	if (r == 0)
		r = forward_send(c, f, fd);
	if (r == -E2BIG) {
		front_reply_errorf(c, AL_ERR_TOO_LARGE, "the request head is too large to forward");
		return 0;
	}
	if (r < 0)
		return f->retry_503 ? 1 : r;
	if (!f->retry_503) {
		relay(c, fd);
		return 0;
	}
	char first[512];
	int status = 0;
	ssize_t got = status_peek(fd, first, sizeof(first), &status);
	if (got <= 0 || status == 503)
		return 1;
	c->answered = true;
	if (write_full(c->fd, first, (size_t)got) < 0)
		return 0;
	relay(c, fd);
	return 0;
}

/* ------------------------------------------------------------ calls of the front's own */

void front_answer_release(struct front_answer *a)
{
	free(a->body);
	*a = (struct front_answer){0};
}

static int call_send(int fd, const char *url, const char *method, const char *target, const char *tenant,
                     const char *body)
{
	char principal[CLUSTER_PRINCIPAL_MAX + 1], auth[FRONT_DELEGATION_AUTH_MAX];
	front_delegation(tenant, principal, auth);
	const char *host = url + strlen("http://");
	size_t blen = body ? strlen(body) : 0;
	cleanup_free char *head = xasprintf("%s %s HTTP/1.1\r\nHost: %.*s\r\n" CLUSTER_PRINCIPAL_HEADER
	                                    ": %s\r\nAuthorization: %s\r\nConnection: close\r\n"
	                                    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
	                                    method, target, (int)strcspn(host, "/"), host, principal, auth, blen);
	int r = write_full(fd, head, strlen(head));
	explicit_bzero(head, strlen(head));
	if (r == 0 && blen)
		r = write_full(fd, body, blen);
	return r;
}

/* Everything the node sends until it closes (at most max bytes). */
static int call_read_all(int fd, int timeout_ms, size_t max, char **ret, size_t *ret_len)
{
	size_t cap = 65536, len = 0;
	cleanup_free char *buf = xmalloc(cap + 1);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = poll(&p, 1, timeout_ms);
		if (n == 0)
			return -ETIMEDOUT;
		if (n < 0 && errno == EINTR)
			continue;
		if (len == cap) {
			if (cap >= max)
				return -EFBIG;
			cap = MIN(cap * 2, max);
			buf = xrealloc(buf, cap + 1);
		}
		ssize_t got = recv(fd, buf + len, cap - len, 0);
		if (got < 0 && errno != EINTR)
			return -errno;
		if (got == 0)
			break;
		if (got > 0)
			len += (size_t)got;
	}
	buf[len] = '\0';
	*ret_len = len;
	*ret = TAKE_PTR(buf);
	return 0;
}

/* SECURITY: a node's answer is trusted no more than needed: sizes are
 * checked against what was read before any byte is copied. Dechunks in place. */
static int dechunk(char *body, size_t len, size_t *ret_len)
{
	size_t in = 0, out = 0;
	for (;;) {
		char *end = NULL;
		errno = 0;
		unsigned long long n = strtoull(body + in, &end, 16);
		if (errno || end == body + in)
			return -EBADMSG;
		char *eol = memmem(end, len - (size_t)(end - body), "\r\n", 2);
		if (!eol)
			return -EBADMSG;
		in = (size_t)(eol - body) + 2;
		if (n == 0)
			break;
		if (n > len - in || len - in - n < 2)
			return -EBADMSG;
		memmove(body + out, body + in, n);
		out += n;
		in += n + 2;
	}
	body[out] = '\0';
	*ret_len = out;
	return 0;
}

static int answer_parse(char *raw, size_t len, struct front_answer *ret)
{
	char *end = memmem(raw, MIN(len, (size_t)NODE_HEAD_MAX), "\r\n\r\n", 4);
	if (len < NODE_STATUS_LINE || memcmp(raw, "HTTP/1.", 7) || !end)
		return -EBADMSG;
	int status = (raw[9] - '0') * 100 + (raw[10] - '0') * 10 + (raw[11] - '0');
	*end = '\0';
	bool chunked = strcasestr(raw, "\r\ntransfer-encoding: chunked") != NULL;
	char *body = end + 4;
	size_t blen = len - (size_t)(body - raw);
	if (chunked && dechunk(body, blen, &blen) < 0)
		return -EBADMSG;
	ret->status = status;
	ret->body = xstrndup(body, blen);
	ret->len = blen;
	return 0;
}

int front_node_call(const char *url, const char *method, const char *target, const char *tenant, const char *body,
                    int timeout_ms, size_t max, struct front_answer *ret)
{
	cleanup_close int fd = -1;
	int r = front_node_connect(url, &fd);
	if (r < 0)
		return r;
	if ((r = call_send(fd, url, method, target, tenant, body)) < 0)
		return r;
	cleanup_free char *raw = NULL;
	size_t len = 0;
	if ((r = call_read_all(fd, timeout_ms, max, &raw, &len)) < 0)
		return r;
	return answer_parse(raw, len, ret);
}

/* ------------------------------------------------------------ the nodes that are up */

int front_nodes_up(struct front_node **ret, size_t *ret_n, struct al_error *err)
{
	cleanup_pgresult PGresult *res = NULL;
	int r = front_pg_exec("list the nodes",
	                      "SELECT name, url, memory_free_mib, sandboxes FROM airlock_nodes"
	                      " WHERE state = 'up' AND lease_until > now() ORDER BY name LIMIT 256",
	                      0, NULL, &res, err);
	if (r < 0)
		return r;
	*ret = front_nodes_from(res, ret_n);
	return 0;
}

struct front_node *front_nodes_from(PGresult *res, size_t *ret_n)
{
	size_t n = (size_t)PQntuples(res);
	struct front_node *v = xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++) {
		strlcpy_al(v[i].name, PQgetvalue(res, (int)i, 0), sizeof(v[i].name));
		strlcpy_al(v[i].url, PQgetvalue(res, (int)i, 1), sizeof(v[i].url));
		v[i].memory_free_mib = strtoll(PQgetvalue(res, (int)i, 2), NULL, 10);
		v[i].sandboxes = strtoll(PQgetvalue(res, (int)i, 3), NULL, 10);
	}
	*ret_n = n;
	return v;
}
