/* SPDX-License-Identifier: Apache-2.0 */
#include "egress-redact.h"

#include <errno.h>
#include <string.h>

#include "egress-http.h"
#include "util.h"

enum rstate {
	RS_HEAD,       /* a response head (status line, fields, empty line) */
	RS_LENGTH,     /* Content-Length body: remaining bytes */
	RS_CHUNK_LINE, /* chunk-size [; ext] CRLF (framing) */
	RS_CHUNK_DATA, /* chunk data: remaining bytes */
	RS_CHUNK_CR,   /* the CRLF after chunk data (framing) */
	RS_CHUNK_LF,
	RS_TRAILER, /* trailer fields up to the empty line */
	RS_CLOSE,   /* the body runs to the end of the connection */
};

struct value {
	uint8_t *bytes; /* SECURITY: a secret; wiped when freed */
	size_t len;
	uint32_t *fail; /* KMP failure function */
	size_t q;       /* the longest prefix matched by the last logical bytes */
	uint64_t count;
};

struct egress_redactor {
	struct value values[EGRESS_REDACT_VALUES_MAX];
	size_t n_values;

	/* The stream: buf[0, sent) went to the guest, [sent, ready) may go,
	 * [ready, len) is held. base: the stream offset of buf[0]. */
	uint8_t *buf;
	size_t len, ready, sent;
	uint64_t base;
	/* Where the last logical bytes are in the stream: a ring of runs
	 * (logical bytes that are contiguous in the stream share one), enough
	 * for the last EGRESS_REDACT_VALUE_MAX of them even one per run. The
	 * last len(value) logical bytes are what a match masks. */
	struct run {
		uint64_t at;     /* stream offset of its first byte */
		uint64_t lstart; /* logical index of its first byte */
		uint64_t len;
	} * runs;
	uint64_t n_runs; /* ever added */
	uint64_t lcount; /* logical bytes ever seen */

	enum rstate st;
	/* the head */
	uint64_t head_start; /* stream offset of its first byte */
	size_t head_len;
	uint64_t line_start;
	size_t line_len;
	bool saw_cr;
	bool status_done;
	int status;
	bool cl_seen, te_seen, ce_compressed;
	uint64_t content_length;
	/* bodies */
	uint64_t remaining;
	uint64_t chunk_line_start; /* stream offset of the chunk-size line being read */
	unsigned chunk_digits;
	bool chunk_ext;
	size_t trailer_bytes;

	struct pending {
		bool head, identity;
	} pending[EGRESS_REDACT_PENDING_MAX];
	size_t pend_first, n_pending;

	int failed; /* the first error, repeated */
	struct al_error failure;
};

#define RUN_RING (EGRESS_REDACT_VALUE_MAX + 1)

struct egress_redactor *egress_redactor_new(void)
{
	struct egress_redactor *r = xcalloc(1, sizeof(*r));
	r->buf = xmalloc(EGRESS_REDACT_BUF);
	r->runs = xcalloc(RUN_RING, sizeof(*r->runs));
	r->st = RS_HEAD;
	return r;
}

void egress_redactor_free(struct egress_redactor *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_values; i++) {
		explicit_bzero(r->values[i].bytes, r->values[i].len);
		free(r->values[i].bytes);
		free(r->values[i].fail);
	}
	/* SECURITY: held bytes may be an unmasked prefix of a value. */
	explicit_bzero(r->buf, EGRESS_REDACT_BUF);
	free(r->buf);
	free(r->runs);
	free(r);
}

int egress_redactor_add_value(struct egress_redactor *r, const char *value, size_t len)
{
	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < r->n_values; i++)
		if (r->values[i].len == len && memcmp(r->values[i].bytes, value, len) == 0)
			return (int)i;
	if (r->n_values == EGRESS_REDACT_VALUES_MAX || len > EGRESS_REDACT_VALUE_MAX)
		return -E2BIG;
	struct value *v = &r->values[r->n_values];
	v->bytes = xmalloc(len);
	memcpy(v->bytes, value, len);
	v->len = len;
	v->fail = xcalloc(len, sizeof(*v->fail));
	for (size_t i = 1, k = 0; i < len; i++) {
		while (k > 0 && v->bytes[i] != v->bytes[k])
			k = v->fail[k - 1];
		if (v->bytes[i] == v->bytes[k])
			k++;
		v->fail[i] = (uint32_t)k;
	}
	return (int)r->n_values++;
}

uint64_t egress_redactor_count(const struct egress_redactor *r, int idx)
{
	return idx >= 0 && (size_t)idx < r->n_values ? r->values[idx].count : 0;
}

int egress_redactor_request(struct egress_redactor *r, bool head, bool identity)
{
	if (r->n_pending == EGRESS_REDACT_PENDING_MAX)
		return -E2BIG;
	r->pending[(r->pend_first + r->n_pending++) % EGRESS_REDACT_PENDING_MAX] =
	    (struct pending){.head = head, .identity = identity};
	return 0;
}

/* ------------------------------------------------------------ matching */

/* The stream offset of logical byte lidx (one of the last RUN_RING runs). */
static uint64_t logical_at(const struct egress_redactor *r, uint64_t lidx)
{
	for (uint64_t k = r->n_runs; k-- > 0;) {
		const struct run *u = &r->runs[k % RUN_RING];
		if (u->lstart <= lidx)
			return u->at + (lidx - u->lstart);
	}
	return r->base; /* not reached: lidx is always in the ring */
}

/* Masks the logical bytes [from, to) (all still held: nothing from the
 * start of a partial match on is ever ready). */
static void mask_range(struct egress_redactor *r, uint64_t from, uint64_t to)
{
	for (uint64_t k = r->n_runs; k-- > 0;) {
		const struct run *u = &r->runs[k % RUN_RING];
		uint64_t lo = MAX(from, u->lstart), hi = MIN(to, u->lstart + u->len);
		if (lo < hi)
			memset(r->buf + (u->at + (lo - u->lstart) - r->base), EGRESS_REDACT_MASK, (size_t)(hi - lo));
		if (u->lstart <= from)
			return;
	}
}

/* Logical bytes (head, body data, trailers) buf[i, i + n): matched by every
 * value's automaton. SECURITY: a byte no value starts with is skipped only
 * while no value is partly matched. */
static void logical_run(struct egress_redactor *r, size_t i, size_t n)
{
	uint64_t at = r->base + i, lbase = r->lcount;
	struct run *last = r->n_runs ? &r->runs[(r->n_runs - 1) % RUN_RING] : NULL;
	if (last && last->at + last->len == at)
		last->len += n;
	else
		r->runs[r->n_runs++ % RUN_RING] = (struct run){.at = at, .lstart = lbase, .len = n};
	r->lcount += n;
	size_t k = 0;
	while (k < n) {
		bool idle = true;
		for (size_t j = 0; j < r->n_values && idle; j++)
			idle = r->values[j].q == 0;
		if (idle) {
			size_t next = n;
			for (size_t j = 0; j < r->n_values; j++) {
				const uint8_t *p = memchr(r->buf + i + k, r->values[j].bytes[0], next - k);
				if (p)
					next = (size_t)(p - (r->buf + i));
			}
			k = next;
			if (k == n)
				break;
		}
		uint8_t c = r->buf[i + k];
		for (size_t j = 0; j < r->n_values; j++) {
			struct value *v = &r->values[j];
			while (v->q > 0 && v->bytes[v->q] != c)
				v->q = v->fail[v->q - 1];
			if (v->bytes[v->q] == c)
				v->q++;
			if (v->q == v->len) {
				mask_range(r, lbase + k + 1 - v->len, lbase + k + 1);
				v->count++;
				v->q = 0;
			}
		}
		k++;
	}
}

static void logical(struct egress_redactor *r, size_t i)
{
	logical_run(r, i, 1);
}

/* ------------------------------------------------------------ errors */

static int fail(struct egress_redactor *r, int e, const char *what)
{
	r->failed = e;
	al_error_set(&r->failure, e == -E2BIG ? AL_ERR_TOO_LARGE : AL_ERR_GUEST, -e, "the server's response: %s", what);
	return e;
}

/* ------------------------------------------------------------ the head */

static bool digits_valid(const uint8_t *s, size_t n, uint64_t *ret)
{
	uint64_t v = 0;
	if (n == 0 || n > 18 || (n > 1 && s[0] == '0'))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret = v;
	return true;
}

static int status_line(struct egress_redactor *r, const uint8_t *l, size_t n)
{
	/* HTTP/1.x SP 3DIGIT [SP reason] */
	if (n < 12 || memcmp(l, "HTTP/1.", 7) != 0 || (l[7] != '0' && l[7] != '1') || l[8] != ' ' ||
	    (n > 12 && l[12] != ' '))
		return fail(r, -EBADMSG, "not an HTTP/1.x status line");
	uint64_t s;
	if (!digits_valid(l + 9, 3, &s) || s < 100)
		return fail(r, -EBADMSG, "a malformed status code");
	r->status = (int)s;
	r->status_done = true;
	return 0;
}

static bool value_is(const uint8_t *v, size_t n, const char *want)
{
	return egress_http_case_equal(v, n, want, strlen(want));
}

static int field_line(struct egress_redactor *r, const uint8_t *l, size_t n)
{
	size_t name = 0;
	while (name < n && egress_http_is_tchar(l[name]))
		name++;
	if (name == 0 || name == n || l[name] != ':')
		return fail(r, -EBADMSG, "a malformed header field");
	size_t vs = name + 1, ve = n;
	while (vs < ve && (l[vs] == ' ' || l[vs] == '\t'))
		vs++;
	while (ve > vs && (l[ve - 1] == ' ' || l[ve - 1] == '\t'))
		ve--;
	const uint8_t *v = l + vs;
	size_t vn = ve - vs;
	if (egress_http_case_equal(l, name, "content-length", 14)) {
		uint64_t cl;
		if (r->cl_seen || !digits_valid(v, vn, &cl))
			return fail(r, -EBADMSG, "a malformed or repeated Content-Length");
		r->cl_seen = true;
		r->content_length = cl;
	} else if (egress_http_case_equal(l, name, "transfer-encoding", 17)) {
		/* SECURITY: only framing this parser reads the same way as
		 * the guest's client. */
		if (r->te_seen || !value_is(v, vn, "chunked"))
			return fail(r, -EBADMSG, "a Transfer-Encoding other than chunked");
		r->te_seen = true;
	} else if (egress_http_case_equal(l, name, "content-encoding", 16)) {
		if (!value_is(v, vn, "identity"))
			r->ce_compressed = true;
	}
	return 0;
}

/* The head is complete: which body follows. */
static int head_end(struct egress_redactor *r)
{
	if (r->status == 101)
		return fail(r, -EBADMSG, "101 Switching Protocols (no upgrade was asked for)");
	bool interim = r->status < 200;
	struct pending p = r->pending[r->pend_first];
	r->head_len = 0;
	r->status_done = false;
	bool cl = r->cl_seen, te = r->te_seen, ce = r->ce_compressed;
	r->cl_seen = r->te_seen = r->ce_compressed = false;
	if (interim) {
		r->st = RS_HEAD;
		return 0;
	}
	r->pend_first = (r->pend_first + 1) % EGRESS_REDACT_PENDING_MAX;
	r->n_pending--;
	/* SECURITY: a compressed body would hide a reflected value from the
	 * matcher; the request asked for identity. */
	if (p.identity && ce)
		return fail(r, -EPROTONOSUPPORT,
		            "a compressed body (Content-Encoding) answering a request that carried a secret");
	if (cl && te)
		return fail(r, -EBADMSG, "both Content-Length and Transfer-Encoding");
	if (p.head || r->status == 204 || r->status == 304)
		r->st = RS_HEAD;
	else if (te)
		r->st = RS_CHUNK_LINE;
	else if (cl)
		r->st = r->content_length ? RS_LENGTH : RS_HEAD;
	else
		r->st = RS_CLOSE;
	r->remaining = cl ? r->content_length : 0;
	r->chunk_digits = 0;
	r->chunk_ext = false;
	return 0;
}

static int head_byte(struct egress_redactor *r, size_t i)
{
	uint8_t c = r->buf[i];
	if (r->head_len == 0) {
		r->head_start = r->line_start = r->base + i;
		if (r->n_pending == 0)
			return fail(r, -EBADMSG, "bytes no request asked for");
		r->line_len = 0;
		r->saw_cr = false;
	}
	if (++r->head_len > EGRESS_REDACT_HEAD_MAX)
		return fail(r, -E2BIG, "a head over 64 KiB");
	if (r->saw_cr) {
		if (c != '\n')
			return fail(r, -EBADMSG, "a bare CR in the head");
		r->saw_cr = false;
		const uint8_t *l = r->buf + (r->line_start - r->base);
		size_t n = r->line_len;
		r->line_start = r->base + i + 1;
		r->line_len = 0;
		if (!r->status_done)
			return status_line(r, l, n);
		if (n == 0)
			return head_end(r);
		if (l[0] == ' ' || l[0] == '\t')
			return fail(r, -EBADMSG, "obs-fold in the head");
		return field_line(r, l, n);
	}
	if (c == '\r') {
		r->saw_cr = true;
		return 0;
	}
	if (!egress_http_is_field_char(c))
		return fail(r, -EBADMSG, "a control character or bare LF in the head");
	r->line_len++;
	return 0;
}

/* ------------------------------------------------------------ bodies */

/* SECURITY: a chunk extension is text a raw reader sees, but it is not
 * data: a value split across chunks must still be found, so extensions are
 * searched on their own, once their line is complete (it is held until
 * then). */
static void chunk_ext_mask(struct egress_redactor *r, size_t end)
{
	size_t start = (size_t)(r->chunk_line_start - r->base);
	for (size_t k = 0; k < r->n_values; k++) {
		struct value *v = &r->values[k];
		uint8_t *p = r->buf + start;
		while ((p = memmem(p, (size_t)(r->buf + end - p), v->bytes, v->len))) {
			memset(p, EGRESS_REDACT_MASK, v->len);
			v->count++;
			p += v->len;
		}
	}
}

static int chunk_line_byte(struct egress_redactor *r, size_t i)
{
	uint8_t c = r->buf[i];
	if (r->line_len == 0 && !r->saw_cr)
		r->chunk_line_start = r->base + i;
	if (r->saw_cr) {
		if (c != '\n')
			return fail(r, -EBADMSG, "a bare CR in a chunk-size line");
		r->saw_cr = false;
		chunk_ext_mask(r, i);
		if (r->chunk_digits == 0)
			return fail(r, -EBADMSG, "a chunk-size line without a size");
		r->st = r->remaining ? RS_CHUNK_DATA : RS_TRAILER;
		r->line_len = 0;
		r->trailer_bytes = 0;
		r->chunk_digits = 0;
		r->chunk_ext = false;
		return 0;
	}
	if (++r->line_len > EGRESS_REDACT_LINE_MAX)
		return fail(r, -E2BIG, "a chunk-size line over 1 KiB");
	if (c == '\r') {
		r->saw_cr = true;
		return 0;
	}
	if (r->chunk_ext)
		return egress_http_is_field_char(c) ? 0 : fail(r, -EBADMSG, "a control character in a chunk extension");
	int h = hex_digit_value(c);
	if (h >= 0) {
		if (++r->chunk_digits > 15)
			return fail(r, -EBADMSG, "a chunk size over 15 hex digits");
		r->remaining = r->remaining * 16 + (uint64_t)h;
		return 0;
	}
	if (c == ';' && r->chunk_digits > 0) {
		r->chunk_ext = true;
		return 0;
	}
	return fail(r, -EBADMSG, "a malformed chunk size");
}

/* A trailer byte (logical). The empty line ends the response. */
static int trailer_byte(struct egress_redactor *r, uint8_t c)
{
	if (++r->trailer_bytes > EGRESS_REDACT_TRAILERS_MAX)
		return fail(r, -E2BIG, "a trailer section over 16 KiB");
	if (r->saw_cr) {
		if (c != '\n')
			return fail(r, -EBADMSG, "a bare CR in the trailers");
		r->saw_cr = false;
		if (r->line_len == 0)
			r->st = RS_HEAD;
		r->line_len = 0;
		return 0;
	}
	if (c == '\r') {
		r->saw_cr = true;
		return 0;
	}
	if (!egress_http_is_field_char(c))
		return fail(r, -EBADMSG, "a control character in the trailers");
	r->line_len++;
	return 0;
}

/* A Content-Length body is complete: nothing more of it will come, and a
 * client waits for its last byte before it sends another request, so what
 * is held for a partial match must go now (else both sides wait). A value's
 * beginning of EGRESS_REDACT_TAIL_MIN bytes or more is masked, as at the end
 * of the stream. (Other ends of a message are a CRLF, which no value holds.) */
static void body_end(struct egress_redactor *r)
{
	for (size_t k = 0; k < r->n_values; k++) {
		struct value *v = &r->values[k];
		if (v->q >= MIN((size_t)EGRESS_REDACT_TAIL_MIN, v->len))
			mask_range(r, r->lcount - v->q, r->lcount);
		v->q = 0;
	}
}

/* Body data buf[i, i + n) (logical), as much of it as the state takes;
 * returns how many. */
static size_t data_run(struct egress_redactor *r, size_t i, size_t n)
{
	size_t take = n;
	if (r->st != RS_CLOSE && r->remaining < take)
		take = (size_t)r->remaining;
	logical_run(r, i, take);
	if (r->st != RS_CLOSE) {
		r->remaining -= take;
		if (r->remaining == 0 && r->st == RS_LENGTH)
			body_end(r);
		if (r->remaining == 0)
			r->st = r->st == RS_LENGTH ? RS_HEAD : RS_CHUNK_CR;
	}
	return take;
}

static int step(struct egress_redactor *r, size_t i, size_t n, size_t *ret_used)
{
	uint8_t c = r->buf[i];
	*ret_used = 1;
	switch (r->st) {
	case RS_HEAD:
		logical(r, i);
		return head_byte(r, i);
	case RS_LENGTH:
	case RS_CHUNK_DATA:
	case RS_CLOSE:
		*ret_used = data_run(r, i, n);
		return 0;
	case RS_CHUNK_LINE:
		return chunk_line_byte(r, i);
	case RS_CHUNK_CR:
		r->st = RS_CHUNK_LF;
		return c == '\r' ? 0 : fail(r, -EBADMSG, "chunk data not followed by CRLF");
	case RS_CHUNK_LF:
		r->st = RS_CHUNK_LINE;
		return c == '\n' ? 0 : fail(r, -EBADMSG, "chunk data not followed by CRLF");
	case RS_TRAILER:
		logical(r, i);
		return trailer_byte(r, c);
	}
	return fail(r, -EBADMSG, "internal state");
}

/* ------------------------------------------------------------ the stream */

/* What may go: everything before the head in progress and before the
 * start of the longest partial match of any value. */
static void release(struct egress_redactor *r)
{
	uint64_t until = r->base + r->len;
	if (r->st == RS_HEAD && r->head_len > 0)
		until = MIN(until, r->head_start);
	if (r->st == RS_CHUNK_LINE && r->line_len > 0)
		until = MIN(until, r->chunk_line_start);
	for (size_t k = 0; k < r->n_values; k++) {
		const struct value *v = &r->values[k];
		if (v->q > 0)
			until = MIN(until, logical_at(r, r->lcount - v->q));
	}
	r->ready = (size_t)(until - r->base);
}

size_t egress_redactor_room(const struct egress_redactor *r)
{
	if (r->failed || r->sent < r->ready)
		return 0;
	return MIN((size_t)EGRESS_REDACT_FEED_MAX, EGRESS_REDACT_BUF - r->len);
}

int egress_redactor_feed(struct egress_redactor *r, const uint8_t *data, size_t len, struct al_error *err)
{
	if (!r->failed && len > egress_redactor_room(r))
		fail(r, -E2BIG, "fed more than there is room for");
	if (r->failed) {
		if (err)
			*err = r->failure;
		return r->failed;
	}
	size_t i = r->len;
	memcpy(r->buf + r->len, data, len);
	r->len += len;
	while (i < r->len) {
		size_t used = 1;
		int e = step(r, i, r->len - i, &used);
		if (e < 0) {
			/* What came before may still go (complete, matched);
			 * nothing of a refused head, nor from the failing byte
			 * on. */
			r->len = i;
			if (r->st == RS_HEAD)
				r->len = MIN(r->len, (size_t)(r->head_start - r->base));
			r->head_len = 0;
			release(r);
			if (err)
				*err = r->failure;
			return e;
		}
		i += used;
	}
	release(r);
	if (r->len - r->ready > EGRESS_REDACT_BUF - EGRESS_REDACT_FEED_MAX) {
		int e = fail(r, -E2BIG, "more held back than the limit (a head or framing too large)");
		if (err)
			*err = r->failure;
		return e;
	}
	return 0;
}

void egress_redactor_finish(struct egress_redactor *r)
{
	/* SECURITY: the stream ends in a prefix of a value: mask it, unless it
	 * is too short to tell from ordinary data. */
	for (size_t k = 0; k < r->n_values; k++) {
		struct value *v = &r->values[k];
		if (v->q >= MIN((size_t)EGRESS_REDACT_TAIL_MIN, v->len))
			mask_range(r, r->lcount - v->q, r->lcount);
		v->q = 0;
	}
	/* ... and so does an unfinished chunk-size line. */
	if (!r->failed && r->st == RS_CHUNK_LINE && r->line_len > 0)
		chunk_ext_mask(r, r->len);
	/* SECURITY: an unfinished head is dropped, as a refused one is: it was
	 * never checked to be a status line, and right after a Content-Length
	 * body (whose short partial match went out at body_end) its first bytes
	 * could complete a value. The guest's client sees the connection end
	 * where a truncated head would have been an error to it anyway. */
	if (!r->failed && r->st == RS_HEAD && r->head_len > 0) {
		size_t keep = (size_t)(r->head_start - r->base);
		explicit_bzero(r->buf + keep, r->len - keep);
		r->len = keep;
		r->head_len = 0;
	}
	if (!r->failed)
		r->ready = r->len;
}

size_t egress_redactor_ready(const struct egress_redactor *r, const uint8_t **ret)
{
	*ret = r->buf + r->sent;
	return r->ready - r->sent;
}

void egress_redactor_sent(struct egress_redactor *r, size_t n)
{
	r->sent += MIN(n, r->ready - r->sent);
	if (r->sent < r->ready || r->sent == 0)
		return;
	/* All that was ready is out: the held bytes move to the front. */
	memmove(r->buf, r->buf + r->ready, r->len - r->ready);
	explicit_bzero(r->buf + (r->len - r->ready), r->ready);
	r->base += r->ready;
	r->len -= r->ready;
	r->ready = r->sent = 0;
}

bool egress_redactor_idle(const struct egress_redactor *r)
{
	return r->st == RS_HEAD && r->head_len == 0 && r->ready == r->len;
}
