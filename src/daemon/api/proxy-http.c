/* SPDX-License-Identifier: Apache-2.0 */
/* The proxy's HTTP/1.1 heads: the strict parser and the rewriters (RFC 9112
 * 2-6, RFC 9110 5, 7.6.1). */
#include "proxy-http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

_Static_assert(PROXY_RESPONSE_HEAD_MAX < UINT32_MAX, "spans are 32-bit");

/* ------------------------------------------------------------ characters */

static bool is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static unsigned char lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

static bool case_equal(const char *a, size_t alen, const char *b)
{
	if (alen != strlen(b))
		return false;
	for (size_t i = 0; i < alen; i++)
		if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
			return false;
	return true;
}

/* Two counted names alike (proxy_name_alike). */
static bool proxy_name_alike_n(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return false;
	for (size_t i = 0; i < alen; i++) {
		unsigned char c = lower((unsigned char)a[i]), d = lower((unsigned char)b[i]);
		if ((c == '_' ? '-' : c) != (d == '_' ? '-' : d))
			return false;
	}
	return true;
}

bool proxy_name_alike(const char *a, size_t alen, const char *name)
{
	return proxy_name_alike_n(a, alen, name, strlen(name));
}

static struct proxy_span span(size_t off, size_t len)
{
	return (struct proxy_span){.off = (uint32_t)off, .len = (uint32_t)len};
}

static int bad(struct al_error *err, bool response, const char *what)
{
	return al_error_set(err, response ? AL_ERR_GUEST : AL_ERR_INVALID_ARGUMENT, EBADMSG, "malformed HTTP %s: %s",
	                    response ? "response from the sandbox" : "request", what);
}

/* ------------------------------------------------------------ the head */

size_t proxy_head_end(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

static int parse_version(const char *v, size_t len, int *ret_minor)
{
	if (len != 8 || memcmp(v, "HTTP/1.", 7) != 0 || (v[7] != '0' && v[7] != '1'))
		return -EBADMSG;
	*ret_minor = v[7] - '0';
	return 0;
}

/* SECURITY: the request line decides where the request goes (the path form)
 * and what the guest is asked: a token method, an origin-form target of
 * visible ASCII without '#', HTTP/1.0 or 1.1. */
static int parse_request_line(struct proxy_head *h, size_t len, struct al_error *err)
{
	const char *line = h->raw;
	const char *sp1 = memchr(line, ' ', len);
	if (!sp1 || sp1 == line || (size_t)(sp1 - line) > PROXY_METHOD_MAX)
		return bad(err, false, "method missing or too long");
	size_t mlen = (size_t)(sp1 - line);
	for (size_t i = 0; i < mlen; i++)
		if (!is_tchar((unsigned char)line[i]))
			return bad(err, false, "method is not a token");
	size_t toff = mlen + 1;
	const char *sp2 = memchr(line + toff, ' ', len - toff);
	if (!sp2)
		return bad(err, false, "request line without an HTTP version");
	size_t tlen = (size_t)(sp2 - (line + toff));
	if (tlen == 0 || line[toff] != '/')
		return bad(err, false, "request-target is not origin-form (/path?query)");
	for (size_t i = 0; i < tlen; i++) {
		unsigned char c = (unsigned char)line[toff + i];
		if (c <= 0x20 || c >= 0x7f || c == '#')
			return bad(err, false, "request-target with a space, control, '#' or non-ASCII byte");
	}
	size_t voff = toff + tlen + 1;
	if (parse_version(line + voff, len - voff, &h->minor_version) < 0)
		return bad(err, false, "version is not HTTP/1.0 or HTTP/1.1");
	h->method = span(0, mlen);
	h->target = span(toff, tlen);
	return 0;
}

static int parse_status_line(struct proxy_head *h, size_t len, struct al_error *err)
{
	const char *line = h->raw;
	if (len < 12 || parse_version(line, 8, &h->minor_version) < 0 || line[8] != ' ')
		return bad(err, true, "status line is not HTTP/1.x NNN");
	int status = 0;
	for (size_t i = 9; i < 12; i++) {
		if (line[i] < '0' || line[i] > '9')
			return bad(err, true, "status code is not three digits");
		status = status * 10 + (line[i] - '0');
	}
	if (status < 100 || (len > 12 && line[12] != ' '))
		return bad(err, true, "status code out of range");
	for (size_t i = 13; i < len; i++) {
		unsigned char c = (unsigned char)line[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return bad(err, true, "control character in the reason phrase");
	}
	h->status = status;
	return 0;
}

static bool digits_only(const char *s, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* The comma-separated tokens of a Connection field. */
static int parse_connection(struct proxy_head *h, const char *v, size_t len)
{
	size_t i = 0;
	while (i < len) {
		while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t start = i;
		while (i < len && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
			i++;
		if (i == start)
			break;
		const char *tok = v + start;
		size_t tlen = i - start;
		for (size_t k = 0; k < tlen; k++)
			if (!is_tchar((unsigned char)tok[k]))
				return -EBADMSG;
		if (case_equal(tok, tlen, "close"))
			h->conn_close = true;
		else if (case_equal(tok, tlen, "keep-alive"))
			h->conn_keep_alive = true;
		else if (case_equal(tok, tlen, "upgrade"))
			h->conn_upgrade = true;
	}
	return 0;
}

/* SECURITY: the fields that frame and route the message. */
static int field_interpret(struct proxy_head *h, size_t idx, bool *cl_seen, bool *te_seen, struct al_error *err)
{
	const struct proxy_field *f = &h->fields[idx];
	const char *name = h->raw + f->name.off, *v = h->raw + f->value.off;
	size_t nlen = f->name.len, vlen = f->value.len;
	bool resp = h->response;
	if (case_equal(name, nlen, "content-length")) {
		if (*cl_seen)
			return bad(err, resp, "Content-Length given more than once");
		if (!digits_only(v, vlen) || vlen > 18)
			return bad(err, resp, "Content-Length is not a plain number");
		*cl_seen = true;
		uint64_t n = 0;
		for (size_t i = 0; i < vlen; i++)
			n = n * 10 + (uint64_t)(v[i] - '0');
		h->content_length = n;
	} else if (case_equal(name, nlen, "transfer-encoding")) {
		if (*te_seen)
			return bad(err, resp, "Transfer-Encoding given more than once");
		if (!case_equal(v, vlen, "chunked"))
			return bad(err, resp, "Transfer-Encoding other than chunked");
		*te_seen = true;
	} else if (case_equal(name, nlen, "host")) {
		if (h->host >= 0)
			return bad(err, resp, "Host given more than once");
		if (vlen == 0 || vlen > PROXY_HOST_MAX)
			return bad(err, resp, "Host empty or too long");
		for (size_t i = 0; i < vlen; i++) {
			unsigned char c = (unsigned char)v[i];
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			      strchr(".-:[]_", c)))
				return bad(err, resp, "Host with a character a host name does not have");
		}
		h->host = (int)idx;
	} else if (case_equal(name, nlen, "connection")) {
		if (parse_connection(h, v, vlen) < 0)
			return bad(err, resp, "Connection is not a list of tokens");
	} else if (case_equal(name, nlen, "upgrade")) {
		h->upgrade = (int)idx;
	}
	return 0;
}

/* One field line [off, off + len) of raw. */
static int parse_field_line(struct proxy_head *h, size_t off, size_t len, struct al_error *err)
{
	const char *line = h->raw + off;
	bool resp = h->response;
	if (line[0] == ' ' || line[0] == '\t')
		return bad(err, resp, "obsolete line folding");
	const char *colon = memchr(line, ':', len);
	if (!colon || colon == line)
		return bad(err, resp, "field line without a name");
	size_t nlen = (size_t)(colon - line);
	for (size_t i = 0; i < nlen; i++)
		if (!is_tchar((unsigned char)line[i]))
			return bad(err, resp, "field name is not a token (or whitespace before the colon)");
	size_t vs = nlen + 1, ve = len;
	while (vs < ve && (line[vs] == ' ' || line[vs] == '\t'))
		vs++;
	while (ve > vs && (line[ve - 1] == ' ' || line[ve - 1] == '\t'))
		ve--;
	for (size_t i = vs; i < ve; i++) {
		unsigned char c = (unsigned char)line[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return bad(err, resp, "control character in a field value");
	}
	if (h->n_fields == PROXY_FIELDS_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "HTTP %s has more than %d header fields",
		                    resp ? "response" : "request", PROXY_FIELDS_MAX);
	h->fields[h->n_fields++] = (struct proxy_field){.name = span(off, nlen), .value = span(off + vs, ve - vs)};
	return 0;
}

static int head_framing(struct proxy_head *h, bool cl_seen, bool te_seen, struct al_error *err)
{
	if (cl_seen && te_seen)
		return bad(err, h->response, "both Content-Length and Transfer-Encoding");
	if (te_seen && h->minor_version == 0)
		return bad(err, h->response, "Transfer-Encoding in HTTP/1.0");
	h->framing = te_seen ? PROXY_CHUNKED : cl_seen ? PROXY_LENGTH : PROXY_NO_BODY;
	if (!h->response && h->minor_version == 1 && h->host < 0)
		return bad(err, false, "HTTP/1.1 request without Host");
	return 0;
}

int proxy_head_parse(const char *buf, size_t len, bool response, struct proxy_head *ret, struct al_error *err)
{
	size_t max = response ? PROXY_RESPONSE_HEAD_MAX : PROXY_HEAD_MAX;
	if (len > max)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "HTTP %s head is longer than %zu bytes",
		                    response ? "response" : "request", max);
	struct proxy_head *h = ret;
	*h = (struct proxy_head){.raw = buf, .len = len, .response = response, .host = -1, .upgrade = -1};
	bool cl_seen = false, te_seen = false, first = true;
	size_t start = 0;
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == '\r' && (i + 1 >= len || buf[i + 1] != '\n'))
			return bad(err, response, "bare CR");
		if (buf[i] == '\0')
			return bad(err, response, "NUL byte in the head");
		if (buf[i] != '\n')
			continue;
		if (i == 0 || buf[i - 1] != '\r')
			return bad(err, response, "line ending without CR");
		size_t llen = i - 1 - start;
		int r;
		if (first) {
			if (llen == 0)
				return bad(err, response, "empty line before the start line");
			r = response ? parse_status_line(h, llen, err) : parse_request_line(h, llen, err);
			first = false;
		} else if (llen == 0) {
			if (i + 1 != len)
				return bad(err, response, "bytes after the empty line");
			return head_framing(h, cl_seen, te_seen, err);
		} else {
			r = parse_field_line(h, start, llen, err);
			if (r >= 0)
				r = field_interpret(h, h->n_fields - 1, &cl_seen, &te_seen, err);
		}
		if (r < 0)
			return r;
		start = i + 1;
	}
	return bad(err, response, "head without its empty line");
}

int proxy_head_find(const struct proxy_head *h, const char *name, size_t from)
{
	for (size_t i = from; i < h->n_fields; i++)
		if (case_equal(h->raw + h->fields[i].name.off, h->fields[i].name.len, name))
			return (int)i;
	return -1;
}

/* ------------------------------------------------------------ rewriting */

struct out {
	char *buf;
	size_t size, len;
	bool overflow;
};

static void out_put(struct out *o, const char *s, size_t n)
{
	if (o->overflow || n > o->size - o->len) {
		o->overflow = true;
		return;
	}
	memcpy(o->buf + o->len, s, n);
	o->len += n;
}

static void out_str(struct out *o, const char *s)
{
	out_put(o, s, strlen(s));
}

static void out_field(struct out *o, const char *name, const char *value)
{
	out_str(o, name);
	out_str(o, ": ");
	out_str(o, value);
	out_str(o, "\r\n");
}

/* Hop-by-hop fields (RFC 9110 7.6.1) and what a proxy consumes. */
static const char *const hop_by_hop[] = {
    "connection", "keep-alive", "proxy-connection", "te", "upgrade", "proxy-authorization", "proxy-authenticate",
};
/* SECURITY: credentials of the proxy and headers only the proxy may set:
 * removed under any spelling a server could read as them. */
static const char *const consumed[] = {
    "x-airlock-traffic-token", "e2b-traffic-access-token", "cookie", "x-forwarded-for", "x-forwarded-host",
    "x-forwarded-proto",       "x-forwarded-prefix",
};
static const char *const framing_fields[] = {"content-length", "transfer-encoding", "host"};

static bool in_list(const char *name, size_t len, const char *const list[], size_t n, bool alike)
{
	for (size_t i = 0; i < n; i++)
		if (alike ? proxy_name_alike(name, len, list[i]) : case_equal(name, len, list[i]))
			return true;
	return false;
}

/* Whether a Connection field of h names this field name. */
static bool named_by_connection(const struct proxy_head *h, const char *name, size_t nlen)
{
	if (in_list(name, nlen, framing_fields, ARRAY_SIZE(framing_fields), true))
		return false;
	for (int c = proxy_head_find(h, "connection", 0); c >= 0; c = proxy_head_find(h, "connection", (size_t)c + 1)) {
		const char *v = h->raw + h->fields[c].value.off;
		size_t len = h->fields[c].value.len, i = 0;
		while (i < len) {
			while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
				i++;
			size_t s = i;
			while (i < len && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
				i++;
			if (i > s && proxy_name_alike_n(v + s, i - s, name, nlen))
				return true;
		}
	}
	return false;
}

static void copy_field(struct out *o, const struct proxy_head *h, size_t i)
{
	const struct proxy_field *f = &h->fields[i];
	out_put(o, h->raw + f->name.off, f->name.len);
	out_str(o, ": ");
	out_put(o, h->raw + f->value.off, f->value.len);
	out_str(o, "\r\n");
}

int proxy_request_rewrite(const struct proxy_head *h, const struct proxy_request_rewrite *rw, char *out,
                          size_t out_size, size_t *ret_len)
{
	struct out o = {.buf = out, .size = out_size};
	out_put(&o, h->raw + h->method.off, h->method.len);
	out_str(&o, " ");
	out_str(&o, rw->target);
	out_str(&o, h->minor_version ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n");
	for (size_t i = 0; i < h->n_fields; i++) {
		const char *name = h->raw + h->fields[i].name.off;
		size_t nlen = h->fields[i].name.len;
		if (in_list(name, nlen, hop_by_hop, ARRAY_SIZE(hop_by_hop), false) ||
		    in_list(name, nlen, consumed, ARRAY_SIZE(consumed), true) || named_by_connection(h, name, nlen))
			continue;
		if (rw->drop_authorization && proxy_name_alike(name, nlen, "authorization"))
			continue;
		copy_field(&o, h, i);
	}
	if (rw->cookie && rw->cookie[0])
		out_field(&o, "Cookie", rw->cookie);
	if (rw->forwarded_for)
		out_field(&o, "X-Forwarded-For", rw->forwarded_for);
	if (rw->forwarded_proto)
		out_field(&o, "X-Forwarded-Proto", rw->forwarded_proto);
	if (rw->forwarded_host)
		out_field(&o, "X-Forwarded-Host", rw->forwarded_host);
	if (rw->forwarded_prefix)
		out_field(&o, "X-Forwarded-Prefix", rw->forwarded_prefix);
	if (rw->upgrade && h->upgrade >= 0) {
		out_str(&o, "Connection: upgrade\r\n");
		copy_field(&o, h, (size_t)h->upgrade);
	}
	out_str(&o, "\r\n");
	if (o.overflow)
		return -E2BIG;
	*ret_len = o.len;
	return 0;
}

int proxy_response_rewrite(const struct proxy_head *h, bool close, char *out, size_t out_size, size_t *ret_len)
{
	struct out o = {.buf = out, .size = out_size};
	const char *eol = memchr(h->raw, '\n', h->len);
	out_put(&o, h->raw, (size_t)(eol - h->raw) + 1);
	bool switching = h->status == 101;
	for (size_t i = 0; i < h->n_fields; i++) {
		const char *name = h->raw + h->fields[i].name.off;
		size_t nlen = h->fields[i].name.len;
		if (switching && case_equal(name, nlen, "upgrade")) {
			copy_field(&o, h, i);
			continue;
		}
		if (in_list(name, nlen, hop_by_hop, ARRAY_SIZE(hop_by_hop), false) ||
		    named_by_connection(h, name, nlen))
			continue;
		copy_field(&o, h, i);
	}
	if (switching)
		out_str(&o, "Connection: upgrade\r\n");
	else if (close)
		out_str(&o, "Connection: close\r\n");
	out_str(&o, "\r\n");
	if (o.overflow)
		return -E2BIG;
	*ret_len = o.len;
	return 0;
}

const char *proxy_status_reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 302:
		return "Found";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 408:
		return "Request Timeout";
	case 409:
		return "Conflict";
	case 413:
		return "Content Too Large";
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
		return "Error";
	}
}

size_t proxy_answer_format(char *out, size_t out_size, int status, bool close, const char *extra, const char *body)
{
	int n = snprintf(out, out_size,
	                 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
	                 "Cache-Control: no-store\r\n%s%s\r\n%s",
	                 status, proxy_status_reason(status), strlen(body), close ? "Connection: close\r\n" : "",
	                 extra ? extra : "", body);
	if (n < 0)
		return 0;
	return (size_t)n < out_size ? (size_t)n : out_size - 1;
}
