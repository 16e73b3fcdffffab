/* SPDX-License-Identifier: Apache-2.0 */
/* One client connection of the front: its request head read and parsed,
 * answers written in the API's shapes, a body read when the front needs it. */
#include <poll.h>
#include <stdarg.h>
#include <sys/socket.h>

#include "front.h"
#include "json-cleanup.h"
#include "util.h"

#define E2B_PREFIX "/e2b/"
#define E2B_ENVD_PREFIX "/e2b/envd/"

static const char *status_text(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 204:
		return "No Content";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 409:
		return "Conflict";
	case 413:
		return "Payload Too Large";
	case 415:
		return "Unsupported Media Type";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return "Status";
	}
}

void front_reply_raw(struct front_conn *c, int status, const char *type, const char *body, size_t len)
{
	char head[256];
	int n = status == 204 ? snprintf(head, sizeof(head), "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
	                      : snprintf(head, sizeof(head),
	                                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: "
	                                 "close\r\n\r\n",
	                                 status, status_text(status), type, len);
	c->answered = true;
	if (n < 0 || (size_t)n >= sizeof(head) || write_full(c->fd, head, (size_t)n) < 0)
		return;
	if (len)
		write_full(c->fd, body, len);
}

void front_reply_json(struct front_conn *c, int status, json_t *body)
{
	cleanup_json json_t *j = body;
	cleanup_free char *text = json_dumps(j, JSON_COMPACT);
	if (!text)
		abort(); /* only allocation (or a bug) can fail here */
	front_reply_raw(c, status, "application/json", text, strlen(text));
}

void front_reply_body(struct front_conn *c, int status, const char *body, size_t len)
{
	front_reply_raw(c, status, "application/json", body, len);
}

void front_reply_empty(struct front_conn *c, int status)
{
	front_reply_raw(c, status, "application/json", "", 0);
}

static void reply_error_status(struct front_conn *c, int status, enum al_error_code code, const char *message)
{
	cleanup_free char *msg = utf8_repair(message);
	json_t *j = c->kind == FRONT_NATIVE
	                ? json_pack("{s:{s:s, s:s}}", "error", "code", al_error_code_name(code), "message", msg)
	                : json_pack("{s:i, s:s}", "code", status, "message", msg);
	front_reply_json(c, status, j);
}

void front_reply_error(struct front_conn *c, const struct al_error *err)
{
	enum al_error_code code = err->code ? err->code : AL_ERR_INTERNAL;
	reply_error_status(c, al_error_http_status(code), code, err->message[0] ? err->message : "internal error");
}

void front_reply_errorf(struct front_conn *c, enum al_error_code code, const char *fmt, ...)
{
	struct al_error err = {.code = code};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	front_reply_error(c, &err);
}

const char *front_principal_tenant(const struct front_conn *c)
{
	return c->operator? NULL : c->tenant;
}

/* Waits for the fd to be readable until deadline (monotonic ms): 0, or -ETIMEDOUT. */
static int wait_readable(int fd, uint64_t deadline)
{
	for (;;) {
		uint64_t now = now_ms_monotonic();
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = poll(&p, 1, (int)MIN(deadline - now, (uint64_t)INT32_MAX));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* Reads until the head is complete: its length, 0 at EOF before any byte,
 * or an error answered (-errno). */
static int head_read(struct front_conn *c)
{
	uint64_t deadline = now_ms_monotonic() + FRONT_HEAD_TIMEOUT_MS;
	for (;;) {
		size_t end = front_head_end(c->buf, c->have);
		if (end)
			return (int)end;
		if (c->have == sizeof(c->buf)) {
			reply_error_status(c, 431, AL_ERR_TOO_LARGE, "the request head is over 16384 bytes");
			return -E2BIG;
		}
		if (wait_readable(c->fd, deadline) < 0) {
			if (c->have)
				reply_error_status(c, 408, AL_ERR_TIMEOUT,
				                   "the request head did not arrive within 10 s");
			return -ETIMEDOUT;
		}
		ssize_t n = recv(c->fd, c->buf + c->have, sizeof(c->buf) - c->have, 0);
		if (n == 0 && c->have == 0)
			return 0;
		if (n <= 0)
			return n == 0 ? -ECONNRESET : -errno;
		c->have += (size_t)n;
	}
}

static void span_copy(const struct front_conn *c, struct front_span s, char *out, size_t size)
{
	size_t n = MIN((size_t)s.len, size - 1);
	memcpy(out, c->buf + s.off, n);
	out[n] = '\0';
}

static enum front_kind kind_of(const char *path)
{
	if (!strncmp(path, E2B_ENVD_PREFIX, strlen(E2B_ENVD_PREFIX)))
		return FRONT_E2B_ENVD;
	return strncmp(path, E2B_PREFIX, strlen(E2B_PREFIX)) ? FRONT_NATIVE : FRONT_E2B_CONTROL;
}

void front_conn_serve(struct front_conn *c)
{
	int end = head_read(c);
	if (end <= 0)
		return;
	struct al_error err = {0};
	int r = front_head_parse(c->buf, (size_t)end, &c->head, &err);
	if (r < 0) {
		reply_error_status(c, r == -E2BIG ? 431 : 400, err.code, err.message);
		return;
	}
	span_copy(c, c->head.method, c->method, sizeof(c->method));
	if (c->head.path.len > FRONT_PATH_MAX) {
		front_reply_errorf(c, AL_ERR_INVALID_ARGUMENT, "the request path is longer than %d bytes",
		                   FRONT_PATH_MAX);
		return;
	}
	span_copy(c, c->head.path, c->path, sizeof(c->path));
	span_copy(c, c->head.query, c->query, sizeof(c->query));
	c->kind = kind_of(c->path);
	front_route(c);
}

/* A client that sent "Expect: 100-continue" waits for this before its body. */
static void expect_continue(struct front_conn *c, bool body_missing)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	char v[32];
	if (body_missing && c->head.minor_version == 1 && front_head_value(&c->head, "Expect", v, sizeof(v)) == 1 &&
	    !strcasecmp(v, "100-continue"))
		write_full(c->fd, cont, sizeof(cont) - 1);
}

int front_read_body(struct front_conn *c, size_t max, char **ret, size_t *ret_len)
{
	const struct front_head *h = &c->head;
	if (h->chunked) {
		front_reply_errorf(c, AL_ERR_INVALID_ARGUMENT,
		                   "%s %s: send the body with Content-Length (not chunked) to the cluster's front",
		                   c->method, c->path);
		return -EINVAL;
	}
	uint64_t len = h->has_length ? h->content_length : 0;
	if (len > max) {
		front_reply_errorf(c, AL_ERR_TOO_LARGE,
		                   "request body of %llu bytes is above this endpoint's limit of %zu bytes",
		                   (unsigned long long)len, max);
		return -E2BIG;
	}
	cleanup_free char *body = xmalloc((size_t)len + 1);
	size_t have = MIN(c->have - h->len, (size_t)len);
	memcpy(body, c->buf + h->len, have);
	expect_continue(c, have < len);
	uint64_t deadline = now_ms_monotonic() + FRONT_BODY_TIMEOUT_MS;
	while (have < len) {
		if (wait_readable(c->fd, deadline) < 0) {
			reply_error_status(c, 408, AL_ERR_TIMEOUT, "the request body did not arrive within 60 s");
			return -ETIMEDOUT;
		}
		ssize_t n = recv(c->fd, body + have, (size_t)len - have, 0);
		if (n <= 0)
			return n == 0 ? -ECONNRESET : -errno;
		have += (size_t)n;
	}
	body[len] = '\0';
	*ret_len = (size_t)len;
	*ret = TAKE_PTR(body);
	return 0;
}

static bool content_type_json(const struct front_conn *c)
{
	char ct[128];
	int r = front_head_value(&c->head, "Content-Type", ct, sizeof(ct));
	if (r == 0)
		return true;
	size_t n = strlen("application/json");
	return r == 1 && !strncasecmp(ct, "application/json", n) && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static int fields_check(json_t *j, const char *const *allowed, struct al_error *err)
{
	const char *key;
	json_t *v;
	json_object_foreach (j, key, v) {
		bool ok = false;
		for (size_t i = 0; allowed[i] && !ok; i++)
			ok = !strcmp(key, allowed[i]);
		if (ok)
			continue;
		char list[256] = "";
		size_t off = 0;
		for (size_t i = 0; allowed[i] && off < sizeof(list); i++)
			off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", i ? ", " : "", allowed[i]);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "unknown field \"%.64s\" (allowed: %s)", key,
		                    list);
	}
	return 0;
}

int front_read_json(struct front_conn *c, size_t max, const char *const *allowed, json_t **ret)
{
	/* SECURITY: a client's body, capped by max before it is read, parsed
	 * with duplicate keys refused (two "tenant"s must not mean the last). */
	cleanup_free char *body = NULL;
	size_t len = 0;
	int r = front_read_body(c, max, &body, &len);
	if (r < 0)
		return r;
	if (len && !content_type_json(c)) {
		front_reply_errorf(c, AL_ERR_UNSUPPORTED_MEDIA, "Content-Type must be application/json");
		return -EINVAL;
	}
	json_error_t jerr;
	cleanup_json json_t *j = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : json_object();
	struct al_error err = {0};
	if (!j)
		al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		             "request body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
		             jerr.column);
	else if (!json_is_object(j))
		al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "request body must be a JSON object");
	else if (allowed)
		fields_check(j, allowed, &err);
	if (err.code) {
		front_reply_error(c, &err);
		return -EINVAL;
	}
	*ret = TAKE_PTR(j);
	return 0;
}
