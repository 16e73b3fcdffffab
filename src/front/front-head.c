/* SPDX-License-Identifier: Apache-2.0 */
/* A client's request head: parsed strictly, rewritten for a node (front-head.h). */
#include "front-head.h"

#include "util.h"

#define FRONT_VALUE_MAX 8192 /* one field's value */

size_t front_head_end(const char *buf, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

static int bad(struct al_error *err, const char *what)
{
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG, "malformed request head: %s", what);
}

/* RFC 9110 tchar. */
static bool tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool ows(char c)
{
	return c == ' ' || c == '\t';
}

static char lower_ascii(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool caseless_eq(const char *a, size_t alen, const char *b)
{
	if (alen != strlen(b))
		return false;
	for (size_t i = 0; i < alen; i++)
		if (lower_ascii(a[i]) != lower_ascii(b[i]))
			return false;
	return true;
}

/* A name equal to name but for case and '_' for '-' (how CGI-style servers
 * read names): what is stripped is stripped under both spellings. */
static bool name_alike(const char *a, size_t alen, const char *name)
{
	if (alen != strlen(name))
		return false;
	for (size_t i = 0; i < alen; i++)
		if (lower_ascii(a[i] == '_' ? '-' : a[i]) != lower_ascii(name[i]))
			return false;
	return true;
}

/* Splits buf[0, len) into lines ending in CRLF; *ret_line_len excludes the CRLF. */
static int next_line(const char *buf, size_t len, size_t off, size_t *ret_line_len, struct al_error *err)
{
	for (size_t i = off; i < len; i++) {
		if (buf[i] == '\r') {
			if (i + 1 >= len || buf[i + 1] != '\n')
				return bad(err, "a bare CR");
			*ret_line_len = i - off;
			return 0;
		}
		if (buf[i] == '\n')
			return bad(err, "a line ends in LF without CR");
	}
	return bad(err, "the head does not end with an empty line");
}

static int parse_version(const char *v, size_t n, int *ret, struct al_error *err)
{
	if (n != 8 || memcmp(v, "HTTP/1.", 7) != 0 || (v[7] != '0' && v[7] != '1'))
		return bad(err, "the version must be HTTP/1.0 or HTTP/1.1");
	*ret = v[7] - '0';
	return 0;
}

/* origin-form: "/" then visible ASCII but '#'. */
static int check_target(const char *t, size_t n, struct al_error *err)
{
	if (n == 0 || t[0] != '/')
		return bad(err, "the request-target must be a path starting with /");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)t[i];
		if (c <= 0x20 || c >= 0x7f || c == '#')
			return bad(err,
			           "the request-target holds a control character, a space, '#' or a non-ASCII byte");
	}
	return 0;
}

static int parse_request_line(const char *buf, size_t n, struct front_head *h, struct al_error *err)
{
	const char *sp1 = memchr(buf, ' ', n);
	if (!sp1 || sp1 == buf)
		return bad(err, "the request line must be METHOD SP TARGET SP VERSION");
	size_t mlen = (size_t)(sp1 - buf);
	if (mlen > FRONT_METHOD_MAX)
		return bad(err, "the method is too long");
	for (size_t i = 0; i < mlen; i++)
		if (!tchar((unsigned char)buf[i]))
			return bad(err, "the method is not a token");
	const char *t = sp1 + 1;
	const char *sp2 = memchr(t, ' ', n - (size_t)(t - buf));
	if (!sp2)
		return bad(err, "the request line must be METHOD SP TARGET SP VERSION");
	size_t tlen = (size_t)(sp2 - t);
	int r = check_target(t, tlen, err);
	if (r < 0)
		return r;
	if ((r = parse_version(sp2 + 1, n - (size_t)(sp2 + 1 - buf), &h->minor_version, err)) < 0)
		return r;
	h->method = (struct front_span){0, (uint32_t)mlen};
	h->target = (struct front_span){(uint32_t)(t - buf), (uint32_t)tlen};
	const char *q = memchr(t, '?', tlen);
	size_t plen = q ? (size_t)(q - t) : tlen;
	h->path = (struct front_span){h->target.off, (uint32_t)plen};
	h->query = q ? (struct front_span){(uint32_t)(q + 1 - buf), (uint32_t)(tlen - plen - 1)}
	             : (struct front_span){h->target.off + (uint32_t)tlen, 0};
	return 0;
}

/* One "name: value" line into h->fields. */
static int parse_field(const char *buf, size_t off, size_t n, struct front_head *h, struct al_error *err)
{
	const char *line = buf + off;
	if (ows(line[0]))
		return bad(err, "obsolete line folding");
	const char *colon = memchr(line, ':', n);
	if (!colon || colon == line)
		return bad(err, "a header field without a name and a colon");
	size_t nlen = (size_t)(colon - line);
	for (size_t i = 0; i < nlen; i++)
		if (!tchar((unsigned char)line[i]))
			return bad(err, "a header field name that is not a token (or whitespace before the colon)");
	size_t v = nlen + 1, e = n;
	while (v < e && ows(line[v]))
		v++;
	while (e > v && ows(line[e - 1]))
		e--;
	if (e - v > FRONT_VALUE_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "a header field's value is over %d bytes",
		                    FRONT_VALUE_MAX);
	for (size_t i = v; i < e; i++) {
		unsigned char c = (unsigned char)line[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return bad(err, "a control character in a header field's value");
	}
	if (h->n_fields >= FRONT_FIELDS_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "more than %d header fields", FRONT_FIELDS_MAX);
	h->fields[h->n_fields++] =
	    (struct front_field){{(uint32_t)off, (uint32_t)nlen}, {(uint32_t)(off + v), (uint32_t)(e - v)}};
	return 0;
}

/* Each comma-separated token of a Connection value. */
static void connection_tokens(const char *v, size_t n, struct front_head *h)
{
	size_t i = 0;
	while (i < n) {
		while (i < n && (ows(v[i]) || v[i] == ','))
			i++;
		size_t s = i;
		while (i < n && v[i] != ',' && !ows(v[i]))
			i++;
		if (caseless_eq(v + s, i - s, "close"))
			h->conn_close = true;
		else if (caseless_eq(v + s, i - s, "upgrade"))
			h->conn_upgrade = true;
	}
}

static int parse_content_length(const char *v, size_t n, struct front_head *h, struct al_error *err)
{
	if (h->has_length)
		return bad(err, "Content-Length given twice");
	if (n == 0 || n > 19)
		return bad(err, "Content-Length must be plain digits");
	uint64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return bad(err, "Content-Length must be plain digits");
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	h->has_length = true;
	h->content_length = x;
	return 0;
}

/* The fields the framing and routing depend on. */
static int classify_fields(struct front_head *h, struct al_error *err)
{
	const char *b = h->raw;
	bool upgrade_field = false;
	h->host = -1;
	for (size_t i = 0; i < h->n_fields; i++) {
		const struct front_field *f = &h->fields[i];
		const char *name = b + f->name.off, *v = b + f->value.off;
		size_t nl = f->name.len, vl = f->value.len;
		int r = 0;
		if (caseless_eq(name, nl, "host")) {
			if (h->host >= 0)
				return bad(err, "more than one Host");
			if (vl > FRONT_HOST_MAX)
				return bad(err, "Host is too long");
			h->host = (int)i;
		} else if (caseless_eq(name, nl, "content-length")) {
			r = parse_content_length(v, vl, h, err);
		} else if (caseless_eq(name, nl, "transfer-encoding")) {
			if (h->chunked || !caseless_eq(v, vl, "chunked"))
				return bad(err, "Transfer-Encoding must be given once, as exactly \"chunked\"");
			h->chunked = true;
		} else if (caseless_eq(name, nl, "connection")) {
			connection_tokens(v, vl, h);
		} else if (caseless_eq(name, nl, "upgrade")) {
			upgrade_field = true;
		}
		if (r < 0)
			return r;
	}
	if (h->chunked && (h->has_length || h->minor_version == 0))
		return bad(err, "Transfer-Encoding with Content-Length, or in HTTP/1.0");
	if (h->minor_version == 1 && h->host < 0)
		return bad(err, "an HTTP/1.1 request without Host");
	h->upgrade = upgrade_field && h->conn_upgrade;
	return 0;
}

int front_head_parse(const char *buf, size_t len, struct front_head *ret, struct al_error *err)
{
	if (len > FRONT_HEAD_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "the request head is over %d bytes", FRONT_HEAD_MAX);
	if (len < 4 || memcmp(buf + len - 4, "\r\n\r\n", 4) != 0)
		return bad(err, "the head must end with CRLF CRLF");
	if (memchr(buf, '\0', len))
		return bad(err, "a NUL byte");
	struct front_head *h = ret;
	memset(h, 0, offsetof(struct front_head, fields));
	h->raw = buf;
	h->len = len;
	size_t n, off = 0;
	int r = next_line(buf, len, off, &n, err);
	if (r < 0)
		return r;
	if ((r = parse_request_line(buf, n, h, err)) < 0)
		return r;
	for (off += n + 2;; off += n + 2) {
		if ((r = next_line(buf, len, off, &n, err)) < 0)
			return r;
		if (n == 0)
			break;
		if ((r = parse_field(buf, off, n, h, err)) < 0)
			return r;
	}
	if (off + 2 != len)
		return bad(err, "bytes after the empty line");
	return classify_fields(h, err);
}

int front_head_find(const struct front_head *h, const char *name, size_t from)
{
	for (size_t i = from; i < h->n_fields; i++)
		if (caseless_eq(h->raw + h->fields[i].name.off, h->fields[i].name.len, name))
			return (int)i;
	return -1;
}

int front_head_value(const struct front_head *h, const char *name, char *out, size_t size)
{
	int i = front_head_find(h, name, 0);
	if (i < 0)
		return 0;
	if (front_head_find(h, name, (size_t)i + 1) >= 0)
		return -EBADMSG;
	const struct front_span v = h->fields[i].value;
	if (v.len >= size)
		return -E2BIG;
	memcpy(out, h->raw + v.off, v.len);
	out[v.len] = '\0';
	return 1;
}

bool front_span_is(const struct front_head *h, struct front_span s, const char *str)
{
	return s.len == strlen(str) && memcmp(h->raw + s.off, str, s.len) == 0;
}

bool front_sandbox_id_valid(const char *s, size_t n)
{
	if (n != FRONT_SANDBOX_ID_LEN || memcmp(s, "sb-", 3) != 0)
		return false;
	for (size_t i = 3; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int front_proxy_host(const char *host, char ret_id[FRONT_SANDBOX_ID_LEN + 1])
{
	/* SECURITY: host is a client's Host value; only its shape is read. */
	size_t i = 0;
	unsigned port = 0;
	while (host[i] >= '0' && host[i] <= '9' && i < 5)
		port = port * 10 + (unsigned)(host[i++] - '0');
	if (i == 0 || host[0] == '0' || port > 65535 || host[i] != '-')
		return -ENOENT;
	const char *id = host + i + 1;
	size_t n = strnlen(id, FRONT_SANDBOX_ID_LEN + 1);
	if (n <= FRONT_SANDBOX_ID_LEN || id[FRONT_SANDBOX_ID_LEN] != '.' || !id[FRONT_SANDBOX_ID_LEN + 1])
		return -ENOENT;
	char lower[FRONT_SANDBOX_ID_LEN + 1];
	for (size_t k = 0; k < FRONT_SANDBOX_ID_LEN; k++)
		lower[k] = lower_ascii(id[k]);
	lower[FRONT_SANDBOX_ID_LEN] = '\0';
	if (!front_sandbox_id_valid(lower, FRONT_SANDBOX_ID_LEN))
		return -ENOENT;
	memcpy(ret_id, lower, sizeof(lower));
	return 0;
}

/* ------------------------------------------------------------ rewriting */

struct out_buf {
	char *p;
	size_t size, len;
	bool over;
};

static void out_add(struct out_buf *o, const char *s, size_t n)
{
	if (o->over || n > o->size - o->len) {
		o->over = true;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static void out_str(struct out_buf *o, const char *s)
{
	out_add(o, s, strlen(s));
}

static void out_field(struct out_buf *o, const char *name, const char *value)
{
	out_str(o, name);
	out_str(o, ": ");
	out_str(o, value);
	out_str(o, "\r\n");
}

/* A field the front drops (it adds its own, or it is the client's credential). */
static bool field_dropped(const struct front_head *h, const struct front_field *f, const struct front_rewrite *rw)
{
	static const char *const always[] = {"x-airlock-principal", "x-forwarded-for", "connection", "keep-alive",
	                                     "proxy-connection"};
	const char *n = h->raw + f->name.off;
	for (size_t i = 0; i < ARRAY_SIZE(always); i++)
		if (name_alike(n, f->name.len, always[i]))
			return true;
	if (!rw->keep_credentials &&
	    (name_alike(n, f->name.len, "authorization") || name_alike(n, f->name.len, "x-api-key")))
		return true;
	if (rw->ws_protocol && name_alike(n, f->name.len, "sec-websocket-protocol"))
		return true;
	if (rw->drop_expect && name_alike(n, f->name.len, "expect"))
		return true;
	return !h->upgrade && name_alike(n, f->name.len, "upgrade");
}

int front_head_rewrite(const struct front_head *h, const struct front_rewrite *rw, char *out, size_t size,
                       size_t *ret_len)
{
	struct out_buf o = {.p = out, .size = size};
	out_add(&o, h->raw + h->method.off, h->method.len);
	out_str(&o, " ");
	if (rw->target)
		out_str(&o, rw->target);
	else
		out_add(&o, h->raw + h->target.off, h->target.len);
	out_str(&o, h->minor_version ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n");
	for (size_t i = 0; i < h->n_fields; i++) {
		const struct front_field *f = &h->fields[i];
		if (field_dropped(h, f, rw))
			continue;
		out_add(&o, h->raw + f->name.off, f->name.len);
		out_str(&o, ": ");
		out_add(&o, h->raw + f->value.off, f->value.len);
		out_str(&o, "\r\n");
	}
	if (rw->principal)
		out_field(&o, "X-Airlock-Principal", rw->principal);
	if (rw->authorization)
		out_field(&o, "Authorization", rw->authorization);
	if (rw->forwarded_for)
		out_field(&o, "X-Forwarded-For", rw->forwarded_for);
	if (rw->ws_protocol && rw->ws_protocol[0])
		out_field(&o, "Sec-WebSocket-Protocol", rw->ws_protocol);
	out_str(&o, h->upgrade ? "Connection: Upgrade\r\n\r\n" : "Connection: close\r\n\r\n");
	if (o.over)
		return -E2BIG;
	*ret_len = o.len;
	return 0;
}
