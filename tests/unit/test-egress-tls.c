/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the TLS ClientHello reader of the egress gateway
 * (src/egress/egress-tls.c). The ClientHellos are built here, field by field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "egress-tls.h"
#include "util.h"

/* ------------------------------------------------------------ builder */

struct buf {
	uint8_t b[64 * 1024];
	size_t n;
};

static void put8(struct buf *b, unsigned v)
{
	assert_true(b->n < sizeof(b->b));
	b->b[b->n++] = (uint8_t)v;
}
static void put16(struct buf *b, unsigned v)
{
	put8(b, v >> 8);
	put8(b, v);
}
static void put24(struct buf *b, size_t v)
{
	put8(b, (unsigned)(v >> 16));
	put16(b, (unsigned)(v & 0xffff));
}
static void put(struct buf *b, const void *p, size_t n)
{
	assert_true(b->n + n <= sizeof(b->b));
	if (n == 0)
		return;
	memcpy(b->b + b->n, p, n);
	b->n += n;
}

struct ext {
	uint16_t type;
	const uint8_t *data;
	size_t len;
};

/* server_name extension body: one or more (type, name) entries. */
static size_t sni_body(uint8_t *out, const char *name, int entries, uint8_t type)
{
	size_t nl = strlen(name), o = 2;
	for (int i = 0; i < entries; i++) {
		out[o++] = type;
		out[o++] = (uint8_t)(nl >> 8);
		out[o++] = (uint8_t)nl;
		memcpy(out + o, name, nl);
		o += nl;
	}
	out[0] = (uint8_t)((o - 2) >> 8);
	out[1] = (uint8_t)(o - 2);
	return o;
}

/* A ClientHello handshake message (header included). */
static void build_hello(struct buf *msg, const struct ext *exts, size_t n_exts, bool with_ext_block)
{
	struct buf body = {.n = 0};
	put16(&body, 0x0303);
	for (int i = 0; i < 32; i++)
		put8(&body, (unsigned)i);
	put8(&body, 32);
	for (int i = 0; i < 32; i++)
		put8(&body, 0xa0u + (unsigned)i);
	/* cipher suites incl. a GREASE value */
	static const uint16_t suites[] = {0x2a2a, 0x1301, 0x1302, 0x1303, 0xc02b};
	put16(&body, (unsigned)(2 * ARRAY_SIZE(suites)));
	for (size_t i = 0; i < ARRAY_SIZE(suites); i++)
		put16(&body, suites[i]);
	put8(&body, 1);
	put8(&body, 0);
	if (with_ext_block) {
		size_t total = 0;
		for (size_t i = 0; i < n_exts; i++)
			total += 4 + exts[i].len;
		put16(&body, (unsigned)total);
		for (size_t i = 0; i < n_exts; i++) {
			put16(&body, exts[i].type);
			put16(&body, (unsigned)exts[i].len);
			put(&body, exts[i].data, exts[i].len);
		}
	}
	msg->n = 0;
	put8(msg, 1);
	put24(msg, body.n);
	put(msg, body.b, body.n);
}

/* Wraps a handshake message into records of at most rec_size bytes. */
static void wrap(struct buf *out, const uint8_t *msg, size_t len, size_t rec_size)
{
	out->n = 0;
	for (size_t off = 0; off < len; off += rec_size) {
		size_t l = MIN(rec_size, len - off);
		put8(out, 22);
		put16(out, off == 0 ? 0x0301 : 0x0303);
		put16(out, (unsigned)l);
		put(out, msg + off, l);
	}
}

static const uint8_t grease_data[1] = {0};
static const uint8_t versions[] = {4, 0x3a, 0x3a, 0x03, 0x04};
static const uint8_t alpn[] = {0, 3, 2, 'h', '2'};

/* A typical modern hello: GREASE, SNI, supported_versions, ALPN, GREASE. */
static void typical(struct buf *msg, const char *name)
{
	static uint8_t sni[600];
	size_t sl = sni_body(sni, name, 1, 0);
	struct ext exts[] = {
	    {0x0a0a, NULL, 0},
	    {0x0000, sni, sl},
	    {0x002b, versions, sizeof(versions)},
	    {0x0010, alpn, sizeof(alpn)},
	    {0x1a1a, grease_data, sizeof(grease_data)},
	};
	build_hello(msg, exts, ARRAY_SIZE(exts), true);
}

static int read_hello(const struct buf *in, struct egress_tls_client_hello *h, size_t *need)
{
	struct al_error err = {0};
	int r = egress_tls_read_client_hello(in->b, in->n, h, need, &err);
	if (r < 0 && r != -EAGAIN && err.message[0] == '\0')
		fail_msg("error %d without a message", r);
	return r;
}

static struct buf msg, rec, tmp;

/* ------------------------------------------------------------ tests */

static void test_basic(void **state)
{
	(void)state;
	typical(&msg, "www.example.com");
	wrap(&rec, msg.b, msg.n, 16384);
	struct egress_tls_client_hello h;
	size_t need = 0;
	assert_int_equal(read_hello(&rec, &h, &need), 0);
	assert_int_equal(h.sni_len, 15);
	assert_memory_equal(h.sni, "www.example.com", 15);
	assert_int_equal(h.consumed, rec.n);
	assert_int_equal(h.legacy_version, 0x0303);
}

static void test_every_prefix_needs_more(void **state)
{
	(void)state;
	typical(&msg, "www.example.com");
	for (size_t rs = 1; rs <= 64; rs *= 2) {
		if ((msg.n + rs - 1) / rs > EGRESS_TLS_RECORDS_MAX)
			continue;
		wrap(&rec, msg.b, msg.n, rs);
		/* 1-byte TCP segments: every prefix asks for more, never past the end. */
		for (size_t len = 0; len < rec.n; len++) {
			struct egress_tls_client_hello h;
			size_t need = 0;
			int r = egress_tls_read_client_hello(rec.b, len, &h, &need, NULL);
			if (r != -EAGAIN || need <= len || need > rec.n || need > EGRESS_TLS_PEEK_MAX)
				fail_msg("record size %zu prefix %zu: r=%d need=%zu", rs, len, r, need);
		}
		/* Following ret_need alone gets there. */
		size_t len = 0, steps = 0;
		for (;;) {
			struct egress_tls_client_hello h;
			size_t need;
			int r = egress_tls_read_client_hello(rec.b, len, &h, &need, NULL);
			if (r == 0) {
				assert_memory_equal(h.sni, "www.example.com", 15);
				break;
			}
			assert_int_equal(r, -EAGAIN);
			len = need;
			assert_true(++steps < 1000);
		}
		assert_int_equal(len, rec.n);
	}
}

static void test_many_records(void **state)
{
	(void)state;
	typical(&msg, "split.example.org");
	size_t sizes[] = {3, 7, 50, 100, 16384};
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		wrap(&rec, msg.b, msg.n, sizes[i]);
		struct egress_tls_client_hello h;
		size_t need;
		assert_int_equal(read_hello(&rec, &h, &need), 0);
		assert_int_equal(h.sni_len, 17);
		assert_memory_equal(h.sni, "split.example.org", 17);
		assert_int_equal(h.consumed, rec.n);
	}
	/* More than EGRESS_TLS_RECORDS_MAX records. */
	wrap(&rec, msg.b, msg.n, 1);
	struct egress_tls_client_hello h;
	size_t need;
	assert_int_equal(read_hello(&rec, &h, &need), -E2BIG);
}

static void test_later_records_are_not_read(void **state)
{
	(void)state;
	typical(&msg, "a.example");
	wrap(&rec, msg.b, msg.n, 16384);
	size_t hello_len = rec.n;
	/* change_cipher_spec + early application data after the hello */
	static const uint8_t after[] = {20, 3, 3, 0, 1, 1, 23, 3, 3, 0, 2, 0xde, 0xad};
	put(&rec, after, sizeof(after));
	struct egress_tls_client_hello h;
	size_t need;
	assert_int_equal(read_hello(&rec, &h, &need), 0);
	assert_int_equal(h.consumed, hello_len);
}

static void test_no_sni(void **state)
{
	(void)state;
	struct ext exts[] = {{0x002b, versions, sizeof(versions)}};
	build_hello(&msg, exts, ARRAY_SIZE(exts), true);
	wrap(&rec, msg.b, msg.n, 16384);
	struct egress_tls_client_hello h;
	size_t need;
	assert_int_equal(read_hello(&rec, &h, &need), -ENODATA);
	build_hello(&msg, NULL, 0, true);
	wrap(&rec, msg.b, msg.n, 16384);
	assert_int_equal(read_hello(&rec, &h, &need), -ENODATA);
	build_hello(&msg, NULL, 0, false);
	wrap(&rec, msg.b, msg.n, 16384);
	assert_int_equal(read_hello(&rec, &h, &need), -ENODATA);
}

static void test_ech(void **state)
{
	(void)state;
	static uint8_t sni[64];
	size_t sl = sni_body(sni, "cloudflare-ech.com", 1, 0);
	static const uint8_t ech_body[] = {0, 0, 1, 0, 1, 7, 0, 0, 0, 0};
	const uint16_t types[] = {0xfe0d, 0xfe0a, 0xfd00, 0xffce};
	for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
		struct ext exts[] = {{0x0000, sni, sl}, {types[i], ech_body, sizeof(ech_body)}};
		build_hello(&msg, exts, ARRAY_SIZE(exts), true);
		wrap(&rec, msg.b, msg.n, 100);
		struct egress_tls_client_hello h;
		size_t need;
		if (read_hello(&rec, &h, &need) != -EACCES)
			fail_msg("extension 0x%04x not refused as ECH", types[i]);
		/* ECH without SNI: still ECH */
		build_hello(&msg, exts + 1, 1, true);
		wrap(&rec, msg.b, msg.n, 16384);
		assert_int_equal(read_hello(&rec, &h, &need), -EACCES);
	}
	/* Malformed wins over ECH. */
	struct ext dup[] = {{0xfe0d, ech_body, sizeof(ech_body)}, {0x0010, alpn, 5}, {0x0010, alpn, 5}};
	build_hello(&msg, dup, ARRAY_SIZE(dup), true);
	wrap(&rec, msg.b, msg.n, 16384);
	struct egress_tls_client_hello h;
	size_t need;
	assert_int_equal(read_hello(&rec, &h, &need), -EBADMSG);
}

static int hello_with(const struct ext *exts, size_t n)
{
	build_hello(&msg, exts, n, true);
	wrap(&rec, msg.b, msg.n, 16384);
	struct egress_tls_client_hello h;
	size_t need;
	return read_hello(&rec, &h, &need);
}

static void test_server_name_rules(void **state)
{
	(void)state;
	static uint8_t sni[2048];
	size_t sl;

	sl = sni_body(sni, "a.example", 2, 0); /* two entries */
	assert_int_equal(hello_with(&(struct ext){0, sni, sl}, 1), -EBADMSG);
	sl = sni_body(sni, "a.example", 1, 1); /* not host_name */
	assert_int_equal(hello_with(&(struct ext){0, sni, sl}, 1), -EBADMSG);
	sl = sni_body(sni, "", 1, 0); /* empty name */
	assert_int_equal(hello_with(&(struct ext){0, sni, sl}, 1), -EBADMSG);
	sl = sni_body(sni, "", 0, 0); /* empty list */
	assert_int_equal(hello_with(&(struct ext){0, sni, sl}, 1), -EBADMSG);
	sl = sni_body(sni, "a.example", 1, 0);
	assert_int_equal(hello_with(&(struct ext){0, sni, sl - 1}, 1), -EBADMSG); /* list overruns */
	sni[1]--;                                                                 /* list shorter than ext */
	assert_int_equal(hello_with(&(struct ext){0, sni, sl}, 1), -EBADMSG);
	/* 255 bytes fine, 256 not */
	char name[300];
	memset(name, 'a', sizeof(name));
	name[255] = '\0';
	sl = sni_body(sni, name, 1, 0);
	assert_int_equal(hello_with(&(struct ext){0, sni, sl}, 1), 0);
	name[255] = 'a';
	name[256] = '\0';
	sl = sni_body(sni, name, 1, 0);
	assert_int_equal(hello_with(&(struct ext){0, sni, sl}, 1), -EBADMSG);
	/* Bytes are returned as they are, not trusted to be printable. */
	sl = sni_body(sni, "a\x01\xff.example", 1, 0);
	build_hello(&msg, &(struct ext){0, sni, sl}, 1, true);
	wrap(&rec, msg.b, msg.n, 16384);
	struct egress_tls_client_hello h;
	size_t need;
	assert_int_equal(read_hello(&rec, &h, &need), 0);
	assert_int_equal(h.sni_len, 11);
	assert_memory_equal(h.sni, "a\x01\xff.example", 11);
}

static void test_duplicates_and_grease(void **state)
{
	(void)state;
	static uint8_t sni[64];
	size_t sl = sni_body(sni, "a.example", 1, 0);
	struct ext dup_sni[] = {{0, sni, sl}, {0, sni, sl}};
	assert_int_equal(hello_with(dup_sni, 2), -EBADMSG);
	struct ext dup_grease[] = {{0, sni, sl}, {0x3a3a, NULL, 0}, {0x3a3a, NULL, 0}};
	assert_int_equal(hello_with(dup_grease, 3), -EBADMSG);
	struct ext grease[] = {{0xfafa, grease_data, 1}, {0, sni, sl}, {0x4a4a, NULL, 0}, {0xffff, NULL, 0}};
	assert_int_equal(hello_with(grease, 4), 0);
}

static void test_size_limits(void **state)
{
	(void)state;
	static uint8_t sni[64], pad[20000];
	size_t sl = sni_body(sni, "big.example", 1, 0);
	struct ext exts[] = {{0, sni, sl}, {0x0015, pad, 0}};
	/* Exactly EGRESS_TLS_CLIENT_HELLO_MAX: fine (in two records). */
	build_hello(&msg, exts, 2, true);
	exts[1].len = EGRESS_TLS_CLIENT_HELLO_MAX - msg.n;
	build_hello(&msg, exts, 2, true);
	assert_int_equal(msg.n, EGRESS_TLS_CLIENT_HELLO_MAX);
	wrap(&rec, msg.b, msg.n, 10000);
	struct egress_tls_client_hello h;
	size_t need;
	assert_int_equal(read_hello(&rec, &h, &need), 0);
	/* One more byte: refused as soon as the handshake header is in. */
	exts[1].len++;
	build_hello(&msg, exts, 2, true);
	wrap(&rec, msg.b, msg.n, 10000);
	assert_int_equal(read_hello(&rec, &h, &need), -E2BIG);
	tmp = rec;
	tmp.n = 9;
	assert_int_equal(read_hello(&tmp, &h, &need), -E2BIG);
	/* A handshake length that cannot fit in 16 MiB - 1 either. */
	static const uint8_t huge[] = {22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff};
	memcpy(tmp.b, huge, sizeof(huge));
	tmp.n = sizeof(huge);
	assert_int_equal(read_hello(&tmp, &h, &need), -E2BIG);
}

static void test_not_tls(void **state)
{
	(void)state;
	struct egress_tls_client_hello h;
	size_t need;
	static const struct {
		const char *b;
		size_t n;
	} inputs[] = {
	    {"GET / HTTP/1.1\r\n", 16}, {"\x80\x2e\x01\x03\x01", 5}, {"\x16\x02\x00\x00\x10", 5}, {"\x16\x02", 2},
	    {"\x16\x03\x05", 3},        {"\x17\x03\x03\x00\x10", 5}, {"\x16\x03\x05\x00\x10", 5}, {"G", 1},
	};
	for (size_t i = 0; i < ARRAY_SIZE(inputs); i++) {
		tmp.n = inputs[i].n;
		memcpy(tmp.b, inputs[i].b, tmp.n);
		if (read_hello(&tmp, &h, &need) != -EPROTO)
			fail_msg("input %zu not refused as not-TLS", i);
	}
	tmp.n = 0;
	assert_int_equal(read_hello(&tmp, &h, &need), -EAGAIN);
	assert_int_equal(need, 5);
}

static void test_malformed_records(void **state)
{
	(void)state;
	struct egress_tls_client_hello h;
	size_t need;
	typical(&msg, "a.example");

	/* not a ClientHello */
	wrap(&rec, msg.b, msg.n, 16384);
	rec.b[5] = 2;
	assert_int_equal(read_hello(&rec, &h, &need), -EBADMSG);
	/* an alert record between two fragments */
	wrap(&rec, msg.b, msg.n, 40);
	rec.b[45] = 21;
	assert_int_equal(read_hello(&rec, &h, &need), -EBADMSG);
	/* zero-length record */
	static const uint8_t empty[] = {22, 3, 1, 0, 0};
	memcpy(tmp.b, empty, sizeof(empty));
	tmp.n = sizeof(empty);
	assert_int_equal(read_hello(&tmp, &h, &need), -EBADMSG);
	/* record over 2^14 */
	static const uint8_t over[] = {22, 3, 1, 0x40, 0x01};
	memcpy(tmp.b, over, sizeof(over));
	tmp.n = sizeof(over);
	assert_int_equal(read_hello(&tmp, &h, &need), -EBADMSG);
	/* trailing bytes after the ClientHello in its record */
	wrap(&rec, msg.b, msg.n, 16384);
	put8(&rec, 0);
	rec.b[3] = (uint8_t)((msg.n + 1) >> 8);
	rec.b[4] = (uint8_t)(msg.n + 1);
	assert_int_equal(read_hello(&rec, &h, &need), -EBADMSG);
	/* ... also when they are not there yet */
	rec.n = 20;
	assert_int_equal(read_hello(&rec, &h, &need), -EBADMSG);

	/* The handshake header split over two records, the second one of 2^14
	 * bytes (found by fuzz-egress-tls): the answer comes from the header
	 * (a body of 0x540ba4 bytes: too big), never from the record length
	 * seen before the header is complete. */
	static const uint8_t split[] = {22, 3, 0, 0, 1, 1, 22, 3, 1, 0x40, 0, 0x54, 0x0b, 0xa4};
	memcpy(tmp.b, split, sizeof(split));
	for (size_t n = 11; n < sizeof(split); n++) {
		tmp.n = n;
		assert_int_equal(read_hello(&tmp, &h, &need), -EAGAIN);
		assert_int_equal(need, sizeof(split));
	}
	tmp.n = sizeof(split);
	assert_int_equal(read_hello(&tmp, &h, &need), -E2BIG);
}

/* Every truncation of the ClientHello body, with consistent outer lengths:
 * never accepted, never a crash, always a definite answer. */
static void test_truncated_bodies(void **state)
{
	(void)state;
	typical(&msg, "www.example.com");
	size_t body = msg.n - 4;
	for (size_t k = 0; k < body; k++) {
		tmp.n = 0;
		put8(&tmp, 1);
		put24(&tmp, k);
		put(&tmp, msg.b + 4, k);
		wrap(&rec, tmp.b, tmp.n, 16384);
		struct egress_tls_client_hello h;
		size_t need;
		struct al_error err = {0};
		int r = egress_tls_read_client_hello(rec.b, rec.n, &h, &need, &err);
		if (k == 0) {
			/* a zero-length message: one 4-byte record, then a malformed body */
			assert_int_equal(r, -EBADMSG);
			continue;
		}
		if (r != -EBADMSG && r != -ENODATA)
			fail_msg("body truncated to %zu of %zu: r=%d", k, body, r);
	}
	/* and every single-byte corruption of a length field is caught or harmless */
	for (size_t i = 4; i < msg.n; i++) {
		tmp = msg;
		tmp.b[i] ^= 0x40;
		wrap(&rec, tmp.b, tmp.n, 16384);
		struct egress_tls_client_hello h;
		size_t need;
		int r = egress_tls_read_client_hello(rec.b, rec.n, &h, &need, NULL);
		assert_true(r == 0 || r == -EBADMSG || r == -ENODATA || r == -EACCES);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_basic),
	    cmocka_unit_test(test_every_prefix_needs_more),
	    cmocka_unit_test(test_many_records),
	    cmocka_unit_test(test_later_records_are_not_read),
	    cmocka_unit_test(test_no_sni),
	    cmocka_unit_test(test_ech),
	    cmocka_unit_test(test_server_name_rules),
	    cmocka_unit_test(test_duplicates_and_grease),
	    cmocka_unit_test(test_size_limits),
	    cmocka_unit_test(test_not_tls),
	    cmocka_unit_test(test_malformed_records),
	    cmocka_unit_test(test_truncated_bodies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
