/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the HTTP/1.1 request stream parser and head rewriter
 * of intercepted connections (src/egress/egress-http1.c): everything a guest
 * sends on a connection the gateway terminates TLS for.
 *
 * The first input byte chooses how the rest is split; the rest is the
 * stream. Checks, beyond the sanitizers:
 *  - the stream fed at once, in two pieces (split chosen by the first byte)
 *    and in small pieces gives the same heads, body byte counts per request,
 *    final state, error and message;
 *  - the bytes taken as heads plus the bytes handed back as body never
 *    exceed the input, and without an error every byte is taken;
 *  - every head is the input's bytes, ends with CRLFCRLF, is within its
 *    limits, and its spans, fields, Host and framing are consistent;
 *  - the rewritten head (credential header removed and added, placeholder
 *    replaced) parses again to the same request line, Host and framing, and
 *    to the fields expected, in order; a rewrite that does not fit fails and
 *    leaves nothing of the secret in the output buffer.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress-http1.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-egress-http1: check failed: %s (line %d)\n", #cond, __LINE__);           \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

#define PLACEHOLDER "PLACEHOLDER"
#define SECRET "s3cr3t"

struct summary {
	uint64_t hash; /* FNV-1a over heads, body counts, the end */
	size_t heads, ends, head_bytes, body_bytes, consumed;
	int error;
	struct al_error err;
	bool idle;
};

static void hash_bytes(struct summary *s, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		s->hash ^= b[i];
		s->hash *= 0x100000001b3ULL;
	}
}

static void hash_u64(struct summary *s, uint64_t v)
{
	hash_bytes(s, &v, sizeof(v));
}

static bool is_tchar(uint8_t c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool name_is(const struct egress_http1_head *h, const struct egress_http1_field *f, const char *name)
{
	return f->name.len == strlen(name) && strncasecmp(egress_http1_span_ptr(h, f->name), name, f->name.len) == 0;
}

/* Any case, '_' for '-': how the rewriter matches names to remove. */
static bool name_alike(const struct egress_http1_head *h, const struct egress_http1_field *f, const char *name)
{
	if (f->name.len != strlen(name))
		return false;
	for (size_t i = 0; i < f->name.len; i++) {
		char a = (char)tolower((unsigned char)h->raw[f->name.off + i]),
		     b = (char)tolower((unsigned char)name[i]);
		if ((a == '_' ? '-' : a) != (b == '_' ? '-' : b))
			return false;
	}
	return true;
}

static bool removed(const struct egress_http1_head *h, const struct egress_http1_field *f)
{
	return name_alike(h, f, "authorization") || name_alike(h, f, "x-remove");
}

static bool interpreted(const struct egress_http1_head *h, const struct egress_http1_field *f)
{
	static const char *const names[] = {"host", "content-length", "transfer-encoding", "connection", "expect"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if (name_is(h, f, names[i]))
			return true;
	}
	return false;
}

static void check_span(const struct egress_http1_head *h, struct egress_http1_span s)
{
	CHECK((size_t)s.off + s.len <= h->len);
}

static void check_head(const struct egress_http1_head *h, const uint8_t *at, size_t avail)
{
	CHECK(h->len >= 4 && h->len <= EGRESS_HTTP1_HEAD_MAX && h->len <= avail);
	CHECK(memcmp(h->raw, at, h->len) == 0);
	CHECK(memcmp(h->raw + h->len - 4, "\r\n\r\n", 4) == 0);
	CHECK(h->minor_version == 0 || h->minor_version == 1);
	size_t mlen = strlen(h->method);
	CHECK(mlen >= 1 && mlen <= EGRESS_HTTP1_METHOD_MAX);
	CHECK(memcmp(h->raw, h->method, mlen) == 0);
	CHECK(strcasecmp(h->method, "CONNECT") != 0 && strcasecmp(h->method, "TRACE") != 0);
	CHECK(h->host_len >= 1 && h->host_len <= EGRESS_HTTP1_HOST_MAX && strlen(h->host) == h->host_len);
	for (size_t i = 0; i < h->host_len; i++)
		CHECK((uint8_t)h->host[i] > 0x20 && (uint8_t)h->host[i] != 0x7f);
	check_span(h, h->request_line);
	check_span(h, h->target);
	check_span(h, h->path);
	CHECK(h->request_line.off == 0 && h->request_line.len <= EGRESS_HTTP1_LINE_MAX);
	CHECK(h->target.len >= 1);
	CHECK(h->n_fields >= 1 && h->n_fields <= EGRESS_HTTP1_FIELDS_MAX);
	size_t hosts = 0, cls = 0, tes = 0;
	for (size_t i = 0; i < h->n_fields; i++) {
		const struct egress_http1_field *f = &h->fields[i];
		check_span(h, f->line);
		check_span(h, f->name);
		check_span(h, f->value);
		CHECK(f->name.off == f->line.off && f->name.len >= 1);
		CHECK((size_t)f->value.off >= (size_t)f->name.off + f->name.len + 1);
		CHECK((size_t)f->value.off + f->value.len <= (size_t)f->line.off + f->line.len);
		CHECK(h->raw[f->name.off + f->name.len] == ':');
		for (size_t k = 0; k < f->name.len; k++)
			CHECK(is_tchar(h->raw[f->name.off + k]));
		for (size_t k = 0; k < f->line.len; k++) {
			uint8_t c = h->raw[f->line.off + k];
			CHECK(c == '\t' || (c >= 0x20 && c != 0x7f));
		}
		if (f->value.len > 0) {
			uint8_t a = h->raw[f->value.off], z = h->raw[f->value.off + f->value.len - 1];
			CHECK(a != ' ' && a != '\t' && z != ' ' && z != '\t');
		}
		hosts += name_is(h, f, "host");
		cls += name_is(h, f, "content-length");
		tes += name_is(h, f, "transfer-encoding");
		CHECK(name_is(h, f, "content-length") || !name_alike(h, f, "content-length"));
		CHECK(name_is(h, f, "transfer-encoding") || !name_alike(h, f, "transfer-encoding"));
		CHECK(!name_is(h, f, "upgrade") && !name_is(h, f, "http2-settings"));
	}
	CHECK(hosts == 1 && cls <= 1 && tes <= 1 && !(cls && tes));
	CHECK(h->framing == (tes ? EGRESS_HTTP1_CHUNKED : cls ? EGRESS_HTTP1_LENGTH : EGRESS_HTTP1_NO_BODY));
	CHECK(h->content_length <= (uint64_t)INT64_MAX);
}

/* The fields the placeholder may be replaced in (issue 17): nowhere else. */
static const char *const subst_fields[] = {"Authorization", "X-Api-Key", "Cookie"};

static bool subst_field(const struct egress_http1_head *h, const struct egress_http1_field *f)
{
	for (size_t i = 0; i < ARRAY_SIZE(subst_fields); i++)
		if (name_is(h, f, subst_fields[i]))
			return true;
	return false;
}

/* The value of a kept field after the rewrite, computed the simple way. */
static size_t expected_value(const struct egress_http1_head *h, const struct egress_http1_field *f, char *buf,
                             size_t size)
{
	const char *v = egress_http1_span_ptr(h, f->value);
	size_t n = f->value.len, o = 0, pl = strlen(PLACEHOLDER), sl = strlen(SECRET);
	for (size_t i = 0; i < n;) {
		if (!interpreted(h, f) && subst_field(h, f) && n - i >= pl && memcmp(v + i, PLACEHOLDER, pl) == 0) {
			CHECK(o + sl <= size);
			memcpy(buf + o, SECRET, sl);
			o += sl;
			i += pl;
		} else {
			CHECK(o < size);
			buf[o++] = v[i++];
		}
	}
	return o;
}

static void check_rewrite(const struct egress_http1_head *h, uint8_t sel)
{
	static uint8_t out[EGRESS_HTTP1_OUT_MAX];
	static char want[EGRESS_HTTP1_HEAD_MAX];
	const char *const remove[] = {"authorization", "X-Remove"};
	const struct egress_http1_field_add add[] = {{"Authorization", "Bearer " SECRET, strlen("Bearer " SECRET)}};
	const struct egress_http1_subst subst[] = {
	    {PLACEHOLDER, strlen(PLACEHOLDER), SECRET, strlen(SECRET), subst_fields, ARRAY_SIZE(subst_fields)}};
	const struct egress_http1_rewrite rw = {
	    .remove = remove, .n_remove = 2, .add = add, .n_add = 1, .subst = subst, .n_subst = 1};
	size_t len = 0;
	struct al_error err = {0};
	int r = egress_http1_head_rewrite(h, &rw, out, sizeof(out), &len, &err);
	CHECK(r == 0); /* the head shrinks or grows by one short field: always fits */

	size_t kept = 0;
	for (size_t i = 0; i < h->n_fields; i++)
		kept += !removed(h, &h->fields[i]);
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	size_t used = 0;
	int ev = egress_http1_feed(p, out, len, &used, &err);
	if (kept + 1 > EGRESS_HTTP1_FIELDS_MAX || len > EGRESS_HTTP1_HEAD_MAX) {
		CHECK(ev == -E2BIG);
	} else {
		CHECK(ev == EGRESS_HTTP1_EV_HEAD && used == len);
		const struct egress_http1_head *g = egress_http1_parser_head(p);
		CHECK(g->request_line.len == h->request_line.len);
		CHECK(memcmp(g->raw, h->raw, h->request_line.len) == 0);
		CHECK(strcmp(g->host, h->host) == 0 && strcmp(g->method, h->method) == 0);
		CHECK(g->framing == h->framing && g->content_length == h->content_length);
		CHECK(g->keep_alive == h->keep_alive);
		CHECK(g->n_fields == kept + 1);
		size_t j = 0;
		for (size_t i = 0; i < h->n_fields; i++) {
			const struct egress_http1_field *f = &h->fields[i];
			if (removed(h, f))
				continue;
			const struct egress_http1_field *e = &g->fields[j++];
			CHECK(e->name.len == f->name.len);
			CHECK(memcmp(egress_http1_span_ptr(g, e->name), egress_http1_span_ptr(h, f->name),
			             f->name.len) == 0);
			size_t wl = expected_value(h, f, want, sizeof(want));
			CHECK(e->value.len == wl && memcmp(egress_http1_span_ptr(g, e->value), want, wl) == 0);
		}
		const struct egress_http1_field *last = &g->fields[j];
		CHECK(name_is(g, last, "authorization"));
		CHECK(last->value.len == strlen("Bearer " SECRET));
	}

	/* Too small a buffer: refused, and nothing written stays. */
	size_t small = (size_t)sel * 131u % len;
	memset(out, 0, sizeof(out));
	size_t n2 = 4242;
	CHECK(egress_http1_head_rewrite(h, &rw, out, small, &n2, NULL) == -E2BIG);
	CHECK(n2 == 4242);
	for (size_t i = 0; i < sizeof(out); i++)
		CHECK(out[i] == 0);
}

/* Feeds data in pieces: the first of first_len bytes (0: all), then pieces of
 * step bytes. One-shot runs (full) also check every head and rewrite it. */
static void run(const uint8_t *data, size_t size, size_t first_len, size_t step, bool full, uint8_t sel,
                struct summary *s)
{
	cleanup_egress_http1_parser struct egress_http1_parser *p = egress_http1_parser_new();
	memset(s, 0, sizeof(*s));
	s->hash = 0xcbf29ce484222325ULL;
	size_t pos = 0, body = 0, head_start = 0;
	do {
		size_t piece = pos == 0 && first_len ? MIN(first_len, size) : step ? MIN(step, size - pos) : size - pos;
		size_t off = 0;
		for (;;) {
			size_t used = 0;
			int ev = egress_http1_feed(p, data + pos + off, piece - off, &used, &s->err);
			if (ev < 0) {
				CHECK(ev == -EBADMSG || ev == -E2BIG || ev == -EOPNOTSUPP || ev == -ENOMSG);
				CHECK(s->err.message[0] != '\0');
				s->error = ev;
				hash_u64(s, body);
				hash_bytes(s, s->err.message, strlen(s->err.message));
				s->consumed += off;
				return;
			}
			CHECK(used <= piece - off);
			if (ev == EGRESS_HTTP1_EV_HEAD) {
				const struct egress_http1_head *h = egress_http1_parser_head(p);
				CHECK(h != NULL);
				s->heads++;
				s->head_bytes += h->len;
				if (full) {
					check_head(h, data + head_start, size - head_start);
					CHECK(head_start + h->len == pos + off + used);
					check_rewrite(h, sel);
				}
				hash_u64(s, 1);
				hash_bytes(s, h->raw, h->len);
				hash_u64(s, h->framing);
				hash_u64(s, h->content_length);
				hash_u64(s, h->n_fields);
				hash_u64(s, h->keep_alive);
				body = 0;
			} else if (ev == EGRESS_HTTP1_EV_BODY) {
				CHECK(used > 0);
				body += used;
				s->body_bytes += used;
			} else if (ev == EGRESS_HTTP1_EV_END) {
				CHECK(used == 0);
				s->ends++;
				hash_u64(s, 2);
				hash_u64(s, body);
				head_start = pos + off;
			}
			off += used;
			if (ev == EGRESS_HTTP1_EV_NEED_MORE) {
				CHECK(off == piece);
				break;
			}
		}
		pos += piece;
		s->consumed = pos;
	} while (pos < size);
	s->idle = egress_http1_parser_idle(p);
	hash_u64(s, body);
	hash_u64(s, s->idle);
}

static void check_same(const struct summary *a, const struct summary *b)
{
	CHECK(a->hash == b->hash);
	CHECK(a->heads == b->heads && a->ends == b->ends);
	CHECK(a->head_bytes == b->head_bytes && a->body_bytes == b->body_bytes);
	CHECK(a->error == b->error && a->idle == b->idle);
	CHECK(strcmp(a->err.message, b->err.message) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct summary whole, halves, pieces;
	if (size == 0)
		return 0;
	uint8_t sel = data[0];
	data++;
	size--;

	run(data, size, 0, 0, true, sel, &whole);
	CHECK(whole.head_bytes + whole.body_bytes <= size);
	CHECK(whole.heads == whole.ends || whole.heads == whole.ends + 1);
	if (whole.error == 0)
		CHECK(whole.consumed == size);

	size_t split = size ? ((size_t)sel * 2654435761u) % (size + 1) : 0;
	run(data, size, split, 0, false, sel, &halves);
	check_same(&whole, &halves);
	run(data, size, 0, (size_t)(sel % 7) + 1, false, sel, &pieces);
	check_same(&whole, &pieces);
	return 0;
}
