/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the egress gateway's DNS codec (src/egress/egress-dns.c) and
 * its upstream resolver (src/egress/egress-resolve.c). Queries are built here
 * byte by byte; the resolver talks to a small DNS server that this test runs
 * in a thread on 127.0.0.1 (UDP and TCP on one ephemeral port), answering
 * canned responses by question name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <ares.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>

#include "egress-dns.h"
#include "util.h"

/* ------------------------------------------------------------ builder */

struct msg {
	uint8_t b[8192];
	size_t n;
};

static void put8(struct msg *m, unsigned v)
{
	assert_true(m->n < sizeof(m->b));
	m->b[m->n++] = (uint8_t)v;
}
static void put16(struct msg *m, unsigned v)
{
	put8(m, (v >> 8) & 0xff);
	put8(m, v & 0xff);
}
static void put32(struct msg *m, uint32_t v)
{
	put16(m, v >> 16);
	put16(m, v & 0xffff);
}
static void put(struct msg *m, const void *p, size_t n)
{
	assert_true(m->n + n <= sizeof(m->b));
	if (n > 0)
		memcpy(m->b + m->n, p, n);
	m->n += n;
}
/* A presentation name as uncompressed wire labels ("" is the root). */
static void put_name(struct msg *m, const char *name)
{
	while (*name) {
		const char *dot = strchr(name, '.');
		size_t l = dot ? (size_t)(dot - name) : strlen(name);
		put8(m, (unsigned)l);
		put(m, name, l);
		name += l + (dot ? 1 : 0);
	}
	put8(m, 0);
}
static void put_header(struct msg *m, unsigned id, unsigned flags, unsigned qd, unsigned an, unsigned ns, unsigned ar)
{
	put16(m, id);
	put16(m, flags);
	put16(m, qd);
	put16(m, an);
	put16(m, ns);
	put16(m, ar);
}

#define FLAG_RD 0x0100
#define OPT_4096 "\x00\x00\x29\x10\x00\x00\x00\x00\x00\x00\x00" /* 11 bytes */

/* A query: header, one question (the name as wire bytes), then extra. */
static void build_query(struct msg *m, unsigned id, unsigned flags, const char *name, unsigned qtype, bool edns)
{
	m->n = 0;
	put_header(m, id, flags, 1, 0, 0, edns ? 1 : 0);
	put_name(m, name);
	put16(m, qtype);
	put16(m, EGRESS_DNS_CLASS_IN);
	if (edns)
		put(m, OPT_4096, 11);
}

static int parse(const struct msg *m, struct egress_dns_query *q, uint16_t *id)
{
	struct al_error err = {0};
	int r = egress_dns_parse_query(m->b, m->n, q, id, &err);
	if (r < 0 && err.message[0] == '\0')
		fail_msg("error %d without a message", r);
	return r;
}

/* ------------------------------------------------------------ parser: table */

#define BYTES(s) .extra = (const uint8_t *)(s), .extra_len = sizeof(s) - 1
#define WIRE(s) .wire = (const uint8_t *)(s), .wire_len = sizeof(s) - 1

struct parse_case {
	const char *what;
	unsigned flags;
	int qd, an, ns, ar; /* -1: the natural value (1, 0, 0, 1 if extra) */
	const char *name;   /* presentation name, or wire bytes: */
	const uint8_t *wire;
	size_t wire_len;
	unsigned qtype;
	bool no_type_class;
	const uint8_t *extra; /* bytes after the question */
	size_t extra_len;
	int want;
	const char *want_name;
	bool want_edns;
	unsigned want_udp_max;
};

static const struct parse_case parse_cases[] = {
    {"A", FLAG_RD, -1, -1, -1, -1, .name = "www.example.com", .qtype = 1, .want_name = "www.example.com"},
    {"AAAA", FLAG_RD, -1, -1, -1, -1, .name = "ipv6.example.org", .qtype = 28, .want_name = "ipv6.example.org"},
    {"TXT with underscore", 0, -1, -1, -1, -1, .name = "_dmarc.example.com", .qtype = 16,
     .want_name = "_dmarc.example.com"},
    {"case kept", FLAG_RD, -1, -1, -1, -1, .name = "WwW.ExAmPlE.CoM", .qtype = 1, .want_name = "WwW.ExAmPlE.CoM"},
    {"root NS", 0, -1, -1, -1, -1, WIRE("\x00"), .qtype = 2, .want_name = ""},
    {"AD and CD bits", 0x0130, -1, -1, -1, -1, .name = "a.b", .qtype = 1, .want_name = "a.b"},
    {"EDNS", FLAG_RD, -1, -1, -1, -1, .name = "example.com", .qtype = 1, BYTES(OPT_4096), .want_name = "example.com",
     .want_edns = true, .want_udp_max = 4096},
    {"EDNS small size", FLAG_RD, -1, -1, -1, -1, .name = "example.com", .qtype = 1,
     BYTES("\x00\x00\x29\x00\x64\x00\x00\x80\x00\x00\x00"), .want_name = "example.com", .want_edns = true,
     .want_udp_max = 512},
    {"EDNS cookie + padding", FLAG_RD, -1, -1, -1, -1, .name = "example.com", .qtype = 28,
     BYTES("\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x10"
           "\x00\x0a\x00\x08\x01\x02\x03\x04\x05\x06\x07\x08"
           "\x00\x0c\x00\x00"),
     .want_name = "example.com", .want_edns = true, .want_udp_max = 1232},

    {"QR set", 0x8100, -1, -1, -1, -1, .name = "a.example", .qtype = 1, .want = -EBADMSG},
    {"opcode IQUERY", 0x0800, -1, -1, -1, -1, .name = "a.example", .qtype = 1, .want = -EBADMSG},
    {"opcode STATUS", 0x1000, -1, -1, -1, -1, .name = "a.example", .qtype = 1, .want = -EBADMSG},
    {"opcode NOTIFY", 0x2000, -1, -1, -1, -1, .name = "a.example", .qtype = 6, .want = -EBADMSG},
    {"opcode UPDATE", 0x2800, -1, -1, -1, -1, .name = "a.example", .qtype = 6, .want = -EBADMSG},
    {"qdcount 0", 0, 0, -1, -1, -1, .name = "a.example", .qtype = 1, .want = -EBADMSG},
    {"qdcount 2", 0, 2, -1, -1, -1, .name = "a.example", .qtype = 1, .want = -EBADMSG},
    {"ancount 1", 0, -1, 1, -1, -1, .name = "a.example", .qtype = 1, .want = -EBADMSG},
    {"nscount 1", 0, -1, -1, 1, -1, .name = "a.example", .qtype = 1, .want = -EBADMSG},
    {"arcount 2, two OPTs", 0, -1, -1, -1, 2, .name = "a.example", .qtype = 1, BYTES(OPT_4096 OPT_4096),
     .want = -EBADMSG},
    {"arcount 1 without a record", 0, -1, -1, -1, 1, .name = "a.example", .qtype = 1, .want = -EBADMSG},
    {"OPT with a non-root owner", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1,
     BYTES("\x01\x61\x00\x00\x29\x10\x00\x00\x00\x00\x00\x00\x00"), .want = -EBADMSG},
    {"OPT owner a pointer to the question", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1,
     BYTES("\xc0\x0c\x00\x29\x10\x00\x00\x00\x00\x00\x00\x00"), .want = -EBADMSG},
    {"additional A record", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1,
     BYTES("\x00\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x7f\x00\x00\x01"), .want = -EBADMSG},
    {"TSIG-like additional", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1,
     BYTES("\x00\x00\xfa\x00\xff\x00\x00\x00\x00\x00\x00"), .want = -EBADMSG},
    {"EDNS version 1", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1,
     BYTES("\x00\x00\x29\x10\x00\x00\x01\x00\x00\x00\x00"), .want = -EBADMSG},
    {"OPT truncated", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1, BYTES("\x00\x00\x29\x10\x00\x00"),
     .want = -EBADMSG},
    {"OPT rdata past the end", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1,
     BYTES("\x00\x00\x29\x10\x00\x00\x00\x00\x00\x00\x08\x00\x0a\x00\x04"), .want = -EBADMSG},
    {"EDNS option past its record", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1,
     BYTES("\x00\x00\x29\x10\x00\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x08\x01\x02\x03\x04\x05\x06\x07\x08"),
     .want = -EBADMSG},
    {"EDNS option header cut", 0, -1, -1, -1, -1, .name = "a.example", .qtype = 1,
     BYTES("\x00\x00\x29\x10\x00\x00\x00\x00\x00\x00\x03\x00\x0a\x00"), .want = -EBADMSG},
    {"trailing byte", 0, -1, -1, -1, 0, .name = "a.example", .qtype = 1, BYTES("\x00"), .want = -EBADMSG},
    {"trailing bytes after OPT", 0, -1, -1, -1, 1, .name = "a.example", .qtype = 1, BYTES(OPT_4096 "xyz"),
     .want = -EBADMSG},
    {"compression pointer", 0, -1, -1, -1, -1, WIRE("\x03www\xc0\x0c"), .qtype = 1, .want = -EBADMSG},
    {"compression pointer first", 0, -1, -1, -1, -1, WIRE("\xc0\x0c"), .qtype = 1, .want = -EBADMSG},
    {"extended label type 0x40", 0, -1, -1, -1, -1, WIRE("\x41\x00"), .qtype = 1, .want = -EBADMSG},
    {"label type 0x80", 0, -1, -1, -1, -1, WIRE("\x80\x00"), .qtype = 1, .want = -EBADMSG},
    {"name without its root", 0, -1, -1, -1, -1, WIRE("\x01\x61"), .no_type_class = true, .want = -EBADMSG},
    {"label past the end", 0, -1, -1, -1, -1, WIRE("\x05\x61\x62"), .no_type_class = true, .want = -EBADMSG},
    {"no type and class", 0, -1, -1, -1, -1, .name = "a.example", .no_type_class = true, .want = -EBADMSG},
    {"type without class", 0, -1, -1, -1, -1, .name = "a.example", .no_type_class = true, BYTES("\x00\x01"),
     .want = -EBADMSG},
    {"space in a label", 0, -1, -1, -1, -1, WIRE("\x03w w\x07\x65xample\x00"), .qtype = 1, .want = -EILSEQ},
    {"dot in a label", 0, -1, -1, -1, -1, WIRE("\x03w.w\x00"), .qtype = 1, .want = -EILSEQ},
    {"NUL in a label", 0, -1, -1, -1, -1, WIRE("\x03w\x00w\x00"), .qtype = 1, .want = -EILSEQ},
    {"UTF-8 in a label", 0, -1, -1, -1, -1, WIRE("\x02\xc3\xbc\x00"), .qtype = 1, .want = -EILSEQ},
    {"backslash in a label", 0, -1, -1, -1, -1, WIRE("\x02\x61\\\x00"), .qtype = 1, .want = -EILSEQ},
    {"asterisk in a label", 0, -1, -1, -1, -1, WIRE("\x01*\x07\x65xample\x00"), .qtype = 1, .want = -EILSEQ},
};

static void build_case(const struct parse_case *c, struct msg *m)
{
	m->n = 0;
	put_header(m, 0x1234, c->flags, c->qd >= 0 ? (unsigned)c->qd : 1, c->an >= 0 ? (unsigned)c->an : 0,
	           c->ns >= 0 ? (unsigned)c->ns : 0, c->ar >= 0 ? (unsigned)c->ar : (c->extra_len ? 1 : 0));
	if (c->wire)
		put(m, c->wire, c->wire_len);
	else
		put_name(m, c->name);
	if (!c->no_type_class) {
		put16(m, c->qtype);
		put16(m, EGRESS_DNS_CLASS_IN);
	}
	put(m, c->extra, c->extra_len);
}

static void test_parse_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(parse_cases); i++) {
		const struct parse_case *c = &parse_cases[i];
		struct msg m;
		build_case(c, &m);
		struct egress_dns_query q, before;
		memset(&q, 0xa5, sizeof(q));
		memcpy(&before, &q, sizeof(q));
		uint16_t id = 0;
		int r = parse(&m, &q, &id);
		if (r != c->want)
			fail_msg("case \"%s\": got %d, want %d", c->what, r, c->want);
		if (id != 0x1234)
			fail_msg("case \"%s\": id not set", c->what);
		if (r < 0) {
			if (memcmp(&q, &before, sizeof(q)) != 0)
				fail_msg("case \"%s\": query written on error", c->what);
			continue;
		}
		if (strcmp(q.name, c->want_name) != 0 || q.name_len != strlen(c->want_name))
			fail_msg("case \"%s\": name \"%s\"", c->what, q.name);
		assert_int_equal(q.id, 0x1234);
		assert_int_equal(q.rd, (c->flags & FLAG_RD) != 0);
		assert_int_equal(q.qtype, c->qtype);
		assert_int_equal(q.qclass, EGRESS_DNS_CLASS_IN);
		assert_int_equal(q.edns, c->want_edns);
		if (c->want_edns)
			assert_int_equal(q.edns_udp_max, c->want_udp_max);
		/* the question as sent: from offset 12 up to the end of its class */
		assert_int_equal(q.question_len, m.n - 12 - c->extra_len);
		assert_memory_equal(q.question, m.b + 12, q.question_len);
	}
}

/* ------------------------------------------------------------ parser: edges */

static void test_parse_header_too_short(void **state)
{
	(void)state;
	struct msg m;
	build_query(&m, 0xabcd, 0, "a.example", 1, false);
	struct egress_dns_query q;
	for (size_t len = 0; len < 12; len++) {
		uint16_t id = 7;
		assert_int_equal(egress_dns_parse_query(m.b, len, &q, &id, NULL), -EBADMSG);
		assert_int_equal(id, 7); /* not even the id could be read */
	}
	assert_int_equal(egress_dns_parse_query(NULL, 0, &q, NULL, NULL), -EBADMSG);
	/* From 12 bytes on the id is there, even though the rest is not. */
	uint16_t id = 0;
	assert_int_equal(egress_dns_parse_query(m.b, 12, &q, &id, NULL), -EBADMSG);
	assert_int_equal(id, 0xabcd);
}

static void test_parse_every_prefix(void **state)
{
	(void)state;
	struct msg m;
	build_query(&m, 1, FLAG_RD, "www.example.com", 1, true);
	struct egress_dns_query q;
	assert_int_equal(parse(&m, &q, NULL), 0);
	for (size_t len = 0; len < m.n; len++)
		if (egress_dns_parse_query(m.b, len, &q, NULL, NULL) != -EBADMSG)
			fail_msg("prefix of %zu bytes accepted", len);
	/* every single-byte change: a clean answer either way */
	for (size_t i = 0; i < m.n; i++)
		for (unsigned bit = 0; bit < 8; bit++) {
			struct msg t = m;
			t.b[i] ^= (uint8_t)(1u << bit);
			int r = egress_dns_parse_query(t.b, t.n, &q, NULL, NULL);
			if (r != 0 && r != -EBADMSG && r != -EILSEQ)
				fail_msg("byte %zu bit %u: %d", i, bit, r);
		}
}

static void test_parse_name_lengths(void **state)
{
	(void)state;
	char name[400], l63[64];
	memset(l63, 'a', 63);
	l63[63] = '\0';
	struct msg m;
	struct egress_dns_query q;

	/* 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 characters: the longest name */
	snprintf(name, sizeof(name), "%s.%s.%s.%.61s", l63, l63, l63, l63);
	assert_int_equal(strlen(name), 253);
	build_query(&m, 1, 0, name, 1, true);
	assert_int_equal(parse(&m, &q, NULL), 0);
	assert_int_equal(q.name_len, 253);
	assert_string_equal(q.name, name);
	assert_int_equal(q.question_len, 255 + 4);

	/* 254 characters (a 256-byte wire name) */
	snprintf(name, sizeof(name), "%s.%s.%s.%.62s", l63, l63, l63, l63);
	build_query(&m, 1, 0, name, 1, false);
	assert_int_equal(parse(&m, &q, NULL), -EBADMSG);
	/* and far longer: many short labels */
	for (int i = 0; i < 150; i++)
		memcpy(name + 2 * i, "b.", 2);
	name[299] = '\0';
	build_query(&m, 1, 0, name, 1, false);
	assert_int_equal(parse(&m, &q, NULL), -EBADMSG);
	/* 127 one-byte labels = 253 characters */
	name[253] = '\0';
	build_query(&m, 1, 0, name, 1, false);
	assert_int_equal(parse(&m, &q, NULL), 0);
	assert_int_equal(q.name_len, 253);

	/* a label of 63 bytes is fine, 64 is not (0x40 is an extended label type) */
	snprintf(name, sizeof(name), "%s.example", l63);
	build_query(&m, 1, 0, name, 1, false);
	assert_int_equal(parse(&m, &q, NULL), 0);
	m.n = 0;
	put_header(&m, 1, 0, 1, 0, 0, 0);
	put8(&m, 64);
	for (int i = 0; i < 64; i++)
		put8(&m, 'a');
	put8(&m, 0);
	put16(&m, 1);
	put16(&m, 1);
	assert_int_equal(parse(&m, &q, NULL), -EBADMSG);
}

/* Queries as c-ares writes them (what a real stub resolver sends). */
static void test_parse_cares_queries(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		int type, max_udp;
	} qs[] = {{"www.example.com", 1, 0}, {"www.example.com", 28, 1232}, {"_sip._tcp.example.org", 33, 4096}};
	for (size_t i = 0; i < ARRAY_SIZE(qs); i++) {
		unsigned char *buf;
		int len;
		assert_int_equal(ares_create_query(qs[i].name, 1, qs[i].type, 0x4242, 1, &buf, &len, qs[i].max_udp),
		                 ARES_SUCCESS);
		struct egress_dns_query q;
		struct al_error err = {0};
		int r = egress_dns_parse_query(buf, (size_t)len, &q, NULL, &err);
		ares_free_string(buf);
		if (r != 0)
			fail_msg("%s: %s", qs[i].name, err.message);
		assert_string_equal(q.name, qs[i].name);
		assert_int_equal(q.qtype, qs[i].type);
		assert_int_equal(q.id, 0x4242);
		assert_true(q.rd);
		assert_int_equal(q.edns, qs[i].max_udp != 0);
	}
}

/* ------------------------------------------------------------ builder */

struct rr {
	unsigned type, klass, rdlen;
	uint32_t ttl;
	const uint8_t *rdata;
};

static unsigned get16(const uint8_t *p)
{
	return (unsigned)(p[0] << 8 | p[1]);
}
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

/* Checks the header and question of a response to q and returns the
 * records after the question (owners must be the pointer to it, or root). */
static size_t check_response(const uint8_t *b, size_t len, const struct egress_dns_query *q, int rcode, bool tc,
                             struct rr *rrs, size_t max)
{
	assert_true(len >= 12 + q->question_len);
	assert_int_equal(get16(b), q->id);
	unsigned flags = get16(b + 2);
	assert_true(flags & 0x8000);              /* QR */
	assert_int_equal((flags >> 11) & 0xf, 0); /* opcode */
	assert_int_equal(!!(flags & 0x0100), q->rd);
	assert_true(flags & 0x0080); /* RA */
	assert_int_equal(!!(flags & 0x0200), tc);
	assert_int_equal(flags & 0xf, rcode);
	assert_int_equal(get16(b + 4), 1);
	assert_int_equal(get16(b + 8), 0);
	assert_memory_equal(b + 12, q->question, q->question_len);
	size_t n = get16(b + 6) + get16(b + 10), pos = 12 + q->question_len;
	assert_true(n <= max);
	for (size_t i = 0; i < n; i++) {
		if (b[pos] == 0) {
			pos += 1;
		} else {
			assert_int_equal(get16(b + pos), 0xc00c);
			pos += 2;
		}
		assert_true(pos + 10 <= len);
		rrs[i] = (struct rr){get16(b + pos), get16(b + pos + 2), get16(b + pos + 8), get32(b + pos + 4),
		                     b + pos + 10};
		pos += 10 + rrs[i].rdlen;
		assert_true(pos <= len);
	}
	assert_int_equal(pos, len);
	return n;
}

static struct policy_addr v4(const char *s)
{
	struct policy_addr a = {.family = AF_INET};
	assert_int_equal(inet_pton(AF_INET, s, &a.v4), 1);
	return a;
}
static struct policy_addr v6(const char *s)
{
	struct policy_addr a = {.family = AF_INET6};
	assert_int_equal(inet_pton(AF_INET6, s, &a.v6), 1);
	return a;
}

static void query_for(struct egress_dns_query *q, unsigned flags, const char *name, unsigned qtype, bool edns)
{
	struct msg m;
	build_query(&m, 0xbeef, flags, name, qtype, edns);
	assert_int_equal(parse(&m, q, NULL), 0);
}

static void test_build_answers(void **state)
{
	(void)state;
	struct policy_addr addrs[] = {v4("192.0.2.1"), v6("2001:db8::1"), v4("192.0.2.2"), v6("2001:db8::2")};
	uint8_t out[512];
	size_t len;
	struct rr rrs[8];
	struct egress_dns_query q;

	query_for(&q, FLAG_RD, "www.example.com", EGRESS_DNS_TYPE_A, false);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 4, 60, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, false, rrs, 8), 2);
	assert_int_equal(len, 12 + q.question_len + 2 * 16);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(rrs[i].type, EGRESS_DNS_TYPE_A);
		assert_int_equal(rrs[i].klass, EGRESS_DNS_CLASS_IN);
		assert_int_equal(rrs[i].ttl, 60);
		assert_int_equal(rrs[i].rdlen, 4);
	}
	assert_memory_equal(rrs[0].rdata, &addrs[0].v4, 4);
	assert_memory_equal(rrs[1].rdata, &addrs[2].v4, 4);

	query_for(&q, 0, "Www.Example.com", EGRESS_DNS_TYPE_AAAA, false);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 4, 300, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, false, rrs, 8), 2);
	assert_int_equal(rrs[0].type, EGRESS_DNS_TYPE_AAAA);
	assert_int_equal(rrs[0].rdlen, 16);
	assert_int_equal(rrs[0].ttl, 300);
	assert_memory_equal(rrs[0].rdata, &addrs[1].v6, 16);
	assert_memory_equal(rrs[1].rdata, &addrs[3].v6, 16);
	assert_memory_equal(out + 12 + 1, "Www", 3); /* the guest's spelling */

	/* only IPv6 addresses for an A question: NODATA */
	query_for(&q, FLAG_RD, "v6only.example", EGRESS_DNS_TYPE_A, false);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs + 1, 1, 60, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, false, rrs, 8), 0);
	/* other types get no answers */
	query_for(&q, FLAG_RD, "example.com", 16, false);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 4, 60, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, false, rrs, 8), 0);
	assert_int_equal(len, 12 + q.question_len);
}

static void test_build_rcodes(void **state)
{
	(void)state;
	struct policy_addr a = v4("192.0.2.1");
	uint8_t out[512];
	size_t len;
	struct rr rrs[4];
	struct egress_dns_query q;
	query_for(&q, FLAG_RD, "blocked.example", EGRESS_DNS_TYPE_A, false);
	const int rcodes[] = {EGRESS_DNS_RCODE_NXDOMAIN, EGRESS_DNS_RCODE_REFUSED, EGRESS_DNS_RCODE_SERVFAIL,
	                      EGRESS_DNS_RCODE_NOTIMP, EGRESS_DNS_RCODE_FORMERR};
	for (size_t i = 0; i < ARRAY_SIZE(rcodes); i++) {
		/* no answers with an error, even if the caller passes some */
		assert_int_equal(egress_dns_build_response(&q, rcodes[i], &a, 1, 60, out, sizeof(out), &len), 0);
		assert_int_equal(check_response(out, len, &q, rcodes[i], false, rrs, 4), 0);
	}
	/* an rcode that does not fit the header is never NOERROR */
	assert_int_equal(egress_dns_build_response(&q, 16, &a, 1, 60, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, EGRESS_DNS_RCODE_SERVFAIL, false, rrs, 4), 0);
	assert_int_equal(egress_dns_build_response(&q, -1, &a, 1, 60, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, EGRESS_DNS_RCODE_SERVFAIL, false, rrs, 4), 0);

	/* id and RD echoed */
	query_for(&q, 0, "x.example", EGRESS_DNS_TYPE_A, false);
	q.id = 0x0102;
	assert_int_equal(egress_dns_build_response(&q, 0, &a, 1, 5, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, false, rrs, 4), 1);
	assert_int_equal(out[0], 0x01);
	assert_int_equal(out[1], 0x02);
	assert_int_equal(out[2] & 0x01, 0);

	uint8_t hdr[12];
	egress_dns_build_error(0xfeed, EGRESS_DNS_RCODE_FORMERR, hdr);
	static const uint8_t want[12] = {0xfe, 0xed, 0x80, 0x81, 0, 0, 0, 0, 0, 0, 0, 0};
	assert_memory_equal(hdr, want, 12);
}

static void test_build_edns(void **state)
{
	(void)state;
	struct policy_addr addrs[] = {v6("2001:db8::1"), v6("2001:db8::2")};
	uint8_t out[EGRESS_DNS_UDP_MAX];
	size_t len;
	struct rr rrs[8];
	struct egress_dns_query q;
	query_for(&q, FLAG_RD, "example.net", EGRESS_DNS_TYPE_AAAA, true);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 2, 60, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, false, rrs, 8), 3);
	assert_int_equal(get16(out + 6), 2);
	assert_int_equal(get16(out + 10), 1);
	assert_int_equal(rrs[2].type, EGRESS_DNS_TYPE_OPT);
	assert_int_equal(rrs[2].klass, EGRESS_DNS_EDNS_UDP_SIZE);
	assert_int_equal(rrs[2].ttl, 0);
	assert_int_equal(rrs[2].rdlen, 0);
	assert_int_equal(out[len - 11], 0); /* root owner */
	/* with an error rcode too */
	assert_int_equal(egress_dns_build_response(&q, EGRESS_DNS_RCODE_REFUSED, NULL, 0, 0, out, sizeof(out), &len),
	                 0);
	assert_int_equal(check_response(out, len, &q, EGRESS_DNS_RCODE_REFUSED, false, rrs, 8), 1);
	assert_int_equal(rrs[0].type, EGRESS_DNS_TYPE_OPT);
}

static void test_build_truncation(void **state)
{
	(void)state;
	struct policy_addr addrs[64];
	for (size_t i = 0; i < ARRAY_SIZE(addrs); i++) {
		addrs[i] = v4("198.51.100.0");
		((uint8_t *)&addrs[i].v4)[3] = (uint8_t)i;
	}
	uint8_t out[EGRESS_DNS_UDP_MAX];
	size_t len;
	struct rr rrs[80];
	struct egress_dns_query q;

	query_for(&q, FLAG_RD, "many.example", EGRESS_DNS_TYPE_A, false);
	size_t head = 12 + q.question_len, fit = (512 - head) / 16;
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 64, 60, out, 512, &len), 0);
	assert_true(len <= 512);
	assert_int_equal(check_response(out, len, &q, 0, true, rrs, 80), fit);
	for (size_t i = 0; i < fit; i++)
		assert_int_equal(rrs[i].rdata[3], i); /* in order, the first ones */
	/* all of them fit in a larger buffer: no TC */
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 64, 60, out, sizeof(out), &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, false, rrs, 80), 64);
	/* exactly fitting */
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 3, 60, out, head + 3 * 16, &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, false, rrs, 80), 3);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 3, 60, out, head + 3 * 16 - 1, &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, true, rrs, 80), 2);

	/* with EDNS the OPT record keeps its room */
	query_for(&q, FLAG_RD, "many.example", EGRESS_DNS_TYPE_A, true);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 64, 60, out, 512, &len), 0);
	assert_true(len <= 512);
	size_t n = check_response(out, len, &q, 0, true, rrs, 80);
	assert_int_equal(n, (512 - head - 11) / 16 + 1);
	assert_int_equal(rrs[n - 1].type, EGRESS_DNS_TYPE_OPT);
	/* no room for OPT at all: left out, TC set */
	assert_int_equal(egress_dns_build_response(&q, 0, NULL, 0, 60, out, head + 10, &len), 0);
	assert_int_equal(check_response(out, len, &q, 0, true, rrs, 80), 0);

	/* not even the question */
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 1, 60, out, head - 1, &len), -ENOBUFS);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 1, 60, out, 12, &len), -ENOBUFS);
	assert_int_equal(egress_dns_build_response(&q, 0, addrs, 1, 60, out, 0, &len), -ENOBUFS);
	assert_int_equal(egress_dns_build_response(&q, 0, NULL, 0, 60, out, head, &len), 0);
	assert_int_equal(len, head);
}

/* ------------------------------------------------------------ fake DNS server */

struct fake_dns {
	int udp, tcp;
	int stop[2];
	struct sockaddr_in addr;
	pthread_t thread;
	bool silent;                   /* reads nothing, answers nothing */
	unsigned queries, tcp_queries; /* __atomic */
	char last_name[EGRESS_DNS_NAME_MAX + 1];
};

static void rr_header(struct msg *m, const char *owner, unsigned type, uint32_t ttl, unsigned rdlen)
{
	if (owner)
		put_name(m, owner);
	else
		put16(m, 0xc00c);
	put16(m, type);
	put16(m, EGRESS_DNS_CLASS_IN);
	put32(m, ttl);
	put16(m, rdlen);
}
static void rr_a(struct msg *m, const char *owner, const char *addr, uint32_t ttl)
{
	struct in_addr a;
	assert_int_equal(inet_pton(AF_INET, addr, &a), 1);
	rr_header(m, owner, EGRESS_DNS_TYPE_A, ttl, 4);
	put(m, &a, 4);
}
static void rr_aaaa(struct msg *m, const char *owner, const char *addr, uint32_t ttl)
{
	struct in6_addr a;
	assert_int_equal(inet_pton(AF_INET6, addr, &a), 1);
	rr_header(m, owner, EGRESS_DNS_TYPE_AAAA, ttl, 16);
	put(m, &a, 16);
}

/* The canned answers, by name. Returns false to drop the query. */
static bool fake_answer(const struct egress_dns_query *q, bool tcp, struct msg *m)
{
	const char *n = q->name;
	bool a = q->qtype == EGRESS_DNS_TYPE_A, aaaa = q->qtype == EGRESS_DNS_TYPE_AAAA;
	unsigned rcode = 0, an = 0, flags = 0x8180;
	struct msg body = {.n = 0};

	if (strcasecmp(n, "drop.test") == 0)
		return false;
	if (strcasecmp(n, "a.test") == 0 && a) {
		rr_a(&body, NULL, "192.0.2.1", 120);
		an = 1;
	} else if (strcasecmp(n, "both.test") == 0) {
		if (a)
			rr_a(&body, NULL, "192.0.2.10", 100);
		if (aaaa)
			rr_aaaa(&body, NULL, "2001:db8::10", 50);
		an = a || aaaa;
	} else if (strcasecmp(n, "v6.test") == 0 && aaaa) {
		rr_aaaa(&body, NULL, "2001:db8::6", 60);
		an = 1;
	} else if (strcasecmp(n, "cname.test") == 0) {
		/* CNAME cname.test -> mid.test -> target.test, then the address */
		rr_header(&body, NULL, EGRESS_DNS_TYPE_CNAME, 30, 10);
		put_name(&body, "mid.test");
		rr_header(&body, "mid.test", EGRESS_DNS_TYPE_CNAME, 90, 13);
		put_name(&body, "target.test");
		an = 2;
		if (a) {
			rr_a(&body, "target.test", "198.51.100.7", 200);
			an++;
		}
	} else if (strcasecmp(n, "half.test") == 0) {
		if (a) {
			rr_a(&body, NULL, "192.0.2.40", 60);
			an = 1;
		} else {
			rcode = EGRESS_DNS_RCODE_SERVFAIL;
		}
	} else if (strcasecmp(n, "v6fail.test") == 0) {
		if (!a)
			rcode = EGRESS_DNS_RCODE_SERVFAIL;
	} else if (strcasecmp(n, "nx.test") == 0) {
		rcode = EGRESS_DNS_RCODE_NXDOMAIN;
	} else if (strcasecmp(n, "fail.test") == 0) {
		rcode = EGRESS_DNS_RCODE_SERVFAIL;
	} else if (strcasecmp(n, "refused.test") == 0) {
		rcode = EGRESS_DNS_RCODE_REFUSED;
	} else if (strcasecmp(n, "long.test") == 0 && a) {
		rr_a(&body, NULL, "192.0.2.20", 86400);
		an = 1;
	} else if (strcasecmp(n, "zero.test") == 0 && a) {
		rr_a(&body, NULL, "192.0.2.21", 0);
		an = 1;
	} else if (strcasecmp(n, "many.test") == 0 && a) {
		for (an = 0; an < 20; an++) {
			char addr[32];
			snprintf(addr, sizeof(addr), "10.0.0.%u", an + 1);
			rr_a(&body, NULL, addr, 60);
		}
	} else if (strcasecmp(n, "other.test") == 0 && a) {
		rr_a(&body, "evil.test", "203.0.113.66", 60); /* not the asked name */
		an = 1;
	} else if (strcasecmp(n, "mixed.test") == 0 && a) {
		rr_aaaa(&body, NULL, "2001:db8::66", 60); /* not the asked type */
		rr_a(&body, NULL, "192.0.2.30", 60);
		an = 2;
	} else if (strcasecmp(n, "garbage.test") == 0) {
		put16(&body, 0xc00c);
		put16(&body, 1); /* and nothing more */
		an = 1;
	} else if (strcasecmp(n, "tc.test") == 0 && a) {
		if (tcp) {
			rr_a(&body, NULL, "192.0.2.99", 60);
			an = 1;
		} else {
			flags |= 0x0200;
		}
	} else if (strncmp(n, "n-", 2) == 0 && a) {
		rr_a(&body, NULL, "203.0.113.1", 60);
		an = 1;
	}
	m->n = 0;
	put_header(m, q->id, flags | rcode, 1, an, 0, 0);
	put(m, q->question, q->question_len);
	put(m, body.b, body.n);
	return true;
}

static bool fake_parse(struct fake_dns *s, const uint8_t *buf, size_t len, struct egress_dns_query *q)
{
	if (egress_dns_parse_query(buf, len, q, NULL, NULL) < 0)
		return false;
	__atomic_fetch_add(&s->queries, 1, __ATOMIC_SEQ_CST);
	strlcpy_al(s->last_name, q->name, sizeof(s->last_name));
	return true;
}

static void fake_tcp(struct fake_dns *s)
{
	cleanup_close int fd = accept4(s->tcp, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	struct timeval tv = {.tv_sec = 2};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	uint8_t lenb[2], buf[EGRESS_DNS_TCP_MAX];
	if (read_full(fd, lenb, 2) != 2)
		return;
	size_t len = (size_t)(lenb[0] << 8 | lenb[1]);
	if (len > sizeof(buf) || read_full(fd, buf, len) != (ssize_t)len)
		return;
	struct egress_dns_query q;
	struct msg m;
	if (!fake_parse(s, buf, len, &q))
		return;
	__atomic_fetch_add(&s->tcp_queries, 1, __ATOMIC_SEQ_CST);
	if (!fake_answer(&q, true, &m))
		return;
	uint8_t out[2 + sizeof(m.b)];
	out[0] = (uint8_t)(m.n >> 8);
	out[1] = (uint8_t)m.n;
	memcpy(out + 2, m.b, m.n);
	(void)write_full(fd, out, m.n + 2);
}

static void *fake_run(void *arg)
{
	struct fake_dns *s = arg;
	for (;;) {
		struct pollfd p[3] = {{.fd = s->stop[0], .events = POLLIN},
		                      {.fd = s->silent ? -1 : s->udp, .events = POLLIN},
		                      {.fd = s->silent ? -1 : s->tcp, .events = POLLIN}};
		if (poll(p, 3, -1) < 0)
			continue;
		if (p[0].revents)
			return NULL;
		if (p[2].revents)
			fake_tcp(s);
		if (!p[1].revents)
			continue;
		uint8_t buf[EGRESS_DNS_UDP_MAX];
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(s->udp, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
		struct egress_dns_query q;
		struct msg m;
		if (n > 0 && fake_parse(s, buf, (size_t)n, &q) && fake_answer(&q, false, &m))
			sendto(s->udp, m.b, m.n, 0, (struct sockaddr *)&from, fl);
	}
}

static struct fake_dns *fake_start(bool silent)
{
	struct fake_dns *s = xcalloc(1, sizeof(*s));
	s->silent = silent;
	for (int attempt = 0;; attempt++) {
		assert_true(attempt < 20);
		s->udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		s->tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(s->udp >= 0 && s->tcp >= 0);
		s->addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		assert_int_equal(bind(s->udp, (struct sockaddr *)&s->addr, sizeof(s->addr)), 0);
		socklen_t l = sizeof(s->addr);
		assert_int_equal(getsockname(s->udp, (struct sockaddr *)&s->addr, &l), 0);
		int one = 1;
		setsockopt(s->tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s->tcp, (struct sockaddr *)&s->addr, sizeof(s->addr)) == 0 && listen(s->tcp, 16) == 0)
			break;
		close(s->udp);
		close(s->tcp);
	}
	assert_int_equal(pipe2(s->stop, O_CLOEXEC), 0);
	assert_int_equal(pthread_create(&s->thread, NULL, fake_run, s), 0);
	return s;
}

static void fake_stop(struct fake_dns *s)
{
	assert_int_equal(write(s->stop[1], "x", 1), 1);
	pthread_join(s->thread, NULL);
	close(s->udp);
	close(s->tcp);
	close(s->stop[0]);
	close(s->stop[1]);
	free(s);
}

static unsigned fake_queries(struct fake_dns *s)
{
	return __atomic_load_n(&s->queries, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------ resolver */

static struct fake_dns *server, *silent;

static int setup_servers(void **state)
{
	(void)state;
	server = fake_start(false);
	silent = fake_start(true);
	return 0;
}

static int teardown_servers(void **state)
{
	(void)state;
	fake_stop(server);
	fake_stop(silent);
	return 0;
}

static struct egress_resolver *resolver_for(struct fake_dns *s, unsigned timeout_ms)
{
	struct egress_resolver *r = NULL;
	struct al_error err = {0};
	int rc = egress_resolver_new((struct sockaddr *)&s->addr, sizeof(s->addr), timeout_ms, &r, &err);
	if (rc != 0)
		fail_msg("egress_resolver_new: %s", err.message);
	return r;
}

struct result {
	int r;
	size_t n;
	uint32_t ttl;
	struct policy_addr addrs[40];
	struct al_error err;
};

static struct result resolve(struct egress_resolver *r, const char *name, int family, size_t max)
{
	struct result res = {.n = 999, .ttl = 999};
	assert_true(max <= ARRAY_SIZE(res.addrs));
	res.r = egress_resolve(r, name, family, res.addrs, max, &res.n, &res.ttl, &res.err);
	if (res.r < 0) {
		if (res.err.message[0] == '\0')
			fail_msg("%s: error %d without a message", name, res.r);
		if (res.n != 999 || res.ttl != 999)
			fail_msg("%s: outputs written on error", name);
	} else if (res.n == 0 || res.n > max) {
		fail_msg("%s: %zu addresses", name, res.n);
	}
	return res;
}

static void assert_addr(const struct policy_addr *a, const char *text)
{
	char buf[INET6_ADDRSTRLEN];
	inet_ntop(a->family, a->family == AF_INET ? (const void *)&a->v4 : (const void *)&a->v6, buf, sizeof(buf));
	if (strcmp(buf, text) != 0)
		fail_msg("address %s, want %s", buf, text);
}

static void assert_message_has(const struct result *res, const char *what)
{
	if (!strstr(res->err.message, what))
		fail_msg("message \"%s\" does not say \"%s\"", res->err.message, what);
}

static void stats(struct egress_resolver *r, uint64_t *up, uint64_t *hits)
{
	egress_resolver_stats(r, up, hits);
}

static void test_resolve_a_and_cache(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	unsigned before = fake_queries(server);
	struct result res = resolve(r, "a.test", AF_INET, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, 1);
	assert_addr(&res.addrs[0], "192.0.2.1");
	assert_int_equal(res.ttl, 120);
	assert_int_equal(fake_queries(server), before + 1);
	assert_string_equal(server->last_name, "a.test");
	uint64_t up, hits;
	stats(r, &up, &hits);
	assert_int_equal(up, 1);
	assert_int_equal(hits, 0);

	/* again: from the cache, nothing sent */
	res = resolve(r, "a.test", AF_INET, 8);
	assert_int_equal(res.r, 0);
	assert_addr(&res.addrs[0], "192.0.2.1");
	assert_true(res.ttl >= 119 && res.ttl <= 120);
	stats(r, &up, &hits);
	assert_int_equal(up, 1);
	assert_int_equal(hits, 1);
	assert_int_equal(fake_queries(server), before + 1);

	/* AAAA of the same name is another entry: NODATA, then cached too */
	res = resolve(r, "a.test", AF_INET6, 8);
	assert_int_equal(res.r, -ENOENT);
	assert_int_equal(res.err.code, AL_ERR_NOT_FOUND);
	res = resolve(r, "a.test", AF_INET6, 8);
	assert_int_equal(res.r, -ENOENT);
	/* AF_UNSPEC: both from the cache */
	res = resolve(r, "a.test", AF_UNSPEC, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, 1);
	stats(r, &up, &hits);
	assert_int_equal(up, 2);
	assert_int_equal(hits, 4);
	assert_int_equal(fake_queries(server), before + 2);
	egress_resolver_free(r);
}

static void test_resolve_cname(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	struct result res = resolve(r, "cname.test", AF_INET, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, 1);
	assert_addr(&res.addrs[0], "198.51.100.7");
	assert_int_equal(res.ttl, 30); /* the smallest TTL along the chain */
	/* a chain that ends without an address */
	res = resolve(r, "cname.test", AF_INET6, 8);
	assert_int_equal(res.r, -ENOENT);
	egress_resolver_free(r);
}

static void test_resolve_unspec(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	struct result res = resolve(r, "both.test", AF_UNSPEC, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, 2);
	assert_addr(&res.addrs[0], "192.0.2.10"); /* A first */
	assert_addr(&res.addrs[1], "2001:db8::10");
	assert_int_equal(res.ttl, 50);
	/* max 1: only the A address, and its TTL */
	struct egress_resolver *r2 = resolver_for(server, 2000);
	res = resolve(r2, "both.test", AF_UNSPEC, 1);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, 1);
	assert_addr(&res.addrs[0], "192.0.2.10");
	assert_int_equal(res.ttl, 100);
	egress_resolver_free(r2);

	res = resolve(r, "v6.test", AF_UNSPEC, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, 1);
	assert_addr(&res.addrs[0], "2001:db8::6");
	res = resolve(r, "v6.test", AF_INET, 8);
	assert_int_equal(res.r, -ENOENT);
	res = resolve(r, "nx.test", AF_UNSPEC, 8);
	assert_int_equal(res.r, -ENOENT);
	/* A answered, AAAA failed: the addresses win */
	res = resolve(r, "half.test", AF_UNSPEC, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, 1);
	assert_addr(&res.addrs[0], "192.0.2.40");
	/* no A, AAAA failed: a failure, not "no such address" */
	res = resolve(r, "v6fail.test", AF_UNSPEC, 8);
	assert_int_equal(res.r, -EIO);
	egress_resolver_free(r);
}

static void test_resolve_nxdomain(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	unsigned before = fake_queries(server);
	struct result res = resolve(r, "nx.test", AF_INET, 8);
	assert_int_equal(res.r, -ENOENT);
	assert_int_equal(res.err.code, AL_ERR_NOT_FOUND);
	assert_message_has(&res, "NXDOMAIN");
	assert_message_has(&res, "nx.test");
	/* negative entries are cached */
	res = resolve(r, "nx.test", AF_INET, 8);
	assert_int_equal(res.r, -ENOENT);
	assert_int_equal(fake_queries(server), before + 1);
	uint64_t hits;
	stats(r, NULL, &hits);
	assert_int_equal(hits, 1);
	egress_resolver_free(r);
}

static void test_resolve_servfail(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	unsigned before = fake_queries(server);
	struct result res = resolve(r, "fail.test", AF_INET, 8);
	assert_int_equal(res.r, -EIO);
	assert_int_equal(res.err.code, AL_ERR_UNAVAILABLE);
	assert_message_has(&res, "SERVFAIL");
	assert_int_equal(fake_queries(server), before + 1);
	/* failures are not cached */
	res = resolve(r, "fail.test", AF_INET, 8);
	assert_int_equal(res.r, -EIO);
	assert_int_equal(fake_queries(server), before + 2);
	uint64_t up, hits;
	stats(r, &up, &hits);
	assert_int_equal(up, 2);
	assert_int_equal(hits, 0);

	res = resolve(r, "refused.test", AF_INET, 8);
	assert_int_equal(res.r, -EIO);
	assert_message_has(&res, "REFUSED");
	res = resolve(r, "garbage.test", AF_INET, 8);
	assert_int_equal(res.r, -EIO);
	egress_resolver_free(r);
}

static void test_resolve_timeout(void **state)
{
	(void)state;
	const unsigned timeout_ms = 300;
	struct egress_resolver *r = resolver_for(silent, timeout_ms);
	const int families[] = {AF_INET, AF_UNSPEC};
	for (size_t i = 0; i < ARRAY_SIZE(families); i++) {
		uint64_t t0 = now_ms_monotonic();
		struct result res = resolve(r, "a.test", families[i], 8);
		uint64_t took = now_ms_monotonic() - t0;
		assert_int_equal(res.r, -ETIMEDOUT);
		assert_int_equal(res.err.code, AL_ERR_TIMEOUT);
		if (took < timeout_ms / 2 || took > timeout_ms + 250)
			fail_msg("timed out after %llu ms (timeout %u ms)", (unsigned long long)took, timeout_ms);
	}
	egress_resolver_free(r);

	/* a server that answers other queries but drops this one */
	r = resolver_for(server, timeout_ms);
	uint64_t t0 = now_ms_monotonic();
	struct result res = resolve(r, "drop.test", AF_INET, 8);
	assert_int_equal(res.r, -ETIMEDOUT);
	assert_true(now_ms_monotonic() - t0 <= timeout_ms + 250);
	/* Issue 17: a timeout is remembered (EGRESS_DNS_TTL_TIMEOUT): asked
	 * again, the name is not sent upstream and costs no wait. */
	unsigned before = fake_queries(server);
	uint64_t hits_before;
	stats(r, NULL, &hits_before);
	res = resolve(r, "drop.test", AF_INET, 8);
	assert_int_equal(res.r, -ETIMEDOUT);
	assert_int_equal(fake_queries(server), before);
	uint64_t hits;
	stats(r, NULL, &hits);
	assert_int_equal(hits, hits_before + 1);
	egress_resolver_free(r);
}

/* Nobody on the port: ICMP port unreachable, an error well before the timeout. */
static void test_resolve_refused_port(void **state)
{
	(void)state;
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(sin);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &l), 0);
	close(fd);
	struct egress_resolver *r = NULL;
	struct al_error err = {0};
	assert_int_equal(egress_resolver_new((struct sockaddr *)&sin, sizeof(sin), 3000, &r, &err), 0);
	uint64_t t0 = now_ms_monotonic();
	struct result res = resolve(r, "a.test", AF_UNSPEC, 8);
	assert_int_equal(res.r, -EIO);
	assert_true(now_ms_monotonic() - t0 < 1500);
	egress_resolver_free(r);
}

static void test_resolve_ttl_clamp(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	struct result res = resolve(r, "long.test", AF_INET, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.ttl, EGRESS_DNS_TTL_MAX);
	res = resolve(r, "long.test", AF_INET, 8);
	assert_true(res.ttl <= EGRESS_DNS_TTL_MAX && res.ttl >= EGRESS_DNS_TTL_MAX - 1);
	res = resolve(r, "zero.test", AF_INET, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.ttl, EGRESS_DNS_TTL_MIN);
	/* TTL 0 is cached for the minimum, 1 s */
	uint64_t up0, up1;
	stats(r, &up0, NULL);
	res = resolve(r, "zero.test", AF_INET, 8);
	assert_int_equal(res.ttl, EGRESS_DNS_TTL_MIN);
	stats(r, &up1, NULL);
	assert_int_equal(up1, up0);
	egress_resolver_free(r);
}

static void test_resolve_limits_and_foreign_records(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	struct result res = resolve(r, "many.test", AF_INET, 40);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, EGRESS_DNS_ADDRS_MAX);
	assert_addr(&res.addrs[0], "10.0.0.1");
	res = resolve(r, "many.test", AF_INET, 3);
	assert_int_equal(res.n, 3);
	/* a record for another name is not taken */
	res = resolve(r, "other.test", AF_INET, 8);
	assert_int_equal(res.r, -ENOENT);
	/* nor one of another type */
	res = resolve(r, "mixed.test", AF_INET, 8);
	assert_int_equal(res.r, 0);
	assert_int_equal(res.n, 1);
	assert_addr(&res.addrs[0], "192.0.2.30");
	egress_resolver_free(r);
}

static void test_resolve_tcp_fallback(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	unsigned before = __atomic_load_n(&server->tcp_queries, __ATOMIC_SEQ_CST);
	struct result res = resolve(r, "tc.test", AF_INET, 8);
	if (res.r != 0)
		fail_msg("tc.test: %s", res.err.message);
	assert_addr(&res.addrs[0], "192.0.2.99");
	assert_int_equal(__atomic_load_n(&server->tcp_queries, __ATOMIC_SEQ_CST), before + 1);
	egress_resolver_free(r);
}

static void test_resolve_bad_names(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	char l64[80], long_name[300];
	memset(l64, 'a', 64);
	memcpy(l64 + 64, ".test", 6);
	memset(long_name, 'b', sizeof(long_name));
	for (size_t i = 63; i < 254; i += 64)
		long_name[i] = '.';
	long_name[254] = '\0';
	const char *bad[] = {"",        ".",       "A.test",   "a..test",  ".a.test",        "a.test.", "-a.test",
	                     "a-.test", "a.-test", "a_b.test", "a b.test", "a\\.test",       "1.2.3.4", "test.123",
	                     "a.0x1f",  "a.0x",    "*.test",   "a.test\n", "b\xc3\xbc.test", l64,       long_name};
	unsigned before = fake_queries(server);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct result res = resolve(r, bad[i], AF_INET, 8);
		if (res.r != -EINVAL)
			fail_msg("name %zu \"%s\": %d", i, bad[i], res.r);
		assert_int_equal(res.err.code, AL_ERR_INVALID_ARGUMENT);
	}
	struct result res = resolve(r, "a.test", AF_PACKET, 8);
	assert_int_equal(res.r, -EINVAL);
	res = resolve(r, "a.test", AF_INET, 0);
	assert_int_equal(res.r, -EINVAL);
	assert_int_equal(fake_queries(server), before);
	/* fine: digits and hyphens inside, a 253-character name, an IDN A-label */
	long_name[253] = '\0';
	const char *good[] = {"n-1.test", "n-0a.xn--bcher-kva.example", "n-1.2.3.a4", long_name + 0};
	long_name[0] = 'n';
	long_name[1] = '-';
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		res = resolve(r, good[i], AF_INET, 8);
		if (res.r != 0)
			fail_msg("name \"%s\": %s", good[i], res.err.message);
	}
	egress_resolver_free(r);

	/* bad servers and timeouts */
	struct egress_resolver *x = NULL;
	struct al_error err = {0};
	struct sockaddr_in sin = server->addr;
	assert_int_equal(egress_resolver_new((struct sockaddr *)&sin, sizeof(sin), 0, &x, &err), -EINVAL);
	assert_int_equal(egress_resolver_new((struct sockaddr *)&sin, sizeof(sin) - 1, 100, &x, &err), -EINVAL);
	sin.sin_port = 0;
	assert_int_equal(egress_resolver_new((struct sockaddr *)&sin, sizeof(sin), 100, &x, &err), -EINVAL);
	struct sockaddr_in6 sin6 = {
	    .sin6_family = AF_INET6, .sin6_port = htons(53), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	assert_int_equal(egress_resolver_new((struct sockaddr *)&sin6, sizeof(sin6), 100, &x, &err), 0);
	egress_resolver_free(x);
	sin6.sin6_scope_id = 2;
	x = NULL;
	assert_int_equal(egress_resolver_new((struct sockaddr *)&sin6, sizeof(sin6), 100, &x, &err), -EINVAL);
	assert_null(x);
}

static void test_resolve_cache_eviction(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	char name[64];
	for (unsigned i = 0; i < EGRESS_DNS_CACHE_MAX + 4; i++) {
		snprintf(name, sizeof(name), "n-%u.test", i);
		struct result res = resolve(r, name, AF_INET, 1);
		assert_int_equal(res.r, 0);
	}
	uint64_t up, hits;
	stats(r, &up, &hits);
	assert_int_equal(up, EGRESS_DNS_CACHE_MAX + 4);
	assert_int_equal(hits, 0);
	/* the newest are there, the oldest went */
	struct result res = resolve(r, "n-4099.test", AF_INET, 1);
	assert_int_equal(res.r, 0);
	res = resolve(r, "n-5.test", AF_INET, 1);
	stats(r, &up, &hits);
	assert_int_equal(hits, 2);
	res = resolve(r, "n-0.test", AF_INET, 1);
	assert_int_equal(res.r, 0);
	stats(r, &up, &hits);
	assert_int_equal(up, EGRESS_DNS_CACHE_MAX + 5);
	assert_int_equal(hits, 2);
	egress_resolver_free(r);
}

struct worker {
	struct egress_resolver *r;
	unsigned id;
	unsigned failures;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	static const char *names[] = {"a.test", "both.test", "cname.test", "v6.test", "nx.test"};
	for (unsigned i = 0; i < 40; i++) {
		char own[64];
		snprintf(own, sizeof(own), "n-w%u-%u.test", w->id, i % 10);
		const char *name = i % 2 ? names[(i / 2) % ARRAY_SIZE(names)] : own;
		struct policy_addr out[8];
		size_t n;
		uint32_t ttl;
		struct al_error err;
		int r = egress_resolve(w->r, name, AF_UNSPEC, out, 8, &n, &ttl, &err);
		bool want_ok = strcmp(name, "nx.test") != 0;
		if ((r == 0) != want_ok)
			w->failures++;
	}
	return NULL;
}

static void test_resolve_concurrent(void **state)
{
	(void)state;
	struct egress_resolver *r = resolver_for(server, 2000);
	struct worker w[8];
	pthread_t t[8];
	for (unsigned i = 0; i < 8; i++) {
		w[i] = (struct worker){.r = r, .id = i};
		assert_int_equal(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
	}
	for (unsigned i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].failures, 0);
	}
	uint64_t up, hits;
	stats(r, &up, &hits);
	assert_int_equal(up + hits, 8 * 40 * 2);
	assert_true(hits > 0);
	egress_resolver_free(r);
}

int main(void)
{
	const struct CMUnitTest codec[] = {
	    cmocka_unit_test(test_parse_table),         cmocka_unit_test(test_parse_header_too_short),
	    cmocka_unit_test(test_parse_every_prefix),  cmocka_unit_test(test_parse_name_lengths),
	    cmocka_unit_test(test_parse_cares_queries), cmocka_unit_test(test_build_answers),
	    cmocka_unit_test(test_build_rcodes),        cmocka_unit_test(test_build_edns),
	    cmocka_unit_test(test_build_truncation),
	};
	const struct CMUnitTest resolver[] = {
	    cmocka_unit_test(test_resolve_a_and_cache),
	    cmocka_unit_test(test_resolve_cname),
	    cmocka_unit_test(test_resolve_unspec),
	    cmocka_unit_test(test_resolve_nxdomain),
	    cmocka_unit_test(test_resolve_servfail),
	    cmocka_unit_test(test_resolve_timeout),
	    cmocka_unit_test(test_resolve_refused_port),
	    cmocka_unit_test(test_resolve_ttl_clamp),
	    cmocka_unit_test(test_resolve_limits_and_foreign_records),
	    cmocka_unit_test(test_resolve_tcp_fallback),
	    cmocka_unit_test(test_resolve_bad_names),
	    cmocka_unit_test(test_resolve_cache_eviction),
	    cmocka_unit_test(test_resolve_concurrent),
	};
	int failed = cmocka_run_group_tests_name("egress-dns codec", codec, NULL, NULL);
	failed += cmocka_run_group_tests_name("egress-dns resolver", resolver, setup_servers, teardown_servers);
	return failed;
}
