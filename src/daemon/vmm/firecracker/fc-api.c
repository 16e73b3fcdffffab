/* SPDX-License-Identifier: Apache-2.0 */
/* Firecracker's API over its unix socket: request building, the exchange under
 * one deadline, and a strict parser of the answer (fc-api.h). */
#include "fc-api.h"

#include <fcntl.h>
#include <poll.h>
#include <strings.h>

#include "json-cleanup.h"
#include "util.h"
#include "vmm-backend.h"

#define FC_STATUS_LINE_PREFIX "HTTP/1.1 "

void fc_response_release(struct fc_response *r)
{
	if (!r)
		return;
	json_decref(r->body);
	r->body = NULL;
}

static bool is_tchar(char c)
{
	/* RFC 9110 token characters. */
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_field_char(unsigned char c)
{
	/* VCHAR, SP, HTAB, obs-text; never CR, LF, NUL or other controls. */
	return c == ' ' || c == '\t' || (c >= 0x21 && c != 0x7f);
}

/* A header line's name equals `name` (case-insensitive). */
static bool name_is(const char *line, size_t name_len, const char *name)
{
	return strlen(name) == name_len && strncasecmp(line, name, name_len) == 0;
}

/* The value of a header without the surrounding whitespace. */
static void trim_ows(const char **v, size_t *n)
{
	while (*n > 0 && (**v == ' ' || **v == '\t')) {
		(*v)++;
		(*n)--;
	}
	while (*n > 0 && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t'))
		(*n)--;
}

#define BAD(code, ...)                                                                                                 \
	({                                                                                                             \
		snprintf(why, why_size, __VA_ARGS__);                                                                  \
		(code);                                                                                                \
	})

static int parse_status_line(const char *line, size_t n, int *ret_status, char *why, size_t why_size)
{
	size_t plen = strlen(FC_STATUS_LINE_PREFIX);
	if (n < plen + 4 || memcmp(line, FC_STATUS_LINE_PREFIX, plen) != 0)
		return BAD(-EBADMSG, "the status line does not start with \"HTTP/1.1 NNN \"");
	const char *d = line + plen;
	for (int i = 0; i < 3; i++)
		if (d[i] < '0' || d[i] > '9')
			return BAD(-EBADMSG, "the status code is not three digits");
	if (d[3] != ' ')
		return BAD(-EBADMSG, "no space after the status code");
	for (size_t i = plen + 4; i < n; i++)
		if (!is_field_char((unsigned char)line[i]))
			return BAD(-EBADMSG, "a control character in the reason phrase");
	int status = (d[0] - '0') * 100 + (d[1] - '0') * 10 + (d[2] - '0');
	if (status < 200 || status > 599)
		return BAD(-EBADMSG, "unexpected status %d", status);
	*ret_status = status;
	return 0;
}

struct head_fields {
	bool have_length, json;
	size_t length;
	bool deprecated;
};

static int parse_header_line(const char *line, size_t n, struct head_fields *f, char *why, size_t why_size)
{
	if (n > 0 && (line[0] == ' ' || line[0] == '\t'))
		return BAD(-EBADMSG, "a folded header line (obsolete line folding is not accepted)");
	const char *colon = memchr(line, ':', n);
	if (!colon || colon == line)
		return BAD(-EBADMSG, "a header line without a name and a colon");
	size_t name_len = (size_t)(colon - line);
	for (size_t i = 0; i < name_len; i++)
		if (!is_tchar(line[i]))
			return BAD(-EBADMSG, "a header name with a character that is not allowed");
	const char *v = colon + 1;
	size_t vn = n - name_len - 1;
	for (size_t i = 0; i < vn; i++)
		if (!is_field_char((unsigned char)v[i]))
			return BAD(-EBADMSG, "a control character in a header value");
	trim_ows(&v, &vn);
	if (name_is(line, name_len, "Transfer-Encoding"))
		return BAD(-EPROTO, "Transfer-Encoding in the answer (Firecracker sends Content-Length only)");
	if (name_is(line, name_len, "Content-Length")) {
		if (f->have_length)
			return BAD(-EBADMSG, "Content-Length given twice");
		if (vn == 0 || vn > 7)
			return BAD(-EMSGSIZE, "a Content-Length that is empty or too long");
		size_t len = 0;
		for (size_t i = 0; i < vn; i++) {
			if (v[i] < '0' || v[i] > '9')
				return BAD(-EBADMSG, "a Content-Length that is not a decimal number");
			len = len * 10 + (size_t)(v[i] - '0');
		}
		f->have_length = true;
		f->length = len;
	} else if (name_is(line, name_len, "Content-Type")) {
		/* application/json, parameters allowed. */
		static const char want[] = "application/json";
		f->json = vn >= sizeof(want) - 1 && strncasecmp(v, want, sizeof(want) - 1) == 0 &&
		          (vn == sizeof(want) - 1 || v[sizeof(want) - 1] == ';' || v[sizeof(want) - 1] == ' ');
	} else if (name_is(line, name_len, "Deprecation")) {
		f->deprecated = vn == 4 && strncasecmp(v, "true", 4) == 0;
	}
	return 0;
}

/* fault_message, reduced to printable ASCII for logs and API errors. */
static void copy_fault(json_t *body, char *out, size_t size)
{
	out[0] = '\0';
	const char *m = json_string_value(json_object_get(body, "fault_message"));
	if (!m || size == 0)
		return;
	size_t o = 0;
	for (size_t i = 0; m[i] && o + 1 < size; i++)
		out[o++] = (m[i] >= 0x20 && m[i] < 0x7f) ? m[i] : '?';
	out[o] = '\0';
}

int fc_response_parse(const char *buf, size_t len, struct fc_response *ret, size_t *ret_used, char *why,
                      size_t why_size)
{
	/* The end of the head, looked for only within its limit. */
	size_t scan = MIN(len, (size_t)FC_HEAD_MAX);
	const char *end = NULL;
	for (size_t i = 0; i + 3 < scan && !end; i++)
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n')
			end = buf + i;
	if (!end) {
		if (len >= FC_HEAD_MAX)
			return BAD(-EMSGSIZE, "the answer's head is longer than %u bytes", FC_HEAD_MAX);
		/* A bare LF or a NUL can be refused before the rest arrives. */
		for (size_t i = 0; i < len; i++)
			if (buf[i] == '\0' || (buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r')))
				return BAD(-EBADMSG, "a bare LF or a NUL byte in the answer's head");
		return 0;
	}
	size_t head_len = (size_t)(end - buf) + 4;
	struct head_fields f = {0};
	int status = 0, lines = 0;
	for (const char *line = buf; line < end + 2;) {
		const char *eol = line;
		while (*eol != '\r' && *eol != '\n' && *eol != '\0')
			eol++;
		if (*eol != '\r' || eol[1] != '\n')
			return BAD(-EBADMSG, "a bare CR, a bare LF or a NUL byte in the answer's head");
		size_t n = (size_t)(eol - line);
		int r;
		if (lines == 0)
			r = parse_status_line(line, n, &status, why, why_size);
		else if (lines > FC_HEADERS_MAX)
			r = BAD(-EMSGSIZE, "more than %d header fields", FC_HEADERS_MAX);
		else
			r = parse_header_line(line, n, &f, why, why_size);
		if (r < 0)
			return r;
		lines++;
		line = eol + 2;
	}
	bool no_body = status == 204 || status == 304;
	if (no_body && f.have_length && f.length != 0)
		return BAD(-EBADMSG, "a %d answer with a body", status);
	if (!no_body && !f.have_length)
		return BAD(-EPROTO, "a %d answer without Content-Length", status);
	size_t body_len = no_body ? 0 : f.length;
	if (body_len > FC_RESPONSE_MAX - head_len)
		return BAD(-EMSGSIZE, "the answer's body of %zu bytes is over the limit of %u bytes", body_len,
		           FC_RESPONSE_MAX - (unsigned)head_len);
	if (len - head_len < body_len)
		return 0;
	json_t *body = NULL;
	if (body_len > 0) {
		if (!f.json)
			return BAD(-EPROTO, "a body that is not Content-Type: application/json");
		json_error_t jerr;
		body = json_loadb(end + 4, body_len, JSON_REJECT_DUPLICATES, &jerr);
		if (!body)
			return BAD(-EBADMSG, "the body is not valid JSON (%s)", jerr.text);
		if (!json_is_object(body)) {
			json_decref(body);
			return BAD(-EBADMSG, "the body is JSON but not an object");
		}
	}
	*ret = (struct fc_response){.status = status, .deprecated = f.deprecated, .body = body};
	if (status >= 300)
		copy_fault(body, ret->fault, sizeof(ret->fault));
	*ret_used = head_len + body_len;
	return 1;
}

static bool path_valid(const char *path)
{
	if (path[0] != '/' || strlen(path) > 256)
		return false;
	for (const char *p = path; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      strchr("/_.-", *p)))
			return false;
	return true;
}

int fc_request_build(const char *method, const char *path, json_t *body, char **ret, size_t *ret_len)
{
	if (strcmp(method, "GET") && strcmp(method, "PUT") && strcmp(method, "PATCH"))
		return -EINVAL;
	if (!path_valid(path) || (body && !json_is_object(body)) || (!body && strcmp(method, "GET")))
		return -EINVAL;
	cleanup_free char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	if (body && !text)
		return -EINVAL;
	size_t n = text ? strlen(text) : 0;
	if (n > FC_REQUEST_BODY_MAX)
		return -EMSGSIZE;
	char *req;
	if (text)
		req = xasprintf("%s %s HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
		                "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		                method, path, n, text);
	else
		req = xasprintf("%s %s HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\r\n", method, path);
	*ret_len = strlen(req);
	*ret = req;
	return 0;
}

/* Reads until one whole answer is parsed or the deadline passes. */
static int read_response(int fd, uint64_t deadline, struct fc_response *ret, char *why, size_t why_size)
{
	cleanup_free char *buf = xmalloc(FC_RESPONSE_MAX);
	size_t len = 0;
	for (;;) {
		if (len == FC_RESPONSE_MAX)
			return BAD(-EMSGSIZE, "the answer is longer than %u bytes", FC_RESPONSE_MAX);
		uint64_t now = now_ms_monotonic();
		if (now >= deadline)
			return BAD(-ETIMEDOUT, "no complete answer in time (%zu bytes so far)", len);
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int pr = poll(&p, 1, (int)MIN(deadline - now, (uint64_t)INT32_MAX));
		if (pr < 0 && errno != EINTR)
			return BAD(-errno, "poll: %s", strerror(errno));
		if (pr <= 0)
			continue;
		ssize_t n = read(fd, buf + len, FC_RESPONSE_MAX - len);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return BAD(-errno, "read: %s", strerror(errno));
		if (n == 0)
			return BAD(-ECONNRESET, "Firecracker closed the connection %s",
			           len ? "in the middle of its answer" : "without answering");
		len += (size_t)n;
		size_t used = 0;
		int r = fc_response_parse(buf, len, ret, &used, why, why_size);
		if (r < 0)
			return r;
		if (r == 0)
			continue;
		if (used != len) {
			fc_response_release(ret);
			return BAD(-EPROTO, "%zu bytes after the answer (one request, one answer)", len - used);
		}
		return 0;
	}
}

int fc_request(int dirfd, const char *sock, const char *method, const char *path, json_t *body, unsigned timeout_ms,
               struct fc_response *ret, struct al_error *err)
{
	uint64_t deadline = now_ms_monotonic() + timeout_ms;
	cleanup_free char *req = NULL;
	size_t req_len = 0;
	int r = fc_request_build(method, path, body, &req, &req_len);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "Firecracker API %s %s: the request cannot be built (%s)",
		                    method, path, r == -EMSGSIZE ? "body too large" : "bad method, path or body");
	cleanup_close int fd = -1;
	if ((r = unix_connect_at_nonblock(dirfd, sock, &fd)) < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, -r, "Firecracker API %s %s: cannot connect to %s: %s",
		                    method, path, sock,
		                    r == -EAGAIN ? "Firecracker is not accepting connections" : strerror(-r));
	uint64_t now = now_ms_monotonic();
	if (now >= deadline || (r = write_full_timeout(fd, req, req_len, (int)(deadline - now))) < 0) {
		r = now >= deadline ? -ETIMEDOUT : r;
		return al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_UNAVAILABLE, -r,
		                    "Firecracker API %s %s: cannot send the request: %s", method, path, strerror(-r));
	}
	char why[256] = "";
	struct fc_response resp = {0};
	if ((r = read_response(fd, deadline, &resp, why, sizeof(why))) < 0)
		return al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_INTERNAL, -r,
		                    "Firecracker API %s %s: bad answer: %s", method, path, why);
	*ret = resp;
	return 0;
}

int fc_call(int dirfd, const char *sock, const char *method, const char *path, json_t *body, unsigned timeout_ms,
            json_t **ret_body, struct al_error *err)
{
	struct fc_response resp = {0};
	int r = fc_request(dirfd, sock, method, path, body, timeout_ms, &resp, err);
	if (r < 0)
		return r;
	if (resp.status != 204 && resp.status != 200) {
		/* Firecracker refusing a request is the daemon's problem, never the API client's. */
		r = al_error_set(err, AL_ERR_INTERNAL, EIO, "Firecracker API %s %s: %d: %s", method, path, resp.status,
		                 resp.fault[0] ? resp.fault : "(no fault_message)");
		fc_response_release(&resp);
		return r;
	}
	if (ret_body)
		*ret_body = TAKE_PTR(resp.body);
	fc_response_release(&resp);
	return 0;
}
